//! The argument groups several subcommands flatten: each flag and its environment variable is
//! declared once, here, so two commands cannot drift apart in name, variable or parsing.

use std::time::Duration;

use clap::builder::FalseyValueParser;
use clap::{Args, FromArgMatches, ValueEnum};

use super::values::{parse_nonzero_duration, parse_time_or_ago, parse_uuid};

/// The connection and output flags of the subcommands, also accepted before the subcommand
/// (`outboxctl --schema x stats`). [`super::parse`] resolves them into the subcommand's own
/// [`DatabaseArgs`] and [`OutputArgs`]: a flag after the subcommand wins over one before it,
/// which wins over the environment variable, which wins over the default.
///
/// Each id is `shared_` and the id of the subcommand's argument it stands for.
#[derive(Debug, Args, Clone, Default)]
#[command(next_help_heading = "Shared options (also taken after the command, which wins)")]
pub struct SharedArgs {
    /// PostgreSQL URL, for every command that connects (see its --help).
    #[arg(long = "database-url", id = "shared_database_url", value_name = "URL")]
    pub database_url: Option<String>,

    /// Schema holding the outbox tables, for every command that connects.
    #[arg(long = "schema", id = "shared_schema", value_name = "NAME")]
    pub schema: Option<String>,

    /// Give up connecting after this long, for every command that connects.
    #[arg(long = "connect-timeout", id = "shared_connect_timeout", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub connect_timeout: Option<Duration>,

    /// Print JSON on stdout, for every command that has --json.
    #[arg(long = "json", id = "shared_json")]
    pub json: bool,
}

/// Logging options (to stderr; stdout carries data only).
#[derive(Debug, Args, Clone)]
pub struct LogArgs {
    /// More of outboxctl's own log output (-v info, -vv debug, -vvv trace; other crates stay off).
    /// `OUTBOXCTL_LOG` / `RUST_LOG` (a tracing filter) replace it.
    #[arg(short, long, global = true, action = clap::ArgAction::Count, env = "OUTBOXCTL_VERBOSE")]
    pub verbose: u8,

    /// Only errors: no log lines below error and no summary lines ("inserted event 42"). Data
    /// (tables, --json, relayed events) is still printed.
    #[arg(
        short,
        long,
        global = true,
        env = "OUTBOXCTL_QUIET",
        value_parser = FalseyValueParser::new(),
        conflicts_with = "verbose"
    )]
    pub quiet: bool,

    /// Log line format.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Text, env = "OUTBOXCTL_LOG_FORMAT")]
    pub log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Where the outbox lives.
#[derive(Debug, Args, Clone)]
pub struct DatabaseArgs {
    /// PostgreSQL URL (postgres://user:pass@host:port/db?sslmode=...). Without it the libpq
    /// variables PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE and PGSSLMODE are used, like psql.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, value_name = "URL")]
    pub database_url: Option<String>,

    /// Schema holding the outbox tables (created by `migrate` if missing).
    #[arg(
        long,
        env = "OUTBOXCTL_SCHEMA",
        default_value = "public",
        value_name = "NAME"
    )]
    pub schema: String,

    /// Give up connecting after this long (e.g. 5s).
    #[arg(long, env = "OUTBOXCTL_CONNECT_TIMEOUT", default_value = "10s", value_parser = parse_nonzero_duration, value_name = "DURATION")]
    pub connect_timeout: Duration,

    /// What sits between outboxctl and PostgreSQL. `session`: a pooler in session mode
    /// (PgBouncer pool_mode = session): no startup parameters it refuses, the schema set per
    /// connection. `transaction`: a pooler in transaction mode (pool_mode = transaction, any
    /// PgBouncer version): every statement in a transaction of its own that sets the schema and
    /// the session's settings with SET LOCAL, no LISTEN (the relay polls); only relay, prune and
    /// requeue run this way (other commands exit 2).
    #[arg(
        long,
        env = "OUTBOXCTL_POOLER",
        value_enum,
        default_value_t = PoolerArg::None,
        value_name = "KIND"
    )]
    pub pooler: PoolerArg,
}

/// `--pooler`: see [`crate::config::Pooler`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PoolerArg {
    /// PostgreSQL itself (or a pooler that passes the `options` startup parameter on).
    None,
    /// A pooler in session mode.
    Session,
    /// A pooler in transaction mode.
    Transaction,
}

/// Machine-readable output.
#[derive(Debug, Args, Clone, Copy)]
pub struct OutputArgs {
    /// Print JSON on stdout instead of a table.
    #[arg(long, env = "OUTBOXCTL_JSON", value_parser = FalseyValueParser::new())]
    pub json: bool,
}

/// Asking before destructive changes.
#[derive(Debug, Args, Clone, Copy)]
pub struct ConfirmArgs {
    /// Do not ask for confirmation. Required when stdin is not a terminal (cron, scripts, CI):
    /// without it the command refuses with exit code 2 and changes nothing.
    #[arg(long, short = 'y', env = "OUTBOXCTL_YES", value_parser = FalseyValueParser::new())]
    pub yes: bool,
}

/// Who is acting, for the audit trail (`outbox_audit`).
#[derive(Debug, Args, Clone, Default)]
pub struct AuditArgs {
    /// Who runs this, recorded in the audit row beside the database role, e.g. alice or
    /// deploy-bot [default: $USER@hostname].
    #[arg(long, env = "OUTBOXCTL_ACTOR", value_name = "NAME")]
    pub actor: Option<String>,
}

/// Which events to act on. All given filters must match (AND). Text is always bound as a
/// parameter, never pasted into SQL.
#[derive(Debug, Args, Clone, Default)]
pub struct FilterArgs {
    /// Event type as a glob: `*` matches any run of characters, `?` one character, `\` makes the
    /// next character literal (e.g. 'order.*').
    #[arg(long, env = "OUTBOXCTL_FILTER_EVENT_TYPE", value_name = "GLOB")]
    pub event_type: Option<String>,

    /// Tenant uuid.
    #[arg(long, env = "OUTBOXCTL_FILTER_TENANT", value_name = "UUID", value_parser = parse_uuid)]
    pub tenant: Option<uuid::Uuid>,

    /// Aggregate type (exact).
    #[arg(long, env = "OUTBOXCTL_FILTER_AGGREGATE_TYPE", value_name = "TYPE")]
    pub aggregate_type: Option<String>,

    /// Aggregate id (exact).
    #[arg(long, env = "OUTBOXCTL_FILTER_AGGREGATE_ID", value_name = "ID")]
    pub aggregate_id: Option<String>,

    /// Only events whose time is at or after this: an RFC 3339 time, or a duration meaning that
    /// long ago (e.g. 2h). The time is when the event was dead-lettered for `dead` and `requeue`,
    /// when it was created for `events`, when it was published for `replay` (in log mode, which
    /// records no time per event, when it was created for an event the log published).
    #[arg(long, env = "OUTBOXCTL_FILTER_SINCE", value_parser = parse_time_or_ago, value_name = "TIME|DURATION")]
    pub since: Option<TimeArg>,

    /// Only events whose time is before this (RFC 3339, or a duration ago); see --since.
    #[arg(long, env = "OUTBOXCTL_FILTER_UNTIL", value_parser = parse_time_or_ago, value_name = "TIME|DURATION")]
    pub until: Option<TimeArg>,

    /// Only events whose last_error contains this text (case-insensitive).
    #[arg(long, env = "OUTBOXCTL_FILTER_ERROR", value_name = "TEXT")]
    pub error: Option<String>,

    /// Only events whose last_error matches this PostgreSQL regular expression (case-sensitive;
    /// start it with (?i) to ignore case), e.g. 'HTTP (502|503)'.
    #[arg(long, env = "OUTBOXCTL_FILTER_ERROR_REGEX", value_name = "REGEX")]
    pub error_regex: Option<String>,
}

/// `--since`/`--until` values; defined in a leaf module, so the SQL layer never needs a CLI type.
pub use crate::when::TimeArg;

/// What a list of events takes after its own flags (`dead list`, `events list`): the filters, how
/// many events it shows, and the output format.
#[derive(Debug, Args, Clone)]
pub struct ListArgs {
    #[command(flatten)]
    pub filter: FilterArgs,

    /// Show at most this many events (a note on stderr says when more match).
    #[arg(long, env = "OUTBOXCTL_LIST_LIMIT", default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..=10_000_000))]
    pub limit: u64,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Previewing a change. The flag and its variable are the same for every command that changes
/// events; each command says in its own help what its preview shows, with
/// `#[command(mut_args(help_of("dry_run", "..")))]`.
#[derive(Debug, Args, Clone, Copy)]
pub struct DryRunArgs {
    /// Show what would change; change nothing.
    #[arg(long, env = "OUTBOXCTL_DRY_RUN", value_parser = FalseyValueParser::new())]
    pub dry_run: bool,
}

/// For `#[command(mut_args(help_of(id, help)))]` on a subcommand: the help of a flag of a shared
/// group where it means something particular to that subcommand. (`mut_arg` would move the flag
/// last in completions and the reference pages.)
pub(super) fn help_of(id: &'static str, help: &'static str) -> impl FnMut(clap::Arg) -> clap::Arg {
    move |a| if a.get_id() == id { a.help(help) } else { a }
}

/// The variable `env` for the flag `id` (for `mut_args`): a shared group of flags whose variable
/// is named per command ([`SwitchChangeArgs`]'s `--reason`).
pub(super) fn env_of(id: &'static str, env: &'static str) -> impl FnMut(clap::Arg) -> clap::Arg {
    move |a| if a.get_id() == id { a.env(env) } else { a }
}

/// What the database switches' `enable` and `disable` take last (`ordering`, `log`): why the
/// switch changed and who changed it, for the audit trail, and the output format. Each command
/// names `--reason`'s variable ([`env_of`]).
#[derive(Debug, Args)]
pub struct SwitchChangeArgs {
    /// Why, recorded in the audit table.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// What a command that changes events takes after its own flags, in this order: the preview, the
/// confirmation (`C`: [`ConfirmArgs`], or [`NoConfirm`] for a command that never asks), who acts
/// and the output format.
#[derive(Debug, Args, Clone)]
pub struct ChangeArgs<C: Args + FromArgMatches = ConfirmArgs> {
    #[command(flatten)]
    pub preview: DryRunArgs,

    #[command(flatten)]
    pub confirm: C,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// [`ChangeArgs`] of a command that never asks for confirmation (`requeue`, `prune`).
#[derive(Debug, Args, Clone, Copy)]
pub struct NoConfirm {}

/// The events a change or an export acts on: ids, or filters (not both; see
/// [`crate::select::Selection`]). A command whose ids must be in a particular state says so with
/// `#[command(mut_args(help_of("ids", "..")))]`.
#[derive(Debug, Args, Clone, Default)]
pub struct TargetArgs {
    /// Event ids; not together with filters.
    #[arg(value_parser = clap::value_parser!(i64).range(1..), value_name = "ID")]
    pub ids: Vec<i64>,

    #[command(flatten)]
    pub filter: FilterArgs,
}

/// Declares warning/critical threshold pairs as argument groups to flatten. The flags of every
/// pair declared in one call share their type and the value parser and conditions in brackets,
/// written once before the type; each flag has its own name, environment variable and help.
/// `pair()` gives (warning, critical).
macro_rules! threshold_pair {
    ($common:tt $ty:ty; $($(#[$meta:meta])* $vis:vis struct $name:ident { $($flags:tt)* })+) => {
        $(threshold_pair!(@one $common $ty; $(#[$meta])* $vis struct $name { $($flags)* });)+
    };
    (@one [$($common:tt)*] $ty:ty; $(#[$meta:meta])* $vis:vis struct $name:ident {
        $(#[$wdoc:meta])* $warn:ident [$($wattr:tt)*],
        $(#[$cdoc:meta])* $crit:ident [$($cattr:tt)*] $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Debug, clap::Args, Clone, Default)]
        $vis struct $name {
            $(#[$wdoc])*
            #[arg(long, $($wattr)*, $($common)*)]
            pub $warn: $ty,

            $(#[$cdoc])*
            #[arg(long, $($cattr)*, $($common)*)]
            pub $crit: $ty,
        }

        impl $name {
            /// The warning and the critical threshold.
            pub fn pair(&self) -> ($ty, $ty) {
                (self.$warn, self.$crit)
            }
        }
    };
}
pub(super) use threshold_pair;
