#!/usr/bin/env bash
# Runs the peer queues' drain benchmarks (../shared/peers, set up once with its setup.sh) and
# `outboxctl bench` in one session, so the figures compare as ratios on the same machine.
# usage: bench/compare.sh [RUNS]        (default 3; output: one RESULT line per peer run, then the bench JSON)
# BASELINE_BIN=path/to/older/outboxctl also runs that binary's bench in every round, right after
# this one's, so a change is measured against what it replaces in the same session.
set -uo pipefail
cd "$(dirname "$0")/.."
runs=${1:-3}
peers=${PEERS_DIR:-../shared/peers}
. bench/lib.sh
cargo build --release --quiet
uptime
for r in $(seq "$runs"); do
  for p in "graphile-worker 50000" "pg-boss 50000" "pgmq 50000" "pgqueuer 50000" "seed-relay 10000" "sql-ceiling 200000"; do
    set -- $p
    echo "run $r $1: $("$peers/run.sh" "$1" "$2" 2>&1 | grep -E 'RESULT|events_per_s' | tail -n1)"
  done
  echo "run $r outboxctl: $(target/release/outboxctl bench --events 200000 --prune-rows 200000 --json | tr -d '\n ')"
  if [ -n "${BASELINE_BIN:-}" ]; then
    echo "run $r baseline: $("$BASELINE_BIN" bench --events 200000 --prune-rows 200000 --json | tr -d '\n ')"
  fi
done
