//! `outboxctl dead list|show|discard|export`: the events the relay gave up on. What `requeue`
//! shares with `discard` (the dead ids a selection means, the batches, the report) is in `ops`.

use std::io::Write;

use serde::Serialize;

use crate::cli::{
    DeadArgs, DeadCommand, DeadDiscardArgs, DeadExportArgs, DeadListArgs, ExportFormat, ShowArgs,
};
use crate::config::{self, DbConfig};
use crate::db::audit::Audit;
use crate::db::{self, events::EventRow, events::Scope};
use crate::exit::{CodedError, OK};
use crate::ops::select::{check_filter, select_dead};
use crate::ops::{batch, view};
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
    let filter = EventFilter::from_args(&args.list.filter)?;
    let (limit, json) = (args.list.limit, args.list.output.json);
    view::list(&cfg, &filter, Scope::Dead, limit, json, view::DEAD_TABLE).await?;
    Ok(OK)
}

async fn show(args: ShowArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    view::show_one(&cfg, args.id, args.output.json, true).await?;
    Ok(OK)
}

async fn discard(args: DeadDiscardArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let filter = EventFilter::from_args(&args.target.filter)?;
    let selection = Selection::resolve(&args.target.ids, filter, args.all, "discard")?;
    let audit = Audit {
        actor: config::actor(&args.change.audit)?,
        reason: None,
    };
    let mut conn = db::conn_migrated_through(&cfg, db::migrate::AUDIT_SCHEMA).await?;
    let ids = select_dead(&mut conn, &selection, args.limit, "discard").await?;
    let plan = batch::Plan {
        words: DISCARD,
        rows: batch::Rows::Dead,
        dry_run: args.change.preview.dry_run,
        confirm: Some(args.change.confirm.yes),
        json: args.change.output.json,
        batch_size: args.batch_size,
        dry_detail: String::new(),
    };
    batch::run(
        &plan,
        &db::Pin::default(),
        &mut conn,
        &ids,
        batch::DeadReport::discarded,
        async |c, chunk| Ok(db::dead::discard(c, chunk, &audit).await?),
        |_| String::new(),
    )
    .await
}

/// How `dead discard` reads.
const DISCARD: batch::Words = batch::Words::dead("discard", "discarded", "discarding");

async fn export(args: DeadExportArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let filter = EventFilter::from_args(&args.target.filter)?;
    if !args.target.ids.is_empty() && !filter.is_empty() {
        return Err(CodedError::usage("give either event ids or filters, not both").into());
    }
    let pool = db::pool_migrated(&cfg, 1).await?;
    let mut conn = pool.acquire().await?;
    // Explicit ids are checked first (each must exist and be dead); then the rows are streamed
    // from one query, newest dead first, so memory does not grow with the number exported.
    let ids = if args.target.ids.is_empty() {
        check_filter(&mut conn, &filter).await?;
        None
    } else {
        let selection =
            Selection::resolve(&args.target.ids, EventFilter::default(), false, "export")?;
        select_dead(&mut conn, &selection, args.limit, "export").await?;
        Some(args.target.ids.clone())
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

/// The `--json` outputs of `dead` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    use crate::schema::Output;
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
        Output::of::<batch::DeadReport>(
            "dead discard --json",
            "With `--dry-run`, `events` lists what would be discarded and `ids` is absent.",
        ),
    ]
}
