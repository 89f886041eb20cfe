//! One relay step: claim a batch, publish it, settle it. Never sleeps, never prints: the loops in
//! `daemon` decide when to call it, tests call it directly.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::ordering::{publish_ordered, OrderingState};
use super::{truncate_error, Backoff, Mode, RelayEvent, Report};
use crate::db::ordering as ordered_sql;
use crate::db::relay::{self as sql, ClaimedRow, Failure, Settle};
use crate::db::session::Held;
use crate::sink::{batch_verdict, Outcome, PublishCtl, Sink, SinkError};

/// Test-only fail-point (set through the hidden `OUTBOXCTL_TEST_FAILPOINT` variable): what the
/// relay does between publishing a batch and settling it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failpoint {
    /// Announce on stderr and hang forever after the publish, before the settle, so a test can
    /// `kill -9` the process at exactly that point.
    HangAfterPublish,
    /// Drop the connection of the first lease claim after it committed and report the
    /// connection lost: the claim's reply lost on the way back (a network fault that cannot be
    /// timed from outside).
    LoseClaimReply,
}

impl Failpoint {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "hang-after-publish" => Some(Self::HangAfterPublish),
            "lose-claim-reply" => Some(Self::LoseClaimReply),
            _ => None,
        }
    }
}

/// The queue claims' filter while both log mode's guard and ordering apply.
static NOT_LOG_NOT_ORDERED: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// [`Failpoint::LoseClaimReply`] fires once per process.
static CLAIM_REPLY_LOST: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

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
    /// Steps the loops keep in flight at once (`--pipeline-depth`, 1..=[`MAX_PIPELINE_DEPTH`]):
    /// the next batch is claimed while the previous one publishes. The step itself ignores it.
    pub pipeline_depth: u32,
}

/// `--pipeline-depth` by default.
pub const PIPELINE_DEPTH: u32 = 2;

/// `--pipeline-depth` at most: each step in flight may hold a pool connection (tx mode).
pub const MAX_PIPELINE_DEPTH: u32 = 4;

/// What a step's claim took, told to its loop as soon as the claim returns and before the batch
/// is published: enough for the loop to decide whether to claim the next batch meanwhile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimNotice {
    pub rows: u64,
    /// The claim took all it was allowed (`limit` rows, or the byte budget ended it): more may
    /// be ready.
    pub full: bool,
}

/// A relay: a pool, a sink, settings, and what it keeps for ordered delivery.
pub struct Relay {
    /// Its pool and pin: each claim, settle or release asks it once, and it keeps the
    /// connection's upkeep (pinning, discarding a broken connection, a retry on a live one).
    pub db: crate::db::Session,
    pub sink: Arc<dyn Sink>,
    pub cfg: RelayConfig,
    pub ordering: OrderingState,
    /// How the next unordered claim keeps within `--batch-bytes`.
    pub sizing: NextSizing,
    /// Where the next unordered claim starts ([`crate::relay::cursor`]).
    pub start: crate::relay::cursor::ClaimStart,
    /// Log mode's reader ([`crate::relay::log`]), and the queue modes' watch on the switch.
    pub log: crate::relay::log::LogReader,
}

/// Which [`sql::Sizing`] the next claim uses: [`sql::Sizing::Share`] (the cheap one) unless the
/// last claim met rows larger than the per-row share; then [`sql::Sizing::Running`] until a
/// running claim takes only rows within the share. Shared by steps in flight at once.
#[derive(Debug, Default)]
pub struct NextSizing(std::sync::atomic::AtomicBool);

impl NextSizing {
    fn get(&self) -> sql::Sizing {
        if self.0.load(std::sync::atomic::Ordering::Relaxed) {
            sql::Sizing::Running
        } else {
            sql::Sizing::Share
        }
    }

    /// Records what a claim made with `limit` found.
    fn after(&self, limit: sql::BatchLimit, claim: &sql::Claim) {
        let running = next_sizing(limit, claim) == sql::Sizing::Running;
        self.0.store(running, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The sizing after a claim made with `limit`: running while large rows are about, by the share
/// claim's word ([`sql::Claim::left_large`]) or, after a running claim, by the text the relay
/// received (within a factor of about two of the stored size the share is measured by; this
/// only picks the cheaper statement, both keep the budget).
fn next_sizing(limit: sql::BatchLimit, claim: &sql::Claim) -> sql::Sizing {
    let large = claim.left_large
        || (limit.sizing == sql::Sizing::Running
            && claim
                .rows
                .iter()
                .any(|r| (r.payload.len() + r.headers.len()) as i64 > limit.share()));
    if large {
        sql::Sizing::Running
    } else {
        sql::Sizing::Share
    }
}

/// One step's settings: at most `limit` rows, published under `ctl`, the claim said to `claimed`.
pub(super) struct StepOf<'a> {
    pub(super) limit: i64,
    pub(super) ctl: PublishCtl,
    claimed: &'a (dyn Fn(ClaimNotice) + Sync),
    /// The least id of the ordered rows its claim took (`i64::MAX`: none).
    ordered_min: std::sync::atomic::AtomicI64,
}

impl StepOf<'_> {
    fn took_ordered(&self, rows: &[ClaimedRow]) {
        if let Some(min) = rows.iter().map(|r| r.id).min() {
            self.ordered_min
                .fetch_min(min, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn ordered_min(&self) -> Option<i64> {
        let min = self.ordered_min.load(std::sync::atomic::Ordering::Relaxed);
        (min != i64::MAX).then_some(min)
    }
}

/// How a claim is made.
enum ClaimMode {
    Lease { token: Uuid },
    Tx,
}

/// What a step claimed: the unordered rows first, the ordered ones (sorted by key, then id) from
/// `ordered_from` on.
pub(super) struct Claimed {
    pub(super) rows: Vec<ClaimedRow>,
    pub(super) ordered_from: usize,
    pub(super) budget_reached: bool,
    /// The switch changed since the last claim.
    pub(super) event: Option<RelayEvent>,
}

impl Claimed {
    fn notice(&self, limit: i64) -> ClaimNotice {
        let rows = self.rows.len() as u64;
        ClaimNotice {
            rows,
            full: self.budget_reached || i64::try_from(rows).unwrap_or(i64::MAX) >= limit,
        }
    }
}

impl Relay {
    /// Claims at most `limit` (≤ batch size) ready rows, publishes them and settles the outcome.
    /// Claims nothing once `shutdown` is cancelled.
    ///
    /// A lease-mode settle that fails because its connection broke returns
    /// [`StepError::Unsettled`] with what is needed to settle again ([`Relay::settle_again`]);
    /// the loop decides when (the step never sleeps).
    pub async fn step(
        &self,
        limit: u32,
        shutdown: &CancellationToken,
    ) -> Result<Report, StepError> {
        self.step_noticed(limit, shutdown, &|_| {}).await
    }

    /// [`Relay::step`], calling `claimed` once its claim has returned (not when the claim
    /// failed), before the publish: the loop may start the next step then.
    pub async fn step_noticed(
        &self,
        limit: u32,
        shutdown: &CancellationToken,
        claimed: &(dyn Fn(ClaimNotice) + Sync),
    ) -> Result<Report, StepError> {
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
            handed_over: Default::default(),
        };
        let step = StepOf {
            limit,
            ctl,
            claimed,
            ordered_min: std::sync::atomic::AtomicI64::new(i64::MAX),
        };
        let result = match self.cfg.mode {
            Mode::Lease => self.step_lease(&step).await,
            Mode::Tx => self.step_tx(&step).await,
            Mode::Log => self.step_log(&step).await,
        };
        // Rows this step gave back (an outage, shutdown, a rollback, a lost claim) keep their
        // `available_at`, behind the claim cursor: the next claim starts at the start, so they
        // are claimed again beside the rest (a poison event among them meets healthy ones).
        let gave_back = match &result {
            Ok(r) => r.released > 0 || r.unavailable > 0,
            Err(_) => true,
        };
        if gave_back {
            self.start.rescan();
        }
        // Ordered rows that are not out may be pending again below the walk's floor.
        let all_out = match &result {
            Ok(r) => r.published + r.dead_lettered >= r.claimed,
            Err(_) => false,
        };
        if let (false, Some(min)) = (all_out, step.ordered_min()) {
            self.ordering.gave_back(min);
        }
        result
    }

    async fn step_lease(&self, step: &StepOf<'_>) -> Result<Report, StepError> {
        let token = Uuid::new_v4();
        // Taken before the claim is sent: the lease (from the server's now()) ends later.
        let claimed_at = tokio::time::Instant::now();
        let claim = {
            let mut conn = self.db.hold().await?;
            // A step started beside another may wait here for a new connection; one that gets
            // it after shutdown began claims nothing (it would only claim rows to release them).
            if step.ctl.shutdown.is_cancelled() {
                return Ok(Report::default());
            }
            let result = conn
                .run(async |c| self.claim(c, step, ClaimMode::Lease { token }).await)
                .await
                .and_then(|claim| self.failpoint_lose_claim_reply(claim));
            match result {
                Ok(claim) => claim,
                Err(e) => {
                    conn.discard_if_broken(&e);
                    if crate::db::is_connection_lost(&e) {
                        drop(conn);
                        self.release_lost_claim(token).await;
                    }
                    return Err(e.into());
                }
            }
        };
        let (report, published) = self.publish_claimed(claim, step).await;
        let Some((rows, sorted)) = published else {
            return Ok(report);
        };
        let pending = PendingSettle {
            dead_event_types: dead_event_types(&rows, &sorted),
            token,
            lease_ends: claimed_at + self.cfg.lease,
            sorted,
            report,
        };
        match self.settle_lease(&pending, false).await {
            Ok(report) => Ok(report),
            Err(source) if crate::db::is_transient(&source) => Err(StepError::Unsettled {
                pending: Box::new(pending),
                source,
            }),
            Err(e) => Err(e.into()),
        }
    }

    /// Settles a lease-mode batch again after [`StepError::Unsettled`], on a connection that has
    /// just answered a ping (the pool's idle ones may all be dead after a restart). The fenced
    /// statements make a repeat harmless if the earlier attempt did go through.
    pub async fn settle_again(&self, pending: &PendingSettle) -> Result<Report, sqlx::Error> {
        self.settle_lease(pending, true).await
    }

    /// Settles `p` ([`crate::db::Session::settle_lease`]) and completes its report. `retry`: an
    /// earlier attempt may have gone through before its connection broke.
    async fn settle_lease(&self, p: &PendingSettle, retry: bool) -> Result<Report, sqlx::Error> {
        let s = &p.sorted;
        let sql::Settled {
            marked,
            failed,
            released,
        } = self.db.settle_lease(s, p.token, retry).await?;

        let mut report = p.report.clone();
        report.published = marked.len() as u64;
        let failed_set: HashSet<i64> = failed.iter().copied().collect();
        for f in &s.failures {
            if failed_set.contains(&f.id) {
                if f.dead {
                    report.dead_lettered += 1;
                    report.events.push(p.dead_lettered(f));
                } else if f.counted {
                    report.retried += 1;
                } else {
                    report.deferred += 1;
                }
            }
        }
        report.released = released;
        report.lease_lost =
            (s.published.len() - marked.len()) as u64 + (s.failures.len() - failed.len()) as u64;
        if report.lease_lost > 0 {
            report.events.push(RelayEvent::LeaseLost {
                rows: report.lease_lost,
                claim_token: p.token,
            });
        }
        Ok(report)
    }

    async fn step_tx(&self, step: &StepOf<'_>) -> Result<Report, StepError> {
        let mut conn = self.db.hold().await?;
        if step.ctl.shutdown.is_cancelled() {
            return Ok(Report::default()); // as in step_lease
        }
        let result = self.step_tx_on(&mut conn, step).await;
        if let Err(e) = &result {
            conn.discard_if_broken(e.db());
        }
        result
    }

    async fn step_tx_on(
        &self,
        conn: &mut Held<'_>,
        step: &StepOf<'_>,
    ) -> Result<Report, StepError> {
        let mut tx = conn.begin().await?;
        let claim = self.claim(&mut tx, step, ClaimMode::Tx).await?;
        let (mut report, published) = self.publish_claimed(claim, step).await;
        let Some((rows, sorted)) = published else {
            tx.commit().await?;
            return Ok(report);
        };
        if sorted.published.is_empty() && sorted.failures.is_empty() {
            // Nothing was taken (an outage, a closed or stalled consumer, shutdown): rolling back
            // restores every row exactly, including the `last_error` the claim cleared. Nothing
            // was published, so a failure here re-sends nothing.
            tx.rollback().await?;
            report.released = sorted.unpublished.len() as u64;
            return Ok(report);
        }
        // From here the batch is out: a failure rolls its marks back and it is published again.
        let settle = async {
            // The rows given back keep their previous error: the claim cleared it in this
            // transaction, so it is read as committed, on another connection (rare: a shutdown
            // or stall mid-batch).
            let previous = self.db.committed_errors(&sorted.unpublished).await?;
            sql::revert_tx(&mut tx, &sorted.failures).await?;
            let released = sql::unclaim_tx(&mut tx, &previous).await?;
            tx.commit().await?;
            Ok::<_, sqlx::Error>(released)
        };
        report.released = settle.await.map_err(|source| StepError::RolledBack {
            published: sorted.published.len() as u64,
            source,
        })?;
        report.published = sorted.published.len() as u64;
        let types = dead_event_types(&rows, &sorted);
        count_failures(&mut report, &types, sorted.failures.iter());
        Ok(report)
    }

    /// Splits outcomes into published ids, failures (with retry time or dead-letter decision) and
    /// rows to give back untouched. A failure that is the sink's state rather than the event's
    /// fault ([`batch_verdict`]: an outage, a closed or stalled consumer) is given back like an
    /// unstarted publish: no attempt counted, no error stored; `report.sink_down` says why. An
    /// event the sink pushed back on while it took others ([`SinkError::Backpressure`]) is
    /// deferred: its attempt given back, due again after the sink's `Retry-After` or one backoff
    /// step, never dead-lettered for it.
    /// After a claim (said to `claimed`), in both modes: publishes its rows and sorts their
    /// outcomes. Returns the report so far (the claim's counts, the publish's duration, what
    /// [`Self::sort_outcomes`] counts) and, unless the claim took nothing, the rows and their
    /// outcomes to settle.
    pub(super) async fn publish_claimed(
        &self,
        claim: Claimed,
        step: &StepOf<'_>,
    ) -> (Report, Option<(Vec<ClaimedRow>, Settle)>) {
        (step.claimed)(claim.notice(step.limit));
        let rows = claim.rows;
        let mut report = Report {
            claimed: rows.len() as u64,
            budget_reached: claim.budget_reached,
            events: claim.event.into_iter().collect(),
            ..Report::default()
        };
        if rows.is_empty() {
            return (report, None);
        }
        let publish_started = tokio::time::Instant::now();
        let outcomes = self.publish(&rows, claim.ordered_from, &step.ctl).await;
        step.ctl.handed_over.fire();
        report.publish_elapsed = Some(publish_started.elapsed());
        self.failpoint_after_publish().await;
        let sorted = self.sort_outcomes(&rows, outcomes, &mut report);
        (report, Some((rows, sorted)))
    }

    fn sort_outcomes(
        &self,
        rows: &[ClaimedRow],
        mut outcomes: Vec<Outcome>,
        report: &mut Report,
    ) -> Settle {
        report.sink_down = batch_verdict(&mut outcomes);
        let mut s = Settle::default();
        let mut retried_errors = Vec::new();
        let mut deferred_errors = Vec::new();
        for (row, outcome) in rows.iter().zip(outcomes) {
            match outcome {
                Outcome::Published => s.published.push(row.id),
                Outcome::NotStarted | Outcome::Abandoned => s.unpublished.push(row.id),
                Outcome::Failed(err) if err.is_sink_state() => {
                    report.unavailable += 1;
                    s.unpublished.push(row.id);
                }
                Outcome::Failed(SinkError::Backpressure {
                    message,
                    retry_after,
                }) => {
                    let retry_in = retry_after.unwrap_or_else(|| self.cfg.backoff.delay(1));
                    let message = format!(
                        "{message} (deferred {} without counting an attempt: the sink took other events of the batch)",
                        humantime::format_duration(Duration::from_millis(retry_in.as_millis() as u64))
                    );
                    tracing::debug!(id = row.id, error = %message, "publish deferred");
                    deferred_errors.push(message.clone());
                    s.failures.push(Failure {
                        id: row.id,
                        retry_in,
                        dead: false,
                        error: truncate_error(&message),
                        counted: false,
                    });
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
                        counted: true,
                    });
                }
            }
        }
        if let Some(first) = retried_errors.first() {
            report.events.push(RelayEvent::SinkFailed {
                failures: retried_errors.len() as u64,
                error: first.clone(),
            });
        }
        if let Some(first) = deferred_errors.first() {
            report.events.push(RelayEvent::SinkDeferred {
                events: deferred_errors.len() as u64,
                error: first.clone(),
            });
        }
        s
    }

    /// Claims a batch. With no aggregate type ordered this is today's claim alone; otherwise the
    /// unordered claim without the ordered types (none when every type is ordered) and the
    /// ordered claim ([`ordered_sql::claim`]), each within `limit`, on the same connection (tx
    /// mode: in the same transaction) and with the same claim token.
    async fn claim(
        &self,
        conn: &mut sqlx::PgConnection,
        step: &StepOf<'_>,
        mode: ClaimMode,
    ) -> sqlx::Result<Claimed> {
        let limit = step.limit;
        self.log.refuse_queue_claims(conn).await?;
        let (ordering, event) = self.ordering.current(conn).await?;
        let limit = self.limit(limit);
        let filter = match (self.log.guarded(), ordering.is_active()) {
            (false, false) => "",
            (false, true) => ordered_sql::NOT_ORDERED,
            (true, false) => crate::db::log::NOT_LOG,
            (true, true) => NOT_LOG_NOT_ORDERED
                .get_or_init(|| format!("{}{}", crate::db::log::NOT_LOG, ordered_sql::NOT_ORDERED)),
        };
        let mut unordered = sql::Claim::default();
        let mut again = false;
        let beside = ordering.is_active();
        let rested = !ordering.all && beside && !self.ordering.unordered_due();
        if !ordering.all && !rested {
            let from = self.start.next();
            let started = tokio::time::Instant::now();
            unordered = match &mode {
                ClaimMode::Lease { token } => {
                    sql::claim_lease_filtered(conn, limit, self.cfg.lease, *token, filter, from)
                        .await?
                }
                ClaimMode::Tx => sql::claim_tx_filtered(conn, limit, filter, from).await?,
            };
            self.sizing.after(limit, &unordered);
            let full = unordered.budget_reached
                || i64::try_from(unordered.rows.len()).unwrap_or(i64::MAX) >= limit.rows;
            again = self.start.after(from, started.elapsed(), &unordered, full);
            if beside {
                let found = !unordered.rows.is_empty() || unordered.budget_reached;
                self.ordering.unordered_claimed(found, started.elapsed());
                if let Some(at) = unordered.scanned_to {
                    self.start.scanned_to(at);
                }
            }
        }
        if !ordering.is_active() || (beside && !rested && self.ordering.take_woken()) {
            return Ok(Claimed {
                ordered_from: unordered.rows.len(),
                rows: unordered.rows,
                budget_reached: unordered.budget_reached || again,
                event,
            });
        }
        let how = match mode {
            ClaimMode::Lease { token } => ordered_sql::OrderedMode::Lease {
                lease_micros: i64::try_from(self.cfg.lease.as_micros()).unwrap_or(i64::MAX),
                token,
            },
            ClaimMode::Tx => ordered_sql::OrderedMode::Tx,
        };
        let from = self.ordering.start();
        let min_keys = i64::from(self.cfg.concurrency);
        let started = tokio::time::Instant::now();
        let ask = ordered_sql::OrderedAsk {
            mode: how,
            limit,
            per_key: limit.rows,
            min_keys,
            ordering: &ordering,
            from: &from,
        };
        let ordered = ordered_sql::claim(conn, &ask).await?;
        step.took_ordered(&ordered.rows);
        let mut more = self.ordering.advance(&from, &ordered, started.elapsed());
        if rested && !more {
            self.ordering.wake_unordered();
            more = true;
        }
        let ordered_from = unordered.rows.len();
        unordered.rows.extend(ordered.rows);
        Ok(Claimed {
            rows: unordered.rows,
            ordered_from,
            budget_reached: unordered.budget_reached || more || again,
            event,
        })
    }

    /// Publishes the unordered rows as a batch and the ordered ones per key
    /// ([`publish_ordered`]), both at once; outcomes in `rows` order.
    async fn publish(
        &self,
        rows: &[ClaimedRow],
        ordered_from: usize,
        ctl: &PublishCtl,
    ) -> Vec<Outcome> {
        if ordered_from >= rows.len() {
            return self.sink.publish(rows, ctl).await;
        }
        let (unordered, ordered) = rows.split_at(ordered_from);
        let (mut out, ordered) = tokio::join!(
            async {
                if unordered.is_empty() {
                    Vec::new()
                } else {
                    self.sink.publish(unordered, ctl).await
                }
            },
            publish_ordered(&*self.sink, ordered, ctl)
        );
        out.extend(ordered);
        out
    }

    fn limit(&self, rows: i64) -> sql::BatchLimit {
        sql::BatchLimit {
            rows,
            bytes: i64::try_from(self.cfg.batch_bytes).unwrap_or(i64::MAX),
            sizing: self.sizing.get(),
        }
    }

    /// A lease claim whose connection broke may have committed with its reply lost: its rows
    /// would stay leased to `token`, which no one holds, until the lease ends. Gives back what
    /// still carries the token, on a live connection; if that fails too, the lease's end does.
    async fn release_lost_claim(&self, token: Uuid) {
        match self.db.release_token(token).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(
                rows = n,
                "gave back rows of a claim whose reply was lost with its connection"
            ),
            Err(e) => tracing::warn!(
                error = %e,
                "could not give back a claim whose reply was lost; its rows are claimable when the lease ends"
            ),
        }
    }

    fn failpoint_lose_claim_reply(&self, claim: Claimed) -> sqlx::Result<Claimed> {
        if self.cfg.failpoint == Some(Failpoint::LoseClaimReply)
            && !claim.rows.is_empty()
            && !CLAIM_REPLY_LOST.swap(true, std::sync::atomic::Ordering::SeqCst)
        {
            crate::output::eprint_line("FAILPOINT lose-claim-reply reached");
            return Err(sqlx::Error::Io(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "failpoint lose-claim-reply: the claim's reply was lost",
            )));
        }
        Ok(claim)
    }

    async fn failpoint_after_publish(&self) {
        if self.cfg.failpoint == Some(Failpoint::HangAfterPublish) {
            crate::output::eprint_line("FAILPOINT hang-after-publish reached");
            std::future::pending::<()>().await;
        }
    }
}

/// Why a step failed.
#[derive(Debug, thiserror::Error)]
pub enum StepError {
    /// A database error before anything was published (or a statement error on a healthy
    /// connection): nothing of the batch reached the sink, or the claim is left to its lease.
    #[error(transparent)]
    Db(#[from] sqlx::Error),
    /// Lease mode: the batch was published, but its settle failed on a broken connection. The
    /// claim stays ours until `pending.lease_ends`; settle again with [`Relay::settle_again`].
    #[error("marking {} published events failed: {source}", pending.events())]
    Unsettled {
        pending: Box<PendingSettle>,
        source: sqlx::Error,
    },
    /// Tx mode: the batch was published, but its transaction did not commit: the server rolled
    /// the marks back, and those events will be published again (same dedup id).
    #[error("the connection was lost after publishing {published} events: {source}")]
    RolledBack { published: u64, source: sqlx::Error },
}

impl StepError {
    /// The database error underneath.
    pub fn db(&self) -> &sqlx::Error {
        match self {
            StepError::Db(e)
            | StepError::Unsettled { source: e, .. }
            | StepError::RolledBack { source: e, .. } => e,
        }
    }

    /// The database error underneath, owned (what a command reports: its code is what
    /// [`crate::db::explain_privilege`] and the like look for).
    pub fn into_db(self) -> sqlx::Error {
        match self {
            StepError::Db(e)
            | StepError::Unsettled { source: e, .. }
            | StepError::RolledBack { source: e, .. } => e,
        }
    }

    /// Whether trying again later may succeed (see [`crate::db::is_transient`]).
    pub fn is_transient(&self) -> bool {
        crate::db::is_transient(self.db())
    }
}

/// A lease-mode batch that was published but not yet settled: its outcomes, its claim token and
/// when its lease ends (measured from before the claim was sent, so never late).
#[derive(Debug)]
pub struct PendingSettle {
    sorted: Settle,
    token: Uuid,
    report: Report,
    dead_event_types: HashMap<i64, (String, i32)>,
    /// After this instant another relay may claim the rows; settling then is pointless.
    pub lease_ends: tokio::time::Instant,
}

impl PendingSettle {
    /// How many events the settle covers.
    pub fn events(&self) -> usize {
        self.sorted.published.len() + self.sorted.failures.len() + self.sorted.unpublished.len()
    }

    fn dead_lettered(&self, f: &Failure) -> RelayEvent {
        dead_lettered(&self.dead_event_types, f)
    }
}

/// Counts settled failures into `report`: dead letters (each with its WARN event), retries, and
/// deferrals.
pub(super) fn count_failures<'a>(
    report: &mut Report,
    types: &HashMap<i64, (String, i32)>,
    failures: impl Iterator<Item = &'a Failure>,
) {
    for f in failures {
        if f.dead {
            report.dead_lettered += 1;
            report.events.push(dead_lettered(types, f));
        } else if f.counted {
            report.retried += 1;
        } else {
            report.deferred += 1;
        }
    }
}

pub(super) fn dead_lettered(types: &HashMap<i64, (String, i32)>, f: &Failure) -> RelayEvent {
    let (event_type, attempts) = types.get(&f.id).cloned().unwrap_or_default();
    RelayEvent::DeadLettered {
        id: f.id,
        event_type,
        attempts,
        error: f.error.clone(),
    }
}

/// The event type and attempt count of each row about to be dead-lettered, for its WARN line.
pub(super) fn dead_event_types(
    rows: &[ClaimedRow],
    sorted: &Settle,
) -> HashMap<i64, (String, i32)> {
    let dead: HashSet<i64> = sorted
        .failures
        .iter()
        .filter(|f| f.dead)
        .map(|f| f.id)
        .collect();
    if dead.is_empty() {
        return HashMap::new();
    }
    rows.iter()
        .filter(|r| dead.contains(&r.id))
        .map(|r| (r.id, (r.event_type.clone(), r.attempt_count)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(payload_len: usize) -> ClaimedRow {
        ClaimedRow {
            id: 1,
            tenant_id: Uuid::nil(),
            aggregate_type: "a".into(),
            aggregate_id: "1".into(),
            event_type: "t".into(),
            payload: "x".repeat(payload_len),
            headers: "{}".into(),
            idempotency_key: "k".into(),
            created_at: chrono::Utc::now(),
            attempt_count: 1,
        }
    }

    fn limit(sizing: sql::Sizing) -> sql::BatchLimit {
        // A share of 1000 bytes.
        sql::BatchLimit {
            rows: 10,
            bytes: 10_000,
            sizing,
        }
    }

    fn claim(rows: Vec<ClaimedRow>, left_large: bool) -> sql::Claim {
        sql::Claim {
            rows,
            budget_reached: left_large,
            left_large,
            passed_over: left_large,
            ..sql::Claim::default()
        }
    }

    #[test]
    fn the_running_claim_follows_large_rows_and_the_share_claim_small_ones() {
        use sql::Sizing::{Running, Share};
        // A share claim: running next only when it left large rows behind.
        assert_eq!(
            next_sizing(limit(Share), &claim(vec![row(10)], false)),
            Share
        );
        assert_eq!(
            next_sizing(limit(Share), &claim(vec![row(10)], true)),
            Running
        );
        assert_eq!(next_sizing(limit(Share), &claim(vec![], false)), Share);
        // A running claim: running again while it still takes rows larger than the share.
        let mixed = vec![row(10), row(2000)];
        assert_eq!(next_sizing(limit(Running), &claim(mixed, false)), Running);
        let small = vec![row(10), row(900)];
        assert_eq!(next_sizing(limit(Running), &claim(small, false)), Share);
        assert_eq!(next_sizing(limit(Running), &claim(vec![], false)), Share);
    }
}
