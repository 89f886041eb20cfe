//! The RabbitMQ sink against the real RabbitMQ on 127.0.0.1:5672 (guest/guest).

use lapin::options::{BasicGetOptions, QueueDeclareOptions, QueueDeleteOptions};
use lapin::types::FieldTable;
use lapin::{Connection, ConnectionProperties};

use crate::support::{stderr, stdout, TestDb, UNTOUCHED};

pub(super) const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// How many messages `queue` holds (a passive declare).
async fn message_count(ch: &lapin::Channel, queue: &str) -> u32 {
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions {
            passive: true,
            ..Default::default()
        },
        FieldTable::default(),
    )
    .await
    .unwrap()
    .message_count()
}

/// A connection to the shared RabbitMQ, with `queue` declared on its channel.
pub(super) async fn with_queue(queue: &str) -> (Connection, lapin::Channel) {
    let conn = Connection::connect(AMQP, ConnectionProperties::default())
        .await
        .expect("rabbitmq on 127.0.0.1:5672");
    let ch = conn.create_channel().await.unwrap();
    ch.queue_declare(
        queue.into(),
        QueueDeclareOptions::default(),
        FieldTable::default(),
    )
    .await
    .unwrap();
    (conn, ch)
}

#[tokio::test]
async fn publishes_confirmed_persistent_messages_with_the_dedup_id() {
    let db = TestDb::with_backlog(15).await;
    let queue = format!("obx-test-{}", uuid::Uuid::new_v4().simple());
    let (_conn, ch) = with_queue(&queue).await;

    let out = db
        .relay(format!("{AMQP}?routing_key={queue}"))
        .args(["--json"])
        .once(0);
    assert!(
        !stdout(&out).contains("guest:guest") && !stderr(&out).contains("guest:guest"),
        "password hidden"
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["published"], 15);
    let count = message_count(&ch, &queue).await;
    assert_eq!(count, 15);
    let msg = ch
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
        .expect("a message");
    let doc: serde_json::Value = serde_json::from_slice(&msg.delivery.data).unwrap();
    let props = &msg.delivery.properties;
    assert_eq!(
        props.message_id().as_ref().map(|s| s.as_str()),
        doc["idempotency_key"].as_str()
    );
    assert_eq!(
        props.kind().as_ref().map(|s| s.as_str()),
        Some("order.placed")
    );
    assert_eq!(*props.delivery_mode(), Some(2), "persistent");
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
}

#[tokio::test]
async fn an_unroutable_message_is_retried_not_lost() {
    // No queue is bound for any event of the batch: the broker's routing, not the events' fault.
    // The rows are given back untouched (no attempt counted), and the run says why and exits 5.
    let db = TestDb::with_backlog(2).await;
    let queue = format!("obx-missing-{}", uuid::Uuid::new_v4().simple());
    let out = db.relay(format!("{AMQP}?routing_key={queue}")).once(5);
    assert!(
        stderr(&out).contains("no queue is bound"),
        "{}",
        stderr(&out)
    );
    assert_eq!(db.count(UNTOUCHED).await, 2);
}

/// A broker far away: the real RabbitMQ behind [`crate::support::net_delay::NetDelay`] (a test double of
/// the network, not of the broker), every reply 500 ms late, with a `--publish-timeout` of 2 s.
/// The connection handshake (AMQP header, start, tune, open, a channel, confirms: five round
/// trips) takes longer than one publish timeout over such a link. The attempt was dropped at each
/// publish's timeout and begun again at the next, so none ever finished; it now goes on in the
/// background across publishes, and the drain completes with no attempt counted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_behind_a_slow_link_is_reached_although_the_handshake_outlasts_a_publish() {
    const EVENTS: i64 = 40;
    let proxy = crate::support::net_delay::NetDelay::start(
        "127.0.0.1:5672",
        std::time::Duration::from_millis(500),
    )
    .await;
    let db = TestDb::with_backlog(EVENTS).await;
    let queue = format!("obx-test-{}", uuid::Uuid::new_v4().simple());
    let (_conn, ch) = with_queue(&queue).await;
    let mut relay = db
        .relay(format!(
            "amqp://guest:guest@127.0.0.1:{}/%2f?routing_key={queue}",
            proxy.port
        ))
        .args(["--publish-timeout", "2s", "--lease", "10s"])
        .args(["--poll-interval", "100ms"])
        .quiet()
        .spawn();
    let published = || db.count("published_at IS NOT NULL");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(40);
    while published().await < EVENTS && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let _ = relay.kill();
    let _ = relay.wait();
    assert_eq!(published().await, EVENTS, "published through the slow link");
    let (attempts, dead) = crate::support::fixtures::max_attempts_and_dead(&db).await;
    assert_eq!(
        (attempts, dead),
        (1, 0),
        "a connecting sink counts no attempt"
    );
    // No attempt was counted twice, so no event was sent twice: each one is on the queue once.
    let mut keys = Vec::new();
    while let Some(msg) = ch
        .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        let doc: serde_json::Value = serde_json::from_slice(&msg.delivery.data).unwrap();
        keys.push(doc["idempotency_key"].as_str().unwrap().to_owned());
    }
    keys.sort();
    let mut expected: Vec<String> = (1..=EVENTS).map(|n| format!("k-{n}")).collect();
    expected.sort();
    assert_eq!(keys, expected, "every event on the queue exactly once");
    ch.queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
        .await
        .unwrap();
}
