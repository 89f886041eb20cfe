//! Rows in a given state, and small helpers, for the operating-command tests (dead, requeue,
//! events, prune). States are set with SQL relative to the database's now(), never by sleeping.

use serde_json::Value;

use super::TestDb;

pub const TENANT_A: &str = "00000000-0000-0000-0000-00000000000a";
pub const TENANT_B: &str = "00000000-0000-0000-0000-00000000000b";

/// Inserts one ready event and returns its id.
pub async fn insert(
    db: &TestDb,
    event_type: &str,
    aggregate_type: &str,
    aggregate_id: &str,
    tenant: &str,
) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers,
                             idempotency_key)
         VALUES ($1::uuid, $2, $3, $4, jsonb_build_object('aggregate', $3::text, 'n', 1),
                 '{\"schema-version\": \"1\"}', gen_random_uuid()::text)
         RETURNING id",
    )
    .bind(tenant)
    .bind(aggregate_type)
    .bind(aggregate_id)
    .bind(event_type)
    .fetch_one(&db.pool)
    .await
    .expect("insert")
}

/// A ready order.placed event for tenant A.
pub async fn ready(db: &TestDb) -> i64 {
    insert(db, "order.placed", "order", "o-1", TENANT_A).await
}

/// Makes `id` dead-lettered `ago` (an SQL interval, e.g. '10 minutes') with `error`, the way the
/// relay leaves it: attempts used up, no lease, but the last claim's token still set.
pub async fn kill(db: &TestDb, id: i64, ago: &str, error: &str) {
    sqlx::query(
        "UPDATE outbox SET dead_lettered_at = now() - $2::interval, attempt_count = 10,
                last_error = $3, locked_until = now() - interval '1 minute',
                claim_token = gen_random_uuid()
          WHERE id = $1",
    )
    .bind(id)
    .bind(ago)
    .bind(error)
    .execute(&db.pool)
    .await
    .expect("kill");
}

/// Marks `id` published `ago`.
pub async fn publish(db: &TestDb, id: i64, ago: &str) {
    sqlx::query(
        "UPDATE outbox SET published_at = now() - $2::interval, attempt_count = 1 WHERE id = $1",
    )
    .bind(id)
    .bind(ago)
    .execute(&db.pool)
    .await
    .expect("publish");
}

/// Makes `id` due in an hour.
pub async fn schedule(db: &TestDb, id: i64) {
    sqlx::query("UPDATE outbox SET available_at = now() + interval '1 hour' WHERE id = $1")
        .bind(id)
        .execute(&db.pool)
        .await
        .expect("schedule");
}

/// Leases `id` to a relay for the next 5 minutes.
pub async fn lease(db: &TestDb, id: i64) {
    sqlx::query(
        "UPDATE outbox SET locked_until = now() + interval '5 minutes', claim_token = gen_random_uuid(),
                attempt_count = attempt_count + 1
          WHERE id = $1",
    )
    .bind(id)
    .execute(&db.pool)
    .await
    .expect("lease");
}

/// Sets `created_at` (and available_at) of `id` to `ago`.
pub async fn created(db: &TestDb, id: i64, ago: &str) {
    sqlx::query(
        "UPDATE outbox SET created_at = now() - $2::interval, available_at = now() - $2::interval
          WHERE id = $1",
    )
    .bind(id)
    .bind(ago)
    .execute(&db.pool)
    .await
    .expect("created");
}

/// Ids returned by a query, sorted.
pub async fn ids(db: &TestDb, sql: &str) -> Vec<i64> {
    let mut v: Vec<i64> = sqlx::query_scalar(sql)
        .fetch_all(&db.pool)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    v.sort_unstable();
    v
}

/// A fingerprint of every row of the outbox (and the audit table): equal before and after means
/// nothing changed.
pub async fn snapshot(db: &TestDb) -> String {
    db.scalar(
        "SELECT coalesce(md5(string_agg(o::text, '|' ORDER BY id)), '')
                || (SELECT count(*) FROM outbox_audit)::text
           FROM outbox o",
    )
    .await
}

/// The `id`s of a JSON list's `events`, in order.
pub fn event_ids(v: &Value) -> Vec<i64> {
    v["events"]
        .as_array()
        .unwrap_or_else(|| panic!("no events in {v}"))
        .iter()
        .map(|e| e["id"].as_i64().unwrap())
        .collect()
}

/// The highest attempt count of the outbox and how many of its rows are dead letters: what a
/// fault that is the sink's, not the events', must leave at (1, 0) after a drain.
pub async fn max_attempts_and_dead(db: &TestDb) -> (i32, i64) {
    sqlx::query_as(
        "SELECT max(attempt_count), count(*) FILTER (WHERE dead_lettered_at IS NOT NULL) FROM outbox",
    )
    .fetch_one(&db.pool)
    .await
    .expect("attempts and dead letters")
}

/// Five dead letters differing in every filterable field, plus non-dead rows that carry the same
/// values and must never be selected. Returns the dead ids, newest dead first.
pub async fn dead_fixture(db: &TestDb) -> [i64; 5] {
    let d1 = insert(db, "order.placed", "order", "o-1", TENANT_A).await;
    kill(
        db,
        d1,
        "10 minutes",
        "HTTP 503 Service Unavailable\n  at sink.publish",
    )
    .await;
    let d2 = insert(db, "order.cancelled", "order", "o-2", TENANT_A).await;
    kill(db, d2, "2 hours", "connection timeout after 5s").await;
    let d3 = insert(db, "user.created", "user", "u-1", TENANT_B).await;
    kill(db, d3, "1 day", "HTTP 400 bad payload").await;
    let d4 = insert(db, "order_x.placed", "order", "o-1", TENANT_B).await;
    kill(db, d4, "30 minutes", "Timeout: 50% of budget used").await;
    let d5 = insert(db, "orderxx.placed", "order", "o-3", TENANT_A).await;
    kill(db, d5, "5 days", "HTTP 503").await;

    // Same types, aggregates and errors, but not dead.
    let r = ready(db).await;
    db.exec(&format!(
        "UPDATE outbox SET last_error = 'HTTP 503 timeout', attempt_count = 2 WHERE id = {r}"
    ))
    .await;
    let p = ready(db).await;
    publish(db, p, "1 minute").await;
    let s = insert(db, "user.created", "user", "u-1", TENANT_B).await;
    schedule(db, s).await;
    let f = insert(db, "order.placed", "order", "o-1", TENANT_A).await;
    lease(db, f).await;
    [d1, d4, d2, d3, d5]
}

/// Seed 000's DDL, verbatim (migrations/0001_outbox.sql has the same statements).
pub const SEED_DDL: &str = "
CREATE TABLE outbox (
  id                bigserial    PRIMARY KEY,
  tenant_id         uuid         NOT NULL,
  aggregate_type    text         NOT NULL,
  aggregate_id      text         NOT NULL,
  event_type        text         NOT NULL,
  payload           jsonb        NOT NULL,
  headers           jsonb        NOT NULL DEFAULT '{}'::jsonb,
  idempotency_key   text         NOT NULL,
  created_at        timestamptz  NOT NULL DEFAULT now(),
  available_at      timestamptz  NOT NULL DEFAULT now(),
  locked_until      timestamptz,
  attempt_count     integer      NOT NULL DEFAULT 0,
  published_at      timestamptz,
  dead_lettered_at  timestamptz,
  last_error        text,
  CONSTRAINT outbox_idempotency_key_key UNIQUE (idempotency_key)
);

-- The only index the relay's claim query needs. Partial => stays small.
CREATE INDEX outbox_ready_idx
  ON outbox (available_at, id)
  WHERE published_at IS NULL AND dead_lettered_at IS NULL;

CREATE TABLE processed_messages (
  consumer     text        NOT NULL,
  message_id   text        NOT NULL,
  processed_at timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (consumer, message_id)
);
";
