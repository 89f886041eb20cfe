//! Row headers ride on a message but never change its framing, routing or dedup: each sink that
//! carries headers (HTTP, NATS, RabbitMQ) against its real peer. The body a consumer receives is
//! always the stored document, byte for byte.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;

use async_nats::jetstream;
use lapin::options::{BasicGetOptions, QueueDeleteOptions};
use lapin::types::AMQPValue;

use super::amqp::{with_queue, AMQP};
use crate::support::servers::TestServer;
use crate::support::{stderr, stdout_json, TestDb};

const TENANT: &str = "6f9619ff-8b86-d011-b42d-00cf4fc964ff";

/// Inserts one ready event with the given stored headers (JSON text); returns its id.
async fn insert(db: &TestDb, key: &str, headers: &str) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers, idempotency_key)
         VALUES ($1::uuid, 'order', 'o-1', 'order.placed', jsonb_build_object('k', $3::text, 'note', 'héllo'), $2::jsonb, $3)
         RETURNING id",
    )
    .bind(TENANT)
    .bind(headers)
    .bind(key)
    .fetch_one(&db.pool)
    .await
    .unwrap_or_else(|e| panic!("insert {headers}: {e}"))
}

/// The document of a published row, as the relay defines it (`sink::write_envelope` over the
/// stored JSON text): the bytes every consumer must receive.
async fn document(db: &TestDb, id: i64) -> Vec<u8> {
    let row: outboxctl::db::relay::ClaimedRow = sqlx::query_as(
        "SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, payload::text AS payload,
                headers::text AS headers, idempotency_key, created_at, attempt_count
           FROM outbox WHERE id = $1 AND published_at IS NOT NULL",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .unwrap_or_else(|e| panic!("row {id} is not published: {e}"));
    let mut out = Vec::new();
    outboxctl::sink::write_envelope(&row, &mut out);
    out
}

async fn key_of(db: &TestDb, id: i64) -> String {
    db.scalar(&format!(
        "SELECT idempotency_key FROM outbox WHERE id = {id}"
    ))
    .await
}

/// The hop-by-hop, framing and relay-set headers an event carries, in various spellings.
const HTTP_HOSTILE: &[&str] = &[
    r#"{"Content-Length":"5","x-keep":"a"}"#,
    r#"{"Transfer-Encoding":"chunked"}"#,
    r#"{"Host":"evil.example"}"#,
    r#"{"connection":"close","Keep-Alive":"timeout=1","TE":"trailers","Trailer":"X-T","Upgrade":"h2c","Expect":"100-continue","Proxy-Authorization":"Basic eA==","Content-Encoding":"gzip"}"#,
    r#"{"Content-Type":"text/plain","Idempotency-Key":"evil","User-Agent":"evil","webhook-id":"evil","Webhook-Signature":"v1,evil","X-Tenant":"evil","X-HTTP-Method-Override":"DELETE","X-Forwarded-Host":"evil.example"}"#,
    r#"{"CONTENT-LENGTH":"7"}"#,
    r#"{"bad name":"x","x-ctl":"a\nb","x-utf8":"é","x-num":3}"#,
];

#[tokio::test]
async fn http_row_headers_never_change_framing_host_dedup_or_relay_headers() {
    let db = TestDb::new().await;
    let mut ids = Vec::new();
    for (i, h) in HTTP_HOSTILE.iter().enumerate() {
        ids.push(insert(&db, &format!("h-{i}"), h).await);
    }
    let server = TestServer::start(0, |_| (200, vec![]));
    let out = db
        .relay(server.url())
        .args(["--json", "--http-header", "X-Tenant: {tenant_id}"])
        .once(0);
    let v = stdout_json(&out);
    assert_eq!(
        (v["published"].as_u64(), v["dead_lettered"].as_u64()),
        (Some(ids.len() as u64), Some(0)),
        "{v}\n{}",
        stderr(&out)
    );
    let got = server.accepted();
    assert_eq!(got.len(), ids.len(), "one request per event");
    for r in &got {
        let doc: serde_json::Value = serde_json::from_slice(&r.body)
            .unwrap_or_else(|_| panic!("a complete JSON body: {:?}", r));
        let id = doc["id"].as_i64().unwrap();
        assert_eq!(
            r.body,
            document(&db, id).await,
            "the body is the document, byte for byte"
        );
        let all = |name: &str| -> Vec<&str> {
            r.headers
                .iter()
                .filter(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.as_str())
                .collect()
        };
        assert_eq!(
            all("content-length"),
            vec![r.body.len().to_string()],
            "{r:?}"
        );
        assert!(all("transfer-encoding").is_empty(), "{r:?}");
        assert_eq!(
            all("host"),
            vec![format!("127.0.0.1:{}", server.port)],
            "{r:?}"
        );
        assert_eq!(all("content-type"), vec!["application/json"]);
        assert_eq!(all("idempotency-key"), vec![key_of(&db, id).await]);
        assert_eq!(all("x-tenant"), vec![TENANT], "--http-header wins");
        assert!(all("user-agent")[0].starts_with("outboxctl/"), "{r:?}");
        for name in [
            "connection",
            "keep-alive",
            "te",
            "trailer",
            "upgrade",
            "expect",
            "proxy-authorization",
            "content-encoding",
            "webhook-id",
            "webhook-signature",
            "x-http-method-override",
            "x-forwarded-host",
            "bad name",
            "x-ctl",
        ] {
            assert!(all(name).is_empty(), "{name} was sent: {r:?}");
        }
    }
    let first = got.iter().find(|r| r.json()["id"] == ids[0]).unwrap();
    assert_eq!(first.header("x-keep"), Some("a"), "other headers are sent");
    let last = got.iter().find(|r| r.json()["id"] == ids[6]).unwrap();
    assert_eq!(last.header("x-num"), Some("3"));
    let err = stderr(&out);
    assert_eq!(
        err.matches("Content-Length").count(),
        1,
        "one WARN per header name (any case): {err}"
    );
    assert!(err.contains("WARN"), "{err}");
    let dead = db.count("dead_lettered_at IS NOT NULL").await;
    assert_eq!(dead, 0);
}

/// What arrived on the wire, read raw (no HTTP library on this side).
struct RawRequest {
    head: String,
    body: Vec<u8>,
    trailing: Vec<u8>,
}

#[tokio::test]
async fn http_framing_on_the_wire_is_the_relays_own() {
    let db = TestDb::new().await;
    let id = insert(
        &db,
        "raw-1",
        r#"{"Content-Length":"5","Transfer-Encoding":"chunked","Host":"evil.example","Connection":"keep-alive, Upgrade"}"#,
    )
    .await;
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let reader = std::thread::spawn(move || {
        let (conn, _) = listener.accept().unwrap();
        conn.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        let mut r = BufReader::new(conn.try_clone().unwrap());
        let mut head = String::new();
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap() == 0 || line == "\r\n" {
                break;
            }
            head.push_str(&line);
        }
        let len: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let mut body = vec![0; len];
        r.read_exact(&mut body).unwrap();
        let mut w = conn;
        w.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .unwrap();
        // The client closes after a `Connection: close` reply: whatever it sent beyond the body
        // it declared arrives before that EOF.
        let mut trailing = Vec::new();
        let _ = r.read_to_end(&mut trailing);
        RawRequest {
            head,
            body,
            trailing,
        }
    });
    let v = db.relay(format!("http://127.0.0.1:{port}/in")).once_json();
    assert_eq!(v["published"], 1, "{v}");
    let raw = reader.join().unwrap();
    let lines: Vec<&str> = raw.head.lines().collect();
    let named = |n: &str| -> Vec<&str> {
        lines
            .iter()
            .filter(|l| {
                l.split_once(':')
                    .is_some_and(|(k, _)| k.eq_ignore_ascii_case(n))
            })
            .copied()
            .collect()
    };
    assert!(lines[0].starts_with("POST /in HTTP/1.1"), "{}", raw.head);
    assert_eq!(named("host"), vec![format!("host: 127.0.0.1:{port}")]);
    assert!(named("transfer-encoding").is_empty(), "{}", raw.head);
    assert!(named("connection").is_empty(), "{}", raw.head);
    assert_eq!(
        named("content-length"),
        vec![format!("content-length: {}", raw.body.len())]
    );
    assert_eq!(raw.body, document(&db, id).await);
    assert!(raw.trailing.is_empty(), "{:?}", raw.trailing);
}

const NATS: &str = "127.0.0.1:4222";

#[tokio::test]
async fn nats_row_headers_never_purge_block_or_replace_the_dedup_id() {
    let db = TestDb::new().await;
    let prefix = format!("obxh{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let js = jetstream::new(
        async_nats::connect(NATS)
            .await
            .expect("nats-server on 127.0.0.1:4222"),
    );
    let mut stream = js
        .create_stream(jetstream::stream::Config {
            name: prefix.to_uppercase(),
            subjects: vec![format!("{prefix}.>")],
            allow_rollup: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let mut ids = vec![insert(&db, "n-keep", r#"{"x-keep":"1"}"#).await];
    ids.push(insert(&db, "n-2", r#"{"x-two":"2"}"#).await);
    // Would purge the subject (both messages above) with rollup allowed.
    ids.push(insert(&db, "n-rollup", r#"{"Nats-Rollup":"sub"}"#).await);
    // Would fail every publish, forever; or replace the dedup id.
    ids.push(
        insert(
            &db,
            "n-expect",
            r#"{"Nats-Expected-Last-Sequence":"999","nats-expected-stream":"NOPE","NATS-MSG-ID":"evil","Nats-Msg-Id":"evil"}"#,
        )
        .await,
    );
    // Not valid as NATS headers: dropped, the event still goes.
    ids.push(
        insert(
            &db,
            "n-bad",
            r#"{"bad name":"x","a:b":"x","x-ml":"a\r\nb"}"#,
        )
        .await,
    );
    let sink = format!("nats://{NATS}?subject={prefix}.{{event_type}}");
    let out = db
        .relay(&sink)
        .args(["--json", "--batch-size", "1"])
        .once(0);
    let v = stdout_json(&out);
    assert_eq!(
        (v["published"].as_u64(), v["retried"].as_u64()),
        (Some(ids.len() as u64), Some(0)),
        "{v}\n{}",
        stderr(&out)
    );
    assert_eq!(
        stream.info().await.unwrap().state.messages,
        ids.len() as u64,
        "nothing purged"
    );
    for seq in 1..=ids.len() as u64 {
        let m = stream.get_raw_message(seq).await.unwrap();
        let doc: serde_json::Value = serde_json::from_slice(&m.payload).unwrap();
        let id = doc["id"].as_i64().unwrap();
        assert_eq!(m.payload.as_ref(), document(&db, id).await.as_slice());
        let key = key_of(&db, id).await;
        let nats: Vec<(String, String)> = m
            .headers
            .iter()
            .flat_map(|(k, vs)| {
                vs.iter()
                    .map(move |v| (k.to_string(), v.as_str().to_owned()))
            })
            .filter(|(k, _)| k.to_ascii_lowercase().starts_with("nats-"))
            .collect();
        assert_eq!(
            nats,
            vec![("Nats-Msg-Id".to_owned(), key)],
            "the one Nats-* header is the relay's dedup id"
        );
        if id == ids[0] {
            assert_eq!(
                m.headers.get("x-keep").map(|v| v.as_str()),
                Some("1"),
                "other headers are sent"
            );
        }
    }
    js.delete_stream(prefix.to_uppercase()).await.unwrap();
}

#[tokio::test]
async fn amqp_row_headers_never_carry_broker_arguments_or_relay_properties() {
    let db = TestDb::new().await;
    let queue = format!("obx-hdr-{}", uuid::Uuid::new_v4().simple());
    let (_conn, ch) = with_queue(&queue).await;
    let long_name = "h".repeat(300);
    let ids = vec![
        insert(
            &db,
            "a-1",
            r#"{"keep":"1","x-delay":"5000","X-Match":"any","x-dead-letter-exchange":"amq.direct","CC":"elsewhere","BCC":"elsewhere","message_id":"evil","content_type":"text/plain"}"#,
        )
        .await,
        insert(&db, "a-2", &format!(r#"{{"{long_name}":"x","ok":"2"}}"#)).await,
    ];
    let out = db
        .relay(format!("{AMQP}?routing_key={queue}"))
        .args(["--json"])
        .once(0);
    let v = stdout_json(&out);
    assert_eq!(
        (v["published"].as_u64(), v["dead_lettered"].as_u64()),
        (Some(2), Some(0)),
        "{v}\n{}",
        stderr(&out)
    );
    for _ in &ids {
        let msg = ch
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
            .expect("a message");
        let body = &msg.delivery.data;
        let doc: serde_json::Value = serde_json::from_slice(body).unwrap();
        let id = doc["id"].as_i64().unwrap();
        assert_eq!(body, &document(&db, id).await);
        let props = &msg.delivery.properties;
        assert_eq!(
            props.message_id().as_ref().map(|s| s.to_string()),
            Some(key_of(&db, id).await)
        );
        assert_eq!(
            props
                .content_type()
                .as_ref()
                .map(|s| s.to_string())
                .as_deref(),
            Some("application/json")
        );
        let headers: Vec<String> = props
            .headers()
            .as_ref()
            .map(|t| t.inner().keys().map(|k| k.to_string()).collect())
            .unwrap_or_default();
        let want: Vec<&str> = if id == ids[0] {
            vec!["keep"]
        } else {
            vec!["ok"]
        };
        assert_eq!(headers, want, "only plain headers pass");
        if id == ids[0] {
            let t = props.headers().clone().unwrap();
            assert!(
                matches!(t.inner().get("keep"), Some(AMQPValue::LongString(s)) if s.to_string() == "1")
            );
        }
    }
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
}
