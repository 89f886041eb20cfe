//! The relay's statements: claim (lease or in-transaction), fenced settle, release, next due time.
//!
//! The claim orders by `(available_at, id)` so `outbox_ready_idx` serves it directly (the seed's
//! `ORDER BY id` walks the primary key through published history instead). Every settle in lease
//! mode is fenced by `claim_token`: it changes a row only while this claim still owns it.

use std::time::Duration;

use sqlx::PgConnection;
use uuid::Uuid;

/// A claimed row is an [`Event`]: the claims' `RETURNING` lists exactly its fields.
pub use crate::event::Event as ClaimedRow;

/// Columns returned by both claims.
const RETURNING: &str =
    "RETURNING o.id, o.tenant_id, o.aggregate_type, o.aggregate_id, o.event_type,
          o.payload::text AS payload, o.headers::text AS headers, o.idempotency_key,
          o.created_at, o.attempt_count";

/// The rows a claim may take: due, pending, lease free or expired. Returns their `ctid`s so the
/// UPDATE reaches each row by a TID scan instead of a second primary-key lookup (measured: +5 %
/// in-server). A row updated concurrently between the two is simply not claimed this time.
/// Also returns `payload` and `headers` (as stored: a TOAST pointer costs nothing to pass on) for
/// [`within_budget`] to size. At most `rows` rows (written into the statement: see [`claim_sql`]).
/// `filter` is empty, or one more condition ending in `AND ` (see [`ready_filtered`]).
///
/// `after` names the two parameters of the claim's start ([`Position`]): the scan of
/// `outbox_ready_idx` begins just after that position (an index condition, so the entries
/// before it, among them those of rows published since the xmin horizon, are never read), or at
/// the start when both are NULL.
fn ready(rows: i64, filter: &str, after: (u8, u8)) -> String {
    let (at, id) = after;
    format!(
        "SELECT ctid, payload, headers FROM outbox
          WHERE {filter}published_at IS NULL AND dead_lettered_at IS NULL
            AND (available_at, id) > (coalesce(${at}::timestamptz, '-infinity'),
                                      coalesce(${id}::bigint, {}))
            AND available_at <= now()
            AND (locked_until IS NULL OR locked_until < now())
          ORDER BY available_at, id
          LIMIT {rows}
          FOR UPDATE SKIP LOCKED",
        i64::MIN
    )
}

/// The size of a jsonb column as the relay will hold it, in bytes, without detoasting what need
/// not be: an uncompressed value's stored size (inline or out of line: only the TOAST pointer is
/// read) is its size; a compressed one's stored size can be 100 times smaller than its text, so it
/// is decompressed (`#> '{}'` hands back the whole value, detoasted, without rebuilding it) and
/// measured. Measured on 5 MB payloads: 3 ms a row, against 35-60 ms for the exact
/// `octet_length(payload::text)` (a second jsonb-to-text conversion per row). The jsonb size is
/// within a factor of about two of the text the relay receives (larger for small objects and
/// numbers, smaller for strings full of escapes).
pub(crate) fn jsonb_size(col: &str) -> String {
    format!(
        "CASE WHEN pg_column_compression({col}) IS NULL THEN pg_column_size({col}) \
              ELSE pg_column_size({col} #> '{{}}') END"
    )
}

/// [`ready`]'s rows, in claim order, while their running size (payload plus headers, by
/// [`jsonb_size`]) stays within `limit.bytes`: those with
/// `over_budget = 0` are the claim (the first row always, however large, so an event bigger than
/// the budget is still delivered); the one row with `over_budget = 1`, when there is one, is the
/// first that did not fit, and says that the budget, not the backlog, ended the batch.
///
/// Lazy by construction, so a budget of three rows costs about three rows, not `LIMIT`: the outer
/// `count(*) ... OVER (ROWS UNBOUNDED PRECEDING)` never decreases, so PostgreSQL (15+) turns
/// `over_budget <= 1` into a WindowAgg *run condition* and stops pulling rows just after the
/// first one over the budget. Rows are pulled, and so locked and sized, one at a time through
/// LockRows: measured, a claim of 3 of 500 ready 1 MB rows locked 6 and sized 5, where a plain
/// filter locks and sizes all 500 (in tx mode the locks would be held through the publish). The
/// windows have no ORDER BY: the rows arrive in claim order, and an ORDER BY would add a Sort
/// that pulls every row first (LockRows hands on no sort order).
fn within_budget(limit: BatchLimit, filter: &str, after: (u8, u8)) -> String {
    format!(
        "SELECT ctid, over_budget FROM (
            SELECT ctid, count(*) FILTER (WHERE run > {} AND n > 1)
                         OVER (ROWS UNBOUNDED PRECEDING) AS over_budget
              FROM (SELECT ctid, row_number() OVER w AS n,
                           sum({} + {}) OVER w AS run
                      FROM ({}) r
                    WINDOW w AS (ROWS UNBOUNDED PRECEDING)) sized
           ) counted
         WHERE over_budget <= 1",
        limit.bytes,
        jsonb_size("payload"),
        jsonb_size("headers"),
        ready(limit.rows, filter, after),
    )
}

/// A claim's bounds: at most `rows` rows, and no more bytes than `bytes`, kept as `sizing` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchLimit {
    pub rows: i64,
    pub bytes: i64,
    pub sizing: Sizing,
}

/// How a claim keeps within its byte budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sizing {
    /// Claims the ready rows (of the first `rows`) each within the budget's per-row share,
    /// `bytes / rows`, and leaves the larger ones, saying so ([`Claim::left_large`]): the batch
    /// is within the budget by construction, with one cheap test per row ([`within_share`]).
    /// The relay's usual claim: events are almost always far smaller than the share (33 KB for
    /// the defaults).
    Share,
    /// Claims rows in claim order while their running size stays within the budget
    /// ([`within_budget`]): exact, lazy for large rows, and what the relay uses after a
    /// [`Sizing::Share`] claim left large rows. Costs about 10 % more for a batch of small rows.
    Running,
}

impl BatchLimit {
    /// The per-row share of [`Sizing::Share`]: at least 1 byte.
    pub fn share(&self) -> i64 {
        (self.bytes / self.rows.max(1)).max(1)
    }
}

/// What a claim took.
#[derive(Debug, Default)]
pub struct Claim {
    pub rows: Vec<ClaimedRow>,
    /// The byte budget ended the batch with another row ready: claim again at once.
    pub budget_reached: bool,
    /// A [`Sizing::Share`] claim left rows larger than the share (or, when it found none within
    /// the share, a [`Sizing::Running`] claim took large rows in its place): the next claim
    /// should be [`Sizing::Running`].
    pub left_large: bool,
    /// The first of the claimed rows in claim order.
    pub first: Option<Position>,
    /// The last of the claimed rows in claim order: where a claim after it may start.
    pub last: Option<Position>,
    /// A [`Sizing::Share`] claim left rows larger than the share among those it took: rows
    /// before [`Claim::last`] are still ready, so the next claim must not start after it.
    pub passed_over: bool,
    /// A [`Sizing::Share`] claim that took nothing and left no larger rows: its `now()`. It
    /// found nothing it could claim up to there from where it started (but rows other
    /// transactions held locked, and rows of transactions not yet committed).
    pub scanned_to: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(sqlx::FromRow)]
struct ClaimedWithBudget {
    #[sqlx(flatten)]
    row: ClaimedRow,
    position_at: chrono::DateTime<chrono::Utc>,
    budget_reached: bool,
    /// The share claim's trailer: it took nothing and left larger rows ([`claim_sql`]).
    trailer: bool,
}

impl Claim {
    fn from_rows(rows: Vec<ClaimedWithBudget>, sizing: Sizing) -> Self {
        let budget_reached = rows.first().is_some_and(|r| r.budget_reached);
        let scanned_to = rows
            .iter()
            .find(|r| r.trailer && !r.budget_reached)
            .map(|r| r.position_at);
        let rows: Vec<_> = rows.into_iter().filter(|r| !r.trailer).collect();
        let positions = rows.iter().map(|r| Position {
            available_at: r.position_at,
            id: r.row.id,
        });
        let (first, last) = (positions.clone().min(), positions.max());
        Self {
            rows: rows.into_iter().map(|r| r.row).collect(),
            budget_reached,
            left_large: sizing == Sizing::Share && budget_reached,
            first,
            last,
            passed_over: sizing == Sizing::Share && budget_reached,
            scanned_to,
        }
    }

    /// This running claim followed a share claim that took nothing ([`running_after`]): any row
    /// it took was larger than the share.
    fn after_empty_share(mut self) -> Self {
        self.left_large = !self.rows.is_empty();
        self
    }
}

/// The `ctid`s of [`ready`]'s rows, in claim order, with `'(0,0)'` (no row has it: offset 0 is
/// invalid, and a TID scan skips it) in place of each row larger than `share` bytes (payload
/// plus headers as stored) or compressed (its stored size says nothing of the text the relay
/// would hold; [`within_budget`] measures those). At most `rows` rows, so the rows kept are
/// within `rows * share <= bytes`.
///
/// Why this shape: measured with callgrind in one backend (a claim of 1000 small rows, literal
/// limits, bench/results/2026-12-01-1735-claim-share-callgrind.log), 047d321's claim without
/// any budget costs 82.6 M instructions; [`within_budget`]'s two window levels 91.6 M (+11 %);
/// this array 83.5 M, the flag included (+1 %). A MATERIALIZED CTE with `EXISTS` for the flag
/// cost 85.5 M, `array_agg ... FILTER` with `bool_or` 84.2 M.
fn within_share(limit: BatchLimit, filter: &str, after: (u8, u8)) -> String {
    format!(
        "SELECT ARRAY(SELECT CASE WHEN pg_column_compression(payload) IS NULL
                                  AND pg_column_compression(headers) IS NULL
                                  AND pg_column_size(payload) + pg_column_size(headers) <= {}
                             THEN ctid ELSE '(0,0)'::tid END
                        FROM ({}) r) AS a",
        limit.share(),
        ready(limit.rows, filter, after),
    )
}

/// The claim statement around `set`: the rows of [`within_budget`] (or [`within_share`]) that
/// fit, updated by TID, returning [`RETURNING`] and whether the budget ended the batch (for
/// [`Sizing::Share`]: whether rows were left as too large).
///
/// `limit` is written into the statement as two integer literals, not bound as parameters, so
/// that PostgreSQL plans the claim once per connection and reuses the plan. With `LIMIT $1` it
/// re-plans at every claim: a generic plan's `LIMIT $1` is costed as a tenth of the table, so the
/// plan cache keeps choosing custom plans, and planning this statement (four query levels, two
/// window functions) is about half of what a small claim costs the server (callgrind, one
/// backend: 0.56 of 1.27 M instructions for a claim of 3 rows; 0.6 of 88 M for 1000). A relay
/// uses one limit almost always (the circuit's probes and a `--max-events` remainder add a few),
/// so a few statements per connection. The cached plan is the generic plan the plans test pins
/// (TID scan, `outbox_ready_idx`); it is re-planned whenever the table's statistics change
/// (every vacuum or analyze), so a plan made on an empty table does not outlive the first
/// autovacuum.
/// `filter` is empty, or the condition [`ready_filtered`] adds beside ordered types.
/// `after`: the parameters of the claim's start (see [`ready`]).
fn claim_sql(set: &str, limit: BatchLimit, filter: &str, after: (u8, u8)) -> String {
    match limit.sizing {
        Sizing::Running => format!(
            "WITH sized AS MATERIALIZED ({})
             UPDATE outbox o
                SET {set}
              WHERE o.ctid = ANY(ARRAY(SELECT ctid FROM sized WHERE over_budget = 0))
              {RETURNING}, o.available_at AS position_at,
              EXISTS (SELECT FROM sized WHERE over_budget > 0) AS budget_reached,
              false AS trailer",
            within_budget(limit, filter, after)
        ),
        // When it takes nothing, one trailer row (`trailer`, placeholders in the event's
        // columns) says whether rows larger than the share were left (`budget_reached`):
        // without it an empty result could not tell that from nothing ready, and a running
        // claim followed every empty one to find out, walking the same index entries again
        // (twice the walk of a claim from the start while a snapshot keeps dead rows: 0.22 s
        // each over 1M). Its `position_at` is the statement's `now()`, up to which it found
        // nothing to claim ([`Claim::scanned_to`]).
        Sizing::Share => format!(
            "WITH t AS ({}),
             u AS (UPDATE outbox o
                      SET {set}
                    WHERE o.ctid = ANY((SELECT a FROM t)::tid[])
                    {RETURNING}, o.available_at AS position_at)
             SELECT u.*, (SELECT '(0,0)'::tid = ANY(a) FROM t) AS budget_reached,
                    false AS trailer
               FROM u
             UNION ALL
             SELECT 0, '00000000-0000-0000-0000-000000000000'::uuid, '', '', '', '{{}}', '{{}}', '',
                    now(), 0, now(), '(0,0)'::tid = ANY(a), true
               FROM t
              WHERE NOT EXISTS (SELECT FROM u)",
            within_share(limit, filter, after)
        ),
    }
}

/// [`ready`] of at most `rows` rows with one more condition (`filter`, ending in `AND `) before
/// its own: how the ordered types are kept out of the unordered claim (`db::ordering`).
pub fn ready_filtered(rows: i64, filter: &str) -> String {
    ready(rows, filter, (1, 2))
}

/// The lease claim within `limit`: `$1` lease in microseconds, `$2` claim token, `$3`, `$4` the
/// start ([`Position`]; NULLs for the start of the ready rows).
pub fn claim_lease_sql(limit: BatchLimit) -> String {
    claim_lease_sql_from(limit, "")
}

fn claim_lease_sql_from(limit: BatchLimit, filter: &str) -> String {
    claim_sql(
        "locked_until = now() + $1 * interval '1 microsecond',
                attempt_count = o.attempt_count + 1,
                claim_token = $2",
        limit,
        filter,
        (3, 4),
    )
}

/// The in-transaction claim within `limit`: `$1`, `$2` the start ([`Position`]; NULLs for the
/// start of the ready rows).
pub fn claim_tx_sql(limit: BatchLimit) -> String {
    claim_tx_sql_from(limit, "")
}

fn claim_tx_sql_from(limit: BatchLimit, filter: &str) -> String {
    claim_sql(
        "published_at = now(),
                locked_until = NULL,
                attempt_count = o.attempt_count + 1,
                last_error = NULL",
        limit,
        filter,
        (1, 2),
    )
}

/// A place in the claim order `(available_at, id)`: where a claim starts (just after it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Position {
    pub available_at: chrono::DateTime<chrono::Utc>,
    pub id: i64,
}

impl Position {
    /// The place just before this one: a claim after it starts with the row at `self`
    /// (ids are integers, so no row lies between the two).
    pub fn just_before(self) -> Self {
        Self {
            id: self.id.saturating_sub(1),
            ..self
        }
    }
}

fn start_binds(after: Option<Position>) -> (Option<chrono::DateTime<chrono::Utc>>, Option<i64>) {
    (after.map(|p| p.available_at), after.map(|p| p.id))
}

fn micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}

/// Lease mode: claims ready rows within `limit` for `lease`, stamping `token` and counting the
/// attempt. Commits on its own (autocommit), so no transaction stays open across the publish.
pub async fn claim_lease(
    conn: &mut PgConnection,
    limit: BatchLimit,
    lease: Duration,
    token: Uuid,
) -> sqlx::Result<Claim> {
    claim_lease_filtered(conn, limit, lease, token, "", None).await
}

/// [`claim_lease`] starting just after `after` (at the start of the ready rows when `None`),
/// over [`ready_filtered`] when `filter` is not empty (the unordered claim beside ordered types).
pub async fn claim_lease_filtered(
    conn: &mut PgConnection,
    limit: BatchLimit,
    lease: Duration,
    token: Uuid,
    filter: &str,
    after: Option<Position>,
) -> sqlx::Result<Claim> {
    let claim = ClaimOf::new(Mark::Lease { lease, token }, filter, after);
    claim.run(conn, limit).await
}

/// Transaction mode: claims ready rows within `limit` and marks them published in the caller's
/// open transaction. The caller publishes, reverts failures with [`revert_tx`], then commits; if
/// it dies instead, the transaction rolls back and the rows are claimable again.
pub async fn claim_tx(conn: &mut PgConnection, limit: BatchLimit) -> sqlx::Result<Claim> {
    claim_tx_filtered(conn, limit, "", None).await
}

/// [`claim_tx`] starting just after `after` (at the start of the ready rows when `None`), over
/// [`ready_filtered`] when `filter` is not empty (the unordered claim beside ordered types).
pub async fn claim_tx_filtered(
    conn: &mut PgConnection,
    limit: BatchLimit,
    filter: &str,
    after: Option<Position>,
) -> sqlx::Result<Claim> {
    ClaimOf::new(Mark::Tx, filter, after).run(conn, limit).await
}

/// How a claim marks its rows: leased (with the lease and the claim's token), or published in
/// the caller's transaction.
#[derive(Debug, Clone, Copy)]
enum Mark {
    Lease { lease: Duration, token: Uuid },
    Tx,
}

/// A claim apart from its limit: how it marks its rows, over which rows (see
/// [`claim_lease_filtered`]), and from where.
#[derive(Debug, Clone, Copy)]
struct ClaimOf<'a> {
    mark: Mark,
    filter: &'a str,
    after: Option<Position>,
}

impl<'a> ClaimOf<'a> {
    fn new(mark: Mark, filter: &'a str, after: Option<Position>) -> Self {
        Self {
            mark,
            filter,
            after,
        }
    }

    /// The claim, and the running claim that follows an empty share claim (see
    /// [`running_after`]).
    async fn run(self, conn: &mut PgConnection, limit: BatchLimit) -> sqlx::Result<Claim> {
        let first = self.once(conn, limit).await?;
        let Some(running) = running_after(limit, &first) else {
            return Ok(first);
        };
        let claim = self.once(conn, running).await?;
        Ok(claim.after_empty_share())
    }

    async fn once(self, conn: &mut PgConnection, limit: BatchLimit) -> sqlx::Result<Claim> {
        let Self {
            mark,
            filter,
            after,
        } = self;
        let (at, id) = start_binds(after);
        let sql = match mark {
            Mark::Lease { .. } => claim_lease_sql_from(limit, filter),
            Mark::Tx => claim_tx_sql_from(limit, filter),
        };
        let mut query = sqlx::query_as(&sql);
        if let Mark::Lease { lease, token } = mark {
            query = query.bind(micros(lease)).bind(token);
        }
        query
            .bind(at)
            .bind(id)
            .persistent(true)
            .fetch_all(conn)
            .await
            .map(|rows| Claim::from_rows(rows, limit.sizing))
    }
}

/// After `first`, a claim made with `limit`: the [`Sizing::Running`] limit to claim with at once
/// when `first` was a [`Sizing::Share`] claim that took nothing and left rows larger than the
/// share (its trailer row says so): every ready row of the first `rows` is larger, and the
/// running claim takes them. It runs on the same connection (in tx mode, in the same
/// transaction, so the share claim's locks on the rows it left, held until the transaction
/// ends, are this transaction's own and do not hold it up).
fn running_after(limit: BatchLimit, first: &Claim) -> Option<BatchLimit> {
    (limit.sizing == Sizing::Share && first.rows.is_empty() && first.left_large).then_some(
        BatchLimit {
            sizing: Sizing::Running,
            ..limit
        },
    )
}

/// Lease mode: marks `ids` published if `token` still owns them. Returns the ids it marked.
pub async fn settle_published(
    conn: &mut PgConnection,
    ids: &[i64],
    token: Uuid,
) -> sqlx::Result<Vec<i64>> {
    ids_of_token(
        conn,
        "UPDATE outbox
            SET published_at = now(), locked_until = NULL, last_error = NULL
          WHERE id = ANY($1) AND claim_token = $2
            AND published_at IS NULL AND dead_lettered_at IS NULL
          RETURNING id",
        ids,
        token,
    )
    .await
}

/// Runs `sql` with `ids` as `$1` and the claim's `token` as `$2`, returning ids. Nothing to look
/// at runs nothing.
async fn ids_of_token(
    conn: &mut PgConnection,
    sql: &'static str,
    ids: &[i64],
    token: Uuid,
) -> sqlx::Result<Vec<i64>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_scalar(sql)
        .bind(ids)
        .bind(token)
        .persistent(true)
        .fetch_all(conn)
        .await
}

/// One failed publish to record.
#[derive(Debug, Clone)]
pub struct Failure {
    pub id: i64,
    /// Retry after this long (ignored when `dead`).
    pub retry_in: Duration,
    pub dead: bool,
    pub error: String,
    /// The publish counts as an attempt (the claim counted it). False for an event the sink
    /// pushed back on ([`crate::sink::SinkError::Backpressure`]): deferred, its count restored.
    pub counted: bool,
}

/// What a failed publish does to its row: a retry at `now() + delay`, or a dead letter; the
/// sink's error either way; an uncounted one (deferred) gives back the attempt its claim
/// counted. `$1..$5` are the columns of [`failure_columns`]; used by both modes.
const FAILURE_OUTCOME: &str = "available_at = CASE WHEN f.dead THEN o.available_at
                                    ELSE now() + f.delay * interval '1 microsecond' END,
                dead_lettered_at = CASE WHEN f.dead THEN now() END,
                attempt_count = CASE WHEN f.counted THEN o.attempt_count
                                     ELSE greatest(o.attempt_count - 1, 0) END,
                last_error = f.err
           FROM unnest($1::bigint[], $2::bigint[], $3::bool[], $4::text[], $5::bool[])
                AS f(id, delay, dead, err, counted)";

/// Lease mode: records failures (retry later, or dead-letter) for rows `token` still owns and
/// has not settled yet (`locked_until IS NOT NULL`: the claim set it, the settle clears it), so a
/// settle retried after a lost connection changes nothing twice. Returns the ids it changed.
pub async fn settle_failed(
    conn: &mut PgConnection,
    failures: &[Failure],
    token: Uuid,
) -> sqlx::Result<Vec<i64>> {
    let sql = format!(
        "UPDATE outbox o
            SET locked_until = NULL,
                {FAILURE_OUTCOME}
          WHERE o.id = f.id AND o.claim_token = $6 AND o.locked_until IS NOT NULL
            AND o.published_at IS NULL AND o.dead_lettered_at IS NULL
          RETURNING o.id"
    );
    record_failures(conn, &sql, failures, Some(token)).await
}

/// Transaction mode: turns rows marked published by [`claim_tx`] back into retries or dead
/// letters, inside the same transaction. Returns how many rows it changed.
pub async fn revert_tx(conn: &mut PgConnection, failures: &[Failure]) -> sqlx::Result<u64> {
    let sql = format!(
        "UPDATE outbox o
            SET published_at = NULL,
                {FAILURE_OUTCOME}
          WHERE o.id = f.id
          RETURNING o.id"
    );
    let reverted = record_failures(conn, &sql, failures, None).await?;
    Ok(reverted.len() as u64)
}

/// Runs `sql`, a statement of [`FAILURE_OUTCOME`] returning the ids it changed, with `failures`
/// as its `$1..$5` and the lease's `token` (if any) as `$6`. Nothing to record runs nothing.
async fn record_failures(
    conn: &mut PgConnection,
    sql: &str,
    failures: &[Failure],
    token: Option<Uuid>,
) -> sqlx::Result<Vec<i64>> {
    if failures.is_empty() {
        return Ok(Vec::new());
    }
    let (ids, delays, dead, errors, counted) = failure_columns(failures);
    let mut query = sqlx::query_scalar(sql)
        .bind(ids)
        .bind(delays)
        .bind(dead)
        .bind(errors)
        .bind(counted);
    if let Some(token) = token {
        query = query.bind(token);
    }
    query.persistent(true).fetch_all(conn).await
}

/// The columns of [`FAILURE_OUTCOME`]'s `unnest`.
type FailureColumns<'a> = (Vec<i64>, Vec<i64>, Vec<bool>, Vec<&'a str>, Vec<bool>);

fn failure_columns(failures: &[Failure]) -> FailureColumns<'_> {
    (
        failures.iter().map(|f| f.id).collect(),
        failures.iter().map(|f| micros(f.retry_in)).collect(),
        failures.iter().map(|f| f.dead).collect(),
        failures.iter().map(|f| f.error.as_str()).collect(),
        failures.iter().map(|f| f.counted).collect(),
    )
}

/// Lease mode: gives back claimed rows that were never published (shutdown), undoing the attempt
/// count, so another relay takes them at once. Fenced like the settles, and only while the lease
/// is still set, so a release retried after a lost connection cannot undo the count twice.
pub async fn release(conn: &mut PgConnection, ids: &[i64], token: Uuid) -> sqlx::Result<u64> {
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(sqlx::query(
        "UPDATE outbox
            SET locked_until = NULL, attempt_count = greatest(attempt_count - 1, 0)
          WHERE id = ANY($1) AND claim_token = $2 AND locked_until IS NOT NULL
            AND published_at IS NULL AND dead_lettered_at IS NULL",
    )
    .bind(ids)
    .bind(token)
    .execute(conn)
    .await?
    .rows_affected())
}

/// Lease mode: gives back every row still leased to `token` and unsettled, undoing its attempt:
/// after a claim whose reply was lost, when the relay does not know which rows it took. Through
/// the pending rows' index (claimed rows were due), so it reads the backlog, not the table.
pub async fn release_token(conn: &mut PgConnection, token: Uuid) -> sqlx::Result<u64> {
    Ok(sqlx::query(
        "UPDATE outbox
            SET locked_until = NULL, attempt_count = greatest(attempt_count - 1, 0)
          WHERE claim_token = $1 AND locked_until IS NOT NULL
            AND published_at IS NULL AND dead_lettered_at IS NULL AND available_at <= now()",
    )
    .bind(token)
    .execute(conn)
    .await?
    .rows_affected())
}

/// Lease mode: which of `ids` still carry `token`, i.e. were claimed by no one since. A settle
/// retried after its connection broke uses it for the rows the retry did not change: still ours
/// means the earlier attempt did change them before the connection went (the fences above make a
/// second change a no-op); not ours means another relay claimed them after our lease.
pub async fn still_claimed(
    conn: &mut PgConnection,
    ids: &[i64],
    token: Uuid,
) -> sqlx::Result<Vec<i64>> {
    let sql = "SELECT id FROM outbox WHERE id = ANY($1) AND claim_token = $2";
    ids_of_token(conn, sql, ids, token).await
}

/// What a lease-mode settle does to a batch's rows: published ones marked, failed ones retried
/// later or dead-lettered, unpublished ones given back untouched. (Tx mode applies the same
/// sorting inside its claim's transaction.)
#[derive(Debug, Default)]
pub struct Settle {
    pub published: Vec<i64>,
    pub failures: Vec<Failure>,
    pub unpublished: Vec<i64>,
}

/// What a lease-mode settle changed: the ids marked published, the failures recorded, the rows
/// given back.
#[derive(Debug)]
pub struct Settled {
    pub marked: Vec<i64>,
    pub failed: Vec<i64>,
    pub released: u64,
}

/// Lease mode: the fenced settle of a batch ([`settle_published`], [`settle_failed`],
/// [`release`]). `retry`: an earlier attempt may have gone through before its connection broke,
/// so rows the statements did not change but that still carry `token` ([`still_claimed`]) count
/// as settled, not lost.
pub async fn settle_lease(
    conn: &mut PgConnection,
    s: &Settle,
    token: Uuid,
    retry: bool,
) -> sqlx::Result<Settled> {
    let mut marked = settle_published(conn, &s.published, token).await?;
    let mut failed = settle_failed(conn, &s.failures, token).await?;
    let released = release(conn, &s.unpublished, token).await?;
    if retry {
        let missing: Vec<i64> = s
            .published
            .iter()
            .chain(s.failures.iter().map(|f| &f.id))
            .filter(|id| !marked.contains(id) && !failed.contains(id))
            .copied()
            .collect();
        let ours: std::collections::HashSet<i64> = still_claimed(conn, &missing, token)
            .await?
            .into_iter()
            .collect();
        marked.extend(s.published.iter().filter(|id| ours.contains(id)));
        failed.extend(
            s.failures
                .iter()
                .map(|f| f.id)
                .filter(|id| ours.contains(id)),
        );
    }
    Ok(Settled {
        marked,
        failed,
        released,
    })
}

/// Transaction mode: the committed `last_error` of `ids`, read on a connection other than the
/// claiming transaction's (which cleared it): what [`unclaim_tx`] puts back.
pub async fn committed_errors(
    conn: &mut PgConnection,
    ids: &[i64],
) -> sqlx::Result<Vec<(i64, Option<String>)>> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    sqlx::query_as("SELECT id, last_error FROM outbox WHERE id = ANY($1)")
        .bind(ids)
        .fetch_all(conn)
        .await
}

/// Transaction mode: unmarks rows that were claimed but never published (shutdown), giving back
/// the attempt and the `last_error` the claim cleared (`previous`, from [`committed_errors`]).
pub async fn unclaim_tx(
    conn: &mut PgConnection,
    previous: &[(i64, Option<String>)],
) -> sqlx::Result<u64> {
    if previous.is_empty() {
        return Ok(0);
    }
    let (ids, errors): (Vec<i64>, Vec<Option<&str>>) =
        previous.iter().map(|(id, e)| (*id, e.as_deref())).unzip();
    Ok(sqlx::query(
        "UPDATE outbox o
            SET published_at = NULL, attempt_count = greatest(o.attempt_count - 1, 0),
                last_error = p.err
           FROM unnest($1::bigint[], $2::text[]) AS p(id, err)
          WHERE o.id = p.id",
    )
    .bind(ids)
    .bind(errors)
    .execute(conn)
    .await?
    .rows_affected())
}

/// How long until a pending row is next claimable, by the database clock: the earliest
/// `available_at` of an unleased pending row (zero when one is already due, e.g. a retry whose
/// backoff ran out while the relay was busy) or the earliest lease expiry of a due row.
/// `None` when nothing is pending.
pub async fn next_due_in(conn: &mut PgConnection) -> sqlx::Result<Option<Duration>> {
    let secs: Option<f64> = sqlx::query_scalar(
        "SELECT extract(epoch FROM least(
                  (SELECT min(available_at) FROM outbox
                    WHERE published_at IS NULL AND dead_lettered_at IS NULL
                      AND (locked_until IS NULL OR locked_until < now())),
                  (SELECT min(locked_until) FROM outbox
                    WHERE published_at IS NULL AND dead_lettered_at IS NULL AND available_at <= now()
                      AND locked_until >= now())
                ) - now())::float8",
    )
    .persistent(true)
    .fetch_one(conn)
    .await?;
    Ok(secs.map(|s| Duration::from_secs_f64(s.max(0.0))))
}

/// Turns on asynchronous commit for this session (see `relay --async-commit`).
#[allow(dead_code)]
pub async fn set_async_commit(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query("SET synchronous_commit = off")
        .execute(conn)
        .await
        .map(|_| ())
}

/// The relay heartbeat's figures: pending rows split into due and unleased (`backlog`), not yet
/// due (`scheduled`) and leased (`in_flight`; tx-mode claims hold row locks, not leases, and
/// count as backlog).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, sqlx::FromRow)]
pub struct Backlog {
    pub backlog: i64,
    pub scheduled: i64,
    pub in_flight: i64,
}

/// One pass over the pending rows, through the partial `outbox_ready_idx` (pending rows only, so
/// published history is never read); once a minute, so its cost is that of a `count(*)` over the
/// backlog.
pub async fn backlog(conn: &mut PgConnection) -> sqlx::Result<Backlog> {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE available_at <= now()
                                   AND (locked_until IS NULL OR locked_until < now())) AS backlog,
                count(*) FILTER (WHERE available_at > now()
                                   AND (locked_until IS NULL OR locked_until < now())) AS scheduled,
                count(*) FILTER (WHERE locked_until >= now()) AS in_flight
           FROM outbox
          WHERE published_at IS NULL AND dead_lettered_at IS NULL",
    )
    .fetch_one(conn)
    .await
}
