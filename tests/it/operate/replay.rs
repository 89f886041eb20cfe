//! `outboxctl replay` against real sinks (an HTTP server of the test's own, the shared Tansu for
//! Kafka, a file): what arrives (the selection, in key order, marked, with the original or fresh
//! keys, digits intact), that nothing in the outbox changes, the audit row, the dry run and the
//! confirmation, and a stop (outage, closed port, SIGINT, a second SIGINT) with a resume hint that
//! works.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::servers::kafka::read_all;
use crate::support::servers::{ClosedPort, Received, TestServer};
use crate::support::{
    run, signal, spawn_capturing, stderr, stdout, stdout_json, wait_until, TestDb,
};

/// A number no float keeps: its digits must arrive as stored.
const DIGITS: &str = "12345678901234567890.000000000001";

/// Seeds `n` events over `keys` aggregates (`order` for ids not divisible by 3, `invoice` for
/// the others) with a payload holding [`DIGITS`] and a row header, and publishes them with the
/// real relay (to the null sink), as a consumer's history would be.
async fn published(db: &TestDb, n: i64, keys: i64) {
    sqlx::query(&format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers,
                             idempotency_key)
         SELECT '00000000-0000-0000-0000-000000000001',
                CASE WHEN g % 3 = 0 THEN 'invoice' ELSE 'order' END, 'a-' || (g % $2::bigint),
                'evt.created', jsonb_build_object('n', g, 'total', {DIGITS}::numeric),
                jsonb_build_object('trace', 't-' || g), 'k-' || g
           FROM generate_series(1, $1::bigint) g"
    ))
    .bind(n)
    .bind(keys)
    .execute(&db.pool)
    .await
    .expect("seed");
    let v = db.relay("null").once_json();
    assert_eq!(v["published"].as_i64(), Some(n), "{v}");
}

/// Every column of every outbox row, as text: equal before and after means the replay changed
/// nothing (published_at, attempt_count, locked_until, claim_token, ... byte for byte).
async fn rows(db: &TestDb) -> String {
    db.scalar("SELECT string_agg(o::text, '|' ORDER BY id) FROM outbox o")
        .await
}

/// The replay audit rows' details, oldest first.
async fn audits(db: &TestDb) -> Vec<Value> {
    let rows: Vec<(String, Option<i64>, String)> = sqlx::query_as(
        "SELECT action, event_id, details::text FROM outbox_audit WHERE action = 'replay' ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    rows.into_iter()
        .map(|(action, event_id, d)| {
            assert_eq!((action.as_str(), event_id), ("replay", None));
            serde_json::from_str(&d).unwrap()
        })
        .collect()
}

fn doc_id(r: &Received) -> i64 {
    r.json()["id"].as_i64().unwrap()
}

/// Asserts that the events of each key arrived in id order: `(key, id)` in arrival order.
fn assert_key_order(arrived: &[(String, i64)]) {
    let mut last: HashMap<&str, i64> = HashMap::new();
    for (key, id) in arrived {
        if let Some(before) = last.insert(key, *id) {
            assert!(
                before < *id,
                "key {key}: {id} arrived after {before}: {arrived:?}"
            );
        }
    }
}

/// "resume with --from-id N --replay-id M" in a stop's error: (N, M).
fn resume_hint(err: &str) -> (i64, i64) {
    let tail = err
        .split("resume with --from-id ")
        .nth(1)
        .unwrap_or_else(|| panic!("no resume hint in: {err}"));
    let mut words = tail.split_whitespace();
    let from: i64 = words.next().unwrap().parse().unwrap();
    assert_eq!(words.next(), Some("--replay-id"), "{err}");
    let id: i64 = words.next().unwrap().trim_end_matches(')').parse().unwrap();
    (from, id)
}

#[tokio::test]
async fn replays_a_filtered_range_to_http_in_key_order_marked_and_changing_nothing() {
    let db = TestDb::new().await;
    published(&db, 30, 4).await;
    // The first event of each key is slow to answer: without waves of distinct keys the next
    // event of that key, sent meanwhile, would arrive first.
    let server = TestServer::start(0, |r| {
        if r.json()["id"].as_i64().unwrap() <= 5 {
            std::thread::sleep(Duration::from_millis(300));
        }
        (200, vec![])
    });
    let before = rows(&db).await;
    let v = stdout_json(&run(
        &db,
        &[
            "replay",
            "--aggregate-type",
            "order",
            "--since",
            "1h",
            "--sink",
            &server.url(),
            "--yes",
            "--json",
        ],
        0,
    ));
    let want: Vec<i64> = (1..=30).filter(|g| g % 3 != 0).collect();
    assert_eq!(v["matched"].as_u64(), Some(want.len() as u64), "{v}");
    assert_eq!(v["sent"].as_u64(), Some(want.len() as u64), "{v}");
    let audit_id = v["audit_id"].as_i64().expect("audit id");
    assert_eq!(v["replay_id"].as_i64(), Some(audit_id));

    let got = server.accepted();
    let mut ids: Vec<i64> = got.iter().map(doc_id).collect();
    let arrived: Vec<(String, i64)> = got
        .iter()
        .map(|r| {
            (
                r.json()["aggregate_id"].as_str().unwrap().to_owned(),
                doc_id(r),
            )
        })
        .collect();
    assert_key_order(&arrived);
    ids.sort_unstable();
    assert_eq!(ids, want, "exactly the selection, each once");
    for r in &got {
        let id = doc_id(r);
        let doc = r.json();
        assert_eq!(r.header("outbox-replay"), Some("true"), "{:?}", r.headers);
        assert_eq!(
            r.header("outbox-replay-id"),
            Some(audit_id.to_string().as_str())
        );
        assert_eq!(r.header("trace"), Some(format!("t-{id}").as_str()));
        assert_eq!(doc["headers"]["outbox-replay"], "true");
        let key = format!("k-{id}");
        assert_eq!(r.header("idempotency-key"), Some(key.as_str()), "kept");
        assert_eq!(doc["idempotency_key"], key.as_str());
        assert_eq!(doc["attempt"], 1);
        let body = String::from_utf8_lossy(&r.body);
        assert!(body.contains(DIGITS), "digits kept: {body}");
    }
    assert_eq!(rows(&db).await, before, "the outbox is unchanged");

    let audit = audits(&db).await;
    assert_eq!(audit.len(), 1);
    let a = &audit[0];
    assert_eq!(a["selection"]["aggregate_type"], "order", "{a}");
    assert_eq!(a["selection"]["published_since"], "1h ago", "{a}");
    assert_eq!(a["matched"].as_u64(), Some(want.len() as u64));
    assert_eq!(a["sent"].as_u64(), Some(want.len() as u64));
    assert_eq!(a["stop_reason"], "done");
    assert_eq!(a["sink"], server.url());
}

#[tokio::test]
async fn replays_to_kafka_in_key_order_with_fresh_keys_and_nothing_changed() {
    let db = TestDb::new().await;
    published(&db, 60, 3).await;
    let before = rows(&db).await;
    let topic = format!("obx{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let sink = format!("kafka://127.0.0.1:9092?topic={topic}&key={{aggregate_id}}");
    let v = stdout_json(&run(
        &db,
        &[
            "replay",
            "--all",
            "--from-id",
            "11",
            "--sink",
            &sink,
            "--fresh-keys",
            "--batch-size",
            "7",
            "--yes",
            "--json",
        ],
        0,
    ));
    assert_eq!(v["sent"].as_u64(), Some(50), "{v}");
    let replay_id = v["replay_id"].as_i64().unwrap();
    let records = read_all("127.0.0.1:9092", std::slice::from_ref(&topic), 50);
    assert_eq!(records.len(), 50);
    let mut arrived = Vec::new();
    for r in &records {
        let doc = r.doc();
        let id = doc["id"].as_i64().unwrap();
        assert!(id >= 11, "from --from-id on: {id}");
        let fresh = format!("k-{id}:replay:{replay_id}");
        assert_eq!(r.header("idempotency_key"), vec![fresh.clone()]);
        assert_eq!(doc["idempotency_key"], fresh.as_str());
        assert_eq!(r.header("outbox-replay"), vec!["true".to_owned()]);
        assert_eq!(
            r.header("outbox-replay-original-key"),
            vec![format!("k-{id}")]
        );
        assert!(String::from_utf8_lossy(&r.value).contains(DIGITS));
        let key = String::from_utf8(r.key.clone().unwrap()).unwrap();
        arrived.push(((r.partition, r.offset), key, id));
    }
    // Offsets within a partition are the arrival order.
    arrived.sort();
    let arrived: Vec<(String, i64)> = arrived.into_iter().map(|(_, k, id)| (k, id)).collect();
    assert_key_order(&arrived);
    assert_eq!(rows(&db).await, before, "the outbox is unchanged");
    let audit = audits(&db).await;
    assert_eq!(audit[0]["sent"].as_u64(), Some(50));
    assert_eq!(audit[0]["fresh_keys"], true);
}

#[tokio::test]
async fn the_original_key_is_kept_by_default_and_fresh_keys_differ_per_replay() {
    let db = TestDb::new().await;
    published(&db, 3, 3).await;
    let dir = tempfile::tempdir().unwrap();
    let keys = |args: &[&str]| -> Vec<String> {
        let file = dir.path().join(format!("{}.jsonl", uuid::Uuid::new_v4()));
        let sink = format!("file:{}", file.display());
        let mut all = vec!["replay", "--all", "--sink", &sink, "--yes"];
        all.extend_from_slice(args);
        run(&db, &all, 0);
        std::fs::read_to_string(&file)
            .unwrap()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap();
                v["idempotency_key"].as_str().unwrap().to_owned()
            })
            .collect()
    };
    assert_eq!(keys(&[]), ["k-1", "k-2", "k-3"]);
    let first = keys(&["--fresh-keys"]);
    let second = keys(&["--fresh-keys"]);
    assert_eq!(first.len(), 3);
    assert!(first
        .iter()
        .all(|k| !["k-1", "k-2", "k-3"].contains(&k.as_str())));
    assert!(first[0].starts_with("k-1:replay:"), "{first:?}");
    assert_ne!(first, second, "each replay its own keys");
    // Continuing a replay gives its keys again.
    let id = first[0].rsplit(':').next().unwrap();
    assert_eq!(keys(&["--fresh-keys", "--replay-id", id]), first);
}

#[tokio::test]
async fn a_dry_run_sends_nothing_and_without_yes_nothing_is_sent() {
    let db = TestDb::new().await;
    published(&db, 5, 2).await;
    let server = TestServer::start(0, |_| (200, vec![]));
    let url = server.url();
    let out = run(&db, &["replay", "--all", "--sink", &url, "--dry-run"], 0);
    assert!(
        stdout(&out).contains("would replay 5 published events (ids 1 to 5)"),
        "{}",
        stdout(&out)
    );
    let v = stdout_json(&run(
        &db,
        &["replay", "--all", "--sink", &url, "--dry-run", "--json"],
        0,
    ));
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["matched"].as_u64(), Some(5));
    assert_eq!(crate::support::fixtures::event_ids(&v), [1, 2, 3, 4, 5]);
    // No --yes, and stdin is not a terminal: refused, exit 2.
    let out = run(&db, &["replay", "--all", "--sink", &url], 2);
    assert!(stderr(&out).contains("without --yes"), "{}", stderr(&out));
    // Ids that are not published events: refused, exit 2.
    let ready = crate::support::fixtures::ready(&db).await;
    let out = run(
        &db,
        &[
            "replay",
            "1",
            &ready.to_string(),
            "999",
            "--sink",
            &url,
            "--yes",
        ],
        2,
    );
    let err = stderr(&out);
    assert!(
        err.contains(&format!("event {ready} is ready, not published"))
            && err.contains("no event 999"),
        "{err}"
    );
    assert!(server.accepted().is_empty(), "nothing was sent");
    assert!(audits(&db).await.is_empty(), "and nothing audited");
}

#[tokio::test]
async fn an_outage_stops_it_with_a_resume_hint_and_resuming_sends_the_rest() {
    let db = TestDb::new().await;
    published(&db, 20, 20).await;
    let before = rows(&db).await;
    // Takes the first 8 events, then is down (503) until the test brings it back.
    let limit = Arc::new(AtomicUsize::new(8));
    let taken = Arc::new(AtomicUsize::new(0));
    let (l, t) = (Arc::clone(&limit), Arc::clone(&taken));
    let server = TestServer::start(0, move |_| {
        if t.fetch_add(1, Ordering::SeqCst) < l.load(Ordering::SeqCst) {
            (200, vec![])
        } else {
            (503, vec![])
        }
    });
    let url = server.url();
    let fast = [
        "--retry-for",
        "1s",
        "--backoff-base",
        "50ms",
        "--backoff-max",
        "200ms",
        "--concurrency",
        "1",
        "--yes",
    ];
    let mut args = vec!["replay", "--all", "--sink", &url];
    args.extend_from_slice(&fast);
    let started = Instant::now();
    let out = run(&db, &args, 5);
    let err = stderr(&out);
    assert!(started.elapsed() >= Duration::from_secs(1), "retried first");
    assert!(
        err.contains("kept failing for 1s") && err.contains("HTTP 503"),
        "{err}"
    );
    assert!(err.contains("replayed 8 of 20 events"), "{err}");
    let (from, replay_id) = resume_hint(&err);
    assert_eq!(from, 9, "{err}");
    let audit = audits(&db).await;
    assert_eq!(audit[0]["stop_reason"], "outage");
    assert_eq!(audit[0]["resume_from"].as_i64(), Some(9));

    limit.store(usize::MAX, Ordering::SeqCst);
    let (from_s, id_s) = (from.to_string(), replay_id.to_string());
    let mut again = args.clone();
    again.extend_from_slice(&["--from-id", &from_s, "--replay-id", &id_s]);
    run(&db, &again, 0);
    let mut ids: Vec<i64> = server.accepted().iter().map(doc_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (1..=20).collect::<Vec<_>>(), "the rest, each once");
    for r in server.accepted() {
        assert_eq!(r.header("outbox-replay-id"), Some(id_s.as_str()));
    }
    let audit = audits(&db).await;
    assert_eq!(audit[1]["continues"].as_i64(), Some(replay_id));
    assert_eq!(audit[1]["sent"].as_u64(), Some(12));
    assert_eq!(rows(&db).await, before, "the outbox is unchanged");
}

#[tokio::test]
async fn a_closed_port_stops_it_with_a_resume_hint_from_the_first_event() {
    let db = TestDb::new().await;
    published(&db, 3, 3).await;
    let closed = ClosedPort::new();
    let url = format!("http://127.0.0.1:{}/events", closed.port);
    let out = run(
        &db,
        &[
            "replay",
            "--all",
            "--from-id",
            "2",
            "--sink",
            &url,
            "--retry-for",
            "300ms",
            "--backoff-base",
            "50ms",
            "--yes",
        ],
        5,
    );
    let err = stderr(&out);
    assert_eq!(resume_hint(&err).0, 2, "{err}");
    let errors: Vec<&str> = err.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "one error line: {err}");
    assert!(errors[0].contains("cannot connect"), "{err}");
}

#[tokio::test]
async fn sigint_stops_it_with_a_resume_hint_and_the_rate_is_kept() {
    let db = TestDb::new().await;
    published(&db, 40, 40).await;
    let server = TestServer::start(0, |_| (200, vec![]));
    let url = server.url();
    let (mut child, err) = spawn_capturing(
        &db,
        &["replay", "--all", "--sink", &url, "--rate", "10/s", "--yes"],
    );
    let started = Instant::now();
    wait_until(Duration::from_secs(20), "12 events sent", || async {
        server.accepted().len() >= 12
    })
    .await;
    // 10/s: the 12th event goes no sooner than 1.1 s after the first.
    assert!(started.elapsed() >= Duration::from_millis(1000), "rate");
    signal(&child, "INT");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{}", err.lock().unwrap());
    let text = err.lock().unwrap().clone();
    let (from, _) = resume_hint(&text);
    let sent = server.accepted().len() as i64;
    assert!(sent < 40, "stopped early");
    assert_eq!(from, sent + 1, "{text}");
    assert_eq!(audits(&db).await[0]["stop_reason"], "interrupted");
}

/// The second signal exits at once, with events in flight: its message names the start of the
/// wave the sink had not finished, and resuming there sends everything not yet taken.
#[tokio::test]
async fn a_second_sigint_exits_at_once_and_names_where_to_resume() {
    let db = TestDb::new().await;
    published(&db, 12, 12).await;
    // Events 1-4 are answered; event 5 is held until the test lets it go.
    let held = Arc::new((std::sync::Mutex::new(true), std::sync::Condvar::new()));
    let arrived = Arc::new(AtomicUsize::new(0));
    let (h, a) = (Arc::clone(&held), Arc::clone(&arrived));
    let server = TestServer::start(0, move |r| {
        if doc_id(r) >= 5 {
            a.fetch_add(1, Ordering::SeqCst);
            let (lock, cv) = &*h;
            let _g = cv.wait_while(lock.lock().unwrap(), |hold| *hold).unwrap();
        }
        (200, vec![])
    });
    let url = server.url();
    let (mut child, err) = spawn_capturing(
        &db,
        &[
            "-v",
            "replay",
            "--all",
            "--sink",
            &url,
            "--batch-size",
            "3",
            "--concurrency",
            "1",
            "--publish-timeout",
            "60s",
            "--yes",
        ],
    );
    wait_until(
        Duration::from_secs(20),
        "event 5 held by the server",
        || async { arrived.load(Ordering::SeqCst) >= 1 },
    )
    .await;
    signal(&child, "INT");
    wait_until(
        Duration::from_secs(20),
        "the first signal taken",
        || async { err.lock().unwrap().contains("stopping at the next event") },
    )
    .await;
    signal(&child, "INT");
    let status = child.wait().unwrap();
    let text = err.lock().unwrap().clone();
    assert_eq!(status.code(), Some(130), "{text}");
    assert!(text.contains("interrupted again"), "{text}");
    let (from, replay_id) = resume_hint(&text);
    // Waves of 3: 1-3 taken, then 4 (taken) and 5 (held) in the wave in flight.
    assert_eq!(from, 4, "{text}");
    let audit_id: i64 = db
        .scalar("SELECT id FROM outbox_audit WHERE action = 'replay'")
        .await;
    assert_eq!(replay_id, audit_id, "{text}");
    let taken: Vec<i64> = server.accepted().iter().map(doc_id).collect();
    assert_eq!(taken, (1..=4).collect::<Vec<_>>());
    {
        let (lock, cv) = &*held;
        *lock.lock().unwrap() = false;
        cv.notify_all();
    }

    let rest = TestServer::start(0, |_| (200, vec![]));
    let (from_s, id_s) = (from.to_string(), replay_id.to_string());
    let url = rest.url();
    let args = ["replay", "--all", "--sink", &url, "--yes"];
    run(
        &db,
        &[&args[..], &["--from-id", &from_s, "--replay-id", &id_s]].concat(),
        0,
    );
    let mut ids: Vec<i64> = rest.accepted().iter().map(doc_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, (4..=12).collect::<Vec<_>>(), "the rest, from the hint");
}

#[tokio::test]
async fn an_event_the_sink_rejects_for_good_stops_it_at_that_event() {
    let db = TestDb::new().await;
    published(&db, 5, 5).await;
    let server = TestServer::start(0, |r| {
        if doc_id(r) == 3 {
            (422, vec![])
        } else {
            (200, vec![])
        }
    });
    let out = run(
        &db,
        &[
            "replay",
            "--all",
            "--sink",
            &server.url(),
            "--concurrency",
            "1",
            "--yes",
        ],
        5,
    );
    let err = stderr(&out);
    assert!(err.contains("rejected event 3 for good"), "{err}");
    assert!(err.contains("skip it with --from-id 4"), "{err}");
    assert_eq!(resume_hint(&err).0, 3, "{err}");
    assert_eq!(audits(&db).await[0]["stop_reason"], "rejected");
}

/// `replay` takes the relay's `--format`: a consumer of CloudEvents gets its history as
/// CloudEvents, the marker among the headers and the original key as the event's id.
#[tokio::test]
async fn a_replay_in_cloudevents_keeps_the_id_and_carries_the_marker() {
    let db = TestDb::new().await;
    published(&db, 2, 2).await;
    let server = TestServer::start(0, |_| (200, vec![]));
    let before = rows(&db).await;
    let url = server.url();
    let args = [
        "replay",
        "--all",
        "--sink",
        &url,
        "--format",
        "cloudevents",
        "--yes",
    ];
    run(&db, &args, 0);
    let mut got = server.accepted();
    got.sort_by_key(|r| r.header("ce-id").map(str::to_owned));
    let ids: Vec<_> = got.iter().map(|r| r.header("ce-id")).collect();
    assert_eq!(ids, [Some("k-1"), Some("k-2")]);
    for r in &got {
        assert_eq!(r.header("ce-type"), Some("evt.created"));
        assert_eq!(r.header("outbox-replay"), Some("true"), "{:?}", r.headers);
        let body = String::from_utf8(r.body.clone()).unwrap();
        assert!(body.contains(DIGITS), "{body}");
    }
    assert_eq!(rows(&db).await, before, "nothing changed");
}
