-- Per-aggregate ordering (`outboxctl ordering enable`), switched on in the database so every relay
-- on the outbox honours it. Nothing here changes a seed column or adds work to a producer's INSERT
-- beyond one more entry in a partial index of pending rows.

-- Which aggregate types are delivered in order per key (tenant_id, aggregate_type, aggregate_id),
-- and what a dead-lettered head does to its key. aggregate_type '*' means every type; a row for a
-- named type overrides its on_dead.
CREATE TABLE outbox_ordering (
  aggregate_type  text         PRIMARY KEY,
  on_dead         text         NOT NULL DEFAULT 'block' CHECK (on_dead IN ('block', 'skip')),
  enabled_at      timestamptz  NOT NULL DEFAULT now(),
  enabled_by      text
);

-- The ordered claim walks the keys with pending rows through this index (one probe per key, a
-- loose index scan) and reads a key's first pending rows from it in id order. Partial, like
-- outbox_ready_idx: only pending rows, so it stays small whatever the history.
CREATE INDEX outbox_key_pending_idx
  ON outbox (aggregate_type, tenant_id, aggregate_id, id)
  WHERE published_at IS NULL AND dead_lettered_at IS NULL;

-- A dead-lettered head of an ordered key blocks the key while blocks_key is true (on_dead
-- 'block'). Set by the trigger below when the row is dead-lettered; `ordering skip` sets it false;
-- `requeue` clears dead_lettered_at, which unblocks the key with the head pending again.
ALTER TABLE outbox ADD COLUMN blocks_key boolean;

CREATE INDEX outbox_blocking_idx
  ON outbox (aggregate_type, tenant_id, aggregate_id, id)
  WHERE blocks_key AND dead_lettered_at IS NOT NULL;

-- Runs only when a row becomes dead-lettered (the WHEN clause is checked in C for every update,
-- the function only for those), so producers and settles of other rows pay nothing. A statement
-- that sets blocks_key itself (skip) keeps its value.
CREATE FUNCTION outboxctl_block_key() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
  IF NEW.blocks_key IS NOT DISTINCT FROM OLD.blocks_key THEN
    NEW.blocks_key := (SELECT o.on_dead = 'block' FROM outbox_ordering o
                        WHERE o.aggregate_type IN (NEW.aggregate_type, '*')
                        ORDER BY o.aggregate_type = '*' LIMIT 1);
  END IF;
  RETURN NEW;
END
$$;

CREATE TRIGGER outbox_block_key
  BEFORE UPDATE OF dead_lettered_at ON outbox
  FOR EACH ROW
  WHEN (OLD.dead_lettered_at IS NULL AND NEW.dead_lettered_at IS NOT NULL)
  EXECUTE FUNCTION outboxctl_block_key();

-- Skipping a blocking head, and switching ordering on or off, are audited like the other hand
-- changes.
ALTER TABLE outbox_audit DROP CONSTRAINT outbox_audit_action_check;
ALTER TABLE outbox_audit ADD CONSTRAINT outbox_audit_action_check
  CHECK (action IN ('requeue', 'discard', 'cancel', 'reschedule', 'prune', 'edit', 'skip',
                    'ordering'));
