#!/usr/bin/env bash
# Where a broker sink's drain time goes: one relay daemon drains N events with --metrics-addr
# on 127.0.0.1:18760, and the sums of its histograms split the wall time into the sink's publish
# (outboxctl_publish_duration_seconds) and the rest of the steps, the database claim and settle
# (outboxctl_batch_duration_seconds minus the publish).
#   bench/experiments/sink-profile.sh [N=50000] [MODE=lease] SINK-SPEC [RELAY-ARGS...]
# Binary: OUTBOXCTL_BIN, else ${CARGO_TARGET_DIR:-target}/release/outboxctl (not built here).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
N=${1:-50000}
MODE=${2:-lease}
SPEC=$3
shift 3
BIN=${OUTBOXCTL_BIN:-${CARGO_TARGET_DIR:-target}/release/outboxctl}
S=bench_sinkprofile
relay=
cleanup() {
  [ -n "$relay" ] && kill "$relay" 2>/dev/null || true
  q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true
}
trap cleanup EXIT
bench_fresh "$BIN" $S
bench_seed "$S" "$N"
s=$(bench_now)
$BIN relay --schema $S --mode "$MODE" --batch-size 1000 --poll-interval 50ms \
  --metrics-addr 127.0.0.1:18760 --sink "$SPEC" "$@" 2>/dev/null >/dev/null &
relay=$!
until [ "$(q -c "SELECT count(*) FROM $S.outbox WHERE published_at IS NOT NULL")" -ge "$N" ]; do sleep 0.02; done
e=$(bench_now)
metrics=$(curl -fsS http://127.0.0.1:18760/metrics)
kill "$relay"; wait "$relay" 2>/dev/null || true; relay=
sum() { echo "$metrics" | awk -v m="$1" 'index($1, m "{") == 1 || $1 == m { print $2 }'; }
python3 - "$N" "$s" "$e" "$(sum outboxctl_publish_duration_seconds_sum)" \
  "$(sum outboxctl_batch_duration_seconds_sum)" "$(sum outboxctl_batch_duration_seconds_count)" "$MODE" "$SPEC" <<'EOF'
import sys
n, s, e, pub, batch, count, mode, spec = sys.argv[1:]
n, wall, pub, batch, count = int(n), float(e) - float(s), float(pub), float(batch), int(float(count))
print(f"{spec} --mode {mode}: {n / wall:,.0f} events/s over {wall:.2f} s; {count} batches; "
      f"publish {pub:.2f} s ({pub / wall:.0%} of the wall time, {n / pub:,.0f} events/s while publishing), "
      f"claim + settle {batch - pub:.2f} s ({(batch - pub) / wall:.0%}), outside the steps {wall - batch:.2f} s")
EOF
