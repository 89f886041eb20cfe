#!/usr/bin/env bash
# The limits of session advisory locks as the claim, demonstrated on a private cluster with the
# defaults (max_connections = 100, max_locks_per_transaction = 64) on :21902 and a private
# PgBouncer (pool_mode = transaction) on :21903. Sessions are psql processes fed through FIFOs so
# several stay open at once; `run S SQL` waits for S to have answered (an \echo marker).
#   bench/experiments/advisory/limits.sh [capacity|relays|filter|snapshot|pgbouncer|fencing|all] [MAX_LOCKS=64]
set -uo pipefail
cd "$(dirname "$0")"
ADV=${ADV:-/tmp/adv}/lim PORT=21902 BPORT=21903 PGBIN=/usr/lib/postgresql/15/bin
WHAT=${1:-all} MAXLOCKS=${2:-64}
B=1000 TOKEN=x; . ./sql.sh
n=0
open() { # NAME [PORT]
  rm -f "$ADV/$1.in" "$ADV/$1.out"; mkfifo "$ADV/$1.in"
  psql -X -qA -P footer=off -h 127.0.0.1 -p "${2:-$PORT}" -U postgres test -v ON_ERROR_STOP=0 \
    -c "SET search_path = adv" -f "$ADV/$1.in" >> "$ADV/$1.out" 2>&1 &
  eval "exec {fd_$1}>\"$ADV/$1.in\""
}
post() { # NAME SQL: send with an answer marker, do not wait
  local fd="fd_$1"; n=$((n + 1)); eval "mark_$1=@@$n"
  : > "$ADV/$1.out"
  printf '%s;\n\\echo %s\n' "$2" "@@$n" >&"${!fd}"
}
await() { # NAME: wait for the answer to the last post, print it
  local m="mark_$1"
  until grep -q "^${!m}\$" "$ADV/$1.out"; do :; done
  grep -v "^${!m}\$" "$ADV/$1.out" | sed "s/^/  [$1] /"
}
run() { post "$1" "$2"; await "$1"; } # NAME SQL: send and wait for the answer, print it
close() { local fd="fd_$1"; eval "exec ${!fd}>&-"; }
q() { psql -X -qA -P footer=off -h 127.0.0.1 -p "$PORT" -U postgres test -c "SET search_path = adv" "$@" 2>&1 | sed 's/^/  [psql] /'; }
cluster() {
  mkdir -p "$ADV"; chown postgres "$ADV"
  [ -f "$ADV/pg.log" ] && su postgres -c "$PGBIN/pg_ctl -D $ADV/pg -m fast -w stop" >/dev/null 2>&1
  rm -rf "$ADV/pg"
  su postgres -c "$PGBIN/initdb -D $ADV/pg -A trust -U postgres" >/dev/null
  printf "%s\n" "port = $PORT" "listen_addresses = '127.0.0.1'" "unix_socket_directories = '$ADV'" \
    "max_locks_per_transaction = $MAXLOCKS" >> "$ADV/pg/postgresql.conf"
  su postgres -c "$PGBIN/pg_ctl -D $ADV/pg -l $ADV/pg.log -w start" >/dev/null
  psql -X -q -h 127.0.0.1 -p $PORT -U postgres postgres -c "CREATE DATABASE test"
  ../../../target/debug/outboxctl migrate --database-url postgres://postgres@127.0.0.1:$PORT/test --schema adv >/dev/null
  psql -X -q -h 127.0.0.1 -p $PORT -U postgres test -c "ALTER DATABASE test SET search_path = adv"
  refill 20000
  psql -X -qAt -h 127.0.0.1 -p $PORT -U postgres test -F ' ' -c "SELECT 'server', version()" \
    -c "SELECT name, setting FROM pg_settings WHERE name IN ('max_connections', 'max_locks_per_transaction',
          'max_prepared_transactions', 'autovacuum_max_workers', 'max_worker_processes', 'max_wal_senders')" \
    -c "SELECT 'shared_memory_size', current_setting('shared_memory_size')"
}
refill() {
  psql -X -q -h 127.0.0.1 -p $PORT -U postgres test -c "TRUNCATE adv.outbox RESTART IDENTITY" -c "INSERT INTO adv.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
     SELECT gen_random_uuid(), 'order', g::text, 'order.placed', jsonb_build_object('n', g), 'k' || g
       FROM generate_series(1, $1) g" -c "ANALYZE adv.outbox"
}
held() { echo "(SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())"; }
held_all="SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
claim() { B=$1; adv_rcte_ids | tr '\n' ' '; }

capacity() {
  echo "== capacity: one session takes advisory locks until the shared lock table is full"
  open a; open p
  run a "DO \$\$ DECLARE i bigint := 0; BEGIN
           LOOP i := i + 1; PERFORM pg_advisory_lock(i); END LOOP;
         EXCEPTION WHEN out_of_memory THEN RAISE NOTICE 'locked % before: %', i - 1, SQLERRM; END \$\$"
  run a "SELECT 'held by this session', $(held)"
  echo "-- while it holds them: a new connection"
  q -c "SELECT 'new connection', 1"
  echo "-- a session connected before (a producer, another relay):"
  run p "SELECT 'read', count(*) FROM outbox"
  run p "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        VALUES (gen_random_uuid(), 'order', 'x', 'order.placed', '{}', 'producer-1') RETURNING 'producer insert', id"
  run p "SELECT 'another relay claim', count(*) FROM ($(claim 10)) c"
  run p "WITH c AS ($(B=10; tx_claim | tr '\n' ' ')) SELECT 'a tx-mode claim', count(*) FROM c"
  run a "SELECT pg_advisory_unlock_all()"
  q -c "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        VALUES (gen_random_uuid(), 'order', 'x', 'order.placed', '{}', 'producer-2') RETURNING 'after unlock: producer insert', id"
  close a; close p
}
relays() {
  echo "== relays: N sessions each claiming batch B (the rcte claim) and holding it, until one fails"
  local b
  for b in 500 1000 5000; do
    refill 40000
    local i=0 failed=""
    while [ -z "$failed" ] && [ $i -lt 90 ]; do
      i=$((i + 1)); open "r$i"
      out=$(run "r$i" "SELECT count(*) FROM ($(claim $b)) c")
      if echo "$out" | grep -q ERROR; then failed=$i; fi
    done
    echo "batch $b: relay $i's claim: $(echo "$out" | tr '\n' ' ')"
    echo "  (and a new connection now:)"; q -c "SELECT 1"
    for j in $(seq $i); do close "r$j"; done; wait
  done
}
filter() {
  echo "== lock-then-filter: the lock function evaluated for rows the query then discards"
  refill 20000
  q -c "UPDATE outbox SET locked_until = now() + interval '1 hour' WHERE id <= 10"
  open a; open b
  echo "-- (1) index plan: the planner puts pg_try_advisory_lock(id) before the locked_until filter (10 leased rows first)"
  B=5; run a "EXPLAIN (COSTS OFF) $(adv_filter | tr '\n' ' ')"
  run a "SELECT array_agg(id ORDER BY id) AS claimed, $(held) AS locks_held FROM ($(adv_filter | tr '\n' ' ')) c"
  echo "-- the 10 leased rows are now advisory-locked by a, which did not claim them; b cannot take them until a unlocks"
  run b "SELECT array_agg(id ORDER BY id) AS b_claims FROM ($(claim 20)) c"
  run a "SELECT pg_advisory_unlock_all()"; run b "SELECT pg_advisory_unlock_all()"
  echo "-- (2) the same statement under another plan (enable_indexscan = off: a Seq Scan and a Sort, as the planner"
  echo "--     may choose from other statistics): the lock is taken for every ready row before the Sort and the LIMIT"
  run a "SET enable_indexscan = off"
  run a "EXPLAIN (COSTS OFF) $(adv_filter | tr '\n' ' ')"
  run a "SELECT count(*) AS claimed, $(held) AS locks_held FROM ($(adv_filter | tr '\n' ' ')) c"
  echo "--     (20000 ready rows: more than the lock table holds, so the claim fails; with 5000:)"
  run a "SELECT pg_advisory_unlock_all()"; refill 5000
  run a "SELECT count(*) AS claimed, $(held) AS locks_held FROM ($(adv_filter | tr '\n' ' ')) c"
  run b "SELECT count(*) AS b_claims_of_20 FROM ($(claim 20)) c"
  run a "SELECT pg_advisory_unlock_all()"; run a "RESET enable_indexscan"
  echo "-- (3) limit-then-lock and the recursive CTE: locks = rows returned (plus ones others hold)"
  run a "SELECT count(*) AS claimed, $(held) AS locks_held FROM ($(adv_limit | tr '\n' ' ')) c"
  run a "SELECT pg_advisory_unlock_all()"
  run a "SELECT count(*) AS claimed, $(held) AS locks_held FROM ($(claim 5)) c"
  echo "-- (4) re-entrancy: a session's own locks do not stop it: a second claim in the same session (overlapping"
  echo "--     batches) takes the rows it already holds again, and one unlock does not free them"
  run a "SELECT array_agg(id ORDER BY id) AS second_claim_same_session, $(held) AS locks_held FROM ($(claim 5)) c"
  run a "SELECT pg_advisory_unlock(1) AS first_unlock, $(held) AS locks_held"
  run a "SELECT pg_advisory_unlock_all()"
  close a; close b
}
snapshot() {
  echo "== snapshot race (Que's comment in lib/que/poller.rb): b's claim takes its snapshot, a settles and unlocks"
  echo "   row X, then b's lock on X succeeds and b returns X as ready although it is published"
  refill 1000
  open a; open b
  run a "SELECT pg_advisory_lock(424242) AS gate_closed"
  run a "SELECT array_agg(id) AS a_claims FROM ($(claim 1)) c"
  # b's claim of 1 row; the anchor waits at the gate after the statement's snapshot is taken.
  gated=$(claim 1 | sed "s/WHERE published_at IS NULL/WHERE (SELECT count(*) FROM (SELECT pg_advisory_lock_shared(424242)) g) = 1 AND published_at IS NULL/")
  post b "SELECT array_agg(id) AS b_claims_one_statement FROM (SELECT o.id, o.published_at FROM outbox o WHERE o.id IN ($gated)) c"
  until [ "$(psql -X -qAt -h 127.0.0.1 -p $PORT -U postgres test -c "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'advisory' AND query LIKE '%b_claims%'")" = 1 ]; do :; done
  echo "  (b is waiting at the gate, its snapshot taken)"
  run a "WITH u AS (UPDATE outbox SET published_at = now() WHERE id = 1 AND published_at IS NULL RETURNING id) SELECT 'a settled', count(*) FROM u"
  run a "SELECT pg_advisory_unlock(1) AS a_unlocked_x, pg_advisory_unlock(424242) AS gate_open"
  echo "-- b's claim, after the gate:"; await b
  echo "-- the second step (a new statement, a new snapshot) drops X; so does the settle's published_at IS NULL"
  run b "SELECT count(*) AS b_fetch_fresh_snapshot FROM outbox WHERE id = 1 AND published_at IS NULL"
  run b "WITH u AS ($(IDS="'{1}'::bigint[]"; adv_settle | tr '\n' ' ')) SELECT count(*) AS b_settle_changed FROM u"
  run b "SELECT pg_advisory_unlock_all()"
  close a; close b
}
pgbouncer() {
  echo "== PgBouncer, pool_mode = transaction: the session lock belongs to a server connection, not to the relay"
  cat > "$ADV/pgbouncer.ini" <<INI
[databases]
test = host=127.0.0.1 port=$PORT dbname=test
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BPORT
auth_type = trust
admin_users = postgres
auth_file = $ADV/users.txt
pool_mode = transaction
default_pool_size = 1
unix_socket_dir =
logfile = $ADV/pgbouncer.log
pidfile = $ADV/pgbouncer.pid
INI
  echo '"postgres" ""' > "$ADV/users.txt"; chown -R postgres "$ADV"
  [ -f "$ADV/pgbouncer.pid" ] && kill "$(cat "$ADV/pgbouncer.pid")" 2>/dev/null
  su postgres -c "pgbouncer -d $ADV/pgbouncer.ini"
  until psql -X -qAt -h 127.0.0.1 -p $BPORT -U postgres test -c "SELECT 1" >/dev/null 2>&1; do :; done
  refill 1000
  open a $BPORT; open b $BPORT
  echo "-- default_pool_size = 1: relays a and b share one server connection"
  run a "SELECT array_agg(id ORDER BY id) AS a_claims, pg_backend_pid() AS server_pid FROM ($(claim 3)) c"
  run b "SELECT array_agg(id ORDER BY id) AS b_claims, pg_backend_pid() AS server_pid FROM ($(claim 3)) c"
  echo "   (b claimed a's rows again: the locks are the shared server session's and re-entrant)"
  run b "SELECT pg_advisory_unlock_all()"
  echo "-- default_pool_size = 2 (reload): a's unlock may run on the other server connection"
  sed -i 's/default_pool_size = 1/default_pool_size = 2/' "$ADV/pgbouncer.ini"
  psql -X -qAt -h 127.0.0.1 -p $BPORT -U postgres pgbouncer -c "RELOAD" >/dev/null
  close a; close b; wait
  open a $BPORT; open b $BPORT; open c $BPORT
  # b's open transaction pins one server connection, so a's claim runs on the other; then c pins
  # that one and b lets go of its: a's unlock can only run on the server connection without a's locks.
  run b "BEGIN"; run b "SELECT 'b pins server', pg_backend_pid()"
  run a "SELECT array_agg(id ORDER BY id) AS a_claims, pg_backend_pid() AS server_pid FROM ($(claim 3)) c"
  run c "BEGIN"; run c "SELECT 'c pins server', pg_backend_pid()"
  run b "COMMIT"
  run a "SELECT 'a unlocks', pg_backend_pid(), pg_advisory_unlock(1), pg_advisory_unlock(2), pg_advisory_unlock(3)"
  run c "SELECT 'c sees as its own', $(held), pg_try_advisory_lock(1) AS c_locks_x_too"
  run c "COMMIT"
  q -c "SELECT 'advisory locks still held, by server pid', pid, count(*) FROM pg_locks WHERE locktype = 'advisory' GROUP BY pid"
  close a; close b; close c; wait
  kill "$(cat "$ADV/pgbouncer.pid")"
}
fencing() {
  echo "== fencing: relay a claims X, publishes, loses its session; relay b claims X; a settles on a new connection"
  refill 1000
  open a; open b
  run a "SELECT array_agg(id) AS a_claims, pg_backend_pid() AS a_pid FROM ($(claim 1)) c"
  q -c "SELECT 'a''s session killed', pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%a_claims%' AND pid <> pg_backend_pid()"
  run b "SELECT array_agg(id) AS b_claims_same_row FROM ($(claim 1)) c"
  echo "-- a, reconnected, can see that another session holds X now (its try-lock fails), and settles anyway"
  q -c "SELECT 'a new connection: try-lock X', pg_try_advisory_lock(1)"
  q -c "WITH u AS ($(IDS="'{1}'::bigint[]"; adv_settle | tr '\n' ' ')) SELECT 'a settle changed', count(*) FROM u"
  run b "WITH u AS ($(IDS="'{1}'::bigint[]"; adv_settle | tr '\n' ' ')) SELECT count(*) AS b_settle_changed_duplicate_detected FROM u"
  run b "SELECT pg_advisory_unlock_all()"
  q -c "SELECT 'row 1', published_at IS NOT NULL AS published, attempt_count FROM outbox WHERE id = 1"
  echo "-- a failure settle has no such fence: a dead-letter written by a's new connection while b publishes"
  run b "SELECT array_agg(id) AS b_claims FROM ($(claim 1)) c"
  q -c "UPDATE outbox SET dead_lettered_at = now(), last_error = 'a: sink said no' WHERE id = 2 AND published_at IS NULL AND dead_lettered_at IS NULL RETURNING 'a dead-lettered', id"
  run b "WITH u AS ($(IDS="'{2}'::bigint[]"; adv_settle | tr '\n' ' ')) SELECT count(*) AS b_settle_after_its_publish FROM u"
  q -c "SELECT 'row 2', published_at IS NOT NULL AS published, dead_lettered_at IS NOT NULL AS dead FROM outbox WHERE id = 2"
  run b "SELECT pg_advisory_unlock_all()"
  close a; close b
}
uptime
cluster
case $WHAT in
  all) capacity; relays; filter; snapshot; pgbouncer; fencing ;;
  *) $WHAT ;;
esac
wait
su postgres -c "$PGBIN/pg_ctl -D $ADV/pg -m fast -w stop" >/dev/null
