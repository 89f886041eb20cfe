#!/usr/bin/env bash
# The Kafka sink's drain per --pipeline-depth (and any relay flags), each drain into a topic of its
# own, with where the CPU went (bench/cpusplit.py): is the relay, PostgreSQL or Tansu the bound?
#   SPECS="tx 1,tx 2,raw" bench/experiments/kafka-depth.sh   (comma-separated: "MODE DEPTH" a relay --once
#                                                 drain; "raw" the confluent-kafka producer)
# N (100000) events per drain; PRECREATE=1 creates each topic first (4 partitions, empty, with
# the admin API, as an operator would; otherwise the relay's producer creates it);
# EXTRA relay flags (e.g. "--kafka-property linger.ms=0"); BATCH (1000); SINK overrides the
# sink (e.g. null). Binary: OUTBOXCTL_BIN, else ${CARGO_TARGET_DIR:-target}/release/outboxctl.
# Kafka (Tansu) on 127.0.0.1:9092; PostgreSQL from DATABASE_URL (schema bench_kafkadepth).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
N=${N:-100000}
BIN=${OUTBOXCTL_BIN:-${CARGO_TARGET_DIR:-target}/release/outboxctl}
S=bench_kafkadepth
trap 'q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true' EXIT
bench_fresh "$BIN" $S
RUN=$(date +%s)
cpu=$(mktemp)
seed() {
  q -c "TRUNCATE $S.outbox"
  bench_seed "$S" "$N" "k$RUN-"
}
echo "$(date -u +%FT%TZ) N=$N; load $(cut -d' ' -f1-3 /proc/loadavg); PRECREATE=${PRECREATE:-} EXTRA=${EXTRA:-} BATCH=${BATCH:-1000}"
IFS=, read -ra specs <<< "${SPECS:-tx 1,tx 2,tx 1,tx 2,raw}"
for spec in "${specs[@]}"; do
  set -- $spec
  topic=kafkadepth.$RUN.$RANDOM
  if [ "$1" = raw ]; then
    [ -n "${PRECREATE:-}" ] && python3 bench/raw_clients.py kafka-create 127.0.0.1:9092 "$topic"
    r=$(python3 bench/cpusplit.py python3 bench/raw_clients.py kafka 127.0.0.1:9092 "$topic" "$N" 282 2>"$cpu")
    echo "raw producer: $r msgs/s  $(cat "$cpu")"
  else
    seed
    [ -n "${PRECREATE:-}" ] && python3 bench/raw_clients.py kafka-create 127.0.0.1:9092 "$topic"
    s=$(bench_now)
    # shellcheck disable=SC2086
    python3 bench/cpusplit.py $BIN relay --schema $S --once --mode "$1" --pipeline-depth "$2" \
      --batch-size "${BATCH:-1000}" --sink "${SINK:-kafka://127.0.0.1:9092?topic=$topic}" ${EXTRA:-} \
      --json >/dev/null 2>"$cpu"
    e=$(bench_now)
    echo "relay --mode $1 --pipeline-depth $2: $(bench_rate "$N" "$s" "$e") events/s  $(grep cpusplit "$cpu")"
  fi
done
rm -f "$cpu"
