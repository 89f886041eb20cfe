use crate::support::{stderr, stdout, TestDb};

#[tokio::test]
async fn fresh_apply_creates_the_seed_schema_and_rerun_is_a_no_op() {
    let db = TestDb::unmigrated().await;
    let out = db.cmd().arg("migrate").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!(
            "applied {} migrations",
            crate::support::migrations()
        )),
        "{}",
        stdout(&out)
    );

    // Exactly the seed's columns, types and defaults (plus outboxctl's claim_token).
    let cols: Vec<(String, String, Option<String>, String)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text, column_default::text, is_nullable::text
           FROM information_schema.columns WHERE table_schema = $1 AND table_name = 'outbox'
          ORDER BY ordinal_position",
    )
    .bind(&db.schema)
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let got: Vec<String> = cols
        .iter()
        .map(|c| format!("{} {} {} {}", c.0, c.1, c.2.as_deref().unwrap_or("-"), c.3))
        .collect();
    let want = [
        "id bigint nextval('outbox_id_seq'::regclass) NO",
        "tenant_id uuid - NO",
        "aggregate_type text - NO",
        "aggregate_id text - NO",
        "event_type text - NO",
        "payload jsonb - NO",
        "headers jsonb '{}'::jsonb NO",
        "idempotency_key text - NO",
        "created_at timestamp with time zone now() NO",
        "available_at timestamp with time zone now() NO",
        "locked_until timestamp with time zone - YES",
        "attempt_count integer 0 NO",
        "published_at timestamp with time zone - YES",
        "dead_lettered_at timestamp with time zone - YES",
        "last_error text - YES",
        "claim_token uuid - YES",
        "blocks_key boolean - YES",
        "xid xid8 pg_current_xact_id() YES",
    ];
    assert_eq!(got, want);
    let idx: String = db
        .scalar("SELECT pg_get_indexdef('outbox_ready_idx'::regclass)")
        .await;
    assert!(idx.ends_with("USING btree (available_at, id) WHERE ((published_at IS NULL) AND (dead_lettered_at IS NULL))"), "{idx}");
    let uniq: String = db
        .scalar("SELECT pg_get_constraintdef(oid) FROM pg_constraint WHERE conname = 'outbox_idempotency_key_key' AND conrelid = 'outbox'::regclass")
        .await;
    assert_eq!(uniq, "UNIQUE (idempotency_key)");
    let pm: i64 = db.scalar("SELECT count(*) FROM processed_messages").await;
    assert_eq!(pm, 0);

    let again = db.cmd().arg("migrate").output().unwrap();
    assert!(again.status.success());
    assert!(stdout(&again).contains("up to date"), "{}", stdout(&again));
    let n: i64 = db.scalar("SELECT count(*) FROM _sqlx_migrations").await;
    assert_eq!(n as usize, crate::support::migrations());
}

#[tokio::test]
async fn seed_sql_runs_unchanged_against_the_migrated_schema() {
    let db = TestDb::new().await;
    // Seed 000's producer statement, verbatim.
    for _ in 0..2 {
        sqlx::query(
            "INSERT INTO outbox
       (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers, idempotency_key)
     VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7)
     ON CONFLICT (idempotency_key) DO NOTHING",
        )
        .bind(uuid::Uuid::new_v4())
        .bind("order")
        .bind("o-1")
        .bind("order.placed")
        .bind(r#"{"orderId":"o-1"}"#)
        .bind(r#"{"schema-version":"1"}"#)
        .bind("order.placed:o-1")
        .execute(&db.pool)
        .await
        .unwrap();
    }
    db.exec("UPDATE outbox SET published_at = now() - interval '8 days'")
        .await;
    db.seed_ready(3).await;
    // Seed 000's stats query, verbatim.
    let (backlog, _lag, dead): (i64, sqlx::postgres::types::PgInterval, i64) = sqlx::query_as(
        "SELECT
  count(*) FILTER (WHERE published_at IS NULL AND dead_lettered_at IS NULL) AS backlog,
  coalesce(max(now() - created_at) FILTER (WHERE published_at IS NULL AND dead_lettered_at IS NULL),
           interval '0') AS oldest_lag,
  count(*) FILTER (WHERE dead_lettered_at IS NOT NULL) AS dead_lettered
FROM outbox;",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((backlog, dead), (3, 0));
    // Seed 000's prune, verbatim.
    let deleted = sqlx::query(
        "DELETE FROM outbox
WHERE ctid IN (
  SELECT ctid FROM outbox
  WHERE published_at < now() - interval '7 days'
  ORDER BY id LIMIT 5000
);",
    )
    .execute(&db.pool)
    .await
    .unwrap()
    .rows_affected();
    assert_eq!(deleted, 1);
    // Seed 000's consumer dedup.
    for want in [1, 0] {
        let r = sqlx::query("INSERT INTO processed_messages (consumer, message_id) VALUES ($1, $2) ON CONFLICT DO NOTHING")
            .bind("billing")
            .bind("42")
            .execute(&db.pool)
            .await
            .unwrap();
        assert_eq!(r.rows_affected(), want);
    }
}

#[tokio::test]
async fn ten_concurrent_migrates_all_succeed_and_apply_once() {
    let db = TestDb::unmigrated().await;
    let children: Vec<_> = (0..10)
        .map(|_| {
            db.cmd()
                .args(["migrate", "--json"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let mut applied_total = 0;
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        applied_total += v["applied"].as_array().unwrap().len();
    }
    assert_eq!(
        applied_total,
        crate::support::migrations(),
        "each migration applied by exactly one process"
    );
    let n: i64 = db
        .scalar("SELECT count(*) FROM _sqlx_migrations WHERE success")
        .await;
    assert_eq!(n as usize, crate::support::migrations());
}

#[tokio::test]
async fn status_lists_pending_then_applied_and_changes_nothing() {
    let db = TestDb::unmigrated().await;
    let out = db
        .cmd()
        .args(["migrate", "--status", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let states: Vec<bool> = v["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["applied"].as_bool().unwrap())
        .collect();
    assert_eq!(states, vec![false; crate::support::migrations()]);
    let schema_exists: bool = db
        .scalar(&format!(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '{}')",
            db.schema
        ))
        .await;
    assert!(!schema_exists, "--status must not create anything");

    assert!(db.cmd().arg("migrate").output().unwrap().status.success());
    let out = db.cmd().args(["migrate", "--dry-run"]).output().unwrap();
    let text = stdout(&out);
    assert!(
        text.contains("outboxctl relay") && text.contains("applied") && !text.contains("pending"),
        "{text}"
    );
}

#[test]
fn system_schemas_are_refused_by_every_command_before_connecting() {
    // Nothing listens on this port: a command that got as far as connecting would exit 3.
    let closed = crate::support::servers::ClosedPort::new();
    let nowhere = format!("postgres://postgres@127.0.0.1:{}/test", closed.port);
    let nowhere = nowhere.as_str();
    for schema in [
        "information_schema",
        "pg_catalog",
        "pg_toast",
        "pg_temp",
        "pg_temp_3",
        "pg_toast_temp_3",
    ] {
        for args in [
            &["migrate"][..],
            &["migrate", "--status"],
            &["stats"],
            &["events", "list"],
            &["relay", "--once", "--sink", "null"],
        ] {
            let out = crate::support::bin()
                .args(args)
                .args(["--schema", schema])
                .env("DATABASE_URL", nowhere)
                .output()
                .unwrap();
            let err = stderr(&out);
            assert_eq!(
                out.status.code(),
                Some(2),
                "{args:?} --schema {schema}: {err}"
            );
            assert!(
                err.contains(&format!("invalid --schema `{schema}`"))
                    && err.contains("system schema"),
                "{args:?} --schema {schema}: {err}"
            );
        }
    }
}

/// `migrate` with nothing to do is a no-op that needs only read access: the relay's init
/// container runs it with the relay's URL, and a role without CREATE on the database failed with
/// `permission denied for database` (exit 1) while `migrate --check` said up to date.
#[tokio::test]
async fn an_up_to_date_migrate_needs_only_read_access() {
    let db = TestDb::new().await;
    let role = crate::support::TestRole::new(&db).await;
    db.exec(&format!(
        "GRANT USAGE ON SCHEMA \"{s}\" TO \"{r}\";
         GRANT SELECT ON ALL TABLES IN SCHEMA \"{s}\" TO \"{r}\"",
        s = db.schema,
        r = role.name
    ))
    .await;
    let can_create: bool = db
        .scalar(&format!(
            "SELECT has_database_privilege('{}', current_database(), 'CREATE')
                 OR has_schema_privilege('{}', '{}', 'CREATE')",
            role.name, role.name, db.schema
        ))
        .await;
    assert!(!can_create, "the role must not be able to create anything");
    let before: Vec<(i64, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("SELECT version, installed_on FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    for args in [
        &["migrate"][..],
        &["migrate", "--json"],
        &["migrate", "--check"],
    ] {
        let out = db
            .cmd()
            .env("DATABASE_URL", role.url())
            .args(args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
        if args.len() == 1 {
            assert!(
                stdout(&out).contains(&format!(
                    "is up to date ({} migrations)",
                    crate::support::migrations()
                )),
                "{}",
                stdout(&out)
            );
        }
    }
    let after: Vec<(i64, chrono::DateTime<chrono::Utc>)> =
        sqlx::query_as("SELECT version, installed_on FROM _sqlx_migrations ORDER BY version")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(before, after, "nothing recorded");
    // With a migration pending, the same role is told what it lacks (nothing is half done).
    db.exec("DELETE FROM _sqlx_migrations WHERE version = 8")
        .await;
    let out = db
        .cmd()
        .env("DATABASE_URL", role.url())
        .arg("migrate")
        .output()
        .unwrap();
    assert_ne!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("permission denied"),
        "{}",
        stderr(&out)
    );
}

/// Migration 12 turns migration 2's fillfactor 70 into 50, and keeps one someone chose.
#[tokio::test]
async fn migration_12_lowers_migration_2s_fillfactor_and_keeps_an_operators() {
    let db = TestDb::new().await;
    let options = || async {
        db.scalar::<String>(
            "SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'outbox'::regclass",
        )
        .await
    };
    assert_eq!(options().await, "fillfactor=50");
    for (before, after) in [("70", "fillfactor=50"), ("90", "fillfactor=90")] {
        // A schema upgraded from migration 11, with `before` set.
        db.exec(&format!(
            "ALTER TABLE outbox SET (fillfactor = {before});
             DELETE FROM _sqlx_migrations WHERE version = 12"
        ))
        .await;
        let out = db.cmd().arg("migrate").output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stdout(&out).contains("applied 1 migration"),
            "{}",
            stdout(&out)
        );
        assert_eq!(options().await, after, "from {before}");
    }
}
