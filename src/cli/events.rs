//! `outboxctl events` and its subcommands: any event in any state (list, show, cancel,
//! reschedule, edit). [`ShowArgs`] is here too: `dead show` takes the same.

use std::marker::PhantomData;
use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::{Args, Subcommand, ValueEnum};

use super::shared::{help_of, ChangeArgs, DatabaseArgs, ListArgs, OutputArgs, TargetArgs};
use super::values::{parse_duration, parse_timestamp};

/// Any event, in any state: list, show, cancel, reschedule and edit.
///
/// States: ready (due, not leased), scheduled (due later), in-flight (leased by a relay),
/// published, dead.
///
/// Example: outboxctl events list --state scheduled --aggregate-id 42
#[derive(Debug, Args)]
pub struct EventsArgs {
    #[command(subcommand)]
    pub command: EventsCommand,
}

#[derive(Debug, Subcommand)]
pub enum EventsCommand {
    #[command(visible_alias = "ls")]
    List(EventsListArgs),
    Show(EventsShowArgs),
    Cancel(CancelArgs),
    Reschedule(RescheduleArgs),
    Edit(EditArgs),
}

/// Any event in full, whatever its state: every column, payload and headers pretty-printed, the
/// whole last_error, and its audit history (requeues, edits, reschedules).
///
/// Example: outboxctl events show 4711 --json
#[derive(Debug, Args)]
pub struct EventsShowArgs {
    #[command(flatten)]
    pub show: ShowArgs,
}

/// What `dead show` and `events show` take.
#[derive(Debug, Args)]
pub struct ShowArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// The event id.
    #[arg(value_parser = clap::value_parser!(i64).range(1..))]
    pub id: i64,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Events, newest first, with their state.
///
/// Example: outboxctl events list --state ready,scheduled --event-type 'order.*' --json
#[derive(Debug, Args)]
pub struct EventsListArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Only events in these states (comma-separated or repeated). `pending` means ready,
    /// scheduled and in-flight. [default: all states]
    #[arg(
        long,
        env = "OUTBOXCTL_EVENTS_STATE",
        value_enum,
        value_delimiter = ',',
        value_name = "STATE"
    )]
    pub state: Vec<StateArg>,

    #[command(flatten)]
    pub list: ListArgs,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateArg {
    Ready,
    Scheduled,
    InFlight,
    Published,
    Dead,
    Pending,
}

/// Delete events before they are published, by ids (all or nothing) or by filters (in batches).
///
/// By ids: ready, scheduled and dead events are deleted. The command refuses, changing nothing
/// (exit code 2), when any id is unknown, already published (cancelling cannot unsend it; `prune`
/// removes published history), locked by a relay publishing it right now, or in flight (leased).
/// --force deletes in-flight events too: the relay holding the lease may still deliver the event
/// once; its settle then finds no row and changes nothing.
///
/// By filters (those of `dead list`, plus --state): the matching ready, scheduled and dead events
/// (with --force also in-flight ones), newest first, at most --limit, deleted in batches of
/// --batch-size, each one statement that re-checks the state; a row published or leased since it
/// was selected is skipped and counted. A progress bar on a terminal.
///
/// Asks for confirmation on a terminal and needs --yes otherwise.
///
/// Examples:
///   outboxctl events cancel 4711 4712 --yes
///   outboxctl events cancel --event-type 'test.*' --state ready,scheduled --dry-run
#[derive(Debug, Args)]
#[command(
    verbatim_doc_comment,
    about = "Delete events before they are published, by ids (all or nothing) or by filters (in batches)"
)]
#[command(mut_args(help_of(
    "dry_run",
    "Show what would be cancelled or refused; change nothing"
)))]
#[command(mut_args(help_of(
    "state",
    "With filters: only events in these states (comma-separated or repeated; `pending` means \
     ready, scheduled and in-flight) [default: ready, scheduled, dead; in-flight too with \
     --force]. Published events are never cancelled"
)))]
#[command(mut_args(help_of(
    "batch_size",
    "With filters: rows deleted per statement (each batch is its own short transaction)"
)))]
pub struct CancelArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub target: TargetArgs,

    #[command(flatten)]
    pub by_filter: ByFilterArgs<CancelVars>,

    /// Also cancel in-flight (leased) events; see above for what that means.
    #[arg(long, env = "OUTBOXCTL_CANCEL_FORCE", value_parser = FalseyValueParser::new())]
    pub force: bool,

    #[command(flatten)]
    pub change: ChangeArgs,
}

/// Move when pending events are due, by ids (all or nothing) or by filters (in batches).
///
/// Sets available_at of ready and scheduled events. By ids it refuses, changing nothing (exit
/// code 2), when any id is unknown, published, dead (use `outboxctl requeue --delay`), in flight,
/// or locked by a relay publishing it right now.
///
/// By filters (those of `dead list`, plus --state ready/scheduled): the matching ready and
/// scheduled events, newest first, at most --limit, moved in batches of --batch-size, each one
/// statement that re-checks the state; a row claimed or published since it was selected is
/// skipped and counted. A progress bar on a terminal; asks for confirmation on a terminal and
/// needs --yes otherwise.
///
/// Examples:
///   outboxctl events reschedule 4711 --delay 1h
///   outboxctl events reschedule 4711 4712 --at 2026-12-01T09:00:00Z
///   outboxctl events reschedule --tenant 2f6c1d3e-8a4b-4c55-9d1e-0a7b6c5d4e3f --delay 30m --yes
#[derive(Debug, Args)]
#[command(
    verbatim_doc_comment,
    about = "Move when pending events are due, by ids (all or nothing) or by filters (in batches)"
)]
#[command(group(clap::ArgGroup::new("when").required(true).args(["at", "delay"])))]
#[command(mut_args(help_of("dry_run", "Show what would be moved or refused; change nothing")))]
#[command(mut_args(help_of(
    "state",
    "With filters: only events in these states (ready, scheduled; comma-separated or repeated) \
     [default: ready and scheduled]"
)))]
#[command(mut_args(help_of(
    "batch_size",
    "With filters: rows updated per statement (each batch is its own short transaction)"
)))]
pub struct RescheduleArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub target: TargetArgs,

    #[command(flatten)]
    pub by_filter: ByFilterArgs<RescheduleVars>,

    /// Due at this time (RFC 3339); a past time makes them due now.
    #[arg(long, env = "OUTBOXCTL_RESCHEDULE_AT", value_parser = parse_timestamp, value_name = "TIME")]
    pub at: Option<chrono::DateTime<chrono::Utc>>,

    /// Due this long from now (database clock), e.g. 30m; 0s makes them due now.
    #[arg(long, env = "OUTBOXCTL_RESCHEDULE_DELAY", value_parser = parse_duration, value_name = "DURATION")]
    pub delay: Option<Duration>,

    #[command(flatten)]
    pub change: ChangeArgs,
}

/// What `events cancel` and `events reschedule` take to act by filters, besides the filters: the
/// states, how many events, and how many a statement. `V` names the variables; each command says
/// in its own help what its states and its batches are (`help_of`).
#[derive(Debug, Args)]
pub struct ByFilterArgs<V: ByFilterVars> {
    #[arg(long, env = V::STATE, value_enum, value_delimiter = ',', value_name = "STATE")]
    pub state: Vec<StateArg>,

    /// With filters: at most this many events, the newest first.
    #[arg(long, env = V::LIMIT, value_parser = clap::value_parser!(u64).range(1..))]
    pub limit: Option<u64>,

    #[arg(long, env = V::BATCH_SIZE, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub batch_size: u32,

    #[arg(skip)]
    vars: PhantomData<V>,
}

/// The environment variables of a command's [`ByFilterArgs`].
pub trait ByFilterVars {
    const STATE: &'static str;
    const LIMIT: &'static str;
    const BATCH_SIZE: &'static str;
}

/// Declares a marker type naming the variables of a command's [`ByFilterArgs`]: --state's,
/// --limit's and --batch-size's.
macro_rules! by_filter_vars {
    ($(#[$meta:meta])* $name:ident: $state:literal, $limit:literal, $batch_size:literal $(,)?) => {
        $(#[$meta])*
        #[derive(Debug, Clone)]
        pub struct $name;

        impl ByFilterVars for $name {
            const STATE: &'static str = $state;
            const LIMIT: &'static str = $limit;
            const BATCH_SIZE: &'static str = $batch_size;
        }
    };
}

by_filter_vars!(
    /// `events cancel`'s variables.
    CancelVars:
        "OUTBOXCTL_CANCEL_STATE",
        "OUTBOXCTL_CANCEL_LIMIT",
        "OUTBOXCTL_CANCEL_BATCH_SIZE",
);

by_filter_vars!(
    /// `events reschedule`'s variables.
    RescheduleVars:
        "OUTBOXCTL_RESCHEDULE_STATE",
        "OUTBOXCTL_RESCHEDULE_LIMIT",
        "OUTBOXCTL_RESCHEDULE_BATCH_SIZE",
);

/// Change pending or dead events before they are handled: payload, headers, event type.
///
/// For ready, scheduled and dead events; all or nothing. Refuses, changing nothing (exit code
/// 2), when any id is unknown, published (consumers already have it), in flight (leased by a
/// relay), or locked by a relay publishing it right now. The row lock and the state check are in
/// the UPDATE itself, so a relay publishes either the old event entirely (the edit then refuses)
/// or the new one entirely, never a mix, and never the old one after the edit succeeded.
///
/// The idempotency key is kept: a consumer that dedupes on it and already processed an earlier
/// attempt of this event skips the edited one. Each change is recorded in `outbox_audit` with the
/// previous values, the actor and --reason; `events show` lists it. A dead event stays dead
/// unless --requeue. Changing more than one event needs --yes when stdin is not a terminal.
///
/// Examples:
///   outboxctl events edit 4711 --payload @fixed.json --requeue --reason 'schema fix'
///   outboxctl events edit 4711 4712 --set-header schema-version=2 --unset-header trace --dry-run
#[derive(Debug, Args)]
#[command(
    verbatim_doc_comment,
    about = "Change pending or dead events before they are handled: payload, headers, event type"
)]
#[command(mut_args(help_of(
    "dry_run",
    "Print each event's diff (event type, headers, payload as pretty JSON); change nothing"
)))]
pub struct EditArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// Event ids.
    #[arg(required = true, value_parser = clap::value_parser!(i64).range(1..), value_name = "ID")]
    pub ids: Vec<i64>,

    /// The new payload as JSON, or @PATH to read it from a file, or @- from stdin (replaces the
    /// whole payload).
    #[arg(long, env = "OUTBOXCTL_EDIT_PAYLOAD", value_name = "JSON|@PATH|@-")]
    pub payload: Option<String>,

    /// Set a header (repeatable): --set-header schema-version=2. In the environment variable,
    /// one KEY=VALUE per line.
    #[arg(
        long = "set-header",
        env = "OUTBOXCTL_EDIT_SET_HEADERS",
        value_delimiter = '\n',
        value_name = "KEY=VALUE"
    )]
    pub set_headers: Vec<String>,

    /// Remove a header (repeatable). In the environment variable, one name per line.
    #[arg(
        long = "unset-header",
        env = "OUTBOXCTL_EDIT_UNSET_HEADERS",
        value_delimiter = '\n',
        value_name = "KEY"
    )]
    pub unset_headers: Vec<String>,

    /// The new event type.
    #[arg(long, env = "OUTBOXCTL_EDIT_EVENT_TYPE", value_name = "TYPE")]
    pub event_type: Option<String>,

    /// Dead events only: after the change, make them ready now with attempt_count 0 (like
    /// `outboxctl requeue`), in the same statement. Refused for events that are not dead.
    #[arg(long, env = "OUTBOXCTL_EDIT_REQUEUE", value_parser = FalseyValueParser::new())]
    pub requeue: bool,

    /// Why, recorded in the audit table.
    #[arg(long, env = "OUTBOXCTL_EDIT_REASON", value_name = "TEXT")]
    pub reason: Option<String>,

    #[command(flatten)]
    pub change: ChangeArgs,
}
