#!/usr/bin/env bash
# The fault-injection suite (tests/it/faults/) in its full form, one scenario at a time, and the
# README's table from what it measured: one row per scenario (events, relays, fault, lost,
# duplicates and their bound, unexpected, dead letters (of which poison), recovery time after the
# fault ended). Every scenario also asserts lost = 0, unexpected = 0 and its bound: a failing
# scenario prints FAILED below the table and the script exits 1.
# usage: bench/faults.sh [EVENTS [FILTER...]]  (default 10000 per scenario; CI runs the short form,
#        3000; FILTERs (test names, e.g. faults::scenarios::kafka_down_and_frozen) run only those)
# Needs what the tests need (see .ci/run): PostgreSQL on 5432, pgbouncer, faketime, nats-server,
# redis-server, rabbitmq-server; runs as root (its own PG cluster, a tmpfs). Own instances use
# ports 18340-18350, so scenarios can run side by side (FAULTS_THREADS, default 4).
set -uo pipefail
cd "$(dirname "$0")/.."
events=${1:-10000}
shift $(( $# > 0 ? 1 : 0 ))
filters=("$@")
[ ${#filters[@]} -eq 0 ] && filters=(faults::scenarios)
report=$(mktemp)
log=$(mktemp)
uptime
git log -1 --format='commit %h %s'
echo "events per scenario: $events"
echo "scenarios: ${filters[*]}"
OUTBOXCTL_FAULTS_EVENTS=$events OUTBOXCTL_FAULTS_REPORT=$report \
  cargo test --locked --test it -- "${filters[@]}" --test-threads=${FAULTS_THREADS:-4} >"$log" 2>&1
status=$?
echo
echo "| scenario | events | relays | fault | lost | duplicates (bound) | unexpected | dead (poison) | recovery |"
echo "|---|---:|---:|---|---:|---:|---:|---:|---:|"
cat "$report"
echo
grep -E '^test .*(ok|FAILED|ignored)' "$log" | sed 's/^/# /'
grep -E '^test result' "$log"
rm -f "$report"
if [ $status -ne 0 ]; then
  grep -A20 'panicked' "$log" | head -80
  rm -f "$log"
  exit 1
fi
rm -f "$log"
