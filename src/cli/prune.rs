//! `outboxctl prune`: retention, batching and the limits of one run.

use std::time::Duration;

use clap::Args;

use super::shared::{help_of, ChangeArgs, DatabaseArgs, NoConfirm};
use super::values::{parse_duration, parse_nonzero_duration};

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
#[command(mut_args(help_of(
    "dry_run",
    "Count what would be deleted; delete nothing (takes no lock)"
)))]
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

    #[command(flatten)]
    pub change: ChangeArgs<NoConfirm>,
}
