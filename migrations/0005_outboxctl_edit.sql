-- `events edit` changes an event's payload, headers or type before it is handled, and records
-- each change in the audit trail with the previous values: the action list grows by 'edit'.
ALTER TABLE outbox_audit DROP CONSTRAINT outbox_audit_action_check;
ALTER TABLE outbox_audit ADD CONSTRAINT outbox_audit_action_check
  CHECK (action IN ('requeue', 'discard', 'cancel', 'reschedule', 'prune', 'edit'));
