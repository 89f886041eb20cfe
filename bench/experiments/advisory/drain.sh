#!/usr/bin/env bash
# The drain matrix of bench/experiments/advisory.sh: ROUNDS rounds, each over batch 1000 and 50, -c 1 and 4,
# every cycle in turn (interleaved, so the machine's drift hits all of them), -T $T seconds each.
#   bench/experiments/advisory/drain.sh [ROUNDS=2] [T=20]
set -euo pipefail
cd "$(dirname "$0")/.."
ROUNDS=${1:-2} T=${2:-20}
for r in $(seq "$ROUNDS"); do
  for b in 1000 50; do
    for c in 1 4; do
      cycles="tx lease adv_rcte2_all adv_filter_all"
      [ $b = 1000 ] && cycles="$cycles adv_limit_all adv_rcte_all adv_rcte2_ids"
      for m in $cycles; do
        echo "round $r $(uptime | sed 's/.*load/load/') | $(./advisory.sh pgbench "$m" "$b" "$c" "$T")"
      done
    done
  done
done
