//! Sinks: where the relay publishes. One small trait; each failure says whose fault it is: the
//! event's (`Retryable`: counted as an attempt and retried with backoff; `Permanent`:
//! dead-lettered at once) or the sink's as a whole (`Unavailable`, `Closed`, `Stalled`: the event
//! was not taken by its consumer, so it is given back untouched, with no attempt counted and no
//! error stored). [`batch_verdict`] decides, per batch, whether `Unavailable` failures are an
//! outage or per-event failures after all.

pub mod amqp;
pub mod file;
pub mod headers;
pub mod http;
pub mod kafka;
pub mod local;
pub mod memory;
pub mod nats;
pub mod redis;
pub mod stdout;
pub mod template;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio_util::sync::CancellationToken;

use crate::exit::CodedError;

/// An event as published (see [`crate::event`]).
pub use crate::event::Event;

/// Why a publish failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SinkError {
    /// Worth retrying later; `retry_after` is the peer's own hint (HTTP Retry-After).
    #[error("{message}")]
    Retryable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// Will never succeed as is (e.g. HTTP 400/404/410/413/422): dead-letter now.
    #[error("{0}")]
    Permanent(String),
    /// The sink as a whole cannot take events now, through no fault of this event: connection
    /// refused or reset, DNS failure, connect or publish timeout, broker down, disk full, HTTP
    /// 429/502/503/504. When a whole batch fails so (see [`batch_verdict`]) it is an outage: the
    /// rows are given back untouched and the daemon pauses claiming (circuit breaker). In a batch
    /// where the sink took other events it counts as [`SinkError::Retryable`].
    #[error("{message}")]
    Unavailable {
        message: String,
        retry_after: Option<Duration>,
    },
    /// The consumer went away for good (a closed stdout or FIFO: EPIPE): this event was not taken
    /// and no later one will be. Given back untouched; the run stops cleanly.
    #[error("{0}")]
    Closed(String),
    /// A local write (stdout, file) did not finish within `--publish-timeout`: the consumer reads
    /// slower than the claim allows. A blocked write cannot be cancelled, so the sink takes no
    /// more events: given back (tx mode: rolled back) untouched; the run stops with an error.
    #[error("{0}")]
    Stalled(String),
}

impl SinkError {
    pub fn retryable(message: impl Into<String>) -> Self {
        Self::Retryable {
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::Unavailable {
            message: message.into(),
            retry_after: None,
        }
    }

    /// True for failures that are the sink's state, not the event's fault.
    pub fn is_sink_state(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. } | Self::Closed(_) | Self::Stalled(_)
        )
    }
}

/// Decides whose fault a batch's `Unavailable` failures are, and returns the sink's state when
/// it is the sink's:
/// - any `Closed` or `Stalled` outcome: that error (those rows are given back, the run stops);
/// - nothing published, no per-event `Retryable` failure and at least one `Unavailable`: an
///   outage; returns the first such error, and the `Unavailable` rows are given back untouched
///   (`Permanent` ones are still dead-lettered: the sink answered for them);
/// - otherwise the sink took or judged other events of the batch, so it is up: each
///   `Unavailable` becomes a `Retryable` failure of its own event (e.g. one 503 among 200s).
pub fn batch_verdict(outcomes: &mut [Outcome]) -> Option<SinkError> {
    let stop = outcomes.iter().find_map(|o| match o {
        Outcome::Failed(e @ (SinkError::Closed(_) | SinkError::Stalled(_))) => Some(e.clone()),
        _ => None,
    });
    if stop.is_some() {
        return stop;
    }
    let sink_up = outcomes.iter().any(|o| {
        matches!(
            o,
            Outcome::Published | Outcome::Failed(SinkError::Retryable { .. })
        )
    });
    if !sink_up {
        return outcomes.iter().find_map(|o| match o {
            Outcome::Failed(e @ SinkError::Unavailable { .. }) => Some(e.clone()),
            _ => None,
        });
    }
    for o in outcomes.iter_mut() {
        if let Outcome::Failed(SinkError::Unavailable {
            message,
            retry_after,
        }) = o
        {
            *o = Outcome::Failed(SinkError::Retryable {
                message: std::mem::take(message),
                retry_after: *retry_after,
            });
        }
    }
    None
}

/// What happened to one event of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    Published,
    Failed(SinkError),
    /// Shutdown came before its publish started: give the row back.
    NotStarted,
    /// Shutdown came and its publish did not finish within the grace period.
    Abandoned,
}

/// How a batch is to be published.
#[derive(Debug, Clone)]
pub struct PublishCtl {
    pub concurrency: usize,
    pub timeout: Duration,
    pub shutdown: CancellationToken,
    pub shutdown_grace: Duration,
    /// Start no publish after this instant: one started later could outlive the claim (the
    /// lease, or the tx-mode transaction's idle timeout). Such events are `NotStarted`.
    pub start_by: Option<tokio::time::Instant>,
}

/// A destination for events.
#[async_trait::async_trait]
pub trait Sink: Send + Sync {
    /// Publishes a batch; returns one outcome per event, in the same order. Must not return
    /// before every started publish has finished, failed, timed out or been abandoned.
    async fn publish(&self, events: &[Event], ctl: &PublishCtl) -> Vec<Outcome>;

    /// Whether a whole batch is published within one `--publish-timeout`, however slow the sink:
    /// a local write (stdout, file, null), one pipelined round trip (Redis), one producer flush
    /// awaited against one deadline (Kafka). Not a publish per event with `--concurrency` in
    /// flight (NATS, RabbitMQ, HTTP): a slow sink stretches that batch to the lease. `--mode
    /// auto` picks `tx` for these sinks, so the claim's transaction stays open for at most one
    /// publish timeout per batch (measured: bench/tx-slow.sh, README "Broker sinks").
    fn batch_within_one_timeout(&self) -> bool {
        false
    }

    /// Whether events of one key arrive in the order they are handed over, across batches (Kafka:
    /// a key's one partition, an idempotent producer). The relay then never runs two claims at
    /// once: their rows interleave (each skips what the other has locked so far) and the later
    /// claim can return first, so one relay's events of a key would arrive out of id order (seen:
    /// id 601 after 991 at depth 2). Batches are still published two at a time, each handed over
    /// whole before the next claim returns.
    fn keeps_key_order(&self) -> bool {
        false
    }

    /// Batches worth keeping in flight at once when `--pipeline-depth` is not given: 2 where a
    /// publish leaves the database idle long enough for the next claim (a broker or HTTP round
    /// trip, a Kafka batch's delivery reports); 1 for a local write, which leaves nothing to
    /// overlap (two relays to the null sink, tx mode: 0.89x at depth 2,
    /// bench/results/2026-12-01-1916-ab-drain-depth.log).
    fn default_pipeline_depth(&self) -> u32 {
        2
    }

    /// A description for logs; never holds a secret.
    fn describe(&self) -> String;
}

/// Publishes events one by one with `publish_one`, at most `ctl.concurrency` at a time, each
/// bounded by `ctl.timeout` (a timeout is `Unavailable`: see [`batch_verdict`]). Events not started when shutdown begins, or by `ctl.start_by`, are
/// `NotStarted`; started ones get `ctl.shutdown_grace` more after a shutdown before they are
/// `Abandoned`.
pub async fn publish_each<'a, F, Fut>(
    events: &'a [Event],
    ctl: &PublishCtl,
    publish_one: F,
) -> Vec<Outcome>
where
    F: Fn(&'a Event) -> Fut,
    Fut: std::future::Future<Output = Result<(), SinkError>>,
{
    let timeout_msg = format!(
        "publish timed out after {}",
        humantime::format_duration(ctl.timeout)
    );
    let mut jobs = Vec::with_capacity(events.len());
    for (i, e) in events.iter().enumerate() {
        let fut = publish_one(e);
        let timeout_msg = timeout_msg.clone();
        jobs.push(async move {
            let too_late = ctl
                .start_by
                .is_some_and(|t| tokio::time::Instant::now() >= t);
            if ctl.shutdown.is_cancelled() || too_late {
                return (i, Outcome::NotStarted);
            }
            let grace = async {
                ctl.shutdown.cancelled().await;
                tokio::time::sleep(ctl.shutdown_grace).await;
            };
            let outcome = tokio::select! {
                r = tokio::time::timeout(ctl.timeout, fut) => match r {
                    Ok(Ok(())) => Outcome::Published,
                    Ok(Err(e)) => Outcome::Failed(e),
                    Err(_) => Outcome::Failed(SinkError::unavailable(timeout_msg)),
                },
                _ = grace => Outcome::Abandoned,
            };
            (i, outcome)
        });
    }
    let mut outcomes: Vec<(usize, Outcome)> = futures::stream::iter(jobs)
        .buffer_unordered(ctl.concurrency.max(1))
        .collect()
        .await;
    outcomes.sort_by_key(|(i, _)| *i);
    outcomes.into_iter().map(|(_, o)| o).collect()
}

/// Appends the event's JSON document (one line's worth, without the newline) to `out`:
/// `{"id","type","aggregate_type","aggregate_id","tenant_id","idempotency_key","created_at",
/// "attempt","headers","payload"}`. Payload and headers are the stored JSON text, copied as is.
pub fn write_envelope(e: &Event, out: &mut Vec<u8>) {
    use std::io::Write;
    let s = |out: &mut Vec<u8>, v: &str| serde_json::to_writer(out, v).expect("writing to a Vec");
    out.extend_from_slice(b"{\"id\":");
    let _ = write!(out, "{}", e.id);
    out.extend_from_slice(b",\"type\":");
    s(out, &e.event_type);
    out.extend_from_slice(b",\"aggregate_type\":");
    s(out, &e.aggregate_type);
    out.extend_from_slice(b",\"aggregate_id\":");
    s(out, &e.aggregate_id);
    let _ = write!(
        out,
        ",\"tenant_id\":\"{}\",\"idempotency_key\":",
        e.tenant_id
    );
    s(out, &e.idempotency_key);
    let _ = write!(
        out,
        ",\"created_at\":\"{}\",\"attempt\":{},\"headers\":",
        e.created_at
            .to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        e.attempt_count
    );
    out.extend_from_slice(e.headers.as_bytes());
    out.extend_from_slice(b",\"payload\":");
    out.extend_from_slice(e.payload.as_bytes());
    out.push(b'}');
}

/// Options the sinks take from the relay's flags.
#[derive(Debug, Clone, Default)]
pub struct SinkOptions {
    pub http_headers: Vec<String>,
    /// The signing secrets' text (from the env var named by --signing-secret-env).
    pub signing_secrets: Option<String>,
    pub timeout: Duration,
    /// `--kafka-property` arguments (`KEY=VALUE`), for the Kafka sink.
    pub kafka_properties: Vec<String>,
    /// Test-only (hidden `OUTBOXCTL_TEST_KAFKA_FATAL_ERROR`): the Kafka publish call in which to
    /// raise a fabricated fatal producer error.
    pub kafka_test_fatal_error_at: Option<u64>,
}

/// Builds the sink named by `--sink`: `stdout`, `null`, `file:PATH`, `http(s)://...`,
/// `nats://...` (JetStream), `redis://...` (Streams), `amqp://...` (RabbitMQ), `kafka://...`.
pub async fn from_spec(spec: &str, opts: &SinkOptions) -> Result<Arc<dyn Sink>, CodedError> {
    let spec = spec.trim();
    if spec == "stdout" || spec == "-" {
        return Ok(Arc::new(stdout::StdoutSink::new()));
    }
    if spec == "null" {
        return Ok(Arc::new(memory::NullSink));
    }
    if let Some(path) = spec.strip_prefix("file:") {
        if path.is_empty() {
            return Err(CodedError::usage(
                "invalid --sink `file:`: give a path, e.g. file:/var/log/outbox.jsonl",
            ));
        }
        return Ok(Arc::new(file::FileSink::open(path).map_err(|e| {
            CodedError::usage(format!(
                "invalid --sink: cannot open {path} for appending: {e}"
            ))
        })?));
    }
    if spec.starts_with("http://") || spec.starts_with("https://") {
        return Ok(Arc::new(http::HttpSink::new(spec, opts)?));
    }
    if spec.starts_with("amqp://") {
        return Ok(Arc::new(amqp::AmqpSink::new(spec)?));
    }
    if spec.starts_with("redis://") {
        return Ok(Arc::new(redis::RedisSink::new(spec)?));
    }
    if spec.starts_with("kafka://") {
        return Ok(Arc::new(
            kafka::KafkaSink::new(spec, &opts.kafka_properties, opts.timeout)?
                .with_test_fatal_error_at(opts.kafka_test_fatal_error_at),
        ));
    }
    if spec.starts_with("nats://") {
        return Ok(Arc::new(nats::NatsSink::connect(spec, opts.timeout).await?));
    }
    Err(CodedError::usage(format!(
        "invalid --sink `{}`: use stdout, null, file:PATH, http(s)://URL, nats://HOST:PORT?subject=... redis://HOST:PORT?stream=..., amqp://USER:PASS@HOST:PORT/VHOST or kafka://HOST:PORT[,HOST:PORT]?topic=...",
        crate::config::redact_url(spec)
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn down() -> Outcome {
        Outcome::Failed(SinkError::unavailable("HTTP 503"))
    }

    #[test]
    fn a_batch_is_an_outage_only_when_the_sink_took_and_judged_nothing() {
        let perm = Outcome::Failed(SinkError::Permanent("HTTP 422".into()));
        let retry = Outcome::Failed(SinkError::retryable("HTTP 500"));
        // Every event unavailable (some not started, one rejected on its own): an outage.
        let mut all = vec![down(), down(), Outcome::NotStarted, perm.clone()];
        assert_eq!(
            batch_verdict(&mut all),
            Some(SinkError::unavailable("HTTP 503"))
        );
        assert_eq!(all[0], down(), "left to be given back");
        assert_eq!(all[3], perm);
        // One published, or one per-event failure: the sink is up; each 503 is its event's retry.
        for other in [Outcome::Published, retry] {
            let mut mixed = vec![down(), other.clone()];
            assert_eq!(batch_verdict(&mut mixed), None);
            assert_eq!(
                mixed,
                vec![Outcome::Failed(SinkError::retryable("HTTP 503")), other]
            );
        }
        // Nothing unavailable: nothing to decide.
        let mut fine = vec![Outcome::Published, Outcome::NotStarted];
        assert_eq!(batch_verdict(&mut fine), None);
        // A closed or stalled consumer wins over everything.
        let closed = SinkError::Closed("stdout: the reader closed the pipe".into());
        let mut c = vec![Outcome::Failed(closed.clone()), Outcome::Published];
        assert_eq!(batch_verdict(&mut c), Some(closed));
    }
}
