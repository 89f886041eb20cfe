//! Bulk publish: JSON lines inserted in batches inside one transaction, all or nothing. `publish
//! --file` reads a file or stdin; `bench` and `demo` feed it their own lines, so every figure they
//! show comes from the same code path.

use std::collections::HashMap;
use std::io::{BufRead, Read, Seek, Write};
use std::time::Instant;

use anyhow::Context;
use serde::Serialize;
use sqlx::Connection;

use crate::db::{self, publish::NewEvent};
use crate::exit::CodedError;
use crate::ops::new_event::parse_line;
use crate::output;

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
    items: output::JsonArray<std::io::BufWriter<std::fs::File>>,
}

impl Spill {
    pub fn new() -> anyhow::Result<Self> {
        let file = tempfile::tempfile()
            .context("creating a temporary file for the --json list of inserted events")?;
        Ok(Self {
            items: output::JsonArray::items(std::io::BufWriter::new(file)),
        })
    }

    pub fn push(&mut self, e: &PublishedEvent) -> anyhow::Result<()> {
        self.items.push(e)
    }

    /// Writes the report: its counts, then the spilled events.
    pub fn print(self, inserted: u64, duplicates: u64, elapsed_ms: u64) -> anyhow::Result<()> {
        let empty = self.items.is_empty();
        let mut file = self
            .items
            .into_inner()
            .into_inner()
            .map_err(|e| e.into_error())?;
        file.seek(std::io::SeekFrom::Start(0))?;
        let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout());
        output::JsonArray::<std::io::Stdout>::write_head(
            &mut out,
            &[
                ("inserted", inserted.into()),
                ("duplicates", duplicates.into()),
                ("elapsed_ms", elapsed_ms.into()),
            ],
            "events",
        )?;
        std::io::copy(&mut file, &mut out)?;
        output::JsonArray::<std::io::Stdout>::write_tail(&mut out, empty)?;
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
pub(crate) fn rejected_input(
    err: sqlx::Error,
    what: &str,
    all_or_nothing: Option<&str>,
) -> anyhow::Error {
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
