//! `outboxctl doctor`: each check made to fail by really breaking what it looks at (a dropped or
//! invalid index, a disabled trigger, dead tuples, bloat, a transaction held open, old published
//! rows, a NATS stream with a short duplicate window), each in its own schema. Checks that look
//! at the whole server (autovacuum's server setting, the xmin horizon) are only asserted where a
//! test controls them: the held-open transaction's pid must be named, whatever else is open.

use std::process::Stdio;
use std::time::Duration;

use async_nats::jetstream;
use serde_json::Value;
use sqlx::{ConnectOptions, Connection};

use crate::support::fixtures;
use crate::support::{stderr, stdout, wait_until, TestDb};

/// `doctor --json` with `args`: the exit code and the report.
fn doctor(db: &TestDb, args: &[&str]) -> (i32, Value) {
    let out = db
        .cmd()
        .args(["doctor", "--json"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", stdout(&out), stderr(&out)));
    (out.status.code().unwrap(), v)
}

/// The check called `name` in a report.
fn find<'a>(v: &'a Value, name: &str) -> &'a Value {
    v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == name)
        .unwrap_or_else(|| panic!("no check {name} in {v:#}"))
}

fn status<'a>(v: &'a Value, name: &str) -> &'a str {
    find(v, name)["status"].as_str().unwrap()
}

fn message(v: &Value, name: &str) -> String {
    find(v, name)["message"].as_str().unwrap().to_owned()
}

/// Checks that look at the whole server or database, which other tests may move.
const SERVER_WIDE: [&str; 2] = ["autovacuum", "xmin_horizon"];

#[tokio::test]
async fn a_healthy_outbox_passes_every_check_of_its_own() {
    let db = TestDb::new().await;
    let (code, v) = doctor(&db, &[]);
    for c in v["checks"].as_array().unwrap() {
        if !SERVER_WIDE.contains(&c["name"].as_str().unwrap()) {
            assert_eq!(c["status"], "PASS", "{c:#}");
        }
    }
    for name in [
        "migrations",
        "index:outbox_ready_idx",
        "index:outbox_dead_idx",
        "index:outbox_published_at_idx",
        "index:outbox_idempotency_key_key",
        "trigger:outbox_notify_insert",
        "dead_tuples",
        "analyze",
        "table_bloat",
        "index_bloat",
        "autovacuum",
        "session_visibility",
        "xmin_horizon",
        "relays",
        "dead_letters",
        "blocked",
        "ordering_blocked",
        "oldest_pending",
        "prune",
    ] {
        find(&v, name);
    }
    let worst = v["status"].as_str().unwrap();
    assert_eq!(code, v["exit_code"].as_i64().unwrap() as i32);
    assert_eq!(
        code,
        match worst {
            "PASS" => 0,
            "WARN" => 1,
            _ => 2,
        }
    );
    assert!(code <= 1, "only a server-wide check may warn here: {v:#}");

    // The human form: one line per check, then the tally.
    let out = db.cmd().arg("doctor").output().unwrap();
    let text = stdout(&out);
    assert!(
        text.contains(&format!(
            "PASS  migrations: up to date ({} migrations)",
            crate::support::migrations()
        )),
        "{text}"
    );
    assert!(
        text.contains("PASS  index:outbox_ready_idx: present and valid"),
        "{text}"
    );
    assert!(text.lines().last().unwrap().contains("passed"), "{text}");
    assert_eq!(
        text.lines().count(),
        v["checks"].as_array().unwrap().len() + 1
    );
}

#[tokio::test]
async fn pending_migrations_fail() {
    let db = TestDb::new().await;
    db.exec("DELETE FROM _sqlx_migrations WHERE version = 5")
        .await;
    let (code, v) = doctor(&db, &[]);
    assert_eq!(code, 2, "{v:#}");
    assert_eq!(status(&v, "migrations"), "FAIL");
    assert!(
        message(&v, "migrations").contains("1 migration pending (5)"),
        "{v:#}"
    );

    // No outbox at all: migrations fail, and the table checks are not run.
    let none = TestDb::unmigrated().await;
    let (code, v) = doctor(&none, &[]);
    assert_eq!(code, 2);
    assert_eq!(status(&v, "migrations"), "FAIL");
    assert!(v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["name"] != "dead_letters"));
}

#[tokio::test]
async fn a_missing_or_invalid_index_and_a_disabled_trigger_fail() {
    let db = TestDb::new().await;
    db.exec("DROP INDEX outbox_dead_idx").await;
    // What a failed CREATE INDEX CONCURRENTLY leaves behind: an index marked not valid.
    db.exec(
        "UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'outbox_published_at_idx'::regclass",
    )
    .await;
    db.exec("ALTER TABLE outbox DISABLE TRIGGER outbox_notify_insert")
        .await;
    let (code, v) = doctor(&db, &[]);
    assert_eq!(code, 2);
    assert_eq!(status(&v, "index:outbox_dead_idx"), "FAIL");
    assert!(
        message(&v, "index:outbox_dead_idx").starts_with("missing"),
        "{v:#}"
    );
    assert_eq!(status(&v, "index:outbox_published_at_idx"), "FAIL");
    assert!(
        message(&v, "index:outbox_published_at_idx").contains("invalid"),
        "{v:#}"
    );
    assert_eq!(status(&v, "index:outbox_ready_idx"), "PASS");
    assert_eq!(status(&v, "trigger:outbox_notify_insert"), "FAIL");
    assert!(
        message(&v, "trigger:outbox_notify_insert").contains("disabled"),
        "{v:#}"
    );

    db.exec("DROP TRIGGER outbox_notify_insert ON outbox").await;
    let (_, v) = doctor(&db, &[]);
    assert!(
        message(&v, "trigger:outbox_notify_insert").starts_with("missing"),
        "{v:#}"
    );

    // Someone else's invalid index on the outbox: a warning.
    db.exec("CREATE INDEX app_extra_idx ON outbox (event_type)")
        .await;
    db.exec("UPDATE pg_index SET indisvalid = false WHERE indexrelid = 'app_extra_idx'::regclass")
        .await;
    let (_, v) = doctor(&db, &[]);
    assert_eq!(status(&v, "index:app_extra_idx"), "WARN");
}

#[tokio::test]
async fn dead_tuples_stale_statistics_and_autovacuum_off_on_the_table_are_reported() {
    let db = TestDb::new().await;
    db.exec("ALTER TABLE outbox SET (autovacuum_enabled = false)")
        .await;
    // Insert and update on one session, whose statistics are then flushed at once.
    let mut conn = db.pool.acquire().await.unwrap();
    sqlx::query(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         SELECT gen_random_uuid(), 'order', g::text, 'order.placed', '{}', 'k-' || g
           FROM generate_series(1, 12000) g",
    )
    .execute(&mut *conn)
    .await
    .unwrap();
    sqlx::query("UPDATE outbox SET attempt_count = 1")
        .execute(&mut *conn)
        .await
        .unwrap();
    // Statistics reach pg_stat_user_tables asynchronously: ask for this session's to be flushed,
    // then wait until they are there.
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(&mut *conn)
        .await
        .unwrap();
    drop(conn);
    wait_until(Duration::from_secs(30), "dead tuples in pg_stat_user_tables", || async {
        let (live, dead): (i64, i64) = db
            .row("SELECT n_live_tup, n_dead_tup FROM pg_stat_user_tables WHERE relid = 'outbox'::regclass")
            .await;
        live >= 12_000 && dead >= 12_000
    })
    .await;
    let (code, v) = doctor(&db, &[]);
    assert_eq!(code, 2, "{v:#}");
    assert_eq!(status(&v, "dead_tuples"), "WARN", "{v:#}");
    assert!(
        message(&v, "dead_tuples").contains("12000 dead of 24000"),
        "{v:#}"
    );
    assert_eq!(status(&v, "analyze"), "WARN", "{v:#}");
    assert_eq!(status(&v, "autovacuum"), "FAIL");
    assert!(
        message(&v, "autovacuum").contains("autovacuum_enabled=false"),
        "{v:#}"
    );
}

#[tokio::test]
async fn table_and_index_bloat_are_reported() {
    let db = TestDb::with_backlog(60_001).await;
    // Like a prune that deleted nearly everything: the files keep their size, one row is left
    // at the end so VACUUM cannot truncate the table.
    db.exec("DELETE FROM outbox WHERE id <= 60000").await;
    // VACUUM removes the dead rows' index entries only once no snapshot in the database is older
    // than the DELETE; another test may hold one for a moment, so vacuum until it could.
    wait_until(
        Duration::from_secs(60),
        "VACUUM removed the deleted rows",
        || async {
            db.exec("VACUUM ANALYZE outbox").await;
            let entries: f32 = db
                .scalar("SELECT reltuples FROM pg_class WHERE oid = 'outbox_ready_idx'::regclass")
                .await;
            entries < 100.0
        },
    )
    .await;
    let (_, v) = doctor(&db, &[]);
    assert_eq!(status(&v, "table_bloat"), "WARN", "{v:#}");
    assert_eq!(status(&v, "index_bloat"), "WARN", "{v:#}");
    let bloated: Vec<&str> = find(&v, "index_bloat")["details"]["bloated"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["index"].as_str().unwrap())
        .collect();
    assert!(bloated.contains(&"outbox_ready_idx"), "{bloated:?}");
}

#[tokio::test]
async fn a_transaction_held_open_is_named_with_its_pid_and_application_name() {
    let db = TestDb::new().await;
    let app = format!(
        "doctor-xmin-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    let opts: sqlx::postgres::PgConnectOptions = db.url.parse().unwrap();
    let mut holder = opts.application_name(&app).connect().await.unwrap();
    let mut tx = holder.begin().await.unwrap();
    let pid: i32 = sqlx::query_scalar("SELECT pg_backend_pid()")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    sqlx::query("SELECT txid_current()")
        .execute(&mut *tx)
        .await
        .unwrap();
    // Rows published while it is held: their old versions stay, and the check says what they cost.
    db.seed_ready(50).await;
    db.exec("UPDATE outbox SET published_at = now()").await;

    // Database-wide: other tests' transactions may be listed too; ours must be among them once it
    // is older than --max-xact-age (and the statistics have counted the dead rows).
    let mut last = Value::Null;
    wait_until(
        Duration::from_secs(20),
        "doctor names the held transaction and the dead rows",
        || {
            let (_, v) = doctor(&db, &["--max-xact-age", "1s"]);
            let check = find(&v, "xmin_horizon");
            let named = check["details"]["holders"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["pid"] == pid && h["name"] == app.as_str());
            let counted = check["details"]["outbox_dead_rows"].as_i64() >= Some(50);
            last = v;
            async move { named && counted }
        },
    )
    .await;
    let check = find(&last, "xmin_horizon");
    assert_ne!(check["status"], "PASS", "{check:#}");
    let message = check["message"].as_str().unwrap();
    assert!(
        message.contains("dead row versions meanwhile, which each relay's claim from the start"),
        "{message}"
    );
    let h = check["details"]["holders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["pid"] == pid)
        .unwrap();
    assert_eq!(h["kind"], "transaction");
    assert_eq!(h["state"], "idle in transaction");
    assert!(h["age_seconds"].as_f64().unwrap() > 1.0, "{h}");
    tx.rollback().await.unwrap();
    holder.close().await.unwrap();
    // Ended: our pid is no longer named.
    let (_, v) = doctor(&db, &["--max-xact-age", "1s"]);
    assert!(!find(&v, "xmin_horizon")["details"]["holders"]
        .as_array()
        .unwrap()
        .iter()
        .any(|h| h["pid"] == pid));
}

/// Kills the child on drop (also when the test fails).
struct Kill(std::process::Child);
impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn ready_events_without_a_relay_warn_and_a_connected_relay_is_listed() {
    let db = TestDb::new().await;
    fixtures::ready(&db).await;
    let (_, v) = doctor(&db, &[]);
    assert_eq!(status(&v, "relays"), "WARN", "{v:#}");
    assert!(
        message(&v, "relays").contains("no relay daemon listens"),
        "{v:#}"
    );

    let dir = tempfile::tempdir().unwrap();
    let relay = Kill(crate::support::spawn_relay(
        &db,
        "lease",
        &dir.path().join("out.jsonl"),
    ));
    let channel = format!("outboxctl:{}", db.schema);
    wait_until(Duration::from_secs(30), "the relay listens", || async {
        let mut c = db.pool.acquire().await.unwrap();
        outboxctl::db::is_listening(&mut c, &channel).await.unwrap()
    })
    .await;
    let (_, v) = doctor(&db, &[]);
    assert_eq!(status(&v, "relays"), "PASS", "{v:#}");
    let relays = find(&v, "relays")["details"]["relays"]
        .as_array()
        .unwrap()
        .clone();
    assert_eq!(relays.len(), 1, "{v:#}");
    // The relay names its sessions: its mode, daemon or --once, process id and schema.
    assert_eq!(
        relays[0]["application_name"],
        format!(
            "outboxctl relay lease daemon {} {}",
            relay.0.id(),
            db.schema
        )
    );
    assert!(
        message(&v, "relays").contains(&format!("pid {}", relays[0]["pid"])),
        "{v:#}"
    );
    drop(relay);
}

#[tokio::test]
async fn dead_letters_blocked_work_and_an_old_pending_event_are_reported() {
    let db = TestDb::new().await;
    let dead = fixtures::ready(&db).await;
    fixtures::kill(&db, dead, "5 minutes", "HTTP 500").await;
    let failing = fixtures::ready(&db).await;
    db.exec(&format!(
        "UPDATE outbox SET attempt_count = 3 WHERE id = {failing}"
    ))
    .await;
    let leased = fixtures::ready(&db).await;
    db.exec(&format!(
        "UPDATE outbox SET locked_until = now() + interval '2 hours' WHERE id = {leased}"
    ))
    .await;
    let old = fixtures::ready(&db).await;
    fixtures::created(&db, old, "2 hours").await;

    let (code, v) = doctor(&db, &[]);
    assert_eq!(code, 2);
    assert_eq!(status(&v, "dead_letters"), "WARN");
    assert!(
        message(&v, "dead_letters").starts_with("1 dead letter (newest 5m"),
        "{v:#}"
    );
    assert_eq!(status(&v, "blocked"), "WARN");
    let b = &find(&v, "blocked")["details"];
    assert_eq!(
        (
            b["retrying"].as_i64(),
            b["long_leased"].as_i64(),
            b["max_attempts"].as_i64()
        ),
        (Some(1), Some(1), Some(3))
    );
    assert_eq!(status(&v, "oldest_pending"), "FAIL");
    assert!(
        message(&v, "oldest_pending").contains("longer than --crit-lag 1h"),
        "{v:#}"
    );

    // Thresholds move the verdict.
    let (_, v) = doctor(&db, &["--warn-lag", "1h", "--crit-lag", "3h"]);
    assert_eq!(status(&v, "oldest_pending"), "WARN");
    let (_, v) = doctor(&db, &["--warn-lag", "3h", "--crit-lag", "4h"]);
    assert_eq!(status(&v, "oldest_pending"), "PASS");
    let out = db
        .cmd()
        .args(["doctor", "--warn-lag", "2h", "--crit-lag", "1h"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--warn-lag is longer than --crit-lag"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn published_rows_past_retention_mean_prune_is_not_running() {
    let db = TestDb::new().await;
    let id = fixtures::ready(&db).await;
    fixtures::publish(&db, id, "40 days").await;
    let recent = fixtures::ready(&db).await;
    fixtures::publish(&db, recent, "1 day").await;
    let (code, v) = doctor(&db, &[]);
    assert_eq!(code, 1, "{v:#}");
    assert_eq!(status(&v, "prune"), "WARN");
    assert!(message(&v, "prune").contains("last prune never"), "{v:#}");
    let (_, v) = doctor(&db, &["--retention", "60d"]);
    assert_eq!(status(&v, "prune"), "PASS");

    let out = db
        .cmd()
        .args(["prune", "--older-than", "30d"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let (_, v) = doctor(&db, &[]);
    assert_eq!(status(&v, "prune"), "PASS", "{v:#}");
    assert!(
        message(&v, "prune").contains("oldest published event 1day"),
        "{v:#}"
    );
    assert!(!message(&v, "prune").contains("last prune never"), "{v:#}");
}

#[tokio::test]
async fn a_lease_not_longer_than_the_publish_timeout_fails() {
    let db = TestDb::new().await;
    let (code, v) = doctor(&db, &["--lease", "10s", "--publish-timeout", "10s"]);
    assert_eq!(code, 2);
    assert_eq!(status(&v, "settings:lease"), "FAIL");
    assert!(
        message(&v, "settings:lease")
            .contains("--publish-timeout 10s is not shorter than --lease 10s"),
        "{v:#}"
    );
    // The relay's own variables are read too; the default publish timeout is half the lease.
    let out = db
        .cmd()
        .args(["doctor", "--json"])
        .env("OUTBOXCTL_LEASE", "20s")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status(&v, "settings:lease"), "PASS");
    // Without relay settings there is nothing to compare.
    let (_, v) = doctor(&db, &[]);
    assert!(v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["name"] != "settings:lease"));
}

/// Deletes the stream on drop.
struct Stream(jetstream::Context, String);
impl Drop for Stream {
    fn drop(&mut self) {
        let (js, name) = (self.0.clone(), self.1.clone());
        let _ = std::thread::spawn(move || {
            tokio::runtime::Runtime::new()
                .unwrap()
                .block_on(async move { js.delete_stream(name).await })
        })
        .join();
    }
}

#[tokio::test]
async fn a_nats_duplicate_window_shorter_than_the_retry_horizon_warns() {
    let db = TestDb::new().await;
    let prefix = format!("doc{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
    let js = jetstream::new(
        async_nats::connect("127.0.0.1:4222")
            .await
            .expect("nats-server"),
    );
    js.create_stream(jetstream::stream::Config {
        name: prefix.to_uppercase(),
        subjects: vec![format!("{prefix}.>")],
        duplicate_window: Duration::from_secs(120),
        ..Default::default()
    })
    .await
    .unwrap();
    let _stream = Stream(js.clone(), prefix.to_uppercase());
    let sink = format!("nats://127.0.0.1:4222?subject={prefix}.{{event_type}}");

    // The relay's defaults: 10 attempts, backoff 1s..5m (1+2+...+256 s), publish timeout 15s
    // each: 661 s > 2 min.
    let (code, v) = doctor(&db, &["--sink", &sink]);
    assert!(code >= 1);
    let c = find(&v, "settings:nats_duplicate_window");
    assert_eq!(c["status"], "WARN", "{c:#}");
    assert_eq!(c["details"]["stream"], prefix.to_uppercase());
    assert_eq!(c["details"]["duplicate_window_seconds"], 120.0);
    assert_eq!(c["details"]["retry_horizon_seconds"], 661.0);

    // Few, short retries fit in the window.
    let (_, v) = doctor(
        &db,
        &[
            "--sink",
            &sink,
            "--max-attempts",
            "3",
            "--backoff-max",
            "10s",
            "--publish-timeout",
            "5s",
        ],
    );
    assert_eq!(
        status(&v, "settings:nats_duplicate_window"),
        "PASS",
        "{v:#}"
    );

    // No stream captures the subject: said so.
    let (_, v) = doctor(
        &db,
        &[
            "--sink",
            "nats://127.0.0.1:4222?subject=nostream-doctor-x.{event_type}",
        ],
    );
    assert!(
        message(&v, "settings:nats_duplicate_window").contains("no JetStream stream captures"),
        "{v:#}"
    );
}

/// Prepared transactions and replication slots need server settings the shared server does not
/// have (`max_prepared_transactions`, `wal_level = logical`): a private cluster on a port of this
/// test's own, dropped afterwards.
#[tokio::test]
async fn a_prepared_transaction_and_a_replication_slot_holding_the_horizon_are_named() {
    let cluster = crate::support::servers::PgCluster::start("doctor_horizon", 18452);
    {
        let mut admin = sqlx::PgConnection::connect(&cluster.url()).await.unwrap();
        for setting in ["max_prepared_transactions = 5", "wal_level = logical"] {
            sqlx::raw_sql(&format!("ALTER SYSTEM SET {setting}"))
                .execute(&mut admin)
                .await
                .unwrap();
        }
        admin.close().await.unwrap();
    }
    cluster.restart();
    let db = TestDb::new_at(&cluster.url()).await;
    let mut conn = sqlx::PgConnection::connect(&cluster.url()).await.unwrap();
    // The slot first: creating a logical slot waits for every running transaction to end.
    sqlx::query("SELECT pg_create_logical_replication_slot('doctor_slot', 'test_decoding')")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::raw_sql("BEGIN; CREATE TABLE prepared_probe (x int); PREPARE TRANSACTION 'doctor-gid'")
        .execute(&mut conn)
        .await
        .unwrap();

    let mut last = Value::Null;
    wait_until(
        Duration::from_secs(20),
        "doctor names the prepared transaction",
        || {
            let (_, v) = doctor(&db, &["--max-xact-age", "1s"]);
            let named = find(&v, "xmin_horizon")["details"]["holders"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["kind"] == "prepared transaction" && h["name"] == "doctor-gid");
            last = v;
            async move { named }
        },
    )
    .await;
    let check = find(&last, "xmin_horizon");
    assert_eq!(check["status"], "WARN", "{check:#}");
    let slot = check["details"]["holders"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["kind"] == "replication slot")
        .unwrap_or_else(|| panic!("no slot in {check:#}"));
    assert_eq!(
        (slot["name"].as_str(), slot["state"].as_str()),
        (Some("doctor_slot"), Some("inactive"))
    );
    let text = check["message"].as_str().unwrap();
    assert!(
        text.contains("prepared transaction (name `doctor-gid`"),
        "{text}"
    );
    assert!(
        text.contains("replication slot (name `doctor_slot`, inactive"),
        "{text}"
    );

    // One statement each: ROLLBACK PREPARED refuses to run in a multi-statement (implicit) block.
    for sql in [
        "ROLLBACK PREPARED 'doctor-gid'",
        "SELECT pg_drop_replication_slot('doctor_slot')",
    ] {
        sqlx::raw_sql(sql).execute(&mut conn).await.unwrap();
    }
    let (_, v) = doctor(&db, &["--max-xact-age", "1s"]);
    assert_eq!(status(&v, "xmin_horizon"), "PASS", "{v:#}");
    conn.close().await.unwrap();
    drop(db);
}

/// A check whose reads fail is a FAIL with the database's reason, and every other check still
/// runs: doctor printed only `error: permission denied ...`, nothing with --json, and exited 1
/// (its code for "warnings only").
#[tokio::test]
async fn a_check_that_cannot_read_fails_with_the_reason_and_the_others_still_run() {
    let db = TestDb::new().await;
    fixtures::ready(&db).await;
    // A role that may read every table of the schema but the outbox itself.
    let role = crate::support::TestRole::new(&db).await;
    db.exec(&format!(
        "GRANT USAGE ON SCHEMA \"{s}\" TO \"{r}\";
         GRANT SELECT ON ALL TABLES IN SCHEMA \"{s}\" TO \"{r}\";
         REVOKE SELECT ON outbox FROM \"{r}\"",
        s = db.schema,
        r = role.name
    ))
    .await;
    let run = |args: &[&str]| {
        db.cmd()
            .env("DATABASE_URL", role.url())
            .arg("doctor")
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let out = run(&["--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}{}", stdout(&out), stderr(&out)));
    for name in [
        "relays",
        "dead_letters",
        "blocked",
        "oldest_pending",
        "prune",
    ] {
        assert_eq!(status(&v, name), "FAIL", "{name}: {v:#}");
        assert!(
            message(&v, name).starts_with("could not check: ")
                && message(&v, name).contains("permission denied for table outbox"),
            "{name}: {v:#}"
        );
        assert!(find(&v, name)["details"]["error"].is_string(), "{name}");
    }
    for name in [
        "migrations",
        "index:outbox_ready_idx",
        "trigger:outbox_notify_insert",
        "dead_tuples",
        "table_bloat",
    ] {
        assert_eq!(status(&v, name), "PASS", "{name} still runs: {v:#}");
    }
    assert_eq!(v["status"], "FAIL");
    // The text report says the same, one line per check.
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.lines()
            .any(|l| l.starts_with("FAIL  oldest_pending: could not check: ")
                && l.contains("permission denied for table outbox")),
        "{text}"
    );
    assert!(
        text.lines().any(|l| l.starts_with("PASS  migrations: ")),
        "{text}"
    );
    assert!(text.lines().last().unwrap().starts_with("FAIL: "), "{text}");
}

/// Someone else's `outbox` table (other columns): the migrations check says it conflicts, the
/// checks that read events say why they cannot, and the report is still printed (exit 2).
#[tokio::test]
async fn someone_elses_outbox_table_is_reported_check_by_check() {
    let db = TestDb::unmigrated().await;
    db.exec(&format!(
        "CREATE SCHEMA \"{s}\";
         CREATE TABLE \"{s}\".outbox (id bigserial PRIMARY KEY, topic text NOT NULL, body jsonb);
         INSERT INTO \"{s}\".outbox (topic, body) VALUES ('t', '{{}}')",
        s = db.schema
    ))
    .await;
    let (code, v) = doctor(&db, &[]);
    assert_eq!(code, 2, "{v:#}");
    assert_eq!(status(&v, "migrations"), "FAIL");
    assert!(message(&v, "migrations").contains("conflict"), "{v:#}");
    for name in ["dead_letters", "oldest_pending", "prune"] {
        assert_eq!(status(&v, name), "FAIL", "{name}: {v:#}");
        assert!(
            message(&v, name).contains("does not exist"),
            "{name}: {v:#}"
        );
    }
    // What does not depend on the table's columns still runs.
    for name in ["dead_tuples", "table_bloat", "xmin_horizon"] {
        assert_ne!(find(&v, name)["message"], "", "{name}");
        assert!(
            !message(&v, name).starts_with("could not check"),
            "{name}: {v:#}"
        );
    }
}

#[tokio::test]
async fn log_mode_checks_the_xid_index_the_reader_and_how_far_behind_the_position_is() {
    let db = TestDb::new().await;
    crate::support::run(&db, &["log", "enable"], 0);
    db.seed_ready(3).await;
    db.exec("UPDATE outbox SET created_at = now() - interval '10 minutes'")
        .await;
    let lags = ["--warn-lag", "1m", "--crit-lag", "5m"];
    let (code, v) = doctor(&db, &lags);
    assert_eq!(code, 2, "{v:#}");
    assert_eq!(status(&v, "index:outbox_xid_idx"), "PASS");
    assert_eq!(status(&v, "log_reader"), "WARN");
    assert!(
        message(&v, "log_reader").contains("3 events wait past the log's position"),
        "{}",
        message(&v, "log_reader")
    );
    let behind = crate::support::run_json(&db, &["log", "status", "--json"])["behind"].clone();
    assert_eq!(behind, 3);
    assert_eq!(find(&v, "log_position")["details"]["behind"], behind);
    assert_eq!(
        status(&v, "log_position"),
        "FAIL",
        "10 minutes > --crit-lag 5m"
    );
    let (_, v) = doctor(&db, &["--warn-lag", "20m", "--crit-lag", "1h"]);
    assert_eq!(status(&v, "log_position"), "PASS");
    assert!(
        message(&v, "relays").contains("nothing published yet"),
        "{}",
        message(&v, "relays")
    );

    // The log drains: nothing behind, no warning without a reader; the last publish is the log's
    // last page (it marks no row).
    assert_eq!(db.relay("null").once_json()["published"], 3);
    let (_, v) = doctor(&db, &lags);
    assert_eq!(db.count("published_at IS NOT NULL").await, 0);
    assert!(
        !find(&v, "relays")["details"]["last_publish"].is_null()
            && message(&v, "relays").contains("last publish"),
        "{v:#}"
    );
    assert_eq!(status(&v, "log_reader"), "PASS", "{v:#}");
    assert_eq!(status(&v, "log_position"), "PASS");
    assert_eq!(find(&v, "log_position")["details"]["behind"], 0);
    assert_eq!(status(&v, "oldest_pending"), "PASS", "{v:#}");

    db.exec("DROP INDEX outbox_xid_idx").await;
    let (_, v) = doctor(&db, &[]);
    assert_eq!(status(&v, "index:outbox_xid_idx"), "FAIL");
    assert!(message(&v, "index:outbox_xid_idx").contains("log enable"));

    crate::support::run(&db, &["log", "disable"], 0);
    let (_, v) = doctor(&db, &[]);
    for name in ["index:outbox_xid_idx", "log_reader", "log_position"] {
        assert!(
            !v["checks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|c| c["name"] == name),
            "{name} only in log mode: {v:#}"
        );
    }
}
