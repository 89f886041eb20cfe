# Sourced by bench/experiments/advisory.sh: the SQL texts of every claim and settle measured (issue 13, lever 2).
# Each function prints one statement for a batch of $B rows (literal, as src/db/relay.rs writes it).
# IDS is how a settle gets the claimed ids: a pgbench variable (:ids) or, in single-user callgrind
# runs, the session setting adv.ids that the claim wrapper stores with set_config().
READY="published_at IS NULL AND dead_lettered_at IS NULL AND available_at <= now()
   AND (locked_until IS NULL OR locked_until < now())"
COLS="o.id, o.tenant_id, o.aggregate_type, o.aggregate_id, o.event_type,
   o.payload::text AS payload, o.headers::text AS headers, o.idempotency_key, o.created_at, o.attempt_count"
BUDGET=16777216
# src/db/relay.rs's within_budget/claim_sql, literals as shipped; SET is the mode's.
claim_sql() { # SET
  cat <<SQL
WITH sized AS MATERIALIZED (SELECT ctid, over_budget FROM (SELECT ctid, count(*) FILTER (WHERE run > $BUDGET AND n > 1) OVER (ROWS UNBOUNDED PRECEDING) AS over_budget FROM (SELECT ctid, row_number() OVER w AS n, sum(CASE WHEN pg_column_compression(payload) IS NULL THEN pg_column_size(payload) ELSE pg_column_size(payload #> '{}') END + CASE WHEN pg_column_compression(headers) IS NULL THEN pg_column_size(headers) ELSE pg_column_size(headers #> '{}') END) OVER w AS run FROM (SELECT ctid, payload, headers FROM outbox WHERE $READY ORDER BY available_at, id LIMIT $B FOR UPDATE SKIP LOCKED) r WINDOW w AS (ROWS UNBOUNDED PRECEDING)) sized) counted WHERE over_budget <= 1)
UPDATE outbox o SET $1 WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM sized WHERE over_budget = 0))
RETURNING $COLS, EXISTS (SELECT FROM sized WHERE over_budget > 0) AS budget_reached
SQL
}
tx_claim() { claim_sql "published_at = now(), locked_until = NULL, attempt_count = o.attempt_count + 1, last_error = NULL"; }
lease_claim() { claim_sql "locked_until = now() + 30000000 * interval '1 microsecond', attempt_count = o.attempt_count + 1, claim_token = '$TOKEN'"; }
lease_settle() { # src/db/relay.rs settle_published
  echo "UPDATE outbox SET published_at = now(), locked_until = NULL, last_error = NULL
 WHERE id = ANY($IDS) AND claim_token = '$TOKEN' AND published_at IS NULL AND dead_lettered_at IS NULL RETURNING id"
}
# --- advisory claims: no row write, no transaction; the lock is the session's until unlocked ---
# adv_filter: lock-then-filter, the lock function as one more WHERE condition (the race: every row
# the plan evaluates it for is locked, whether or not the LIMIT keeps it).
adv_filter() {
  echo "SELECT $COLS FROM outbox o WHERE $READY AND pg_try_advisory_lock(o.id) ORDER BY available_at, id LIMIT $B"
}
# adv_limit: limit-then-lock: the first B ready rows, then the lock on each (no stray locks, but
# relays racing for the same first B rows split them instead of taking B each).
adv_limit() {
  echo "SELECT $COLS FROM (SELECT * FROM outbox WHERE $READY ORDER BY available_at, id LIMIT $B) o WHERE pg_try_advisory_lock(o.id)"
}
# adv_rcte: Que's shape (lib/que/poller.rb poll_jobs): a recursive CTE walking outbox_ready_idx one
# row per step, one pg_try_advisory_lock per candidate, stopped by the outer LIMIT (a CTE is pulled
# lazily), so it locks B rows plus the ones already locked by others, and nothing more.
adv_rcte_ids() {
  cat <<SQL
WITH RECURSIVE cand AS (
  (SELECT available_at, id, pg_try_advisory_lock(id) AS locked FROM outbox
    WHERE $READY ORDER BY available_at, id LIMIT 1)
  UNION ALL
  SELECT n.available_at, n.id, pg_try_advisory_lock(n.id)
    FROM cand, LATERAL (SELECT available_at, id FROM outbox
                         WHERE $READY AND (available_at, id) > (cand.available_at, cand.id)
                         ORDER BY available_at, id LIMIT 1) n)
SELECT id FROM cand WHERE locked LIMIT $B
SQL
}
# adv_rcte: the same returning the rows in one statement (they are read with the statement's
# snapshot, taken before the locks: see the snapshot race in the log).
adv_rcte() { echo "SELECT $COLS FROM outbox o WHERE o.id IN ($(adv_rcte_ids)) AND $READY"; }
# adv_fetch: Que's second step: the locked ids read again with a fresh snapshot (a new statement),
# so a row another relay settled and unlocked between our snapshot and our lock is dropped.
adv_fetch() { echo "SELECT $COLS FROM outbox o WHERE o.id = ANY($IDS) AND o.published_at IS NULL AND o.dead_lettered_at IS NULL"; }
# The advisory settle: one UPDATE (the attempt is counted here: the claim writes nothing), then
# the unlock, after the commit (unlocking before it lets another relay lock a row whose update it
# cannot see yet and publish it again).
adv_settle() {
  echo "UPDATE outbox SET published_at = now(), attempt_count = attempt_count + 1, last_error = NULL
 WHERE id = ANY($IDS) AND published_at IS NULL AND dead_lettered_at IS NULL RETURNING id"
}
adv_unlock_all() { echo "SELECT pg_advisory_unlock_all()"; }
adv_unlock_ids() { echo "SELECT count(*) FILTER (WHERE pg_advisory_unlock(i)) FROM unnest($IDS) i"; }
# adv_window_ids: limit-then-lock over a window of 4B candidates, stopped at B locks by the outer
# LIMIT: at most B locks whatever the plan (the window's LIMIT bounds the rows the lock is
# evaluated for, the outer LIMIT stops at B successes), and relays racing for the first rows
# still find B free ones among 4B. Used two-step (adv_window2_*: the ids, then adv_fetch).
adv_window_ids() {
  echo "SELECT id FROM (SELECT id FROM outbox WHERE $READY ORDER BY available_at, id LIMIT $((4 * B))) w
 WHERE pg_try_advisory_lock(w.id) LIMIT $B"
}
