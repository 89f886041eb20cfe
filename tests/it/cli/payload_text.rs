//! Payloads pass through every command digit for digit, and no payload breaks a list (issue 22,
//! items 1 and 2): commands read the stored JSON as text, never as `f64`s.

use crate::support::fixtures::*;
use crate::support::{run, run_json, stderr, stdout, TestDb};

/// The payload of the issue: a decimal with more digits than an f64 holds, and an integer past
/// u64.
const EXACT: &str =
    r#"{"amount":0.1000000000000000055511151231257827,"big":123456789012345678901234567890}"#;
const AMOUNT: &str = "0.1000000000000000055511151231257827";
const BIG: &str = "123456789012345678901234567890";

/// Asserts that `text` holds both numbers digit for digit, and no rounded form of them.
fn assert_exact(what: &str, text: &str) {
    assert!(
        text.contains(AMOUNT) && text.contains(BIG),
        "{what} lost digits:\n{text}"
    );
    for rounded in ["123456789012345680000000000000", "1.2345678901234568e29"] {
        assert!(!text.contains(rounded), "{what} rounded:\n{text}");
    }
}

/// The stored payload's numbers, as PostgreSQL's numeric prints them.
async fn stored(db: &TestDb, id: i64) -> (String, String) {
    sqlx::query_as(
        "SELECT (payload->'amount')::text, (payload->'big')::text FROM outbox WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&db.pool)
    .await
    .expect("stored payload")
}

#[tokio::test]
async fn the_dead_letter_repair_loop_keeps_every_digit() {
    let db = TestDb::new().await;
    let out = run(
        &db,
        &[
            "publish",
            "--event-type",
            "payment.captured",
            "--aggregate-type",
            "payment",
            "--aggregate-id",
            "p-1",
            "--idempotency-key",
            "pay-1",
            "--payload",
            EXACT,
        ],
        0,
    );
    let id: i64 = db
        .scalar("SELECT id FROM outbox WHERE idempotency_key = 'pay-1'")
        .await;
    assert_eq!(
        stored(&db, id).await,
        (AMOUNT.into(), BIG.into()),
        "{out:?}"
    );
    kill(&db, id, "1 minute", "HTTP 422 amount rejected").await;

    // Every command that shows the payload shows the digits.
    let sid = id.to_string();
    for args in [
        &["events", "show", &sid][..],
        &["events", "show", &sid, "--json"],
        &["dead", "show", &sid],
        &["dead", "show", &sid, "--json"],
        &["events", "list", "--json"],
        &["dead", "list", "--json"],
        &["requeue", &sid, "--dry-run", "--json"],
        &["dead", "discard", &sid, "--dry-run", "--json"],
        &["dead", "export", "--format", "full"],
    ] {
        let out = run(&db, args, 0);
        assert_exact(&args.join(" "), &stdout(&out));
    }
    // `--json` stays JSON.
    let v = run_json(&db, &["events", "show", &sid, "--json"]);
    assert_eq!(v["id"], id);

    // The edit's dry-run diff: the unchanged number shown as it is, the changed one both ways
    // (jsonb orders keys shorter first).
    let fixed = EXACT.replace("890}", "891}");
    let out = run(
        &db,
        &["events", "edit", &sid, "--payload", &fixed, "--dry-run"],
        0,
    );
    let diff = stdout(&out);
    assert!(
        diff.contains(&format!("    \"amount\": {AMOUNT}\n"))
            && diff.contains(&format!("-   \"big\": {BIG}"))
            && diff.contains("+   \"big\": 123456789012345678901234567891"),
        "{diff}"
    );
    // (The test reads JSON output as text: serde_json::Value would round it here.)
    let out = run(
        &db,
        &[
            "events",
            "edit",
            &sid,
            "--payload",
            &fixed,
            "--dry-run",
            "--json",
        ],
        0,
    );
    let text = stdout(&out);
    assert_exact("edit --dry-run --json", &text);
    assert!(text.contains("123456789012345678901234567891"), "{text}");

    // dead export -> edit the file -> dead discard -> publish --file.
    let out = run(&db, &["dead", "export", &sid], 0);
    let exported = stdout(&out);
    assert_exact("dead export", &exported);
    let repaired = exported.replace("payment.captured", "payment.captured.v2");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("repaired.jsonl");
    std::fs::write(&file, &repaired).unwrap();
    run(&db, &["dead", "discard", &sid, "--yes"], 0);
    let out = run(&db, &["publish", "--file", file.to_str().unwrap()], 0);
    let new_id: i64 = db
        .scalar("SELECT id FROM outbox WHERE idempotency_key = 'pay-1'")
        .await;
    assert_ne!(new_id, id, "{}", stderr(&out));
    assert_eq!(stored(&db, new_id).await, (AMOUNT.into(), BIG.into()));
    assert_eq!(
        db.scalar::<String>(&format!(
            "SELECT event_type FROM outbox WHERE id = {new_id}"
        ))
        .await,
        "payment.captured.v2"
    );

    // And an edit writes the digits it was given (the audit row keeps the old ones).
    let nid = new_id.to_string();
    run(&db, &["events", "edit", &nid, "--payload", &fixed], 0);
    assert_eq!(
        stored(&db, new_id).await,
        (AMOUNT.into(), "123456789012345678901234567891".into())
    );
    let out = run(&db, &["events", "show", &nid, "--json"], 0);
    let shown = stdout(&out);
    assert!(
        shown.contains("123456789012345678901234567891") && shown.contains(BIG),
        "the payload and the audit trail's previous payload:\n{shown}"
    );
}

/// `1e400` as PostgreSQL's numeric prints it: a 1 and 400 zeros.
fn e400() -> String {
    format!("1{}", "0".repeat(400))
}

#[tokio::test]
async fn a_payload_no_f64_holds_and_infinite_times_break_no_list() {
    let db = TestDb::new().await;
    run(
        &db,
        &[
            "publish",
            "--event-type",
            "big.number",
            "--aggregate-type",
            "n",
            "--aggregate-id",
            "1",
            "--payload",
            r#"{"n":1e400}"#,
        ],
        0,
    );
    let big: i64 = db
        .scalar("SELECT id FROM outbox WHERE event_type = 'big.number'")
        .await;
    kill(&db, big, "1 minute", "HTTP 400").await;
    // The rows around it: a dead one whose headers hold such a number too and whose times are
    // PostgreSQL's infinities and its last date (which chrono cannot hold), and a parked one.
    let far = ready(&db).await;
    kill(&db, far, "2 minutes", "HTTP 500").await;
    db.exec(&format!(
        "UPDATE outbox SET headers = '{{\"h\": 1e400}}', created_at = '-infinity',
                dead_lettered_at = '294276-12-31 23:59:59.999999+00',
                locked_until = 'infinity' WHERE id = {far}"
    ))
    .await;
    let parked = ready(&db).await;
    db.exec(&format!(
        "UPDATE outbox SET available_at = 'infinity' WHERE id = {parked}"
    ))
    .await;
    let ok = ready(&db).await;

    let zeros = e400();
    let (b, f, p) = (big.to_string(), far.to_string(), parked.to_string());
    let cases: Vec<(Vec<&str>, Vec<&str>)> = vec![
        // (args, what stdout must hold)
        (vec!["dead", "list"], vec!["big.number", "+294276-12-31"]),
        (vec!["dead", "list", "--json"], vec![&zeros, "-infinity"]),
        (vec!["dead", "export"], vec![&zeros]),
        (
            vec!["dead", "export", "--format", "full"],
            vec![&zeros, "infinity"],
        ),
        (vec!["dead", "show", &b], vec![&zeros]),
        (
            vec!["dead", "show", &f, "--json"],
            vec!["+294276-12-31T23:59:59.999999Z"],
        ),
        (
            vec!["requeue", "--all", "--dry-run"],
            vec!["would requeue 2 dead events"],
        ),
        (
            vec!["requeue", "--all", "--dry-run", "--json"],
            vec![&zeros],
        ),
        (
            vec!["dead", "discard", "--all", "--dry-run", "--json"],
            vec![&zeros],
        ),
        (vec!["events", "list"], vec!["infinity", "big.number"]),
        (
            vec!["events", "list", "--json"],
            vec![&zeros, "\"available_at\": \"infinity\""],
        ),
        (vec!["events", "show", &b], vec![&zeros]),
        (
            vec!["events", "show", &f],
            vec!["created at:       -infinity"],
        ),
        (
            vec!["events", "show", &p, "--json"],
            vec!["\"available_at\": \"infinity\""],
        ),
        (
            vec!["events", "cancel", "--state", "scheduled", "--dry-run"],
            vec!["infinity"],
        ),
        (
            vec!["events", "edit", &b, "--set-header", "x=1", "--dry-run"],
            vec!["+ x: 1"],
        ),
    ];
    for (args, want) in &cases {
        let out = run(&db, args, 0);
        let text = stdout(&out);
        for w in want {
            assert!(
                text.contains(w),
                "outboxctl {}: no `{w}` in\n{text}",
                args.join(" ")
            );
        }
    }
    // The list shows every row, the ordinary one too.
    let out = run(&db, &["events", "list", "--json"], 0);
    for id in [big, far, parked, ok] {
        assert!(stdout(&out).contains(&format!("\"id\": {id},")), "{id}");
    }
    // An edit takes such a payload too, and writes its digits.
    let payload = format!(r#"{{"n":1e400,"m":{zeros}.5}}"#);
    run(&db, &["events", "edit", &b, "--payload", &payload], 0);
    assert_eq!(
        db.scalar::<String>(&format!(
            "SELECT (payload->'m')::text FROM outbox WHERE id = {big}"
        ))
        .await,
        format!("{zeros}.5")
    );
}
