//! The commands that run in a scratch schema and drop it afterwards: `demo` and `bench`.

use std::time::Duration;

use clap::Args;

use super::relay::RelayMode;
use super::shared::{DatabaseArgs, OutputArgs};
use super::values::parse_nonzero_duration;

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
