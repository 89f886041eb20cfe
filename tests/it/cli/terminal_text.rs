//! Text from the database never reaches a terminal raw (issue 22 item 6): every human-readable
//! output escapes control characters (`\u{1b}`, as `output::escape_controls` writes them);
//! `--json` keeps the original characters.
//!
//! Failure messages show outputs `{:?}`-escaped, so a failing test does not replay the escapes
//! on the terminal running it.

use serde_json::Value;

use crate::support::fixtures::kill;
use crate::support::TestDb;

/// Clears the screen, retitles the window, rings the bell; then a C1 CSI, DEL, a tab, a newline.
const EVIL: &str = "\u{1b}[2J\u{1b}]0;pwned\u{7}\u{9b}31m\u{7f}\tx\ny";
/// [`EVIL`] as the terminal must see it.
const ESCAPED: &str = "\\u{1b}[2J\\u{1b}]0;pwned\\u{7}\\u{9b}31m\\u{7f}\\tx\\ny";

/// An event whose every text column is [`EVIL`] (a header key and value, a payload string, the
/// error too). Returns its id.
async fn evil_event(db: &TestDb, key: &str) -> i64 {
    sqlx::query_scalar(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers,
                             idempotency_key, last_error, attempt_count)
         VALUES (gen_random_uuid(), $1, $1, $1, jsonb_build_object('s', $1), jsonb_build_object($1, $1),
                 $1 || $2, $1, 1)
         RETURNING id",
    )
    .bind(EVIL)
    .bind(key)
    .fetch_one(&db.pool)
    .await
    .expect("insert")
}

/// Runs the binary (any exit code) and returns its stdout, asserting it is UTF-8.
fn stdout_of(db: &TestDb, args: &[&str]) -> String {
    // Wide enough that no table cell wraps (the escaped text is looked for whole).
    let out = db
        .cmd()
        .env("COLUMNS", "1000")
        .args(args)
        .output()
        .expect("run");
    String::from_utf8(out.stdout).expect("UTF-8 stdout")
}

/// No control character but the line breaks in `out`; and, when `shown`, [`ESCAPED`] in it.
fn assert_clean(what: &str, out: &str, shown: bool) {
    let raw: Vec<char> = out
        .chars()
        .filter(|c| c.is_control() && *c != '\n')
        .collect();
    assert!(raw.is_empty(), "{what}: raw {raw:?} in stdout {out:?}");
    if shown {
        assert!(out.contains(ESCAPED), "{what}: no {ESCAPED} in {out:?}");
    }
}

fn json_of(db: &TestDb, args: &[&str]) -> Value {
    let out = stdout_of(db, args);
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out:?}"))
}

#[tokio::test]
async fn events_list_and_show_escape_row_text_and_json_keeps_it() {
    let db = TestDb::new().await;
    let id = evil_event(&db, "a").await;
    let out = stdout_of(&db, &["events", "list"]);
    assert_clean("events list", &out, true);
    let out = stdout_of(&db, &["events", "show", &id.to_string()]);
    assert_clean("events show", &out, true);
    // The payload and headers are JSON (jsonb writes ESC as \u001b); the C1 and DEL characters,
    // which JSON leaves as they are, are escaped too.
    assert!(out.contains("\\u001b[2J"), "{out:?}");

    let v = json_of(&db, &["events", "list", "--json"]);
    let e = &v["events"][0];
    for k in ["event_type", "aggregate_type", "aggregate_id", "last_error"] {
        assert_eq!(e[k], EVIL, "{k}");
    }
    assert_eq!(e["idempotency_key"], format!("{EVIL}a"));
    let v = json_of(&db, &["events", "show", &id.to_string(), "--json"]);
    assert_eq!(v["event_type"], EVIL);
    assert_eq!(v["headers"][EVIL], EVIL);
    assert_eq!(v["payload"]["s"], EVIL);
}

#[tokio::test]
async fn dead_list_show_and_requeue_dry_run_escape_row_text() {
    let db = TestDb::new().await;
    let id = evil_event(&db, "a").await;
    kill(&db, id, "1 minute", EVIL).await;
    for args in [
        vec!["dead", "list"],
        vec!["dead", "show", &id.to_string()],
        vec!["requeue", "--all", "--dry-run"],
    ] {
        let out = stdout_of(&db, &args);
        assert_clean(&args.join(" "), &out, true);
    }
    let v = json_of(&db, &["dead", "list", "--json"]);
    assert_eq!(v["events"][0]["event_type"], EVIL);
    assert_eq!(v["events"][0]["last_error"], EVIL);
}

#[tokio::test]
async fn stats_by_every_column_escapes_its_keys() {
    let db = TestDb::new().await;
    evil_event(&db, "a").await;
    for by in ["event-type", "aggregate-type"] {
        let out = stdout_of(&db, &["stats", "--by", by]);
        assert_clean(&format!("stats --by {by}"), &out, true);
    }
    let v = json_of(&db, &["stats", "--by", "event-type", "--json"]);
    assert_eq!(
        v["groups"][EVIL]["ready"],
        1,
        "{:?}",
        v["groups"].to_string()
    );
}

#[tokio::test]
async fn doctor_and_ordering_status_escape_row_text() {
    let db = TestDb::new().await;
    let id = evil_event(&db, "a").await;
    kill(&db, id, "2 days", EVIL).await;
    db.exec(&format!(
        "INSERT INTO outbox_ordering (aggregate_type, enabled_by) VALUES ('{}', '{}')",
        EVIL.replace('\'', "''"),
        EVIL.replace('\'', "''")
    ))
    .await;
    let out = stdout_of(&db, &["doctor"]);
    assert_clean("doctor", &out, false);
    let out = stdout_of(&db, &["ordering", "status"]);
    assert_clean("ordering status", &out, true);
    let v = json_of(&db, &["ordering", "status", "--json"]);
    assert_eq!(v["types"][0]["aggregate_type"], EVIL, "{v}");
}

#[tokio::test]
async fn the_edit_diff_escapes_row_text() {
    let db = TestDb::new().await;
    let id = evil_event(&db, "a").await;
    let out = stdout_of(
        &db,
        &[
            "events",
            "edit",
            &id.to_string(),
            "--event-type",
            "fixed",
            "--set-header",
            "k=v",
            "--dry-run",
        ],
    );
    assert_clean("events edit --dry-run", &out, true);
}

#[tokio::test]
async fn migrate_status_escapes_a_recorded_description() {
    // A migration this binary does not know (a newer binary's, or anyone's) is listed with the
    // description the database recorded.
    let db = TestDb::new().await;
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES (999, $1, true, '\\x00', 1)",
    )
    .bind(EVIL)
    .execute(&db.pool)
    .await
    .expect("insert");
    let out = stdout_of(&db, &["migrate", "--status"]);
    assert_clean("migrate --status", &out, true);
}
