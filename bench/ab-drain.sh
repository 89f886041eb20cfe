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
. "$(dirname "$0")/lib.sh"
S=${SCHEMA:-bench_ab}
trap 'q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true' EXIT
setup() {
  bench_fresh "$1" $S
  bench_seed_ab $S 200000
  q -c "CHECKPOINT"
}
drain() {
  local s e
  s=$(bench_now)
  # shellcheck disable=SC2086 # $2: extra flags, split on purpose
  for _ in $(seq "$RELAYS"); do "$1" relay --schema $S --once --sink null --batch-size 1000 --mode "$MODE" $2 >/dev/null & done
  wait
  e=$(bench_now)
  bench_rate 200000 "$s" "$e"
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
