//! Sinks: where the relay publishes. One small trait; each failure says whose fault it is: the
//! event's (`Retryable`: counted as an attempt and retried with backoff; `Permanent`:
//! dead-lettered at once), the sink's as a whole (`Unavailable`, `Closed`, `Stalled`: the event
//! was not taken by its consumer, so it is given back untouched, with no attempt counted and no
//! error stored), the sink's pushing back (`Backpressure`: never counted), or not yet known
//! (`Refused`: the endpoint's when every event of the batch meets it alike). [`batch_verdict`]
//! decides, per batch, whether these are an outage or per-event outcomes after all.

pub mod amqp;
pub mod cloudevents;
mod error;
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

pub use error::Error;

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
    /// The sink did not take this event for a reason of its own, not the event's: it is full (a
    /// RabbitMQ queue at `x-max-length` with reject-publish nacks, a JetStream stream at its
    /// `max_msgs`/`max_bytes` with discard=new, Redis out of memory under `noeviction`), it is
    /// rate limiting (HTTP 429), or the event's destination does not exist or is not permitted
    /// (a Kafka topic, a NATS subject with no stream or not permitted, a RabbitMQ routing key
    /// with no queue). Never counts an attempt: a whole batch of them is an outage (see
    /// [`batch_verdict`]); beside events the sink took, the event is *deferred*: scheduled again
    /// after `retry_after` (or the backoff base) with its attempt count untouched, so it is never
    /// dead-lettered for it.
    #[error("{message}")]
    Backpressure {
        message: String,
        retry_after: Option<Duration>,
    },
    /// An answer that is the endpoint's configuration when every event of a batch meets it alike,
    /// and may be the event's when only some do: HTTP 404, 405, 410, 401, 403, 3xx; Redis
    /// `WRONGTYPE` (a stream key that holds something else) and `NOPERM`. `kind` names the answer
    /// (e.g. `HTTP 404`). A batch whose only answer is one such refusal, the same `kind` for each
    /// event that got one, is an outage (see [`batch_verdict`]); otherwise each counts as its
    /// `per_event` failure (`Permanent` or `Retryable`).
    #[error("{per_event}")]
    Refused {
        kind: String,
        per_event: Box<SinkError>,
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

    pub fn backpressure(message: impl Into<String>) -> Self {
        Self::Backpressure {
            message: message.into(),
            retry_after: None,
        }
    }

    /// A refusal named `kind` that is `per_event` when not the whole batch's (see
    /// [`SinkError::Refused`]).
    pub fn refused(kind: impl Into<String>, per_event: SinkError) -> Self {
        Self::Refused {
            kind: kind.into(),
            per_event: Box::new(per_event),
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

/// Decides whose fault a batch's failures are, and returns the sink's state when it is the
/// sink's:
/// - any `Closed` or `Stalled` outcome: that error (those rows are given back, the run stops);
/// - nothing published, no per-event `Retryable` failure, every `Refused` one of the same `kind`,
///   and at least one `Unavailable`, `Backpressure` or `Refused`: an outage; each of those becomes
///   `Unavailable` (given back untouched) and the first is returned, as `Unavailable` (`Permanent`
///   ones are still dead-lettered: the sink answered for them);
/// - otherwise the sink took or judged other events of the batch on their own, so it is up: each
///   `Unavailable` becomes a `Retryable` failure of its own event (e.g. one 503 among 200s), each
///   `Refused` its `per_event` failure (a 404 for one event among 200s: that event's), and each
///   `Backpressure` stays, to be deferred without an attempt (a 429 among 200s).
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
    let mut kinds = outcomes.iter().filter_map(|o| match o {
        Outcome::Failed(SinkError::Refused { kind, .. }) => Some(kind),
        _ => None,
    });
    let one_refusal = kinds.next().is_none_or(|first| kinds.all(|k| k == first));
    if !sink_up && one_refusal {
        let mut first = None;
        for o in outcomes.iter_mut() {
            let Outcome::Failed(e) = o else { continue };
            let (message, retry_after) = match e {
                SinkError::Unavailable {
                    message,
                    retry_after,
                }
                | SinkError::Backpressure {
                    message,
                    retry_after,
                } => (std::mem::take(message), *retry_after),
                SinkError::Refused { per_event, .. } => (per_event.to_string(), None),
                _ => continue,
            };
            *e = SinkError::Unavailable {
                message,
                retry_after,
            };
            first.get_or_insert_with(|| e.clone());
        }
        return first;
    }
    for o in outcomes.iter_mut() {
        let Outcome::Failed(e) = o else { continue };
        match e {
            SinkError::Unavailable {
                message,
                retry_after,
            } => {
                *e = SinkError::Retryable {
                    message: std::mem::take(message),
                    retry_after: *retry_after,
                };
            }
            SinkError::Refused { per_event, .. } => {
                *e = std::mem::replace(&mut **per_event, SinkError::Permanent(String::new()));
            }
            _ => {}
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
    /// Told once the whole batch is handed to the sink in order: what a later batch's publish
    /// waits for, so that two batches in flight reach a sink that keeps a key's order
    /// ([`Sink::keeps_key_order`]) one after the other.
    pub handed_over: HandedOver,
}

/// A batch's hand-over to its sink: [`HandedOver::fire`]d by a sink that keeps a key's order
/// once every event is in its queue (Kafka: produced, deliveries outstanding), and by the relay
/// when the publish returns (every sink). Dropped unfired: the batch was not handed over.
#[derive(Debug, Clone, Default)]
pub struct HandedOver(std::sync::Arc<std::sync::Mutex<Option<tokio::sync::oneshot::Sender<()>>>>);

impl HandedOver {
    /// Whom to tell (replaces whoever was to be told).
    pub fn arm(&self, tx: tokio::sync::oneshot::Sender<()>) {
        *self.0.lock().expect("hand-over lock") = Some(tx);
    }

    /// Tells it, once; later calls do nothing.
    pub fn fire(&self) {
        if let Some(tx) = self.0.lock().expect("hand-over lock").take() {
            let _ = tx.send(());
        }
    }
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
    /// publish timeout per batch (measured: bench/experiments/tx-slow.sh, docs/decisions/0002).
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

    /// Reopens what the sink writes to (SIGHUP): the file sink opens its path again, so that
    /// after logrotate's rename the next batch goes to a new file at the path, none is split
    /// between the two, and none is lost. `None`: nothing to reopen.
    async fn reopen(&self) -> Option<std::io::Result<()>> {
        None
    }

    /// A description for logs; never holds a secret.
    fn describe(&self) -> String;
}

/// A client's own timeout for what `--publish-timeout` bounds (librdkafka's message timeout,
/// the JetStream ack wait): a second (or a fifth) less, so that the client's verdict, which
/// names the cause, comes before the relay's own bare timeout.
pub fn client_timeout(publish_timeout: Duration) -> Duration {
    let margin = (publish_timeout / 5).min(Duration::from_secs(1));
    publish_timeout
        .saturating_sub(margin)
        .max(Duration::from_millis(100))
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
    /// `--format cloudevents`: what the CloudEvents flags asked for (checked against the sink by
    /// [`cloudevents::resolve`]); `None`: the document.
    pub cloudevents: Option<cloudevents::Request>,
}

/// The kinds of `--sink` spec, by how it begins: the one list of the sink schemes (what
/// [`from_spec`] builds, the metrics' `sink` label, which flags apply to which sink, and what
/// doctor checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scheme {
    Stdout,
    Null,
    File,
    Http,
    Https,
    Nats,
    Redis,
    Amqp,
    Kafka,
}

impl Scheme {
    /// Every scheme, in the order of the usage text.
    pub const ALL: [Scheme; 9] = [
        Scheme::Stdout,
        Scheme::Null,
        Scheme::File,
        Scheme::Http,
        Scheme::Https,
        Scheme::Nats,
        Scheme::Redis,
        Scheme::Amqp,
        Scheme::Kafka,
    ];

    /// The scheme of `spec` (surrounding whitespace ignored; `-` is stdout), or `None`.
    pub fn of(spec: &str) -> Option<Scheme> {
        let spec = spec.trim();
        match spec {
            "stdout" | "-" => return Some(Scheme::Stdout),
            "null" => return Some(Scheme::Null),
            _ => {}
        }
        Scheme::ALL
            .into_iter()
            .filter(|s| !matches!(s, Scheme::Stdout | Scheme::Null))
            .find(|s| spec.starts_with(s.prefix()))
    }

    /// The name: the `sink` label of the metrics, and the URL scheme where there is one.
    pub fn name(self) -> &'static str {
        match self {
            Scheme::Stdout => "stdout",
            Scheme::Null => "null",
            Scheme::File => "file",
            Scheme::Http => "http",
            Scheme::Https => "https",
            Scheme::Nats => "nats",
            Scheme::Redis => "redis",
            Scheme::Amqp => "amqp",
            Scheme::Kafka => "kafka",
        }
    }

    /// How a spec of this scheme begins.
    fn prefix(self) -> &'static str {
        match self {
            Scheme::Stdout => "stdout",
            Scheme::Null => "null",
            Scheme::File => "file:",
            Scheme::Http => "http://",
            Scheme::Https => "https://",
            Scheme::Nats => "nats://",
            Scheme::Redis => "redis://",
            Scheme::Amqp => "amqp://",
            Scheme::Kafka => "kafka://",
        }
    }

    /// The form of a spec, for the usage text.
    fn form(self) -> &'static str {
        match self {
            Scheme::Stdout => "stdout",
            Scheme::Null => "null",
            Scheme::File => "file:PATH",
            Scheme::Http => "http(s)://URL",
            Scheme::Https => "",
            Scheme::Nats => "nats://HOST:PORT?subject=...",
            Scheme::Redis => "redis://HOST:PORT?stream=...",
            Scheme::Amqp => "amqp://USER:PASS@HOST:PORT/VHOST",
            Scheme::Kafka => "kafka://HOST:PORT[,HOST:PORT]?topic=...",
        }
    }

    /// An HTTP(S) webhook (`--http-header` applies).
    pub fn is_http(self) -> bool {
        matches!(self, Scheme::Http | Scheme::Https)
    }

    /// A spec of this scheme, for tests.
    #[cfg(test)]
    pub fn example(self) -> String {
        match self {
            Scheme::Stdout | Scheme::Null => self.prefix().to_owned(),
            _ => format!("{}h:1/x?topic=t", self.prefix()),
        }
    }
}

/// The forms `--sink` takes, for its error messages.
fn usage() -> String {
    let forms: Vec<&str> = Scheme::ALL
        .iter()
        .map(|s| s.form())
        .filter(|f| !f.is_empty())
        .collect();
    let (last, rest) = forms.split_last().expect("schemes");
    format!("{} or {last}", rest.join(", "))
}

/// Builds the sink named by `--sink`: `stdout`, `null`, `file:PATH`, `http(s)://...`,
/// `nats://...` (JetStream), `redis://...` (Streams), `amqp://...` (RabbitMQ), `kafka://...`.
pub async fn from_spec(spec: &str, opts: &SinkOptions) -> Result<Arc<dyn Sink>, Error> {
    let spec = spec.trim();
    let Some(scheme) = Scheme::of(spec) else {
        return Err(Error::invalid(format!(
            "invalid --sink `{}`: use {}",
            crate::config::redact_url(spec),
            usage()
        )));
    };
    if !opts.http_headers.is_empty() && !scheme.is_http() {
        return Err(Error::invalid(
            "--http-header only applies to an http(s):// --sink",
        ));
    }
    if !opts.kafka_properties.is_empty() && scheme != Scheme::Kafka {
        return Err(Error::invalid(
            "--kafka-property only applies to a kafka:// --sink",
        ));
    }
    let ce = match &opts.cloudevents {
        Some(req) => Some(cloudevents::resolve(req, scheme)?),
        None => None,
    };
    Ok(match scheme {
        Scheme::Stdout => {
            if stdout::is_dev_null() {
                return Err(Error::unusable(
                    "--sink stdout: stdout is /dev/null (or was closed, which reads the same), so every event would be marked published and thrown away; use --sink null to discard events on purpose, or give stdout a pipe or a file",
                ));
            }
            Arc::new(stdout::sink().with_cloudevents(ce))
        }
        Scheme::Null => Arc::new(memory::NullSink),
        Scheme::File => {
            let path = &spec[scheme.prefix().len()..];
            if path.is_empty() {
                return Err(Error::invalid(
                    "invalid --sink `file:`: give a path, e.g. file:/var/log/outbox.jsonl",
                ));
            }
            Arc::new(
                file::open(path)
                    .map_err(|e| {
                        Error::unusable(format!(
                            "invalid --sink: cannot open {path} for appending: {e}"
                        ))
                    })?
                    .with_cloudevents(ce),
            )
        }
        Scheme::Http | Scheme::Https => Arc::new(http::HttpSink::new(spec, opts, ce)?),
        Scheme::Amqp => Arc::new(amqp::AmqpSink::new(spec)?.with_cloudevents(ce)),
        Scheme::Redis => Arc::new(redis::RedisSink::new(spec)?),
        Scheme::Kafka => Arc::new(
            kafka::KafkaSink::new(spec, &opts.kafka_properties, opts.timeout)?
                .with_test_fatal_error_at(opts.kafka_test_fatal_error_at)
                .with_cloudevents(ce),
        ),
        Scheme::Nats => Arc::new(
            nats::NatsSink::connect(spec, opts.timeout)
                .await?
                .with_cloudevents(ce),
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_is_in_the_list_and_its_specs_are_known_by_it() {
        for (i, s) in Scheme::ALL.into_iter().enumerate() {
            // Exhaustive: a new variant does not compile until it is placed in `ALL`.
            let place = match s {
                Scheme::Stdout => 0,
                Scheme::Null => 1,
                Scheme::File => 2,
                Scheme::Http => 3,
                Scheme::Https => 4,
                Scheme::Nats => 5,
                Scheme::Redis => 6,
                Scheme::Amqp => 7,
                Scheme::Kafka => 8,
            };
            assert_eq!(place, i, "{s:?}");
            assert_eq!(Scheme::of(&s.example()), Some(s));
            assert_eq!(Scheme::of(&format!("  {}\n", s.example())), Some(s));
            assert!(usage().contains(s.form()), "{s:?}");
        }
        assert_eq!(Scheme::of("-"), Some(Scheme::Stdout));
        for other in [
            "", "nullx", "stdoutx", "file", "ftp://h", "HTTP://h", "kafka:/h",
        ] {
            assert_eq!(Scheme::of(other), None, "{other}");
        }
    }

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

    fn refused(code: u16) -> Outcome {
        Outcome::Failed(SinkError::refused(
            format!("HTTP {code}"),
            SinkError::Permanent(format!("HTTP {code}")),
        ))
    }

    #[test]
    fn one_refusal_met_by_the_whole_batch_is_the_endpoints_and_differing_ones_the_events() {
        // Every event 404: the path is wrong, not the events: an outage, nothing dead.
        let mut all = vec![refused(404), refused(404), Outcome::NotStarted];
        assert_eq!(
            batch_verdict(&mut all),
            Some(SinkError::unavailable("HTTP 404"))
        );
        assert_eq!(all[1], Outcome::Failed(SinkError::unavailable("HTTP 404")));
        // With a down sink for the rest, too.
        let mut with_down = vec![refused(401), down()];
        assert!(batch_verdict(&mut with_down).is_some());
        // Refusals that differ between events, or a 404 among 200s: each its event's.
        for mut batch in [
            vec![refused(404), refused(410)],
            vec![refused(404), Outcome::Published],
        ] {
            assert_eq!(batch_verdict(&mut batch), None);
            assert!(matches!(
                batch[0],
                Outcome::Failed(SinkError::Permanent(ref m)) if m == "HTTP 404"
            ));
        }
    }

    #[test]
    fn backpressure_is_an_outage_for_a_whole_batch_and_stays_deferred_beside_taken_events() {
        let full = || {
            Outcome::Failed(SinkError::Backpressure {
                message: "HTTP 429".into(),
                retry_after: Some(Duration::from_secs(7)),
            })
        };
        let mut all = vec![full(), full()];
        assert_eq!(
            batch_verdict(&mut all),
            Some(SinkError::Unavailable {
                message: "HTTP 429".into(),
                retry_after: Some(Duration::from_secs(7)),
            }),
            "the circuit honours its Retry-After"
        );
        let mut mixed = vec![full(), Outcome::Published, down()];
        assert_eq!(batch_verdict(&mut mixed), None);
        assert_eq!(mixed[0], full(), "deferred, not a retry");
        assert_eq!(mixed[2], Outcome::Failed(SinkError::retryable("HTTP 503")));
    }
}
