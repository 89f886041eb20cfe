#!/usr/bin/env bash
# CPU A/B of two binaries' drains, for a machine too loaded for wall-clock figures: each round
# refills a backlog (migrated by that binary), then one `relay --once --sink null` drains it, and
# the CPU time spent is summed: the relay's own (user+sys) and every PostgreSQL server process's
# (from /proc, before and after). CPU seconds per 100k events depend far less on what else the
# machine runs than events/s do. Binaries alternate.
#   bench/ab-cpu.sh OLD_BIN NEW_BIN [ROUNDS=5] [EVENTS=200000] [MODE=tx]
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-5} EVENTS=${4:-200000} MODE=${5:-tx}
. "$(dirname "$0")/lib.sh"
S=bench_abcpu
TCK=$(getconf CLK_TCK)
trap 'q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true' EXIT
# CPU ticks of every postgres process: utime+stime, and cutime+cstime (the postmaster is credited
# with the backends it reaped, so a relay's backend that exits with it is still counted).
pg_ticks() {
  local t=0 p f
  for p in $(pgrep -x postgres); do
    f=$(cat /proc/$p/stat 2>/dev/null) || continue
    f=${f##*) }
    set -- $f
    t=$((t + ${12} + ${13} + ${14} + ${15}))
  done
  echo $t
}
setup() {
  bench_fresh "$1" $S
  bench_seed_ab $S "$EVENTS"
  q -c "CHECKPOINT" >/dev/null
}
echo "$(date -u +%FT%TZ) $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); $EVENTS events, mode $MODE"
echo "old: $OLD ($("$OLD" --version))"
echo "new: $NEW ($("$NEW" --version))"
res=$(mktemp)
for r in $(seq "$ROUNDS"); do
  if [ $((r % 2)) = 1 ]; then order="old new"; else order="new old"; fi
  for which in $order; do
    bin=$OLD; [ "$which" = new ] && bin=$NEW
    setup "$bin"
    before=$(pg_ticks)
    s=$(bench_now)
    relay=$( { /usr/bin/time -f "%U %S" "$bin" relay --schema $S --once --sink null --batch-size 1000 \
                 --mode "$MODE" -q >/dev/null; } 2>&1 | tail -n1)
    e=$(bench_now)
    after=$(pg_ticks)
    left=$(q -c "SELECT count(*) FROM $S.outbox WHERE published_at IS NULL")
    [ "$left" = 0 ] || { echo "$bin left $left events" >&2; exit 1; }
    python3 - "$which" "$r" "$relay" "$before" "$after" "$TCK" "$s" "$e" "$EVENTS" <<'PY' | tee -a "$res"
import sys
which, r, relay, b, a, tck, s, e, n = sys.argv[1:]
u, sy = map(float, relay.split())
pg = (int(a) - int(b)) / int(tck)
n = int(n)
print(f"round {r} {which}: relay cpu {u+sy:.2f} s, server cpu {pg:.2f} s, "
      f"total {(u+sy+pg) / n * 1e5:.3f} cpu-s per 100k events, wall {n / (float(e) - float(s)):,.0f} events/s")
PY
  done
done
echo "$(date -u +%FT%TZ) load $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$res" <<'PY'
import re, statistics, sys
v = {"old": [], "new": []}
for l in open(sys.argv[1]):
    m = re.match(r"round \d+ (\w+): .* total ([\d.]+) cpu-s", l)
    v[m.group(1)].append(float(m.group(2)))
o, n = statistics.median(v["old"]), statistics.median(v["new"])
print(f"median cpu-s per 100k events: old {o:.3f}, new {n:.3f}, new/old {n / o:.3f}")
PY
rm -f "$res"
