#!/usr/bin/env bash
# Drain A/B of two outboxctl binaries in one session: each round refills a 200k-event backlog
# (migrated by that binary), then times two `relay --once --sink null --batch-size 1000` in parallel,
# alternating the binaries so the machine's drift hits both.
#   bench/ab-drain.sh OLD_BIN NEW_BIN [ROUNDS=3] [MODE=tx]
# OLD_ARGS / NEW_ARGS: extra relay flags of each side (e.g. OLD_ARGS="--pipeline-depth 1"
# NEW_ARGS="--pipeline-depth 2" with the same binary twice); RELAYS (default 2): relays per drain;
# SCHEMA (default bench_ab): the scratch schema, so two runs beside each other do not collide.
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-3} MODE=${4:-tx}
OLD_ARGS=${OLD_ARGS:-} NEW_ARGS=${NEW_ARGS:-} RELAYS=${RELAYS:-2}
: "${DATABASE_URL:=postgres://postgres@127.0.0.1:5432/test}"
export DATABASE_URL
S=${SCHEMA:-bench_ab}
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
  # shellcheck disable=SC2086 # $2: extra flags, split on purpose
  for _ in $(seq "$RELAYS"); do "$1" relay --schema $S --once --sink null --batch-size 1000 --mode "$MODE" $2 >/dev/null & done
  wait
  e=$(date +%s.%N)
  python3 -c "print(round(200000 / ($e - $s)))"
}
uptime
for r in $(seq "$ROUNDS"); do
  for b in old new; do
    bin=$OLD extra=$OLD_ARGS
    [ $b = new ] && bin=$NEW extra=$NEW_ARGS
    setup "$bin"
    echo "round $r $MODE $b${extra:+ ($extra)}: $(drain "$bin" "$extra") events/s"
  done
done
