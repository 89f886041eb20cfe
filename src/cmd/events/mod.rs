//! `outboxctl events list|show|cancel|reschedule`: any event, in any state (seed 003: events stay
//! readable, changeable and deletable after they are written and before they are handled).
//!
//! `cancel` and `reschedule` by ids are all-or-nothing: inside one transaction they lock the rows
//! with `FOR UPDATE SKIP LOCKED` (a row locked by someone else is a relay publishing it right
//! now), check every row's state under that lock, and change either all of them or none. The
//! statement that changes them re-checks the state too. By filters (the shared `FilterArgs` plus
//! `--state`) they select the matching ids first and then act in short batches, each one
//! statement that re-checks the state (and the `--state` list), skipping rows that moved on.
//! `edit` lives in [`edit`]; both share the locking and refusals in `ops::change`, and the
//! by-filter runs share their batches with `dead discard` and `requeue` in `ops::batch`.

pub mod edit;

use std::cell::Cell;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{pool::PoolConnection, PgConnection, Postgres};

use crate::cli::{
    AuditArgs, ByFilterArgs, ByFilterVars, CancelArgs, ChangeArgs, DatabaseArgs, EventsArgs,
    EventsCommand, EventsListArgs, FilterArgs, RescheduleArgs, ShowArgs, StateArg,
};
use crate::config::{self, DbConfig};
use crate::db::{self, audit::Audit, events::EventState, events::Scope};
use crate::exit::{CodedError, FAILURE, OK};
use crate::ops::batch::{self, FilterReport};
use crate::ops::change::{
    cancel_refusal, commit_all, delay_micros, id_list, lock_all, peek_refusals, refusal_error,
    reschedule_refusal, sorted_ids, Refusal,
};
use crate::ops::select::check_filter;
use crate::ops::view;
use crate::output;
use crate::select::EventFilter;

pub async fn run(args: EventsArgs) -> anyhow::Result<u8> {
    match args.command {
        EventsCommand::List(a) => list(a).await,
        EventsCommand::Show(a) => show(a.show).await,
        EventsCommand::Cancel(a) => cancel(a).await,
        EventsCommand::Reschedule(a) => reschedule(a).await,
        EventsCommand::Edit(a) => edit::run(a).await,
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
    let filter = EventFilter::from_args(&args.list.filter)?;
    let states = states_of(&args.state);
    let (limit, json, kind) = (args.list.limit, args.list.output.json, view::EVENTS_TABLE);
    view::list(&cfg, &filter, Scope::States(&states), limit, json, kind).await?;
    Ok(OK)
}

async fn show(args: ShowArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    view::show_one(&cfg, args.id, args.output.json, false).await?;
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
        &args.target.ids,
        &args.target.filter,
        &args.by_filter.state,
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
    let ids = sorted_ids(&args.target.ids);
    let json = args.change.output.json;
    let (mut conn, audit) = connect(&args.db, &args.change.audit).await?;
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

    let refused = peek_refusals(&mut conn, &ids, |s| cancel_refusal(s, args.force)).await?;
    if !refused.is_empty() {
        report(&[], &refused, args.change.preview.dry_run)?;
        return Err(refusal_error("cancel", &refused).into());
    }
    let what = output::plural(ids.len() as u64, "event", "events");
    if args.change.preview.dry_run {
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
        args.change.confirm.yes,
        &format!("cancel (delete) {what} ({})?", id_list(&ids)),
    )? {
        output::eprint_line("aborted; nothing was changed");
        return Ok(FAILURE);
    }

    let mut tx = match lock_all(&mut conn, &ids, |s| cancel_refusal(s, args.force)).await? {
        Ok(tx) => tx,
        Err(refused) => {
            report(&[], &refused, false)?;
            return Err(refusal_error("cancel", &refused).into());
        }
    };
    let mut deleted =
        db::events::delete_unpublished(&mut tx, &ids, args.force, None, &audit).await?;
    deleted.sort_unstable();
    commit_all(tx, &ids, deleted.iter().copied(), "cancelled").await?;
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
    let delay_micros = delay_micros(args.delay)?;
    if let Some(target) = by_filter(
        &args.target.ids,
        &args.target.filter,
        &args.by_filter.state,
        &[EventState::Ready, EventState::Scheduled],
        |s| match s {
            EventState::Dead => "dead events are sent again with `outboxctl requeue --delay`",
            EventState::Published => "published events cannot be rescheduled",
            _ => "in-flight events can be rescheduled once the attempt is over",
        },
    )? {
        return reschedule_by_filter(args, target, delay_micros).await;
    }
    let ids = sorted_ids(&args.target.ids);
    let json = args.change.output.json;
    let (mut conn, audit) = connect(&args.db, &args.change.audit).await?;
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

    let refused = peek_refusals(&mut conn, &ids, reschedule_refusal).await?;
    if !refused.is_empty() {
        report(&[], &refused, args.change.preview.dry_run)?;
        return Err(refusal_error("reschedule", &refused).into());
    }
    let what = output::plural(ids.len() as u64, "event", "events");
    if args.change.preview.dry_run {
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

    let mut tx = match lock_all(&mut conn, &ids, reschedule_refusal).await? {
        Ok(tx) => tx,
        Err(refused) => {
            report(&[], &refused, false)?;
            return Err(refusal_error("reschedule", &refused).into());
        }
    };
    let mut moved =
        db::events::reschedule(&mut tx, &ids, args.at, delay_micros, None, &audit).await?;
    moved.sort_unstable_by_key(|m| m.0);
    commit_all(tx, &ids, moved.iter().map(|m| m.0), "rescheduled").await?;
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

/// The connection of a change (the schema migrated through the audit trail) and who acts.
async fn connect(
    db_args: &DatabaseArgs,
    audit: &AuditArgs,
) -> anyhow::Result<(PoolConnection<Postgres>, Audit)> {
    let cfg = DbConfig::from_args(db_args)?;
    let audit = Audit {
        actor: config::actor(audit)?,
        reason: None,
    };
    let conn = db::conn_migrated_through(&cfg, db::migrate::AUDIT_SCHEMA).await?;
    Ok((conn, audit))
}

/// A by-filter run's connection (schema checked through the audit trail), the ids its filters
/// select, and who acts.
async fn select_by_filter(
    db_args: &DatabaseArgs,
    audit: &AuditArgs,
    target: &ByFilter,
    limit: Option<u64>,
) -> anyhow::Result<(PoolConnection<Postgres>, Vec<i64>, Audit)> {
    let (mut conn, audit) = connect(db_args, audit).await?;
    check_filter(&mut conn, &target.filter).await?;
    let ids = db::events::matching_ids(
        &mut conn,
        Scope::States(&target.states),
        &target.filter,
        limit,
    )
    .await?;
    Ok((conn, ids, audit))
}

/// How `events cancel` reads by filters.
const CANCEL: batch::Words = batch::Words::events("cancel", "cancelled", "cancelling");

/// How `events reschedule` reads by filters.
const RESCHEDULE: batch::Words = batch::Words::events("reschedule", "rescheduled", "rescheduling");

/// The plan of a by-filter run.
fn plan(words: batch::Words, dry_run: bool, yes: bool, json: bool, size: u32) -> batch::Plan {
    batch::Plan {
        words,
        rows: batch::Rows::Any,
        dry_run,
        confirm: Some(yes),
        json,
        batch_size: size,
        dry_detail: String::new(),
    }
}

/// A by-filter run: selects the events `target` names (at most `by.limit`), then `act`s on them
/// in batches of `by.batch_size` (given a batch, the states it may change and who acts), as
/// `words` say, reporting with `report` and `suffix`.
#[allow(clippy::too_many_arguments)]
async fn run_by_filter<V: ByFilterVars>(
    db_args: &DatabaseArgs,
    change: &ChangeArgs,
    by: &ByFilterArgs<V>,
    target: &ByFilter,
    words: batch::Words,
    report: fn(batch::Tally) -> FilterReport,
    mut act: impl AsyncFnMut(
        &mut PgConnection,
        &[i64],
        &[EventState],
        &Audit,
    ) -> anyhow::Result<Vec<i64>>,
    suffix: impl FnOnce(&batch::Tally) -> String,
) -> anyhow::Result<u8> {
    let (mut conn, ids, audit) = select_by_filter(db_args, &change.audit, target, by.limit).await?;
    let (dry_run, yes, json) = (
        change.preview.dry_run,
        change.confirm.yes,
        change.output.json,
    );
    batch::run(
        &plan(words, dry_run, yes, json, by.batch_size),
        &db::Pin::default(),
        &mut conn,
        &ids,
        report,
        async |c, chunk| act(c, chunk, &target.states, &audit).await,
        suffix,
    )
    .await
}

async fn cancel_by_filter(args: CancelArgs, target: ByFilter) -> anyhow::Result<u8> {
    let force = args.force;
    run_by_filter(
        &args.db,
        &args.change,
        &args.by_filter,
        &target,
        CANCEL,
        FilterReport::cancelled,
        async |c, chunk, states, audit| {
            Ok(db::events::delete_unpublished(c, chunk, force, Some(states), audit).await?)
        },
        |_| String::new(),
    )
    .await
}

async fn reschedule_by_filter(
    args: RescheduleArgs,
    target: ByFilter,
    delay_micros: i64,
) -> anyhow::Result<u8> {
    let at = args.at;
    let due = Cell::new(None);
    run_by_filter(
        &args.db,
        &args.change,
        &args.by_filter,
        &target,
        RESCHEDULE,
        FilterReport::rescheduled,
        async |c, chunk, states, audit| {
            let moved =
                db::events::reschedule(c, chunk, at, delay_micros, Some(states), audit).await?;
            if due.get().is_none() {
                due.set(moved.first().map(|m| m.1));
            }
            Ok(moved.into_iter().map(|m| m.0).collect())
        },
        |_| match due.get() {
            Some(due) => format!(" (due {})", view::time(Some(due))),
            None => String::new(),
        },
    )
    .await
}

/// The `--json` outputs of `events` (docs/reference/json.md); `events edit` is in `edit`.
pub fn json_outputs() -> Vec<crate::schema::Output> {
    use crate::schema::Output;
    vec![
        Output::of::<view::EventList<'static>>("events list --json", "Newest first."),
        Output::of::<view::EventDetail<'static>>("events show --json", ""),
        Output::of::<CancelReport<'static>>("events cancel ID... --json", "By ids."),
        Output::of::<RescheduleReport<'static>>("events reschedule ID... --json", "By ids."),
        Output::of::<FilterReport>(
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
