//! How events look on a terminal and in JSON, shared by `dead`, `requeue` and `events`: lists,
//! tables, one event's detail (with its requeue history and audit trail) and the error for an id
//! that is gone. Below the commands, so none of them imports another to show an event.

use std::io::Write;

use serde::Serialize;

use sqlx::pool::PoolConnection;
use sqlx::{PgConnection, Postgres};

use crate::config::DbConfig;
use crate::db::audit::AuditRecord;

use crate::db::dead::RequeueRecord;
use crate::db::events::{EventRow, EventState, Scope};
use crate::db::timestamp::Timestamp;
use crate::exit::CodedError;
use crate::json::{self, JsonText};
use crate::ops::select::check_filter;
use crate::output::JsonArray;
use crate::select::EventFilter;
use crate::{db, output};

/// A list of events as `--json` prints it. [`list`] streams exactly this shape.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct EventList<'a> {
    /// Events listed.
    pub count: usize,
    /// More rows match than --limit allowed.
    pub truncated: bool,
    pub events: &'a [ListedEvent<'a>],
}

/// A listed event, with the events it holds back when it is a dead head blocking its ordered key
/// (`blocking`, only then).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct ListedEvent<'a> {
    #[serde(flatten)]
    pub row: &'a EventRow,
    /// A dead head of an ordered key: how many pending events of its key it holds back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocking: Option<i64>,
}

/// One event as `show --json` prints it: every column, plus its requeue history and its whole
/// audit trail (requeues, reschedules), oldest first.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct EventDetail<'a> {
    #[serde(flatten)]
    pub event: &'a EventRow,
    /// Its requeues, oldest first.
    pub requeues: &'a [RequeueRecord],
    /// Its whole audit trail, oldest first.
    pub audit: &'a [AuditRecord],
}

/// "2026-03-01 09:30:00Z" ("infinity" for a row's `infinity`); "-" for none.
pub fn time(t: Option<impl Into<Timestamp>>) -> String {
    t.map(|t| t.into().format("%Y-%m-%d %H:%M:%SZ"))
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

/// A table of events: its header and how a row becomes its cells (short texts only, so a page of
/// rows holds no payload).
#[derive(Clone, Copy)]
pub struct TableKind {
    pub header: &'static [&'static str],
    pub cells: fn(&EventRow) -> Vec<String>,
    /// What a list of them says when no event matches.
    pub empty: &'static str,
}

/// Dead letters: id, type, aggregate, attempts, when, the error's first line.
pub const DEAD_TABLE: TableKind = TableKind {
    empty: "no dead-lettered events match",
    header: &[
        "id",
        "event type",
        "aggregate",
        "attempts",
        "dead since",
        "error",
    ],
    cells: |e| {
        vec![
            e.id.to_string(),
            e.event_type.clone(),
            aggregate(e),
            e.attempt_count.to_string(),
            time(e.dead_lettered_at),
            first_line(e.last_error.as_deref().unwrap_or(""), 60),
        ]
    },
};

/// Events of any state: id, state, type, aggregate, attempts, due (or published / dead-lettered)
/// time, last error. `show` and --json have every column.
pub const EVENTS_TABLE: TableKind = TableKind {
    empty: "no events match",
    header: &[
        "id",
        "state",
        "event type",
        "aggregate",
        "attempts",
        "due / done",
        "last error",
    ],
    cells: |e| {
        let when = e
            .published_at
            .or(e.dead_lettered_at)
            .or(Some(e.available_at));
        vec![
            e.id.to_string(),
            e.state.to_string(),
            e.event_type.clone(),
            aggregate(e),
            e.attempt_count.to_string(),
            time(when),
            first_line(e.last_error.as_deref().unwrap_or(""), 40),
        ]
    },
};

fn print_table(kind: TableKind, rows: Vec<Vec<String>>) -> anyhow::Result<()> {
    let mut t = output::table(kind.header);
    for r in rows {
        output::add_row(&mut t, r);
    }
    output::print_table(&t)
}

/// Prints `rows` as a dead-letter table.
pub fn print_dead_table(rows: &[EventRow]) -> anyhow::Result<()> {
    print_table(DEAD_TABLE, rows.iter().map(DEAD_TABLE.cells).collect())
}

/// Prints `rows` as an events table.
pub fn print_events_table(rows: &[EventRow]) -> anyhow::Result<()> {
    print_table(EVENTS_TABLE, rows.iter().map(EVENTS_TABLE.cells).collect())
}

/// Rows per table when a list is printed for humans: a longer list is printed as several tables
/// of this many rows, each with its header, so memory stays bounded whatever --limit is (a table
/// needs all its rows to size its columns).
pub const TABLE_PAGE: usize = 1000;

/// `dead list` and `events list`: the events of `scope` that `filter` matches, at most `limit`, on
/// a connection of their own; a dead list marks the dead heads blocking their ordered keys.
pub async fn list(
    cfg: &DbConfig,
    filter: &EventFilter,
    scope: Scope<'_>,
    limit: u64,
    json: bool,
    kind: TableKind,
) -> anyhow::Result<()> {
    let pool = db::pool_migrated(cfg, 1).await?;
    let mut conn = pool.acquire().await?;
    check_filter(&mut conn, filter).await?;
    let blocking = match scope {
        Scope::Dead => db::ordering::blocking_heads(&mut conn).await?,
        Scope::States(_) => Default::default(),
    };
    print_list(&mut conn, scope, filter, limit, json, kind, &blocking).await
}

/// Streams a list of at most `limit` events from the database to stdout: with `json`,
/// [`EventList`]'s shape (count first, so it is counted first, in the same snapshot), else a
/// message when empty, or tables of [`TABLE_PAGE`] rows and a note on stderr when more rows
/// matched than `limit`. Memory does not grow with `limit`.
#[allow(clippy::too_many_arguments)]
async fn print_list(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    filter: &EventFilter,
    limit: u64,
    json: bool,
    kind: TableKind,
    blocking: &std::collections::HashMap<i64, i64>,
) -> anyhow::Result<()> {
    let mut tx = db::events::begin_snapshot(conn).await?;
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout());
    if json {
        let matching = db::events::count(&mut tx, scope, filter, None, Some(limit + 1)).await?;
        let mut list = JsonArray::begin(
            &mut out,
            &[
                ("count", matching.min(limit).into()),
                ("truncated", (matching > limit).into()),
            ],
            "events",
        )?;
        db::events::for_each(&mut tx, scope, filter, None, Some(limit), |row| {
            list.push(&ListedEvent {
                row: &row,
                blocking: blocking.get(&row.id).copied(),
            })
        })
        .await?;
        list.finish()?;
    } else {
        let mut page = Vec::new();
        let mut shown = 0u64;
        let mut truncated = false;
        db::events::for_each(&mut tx, scope, filter, None, Some(limit + 1), |row| {
            if shown == limit {
                truncated = true;
                return Ok(());
            }
            shown += 1;
            let mut cells = (kind.cells)(&row);
            if let (Some(n), Some(last)) = (blocking.get(&row.id), cells.last_mut()) {
                *last = format!(
                    "blocking {} of its key; {last}",
                    output::plural(*n as u64, "event", "events")
                );
            }
            page.push(cells);
            if page.len() == TABLE_PAGE {
                print_table(kind, std::mem::take(&mut page))?;
            }
            anyhow::Ok(())
        })
        .await?;
        if shown == 0 {
            output::print_line(format_args!("{}", kind.empty))?;
        } else if !page.is_empty() {
            print_table(kind, page)?;
        }
        if truncated {
            note_truncated(shown as usize);
        }
    }
    out.flush()?;
    tx.commit().await?;
    Ok(())
}

pub fn note_truncated(shown: usize) {
    output::note(format_args!(
        "showing the first {}; more match: raise --limit or narrow the filters",
        output::plural(shown as u64, "event", "events")
    ));
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
        (
            "published at",
            if e.published_by_log {
                "- (published by the log, which marks no row)".to_owned()
            } else {
                time(e.published_at)
            },
        ),
        ("dead-lettered at", time(e.dead_lettered_at)),
        (
            "requeued",
            output::plural(requeues.len() as u64, "time", "times"),
        ),
    ];
    for (k, v) in fields {
        writeln!(
            out,
            "{:<17} {}",
            format!("{k}:"),
            output::escape_controls(&v)
        )?;
    }
    // Row data, escaped for the terminal (output::escape_controls): a key, a value, an error.
    let shown = |text: &str| indent(&output::escape_lines(text));
    writeln!(out, "headers:\n{}", shown(&json::pretty(e.headers.get())))?;
    writeln!(out, "payload:\n{}", shown(&json::pretty(e.payload.get())))?;
    match &e.last_error {
        Some(err) => writeln!(out, "last error:\n{}", shown(err))?,
        None => writeln!(out, "last error:       -")?,
    }
    if !audit.is_empty() {
        writeln!(out, "history:")?;
        for a in audit {
            writeln!(out, "  {}", output::escape_controls(&audit_line(a)))?;
        }
        return Ok(());
    }
    for (i, r) in requeues.iter().enumerate() {
        let line = format!(
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
        );
        writeln!(out, "{}", output::escape_controls(&line))?;
    }
    Ok(())
}

/// One audit row for humans: "2026-12-01 09:30:00Z requeue by alice@host (role app) (broker
/// fixed): was dead since ... after 10 attempts; due ...".
pub fn audit_line(a: &AuditRecord) -> String {
    let field = |v: &Option<JsonText>, k: &str| -> Option<JsonText> {
        v.as_ref().and_then(|v| v.member(k))
    };
    let when = |v: Option<JsonText>| v.and_then(|v| v.as_value::<Option<Timestamp>>()).flatten();
    // What a requeue (or an edit with --requeue) brought back: "was dead since ... after N attempts".
    let was_dead = || {
        format!(
            "was dead since {} after {}",
            time(when(field(&a.previous, "dead_lettered_at"))),
            output::plural(
                field(&a.previous, "attempt_count")
                    .and_then(|v| v.as_value::<u64>())
                    .unwrap_or(0),
                "attempt",
                "attempts"
            )
        )
    };
    let what = match a.action.as_str() {
        "requeue" => format!(
            "{}; due {}{}",
            was_dead(),
            time(when(field(&a.details, "available_at"))),
            if field(&a.details, "kept_attempts").and_then(|v| v.as_value::<bool>()) == Some(true) {
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
                .and_then(|v| v.as_value::<String>())
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
            if field(&a.details, "requeued").and_then(|v| v.as_value::<bool>()) == Some(true) {
                s.push_str(&format!("; requeued ({})", was_dead()));
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

/// Event `id`, or the error saying it does not exist ([`missing`]).
/// What `events show` and `dead show` start with: a connection and the event `id`.
/// `dead show` and `events show`: the event `id` in full ([`show`]); `dead_only` refuses (exit
/// 2) an event that is not dead-lettered.
pub async fn show_one(cfg: &DbConfig, id: i64, json: bool, dead_only: bool) -> anyhow::Result<()> {
    let (mut conn, event) = open(cfg, id).await?;
    if dead_only && event.state != EventState::Dead {
        return Err(CodedError::usage(format!(
            "event {} is {}, not dead-lettered; see it with `outboxctl events show {}`",
            event.id, event.state, event.id
        ))
        .into());
    }
    show(&mut conn, &event, json).await
}

async fn open(cfg: &DbConfig, id: i64) -> anyhow::Result<(PoolConnection<Postgres>, EventRow)> {
    let pool = db::pool_migrated(cfg, 1).await?;
    let mut conn = pool.acquire().await?;
    let event = get(&mut conn, id, cfg.schema.name()).await?;
    Ok((conn, event))
}

pub async fn get(conn: &mut PgConnection, id: i64, schema: &str) -> anyhow::Result<EventRow> {
    match db::events::get(conn, id).await? {
        Some(event) => Ok(event),
        None => Err(missing(conn, id, schema).await?.into()),
    }
}

/// The error for an id that does not exist, saying who deleted it when the audit trail knows.
async fn missing(conn: &mut PgConnection, id: i64, schema: &str) -> anyhow::Result<CodedError> {
    let mut err = no_such_event(id, schema);
    if db::events::table_exists(conn, "outbox_audit").await? {
        if let Some(a) = db::audit::deletion(conn, id).await? {
            err.message.push_str(&format!(
                ": it was {} at {} by {} (role {})",
                if a.action == "cancel" {
                    "cancelled"
                } else {
                    "discarded"
                },
                time(Some(a.at)),
                a.actor.as_deref().unwrap_or("unknown"),
                a.db_role
            ));
        }
    }
    Ok(err)
}

/// Prints one event as `dead show` and `events show` do: with its requeue history and its audit
/// trail, as [`EventDetail`] with `json`, else as [`print_event`] lays it out.
pub async fn show(conn: &mut PgConnection, event: &EventRow, json: bool) -> anyhow::Result<()> {
    let (requeues, audit) = history(conn, event.id).await?;
    if json {
        output::print_json(&EventDetail {
            event,
            requeues: &requeues,
            audit: &audit,
        })
    } else {
        print_event(event, &requeues, &audit)
    }
}

/// The requeue history of an event and its whole audit trail; empty when the schema predates the
/// tables (migration 3 for requeues, 4 for the audit trail).
async fn history(
    conn: &mut PgConnection,
    id: i64,
) -> anyhow::Result<(Vec<RequeueRecord>, Vec<AuditRecord>)> {
    let requeues = if db::events::table_exists(conn, "outbox_requeues").await? {
        db::dead::history(conn, id).await?
    } else {
        Vec::new()
    };
    let audit = if db::events::table_exists(conn, "outbox_audit").await? {
        db::audit::history(conn, id).await?
    } else {
        Vec::new()
    };
    Ok((requeues, audit))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, payload: &str) -> EventRow {
        EventRow {
            id,
            state: crate::db::events::EventState::Dead,
            tenant_id: uuid::Uuid::nil(),
            event_type: "order.placed".into(),
            aggregate_type: "order".into(),
            aggregate_id: id.to_string(),
            idempotency_key: format!("k{id}"),
            payload: JsonText::parse(payload.to_owned()).unwrap(),
            headers: JsonText::parse(r#"{"v": "1"}"#.to_owned()).unwrap(),
            attempt_count: 3,
            created_at: chrono::DateTime::from_timestamp(1_764_000_000, 0)
                .unwrap()
                .into(),
            available_at: Timestamp::Infinity,
            locked_until: None,
            claim_token: None,
            published_at: None,
            dead_lettered_at: chrono::DateTime::from_timestamp(1_764_000_002, 0).map(Into::into),
            last_error: Some("HTTP 500\nline two".into()),
            published_by_log: false,
        }
    }

    #[test]
    fn streamed_json_list_is_byte_identical_to_the_whole_document() {
        let rows = [
            row(
                1,
                r#"{"a": [1, 2, {"b": "x\ny"}], "e": {}, "f": [], "n": 1e400}"#,
            ),
            row(2, r#""text""#),
            row(3, "null"),
        ];
        for n in 0..=rows.len() {
            for truncated in [false, true] {
                let listed: Vec<ListedEvent> = rows[..n]
                    .iter()
                    .map(|row| ListedEvent {
                        row,
                        blocking: None,
                    })
                    .collect();
                let want = serde_json::to_vec_pretty(&EventList {
                    count: n,
                    truncated,
                    events: &listed,
                })
                .unwrap();
                let mut list = JsonArray::begin(
                    Vec::new(),
                    &[("count", n.into()), ("truncated", truncated.into())],
                    "events",
                )
                .unwrap();
                for r in &rows[..n] {
                    list.push(r).unwrap();
                }
                let mut got = list.finish().unwrap();
                assert_eq!(
                    got.pop(),
                    Some(b'\n'),
                    "ends with a newline, like print_json"
                );
                assert_eq!(
                    String::from_utf8(got).unwrap(),
                    String::from_utf8(want).unwrap()
                );
            }
        }
    }

    #[test]
    fn first_lines() {
        assert_eq!(first_line("boom", 10), "boom");
        assert_eq!(first_line("boom\nat line 2", 10), "boom …");
        assert_eq!(first_line("abcdefghijkl", 5), "abcd…");
        assert_eq!(first_line("", 5), "");
    }
}
