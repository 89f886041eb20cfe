-- `replay` sends published events again (for a consumer that lost its data, or a new one that
-- needs history) and changes no event: it records one audit row per run, with its selection, the
-- sink and the count, and no event_id (like prune). The action list grows by 'replay'.
ALTER TABLE outbox_audit DROP CONSTRAINT outbox_audit_action_check;
ALTER TABLE outbox_audit ADD CONSTRAINT outbox_audit_action_check
  CHECK (action IN ('requeue', 'discard', 'cancel', 'reschedule', 'prune', 'edit', 'skip',
                    'ordering', 'replay'));
