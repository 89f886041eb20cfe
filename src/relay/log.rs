//! Log mode's step: take the reader's lease, read a page of the log (or the retry set's due
//! events), publish it, settle it by moving the position (`db::log`). Published events cost no
//! write; a failed, delayed or given-back one costs one (into the retry set).
//!
//! One relay reads at a time: the lease is a row of `outbox_log`, renewed by every step and every
//! settle, fenced so that a relay that lost it (a stall longer than `--lease`) changes nothing.
//! The others stand by and take over when it lapses. A step publishes its page as the other
//! modes publish a batch (`--concurrency` in flight). With `--pipeline-depth` above 1 a step
//! started beside the one in flight reads the page after its page, hands it to the sink once
//! that one is handed over, and settles after it, only where it left the position ([`Tail`]):
//! events reach the sink in (transaction id, id) order, page by page, and the position moves in
//! order.
//!
//! Also here: the queue modes' watch on the switch ([`LogReader::refuse_queue_claims`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

use uuid::Uuid;

use super::step::{count_failures, dead_event_types, Claimed, StepOf};
use super::{Relay, RelayEvent, Report, StepError};
use crate::db::log::{self as sql, Advance, LogRow, LogSettle, Take};
use crate::db::ordering::Ordering;
use crate::db::relay::ClaimedRow;

/// `--pipeline-depth` by default in log mode, for every sink: a page is fetched beside the plan
/// of the page after it, which leaves nothing idle even for a local write (to the null sink,
/// 200k events: 192k events/s at depth 1 before the split, 201-206k at depth 1 and 214-221k at
/// depth 2 after it, bench/results/2026-12-07-2037-log-plan-fetch-depth.log).
pub const LOG_PIPELINE_DEPTH: u32 = 2;

/// How often a queue-mode relay looks at the switch (and whether migration 14 is in).
const REFRESH: Duration = Duration::from_secs(1);

/// How often the reader looks at the retry set while it last had nothing due (a failed event's
/// backoff, a delayed event's due time or a requeue is met at most this late), instead of at every
/// page: a statement per page less.
const RETRY_LOOK: Duration = Duration::from_millis(250);

/// What a relay keeps of log mode: its reader identity, the fence it last held, and the queue
/// modes' cached view of the switch.
#[derive(Debug)]
pub struct LogReader {
    /// This relay's identity as the log's reader.
    pub me: Uuid,
    inner: Mutex<Inner>,
    /// Held by a step from its start until its page is read and it is the tail: a step started
    /// beside it (while it reads) waits, then reads on from its page instead of the same one.
    reading: tokio::sync::Mutex<()>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The fence of the lease last held (to say once that we took it, and to give it up).
    fence: Option<i64>,
    /// The holder last seen while standing by (to say so once).
    standby: Option<Uuid>,
    /// Queue modes: migration 14 seen (claims carry the guard from then on).
    migrated: bool,
    checked_at: Option<Instant>,
    /// Log mode: when the retry set was last found with nothing due, unless something may have
    /// come due since (events given back at once, a hand-over, a full retry batch).
    retries_idle_since: Option<Instant>,
    /// Log mode: the next page, read while the previous one was published (one page in flight).
    prefetched: Option<Prefetched>,
    /// Log mode: the newest step in flight, which a step started beside it follows.
    tail: Option<Tail>,
    /// The number of the step last started.
    steps: u64,
}

/// The newest step in flight (`--pipeline-depth` above 1): a step started beside it reads the
/// page after its page (from `end`, without waiting for the position to move), hands its page to
/// the sink only once this one's is handed over, and settles only after this one settled, and
/// only if that moved the position to `end`.
#[derive(Debug)]
struct Tail {
    step: u64,
    fence: i64,
    /// Where the next page starts: the window `hi` and the page's last event. `None`: nothing
    /// to read on from (a retry batch, the window's last page, an empty page); the next step
    /// waits for this one to settle and reads from the position.
    end: Option<(String, (String, i64))>,
    handed: Option<tokio::sync::oneshot::Receiver<()>>,
    /// The ordered keys whose events wait, as this page and the pages in flight before it leave
    /// them ([`Stopped`]).
    stopped: Option<tokio::sync::oneshot::Receiver<Stopped>>,
    /// `true`: the settle moved the position to `end`.
    settled: Option<tokio::sync::oneshot::Receiver<bool>>,
}

/// A key of ordered delivery: aggregate type, tenant, aggregate id.
type Key = (String, Uuid, String);

/// The ordered keys a page in flight leaves waiting: those of its events it did not publish
/// (failed, given back, delayed, or waiting already), and those the pages in flight before it
/// left waiting. The page after it publishes none of their events: its own look at the retry
/// set ([`sql::waiting_keys`]) cannot see what the pages before it have not settled yet.
type Stopped = std::sync::Arc<std::collections::HashSet<Key>>;

/// An event's key, borrowed (to sort and look up by) and owned ([`Key`]).
fn key_ref(e: &ClaimedRow) -> (&str, Uuid, &str) {
    (&e.aggregate_type, e.tenant_id, &e.aggregate_id)
}

fn key_of(e: &ClaimedRow) -> Key {
    let (t, n, a) = key_ref(e);
    (t.to_owned(), n, a.to_owned())
}

/// What a step took over from the step in flight before it.
enum Before {
    /// None in flight: read from the position.
    Nothing,
    /// Read on from its page.
    Follow {
        hi: String,
        after: (String, i64),
        handed: tokio::sync::oneshot::Receiver<()>,
        stopped: tokio::sync::oneshot::Receiver<Stopped>,
        settled: tokio::sync::oneshot::Receiver<bool>,
    },
}

/// A page read ahead: valid for the step whose lease (`fence`) and position (the window `hi`,
/// after `after`) are those it was read from.
#[derive(Debug)]
struct Prefetched {
    fence: i64,
    hi: String,
    after: (String, i64),
    page: sql::Page,
}

impl Default for LogReader {
    fn default() -> Self {
        Self {
            me: Uuid::new_v4(),
            inner: Mutex::default(),
            reading: tokio::sync::Mutex::new(()),
        }
    }
}

/// The error a relay stops with when the switch is not where its mode needs it.
#[derive(Debug, thiserror::Error)]
pub enum SwitchError {
    #[error(
        "log mode is switched on (`outboxctl log enable`): a {mode}-mode relay would publish events the log reader publishes too; run relays with --mode auto or --mode log, or switch it off with `outboxctl log disable`"
    )]
    LogOn { mode: &'static str },
    #[error(
        "log mode is switched off (`outboxctl log disable` ran, or it was never enabled): start the relay with --mode auto, tx or lease, or switch it on with `outboxctl log enable`"
    )]
    LogOff,
}

impl SwitchError {
    fn into_sqlx(self) -> sqlx::Error {
        sqlx::Error::Configuration(Box::new(self))
    }

    /// The switch error under a step's database error, if it is one.
    pub fn of(e: &sqlx::Error) -> Option<&SwitchError> {
        match e {
            sqlx::Error::Configuration(b) => b.downcast_ref::<SwitchError>(),
            _ => None,
        }
    }
}

impl LogReader {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().expect("log reader lock")
    }

    /// Whether queue claims carry [`sql::NOT_LOG`] (the schema has migration 14).
    pub fn guarded(&self) -> bool {
        self.lock().migrated
    }

    /// Queue modes, before each claim: at most once per [`REFRESH`], reads whether log mode is
    /// on, and fails the claim if it is (the claim's own guard already keeps it from taking a
    /// row once the switch has committed; this stops the relay, naming the switch).
    pub async fn refuse_queue_claims(&self, conn: &mut sqlx::PgConnection) -> sqlx::Result<()> {
        if self
            .lock()
            .checked_at
            .is_some_and(|t| t.elapsed() < REFRESH)
        {
            return Ok(());
        }
        let migrated = sql::migrated(conn).await?;
        let on = migrated && sql::is_on(conn).await?;
        {
            let mut inner = self.lock();
            inner.migrated = migrated;
            inner.checked_at = Some(Instant::now());
        }
        if on {
            return Err(SwitchError::LogOn { mode: "queue" }.into_sqlx());
        }
        Ok(())
    }

    /// The fence of the lease this relay holds, if it took one.
    pub fn fence(&self) -> Option<i64> {
        self.lock().fence
    }

    fn held(&self, fence: i64) -> Option<RelayEvent> {
        let mut inner = self.lock();
        inner.standby = None;
        (inner.fence.replace(fence) != Some(fence)).then_some(RelayEvent::LogReaderTaken { fence })
    }

    /// The page read ahead for this position, if there is one (dropped otherwise).
    fn prefetched(&self, r: &sql::Reader) -> Option<sql::Page> {
        let p = self.lock().prefetched.take()?;
        (p.fence == r.fence
            && r.window_to.as_deref() == Some(p.hi.as_str())
            && r.after.as_ref() == Some(&p.after))
        .then_some(p.page)
    }

    /// Whether the step should read the retry set now.
    fn look_at_retries(&self) -> bool {
        self.lock()
            .retries_idle_since
            .is_none_or(|t| t.elapsed() >= RETRY_LOOK)
    }

    /// The retry set had nothing due (`idle`), or may have something due now.
    fn retries_seen(&self, idle: bool) {
        self.lock().retries_idle_since = idle.then(Instant::now);
    }

    /// The step in flight this one must wait for before it reads from the position: one with
    /// nothing to read on from, or one read under another lease.
    fn wait_for(&self, fence: Option<i64>) -> Option<tokio::sync::oneshot::Receiver<bool>> {
        let mut inner = self.lock();
        let tail = inner.tail.as_mut()?;
        if tail.end.is_some() && fence.is_none_or(|f| f == tail.fence) {
            return None;
        }
        tail.settled.take()
    }

    /// Starts a step: its number, and what it follows (read under the lease `fence`).
    fn start(&self) -> (u64, Before, Option<i64>) {
        let mut inner = self.lock();
        inner.steps += 1;
        let step = inner.steps;
        match inner.tail.take() {
            Some(Tail {
                fence,
                end: Some((hi, after)),
                handed: Some(handed),
                stopped: Some(stopped),
                settled: Some(settled),
                ..
            }) => (
                step,
                Before::Follow {
                    hi,
                    after,
                    handed,
                    stopped,
                    settled,
                },
                Some(fence),
            ),
            _ => (step, Before::Nothing, None),
        }
    }

    /// Makes step `step`'s page the one a step beside it follows.
    fn read(
        &self,
        step: u64,
        fence: i64,
        end: Option<(String, (String, i64))>,
    ) -> (
        tokio::sync::oneshot::Sender<()>,
        tokio::sync::oneshot::Sender<Stopped>,
        tokio::sync::oneshot::Sender<bool>,
    ) {
        let (handed_tx, handed) = tokio::sync::oneshot::channel();
        let (stopped_tx, stopped) = tokio::sync::oneshot::channel();
        let (settled_tx, settled) = tokio::sync::oneshot::channel();
        self.lock().tail = Some(Tail {
            step,
            fence,
            end,
            handed: Some(handed),
            stopped: Some(stopped),
            settled: Some(settled),
        });
        (handed_tx, stopped_tx, settled_tx)
    }

    /// A page's settle did not move the position to its end: the step that follows it (if one
    /// does) gives its page back, and the step after that is not to read on from it but to wait
    /// for it and read from the position.
    fn break_chain(&self) {
        if let Some(tail) = self.lock().tail.as_mut() {
            tail.end = None;
        }
    }

    /// Step `step` ended: nothing follows it any more.
    fn ended(&self, step: u64) {
        let mut inner = self.lock();
        if inner.tail.as_ref().is_some_and(|t| t.step == step) {
            inner.tail = None;
        }
    }

    fn standing_by(&self, holder: Uuid) -> Option<RelayEvent> {
        let mut inner = self.lock();
        inner.fence = None;
        (inner.standby.replace(holder) != Some(holder)).then_some(RelayEvent::LogStandby { holder })
    }
}

/// What a step found under the reading lock: due events of the retry set, a page read ahead,
/// or where its page ends (fetched once the lock is let go).
enum Got {
    Retry(Vec<LogRow>),
    Page(sql::Page),
    Plan {
        plan: sql::PagePlan,
        /// The reader the page is read for (its window, and where in it the page starts).
        next: sql::Reader,
    },
}

/// What a step read.
enum Read {
    /// Due events of the retry set.
    Retry(Vec<LogRow>),
    /// A page of the log's batch (up to its `hi`).
    Log { page: sql::Page },
}

impl Relay {
    /// Gives the reader's lease up (at exit), so a standby takes over at once.
    pub async fn release_log(&self) {
        if let Some(fence) = self.log.fence() {
            let me = self.log.me;
            if let Err(e) = self
                .db
                .run(async |c| sql::release(c, me, fence).await)
                .await
            {
                tracing::warn!(error = %e, "could not give up the log reader's lease; a standby takes over when it lapses");
            }
        }
    }

    pub(super) async fn step_log(&self, step: &StepOf<'_>) -> Result<Report, StepError> {
        let me = self.log.me;
        let lease = self.cfg.lease;
        let mut report = Report::default();
        let reading = self.log.reading.lock().await;
        // A step in flight whose page this one cannot read on from: wait for its settle, then
        // read from the position it leaves.
        if let Some(settled) = self.log.wait_for(None) {
            let _ = settled.await;
        }
        let limit = step.limit;
        let bytes = i64::try_from(self.cfg.batch_bytes).unwrap_or(i64::MAX);
        // One page in flight: the next is read ahead while it is published and settled. More:
        // the steps beside it read the pages after it.
        let read_ahead_on = self.cfg.pipeline_depth <= 1;
        // What this step follows is taken before the position is read: a step in flight that
        // ends meanwhile has settled first, so the position read after it is where it left it.
        let (n, before, before_fence) = self.log.start();
        let (reader, window_open, read, before, ordered) = {
            let mut conn = self.db.hold().await?;
            if step.ctl.shutdown.is_cancelled() {
                return Ok(report);
            }
            let taken = conn
                .run(async |c| {
                    let mut t = sql::take(c, me, lease).await?;
                    if matches!(t, Take::Unsealed) {
                        sql::seal(c).await?;
                        t = sql::take(c, me, lease).await?;
                    }
                    Ok(t)
                })
                .await?;
            let reader = match taken {
                Take::Held(r) => r,
                Take::Off => return Err(SwitchError::LogOff.into_sqlx().into()),
                Take::Unsealed => return Ok(report),
                Take::Standby { holder } => {
                    report.events.extend(self.log.standing_by(holder));
                    return Ok(report);
                }
            };
            report.events.extend(self.log.held(reader.fence));
            // Ordered delivery's switch, as the queue modes read it (at most once a second).
            let (ordering, changed) = conn.run(async |c| self.ordering.current(c).await).await?;
            report.events.extend(changed);
            let ordered = ordering.is_active().then_some(ordering);
            // Read under another lease: its settle changes nothing, so the position stands.
            let before = match before {
                Before::Follow { .. } if before_fence != Some(reader.fence) => Before::Nothing,
                before => before,
            };
            let read = match &before {
                Before::Follow { hi, after, .. } => {
                    let next = sql::Reader {
                        window_to: Some(hi.clone()),
                        after: Some(after.clone()),
                        ..reader.clone()
                    };
                    let plan = conn
                        .run(async |c| sql::plan_page(c, &next, Some(hi), limit, bytes).await)
                        .await?;
                    Got::Plan { plan, next }
                }
                // (A step that fails before it is the tail leaves nothing to clear.)
                Before::Nothing => {
                    self.read_from_position(&mut conn, &reader, step, ordered.as_ref(), &mut report)
                        .await?
                }
            };
            let window_open = match &before {
                Before::Follow { .. } => true,
                Before::Nothing => reader.window_to.is_some(),
            };
            (reader, window_open, read, before, ordered)
        };
        let fence = reader.fence;
        let after_id = match &before {
            Before::Follow { after, .. } => Some(after.1),
            Before::Nothing => None,
        };
        let (handed_before, stopped_before, settled_before) = match before {
            Before::Follow {
                handed,
                stopped,
                settled,
                ..
            } => (Some(handed), Some(stopped), Some(settled)),
            Before::Nothing => (None, None, None),
        };

        // Where a step beside this one reads on from: after this page, within its window.
        let end = match &read {
            Got::Page(sql::Page {
                hi: Some(hi),
                last: Some(last),
                more: true,
                ..
            })
            | Got::Plan {
                plan:
                    sql::PagePlan {
                        hi: Some(hi),
                        last: Some(last),
                        more: true,
                    },
                ..
            } => Some((hi.clone(), last.clone())),
            _ => None,
        };
        let (handed_tx, stopped_tx, settled_tx) = self.log.read(n, fence, end.clone());
        drop(reading);
        // A planned page is fetched beside the plan of the page after it.
        let read = match read {
            Got::Retry(rows) => Read::Retry(rows),
            Got::Page(page) => Read::Log { page },
            Got::Plan { plan, next } => match self
                .db
                .run(async |c| {
                    sql::fetch_page(c, &next, next.window_to.as_deref(), plan.clone()).await
                })
                .await
            {
                Ok(page) => Read::Log { page },
                Err(e) => {
                    // Nothing follows where this page was to end.
                    self.log.break_chain();
                    self.log.ended(n);
                    return Err(e.into());
                }
            },
        };
        // Ordered keys whose events wait in the retry set, or behind a dead head: one statement
        // per page while a type is ordered, none while none is (decision 0009).
        let waiting = match (&ordered, &read) {
            (Some(o), Read::Log { page }) => match self.waiting_keys(o, &page.rows).await {
                Ok(w) => w,
                Err(e) => {
                    self.log.break_chain();
                    self.log.ended(n);
                    return Err(e.into());
                }
            },
            _ => std::collections::HashSet::new(),
        };
        step.ctl.handed_over.arm(handed_tx);

        // What goes out now, and what the position passes without publishing it.
        let (rows, more) = match &read {
            // A retry batch says nothing of the log: the loop steps again, to read a page.
            Read::Retry(rows) => (rows.as_slice(), !rows.is_empty()),
            Read::Log { page, .. } => (page.rows.as_slice(), page.more),
        };
        let last = match &read {
            Read::Log { page } => page.last.clone(),
            Read::Retry(rows) => rows.last().map(|r| (r.xid.clone(), r.event.id)),
        };
        // A retry batch holds at most one event per ordered key (its head, `read_retries`).
        let page_ordered = ordered
            .as_ref()
            .filter(|_| matches!(read, Read::Log { .. }));
        // The next page of the batch is read while this one is published: reading takes no lock,
        // and it is used only if this page's settle moves the position to just after it.
        let ahead = end.filter(|_| read_ahead_on).map(|(hi, after)| {
            let next = sql::Reader {
                window_to: Some(hi.clone()),
                after: Some(after.clone()),
                ..reader.clone()
            };
            (hi, after, next)
        });
        let read_ahead = async {
            let (hi, after, next) = ahead?;
            let page = self
                .db
                .run(async |c| sql::read_page(c, &next, Some(&hi), limit, bytes).await)
                .await
                .ok()?;
            Some(Prefetched {
                fence,
                hi,
                after,
                page,
            })
        };
        // ... and while it is settled: the page after it is ready when the next step starts.
        let moved = std::sync::atomic::AtomicBool::new(false);
        let rest = async {
            let given_back = |mut report: Report| {
                report.released = rows.len() as u64;
                Ok(report)
            };
            // The page before this one goes to the sink first, whole; not handed over (it failed
            // before its publish, or shutdown): this one is read again after it.
            if let Some(handed) = handed_before {
                if handed.await.is_err() {
                    return given_back(report);
                }
            }
            // ... and what it left waiting is known: none of those keys' events go out here.
            let mut waiting = waiting;
            if let Some(stopped) = stopped_before {
                match stopped.await {
                    Ok(keys) => waiting.extend(keys.iter().cloned()),
                    Err(_) => return given_back(report),
                }
            }
            let Split {
                unordered,
                ordered: in_order,
                mut later,
                mut stopped,
            } = split_page(rows, page_ordered, waiting);
            // Unordered, the page after this one needs nothing of its outcomes.
            let mut stopped_tx = Some(stopped_tx);
            if page_ordered.is_none() {
                if let Some(tx) = stopped_tx.take() {
                    let _ = tx.send(Stopped::default());
                }
            }
            let ordered_from = unordered.len();
            let ordered_ids: std::collections::HashSet<i64> =
                in_order.iter().map(|e| e.id).collect();
            let claim = Claimed {
                rows: unordered.into_iter().chain(in_order).collect(),
                ordered_from,
                budget_reached: more,
                event: None,
            };
            let (claim_report, published) = self.publish_claimed(claim, step).await;
            report.events.extend(claim_report.events.iter().cloned());
            let events = std::mem::take(&mut report.events);
            report = Report {
                events,
                ..claim_report
            };
            let (published_rows, sorted) = published.unwrap_or_default();
            if page_ordered.is_some() {
                let not_out = sorted.unpublished.iter().copied();
                let not_out = not_out.chain(sorted.failures.iter().map(|f| f.id));
                let not_out: std::collections::HashSet<i64> =
                    not_out.filter(|id| ordered_ids.contains(id)).collect();
                stopped.extend(
                    published_rows
                        .iter()
                        .filter(|r| not_out.contains(&r.id))
                        .map(key_of),
                );
                if let Some(tx) = stopped_tx.take() {
                    let _ = tx.send(std::sync::Arc::new(stopped));
                }
            }
            // Settled after the page before it, and only where that one left the position: if it
            // did not move there, this page is read (and sent) again after it.
            if let Some(settled) = settled_before {
                if !matches!(settled.await, Ok(true)) {
                    return given_back(report);
                }
            }
            let took_any = !sorted.published.is_empty() || !sorted.failures.is_empty();
            let advance = match &read {
                Read::Retry(_) => Advance::Stay,
                // The sink took none of it (an outage, shutdown): read the page again later.
                Read::Log { .. } if !took_any && !sorted.unpublished.is_empty() => Advance::Stay,
                Read::Log { page } => match (&page.hi, &last, more) {
                    // A new batch that found nothing: nothing to pass.
                    (None, _, _) => Advance::Stay,
                    (Some(hi), Some((xid, id)), true) => Advance::Within {
                        hi: hi.clone(),
                        xid: xid.clone(),
                        id: *id,
                    },
                    (Some(_), None, _) if !window_open => Advance::Stay,
                    (Some(hi), _, _) => Advance::To { hi: hi.clone() },
                },
            };
            let moves = !matches!(advance, Advance::Stay);
            if moves && !sorted.unpublished.is_empty() {
                let now = chrono::Utc::now();
                later.extend(sorted.unpublished.iter().map(|id| (*id, now)));
                self.log.retries_seen(false);
            }
            let retried_out: &[i64] = match &read {
                Read::Retry(_) => &sorted.published,
                Read::Log { .. } => &[],
            };
            if !moves && sorted.failures.is_empty() && retried_out.is_empty() {
                report.released = sorted.unpublished.len() as u64;
                return Ok(report);
            }
            let settle = LogSettle {
                retried_out,
                failures: &sorted.failures,
                later: if moves { &later } else { &[] },
                after_id,
            };
            let settled = self
                .db
                .run(async |c| sql::settle(c, me, fence, lease, &advance, &settle).await)
                .await
                .map_err(|source| StepError::RolledBack {
                    published: sorted.published.len() as u64,
                    source,
                })?;
            let Some(settled) = settled else {
                report.lease_lost = (sorted.published.len() + sorted.failures.len()) as u64;
                report.events.push(RelayEvent::LeaseLost {
                    rows: report.lease_lost,
                    claim_token: me,
                });
                return Ok(report);
            };
            moved.store(moves, std::sync::atomic::Ordering::Relaxed);
            let _ = settled_tx.send(moves);
            report.published = sorted.published.len() as u64;
            report.released = if moves {
                0
            } else {
                sorted.unpublished.len() as u64
            };
            let failed: std::collections::HashSet<i64> = settled.failed.iter().copied().collect();
            let types = dead_event_types(&published_rows, &sorted);
            let settled_failures = sorted.failures.iter().filter(|f| failed.contains(&f.id));
            count_failures(&mut report, &types, settled_failures);
            Ok(report)
        };
        let (result, ahead) = tokio::join!(rest, read_ahead);
        if read_ahead_on {
            self.log.lock().prefetched = ahead;
        }
        if matches!(read, Read::Log { .. }) && !moved.load(std::sync::atomic::Ordering::Relaxed) {
            self.log.break_chain();
        }
        self.log.ended(n);
        result
    }

    /// What a step reads when no step in flight is read on from: the hand-over from queue mode
    /// once, the retry set's due events (at most every [`RETRY_LOOK`] while it had none), else
    /// the page at the position (the one read ahead, if it is for this position).
    async fn read_from_position(
        &self,
        conn: &mut crate::db::session::Held<'_>,
        reader: &sql::Reader,
        step: &StepOf<'_>,
        ordered: Option<&Ordering>,
        report: &mut Report,
    ) -> Result<Got, StepError> {
        let me = self.log.me;
        if !reader.handed_over {
            let moved = conn
                .run(async |c| sql::hand_over(c, me, reader.fence).await)
                .await?;
            if let Some(n @ 1..) = moved {
                report.events.push(RelayEvent::LogHandedOver { events: n });
                self.log.retries_seen(false);
            }
        }
        let limit = step.limit;
        let bytes = i64::try_from(self.cfg.batch_bytes).unwrap_or(i64::MAX);
        let retries = if self.log.look_at_retries() {
            let r = conn
                .run(async |c| sql::read_retries(c, limit, ordered).await)
                .await?;
            self.log.retries_seen(r.is_empty());
            r
        } else {
            Vec::new()
        };
        if !retries.is_empty() {
            self.log.lock().prefetched = None;
            return Ok(Got::Retry(retries));
        }
        if let Some(page) = self.log.prefetched(reader) {
            return Ok(Got::Page(page));
        }
        let hi = reader.window_to.as_deref();
        let plan = conn
            .run(async |c| sql::plan_page(c, reader, hi, limit, bytes).await)
            .await?;
        Ok(Got::Plan {
            plan,
            next: reader.clone(),
        })
    }
}

impl Relay {
    /// [`sql::waiting_keys`] for the ordered keys of a page's live events.
    async fn waiting_keys(
        &self,
        ordering: &Ordering,
        rows: &[LogRow],
    ) -> sqlx::Result<std::collections::HashSet<Key>> {
        let mut keys: Vec<Key> = rows
            .iter()
            .filter(|r| r.live && ordering.orders(&r.event.aggregate_type))
            .map(|r| key_of(&r.event))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        if keys.is_empty() {
            return Ok(Default::default());
        }
        let refs: Vec<(&str, Uuid, &str)> = keys
            .iter()
            .map(|(t, n, a)| (t.as_str(), *n, a.as_str()))
            .collect();
        let found = self
            .db
            .run(async |c| sql::waiting_keys(c, &refs).await)
            .await?;
        Ok(found
            .into_iter()
            .filter_map(|i| keys.get(i).cloned())
            .collect())
    }
}

/// How a page's events go: the unordered ones as one batch, the ordered ones per key (one lane
/// each, [`super::ordering::publish_ordered`]), the rest into the retry set.
#[derive(Debug, Default)]
struct Split {
    unordered: Vec<ClaimedRow>,
    /// Grouped by key, each key's events in the page's (xid, id) order.
    ordered: Vec<ClaimedRow>,
    /// Into the retry set: delayed events at their time; events of a key that waits, due now
    /// (they wait behind the key's earlier events there, [`sql::read_retries`]).
    later: Vec<(i64, chrono::DateTime<chrono::Utc>)>,
    /// The ordered keys none of whose later events may go out: those that waited already, and
    /// those this page stopped at a delayed event.
    stopped: std::collections::HashSet<Key>,
}

/// Splits a page's live events (`ordered`: the switch while a type is ordered; `waiting`: the
/// ordered keys whose events wait). An event of an ordered key that waits joins the retry set
/// behind the key's earlier events; a delayed one does, at its time, and stops its key for the
/// rest of the page.
fn split_page(
    rows: &[LogRow],
    ordered: Option<&Ordering>,
    waiting: std::collections::HashSet<Key>,
) -> Split {
    let now = chrono::Utc::now();
    let mut s = Split {
        stopped: waiting,
        ..Split::default()
    };
    for r in rows.iter().filter(|r| r.live) {
        let key = ordered
            .filter(|o| o.orders(&r.event.aggregate_type))
            .map(|_| key_of(&r.event));
        match key {
            None if r.due => s.unordered.push(r.event.clone()),
            None => s.later.push((r.event.id, r.available_at)),
            Some(k) if s.stopped.contains(&k) => s.later.push((r.event.id, now)),
            Some(k) if !r.due => {
                s.later.push((r.event.id, r.available_at));
                s.stopped.insert(k);
            }
            Some(_) => s.ordered.push(r.event.clone()),
        }
    }
    // Stable: each key's events stay in (xid, id) order.
    s.ordered.sort_by(|a, b| key_ref(a).cmp(&key_ref(b)));
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, aggregate_type: &str, aggregate_id: &str, due: bool) -> LogRow {
        LogRow {
            event: ClaimedRow {
                id,
                tenant_id: Uuid::nil(),
                aggregate_type: aggregate_type.into(),
                aggregate_id: aggregate_id.into(),
                event_type: "e".into(),
                payload: "{}".into(),
                headers: "{}".into(),
                idempotency_key: id.to_string(),
                created_at: chrono::Utc::now(),
                attempt_count: 1,
            },
            xid: id.to_string(),
            due,
            live: true,
            available_at: chrono::DateTime::UNIX_EPOCH,
        }
    }

    fn ids(rows: &[ClaimedRow]) -> Vec<i64> {
        rows.iter().map(|r| r.id).collect()
    }

    #[test]
    fn a_page_sends_an_ordered_key_up_to_its_first_delayed_event_and_none_of_a_waiting_key() {
        let ordering = Ordering {
            all: false,
            types: vec!["order".into()],
        };
        let rows = [
            row(1, "order", "a", true),
            row(2, "order", "b", true),
            row(3, "order", "a", false), // delayed: stops a
            row(4, "order", "a", true),
            row(5, "other", "a", false), // unordered, delayed: only itself
            row(6, "other", "a", true),
            row(7, "order", "w", true), // w waits already
            row(8, "order", "b", true),
        ];
        let w: Key = ("order".into(), Uuid::nil(), "w".into());
        let s = split_page(&rows, Some(&ordering), [w.clone()].into());
        assert_eq!(ids(&s.unordered), vec![6]);
        assert_eq!(ids(&s.ordered), vec![1, 2, 8], "by key, each in page order");
        let later: Vec<i64> = s.later.iter().map(|(id, _)| *id).collect();
        assert_eq!(later, vec![3, 4, 5, 7]);
        let epoch = chrono::DateTime::UNIX_EPOCH;
        assert_eq!(s.later[0].1, epoch, "a delayed event at its time");
        assert_ne!(s.later[1].1, epoch, "one behind it due now");
        let a: Key = ("order".into(), Uuid::nil(), "a".into());
        assert_eq!(s.stopped, [a, w].into());
        // Ordering off: the page as before.
        let s = split_page(&rows, None, Default::default());
        assert_eq!(ids(&s.unordered), vec![1, 2, 4, 6, 7, 8]);
        assert!(s.ordered.is_empty() && s.stopped.is_empty());
    }
}
