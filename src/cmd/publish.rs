//! `outboxctl publish`: insert one event from flags, or many from JSON lines.
//!
//! Bulk mode is all-or-nothing per run: lines are parsed and inserted batch by batch inside one
//! transaction that commits only after the last line, so memory stays bounded by the batch size
//! while a bad line anywhere leaves the table exactly as it was.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Seek, Write};
use std::time::{Duration, Instant};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use sqlx::Connection;
use uuid::Uuid;

use crate::cli::PublishArgs;
use crate::config::DbConfig;
use crate::db::{self, publish::NewEvent};
use crate::exit::CodedError;
use crate::{cmd::view, output};

/// Tenant used when none is given: the nil uuid.
pub const DEFAULT_TENANT: Uuid = Uuid::nil();

/// What a run did. With --json it is printed as an object with `inserted`, `duplicates`,
/// `elapsed_ms` and `events` (every inserted event: its line, id and idempotency key).
#[derive(Debug)]
pub struct PublishReport {
    pub inserted: u64,
    pub duplicates: u64,
    pub elapsed_ms: u64,
    /// The first inserted event (the one event of a single publish).
    pub first: Option<PublishedEvent>,
    /// Every inserted event, when kept (--json), rendered as the array's items.
    pub events: Option<Spill>,
}

/// What `publish --json` prints (single or bulk mode). [`Spill::print`] streams exactly this
/// shape: the counts, then the inserted events (a test checks real output against it).
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PublishJson {
    /// Events inserted.
    pub inserted: u64,
    /// Lines (or the one event) skipped because an event with the idempotency key exists.
    pub duplicates: u64,
    /// Milliseconds the run took.
    pub elapsed_ms: u64,
    /// Every inserted event, in input order.
    pub events: Vec<PublishedEvent>,
}

/// One inserted event of `publish --json`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct PublishedEvent {
    /// The line of `--file` it came from (bulk mode only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u64>,
    /// The new event's id.
    pub id: i64,
    /// Its idempotency key (given, or the random one it got).
    pub idempotency_key: String,
}

/// The `events` of a --json report, rendered as they are inserted into an unnamed temporary file
/// (deleted when closed), so memory does not grow with the number of lines; copied to stdout
/// after the commit (before it, they are not yet true): about 100 bytes of disk an event.
#[derive(Debug)]
pub struct Spill {
    items: view::JsonArray<std::io::BufWriter<std::fs::File>>,
}

impl Spill {
    fn new() -> anyhow::Result<Self> {
        let file = tempfile::tempfile()
            .context("creating a temporary file for the --json list of inserted events")?;
        Ok(Self {
            items: view::JsonArray::items(std::io::BufWriter::new(file)),
        })
    }

    fn push(&mut self, e: &PublishedEvent) -> anyhow::Result<()> {
        self.items.push(e)
    }

    /// Writes the report: its counts, then the spilled events.
    fn print(self, inserted: u64, duplicates: u64, elapsed_ms: u64) -> anyhow::Result<()> {
        let empty = self.items.is_empty();
        let mut file = self
            .items
            .into_inner()
            .into_inner()
            .map_err(|e| e.into_error())?;
        file.seek(std::io::SeekFrom::Start(0))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout());
        view::JsonArray::<std::io::Stdout>::write_head(
            &mut out,
            &[
                ("inserted", inserted.into()),
                ("duplicates", duplicates.into()),
                ("elapsed_ms", elapsed_ms.into()),
            ],
            "events",
        )?;
        std::io::copy(&mut file, &mut out)?;
        view::JsonArray::<std::io::Stdout>::write_tail(&mut out, empty)?;
        out.flush()?;
        Ok(())
    }
}

/// How bulk mode cuts its input into INSERT statements.
#[derive(Debug, Clone, Copy)]
pub struct Batches {
    /// Lines per statement, at most.
    pub lines: usize,
    /// Bytes of JSON per statement, at most; a longer line goes alone.
    pub bytes: usize,
}

impl Batches {
    /// `lines` per statement within the default byte budget.
    pub fn of(lines: usize) -> Self {
        Self {
            lines,
            bytes: crate::relay::DEFAULT_BATCH_BYTES as usize,
        }
    }
}

/// The longest line bulk mode reads: PostgreSQL holds no text value of 1 GiB or more, so a longer
/// line can never be inserted; it is refused before it is read whole.
pub const MAX_LINE: u64 = (1 << 30) - 1;

pub async fn run(args: PublishArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let json = args.output.json;
    let report = match &args.file {
        Some(path) => {
            let reader: Box<dyn Read + Send> = if path.as_os_str() == "-" {
                Box::new(std::io::stdin())
            } else {
                Box::new(open_file(path)?)
            };
            let mut conn = db::connect(&cfg).await?;
            db::ensure_migrated(&mut conn, &cfg).await?;
            publish_lines(
                &mut conn,
                BufReader::with_capacity(1 << 20, reader),
                Batches {
                    lines: args.batch_size as usize,
                    bytes: usize::try_from(args.batch_bytes).unwrap_or(usize::MAX),
                },
                json,
            )
            .await?
        }
        None => {
            let event = event_from_flags(&args)?;
            let mut conn = db::connect(&cfg).await?;
            db::ensure_migrated(&mut conn, &cfg).await?;
            let started = Instant::now();
            let rows = db::publish::insert_batch(&mut conn, std::slice::from_ref(&event))
                .await
                .map_err(|e| rejected_input(e, "the event", None))?;
            let first = rows.into_iter().next().map(|r| PublishedEvent {
                line: None,
                id: r.id,
                idempotency_key: r.idempotency_key,
            });
            let events = match (&first, json) {
                (Some(e), true) => {
                    let mut spill = Spill::new()?;
                    spill.push(e)?;
                    Some(spill)
                }
                (None, true) => Some(Spill::new()?),
                (_, false) => None,
            };
            PublishReport {
                inserted: u64::from(first.is_some()),
                duplicates: u64::from(first.is_none()),
                elapsed_ms: started.elapsed().as_millis() as u64,
                first,
                events,
            }
        }
    };
    if let Some(events) = report.events {
        events.print(report.inserted, report.duplicates, report.elapsed_ms)?;
    } else if args.file.is_none() {
        match &report.first {
            Some(e) => output::print_summary(format_args!(
                "inserted event {} (idempotency key {})",
                e.id, e.idempotency_key
            ))?,
            None => output::print_summary(format_args!(
                "duplicate: an event with this idempotency key exists; nothing inserted"
            ))?,
        }
    } else {
        let secs = (report.elapsed_ms as f64 / 1000.0).max(0.001);
        output::print_summary(format_args!(
            "inserted {}, skipped {} (idempotency key exists) in {} ({:.0} events/s)",
            output::plural(report.inserted, "event", "events"),
            output::plural(report.duplicates, "duplicate", "duplicates"),
            output::human_duration(Duration::from_millis(report.elapsed_ms)),
            (report.inserted + report.duplicates) as f64 / secs
        ))?;
    }
    Ok(crate::exit::OK)
}

/// Opens `--file PATH` for reading: a directory or an unreadable path is bad usage (exit 2).
fn open_file(path: &std::path::Path) -> Result<std::fs::File, CodedError> {
    let bad = |why: String| {
        CodedError::usage(format!(
            "cannot read --file {}: {why}; give a JSON-lines file, or - for stdin",
            path.display()
        ))
    };
    let file = std::fs::File::open(path).map_err(|e| bad(e.to_string()))?;
    match file.metadata() {
        Ok(m) if m.is_dir() => Err(bad("it is a directory".into())),
        Ok(_) => Ok(file),
        Err(e) => Err(bad(e.to_string())),
    }
}

/// Reads JSON lines and inserts them in batches inside one transaction. Any bad line aborts the
/// whole run (rolled back) with an error naming its line number.
///
/// Memory is bounded by the batch, not the input: a batch is sent and dropped once it holds
/// `batches.lines` lines or `batches.bytes` bytes of JSON (a longer line is sent alone), the line
/// buffer is released after a long line, and with `keep_ids` the list of inserted events goes to
/// a temporary file ([`Spill`]).
pub async fn publish_lines<R: BufRead>(
    conn: &mut sqlx::PgConnection,
    mut reader: R,
    batches: Batches,
    keep_ids: bool,
) -> anyhow::Result<PublishReport> {
    /// A line buffer larger than this is released after its line, not kept for the next.
    const KEEP_BUF: usize = 4 << 20;
    let started = Instant::now();
    let pb = output::progress(None, keep_ids, "publishing");
    let mut tx = conn.begin().await?;
    let mut report = PublishReport {
        inserted: 0,
        duplicates: 0,
        elapsed_ms: 0,
        first: None,
        events: if keep_ids { Some(Spill::new()?) } else { None },
    };
    let mut batch = Batch::default();
    let mut line_no = 0u64;
    let mut buf = Vec::new();
    let bad_line = |line_no: u64, e: &str| {
        CodedError::usage(format!(
            "line {line_no}: {e}; nothing was inserted (bulk publish is all-or-nothing)"
        ))
    };
    loop {
        buf.clear();
        let n = (&mut reader)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut buf)
            .with_context(|| format!("reading line {}; nothing was inserted", line_no + 1))?;
        let eof = n == 0;
        let mut next = None;
        if !eof {
            line_no += 1;
            if n as u64 > MAX_LINE {
                return Err(bad_line(
                    line_no,
                    &format!(
                        "longer than {}, more than PostgreSQL can store in a row",
                        crate::size::format_size(MAX_LINE + 1)
                    ),
                )
                .into());
            }
            let text = std::str::from_utf8(&buf)
                .map_err(|e| bad_line(line_no, &format!("not valid UTF-8 ({e})")))?;
            let text = if line_no == 1 {
                text.trim_start_matches('\u{feff}')
            } else {
                text
            };
            let text = text.trim();
            if !text.is_empty() {
                next = Some((parse_line(text).map_err(|e| bad_line(line_no, &e))?, n));
            }
        }
        if buf.capacity() > KEEP_BUF {
            buf = Vec::new(); // the line is parsed: its text need not wait for the insert
        }
        // Send the batch when it is full, or before a line that would take it over its bytes.
        let full = match &next {
            Some((_, len)) => {
                batch.events.len() >= batches.lines
                    || (!batch.events.is_empty() && batch.bytes + len > batches.bytes)
            }
            None => eof,
        };
        if full && !batch.events.is_empty() {
            insert(&mut tx, &mut batch, &mut report).await?;
            pb.inc(batch.events.len() as u64);
            batch.clear();
        }
        if let Some((event, len)) = next {
            batch.events.push(event);
            batch.lines.push(line_no);
            batch.bytes += len;
        }
        if eof {
            break;
        }
    }
    tx.commit()
        .await
        .context("committing; nothing was inserted")?;
    pb.finish_and_clear();
    report.elapsed_ms = started.elapsed().as_millis() as u64;
    Ok(report)
}

/// The lines of one INSERT statement.
#[derive(Default)]
struct Batch {
    events: Vec<NewEvent>,
    /// Each event's line number.
    lines: Vec<u64>,
    /// Bytes of JSON read for them.
    bytes: usize,
}

impl Batch {
    fn clear(&mut self) {
        // Dropped, not cleared: a batch of long lines should not keep its memory for the next.
        self.events = Vec::new();
        self.lines.clear();
        self.bytes = 0;
    }
}

/// Inserts `batch` and records what it did in `report`.
async fn insert(
    tx: &mut sqlx::PgConnection,
    batch: &mut Batch,
    report: &mut PublishReport,
) -> anyhow::Result<()> {
    let (first_line, last_line) = (batch.lines[0], batch.lines[batch.lines.len() - 1]);
    let what = if first_line == last_line {
        format!("line {first_line}")
    } else {
        format!("lines {first_line}-{last_line}")
    };
    let rows = db::publish::insert_batch(tx, &batch.events)
        .await
        .map_err(|e| rejected_input(e, &what, Some("bulk publish is all-or-nothing")))?;
    report.inserted += rows.len() as u64;
    report.duplicates += (batch.events.len() - rows.len()) as u64;
    if let Some(spill) = &mut report.events {
        let lines: HashMap<&str, u64> = batch
            .events
            .iter()
            .zip(&batch.lines)
            .rev() // the first line with a key is the one inserted
            .map(|(e, l)| (e.idempotency_key.as_str(), *l))
            .collect();
        let mut events: Vec<PublishedEvent> = rows
            .into_iter()
            .map(|r| PublishedEvent {
                line: lines.get(r.idempotency_key.as_str()).copied(),
                id: r.id,
                idempotency_key: r.idempotency_key,
            })
            .collect();
        events.sort_by_key(|e| e.line);
        for e in &events {
            spill.push(e)?;
        }
    }
    Ok(())
}

/// A failed insert. A data exception (SQLSTATE class 22, e.g. a number PostgreSQL's jsonb cannot
/// hold) or a value over one of PostgreSQL's size limits (class 54, e.g. a jsonb string over
/// 256 MiB, an idempotency key too long for its unique index) is bad input, exit 2, reported in
/// one line with PostgreSQL's own words; anything else is a database failure.
fn rejected_input(err: sqlx::Error, what: &str, all_or_nothing: Option<&str>) -> anyhow::Error {
    let nothing = match all_or_nothing {
        Some(why) => format!("; nothing was inserted ({why})"),
        None => "; nothing was inserted".to_owned(),
    };
    let Some(db_err) = err.as_database_error() else {
        return anyhow::Error::new(err).context(format!("inserting {what}{nothing}"));
    };
    let code = db_err.code().unwrap_or_default();
    let why = if code.starts_with("22") {
        ""
    } else if code.starts_with("54") {
        " as too large"
    } else {
        return anyhow::Error::new(err).context(format!("inserting {what}{nothing}"));
    };
    CodedError::usage(format!(
        "PostgreSQL rejected {what}{why}: {}{nothing}",
        db_err.message()
    ))
    .into()
}

const EXPECTING: &str =
    "expected a JSON object with event_type, aggregate_type, aggregate_id and payload";

/// One JSON line of bulk input. Keys are the outbox column names.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object with event_type, aggregate_type, aggregate_id and payload"
)]
struct Line {
    event_type: String,
    aggregate_type: String,
    #[serde(deserialize_with = "string_or_integer")]
    aggregate_id: String,
    /// Kept as the text it was given: PostgreSQL parses it, so numbers keep their precision.
    payload: Box<RawValue>,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    headers: Option<Map<String, Value>>,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    available_at: Option<String>,
    #[serde(default)]
    delay: Option<String>,
}

/// `aggregate_id` may be given as a JSON string or integer.
fn string_or_integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) => Ok(s),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "aggregate_id must be a string or an integer, not {other}"
        ))),
    }
}

/// A serde_json error without its position "at line 1 column N": the input is one line, whose
/// number the caller reports, so only the column is kept.
fn json_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&position) {
        Some(msg) if e.line() == 1 => format!("{msg} (column {})", e.column()),
        _ => text,
    }
}

/// Parses and validates one line of bulk input.
pub fn parse_line(text: &str) -> Result<NewEvent, String> {
    // serde would read a JSON array as the struct's fields in order; only objects are lines.
    if !text.starts_with('{') {
        return Err(match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => format!(
                "{EXPECTING}, not `{}`",
                text.chars().take(40).collect::<String>()
            ),
            Err(e) => format!("invalid JSON: {}", json_error(&e)),
        });
    }
    let line: Line = serde_json::from_str(text).map_err(|e| {
        if e.is_data() {
            json_error(&e)
        } else {
            format!("invalid JSON: {}", json_error(&e))
        }
    })?;
    if line.available_at.is_some() && line.delay.is_some() {
        return Err("give either available_at or delay, not both".into());
    }
    let available_at = line
        .available_at
        .as_deref()
        .map(|s| crate::cli::parse_timestamp(s).map_err(|e| format!("available_at: {e}")))
        .transpose()?;
    let delay_micros = line
        .delay
        .as_deref()
        .map(|s| {
            crate::cli::parse_duration(s)
                .map_err(|e| format!("delay: {e}"))
                .and_then(micros)
        })
        .transpose()?;
    build(
        &line.event_type,
        &line.aggregate_type,
        &line.aggregate_id,
        line.tenant_id.as_deref(),
        line.payload,
        line.headers.unwrap_or_default(),
        line.idempotency_key,
        available_at,
        delay_micros,
    )
}

fn micros(d: Duration) -> Result<i64, String> {
    i64::try_from(d.as_micros()).map_err(|_| "delay is too long".to_string())
}

#[allow(clippy::too_many_arguments)]
fn build(
    event_type: &str,
    aggregate_type: &str,
    aggregate_id: &str,
    tenant: Option<&str>,
    payload: Box<RawValue>,
    headers: Map<String, Value>,
    idempotency_key: Option<String>,
    available_at: Option<chrono::DateTime<chrono::Utc>>,
    delay_micros: Option<i64>,
) -> Result<NewEvent, String> {
    for (name, value) in [
        ("event_type", event_type),
        ("aggregate_type", aggregate_type),
        ("aggregate_id", aggregate_id),
    ] {
        if value.trim().is_empty() {
            return Err(format!("{name} must not be empty"));
        }
        if value.contains('\0') {
            return Err(format!("{name} {NUL}"));
        }
    }
    if let Some(k) = idempotency_key.as_deref().filter(|k| k.contains('\0')) {
        return Err(format!("idempotency_key `{}` {NUL}", k.escape_debug()));
    }
    if let Some((k, _)) = headers
        .iter()
        .find(|(k, v)| k.contains('\0') || v.as_str().is_some_and(|v| v.contains('\0')))
    {
        return Err(format!("header `{}` {NUL}", k.escape_debug()));
    }
    if has_nul(payload.get()) {
        return Err(format!("payload {NUL}"));
    }
    if let Some(len) = overlong_string(payload.get()) {
        return Err(format!(
            "payload holds a string of {len} bytes; PostgreSQL's jsonb holds strings up to \
             {JSONB_MAX_STRING} bytes (256 MiB - 1)"
        ));
    }
    let tenant_id = match tenant {
        None => DEFAULT_TENANT,
        Some(t) => {
            Uuid::parse_str(t.trim()).map_err(|_| format!("tenant_id `{t}` is not a uuid"))?
        }
    };
    if let Some((k, _)) = headers.iter().find(|(_, v)| !v.is_string()) {
        return Err(format!("header `{k}` must be a string"));
    }
    let idempotency_key = match idempotency_key {
        Some(k) if k.trim().is_empty() => return Err("idempotency_key must not be empty".into()),
        Some(k) => k,
        None => Uuid::new_v4().to_string(),
    };
    Ok(NewEvent {
        tenant_id,
        aggregate_type: aggregate_type.to_owned(),
        aggregate_id: aggregate_id.to_owned(),
        event_type: event_type.to_owned(),
        // Moved, not copied: a payload can be hundreds of megabytes.
        payload: Box::<str>::from(payload).into_string(),
        headers: Value::Object(headers),
        idempotency_key,
        available_at,
        delay_micros,
    })
}

pub(crate) const NUL: &str = "contains a NUL character (\\u0000), which PostgreSQL cannot store";

/// Whether JSON text holds a string (or key) with a NUL character: PostgreSQL's jsonb rejects it.
pub(crate) use crate::json::has_nul;

/// The longest string PostgreSQL's jsonb can hold, in bytes (`JENTRY_OFFLENMASK`).
pub(crate) const JSONB_MAX_STRING: usize = (1 << 28) - 1;

/// The length of a string (or key) in JSON text that jsonb cannot hold, if there is one. Checked
/// here rather than left to the server: sending such a payload costs a message of hundreds of
/// megabytes only to be refused (and such a send was seen to stall in the client library).
/// Only text longer than the limit can hold such a string, so only then is it parsed.
pub(crate) fn overlong_string(json: &str) -> Option<usize> {
    fn walk(v: &Value) -> Option<usize> {
        match v {
            Value::String(s) => (s.len() > JSONB_MAX_STRING).then_some(s.len()),
            Value::Array(a) => a.iter().find_map(walk),
            Value::Object(o) => o.iter().find_map(|(k, v)| {
                (k.len() > JSONB_MAX_STRING)
                    .then_some(k.len())
                    .or_else(|| walk(v))
            }),
            _ => None,
        }
    }
    if json.len() <= JSONB_MAX_STRING {
        return None;
    }
    serde_json::from_str::<Value>(json)
        .ok()
        .and_then(|v| walk(&v))
}

/// The single event described by the flags.
fn event_from_flags(args: &PublishArgs) -> Result<NewEvent, CodedError> {
    let raw = args.payload.as_deref().unwrap_or_default();
    let text = super::payload_arg(raw)?;
    let payload: Box<RawValue> = serde_json::from_str(&text)
        .map_err(|e| CodedError::usage(format!("--payload is not valid JSON: {e}")))?;
    let mut headers = Map::new();
    for h in &args.headers {
        let (k, v) = h
            .split_once('=')
            .filter(|(k, _)| !k.trim().is_empty())
            .ok_or_else(|| CodedError::usage(format!("invalid --header `{h}`: use KEY=VALUE")))?;
        headers.insert(k.trim().to_owned(), Value::String(v.to_owned()));
    }
    let delay_micros = args
        .delay
        .map(micros)
        .transpose()
        .map_err(|e| CodedError::usage(format!("--delay: {e}")))?;
    build(
        args.event_type.as_deref().unwrap_or_default(),
        args.aggregate_type.as_deref().unwrap_or_default(),
        args.aggregate_id.as_deref().unwrap_or_default(),
        args.tenant.as_deref(),
        payload,
        headers,
        args.idempotency_key.clone(),
        args.at,
        delay_micros,
    )
    .map_err(|e| {
        CodedError::usage(format!(
            "invalid event: {}",
            e.replace("tenant_id", "--tenant")
        ))
    })
}

/// The `--json` output of `publish` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::docs::json::Output> {
    vec![crate::docs::json::Output::of::<PublishJson>(
        "publish --json",
        "The same shape for one event from flags and for a `--file` of many.",
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_line() {
        let e = parse_line(
            r#"{"event_type":"a.b","aggregate_type":"order","aggregate_id":7,"payload":{"x":1},
                "tenant_id":"6f9619ff-8b86-d011-b42d-00cf4fc964ff","headers":{"v":"1"},
                "idempotency_key":"k1","delay":"5m"}"#,
        )
        .unwrap();
        assert_eq!(e.aggregate_id, "7");
        assert_eq!(e.idempotency_key, "k1");
        assert_eq!(e.delay_micros, Some(300_000_000));
        assert_eq!(e.headers, serde_json::json!({"v": "1"}));
    }

    #[test]
    fn rejects_bad_lines_with_reasons() {
        let cases = [
            (r#"{"event_type":"a""#, "invalid JSON"),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1"}"#,
                "missing field `payload`",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"tenant_id":"nope"}"#,
                "not a uuid",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"delay":"soon"}"#,
                "delay",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"evnt":"x"}"#,
                "unknown field `evnt`",
            ),
            (
                r#"{"event_type":"","aggregate_type":"o","aggregate_id":"1","payload":1}"#,
                "must not be empty",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"headers":{"n":1}}"#,
                "must be a string",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"delay":"1s","available_at":"2026-01-01T00:00:00Z"}"#,
                "not both",
            ),
            (r#"["a","o","1",1]"#, "expected a JSON object"),
            ("hello", "invalid JSON: expected value (column 1)"),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1"}"#,
                "missing field `payload` (column 58)",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":true,"payload":1}"#,
                "aggregate_id must be a string or an integer, not true",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":{"k\u0000":1}}"#,
                "payload contains a NUL character",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"\u0000","payload":1}"#,
                "aggregate_id contains a NUL character",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"headers":{"h":"\u0000"}}"#,
                "header `h` contains a NUL character",
            ),
        ];
        for (line, want) in cases {
            let err = parse_line(line).unwrap_err();
            assert!(err.contains(want), "{line}: {err}");
        }
    }

    #[test]
    fn payload_text_is_kept_as_given() {
        let e = parse_line(
            r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload": {"n": 123456789012345678901234567890.10, "s": "\\u0000"} }"#,
        )
        .unwrap();
        // An escaped backslash before u0000 is not a NUL.
        assert_eq!(
            e.payload,
            r#"{"n": 123456789012345678901234567890.10, "s": "\\u0000"}"#
        );
    }

    #[test]
    fn default_key_is_unique() {
        let line = r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1}"#;
        assert_ne!(
            parse_line(line).unwrap().idempotency_key,
            parse_line(line).unwrap().idempotency_key
        );
        assert_eq!(parse_line(line).unwrap().tenant_id, DEFAULT_TENANT);
    }
}
