//! The audit trail (`outbox_audit`, migration 4): every command that changes or deletes events by
//! hand leaves a row with the actor (flag, env or `$USER@hostname`) beside the database role,
//! written with the change itself.

use serde_json::Value;

use crate::support::fixtures::{kill, publish, ready, schedule};
use crate::support::{run, run_json, stderr, stdout, TestDb};

#[derive(Debug, sqlx::FromRow)]
struct Row {
    action: String,
    event_id: Option<i64>,
    actor: Option<String>,
    db_role: String,
    reason: Option<String>,
    previous: Option<Value>,
    details: Option<Value>,
}

async fn audit_rows(db: &TestDb) -> Vec<Row> {
    sqlx::query_as(
        "SELECT action, event_id, actor, db_role, reason, previous, details
           FROM outbox_audit ORDER BY id",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .unwrap()
        .trim()
        .to_owned()
}

#[tokio::test]
async fn each_changing_command_writes_its_audit_row_with_the_actor_and_the_role() {
    let db = TestDb::new().await;
    let role: String = db.scalar("SELECT current_user::text").await;
    let (a, b, c, d) = (
        ready(&db).await,
        ready(&db).await,
        ready(&db).await,
        ready(&db).await,
    );
    kill(&db, a, "1 minute", "boom a").await;
    kill(&db, b, "1 minute", "boom b").await;
    schedule(&db, d).await;
    let due_before: chrono::DateTime<chrono::Utc> = db
        .scalar(&format!("SELECT available_at FROM outbox WHERE id = {d}"))
        .await;

    // requeue: actor from the flag (which beats the environment).
    let out = db
        .cmd()
        .args([
            "requeue",
            &a.to_string(),
            "--reason",
            "broker fixed",
            "--actor",
            "alice",
        ])
        .env("OUTBOXCTL_ACTOR", "not-me")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // dead discard: actor from the environment.
    let out = db
        .cmd()
        .args(["dead", "discard", &b.to_string(), "--yes"])
        .env("OUTBOXCTL_ACTOR", "ops-bot")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // events cancel: the default, $USER@hostname.
    let out = db
        .cmd()
        .args(["events", "cancel", &c.to_string(), "--yes"])
        .env("USER", "carol")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    // events reschedule: an empty OUTBOXCTL_ACTOR means the default too.
    let out = db
        .cmd()
        .args(["events", "reschedule", &d.to_string(), "--delay", "1h"])
        .env("OUTBOXCTL_ACTOR", "")
        .env("USER", "dave")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));

    let rows = audit_rows(&db).await;
    let got: Vec<(&str, Option<i64>, Option<&str>)> = rows
        .iter()
        .map(|r| (r.action.as_str(), r.event_id, r.actor.as_deref()))
        .collect();
    let carol = format!("carol@{}", hostname());
    let dave = format!("dave@{}", hostname());
    assert_eq!(
        got,
        [
            ("requeue", Some(a), Some("alice")),
            ("discard", Some(b), Some("ops-bot")),
            ("cancel", Some(c), Some(carol.as_str())),
            ("reschedule", Some(d), Some(dave.as_str())),
        ]
    );
    assert!(rows.iter().all(|r| r.db_role == role), "{rows:?}");

    let requeue = &rows[0];
    assert_eq!(requeue.reason.as_deref(), Some("broker fixed"));
    let prev = requeue.previous.as_ref().unwrap();
    assert_eq!(prev["attempt_count"], 10);
    assert_eq!(prev["last_error"], "boom a");
    assert!(prev["dead_lettered_at"].is_string());
    assert_eq!(requeue.details.as_ref().unwrap()["kept_attempts"], false);

    let discard = rows[1].previous.as_ref().unwrap();
    assert_eq!(discard["state"], "dead");
    assert_eq!(discard["last_error"], "boom b");
    assert_eq!(discard["event_type"], "order.placed");
    assert!(discard.get("payload").is_none(), "payloads are not copied");
    let cancel = &rows[2];
    assert_eq!(cancel.previous.as_ref().unwrap()["state"], "ready");
    assert_eq!(cancel.details.as_ref().unwrap()["force"], false);

    let resched = &rows[3];
    let due_after: chrono::DateTime<chrono::Utc> = db
        .scalar(&format!("SELECT available_at FROM outbox WHERE id = {d}"))
        .await;
    let at = |v: &Value| -> chrono::DateTime<chrono::Utc> {
        serde_json::from_value(v["available_at"].clone()).unwrap()
    };
    assert_eq!(at(resched.previous.as_ref().unwrap()), due_before);
    assert_eq!(at(resched.details.as_ref().unwrap()), due_after);

    // `show` of a deleted event says who deleted it.
    for (show, id, verb, who) in [
        ("events", c, "cancelled", carol.as_str()),
        ("dead", b, "discarded", "ops-bot"),
    ] {
        let out = run(&db, &[show, "show", &id.to_string()], 2);
        let err = stderr(&out);
        assert!(
            err.contains(&format!("no event with id {id}"))
                && err.contains(&format!(": it was {verb} at "))
                && err.contains(&format!(" by {who} (role {role})")),
            "{err}"
        );
    }

    // The requeue is also visible through the old table's name, now a view.
    let (by, actor): (String, Option<String>) = db
        .row("SELECT requeued_by, actor FROM outbox_requeues")
        .await;
    assert_eq!(
        (by.as_str(), actor.as_deref()),
        (role.as_str(), Some("alice"))
    );
}

#[tokio::test]
async fn refused_or_failed_changes_leave_no_audit_row_and_vice_versa() {
    let db = TestDb::new().await;
    let (a, p) = (ready(&db).await, ready(&db).await);
    publish(&db, p, "1 minute").await;
    // A refused cancel (one id is published) changes nothing and records nothing.
    run(
        &db,
        &["events", "cancel", &a.to_string(), &p.to_string(), "--yes"],
        2,
    );
    run(
        &db,
        &["events", "reschedule", &p.to_string(), "--delay", "1m"],
        2,
    );
    assert!(audit_rows(&db).await.is_empty());

    // If the audit row cannot be written, the change does not happen either: same statement.
    db.exec("ALTER TABLE outbox_audit ADD CONSTRAINT test_no_cancel CHECK (action <> 'cancel')")
        .await;
    let out = db
        .cmd()
        .args(["events", "cancel", &a.to_string(), "--yes"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let still: i64 = db
        .scalar(&format!("SELECT count(*) FROM outbox WHERE id = {a}"))
        .await;
    assert_eq!(still, 1, "the event was deleted without its audit row");
    assert!(audit_rows(&db).await.is_empty());
}

#[tokio::test]
async fn prune_leaves_one_row_per_run_with_its_counts() {
    let db = TestDb::with_backlog(7).await;
    db.exec("UPDATE outbox SET published_at = now() - interval '10 days' WHERE id <= 5")
        .await;
    db.exec(
        "UPDATE outbox SET dead_lettered_at = now() - interval '3 days', attempt_count = 10
          WHERE id = 6",
    )
    .await;
    db.exec(
        "INSERT INTO processed_messages (consumer, message_id, processed_at)
         SELECT 'billing', g::text, now() - interval '20 days' FROM generate_series(1, 3) g",
    )
    .await;

    // A dry run records nothing.
    run(&db, &["prune", "--older-than", "7d", "--dry-run"], 0);
    assert!(audit_rows(&db).await.is_empty());

    let out = db
        .cmd()
        .args([
            "prune",
            "--older-than",
            "7d",
            "--dead-older-than",
            "1d",
            "--processed-older-than",
            "14d",
            "--batch-size",
            "2",
        ])
        .env("OUTBOXCTL_ACTOR", "cron@db1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let rows = audit_rows(&db).await;
    assert_eq!(rows.len(), 1, "{rows:?}");
    let r = &rows[0];
    assert_eq!(
        (r.action.as_str(), r.event_id, r.actor.as_deref()),
        ("prune", None, Some("cron@db1"))
    );
    let det = r.details.as_ref().unwrap();
    assert_eq!(det["published"]["deleted"], 5, "{det}");
    assert_eq!(det["dead"]["deleted"], 1, "{det}");
    assert_eq!(det["processed_messages"]["deleted"], 3, "{det}");
    assert!(det["published"]["cutoff"].is_string(), "{det}");
    assert_eq!(det["stop_reason"], "done", "{det}");
    assert!(det["batches"].as_u64().unwrap() >= 6, "{det}");
    let left: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(left, 1);

    // A run that deletes nothing changed nothing: no row.
    run(&db, &["prune", "--older-than", "7d"], 0);
    assert_eq!(audit_rows(&db).await.len(), 1);
}

#[tokio::test]
async fn events_show_and_dead_show_list_the_audit_history() {
    let db = TestDb::new().await;
    let id = ready(&db).await;
    kill(&db, id, "1 minute", "boom").await;
    let ids = id.to_string();
    run(
        &db,
        &["requeue", &ids, "--actor", "alice", "--reason", "fixed"],
        0,
    );
    run(
        &db,
        &[
            "events",
            "reschedule",
            &ids,
            "--delay",
            "1h",
            "--actor",
            "bob",
        ],
        0,
    );
    kill(&db, id, "1 second", "boom again").await;

    for show in [&["events", "show"][..], &["dead", "show"]] {
        let mut args = show.to_vec();
        args.extend([ids.as_str(), "--json"]);
        let v = run_json(&db, &args);
        let audit = v["audit"].as_array().unwrap();
        let got: Vec<(&str, &str)> = audit
            .iter()
            .map(|a| (a["action"].as_str().unwrap(), a["actor"].as_str().unwrap()))
            .collect();
        assert_eq!(got, [("requeue", "alice"), ("reschedule", "bob")], "{v}");
        assert_eq!(v["requeues"].as_array().unwrap().len(), 1, "{v}");

        let out = run(&db, &args[..args.len() - 1], 0);
        let text = stdout(&out);
        let history: Vec<&str> = text
            .lines()
            .skip_while(|l| *l != "history:")
            .skip(1)
            .collect();
        assert_eq!(history.len(), 2, "{text}");
        assert!(
            history[0].contains("requeue by alice (role ")
                && history[0].contains("(fixed): was dead since")
                && history[0].contains("after 10 attempts"),
            "{text}"
        );
        assert!(
            history[1].contains("reschedule by bob (role ") && history[1].contains("due "),
            "{text}"
        );
    }
}

#[tokio::test]
async fn a_bad_actor_is_refused_before_anything_changes() {
    let db = TestDb::new().await;
    let id = ready(&db).await;
    let out = run(
        &db,
        &[
            "events",
            "cancel",
            &id.to_string(),
            "--yes",
            "--actor",
            "a\u{7}b",
        ],
        2,
    );
    assert!(stderr(&out).contains("invalid --actor"), "{}", stderr(&out));
    let n: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(n, 1);
}

/// Applies the embedded migrations up to `through` by hand, with sqlx's bookkeeping, the way an
/// older outboxctl left the schema.
async fn migrate_through(db: &TestDb, through: i64) {
    use sqlx::migrate::Migrate;
    db.exec(&format!("CREATE SCHEMA \"{}\"", db.schema)).await;
    let mut conn = outboxctl::db::connect(&db.config()).await.unwrap();
    conn.ensure_migrations_table().await.unwrap();
    for m in outboxctl::db::migrate::MIGRATOR
        .iter()
        .filter(|m| m.version <= through)
    {
        sqlx::raw_sql(&m.sql).execute(&mut conn).await.unwrap();
        sqlx::query(
            "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
             VALUES ($1, $2, TRUE, $3, 0)",
        )
        .bind(m.version)
        .bind(&*m.description)
        .bind(&*m.checksum)
        .execute(&mut conn)
        .await
        .unwrap();
    }
}

/// The requeue statement of outboxctl before migration 4, verbatim.
const OLD_REQUEUE: &str = "WITH old AS (
             SELECT id, dead_lettered_at, attempt_count, last_error
               FROM outbox
              WHERE id = ANY($1) AND dead_lettered_at IS NOT NULL AND published_at IS NULL
              ORDER BY id
                FOR UPDATE
         ), requeued AS (
             UPDATE outbox o
                SET dead_lettered_at = NULL,
                    locked_until     = NULL,
                    claim_token      = NULL,
                    attempt_count    = CASE WHEN $2 THEN o.attempt_count ELSE 0 END,
                    available_at     = now() + $3::bigint * interval '1 microsecond'
               FROM old
              WHERE o.id = old.id
          RETURNING o.id, o.available_at, old.dead_lettered_at, old.attempt_count, old.last_error
         )
         INSERT INTO outbox_requeues
                (event_id, reason, previous_dead_lettered_at, previous_attempt_count,
                 previous_last_error, kept_attempts, available_at)
         SELECT id, $4, dead_lettered_at, attempt_count, last_error, $2, available_at
           FROM requeued
         RETURNING event_id";

#[tokio::test]
async fn requeue_history_from_before_migration_4_moves_into_the_audit_trail() {
    let db = TestDb::unmigrated().await;
    migrate_through(&db, 3).await;
    let (a, b) = (ready(&db).await, ready(&db).await);
    kill(&db, a, "1 hour", "old failure").await;
    kill(&db, b, "1 hour", "later failure").await;
    let requeued: Vec<i64> = sqlx::query_scalar(OLD_REQUEUE)
        .bind(vec![a])
        .bind(false)
        .bind(0i64)
        .bind("before the upgrade")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(requeued, [a]);
    let old_view: String = db
        .scalar("SELECT (requeued_at, requeued_by, reason, previous_dead_lettered_at, previous_attempt_count, previous_last_error, kept_attempts, available_at)::text FROM outbox_requeues")
        .await;

    let out = db.cmd().arg("migrate").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains(": 4"), "{}", stdout(&out));
    let rows = audit_rows(&db).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(
        (
            rows[0].action.as_str(),
            rows[0].event_id,
            rows[0].actor.as_deref()
        ),
        ("requeue", Some(a), None)
    );
    assert_eq!(rows[0].reason.as_deref(), Some("before the upgrade"));
    let new_view: String = db
        .scalar("SELECT (requeued_at, requeued_by, reason, previous_dead_lettered_at, previous_attempt_count, previous_last_error, kept_attempts, available_at)::text FROM outbox_requeues")
        .await;
    assert_eq!(new_view, old_view, "the view shows the same history");

    // An older binary's requeue still works during a rolling upgrade, and is audited.
    let requeued: Vec<i64> = sqlx::query_scalar(OLD_REQUEUE)
        .bind(vec![b])
        .bind(true)
        .bind(0i64)
        .bind("old binary")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(requeued, [b]);
    let rows = audit_rows(&db).await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].event_id, Some(b));
    assert_eq!(
        rows[1].previous.as_ref().unwrap()["last_error"],
        "later failure"
    );
    assert_eq!(rows[1].details.as_ref().unwrap()["kept_attempts"], true);
}
