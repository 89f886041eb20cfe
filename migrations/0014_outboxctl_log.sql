-- Log mode (`outboxctl log enable`): relays read the outbox as a log, batch by batch between two
-- transaction-id snapshots (PgQ's design), and record their position once per batch instead of
-- writing every relayed row. Nothing here changes a seed column or the application's INSERT.

-- The writing transaction's id. Added without a default, then the default set, so adopting a
-- large table rewrites nothing: rows written before this migration have none (and are drained by
-- the queue path when log mode is switched on). The index over it is built by `log enable`
-- (CREATE INDEX CONCURRENTLY) and dropped by `log disable`: a producer pays for it only while log
-- mode is on.
ALTER TABLE outbox ADD COLUMN xid xid8;
ALTER TABLE outbox ALTER COLUMN xid SET DEFAULT pg_current_xact_id();

-- The switch and the one reader's position: a row while log mode is on.
--   position      the last snapshot the log has been read up to: an event whose transaction is
--                 visible in it has been passed by the log (published, or moved to
--                 outbox_log_retry, or dead-lettered).
--   window_to     the snapshot of the batch being read, page by page (NULL between batches);
--   after_xid/id  the last event of it already passed, in (xid, id) order.
--   switched      the snapshot taken just after the switch was committed: events visible in it
--                 belong to queue mode (`switched_id`: the largest id among them), and are moved
--                 to outbox_log_retry by the first reader (`handed_over`).
--   holder, fence, lease_until: the reader's lease. Every write of a reader names its holder
--                 and fence, so one that lost its lease (a stall) changes nothing.
CREATE TABLE outbox_log (
  singleton    boolean      PRIMARY KEY DEFAULT true CHECK (singleton),
  position     pg_snapshot,
  window_to    pg_snapshot,
  after_xid    xid8,
  after_id     bigint,
  switched     pg_snapshot,
  switched_id  bigint,
  handed_over  boolean      NOT NULL DEFAULT false,
  holder       uuid,
  fence        bigint       NOT NULL DEFAULT 0,
  lease_until  timestamptz,
  batches      bigint       NOT NULL DEFAULT 0,
  read_at      timestamptz,
  enabled_at   timestamptz  NOT NULL DEFAULT now(),
  enabled_by   text
);

-- Events the log has passed that are not out yet: failed publishes waiting for their retry,
-- delayed events (available_at in the future), events given back, and those queue mode left at
-- the switch. A row here is one write per such event, none for an event published at once. No
-- foreign key: it would cost every prune a lookup per deleted row; an entry whose event is gone
-- is dropped when the reader meets it.
CREATE TABLE outbox_log_retry (
  id            bigint       PRIMARY KEY,
  available_at  timestamptz  NOT NULL
);
CREATE INDEX outbox_log_retry_due_idx ON outbox_log_retry (available_at, id);

-- An event the log has passed that becomes pending again by hand (`requeue` clears
-- dead_lettered_at; `events reschedule` moves available_at) while log mode is on joins the retry
-- set, so the reader sends it again; the log itself never reads it twice. Runs only when one of
-- those columns changes on a pending row (the WHEN clause is checked in C), so producers pay
-- nothing.
CREATE FUNCTION outboxctl_log_pending_again() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  IF EXISTS (SELECT FROM outbox_log l
              WHERE l.position IS NOT NULL
                AND (NEW.xid IS NULL OR pg_visible_in_snapshot(NEW.xid, l.switched)
                     OR pg_visible_in_snapshot(NEW.xid, l.position)
                     OR (l.window_to IS NOT NULL AND pg_visible_in_snapshot(NEW.xid, l.window_to)
                         AND (NEW.xid, NEW.id) <= (l.after_xid, l.after_id)))) THEN
    INSERT INTO outbox_log_retry (id, available_at) VALUES (NEW.id, NEW.available_at)
    ON CONFLICT (id) DO UPDATE SET available_at = EXCLUDED.available_at;
  END IF;
  RETURN NULL;
END
$$;

CREATE TRIGGER outbox_log_pending_again
  AFTER UPDATE OF dead_lettered_at, published_at, available_at ON outbox
  FOR EACH ROW
  WHEN (NEW.published_at IS NULL AND NEW.dead_lettered_at IS NULL
        AND (OLD.dead_lettered_at IS NOT NULL OR OLD.published_at IS NOT NULL
             OR OLD.available_at IS DISTINCT FROM NEW.available_at))
  EXECUTE FUNCTION outboxctl_log_pending_again();

-- Switching log mode on or off is audited like the other hand changes.
ALTER TABLE outbox_audit DROP CONSTRAINT outbox_audit_action_check;
ALTER TABLE outbox_audit ADD CONSTRAINT outbox_audit_action_check
  CHECK (action IN ('requeue', 'discard', 'cancel', 'reschedule', 'prune', 'edit', 'skip',
                    'ordering', 'replay', 'log'));
