//! How the environment takes part in parsing: an empty variable counts as unset, and an error
//! names the variable a bad value came from without showing the value (it may be a secret).
//! Apart from the definitions because it works on any `clap::Command`, not on our types.

/// Drops the env fallback of every argument whose variable is set but empty, so clap treats it
/// as unset instead of parsing "" (clap reads the variables when the command is built).
pub(super) fn without_empty_env(cmd: clap::Command) -> clap::Command {
    cmd.mut_args(|a| {
        let empty = a
            .get_env()
            .and_then(std::env::var_os)
            .is_some_and(|v| v.is_empty());
        if empty {
            a.env(None)
        } else {
            a
        }
    })
    .mut_subcommands(without_empty_env)
}

/// An argument whose value the environment provides in this run.
struct FromEnv {
    /// As clap shows it: `--batch-size <BATCH_SIZE>`.
    shown: String,
    var: String,
    value: std::ffi::OsString,
}

fn args_from_env(cmd: &clap::Command, out: &mut Vec<FromEnv>) {
    for a in cmd.get_arguments() {
        if let Some(var) = a.get_env() {
            if let Some(value) = std::env::var_os(var).filter(|v| !v.is_empty()) {
                out.push(FromEnv {
                    shown: a.to_string(),
                    var: var.to_string_lossy().into_owned(),
                    value,
                });
            }
        }
    }
    for sub in cmd.get_subcommands() {
        args_from_env(sub, out);
    }
}

/// Rewrites a clap error so that it names the environment variable an invalid value came from
/// (hiding the value), and drops environment-provided arguments from its usage line (clap lists every argument that
/// is present, which reads as if they were required or typed).
pub(super) fn explain(
    err: clap::Error,
    cmd: &clap::Command,
    argv: &[std::ffi::OsString],
) -> clap::Error {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if matches!(
        err.kind(),
        ErrorKind::DisplayHelp
            | ErrorKind::DisplayVersion
            | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
    ) {
        return err;
    }
    let mut env = Vec::new();
    let mut built = cmd.clone();
    built.build(); // an argument is shown as in the usage line only once built
    args_from_env(&built, &mut env);
    let rendered = err.render().to_string();
    let mut text = rendered.clone();
    if let (Some(ContextValue::String(arg)), Some(ContextValue::String(value))) = (
        err.get(ContextKind::InvalidArg),
        err.get(ContextKind::InvalidValue),
    ) {
        let long = arg.split(' ').next().unwrap_or(arg);
        let typed = argv.iter().skip(1).any(|a| {
            a.to_str()
                .is_some_and(|a| a == long || a.starts_with(&format!("{long}=")))
        });
        // A list variable (`OUTBOXCTL_EVENTS_STATE=ready,bogus`) fails on one of its items.
        if let Some(e) = env.iter().find(|e| {
            !typed && e.shown == *arg && e.value.to_string_lossy().contains(value.as_str())
        }) {
            // Like --help, an error never shows a value from the environment: it may be a
            // secret put in the wrong variable. The variable's name says where to look.
            text = text.replacen(
                &format!("invalid value '{value}' for '{arg}'"),
                &format!(
                    "invalid value for '{arg}' in the environment variable {} (value not shown)",
                    e.var
                ),
                1,
            );
            for quoted in [
                format!("`{value}`"),
                format!("'{value}'"),
                format!("\"{value}\""),
            ] {
                text = text.replace(&quoted, "the value");
            }
        }
    }
    let lines: Vec<String> = text
        .lines()
        .map(|line| match line.strip_prefix("Usage: ") {
            Some(usage) => {
                let mut usage = format!(" {usage} ");
                for e in &env {
                    for shown in [format!(" {}... ", e.shown), format!(" {} ", e.shown)] {
                        usage = usage.replace(&shown, " ");
                    }
                }
                format!("Usage: {}", usage.trim())
            }
            None => line.to_owned(),
        })
        .collect();
    let mut text = lines.join("\n");
    if rendered.ends_with('\n') {
        text.push('\n');
    }
    if text == rendered {
        return err;
    }
    clap::Error::raw(
        err.kind(),
        text.strip_prefix("error: ").unwrap_or(&text).to_owned(),
    )
}
