//! `outboxctl prune`: retention for published events (and optionally dead letters, the
//! consumer dedup table and the audit trail), built to run from cron beside live relays.
//!
//! Why it looks the way it does:
//! - Batches: each batch is one DELETE statement, so one short transaction holding row locks on at
//!   most --batch-size rows; the retention predicate is re-checked in the DELETE itself.
//! - Lock: a lease row in `outbox_locks` (taken and renewed by single autocommit statements)
//!   instead of a session advisory lock, so it holds behind a transaction-pooling proxy where
//!   consecutive statements may run on different server sessions. The lease is renewed before
//!   every batch and expires [`LOCK_TTL`] (+ --sleep) after the last renewal if the process dies.
//! - Stopping: SIGTERM / SIGINT, --max-duration and --max-batches are checked between batches, so
//!   a batch in progress always finishes and commits.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;
use tokio::sync::watch;
use uuid::Uuid;

use crate::cli::PruneArgs;
use crate::config::{self, DbConfig};
use crate::db;
use crate::db::prune::{Resume, Table, AUDIT, DEAD, PROCESSED, PUBLISHED, PUBLISHED_BY_LOG};
use crate::exit::{CodedError, OK};
use crate::output;

/// Name of the prune lease in `outbox_locks`.
pub const LOCK_NAME: &str = "prune";
/// How long the lease outlives its last renewal (plus --sleep).
pub const LOCK_TTL: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Published,
    Dead,
    Processed,
    Audit,
}

impl Target {
    fn label(self) -> &'static str {
        match self {
            Target::Published => "published",
            Target::Dead => "dead",
            Target::Processed => "processed_messages",
            Target::Audit => "audit",
        }
    }

    fn noun(self, n: u64) -> String {
        match self {
            Target::Published => output::plural(n, "published event", "published events"),
            Target::Dead => output::plural(n, "dead event", "dead events"),
            Target::Processed => output::plural(n, "processed message", "processed messages"),
            Target::Audit => output::plural(n, "audit row", "audit rows"),
        }
    }
}

/// Why a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// Nothing older than the retention is left.
    Done,
    MaxDuration,
    MaxBatches,
    /// SIGTERM or SIGINT, after the batch in progress.
    Signal,
}

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct TableReport {
    /// Rows older than this go (database clock at the start of the run minus the retention).
    pub cutoff: DateTime<Utc>,
    pub deleted: u64,
    /// With --dry-run: how many rows are older than the cutoff.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub would_delete: Option<u64>,
    /// Dead letters only: those older than the cutoff that prune kept because they block their
    /// ordered key (requeue, `ordering skip` or `dead discard` decides).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept_blocking: Option<u64>,
}

/// The `--json` summary (and what the summary line says).
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct PruneReport {
    pub schema: String,
    pub dry_run: bool,
    /// Absent with --dry-run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub published: Option<TableReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dead: Option<TableReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub processed_messages: Option<TableReport>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub audit: Option<TableReport>,
    /// Rows deleted, all tables.
    pub deleted: u64,
    pub batches: u64,
    pub elapsed_ms: u64,
    /// The longest single batch (DELETE statement), in milliseconds.
    pub longest_batch_ms: u64,
    pub rows_per_second: f64,
}

impl PruneReport {
    fn table_mut(&mut self, t: Target) -> Option<&mut TableReport> {
        match t {
            Target::Published => self.published.as_mut(),
            Target::Dead => self.dead.as_mut(),
            Target::Processed => self.processed_messages.as_mut(),
            Target::Audit => self.audit.as_mut(),
        }
    }

    fn tables(&self) -> Vec<(Target, &TableReport)> {
        [
            (Target::Published, &self.published),
            (Target::Dead, &self.dead),
            (Target::Processed, &self.processed_messages),
            (Target::Audit, &self.audit),
        ]
        .into_iter()
        .filter_map(|(t, r)| r.as_ref().map(|r| (t, r)))
        .collect()
    }

    /// The one line printed at the end (what cron mails).
    pub fn summary_line(&self) -> String {
        let parts: Vec<String> = self
            .tables()
            .into_iter()
            .map(|(t, r)| match r.would_delete {
                Some(n) => format!(
                    "{} (before {})",
                    t.noun(n),
                    r.cutoff.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
                ),
                None => t.noun(r.deleted),
            })
            .collect();
        let list = match parts.len() {
            0 => String::new(),
            1 => parts[0].clone(),
            n => format!("{} and {}", parts[..n - 1].join(", "), parts[n - 1]),
        };
        let kept = self
            .dead
            .as_ref()
            .and_then(|d| d.kept_blocking)
            .filter(|n| *n > 0)
            .map(|n| {
                format!(
                    "; kept {} (requeue, `ordering skip` or `dead discard` decides)",
                    if n == 1 {
                        "1 dead letter that blocks its key".to_owned()
                    } else {
                        format!("{n} dead letters that block their keys")
                    }
                )
            })
            .unwrap_or_default();
        if self.dry_run {
            return format!("prune: would delete {list} (dry run: nothing deleted){kept}");
        }
        let mut s = format!(
            "prune: deleted {list} in {} in {} ({:.0} rows/s, longest batch {})",
            output::plural(self.batches, "batch", "batches"),
            output::human_duration(Duration::from_millis(self.elapsed_ms)),
            self.rows_per_second,
            output::human_duration(Duration::from_millis(self.longest_batch_ms)),
        );
        match self.stop_reason {
            Some(StopReason::MaxDuration) => {
                s.push_str("; stopped at --max-duration, older rows may remain")
            }
            Some(StopReason::MaxBatches) => {
                s.push_str("; stopped at --max-batches, older rows may remain")
            }
            Some(StopReason::Signal) => s.push_str("; stopped by a signal after the current batch"),
            _ => {}
        }
        s.push_str(&kept);
        s
    }
}

fn micros(d: Duration, flag: &str) -> Result<i64, CodedError> {
    i64::try_from(d.as_micros())
        .ok()
        .filter(|m| *m < 1_000 * 365 * 86_400 * 1_000_000)
        .ok_or_else(|| CodedError::usage(format!("{flag} is too long; use at most 1000 years")))
}

pub async fn run(args: PruneArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args_pooled(&args.db)?;
    let mut wanted = Vec::new();
    for (t, d, flag) in [
        (Target::Published, args.older_than, "--older-than"),
        (Target::Dead, args.dead_older_than, "--dead-older-than"),
        (
            Target::Processed,
            args.processed_older_than,
            "--processed-older-than",
        ),
        (Target::Audit, args.audit_older_than, "--audit-older-than"),
    ] {
        if let Some(d) = d {
            wanted.push((t, micros(d, flag)?));
        }
    }
    let actor = config::actor(&args.change.audit)?;
    let json = args.change.output.json;
    let pool = db::pool_migrated(&cfg, 1).await?;
    // Dead letters are kept while they block an ordered key: that needs the ordering columns.
    let through = if wanted.iter().any(|(t, _)| *t == Target::Dead) {
        db::migrate::ORDERING_SCHEMA
    } else {
        db::migrate::AUDIT_SCHEMA
    };
    db::ensure_migrated_through(&pool, &cfg, through).await?;
    let mut conn = pool.acquire().await?;
    let pin = db::Pin::new(&cfg, &[]);

    let mut plan = Vec::new();
    for (t, m) in wanted {
        let cutoff = pin
            .run(&mut conn, async |c| db::prune::cutoff(c, m).await)
            .await?;
        plan.push((t, cutoff));
    }
    let mut report = PruneReport {
        schema: cfg.schema.name().to_owned(),
        dry_run: args.change.preview.dry_run,
        stop_reason: None,
        published: None,
        dead: None,
        processed_messages: None,
        audit: None,
        deleted: 0,
        batches: 0,
        elapsed_ms: 0,
        longest_batch_ms: 0,
        rows_per_second: 0.0,
    };
    for (t, cutoff) in &plan {
        let kept_blocking = match t {
            Target::Dead => Some(
                pin.run(&mut conn, async |c| {
                    db::prune::count_blocking_dead(c, *cutoff).await
                })
                .await?
                .max(0) as u64,
            ),
            _ => None,
        };
        let r = Some(TableReport {
            cutoff: *cutoff,
            deleted: 0,
            would_delete: None,
            kept_blocking,
        });
        match t {
            Target::Published => report.published = r,
            Target::Dead => report.dead = r,
            Target::Processed => report.processed_messages = r,
            Target::Audit => report.audit = r,
        }
    }

    if args.change.preview.dry_run {
        for (t, cutoff) in &plan {
            let n = count(&pin, &mut conn, *t, *cutoff).await?;
            if let Some(r) = report.table_mut(*t) {
                r.would_delete = Some(n);
            }
        }
        print(&report, json)?;
        return Ok(OK);
    }

    let stop = stop_on_signal()?;
    let holder = Uuid::new_v4();
    let ttl = micros(LOCK_TTL + args.sleep, "--sleep")?;
    let info = format!("outboxctl prune (pid {})", std::process::id());
    let locked = pin
        .run(&mut conn, async |c| {
            db::prune::try_lock(c, LOCK_NAME, holder, &info, ttl).await
        })
        .await?;
    if !locked {
        let holder = pin
            .run(&mut conn, async |c| {
                db::prune::lock_holder(c, LOCK_NAME).await
            })
            .await?;
        let held = match holder {
            Some(h) => format!(
                "{}, running since {}; its lease ends at {} unless renewed",
                h.holder_info,
                h.acquired_at.to_rfc3339(),
                h.expires_at.to_rfc3339()
            ),
            None => "it has just finished".to_owned(),
        };
        return Err(db::Error::Locked {
            schema: cfg.schema.name().to_owned(),
            holder: held,
        }
        .into());
    }
    let mut audit = db::prune::PruneAudit {
        actor,
        details: serde_json::Value::Object(
            plan.iter()
                .map(|(t, cutoff)| {
                    (
                        t.label().to_owned(),
                        serde_json::json!({ "cutoff": cutoff, "deleted": 0 }),
                    )
                })
                .collect(),
        ),
        id: None,
    };
    let result = prune_locked(
        &pin,
        &mut conn,
        &args,
        &plan,
        &mut report,
        &mut audit,
        holder,
        ttl,
        stop,
        json,
    )
    .await;
    let finish = match (&result, audit.id) {
        (Ok(()), Some(id)) => {
            let why = serde_json::to_value(report.stop_reason)?;
            pin.run(&mut conn, async |c| {
                db::audit::finish_prune(
                    c,
                    id,
                    why.as_str().unwrap_or_default(),
                    report.batches,
                    report.elapsed_ms,
                )
                .await
            })
            .await
        }
        _ => Ok(()),
    };
    let unlock = pin
        .run(&mut conn, async |c| {
            db::prune::unlock(c, LOCK_NAME, holder).await
        })
        .await;
    result?;
    finish?;
    unlock?;
    print(&report, json)?;
    Ok(OK)
}

fn print(report: &PruneReport, json: bool) -> anyhow::Result<()> {
    if json {
        output::print_json(report)
    } else {
        output::print_summary(format_args!("{}", report.summary_line()))?;
        Ok(())
    }
}

async fn count(
    pin: &db::Pin,
    conn: &mut PgConnection,
    t: Target,
    cutoff: DateTime<Utc>,
) -> anyhow::Result<u64> {
    let n = pin
        .run(conn, async |c| match t {
            Target::Published if crate::db::log::is_on(c).await? => {
                Ok(db::prune::count_published(c, cutoff).await?
                    + db::prune::count_published_by_log(c, cutoff).await?)
            }
            Target::Published => db::prune::count_published(c, cutoff).await,
            Target::Dead => db::prune::count_dead(c, cutoff).await,
            Target::Processed => db::prune::count_processed(c, cutoff).await,
            Target::Audit => db::prune::count_audit(c, cutoff).await,
        })
        .await?;
    Ok(n.max(0) as u64)
}

/// A flag that turns true on SIGTERM or SIGINT.
fn stop_on_signal() -> anyhow::Result<watch::Receiver<bool>> {
    use tokio::signal::unix::{signal, SignalKind};
    let (tx, rx) = watch::channel(false);
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    tokio::spawn(async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("signal received: stopping after the current batch");
        let _ = tx.send(true);
    });
    Ok(rx)
}

/// Why to stop before the next batch, if at all.
fn should_stop(
    signalled: bool,
    batches: u64,
    elapsed: Duration,
    max_batches: Option<u64>,
    max_duration: Option<Duration>,
) -> Option<StopReason> {
    if signalled {
        Some(StopReason::Signal)
    } else if max_batches.is_some_and(|m| batches >= m) {
        Some(StopReason::MaxBatches)
    } else if max_duration.is_some_and(|m| elapsed >= m) {
        Some(StopReason::MaxDuration)
    } else {
        None
    }
}

/// One batch of `table` walked from `from`, through the pin; then `from` moves on to where the
/// next batch starts (it stays when nothing was deleted). Returns the rows deleted.
async fn walk<K: Resume + Clone>(
    pin: &db::Pin,
    conn: &mut PgConnection,
    from: &mut Option<K>,
    table: &Table<K>,
    cutoff: DateTime<Utc>,
    n: u32,
    audit: &mut db::prune::PruneAudit,
) -> anyhow::Result<u64> {
    let start = from.clone();
    let b = pin
        .run(conn, async |c| {
            db::prune::delete(c, table, cutoff, start, n, audit).await
        })
        .await?;
    *from = b.next.or(from.take());
    Ok(b.deleted)
}

#[allow(clippy::too_many_arguments)]
async fn prune_locked(
    pin: &db::Pin,
    conn: &mut PgConnection,
    args: &PruneArgs,
    plan: &[(Target, DateTime<Utc>)],
    report: &mut PruneReport,
    audit: &mut db::prune::PruneAudit,
    holder: Uuid,
    ttl_micros: i64,
    mut stop: watch::Receiver<bool>,
    json: bool,
) -> anyhow::Result<()> {
    let started = Instant::now();
    let n = args.batch_size;
    // Counting costs an index range scan: only worth it to size a visible progress bar.
    let spinner = output::progress(None, json, "counting rows to prune");
    let pb = if spinner.is_hidden() {
        spinner
    } else {
        let mut total = 0;
        for (t, cutoff) in plan {
            total += count(pin, conn, *t, *cutoff).await?;
        }
        spinner.finish_and_clear();
        output::progress(Some(total), json, "pruning")
    };
    let mut longest = Duration::ZERO;
    let mut reason = StopReason::Done;
    // Log mode: the events the log published carry no mark; they follow the marked ones.
    let log_on = pin
        .run(conn, async |c| crate::db::log::is_on(c).await)
        .await?;
    'tables: for (target, cutoff) in plan {
        let mut by_log = false;
        let mut from_xid: Option<String> = None;
        let mut from_time: Option<DateTime<Utc>> = None;
        let mut from_tid: Option<String> = None;
        let mut from_id: Option<i64> = None;
        loop {
            if let Some(r) = should_stop(
                *stop.borrow(),
                report.batches,
                started.elapsed(),
                args.max_batches,
                args.max_duration,
            ) {
                reason = r;
                break 'tables;
            }
            if report.batches > 0
                && !pin
                    .run(conn, async |c| {
                        db::prune::renew_lock(c, LOCK_NAME, holder, ttl_micros).await
                    })
                    .await?
            {
                anyhow::bail!(
                    "lost the prune lock (its lease expired and another prune took it); stopped after {}",
                    output::plural(report.batches, "batch", "batches")
                );
            }
            let t0 = Instant::now();
            let (c, cutoff) = (&mut *conn, *cutoff);
            let deleted = match target {
                Target::Published if by_log => {
                    walk(pin, c, &mut from_xid, &PUBLISHED_BY_LOG, cutoff, n, audit).await
                }
                Target::Published => {
                    walk(pin, c, &mut from_time, &PUBLISHED, cutoff, n, audit).await
                }
                Target::Dead => walk(pin, c, &mut from_time, &DEAD, cutoff, n, audit).await,
                Target::Processed => {
                    walk(pin, c, &mut from_tid, &PROCESSED, cutoff, n, audit).await
                }
                Target::Audit => walk(pin, c, &mut from_id, &AUDIT, cutoff, n, audit).await,
            }?;
            let took = t0.elapsed();
            longest = longest.max(took);
            report.batches += 1;
            report.deleted += deleted;
            if let Some(r) = report.table_mut(*target) {
                r.deleted += deleted;
            }
            pb.inc(deleted);
            tracing::info!(
                table = target.label(),
                batch = report.batches,
                deleted,
                ms = took.as_millis() as u64,
                "prune batch"
            );
            if deleted < u64::from(n) {
                if *target == Target::Published && log_on && !by_log {
                    by_log = true;
                    continue;
                }
                break; // fewer than a full batch left: this table is done
            }
            if !args.sleep.is_zero() {
                tokio::select! {
                    _ = tokio::time::sleep(args.sleep) => {}
                    _ = stop.changed() => {}
                }
            }
        }
    }
    pb.finish_and_clear();
    let elapsed = started.elapsed();
    report.stop_reason = Some(reason);
    report.elapsed_ms = elapsed.as_millis() as u64;
    report.longest_batch_ms = longest.as_millis() as u64;
    report.rows_per_second = report.deleted as f64 / elapsed.as_secs_f64().max(0.001);
    Ok(())
}

/// The `--json` output of `prune` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    vec![crate::schema::Output::of::<PruneReport>("prune --json", "")]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_rules() {
        let s = Duration::from_secs;
        assert_eq!(should_stop(false, 0, s(0), None, None), None);
        assert_eq!(
            should_stop(true, 0, s(0), None, None),
            Some(StopReason::Signal)
        );
        assert_eq!(
            should_stop(false, 3, s(0), Some(3), None),
            Some(StopReason::MaxBatches)
        );
        assert_eq!(should_stop(false, 2, s(0), Some(3), None), None);
        assert_eq!(
            should_stop(false, 0, s(10), None, Some(s(10))),
            Some(StopReason::MaxDuration)
        );
        assert_eq!(should_stop(false, 0, s(9), None, Some(s(10))), None);
    }

    #[test]
    fn summary_plurals() {
        let t = |n| {
            Some(TableReport {
                cutoff: DateTime::<Utc>::UNIX_EPOCH,
                deleted: n,
                would_delete: None,
                kept_blocking: None,
            })
        };
        let r = PruneReport {
            schema: "s".into(),
            dry_run: false,
            stop_reason: Some(StopReason::Done),
            published: t(1),
            dead: t(2),
            processed_messages: None,
            audit: None,
            deleted: 3,
            batches: 1,
            elapsed_ms: 1500,
            longest_batch_ms: 20,
            rows_per_second: 2.0,
        };
        assert_eq!(
            r.summary_line(),
            "prune: deleted 1 published event and 2 dead events in 1 batch in 1s 500ms (2 rows/s, longest batch 20ms)"
        );
    }
}
