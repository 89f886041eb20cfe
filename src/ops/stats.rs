//! The figures of an outbox (backlog, lag, in flight, dead letters, throughput), read in one
//! snapshot: what `stats` prints, `stats --check` judges, `doctor` checks the relays and the lag
//! against and `demo` shows. Below the commands, so they share the reading without importing
//! `stats`.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::cli::StatsBy;
use crate::db::{self, stats::GroupBy};

/// The figures for the whole outbox or one group.
#[derive(Debug, Default, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct Figures {
    /// Due now and not leased.
    pub ready: i64,
    /// Not yet due (delayed, or waiting for a retry).
    pub scheduled: i64,
    /// Leased by a relay.
    pub in_flight: i64,
    /// Pending and not leased, having failed at least once (attempt_count > 0): waiting for a
    /// retry, or due again.
    pub retrying: i64,
    /// Dead-lettered.
    pub dead_lettered: i64,
    /// Published within the last minute; null in log mode (see `log`): the log writes no
    /// publication time, so no count by time is exact.
    pub published_last_minute: Option<i64>,
    /// Published within the last hour; null in log mode, as `published_last_minute`.
    pub published_last_hour: Option<i64>,
    /// Seconds the oldest ready event has been due (0 when nothing is ready).
    pub oldest_ready_lag_seconds: f64,
    /// Seconds since the oldest ready event was created.
    pub oldest_ready_age_seconds: f64,
    /// Seconds since the oldest pending event (ready, scheduled or in flight) was created: grows
    /// while nothing is delivered, whatever the rows' `available_at` (0 when nothing is pending).
    pub oldest_pending_age_seconds: f64,
    /// How late the most overdue pending event is, in seconds (what `--warn-lag`/`--crit-lag`
    /// compare): a ready event counts from when it fell due, one that failed before (waiting for
    /// a retry, or being retried) from when it first fell due (its `created_at`), one scheduled
    /// for later and never tried not at all. 0 when none is late.
    pub oldest_pending_lag_seconds: f64,
    /// When the next scheduled event becomes due; null when none is scheduled.
    pub next_due_at: Option<DateTime<Utc>>,
}

/// The backlog's columns, in the order every table of them shows them (`stats`, `top`).
pub const BACKLOG_COLUMNS: [&str; 5] = ["ready", "scheduled", "retrying", "in flight", "dead"];

impl Figures {
    /// The backlog's counts, in [`BACKLOG_COLUMNS`]' order, as table cells.
    pub fn backlog_cells(&self) -> [String; 5] {
        [
            self.ready,
            self.scheduled,
            self.retrying,
            self.in_flight,
            self.dead_lettered,
        ]
        .map(|n| n.to_string())
    }

    /// Adds a group's figures into a total: the counts add up, the oldest ages and lags are the
    /// largest, the next due time the earliest.
    fn add(&mut self, f: &Figures) {
        self.ready += f.ready;
        self.scheduled += f.scheduled;
        self.in_flight += f.in_flight;
        self.retrying += f.retrying;
        self.dead_lettered += f.dead_lettered;
        let Figures {
            oldest_pending_age_seconds: pending_age,
            oldest_pending_lag_seconds: pending_lag,
            oldest_ready_lag_seconds: ready_lag,
            oldest_ready_age_seconds: ready_age,
            ..
        } = *f;
        self.oldest_pending_age_seconds = pending_age.max(self.oldest_pending_age_seconds);
        self.oldest_pending_lag_seconds = pending_lag.max(self.oldest_pending_lag_seconds);
        self.oldest_ready_lag_seconds = ready_lag.max(self.oldest_ready_lag_seconds);
        self.oldest_ready_age_seconds = ready_age.max(self.oldest_ready_age_seconds);
        let sum = |a: Option<i64>, b: Option<i64>| match (a, b) {
            (Some(a), Some(b)) => Some(a + b),
            (a, b) => a.or(b),
        };
        self.published_last_minute = sum(self.published_last_minute, f.published_last_minute);
        self.published_last_hour = sum(self.published_last_hour, f.published_last_hour);
        self.next_due_at = match (self.next_due_at, f.next_due_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
    }
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct StatsReport {
    /// The schema holding the outbox.
    pub schema: String,
    /// When the figures were read (database clock).
    pub now: DateTime<Utc>,
    /// Published per second over the last minute; null in log mode (see `log`).
    pub throughput_per_second: Option<f64>,
    /// `None` (JSON null) when the table was never analysed.
    pub table_rows_estimate: Option<i64>,
    #[serde(flatten)]
    pub total: Figures,
    /// Ordered keys blocked by a dead-lettered head (`ordering`); absent before migration 6.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub blocked: Option<db::ordering::Blocked>,
    /// While log mode is on: how far the log has read. It marks no row it publishes, so the
    /// counts of publishes by time (`published_last_minute`, `published_last_hour`,
    /// `throughput_per_second`) are null; these are what is known instead.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log: Option<LogFigures>,
    /// With `--by`: the grouping (event-type, tenant, aggregate-type).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    /// With `--by`: the figures of each group, by its value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub groups: Option<BTreeMap<String, Figures>>,
}

/// Log mode's figures in `stats` (from `log status`).
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
pub struct LogFigures {
    /// Pages the log has read (and settled) since it was switched on.
    pub batches: i64,
    /// When the last page was settled; null before the first.
    pub read_at: Option<DateTime<Utc>>,
    /// Events written and not yet passed by the log (at most 1,000,000).
    pub behind: i64,
    /// Events the log passed that wait in the retry set.
    pub retrying: i64,
}

/// The figures of each group from the rows of `db::stats` read at `now` (`published` may be
/// empty: `top` counts its publishes otherwise; a group without a row counts 0).
pub fn groups(
    now: DateTime<Utc>,
    pending: Vec<db::stats::PendingRow>,
    dead: Vec<db::stats::CountRow>,
    published: Vec<db::stats::CountRow>,
) -> BTreeMap<String, Figures> {
    let secs = |t: Option<DateTime<Utc>>| {
        t.map(|t| ((now - t).num_microseconds().unwrap_or(0) as f64 / 1e6).max(0.0))
            .unwrap_or(0.0)
    };
    let mut groups: BTreeMap<String, Figures> = BTreeMap::new();
    for p in pending {
        let f = groups.entry(p.key).or_default();
        f.ready = p.ready;
        f.scheduled = p.scheduled;
        f.in_flight = p.in_flight;
        f.retrying = p.retrying;
        f.oldest_pending_age_seconds = secs(p.oldest_pending_created_at);
        f.oldest_pending_lag_seconds = secs(p.late_since);
        f.oldest_ready_lag_seconds = secs(p.oldest_ready_available_at);
        f.oldest_ready_age_seconds = secs(p.oldest_ready_created_at);
        f.next_due_at = p.next_due_at;
    }
    for d in dead {
        groups.entry(d.key).or_default().dead_lettered = d.a;
    }
    for p in published {
        let f = groups.entry(p.key).or_default();
        f.published_last_minute = Some(p.a);
        f.published_last_hour = Some(p.b);
    }
    for f in groups.values_mut() {
        f.published_last_minute.get_or_insert(0);
        f.published_last_hour.get_or_insert(0);
    }
    groups
}

/// The figures of the whole outbox from those of its groups ([`Figures::add`]).
pub fn total(groups: &BTreeMap<String, Figures>) -> Figures {
    let mut total = Figures::default();
    for f in groups.values() {
        total.add(f);
    }
    total
}

/// Reads every figure in one read-only snapshot so they agree with each other.
pub async fn collect(
    conn: &mut sqlx::PgConnection,
    schema: &str,
    by: Option<StatsBy>,
) -> anyhow::Result<StatsReport> {
    let group = match by {
        None => GroupBy::None,
        Some(StatsBy::EventType) => GroupBy::EventType,
        Some(StatsBy::Tenant) => GroupBy::Tenant,
        Some(StatsBy::AggregateType) => GroupBy::AggregateType,
    };
    let mut tx = db::stats::snapshot(conn).await?;
    let now = db::stats::now(&mut tx).await?;
    let pending = db::stats::pending(&mut tx, group).await?;
    let dead = db::stats::dead(&mut tx, group).await?;
    let published = db::stats::published_recent(&mut tx, group).await?;
    let rows = db::stats::table_rows_estimate(&mut tx).await?;
    let blocked = db::ordering::blocked_if_migrated(&mut tx).await?;
    let log = db::log::status(&mut tx).await?;
    tx.commit().await?;

    let mut groups = groups(now, pending, dead, published);
    let mut total = total(&groups);
    let log = log.enabled.then_some(LogFigures {
        batches: log.batches,
        read_at: log.read_at,
        behind: log.behind,
        retrying: log.retrying,
    });
    if log.is_some() {
        for f in groups.values_mut().chain([&mut total]) {
            f.published_last_minute = None;
            f.published_last_hour = None;
        }
    } else {
        total.published_last_minute.get_or_insert(0);
        total.published_last_hour.get_or_insert(0);
    }
    Ok(StatsReport {
        schema: schema.to_owned(),
        now,
        throughput_per_second: total.published_last_minute.map(|n| n as f64 / 60.0),
        table_rows_estimate: rows,
        total,
        blocked,
        log,
        by: by.map(|b| match b {
            StatsBy::EventType => "event-type".into(),
            StatsBy::Tenant => "tenant".into(),
            StatsBy::AggregateType => "aggregate-type".into(),
        }),
        groups: by.map(|_| groups),
    })
}
