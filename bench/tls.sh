#!/usr/bin/env bash
# Does TLS slow the relay? (issue 25 item 2: a drain over TLS within 10 % of one without.)
#
# A cluster of the script's own (the machine's PostgreSQL binaries, initdb as `nobody`, port
# 18795) with `ssl = on` and a certificate of its own CA, accepting both TLS and plain TCP from
# 127.0.0.1 (trust). ROUNDS rounds, alternating which goes first: EVENTS events (bench_seed)
# drained by one `relay --once --sink null` with `sslmode=disable`, and the same over
# `sslmode=verify-full` (the CA checked, the name `localhost`); the rate of each and the relay's
# CPU seconds, and their ratios.
#
#   bench/tls.sh                        # this tree's release binary
#   MODES="tx lease" ROUNDS=4 EVENTS=100000 bench/tls.sh
#
# Needs: root (initdb as nobody), openssl, /usr/lib/postgresql/<major>/bin.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
source bench/lib.sh

ROUNDS=${ROUNDS:-3}
EVENTS=${EVENTS:-100000}
MODES=${MODES:-tx lease}
PORT=${PORT:-18795}
export NO_COLOR=1 PGOPTIONS="-c client_min_messages=warning"
unset OUTBOXCTL_LOG RUST_LOG PGSSLMODE PGSSLROOTCERT

if [ -z "${BIN:-}" ]; then
  cargo build --release --quiet
  BIN=target/release/outboxctl
fi
PG=/usr/lib/postgresql/$(ls /usr/lib/postgresql | sort -n | tail -n1)/bin
# The real psql, not Debian's wrapper (which reads every cluster's configuration first).
export PATH="$PG:$PATH"
dir=$(mktemp -d)
chmod 755 "$dir"
cleanup() {
  runuser -u nobody -- "$PG/pg_ctl" -D "$dir/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$dir"
}
trap cleanup EXIT

ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
( cd "$dir"
  openssl req -x509 "${ec[@]}" -keyout ca.key -out ca.crt -days 2 -subj /CN=bench-ca
  openssl req "${ec[@]}" -keyout server.key -out server.csr -subj /CN=localhost
  printf 'subjectAltName=DNS:localhost\n' > san.ext
  openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 2 \
    -extfile san.ext -out server.crt ) >/dev/null 2>&1
mkdir -m 700 "$dir/data"
chown nobody "$dir/data"
runuser -u nobody -- "$PG/initdb" -D "$dir/data" -U postgres --auth=trust --no-sync >/dev/null
install -o nobody -m 600 "$dir/server.key" "$dir/data/server.key"
install -o nobody -m 644 "$dir/server.crt" "$dir/data/server.crt"
printf "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\nfsync = off\n" \
  >> "$dir/data/postgresql.conf"
touch "$dir/server.log"; chown nobody "$dir/server.log"
runuser -u nobody -- "$PG/pg_ctl" -D "$dir/data" -l "$dir/server.log" \
  -o "-p $PORT -k $dir/data -c listen_addresses=127.0.0.1" -w start >/dev/null

plain="postgres://postgres@127.0.0.1:$PORT/postgres?sslmode=disable"
tls="postgres://postgres@localhost:$PORT/postgres?sslmode=verify-full&sslrootcert=$dir/ca.crt"
export DATABASE_URL=$plain

uptime
echo "# $("$BIN" --version); $EVENTS events per drain, relay --once --sink null"
for mode in $MODES; do
  for round in $(seq 1 "$ROUNDS"); do
    order="plain tls"
    [ $((round % 2)) -eq 0 ] && order="tls plain"
    for how in $order; do
      url=$plain
      [ "$how" = tls ] && url=$tls
      schema=bench_tls
      psql -qAt "$plain" -c "DROP SCHEMA IF EXISTS $schema CASCADE" >/dev/null
      DATABASE_URL=$plain "$BIN" migrate --schema "$schema" >/dev/null
      bench_seed "$schema" "$EVENTS"
      t0=$(bench_now)
      # The relay's own CPU seconds (user + system), beside the wall time: what TLS costs the
      # relay, less noisy than the rate on a 2-core machine the server shares.
      TIMEFORMAT='%U %S'
      cpu=$( { time DATABASE_URL=$url "$BIN" relay --once --schema "$schema" --mode "$mode" \
                 --sink null -q >/dev/null 2>&1; } 2>&1 )
      t1=$(bench_now)
      rate=$(python3 -c "print($EVENTS / ($t1 - $t0))")
      cpu=$(python3 -c "u, s = '$cpu'.split(); print(float(u) + float(s))")
      printf '%s round %d %-5s %8.0f events/s  %6.2f s CPU\n' "$mode" "$round" "$how" "$rate" "$cpu"
      eval "r_${mode}_${round}_${how}=$rate c_${mode}_${round}_${how}=$cpu"
    done
    p=$(eval echo "\$r_${mode}_${round}_plain"); t=$(eval echo "\$r_${mode}_${round}_tls")
    cp=$(eval echo "\$c_${mode}_${round}_plain"); ct=$(eval echo "\$c_${mode}_${round}_tls")
    printf '%s round %d tls/plain %.3f (rate)  %.3f (relay CPU)\n' "$mode" "$round" \
      "$(python3 -c "print($t / $p)")" "$(python3 -c "print($ct / $cp)")"
  done
done
