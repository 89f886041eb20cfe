//! The figures behind `outboxctl stats`. Each statement reads one bounded index range: pending rows
//! (`outbox_ready_idx`), dead letters (`outbox_dead_idx`), the last hour of publishes
//! (`outbox_published_at_idx`). None scans published history.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

/// Which column a breakdown groups by. The column names are fixed here, never taken from input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupBy {
    None,
    EventType,
    Tenant,
    AggregateType,
}

impl GroupBy {
    fn expr(self) -> &'static str {
        match self {
            GroupBy::None => "''",
            GroupBy::EventType => "event_type",
            GroupBy::Tenant => "tenant_id::text",
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
    pub oldest_ready_available_at: Option<DateTime<Utc>>,
    pub oldest_ready_created_at: Option<DateTime<Utc>>,
    pub next_due_at: Option<DateTime<Utc>>,
}

pub async fn pending(conn: &mut PgConnection, by: GroupBy) -> sqlx::Result<Vec<PendingRow>> {
    let sql = format!(
        "SELECT {key} AS key,
                count(*) FILTER (WHERE ready) AS ready,
                count(*) FILTER (WHERE NOT leased AND available_at > now()) AS scheduled,
                count(*) FILTER (WHERE leased) AS in_flight,
                min(available_at) FILTER (WHERE ready) AS oldest_ready_available_at,
                min(created_at) FILTER (WHERE ready) AS oldest_ready_created_at,
                min(available_at) FILTER (WHERE NOT leased AND available_at > now()) AS next_due_at
           FROM (SELECT *, coalesce(locked_until >= now(), false) AS leased,
                        available_at <= now() AND coalesce(locked_until < now(), true) AS ready
                   FROM outbox
                  WHERE published_at IS NULL AND dead_lettered_at IS NULL) p
          GROUP BY 1",
        key = by.expr()
    );
    sqlx::query_as(&sql).fetch_all(conn).await
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CountRow {
    pub key: String,
    pub a: i64,
    pub b: i64,
}

/// Dead-lettered rows per group (`a`; `b` is 0).
pub async fn dead(conn: &mut PgConnection, by: GroupBy) -> sqlx::Result<Vec<CountRow>> {
    let sql = format!(
        "SELECT {key} AS key, count(*) AS a, 0::bigint AS b
           FROM outbox WHERE dead_lettered_at IS NOT NULL GROUP BY 1",
        key = by.expr()
    );
    sqlx::query_as(&sql).fetch_all(conn).await
}

/// Published in the last minute (`a`) and hour (`b`) per group.
pub async fn published_recent(conn: &mut PgConnection, by: GroupBy) -> sqlx::Result<Vec<CountRow>> {
    let sql = format!(
        "SELECT {key} AS key,
                count(*) FILTER (WHERE published_at > now() - interval '1 minute') AS a,
                count(*) AS b
           FROM outbox WHERE published_at > now() - interval '1 hour' GROUP BY 1",
        key = by.expr()
    );
    sqlx::query_as(&sql).fetch_all(conn).await
}

/// The planner's estimate of the table's row count (free: no scan).
pub async fn table_rows_estimate(conn: &mut PgConnection) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "SELECT greatest(reltuples, 0)::bigint FROM pg_class WHERE oid = 'outbox'::regclass",
    )
    .fetch_one(conn)
    .await
}

/// The database clock.
pub async fn now(conn: &mut PgConnection) -> sqlx::Result<DateTime<Utc>> {
    sqlx::query_scalar("SELECT now()").fetch_one(conn).await
}
