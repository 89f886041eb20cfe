//! `outboxctl dead` and its subcommands: list, show, discard and export dead letters.

use clap::builder::FalseyValueParser;
use clap::{Args, Subcommand, ValueEnum};

use super::events::ShowArgs;
use super::shared::{help_of, ChangeArgs, DatabaseArgs, ListArgs, TargetArgs};

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
    pub list: ListArgs,
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

/// The help of `ids` in `dead discard` and `requeue`.
pub(super) const DEAD_IDS_OR_ALL: &str =
    "Event ids (each must be dead-lettered); not together with filters or --all";

/// Delete dead-lettered events, by ids or by filters (--all for every one).
///
/// Only rows that are still dead when the DELETE runs are deleted (the state is re-checked in the
/// statement). Works in batches; prints the exact count. Asks for confirmation on a terminal and
/// needs --yes otherwise.
///
/// Example: outboxctl dead discard --event-type 'test.*' --until 30d --yes
#[derive(Debug, Args)]
#[command(mut_args(help_of("dry_run", "List what would be discarded; change nothing")))]
#[command(mut_args(help_of("ids", DEAD_IDS_OR_ALL)))]
pub struct DeadDiscardArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub target: TargetArgs,

    /// Every dead-lettered event (no filter).
    #[arg(long, env = "OUTBOXCTL_DISCARD_ALL", value_parser = FalseyValueParser::new())]
    pub all: bool,

    /// At most this many events, the most recently dead-lettered first.
    #[arg(long, env = "OUTBOXCTL_DISCARD_LIMIT", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,

    /// Rows deleted per statement (each batch is its own short transaction).
    #[arg(long, env = "OUTBOXCTL_DISCARD_BATCH_SIZE", default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: u32,

    #[command(flatten)]
    pub change: ChangeArgs,
}

/// Write dead-lettered events as JSON lines, to fix offline and re-publish with `publish --file`.
///
/// The default format has exactly the keys `outboxctl publish --file` reads, including the
/// original idempotency key. `publish` skips a line whose key is still in the table, so discard
/// the exported rows before re-publishing them (or drop the key with jq to publish a new event).
///
/// Example: outboxctl dead export --event-type order.placed > dead.jsonl
#[derive(Debug, Args)]
#[command(mut_args(help_of(
    "ids",
    "Event ids (each must be dead-lettered); not together with filters"
)))]
pub struct DeadExportArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub target: TargetArgs,

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
