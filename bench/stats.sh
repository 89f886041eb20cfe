#!/usr/bin/env bash
# How fast is `outboxctl stats` on a big outbox?
#
# Builds a scratch schema with PUBLISHED published rows (published_at spread over 30 days, so the
# last hour holds ~1/720 of them), BACKLOG pending rows (80% ready, 10% scheduled, 10% in flight)
# and DEAD dead letters; vacuums and analyzes it like autovacuum would; then times the release
# binary and shows the plans of exactly the statements it runs (auto_explain, reported back to the
# client as NOTICEs, for a dedicated role only).
#
#   bench/stats.sh                      # 10M published, 100k backlog
#   PUBLISHED=1000000 bench/stats.sh    # smaller
#   KEEP=1 bench/stats.sh               # keep the schema (re-run with LOAD=0 to skip loading)
#   LOAD=0 BIN=/tmp/outboxctl-old bench/stats.sh   # another binary on the kept data
#
# Needs: PostgreSQL reachable as a superuser (DATABASE_URL, default the test database), psql, cargo.
set -euo pipefail
cd "$(dirname "$0")/.."

source bench/lib.sh
URL=$DATABASE_URL
SCHEMA=${BENCH_SCHEMA:-bench_stats}
PUBLISHED=${PUBLISHED:-10000000}
BACKLOG=${BACKLOG:-100000}
DEAD=${DEAD:-1000}
RUNS=${RUNS:-5}
LOAD=${LOAD:-1}
KEEP=${KEEP:-0}
ROLE=outboxctl_bench

ms() { date +%s%3N; }

# BIN=path/to/outboxctl compares another build (e.g. an older commit's) on the same data.
if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
  BIN=target/release/outboxctl
fi
export OUTBOXCTL_SCHEMA=$SCHEMA NO_COLOR=1 COLUMNS=120
unset OUTBOXCTL_LOG RUST_LOG

cleanup() {
  qv -c "DROP OWNED BY $ROLE" -c "DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1 || true
  if [ "$KEEP" = 0 ]; then qv -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"; fi
}
trap cleanup EXIT

if [ "$LOAD" = 1 ]; then
  echo "== loading $PUBLISHED published, $BACKLOG pending, $DEAD dead rows into schema $SCHEMA"
  qv -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE"
  DATABASE_URL=$URL "$BIN" migrate
  t0=$(ms)
  chunk=1000000
  for ((lo = 1; lo <= PUBLISHED; lo += chunk)); do
    hi=$((lo + chunk - 1)); ((hi > PUBLISHED)) && hi=$PUBLISHED
    qv -c "SET search_path TO $SCHEMA" -c "
      INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers,
                          idempotency_key, created_at, available_at, attempt_count, published_at)
      SELECT ('00000000-0000-0000-0000-00000000000' || (g % 10))::uuid, 'order', 'o-' || g,
             'order.' || (ARRAY['placed','paid','shipped','cancelled','refunded'])[1 + g % 5],
             jsonb_build_object('orderId', g, 'totalCents', g % 10000), '{\"schema-version\":\"1\"}',
             'p-' || lpad(g::text, 10, '0'), ts - interval '2 seconds', ts - interval '2 seconds', 1, ts
        FROM generate_series($lo, $hi) g,
             LATERAL (SELECT now() - interval '30 days' * (1 - g::float8 / $PUBLISHED)) AS t(ts)"
    echo "   $hi published rows ($(( ($(ms) - t0) / 1000 ))s)"
  done
  qv -c "SET search_path TO $SCHEMA" -c "
    INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                        idempotency_key, created_at, available_at, locked_until, attempt_count)
    SELECT ('00000000-0000-0000-0000-00000000000' || (g % 10))::uuid, 'order', 'b-' || g,
           'order.' || (ARRAY['placed','paid','shipped','cancelled','refunded'])[1 + g % 5],
           jsonb_build_object('orderId', g), 'b-' || lpad(g::text, 10, '0'),
           now() - interval '10 minutes', av, lk, CASE WHEN lk IS NULL THEN 0 ELSE 1 END
      FROM generate_series(1, $BACKLOG) g,
           LATERAL (SELECT CASE WHEN g % 10 = 0 THEN now() + interval '1 hour'
                                ELSE now() - interval '5 minutes' END,
                           CASE WHEN g % 10 = 1 THEN now() + interval '30 seconds' END) AS s(av, lk)" \
    -c "
    INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                        idempotency_key, attempt_count, dead_lettered_at, last_error)
    SELECT '00000000-0000-0000-0000-000000000001', 'order', 'd-' || g, 'order.placed', '{}',
           'd-' || g, 10, now() - interval '1 day', 'HTTP 500'
      FROM generate_series(1, $DEAD) g"
  echo "   pending and dead rows ($(( ($(ms) - t0) / 1000 ))s); vacuum analyze"
  qv -c "VACUUM (ANALYZE) $SCHEMA.outbox"
fi

qv -c "SET search_path TO $SCHEMA" -c "
  SELECT pg_size_pretty(pg_table_size('outbox')) AS heap,
         pg_size_pretty(pg_relation_size('outbox_ready_idx')) AS ready_idx,
         pg_size_pretty(pg_relation_size('outbox_dead_idx')) AS dead_idx,
         pg_size_pretty(pg_relation_size('outbox_published_at_idx')) AS published_at_idx,
         (SELECT count(*) FROM outbox WHERE published_at > now() - interval '1 hour') AS published_last_hour"

echo "== outboxctl stats (release build, wall time per run including process start and connect)"
DATABASE_URL=$URL "$BIN" stats
for by in "" "--by event-type" "--by tenant"; do
  times=()
  for ((i = 0; i < RUNS; i++)); do
    t=$(ms); DATABASE_URL=$URL "$BIN" stats $by --json >/dev/null; times+=($(( $(ms) - t )))
  done
  echo "stats $by --json: ${times[*]} ms"
done

echo "== plans of the statements outboxctl stats runs (EXPLAIN ANALYZE, BUFFERS via auto_explain)"
qv -c "DROP OWNED BY $ROLE" -c "DROP ROLE IF EXISTS $ROLE" >/dev/null 2>&1 || true
qv -c "CREATE ROLE $ROLE LOGIN" \
  -c "GRANT USAGE ON SCHEMA $SCHEMA TO $ROLE" \
  -c "GRANT SELECT ON ALL TABLES IN SCHEMA $SCHEMA TO $ROLE" \
  -c "ALTER ROLE $ROLE SET session_preload_libraries = 'auto_explain'" \
  -c "ALTER ROLE $ROLE SET auto_explain.log_min_duration = 0" \
  -c "ALTER ROLE $ROLE SET auto_explain.log_analyze = on" \
  -c "ALTER ROLE $ROLE SET auto_explain.log_buffers = on" \
  -c "ALTER ROLE $ROLE SET auto_explain.log_level = notice"
EXPLAIN_URL=$(echo "$URL" | sed -E "s#^(postgres(ql)?://)([^@/]*@)?#\1$ROLE@#")
for by in "" "--by event-type"; do
  echo "-- stats $by"
  DATABASE_URL=$EXPLAIN_URL OUTBOXCTL_LOG=sqlx::postgres::notice=info "$BIN" stats $by --json 2>&1 >/dev/null \
    | sed -e 's/^.*INFO //' | grep -v -E '^\s*$'
done
