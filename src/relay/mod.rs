//! The relay: the single step ([`step`]: claim → publish → settle, returning a report) kept apart
//! from the loop that decides when to call it ([`daemon`] and [`once`]).
//!
//! Two modes:
//! - **lease**: the claim commits a lease (`locked_until`, `claim_token`); the publish runs with no
//!   transaction open; a fenced, set-based settle follows. For remote or slow sinks.
//! - **tx**: claim-and-mark in one transaction that stays open for the publish and commits after
//!   it (row locks keep other relays off; a crash rolls back). One write per event instead of two;
//!   for sinks that publish a whole batch within one `--publish-timeout` (local ones, Redis,
//!   Kafka: `Sink::batch_within_one_timeout`).
//!
//! - **log**: while `outboxctl log enable` is on, one relay reads the outbox as a log, batch by
//!   batch between two transaction-id snapshots, and records its position once per page
//!   ([`log`]); failed and delayed events go to a retry set. No write per published event.
//!
//! [`replay`] sends published events again through the same sinks, changing nothing.
//!
//! The loops may keep several steps in flight at once ([`pipeline`], `--pipeline-depth`): the next
//! batch is claimed while the previous one publishes.

pub mod cursor;
pub mod daemon;
pub mod endpoints;
pub mod events;
pub mod log;
pub mod metrics;
pub mod ordering;
pub mod pipeline;
pub mod replay;
pub mod step;

use std::time::Duration;

use rand::Rng;
use serde::Serialize;

pub use events::RelayEvent;
pub use step::{ClaimNotice, Relay, RelayConfig, StepError, MAX_PIPELINE_DEPTH, PIPELINE_DEPTH};

/// `--batch-bytes` by default: 16 MiB.
pub const DEFAULT_BATCH_BYTES: u64 = 16 << 20;

/// How claims are settled: `lease` (a committed lease, then a fenced settle) or `tx` (claim,
/// publish and mark in one transaction); see the module docs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Lease,
    Tx,
    Log,
}

impl Mode {
    /// Every mode, e.g. for the metrics reference's `mode` label.
    pub const ALL: &[Mode] = &[Mode::Lease, Mode::Tx, Mode::Log];
}

/// Capped exponential backoff with jitter: attempt n waits `base * 2^(n-1)`, capped at `max`,
/// then scaled by a random factor in [0.5, 1.0] so failing relays do not retry in lockstep.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Backoff {
    /// The uncapped-by-jitter ceiling for `attempt` (1-based).
    pub fn ceiling(&self, attempt: u32) -> Duration {
        let exp = attempt.saturating_sub(1).min(32);
        self.base.saturating_mul(1u32 << exp.min(31)).min(self.max)
    }

    pub fn delay(&self, attempt: u32) -> Duration {
        self.ceiling(attempt)
            .mul_f64(rand::thread_rng().gen_range(0.5..=1.0))
    }
}

/// What one step, or a whole run, did.
#[derive(Debug, Default, Clone, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Report {
    /// Rows claimed.
    pub claimed: u64,
    /// Published and marked.
    pub published: u64,
    /// Failed and scheduled for a retry.
    pub retried: u64,
    /// Dead-lettered (permanent failure or attempts exhausted).
    pub dead_lettered: u64,
    /// Claimed but given back untouched (attempt count restored, no error stored): at shutdown,
    /// when too little lease was left to start their publish, or because the sink could not take
    /// them (those are also counted in `unavailable`).
    pub released: u64,
    /// Settles that found the row owned by a newer claim (our lease had expired): nothing changed.
    pub lease_lost: u64,
    /// Pushed back on by the sink (a full queue, a rate limit, a missing topic: see
    /// [`crate::sink::SinkError::Backpressure`]) while it took other events of the batch:
    /// scheduled again later with no attempt counted.
    pub deferred: u64,
    /// Publish attempts the sink failed (retried + dead-lettered, before fencing).
    pub sink_failures: u64,
    /// Given back untouched because the sink as a whole could not take them (an outage, a closed
    /// or stalled consumer): not the events' fault, so no attempt was counted.
    pub unavailable: u64,
    /// Why the sink took nothing, when that was the sink's state (`Unavailable`, `Closed`,
    /// `Stalled`): the loops pause, or stop, on it. The latest one of a run.
    #[serde(skip)]
    pub sink_down: Option<crate::sink::SinkError>,
    /// What a step saw that deserves a log line (dead letters, lost leases), for the loop to
    /// emit: the step itself never logs. Not summed by [`Report::add`].
    #[serde(skip)]
    pub events: Vec<RelayEvent>,
    /// A step's claim was ended by `--batch-bytes` with more rows ready: a short batch that does
    /// not mean the backlog is drained. Not part of the summary.
    #[serde(skip)]
    pub budget_reached: bool,
    /// How long the sink took to publish the step's batch (none when nothing was claimed), for
    /// the publish-duration histogram. Summed by [`Report::add`]. Not part of the summary.
    #[serde(skip)]
    pub publish_elapsed: Option<std::time::Duration>,
}

impl Report {
    /// Adds `o`'s counts (not its events).
    pub fn add(&mut self, o: &Report) {
        self.claimed += o.claimed;
        self.published += o.published;
        self.retried += o.retried;
        self.dead_lettered += o.dead_lettered;
        self.deferred += o.deferred;
        self.released += o.released;
        self.lease_lost += o.lease_lost;
        self.sink_failures += o.sink_failures;
        self.unavailable += o.unavailable;
        if o.sink_down.is_some() {
            self.sink_down.clone_from(&o.sink_down);
        }
        self.budget_reached = o.budget_reached;
        if let Some(p) = o.publish_elapsed {
            self.publish_elapsed = Some(self.publish_elapsed.unwrap_or_default() + p);
        }
    }
}

/// Keeps `last_error` short and single-purpose: at most 1000 characters.
pub fn truncate_error(msg: &str) -> String {
    const MAX: usize = 1000;
    if msg.len() <= MAX {
        return msg.to_owned();
    }
    let mut end = MAX;
    while !msg.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &msg[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_caps_and_jitters() {
        let b = Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(60),
        };
        assert_eq!(b.ceiling(1), Duration::from_secs(1));
        assert_eq!(b.ceiling(2), Duration::from_secs(2));
        assert_eq!(b.ceiling(5), Duration::from_secs(16));
        assert_eq!(b.ceiling(7), Duration::from_secs(60));
        assert_eq!(b.ceiling(1000), Duration::from_secs(60));
        for attempt in 1..20 {
            let d = b.delay(attempt);
            assert!(
                d <= b.ceiling(attempt) && d >= b.ceiling(attempt) / 2,
                "{attempt}: {d:?}"
            );
        }
        let spread: std::collections::HashSet<_> =
            (0..50).map(|_| b.delay(3).as_millis()).collect();
        assert!(spread.len() > 5, "jitter varies the delay");
    }

    #[test]
    fn errors_are_truncated_on_char_boundaries() {
        assert_eq!(truncate_error("short"), "short");
        let long = "é".repeat(800);
        let t = truncate_error(&long);
        assert!(t.len() <= 1004 && t.ends_with('…'));
    }
}
