#!/usr/bin/env bash
# Server instructions per cycle (callgrind, single-user backend) of every cycle of bench/experiments/advisory.sh:
# per cycle = (Ir of 1+K cycles - Ir of 1 cycle) / K, so the startup, the first cycle (catalog caches,
# planning the PREPAREd statements) and the shutdown are left out (the shutdown checkpoint's extra
# dirty buffers after K more cycles are counted: ~150 buffers, well under 1 % of a cycle).
#   ADV=/tmp/adv-cg bench/experiments/advisory/cg.sh   (after `ADV=/tmp/adv-cg bench/experiments/advisory.sh setup 200000`)
set -euo pipefail
cd "$(dirname "$0")/.."
for b in 1000 50; do
  k=10; [ $b = 50 ] && k=100
  for c in tx lease_claim lease adv_rcte_none adv_rcte_all adv_rcte_ids adv_rcte2_all adv_filter_all adv_limit_all; do
    one=$(./advisory.sh cg $c $b 1 | sed 's/.*summary: //')
    many=$(./advisory.sh cg $c $b $((k + 1)) | sed 's/.*summary: //')
    python3 -c "print('cg %-15s B=%-4s K=%-3s Ir(1)=%-11s Ir(1+K)=%-12s per cycle %.3f M, per event %.0f' % ('$c', $b, $k, $one, $many, ($many - $one) / $k / 1e6, ($many - $one) / $k / $b))"
  done
done
