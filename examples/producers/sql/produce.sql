-- The producer in plain SQL: one order and its event in ONE transaction.
--
--   psql "$DATABASE_URL" -v ON_ERROR_STOP=1 -v schema=public -v order_id=o-1001 -v total_cents=4200 \
--        -f examples/producers/sql/produce.sql
--
-- Every variable must be given (psql has no defaults). `schema` is the one holding `outbox` and
-- `orders`. With ON_ERROR_STOP, a failure anywhere, the COMMIT included, leaves neither
-- row (psql exits 3).
SET search_path TO :"schema";

BEGIN;

INSERT INTO orders (id, total_cents) VALUES (:'order_id', :'total_cents');

-- tenant_id and idempotency_key have no default: a fixed tenant, and a key derived from the
-- business fact, so a retried transaction cannot write the event twice. headers and available_at
-- keep their defaults ('{}' and now(); `now() + interval '15 minutes'` would delay the event).
INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
VALUES ('00000000-0000-0000-0000-000000000001', 'order', :'order_id', 'order.placed',
        jsonb_build_object('order_id', :'order_id'::text, 'total_cents', :'total_cents'::bigint),
        'order.placed:' || :'order_id')
ON CONFLICT (idempotency_key) DO NOTHING;

COMMIT;
