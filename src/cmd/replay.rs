//! `outboxctl replay`: send published events again, to any sink, changing nothing in the outbox.
//!
//! The flags are resolved and checked first (the selection, the sink), then the selected events
//! are counted by id (so the question, the dry run and the progress bar say exactly how many, and
//! the run sends those: events published meanwhile with a higher id are not part of it), then
//! the run's audit row is written, and [`crate::relay::replay::run`] sends them. Its end is added
//! to the audit row, and a stop names the `--from-id` to resume with.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::cli::ReplayArgs;
use crate::config::DbConfig;
use crate::db::{self, events::EventRow, events::EventState, replay::Range};
use crate::exit::{self, CodedError};
use crate::output;
use crate::relay::replay::{self as engine, ReplayConfig, Stop};
use crate::relay::Backoff;
use crate::select::{EventFilter, Selection};
use crate::when::TimeArg;

/// Events a dry run lists (it counts them all).
const DRY_RUN_LISTED: usize = 100;

/// Ids per statement of the count.
const COUNT_BATCH: i64 = 10_000;

/// What `replay` prints with --json.
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct ReplayReport {
    /// Run with `--dry-run`: nothing was sent.
    dry_run: bool,
    /// The sink, as the logs name it (never a secret).
    sink: String,
    /// The run's audit row (absent with `--dry-run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    audit_id: Option<i64>,
    /// The replay's id: the `outbox-replay-id` header and the ID of fresh keys (this run's audit
    /// id, or the `--replay-id` it continues; absent with `--dry-run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    replay_id: Option<i64>,
    /// Published events selected.
    matched: u64,
    /// The lowest id selected.
    first_id: Option<i64>,
    /// The highest id selected.
    last_id: Option<i64>,
    /// Events the sink took (absent with `--dry-run`).
    #[serde(skip_serializing_if = "Option::is_none")]
    sent: Option<u64>,
    /// Sent with new idempotency keys (`--fresh-keys`).
    fresh_keys: bool,
    /// Why the run stopped before its end: `interrupted`, `outage`, `rejected` or `closed`
    /// (absent when it finished).
    #[serde(skip_serializing_if = "Option::is_none")]
    stopped: Option<String>,
    /// When it stopped: the `--from-id` that sends the rest.
    #[serde(skip_serializing_if = "Option::is_none")]
    resume_from: Option<i64>,
    /// Milliseconds the run took.
    elapsed_ms: u64,
    /// With `--dry-run`: the first 100 events that would be sent, lowest id first.
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<Vec<EventRow>>,
}

pub async fn run(args: ReplayArgs) -> anyhow::Result<u8> {
    let started = Instant::now();
    // Not through transaction pooling (`--pooler transaction` is refused, exit 2): untested there.
    let cfg = DbConfig::from_args(&args.db)?;
    let filter = EventFilter::from_args(&args.target.filter)?;
    let selection = Selection::resolve_among(
        &args.target.ids,
        filter.clone(),
        args.all,
        "replay",
        "published",
    )?;
    let audit = crate::ops::audit::audit(&args.change.audit, args.reason.as_deref())?;
    if args.backoff.backoff_base > args.backoff.backoff_max {
        return Err(CodedError::usage("--backoff-base must not exceed --backoff-max").into());
    }
    let env = |k: &str| std::env::var(k).ok();
    let sink = crate::ops::sink::build(
        &args.sink,
        &args.sink_options,
        &args.format,
        &cfg,
        args.publish_timeout(),
        env,
    )
    .await?;
    let sink_name = sink.describe();
    let sink_is_stdout =
        crate::sink::Scheme::of(args.sink.spec()) == Some(crate::sink::Scheme::Stdout);
    let json = args.change.output.json;

    let mut conn = db::conn_migrated_through(&cfg, db::migrate::REPLAY_SCHEMA).await?;
    let pin = db::Pin::new(&cfg, &[]);
    let ids: Option<&[i64]> = match &selection {
        Selection::Ids(ids) => {
            check_published(&pin, &mut conn, ids).await?;
            Some(ids)
        }
        Selection::Filter(f) => {
            pin.run(&mut conn, async |c| {
                crate::ops::select::check_filter(c, f).await
            })
            .await?;
            None
        }
        Selection::All => None,
    };
    if let Some(id) = args.replay_id {
        let known = pin
            .run(&mut conn, async |c| db::replay::is_replay(c, id).await)
            .await?;
        if !known {
            return Err(CodedError::usage(format!(
                "--replay-id {id}: no replay has that audit id (see `outboxctl replay`'s resume hint)"
            ))
            .into());
        }
    }
    let filter = match &selection {
        Selection::Filter(f) => f.clone(),
        _ => EventFilter::default(),
    };
    let after = args.from_id.map_or(0, |f| f - 1);
    let counted = count(&pin, &mut conn, &filter, ids, after, args.limit).await?;
    let range = Range {
        filter: &filter,
        ids,
        after,
        upto: counted.last.unwrap_or(after),
    };
    let what = output::plural(counted.n, "published event", "published events");

    if args.change.preview.dry_run {
        let mut rows = pin
            .run(&mut conn, async |c| {
                db::events::list(
                    c,
                    db::events::Scope::States(&[]),
                    &EventFilter::default(),
                    Some(&counted.listed),
                    None,
                )
                .await
            })
            .await?;
        rows.sort_by_key(|r| r.id);
        if json {
            print_report(
                &ReplayReport {
                    dry_run: true,
                    sink: sink_name,
                    audit_id: None,
                    replay_id: None,
                    matched: counted.n,
                    first_id: counted.first,
                    last_id: counted.last,
                    sent: None,
                    fresh_keys: args.fresh_keys,
                    stopped: None,
                    resume_from: None,
                    elapsed_ms: started.elapsed().as_millis() as u64,
                    events: Some(rows),
                },
                false,
            )?;
        } else {
            if !rows.is_empty() {
                crate::ops::view::print_events_table(&rows)?;
                if (rows.len() as u64) < counted.n {
                    crate::ops::view::note_truncated(rows.len());
                }
            }
            output::print_summary(format_args!(
                "would replay {what}{} to {sink_name}{} (dry run: nothing sent)",
                id_span(&counted),
                if args.fresh_keys {
                    " with fresh keys"
                } else {
                    ""
                }
            ))?;
        }
        return Ok(exit::OK);
    }
    if counted.n == 0 {
        if json {
            print_report(
                &ReplayReport {
                    dry_run: false,
                    sink: sink_name,
                    audit_id: None,
                    replay_id: None,
                    matched: 0,
                    first_id: None,
                    last_id: None,
                    sent: Some(0),
                    fresh_keys: args.fresh_keys,
                    stopped: None,
                    resume_from: None,
                    elapsed_ms: started.elapsed().as_millis() as u64,
                    events: None,
                },
                sink_is_stdout,
            )?;
        } else {
            summary(
                "no published events match; nothing replayed",
                sink_is_stdout,
            )?;
        }
        return Ok(exit::OK);
    }
    if !crate::confirm::confirm(
        args.change.confirm.yes,
        &format!("replay {what} to {sink_name}?"),
    )? {
        output::eprint_line("aborted; nothing was sent");
        return Ok(exit::FAILURE);
    }

    let details = json!({
        "sink": sink_name,
        "selection": selection_json(&args, &selection),
        "from_id": args.from_id,
        "limit": args.limit,
        "fresh_keys": args.fresh_keys,
        "continues": args.replay_id,
        "rate_per_second": args.rate,
        "matched": counted.n,
        "first_id": counted.first,
        "last_id": counted.last,
    });
    let audit_id = pin
        .run(&mut conn, async |c| {
            db::replay::begin_audit(c, &audit, &details).await
        })
        .await?;
    let replay_id = args.replay_id.unwrap_or(audit_id);
    let marker = engine::marker_headers(replay_id);
    let marking = db::replay::Marking {
        headers: &marker,
        original_key_header: args.fresh_keys.then_some(engine::ORIGINAL_KEY_HEADER),
    };
    let rcfg = ReplayConfig {
        batch_size: args.batch_size,
        batch_bytes: args.batch_bytes,
        concurrency: args.concurrency,
        publish_timeout: args.publish_timeout(),
        backoff: Backoff {
            base: args.backoff.backoff_base,
            max: args.backoff.backoff_max,
        },
        retry_for: args.retry_for,
        rate: args.rate,
        replay_id,
        fresh_keys: args.fresh_keys,
    };
    let shutdown = CancellationToken::new();
    // Every event of the range below this id was taken by the sink: what a second signal's
    // message names, as the engine reports it after each wave.
    let resume_from = Arc::new(AtomicI64::new(range.after + 1));
    // Stop at the next event not yet handed over (publishes in flight finish within
    // --publish-timeout). A second signal exits at once, with the resume point of the last wave
    // the sink finished (the audit row keeps the count of the start).
    let second = {
        let resume_from = Arc::clone(&resume_from);
        move || {
            let from = resume_from.load(Ordering::SeqCst);
            tracing::error!(
                "replay interrupted again, events in flight abandoned; resume with --from-id {from} --replay-id {replay_id}"
            )
        }
    };
    crate::ops::signals::stop_on_signals(
        shutdown.clone(),
        None,
        || tracing::info!("replay: stopping at the next event (a second signal exits at once)"),
        second,
    )?;
    tracing::info!(sink = %sink_name, audit_id, replay_id, events = counted.n, "replay starting");
    let pb = output::progress(Some(counted.n), json, "replaying");
    let on_sent = |n: u64, resume: i64| {
        pb.inc(n);
        resume_from.store(resume, Ordering::SeqCst);
    };
    let ended = engine::run(
        &mut conn,
        &pin,
        sink.as_ref(),
        &rcfg,
        range,
        &marking,
        &shutdown,
        &on_sent,
    )
    .await;
    pb.finish_and_clear();
    let elapsed_ms = started.elapsed().as_millis() as u64;
    let ended = match ended {
        Ok(e) => e,
        Err(e) => {
            // The database failed mid-run: record what is known, if it still answers.
            let _ = pin
                .run(&mut conn, async |c| {
                    db::replay::end_audit(c, audit_id, &json!({"stop_reason": "database"})).await
                })
                .await;
            return Err(e);
        }
    };
    let (stop, resume_from) = match &ended.stopped {
        Some((s, at)) => (Some(s), Some(*at)),
        None => (None, None),
    };
    let end = json!({
        "sent": ended.sent,
        "stop_reason": stop.map_or("done", Stop::as_str),
        "resume_from": resume_from,
        "elapsed_ms": elapsed_ms,
    });
    pin.run(&mut conn, async |c| {
        db::replay::end_audit(c, audit_id, &end).await
    })
    .await?;

    let report = ReplayReport {
        dry_run: false,
        sink: sink_name.clone(),
        audit_id: Some(audit_id),
        replay_id: Some(replay_id),
        matched: counted.n,
        first_id: counted.first,
        last_id: counted.last,
        sent: Some(ended.sent),
        fresh_keys: args.fresh_keys,
        stopped: stop.map(|s| s.as_str().to_owned()),
        resume_from,
        elapsed_ms,
        events: None,
    };
    if json {
        print_report(&report, sink_is_stdout)?;
    } else if stop.is_none() {
        summary(
            &format!(
                "replayed {what}{} to {sink_name} in {} (audit id {audit_id}{})",
                id_span(&counted),
                output::human_duration(std::time::Duration::from_millis(elapsed_ms)),
                if args.fresh_keys {
                    format!(", fresh keys KEY:replay:{replay_id}")
                } else {
                    String::new()
                }
            ),
            sink_is_stdout,
        )?;
    }
    let Some((stop, at)) = ended.stopped else {
        return Ok(exit::OK);
    };
    let resume = format!("--from-id {at} --replay-id {replay_id}");
    let of = output::plural(counted.n, "event", "events");
    Err(match stop {
        Stop::Interrupted => CodedError {
            code: exit::INTERRUPTED,
            message: format!(
                "replay interrupted: replayed {} of {of} to {sink_name}; resume with {resume}",
                ended.sent
            ),
        }
        .into(),
        Stop::Outage { cause } => crate::sink::Error::ReplayStopped {
            sink: sink_name,
            stopped: format!(
                "kept failing for {}: {cause}",
                humantime::format_duration(args.retry_for)
            ),
            sent: ended.sent,
            matched: of,
            resume,
        }
        .into(),
        Stop::Rejected { id, cause } => crate::sink::Error::ReplayStopped {
            sink: sink_name,
            stopped: format!(
                "rejected event {id} for good: {cause}{}",
                if id == at {
                    format!(
                        " (fix the sink or the event, or skip it with --from-id {})",
                        id + 1
                    )
                } else {
                    String::new()
                }
            ),
            sent: ended.sent,
            matched: of,
            resume,
        }
        .into(),
        Stop::Closed { cause } => crate::sink::Error::ReplayStopped {
            sink: sink_name,
            stopped: format!("stopped taking events: {cause}"),
            sent: ended.sent,
            matched: of,
            resume,
        }
        .into(),
    })
}

/// What the count found.
struct Counted {
    n: u64,
    first: Option<i64>,
    last: Option<i64>,
    /// The first ids, for a dry run's list.
    listed: Vec<i64>,
}

/// Counts the selected events in batches of ids (no payload read, no long snapshot), at most
/// `limit`.
async fn count(
    pin: &db::Pin,
    conn: &mut sqlx::PgConnection,
    filter: &EventFilter,
    ids: Option<&[i64]>,
    after: i64,
    limit: Option<u64>,
) -> anyhow::Result<Counted> {
    let mut c = Counted {
        n: 0,
        first: None,
        last: None,
        listed: Vec::new(),
    };
    let mut range = Range {
        filter,
        ids,
        after,
        upto: i64::MAX,
    };
    loop {
        let left = limit.map_or(u64::MAX, |l| l - c.n);
        let n = COUNT_BATCH.min(i64::try_from(left).unwrap_or(i64::MAX));
        if n == 0 {
            break;
        }
        let batch = pin
            .run(conn, async |conn| db::replay::ids(conn, &range, n).await)
            .await?;
        let Some(&last) = batch.last() else { break };
        c.first = c.first.or(batch.first().copied());
        c.last = Some(last);
        c.n += batch.len() as u64;
        let room = DRY_RUN_LISTED.saturating_sub(c.listed.len());
        c.listed.extend(batch.iter().take(room));
        range.after = last;
    }
    Ok(c)
}

/// Explicit ids must all be published events still in the table; else nothing is sent.
async fn check_published(
    pin: &db::Pin,
    conn: &mut sqlx::PgConnection,
    ids: &[i64],
) -> anyhow::Result<()> {
    let states = pin
        .run(conn, async |c| db::events::states(c, ids).await)
        .await?;
    let problems = crate::ops::select::not_in_state(
        ids,
        &states,
        EventState::Published,
        " (never existed, or pruned)",
        "published",
    );
    if problems.is_empty() {
        return Ok(());
    }
    Err(CodedError::usage(format!(
        "cannot replay: {}; nothing was sent",
        output::list_some(&problems)
    ))
    .into())
}

/// " (ids 3 to 97)", or "" when none.
fn id_span(c: &Counted) -> String {
    match (c.first, c.last) {
        (Some(a), Some(b)) if a == b => format!(" (id {a})"),
        (Some(a), Some(b)) => format!(" (ids {a} to {b})"),
        _ => String::new(),
    }
}

/// The selection as the audit row records it: the flags as given.
fn selection_json(args: &ReplayArgs, selection: &Selection) -> serde_json::Value {
    let time = |t: &Option<TimeArg>| {
        t.map(|t| match t {
            TimeArg::At(at) => at.to_rfc3339(),
            TimeArg::Ago(d) => format!("{} ago", humantime::format_duration(d)),
        })
    };
    let f = &args.target.filter;
    match selection {
        Selection::Ids(ids) => json!({ "ids": ids }),
        Selection::All => json!({ "all": true }),
        Selection::Filter(_) => {
            let all = json!({
                "event_type": f.event_type,
                "tenant": f.tenant,
                "aggregate_type": f.aggregate_type,
                "aggregate_id": f.aggregate_id,
                "published_since": time(&f.since),
                "published_until": time(&f.until),
                "error": f.error,
                "error_regex": f.error_regex,
            });
            let serde_json::Value::Object(m) = all else {
                unreachable!("an object")
            };
            serde_json::Value::Object(m.into_iter().filter(|(_, v)| !v.is_null()).collect())
        }
    }
}

/// The report on stdout, or on stderr when the sink itself writes to stdout.
fn print_report(r: &ReplayReport, sink_is_stdout: bool) -> anyhow::Result<()> {
    if sink_is_stdout {
        output::eprint_line(serde_json::to_string_pretty(r)?);
        Ok(())
    } else {
        output::print_json(r)
    }
}

/// The summary on stdout, or on stderr when the sink itself writes to stdout.
fn summary(text: &str, sink_is_stdout: bool) -> anyhow::Result<()> {
    if sink_is_stdout {
        output::note(text);
        Ok(())
    } else {
        output::print_summary(text)
    }
}

/// The `--json` output of `replay` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    vec![crate::schema::Output::of::<ReplayReport>(
        "replay --json",
        "With `--dry-run`, `events` lists the first 100 events that would be sent and `sent`, \
         `audit_id` and `replay_id` are absent. Printed on stderr instead when the sink is stdout; \
         also printed when the run stops early (then `stopped` and `resume_from` say why and \
         where to resume).",
    )]
}
