//! Output helpers shared by the commands: the house table style, JSON printing (whole, or an
//! object whose array is streamed: [`JsonArray`]), and the decision whether to draw progress bars
//! or colour.

use std::io::{IsTerminal, Write};
use std::sync::atomic::{AtomicBool, Ordering};

use comfy_table::{
    presets::UTF8_FULL_CONDENSED, ColumnConstraint, ContentArrangement, Table, Width,
};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;

/// The one table style every command uses. Build it with this, print it with [`print_table`]
/// (or render it with [`render_table`]).
///
/// Width: `COLUMNS` when it is a positive number (also on a pipe: `watch` sets it, and tests pin
/// it), else the terminal's width when stdout is a terminal that reports one; otherwise (a pipe,
/// or a terminal of unknown size such as a 0x0 pty) the table is not wrapped at all. Numbers,
/// ids, times and other short values never wrap (see [`render_table`]).
pub fn table(header: &[&str]) -> Table {
    let mut t = Table::new();
    t.load_preset(UTF8_FULL_CONDENSED)
        .set_content_arrangement(ContentArrangement::Dynamic)
        .set_header(header.iter().copied());
    let columns = std::env::var("COLUMNS").ok();
    match table_width(columns.as_deref(), t.width()) {
        Some(w) => {
            t.set_width(w);
        }
        None => {
            t.set_content_arrangement(ContentArrangement::Disabled);
        }
    }
    t
}

/// The width to wrap a table to: `COLUMNS` if it is a positive number, else the detected
/// terminal width if positive; `None` (do not wrap) when neither is known. 0 means unknown.
pub fn table_width(columns: Option<&str>, terminal: Option<u16>) -> Option<u16> {
    columns
        .and_then(|c| c.trim().parse::<u16>().ok())
        .filter(|&w| w > 0)
        .or(terminal.filter(|&w| w > 0))
}

/// A cell up to this many characters is never wrapped: numbers, ids, uuids, times, durations.
const UNBREAKABLE: usize = 36;

/// The table as text, with every column at least as wide as its widest short cell (and its
/// widest word): comfy-table would otherwise split `68599` into `6859` / `9` on a narrow
/// terminal. Only long text (errors, payload previews) wraps.
pub fn render_table(t: &Table) -> String {
    let mut t = t.clone();
    if !matches!(t.content_arrangement(), ContentArrangement::Disabled) {
        let columns = t.column_count();
        let header_word = |i: usize| {
            t.header()
                .and_then(|h| h.cell_iter().nth(i))
                .map_or(0, |c| longest_word(&c.content()))
        };
        let widths: Vec<u16> = (0..columns)
            .map(|i| {
                t.column_cells_iter(i)
                    .map(|cell| cell.map_or(0, |c| min_width(&c.content())))
                    .chain([header_word(i)])
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        for (i, w) in widths.into_iter().enumerate() {
            if let Some(c) = t.column_mut(i) {
                if w > 0 && c.constraint().is_none() {
                    // comfy-table counts the padding in a fixed width.
                    let w = w.saturating_add(c.padding_width());
                    c.set_constraint(ColumnConstraint::LowerBoundary(Width::Fixed(w)));
                }
            }
        }
    }
    t.to_string()
}

/// How narrow a cell's column may get: the whole cell when short, else its longest word.
fn min_width(content: &str) -> u16 {
    if content.chars().count() <= UNBREAKABLE {
        content
            .lines()
            .map(|l| l.chars().count() as u16)
            .max()
            .unwrap_or(0)
    } else {
        longest_word(content).min(UNBREAKABLE as u16)
    }
}

/// Headers and long text wrap between words, not inside them.
fn longest_word(content: &str) -> u16 {
    content
        .split_whitespace()
        .map(|w| w.chars().count().min(UNBREAKABLE) as u16)
        .max()
        .unwrap_or(0)
}

/// Text from the database made safe to print on a terminal: every control character (C0, DEL
/// and C1: what moves the cursor, clears the screen, retitles the window or hides what follows)
/// is written as its Rust escape (`\u{1b}`, `\u{7}`, `\n`, `\t`, `\u{9b}`), everything else
/// kept. Every human-readable output passes the database's text through this (or
/// [`escape_lines`]) on its way to the terminal; `--json` keeps the original characters (serde
/// escapes them).
pub fn escape_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(char::is_control) {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_debug());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// [`escape_controls`] for text shown over several lines (an error in `events show`, pretty JSON):
/// its line breaks stay line breaks, every other control character is escaped.
pub fn escape_lines(text: &str) -> String {
    text.split('\n')
        .map(escape_controls)
        .collect::<Vec<_>>()
        .join("\n")
}

/// Adds a row of cells holding text from the database, each passed through [`escape_controls`]
/// (a table cell is one value: a line break in it is escaped too).
pub fn add_row<S: AsRef<str>>(t: &mut Table, cells: impl IntoIterator<Item = S>) {
    t.add_row(
        cells
            .into_iter()
            .map(|c| escape_controls(c.as_ref()).into_owned())
            .collect::<Vec<_>>(),
    );
}

/// Prints a table followed by a newline on stdout.
pub fn print_table(t: &Table) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", render_table(t))?;
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

/// Whether `-q` was given: set once by [`crate::run`], like the log filter, so that summaries
/// deep in a command need no flag passed down.
static QUIET: AtomicBool = AtomicBool::new(false);

pub fn set_quiet(quiet: bool) {
    QUIET.store(quiet, Ordering::Relaxed);
}

pub fn quiet() -> bool {
    QUIET.load(Ordering::Relaxed)
}

/// Prints a human summary line on stdout ("inserted event 42", "applied 3 migrations"), unless
/// `-q`. Data (tables, JSON, relayed events) goes through the other functions and is printed
/// whatever `-q` says.
pub fn print_summary(text: impl std::fmt::Display) -> anyhow::Result<()> {
    if quiet() {
        return Ok(());
    }
    print_line(text)
}

/// The error as one line: its cause chain joined by ": ", each cause once.
///
/// Many error types print their source inside their own message (sqlx's
/// `error with configuration: {source}`), so the plain `{:#}` chain says it twice, and such an
/// error wrapping one of its own kind stutters within one message
/// (`error with configuration: error with configuration: ...`). A cause that the message
/// before it already ends with is left out, and a segment repeated right after itself is
/// printed once.
pub fn error_message(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || parts.last().is_some_and(|last| last.ends_with(&text)) {
            continue;
        }
        parts.push(text);
    }
    let joined = parts.join(": ");
    let mut out: Vec<&str> = Vec::new();
    for segment in joined.split(": ") {
        if out.last() != Some(&segment) {
            out.push(segment);
        }
    }
    out.join(": ")
}

/// Writes a line on stderr and ignores a failure: a closed stderr (`2>&1 | head`) must neither
/// panic, as `eprintln!` does, nor change the exit code. For errors and other lines `-q` keeps.
pub fn eprint_line(text: impl std::fmt::Display) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// A human note on stderr ("showing the first 100 events", "exported 3 dead events"), unless
/// `-q`; a closed stderr is ignored like in [`eprint_line`].
pub fn note(text: impl std::fmt::Display) {
    if !quiet() {
        eprint_line(text);
    }
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

/// "1, 2, 3": the items, comma-separated.
pub fn comma_list<T: std::fmt::Display>(items: &[T]) -> String {
    items
        .iter()
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// "1 event", "2 events".
pub fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// "a; b; c; d; e; and 7 more": the first few of a list of problems.
pub fn list_some(items: &[String]) -> String {
    const SHOWN: usize = 5;
    let mut s = items
        .iter()
        .take(SHOWN)
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
    if items.len() > SHOWN {
        s.push_str(&format!("; and {} more", items.len() - SHOWN));
    }
    s
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

/// Writes an object as `serde_json::to_vec_pretty` would, byte for byte, when its last field is
/// an array streamed one item at a time: [`JsonArray::begin`] writes the scalar fields and the
/// array's `[`, [`JsonArray::push`] each item, [`JsonArray::finish`] the rest. The items alone
/// can also go elsewhere first ([`JsonArray::items`], e.g. a spill file) and be copied in later.
#[derive(Debug)]
pub struct JsonArray<W: Write> {
    out: W,
    first: bool,
}

impl<W: Write> JsonArray<W> {
    /// Writes `{`, each `(key, value)` (scalars), and `"array_key": [`.
    pub fn begin(
        mut out: W,
        fields: &[(&str, serde_json::Value)],
        array_key: &str,
    ) -> anyhow::Result<Self> {
        Self::write_head(&mut out, fields, array_key)?;
        Ok(Self { out, first: true })
    }

    /// An array's items only, written to `out` (no head, no tail).
    pub fn items(out: W) -> Self {
        Self { out, first: true }
    }

    /// The head [`JsonArray::begin`] writes.
    pub fn write_head(
        out: &mut impl Write,
        fields: &[(&str, serde_json::Value)],
        array_key: &str,
    ) -> anyhow::Result<()> {
        let mut head = b"{".to_vec();
        for (k, v) in fields {
            head.extend_from_slice(b"\n  ");
            serde_json::to_writer(&mut head, k)?;
            head.extend_from_slice(b": ");
            serde_json::to_writer_pretty(&mut head, v)?;
            head.push(b',');
        }
        head.extend_from_slice(b"\n  ");
        serde_json::to_writer(&mut head, array_key)?;
        head.extend_from_slice(b": [");
        out.write_all(&head)?;
        Ok(())
    }

    /// Writes one item. Serialized to a buffer first, so a closed stdout surfaces as an
    /// `io::Error` (a normal exit) rather than inside a `serde_json::Error`.
    pub fn push<T: Serialize>(&mut self, item: &T) -> anyhow::Result<()> {
        let text = serde_json::to_vec_pretty(item)?;
        let mut buf = Vec::with_capacity(text.len() + text.len() / 8 + 8);
        buf.extend_from_slice(if self.first { b"\n" } else { b",\n" });
        self.first = false;
        // Pretty JSON has a newline only between tokens (strings escape theirs): indent each line.
        for (i, line) in text.split(|b| *b == b'\n').enumerate() {
            if i > 0 {
                buf.push(b'\n');
            }
            buf.extend_from_slice(b"    ");
            buf.extend_from_slice(line);
        }
        self.out.write_all(&buf)?;
        Ok(())
    }

    /// Whether no item was pushed.
    pub fn is_empty(&self) -> bool {
        self.first
    }

    /// The writer, for [`JsonArray::items`].
    pub fn into_inner(self) -> W {
        self.out
    }

    /// The tail [`JsonArray::finish`] writes after `empty` or not items.
    pub fn write_tail(out: &mut impl Write, empty: bool) -> std::io::Result<()> {
        out.write_all(if empty { b"]\n}\n" } else { b"\n  ]\n}\n" })
    }

    /// Closes the array and the object (and a final newline, like [`print_json`]).
    pub fn finish(mut self) -> std::io::Result<W> {
        Self::write_tail(&mut self.out, self.first)?;
        Ok(self.out)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        let evil = "a\u{1b}[2J\u{1b}]0;pwned\u{7}b\u{9b}31m\u{7f}\tc\nd é → 🙂 \\ \"";
        assert_eq!(
            super::escape_controls(evil),
            "a\\u{1b}[2J\\u{1b}]0;pwned\\u{7}b\\u{9b}31m\\u{7f}\\tc\\nd é → 🙂 \\ \""
        );
        assert_eq!(super::escape_lines("x\u{1b}\ny\r"), "x\\u{1b}\ny\\r");
        assert!(matches!(
            super::escape_controls("plain"),
            std::borrow::Cow::Borrowed("plain")
        ));
    }

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
    fn zero_width_means_unknown() {
        assert_eq!(table_width(Some("80"), Some(120)), Some(80));
        assert_eq!(table_width(Some("0"), Some(120)), Some(120));
        assert_eq!(table_width(Some(""), None), None);
        assert_eq!(table_width(Some("wide"), Some(0)), None);
        assert_eq!(table_width(None, Some(0)), None);
        assert_eq!(table_width(None, None), None);
    }

    fn sample(width: u16) -> String {
        let mut t = Table::new();
        t.load_preset(UTF8_FULL_CONDENSED)
            .set_content_arrangement(ContentArrangement::Dynamic)
            .set_header([
                "schema",
                "ready",
                "scheduled",
                "in flight",
                "dead",
                "lag (due)",
                "last error",
            ])
            .set_width(width);
        t.add_row(vec![
            "events_primary",
            "68599",
            "1234567",
            "0",
            "12",
            "1m 40s",
            "connection refused by the sink at https://hooks.example.com/outbox after 3 tries",
        ]);
        t.add_row(vec!["x", "7", "0", "0", "0", "2026-12-01T09:00:00Z", ""]);
        render_table(&t)
    }

    #[test]
    fn numbers_ids_and_times_never_wrap() {
        for width in [20, 40, 60, 80, 200] {
            let text = sample(width);
            for whole in [
                "68599",
                "1234567",
                "events_primary",
                "1m 40s",
                "2026-12-01T09:00:00Z",
            ] {
                assert!(
                    text.lines().any(|l| l.contains(whole)),
                    "width {width}: `{whole}` was split:\n{text}"
                );
            }
        }
        // Long text still wraps to fit when there is room for the rest, between words.
        let text = sample(120);
        assert!(text.lines().all(|l| l.chars().count() <= 120), "{text}");
        assert!(!text
            .lines()
            .any(|l| l.contains("connection refused by the sink at https")));
        assert!(text.lines().any(|l| l.contains("flight")), "{text}");
        // And nothing changes where everything fits.
        assert!(
            sample(200)
                .lines()
                .any(|l| l.contains("in flight") && !l.contains("https"))
                && sample(200)
                    .lines()
                    .any(|l| l.contains("at https://hooks.example.com/outbox after 3 tries"))
        );
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

    /// Like sqlx's `Error::Configuration`: prints its source inside its own message.
    #[derive(Debug, thiserror::Error)]
    #[error("error with configuration: {0}")]
    struct Config(#[source] Box<dyn std::error::Error + Send + Sync>);

    #[test]
    fn each_cause_is_printed_once() {
        use anyhow::Context;
        let inner = Config("unknown value \"bogus\" for `ssl_mode`".into());
        let err = anyhow::Error::new(Config(Box::new(inner))).context("invalid --database-url");
        assert_eq!(
            format!("{err:#}"),
            "invalid --database-url: error with configuration: error with configuration: \
             unknown value \"bogus\" for `ssl_mode`: error with configuration: unknown value \
             \"bogus\" for `ssl_mode`: unknown value \"bogus\" for `ssl_mode`"
        );
        assert_eq!(
            error_message(&err),
            "invalid --database-url: error with configuration: unknown value \"bogus\" for `ssl_mode`"
        );
        // Distinct causes are all kept.
        let err = Err::<(), _>(std::io::Error::other("refused"))
            .context("cannot connect")
            .context("stats")
            .unwrap_err();
        assert_eq!(error_message(&err), "stats: cannot connect: refused");
    }
}
