-- Where the ordered claim's walk over the keys may start its index scan (issue 30). The walk reads
-- outbox_key_pending_idx in key order; while a long snapshot is held, VACUUM cannot remove the
-- entries of rows published since, and every pass over the keys read each of them (and its row).
-- A relay keeps an id floor below which no row was pending when its last passes looked, and its
-- walk skips the entries at or below it inside the index; a pass without the floor, once 20x the
-- last such pass's claim time has passed, finds what became pending below it (a late commit, a
-- requeue). A key with a pending row below the floor is not claimed until then, so its order holds.
-- Kept here for the next `relay --once` run, with that pass's time and duration.
ALTER TABLE outbox_relay_floor
  ADD COLUMN key_floor      bigint,
  ADD COLUMN key_swept_at   timestamptz,
  ADD COLUMN key_sweep_took interval;
