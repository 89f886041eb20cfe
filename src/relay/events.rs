//! The relay's notable occurrences as typed events (Vector's internal events): each variant's
//! [`RelayEvent::emit`] writes its one log line and bumps its metrics ([`super::metrics`]), so no
//! call site formats its own message and logs and metrics never disagree.
//!
//! The step never logs: it returns the events it produced in its [`Report`](super::Report)
//! (`events`), and the loops in `daemon` emit them, along with their own (heartbeat, settle
//! retries, backoff). Field names are stable and values are lower case, for `--log-format json`.
//! No event carries a payload byte.

use std::time::Duration;

use uuid::Uuid;

use super::metrics as m;
use super::{Mode, Report};
use crate::lock::lock;

/// Something worth a log line.
#[derive(Debug, Clone, PartialEq)]
pub enum RelayEvent {
    /// A step's write was refused: the database is read-only (a hot standby, say). No event was
    /// claimed, so none failed; the relay waits as for a lost connection. A WARN line the first
    /// time after the database last took a write ([`READ_ONLY_SAID`]), DEBUG after that.
    ReadOnly { retry_in: Duration },
    /// A step ended well: after [`RelayEvent::ReadOnly`], an INFO line that writes go through
    /// again (a promotion, or the address moved to the primary); otherwise nothing.
    Writable,
    /// A row was dead-lettered (permanent failure, or attempts exhausted).
    DeadLettered {
        id: i64,
        event_type: String,
        attempts: i32,
        error: String,
    },
    /// Settles that found their rows claimed again by another relay: our lease had expired.
    LeaseLost { rows: u64, claim_token: Uuid },
    /// A published batch's settle failed because its connection broke; retrying on a live one.
    SettleFailed {
        events: usize,
        error: String,
        lease_left: Duration,
    },
    /// The settle went through after a broken connection.
    SettleRecovered {
        events: usize,
        attempts: u32,
        elapsed: Duration,
    },
    /// No settle went through before the claim's lease ended: those events are published again
    /// after it (same dedup id).
    SettleAbandoned {
        events: usize,
        attempts: u32,
        error: String,
    },
    /// Tx mode: the batch was published but its transaction did not commit (connection lost), so
    /// the server rolled the claim back and those events are published again.
    TxRolledBack { events: u64, error: String },
    /// A step failed; the loop waits `retry_in` before the next.
    StepFailed { error: String, retry_in: Duration },
    /// A `--once` run gave up reconnecting.
    GaveUp { error: String, after: Duration },
    /// The periodic summary, also when idle.
    Heartbeat(Heartbeat),
    /// Events of a batch the sink failed (each retried later with backoff); logged at most once
    /// per [`FAILURE_WARN_EVERY`], with the first error text and how many failures the line
    /// stands for. Outages are the daemon's circuit's; dead letters have their own line.
    SinkFailed { failures: u64, error: String },
    /// Events of a batch the sink pushed back on while it took others (see
    /// [`crate::sink::SinkError::Backpressure`]): deferred with no attempt counted; logged like
    /// [`RelayEvent::SinkFailed`], at most once per [`FAILURE_WARN_EVERY`].
    SinkDeferred { events: u64, error: String },
    /// A step ended (the loops emit one per step that claimed something): its counts and timings
    /// go to the counters and histograms; a DEBUG line.
    StepDone(StepDone),
    /// The sink went into an outage: the daemon pauses claims and probes. `events`: how many
    /// events of the batch that opened it were given back; `error` is the first one's (one
    /// line, however large the batch).
    CircuitOpened { error: String, events: u64 },
    /// The outage is over.
    CircuitClosed { after: Duration, probes: u32 },
    /// The relay read a changed `outbox_ordering` (or, at its first claim, found ordering on):
    /// from this claim on it orders these aggregate types (`all`: every type; neither: none).
    OrderingChanged { all: bool, types: Vec<String> },
    /// Log mode: this relay took the reader's lease (`fence`: raised at each take-over).
    LogReaderTaken { fence: i64 },
    /// Log mode: another relay (`holder`) reads the log; this one stands by until its lease
    /// lapses.
    LogStandby { holder: Uuid },
    /// Log mode: what queue mode left pending at the switch was moved to the retry set.
    LogHandedOver { events: u64 },
    /// First SIGTERM/SIGINT.
    ShutdownRequested,
    /// Second SIGTERM/SIGINT: the process exits at once.
    SecondSignal,
    /// SIGHUP: the sink reopened what it writes to (`Some(Ok)`: the file sink, after a log
    /// rotation), could not (`Some(Err)`: it keeps writing to the file it had open), or has
    /// nothing to reopen (`None`). Never stops the relay.
    Hangup {
        sink: String,
        reopened: Option<Result<(), String>>,
    },
}

/// What the heartbeat reports: the outbox's figures (absent when the query failed) and what the
/// relay did since the previous heartbeat.
#[derive(Debug, Clone, PartialEq)]
pub struct Heartbeat {
    pub figures: Result<crate::db::relay::Backlog, String>,
    pub interval: Duration,
    pub published: u64,
    pub retried: u64,
    pub dead_lettered: u64,
    pub lease_lost: u64,
}

/// What a step did, for [`RelayEvent::StepDone`].
#[derive(Debug, Clone, PartialEq)]
pub struct StepDone {
    /// The step's counts and its publish's duration (what it carries for the loop, the events
    /// and the sink's state, left out).
    pub report: Report,
    /// The whole step: claim, publish, settle.
    pub elapsed: Duration,
}

impl StepDone {
    pub fn new(r: &Report, elapsed: Duration) -> Self {
        let report = Report {
            events: Vec::new(),
            sink_down: None,
            ..r.clone()
        };
        Self { report, elapsed }
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

impl RelayEvent {
    /// The counter that counts this kind of event, if one does.
    fn counter(&self) -> Option<&'static str> {
        match self {
            RelayEvent::ReadOnly { .. } | RelayEvent::StepFailed { .. } => Some(m::STEP_FAILURES),
            RelayEvent::CircuitOpened { .. } => Some(m::CIRCUIT_OPENED),
            RelayEvent::SettleAbandoned { .. } => Some(m::SETTLES_ABANDONED),
            RelayEvent::TxRolledBack { .. } => Some(m::TX_ROLLED_BACK),
            _ => None,
        }
    }

    /// Writes the event's log line and bumps its metrics.
    pub fn emit(&self) {
        match self {
            RelayEvent::StepDone(StepDone { report: s, elapsed }) => {
                tracing::debug!(
                    claimed = s.claimed,
                    published = s.published,
                    retried = s.retried,
                    dead_lettered = s.dead_lettered,
                    released = s.released,
                    lease_lost = s.lease_lost,
                    elapsed_ms = ms(*elapsed),
                    "batch done"
                );
                for (name, n) in [
                    (m::CLAIMED, s.claimed),
                    (m::PUBLISHED, s.published),
                    (m::RETRIED, s.retried),
                    (m::DEAD_LETTERED, s.dead_lettered),
                    (m::RELEASED, s.released),
                    (m::LEASE_LOST, s.lease_lost),
                    (m::UNAVAILABLE, s.unavailable),
                    (m::SINK_FAILURES, s.sink_failures),
                    (m::DEFERRED, s.deferred),
                ] {
                    if n > 0 {
                        metrics::counter!(name).increment(n);
                    }
                }
                if let Some(p) = s.publish_elapsed {
                    metrics::histogram!(m::PUBLISH_DURATION).record(p.as_secs_f64());
                }
                metrics::histogram!(m::BATCH_DURATION).record(elapsed.as_secs_f64());
            }
            RelayEvent::ReadOnly { retry_in } => {
                if READ_ONLY_SAID.swap(true, std::sync::atomic::Ordering::Relaxed) {
                    tracing::debug!(retry_in_ms = ms(*retry_in), "the database is still read-only");
                } else {
                    tracing::warn!(
                        retry_in_ms = ms(*retry_in),
                        "the database is read-only (a hot standby, or default_transaction_read_only): no event claimed, none failed; trying again until it takes writes (a promotion, or the address moved to the primary)"
                    );
                }
            }
            RelayEvent::Writable => {
                if READ_ONLY_SAID.swap(false, std::sync::atomic::Ordering::Relaxed) {
                    tracing::info!("the database takes writes again; relaying");
                }
            }
            RelayEvent::CircuitOpened { error, events } => {
                tracing::warn!(
                    events,
                    error = error.as_str(),
                    "sink unavailable: pausing claims and probing until it is back (events are given back untouched, no attempt counted)"
                );
                metrics::gauge!(m::CIRCUIT_OPEN).set(1.0);
            }
            RelayEvent::CircuitClosed { after, probes } => {
                tracing::info!(
                    after = %crate::output::human_duration(*after),
                    probes,
                    "sink available again; resuming"
                );
                metrics::gauge!(m::CIRCUIT_OPEN).set(0.0);
            }
            RelayEvent::DeadLettered {
                id,
                event_type,
                attempts,
                error,
            } => tracing::warn!(
                id,
                event_type = event_type.as_str(),
                attempts,
                error = error.as_str(),
                "event dead-lettered"
            ),
            RelayEvent::OrderingChanged { all, types } => tracing::info!(
                ordered_types = if *all { "*".to_owned() } else { types.join(",") },
                "ordered delivery per key: {}",
                match (all, types.is_empty()) {
                    (true, _) => "on for every aggregate type".to_owned(),
                    (false, true) => "off".to_owned(),
                    (false, false) => format!("on for {}", types.join(", ")),
                }
            ),
            RelayEvent::LogReaderTaken { fence } => tracing::info!(
                fence,
                "log mode: this relay reads the log (reader's lease taken)"
            ),
            RelayEvent::LogStandby { holder } => tracing::info!(
                holder = %holder,
                "log mode: another relay reads the log; standing by until its lease lapses"
            ),
            RelayEvent::LogHandedOver { events } => tracing::info!(
                events,
                "log mode: events queue mode left pending moved to the retry set"
            ),
            RelayEvent::LeaseLost { rows, claim_token } => tracing::warn!(
                lease_lost = rows,
                claim_token = %claim_token,
                "lease expired and the rows were claimed again by another relay; left them to it (consider a longer --lease)"
            ),
            RelayEvent::SettleFailed {
                events,
                error,
                lease_left,
            } => tracing::warn!(
                events,
                error = error.as_str(),
                lease_left_ms = ms(*lease_left),
                "marking a published batch failed (connection lost); retrying on a live connection until its lease ends"
            ),
            RelayEvent::SettleRecovered {
                events,
                attempts,
                elapsed,
            } => tracing::info!(
                events,
                attempts,
                elapsed_ms = ms(*elapsed),
                "marked the published batch after reconnecting"
            ),
            RelayEvent::SettleAbandoned {
                events,
                attempts,
                error,
            } => {
                tracing::error!(
                    events,
                    attempts,
                    error = error.as_str(),
                    "could not mark a published batch before its lease ended; its events will be published again (same dedup id)"
                );
            }
            RelayEvent::TxRolledBack { events, error } => {
                tracing::warn!(
                    events,
                    error = error.as_str(),
                    "the connection was lost after publishing a batch; the server rolled its marks back and its events will be published again (same dedup id)"
                );
            }
            RelayEvent::StepFailed { error, retry_in } => {
                tracing::warn!(
                    error = error.as_str(),
                    retry_in_ms = ms(*retry_in),
                    "relay step failed; backing off"
                );
            }
            RelayEvent::GaveUp { error, after } => tracing::error!(
                error = error.as_str(),
                failing_for_ms = ms(*after),
                "the database stayed unreachable; giving up"
            ),
            RelayEvent::Heartbeat(h) => {
                let figures = h.figures.as_ref().ok();
                tracing::info!(
                    backlog = figures.map(|f| f.backlog),
                    scheduled = figures.map(|f| f.scheduled),
                    in_flight = figures.map(|f| f.in_flight),
                    published = h.published,
                    retried = h.retried,
                    dead_lettered = h.dead_lettered,
                    lease_lost = h.lease_lost,
                    interval_ms = ms(h.interval),
                    error = h.figures.as_ref().err().map(String::as_str),
                    "{}",
                    match h.figures {
                        Ok(_) => "heartbeat",
                        Err(_) => "heartbeat (backlog unknown: the database did not answer)",
                    }
                )
            }
            RelayEvent::SinkFailed { failures, error } => FAILURE_WARN.emit(*failures, error),
            RelayEvent::SinkDeferred { events, error } => DEFERRED_WARN.emit(*events, error),
            RelayEvent::ShutdownRequested => tracing::info!(
                "shutting down: finishing in-flight publishes (a second signal exits at once)"
            ),
            RelayEvent::SecondSignal => tracing::warn!(
                "second signal: exiting now; unsettled claims are retried after their lease"
            ),
            RelayEvent::Hangup { sink, reopened } => match reopened {
                Some(Ok(())) => tracing::info!(
                    sink = sink.as_str(),
                    "SIGHUP: reopened the file; the next batch goes to it"
                ),
                Some(Err(e)) => tracing::warn!(
                    sink = sink.as_str(),
                    error = e.as_str(),
                    "SIGHUP: cannot reopen the file; still appending to the one open before"
                ),
                None => tracing::info!(
                    sink = sink.as_str(),
                    "SIGHUP: nothing to reopen (only the file sink reopens its file); carrying on"
                ),
            },
        }
        if let Some(counter) = self.counter() {
            metrics::counter!(counter).increment(1);
        }
    }
}

/// Whether [`RelayEvent::ReadOnly`] has been said since the database last took a write.
static READ_ONLY_SAID: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The rate limiter of [`RelayEvent::SinkFailed`]'s WARN (one per process: relays in one
/// process share a sink).
static FAILURE_WARN: RateLimitedWarn = RateLimitedWarn::new(Warned::Failed);
/// The same for [`RelayEvent::SinkDeferred`].
static DEFERRED_WARN: RateLimitedWarn = RateLimitedWarn::new(Warned::Deferred);
const FAILURE_WARN_EVERY: Duration = Duration::from_secs(10);

/// What a [`RateLimitedWarn`] counts.
#[derive(Clone, Copy)]
enum Warned {
    Failed,
    Deferred,
}

struct RateLimitedWarn {
    what: Warned,
    state: std::sync::Mutex<(Option<std::time::Instant>, u64)>,
}

impl RateLimitedWarn {
    const fn new(what: Warned) -> Self {
        Self {
            what,
            state: std::sync::Mutex::new((None, 0)),
        }
    }

    /// Records `n` failures; logs them (and those suppressed since the last line) when due.
    fn emit(&self, n: u64, error: &str) {
        let mut st = lock(&self.state);
        st.1 += n;
        if st.0.is_some_and(|t| t.elapsed() < FAILURE_WARN_EVERY) {
            return;
        }
        match self.what {
            Warned::Failed => tracing::warn!(
                failures = st.1,
                error = %error,
                "the sink failed {}; retrying with backoff",
                crate::output::plural(st.1, "publish", "publishes")
            ),
            Warned::Deferred => tracing::warn!(
                deferred = st.1,
                error = %error,
                "the sink pushed back on {} while it took others; deferred, no attempt counted",
                crate::output::plural(st.1, "event", "events")
            ),
        }
        *st = (Some(std::time::Instant::now()), 0);
    }
}

impl std::fmt::Display for Mode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Mode::Lease => "lease",
            Mode::Tx => "tx",
            Mode::Log => "log",
        })
    }
}
