#!/usr/bin/env bash
# Where a relay's resident memory is: for each binary, `relay --once --sink null` drains the same
# backlog while /proc/PID/status is sampled every 10 ms; prints the peak VmHWM (what `outboxctl
# bench` reports as peak RSS), and the peaks of RssAnon (private heap and stacks: grows with the
# work) and RssFile (pages of the binary and its shared libraries: code, shared between
# processes and reclaimable). Binaries alternate, ROUNDS times.
#   bench/experiments/rss-breakdown.sh [ROUNDS=3] [EVENTS=100000] BIN...
set -euo pipefail
ROUNDS=${1:-3} EVENTS=${2:-100000}
shift 2
. "$(dirname "$0")/../lib.sh"
S=bench_rss
trap 'q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true' EXIT
echo "$(date -u +%FT%TZ) $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); $EVENTS events"
echo "| binary | size MB | shared libs | peak VmHWM MiB | peak RssAnon MiB | peak RssFile MiB |"
echo "|---|---|---|---|---|---|"
for r in $(seq "$ROUNDS"); do
  for bin in "$@"; do
    bench_fresh "$bin" $S
    bench_seed_ab $S "$EVENTS"
    "$bin" relay --schema $S --once --sink null --batch-size 1000 -q >/dev/null &
    pid=$!
    hwm=0 anon=0 file=0
    while kill -0 "$pid" 2>/dev/null; do
      if s=$(cat /proc/$pid/status 2>/dev/null); then
        v=$(awk '/^VmHWM/{print $2}' <<<"$s"); [ -n "$v" ] && [ "$v" -gt "$hwm" ] && hwm=$v
        v=$(awk '/^RssAnon/{print $2}' <<<"$s"); [ -n "$v" ] && [ "$v" -gt "$anon" ] && anon=$v
        v=$(awk '/^RssFile/{print $2}' <<<"$s"); [ -n "$v" ] && [ "$v" -gt "$file" ] && file=$v
      fi
      sleep 0.01
    done
    wait "$pid"
    left=$(q -c "SELECT count(*) FROM $S.outbox WHERE published_at IS NULL")
    [ "$left" = 0 ] || { echo "$bin left $left events" >&2; exit 1; }
    awk -v b="$bin" -v sz="$(stat -c %s "$bin")" -v libs="$(ldd "$bin" | grep -c '=>')" \
      -v h="$hwm" -v a="$anon" -v f="$file" \
      'BEGIN { printf "| %s | %d | %d | %.1f | %.1f | %.1f |\n", b, sz / 1e6, libs, h / 1024, a / 1024, f / 1024 }'
  done
done
