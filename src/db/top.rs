//! The statements only `outboxctl top` runs, beside the figures it shares with `stats`
//! (`db::stats`) and the blocked keys of `db::ordering`. Each is sent every interval (1s by
//! default), so each reads a bounded range of one index or an in-memory view, never published
//! history:
//!
//! - [`published_buckets`]: the newest entries of `outbox_published_at_idx` (the last few
//!   intervals; the whole sparkline once, at the start);
//! - [`newest_dead`]: the first entries of `outbox_dead_idx` (ordered as the index is, with a
//!   LIMIT: a walk of `limit` entries however many dead letters there are);
//! - [`relays`]: `pg_stat_activity`, which reads the server's shared memory (one row per
//!   backend), no table.
//!
//! The relay names its sessions ([`relay_application_name`]) so that `top` can tell its
//! connections, their mode and their process apart from every other `outboxctl` session.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

/// What every relay's `application_name` starts with (other commands' sessions are `outboxctl`).
pub const RELAY_APPLICATION_PREFIX: &str = "outboxctl relay ";

/// The `application_name` of a relay's sessions: `outboxctl relay <mode> <daemon|once> <pid>
/// <schema>`, e.g. `outboxctl relay tx daemon 4242 public`: its settle mode, whether it is a
/// daemon or a `--once` run (cron), its process id on its host and its schema. PostgreSQL keeps
/// the first 63 bytes (a longer schema name is cut; [`RelayName::parse`] reads what is left).
pub fn relay_application_name(mode: &str, once: bool, pid: u32, schema: &str) -> String {
    let kind = if once { "once" } else { "daemon" };
    format!("{RELAY_APPLICATION_PREFIX}{mode} {kind} {pid} {schema}")
}

/// A relay's `application_name` read back ([`relay_application_name`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RelayName {
    pub mode: String,
    /// `daemon` or `once`.
    pub kind: String,
    /// The relay's process id on its own host.
    pub pid: u32,
    /// The schema it relays (possibly cut short by PostgreSQL's 63-byte limit).
    pub schema: String,
}

impl RelayName {
    /// `None` for a name that is not a relay's.
    pub fn parse(name: &str) -> Option<Self> {
        let rest = name.strip_prefix(RELAY_APPLICATION_PREFIX)?;
        let mut parts = rest.splitn(4, ' ');
        let mode = parts.next()?.to_owned();
        let kind = parts.next()?.to_owned();
        let pid = parts.next()?.parse().ok()?;
        let schema = parts.next().unwrap_or("").to_owned();
        Some(Self {
            mode,
            kind,
            pid,
            schema,
        })
    }
}

/// The relays' sessions of this database, one row per relay process (same `application_name`
/// from the same client address): how many connections it has, how many are running a statement
/// now, whether one of them LISTENs on `channel` (a daemon of this schema), and when any of them
/// last changed state (its last statement began or ended).
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct RelayRow {
    pub application_name: String,
    pub client_addr: Option<String>,
    pub connections: i64,
    pub active: i64,
    pub listens: bool,
    pub connected_since: Option<DateTime<Utc>>,
    pub last_activity: Option<DateTime<Utc>>,
}

/// `pg_stat_activity` is a view over the server's shared memory, as many rows as backends: no
/// table, no index, however large the outbox. A role without `pg_read_all_stats` sees other
/// roles' sessions without their state, query or times (then `listens` is false and the times
/// are null). Query texts are compared, never read out: they may hold payloads.
pub const RELAYS: &str = "SELECT application_name, host(client_addr) AS client_addr,
        count(*) AS connections,
        count(*) FILTER (WHERE state = 'active') AS active,
        coalesce(bool_or(query = 'LISTEN \"' || $1 || '\"'), false) AS listens,
        min(backend_start) AS connected_since,
        max(state_change) AS last_activity
   FROM pg_stat_activity
  WHERE datname = current_database() AND starts_with(application_name, $2)
  GROUP BY application_name, host(client_addr)
  ORDER BY min(backend_start), application_name";

pub async fn relays(conn: &mut PgConnection, channel: &str) -> sqlx::Result<Vec<RelayRow>> {
    sqlx::query_as(RELAYS)
        .bind(channel)
        .bind(RELAY_APPLICATION_PREFIX)
        .fetch_all(conn)
        .await
}

/// How many events were published in each interval (`bucket`: the interval's number since the
/// Unix epoch, `published_at` in microseconds divided by the interval's) from `$2` on: a range
/// of `outbox_published_at_idx` from `$2` to its newest entry (the rows published since then,
/// which `top` keeps to the last few intervals after the first sample). Counted from the rows
/// rather than a counter, so every relay counts, wherever it runs; and recounted for the last few
/// intervals at each sample, so a transaction-mode batch, whose `published_at` is its claim's
/// time but which becomes visible only at its commit, lands in its interval a sample later.
pub const PUBLISHED_BUCKETS: &str =
    "SELECT (extract(epoch FROM published_at) * 1000000)::bigint / $1 AS bucket, count(*) AS n
       FROM outbox
      WHERE published_at >= $2
      GROUP BY 1";

/// `(bucket, events published in it)`; buckets without a publish are absent. `bucket_us` is the
/// interval in microseconds (> 0).
pub async fn published_buckets(
    conn: &mut PgConnection,
    bucket_us: i64,
    since: DateTime<Utc>,
) -> sqlx::Result<Vec<(i64, i64)>> {
    sqlx::query_as(PUBLISHED_BUCKETS)
        .bind(bucket_us)
        .bind(since)
        .fetch_all(conn)
        .await
}

/// A dead letter as `top` lists it: no payload, no headers, the error cut to 500 characters.
#[derive(Debug, Clone, PartialEq, sqlx::FromRow)]
pub struct DeadLetterRow {
    pub id: i64,
    pub event_type: String,
    pub aggregate_type: String,
    pub dead_lettered_at: DateTime<Utc>,
    pub attempt_count: i32,
    pub last_error: Option<String>,
}

/// The newest `$1` dead letters: `outbox_dead_idx` is `(dead_lettered_at DESC, id DESC)` over the
/// dead rows only, so this is its first `$1` entries.
pub const NEWEST_DEAD: &str =
    "SELECT id, event_type, aggregate_type, dead_lettered_at, attempt_count,
        left(last_error, 500) AS last_error
   FROM outbox
  WHERE dead_lettered_at IS NOT NULL
  ORDER BY dead_lettered_at DESC, id DESC
  LIMIT $1";

pub async fn newest_dead(conn: &mut PgConnection, limit: i64) -> sqlx::Result<Vec<DeadLetterRow>> {
    sqlx::query_as(NEWEST_DEAD)
        .bind(limit)
        .fetch_all(conn)
        .await
}

/// Every statement of this module, by name, with arguments for `EXPLAIN ... EXECUTE` (for the
/// plan tests): `(name, sql, args)`.
pub fn statements() -> [(&'static str, &'static str, &'static str); 3] {
    [
        ("relays", RELAYS, "('outboxctl:x', 'outboxctl relay ')"),
        (
            "published_buckets",
            PUBLISHED_BUCKETS,
            "(1000000, now() - interval '5 seconds')",
        ),
        ("newest_dead", NEWEST_DEAD, "(10)"),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_relay_name_reads_back() {
        let name = relay_application_name("lease", true, 4242, "my schema");
        assert_eq!(name, "outboxctl relay lease once 4242 my schema");
        assert_eq!(
            RelayName::parse(&name),
            Some(RelayName {
                mode: "lease".into(),
                kind: "once".into(),
                pid: 4242,
                schema: "my schema".into(),
            })
        );
        assert_eq!(RelayName::parse("outboxctl"), None);
        assert_eq!(RelayName::parse("outboxctl relay tx daemon x s"), None);
        // The longest name leaves 23 of PostgreSQL's 63 bytes to the schema.
        let long = relay_application_name("lease", false, u32::MAX, "");
        assert_eq!(long.len(), 40, "{long}");
    }
}
