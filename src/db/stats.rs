//! The figures behind `outboxctl stats`. Each statement reads one bounded index range: pending rows
//! (`outbox_ready_idx`), dead letters (`outbox_dead_idx`), the last hour of publishes
//! (`outbox_published_at_idx`). None scans published history.

use chrono::{DateTime, Utc};
use sqlx::{Connection, PgConnection, Postgres, Transaction};

/// Which column a breakdown groups by. The column names are fixed here, never taken from input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    None,
    EventType,
    Tenant,
    AggregateType,
}

impl GroupBy {
    /// The group's key as text.
    fn expr(self) -> &'static str {
        match self {
            GroupBy::None => "''",
            GroupBy::EventType => "event_type",
            GroupBy::Tenant => "tenant_id::text",
            GroupBy::AggregateType => "aggregate_type",
        }
    }

    /// What to group by: the column itself, so a uuid is cast to text once per group rather than
    /// once per row.
    fn group(self) -> &'static str {
        match self {
            GroupBy::None => "1",
            GroupBy::EventType => "event_type",
            GroupBy::Tenant => "tenant_id",
            GroupBy::AggregateType => "aggregate_type",
        }
    }
}

/// Pending rows, by state, per group.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PendingRow {
    pub key: String,
    pub ready: i64,
    pub scheduled: i64,
    pub in_flight: i64,
    pub retrying: i64,
    pub oldest_ready_available_at: Option<DateTime<Utc>>,
    pub oldest_ready_created_at: Option<DateTime<Utc>>,
    pub next_due_at: Option<DateTime<Utc>>,
    pub oldest_pending_created_at: Option<DateTime<Utc>>,
    /// The earliest moment a pending row became late (`late_since!` in `db`); `None` when no row
    /// is late.
    pub late_since: Option<DateTime<Utc>>,
}

/// Starts the read-only snapshot the figures are read in, so they agree with each other.
///
/// JIT is off for it: on a big backlog the planner's cost of the pending scan passes
/// `jit_above_cost`, and compiling the expressions then takes longer than the whole scan.
pub async fn snapshot(conn: &mut PgConnection) -> sqlx::Result<Transaction<'_, Postgres>> {
    let mut tx = conn.begin().await?;
    sqlx::raw_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL jit = off")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Every statement the figures are read with, by name (for EXPLAIN in tests and benchmarks).
pub fn statements(by: GroupBy) -> [(&'static str, String); 3] {
    [
        ("pending", pending_sql(by)),
        ("dead", dead_sql(by)),
        ("published_recent", published_recent_sql(by)),
    ]
}

/// Pending rows by group. While log mode is on, an event the log has passed is pending only
/// while it waits in the retry set (`db::log::PENDING`).
pub async fn pending(conn: &mut PgConnection, by: GroupBy) -> sqlx::Result<Vec<PendingRow>> {
    let sql = if super::log::is_on(conn).await? {
        pending_sql(by).replace(
            "WHERE published_at IS NULL AND dead_lettered_at IS NULL",
            &format!(
                "WHERE published_at IS NULL AND dead_lettered_at IS NULL AND {}",
                super::log::PENDING
            ),
        )
    } else {
        pending_sql(by)
    };
    sqlx::query_as(&sql).fetch_all(conn).await
}

/// Pending rows (the partial `outbox_ready_idx`), split into ready, scheduled and leased; plus
/// those that failed at least once and wait for a retry (`retrying`: counted attempts, not
/// leased), the oldest pending row's `created_at` whatever its state, so an outage or a
/// backlog of retries shows as age even when nothing is ready, and since when the most overdue
/// row has been late (`late_since!`: a delayed event that was never tried is not late).
pub fn pending_sql(by: GroupBy) -> String {
    // Leased: locked_until >= now(). Ready: due and not leased. Scheduled: not due, not leased.
    format!(
        "SELECT {key} AS key,
                count(*) FILTER (WHERE {due} AND {free}) AS ready,
                count(*) FILTER (WHERE NOT {due} AND {free}) AS scheduled,
                count(*) FILTER (WHERE locked_until >= now()) AS in_flight,
                count(*) FILTER (WHERE attempt_count > 0 AND {free}) AS retrying,
                min(available_at) FILTER (WHERE {due} AND {free}) AS oldest_ready_available_at,
                min(created_at) FILTER (WHERE {due} AND {free}) AS oldest_ready_created_at,
                min(available_at) FILTER (WHERE NOT {due} AND {free}) AS next_due_at,
                min(created_at) AS oldest_pending_created_at,
                min({late}) AS late_since
           FROM outbox o
          WHERE published_at IS NULL AND dead_lettered_at IS NULL
          GROUP BY {group}",
        key = by.expr(),
        group = by.group(),
        due = "available_at <= now()",
        free = "(locked_until IS NULL OR locked_until < now())",
        late = late_since!(),
    )
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CountRow {
    pub key: String,
    pub a: i64,
    pub b: i64,
}

/// Dead-lettered rows per group (`a`; `b` is 0).
pub async fn dead(conn: &mut PgConnection, by: GroupBy) -> sqlx::Result<Vec<CountRow>> {
    sqlx::query_as(&dead_sql(by)).fetch_all(conn).await
}

/// Dead letters (the partial `outbox_dead_idx`).
pub fn dead_sql(by: GroupBy) -> String {
    format!(
        "SELECT {key} AS key, count(*) AS a, 0::bigint AS b
           FROM outbox WHERE dead_lettered_at IS NOT NULL GROUP BY {group}",
        key = by.expr(),
        group = by.group()
    )
}

/// Published in the last minute (`a`) and hour (`b`) per group.
pub async fn published_recent(conn: &mut PgConnection, by: GroupBy) -> sqlx::Result<Vec<CountRow>> {
    sqlx::query_as(&published_recent_sql(by))
        .fetch_all(conn)
        .await
}

/// The last hour of `outbox_published_at_idx`.
pub fn published_recent_sql(by: GroupBy) -> String {
    format!(
        "SELECT {key} AS key,
                count(*) FILTER (WHERE published_at > now() - interval '1 minute') AS a,
                count(*) AS b
           FROM outbox WHERE published_at > now() - interval '1 hour' GROUP BY {group}",
        key = by.expr(),
        group = by.group()
    )
}

/// The planner's estimate of the table's row count (free: no scan). `None` when the table was
/// never analysed or vacuumed (`reltuples = -1`): unknown, not zero.
pub async fn table_rows_estimate(conn: &mut PgConnection) -> sqlx::Result<Option<i64>> {
    sqlx::query_scalar(
        "SELECT CASE WHEN reltuples < 0 THEN NULL ELSE reltuples::bigint END
           FROM pg_class WHERE oid = 'outbox'::regclass",
    )
    .fetch_one(conn)
    .await
}

/// The database clock.
pub async fn now(conn: &mut PgConnection) -> sqlx::Result<DateTime<Utc>> {
    sqlx::query_scalar("SELECT now()").fetch_one(conn).await
}
