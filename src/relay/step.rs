//! One relay step: claim a batch, publish it, settle it. Never sleeps, never prints: the loops in
//! `daemon` decide when to call it, tests call it directly.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{truncate_error, Backoff, Mode, Report};
use crate::db::relay::{self as sql, ClaimedRow, Failure};
use crate::sink::{batch_verdict, Outcome, PublishCtl, Sink, SinkError};

/// Test-only fail-point (set through the hidden `OUTBOXCTL_TEST_FAILPOINT` variable): what the
/// relay does between publishing a batch and settling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// Announce on stderr and hang forever after the publish, before the settle, so a test can
    /// `kill -9` the process at exactly that point.
    HangAfterPublish,
}

impl Failpoint {
    pub fn parse(s: &str) -> Option<Self> {
        (s == "hang-after-publish").then_some(Self::HangAfterPublish)
    }
}

/// Relay settings, validated.
#[derive(Debug, Clone)]
pub struct RelayConfig {
    pub mode: Mode,
    pub batch_size: u32,
    pub concurrency: u32,
    pub lease: Duration,
    pub publish_timeout: Duration,
    pub max_attempts: u32,
    pub backoff: Backoff,
    pub shutdown_grace: Duration,
    pub failpoint: Option<Failpoint>,
}

/// A relay: a pool, a sink, settings.
pub struct Relay {
    pub pool: PgPool,
    pub sink: Arc<dyn Sink>,
    pub cfg: RelayConfig,
}

impl Relay {
    /// Claims at most `limit` (≤ batch size) ready rows, publishes them and settles the outcome.
    /// Claims nothing once `shutdown` is cancelled.
    pub async fn step(
        &self,
        limit: u32,
        shutdown: &CancellationToken,
    ) -> Result<Report, sqlx::Error> {
        if shutdown.is_cancelled() {
            return Ok(Report::default());
        }
        let limit = i64::from(limit.min(self.cfg.batch_size).max(1));
        let ctl = PublishCtl {
            concurrency: self.cfg.concurrency as usize,
            timeout: self.cfg.publish_timeout,
            shutdown: shutdown.clone(),
            shutdown_grace: self.cfg.shutdown_grace,
            // The claim is made just below; a publish started after this still ends (by its
            // timeout) before the lease does.
            start_by: Some(
                tokio::time::Instant::now()
                    + self.cfg.lease.saturating_sub(self.cfg.publish_timeout),
            ),
        };
        match self.cfg.mode {
            Mode::Lease => self.step_lease(limit, &ctl).await,
            Mode::Tx => self.step_tx(limit, &ctl).await,
        }
    }

    async fn step_lease(&self, limit: i64, ctl: &PublishCtl) -> Result<Report, sqlx::Error> {
        let token = Uuid::new_v4();
        let rows = {
            let mut conn = self.pool.acquire().await?;
            sql::claim_lease(&mut conn, limit, self.cfg.lease, token).await?
        };
        let mut report = Report {
            claimed: rows.len() as u64,
            ..Report::default()
        };
        if rows.is_empty() {
            return Ok(report);
        }
        let outcomes = self.sink.publish(&rows, ctl).await;
        self.failpoint_after_publish().await;
        let sorted = self.sort_outcomes(&rows, outcomes, &mut report);

        // Settle, fenced by the token. Retried once on a fresh connection: a relay whose settle
        // is lost leaves leased rows that are re-published after the lease (same dedup id).
        let mut attempt = 0;
        let (marked, failed, released) = loop {
            attempt += 1;
            match self.settle_lease(&sorted, token).await {
                Ok(r) => break r,
                Err(e) if attempt < 2 && crate::db::is_transient(&e) => {
                    tracing::warn!(error = %e, "settle failed; retrying once on a new connection");
                }
                Err(e) => return Err(e),
            }
        };
        report.published = marked.len() as u64;
        let failed_set: std::collections::HashSet<i64> = failed.iter().copied().collect();
        for f in &sorted.failures {
            if failed_set.contains(&f.id) {
                if f.dead {
                    report.dead_lettered += 1;
                } else {
                    report.retried += 1;
                }
            }
        }
        report.released = released;
        report.lease_lost = (sorted.published.len() - marked.len()) as u64
            + (sorted.failures.len() - failed.len()) as u64;
        if report.lease_lost > 0 {
            tracing::warn!(
                lease_lost = report.lease_lost,
                claim_token = %token,
                "lease expired and the rows were claimed again by another relay; left them to it (consider a longer --lease)"
            );
        }
        Ok(report)
    }

    async fn settle_lease(
        &self,
        s: &Sorted,
        token: Uuid,
    ) -> Result<(Vec<i64>, Vec<i64>, u64), sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        let marked = sql::settle_published(&mut conn, &s.published, token).await?;
        let failed = sql::settle_failed(&mut conn, &s.failures, token).await?;
        let released = sql::release(&mut conn, &s.unpublished, token).await?;
        Ok((marked, failed, released))
    }

    async fn step_tx(&self, limit: i64, ctl: &PublishCtl) -> Result<Report, sqlx::Error> {
        let mut conn = self.pool.acquire().await?;
        let mut tx = conn.begin().await?;
        let rows = sql::claim_tx(&mut tx, limit).await?;
        let mut report = Report {
            claimed: rows.len() as u64,
            ..Report::default()
        };
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(report);
        }
        let outcomes = self.sink.publish(&rows, ctl).await;
        self.failpoint_after_publish().await;
        let sorted = self.sort_outcomes(&rows, outcomes, &mut report);
        if sorted.published.is_empty() && sorted.failures.is_empty() {
            // Nothing was taken (an outage, a closed or stalled consumer, shutdown): rolling back
            // restores every row exactly, including the `last_error` the claim cleared.
            tx.rollback().await?;
            report.released = sorted.unpublished.len() as u64;
            return Ok(report);
        }
        sql::revert_tx(&mut tx, &sorted.failures).await?;
        report.released = sql::unclaim_tx(&mut tx, &sorted.unpublished).await?;
        tx.commit().await?;
        report.published = sorted.published.len() as u64;
        for f in &sorted.failures {
            if f.dead {
                report.dead_lettered += 1;
            } else {
                report.retried += 1;
            }
        }
        Ok(report)
    }

    /// Splits outcomes into published ids, failures (with retry time or dead-letter decision) and
    /// rows to give back untouched. A failure that is the sink's state rather than the event's
    /// fault ([`batch_verdict`]: an outage, a closed or stalled consumer) is given back like an
    /// unstarted publish: no attempt counted, no error stored; `report.sink_down` says why.
    fn sort_outcomes(
        &self,
        rows: &[ClaimedRow],
        mut outcomes: Vec<Outcome>,
        report: &mut Report,
    ) -> Sorted {
        report.sink_down = batch_verdict(&mut outcomes);
        let mut s = Sorted::default();
        let mut retried_errors = Vec::new();
        for (row, outcome) in rows.iter().zip(outcomes) {
            match outcome {
                Outcome::Published => s.published.push(row.id),
                Outcome::NotStarted | Outcome::Abandoned => s.unpublished.push(row.id),
                Outcome::Failed(err) if err.is_sink_state() => {
                    report.unavailable += 1;
                    s.unpublished.push(row.id);
                }
                Outcome::Failed(err) => {
                    report.sink_failures += 1;
                    let attempt = u32::try_from(row.attempt_count).unwrap_or(0);
                    let (dead, retry_in, message) = match &err {
                        SinkError::Retryable {
                            message,
                            retry_after,
                        } => {
                            let dead = attempt >= self.cfg.max_attempts;
                            let message = match retry_after {
                                _ if dead => format!(
                                    "{message} (attempt {attempt} of {}: giving up)",
                                    self.cfg.max_attempts
                                ),
                                Some(d) => format!(
                                    "{message} (Retry-After honoured: next attempt in {})",
                                    humantime::format_duration(*d)
                                ),
                                None => message.clone(),
                            };
                            retried_errors.push(message.clone());
                            (
                                dead,
                                retry_after.unwrap_or_else(|| self.cfg.backoff.delay(attempt)),
                                message,
                            )
                        }
                        other => (true, Duration::ZERO, format!("permanent: {other}")),
                    };
                    tracing::debug!(id = row.id, attempt, dead, error = %message, "publish failed");
                    s.failures.push(Failure {
                        id: row.id,
                        retry_in,
                        dead,
                        error: truncate_error(&message),
                    });
                }
            }
        }
        if let Some(first) = retried_errors.first() {
            FAILURE_WARN.emit(retried_errors.len() as u64, first);
        }
        s
    }

    async fn failpoint_after_publish(&self) {
        if self.cfg.failpoint == Some(Failpoint::HangAfterPublish) {
            eprintln!("FAILPOINT hang-after-publish reached");
            std::future::pending::<()>().await;
        }
    }
}

/// The rate-limited WARN for events the sink failed (retried later): at most one line per
/// [`FAILURE_WARN_EVERY`], with the error text and how many failures it stands for. Outages are
/// logged by the daemon's circuit instead; dead letters have their own WARN.
static FAILURE_WARN: RateLimitedWarn = RateLimitedWarn::new();
const FAILURE_WARN_EVERY: Duration = Duration::from_secs(10);

struct RateLimitedWarn {
    state: std::sync::Mutex<(Option<std::time::Instant>, u64)>,
}

impl RateLimitedWarn {
    const fn new() -> Self {
        Self {
            state: std::sync::Mutex::new((None, 0)),
        }
    }

    /// Records `n` failures; logs them (and those suppressed since the last line) when due.
    fn emit(&self, n: u64, error: &str) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.1 += n;
        if st.0.is_some_and(|t| t.elapsed() < FAILURE_WARN_EVERY) {
            return;
        }
        tracing::warn!(
            failures = st.1,
            error = %error,
            "the sink failed {}; retrying with backoff",
            crate::output::plural(st.1, "publish", "publishes")
        );
        *st = (Some(std::time::Instant::now()), 0);
    }
}

#[derive(Debug, Default)]
struct Sorted {
    published: Vec<i64>,
    failures: Vec<Failure>,
    unpublished: Vec<i64>,
}
