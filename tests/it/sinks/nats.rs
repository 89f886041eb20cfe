//! The NATS JetStream sink against the real nats-server on 127.0.0.1:4222 (JetStream enabled).

use async_nats::jetstream;

use crate::support::{stderr, TestDb, UNTOUCHED};

const NATS: &str = "127.0.0.1:4222";

#[tokio::test]
async fn publishes_to_jetstream_and_the_stream_drops_republished_duplicates() {
    let db = TestDb::with_backlog(20).await;
    let prefix = format!("obx{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let js = jetstream::new(
        async_nats::connect(NATS)
            .await
            .expect("nats-server on 127.0.0.1:4222"),
    );
    let mut stream = js
        .create_stream(jetstream::stream::Config {
            name: prefix.to_uppercase(),
            subjects: vec![format!("{prefix}.>")],
            ..Default::default()
        })
        .await
        .unwrap();
    let sink = format!("nats://{NATS}?subject={prefix}.{{event_type}}");
    let relay = || db.relay(&sink).once_json();

    let v = relay();
    assert_eq!(
        (v["published"].as_u64(), v["mode"].as_str()),
        (Some(20), Some("lease"))
    );
    assert_eq!(stream.info().await.unwrap().state.messages, 20);
    let first = stream.get_raw_message(1).await.unwrap();
    assert_eq!(first.subject.as_str(), format!("{prefix}.order.placed"));
    let doc: serde_json::Value = serde_json::from_slice(&first.payload).unwrap();
    let id = doc["id"].as_i64().unwrap();
    let key: String = db
        .scalar(&format!(
            "SELECT idempotency_key FROM outbox WHERE id = {id}"
        ))
        .await;
    assert_eq!(doc["idempotency_key"], key.as_str());
    let msg_id = first
        .headers
        .get("Nats-Msg-Id")
        .map(|v| v.as_str().to_owned());
    assert_eq!(
        msg_id.as_deref(),
        Some(key.as_str()),
        "Nats-Msg-Id is the dedup id"
    );

    // A relay that died after publishing and before marking re-publishes the batch: JetStream
    // recognises the Nats-Msg-Id and keeps one copy.
    // (Such a relay saved no claim floor past them: forget the one the run above saved.)
    db.exec(
        "UPDATE outbox SET published_at = NULL, attempt_count = 0; DELETE FROM outbox_relay_floor",
    )
    .await;
    relay();
    assert_eq!(
        stream.info().await.unwrap().state.messages,
        20,
        "duplicates dropped by the stream"
    );
    assert_eq!(db.count("published_at IS NULL").await, 0);
    js.delete_stream(prefix.to_uppercase()).await.unwrap();
}

#[tokio::test]
async fn a_subject_no_stream_captures_is_retried_with_a_clear_error() {
    let db = TestDb::with_backlog(2).await;
    let prefix = format!(
        "nostream{}",
        &uuid::Uuid::new_v4().simple().to_string()[..10]
    );
    let out = db
        .relay(format!("nats://{NATS}?subject={prefix}.{{event_type}}"))
        .args(["--lease", "4s"])
        .once(5);
    // No stream for any event of the batch is the server's configuration, not the events'
    // fault: given back untouched, and the reason is in the error.
    assert!(
        stderr(&out).contains("no JetStream stream captures subject"),
        "{}",
        stderr(&out)
    );
    // The suggestion captures this subject (not `outbox.>`, which does not).
    assert!(
        stderr(&out).contains(&format!("subjects {prefix}.>"))
            && !stderr(&out).contains("outbox.>"),
        "{}",
        stderr(&out)
    );
    assert_eq!(db.count(UNTOUCHED).await, 2);
}
