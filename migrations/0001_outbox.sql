-- The outbox table and the consumer dedup table exactly as seed 000 defines them, so applications
-- written against the seed (producer INSERT ... ON CONFLICT (idempotency_key) DO NOTHING, the stats
-- SELECT, the prune DELETE) keep working unchanged.
CREATE TABLE outbox (
  id                bigserial    PRIMARY KEY,
  tenant_id         uuid         NOT NULL,
  aggregate_type    text         NOT NULL,
  aggregate_id      text         NOT NULL,
  event_type        text         NOT NULL,
  payload           jsonb        NOT NULL,
  headers           jsonb        NOT NULL DEFAULT '{}'::jsonb,
  idempotency_key   text         NOT NULL,
  created_at        timestamptz  NOT NULL DEFAULT now(),
  available_at      timestamptz  NOT NULL DEFAULT now(),
  locked_until      timestamptz,
  attempt_count     integer      NOT NULL DEFAULT 0,
  published_at      timestamptz,
  dead_lettered_at  timestamptz,
  last_error        text,
  CONSTRAINT outbox_idempotency_key_key UNIQUE (idempotency_key)
);

-- The claim's index. Partial, so it only holds pending rows and stays small whatever the history.
CREATE INDEX outbox_ready_idx
  ON outbox (available_at, id)
  WHERE published_at IS NULL AND dead_lettered_at IS NULL;

CREATE TABLE processed_messages (
  consumer     text        NOT NULL,
  message_id   text        NOT NULL,
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, message_id)
);
