//! A sink outage is the sink's state, not the events' fault (issue 8, item 4): the real binary
//! against the real HTTP test server, refusing connections or answering 503 for a while.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::support::servers::TestServer;
use crate::support::{capture, run_json, signal, stderr, stdout_json, wait_until, TestDb};

/// A daemon with a backoff schedule far shorter than the outages below: with --max-attempts 3 and
/// per-row backoff of 50-200 ms, the old behaviour dead-letters every row within a second.
fn daemon(db: &TestDb, url: &str) -> std::process::Child {
    db.relay(url)
        .args(["--json", "-vv"])
        .args(["--max-attempts", "3", "--backoff-base", "50ms"])
        .args(["--backoff-max", "200ms", "--poll-interval", "60s"])
        .spawn()
}

fn stats_json(db: &TestDb) -> Value {
    run_json(db, &["stats", "--json"])
}

/// Waits until the relay has probed the sink `n` times during the outage (its debug log).
async fn probed(log: &std::sync::Mutex<String>, n: usize) {
    wait_until(
        Duration::from_secs(30),
        &format!("{n} probes of the unavailable sink"),
        || async { log.lock().unwrap().matches("probe failed").count() >= n },
    )
    .await;
}

/// After the sink is back: everything delivered once at least, nothing dead, and each row's only
/// counted attempt is the one that succeeded.
async fn delivered_untouched(db: &TestDb, server: &TestServer, n: i64) {
    wait_until(
        Duration::from_secs(30),
        "all published after recovery",
        || async { db.count("published_at IS NULL").await == 0 },
    )
    .await;
    let (dead, attempts, errors): (i64, i32, i64) = db
        .row(
            "SELECT count(*) FILTER (WHERE dead_lettered_at IS NOT NULL), max(attempt_count),
                    count(*) FILTER (WHERE last_error IS NOT NULL)
               FROM outbox",
        )
        .await;
    assert_eq!(
        (dead, attempts, errors),
        (0, 1, 0),
        "the outage charged nothing"
    );
    let ids: std::collections::HashSet<i64> = server
        .accepted()
        .iter()
        .map(|r| r.json()["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len() as i64, n);
}

#[tokio::test]
async fn refused_connections_longer_than_the_backoff_schedule_dead_letter_nothing() {
    let db = TestDb::with_backlog(50).await;
    let closed = crate::support::servers::ClosedPort::new();
    let url = format!("http://127.0.0.1:{}/events", closed.port);
    let mut child = daemon(&db, &url);
    let log = capture(child.stderr.take().unwrap());
    wait_until(Duration::from_secs(20), "the outage WARN", || async {
        log.lock().unwrap().contains("sink unavailable")
    })
    .await;
    // Far past the whole per-row schedule (3 attempts of at most 200 ms).
    probed(&log, 8).await;
    {
        let text = log.lock().unwrap().clone();
        let warn = text
            .lines()
            .find(|l| l.contains("sink unavailable"))
            .unwrap();
        assert!(
            warn.contains("WARN") && warn.to_lowercase().contains("connection refused"),
            "the sink's error text: {warn}"
        );
    }
    // stats shows the outage: nothing retried or rescheduled, and the age keeps growing.
    let v = stats_json(&db);
    assert_eq!(v["retrying"], 0, "{v}");
    assert_eq!(v["scheduled"], 0, "{v}");
    assert_eq!(
        v["ready"].as_i64().unwrap() + v["in_flight"].as_i64().unwrap(),
        50,
        "{v}"
    );
    assert!(
        v["oldest_pending_age_seconds"].as_f64().unwrap() > 0.0,
        "{v}"
    );
    let charged = db.count("(attempt_count > 0 AND locked_until IS NULL) OR last_error IS NOT NULL OR dead_lettered_at IS NOT NULL").await;
    assert_eq!(charged, 0, "attempt counts untouched during the outage");

    let server = TestServer::start_on(closed.listen(), |_| (200, vec![]));
    delivered_untouched(&db, &server, 50).await;
    wait_until(Duration::from_secs(10), "the recovery INFO", || async {
        log.lock().unwrap().contains("sink available again")
    })
    .await;
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());
}

#[tokio::test]
async fn a_503_on_every_event_is_an_outage_not_a_failure_of_each() {
    let db = TestDb::with_backlog(50).await;
    let down = Arc::new(AtomicBool::new(true));
    let d = Arc::clone(&down);
    let server = TestServer::start(0, move |_| {
        if d.load(Ordering::SeqCst) {
            (
                503,
                vec![(":body".into(), "upstream\u{7} maintenance".into())],
            )
        } else {
            (200, vec![])
        }
    });
    let mut child = daemon(&db, &server.url());
    let log = capture(child.stderr.take().unwrap());
    probed(&log, 8).await;
    let warn = log
        .lock()
        .unwrap()
        .lines()
        .find(|l| l.contains("sink unavailable"))
        .map(str::to_owned)
        .unwrap();
    assert!(warn.contains("503"), "{warn}");
    let charged = db.count("(attempt_count > 0 AND locked_until IS NULL) OR last_error IS NOT NULL OR dead_lettered_at IS NOT NULL").await;
    assert_eq!(charged, 0);
    down.store(false, Ordering::SeqCst);
    delivered_untouched(&db, &server, 50).await;
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());
}

#[tokio::test]
async fn once_during_an_outage_gives_back_and_exits_5() {
    let db = TestDb::with_backlog(30).await;
    let closed = crate::support::servers::ClosedPort::new();
    let url = format!("http://127.0.0.1:{}/events", closed.port);
    let out = db
        .relay(&url)
        .args(["--json", "--max-attempts", "1"])
        .once(5);
    let err = stderr(&out);
    assert!(
        err.contains("unavailable") && err.to_lowercase().contains("refused"),
        "{err}"
    );
    let summary = stdout_json(&out);
    assert_eq!(summary["published"], 0, "{summary}");
    assert_eq!(summary["dead_lettered"], 0, "{summary}");
    assert!(summary["unavailable"].as_u64().unwrap() > 0, "{summary}");
    let charged = db.count("attempt_count > 0 OR last_error IS NOT NULL OR dead_lettered_at IS NOT NULL OR locked_until IS NOT NULL").await;
    assert_eq!(charged, 0);
}

#[tokio::test]
async fn a_mixed_batch_keeps_per_event_retries_with_the_body_and_retry_after() {
    for mode in ["lease", "tx"] {
        let db = TestDb::with_backlog(20).await;
        let server = TestServer::start(0, |r| match r.json()["id"].as_i64() {
            Some(3) => (
                500,
                vec![
                    (
                        ":body".into(),
                        "{\"error\":\"db\u{1b}[31m down\"}\r\nline two".into(),
                    ),
                    ("Retry-After".into(), "40".into()),
                ],
            ),
            Some(4) => (503, vec![]),
            _ => (200, vec![]),
        });
        let out = db
            .relay(server.url())
            .mode(mode)
            .args(["--json", "--backoff-base", "1s"])
            .once(0);
        let warn = stderr(&out);
        assert!(
            warn.contains("WARN")
                && warn.contains("the sink failed 2 publishes")
                && warn.contains("HTTP 50"),
            "{mode}: one WARN with the error text: {warn}"
        );
        let summary = stdout_json(&out);
        assert_eq!(
            (
                &summary["published"],
                &summary["retried"],
                &summary["unavailable"]
            ),
            (&Value::from(18), &Value::from(2), &Value::from(0)),
            "{mode}: {summary}"
        );
        let (attempts, err, wait): (i32, String, f64) = db
            .row("SELECT attempt_count, last_error, extract(epoch FROM available_at - now())::float8 FROM outbox WHERE id = 3")
            .await;
        assert_eq!(attempts, 1, "{mode}");
        assert!(
            (35.0..=41.0).contains(&wait),
            "{mode}: Retry-After 40 gives {wait}"
        );
        assert!(err.starts_with("HTTP 500"), "{mode}: {err}");
        assert!(err.contains("{\"error\":\"db"), "{mode}: the body: {err}");
        assert!(err.contains("line two"), "{mode}: {err}");
        assert!(
            !err.chars().any(|c| c.is_control()),
            "{mode}: sanitised: {err:?}"
        );
        assert!(
            err.contains("Retry-After"),
            "{mode}: says it honoured it: {err}"
        );
        let (attempts4, err4): (i32, String) = db
            .row("SELECT attempt_count, last_error FROM outbox WHERE id = 4")
            .await;
        assert_eq!(
            attempts4, 1,
            "{mode}: a 503 on one event is that event's retry"
        );
        assert!(err4.starts_with("HTTP 503"), "{mode}: {err4}");
    }
}

#[tokio::test]
async fn an_event_that_alone_makes_the_server_answer_502_does_not_stall_the_outbox() {
    let db = TestDb::with_backlog(1).await;
    // The server fails with 502 for this one event, every time; alone in its batch it looks just
    // like an outage, and opens the circuit.
    let server = TestServer::start(0, |r| {
        if r.json()["id"] == 1 {
            (502, vec![])
        } else {
            (200, vec![])
        }
    });
    let mut child = daemon(&db, &server.url());
    let log = capture(child.stderr.take().unwrap());
    wait_until(Duration::from_secs(20), "the outage WARN", || async {
        log.lock().unwrap().contains("sink unavailable")
    })
    .await;
    // Events written behind it are still delivered: a wider probe takes one of them with it.
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         SELECT '00000000-0000-0000-0000-000000000001', 'order', 'o', 'order.placed', '{}', 'late-' || g
           FROM generate_series(1, 9) g",
    )
    .await;
    wait_until(Duration::from_secs(30), "the other 9 delivered", || async {
        db.count("published_at IS NOT NULL").await == 9
    })
    .await;
    wait_until(Duration::from_secs(30), "the poison event charged", || async {
        db.count("id = 1 AND attempt_count >= 1 AND locked_until IS NULL AND last_error LIKE 'HTTP 502%'").await
            == 1
    })
    .await;
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());
}
