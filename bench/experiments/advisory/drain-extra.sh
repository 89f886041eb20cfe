#!/usr/bin/env bash
# The runs added after bench/experiments/advisory/drain.sh 2 20 (2026-12-01 17:38-18:14): the ones that did not
# start there (port still held by a run whose pgbench failed: adv_rcte2_ids -c 4 ran out of
# lock table, see the log), the two-step window claim, and DUP=1 runs counting rows claimed twice.
set -euo pipefail
cd "$(dirname "$0")/.."
p() { echo "$1 $(uptime | sed 's/.*load/load/') | $(./advisory.sh pgbench "${@:2}")"; }
for r in 1 2; do
  p "extra $r" tx 50 1 20; p "extra $r" lease 50 1 20; p "extra $r" adv_rcte2_all 50 1 20
  for c in 1 4; do p "extra $r" adv_window2_all 1000 $c 20; p "extra $r" adv_window2_all 50 $c 20; done
  p "extra $r" adv_rcte2_ids 1000 4 20
done
for m in adv_filter_all adv_limit_all adv_rcte_all adv_rcte2_all adv_window2_all; do
  DUP=1 p "dup" $m 1000 4 10
done
