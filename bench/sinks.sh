#!/usr/bin/env bash
# Broker sinks against their raw client ceilings, in one run on the same brokers: the relay's
# drain of N events (release build, `relay --once`, one relay) to Kafka, NATS JetStream, Redis
# Streams and RabbitMQ, beside a plain client of each sending N messages of the same size:
#   Kafka     confluent-kafka (librdkafka) idempotent producer   bench/raw_clients.py kafka
#   NATS      nats-py JetStream publisher, 1000 acks in flight    bench/raw_clients.py nats
#   Redis     redis-benchmark XADD, pipelined (-P 100)
#   RabbitMQ  pika publisher with confirms                        bench/raw_clients.py amqp
# The relay's figure includes its PostgreSQL claim and settle; the raw clients' do not. Each Kafka
# drain, and the raw producer, writes to a topic of its own, created before its clock starts.
#   bench/sinks.sh [N=50000] [SINKS="null kafka nats redis amqp"]
# SINKS may also name `null`: the relay's drain to the null sink in `tx` and `lease` mode (and
# MODES' others), against tx mode's own figure: the ceiling every broker sink's path is bounded by.
# MODES="auto tx lease" adds a relay row per --mode (default: auto only; auto is tx for Kafka and
# Redis, lease for NATS and RabbitMQ); DEPTHS="1 2" a row per
# --pipeline-depth within each mode, run one after the other (default: the binary's default).
# LOG=1 runs it in log mode (`outboxctl log enable` on the schema): every relay row in --mode log,
# the reference being log mode's own drain to the null sink.
# NAME (default benchsinks) names the schema, topics, stream, subjects and queue, so two runs
# beside each other do not collide. The binary is
# ${CARGO_TARGET_DIR:-target}/release/outboxctl, built first; or OUTBOXCTL_BIN, used as it is
# (build.rs reruns whenever any ref of the repository moves, so a shared checkout's release
# build is often stale for reasons that do not touch the code).
# Brokers: Kafka (Tansu) 127.0.0.1:9092, NATS 4222 (JetStream), Redis 6379, RabbitMQ 5672.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
N=${1:-50000}
SINKS=${2:-null kafka nats redis amqp}
NAME=${NAME:-benchsinks}
S=bench_$NAME
NATS_STREAM=$(echo "$NAME" | tr '[:lower:]' '[:upper:]')
MODES=${MODES:-auto}
DEPTHS=${DEPTHS:-}
BIN=${OUTBOXCTL_BIN:-${CARGO_TARGET_DIR:-target}/release/outboxctl}
RAW="python3 bench/raw_clients.py"
RUN=$(date +%s)
[ -n "${OUTBOXCTL_BIN:-}" ] || cargo build --release --locked --quiet
cleanup() {
  q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true
  $RAW nats-teardown nats://127.0.0.1:4222 "$NATS_STREAM" >/dev/null 2>&1 || true
  $RAW amqp-teardown "$NAME" >/dev/null 2>&1 || true
  redis-cli -p 6379 DEL "$NAME.relay" "$NAME.raw" >/dev/null 2>&1 || true
}
trap cleanup EXIT
bench_fresh "$BIN" $S
LOG=${LOG:-0}
REF=tx
if [ "$LOG" = 1 ]; then
  $BIN log enable --schema $S >/dev/null 2>&1
  MODES=log REF=log
fi
seed() {
  q -c "TRUNCATE $S.outbox"
  bench_seed "$S" "$1" "k$RUN-"
}
# The size of one event's document, as the sinks send it.
seed 1
tmp=$(mktemp)
$BIN relay --schema $S --once --sink "file:$tmp" >/dev/null
SIZE=$(head -n1 "$tmp" | wc -c)
rm -f "$tmp"
SIZE=$((SIZE - 1))
drain() {
  seed "$N"
  local spec=$1
  if [ "${spec#kafka://}" != "$spec" ]; then
    # A topic of its own per drain, created before the clock starts, as an operator's would be:
    # when every row wrote to one topic, only the first row's producer created it, and a topic
    # that exists before the producer starts is often slower (README "Broker sinks").
    spec="$spec.$(date +%s%N)"
    $RAW kafka-setup 127.0.0.1:9092 "${spec##*topic=}"
  fi
  set -- "$spec" "${@:2}"
  local s e
  s=$(bench_now)
  local summary
  # shellcheck disable=SC2086 # $3: optional extra flags, split on purpose
  summary=$($BIN relay --schema $S --once --mode "$2" --batch-size 1000 --sink "$1" ${3:-} --json)
  e=$(bench_now)
  local left
  if [ "$LOG" = 1 ]; then
    left=$($BIN log status --schema $S --json | python3 -c "import json,sys; s=json.load(sys.stdin); print(s['behind'] + s['retrying'])")
  else
    left=$(q -c "SELECT count(*) FROM $S.outbox WHERE published_at IS NULL")
  fi
  [ "$left" = 0 ] || { echo "relay left $left events unpublished ($1)" >&2; exit 1; }
  # events/s and the mode the relay ran in (what `auto` resolved to).
  python3 -c "import json,sys; print(round($N / ($e - $s)), json.loads(sys.argv[1])['mode'])" "$summary"
}
row() { python3 -c "print(f'| $1 | $2 | {$3:,} | {$4:,} | {$3 / $4:.2f}x |')"; }
# One relay row per mode of MODES against the raw client's figure $2 (sink spec $1, label $3).
relay_rows() {
  local mode relay depth ran label
  for mode in ${4:-$MODES}; do
    for depth in ${DEPTHS:-default}; do
      if [ "$depth" = default ]; then
        read -r relay ran < <(drain "$1" "$mode")
        label=$mode
      else
        read -r relay ran < <(drain "$1" "$mode" "--pipeline-depth $depth")
        label="$mode --pipeline-depth $depth"
      fi
      [ "$mode" = auto ] && label="${label/auto/auto ($ran)}"
      row "$3" "$label" "$relay" "$2"
    done
  done
}
echo "$(date -u +%FT%TZ) N=$N events of $SIZE bytes; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| sink | --mode | relay events/s | raw client msgs/s | relay / raw |"
echo "|---|---|---|---|---|"
for sink in $SINKS; do
  case $sink in
  null)
    # The reference: tx mode to the null sink (no publish at all), then every mode against it.
    read -r raw _ < <(drain null $REF)
    if [ "$LOG" = 1 ]; then
      relay_rows null "$raw" "null sink, vs log mode to the null sink" log
    else
      relay_rows null "$raw" "null sink, vs tx mode to the null sink" "tx lease $(echo " $MODES " | sed 's/ auto / /; s/ tx / /; s/ lease / /')"
    fi ;;
  kafka)
    $RAW kafka-setup 127.0.0.1:9092 "$NAME.raw.$RUN"
    raw=$($RAW kafka 127.0.0.1:9092 "$NAME.raw.$RUN" "$N" "$SIZE")
    relay_rows "kafka://127.0.0.1:9092?topic=$NAME.relay.$RUN" "$raw" \
      "Kafka (Tansu), vs confluent-kafka idempotent producer" ;;
  nats)
    $RAW nats-setup nats://127.0.0.1:4222 "$NATS_STREAM" "$NAME.>"
    raw=$($RAW nats nats://127.0.0.1:4222 "$NAME.raw" "$N" "$SIZE")
    relay_rows "nats://127.0.0.1:4222?subject=$NAME.relay" "$raw" \
      "NATS JetStream, vs nats-py async publisher" ;;
  redis)
    value=$(head -c "$SIZE" /dev/zero | tr '\0' x)
    raw=$(redis-benchmark -p 6379 -q -n "$N" -P 100 XADD "$NAME.raw" '*' event "$value" \
      | tr '\r' '\n' | grep -oE '[0-9.]+ requests per second' | tail -n1 | cut -d' ' -f1)
    raw=${raw%.*}
    relay_rows "redis://127.0.0.1:6379?stream=$NAME.relay" "$raw" \
      "Redis Streams, vs redis-benchmark XADD -P 100" ;;
  amqp)
    $RAW amqp-setup "$NAME"
    raw=$($RAW amqp "$NAME" "$N" "$SIZE")
    relay_rows "amqp://guest:guest@127.0.0.1:5672/%2f?routing_key=$NAME" "$raw" \
      "RabbitMQ, vs pika with confirms" ;;
  esac
done
