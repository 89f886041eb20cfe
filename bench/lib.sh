# Sourced by the bench scripts (after their `cd` to the repository root) for what they share: the
# database they use, psql, a fresh schema, the backlog, the clock, and the network-delay proxy.

: "${DATABASE_URL:=postgres://postgres@127.0.0.1:5432/test}"
export DATABASE_URL

# q ARGS...: psql on DATABASE_URL, quiet, tuples only and unaligned, stopping at the first error.
q() { psql -qAt "$DATABASE_URL" -v ON_ERROR_STOP=1 "$@"; }

# qv ARGS...: psql on DATABASE_URL as a person reads it (aligned, headers: plans, tables), no
# psqlrc, stopping at the first error.
qv() { psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -X -q "$@"; }

# bench_fresh BIN SCHEMA: SCHEMA dropped if it is there, then migrated by the binary BIN.
bench_fresh() {
  q -c "DROP SCHEMA IF EXISTS $2 CASCADE" >/dev/null 2>&1
  "$1" migrate --schema "$2" >/dev/null
}

# bench_seed SCHEMA N [KEY_PREFIX=k-]: N ready events appended to SCHEMA.outbox, every script's
# one shape (order.placed, 1000 aggregates, a ~50-byte payload; 282 bytes as the sinks send them),
# then VACUUM ANALYZE. Idempotency keys are KEY_PREFIX1..N.
bench_seed() {
  q -c "INSERT INTO $1.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        SELECT gen_random_uuid(), 'order', 'o-' || (g % 1000), 'order.placed',
               jsonb_build_object('n', g, 'total', 1200, 'currency', 'USD'), '${3:-k-}' || g
          FROM generate_series(1, $2) g" \
    -c "VACUUM ANALYZE $1.outbox" >/dev/null
}

# bench_seed_ab SCHEMA N: the backlog of the A/B drains (ab-drain.sh, ab-cpu.sh and the
# experiments measured against them): the payload of bench_seed, but an aggregate per event
# (aggregate_id N) and keys kN; then VACUUM ANALYZE. Kept apart from bench_seed so that their
# figures stay comparable with the logs of earlier runs.
bench_seed_ab() {
  q -c "INSERT INTO $1.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        SELECT gen_random_uuid(), 'order', g::text, 'order.placed',
               jsonb_build_object('n', g, 'total', 1200, 'currency', 'USD'), 'k' || g
          FROM generate_series(1, $2) g" \
    -c "VACUUM ANALYZE $1.outbox" >/dev/null
}

# bench_now: the wall clock in seconds, to the nanosecond.
bench_now() { date +%s.%N; }

# bench_rate N START END: N events between two bench_now readings, in whole events per second.
bench_rate() { python3 -c "print(round($1 / ($3 - $2)))"; }

# bench_net_delay LISTEN_PORT UPSTREAM_HOST:PORT DELAY_MS: starts, in the background ($! is its
# pid), a test double of the network: a TCP proxy on 127.0.0.1:LISTEN_PORT that forwards every
# byte to UPSTREAM and delays what comes back (acks, confirms, replies) by DELAY_MS. The tests'
# own proxy (tests/it/support/net_delay.rs), built here as the example `net_delay`.
bench_net_delay() {
  cargo build --release --quiet --example net_delay
  "${CARGO_TARGET_DIR:-target}/release/examples/net_delay" "$@" >/dev/null 2>&1 &
}
