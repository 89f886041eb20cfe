#!/usr/bin/env bash
# How long does one `outboxctl prune` batch hold its locks on a big outbox?
#
# Builds a scratch schema with PUBLISHED rows published 9-38 days ago (all past a 7-day
# retention) and BACKLOG pending rows, vacuums and analyzes it like autovacuum would, shows the
# plan of one batch (EXPLAIN ANALYZE inside a rolled-back transaction), then runs the release
# binary's `prune --older-than 7d -v` and reports the per-batch times from its log (one
# "prune batch ... ms=N" line per DELETE statement). With RELAYS=N, N relay daemons
# (`--sink null`) drain the backlog while the prune runs. Finally checks that every pending row
# survived and drops the schema.
#
#   bench/prune.sh                          # 5M published, 10k pending
#   RELAYS=2 BACKLOG=200000 bench/prune.sh  # with two relays publishing during the prune
#   PUBLISHED=1000000 bench/prune.sh        # smaller
#   STALE=1 PUBLISHED=100000 bench/prune.sh # statistics from before a drain (issue 22 item 10):
#                                           # ANALYZE while every row is pending, then publish
#
# Needs: PostgreSQL reachable as a superuser (DATABASE_URL, default the test database), psql, cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

source bench/lib.sh
URL=$DATABASE_URL
SCHEMA=${BENCH_SCHEMA:-bench_prune}
PUBLISHED=${PUBLISHED:-5000000}
BACKLOG=${BACKLOG:-10000}
RELAYS=${RELAYS:-0}
BATCH=${BATCH:-5000}
STALE=${STALE:-0}


if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
  BIN=target/release/outboxctl
fi
export DATABASE_URL=$URL OUTBOXCTL_SCHEMA=$SCHEMA NO_COLOR=1
unset OUTBOXCTL_LOG RUST_LOG

relay_pids=()
cleanup() {
  for p in "${relay_pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  qv -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
}
trap cleanup EXIT

echo "== loading $PUBLISHED published and $BACKLOG pending rows into schema $SCHEMA"
qv -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
"$BIN" migrate
qv -c "SET search_path TO $SCHEMA" -c "
  INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers,
                      idempotency_key, created_at, available_at, published_at, attempt_count)
  SELECT '00000000-0000-0000-0000-000000000001', 'order', 'o-' || g, 'order.placed',
         jsonb_build_object('orderId', 'o-' || g, 'totalCents', g % 100000, 'currency', 'USD',
                            'lines', jsonb_build_array(jsonb_build_object('sku', 'sku-' || (g % 977), 'qty', 1 + g % 5))),
         '{\"schema-version\": \"1\"}', 'order.placed:o-' || g,
         ts, ts, ts + interval '50 ms', 1
    FROM generate_series(1, $PUBLISHED) g,
         LATERAL (SELECT now() - interval '38 days' + g * (interval '29 days' / $PUBLISHED)) t(ts)" \
  -c "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
      SELECT '00000000-0000-0000-0000-000000000001', 'order', 'p-' || g, 'order.placed', '{}', 'pending-' || g
        FROM generate_series(1, $BACKLOG) g" \
  -c "VACUUM ANALYZE outbox"
if [ "$STALE" = 1 ]; then
  echo "== stale statistics: ANALYZE while the rows are pending, then publish them (autovacuum off)"
  qv -c "SET search_path TO $SCHEMA" -c "ALTER TABLE outbox SET (autovacuum_enabled = false)" \
    -c "UPDATE outbox SET published_at = NULL WHERE published_at IS NOT NULL" -c "ANALYZE outbox" \
    -c "UPDATE outbox SET published_at = available_at + interval '50 ms'
         WHERE idempotency_key NOT LIKE 'pending-%'"
fi
qv -At -c "SET search_path TO $SCHEMA" -c "
  SELECT format('heap %s, outbox_published_at_idx %s, rows %s',
                pg_size_pretty(pg_relation_size('outbox')),
                pg_size_pretty(pg_relation_size('outbox_published_at_idx')),
                (SELECT count(*) FROM outbox))"

# The batch statement as db::prune::DELETE_PUBLISHED writes it (keep the two in step).
echo "== plan of one batch (rolled back)"
qv -c "SET search_path TO $SCHEMA" -c "BEGIN" -c "
  EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)
  WITH d AS (
      DELETE FROM outbox
       WHERE ctid = ANY(ARRAY(
                 SELECT ctid FROM outbox
                  WHERE published_at < now() - interval '7 days'
                    AND published_at >= '-infinity'::timestamptz
                  ORDER BY published_at
                  LIMIT $BATCH))
         AND (published_at < now() - interval '7 days') IS TRUE
      RETURNING published_at)
  SELECT count(*), max(published_at) FROM d" -c "ROLLBACK"

if [ "$RELAYS" -gt 0 ]; then
  echo "== starting $RELAYS relays (--sink null)"
  for _ in $(seq 1 "$RELAYS"); do
    "$BIN" relay --sink null --quiet &
    relay_pids+=($!)
  done
fi

echo "== $BIN prune --older-than 7d --batch-size $BATCH -v"
log=$(mktemp)
"$BIN" prune --older-than 7d --batch-size "$BATCH" -v 2>"$log"
grep -o 'ms=[0-9]*' "$log" | cut -d= -f2 | sort -n |
  awk '{a[NR]=$1} END {printf "batches %d: p50 %d ms, p90 %d ms, p99 %d ms, longest %d ms\n",
                       NR, a[int(NR*0.5)], a[int(NR*0.9)], a[int(NR*0.99)], a[NR]}'
rm -f "$log"

if [ "$RELAYS" -gt 0 ]; then
  until [ "$(qv -At -c "SELECT count(*) FROM $SCHEMA.outbox WHERE published_at IS NULL")" = 0 ]; do
    sleep 0.5
  done
fi
left=$(qv -At -c "SELECT count(*) FROM $SCHEMA.outbox")
echo "== rows left: $left (the $BACKLOG pending rows, published by now if RELAYS > 0)"
[ "$left" = "$BACKLOG" ] || { echo "expected $BACKLOG rows to survive" >&2; exit 1; }
