#!/usr/bin/env bash
# tx, lease and the two-step window claim (adv_window2_all) interleaved, batch 1000, -c 1 and 4:
# the window claim was added after bench/experiments/advisory/drain.sh ran, so it gets its own A/B.
set -euo pipefail
cd "$(dirname "$0")/.."
for r in 1 2; do for c in 1 4; do for m in tx lease adv_window2_all; do
  echo "final $r $(uptime | sed 's/.*load/load/') | $(./advisory.sh pgbench $m 1000 $c 20)"
done; done; done
