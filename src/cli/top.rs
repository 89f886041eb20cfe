//! `outboxctl top`: the live view's flags.

use std::time::Duration;

use clap::{Args, ValueEnum};

use super::shared::DatabaseArgs;
use super::values::parse_nonzero_duration;

/// A live view of the outbox for on-call: backlog, lag, throughput, relays, dead letters.
///
/// Redraws every --interval from figures read in the database (so relays anywhere count, cron
/// ones included): the backlog by state and the lag (as `stats`), the publishes per interval as a
/// sparkline over the last minutes, the relays connected now (from pg_stat_activity), the event or
/// aggregate types with the largest backlog, the ordered keys blocked by a dead letter and the
/// newest dead letters with their errors. Reads only, and like `stats` never scans published
/// history. Needs a terminal: without one it exits 2 (use `outboxctl stats --json` in scripts).
///
/// Keys: q, Esc or Ctrl-C quit (exit 0). When the database goes away the view says so and keeps
/// retrying every interval.
///
/// Example: outboxctl top --by aggregate-type --interval 2s
#[derive(Debug, Args)]
pub struct TopArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// How often to read the figures and redraw (at least 100ms). Also the width of one bar of
    /// the throughput sparkline.
    #[arg(long, env = "OUTBOXCTL_TOP_INTERVAL", default_value = "1s", value_parser = parse_interval, value_name = "DURATION")]
    pub interval: Duration,

    /// What the table of the largest backlogs groups by.
    #[arg(long, env = "OUTBOXCTL_TOP_BY", value_enum, default_value_t = TopBy::EventType)]
    pub by: TopBy,
}

/// `top --by`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TopBy {
    EventType,
    AggregateType,
}

/// The shortest `--interval`: faster would read the pending rows more often than anyone can look.
pub const MIN_TOP_INTERVAL: Duration = Duration::from_millis(100);

fn parse_interval(s: &str) -> Result<Duration, String> {
    let d = parse_nonzero_duration(s)?;
    if d < MIN_TOP_INTERVAL {
        return Err(format!(
            "`{}` is shorter than the shortest interval, 100ms",
            crate::output::escape_controls(s)
        ));
    }
    Ok(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_below_100ms_are_refused() {
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("99ms").is_err());
        assert_eq!(parse_interval("100ms"), Ok(MIN_TOP_INTERVAL));
        assert_eq!(parse_interval("2s"), Ok(Duration::from_secs(2)));
    }
}
