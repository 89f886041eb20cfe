//! `outboxctl doctor`: its thresholds, and the relay settings it checks (the relay's own
//! variables, so a doctor run beside a relay's environment checks what that relay would use).

use std::time::Duration;

use clap::Args;

use super::relay::{LeaseArgs, RetryArgs, SinkArgs};
use super::shared::{threshold_pair, DatabaseArgs, OutputArgs};
use super::values::parse_nonzero_duration;

/// Tell what is wrong with an outbox before it hurts: one PASS / WARN / FAIL line per check.
///
/// Checks: migrations; each index and the NOTIFY trigger (present, valid); dead tuples, table and
/// index bloat, last (auto)vacuum and analyze, autovacuum settings; the xmin horizon (transactions,
/// prepared transactions and replication slots holding back vacuum); relay daemons connected; dead
/// letters and retrying events; the lag (the most overdue event); whether prune runs; and, when
/// given the relay's settings, whether they contradict each other or the sink (a NATS stream's
/// duplicate window shorter than the retry horizon, its subject's placeholders filled with a
/// sample value). Reads only.
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

    #[command(flatten)]
    pub lag: DoctorLagArgs,

    /// WARN when a transaction, prepared transaction or replication slot has held back vacuum's
    /// xmin horizon for longer than this.
    #[arg(long, env = "OUTBOXCTL_DOCTOR_MAX_XACT_AGE", default_value = "5m", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub max_xact_age: Duration,

    /// WARN when published events older than this are still in the table (prune is not running).
    #[arg(long, env = "OUTBOXCTL_DOCTOR_RETENTION", default_value = "30d", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub retention: Duration,

    #[command(flatten)]
    pub output: OutputArgs,

    // Last: its help heading applies to every argument after it.
    #[command(flatten)]
    pub relay: DoctorRelayArgs,
}

/// The relay's settings `doctor` checks: the relay's own flag groups, so the same flags and
/// variables.
#[derive(Debug, Args)]
#[command(next_help_heading = "Relay settings to check")]
pub struct DoctorRelayArgs {
    #[command(flatten)]
    pub lease: LeaseArgs,

    #[command(flatten)]
    pub sink: SinkArgs,

    /// The relay's retry settings, for the retry horizon.
    #[command(flatten)]
    pub retry: RetryArgs,
}

threshold_pair! {
    [value_parser = parse_nonzero_duration, value_name = "DURATION"] Duration;

    /// `doctor`'s thresholds of the lag.
    pub struct DoctorLagArgs {
        /// WARN when the lag is longer than this: how late the most overdue pending event is, as
        /// `stats --check` counts it (an event scheduled for later and never tried is not late).
        warn_lag [env = "OUTBOXCTL_DOCTOR_WARN_LAG", default_value = "5m"],
        /// FAIL when the lag (see --warn-lag) is longer than this.
        crit_lag [env = "OUTBOXCTL_DOCTOR_CRIT_LAG", default_value = "1h"],
    }
}
