//! `dead list|show|discard|export`, and the filters every selecting command shares.

use serde_json::Value;

use crate::support::fixtures::*;
use crate::support::{run, run_json, stderr, stdout, TestDb};

#[tokio::test]
async fn every_filter_selects_exactly_the_matching_dead_rows_in_every_command() {
    let db = TestDb::new().await;
    let [d1, d4, d2, d3, d5] = dead_fixture(&db).await;
    let three_days_ago = (chrono::Utc::now() - chrono::Duration::days(3)).to_rfc3339();
    let cases: Vec<(Vec<&str>, Vec<i64>)> = vec![
        (vec![], vec![d1, d4, d2, d3, d5]),
        (vec!["--event-type", "order.*"], vec![d1, d2]),
        (vec!["--event-type", "order_x.*"], vec![d4]),
        (vec!["--event-type", "order?x.placed"], vec![d4, d5]),
        (vec!["--event-type", "*.placed"], vec![d1, d4, d5]),
        (vec!["--event-type", "user.created"], vec![d3]),
        (vec!["--tenant", TENANT_B], vec![d4, d3]),
        (vec!["--aggregate-type", "user"], vec![d3]),
        (vec!["--aggregate-id", "o-1"], vec![d1, d4]),
        (vec!["--since", "1h"], vec![d1, d4]),
        (vec!["--until", "1h"], vec![d2, d3, d5]),
        (vec!["--since", "3h", "--until", "20m"], vec![d4, d2]),
        (vec!["--since", &three_days_ago], vec![d1, d4, d2, d3]),
        (vec!["--error", "TIMEOUT"], vec![d4, d2]),
        (vec!["--error", "50%"], vec![d4]),
        (vec!["--error-regex", "HTTP 50[0-9]"], vec![d1, d5]),
        (vec!["--error-regex", "^HTTP"], vec![d1, d3, d5]),
        (
            vec![
                "--event-type",
                "order*",
                "--tenant",
                TENANT_A,
                "--error",
                "503",
            ],
            vec![d1, d5],
        ),
    ];
    let before = snapshot(&db).await;
    for (filter, want) in &cases {
        let with = |cmd: &[&str]| -> Vec<String> {
            cmd.iter()
                .chain(filter.iter())
                .map(|s| s.to_string())
                .collect()
        };
        let args = with(&["dead", "list", "--json"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert_eq!(
            &event_ids(&run_json(&db, &args)),
            want,
            "dead list {filter:?}"
        );

        // The selecting commands agree with `dead list` (dry runs and export change nothing).
        if !filter.is_empty() {
            for cmd in [
                &["requeue", "--dry-run", "--json"][..],
                &["dead", "discard", "--dry-run", "--json"][..],
            ] {
                let args = with(cmd);
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                let v = run_json(&db, &args);
                assert_eq!(&event_ids(&v), want, "{cmd:?} {filter:?}");
                assert_eq!(v["matched"], want.len(), "{cmd:?} {filter:?}");
            }
        }
        let args = with(&["dead", "export", "--format", "full"]);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = run(&db, &args, 0);
        let exported: Vec<i64> = stdout(&out)
            .lines()
            .map(|l| {
                serde_json::from_str::<Value>(l).unwrap()["id"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        assert_eq!(&exported, want, "dead export {filter:?}");
    }
    assert_eq!(
        snapshot(&db).await,
        before,
        "dry runs and reads changed nothing"
    );
}

#[tokio::test]
async fn list_limit_table_and_empty_result() {
    let db = TestDb::new().await;
    let [d1, d4, ..] = dead_fixture(&db).await;
    let v = run_json(&db, &["dead", "list", "--limit", "2", "--json"]);
    assert_eq!(event_ids(&v), [d1, d4]);
    assert_eq!(v["truncated"], true);
    assert_eq!(v["count"], 2);
    let v = run_json(&db, &["dead", "list", "--limit", "5", "--json"]);
    assert_eq!(v["truncated"], false);

    let out = run(&db, &["dead", "ls", "--limit", "2"], 0);
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let row1 = lines
        .iter()
        .position(|l| l.contains(&format!(" {d1} ")))
        .unwrap();
    let row2 = lines
        .iter()
        .position(|l| l.contains(&format!(" {d4} ")))
        .unwrap();
    assert!(row1 < row2, "newest dead first:\n{text}");
    assert!(text.contains("HTTP 503 Service Unavailable"), "{text}");
    assert!(
        !text.contains("sink.publish"),
        "only the error's first line:\n{text}"
    );
    assert!(
        text.contains("order.placed") && text.contains("order/o-1"),
        "{text}"
    );
    assert!(stderr(&out).contains("more match"), "{}", stderr(&out));

    let out = run(&db, &["dead", "list", "--event-type", "nothing.*"], 0);
    assert!(stdout(&out).contains("no dead-lettered events match"));
}

#[tokio::test]
async fn bad_filters_are_usage_errors_naming_the_flag() {
    let db = TestDb::new().await;
    for (args, needle) in [
        (vec!["dead", "list", "--tenant", "acme"], "--tenant"),
        (vec!["dead", "list", "--since", "yesterday"], "--since"),
        (vec!["dead", "list", "--aggregate-id", ""], "--aggregate-id"),
        (
            vec!["dead", "list", "--since", "1h", "--until", "2h"],
            "--since",
        ),
        (
            vec!["dead", "list", "--error-regex", "(unclosed"],
            "--error-regex",
        ),
        (
            vec!["dead", "list", "--event-type", "oops\\"],
            "--event-type",
        ),
        (vec!["dead", "list", "--limit", "0"], "--limit"),
        (vec!["requeue", "--error-regex", "[z-a]"], "--error-regex"),
        (
            vec!["dead", "export", "1", "--event-type", "x"],
            "ids or filters",
        ),
    ] {
        let out = run(&db, &args, 2);
        let err = stderr(&out);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(err.trim().lines().count() <= 5, "{err}");
    }
}

#[tokio::test]
async fn show_prints_the_whole_row_and_refuses_other_states() {
    let db = TestDb::new().await;
    let [d1, ..] = dead_fixture(&db).await;
    let v = run_json(&db, &["dead", "show", &d1.to_string(), "--json"]);
    assert_eq!(v["id"], d1);
    assert_eq!(v["state"], "dead");
    assert_eq!(
        v["last_error"],
        "HTTP 503 Service Unavailable\n  at sink.publish"
    );
    assert_eq!(v["payload"]["aggregate"], "o-1");
    assert_eq!(v["headers"]["schema-version"], "1");
    assert_eq!(v["attempt_count"], 10);
    assert!(v["dead_lettered_at"].is_string());
    assert_eq!(v["requeues"], serde_json::json!([]));

    let text = stdout(&run(&db, &["dead", "show", &d1.to_string()], 0));
    assert!(
        text.contains("  at sink.publish"),
        "whole last_error:\n{text}"
    );
    assert!(
        text.contains("\"schema-version\": \"1\""),
        "pretty headers:\n{text}"
    );
    assert!(
        text.contains("\"aggregate\": \"o-1\""),
        "pretty payload:\n{text}"
    );

    let r = ready(&db).await;
    let out = run(&db, &["dead", "show", &r.to_string()], 2);
    assert!(
        stderr(&out).contains("is ready, not dead-lettered"),
        "{}",
        stderr(&out)
    );
    let out = run(&db, &["dead", "show", "999999"], 2);
    assert!(
        stderr(&out).contains("no event with id 999999"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn discard_deletes_exactly_the_selection_and_needs_yes() {
    let db = TestDb::new().await;
    let [d1, d4, d2, d3, d5] = dead_fixture(&db).await;
    let all_before = ids(&db, "SELECT id FROM outbox").await;

    // Without --yes (stdin is not a terminal here) nothing happens.
    let before = snapshot(&db).await;
    let out = run(&db, &["dead", "discard", "--tenant", TENANT_B], 2);
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    // No selection at all.
    let out = run(&db, &["dead", "discard", "--yes"], 2);
    assert!(stderr(&out).contains("--all"), "{}", stderr(&out));
    // A non-dead id among the ids.
    let r = ids(
        &db,
        "SELECT id FROM outbox WHERE dead_lettered_at IS NULL LIMIT 1",
    )
    .await[0];
    let out = run(
        &db,
        &["dead", "discard", &d1.to_string(), &r.to_string(), "--yes"],
        2,
    );
    assert!(
        stderr(&out).contains(&format!("event {r} is")),
        "{}",
        stderr(&out)
    );
    // Dry run.
    let out = run(
        &db,
        &["dead", "discard", "--tenant", TENANT_B, "--dry-run"],
        0,
    );
    assert!(
        stdout(&out).contains("would discard 2 dead events"),
        "{}",
        stdout(&out)
    );
    assert_eq!(snapshot(&db).await, before);

    let out = run(&db, &["dead", "discard", "--tenant", TENANT_B, "--yes"], 0);
    assert!(
        stdout(&out).starts_with("discarded 2 dead events in 1 batch"),
        "{}",
        stdout(&out)
    );
    let out = run(&db, &["dead", "rm", &d1.to_string(), "--yes"], 0);
    assert!(
        stdout(&out).starts_with("discarded 1 dead event in 1 batch"),
        "{}",
        stdout(&out)
    );
    let left: Vec<i64> = all_before
        .iter()
        .copied()
        .filter(|i| ![d1, d4, d3].contains(i))
        .collect();
    assert_eq!(ids(&db, "SELECT id FROM outbox").await, left);

    let v = run_json(
        &db,
        &[
            "dead",
            "discard",
            "--all",
            "--yes",
            "--batch-size",
            "1",
            "--json",
        ],
    );
    assert_eq!(v["discarded"], 2);
    assert_eq!(v["batches"], 2);
    assert_eq!(v["ids"], serde_json::json!([d2.min(d5), d2.max(d5)]));
    assert_eq!(
        ids(
            &db,
            "SELECT id FROM outbox WHERE dead_lettered_at IS NOT NULL"
        )
        .await,
        Vec::<i64>::new()
    );
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox").await,
        4,
        "non-dead rows stay"
    );
    let out = run(&db, &["dead", "discard", "--all", "--yes"], 0);
    assert!(stdout(&out).contains("no dead-lettered events match; nothing discarded"));
}

#[tokio::test]
async fn export_writes_publish_lines_that_publish_accepts_after_discard() {
    let db = TestDb::new().await;
    let [d1, d4, ..] = dead_fixture(&db).await;
    let out = run(&db, &["dead", "export", "--aggregate-id", "o-1"], 0);
    let text = stdout(&out);
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 2, "{text}");
    let mut keys: Vec<String> = lines[0].as_object().unwrap().keys().cloned().collect();
    keys.sort();
    assert_eq!(
        keys,
        [
            "aggregate_id",
            "aggregate_type",
            "event_type",
            "headers",
            "idempotency_key",
            "payload",
            "tenant_id"
        ]
    );
    assert!(
        stderr(&out).contains("exported 2 dead events"),
        "{}",
        stderr(&out)
    );
    let originals: Vec<(String, String, Value)> = sqlx::query_as(
        "SELECT idempotency_key, event_type, payload FROM outbox WHERE id = ANY($1) ORDER BY id",
    )
    .bind(vec![d1, d4])
    .fetch_all(&db.pool)
    .await
    .unwrap();

    // Fix offline, discard the dead rows, publish the file: same keys, fixed payload, ready.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("dead.jsonl");
    let fixed: String = lines
        .iter()
        .map(|l| {
            let mut l = l.clone();
            l["payload"]["fixed"] = Value::Bool(true);
            format!("{l}\n")
        })
        .collect();
    std::fs::write(&file, fixed).unwrap();
    run(
        &db,
        &["dead", "discard", &d1.to_string(), &d4.to_string(), "--yes"],
        0,
    );
    run(&db, &["publish", "--file", file.to_str().unwrap()], 0);
    let republished: Vec<(String, String, Value, bool)> = sqlx::query_as(
        "SELECT idempotency_key, event_type, payload,
                published_at IS NULL AND dead_lettered_at IS NULL AND attempt_count = 0
           FROM outbox WHERE idempotency_key = ANY($1) ORDER BY id",
    )
    .bind(originals.iter().map(|o| o.0.clone()).collect::<Vec<_>>())
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(republished.len(), 2);
    for (o, r) in originals.iter().zip(&republished) {
        assert_eq!((&o.0, &o.1), (&r.0, &r.1));
        assert_eq!(r.2["fixed"], true);
        assert_eq!(r.2["aggregate"], o.2["aggregate"]);
        assert!(r.3, "re-published as a fresh pending event");
    }

    // By ids; an id that is not dead is refused.
    let out = run(&db, &["dead", "export", &d1.to_string()], 2);
    assert!(
        stderr(&out).contains(&format!("no event {d1}")),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn a_closed_stdout_is_a_normal_exit_for_the_reading_commands() {
    use std::os::fd::OwnedFd;
    use std::process::Stdio;
    let db = TestDb::new().await;
    let [d1, ..] = dead_fixture(&db).await;
    let id = d1.to_string();
    for args in [
        &["dead", "list"][..],
        &["dead", "list", "--json"],
        &["dead", "show", &id],
        &["dead", "export"],
        &["dead", "export", "--format", "full"],
        &["events", "list"],
        &["events", "list", "--json"],
        &["events", "show", &id, "--json"],
        &["requeue", "--all", "--dry-run"],
        &["dead", "discard", "--all", "--dry-run", "--json"],
        &["prune", "--older-than", "7d", "--dry-run"],
    ] {
        let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        drop(ours);
        let out = db
            .cmd()
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::from(OwnedFd::from(theirs)))
            .stderr(Stdio::piped())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
        assert!(
            !stderr(&out).contains("error") && !stderr(&out).contains("panicked"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}
