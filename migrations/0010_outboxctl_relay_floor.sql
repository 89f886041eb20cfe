-- Where a `relay --once` run's first claim starts (issue 30). Each run that drained what it found
-- records the position its claims reached, and when a claim from the start of outbox_ready_idx
-- last ran and how long it took. The next run starts there instead of at the start of the index,
-- whose first entries are, while a long snapshot is held, those of every row published since:
-- a fresh run found one event in 5x the time. Rows that become ready behind the floor (a
-- producer's transaction that committed late, a lease that ran out, a reschedule into the past)
-- are found by a claim from the start, which a run makes at its end once 20x the last one's
-- duration has passed. One row; the relay reads it once and writes it once per run.
CREATE TABLE outbox_relay_floor (
  one           boolean      PRIMARY KEY DEFAULT true CHECK (one),
  available_at  timestamptz  NOT NULL,
  id            bigint       NOT NULL,
  swept_at      timestamptz  NOT NULL,
  sweep_took    interval     NOT NULL,
  saved_at      timestamptz  NOT NULL DEFAULT now()
);
