//! Where the relay's next unordered claim starts in the claim order `(available_at, id)`.
//!
//! A claim from the start of `outbox_ready_idx` reads, before the first ready row, the index
//! entries of every row published since the xmin horizon: while a long snapshot is held (a
//! `pg_dump`, a long report, a standby with `hot_standby_feedback`) VACUUM cannot remove them,
//! and each claim walked them all (issue 30: 100k events drained at 0.13x after four rounds).
//! So a relay's claims start just after the last row its previous claim took (a keyset cursor),
//! and only from time to time from the start, which finds what became ready behind the cursor:
//! a lease that ran out, rows given back, a producer's transaction that committed after a claim
//! had passed its rows (their `available_at` is the transaction's start), a requeue or
//! reschedule into the past. Retries and delayed events are due later than the cursor and are
//! found ahead of it. Rows the relay itself gives back (an outage, shutdown, a rolled-back
//! batch, a lost claim reply) make its next claim start at the start ([`ClaimStart::rescan`]).
//!
//! **The bound**: a claim from the start once [`RESCAN_COST_FACTOR`] times as long as the last
//! such claim took has passed (so they cost at most 1/[`RESCAN_COST_FACTOR`] of the relay's
//! time), and at once after a claim from the cursor that came back short once that much time has
//! passed. An event that becomes ready behind the cursor is therefore claimed within 20 times a
//! claim from the start (a few milliseconds in a vacuumed table, where nearly every claim starts
//! at the start; seconds while a snapshot keeps hundreds of thousands of dead rows), plus the
//! poll interval of an idle daemon. No fixed minimum: producers' transactions commit after a
//! claim has passed their `available_at` all the time (it is the transaction's start), and a
//! one-second minimum made 1 % of the events of a 1000 events/s load wait ~0.7 s (p99 714 ms
//! against 6 ms, `bench/ab-bench.sh`).
//!
//! A claim that left rows too large for its sizing among those it took (`Claim::passed_over`)
//! holds the cursor where the claim started, so the next claim (sized for them) finds them.
//!
//! `relay --once` ([`ClaimStart::run_once`]) goes on from where the previous run's claims
//! reached ([`ClaimStart::resume`], saved by [`ClaimStart::to_save`] in `outbox_relay_floor`,
//! migration 10), with the previous runs' last claim from the start as its own: a fresh process
//! otherwise walked every dead row a snapshot kept before its first row (one event: 174-212 ms
//! against 38-40 ms with none, `bench/snapshot.sh`). It makes no claim from the start before
//! its claims from the cursor come back short (new events first). Instead of ending on that
//! short claim, it first claims from the start if one is due by the rule above (carried from run
//! to run), else sweeps from its *floor* (where it resumed, or just before the first row its
//! first claim from the start took): what the run passed over (rows another transaction held
//! locked, rows given back) is claimed then. The sweep reads the entries of the rows this run
//! claimed, not the dead rows before the floor, which a claim from the start would walk at the
//! end of every run (round 5 of `bench/snapshot.sh`, snapshot held against none: 0.58-0.69x in
//! tx mode with one, 0.93-0.95x with the sweep; lease 0.87x). What became ready behind the floor
//! is left to a claim from the start that falls due, in this run or a later one.
//!
//! The state is shared by the steps in flight at once (`--pipeline-depth`): a claim started
//! while another's rows are still locked starts after them instead of skipping them one by one.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::db::floor::{Floor, Saved};
use crate::db::relay::{Claim, Position};
use crate::lock::lock;

/// A claim from the start once this many times the last one's duration has passed.
pub const RESCAN_COST_FACTOR: u32 = 20;

/// Where the next claim starts; see the module docs.
#[derive(Debug, Default)]
pub struct ClaimStart {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// `relay --once` ([`ClaimStart::run_once`]): a claim from the cursor that comes back short
    /// is followed by a sweep from the run's first row.
    once: bool,
    cursor: Option<Position>,
    /// When the last claim from the start began, and how long it took.
    last_full: Option<(Instant, Duration)>,
    /// The next claim starts from the start.
    rescan: bool,
    /// `relay --once`: just before the first row its first claim from the start took.
    floor: Option<Position>,
    /// `relay --once`: the next claim starts at the floor (the sweep before the run ends).
    sweep: bool,
    /// `relay --once`: a sweep came back short, and no claim has taken a row since.
    swept: bool,
    /// `relay --once`: the schema has the saved floor's table (migration 10).
    saves: bool,
}

impl State {
    fn rescan_due(&self) -> bool {
        match self.last_full {
            None => true,
            Some((at, took)) => at.elapsed() >= took * RESCAN_COST_FACTOR,
        }
    }

    /// A claim that left rows among those it took (too large for its sizing) goes on from
    /// where it started, not from its last row.
    fn hold(&mut self, from: Option<Position>) {
        match from {
            None => self.rescan = true,
            Some(p) => self.cursor = Some(self.cursor.map_or(p, |c| c.min(p))),
        }
    }
}

impl ClaimStart {
    /// The claims from now on are those of a `relay --once` run (`daemon::once`): it ends on a
    /// short claim, so it sweeps what it passed over first.
    pub fn run_once(&self) {
        self.state().once = true;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        lock(&self.state)
    }

    /// Where the next claim starts: just after the cursor, or (`None`) at the start of the ready
    /// rows when there is no cursor yet, or a claim from the start is due.
    pub fn next(&self) -> Option<Position> {
        let s = self.state();
        // A `relay --once` run claims from the start when one is due only once its claims from
        // the cursor come back short ([`ClaimStart::after`]): what is new goes out first.
        if s.rescan || (!s.once && s.rescan_due()) {
            None
        } else if s.sweep {
            s.floor
        } else {
            s.cursor
        }
    }

    /// A `relay --once` run goes on from where an earlier run's claims reached (`saved`, from
    /// [`crate::db::floor::load`]) instead of starting at the start: its claims start there, and
    /// its sweep before it ends too, unless a claim from the start has fallen due by the saved
    /// one's time and duration (then it claims from the start last).
    pub fn resume(&self, saved: Saved) {
        let mut s = self.state();
        let saved = match saved {
            Saved::NoTable => return,
            Saved::Empty => {
                s.saves = true;
                return;
            }
            Saved::Floor(f) => f,
        };
        s.saves = true;
        s.cursor = Some(saved.at);
        s.floor = Some(saved.at);
        s.last_full = Instant::now()
            .checked_sub(saved.swept_ago)
            .map(|began| (began, saved.sweep_took));
    }

    /// What a `relay --once` run that drained what it found leaves for the next one: where its
    /// claims reached, and its last claim from the start. `None` while rows it gave back wait
    /// behind the cursor (the next run starts from the saved floor, which is before them), or
    /// when nothing was claimed and nothing saved.
    pub fn to_save(&self) -> Option<Floor> {
        let s = self.state();
        if s.rescan || !s.saves {
            return None;
        }
        let (began, took) = s.last_full?;
        Some(Floor {
            at: s.cursor?,
            swept_ago: began.elapsed(),
            sweep_took: took,
        })
    }

    /// An unordered claim beside the ordered one took nothing up to `at` (its statement's
    /// `now()`, [`Claim::scanned_to`]): the next one goes on from there. Its rows are the ordered
    /// types', skipped one by one, and dead entries; without this, a relay whose unordered
    /// claims never take a row never had a cursor, and each started at the start (a `relay
    /// --once` for one ordered event read 500k dead entries first, 0.5 s). What becomes ready
    /// behind it is found by a claim from the start, as behind any cursor.
    pub fn scanned_to(&self, at: chrono::DateTime<chrono::Utc>) {
        let mut s = self.state();
        let p = Position {
            available_at: at,
            id: i64::MAX,
        };
        s.cursor = Some(s.cursor.map_or(p, |c| c.max(p)));
    }

    /// The next claim starts at the start: rows were given back behind the cursor.
    pub fn rescan(&self) {
        self.state().rescan = true;
    }

    /// Records a claim that started at `from` ([`ClaimStart::next`]), began `elapsed` ago and
    /// took `claim`; `full`: it took all it was allowed. Returns true when a claim from the start
    /// should follow at once although this one came back short (rows behind the cursor may be
    /// ready).
    pub fn after(
        &self,
        from: Option<Position>,
        elapsed: Duration,
        claim: &Claim,
        full: bool,
    ) -> bool {
        let mut s = self.state();
        if !claim.rows.is_empty() {
            s.swept = false;
        }
        match from {
            None => {
                metrics::histogram!(crate::relay::metrics::CLAIM_FROM_START_DURATION)
                    .record(elapsed.as_secs_f64());
                let began = Instant::now()
                    .checked_sub(elapsed)
                    .unwrap_or_else(Instant::now);
                s.last_full = Some((began, elapsed));
                s.rescan = false;
                s.sweep = false;
                if s.once && s.floor.is_none() {
                    s.floor = claim.first.map(Position::just_before);
                }
                if claim.passed_over {
                    s.hold(None);
                } else if full {
                    // A full claim from the start goes on from where it ended, behind the
                    // cursor perhaps (rows were waiting there).
                    s.cursor = claim.last;
                } else {
                    // A short one found everything up to the end: it stands for the sweep of a
                    // `relay --once` run, which would read again the entries this one just did
                    // (round 5 of `bench/snapshot.sh`, lease: 0.77-0.78 with both, 200k dead
                    // entries more).
                    s.cursor = s.cursor.max(claim.last);
                    s.swept = true;
                }
                false
            }
            Some(p) => {
                let at_floor = s.once && s.floor == Some(p);
                let sweep = at_floor && s.sweep;
                if sweep {
                    s.sweep = false;
                }
                if claim.passed_over {
                    s.hold(from);
                    return false;
                }
                if sweep && full {
                    s.cursor = claim.last;
                    return false;
                }
                // A claim from the floor that was not asked for as the sweep (a resumed run's
                // first) has covered the same ground.
                if at_floor {
                    s.swept = true;
                }
                s.cursor = s.cursor.max(claim.last);
                if full || sweep || s.rescan || s.sweep {
                    return false;
                }
                if s.rescan_due() {
                    s.rescan = true;
                    true
                } else if s.once && !s.swept {
                    s.sweep = true;
                    true
                } else {
                    false
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(id: i64) -> Position {
        Position {
            available_at: chrono::DateTime::from_timestamp(1_700_000_000 + id, 0).unwrap(),
            id,
        }
    }

    fn claim(last: Option<i64>) -> Claim {
        Claim {
            last: last.map(at),
            ..Claim::default()
        }
    }

    /// The claim start of a `relay --once` run.
    fn once() -> ClaimStart {
        let s = ClaimStart::default();
        s.run_once();
        s
    }

    /// The last claim from the start took `took` and was made long enough ago that one is due.
    fn rescan_due(s: &ClaimStart, took: Duration) {
        s.state().last_full = Some((Instant::now() - took * RESCAN_COST_FACTOR, took));
    }

    #[test]
    fn claims_go_on_from_the_cursor_and_rescan_from_the_start_when_due() {
        let s = ClaimStart::default();
        assert_eq!(s.next(), None, "the first claim starts at the start");
        let quick = Duration::from_millis(100);
        assert!(!s.after(None, quick, &claim(Some(10)), true));
        assert_eq!(s.next(), Some(at(10)));
        assert!(!s.after(Some(at(10)), quick, &claim(Some(20)), true));
        assert_eq!(s.next(), Some(at(20)));
        // Short, but the last claim from the start is recent: no rescan yet.
        assert!(!s.after(Some(at(20)), quick, &claim(Some(25)), false));
        assert_eq!(s.next(), Some(at(25)));
        // Once the bound has passed, the next claim starts at the start.
        rescan_due(&s, quick);
        assert_eq!(s.next(), None);
        // A short claim from the start keeps the cursor ahead.
        assert!(!s.after(None, quick, &claim(Some(3)), false));
        assert_eq!(s.next(), Some(at(25)));
        // A full one goes on from where it ended.
        rescan_due(&s, quick);
        assert!(!s.after(None, quick, &claim(Some(5)), true));
        assert_eq!(s.next(), Some(at(5)));
    }

    #[test]
    fn a_slow_rescan_spaces_the_next_one_out() {
        let s = ClaimStart::default();
        let slow = Duration::from_millis(200);
        s.after(None, slow, &claim(Some(1)), true);
        // 20 x 200 ms = 4 s: not due after 1 s.
        s.state().last_full = Some((Instant::now() - Duration::from_secs(1), slow));
        assert_eq!(s.next(), Some(at(1)));
        rescan_due(&s, slow);
        assert_eq!(s.next(), None);
    }

    fn taken(first: i64, last: i64) -> Claim {
        Claim {
            first: Some(at(first)),
            last: Some(at(last)),
            ..Claim::default()
        }
    }

    #[test]
    fn once_sweeps_from_its_first_row_after_a_short_claim_from_the_cursor() {
        let s = once();
        let quick = Duration::from_secs(60);
        assert!(!s.after(None, quick, &taken(5, 10), true));
        assert!(!s.after(Some(at(10)), quick, &claim(Some(20)), true));
        assert!(
            s.after(Some(at(20)), quick, &claim(Some(22)), false),
            "a short claim from the cursor is followed by a sweep"
        );
        let floor = at(5).just_before();
        assert_eq!(
            s.next(),
            Some(floor),
            "the sweep starts at the run's first row"
        );
        // A full sweep goes on from where it ended, and the next short claim sweeps again.
        assert!(!s.after(Some(floor), quick, &taken(7, 8), true));
        assert_eq!(s.next(), Some(at(8)));
        assert!(s.after(Some(at(8)), quick, &claim(None), false));
        assert_eq!(s.next(), Some(floor));
        // A short sweep ends the run (no further claim asked for), and so does a short claim
        // after it that took nothing (a step that was in flight beside it).
        assert!(!s.after(Some(floor), quick, &claim(None), false));
        assert_eq!(s.next(), Some(at(8)));
        assert!(!s.after(Some(at(8)), quick, &claim(None), false));
        assert_eq!(s.next(), Some(at(8)));
    }

    #[test]
    fn once_rescans_from_the_start_instead_when_one_is_due() {
        let s = once();
        let quick = Duration::from_millis(1);
        s.after(None, quick, &taken(5, 10), true);
        rescan_due(&s, quick);
        assert!(s.after(Some(at(10)), quick, &claim(Some(12)), false));
        assert_eq!(s.next(), None);
    }

    fn saved(id: i64, swept_ago: Duration, took: Duration) -> Saved {
        Saved::Floor(Floor {
            at: at(id),
            swept_ago,
            sweep_took: took,
        })
    }

    #[test]
    fn a_resumed_run_starts_at_the_saved_floor_and_claims_from_the_start_last_when_due() {
        let s = once();
        let took = Duration::from_millis(200);
        // The last claim from the start was 20 x 200 ms ago: one is due, but new events first.
        s.resume(saved(100, took * RESCAN_COST_FACTOR, took));
        assert_eq!(
            s.next(),
            Some(at(100)),
            "the first claim starts at the floor"
        );
        assert!(!s.after(Some(at(100)), took, &taken(101, 150), true));
        assert_eq!(s.next(), Some(at(150)));
        assert!(
            s.after(Some(at(150)), took, &claim(Some(160)), false),
            "a short claim from the cursor is followed by the claim from the start that is due"
        );
        assert_eq!(s.next(), None);
        let quick = Duration::from_millis(3);
        assert!(!s.after(None, quick, &claim(None), false));
        let save = s.to_save().expect("a drained run saves its position");
        assert_eq!(save.at, at(160));
        assert_eq!(
            save.sweep_took, quick,
            "the claim from the start it made is saved"
        );
        assert!(save.swept_ago < took);
    }

    #[test]
    fn a_resumed_run_whose_first_claim_is_short_ends_without_a_second_look_when_none_is_due() {
        let s = once();
        let took = Duration::from_millis(200);
        s.resume(saved(100, Duration::from_millis(10), took));
        assert_eq!(s.next(), Some(at(100)));
        assert!(
            !s.after(Some(at(100)), took, &taken(101, 101), false),
            "the claim from the floor was the sweep: the run ends"
        );
        let save = s.to_save().unwrap();
        assert_eq!(save.at, at(101));
        assert_eq!(
            save.sweep_took, took,
            "the earlier claim from the start is carried on"
        );
        assert!(save.swept_ago >= Duration::from_millis(10));
    }

    #[test]
    fn a_short_claim_from_the_start_stands_for_the_sweep() {
        let s = once();
        let took = Duration::from_millis(200);
        s.resume(saved(100, took * RESCAN_COST_FACTOR, took));
        assert!(s.after(Some(at(100)), took, &claim(Some(120)), false));
        assert_eq!(s.next(), None, "the claim from the start that is due");
        assert!(!s.after(None, took, &taken(101, 125), false));
        // A claim beside it (or the recheck after it) comes back short from the cursor: no
        // sweep from the floor follows.
        assert!(!s.after(Some(at(125)), took, &claim(None), false));
        assert_eq!(s.next(), Some(at(125)));
    }

    #[test]
    fn nothing_is_saved_without_the_table_or_while_rows_wait_behind_the_cursor() {
        let s = once();
        s.resume(Saved::NoTable);
        s.after(None, Duration::from_millis(1), &taken(1, 5), false);
        assert_eq!(s.to_save(), None, "an older schema: nothing saved");
        let s = once();
        s.resume(Saved::Empty);
        s.after(None, Duration::from_millis(1), &taken(1, 5), false);
        assert_eq!(s.to_save().map(|f| f.at), Some(at(5)));
        s.rescan();
        assert_eq!(
            s.to_save(),
            None,
            "rows given back: the next run starts before them"
        );
    }

    #[test]
    fn a_claim_that_left_large_rows_does_not_move_the_cursor_past_them() {
        let s = ClaimStart::default();
        let quick = Duration::from_secs(60);
        let left = |first, last| Claim {
            passed_over: true,
            ..taken(first, last)
        };
        s.after(None, quick, &taken(1, 10), true);
        assert!(!s.after(Some(at(10)), quick, &left(11, 20), true));
        assert_eq!(
            s.next(),
            Some(at(10)),
            "the next claim starts where this one did"
        );
        // From the start: the next claim starts at the start again.
        rescan_due(&s, quick);
        assert!(!s.after(None, quick, &left(1, 30), true));
        assert_eq!(s.next(), None);
    }
}
