//! Rows in a given state, and small helpers, for the operating-command tests (dead, requeue,
//! events, prune). States are set with SQL relative to the database's now(), never by sleeping.

use serde_json::Value;
use std::process::Output;

use crate::common::{stderr, stdout, TestDb};

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

/// Runs the binary with `args`, asserting the exit code; returns the output.
pub fn run(db: &TestDb, args: &[&str], code: i32) -> Output {
    let out = db.cmd().args(args).output().expect("run outboxctl");
    assert_eq!(
        out.status.code(),
        Some(code),
        "outboxctl {}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        stdout(&out),
        stderr(&out)
    );
    out
}

/// Runs the binary and parses its stdout as JSON (exit code 0 expected).
pub fn run_json(db: &TestDb, args: &[&str]) -> Value {
    let out = run(db, args, 0);
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", stdout(&out)))
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

/// A relay daemon writing JSON lines to `path`, in `mode` (lease or tx), with small batches so
/// that it is still publishing while a test does something else.
pub fn spawn_relay(db: &TestDb, mode: &str, path: &std::path::Path) -> std::process::Child {
    db.cmd()
        .args([
            "relay",
            "--mode",
            mode,
            "--batch-size",
            "20",
            "--poll-interval",
            "100ms",
        ])
        .arg("--sink")
        .arg(format!("file:{}", path.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn relay")
}

/// How often each id occurs in the JSON-lines sink files.
pub fn deliveries(paths: &[&std::path::Path]) -> std::collections::HashMap<i64, usize> {
    let mut seen = std::collections::HashMap::new();
    for p in paths {
        for id in crate::common::ids_in_file(p) {
            *seen.entry(id).or_insert(0) += 1;
        }
    }
    seen
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
