//! `outboxctl replay`: send published events again, to any sink. The sink's flags are the relay's
//! own groups ([`SinkArgs`], [`SinkOptionArgs`], [`PublishTimeoutArgs`], [`BackoffArgs`]); the
//! selection is the one of `dead`, `requeue` and `events` ([`TargetArgs`]).

use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::Args;

use super::relay::{BackoffArgs, FormatArgs, PublishTimeoutArgs, SinkArgs, SinkOptionArgs};
use super::shared::{help_of, ChangeArgs, DatabaseArgs, TargetArgs};
use super::values::{parse_nonzero_duration, parse_rate};

/// `replay`'s `--publish-timeout` when none is given; its help says so (a test holds the two
/// equal). Half the relay's default lease, the relay's default timeout.
pub const DEFAULT_REPLAY_PUBLISH_TIMEOUT: Duration = Duration::from_secs(15);

/// Send published events again, to any sink, without changing them.
///
/// For a consumer that lost its data, or a new consumer that needs the history: the published
/// events still in the table (not yet pruned) that the ids or filters select, in id order (so
/// each key's events in their order), at most --rate, through the relay's sinks and their
/// flags. --since and --until filter by published_at (when the event was delivered: a
/// consumer restored from a backup taken at T needs what was delivered after T). In log mode an
/// event the log published is published too; it has no published_at, so it goes by created_at.
///
/// Nothing in the outbox changes: published_at, attempt_count, the lease columns and every other
/// column stay as they are, and no row is locked (plain reads in batches by id), so relays are
/// not held up. One audit row (outbox_audit, action `replay`) records the selection, the sink,
/// the count and where the run stopped.
///
/// Each event keeps its idempotency key, so a consumer that deduplicates drops it as a duplicate
/// (NATS JetStream itself does within its duplicate window); --fresh-keys gives each one a new
/// key, `KEY:replay:ID`, for a consumer that must process the events again. Every replayed event
/// carries the headers `outbox-replay: true` and `outbox-replay-id: ID` (ID: the audit row's
/// id), beside the row's own headers and the same way (transport headers, and the document's
/// `headers`), and with --fresh-keys `outbox-replay-original-key`.
///
/// A sink that fails (an outage, or an event it keeps refusing for now) is retried with backoff
/// for --retry-for; then, or on SIGINT/SIGTERM, or when the sink rejects an event for good, the
/// run stops and names the id to resume from (--from-id).
///
/// Asks for confirmation on a terminal and needs --yes otherwise.
///
/// Exit codes: 0 every selected event was sent (also when none matched); 2 bad usage, an id that
/// is not a published event, or no --yes without a terminal (nothing sent); 5 the sink failed
/// for --retry-for, or rejected an event (resume with --from-id); 130 interrupted (resume with
/// --from-id).
///
/// Examples:
///   outboxctl replay --aggregate-type order --since 2026-12-01T09:00:00Z --sink https://hooks.example.com/events --dry-run
///   outboxctl replay --all --sink 'kafka://127.0.0.1:9092?topic=orders.rebuild' --rate 500/s --fresh-keys --yes
///   outboxctl replay 4711 4712 --sink stdout --yes
#[derive(Debug, Args)]
#[command(
    verbatim_doc_comment,
    about = "Send published events again, to any sink, without changing them"
)]
#[command(mut_args(help_of(
    "dry_run",
    "Count what would be sent and list the first 100 events; send nothing"
)))]
#[command(mut_args(help_of(
    "ids",
    "Published event ids (all must be published and still in the table); not together with \
     filters"
)))]
#[command(mut_args(help_of(
    "publish_timeout",
    "Timeout of one publish (a stdout or file write too) [default: 15s]"
)))]
pub struct ReplayArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub target: TargetArgs,

    #[command(flatten)]
    pub sink: SinkArgs,

    #[command(flatten)]
    pub format: FormatArgs,

    /// Every published event still in the table (no filter).
    #[arg(long, env = "OUTBOXCTL_REPLAY_ALL", value_parser = FalseyValueParser::new())]
    pub all: bool,

    /// Start at this id: selected events with a lower id are not sent. How a stopped replay
    /// resumes (its error names the id).
    #[arg(long, env = "OUTBOXCTL_REPLAY_FROM_ID", value_name = "ID", value_parser = clap::value_parser!(i64).range(1..))]
    pub from_id: Option<i64>,

    /// At most this many events, the lowest ids first.
    #[arg(long, env = "OUTBOXCTL_REPLAY_LIMIT", value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,

    /// Send each event with a new idempotency key, `KEY:replay:ID` (the original key and the
    /// replay's id), so that a deduplicating consumer processes it again. The original key is in
    /// the header `outbox-replay-original-key`.
    #[arg(long, env = "OUTBOXCTL_REPLAY_FRESH_KEYS", value_parser = FalseyValueParser::new())]
    pub fresh_keys: bool,

    /// The replay this run continues: its audit id is the ID of the fresh keys and of the
    /// `outbox-replay-id` header (instead of this run's own), so a resumed replay sends each
    /// event as the stopped one would have. A stopped run's resume hint includes it.
    #[arg(long, env = "OUTBOXCTL_REPLAY_ID", value_name = "ID", value_parser = clap::value_parser!(i64).range(1..))]
    pub replay_id: Option<i64>,

    /// At most this many events per unit of time: N/s, N/m or N/h (e.g. 200/s), in bursts of at
    /// most one second's worth [default: as fast as the sink takes them].
    #[arg(long, env = "OUTBOXCTL_REPLAY_RATE", value_parser = parse_rate, value_name = "N/s")]
    pub rate: Option<f64>,

    /// Rows read per statement (in id order, after the last one read).
    #[arg(long, env = "OUTBOXCTL_REPLAY_BATCH_SIZE", default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..=50_000))]
    pub batch_size: u32,

    /// Bytes read per statement, at most (payload and headers, e.g. 16MiB): memory stays within
    /// a small multiple of it. An event larger than this is read alone.
    #[arg(long, env = "OUTBOXCTL_REPLAY_BATCH_BYTES", default_value = "16MiB", value_parser = crate::size::parse_nonzero_size, value_name = "SIZE")]
    pub batch_bytes: u64,

    /// Publishes in flight at once (events of one key are never in flight together).
    #[arg(long, env = "OUTBOXCTL_REPLAY_CONCURRENCY", default_value_t = 16, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub concurrency: u32,

    #[command(flatten)]
    pub publish: PublishTimeoutArgs,

    /// Keep retrying what the sink fails (an outage, or an event it fails for now) this long,
    /// with --backoff-base and --backoff-max, before stopping (exit code 5) with the id to
    /// resume from.
    #[arg(long, env = "OUTBOXCTL_REPLAY_RETRY_FOR", default_value = "5m", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub retry_for: Duration,

    #[command(flatten)]
    pub backoff: BackoffArgs,

    #[command(flatten)]
    pub sink_options: SinkOptionArgs,

    /// Why, recorded in the audit table.
    #[arg(long, env = "OUTBOXCTL_REPLAY_REASON", value_name = "TEXT")]
    pub reason: Option<String>,

    #[command(flatten)]
    pub change: ChangeArgs,
}

impl ReplayArgs {
    /// `--publish-timeout`, or [`DEFAULT_REPLAY_PUBLISH_TIMEOUT`].
    pub fn publish_timeout(&self) -> Duration {
        self.publish
            .given()
            .unwrap_or(DEFAULT_REPLAY_PUBLISH_TIMEOUT)
    }
}

#[cfg(test)]
mod tests {
    use super::DEFAULT_REPLAY_PUBLISH_TIMEOUT;

    #[test]
    fn the_help_states_the_default_publish_timeout() {
        let cli = crate::cli::command();
        let cmd = cli.find_subcommand("replay").expect("replay");
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_id() == "publish_timeout");
        let help = arg.and_then(|a| a.get_help()).expect("help").to_string();
        let want = format!(
            "[default: {}]",
            humantime::format_duration(DEFAULT_REPLAY_PUBLISH_TIMEOUT)
        );
        assert!(help.contains(&want), "{help}");
    }
}
