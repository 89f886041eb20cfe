#!/usr/bin/env bash
# Ordered vs unordered drain, interleaved (each round runs every shape unordered, then ordered, so
# the drift of a shared machine hits both), with a release build:
#   cargo build --release && bench/ordering.sh [ROUNDS=2] [BIN=target/release/outboxctl]
# Shapes: 100k keys x 1 event, 1k keys x 100 events, 1 key x 100k events. Sinks: null (tx mode)
# and HTTP (lease mode, a local python HTTP server answering 204). Two relays in parallel per
# drain, like ab-drain.sh. Then the producer-side insert cost: bulk INSERT ... SELECT and
# single-row inserts (pgbench, seed style) into an ordered and an unordered aggregate type.
set -euo pipefail
ROUNDS=${1:-2} BIN=${2:-target/release/outboxctl}
: "${DATABASE_URL:=postgres://postgres@127.0.0.1:5432/test}"
export DATABASE_URL
S=bench_order
HTTP_PORT=18750
q() { psql -qAt "$DATABASE_URL" -v ON_ERROR_STOP=1 "$@"; }
python3 - "$HTTP_PORT" <<'PY' &
import sys, http.server, socketserver
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(204); self.send_header("Content-Length", "0"); self.end_headers()
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
S(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
PY
HTTP_PID=$!
trap 'kill $HTTP_PID 2>/dev/null || true; q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true' EXIT
setup() { # keys per_key ordered
  local keys=$1 per=$2 ordered=$3
  q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
  "$BIN" migrate --schema $S >/dev/null
  q -c "INSERT INTO $S.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        SELECT '00000000-0000-0000-0000-000000000001', 'order', k::text, 'order.placed',
               jsonb_build_object('n', n, 'total', 1200, 'currency', 'USD'), k || '-' || n
          FROM generate_series(1, $per) n, generate_series(1, $keys) k ORDER BY n, k" \
    -c "VACUUM ANALYZE $S.outbox" -c "CHECKPOINT"
  if [ "$ordered" = ordered ]; then "$BIN" ordering enable --schema $S -q >/dev/null 2>&1; fi
}
drain() { # sink mode total
  local s e
  s=$(date +%s.%N)
  for _ in 1 2; do "$BIN" relay --schema $S --once --sink "$1" --mode "$2" --batch-size 500 >/dev/null 2>&1 & done
  wait
  e=$(date +%s.%N)
  left=$(q -c "SELECT count(*) FROM $S.outbox WHERE published_at IS NULL")
  python3 -c "print(f'{round($3 / ($e - $s))} events/s ({$e - $s:.2f} s, {$left} left)')"
}
uptime
for r in $(seq "$ROUNDS"); do
  for shape in "100000 1" "1000 100" "1 100000"; do
    set -- $shape; keys=$1 per=$2 total=$((keys * per))
    for sink in null http; do
      [ "$keys" = 1 ] && [ $sink = http ] && continue
      if [ $sink = null ]; then spec=null mode=tx; else spec=http://127.0.0.1:$HTTP_PORT/e mode=lease; fi
      for o in unordered ordered; do
        setup "$keys" "$per" $o
        echo "round $r: ${keys} keys x ${per}, sink $sink ($mode), $o: $(drain "$spec" $mode $total)"
      done
    done
  done
done
# Producer side: the same inserts into an unordered and an ordered type (ordering on for 'ord').
q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
"$BIN" migrate --schema $S >/dev/null
"$BIN" ordering enable --schema $S --aggregate-type ord -q >/dev/null 2>&1
for r in $(seq "$ROUNDS"); do
  for ty in plain ord; do
    t=$( { /usr/bin/time -f %e psql -qAt "$DATABASE_URL" -c "INSERT INTO $S.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        SELECT gen_random_uuid(), '$ty', g::text, 'order.placed', jsonb_build_object('n', g), '$ty-$r-' || g
          FROM generate_series(1, 100000) g" >/dev/null; } 2>&1 )
    echo "round $r: bulk insert 100k rows, type $ty: ${t}s"
    cat > /tmp/bench_order_$ty.sql <<SQL
INSERT INTO $S.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
VALUES (gen_random_uuid(), '$ty', (random() * 1000)::int::text, 'order.placed', '{"n": 1}', gen_random_uuid()::text)
ON CONFLICT (idempotency_key) DO NOTHING;
SQL
    echo "round $r: single-row inserts, type $ty: $(pgbench -n -q -c 4 -T 10 -f /tmp/bench_order_$ty.sql "$DATABASE_URL" 2>/dev/null | grep -E '^tps' | sed 's/ (without.*//')"
  done
done
