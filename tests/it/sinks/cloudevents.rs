//! `relay --format cloudevents` against the real peers, read back by the official CloudEvents SDK
//! for Python (PyPI `cloudevents`, its HTTP, Kafka and AMQP bindings: `cloudevents_sdk.py`), the
//! Kafka records as confluent-kafka consumed them; NATS, which the SDK has no binding for, is
//! checked against the NATS binding's rules from what a JetStream consumer got. Every event holds
//! a payload whose numbers no `f64` can hold: `data` must arrive byte for byte.

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use base64::Engine;
use chrono::{DateTime, Utc};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::support::servers::kafka::read_all;
use crate::support::servers::TestServer;
use crate::support::{stderr, TestDb, UNTOUCHED};

const SDK: &str = include_str!("cloudevents_sdk.py");
const TENANT: &str = "6f9619ff-8b86-d011-b42d-00cf4fc964ff";
/// As jsonb prints it back (the relay sends the stored text), with digits no `f64` keeps.
const PAYLOAD: &str = r#"{"note": "café \"q\"", "ratio": [0.1000000000000000055511151231257827], "amount": 12345678901234567890.000000000001}"#;
const KEY: &str = "order.placed:42";
const SUBJECT: &str = "order/A 42/é";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// The one event each test relays, as the database holds it.
struct Row {
    id: i64,
    created_at: DateTime<Utc>,
    payload: String,
}

/// Inserts the event: aggregate id with a space and a non-ASCII letter (percent-encoded in HTTP
/// and NATS headers), row headers that try to replace the attributes of every binding.
async fn seed(db: &TestDb) -> Row {
    db.exec(&format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers, idempotency_key)
         VALUES ('{TENANT}', 'order', 'A 42/é', 'order.placed', '{PAYLOAD}',
                 '{{\"schema-version\": \"3\", \"ce-id\": \"spoofed\", \"ce_id\": \"spoofed\", \"cloudEvents_id\": \"spoofed\"}}',
                 '{KEY}')"
    ))
    .await;
    let (id, created_at, payload): (i64, DateTime<Utc>, String) = db
        .row("SELECT id, created_at, payload::text FROM outbox")
        .await;
    assert_eq!(payload, PAYLOAD, "jsonb keeps the text as written here");
    Row {
        id,
        created_at,
        payload,
    }
}

/// The SDK's reading of `request` (see `cloudevents_sdk.py`).
fn sdk(request: Value) -> Vec<Value> {
    let mut child = Command::new("python3")
        .args(["-c", SDK])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(request.to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "the CloudEvents SDK refused the message (python3 -m pip install cloudevents confluent-kafka): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("the SDK's answer")
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The attributes the SDK parsed are the event's.
fn assert_attributes(got: &Value, row: &Row, source: &str) {
    let a = &got["attributes"];
    assert_eq!(a["specversion"], "1.0", "{got}");
    assert_eq!(
        a["id"], KEY,
        "the idempotency key, not a row header's: {got}"
    );
    assert_eq!(a["source"], source, "{got}");
    assert_eq!(a["type"], "order.placed", "{got}");
    assert_eq!(a["subject"], SUBJECT, "{got}");
    assert_eq!(a["datacontenttype"], "application/json", "{got}");
    assert_eq!(a["outboxid"], row.id.to_string(), "{got}");
    assert_eq!(a["tenantid"], TENANT, "{got}");
    let time = DateTime::parse_from_rfc3339(a["time"].as_str().expect("time")).unwrap();
    assert_eq!(
        time, row.created_at,
        "time is created_at to the microsecond"
    );
    // The SDK parsed `data` as JSON (its numbers as floats: the bytes are checked apart).
    assert_eq!(got["data"]["note"], "café \"q\"", "{got}");
}

/// `data` in a structured event's JSON text, as written.
fn raw_data(body: &[u8]) -> String {
    let doc: BTreeMap<String, Box<RawValue>> = serde_json::from_slice(body).expect("JSON object");
    doc["data"].get().to_owned()
}

fn default_source(db: &TestDb) -> String {
    format!("/outboxctl/test/{}", db.schema)
}

#[tokio::test]
async fn http_binary_mode_is_read_by_the_sdk_and_keeps_the_signature_and_dedup_headers() {
    let db = TestDb::new().await;
    let row = seed(&db).await;
    let server = TestServer::start(0, |_| (200, vec![]));
    db.relay(server.url())
        .args(["--format", "cloudevents", "--signing-secret-env", "SECRET"])
        .args(["--http-header", "X-Outbox-Id: {id}"])
        .env("SECRET", SECRET)
        .once(0);
    let got = server.accepted();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(r.body, row.payload.as_bytes(), "data alone, byte for byte");
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert!(
        r.header("ce-datacontenttype").is_none(),
        "HTTP binding 3.1.1"
    );
    assert_eq!(r.header("ce-subject"), Some("order/A%2042/%C3%A9"));
    assert_eq!(r.header("ce-id"), Some(KEY));
    let headers: BTreeMap<String, String> = r.headers.iter().cloned().collect();
    let parsed =
        sdk(json!({"binding": "http", "messages": [{"headers": headers, "body": b64(&r.body)}]}));
    assert_attributes(&parsed[0], &row, &default_source(&db));
    // The relay's other headers are all there.
    assert_eq!(r.header("idempotency-key"), Some(KEY));
    assert_eq!(r.header("x-outbox-id"), Some(row.id.to_string().as_str()));
    assert_eq!(
        r.header("schema-version"),
        Some("3"),
        "the row's own headers"
    );
    assert_eq!(r.header("webhook-id"), Some(KEY));
    let ts = r.header("webhook-timestamp").unwrap();
    assert!(
        super::http::verify(
            SECRET,
            KEY,
            ts,
            &r.body,
            r.header("webhook-signature").unwrap()
        ),
        "the signature covers the body sent"
    );
    assert_eq!(db.count("published_at IS NOT NULL").await, 1);
}

#[tokio::test]
async fn http_structured_mode_from_the_environment_is_read_by_the_sdk_with_data_verbatim() {
    let db = TestDb::new().await;
    let row = seed(&db).await;
    let server = TestServer::start(0, |_| (200, vec![]));
    let source = "https://shop.example.com/orders";
    db.relay(server.url())
        .env("OUTBOXCTL_FORMAT", "cloudevents")
        .env("OUTBOXCTL_CLOUDEVENTS_MODE", "structured")
        .env("OUTBOXCTL_CLOUDEVENTS_SOURCE", source)
        .args(["--signing-secret-env", "SECRET"])
        .env("SECRET", SECRET)
        .once(0);
    let got = server.accepted();
    assert_eq!(got.len(), 1);
    let r = &got[0];
    assert_eq!(
        r.header("content-type"),
        Some("application/cloudevents+json")
    );
    assert!(
        !r.headers
            .iter()
            .any(|(k, _)| k.to_ascii_lowercase().starts_with("ce-")),
        "no ce-* header (not the row's either), or a receiver takes it for binary mode: {:?}",
        r.headers
    );
    assert_eq!(raw_data(&r.body), row.payload, "data is the payload's text");
    let headers: BTreeMap<String, String> = r.headers.iter().cloned().collect();
    let parsed =
        sdk(json!({"binding": "http", "messages": [{"headers": headers, "body": b64(&r.body)}]}));
    assert_attributes(&parsed[0], &row, source);
    assert_eq!(r.header("idempotency-key"), Some(KEY));
    let ts = r.header("webhook-timestamp").unwrap();
    assert!(super::http::verify(
        SECRET,
        KEY,
        ts,
        &r.body,
        r.header("webhook-signature").unwrap()
    ));
}

#[tokio::test]
async fn kafka_records_are_read_by_the_sdks_kafka_binding() {
    let db = TestDb::new().await;
    let row = seed(&db).await;
    let topic = format!("obxce{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let bootstrap = "127.0.0.1:9092";
    db.relay(format!("kafka://{bootstrap}?topic={topic}"))
        .args(["--format", "cloudevents"])
        .once(0);
    let parsed =
        sdk(json!({"binding": "kafka", "bootstrap": bootstrap, "topic": topic, "expected": 1}));
    assert_eq!(parsed.len(), 1, "{parsed:?}");
    let got = &parsed[0];
    assert_attributes(got, &row, &default_source(&db));
    let value = base64::engine::general_purpose::STANDARD
        .decode(got["value_b64"].as_str().unwrap())
        .unwrap();
    assert_eq!(
        value,
        row.payload.as_bytes(),
        "the value is data, byte for byte"
    );
    // The key stays the aggregate id (the SDK reports it as partitionkey).
    assert_eq!(got["attributes"]["partitionkey"], "A 42/é");
    let headers: Vec<(String, String)> = serde_json::from_value(got["headers"].clone()).unwrap();
    let values = |name: &str| -> Vec<&str> {
        headers
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .collect()
    };
    assert_eq!(values("ce_id"), vec![KEY], "one ce_id, not the row's");
    assert_eq!(
        values("ce_subject"),
        vec![SUBJECT],
        "UTF-8 as is (Kafka binding)"
    );
    assert_eq!(values("content-type"), vec!["application/json"]);
    assert_eq!(
        values("idempotency_key"),
        vec![KEY],
        "the relay's dedup header"
    );
    assert_eq!(values("id"), vec![row.id.to_string().as_str()]);
    assert_eq!(values("schema-version"), vec!["3"]);
    // And an independent reader sees the same record.
    let records = read_all(bootstrap, &[topic], 1);
    assert_eq!(records[0].value, row.payload.as_bytes());
}

/// Percent-decoding as the NATS (and HTTP) binding says a receiver does.
fn percent_decode(v: &str) -> String {
    let b = v.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(&v[i + 1..i + 3], 16).unwrap());
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).expect("UTF-8")
}

#[tokio::test]
async fn nats_messages_carry_the_attributes_as_the_nats_binding_names_them() {
    use async_nats::jetstream;
    let db = TestDb::new().await;
    let row = seed(&db).await;
    let prefix = format!("obxce{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let js = jetstream::new(async_nats::connect("127.0.0.1:4222").await.unwrap());
    js.create_stream(jetstream::stream::Config {
        name: prefix.to_uppercase(),
        subjects: vec![format!("{prefix}.>")],
        ..Default::default()
    })
    .await
    .unwrap();
    db.relay(format!(
        "nats://127.0.0.1:4222?subject={prefix}.{{event_type}}"
    ))
    .args(["--format", "cloudevents"])
    .once(0);
    let mut stream = js.get_stream(prefix.to_uppercase()).await.unwrap();
    assert_eq!(stream.info().await.unwrap().state.messages, 1);
    let msg = stream.get_raw_message(1).await.unwrap();
    assert_eq!(&msg.payload[..], row.payload.as_bytes(), "data alone");
    let header = |name: &str| -> Vec<String> {
        msg.headers
            .get_all(name)
            .map(|v| v.as_str().to_owned())
            .collect()
    };
    let source = default_source(&db);
    let outbox_id = row.id.to_string();
    let time = row
        .created_at
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    for (attr, want) in [
        ("specversion", "1.0"),
        ("id", KEY),
        ("source", source.as_str()),
        ("type", "order.placed"),
        ("subject", SUBJECT),
        ("time", time.as_str()),
        ("datacontenttype", "application/json"),
        ("outboxid", outbox_id.as_str()),
        ("tenantid", TENANT),
    ] {
        let got = header(&format!("ce-{attr}"));
        assert_eq!(got.len(), 1, "one ce-{attr}: {got:?}");
        assert!(
            got[0]
                .bytes()
                .all(|b| (0x21..=0x7e).contains(&b) && b != b'"'),
            "printable ASCII, no space or quote (NATS binding 3.1.3.2): {got:?}"
        );
        assert_eq!(percent_decode(&got[0]), want, "ce-{attr}");
    }
    assert_eq!(header("ce-subject"), vec!["order/A%2042/%C3%A9"]);
    assert_eq!(
        header("Nats-Msg-Id"),
        vec![KEY],
        "JetStream's dedup id stays"
    );
    assert_eq!(header("schema-version"), vec!["3"]);
    js.delete_stream(prefix.to_uppercase()).await.unwrap();
}

#[tokio::test]
async fn rabbitmq_messages_are_read_by_the_sdks_amqp_binding() {
    use lapin::options::{BasicGetOptions, QueueDeleteOptions};
    use lapin::types::AMQPValue;
    let db = TestDb::new().await;
    let row = seed(&db).await;
    let queue = format!("obx-ce-{}", uuid::Uuid::new_v4().simple());
    let (_conn, ch) = super::amqp::with_queue(&queue).await;
    db.relay(format!("{}?routing_key={queue}", super::amqp::AMQP))
        .args(["--format", "cloudevents"])
        .once(0);
    let msg = ch
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a message");
    let d = &msg.delivery;
    assert_eq!(d.data, row.payload.as_bytes(), "data alone");
    let props = &d.properties;
    let content_type = props.content_type().as_ref().map(|s| s.as_str().to_owned());
    assert_eq!(content_type.as_deref(), Some("application/json"));
    assert_eq!(
        props.message_id().as_ref().map(|s| s.as_str()),
        Some(KEY),
        "the dedup id stays"
    );
    let mut app = BTreeMap::new();
    for (k, v) in props.headers().as_ref().expect("headers").inner() {
        let text = match v {
            AMQPValue::LongString(s) => String::from_utf8_lossy(s.as_bytes()).into_owned(),
            other => panic!("{k}: {other:?} is not a string"),
        };
        app.insert(k.as_str().to_owned(), text);
    }
    assert_eq!(
        app.get("cloudEvents_id").map(String::as_str),
        Some(KEY),
        "{app:?}"
    );
    assert!(
        !app.keys().any(|k| k.starts_with("cloudEvents:")),
        "one separator per message (AMQP binding 3.1.3.1)"
    );
    assert_eq!(app.get("schema-version").map(String::as_str), Some("3"));
    let parsed = sdk(json!({"binding": "amqp", "messages": [{
        "content_type": content_type, "application_properties": app, "body": b64(&d.data)}]}));
    assert_attributes(&parsed[0], &row, &default_source(&db));
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn the_file_sink_writes_one_structured_event_per_line() {
    let db = TestDb::new().await;
    let row = seed(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    db.relay(format!("file:{}", path.display()))
        .args(["--format", "cloudevents"])
        .once(0);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 1, "{text}");
    assert_eq!(raw_data(lines[0].as_bytes()), row.payload);
    let parsed = sdk(json!({"binding": "http", "messages": [{
        "headers": {"content-type": "application/cloudevents+json"}, "body": b64(lines[0].as_bytes())}]}));
    assert_attributes(&parsed[0], &row, &default_source(&db));
}

/// A combination that cannot be sent is refused before anything is claimed: exit 2, one line
/// naming what to change, every row untouched.
#[tokio::test]
async fn bad_combinations_are_refused_with_exit_2_and_nothing_published() {
    let db = TestDb::with_backlog(3).await;
    let dir = tempfile::tempdir().unwrap();
    let file = format!("file:{}", dir.path().join("x.jsonl").display());
    let ce = "--format=cloudevents";
    for (sink, args, want) in [
        (
            "redis://127.0.0.1:6379?stream=x",
            vec![ce],
            "error: --format cloudevents: the redis sink has no CloudEvents binding",
        ),
        (
            "kafka://127.0.0.1:9092?topic=x",
            vec![ce, "--cloudevents-mode=structured"],
            "error: --cloudevents-mode structured: the kafka sink sends CloudEvents in binary mode only",
        ),
        (
            "nats://127.0.0.1:4222",
            vec![ce, "--cloudevents-mode=structured"],
            "the nats sink sends CloudEvents in binary mode only",
        ),
        (
            "amqp://guest:guest@127.0.0.1:5672/%2f",
            vec![ce, "--cloudevents-mode=structured"],
            "the amqp sink sends CloudEvents in binary mode only",
        ),
        (
            file.as_str(),
            vec![ce, "--cloudevents-mode=binary"],
            "the file sink sends CloudEvents in structured mode only",
        ),
        (
            "stdout",
            vec![ce, "--cloudevents-mode=binary"],
            "the stdout sink sends CloudEvents in structured mode only",
        ),
        (
            "http://127.0.0.1:9/x",
            vec!["--cloudevents-mode=structured"],
            "error: --cloudevents-mode only applies with --format cloudevents",
        ),
        (
            "http://127.0.0.1:9/x",
            vec!["--cloudevents-source=/x"],
            "error: --cloudevents-source only applies with --format cloudevents",
        ),
        (
            "http://127.0.0.1:9/x",
            vec![ce, "--cloudevents-source=not a uri"],
            "error: invalid --cloudevents-source `not a uri`",
        ),
        (
            "http://127.0.0.1:9/x",
            vec![ce, "--http-header=CE-Id: {id}"],
            "error: invalid --http-header `ce-id`: with --format cloudevents, ce-* headers are the event's attributes",
        ),
    ] {
        let out = db.relay(sink).args(&args).once(2);
        let err = stderr(&out);
        assert!(err.contains(want), "{sink} {args:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert_eq!(db.count(UNTOUCHED).await, 3, "{sink} {args:?}");
    }
}
