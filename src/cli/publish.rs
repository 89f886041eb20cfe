//! `outboxctl publish`: the flags of one event, or of a JSON-lines file of many.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use super::shared::{DatabaseArgs, OutputArgs};
use super::values::{parse_duration, parse_timestamp};

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

    /// Payload as JSON, or @PATH to read it from a file, or @- to read it from stdin.
    #[arg(
        long,
        env = "OUTBOXCTL_PAYLOAD",
        required_unless_present = "file",
        value_name = "JSON|@PATH|@-"
    )]
    pub payload: Option<String>,

    /// A header to store with the event (repeatable): --header schema-version=1. In the
    /// environment variable, one KEY=VALUE per line.
    #[arg(
        long = "header",
        value_name = "KEY=VALUE",
        env = "OUTBOXCTL_HEADERS",
        value_delimiter = '\n'
    )]
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

    /// Bytes of JSON lines per INSERT statement in bulk mode, at most (e.g. 16MiB): a batch ends
    /// at --batch-size lines or this many bytes, whichever comes first, so memory stays bounded
    /// by it and the longest line. A longer line is inserted alone.
    #[arg(long, env = "OUTBOXCTL_PUBLISH_BATCH_BYTES", default_value = "16MiB", value_parser = crate::size::parse_nonzero_size, value_name = "SIZE")]
    pub batch_bytes: u64,

    #[command(flatten)]
    pub output: OutputArgs,
}
