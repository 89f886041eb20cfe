//! The Redis Streams sink against the real Redis on 127.0.0.1:6379.

use crate::support::{stderr, TestDb, UNTOUCHED};

#[tokio::test]
async fn appends_every_event_to_the_stream_with_its_dedup_id() {
    let db = TestDb::with_backlog(25).await;
    let stream = format!("obx-test-{}", uuid::Uuid::new_v4().simple());
    let v = db
        .relay(format!("redis://127.0.0.1:6379/0?stream={stream}"))
        .args(["--batch-size", "10"])
        .once_json();
    assert_eq!(v["published"], 25);

    let mut r = redis::Client::open("redis://127.0.0.1:6379/0")
        .unwrap()
        .get_connection()
        .expect("redis on 127.0.0.1:6379");
    let len: u64 = redis::cmd("XLEN").arg(&stream).query(&mut r).unwrap();
    assert_eq!(len, 25);
    let entries: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
        .arg(&stream)
        .arg("-")
        .arg("+")
        .query(&mut r)
        .unwrap();
    let mut ids = Vec::new();
    for (_, fields) in &entries {
        let f = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        let doc: serde_json::Value = serde_json::from_str(&f("event")).unwrap();
        assert_eq!(
            f("idempotency_key"),
            doc["idempotency_key"].as_str().unwrap()
        );
        assert_eq!(f("type"), "order.placed");
        ids.push(doc["id"].as_i64().unwrap());
    }
    ids.sort();
    assert_eq!(ids, (1..=25).collect::<Vec<_>>());
    let _: () = redis::cmd("DEL").arg(&stream).query(&mut r).unwrap();
    assert_eq!(db.count("published_at IS NULL").await, 0);
}

#[tokio::test]
async fn redis_down_is_retried_not_dead_lettered() {
    let db = TestDb::with_backlog(3).await;
    let out = db.relay("redis://127.0.0.1:9/0?stream=x").once(5);
    assert!(
        stderr(&out).contains("Redis: cannot connect"),
        "{}",
        stderr(&out)
    );
    assert_eq!(db.count(UNTOUCHED).await, 3, "an outage charges no attempt");
}

/// A Redis that answers every pipeline 800 ms late (the network in between is slow, the server is
/// not) is within `--publish-timeout 3s`: the batch is published, not an outage. The redis
/// crate's connection manager times every response out after 500 ms unless told otherwise.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_slower_than_half_a_second_but_within_the_publish_timeout_is_published() {
    let db = TestDb::with_backlog(30).await;
    let slow = crate::support::net_delay::NetDelay::start(
        "127.0.0.1:6379",
        std::time::Duration::from_millis(800),
    )
    .await;
    let stream = format!("obx-test-{}", uuid::Uuid::new_v4().simple());
    let v = db
        .relay(format!("redis://127.0.0.1:{}/0?stream={stream}", slow.port))
        .mode("lease")
        .args(["--publish-timeout", "3s", "--lease", "10s"])
        .once_json_off_runtime()
        .await;
    assert_eq!(v["published"], 30, "{v}");
    let mut r = redis::Client::open("redis://127.0.0.1:6379/0")
        .unwrap()
        .get_connection()
        .unwrap();
    let len: u64 = redis::cmd("XLEN").arg(&stream).query(&mut r).unwrap();
    let _: () = redis::cmd("DEL").arg(&stream).query(&mut r).unwrap();
    assert_eq!(len, 30);
    let (published, attempts): (i64, i64) = sqlx::query_as(
        "SELECT count(*) FILTER (WHERE published_at IS NOT NULL), max(attempt_count)::int8 FROM outbox",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        (published, attempts),
        (30, 1),
        "each published at its first attempt"
    );
}
