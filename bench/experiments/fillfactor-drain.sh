#!/usr/bin/env bash
# Does the outbox's fillfactor change a drain with no snapshot held? One binary, ROUNDS rounds,
# each a 200k backlog (bench_seed_ab) drained by two `relay --once --sink null --mode MODE` at
# fillfactor 70 (migration 2's) and then 50 (migration 12's), set before the backlog is loaded.
#   bench/experiments/fillfactor-drain.sh [BIN=target/release/outboxctl] [ROUNDS=3] [MODE=tx]
set -euo pipefail
cd "$(dirname "$0")/../.."
# shellcheck source=bench/lib.sh
. bench/lib.sh
B=${1:-target/release/outboxctl} ROUNDS=${2:-3} MODE=${3:-tx} S=bench_ffab
trap 'q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true' EXIT
uptime
"$B" --version
for r in $(seq "$ROUNDS"); do
  for ff in 70 50; do
    bench_fresh "$B" $S
    q -c "ALTER TABLE $S.outbox SET (fillfactor = $ff)"
    bench_seed_ab $S 200000
    q -c "CHECKPOINT"
    s=$(bench_now)
    for _ in 1 2; do "$B" relay --schema $S --once --sink null --batch-size 1000 --mode "$MODE" >/dev/null & done
    wait
    e=$(bench_now)
    echo "round $r $MODE fillfactor $ff: $(bench_rate 200000 "$s" "$e") events/s"
  done
done
