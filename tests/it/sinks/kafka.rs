//! The Kafka sink against a real Kafka-protocol broker: the shared Tansu on 127.0.0.1:9092, and for
//! the restart test a Tansu of this test's own on port 18600. Records are read back by assigning
//! every partition of the topic (Tansu does not serve consumer-group subscriptions), up to each
//! partition's high watermark, so a read holds exactly what the broker holds.

use std::collections::{HashMap, HashSet};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::net_delay::NetDelay;
use crate::support::servers::kafka::{read_all, start_broker, start_broker_advertised, Record};
use crate::support::{capture, signal, stderr, stdout, wait_until, TestDb};

const KAFKA: &str = "127.0.0.1:9092";

fn prefix() -> String {
    format!("obx{}", &uuid::Uuid::new_v4().simple().to_string()[..10])
}

/// Seeds `n` events over two aggregate types and `keys` aggregates, with row headers (one of
/// them trying to replace the relay's `id` header).
async fn seed(db: &TestDb, n: i64, keys: i64) {
    sqlx::query(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers, idempotency_key)
         SELECT '00000000-0000-0000-0000-000000000001',
                CASE WHEN g % 2 = 0 THEN 'order' ELSE 'invoice' END, 'a-' || (g % $2::bigint),
                'evt.' || (g % 3), jsonb_build_object('n', g),
                jsonb_build_object('trace', 't-' || g, 'id', 'spoofed'), 'k-' || g
           FROM generate_series(1, $1::bigint) g",
    )
    .bind(n)
    .bind(keys)
    .execute(&db.pool)
    .await
    .expect("seed");
}

#[tokio::test]
async fn every_event_arrives_once_keyed_in_order_with_the_document_and_headers() {
    let db = TestDb::new().await;
    let (n, keys) = (1_000, 10);
    seed(&db, n, keys).await;
    let p = prefix();
    let sink = format!("kafka://{KAFKA}?topic={p}.{{aggregate_type}}");
    let v = db.relay(&sink).args(["--batch-size", "300"]).once_json();
    assert_eq!(v["published"].as_i64(), Some(n), "{v}");

    let topics = vec![format!("{p}.order"), format!("{p}.invoice")];
    let records = read_all(KAFKA, &topics, n as usize);
    let ids: Vec<i64> = records
        .iter()
        .map(|r| r.doc()["id"].as_i64().unwrap())
        .collect();
    let distinct: HashSet<i64> = ids.iter().copied().collect();
    assert_eq!(
        (records.len(), distinct.len()),
        (n as usize, n as usize),
        "every event exactly once"
    );

    // The value is the document byte for byte: the same rows through the file sink, at the same
    // attempt, give the same bytes.
    // (And no claim floor past them, as the relay that sent them first had saved.)
    db.exec(
        "UPDATE outbox SET published_at = NULL, attempt_count = 0; DELETE FROM outbox_relay_floor",
    )
    .await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("out.jsonl");
    db.relay(format!("file:{}", file.display())).once(0);
    let docs: HashMap<i64, String> = std::fs::read_to_string(&file)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["id"].as_i64().unwrap(), l.to_owned())
        })
        .collect();

    let mut partitions: HashMap<Vec<u8>, HashSet<(String, i32)>> = HashMap::new();
    let mut by_partition: HashMap<(String, i32), Vec<&Record>> = HashMap::new();
    for r in &records {
        let doc = r.doc();
        let id = doc["id"].as_i64().unwrap();
        assert_eq!(
            std::str::from_utf8(&r.value).unwrap(),
            docs[&id],
            "value == document"
        );
        assert_eq!(
            r.topic,
            format!("{p}.{}", doc["aggregate_type"].as_str().unwrap()),
            "topic from the template"
        );
        let key = r.key.clone().expect("a key");
        assert_eq!(key, doc["aggregate_id"].as_str().unwrap().as_bytes());
        assert_eq!(r.header("id"), vec![id.to_string()], "the relay's id only");
        assert_eq!(r.header("idempotency_key"), vec![format!("k-{id}")]);
        assert_eq!(
            r.header("event_type"),
            vec![doc["type"].as_str().unwrap().to_owned()]
        );
        assert_eq!(r.header("trace"), vec![format!("t-{id}")], "row headers");
        partitions
            .entry(key)
            .or_default()
            .insert((r.topic.clone(), r.partition));
        by_partition
            .entry((r.topic.clone(), r.partition))
            .or_default()
            .push(r);
    }
    for (key, parts) in &partitions {
        assert_eq!(parts.len(), 1, "key {key:?} on one partition: {parts:?}");
    }
    // One relay, idempotent producer: per key, the order of offsets is the order of ids.
    assert_ids_in_offset_order(by_partition);
}

/// Per partition, in offset order, each key's ids rise; and the keys use more than one partition.
fn assert_ids_in_offset_order(mut by_partition: HashMap<(String, i32), Vec<&Record>>) {
    for recs in by_partition.values_mut() {
        recs.sort_by_key(|r| r.offset);
        let mut last: HashMap<&[u8], i64> = HashMap::new();
        for r in recs.iter() {
            let id = r.doc()["id"].as_i64().unwrap();
            let k = r.key.as_deref().unwrap();
            if let Some(prev) = last.insert(k, id) {
                assert!(prev < id, "key {k:?}: id {id} after {prev}");
            }
        }
    }
    assert!(
        by_partition.len() > 1,
        "keys spread over partitions: {:?}",
        by_partition.keys()
    );
}

/// Log mode to Kafka: pages are read and handed to the producer while the page before them is
/// delivered (`--pipeline-depth` 2, Kafka's default), yet every event arrives once and each key's
/// events in id order (one producer transaction: the log's (xid, id) order is id order).
#[tokio::test]
async fn log_mode_keeps_each_keys_order_with_pages_in_flight() {
    let db = TestDb::new().await;
    crate::support::run(&db, &["log", "enable"], 0);
    let (n, keys) = (3_000, 10);
    seed(&db, n, keys).await;
    let p = prefix();
    let sink = format!("kafka://{KAFKA}?topic={p}.{{aggregate_type}}");
    let v = db.relay(&sink).args(["--batch-size", "100"]).once_json();
    assert_eq!(
        (v["published"].as_i64(), v["mode"].as_str()),
        (Some(n), Some("log")),
        "{v}"
    );
    let topics = vec![format!("{p}.order"), format!("{p}.invoice")];
    let records = read_all(KAFKA, &topics, n as usize);
    let distinct: HashSet<i64> = records
        .iter()
        .map(|r| r.doc()["id"].as_i64().unwrap())
        .collect();
    assert_eq!(
        (records.len(), distinct.len()),
        (n as usize, n as usize),
        "each once"
    );
    let mut by_partition: HashMap<(String, i32), Vec<&Record>> = HashMap::new();
    for r in &records {
        by_partition
            .entry((r.topic.clone(), r.partition))
            .or_default()
            .push(r);
    }
    assert_ids_in_offset_order(by_partition);
    let status = crate::support::run_json(&db, &["log", "status", "--json"]);
    assert_eq!(status["behind"], 0, "{status}");
}

/// A new idempotent producer sends at once: it cannot send before it has a producer id, which
/// librdkafka would ask for only at its 500 ms retry timer (no broker is up when the producer is
/// created); the sink's warm-up makes a metadata request, whose answer asks for it sooner. So a
/// `relay --once` of one event, from process start to exit, takes less than that timer. The
/// fastest of five runs is taken (each a new process and producer), so a loaded machine's
/// stall in one run does not decide; without the warm-up every run takes more than 500 ms.
#[tokio::test]
async fn a_new_producer_sends_without_waiting_for_librdkafkas_producer_id_timer() {
    let db = TestDb::new().await;
    let p = prefix();
    let sink = format!("kafka://{KAFKA}?topic={p}.{{aggregate_type}}");
    let one = async |n: i64| {
        db.exec(&format!(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
             VALUES ('00000000-0000-0000-0000-000000000001', 'invoice', 'a-1', 'e', '{{}}', 'k-{n}')"
        ))
        .await;
    };
    // The topic exists before the timed runs, as in production.
    one(0).await;
    assert_eq!(db.relay(&sink).once_json()["published"], 1);
    let mut walls = Vec::new();
    for n in 1..=5 {
        one(n).await;
        let start = Instant::now();
        let v = db.relay(&sink).once_json();
        walls.push(start.elapsed());
        assert_eq!(v["published"], 1, "{v}");
    }
    let fastest = walls.iter().min().copied().unwrap_or_default();
    assert!(
        fastest < Duration::from_millis(450),
        "the fastest relay --once of one event took {fastest:?} (all: {walls:?})"
    );
    let records = read_all(KAFKA, &[format!("{p}.invoice")], 6);
    assert_eq!(records.len(), 6);
}

/// Over the producer's own limit (`message.max.bytes`): Tansu 0.6.0 enforces no broker-side
/// limit (no flag, and a topic's `max.message.bytes` is stored but not applied; README, Kafka), so
/// the broker's refusal cannot be provoked here.
#[tokio::test]
async fn a_message_over_the_size_limit_is_dead_lettered_at_once_and_the_rest_go_through() {
    let db = TestDb::with_backlog(5).await;
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         VALUES ('00000000-0000-0000-0000-000000000001', 'order', 'big', 'order.placed',
                 jsonb_build_object('blob', repeat('x', 40000)), 'k-big')",
    )
    .await;
    let p = prefix();
    let v = db
        .relay(format!("kafka://{KAFKA}?topic={p}"))
        .args(["--kafka-property", "message.max.bytes=20000"])
        .once_json();
    assert_eq!(
        (v["published"].as_i64(), v["dead_lettered"].as_i64()),
        (Some(5), Some(1)),
        "{v}"
    );
    let (attempts, error): (i32, String) = db
        .row("SELECT attempt_count, last_error FROM outbox WHERE dead_lettered_at IS NOT NULL")
        .await;
    assert_eq!(attempts, 1, "dead-lettered at its first attempt");
    assert!(error.to_lowercase().contains("too large"), "{error}");
    assert_eq!(read_all(KAFKA, &[p], 5).len(), 5);
}

#[tokio::test]
async fn a_bad_topic_template_or_an_unreachable_broker_is_one_clear_line() {
    let db = TestDb::with_backlog(3).await;
    for (sink, needle) in [
        (
            format!("kafka://{KAFKA}?topic=outbox.{{evnt_type}}"),
            "unknown placeholder `{evnt_type}`",
        ),
        (
            format!("kafka://{KAFKA}?topic=out box.{{event_type}}"),
            "a Kafka topic name is letters",
        ),
        ("kafka://127.0.0.1".to_owned(), "is not HOST:PORT"),
        (
            "kafka://relay:pw@127.0.0.1:9092".to_owned(),
            "--kafka-property sasl.username",
        ),
    ] {
        let err = stderr(&db.relay(&sink).once(2));
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(err.contains(needle), "{sink}: {err}");
        assert!(!err.contains(":pw@"), "{err}");
    }
    // Nothing listens: the batch times out within the publish timeout, an outage (exit 5), rows
    // untouched.
    let closed = crate::support::servers::ClosedPort::new();
    let started = Instant::now();
    let out = db
        .relay(format!("kafka://127.0.0.1:{}?topic=t", closed.port))
        .args(["--publish-timeout", "3s"])
        .once(5);
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "{:?}",
        started.elapsed()
    );
    let error_lines: Vec<String> = stderr(&out)
        .lines()
        .filter(|l| l.starts_with("error: "))
        .map(str::to_owned)
        .collect();
    assert_eq!(error_lines.len(), 1, "{}", stderr(&out));
    assert!(error_lines[0].contains("Kafka"), "{}", error_lines[0]);
    let untouched = db.count("attempt_count = 0 AND published_at IS NULL").await;
    assert_eq!(untouched, 3);
}

#[tokio::test]
async fn a_sasl_password_in_a_kafka_property_is_never_shown() {
    let db = TestDb::with_backlog(2).await;
    let canary = format!(
        "PwCanary{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    );
    let props = [
        "security.protocol=SASL_PLAINTEXT".to_owned(),
        "sasl.mechanism=PLAIN".to_owned(),
        "sasl.username=relay".to_owned(),
        format!("sasl.password={canary}"),
    ];
    let p = prefix();
    for verbose in [None, Some("-vv")] {
        // On the command line, and through the environment variable (one per line).
        for via_env in [false, true] {
            let mut cmd = db.cmd();
            cmd.args(["relay", "--once", "--publish-timeout", "3s", "--sink"])
                .arg(format!("kafka://{KAFKA}?topic={p}"));
            if via_env {
                cmd.env("OUTBOXCTL_KAFKA_PROPERTY", props.join("\n"));
            } else {
                for prop in &props {
                    cmd.args(["--kafka-property", prop]);
                }
            }
            if let Some(v) = verbose {
                cmd.arg(v);
            }
            let out = cmd.output().unwrap();
            assert!(matches!(out.status.code(), Some(0 | 5)), "{}", stderr(&out));
            for text in [stdout(&out), stderr(&out)] {
                assert!(!text.contains(&canary), "{verbose:?} {via_env}: {text}");
            }
            db.exec("UPDATE outbox SET available_at = now(), published_at = NULL")
                .await;
        }
    }
    let errors: Vec<Option<String>> = sqlx::query_scalar("SELECT last_error FROM outbox")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    for e in errors.iter().flatten() {
        assert!(!e.contains(&canary), "{e}");
    }
    let help = db
        .cmd()
        .args(["relay", "--help"])
        .env(
            "OUTBOXCTL_KAFKA_PROPERTY",
            format!("sasl.password={canary}"),
        )
        .output()
        .unwrap();
    assert!(help.status.success());
    assert!(stdout(&help).contains("OUTBOXCTL_KAFKA_PROPERTY"));
    assert!(!stdout(&help).contains(&canary));
    // A value librdkafka refuses is not echoed either.
    let out = db
        .relay(format!("kafka://{KAFKA}"))
        .args(["--kafka-property", &format!("acks={canary}")])
        .once(2);
    assert!(stderr(&out).contains("acks"), "{}", stderr(&out));
    assert!(!stderr(&out).contains(&canary), "{}", stderr(&out));
}

/// A broker far away: a Tansu of this test's own behind [`NetDelay`] (a test double of the
/// network, not of the broker), every reply 400 ms late, with a `--publish-timeout` of 2 s. A new
/// producer's handshake (connection, API versions, metadata, the idempotent producer id) takes
/// longer than one publish timeout over such a link, so the first batch times out whole. Replacing
/// the producer then (as after a broker restart) started the handshake again each time, and nothing
/// was ever delivered (seen: 0 of 2000 in 15 s, three new producers). The producer is kept while it
/// may still be connecting, and the drain completes with no attempt counted against the events.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_behind_a_slow_link_is_reached_although_the_handshake_outlasts_a_publish() {
    const EVENTS: i64 = 600;
    let kport = crate::support::port(18610);
    let proxy = NetDelay::start(&format!("127.0.0.1:{kport}"), Duration::from_millis(400)).await;
    let _broker = start_broker_advertised(kport, proxy.port).await;
    let db = TestDb::with_backlog(EVENTS).await;
    let topic = prefix();
    let mut relay = Relays(vec![db
        .cmd()
        .args(["relay", "--sink"])
        .arg(format!("kafka://127.0.0.1:{}?topic={topic}", proxy.port))
        .args([
            "--batch-size",
            "200",
            "--publish-timeout",
            "2s",
            "--lease",
            "10s",
        ])
        .args(["--poll-interval", "100ms", "-v"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn relay")]);
    let log = capture(relay.0[0].stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(40);
    while published(&db).await < EVENTS {
        assert!(
            Instant::now() < deadline,
            "{} of {EVENTS} published through the slow link\n{}",
            published(&db).await,
            log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (attempts, dead) = crate::support::fixtures::max_attempts_and_dead(&db).await;
    assert_eq!(
        (attempts, dead),
        (1, 0),
        "timeouts of a connecting producer count no attempt"
    );
    // Read back through the proxy, off the runtime's threads (the proxy runs on them).
    let bootstrap = format!("127.0.0.1:{}", proxy.port);
    let records =
        tokio::task::spawn_blocking(move || read_all(&bootstrap, &[topic], EVENTS as usize))
            .await
            .unwrap();
    let ids: HashSet<i64> = records
        .iter()
        .map(|r| r.doc()["id"].as_i64().unwrap())
        .collect();
    assert_eq!(ids.len(), EVENTS as usize, "every event on the broker");
}

/// The broker stopped (killed) and started again during a drain. Tansu keeps its log in memory,
/// so what the first broker held is read before it is killed: the relay is frozen (SIGSTOP)
/// first, the first broker read to its high watermarks, killed, the relay thawed into the
/// outage, and the broker started again. Nothing is lost; duplicates are bounded by what was in
/// flight (a batch); the relay recovers by itself.
#[tokio::test]
async fn a_broker_restart_mid_drain_loses_nothing_and_the_relay_recovers() {
    let kport: u16 = crate::support::port(18600);
    const EVENTS: i64 = 20_000;
    const BATCH: i64 = 200;
    let bootstrap = format!("127.0.0.1:{kport}");
    let mut broker = start_broker(kport).await;
    let db = TestDb::with_backlog(EVENTS).await;
    let p = prefix();
    let topics = vec![p.clone()];
    let mut relay = db
        .cmd()
        .args(["relay", "--sink", &format!("kafka://{bootstrap}?topic={p}")])
        .args([
            "--batch-size",
            &BATCH.to_string(),
            "--publish-timeout",
            "3s",
        ])
        .args(["--lease", "10s", "--poll-interval", "200ms", "-v"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    struct Reap<'a>(&'a mut Child);
    impl Drop for Reap<'_> {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let log = capture(relay.stderr.take().unwrap());
    let relay = Reap(&mut relay);
    let published = || async { db.count("published_at IS NOT NULL").await };
    wait_until(Duration::from_secs(60), "drain progress", || async {
        published().await >= 2_000
    })
    .await;
    signal(relay.0, "STOP");
    let before_stop = published().await;
    assert!(before_stop < EVENTS, "the drain finished before the stop");
    let first = read_all(&bootstrap, &topics, before_stop as usize);
    drop(broker);
    signal(relay.0, "CONT");
    wait_until(
        Duration::from_secs(30),
        "the relay to see the outage",
        || async {
            let l = log.lock().unwrap();
            l.contains("Kafka connection problem") || l.contains("sink unavailable")
        },
    )
    .await;
    broker = start_broker(kport).await;
    let deadline = Instant::now() + Duration::from_secs(120);
    while published().await < EVENTS {
        assert!(
            Instant::now() < deadline,
            "not everything published after the restart: {}\n{}",
            published().await,
            log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let after = (EVENTS as usize).saturating_sub(first.len());
    let second = read_all(&bootstrap, &topics, after);
    drop(broker);

    let mut seen: HashMap<i64, usize> = HashMap::new();
    for r in first.iter().chain(&second) {
        *seen.entry(r.doc()["id"].as_i64().unwrap()).or_default() += 1;
    }
    let lost = (1..=EVENTS).filter(|id| !seen.contains_key(id)).count();
    let duplicates: usize = seen.values().map(|c| c - 1).sum();
    assert_eq!(lost, 0, "{} first, {} second", first.len(), second.len());
    assert!(
        duplicates as i64 <= 2 * BATCH,
        "{duplicates} duplicates (first broker held {}, {} published before the stop)",
        first.len(),
        before_stop
    );
    let dead = db.count("dead_lettered_at IS NOT NULL").await;
    assert_eq!(dead, 0, "{}", log.lock().unwrap());
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

/// A relay daemon draining to the shared broker with fast retries (so a failed event comes back
/// within the test's deadlines).
fn spawn_relay(db: &TestDb, sink: &str, batch: i64, env: &[(&str, &str)]) -> Child {
    let mut cmd = db.cmd();
    cmd.args(["relay", "--mode", "lease", "--sink", sink])
        .args(["--batch-size", &batch.to_string()])
        .args(["--lease", "2s", "--publish-timeout", "1s"])
        .args(["--backoff-base", "10ms", "--backoff-max", "50ms"])
        .args(["--max-attempts", "1000", "--poll-interval", "100ms", "-v"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.spawn().expect("spawn relay")
}

async fn published(db: &TestDb) -> i64 {
    db.count("published_at IS NOT NULL").await
}

/// Ordered delivery per key (`outboxctl ordering enable`) across relays: four relay processes
/// drain 200 keys x 20 events to Kafka, one of them killed (SIGKILL) a quarter of the way in, so
/// its claimed rows come back only when their lease expires. Read back by assigning every
/// partition: each key's records are on the key's one partition, its first deliveries in id
/// order (offset order is arrival order), and nothing is lost. Without `ordering enable` this
/// fails (the killed relay's rows arrive after later events of their keys; seen by hand).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_key_order_holds_across_relays_with_ordering_on() {
    const KEYS: i64 = 200;
    const EVENTS: i64 = 4_000;
    let db = TestDb::new().await;
    crate::support::run(&db, &["ordering", "enable"], 0);
    seed(&db, EVENTS, KEYS).await;
    let p = prefix();
    let sink = format!("kafka://{KAFKA}?topic={p}");
    let mut relays = Relays((0..4).map(|_| spawn_relay(&db, &sink, 50, &[])).collect());
    for r in &mut relays.0 {
        // Not read: the pipe is drained so a chatty relay never blocks on it.
        let _ = capture(r.stderr.take().unwrap());
    }
    wait_until(Duration::from_secs(60), "a quarter published", || async {
        published(&db).await >= EVENTS / 4
    })
    .await;
    signal(&relays.0[0], "KILL");
    let _ = relays.0[0].wait();
    wait_until(
        Duration::from_secs(120),
        "every event published",
        || async { published(&db).await == EVENTS },
    )
    .await;
    drop(relays);

    let records = read_all(KAFKA, std::slice::from_ref(&p), EVENTS as usize);
    let mut by_partition: HashMap<i32, Vec<&Record>> = HashMap::new();
    for r in &records {
        by_partition.entry(r.partition).or_default().push(r);
    }
    let mut partition_of: HashMap<Vec<u8>, HashSet<i32>> = HashMap::new();
    let mut firsts: HashMap<Vec<u8>, Vec<i64>> = HashMap::new();
    let mut seen = HashSet::new();
    for (part, recs) in &mut by_partition {
        recs.sort_by_key(|r| r.offset);
        for r in recs.iter() {
            let key = r.key.clone().expect("a key");
            let id = r.doc()["id"].as_i64().unwrap();
            partition_of.entry(key.clone()).or_default().insert(*part);
            if seen.insert(id) {
                firsts.entry(key).or_default().push(id);
            }
        }
    }
    assert_eq!(seen.len() as i64, EVENTS, "every event delivered");
    assert_eq!(firsts.len() as i64, KEYS);
    for (key, parts) in &partition_of {
        assert_eq!(parts.len(), 1, "key {key:?} on one partition: {parts:?}");
    }
    let mut out_of_order = Vec::new();
    for (key, ids) in &firsts {
        if ids.windows(2).any(|w| w[0] > w[1]) {
            out_of_order.push(String::from_utf8_lossy(key).into_owned());
        }
    }
    assert!(
        out_of_order.is_empty(),
        "{} of {KEYS} keys' first deliveries out of id order, e.g. {:?}",
        out_of_order.len(),
        &out_of_order[..out_of_order.len().min(5)]
    );
    assert_eq!(db.count("dead_lettered_at IS NOT NULL").await, 0);
}

/// A fatal producer error mid-drain. No broker here can produce a real fatal idempotence error
/// on demand, so it is fabricated with librdkafka's own `rd_kafka_test_fatal_error`, through the
/// hidden test-only hook `OUTBOXCTL_TEST_KAFKA_FATAL_ERROR=N` (in the Nth publish, halfway
/// through the batch): the fatal producer refuses the rest of the batch and purges what it had
/// queued. The relay replaces the producer and delivers everything: every event is on the
/// broker, none was marked published without being acked (such a row would never be sent again
/// and would be missing from the broker), and the failed ones were retried.
#[tokio::test]
async fn a_fatal_producer_error_rebuilds_the_producer_and_loses_nothing() {
    const EVENTS: i64 = 2_000;
    const BATCH: i64 = 200;
    let db = TestDb::with_backlog(EVENTS).await;
    let p = prefix();
    let sink = format!("kafka://{KAFKA}?topic={p}");
    let mut relays = Relays(vec![spawn_relay(
        &db,
        &sink,
        BATCH,
        &[("OUTBOXCTL_TEST_KAFKA_FATAL_ERROR", "3")],
    )]);
    let log = capture(relays.0[0].stderr.take().unwrap());
    let deadline = Instant::now() + Duration::from_secs(60);
    while published(&db).await < EVENTS {
        assert!(
            Instant::now() < deadline,
            "not everything published after the fatal error: {}\n{}",
            published(&db).await,
            log.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(relays);
    let log = log.lock().unwrap().clone();
    assert!(
        log.contains("raising a fabricated fatal producer error"),
        "{log}"
    );
    assert!(log.contains("a new Kafka producer takes over"), "{log}");

    let records = read_all(KAFKA, &[p], EVENTS as usize);
    let mut seen: HashMap<i64, usize> = HashMap::new();
    for r in &records {
        *seen.entry(r.doc()["id"].as_i64().unwrap()).or_default() += 1;
    }
    let lost: Vec<i64> = (1..=EVENTS).filter(|id| !seen.contains_key(id)).collect();
    assert!(
        lost.is_empty(),
        "{} published in the database but not on the broker, e.g. {:?}",
        lost.len(),
        &lost[..lost.len().min(5)]
    );
    let duplicates: usize = seen.values().map(|c| c - 1).sum();
    assert!(duplicates as i64 <= BATCH, "{duplicates} duplicates");
    let retried = db.count("attempt_count > 1").await;
    assert!(
        retried >= BATCH / 2,
        "the fatal batch's unsent half was retried: {retried} rows with a second attempt\n{log}"
    );
    let dead = db.count("dead_lettered_at IS NOT NULL").await;
    assert_eq!(dead, 0, "{log}");
}
