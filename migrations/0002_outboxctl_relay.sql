-- What outboxctl adds to the seed schema. Nothing here changes a seed column, so seed-era SQL keeps working.

-- Fencing token: written by each claim, required by every settle. A relay whose lease expired and
-- whose rows were claimed again by another relay matches nothing and changes nothing.
ALTER TABLE outbox ADD COLUMN claim_token uuid;

-- Leave room on each page so the claim's lease update (locked_until, attempt_count, claim_token:
-- none indexed) can be a HOT update.
ALTER TABLE outbox SET (fillfactor = 70);

-- Dead letters: stats and `dead list` read only these rows, newest first.
CREATE INDEX outbox_dead_idx
  ON outbox (dead_lettered_at DESC, id DESC)
  WHERE dead_lettered_at IS NOT NULL;

-- Throughput (published in the last minute/hour) and prune (published before a cutoff) read a
-- range of this index instead of scanning published history.
CREATE INDEX outbox_published_at_idx
  ON outbox (published_at)
  WHERE published_at IS NOT NULL;

-- Wake sleeping relays when events are inserted. Statement-level, so a bulk insert notifies once;
-- NOTIFY is delivered at commit, so a relay never wakes for an uncommitted row.
CREATE FUNCTION outboxctl_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  PERFORM pg_notify('outboxctl:' || TG_TABLE_SCHEMA, '');
  RETURN NULL;
END
$$;

CREATE TRIGGER outbox_notify_insert
  AFTER INSERT ON outbox
  FOR EACH STATEMENT EXECUTE FUNCTION outboxctl_notify();
