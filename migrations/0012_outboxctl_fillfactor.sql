-- More room on each page of the outbox for the lease claim's row version (issue 30). A lease-mode
-- claim sets locked_until, attempt_count and claim_token, none of them indexed, so its new row
-- version is a HOT update (no new index entry) when the row's page has room for it: migration 2's
-- fillfactor 70. Without a long snapshot, pruning makes that room anyway. While one is held
-- (pg_dump, a long report, a standby's hot_standby_feedback) nothing can be pruned: each row's
-- claim and then its settle both want room on its page, 30% fits few of them, and each claim that
-- is not HOT adds an entry to every index, which the ordered walk reads again on every pass. At
-- 50, about half of the claims stay HOT under a held snapshot, and a lease-mode drain of an
-- ordered type holds its rate round after round (docs/decisions/0018). The cost: a page holds
-- fewer rows, so the published rows kept until `prune` take up to 2x their size instead of 1.4x.
-- A fillfactor other than migration 2's is someone's choice and is kept. Only pages filled from
-- now on are affected; nothing is rewritten.
DO $$
BEGIN
  IF EXISTS (SELECT FROM pg_class c, unnest(c.reloptions) o
              WHERE c.oid = 'outbox'::regclass AND o = 'fillfactor=70') THEN
    ALTER TABLE outbox SET (fillfactor = 50);
  END IF;
END
$$;
