//! `outboxctl requeue`: send dead-lettered events again.
//!
//! The selection is resolved once into ids (so `--dry-run` shows exactly what a real run would
//! take), then requeued in batches. Each batch is one statement that locks the rows, re-checks
//! they are still dead, resets them and writes the audit rows: a concurrent requeue, discard or
//! relay cannot make a row be requeued twice or lose an update.

use std::time::Instant;

use crate::cli::RequeueArgs;
use crate::cmd::dead::{self, Action, BatchReport};
use crate::cmd::view;
use crate::config::{self, DbConfig};
use crate::db::{self, audit::Audit};
use crate::exit::{CodedError, OK};
use crate::output;
use crate::select::{EventFilter, Selection};

pub async fn run(args: RequeueArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args_pooled(&args.db)?;
    let filter = EventFilter::from_args(&args.filter)?;
    let selection = Selection::resolve(&args.ids, filter, args.all, "requeue")?;
    let delay_micros = match args.delay {
        None => 0,
        Some(d) => i64::try_from(d.as_micros())
            .ok()
            .filter(|m| *m < 100 * 365 * 86_400 * 1_000_000)
            .ok_or_else(|| CodedError::usage("--delay is too long; use at most 100 years"))?,
    };
    let reason = match args.reason.as_deref().map(str::trim) {
        Some("") => return Err(CodedError::usage("--reason must not be empty").into()),
        r => r.map(str::to_owned),
    };
    let audit = Audit {
        actor: config::actor(&args.audit)?,
        reason,
    };
    let json = args.output.json;
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, db::migrate::AUDIT_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let pin = db::Pin::new(&cfg, &[]);
    let ids = pin
        .run(&mut conn, async |c| {
            dead::select_dead(c, &selection, args.limit, "requeue").await
        })
        .await?;
    let n = ids.len() as u64;
    let what = output::plural(n, "dead event", "dead events");

    if args.preview.dry_run {
        let rows = pin
            .run(&mut conn, async |c| dead::rows_of(c, &ids).await)
            .await?;
        if json {
            output::print_json(&BatchReport {
                dry_run: true,
                matched: n,
                requeued: Some(0),
                discarded: None,
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
                "would requeue {what}, due {}, attempts {} (dry run: nothing changed)",
                match args.delay {
                    None => "now".to_owned(),
                    Some(d) => format!("in {}", output::human_duration(d)),
                },
                if args.keep_attempts {
                    "kept"
                } else {
                    "reset to 0"
                }
            ))?;
        }
        return Ok(OK);
    }

    let started = Instant::now();
    let spec = db::dead::RequeueSpec {
        keep_attempts: args.keep_attempts,
        delay_micros,
    };
    let done = dead::apply(
        &pin,
        &mut conn,
        &ids,
        args.batch_size,
        Action::Requeue(spec),
        &audit,
        json,
    )
    .await?;
    let report = BatchReport {
        dry_run: false,
        matched: n,
        requeued: Some(done.ids.len() as u64),
        discarded: None,
        skipped: n - done.ids.len() as u64,
        batches: done.batches,
        elapsed_ms: started.elapsed().as_millis() as u64,
        ids: Some(done.ids),
        events: None,
    };
    if json {
        output::print_json(&report)?;
    } else {
        let mut line = dead::summary("requeued", &report, report.requeued.unwrap_or(0));
        if let (Some(d), true) = (args.delay, report.matched > 0) {
            line.push_str(&format!("; due in {}", output::human_duration(d)));
        }
        output::print_summary(format_args!("{line}"))?;
    }
    Ok(OK)
}

/// The `--json` output of `requeue` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::docs::json::Output> {
    vec![crate::docs::json::Output::of::<BatchReport<'static>>(
        "requeue --json",
        "With `--dry-run`, `events` lists what would be requeued and `ids` is absent.",
    )]
}
