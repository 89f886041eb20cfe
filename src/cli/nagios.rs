//! Whether a command line is `stats --check`, decided even when it does not parse: a Nagios
//! plugin's usage error must exit 3 (UNKNOWN), not 2, or the monitoring system reads it as
//! CRITICAL. Apart from [`super::parse`] because it reads a command line that clap refused.

use std::ffi::OsString;

use clap::builder::{FalseyValueParser, TypedValueParser, ValueParser};
use clap::parser::ValueSource;
use clap::{Arg, ArgAction};

/// The subcommand and the flag that make a command line a Nagios check.
const STATS: &str = "stats";
const CHECK: &str = "check";
/// The hidden catch-all of [`lenient`].
const REST: &str = "lenient_rest";

/// Whether a command line asks for `stats --check` (typed, or its environment variable on), so
/// that even its usage errors follow the Nagios exit codes. `env` reads a variable (the process's
/// environment in [`super::parse`]).
///
/// The command line is read with clap and `lenient` rules, so the subcommand is found as the
/// real parse finds it (whatever flags take values before it) while an error, a bad value or an
/// unknown flag before or after `--check` does not hide it. `--check=VALUE` counts as typed, and
/// so does a `--check` clap could not place (before the subcommand, or after an unknown word). The
/// variable is read with the flag's own parser (unset, empty, 0, false, no, off: off; as in the
/// real parse, a value with spaces around it is not trimmed). Words after `--`, or a `--check`
/// that is another flag's value, are not arguments, so they make no check.
pub fn is_nagios_check(args: &[OsString], env: impl Fn(&str) -> Option<OsString>) -> bool {
    let command = super::command();
    let Some(stats) = command.find_subcommand(STATS) else {
        return false;
    };
    let Some(check) = stats.get_arguments().find(|a| a.get_id() == CHECK) else {
        return false;
    };
    let from_env = check
        .get_env()
        .and_then(|var| env(var.to_str()?))
        .and_then(|v| FalseyValueParser::new().parse(stats, Some(check), v).ok())
        .unwrap_or(false);
    let matches = lenient(command, args.len()).get_matches_from(args);
    let Some(stats) = matches.subcommand_matches(STATS) else {
        return false;
    };
    // A `--check` clap could not place (before `stats`, or after a word it does not know, where
    // the catch-all takes the rest) counts as typed too.
    let unplaced = (1..=args.len())
        .map(|i| (&matches, format!("{REST}_{i}")))
        .chain([(stats, REST.to_owned())])
        .flat_map(|(m, id)| m.get_many::<OsString>(&id).into_iter().flatten())
        .filter_map(|w| w.to_str())
        .any(|w| w == "--check" || w.starts_with("--check="));
    stats.value_source(CHECK) == Some(ValueSource::CommandLine) || unplaced || from_env
}

/// `command` with rules that make clap read as far as it can: no environment variables (the
/// caller's `env` stands for them), any text for a value, no required arguments, no `help`
/// subcommand, and hidden catch-alls for words clap does not know, where it would otherwise stop:
/// at the top, one word each (`words` of them), so that the next word can still name the
/// subcommand; in `stats`, the rest of the line. `--check` takes an optional `=VALUE`. Errors are
/// ignored: what was read is what counts.
fn lenient(command: clap::Command, words: usize) -> clap::Command {
    fn any_value(cmd: clap::Command) -> clap::Command {
        cmd.mut_args(|a| {
            let a = a.env(None).required(false);
            if a.get_action().takes_values() {
                a.value_parser(ValueParser::os_string())
            } else {
                a
            }
        })
        .mut_subcommands(any_value)
    }
    let unknown = |id: String| {
        Arg::new(id)
            .allow_hyphen_values(true)
            .value_parser(ValueParser::os_string())
            .hide(true)
    };
    let top = (1..=words).map(|i| unknown(format!("{REST}_{i}")).index(i));
    any_value(command)
        .ignore_errors(true)
        .disable_help_subcommand(true)
        .args(top)
        .mut_subcommand(STATS, |stats| {
            stats
                .arg(
                    unknown(REST.to_owned())
                        .num_args(0..)
                        .action(ArgAction::Append),
                )
                .mut_arg(CHECK, |a| {
                    a.action(ArgAction::Append)
                        .num_args(0..=1)
                        .require_equals(true)
                        .default_missing_value("true")
                        .value_parser(ValueParser::os_string())
                })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nagios_check_is_recognised_typed_or_from_the_environment() {
        let none = |_: &str| None;
        let on = |_: &str| Some(OsString::from("1"));
        let off = |_: &str| Some(OsString::from("off"));
        let only_check = |v: &'static str| {
            move |k: &str| (k == "OUTBOXCTL_STATS_CHECK").then(|| OsString::from(v))
        };
        // (command line, split at spaces; environment; a Nagios check)
        type Env<'a> = &'a dyn Fn(&str) -> Option<OsString>;
        let cases: &[(&str, Env, bool)] = &[
            ("stats --check", &none, true),
            ("stats --check=true", &none, true),
            ("stats --check=no", &none, true),
            ("stats --warn-lag x", &on, true),
            ("stats --warn-lag x", &off, false),
            ("stats --warn-lag x", &only_check("yes"), true),
            ("stats --warn-lag x", &only_check(""), false),
            ("stats --warn-lag x", &only_check("FALSE"), false),
            ("migrate --check", &none, false),
            ("migrate --check", &on, false),
            ("stats", &none, false),
            ("--schema stats migrate --check", &none, false),
            ("--schema x stats --check", &none, true),
            ("--schema=x --json stats --check", &none, true),
            ("--log-format xml stats --check", &none, true),
            ("--connect-timeout 0s stats --check", &none, true),
            ("-vv stats --check", &none, true),
            // Whatever the error, before or after --check.
            ("stats --check --warn-lag soon", &none, true),
            ("stats --warn-lag soon --check", &none, true),
            ("stats --warn-dead -1 --check", &none, true),
            ("stats --check --warn-dead 1 --bogus", &none, true),
            ("stats --bogus --check", &none, true),
            ("stats -x --check", &none, true),
            ("stats extra --check", &none, true),
            ("stats --check --warn-lag", &none, true),
            ("stats --format nagios --check", &none, true),
            ("--bogus stats --check", &none, true),
            ("stats --check --check", &none, true),
            // Another command's value or an alias is not `stats`.
            ("dead list --event-type stats --check", &none, false),
            ("dlq list --check", &on, false),
            ("bogus stats --check", &none, true),
            ("help stats --check", &none, true),
            ("--check stats", &none, true),
            ("--bogus --check=1 stats", &none, true),
            // Not an argument: after `--`, or the value of another flag.
            ("-- stats --check", &none, false),
            ("--schema --check stats", &none, false),
            ("", &on, false),
        ];
        for (argv, env, want) in cases {
            let args: Vec<OsString> = std::iter::once("outboxctl")
                .chain(argv.split_whitespace())
                .map(OsString::from)
                .collect();
            assert_eq!(is_nagios_check(&args, env), *want, "{argv:?}");
        }
    }
}
