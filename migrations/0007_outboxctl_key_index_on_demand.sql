-- The key index of ordered delivery (migration 6's outbox_key_pending_idx) costs every producer
-- INSERT one more index entry, whether its aggregate type is ordered or not (bulk publish measured
-- 28 % slower with it). It is needed only while some aggregate type is ordered, so from here on
-- `outboxctl ordering enable` builds it (CREATE INDEX CONCURRENTLY) and the `ordering disable`
-- that switches the last type off drops it. Where ordering is already on, it stays.
DO $$
BEGIN
  IF NOT EXISTS (SELECT FROM outbox_ordering) THEN
    DROP INDEX IF EXISTS outbox_key_pending_idx;
  END IF;
END
$$;
