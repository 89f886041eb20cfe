//! docs/reference/environment.md: every environment variable outboxctl reads. The flags' own
//! variables come from the `clap::Command`; the few read elsewhere are listed in [`OTHER`], and a
//! test (tests/it/cli/reference.rs) fails when the source reads a variable that neither names.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::cli::{anchor, spelling};
use super::{built_command, cell, commands, header};

/// A variable read outside the flags.
#[derive(Debug, Clone, Copy)]
pub struct Var {
    pub name: &'static str,
    /// What reads it.
    pub read_by: &'static str,
    pub doc: &'static str,
    /// Shown on the page; false for test hooks, which are for the test suite only.
    pub shown: bool,
}

/// Every variable outboxctl reads that is not a flag's: the source's `env::var("...")` reads,
/// those of the libraries it configures, and build-time ones.
pub const OTHER: &[Var] = &[
    Var {
        name: "OUTBOXCTL_LOG",
        read_by: "every command",
        doc: "A tracing filter for the log lines on stderr (e.g. `outboxctl=debug`, `info`); replaces -v/-q. A filter that does not parse is a usage error (exit 2).",
        shown: true,
    },
    Var {
        name: "RUST_LOG",
        read_by: "every command",
        doc: "Read like OUTBOXCTL_LOG when that is unset.",
        shown: true,
    },
    Var {
        name: "PGHOST, PGHOSTADDR, PGPORT, PGUSER, PGPASSWORD, PGPASSFILE, PGDATABASE, PGSSLMODE, PGSSLROOTCERT, PGSSLCERT, PGSSLKEY",
        read_by: "every command that connects (sqlx, like libpq)",
        doc: "The connection settings that --database-url/DATABASE_URL leaves out (all of them without it), as psql reads them.",
        shown: true,
    },
    Var {
        name: "NO_COLOR",
        read_by: "every command",
        doc: "Set (to anything): no colour. Colour is otherwise used only when the stream is a terminal and TERM is not `dumb`.",
        shown: true,
    },
    Var {
        name: "TERM",
        read_by: "every command",
        doc: "`dumb`: no colour.",
        shown: true,
    },
    Var {
        name: "COLUMNS",
        read_by: "commands that print tables",
        doc: "The table width when stdout is not a terminal that tells its own.",
        shown: true,
    },
    Var {
        name: "CI",
        read_by: "commands with a progress bar",
        doc: "Set and not `false`/`0`: no progress bars, even on a terminal.",
        shown: true,
    },
    Var {
        name: "USER, LOGNAME",
        read_by: "requeue, dead discard, events cancel/reschedule/edit, ordering",
        doc: "The audit trail's actor when --actor/OUTBOXCTL_ACTOR is not given: `$USER@hostname` (LOGNAME when USER is unset).",
        shown: true,
    },
    Var {
        name: "(the variable --signing-secret-env names)",
        read_by: "relay",
        doc: "The Standard Webhooks signing secret(s) of the http sink: `whsec_...`, or two separated by a space during a rotation.",
        shown: true,
    },
    Var {
        name: "SOURCE_DATE_EPOCH",
        read_by: "the build (build.rs)",
        doc: "The build date `--version` shows, for reproducible builds (Unix seconds).",
        shown: true,
    },
    Var {
        name: "OUTBOXCTL_HEARTBEAT_INTERVAL",
        read_by: "relay",
        doc: "Test hook: the daemon's heartbeat interval.",
        shown: false,
    },
    Var {
        name: "OUTBOXCTL_TEST_FAILPOINT",
        read_by: "relay",
        doc: "Test hook: a fail-point in the relay step.",
        shown: false,
    },
    Var {
        name: "OUTBOXCTL_TEST_KAFKA_FATAL_ERROR",
        read_by: "relay",
        doc: "Test hook: a fabricated fatal Kafka producer error.",
        shown: false,
    },
    Var {
        name: "OUTBOXCTL_TEST_TOP_PANIC",
        read_by: "top",
        doc: "Test hook: panic once the first sample is drawn (the terminal must come back).",
        shown: false,
    },
    Var {
        name: "OUTBOXCTL_GIT_COMMIT, OUTBOXCTL_BUILD_DATE",
        read_by: "the build (set by build.rs, read by env!)",
        doc: "Not read at run time.",
        shown: false,
    },
];

/// Every single name [`OTHER`] covers (its comma-separated lists split).
pub fn other_names() -> Vec<&'static str> {
    OTHER
        .iter()
        .flat_map(|v| v.name.split(", "))
        .filter(|n| !n.starts_with('('))
        .collect()
}

/// A flag's variable: where it is used.
struct Use {
    command: Vec<String>,
    flag: String,
    default: String,
    meaning: String,
}

/// Every variable named by a flag, with the flags that read it, sorted by name.
fn flag_vars() -> BTreeMap<String, Vec<Use>> {
    let root = built_command();
    let mut vars: BTreeMap<String, Vec<Use>> = BTreeMap::new();
    for (path, cmd) in commands(&root) {
        for a in cmd.get_arguments() {
            // A global flag is propagated to every subcommand: count it once, at the root.
            if a.is_hide_set() || (a.is_global_set() && !path.is_empty()) {
                continue;
            }
            let Some(var) = a.get_env() else { continue };
            let help = a.get_help().map(|h| h.to_string()).unwrap_or_default();
            let default = if a.get_action().takes_values() {
                a.get_default_values()
                    .iter()
                    .map(|v| v.to_string_lossy().into_owned())
                    .collect::<Vec<_>>()
                    .join(",")
            } else {
                String::new()
            };
            let default = if default.is_empty() {
                literal_default(&help).unwrap_or_default()
            } else {
                default
            };
            vars.entry(var.to_string_lossy().into_owned())
                .or_default()
                .push(Use {
                    command: path.clone(),
                    flag: spelling(a),
                    default,
                    meaning: first_sentence(&help),
                });
        }
    }
    vars
}

/// A default the help states in words, `[default: 30s]`, when it is one literal value (a flag
/// with no clap default, so that a command can tell it was not given: `--lease`, `--sink`).
fn literal_default(help: &str) -> Option<String> {
    let (_, rest) = help.split_once("[default: ")?;
    let (value, _) = rest.split_once(']')?;
    (!value.is_empty() && !value.contains(char::is_whitespace)).then(|| value.to_owned())
}

/// Every variable a flag reads (for the test that checks the source reads no other).
pub fn flag_var_names() -> Vec<String> {
    flag_vars().into_keys().collect()
}

/// The help's first sentence: up to a full stop followed by a capital (not an abbreviation's).
fn first_sentence(help: &str) -> String {
    let para = help.split("\n\n").next().unwrap_or("");
    let para = para.lines().map(str::trim).collect::<Vec<_>>().join(" ");
    let bytes = para.as_bytes();
    for (i, _) in para.match_indices(". ") {
        let next_is_capital = bytes.get(i + 2).is_some_and(u8::is_ascii_uppercase);
        let abbreviation = ["e.g", "i.e", "etc"].iter().any(|a| para[..i].ends_with(a));
        if next_is_capital && !abbreviation {
            return para[..=i].to_owned();
        }
    }
    para
}

pub fn page() -> String {
    let mut out = header(
        "Environment variables",
        "the clap definition in src/cli/ and src/docs/env.rs",
    );
    out.push_str(
        "Every flag has an environment variable; the command line wins over it, and it wins \
         over the default. An empty variable counts as unset; an on/off flag's variable is on \
         for any value but `0`, `false`, `no`, `off`. A flag that can be repeated takes one \
         value per line in its variable. No value from the environment is ever printed (not in \
         `--help`, not in an error): a sink URL or a header may hold a secret; an invalid one is \
         reported with the variable's name.\n\n\
         ## Variables of the flags\n\n\
         | Variable | Flag | Default | Commands | Meaning |\n| --- | --- | --- | --- | --- |\n",
    );
    for (var, uses) in flag_vars() {
        // Uses that differ only by command share a row.
        let mut rows: Vec<(&str, &str, &str, Vec<&Vec<String>>)> = Vec::new();
        for u in &uses {
            match rows
                .iter_mut()
                .find(|r| r.0 == u.flag && r.1 == u.default && r.2 == u.meaning)
            {
                Some(r) => r.3.push(&u.command),
                None => rows.push((&u.flag, &u.default, &u.meaning, vec![&u.command])),
            }
        }
        for (flag, default, meaning, cmds) in rows {
            let cmds: Vec<String> = cmds
                .iter()
                .map(|p| {
                    let name = if p.is_empty() {
                        "(all)".to_owned()
                    } else {
                        p.join(" ")
                    };
                    format!("[{name}](cli.md#{})", anchor(p))
                })
                .collect();
            let default = if default.is_empty() {
                String::new()
            } else {
                format!("`{}`", cell(default))
            };
            let _ = writeln!(
                out,
                "| `{var}` | `{}` | {default} | {} | {} |",
                flag.replace('|', "\\|"),
                cmds.join(", "),
                cell(meaning)
            );
        }
    }
    out.push_str(
        "\n## Read outside the flags\n\n| Variable | Read by | Meaning |\n| --- | --- | --- |\n",
    );
    for v in OTHER.iter().filter(|v| v.shown) {
        let names: Vec<String> = v
            .name
            .split(", ")
            .map(|n| {
                if n.starts_with('(') {
                    n.to_owned()
                } else {
                    format!("`{n}`")
                }
            })
            .collect();
        let _ = writeln!(
            out,
            "| {} | {} | {} |",
            names.join(", "),
            cell(v.read_by),
            cell(v.doc)
        );
    }
    out
}
