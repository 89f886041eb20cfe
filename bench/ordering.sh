#!/usr/bin/env bash
# Ordered vs unordered drain, interleaved (each round runs every shape unordered, then ordered, so
# the drift of a shared machine hits both), with a release build:
#   cargo build --release --locked && bench/ordering.sh [ROUNDS=2] [BIN=target/release/outboxctl]
#   bench/ordering.sh inserts [ROUNDS=2] [BIN]    # the producer side only (see below)
# Shapes: 100k keys x 1 event, 1k keys x 100 events, 1 key x 100k events. Sinks: null (tx mode)
# and HTTP (lease mode; bench/http_204.py, an asyncio consumer answering 204). Two relays in
# parallel per drain (`relay --once --batch-size 500`, default --concurrency 16), like
# ab-drain.sh. A drain that leaves events pending is flagged (and its rate counts only what was
# published). The summary gives ordered / unordered per
# round and the targets of issue 12 (>= 0.5x; 1 key x 100k >= 10k events/s to the null sink).
# SHAPES="1000x1 10x100 1x1000" bench/ordering.sh 1 target/debug/outboxctl: a quick smoke run.
#
# `inserts`: the producer-side cost of an ordered type against an unordered one in the same
# table (ordering on for `ord` only): bulk `publish --file` of 100k lines, and seed-style
# single-row INSERTs (pgbench, 4 clients, 10 s), interleaved.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
WHAT=drain
if [ "${1:-}" = inserts ]; then WHAT=inserts; shift; fi
ROUNDS=${1:-2} BIN=${2:-target/release/outboxctl}
S=bench_order
HTTP_PORT=${HTTP_PORT:-18800}
TMP=$(mktemp -d)
HTTP_PID=
cleanup() {
  [ -n "$HTTP_PID" ] && kill "$HTTP_PID" 2>/dev/null || true
  q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true
  rm -rf "$TMP"
}
trap cleanup EXIT
echo "$(date -u +%FT%TZ) $WHAT, $ROUNDS rounds, $($BIN --version), $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg)"

setup() { # keys per_key ordered
  local keys=$1 per=$2 ordered=$3
  bench_fresh "$BIN" $S
  if [ "$ordered" = ordered ]; then "$BIN" ordering enable --schema $S -q >/dev/null; fi
  q -c "INSERT INTO $S.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        SELECT '00000000-0000-0000-0000-000000000001', 'order', k::text, 'order.placed',
               jsonb_build_object('n', n, 'total', 1200, 'currency', 'USD'), k || '-' || n
          FROM generate_series(1, $per) n, generate_series(1, $keys) k ORDER BY n, k" \
    -c "VACUUM ANALYZE $S.outbox" -c "CHECKPOINT"
}

drain() { # sink mode total -> "events/s seconds left"
  local s e left
  s=$(bench_now)
  for _ in 1 2; do
    "$BIN" relay --schema $S --once --sink "$1" --mode "$2" --batch-size 500 >/dev/null 2>>"$TMP/relay.err" &
  done
  wait
  e=$(bench_now)
  left=$(q -c "SELECT count(*) FROM $S.outbox WHERE published_at IS NULL")
  python3 -c "print(round(($3 - $left) / ($e - $s)), f'{$e - $s:.2f}', $left)"
}

if [ $WHAT = drain ]; then
  python3 bench/http_204.py "$HTTP_PORT" 2>"$TMP/http.log" &
  HTTP_PID=$!
  for _ in $(seq 50); do (exec 3<>/dev/tcp/127.0.0.1/$HTTP_PORT) 2>/dev/null && break; sleep 0.1; done
  : >"$TMP/results"
  for r in $(seq "$ROUNDS"); do
    echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg)"
    for shape in ${SHAPES:-100000x1 1000x100 1x100000}; do
      set -- ${shape/x/ }
      keys=$1 per=$2 total=$((keys * per))
      for sink in null http; do
        [ "$keys" = 1 ] && [ $sink = http ] && continue
        if [ $sink = null ]; then spec=null mode=tx; else spec=http://127.0.0.1:$HTTP_PORT/e mode=lease; fi
        for o in unordered ordered; do
          setup "$keys" "$per" $o
          read -r rate secs left < <(drain "$spec" $mode $total)
          echo "round $r: ${keys} keys x ${per}, sink $sink ($mode), $o: $rate events/s ($secs s)$([ "$left" = 0 ] || echo ", $left LEFT UNPUBLISHED")"
          echo "$r ${keys}x${per} $sink $o $rate $left" >>"$TMP/results"
        done
      done
    done
  done
  echo
  echo "| shape | sink | round | unordered events/s | ordered events/s | ordered / unordered | target |"
  echo "|---|---|---|---|---|---|---|"
  python3 - "$TMP/results" <<'PY'
import sys
rows = [l.split() for l in open(sys.argv[1])]
got = {(r, s, k, o): (int(v), int(left)) for r, s, k, o, v, left in rows}
for (r, s, k, o), (v, left) in got.items():
    if o != "ordered":
        continue
    u, uleft = got[(r, s, k, "unordered")]
    ratio = v / u
    if s.startswith("1x"):
        target = "ordered >= 10,000/s " + ("✔" if v >= 10_000 else "✘")
    else:
        target = ">= 0.5x " + ("✔" if ratio >= 0.5 else "✘")
    if left or uleft:
        target = f"✘ ({left} ordered, {uleft} unordered left unpublished)"
    print(f"| {s.replace('x', ' keys x ')} | {k} | {r} | {u:,} | {v:,} | {ratio:.2f} | {target} |")
PY
  exit 0
fi

# Producer side: the same inserts with ordering off (no key index: migration 7), and with ordering
# on for `ord` only, into an unordered type (`plain`) and the ordered one: while any type is
# ordered the key index exists, and every insert pays for it, ordered or not.
bench_fresh "$BIN" $S
for ty in plain ord; do
  python3 - "$ty" >"$TMP/$ty.jsonl" <<'PY'
import json, sys
ty = sys.argv[1]
for g in range(100_000):
    print(json.dumps({"event_type": "order.placed", "aggregate_type": ty, "aggregate_id": str(g % 10_000),
                      "payload": {"n": g, "total": 1200, "currency": "USD"}}))
PY
  cat > "$TMP/$ty.sql" <<SQL
INSERT INTO $S.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
VALUES ('00000000-0000-0000-0000-000000000001', '$ty', (random() * 10000)::int::text, 'order.placed',
        '{"n": 1, "total": 1200, "currency": "USD"}', gen_random_uuid()::text);
SQL
done
: >"$TMP/inserts"
for r in $(seq "$ROUNDS"); do
  echo "round $r: load $(cut -d' ' -f1-3 /proc/loadavg)"
  for case in "off plain" "on plain" "on ord"; do
    set -- $case
    sw=$1 ty=$2
    q -c "TRUNCATE $S.outbox" -c "CHECKPOINT" >/dev/null
    if [ "$sw" = off ]; then
      "$BIN" ordering disable --schema $S -q >/dev/null
    else
      "$BIN" ordering enable --schema $S --aggregate-type ord -q >/dev/null
    fi
    s=$(bench_now)
    "$BIN" publish --schema $S -q --file "$TMP/$ty.jsonl" >/dev/null
    e=$(bench_now)
    rate=$(bench_rate 100000 "$s" "$e")
    echo "round $r: ordering $sw, publish --file, 100k lines, type $ty: $rate events/s"
    echo "$r publish $sw-$ty $rate" >>"$TMP/inserts"
    q -c "TRUNCATE $S.outbox" -c "CHECKPOINT" >/dev/null
    tps=$(pgbench -n -c 4 -j 2 -T 10 -f "$TMP/$ty.sql" "$DATABASE_URL" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p')
    echo "round $r: ordering $sw, single-row INSERTs (pgbench -c 4 -T 10), type $ty: $tps tps"
    echo "$r pgbench $sw-$ty $tps" >>"$TMP/inserts"
  done
done
echo
echo "| inserts | round | ordering off | ordering on, unordered type | ordering on, ordered type | on/off (ordered type) |"
echo "|---|---|---|---|---|---|"
python3 - "$TMP/inserts" <<'PY'
import sys
got = {}
for l in open(sys.argv[1]):
    r, what, case, v = l.split()
    got[(r, what, case)] = float(v)
for (r, what, case), v in sorted(got.items()):
    if case != "off-plain":
        continue
    on_p, on_o = got[(r, what, "on-plain")], got[(r, what, "on-ord")]
    name = "publish --file, 100k lines (events/s)" if what == "publish" else "single-row INSERT, pgbench -c 4 (tps)"
    print(f"| {name} | {r} | {v:,.0f} | {on_p:,.0f} | {on_o:,.0f} | {on_o / v:.2f} |")
PY
