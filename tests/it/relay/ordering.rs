//! Ordered delivery per key (`outboxctl ordering`): real PostgreSQL, real relay processes, a real
//! HTTP consumer. Each test asserts what the consumer (or sink file) actually received, in order.

use std::collections::HashMap;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering as AtomicOrdering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::servers::TestServer;
use crate::support::{capture, run, run_json, stderr, stdout, wait_until, TestDb};

/// Ports of this module's own HTTP consumers.
fn port_causal() -> u16 {
    crate::support::port(18760)
}
fn port_poison() -> u16 {
    crate::support::port(18761)
}
fn port_skip() -> u16 {
    crate::support::port(18762)
}
fn port_retried() -> u16 {
    crate::support::port(18765)
}

async fn pending(db: &TestDb) -> i64 {
    db.scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL")
        .await
}

async fn insert(
    db: &TestDb,
    aggregate_type: &str,
    aggregate_id: &str,
    n: i64,
    poison: bool,
) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         VALUES ('00000000-0000-0000-0000-000000000001', $1, $2, 'e',
                 jsonb_build_object('n', $3::bigint, 'poison', $4::bool), gen_random_uuid()::text)
         RETURNING id",
    )
    .bind(aggregate_type)
    .bind(aggregate_id)
    .bind(n)
    .bind(poison)
    .fetch_one(&db.pool)
    .await
    .expect("insert")
}

/// `(aggregate_id, n)` of each delivered envelope, in delivery order.
fn keyed(bodies: impl IntoIterator<Item = Value>) -> Vec<(String, i64)> {
    bodies
        .into_iter()
        .map(|v| {
            (
                v["aggregate_id"].as_str().expect("aggregate_id").to_owned(),
                v["payload"]["n"].as_i64().expect("n"),
            )
        })
        .collect()
}

/// Per aggregate, the n's in order of first delivery (duplicates dropped).
fn first_deliveries(delivered: &[(String, i64)]) -> HashMap<String, Vec<i64>> {
    let mut seen: HashMap<String, Vec<i64>> = HashMap::new();
    for (agg, n) in delivered {
        let v = seen.entry(agg.clone()).or_default();
        if !v.contains(n) {
            v.push(*n);
        }
    }
    seen
}

fn file_bodies(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

/// Kills the relays left running when a test fails.
struct Relays(Vec<Child>);

impl Drop for Relays {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn spawn_http_relay(db: &TestDb, url: &str) -> Child {
    db.cmd()
        .args([
            "relay",
            "--mode",
            "lease",
            "--batch-size",
            "40",
            "--lease",
            "2s",
            "--publish-timeout",
            "1s",
            "--backoff-base",
            "10ms",
            "--backoff-max",
            "50ms",
            "--max-attempts",
            "1000",
            "--poll-interval",
            "100ms",
            "--sink",
            url,
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn relay")
}

/// Many producers, each writing its aggregates in sequence (event n+1's transaction starts after
/// event n's committed; the payload carries n), ordered and unordered types in one table; four
/// relays in lease mode, one killed with SIGKILL mid-run; the consumer answers ~10 % of requests
/// with 503. Every ordered aggregate's first deliveries arrive in n order; nothing is lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn causal_order_holds_under_faults_with_four_relays() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    let counter = Arc::new(AtomicU64::new(0));
    let c = Arc::clone(&counter);
    let server = TestServer::start(port_causal(), move |_| {
        // Deterministic ~10 % failures, spread over the run.
        let i = c.fetch_add(1, AtomicOrdering::SeqCst);
        if (i.wrapping_mul(2_654_435_761) >> 7).is_multiple_of(10) {
            (503, vec![])
        } else {
            (200, vec![])
        }
    });
    let mut relays = Relays(
        (0..4)
            .map(|_| spawn_http_relay(&db, &server.url()))
            .collect(),
    );

    const PRODUCERS: usize = 8;
    const AGGREGATES_EACH: usize = 12;
    const EVENTS: i64 = 15;
    let mut producers = Vec::new();
    for p in 0..PRODUCERS {
        let pool = db.pool.clone();
        producers.push(tokio::spawn(async move {
            for n in 1..=EVENTS {
                for a in 0..AGGREGATES_EACH {
                    let ty = if a % 4 == 3 { "plain" } else { "order" };
                    sqlx::query(
                        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
                         VALUES ('00000000-0000-0000-0000-000000000001', $1, $2, 'e',
                                 jsonb_build_object('n', $3::bigint), gen_random_uuid()::text)",
                    )
                    .bind(ty)
                    .bind(format!("{ty}-{p}-{a}"))
                    .bind(n)
                    .execute(&pool)
                    .await
                    .expect("produce");
                }
            }
        }));
    }
    let total = (PRODUCERS * AGGREGATES_EACH) as i64 * EVENTS;
    // Kill one relay once a quarter of the events is out, while producers still write.
    wait_until(Duration::from_secs(60), "a quarter published", || async {
        db.count("published_at IS NOT NULL").await >= total / 4
    })
    .await;
    crate::support::signal(&relays.0[0], "KILL");
    let _ = relays.0[0].wait();
    for p in producers {
        p.await.unwrap();
    }
    wait_until(Duration::from_secs(90), "every event published", || async {
        db.count("published_at IS NOT NULL").await == total
    })
    .await;
    drop(relays);

    let delivered = keyed(server.accepted().iter().map(|r| r.json()));
    let firsts = first_deliveries(&delivered);
    let expected: Vec<i64> = (1..=EVENTS).collect();
    let mut ordered_keys = 0;
    for (agg, ns) in &firsts {
        let mut sorted = ns.clone();
        sorted.sort_unstable();
        assert_eq!(sorted, expected, "{agg}: lost or unknown events");
        if agg.starts_with("order-") {
            ordered_keys += 1;
            assert_eq!(ns, &expected, "{agg}: first deliveries out of order");
        }
    }
    assert_eq!(
        firsts.len(),
        PRODUCERS * AGGREGATES_EACH,
        "aggregates missing"
    );
    assert_eq!(ordered_keys, PRODUCERS * AGGREGATES_EACH * 3 / 4);
    assert_eq!(db.count("dead_lettered_at IS NOT NULL").await, 0);
    assert!(
        counter.load(AtomicOrdering::SeqCst) > delivered.len() as u64,
        "the consumer failed no request"
    );
}

/// The commit-order case of the design note: a transaction holds event A of a key open while
/// another commits event B of the same key (a larger id). Design A promises causal order only:
/// B, being visible and the key's first visible pending row, is delivered without waiting for A
/// (nor does A's open transaction hold back any other key); A is delivered once it commits.
#[tokio::test]
async fn an_open_transaction_holds_back_nothing_and_is_delivered_after_its_commit() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable"], 0);
    let mut open = db.pool.begin().await.unwrap();
    let a: i64 = sqlx::query_scalar(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         VALUES ('00000000-0000-0000-0000-000000000001', 'order', 'k', 'e', '{\"n\": 1}', 'a')
         RETURNING id",
    )
    .fetch_one(&mut *open)
    .await
    .unwrap();
    let b = insert(&db, "order", "k", 2, false).await;
    let other = insert(&db, "order", "other", 1, false).await;
    assert!(a < b);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    let sink = format!("file:{}", file.display());
    run(&db, &["relay", "--once", "--sink", &sink], 0);
    let ids: Vec<i64> = file_bodies(&file)
        .iter()
        .map(|v| v["id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        {
            let mut s = ids.clone();
            s.sort_unstable();
            s
        },
        vec![b, other],
        "B and the other key flow while A's transaction is open"
    );
    open.commit().await.unwrap();
    run(&db, &["relay", "--once", "--sink", &sink], 0);
    let ids: Vec<i64> = file_bodies(&file)
        .iter()
        .map(|v| v["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[2], a, "A is delivered once committed");
    assert_eq!(pending(&db).await, 0);
}

/// A poison head (the consumer answers 422) is dead-lettered and blocks only its key: the other
/// keys flow; `stats` and `dead list` show the block; `requeue` resumes the key in order; on
/// another key `ordering skip` lets the rest flow; both are audited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_head_blocks_its_key_until_requeued_or_skipped() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    let poison_fails = Arc::new(AtomicBool::new(true));
    let pf = Arc::clone(&poison_fails);
    let server = TestServer::start(port_poison(), move |r| {
        if r.json()["payload"]["poison"] == Value::Bool(true) && pf.load(AtomicOrdering::SeqCst) {
            (422, vec![])
        } else {
            (200, vec![])
        }
    });
    let head = insert(&db, "order", "bad", 1, true).await;
    for n in 2..=4 {
        insert(&db, "order", "bad", n, false).await;
    }
    let skip_head = insert(&db, "order", "skipme", 1, true).await;
    for n in 2..=3 {
        insert(&db, "order", "skipme", n, false).await;
    }
    for n in 1..=3 {
        insert(&db, "order", "good", n, false).await;
    }
    let url = server.url();
    let relay = ["relay", "--once", "--mode", "lease", "--sink", url.as_str()];
    run(&db, &relay, 0);
    let got = keyed(server.accepted().iter().map(|r| r.json()));
    let firsts = first_deliveries(&got);
    assert_eq!(firsts.get("good"), Some(&vec![1, 2, 3]));
    assert_eq!(firsts.get("bad"), None, "nothing of the blocked key");
    assert_eq!(firsts.get("skipme"), None);

    let stats = run_json(&db, &["stats", "--json"]);
    assert_eq!(stats["blocked_keys"], 2, "{stats}");
    assert_eq!(stats["blocked_events"], 5, "{stats}");
    assert!(stats["oldest_blocked_at"].is_string(), "{stats}");
    let dead = run_json(&db, &["dead", "list", "--json"]);
    let blocking: HashMap<i64, i64> = dead["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["blocking"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    assert_eq!(blocking.get(&head), Some(&3), "{dead}");
    assert_eq!(blocking.get(&skip_head), Some(&2), "{dead}");
    let listed = stdout(&run(&db, &["dead", "list"], 0));
    assert!(listed.contains("blocking 3 events"), "{listed}");
    let out = db.cmd().args(["doctor", "--json"]).output().unwrap();
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let check = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "ordering_blocked")
        .cloned()
        .unwrap_or_else(|| panic!("no ordering_blocked check: {report}"));
    assert_eq!(check["status"], "WARN", "{check}");
    assert!(
        check["message"].as_str().unwrap().starts_with(
            "2 ordered keys are blocked by a dead-lettered head, holding back 5 events, the oldest for"
        ),
        "{check}"
    );
    assert_eq!(check["details"]["blocked_events"], 5, "{check}");

    // The consumer is fixed: requeue resumes the key, head first.
    poison_fails.store(false, AtomicOrdering::SeqCst);
    run(
        &db,
        &["requeue", &head.to_string(), "--reason", "consumer fixed"],
        0,
    );
    run(&db, &relay, 0);
    let got = keyed(server.accepted().iter().map(|r| r.json()));
    assert_eq!(first_deliveries(&got).get("bad"), Some(&vec![1, 2, 3, 4]));
    assert_eq!(first_deliveries(&got).get("skipme"), None, "still blocked");

    // Skip the other key's dead head: it stays dead, the rest flows.
    let out = run(
        &db,
        &[
            "ordering",
            "skip",
            &skip_head.to_string(),
            "--reason",
            "poison",
        ],
        0,
    );
    assert!(
        stdout(&out).contains("no longer blocks"),
        "{}",
        stdout(&out)
    );
    run(&db, &relay, 0);
    let got = keyed(server.accepted().iter().map(|r| r.json()));
    assert_eq!(first_deliveries(&got).get("skipme"), Some(&vec![2, 3]));
    assert_eq!(pending(&db).await, 0);
    let audit: Vec<(String, i64, Option<String>)> = sqlx::query_as(
        "SELECT action, event_id, reason FROM outbox_audit WHERE action IN ('requeue', 'skip') ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        audit,
        vec![
            ("requeue".into(), head, Some("consumer fixed".into())),
            ("skip".into(), skip_head, Some("poison".into())),
        ]
    );
    let stats = run_json(&db, &["stats", "--json"]);
    assert_eq!(stats["blocked_keys"], 0, "{stats}");
    // Skipping again: not a head any more (exit 1, one line).
    let out = run(&db, &["ordering", "skip", &skip_head.to_string()], 1);
    assert!(crate::support::stderr(&out).contains("is not a head to skip"));

    // --on-dead skip: the key moves on past its dead head by itself.
    let _ = port_skip();
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
    poison_fails.store(true, AtomicOrdering::SeqCst);
    insert(&db, "order", "self-skip", 1, true).await;
    insert(&db, "order", "self-skip", 2, false).await;
    run(&db, &relay, 0);
    run(&db, &relay, 0);
    let got = keyed(server.accepted().iter().map(|r| r.json()));
    assert_eq!(first_deliveries(&got).get("self-skip"), Some(&vec![2]));
    let status = run_json(&db, &["ordering", "status", "--json"]);
    assert_eq!(status["types"][0]["on_dead"], "skip", "{status}");
    assert_eq!(status["blocked_keys"], 0, "{status}");
}

/// Switched on while a relay runs: the relay says so in its log within the documented bound and
/// from then on publishes a key in order (here the key's head is due later, so the rest waits).
#[tokio::test]
async fn enabling_while_a_relay_runs_takes_effect_without_a_restart() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    let mut child = db
        .cmd()
        .args(["relay", "--mode", "tx", "--poll-interval", "100ms"])
        .arg("--sink")
        .arg(format!("file:{}", file.display()))
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = capture(child.stderr.take().unwrap());
    let relays = Relays(vec![child]);
    // Unordered: a later row flows while an earlier one is scheduled.
    let early = insert(&db, "order", "k1", 1, false).await;
    db.exec(&format!(
        "UPDATE outbox SET available_at = now() + interval '1 hour' WHERE id = {early}"
    ))
    .await;
    let later = insert(&db, "order", "k1", 2, false).await;
    wait_until(
        Duration::from_secs(10),
        "the unordered row published",
        || async { crate::support::ids_in_file(&file).contains(&later) },
    )
    .await;

    let enabled = Instant::now();
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    wait_until(Duration::from_secs(10), "the relay noticing", || async {
        log.lock()
            .unwrap()
            .contains("ordered delivery per key: on for order")
    })
    .await;
    assert!(
        enabled.elapsed() < Duration::from_secs(5),
        "noticed within the refresh bound"
    );
    let head = insert(&db, "order", "k2", 1, false).await;
    db.exec(&format!(
        "UPDATE outbox SET available_at = now() + interval '1 second' WHERE id = {head}"
    ))
    .await;
    let next = insert(&db, "order", "k2", 2, false).await;
    wait_until(Duration::from_secs(15), "k2 published", || async {
        let ids = crate::support::ids_in_file(&file);
        ids.contains(&head) && ids.contains(&next)
    })
    .await;
    let ids = crate::support::ids_in_file(&file);
    let pos = |id| ids.iter().position(|x| *x == id).unwrap();
    assert!(
        pos(head) < pos(next),
        "k2's head before its next event: {ids:?}"
    );
    drop(relays);
    run(&db, &["ordering", "disable"], 0);
    let status = run_json(&db, &["ordering", "status", "--json"]);
    assert_eq!(status["enabled"], false);
    let audit: i64 = db
        .scalar("SELECT count(*) FROM outbox_audit WHERE action = 'ordering'")
        .await;
    assert_eq!(audit, 2, "enable and disable audited");
}

/// One key with 100k events: published in id order, in batches. Their `available_at` runs the
/// other way (the last inserted was due first), so the unordered claim's order would be the
/// reverse: only the ordered claim yields id order.
#[tokio::test]
async fn one_key_with_many_events_is_published_in_order() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable"], 0);
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key, available_at)
         SELECT '00000000-0000-0000-0000-000000000001', 'order', 'hot', 'e',
                jsonb_build_object('n', g), 'k-' || g, now() - g * interval '1 millisecond'
           FROM generate_series(1, 100000) g",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    let started = Instant::now();
    run(
        &db,
        &[
            "relay",
            "--once",
            "--mode",
            "tx",
            "--sink",
            &format!("file:{}", file.display()),
        ],
        0,
    );
    let ns: Vec<i64> = file_bodies(&file)
        .iter()
        .map(|v| v["payload"]["n"].as_i64().unwrap())
        .collect();
    assert_eq!(ns, (1..=100_000).collect::<Vec<_>>());
    assert_eq!(pending(&db).await, 0);
    eprintln!("1 key x 100k events: {:?}", started.elapsed());
}

/// 100k keys with one event each, ordered and unordered types mixed in one table, lease mode:
/// every event published exactly once.
#[tokio::test]
async fn many_keys_with_one_event_each_and_unordered_types_beside_them() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         SELECT '00000000-0000-0000-0000-000000000001', CASE WHEN g % 5 = 0 THEN 'plain' ELSE 'order' END,
                'a-' || g, 'e', jsonb_build_object('n', 1), 'k-' || g FROM generate_series(1, 100000) g",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    run(
        &db,
        &[
            "relay",
            "--once",
            "--mode",
            "lease",
            "--sink",
            &format!("file:{}", file.display()),
        ],
        0,
    );
    let seen = crate::support::deliveries(&[file.as_path()]);
    assert_eq!(seen.len(), 100_000);
    assert!(seen.values().all(|n| *n == 1), "each exactly once");
    assert_eq!(pending(&db).await, 0);
}

/// Several named ordered types, the first of which (in name order) has no pending row: the walk
/// must still reach the later types' keys (it once stopped at the first empty type), and every
/// key's events are published in order, across a `--once` run that starts mid-way.
#[tokio::test]
async fn named_types_are_all_walked_even_when_one_has_nothing_pending() {
    let db = TestDb::new().await;
    run(
        &db,
        &[
            "ordering",
            "enable",
            "--aggregate-type",
            "invoice",
            "--aggregate-type",
            "order",
            "--aggregate-type",
            "shipment",
        ],
        0,
    );
    for k in 0..30 {
        for n in 1..=3 {
            insert(&db, "order", &format!("o{k}"), n, false).await;
            insert(&db, "shipment", &format!("s{k}"), n, false).await;
        }
    }
    insert(&db, "plain", "p", 1, false).await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    let sink = format!("file:{}", file.display());
    run(
        &db,
        &["relay", "--once", "--batch-size", "7", "--sink", &sink],
        0,
    );
    assert_eq!(pending(&db).await, 0, "every ordered type walked");
    let firsts = first_deliveries(&keyed(file_bodies(&file)));
    assert_eq!(firsts.len(), 61);
    for (agg, ns) in &firsts {
        if agg != "p" {
            assert_eq!(ns, &vec![1, 2, 3], "{agg}");
        }
    }
}

/// Fills `keys` keys of type `order` with `per` events each of about `bytes` bytes of payload,
/// in id order n = 1..per within each key.
async fn fill(db: &TestDb, keys: i64, per: i64, bytes: i64) {
    db.exec(&format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         SELECT '00000000-0000-0000-0000-000000000001', 'order', 'k' || k, 'e',
                jsonb_build_object('n', n, 'pad', repeat('x', {bytes})), k || '-' || n
           FROM generate_series(1, {per}) n, generate_series(1, {keys}) k ORDER BY n, k"
    ))
    .await;
}

fn everything() -> outboxctl::db::ordering::Ordering {
    outboxctl::db::ordering::Ordering {
        all: true,
        types: Vec::new(),
    }
}

/// `--batch-bytes` bounds the ordered claim too: round robin over the keys until the budget, so
/// what it leaves out of a key is the end of the key's run; the first row is claimed whatever its
/// size; and the claim says more is waiting.
#[tokio::test]
async fn the_ordered_claim_keeps_to_the_byte_budget_and_cuts_only_a_keys_tail() {
    use outboxctl::db::ordering::{claim, OrderedAsk, OrderedMode, WalkStart};
    use outboxctl::db::relay::BatchLimit;
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable"], 0);
    fill(&db, 3, 4, 1000).await;
    let mut c = db.pool.acquire().await.unwrap();
    for (bytes, expect) in [(3500, 3), (5500, 5), (1, 1), (16 << 20, 12)] {
        use sqlx::Connection;
        let mut tx = c.begin().await.unwrap();
        let limit = BatchLimit {
            rows: 100,
            bytes,
            sizing: outboxctl::db::relay::Sizing::Running,
        };
        let got = claim(
            &mut tx,
            &OrderedAsk {
                mode: OrderedMode::Tx,
                limit,
                per_key: 100,
                min_keys: 16,
                ordering: &everything(),
                from: &WalkStart::default(),
            },
        )
        .await
        .unwrap();
        tx.rollback().await.unwrap();
        assert_eq!(got.rows.len(), expect, "budget {bytes}");
        let mut per_key: HashMap<String, Vec<i64>> = HashMap::new();
        for r in &got.rows {
            let n = serde_json::from_str::<Value>(&r.payload).unwrap()["n"]
                .as_i64()
                .unwrap();
            per_key.entry(r.aggregate_id.clone()).or_default().push(n);
        }
        for (k, ns) in &per_key {
            assert_eq!(
                ns,
                &(1..=ns.len() as i64).collect::<Vec<_>>(),
                "{k}: a prefix"
            );
        }
        assert_eq!(got.more, expect < 12, "budget {bytes}: more waiting");
    }
}

/// The ordered claim is planned once per connection and its plan reused (planning it cost as
/// much as walking 500 keys), in both modes and both shapes (every type, named types).
#[tokio::test]
async fn the_ordered_claim_is_planned_once_per_connection() {
    use outboxctl::db::ordering::{claim, OrderedAsk, OrderedMode, Ordering, WalkStart};
    use outboxctl::db::relay::BatchLimit;
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable"], 0);
    fill(&db, 20, 2, 10).await;
    let pool = outboxctl::db::pool_for_relay(&db.config(), 1, true, Duration::from_secs(30))
        .await
        .unwrap();
    let mut c = pool.acquire().await.unwrap();
    let limit = BatchLimit {
        rows: 5,
        bytes: 16 << 20,
        sizing: outboxctl::db::relay::Sizing::Running,
    };
    let named = Ordering {
        all: false,
        types: vec!["order".into()],
    };
    for _ in 0..8 {
        use sqlx::Connection;
        for ordering in [everything(), named.clone()] {
            let mut tx = c.begin().await.unwrap();
            let got = claim(
                &mut tx,
                &OrderedAsk {
                    mode: OrderedMode::Tx,
                    limit,
                    per_key: 5,
                    min_keys: 1,
                    ordering: &ordering,
                    from: &WalkStart::default(),
                },
            )
            .await
            .unwrap();
            assert_eq!(got.rows.len(), 5);
            tx.rollback().await.unwrap();
            let lease = OrderedMode::Lease {
                lease_micros: 1,
                token: uuid::Uuid::new_v4(),
            };
            let got = claim(
                &mut c,
                &OrderedAsk {
                    mode: lease,
                    limit,
                    per_key: 5,
                    min_keys: 1,
                    ordering: &ordering,
                    from: &WalkStart::default(),
                },
            )
            .await
            .unwrap();
            assert_eq!(got.rows.len(), 5);
            // The 1 µs lease is over by the next claim.
        }
    }
    let plans: Vec<(i64, i64)> = sqlx::query_as(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements
          WHERE statement LIKE 'WITH RECURSIVE probe%' ORDER BY statement",
    )
    .fetch_all(&mut *c)
    .await
    .unwrap();
    assert_eq!(
        plans,
        vec![(8, 0); 4],
        "one generic plan per statement, reused"
    );
}

/// Port of the metrics test's relay (`--metrics-addr`) and its HTTP consumer.
fn port_metrics() -> u16 {
    crate::support::port(18763)
}
fn port_metrics_sink() -> u16 {
    crate::support::port(18764)
}

/// A blocked key shows in the relay's metrics: `outboxctl_ordering_blocked_keys` and
/// `outboxctl_ordering_blocked_events` (the events it holds back), and both go back to 0 once
/// the head is requeued and the key drains.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocked_keys_show_in_the_metrics() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable"], 0);
    let poison_fails = Arc::new(AtomicBool::new(true));
    let pf = Arc::clone(&poison_fails);
    let server = TestServer::start(port_metrics_sink(), move |r| {
        if r.json()["payload"]["poison"] == Value::Bool(true) && pf.load(AtomicOrdering::SeqCst) {
            (422, vec![])
        } else {
            (200, vec![])
        }
    });
    let head = insert(&db, "order", "bad", 1, true).await;
    insert(&db, "order", "bad", 2, false).await;
    insert(&db, "order", "bad", 3, false).await;
    insert(&db, "order", "good", 1, false).await;
    let child = db
        .cmd()
        .args(["relay", "--mode", "lease", "--poll-interval", "100ms"])
        .args(["--metrics-addr", &format!("127.0.0.1:{}", port_metrics())])
        .args(["--sink", &server.url()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _relays = Relays(vec![child]);
    let gauges = || async {
        let text = reqwest::get(format!("http://127.0.0.1:{}/metrics", port_metrics()))
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        let v = |name: &str| {
            text.lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.rsplit(' ').next())
                .and_then(|v| v.parse::<f64>().ok())
        };
        Some((
            v("outboxctl_ordering_blocked_keys")?,
            v("outboxctl_ordering_blocked_events")?,
        ))
    };
    wait_until(
        Duration::from_secs(30),
        "the block in the metrics",
        || async { gauges().await == Some((1.0, 2.0)) },
    )
    .await;
    assert_eq!(
        first_deliveries(&keyed(server.accepted().iter().map(|r| r.json()))).get("good"),
        Some(&vec![1])
    );
    poison_fails.store(false, AtomicOrdering::SeqCst);
    run(&db, &["requeue", &head.to_string()], 0);
    wait_until(Duration::from_secs(30), "the key drained", || async {
        pending(&db).await == 0
    })
    .await;
    wait_until(Duration::from_secs(30), "the metrics back at 0", || async {
        gauges().await == Some((0.0, 0.0))
    })
    .await;
}

/// A `--once` run drains every ordered key, however many claims it takes: once the walk reaches
/// the last key it goes round to the keys before its cursor (it used to stop there, leaving every
/// key's later events pending: 99k of 1k keys x 100 in the benchmark).
#[tokio::test]
async fn a_once_run_goes_round_the_keys_until_every_event_is_out() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable"], 0);
    fill(&db, 40, 5, 10).await;
    let dir = tempfile::tempdir().unwrap();
    for mode in ["tx", "lease"] {
        let file = dir.path().join(format!("{mode}.jsonl"));
        let sink = format!("file:{}", file.display());
        run(
            &db,
            &[
                "relay",
                "--once",
                "--mode",
                mode,
                "--batch-size",
                "20",
                "--sink",
                &sink,
            ],
            0,
        );
        assert_eq!(pending(&db).await, 0, "{mode}: everything published");
        let firsts = first_deliveries(&keyed(file_bodies(&file)));
        assert_eq!(firsts.len(), 40);
        assert!(
            firsts.values().all(|ns| ns == &vec![1, 2, 3, 4, 5]),
            "{mode}: {firsts:?}"
        );
        db.exec("UPDATE outbox SET published_at = NULL; DELETE FROM outbox_relay_floor")
            .await;
    }
}

const KEY_INDEX_STATE: &str = "SELECT (SELECT CASE WHEN i.indisvalid AND i.indisready THEN 'valid' ELSE 'invalid' END
                                  FROM pg_index i WHERE i.indexrelid = to_regclass('outbox_key_pending_idx'))";

/// `doctor --json`, whatever its verdict (the shared test server warns about its settings).
fn doctor_json(db: &TestDb) -> Value {
    let out = db
        .cmd()
        .args(["doctor", "--json"])
        .output()
        .expect("doctor");
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("doctor --json: {e}: {}", stdout(&out)))
}

async fn key_index(db: &TestDb) -> Option<String> {
    db.scalar::<Option<String>>(KEY_INDEX_STATE).await
}

/// The key index costs every producer insert one more index entry, so it exists only while some
/// aggregate type is ordered: `ordering enable` builds it, the last `ordering disable` drops it,
/// and an index left invalid by an interrupted build is rebuilt by the next `enable`.
#[tokio::test]
async fn the_key_index_exists_only_while_ordering_is_on() {
    let db = TestDb::new().await;
    assert_eq!(
        key_index(&db).await,
        None,
        "a fresh outbox has no key index"
    );
    db.seed_ready(50).await;

    let on = run_json(
        &db,
        &["ordering", "enable", "--aggregate-type", "order", "--json"],
    );
    assert_eq!(on["key_index"], "built", "{on}");
    assert_eq!(key_index(&db).await.as_deref(), Some("valid"));
    let again = run_json(
        &db,
        &[
            "ordering",
            "enable",
            "--aggregate-type",
            "invoice",
            "--json",
        ],
    );
    assert_eq!(again["key_index"], "kept", "{again}");

    let off = run_json(
        &db,
        &["ordering", "disable", "--aggregate-type", "order", "--json"],
    );
    assert_eq!(off["key_index"], "kept", "invoice is still ordered: {off}");
    assert_eq!(key_index(&db).await.as_deref(), Some("valid"));
    let off = run_json(
        &db,
        &[
            "ordering",
            "disable",
            "--aggregate-type",
            "invoice",
            "--json",
        ],
    );
    assert_eq!(off["key_index"], "dropped", "{off}");
    assert_eq!(
        key_index(&db).await,
        None,
        "the last disable drops the index"
    );

    // An interrupted CREATE INDEX CONCURRENTLY leaves the index invalid; the next enable rebuilds it.
    run(&db, &["ordering", "enable"], 0);
    db.exec(
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = to_regclass('outbox_key_pending_idx')",
    )
    .await;
    assert_eq!(key_index(&db).await.as_deref(), Some("invalid"));
    let doctor = doctor_json(&db);
    let check = doctor["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "index:outbox_key_pending_idx")
        .unwrap_or_else(|| panic!("doctor checks the key index while ordering is on: {doctor}"));
    assert_eq!(check["status"], "FAIL", "{check}");
    assert!(
        check["message"]
            .as_str()
            .unwrap()
            .contains("outboxctl ordering enable"),
        "{check}"
    );
    let on = run_json(&db, &["ordering", "enable", "--on-dead", "skip", "--json"]);
    assert_eq!(on["key_index"], "rebuilt", "{on}");
    assert_eq!(key_index(&db).await.as_deref(), Some("valid"));

    // With ordering off, doctor expects no key index.
    run(&db, &["ordering", "disable"], 0);
    let doctor = doctor_json(&db);
    assert!(
        !doctor["checks"]
            .as_array()
            .unwrap()
            .iter()
            .any(|c| c["name"] == "index:outbox_key_pending_idx"),
        "{doctor}"
    );
}

/// Migration 7 drops the key index of an outbox where ordering is off (producers stop paying for
/// it) and keeps it where ordering is already on.
#[tokio::test]
async fn migration_7_keeps_the_key_index_only_where_ordering_is_on() {
    for ordered in [false, true] {
        let db = TestDb::unmigrated().await;
        db.exec(&format!("CREATE SCHEMA \"{}\"", db.schema)).await;
        let mut conn = outboxctl::db::connect(&db.config()).await.expect("connect");
        let migrator = outboxctl::db::migrate::MIGRATOR.iter().take(6);
        for m in migrator {
            sqlx::raw_sql(&m.sql)
                .execute(&mut conn)
                .await
                .expect("migration");
        }
        if ordered {
            db.exec("INSERT INTO outbox_ordering (aggregate_type) VALUES ('order')")
                .await;
        }
        let sql = &outboxctl::db::migrate::MIGRATOR
            .iter()
            .find(|m| m.version == 7)
            .expect("migration 7")
            .sql;
        sqlx::raw_sql(sql)
            .execute(&mut conn)
            .await
            .expect("migration 7");
        let want = ordered.then(|| "valid".to_owned());
        assert_eq!(key_index(&db).await, want, "ordering on: {ordered}");
    }
}

/// A relay of this version on an outbox migrated only through migration 5 (a rolling upgrade: the
/// new relays start before `migrate` runs) has no ordering switch to read, and relays unordered
/// in both modes. In tx mode the switch is read inside the claim's transaction, where a failed
/// read of the missing table once aborted the transaction and every claim after it.
#[tokio::test]
async fn a_relay_on_a_schema_before_migration_6_relays_unordered_in_both_modes() {
    for mode in ["tx", "lease"] {
        let db = TestDb::unmigrated().await;
        db.exec(&format!("CREATE SCHEMA \"{}\"", db.schema)).await;
        let mut conn = outboxctl::db::connect(&db.config()).await.expect("connect");
        let through_5 = sqlx::migrate::Migrator {
            migrations: std::borrow::Cow::Owned(
                outboxctl::db::migrate::MIGRATOR
                    .iter()
                    .take(5)
                    .cloned()
                    .collect(),
            ),
            ..sqlx::migrate::Migrator::DEFAULT
        };
        through_5.run(&mut conn).await.expect("migrations 1-5");
        db.seed_ready(30).await;
        let out = run(
            &db,
            &[
                "relay", "--once", "--mode", mode, "--sink", "null", "--json",
            ],
            0,
        );
        let v: Value = serde_json::from_slice(&out.stdout).expect("JSON summary");
        assert_eq!(v["published"], 30, "{mode}: {v}");
        assert_eq!(pending(&db).await, 0, "{mode}");
    }
}

/// No BEFORE UPDATE row trigger on the outbox: with one, PostgreSQL fetches and locks every row an
/// UPDATE touches once more before it checks the trigger's column list or WHEN clause, so every
/// claim and settle paid for migration 6's blocking trigger until migration 8 made it AFTER.
#[tokio::test]
async fn the_outbox_has_no_before_update_row_trigger() {
    let db = TestDb::new().await;
    // tgtype bits: 1 ROW, 2 BEFORE, 16 UPDATE.
    let row_triggers = |before: bool| {
        let sql = format!(
            "SELECT tgname::text FROM pg_trigger
              WHERE tgrelid = to_regclass('outbox') AND NOT tgisinternal
                AND tgtype & 1 = 1 AND (tgtype & 2 = 2) = {before} AND tgtype & 16 = 16
              ORDER BY 1"
        );
        let pool = db.pool.clone();
        async move {
            sqlx::query_scalar::<_, String>(&sql)
                .fetch_all(&pool)
                .await
                .unwrap()
        }
    };
    // The positive control: the query sees the outbox's UPDATE row triggers (migration 8's AFTER
    // trigger), so an empty answer below is not a missing table or a wrong search path.
    let after = row_triggers(false).await;
    assert!(!after.is_empty(), "the AFTER UPDATE row trigger is there");
    assert!(
        row_triggers(true).await.is_empty(),
        "no BEFORE UPDATE row trigger"
    );
    // And a BEFORE one would be seen.
    db.exec(
        "CREATE FUNCTION t_noop() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN RETURN NEW; END$$;
         CREATE TRIGGER t_before BEFORE UPDATE ON outbox FOR EACH ROW EXECUTE FUNCTION t_noop()",
    )
    .await;
    assert_eq!(row_triggers(true).await, ["t_before"]);
}

/// skip → requeue → skip: the second skip (of the now pending head) dead-letters it without
/// blocking, as it says, and the rest of the key flows. The blocking trigger recomputes
/// `blocks_key` when a statement leaves it as it was, so a requeue must not carry the first
/// skip's `false` over (issue 31 item 2).
#[tokio::test]
async fn skip_after_requeue_after_skip_leaves_the_key_unblocked() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    let head = insert(&db, "order", "k1", 1, true).await;
    let next = insert(&db, "order", "k1", 2, false).await;
    let die = format!("UPDATE outbox SET dead_lettered_at = now(), attempt_count = 10, last_error = 'HTTP 422' WHERE id = {head}");
    let blocks = || async {
        db.scalar::<Option<bool>>(&format!("SELECT blocks_key FROM outbox WHERE id = {head}"))
            .await
    };
    db.exec(&die).await;
    assert_eq!(blocks().await, Some(true), "a dead head blocks its key");
    run(
        &db,
        &["ordering", "skip", &head.to_string(), "--reason", "r"],
        0,
    );
    assert_eq!(blocks().await, Some(false));
    run(&db, &["requeue", &head.to_string()], 0);
    // Pending again; skipping it now dead-letters it without blocking.
    let out = db
        .cmd()
        .args(["ordering", "skip", &head.to_string(), "--reason", "again"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("without blocking"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        blocks().await,
        Some(false),
        "the row says what the command said"
    );
    let status = run_json(&db, &["ordering", "status", "--json"]);
    assert!(
        !status.to_string().contains("\"k1\""),
        "no blocked key k1: {status}"
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let sink = format!("file:{}", path.display());
    run(&db, &["relay", "--once", "--sink", &sink], 0);
    let published: bool = db
        .scalar(&format!(
            "SELECT published_at IS NOT NULL FROM outbox WHERE id = {next}"
        ))
        .await;
    assert!(published, "the key's next event flows");
    // And a requeued event that dies again blocks again (the policy decides afresh).
    run(&db, &["requeue", &head.to_string()], 0);
    db.exec(&die).await;
    assert_eq!(blocks().await, Some(true));
}

#[tokio::test]
async fn the_ordered_claim_locks_and_updates_by_tid_whatever_the_statistics_say() {
    // Issue 22 item 10's shape: the ordered claim picks ctids, then locks and updates them by
    // TID; its re-check of the picked rows must not let stale statistics turn the lock into an
    // index scan filtering on ctid.
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable"], 0);
    db.exec("ALTER TABLE outbox SET (autovacuum_enabled = false)")
        .await;
    db.seed_ready(20_000).await;
    let mut c = db.pool.acquire().await.unwrap();
    sqlx::raw_sql("SET enable_sort = off; SET jit = off")
        .execute(&mut *c)
        .await
        .unwrap();
    // $1 rows, $2 per key, $3 every type, $4 types, $5-$7 the cursor, $8 walk, $9 min keys,
    // $10 bytes, $11 the walk's id floor (then the lease's $12 and $13).
    let args = "(100, 10, true, '{}'::text[], '', '00000000-0000-0000-0000-000000000000', '', \
                400, 1, 16777216, 0";
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
        for (name, sql, args) in [
            (
                "ordered claim_tx",
                outboxctl::db::ordering::claim_tx_sql(true),
                format!("{args})"),
            ),
            (
                "ordered claim_lease",
                outboxctl::db::ordering::claim_lease_sql(true),
                format!("{args}, 30000000, gen_random_uuid())"),
            ),
        ] {
            crate::support::plans::assert_tid_lookup(
                &mut c,
                &format!("{name}, {stats_when}"),
                &sql,
                &args,
                ("Update", "outbox"),
                &["moved"],
            )
            .await;
        }
    }
}

/// What an operator does to B, the middle of k1's run A < B < C, while a relay's ordered claim
/// holds A and waits for B's row lock.
#[derive(Debug, Clone, Copy)]
enum Meddle {
    Edit,
    ReschedulePast,
    RescheduleLater,
    Cancel,
    Skip,
}

/// Issue 31 item 1: an operator's change to B commits while an ordered claim walks k1 (the
/// claim's snapshot saw B's old row version, its row lock then meets the new one). The claim
/// must take B with A and C, or end the run before B; never A and C without B. Deterministic:
/// the operator's statement (the command's own SQL, from `outboxctl::db::events`) is held open
/// in a transaction until the relay's backend is seen waiting on it, then committed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_change_during_the_ordered_claim_never_publishes_c_before_b() {
    use outboxctl::db::audit::Audit;
    use outboxctl::db::events::{self, EditSpec};
    for mode in ["tx", "lease"] {
        for meddle in [
            Meddle::Edit,
            Meddle::ReschedulePast,
            Meddle::RescheduleLater,
            Meddle::Cancel,
            Meddle::Skip,
        ] {
            let what = format!("{meddle:?} in {mode} mode");
            let db = TestDb::new().await;
            run(&db, &["ordering", "enable"], 0);
            let a = insert(&db, "order", "k1", 1, false).await;
            let b = insert(&db, "order", "k1", 2, false).await;
            let c = insert(&db, "order", "k1", 3, false).await;
            // Another key, so the walk has more than k1.
            insert(&db, "order", "k2", 1, false).await;

            let mut op = db.pool.begin().await.unwrap();
            let op_pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
                .fetch_one(&mut *op)
                .await
                .unwrap();
            let audit = Audit {
                actor: "test".into(),
                reason: None,
            };
            let changed = match meddle {
                Meddle::Edit => {
                    let spec = EditSpec {
                        payload: Some(r#"{"n":2,"edited":true}"#.into()),
                        ..EditSpec::default()
                    };
                    events::edit(&mut op, &[b], &spec, &audit).await.unwrap()
                }
                Meddle::ReschedulePast | Meddle::RescheduleLater => {
                    let delay = if matches!(meddle, Meddle::ReschedulePast) {
                        -60_000_000
                    } else {
                        3_600_000_000
                    };
                    events::reschedule(&mut op, &[b], None, delay, None, &audit)
                        .await
                        .unwrap()
                        .into_iter()
                        .map(|(id, _)| id)
                        .collect()
                }
                Meddle::Cancel => events::delete_unpublished(&mut op, &[b], true, None, &audit)
                    .await
                    .unwrap(),
                Meddle::Skip => outboxctl::db::ordering::skip(&mut op, b, &audit)
                    .await
                    .unwrap()
                    .map(|_| b)
                    .into_iter()
                    .collect(),
            };
            assert_eq!(changed, vec![b], "{what}: the operator's statement took B");

            let file = tempfile::NamedTempFile::new().unwrap();
            let relay = db
                .cmd()
                .args(["relay", "--once", "--mode", mode, "--sink"])
                .arg(format!("file:{}", file.path().display()))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn relay");
            let mut relays = Relays(vec![relay]);
            // The claim holds A and waits for B, which the open change has locked.
            let probe = db.pool.clone();
            wait_until(
                Duration::from_secs(20),
                "the relay's claim to wait on the operator's row lock",
                || {
                    let probe = probe.clone();
                    async move {
                        sqlx::query_scalar::<_, i64>(
                            "SELECT count(*) FROM pg_stat_activity \
                              WHERE $1 = ANY(pg_blocking_pids(pid))",
                        )
                        .bind(op_pid)
                        .fetch_one(&probe)
                        .await
                        .unwrap()
                            > 0
                    }
                },
            )
            .await;
            op.commit().await.unwrap();
            let out = relays.0.pop().unwrap().wait_with_output().unwrap();
            assert!(out.status.success(), "{what}: {}", stderr(&out));

            let k1: Vec<(i64, Value)> = file_bodies(file.path())
                .into_iter()
                .filter(|v| v["aggregate_id"] == "k1")
                .map(|v| (v["id"].as_i64().unwrap(), v["payload"].clone()))
                .collect();
            let ids: Vec<i64> = k1.iter().map(|(id, _)| *id).collect();
            let pending: Vec<i64> = sqlx::query_scalar(
                "SELECT id FROM outbox WHERE aggregate_id = 'k1' AND published_at IS NULL \
                 AND dead_lettered_at IS NULL ORDER BY id",
            )
            .fetch_all(&db.pool)
            .await
            .unwrap();
            match meddle {
                Meddle::Edit | Meddle::ReschedulePast => {
                    assert_eq!(ids, vec![a, b, c], "{what}: the whole run, in order");
                    assert!(pending.is_empty(), "{what}: left pending {pending:?}");
                    if matches!(meddle, Meddle::Edit) {
                        assert_eq!(k1[1].1["edited"], true, "{what}: B as edited: {k1:?}");
                    }
                }
                Meddle::RescheduleLater => {
                    assert_eq!(ids, vec![a], "{what}: the run ends before B");
                    assert_eq!(pending, vec![b, c], "{what}");
                }
                Meddle::Cancel | Meddle::Skip => {
                    assert_eq!(ids, vec![a, c], "{what}: B is gone or dead");
                    assert!(pending.is_empty(), "{what}: left pending {pending:?}");
                }
            }
        }
    }
}

/// Issue 31 item 4: `ordering skip` of a head whose relay's lease ran out (the relay paused
/// mid-publish) dead-letters it for the operator; that relay's late settle, and the retry of a
/// settle after a lost connection (which counts rows still carrying its token as settled), must
/// not count the skipped head as published. Skip clears the claim token, as edit does.
#[tokio::test]
async fn a_head_skipped_after_its_lease_ran_out_is_not_settled_by_the_old_claim() {
    use outboxctl::db::ordering::{claim, OrderedAsk, OrderedMode, WalkStart};
    use outboxctl::db::relay::{settle_published, still_claimed, BatchLimit, Sizing};
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable"], 0);
    let head = insert(&db, "order", "k1", 1, false).await;
    let next = insert(&db, "order", "k1", 2, false).await;
    let token = uuid::Uuid::new_v4();
    let mut c = db.pool.acquire().await.unwrap();
    let limit = BatchLimit {
        rows: 1,
        bytes: 1 << 20,
        sizing: Sizing::Running,
    };
    // The relay's claim takes the head with a lease that has run out by the time it settles.
    let got = claim(
        &mut c,
        &OrderedAsk {
            mode: OrderedMode::Lease {
                lease_micros: 1,
                token,
            },
            limit,
            per_key: 1,
            min_keys: 1,
            ordering: &everything(),
            from: &WalkStart::default(),
        },
    )
    .await
    .unwrap();
    assert_eq!(got.rows.iter().map(|r| r.id).collect::<Vec<_>>(), [head]);
    let out = run(&db, &["ordering", "skip", &head.to_string()], 0);
    assert!(
        stdout(&out).contains("without blocking"),
        "{}",
        stdout(&out)
    );

    assert_eq!(
        settle_published(&mut c, &[head], token).await.unwrap(),
        Vec::<i64>::new(),
        "the late settle marks nothing"
    );
    assert_eq!(
        still_claimed(&mut c, &[head], token).await.unwrap(),
        Vec::<i64>::new(),
        "a settle retry would count the skipped head as published"
    );
    let (dead, blocks): (bool, Option<bool>) = sqlx::query_as(&format!(
        "SELECT dead_lettered_at IS NOT NULL, blocks_key FROM outbox WHERE id = {head}"
    ))
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((dead, blocks), (true, Some(false)), "dead, not blocking");
    // The rest of the key flows.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    run(
        &db,
        &[
            "relay",
            "--once",
            "--sink",
            &format!("file:{}", file.display()),
        ],
        0,
    );
    assert_eq!(crate::support::ids_in_file(&file), vec![next]);
}

/// Issue 31: the commands that change dead letters (`requeue`, `dead discard`, `prune
/// --dead-older-than`), run by the real binary while an ordered claim's transaction (tx mode)
/// holds its key's run A, C around a dead B (`--on-dead skip`): the claim never locks a dead row,
/// so each command goes through at once, changes only B, and the claim commits A and C. A
/// requeued B goes out after them, as the documentation says of a requeued skipped head.
#[tokio::test]
async fn dead_letter_commands_beside_an_open_ordered_claim() {
    use outboxctl::db::ordering::{claim, OrderedAsk, OrderedMode, WalkStart};
    use outboxctl::db::relay::{BatchLimit, Sizing};
    for op in ["requeue", "discard", "prune"] {
        let db = TestDb::new().await;
        run(&db, &["ordering", "enable", "--on-dead", "skip"], 0);
        let a = insert(&db, "order", "k1", 1, false).await;
        let b = insert(&db, "order", "k1", 2, false).await;
        let c = insert(&db, "order", "k1", 3, false).await;
        db.exec(&format!(
            "UPDATE outbox SET dead_lettered_at = now() - interval '2 hours', attempt_count = 3
              WHERE id = {b}"
        ))
        .await;
        let mut claiming = db.pool.begin().await.unwrap();
        let limit = BatchLimit {
            rows: 10,
            bytes: 1 << 20,
            sizing: Sizing::Running,
        };
        let got = claim(
            &mut claiming,
            &OrderedAsk {
                mode: OrderedMode::Tx,
                limit,
                per_key: 10,
                min_keys: 1,
                ordering: &everything(),
                from: &WalkStart::default(),
            },
        )
        .await
        .unwrap();
        let ids: Vec<i64> = got.rows.iter().map(|r| r.id).collect();
        assert_eq!(ids, vec![a, c], "{op}: the run past the skipped dead B");
        let b_arg = b.to_string();
        let args: Vec<&str> = match op {
            "requeue" => vec!["requeue", &b_arg],
            "discard" => vec!["dead", "discard", &b_arg, "--yes"],
            _ => vec!["prune", "--dead-older-than", "1h"],
        };
        // Not held up by the open claim: were it waiting on a row lock, this would never return.
        let out = db.cmd().args(&args).output().unwrap();
        assert!(out.status.success(), "{op}: {}", stderr(&out));
        claiming.commit().await.unwrap();
        let state: Vec<(i64, bool, bool)> = sqlx::query_as(
            "SELECT id, published_at IS NOT NULL, dead_lettered_at IS NOT NULL
               FROM outbox ORDER BY id",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        match op {
            "requeue" => {
                assert_eq!(
                    state,
                    vec![(a, true, false), (b, false, false), (c, true, false)],
                    "{op}"
                );
                let dir = tempfile::tempdir().unwrap();
                let file = dir.path().join("out.jsonl");
                run(
                    &db,
                    &[
                        "relay",
                        "--once",
                        "--sink",
                        &format!("file:{}", file.display()),
                    ],
                    0,
                );
                assert_eq!(crate::support::ids_in_file(&file), vec![b], "{op}");
            }
            _ => assert_eq!(state, vec![(a, true, false), (c, true, false)], "{op}"),
        }
    }
}

/// The blocking trigger's function reads `outbox_ordering` and updates `outbox` in its own
/// schema whatever the session's search path: an operator's psql (search path `public`, or
/// another outbox's schema) that dead-letters a row by its qualified name used to make it read
/// the other schema's switch and set `blocks_key` on the other outbox's row of the same id.
#[tokio::test]
async fn the_blocking_trigger_acts_in_its_own_schema_whatever_the_search_path() {
    let (a, b) = (TestDb::new().await, TestDb::new().await);
    for db in [&a, &b] {
        db.seed_ready(1).await;
    }
    b.exec("INSERT INTO outbox_ordering (aggregate_type, on_dead) VALUES ('*', 'block')")
        .await;
    // A session whose search path is the other schema, as an operator's psql might have.
    a.exec(&format!(
        "UPDATE \"{}\".outbox SET dead_lettered_at = now(), last_error = 'by hand' WHERE id = 1",
        b.schema
    ))
    .await;
    let in_b: Option<bool> = b.scalar("SELECT blocks_key FROM outbox WHERE id = 1").await;
    let in_a: Option<bool> = a.scalar("SELECT blocks_key FROM outbox WHERE id = 1").await;
    assert_eq!(in_b, Some(true), "the dead-lettered row blocks its key");
    assert_ne!(in_a, Some(true), "the other schema's row was changed");
}

/// Issue 30: the ordered walk skips the entries at or below its id floor. A row pending below
/// the floor (here made so by SQL, as a transaction that committed after a pass had gone by
/// would be) is claimed by the next pass without the floor once one is due, and until then its
/// key is held back: the later event of the key never goes out first. A requeue below the floor
/// makes the next `relay --once` run start without it.
#[tokio::test]
async fn a_row_pending_below_the_key_floor_holds_its_key_until_a_pass_without_the_floor() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    let dir = tempfile::tempdir().unwrap();
    for mode in ["tx", "lease"] {
        db.exec("DELETE FROM outbox; DELETE FROM outbox_relay_floor")
            .await;
        let file = dir.path().join(format!("{mode}.jsonl"));
        let sink = format!("file:{}", file.display());
        let once = || {
            run(
                &db,
                &["relay", "--once", "--mode", mode, "--sink", &sink],
                0,
            )
        };
        let ids = || crate::support::ids_in_file(&file);
        let first = insert(&db, "order", "k", 1, false).await;
        insert(&db, "order", "other", 1, false).await;
        // A run saves the floor only once the transactions running when its pass began have
        // ended: under a loaded suite another test's may outlive one run, so run until it does.
        wait_until(Duration::from_secs(60), "a run saves the floor", || async {
            once();
            db.scalar::<Option<i64>>("SELECT max(key_floor) FROM outbox_relay_floor")
                .await
                .is_some()
        })
        .await;
        let (floor, top): (i64, i64) = (
            db.scalar("SELECT key_floor FROM outbox_relay_floor").await,
            db.scalar("SELECT max(id) FROM outbox").await,
        );
        assert_eq!(floor, top, "{mode}: the run saved the walk's floor");
        // `first` pending again below the floor; a pass without the floor is not due for 200 min.
        db.exec(&format!(
            "UPDATE outbox SET published_at = NULL WHERE id = {first};
             UPDATE outbox_relay_floor SET key_sweep_took = interval '10 minutes'"
        ))
        .await;
        let second = insert(&db, "order", "k", 2, false).await;
        let fresh = insert(&db, "order", "fresh", 1, false).await;
        once();
        let got = ids();
        assert_eq!(got.last(), Some(&fresh), "{mode}: the run relayed: {got:?}");
        assert!(
            !got.contains(&second),
            "{mode}: the key's later event did not overtake the one below the floor: {got:?}"
        );
        assert_eq!(pending(&db).await, 2, "{mode}: both events of the key wait");
        // Once a pass without the floor is due, the run makes it (after the new events): the key's
        // events go out in order.
        db.exec("UPDATE outbox_relay_floor SET key_swept_at = now() - interval '1 day'")
            .await;
        once();
        let got = ids();
        assert_eq!(
            got[got.len() - 2..],
            [first, second],
            "{mode}: in order once due: {got:?}"
        );
        assert_eq!(pending(&db).await, 0);
        let ago: f64 = db
            .scalar(
                "SELECT extract(epoch FROM now() - key_swept_at)::float8 FROM outbox_relay_floor",
            )
            .await;
        assert!(ago < 60.0, "{mode}: the pass without the floor was saved");
        // A requeued dead letter below the floor goes out in the next run, not a pass later.
        db.exec(&format!(
            "UPDATE outbox SET published_at = NULL, dead_lettered_at = now() WHERE id = {first};
             UPDATE outbox_relay_floor SET key_sweep_took = interval '10 minutes',
                                           key_swept_at = now()"
        ))
        .await;
        run(&db, &["requeue", &first.to_string()], 0);
        once();
        assert_eq!(
            ids().last(),
            Some(&first),
            "{mode}: the requeued event went out"
        );
    }
}

/// Beside an ordered backlog, an unordered claim that took nothing (it skips the ordered types'
/// rows one by one) is not repeated at every step: it rests 20 times as long as it took, or until
/// the ordered claim comes back short. Read from the relay's statement log; the unordered event
/// still goes out in the same run.
#[tokio::test]
async fn beside_an_ordered_backlog_the_unordered_claim_rests_after_taking_nothing() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key)
         SELECT '00000000-0000-0000-0000-000000000001', 'order', 'k' || g, 'e', '{}', 'o' || g
           FROM generate_series(1, 3000) g;
         ANALYZE outbox",
    )
    .await;
    let other = insert(&db, "other", "x", 1, false).await;
    let out = db
        .cmd()
        .args(["relay", "--once", "--sink", "null", "--mode", "tx"])
        .args(["--batch-size", "50", "--pipeline-depth", "1"])
        .env("OUTBOXCTL_LOG", "sqlx::query=debug")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(pending(&db).await, 0, "everything went out, {other} too");
    let log = stderr(&out);
    let unordered = log.matches("summary=\"WITH t AS").count();
    let ordered = log.matches("summary=\"WITH RECURSIVE probe").count();
    assert!(ordered >= 60, "{ordered} ordered claims");
    assert!(
        unordered * 2 <= ordered,
        "{unordered} unordered claims beside {ordered} ordered ones"
    );
}

/// A `relay --once` run whose events are all of ordered types: its unordered claim, which takes
/// nothing, leaves a cursor at its `now()` for the next run (without it such runs had none and
/// each started at the start, walking every dead entry); and once the ordered claim comes back
/// short the run makes the unordered claim alone, not another pass over the keys.
#[tokio::test]
async fn a_run_of_ordered_events_only_saves_an_unordered_cursor_and_walks_the_keys_twice() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    insert(&db, "order", "k", 1, false).await;
    let out = db
        .cmd()
        .args(["relay", "--once", "--sink", "null", "--mode", "tx"])
        .env("OUTBOXCTL_LOG", "sqlx::query=debug")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(pending(&db).await, 0);
    let log = stderr(&out);
    // The pass that claimed, and the one after it that raises the floor: no third.
    assert_eq!(log.matches("summary=\"WITH RECURSIVE probe").count(), 2);
    let recent: bool = db
        .scalar("SELECT available_at > now() - interval '1 minute' FROM outbox_relay_floor")
        .await;
    assert!(recent, "the unordered cursor saved at the run's time");
}

/// Issue 30's starvation case for the ordered walk: a key's only event fails to publish and is
/// scheduled for a retry. The claim took it, so its walk left it out of the least pending id it
/// read, and the run's first pass raises the floor past it; the relay then lowers the floor below
/// it itself (it gave the event back). The next `relay --once` run, once the backoff has passed
/// and with no pass without the floor due for 200 minutes, publishes it (without that, the floor
/// stayed above it and it waited for such a pass).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_event_behind_the_key_floor_goes_out_in_the_next_run() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    let failing = Arc::new(AtomicBool::new(true));
    let f = Arc::clone(&failing);
    let server = TestServer::start(port_retried(), move |r| {
        if r.json()["payload"]["poison"] == Value::Bool(true) && f.load(AtomicOrdering::SeqCst) {
            (500, vec![])
        } else {
            (200, vec![])
        }
    });
    let url = server.url();
    for mode in ["tx", "lease"] {
        db.exec("DELETE FROM outbox; DELETE FROM outbox_relay_floor")
            .await;
        failing.store(true, AtomicOrdering::SeqCst);
        let once = || {
            let relay = ["relay", "--once", "--mode", mode, "--sink", &url];
            run(
                &db,
                &[&relay[..], &["--backoff-base", "1h", "--backoff-max", "1h"]].concat(),
                0,
            )
        };
        // A first run leaves a floor at its event (set here too: it rises only once the
        // transactions running when its pass began have ended, which other tests' may not have);
        // a pass without it is not due for 200 minutes.
        insert(&db, "order", &format!("{mode}-first"), 1, false).await;
        once();
        db.exec(
            "UPDATE outbox_relay_floor SET key_floor = (SELECT max(id) FROM outbox),
                    key_sweep_took = interval '10 minutes', key_swept_at = now()",
        )
        .await;
        // Its key sorts first: a walk's last key always counts toward the least pending id.
        let retried = insert(&db, "order", &format!("{mode}-k0"), 1, true).await;
        for n in 1..=3 {
            insert(&db, "order", &format!("{mode}-k{n}"), 1, false).await;
        }
        once();
        let waits: bool = db
            .scalar(&format!(
                "SELECT attempt_count = 1 AND available_at > now() + interval '30 minutes'
                   FROM outbox WHERE id = {retried} AND published_at IS NULL"
            ))
            .await;
        assert!(
            waits,
            "{mode}: the event failed once and waits for its retry"
        );
        assert_eq!(pending(&db).await, 1, "{mode}: the other keys went out");
        let floor: i64 = db.scalar("SELECT key_floor FROM outbox_relay_floor").await;
        assert!(
            floor < retried,
            "{mode}: the saved floor {floor} is below {retried}"
        );
        // The backoff has passed; a pass without the floor is still not due.
        db.exec(&format!(
            "UPDATE outbox SET available_at = now() WHERE id = {retried}"
        ))
        .await;
        failing.store(false, AtomicOrdering::SeqCst);
        once();
        assert_eq!(pending(&db).await, 0, "{mode}: the retried event went out");
        let delivered: Vec<String> = server
            .accepted()
            .iter()
            .map(|r| r.json()["aggregate_id"].as_str().unwrap().to_owned())
            .collect();
        assert!(
            delivered.contains(&format!("{mode}-k0")),
            "{mode}: {delivered:?}"
        );
    }
}
