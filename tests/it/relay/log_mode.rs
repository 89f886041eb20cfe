//! Log mode (`outboxctl log enable`, `relay --mode log`): the real binary against the real
//! database, a file sink or a real HTTP consumer. Each test asserts what the sink received and
//! what the outbox holds: no row version written per published event, nothing lost, nothing sent
//! twice.

use std::path::Path;
use std::time::Duration;

use crate::support::servers::TestServer;
use crate::support::{
    deliveries, ids_in_file, run, run_json, signal, spawn_capturing, stderr, stdout, wait_until,
    TestDb,
};

async fn enabled(n: i64) -> TestDb {
    let db = TestDb::new().await;
    run(&db, &["log", "enable"], 0);
    db.seed_ready(n).await;
    db
}

fn file(dir: &tempfile::TempDir, name: &str) -> std::path::PathBuf {
    dir.path().join(name)
}

fn sink(path: &Path) -> String {
    format!("file:{}", path.display())
}

/// Every row's ctid: a relay that writes a row (any UPDATE, HOT or not) changes its ctid.
async fn ctids(db: &TestDb) -> Vec<(i64, String)> {
    sqlx::query_as("SELECT id, ctid::text FROM outbox ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap()
}

#[tokio::test]
async fn log_mode_relays_each_event_once_in_pages_and_writes_no_event_row() {
    let db = enabled(1200).await;
    let before = ctids(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    let summary = db
        .relay(sink(&out))
        .args(["--batch-size", "500"])
        .once_json();
    assert_eq!(summary["published"], 1200, "{summary}");
    assert_eq!(summary["mode"], "log");
    let ids = ids_in_file(&out);
    assert_eq!(
        ids,
        (1..=1200).collect::<Vec<i64>>(),
        "one producer transaction: id order"
    );
    assert_eq!(ctids(&db).await, before, "no event row was written");
    let status = run_json(&db, &["log", "status", "--json"]);
    assert_eq!(status["enabled"], true);
    assert_eq!(status["behind"], 0, "{status}");
    assert_eq!(status["batches"], 3, "three pages of at most 500: {status}");
    assert!(
        status["window_to"].is_null(),
        "the batch is passed: {status}"
    );
    // Nothing is sent again.
    let again = db.relay(sink(&out)).once_json();
    assert_eq!(again["published"], 0, "{again}");
    assert_eq!(ids_in_file(&out).len(), 1200);
}

#[tokio::test]
async fn the_queue_modes_refuse_while_log_mode_is_on_and_log_mode_while_it_is_off() {
    let db = TestDb::with_backlog(3).await;
    let out = run(
        &db,
        &["relay", "--once", "--mode", "log", "--sink", "null"],
        2,
    );
    assert!(
        stderr(&out).contains("log mode is switched off")
            && stderr(&out).contains("outboxctl log enable"),
        "{}",
        stderr(&out)
    );
    run(&db, &["log", "enable"], 0);
    for mode in ["tx", "lease"] {
        let out = run(
            &db,
            &["relay", "--once", "--mode", mode, "--sink", "null"],
            2,
        );
        let err = stderr(&out);
        assert!(
            err.contains("log mode is switched on")
                && err.contains(&format!("a {mode}-mode relay")),
            "{err}"
        );
    }
    assert_eq!(
        db.count("published_at IS NULL").await,
        3,
        "nothing was claimed"
    );
}

#[tokio::test]
async fn a_running_queue_relay_stops_claiming_when_log_mode_is_switched_on() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let queue = file(&dir, "queue.jsonl");
    let child = db
        .relay(sink(&queue))
        .mode("tx")
        .args(["--poll-interval", "50ms"])
        .spawn();
    db.seed_ready(5).await;
    wait_until(
        Duration::from_secs(20),
        "the tx relay publishes the first five",
        || async { ids_in_file(&queue).len() == 5 },
    )
    .await;
    run(&db, &["log", "enable"], 0);
    db.exec("INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
             SELECT '00000000-0000-0000-0000-000000000001', 'order', 'late-' || g, 'e', '{}', 'late-' || g
               FROM generate_series(1, 5) g").await;
    let status = tokio::task::spawn_blocking(move || child.wait_with_output().unwrap())
        .await
        .unwrap();
    assert_eq!(status.status.code(), Some(2), "{}", stderr(&status));
    assert!(
        stderr(&status).contains("log mode is switched on"),
        "{}",
        stderr(&status)
    );
    assert_eq!(
        ids_in_file(&queue).len(),
        5,
        "the queue relay took nothing after the switch"
    );
    // The log reader takes the rest, once.
    let log = file(&dir, "log.jsonl");
    assert_eq!(db.relay(sink(&log)).once_json()["published"], 5);
    let seen = deliveries(&[&queue, &log]);
    assert_eq!(seen.len(), 10);
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
}

#[tokio::test]
async fn switching_on_hands_over_what_queue_mode_left_and_switching_off_hands_back_at_the_position()
{
    let db = TestDb::with_backlog(13).await;
    // Three published by queue mode, one delayed an hour, nine pending.
    db.exec("UPDATE outbox SET published_at = now(), attempt_count = 1 WHERE id <= 3")
        .await;
    db.exec("UPDATE outbox SET available_at = now() + interval '1 hour' WHERE id = 13")
        .await;
    run(&db, &["log", "enable"], 0);
    db.seed_keyed("log", 5).await; // ids 14..18, written in log mode
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    let summary = db.relay(sink(&out)).once_json();
    assert_eq!(summary["published"], 14, "{summary}");
    let mut ids = ids_in_file(&out);
    ids.sort_unstable();
    let want: Vec<i64> = (4..=12).chain(14..=18).collect();
    assert_eq!(ids, want);
    let status = run_json(&db, &["log", "status", "--json"]);
    assert_eq!(status["handed_over"], true);
    assert_eq!(
        status["retrying"], 1,
        "the delayed event waits in the retry set: {status}"
    );
    // Queue mode's published history is not touched: published_at was already set there.
    assert_eq!(
        db.count("published_at IS NOT NULL").await,
        3 + 9,
        "handed-over events are marked when sent"
    );

    let off = run_json(&db, &["log", "disable", "--json"]);
    assert_eq!(off["changed"], true);
    assert_eq!(
        off["marked_published"], 5,
        "the log's own published events: {off}"
    );
    assert_eq!(
        db.count("published_at IS NULL AND dead_lettered_at IS NULL")
            .await,
        1
    );
    assert!(
        db.scalar::<bool>("SELECT available_at > now() FROM outbox WHERE id = 13")
            .await,
        "the delayed event keeps its due time"
    );
    assert_eq!(
        db.scalar::<Option<bool>>("SELECT to_regclass('outbox_xid_idx') IS NOT NULL")
            .await,
        Some(false)
    );
    // Queue mode sends nothing again, and what comes next.
    let queue = file(&dir, "queue.jsonl");
    assert_eq!(
        db.relay(sink(&queue)).mode("tx").once_json()["published"],
        0
    );
    db.seed_keyed("after", 2).await;
    assert_eq!(
        db.relay(sink(&queue)).mode("tx").once_json()["published"],
        2
    );
    let seen = deliveries(&[&out, &queue]);
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
}

/// The hand-over from queue mode is done only once nothing of queue mode's part is left: a row a
/// queue-mode transaction still holds locked at the switch (a tx-mode relay that claimed it and
/// has not settled) is passed over by the hand-over's `SKIP LOCKED`, and taken by a later one
/// when that transaction ends without publishing it. Marking the hand-over done at once would
/// lose it: the log never reads rows written before the switch.
#[tokio::test]
async fn a_row_a_queue_transaction_holds_at_the_switch_is_handed_over_once_it_is_let_go() {
    use sqlx::Connection;
    let db = TestDb::with_backlog(3).await;
    run(&db, &["log", "enable"], 0);
    // A connection of its own, not the pool's: if an assertion fails, dropping it ends the
    // transaction, so the schema's cleanup is not left waiting on its lock.
    let mut queue = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let mut queue_tx = queue.begin().await.unwrap();
    sqlx::raw_sql(&format!(
        "SELECT id FROM \"{}\".outbox WHERE id = 2 FOR UPDATE",
        db.schema
    ))
    .execute(&mut *queue_tx)
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 2);
    assert_eq!(ids_in_file(&out), vec![1, 3]);
    let status = run_json(&db, &["log", "status", "--json"]);
    assert_eq!(
        status["handed_over"], false,
        "a held row of queue mode's part is left: {status}"
    );
    // The queue relay's transaction ends without publishing (a crash, a rollback).
    queue_tx.rollback().await.unwrap();
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 1);
    let seen = deliveries(&[&out]);
    assert_eq!(seen.len(), 3, "{seen:?}");
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    let status = run_json(&db, &["log", "status", "--json"]);
    assert_eq!(status["handed_over"], true, "{status}");
}

/// A producer transaction that got its transaction id first and commits last: a log that
/// waited for it (`xid < xmin`) would stall behind it; PgQ's two-snapshot batch passes it by and
/// takes its events in the batch after its commit.
#[tokio::test]
async fn a_long_running_producer_transaction_does_not_hold_the_log_and_is_read_after_it_commits() {
    let db = enabled(0).await;
    let mut long = db.pool.begin().await.unwrap();
    let first: i64 = sqlx::query_scalar(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         VALUES ('00000000-0000-0000-0000-000000000001', 'order', 'long', 'e', '{\"n\": 0}', 'long')
         RETURNING id",
    )
    .fetch_one(&mut *long)
    .await
    .unwrap();
    db.seed_ready(10).await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 10);
    assert!(!ids_in_file(&out).contains(&first));
    long.commit().await.unwrap();
    db.seed_keyed("later", 3).await;
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 4);
    let ids = ids_in_file(&out);
    assert_eq!(ids.len(), 14);
    assert!(deliveries(&[&out]).values().all(|n| *n == 1));
    // Within the batch after the commit, transaction-id order: the long one's event first.
    assert_eq!(ids[10], first, "{ids:?}");
}

#[tokio::test]
async fn a_failing_event_goes_to_the_retry_set_then_dead_and_requeue_sends_it_again() {
    let fail = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let f = std::sync::Arc::clone(&fail);
    let server = TestServer::start(0, move |r| {
        if r.json()["payload"]["n"] == 2 && f.load(std::sync::atomic::Ordering::SeqCst) {
            (500, vec![])
        } else {
            (200, vec![])
        }
    });
    let db = enabled(5).await;
    let args = [
        "--max-attempts",
        "2",
        "--backoff-base",
        "1ms",
        "--backoff-max",
        "1ms",
    ];
    let first = db.relay(server.url()).args(args).once_json();
    assert_eq!(first["published"], 4, "{first}");
    assert_eq!(first["retried"], 1, "{first}");
    let (attempts, error): (i32, Option<String>) = db
        .row("SELECT attempt_count, last_error FROM outbox WHERE id = 2")
        .await;
    assert_eq!(attempts, 1);
    assert!(error.unwrap_or_default().contains("500"));
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_log_retry")
            .await,
        1
    );
    // The second attempt is the last one: dead-lettered, out of the retry set.
    wait_until(Duration::from_secs(10), "the retry comes due", || async {
        db.scalar::<bool>("SELECT available_at <= now() FROM outbox WHERE id = 2")
            .await
    })
    .await;
    let second = db.relay(server.url()).args(args).once_json();
    assert_eq!(second["dead_lettered"], 1, "{second}");
    assert_eq!(db.count("dead_lettered_at IS NOT NULL").await, 1);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_log_retry")
            .await,
        0
    );
    let dead = run_json(&db, &["dead", "list", "--json"]);
    assert_eq!(dead["count"], 1, "{dead}");
    // Requeued, it joins the retry set and goes out.
    fail.store(false, std::sync::atomic::Ordering::SeqCst);
    run(&db, &["requeue", "2"], 0);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_log_retry")
            .await,
        1
    );
    let third = db.relay(server.url()).args(args).once_json();
    assert_eq!(third["published"], 1, "{third}");
    assert_eq!(
        db.count("published_at IS NOT NULL").await,
        1,
        "a retried event is marked when sent"
    );
    let mut got: Vec<i64> = server
        .accepted()
        .iter()
        .map(|r| r.json()["id"].as_i64().unwrap())
        .collect();
    got.sort_unstable();
    assert_eq!(got, vec![1, 2, 3, 4, 5]);
}

#[tokio::test]
async fn a_page_stops_at_the_byte_budget_and_large_events_all_arrive() {
    let db = enabled(0).await;
    db.exec("INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
             SELECT '00000000-0000-0000-0000-000000000001', 'order', 'big-' || g, 'e',
                    jsonb_build_object('blob', repeat(md5(g::text), 10000)), 'big-' || g
               FROM generate_series(1, 10) g").await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    let summary = db
        .relay(sink(&out))
        .args(["--batch-bytes", "1MiB"])
        .once_json();
    assert_eq!(summary["published"], 10, "{summary}");
    assert_eq!(ids_in_file(&out), (1..=10).collect::<Vec<i64>>());
    let status = run_json(&db, &["log", "status", "--json"]);
    // 320 KB each: a page takes events while those before stay under 1 MiB, so four to a
    // page (4, 4, 2); without the budget one page would take all ten.
    assert_eq!(status["batches"], 3, "{status}");
}

#[tokio::test]
async fn a_standby_takes_over_when_the_reader_is_killed() {
    let db = enabled(0).await;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (file(&dir, "a.jsonl"), file(&dir, "b.jsonl"));
    let spawn = |path: &Path| {
        let sink = sink(path);
        let args = [
            "relay",
            "--sink",
            &sink,
            "--lease",
            "2s",
            "--publish-timeout",
            "1s",
            "--poll-interval",
            "100ms",
        ];
        spawn_capturing(&db, &args)
    };
    let (mut first, _) = spawn(&a);
    wait_until(
        Duration::from_secs(20),
        "the first relay holds the lease",
        || async {
            db.scalar::<bool>("SELECT holder IS NOT NULL FROM outbox_log")
                .await
        },
    )
    .await;
    let holder: uuid::Uuid = db.scalar("SELECT holder FROM outbox_log").await;
    let (mut second, second_log) = spawn(&b);
    db.seed_ready(50).await;
    wait_until(
        Duration::from_secs(20),
        "the reader publishes the first fifty",
        || async { deliveries(&[&a, &b]).len() == 50 },
    )
    .await;
    // Published and settled: the position has passed them (a kill between the two would send
    // the page again, by design).
    wait_until(
        Duration::from_secs(20),
        "the reader settles the page",
        || async { db.scalar::<i64>("SELECT batches FROM outbox_log").await >= 1 },
    )
    .await;
    assert_eq!(ids_in_file(&b).len(), 0, "the standby stood by");
    signal(&first, "KILL");
    let _ = first.wait();
    db.exec("INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
             SELECT '00000000-0000-0000-0000-000000000001', 'order', 'after-' || g, 'e', '{}', 'after-' || g
               FROM generate_series(1, 50) g").await;
    let took_over = tokio::time::timeout(Duration::from_secs(20), async {
        while ids_in_file(&b).len() < 50 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(
        took_over.is_ok(),
        "the standby took over and published the rest: {} of 50\n{}",
        ids_in_file(&b).len(),
        second_log.lock().unwrap()
    );
    let seen = deliveries(&[&a, &b]);
    assert_eq!(seen.len(), 100);
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    let (now_holder, fence): (uuid::Uuid, i64) =
        db.row("SELECT holder, fence FROM outbox_log").await;
    assert_ne!(now_holder, holder);
    assert_eq!(fence, 2, "the take-over raised the fence");
    signal(&second, "TERM");
    let _ = second.wait();
    assert!(
        db.scalar::<bool>("SELECT holder IS NULL FROM outbox_log")
            .await,
        "a relay that stops gives its lease up"
    );
}

#[tokio::test]
async fn stats_counts_only_what_the_log_has_not_sent_and_the_retry_set() {
    let db = enabled(8).await;
    let before = run_json(&db, &["stats", "--json"]);
    assert_eq!(before["ready"], 8, "{before}");
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 8);
    let after = run_json(&db, &["stats", "--json"]);
    assert_eq!(after["ready"], 0, "the log has sent them: {after}");
    // Requeued by hand (made dead first), one is pending again, in the retry set.
    db.exec("UPDATE outbox SET dead_lettered_at = now(), last_error = 'x', attempt_count = 3 WHERE id = 4")
        .await;
    run(&db, &["requeue", "4"], 0);
    let requeued = run_json(&db, &["stats", "--json"]);
    assert_eq!(requeued["ready"], 1, "{requeued}");
    db.seed_keyed("new", 2).await;
    assert_eq!(run_json(&db, &["stats", "--json"])["ready"], 3);
}

#[tokio::test]
async fn prune_deletes_what_the_log_published_and_keeps_what_it_has_not_sent() {
    let db = enabled(6).await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 6);
    // Event 2 waits in the retry set (requeued), 7-8 are not read yet; all are two days old.
    db.exec("UPDATE outbox SET dead_lettered_at = now(), last_error = 'x' WHERE id = 2")
        .await;
    run(&db, &["requeue", "2"], 0);
    db.seed_keyed("unread", 2).await;
    db.exec("UPDATE outbox SET created_at = now() - interval '2 days'")
        .await;
    let dry = run_json(&db, &["prune", "--older-than", "1d", "--dry-run", "--json"]);
    assert_eq!(dry["published"]["would_delete"], 5, "{dry}");
    let report = run_json(
        &db,
        &["prune", "--older-than", "1d", "--batch-size", "2", "--json"],
    );
    assert_eq!(report["deleted"], 5, "{report}");
    let left = crate::support::fixtures::ids(&db, "SELECT id FROM outbox ORDER BY id").await;
    assert_eq!(left, vec![2, 7, 8]);
    // What is left still goes out, once.
    let summary = db.relay(sink(&out)).once_json();
    assert_eq!(summary["published"], 3, "{summary}");
    assert_eq!(ids_in_file(&out).len(), 9);
}

/// Prune goes by what the log passed, not by the oldest transaction running when the reader read:
/// a transaction open elsewhere in the cluster (another application's, a long report, another
/// test's migration) holds back the position's xmin, and prune bounded by it deleted none of what
/// the log had just published.
#[tokio::test]
async fn prune_deletes_what_the_log_published_while_an_older_transaction_is_open_elsewhere() {
    use sqlx::Connection;
    let db = TestDb::new().await;
    run(&db, &["log", "enable"], 0);
    // A connection of its own: dropping it (also on a failed assertion) ends the transaction.
    let mut other = sqlx::PgConnection::connect(&db.url).await.unwrap();
    let mut other_tx = other.begin().await.unwrap();
    sqlx::query("SELECT pg_current_xact_id()")
        .execute(&mut *other_tx)
        .await
        .unwrap();
    db.seed_ready(3).await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 3);
    db.exec("UPDATE outbox SET created_at = now() - interval '2 days'")
        .await;
    let report = run_json(&db, &["prune", "--older-than", "1d", "--json"]);
    other_tx.rollback().await.unwrap();
    assert_eq!(report["deleted"], 3, "{report}");
    assert_eq!(db.count("true").await, 0);
}

/// Events pending when log mode was switched on are queue mode's part: their transactions are
/// below the position, but the log has not passed them; the first reader hands them over to the
/// retry set and sends them. Until then prune keeps them, however old.
#[tokio::test]
async fn prune_keeps_the_events_pending_at_the_switch_until_the_reader_has_sent_them() {
    let db = TestDb::with_backlog(4).await;
    run(&db, &["log", "enable"], 0);
    db.exec("UPDATE outbox SET created_at = now() - interval '2 days'")
        .await;
    let dry = run_json(&db, &["prune", "--older-than", "1d", "--dry-run", "--json"]);
    assert_eq!(dry["published"]["would_delete"], 0, "{dry}");
    let report = run_json(&db, &["prune", "--older-than", "1d", "--json"]);
    assert_eq!(report["deleted"], 0, "{report}");
    assert_eq!(db.count("true").await, 4);
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 4);
    assert_eq!(ids_in_file(&out), vec![1, 2, 3, 4]);
}

#[tokio::test]
async fn a_log_mode_daemon_stops_naming_the_switch_when_log_mode_is_switched_off() {
    let db = enabled(0).await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    let sink = sink(&out);
    let (child, log) =
        spawn_capturing(&db, &["relay", "--sink", &sink, "--poll-interval", "100ms"]);
    db.seed_keyed("a", 5).await;
    wait_until(
        Duration::from_secs(20),
        "the reader publishes and settles",
        || async {
            ids_in_file(&out).len() == 5
                && db.scalar::<i64>("SELECT batches FROM outbox_log").await >= 1
        },
    )
    .await;
    let off = run_json(&db, &["log", "disable", "--json"]);
    assert_eq!(off["marked_published"], 5, "{off}");
    let status = tokio::task::spawn_blocking(move || {
        let mut child = child;
        child.wait().unwrap()
    })
    .await
    .unwrap();
    // The collector may still be reading the last line when the process has exited.
    wait_until(Duration::from_secs(5), "the error line is read", || async {
        log.lock().unwrap().contains("log mode is switched off")
    })
    .await;
    let log = log.lock().unwrap().clone();
    assert_eq!(status.code(), Some(2), "{log}");
    // Queue mode carries on from there: nothing sent again.
    assert_eq!(db.relay(&sink).mode("tx").once_json()["published"], 0);
}

/// Numbers JSON parsers round (a 30-digit integer, 0.1000000000000000055, 1e400) go out as the
/// outbox holds them, through the log as through the retry set.
#[tokio::test]
async fn a_payload_comes_back_digit_for_digit_from_the_log_and_the_retry_set() {
    let db = enabled(0).await;
    let digits = r#"{"n": 123456789012345678901234567890, "f": 0.1000000000000000055, "e": 1e400}"#;
    for key in ["d-1", "d-2"] {
        sqlx::query(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
             VALUES ('00000000-0000-0000-0000-000000000001', 'order', 'o', 'e', $1::jsonb, $2)",
        )
        .bind(digits)
        .bind(key)
        .execute(&db.pool)
        .await
        .unwrap();
    }
    // The second one is delayed: it goes out from the retry set.
    db.exec(
        "UPDATE outbox SET available_at = now() + interval '1 hour' WHERE idempotency_key = 'd-2'",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 1);
    db.exec("UPDATE outbox SET available_at = now() WHERE idempotency_key = 'd-2'")
        .await;
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 1);
    let stored: String = db
        .scalar("SELECT payload::text FROM outbox WHERE id = 1")
        .await;
    assert!(
        stored.contains("123456789012345678901234567890")
            && stored.contains("0.1000000000000000055")
    );
    let lines = std::fs::read_to_string(&out).unwrap();
    assert_eq!(lines.lines().count(), 2);
    for line in lines.lines() {
        assert!(
            line.contains(&format!("\"payload\":{stored}")),
            "{line}\nstored: {stored}"
        );
    }
}

/// A sink that refuses every connection for a whole run: the page is not passed and no attempt
/// is counted; once it is back, every event goes out once.
#[tokio::test]
async fn a_sink_down_for_a_whole_run_leaves_the_log_where_it_was() {
    let db = enabled(20).await;
    let closed = crate::support::servers::ClosedPort::new();
    let url = format!("http://127.0.0.1:{}/events", closed.port);
    let out = db.relay(&url).args(["--max-attempts", "1"]).once(5);
    let err = stderr(&out);
    assert!(
        err.contains("given back") || err.contains("unavailable"),
        "{err}"
    );
    let status = run_json(&db, &["log", "status", "--json"]);
    assert_eq!(status["behind"], 20, "{status}");
    assert_eq!(status["retrying"], 0, "{status}");
    assert_eq!(
        db.count("attempt_count > 0 OR dead_lettered_at IS NOT NULL")
            .await,
        0
    );
    let server = TestServer::start_on(closed.listen(), |_| (200, vec![]));
    assert_eq!(db.relay(server.url()).once_json()["published"], 20);
    let mut ids: Vec<i64> = server
        .accepted()
        .iter()
        .map(|r| r.json()["id"].as_i64().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=20).collect::<Vec<i64>>());
}

/// Pages in flight (`--pipeline-depth` 2 and 4): each step reads on from the page before it and
/// settles after it, so every event goes out once, in the log's order, and the position passes
/// them all (a step that read the position before the page in flight settled would send that
/// page again).
#[tokio::test]
async fn pages_in_flight_send_each_event_once_in_order() {
    for depth in ["2", "4"] {
        let db = enabled(3000).await;
        let dir = tempfile::tempdir().unwrap();
        let out = file(&dir, "out.jsonl");
        let summary = db
            .relay(sink(&out))
            .args(["--batch-size", "100", "--pipeline-depth", depth])
            .once_json();
        assert_eq!(summary["published"], 3000, "depth {depth}: {summary}");
        assert_eq!(
            summary["claimed"], 3000,
            "depth {depth}: no page read twice"
        );
        assert_eq!(
            ids_in_file(&out),
            (1..=3000).collect::<Vec<i64>>(),
            "depth {depth}: each once, in order"
        );
        let status = run_json(&db, &["log", "status", "--json"]);
        assert_eq!(status["behind"], 0, "depth {depth}: {status}");
    }
}

/// Two pages in flight (`--pipeline-depth 2`): the sink refuses the first page whole (503 for
/// each of its events: the sink is down for it) and takes the second, read and sent beside it.
/// The second page is not settled past the first: once the sink takes the first page, every
/// event of it has arrived, once.
#[tokio::test]
async fn a_page_in_flight_is_not_passed_while_the_page_before_it_is_refused() {
    use std::sync::atomic::{AtomicBool, Ordering};
    let db = enabled(300).await;
    let refuse = std::sync::Arc::new(AtomicBool::new(true));
    let refusing = refuse.clone();
    let server = TestServer::start(0, move |r| {
        let first_page = r.json()["id"].as_i64().unwrap() <= 100;
        if first_page && refusing.load(Ordering::SeqCst) {
            (503, vec![])
        } else {
            (200, vec![])
        }
    });
    let taken = |server: &TestServer| -> Vec<i64> {
        server
            .accepted()
            .iter()
            .map(|r| r.json()["id"].as_i64().unwrap())
            .collect()
    };
    let url = server.url();
    let (mut child, log) = spawn_capturing(
        &db,
        &[
            "relay",
            "--sink",
            &url,
            "--batch-size",
            "100",
            "--pipeline-depth",
            "2",
            "--poll-interval",
            "100ms",
            "--backoff-base",
            "50ms",
            "--backoff-max",
            "200ms",
        ],
    );
    wait_until(
        Duration::from_secs(30),
        "the second page sent while the first is refused",
        || async { taken(&server).iter().any(|&id| id > 100) },
    )
    .await;
    refuse.store(false, Ordering::SeqCst);
    wait_until(Duration::from_secs(30), "every event sent", || async {
        let mut ids = taken(&server);
        ids.sort_unstable();
        ids.dedup();
        ids.len() == 300
    })
    .await;
    wait_until(Duration::from_secs(30), "the log passed", || async {
        run_json(&db, &["log", "status", "--json"])["behind"] == 0
    })
    .await;
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success(), "{}", log.lock().unwrap());
    let all = taken(&server);
    for id in 1..=100 {
        assert_eq!(all.iter().filter(|&&i| i == id).count(), 1, "id {id} once");
    }
    assert_eq!(run_json(&db, &["log", "status", "--json"])["retrying"], 0);
}

/// A page costs the database one write (its settle): the reader's lease, renewed by every settle,
/// is only read by the next step while more than half of it is left. Counted by a trigger on
/// `outbox_log`: 12 pages of 100 take a settle each (and one for the empty read that ends the
/// batch), besides the first take, the batch's seal and the release at exit; a take that wrote
/// at every step would be 13 more.
#[tokio::test]
async fn a_page_costs_one_write_of_the_log_row() {
    let db = enabled(1200).await;
    db.exec(
        "CREATE TABLE log_writes (at timestamptz DEFAULT clock_timestamp());
         CREATE FUNCTION count_log_write() RETURNS trigger LANGUAGE plpgsql AS
           $$BEGIN INSERT INTO log_writes DEFAULT VALUES; RETURN NULL; END$$;
         CREATE TRIGGER count_log_write AFTER UPDATE ON outbox_log
           FOR EACH ROW EXECUTE FUNCTION count_log_write();",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    let summary = db
        .relay(sink(&out))
        .args(["--batch-size", "100", "--lease", "30s"])
        .once_json();
    assert_eq!(summary["published"], 1200, "{summary}");
    assert_eq!(ids_in_file(&out).len(), 1200);
    // 13 settles: the 12 full pages, and the empty read that ends the batch.
    let settles = run_json(&db, &["log", "status", "--json"])["batches"]
        .as_i64()
        .unwrap();
    assert!((12..=13).contains(&settles), "{settles} settles");
    let writes = db.scalar("SELECT count(*) FROM log_writes").await;
    assert!(
        (settles..=settles + 3).contains(&writes),
        "{writes} writes of outbox_log for {settles} settles"
    );
}

/// The ids of an `events list --json`, newest first.
fn listed(db: &TestDb, state: &str) -> Vec<i64> {
    let v = run_json(db, &["events", "list", "--state", state, "--json"]);
    v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect()
}

#[tokio::test]
async fn events_show_and_list_call_what_the_log_published_published_and_changes_refuse_it() {
    let db = enabled(4).await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 4);
    // 2 waits in the retry set, due now; 3 in the retry set, due in an hour (the row's own
    // available_at says now); 5 is not read yet.
    db.exec("UPDATE outbox SET dead_lettered_at = now(), last_error = 'x' WHERE id IN (2, 3)")
        .await;
    run(&db, &["requeue", "2", "3"], 0);
    db.exec("UPDATE outbox_log_retry SET available_at = now() + interval '1 hour' WHERE id = 3")
        .await;
    db.seed_keyed("unread", 1).await;
    assert_eq!(
        db.count("published_at IS NULL").await,
        5,
        "the log marks no row it publishes"
    );

    let one = run_json(&db, &["events", "show", "1", "--json"]);
    assert_eq!(one["state"], "published", "{one}");
    assert!(one["published_at"].is_null(), "no time is invented: {one}");
    assert_eq!(one["published_by_log"], true, "{one}");
    let text = stdout(&run(&db, &["events", "show", "1"], 0));
    assert!(text.contains("published by the log"), "{text}");
    for (id, state) in [(2, "ready"), (3, "scheduled"), (5, "ready")] {
        let v = run_json(&db, &["events", "show", &id.to_string(), "--json"]);
        assert_eq!(v["state"], state, "{id}: {v}");
        assert_eq!(v["published_by_log"], false, "{id}: {v}");
    }
    assert_eq!(listed(&db, "published"), [4, 1]);
    assert_eq!(listed(&db, "ready"), [5, 2]);
    assert_eq!(listed(&db, "scheduled"), [3]);
    assert_eq!(listed(&db, "pending"), [5, 3, 2]);

    // What the log published cannot be cancelled, rescheduled or edited (by id or by filter).
    let before = ctids(&db).await;
    for args in [
        vec!["events", "cancel", "--yes", "1"],
        vec!["events", "reschedule", "--yes", "4", "--delay", "1h"],
        vec!["events", "edit", "--yes", "1", "--event-type", "changed"],
    ] {
        let out = run(&db, &args, 2);
        assert!(
            stderr(&out).contains("already published"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
    let by_filter = run_json(
        &db,
        &[
            "events",
            "cancel",
            "--aggregate-type",
            "order",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(by_filter["matched"], 3, "2, 3 and 5 only: {by_filter}");
    assert_eq!(by_filter["cancelled"], 3, "{by_filter}");
    let audited: Vec<(i64, String)> = sqlx::query_as(
        "SELECT event_id, previous->>'state' FROM outbox_audit WHERE action = 'cancel' ORDER BY event_id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        audited,
        [
            (2, "ready".into()),
            (3, "scheduled".into()),
            (5, "ready".into())
        ],
        "each audit row keeps the state the event was in: 3 was due in its retry-set entry's hour"
    );
    assert_eq!(
        crate::support::fixtures::ids(&db, "SELECT id FROM outbox ORDER BY id").await,
        [1, 4]
    );
    assert_eq!(
        ctids(&db).await,
        before
            .into_iter()
            .filter(|(id, _)| [1, 4].contains(id))
            .collect::<Vec<_>>(),
        "1 and 4 untouched"
    );
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_log_retry WHERE id IN (1, 4)")
            .await,
        0,
        "nothing the log published is sent again"
    );
}

#[tokio::test]
async fn events_reschedule_and_edit_work_on_the_retry_set_and_what_the_log_has_not_read() {
    let db = enabled(2).await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 2);
    db.exec("UPDATE outbox SET dead_lettered_at = now(), last_error = 'x' WHERE id = 2")
        .await;
    run(&db, &["requeue", "2"], 0);
    db.seed_keyed("unread", 1).await;
    run(
        &db,
        &["events", "reschedule", "--yes", "2", "3", "--delay", "1h"],
        0,
    );
    assert_eq!(listed(&db, "scheduled"), [3, 2]);
    assert!(
        db.scalar::<bool>(
            "SELECT available_at > now() + interval '50 minutes' FROM outbox_log_retry WHERE id = 2"
        )
        .await,
        "the retry set's due time moved"
    );
    run(
        &db,
        &[
            "events",
            "edit",
            "--yes",
            "2",
            "3",
            "--event-type",
            "changed",
        ],
        0,
    );
    assert_eq!(db.count("event_type = 'changed'").await, 2);
    assert_eq!(listed(&db, "published"), [1]);
}

#[tokio::test]
async fn stats_says_publishes_by_time_are_unknown_in_log_mode_and_reports_the_log_instead() {
    let db = enabled(3).await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 3);
    let v = run_json(&db, &["stats", "--json"]);
    for field in [
        "published_last_minute",
        "published_last_hour",
        "throughput_per_second",
    ] {
        assert!(v[field].is_null(), "{field}, not a wrong 0: {v}");
    }
    let status = run_json(&db, &["log", "status", "--json"]);
    assert_eq!(v["log"]["batches"], status["batches"], "{v}");
    assert_eq!(v["log"]["read_at"], status["read_at"], "{v}");
    assert_eq!(v["log"]["behind"], 0, "{v}");
    assert_eq!(v["log"]["retrying"], 0, "{v}");
    let by = run_json(&db, &["stats", "--by", "event-type", "--json"]);
    assert!(
        by["groups"]["order.placed"]["published_last_hour"].is_null(),
        "{by}"
    );
    let text = stdout(&run(&db, &["stats"], 0));
    assert!(text.contains("throughput unknown in log mode"), "{text}");
    let prom = stdout(&run(&db, &["stats", "--format", "prometheus"], 0));
    assert!(
        !prom.contains("outboxctl_recently_published_events") && prom.contains("outboxctl_events"),
        "{prom}"
    );
}

#[tokio::test]
async fn replay_sends_what_the_log_published_and_selects_it_by_creation_time() {
    // 1-2 published in queue mode (published_at set), then the switch; 3-6 published by the
    // log, of which 4 waits in the retry set; 7 is not read yet.
    let db = TestDb::new().await;
    db.seed_ready(2).await;
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 2);
    run(&db, &["log", "enable"], 0);
    db.seed_keyed("log", 4).await;
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 4);
    db.exec("UPDATE outbox SET dead_lettered_at = now(), last_error = 'x' WHERE id = 4")
        .await;
    run(&db, &["requeue", "4"], 0);
    db.seed_keyed("unread", 1).await;
    db.exec("UPDATE outbox SET created_at = now() - interval '2 days' WHERE id = 5")
        .await;

    let dry = run_json(
        &db,
        &["replay", "--all", "--sink", "null", "--dry-run", "--json"],
    );
    assert_eq!(dry["matched"], 5, "{dry}");
    assert_eq!(
        crate::support::fixtures::event_ids(&dry),
        [1, 2, 3, 5, 6],
        "what the log passed and did not keep for a retry: {dry}"
    );
    let replayed = file(&dir, "replayed.jsonl");
    let done = run_json(
        &db,
        &[
            "replay",
            "--all",
            "--sink",
            &sink(&replayed),
            "--yes",
            "--json",
        ],
    );
    assert_eq!(done["sent"], 5, "{done}");
    assert_eq!(ids_in_file(&replayed), vec![1, 2, 3, 5, 6]);
    // --since goes by published_at where there is one, by created_at where the log published
    // it (the log writes no time per event): 5 was created two days ago.
    let since = run_json(
        &db,
        &[
            "replay",
            "--since",
            "1d",
            "--sink",
            "null",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(
        crate::support::fixtures::event_ids(&since),
        [1, 2, 3, 6],
        "{since}"
    );
    assert_eq!(
        db.count("published_at IS NULL").await,
        5,
        "replay marks nothing"
    );
}

#[tokio::test]
async fn a_page_planned_then_changed_is_fetched_as_it_is_now_and_ends_where_it_was_planned() {
    use outboxctl::db::log as sql;
    let db = TestDb::new().await;
    run(&db, &["log", "enable"], 0);
    let mut conn = db.pool.acquire().await.unwrap();
    let (me, lease) = (uuid::Uuid::new_v4(), Duration::from_secs(30));
    if matches!(
        sql::take(&mut conn, me, lease).await.unwrap(),
        sql::Take::Unsealed
    ) {
        sql::seal(&mut conn).await.unwrap();
    }
    let sql::Take::Held(reader) = sql::take(&mut conn, me, lease).await.unwrap() else {
        panic!("the lease is ours")
    };
    db.seed_ready(5).await;
    let plan = sql::plan_page(&mut conn, &reader, None, 4, i64::MAX)
        .await
        .unwrap();
    assert!(plan.more, "{plan:?}");
    assert_eq!(plan.last.as_ref().map(|l| l.1), Some(4), "{plan:?}");
    // Between the plan and the fetch (a step fetches beside the next one's plan): 2 is
    // cancelled, 3 edited, 6 written.
    db.exec(
        "DELETE FROM outbox WHERE id = 2;
         UPDATE outbox SET payload = '{\"edited\": 1.50}' WHERE id = 3",
    )
    .await;
    db.seed_keyed("new", 1).await;
    let page = sql::fetch_page(&mut conn, &reader, None, plan)
        .await
        .unwrap();
    let ids: Vec<i64> = page.rows.iter().map(|r| r.event.id).collect();
    assert_eq!(
        ids,
        [1, 3, 4],
        "the deleted one is gone, none past the plan"
    );
    assert_eq!(page.rows[1].event.payload, r#"{"edited": 1.50}"#);
    assert_eq!(
        page.last.map(|l| l.1),
        Some(4),
        "the next page starts after 4"
    );
    assert!(page.more);
}

#[tokio::test]
async fn what_the_log_passed_since_a_mark_is_counted_within_a_window_and_past_it() {
    use outboxctl::db::log as sql;
    let db = enabled(0).await;
    let mut conn = db.pool.acquire().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let out = file(&dir, "out.jsonl");
    // The first run seals the log (its first position).
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 0);
    let before = sql::mark(&mut conn).await.unwrap().expect("log mode is on");
    db.seed_ready(250).await;
    assert_eq!(sql::passed_since(&mut conn, &before).await.unwrap(), 0);
    // A window read in part (pages of 100, the reader stopped after two of them) ...
    let summary = db
        .relay(sink(&out))
        .args([
            "--batch-size",
            "100",
            "--max-events",
            "200",
            "--pipeline-depth",
            "1",
        ])
        .once_json();
    assert_eq!(summary["published"], 200, "{summary}");
    let mid = sql::mark(&mut conn).await.unwrap().unwrap();
    assert!(mid.window_to.is_some(), "inside the window: {mid:?}");
    assert_eq!(sql::passed_since(&mut conn, &before).await.unwrap(), 200);
    // ... then to its end; one event waits in the retry set (not published yet).
    assert_eq!(db.relay(sink(&out)).once_json()["published"], 50);
    db.exec("UPDATE outbox SET dead_lettered_at = now(), last_error = 'x' WHERE id = 7")
        .await;
    run(&db, &["requeue", "7"], 0);
    assert_eq!(sql::passed_since(&mut conn, &before).await.unwrap(), 249);
    assert_eq!(
        sql::passed_since(&mut conn, &mid).await.unwrap(),
        50,
        "201-250; 7 was passed before the mark"
    );
}

/// One event of `aggregate_type`/`aggregate_id`, numbered `n` in its payload, in a transaction
/// of its own (so the log reads them in insert order); `poison` for the consumer to refuse.
async fn insert_keyed(db: &TestDb, aggregate_id: &str, n: i64, poison: bool) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         VALUES ('00000000-0000-0000-0000-000000000001', 'order', $1, 'e',
                 jsonb_build_object('n', $2::bigint, 'poison', $3::bool), gen_random_uuid()::text)
         RETURNING id",
    )
    .bind(aggregate_id)
    .bind(n)
    .bind(poison)
    .fetch_one(&db.pool)
    .await
    .expect("insert")
}

/// Per aggregate, the `n`s the consumer took, in the order it took them.
fn taken_by_key(server: &TestServer) -> std::collections::HashMap<String, Vec<i64>> {
    let mut by: std::collections::HashMap<String, Vec<i64>> = Default::default();
    for r in server.accepted() {
        let v = r.json();
        by.entry(v["aggregate_id"].as_str().unwrap().to_owned())
            .or_default()
            .push(v["payload"]["n"].as_i64().unwrap());
    }
    by
}

/// A consumer that refuses (`status`) the events marked poison while `fail` is set, slowly: the
/// page after a poison event's is read while the poison event is still being published, so what
/// keeps its key's events back there is what the page in flight says, not the retry set (which
/// that page has not reached yet).
fn poison_consumer(
    status: u16,
    fail: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> TestServer {
    let f = std::sync::Arc::clone(fail);
    TestServer::start(0, move |r| {
        if r.json()["payload"]["poison"] == true && f.load(std::sync::atomic::Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(300));
            (status, vec![])
        } else {
            (200, vec![])
        }
    })
}

/// Ordered delivery in log mode, `--on-dead block`: a poison head of key `bad` holds the key's
/// later events, in its own page (given back behind it) and in the pages after it (read while it
/// is in flight, and after it settled), while the other keys flow; dead-lettered, it keeps
/// holding them; requeued, the key's events arrive in order; `ordering skip` lets another key's
/// events flow past its dead head; with `--on-dead skip` a key moves on by itself.
#[tokio::test]
async fn ordering_in_log_mode_holds_a_key_behind_its_poison_head_until_requeued_or_skipped() {
    let db = TestDb::new().await;
    // Both switches, log mode first (the other order: the next test).
    run(&db, &["log", "enable"], 0);
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    let fail = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let server = poison_consumer(422, &fail);
    // Three per page: bad 0, bad 1 (poison), bad 2 | good 1, bad 3, good 2 | skipme 1 (poison),
    // good 3, skipme 2 | bad 4, skipme 3.
    let bad0 = insert_keyed(&db, "bad", 0, false).await;
    let head = insert_keyed(&db, "bad", 1, true).await;
    insert_keyed(&db, "bad", 2, false).await;
    insert_keyed(&db, "good", 1, false).await;
    insert_keyed(&db, "bad", 3, false).await;
    insert_keyed(&db, "good", 2, false).await;
    let skip_head = insert_keyed(&db, "skipme", 1, true).await;
    insert_keyed(&db, "good", 3, false).await;
    insert_keyed(&db, "skipme", 2, false).await;
    insert_keyed(&db, "bad", 4, false).await;
    insert_keyed(&db, "skipme", 3, false).await;
    let relay = || db.relay(server.url()).args(["--batch-size", "3"]);
    let first = relay().once_json();
    assert_eq!(first["dead_lettered"], 2, "{first}");
    let taken = taken_by_key(&server);
    assert_eq!(taken.get("good"), Some(&vec![1, 2, 3]), "other keys flow");
    assert_eq!(
        taken.get("bad"),
        Some(&vec![0]),
        "nothing behind its dead head"
    );
    assert_eq!(taken.get("skipme"), None);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_log_retry")
            .await,
        5,
        "bad 2-4 and skipme 2-3 wait in the retry set"
    );
    let status = run_json(&db, &["ordering", "status", "--json"]);
    assert_eq!(status["blocked_keys"], 2, "{status}");
    // Dead and blocking: another run (no page in flight before it) sends nothing of them, nor
    // of an event of the key written since.
    insert_keyed(&db, "bad", 5, false).await;
    relay().once_json();
    assert_eq!(taken_by_key(&server).get("bad"), Some(&vec![0]));
    // What the blocked keys hold back is what the log has not sent: not bad 0.
    let stats = run_json(&db, &["stats", "--json"]);
    assert_eq!(stats["blocked_keys"], 2, "{stats}");
    assert_eq!(stats["blocked_events"], 6, "bad 2-5, skipme 2-3: {stats}");
    let dead = run_json(&db, &["dead", "list", "--json"]);
    let blocking = dead["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == head)
        .map(|e| e["blocking"].clone());
    assert_eq!(blocking, Some(4.into()), "{dead}");

    // The consumer is fixed: requeue resumes the key, head first.
    fail.store(false, std::sync::atomic::Ordering::SeqCst);
    run(&db, &["requeue", &head.to_string()], 0);
    relay().once_json();
    let taken = taken_by_key(&server);
    assert_eq!(taken.get("bad"), Some(&vec![0, 1, 2, 3, 4, 5]), "in order");
    assert_eq!(taken.get("skipme"), None, "still blocked");

    // Skip the other key's dead head: it stays dead, the rest flows.
    run(&db, &["ordering", "skip", &skip_head.to_string()], 0);
    relay().once_json();
    let taken = taken_by_key(&server);
    assert_eq!(taken.get("skipme"), Some(&vec![2, 3]));
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_log_retry")
            .await,
        0
    );
    let stats = run_json(&db, &["stats", "--json"]);
    assert_eq!(stats["blocked_keys"], 0, "{stats}");
    // An event the log published is not a head to skip (it carries no mark).
    let out = run(&db, &["ordering", "skip", &bad0.to_string()], 1);
    assert!(
        stderr(&out).contains("is not a head to skip"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        db.count("dead_lettered_at IS NOT NULL").await,
        1,
        "skipme 1 only"
    );

    // --on-dead skip: the key moves on past its dead head by itself, in the same run.
    run(
        &db,
        &[
            "ordering",
            "enable",
            "--aggregate-type",
            "order",
            "--on-dead",
            "skip",
        ],
        0,
    );
    fail.store(true, std::sync::atomic::Ordering::SeqCst);
    insert_keyed(&db, "self-skip", 1, true).await;
    insert_keyed(&db, "self-skip", 2, false).await;
    insert_keyed(&db, "self-skip", 3, false).await;
    relay().once_json();
    relay().once_json();
    assert_eq!(taken_by_key(&server).get("self-skip"), Some(&vec![2, 3]));
    let total: usize = taken_by_key(&server).values().map(Vec::len).sum();
    assert_eq!(total, 3 + 6 + 2 + 2, "each event once");
}

/// Ordered delivery in log mode, a retried (not dead) head: its key's later events, in its page
/// and the pages after it, wait in the retry set; once its backoff has passed it goes out, then
/// they do, in (xid, id) order, while the other keys never waited.
#[tokio::test]
async fn ordering_in_log_mode_sends_a_retried_head_then_its_keys_later_events_in_order() {
    let db = TestDb::new().await;
    // Both switches, ordering first.
    run(&db, &["ordering", "enable"], 0);
    run(&db, &["log", "enable"], 0);
    let fail = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let f = std::sync::Arc::clone(&fail);
    // The head fails once (a retryable 500), then is taken.
    let server = TestServer::start(0, move |r| {
        if r.json()["payload"]["poison"] == true
            && f.swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            (500, vec![])
        } else {
            (200, vec![])
        }
    });
    insert_keyed(&db, "k", 1, true).await;
    for n in 2..=5 {
        insert_keyed(&db, "k", n, false).await;
        insert_keyed(&db, "other", n, false).await;
    }
    let args = [
        "--batch-size",
        "2",
        "--backoff-base",
        "1s",
        "--backoff-max",
        "1s",
    ];
    let first = db.relay(server.url()).args(args).once_json();
    assert_eq!(first["retried"], 1, "{first}");
    let taken = taken_by_key(&server);
    assert_eq!(
        taken.get("k"),
        None,
        "the key waits behind its retried head"
    );
    assert_eq!(taken.get("other"), Some(&vec![2, 3, 4, 5]));
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_log_retry")
            .await,
        5
    );
    wait_until(Duration::from_secs(10), "the retry comes due", || async {
        db.scalar::<bool>(
            "SELECT available_at <= now() FROM outbox WHERE payload ->> 'poison' = 'true'",
        )
        .await
    })
    .await;
    let second = db.relay(server.url()).args(args).once_json();
    assert_eq!(second["published"], 5, "{second}");
    assert_eq!(taken_by_key(&server).get("k"), Some(&vec![1, 2, 3, 4, 5]));
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_log_retry")
            .await,
        0
    );
    let stats = run_json(&db, &["stats", "--json"]);
    assert_eq!(
        (&stats["ready"], &stats["scheduled"]),
        (&0.into(), &0.into()),
        "{stats}"
    );
}

/// Ordered delivery's statements in log mode go by key through the retry set's key index
/// (migration 15) and the blocking heads' index, never a scan of the outbox or of the retry set
/// (which grows while a blocked key's events wait), as custom and as generic plans, with the
/// relay's planner settings.
#[tokio::test]
async fn ordering_in_log_mode_reads_the_retry_set_by_key() {
    use crate::support::plans::{explain_custom_and_generic, plan_nodes};
    let db = TestDb::new().await;
    run(&db, &["log", "enable"], 0);
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         SELECT '00000000-0000-0000-0000-000000000001', 'order', (g % 500)::text, 'e', '{}', g::text
           FROM generate_series(1, 20000) g;
         INSERT INTO outbox_log_retry (id, available_at) SELECT id, now() FROM outbox WHERE id % 10 = 0;
         UPDATE outbox SET dead_lettered_at = now(), blocks_key = true WHERE id = 5;
         ANALYZE outbox; ANALYZE outbox_log_retry",
    )
    .await;
    let (with_keys, without): (i64, i64) = db
        .row("SELECT count(aggregate_id), count(*) FILTER (WHERE aggregate_id IS NULL) FROM outbox_log_retry")
        .await;
    assert_eq!(
        (with_keys, without),
        (2000, 0),
        "the trigger fills every entry's key"
    );
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::raw_sql("SET enable_seqscan = off; SET jit = off")
        .execute(&mut *conn)
        .await
        .unwrap();
    let statements = [
        (
            "waiting_keys",
            outboxctl::db::log::waiting_keys_sql(),
            "('{order,order}'::text[], '{00000000-0000-0000-0000-000000000001,00000000-0000-0000-0000-000000000001}'::uuid[], '{1,50}'::text[])",
        ),
        (
            "read_retries",
            outboxctl::db::log::read_retries_sql(true),
            "(500, true, '{}'::text[])",
        ),
    ];
    for (name, sql, args) in statements {
        for (mode, plan) in explain_custom_and_generic(&mut conn, name, &sql, args).await {
            let nodes = plan_nodes(&plan[0]["Plan"]);
            let scans: Vec<String> = nodes
                .iter()
                .filter(|n| n["Node Type"] == "Seq Scan")
                .map(|n| n["Relation Name"].to_string())
                .collect();
            let indexes: std::collections::BTreeSet<&str> = nodes
                .iter()
                .filter_map(|n| n["Index Name"].as_str())
                .collect();
            assert!(scans.is_empty(), "{name} ({mode}) scans {scans:?}: {plan}");
            assert!(
                indexes.contains("outbox_log_retry_key_idx")
                    && indexes.contains("outbox_blocking_idx"),
                "{name} ({mode}): {indexes:?}"
            );
        }
    }
}
