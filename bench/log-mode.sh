#!/usr/bin/env bash
# Log mode against tx mode in one session: WAL bytes per event (the producer's INSERT, and the
# relay's own writes), and the drain rate to the null sink, for N events written by N/1000
# producer transactions of 1000 rows each. Nothing else may write to the server meanwhile.
# usage: bench/log-mode.sh [N=200000] [ROUNDS=2]     OUTBOXCTL_BIN: the binary (default: release)
# With PGMQ=1 each round also runs pgmq's drain of N (../shared/peers, set up once with its
# setup.sh), as bench/compare.sh does.
set -uo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
n=${1:-200000}; rounds=${2:-2}
bin=${OUTBOXCTL_BIN:-target/release/outboxctl}
[ -n "${OUTBOXCTL_BIN:-}" ] || cargo build --release --quiet
lsn() { q -c "SELECT pg_current_wal_lsn()"; }
wal_since() { q -c "SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '$1')"; }
uptime
for r in $(seq "$rounds"); do
  for mode in tx log; do
    s=bench_log_$mode
    bench_fresh "$bin" "$s"
    q -c "ALTER TABLE $s.outbox SET (autovacuum_enabled = off)" >/dev/null
    [ "$mode" = log ] && "$bin" log enable --schema "$s" >/dev/null 2>&1
    args=()
    for t in $(seq 0 $((n / 1000 - 1))); do
      args+=(-c "INSERT INTO $s.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
                 SELECT gen_random_uuid(), 'order', 'o-' || (g % 1000), 'order.placed',
                        jsonb_build_object('n', g, 'total', 1200, 'currency', 'USD'), 'k-' || g
                   FROM generate_series($((t * 1000 + 1)), $((t * 1000 + 1000))) g")
    done
    a=$(lsn); q "${args[@]}" >/dev/null; insert_wal=$(wal_since "$a")
    q -c "VACUUM ANALYZE $s.outbox" -c "CHECKPOINT" >/dev/null
    a=$(lsn)
    summary=$("$bin" relay --once --schema "$s" --sink null --batch-size 1000 --json 2>/dev/null)
    relay_wal=$(wal_since "$a")
    python3 - "$mode" "$n" "$insert_wal" "$relay_wal" "$summary" <<'PY'
import json, sys
mode, n, ins, rel, summary = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), json.loads(sys.argv[5])
rate = summary["published"] / (summary["elapsed_ms"] / 1000)
print(f"RESULT mode={mode} events={summary['published']} insert_wal_per_event={ins / n:.0f} "
      f"relay_wal_per_event={rel / n:.1f} drain_events_per_s={rate:.0f} elapsed_ms={summary['elapsed_ms']}")
PY
    q -c "DROP SCHEMA $s CASCADE" >/dev/null 2>&1
  done
  if [ "${PGMQ:-0}" = 1 ]; then
    echo "RESULT pgmq: $("${PEERS_DIR:-../shared/peers}/run.sh" pgmq "$n" 2>&1 | grep -E 'RESULT|events_per_s' | tail -n1)"
  fi
done
