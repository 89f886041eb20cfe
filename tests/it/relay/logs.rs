//! What the relay logs, from the real binary: `--log-format json` lines (every line the daemon
//! prints, summary and second-signal message included), a WARN per dead letter that never holds
//! the payload, and the heartbeat while idle.

use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use outboxctl::relay::Mode;

use crate::support::servers::TestServer;
use crate::support::{capture, signal, stderr, stdout, wait_until, TestDb};
use crate::support::{mode_flag, relay_to_file};

/// Parses every line as a JSON object in the flat shape: lower-case `level`, a `message`,
/// fields beside them (no nested `fields`/`span`).
fn json_lines(text: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: serde_json::Value =
                serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
            let obj = v
                .as_object()
                .unwrap_or_else(|| panic!("not an object: {l}"))
                .clone();
            let level = obj["level"]
                .as_str()
                .unwrap_or_else(|| panic!("no level: {l}"));
            assert!(
                ["error", "warn", "info", "debug", "trace"].contains(&level),
                "level in lower case: {l}"
            );
            assert!(obj["message"].is_string(), "message: {l}");
            assert!(obj["timestamp"].is_string(), "timestamp: {l}");
            assert!(
                !obj.contains_key("fields") && !obj.contains_key("span"),
                "fields at the top level: {l}"
            );
            obj
        })
        .collect()
}

/// Inserts `n` more ready events (with keys of their own).
async fn seed_more(db: &TestDb, n: i64) {
    db.exec(&format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         SELECT '00000000-0000-0000-0000-000000000001', 'order', 'm-' || g, 'order.placed', '{{}}', gen_random_uuid()::text
           FROM generate_series(1, {n}) g"
    ))
    .await;
}

fn with_message<'a>(
    lines: &'a [serde_json::Map<String, serde_json::Value>],
    needle: &str,
) -> Vec<&'a serde_json::Map<String, serde_json::Value>> {
    lines
        .iter()
        .filter(|l| l["message"].as_str().unwrap().contains(needle))
        .collect()
}

#[tokio::test]
async fn json_logs_cover_every_daemon_line_including_summary_and_second_signal() {
    // A daemon shut down once: its start, shutdown and summary lines.
    let db = TestDb::with_backlog(5).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let mut child = relay_to_file(&db, Mode::Lease, &path)
        .args(["--log-format", "json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = capture(child.stderr.take().unwrap());
    wait_until(Duration::from_secs(20), "all published", || async {
        db.count("published_at IS NOT NULL").await == 5
    })
    .await;
    signal(&child, "TERM");
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    // The capture thread may still be reading the pipe the relay has closed.
    wait_until(
        Duration::from_secs(10),
        "stderr read to its end",
        || async { log.lock().unwrap().contains("shutting down") },
    )
    .await;
    let err = json_lines(&log.lock().unwrap());
    let start = with_message(&err, "relay starting");
    assert_eq!(start.len(), 1, "{err:?}");
    assert_eq!(start[0]["mode"], "lease");
    assert_eq!(start[0]["once"], false);
    assert_eq!(with_message(&err, "shutting down").len(), 1, "{err:?}");
    let summary = json_lines(&stdout(&out));
    assert_eq!(summary.len(), 1, "one summary line on stdout");
    assert_eq!(summary[0]["level"], "info");
    assert_eq!(summary[0]["message"], "relay finished");
    assert_eq!(summary[0]["published"], 5);
    assert_eq!(summary[0]["mode"], "lease");

    // A `--once` run's summary, and a fatal error.
    seed_more(&db, 3).await;
    let out = relay_to_file(&db, Mode::Tx, &path)
        .args(["--once", "--log-format", "json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    json_lines(&stderr(&out));
    let summary = json_lines(&stdout(&out));
    assert_eq!(summary[0]["message"], "relay finished");
    assert_eq!(summary[0]["mode"], "tx");
    assert_eq!(summary[0]["published"], 3);
    let out = crate::support::bin()
        .args([
            "relay",
            "--once",
            "--log-format",
            "json",
            "--connect-timeout",
            "2s",
        ])
        .env("DATABASE_URL", "postgres://bob@127.0.0.1:9/x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    let err = json_lines(&stderr(&out));
    assert_eq!(err.last().unwrap()["level"], "error");
    assert!(err.last().unwrap()["message"]
        .as_str()
        .unwrap()
        .contains("cannot connect to PostgreSQL"));

    // A daemon stuck in a publish gets a second signal: the exit message is JSON too.
    let db = TestDb::with_backlog(1).await;
    let started = Arc::new(AtomicUsize::new(0));
    let release = Arc::new((Mutex::new(false), Condvar::new()));
    let (s, r) = (Arc::clone(&started), Arc::clone(&release));
    let server = TestServer::start(0, move |_| {
        s.fetch_add(1, Ordering::SeqCst);
        let (lock, cv) = &*r;
        let _held = cv
            .wait_while(lock.lock().unwrap(), |released| !*released)
            .unwrap();
        (200, vec![])
    });
    let mut child = db
        .cmd()
        .args(["relay", "--sink", &server.url(), "--log-format", "json"])
        .args(["--lease", "60s", "--shutdown-timeout", "60s"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = capture(child.stderr.take().unwrap());
    wait_until(Duration::from_secs(20), "a publish in flight", || async {
        started.load(Ordering::SeqCst) > 0
    })
    .await;
    signal(&child, "TERM");
    wait_until(Duration::from_secs(10), "shutdown begins", || async {
        log.lock().unwrap().contains("shutting down")
    })
    .await;
    signal(&child, "TERM");
    let status = child.wait().unwrap();
    *release.0.lock().unwrap() = true;
    release.1.notify_all();
    assert_eq!(status.code(), Some(130));
    wait_until(
        Duration::from_secs(10),
        "stderr read to its end",
        || async { log.lock().unwrap().contains("second signal") },
    )
    .await;
    let err = json_lines(&log.lock().unwrap());
    let second = with_message(&err, "second signal: exiting");
    assert_eq!(second.len(), 1, "{err:?}");
    assert_eq!(second[0]["level"], "warn");
}

#[tokio::test]
async fn a_dead_letter_logs_a_warn_with_id_type_and_error_but_never_the_payload() {
    const CANARY: &str = "canary-payload-5f3a9c";
    for mode in [Mode::Lease, Mode::Tx] {
        let db = TestDb::new().await;
        db.exec(&format!(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
             VALUES ('00000000-0000-0000-0000-000000000001', 'order', '1', 'order.poison', '{{\"secret\":\"{CANARY}\"}}', 'p-1'),
                    ('00000000-0000-0000-0000-000000000001', 'order', '2', 'order.flaky', '{{\"secret\":\"{CANARY}\"}}', 'p-2'),
                    ('00000000-0000-0000-0000-000000000001', 'order', '3', 'order.fine', '{{\"secret\":\"{CANARY}\"}}', 'p-3')"
        ))
        .await;
        // 422 for the poison event (permanent), 500 for the flaky one (dead after 1 attempt).
        let server = TestServer::start(0, |r| match r.json()["type"].as_str() {
            Some("order.poison") => (422, vec![]),
            Some("order.flaky") => (500, vec![]),
            _ => (200, vec![]),
        });
        let out = db
            .cmd()
            .args([
                "relay",
                "--once",
                "--mode",
                mode_flag(mode),
                "--max-attempts",
                "1",
            ])
            .args(["--sink", &server.url(), "--log-format", "json"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{mode:?}: {}", stderr(&out));
        let text = stderr(&out);
        assert!(
            !text.contains(CANARY) && !stdout(&out).contains(CANARY),
            "{mode:?}: payload logged: {text}"
        );
        let lines = json_lines(&text);
        let dead = with_message(&lines, "dead-lettered");
        assert_eq!(dead.len(), 2, "{mode:?}: one WARN per dead letter: {text}");
        for (id, event_type, status) in [(1, "order.poison", "422"), (2, "order.flaky", "500")] {
            let line = dead
                .iter()
                .find(|l| l["id"] == id)
                .unwrap_or_else(|| panic!("{mode:?}: no WARN for {id}: {text}"));
            assert_eq!(line["level"], "warn");
            assert_eq!(line["event_type"], event_type);
            assert!(
                line["error"].as_str().unwrap().contains(status),
                "{mode:?}: {line:?}"
            );
        }
        let dead_rows = db.count("dead_lettered_at IS NOT NULL").await;
        assert_eq!(dead_rows, 2, "{mode:?}");
    }
}

#[tokio::test]
async fn the_heartbeat_reports_backlog_in_flight_and_published_also_when_idle() {
    let db = TestDb::new().await;
    // Two scheduled rows and one leased by another relay: nothing for this relay to do.
    db.seed_ready(3).await;
    db.exec(
        "UPDATE outbox SET available_at = now() + interval '1 hour' WHERE id IN (1, 2);
         UPDATE outbox SET locked_until = now() + interval '1 hour', claim_token = gen_random_uuid() WHERE id = 3",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let mut child = relay_to_file(&db, Mode::Lease, &path)
        .args(["--log-format", "json", "--poll-interval", "1h"])
        .env("OUTBOXCTL_HEARTBEAT_INTERVAL", "300ms")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = capture(child.stderr.take().unwrap());
    let beats = |log: &str| -> Vec<serde_json::Map<String, serde_json::Value>> {
        json_lines(log)
            .into_iter()
            .filter(|l| l["message"] == "heartbeat")
            .collect()
    };
    wait_until(Duration::from_secs(20), "two idle heartbeats", || async {
        beats(&log.lock().unwrap()).len() >= 2
    })
    .await;
    let idle = beats(&log.lock().unwrap()).last().unwrap().clone();
    assert_eq!(idle["level"], "info");
    assert_eq!(idle["backlog"], 0, "{idle:?}");
    assert_eq!(idle["scheduled"], 2, "{idle:?}");
    assert_eq!(idle["in_flight"], 1, "{idle:?}");
    assert_eq!(idle["published"], 0, "{idle:?}");
    // Work arrives: the next heartbeat counts what was published since the previous one.
    seed_more(&db, 2).await;
    wait_until(
        Duration::from_secs(20),
        "a heartbeat counting 2 published",
        || async {
            beats(&log.lock().unwrap())
                .iter()
                .any(|b| b["published"] == 2 && b["backlog"] == 0)
        },
    )
    .await;
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());
}
