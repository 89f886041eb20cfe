//! What a relay keeps for ordered delivery (`outboxctl ordering`): the switch as last read from
//! the database (re-read every [`REFRESH`]), the cursor of its walk over the keys and the walk's
//! id floor; and the ordered publish, one lane per key.
//!
//! **The floor** (issue 30). The walk reads `outbox_key_pending_idx` in key order, and while a
//! long snapshot is held (a `pg_dump`, a long report) VACUUM cannot remove the entries of the
//! rows published since: every pass over the keys read each of them and its row (round 5 of
//! `ORDERED=1 bench/snapshot.sh` at 0.24x in tx mode, 0.12x in lease mode, against none held).
//! So the walk skips, inside the index, the entries of ids at or below a floor under which no row
//! was pending when the relay last looked: at the end of a pass over every key, the floor rises to
//! just below the least id the pass found pending, and at most to the greatest id there was when
//! a recent pass began whose running transactions have all ended since (by the claims'
//! snapshots: a producer's row not yet committed then is not put below the floor). A row that
//! becomes pending below the floor (a requeue, a newly ordered type, a row whose id was taken
//! before its transaction had an xid) is found by a pass without the floor
//! ([`FULL_PASS_COST_FACTOR`] times as long after the last one as that one's claims took, the
//! relay's rule for a claim from the start, [`crate::relay::cursor`]; at most
//! [`FULL_PASS_AT_MOST`]); until then its key is not
//! claimed at all (the claim checks each head for a pending row of its key at or below the floor),
//! so no later row of the key overtakes it. `relay --once` saves the floor, and that pass's time
//! and duration, in `outbox_relay_floor` (migration 11) for the next run, and makes a due pass
//! without the floor only after one with it found nothing more: new events first.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use sqlx::PgConnection;

use crate::db::floor::KeyFloor;
use crate::db::ordering::{self as sql, Cursor, Ordering, WalkStart};
use crate::event::Event;
use crate::sink::{Outcome, PublishCtl, Sink};

use super::RelayEvent;

/// How often a relay re-reads `outbox_ordering`: a change made by `ordering enable` or `disable`
/// reaches every running relay within this (plus the batch it is publishing).
pub const REFRESH: Duration = Duration::from_secs(1);

/// A pass without the floor once this many times the last one's claims took has passed since it
/// began (the unordered claim's rule, [`crate::relay::cursor::RESCAN_COST_FACTOR`]), or
/// [`FULL_PASS_AT_MOST`], whichever comes first.
pub const FULL_PASS_COST_FACTOR: u32 = crate::relay::cursor::RESCAN_COST_FACTOR;

/// The longest a daemon goes without a pass without the floor. A pass over a large backlog claims
/// for as long as the drain lasts, and 20 times that would leave a requeued event below the floor
/// waiting for hours; with a snapshot held, a pass over 3.6M dead entries (an hour's `pg_dump` at
/// 1k events/s) costs a few seconds a minute.
pub const FULL_PASS_AT_MOST: Duration = Duration::from_secs(60);

/// The relay's view of the switch and its walk cursor.
#[derive(Debug, Default)]
pub struct OrderingState {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ordering: Ordering,
    read_at: Option<Instant>,
    cursor: Cursor,
    /// Rows claimed since the walk last started from the first key.
    pass_claimed: u64,
    /// The walk skips the entries of ids at or below this (0: none).
    floor: i64,
    /// The pass under way.
    pass: Pass,
    /// The greatest id there was when recent passes began, each with its snapshot's `xmax`
    /// (oldest first).
    tops: Vec<(i64, i64)>,
    /// When the last pass without the floor began, and how long its claims took.
    last_full: Option<(Instant, Duration)>,
    /// `relay --once`: a due pass without the floor waits until a pass with it found nothing.
    once: bool,
    /// The schema can keep the floor for the next run (migration 11).
    saves: bool,
    /// An unordered claim beside the ordered one took nothing: when it began and how long it
    /// took ([`OrderingState::unordered_due`]).
    unordered_rest: Option<(Instant, Duration)>,
    /// [`OrderingState::wake_unordered`] asked for an unordered claim alone next.
    woken: bool,
}

/// What a pass over the keys has found so far.
#[derive(Debug, Default)]
struct Pass {
    /// It has made a claim.
    begun: bool,
    /// It runs without the floor.
    full: bool,
    /// The least id its walks found pending.
    min: Option<i64>,
    /// The greatest id there was when it began, and its first snapshot's `xmax`.
    top: Option<(i64, i64)>,
    /// The last claim's snapshot's `xmin`.
    xmin: Option<i64>,
    /// Its claims' time.
    took: Duration,
}

impl Inner {
    fn full_due(&self) -> bool {
        match self.last_full {
            None => true,
            Some((at, took)) => {
                at.elapsed() >= (took * FULL_PASS_COST_FACTOR).min(FULL_PASS_AT_MOST)
            }
        }
    }

    /// A pass ended (the walk went past the last key): the floor rises to below the least id it
    /// found pending, and at most to the greatest id there was when a recent pass began, once
    /// every transaction that was running then has ended (its snapshot's `xmax` is at or below
    /// the last claim's `xmin`): a row of such a transaction that commits later would fall
    /// below the floor.
    fn pass_ended(&mut self) {
        const KEPT: usize = 8;
        let pass = std::mem::take(&mut self.pass);
        if pass.full {
            let began = Instant::now()
                .checked_sub(pass.took)
                .unwrap_or_else(Instant::now);
            self.last_full = Some((began, pass.took));
        }
        self.tops.extend(pass.top);
        let xmin = pass.xmin.unwrap_or(i64::MIN);
        let settled = self.tops.iter().rposition(|&(_, xmax)| xmax <= xmin);
        let top = settled.map(|i| self.tops[i].0);
        if let Some(i) = settled {
            self.tops.drain(..i);
        }
        if self.tops.len() > KEPT {
            self.tops.drain(..self.tops.len() - KEPT);
        }
        let below = pass.min.map_or(i64::MAX, |m| m - 1);
        match (top, pass.full) {
            // A pass with the floor cannot see below it: it can only raise it.
            (Some(top), false) => self.floor = below.min(top).max(self.floor),
            (Some(top), true) => self.floor = below.min(top),
            (None, true) => self.floor = self.floor.min(below),
            (None, false) => {}
        }
    }
}

impl OrderingState {
    /// The switch, re-read from the database when older than [`REFRESH`] (a schema without
    /// migration 6 has no ordering), and the event to log when it changed.
    pub async fn current(
        &self,
        conn: &mut PgConnection,
    ) -> sqlx::Result<(Ordering, Option<RelayEvent>)> {
        {
            let inner = self.inner.lock().expect("ordering state lock");
            if inner.read_at.is_some_and(|t| t.elapsed() < REFRESH) {
                return Ok((inner.ordering.clone(), None));
            }
        }
        let ordering = sql::load(conn).await?.unwrap_or_default();
        let mut inner = self.inner.lock().expect("ordering state lock");
        let changed =
            inner.ordering != ordering || (inner.read_at.is_none() && ordering.is_active());
        inner.ordering = ordering.clone();
        inner.read_at = Some(Instant::now());
        let event = changed.then(|| RelayEvent::OrderingChanged {
            all: ordering.all,
            types: ordering.types.clone(),
        });
        Ok((ordering, event))
    }

    /// Whether the switch was on at the last read.
    pub fn is_active(&self) -> bool {
        self.inner
            .lock()
            .expect("ordering state lock")
            .ordering
            .is_active()
    }

    /// Where the next claim's walk starts: the cursor, and the floor unless the pass it begins
    /// (or goes on with) runs without it.
    pub fn start(&self) -> WalkStart {
        let mut inner = self.inner.lock().expect("ordering state lock");
        if !inner.pass.begun && inner.cursor == Cursor::default() {
            inner.pass.full = inner.floor == 0 || (!inner.once && inner.full_due());
        }
        inner.pass.begun = true;
        WalkStart {
            cursor: inner.cursor.clone(),
            floor: if inner.pass.full { 0 } else { inner.floor },
        }
    }

    #[cfg(test)]
    pub fn cursor(&self) -> Cursor {
        self.inner
            .lock()
            .expect("ordering state lock")
            .cursor
            .clone()
    }

    /// Whether a step makes the unordered claim beside the ordered one. The unordered claim
    /// skips the ordered types' rows one by one (its index, `outbox_ready_idx`, has no type):
    /// with an ordered backlog, a claim that found nothing read every pending ordered row, and
    /// dead entries a held snapshot keeps, at every step (round 1 of a drain of one ordered type
    /// at 11k events/s, against 40k with every type ordered and no unordered claim). So after one
    /// that took nothing, the next waits until [`FULL_PASS_COST_FACTOR`] times as long as it took
    /// has passed (they then cost at most 1/20 of the relay's time), or until the ordered claim
    /// comes back short ([`OrderingState::wake_unordered`]; that step makes the unordered claim
    /// alone).
    pub fn unordered_due(&self) -> bool {
        let inner = self.inner.lock().expect("ordering state lock");
        match inner.unordered_rest {
            None => true,
            Some((at, took)) => at.elapsed() >= took * FULL_PASS_COST_FACTOR,
        }
    }

    /// Records an unordered claim beside the ordered one that began `took` ago: `found`, it took
    /// rows (or was cut short by its budget).
    pub fn unordered_claimed(&self, found: bool, took: Duration) {
        let mut inner = self.inner.lock().expect("ordering state lock");
        inner.unordered_rest = (!found).then(|| {
            let began = Instant::now()
                .checked_sub(took)
                .unwrap_or_else(Instant::now);
            (began, took)
        });
    }

    /// The next step makes the unordered claim whatever the rest: the ordered claim came back
    /// short while the unordered one rested, so a run does not end (nor a daemon idle) without
    /// having looked for unordered events.
    pub fn wake_unordered(&self) {
        let mut inner = self.inner.lock().expect("ordering state lock");
        inner.unordered_rest = None;
        inner.woken = true;
    }

    /// Whether the next step makes the unordered claim alone, because the ordered claim just
    /// came back short ([`OrderingState::wake_unordered`]): another ordered claim at once would
    /// walk the keys again for nothing (one pass over the key index more per `relay --once` run).
    pub fn take_woken(&self) -> bool {
        std::mem::take(&mut self.inner.lock().expect("ordering state lock").woken)
    }

    /// The claims from now on are those of a `relay --once` run: a due pass without the floor
    /// comes after a pass with it that found nothing.
    pub fn run_once(&self) {
        self.inner.lock().expect("ordering state lock").once = true;
    }

    /// A `relay --once` run goes on with the floor an earlier run saved (`None`: none saved);
    /// `saves`: the schema can keep this run's for the next.
    pub fn resume(&self, saved: Option<KeyFloor>, saves: bool) {
        let mut inner = self.inner.lock().expect("ordering state lock");
        inner.saves = saves;
        if let Some(k) = saved {
            inner.floor = k.id.max(0);
            inner.last_full = Instant::now()
                .checked_sub(k.swept_ago)
                .map(|began| (began, k.sweep_took));
        }
    }

    /// What a `relay --once` run leaves for the next: the floor and its last pass without it.
    pub fn to_save(&self) -> Option<KeyFloor> {
        let inner = self.inner.lock().expect("ordering state lock");
        let (began, took) = inner.last_full?;
        (inner.saves && inner.floor > 0).then(|| KeyFloor {
            id: inner.floor,
            swept_ago: began.elapsed(),
            sweep_took: took,
        })
    }

    /// Ordered rows from id `min` on that a claim took may be pending again (a failed publish
    /// scheduled for a retry, rows given back, a rollback, a lost claim). The claim left the
    /// heads it took out of its [`sql::OrderedClaim::walk_min`], so the floor may have risen past
    /// them; it goes back below `min` at once, and the pass under way ends no higher.
    pub fn gave_back(&self, min: i64) {
        let mut inner = self.inner.lock().expect("ordering state lock");
        if inner.floor > 0 {
            inner.floor = inner.floor.min(min.saturating_sub(1)).max(0);
        }
        inner.pass.min = Some(inner.pass.min.map_or(min, |p| p.min(min)));
    }

    /// Takes in a claim made from `from` that took `took`: where the next one goes on, and
    /// whether it should be made at once. Past the last key the walk goes round to the first
    /// again, unless the pass that just ended (from the first key to the last, over as many
    /// claims as it took) claimed nothing: then every key was leased, locked, backing off or
    /// blocked, and claiming again at once would only spin (a `--once` run ends; a daemon waits).
    /// A `--once` run goes round once more without the floor when such a pass is due.
    pub fn advance(&self, from: &WalkStart, claim: &sql::OrderedClaim, took: Duration) -> bool {
        let mut inner = self.inner.lock().expect("ordering state lock");
        inner.pass_claimed += claim.rows.len() as u64;
        inner.cursor = claim.cursor.clone();
        inner.pass.took += took;
        if from.cursor == Cursor::default() && inner.pass.top.is_none() {
            inner.pass.top = claim.top.zip(claim.xids.map(|(_, xmax)| xmax));
        }
        if let Some((xmin, _)) = claim.xids {
            inner.pass.xmin = Some(xmin);
        }
        // A claim that began above today's floor (it was lowered while the claim ran:
        // [`OrderingState::gave_back`]) did not read the ids between the two.
        let unread = (from.floor > inner.floor).then_some(inner.floor + 1);
        for m in [claim.walk_min, unread].into_iter().flatten() {
            inner.pass.min = Some(inner.pass.min.map_or(m, |p| p.min(m)));
        }
        let wrapped = claim.cursor == Cursor::default();
        // A `--once` run goes round once more after any pass that claimed: that pass, finding
        // what this one published gone, is what raises the floor for the next run.
        let mut more = claim.more
            || (wrapped
                && inner.pass_claimed > 0
                && (from.cursor != Cursor::default() || inner.once));
        if wrapped {
            let was_full = inner.pass.full;
            inner.pass_claimed = 0;
            inner.pass_ended();
            if !more && inner.once && !was_full && inner.full_due() {
                inner.pass.full = true;
                inner.pass.begun = true;
                more = true;
            }
        }
        more
    }
}

/// Publishes `events` (sorted by key, then id: see [`sql::claim`]) in order within each key and
/// in parallel across keys: one lane per key, at most `ctl.concurrency` lanes at once. A lane
/// publishes its events one after another and stops at the first that is not published; the
/// rest of its key is `NotStarted` (given back untouched), so no later event of a key is ever
/// published before an earlier one has been.
pub async fn publish_ordered(sink: &dyn Sink, events: &[Event], ctl: &PublishCtl) -> Vec<Outcome> {
    let mut lanes: Vec<std::ops::Range<usize>> = Vec::new();
    for (i, e) in events.iter().enumerate() {
        match lanes.last_mut() {
            Some(r) if same_key(&events[r.start], e) => r.end = i + 1,
            _ => lanes.push(i..i + 1),
        }
    }
    let jobs = lanes.into_iter().map(|range| async move {
        let mut out = Vec::with_capacity(range.len());
        let mut stopped = false;
        for e in &events[range.clone()] {
            if stopped {
                out.push(Outcome::NotStarted);
                continue;
            }
            let o = sink
                .publish(std::slice::from_ref(e), ctl)
                .await
                .pop()
                .unwrap_or(Outcome::NotStarted);
            stopped = o != Outcome::Published;
            out.push(o);
        }
        (range.start, out)
    });
    let mut done: Vec<(usize, Vec<Outcome>)> = futures::stream::iter(jobs)
        .buffer_unordered(ctl.concurrency.max(1))
        .collect()
        .await;
    done.sort_by_key(|(start, _)| *start);
    done.into_iter().flat_map(|(_, o)| o).collect()
}

fn same_key(a: &Event, b: &Event) -> bool {
    a.tenant_id == b.tenant_id
        && a.aggregate_type == b.aggregate_type
        && a.aggregate_id == b.aggregate_id
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::ordering::OrderedClaim;

    fn key(id: &str) -> Cursor {
        Cursor {
            aggregate_type: "order".into(),
            aggregate_id: id.into(),
            ..Cursor::default()
        }
    }

    fn from(cursor: Cursor) -> WalkStart {
        WalkStart { cursor, floor: 0 }
    }

    fn claim(rows: usize, cursor: Cursor, more: bool) -> OrderedClaim {
        let row = crate::event::Event::sample();
        OrderedClaim {
            rows: vec![row; rows],
            cursor,
            more,
            ..OrderedClaim::default()
        }
    }

    /// A claim that read pending entries from `min` on, in a table whose greatest id was `top`,
    /// with no other transaction running (its snapshot's xmin is its xmax, here `top`).
    fn seen(rows: usize, cursor: Cursor, min: Option<i64>, top: i64) -> OrderedClaim {
        OrderedClaim {
            walk_min: min,
            top: Some(top),
            xids: Some((top, top)),
            ..claim(rows, cursor, false)
        }
    }

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_walk_goes_round_again_only_after_a_pass_that_claimed_something() {
        let s = OrderingState::default();
        // A pass from the first key over two claims, the second reaching the end: it claimed, so
        // the keys before the cursor are worth another look at once.
        assert!(s.advance(&from(Cursor::default()), &claim(3, key("m"), true), MS));
        assert!(s.advance(&from(key("m")), &claim(0, Cursor::default(), false), MS));
        assert_eq!(s.cursor(), Cursor::default());
        // The next pass claims nothing anywhere: no spinning.
        assert!(s.advance(&from(Cursor::default()), &claim(0, key("m"), true), MS));
        assert!(!s.advance(&from(key("m")), &claim(0, Cursor::default(), false), MS));
        // A claim that covers every key from the first: the statement's own verdict.
        let all = claim(2, Cursor::default(), false);
        assert!(!s.advance(&from(Cursor::default()), &all, MS));
        let more = claim(2, Cursor::default(), true);
        assert!(s.advance(&from(Cursor::default()), &more, MS));
    }

    /// One pass of a single claim over every key, whose claim took 10 s (so a pass without
    /// the floor is not due again during the test).
    fn pass(s: &OrderingState, rows: usize, min: Option<i64>, top: i64) -> (WalkStart, bool) {
        let start = s.start();
        let took = Duration::from_secs(10);
        let more = s.advance(&start, &seen(rows, Cursor::default(), min, top), took);
        (start, more)
    }

    #[test]
    fn the_floor_rises_below_what_was_pending_and_at_most_to_a_settled_greatest_id() {
        let s = OrderingState::default();
        // No floor yet: the first pass runs without one; it saw ids 5.. pending, 100 the greatest.
        assert_eq!(pass(&s, 3, Some(5), 100).0.floor, 0);
        assert_eq!(s.start().floor, 4, "below the least id it found pending");
        s.inner.lock().unwrap().pass = Pass::default();
        // A pass that finds nothing pending raises it to the greatest id there was.
        pass(&s, 0, None, 150);
        assert_eq!(s.start().floor, 150);
    }

    #[test]
    fn a_transaction_running_when_a_pass_began_keeps_the_floor_below_its_ids() {
        let s = OrderingState::default();
        pass(&s, 0, None, 100);
        assert_eq!(s.start().floor, 100);
        // A pass begins (greatest id 150) while transaction 40 runs (xmin 40, xmax 60): its row,
        // not visible yet, may have an id below 150.
        let running = OrderedClaim {
            top: Some(150),
            xids: Some((40, 60)),
            ..claim(0, Cursor::default(), false)
        };
        s.advance(&s.start(), &running, MS);
        assert_eq!(s.start().floor, 100, "not raised while it may still commit");
        // The next pass's claim sees transaction 40 ended (xmin 61): the first pass's 150 holds.
        let later = OrderedClaim {
            top: Some(160),
            xids: Some((61, 70)),
            ..claim(0, Cursor::default(), false)
        };
        s.advance(&s.start(), &later, MS);
        assert_eq!(s.start().floor, 150);
    }

    #[test]
    fn a_pass_without_the_floor_falls_due_and_may_lower_it() {
        let s = OrderingState::default();
        pass(&s, 0, None, 100);
        assert_eq!(
            s.start().floor,
            100,
            "a pass without the floor is not due yet"
        );
        // Its claims took 1 ms: 20 ms later a pass without the floor is due.
        s.inner.lock().unwrap().last_full = Some((Instant::now() - MS * 40, MS));
        s.inner.lock().unwrap().pass = Pass::default();
        let (start, _) = pass(&s, 1, Some(42), 300);
        assert_eq!(start.floor, 0, "the due pass runs without the floor");
        // It found id 42 pending (a late commit, a requeue): the floor goes below it.
        assert_eq!(s.start().floor, 41);
    }

    #[test]
    fn a_once_run_makes_the_due_pass_without_the_floor_last() {
        let s = OrderingState::default();
        s.run_once();
        s.resume(
            Some(KeyFloor {
                id: 500,
                swept_ago: Duration::from_secs(3600),
                sweep_took: MS,
            }),
            true,
        );
        // New events first: the run's first pass keeps the floor although a full pass is due.
        let (start, more) = pass(&s, 0, None, 600);
        assert_eq!(start.floor, 500);
        assert!(more, "then it goes round once more, without the floor");
        let (start, more) = pass(&s, 0, None, 600);
        assert_eq!(start.floor, 0);
        assert!(!more);
        let saved = s.to_save().expect("a floor to save");
        assert_eq!(saved.id, 600, "nothing pending: up to the greatest id");
        assert_eq!(
            saved.sweep_took,
            Duration::from_secs(10),
            "the pass without the floor"
        );
    }

    #[test]
    fn rows_given_back_lower_the_floor_and_a_claim_begun_above_it_does_not_raise_it_again() {
        let s = OrderingState::default();
        pass(&s, 0, None, 100);
        assert_eq!(s.start().floor, 100);
        s.inner.lock().unwrap().pass = Pass::default();
        // A claim begins with the floor at 100; meanwhile a step gives back ids from 60 on (a
        // failed publish retried later): the floor goes below them at once.
        let begun = s.start();
        s.gave_back(60);
        assert_eq!(s.inner.lock().unwrap().floor, 59);
        // A claim beside it ends that pass, having found them pending.
        s.advance(&s.start(), &seen(0, Cursor::default(), Some(60), 120), MS);
        assert_eq!(s.inner.lock().unwrap().floor, 59);
        // The claim begun above it ends the next pass having found nothing pending above 100:
        // it did not read ids 60 to 100, so the floor stays.
        s.advance(&begun, &seen(0, Cursor::default(), None, 120), MS);
        assert_eq!(s.start().floor, 59);
    }
}
