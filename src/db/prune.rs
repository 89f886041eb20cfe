//! Prune statements (published events, dead letters, the consumer dedup table and the audit
//! trail): one short DELETE per batch (which also counts into the run's audit row), and
//! the lease that keeps prunes from overlapping.
//!
//! Each batch picks at most `n` ctids with a bounded index (or TID range) scan and deletes them in
//! the same statement, re-checking the retention predicate in the DELETE itself: a row that is
//! not (or no longer) eligible is never deleted, whatever happened between the pick and the
//! delete. Each batch also returns where it stopped so the next one starts there, instead of
//! walking again over the index entries of rows already deleted (they stay until VACUUM).
//!
//! The DELETE reaches its rows by a TID scan whatever the statistics say: its re-check is
//! written `(...) IS TRUE`, which no index can serve, so the only ways in are the ctid array
//! (a TID scan) or a sequential scan. Written plainly, the re-check let the planner, with
//! statistics from before a drain (no row published), walk `outbox_published_at_idx` over the
//! whole range filtering `ctid = ANY(...)` at every batch: rows x batch (issue 22 item 10).

use std::marker::PhantomData;

use chrono::{DateTime, Utc};
use sqlx::{PgConnection, Postgres};
use uuid::Uuid;

use super::log::passed;

/// What one batch did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Batch<K> {
    pub deleted: u64,
    /// Where the next batch starts (None when nothing was deleted).
    pub next: Option<K>,
}

/// now() - `micros`, from the database clock.
pub async fn cutoff(conn: &mut PgConnection, micros: i64) -> sqlx::Result<DateTime<Utc>> {
    sqlx::query_scalar("SELECT now() - $1::bigint * interval '1 microsecond'")
        .bind(micros)
        .fetch_one(conn)
        .await
}

/// Published events published before `cutoff`.
pub async fn count_published(conn: &mut PgConnection, cutoff: DateTime<Utc>) -> sqlx::Result<i64> {
    count(
        conn,
        "SELECT count(*) FROM outbox WHERE published_at < $1",
        cutoff,
    )
    .await
}

/// Runs `sql`, a count of the rows before the cutoff `$1`.
async fn count(
    conn: &mut PgConnection,
    sql: &'static str,
    cutoff: DateTime<Utc>,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(sql).bind(cutoff).fetch_one(conn).await
}

/// Dead letters dead-lettered before `cutoff` that prune may delete: not those that block their
/// ordered key (see [`count_blocking_dead`]).
pub async fn count_dead(conn: &mut PgConnection, cutoff: DateTime<Utc>) -> sqlx::Result<i64> {
    let sql = "SELECT count(*) FROM outbox
                WHERE dead_lettered_at < $1 AND published_at IS NULL AND blocks_key IS NOT TRUE";
    count(conn, sql, cutoff).await
}

/// Dead letters dead-lettered before `cutoff` that block their ordered key: prune keeps them
/// until an operator decides (requeue, `ordering skip`, `dead discard`). Reads the blocking
/// dead letters' partial index (migration 6).
pub async fn count_blocking_dead(
    conn: &mut PgConnection,
    cutoff: DateTime<Utc>,
) -> sqlx::Result<i64> {
    let sql = "SELECT count(*) FROM outbox
                WHERE blocks_key AND dead_lettered_at IS NOT NULL AND dead_lettered_at < $1
                  AND published_at IS NULL";
    count(conn, sql, cutoff).await
}

/// processed_messages rows processed before `cutoff`.
pub async fn count_processed(conn: &mut PgConnection, cutoff: DateTime<Utc>) -> sqlx::Result<i64> {
    let sql = "SELECT count(*) FROM processed_messages WHERE processed_at < $1";
    count(conn, sql, cutoff).await
}

/// Every batch statement, by name (for EXPLAIN in tests): each deletes by `ctid = ANY(ARRAY(..))`.
pub const BATCH_STATEMENTS: [(&str, &str); 5] = [
    (PUBLISHED.name, PUBLISHED.sql),
    ("published_by_log", PUBLISHED_BY_LOG.sql),
    (DEAD.name, DEAD.sql),
    (PROCESSED.name, PROCESSED.sql),
    (AUDIT.name, AUDIT.sql),
];

/// A prune run's audit row. It is created by the first batch that deletes anything (a run that
/// deletes nothing changed nothing and leaves no row), in that batch's statement; every later
/// batch adds its count to it in its own statement, so the row's counts are exactly what was
/// committed, even when the run is killed between batches.
#[derive(Debug, Clone)]
pub struct PruneAudit {
    pub actor: String,
    /// The row's initial `details`: `{"<table>": {"cutoff": ..., "deleted": 0}, ...}` for each
    /// table the run prunes.
    pub details: serde_json::Value,
    /// The row, once a batch has created it.
    pub id: Option<i64>,
}

/// The end of every batch statement: given CTE `n(n, next)` (rows deleted, where to resume),
/// creates the run's audit row (`$4` is NULL) or adds `n` to it (`$4` is its id) at the path `$7`
/// (e.g. `{published,deleted}`) of its details; `$5` actor, `$6` initial details. Returns
/// deleted, next, and the audit row's id.
macro_rules! prune_audit_tail {
    () => {
        ", created AS (
             INSERT INTO outbox_audit (action, actor, details)
             SELECT 'prune', $5, jsonb_set($6::jsonb, $7::text[], to_jsonb(n.n))
               FROM n WHERE $4::bigint IS NULL AND n.n > 0
             RETURNING id
         ), counted AS (
             UPDATE outbox_audit a
                SET details = jsonb_set(a.details, $7::text[],
                        to_jsonb(coalesce((a.details #>> $7::text[])::bigint, 0) + n.n))
               FROM n WHERE a.id = $4::bigint AND n.n > 0
             RETURNING a.id
         )
         SELECT n.n, n.next, coalesce((SELECT id FROM created), (SELECT id FROM counted), $4::bigint)
           FROM n"
    };
}

fn audit_path(table: &str) -> Vec<String> {
    vec![table.to_owned(), "deleted".to_owned()]
}

/// A table's batch statement (its `$1` cutoff, `$2` where to start, `$3` batch size, then
/// [`prune_audit_tail`]'s parameters) and the name its deletions count under in the run's audit
/// row; `K` is where a batch resumes.
pub struct Table<K> {
    pub sql: &'static str,
    pub name: &'static str,
    resume: PhantomData<fn() -> K>,
}

/// Where a batch resumes: a value bound as `$2` and read back as `next`.
pub trait Resume:
    for<'q> sqlx::Encode<'q, Postgres>
    + for<'r> sqlx::Decode<'r, Postgres>
    + sqlx::Type<Postgres>
    + Send
    + Unpin
{
}

impl<K> Resume for K where
    K: for<'q> sqlx::Encode<'q, Postgres>
        + for<'r> sqlx::Decode<'r, Postgres>
        + sqlx::Type<Postgres>
        + Send
        + Unpin
{
}

impl<K> Table<K> {
    const fn new(name: &'static str, sql: &'static str) -> Self {
        Self {
            sql,
            name,
            resume: PhantomData,
        }
    }
}

/// Runs one batch of `table` (see each table's statement: [`PUBLISHED`], [`DEAD`],
/// [`PROCESSED`], [`AUDIT`]) from `from` (the previous batch's `next`): deletes up to `n` rows
/// older than `cutoff` and counts them into the run's audit row.
pub async fn delete<K: Resume>(
    conn: &mut PgConnection,
    table: &Table<K>,
    cutoff: DateTime<Utc>,
    from: Option<K>,
    n: u32,
    audit: &mut PruneAudit,
) -> sqlx::Result<Batch<K>> {
    let (deleted, next, id): (i64, Option<K>, Option<i64>) = sqlx::query_as(table.sql)
        .bind(cutoff)
        .bind(from)
        .bind(i64::from(n))
        .bind(audit.id)
        .bind(&audit.actor)
        .bind(&audit.details)
        .bind(audit_path(table.name))
        .fetch_one(conn)
        .await?;
    audit.id = id;
    Ok(Batch {
        deleted: deleted as u64,
        next,
    })
}

/// A batch statement over `outbox` by the time column `$col`: the oldest rows first (a range of
/// the column's index, from where the last batch stopped) that are before the cutoff and meet
/// `$also`, which the DELETE re-checks.
#[rustfmt::skip]
macro_rules! delete_outbox_before {
    ($col:literal, $also:literal) => {
        concat!(
            "WITH d AS (
         DELETE FROM outbox
          WHERE ctid = ANY(ARRAY(
                    SELECT ctid FROM outbox
                     WHERE ", $col, " < $1
                       AND ", $col, " >= coalesce($2, '-infinity'::timestamptz)", $also, "
                     ORDER BY ", $col, "
                     LIMIT $3))
            AND (", $col, " < $1", $also, ") IS TRUE
         RETURNING ", $col, "
     ), n AS (SELECT count(*) AS n, max(", $col, ") AS next FROM d)",
            prune_audit_tail!()
        )
    };
}

/// [`PUBLISHED`]'s statement.
pub const DELETE_PUBLISHED: &str = delete_outbox_before!("published_at", "");

/// Events published before the cutoff, oldest first. Reads a range of `outbox_published_at_idx`.
pub const PUBLISHED: Table<DateTime<Utc>> = Table::new("published", DELETE_PUBLISHED);

/// Log mode (migration 14): an event `o` the log has published: one the log has passed
/// (`passed!`, declared once in `db::log`) that is not waiting in the retry set and carries no
/// mark (`published_at` or `dead_lettered_at`: those go by [`PUBLISHED`] and [`DEAD`]). Its
/// transaction is below the xmax of the newest snapshot the log read (the window's, else the
/// position's), a range of `outbox_xid_idx`, oldest transaction first (a batch resumes at the
/// last transaction id it deleted). Not the position's xmin: any transaction open in the cluster
/// when the reader took its snapshot holds that back, and prune then found nothing the log had
/// just published
/// (`relay::log_mode::prune_deletes_what_the_log_published_while_an_older_transaction_is_open_elsewhere`).
/// It has no publication time, so retention goes by `created_at`.
macro_rules! published_by_log {
    () => {
        concat!(
            "o.xid < pg_snapshot_xmax(coalesce(l.window_to, l.position)) AND ",
            passed!("l"),
            "
                AND o.created_at < $1 AND o.published_at IS NULL AND o.dead_lettered_at IS NULL
                AND NOT EXISTS (SELECT FROM outbox_log_retry r WHERE r.id = o.id)"
        )
    };
}

/// [`PUBLISHED_BY_LOG`]'s statement.
pub const DELETE_PUBLISHED_BY_LOG: &str = concat!(
    "WITH d AS (
         DELETE FROM outbox o
          WHERE ctid = ANY(ARRAY(
                    SELECT o.ctid FROM outbox o, outbox_log l
                     WHERE ",
    published_by_log!(),
    "
                       AND o.xid >= coalesce($2::xid8, '0'::xid8)
                     ORDER BY o.xid
                     LIMIT $3))
            AND (EXISTS (SELECT FROM outbox_log l WHERE ",
    published_by_log!(),
    ")) IS TRUE
         RETURNING o.xid
     ), n AS (SELECT count(*) AS n, max(xid)::text AS next FROM d)",
    prune_audit_tail!()
);

/// Events the log published, created before the cutoff (log mode): counted under `published`.
pub const PUBLISHED_BY_LOG: Table<String> = Table::new("published", DELETE_PUBLISHED_BY_LOG);

/// Events the log published, created before `cutoff`, while log mode is on.
pub async fn count_published_by_log(
    conn: &mut PgConnection,
    cutoff: DateTime<Utc>,
) -> sqlx::Result<i64> {
    count(
        conn,
        concat!(
            "SELECT count(*) FROM outbox o, outbox_log l WHERE ",
            published_by_log!()
        ),
        cutoff,
    )
    .await
}

/// [`DEAD`]'s statement.
pub const DELETE_DEAD: &str = delete_outbox_before!(
    "dead_lettered_at",
    " AND published_at IS NULL AND blocks_key IS NOT TRUE"
);

/// Dead letters dead-lettered before the cutoff, oldest first, but not those blocking their
/// ordered key. Reads a range of `outbox_dead_idx`. A row requeued meanwhile is no longer dead
/// and stays.
pub const DEAD: Table<DateTime<Utc>> = Table::new("dead", DELETE_DEAD);

/// [`PROCESSED`]'s statement.
pub const DELETE_PROCESSED: &str = concat!(
    "WITH d AS (
         DELETE FROM processed_messages
          WHERE ctid = ANY(ARRAY(
                    SELECT ctid FROM processed_messages
                     WHERE ctid > coalesce($2::text, '(0,0)')::tid
                       AND processed_at < $1
                     LIMIT $3))
            AND (processed_at < $1) IS TRUE
         RETURNING ctid
     ), n AS (SELECT count(*) AS n, max(ctid)::text AS next FROM d)",
    prune_audit_tail!()
);

/// processed_messages rows processed before the cutoff, walking the heap in ctid order from where
/// the last batch stopped (a TID range scan: the table has no index on processed_at, and this
/// never rereads the pages already pruned). A row skipped here is only left for the next run.
pub const PROCESSED: Table<String> = Table::new("processed_messages", DELETE_PROCESSED);

/// Audit trail rows written before `cutoff`.
pub async fn count_audit(conn: &mut PgConnection, cutoff: DateTime<Utc>) -> sqlx::Result<i64> {
    count(
        conn,
        "SELECT count(*) FROM outbox_audit WHERE at < $1",
        cutoff,
    )
    .await
}

/// [`AUDIT`]'s statement.
pub const DELETE_AUDIT: &str = concat!(
    "WITH w AS (
         SELECT ctid, id, at FROM outbox_audit
          WHERE id > coalesce($2::bigint, 0)
          ORDER BY id
          LIMIT $3
     ), d AS (
         DELETE FROM outbox_audit
          WHERE ctid = ANY(ARRAY(SELECT ctid FROM w WHERE at < $1))
            AND (at < $1) IS TRUE
         RETURNING id
     ), n AS (SELECT count(*) AS n, (SELECT max(id) FROM w) AS next FROM d)",
    prune_audit_tail!()
);

/// The audit trail rows written before the cutoff among the next `n` rows by id after where the
/// last batch stopped (a bounded primary-key range: the table has no index on `at`, and ids follow
/// `at` to within one transaction's length). `next` is the last id looked at, so a batch that
/// deletes fewer than `n` met a row newer than the cutoff (or the end): the table is done, and a
/// row older than a newer one before it is left for the next run. The run's own row is newer
/// than any cutoff (the retention is never zero).
pub const AUDIT: Table<i64> = Table::new("audit", DELETE_AUDIT);

/// Who holds a lease.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LockHolder {
    pub holder_info: String,
    pub acquired_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
}

/// Takes the lease `name` for `ttl_micros` unless someone else holds an unexpired one. One
/// statement, so it works in autocommit behind a transaction-pooling proxy; concurrent callers
/// serialise on the primary key and exactly one wins.
pub async fn try_lock(
    conn: &mut PgConnection,
    name: &str,
    holder: Uuid,
    holder_info: &str,
    ttl_micros: i64,
) -> sqlx::Result<bool> {
    let got: Option<Uuid> = sqlx::query_scalar(
        "INSERT INTO outbox_locks (name, holder, holder_info, acquired_at, expires_at)
         VALUES ($1, $2, $3 || ' from ' || coalesce(host(inet_client_addr()), 'local socket'),
                 now(), now() + $4::bigint * interval '1 microsecond')
         ON CONFLICT (name) DO UPDATE
            SET holder = EXCLUDED.holder, holder_info = EXCLUDED.holder_info,
                acquired_at = EXCLUDED.acquired_at, expires_at = EXCLUDED.expires_at
          WHERE outbox_locks.expires_at < now()
         RETURNING holder",
    )
    .bind(name)
    .bind(holder)
    .bind(holder_info)
    .bind(ttl_micros)
    .fetch_optional(conn)
    .await?;
    Ok(got == Some(holder))
}

/// The current holder of `name`, if any.
pub async fn lock_holder(conn: &mut PgConnection, name: &str) -> sqlx::Result<Option<LockHolder>> {
    sqlx::query_as("SELECT holder_info, acquired_at, expires_at FROM outbox_locks WHERE name = $1")
        .bind(name)
        .fetch_optional(conn)
        .await
}

/// Extends our lease; false when it is no longer ours (it expired and someone else took it).
pub async fn renew_lock(
    conn: &mut PgConnection,
    name: &str,
    holder: Uuid,
    ttl_micros: i64,
) -> sqlx::Result<bool> {
    let r = sqlx::query(
        "UPDATE outbox_locks SET expires_at = now() + $3::bigint * interval '1 microsecond'
          WHERE name = $1 AND holder = $2",
    )
    .bind(name)
    .bind(holder)
    .bind(ttl_micros)
    .execute(conn)
    .await?;
    Ok(r.rows_affected() == 1)
}

/// Gives the lease back (only if it is still ours).
pub async fn unlock(conn: &mut PgConnection, name: &str, holder: Uuid) -> sqlx::Result<()> {
    sqlx::query("DELETE FROM outbox_locks WHERE name = $1 AND holder = $2")
        .bind(name)
        .bind(holder)
        .execute(conn)
        .await?;
    Ok(())
}
