//! `outboxctl events list|show|cancel|reschedule`: any event, in any state (seed 003: events stay
//! readable, changeable and deletable after they are written and before they are handled).
//!
//! `cancel` and `reschedule` by ids are all-or-nothing: inside one transaction they lock the rows
//! with `FOR UPDATE SKIP LOCKED` (a row locked by someone else is a relay publishing it right
//! now), check every row's state under that lock, and change either all of them or none. The
//! statement that changes them re-checks the state too. By filters (the shared `FilterArgs` plus
//! `--state`) they select the matching ids first and then act in short batches, each one
//! statement that re-checks the state (and the `--state` list), skipping rows that moved on.
//! `edit` lives in `cmd::edit`; both share the locking and refusals in `cmd::change`.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Connection;

use crate::cli::{
    CancelArgs, EventsArgs, EventsCommand, EventsListArgs, FilterArgs, RescheduleArgs, ShowArgs,
    StateArg,
};
use crate::cmd::change::{
    cancel_refusal, id_list, lock, peek, refusal_error, refusals, reschedule_refusal, sorted_ids,
    Refusal,
};
use crate::cmd::{dead, view};
use crate::config::{self, DbConfig};
use crate::db::{self, audit::Audit, events::EventState, events::Scope};
use crate::exit::{CodedError, FAILURE, OK};
use crate::output;
use crate::select::EventFilter;

pub async fn run(args: EventsArgs) -> anyhow::Result<u8> {
    match args.command {
        EventsCommand::List(a) => list(a).await,
        EventsCommand::Show(a) => show(a.show).await,
        EventsCommand::Cancel(a) => cancel(a).await,
        EventsCommand::Reschedule(a) => reschedule(a).await,
        EventsCommand::Edit(a) => crate::cmd::edit::run(a).await,
    }
}

/// The states `--state` names, `pending` expanded; empty means all.
pub fn states_of(args: &[StateArg]) -> Vec<EventState> {
    let mut out = Vec::new();
    for a in args {
        let add: &[EventState] = match a {
            StateArg::Ready => &[EventState::Ready],
            StateArg::Scheduled => &[EventState::Scheduled],
            StateArg::InFlight => &[EventState::InFlight],
            StateArg::Published => &[EventState::Published],
            StateArg::Dead => &[EventState::Dead],
            StateArg::Pending => &[
                EventState::Ready,
                EventState::Scheduled,
                EventState::InFlight,
            ],
        };
        for s in add {
            if !out.contains(s) {
                out.push(*s);
            }
        }
    }
    out
}

async fn list(args: EventsListArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let filter = EventFilter::from_args(&args.filter)?;
    let states = states_of(&args.state);
    let pool = db::pool_migrated(&cfg, 1).await?;
    let mut conn = pool.acquire().await?;
    dead::check_filter(&mut conn, &filter).await?;
    view::print_list(
        &mut conn,
        Scope::States(&states),
        &filter,
        args.list.limit,
        args.output.json,
        "no events match",
        view::EVENTS_TABLE,
        &Default::default(),
    )
    .await?;
    Ok(OK)
}

async fn show(args: ShowArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let pool = db::pool_migrated(&cfg, 1).await?;
    let mut conn = pool.acquire().await?;
    let Some(event) = db::events::get(&mut conn, args.id).await? else {
        return Err(dead::missing(&mut conn, args.id, cfg.schema.name())
            .await?
            .into());
    };
    let (requeues, audit) = dead::history(&mut conn, event.id).await?;
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

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct CancelReport<'a> {
    dry_run: bool,
    /// Deleted (with --dry-run: would be deleted).
    cancelled: &'a [i64],
    refused: &'a [Refusal],
}

async fn cancel(args: CancelArgs) -> anyhow::Result<u8> {
    let cancellable: &[EventState] = if args.force {
        &[
            EventState::Ready,
            EventState::Scheduled,
            EventState::Dead,
            EventState::InFlight,
        ]
    } else {
        &[EventState::Ready, EventState::Scheduled, EventState::Dead]
    };
    if let Some(target) = by_filter(
        &args.ids,
        &args.filter,
        &args.state,
        cancellable,
        |s| match s {
            EventState::Published => {
                "published events cannot be cancelled (`outboxctl prune` removes published history)"
            }
            _ => "in-flight events are cancelled only with --force",
        },
    )? {
        return cancel_by_filter(args, target).await;
    }
    let cfg = DbConfig::from_args(&args.db)?;
    let ids = sorted_ids(&args.ids);
    let json = args.output.json;
    let audit = Audit {
        actor: config::actor(&args.audit)?,
        reason: None,
    };
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, db::migrate::AUDIT_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let report = |cancelled: &[i64], refused: &[Refusal], dry_run: bool| -> anyhow::Result<()> {
        if json {
            output::print_json(&CancelReport {
                dry_run,
                cancelled,
                refused,
            })?;
        }
        Ok(())
    };

    let seen = peek(&mut conn, &ids).await?;
    let refused = refusals(&ids, &seen, |s| cancel_refusal(s, args.force));
    if !refused.is_empty() {
        report(&[], &refused, args.preview.dry_run)?;
        return Err(refusal_error("cancel", &refused).into());
    }
    let what = output::plural(ids.len() as u64, "event", "events");
    if args.preview.dry_run {
        report(&ids, &[], true)?;
        if !json {
            output::print_summary(format_args!(
                "would cancel {what}: {} (dry run: nothing changed)",
                id_list(&ids)
            ))?;
        }
        return Ok(OK);
    }
    if !crate::confirm::confirm(
        args.confirm.yes,
        &format!("cancel (delete) {what} ({})?", id_list(&ids)),
    )? {
        output::eprint_line("aborted; nothing was changed");
        return Ok(FAILURE);
    }

    let mut tx = conn.begin().await?;
    let seen = lock(&mut tx, &ids).await?;
    let refused = refusals(&ids, &seen, |s| cancel_refusal(s, args.force));
    if !refused.is_empty() {
        tx.rollback().await?;
        report(&[], &refused, false)?;
        return Err(refusal_error("cancel", &refused).into());
    }
    let mut deleted =
        db::events::delete_unpublished(&mut tx, &ids, args.force, None, &audit).await?;
    deleted.sort_unstable();
    if deleted != ids {
        tx.rollback().await?;
        anyhow::bail!(
            "the events changed while they were being cancelled; nothing was changed, try again"
        );
    }
    tx.commit().await?;
    report(&deleted, &[], false)?;
    if !json {
        output::print_summary(format_args!("cancelled {what}: {}", id_list(&deleted)))?;
    }
    Ok(OK)
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct Moved {
    id: i64,
    /// The new due time; with --dry-run and --delay unknown until it runs (null).
    available_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct RescheduleReport<'a> {
    dry_run: bool,
    /// Moved, with their new due time (with --dry-run: would be moved).
    rescheduled: &'a [Moved],
    refused: &'a [Refusal],
}

async fn reschedule(args: RescheduleArgs) -> anyhow::Result<u8> {
    let delay_micros = match args.delay {
        None => 0,
        Some(d) => i64::try_from(d.as_micros())
            .ok()
            .filter(|m| *m < 100 * 365 * 86_400 * 1_000_000)
            .ok_or_else(|| CodedError::usage("--delay is too long; use at most 100 years"))?,
    };
    if let Some(target) = by_filter(
        &args.ids,
        &args.filter,
        &args.state,
        &[EventState::Ready, EventState::Scheduled],
        |s| match s {
            EventState::Dead => "dead events are sent again with `outboxctl requeue --delay`",
            EventState::Published => "published events cannot be rescheduled",
            _ => "in-flight events can be rescheduled once the attempt is over",
        },
    )? {
        return reschedule_by_filter(args, target, delay_micros).await;
    }
    let cfg = DbConfig::from_args(&args.db)?;
    let ids = sorted_ids(&args.ids);
    let json = args.output.json;
    let audit = Audit {
        actor: config::actor(&args.audit)?,
        reason: None,
    };
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, db::migrate::AUDIT_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let report = |moved: &[Moved], refused: &[Refusal], dry_run: bool| -> anyhow::Result<()> {
        if json {
            output::print_json(&RescheduleReport {
                dry_run,
                rescheduled: moved,
                refused,
            })?;
        }
        Ok(())
    };
    let target = match (args.at, args.delay) {
        (Some(at), _) => view::time(Some(at)),
        (None, Some(d)) => format!("now + {}", output::human_duration(d)),
        (None, None) => unreachable!("clap requires --at or --delay"),
    };

    let seen = peek(&mut conn, &ids).await?;
    let refused = refusals(&ids, &seen, reschedule_refusal);
    if !refused.is_empty() {
        report(&[], &refused, args.preview.dry_run)?;
        return Err(refusal_error("reschedule", &refused).into());
    }
    let what = output::plural(ids.len() as u64, "event", "events");
    if args.preview.dry_run {
        let would: Vec<Moved> = ids
            .iter()
            .map(|id| Moved {
                id: *id,
                available_at: args.at,
            })
            .collect();
        if json {
            report(&would, &[], true)?;
        } else {
            output::print_summary(format_args!(
                "would reschedule {what} to {target}: {} (dry run: nothing changed)",
                id_list(&ids)
            ))?;
        }
        return Ok(OK);
    }

    let mut tx = conn.begin().await?;
    let seen = lock(&mut tx, &ids).await?;
    let refused = refusals(&ids, &seen, reschedule_refusal);
    if !refused.is_empty() {
        tx.rollback().await?;
        report(&[], &refused, false)?;
        return Err(refusal_error("reschedule", &refused).into());
    }
    let mut moved =
        db::events::reschedule(&mut tx, &ids, args.at, delay_micros, None, &audit).await?;
    moved.sort_unstable_by_key(|m| m.0);
    if moved.iter().map(|m| m.0).collect::<Vec<_>>() != ids {
        tx.rollback().await?;
        anyhow::bail!(
            "the events changed while they were being rescheduled; nothing was changed, try again"
        );
    }
    tx.commit().await?;
    let moved: Vec<Moved> = moved
        .into_iter()
        .map(|(id, at)| Moved {
            id,
            available_at: Some(at),
        })
        .collect();
    report(&moved, &[], false)?;
    if !json {
        let due = moved
            .first()
            .map(|m| view::time(m.available_at))
            .unwrap_or_default();
        output::print_summary(format_args!(
            "rescheduled {what} to {due}: {}",
            id_list(&ids)
        ))?;
    }
    Ok(OK)
}

/// `cancel` / `reschedule` by filters: the validated filter and the states to act on.
#[derive(Debug, Clone, PartialEq)]
pub struct ByFilter {
    pub filter: EventFilter,
    pub states: Vec<EventState>,
}

/// Ids or filters: `None` for ids (the all-or-nothing path), the filter otherwise. `allowed` are
/// the states the command may act on (also the default for no --state); `why_not` explains a
/// --state outside them.
pub fn by_filter(
    ids: &[i64],
    filter: &FilterArgs,
    state: &[StateArg],
    allowed: &[EventState],
    why_not: impl Fn(EventState) -> &'static str,
) -> Result<Option<ByFilter>, CodedError> {
    let filter = EventFilter::from_args(filter)?;
    let filtered = !filter.is_empty() || !state.is_empty();
    match (ids.is_empty(), filtered) {
        (false, false) => return Ok(None),
        (false, true) => {
            return Err(CodedError::usage(
                "give either event ids or filters (--state, --event-type, ...), not both",
            ))
        }
        (true, false) => {
            return Err(CodedError::usage(
                "nothing selected: give event ids, or filters (e.g. --event-type, --tenant, \
                 --aggregate-id, --since, --state)",
            ))
        }
        (true, true) => {}
    }
    let mut states = states_of(state);
    if let Some(bad) = states.iter().find(|s| !allowed.contains(s)) {
        // `pending` includes in-flight: drop it quietly where it is not allowed.
        if !(state.contains(&StateArg::Pending)
            && *bad == EventState::InFlight
            && !state.contains(&StateArg::InFlight))
        {
            return Err(CodedError::usage(format!(
                "--state {bad}: {}",
                why_not(*bad)
            )));
        }
    }
    states.retain(|s| allowed.contains(s));
    if states.is_empty() {
        states = allowed.to_vec();
    }
    Ok(Some(ByFilter { filter, states }))
}

/// What `cancel` and `reschedule` print with --json when they select by filters.
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct FilterReport<'a> {
    /// Run with `--dry-run`: nothing was changed.
    dry_run: bool,
    /// Events the filters selected.
    matched: u64,
    /// Cancelled (deleted) or rescheduled; with --dry-run 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    cancelled: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    rescheduled: Option<u64>,
    /// Selected, but no longer in a state to act on when their batch ran.
    skipped: u64,
    /// Statements (transactions) it took.
    batches: u64,
    /// Milliseconds the run took.
    elapsed_ms: u64,
    /// The ids changed (not with --dry-run).
    #[serde(skip_serializing_if = "Option::is_none")]
    ids: Option<Vec<i64>>,
    /// With --dry-run: exactly the events that would change.
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<&'a [db::events::EventRow]>,
}

/// The rows of `ids`, newest first, for a dry run.
async fn rows_of(
    conn: &mut sqlx::PgConnection,
    ids: &[i64],
) -> anyhow::Result<Vec<db::events::EventRow>> {
    let mut rows = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(10_000) {
        rows.extend(
            db::events::list(
                conn,
                Scope::States(&[]),
                &EventFilter::default(),
                Some(chunk),
                None,
            )
            .await?,
        );
    }
    Ok(rows)
}

/// "cancelled 3 events in 1 batch in 12ms" (+ skipped ones).
fn filter_summary(verb: &str, r: &FilterReport<'_>, done: u64) -> String {
    if r.matched == 0 {
        return format!("no events match; nothing {verb}");
    }
    let mut s = format!(
        "{verb} {} in {} in {}",
        output::plural(done, "event", "events"),
        output::plural(r.batches, "batch", "batches"),
        output::human_duration(std::time::Duration::from_millis(r.elapsed_ms))
    );
    if r.skipped > 0 {
        s.push_str(&format!(
            "; skipped {} that changed state meanwhile",
            output::plural(r.skipped, "event", "events")
        ));
    }
    s
}

/// Which command acts in batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BatchVerb {
    Cancel,
    Reschedule,
}

impl BatchVerb {
    fn as_str(self) -> &'static str {
        match self {
            BatchVerb::Cancel => "cancel",
            BatchVerb::Reschedule => "reschedule",
        }
    }
}

/// Selects by filters and prints a dry run, or asks; `Ok(Err(code))` ends the command there.
async fn select_for_batches(
    conn: &mut sqlx::PgConnection,
    target: &ByFilter,
    limit: Option<u64>,
    dry_run: bool,
    yes: bool,
    json: bool,
    verb: BatchVerb,
) -> anyhow::Result<Result<Vec<i64>, u8>> {
    let would = verb.as_str();
    dead::check_filter(conn, &target.filter).await?;
    let ids = db::events::matching_ids(conn, Scope::States(&target.states), &target.filter, limit)
        .await?;
    let n = ids.len() as u64;
    let what = output::plural(n, "event", "events");
    if dry_run {
        let rows = rows_of(conn, &ids).await?;
        if json {
            let verb_cancel = verb == BatchVerb::Cancel;
            output::print_json(&FilterReport {
                dry_run: true,
                matched: n,
                cancelled: verb_cancel.then_some(0),
                rescheduled: (!verb_cancel).then_some(0),
                skipped: 0,
                batches: 0,
                elapsed_ms: 0,
                ids: None,
                events: Some(&rows),
            })?;
        } else {
            if !rows.is_empty() {
                view::print_events_table(&rows)?;
            }
            output::print_summary(format_args!(
                "would {would} {what} (dry run: nothing changed)"
            ))?;
        }
        return Ok(Err(OK));
    }
    if n > 0 && !crate::confirm::confirm(yes, &format!("{would} {what}?"))? {
        output::eprint_line("aborted; nothing was changed");
        return Ok(Err(FAILURE));
    }
    Ok(Ok(ids))
}

/// What a by-filter run selected, ready to act on in batches.
struct Selected {
    conn: sqlx::pool::PoolConnection<sqlx::Postgres>,
    ids: Vec<i64>,
    audit: Audit,
}

/// The flags of a by-filter run that decide what is selected and whether to go on.
struct BatchOpts {
    limit: Option<u64>,
    dry_run: bool,
    yes: bool,
    json: bool,
}

/// Connects, checks the schema, and selects (and confirms) the rows a by-filter run acts on;
/// `Err(code)` when the run ends there (dry run, nothing matched, declined).
async fn select_by_filter(
    db_args: &crate::cli::DatabaseArgs,
    audit: &crate::cli::AuditArgs,
    target: &ByFilter,
    o: BatchOpts,
    verb: BatchVerb,
) -> anyhow::Result<Result<Selected, u8>> {
    let cfg = DbConfig::from_args(db_args)?;
    let audit = Audit {
        actor: config::actor(audit)?,
        reason: None,
    };
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, db::migrate::AUDIT_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    Ok(
        select_for_batches(&mut conn, target, o.limit, o.dry_run, o.yes, o.json, verb)
            .await?
            .map(|ids| Selected { conn, ids, audit }),
    )
}

/// Acts on `sel.ids` in id order, `batch_size` per statement (`act` returns the ids its
/// statement changed: the rest had moved on and are skipped), with a progress bar on a terminal.
/// Returns the report without its verb's count.
async fn run_batches<'a>(
    sel: &mut Selected,
    batch_size: u32,
    json: bool,
    label: &'static str,
    mut act: impl AsyncFnMut(&mut sqlx::PgConnection, &[i64], &Audit) -> anyhow::Result<Vec<i64>>,
) -> anyhow::Result<FilterReport<'a>> {
    let started = std::time::Instant::now();
    let mut sorted = sel.ids.clone();
    sorted.sort_unstable();
    let pb = output::progress(Some(sorted.len() as u64), json, label);
    let (mut done, mut batches) = (Vec::with_capacity(sorted.len()), 0u64);
    for chunk in sorted.chunks(batch_size as usize) {
        let changed = act(&mut sel.conn, chunk, &sel.audit).await?;
        batches += 1;
        tracing::info!(batch = batches, rows = changed.len(), "{label}");
        done.extend(changed);
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    done.sort_unstable();
    let n = sel.ids.len() as u64;
    Ok(FilterReport {
        dry_run: false,
        matched: n,
        cancelled: None,
        rescheduled: None,
        skipped: n - done.len() as u64,
        batches,
        elapsed_ms: started.elapsed().as_millis() as u64,
        ids: Some(done),
        events: None,
    })
}

async fn cancel_by_filter(args: CancelArgs, target: ByFilter) -> anyhow::Result<u8> {
    let json = args.output.json;
    let mut sel = match select_by_filter(
        &args.db,
        &args.audit,
        &target,
        BatchOpts {
            limit: args.limit,
            dry_run: args.preview.dry_run,
            yes: args.confirm.yes,
            json,
        },
        BatchVerb::Cancel,
    )
    .await?
    {
        Ok(sel) => sel,
        Err(code) => return Ok(code),
    };
    let states = &target.states;
    let mut report = run_batches(
        &mut sel,
        args.batch_size,
        json,
        "cancelling",
        async |conn, chunk, audit| {
            Ok(
                db::events::delete_unpublished(conn, chunk, args.force, Some(states), audit)
                    .await?,
            )
        },
    )
    .await?;
    let done = report.ids.as_ref().map_or(0, |d| d.len() as u64);
    report.cancelled = Some(done);
    if json {
        output::print_json(&report)?;
    } else {
        output::print_summary(filter_summary("cancelled", &report, done))?;
    }
    Ok(OK)
}

async fn reschedule_by_filter(
    args: RescheduleArgs,
    target: ByFilter,
    delay_micros: i64,
) -> anyhow::Result<u8> {
    let json = args.output.json;
    let mut sel = match select_by_filter(
        &args.db,
        &args.audit,
        &target,
        BatchOpts {
            limit: args.limit,
            dry_run: args.preview.dry_run,
            yes: args.confirm.yes,
            json,
        },
        BatchVerb::Reschedule,
    )
    .await?
    {
        Ok(sel) => sel,
        Err(code) => return Ok(code),
    };
    let states = &target.states;
    let mut due = None;
    let mut report = run_batches(
        &mut sel,
        args.batch_size,
        json,
        "rescheduling",
        async |conn, chunk, audit| {
            let moved =
                db::events::reschedule(conn, chunk, args.at, delay_micros, Some(states), audit)
                    .await?;
            if due.is_none() {
                due = moved.first().map(|m| m.1);
            }
            Ok(moved.into_iter().map(|m| m.0).collect())
        },
    )
    .await?;
    let done = report.ids.as_ref().map_or(0, |d| d.len() as u64);
    report.rescheduled = Some(done);
    if json {
        output::print_json(&report)?;
    } else {
        let mut line = filter_summary("rescheduled", &report, done);
        if let Some(due) = due {
            line.push_str(&format!(" (due {})", view::time(Some(due))));
        }
        output::print_summary(line)?;
    }
    Ok(OK)
}

/// The `--json` outputs of `events` (docs/reference/json.md); `events edit` is in `edit`.
pub fn json_outputs() -> Vec<crate::docs::json::Output> {
    use crate::docs::json::Output;
    vec![
        Output::of::<view::EventList<'static>>("events list --json", "Newest first."),
        Output::of::<view::EventDetail<'static>>("events show --json", ""),
        Output::of::<CancelReport<'static>>("events cancel ID... --json", "By ids."),
        Output::of::<RescheduleReport<'static>>("events reschedule ID... --json", "By ids."),
        Output::of::<FilterReport<'static>>(
            "events cancel --json (filters)",
            "`events cancel` and `events reschedule` selecting by filters (--event-type, \
             --since, ...): `cancelled` or `rescheduled` is present, by command.",
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pending_expands() {
        assert_eq!(
            states_of(&[StateArg::Pending, StateArg::Ready, StateArg::Dead]),
            vec![
                EventState::Ready,
                EventState::Scheduled,
                EventState::InFlight,
                EventState::Dead
            ]
        );
        assert!(states_of(&[]).is_empty());
    }
}
