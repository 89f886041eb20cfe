//! The command line, as clap derive types. Nothing here does I/O: `config` turns these into
//! validated settings and the command modules act on those.

use std::path::PathBuf;
use std::time::Duration;

// On/off flags read their environment variable with FalseyValueParser: unset, empty, 0, false, no
// and off are off; anything else (1, true, yes) is on. clap's default accepts only true/false.
use clap::builder::FalseyValueParser;
use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};

/// `--version`: the package version, the commit and the build date (from `build.rs`; `unknown`
/// when built outside a git checkout).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("OUTBOXCTL_GIT_COMMIT"),
    ", built ",
    env!("OUTBOXCTL_BUILD_DATE"),
    ")"
);

/// Operate a transactional outbox on PostgreSQL: migrate, publish, relay, inspect, prune.
///
/// A service writes its business rows and an `outbox` row in one transaction; outboxctl does
/// everything after that.
///
/// Example: outboxctl demo (the whole tool in a scratch schema; needs only PostgreSQL)
#[derive(Debug, Parser)]
#[command(
    name = "outboxctl",
    version = VERSION,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,

    #[command(flatten)]
    pub shared: SharedArgs,

    #[command(subcommand)]
    pub command: Command,
}

/// The connection and output flags of the subcommands, also accepted before the subcommand
/// (`outboxctl --schema x stats`). [`parse`] resolves them into the subcommand's own
/// [`DatabaseArgs`] and [`OutputArgs`]: a flag after the subcommand wins over one before it,
/// which wins over the environment variable, which wins over the default.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Shared options (also taken after the command, which wins)")]
pub struct SharedArgs {
    /// PostgreSQL URL, for every command that connects (see its --help).
    #[arg(long = "database-url", id = "shared_database_url", value_name = "URL")]
    pub database_url: Option<String>,

    /// Schema holding the outbox tables, for every command that connects.
    #[arg(long = "schema", id = "shared_schema", value_name = "NAME")]
    pub schema: Option<String>,

    /// Give up connecting after this long, for every command that connects.
    #[arg(long = "connect-timeout", id = "shared_connect_timeout", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub connect_timeout: Option<Duration>,

    /// Print JSON on stdout, for every command that has --json.
    #[arg(long = "json", id = "shared_json")]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Migrate(MigrateArgs),
    Publish(PublishArgs),
    Relay(RelayArgs),
    Stats(StatsArgs),
    #[command(visible_alias = "dlq")]
    Dead(DeadArgs),
    Requeue(RequeueArgs),
    Ordering(OrderingArgs),
    #[command(visible_alias = "event")]
    Events(EventsArgs),
    Prune(PruneArgs),
    Doctor(DoctorArgs),
    Completions(CompletionsArgs),
    Demo(DemoArgs),
    Bench(BenchArgs),
}

/// Logging options (to stderr; stdout carries data only).
#[derive(Debug, Args, Clone)]
pub struct LogArgs {
    /// More of outboxctl's own log output (-v info, -vv debug, -vvv trace; other crates stay off).
    /// `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, env = "OUTBOXCTL_VERBOSE")]
    pub verbose: u8,

    /// Only errors: no log lines below error and no summary lines ("inserted event 42"). Data
    /// (tables, --json, relayed events) is still printed.
    #[arg(
        short,
        long,
        global = true,
        env = "OUTBOXCTL_QUIET",
        value_parser = FalseyValueParser::new(),
        conflicts_with = "verbose"
    )]
    pub quiet: bool,

    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "OUTBOXCTL_LOG_FORMAT")]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Where the outbox lives.
#[derive(Debug, Args, Clone)]
pub struct DatabaseArgs {
    /// PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq
    /// variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database_url: Option<String>,

    /// Schema holding the outbox tables (created by `migrate` if missing).
    #[arg(
        long,
        env = "OUTBOXCTL_SCHEMA",
        default_value = "public",
        value_name = "NAME"
    )]
    pub schema: String,

    /// Give up connecting after this long (e.g. 5s).
    #[arg(long, env = "OUTBOXCTL_CONNECT_TIMEOUT", default_value = "10s", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub connect_timeout: Duration,

    /// What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode
    /// (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per
    /// connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any
    /// PgBouncer version): every statement in a transaction of its own that sets the schema and
    /// the session's settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and
    /// requeue run this way (other commands exit 2).
    #[arg(
        long,
        env = "OUTBOXCTL_POOLER",
        value_enum,
        default_value_t = PoolerArg::None,
        value_name = "KIND"
    )]
    pub pooler: PoolerArg,
}

/// `--pooler`: see [`crate::config::Pooler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PoolerArg {
    /// PostgreSQL itself (or a pooler that passes the `options` startup parameter on).
    None,
    /// A pooler in session mode.
    Session,
    /// A pooler in transaction mode.
    Transaction,
}

/// Machine-readable output.
#[derive(Debug, Args, Clone, Copy)]
pub struct OutputArgs {
    /// Print JSON on stdout instead of a table.
    #[arg(long, env = "OUTBOXCTL_JSON", value_parser = FalseyValueParser::new())]
    pub json: bool,
}

/// Create or upgrade the outbox schema (safe when several replicas run it at once).
///
/// Applies the migrations embedded in this binary under an advisory lock: when ten replicas start
/// together one applies them and the rest wait, then find nothing to do; all exit 0.
///
/// Example: outboxctl migrate --schema events
#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// List applied and pending migrations; change nothing.
    #[arg(long, visible_alias = "dry-run", env = "OUTBOXCTL_MIGRATE_STATUS", value_parser = FalseyValueParser::new())]
    pub status: bool,

    /// Change nothing; exit 0 when the schema is up to date, 6 when migrations are pending
    /// (also a seed-era table `migrate` would adopt, or no outbox at all), 2 when existing
    /// tables conflict with migration 1. For init containers and deploy pipelines.
    #[arg(long, env = "OUTBOXCTL_MIGRATE_CHECK", value_parser = FalseyValueParser::new())]
    pub check: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}

// Each example is its own paragraph: clap joins the lines of a paragraph into one.
/// Insert events: one from flags, or many from a JSON-lines file.
///
/// Inserts are idempotent on the idempotency key: a row whose key already exists is skipped and
/// counted as a duplicate. Bulk mode is all-or-nothing per run: every line goes in one
/// transaction, so a bad line (reported with its line number) leaves the table as it was.
///
/// Examples:
///
/// outboxctl publish --event-type order.placed --aggregate-type order --aggregate-id 42 --payload '{"total":1200}'
///
/// outboxctl publish --event-type reminder.due --aggregate-type user --aggregate-id 7 --payload @body.json --delay 15m
///
/// outboxctl publish --file events.jsonl
#[derive(Debug, Args)]
pub struct PublishArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Bulk mode: a JSON-lines file (`-` for stdin). Keys per line: event_type, aggregate_type,
    /// aggregate_id, payload, and optionally tenant_id, headers, idempotency_key, available_at
    /// (RFC 3339) or delay (e.g. "5m").
    #[arg(long, short = 'f', env = "OUTBOXCTL_PUBLISH_FILE", value_name = "PATH",
          conflicts_with_all = ["event_type", "aggregate_type", "aggregate_id", "payload", "headers", "idempotency_key", "tenant", "delay", "at"])]
    pub file: Option<PathBuf>,

    /// Event type, e.g. order.placed.
    #[arg(long, env = "OUTBOXCTL_EVENT_TYPE", required_unless_present = "file")]
    pub event_type: Option<String>,

    /// Aggregate type, e.g. order.
    #[arg(
        long,
        env = "OUTBOXCTL_AGGREGATE_TYPE",
        required_unless_present = "file"
    )]
    pub aggregate_type: Option<String>,

    /// Aggregate id, e.g. 42.
    #[arg(long, env = "OUTBOXCTL_AGGREGATE_ID", required_unless_present = "file")]
    pub aggregate_id: Option<String>,

    /// Tenant uuid [default: 00000000-0000-0000-0000-000000000000, the nil uuid].
    #[arg(long, env = "OUTBOXCTL_TENANT", value_name = "UUID")]
    pub tenant: Option<String>,

    /// Payload as JSON, or @PATH to read it from a file, or @- to read it from stdin.
    #[arg(
        long,
        env = "OUTBOXCTL_PAYLOAD",
        required_unless_present = "file",
        value_name = "JSON|@PATH|@-"
    )]
    pub payload: Option<String>,

    /// A header to store with the event (repeatable): --header schema-version=1. In the
    /// environment variable, one KEY=VALUE per line.
    #[arg(
        long = "header",
        value_name = "KEY=VALUE",
        env = "OUTBOXCTL_HEADERS",
        value_delimiter = '\n'
    )]
    pub headers: Vec<String>,

    /// Idempotency key [default: a fresh random uuid, so every call inserts a new event].
    #[arg(long, env = "OUTBOXCTL_IDEMPOTENCY_KEY", value_name = "KEY")]
    pub idempotency_key: Option<String>,

    /// Deliver no earlier than this long from now (database clock), e.g. 5m.
    #[arg(long, env = "OUTBOXCTL_DELAY", value_parser = parse_duration, conflicts_with = "at", value_name = "DURATION")]
    pub delay: Option<Duration>,

    /// Deliver no earlier than this time (RFC 3339, e.g. 2026-12-01T09:00:00Z).
    #[arg(long, env = "OUTBOXCTL_AT", value_parser = parse_timestamp, value_name = "TIME")]
    pub at: Option<chrono::DateTime<chrono::Utc>>,

    /// Rows per INSERT statement in bulk mode.
    #[arg(long, env = "OUTBOXCTL_PUBLISH_BATCH_SIZE", default_value_t = 5000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: u32,

    /// Bytes of JSON lines per INSERT statement in bulk mode, at most (e.g. 16MiB): a batch ends
    /// at --batch-size lines or this many bytes, whichever comes first, so memory stays bounded
    /// by it and the longest line. A longer line is inserted alone.
    #[arg(long, env = "OUTBOXCTL_PUBLISH_BATCH_BYTES", default_value = "16MiB", value_parser = crate::size::parse_nonzero_size, value_name = "SIZE")]
    pub batch_bytes: u64,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// The relay's `--lease` by default (also what `doctor` checks when only some relay settings are
/// given).
pub const DEFAULT_LEASE: &str = "30s";

/// How the relay retries an event: `relay` uses them, `doctor` checks them (the retry horizon).
#[derive(Debug, Clone, Args)]
pub struct RetryArgs {
    /// Attempts before a row is dead-lettered. A sink outage (the sink took no event of a batch)
    /// counts none: the rows are given back untouched.
    #[arg(long, env = "OUTBOXCTL_MAX_ATTEMPTS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_attempts: u32,

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

    /// Where to publish: stdout (refused, exit 2, when stdout is /dev/null or closed: null
    /// discards events on purpose), null, file:PATH, http(s)://URL,
    /// nats://HOST:PORT?subject=outbox.{event_type} (JetStream), or
    /// redis://HOST:PORT[/DB]?stream=outbox[&maxlen=N] (Streams), or
    /// amqp://USER:PASS@HOST:PORT/VHOST?exchange=X&routing_key={event_type} (RabbitMQ), or
    /// kafka://HOST:PORT[,HOST:PORT]?topic=outbox.event.{aggregate_type}&key={aggregate_id}
    /// (Kafka, idempotent producer). Subjects, stream names, routing keys, topics and keys take
    /// the placeholders of --http-header.
    #[arg(
        long,
        env = "OUTBOXCTL_SINK",
        default_value = "stdout",
        value_name = "SINK"
    )]
    pub sink: String,

    /// Drain what is ready now, print a summary, exit.
    ///
    /// A lost connection or a server restart mid-run is reconnected; the run exits 3 when the
    /// database stays unreachable for --connect-timeout.
    #[arg(long, env = "OUTBOXCTL_ONCE", value_parser = FalseyValueParser::new())]
    pub once: bool,

    /// How claims are settled. `lease`: claim commits a lease, publish runs outside any
    /// transaction, a fenced settle follows (for slow or remote sinks). `tx`: claim, publish and
    /// mark in one transaction that stays open during the publish (fewer writes per event).
    /// `auto`: tx for stdout, file, null, Redis and Kafka (a batch is published within one
    /// --publish-timeout), lease for HTTP, NATS and RabbitMQ (a publish per event: a slow sink
    /// would keep the transaction open up to the lease).
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
    // 4: the relay's MAX_PIPELINE_DEPTH (a test in cmd::relay keeps them equal; clap types import
    // nothing of the layers below).
    #[arg(long, env = "OUTBOXCTL_PIPELINE_DEPTH", value_parser = clap::value_parser!(u32).range(1..=4), value_name = "N")]
    pub pipeline_depth: Option<u32>,

    /// How long a claim is held before another relay may take the row.
    #[arg(long, env = "OUTBOXCTL_LEASE", default_value = DEFAULT_LEASE, value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub lease: Duration,

    /// Timeout of one publish (a stdout or file write too); must be shorter than --lease
    /// [default: half the lease].
    #[arg(long, env = "OUTBOXCTL_PUBLISH_TIMEOUT", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub publish_timeout: Option<Duration>,

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
}

/// Backlog, lag, in-flight, dead letters and throughput.
///
/// Reads only pending rows, dead letters and the last hour of the published index: it stays fast
/// however much history the table keeps.
///
/// Example: outboxctl stats --by event-type --json
#[derive(Debug, Args)]
pub struct StatsArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Break the figures down by a column.
    #[arg(long, env = "OUTBOXCTL_STATS_BY", value_enum)]
    pub by: Option<StatsBy>,

    /// Output format: human (a table), json (the same as --json) or prometheus (text exposition,
    /// for node_exporter's textfile collector) [default: human, json with --json]. An explicit
    /// --format wins over --json.
    #[arg(
        long,
        env = "OUTBOXCTL_STATS_FORMAT",
        value_enum,
        value_name = "FORMAT"
    )]
    pub format: Option<StatsFormat>,

    /// Write the output to this file instead of stdout, atomically: a temporary file in the same
    /// directory, renamed over PATH, so a reader (node_exporter) never sees half a file. With
    /// --format prometheus or json.
    #[arg(long = "output", env = "OUTBOXCTL_STATS_OUTPUT", value_name = "PATH")]
    pub output_file: Option<PathBuf>,

    #[command(flatten)]
    pub output: OutputArgs,

    // Last: its help heading applies to every argument after it.
    #[command(flatten)]
    pub check: StatsCheckArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatsFormat {
    Human,
    Json,
    Prometheus,
}

/// `stats --check`: a Nagios-style plugin. A threshold trips when the value is greater than it.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Check (Nagios plugin: exit 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN)")]
pub struct StatsCheckArgs {
    /// Compare the totals with the thresholds below and print one Nagios status line with
    /// performance data (or --json). Exit codes: 0 OK, 1 WARNING, 2 CRITICAL, 3 UNKNOWN (the
    /// database unreachable, bad arguments, or any other error), instead of the general ones.
    /// Needs at least one threshold.
    #[arg(long, env = "OUTBOXCTL_STATS_CHECK", value_parser = FalseyValueParser::new())]
    pub check: bool,

    /// WARNING when the lag is longer than this, e.g. 1m. The lag is how late the most overdue
    /// pending event is: a ready event counts from when it fell due (available_at); one waiting
    /// for a retry, or being retried, from when it first fell due (taken as its created_at: for
    /// an event published with a delay that has since failed, the delay counts too); one
    /// scheduled for later and never tried does not count.
    #[arg(long, env = "OUTBOXCTL_WARN_LAG", value_parser = parse_duration, value_name = "DURATION", requires = "check")]
    pub warn_lag: Option<Duration>,

    /// CRITICAL when the lag (see --warn-lag) is longer than this, e.g. 5m.
    #[arg(long, env = "OUTBOXCTL_CRIT_LAG", value_parser = parse_duration, value_name = "DURATION", requires = "check")]
    pub crit_lag: Option<Duration>,

    /// WARNING when more than N events are dead-lettered (0: any dead letter).
    #[arg(
        long,
        env = "OUTBOXCTL_WARN_DEAD",
        value_name = "N",
        requires = "check"
    )]
    pub warn_dead: Option<u64>,

    /// CRITICAL when more than N events are dead-lettered.
    #[arg(
        long,
        env = "OUTBOXCTL_CRIT_DEAD",
        value_name = "N",
        requires = "check"
    )]
    pub crit_dead: Option<u64>,

    /// WARNING when more than N events are due and unpublished (ready + in flight; scheduled
    /// events are not backlog until due).
    #[arg(
        long,
        env = "OUTBOXCTL_WARN_BACKLOG",
        value_name = "N",
        requires = "check"
    )]
    pub warn_backlog: Option<u64>,

    /// CRITICAL when more than N events are due and unpublished (ready + in flight).
    #[arg(
        long,
        env = "OUTBOXCTL_CRIT_BACKLOG",
        value_name = "N",
        requires = "check"
    )]
    pub crit_backlog: Option<u64>,

    /// WARNING when more than N pending events have failed at least once (retrying).
    #[arg(
        long,
        env = "OUTBOXCTL_WARN_RETRYING",
        value_name = "N",
        requires = "check"
    )]
    pub warn_retrying: Option<u64>,

    /// CRITICAL when more than N pending events have failed at least once (retrying).
    #[arg(
        long,
        env = "OUTBOXCTL_CRIT_RETRYING",
        value_name = "N",
        requires = "check"
    )]
    pub crit_retrying: Option<u64>,
}

/// Tell what is wrong with an outbox before it hurts: one PASS / WARN / FAIL line per check.
///
/// Checks: migrations; each index and the NOTIFY trigger (present, valid); dead tuples, table and
/// index bloat, last (auto)vacuum and analyze, autovacuum settings; the xmin horizon (transactions,
/// prepared transactions and replication slots holding back vacuum); relay daemons connected; dead
/// letters and retrying events; the lag (the most overdue event); whether prune runs; and, when
/// given the relay's settings, whether they contradict each other or the sink (a NATS stream's
/// duplicate window shorter than the retry horizon). Reads only.
///
/// Every check that can run does: one whose reads fail (a missing privilege, someone else's
/// `outbox` table) is a FAIL with the database's reason, in the text and in --json.
///
/// Exit codes: 0 every check passed, 1 a warning (and no failure), 2 a failure, 3 the database
/// could not be reached.
///
/// Example: outboxctl doctor --lease 30s --publish-timeout 10s --sink 'nats://127.0.0.1:4222?subject=outbox.{event_type}'
#[derive(Debug, Args)]
pub struct DoctorArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// WARN when the lag is longer than this: how late the most overdue pending event is, as
    /// `stats --check` counts it (an event scheduled for later and never tried is not late).
    #[arg(long, env = "OUTBOXCTL_DOCTOR_WARN_LAG", default_value = "5m", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub warn_lag: Duration,

    /// FAIL when the lag (see --warn-lag) is longer than this.
    #[arg(long, env = "OUTBOXCTL_DOCTOR_CRIT_LAG", default_value = "1h", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub crit_lag: Duration,

    /// WARN when a transaction, prepared transaction or replication slot has held back vacuum's
    /// xmin horizon for longer than this.
    #[arg(long, env = "OUTBOXCTL_DOCTOR_MAX_XACT_AGE", default_value = "5m", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub max_xact_age: Duration,

    /// WARN when published events older than this are still in the table (prune is not running).
    #[arg(long, env = "OUTBOXCTL_DOCTOR_RETENTION", default_value = "30d", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub retention: Duration,

    #[command(flatten)]
    pub output: OutputArgs,

    /// The relay's --lease, to check against --publish-timeout (the relay's variable)
    /// [default: the relay's, 30s].
    #[arg(long, env = "OUTBOXCTL_LEASE", value_parser = parse_nonzero_duration, value_name = "DURATION", help_heading = "Relay settings to check")]
    pub lease: Option<Duration>,

    /// The relay's --publish-timeout [default: half the lease].
    #[arg(long, env = "OUTBOXCTL_PUBLISH_TIMEOUT", value_parser = parse_nonzero_duration, value_name = "DURATION", help_heading = "Relay settings to check")]
    pub publish_timeout: Option<Duration>,

    /// The relay's --sink: for nats://, the stream capturing the subject must keep duplicates for
    /// at least the retry horizon (placeholders in the subject are filled with a sample value).
    #[arg(
        long,
        env = "OUTBOXCTL_SINK",
        value_name = "SINK",
        help_heading = "Relay settings to check"
    )]
    pub sink: Option<String>,

    /// The relay's retry settings, for the retry horizon.
    #[command(flatten, next_help_heading = "Relay settings to check")]
    pub retry: RetryArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatsBy {
    EventType,
    Tenant,
    AggregateType,
}

/// Print a shell completion script.
///
/// Example: outboxctl completions bash > /etc/bash_completion.d/outboxctl
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// Show the tool end to end in a scratch schema, then drop it.
///
/// Migrates a scratch schema, publishes events (one delayed), relays them to stdout, shows stats,
/// and cleans up. Needs only PostgreSQL.
///
/// Example: outboxctl demo
#[derive(Debug, Args)]
pub struct DemoArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,
}

/// Asking before destructive changes.
#[derive(Debug, Args, Clone, Copy)]
pub struct ConfirmArgs {
    /// Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI):
    /// without it the command refuses with exit code 2 and changes nothing.
    #[arg(long, short = 'y', env = "OUTBOXCTL_YES", value_parser = FalseyValueParser::new())]
    pub yes: bool,
}

/// Who is acting, for the audit trail (`outbox_audit`).
#[derive(Debug, Args, Clone, Default)]
pub struct AuditArgs {
    /// Who runs this, recorded in the audit row beside the database role, e.g. alice or
    /// deploy-bot [default: $USER@hostname].
    #[arg(long, env = "OUTBOXCTL_ACTOR", value_name = "NAME")]
    pub actor: Option<String>,
}

/// Which events to act on. All given filters must match (AND). Text is always bound as a
/// parameter, never pasted into SQL.
#[derive(Debug, Args, Clone, Default)]
pub struct FilterArgs {
    /// Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the
    /// next character literal (e.g. 'order.*').
    #[arg(long, env = "OUTBOXCTL_FILTER_EVENT_TYPE", value_name = "GLOB")]
    pub event_type: Option<String>,

    /// Tenant uuid.
    #[arg(long, env = "OUTBOXCTL_FILTER_TENANT", value_name = "UUID", value_parser = parse_uuid)]
    pub tenant: Option<uuid::Uuid>,

    /// Aggregate type (exact).
    #[arg(long, env = "OUTBOXCTL_FILTER_AGGREGATE_TYPE", value_name = "TYPE")]
    pub aggregate_type: Option<String>,

    /// Aggregate id (exact).
    #[arg(long, env = "OUTBOXCTL_FILTER_AGGREGATE_ID", value_name = "ID")]
    pub aggregate_id: Option<String>,

    /// Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that
    /// long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`,
    /// when it was created for `events`.
    #[arg(long, env = "OUTBOXCTL_FILTER_SINCE", value_parser = parse_time_or_ago, value_name = "TIME|DURATION")]
    pub since: Option<TimeArg>,

    /// Only events whose time is before this (RFC 3339, or a duration ago); see --since.
    #[arg(long, env = "OUTBOXCTL_FILTER_UNTIL", value_parser = parse_time_or_ago, value_name = "TIME|DURATION")]
    pub until: Option<TimeArg>,

    /// Only events whose last_error contains this text (case-insensitive).
    #[arg(long, env = "OUTBOXCTL_FILTER_ERROR", value_name = "TEXT")]
    pub error: Option<String>,

    /// Only events whose last_error matches this PostgreSQL regular expression (case-sensitive;
    /// start it with (?i) to ignore case), e.g. 'HTTP (502|503)'.
    #[arg(long, env = "OUTBOXCTL_FILTER_ERROR_REGEX", value_name = "REGEX")]
    pub error_regex: Option<String>,
}

/// `--since`/`--until` values; defined in a leaf module, so the SQL layer never needs a CLI type.
pub use crate::when::TimeArg;

/// Dead letters: list, show, discard and export events the relay gave up on.
///
/// A row is dead once the relay has failed it --max-attempts times (dead_lettered_at is set,
/// published_at is not). `outboxctl requeue` sends dead events again.
///
/// Example: outboxctl dead list --event-type 'order.*' --since 1d
#[derive(Debug, Args)]
pub struct DeadArgs {
    #[command(subcommand)]
    pub command: DeadCommand,
}

#[derive(Debug, Subcommand)]
pub enum DeadCommand {
    #[command(visible_alias = "ls")]
    List(DeadListArgs),
    Show(DeadShowArgs),
    #[command(visible_alias = "rm")]
    Discard(DeadDiscardArgs),
    Export(DeadExportArgs),
}

/// Dead-lettered events, newest first: id, type, aggregate, attempts, when, the error's first line.
///
/// Example: outboxctl dead list --error timeout --limit 20
#[derive(Debug, Args)]
pub struct DeadListArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// Show at most this many events (a note on stderr says when more match).
    #[arg(long, env = "OUTBOXCTL_LIST_LIMIT", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub limit: u64,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// A dead letter in full: every column, payload and headers pretty-printed, the whole
/// last_error, and its audit history (requeues, edits, reschedules).
///
/// Example: outboxctl dead show 4711
#[derive(Debug, Args)]
pub struct DeadShowArgs {
    #[command(flatten)]
    pub show: ShowArgs,
}

/// Any event in full, whatever its state: every column, payload and headers pretty-printed, the
/// whole last_error, and its audit history (requeues, edits, reschedules).
///
/// Example: outboxctl events show 4711 --json
#[derive(Debug, Args)]
pub struct EventsShowArgs {
    #[command(flatten)]
    pub show: ShowArgs,
}

/// What `dead show` and `events show` take.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// The event id.
    #[arg(value_parser = clap::value_parser!(i64).range(1..))]
    pub id: i64,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Delete dead-lettered events, by ids or by filters (--all for every one).
///
/// Only rows that are still dead when the DELETE runs are deleted (the state is re-checked in the
/// statement). Works in batches; prints the exact count. Asks for confirmation on a terminal and
/// needs --yes otherwise.
///
/// Example: outboxctl dead discard --event-type 'test.*' --until 30d --yes
#[derive(Debug, Args)]
pub struct DeadDiscardArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Event ids (each must be dead-lettered); not together with filters or --all.
    #[arg(value_parser = clap::value_parser!(i64).range(1..), value_name = "ID")]
    pub ids: Vec<i64>,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// Every dead-lettered event (no filter).
    #[arg(long, env = "OUTBOXCTL_DISCARD_ALL", value_parser = FalseyValueParser::new())]
    pub all: bool,

    /// At most this many events, the most recently dead-lettered first.
    #[arg(long, env = "OUTBOXCTL_DISCARD_LIMIT", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,

    /// Rows deleted per statement (each batch is its own short transaction).
    #[arg(long, env = "OUTBOXCTL_DISCARD_BATCH_SIZE", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: u32,

    /// List what would be discarded; change nothing.
    #[arg(long, env = "OUTBOXCTL_DRY_RUN", value_parser = FalseyValueParser::new())]
    pub dry_run: bool,

    #[command(flatten)]
    pub confirm: ConfirmArgs,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Measure this server: bulk publish, relay drain, SQL ceiling, latency, delayed lateness, prune.
///
/// Runs in a scratch schema on the target server and drops it afterwards. The drain runs this
/// binary's own `relay --once --sink null` processes; latency runs the daemon loop in process.
/// Sizes are flags so a smoke run takes seconds.
///
/// Example: outboxctl bench --events 200000 --relays 2 --json
#[derive(Debug, Args)]
pub struct BenchArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Events in the backlog for publish and drain.
    #[arg(long, env = "OUTBOXCTL_BENCH_EVENTS", default_value_t = 100_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub events: u64,

    /// Rows per claim.
    #[arg(long, env = "OUTBOXCTL_BENCH_BATCH_SIZE", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=50_000))]
    pub batch_size: u32,

    /// Relay processes draining at once (and connections for the SQL ceiling).
    #[arg(long, env = "OUTBOXCTL_BENCH_RELAYS", default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub relays: u32,

    /// Publishes in flight per relay.
    #[arg(long, env = "OUTBOXCTL_BENCH_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,

    /// Relay mode to measure (auto means tx here: the null sink is local).
    #[arg(long, env = "OUTBOXCTL_BENCH_MODE", value_enum, default_value_t = RelayMode::Tx)]
    pub mode: RelayMode,

    /// Offered rate for the latency test, events/s.
    #[arg(long, env = "OUTBOXCTL_BENCH_RATE", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub rate: u32,

    /// How long the latency test offers load.
    #[arg(long, env = "OUTBOXCTL_BENCH_LATENCY_DURATION", default_value = "5s", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub latency_duration: Duration,

    /// Delayed events for the lateness test.
    #[arg(long, env = "OUTBOXCTL_BENCH_DELAYED_EVENTS", default_value_t = 200, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub delayed_events: u64,

    /// Published rows for the prune test (0 skips it).
    #[arg(long, env = "OUTBOXCTL_BENCH_PRUNE_ROWS", default_value_t = 100_000)]
    pub prune_rows: u64,

    /// Keep the scratch schema afterwards (for EXPLAIN and poking around).
    #[arg(long, env = "OUTBOXCTL_BENCH_KEEP_SCHEMA")]
    pub keep_schema: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`.
///
/// The default format has exactly the keys `outboxctl publish --file` reads, including the
/// original idempotency key. `publish` skips a line whose key is still in the table, so discard
/// the exported rows before re-publishing them (or drop the key with jq to publish a new event).
///
/// Example: outboxctl dead export --event-type order.placed > dead.jsonl
#[derive(Debug, Args)]
pub struct DeadExportArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Event ids (each must be dead-lettered); not together with filters.
    #[arg(value_parser = clap::value_parser!(i64).range(1..), value_name = "ID")]
    pub ids: Vec<i64>,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// At most this many events, the most recently dead-lettered first.
    #[arg(long, env = "OUTBOXCTL_EXPORT_LIMIT", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,

    /// `publish`: the keys `publish --file` accepts. `full`: every column (id, attempts,
    /// last_error, times...), for analysis; not accepted by `publish`.
    #[arg(long, env = "OUTBOXCTL_EXPORT_FORMAT", value_enum, default_value_t = ExportFormat::Publish)]
    pub format: ExportFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ExportFormat {
    Publish,
    Full,
}

/// Send dead-lettered events again, by ids or by filters (--all for every one).
///
/// Resets dead_lettered_at, the lease (locked_until, claim_token), attempt_count (unless
/// --keep-attempts) and available_at (now, or now + --delay). last_error is kept until the relay's
/// next attempt. Each requeue is recorded in the audit table `outbox_audit` (actor, database role,
/// when, why, and the row's previous dead_lettered_at, attempt_count and last_error); `events
/// show` lists it.
///
/// Safe while relays run: each batch is one statement that re-checks that the row is still dead,
/// so a row is requeued at most once and relays claim it like any ready row.
///
/// Examples:
///   outboxctl requeue 4711 4712
///   outboxctl requeue --event-type 'order.*' --error timeout --delay 5m --reason 'broker fixed'
///   outboxctl requeue --all --dry-run
#[derive(Debug, Args)]
#[command(
    verbatim_doc_comment,
    about = "Send dead-lettered events again, by ids or by filters (--all for every one)"
)]
pub struct RequeueArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Event ids (each must be dead-lettered); not together with filters or --all.
    #[arg(value_parser = clap::value_parser!(i64).range(1..), value_name = "ID")]
    pub ids: Vec<i64>,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// Every dead-lettered event (no filter).
    #[arg(long, env = "OUTBOXCTL_REQUEUE_ALL", value_parser = FalseyValueParser::new())]
    pub all: bool,

    /// At most this many events, the most recently dead-lettered first.
    #[arg(long, env = "OUTBOXCTL_REQUEUE_LIMIT", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,

    /// Keep attempt_count instead of resetting it to 0 (the relay then dead-letters the event
    /// again after one more failure).
    #[arg(long, env = "OUTBOXCTL_KEEP_ATTEMPTS", value_parser = FalseyValueParser::new())]
    pub keep_attempts: bool,

    /// Make the events due this long from now (database clock) instead of now, e.g. 10m.
    #[arg(long, env = "OUTBOXCTL_REQUEUE_DELAY", value_parser = parse_duration, value_name = "DURATION")]
    pub delay: Option<Duration>,

    /// Why, recorded in the audit table.
    #[arg(long, env = "OUTBOXCTL_REQUEUE_REASON", value_name = "TEXT")]
    pub reason: Option<String>,

    /// Rows updated per statement (each batch is its own short transaction).
    #[arg(long, env = "OUTBOXCTL_REQUEUE_BATCH_SIZE", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: u32,

    /// List exactly what would be requeued; change nothing.
    #[arg(long, env = "OUTBOXCTL_DRY_RUN", value_parser = FalseyValueParser::new())]
    pub dry_run: bool,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Ordered delivery per key (tenant_id, aggregate_type, aggregate_id), switched on in the database.
///
/// Every relay on the outbox reads the switch (within 1 s of a change) and then publishes the
/// events of each key of an ordered aggregate type one claim at a time, in id order: a key's
/// event is published only after every earlier pending event of that key was. Keys are claimed
/// many at a time and published in parallel. A failing head holds only its key; once it is
/// dead-lettered the key is blocked (--on-dead block, the default) until `requeue` or
/// `ordering skip`, or moves on (--on-dead skip).
///
/// Examples:
///   outboxctl ordering enable --aggregate-type order --aggregate-type invoice
///   outboxctl ordering status --json
///   outboxctl ordering skip 4711 --reason 'customer deleted'
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct OrderingArgs {
    #[command(subcommand)]
    pub command: OrderingCommand,
}

#[derive(Debug, Subcommand)]
pub enum OrderingCommand {
    Enable(OrderingEnableArgs),
    Disable(OrderingDisableArgs),
    Status(OrderingStatusArgs),
    Skip(OrderingSkipArgs),
}

/// What a dead-lettered head does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnDeadArg {
    /// The key waits until the head is requeued or skipped.
    Block,
    /// The rest of the key flows on past the dead head.
    Skip,
}

/// Switch ordered delivery on, for every aggregate type or the named ones (or change --on-dead).
///
/// Running relays honour it within 1 s; rows they claimed before are published as claimed.
///
/// Example: outboxctl ordering enable --aggregate-type order --aggregate-type invoice --on-dead block
#[derive(Debug, Args)]
pub struct OrderingEnableArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// An aggregate type to order (repeatable); without it every type is ordered.
    #[arg(
        long = "aggregate-type",
        env = "OUTBOXCTL_ORDERING_TYPES",
        value_delimiter = ',',
        value_name = "TYPE"
    )]
    pub aggregate_types: Vec<String>,

    /// What a dead-lettered head does to its key.
    #[arg(long, env = "OUTBOXCTL_ON_DEAD", value_enum, default_value_t = OnDeadArg::Block)]
    pub on_dead: OnDeadArg,

    /// Why, recorded in the audit table.
    #[arg(long, env = "OUTBOXCTL_ORDERING_REASON", value_name = "TEXT")]
    pub reason: Option<String>,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Switch ordered delivery off, for the named aggregate types or (without --aggregate-type)
/// entirely.
///
/// Example: outboxctl ordering disable --aggregate-type invoice
#[derive(Debug, Args)]
pub struct OrderingDisableArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// An aggregate type to stop ordering (repeatable; `*` is the every-type switch); without it
    /// ordering is switched off for every type.
    #[arg(
        long = "aggregate-type",
        env = "OUTBOXCTL_ORDERING_TYPES",
        value_delimiter = ',',
        value_name = "TYPE"
    )]
    pub aggregate_types: Vec<String>,

    /// Why, recorded in the audit table.
    #[arg(long, env = "OUTBOXCTL_ORDERING_REASON", value_name = "TEXT")]
    pub reason: Option<String>,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Which aggregate types are ordered, their --on-dead, and how many keys are blocked.
///
/// Example: outboxctl ordering status --json
#[derive(Debug, Args)]
pub struct OrderingStatusArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Skip a key's head so the rest of the key flows: a dead head that blocks its key stops
/// blocking it; a pending head (not in flight) is dead-lettered without blocking. Audited.
///
/// Example: outboxctl ordering skip 4711 --reason 'poison payload, fixed downstream'
#[derive(Debug, Args)]
pub struct OrderingSkipArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// The head's event id.
    #[arg(value_parser = clap::value_parser!(i64).range(1..), value_name = "ID")]
    pub id: i64,

    /// Why, recorded in the audit table.
    #[arg(long, env = "OUTBOXCTL_SKIP_REASON", value_name = "TEXT")]
    pub reason: Option<String>,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Any event, in any state: list, show, cancel, reschedule and edit.
///
/// States: ready (due, not leased), scheduled (due later), in-flight (leased by a relay),
/// published, dead.
///
/// Example: outboxctl events list --state scheduled --aggregate-id 42
#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(subcommand)]
    pub command: EventsCommand,
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    #[command(visible_alias = "ls")]
    List(EventsListArgs),
    Show(EventsShowArgs),
    Cancel(CancelArgs),
    Reschedule(RescheduleArgs),
    Edit(EditArgs),
}

/// Events, newest first, with their state.
///
/// Example: outboxctl events list --state ready,scheduled --event-type 'order.*' --json
#[derive(Debug, Args)]
pub struct EventsListArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Only events in these states (comma-separated or repeated). `pending` means ready,
    /// scheduled and in-flight. [default: all states]
    #[arg(
        long,
        env = "OUTBOXCTL_EVENTS_STATE",
        value_enum,
        value_delimiter = ',',
        value_name = "STATE"
    )]
    pub state: Vec<StateArg>,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// Show at most this many events (a note on stderr says when more match).
    #[arg(long, env = "OUTBOXCTL_LIST_LIMIT", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub limit: u64,

    #[command(flatten)]
    pub output: OutputArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateArg {
    Ready,
    Scheduled,
    InFlight,
    Published,
    Dead,
    Pending,
}

/// Delete events before they are published, by ids (all or nothing) or by filters (in batches).
///
/// By ids: ready, scheduled and dead events are deleted. The command refuses, changing nothing
/// (exit code 2), when any id is unknown, already published (cancelling cannot unsend it; `prune`
/// removes published history), locked by a relay publishing it right now, or in flight (leased).
/// --force deletes in-flight events too: the relay holding the lease may still deliver the event
/// once; its settle then finds no row and changes nothing.
///
/// By filters (those of `dead list`, plus --state): the matching ready, scheduled and dead events
/// (with --force also in-flight ones), newest first, at most --limit, deleted in batches of
/// --batch-size, each one statement that re-checks the state; a row published or leased since it
/// was selected is skipped and counted. A progress bar on a terminal.
///
/// Asks for confirmation on a terminal and needs --yes otherwise.
///
/// Examples:
///   outboxctl events cancel 4711 4712 --yes
///   outboxctl events cancel --event-type 'test.*' --state ready,scheduled --dry-run
#[derive(Debug, Args)]
#[command(
    verbatim_doc_comment,
    about = "Delete events before they are published, by ids (all or nothing) or by filters (in batches)"
)]
pub struct CancelArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Event ids; not together with filters.
    #[arg(value_parser = clap::value_parser!(i64).range(1..), value_name = "ID")]
    pub ids: Vec<i64>,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// With filters: only events in these states (comma-separated or repeated; `pending` means
    /// ready, scheduled and in-flight) [default: ready, scheduled, dead; in-flight too with
    /// --force]. Published events are never cancelled.
    #[arg(
        long,
        env = "OUTBOXCTL_CANCEL_STATE",
        value_enum,
        value_delimiter = ',',
        value_name = "STATE"
    )]
    pub state: Vec<StateArg>,

    /// With filters: at most this many events, the newest first.
    #[arg(long, env = "OUTBOXCTL_CANCEL_LIMIT", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,

    /// With filters: rows deleted per statement (each batch is its own short transaction).
    #[arg(long, env = "OUTBOXCTL_CANCEL_BATCH_SIZE", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: u32,

    /// Also cancel in-flight (leased) events; see above for what that means.
    #[arg(long, env = "OUTBOXCTL_CANCEL_FORCE", value_parser = FalseyValueParser::new())]
    pub force: bool,

    /// Show what would be cancelled or refused; change nothing.
    #[arg(long, env = "OUTBOXCTL_DRY_RUN", value_parser = FalseyValueParser::new())]
    pub dry_run: bool,

    #[command(flatten)]
    pub confirm: ConfirmArgs,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Move when pending events are due, by ids (all or nothing) or by filters (in batches).
///
/// Sets available_at of ready and scheduled events. By ids it refuses, changing nothing (exit
/// code 2), when any id is unknown, published, dead (use `outboxctl requeue --delay`), in flight,
/// or locked by a relay publishing it right now.
///
/// By filters (those of `dead list`, plus --state ready/scheduled): the matching ready and
/// scheduled events, newest first, at most --limit, moved in batches of --batch-size, each one
/// statement that re-checks the state; a row claimed or published since it was selected is
/// skipped and counted. A progress bar on a terminal; asks for confirmation on a terminal and
/// needs --yes otherwise.
///
/// Examples:
///   outboxctl events reschedule 4711 --delay 1h
///   outboxctl events reschedule 4711 4712 --at 2026-12-01T09:00:00Z
///   outboxctl events reschedule --tenant 2f6c1d3e-8a4b-4c55-9d1e-0a7b6c5d4e3f --delay 30m --yes
#[derive(Debug, Args)]
#[command(
    verbatim_doc_comment,
    about = "Move when pending events are due, by ids (all or nothing) or by filters (in batches)"
)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["at", "delay"])))]
pub struct RescheduleArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Event ids; not together with filters.
    #[arg(value_parser = clap::value_parser!(i64).range(1..), value_name = "ID")]
    pub ids: Vec<i64>,

    #[command(flatten)]
    pub filter: FilterArgs,

    /// With filters: only events in these states (ready, scheduled; comma-separated or repeated)
    /// [default: ready and scheduled].
    #[arg(
        long,
        env = "OUTBOXCTL_RESCHEDULE_STATE",
        value_enum,
        value_delimiter = ',',
        value_name = "STATE"
    )]
    pub state: Vec<StateArg>,

    /// With filters: at most this many events, the newest first.
    #[arg(long, env = "OUTBOXCTL_RESCHEDULE_LIMIT", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,

    /// With filters: rows updated per statement (each batch is its own short transaction).
    #[arg(long, env = "OUTBOXCTL_RESCHEDULE_BATCH_SIZE", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: u32,

    /// Due at this time (RFC 3339); a past time makes them due now.
    #[arg(long, env = "OUTBOXCTL_RESCHEDULE_AT", value_parser = parse_timestamp, value_name = "TIME")]
    pub at: Option<chrono::DateTime<chrono::Utc>>,

    /// Due this long from now (database clock), e.g. 30m; 0s makes them due now.
    #[arg(long, env = "OUTBOXCTL_RESCHEDULE_DELAY", value_parser = parse_duration, value_name = "DURATION")]
    pub delay: Option<Duration>,

    /// Show what would be moved or refused; change nothing.
    #[arg(long, env = "OUTBOXCTL_DRY_RUN", value_parser = FalseyValueParser::new())]
    pub dry_run: bool,

    #[command(flatten)]
    pub confirm: ConfirmArgs,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Change pending or dead events before they are handled: payload, headers, event type.
///
/// For ready, scheduled and dead events; all or nothing. Refuses, changing nothing (exit code
/// 2), when any id is unknown, published (consumers already have it), in flight (leased by a
/// relay), or locked by a relay publishing it right now. The row lock and the state check are in
/// the UPDATE itself, so a relay publishes either the old event entirely (the edit then refuses)
/// or the new one entirely, never a mix, and never the old one after the edit succeeded.
///
/// The idempotency key is kept: a consumer that dedupes on it and already processed an earlier
/// attempt of this event skips the edited one. Each change is recorded in `outbox_audit` with the
/// previous values, the actor and --reason; `events show` lists it. A dead event stays dead
/// unless --requeue. Changing more than one event needs --yes when stdin is not a terminal.
///
/// Examples:
///   outboxctl events edit 4711 --payload @fixed.json --requeue --reason 'schema fix'
///   outboxctl events edit 4711 4712 --set-header schema-version=2 --unset-header trace --dry-run
#[derive(Debug, Args)]
#[command(
    verbatim_doc_comment,
    about = "Change pending or dead events before they are handled: payload, headers, event type"
)]
pub struct EditArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Event ids.
    #[arg(required = true, value_parser = clap::value_parser!(i64).range(1..), value_name = "ID")]
    pub ids: Vec<i64>,

    /// The new payload as JSON, or @PATH to read it from a file, or @- from stdin (replaces the
    /// whole payload).
    #[arg(long, env = "OUTBOXCTL_EDIT_PAYLOAD", value_name = "JSON|@PATH|@-")]
    pub payload: Option<String>,

    /// Set a header (repeatable): --set-header schema-version=2. In the environment variable,
    /// one KEY=VALUE per line.
    #[arg(
        long = "set-header",
        env = "OUTBOXCTL_EDIT_SET_HEADERS",
        value_delimiter = '\n',
        value_name = "KEY=VALUE"
    )]
    pub set_headers: Vec<String>,

    /// Remove a header (repeatable). In the environment variable, one name per line.
    #[arg(
        long = "unset-header",
        env = "OUTBOXCTL_EDIT_UNSET_HEADERS",
        value_delimiter = '\n',
        value_name = "KEY"
    )]
    pub unset_headers: Vec<String>,

    /// The new event type.
    #[arg(long, env = "OUTBOXCTL_EDIT_EVENT_TYPE", value_name = "TYPE")]
    pub event_type: Option<String>,

    /// Dead events only: after the change, make them ready now with attempt_count 0 (like
    /// `outboxctl requeue`), in the same statement. Refused for events that are not dead.
    #[arg(long, env = "OUTBOXCTL_EDIT_REQUEUE", value_parser = FalseyValueParser::new())]
    pub requeue: bool,

    /// Why, recorded in the audit table.
    #[arg(long, env = "OUTBOXCTL_EDIT_REASON", value_name = "TEXT")]
    pub reason: Option<String>,

    /// Print each event's diff (event type, headers, payload as pretty JSON); change nothing.
    #[arg(long, env = "OUTBOXCTL_DRY_RUN", value_parser = FalseyValueParser::new())]
    pub dry_run: bool,

    #[command(flatten)]
    pub confirm: ConfirmArgs,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Delete published events past their retention, in short batches (for cron).
///
/// Deletes rows published more than --older-than ago in ctid batches of --batch-size, each its own
/// short transaction, with the predicate re-checked in the DELETE itself: a pending or
/// dead-lettered row is never deleted by --older-than. Optionally also dead letters
/// (--dead-older-than), the consumer dedup table processed_messages (--processed-older-than)
/// and the audit trail outbox_audit (--audit-older-than).
///
/// Only one prune runs per schema: an overlapping run exits at once with exit code 4. The lock is
/// a lease row in the table `outbox_locks` (not a session advisory lock), so it also works behind
/// a transaction-pooling proxy such as PgBouncer; a prune killed with SIGKILL holds it until the
/// lease expires (2 minutes plus --sleep). SIGTERM or Ctrl-C stops after the current batch.
///
/// On a terminal a progress bar; otherwise one summary line (rows per table, batches, elapsed,
/// rate). Exit codes: 0 done or stopped by a limit or signal; 3 database unreachable; 4 another
/// prune holds the lock.
///
/// Examples:
///   outboxctl prune --older-than 7d
///   outboxctl prune --older-than 7d --dead-older-than 30d --processed-older-than 14d
///   outboxctl prune --older-than 7d --audit-older-than 400d
///   outboxctl prune --older-than 7d --max-duration 10m --sleep 100ms
#[derive(Debug, Args)]
#[command(
    verbatim_doc_comment,
    about = "Delete published events past their retention, in short batches (for cron)"
)]
#[command(group(clap::ArgGroup::new("what").required(true).multiple(true)
    .args(["older_than", "dead_older_than", "processed_older_than", "audit_older_than"])))]
pub struct PruneArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Delete events published more than this long ago (database clock), e.g. 7d.
    #[arg(long, env = "OUTBOXCTL_PRUNE_OLDER_THAN", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub older_than: Option<Duration>,

    /// Also delete dead-lettered events dead for longer than this, e.g. 30d. Off by default.
    #[arg(long, env = "OUTBOXCTL_PRUNE_DEAD_OLDER_THAN", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub dead_older_than: Option<Duration>,

    /// Also delete processed_messages rows (consumer dedup) older than this, e.g. 14d. Off by
    /// default; keep it longer than any redelivery can take.
    #[arg(long, env = "OUTBOXCTL_PRUNE_PROCESSED_OLDER_THAN", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub processed_older_than: Option<Duration>,

    /// Also delete audit trail rows (outbox_audit: who requeued, discarded, cancelled, edited or
    /// pruned what, and an edit's old and new payload) written longer ago than this, e.g. 400d.
    /// Off by default: without it the audit trail is kept for ever.
    #[arg(long, env = "OUTBOXCTL_PRUNE_AUDIT_OLDER_THAN", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub audit_older_than: Option<Duration>,

    /// Rows deleted per batch (one short transaction each).
    #[arg(long, env = "OUTBOXCTL_PRUNE_BATCH_SIZE", default_value_t = 5000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: u32,

    /// Pause between batches (throttle), e.g. 50ms.
    #[arg(long, env = "OUTBOXCTL_PRUNE_SLEEP", default_value = "0s", value_parser = parse_duration, value_name = "DURATION")]
    pub sleep: Duration,

    /// Start no batch after this long (the cron window), e.g. 10m.
    #[arg(long, env = "OUTBOXCTL_PRUNE_MAX_DURATION", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub max_duration: Option<Duration>,

    /// Stop after this many batches.
    #[arg(long, env = "OUTBOXCTL_PRUNE_MAX_BATCHES", value_parser = clap::value_parser!(u64).range(1..))]
    pub max_batches: Option<u64>,

    /// Count what would be deleted; delete nothing (takes no lock).
    #[arg(long, env = "OUTBOXCTL_DRY_RUN", value_parser = FalseyValueParser::new())]
    pub dry_run: bool,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// The clap command with the house rules applied to every argument of every subcommand:
/// environment values are never shown (`[env: NAME]`, never `NAME=value`: a sink URL, a header
/// or a payload may hold a secret). Everything a user sees (help, errors, completions) comes
/// from this, not from `Cli::command()`.
pub fn command() -> clap::Command {
    fn rules(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| a.hide_env_values(true))
            .mut_subcommands(rules)
    }
    rules(Cli::command())
}

/// Parses the process's command line with [`try_parse_from`]; on an error prints it and exits
/// (2 for usage errors, 0 for --help and --version).
///
/// `stats --check` is a Nagios plugin: a usage error there prints `OUTBOX UNKNOWN - ...` on stdout
/// and exits 3 (UNKNOWN) instead of 2.
pub fn parse() -> Cli {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    try_parse_from(&args).unwrap_or_else(|e| {
        if e.use_stderr() && is_nagios_check(&args, |k| std::env::var_os(k)) {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            println!(
                "OUTBOX UNKNOWN - {}",
                first.strip_prefix("error: ").unwrap_or(first)
            );
            let _ = e.print();
            std::process::exit(i32::from(crate::exit::nagios::UNKNOWN));
        }
        e.exit()
    })
}

/// Whether a command line asks for `stats --check` (typed, or `OUTBOXCTL_STATS_CHECK` on), so
/// that even its usage errors follow the Nagios exit codes.
pub fn is_nagios_check(
    args: &[std::ffi::OsString],
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> bool {
    let words: Vec<&str> = args.iter().skip(1).filter_map(|a| a.to_str()).collect();
    // The subcommand is the first word that names one (`--schema stats migrate` is `migrate`).
    let cmd = command();
    let names: Vec<&str> = cmd
        .get_subcommands()
        .flat_map(|s| std::iter::once(s.get_name()).chain(s.get_all_aliases()))
        .collect();
    let mut sub = None;
    let mut rest = words.iter();
    while let Some(w) = rest.next() {
        if [
            "--database-url",
            "--schema",
            "--connect-timeout",
            "--log-format",
        ]
        .contains(w)
        {
            rest.next(); // the flag's value
        } else if names.contains(w) {
            sub = Some(*w);
            break;
        }
    }
    if sub != Some("stats") {
        return false;
    }
    let typed = words
        .iter()
        .any(|w| *w == "--check" || w.starts_with("--check="));
    let from_env = env("OUTBOXCTL_STATS_CHECK")
        .and_then(|v| v.into_string().ok())
        .is_some_and(|v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "" | "0" | "false" | "no" | "off" | "n" | "f"
            )
        });
    typed || from_env
}

/// Parses a command line with [`command`]'s rules, then resolves the shared flags given before
/// the subcommand into the subcommand's own groups (see [`SharedArgs`]).
///
/// An empty environment variable counts as unset (`OUTBOXCTL_SCHEMA=` is the default schema).
/// An invalid value that came from the environment is reported with the variable's name (and
/// without the value), and usage lines in errors do not list what the environment provided as if
/// it had been typed.
pub fn try_parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let mut cmd = without_empty_env(command());
    let matches = cmd
        .try_get_matches_from_mut(&args)
        .map_err(|e| explain(e, &cmd, &args))?;
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
    cli.resolve_shared(&matches)
        .map_err(|msg| cmd.error(clap::error::ErrorKind::ArgumentConflict, msg))?;
    Ok(cli)
}

/// Drops the env fallback of every argument whose variable is set but empty, so clap treats it
/// as unset instead of parsing "" (clap reads the variables when the command is built).
fn without_empty_env(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        let empty = a
            .get_env()
            .and_then(std::env::var_os)
            .is_some_and(|v| v.is_empty());
        if empty {
            a.env(None)
        } else {
            a
        }
    })
    .mut_subcommands(without_empty_env)
}

/// An argument whose value the environment provides in this run.
struct FromEnv {
    /// As clap shows it: `--batch-size <BATCH_SIZE>`.
    shown: String,
    var: String,
    value: std::ffi::OsString,
}

fn args_from_env(cmd: &clap::Command, out: &mut Vec<FromEnv>) {
    for a in cmd.get_arguments() {
        if let Some(var) = a.get_env() {
            if let Some(value) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                out.push(FromEnv {
                    shown: a.to_string(),
                    var: var.to_string_lossy().into_owned(),
                    value,
                });
            }
        }
    }
    for sub in cmd.get_subcommands() {
        args_from_env(sub, out);
    }
}

/// Rewrites a clap error so that it names the environment variable an invalid value came from
/// (hiding the value), and drops environment-provided arguments from its usage line (clap lists every argument that
/// is present, which reads as if they were required or typed).
fn explain(err: clap::Error, cmd: &clap::Command, argv: &[std::ffi::OsString]) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        return err;
    }
    let mut env = Vec::new();
    let mut built = cmd.clone();
    built.build(); // an argument is shown as in the usage line only once built
    args_from_env(&built, &mut env);
    let rendered = err.render().to_string();
    let mut text = rendered.clone();
    if let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        err.get(ContextKind::InvalidArg),
        err.get(ContextKind::InvalidValue),
    ) {
        let long = arg.split(' ').next().unwrap_or(arg);
        let typed = argv.iter().skip(1).any(|a| {
            a.to_str()
                .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
        });
        // A list variable (`OUTBOXCTL_EVENTS_STATE=ready,bogus`) fails on one of its items.
        if let Some(e) = env.iter().find(|e| {
            !typed && e.shown == *arg && e.value.to_string_lossy().contains(value.as_str())
        }) {
            // Like --help, an error never shows a value from the environment: it may be a
            // secret put in the wrong variable. The variable's name says where to look.
            text = text.replacen(
                &format!("invalid value '{value}' for '{arg}'"),
                &format!(
                    "invalid value for '{arg}' in the environment variable {} (value not shown)",
                    e.var
                ),
                1,
            );
            for quoted in [
                format!("`{value}`"),
                format!("'{value}'"),
                format!("\"{value}\""),
            ] {
                text = text.replace(&quoted, "the value");
            }
        }
    }
    let lines: Vec<String> = text
        .lines()
        .map(|line| match line.strip_prefix("Usage: ") {
            Some(usage) => {
                let mut usage = format!(" {usage} ");
                for e in &env {
                    for shown in [format!(" {}... ", e.shown), format!(" {} ", e.shown)] {
                        usage = usage.replace(&shown, " ");
                    }
                }
                format!("Usage: {}", usage.trim())
            }
            None => line.to_owned(),
        })
        .collect();
    let mut text = lines.join("\n");
    if rendered.ends_with('\n') {
        text.push('\n');
    }
    if text == rendered {
        return err;
    }
    clap::Error::raw(
        err.kind(),
        text.strip_prefix("error: ").unwrap_or(&text).to_owned(),
    )
}

impl Cli {
    /// Applies the flags given before the subcommand (see [`SharedArgs`]) to the subcommand's own
    /// groups, unless the subcommand's flag was given on the command line itself. A shared flag
    /// before a command that does not take it is an error.
    fn resolve_shared(&mut self, matches: &ArgMatches) -> Result<(), String> {
        let mut leaf = matches;
        let mut path = Vec::new();
        while let Some((name, sub)) = leaf.subcommand() {
            path.push(name.to_owned());
            leaf = sub;
        }
        let typed = |id: &str| leaf.value_source(id) == Some(ValueSource::CommandLine);
        let refuse =
            |flag: &str| format!("`{flag}` does not apply to `outboxctl {}`", path.join(" "));
        let shared = self.shared.clone();
        let (db, output) = self.command.shared_groups();
        let db_flag = [
            (shared.database_url.is_some(), "--database-url"),
            (shared.schema.is_some(), "--schema"),
            (shared.connect_timeout.is_some(), "--connect-timeout"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag));
        match (db, db_flag) {
            (None, Some(flag)) => return Err(refuse(flag)),
            (Some(db), Some(_)) => {
                if let (Some(v), false) = (shared.database_url, typed("database_url")) {
                    db.database_url = Some(v);
                }
                if let (Some(v), false) = (shared.schema, typed("schema")) {
                    db.schema = v;
                }
                if let (Some(v), false) = (shared.connect_timeout, typed("connect_timeout")) {
                    db.connect_timeout = v;
                }
            }
            (_, None) => {}
        }
        match (output, shared.json) {
            (None, true) => return Err(refuse("--json")),
            (Some(o), true) if !typed("json") => o.json = true,
            _ => {}
        }
        Ok(())
    }
}

impl Command {
    /// The shared groups of the command that runs, for [`Cli::resolve_shared`]. A new
    /// subcommand with a `DatabaseArgs` or `OutputArgs` group is listed here.
    fn shared_groups(&mut self) -> (Option<&mut DatabaseArgs>, Option<&mut OutputArgs>) {
        match self {
            Command::Migrate(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Publish(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Relay(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Stats(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Dead(d) => match &mut d.command {
                DeadCommand::List(a) => (Some(&mut a.db), Some(&mut a.output)),
                DeadCommand::Show(a) => (Some(&mut a.show.db), Some(&mut a.show.output)),
                DeadCommand::Discard(a) => (Some(&mut a.db), Some(&mut a.output)),
                DeadCommand::Export(a) => (Some(&mut a.db), None),
            },
            Command::Requeue(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Ordering(o) => match &mut o.command {
                OrderingCommand::Enable(a) => (Some(&mut a.db), Some(&mut a.output)),
                OrderingCommand::Disable(a) => (Some(&mut a.db), Some(&mut a.output)),
                OrderingCommand::Status(a) => (Some(&mut a.db), Some(&mut a.output)),
                OrderingCommand::Skip(a) => (Some(&mut a.db), Some(&mut a.output)),
            },
            Command::Events(e) => match &mut e.command {
                EventsCommand::List(a) => (Some(&mut a.db), Some(&mut a.output)),
                EventsCommand::Show(a) => (Some(&mut a.show.db), Some(&mut a.show.output)),
                EventsCommand::Cancel(a) => (Some(&mut a.db), Some(&mut a.output)),
                EventsCommand::Reschedule(a) => (Some(&mut a.db), Some(&mut a.output)),
                EventsCommand::Edit(a) => (Some(&mut a.db), Some(&mut a.output)),
            },
            Command::Prune(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Doctor(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Completions(_) => (None, None),
            Command::Demo(a) => (Some(&mut a.db), None),
            Command::Bench(a) => (Some(&mut a.db), Some(&mut a.output)),
        }
    }
}

/// The longest duration any flag takes: 10 years (of 365.25 days, humantime's year). Longer is a
/// typo, and would overflow the database's `now() + interval` or the microsecond count.
pub const MAX_DURATION: Duration = Duration::from_secs(315_576_000);

/// A uuid.
pub fn parse_uuid(s: &str) -> Result<uuid::Uuid, String> {
    uuid::Uuid::parse_str(s.trim())
        .map_err(|_| format!("`{s}` is not a uuid (e.g. 2f6c1d3e-8a4b-4c55-9d1e-0a7b6c5d4e3f)"))
}

/// An RFC 3339 time, a date (midnight UTC), or a humantime duration meaning that long before now.
pub fn parse_time_or_ago(s: &str) -> Result<TimeArg, String> {
    if let Some(t) = parse_time(s) {
        return Ok(TimeArg::At(t));
    }
    match humantime::parse_duration(s.trim()) {
        Ok(_) => parse_duration(s).map(TimeArg::Ago),
        Err(_) => Err(format!(
            "`{s}` is neither an RFC 3339 time, a date nor a duration; use e.g. 2026-12-01T09:00:00Z, 2026-12-01 or 2h"
        )),
    }
}

/// A humantime duration (`5m`, `7d`, `250ms`) of at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration ({e}); use e.g. 30s, 5m, 7d"))?;
    if d > MAX_DURATION {
        return Err(format!("`{s}` is longer than 10 years"));
    }
    Ok(d)
}

/// A listen address, HOST:PORT (an IP, `[v6]`, or a name resolved when binding). No I/O here.
pub fn parse_listen_addr(s: &str) -> Result<String, String> {
    let bad =
        || format!("`{s}` is not HOST:PORT; use e.g. 0.0.0.0:9464, 127.0.0.1:9464 or [::]:9464");
    let (host, port) = s.rsplit_once(':').ok_or_else(bad)?;
    let host_ok = if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        v6.parse::<std::net::Ipv6Addr>().is_ok()
    } else {
        !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_')
    };
    if !host_ok || port.parse::<u16>().is_err() {
        return Err(bad());
    }
    Ok(s.to_owned())
}

/// A humantime duration that must not be zero.
pub fn parse_nonzero_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("`{s}` must be greater than zero"));
    }
    Ok(d)
}

/// An RFC 3339 time or a date alone (midnight UTC), at most 10 years from now.
pub fn parse_timestamp(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    let t = parse_time(s).ok_or_else(|| {
        format!(
            "`{s}` is not an RFC 3339 time or a date; use e.g. 2026-12-01T09:00:00Z or 2026-12-01"
        )
    })?;
    let limit = chrono::Utc::now() + chrono::Duration::from_std(MAX_DURATION).expect("fits");
    if t > limit {
        return Err(format!("`{s}` is more than 10 years from now"));
    }
    Ok(t)
}

/// RFC 3339 (`2026-12-01T09:00:00Z`, `+02:00`), or a date alone as midnight UTC.
fn parse_time(s: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    let s = s.trim();
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(s) {
        return Some(t.with_timezone(&chrono::Utc));
    }
    chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
        .ok()
        .and_then(|d| d.and_hms_opt(0, 0, 0))
        .map(|t| t.and_utc())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }

    #[test]
    fn shared_flags_after_the_subcommand_win_over_those_before_it() {
        let schema = |args: &[&str]| match try_parse_from(args).unwrap().command {
            Command::Stats(a) => (a.db.schema, a.output.json),
            Command::Events(e) => match e.command {
                EventsCommand::List(a) => (a.db.schema, a.output.json),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        };
        let p = "outboxctl";
        assert_eq!(
            schema(&[p, "--schema", "a", "stats", "--schema", "b"]).0,
            "b"
        );
        assert_eq!(schema(&[p, "--schema", "a", "stats"]).0, "a");
        assert_eq!(schema(&[p, "--schema", "a", "events", "list"]).0, "a");
        assert!(schema(&[p, "--json", "stats"]).1);
        let err = try_parse_from([p, "--json", "completions", "bash"]).unwrap_err();
        assert!(err
            .to_string()
            .contains("`--json` does not apply to `outboxctl completions`"));
        let err = try_parse_from([p, "--connect-timeout", "0s", "stats"]).unwrap_err();
        assert!(
            err.to_string().contains("must be greater than zero"),
            "{err}"
        );
    }

    #[test]
    fn nagios_check_is_recognised_typed_or_from_the_environment() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let none = |_: &str| None;
        let on = |_: &str| Some(std::ffi::OsString::from("1"));
        let off = |_: &str| Some(std::ffi::OsString::from("off"));
        assert!(is_nagios_check(&args(&["o", "stats", "--check"]), none));
        assert!(is_nagios_check(
            &args(&["o", "stats", "--check=true"]),
            none
        ));
        assert!(is_nagios_check(
            &args(&["o", "stats", "--warn-lag", "x"]),
            on
        ));
        assert!(!is_nagios_check(
            &args(&["o", "stats", "--warn-lag", "x"]),
            off
        ));
        assert!(!is_nagios_check(&args(&["o", "migrate", "--check"]), none));
        assert!(!is_nagios_check(&args(&["o", "stats"]), none));
        assert!(!is_nagios_check(
            &args(&["o", "--schema", "stats", "migrate", "--check"]),
            none
        ));
        assert!(is_nagios_check(
            &args(&["o", "--schema", "x", "stats", "--check"]),
            none
        ));
    }

    #[test]
    fn durations() {
        for (input, ok) in [
            ("5m", true),
            ("7d", true),
            ("250ms", true),
            ("0s", true),
            ("soon", false),
            ("", false),
        ] {
            assert_eq!(parse_duration(input).is_ok(), ok, "{input}");
        }
        assert!(parse_nonzero_duration("0s").is_err());
        assert_eq!(
            parse_nonzero_duration("1h").unwrap(),
            Duration::from_secs(3600)
        );
    }

    #[test]
    fn time_or_ago() {
        assert_eq!(
            parse_time_or_ago("2h").unwrap(),
            TimeArg::Ago(Duration::from_secs(7200))
        );
        assert!(matches!(
            parse_time_or_ago("2026-12-01T09:00:00Z").unwrap(),
            TimeArg::At(_)
        ));
        assert!(parse_time_or_ago("yesterday").is_err());
        assert!(parse_uuid("not-a-uuid").is_err());
        assert!(parse_uuid("2f6c1d3e-8a4b-4c55-9d1e-0a7b6c5d4e3f").is_ok());
    }

    #[test]
    fn timestamps() {
        assert!(parse_timestamp("2026-12-01T09:00:00Z").is_ok());
        assert!(parse_timestamp("2026-12-01T09:00:00+02:00").is_ok());
        assert!(parse_timestamp("tomorrow").is_err());
        assert_eq!(
            parse_timestamp("2026-12-01").unwrap(),
            parse_timestamp("2026-12-01T00:00:00Z").unwrap()
        );
        assert_eq!(
            parse_time_or_ago("2026-12-01").unwrap(),
            TimeArg::At(parse_timestamp("2026-12-01T00:00:00Z").unwrap())
        );
        assert!(parse_timestamp("2999-01-01T00:00:00Z").is_err());
        assert!(parse_timestamp("1999-01-01").is_ok());
    }

    #[test]
    fn durations_are_bounded() {
        assert!(parse_duration("10years").is_ok());
        assert!(parse_duration("3652d").is_ok());
        for long in ["11years", "3653d", "100000000y"] {
            let e = parse_duration(long).unwrap_err();
            assert!(e.contains("10 years"), "{e}");
        }
        assert!(parse_time_or_ago("20000y")
            .unwrap_err()
            .contains("10 years"));
    }

    #[test]
    fn no_environment_value_is_ever_shown() {
        fn walk(cmd: &clap::Command, seen: &mut usize) {
            for a in cmd.get_arguments() {
                if a.get_env().is_some() {
                    *seen += 1;
                    assert!(
                        a.is_hide_env_values_set(),
                        "{} --{:?} shows its env value",
                        cmd.get_name(),
                        a.get_long()
                    );
                }
            }
            cmd.get_subcommands().for_each(|s| walk(s, seen));
        }
        let mut seen = 0;
        walk(&command(), &mut seen);
        assert!(seen > 100, "{seen}");
    }
}
