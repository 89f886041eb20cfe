#!/usr/bin/env bash
# Retention in log mode (issue 27 item 6): what removing N events the log has published costs the
# database today, `outboxctl prune` below the position and the VACUUM after it, against what
# rotation or partitions would cost instead: the same rows in a plain table of outbox's shape
# removed by TRUNCATE, and in a partitioned copy by detaching the partition and dropping it.
# WAL bytes (pg_current_wal_lsn() before and after, a CHECKPOINT first, so each statement writes
# the full-page images it would on pages not touched since the last checkpoint: the case of a
# retention of days) and wall time; per event, and beside the producer INSERT's WAL per event.
#
# N events with ~300-byte payloads (as JSON text, 190 of them hex digits, so that they compress
# about as much as real ones would, not to nothing; 340 bytes as jsonb), two days old, written by
# N/1000 producer transactions of 1000 with log mode on (the xid index built), published by one
# `relay --once --sink null --batch-size 1000`, then `prune --older-than 1d`.
#
# usage: bench/log-retention.sh [N=200000] [ROUNDS=1]   OUTBOXCTL_BIN: the binary (default: release)
#
# WAL is counted for the whole cluster, so nothing else may write to it meanwhile: by default
# the script runs a cluster of its own (the machine's PostgreSQL binaries, initdb as `nobody`,
# port 18796, default settings but autovacuum off, as on the test server; WAL_COMPRESSION=lz4 to
# try that setting) and removes it at the end. SHARED=1 uses a scratch database on DATABASE_URL instead (figures then include whatever
# else wrote to that server). Times are wall clock and noisy on a shared machine; WAL bytes are not.
#
# Needs: root (initdb as nobody) and /usr/lib/postgresql/<major>/bin, or SHARED=1; psql, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

n=${1:-200000}; rounds=${2:-1}
bin=${OUTBOXCTL_BIN:-target/release/outboxctl}
[ -n "${OUTBOXCTL_BIN:-}" ] || cargo build --release --locked --quiet
PORT=${PORT:-18796}
export NO_COLOR=1 PGOPTIONS="-c client_min_messages=warning"
unset OUTBOXCTL_LOG RUST_LOG OUTBOXCTL_SCHEMA

dir=$(mktemp -d)
chmod 755 "$dir"
if [ "${SHARED:-0}" = 1 ]; then
  admin=$DATABASE_URL
  DATABASE_URL=${DATABASE_URL%/*}/bench_log_retention
  cleanup() {
    psql -qAt "$admin" -c "DROP DATABASE IF EXISTS bench_log_retention" >/dev/null 2>&1 || true
    rm -rf "$dir"
  }
  trap cleanup EXIT
  psql -qAt "$admin" -c "DROP DATABASE IF EXISTS bench_log_retention" -c "CREATE DATABASE bench_log_retention"
  where="a scratch database on the shared server (SHARED=1)"
else
  PG=/usr/lib/postgresql/$(ls /usr/lib/postgresql | sort -n | tail -n1)/bin
  export PATH="$PG:$PATH"
  cleanup() {
    runuser -u nobody -- "$PG/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$dir"
  }
  trap cleanup EXIT
  mkdir -m 700 "$dir/data"
  chown nobody "$dir/data"
  runuser -u nobody -- "$PG/initdb" -D "$dir/data" -U postgres --auth=trust >/dev/null
  printf "autovacuum = off\nwal_compression = %s\n" "${WAL_COMPRESSION:-off}" >> "$dir/data/postgresql.conf"
  touch "$dir/server.log"; chown nobody "$dir/server.log"
  runuser -u nobody -- "$PG/pg_ctl" -D "$dir/data" -l "$dir/server.log" \
    -o "-p $PORT -k $dir/data -c listen_addresses=127.0.0.1" -w start >/dev/null
  DATABASE_URL="postgres://postgres@127.0.0.1:$PORT/postgres"
  where="a cluster of its own on port $PORT"
fi
export DATABASE_URL

s=bench_log_retention
lsn() { q -c "SELECT pg_current_wal_lsn()"; }
# wal_since LSN: "BYTES FPI_BYTES" written since LSN: all of it, and what of it is full-page images
# (pg_walinspect's pg_get_wal_stats).
wal_since() {
  local e
  e=$(lsn)
  q -c "SELECT pg_sleep(0.3)" >/dev/null  # the WAL writer flushes what e ends (pg_walinspect reads only flushed WAL)
  q -c "SELECT pg_wal_lsn_diff('$e', '$1')::bigint || ' ' || coalesce(sum(fpi_size), 0)
          FROM pg_get_wal_stats('$1', '$e')"
}
# timed SQL: runs SQL in one session after a CHECKPOINT; prints "WAL_BYTES FPI_BYTES MS" (the
# server's statement time, psql's \timing).
timed() {
  q -c "CHECKPOINT" >/dev/null
  local a out
  a=$(lsn)
  out=$(q -c "SET search_path TO $s" -c '\timing on' -c "$1")
  echo "$(wal_since "$a") $(grep -o 'Time: [0-9.]*' <<<"$out" | tail -n1 | cut -d' ' -f2)"
}
# result LABEL WAL_BYTES FPI_BYTES MS: one RESULT line, per event too.
result() {
  python3 -c "import sys; l, w, f, ms, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
print(f'RESULT {l:<26} wal_bytes={w:>10} wal_per_event={w / n:7.1f} fpi_per_event={f / n:7.1f} ms={ms:8.1f}')" "$@" "$n"
}
size() { q -c "SELECT pg_size_pretty(pg_total_relation_size('$s.$1'))"; }

echo "== bench/log-retention.sh $n $rounds: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- src || echo " + uncommitted src changes"), $("$bin" --version), $where"
q -c "SELECT version()"
q -c "SELECT format('shared_buffers %s, max_wal_size %s, full_page_writes %s, wal_compression %s, autovacuum %s',
                    current_setting('shared_buffers'), current_setting('max_wal_size'),
                    current_setting('full_page_writes'), current_setting('wal_compression'),
                    current_setting('autovacuum'))"
uptime
for r in $(seq "$rounds"); do
  echo "== round $r"
  bench_fresh "$bin" "$s"
  "$bin" log enable --schema "$s" >/dev/null 2>&1
  args=()
  for t in $(seq 0 $((n / 1000 - 1))); do
    args+=(-c "INSERT INTO $s.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key, created_at)
               SELECT '00000000-0000-0000-0000-000000000001', 'order', 'o-' || g, 'order.placed',
                      jsonb_build_object('orderId', 'o-' || g, 'totalCents', g % 100000, 'currency', 'USD',
                                         'lines', jsonb_build_array(jsonb_build_object('sku', 'sku-' || (g % 977), 'qty', 1 + g % 5)),
                                         'note', md5(g::text) || md5((g * 7)::text) || md5((g * 11)::text)
                                                 || md5((g * 13)::text) || md5((g * 17)::text) || left(md5((g * 19)::text), 30)),
                      'order.placed:o-' || g, now() - interval '2 days'
                 FROM generate_series($((t * 1000 + 1)), $((t * 1000 + 1000))) g")
  done
  q -c "CREATE EXTENSION IF NOT EXISTS pg_walinspect" -c "CHECKPOINT" >/dev/null
  a=$(lsn); q "${args[@]}" >/dev/null; read -r insert_wal insert_fpi <<<"$(wal_since "$a")"
  q -c "VACUUM ANALYZE $s.outbox" -c "CHECKPOINT" >/dev/null
  a=$(lsn)
  published=$("$bin" relay --once --schema "$s" --sink null --batch-size 1000 --json 2>/dev/null |
              python3 -c "import json, sys; print(json.load(sys.stdin)['published'])")
  read -r relay_wal relay_fpi <<<"$(wal_since "$a")"
  [ "$published" = "$n" ] || { echo "the relay published $published of $n" >&2; exit 1; }
  q -c "SELECT format('payload %s bytes as JSON text, %s as jsonb; outbox %s (heap %s, %s), %s indexes',
                      round(avg(length(payload::text))), round(avg(pg_column_size(payload))),
                      pg_size_pretty(pg_total_relation_size('$s.outbox')),
                      pg_size_pretty(pg_relation_size('$s.outbox')),
                      coalesce((SELECT array_to_string(reloptions, ', ') FROM pg_class WHERE oid = '$s.outbox'::regclass), '-'),
                      (SELECT count(*) FROM pg_index WHERE indrelid = '$s.outbox'::regclass))
                FROM $s.outbox"
  result "producer INSERT" "$insert_wal" "$insert_fpi" 0
  result "relay --once (log mode)" "$relay_wal" "$relay_fpi" 0

  # The copies: a plain table of outbox's shape (its columns, defaults, indexes and fillfactor)
  # for TRUNCATE, and a partitioned one by id range whose old partition holds the same rows.
  # A unique index whose key lacks the partition key cannot be built on a partitioned table:
  # it is built without UNIQUE, and said so.
  opts=$(q -c "SELECT coalesce(array_to_string(reloptions, ', '), 'fillfactor=100') FROM pg_class WHERE oid = '$s.outbox'::regclass")
  q -c "SET search_path TO $s" \
    -c "CREATE TABLE rot (LIKE outbox INCLUDING ALL) WITH ($opts)" \
    -c "INSERT INTO rot SELECT * FROM outbox" \
    -c "CREATE TABLE rotp (LIKE outbox INCLUDING DEFAULTS INCLUDING CONSTRAINTS) PARTITION BY RANGE (id)" \
    -c "CREATE TABLE rotp_old PARTITION OF rotp FOR VALUES FROM (MINVALUE) TO ($((n + 1))) WITH ($opts)" \
    -c "CREATE TABLE rotp_new PARTITION OF rotp FOR VALUES FROM ($((n + 1))) TO (MAXVALUE) WITH ($opts)" \
    -c "DO \$\$ DECLARE d text; BEGIN
          FOR d IN SELECT regexp_replace(pg_get_indexdef(indexrelid), 'INDEX \S+ ON \S+ USING', 'INDEX ON rotp USING')
                     FROM pg_index WHERE indrelid = 'outbox'::regclass LOOP
            BEGIN EXECUTE d;
            EXCEPTION WHEN feature_not_supported OR invalid_table_definition THEN
              RAISE WARNING 'partitioned copy: not unique across partitions: %', d;
              EXECUTE replace(d, 'CREATE UNIQUE INDEX', 'CREATE INDEX');
            END;
          END LOOP; END \$\$" \
    -c "INSERT INTO rotp SELECT * FROM outbox" \
    -c "VACUUM ANALYZE rot" -c "VACUUM ANALYZE rotp" >/dev/null
  echo "copies: rot $(size rot), rotp_old $(size rotp_old) ($(q -c "SELECT count(*) FROM $s.rotp_old") rows)"

  # (a) today's path: prune below the position, then VACUUM.
  before=$(size outbox)
  q -c "CHECKPOINT" >/dev/null
  a=$(lsn); t0=$(bench_now)
  report=$("$bin" prune --schema "$s" --older-than 1d --json)
  t1=$(bench_now); read -r prune_wal prune_fpi <<<"$(wal_since "$a")"
  read -r deleted batches elapsed <<<"$(python3 -c "import json, sys; j = json.loads(sys.argv[1])
print(j['published']['deleted'], j['batches'], j['elapsed_ms'])" "$report")"
  [ "$deleted" = "$n" ] || { echo "prune deleted $deleted of $n: $report" >&2; exit 1; }
  echo "prune: deleted $deleted in $batches batches, elapsed_ms $elapsed (wall $(python3 -c "print(round(($t1 - $t0) * 1000))") ms)"
  result "prune (log mode)" "$prune_wal" "$prune_fpi" "$elapsed"
  read -r w f ms <<<"$(timed "VACUUM outbox")"
  result "VACUUM outbox" "$w" "$f" "$ms"
  result "prune + VACUUM" "$((prune_wal + w))" "$((prune_fpi + f))" "$(python3 -c "print($elapsed + $ms)")"
  echo "outbox: $before before the prune, $(size outbox) after the VACUUM ($(q -c "SELECT count(*) FROM $s.outbox") rows)"

  # (b) rotation: TRUNCATE of a table, DETACH and DROP of a partition.
  read -r w f ms <<<"$(timed "TRUNCATE rot")"
  result "TRUNCATE (rotation)" "$w" "$f" "$ms"
  read -r dw df dms <<<"$(timed "ALTER TABLE rotp DETACH PARTITION rotp_old")"
  result "DETACH PARTITION" "$dw" "$df" "$dms"
  read -r w f ms <<<"$(timed "DROP TABLE rotp_old")"
  result "DROP TABLE (partition)" "$w" "$f" "$ms"
  result "DETACH + DROP" "$((dw + w))" "$((df + f))" "$(python3 -c "print($dms + $ms)")"
  q -c "DROP SCHEMA $s CASCADE" >/dev/null
done
uptime
