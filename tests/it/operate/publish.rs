//! `outboxctl publish`: every flag, bulk JSON lines from a file and from stdin, duplicates, and
//! every kind of bad input leaving the table exactly as it was.

use std::io::Write;
use std::process::{Output, Stdio};

use serde_json::{json, Value};

use crate::support::{output, stderr, stdout, TestDb};

const NIL: &str = "00000000-0000-0000-0000-000000000000";

/// Runs `publish ARGS` with `input` on stdin.
fn run_stdin(db: &TestDb, args: &[&str], input: Vec<u8>) -> Output {
    let mut child = db
        .cmd()
        .arg("publish")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        // The child may exit early on a bad line; a broken pipe here is expected then.
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn json_out(out: &Output) -> Value {
    assert!(
        out.status.success(),
        "exit {:?}: {}",
        out.status.code(),
        stderr(out)
    );
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", stdout(out)))
}

/// Everything in the table, as one comparable text (ids, timestamps and all).
async fn table_state(db: &TestDb) -> (i64, String) {
    db.row::<(i64, String)>(
        "SELECT count(*), coalesce(md5(string_agg(o::text, '|' ORDER BY id)), '') FROM outbox o",
    )
    .await
}

fn one_line(v: Value) -> String {
    let mut s = v.to_string();
    s.push('\n');
    s
}

fn event(key: &str) -> Value {
    json!({"event_type": "order.placed", "aggregate_type": "order", "aggregate_id": key,
           "payload": {"key": key}, "idempotency_key": key})
}

#[tokio::test]
async fn every_flag_is_stored_in_its_column() {
    let db = TestDb::new().await;
    let tenant = "6f9619ff-8b86-d011-b42d-00cf4fc964ff";
    // Numbers beyond f64 precision must reach the table digit for digit.
    let payload = r#"{"total": 1200, "big": 123456789012345678901234567890, "pi": 3.14159265358979323846264338327950288, "s": "é\"x"}"#;
    let out = output(db.cmd().args([
        "publish",
        "--event-type",
        "order.placed",
        "--aggregate-type",
        "order",
        "--aggregate-id",
        "42",
        "--tenant",
        tenant,
        "--payload",
        payload,
        "--header",
        "schema-version=1",
        "--header",
        "trace=a=b",
        "--idempotency-key",
        "order.placed:42",
        "--json",
    ]));
    let v = json_out(&out);
    assert_eq!(v["inserted"], 1);
    assert_eq!(v["duplicates"], 0);
    let events = v["events"].as_array().unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["idempotency_key"], "order.placed:42");
    assert!(events[0].get("line").is_none(), "{v}");

    #[derive(sqlx::FromRow)]
    struct Row {
        id: i64,
        tenant: String,
        event_type: String,
        aggregate_type: String,
        aggregate_id: String,
        payload_exact: bool,
        payload: String,
        headers: Value,
        idempotency_key: String,
        attempt_count: i32,
    }
    let row: Row = sqlx::query_as(
        "SELECT id, tenant_id::text AS tenant, event_type, aggregate_type, aggregate_id,
                payload = $1::jsonb AS payload_exact, payload::text AS payload, headers,
                idempotency_key, attempt_count
           FROM outbox",
    )
    .bind(payload)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(row.id, events[0]["id"].as_i64().unwrap());
    assert_eq!(
        (
            &row.tenant[..],
            &row.event_type[..],
            &row.aggregate_type[..],
            &row.aggregate_id[..]
        ),
        (tenant, "order.placed", "order", "42")
    );
    assert!(
        row.payload_exact,
        "payload changed on the way in: {}",
        row.payload
    );
    assert_eq!(row.headers, json!({"schema-version": "1", "trace": "a=b"}));
    assert_eq!(row.idempotency_key, "order.placed:42");
    assert_eq!(row.attempt_count, 0);
    let (due_now, untouched): (bool, bool) = db
        .row(
            "SELECT available_at = created_at,
                    locked_until IS NULL AND published_at IS NULL AND dead_lettered_at IS NULL
                    AND last_error IS NULL
               FROM outbox",
        )
        .await;
    assert!(due_now && untouched);
}

#[tokio::test]
async fn human_output_and_payload_from_a_file() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let body = dir.path().join("body.json");
    std::fs::write(&body, "{\n  \"lines\": [1, 2],\n  \"n\": 1.50\n}\n").unwrap();
    let out = output(
        db.cmd()
            .args([
                "publish",
                "--event-type",
                "a",
                "--aggregate-type",
                "b",
                "--aggregate-id",
                "c",
                "--idempotency-key",
                "k-file",
            ])
            .arg("--payload")
            .arg(format!("@{}", body.display())),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let id: i64 = db.scalar("SELECT id FROM outbox").await;
    assert_eq!(
        stdout(&out),
        format!("inserted event {id} (idempotency key k-file)\n")
    );
    let ok: bool = db
        .scalar(r#"SELECT payload = '{"lines": [1, 2], "n": 1.50}'::jsonb FROM outbox"#)
        .await;
    assert!(ok);
}

#[tokio::test]
async fn defaults_are_a_fresh_uuid_key_and_the_nil_tenant() {
    let db = TestDb::new().await;
    for _ in 0..2 {
        let out = output(db.cmd().args([
            "publish",
            "--event-type",
            "a",
            "--aggregate-type",
            "b",
            "--aggregate-id",
            "c",
            "--payload",
            "{}",
        ]));
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let rows: Vec<(String, String)> =
        sqlx::query_as("SELECT tenant_id::text, idempotency_key FROM outbox ORDER BY id")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(rows.len(), 2, "no key given: every call inserts");
    for (tenant, key) in &rows {
        assert_eq!(tenant, NIL);
        uuid::Uuid::parse_str(key).unwrap_or_else(|_| panic!("default key `{key}` is a uuid"));
    }
    assert_ne!(rows[0].1, rows[1].1);
}

#[tokio::test]
async fn delay_is_added_to_the_database_clock() {
    let db = TestDb::new().await;
    let before: chrono::DateTime<chrono::Utc> = db.scalar("SELECT now()").await;
    let out = output(db.cmd().args([
        "publish",
        "--event-type",
        "a",
        "--aggregate-type",
        "b",
        "--aggregate-id",
        "c",
        "--payload",
        "{}",
        "--delay",
        "1h 2m 3s 4ms 5us",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    let after: chrono::DateTime<chrono::Utc> = db.scalar("SELECT now()").await;
    let (created, exact): (chrono::DateTime<chrono::Utc>, bool) = db
        .row(
            "SELECT created_at,
                    available_at - created_at = interval '1 hour 2 minutes 3.004005 seconds'
               FROM outbox",
        )
        .await;
    assert!(
        exact,
        "available_at must be created_at (the database's now()) plus the delay"
    );
    assert!(
        before <= created && created <= after,
        "created_at comes from the database clock: {before} <= {created} <= {after}"
    );
    // And the env fallback does the same.
    let out = output(db.cmd().env("OUTBOXCTL_DELAY", "90s").args([
        "publish",
        "--event-type",
        "a",
        "--aggregate-type",
        "b",
        "--aggregate-id",
        "d",
        "--payload",
        "{}",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    let ok: bool = db
        .scalar("SELECT available_at - created_at = interval '90 seconds' FROM outbox WHERE aggregate_id = 'd'")
        .await;
    assert!(ok);
}

#[tokio::test]
async fn at_sets_available_at_exactly() {
    let db = TestDb::new().await;
    let out = output(db.cmd().args([
        "publish",
        "--event-type",
        "a",
        "--aggregate-type",
        "b",
        "--aggregate-id",
        "c",
        "--payload",
        "{}",
        "--at",
        "2031-05-06T07:08:09.123456+02:00",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    let ok: bool = db
        .scalar("SELECT available_at = '2031-05-06T05:08:09.123456Z'::timestamptz FROM outbox")
        .await;
    assert!(ok);
}

#[tokio::test]
async fn a_duplicate_key_is_skipped_counted_and_leaves_the_first_row() {
    let db = TestDb::new().await;
    let publish = |payload: &str, json: bool| {
        let mut c = db.cmd();
        c.args([
            "publish",
            "--event-type",
            "a",
            "--aggregate-type",
            "b",
            "--aggregate-id",
            "c",
            "--idempotency-key",
            "same",
            "--payload",
            payload,
        ]);
        if json {
            c.arg("--json");
        }
        output(&mut c)
    };
    assert!(publish(r#"{"v":1}"#, false).status.success());
    let state = table_state(&db).await;

    let out = publish(r#"{"v":2}"#, false);
    assert!(out.status.success(), "a duplicate is not an error");
    assert_eq!(
        stdout(&out),
        "duplicate: an event with this idempotency key exists; nothing inserted\n"
    );
    let v = json_out(&publish(r#"{"v":3}"#, true));
    assert_eq!(
        (&v["inserted"], &v["duplicates"], &v["events"]),
        (&json!(0), &json!(1), &json!([]))
    );
    assert_eq!(table_state(&db).await, state);
}

#[tokio::test]
async fn bulk_lines_use_every_key() {
    let db = TestDb::new().await;
    let tenant = "6f9619ff-8b86-d011-b42d-00cf4fc964ff";
    // A BOM, CRLF line ends, blank lines, an integer aggregate id, null optionals.
    let input = format!(
        "\u{feff}{}\r\n\n{}\n   \n{}\n{}",
        json!({"event_type": "e1", "aggregate_type": "t1", "aggregate_id": 7, "payload": {"n": 1},
               "tenant_id": tenant, "headers": {"h": "v"}, "idempotency_key": "k1",
               "available_at": "2031-01-02T03:04:05Z"}),
        json!({"event_type": "e2", "aggregate_type": "t2", "aggregate_id": "x", "payload": [1, "two"],
               "idempotency_key": "k2", "delay": "5m"}),
        r#"{"event_type": "e3", "aggregate_type": "t3", "aggregate_id": "y", "payload": 12345678901234567890123, "tenant_id": null, "headers": null, "idempotency_key": "k3"}"#,
        r#"{"event_type":"e4","aggregate_type":"t4","aggregate_id":"z","payload":null}"#,
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    std::fs::write(&file, input).unwrap();
    let out = output(db.cmd().args(["publish", "--json", "--file"]).arg(&file));
    let v = json_out(&out);
    assert_eq!((&v["inserted"], &v["duplicates"]), (&json!(4), &json!(0)));
    let lines: Vec<i64> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_i64().unwrap())
        .collect();
    assert_eq!(lines, [1, 3, 5, 6], "line numbers count blank lines");

    #[derive(sqlx::FromRow)]
    struct Row {
        tenant: String,
        event_type: String,
        aggregate_id: String,
        payload: String,
        headers: Value,
        available_at_ok: bool,
        key_ok: bool,
    }
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT tenant_id::text AS tenant, event_type, aggregate_id, payload::text AS payload,
                headers,
                available_at = CASE event_type
                                 WHEN 'e1' THEN '2031-01-02T03:04:05Z'::timestamptz
                                 WHEN 'e2' THEN created_at + interval '5 minutes'
                                 ELSE created_at END AS available_at_ok,
                idempotency_key = CASE event_type WHEN 'e1' THEN 'k1' WHEN 'e2' THEN 'k2'
                                                  WHEN 'e3' THEN 'k3' ELSE idempotency_key END
                  AS key_ok
           FROM outbox ORDER BY event_type",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 4);
    assert_eq!(
        (
            &rows[0].tenant[..],
            &rows[0].aggregate_id[..],
            &rows[0].headers
        ),
        (tenant, "7", &json!({"h": "v"}))
    );
    assert_eq!(rows[1].payload, r#"[1, "two"]"#);
    assert_eq!(rows[2].payload, "12345678901234567890123");
    assert_eq!(rows[3].payload, "null");
    for r in &rows {
        assert!(r.available_at_ok, "available_at of {}", r.event_type);
        assert!(r.key_ok, "idempotency key of {}", r.event_type);
        if r.event_type != "e1" {
            assert_eq!(r.tenant, NIL);
            assert_eq!(r.headers, json!({}));
        }
    }
    let default_key: String = db
        .scalar("SELECT idempotency_key FROM outbox WHERE event_type = 'e4'")
        .await;
    uuid::Uuid::parse_str(&default_key).unwrap();
}

#[tokio::test]
async fn bulk_duplicates_within_the_file_and_against_the_table_are_skipped_and_counted() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         VALUES ('00000000-0000-0000-0000-000000000000', 'order', 'old', 'order.placed', '{}', 'k1')",
    )
    .await;
    let mut second_k2 = event("k2");
    second_k2["payload"] = json!({"second": true});
    let input: String = [
        event("k1"), // line 1: exists in the table
        event("k2"), // line 2: new
        second_k2,   // line 3: same key as line 2, same batch
        event("k3"), // line 4: new, second batch
        event("k2"), // line 5: same key as line 2, another batch
        event("k1"), // line 6
    ]
    .into_iter()
    .map(one_line)
    .collect();

    let out = run_stdin(
        &db,
        &["--file", "-", "--batch-size", "3"],
        input.clone().into(),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.starts_with("inserted 2 events, skipped 4 duplicates (idempotency key exists) in "),
        "{text}"
    );
    let rows: Vec<(String, String, Value)> = sqlx::query_as(
        "SELECT idempotency_key, aggregate_id, payload FROM outbox ORDER BY idempotency_key",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        rows,
        [
            ("k1".into(), "old".into(), json!({})),
            ("k2".into(), "k2".into(), json!({"key": "k2"})),
            ("k3".into(), "k3".into(), json!({"key": "k3"})),
        ],
        "the first line with a key wins; existing rows are untouched"
    );

    // Again, all of it: everything is a duplicate now.
    let v = json_out(&run_stdin(&db, &["-f", "-", "--json"], input.into()));
    assert_eq!(
        (&v["inserted"], &v["duplicates"], &v["events"]),
        (&json!(0), &json!(6), &json!([]))
    );
}

/// `n` distinct events as JSON lines.
fn many_lines(n: usize) -> String {
    let mut s = String::with_capacity(n * 140);
    for i in 1..=n {
        s.push_str(&format!(
            r#"{{"event_type":"bulk.test","aggregate_type":"item","aggregate_id":{i},"payload":{{"i":{i}}},"idempotency_key":"bulk-{i}"}}"#
        ));
        s.push('\n');
    }
    s
}

#[tokio::test]
async fn bulk_100k_lines_from_a_file_and_the_json_ids_match_the_table() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("events.jsonl");
    std::fs::write(&file, many_lines(100_000)).unwrap();
    let out = output(db.cmd().args(["publish", "--json", "--file"]).arg(&file));
    let v = json_out(&out);
    assert_eq!(
        (&v["inserted"], &v["duplicates"]),
        (&json!(100_000), &json!(0))
    );
    let reported: Vec<(i64, String, i64)> = v["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["id"].as_i64().unwrap(),
                e["idempotency_key"].as_str().unwrap().to_owned(),
                e["line"].as_i64().unwrap(),
            )
        })
        .collect();
    let table: Vec<(i64, String, i64)> = sqlx::query_as(
        "SELECT id, idempotency_key, substr(idempotency_key, 6)::bigint FROM outbox ORDER BY 3",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(table.len(), 100_000);
    assert!(
        reported == table,
        "--json reports every inserted row with its id, key and line, in line order"
    );
}

#[tokio::test]
async fn bulk_100k_lines_from_stdin() {
    let db = TestDb::new().await;
    let out = run_stdin(&db, &["--file", "-"], many_lines(100_000).into());
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).starts_with("inserted 100000 events, skipped 0 duplicates"),
        "{}",
        stdout(&out)
    );
    let (n, distinct, payloads_ok): (i64, i64, bool) = sqlx::query_as(
        "SELECT count(*), count(DISTINCT idempotency_key),
                bool_and(payload = jsonb_build_object('i', aggregate_id::bigint))
           FROM outbox",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!((n, distinct, payloads_ok), (100_000, 100_000, true));
}

/// Good lines 1-5, then `bad` on line 6, then more good lines; batches of 2, so two batches were
/// already inserted (in the run's transaction) when line 6 is read.
fn with_bad_line_6(bad: &[u8]) -> Vec<u8> {
    let mut input = Vec::new();
    for i in 1..=5 {
        input.extend_from_slice(one_line(event(&format!("good-{i}"))).as_bytes());
    }
    input.extend_from_slice(bad);
    input.push(b'\n');
    input.extend_from_slice(one_line(event("good-7")).as_bytes());
    input
}

#[tokio::test]
async fn a_bad_line_anywhere_is_named_exits_2_and_leaves_the_table_as_it_was() {
    let db = TestDb::new().await;
    let base = r#""event_type":"a","aggregate_type":"o","aggregate_id":"1""#;
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "invalid JSON",
            br#"{"event_type":"a","#.to_vec(),
            "line 6: invalid JSON",
        ),
        (
            "not an object",
            b"[1, 2]".to_vec(),
            "line 6: expected a JSON object with event_type, aggregate_type, aggregate_id and payload, not `[1, 2]`",
        ),
        (
            "not JSON at all",
            b"event_type=a".to_vec(),
            "line 6: invalid JSON: expected value (column 1)",
        ),
        (
            "bad uuid",
            format!(r#"{{{base},"payload":1,"tenant_id":"nope"}}"#).into_bytes(),
            "line 6: tenant_id `nope` is not a uuid",
        ),
        (
            "bad duration",
            format!(r#"{{{base},"payload":1,"delay":"soon"}}"#).into_bytes(),
            "line 6: delay: `soon` is not a duration",
        ),
        (
            "bad available_at",
            format!(r#"{{{base},"payload":1,"available_at":"tomorrow"}}"#).into_bytes(),
            "line 6: available_at: `tomorrow` is not an RFC 3339 time",
        ),
        (
            "delay and available_at",
            format!(r#"{{{base},"payload":1,"delay":"1s","available_at":"2030-01-01T00:00:00Z"}}"#)
                .into_bytes(),
            "line 6: give either available_at or delay, not both",
        ),
        (
            "unknown key",
            format!(r#"{{{base},"payload":1,"evnt":"x"}}"#).into_bytes(),
            "line 6: unknown field `evnt`",
        ),
        (
            "missing field",
            format!(r#"{{{base}}}"#).into_bytes(),
            "line 6: missing field `payload`",
        ),
        (
            "empty field",
            br#"{"event_type":" ","aggregate_type":"o","aggregate_id":"1","payload":1}"#.to_vec(),
            "line 6: event_type must not be empty",
        ),
        (
            "wrong type",
            format!(r#"{{{base},"payload":1,"headers":{{"n":1}}}}"#).into_bytes(),
            "line 6: header `n` must be a string",
        ),
        (
            "fractional aggregate id",
            br#"{"event_type":"a","aggregate_type":"o","aggregate_id":1.5,"payload":1}"#.to_vec(),
            "line 6: aggregate_id must be a string or an integer",
        ),
        (
            "NUL in payload",
            format!(r#"{{{base},"payload":{{"s":"a\u0000b"}}}}"#).into_bytes(),
            "line 6: payload contains a NUL character",
        ),
        (
            "NUL in a column",
            br#"{"event_type":"a\u0000","aggregate_type":"o","aggregate_id":"1","payload":1}"#
                .to_vec(),
            "line 6: event_type contains a NUL character",
        ),
        (
            "invalid UTF-8",
            b"{\"event_type\":\"a\xff\"}".to_vec(),
            "line 6: not valid UTF-8",
        ),
        // Valid JSON that PostgreSQL's jsonb cannot hold: reported with the batch's lines.
        (
            "number out of range",
            format!(r#"{{{base},"payload":1e1000000}}"#).into_bytes(),
            "PostgreSQL rejected lines 5-6",
        ),
    ];
    db.seed_ready(3).await;
    let before = table_state(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for (i, (name, bad, want)) in cases.iter().enumerate() {
        let input = with_bad_line_6(bad);
        let outputs = if i % 2 == 0 {
            let file = dir.path().join(format!("{i}.jsonl"));
            std::fs::write(&file, &input).unwrap();
            vec![output(
                db.cmd()
                    .args(["publish", "--batch-size", "2", "--file"])
                    .arg(&file),
            )]
        } else {
            vec![run_stdin(&db, &["--batch-size", "2", "--file", "-"], input)]
        };
        for out in outputs {
            let err = stderr(&out);
            if out.status.code() != Some(2)
                || !err.starts_with("error: ")
                || !err.contains(want)
                || !err.contains("nothing was inserted")
                || !out.stdout.is_empty()
            {
                failures.push(format!(
                    "{name}: exit {:?}, stderr {err:?}, want {want:?}",
                    out.status.code()
                ));
            }
        }
        assert_eq!(table_state(&db).await, before, "{name}: table changed");
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn a_bad_line_after_the_first_batch_leaves_an_empty_table_empty() {
    let db = TestDb::new().await;
    let out = run_stdin(
        &db,
        &["--batch-size", "2", "-f", "-"],
        with_bad_line_6(b"{oops"),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("line 6:"), "{}", stderr(&out));
    let n: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(
        n, 0,
        "lines 1-4 were inserted before line 6 was read, and rolled back"
    );
}

#[tokio::test]
async fn every_bad_flag_is_named_exits_2_and_changes_nothing() {
    let db = TestDb::with_backlog(2).await;
    let before = table_state(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let bad_body = dir.path().join("bad.json");
    std::fs::write(&bad_body, "{not json").unwrap();
    let bad_body = format!("@{}", bad_body.display());
    let missing = format!("@{}", dir.path().join("missing.json").display());
    let ok = [
        "--event-type",
        "a",
        "--aggregate-type",
        "b",
        "--aggregate-id",
        "c",
    ];
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["--payload", "{"], "--payload is not valid JSON"),
        (vec!["--payload", "{} {}"], "--payload is not valid JSON"),
        (vec!["--payload", &bad_body], "--payload is not valid JSON"),
        (vec!["--payload", &missing], "cannot read --payload file"),
        (
            vec!["--payload", r#""a\u0000""#],
            "payload contains a NUL character",
        ),
        (
            vec!["--payload", "1e1000000"],
            "PostgreSQL rejected the event",
        ),
        (
            vec!["--payload", "{}", "--tenant", "nope"],
            "--tenant `nope` is not a uuid",
        ),
        (
            vec!["--payload", "{}", "--header", "novalue"],
            "invalid --header `novalue`: use KEY=VALUE",
        ),
        (
            vec!["--payload", "{}", "--header", "=v"],
            "invalid --header `=v`",
        ),
        (
            vec!["--payload", "{}", "--delay", "soon"],
            "invalid value 'soon' for '--delay <DURATION>'",
        ),
        (
            vec!["--payload", "{}", "--at", "tomorrow"],
            "invalid value 'tomorrow' for '--at <TIME>'",
        ),
        (
            vec![
                "--payload",
                "{}",
                "--delay",
                "5m",
                "--at",
                "2030-01-01T00:00:00Z",
            ],
            "'--delay <DURATION>' cannot be used with '--at <TIME>'",
        ),
        (
            vec!["--payload", "{}", "--idempotency-key", " "],
            "idempotency_key must not be empty",
        ),
        (
            vec!["--payload", "{}", "--batch-size", "0"],
            "invalid value '0' for '--batch-size",
        ),
        (
            vec!["--payload", "{}", "--file", "x.jsonl"],
            "cannot be used with",
        ),
    ];
    let mut failures = Vec::new();
    for (extra, want) in &cases {
        let out = output(db.cmd().arg("publish").args(ok).args(extra));
        let err = stderr(&out);
        if out.status.code() != Some(2) || !err.starts_with("error: ") || !err.contains(want) {
            failures.push(format!(
                "{extra:?}: exit {:?}, stderr {err:?}, want {want:?}",
                out.status.code()
            ));
        }
    }
    // Missing required flags, empty values.
    for (args, want) in [
        (
            vec!["publish", "--event-type", "a", "--payload", "{}"],
            "required arguments were not provided",
        ),
        (
            vec![
                "publish",
                "--event-type",
                "",
                "--aggregate-type",
                "b",
                "--aggregate-id",
                "c",
                "--payload",
                "{}",
            ],
            "event_type must not be empty",
        ),
        (
            vec!["publish", "--file", "/nonexistent/events.jsonl"],
            "cannot read --file /nonexistent/events.jsonl",
        ),
    ] {
        let out = output(db.cmd().args(&args));
        let err = stderr(&out);
        if out.status.code() != Some(2) || !err.contains(want) {
            failures.push(format!(
                "{args:?}: exit {:?}, stderr {err:?}, want {want:?}",
                out.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert_eq!(table_state(&db).await, before);
}

#[tokio::test]
async fn a_directory_as_file_exits_2_saying_so_and_inserts_nothing() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mut cmd = db.cmd();
    cmd.args(["publish", "--file"]).arg(dir.path());
    let out = output(&mut cmd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains(&format!("--file {}", dir.path().display())) && err.contains("is a directory"),
        "{err}"
    );
    let n: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(n, 0);
}

/// A line whose idempotency key is too long for the unique index (PostgreSQL's btree limit is
/// 2704 bytes; random hex does not compress below it).
fn line_with_a_huge_key(n: usize) -> String {
    let key: String = (0..200)
        .map(|_| uuid::Uuid::new_v4().simple().to_string())
        .collect();
    let mut v = event(&format!("k{n}"));
    v["idempotency_key"] = json!(key);
    one_line(v)
}

#[tokio::test]
async fn a_value_over_a_postgresql_size_limit_exits_2_naming_its_lines_and_inserts_nothing() {
    let db = TestDb::with_backlog(2).await;
    let before = table_state(&db).await;
    // Bulk: lines of ~70 bytes in batches of 5000: the batch of the bad line 4 is lines 1-5.
    let mut input = String::new();
    for n in 1..=5 {
        input.push_str(&if n == 4 {
            line_with_a_huge_key(n)
        } else {
            one_line(event(&format!("k{n}")))
        });
    }
    let out = run_stdin(&db, &["-f", "-"], input.into_bytes());
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("PostgreSQL rejected lines 1-5 as too large: index row size")
            && err.contains("nothing was inserted"),
        "{err}"
    );
    assert_eq!(table_state(&db).await, before);
    // One event from flags.
    let key: String = (0..200)
        .map(|_| uuid::Uuid::new_v4().simple().to_string())
        .collect();
    let mut cmd = db.cmd();
    cmd.args(["publish", "--event-type", "a", "--aggregate-type", "b"])
        .args([
            "--aggregate-id",
            "c",
            "--payload",
            "{}",
            "--idempotency-key",
            &key,
        ]);
    let out = output(&mut cmd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("PostgreSQL rejected the event as too large: index row size"),
        "{}",
        stderr(&out)
    );
    assert_eq!(table_state(&db).await, before);
}

#[tokio::test]
async fn batch_bytes_cuts_batches_by_size_and_a_longer_line_goes_alone() {
    let db = TestDb::new().await;
    // Line n: ~2000 bytes; line 5 ~8000 (longer than a batch); the bad line's key takes it to
    // ~3000. With 5500 bytes a batch: lines 1-2, 3-4, 5 alone, 6-7.
    let input = |bad: usize| {
        let mut s = String::new();
        for n in 1..=7 {
            let mut v = event(&format!("k{n}"));
            let pad = match n {
                5 => 8000,
                _ if n == bad => 0,
                _ => 1900,
            };
            v["payload"] = json!({"pad": "p".repeat(pad)});
            if n == bad {
                let key: String = (0..90)
                    .map(|_| uuid::Uuid::new_v4().simple().to_string())
                    .collect();
                v["idempotency_key"] = json!(key);
            }
            s.push_str(&one_line(v));
        }
        s.into_bytes()
    };
    for (bad, batch) in [
        (2, "lines 1-2"),
        (4, "lines 3-4"),
        (5, "line 5"),
        (7, "lines 6-7"),
    ] {
        let out = run_stdin(&db, &["--batch-bytes", "5500", "-f", "-"], input(bad));
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("PostgreSQL rejected {batch} as too large:")),
            "bad line {bad}: {}",
            stderr(&out)
        );
        let n: i64 = db.scalar("SELECT count(*) FROM outbox").await;
        assert_eq!(n, 0, "all or nothing");
    }
    // The default budget: one batch.
    let out = run_stdin(&db, &["-f", "-"], input(4));
    assert!(
        stderr(&out).contains("PostgreSQL rejected lines 1-7 as too large:"),
        "{}",
        stderr(&out)
    );
    // Without a bad line: every line in, and the --json report lists them all, in order.
    let out = run_stdin(
        &db,
        &["--batch-bytes", "5500", "-f", "-", "--json"],
        input(0),
    );
    let report = json_out(&out);
    assert_eq!(report["inserted"], 7);
    let lines: Vec<u64> = report["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["line"].as_u64().unwrap())
        .collect();
    assert_eq!(lines, (1..=7).collect::<Vec<_>>());
    let n: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(n, 7);
}

#[tokio::test]
async fn a_payload_too_large_for_jsonb_exits_2_naming_its_line_and_inserts_nothing() {
    // The issue's case: a 300 MB payload. jsonb holds strings up to 256 MiB - 1 byte.
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("big.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
        f.write_all(one_line(event("small")).as_bytes()).unwrap();
        f.write_all(
            br#"{"event_type":"a","aggregate_type":"b","aggregate_id":"1","payload":{"s":""#,
        )
        .unwrap();
        let chunk = vec![b'x'; 1 << 20];
        for _ in 0..300 {
            f.write_all(&chunk).unwrap();
        }
        f.write_all(b"\"}}\n").unwrap();
        f.write_all(one_line(event("after")).as_bytes()).unwrap();
    }
    let mut cmd = db.cmd();
    cmd.args(["publish", "--file"]).arg(&path);
    let out = output(&mut cmd);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "one line: {err}");
    assert!(
        err.contains("line 2: payload holds a string of 314572800 bytes; PostgreSQL's jsonb holds strings up to 268435455 bytes (256 MiB - 1)"),
        "{err}"
    );
    let n: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(n, 0);
}

/// `--payload @-` reads the payload from stdin, as `--file -` reads events from it (it used to
/// open a file named `-`). Digit for digit.
#[tokio::test]
async fn payload_at_dash_reads_stdin() {
    let db = TestDb::new().await;
    let body = r#"{"amount":0.1000000000000000055511151231257827}"#;
    let out = run_stdin(
        &db,
        &[
            "--event-type",
            "e",
            "--aggregate-type",
            "a",
            "--aggregate-id",
            "1",
            "--payload",
            "@-",
        ],
        body.as_bytes().to_vec(),
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stored: String = db.scalar("SELECT payload::text FROM outbox").await;
    assert_eq!(
        stored,
        r#"{"amount": 0.1000000000000000055511151231257827}"#
    );
}
