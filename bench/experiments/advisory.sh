#!/usr/bin/env bash
# Session advisory locks as the claim (issue 13, lever 2), measured against today's lease and tx
# claims on a private PostgreSQL 15 cluster (ports 21900-21949). SQL texts: bench/experiments/advisory/sql.sh.
#   bench/experiments/advisory.sh setup ROWS          private cluster on :21900 (autovacuum off), schema adv
#                                         migrated by outboxctl, ROWS ready events (ab-drain's shape),
#                                         checkpointed snapshot kept in $ADV/snap
#   bench/experiments/advisory.sh cg CYCLE B N        callgrind instructions of N cycles of CYCLE with batch B
#                                         (statements PREPAREd, then EXECUTEd N times)
#                                         in a single-user backend on a copy of the snapshot
#   bench/experiments/advisory.sh pgbench CYCLE B C T pgbench -M prepared -c C -T T of CYCLE on a copy of the
#                                         snapshot (port 21901): events/s, WAL bytes per event
# CYCLE: tx (BEGIN; claim; COMMIT) | lease_claim | lease (claim; settle) | adv_<claim>_<settle> (below)
#        | lease_overlap (claim A; claim B; settle A; settle B: two batches in flight) | lease_coalesced
#        (the same with one settle of A and B; callgrind only).
# DUP=1 (pgbench): every advisory cycle also adds its claim's row count to adv_dup, and the run
# prints claimed - published, the rows handed out twice (the snapshot race of the one-statement
# claims).
# Drivers: bench/experiments/advisory/drain.sh (the drain matrix), drain-extra.sh, drain-final.sh, cg.sh
# (callgrind of every cycle), limits.sh (the limits, on :21902 and a PgBouncer on :21903).
# Needs target/debug/outboxctl (for `migrate`), valgrind, pgbench, PostgreSQL 15 in $PGBIN.
set -euo pipefail
cd "$(dirname "$0")"
ADV=${ADV:-/tmp/adv}
PGBIN=/usr/lib/postgresql/15/bin
TOKEN=00000000-0000-0000-0000-00000000000a
. ./advisory/sql.sh
one() { tr '\n' ' '; echo; }   # single-user mode ends a statement at a newline
# A claim as the relay uses it, wrapped so that its rows are consumed (payload and headers as text)
# and its ids kept for the settle: in the session setting adv.ids (callgrind) or :ids (pgbench).
wrap() { # KIND SQL   KIND: cg | pgb
  if [ "$1" = cg ]; then
    echo "WITH c AS ($2) SELECT set_config('adv.ids', coalesce(array_agg(id), '{}')::text, false) IS NOT NULL AS k, count(*) AS n, sum(length(payload) + length(headers)) AS bytes FROM c"
  else
    echo "WITH c AS ($2) SELECT coalesce(array_agg(id), '{}')::text AS ids, count(*) AS n, sum(length(payload) + length(headers)) AS bytes FROM c"
  fi
}
wrap_ids() { # the id-only first step of the two-step claim: the ids locked, kept apart (lids) for
  # the per-id unlock, as the fetch may drop some of them
  # (not in the single-session callgrind runs, where the fetch drops nothing)
  if [ "$1" = cg ]; then echo "SELECT set_config('adv.ids', coalesce(array_agg(id), '{}')::text, false) IS NOT NULL AS k FROM ($2) c"
  else echo "SELECT coalesce(array_agg(id), '{}')::text AS ids FROM ($2) c"; fi
}
wrapu() { echo "WITH u AS ($1) SELECT count(*) AS settled FROM u"; }
gset() { [ "$1" = pgb ] && echo '\gset' || true; }
# cycle KIND NAME: the statements of one claim-publish-settle cycle, one per line (pgbench: \gset).
cycle() {
  local k=$1 name=$2
  if [ "$k" = cg ]; then IDS="current_setting('adv.ids')::bigint[]"; else IDS=":ids::bigint[]"; fi
  case $name in
    tx) echo "BEGIN;"; wrap "$k" "$(tx_claim)" | one; echo ";"; echo "COMMIT;" ;;
    lease_claim) wrap "$k" "$(lease_claim)" | one; echo ";" ;;
    lease) wrap "$k" "$(lease_claim)" | one; gset "$k"; [ "$k" = cg ] && echo ";"; wrapu "$(lease_settle)" | one; echo ";" ;;
    lease_overlap|lease_coalesced)
      # Two batches in flight (--pipeline-depth 2): claim A, claim B (A still leased), then
      # settle A and B apart (lease_overlap, as shipped) or in one statement (lease_coalesced,
      # issue 13's "coalesce the settles"). Callgrind only: A's ids kept in adv.ids1.
      [ "$k" = cg ] || { echo "$name: callgrind only" >&2; exit 2; }
      local a="current_setting('adv.ids1')::bigint[]" b="current_setting('adv.ids')::bigint[]"
      wrap cg "$(lease_claim)" | one; echo ";"
      echo "SELECT set_config('adv.ids1', current_setting('adv.ids'), false) IS NOT NULL AS k"; echo ";"
      wrap cg "$(lease_claim)" | one; echo ";"
      if [ "$name" = lease_overlap ]; then
        IDS=$a; wrapu "$(lease_settle)" | one; echo ";"
        IDS=$b; wrapu "$(lease_settle)" | one; echo ";"
      else
        IDS="($a || $b)"; wrapu "$(lease_settle)" | one; echo ";"
      fi ;;
    adv_*)
      # adv_<claim>_<settle>: claim filter|limit|rcte (one statement) or rcte2|window2 (ids, then
      # fetch);
      # settle: none (unlock only) | all (settle, unlock_all) | ids (settle, per-id unlocks)
      local claim=${name#adv_}; local how=${claim#*_}; claim=${claim%%_*}
      local lids=$IDS
      if [ "$claim" = rcte2 ] || [ "$claim" = window2 ]; then
        wrap_ids "$k" "$(adv_${claim%2}_ids)" | one
        if [ "$k" = cg ]; then echo ";"; else echo '\gset l'; lids=":lids::bigint[]"; fi
        wrap "$k" "$(IDS=$lids adv_fetch)" | one
      else
        wrap "$k" "$(adv_$claim)" | one
      fi
      gset "$k"; [ "$k" = cg ] && echo ";"
      [ -n "${DUP:-}" ] && echo "UPDATE adv_dup SET claimed = claimed + :n;"
      [ "$how" != none ] && { wrapu "$(adv_settle)" | one; echo ";"; }
      if [ "$how" = ids ]; then IDS=$lids adv_unlock_ids | one; else adv_unlock_all | one; fi; echo ";" ;;
    *) echo "unknown cycle $name" >&2; exit 2 ;;
  esac
}
q() { psql -X -qAt -h 127.0.0.1 -p "$1" -U postgres test -v ON_ERROR_STOP=1 "${@:2}"; }
start() { # DIR PORT
  su postgres -c "$PGBIN/pg_ctl -D $1 -l $1.log -o '-p $2 -c unix_socket_directories=$ADV' -w start" >/dev/null
}
stop() { su postgres -c "$PGBIN/pg_ctl -D $1 -m fast -w stop" >/dev/null; }
copy() { rm -rf "$2"; cp -a "$1" "$2"; }
case $1 in
  setup)
    rows=${2:-200000}
    mkdir -p $ADV; chown postgres $ADV
    [ -d $ADV/pg ] || {
      su postgres -c "$PGBIN/initdb -D $ADV/pg -A trust -U postgres" >/dev/null
      printf "%s\n" "port = 21900" "listen_addresses = '127.0.0.1'" "unix_socket_directories = '$ADV'" \
        "autovacuum = off" "max_wal_size = 4GB" "shared_buffers = 512MB" >> $ADV/pg/postgresql.conf
    }
    start $ADV/pg 21900
    q 21900 -d postgres -c "DROP DATABASE IF EXISTS test" -c "CREATE DATABASE test" 2>/dev/null || psql -X -h 127.0.0.1 -p 21900 -U postgres postgres -c "CREATE DATABASE test"
    ../../target/debug/outboxctl migrate --database-url postgres://postgres@127.0.0.1:21900/test --schema adv >/dev/null
    q 21900 -c "INSERT INTO adv.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        SELECT gen_random_uuid(), 'order', g::text, 'order.placed',
               jsonb_build_object('n', g, 'total', 1200, 'currency', 'USD'), 'k' || g
          FROM generate_series(1, $rows) g" -c "VACUUM ANALYZE adv.outbox" -c "CHECKPOINT"
    stop $ADV/pg
    copy $ADV/pg $ADV/snap
    echo "snapshot: $rows ready events, $(du -sh $ADV/snap | cut -f1)" ;;
  cg)
    name=$2 B=$3 n=$4 d=$ADV/cg_${name}_${B}_${n}_$$
    in=$ADV/cg_$name.$B.$n.in out=$ADV/cg_$name.$B.$n.out
    # Each statement PREPAREd once and EXECUTEd per cycle, as the relay's persistent statements
    # are (planned once per connection); BEGIN and COMMIT as they are.
    cycle cg "$name" | grep -v '^;$' | sed 's/;$//' | awk -v n="$n" '
      { if ($0 == "BEGIN" || $0 == "COMMIT") run[NR] = $0
        else { print "PREPARE s" NR " AS " $0; run[NR] = "EXECUTE s" NR } }
      END { for (i = 0; i < n; i++) for (j = 1; j <= NR; j++) print run[j] }' > "$in.body"
    { echo "SET search_path = adv"; echo "SET enable_seqscan = off"; cat "$in.body"; } > "$in"; rm "$in.body"
    copy $ADV/snap "$d"; chmod a+r "$in"
    su postgres -c "valgrind --tool=callgrind --callgrind-out-file=$out $PGBIN/postgres --single -D $d -c shared_preload_libraries= test < $in > $out.log 2>&1"
    grep -q ERROR "$out.log" && { grep ERROR "$out.log" | head -3 >&2; exit 1; }
    echo "cg $name B=$B n=$n $(grep -h '^summary\|^totals' "$out" | head -1)"
    rm -rf "$d" ;;
  sqltext)
    cycle "${3:-pgb}" "$2" ;;
  pgbench)
    name=$2 B=$3 c=$4 t=$5 d=$ADV/pgb
    f=$ADV/pgb_$name.$B.sql
    cycle pgb "$name" > "$f"
    copy $ADV/snap $d; start $d 21901
    [ -n "${DUP:-}" ] && q 21901 -c "CREATE TABLE adv.adv_dup AS SELECT 0::bigint AS claimed"
    w0=$(q 21901 -c "SELECT pg_current_wal_lsn()")
    r=$(PGOPTIONS="-c search_path=adv -c enable_seqscan=off" pgbench -n -M prepared -h 127.0.0.1 -p 21901 -U postgres -c "$c" -j "$c" -T "$t" -f "$f" test 2>&1) \
      || echo "  pgbench failed: $(echo "$r" | grep -m1 -i error)"
    w1=$(q 21901 -c "SELECT pg_current_wal_lsn()")
    read -r pub left < <(q 21901 -F ' ' -c "SELECT count(*) FILTER (WHERE published_at IS NOT NULL), count(*) FILTER (WHERE published_at IS NULL) FROM adv.outbox")
    wal=$(q 21901 -c "SELECT pg_wal_lsn_diff('$w1', '$w0')")
    [ -n "${DUP:-}" ] && dup=$(q 21901 -c "SELECT claimed - $pub FROM adv.adv_dup")
    stop $d
    [ -n "${DUP:-}" ] && echo "  claimed $((pub + dup)) rows for $pub published: $dup claimed twice (published twice)"
    tps=$(echo "$r" | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    python3 -c "print('pgbench $name B=$B c=$c T=$t: %d events/s (%s published, %s left), %s cycles/s, WAL %.0f bytes/event' % ($pub / $t, $pub, $left, '$tps', $wal / max($pub, 1)))"
    [ "$left" -gt 0 ] || echo "  WARNING: backlog drained before the end of the run: the rate is a lower bound" ;;
  *) sed -n 2,12p "$0"; exit 2 ;;
esac
