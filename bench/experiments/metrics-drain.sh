#!/usr/bin/env bash
# Drain rate of the relay daemon with --metrics-addr on and off, interleaved in one session: each
# round refills a backlog of N events, starts `relay --sink null --batch-size 1000` (a daemon:
# --metrics-addr is daemon-only) and times until the last event is marked, then stops it. The
# "on" runs are scraped every second meanwhile (/metrics, /livez, /readyz: the backlog sample
# included). The order alternates per round (off,on / on,off) so the machine's drift hits both.
#   bench/experiments/metrics-drain.sh [BIN=target/release/outboxctl] [ROUNDS=5] [N=200000] [MODE=tx]
set -euo pipefail
BIN=${1:-target/release/outboxctl} ROUNDS=${2:-5} N=${3:-200000} MODE=${4:-tx}
. "$(dirname "$0")/../lib.sh"
S=bench_metrics PORT=${OUTBOXCTL_BENCH_METRICS_PORT:-18420}
trap 'q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true' EXIT
setup() {
  bench_fresh "$BIN" $S
  bench_seed_ab $S "$N"
  q -c "CHECKPOINT"
}
drain() { # $1: on|off; prints events/s
  local extra=() s e pid scraper=
  [ "$1" = on ] && extra=(--metrics-addr "127.0.0.1:$PORT")
  s=$(bench_now)
  "$BIN" -q relay --schema $S --sink null --batch-size 1000 --mode "$MODE" "${extra[@]}" >/dev/null &
  pid=$!
  if [ "$1" = on ]; then
    ( while sleep 1; do for p in metrics livez readyz; do curl -fsS -o /dev/null "http://127.0.0.1:$PORT/$p" || true; done; done ) &
    scraper=$!
  fi
  until [ "$(q -c "SELECT NOT EXISTS (SELECT 1 FROM $S.outbox WHERE published_at IS NULL)")" = t ]; do sleep 0.05; done
  e=$(bench_now)
  [ -n "$scraper" ] && kill "$scraper" && wait "$scraper" 2>/dev/null || true
  kill -TERM "$pid"; wait "$pid" || true
  bench_rate "$N" "$s" "$e"
}
uptime
declare -a OFF ON
for r in $(seq "$ROUNDS"); do
  order="off on"; [ $((r % 2)) = 0 ] && order="on off"
  for v in $order; do
    setup
    rate=$(drain $v)
    echo "round $r $MODE metrics-$v: $rate events/s"
    if [ $v = on ]; then ON+=("$rate"); else OFF+=("$rate"); fi
  done
done
python3 - "${OFF[*]}" "${ON[*]}" <<'PY'
import statistics as st, sys
off = [int(x) for x in sys.argv[1].split()]; on = [int(x) for x in sys.argv[2].split()]
mo, mn = st.mean(off), st.mean(on)
print(f"off: mean {mo:.0f} median {st.median(off):.0f} events/s  {off}")
print(f"on:  mean {mn:.0f} median {st.median(on):.0f} events/s  {on}")
print(f"on/off: mean {100 * (mn / mo - 1):+.1f} %, median {100 * (st.median(on) / st.median(off) - 1):+.1f} %")
PY
