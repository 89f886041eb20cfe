//! Adopting a seed-era outbox: the application created seed 000's tables itself (and has rows in
//! them) before outboxctl ever ran. `migrate` must recognise tables that match migration 1, record
//! it as applied (a baseline) and apply the rest; tables that differ are refused, naming each
//! difference, with nothing changed.

use crate::support::fixtures::SEED_DDL;
use crate::support::{ids_in_file, stderr, stdout, TestDb};

/// Seed 000's producer statement, verbatim.
const SEED_ENQUEUE: &str = "INSERT INTO outbox
       (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers, idempotency_key)
     VALUES ($1, $2, $3, $4, $5::jsonb, $6::jsonb, $7)
     ON CONFLICT (idempotency_key) DO NOTHING";

/// Creates the schema and runs `ddl` in it, the way an application would have.
async fn create_seed_era(db: &TestDb, ddl: &str) {
    db.exec(&format!(
        "CREATE SCHEMA \"{}\"; SET search_path TO \"{}\"; {ddl}",
        db.schema, db.schema
    ))
    .await;
}

/// `n` orders enqueued by seed 000's producer SQL (each twice: the second is a no-op).
async fn enqueue_orders(db: &TestDb, n: usize) {
    for i in 0..n {
        for _ in 0..2 {
            sqlx::query(SEED_ENQUEUE)
                .bind(uuid::Uuid::new_v4())
                .bind("order")
                .bind(format!("o-{i}"))
                .bind("order.placed")
                .bind(format!(
                    r#"{{"orderId":"o-{i}","totalCents":{i},"currency":"USD"}}"#
                ))
                .bind(r#"{"schema-version":"1"}"#)
                .bind(format!("order.placed:o-{i}"))
                .execute(&db.pool)
                .await
                .unwrap();
        }
    }
}

/// Everything the catalog says about the schema's objects, and a fingerprint of the rows: equal
/// before and after means nothing changed.
async fn catalog(db: &TestDb) -> String {
    let defs: String = sqlx::query_scalar(
        "SELECT string_agg(d, E'\\n' ORDER BY d) FROM (
           SELECT 'rel ' || c.relname || ' ' || c.relkind::text AS d
             FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
           UNION ALL
           SELECT 'col ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                  || ' ' || a.attnotnull || ' ' || coalesce(pg_get_expr(ad.adbin, ad.adrelid), '-')
             FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace
             LEFT JOIN pg_attrdef ad ON ad.adrelid = a.attrelid AND ad.adnum = a.attnum
            WHERE n.nspname = $1 AND a.attnum > 0 AND NOT a.attisdropped
           UNION ALL
           SELECT 'con ' || co.conname || ' ' || pg_get_constraintdef(co.oid)
             FROM pg_constraint co JOIN pg_namespace n ON n.oid = co.connamespace WHERE n.nspname = $1
           UNION ALL
           SELECT 'idx ' || pg_get_indexdef(i.indexrelid)
             FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
             JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1
           UNION ALL
           SELECT 'fn ' || p.proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
            WHERE n.nspname = $1
         ) x",
    )
    .bind(&db.schema)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let rows: String = db
        .scalar("SELECT coalesce(md5(string_agg(o::text, '|' ORDER BY id)), '') FROM outbox o")
        .await;
    format!("{defs}\nrows {rows}")
}

fn status_json(db: &TestDb) -> serde_json::Value {
    let out = db
        .cmd()
        .args(["migrate", "--status", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn states(v: &serde_json::Value) -> Vec<String> {
    v["migrations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["state"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test]
async fn a_seed_era_outbox_is_adopted_and_its_rows_relayed() {
    let db = TestDb::unmigrated().await;
    create_seed_era(&db, SEED_DDL).await;
    enqueue_orders(&db, 40).await;
    let before = catalog(&db).await;

    // --status shows the case before anything is done, and changes nothing.
    let v = status_json(&db);
    let st = states(&v);
    assert_eq!(st[0], "adoptable", "{v}");
    assert!(st[1..].iter().all(|s| s == "pending"), "{v}");
    let text = stdout(&db.cmd().args(["migrate", "--status"]).output().unwrap());
    assert!(text.contains("adoptable"), "{text}");
    assert_eq!(catalog(&db).await, before, "--status changed something");

    let out = db.cmd().arg("migrate").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let later = outboxctl::db::migrate::MIGRATOR.iter().count() - 1;
    assert!(
        stdout(&out).contains("adopted the existing outbox tables as migration 1")
            && stdout(&out).contains(&format!("applied {later} migrations")),
        "{}",
        stdout(&out)
    );

    // The baseline row carries migration 1's checksum, so a later `sqlx::migrate!` agrees.
    let (checksum, success): (Vec<u8>, bool) = db
        .row("SELECT checksum, success FROM _sqlx_migrations WHERE version = 1")
        .await;
    let m1 = outboxctl::db::migrate::MIGRATOR.iter().next().unwrap();
    assert_eq!(checksum, m1.checksum.to_vec());
    assert!(success);
    let mut conn = outboxctl::db::connect(&db.config()).await.unwrap();
    outboxctl::db::migrate::MIGRATOR
        .run(&mut conn)
        .await
        .expect("sqlx agrees with the baseline");
    let v = status_json(&db);
    assert!(
        states(&v).iter().all(|s| s == "applied" || s == "baseline"),
        "{v}"
    );
    assert_eq!(states(&v)[0], "baseline");

    // The adopted rows (and the application's later ones) are relayed and marked.
    enqueue_orders(&db, 45).await; // 5 new ones, 40 duplicates
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("events.jsonl");
    let out = db
        .cmd()
        .args(["relay", "--once", "--mode", "lease", "--sink"])
        .arg(format!("file:{}", sink.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut delivered = ids_in_file(&sink);
    delivered.sort_unstable();
    let all: Vec<i64> = sqlx::query_scalar("SELECT id FROM outbox ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(all.len(), 45);
    assert_eq!(delivered, all, "every row delivered exactly once");
    let unmarked = db.count("published_at IS NULL").await;
    assert_eq!(unmarked, 0);

    // And the commands that need later migrations work.
    let out = db
        .cmd()
        .args(["events", "list", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test]
async fn ten_concurrent_migrates_adopt_a_seed_era_outbox_once() {
    let db = TestDb::unmigrated().await;
    create_seed_era(&db, SEED_DDL).await;
    enqueue_orders(&db, 5).await;
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
    let (mut adopted, mut applied) = (0, 0);
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        adopted += usize::from(v["adopted"].as_bool().unwrap());
        applied += v["applied"].as_array().unwrap().len();
    }
    let later = outboxctl::db::migrate::MIGRATOR.iter().count() - 1;
    assert_eq!(
        adopted, 1,
        "the baseline is recorded by exactly one process"
    );
    assert_eq!(applied, later, "each later migration applied exactly once");
    let n: i64 = db
        .scalar("SELECT count(*) FROM _sqlx_migrations WHERE version = 1")
        .await;
    assert_eq!(n, 1);
    let rows: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(rows, 5);
}

/// The seed DDL with `from` replaced by `to` (asserting `from` occurs).
fn variant(from: &str, to: &str) -> String {
    assert!(SEED_DDL.contains(from), "{from}");
    SEED_DDL.replacen(from, to, 1)
}

#[tokio::test]
async fn a_differing_outbox_is_refused_naming_each_difference_and_nothing_changes() {
    // Three differences at once: each gets its own line.
    let ddl = variant(
        "payload           jsonb        NOT NULL,",
        "payload           json         NOT NULL,\n  region text NOT NULL,",
    )
    .replace(
        "CREATE INDEX outbox_ready_idx\n  ON outbox (available_at, id)\n  WHERE published_at IS NULL AND dead_lettered_at IS NULL;",
        "",
    );
    let db = TestDb::unmigrated().await;
    create_seed_era(&db, &ddl).await;
    sqlx::query(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key, region)
         VALUES (gen_random_uuid(), 'order', '1', 'order.placed', '{}', 'k1', 'eu')",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let before = catalog(&db).await;

    let v = status_json(&db);
    assert_eq!(states(&v)[0], "conflict", "{v}");
    let diffs: Vec<String> = v["migrations"][0]["differences"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d.as_str().unwrap().to_owned())
        .collect();
    assert_eq!(diffs.len(), 3, "{diffs:?}");

    let out = db.cmd().arg("migrate").output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    let lines: Vec<&str> = err.lines().map(str::trim).collect();
    for want in [
        "column payload is json, migration 1 has jsonb",
        "column region is an extra NOT NULL column without a default (outboxctl's inserts cannot fill it)",
        "index outbox_ready_idx (available_at, id) WHERE ((published_at IS NULL) AND (dead_lettered_at IS NULL)) is missing",
    ] {
        assert!(lines.contains(&want), "missing line `{want}` in:\n{err}");
        assert!(diffs.iter().any(|d| d == want), "{diffs:?}");
    }
    assert!(err.contains("nothing was changed"), "{err}");
    assert_eq!(
        catalog(&db).await,
        before,
        "a refused migrate changed the catalog"
    );
    let has_bookkeeping: bool = db
        .scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .await;
    assert!(!has_bookkeeping);
}

#[tokio::test]
async fn each_kind_of_difference_is_named() {
    let cases: Vec<(String, &str)> = vec![
        (
            variant("locked_until      timestamptz,", "locked_until      timestamp,"),
            "column locked_until is timestamp without time zone, migration 1 has timestamp with time zone",
        ),
        (
            variant("attempt_count     integer      NOT NULL DEFAULT 0,", "attempt_count     integer      NOT NULL DEFAULT 1,"),
            "column attempt_count defaults to 1, migration 1 has 0",
        ),
        (
            variant("last_error        text,", "last_error        text NOT NULL DEFAULT '',"),
            "column last_error is NOT NULL, migration 1 allows NULL",
        ),
        (
            variant("last_error        text,\n", ""),
            "column last_error is missing",
        ),
        (
            variant(
                ",\n  CONSTRAINT outbox_idempotency_key_key UNIQUE (idempotency_key)",
                "",
            ),
            "unique constraint on (idempotency_key) is missing (seed producers' ON CONFLICT (idempotency_key) needs it)",
        ),
        (
            variant(
                "WHERE published_at IS NULL AND dead_lettered_at IS NULL;",
                "WHERE published_at IS NULL;",
            ),
            "index outbox_ready_idx is (available_at, id) WHERE (published_at IS NULL), migration 1 has (available_at, id) WHERE ((published_at IS NULL) AND (dead_lettered_at IS NULL))",
        ),
        (
            variant("processed_at timestamptz NOT NULL DEFAULT now(),\n  PRIMARY KEY (consumer, message_id)", "processed_at timestamptz NOT NULL DEFAULT now()"),
            "table processed_messages has no primary key (consumer, message_id)",
        ),
        (
            SEED_DDL[..SEED_DDL.find("CREATE TABLE processed_messages").unwrap()].to_owned(),
            "table processed_messages is missing",
        ),
        (
            variant("last_error        text,", "last_error        text,\n  claim_token uuid,"),
            "column claim_token already exists, but migration 2 adds it",
        ),
    ];
    for (ddl, want) in cases {
        let db = TestDb::unmigrated().await;
        create_seed_era(&db, &ddl).await;
        let before = catalog(&db).await;
        let out = db.cmd().arg("migrate").output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{want}: {err}");
        assert!(
            err.lines().any(|l| l.trim() == want),
            "missing line `{want}` in:\n{err}"
        );
        assert_eq!(catalog(&db).await, before, "{want}: catalog changed");
    }
}

#[tokio::test]
async fn extra_nullable_columns_and_indexes_do_not_prevent_adoption() {
    let ddl = format!(
        "{}\nALTER TABLE outbox ADD COLUMN trace_id text;\
         CREATE INDEX outbox_aggregate_idx ON outbox (aggregate_type, aggregate_id);",
        SEED_DDL
    );
    let db = TestDb::unmigrated().await;
    create_seed_era(&db, &ddl).await;
    assert_eq!(states(&status_json(&db))[0], "adoptable");
    let out = db.cmd().arg("migrate").output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

#[tokio::test]
async fn commands_on_an_unadopted_seed_table_say_run_migrate() {
    let db = TestDb::unmigrated().await;
    create_seed_era(&db, SEED_DDL).await;
    enqueue_orders(&db, 3).await;
    for args in [
        &["events", "list"][..],
        &["events", "show", "1"],
        &["relay", "--once", "--mode", "lease", "--sink", "null"],
        &["relay", "--once", "--mode", "tx", "--sink", "null"],
        &["dead", "list"],
        &["requeue", "--all"],
        &["prune", "--older-than", "1d"],
        &["events", "reschedule", "1", "--delay", "1m"],
        &["events", "cancel", "1", "--yes"],
    ] {
        let out = db.cmd().args(args).output().unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {err}");
        assert!(
            err.contains(&format!("run `outboxctl migrate --schema {}`", db.schema))
                && !err.contains("claim_token"),
            "{args:?}: {err}"
        );
    }
    let n = db.count("published_at IS NULL").await;
    assert_eq!(n, 3, "nothing was relayed");
}

#[tokio::test]
async fn tables_made_by_migration_1_itself_are_adoptable() {
    // Pins the comparison's idea of migration 1 to the embedded SQL.
    let db = TestDb::unmigrated().await;
    let m1 = outboxctl::db::migrate::MIGRATOR.iter().next().unwrap();
    create_seed_era(&db, &m1.sql).await;
    let v = status_json(&db);
    assert_eq!(states(&v)[0], "adoptable", "{v}");
}

/// A foreign `outbox` (here: a different payload type) is not adoptable, so no command may tell
/// the operator that `migrate` adopts it: they say it cannot be adopted and point at
/// `migrate --check`, which lists the differences (issue 22 item 11).
#[tokio::test]
async fn commands_on_a_foreign_outbox_table_do_not_promise_adoption() {
    let db = TestDb::unmigrated().await;
    create_seed_era(
        &db,
        &variant(
            "payload           jsonb        NOT NULL,",
            "payload           json         NOT NULL,",
        ),
    )
    .await;
    for args in [
        &["stats"][..],
        &["relay", "--once", "--sink", "null"],
        &[
            "publish",
            "--event-type",
            "e",
            "--aggregate-type",
            "a",
            "--aggregate-id",
            "1",
            "--payload",
            "{}",
        ],
    ] {
        let out = db.cmd().args(args).output().unwrap();
        let err = stderr(&out);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {err}");
        assert!(
            !err.contains("adopts it") && !err.contains("run `outboxctl migrate --schema"),
            "{args:?} promises an adoption migrate refuses: {err}"
        );
        assert!(
            err.contains("cannot be adopted")
                && err.contains(&format!("outboxctl migrate --check --schema {}", db.schema)),
            "{args:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    }
    // And migrate itself refuses it, as the commands said.
    let out = db.cmd().args(["migrate"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}
