//! What every change of events by id shares (`events cancel|reschedule` and `events edit`): the
//! rows locked in id order, what each id was seen as, and why one is refused. Below the commands,
//! so `events` and its `edit` share it without importing each other.

use std::collections::HashMap;
use std::time::Duration;

use serde::Serialize;
use sqlx::{Connection, Postgres, Transaction};

use crate::db::{self, events::EventState};
use crate::exit::CodedError;
use crate::output;

/// Why an event cannot be changed.
#[derive(Debug, Clone, Serialize, PartialEq, schemars::JsonSchema)]
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

pub(crate) fn refusal_error(verb: &str, refused: &[Refusal]) -> CodedError {
    let items: Vec<String> = refused
        .iter()
        .map(|r| format!("event {} {}", r.id, r.reason))
        .collect();
    CodedError::usage(format!(
        "refusing to {verb}, nothing was changed: {}",
        output::list_some(&items)
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

/// Why any of `ids` would be refused, seen without locking (for the preview and the question).
pub async fn peek_refusals(
    conn: &mut sqlx::PgConnection,
    ids: &[i64],
    rule: impl Fn(Seen) -> Option<String>,
) -> anyhow::Result<Vec<Refusal>> {
    Ok(refusals(ids, &peek(conn, ids).await?, rule))
}

/// Opens the transaction that changes `ids`, locking them (SKIP LOCKED) and seeing them under the
/// lock: `Err` with the refusals (rolled back) when any may not change.
pub async fn lock_all<'c>(
    conn: &'c mut sqlx::PgConnection,
    ids: &[i64],
    rule: impl Fn(Seen) -> Option<String>,
) -> anyhow::Result<Result<Transaction<'c, Postgres>, Vec<Refusal>>> {
    let mut tx = conn.begin().await?;
    let refused = refusals(ids, &lock(&mut tx, ids).await?, rule);
    if refused.is_empty() {
        return Ok(Ok(tx));
    }
    tx.rollback().await?;
    Ok(Err(refused))
}

/// Ends the transaction of an all-or-nothing change of `ids` that changed `changed` (sorted by
/// id): commits when those are exactly `ids`, else rolls back and fails (`doing`: "edited",
/// "cancelled", ...).
pub async fn commit_all(
    tx: Transaction<'_, Postgres>,
    ids: &[i64],
    changed: impl Iterator<Item = i64>,
    doing: &str,
) -> anyhow::Result<()> {
    if !changed.eq(ids.iter().copied()) {
        tx.rollback().await?;
        anyhow::bail!(
            "the events changed while they were being {doing}; nothing was changed, try again"
        );
    }
    tx.commit().await?;
    Ok(())
}

/// `--delay` as the microseconds the SQL adds to the database's `now()` (0 without it).
pub fn delay_micros(delay: Option<Duration>) -> Result<i64, CodedError> {
    match delay {
        None => Ok(0),
        Some(d) => i64::try_from(d.as_micros())
            .ok()
            .filter(|m| *m < 100 * 365 * 86_400 * 1_000_000)
            .ok_or_else(|| CodedError::usage("--delay is too long; use at most 100 years")),
    }
}

pub(crate) fn sorted_ids(ids: &[i64]) -> Vec<i64> {
    let mut ids = ids.to_vec();
    ids.sort_unstable();
    ids.dedup();
    ids
}

pub(crate) fn id_list(ids: &[i64]) -> String {
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

/// Every way an id can look, in a fixed order: for the rules' tests.
#[cfg(test)]
pub fn every_seen() -> impl Iterator<Item = Seen> {
    use EventState::*;
    let states = [Ready, Scheduled, InFlight, Published, Dead].map(Seen::State);
    [Seen::Missing, Seen::Locked].into_iter().chain(states)
}

/// The ways an id can look that `refusal` lets through, in [`every_seen`]'s order.
#[cfg(test)]
pub fn allowed(refusal: impl Fn(Seen) -> Option<String>) -> Vec<Seen> {
    every_seen().filter(|s| refusal(*s).is_none()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cancel_rules() {
        use EventState::*;
        let unforced = [Ready, Scheduled, Dead].map(Seen::State);
        assert_eq!(allowed(|s| cancel_refusal(s, false)), unforced);
        let forced = [Ready, Scheduled, InFlight, Dead].map(Seen::State);
        assert_eq!(allowed(|s| cancel_refusal(s, true)), forced);
    }

    #[test]
    fn reschedule_rules() {
        use EventState::*;
        let allowed = allowed(reschedule_refusal);
        assert_eq!(allowed, [Seen::State(Ready), Seen::State(Scheduled)]);
    }
}
