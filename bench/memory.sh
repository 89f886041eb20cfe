#!/usr/bin/env bash
# Peak memory (maximum resident set size) of the relay, bulk publish and a long list, with payloads
# far larger than usual. Needs GNU time (/usr/bin/time) and a PostgreSQL to write a scratch schema
# into (dropped at the end).
#
#   DATABASE_URL=postgres://postgres@127.0.0.1:5432/test bench/memory.sh [path/to/outboxctl]
#
# Cases (each printed as "case: max RSS, wall time"):
#   relay   60 rows of 5 MB (compressible text: ~57 KB stored each), relay --once --sink stdout
#   publish one JSON-lines file of 300 MB (2000 lines of 150 KB) with --json
#   list    events list --limit 1000000 --json over 1,000,000 small rows
set -euo pipefail
BIN=${1:-target/release/outboxctl}
. "$(dirname "$0")/lib.sh"
export OUTBOXCTL_SCHEMA=${OUTBOXCTL_SCHEMA:-bench_memory}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"; psql -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $OUTBOXCTL_SCHEMA CASCADE" >/dev/null 2>&1 || true' EXIT
sql() { psql -qAt "$DATABASE_URL" -v ON_ERROR_STOP=1 -c "SET search_path TO $OUTBOXCTL_SCHEMA; $1"; }
measure() { # name, command...
  local name=$1; shift
  # Through a pipe: the stdout sink refuses a stdout that is /dev/null.
  { /usr/bin/time -f "%M %e %x" -o "$TMP/time" "$@" 2>"$TMP/err" || true; } | cat >/dev/null
  read -r kib secs rc <"$TMP/time"
  printf '%-8s max RSS %5d MiB  wall %6.2fs  exit %s\n' "$name" $((kib / 1024)) "$secs" "$rc"
}
psql -q "$DATABASE_URL" -c "DROP SCHEMA IF EXISTS $OUTBOXCTL_SCHEMA CASCADE" >/dev/null 2>&1
"$BIN" migrate >/dev/null

sql "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
     SELECT gen_random_uuid(), 'blob', g::text, 'blob.stored', jsonb_build_object('s', repeat('x', 5000000)), 'r' || g
       FROM generate_series(1, 60) g"
measure relay "$BIN" relay --once --sink stdout

sql "TRUNCATE outbox"
python3 - "$TMP/big.jsonl" <<'PY'
import json, sys, random, string
pad = ''.join(random.choice(string.ascii_letters) for _ in range(150_000))
with open(sys.argv[1], 'w') as f:
    for i in range(2000):
        f.write(json.dumps({"event_type": "blob.stored", "aggregate_type": "blob", "aggregate_id": str(i),
                            "payload": {"s": pad[i:] + pad[:i]}}) + "\n")
PY
measure publish "$BIN" publish --file "$TMP/big.jsonl" --json

sql "TRUNCATE outbox"
sql "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
     SELECT gen_random_uuid(), 'order', g::text, 'order.placed', jsonb_build_object('n', g, 'note', 'an ordinary small event'), 'l' || g
       FROM generate_series(1, 1000000) g"
measure list "$BIN" events list --limit 1000000 --json
