//! `events list|show|cancel|reschedule`: events in every state, and the refusals.

use crate::support::fixtures::{self, *};
use crate::support::{run, run_json, stderr, stdout, TestDb};

/// One row per state (and a ready row whose lease expired). Returns
/// (ready, expired_lease, scheduled, in_flight, published, dead).
async fn one_of_each(db: &TestDb) -> (i64, i64, i64, i64, i64, i64) {
    let r = insert(db, "order.placed", "order", "o-1", TENANT_A).await;
    let e = insert(db, "order.placed", "order", "o-2", TENANT_A).await;
    db.exec(&format!(
        "UPDATE outbox SET locked_until = now() - interval '1 second', claim_token = gen_random_uuid(),
                attempt_count = 1, last_error = 'lease expired once' WHERE id = {e}"
    ))
    .await;
    let s = insert(db, "user.created", "user", "u-1", TENANT_B).await;
    schedule(db, s).await;
    let f = insert(db, "order.placed", "order", "o-3", TENANT_A).await;
    lease(db, f).await;
    let p = insert(db, "order.placed", "order", "o-4", TENANT_A).await;
    fixtures::publish(db, p, "1 hour").await;
    let d = insert(db, "order.placed", "order", "o-5", TENANT_B).await;
    kill(db, d, "5 minutes", "HTTP 503").await;
    (r, e, s, f, p, d)
}

#[tokio::test]
async fn list_selects_by_state_and_filters_newest_first() {
    let db = TestDb::new().await;
    let (r, e, s, f, p, d) = one_of_each(&db).await;
    let list = |args: &[&str]| {
        let mut all = vec!["events", "list", "--json"];
        all.extend_from_slice(args);
        let v = run_json(&db, &all);
        let states: Vec<String> = v["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["state"].as_str().unwrap().to_owned())
            .collect();
        (event_ids(&v), states)
    };
    assert_eq!(list(&[]).0, [d, p, f, s, e, r]);
    assert_eq!(
        list(&[]).1,
        [
            "dead",
            "published",
            "in-flight",
            "scheduled",
            "ready",
            "ready"
        ]
    );
    for (state, want) in [
        ("ready", vec![e, r]),
        ("scheduled", vec![s]),
        ("in-flight", vec![f]),
        ("published", vec![p]),
        ("dead", vec![d]),
        ("pending", vec![f, s, e, r]),
        ("ready,dead", vec![d, e, r]),
    ] {
        assert_eq!(list(&["--state", state]).0, want, "--state {state}");
    }
    assert_eq!(
        list(&["--state", "ready", "--state", "published"]).0,
        [p, e, r]
    );

    // The shared filters; --since/--until use created_at here.
    created(&db, r, "2 days").await;
    assert_eq!(list(&["--since", "1d"]).0, [d, p, f, s, e]);
    assert_eq!(list(&["--until", "1d"]).0, [r]);
    assert_eq!(list(&["--tenant", TENANT_B]).0, [d, s]);
    assert_eq!(list(&["--event-type", "user.*"]).0, [s]);
    assert_eq!(
        list(&["--aggregate-type", "order", "--aggregate-id", "o-4"]).0,
        [p]
    );
    assert_eq!(list(&["--error", "LEASE"]).0, [e]);
    assert_eq!(list(&["--error-regex", "^HTTP 5"]).0, [d]);
    assert_eq!(list(&["--state", "pending", "--tenant", TENANT_B]).0, [s]);

    let v = run_json(&db, &["events", "list", "--limit", "2", "--json"]);
    assert_eq!(event_ids(&v), [d, p]);
    assert_eq!(v["truncated"], true);

    let text = stdout(&run(&db, &["events", "ls", "--state", "in-flight"], 0));
    assert!(
        text.contains("in-flight") && text.contains("order/o-3"),
        "{text}"
    );
    let out = run(&db, &["events", "list", "--state", "sleeping"], 2);
    assert!(stderr(&out).contains("--state"), "{}", stderr(&out));
}

#[tokio::test]
async fn show_works_for_every_state() {
    let db = TestDb::new().await;
    let (r, e, s, f, p, d) = one_of_each(&db).await;
    for (id, state) in [
        (r, "ready"),
        (e, "ready"),
        (s, "scheduled"),
        (f, "in-flight"),
        (p, "published"),
        (d, "dead"),
    ] {
        let v = run_json(&db, &["events", "show", &id.to_string(), "--json"]);
        assert_eq!(v["state"], state, "{id}");
        assert_eq!(v["id"], id);
    }
    let v = run_json(&db, &["events", "show", &f.to_string(), "--json"]);
    assert!(v["claim_token"].is_string() && v["locked_until"].is_string());
    let text = stdout(&run(&db, &["events", "show", &p.to_string()], 0));
    assert!(
        text.contains("state:") && text.contains("published"),
        "{text}"
    );
    let out = run(&db, &["events", "show", "424242"], 2);
    assert!(stderr(&out).contains("no event with id 424242"));
}

#[tokio::test]
async fn cancel_deletes_unpublished_events_all_or_nothing() {
    let db = TestDb::new().await;
    let (r, e, s, f, p, d) = one_of_each(&db).await;
    let all = ids(&db, "SELECT id FROM outbox").await;

    // Refusals: each leaves every row in place.
    let before = snapshot(&db).await;
    for (args, needle) in [
        (
            vec![r.to_string(), p.to_string()],
            format!("event {p} is already published"),
        ),
        (
            vec![r.to_string(), f.to_string()],
            format!("event {f} is in flight"),
        ),
        (vec![r.to_string(), f.to_string()], "--force".to_owned()),
        (
            vec![r.to_string(), "999999".to_owned()],
            "event 999999 does not exist".to_owned(),
        ),
        (
            vec![p.to_string(), "--force".to_owned()],
            format!("event {p} is already published"),
        ),
    ] {
        let mut a = vec!["events", "cancel", "--yes"];
        a.extend(args.iter().map(String::as_str));
        let out = run(&db, &a, 2);
        assert!(stderr(&out).contains(&needle), "{a:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("nothing was changed"),
            "{}",
            stderr(&out)
        );
    }
    // Not on a terminal and no --yes.
    let out = run(&db, &["events", "cancel", &r.to_string()], 2);
    assert!(stderr(&out).contains("--yes"), "{}", stderr(&out));
    // Dry run.
    let v = run_json(
        &db,
        &[
            "events",
            "cancel",
            &r.to_string(),
            &s.to_string(),
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(v["cancelled"], serde_json::json!([r, s]));
    assert_eq!(snapshot(&db).await, before);

    // Ready (incl. an expired lease), scheduled and dead go.
    let ids_arg = [r, e, s, d].map(|i| i.to_string());
    let mut a = vec!["events", "cancel", "--yes"];
    a.extend(ids_arg.iter().map(String::as_str));
    let out = run(&db, &a, 0);
    assert!(
        stdout(&out).starts_with("cancelled 4 events"),
        "{}",
        stdout(&out)
    );
    let left: Vec<i64> = all.iter().copied().filter(|i| *i == f || *i == p).collect();
    assert_eq!(ids(&db, "SELECT id FROM outbox").await, left);

    // --force takes an in-flight row.
    let v = run_json(
        &db,
        &[
            "events",
            "cancel",
            &f.to_string(),
            "--force",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(v["cancelled"], serde_json::json!([f]));
    assert_eq!(ids(&db, "SELECT id FROM outbox").await, [p]);
    let out = run(&db, &["events", "cancel", "--yes"], 2);
    assert!(
        stderr(&out).contains("nothing selected: give event ids, or filters"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn cancel_and_reschedule_refuse_a_row_a_relay_is_publishing_right_now() {
    let db = TestDb::new().await;
    let r = ready(&db).await;
    // A relay in tx mode holds the row lock while it publishes.
    let mut relay_tx = db.pool.begin().await.unwrap();
    sqlx::query("SELECT id FROM outbox WHERE id = $1 FOR UPDATE")
        .bind(r)
        .execute(&mut *relay_tx)
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let out = run(&db, &["events", "cancel", &r.to_string(), "--yes"], 2);
    assert!(
        stderr(&out).contains("being published by a relay right now"),
        "{}",
        stderr(&out)
    );
    let out = run(
        &db,
        &["events", "reschedule", &r.to_string(), "--delay", "1h"],
        2,
    );
    assert!(
        stderr(&out).contains("being published by a relay right now"),
        "{}",
        stderr(&out)
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(10),
        "did not wait for the lock"
    );
    // The relay publishes and commits: the row is published, so cancel now refuses for that.
    sqlx::query("UPDATE outbox SET published_at = now() WHERE id = $1")
        .bind(r)
        .execute(&mut *relay_tx)
        .await
        .unwrap();
    relay_tx.commit().await.unwrap();
    let out = run(&db, &["events", "cancel", &r.to_string(), "--yes"], 2);
    assert!(
        stderr(&out).contains("already published"),
        "{}",
        stderr(&out)
    );
    assert_eq!(ids(&db, "SELECT id FROM outbox").await, [r]);
}

#[tokio::test]
async fn reschedule_moves_pending_events_and_refuses_the_rest() {
    let db = TestDb::new().await;
    let (r, e, s, f, p, d) = one_of_each(&db).await;

    let before = snapshot(&db).await;
    for (id, needle) in [
        (d, "use `outboxctl requeue"),
        (p, "already published"),
        (f, "in flight"),
        (999999, "does not exist"),
    ] {
        let out = run(
            &db,
            &[
                "events",
                "reschedule",
                &r.to_string(),
                &id.to_string(),
                "--delay",
                "1h",
            ],
            2,
        );
        assert!(stderr(&out).contains(needle), "{id}: {}", stderr(&out));
    }
    run(&db, &["events", "reschedule", &r.to_string()], 2);
    run(
        &db,
        &[
            "events",
            "reschedule",
            &r.to_string(),
            "--delay",
            "1h",
            "--at",
            "2030-01-01T00:00:00Z",
        ],
        2,
    );
    let out = run(
        &db,
        &[
            "events",
            "reschedule",
            &r.to_string(),
            "--delay",
            "1h",
            "--dry-run",
        ],
        0,
    );
    assert!(
        stdout(&out).contains("would reschedule 1 event"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        snapshot(&db).await,
        before,
        "refusals and dry runs change nothing"
    );

    let out = run(
        &db,
        &[
            "events",
            "reschedule",
            &r.to_string(),
            &e.to_string(),
            "--delay",
            "2h",
        ],
        0,
    );
    assert!(
        stdout(&out).starts_with("rescheduled 2 events"),
        "{}",
        stdout(&out)
    );
    let moved: i64 = db
        .scalar(&format!(
            "SELECT count(*) FROM outbox WHERE id IN ({r}, {e})
                AND available_at BETWEEN now() + interval '119 minutes' AND now() + interval '121 minutes'"
        ))
        .await;
    assert_eq!(moved, 2);
    let v = run_json(&db, &["events", "list", "--state", "scheduled", "--json"]);
    let mut sched = event_ids(&v);
    sched.sort();
    assert_eq!(sched, [r, e, s]);

    let v = run_json(
        &db,
        &[
            "events",
            "reschedule",
            &s.to_string(),
            "--at",
            "2030-01-01T00:00:00Z",
            "--json",
        ],
    );
    assert_eq!(v["rescheduled"][0]["available_at"], "2030-01-01T00:00:00Z");
    let exact: bool = db
        .scalar(&format!(
            "SELECT available_at = '2030-01-01T00:00:00Z' FROM outbox WHERE id = {s}"
        ))
        .await;
    assert!(exact);
    // A past time (or --delay 0s) makes an event due now.
    run(
        &db,
        &[
            "events",
            "reschedule",
            &s.to_string(),
            "--at",
            "2000-01-01T00:00:00Z",
        ],
        0,
    );
    run(
        &db,
        &["events", "reschedule", &r.to_string(), "--delay", "0s"],
        0,
    );
    let v = run_json(&db, &["events", "list", "--state", "ready", "--json"]);
    let mut ready_now = event_ids(&v);
    ready_now.sort();
    assert_eq!(ready_now, [r, s]);
}

fn sorted(mut v: Vec<i64>) -> Vec<i64> {
    v.sort_unstable();
    v
}

fn json_ids(v: &serde_json::Value) -> Vec<i64> {
    sorted(
        v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i.as_i64().unwrap())
            .collect(),
    )
}

#[tokio::test]
async fn cancel_by_filters_acts_on_cancellable_states_only() {
    let db = TestDb::new().await;
    let (r, e, s, f, p, d) = one_of_each(&db).await;
    let snap = snapshot(&db).await;
    let dry = |args: &[&str]| {
        let mut a = vec!["events", "cancel", "--dry-run", "--json"];
        a.extend_from_slice(args);
        let v = run_json(&db, &a);
        assert_eq!(v["dry_run"], true);
        assert_eq!(v["cancelled"], 0);
        event_ids(&v)
    };
    // Tenant A holds r, e, f (in flight) and p (published): only the ready ones, newest first.
    assert_eq!(dry(&["--tenant", TENANT_A]), [e, r]);
    assert_eq!(dry(&["--state", "pending", "--tenant", TENANT_A]), [e, r]);
    assert_eq!(
        dry(&["--state", "pending", "--tenant", TENANT_A, "--force"]),
        [f, e, r]
    );
    assert_eq!(dry(&["--state", "dead,scheduled"]), [d, s]);
    assert_eq!(dry(&["--event-type", "order.*"]), [d, e, r]);
    assert_eq!(dry(&["--error-regex", "^HTTP"]), [d]);
    let text = stdout(&run(
        &db,
        &["events", "cancel", "--tenant", TENANT_B, "--dry-run"],
        0,
    ));
    assert!(
        text.contains("user.created") && text.contains("HTTP 503"),
        "{text}"
    );
    assert!(
        text.ends_with("would cancel 2 events (dry run: nothing changed)\n"),
        "{text}"
    );
    for (args, needle) in [
        (
            vec!["--state", "published", "--yes"],
            "published events cannot be cancelled",
        ),
        (vec!["--state", "in-flight", "--yes"], "only with --force"),
        (vec!["--tenant", TENANT_A], "without --yes"),
        (vec!["--tenant", TENANT_A, "--yes", "--", "1"], "not both"),
    ] {
        let mut a = vec!["events", "cancel"];
        a.extend(args);
        let out = run(&db, &a, 2);
        assert!(stderr(&out).contains(needle), "{a:?}: {}", stderr(&out));
    }
    let out = run(
        &db,
        &[
            "events",
            "cancel",
            &r.to_string(),
            "--tenant",
            TENANT_A,
            "--yes",
        ],
        2,
    );
    assert!(stderr(&out).contains("not both"), "{}", stderr(&out));
    assert_eq!(
        snapshot(&db).await,
        snap,
        "dry runs and refusals change nothing"
    );

    // --limit takes the newest; each cancel writes its audit row with the actor.
    let v = run_json(
        &db,
        &[
            "events",
            "cancel",
            "--event-type",
            "order.*",
            "--limit",
            "1",
            "--yes",
            "--json",
            "--actor",
            "bob",
        ],
    );
    assert_eq!(
        (v["matched"].as_u64(), v["cancelled"].as_u64()),
        (Some(1), Some(1))
    );
    assert_eq!(json_ids(&v), [d]);
    let who: String = db
        .scalar(&format!(
            "SELECT actor FROM outbox_audit WHERE action = 'cancel' AND event_id = {d}"
        ))
        .await;
    assert_eq!(who, "bob");
    let out = run(
        &db,
        &[
            "events",
            "cancel",
            "--aggregate-type",
            "order",
            "--aggregate-id",
            "o-1",
            "--yes",
        ],
        0,
    );
    assert!(
        stdout(&out).starts_with("cancelled 1 event in 1 batch in "),
        "{}",
        stdout(&out)
    );
    created(&db, e, "2 days").await;
    let v = run_json(
        &db,
        &["events", "cancel", "--until", "1d", "--yes", "--json"],
    );
    assert_eq!(json_ids(&v), [e]);
    let v = run_json(
        &db,
        &[
            "events",
            "cancel",
            "--since",
            "1d",
            "--state",
            "scheduled",
            "--batch-size",
            "1",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(json_ids(&v), [s]);
    assert_eq!(v["batches"], 1);
    assert_eq!(ids(&db, "SELECT id FROM outbox").await, sorted(vec![f, p]));
    let out = run(&db, &["events", "cancel", "--tenant", TENANT_B, "--yes"], 0);
    assert_eq!(stdout(&out), "no events match; nothing cancelled\n");
    // --force takes in-flight rows by filter too; published ones never.
    let v = run_json(
        &db,
        &[
            "events", "cancel", "--tenant", TENANT_A, "--force", "--yes", "--json",
        ],
    );
    assert_eq!(json_ids(&v), [f]);
    assert_eq!(ids(&db, "SELECT id FROM outbox").await, [p]);
}

#[tokio::test]
async fn cancel_by_filters_in_batches_rechecks_the_state_in_each_statement() {
    let db = TestDb::with_backlog(25).await;
    let all = ids(&db, "SELECT id FROM outbox").await;
    let v = run_json(
        &db,
        &[
            "events",
            "cancel",
            "--event-type",
            "order.placed",
            "--batch-size",
            "10",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(v["batches"], 3);
    assert_eq!(v["cancelled"], 25);
    assert_eq!(json_ids(&v), all);
    assert_eq!(db.scalar::<i64>("SELECT count(*) FROM outbox").await, 0);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_audit WHERE action = 'cancel'")
            .await,
        25
    );

    // A row selected as ready that a relay leased, or someone dead-lettered, before its batch ran
    // is left alone by the statement itself.
    let r = ready(&db).await;
    let dd = ready(&db).await;
    lease(&db, r).await;
    kill(&db, dd, "1 minute", "x").await;
    let audit = outboxctl::db::audit::Audit {
        actor: "t".into(),
        reason: None,
    };
    let mut conn = db.pool.acquire().await.unwrap();
    use outboxctl::db::events::{self, EventState};
    let gone = events::delete_unpublished(
        &mut conn,
        &[r, dd],
        false,
        Some(&[EventState::Ready]),
        &audit,
    )
    .await
    .unwrap();
    assert!(gone.is_empty(), "{gone:?}");
    let moved = events::reschedule(
        &mut conn,
        &[r, dd],
        None,
        0,
        Some(&[EventState::Ready]),
        &audit,
    )
    .await
    .unwrap();
    assert!(moved.is_empty(), "{moved:?}");
    assert_eq!(ids(&db, "SELECT id FROM outbox").await, sorted(vec![r, dd]));
}

#[tokio::test]
async fn reschedule_by_filters_moves_ready_and_scheduled_events_only() {
    let db = TestDb::new().await;
    let (r, e, s, _f, _p, _d) = one_of_each(&db).await;
    let snap = snapshot(&db).await;
    let v = run_json(
        &db,
        &[
            "events",
            "reschedule",
            "--tenant",
            TENANT_A,
            "--delay",
            "1h",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(
        event_ids(&v),
        [e, r],
        "in-flight and published rows are not selected"
    );
    assert_eq!(v["rescheduled"], 0);
    let v = run_json(
        &db,
        &[
            "events",
            "reschedule",
            "--state",
            "pending",
            "--delay",
            "1h",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(event_ids(&v), [s, e, r]);
    for (args, needle) in [
        (
            vec!["--state", "dead", "--delay", "1h", "--yes"],
            "requeue --delay",
        ),
        (
            vec!["--state", "published", "--delay", "1h", "--yes"],
            "cannot be rescheduled",
        ),
        (
            vec!["--state", "in-flight", "--delay", "1h", "--yes"],
            "once the attempt is over",
        ),
        (vec!["--tenant", TENANT_A, "--delay", "1h"], "without --yes"),
        (vec!["--delay", "1h"], "nothing selected"),
    ] {
        let mut a = vec!["events", "reschedule"];
        a.extend(args);
        let out = run(&db, &a, 2);
        assert!(stderr(&out).contains(needle), "{a:?}: {}", stderr(&out));
    }
    assert_eq!(snapshot(&db).await, snap);

    let v = run_json(
        &db,
        &[
            "events",
            "reschedule",
            "--tenant",
            TENANT_A,
            "--delay",
            "2h",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(json_ids(&v), sorted(vec![r, e]));
    let moved: i64 = db
        .scalar(&format!(
            "SELECT count(*) FROM outbox WHERE id IN ({r}, {e})
                AND available_at BETWEEN now() + interval '119 minutes' AND now() + interval '121 minutes'"
        ))
        .await;
    assert_eq!(moved, 2);
    // All three are scheduled now; --limit takes the newest.
    let v = run_json(
        &db,
        &[
            "events",
            "reschedule",
            "--state",
            "scheduled",
            "--at",
            "2030-01-01T00:00:00Z",
            "--limit",
            "1",
            "--yes",
            "--json",
        ],
    );
    assert_eq!(json_ids(&v), [s]);
    let exact: bool = db
        .scalar(&format!(
            "SELECT available_at = '2030-01-01T00:00:00Z' FROM outbox WHERE id = {s}"
        ))
        .await;
    assert!(exact);
    let out = run(
        &db,
        &[
            "events",
            "reschedule",
            "--event-type",
            "user.*",
            "--delay",
            "0s",
            "--yes",
        ],
        0,
    );
    assert!(
        stdout(&out).starts_with("rescheduled 1 event in 1 batch in "),
        "{}",
        stdout(&out)
    );
    let v = run_json(&db, &["events", "list", "--state", "ready", "--json"]);
    assert_eq!(event_ids(&v), [s]);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_audit WHERE action = 'reschedule'")
            .await,
        4
    );
}
