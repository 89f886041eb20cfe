#!/usr/bin/env bash
# CPU A/B of two binaries' drains, for a machine too loaded for wall-clock figures: each round
# refills a backlog (migrated by that binary), then one `relay --once --sink null` drains it, and
# the CPU time spent is summed: the relay's own (user+sys) and every PostgreSQL server process's
# (from /proc, before and after). CPU seconds per 100k events depend far less on what else the
# machine runs than events/s do. Binaries alternate.
#   bench/ab-cpu.sh OLD_BIN NEW_BIN [ROUNDS=5] [EVENTS=200000] [MODE=tx]
set -euo pipefail
OLD=$1 NEW=$2 ROUNDS=${3:-5} EVENTS=${4:-200000} MODE=${5:-tx}
: "${DATABASE_URL:=postgres://postgres@127.0.0.1:5432/test}"
export DATABASE_URL
S=bench_abcpu
TCK=$(getconf CLK_TCK)
q() { psql -qAt "$DATABASE_URL" -v ON_ERROR_STOP=1 "$@"; }
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
  q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1
  "$1" migrate --schema $S >/dev/null
  q -c "INSERT INTO $S.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        SELECT gen_random_uuid(), 'order', g::text, 'order.placed',
               jsonb_build_object('n', g, 'total', 1200, 'currency', 'USD'), 'k' || g
          FROM generate_series(1, $EVENTS) g" -c "VACUUM ANALYZE $S.outbox" -c "CHECKPOINT" >/dev/null
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
    s=$(date +%s.%N)
    relay=$( { /usr/bin/time -f "%U %S" "$bin" relay --schema $S --once --sink null --batch-size 1000 \
                 --mode "$MODE" -q >/dev/null; } 2>&1 | tail -n1)
    e=$(date +%s.%N)
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
