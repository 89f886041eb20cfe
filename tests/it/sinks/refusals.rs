//! Broker refusals (issue 32): a delivered event is never sent again or dead-lettered, and a
//! misconfigured, full or refusing sink leaves every row's attempts untouched and opens the
//! circuit. Against the real brokers: our own redis-server and nats-server where a limit or a
//! login must be set (ports 18800-18809, shifted by `OUTBOXCTL_TEST_PORT_OFFSET`), uniquely named
//! queues and topics on the shared RabbitMQ and Tansu, and an HTTP server of the test's own.

use std::process::{Child, Output};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support::servers::ChildServer;
use crate::support::servers::TestServer;
use crate::support::{port, signal, spawn_capturing, stderr, wait_until, TestDb};

/// Rows that are neither published nor dead and carry no trace of a publish: no attempt
/// counted, no error, no lease.
async fn untouched(db: &TestDb) -> i64 {
    db.scalar(
        "SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL
            AND attempt_count = 0 AND last_error IS NULL AND locked_until IS NULL",
    )
    .await
}

/// Rows with an attempt counted that were not published (a charge), or dead-lettered.
async fn charged(db: &TestDb) -> i64 {
    db.scalar(
        "SELECT count(*) FROM outbox
          WHERE (published_at IS NULL AND attempt_count > 0 AND locked_until IS NULL)
             OR dead_lettered_at IS NOT NULL",
    )
    .await
}

async fn published(db: &TestDb) -> i64 {
    db.scalar("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
        .await
}

/// Waits until every pending row is due again (a deferred or retried one has its
/// `available_at` pushed back).
async fn all_due(db: &TestDb) {
    wait_until(
        Duration::from_secs(60),
        "the pending rows due again",
        || async {
            db.scalar::<i64>(
            "SELECT count(*) FROM outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL
                AND available_at > now()",
        )
        .await
            == 0
        },
    )
    .await;
}

/// `relay --once --json` to `sink` with a short backoff schedule and three attempts: the old
/// behaviour dead-letters within three runs.
fn once(db: &TestDb, sink: &str, extra: &[&str]) -> Output {
    db.cmd()
        .args(["relay", "--once", "--json", "--sink", sink])
        .args(["--max-attempts", "3", "--backoff-base", "100ms"])
        .args(["--backoff-max", "200ms"])
        .args(extra)
        .output()
        .unwrap()
}

fn summary(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The run's final error line (`error: ...`).
fn error_line(out: &Output) -> String {
    stderr(out)
        .lines()
        .rev()
        .find(|l| l.starts_with("error:"))
        .unwrap_or_default()
        .to_owned()
}

/// A relay daemon to `sink` with a per-row schedule far shorter than the waits below (three
/// attempts of at most 200 ms), logging its probes (`-vv`).
fn daemon(db: &TestDb, sink: &str, batch: &str) -> (Child, Arc<Mutex<String>>) {
    spawn_capturing(
        db,
        &[
            "relay",
            "--sink",
            sink,
            "-vv",
            "--batch-size",
            batch,
            "--max-attempts",
            "3",
            "--backoff-base",
            "50ms",
            "--backoff-max",
            "200ms",
            "--poll-interval",
            "200ms",
        ],
    )
}

/// The circuit's WARN line, once it is there, after `probes` failed probes.
async fn circuit_opened(log: &Mutex<String>, probes: usize) -> String {
    wait_until(Duration::from_secs(60), "the outage WARN", || async {
        log.lock().unwrap().contains("sink unavailable")
    })
    .await;
    wait_until(
        Duration::from_secs(60),
        &format!("{probes} probes of the refusing sink"),
        || async { log.lock().unwrap().matches("probe failed").count() >= probes },
    )
    .await;
    log.lock()
        .unwrap()
        .lines()
        .find(|l| l.contains("sink unavailable"))
        .unwrap()
        .to_owned()
}

/// After the sink is fixed: every row published at its first counted attempt, nothing dead, and
/// the circuit closed.
async fn drained_untouched(db: &TestDb, log: &Mutex<String>, n: i64) {
    wait_until(
        Duration::from_secs(60),
        "all published after the fix",
        || async { published(db).await == n },
    )
    .await;
    let (dead, attempts): (i64, i32) = db
        .row(
            "SELECT count(*) FILTER (WHERE dead_lettered_at IS NOT NULL), max(attempt_count)
               FROM outbox",
        )
        .await;
    assert_eq!((dead, attempts), (0, 1), "the refusals charged nothing");
    wait_until(Duration::from_secs(20), "the recovery INFO", || async {
        log.lock().unwrap().contains("sink available again")
    })
    .await;
}

fn redis_conn(port: u16, password: Option<&str>) -> redis::Connection {
    let auth = password.map(|p| format!(":{p}@")).unwrap_or_default();
    redis::Client::open(format!("redis://{auth}127.0.0.1:{port}/0"))
        .unwrap()
        .get_connection()
        .expect("redis")
}

/// Item 1: with `stream=…:{aggregate_id}` and one key holding a string, Redis stores the other
/// events' XADDs of the pipeline. They are published once, never sent again; the one refused is
/// that event's retry while others went through, and alone in its batch later it looks like the
/// sink's configuration (an outage: no attempt counted). Nothing is dead-lettered.
#[tokio::test]
async fn redis_a_key_of_the_wrong_type_fails_its_event_alone_and_stored_events_are_not_sent_again()
{
    let db = TestDb::with_backlog(5).await;
    let prefix = format!("br{}", uuid::Uuid::new_v4().simple());
    let mut r = redis_conn(6379, None);
    let _: () = redis::cmd("SET")
        .arg(format!("{prefix}:o-3"))
        .arg("a string")
        .query(&mut r)
        .unwrap();
    let sink = format!("redis://127.0.0.1:6379/0?stream={prefix}:{{aggregate_id}}");
    let lengths = |r: &mut redis::Connection| -> Vec<u64> {
        [1, 2, 4, 5]
            .iter()
            .map(|i| {
                redis::cmd("XLEN")
                    .arg(format!("{prefix}:o-{i}"))
                    .query(r)
                    .unwrap()
            })
            .collect()
    };

    let out = once(&db, &sink, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v = summary(&out);
    assert_eq!(
        (&v["published"], &v["retried"]),
        (&4.into(), &1.into()),
        "{v}"
    );
    assert_eq!(lengths(&mut r), vec![1; 4], "each stored once");
    let (attempts, err): (i32, String) = db
        .row("SELECT attempt_count, last_error FROM outbox WHERE aggregate_id = 'o-3'")
        .await;
    assert_eq!(attempts, 1);
    assert!(err.starts_with("Redis: WRONGTYPE"), "{err}");

    for run in 2..=4 {
        all_due(&db).await;
        let out = once(&db, &sink, &[]);
        assert_eq!(out.status.code(), Some(5), "run {run}: {}", stderr(&out));
        assert!(error_line(&out).contains("WRONGTYPE"), "{}", stderr(&out));
    }
    assert_eq!(lengths(&mut r), vec![1; 4], "never sent again");
    let (published, dead, attempts): (i64, i64, i32) = db
        .row(
            "SELECT count(*) FILTER (WHERE published_at IS NOT NULL),
                    count(*) FILTER (WHERE dead_lettered_at IS NOT NULL),
                    (SELECT attempt_count FROM outbox WHERE aggregate_id = 'o-3')
               FROM outbox",
        )
        .await;
    assert_eq!((published, dead, attempts), (4, 0, 1));
    let keys: Vec<String> = (1..=5).map(|i| format!("{prefix}:o-{i}")).collect();
    let _: () = redis::cmd("DEL").arg(&keys).query(&mut r).unwrap();
}

/// Item 2: a full Redis (maxmemory, noeviction: every XADD answered `OOM`) is an outage: the
/// circuit opens with one WARN of bounded size naming the count and the first error (it was a
/// 45 KB line for 500 events), no row is charged, and everything goes once memory is raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_out_of_memory_opens_the_circuit_with_one_short_warn_and_charges_nothing() {
    let port = port(18800);
    let _server = ChildServer::redis_with(port, &["--maxmemory-policy", "noeviction"]);
    let mut r = redis_conn(port, None);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("1")
        .query(&mut r)
        .unwrap();
    let db = TestDb::with_backlog(500).await;
    let sink = format!("redis://127.0.0.1:{port}/0?stream=oom");
    let (mut child, log) = daemon(&db, &sink, "500");
    let warn = circuit_opened(&log, 6).await;
    assert!(warn.contains("OOM"), "{warn}");
    assert!(warn.contains("events=500"), "{warn}");
    assert!(warn.len() < 1000, "{} bytes: {warn}", warn.len());
    assert_eq!(charged(&db).await, 0);
    let len: u64 = redis::cmd("XLEN").arg("oom").query(&mut r).unwrap();
    assert_eq!(len, 0);
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxmemory")
        .arg("0")
        .query(&mut r)
        .unwrap();
    drained_untouched(&db, &log, 500).await;
    let len: u64 = redis::cmd("XLEN").arg("oom").query(&mut r).unwrap();
    assert_eq!(len, 500);
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());
}

/// Item 2: a Redis that wants a password (`NOAUTH`) or is a read-only replica (`READONLY`) takes
/// no write from anyone: `relay --once` gives the rows back untouched and exits 5, naming it.
#[tokio::test]
async fn redis_noauth_and_readonly_are_outages_that_charge_nothing() {
    let port = port(18801);
    let _server = ChildServer::redis_with(port, &["--requirepass", "sesame"]);
    let db = TestDb::with_backlog(5).await;
    let out = once(&db, &format!("redis://127.0.0.1:{port}/0?stream=s"), &[]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(error_line(&out).contains("NOAUTH"), "{}", stderr(&out));
    assert_eq!(untouched(&db).await, 5);

    let mut r = redis_conn(port, Some("sesame"));
    // A replica of a master that is not there: it refuses writes.
    let _: () = redis::cmd("REPLICAOF")
        .arg("127.0.0.1")
        .arg(crate::support::port(18802))
        .query(&mut r)
        .unwrap();
    let out = once(
        &db,
        &format!("redis://:sesame@127.0.0.1:{port}/0?stream=s"),
        &[],
    );
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(error_line(&out).contains("READONLY"), "{}", stderr(&out));
    assert_eq!(untouched(&db).await, 5);
}

async fn jetstream(port: u16, auth: Option<(&str, &str)>) -> async_nats::jetstream::Context {
    let opts = match auth {
        Some((u, p)) => async_nats::ConnectOptions::with_user_and_password(u.into(), p.into()),
        None => async_nats::ConnectOptions::new(),
    };
    async_nats::jetstream::new(
        opts.connect(format!("127.0.0.1:{port}"))
            .await
            .expect("our nats-server"),
    )
}

/// Item 3: a stream at its `max_msgs` with discard=new refuses further messages (JetStream
/// 10077). Beside messages it took, the refused events are deferred with no attempt counted;
/// a batch it refuses whole is an outage (the circuit). Raising the limit drains everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_a_full_stream_defers_then_opens_the_circuit_and_charges_nothing() {
    use async_nats::jetstream::stream;
    let port = port(18803);
    let _server = ChildServer::nats_with(port, "");
    let js = jetstream(port, None).await;
    let config = stream::Config {
        name: "FULL".into(),
        subjects: vec!["full.>".into()],
        max_messages: 3,
        discard: stream::DiscardPolicy::New,
        ..Default::default()
    };
    js.create_stream(config.clone()).await.unwrap();
    let db = TestDb::with_backlog(10).await;
    let sink = format!("nats://127.0.0.1:{port}?subject=full.{{aggregate_id}}");
    let (mut child, log) = daemon(&db, &sink, "10");
    let warn = circuit_opened(&log, 6).await;
    assert!(warn.contains("10077"), "{warn}");
    assert!(
        log.lock().unwrap().contains("deferred, no attempt counted"),
        "the first batch's refused events were deferred: {}",
        log.lock().unwrap()
    );
    assert_eq!(published(&db).await, 3);
    assert_eq!(charged(&db).await, 0);
    js.update_stream(stream::Config {
        max_messages: 100,
        ..config
    })
    .await
    .unwrap();
    drained_untouched(&db, &log, 10).await;
    let mut s = js.get_stream("FULL").await.unwrap();
    assert_eq!(s.info().await.unwrap().state.messages, 10);
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());
}

/// Item 6: the server drops a publish the user may not make (`Permissions Violation for Publish
/// to "…"`) and one from a login it refused (`authorization violation`) without a reply, so the
/// ack only times out. The error names the cause, and no attempt is counted: beside a permitted
/// subject the refused ones are deferred, alone they are an outage (exit 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_permission_and_authorization_failures_name_the_cause_and_charge_nothing() {
    let port = port(18804);
    let _server = ChildServer::nats_with(
        port,
        "authorization {\n users = [\n  { user: admin, password: admin }\n  \
         { user: relay, password: pw, permissions: { publish: { allow: [\"p.o-1\"] }, \
         subscribe: { allow: [\"_INBOX.>\"] } } }\n ]\n}\n",
    );
    jetstream(port, Some(("admin", "admin")))
        .await
        .create_stream(async_nats::jetstream::stream::Config {
            name: "P".into(),
            subjects: vec!["p.>".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    let db = TestDb::with_backlog(3).await;
    let sink = format!("nats://relay:pw@127.0.0.1:{port}?subject=p.{{aggregate_id}}");
    let timeouts = ["--publish-timeout", "2s", "--lease", "10s"];
    let out = once(&db, &sink, &timeouts);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let rows: Vec<(i32, String)> = sqlx::query_as(
        "SELECT attempt_count, last_error FROM outbox WHERE published_at IS NULL ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 2);
    for (i, (attempts, err)) in rows.iter().enumerate() {
        assert_eq!(*attempts, 0, "{err}");
        let subject = format!("\"p.o-{}\"", i + 2);
        assert!(
            err.contains("Permissions Violation for Publish to") && err.contains(&subject),
            "{err}"
        );
    }
    assert_eq!(summary(&out)["deferred"], 2, "{}", stderr(&out));
    all_due(&db).await;
    let out = once(&db, &sink, &timeouts);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        error_line(&out).contains("Permissions Violation"),
        "{}",
        stderr(&out)
    );
    assert_eq!(charged(&db).await, 0);

    let wrong = format!("nats://relay:wrong@127.0.0.1:{port}?subject=p.{{aggregate_id}}");
    let out = once(&db, &wrong, &timeouts);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        error_line(&out).contains("authorization violation"),
        "{}",
        stderr(&out)
    );
    assert_eq!(charged(&db).await, 0);
    assert_eq!(published(&db).await, 1);
}

/// Item 4: a refusal every event of a batch meets alike is the endpoint's (a wrong path, a
/// missing credential, a moved endpoint): `relay --once` gives every row back untouched and exits
/// 5, however many attempts it is allowed.
#[tokio::test]
async fn http_a_status_every_event_meets_is_an_outage_that_exits_5_and_charges_nothing() {
    for status in [404u16, 401, 403, 301, 405, 410] {
        let db = TestDb::with_backlog(5).await;
        let server = TestServer::start(0, move |_| {
            (
                status,
                vec![("Location".into(), "http://elsewhere/".into())],
            )
        });
        for _ in 0..3 {
            let out = once(&db, &server.url(), &[]);
            assert_eq!(out.status.code(), Some(5), "{status}: {}", stderr(&out));
            assert!(
                error_line(&out).contains(&format!("HTTP {status}")),
                "{status}: {}",
                stderr(&out)
            );
            let v = summary(&out);
            assert_eq!(
                (&v["dead_lettered"], &v["unavailable"]),
                (&0.into(), &5.into())
            );
        }
        assert_eq!(untouched(&db).await, 5, "{status}");
    }
}

/// Item 4: a wrong path (404 for everything) opens the daemon's circuit; once the path is
/// fixed, everything is delivered at its first counted attempt.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_a_wrong_path_opens_the_circuit_until_it_is_fixed() {
    let db = TestDb::with_backlog(50).await;
    let answer = Arc::new(AtomicU16::new(404));
    let a = Arc::clone(&answer);
    let server = TestServer::start(0, move |_| (a.load(Ordering::SeqCst), vec![]));
    let (mut child, log) = daemon(&db, &server.url(), "50");
    let warn = circuit_opened(&log, 6).await;
    assert!(
        warn.contains("HTTP 404") && warn.contains("events=50"),
        "{warn}"
    );
    assert_eq!(charged(&db).await, 0);
    answer.store(200, Ordering::SeqCst);
    drained_untouched(&db, &log, 50).await;
    assert_eq!(server.accepted().len(), 50);
    signal(&child, "TERM");
    assert!(child.wait().unwrap().success());
}

/// Items 4 and 5: refusals that differ between events stay each event's (413 and 422 for one
/// body, a 404 for one among 200s: dead-lettered), and a 429 beside 200s is the server's
/// backpressure: deferred by its Retry-After, no attempt counted, never dead-lettered.
#[tokio::test]
async fn http_per_event_refusals_stay_the_events_and_a_429_beside_200s_is_deferred() {
    for mode in ["lease", "tx"] {
        let db = TestDb::with_backlog(8).await;
        let server = TestServer::start(0, |r| match r.json()["id"].as_i64() {
            Some(2) => (413, vec![]),
            Some(3) => (422, vec![]),
            Some(4) => (404, vec![]),
            Some(5) => (429, vec![("Retry-After".into(), "30".into())]),
            _ => (200, vec![]),
        });
        let out = once(&db, &server.url(), &["--mode", mode]);
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        let dead: Vec<i64> = sqlx::query_scalar(
            "SELECT id FROM outbox WHERE dead_lettered_at IS NOT NULL ORDER BY id",
        )
        .fetch_all(&db.pool)
        .await
        .unwrap();
        assert_eq!(dead, vec![2, 3, 4], "{mode}");
        let (attempts, err, wait): (i32, String, f64) = db
            .row("SELECT attempt_count, last_error, extract(epoch FROM available_at - now())::float8 FROM outbox WHERE id = 5")
            .await;
        assert_eq!(attempts, 0, "{mode}: {err}");
        assert!(err.starts_with("HTTP 429"), "{mode}: {err}");
        assert!(
            (25.0..=31.0).contains(&wait),
            "{mode}: Retry-After 30 gives {wait}"
        );
        assert!(
            stderr(&out).contains("pushed back on 1 event"),
            "{mode}: {}",
            stderr(&out)
        );
        let v = summary(&out);
        assert_eq!(
            (
                &v["published"],
                &v["dead_lettered"],
                &v["deferred"],
                &v["retried"]
            ),
            (&4.into(), &3.into(), &1.into(), &0.into()),
            "{mode}: {v}"
        );
    }
}

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Item 5: a queue at its `x-max-length` with `overflow=reject-publish` nacks what it cannot
/// take. The messages it took are published, the nacked events deferred with no attempt counted;
/// a batch it nacks whole is an outage (exit 5). Nothing is dead-lettered.
#[tokio::test]
async fn rabbitmq_a_queue_at_its_max_length_with_reject_publish_charges_nothing() {
    use lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
    use lapin::types::{AMQPValue, FieldTable, LongString};
    let queue = format!("obx-full-{}", uuid::Uuid::new_v4().simple());
    let conn = lapin::Connection::connect(AMQP, lapin::ConnectionProperties::default())
        .await
        .expect("rabbitmq on 127.0.0.1:5672");
    let ch = conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-max-length".into(), AMQPValue::LongInt(2));
    args.insert(
        "x-overflow".into(),
        AMQPValue::LongString(LongString::from("reject-publish")),
    );
    ch.queue_declare(queue.as_str().into(), QueueDeclareOptions::default(), args)
        .await
        .unwrap();
    let db = TestDb::with_backlog(5).await;
    let sink = format!("{AMQP}?routing_key={queue}");
    let out = once(&db, &sink, &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(charged(&db).await, 0);
    let v = summary(&out);
    assert_eq!(
        (&v["published"], &v["deferred"]),
        (&2.into(), &3.into()),
        "{v}"
    );
    all_due(&db).await;
    let out = once(&db, &sink, &[]);
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(error_line(&out).contains("nacked"), "{}", stderr(&out));
    assert_eq!(charged(&db).await, 0);
    assert_eq!(published(&db).await, 2);
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
}

/// Items 5 and 6: with a broker that creates no topic on its own (Tansu told so by the client:
/// `allow.auto.create.topics=false`) and the default `--publish-timeout`, an event whose topic
/// does not exist is reported as such (librdkafka waited 30 s by default, so only
/// `MessageTimedOut` was ever seen), and it is the topic's configuration, not the event's
/// fault: deferred beside events delivered to an existing topic, an outage alone (exit 5).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_an_unknown_topic_is_named_and_charges_nothing() {
    use rdkafka::producer::{FutureProducer, FutureRecord};
    let prefix = format!("obxunk{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    // Only o-1's topic exists: made by a client that lets the broker create it.
    let maker: FutureProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", "127.0.0.1:9092")
        .create()
        .unwrap();
    maker
        .send(
            FutureRecord::<(), _>::to(&format!("{prefix}.o-1")).payload("made"),
            Duration::from_secs(10),
        )
        .await
        .expect("the topic is created");
    let db = TestDb::with_backlog(3).await;
    let sink = format!("kafka://127.0.0.1:9092?topic={prefix}.{{aggregate_id}}");
    let props = ["--kafka-property", "allow.auto.create.topics=false"];
    let mut cmd = db.cmd();
    cmd.args(["relay", "--once", "--json", "--sink", &sink])
        .args(["--max-attempts", "3", "--backoff-base", "100ms"])
        .args(props);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("Unknown topic or partition"),
        "{}",
        stderr(&out)
    );
    assert_eq!(summary(&out)["deferred"], 2, "{}", stderr(&out));
    assert_eq!(charged(&db).await, 0);
    all_due(&db).await;
    let mut cmd = db.cmd();
    cmd.args(["relay", "--once", "--sink", &sink]).args(props);
    let out = tokio::task::spawn_blocking(move || cmd.output().unwrap())
        .await
        .unwrap();
    assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
    assert!(
        error_line(&out).contains("Unknown topic or partition"),
        "{}",
        stderr(&out)
    );
    assert_eq!(charged(&db).await, 0);
    assert_eq!(published(&db).await, 1);
}
