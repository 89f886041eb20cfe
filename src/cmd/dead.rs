//! `outboxctl dead list|show|discard|export`: the events the relay gave up on.
//!
//! Also home of what `requeue` shares with `discard`: resolving a selection into dead ids, and
//! applying an action to them in short batches with a progress bar.

use std::io::Write;
use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::PgConnection;

use crate::cli::{
    DeadArgs, DeadCommand, DeadDiscardArgs, DeadExportArgs, DeadListArgs, ExportFormat, ShowArgs,
};
use crate::cmd::view;
use crate::config::{self, DbConfig};
use crate::db::audit::{Audit, AuditRecord};
use crate::db::{self, events::EventRow, events::EventState, events::Scope};
use crate::exit::{CodedError, FAILURE, OK};
use crate::output;
use crate::select::{EventFilter, Selection};

pub async fn run(args: DeadArgs) -> anyhow::Result<u8> {
    match args.command {
        DeadCommand::List(a) => list(a).await,
        DeadCommand::Show(a) => show(a.show).await,
        DeadCommand::Discard(a) => discard(a).await,
        DeadCommand::Export(a) => export(a).await,
    }
}

async fn list(args: DeadListArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let filter = EventFilter::from_args(&args.filter)?;
    let pool = db::pool_migrated(&cfg, 1).await?;
    let mut conn = pool.acquire().await?;
    check_filter(&mut conn, &filter).await?;
    let blocking = db::ordering::blocking_heads(&mut conn).await?;
    view::print_list(
        &mut conn,
        Scope::Dead,
        &filter,
        args.list.limit,
        args.output.json,
        "no dead-lettered events match",
        view::DEAD_TABLE,
        &blocking,
    )
    .await?;
    Ok(OK)
}

async fn show(args: ShowArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let pool = db::pool_migrated(&cfg, 1).await?;
    let mut conn = pool.acquire().await?;
    let Some(event) = db::events::get(&mut conn, args.id).await? else {
        return Err(missing(&mut conn, args.id, cfg.schema.name()).await?.into());
    };
    if event.state != EventState::Dead {
        return Err(CodedError::usage(format!(
            "event {} is {}, not dead-lettered; see it with `outboxctl events show {}`",
            event.id, event.state, event.id
        ))
        .into());
    }
    let (requeues, audit) = history(&mut conn, event.id).await?;
    if args.output.json {
        output::print_json(&view::EventDetail {
            event: &event,
            requeues: &requeues,
            audit: &audit,
        })?;
    } else {
        view::print_event(&event, &requeues, &audit)?;
    }
    Ok(OK)
}

/// The error for an id that does not exist, saying who deleted it when the audit trail knows.
pub(crate) async fn missing(
    conn: &mut PgConnection,
    id: i64,
    schema: &str,
) -> anyhow::Result<CodedError> {
    let mut err = view::no_such_event(id, schema);
    if db::events::table_exists(conn, "outbox_audit").await? {
        if let Some(a) = db::audit::deletion(conn, id).await? {
            err.message.push_str(&format!(
                ": it was {} at {} by {} (role {})",
                if a.action == "cancel" {
                    "cancelled"
                } else {
                    "discarded"
                },
                view::time(Some(a.at)),
                a.actor.as_deref().unwrap_or("unknown"),
                a.db_role
            ));
        }
    }
    Ok(err)
}

/// The requeue history of an event and its whole audit trail; empty when the schema predates the
/// tables (migration 3 for requeues, 4 for the audit trail).
pub(crate) async fn history(
    conn: &mut PgConnection,
    id: i64,
) -> anyhow::Result<(Vec<db::dead::RequeueRecord>, Vec<AuditRecord>)> {
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

/// What `dead discard` and `requeue` print with --json.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub(crate) struct BatchReport<'a> {
    /// Run with `--dry-run`: nothing was changed.
    pub dry_run: bool,
    /// Dead events selected.
    pub matched: u64,
    /// Requeued or discarded.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requeued: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub discarded: Option<u64>,
    /// Selected, but no longer dead when their batch ran (requeued or discarded by someone else).
    pub skipped: u64,
    /// Statements (transactions) it took.
    pub batches: u64,
    /// Milliseconds the run took.
    pub elapsed_ms: u64,
    /// The ids changed (not with --dry-run).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ids: Option<Vec<i64>>,
    /// With --dry-run: exactly the events that would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<&'a [EventRow]>,
}

async fn discard(args: DeadDiscardArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let filter = EventFilter::from_args(&args.filter)?;
    let selection = Selection::resolve(&args.ids, filter, args.all, "discard")?;
    let audit = Audit {
        actor: config::actor(&args.audit)?,
        reason: None,
    };
    let json = args.output.json;
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, db::migrate::AUDIT_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let ids = select_dead(&mut conn, &selection, args.limit, "discard").await?;
    let n = ids.len() as u64;
    let what = |n: u64| output::plural(n, "dead event", "dead events");

    if args.preview.dry_run {
        let rows = rows_of(&mut conn, &ids).await?;
        if json {
            output::print_json(&BatchReport {
                dry_run: true,
                matched: n,
                requeued: None,
                discarded: Some(0),
                skipped: 0,
                batches: 0,
                elapsed_ms: 0,
                ids: None,
                events: Some(&rows),
            })?;
        } else {
            if !rows.is_empty() {
                view::print_dead_table(&rows)?;
            }
            output::print_summary(format_args!(
                "would discard {} (dry run: nothing changed)",
                what(n)
            ))?;
        }
        return Ok(OK);
    }
    if n > 0 && !crate::confirm::confirm(args.confirm.yes, &format!("discard {}?", what(n)))? {
        output::eprint_line("aborted; nothing was changed");
        return Ok(FAILURE);
    }
    let started = Instant::now();
    let done = apply(
        &db::Pin::default(),
        &mut conn,
        &ids,
        args.batch_size,
        Action::Discard,
        &audit,
        json,
    )
    .await?;
    let report = BatchReport {
        dry_run: false,
        matched: n,
        requeued: None,
        discarded: Some(done.ids.len() as u64),
        skipped: n - done.ids.len() as u64,
        batches: done.batches,
        elapsed_ms: started.elapsed().as_millis() as u64,
        ids: Some(done.ids),
        events: None,
    };
    if json {
        output::print_json(&report)?;
    } else {
        output::print_summary(format_args!(
            "{}",
            summary("discarded", &report, report.discarded.unwrap_or(0))
        ))?;
    }
    Ok(OK)
}

/// "discarded 3 dead events in 1 batch in 12ms" (+ skipped ones).
pub(crate) fn summary(verb: &str, r: &BatchReport<'_>, done: u64) -> String {
    if r.matched == 0 {
        return format!("no dead-lettered events match; nothing {verb}");
    }
    let mut s = format!(
        "{verb} {} in {} in {}",
        output::plural(done, "dead event", "dead events"),
        output::plural(r.batches, "batch", "batches"),
        output::human_duration(Duration::from_millis(r.elapsed_ms))
    );
    if r.skipped > 0 {
        s.push_str(&format!(
            "; skipped {} no longer dead",
            output::plural(r.skipped, "event", "events")
        ));
    }
    s
}

async fn export(args: DeadExportArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let filter = EventFilter::from_args(&args.filter)?;
    if !args.ids.is_empty() && !filter.is_empty() {
        return Err(CodedError::usage("give either event ids or filters, not both").into());
    }
    let pool = db::pool_migrated(&cfg, 1).await?;
    let mut conn = pool.acquire().await?;
    // Explicit ids are checked first (each must exist and be dead); then the rows are streamed
    // from one query, newest dead first, so memory does not grow with the number exported.
    let ids = if args.ids.is_empty() {
        check_filter(&mut conn, &filter).await?;
        None
    } else {
        let selection = Selection::resolve(&args.ids, EventFilter::default(), false, "export")?;
        select_dead(&mut conn, &selection, args.limit, "export").await?;
        Some(args.ids.clone())
    };
    let mut out = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout());
    let written = db::events::for_each(
        &mut conn,
        Scope::Dead,
        &filter,
        ids.as_deref(),
        args.limit,
        |row| {
            // To a buffer first, so a broken pipe stays an io::Error (exit 0 under `| head`).
            let mut line = match args.format {
                ExportFormat::Publish => serde_json::to_vec(&PublishLine::from(&row))?,
                ExportFormat::Full => serde_json::to_vec(&row)?,
            };
            line.push(b'\n');
            out.write_all(&line)?;
            anyhow::Ok(())
        },
    )
    .await?;
    out.flush()?;
    let what = output::plural(written, "dead event", "dead events");
    match args.format {
        ExportFormat::Publish if written > 0 => output::note(format_args!(
            "exported {what}; they keep their idempotency keys, which `publish --file` skips \
             while the rows exist: discard them first (outboxctl dead discard ID...)"
        )),
        _ => output::note(format_args!("exported {what}")),
    }
    Ok(OK)
}

/// One line of `dead export`: exactly the keys `publish --file` accepts, payload and headers as
/// the stored JSON text (so `publish --file` inserts the same digits).
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct PublishLine<'a> {
    event_type: &'a str,
    aggregate_type: &'a str,
    aggregate_id: &'a str,
    tenant_id: uuid::Uuid,
    payload: &'a crate::json::JsonText,
    headers: &'a crate::json::JsonText,
    idempotency_key: &'a str,
}

impl<'a> From<&'a EventRow> for PublishLine<'a> {
    fn from(e: &'a EventRow) -> Self {
        Self {
            event_type: &e.event_type,
            aggregate_type: &e.aggregate_type,
            aggregate_id: &e.aggregate_id,
            tenant_id: e.tenant_id,
            payload: &e.payload,
            headers: &e.headers,
            idempotency_key: &e.idempotency_key,
        }
    }
}

/// Rejects a regular expression PostgreSQL would reject, as bad input (exit code 2).
pub(crate) async fn check_filter(
    conn: &mut PgConnection,
    filter: &EventFilter,
) -> anyhow::Result<()> {
    if let Some(re) = &filter.error_regex {
        if let Some(why) = db::events::check_regex(conn, re).await? {
            return Err(CodedError::usage(format!("invalid --error-regex `{re}`: {why}")).into());
        }
    }
    Ok(())
}

/// The dead ids a selection means, newest dead first. Explicit ids must all exist and be dead,
/// else nothing happens and the error names each offending id.
pub(crate) async fn select_dead(
    conn: &mut PgConnection,
    selection: &Selection,
    limit: Option<u64>,
    verb: &str,
) -> anyhow::Result<Vec<i64>> {
    let none = EventFilter::default();
    match selection {
        Selection::Ids(ids) => {
            let states = db::events::states(conn, ids).await?;
            let problems: Vec<String> = ids
                .iter()
                .filter_map(|id| match states.iter().find(|(i, _)| i == id) {
                    None => Some(format!("no event {id}")),
                    Some((_, EventState::Dead)) => None,
                    Some((_, s)) => Some(format!("event {id} is {s}, not dead-lettered")),
                })
                .collect();
            if !problems.is_empty() {
                return Err(CodedError::usage(format!(
                    "cannot {verb}: {}; nothing was changed",
                    list_some(&problems)
                ))
                .into());
            }
            Ok(db::events::dead_ids(conn, &none, Some(ids), limit).await?)
        }
        Selection::Filter(f) => {
            check_filter(conn, f).await?;
            Ok(db::events::dead_ids(conn, f, None, limit).await?)
        }
        Selection::All => Ok(db::events::dead_ids(conn, &none, None, limit).await?),
    }
}

/// "a; b; c; and 7 more".
pub(crate) fn list_some(items: &[String]) -> String {
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

/// The full rows of `ids` that are still dead, in the order of `ids`' chunks (newest dead first).
pub(crate) async fn rows_of(conn: &mut PgConnection, ids: &[i64]) -> anyhow::Result<Vec<EventRow>> {
    let mut rows = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(10_000) {
        rows.extend(
            db::events::list(
                conn,
                Scope::Dead,
                &EventFilter::default(),
                Some(chunk),
                None,
            )
            .await?,
        );
    }
    Ok(rows)
}

/// What to do with each batch of dead ids.
pub(crate) enum Action {
    Requeue(db::dead::RequeueSpec),
    Discard,
}

pub(crate) struct Applied {
    pub ids: Vec<i64>,
    pub batches: u64,
}

/// Applies `action` to `ids` in batches (ascending id order), one statement and so one short
/// transaction per batch (writing its audit rows too), with a progress bar on a terminal.
pub(crate) async fn apply(
    pin: &db::Pin,
    conn: &mut PgConnection,
    ids: &[i64],
    batch_size: u32,
    action: Action,
    audit: &Audit,
    json: bool,
) -> anyhow::Result<Applied> {
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    let label = match action {
        Action::Requeue(_) => "requeuing",
        Action::Discard => "discarding",
    };
    let pb = output::progress(Some(sorted.len() as u64), json, label);
    let mut done = Vec::with_capacity(sorted.len());
    let mut batches = 0;
    for chunk in sorted.chunks(batch_size as usize) {
        let changed = pin
            .run(conn, async |c| match &action {
                Action::Requeue(spec) => db::dead::requeue(c, chunk, spec, audit).await,
                Action::Discard => db::dead::discard(c, chunk, audit).await,
            })
            .await?;
        batches += 1;
        tracing::info!(batch = batches, rows = changed.len(), "{label}");
        done.extend(changed);
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    done.sort_unstable();
    Ok(Applied { ids: done, batches })
}

/// The `--json` outputs of `dead` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::docs::json::Output> {
    use crate::docs::json::Output;
    vec![
        Output::of::<view::EventList<'static>>("dead list --json", "Newest dead first."),
        Output::of::<view::EventDetail<'static>>("dead show --json", ""),
        Output::lines_of::<PublishLine<'static>>(
            "dead export",
            "JSON lines, always (no `--json`): the keys `publish --file` accepts.",
        ),
        Output::lines_of::<EventRow>(
            "dead export --format full",
            "JSON lines: every column, for analysis.",
        ),
        Output::of::<BatchReport<'static>>(
            "dead discard --json",
            "With `--dry-run`, `events` lists what would be discarded and `ids` is absent.",
        ),
    ]
}
