//! `outboxctl log` and its subcommands: log mode's switch, kept in the database.

use clap::{Args, Subcommand};

use super::shared::{env_of, DatabaseArgs, OutputArgs, SwitchChangeArgs};

/// Log mode: relays read the outbox as a log, with no write per published event.
///
/// While it is on, one relay at a time (`relay --mode auto`, the default, or `--mode log`) reads
/// the events batch by batch between two transaction-id snapshots (PgQ's design) and records its
/// position once per page; the others stand by and take over when its lease lapses. Failed and
/// delayed events go to a retry set (one write each). Relays in tx or lease mode refuse to run
/// while it is on, and stop within a second when it is switched on. The application's INSERT does
/// not change.
///
/// Examples:
///   outboxctl log enable --reason 'fewer writes on the primary'
///   outboxctl log status --json
///   outboxctl log disable
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct LogModeArgs {
    #[command(subcommand)]
    pub command: LogModeCommand,
}

#[derive(Debug, Subcommand)]
pub enum LogModeCommand {
    Enable(LogModeChangeArgs),
    Disable(LogModeChangeArgs),
    Status(LogModeStatusArgs),
}

/// Switch log mode on or off. `enable` builds the transaction-id index (CREATE INDEX
/// CONCURRENTLY: it waits for transactions already writing the outbox); `disable` hands the outbox
/// back to queue mode at the log's position (events the log published are marked published, one
/// write each, once) and drops the index. Audited.
///
/// Example: outboxctl log enable --reason 'fewer writes on the primary'
#[derive(Debug, Args)]
#[command(mut_args(env_of("reason", "OUTBOXCTL_LOG_REASON")))]
pub struct LogModeChangeArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub change: SwitchChangeArgs,
}

/// Whether log mode is on, the log's position, its reader and its retry set.
///
/// Example: outboxctl log status --json
#[derive(Debug, Args)]
pub struct LogModeStatusArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}
