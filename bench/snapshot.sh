#!/usr/bin/env bash
# Does a long-running snapshot slow the relay? (issue 30: the MVCC failure of Postgres queues)
#
# For each binary, mode and "snapshot held or not": a fresh schema; with HELD, a psql session
# opens a REPEATABLE READ transaction, reads once (the snapshot is taken then) and sleeps, as
# pg_dump or a long report would, for the whole run. Then ROUNDS rounds of EVENTS events
# (bench_seed: appended, then VACUUM ANALYZE, as autovacuum would try) each drained by one
# `relay --once --sink null`; the rate of each round. Last, one event published and relayed by
# `relay --once` three times (the median wall time): the cost of a fresh process's first claim
# over the dead rows the rounds left. Then one more run for which a claim from the start is due
# (its wall time, and when its event was marked published: before that walk).
#
#   bench/snapshot.sh                                  # this tree's release binary
#   BASELINE_BIN=/tmp/outboxctl-old bench/snapshot.sh  # and an older one, in the same run
#   MODES="tx" ROUNDS=3 EVENTS=50000 bench/snapshot.sh
#   ORDERED=1 bench/snapshot.sh                        # the events' type ordered (ordering enable)
#   FILLFACTOR=50 bench/snapshot.sh                    # the outbox table's fillfactor set first
#
# Needs: PostgreSQL reachable as a superuser (DATABASE_URL, default the test database), psql.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

URL=$DATABASE_URL
ROUNDS=${ROUNDS:-5}
EVENTS=${EVENTS:-100000}
MODES=${MODES:-tx lease}
ORDERED=${ORDERED:-0}
FILLFACTOR=${FILLFACTOR:-}
SCHEMA=bench_snapshot
export NO_COLOR=1 PGOPTIONS="-c client_min_messages=warning"
unset OUTBOXCTL_LOG RUST_LOG

if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
  BIN=target/release/outboxctl
fi
bins=("new=$BIN")
[ -n "${BASELINE_BIN:-}" ] && bins+=("old=$BASELINE_BIN")

psql_() { psql "$URL" -v ON_ERROR_STOP=1 -X -q -At "$@"; }
HOLDER_APP=bench_snapshot_holder
release_snapshot() {
  psql_ -c "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = '$HOLDER_APP'" >/dev/null
}
cleanup() {
  release_snapshot || true
  psql_ -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" >/dev/null 2>&1 || true
}
trap cleanup EXIT


uptime
for entry in "${bins[@]}"; do
  name=${entry%%=*}
  bin=${entry#*=}
  echo "# $name: $("$bin" --version)"
  for mode in $MODES; do
    for held in no yes; do
      psql_ -c "DROP SCHEMA IF EXISTS $SCHEMA CASCADE" -c "CREATE SCHEMA $SCHEMA" >/dev/null
      "$bin" --schema "$SCHEMA" migrate >/dev/null
      [ "$ORDERED" = 1 ] && "$bin" --schema "$SCHEMA" ordering enable --aggregate-type order >/dev/null
      [ -n "$FILLFACTOR" ] && psql_ -c "ALTER TABLE $SCHEMA.outbox SET (fillfactor = $FILLFACTOR)" >/dev/null
      if [ "$held" = yes ]; then
        PGAPPNAME=$HOLDER_APP psql "$URL" -X -q >/dev/null 2>&1 <<'SQL' &
BEGIN ISOLATION LEVEL REPEATABLE READ;
SELECT count(*) FROM pg_class;
SELECT pg_sleep(86400);
SQL
        for _ in $(seq 1 100); do
          [ "$(psql_ -c "SELECT count(*) FROM pg_stat_activity WHERE application_name = '$HOLDER_APP' AND backend_xmin IS NOT NULL")" -ge 1 ] && break
          sleep 0.1
        done
      fi
      rates=()
      for r in $(seq 1 "$ROUNDS"); do
        bench_seed "$SCHEMA" "$EVENTS" "r$r-"
        t0=$(bench_now)
        "$bin" --schema "$SCHEMA" relay --once --sink null --mode "$mode" >/dev/null
        t1=$(bench_now)
        left=$(psql_ -c "SELECT count(*) FROM $SCHEMA.outbox WHERE published_at IS NULL")
        [ "$left" = 0 ] || { echo "round $r left $left events" >&2; exit 1; }
        rates+=("$(echo "$EVENTS / ($t1 - $t0)" | bc)")
      done
      singles=()
      for s in 1 2 3; do
        "$bin" --schema "$SCHEMA" publish --event-type order.placed --aggregate-type order \
          --aggregate-id one --payload '{"n":1}' >/dev/null
        t0=$(bench_now)
        "$bin" --schema "$SCHEMA" relay --once --sink null --mode "$mode" >/dev/null
        t1=$(bench_now)
        singles+=("$(echo "($t1 - $t0) * 1000 / 1" | bc)")
      done
      single=$(printf '%s\n' "${singles[@]}" | sort -n | sed -n 2p)
      # A run for which a claim from the start is due (the saved one made a day old: cron runs a
      # minute apart under a held snapshot are such runs): its wall time, and how long after it
      # started the event was marked published (it goes out before the walk).
      due=-1 due_published=-1
      if psql_ -c "SELECT to_regclass('$SCHEMA.outbox_relay_floor') IS NOT NULL" | grep -q t; then
        "$bin" --schema "$SCHEMA" publish --event-type order.placed --aggregate-type order \
          --aggregate-id one --payload '{"n":2}' >/dev/null
        psql_ -c "UPDATE $SCHEMA.outbox_relay_floor SET swept_at = swept_at - interval '1 day'" >/dev/null
        t0=$(bench_now)
        "$bin" --schema "$SCHEMA" relay --once --sink null --mode "$mode" >/dev/null
        t1=$(bench_now)
        due=$(echo "($t1 - $t0) * 1000 / 1" | bc)
        due_published=$(psql_ -c "SELECT round((extract(epoch FROM max(published_at)) - $t0) * 1000) FROM $SCHEMA.outbox")
      fi
      read -r dead upd hot < <(psql_ -F ' ' -c "SELECT n_dead_tup, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE schemaname = '$SCHEMA' AND relname = 'outbox'")
      ff=$(psql_ -c "SELECT coalesce((SELECT substr(o, 12) FROM unnest(reloptions) o WHERE o LIKE 'fillfactor=%'), '100') FROM pg_class WHERE oid = '$SCHEMA.outbox'::regclass")
      echo "$name mode=$mode ordered=$ORDERED fillfactor=$ff snapshot_held=$held events_per_s=${rates[*]} single_once_ms=$single due_once_ms=$due due_published_ms=$due_published dead_rows=$dead updates=$upd hot_updates=$hot"
      release_snapshot
      wait 2>/dev/null || true
    done
  done
done
