//! How events look on a terminal and in JSON, shared by `dead`, `requeue` and `events`.

use std::io::Write;

use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::db::audit::AuditRecord;
use crate::db::dead::RequeueRecord;
use crate::db::events::EventRow;
use crate::exit::CodedError;
use crate::output;

/// A list of events as `--json` prints it.
#[derive(Debug, Serialize)]
pub struct EventList<'a> {
    pub count: usize,
    /// More rows match than --limit allowed.
    pub truncated: bool,
    pub events: &'a [EventRow],
}

/// One event as `show --json` prints it: every column, plus its requeue history and its whole
/// audit trail (requeues, reschedules), oldest first.
#[derive(Debug, Serialize)]
pub struct EventDetail<'a> {
    #[serde(flatten)]
    pub event: &'a EventRow,
    pub requeues: &'a [RequeueRecord],
    pub audit: &'a [AuditRecord],
}

/// "2026-03-01 09:30:00Z"; "-" for none.
pub fn time(t: Option<DateTime<Utc>>) -> String {
    t.map(|t| t.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_else(|| "-".into())
}

/// The first line of `text`, cut to `max` characters with an ellipsis.
pub fn first_line(text: &str, max: usize) -> String {
    let line = text.lines().next().unwrap_or("").trim_end();
    let more_lines = text.trim_end().lines().nth(1).is_some();
    if line.chars().count() > max {
        let cut: String = line.chars().take(max.saturating_sub(1)).collect();
        format!("{cut}…")
    } else if more_lines {
        format!("{line} …")
    } else {
        line.to_owned()
    }
}

fn aggregate(e: &EventRow) -> String {
    format!("{}/{}", e.aggregate_type, e.aggregate_id)
}

/// Dead letters: id, type, aggregate, attempts, when, the error's first line.
pub fn print_dead_table(rows: &[EventRow]) -> anyhow::Result<()> {
    let mut t = output::table(&[
        "id",
        "event type",
        "aggregate",
        "attempts",
        "dead since",
        "error",
    ]);
    for e in rows {
        t.add_row(vec![
            e.id.to_string(),
            e.event_type.clone(),
            aggregate(e),
            e.attempt_count.to_string(),
            time(e.dead_lettered_at),
            first_line(e.last_error.as_deref().unwrap_or(""), 60),
        ]);
    }
    output::print_table(&t)
}

/// Events of any state: id, state, type, aggregate, attempts, due (or published / dead-lettered)
/// time, last error. `show` and --json have every column.
pub fn print_events_table(rows: &[EventRow]) -> anyhow::Result<()> {
    let mut t = output::table(&[
        "id",
        "state",
        "event type",
        "aggregate",
        "attempts",
        "due / done",
        "last error",
    ]);
    for e in rows {
        let when = e
            .published_at
            .or(e.dead_lettered_at)
            .or(Some(e.available_at));
        t.add_row(vec![
            e.id.to_string(),
            e.state.to_string(),
            e.event_type.clone(),
            aggregate(e),
            e.attempt_count.to_string(),
            time(when),
            first_line(e.last_error.as_deref().unwrap_or(""), 40),
        ]);
    }
    output::print_table(&t)
}

/// The note on stderr after a list cut short by --limit.
/// Prints a list fetched with `limit + 1` rows: JSON, a message when empty, or the table (and a
/// note on stderr when more rows matched than `limit`).
pub fn print_list(
    mut rows: Vec<EventRow>,
    limit: u64,
    json: bool,
    empty: &str,
    table: fn(&[EventRow]) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    let truncated = rows.len() as u64 > limit;
    rows.truncate(limit as usize);
    if json {
        output::print_json(&EventList {
            count: rows.len(),
            truncated,
            events: &rows,
        })
    } else if rows.is_empty() {
        output::print_line(format_args!("{empty}"))
    } else {
        table(&rows)?;
        if truncated {
            note_truncated(rows.len());
        }
        Ok(())
    }
}

pub fn note_truncated(shown: usize) {
    output::note(format_args!(
        "showing the first {}; more match: raise --limit or narrow the filters",
        output::plural(shown as u64, "event", "events")
    ));
}

fn pretty(v: &serde_json::Value) -> String {
    serde_json::to_string_pretty(v).unwrap_or_else(|_| v.to_string())
}

fn indent(text: &str) -> String {
    text.lines()
        .map(|l| format!("  {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One event in full, for humans.
pub fn print_event(
    e: &EventRow,
    requeues: &[RequeueRecord],
    audit: &[AuditRecord],
) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    let fields: [(&str, String); 15] = [
        ("id", e.id.to_string()),
        ("state", e.state.to_string()),
        ("event type", e.event_type.clone()),
        ("aggregate type", e.aggregate_type.clone()),
        ("aggregate id", e.aggregate_id.clone()),
        ("tenant", e.tenant_id.to_string()),
        ("idempotency key", e.idempotency_key.clone()),
        ("attempts", e.attempt_count.to_string()),
        ("created at", time(Some(e.created_at))),
        ("available at", time(Some(e.available_at))),
        ("locked until", time(e.locked_until)),
        ("claim token", opt(e.claim_token.map(|t| t.to_string()))),
        ("published at", time(e.published_at)),
        ("dead-lettered at", time(e.dead_lettered_at)),
        (
            "requeued",
            output::plural(requeues.len() as u64, "time", "times"),
        ),
    ];
    for (k, v) in fields {
        writeln!(out, "{:<17} {v}", format!("{k}:"))?;
    }
    writeln!(out, "headers:\n{}", indent(&pretty(&e.headers)))?;
    writeln!(out, "payload:\n{}", indent(&pretty(&e.payload)))?;
    match &e.last_error {
        Some(err) => writeln!(out, "last error:\n{}", indent(err))?,
        None => writeln!(out, "last error:       -")?,
    }
    if !audit.is_empty() {
        writeln!(out, "history:")?;
        for a in audit {
            writeln!(out, "  {}", audit_line(a))?;
        }
        return Ok(());
    }
    for (i, r) in requeues.iter().enumerate() {
        writeln!(
            out,
            "requeue {}: {} by {}{}; was dead since {} after {}; due {}{}",
            i + 1,
            time(Some(r.requeued_at)),
            r.requeued_by,
            r.reason
                .as_deref()
                .map(|x| format!(" ({x})"))
                .unwrap_or_default(),
            time(r.previous_dead_lettered_at),
            output::plural(r.previous_attempt_count as u64, "attempt", "attempts"),
            time(Some(r.available_at)),
            if r.kept_attempts {
                ", attempts kept"
            } else {
                ""
            },
        )?;
    }
    Ok(())
}

/// One audit row for humans: "2026-12-01 09:30:00Z requeue by alice@host (role app) (broker
/// fixed): was dead since ... after 10 attempts; due ...".
pub fn audit_line(a: &AuditRecord) -> String {
    let field = |v: &Option<serde_json::Value>, k: &str| -> Option<serde_json::Value> {
        v.as_ref().and_then(|v| v.get(k)).cloned()
    };
    let when = |v: Option<serde_json::Value>| {
        v.and_then(|v| serde_json::from_value::<Option<DateTime<Utc>>>(v).ok())
            .flatten()
    };
    let what = match a.action.as_str() {
        "requeue" => format!(
            "was dead since {} after {}; due {}{}",
            time(when(field(&a.previous, "dead_lettered_at"))),
            output::plural(
                field(&a.previous, "attempt_count")
                    .and_then(|v| v.as_u64())
                    .unwrap_or(0),
                "attempt",
                "attempts"
            ),
            time(when(field(&a.details, "available_at"))),
            if field(&a.details, "kept_attempts").and_then(|v| v.as_bool()) == Some(true) {
                ", attempts kept"
            } else {
                ""
            }
        ),
        "reschedule" => format!(
            "due {} -> {}",
            time(when(field(&a.previous, "available_at"))),
            time(when(field(&a.details, "available_at")))
        ),
        "cancel" | "discard" => format!(
            "deleted while {}",
            field(&a.previous, "state")
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_else(|| "?".into())
        ),
        "edit" => {
            let changed: Vec<&str> = ["event_type", "headers", "payload"]
                .into_iter()
                .filter(|k| field(&a.previous, k) != field(&a.details, k))
                .collect();
            let mut s = if changed.is_empty() {
                "no value changed".to_owned()
            } else {
                format!("changed {}", changed.join(", "))
            };
            if field(&a.details, "requeued").and_then(|v| v.as_bool()) == Some(true) {
                s.push_str(&format!(
                    "; requeued (was dead since {} after {})",
                    time(when(field(&a.previous, "dead_lettered_at"))),
                    output::plural(
                        field(&a.previous, "attempt_count")
                            .and_then(|v| v.as_u64())
                            .unwrap_or(0),
                        "attempt",
                        "attempts"
                    )
                ));
            }
            s
        }
        _ => String::new(),
    };
    format!(
        "{} {} by {} (role {}){}{}{what}",
        time(Some(a.at)),
        a.action,
        a.actor.as_deref().unwrap_or("unknown"),
        a.db_role,
        a.reason
            .as_deref()
            .map(|r| format!(" ({r})"))
            .unwrap_or_default(),
        if what.is_empty() { "" } else { ": " },
    )
}

/// The error for an id that does not exist.
pub fn no_such_event(id: i64, schema: &str) -> CodedError {
    CodedError::usage(format!("no event with id {id} in schema `{schema}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_lines() {
        assert_eq!(first_line("boom", 10), "boom");
        assert_eq!(first_line("boom\nat line 2", 10), "boom …");
        assert_eq!(first_line("abcdefghijkl", 5), "abcd…");
        assert_eq!(first_line("", 5), "");
    }
}
