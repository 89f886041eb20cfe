//! The Kafka sink: one idempotent librdkafka producer per relay; a batch is handed to the
//! producer whole, then every delivery report is awaited.
//!
//! `--sink 'kafka://HOST:PORT[,HOST:PORT...]?topic=outbox.event.{aggregate_type}&key={aggregate_id}'`.
//! The defaults follow Debezium's Outbox Event Router: topic `outbox.event.{aggregate_type}`, key
//! `{aggregate_id}` (so one aggregate's events share a partition and keep their order), value the
//! event's JSON document, headers the row's headers (see [`HeaderPolicy::kafka`]) plus `id`,
//! `idempotency_key` and `event_type`. Keys are partitioned with `murmur2_random`, the Java
//! client's partitioner, so the relay and a Java producer put a key on the same partition.
//!
//! The producer has `enable.idempotence=true` (acks=all, at most 5 requests in flight, no
//! reordering or duplicates on the producer's own retries) and a `message.timeout.ms` below
//! `--publish-timeout`, so librdkafka gives every message a verdict before the relay gives up on
//! it. SASL/TLS and tuning go through `--kafka-property k=v` (values never shown).
//!
//! Verdicts: delivered = published; too large, invalid or corrupt = permanent (dead letter);
//! timeouts, transport failures, all brokers down, cluster or SASL authorization refused =
//! `Unavailable` (an outage when the whole batch fails so); an unknown topic or a topic the
//! principal may not write = [`SinkError::Backpressure`], with a WARN naming the topic
//! (configuration, not poison: never counted, an outage for a whole batch, deferred beside
//! events delivered to other topics); a fatal producer error (e.g. an idempotence sequence the
//! broker lost in a restart) fails the rest of the batch as `Unavailable` and the next batch gets
//! a new producer.
//!
//! librdkafka waits `topic.metadata.propagation.max.ms` (30 s by default) before it believes a
//! topic does not exist, longer than a message's timeout: the relay sets it to half the message
//! timeout (see [`metadata_propagation`]), so an unknown topic is reported as such rather than as
//! `MessageTimedOut`. A `--kafka-property` may set it otherwise.
//!
//! With `--format cloudevents` the value is the payload and the record also carries the
//! attributes as `ce_*` headers and `content-type` ([`Binding::Kafka`], binary mode).

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{ClientConfig, ClientContext};

use super::cloudevents::{Binding, CloudEvents};
use super::headers::{self, HeaderPolicy};
use super::template::Template;
use super::{write_envelope, Event, Outcome, PublishCtl, Sink, SinkError};
use crate::lock::lock;

/// Topic template used when the URL has no `topic` parameter (Debezium's default).
pub const DEFAULT_TOPIC: &str = "outbox.event.{aggregate_type}";
/// Key template used when the URL has no `key` parameter (Debezium's default).
pub const DEFAULT_KEY: &str = "{aggregate_id}";
/// Properties the relay sets itself; `--kafka-property` may not change them.
const MANAGED: &[&str] = &[
    "bootstrap.servers",
    "metadata.broker.list",
    "enable.idempotence",
    "message.timeout.ms",
    "delivery.timeout.ms",
];

pub struct KafkaSink {
    config: ClientConfig,
    producer: Mutex<Arc<FutureProducer<Ctx>>>,
    state: Arc<State>,
    topic: Template,
    key: Option<Template>,
    display: String,
    row_headers: HeaderPolicy,
    warned_topics: Mutex<HashSet<(String, i32)>>,
    /// Test-only: the publish call (1-based) in which to raise a fabricated fatal error.
    test_fatal_at: Option<u64>,
    /// Publish calls so far (for `test_fatal_at`).
    publishes: AtomicU64,
    /// `--format cloudevents`; `None`: the document.
    cloudevents: Option<CloudEvents>,
}

/// What librdkafka's callbacks tell the sink.
struct State {
    /// A fatal error was raised, or a whole batch timed out: the producer is replaced before the
    /// next batch.
    rebuild: AtomicBool,
    /// The current producer has had a delivery acknowledged (false again for each new one).
    delivered: AtomicBool,
    /// When the current producer was created.
    born: Mutex<Instant>,
    /// The last broker connection problem (error callback), for timeout messages and WARNs.
    last_problem: Mutex<Option<(RDKafkaErrorCode, String)>>,
}

impl Default for State {
    fn default() -> Self {
        Self {
            rebuild: AtomicBool::new(false),
            delivered: AtomicBool::new(false),
            born: Mutex::new(Instant::now()),
            last_problem: Mutex::new(None),
        }
    }
}

/// How long a new producer that has not delivered anything yet is kept through whole batches
/// timing out: its handshake (connection, API versions, metadata, the idempotent producer id:
/// several round trips) may take longer than one `--publish-timeout` on a slow link, and a new
/// producer would start it again.
const FRESH_PRODUCER_GRACE: Duration = Duration::from_secs(60);

/// Whether a whole batch timing out replaces the producer: when it has delivered before (its
/// idempotence session with the broker may be lost, as in a broker restart), or when it is past
/// [`FRESH_PRODUCER_GRACE`] without delivering anything (it may be wedged the same way); not
/// while a new producer may still be connecting. Measured through 900 ms of latency with a 2 s
/// `--publish-timeout`: replacing it every time delivered nothing in 25 s (four new producers,
/// none through its handshake).
fn rebuild_after_timeout(delivered: bool, age: Duration) -> bool {
    delivered || age >= FRESH_PRODUCER_GRACE
}

#[derive(Clone)]
struct Ctx(Arc<State>);

impl ClientContext for Ctx {
    /// librdkafka's own log lines: only warnings and worse, never its debug output (which could
    /// show message contents with `debug=msg`), as the relay's own WARN lines.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        use RDKafkaLogLevel as L;
        if matches!(
            level,
            L::Emerg | L::Alert | L::Critical | L::Error | L::Warning
        ) {
            tracing::warn!(sink = "kafka", facility = fac, "librdkafka: {log_message}");
        }
    }

    /// Broker-level problems (connection refused, all brokers down, authentication): one WARN
    /// per kind of problem until it changes; never message contents or credentials.
    fn error(&self, error: KafkaError, reason: &str) {
        let code = error.rdkafka_error_code();
        if code == Some(RDKafkaErrorCode::Fatal) {
            self.0.rebuild.store(true, Ordering::SeqCst);
        }
        let code = code.unwrap_or(RDKafkaErrorCode::Unknown);
        let mut last = lock(&self.0.last_problem);
        if last.as_ref().map(|(c, _)| *c) != Some(code) {
            tracing::warn!(sink = "kafka", problem = %reason, "Kafka connection problem");
        }
        *last = Some((code, reason.to_owned()));
    }
}

/// The parts of a `kafka://` spec.
#[derive(Debug, PartialEq, Eq)]
struct Spec {
    bootstrap: Vec<String>,
    topic: String,
    key: Option<String>,
    compression: Option<String>,
}

fn parse_spec(spec: &str) -> Result<Spec, String> {
    let rest = spec
        .strip_prefix("kafka://")
        .ok_or("a Kafka sink starts with kafka://")?;
    let (servers, query) = rest.split_once('?').unwrap_or((rest, ""));
    let servers = servers.trim_end_matches('/');
    if servers.contains('@') {
        return Err(
            "credentials do not go in the kafka:// URL; use --kafka-property sasl.username=... and sasl.password=..."
                .into(),
        );
    }
    let mut bootstrap = Vec::new();
    for s in servers.split(',') {
        let ok = s.rsplit_once(':').is_some_and(|(h, p)| {
            !h.is_empty() && !h.contains('/') && p.parse::<u16>().is_ok_and(|p| p > 0)
        });
        if !ok {
            return Err(format!(
                "bootstrap server `{s}` is not HOST:PORT (e.g. kafka://127.0.0.1:9092,10.0.0.2:9092)"
            ));
        }
        bootstrap.push(s.to_owned());
    }
    let mut out = Spec {
        bootstrap,
        topic: DEFAULT_TOPIC.into(),
        key: Some(DEFAULT_KEY.into()),
        compression: None,
    };
    for (k, v) in url::form_urlencoded::parse(query.as_bytes()) {
        match k.as_ref() {
            "topic" if !v.trim().is_empty() => out.topic = v.into_owned(),
            "key" if v.is_empty() => out.key = None,
            "key" => out.key = Some(v.into_owned()),
            "compression" => match v.as_ref() {
                "none" | "gzip" | "snappy" | "lz4" => out.compression = Some(v.into_owned()),
                other => {
                    return Err(format!(
                        "compression `{other}` is not one of none, gzip, snappy, lz4"
                    ))
                }
            },
            other => {
                return Err(format!(
                    "unknown kafka parameter `{other}` (use topic=TEMPLATE, key=TEMPLATE, compression=none|gzip|snappy|lz4)"
                ))
            }
        }
    }
    Ok(out)
}

/// Why `topic` is not a valid Kafka topic name, if it is not: 1 to 249 of `[A-Za-z0-9._-]`,
/// not `.` or `..`.
fn invalid_topic(topic: &str) -> Option<String> {
    if topic.is_empty() || topic.len() > 249 || topic == "." || topic == ".." {
        return Some(format!(
            "topic `{topic}` must be 1 to 249 characters, not `.` or `..`"
        ));
    }
    topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
        .map(|c| {
            format!("topic `{topic}` has `{c}`: a Kafka topic name is letters, digits, `.`, `_` and `-`")
        })
}

/// Splits `k=v` property arguments, refusing the ones the relay sets. Errors name the key only.
fn parse_properties(props: &[String]) -> Result<Vec<(String, String)>, String> {
    let mut out = Vec::with_capacity(props.len());
    for p in props.iter().filter(|p| !p.trim().is_empty()) {
        let Some((k, v)) = p.split_once('=') else {
            return Err(
                "--kafka-property takes KEY=VALUE (e.g. security.protocol=SASL_SSL)".into(),
            );
        };
        let k = k.trim();
        if k.is_empty() {
            return Err("--kafka-property takes KEY=VALUE: the key is empty".into());
        }
        if MANAGED.contains(&k) {
            return Err(format!(
                "--kafka-property `{k}` is set by the relay (bootstrap servers from the URL, idempotence always on, message timeout below --publish-timeout)"
            ));
        }
        out.push((k.to_owned(), v.to_owned()));
    }
    Ok(out)
}

/// `message.timeout.ms` for a publish timeout: [`super::client_timeout`], so librdkafka's
/// verdict comes before the relay's own timeout.
fn message_timeout(publish_timeout: Duration) -> Duration {
    super::client_timeout(publish_timeout)
}

/// `topic.metadata.propagation.max.ms` for a message timeout: half of it, so that librdkafka
/// fails a message to a topic that does not exist with `UnknownTopic` before it times out
/// (measured against Tansu with topic auto-creation off: `MSG_TIMED_OUT` after 14 s with the
/// default 30 s, `UNKNOWN_TOPIC_OR_PART` after 2 s with 2 s).
fn metadata_propagation(message_timeout: Duration) -> Duration {
    (message_timeout / 2).max(Duration::from_millis(50))
}

impl KafkaSink {
    /// Validates the spec and properties and creates the producer. Brokers are contacted in the
    /// background: one that is down now only makes publishes fail (and the relay pause) until it
    /// is back.
    pub fn new(
        spec: &str,
        properties: &[String],
        publish_timeout: Duration,
    ) -> Result<Self, super::Error> {
        let s =
            parse_spec(spec).map_err(|e| super::Error::invalid(format!("invalid --sink: {e}")))?;
        let topic = Template::parse(&s.topic, &format!("invalid --sink: topic `{}`", s.topic))
            .map_err(super::Error::invalid)?;
        if let Some(why) = invalid_topic(&topic.literal_text()).filter(|_| {
            // An empty literal (a topic that is only placeholders) is checked per event.
            !topic.literal_text().is_empty()
        }) {
            return Err(super::Error::invalid(format!(
                "invalid --sink: {}",
                why.replace(
                    &format!("topic `{}`", topic.literal_text()),
                    &format!("topic `{}`", s.topic)
                )
            )));
        }
        let key = match &s.key {
            Some(k) => Some(
                Template::parse(k, &format!("invalid --sink: key `{k}`"))
                    .map_err(super::Error::invalid)?,
            ),
            None => None,
        };
        let props = parse_properties(properties).map_err(super::Error::invalid)?;
        let mut config = ClientConfig::new();
        let message_timeout = message_timeout(publish_timeout);
        config
            .set("bootstrap.servers", s.bootstrap.join(","))
            .set("client.id", "outboxctl")
            .set("enable.idempotence", "true")
            .set(
                "message.timeout.ms",
                message_timeout.as_millis().to_string(),
            )
            .set(
                "topic.metadata.propagation.max.ms",
                metadata_propagation(message_timeout)
                    .as_millis()
                    .to_string(),
            )
            .set("partitioner", "murmur2_random")
            .set_log_level(RDKafkaLogLevel::Warning);
        if let Some(c) = &s.compression {
            config.set("compression.type", c);
        }
        for (k, v) in &props {
            config.set(k, v);
        }
        let state = Arc::new(State::default());
        let producer = Arc::new(create(&config, &state, &props)?);
        warm_up(&producer, &state);
        let display = format!(
            "kafka://{}?topic={}{}",
            s.bootstrap.join(","),
            s.topic,
            s.key
                .as_ref()
                .map(|k| format!("&key={k}"))
                .unwrap_or_default()
        );
        Ok(Self {
            config,
            producer: Mutex::new(producer),
            state,
            topic,
            key,
            display,
            row_headers: HeaderPolicy::kafka(),
            warned_topics: Mutex::new(HashSet::new()),
            test_fatal_at: None,
            publishes: AtomicU64::new(0),
            cloudevents: None,
        })
    }

    /// Sends CloudEvents (binary mode) instead of the document.
    pub fn with_cloudevents(mut self, ce: Option<CloudEvents>) -> Self {
        self.row_headers =
            HeaderPolicy::kafka().for_cloudevents(ce.as_ref().map(|_| Binding::Kafka));
        self.cloudevents = ce;
        self
    }

    /// Test-only hook (the hidden `OUTBOXCTL_TEST_KAFKA_FATAL_ERROR=N`): in the `n`th publish
    /// call, after half of its messages were handed to the producer, librdkafka is told to raise
    /// a fatal error (`rd_kafka_test_fatal_error`, librdkafka's own hook for this), as it would
    /// when the broker rejects the idempotent producer's sequence. No broker can be made to do
    /// that on demand, so this is how the rebuild is tested.
    pub fn with_test_fatal_error_at(mut self, n: Option<u64>) -> Self {
        self.test_fatal_at = n.filter(|n| *n > 0);
        self
    }

    /// The producer for this batch; a new one when the last one hit a fatal error (its
    /// idempotence state can no longer be trusted and librdkafka refuses further produces) or
    /// timed out a whole batch.
    fn producer(&self) -> Arc<FutureProducer<Ctx>> {
        let mut current = lock(&self.producer);
        if self.state.rebuild.swap(false, Ordering::SeqCst) {
            match create(&self.config, &self.state, &[]) {
                Ok(p) => {
                    self.state.delivered.store(false, Ordering::SeqCst);
                    *lock(&self.state.born) = Instant::now();
                    let p = Arc::new(p);
                    warm_up(&p, &self.state);
                    tracing::info!(
                        sink = "kafka",
                        "a new Kafka producer takes over (the last one hit a fatal error or a whole batch timed out)"
                    );
                    let old = std::mem::replace(&mut *current, p);
                    // Dropping a producer purges and flushes it (up to half a second): not on
                    // the runtime's threads.
                    tokio::task::spawn_blocking(move || drop(old));
                }
                Err(e) => {
                    tracing::warn!(sink = "kafka", error = %e, "cannot rebuild the Kafka producer");
                    self.state.rebuild.store(true, Ordering::SeqCst);
                }
            }
        }
        Arc::clone(&current)
    }

    fn record_headers(&self, e: &Event) -> OwnedHeaders {
        let id = e.id.to_string();
        let mut h = OwnedHeaders::new_with_capacity(8)
            .insert(Header {
                key: "id",
                value: Some(id.as_bytes()),
            })
            .insert(Header {
                key: "idempotency_key",
                value: Some(e.idempotency_key.as_bytes()),
            })
            .insert(Header {
                key: "event_type",
                value: Some(e.event_type.as_bytes()),
            });
        let attributes = self
            .cloudevents
            .as_ref()
            .map(|ce| ce.headers(Binding::Kafka, e))
            .unwrap_or_default();
        for (k, v) in attributes
            .into_iter()
            .chain(headers::row_headers(e, &self.row_headers))
        {
            h = h.insert(Header {
                key: &k,
                value: Some(v.as_bytes()),
            });
        }
        h
    }

    /// Whose fault a failed delivery is (see the module doc); bumps the fatal flag and writes
    /// the configuration WARN as side effects.
    fn classify(&self, topic: &str, err: &KafkaError) -> SinkError {
        use RDKafkaErrorCode as C;
        let code = err.rdkafka_error_code().unwrap_or(C::Unknown);
        let message = format!("Kafka: topic `{topic}`: {err}");
        match code {
            C::MessageSizeTooLarge
            | C::InvalidMessageSize
            | C::InvalidMessage
            | C::InvalidRecord
            | C::BadMessage
            | C::InvalidTopic => SinkError::Permanent(message),
            C::UnknownTopic
            | C::UnknownTopicOrPartition
            | C::TopicAuthorizationFailed
            | C::ClusterAuthorizationFailed
            | C::Authentication
            | C::SaslAuthenticationFailed => {
                let first = lock(&self.warned_topics).insert((topic.to_owned(), code as i32));
                if first {
                    tracing::warn!(
                        sink = "kafka",
                        topic,
                        error = %err,
                        "Kafka refuses the topic (unknown, or not authorised): check the topic template, the topic's existence and the ACLs; its events wait, no attempt counted"
                    );
                }
                // The topic's configuration, not the event's fault: never counted. Refused for
                // the whole cluster (SASL, cluster ACL): the sink is down for every event.
                match code {
                    C::UnknownTopic | C::UnknownTopicOrPartition | C::TopicAuthorizationFailed => {
                        SinkError::backpressure(message)
                    }
                    _ => SinkError::unavailable(message),
                }
            }
            // The producer's idempotence session is over (fatal, or fenced by the broker after
            // an epoch bump that lost the race with its own in-flight requests, seen through
            // 900 ms of latency): the producer's fault, not the event's. A new one takes over,
            // and no attempt is counted.
            C::Fatal | C::ProducerFenced => {
                self.state.rebuild.store(true, Ordering::SeqCst);
                SinkError::unavailable(message)
            }
            C::MessageTimedOut
            | C::RequestTimedOut
            | C::OperationTimedOut
            | C::TimedOutQueue
            | C::BrokerTransportFailure
            | C::AllBrokersDown
            | C::Resolve
            | C::NetworkException
            | C::BrokerNotAvailable
            | C::LeaderNotAvailable
            | C::NotLeaderForPartition
            | C::NotEnoughReplicas
            | C::NotEnoughReplicasAfterAppend
            | C::QueueFull
            | C::BrokerDestroy
            | C::PurgeQueue
            | C::PurgeInflight
            | C::OutOfOrderSequenceNumber
            | C::UnknownProducerId
            | C::InvalidProducerEpoch => {
                let last = lock(&self.state.last_problem)
                    .as_ref()
                    .map(|(_, r)| format!("; last broker problem: {r}"))
                    .unwrap_or_default();
                SinkError::unavailable(format!("{message}{last}"))
            }
            _ => SinkError::retryable(message),
        }
    }

    /// The outcome of one delivery report; notes in `timed_out` a message that timed out.
    fn verdict<E>(
        &self,
        topic: &str,
        report: Result<OwnedDeliveryResult, E>,
        timed_out: &mut bool,
    ) -> Outcome {
        match report {
            Ok(Ok(_)) => Outcome::Published,
            Ok(Err((err, _msg))) => {
                *timed_out |= err.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageTimedOut);
                Outcome::Failed(self.classify(topic, &err))
            }
            Err(_canceled) => Outcome::Failed(SinkError::unavailable(
                "Kafka: the producer went away before the delivery report",
            )),
        }
    }
}

/// Makes librdkafka raise a fabricated fatal error on `producer` (test hook only, see
/// [`KafkaSink::with_test_fatal_error_at`]): from then on the producer refuses new messages with
/// `ERR__FATAL`, purges the queued ones, reports the in-flight ones as the broker answers, and
/// calls the error callback with `ERR__FATAL`, exactly as for a real fatal idempotence error.
#[allow(unsafe_code)]
fn raise_test_fatal_error(producer: &FutureProducer<Ctx>) {
    use rdkafka::bindings::{rd_kafka_resp_err_t, rd_kafka_test_fatal_error};
    use rdkafka::producer::Producer;
    tracing::warn!(
        sink = "kafka",
        "test hook: raising a fabricated fatal producer error (OUTBOXCTL_TEST_KAFKA_FATAL_ERROR)"
    );
    // SAFETY: the pointer is the live `rd_kafka_t` of a producer we hold a reference to (it is
    // not destroyed while borrowed), and the reason is a NUL-terminated static string;
    // `rd_kafka_test_fatal_error` is thread-safe (it takes the handle's lock).
    unsafe {
        rd_kafka_test_fatal_error(
            producer.client().native_ptr(),
            rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
            c"outboxctl test hook".as_ptr(),
        );
    }
}

/// How long a new producer is nudged towards its idempotent producer id, and how often.
const WARM_UP: Duration = Duration::from_secs(1);
const WARM_UP_EVERY: Duration = Duration::from_millis(50);
/// The first metadata must come within this for the warm-up to run (see [`warm_up`]).
const WARM_UP_LINK: Duration = Duration::from_millis(250);

/// Starts a new producer's idempotence session without waiting for librdkafka's timer. An
/// idempotent producer cannot send until it has a producer id, and librdkafka asks for one when
/// a broker is up: at creation none is (the bootstrap connection is replaced by the broker's
/// own), so it waits for its 500 ms retry timer, or for the next metadata answer, which also runs
/// that state machine. Measured against Tansu: a new producer's first delivery came 0.51-1.00 s
/// after its creation, and 0.06-0.10 s with a metadata request every 50 ms; a `relay --once` of
/// 30,000 events spent 0.84 s of its 1.9 s on its first page, and one of a single event takes
/// 1.12 s without this and 0.11 s with it
/// (`sinks::kafka::a_new_producer_sends_without_waiting_for_librdkafkas_producer_id_timer`).
///
/// So a thread waits for the producer's own first metadata (at most [`WARM_UP_LINK`]), then asks
/// for metadata (no topics: the brokers, and the topics the producer already writes), one request
/// at a time, [`WARM_UP_EVERY`] after the last answer, until the producer has delivered or
/// [`WARM_UP`] has passed. It holds the producer weakly and ends when the producer is dropped. A
/// link slower than that is left to librdkafka's timer: behind 400 ms of latency the nudges had
/// the producer id asked over the bootstrap connection as it was replaced, and the producer was
/// fenced again and again (`sinks::kafka::a_broker_behind_a_slow_link_…`).
fn warm_up(producer: &Arc<FutureProducer<Ctx>>, state: &Arc<State>) {
    let producer = Arc::downgrade(producer);
    let state = Arc::clone(state);
    let spawned = std::thread::Builder::new()
        .name("kafka-warm-up".into())
        .spawn(move || {
            let until = Instant::now() + WARM_UP;
            // First librdkafka's own bootstrap metadata: an answer of ours over the bootstrap
            // connection, which that metadata replaces, would have the producer id asked there
            // and lost (behind 400 ms of latency the producer was then fenced, again and again).
            // A link too slow for the first metadata within [`WARM_UP_LINK`] is left to
            // librdkafka's own timer: its handshake takes several round trips anyway, and nudges
            // through it were seen to fence the producer.
            let fast = producer
                .upgrade()
                .is_some_and(|p| controller_known(&p, WARM_UP_LINK));
            if !fast {
                return;
            }
            while !state.delivered.load(Ordering::SeqCst) {
                let left = until.saturating_duration_since(Instant::now());
                let Some(p) = producer.upgrade().filter(|_| !left.is_zero()) else {
                    return;
                };
                // Waited for: one request at a time, so a slow link is not queued full of them.
                request_metadata(&p, left);
                drop(p);
                std::thread::sleep(WARM_UP_EVERY);
            }
        });
    if let Err(e) = spawned {
        tracing::debug!(sink = "kafka", error = %e, "no warm-up thread for the Kafka producer");
    }
}

/// Waits, at most `timeout`, until the producer has its first metadata (it knows the cluster's
/// controller), without a request of its own.
#[allow(unsafe_code)]
fn controller_known(producer: &FutureProducer<Ctx>, timeout: Duration) -> bool {
    use rdkafka::producer::Producer;
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the handle is a live `rd_kafka_t` (the producer is borrowed for the call).
    let id =
        unsafe { rdkafka::bindings::rd_kafka_controllerid(producer.client().native_ptr(), ms) };
    id >= 0
}

/// One metadata request of the producer's known topics (none at first: the brokers only),
/// waited for at most `timeout`; its answer is dropped.
#[allow(unsafe_code)]
fn request_metadata(producer: &FutureProducer<Ctx>, timeout: Duration) {
    use rdkafka::bindings::{rd_kafka_metadata, rd_kafka_metadata_destroy, rd_kafka_metadata_t};
    use rdkafka::producer::Producer;
    let ms = i32::try_from(timeout.as_millis()).unwrap_or(i32::MAX);
    let mut md: *const rd_kafka_metadata_t = std::ptr::null();
    // SAFETY: the handle is a live `rd_kafka_t` (the producer is borrowed for the call);
    // `all_topics = 0` with no topic handle asks for the locally known topics; on success
    // librdkafka hands over `md`, which is freed here once with `rd_kafka_metadata_destroy`.
    unsafe {
        let err = rd_kafka_metadata(
            producer.client().native_ptr(),
            0,
            std::ptr::null_mut(),
            &mut md,
            ms,
        );
        if err == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            && !md.is_null()
        {
            rd_kafka_metadata_destroy(md);
        }
    }
}

fn create(
    config: &ClientConfig,
    state: &Arc<State>,
    props: &[(String, String)],
) -> Result<FutureProducer<Ctx>, super::Error> {
    config
        .create_with_context(Ctx(Arc::clone(state)))
        .map_err(|e| {
            // librdkafka quotes a refused value ("Invalid value \"x\" for ..."): never show one.
            let mut text = e.to_string();
            for (_, v) in props.iter().filter(|(_, v)| !v.is_empty()) {
                text = text.replace(v.as_str(), "***");
            }
            super::Error::invalid(format!(
                "invalid --kafka-property: librdkafka refused the configuration: {text}"
            ))
        })
}

#[async_trait::async_trait]
impl Sink for KafkaSink {
    async fn publish(&self, events: &[Event], ctl: &PublishCtl) -> Vec<Outcome> {
        let producer = self.producer();
        let call = self.publishes.fetch_add(1, Ordering::Relaxed) + 1;
        let raise_fatal_at = (self.test_fatal_at == Some(call)).then_some(events.len() / 2);
        let deadline = tokio::time::Instant::now() + ctl.timeout;
        let timeout_msg = format!(
            "Kafka: no delivery report within {}",
            humantime::format_duration(ctl.timeout)
        );
        let mut outcomes = vec![Outcome::NotStarted; events.len()];
        let mut pending = futures::stream::FuturesUnordered::new();
        let mut open: HashSet<usize> = HashSet::new();
        let mut timed_out = false;
        let mut body = Vec::with_capacity(512);
        for (i, e) in events.iter().enumerate() {
            let too_late = ctl
                .start_by
                .is_some_and(|t| tokio::time::Instant::now() >= t);
            if ctl.shutdown.is_cancelled() || too_late {
                break;
            }
            if raise_fatal_at == Some(i) {
                // The hook first awaits the reports of what was sent so far, so the batch holds
                // both acked messages and ones the fatal producer refuses.
                while let Some(next) = pending.next().await {
                    let (j, topic, report): (usize, String, _) = next;
                    open.remove(&j);
                    outcomes[j] = self.verdict(&topic, report, &mut timed_out);
                }
                raise_test_fatal_error(&producer);
            }
            let topic = self.topic.expand(e);
            if let Some(why) = invalid_topic(&topic) {
                outcomes[i] = Outcome::Failed(SinkError::Permanent(format!("Kafka: {why}")));
                continue;
            }
            body.clear();
            match &self.cloudevents {
                Some(ce) => ce.write_body(e, &mut body),
                None => write_envelope(e, &mut body),
            }
            let key = self.key.as_ref().map(|k| k.expand(e));
            let mut record = FutureRecord::to(&topic)
                .payload(&body[..])
                .headers(self.record_headers(e));
            if let Some(k) = &key {
                record = record.key(k.as_str());
            }
            // The payload is copied into librdkafka's queue; a full queue drains as deliveries
            // complete (the producer's own thread polls), so wait for room until the deadline.
            loop {
                match producer.send_result(record) {
                    Ok(delivery) => {
                        outcomes[i] = Outcome::Failed(SinkError::unavailable(&timeout_msg));
                        open.insert(i);
                        let topic = topic.clone();
                        pending.push(async move { (i, topic, delivery.await) });
                        break;
                    }
                    Err((err, r))
                        if err.rdkafka_error_code() == Some(RDKafkaErrorCode::QueueFull)
                            && tokio::time::Instant::now() < deadline =>
                    {
                        record = r;
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                    Err((err, _)) => {
                        outcomes[i] = Outcome::Failed(self.classify(&topic, &err));
                        break;
                    }
                }
            }
        }
        // Every event is in the producer's queue, in order: a later batch may follow it.
        ctl.handed_over.fire();
        let grace = async {
            ctl.shutdown.cancelled().await;
            tokio::time::sleep(ctl.shutdown_grace).await;
        };
        tokio::pin!(grace);
        loop {
            tokio::select! {
                next = pending.next() => match next {
                    Some((i, topic, report)) => {
                        open.remove(&i);
                        outcomes[i] = self.verdict(&topic, report, &mut timed_out);
                    }
                    None => break,
                },
                _ = tokio::time::sleep_until(deadline) => {
                    timed_out = true;
                    break;
                }
                _ = &mut grace => {
                    for i in open.drain() {
                        outcomes[i] = Outcome::Abandoned;
                    }
                    break;
                }
            }
        }
        if outcomes.iter().any(|o| matches!(o, Outcome::Published)) {
            self.state.delivered.store(true, Ordering::SeqCst);
            *lock(&self.state.last_problem) = None;
        } else if timed_out {
            // Every delivery of the batch failed and some timed out: the idempotent producer now
            // has to bump its epoch with the broker, which a broker that lost its state in a
            // restart may never let it do (seen with Tansu: every later message times out too).
            // A new producer starts a new idempotence session; nothing is lost, the rows are
            // given back. Not a producer that may still be connecting: see
            // [`rebuild_after_timeout`].
            let age = lock(&self.state.born).elapsed();
            if rebuild_after_timeout(self.state.delivered.load(Ordering::SeqCst), age) {
                self.state.rebuild.store(true, Ordering::SeqCst);
            } else {
                tracing::debug!(
                    sink = "kafka",
                    "a batch timed out on a producer that has not delivered yet: kept (it may still be connecting)"
                );
            }
        }
        outcomes
    }

    /// The whole batch is handed to the producer and its reports awaited against one deadline,
    /// `--publish-timeout` after the start.
    fn batch_within_one_timeout(&self) -> bool {
        true
    }

    fn keeps_key_order(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        self.display.clone()
    }
}

#[cfg(test)]
mod tests;
