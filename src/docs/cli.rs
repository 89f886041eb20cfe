//! docs/reference/cli.md: every command's description, usage and arguments, with their
//! environment variables, defaults and accepted values, read off the `clap::Command`.

use std::fmt::Write;

use super::{built_command, commands, header, prose};

/// `outboxctl dead list` for a path, `outboxctl` for the root.
pub fn command_name(path: &[String]) -> String {
    std::iter::once("outboxctl")
        .chain(path.iter().map(String::as_str))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The GitHub anchor of a `## outboxctl dead list` heading.
pub fn anchor(path: &[String]) -> String {
    command_name(path).replace(' ', "-")
}

/// How an argument is written: `-f, --file <PATH>`, `--json`, `<IDS>...`.
pub fn spelling(a: &clap::Arg) -> String {
    let value = || {
        let names: Vec<String> = a
            .get_value_names()
            .map(|n| n.iter().map(|n| format!("<{n}>")).collect())
            .unwrap_or_else(|| vec![format!("<{}>", a.get_id().as_str().to_uppercase())]);
        let many = a
            .get_num_args()
            .is_some_and(|r| r.max_values() > 1 && names.len() == 1);
        format!("{}{}", names.join(" "), if many { "..." } else { "" })
    };
    if a.is_positional() {
        return value();
    }
    let mut s = String::new();
    if let Some(c) = a.get_short() {
        let _ = write!(s, "-{c}");
    }
    if let Some(l) = a.get_long() {
        if !s.is_empty() {
            s.push_str(", ");
        }
        let _ = write!(s, "--{l}");
    }
    if a.get_action().takes_values() {
        let _ = write!(s, " {}", value());
    }
    s
}

/// Whether `a` is one of clap's own (`--help`, `--version`).
fn generated(a: &clap::Arg) -> bool {
    matches!(a.get_id().as_str(), "help" | "version")
}

/// The facts of an argument besides its help: environment variable, default, values, aliases.
fn facts(a: &clap::Arg) -> Vec<String> {
    let mut f = Vec::new();
    if let Some(env) = a.get_env() {
        f.push(format!("env `{}`", env.to_string_lossy()));
    }
    let defaults: Vec<String> = a
        .get_default_values()
        .iter()
        .map(|v| v.to_string_lossy().into_owned())
        .collect();
    if a.get_action().takes_values() && !defaults.is_empty() {
        f.push(format!("default `{}`", defaults.join(",")));
    }
    if a.is_required_set() {
        f.push("required".into());
    }
    let aliases: Vec<String> = a
        .get_visible_aliases()
        .unwrap_or_default()
        .iter()
        .map(|s| format!("`--{s}`"))
        .collect();
    if !aliases.is_empty() {
        f.push(format!("alias {}", aliases.join(", ")));
    }
    let values: Vec<String> = a
        .get_possible_values()
        .into_iter()
        .filter(|v| !v.is_hide_set() && v.get_help().is_none())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    if a.get_action().takes_values() && !values.is_empty() {
        f.push(format!("one of {}", values.join(", ")));
    }
    f
}

fn arg_entry(out: &mut String, a: &clap::Arg) {
    let facts = facts(a);
    let _ = write!(out, "- `{}`", spelling(a));
    if !facts.is_empty() {
        let _ = write!(out, " ({})", facts.join("; "));
    }
    let help = a
        .get_long_help()
        .or(a.get_help())
        .map(|h| prose(&h.to_string()))
        .unwrap_or_default();
    if !help.is_empty() {
        let _ = write!(out, ": {}", help.replace("\n\n", "\n\n  "));
    }
    out.push('\n');
    let values: Vec<_> = a
        .get_possible_values()
        .into_iter()
        .filter(|v| !v.is_hide_set())
        .collect();
    // Values with a help text of their own get a line each (the others are among the facts).
    if a.get_action().takes_values() && values.iter().any(|v| v.get_help().is_some()) {
        for v in &values {
            let _ = write!(out, "  - `{}`", v.get_name());
            if let Some(h) = v.get_help() {
                let _ = write!(out, ": {}", prose(&h.to_string()));
            }
            out.push('\n');
        }
    }
}

/// The whole page.
pub fn page() -> String {
    let root = built_command();
    let all = commands(&root);
    let globals: Vec<String> = root
        .get_arguments()
        .filter(|a| a.is_global_set() && !a.is_hide_set() && !generated(a))
        .map(|a| format!("`{}`", spelling(a)))
        .collect();
    let mut out = header("Command line", "the clap definition in src/cli/");
    out.push_str(
        "Every command and its arguments, as `--help` prints them. Every flag can also be set \
         by the environment variable named beside it (see [environment.md](environment.md)): a \
         flag on the command line wins over the variable, which wins over the default; an empty \
         variable counts as unset. An on/off flag's variable is on for any value but `0`, \
         `false`, `no`, `off` and the empty string. Every command takes `-h`/`--help` (`-h` a \
         summary, `--help` everything) and `-V`/`--version`.\n\n",
    );
    out.push_str("## Commands\n\n| Command | What it does |\n| --- | --- |\n");
    for (path, cmd) in &all {
        let about = cmd.get_about().map(|a| a.to_string()).unwrap_or_default();
        let _ = writeln!(
            out,
            "| [`{}`](#{}) | {} |",
            command_name(path),
            anchor(path),
            super::cell(&about)
        );
    }
    out.push('\n');
    for (path, cmd) in &all {
        let _ = writeln!(out, "## {}\n", command_name(path));
        let about = cmd
            .get_long_about()
            .or(cmd.get_about())
            .map(|a| a.to_string())
            .unwrap_or_default();
        if !about.is_empty() {
            let _ = writeln!(out, "{}\n", prose(&about));
        }
        let aliases: Vec<String> = cmd
            .get_visible_aliases()
            .map(|a| format!("`{a}`"))
            .collect();
        if !aliases.is_empty() {
            let _ = writeln!(out, "Alias: {}.\n", aliases.join(", "));
        }
        let usage = cmd.clone().render_usage().to_string();
        let _ = writeln!(out, "```text\n{}\n```\n", usage.trim_end());
        let subs: Vec<&clap::Command> = cmd
            .get_subcommands()
            .filter(|s| s.get_name() != "help")
            .collect();
        if !subs.is_empty() {
            out.push_str("Commands:\n\n");
            for s in subs {
                let mut p = path.clone();
                p.push(s.get_name().to_owned());
                let about = s.get_about().map(|a| a.to_string()).unwrap_or_default();
                let _ = writeln!(
                    out,
                    "- [`{}`](#{}): {}",
                    s.get_name(),
                    anchor(&p),
                    prose(&about)
                );
            }
            out.push('\n');
        }
        // Global options are listed once, under outboxctl itself.
        let args: Vec<&clap::Arg> = cmd
            .get_arguments()
            .filter(|a| !a.is_hide_set() && !generated(a))
            .filter(|a| path.is_empty() || !a.is_global_set())
            .collect();
        let mut headings: Vec<Option<&str>> = Vec::new();
        for a in &args {
            let h = if a.is_positional() {
                Some("Arguments")
            } else {
                a.get_help_heading()
            };
            if !headings.contains(&h) {
                headings.push(h);
            }
        }
        headings.sort_by_key(|h| match h {
            Some("Arguments") => 0,
            None => 1,
            Some(_) => 2,
        });
        for h in headings {
            let _ = writeln!(out, "{}:\n", h.unwrap_or("Options"));
            for a in args.iter().filter(|a| {
                let ah = if a.is_positional() {
                    Some("Arguments")
                } else {
                    a.get_help_heading()
                };
                ah == h
            }) {
                arg_entry(&mut out, a);
            }
            out.push('\n');
        }
        if !path.is_empty() {
            let _ = writeln!(
                out,
                "And the [global options](#outboxctl): {}.\n",
                globals.join(", ")
            );
        }
    }
    out.trim_end().to_owned() + "\n"
}
