//! What `outboxctl top` shows, read from the database in one snapshot per interval: a [`Sample`],
//! plain data that the view draws (`cmd::top::draw`, a pure function of it). The backlog figures
//! are `stats`'s (`db::stats`, the same statements and the same [`Figures`]); the throughput is
//! counted per interval by [`Throughput`]; relays, dead letters and blocked keys come from
//! `db::top` and `db::ordering`. No statement scans published history (each one's index is named
//! where it is defined).

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::cli::TopBy;
use crate::db::{self, ordering::BlockedKey, stats::GroupBy, top::DeadLetterRow};
use crate::ops::stats::Figures;

/// How many intervals the sparkline covers: 5 minutes at the default 1s.
pub const HISTORY: i64 = 300;

/// How many of the newest intervals each sample counts again. A transaction-mode relay's batch
/// carries its claim's time as `published_at` but becomes visible at its commit, after the sink
/// took it: recounting the last few intervals puts it where it belongs. A batch that commits
/// more than this many intervals after its claim is missed by the sparkline (never by the
/// backlog figures).
pub const RECOUNT: i64 = 5;

/// The newest dead letters, and the blocked keys, a sample reads at most (the view shows what
/// fits).
pub const LIST_LIMIT: i64 = 20;

/// Publishes per interval over the last [`HISTORY`] intervals, kept between samples: the first
/// sample counts all of them, each later one only the intervals since the previous sample and
/// the [`RECOUNT`] before it (a range of `outbox_published_at_idx` that holds the rows published
/// since then, not the whole history).
#[derive(Debug, Clone)]
pub struct Throughput {
    bucket_us: i64,
    counts: BTreeMap<i64, i64>,
    /// The interval `now` fell in at the last sample.
    last: Option<i64>,
    /// Log mode, which marks no row it publishes: how far the log had read at the last sample,
    /// and what it passed per interval since `top` started (each sample's count goes to the
    /// interval that just ended).
    log_mark: Option<db::log::Mark>,
    log_counts: BTreeMap<i64, i64>,
}

impl Throughput {
    pub fn new(interval: Duration) -> Self {
        Self {
            bucket_us: (interval.as_micros() as i64).max(1),
            counts: BTreeMap::new(),
            last: None,
            log_mark: None,
            log_counts: BTreeMap::new(),
        }
    }

    /// Takes what the log passed since the last sample (`passed`, when there was one) and where
    /// it stands now (`mark`; `None` while log mode is off).
    pub fn merge_log(&mut self, now_bucket: i64, mark: Option<db::log::Mark>, passed: Option<i64>) {
        if let Some(n) = passed {
            *self.log_counts.entry(now_bucket - 1).or_default() += n;
        }
        self.log_counts.retain(|b, _| *b >= now_bucket - HISTORY);
        self.log_mark = mark;
    }

    /// The interval `t` falls in.
    pub fn bucket_of(&self, t: DateTime<Utc>) -> i64 {
        t.timestamp_micros().div_euclid(self.bucket_us)
    }

    /// The first interval the next count starts at, when `now` falls in `now_bucket`.
    pub fn count_from(&self, now_bucket: i64) -> i64 {
        let oldest = now_bucket - HISTORY;
        match self.last {
            Some(last) => (last - RECOUNT).max(oldest),
            None => oldest,
        }
    }

    /// When interval `bucket` starts.
    pub fn start_of(&self, bucket: i64) -> DateTime<Utc> {
        DateTime::from_timestamp_micros(bucket.saturating_mul(self.bucket_us))
            .unwrap_or(DateTime::<Utc>::MIN_UTC)
    }

    /// Takes a count from `from` on (`rows`: `(bucket, n)`), replacing what was counted before
    /// for those intervals, and forgets those older than the history.
    pub fn merge(&mut self, from: i64, now_bucket: i64, rows: &[(i64, i64)]) {
        self.counts
            .retain(|b, _| *b < from && *b >= now_bucket - HISTORY);
        for &(b, n) in rows {
            if b >= from {
                self.counts.insert(b, n);
            }
        }
        self.last = Some(now_bucket);
    }

    /// Events published in each whole interval of the history, oldest first; the interval still
    /// running is left out (it would always look low).
    pub fn series(&self) -> Vec<u64> {
        let Some(now) = self.last else {
            return Vec::new();
        };
        let at = |m: &BTreeMap<i64, i64>, b: i64| m.get(&b).copied().unwrap_or(0).max(0) as u64;
        (now - HISTORY..now)
            .map(|b| at(&self.counts, b) + at(&self.log_counts, b))
            .collect()
    }
}

/// A relay process connected now, from its sessions' `application_name`.
#[derive(Debug, Clone, PartialEq)]
pub struct RelayView {
    /// `tx` or `lease`; the whole `application_name` when it cannot be read.
    pub mode: String,
    /// `daemon` or `once` (cron).
    pub kind: String,
    /// Its process id on its host.
    pub pid: Option<u32>,
    pub schema: String,
    /// Whether it relays this schema (by its name; a daemon also by its LISTEN).
    pub here: bool,
    pub client_addr: Option<String>,
    pub connections: i64,
    pub active: i64,
    /// Seconds since one of its sessions last began or ended a statement.
    pub idle_seconds: Option<f64>,
}

/// Everything one frame shows, read at `now` (database clock).
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub schema: String,
    pub now: DateTime<Utc>,
    pub total: Figures,
    /// Ordered keys blocked by a dead letter; `None` before migration 6.
    pub blocked: Option<db::ordering::Blocked>,
    /// The oldest blocked keys (at most [`LIST_LIMIT`]).
    pub blocked_keys: Vec<BlockedKey>,
    /// `event type` or `aggregate type`.
    pub by: &'static str,
    /// The groups, largest backlog first (ready + in flight, then scheduled, then dead).
    pub groups: Vec<(String, Figures)>,
    /// Length of one sparkline bar.
    pub interval: Duration,
    /// Events published per interval, oldest first ([`Throughput::series`]).
    pub published: Vec<u64>,
    pub relays: Vec<RelayView>,
    /// The newest dead letters (at most [`LIST_LIMIT`]).
    pub dead: Vec<DeadLetterRow>,
}

/// Reads one [`Sample`] in one read-only snapshot (`db::stats::snapshot`), updating
/// `throughput`.
pub async fn read(
    conn: &mut sqlx::PgConnection,
    schema: &crate::config::Schema,
    by: TopBy,
    throughput: &mut Throughput,
) -> anyhow::Result<Sample> {
    let group = match by {
        TopBy::EventType => GroupBy::EventType,
        TopBy::AggregateType => GroupBy::AggregateType,
    };
    let channel = schema.channel();
    let schema = schema.name();
    let mut tx = db::stats::snapshot(conn).await?;
    let now = db::stats::now(&mut tx).await?;
    let pending = db::stats::pending(&mut tx, group).await?;
    let dead = db::stats::dead(&mut tx, group).await?;
    let blocked = db::ordering::blocked_if_migrated(&mut tx).await?;
    let blocked_keys = db::ordering::blocked_keys(&mut tx, LIST_LIMIT).await?;
    let now_bucket = throughput.bucket_of(now);
    let from = throughput.count_from(now_bucket);
    let buckets =
        db::top::published_buckets(&mut tx, throughput.bucket_us, throughput.start_of(from))
            .await?;
    let mark = db::log::mark(&mut tx).await?;
    let log_passed = match (&throughput.log_mark, &mark) {
        (Some(before), Some(_)) => Some(db::log::passed_since(&mut tx, before).await?),
        _ => None,
    };
    let newest_dead = db::top::newest_dead(&mut tx, LIST_LIMIT).await?;
    let relays = db::top::relays(&mut tx, &channel).await?;
    tx.commit().await?;

    throughput.merge(from, now_bucket, &buckets);
    throughput.merge_log(now_bucket, mark, log_passed);
    let groups = crate::ops::stats::groups(now, pending, dead, Vec::new());
    let total = crate::ops::stats::total(&groups);
    let mut groups: Vec<(String, Figures)> = groups.into_iter().collect();
    groups.sort_by_key(|(k, f)| {
        (
            std::cmp::Reverse(f.ready + f.in_flight),
            std::cmp::Reverse(f.scheduled),
            std::cmp::Reverse(f.dead_lettered),
            k.clone(),
        )
    });
    Ok(Sample {
        schema: schema.to_owned(),
        now,
        total,
        blocked,
        blocked_keys,
        by: match by {
            TopBy::EventType => "event type",
            TopBy::AggregateType => "aggregate type",
        },
        groups,
        interval: Duration::from_micros(throughput.bucket_us as u64),
        published: throughput.series(),
        relays: relay_views(relays, schema, now),
        dead: newest_dead,
    })
}

/// The relays' rows as the view lists them: this schema's first.
pub fn relay_views(
    rows: Vec<db::top::RelayRow>,
    schema: &str,
    now: DateTime<Utc>,
) -> Vec<RelayView> {
    let mut out: Vec<RelayView> = rows
        .into_iter()
        .map(|r| {
            let name = db::top::RelayName::parse(&r.application_name);
            let idle_seconds = r
                .last_activity
                .map(|t| ((now - t).num_milliseconds() as f64 / 1e3).max(0.0));
            let (mode, kind, pid, relay_schema) = match name {
                Some(n) => (n.mode, n.kind, Some(n.pid), n.schema),
                None => (
                    r.application_name.clone(),
                    String::new(),
                    None,
                    String::new(),
                ),
            };
            // PostgreSQL keeps 63 bytes of the name: a long schema is matched by what is left.
            let cut = r.application_name.len() >= 63 && schema.starts_with(&relay_schema);
            RelayView {
                here: r.listens || relay_schema == schema || (cut && !relay_schema.is_empty()),
                mode,
                kind,
                pid,
                schema: relay_schema,
                client_addr: r.client_addr,
                connections: r.connections,
                active: r.active,
                idle_seconds,
            }
        })
        .collect();
    out.sort_by_key(|r| !r.here);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_the_log_passed_goes_to_the_interval_that_ended_and_survives_the_recount() {
        let mut t = Throughput::new(Duration::from_secs(1));
        let now = 1_000_000;
        let mark = || {
            Some(db::log::Mark {
                position: "100:100:".into(),
                window_to: None,
                after_xid: None,
                after_id: None,
            })
        };
        // The first sample only marks where the log is.
        t.merge(now - HISTORY, now, &[]);
        t.merge_log(now, mark(), None);
        assert_eq!(t.series().iter().sum::<u64>(), 0);
        // The next: 700 passed, 5 sent from the retry set (published_at) in the same interval.
        t.merge(t.count_from(now + 1), now + 1, &[(now, 5)]);
        t.merge_log(now + 1, mark(), Some(700));
        assert_eq!(t.series().last(), Some(&705));
        // A later recount of that interval by published_at keeps the log's count.
        t.merge(t.count_from(now + 2), now + 2, &[(now, 5)]);
        t.merge_log(now + 2, mark(), Some(0));
        assert_eq!(t.series()[HISTORY as usize - 2], 705);
        // Past the history it is forgotten.
        let later = now + 2 + HISTORY;
        t.merge(t.count_from(later), later, &[]);
        t.merge_log(later, None, None);
        assert_eq!(t.series().iter().sum::<u64>(), 0);
    }

    #[test]
    fn the_sparkline_recounts_the_newest_intervals_and_forgets_the_oldest() {
        let mut t = Throughput::new(Duration::from_secs(1));
        let start = DateTime::from_timestamp(1_000_000, 0).unwrap();
        let now = t.bucket_of(start);
        assert_eq!(now, 1_000_000);
        assert_eq!(t.count_from(now), now - HISTORY);
        t.merge(
            now - HISTORY,
            now,
            &[(now - 1, 7), (now - HISTORY, 2), (now, 3)],
        );
        let s = t.series();
        assert_eq!(s.len(), HISTORY as usize);
        assert_eq!((s[0], s[HISTORY as usize - 1]), (2, 7));
        // Two seconds later: counts from RECOUNT before the last sample, and replaces them (an
        // interval absent from the recount had no publish).
        let later = now + 2;
        assert_eq!(t.count_from(later), now - RECOUNT);
        t.merge(
            now - RECOUNT,
            later,
            &[(now - 1, 9), (now, 3), (now + 1, 4)],
        );
        let s = t.series();
        assert_eq!(s.len(), HISTORY as usize);
        assert_eq!(&s[HISTORY as usize - 3..], &[9, 3, 4]);
        // The oldest bucket has left the history.
        assert!(!t.counts.contains_key(&(now - HISTORY)));
        // After a long gap (the database away) the count starts at the history's start.
        assert_eq!(t.count_from(later + 10 * HISTORY), later + 9 * HISTORY);
        assert_eq!(t.start_of(now), start);
    }

    #[test]
    fn relays_of_this_schema_come_first() {
        let now = Utc::now();
        let row = |name: &str, listens: bool| db::top::RelayRow {
            application_name: name.into(),
            client_addr: Some("10.0.0.7".into()),
            connections: 3,
            active: 1,
            listens,
            connected_since: Some(now),
            last_activity: Some(now - chrono::Duration::seconds(2)),
        };
        let views = relay_views(
            vec![
                row("outboxctl relay tx daemon 7 other", false),
                row("outboxctl relay lease once 8 public", false),
                row("weird", true),
            ],
            "public",
            now,
        );
        assert_eq!(views[0].pid, Some(8));
        assert!(views[0].here && views[1].here && !views[2].here);
        assert_eq!(views[1].mode, "weird");
        assert_eq!(views[2].schema, "other");
        assert_eq!(views[0].idle_seconds, Some(2.0));
    }
}
