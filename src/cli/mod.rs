//! The command line, as clap derive types. Nothing here does I/O: `config` turns these into
//! validated settings and the command modules act on those.
//!
//! This module holds the top of the parser (`Cli`, `Command`, [`command`], [`parse`],
//! [`try_parse_from`]) and the rules that span subcommands (shared flags before the subcommand,
//! the Nagios exit code of `stats --check`'s usage errors). Each subcommand's flags are in a file
//! of their own, the groups several subcommands flatten in [`shared`], the value parsers in
//! [`values`] and the environment's part in parsing in [`env`]. Everything is re-exported here:
//! the rest of the crate names `crate::cli::X`.

mod bench;
mod dead;
mod doctor;
mod env;
mod events;
mod migrate;
mod ordering;
mod prune;
mod publish;
mod relay;
mod requeue;
mod shared;
mod stats;
mod values;

pub use bench::{BenchArgs, DemoArgs};
pub use dead::{
    DeadArgs, DeadCommand, DeadDiscardArgs, DeadExportArgs, DeadListArgs, DeadShowArgs,
    ExportFormat,
};
pub use doctor::DoctorArgs;
pub use events::{
    CancelArgs, EditArgs, EventsArgs, EventsCommand, EventsListArgs, EventsShowArgs,
    RescheduleArgs, ShowArgs, StateArg,
};
pub use migrate::MigrateArgs;
pub use ordering::{
    OnDeadArg, OrderingArgs, OrderingCommand, OrderingDisableArgs, OrderingEnableArgs,
    OrderingSkipArgs, OrderingStatusArgs,
};
pub use prune::PruneArgs;
pub use publish::PublishArgs;
pub use relay::{RelayArgs, RelayMode, RetryArgs, DEFAULT_LEASE};
pub use requeue::RequeueArgs;
pub use shared::{
    AuditArgs, ConfirmArgs, DatabaseArgs, FilterArgs, LogArgs, LogFormat, OutputArgs, PoolerArg,
    SharedArgs, TimeArg,
};
pub use stats::{StatsArgs, StatsBy, StatsCheckArgs, StatsFormat};
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
    #[command(visible_alias = "dlq")]
    Dead(DeadArgs),
    Requeue(RequeueArgs),
    Ordering(OrderingArgs),
    #[command(visible_alias = "event")]
    Events(EventsArgs),
    Prune(PruneArgs),
    Doctor(DoctorArgs),
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
/// and exits 3 (UNKNOWN) instead of 2.
pub fn parse() -> Cli {
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
            std::process::exit(i32::from(crate::exit::nagios::UNKNOWN));
        }
        e.exit()
    })
}

/// Whether a command line asks for `stats --check` (typed, or `OUTBOXCTL_STATS_CHECK` on), so
/// that even its usage errors follow the Nagios exit codes.
pub fn is_nagios_check(
    args: &[std::ffi::OsString],
    env: impl Fn(&str) -> Option<std::ffi::OsString>,
) -> bool {
    let words: Vec<&str> = args.iter().skip(1).filter_map(|a| a.to_str()).collect();
    // The subcommand is the first word that names one (`--schema stats migrate` is `migrate`).
    let cmd = command();
    let names: Vec<&str> = cmd
        .get_subcommands()
        .flat_map(|s| std::iter::once(s.get_name()).chain(s.get_all_aliases()))
        .collect();
    let mut sub = None;
    let mut rest = words.iter();
    while let Some(w) = rest.next() {
        if [
            "--database-url",
            "--schema",
            "--connect-timeout",
            "--log-format",
        ]
        .contains(w)
        {
            rest.next(); // the flag's value
        } else if names.contains(w) {
            sub = Some(*w);
            break;
        }
    }
    if sub != Some("stats") {
        return false;
    }
    let typed = words
        .iter()
        .any(|w| *w == "--check" || w.starts_with("--check="));
    let from_env = env("OUTBOXCTL_STATS_CHECK")
        .and_then(|v| v.into_string().ok())
        .is_some_and(|v| {
            !matches!(
                v.trim().to_ascii_lowercase().as_str(),
                "" | "0" | "false" | "no" | "off" | "n" | "f"
            )
        });
    typed || from_env
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
    let mut cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut cmd))?;
    cli.resolve_shared(&matches)
        .map_err(|msg| cmd.error(clap::error::ErrorKind::ArgumentConflict, msg))?;
    Ok(cli)
}

impl Cli {
    /// Applies the flags given before the subcommand (see [`SharedArgs`]) to the subcommand's own
    /// groups, unless the subcommand's flag was given on the command line itself. A shared flag
    /// before a command that does not take it is an error.
    fn resolve_shared(&mut self, matches: &ArgMatches) -> Result<(), String> {
        let mut leaf = matches;
        let mut path = Vec::new();
        while let Some((name, sub)) = leaf.subcommand() {
            path.push(name.to_owned());
            leaf = sub;
        }
        let typed = |id: &str| leaf.value_source(id) == Some(ValueSource::CommandLine);
        let refuse =
            |flag: &str| format!("`{flag}` does not apply to `outboxctl {}`", path.join(" "));
        let shared = self.shared.clone();
        let (db, output) = self.command.shared_groups();
        let db_flag = [
            (shared.database_url.is_some(), "--database-url"),
            (shared.schema.is_some(), "--schema"),
            (shared.connect_timeout.is_some(), "--connect-timeout"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag));
        match (db, db_flag) {
            (None, Some(flag)) => return Err(refuse(flag)),
            (Some(db), Some(_)) => {
                if let (Some(v), false) = (shared.database_url, typed("database_url")) {
                    db.database_url = Some(v);
                }
                if let (Some(v), false) = (shared.schema, typed("schema")) {
                    db.schema = v;
                }
                if let (Some(v), false) = (shared.connect_timeout, typed("connect_timeout")) {
                    db.connect_timeout = v;
                }
            }
            (_, None) => {}
        }
        match (output, shared.json) {
            (None, true) => return Err(refuse("--json")),
            (Some(o), true) if !typed("json") => o.json = true,
            _ => {}
        }
        Ok(())
    }
}

impl Command {
    /// The shared groups of the command that runs, for [`Cli::resolve_shared`]. A new
    /// subcommand with a `DatabaseArgs` or `OutputArgs` group is listed here.
    fn shared_groups(&mut self) -> (Option<&mut DatabaseArgs>, Option<&mut OutputArgs>) {
        match self {
            Command::Migrate(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Publish(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Relay(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Stats(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Dead(d) => match &mut d.command {
                DeadCommand::List(a) => (Some(&mut a.db), Some(&mut a.output)),
                DeadCommand::Show(a) => (Some(&mut a.show.db), Some(&mut a.show.output)),
                DeadCommand::Discard(a) => (Some(&mut a.db), Some(&mut a.output)),
                DeadCommand::Export(a) => (Some(&mut a.db), None),
            },
            Command::Requeue(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Ordering(o) => match &mut o.command {
                OrderingCommand::Enable(a) => (Some(&mut a.db), Some(&mut a.output)),
                OrderingCommand::Disable(a) => (Some(&mut a.db), Some(&mut a.output)),
                OrderingCommand::Status(a) => (Some(&mut a.db), Some(&mut a.output)),
                OrderingCommand::Skip(a) => (Some(&mut a.db), Some(&mut a.output)),
            },
            Command::Events(e) => match &mut e.command {
                EventsCommand::List(a) => (Some(&mut a.db), Some(&mut a.output)),
                EventsCommand::Show(a) => (Some(&mut a.show.db), Some(&mut a.show.output)),
                EventsCommand::Cancel(a) => (Some(&mut a.db), Some(&mut a.output)),
                EventsCommand::Reschedule(a) => (Some(&mut a.db), Some(&mut a.output)),
                EventsCommand::Edit(a) => (Some(&mut a.db), Some(&mut a.output)),
            },
            Command::Prune(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Doctor(a) => (Some(&mut a.db), Some(&mut a.output)),
            Command::Completions(_) => (None, None),
            Command::Demo(a) => (Some(&mut a.db), None),
            Command::Bench(a) => (Some(&mut a.db), Some(&mut a.output)),
        }
    }
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
                EventsCommand::List(a) => (a.db.schema, a.output.json),
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
    fn nagios_check_is_recognised_typed_or_from_the_environment() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let none = |_: &str| None;
        let on = |_: &str| Some(std::ffi::OsString::from("1"));
        let off = |_: &str| Some(std::ffi::OsString::from("off"));
        assert!(is_nagios_check(&args(&["o", "stats", "--check"]), none));
        assert!(is_nagios_check(
            &args(&["o", "stats", "--check=true"]),
            none
        ));
        assert!(is_nagios_check(
            &args(&["o", "stats", "--warn-lag", "x"]),
            on
        ));
        assert!(!is_nagios_check(
            &args(&["o", "stats", "--warn-lag", "x"]),
            off
        ));
        assert!(!is_nagios_check(&args(&["o", "migrate", "--check"]), none));
        assert!(!is_nagios_check(&args(&["o", "stats"]), none));
        assert!(!is_nagios_check(
            &args(&["o", "--schema", "stats", "migrate", "--check"]),
            none
        ));
        assert!(is_nagios_check(
            &args(&["o", "--schema", "x", "stats", "--check"]),
            none
        ));
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
