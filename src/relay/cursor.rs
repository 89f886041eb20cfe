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
//! against 6 ms, `bench/ab-bench.sh`). `relay --once` ends only after a claim from the start has
//! come back short, so it leaves nothing behind.
//!
//! The state is shared by the steps in flight at once (`--pipeline-depth`): a claim started
//! while another's rows are still locked starts after them instead of skipping them one by one.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::db::relay::{Claim, Position};

/// A claim from the start once this many times the last one's duration has passed.
pub const RESCAN_COST_FACTOR: u32 = 20;

/// Where the next claim starts; see the module docs.
#[derive(Debug)]
pub struct ClaimStart {
    state: Mutex<State>,
    /// `relay --once`: a claim from the cursor that comes back short is followed at once by one
    /// from the start.
    once: bool,
}

#[derive(Debug, Default)]
struct State {
    cursor: Option<Position>,
    /// When the last claim from the start began, and how long it took.
    last_full: Option<(Instant, Duration)>,
    /// The next claim starts from the start.
    rescan: bool,
}

impl State {
    fn rescan_due(&self) -> bool {
        match self.last_full {
            None => true,
            Some((at, took)) => at.elapsed() >= took * RESCAN_COST_FACTOR,
        }
    }
}

impl ClaimStart {
    pub fn new(once: bool) -> Self {
        Self {
            state: Mutex::new(State::default()),
            once,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Where the next claim starts: just after the cursor, or (`None`) at the start of the ready
    /// rows when there is no cursor yet, or a claim from the start is due.
    pub fn next(&self) -> Option<Position> {
        let s = self.state();
        if s.rescan || s.rescan_due() {
            None
        } else {
            s.cursor
        }
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
        match from {
            None => {
                metrics::histogram!(crate::relay::metrics::CLAIM_FROM_START_DURATION)
                    .record(elapsed.as_secs_f64());
                let began = Instant::now()
                    .checked_sub(elapsed)
                    .unwrap_or_else(Instant::now);
                s.last_full = Some((began, elapsed));
                s.rescan = false;
                // A full claim from the start goes on from where it ended, behind the cursor
                // perhaps (rows were waiting there); a short one found everything up to the end.
                s.cursor = if full {
                    claim.last
                } else {
                    s.cursor.max(claim.last)
                };
                false
            }
            Some(_) => {
                s.cursor = s.cursor.max(claim.last);
                if !full && !s.rescan && (self.once || s.rescan_due()) {
                    s.rescan = true;
                    return true;
                }
                false
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

    #[test]
    fn claims_go_on_from_the_cursor_and_rescan_from_the_start_when_due() {
        let s = ClaimStart::new(false);
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
        s.state().last_full = Some((Instant::now() - quick * RESCAN_COST_FACTOR, quick));
        assert_eq!(s.next(), None);
        // A short claim from the start keeps the cursor ahead.
        assert!(!s.after(None, quick, &claim(Some(3)), false));
        assert_eq!(s.next(), Some(at(25)));
        // A full one goes on from where it ended.
        s.state().last_full = Some((Instant::now() - quick * RESCAN_COST_FACTOR, quick));
        assert!(!s.after(None, quick, &claim(Some(5)), true));
        assert_eq!(s.next(), Some(at(5)));
    }

    #[test]
    fn a_slow_rescan_spaces_the_next_one_out() {
        let s = ClaimStart::new(false);
        let slow = Duration::from_millis(200);
        s.after(None, slow, &claim(Some(1)), true);
        // 20 x 200 ms = 4 s: not due after 1 s.
        s.state().last_full = Some((Instant::now() - Duration::from_secs(1), slow));
        assert_eq!(s.next(), Some(at(1)));
        s.state().last_full = Some((Instant::now() - slow * RESCAN_COST_FACTOR, slow));
        assert_eq!(s.next(), None);
    }

    #[test]
    fn once_rescans_after_every_short_claim_from_the_cursor() {
        let s = ClaimStart::new(true);
        let quick = Duration::from_secs(60);
        s.after(None, quick, &claim(Some(10)), true);
        assert!(!s.after(Some(at(10)), quick, &claim(Some(20)), true));
        assert!(
            s.after(Some(at(20)), quick, &claim(Some(22)), false),
            "a short claim from the cursor is followed by one from the start"
        );
        assert_eq!(s.next(), None);
        // That one coming back short ends the run (no further claim asked for).
        assert!(!s.after(None, quick, &claim(None), false));
        assert_eq!(s.next(), Some(at(22)));
    }
}
