//! The statements behind the relay's `/metrics` and `/readyz` (`relay --metrics-addr`): one
//! sample of the outbox's state for the backlog gauges, and a ping. Both are read when scraped
//! or probed, never per event; the sample at most every few seconds (the caller caches it).

use sqlx::PgConnection;

/// The backlog gauges' figures, with the same meaning as `stats`: pending rows that are `ready`
/// (due, not leased), `scheduled` (not due yet, not leased) or `in_flight` (leased); `retrying`
/// are those not leased that failed before (counted attempts: a subset of ready and scheduled);
/// `dead` the dead letters; the age of the oldest pending row by `created_at`, whatever its
/// state; and the lag of the most overdue row (see `late_since!` in `db`: how long it has been due,
/// from when it first fell due once it has failed; a row scheduled for later does not count).
#[derive(Debug, Clone, Copy, Default, PartialEq, sqlx::FromRow)]
pub struct Sample {
    pub ready: i64,
    pub scheduled: i64,
    pub in_flight: i64,
    pub retrying: i64,
    pub dead: i64,
    /// Seconds; `None` when nothing is pending.
    pub oldest_pending_age_seconds: Option<f64>,
    /// How late the most overdue pending event is (`late_since!` in `db`); `None` when none is.
    pub oldest_pending_lag_seconds: Option<f64>,
    /// Ordered keys blocked by a dead-lettered head, and their pending events (as in `stats`;
    /// 0 on a schema without migration 6).
    #[sqlx(default)]
    pub blocked_keys: i64,
    #[sqlx(default)]
    pub blocked_events: i64,
}

/// One statement: a pass over the pending rows through the partial `outbox_ready_idx` (so
/// published history is never read) and a count over the partial `outbox_dead_idx`. Its cost is
/// that of a `count(*)` over the backlog and the dead letters, which is why it runs at most every
/// few seconds, when scraped.
pub const SAMPLE: &str = concat!(
    "SELECT count(*) FILTER (WHERE available_at <= now()
                               AND (locked_until IS NULL OR locked_until < now())) AS ready,
            count(*) FILTER (WHERE available_at > now()
                               AND (locked_until IS NULL OR locked_until < now())) AS scheduled,
            count(*) FILTER (WHERE locked_until >= now()) AS in_flight,
            count(*) FILTER (WHERE attempt_count > 0
                               AND (locked_until IS NULL OR locked_until < now())) AS retrying,
            (SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL) AS dead,
            extract(epoch FROM now() - min(created_at))::float8 AS oldest_pending_age_seconds,
            extract(epoch FROM now() - min(",
    late_since!(),
    "))::float8 AS oldest_pending_lag_seconds
       FROM outbox o
      WHERE published_at IS NULL AND dead_lettered_at IS NULL"
);

/// [`SAMPLE`], then the blocked keys ([`super::ordering::blocked_if_migrated`]: two small
/// statements over the tiny `outbox_blocking_idx` and the blocked keys' pending rows). While log
/// mode is on, an event the log has passed is pending only while it waits in the retry set
/// ([`super::log::PENDING`], as `stats` counts): the log marks no row it publishes.
pub async fn sample(conn: &mut PgConnection) -> sqlx::Result<Sample> {
    let mut s: Sample = if super::log::is_on(conn).await? {
        sqlx::query_as(&format!("{SAMPLE} AND {}", super::log::PENDING))
            .fetch_one(&mut *conn)
            .await?
    } else {
        sqlx::query_as(SAMPLE).fetch_one(&mut *conn).await?
    };
    if let Some(b) = super::ordering::blocked_if_migrated(conn).await? {
        s.blocked_keys = b.blocked_keys;
        s.blocked_events = b.blocked_events;
    }
    Ok(s)
}

/// Whether the database answers at all (`/readyz`): the cheapest round trip that runs a
/// statement, so a server that accepts connections but cannot run queries (recovery, a full
/// connection table) is not ready either.
pub async fn ping(conn: &mut PgConnection) -> sqlx::Result<()> {
    sqlx::query("SELECT 1").execute(conn).await.map(|_| ())
}
