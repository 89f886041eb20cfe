//! `requeue`: what it resets, what it keeps, its audit trail, its selection, and that it is safe
//! against itself.

use crate::support::fixtures::*;
use crate::support::{deliveries, run, run_json, spawn_relay, stderr, stdout, TestDb};

type Ts = chrono::DateTime<chrono::Utc>;

#[tokio::test]
async fn requeue_resets_the_row_keeps_last_error_and_records_an_audit_row() {
    let db = TestDb::new().await;
    let d1 = ready(&db).await;
    kill(&db, d1, "10 minutes", "HTTP 503\nbody: busy").await;
    let d2 = ready(&db).await;
    kill(&db, d2, "20 minutes", "HTTP 500").await;
    let before_dead: Ts = db
        .scalar(&format!(
            "SELECT dead_lettered_at FROM outbox WHERE id = {d1}"
        ))
        .await;

    let out = run(
        &db,
        &["requeue", &d1.to_string(), "--reason", "broker fixed"],
        0,
    );
    assert!(
        stdout(&out).starts_with("requeued 1 dead event in 1 batch"),
        "{}",
        stdout(&out)
    );
    #[derive(sqlx::FromRow)]
    struct Row {
        dead_lettered_at: Option<Ts>,
        attempt_count: i32,
        locked_until: Option<Ts>,
        claim_token: Option<uuid::Uuid>,
        due_now: bool,
        last_error: Option<String>,
    }
    let row: Row = sqlx::query_as(
        "SELECT dead_lettered_at, attempt_count, locked_until, claim_token,
                available_at BETWEEN now() - interval '1 minute' AND now() AS due_now, last_error
           FROM outbox WHERE id = $1",
    )
    .bind(d1)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let (dead, attempts, locked, token, due_now, error) = (
        row.dead_lettered_at,
        row.attempt_count,
        row.locked_until,
        row.claim_token,
        row.due_now,
        row.last_error,
    );
    assert_eq!(dead, None);
    assert_eq!(attempts, 0);
    assert_eq!(locked, None);
    assert_eq!(
        token, None,
        "a stale settle from the last claim must match nothing"
    );
    assert!(due_now);
    assert_eq!(
        error.as_deref(),
        Some("HTTP 503\nbody: busy"),
        "last_error is kept"
    );
    let state: String = db
        .scalar(&format!(
            "SELECT CASE WHEN dead_lettered_at IS NULL THEN 'alive' ELSE 'dead' END FROM outbox WHERE id = {d2}"
        ))
        .await;
    assert_eq!(state, "dead", "other dead rows untouched");

    #[derive(sqlx::FromRow)]
    struct Audit {
        event_id: i64,
        requeued_by: String,
        reason: Option<String>,
        previous_dead_lettered_at: Option<Ts>,
        previous_attempt_count: i32,
        previous_last_error: Option<String>,
        kept_attempts: bool,
    }
    let a: Audit = sqlx::query_as(
        "SELECT event_id, requeued_by, reason, previous_dead_lettered_at, previous_attempt_count,
                previous_last_error, kept_attempts FROM outbox_requeues",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let audit = (
        a.event_id,
        a.requeued_by,
        a.reason,
        a.previous_dead_lettered_at,
        a.previous_attempt_count,
        a.previous_last_error,
        a.kept_attempts,
    );
    assert_eq!(audit.0, d1);
    assert_eq!(audit.1, "postgres");
    assert_eq!(audit.2.as_deref(), Some("broker fixed"));
    assert_eq!(audit.3, Some(before_dead));
    assert_eq!(audit.4, 10);
    assert_eq!(audit.5.as_deref(), Some("HTTP 503\nbody: busy"));
    assert!(!audit.6);
    let v = run_json(&db, &["events", "show", &d1.to_string(), "--json"]);
    assert_eq!(v["state"], "ready");
    assert_eq!(v["requeues"][0]["reason"], "broker fixed");
    assert_eq!(v["requeues"][0]["previous_attempt_count"], 10);

    // --keep-attempts and --delay.
    run(
        &db,
        &[
            "requeue",
            &d2.to_string(),
            "--keep-attempts",
            "--delay",
            "1h",
        ],
        0,
    );
    let (attempts, later, kept): (i32, bool, bool) = sqlx::query_as(
        "SELECT o.attempt_count, o.available_at > now() + interval '59 minutes', r.kept_attempts
           FROM outbox o JOIN outbox_requeues r ON r.event_id = o.id WHERE o.id = $1",
    )
    .bind(d2)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((attempts, later, kept), (10, true, true));
    let v = run_json(&db, &["events", "show", &d2.to_string(), "--json"]);
    assert_eq!(v["state"], "scheduled");

    // Requeued rows are no longer dead: asking again is refused and changes nothing.
    let before = snapshot(&db).await;
    let out = run(&db, &["requeue", &d1.to_string()], 2);
    assert!(
        stderr(&out).contains(&format!("event {d1} is ready, not dead-lettered")),
        "{}",
        stderr(&out)
    );
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn requeue_by_filter_all_and_limit_touches_only_selected_dead_rows() {
    let db = TestDb::new().await;
    let [d1, d4, d2, d3, d5] = dead_fixture(&db).await;
    let alive_before: String = db
        .scalar("SELECT md5(string_agg(o::text, '|' ORDER BY id)) FROM outbox o WHERE dead_lettered_at IS NULL")
        .await;

    let v = run_json(&db, &["requeue", "--event-type", "order.*", "--json"]);
    assert_eq!(v["ids"], serde_json::json!([d1.min(d2), d1.max(d2)]));
    assert_eq!(v["requeued"], 2);
    assert_eq!(
        ids(
            &db,
            "SELECT id FROM outbox WHERE dead_lettered_at IS NOT NULL"
        )
        .await,
        {
            let mut v = vec![d4, d3, d5];
            v.sort();
            v
        }
    );
    // --limit takes the most recently dead first.
    let v = run_json(&db, &["requeue", "--all", "--limit", "2", "--json"]);
    let mut want = vec![d4, d3];
    want.sort();
    assert_eq!(v["ids"], serde_json::json!(want));
    let v = run_json(&db, &["requeue", "--all", "--json"]);
    assert_eq!(v["ids"], serde_json::json!([d5]));
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_requeues")
            .await,
        5
    );
    let alive_after: String = db
        .scalar(&format!(
            "SELECT md5(string_agg(o::text, '|' ORDER BY id)) FROM outbox o
              WHERE dead_lettered_at IS NULL AND id NOT IN ({d1}, {d2}, {d3}, {d4}, {d5})"
        ))
        .await;
    assert_eq!(
        alive_before, alive_after,
        "rows that were not dead are untouched"
    );
    let out = run(&db, &["requeue", "--all"], 0);
    assert!(stdout(&out).contains("no dead-lettered events match; nothing requeued"));
}

#[tokio::test]
async fn dry_run_lists_exactly_what_the_real_run_requeues_in_batches() {
    let db = TestDb::with_backlog(40).await;
    db.exec(
        "UPDATE outbox SET dead_lettered_at = now() - (id || ' minutes')::interval,
                attempt_count = 5, last_error = 'boom'",
    )
    .await;
    let before = snapshot(&db).await;
    let v = run_json(&db, &["requeue", "--since", "30m", "--dry-run", "--json"]);
    let mut would = event_ids(&v);
    assert_eq!(v["matched"], 29, "{v}"); // dead 1..29 minutes ago
    let out = run(&db, &["requeue", "--since", "30m", "--dry-run"], 0);
    assert!(
        stdout(&out).contains("would requeue 29 dead events, due now, attempts reset to 0"),
        "{}",
        stdout(&out)
    );
    assert_eq!(snapshot(&db).await, before, "--dry-run changes nothing");

    let v = run_json(
        &db,
        &["requeue", "--since", "30m", "--batch-size", "7", "--json"],
    );
    would.sort();
    assert_eq!(v["ids"], serde_json::json!(would));
    assert_eq!(v["batches"], 5);
    assert_eq!(v["requeued"], 29);
    assert_eq!(v["skipped"], 0);
    assert_eq!(
        ids(&db, "SELECT id FROM outbox WHERE dead_lettered_at IS NULL").await,
        would
    );
}

#[tokio::test]
async fn refuses_without_a_clear_selection_and_changes_nothing() {
    let db = TestDb::new().await;
    let d = ready(&db).await;
    kill(&db, d, "1 minute", "boom").await;
    let before = snapshot(&db).await;
    for (args, needle) in [
        (vec!["requeue"], "--all"),
        (vec!["requeue", "--limit", "5"], "--all"),
        (vec!["requeue", "1", "--event-type", "x"], "not both"),
        (vec!["requeue", "--all", "--tenant", TENANT_A], "--all"),
        (vec!["requeue", "--all", "--reason", " "], "--reason"),
        (vec!["requeue", "999999"], "no event 999999"),
        (vec!["requeue", "--all", "--delay", "soon"], "--delay"),
    ] {
        let out = run(&db, &args, 2);
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(snapshot(&db).await, before);
}

#[tokio::test]
async fn concurrent_requeues_requeue_each_row_exactly_once() {
    let db = TestDb::with_backlog(300).await;
    db.exec("UPDATE outbox SET dead_lettered_at = now(), attempt_count = 10, last_error = 'x'")
        .await;
    let children: Vec<_> = (0..3)
        .map(|_| {
            db.cmd()
                .args(["requeue", "--all", "--batch-size", "10", "--json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut requeued = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        requeued += v["requeued"].as_u64().unwrap();
    }
    assert_eq!(requeued, 300);
    assert_eq!(
        db.scalar::<i64>("SELECT count(DISTINCT event_id) FROM outbox_requeues")
            .await,
        300
    );
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_requeues")
            .await,
        300
    );
    assert_eq!(
        db.scalar::<i64>(
            "SELECT count(*) FROM outbox WHERE dead_lettered_at IS NULL AND attempt_count = 0"
        )
        .await,
        300
    );
}

#[tokio::test]
async fn requeue_while_two_relays_run_publishes_each_requeued_event_exactly_once() {
    let db = TestDb::with_backlog(3_000).await;
    // 2,000 dead letters (with the stale claim token the relay leaves), 1,000 ready events
    // flowing through the relays while the requeues run.
    db.exec(
        "UPDATE outbox SET dead_lettered_at = now() - interval '1 minute', attempt_count = 10,
                last_error = 'sink down', claim_token = gen_random_uuid()
          WHERE id < (SELECT min(id) + 2000 FROM outbox)",
    )
    .await;
    let all = ids(&db, "SELECT id FROM outbox").await;
    let dead = ids(
        &db,
        "SELECT id FROM outbox WHERE dead_lettered_at IS NOT NULL",
    )
    .await;
    assert_eq!(dead.len(), 2_000);
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let relays = [spawn_relay(&db, "lease", &a), spawn_relay(&db, "tx", &b)];

    // Two operators requeue everything at once, in small batches, while the relays claim,
    // publish and mark what each batch releases.
    let requeues: Vec<_> = (0..2)
        .map(|_| {
            db.cmd()
                .args(["requeue", "--all", "--batch-size", "50", "--json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut requeued = 0;
    for r in requeues {
        let out = r.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        requeued += v["requeued"].as_u64().unwrap();
    }
    assert_eq!(
        requeued, 2_000,
        "each dead row requeued by exactly one of the two"
    );

    crate::support::wait_until(
        std::time::Duration::from_secs(120),
        "every event published",
        || async { db.count("published_at IS NULL").await == 0 },
    )
    .await;
    for r in relays {
        crate::support::signal(&r, "TERM");
        let out = r.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let seen = deliveries(&[&a, &b]);
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "published more than once: {twice:?}");
    let mut got: Vec<i64> = seen.keys().copied().collect();
    got.sort();
    assert_eq!(got, all, "every event, requeued or not, published");
    assert_eq!(
        db.scalar::<i64>("SELECT count(DISTINCT event_id) FROM outbox_requeues")
            .await,
        2_000
    );
    assert_eq!(
        db.scalar::<i64>(
            "SELECT count(*) FROM outbox WHERE dead_lettered_at IS NOT NULL OR attempt_count <> 1"
        )
        .await,
        0,
        "requeued rows started again from 0 attempts and were published on the first"
    );
}

#[tokio::test]
async fn a_schema_without_migration_3_is_told_to_migrate() {
    let db = TestDb::new().await;
    let d = ready(&db).await;
    kill(&db, d, "1 minute", "boom").await;
    // Back to migration 2: what a schema migrated by an older outboxctl looks like.
    db.exec(
        "DROP VIEW outbox_requeues; DROP FUNCTION outboxctl_requeues_insert();
         DROP TABLE outbox_audit; DROP TABLE outbox_locks;
         DELETE FROM _sqlx_migrations WHERE version >= 3",
    )
    .await;
    let d_s = d.to_string();
    use outboxctl::db::migrate::{AUDIT_SCHEMA, EDIT_SCHEMA};
    for (args, needs) in [
        (&["requeue", "--all"][..], AUDIT_SCHEMA),
        (&["prune", "--older-than", "7d"], AUDIT_SCHEMA),
        (&["dead", "discard", "--all", "--yes"], AUDIT_SCHEMA),
        (&["events", "cancel", &d_s, "--yes"], AUDIT_SCHEMA),
        (
            &["events", "reschedule", &d_s, "--delay", "1m"],
            AUDIT_SCHEMA,
        ),
        (&["events", "edit", &d_s, "--event-type", "x"], EDIT_SCHEMA),
    ] {
        let out = run(&db, args, 1);
        let later: Vec<String> = outboxctl::db::migrate::MIGRATOR
            .iter()
            .map(|m| m.version)
            .filter(|v| *v >= 3 && *v <= needs)
            .map(|v| v.to_string())
            .collect();
        assert_eq!(
            stderr(&out).trim(),
            format!(
                "error: schema `{0}` lacks migrations {1} that this command needs: run `outboxctl migrate --schema {0}` first",
                db.schema,
                later.join(", ")
            ),
            "{args:?}"
        );
    }
    // Reading still works, with an empty requeue history.
    let v = run_json(&db, &["dead", "show", &d.to_string(), "--json"]);
    assert_eq!(v["requeues"], serde_json::json!([]));
    assert_eq!(db.count("dead_lettered_at IS NOT NULL").await, 1);
}
