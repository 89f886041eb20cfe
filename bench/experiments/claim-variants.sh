#!/usr/bin/env bash
# In-server drain rate of the tx-mode claim, in a PL/pgSQL loop (no client), for a claim variant:
#   bench/experiments/claim-variants.sh JOIN PUBIDX BATCH
#   JOIN: id (join the locked ids back on the primary key) | ctid (TID scan, what outboxctl uses)
#   PUBIDX: 1 (outbox_published_at_idx as migrated) | 0 (dropped) | brin (replaced by a BRIN index)
# Loads 200k ready events with ../shared/peers/load_backlog.sql into a scratch schema `exp`.
set -euo pipefail
cd "$(dirname "$0")/../.."
URL=${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/test}
P="psql $URL -qX"
$P -c "drop schema if exists exp cascade" 2>/dev/null
cargo run --release --quiet -- migrate --database-url "$URL" --schema exp >/dev/null
[ "$2" = 0 ] && $P -c "drop index exp.outbox_published_at_idx"
[ "$2" = brin ] && $P -c "drop index exp.outbox_published_at_idx; create index outbox_published_at_idx on exp.outbox using brin (published_at)"
$P -v rows=200000 -c "set search_path=exp" -f "${PEERS_DIR:-../shared/peers}/load_backlog.sql" >/dev/null
READY="SELECT %s FROM outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL AND available_at <= now() AND (locked_until IS NULL OR locked_until < now()) ORDER BY available_at, id LIMIT $3 FOR UPDATE SKIP LOCKED"
if [ "$1" = id ]; then J="FROM ($(printf "$READY" id)) c WHERE o.id = c.id"
else J="WHERE o.ctid = ANY(ARRAY($(printf "$READY" ctid)))"; fi
$P -c "set search_path=exp; set synchronous_commit=off" -c "
DO \$do\$
DECLARE n bigint; total bigint := 0; t0 timestamptz := clock_timestamp(); secs numeric;
BEGIN
  LOOP
    WITH c AS (UPDATE outbox o SET published_at = now(), locked_until = NULL, attempt_count = o.attempt_count + 1, last_error = NULL $J RETURNING o.id, o.payload::text, o.headers::text)
    SELECT count(*) INTO n FROM c;
    COMMIT;
    EXIT WHEN n = 0;
    total := total + n;
  END LOOP;
  secs := extract(epoch FROM clock_timestamp() - t0);
  RAISE NOTICE 'RESULT join=$1 pubidx=$2 batch=$3 rows=% rows_per_s=%', total, round(total / secs);
END
\$do\$;" 2>&1 | grep RESULT
$P -c "drop schema exp cascade" >/dev/null 2>&1
