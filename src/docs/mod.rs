//! The reference manual generated from the code: the pages under `docs/reference/` and the man
//! pages under `man/`, from the same `clap::Command` as the parser, the exit-code tables of
//! [`crate::exit`], the metric tables of [`crate::relay::metrics`] and `stats --format
//! prometheus`, and the JSON schemas of the `--json` report types.
//!
//! Like the completion scripts, the generated files are committed, and a test
//! (`tests/it/cli/snapshots.rs`) fails when one of them differs from what this module produces:
//!
//! ```text
//! UPDATE_SNAPSHOTS=1 cargo test --test it snapshots::
//! ```
//!
//! rewrites them. Nothing here does I/O.

pub mod cli;
pub mod env;
pub mod exit_codes;
pub mod json;
pub mod man;
pub mod metrics;

/// The first lines of every generated Markdown page.
fn header(title: &str, what: &str) -> String {
    format!(
        "<!-- Generated from the code ({what}) by src/docs/; do not edit.\n     \
         Regenerate: UPDATE_SNAPSHOTS=1 cargo test --test it snapshots:: -->\n\n# {title}\n\n"
    )
}

/// Every page under `docs/reference/`: its file name and its text.
pub fn reference_pages() -> Vec<(&'static str, String)> {
    vec![
        ("README.md", index()),
        ("cli.md", cli::page()),
        ("environment.md", env::page()),
        ("exit-codes.md", exit_codes::page()),
        ("json.md", json::page()),
        ("metrics.md", metrics::page()),
    ]
}

fn index() -> String {
    let mut out = header("Reference", "the list of reference pages");
    out.push_str(
        "Generated from the code, and checked by a test, so they say what this version does.\n\n\
         - [Command line](cli.md): every command, its flags, their environment variables and defaults.\n\
         - [Environment variables](environment.md): every variable outboxctl reads.\n\
         - [Exit codes](exit-codes.md): what each command's exit status means.\n\
         - [JSON output](json.md): the shape of every `--json` output.\n\
         - [Metrics](metrics.md): the relay's Prometheus metrics and `stats --format prometheus`.\n\
         - Man pages: [`man/`](../../man/), one per command (`man -l man/outboxctl-relay.1`).\n",
    );
    out
}

/// Text of a clap help string as Markdown prose: paragraphs kept, lines of a paragraph joined,
/// `<` escaped (a `<URL>` would read as an HTML tag), and an example command line (a paragraph
/// that starts with `outboxctl `, or `Example: outboxctl ...`) as a code block.
fn prose(text: &str) -> String {
    text.split("\n\n")
        .map(|p| {
            let p = p.lines().map(str::trim).collect::<Vec<_>>().join(" ");
            let code = |c: &str| format!("```sh\n{c}\n```");
            if p.starts_with("outboxctl ") {
                code(&p)
            } else if let Some(c) = p
                .strip_prefix("Example: ")
                .filter(|c| c.starts_with("outboxctl "))
            {
                format!("Example:\n\n{}", code(c))
            } else {
                p.replace('<', "&lt;")
            }
        })
        .filter(|p| !p.is_empty())
        .collect::<Vec<_>>()
        .join("\n\n")
}

/// A table cell: one line, `|` escaped.
fn cell(text: &str) -> String {
    prose(text).replace("\n\n", " ").replace('|', "\\|")
}

/// Every command and subcommand of `cmd` (built, so usage lines carry the full bin name), depth
/// first, with its path (`[]` for outboxctl itself), clap's own `help` left out.
fn commands(cmd: &clap::Command) -> Vec<(Vec<String>, clap::Command)> {
    fn walk(cmd: &clap::Command, path: Vec<String>, out: &mut Vec<(Vec<String>, clap::Command)>) {
        out.push((path.clone(), cmd.clone()));
        for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
            let mut p = path.clone();
            p.push(sub.get_name().to_owned());
            walk(sub, p, out);
        }
    }
    let mut out = Vec::new();
    walk(cmd, Vec::new(), &mut out);
    out
}

/// The command line with the house rules, built.
fn built_command() -> clap::Command {
    let mut cmd = crate::cli::command();
    cmd.build();
    cmd
}
