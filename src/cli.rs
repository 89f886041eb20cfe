//! The command line, as clap derive types. Nothing here does I/O: `config` turns these into
//! validated settings and the command modules act on those.

use std::path::PathBuf;
use std::time::Duration;

// On/off flags read their environment variable with FalseyValueParser: unset, empty, 0, false, no
// and off are off; anything else (1, true, yes) is on. clap's default accepts only true/false.
use clap::builder::FalseyValueParser;
use clap::{Args, Parser, Subcommand, ValueEnum};

/// Operate a transactional outbox on PostgreSQL: migrate, publish, relay, inspect, prune.
///
/// A service writes its business rows and an `outbox` row in one transaction; outboxctl does
/// everything after that.
#[derive(Debug, Parser)]
#[command(
    name = "outboxctl",
    version,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Migrate(MigrateArgs),
    Publish(PublishArgs),
    Relay(RelayArgs),
    Stats(StatsArgs),
    Completions(CompletionsArgs),
    Demo(DemoArgs),
    Bench(BenchArgs),
}

/// Logging options (to stderr; stdout carries data only).
#[derive(Debug, Args, Clone)]
pub struct LogArgs {
    /// More log output (-v info, -vv debug, -vvv trace). `OUTBOXCTL_LOG` / `RUST_LOG` override.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, env = "OUTBOXCTL_VERBOSE")]
    pub verbose: u8,

    /// Only errors.
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

    /// Payload as JSON, or @PATH to read it from a file.
    #[arg(
        long,
        env = "OUTBOXCTL_PAYLOAD",
        required_unless_present = "file",
        value_name = "JSON|@PATH"
    )]
    pub payload: Option<String>,

    /// A header to store with the event (repeatable): --header schema-version=1.
    #[arg(long = "header", value_name = "KEY=VALUE")]
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

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Relay ready events to a sink: `--once` for cron, or as a daemon.
///
/// Claims ready rows with FOR UPDATE SKIP LOCKED, publishes them, marks them published, retries
/// failures with capped exponential backoff and jitter, and dead-letters after --max-attempts.
/// Delivery is at least once with a stable dedup id (the idempotency key); there is no ordering
/// guarantee. Any number of relays may run at once, including `--once` beside a daemon.
///
/// Exit codes with --once: 0 done (whatever the events' outcomes); 3 the database was unreachable;
/// 5 the sink failed every publish attempt of the run.
///
/// Examples:
///   outboxctl relay --once --sink stdout
///   outboxctl relay --sink https://hooks.example.com/events --concurrency 32
#[derive(Debug, Args)]
pub struct RelayArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Where to publish: stdout, null, file:PATH, http(s)://URL.
    #[arg(
        long,
        env = "OUTBOXCTL_SINK",
        default_value = "stdout",
        value_name = "SINK"
    )]
    pub sink: String,

    /// Drain what is ready now, print a summary, exit.
    #[arg(long, env = "OUTBOXCTL_ONCE", value_parser = FalseyValueParser::new())]
    pub once: bool,

    /// How claims are settled. `lease`: claim commits a lease, publish runs outside any
    /// transaction, a fenced settle follows (for slow or remote sinks). `tx`: claim, publish and
    /// mark in one short transaction (fast local sinks; fewer writes per event). `auto`: tx for
    /// stdout, file and null, lease otherwise.
    #[arg(long, env = "OUTBOXCTL_MODE", value_enum, default_value_t = RelayMode::Auto)]
    pub mode: RelayMode,

    /// Rows claimed per batch.
    #[arg(long, env = "OUTBOXCTL_BATCH_SIZE", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=50_000))]
    pub batch_size: u32,

    /// Publishes in flight at once within a batch.
    #[arg(long, env = "OUTBOXCTL_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,

    /// How long a claim is held before another relay may take the row.
    #[arg(long, env = "OUTBOXCTL_LEASE", default_value = "30s", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub lease: Duration,

    /// Timeout of one publish; must be shorter than --lease [default: half the lease].
    #[arg(long, env = "OUTBOXCTL_PUBLISH_TIMEOUT", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub publish_timeout: Option<Duration>,

    /// Attempts before a row is dead-lettered.
    #[arg(long, env = "OUTBOXCTL_MAX_ATTEMPTS", default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_attempts: u32,

    /// Backoff after the first failure; doubles per attempt, with jitter.
    #[arg(long, env = "OUTBOXCTL_BACKOFF_BASE", default_value = "1s", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub backoff_base: Duration,

    /// Upper bound of the backoff.
    #[arg(long, env = "OUTBOXCTL_BACKOFF_MAX", default_value = "5m", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub backoff_max: Duration,

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
    /// E.g. --http-header 'Upstash-Deduplication-Id: {idempotency_key}'.
    #[arg(long = "http-header", value_name = "NAME: VALUE")]
    pub http_headers: Vec<String>,

    /// Sign HTTP deliveries (Standard Webhooks) with the secret(s) in this environment variable:
    /// `whsec_...`, or two separated by a space during rotation. The secret itself never goes on
    /// the command line.
    #[arg(long, env = "OUTBOXCTL_SIGNING_SECRET_ENV", value_name = "VAR")]
    pub signing_secret_env: Option<String>,

    /// Let the relay's own session commit asynchronously (synchronous_commit=off). A mark lost in
    /// a server crash only causes a re-publish with the same dedup id.
    #[arg(long, env = "OUTBOXCTL_ASYNC_COMMIT", default_value_t = true, action = clap::ArgAction::Set, value_name = "BOOL")]
    pub async_commit: bool,

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

    #[command(flatten)]
    pub output: OutputArgs,
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

/// A humantime duration (`5m`, `7d`, `250ms`).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("`{s}` is not a duration ({e}); use e.g. 30s, 5m, 7d"))
}

/// A humantime duration that must not be zero.
pub fn parse_nonzero_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("`{s}` must be greater than zero"));
    }
    Ok(d)
}

/// An RFC 3339 timestamp.
pub fn parse_timestamp(s: &str) -> Result<chrono::DateTime<chrono::Utc>, String> {
    chrono::DateTime::parse_from_rfc3339(s.trim())
        .map(|t| t.with_timezone(&chrono::Utc))
        .map_err(|e| format!("`{s}` is not an RFC 3339 time ({e}); use e.g. 2026-12-01T09:00:00Z"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
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
    fn timestamps() {
        assert!(parse_timestamp("2026-12-01T09:00:00Z").is_ok());
        assert!(parse_timestamp("2026-12-01T09:00:00+02:00").is_ok());
        assert!(parse_timestamp("tomorrow").is_err());
    }
}
