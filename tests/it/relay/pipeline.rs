//! `--pipeline-depth`: the loops keep several steps in flight, the next batch claimed while the
//! previous one publishes. Against the real database, with a sink that holds the batches it is
//! given until the test lets them go (so "two batches in flight" is a fact the test can wait
//! for), and the real binary killed with two batches published and unsettled.

use std::collections::HashSet;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxctl::relay::daemon::{DaemonSettings, OnceLimits};
use outboxctl::relay::{Backoff, Mode, Relay, RelayConfig, Report};
use outboxctl::sink::memory::MemorySink;
use outboxctl::sink::{Event, Outcome, PublishCtl, Sink, SinkError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::support::relay_to_file;
use crate::support::{ids_in_file, signal, stderr, wait_until, TestDb};

const MODES: [Mode; 2] = [Mode::Lease, Mode::Tx];
const BATCH: u32 = 100;

/// A [`MemorySink`] that keeps each batch in its hands until the gate is open, and records how
/// many batches it held at once.
struct HoldSink {
    inner: MemorySink,
    gate: watch::Receiver<bool>,
    in_hand: AtomicUsize,
    /// (batch size, batches in hand with this one) of every publish, in arrival order.
    calls: Mutex<Vec<(usize, usize)>>,
}

impl HoldSink {
    fn new(open: bool) -> (Arc<Self>, watch::Sender<bool>) {
        let (tx, rx) = watch::channel(open);
        let sink = Arc::new(Self {
            inner: MemorySink::default(),
            gate: rx,
            in_hand: AtomicUsize::new(0),
            calls: Mutex::new(Vec::new()),
        });
        (sink, tx)
    }

    fn in_hand(&self) -> usize {
        self.in_hand.load(Ordering::SeqCst)
    }

    fn calls(&self) -> Vec<(usize, usize)> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Sink for HoldSink {
    async fn publish(&self, events: &[Event], ctl: &PublishCtl) -> Vec<Outcome> {
        let now = self.in_hand.fetch_add(1, Ordering::SeqCst) + 1;
        self.calls.lock().unwrap().push((events.len(), now));
        let mut gate = self.gate.clone();
        let _ = gate.wait_for(|open| *open).await;
        let out = self.inner.publish(events, ctl).await;
        self.in_hand.fetch_sub(1, Ordering::SeqCst);
        out
    }

    fn describe(&self) -> String {
        "hold (test double)".into()
    }
}

async fn relay(db: &TestDb, sink: Arc<dyn Sink>, mode: Mode, depth: u32) -> Relay {
    Relay {
        db: outboxctl::db::Session::new(
            outboxctl::db::pool_for_relay(&db.config(), 3 + depth, true, Duration::from_secs(30))
                .await
                .unwrap(),
            Default::default(),
        ),
        sink,
        cfg: RelayConfig {
            mode,
            batch_size: BATCH,
            batch_bytes: outboxctl::relay::DEFAULT_BATCH_BYTES,
            concurrency: 8,
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(5),
            max_attempts: 5,
            backoff: Backoff {
                base: Duration::from_millis(20),
                max: Duration::from_millis(50),
            },
            shutdown_grace: Duration::from_secs(5),
            failpoint: None,
            pipeline_depth: depth,
        },
        ordering: Default::default(),
        sizing: Default::default(),
        start: outboxctl::relay::cursor::ClaimStart::default(),
        log: Default::default(),
    }
}

fn settings() -> DaemonSettings {
    DaemonSettings {
        poll_interval: Duration::from_millis(200),
        channel: "outbox_test_unused".into(),
        heartbeat: Duration::from_secs(3600),
        health: Arc::new(outboxctl::relay::metrics::Health::new(Duration::from_secs(
            60,
        ))),
    }
}

/// Rows of claims still open: lease mode, rows under a live lease; tx mode, rows whose visible
/// version a transaction running now has updated (the claim's). Read without locking a row: a
/// probe `FOR UPDATE SKIP LOCKED` would hold the free rows for the length of its statement, and
/// a relay claim made meanwhile would skip them, come back short and end the backlog's overlap
/// (the test then waited for a second claim that never came: a flake under the full suite's load).
async fn open_claim_rows(db: &TestDb, mode: Mode) -> i64 {
    match mode {
        Mode::Lease => {
            db.scalar(
                "SELECT count(*) FROM outbox WHERE locked_until > now() AND published_at IS NULL",
            )
            .await
        }
        Mode::Tx => {
            db.scalar(
                "SELECT count(*) FROM outbox
                  WHERE published_at IS NULL
                    AND xmax::text IN (SELECT backend_xid::text FROM pg_stat_activity
                                        WHERE backend_xid IS NOT NULL)",
            )
            .await
        }
        Mode::Log => unreachable!("log mode claims no rows: it reads pages"),
    }
}

/// Lease mode: the claims whose lease is live (one token each).
async fn lease_tokens(db: &TestDb) -> i64 {
    db.scalar("SELECT count(DISTINCT claim_token) FROM outbox WHERE locked_until > now() AND published_at IS NULL")
        .await
}

async fn published(db: &TestDb) -> i64 {
    db.scalar("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
        .await
}

/// Depth 2: while the first batch is held in the sink, the relay claims the second one (a second
/// claim token, or a second open transaction, in the database) and hands it to the sink too.
/// Depth 1 never does (the wait for the second claim times out).
#[tokio::test]
async fn depth_2_claims_the_next_batch_while_one_publishes() {
    for mode in MODES {
        let db = TestDb::with_backlog(1000).await;
        let (sink, gate) = HoldSink::new(false);
        let r = relay(&db, sink.clone(), mode, 2).await;
        let run = tokio::spawn(async move {
            outboxctl::relay::daemon::once(&r, OnceLimits::default(), &CancellationToken::new())
                .await
        });
        wait_until(
            Duration::from_secs(60),
            "a second batch claimed while the first is held",
            || async { open_claim_rows(&db, mode).await == 200 && sink.in_hand() == 2 },
        )
        .await;
        if mode == Mode::Lease {
            assert_eq!(lease_tokens(&db).await, 2, "two claims, two tokens");
        }
        assert_eq!(sink.calls(), [(100, 1), (100, 2)], "{mode:?}");
        gate.send(true).unwrap();
        let report = run.await.unwrap().unwrap();
        assert_eq!((report.claimed, report.published), (1000, 1000), "{mode:?}");
        let ids: HashSet<i64> = sink.inner.ids().into_iter().collect();
        assert_eq!(ids.len(), 1000, "{mode:?}: every event once");
        assert_eq!(sink.inner.ids().len(), 1000, "{mode:?}: none twice");
        assert!(
            sink.calls().iter().all(|&(_, held)| held <= 2),
            "{mode:?}: never more than two batches in flight: {:?}",
            sink.calls()
        );
        assert_eq!(published(&db).await, 1000, "{mode:?}");
        let leased = db.count("locked_until IS NOT NULL").await;
        assert_eq!(leased, 0, "{mode:?}: no lease left");
    }
}

/// A `--once` run passes over rows another transaction holds locked (an operator's edit, a
/// query `FOR UPDATE`, another relay's claim it then gives back). When the lock goes during the
/// run, the rows are behind the claim cursor: the run's sweep from its first row claims them
/// before it ends, so a cron run leaves nothing behind that was free before it ended. The
/// dead rows a held snapshot keeps before the ready ones make a claim from the start slow
/// enough (200k index entries) that none falls due during the run: only the sweep finds them.
#[tokio::test]
async fn once_claims_what_was_locked_behind_its_cursor_before_it_ends() {
    let db = TestDb::new().await;
    sqlx::query(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key, available_at)
         SELECT '00000000-0000-0000-0000-000000000001', 'a', 'dead', 'e', '{}', 'dead-' || g,
                now() - interval '1 day'
           FROM generate_series(1, 200000) g",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    // Connections of their own, closed (so their transactions end) when a failed assertion
    // drops them, before the test's schema is dropped.
    let mut snapshot = db.pool.acquire().await.unwrap().detach();
    for sql in [
        "BEGIN ISOLATION LEVEL REPEATABLE READ",
        "SELECT count(*) FROM outbox",
    ] {
        sqlx::query(sql).execute(&mut snapshot).await.unwrap();
    }
    sqlx::query("UPDATE outbox SET published_at = now()")
        .execute(&db.pool)
        .await
        .unwrap();
    for mode in MODES {
        for depth in [1, 2] {
            let what = format!("{mode:?} depth {depth}");
            let first: i64 = db
                .scalar(&format!(
                    "WITH n AS (
                       INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type,
                                           payload, idempotency_key)
                       SELECT '00000000-0000-0000-0000-000000000001', 'order', 'o-' || g,
                              'order.placed', jsonb_build_object('n', g), '{what}-' || g
                         FROM generate_series(1, 300) g
                       RETURNING id)
                     SELECT min(id) FROM n"
                ))
                .await;
            let mut locker = db.pool.acquire().await.unwrap().detach();
            sqlx::query("BEGIN").execute(&mut locker).await.unwrap();
            sqlx::query("SELECT id FROM outbox WHERE id BETWEEN $1 + 50 AND $1 + 60 FOR UPDATE")
                .bind(first)
                .execute(&mut locker)
                .await
                .unwrap();
            let (sink, gate) = HoldSink::new(false);
            let r = relay(&db, sink.clone(), mode, depth).await;
            let run = tokio::spawn(async move {
                outboxctl::relay::daemon::once(&r, OnceLimits::default(), &CancellationToken::new())
                    .await
            });
            // Every claim so far passed over the locked rows (the first took the rows around
            // them).
            wait_until(
                Duration::from_secs(30),
                "the first batches in hand",
                || async { sink.in_hand() == depth as usize },
            )
            .await;
            sqlx::query("COMMIT").execute(&mut locker).await.unwrap();
            gate.send(true).unwrap();
            let report = run.await.unwrap().unwrap();
            assert_eq!(report.published, 300, "{what}");
            let left = db.count("published_at IS NULL").await;
            assert_eq!(left, 0, "{what}: nothing left behind");
            let ids = sink.inner.ids();
            assert_eq!(ids.len(), 300, "{what}: none twice");
            assert_eq!(ids.iter().collect::<HashSet<_>>().len(), 300, "{what}");
        }
    }
    sqlx::query("ROLLBACK")
        .execute(&mut snapshot)
        .await
        .unwrap();
}

/// `--max-events` with two steps in flight: the budget is split between them, so the run
/// claims exactly what was asked, not a batch more.
#[tokio::test]
async fn depth_2_never_claims_past_max_events() {
    for mode in MODES {
        let db = TestDb::with_backlog(1000).await;
        let (sink, _gate) = HoldSink::new(true);
        let r = relay(&db, sink.clone(), mode, 2).await;
        let limits = OnceLimits {
            max_events: Some(250),
            ..OnceLimits::default()
        };
        let report = outboxctl::relay::daemon::once(&r, limits, &CancellationToken::new())
            .await
            .unwrap();
        assert_eq!((report.claimed, report.published), (250, 250), "{mode:?}");
        assert_eq!(published(&db).await, 250, "{mode:?}");
        let touched: i64 = db
            .scalar(
                "SELECT count(*) FROM outbox WHERE attempt_count > 0 OR locked_until IS NOT NULL",
            )
            .await;
        assert_eq!(touched, 250, "{mode:?}: no row claimed past the budget");
        let sizes: Vec<usize> = sink.calls().iter().map(|c| c.0).collect();
        assert_eq!(sizes.iter().sum::<usize>(), 250, "{mode:?}: {sizes:?}");
    }
}

/// Shutdown with two batches in the sink: nothing new is claimed, both batches are published
/// and settled, and the daemon returns.
#[tokio::test]
async fn shutdown_with_two_batches_in_flight_settles_both() {
    for mode in MODES {
        let db = TestDb::with_backlog(1000).await;
        let (sink, gate) = HoldSink::new(false);
        let r = relay(&db, sink.clone(), mode, 2).await;
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let run = tokio::spawn(async move {
            outboxctl::relay::daemon::daemon(&r, &settings(), &stop)
                .await
                .expect("the daemon ends well")
        });
        wait_until(
            Duration::from_secs(20),
            "two batches in the sink",
            || async { sink.in_hand() == 2 },
        )
        .await;
        shutdown.cancel();
        gate.send(true).unwrap();
        let report: Report = tokio::time::timeout(Duration::from_secs(20), run)
            .await
            .expect("the daemon returns after shutdown")
            .unwrap();
        assert_eq!((report.claimed, report.published), (200, 200), "{mode:?}");
        assert_eq!(published(&db).await, 200, "{mode:?}: both batches settled");
        assert_eq!(sink.inner.ids().len(), 200, "{mode:?}");
        let touched = db
            .count("published_at IS NULL AND (attempt_count > 0 OR locked_until IS NOT NULL)")
            .await;
        assert_eq!(touched, 0, "{mode:?}: nothing claimed after the signal");
    }
}

/// While the sink's circuit is open the daemon probes with one step at a time, however deep
/// its pipeline; when the sink is back, the drain completes with every event once.
#[tokio::test]
async fn an_open_circuit_probes_one_step_at_a_time() {
    for mode in MODES {
        let db = TestDb::with_backlog(1000).await;
        let (sink, _gate) = HoldSink::new(true);
        *sink.inner.down.lock().unwrap() = Some(SinkError::Unavailable {
            message: "down for the test".into(),
            retry_after: None,
        });
        let r = relay(&db, sink.clone(), mode, 2).await;
        let shutdown = CancellationToken::new();
        let stop = shutdown.clone();
        let run = tokio::spawn(async move {
            outboxctl::relay::daemon::daemon(&r, &settings(), &stop)
                .await
                .expect("the daemon ends well")
        });
        wait_until(Duration::from_secs(20), "six probes", || async {
            sink.calls().iter().filter(|c| c.0 < BATCH as usize).count() >= 6
        })
        .await;
        *sink.inner.down.lock().unwrap() = None;
        wait_until(Duration::from_secs(30), "everything published", || async {
            published(&db).await == 1000
        })
        .await;
        shutdown.cancel();
        run.await.unwrap();
        let calls = sink.calls();
        // Two full batches claimed before the outage was known, then probes (1 event, widening
        // every three failures), each alone in the sink, until one gets through.
        let probes_from = calls.iter().position(|c| c.0 < BATCH as usize).unwrap();
        assert!(probes_from <= 2, "{mode:?}: {calls:?}");
        let first_ok = calls[probes_from..]
            .iter()
            .position(|c| c.0 == BATCH as usize)
            .map_or(calls.len(), |p| p + probes_from);
        let probes = &calls[probes_from..first_ok];
        assert!(probes.len() >= 6, "{mode:?}: {calls:?}");
        assert!(
            probes.iter().all(|&(size, held)| size <= 16 && held == 1),
            "{mode:?}: one probe at a time: {calls:?}"
        );
        let ids: HashSet<i64> = sink.inner.ids().into_iter().collect();
        assert_eq!(ids.len(), 1000, "{mode:?}");
        assert_eq!(sink.inner.ids().len(), 1000, "{mode:?}: none twice");
    }
}

/// `kill -9` of a depth-2 relay with both batches published and neither settled: at most two
/// batches (`--pipeline-depth` of them) are sent again, and nothing is lost.
#[tokio::test]
async fn kill_9_at_depth_2_resends_at_most_two_batches() {
    for mode in MODES {
        let db = TestDb::with_backlog(1000).await;
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("first.jsonl");
        let mut child = relay_to_file(&db, mode, &first)
            .args(["--once", "--batch-size", "300", "--lease", "2s"])
            .args(["--pipeline-depth", "2"])
            .env("OUTBOXCTL_TEST_FAILPOINT", "hang-after-publish")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Each step announces the fail-point once its batch is in the sink, before its settle.
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        let mut reached = 0;
        while reached < 2 {
            line.clear();
            assert!(
                std::io::BufRead::read_line(&mut err, &mut line).unwrap() > 0,
                "relay exited early"
            );
            if line.contains("FAILPOINT hang-after-publish reached") {
                reached += 1;
            }
        }
        assert_eq!(
            open_claim_rows(&db, mode).await,
            600,
            "{mode:?}: two claims open"
        );
        if mode == Mode::Lease {
            assert_eq!(lease_tokens(&db).await, 2, "two claims, two tokens");
        }
        signal(&child, "KILL");
        child.wait().unwrap();
        let killed = ids_in_file(&first);
        assert_eq!(killed.len(), 600, "{mode:?}: two batches published");
        if mode == Mode::Lease {
            db.exec("UPDATE outbox SET locked_until = now() - interval '1 millisecond' WHERE locked_until IS NOT NULL").await;
        }
        let second = dir.path().join("second.jsonl");
        let out = relay_to_file(&db, mode, &second)
            .args(["--once", "--batch-size", "300"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let again = ids_in_file(&second);
        let all: HashSet<i64> = killed.iter().chain(&again).copied().collect();
        assert_eq!(all.len(), 1000, "{mode:?}: nothing lost");
        let dupes = again.iter().filter(|id| killed.contains(id)).count();
        assert_eq!(dupes, 600, "{mode:?}: the two killed batches, no more");
        assert_eq!(published(&db).await, 1000, "{mode:?}");
    }
}
