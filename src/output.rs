//! Output helpers shared by the commands: the house table style, JSON printing, and the decision
//! whether to draw progress bars or colour.

use std::io::{IsTerminal, Write};

use comfy_table::{presets::UTF8_FULL_CONDENSED, ContentArrangement, Table};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// The one table style every command uses. Width follows the terminal; tests pin it with
/// `COLUMNS` and get plain ASCII with `NO_COLOR`.
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    if let Some(w) = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.parse::<u16>().ok())
    {
        t.set_width(w);
    }
    t
}

/// Prints a table followed by a newline on stdout.
pub fn print_table(t: &Table) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{t}")?;
    Ok(())
}

/// Prints a report as pretty JSON on stdout.
///
/// Serialized first and written after, so a closed stdout surfaces as an `io::Error` (which `main`
/// treats as a normal exit) rather than hidden inside a `serde_json::Error`.
pub fn print_json<T: Serialize>(value: &T) -> anyhow::Result<()> {
    let mut text = serde_json::to_vec_pretty(value)?;
    text.push(b'\n');
    std::io::stdout().lock().write_all(&text)?;
    Ok(())
}

/// Prints one line on stdout. Unlike `println!`, a closed stdout is an error to return, not a panic.
pub fn print_line(text: impl std::fmt::Display) -> anyhow::Result<()> {
    writeln!(std::io::stdout().lock(), "{text}")?;
    Ok(())
}

/// Whether to draw a progress bar: only on a terminal, never in CI, never with --json.
pub fn progress_wanted(stderr_is_tty: bool, json: bool, ci: bool) -> bool {
    stderr_is_tty && !json && !ci
}

fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// A progress bar on stderr when [`progress_wanted`] says so, else a hidden one (all calls no-ops).
pub fn progress(len: Option<u64>, json: bool, what: &str) -> ProgressBar {
    if !progress_wanted(std::io::stderr().is_terminal(), json, in_ci()) {
        return ProgressBar::hidden();
    }
    let pb = match len {
        Some(n) => ProgressBar::new(n).with_style(
            ProgressStyle::with_template(
                "{spinner} {msg} [{bar:30}] {pos}/{len} ({per_sec}, eta {eta})",
            )
            .expect("valid template")
            .progress_chars("=> "),
        ),
        None => ProgressBar::new_spinner().with_style(
            ProgressStyle::with_template("{spinner} {msg} {pos} ({per_sec}, {elapsed})")
                .expect("valid template"),
        ),
    };
    pb.set_message(what.to_string());
    pb.enable_steady_tick(std::time::Duration::from_millis(120));
    pb
}

/// Colour on stderr: only on a terminal, with NO_COLOR unset and TERM not dumb.
pub fn stderr_color() -> bool {
    color_wanted(
        std::io::stderr().is_terminal(),
        std::env::var_os("NO_COLOR").is_some(),
        std::env::var("TERM").ok().as_deref(),
    )
}

pub fn color_wanted(is_tty: bool, no_color: bool, term: Option<&str>) -> bool {
    is_tty && !no_color && term != Some("dumb")
}

/// "1 event", "2 events".
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// A duration for humans, rounded to what matters (e.g. "3m 12s", "850ms").
pub fn human_duration(d: std::time::Duration) -> String {
    let rounded = if d.as_secs() >= 60 {
        std::time::Duration::from_secs(d.as_secs())
    } else {
        std::time::Duration::from_millis(d.as_millis() as u64)
    };
    humantime::format_duration(rounded).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn progress_only_on_tty_not_ci_not_json() {
        assert!(progress_wanted(true, false, false));
        assert!(!progress_wanted(false, false, false));
        assert!(!progress_wanted(true, true, false));
        assert!(!progress_wanted(true, false, true));
    }

    #[test]
    fn colour_rules() {
        assert!(color_wanted(true, false, Some("xterm")));
        assert!(!color_wanted(true, true, Some("xterm")));
        assert!(!color_wanted(true, false, Some("dumb")));
        assert!(!color_wanted(false, false, None));
    }

    #[test]
    fn plurals_and_durations() {
        assert_eq!(plural(1, "event", "events"), "1 event");
        assert_eq!(plural(0, "event", "events"), "0 events");
        assert_eq!(
            human_duration(std::time::Duration::from_millis(1500)),
            "1s 500ms"
        );
        assert_eq!(
            human_duration(std::time::Duration::from_millis(192_400)),
            "3m 12s"
        );
    }
}
