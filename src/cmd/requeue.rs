//! `outboxctl requeue`: send dead-lettered events again.
//!
//! The selection is resolved once into ids (so `--dry-run` shows exactly what a real run would
//! take), then requeued in batches. Each batch is one statement that locks the rows, re-checks
//! they are still dead, resets them and writes the audit rows: a concurrent requeue, discard or
//! relay cannot make a row be requeued twice or lose an update.

use crate::cli::RequeueArgs;
use crate::config::DbConfig;
use crate::db;
use crate::ops::batch::{self, DeadReport};
use crate::ops::change::delay_micros;
use crate::ops::select::select_dead;
use crate::output;
use crate::select::{EventFilter, Selection};

pub async fn run(args: RequeueArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args_pooled(&args.db)?;
    let filter = EventFilter::from_args(&args.target.filter)?;
    let selection = Selection::resolve(&args.target.ids, filter, args.all, "requeue")?;
    let delay_micros = delay_micros(args.delay)?;
    let audit = crate::ops::audit::audit(&args.change.audit, args.reason.as_deref())?;
    let mut conn = db::conn_migrated_through(&cfg, db::migrate::AUDIT_SCHEMA).await?;
    let pin = db::Pin::new(&cfg, &[]);
    let ids = pin
        .run(&mut conn, async |c| {
            select_dead(c, &selection, args.limit, "requeue").await
        })
        .await?;
    let plan = batch::Plan {
        words: REQUEUE,
        rows: batch::Rows::Dead,
        dry_run: args.change.preview.dry_run,
        confirm: None,
        json: args.change.output.json,
        batch_size: args.batch_size,
        dry_detail: format!(
            ", due {}, attempts {}",
            match args.delay {
                None => "now".to_owned(),
                Some(d) => format!("in {}", output::human_duration(d)),
            },
            if args.keep_attempts {
                "kept"
            } else {
                "reset to 0"
            }
        ),
    };
    let spec = db::dead::RequeueSpec {
        keep_attempts: args.keep_attempts,
        delay_micros,
    };
    batch::run(
        &plan,
        &pin,
        &mut conn,
        &ids,
        DeadReport::requeued,
        async |c, chunk| Ok(db::dead::requeue(c, chunk, &spec, &audit).await?),
        |t| match (args.delay, t.matched > 0) {
            (Some(d), true) => format!("; due in {}", output::human_duration(d)),
            _ => String::new(),
        },
    )
    .await
}

/// How `requeue` reads.
const REQUEUE: batch::Words = batch::Words::dead("requeue", "requeued", "requeuing");

/// The `--json` output of `requeue` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    vec![crate::schema::Output::of::<DeadReport>(
        "requeue --json",
        "With `--dry-run`, `events` lists what would be requeued and `ids` is absent.",
    )]
}
