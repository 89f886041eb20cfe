//! Least privilege (issue 25): `migrate` as the schema's owner (not a superuser), then each use's
//! commands as a role that has only what `outboxctl grants --for USE` gives it (applied by the
//! owner with `--apply`), and a command run by a role without its grants: one line naming the
//! table, the privilege the role lacks on it and the `grants` command, exit 7.

use std::process::Output;

use crate::support::servers::TestServer;
use crate::support::{stderr, stdout, TestDb};

/// The shared server's URL as `role`.
fn url_as(role: &str) -> String {
    let mut u = url::Url::parse(&crate::support::base_url()).unwrap();
    u.set_username(role).unwrap();
    u.set_password(None).unwrap();
    u.to_string()
}

/// `outboxctl ARGS` as `role` on `db`'s schema.
fn run_as(db: &TestDb, role: &str, args: &[&str]) -> Output {
    db.cmd()
        .env("DATABASE_URL", url_as(role))
        .args(args)
        .output()
        .unwrap()
}

fn ok_as(db: &TestDb, role: &str, args: &[&str]) -> String {
    let out = run_as(db, role, args);
    assert!(
        out.status.success(),
        "{role}: outboxctl {args:?} exited {:?}: {}",
        out.status.code(),
        stderr(&out)
    );
    stdout(&out)
}

/// Roles of this test (names from the schema, so parallel runs do not meet), dropped on drop.
struct Roles {
    admin: sqlx::PgPool,
    names: Vec<String>,
}

impl Roles {
    async fn create(db: &TestDb, names: &[&str]) -> Self {
        let admin = db.pool.clone();
        let names: Vec<String> = names.iter().map(|n| format!("{}_{n}", db.schema)).collect();
        let dbname: String = db.scalar("SELECT current_database()").await;
        for n in &names {
            sqlx::raw_sql(&format!("CREATE ROLE \"{n}\" LOGIN"))
                .execute(&admin)
                .await
                .unwrap();
        }
        sqlx::raw_sql(&format!(
            "GRANT CREATE ON DATABASE \"{dbname}\" TO \"{}\"",
            names[0]
        ))
        .execute(&admin)
        .await
        .unwrap();
        Self { admin, names }
    }
}

impl Drop for Roles {
    fn drop(&mut self) {
        let (admin, names) = (self.admin.clone(), self.names.clone());
        let _ = std::thread::spawn(move || {
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(async move {
                    for n in names.iter().rev() {
                        let _ = sqlx::raw_sql(&format!(
                            "DROP OWNED BY \"{n}\" CASCADE; DROP ROLE IF EXISTS \"{n}\""
                        ))
                        .execute(&admin)
                        .await;
                    }
                })
        })
        .join();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_use_works_with_only_its_grants_and_a_missing_one_says_what_to_grant() {
    let db = TestDb::unmigrated().await;
    let roles = Roles::create(&db, &["owner", "producer", "relay", "operator", "monitor"]).await;
    let [owner, producer, relay, operator, monitor] =
        [0, 1, 2, 3, 4].map(|i| roles.names[i].as_str());

    // The owner migrates and grants; nobody else may.
    ok_as(&db, owner, &["migrate"]);
    let printed = ok_as(&db, owner, &["grants", "--role", relay, "--for", "relay"]);
    assert!(
        printed
            .lines()
            .all(|l| l.starts_with("GRANT ") && l.ends_with(';')),
        "{printed}"
    );
    for (role, u) in [
        (producer, "producer"),
        (relay, "relay"),
        (operator, "operator"),
        (monitor, "monitor"),
    ] {
        ok_as(
            &db,
            owner,
            &["grants", "--role", role, "--for", u, "--apply"],
        );
    }
    let out = run_as(
        &db,
        owner,
        &[
            "grants",
            "--role",
            "no_such_role_x",
            "--for",
            "relay",
            "--apply",
        ],
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    ok_as(
        &db,
        owner,
        &["ordering", "enable", "--aggregate-type", "acct"],
    );

    // producer: the application's INSERT and `publish`.
    let app = sqlx::PgPool::connect(&url_as(producer)).await.unwrap();
    sqlx::raw_sql(&format!(
        "INSERT INTO \"{}\".outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                                    idempotency_key)
         VALUES ('00000000-0000-0000-0000-000000000001', 'acct', 'a-1', 'acct.opened', '{{}}', 'app-1')",
        db.schema
    ))
    .execute(&app)
    .await
    .unwrap();
    app.close().await;
    for key in ["p-1", "p-1", "p-2"] {
        ok_as(
            &db,
            producer,
            &[
                "publish",
                "--event-type",
                "order.placed",
                "--aggregate-type",
                "order",
                "--aggregate-id",
                "o-1",
                "--payload",
                "{}",
                "--idempotency-key",
                key,
            ],
        );
    }
    let poison = ok_as(
        &db,
        producer,
        &[
            "publish",
            "--event-type",
            "order.poison",
            "--aggregate-type",
            "acct",
            "--aggregate-id",
            "a-2",
            "--payload",
            "{}",
            "--idempotency-key",
            "p-3",
        ],
    );
    assert!(poison.contains("inserted"), "{poison}");

    // relay: both modes, a permanent failure dead-lettered (which blocks its ordered key).
    let server = TestServer::start(0, |r| {
        if String::from_utf8_lossy(&r.body).contains("order.poison") {
            (400, vec![])
        } else {
            (200, vec![])
        }
    });
    ok_as(
        &db,
        relay,
        &[
            "relay",
            "--once",
            "--mode",
            "tx",
            "--sink",
            &server.url(),
            "--max-attempts",
            "1",
        ],
    );
    db.seed_ready(3).await;
    ok_as(
        &db,
        relay,
        &["relay", "--once", "--mode", "lease", "--sink", "null"],
    );
    let (published, dead): (i64, i64) = db
        .row(
            "SELECT count(*) FILTER (WHERE published_at IS NOT NULL),
                    count(*) FILTER (WHERE dead_lettered_at IS NOT NULL) FROM outbox",
        )
        .await;
    assert_eq!((published, dead), (6, 1), "relayed as the relay role");

    // operator: the repair commands, each with its audit row, and prune.
    ok_as(&db, operator, &["dead", "list"]);
    ok_as(&db, operator, &["requeue", "--all"]);
    ok_as(&db, relay, &["relay", "--once", "--sink", "null"]);
    ok_as(
        &db,
        operator,
        &["replay", "--all", "--sink", "null", "--yes"],
    );
    let scheduled: i64 = db
        .scalar(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                                 idempotency_key, available_at)
             VALUES ('00000000-0000-0000-0000-000000000001', 'order', 'o-9', 'order.placed', '{}',
                     's-1', now() + interval '1 hour') RETURNING id",
        )
        .await;
    let id = scheduled.to_string();
    ok_as(
        &db,
        operator,
        &["events", "edit", &id, "--payload", r#"{"v": 2}"#, "--yes"],
    );
    ok_as(
        &db,
        operator,
        &["events", "reschedule", &id, "--delay", "2h", "--yes"],
    );
    ok_as(&db, operator, &["events", "cancel", &id, "--yes"]);
    ok_as(&db, operator, &["prune", "--older-than", "1ms"]);
    ok_as(&db, operator, &["prune", "--audit-older-than", "1ms"]);
    ok_as(&db, operator, &["prune", "--processed-older-than", "1ms"]);
    let left: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(left, 0, "the operator's changes landed");

    // monitor: the reading commands.
    ok_as(&db, monitor, &["stats", "--json"]);
    ok_as(&db, monitor, &["events", "list"]);
    ok_as(&db, monitor, &["dead", "list", "--json"]);
    ok_as(&db, monitor, &["migrate", "--check"]);
    let out = run_as(&db, monitor, &["doctor", "--json"]);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "doctor as monitor: {}{}",
        stdout(&out),
        stderr(&out)
    );
    // Without pg_read_all_stats, doctor says which checks saw less.
    let v: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let visibility = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "session_visibility")
        .expect("session_visibility");
    assert_eq!(visibility["status"], "WARN", "{visibility}");
    assert!(
        visibility["message"]
            .as_str()
            .unwrap()
            .contains("pg_read_all_stats"),
        "{visibility}"
    );

    // A command outside a role's grants: one line naming the table and what to run.
    db.seed_ready(1).await;
    for (role, args, table, lacks, u) in [
        (
            monitor,
            &["relay", "--once", "--sink", "null"][..],
            "outbox",
            "UPDATE",
            "relay",
        ),
        (
            relay,
            &["prune", "--older-than", "1ms"][..],
            "outbox_locks",
            "SELECT",
            "operator",
        ),
        (
            producer,
            &["requeue", "--all"][..],
            "outbox",
            "SELECT",
            "operator",
        ),
    ] {
        let out = run_as(&db, role, args);
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(7), "{role} {args:?}: {err}");
        let last = err.trim_end().lines().last().unwrap_or_default();
        let lacks = format!("which lacks {lacks} on table \"{}\".{table}", db.schema);
        assert!(
            last.contains(&format!("permission denied for table {table}"))
                && last.contains(&lacks)
                && last.contains(&format!("outboxctl grants --role {role} --for {u}")),
            "{role} {args:?}: {err}"
        );
    }
    let unpublished = db.count("published_at IS NULL").await;
    assert_eq!(unpublished, 1, "the refused relay published nothing");
    drop(roles);
}
