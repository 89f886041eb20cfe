//! The http sink against a real HTTP server the test runs, driven by the real binary.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::support::servers::TestServer;
use crate::support::{signal, stderr, stdout, wait_until, TestDb, UNTOUCHED};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Independent Standard Webhooks verification: recompute the HMAC over "{id}.{ts}.{body}".
pub(super) fn verify(secret: &str, id: &str, ts: &str, body: &[u8], header: &str) -> bool {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    let want = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    header.split(' ').any(|s| s == want)
}

/// An HTTP server that holds every request until the test opens its gate, counting what arrived.
struct Gated(TestServer, Arc<(Mutex<bool>, Condvar)>, Arc<AtomicUsize>);

impl Gated {
    fn start() -> Self {
        let gate = Arc::new((Mutex::new(false), Condvar::new()));
        let arrived = Arc::new(AtomicUsize::new(0));
        let (g, a) = (Arc::clone(&gate), Arc::clone(&arrived));
        let server = TestServer::start(0, move |_| {
            a.fetch_add(1, Ordering::SeqCst);
            let (lock, cv) = &*g;
            let mut open = lock.lock().unwrap();
            while !*open {
                open = cv.wait(open).unwrap();
            }
            (200, vec![])
        });
        Self(server, gate, arrived)
    }

    fn arrived(&self) -> usize {
        self.2.load(Ordering::SeqCst)
    }

    /// Lets every held request, and every later one, through.
    fn open(&self) {
        let (lock, cv) = &*self.1;
        *lock.lock().unwrap() = true;
        cv.notify_all();
    }
}

#[tokio::test]
async fn posts_signed_documents_with_dedup_id_and_templated_headers() {
    let db = TestDb::new().await;
    let server = TestServer::start(0, |_| (200, vec![]));
    let out = db
        .cmd()
        .args([
            "publish",
            "--event-type",
            "order.placed",
            "--aggregate-type",
            "order",
            "--aggregate-id",
            "42",
        ])
        .args([
            "--payload",
            r#"{"total":1200}"#,
            "--header",
            "schema-version=3",
            "--idempotency-key",
            "order.placed:42",
        ])
        .args(["--tenant", "6f9619ff-8b86-d011-b42d-00cf4fc964ff"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let out = db
        .cmd()
        .args([
            "relay",
            "--once",
            "--sink",
            &server.url(),
            "--signing-secret-env",
            "MY_SIGNING_SECRET",
            "-vv",
        ])
        .args([
            "--http-header",
            "Upstash-Deduplication-Id: {idempotency_key}",
        ])
        .env("MY_SIGNING_SECRET", SECRET)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stdout(&out).contains("MfKQ9r8") && !stderr(&out).contains("MfKQ9r8"),
        "the secret never appears in output"
    );
    let got = server.accepted();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(r.url, "/events");
    let doc = r.json();
    assert_eq!(doc["id"], 1);
    assert_eq!(doc["type"], "order.placed");
    assert_eq!(doc["aggregate_type"], "order");
    assert_eq!(doc["aggregate_id"], "42");
    assert_eq!(doc["tenant_id"], "6f9619ff-8b86-d011-b42d-00cf4fc964ff");
    assert_eq!(doc["payload"], serde_json::json!({"total": 1200}));
    assert!(doc["created_at"].as_str().unwrap().ends_with('Z'));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(r.header("idempotency-key"), Some("order.placed:42"));
    assert_eq!(
        r.header("upstash-deduplication-id"),
        Some("order.placed:42")
    );
    assert_eq!(
        r.header("schema-version"),
        Some("3"),
        "the row's headers are sent"
    );
    assert_eq!(r.header("webhook-id"), Some("order.placed:42"));
    let ts = r.header("webhook-timestamp").unwrap();
    assert!(verify(
        SECRET,
        "order.placed:42",
        ts,
        &r.body,
        r.header("webhook-signature").unwrap()
    ));
    assert!(!verify(
        "whsec_c2VjcmV0",
        "order.placed:42",
        ts,
        &r.body,
        r.header("webhook-signature").unwrap()
    ));
    let published: bool = db
        .scalar("SELECT published_at IS NOT NULL FROM outbox WHERE id = 1")
        .await;
    assert!(published);
}

#[tokio::test]
async fn poison_is_dead_lettered_at_once_while_the_rest_flow() {
    for mode in ["lease", "tx"] {
        let db = TestDb::with_backlog(20).await;
        db.exec("UPDATE outbox SET payload = '{\"poison\": true}' WHERE id = 5")
            .await;
        let server = TestServer::start(0, |r| {
            if r.json()["payload"]["poison"] == true {
                (422, vec![])
            } else {
                (200, vec![])
            }
        });
        let summary = db.relay(server.url()).mode(mode).once_json();
        let errs: Vec<(i64, Option<String>)> =
            sqlx::query_as("SELECT id, last_error FROM outbox WHERE published_at IS NULL")
                .fetch_all(&db.pool)
                .await
                .unwrap();
        assert_eq!(
            (
                summary["published"].as_u64(),
                summary["dead_lettered"].as_u64()
            ),
            (Some(19), Some(1)),
            "{mode} {errs:?}"
        );
        let (attempts, err): (i32, String) = sqlx::query_as("SELECT attempt_count, last_error FROM outbox WHERE id = 5 AND dead_lettered_at IS NOT NULL")
            .fetch_one(&db.pool)
            .await
            .unwrap();
        assert_eq!(attempts, 1, "{mode}: dead-lettered on its first attempt");
        assert!(err.contains("422"), "{err}");
        assert_eq!(db.count("published_at IS NOT NULL").await, 19);
        assert_eq!(server.accepted().len(), 19);
    }
}

#[tokio::test]
async fn retry_after_is_honoured_and_redirects_are_not_followed() {
    // Per-event failures (the batch also holds a success, so this is not an outage): the 503's
    // Retry-After sets when event 1 is due again, and event 2's 302 is not followed.
    let db = TestDb::with_backlog(3).await;
    let server = TestServer::start(0, |r| match r.json()["id"].as_i64() {
        Some(1) => (503, vec![("Retry-After".into(), "120".into())]),
        Some(2) => (
            302,
            vec![("Location".into(), "http://127.0.0.1:9/elsewhere".into())],
        ),
        _ => (200, vec![]),
    });
    db.relay(server.url())
        .args(["--backoff-base", "1s"])
        .once(0);
    let wait: f64 = db
        .scalar("SELECT extract(epoch FROM available_at - now())::float8 FROM outbox WHERE id = 1")
        .await;
    assert!(
        (115.0..=121.0).contains(&wait),
        "Retry-After: 120 gives {wait}s"
    );
    let err: String = db
        .scalar("SELECT last_error FROM outbox WHERE id = 2")
        .await;
    assert!(
        err.contains("302") && err.contains("redirects are not followed"),
        "{err}"
    );
    assert_eq!(db.count("id = 3 AND published_at IS NOT NULL").await, 1);
    assert_eq!(db.count("dead_lettered_at IS NOT NULL").await, 0);
}

#[tokio::test]
async fn a_batch_no_event_of_which_got_through_is_an_outage_that_charges_nothing() {
    // 503 for one event, a redirect for the other: no event got through, so the endpoint is
    // down or misconfigured, not the events: exit 5, both rows untouched.
    let db = TestDb::with_backlog(2).await;
    let server = TestServer::start(0, |r| {
        if r.json()["id"] == 1 {
            (503, vec![("Retry-After".into(), "120".into())])
        } else {
            (
                302,
                vec![("Location".into(), "http://127.0.0.1:9/elsewhere".into())],
            )
        }
    });
    db.relay(server.url()).once(5);
    let untouched = db
        .count(&format!("{UNTOUCHED} AND available_at <= now()"))
        .await;
    assert_eq!(untouched, 2);
}

#[tokio::test]
async fn sigterm_mid_batch_settles_in_flight_and_releases_unstarted_claims() {
    let db = TestDb::with_backlog(10).await;
    // The server holds every request until the test opens the gate.
    let server = Gated::start();
    let mut child = db
        .relay(server.0.url())
        .args(["--concurrency", "2", "--batch-size", "10", "--json"])
        .spawn();
    let log = crate::support::capture(child.stderr.take().unwrap());
    wait_until(
        Duration::from_secs(10),
        "two publishes in flight",
        || async { server.arrived() == 2 },
    )
    .await;
    let leased = db.count("locked_until > now()").await;
    assert_eq!(leased, 10, "the whole batch is claimed");
    signal(&child, "TERM");
    // Once the relay has logged that it is shutting down, let the two held requests finish.
    wait_until(
        Duration::from_secs(5),
        "the relay acknowledges SIGTERM",
        || async { log.lock().unwrap().contains("shutting down") },
    )
    .await;
    server.open();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exit 0 on SIGTERM: {}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["published"], 2, "{summary}");
    assert_eq!(summary["released"], 8, "{summary}");
    assert_eq!(server.arrived(), 2, "nothing new started after the signal");
    let (published, released): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE published_at IS NOT NULL),
                count(*) FILTER (WHERE published_at IS NULL AND locked_until IS NULL AND attempt_count = 0)
           FROM outbox",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (published, released),
        (2, 8),
        "in-flight settled, unstarted released for another relay"
    );
}

#[tokio::test]
async fn http_headers_from_the_environment_one_per_line() {
    let db = TestDb::with_backlog(1).await;
    let server = TestServer::start(0, |_| (200, vec![]));
    db.relay(server.url())
        .env(
            "OUTBOXCTL_HTTP_HEADERS",
            "X-Event: {event_type}/{id}\nX-Tenant: {tenant_id}",
        )
        .once(0);
    let got = server.accepted();
    assert_eq!(got[0].header("x-event"), Some("order.placed/1"));
    assert_eq!(
        got[0].header("x-tenant"),
        Some("00000000-0000-0000-0000-000000000001")
    );
}

#[tokio::test]
async fn a_slow_sink_never_outlives_the_lease() {
    // 200 ms per request, one at a time, batches of 10, a 1 s lease: a batch would take 2 s.
    // Each relay starts no publish that could end after its lease, gives the rest back, and so
    // two relays never deliver a row twice.
    let db = TestDb::with_backlog(12).await;
    let server = TestServer::start(0, |_| {
        std::thread::sleep(Duration::from_millis(200));
        (200, vec![])
    });
    let relays: Vec<_> = (0..2)
        .map(|_| {
            db.relay(server.url())
                .mode("lease")
                .args(["--json", "--poll-interval", "60s"])
                .args(["--concurrency", "1", "--batch-size", "10"])
                .args(["--lease", "1s", "--publish-timeout", "500ms"])
                .spawn()
        })
        .collect();
    // Daemons: an idle one wakes when the other's lease would expire, and would re-claim what that
    // one is still publishing if it overran its lease.
    wait_until(Duration::from_secs(20), "all published", || async {
        db.count("published_at IS NULL").await == 0
    })
    .await;
    let mut lease_lost = 0;
    for r in relays {
        signal(&r, "TERM");
        let out = r.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        lease_lost += v["lease_lost"].as_u64().unwrap();
    }
    let mut ids: Vec<i64> = server
        .accepted()
        .iter()
        .map(|r| r.json()["id"].as_i64().unwrap())
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        (1..=12).collect::<Vec<_>>(),
        "each event delivered exactly once"
    );
    assert_eq!(lease_lost, 0);
    assert_eq!(db.count("published_at IS NULL").await, 0);
}

/// Tx mode, SIGTERM mid-batch: the unstarted rows are given back in the transaction that marked
/// the in-flight ones published, and keep what they held before the claim: their attempt count
/// and the `last_error` of their previous attempt (the claim cleared it; issue 22 item 12).
#[tokio::test]
async fn tx_mode_gives_back_unstarted_rows_with_their_previous_error() {
    let db = TestDb::with_backlog(10).await;
    db.exec("UPDATE outbox SET attempt_count = 1, last_error = 'HTTP 500: earlier'")
        .await;
    let server = Gated::start();
    let mut child = db
        .relay(server.0.url())
        .mode("tx")
        .args(["--concurrency", "2", "--batch-size", "10", "--json"])
        .spawn();
    let log = crate::support::capture(child.stderr.take().unwrap());
    wait_until(
        Duration::from_secs(10),
        "two publishes in flight",
        || async { server.arrived() == 2 },
    )
    .await;
    signal(&child, "TERM");
    wait_until(
        Duration::from_secs(5),
        "the relay acknowledges SIGTERM",
        || async { log.lock().unwrap().contains("shutting down") },
    )
    .await;
    server.open();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "exit 0 on SIGTERM: {}", stderr(&out));
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(summary["published"], 2, "{summary}");
    assert_eq!(summary["released"], 8, "{summary}");
    let (published, kept): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE published_at IS NOT NULL AND last_error IS NULL),
                count(*) FILTER (WHERE published_at IS NULL AND attempt_count = 1
                                   AND last_error = 'HTTP 500: earlier')
           FROM outbox",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (published, kept),
        (2, 8),
        "published rows clear their error; given-back rows keep count and error"
    );
}
