//! `events edit`: every flag, each refusal, the dry run's diff against what is then written, and
//! edits racing relays that claim in a loop.

use serde_json::{json, Value};

use crate::support::fixtures::{self, *};
use crate::support::{run, run_json, signal, stderr, stdout, wait_until, TestDb};

/// The columns an edit may change, and the ones it must not, of one row.
async fn row(db: &TestDb, id: i64) -> Value {
    db.scalar(&format!(
        "SELECT jsonb_build_object('event_type', event_type, 'payload', payload,
                'headers', headers, 'idempotency_key', idempotency_key,
                'available_at', available_at, 'attempt_count', attempt_count,
                'dead', dead_lettered_at IS NOT NULL, 'claim_token', claim_token)
           FROM outbox WHERE id = {id}"
    ))
    .await
}

/// The audit rows of `id` as (action, actor, reason, previous, details).
async fn audit_rows(
    db: &TestDb,
    id: i64,
) -> Vec<(String, Option<String>, Option<String>, Value, Value)> {
    sqlx::query_as(
        "SELECT action, actor, reason, previous, details FROM outbox_audit
          WHERE event_id = $1 ORDER BY id",
    )
    .bind(id)
    .fetch_all(&db.pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn edit_changes_payload_headers_and_type_keeps_the_key_and_audits_the_previous_values() {
    let db = TestDb::new().await;
    let r = ready(&db).await;
    let s = insert(&db, "user.created", "user", "u-1", TENANT_B).await;
    schedule(&db, s).await;
    db.exec(&format!(
        "UPDATE outbox SET headers = '{{\"schema-version\": \"1\", \"trace\": \"t-1\"}}' WHERE id = {r}"
    ))
    .await;
    let before = row(&db, r).await;

    let out = run(
        &db,
        &[
            "events",
            "edit",
            &r.to_string(),
            "--payload",
            r#"{"total_cents": 1250, "currency": "EUR"}"#,
            "--set-header",
            "schema-version=2",
            "--set-header",
            "source=ops",
            "--unset-header",
            "trace",
            "--event-type",
            "order.created",
            "--actor",
            "alice",
            "--reason",
            "price fix",
        ],
        0,
    );
    assert_eq!(stdout(&out), format!("edited 1 event: {r}\n"));
    let after = row(&db, r).await;
    assert_eq!(after["event_type"], "order.created");
    assert_eq!(
        after["payload"],
        json!({"total_cents": 1250, "currency": "EUR"})
    );
    assert_eq!(
        after["headers"],
        json!({"schema-version": "2", "source": "ops"})
    );
    for kept in ["idempotency_key", "available_at", "attempt_count", "dead"] {
        assert_eq!(after[kept], before[kept], "{kept} is kept");
    }
    let audit = audit_rows(&db, r).await;
    assert_eq!(audit.len(), 1);
    let (action, actor, reason, previous, details) = &audit[0];
    assert_eq!(action, "edit");
    assert_eq!(actor.as_deref(), Some("alice"));
    assert_eq!(reason.as_deref(), Some("price fix"));
    assert_eq!(previous["event_type"], "order.placed");
    assert_eq!(previous["payload"], before["payload"]);
    assert_eq!(
        previous["headers"],
        json!({"schema-version": "1", "trace": "t-1"})
    );
    assert_eq!(details["payload"], after["payload"]);
    assert_eq!(details["headers"], after["headers"]);
    assert_eq!(details["event_type"], "order.created");
    assert_eq!(details["requeued"], false);
    let shown = run_json(&db, &["events", "show", &r.to_string(), "--json"]);
    assert_eq!(shown["audit"][0]["action"], "edit");
    let text = stdout(&run(&db, &["events", "show", &r.to_string()], 0));
    assert!(
        text.contains(
            "edit by alice (role postgres) (price fix): changed event_type, headers, payload"
        ),
        "{text}"
    );

    // --payload @FILE, on a scheduled event (which stays scheduled), with --json.
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("p.json");
    std::fs::write(&file, r#"{"from": "file"}"#).unwrap();
    let sched_before = row(&db, s).await;
    let v = run_json(
        &db,
        &[
            "events",
            "edit",
            &s.to_string(),
            "--payload",
            &format!("@{}", file.display()),
            "--json",
        ],
    );
    assert_eq!(v["dry_run"], false);
    assert_eq!(v["edited"][0]["id"], s);
    assert_eq!(v["edited"][0]["state"], "scheduled");
    assert_eq!(v["edited"][0]["after"]["payload"], json!({"from": "file"}));
    let sched_after = row(&db, s).await;
    assert_eq!(sched_after["payload"], json!({"from": "file"}));
    assert_eq!(sched_after["available_at"], sched_before["available_at"]);
    assert_eq!(sched_after["event_type"], "user.created");
    assert_eq!(sched_after["headers"], sched_before["headers"]);

    // Environment fallbacks.
    let out = db
        .cmd()
        .args(["events", "edit", &s.to_string()])
        .env("OUTBOXCTL_EDIT_EVENT_TYPE", "user.renamed")
        .env("OUTBOXCTL_EDIT_SET_HEADERS", "a=1\nb=2")
        .env("OUTBOXCTL_ACTOR", "env-bot")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let now = row(&db, s).await;
    assert_eq!(now["event_type"], "user.renamed");
    assert_eq!(now["headers"]["a"], "1");
    assert_eq!(now["headers"]["b"], "2");
    assert_eq!(
        audit_rows(&db, s).await.last().unwrap().1.as_deref(),
        Some("env-bot")
    );
}

#[tokio::test]
async fn dry_run_shows_the_diff_that_the_edit_then_writes() {
    let db = TestDb::new().await;
    let a = ready(&db).await;
    let b = insert(&db, "order.placed", "order", "o-2", TENANT_A).await;
    kill(&db, b, "1 minute", "HTTP 400").await;
    let snap = snapshot(&db).await;
    let args = [
        "events",
        "edit",
        &a.to_string(),
        &b.to_string(),
        "--payload",
        r#"{"aggregate": "o-1", "n": 2, "note": "fixed"}"#,
        "--set-header",
        "schema-version=2",
        "--event-type",
        "order.fixed",
    ];
    let mut with = args.to_vec();
    with.extend(["--dry-run", "--json"]);
    let v = run_json(&db, &with);
    assert_eq!(v["dry_run"], true);
    assert_eq!(snapshot(&db).await, snap, "a dry run changes nothing");
    let preview: Vec<Value> = v["edited"].as_array().unwrap().clone();
    assert_eq!(preview.len(), 2);
    assert_eq!(preview[1]["state"], "dead");

    let mut text_args = args.to_vec();
    text_args.push("--dry-run");
    let text = stdout(&run(&db, &text_args, 0));
    assert!(text.contains(&format!("event {a} (ready)")), "{text}");
    assert!(text.contains(&format!("event {b} (dead)")), "{text}");
    assert!(
        text.contains("  event_type: order.placed -> order.fixed"),
        "{text}"
    );
    assert!(
        text.contains("    - schema-version: 1\n    + schema-version: 2"),
        "{text}"
    );
    // Pretty JSON as stored (jsonb orders keys shorter first), line by line: unchanged lines
    // kept, changed ones - and +.
    assert!(text.contains("        \"aggregate\": \"o-1\"\n"), "{text}");
    assert!(
        text.contains("    -   \"n\": 1,\n    +   \"n\": 2,\n    +   \"note\": \"fixed\",\n"),
        "{text}"
    );
    assert!(text.ends_with("(dry run: nothing changed)\n"), "{text}");
    assert_eq!(snapshot(&db).await, snap);

    let mut yes = args.to_vec();
    yes.push("--yes");
    run(&db, &yes, 0);
    for p in &preview {
        let id = p["id"].as_i64().unwrap();
        let now = row(&db, id).await;
        assert_eq!(now["payload"], p["after"]["payload"], "{id}");
        assert_eq!(now["headers"], p["after"]["headers"], "{id}");
        assert_eq!(now["event_type"], p["after"]["event_type"], "{id}");
        let audit = audit_rows(&db, id).await;
        assert_eq!(audit.last().unwrap().3["payload"], p["before"]["payload"]);
    }
    assert_eq!(
        row(&db, b).await["dead"],
        true,
        "a dead event stays dead without --requeue"
    );
}

#[tokio::test]
async fn edit_refuses_and_changes_nothing() {
    let db = TestDb::new().await;
    let r = ready(&db).await;
    let f = insert(&db, "order.placed", "order", "o-3", TENANT_A).await;
    lease(&db, f).await;
    let p = insert(&db, "order.placed", "order", "o-4", TENANT_A).await;
    fixtures::publish(&db, p, "1 hour").await;
    let d = insert(&db, "order.placed", "order", "o-5", TENANT_B).await;
    kill(&db, d, "5 minutes", "HTTP 503").await;
    let snap = snapshot(&db).await;
    let (r_s, f_s, p_s, d_s) = (r.to_string(), f.to_string(), p.to_string(), d.to_string());

    for (args, code, needle) in [
        (
            vec![&r_s, &p_s, "--event-type", "x", "--yes"],
            2,
            format!("event {p} is already published"),
        ),
        (
            vec![&r_s, &f_s, "--event-type", "x", "--yes"],
            2,
            format!("event {f} is in flight"),
        ),
        (
            vec![&r_s, "999999", "--event-type", "x", "--yes"],
            2,
            "event 999999 does not exist".to_owned(),
        ),
        (
            vec![&r_s, "--requeue", "--event-type", "x"],
            2,
            format!("event {r} is not dead-lettered, and --requeue is only for dead events"),
        ),
        (
            vec![&p_s, "--event-type", "x", "--dry-run"],
            2,
            "already published".to_owned(),
        ),
        (
            vec![&r_s, &d_s, "--event-type", "x"],
            2,
            "without --yes".to_owned(),
        ),
        (vec![&r_s], 2, "--payload".to_owned()),
        (
            vec![&r_s, "--payload", "{oops"],
            2,
            "--payload is not valid JSON".to_owned(),
        ),
        (
            vec![&r_s, "--payload", "@/nonexistent/p.json"],
            2,
            "cannot read --payload file".to_owned(),
        ),
        (
            vec![&r_s, "--set-header", "novalue"],
            2,
            "use KEY=VALUE".to_owned(),
        ),
        (
            vec![&r_s, "--set-header", "a=1", "--unset-header", "a"],
            2,
            "both set and unset".to_owned(),
        ),
        (
            vec![&r_s, "--event-type", " "],
            2,
            "--event-type must not be empty".to_owned(),
        ),
    ] {
        let mut a = vec!["events", "edit"];
        a.extend(args.iter().map(|s| &**s));
        let out = run(&db, &a, code);
        assert!(stderr(&out).contains(&needle), "{a:?}: {}", stderr(&out));
    }
    let v: Value = serde_json::from_slice(
        &run(
            &db,
            &[
                "events",
                "edit",
                &r_s,
                &p_s,
                "--event-type",
                "x",
                "--yes",
                "--json",
            ],
            2,
        )
        .stdout,
    )
    .unwrap();
    assert_eq!(v["refused"][0]["id"], p);
    assert_eq!(v["refused"][0]["state"], "published");
    assert_eq!(snapshot(&db).await, snap, "no refusal changed anything");

    // A relay in tx mode holds the row lock while it publishes: refused at once, not waited for.
    let mut relay_tx = db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM outbox WHERE id = $1 FOR UPDATE")
        .bind(r)
        .execute(&mut *relay_tx)
        .await
        .unwrap();
    let out = run(&db, &["events", "edit", &r_s, "--event-type", "x"], 2);
    assert!(
        stderr(&out).contains("being published by a relay right now"),
        "{}",
        stderr(&out)
    );
    sqlx::query("UPDATE outbox SET published_at = now() WHERE id = $1")
        .bind(r)
        .execute(&mut *relay_tx)
        .await
        .unwrap();
    relay_tx.commit().await.unwrap();
    let out = run(&db, &["events", "edit", &r_s, "--event-type", "x"], 2);
    assert!(
        stderr(&out).contains("already published"),
        "{}",
        stderr(&out)
    );
    assert_eq!(row(&db, r).await["event_type"], "order.placed");
}

#[tokio::test]
async fn requeue_sends_the_edited_dead_event_again_with_the_same_key() {
    let db = TestDb::new().await;
    let d = ready(&db).await;
    kill(&db, d, "5 minutes", "HTTP 400: bad payload").await;
    let before = row(&db, d).await;
    let v = run_json(
        &db,
        &[
            "events",
            "edit",
            &d.to_string(),
            "--payload",
            r#"{"fixed": true}"#,
            "--requeue",
            "--reason",
            "payload fixed",
            "--json",
        ],
    );
    assert_eq!(v["edited"][0]["requeued"], true);
    let after = row(&db, d).await;
    assert_eq!(after["dead"], false);
    assert_eq!(after["attempt_count"], 0);
    assert_eq!(after["claim_token"], Value::Null);
    let (_, _, reason, previous, details) = audit_rows(&db, d).await.pop().unwrap();
    assert_eq!(reason.as_deref(), Some("payload fixed"));
    assert_eq!(previous["attempt_count"], 10);
    assert!(previous["dead_lettered_at"].is_string());
    assert_eq!(details["requeued"], true);
    let state = run_json(&db, &["events", "show", &d.to_string(), "--json"]);
    assert_eq!(state["state"], "ready");

    // A real relay delivers the new payload, under the original idempotency key.
    let dir = tempfile::tempdir().unwrap();
    let sink = dir.path().join("out.jsonl");
    let out = crate::support::relay_to_file(&db, outboxctl::relay::Mode::Lease, &sink)
        .arg("--once")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let line: Value = serde_json::from_str(std::fs::read_to_string(&sink).unwrap().trim()).unwrap();
    assert_eq!(line["id"], d);
    assert_eq!(line["payload"], json!({"fixed": true}));
    assert_eq!(line["idempotency_key"], before["idempotency_key"]);
}

/// Relay daemons killed when the test ends, also when it fails.
struct Relays(Vec<std::process::Child>);

impl Drop for Relays {
    fn drop(&mut self) {
        for c in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

#[tokio::test]
async fn edits_racing_relays_are_published_entirely_before_or_entirely_after() {
    const N: i64 = 80;
    let db = TestDb::new().await;
    // Due one after another, 40 ms apart; the editor walks from the last to the first, so it
    // meets the relays' frontier somewhere whatever its speed: later events are edited before
    // they are due, earlier ones are published first, and around the meeting point edits and
    // claims race for the same rows.
    sqlx::query(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers,
                             idempotency_key, available_at)
         SELECT $1::uuid, 'order', 'o-' || g, 'v.old', jsonb_build_object('v', 'old', 'n', g),
                '{\"v\": \"old\"}', 'k-' || g, now() + g * interval '40 milliseconds'
           FROM generate_series(1, $2::bigint) g",
    )
    .bind(TENANT_A)
    .bind(N)
    .execute(&db.pool)
    .await
    .unwrap();
    let all = ids(&db, "SELECT id FROM outbox").await;
    // A real HTTP endpoint that takes 150 ms per event: long enough that the lease relay's rows
    // are in flight, and the tx relay's rows locked, when some edits arrive.
    let server = crate::support::servers::TestServer::start(0, |_| {
        std::thread::sleep(std::time::Duration::from_millis(150));
        (200, vec![])
    });
    let relay = |mode: &str| {
        db.cmd()
            .args([
                "relay",
                "--mode",
                mode,
                "--batch-size",
                "4",
                "--sink",
                &server.url(),
            ])
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("spawn relay")
    };
    let relays = Relays(vec![relay("lease"), relay("tx")]);

    let mut edited = Vec::new();
    let mut refused = Vec::new();
    for id in all.iter().rev() {
        let out = db
            .cmd()
            .args(["events", "edit", &id.to_string(), "--event-type", "v.new"])
            .args(["--set-header", "v=new", "--payload"])
            .arg(format!(r#"{{"v": "new", "n": {}}}"#, id - all[0] + 1))
            .output()
            .unwrap();
        match out.status.code() {
            Some(0) => edited.push(*id),
            Some(2) => {
                let e = stderr(&out);
                assert!(
                    e.contains("already published")
                        || e.contains("is in flight")
                        || e.contains("being published by a relay right now"),
                    "{id}: {e}"
                );
                refused.push(*id);
            }
            other => panic!("{id}: exit {other:?}: {}", stderr(&out)),
        }
    }
    wait_until(
        std::time::Duration::from_secs(60),
        "every event published",
        || async { db.count("published_at IS NULL").await == 0 },
    )
    .await;
    for r in &relays.0 {
        signal(r, "TERM");
    }
    drop(relays);

    let mut delivered = std::collections::HashSet::new();
    for r in server.accepted() {
        let l = r.json();
        let id = l["id"].as_i64().unwrap();
        let v = l["payload"]["v"].as_str().unwrap();
        assert_eq!(
            l["headers"]["v"], v,
            "{id}: headers and payload from one version: {l}"
        );
        assert_eq!(
            l["type"],
            format!("v.{v}"),
            "{id}: type and payload from one version: {l}"
        );
        assert_eq!(l["payload"]["n"], id - all[0] + 1, "{l}");
        if edited.contains(&id) {
            assert_eq!(
                v, "new",
                "{id}: the edit succeeded, yet the old event was published"
            );
        }
        delivered.insert(id);
    }
    let mut got: Vec<i64> = delivered.into_iter().collect();
    got.sort();
    assert_eq!(got, all, "every event published");
    // What the table holds agrees with what each edit reported.
    for id in &all {
        let t: String = db
            .scalar(&format!("SELECT event_type FROM outbox WHERE id = {id}"))
            .await;
        let want = if edited.contains(id) {
            "v.new"
        } else {
            "v.old"
        };
        assert_eq!(t, want, "{id}");
    }
    assert!(!edited.is_empty(), "some edits came before the relays");
    assert!(
        !refused.is_empty(),
        "some events were published before their edit"
    );
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_audit WHERE action = 'edit'")
            .await,
        edited.len() as i64
    );
}

/// The summary line's grammar follows the count: "requeued it" for one event.
#[tokio::test]
async fn the_requeue_summary_says_it_for_one_event_and_them_for_several() {
    let db = TestDb::new().await;
    let a = ready(&db).await;
    let b = ready(&db).await;
    kill(&db, a, "5 minutes", "HTTP 400").await;
    kill(&db, b, "5 minutes", "HTTP 400").await;
    let one = db
        .cmd()
        .args([
            "events",
            "edit",
            &a.to_string(),
            "--set-header",
            "v=2",
            "--requeue",
        ])
        .args(["--reason", "fix"])
        .output()
        .unwrap();
    assert!(one.status.success(), "{}", stderr(&one));
    assert!(
        stdout(&one).starts_with(&format!("edited 1 event and requeued it: {a}")),
        "{}",
        stdout(&one)
    );
    kill(&db, a, "5 minutes", "HTTP 400").await;
    let two = db
        .cmd()
        .args([
            "events",
            "edit",
            &a.to_string(),
            &b.to_string(),
            "--set-header",
            "v=3",
        ])
        .args(["--requeue", "--reason", "fix", "--yes"])
        .output()
        .unwrap();
    assert!(two.status.success(), "{}", stderr(&two));
    assert!(
        stdout(&two).contains("and requeued them"),
        "{}",
        stdout(&two)
    );
}
