-- Ordered delivery in log mode (issue 27): a key's events wait in the retry set behind its first
-- one there (its head, in (xid, id) order, the order the log reads), and a page's event of a key
-- that has an entry there waits too. Both questions are asked by key, so each entry carries its
-- event's key and sort position, and an index serves them: a probe per key, not a scan of the
-- retry set (which grows while a blocked key's events wait behind it).
--   xid  the event's transaction id; 0 for an event written before migration 14 (queue mode's
--        part, handed over at the switch), which comes first.
-- The columns are filled by a trigger from the event's row, the one place that knows them, so no
-- statement that adds an entry (a settle, the hand-over, the requeue trigger) repeats them. It
-- costs a primary-key lookup per entry, on the failure path only: a published event has none.
ALTER TABLE outbox_log_retry
  ADD COLUMN tenant_id      uuid,
  ADD COLUMN aggregate_type text,
  ADD COLUMN aggregate_id   text,
  ADD COLUMN xid            xid8;

CREATE FUNCTION outboxctl_log_retry_key() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  SELECT o.tenant_id, o.aggregate_type, o.aggregate_id, coalesce(o.xid, '0'::xid8)
    INTO NEW.tenant_id, NEW.aggregate_type, NEW.aggregate_id, NEW.xid
    FROM outbox o WHERE o.id = NEW.id;
  RETURN NEW;
END
$$;

CREATE TRIGGER outbox_log_retry_key
  BEFORE INSERT ON outbox_log_retry
  FOR EACH ROW
  EXECUTE FUNCTION outboxctl_log_retry_key();

UPDATE outbox_log_retry r
   SET tenant_id = o.tenant_id, aggregate_type = o.aggregate_type,
       aggregate_id = o.aggregate_id, xid = coalesce(o.xid, '0'::xid8)
  FROM outbox o WHERE o.id = r.id;

CREATE INDEX outbox_log_retry_key_idx
  ON outbox_log_retry (aggregate_type, tenant_id, aggregate_id, xid, id);
