//! One relay step: claim a batch, publish it, settle it. Never sleeps, never prints: the loops in
//! `daemon` decide when to call it, tests call it directly.

use std::sync::Arc;
use std::time::Duration;

use sqlx::{Connection, PgPool};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::{truncate_error, Backoff, Mode, Report};
use crate::db::relay::{self as sql, ClaimedRow, Failure};
use crate::sink::{Outcome, PublishCtl, Sink, SinkError};

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
    /// Byte budget of a claimed batch (`--batch-bytes`); the first row is claimed whatever its size.
    pub batch_bytes: u64,
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
        let claim = {
            let mut conn = self.pool.acquire().await?;
            sql::claim_lease(&mut conn, self.limit(limit), self.cfg.lease, token).await?
        };
        let rows = claim.rows;
        let mut report = Report {
            claimed: rows.len() as u64,
            budget_reached: claim.budget_reached,
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
        let claim = sql::claim_tx(&mut tx, self.limit(limit)).await?;
        let rows = claim.rows;
        let mut report = Report {
            claimed: rows.len() as u64,
            budget_reached: claim.budget_reached,
            ..Report::default()
        };
        if rows.is_empty() {
            tx.commit().await?;
            return Ok(report);
        }
        let outcomes = self.sink.publish(&rows, ctl).await;
        self.failpoint_after_publish().await;
        let sorted = self.sort_outcomes(&rows, outcomes, &mut report);
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
    /// rows to give back unpublished.
    fn sort_outcomes(
        &self,
        rows: &[ClaimedRow],
        outcomes: Vec<Outcome>,
        report: &mut Report,
    ) -> Sorted {
        let mut s = Sorted::default();
        for (row, outcome) in rows.iter().zip(outcomes) {
            match outcome {
                Outcome::Published => s.published.push(row.id),
                Outcome::NotStarted | Outcome::Abandoned => s.unpublished.push(row.id),
                Outcome::Failed(err) => {
                    report.sink_failures += 1;
                    let attempt = u32::try_from(row.attempt_count).unwrap_or(0);
                    let (dead, retry_in, message) = match &err {
                        SinkError::Permanent(m) => {
                            (true, Duration::ZERO, format!("permanent: {m}"))
                        }
                        SinkError::Retryable {
                            message,
                            retry_after,
                        } => (
                            attempt >= self.cfg.max_attempts,
                            retry_after.unwrap_or_else(|| self.cfg.backoff.delay(attempt)),
                            if attempt >= self.cfg.max_attempts {
                                format!(
                                    "{message} (attempt {attempt} of {}: giving up)",
                                    self.cfg.max_attempts
                                )
                            } else {
                                message.clone()
                            },
                        ),
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
        s
    }

    fn limit(&self, rows: i64) -> sql::BatchLimit {
        sql::BatchLimit {
            rows,
            bytes: i64::try_from(self.cfg.batch_bytes).unwrap_or(i64::MAX),
        }
    }

    async fn failpoint_after_publish(&self) {
        if self.cfg.failpoint == Some(Failpoint::HangAfterPublish) {
            eprintln!("FAILPOINT hang-after-publish reached");
            std::future::pending::<()>().await;
        }
    }
}

#[derive(Debug, Default)]
struct Sorted {
    published: Vec<i64>,
    failures: Vec<Failure>,
    unpublished: Vec<i64>,
}
