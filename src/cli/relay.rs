//! `outboxctl relay`: the daemon's and `--once`'s flags, and the settings `doctor` also checks
//! (the [`SinkArgs`], [`LeaseArgs`] and [`RetryArgs`] groups, so both commands read the same flags
//! and variables).

use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::{Args, ValueEnum};

use super::shared::{DatabaseArgs, OutputArgs};
use super::values::{parse_duration, parse_listen_addr, parse_nonzero_duration};

/// The relay's `--lease` when none is given (also what `doctor` checks when only some relay
/// settings are given). Its help says so in words ("[default: 30s]"; a test holds the two equal):
/// the flag has no clap default, so that `doctor` can tell a given lease from none.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);

/// The relay's `--sink` when none is given; its help says so (a test holds the two equal).
pub const DEFAULT_SINK: &str = "stdout";

/// Where the relay publishes: `relay` uses it, `doctor` checks it.
#[derive(Debug, Clone, Args)]
pub struct SinkArgs {
    /// Where to publish: stdout (refused, exit 2, when stdout is /dev/null or closed: null
    /// discards events on purpose), null, file:PATH, http(s)://URL,
    /// nats://HOST:PORT?subject=outbox.{event_type} (JetStream), or
    /// redis://HOST:PORT[/DB]?stream=outbox[&maxlen=N] (Streams), or
    /// amqp://USER:PASS@HOST:PORT/VHOST?exchange=X&routing_key={event_type} (RabbitMQ), or
    /// kafka://HOST:PORT[,HOST:PORT]?topic=outbox.event.{aggregate_type}&key={aggregate_id}
    /// (Kafka, idempotent producer). Subjects, stream names, routing keys, topics and keys take
    /// the placeholders of --http-header [default: stdout].
    #[arg(long, env = "OUTBOXCTL_SINK", value_name = "SINK")]
    sink: Option<String>,
}

impl SinkArgs {
    /// The sink given, or [`DEFAULT_SINK`].
    pub fn spec(&self) -> &str {
        self.sink.as_deref().unwrap_or(DEFAULT_SINK)
    }

    /// The sink, if one was given.
    pub fn given(&self) -> Option<&str> {
        self.sink.as_deref()
    }
}

/// The sinks' own flags beside `--sink` (headers, Kafka properties, signing): `relay` and
/// `replay` take the same.
#[derive(Debug, Clone, Args)]
pub struct SinkOptionArgs {
    /// Extra HTTP header for the http sink (repeatable). Placeholders: {id}, {idempotency_key},
    /// {event_type}, {aggregate_type}, {aggregate_id}, {tenant_id}.
    /// E.g. --http-header 'Upstash-Deduplication-Id: {idempotency_key}'. In the environment
    /// variable, one header per line.
    #[arg(
        long = "http-header",
        value_name = "NAME: VALUE",
        env = "OUTBOXCTL_HTTP_HEADERS",
        value_delimiter = '\n'
    )]
    pub http_headers: Vec<String>,

    /// A librdkafka property for the kafka sink (repeatable), e.g. security.protocol=SASL_SSL,
    /// sasl.mechanism=SCRAM-SHA-512, sasl.username=relay, sasl.password=..., linger.ms=10. Values
    /// are never shown or logged; prefer the environment variable for secrets (one KEY=VALUE per
    /// line). bootstrap.servers, enable.idempotence and message.timeout.ms are the relay's.
    #[arg(
        long = "kafka-property",
        value_name = "KEY=VALUE",
        env = "OUTBOXCTL_KAFKA_PROPERTY",
        value_delimiter = '\n'
    )]
    pub kafka_properties: Vec<String>,

    /// Sign HTTP deliveries (Standard Webhooks) with the secret(s) in this environment variable:
    /// `whsec_...`, or two separated by a space during rotation. The secret itself never goes on
    /// the command line.
    #[arg(long, env = "OUTBOXCTL_SIGNING_SECRET_ENV", value_name = "VAR")]
    pub signing_secret_env: Option<String>,
}

/// How long the relay holds a claim and waits for one publish: `relay` uses them, `doctor`
/// checks them against each other.
#[derive(Debug, Clone, Args)]
pub struct LeaseArgs {
    /// How long a claim is held before another relay may take the row [default: 30s].
    #[arg(long, env = "OUTBOXCTL_LEASE", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    lease: Option<Duration>,

    #[command(flatten)]
    publish: PublishTimeoutArgs,
}

/// How long one publish may take: part of [`LeaseArgs`] for `relay` and `doctor` (where its
/// default is half the lease), and `replay`'s own (no lease there: its help says its default).
#[derive(Debug, Clone, Args)]
pub struct PublishTimeoutArgs {
    /// Timeout of one publish (a stdout or file write too); must be shorter than --lease
    /// [default: half the lease].
    #[arg(long, env = "OUTBOXCTL_PUBLISH_TIMEOUT", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    publish_timeout: Option<Duration>,
}

impl PublishTimeoutArgs {
    /// The timeout, if one was given.
    pub fn given(&self) -> Option<Duration> {
        self.publish_timeout
    }
}

impl LeaseArgs {
    /// The lease given, or [`DEFAULT_LEASE`].
    pub fn lease(&self) -> Duration {
        self.lease.unwrap_or(DEFAULT_LEASE)
    }

    /// The publish timeout given, or half the lease.
    pub fn publish_timeout(&self) -> Duration {
        self.publish.given().unwrap_or(self.lease() / 2)
    }

    /// Whether either was given.
    pub fn given(&self) -> bool {
        self.lease.is_some() || self.publish.given().is_some()
    }
}

/// What each event is sent as: `relay` and `replay` use it.
#[derive(Debug, Clone, Args)]
pub struct FormatArgs {
    /// What each event is sent as: `document` (outboxctl's JSON document) or `cloudevents`
    /// (CloudEvents 1.0).
    ///
    /// With `cloudevents` (docs/sinks/cloudevents.md): id the idempotency key, type the event
    /// type, subject AGGREGATE_TYPE/AGGREGATE_ID, time created_at, data the payload byte for byte,
    /// and the extensions outboxid and tenantid. For http(s), kafka, nats, amqp, stdout and file
    /// (redis is refused, exit 2); signing, dedup ids and the other headers stay as they are.
    #[arg(long, env = "OUTBOXCTL_FORMAT", value_enum, default_value_t = EventFormat::Document, value_name = "FORMAT")]
    pub format: EventFormat,

    /// With --format cloudevents: how the attributes travel, `binary` or `structured`.
    ///
    /// `binary`: each attribute in a header, the payload as the body. `structured`: the whole
    /// event as one application/cloudevents+json body. http(s) sends either; kafka, nats and amqp
    /// only binary; stdout and file only structured (one JSON object per line). A mode the sink
    /// does not send is refused (exit 2) [default: binary; structured for stdout and file].
    #[arg(
        long,
        env = "OUTBOXCTL_CLOUDEVENTS_MODE",
        value_enum,
        value_name = "MODE"
    )]
    pub cloudevents_mode: Option<CloudEventsMode>,

    /// With --format cloudevents: the `source` attribute, a URI-reference, e.g.
    /// https://shop.example.com/orders [default: /outboxctl/DATABASE/SCHEMA].
    #[arg(
        long,
        env = "OUTBOXCTL_CLOUDEVENTS_SOURCE",
        value_name = "URI-REFERENCE"
    )]
    pub cloudevents_source: Option<String>,
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum EventFormat {
    Document,
    Cloudevents,
}

/// `--cloudevents-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CloudEventsMode {
    Binary,
    Structured,
}

/// How the relay retries an event: `relay` uses them, `doctor` checks them (the retry horizon).
#[derive(Debug, Clone, Args)]
pub struct RetryArgs {
    /// Attempts before a row is dead-lettered. A sink outage (the sink took no event of a batch)
    /// counts none: the rows are given back untouched.
    #[arg(long, env = "OUTBOXCTL_MAX_ATTEMPTS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_attempts: u32,

    #[command(flatten)]
    pub backoff: BackoffArgs,
}

/// How long to wait before trying a failed publish again: the relay's retries (in
/// [`RetryArgs`]) and `replay`'s.
#[derive(Debug, Clone, Args)]
pub struct BackoffArgs {
    /// Backoff after the first failure; doubles per attempt, with jitter.
    #[arg(long, env = "OUTBOXCTL_BACKOFF_BASE", default_value = "1s", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub backoff_base: Duration,

    /// Upper bound of the backoff.
    #[arg(long, env = "OUTBOXCTL_BACKOFF_MAX", default_value = "5m", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub backoff_max: Duration,
}

/// Relay ready events to a sink: `--once` for cron, or as a daemon.
///
/// Claims ready rows with FOR UPDATE SKIP LOCKED, publishes them, marks them published, retries
/// failures with capped exponential backoff and jitter, and dead-letters after --max-attempts.
/// Delivery is at least once with a stable dedup id (the idempotency key). Events are not
/// ordered unless `outboxctl ordering enable` switches on per-key order for their aggregate type
/// (in the database, for every relay). Any number of relays may run at once, including `--once`
/// beside a daemon.
///
/// Exit codes with --once: 0 done, whatever the events' outcomes: also when events were retried
/// or dead-lettered (a dead letter is handled, parked for `outboxctl dead`; alert on the
/// summary's `dead_lettered` or on `stats`), and when stdout was closed by its reader; 3 the
/// database was unreachable at start, or kept failing for --connect-timeout mid-run (a lost
/// connection or a server restart is reconnected); 5 the sink failed every publish attempt of the run, or was
/// unavailable (the rows were given back untouched), or (also as a daemon) a local consumer read
/// slower than the lease allows.
///
/// Signals: SIGTERM or SIGINT stops claiming and finishes the publishes in flight (a second one
/// exits at once); SIGHUP makes the file sink reopen its path, for logrotate (rename the file,
/// then `kill -HUP`: the next batch goes to the new file), and is otherwise ignored.
///
/// Examples:
///
/// outboxctl relay --once --sink stdout
///
/// outboxctl relay --sink https://hooks.example.com/events --concurrency 32
#[derive(Debug, Args)]
pub struct RelayArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub sink: SinkArgs,

    #[command(flatten)]
    pub format: FormatArgs,

    /// Drain what is ready now, print a summary, exit.
    ///
    /// A lost connection or a server restart mid-run is reconnected; the run exits 3 when the
    /// database stays unreachable for --connect-timeout.
    #[arg(long, env = "OUTBOXCTL_ONCE", value_parser = FalseyValueParser::new())]
    pub once: bool,

    /// How claims are settled. `lease`: claim commits a lease, publish runs outside any
    /// transaction, a fenced settle follows (for slow or remote sinks). `tx`: claim, publish and
    /// mark in one transaction that stays open during the publish (fewer writes per event).
    /// `log`: while `outboxctl log enable` is on, read the outbox as a log between
    /// transaction-id snapshots, one reader at a time, with no write per published event.
    /// `auto`: log while log mode is on; otherwise tx for stdout, file, null, Redis and Kafka (a
    /// batch is published within one --publish-timeout), lease for HTTP, NATS and RabbitMQ (a
    /// publish per event: a slow sink would keep the transaction open up to the lease). tx and
    /// lease refuse to start while log mode is on, and log while it is off.
    #[arg(long, env = "OUTBOXCTL_MODE", value_enum, default_value_t = RelayMode::Auto)]
    pub mode: RelayMode,

    /// Rows claimed per batch.
    #[arg(long, env = "OUTBOXCTL_BATCH_SIZE", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=50_000))]
    pub batch_size: u32,

    /// Bytes claimed per batch, at most (payload and headers, e.g. 16MiB, 512KiB): a batch stops
    /// at --batch-size rows or at this many bytes, whichever comes first, so the relay's memory
    /// stays within a small multiple of it. An event larger than this is claimed alone.
    #[arg(long, env = "OUTBOXCTL_BATCH_BYTES", default_value = "16MiB", value_parser = crate::size::parse_nonzero_size, value_name = "SIZE")]
    pub batch_bytes: u64,

    /// Publishes in flight at once within a batch.
    #[arg(long, env = "OUTBOXCTL_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,

    /// Batches in flight at once (1-4): the next batch is claimed while the previous one
    /// publishes, when that one's claim came back full. 1 claims, publishes and settles one batch
    /// after another. A relay killed mid-batch re-sends at most this many batches [default: 2;
    /// 1 for stdout, file and null (a local write leaves nothing to overlap)]. For kafka:// the
    /// next claim waits until the previous one has returned, so a key's events keep their order.
    /// In log mode: pages, each read on from the one before and settled after it [default: 2
    /// for every sink].
    // 4: the relay's MAX_PIPELINE_DEPTH (a test in cmd::relay keeps them equal; clap types import
    // nothing of the layers below).
    #[arg(long, env = "OUTBOXCTL_PIPELINE_DEPTH", value_parser = clap::value_parser!(u32).range(1..=4), value_name = "N")]
    pub pipeline_depth: Option<u32>,

    #[command(flatten)]
    pub lease: LeaseArgs,

    #[command(flatten)]
    pub retry: RetryArgs,

    /// Daemon: look for work at least this often even without a notification.
    #[arg(long, env = "OUTBOXCTL_POLL_INTERVAL", default_value = "5s", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub poll_interval: Duration,

    /// On SIGTERM/SIGINT, wait this long for in-flight publishes before giving up on them.
    #[arg(long, env = "OUTBOXCTL_SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = parse_duration, value_name = "DURATION")]
    pub shutdown_timeout: Duration,

    /// With --once: stop after about this many events.
    #[arg(long, env = "OUTBOXCTL_MAX_EVENTS", requires = "once")]
    pub max_events: Option<u64>,

    /// With --once: stop claiming after this long.
    #[arg(long, env = "OUTBOXCTL_MAX_DURATION", requires = "once", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub max_duration: Option<Duration>,

    #[command(flatten)]
    pub sink_options: SinkOptionArgs,

    /// Let the relay's own session commit asynchronously (synchronous_commit=off). A mark lost in
    /// a server crash only causes a re-publish with the same dedup id.
    #[arg(long, env = "OUTBOXCTL_ASYNC_COMMIT", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub async_commit: bool,

    /// Daemon: serve Prometheus metrics (GET /metrics) and probes (GET /livez: the loop makes
    /// progress; GET /readyz: the database answers and the sink is not in an outage) on this
    /// address, e.g. 0.0.0.0:9464. Off by default. Not with --once (a run that exits is not
    /// scraped: use `stats` for cron). A port in use fails the start (exit 1).
    #[arg(long, env = "OUTBOXCTL_METRICS_ADDR", value_name = "HOST:PORT", value_parser = parse_listen_addr, conflicts_with = "once")]
    pub metrics_addr: Option<String>,

    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RelayMode {
    Auto,
    Lease,
    Tx,
    Log,
}

#[cfg(test)]
mod tests {
    use super::{DEFAULT_LEASE, DEFAULT_SINK};

    /// The long help of one of `command`'s flags.
    fn help(command: &str, flag: &str) -> String {
        let cli = crate::cli::command();
        let cmd = cli.find_subcommand(command).expect("the subcommand");
        let arg = cmd.get_arguments().find(|a| a.get_id() == flag);
        let arg = arg.expect("the flag");
        arg.get_long_help()
            .or(arg.get_help())
            .expect("help")
            .to_string()
    }

    /// The defaults are in the help as words (the flags have none of clap's, so that doctor can
    /// tell a given value from none): the words and the constants the relay uses must agree.
    #[test]
    fn the_help_states_the_defaults_the_relay_uses() {
        let lease = format!("[default: {}]", humantime::format_duration(DEFAULT_LEASE));
        let sink = format!("[default: {DEFAULT_SINK}]");
        for command in ["relay", "doctor"] {
            assert!(help(command, "lease").contains(&lease), "{command} --lease");
            assert!(help(command, "sink").contains(&sink), "{command} --sink");
            let timeout = help(command, "publish_timeout");
            assert!(timeout.contains("[default: half the lease]"), "{command}");
        }
    }
}
