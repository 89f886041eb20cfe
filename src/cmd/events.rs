//! `outboxctl events list|show|cancel|reschedule`: any event, in any state (seed 003: events stay
//! readable, changeable and deletable after they are written and before they are handled).
//!
//! `cancel` and `reschedule` are all-or-nothing: inside one transaction they lock the rows with
//! `FOR UPDATE SKIP LOCKED` (a row locked by someone else is a relay publishing it right now),
//! check every row's state under that lock, and change either all of them or none. The statement
//! that changes them re-checks the state too.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::Connection;

use crate::cli::{
    CancelArgs, EventsArgs, EventsCommand, EventsListArgs, RescheduleArgs, ShowArgs, StateArg,
};
use crate::cmd::{dead, view};
use crate::config::DbConfig;
use crate::db::{self, events::EventState, events::Scope};
use crate::exit::{CodedError, FAILURE, OK};
use crate::output;
use crate::select::EventFilter;

pub async fn run(args: EventsArgs) -> anyhow::Result<u8> {
    match args.command {
        EventsCommand::List(a) => list(a).await,
        EventsCommand::Show(a) => show(a.show).await,
        EventsCommand::Cancel(a) => cancel(a).await,
        EventsCommand::Reschedule(a) => reschedule(a).await,
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
        args.limit,
        args.output.json,
        "no events match",
        view::EVENTS_TABLE,
    )
    .await?;
    Ok(OK)
}

async fn show(args: ShowArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let pool = db::pool_migrated(&cfg, 1).await?;
    let mut conn = pool.acquire().await?;
    let event = db::events::get(&mut conn, args.id)
        .await?
        .ok_or_else(|| view::no_such_event(args.id, cfg.schema.name()))?;
    let history = dead::history(&mut conn, event.id).await?;
    if args.output.json {
        output::print_json(&view::EventDetail {
            event: &event,
            requeues: &history,
        })?;
    } else {
        view::print_event(&event, &history)?;
    }
    Ok(OK)
}

/// Why an event cannot be changed.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Refusal {
    pub id: i64,
    /// None when the event does not exist.
    pub state: Option<EventState>,
    pub reason: String,
}

/// What one id looks like to `cancel`/`reschedule`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Seen {
    Missing,
    /// Locked by another transaction: a relay (tx mode) publishing it right now.
    Locked,
    State(EventState),
}

/// Why `cancel` refuses an event, or None when it may be deleted.
pub fn cancel_refusal(seen: Seen, force: bool) -> Option<String> {
    match seen {
        Seen::Missing => Some("does not exist".into()),
        Seen::Locked => Some("is being published by a relay right now (row locked): try again in a moment".into()),
        Seen::State(EventState::Published) => Some(
            "is already published, and cancelling cannot unsend it (`outboxctl prune` removes published history)"
                .into(),
        ),
        Seen::State(EventState::InFlight) if !force => Some(
            "is in flight (leased by a relay): --force cancels it anyway, though that relay may still deliver it once"
                .into(),
        ),
        Seen::State(_) => None,
    }
}

/// Why `reschedule` refuses an event, or None when it may be moved.
pub fn reschedule_refusal(seen: Seen) -> Option<String> {
    match seen {
        Seen::Missing => Some("does not exist".into()),
        Seen::Locked => Some(
            "is being published by a relay right now (row locked): try again in a moment".into(),
        ),
        Seen::State(EventState::Published) => Some("is already published".into()),
        Seen::State(EventState::Dead) => Some(
            "is dead-lettered: use `outboxctl requeue ID --delay DURATION` to send it again later"
                .into(),
        ),
        Seen::State(EventState::InFlight) => {
            Some("is in flight (leased by a relay): reschedule it once the attempt is over".into())
        }
        Seen::State(EventState::Ready | EventState::Scheduled) => None,
    }
}

fn refusals(
    ids: &[i64],
    seen: &HashMap<i64, Seen>,
    rule: impl Fn(Seen) -> Option<String>,
) -> Vec<Refusal> {
    ids.iter()
        .filter_map(|id| {
            let s = seen.get(id).copied().unwrap_or(Seen::Missing);
            rule(s).map(|reason| Refusal {
                id: *id,
                state: match s {
                    Seen::State(st) => Some(st),
                    _ => None,
                },
                reason,
            })
        })
        .collect()
}

fn refusal_error(verb: &str, refused: &[Refusal]) -> CodedError {
    let items: Vec<String> = refused
        .iter()
        .map(|r| format!("event {} {}", r.id, r.reason))
        .collect();
    CodedError::usage(format!(
        "refusing to {verb}, nothing was changed: {}",
        dead::list_some(&items)
    ))
}

/// Sees `ids` without locking (for the preview and the question).
async fn peek(conn: &mut sqlx::PgConnection, ids: &[i64]) -> anyhow::Result<HashMap<i64, Seen>> {
    Ok(db::events::states(conn, ids)
        .await?
        .into_iter()
        .map(|(id, s)| (id, Seen::State(s)))
        .collect())
}

/// Locks `ids` (SKIP LOCKED) and sees them; call inside the transaction that changes them.
async fn lock(conn: &mut sqlx::PgConnection, ids: &[i64]) -> anyhow::Result<HashMap<i64, Seen>> {
    let mut seen: HashMap<i64, Seen> = db::events::lock_states(conn, ids)
        .await?
        .into_iter()
        .map(|(id, s)| (id, Seen::State(s)))
        .collect();
    let not_locked: Vec<i64> = ids
        .iter()
        .copied()
        .filter(|id| !seen.contains_key(id))
        .collect();
    if !not_locked.is_empty() {
        for (id, _) in db::events::states(conn, &not_locked).await? {
            seen.insert(id, Seen::Locked);
        }
    }
    Ok(seen)
}

fn sorted_ids(ids: &[i64]) -> Vec<i64> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids
}

fn id_list(ids: &[i64]) -> String {
    const SHOWN: usize = 20;
    let mut s = ids
        .iter()
        .take(SHOWN)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if ids.len() > SHOWN {
        s.push_str(&format!(" and {} more", ids.len() - SHOWN));
    }
    s
}

#[derive(Debug, Serialize)]
struct CancelReport<'a> {
    dry_run: bool,
    /// Deleted (with --dry-run: would be deleted).
    cancelled: &'a [i64],
    refused: &'a [Refusal],
}

async fn cancel(args: CancelArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let ids = sorted_ids(&args.ids);
    let json = args.output.json;
    let pool = db::pool_migrated(&cfg, 1).await?;
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
        report(&[], &refused, args.dry_run)?;
        return Err(refusal_error("cancel", &refused).into());
    }
    let what = output::plural(ids.len() as u64, "event", "events");
    if args.dry_run {
        report(&ids, &[], true)?;
        if !json {
            output::print_line(format_args!(
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
        eprintln!("aborted; nothing was changed");
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
    let mut deleted = db::events::delete_unpublished(&mut tx, &ids, args.force).await?;
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
        output::print_line(format_args!("cancelled {what}: {}", id_list(&deleted)))?;
    }
    Ok(OK)
}

#[derive(Debug, Serialize)]
struct Moved {
    id: i64,
    /// The new due time; with --dry-run and --delay unknown until it runs (null).
    available_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Serialize)]
struct RescheduleReport<'a> {
    dry_run: bool,
    /// Moved, with their new due time (with --dry-run: would be moved).
    rescheduled: &'a [Moved],
    refused: &'a [Refusal],
}

async fn reschedule(args: RescheduleArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let ids = sorted_ids(&args.ids);
    let delay_micros = match args.delay {
        None => 0,
        Some(d) => i64::try_from(d.as_micros())
            .ok()
            .filter(|m| *m < 100 * 365 * 86_400 * 1_000_000)
            .ok_or_else(|| CodedError::usage("--delay is too long; use at most 100 years"))?,
    };
    let json = args.output.json;
    let pool = db::pool_migrated(&cfg, 1).await?;
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
        report(&[], &refused, args.dry_run)?;
        return Err(refusal_error("reschedule", &refused).into());
    }
    let what = output::plural(ids.len() as u64, "event", "events");
    if args.dry_run {
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
            output::print_line(format_args!(
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
    let mut moved = db::events::reschedule(&mut tx, &ids, args.at, delay_micros).await?;
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
        output::print_line(format_args!(
            "rescheduled {what} to {due}: {}",
            id_list(&ids)
        ))?;
    }
    Ok(OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_rules() {
        use EventState::*;
        for (seen, force, ok) in [
            (Seen::State(Ready), false, true),
            (Seen::State(Scheduled), false, true),
            (Seen::State(Dead), false, true),
            (Seen::State(InFlight), false, false),
            (Seen::State(InFlight), true, true),
            (Seen::State(Published), false, false),
            (Seen::State(Published), true, false),
            (Seen::Locked, true, false),
            (Seen::Missing, true, false),
        ] {
            assert_eq!(
                cancel_refusal(seen, force).is_none(),
                ok,
                "{seen:?} force={force}"
            );
        }
    }

    #[test]
    fn reschedule_rules() {
        use EventState::*;
        for (seen, ok) in [
            (Seen::State(Ready), true),
            (Seen::State(Scheduled), true),
            (Seen::State(Dead), false),
            (Seen::State(InFlight), false),
            (Seen::State(Published), false),
            (Seen::Locked, false),
            (Seen::Missing, false),
        ] {
            assert_eq!(reschedule_refusal(seen).is_none(), ok, "{seen:?}");
        }
    }

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
