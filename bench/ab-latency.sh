#!/usr/bin/env bash
# Latency A/B of two outboxctl binaries in one session: alternates `outboxctl bench` runs whose drain phases are
# tiny (--events 1000, no prune), so each run is essentially the latency phase (daemon, 1000 events/s for 5 s,
# commit -> sink) and the delayed-events phase; prints p50/p99/max of both per run.
#   bench/ab-latency.sh OLD_BIN NEW_BIN [ROUNDS=5]
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-5}
. "$(dirname "$0")/lib.sh"
uptime
for r in $(seq "$ROUNDS"); do
  for b in old new; do
    bin=$OLD; [ $b = new ] && bin=$NEW
    "$bin" bench --events 1000 --prune-rows 0 --json | python3 -c "
import json, sys
j = json.load(sys.stdin); l = j['latency']; d = j['delayed']
print(f\"round $r $b: latency p50 {l['p50_ms']:.2f} p99 {l['p99_ms']:.2f} max {l['max_ms']:.2f} ms; delayed p99 {d['p99_ms']:.2f} ms\")"
  done
done
