//! `outboxctl stats`: the figures' flags and the Nagios check (`--check` and its thresholds),
//! whose exit codes also govern usage errors (see [`super::is_nagios_check`]).

use std::path::PathBuf;
use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::{Args, ValueEnum};

use super::shared::{threshold_pair, DatabaseArgs, OutputArgs};
use super::values::parse_duration;

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

    #[command(flatten)]
    pub lag: LagCheck,

    #[command(flatten)]
    pub dead: DeadCheck,

    #[command(flatten)]
    pub backlog: BacklogCheck,

    #[command(flatten)]
    pub retrying: RetryingCheck,
}

threshold_pair! {
    [value_parser = parse_duration, value_name = "DURATION", requires = "check"] Option<Duration>;

    /// `stats --check`'s thresholds of the lag.
    pub struct LagCheck {
        /// WARNING when the lag is longer than this, e.g. 1m. The lag is how late the most overdue
        /// pending event is: a ready event counts from when it fell due (available_at); one waiting
        /// for a retry, or being retried, from when it first fell due (taken as its created_at: for
        /// an event published with a delay that has since failed, the delay counts too); one
        /// scheduled for later and never tried does not count.
        warn_lag [env = "OUTBOXCTL_WARN_LAG"],
        /// CRITICAL when the lag (see --warn-lag) is longer than this, e.g. 5m.
        crit_lag [env = "OUTBOXCTL_CRIT_LAG"],
    }
}

threshold_pair! {
    [value_name = "N", requires = "check"] Option<u64>;

    /// `stats --check`'s thresholds of the dead letters.
    pub struct DeadCheck {
        /// WARNING when more than N events are dead-lettered (0: any dead letter).
        warn_dead [env = "OUTBOXCTL_WARN_DEAD"],
        /// CRITICAL when more than N events are dead-lettered.
        crit_dead [env = "OUTBOXCTL_CRIT_DEAD"],
    }

    /// `stats --check`'s thresholds of the backlog.
    pub struct BacklogCheck {
        /// WARNING when more than N events are due and unpublished (ready + in flight; scheduled
        /// events are not backlog until due).
        warn_backlog [env = "OUTBOXCTL_WARN_BACKLOG"],
        /// CRITICAL when more than N events are due and unpublished (ready + in flight).
        crit_backlog [env = "OUTBOXCTL_CRIT_BACKLOG"],
    }

    /// `stats --check`'s thresholds of the events retrying.
    pub struct RetryingCheck {
        /// WARNING when more than N pending events have failed at least once (retrying).
        warn_retrying [env = "OUTBOXCTL_WARN_RETRYING"],
        /// CRITICAL when more than N pending events have failed at least once (retrying).
        crit_retrying [env = "OUTBOXCTL_CRIT_RETRYING"],
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatsBy {
    EventType,
    Tenant,
    AggregateType,
}
