//! `outboxctl publish`: insert one event from flags, or many from JSON lines.
//!
//! Bulk mode is all-or-nothing per run: lines are parsed and inserted batch by batch inside one
//! transaction that commits only after the last line, so memory stays bounded by the batch size
//! while a bad line anywhere leaves the table exactly as it was (`ops::publish`, shared with
//! `bench` and `demo`).

use std::io::{BufReader, Read};
use std::time::{Duration, Instant};

use serde_json::value::RawValue;
use serde_json::{Map, Value};

use crate::cli::PublishArgs;
use crate::config::DbConfig;
use crate::db::{self, publish::NewEvent};
use crate::exit::CodedError;
use crate::ops::new_event::{build, micros, payload_arg};
use crate::ops::publish::{
    publish_lines, rejected_input, Batches, PublishJson, PublishReport, PublishedEvent, Spill,
};
use crate::output;

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
            let mut conn = db::connect_migrated(&cfg).await?;
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
            let mut conn = db::connect_migrated(&cfg).await?;
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

/// The single event described by the flags.
fn event_from_flags(args: &PublishArgs) -> Result<NewEvent, CodedError> {
    let raw = args.payload.as_deref().unwrap_or_default();
    let text = payload_arg(raw)?;
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
pub fn json_outputs() -> Vec<crate::schema::Output> {
    vec![crate::schema::Output::of::<PublishJson>(
        "publish --json",
        "The same shape for one event from flags and for a `--file` of many.",
    )]
}
