-- What the operating commands (requeue, prune) need. Nothing here touches the outbox table itself.

-- Audit trail of `outboxctl requeue`: one row per event per requeue, written in the same statement
-- that requeues it. No foreign key: the event may later be pruned or discarded; its history stays.
CREATE TABLE outbox_requeues (
  id                         bigserial    PRIMARY KEY,
  event_id                   bigint       NOT NULL,
  requeued_at                timestamptz  NOT NULL DEFAULT now(),
  requeued_by                text         NOT NULL DEFAULT current_user,
  reason                     text,
  previous_dead_lettered_at  timestamptz,
  previous_attempt_count     integer      NOT NULL,
  previous_last_error        text,
  kept_attempts              boolean      NOT NULL,
  available_at               timestamptz  NOT NULL
);

CREATE INDEX outbox_requeues_event_id_idx ON outbox_requeues (event_id);

-- Named leases for jobs that must not overlap (`prune`). A lease row instead of a session advisory
-- lock because it also works through a transaction-pooling proxy (each statement may run on a
-- different server session there); a holder that dies loses the lease when expires_at passes.
CREATE TABLE outbox_locks (
  name         text         PRIMARY KEY,
  holder       uuid         NOT NULL,
  holder_info  text         NOT NULL,
  acquired_at  timestamptz  NOT NULL DEFAULT now(),
  expires_at   timestamptz  NOT NULL
);
