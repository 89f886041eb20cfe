# Sourced by the bench scripts (after their `cd` to the repository root) for what they share.

# bench_seed SCHEMA N [KEY_PREFIX=k-]: N ready events appended to SCHEMA.outbox, every script's
# one shape (order.placed, 1000 aggregates, a ~50-byte payload; 282 bytes as the sinks send them),
# then VACUUM ANALYZE. Idempotency keys are KEY_PREFIX1..N. DATABASE_URL names the database.
bench_seed() {
  psql -qAt "$DATABASE_URL" -v ON_ERROR_STOP=1 \
    -c "INSERT INTO $1.outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
        SELECT gen_random_uuid(), 'order', 'o-' || (g % 1000), 'order.placed',
               jsonb_build_object('n', g, 'total', 1200, 'currency', 'USD'), '${3:-k-}' || g
          FROM generate_series(1, $2) g" \
    -c "VACUUM ANALYZE $1.outbox" >/dev/null
}
