//! `outboxctl requeue`: send dead letters again, by ids or by the filters `dead` takes.

use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::Args;

use super::dead::DEAD_IDS_OR_ALL;
use super::shared::{help_of, ChangeArgs, DatabaseArgs, NoConfirm, TargetArgs};
use super::values::parse_duration;

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
#[command(mut_args(help_of("dry_run", "List exactly what would be requeued; change nothing")))]
#[command(mut_args(help_of("ids", DEAD_IDS_OR_ALL)))]
pub struct RequeueArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub target: TargetArgs,

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

    #[command(flatten)]
    pub change: ChangeArgs<NoConfirm>,
}
