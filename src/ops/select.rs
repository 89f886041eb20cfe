//! Selections checked against the database: a filter's regular expression as PostgreSQL reads it,
//! and the dead ids a selection of `dead discard`, `dead export` or `requeue` means. (The flags
//! themselves are validated before any I/O in `crate::select`.)

use sqlx::PgConnection;

use crate::db::{self, events::EventState};
use crate::exit::CodedError;
use crate::output;
use crate::select::{EventFilter, Selection};

/// Rejects a regular expression PostgreSQL would reject, as bad input (exit code 2).
pub async fn check_filter(conn: &mut PgConnection, filter: &EventFilter) -> anyhow::Result<()> {
    if let Some(re) = &filter.error_regex {
        if let Some(why) = db::events::check_regex(conn, re).await? {
            return Err(CodedError::usage(format!("invalid --error-regex `{re}`: {why}")).into());
        }
    }
    Ok(())
}

/// What is wrong with each of `ids` that is not an event in state `want` (`states` as
/// `db::events::states` read them): "no event 3{missing}", "event 4 is ready, not {wanted}".
pub fn not_in_state(
    ids: &[i64],
    states: &[(i64, EventState)],
    want: EventState,
    missing: &str,
    wanted: &str,
) -> Vec<String> {
    ids.iter()
        .filter_map(|id| match states.iter().find(|(i, _)| i == id) {
            None => Some(format!("no event {id}{missing}")),
            Some((_, s)) if *s == want => None,
            Some((_, s)) => Some(format!("event {id} is {s}, not {wanted}")),
        })
        .collect()
}

/// The dead ids a selection means, newest dead first. Explicit ids must all exist and be dead,
/// else nothing happens and the error names each offending id.
pub async fn select_dead(
    conn: &mut PgConnection,
    selection: &Selection,
    limit: Option<u64>,
    verb: &str,
) -> anyhow::Result<Vec<i64>> {
    let none = EventFilter::default();
    match selection {
        Selection::Ids(ids) => {
            let states = db::events::states(conn, ids).await?;
            let problems = not_in_state(ids, &states, EventState::Dead, "", "dead-lettered");
            if !problems.is_empty() {
                return Err(CodedError::usage(format!(
                    "cannot {verb}: {}; nothing was changed",
                    output::list_some(&problems)
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
