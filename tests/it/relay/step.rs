//! The relay step against the real database (MemorySink test double where no peer is needed),
//! and the real binary against real sinks: files, and an HTTP server the test runs.

use std::collections::{HashMap, HashSet};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use outboxctl::db::relay as sql;
use outboxctl::relay::{Backoff, Mode, Relay, RelayConfig};
use outboxctl::sink::memory::MemorySink;
use outboxctl::sink::Sink;
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use crate::support::{
    client_ports, ids_in_file, relay_to_file, signal, stderr, stdout, wait_until, TestDb,
};

const MODES: [Mode; 2] = [Mode::Lease, Mode::Tx];

async fn relay(db: &TestDb, sink: Arc<dyn Sink>, mode: Mode, max_attempts: u32) -> Relay {
    Relay {
        db: outboxctl::db::Session::new(
            outboxctl::db::pool_for_relay(&db.config(), 4, true, Duration::from_secs(30))
                .await
                .unwrap(),
            Default::default(),
        ),
        sink,
        cfg: RelayConfig {
            mode,
            batch_size: 100,
            batch_bytes: outboxctl::relay::DEFAULT_BATCH_BYTES,
            concurrency: 8,
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(5),
            max_attempts,
            backoff: Backoff {
                base: Duration::from_secs(10),
                max: Duration::from_secs(60),
            },
            shutdown_grace: Duration::from_secs(1),
            failpoint: None,
            pipeline_depth: outboxctl::relay::PIPELINE_DEPTH,
        },
        ordering: Default::default(),
        sizing: Default::default(),
        start: outboxctl::relay::cursor::ClaimStart::default(),
        log: Default::default(),
    }
}

/// A claim of at most `n` rows within the default byte budget.
fn rows(n: i64) -> sql::BatchLimit {
    sql::BatchLimit {
        rows: n,
        bytes: outboxctl::relay::DEFAULT_BATCH_BYTES as i64,
        sizing: sql::Sizing::Share,
    }
}

#[tokio::test]
async fn claim_respects_the_batch_and_concurrent_claims_are_disjoint() {
    let db = TestDb::with_backlog(1000).await;
    let mut conns = Vec::new();
    for _ in 0..3 {
        conns.push(db.pool.acquire().await.unwrap());
    }
    // Lease claims from three connections at once.
    let claims = futures::future::join_all(conns.iter_mut().map(|c| async move {
        sql::claim_lease(c, rows(150), Duration::from_secs(30), Uuid::new_v4())
            .await
            .unwrap()
            .rows
    }))
    .await;
    let mut seen = HashSet::new();
    for c in &claims {
        assert_eq!(
            c.len(),
            150,
            "a claim returns at most (here exactly) the batch"
        );
        for r in c {
            assert!(seen.insert(r.id), "row {} claimed twice", r.id);
            assert_eq!(r.attempt_count, 1);
        }
    }
    let leased: i64 = db
        .scalar(
            "SELECT count(*) FROM outbox WHERE locked_until > now() AND claim_token IS NOT NULL",
        )
        .await;
    assert_eq!(leased, 450);

    // Tx claims: two open transactions claim disjoint rows, skipping leased ones.
    use sqlx::Connection;
    let mut a = conns.pop().unwrap();
    let mut b = conns.pop().unwrap();
    let mut ta = a.begin().await.unwrap();
    let mut tb = b.begin().await.unwrap();
    let ra = sql::claim_tx(&mut ta, rows(300)).await.unwrap().rows;
    let rb = sql::claim_tx(&mut tb, rows(300)).await.unwrap().rows;
    assert_eq!(ra.len(), 300);
    assert_eq!(rb.len(), 250, "only 250 unleased rows were left");
    for r in ra.iter().chain(&rb) {
        assert!(seen.insert(r.id), "row {} claimed twice", r.id);
    }
    ta.commit().await.unwrap();
    tb.rollback().await.unwrap();
    let published = db.count("published_at IS NOT NULL").await;
    assert_eq!(
        published, 300,
        "the committed tx claim marked its rows; the rolled back one did not"
    );
}

/// The relay's own claim statements (both modes, both sizings, custom and generic plans) find
/// their rows through the partial ready index, never by a scan or a sort of published history.
#[tokio::test]
async fn claim_uses_the_ready_index_not_published_history() {
    let db = TestDb::with_backlog(20_000).await;
    db.exec("UPDATE outbox SET published_at = now() WHERE id <= 19000; ANALYZE outbox")
        .await;
    let mut c = db.pool.acquire().await.unwrap();
    for sizing in [sql::Sizing::Share, sql::Sizing::Running] {
        let limit = sql::BatchLimit {
            rows: 100,
            bytes: 16 << 20,
            sizing,
        };
        for (name, claim, args) in [
            ("tx", sql::claim_tx_sql(limit), "(NULL, NULL)"),
            (
                "lease",
                sql::claim_lease_sql(limit),
                "(30000000, gen_random_uuid(), NULL, NULL)",
            ),
        ] {
            let what = format!("{name} {sizing:?}");
            for (mode, plan) in
                crate::support::plans::explain_custom_and_generic(&mut c, &what, &claim, args).await
            {
                let text = plan.to_string();
                let what = format!("{what} {mode}");
                assert!(
                    text.contains("\"Index Name\":\"outbox_ready_idx\""),
                    "{what}: the claim must use the partial ready index: {text}"
                );
                assert!(
                    !text.contains("Seq Scan") && !text.contains("\"Node Type\":\"Sort\""),
                    "{what}: no scan or sort: {text}"
                );
            }
        }
    }
}

#[tokio::test]
async fn step_publishes_and_marks_in_both_modes() {
    for mode in MODES {
        let db = TestDb::with_backlog(250).await;
        let sink = Arc::new(MemorySink::default());
        let r = relay(&db, sink.clone(), mode, 5).await;
        let report =
            outboxctl::relay::daemon::once(&r, Default::default(), &CancellationToken::new())
                .await
                .unwrap();
        assert_eq!((report.claimed, report.published), (250, 250), "{mode:?}");
        let mut ids = sink.ids();
        ids.sort();
        assert_eq!(ids, (1..=250).collect::<Vec<_>>(), "{mode:?}");
        let left = db
            .count("published_at IS NULL OR locked_until IS NOT NULL OR attempt_count <> 1")
            .await;
        assert_eq!(left, 0, "{mode:?}: every row published once, lease cleared");
        // The document carries the dedup id and the row's fields.
        let (_, key, doc) = sink.received.lock().unwrap()[0].clone();
        let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
        assert_eq!(v["idempotency_key"], key.as_str());
        assert_eq!(v["type"], "order.placed");
        assert_eq!(v["aggregate_type"], "order");
        assert_eq!(v["tenant_id"], "00000000-0000-0000-0000-000000000001");
        assert!(
            v["payload"]["n"].is_i64() && v["created_at"].is_string() && v["headers"].is_object()
        );
    }
}

#[tokio::test]
async fn failures_back_off_then_dead_letter_after_max_attempts_and_poison_goes_at_once() {
    for mode in MODES {
        let db = TestDb::with_backlog(10).await;
        let sink = Arc::new(MemorySink::default());
        sink.retryable_ids.lock().unwrap().insert(3);
        sink.permanent_ids.lock().unwrap().insert(7);
        let r = relay(&db, sink.clone(), mode, 3).await;
        let never = CancellationToken::new();
        let first = r.step(100, &never).await.unwrap();
        assert_eq!(
            (first.published, first.retried, first.dead_lettered),
            (8, 1, 1),
            "{mode:?}"
        );
        // The poison row is dead at once, with its error; the others flowed.
        let (dead_at, err): (Option<chrono::DateTime<chrono::Utc>>, Option<String>) =
            sqlx::query_as("SELECT dead_lettered_at, last_error FROM outbox WHERE id = 7")
                .fetch_one(&db.pool)
                .await
                .unwrap();
        assert!(
            dead_at.is_some()
                && err
                    .as_deref()
                    .unwrap()
                    .contains("permanent: event 7 rejected"),
            "{mode:?}"
        );
        // The retryable row waits out a jittered backoff (base 10s: between 5s and 10s).
        let wait: f64 = db
            .scalar(
                "SELECT extract(epoch FROM available_at - now())::float8 FROM outbox WHERE id = 3",
            )
            .await;
        assert!((4.0..=10.5).contains(&wait), "{mode:?}: backoff {wait}");
        let again = r.step(100, &never).await.unwrap();
        assert_eq!(
            again.claimed, 0,
            "{mode:?}: nothing due during the backoff: no hot loop"
        );
        // Attempts 2 and 3 (made due by hand): dead-lettered on the third, not before.
        for attempt in 2..=3 {
            db.exec("UPDATE outbox SET available_at = now() WHERE id = 3")
                .await;
            let rep = r.step(100, &never).await.unwrap();
            assert_eq!(rep.claimed, 1);
            let (attempts, dead): (i32, bool) = sqlx::query_as(
                "SELECT attempt_count, dead_lettered_at IS NOT NULL FROM outbox WHERE id = 3",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap();
            assert_eq!(attempts, attempt);
            assert_eq!(dead, attempt == 3, "{mode:?}: dead only after max attempts");
        }
        let err: String = db
            .scalar("SELECT last_error FROM outbox WHERE id = 3")
            .await;
        assert!(err.contains("attempt 3 of 3"), "{err}");
    }
}

#[tokio::test]
async fn a_sink_that_cannot_take_the_batch_changes_no_row() {
    use outboxctl::sink::SinkError;
    for (mode, err) in [
        (
            Mode::Lease,
            SinkError::unavailable("cannot connect: Connection refused"),
        ),
        (
            Mode::Tx,
            SinkError::unavailable("cannot connect: Connection refused"),
        ),
        (
            Mode::Lease,
            SinkError::Closed("stdout: the reader closed the pipe".into()),
        ),
        (
            Mode::Tx,
            SinkError::Stalled("stdout reads slower than the lease allows".into()),
        ),
    ] {
        let db = TestDb::with_backlog(10).await;
        // Rows with a history: two failed attempts and an error; the give-back keeps it all.
        db.exec("UPDATE outbox SET attempt_count = 2, last_error = 'HTTP 500' WHERE id <= 5")
            .await;
        let before: Vec<(i64, i32, Option<String>, chrono::DateTime<chrono::Utc>)> =
            sqlx::query_as(
                "SELECT id, attempt_count, last_error, available_at FROM outbox ORDER BY id",
            )
            .fetch_all(&db.pool)
            .await
            .unwrap();
        let sink = Arc::new(MemorySink::default());
        *sink.down.lock().unwrap() = Some(err.clone());
        let r = relay(&db, sink.clone(), mode, 3).await;
        let rep = r.step(100, &CancellationToken::new()).await.unwrap();
        assert_eq!(
            (
                rep.claimed,
                rep.unavailable,
                rep.released,
                rep.retried,
                rep.sink_failures
            ),
            (10, 10, 10, 0, 0),
            "{mode:?} {err:?}"
        );
        assert_eq!(rep.sink_down, Some(err.clone()));
        let after: Vec<(i64, i32, Option<String>, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
            "SELECT id, attempt_count, last_error, available_at FROM outbox ORDER BY id",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(before, after, "{mode:?} {err:?}: untouched");
        let free: i64 = db
            .scalar(
                "SELECT count(*) FROM outbox WHERE locked_until IS NULL AND published_at IS NULL",
            )
            .await;
        assert_eq!(free, 10, "{mode:?}: claimable again at once");
    }
}

#[tokio::test]
async fn a_stale_relay_cannot_overwrite_the_newer_outcome() {
    let db = TestDb::with_backlog(2).await;
    let mut c = db.pool.acquire().await.unwrap();
    let (stale, fresh) = (Uuid::new_v4(), Uuid::new_v4());
    let first = sql::claim_lease(&mut c, rows(10), Duration::from_secs(30), stale)
        .await
        .unwrap()
        .rows;
    assert_eq!(first.len(), 2);
    // The stale relay stalls past its lease; another relay claims the rows again.
    db.exec("UPDATE outbox SET locked_until = now() - interval '1 second'")
        .await;
    let second = sql::claim_lease(&mut c, rows(10), Duration::from_secs(30), fresh)
        .await
        .unwrap()
        .rows;
    assert_eq!(second.len(), 2);
    // The new owner publishes row 1 and fails row 2 (retry).
    assert_eq!(
        sql::settle_published(&mut c, &[1], fresh).await.unwrap(),
        vec![1]
    );
    let retry = sql::Failure {
        id: 2,
        retry_in: Duration::from_secs(60),
        dead: false,
        error: "fresh failure".into(),
        counted: true,
    };
    assert_eq!(
        sql::settle_failed(&mut c, &[retry], fresh).await.unwrap(),
        vec![2]
    );
    let before: Vec<(i64, Option<String>, String, i32)> = sqlx::query_as(
        "SELECT id, last_error, coalesce(published_at::text, '') || coalesce(dead_lettered_at::text, '') || available_at::text, attempt_count FROM outbox ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    // The stale relay wakes and settles with its old token: nothing changes.
    assert!(sql::settle_published(&mut c, &[2], stale)
        .await
        .unwrap()
        .is_empty());
    let dead = sql::Failure {
        id: 1,
        retry_in: Duration::ZERO,
        dead: true,
        error: "stale".into(),
        counted: true,
    };
    assert!(sql::settle_failed(&mut c, &[dead], stale)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(sql::release(&mut c, &[1, 2], stale).await.unwrap(), 0);
    let after: Vec<(i64, Option<String>, String, i32)> = sqlx::query_as(
        "SELECT id, last_error, coalesce(published_at::text, '') || coalesce(dead_lettered_at::text, '') || available_at::text, attempt_count FROM outbox ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(before, after);
}

#[tokio::test]
async fn four_relay_processes_deliver_20k_events_exactly_once() {
    for mode in MODES {
        let db = TestDb::with_backlog(20_000).await;
        let dir = tempfile::tempdir().unwrap();
        let children: Vec<_> = (0..4)
            .map(|i| {
                let path = dir.path().join(format!("sink-{i}.jsonl"));
                let child = relay_to_file(&db, mode, &path)
                    .args(["--once", "--batch-size", "200", "--json"])
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap();
                (path, child)
            })
            .collect();
        let mut all = Vec::new();
        for (path, child) in children {
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{mode:?}: {}", stderr(&out));
            let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let ids = ids_in_file(&path);
            assert_eq!(summary["published"].as_u64().unwrap() as usize, ids.len());
            all.extend(ids);
        }
        assert_eq!(
            all.len(),
            20_000,
            "{mode:?}: every event delivered once, none twice"
        );
        let distinct: HashSet<_> = all.iter().collect();
        assert_eq!(distinct.len(), 20_000, "{mode:?}");
        let unpublished = db.count("published_at IS NULL").await;
        assert_eq!(unpublished, 0, "{mode:?}");
    }
}

#[tokio::test]
async fn kill_9_after_publish_before_settle_loses_nothing() {
    for mode in MODES {
        let db = TestDb::with_backlog(1000).await;
        let dir = tempfile::tempdir().unwrap();
        let first = dir.path().join("first.jsonl");
        // One batch in flight (the depth-2 bound: pipeline::kill_9_at_depth_2_...).
        let mut child = relay_to_file(&db, mode, &first)
            .args(["--once", "--batch-size", "300", "--lease", "2s"])
            .args(["--pipeline-depth", "1"])
            .env("OUTBOXCTL_TEST_FAILPOINT", "hang-after-publish")
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The fail-point announces itself once the batch is in the sink and before the settle.
        let mut err = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        loop {
            line.clear();
            assert!(
                std::io::BufRead::read_line(&mut err, &mut line).unwrap() > 0,
                "relay exited early"
            );
            if line.contains("FAILPOINT hang-after-publish reached") {
                break;
            }
        }
        signal(&child, "KILL");
        child.wait().unwrap();
        let killed_batch = ids_in_file(&first);
        assert_eq!(killed_batch.len(), 300, "{mode:?}");
        // Lease mode: the rows stay leased until it expires; expire it rather than wait.
        // Tx mode: the killed session's transaction rolled back, so nothing is held.
        if mode == Mode::Lease {
            let leased = db.count("locked_until > now()").await;
            assert_eq!(leased, 300);
            db.exec("UPDATE outbox SET locked_until = now() - interval '1 millisecond' WHERE locked_until IS NOT NULL").await;
        } else {
            let published = db.count("published_at IS NOT NULL").await;
            assert_eq!(published, 0, "the killed transaction rolled back");
        }
        let second = dir.path().join("second.jsonl");
        let out = relay_to_file(&db, mode, &second)
            .args(["--once", "--batch-size", "300"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let redelivered = ids_in_file(&second);
        let all: HashSet<i64> = killed_batch.iter().chain(&redelivered).copied().collect();
        assert_eq!(all.len(), 1000, "{mode:?}: nothing lost");
        let dupes: HashSet<i64> = killed_batch
            .iter()
            .filter(|id| redelivered.contains(id))
            .copied()
            .collect();
        assert_eq!(
            dupes,
            killed_batch.iter().copied().collect(),
            "{mode:?}: duplicates only from the killed batch"
        );
        // Same dedup id on both deliveries.
        let keys = |p: &std::path::Path| -> HashMap<i64, String> {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| {
                    let v: serde_json::Value = serde_json::from_str(l).unwrap();
                    (
                        v["id"].as_i64().unwrap(),
                        v["idempotency_key"].as_str().unwrap().to_owned(),
                    )
                })
                .collect()
        };
        let (k1, k2) = (keys(&first), keys(&second));
        for id in &dupes {
            assert_eq!(k1[id], k2[id]);
        }
        let unpublished = db.count("published_at IS NULL").await;
        assert_eq!(unpublished, 0);
    }
}

#[tokio::test]
async fn daemon_delivers_a_notified_event_in_milliseconds_and_a_delayed_one_on_time() {
    for mode in MODES {
        let db = TestDb::new().await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        // A long poll interval: only NOTIFY and the due-time timer can explain fast delivery.
        let mut child = relay_to_file(&db, mode, &path)
            .args(["--poll-interval", "60s"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Wait until this daemon LISTENs on this schema's channel (not another test's daemon).
        let channel = format!("outboxctl:{}", db.schema);
        wait_until(Duration::from_secs(10), "relay LISTENs", || async {
            let mut c = db.pool.acquire().await.unwrap();
            outboxctl::db::is_listening(&mut c, &channel).await.unwrap()
        })
        .await;
        let out = db
            .cmd()
            .args([
                "publish",
                "--event-type",
                "e",
                "--aggregate-type",
                "a",
                "--aggregate-id",
                "1",
                "--payload",
                "{}",
                "--delay",
                "1500ms",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        db.seed_ready(1).await;
        wait_until(Duration::from_secs(5), "both events delivered", || async {
            ids_in_file(&path).len() == 2
        })
        .await;
        // The line is in the file a moment before the mark commits.
        wait_until(Duration::from_secs(5), "both events marked", || async {
            db.count("published_at IS NOT NULL").await == 2
        })
        .await;
        // Lateness from the database's own timestamps. In tx mode published_at is the claim's
        // time; in lease mode it is the settle's, a file append (fsync) later.
        let notified: f64 = db
            .scalar("SELECT extract(epoch FROM published_at - created_at)::float8 FROM outbox WHERE event_type = 'order.placed'")
            .await;
        let late: f64 = db
            .scalar("SELECT extract(epoch FROM published_at - available_at)::float8 FROM outbox WHERE event_type = 'e'")
            .await;
        // Bounds far under the 60 s poll interval (so only NOTIFY and the due-time timer can
        // meet them) and far over what a loaded 2-core machine adds (typically 5-50 ms).
        assert!(
            notified < 2.0,
            "{mode:?}: NOTIFY-woken delivery took {notified}s"
        );
        assert!(
            (0.0..2.0).contains(&late),
            "{mode:?}: delayed event published {late}s after its due time"
        );
        signal(&child, "TERM");
        assert!(child.wait().unwrap().success());
    }
}

#[tokio::test]
async fn once_exit_codes_for_unreachable_database_and_sink() {
    let db = TestDb::with_backlog(3).await;
    let out = db
        .relay("http://hook:s3cr3t@127.0.0.1:9/x?token=t0k3n")
        .args(["-vv"])
        .once(5);
    assert!(
        stderr(&out).contains("is unavailable: cannot connect"),
        "{}",
        stderr(&out)
    );
    assert!(
        stdout(&out).contains("http://hook:***@127.0.0.1:9/x?…"),
        "{}",
        stdout(&out)
    );
    for secret in ["s3cr3t", "t0k3n"] {
        assert!(
            !stdout(&out).contains(secret) && !stderr(&out).contains(secret),
            "{secret} leaked"
        );
    }
    let errors: Vec<Option<String>> = sqlx::query_scalar("SELECT last_error FROM outbox")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(
        errors
            .iter()
            .flatten()
            .all(|e| !e.contains("s3cr3t") && !e.contains("t0k3n")),
        "{errors:?}"
    );
    let untouched = db
        .count("attempt_count = 0 AND last_error IS NULL AND dead_lettered_at IS NULL")
        .await;
    assert_eq!(untouched, 3, "an unreachable sink charges no attempt");

    let out = crate::support::bin()
        .args(["relay", "--once", "--connect-timeout", "2s"])
        .env("DATABASE_URL", "postgres://bob:hunter2@127.0.0.1:9/x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert!(
        err.starts_with("error: cannot connect to PostgreSQL at bob@127.0.0.1:9/x"),
        "{err}"
    );
    assert!(!err.contains("hunter2") && !stdout(&out).contains("hunter2"));
}

#[tokio::test]
async fn survives_pg_terminate_backend_mid_run() {
    for mode in MODES {
        let db = TestDb::with_backlog(6_000).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let mut child = relay_to_file(&db, mode, &path)
            .args(["--batch-size", "100", "--poll-interval", "200ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut kills = 0;
        for target in [1_000, 2_500, 4_000] {
            wait_until(Duration::from_secs(20), "progress", || async {
                db.count("published_at IS NOT NULL").await >= target
            })
            .await;
            // Only this relay's backends: tests running beside this one use the same
            // application_name, and killing their connections would fail them.
            kills += sqlx::query_scalar::<_, i64>(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
                  WHERE starts_with(application_name, 'outboxctl') AND client_port = ANY($1)",
            )
            .bind(client_ports(&child))
            .fetch_one(&db.pool)
            .await
            .unwrap();
        }
        assert!(kills >= 3, "{mode:?}: terminated {kills} relay connections");
        wait_until(
            Duration::from_secs(60),
            "everything published after the reconnects",
            || async { db.count("published_at IS NULL").await == 0 },
        )
        .await;
        signal(&child, "TERM");
        assert!(child.wait().unwrap().success(), "{mode:?}");
        let ids: HashSet<i64> = ids_in_file(&path).into_iter().collect();
        assert_eq!(ids.len(), 6_000, "{mode:?}: every event reached the sink");
    }
}

#[tokio::test]
async fn once_honours_max_events_and_rejects_bad_settings() {
    let db = TestDb::with_backlog(1000).await;
    let v = db
        .relay("null")
        .args(["--batch-size", "100", "--max-events", "250"])
        .once_json();
    assert_eq!(v["published"], 250);
    let published = db.count("published_at IS NOT NULL").await;
    assert_eq!(published, 250, "stopped at --max-events");

    for (args, want) in [
        (
            vec!["--lease", "10s", "--publish-timeout", "10s"],
            "must be shorter than --lease",
        ),
        (vec!["--sink", "kafka://x"], "invalid --sink"),
        (
            vec!["--sink", "nats://127.0.0.1:4222?subject=a.*"],
            "plain NATS subject",
        ),
        (
            vec!["--sink", "http://x", "--signing-secret-env", "NOPE_NOT_SET"],
            "NOPE_NOT_SET",
        ),
        (
            vec!["--backoff-base", "10m", "--backoff-max", "1m"],
            "--backoff-base",
        ),
        (vec!["--lease", "0s"], "greater than zero"),
    ] {
        let out = db
            .cmd()
            .args(["relay", "--once"])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.lines().next().unwrap().starts_with("error: ")
                && err.lines().next().unwrap().contains(want),
            "{args:?}: {err}"
        );
    }
    let published = db.count("published_at IS NOT NULL").await;
    assert_eq!(published, 250, "bad settings changed nothing");
}

#[tokio::test]
async fn next_due_sees_due_rows_scheduled_rows_and_lease_expiry() {
    let db = TestDb::new().await;
    let mut c = db.pool.acquire().await.unwrap();
    assert_eq!(
        sql::next_due_in(&mut c).await.unwrap(),
        None,
        "nothing pending"
    );
    db.seed_ready(2).await;
    db.exec("UPDATE outbox SET available_at = now() + interval '30 seconds' WHERE id = 2")
        .await;
    // Row 1 is due but held by another transaction (a tx-mode relay): due now, not "nothing".
    use sqlx::Connection;
    let mut other = db.pool.acquire().await.unwrap();
    let mut tx = other.begin().await.unwrap();
    sqlx::query("SELECT 1 FROM outbox WHERE id = 1 FOR UPDATE")
        .execute(&mut *tx)
        .await
        .unwrap();
    assert_eq!(
        sql::next_due_in(&mut c).await.unwrap(),
        Some(Duration::ZERO)
    );
    tx.rollback().await.unwrap();
    // Row 1 leased for 10s: the next claimable moment is its lease expiry, before row 2's due time.
    db.exec("UPDATE outbox SET locked_until = now() + interval '10 seconds' WHERE id = 1")
        .await;
    let d = sql::next_due_in(&mut c).await.unwrap().unwrap();
    assert!(
        d > Duration::from_secs(9) && d <= Duration::from_secs(10),
        "{d:?}"
    );
    db.exec("UPDATE outbox SET published_at = now() WHERE id = 1")
        .await;
    let d = sql::next_due_in(&mut c).await.unwrap().unwrap();
    assert!(
        d > Duration::from_secs(29) && d <= Duration::from_secs(30),
        "{d:?}"
    );
}

#[tokio::test]
async fn claims_generic_plans_never_scan_the_table() {
    // A prepared statement switches to a generic plan after five runs; with a join on `id` that
    // plan was a hash join over a Seq Scan of the whole table (history included).
    let db = TestDb::with_backlog(20_000).await;
    db.exec("UPDATE outbox SET published_at = now() WHERE id <= 15000; ANALYZE outbox")
        .await;
    let mut c = db.pool.acquire().await.unwrap();
    sqlx::raw_sql("SET plan_cache_mode = force_generic_plan")
        .execute(&mut *c)
        .await
        .unwrap();
    let limit = |sizing| sql::BatchLimit {
        rows: 100,
        bytes: 16 << 20,
        sizing,
    };
    let (share, running) = (limit(sql::Sizing::Share), limit(sql::Sizing::Running));
    for (name, sql, args) in [
        ("claim_tx", sql::claim_tx_sql(share), "(NULL, NULL)"),
        (
            "claim_lease",
            sql::claim_lease_sql(share),
            "(30000000, gen_random_uuid(), NULL, NULL)",
        ),
        (
            "claim_tx_running",
            sql::claim_tx_sql(running),
            "(NULL, NULL)",
        ),
        (
            "claim_lease_running",
            sql::claim_lease_sql(running),
            "(30000000, gen_random_uuid(), NULL, NULL)",
        ),
    ] {
        sqlx::raw_sql(&format!("PREPARE {name} AS {sql}"))
            .execute(&mut *c)
            .await
            .unwrap();
        assert_tid_scan_plan(&mut c, name, args).await;
    }
}

#[tokio::test]
async fn claims_update_by_tid_whatever_the_statistics_say() {
    // Issue 22 item 10's shape: a ctid-batched statement must keep its TID lookup when the
    // statistics lie, in both directions.
    let db = TestDb::new().await;
    db.exec("ALTER TABLE outbox SET (autovacuum_enabled = false)")
        .await;
    db.seed_ready(20_000).await;
    let mut c = db.pool.acquire().await.unwrap();
    let limit = |sizing| sql::BatchLimit {
        rows: 100,
        bytes: 16 << 20,
        sizing,
    };
    for (stats_when, before, after) in [
        (
            "analyzed with all pending, now most published",
            "UPDATE outbox SET published_at = NULL",
            "UPDATE outbox SET published_at = now() WHERE id <= 19000",
        ),
        (
            "analyzed with all published, now all pending",
            "UPDATE outbox SET published_at = now()",
            "UPDATE outbox SET published_at = NULL",
        ),
    ] {
        db.exec(&format!("{before}; ANALYZE outbox; {after}")).await;
        for sizing in [sql::Sizing::Share, sql::Sizing::Running] {
            for (name, sql, args) in [
                ("claim_tx", sql::claim_tx_sql(limit(sizing)), "(NULL, NULL)"),
                (
                    "claim_lease",
                    sql::claim_lease_sql(limit(sizing)),
                    "(30000000, gen_random_uuid(), NULL, NULL)",
                ),
            ] {
                crate::support::plans::assert_tid_lookup(
                    &mut c,
                    &format!("{name} {sizing:?}, {stats_when}"),
                    &sql,
                    args,
                    ("Update", "outbox"),
                    &[],
                )
                .await;
            }
        }
    }
}

/// `EXPLAIN EXECUTE name args` reaches the rows by `outbox_ready_idx` and a TID scan, no Seq Scan.
async fn assert_tid_scan_plan(c: &mut sqlx::PgConnection, name: &str, args: &str) {
    let plan: Vec<String> = sqlx::query_scalar(&format!("EXPLAIN EXECUTE {name}{args}"))
        .fetch_all(c)
        .await
        .unwrap();
    let plan = plan.join("\n");
    assert!(
        plan.contains("Tid Scan") && plan.contains("outbox_ready_idx"),
        "{name}: {plan}"
    );
    // The claim's start is where the index scan begins, not a filter over what it reads.
    assert!(
        plan.lines()
            .any(|l| l.contains("Index Cond") && l.contains("ROW(available_at, id) >")),
        "{name}: {plan}"
    );
    assert!(!plan.contains("Seq Scan"), "{name}: {plan}");
}

#[tokio::test]
async fn claims_are_planned_once_per_connection() {
    // Re-planning the byte-budgeted claim at every run was half of a small claim's server cost.
    let db = TestDb::with_backlog(50).await;
    let pool = outboxctl::db::pool_for_relay(&db.config(), 1, true, Duration::from_secs(30))
        .await
        .unwrap();
    let mut c = pool.acquire().await.unwrap();
    for sizing in [sql::Sizing::Share, sql::Sizing::Running] {
        let limit = sql::BatchLimit {
            rows: 2,
            bytes: 16 << 20,
            sizing,
        };
        for _ in 0..8 {
            use sqlx::Connection;
            let mut tx = c.begin().await.unwrap();
            assert_eq!(sql::claim_tx(&mut tx, limit).await.unwrap().rows.len(), 2);
            tx.rollback().await.unwrap();
            let token = Uuid::new_v4();
            let got = sql::claim_lease(&mut c, limit, Duration::from_secs(30), token)
                .await
                .unwrap();
            assert_eq!(got.rows.len(), 2);
            let ids: Vec<i64> = got.rows.iter().map(|r| r.id).collect();
            sql::release(&mut c, &ids, token).await.unwrap();
        }
    }
    let plans: Vec<(String, String, i64, i64)> = sqlx::query_as(
        "SELECT CASE WHEN statement LIKE '%claim_token = $2%' THEN 'lease' ELSE 'tx' END,
                CASE WHEN statement LIKE '%WITH sized AS MATERIALIZED%' THEN 'running'
                     ELSE 'share' END,
                generic_plans, custom_plans
           FROM pg_prepared_statements
          WHERE statement LIKE '%FOR UPDATE SKIP LOCKED%UPDATE outbox o%'
            AND statement NOT LIKE '%pg_prepared_statements%'
          ORDER BY 1, 2",
    )
    .fetch_all(&mut *c)
    .await
    .unwrap();
    // PostgreSQL's five custom plans, then the generic one: the parameters are the claim's start
    // (and in lease mode the lease and the token), which the plan's shape does not depend on.
    assert_eq!(
        plans,
        vec![
            ("lease".into(), "running".into(), 3, 5),
            ("lease".into(), "share".into(), 3, 5),
            ("tx".into(), "running".into(), 3, 5),
            ("tx".into(), "share".into(), 3, 5)
        ],
        "generic and custom plans per claim statement"
    );
}

#[tokio::test]
async fn a_claim_planned_on_an_empty_table_keeps_its_tid_scan() {
    // The relay's sessions keep a claim's plan: one made on an empty table must not be a Seq Scan
    // that a growing table would then run at every claim until the next vacuum.
    let db = TestDb::new().await;
    let pool = outboxctl::db::pool_for_relay(&db.config(), 1, true, Duration::from_secs(30))
        .await
        .unwrap();
    let mut c = pool.acquire().await.unwrap();
    for (name, sizing) in [
        ("share", sql::Sizing::Share),
        ("running", sql::Sizing::Running),
    ] {
        let limit = sql::BatchLimit {
            rows: 1000,
            bytes: 16 << 20,
            sizing,
        };
        sqlx::raw_sql(&format!("PREPARE {name} AS {}", sql::claim_tx_sql(limit)))
            .execute(&mut *c)
            .await
            .unwrap();
        sqlx::raw_sql(&format!("BEGIN; EXECUTE {name}(NULL, NULL); ROLLBACK"))
            .execute(&mut *c)
            .await
            .unwrap();
    }
    db.seed_ready(5000).await;
    for name in ["share", "running"] {
        assert_tid_scan_plan(&mut c, name, "(NULL, NULL)").await;
    }
}

/// `--mode auto` per sink, judged by the rows: a tx-mode claim marks the row published in its own
/// transaction and never writes a `claim_token`; a lease claim always does. Tx for the sinks that
/// publish a whole batch within one `--publish-timeout` (file, null, Redis, Kafka), lease for
/// those that publish event by event (HTTP, NATS, RabbitMQ), where a slow sink would keep the
/// transaction open up to the lease (README, "Broker sinks against their raw clients").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auto_mode_picks_tx_for_sinks_that_publish_a_batch_within_one_timeout() {
    let tag = uuid::Uuid::new_v4().simple().to_string()[..10].to_owned();
    // NATS: a stream for the subjects; RabbitMQ: a queue.
    let js = async_nats::jetstream::new(
        async_nats::connect("127.0.0.1:4222")
            .await
            .expect("nats-server on 127.0.0.1:4222"),
    );
    js.create_stream(async_nats::jetstream::stream::Config {
        name: format!("AUTO{tag}").to_uppercase(),
        subjects: vec![format!("auto{tag}.>")],
        ..Default::default()
    })
    .await
    .unwrap();
    let amqp = "amqp://guest:guest@127.0.0.1:5672/%2f";
    let conn = lapin::Connection::connect(amqp, lapin::ConnectionProperties::default())
        .await
        .expect("rabbitmq on 127.0.0.1:5672");
    let ch = conn.create_channel().await.unwrap();
    let queue = format!("obx-auto-{tag}");
    ch.queue_declare(
        queue.as_str().into(),
        lapin::options::QueueDeclareOptions::default(),
        lapin::types::FieldTable::default(),
    )
    .await
    .unwrap();
    let http = crate::support::servers::TestServer::start(0, |_| (200, vec![]));
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("auto.jsonl");
    let cases = [
        ("null".to_owned(), "tx"),
        (format!("file:{}", file.display()), "tx"),
        (
            format!("redis://127.0.0.1:6379/0?stream=obx-auto-{tag}"),
            "tx",
        ),
        (format!("kafka://127.0.0.1:9092?topic=obx-auto-{tag}"), "tx"),
        (http.url(), "lease"),
        (
            format!("nats://127.0.0.1:4222?subject=auto{tag}.{{event_type}}"),
            "lease",
        ),
        (format!("{amqp}?routing_key={queue}"), "lease"),
    ];
    for (sink, expected) in cases {
        let db = TestDb::with_backlog(12).await;
        let v = db.relay(&sink).once_json_off_runtime().await;
        assert_eq!(v["published"], 12, "{sink}: {v}");
        let (published, tokens, first_attempts): (i64, i64, i64) = sqlx::query_as(
            "SELECT count(*) FILTER (WHERE published_at IS NOT NULL), count(claim_token),
                    count(*) FILTER (WHERE attempt_count = 1)
               FROM outbox",
        )
        .fetch_one(&db.pool)
        .await
        .unwrap();
        let mode = if tokens == 0 { "tx" } else { "lease" };
        assert_eq!(
            (published, first_attempts, mode),
            (12, 12, expected),
            "{sink}: {tokens} rows with a claim token"
        );
        assert_eq!(v["mode"], expected, "{sink}: the summary's mode");
    }
    let _ = js.delete_stream(format!("AUTO{tag}").to_uppercase()).await;
    let _ = ch
        .queue_delete(queue.as_str().into(), Default::default())
        .await;
    let mut r = redis::Client::open("redis://127.0.0.1:6379/0")
        .unwrap()
        .get_connection()
        .unwrap();
    let _: () = redis::cmd("DEL")
        .arg(format!("obx-auto-{tag}"))
        .query(&mut r)
        .unwrap();
}

/// Issue 30: a relay's claims start after the last row its previous claim took (so they never
/// walk the index entries of rows published since the xmin horizon), and go back to the start
/// from time to time. An event that becomes ready *behind* the cursor (here: a producer's
/// transaction that began an hour ago commits now, so its `available_at` is an hour old; a
/// lease that ran out or a reschedule into the past are the same) is not starved: the daemon
/// claims it within the stated bound: 20 times the last claim from the start (milliseconds here)
/// plus the poll interval.
#[tokio::test]
async fn an_event_ready_behind_the_claim_cursor_is_claimed_within_the_bound() {
    let poll = Duration::from_millis(200);
    for mode in MODES {
        let db = TestDb::with_backlog(2_000).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let mut child = relay_to_file(&db, mode, &path)
            .args(["--batch-size", "100", "--poll-interval", "200ms"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_until(Duration::from_secs(30), "the backlog drained", || async {
            db.count("published_at IS NULL").await == 0
        })
        .await;
        let behind: i64 = db
            .scalar(
                "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                                     idempotency_key, available_at)
                 VALUES ('00000000-0000-0000-0000-000000000001', 'a', 'late', 'e', '{}',
                         'late-commit', now() - interval '1 hour')
                 RETURNING id",
            )
            .await;
        let inserted = std::time::Instant::now();
        wait_until(
            Duration::from_secs(30),
            "the event behind the cursor published",
            || async {
                db.scalar::<bool>(&format!(
                    "SELECT published_at IS NOT NULL FROM outbox WHERE id = {behind}"
                ))
                .await
            },
        )
        .await;
        let took = inserted.elapsed();
        // The bound, plus a second for this machine's scheduling.
        let bound = poll + Duration::from_secs(1);
        assert!(
            took <= bound,
            "{mode:?}: claimed after {took:?} (bound {bound:?})"
        );
        signal(&child, "TERM");
        assert!(child.wait().unwrap().success(), "{mode:?}");
        assert!(ids_in_file(&path).contains(&behind), "{mode:?}");
    }
}

/// Issue 30: a `relay --once` run starts where the previous run's claims reached (the floor
/// saved in `outbox_relay_floor`), not at the start of the ready index, whose first entries a
/// held snapshot keeps full of dead rows. An event that becomes ready behind that position (a
/// producer's transaction that began an hour ago commits now) waits for the first run that
/// starts 20 times the last claim from the start's duration after it; that run claims it after
/// the new events. Here the saved claim from the start is made to have taken ten minutes (as one
/// over millions of dead rows might), so the bound has not passed; then 200 minutes old, so it
/// has.
#[tokio::test]
async fn relay_once_resumes_at_the_saved_floor_and_claims_what_is_behind_it_when_due() {
    for mode in MODES {
        let db = TestDb::new().await;
        db.seed_ready(300).await;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.jsonl");
        let once = || {
            let out = relay_to_file(&db, mode, &path)
                .args(["--once", "--batch-size", "100"])
                .output()
                .unwrap();
            assert!(out.status.success(), "{mode:?}: {}", stderr(&out));
        };
        once();
        let (floor, last): (i64, i64) = (
            db.scalar("SELECT id FROM outbox_relay_floor").await,
            db.scalar("SELECT max(id) FROM outbox").await,
        );
        assert_eq!(
            floor, last,
            "{mode:?}: the run saved where its claims reached"
        );
        db.exec("UPDATE outbox_relay_floor SET sweep_took = interval '10 minutes'")
            .await;
        let behind: i64 = db
            .scalar(
                "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                                     idempotency_key, available_at)
                 VALUES ('00000000-0000-0000-0000-000000000001', 'a', 'late', 'e', '{}',
                         'late-commit', now() - interval '1 hour')
                 RETURNING id",
            )
            .await;
        db.exec(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                                 idempotency_key)
             SELECT '00000000-0000-0000-0000-000000000001', 'order', 'n', 'order.placed', '{}',
                    'new-1-' || g FROM generate_series(1, 3) g",
        )
        .await;
        once();
        let published_behind = || async {
            db.scalar::<bool>(&format!(
                "SELECT published_at IS NOT NULL FROM outbox WHERE id = {behind}"
            ))
            .await
        };
        assert!(
            !published_behind().await,
            "{mode:?}: the run started at the saved floor (a run from the start claims it)"
        );
        assert_eq!(
            db.scalar::<i64>("SELECT count(*) FROM outbox WHERE published_at IS NULL")
                .await,
            1,
            "{mode:?}: the new events went out"
        );
        // The saved claim from the start is now 20 x 10 minutes old: the next run makes one,
        // after the new events.
        db.exec("UPDATE outbox_relay_floor SET swept_at = now() - interval '200 minutes'")
            .await;
        db.exec(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                                 idempotency_key)
             SELECT '00000000-0000-0000-0000-000000000001', 'order', 'n', 'order.placed', '{}',
                    'new-2-' || g FROM generate_series(1, 2) g",
        )
        .await;
        once();
        assert!(published_behind().await, "{mode:?}: claimed once due");
        let ids = ids_in_file(&path);
        assert_eq!(ids.last(), Some(&behind), "{mode:?}: after the new events");
        assert_eq!(ids.len(), 306, "{mode:?}: each event once");
        let took: f64 = db
            .scalar("SELECT extract(epoch FROM now() - swept_at)::float8 FROM outbox_relay_floor")
            .await;
        assert!(took < 60.0, "{mode:?}: the new claim from the start saved");
    }
}
