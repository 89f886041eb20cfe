//! The one shape of a change to many selected events (`dead discard`, `requeue`, and `events
//! cancel|reschedule` by filters): the ids are selected once, so a dry run lists exactly what a
//! real run would take; then the change is confirmed, applied in short batches (one statement and
//! so one short transaction each, in id order, with a progress bar on a terminal) and reported.
//! Each batch's statement re-checks the rows itself: a row that moved on meanwhile is skipped,
//! never changed twice.
//!
//! Each command keeps its own `--json` report type (its verb's count has its own field, and the
//! reference pages document each); they are all declared by one macro and built from one
//! [`Tally`].

use std::time::{Duration, Instant};

use serde::Serialize;
use sqlx::PgConnection;

use crate::db::{self, events::EventRow, events::Scope};
use crate::exit::{FAILURE, OK};
use crate::ops::view;
use crate::output;
use crate::select::EventFilter;

/// How a batched change reads to the user.
#[derive(Debug, Clone, Copy)]
pub struct Words {
    /// "discard": the question and the dry run.
    pub verb: &'static str,
    /// "discarded": the summary.
    pub done: &'static str,
    /// "discarding": the progress bar and each batch's log line.
    pub doing: &'static str,
    /// What it changes: ("dead event", "dead events").
    pub noun: (&'static str, &'static str),
    /// The summary when nothing was selected: "no dead-lettered events match".
    pub none: &'static str,
    /// Why a selected event was skipped: "no longer dead".
    pub moved_on: &'static str,
}

impl Words {
    /// A change of dead letters (`dead discard`, `requeue`).
    pub const fn dead(verb: &'static str, done: &'static str, doing: &'static str) -> Self {
        Self {
            verb,
            done,
            doing,
            noun: ("dead event", "dead events"),
            none: "no dead-lettered events match",
            moved_on: "no longer dead",
        }
    }

    /// A change of events selected by filters (`events cancel|reschedule`).
    pub const fn events(verb: &'static str, done: &'static str, doing: &'static str) -> Self {
        Self {
            verb,
            done,
            doing,
            noun: ("event", "events"),
            none: "no events match",
            moved_on: "that changed state meanwhile",
        }
    }
}

/// Which rows a batched change acts on, and so how a dry run lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rows {
    /// Dead letters, as `dead list` shows them.
    Dead,
    /// Events in any state, as `events list` shows them.
    Any,
}

/// What decides how a batched change runs.
#[derive(Debug, Clone)]
pub struct Plan {
    pub words: Words,
    pub rows: Rows,
    /// Show what would change, change nothing.
    pub dry_run: bool,
    /// `Some(--yes)`: ask before changing anything (`confirm::confirm`); `None`: go on.
    pub confirm: Option<bool>,
    pub json: bool,
    /// Ids per statement.
    pub batch_size: u32,
    /// Said after the count in a dry run's summary (`requeue`: when they fall due).
    pub dry_detail: String,
}

/// What a run did, or with --dry-run would do: the figures of every batch report.
#[derive(Debug, Clone)]
pub struct Tally {
    pub dry_run: bool,
    /// Events selected.
    pub matched: u64,
    /// Changed (0 with --dry-run).
    pub done: u64,
    /// Selected, but no longer in a state to act on when their batch ran.
    pub skipped: u64,
    /// Statements (transactions) it took.
    pub batches: u64,
    /// Milliseconds the run took.
    pub elapsed_ms: u64,
    /// The ids changed (not with --dry-run).
    pub ids: Option<Vec<i64>>,
    /// With --dry-run: exactly the events that would change.
    pub events: Option<Vec<EventRow>>,
}

impl Tally {
    /// A dry run over `rows` of the `matched` selected events.
    fn dry_run(matched: u64, rows: Vec<EventRow>) -> Self {
        Self {
            dry_run: true,
            matched,
            done: 0,
            skipped: 0,
            batches: 0,
            elapsed_ms: 0,
            ids: None,
            events: Some(rows),
        }
    }
}

/// Declares the `--json` report of two commands that share a batched change, built from a
/// [`Tally`]: each command's count has a field of its own (`$first` or `$second`, the other one
/// absent) and a constructor of the same name; the docs of what is selected, of the counts and
/// of what is skipped are each report's own.
macro_rules! tally_report {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $(#[$matched:meta])* matched;
            $(#[$count:meta])* $first:ident: $first_cmd:literal, $second:ident: $second_cmd:literal;
            $(#[$skipped:meta])* skipped;
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Serialize, schemars::JsonSchema)]
        pub struct $name {
            /// Run with `--dry-run`: nothing was changed.
            pub dry_run: bool,
            $(#[$matched])*
            pub matched: u64,
            $(#[$count])*
            #[serde(skip_serializing_if = "Option::is_none")]
            pub $first: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            pub $second: Option<u64>,
            $(#[$skipped])*
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
            pub events: Option<Vec<EventRow>>,
        }

        impl $name {
            #[doc = concat!("`", $first_cmd, "`'s report.")]
            pub fn $first(t: Tally) -> Self {
                Self::of(t, true)
            }

            #[doc = concat!("`", $second_cmd, "`'s report.")]
            pub fn $second(t: Tally) -> Self {
                Self::of(t, false)
            }

            fn of(t: Tally, first: bool) -> Self {
                Self {
                    dry_run: t.dry_run,
                    matched: t.matched,
                    $first: first.then_some(t.done),
                    $second: (!first).then_some(t.done),
                    skipped: t.skipped,
                    batches: t.batches,
                    elapsed_ms: t.elapsed_ms,
                    ids: t.ids,
                    events: t.events,
                }
            }
        }
    };
}

tally_report! {
    /// What `dead discard` and `requeue` print with --json.
    pub struct DeadReport {
        /// Dead events selected.
        matched;
        /// Requeued or discarded.
        requeued: "requeue", discarded: "dead discard";
        /// Selected, but no longer dead when their batch ran (requeued or discarded by someone else).
        skipped;
    }
}

tally_report! {
    /// What `events cancel` and `events reschedule` print with --json when they select by filters.
    pub struct FilterReport {
        /// Events the filters selected.
        matched;
        /// Cancelled (deleted) or rescheduled; with --dry-run 0.
        cancelled: "events cancel", rescheduled: "events reschedule";
        /// Selected, but no longer in a state to act on when their batch ran.
        skipped;
    }
}

/// Runs `plan` over the selected `ids`: with --dry-run lists them, else asks (when the plan
/// says so), then applies `act` in batches and prints the report: `report(tally)` with --json,
/// else the summary followed by `suffix(tally)`. `act` changes one batch (ascending ids) and
/// returns the ids its statement changed. Returns the exit code.
pub async fn run<R: Serialize>(
    plan: &Plan,
    pin: &db::Pin,
    conn: &mut PgConnection,
    ids: &[i64],
    report: impl Fn(Tally) -> R,
    mut act: impl AsyncFnMut(&mut PgConnection, &[i64]) -> anyhow::Result<Vec<i64>>,
    suffix: impl FnOnce(&Tally) -> String,
) -> anyhow::Result<u8> {
    let w = &plan.words;
    let n = ids.len() as u64;
    let what = output::plural(n, w.noun.0, w.noun.1);
    if plan.dry_run {
        let rows = pin
            .run(conn, async |c| rows_of(c, plan.rows, ids).await)
            .await?;
        if plan.json {
            output::print_json(&report(Tally::dry_run(n, rows)))?;
        } else {
            if !rows.is_empty() {
                match plan.rows {
                    Rows::Dead => view::print_dead_table(&rows)?,
                    Rows::Any => view::print_events_table(&rows)?,
                }
            }
            output::print_summary(format_args!(
                "would {} {what}{} (dry run: nothing changed)",
                w.verb, plan.dry_detail
            ))?;
        }
        return Ok(OK);
    }
    if let Some(yes) = plan.confirm {
        if n > 0 && !crate::confirm::confirm(yes, &format!("{} {what}?", w.verb))? {
            output::eprint_line("aborted; nothing was changed");
            return Ok(FAILURE);
        }
    }
    let started = Instant::now();
    let mut sorted = ids.to_vec();
    sorted.sort_unstable();
    let pb = output::progress(Some(n), plan.json, w.doing);
    let (mut done, mut batches) = (Vec::with_capacity(sorted.len()), 0u64);
    for chunk in sorted.chunks(plan.batch_size as usize) {
        let changed = pin.run(conn, async |c| act(c, chunk).await).await?;
        batches += 1;
        tracing::info!(batch = batches, rows = changed.len(), "{}", w.doing);
        done.extend(changed);
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    done.sort_unstable();
    let tally = Tally {
        dry_run: false,
        matched: n,
        done: done.len() as u64,
        skipped: n - done.len() as u64,
        batches,
        elapsed_ms: started.elapsed().as_millis() as u64,
        ids: Some(done),
        events: None,
    };
    if plan.json {
        output::print_json(&report(tally))?;
    } else {
        let line = summary(w, &tally) + &suffix(&tally);
        output::print_summary(line)?;
    }
    Ok(OK)
}

/// "discarded 3 dead events in 1 batch in 12ms" (+ skipped ones).
pub fn summary(w: &Words, t: &Tally) -> String {
    if t.matched == 0 {
        return format!("{}; nothing {}", w.none, w.done);
    }
    let mut s = format!(
        "{} {} in {} in {}",
        w.done,
        output::plural(t.done, w.noun.0, w.noun.1),
        output::plural(t.batches, "batch", "batches"),
        output::human_duration(Duration::from_millis(t.elapsed_ms))
    );
    if t.skipped > 0 {
        s.push_str(&format!(
            "; skipped {} {}",
            output::plural(t.skipped, "event", "events"),
            w.moved_on
        ));
    }
    s
}

/// The full rows of `ids` (those still in `rows`' scope), newest first, for a dry run.
async fn rows_of(
    conn: &mut PgConnection,
    rows: Rows,
    ids: &[i64],
) -> anyhow::Result<Vec<EventRow>> {
    let scope = match rows {
        Rows::Dead => Scope::Dead,
        Rows::Any => Scope::States(&[]),
    };
    let mut out = Vec::with_capacity(ids.len());
    for chunk in ids.chunks(10_000) {
        out.extend(
            db::events::list(conn, scope, &EventFilter::default(), Some(chunk), None).await?,
        );
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DISCARD: Words = Words::dead("discard", "discarded", "discarding");

    fn tally(matched: u64, done: u64, batches: u64) -> Tally {
        Tally {
            dry_run: false,
            matched,
            done,
            skipped: matched - done,
            batches,
            elapsed_ms: 12,
            ids: None,
            events: None,
        }
    }

    #[test]
    fn summaries_count_with_plurals_and_name_the_skipped() {
        assert_eq!(
            summary(&DISCARD, &tally(0, 0, 0)),
            "no dead-lettered events match; nothing discarded"
        );
        assert_eq!(
            summary(&DISCARD, &tally(1, 1, 1)),
            "discarded 1 dead event in 1 batch in 12ms"
        );
        assert_eq!(
            summary(&DISCARD, &tally(5, 3, 2)),
            "discarded 3 dead events in 2 batches in 12ms; skipped 2 events no longer dead"
        );
    }
}
