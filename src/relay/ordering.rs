//! What a relay keeps for ordered delivery (`outboxctl ordering`): the switch as last read from
//! the database (re-read every [`REFRESH`]) and the cursor of its walk over the keys; and the
//! ordered publish, one lane per key.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::StreamExt;
use sqlx::PgConnection;

use crate::db::ordering::{self as sql, Cursor, Ordering};
use crate::event::Event;
use crate::sink::{Outcome, PublishCtl, Sink};

use super::RelayEvent;

/// How often a relay re-reads `outbox_ordering`: a change made by `ordering enable` or `disable`
/// reaches every running relay within this (plus the batch it is publishing).
pub const REFRESH: Duration = Duration::from_secs(1);

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

    pub fn cursor(&self) -> Cursor {
        self.inner
            .lock()
            .expect("ordering state lock")
            .cursor
            .clone()
    }

    /// Takes in a claim made from `from`: where the next one goes on, and whether it should be
    /// made at once. Past the last key the walk goes round to the first again, unless the pass
    /// that just ended (from the first key to the last, over as many claims as it took) claimed
    /// nothing: then every key was leased, locked, backing off or blocked, and claiming again at
    /// once would only spin (a `--once` run ends; a daemon waits).
    pub fn advance(&self, from: &Cursor, claim: &sql::OrderedClaim) -> bool {
        let mut inner = self.inner.lock().expect("ordering state lock");
        inner.pass_claimed += claim.rows.len() as u64;
        inner.cursor = claim.cursor.clone();
        let wrapped = claim.cursor == Cursor::default();
        let more = claim.more || (wrapped && *from != Cursor::default() && inner.pass_claimed > 0);
        if wrapped {
            inner.pass_claimed = 0;
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

    fn claim(rows: usize, cursor: Cursor, more: bool) -> OrderedClaim {
        let row = crate::event::Event {
            id: 1,
            tenant_id: uuid::Uuid::nil(),
            aggregate_type: "order".into(),
            aggregate_id: "a".into(),
            event_type: "e".into(),
            payload: "{}".into(),
            headers: "{}".into(),
            idempotency_key: "k".into(),
            created_at: chrono::Utc::now(),
            attempt_count: 0,
        };
        OrderedClaim {
            rows: vec![row; rows],
            cursor,
            more,
        }
    }

    #[test]
    fn the_walk_goes_round_again_only_after_a_pass_that_claimed_something() {
        let s = OrderingState::default();
        // A pass from the first key over two claims, the second reaching the end: it claimed, so
        // the keys before the cursor are worth another look at once.
        assert!(s.advance(&Cursor::default(), &claim(3, key("m"), true)));
        assert!(s.advance(&key("m"), &claim(0, Cursor::default(), false)));
        assert_eq!(s.cursor(), Cursor::default());
        // The next pass claims nothing anywhere: no spinning.
        assert!(s.advance(&Cursor::default(), &claim(0, key("m"), true)));
        assert!(!s.advance(&key("m"), &claim(0, Cursor::default(), false)));
        // A claim that covers every key from the first: the statement's own verdict.
        assert!(!s.advance(&Cursor::default(), &claim(2, Cursor::default(), false)));
        assert!(s.advance(&Cursor::default(), &claim(2, Cursor::default(), true)));
    }
}
