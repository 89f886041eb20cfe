//! The command line, as clap derive types. Nothing here does I/O: `config` turns these into
//! validated settings and the command modules act on those.
//!
//! This module holds the top of the parser (`Cli`, `Command`, [`command`], [`parse`],
//! [`try_parse_from`]) and the rules that span subcommands (shared flags before the subcommand,
//! the Nagios exit code of `stats --check`'s usage errors, decided in `nagios.rs`). Each
//! subcommand's flags are in a file of their own (`demo` beside `bench`: both run in a scratch
//! schema), the groups several subcommands flatten in `shared.rs`, the value parsers in `values.rs`
//! and the environment's part in parsing in `env.rs`. Everything is re-exported here: the rest of
//! the crate names `crate::cli::X`.

mod bench;
mod dead;
mod doctor;
mod env;
mod events;
mod grants;
mod logmode;
mod migrate;
mod nagios;
mod ordering;
mod prune;
mod publish;
mod relay;
mod replay;
mod requeue;
mod shared;
mod stats;
mod top;
mod values;

pub use bench::{BenchArgs, DemoArgs};
pub use dead::{
    DeadArgs, DeadCommand, DeadDiscardArgs, DeadExportArgs, DeadListArgs, DeadShowArgs,
    ExportFormat,
};
pub use doctor::{DoctorArgs, DoctorLagArgs, DoctorRelayArgs};
pub use events::{
    ByFilterArgs, ByFilterVars, CancelArgs, CancelVars, EditArgs, EventsArgs, EventsCommand,
    EventsListArgs, EventsShowArgs, RescheduleArgs, RescheduleVars, ShowArgs, StateArg,
};
pub use grants::{GrantsArgs, GrantsFor};
pub use logmode::{LogModeArgs, LogModeChangeArgs, LogModeCommand, LogModeStatusArgs};
pub use migrate::MigrateArgs;
pub use nagios::is_nagios_check;
pub use ordering::{
    OnDeadArg, OrderingArgs, OrderingCommand, OrderingDisableArgs, OrderingEnableArgs,
    OrderingSkipArgs, OrderingStatusArgs, OrderingTypesArgs,
};
pub use prune::PruneArgs;
pub use publish::PublishArgs;
pub use relay::{
    BackoffArgs, CloudEventsMode, EventFormat, FormatArgs, LeaseArgs, PublishTimeoutArgs,
    RelayArgs, RelayMode, RetryArgs, SinkArgs, SinkOptionArgs, DEFAULT_LEASE, DEFAULT_SINK,
};
pub use replay::{ReplayArgs, DEFAULT_REPLAY_PUBLISH_TIMEOUT};
pub use requeue::RequeueArgs;
pub use shared::{
    AuditArgs, ChangeArgs, ConfirmArgs, DatabaseArgs, DryRunArgs, FilterArgs, ListArgs, LogArgs,
    LogFormat, NoConfirm, OutputArgs, PoolerArg, SharedArgs, SwitchChangeArgs, TargetArgs, TimeArg,
};
pub use stats::{
    BacklogCheck, DeadCheck, LagCheck, RetryingCheck, StatsArgs, StatsBy, StatsCheckArgs,
    StatsFormat,
};
pub use top::{TopArgs, TopBy, MIN_TOP_INTERVAL};
pub use values::{
    parse_duration, parse_listen_addr, parse_nonzero_duration, parse_time_or_ago, parse_timestamp,
    parse_uuid, MAX_DURATION,
};

use clap::parser::ValueSource;
use clap::{ArgMatches, Args, CommandFactory, FromArgMatches, Parser, Subcommand};

use env::{explain, without_empty_env};

/// `--version`: the package version, the commit and the build date (from `build.rs`; `unknown`
/// when built outside a git checkout).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("OUTBOXCTL_GIT_COMMIT"),
    ", built ",
    env!("OUTBOXCTL_BUILD_DATE"),
    ")"
);

/// Operate a transactional outbox on PostgreSQL: migrate, publish, relay, inspect, prune.
///
/// A service writes its business rows and an `outbox` row in one transaction; outboxctl does
/// everything after that.
///
/// Example: outboxctl demo (the whole tool in a scratch schema; needs only PostgreSQL)
#[derive(Debug, Parser)]
#[command(
    name = "outboxctl",
    version = VERSION,
    propagate_version = true,
    max_term_width = 100
)]
pub struct Cli {
    #[command(flatten)]
    pub log: LogArgs,

    #[command(flatten)]
    pub shared: SharedArgs,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    Migrate(MigrateArgs),
    Publish(PublishArgs),
    Relay(RelayArgs),
    Stats(StatsArgs),
    Top(TopArgs),
    #[command(visible_alias = "dlq")]
    Dead(DeadArgs),
    Requeue(RequeueArgs),
    Replay(Box<ReplayArgs>),
    Ordering(OrderingArgs),
    #[command(name = "log")]
    LogMode(LogModeArgs),
    #[command(visible_alias = "event")]
    Events(EventsArgs),
    Prune(PruneArgs),
    Doctor(DoctorArgs),
    Grants(GrantsArgs),
    Completions(CompletionsArgs),
    Demo(DemoArgs),
    Bench(BenchArgs),
}

/// Print a shell completion script.
///
/// Example: outboxctl completions bash > /etc/bash_completion.d/outboxctl
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

/// The clap command with the house rules applied to every argument of every subcommand:
/// environment values are never shown (`[env: NAME]`, never `NAME=value`: a sink URL, a header
/// or a payload may hold a secret). Everything a user sees (help, errors, completions) comes
/// from this, not from `Cli::command()`.
pub fn command() -> clap::Command {
    fn rules(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| a.hide_env_values(true))
            .mut_subcommands(rules)
    }
    rules(Cli::command())
}

/// Parses the process's command line with [`try_parse_from`]; on an error prints it and exits
/// (2 for usage errors, 0 for --help and --version).
///
/// `stats --check` is a Nagios plugin: a usage error there prints `OUTBOX UNKNOWN - ...` on stdout
/// and exits with `nagios_unknown` (UNKNOWN, 3: `exit::nagios::UNKNOWN`, passed in by `main` so
/// the command line does not import the exit-code layer, which imports every layer's errors)
/// instead of 2.
pub fn parse(nagios_unknown: u8) -> Cli {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    try_parse_from(&args).unwrap_or_else(|e| {
        if e.use_stderr() && is_nagios_check(&args, |k| std::env::var_os(k)) {
            let text = e.to_string();
            let first = text.lines().next().unwrap_or("invalid arguments");
            println!(
                "OUTBOX UNKNOWN - {}",
                first.strip_prefix("error: ").unwrap_or(first)
            );
            let _ = e.print();
            std::process::exit(i32::from(nagios_unknown));
        }
        e.exit()
    })
}

/// Parses a command line with [`command`]'s rules, then resolves the shared flags given before
/// the subcommand into the subcommand's own groups (see [`SharedArgs`]).
///
/// An empty environment variable counts as unset (`OUTBOXCTL_SCHEMA=` is the default schema).
/// An invalid value that came from the environment is reported with the variable's name (and
/// without the value), and usage lines in errors do not list what the environment provided as if
/// it had been typed.
pub fn try_parse_from<I, T>(args: I) -> Result<Cli, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let args: Vec<std::ffi::OsString> = args.into_iter().map(Into::into).collect();
    let mut cmd = without_empty_env(command());
    let matches = cmd
        .try_get_matches_from_mut(&args)
        .map_err(|e| explain(e, &cmd, &args))?;
    let matches = apply_shared(&mut cmd, &args, matches)?;
    Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))
}

/// The id prefix of [`SharedArgs`]' arguments: `shared_schema` stands for the subcommands'
/// `schema`.
const SHARED: &str = "shared_";

/// Applies the flags given before the subcommand (see [`SharedArgs`]) to the subcommand's own
/// arguments of the same id, unless the subcommand's flag was given on the command line itself:
/// the command line is parsed again with each such argument defaulting to the value given before
/// the subcommand, without its environment variable (which that value wins over). A shared flag
/// before a command that has no such argument is an error.
///
/// Read from what clap parsed, so a new subcommand with a [`DatabaseArgs`] or [`OutputArgs`]
/// group takes the shared flags with no edit here.
fn apply_shared(
    cmd: &mut clap::Command,
    args: &[std::ffi::OsString],
    matches: ArgMatches,
) -> Result<ArgMatches, clap::Error> {
    let mut path = Vec::new();
    let mut leaf = &matches;
    while let Some((name, sub)) = leaf.subcommand() {
        path.push(name.to_owned());
        leaf = sub;
    }
    let leaf_ids: Vec<String> = path
        .iter()
        .fold(&*cmd, |c, name| {
            c.find_subcommand(name).expect("a parsed subcommand")
        })
        .get_arguments()
        .map(|a| a.get_id().to_string())
        .collect();
    let shared: Vec<(String, String)> = cmd
        .get_arguments()
        .filter(|a| a.get_id().as_str().starts_with(SHARED))
        .map(|a| (a.get_id().to_string(), a.to_string()))
        .collect();
    let mut defaults = Vec::new();
    for (id, shown) in &shared {
        let own = &id[SHARED.len()..];
        if matches.value_source(id) != Some(ValueSource::CommandLine) {
            continue;
        }
        if !leaf_ids.iter().any(|a| a == own) {
            let flag = shown.split(' ').next().unwrap_or(shown);
            let msg = format!("`{flag}` does not apply to `outboxctl {}`", path.join(" "));
            return Err(cmd.error(clap::error::ErrorKind::ArgumentConflict, msg));
        }
        if leaf.value_source(own) != Some(ValueSource::CommandLine) {
            let value = matches.get_raw(id).into_iter().flatten().next();
            defaults.push((own.to_owned(), value.expect("given").to_owned()));
        }
    }
    if defaults.is_empty() {
        return Ok(matches);
    }
    fn with_defaults(
        cmd: clap::Command,
        path: &[String],
        defaults: &[(String, std::ffi::OsString)],
    ) -> clap::Command {
        match path.split_first() {
            Some((name, rest)) => cmd.mut_subcommand(name, |s| with_defaults(s, rest, defaults)),
            None => defaults.iter().fold(cmd, |cmd, (id, value)| {
                cmd.mut_arg(id, |a| a.env(None).default_value(value.clone()))
            }),
        }
    }
    *cmd = with_defaults(without_empty_env(command()), &path, &defaults);
    cmd.try_get_matches_from_mut(args)
        .map_err(|e| explain(e, cmd, args))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn cli_definition_is_consistent() {
        Cli::command().debug_assert();
        command().debug_assert();
    }

    #[test]
    fn shared_flags_after_the_subcommand_win_over_those_before_it() {
        let schema = |args: &[&str]| match try_parse_from(args).unwrap().command {
            Command::Stats(a) => (a.db.schema, a.output.json),
            Command::Events(e) => match e.command {
                EventsCommand::List(a) => (a.db.schema, a.list.output.json),
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        };
        let p = "outboxctl";
        assert_eq!(
            schema(&[p, "--schema", "a", "stats", "--schema", "b"]).0,
            "b"
        );
        assert_eq!(schema(&[p, "--schema", "a", "stats"]).0, "a");
        assert_eq!(schema(&[p, "--schema", "a", "events", "list"]).0, "a");
        assert!(schema(&[p, "--json", "stats"]).1);
        let err = try_parse_from([p, "--json", "completions", "bash"]).unwrap_err();
        assert!(err
            .to_string()
            .contains("`--json` does not apply to `outboxctl completions`"));
        let err = try_parse_from([p, "--connect-timeout", "0s", "stats"]).unwrap_err();
        assert!(
            err.to_string().contains("must be greater than zero"),
            "{err}"
        );
    }

    #[test]
    fn no_environment_value_is_ever_shown() {
        fn walk(cmd: &clap::Command, seen: &mut usize) {
            for a in cmd.get_arguments() {
                if a.get_env().is_some() {
                    *seen += 1;
                    assert!(
                        a.is_hide_env_values_set(),
                        "{} --{:?} shows its env value",
                        cmd.get_name(),
                        a.get_long()
                    );
                }
            }
            cmd.get_subcommands().for_each(|s| walk(s, seen));
        }
        let mut seen = 0;
        walk(&command(), &mut seen);
        assert!(seen > 100, "{seen}");
    }
}
