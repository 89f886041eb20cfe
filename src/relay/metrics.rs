//! The relay's Prometheus metrics (`relay --metrics-addr`): their names, help texts and buckets in
//! one place, the recorder that holds them, and the loop's [`Health`] that `/livez` and `/readyz`
//! read.
//!
//! Counters and histograms are bumped where the typed events are emitted
//! ([`RelayEvent::emit`](super::RelayEvent::emit)), so a log line and its metric never disagree;
//! the backlog gauges are sampled from the database when scraped (see `endpoints`). Without
//! `--metrics-addr` no recorder is installed and every bump is a no-op.
//!
//! Labels are few and fixed: every series carries `sink` (the sink's scheme: http, nats, ...) and
//! `mode` (lease, tx), as global labels, since one process runs one relay. Never an event id, an
//! aggregate id or anything else taken from a row.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

use super::Mode;

pub const CLAIMED: &str = "outboxctl_events_claimed_total";
pub const PUBLISHED: &str = "outboxctl_events_published_total";
pub const RETRIED: &str = "outboxctl_events_retried_total";
pub const DEAD_LETTERED: &str = "outboxctl_events_dead_lettered_total";
pub const RELEASED: &str = "outboxctl_events_released_total";
pub const LEASE_LOST: &str = "outboxctl_events_lease_lost_total";
pub const UNAVAILABLE: &str = "outboxctl_events_unavailable_total";
pub const DEFERRED: &str = "outboxctl_events_deferred_total";
pub const SINK_FAILURES: &str = "outboxctl_sink_failures_total";
pub const PUBLISH_DURATION: &str = "outboxctl_publish_duration_seconds";
pub const BATCH_DURATION: &str = "outboxctl_batch_duration_seconds";
pub const CLAIM_FROM_START_DURATION: &str = "outboxctl_claim_from_start_duration_seconds";
pub const CIRCUIT_OPEN: &str = "outboxctl_sink_circuit_open";
pub const CIRCUIT_OPENED: &str = "outboxctl_sink_circuit_opened_total";
pub const STEP_FAILURES: &str = "outboxctl_step_failures_total";
pub const SETTLES_ABANDONED: &str = "outboxctl_settles_abandoned_total";
pub const TX_ROLLED_BACK: &str = "outboxctl_tx_rolled_back_total";
pub const READY: &str = "outboxctl_backlog_ready";
pub const SCHEDULED: &str = "outboxctl_backlog_scheduled";
pub const RETRYING: &str = "outboxctl_backlog_retrying";
pub const IN_FLIGHT: &str = "outboxctl_backlog_in_flight";
pub const DEAD: &str = "outboxctl_backlog_dead";
pub const OLDEST_PENDING_AGE: &str = "outboxctl_backlog_oldest_pending_age_seconds";
pub const OLDEST_PENDING_LAG: &str = "outboxctl_backlog_oldest_pending_lag_seconds";
pub const BLOCKED_KEYS: &str = "outboxctl_ordering_blocked_keys";
pub const BLOCKED_EVENTS: &str = "outboxctl_ordering_blocked_events";
pub const SAMPLE_ERRORS: &str = "outboxctl_backlog_sample_errors_total";
pub const DATABASE_UP: &str = "outboxctl_database_up";
pub const BUILD_INFO: &str = "outboxctl_build_info";

/// Every metric: name, type, help. The README's table lists the same.
pub const ALL: &[(&str, Kind, &str)] = &[
    (CLAIMED, Kind::Counter, "Events claimed (each claim of a row counts once)."),
    (PUBLISHED, Kind::Counter, "Events published and marked."),
    (RETRIED, Kind::Counter, "Events the sink failed, scheduled for a retry with backoff."),
    (DEAD_LETTERED, Kind::Counter, "Events dead-lettered (permanent failure or attempts exhausted)."),
    (RELEASED, Kind::Counter, "Events claimed and given back untouched (shutdown, lease running out, sink outage)."),
    (LEASE_LOST, Kind::Counter, "Settles that found the row claimed again by another relay (the lease had expired)."),
    (UNAVAILABLE, Kind::Counter, "Events given back because the sink as a whole could not take them (an outage)."),
    (DEFERRED, Kind::Counter, "Events the sink pushed back on (full, rate limited, topic missing) while it took others: scheduled again, no attempt counted."),
    (SINK_FAILURES, Kind::Counter, "Publishes the sink failed (retried or dead-lettered)."),
    (PUBLISH_DURATION, Kind::Histogram, "Time the sink took to publish one batch."),
    (BATCH_DURATION, Kind::Histogram, "Time of one relay step with at least one event: claim, publish, settle."),
    (CLAIM_FROM_START_DURATION, Kind::Histogram, "Time of the claims that start at the beginning of the ready rows instead of after the previous claim (once 20 times the last one's duration has passed): it grows with the dead rows a long-running snapshot keeps from vacuum, which such a claim walks (docs/operations.md)."),
    (CIRCUIT_OPEN, Kind::Gauge, "1 while the sink is in an outage (claims paused, probing), else 0."),
    (CIRCUIT_OPENED, Kind::Counter, "Sink outages begun (the circuit opened)."),
    (STEP_FAILURES, Kind::Counter, "Relay steps that failed on the database (backed off and retried)."),
    (SETTLES_ABANDONED, Kind::Counter, "Published batches whose settle did not go through before their lease ended (re-published later)."),
    (TX_ROLLED_BACK, Kind::Counter, "Tx mode: published batches whose transaction did not commit (re-published later)."),
    (READY, Kind::Gauge, "Pending events due and not leased (sampled from the database when scraped)."),
    (SCHEDULED, Kind::Gauge, "Pending events not due yet and not leased (sampled)."),
    (RETRYING, Kind::Gauge, "Pending events not leased that failed before (a subset of ready and scheduled; sampled)."),
    (IN_FLIGHT, Kind::Gauge, "Pending events leased by a relay (sampled)."),
    (DEAD, Kind::Gauge, "Dead-lettered events (sampled)."),
    (OLDEST_PENDING_AGE, Kind::Gauge, "Age of the oldest pending event by created_at, scheduled ones included, 0 when none (sampled)."),
    (OLDEST_PENDING_LAG, Kind::Gauge, "How late the most overdue pending event is: since it fell due, or first fell due once it failed (by created_at); an event scheduled for later and never tried is not late; 0 when none is (sampled). Alert on this one."),
    (BLOCKED_KEYS, Kind::Gauge, "Ordered keys blocked by a dead-lettered head (outboxctl ordering; sampled)."),
    (BLOCKED_EVENTS, Kind::Gauge, "Pending events of the blocked ordered keys, held back until the head is requeued or skipped (sampled)."),
    (SAMPLE_ERRORS, Kind::Counter, "Backlog samples that failed (the gauges keep their last values)."),
    (DATABASE_UP, Kind::Gauge, "1 when the last backlog sample or readiness check reached the database, else 0."),
    (BUILD_INFO, Kind::Gauge, "Always 1; the version and git commit of this build as labels."),
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
    Histogram,
}

/// Buckets of [`PUBLISH_DURATION`] (seconds): from a local write to a publish timeout.
pub const PUBLISH_BUCKETS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];
/// Buckets of [`BATCH_DURATION`] (seconds): the publish's, plus the claim and settle.
pub const BATCH_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// The values of the `sink` label: the names of the schemes `sink::from_spec` accepts
/// ([`crate::sink::Scheme`]), and `other` for anything else.
pub fn sink_labels() -> impl Iterator<Item = &'static str> {
    crate::sink::Scheme::ALL.into_iter().map(|s| s.name())
}

/// The scheme of a `--sink` spec, for the `sink` label: never the rest of it (hosts, paths and
/// credentials are not labels).
pub fn sink_label(spec: &str) -> &'static str {
    crate::sink::Scheme::of(spec).map_or("other", |s| s.name())
}

/// Installs the process's recorder with the relay's labels, describes every metric and sets
/// `outboxctl_build_info`. Call once, before the relay starts.
pub fn install(sink: &'static str, mode: Mode) -> Result<PrometheusHandle, String> {
    let handle = PrometheusBuilder::new()
        .add_global_label("sink", sink)
        .add_global_label("mode", mode.to_string())
        .set_buckets_for_metric(Matcher::Full(PUBLISH_DURATION.into()), PUBLISH_BUCKETS)
        .and_then(|b| b.set_buckets_for_metric(Matcher::Full(BATCH_DURATION.into()), BATCH_BUCKETS))
        .and_then(|b| {
            b.set_buckets_for_metric(
                Matcher::Full(CLAIM_FROM_START_DURATION.into()),
                BATCH_BUCKETS,
            )
        })
        .map_err(|e| e.to_string())?
        .install_recorder()
        .map_err(|e| e.to_string())?;
    for &(name, kind, help) in ALL {
        match kind {
            Kind::Counter => metrics::describe_counter!(name, help),
            Kind::Gauge => metrics::describe_gauge!(name, help),
            Kind::Histogram => metrics::describe_histogram!(name, help),
        }
    }
    metrics::gauge!(
        BUILD_INFO,
        "version" => env!("CARGO_PKG_VERSION"),
        "commit" => env!("OUTBOXCTL_GIT_COMMIT")
    )
    .set(1.0);
    metrics::gauge!(CIRCUIT_OPEN).set(0.0);
    // Every counter from zero, so rate() sees the first increment.
    for &(name, kind, _) in ALL {
        if kind == Kind::Counter {
            metrics::counter!(name).absolute(0);
        }
    }
    Ok(handle)
}

/// What the daemon loop tells the probes: whether it comes back when it said it would, and
/// whether the sink's circuit is open.
///
/// Before each step and each wait the loop says how long that may take
/// ([`Health::expect_within`]); `/livez` fails once that time plus [`Health::margin`] has passed
/// without the loop coming back. A step is bounded by the lease (no publish outlives it, a
/// broken settle is retried only within it) and the shutdown grace; a wait by the poll interval,
/// the backoff or the heartbeat. The margin covers the statements around them (the heartbeat,
/// LISTEN, the next-due query), each bounded by the connect timeout.
#[derive(Debug)]
pub struct Health {
    started: Instant,
    /// Milliseconds after `started` by which the loop must be back; 0 before the loop starts.
    due_ms: AtomicU64,
    circuit_open: AtomicBool,
    margin: Duration,
}

impl Health {
    pub fn new(margin: Duration) -> Self {
        Self {
            started: Instant::now(),
            due_ms: AtomicU64::new(0),
            circuit_open: AtomicBool::new(false),
            margin,
        }
    }

    /// The margin for a relay with this connect timeout and poll interval: three statements'
    /// worth of connect timeout, plus a poll interval (at most a minute), plus five seconds.
    pub fn margin_for(connect_timeout: Duration, poll_interval: Duration) -> Duration {
        connect_timeout * 3 + poll_interval.min(Duration::from_secs(60)) + Duration::from_secs(5)
    }

    pub fn margin(&self) -> Duration {
        self.margin
    }

    /// The loop is about to do something that takes at most `d`.
    pub fn expect_within(&self, d: Duration) {
        let due = self.started.elapsed() + d + self.margin;
        self.due_ms.store(
            u64::try_from(due.as_millis()).unwrap_or(u64::MAX).max(1),
            Ordering::Relaxed,
        );
    }

    /// `Ok` while the loop is within what it said; else how long it is overdue.
    pub fn live(&self) -> Result<(), Duration> {
        let due = self.due_ms.load(Ordering::Relaxed);
        let now = u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX);
        if due == 0 || now <= due {
            Ok(())
        } else {
            Err(Duration::from_millis(now - due))
        }
    }

    pub fn set_circuit_open(&self, open: bool) {
        self.circuit_open.store(open, Ordering::Relaxed);
    }

    pub fn circuit_open(&self) -> bool {
        self.circuit_open.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sink_labels_are_schemes_only() {
        for (spec, label) in [
            ("stdout", "stdout"),
            ("-", "stdout"),
            ("file:/tmp/x", "file"),
            ("https://user:pw@h/x?y", "https"),
            ("amqp://guest:guest@h:5672/%2f?exchange=x", "amqp"),
            ("nats://h:4222?subject=a.{event_type}", "nats"),
            ("weird", "other"),
        ] {
            assert_eq!(sink_label(spec), label, "{spec}");
        }
    }

    #[test]
    fn every_sink_the_relay_builds_has_its_own_label() {
        // Every scheme `sink::from_spec` builds (its match over `Scheme` is exhaustive): none
        // may fall to "other", and no two share a label.
        let mut seen = std::collections::BTreeSet::new();
        for scheme in crate::sink::Scheme::ALL {
            let spec = crate::sink::Scheme::example(scheme);
            assert_eq!(sink_label(&spec), scheme.name(), "{spec}");
            assert!(seen.insert(scheme.name()), "{scheme:?}");
        }
        assert!(!seen.contains("other"));
    }

    #[test]
    fn livez_follows_what_the_loop_expects() {
        let h = Health::new(Duration::ZERO);
        assert_eq!(h.live(), Ok(()), "not started: live");
        h.expect_within(Duration::from_secs(60));
        assert_eq!(h.live(), Ok(()));
        h.expect_within(Duration::ZERO);
        std::thread::sleep(Duration::from_millis(5));
        assert!(h.live().is_err(), "overdue");
        h.expect_within(Duration::from_secs(1));
        assert_eq!(h.live(), Ok(()), "back");
    }

    #[test]
    fn names_follow_prometheus_conventions() {
        for &(name, kind, help) in ALL {
            assert!(name.starts_with("outboxctl_"), "{name}");
            assert!(!help.is_empty());
            match kind {
                Kind::Counter => assert!(name.ends_with("_total"), "{name}"),
                Kind::Histogram => assert!(name.ends_with("_seconds"), "{name}"),
                Kind::Gauge => assert!(!name.ends_with("_total"), "{name}"),
            }
        }
        let mut names: Vec<_> = ALL.iter().map(|m| m.0).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }

    #[test]
    fn margin_is_derived_from_the_settings() {
        assert_eq!(
            Health::margin_for(Duration::from_secs(10), Duration::from_secs(5)),
            Duration::from_secs(40)
        );
        assert_eq!(
            Health::margin_for(Duration::from_secs(1), Duration::from_secs(600)),
            Duration::from_secs(68)
        );
    }
}
