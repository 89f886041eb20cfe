//! `replay`'s sending: published events read in batches by id ([`crate::db::replay`]) and handed
//! to the relay's sinks again, changing nothing in the outbox.
//!
//! Order: a batch is handed over in *waves*, each a run of consecutive events (by id) with no two
//! of one key `(tenant_id, aggregate_type, aggregate_id)` (a sink that keeps each key's order
//! across a batch, Kafka, takes the batch as one wave), and a wave starts only when the one
//! before it is all sent. Within a wave publishes run `--concurrency` at a time; what the sink
//! failed is sent again, with every event of the wave after it of the same key (even one the
//! sink took), so a key's events arrive, for the last time, in id order.
//!
//! Failures are the sink's to judge, as for the relay ([`batch_verdict`]): whatever it fails for
//! now (an outage, one event's retryable error) is sent again after a backoff, until
//! `retry_for` has passed since the wave first failed; an event it rejects for good, a closed or
//! stalled local consumer, and a shutdown stop the run at once. A stop names the least id not
//! sent: resuming from it (`--from-id`) sends everything after the stop, some events twice at
//! most (a wave's events after the first one not sent).

use std::collections::HashSet;
use std::time::{Duration, Instant};

use sqlx::PgConnection;
use tokio_util::sync::CancellationToken;

use super::Backoff;
use crate::db::replay::{Marking, Range};
use crate::db::{self, Pin};
use crate::event::Event;
use crate::sink::{batch_verdict, Outcome, PublishCtl, Sink, SinkError};

/// The headers every replayed event carries (added to the row's own, replacing those of the same
/// name): [`REPLAY_HEADER`] = `true`, and [`REPLAY_ID_HEADER`] = the replay's id.
pub const REPLAY_HEADER: &str = "outbox-replay";
/// The replay's id (its audit row's id) on every event it sends.
pub const REPLAY_ID_HEADER: &str = "outbox-replay-id";
/// With fresh keys: the event's own idempotency key.
pub const ORIGINAL_KEY_HEADER: &str = "outbox-replay-original-key";

/// The idempotency key an event is sent with under `--fresh-keys`: derived from its own key and
/// the replay's id, so the same replay (and its resumption, `--replay-id`) sends each event with
/// the same new key, and another replay with another.
pub fn fresh_key(original: &str, replay_id: i64) -> String {
    format!("{original}:replay:{replay_id}")
}

/// The headers added to each replayed event of replay `replay_id`.
pub fn marker_headers(replay_id: i64) -> serde_json::Value {
    serde_json::json!({ REPLAY_HEADER: "true", REPLAY_ID_HEADER: replay_id.to_string() })
}

/// How a replay sends, validated.
#[derive(Debug, Clone)]
pub struct ReplayConfig {
    /// Rows per read.
    pub batch_size: u32,
    /// Bytes per read (payload and headers as stored).
    pub batch_bytes: u64,
    /// Publishes in flight at once within a wave.
    pub concurrency: u32,
    pub publish_timeout: Duration,
    pub backoff: Backoff,
    /// How long a wave may keep failing before the run stops.
    pub retry_for: Duration,
    /// Events per second at most, or as fast as the sink takes them.
    pub rate: Option<f64>,
    /// The replay's id (`outbox-replay-id`, and the fresh keys').
    pub replay_id: i64,
    pub fresh_keys: bool,
}

/// Why a replay stopped before its end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stop {
    /// SIGINT or SIGTERM.
    Interrupted,
    /// The sink kept failing for `retry_for` (`cause`: its first error of the last try).
    Outage { cause: String },
    /// The sink rejected event `id` for good (e.g. HTTP 400 or 422).
    Rejected { id: i64, cause: String },
    /// A local consumer (stdout, a file) went away or stalled.
    Closed { cause: String },
}

impl Stop {
    /// The word for the audit row and `--json`.
    pub fn as_str(&self) -> &'static str {
        match self {
            Stop::Interrupted => "interrupted",
            Stop::Outage { .. } => "outage",
            Stop::Rejected { .. } => "rejected",
            Stop::Closed { .. } => "closed",
        }
    }
}

/// How a run ended: what it sent, and where it stopped when it did not finish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ended {
    /// Events the sink took (each once, however often it was sent).
    pub sent: u64,
    /// Why it stopped and the least id not sent (resume with `--from-id` that id).
    pub stopped: Option<(Stop, i64)>,
}

/// Something the run says in a log line (never a payload byte).
#[derive(Debug, Clone, PartialEq)]
pub enum ReplayEvent {
    /// The sink failed `events` of a wave; they are sent again after `retry_in`.
    Retrying {
        events: usize,
        error: String,
        retry_in: Duration,
        failing_for: Duration,
    },
    /// A wave went through after failing for `after`.
    Recovered { after: Duration },
}

impl ReplayEvent {
    pub fn emit(&self) {
        match self {
            ReplayEvent::Retrying {
                events,
                error,
                retry_in,
                failing_for,
            } => tracing::warn!(
                events,
                error = %error,
                retry_in = %crate::output::human_duration(*retry_in),
                failing_for = %crate::output::human_duration(*failing_for),
                "replay: the sink failed events; sending them again"
            ),
            ReplayEvent::Recovered { after } => tracing::info!(
                after = %crate::output::human_duration(*after),
                "replay: the sink takes events again"
            ),
        }
    }
}

/// The key whose order a replay keeps.
type Key = (uuid::Uuid, String, String);

fn key_of(e: &Event) -> Key {
    (
        e.tenant_id,
        e.aggregate_type.clone(),
        e.aggregate_id.clone(),
    )
}

/// Splits `events` (ascending ids) into waves of at most `max` consecutive events; with
/// `distinct_keys`, a wave also ends before an event whose key it already holds.
pub fn waves(events: Vec<Event>, distinct_keys: bool, max: usize) -> Vec<Vec<Event>> {
    let max = max.max(1);
    let mut out = Vec::new();
    let mut wave: Vec<Event> = Vec::new();
    let mut keys: HashSet<Key> = HashSet::new();
    for e in events {
        let k = key_of(&e);
        if wave.len() >= max || (distinct_keys && keys.contains(&k)) {
            out.push(std::mem::take(&mut wave));
            keys.clear();
        }
        keys.insert(k);
        wave.push(e);
    }
    if !wave.is_empty() {
        out.push(wave);
    }
    out
}

/// At most `per_sec` events per second on average: the n-th event handed over (from 0) not
/// before `start + n / per_sec`.
struct Pacer {
    per_sec: f64,
    start: tokio::time::Instant,
    handed: u64,
}

impl Pacer {
    /// When the next `n` events may go, and counts them as handed over.
    fn next(&mut self, n: usize) -> tokio::time::Instant {
        let due = self.start + Duration::from_secs_f64(self.handed as f64 / self.per_sec);
        self.handed += n as u64;
        due
    }
}

/// Sends the waves of one run.
struct Sender<'a> {
    sink: &'a dyn Sink,
    cfg: &'a ReplayConfig,
    shutdown: &'a CancellationToken,
    pacer: Option<Pacer>,
    sent: u64,
    on_sent: &'a (dyn Fn(u64, i64) + Sync),
}

impl Sender<'_> {
    /// Sends one wave until the sink took all of it, or returns why it stopped and the least id
    /// not sent.
    async fn wave(&mut self, wave: Vec<Event>) -> Result<(), (Stop, i64)> {
        let mut pending = wave;
        let mut attempt = 0u32;
        let mut failing_since: Option<Instant> = None;
        let last = pending.last().map_or(0, |e| e.id);
        loop {
            let first = pending[0].id;
            if let Some(p) = &mut self.pacer {
                let due = p.next(pending.len());
                tokio::select! {
                    _ = tokio::time::sleep_until(due) => {}
                    _ = self.shutdown.cancelled() => return Err((Stop::Interrupted, first)),
                }
            }
            if self.shutdown.is_cancelled() {
                return Err((Stop::Interrupted, first));
            }
            let ctl = PublishCtl {
                concurrency: self.cfg.concurrency as usize,
                timeout: self.cfg.publish_timeout,
                shutdown: self.shutdown.clone(),
                shutdown_grace: self.cfg.publish_timeout,
                start_by: None,
                handed_over: Default::default(),
            };
            let mut outcomes = self.sink.publish(&pending, &ctl).await;
            let _ = batch_verdict(&mut outcomes);
            let (mut failed_keys, mut again) = (HashSet::new(), Vec::new());
            let (mut stop, mut cause, mut retry_after) = (None, None, None);
            let mut took = 0u64;
            for (e, o) in pending.into_iter().zip(outcomes) {
                let key = key_of(&e);
                match o {
                    Outcome::Published if !failed_keys.contains(&key) => {
                        took += 1;
                        continue;
                    }
                    Outcome::Published | Outcome::NotStarted | Outcome::Abandoned => {}
                    Outcome::Failed(SinkError::Permanent(m)) => {
                        stop.get_or_insert(Stop::Rejected { id: e.id, cause: m });
                    }
                    Outcome::Failed(err @ (SinkError::Closed(_) | SinkError::Stalled(_))) => {
                        stop.get_or_insert(Stop::Closed {
                            cause: err.to_string(),
                        });
                    }
                    Outcome::Failed(err) => {
                        if let SinkError::Retryable {
                            retry_after: Some(r),
                            ..
                        }
                        | SinkError::Unavailable {
                            retry_after: Some(r),
                            ..
                        }
                        | SinkError::Backpressure {
                            retry_after: Some(r),
                            ..
                        } = &err
                        {
                            retry_after = Some(retry_after.map_or(*r, |a: Duration| a.max(*r)));
                        }
                        cause.get_or_insert_with(|| err.to_string());
                    }
                }
                failed_keys.insert(key);
                again.push(e);
            }
            self.sent += took;
            let at = again.first().map(|e| e.id);
            // Everything below the first event to send again (or the whole wave) is taken.
            (self.on_sent)(took, at.unwrap_or(last + 1));
            let Some(at) = at else {
                if let Some(since) = failing_since {
                    ReplayEvent::Recovered {
                        after: since.elapsed(),
                    }
                    .emit();
                }
                return Ok(());
            };
            if let Some(stop) = stop {
                return Err((stop, at));
            }
            if self.shutdown.is_cancelled() {
                return Err((Stop::Interrupted, at));
            }
            let cause = cause.unwrap_or_else(|| "the sink took no event".to_owned());
            let since = *failing_since.get_or_insert_with(Instant::now);
            let failing_for = since.elapsed();
            if failing_for >= self.cfg.retry_for {
                return Err((Stop::Outage { cause }, at));
            }
            attempt += 1;
            let retry_in = self
                .cfg
                .backoff
                .delay(attempt)
                .max(retry_after.unwrap_or_default())
                .min(self.cfg.retry_for - failing_for);
            ReplayEvent::Retrying {
                events: again.len(),
                error: cause,
                retry_in,
                failing_for,
            }
            .emit();
            tokio::select! {
                _ = tokio::time::sleep(retry_in) => {}
                _ = self.shutdown.cancelled() => return Err((Stop::Interrupted, at)),
            }
            pending = again;
        }
    }
}

/// Sends the events of `range`, batch after batch, to `sink`, marked with `marking`; calls
/// `on_sent` with each count the sink took (for a progress bar) and the id to resume from should
/// the run end now (every event of the range below it was taken). Returns how the run ended; an
/// error only when the database failed (its context names the id to resume from).
#[allow(clippy::too_many_arguments)]
pub async fn run(
    conn: &mut PgConnection,
    pin: &Pin,
    sink: &dyn Sink,
    cfg: &ReplayConfig,
    mut range: Range<'_>,
    marking: &Marking<'_>,
    shutdown: &CancellationToken,
    on_sent: &(dyn Fn(u64, i64) + Sync),
) -> anyhow::Result<Ended> {
    use anyhow::Context;
    let wave_max = match cfg.rate {
        // At most one second's worth handed over at once.
        Some(r) => (r.floor() as usize).clamp(1, cfg.batch_size as usize),
        None => cfg.batch_size as usize,
    };
    let mut sender = Sender {
        sink,
        cfg,
        shutdown,
        pacer: cfg.rate.map(|per_sec| Pacer {
            per_sec,
            start: tokio::time::Instant::now(),
            handed: 0,
        }),
        sent: 0,
        on_sent,
    };
    let rows = i64::from(cfg.batch_size);
    let bytes = i64::try_from(cfg.batch_bytes).unwrap_or(i64::MAX);
    loop {
        if shutdown.is_cancelled() {
            return Ok(Ended {
                sent: sender.sent,
                stopped: Some((Stop::Interrupted, range.after + 1)),
            });
        }
        let mut batch = pin
            .run(conn, async |c| {
                db::replay::events(c, &range, rows, bytes, marking).await
            })
            .await
            .with_context(|| {
                format!(
                    "replay stopped reading the events after id {}: resume with --from-id {}",
                    range.after,
                    range.after + 1
                )
            })?;
        let Some(last) = batch.last().map(|e| e.id) else {
            return Ok(Ended {
                sent: sender.sent,
                stopped: None,
            });
        };
        if cfg.fresh_keys {
            for e in &mut batch {
                e.idempotency_key = fresh_key(&e.idempotency_key, cfg.replay_id);
            }
        }
        for wave in waves(batch, !sink.keeps_key_order(), wave_max) {
            if let Err(stopped) = sender.wave(wave).await {
                return Ok(Ended {
                    sent: sender.sent,
                    stopped: Some(stopped),
                });
            }
        }
        range.after = last;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(id: i64, aggregate_id: &str) -> Event {
        Event {
            id,
            aggregate_id: aggregate_id.into(),
            idempotency_key: format!("k-{id}"),
            ..Event::sample()
        }
    }

    fn ids(waves: &[Vec<Event>]) -> Vec<Vec<i64>> {
        waves
            .iter()
            .map(|w| w.iter().map(|e| e.id).collect())
            .collect()
    }

    #[test]
    fn a_wave_holds_each_key_once_and_keeps_id_order() {
        let evs = || {
            vec![
                event(1, "a"),
                event(2, "b"),
                event(3, "a"),
                event(4, "c"),
                event(5, "c"),
                event(6, "d"),
            ]
        };
        assert_eq!(
            ids(&waves(evs(), true, 100)),
            vec![vec![1, 2], vec![3, 4], vec![5, 6]]
        );
        assert_eq!(ids(&waves(evs(), false, 100)), vec![vec![1, 2, 3, 4, 5, 6]]);
        assert_eq!(
            ids(&waves(evs(), false, 4)),
            vec![vec![1, 2, 3, 4], vec![5, 6]]
        );
        assert_eq!(ids(&waves(evs(), true, 0)).len(), 6, "at least one a wave");
        assert!(waves(Vec::new(), true, 10).is_empty());
    }

    #[test]
    fn fresh_keys_are_derived_from_the_key_and_the_replay() {
        assert_eq!(
            fresh_key("order.placed:o-1", 42),
            "order.placed:o-1:replay:42"
        );
        assert_ne!(fresh_key("k", 1), fresh_key("k", 2));
        assert_eq!(
            marker_headers(7),
            serde_json::json!({"outbox-replay": "true", "outbox-replay-id": "7"})
        );
    }

    #[test]
    fn the_pacer_spreads_events_at_the_rate() {
        let start = tokio::time::Instant::now();
        let mut p = Pacer {
            per_sec: 4.0,
            start,
            handed: 0,
        };
        assert_eq!(p.next(4), start);
        assert_eq!(p.next(2), start + Duration::from_secs(1));
        assert_eq!(p.next(1), start + Duration::from_millis(1500));
    }
}
