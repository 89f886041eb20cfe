-- The application's own business table, used by every producer snippet here. Create it in the
-- schema that holds `outbox` (after `outboxctl migrate`).
CREATE TABLE orders (
  id           text    PRIMARY KEY,
  total_cents  bigint  NOT NULL
);
