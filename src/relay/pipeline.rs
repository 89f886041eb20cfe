//! The steps a loop keeps in flight at once (`--pipeline-depth`): the next batch is claimed while
//! the previous one publishes, so the database and the sink work at the same time. Each step
//! stays claim → publish → settle ([`Relay::step_noticed`]); this only runs several of them
//! concurrently on the loop's task and tells the loop when a claim returned and when a step
//! ended. `FOR UPDATE SKIP LOCKED` makes two claims of one process as safe as two relays.
//!
//! The loops ([`super::daemon`]) decide when to start one: only while the backlog goes on (the
//! latest claim came back full, or is still running after a full one: [`may_start_beside`]; a
//! short claim means nothing more is ready), never past `--max-events` (the budget is
//! split between the steps in flight: [`Pipeline::reserved`]), never while the sink's circuit is
//! open (one probe at a time), and nothing new after shutdown began.

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::step::{ClaimNotice, PendingSettle};
use super::{Backoff, Relay, RelayEvent, Report, StepError};

type StepFuture<'a> = Pin<Box<dyn Future<Output = (u64, Result<Report, StepError>)> + Send + 'a>>;

/// How a step was started.
#[derive(Debug, Clone, Copy)]
pub struct Started {
    /// At most this many rows.
    pub limit: u32,
    pub at: Instant,
    /// Started while the sink's circuit was open: only a probe may close it.
    pub probe: bool,
    /// Started while other steps were in flight: a short claim of its own may only mean that
    /// they held the rows (locked, or an ordered key's head) when it ran.
    pub beside: bool,
}

/// What [`Pipeline::next`] saw.
pub enum Next {
    /// A step's claim returned; its batch is being published.
    Claimed(Started, ClaimNotice),
    /// A step ended (published and settled, or failed), with what its claim took when the claim
    /// returned (a step that claims nothing ends at once: its notice may come only here).
    Done(Started, Option<ClaimNotice>, Result<Report, StepError>),
}

struct Slot {
    id: u64,
    started: Started,
    claim: Option<ClaimNotice>,
}

/// The steps in flight, oldest first.
pub struct Pipeline<'a> {
    relay: &'a Relay,
    shutdown: &'a CancellationToken,
    running: FuturesUnordered<StepFuture<'a>>,
    slots: Vec<Slot>,
    next_id: u64,
    notices: mpsc::UnboundedReceiver<(u64, ClaimNotice)>,
    notify: mpsc::UnboundedSender<(u64, ClaimNotice)>,
    /// Whether the claim that returned last was full (none yet: false).
    last_full: bool,
}

impl<'a> Pipeline<'a> {
    pub fn new(relay: &'a Relay, shutdown: &'a CancellationToken) -> Self {
        let (notify, notices) = mpsc::unbounded_channel();
        Self {
            relay,
            shutdown,
            running: FuturesUnordered::new(),
            slots: Vec::new(),
            next_id: 0,
            notices,
            notify,
            last_full: false,
        }
    }

    /// Steps in flight.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether another step may be started beside those in flight (none in flight: always).
    /// See [`may_start_beside`].
    pub fn may_start_another(&self) -> bool {
        may_start_beside(
            self.slots.last().map(|s| s.claim),
            self.last_full,
            !self.relay.sink.keeps_key_order(),
        )
    }

    /// Rows the steps in flight have claimed, or may still claim (their limit, until the claim
    /// returned): what `--max-events` must keep for them.
    pub fn reserved(&self) -> u64 {
        self.slots
            .iter()
            .map(|s| s.claim.map_or(u64::from(s.started.limit), |c| c.rows))
            .sum()
    }

    /// Starts a step of at most `limit` rows (a step whose settle broke its connection settles
    /// again within its lease: [`step_settled`]).
    pub fn start(&mut self, limit: u32, probe: bool) {
        let id = self.next_id;
        self.next_id += 1;
        let beside = !self.slots.is_empty();
        self.slots.push(Slot {
            id,
            started: Started {
                limit,
                at: Instant::now(),
                probe,
                beside,
            },
            claim: None,
        });
        let relay = self.relay;
        let shutdown = self.shutdown;
        let notify = self.notify.clone();
        self.running.push(Box::pin(async move {
            let claimed = move |n: ClaimNotice| {
                let _ = notify.send((id, n));
            };
            let r = step_settled(relay, limit, shutdown, &claimed).await;
            (id, r)
        }));
    }

    /// Waits for the next claim to return or step to end; `None` when nothing is in flight.
    /// A step's claim is always reported before its end.
    pub async fn next(&mut self) -> Option<Next> {
        if self.slots.is_empty() {
            return None;
        }
        tokio::select! {
            biased;
            Some((id, n)) = self.notices.recv() => {
                self.last_full = n.full;
                let slot = self.slots.iter_mut().find(|s| s.id == id)?;
                slot.claim = Some(n);
                Some(Next::Claimed(slot.started, n))
            }
            Some((id, r)) = self.running.next() => {
                // Its notice, if sent, was sent before it ended: take it first.
                while let Ok((nid, n)) = self.notices.try_recv() {
                    self.last_full = n.full;
                    if let Some(s) = self.slots.iter_mut().find(|s| s.id == nid) {
                        s.claim = Some(n);
                    }
                }
                let at = self.slots.iter().position(|s| s.id == id)?;
                let slot = self.slots.remove(at);
                Some(Next::Done(slot.started, slot.claim, r))
            }
        }
    }
}

/// Whether a step may start beside the newest one in flight (`newest`: its claim, `None` while
/// the claim runs; no step in flight: always). Its claim came back full: yes (the backlog goes
/// on). It came back short: no (nothing more is ready). It is still running: yes when the claim
/// before it came back full, so a deep backlog keeps two claims running at once, on two
/// connections, instead of one after the other (tx mode to null at depth 2: 66-74k events/s
/// against 53-58k, README "Pipelining"); at the start and after a short claim, one at a time.
/// Never two claims at once without `overlap` (a sink that keeps a key's order:
/// [`crate::sink::Sink::keeps_key_order`]).
fn may_start_beside(newest: Option<Option<ClaimNotice>>, last_full: bool, overlap: bool) -> bool {
    match newest {
        None => true,
        Some(Some(claim)) => claim.full,
        Some(None) => overlap && last_full,
    }
}

/// One step; when its lease-mode settle failed because the connection broke, settles again on a
/// live connection with backoff for as long as the claim's lease lasts. Past the lease another
/// relay may take the rows, and re-sending them is what the lease is for.
///
/// This runs even after shutdown began: marking what was published is what a clean shutdown
/// is for (a second signal still exits at once).
pub async fn step_settled(
    relay: &Relay,
    limit: u32,
    shutdown: &CancellationToken,
    claimed: &(dyn Fn(ClaimNotice) + Sync),
) -> Result<Report, StepError> {
    match relay.step_noticed(limit, shutdown, claimed).await {
        Err(StepError::Unsettled { pending, source }) => {
            settle_within_lease(relay, *pending, source).await
        }
        other => other,
    }
}

async fn settle_within_lease(
    relay: &Relay,
    pending: PendingSettle,
    first: sqlx::Error,
) -> Result<Report, StepError> {
    // First retry at once (a terminated backend: the next connection works), then 50 ms
    // doubling to 2 s (a restarting server).
    let backoff = Backoff {
        base: Duration::from_millis(50),
        max: Duration::from_secs(2),
    };
    let started = tokio::time::Instant::now();
    RelayEvent::SettleFailed {
        events: pending.events(),
        error: first.to_string(),
        lease_left: pending.lease_ends.saturating_duration_since(started),
    }
    .emit();
    let mut last = first;
    let mut attempts = 1;
    while let Some(wait) = settle_retry_wait(
        &backoff,
        attempts,
        pending
            .lease_ends
            .saturating_duration_since(tokio::time::Instant::now()),
    ) {
        tokio::time::sleep(wait).await;
        attempts += 1;
        match tokio::time::timeout_at(pending.lease_ends, relay.settle_again(&pending)).await {
            Ok(Ok(report)) => {
                RelayEvent::SettleRecovered {
                    events: pending.events(),
                    attempts,
                    elapsed: started.elapsed(),
                }
                .emit();
                return Ok(report);
            }
            Ok(Err(e)) if crate::db::is_transient(&e) => last = e,
            Ok(Err(e)) => return Err(e.into()),
            Err(_) => break,
        }
    }
    RelayEvent::SettleAbandoned {
        events: pending.events(),
        attempts,
        error: last.to_string(),
    }
    .emit();
    Err(StepError::Db(last))
}

/// The settle's last try starts this long before the lease ends, so it can still finish in time.
const LAST_SETTLE_BEFORE_LEASE_END: Duration = Duration::from_millis(250);

/// How long to wait before settle try `attempts + 1` with `lease_left` of the lease to go
/// (`None`: no time is left for another try). The first retry goes at once, then the backoff's
/// delays, the last one cut short so that a try still starts [`LAST_SETTLE_BEFORE_LEASE_END`]
/// before the lease ends: a server that restarts within the lease finds its batch marked
/// (a 3 s lease gave up 1.45 s early when the waits were not cut).
fn settle_retry_wait(backoff: &Backoff, attempts: u32, lease_left: Duration) -> Option<Duration> {
    let room = lease_left.checked_sub(LAST_SETTLE_BEFORE_LEASE_END)?;
    if room.is_zero() {
        return None;
    }
    let wait = if attempts == 1 {
        Duration::ZERO
    } else {
        backoff.delay(attempts - 1)
    };
    Some(wait.min(room))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_starts_beside_a_running_claim_only_while_the_backlog_goes_on() {
        let full = ClaimNotice {
            rows: 100,
            full: true,
        };
        let short = ClaimNotice {
            rows: 7,
            full: false,
        };
        assert!(may_start_beside(None, false, true), "nothing in flight");
        assert!(
            may_start_beside(Some(Some(full)), false, true),
            "the newest came back full"
        );
        assert!(
            !may_start_beside(Some(Some(short)), true, true),
            "the newest came back short"
        );
        assert!(
            may_start_beside(Some(None), true, true),
            "running, after a full claim"
        );
        assert!(
            !may_start_beside(Some(None), false, true),
            "running, at the start or after a short one"
        );
        // A sink that keeps a key's order: beside a returned full claim, never a running one.
        assert!(may_start_beside(None, false, false));
        assert!(may_start_beside(Some(Some(full)), false, false));
        assert!(
            !may_start_beside(Some(None), true, false),
            "two claims at once would interleave their rows"
        );
    }

    #[test]
    fn settle_tries_go_on_until_just_before_the_lease_ends() {
        let backoff = Backoff {
            base: Duration::from_millis(50),
            max: Duration::from_secs(2),
        };
        // A 3 s lease: the tries' start times, as the loop would take them.
        let lease = Duration::from_secs(3);
        let mut at = Duration::ZERO;
        let mut starts = vec![at];
        let mut attempts = 1;
        while let Some(wait) = settle_retry_wait(&backoff, attempts, lease - at) {
            at += wait;
            starts.push(at);
            attempts += 1;
            assert!(attempts < 100, "the tries never end: {starts:?}");
        }
        let last = *starts.last().unwrap();
        assert_eq!(
            last,
            lease - LAST_SETTLE_BEFORE_LEASE_END,
            "the last try starts just before the lease ends: {starts:?}"
        );
        assert_eq!(starts[1], Duration::ZERO, "the first retry goes at once");
        assert!(
            (Duration::from_millis(25)..=Duration::from_millis(50)).contains(&starts[2]),
            "then the backoff's first delay: {starts:?}"
        );
        // No lease left for a try: none.
        assert_eq!(
            settle_retry_wait(&backoff, 1, LAST_SETTLE_BEFORE_LEASE_END),
            None
        );
        assert_eq!(settle_retry_wait(&backoff, 3, Duration::ZERO), None);
    }
}
