#!/usr/bin/env bash
# `outboxctl bench` A/B of two binaries in one session, alternating (old, new / new, old, ...) so
# the machine's drift hits both; prints each run's JSON, then one summary line per figure with
# every round's value (publish and drain events/s, latency p99, peak relay RSS).
#   bench/ab-bench.sh OLD_BIN NEW_BIN [ROUNDS=3] [EVENTS=200000]
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-3} EVENTS=${4:-200000}
. "$(dirname "$0")/lib.sh"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "$(date -u +%FT%TZ) $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "old: $OLD ($("$OLD" --version))"
echo "new: $NEW ($("$NEW" --version))"
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for which in $order; do
    bin=$OLD; [ "$which" = new ] && bin=$NEW
    line=$("$bin" bench --events "$EVENTS" --prune-rows "$EVENTS" --json | tr -d '\n ')
    echo "run $r $which: $line" | tee -a "$out"
  done
done
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$out" <<'PY'
import json, sys
runs = {"old": [], "new": []}
for l in open(sys.argv[1]):
    head, js = l.split(": ", 1)
    runs[head.split()[2]].append(json.loads(js))
figs = [("publish events/s", lambda j: j["publish"]["per_second"], "{:,.0f}"),
        ("drain events/s", lambda j: j["drain"]["per_second"], "{:,.0f}"),
        ("latency p99 ms", lambda j: j["latency"]["p99_ms"], "{:.1f}"),
        ("peak relay RSS MiB", lambda j: j["drain"]["peak_rss_mib"], "{:.1f}")]
print("| figure | new (rounds) | old (rounds) | new/old (means) |")
print("|---|---|---|---|")
for name, f, fmt in figs:
    n = [f(j) for j in runs["new"]]; o = [f(j) for j in runs["old"]]
    print(f"| {name} | {' / '.join(fmt.format(x) for x in n)} | {' / '.join(fmt.format(x) for x in o)} "
          f"| {sum(n)/len(n) / (sum(o)/len(o)):.2f} |")
PY
