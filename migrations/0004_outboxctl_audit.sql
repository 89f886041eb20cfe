-- One audit trail for every command that changes or deletes events by hand: requeue, dead
-- discard, events cancel, events reschedule and prune. Each row is written by the same statement
-- that makes the change (prune: each batch's DELETE also counts into its run's row), so there is
-- never a change without its row, nor a row for a change that rolled back. No foreign key: the
-- history outlives the event (a cancel or discard deletes it; that is what the row records).
CREATE TABLE outbox_audit (
  id          bigserial    PRIMARY KEY,
  at          timestamptz  NOT NULL DEFAULT now(),
  action      text         NOT NULL
              CHECK (action IN ('requeue', 'discard', 'cancel', 'reschedule', 'prune')),
  -- NULL for prune, which acts on many events and records counts.
  event_id    bigint,
  -- Who ran the command (--actor / OUTBOXCTL_ACTOR, default $USER@hostname). NULL only for rows
  -- from before this migration, or written through the outbox_requeues view by an older binary.
  actor       text,
  -- The database role that made the change, beside the person.
  db_role     text         NOT NULL DEFAULT current_user,
  reason      text,
  -- The event's values before the change (deleted events: everything but payload and headers).
  previous    jsonb,
  -- What was set (requeue, reschedule), or cutoffs and counts (prune).
  details     jsonb
);

-- `events show` / `dead show` read one event's history.
CREATE INDEX outbox_audit_event_id_idx ON outbox_audit (event_id) WHERE event_id IS NOT NULL;

-- The requeue history so far moves here, and outbox_requeues becomes a view of the requeue rows
-- with its old columns (plus actor), so queries and dashboards written against it keep working.
INSERT INTO outbox_audit (at, action, event_id, actor, db_role, reason, previous, details)
SELECT requeued_at, 'requeue', event_id, NULL, requeued_by, reason,
       jsonb_build_object('dead_lettered_at', previous_dead_lettered_at,
                          'attempt_count', previous_attempt_count,
                          'last_error', previous_last_error),
       jsonb_build_object('kept_attempts', kept_attempts, 'available_at', available_at)
  FROM outbox_requeues
 ORDER BY id;

DROP TABLE outbox_requeues;

CREATE VIEW outbox_requeues AS
SELECT id,
       event_id,
       at                                              AS requeued_at,
       db_role                                         AS requeued_by,
       reason,
       (previous ->> 'dead_lettered_at')::timestamptz  AS previous_dead_lettered_at,
       (previous ->> 'attempt_count')::integer         AS previous_attempt_count,
       previous ->> 'last_error'                       AS previous_last_error,
       (details ->> 'kept_attempts')::boolean          AS kept_attempts,
       (details ->> 'available_at')::timestamptz       AS available_at,
       actor
  FROM outbox_audit
 WHERE action = 'requeue';

-- An outboxctl from before this migration requeues with INSERT INTO outbox_requeues in the same
-- statement as the UPDATE; this keeps that working during a rolling upgrade (actor unknown).
CREATE FUNCTION outboxctl_requeues_insert() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO outbox_audit (action, event_id, db_role, reason, previous, details)
  VALUES ('requeue', NEW.event_id, coalesce(NEW.requeued_by, current_user), NEW.reason,
          jsonb_build_object('dead_lettered_at', NEW.previous_dead_lettered_at,
                             'attempt_count', NEW.previous_attempt_count,
                             'last_error', NEW.previous_last_error),
          jsonb_build_object('kept_attempts', NEW.kept_attempts,
                             'available_at', NEW.available_at))
  RETURNING id, at, db_role INTO NEW.id, NEW.requeued_at, NEW.requeued_by;
  RETURN NEW;
END
$$;

CREATE TRIGGER outbox_requeues_insert
  INSTEAD OF INSERT ON outbox_requeues
  FOR EACH ROW EXECUTE FUNCTION outboxctl_requeues_insert();
