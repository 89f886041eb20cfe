#!/usr/bin/env bash
# Drain A/B of two outboxctl binaries in one session: each round refills a 200k-event backlog
# (migrated by that binary), then times two `relay --once --sink null --batch-size 1000` in parallel,
# alternating the binaries so the machine's drift hits both.
#   bench/ab-drain.sh OLD_BIN NEW_BIN [ROUNDS=3] [MODE=tx]
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-3} MODE=${4:-tx}
: "${DATABASE_URL:=postgres://postgres@127.0.0.1:5432/test}"
export DATABASE_URL
S=bench_ab
q() { psql -qAt "$DATABASE_URL" -v ON_ERROR_STOP=1 "$@"; }
trap 'q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true' EXIT
setup() {
  q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
  "$1" migrate --schema $S >/dev/null
  q -c "INSERT INTO $S.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        SELECT gen_random_uuid(), 'order', g::text, 'order.placed',
               jsonb_build_object('n', g, 'total', 1200, 'currency', 'USD'), 'k' || g
          FROM generate_series(1, 200000) g" -c "VACUUM ANALYZE $S.outbox" -c "CHECKPOINT"
}
drain() {
  local s e
  s=$(date +%s.%N)
  for _ in 1 2; do "$1" relay --schema $S --once --sink null --batch-size 1000 --mode "$MODE" >/dev/null & done
  wait
  e=$(date +%s.%N)
  python3 -c "print(round(200000 / ($e - $s)))"
}
uptime
for r in $(seq "$ROUNDS"); do
  for b in old new; do
    bin=$OLD; [ $b = new ] && bin=$NEW
    setup "$bin"
    echo "round $r $MODE $b: $(drain "$bin") events/s"
  done
done
