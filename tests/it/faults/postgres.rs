//! The relay under database faults, with real processes: backends terminated mid-drain
//! (`pg_terminate_backend`), and a restart of a PostgreSQL cluster of the test's own. Each test
//! counts deliveries in the sink (a JSON-lines file) to assert on lost and duplicated events.

use std::collections::HashSet;
use std::process::{Child, Stdio};
use std::time::Duration;

use outboxctl::relay::Mode;

use crate::support::servers::PgCluster;
use crate::support::{capture, ids_in_file, signal, stderr, wait_until, TestDb};
use crate::support::{client_ports, relay_to_file};

const EVENTS: i64 = 20_000;
const BATCH: usize = 500;

/// Terminates every backend of `child` (its pool and its LISTEN connection). Returns how many.
async fn terminate_backends_of(db: &TestDb, child: &Child) -> i64 {
    // Only this relay's backends: tests running beside this one use the same application_name.
    sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
          WHERE starts_with(application_name, 'outboxctl') AND client_port = ANY($1)",
    )
    .bind(client_ports(child))
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// The backends of `child` connected now.
async fn backends_of(db: &TestDb, child: &Child) -> i64 {
    sqlx::query_scalar(
        "SELECT count(*) FROM pg_stat_activity
          WHERE starts_with(application_name, 'outboxctl') AND client_port = ANY($1)",
    )
    .bind(client_ports(child))
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

async fn published(db: &TestDb) -> i64 {
    db.scalar("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
        .await
}

/// Events out so far: marked published (the queue modes), or delivered to the sink file (log
/// mode marks nothing per event).
async fn progress(db: &TestDb, mode: Mode, path: &std::path::Path) -> i64 {
    match mode {
        // Complete lines only: the relay may be writing the last one.
        Mode::Log => std::fs::read_to_string(path)
            .unwrap_or_default()
            .split_inclusive('\n')
            .filter(|l| l.ends_with('\n'))
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["id"].as_i64())
            .collect::<HashSet<_>>()
            .len() as i64,
        _ => published(db).await,
    }
}

/// A schema at `url` with `EVENTS` ready events, in log mode for [`Mode::Log`] (switched on
/// first, so the events are read from the log, not handed over from queue mode).
async fn backlog_at(url: &str, mode: Mode) -> TestDb {
    let db = TestDb::new_at(url).await;
    if mode == Mode::Log {
        crate::support::run(&db, &["log", "enable"], 0);
    }
    db.seed_ready(EVENTS).await;
    db
}

/// Lost and duplicated deliveries in the sink file, against the `EVENTS` seeded ids.
fn lost_and_duplicated(path: &std::path::Path) -> (usize, usize) {
    let ids = ids_in_file(path);
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    let lost = (1..=EVENTS).filter(|id| !distinct.contains(id)).count();
    (lost, ids.len() - distinct.len())
}

/// Lease mode: the settle of a batch whose connection was killed is retried on a live connection
/// within the lease, so no batch is re-sent: 0 duplicates. Tx mode: the killed session's
/// transaction rolls back after the publish, so that batch is re-sent: at most the batches in
/// flight (`--pipeline-depth`) per terminated round.
#[tokio::test]
async fn terminated_backends_mid_drain_lose_nothing_and_lease_mode_resends_nothing() {
    for mode in [Mode::Lease, Mode::Tx, Mode::Log] {
        let db = backlog_at(&crate::support::base_url(), mode).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        // Log mode drains several times faster: smaller pages, so the drain outlasts the rounds.
        let batch = if mode == Mode::Log { BATCH / 5 } else { BATCH };
        // Log mode with two pages in flight: the second is settled only after the first.
        let depth: &[&str] = if mode == Mode::Log {
            &["--pipeline-depth", "2"]
        } else {
            &[]
        };
        let mut child = relay_to_file(&db, mode, &path)
            .args(["--batch-size", &batch.to_string(), "--lease", "10s"])
            .args(depth)
            .args(["--poll-interval", "200ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = capture(child.stderr.take().unwrap());
        // Each round waits for the relay to have reconnected and drained more since the last
        // one: under load one poll can see several targets passed at once, and a termination
        // while the relay is still reconnecting finds nothing to terminate.
        let mut rounds = 0;
        let mut since = 0;
        for _ in 0..5 {
            wait_until(
                Duration::from_secs(120),
                "drain progress, reconnected",
                || async {
                    let now = progress(&db, mode, &path).await;
                    now == EVENTS || (now >= since + 1_500 && backends_of(&db, &child).await > 0)
                },
            )
            .await;
            since = progress(&db, mode, &path).await;
            if since == EVENTS {
                break; // drained before the rounds: the assertion below says so
            }
            if terminate_backends_of(&db, &child).await > 0 {
                rounds += 1;
            }
        }
        if rounds < 4 {
            let _ = child.kill(); // not left running beside the other tests
        }
        assert!(
            rounds >= 4,
            "{mode:?}: only {rounds} rounds terminated a backend"
        );
        wait_until(Duration::from_secs(90), "everything published", || async {
            progress(&db, mode, &path).await == EVENTS
        })
        .await;
        assert!(
            child.try_wait().unwrap().is_none(),
            "{mode:?}: the daemon kept running"
        );
        signal(&child, "TERM");
        assert!(child.wait().unwrap().success(), "{mode:?}");
        let (lost, dupes) = lost_and_duplicated(&path);
        let log = log.lock().unwrap().clone();
        assert_eq!(lost, 0, "{mode:?}: nothing lost\n{log}");
        match mode {
            Mode::Lease => assert_eq!(dupes, 0, "{mode:?}: nothing re-sent\n{log}"),
            Mode::Tx => assert!(
                dupes <= rounds * BATCH * outboxctl::relay::PIPELINE_DEPTH as usize,
                "{mode:?}: {dupes} re-sent, more than the batches in flight per round\n{log}"
            ),
            // The pages in flight when the connections went are read again.
            Mode::Log => assert!(
                dupes <= rounds * batch * 2,
                "{mode:?}: {dupes} re-sent, more than the two pages in flight per round\n{log}"
            ),
        }
        let leased = db.count("locked_until IS NOT NULL").await;
        assert_eq!(leased, 0, "{mode:?}: no lease left behind");
    }
}

/// `--once` reconnects after its connections are killed and finishes the drain with exit 0.
#[tokio::test]
async fn once_survives_terminated_backends_and_finishes() {
    let db = TestDb::with_backlog(EVENTS).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let child = relay_to_file(&db, Mode::Lease, &path)
        .args(["--once", "--batch-size", "100", "--lease", "10s", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut killed = 0;
    for target in [3_000, 8_000] {
        wait_until(Duration::from_secs(60), "drain progress", || async {
            published(&db).await >= target
        })
        .await;
        killed += terminate_backends_of(&db, &child).await;
    }
    assert!(killed > 0, "no backend of the run was terminated");
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status,
        stderr(&out)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["published"], EVENTS, "{}", stderr(&out));
    assert_eq!(published(&db).await, EVENTS);
    assert_eq!(lost_and_duplicated(&path), (0, 0), "{}", stderr(&out));
}

/// A PostgreSQL restart (fast shutdown: every session ends) in the middle of a 20k drain, on a
/// cluster of the test's own: nothing lost; in lease mode nothing re-sent (the settle waits for
/// the server within the lease), in tx mode at most the batches in flight (`--pipeline-depth`).
#[tokio::test]
async fn postgres_restart_mid_drain_loses_nothing() {
    let cluster = PgCluster::start("outboxctl_it", 18232);
    for mode in [Mode::Lease, Mode::Tx, Mode::Log] {
        let db = backlog_at(&cluster.url(), mode).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        // Small batches (one fsync each) so the drain outlasts pg_ctlcluster's start-up.
        let mut child = relay_to_file(&db, mode, &path)
            .args(["--batch-size", "100", "--lease", "20s"])
            .args(["--poll-interval", "200ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = capture(child.stderr.take().unwrap());
        wait_until(Duration::from_secs(60), "drain progress", || async {
            progress(&db, mode, &path).await >= 1_000
        })
        .await;
        let before = progress(&db, mode, &path).await;
        cluster.restart();
        assert!(
            before < EVENTS,
            "{mode:?}: the drain was over before the restart"
        );
        wait_until(Duration::from_secs(120), "everything published", || async {
            progress(&db, mode, &path).await == EVENTS
        })
        .await;
        assert!(
            child.try_wait().unwrap().is_none(),
            "{mode:?}: the daemon kept running"
        );
        signal(&child, "TERM");
        assert!(child.wait().unwrap().success(), "{mode:?}");
        let (lost, dupes) = lost_and_duplicated(&path);
        let log = log.lock().unwrap().clone();
        assert!(
            log.contains("terminating connection")
                || log.contains("the database system is")
                || log.contains("Connection refused")
                // A relay idle between claims when the server went down sees it first on its
                // LISTEN connection.
                || log.contains("LISTEN connection lost"),
            "{mode:?}: the relay saw the restart\n{log}"
        );
        assert_eq!(lost, 0, "{mode:?}: nothing lost\n{log}");
        match mode {
            Mode::Lease => assert_eq!(dupes, 0, "{mode:?}: nothing re-sent\n{log}"),
            // The batches in flight (--pipeline-depth) when the server went: rolled back.
            Mode::Tx => assert!(
                dupes <= 100 * outboxctl::relay::PIPELINE_DEPTH as usize,
                "{mode:?}: {dupes} re-sent\n{log}"
            ),
            // The pages in flight when the server went (two by default): the position was not
            // moved past them.
            Mode::Log => assert!(
                dupes <= 100 * outboxctl::relay::log::LOG_PIPELINE_DEPTH as usize,
                "{mode:?}: {dupes} re-sent\n{log}"
            ),
        }
    }
}

/// A database that goes away for good: `--once` retries for `--connect-timeout`, then exits 3
/// (after at most the lease of the batch it was settling, plus that timeout).
#[tokio::test]
async fn once_gives_up_with_exit_3_when_the_database_stays_down() {
    let cluster = PgCluster::start("outboxctl_it_down", 18233);
    let db = TestDb::new_at(&cluster.url()).await;
    db.seed_ready(EVENTS).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let mut child = relay_to_file(&db, Mode::Lease, &path)
        .args(["--once", "--batch-size", "100", "--lease", "5s"])
        .args(["--connect-timeout", "2s"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = capture(child.stderr.take().unwrap());
    wait_until(Duration::from_secs(60), "drain progress", || async {
        published(&db).await >= 1_000
    })
    .await;
    cluster.stop();
    let stopped = std::time::Instant::now();
    let mut status = None;
    wait_until(Duration::from_secs(30), "the run gives up", || {
        status = child.try_wait().unwrap();
        std::future::ready(status.is_some())
    })
    .await;
    let log = log.lock().unwrap().clone();
    assert_eq!(status.unwrap().code(), Some(3), "{log}");
    assert!(
        log.contains("could not reconnect within 2s (--connect-timeout)"),
        "{log}"
    );
    // The batch being settled may hold on until its 5 s lease ends; then 2 s of reconnecting,
    // each attempt itself bounded by the 2 s connect timeout.
    assert!(
        stopped.elapsed() < Duration::from_secs(5 + 2 + 2 + 3),
        "gave up after {:?}",
        stopped.elapsed()
    );
    // Back up: the next run delivers the rest; a batch whose mark was abandoned when the lease
    // ended is the only one re-sent (it waits for that lease: expire it rather than wait).
    cluster.start_again();
    db.exec("UPDATE outbox SET locked_until = now() WHERE locked_until IS NOT NULL")
        .await;
    let out = relay_to_file(&db, Mode::Lease, &path)
        .args(["--once", "--batch-size", "100"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let (lost, dupes) = lost_and_duplicated(&path);
    assert_eq!(lost, 0);
    assert!(
        dupes <= 100,
        "{dupes} re-sent: more than the batch in flight"
    );
}

/// Lease mode: a claim that committed but whose reply never reached the relay (the connection
/// broke in between) leaves rows leased to a token no one holds. The relay gives them back at
/// once on a live connection, attempt count included, instead of leaving them to the lease's
/// end (1 h here) (issue 22 item 12). The lost reply is a failpoint (the network fault cannot
/// be timed between the server's commit and its reply): `lose-claim-reply` drops the first
/// claim's connection after the claim committed and reports the connection lost.
#[tokio::test]
async fn a_lost_claim_reply_gives_the_rows_back_at_once() {
    let db = TestDb::with_backlog(20).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let out = db
        .cmd()
        .args([
            "relay",
            "--once",
            "--mode",
            "lease",
            "--lease",
            "1h",
            "--batch-size",
            "5",
        ])
        .arg("--sink")
        .arg(format!("file:{}", path.display()))
        .args(["--json", "-v"])
        .env("OUTBOXCTL_TEST_FAILPOINT", "lose-claim-reply")
        .output()
        .unwrap();
    let err = stderr(&out);
    assert!(err.contains("FAILPOINT lose-claim-reply"), "{err}");
    let (published, leased, charged): (i64, i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE published_at IS NOT NULL),
                count(*) FILTER (WHERE published_at IS NULL AND locked_until IS NOT NULL),
                count(*) FILTER (WHERE published_at IS NULL AND attempt_count > 0)
           FROM outbox",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(leased, 0, "no row left leased to the lost claim: {err}");
    assert_eq!(charged, 0, "its attempt given back: {err}");
    // What the run could not publish is due again now; a second run takes it all.
    if published < 20 {
        let again = db
            .cmd()
            .args(["relay", "--once", "--mode", "lease", "--batch-size", "5"])
            .arg("--sink")
            .arg(format!("file:{}", path.display()))
            .output()
            .unwrap();
        assert!(again.status.success(), "{}", stderr(&again));
    }
    let ids = ids_in_file(&path);
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(distinct.len(), 20, "every event delivered");
}
