//! `prune`: what goes and what survives, batches, limits, the overlap lock, SIGTERM.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::support::fixtures::*;
use crate::support::{
    deliveries, run, run_json, signal, spawn_relay, stderr, stdout, wait_until, TestDb,
};

/// `n` events published `ago`; returns their ids.
async fn published(db: &TestDb, n: i64, ago: &str) -> Vec<i64> {
    sqlx::query_scalar(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key, created_at, available_at, published_at, attempt_count)
         SELECT gen_random_uuid(), 'order', 'o-' || g, 'order.placed', '{}', gen_random_uuid()::text,
                now() - $2::interval - interval '1 minute', now() - $2::interval - interval '1 minute',
                now() - $2::interval, 1
           FROM generate_series(1, $1::bigint) g
         RETURNING id",
    )
    .bind(n)
    .bind(ago)
    .fetch_all(&db.pool)
    .await
    .expect("published")
}

/// Rows that an --older-than prune must never delete, all created long ago: ready, scheduled,
/// in flight, dead, and published recently. Returns their ids.
async fn survivors(db: &TestDb) -> Vec<i64> {
    let mut keep = Vec::new();
    let r = ready(db).await;
    let s = ready(db).await;
    schedule(db, s).await;
    let f = ready(db).await;
    lease(db, f).await;
    let d = ready(db).await;
    kill(db, d, "30 days", "boom").await;
    keep.extend([r, s, f, d]);
    for id in &keep {
        db.exec(&format!(
            "UPDATE outbox SET created_at = now() - interval '60 days' WHERE id = {id}"
        ))
        .await;
    }
    keep.extend(published(db, 2, "1 day").await);
    keep.sort();
    keep
}

#[tokio::test]
async fn only_published_rows_older_than_the_retention_go() {
    let db = TestDb::new().await;
    let old = published(&db, 23, "8 days").await;
    let keep = survivors(&db).await;
    assert_eq!(old.len(), 23);

    let v = run_json(
        &db,
        &["prune", "--older-than", "7d", "--batch-size", "5", "--json"],
    );
    assert_eq!(v["published"]["deleted"], 23, "{v}");
    assert_eq!(v["deleted"], 23);
    assert_eq!(v["batches"], 5, "5+5+5+5+3");
    assert_eq!(v["stop_reason"], "done");
    assert!(
        v["dead"].is_null() && v["processed_messages"].is_null(),
        "{v}"
    );
    assert!(v["longest_batch_ms"].is_u64() && v["rows_per_second"].is_number());
    assert_eq!(ids(&db, "SELECT id FROM outbox").await, keep);

    let out = run(&db, &["prune", "--older-than", "7d"], 0);
    assert_eq!(
        stdout(&out).lines().collect::<Vec<_>>().len(),
        1,
        "one summary line for cron"
    );
    assert!(
        stdout(&out).starts_with("prune: deleted 0 published events in 1 batch in"),
        "{}",
        stdout(&out)
    );
    assert_eq!(stderr(&out), "", "no progress output off a terminal");
    assert_eq!(ids(&db, "SELECT id FROM outbox").await, keep);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_locks").await,
        0,
        "lock released"
    );
}

async fn processed(db: &TestDb, consumer: &str, n: i64, ago: &str) {
    sqlx::query(
        "INSERT INTO processed_messages (consumer, message_id, processed_at)
         SELECT $1, gen_random_uuid()::text, now() - $3::interval FROM generate_series(1, $2::bigint)",
    )
    .bind(consumer)
    .bind(n)
    .bind(ago)
    .execute(&db.pool)
    .await
    .expect("processed");
}

#[tokio::test]
async fn dead_letters_and_processed_messages_go_only_when_asked() {
    let db = TestDb::new().await;
    let old_dead = ready(&db).await;
    kill(&db, old_dead, "40 days", "boom").await;
    let new_dead = ready(&db).await;
    kill(&db, new_dead, "1 day", "boom").await;
    // Old and new rows interleaved on the heap.
    for _ in 0..4 {
        processed(&db, "billing", 3, "20 days").await;
        processed(&db, "recent", 1, "1 hour").await;
    }
    let v = run_json(&db, &["prune", "--older-than", "7d", "--json"]);
    assert_eq!(v["deleted"], 0);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM processed_messages")
            .await,
        16
    );
    assert_eq!(ids(&db, "SELECT id FROM outbox").await.len(), 2);

    let v = run_json(
        &db,
        &[
            "prune",
            "--dead-older-than",
            "30d",
            "--processed-older-than",
            "14d",
            "--batch-size",
            "5",
            "--json",
        ],
    );
    assert!(v["published"].is_null(), "{v}");
    assert_eq!(v["dead"]["deleted"], 1, "{v}");
    assert_eq!(v["processed_messages"]["deleted"], 12, "{v}");
    assert_eq!(ids(&db, "SELECT id FROM outbox").await, [new_dead]);
    let left: Vec<(String, i64)> =
        sqlx::query_as("SELECT consumer, count(*) FROM processed_messages GROUP BY 1 ORDER BY 1")
            .fetch_all(&db.pool)
            .await
            .unwrap();
    assert_eq!(left, [("recent".to_owned(), 4)]);
    let out = run(
        &db,
        &[
            "prune",
            "--dead-older-than",
            "30d",
            "--processed-older-than",
            "14d",
        ],
        0,
    );
    assert!(
        stdout(&out)
            .starts_with("prune: deleted 0 dead events and 0 processed messages in 2 batches"),
        "{}",
        stdout(&out)
    );
}

/// Audit rows by action and whether they are older than 400 days, in id order.
async fn audit_rows(db: &TestDb) -> Vec<(String, bool)> {
    sqlx::query_as("SELECT action, at < now() - interval '400 days' FROM outbox_audit ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .expect("audit rows")
}

#[tokio::test]
async fn the_audit_trail_goes_only_when_asked_and_only_past_its_retention() {
    let db = TestDb::new().await;
    // A real edit (its audit row holds the old and the new payload) and four cancels, then
    // backdated 500 days; two cancels from yesterday after them.
    let edited = ready(&db).await;
    run(
        &db,
        &[
            "events",
            "edit",
            &edited.to_string(),
            "--payload",
            r#"{"card": "4111"}"#,
        ],
        0,
    );
    for _ in 0..4 {
        let id = ready(&db).await;
        run(&db, &["events", "cancel", &id.to_string(), "--yes"], 0);
    }
    db.exec("UPDATE outbox_audit SET at = now() - interval '500 days'")
        .await;
    for _ in 0..2 {
        let id = ready(&db).await;
        run(&db, &["events", "cancel", &id.to_string(), "--yes"], 0);
    }
    db.exec(
        "UPDATE outbox_audit SET at = now() - interval '1 day' WHERE at > now() - interval '1 hour'",
    )
    .await;
    published(&db, 3, "8 days").await;
    let old = |rows: &[(String, bool)]| rows.iter().filter(|r| r.1).count();
    assert_eq!(old(&audit_rows(&db).await), 5);

    // Not asked: the trail stays (the run adds its own row).
    let v = run_json(&db, &["prune", "--older-than", "7d", "--json"]);
    assert_eq!(v["published"]["deleted"], 3, "{v}");
    assert!(v["audit"].is_null(), "{v}");
    let rows = audit_rows(&db).await;
    assert_eq!((rows.len(), old(&rows)), (8, 5), "{rows:?}");

    let v = run_json(
        &db,
        &["prune", "--audit-older-than", "400d", "--dry-run", "--json"],
    );
    assert_eq!(v["audit"]["would_delete"], 5, "{v}");
    assert_eq!(audit_rows(&db).await.len(), 8, "a dry run deletes nothing");

    // Batches of 2 by id: 2 + 2 + the last old row with the first newer one beside it.
    let v = run_json(
        &db,
        &[
            "prune",
            "--audit-older-than",
            "400d",
            "--batch-size",
            "2",
            "--json",
        ],
    );
    assert_eq!(v["audit"]["deleted"], 5, "{v}");
    assert_eq!(
        (v["deleted"].as_u64(), v["batches"].as_u64()),
        (Some(5), Some(3)),
        "{v}"
    );
    assert!(v["published"].is_null(), "{v}");
    let rows = audit_rows(&db).await;
    assert_eq!(
        rows,
        [
            ("cancel".to_owned(), false),
            ("cancel".to_owned(), false),
            ("prune".to_owned(), false),
            ("prune".to_owned(), false),
        ],
        "the edit's payloads went with its row; the newer rows and the earlier prune's stay"
    );
    let details: serde_json::Value = db
        .scalar("SELECT details FROM outbox_audit ORDER BY id DESC LIMIT 1")
        .await;
    assert_eq!(
        details["audit"]["deleted"], 5,
        "the run audits itself: {details}"
    );
    assert_eq!(details["stop_reason"], "done", "{details}");

    let out = run(&db, &["prune", "--audit-older-than", "400d"], 0);
    assert!(
        stdout(&out).starts_with("prune: deleted 0 audit rows in 1 batch in"),
        "{}",
        stdout(&out)
    );
    assert_eq!(
        audit_rows(&db).await.len(),
        4,
        "a run that deletes nothing leaves no row"
    );
}

#[tokio::test]
async fn dry_run_counts_and_deletes_nothing() {
    let db = TestDb::new().await;
    published(&db, 7, "8 days").await;
    survivors(&db).await;
    processed(&db, "billing", 3, "20 days").await;
    let before = snapshot(&db).await;
    let v = run_json(
        &db,
        &[
            "prune",
            "--older-than",
            "7d",
            "--dead-older-than",
            "7d",
            "--processed-older-than",
            "7d",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["published"]["would_delete"], 7, "{v}");
    assert_eq!(v["dead"]["would_delete"], 1, "{v}");
    assert_eq!(v["processed_messages"]["would_delete"], 3, "{v}");
    assert_eq!(v["deleted"], 0);
    let out = run(&db, &["prune", "--older-than", "7d", "--dry-run"], 0);
    assert!(
        stdout(&out).starts_with("prune: would delete 7 published events (before "),
        "{}",
        stdout(&out)
    );
    assert_eq!(snapshot(&db).await, before);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM processed_messages")
            .await,
        3
    );
}

#[tokio::test]
async fn an_overlapping_prune_exits_at_once_with_code_4_and_sigterm_stops_after_the_batch() {
    let db = TestDb::new().await;
    published(&db, 3, "8 days").await;
    let old = || async {
        db.scalar::<i64>(
            "SELECT count(*) FROM outbox WHERE published_at < now() - interval '7 days'",
        )
        .await
    };
    let first = db
        .cmd()
        .args([
            "prune",
            "--older-than",
            "7d",
            "--batch-size",
            "1",
            "--sleep",
            "60s",
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The first run has taken the lock and finished its first batch; it now sleeps.
    wait_until(
        Duration::from_secs(20),
        "the first prune's first batch",
        || async { old().await == 2 },
    )
    .await;
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_locks").await,
        1
    );

    let started = Instant::now();
    let out = run(&db, &["prune", "--older-than", "7d"], 4);
    assert!(started.elapsed() < Duration::from_secs(5), "exits at once");
    let err = stderr(&out);
    assert!(err.contains("another prune is running"), "{err}");
    assert!(err.contains(&format!("pid {}", first.id())), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(old().await, 2, "the second run deleted nothing");
    // Counting needs no lock.
    run(&db, &["prune", "--older-than", "7d", "--dry-run"], 0);

    signal(&first, "TERM");
    let out = first.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["stop_reason"], "signal", "{v}");
    assert_eq!(v["deleted"], 1);
    assert_eq!(v["batches"], 1);
    assert_eq!(old().await, 2);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_locks").await,
        0,
        "released"
    );

    let v = run_json(&db, &["prune", "--older-than", "7d", "--json"]);
    assert_eq!(v["deleted"], 2);
    assert_eq!(old().await, 0);
}

#[tokio::test]
async fn concurrent_starts_let_exactly_one_prune_run() {
    let db = TestDb::new().await;
    published(&db, 5, "8 days").await;
    let children: Vec<_> = (0..4)
        .map(|_| {
            db.cmd()
                .args([
                    "prune",
                    "--older-than",
                    "7d",
                    "--batch-size",
                    "1",
                    "--sleep",
                    "60s",
                    "--json",
                ])
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    // Three of them give up at once; the fourth holds the lock and sleeps after each batch.
    let mut running: Vec<std::process::Child> = children;
    let mut codes = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while codes.len() < 3 {
        assert!(
            Instant::now() < deadline,
            "the losers did not exit: {codes:?}"
        );
        let mut still = Vec::new();
        for mut c in running {
            match c.try_wait().unwrap() {
                Some(status) => codes.push(status.code()),
                None => still.push(c),
            }
        }
        running = still;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(codes, [Some(4), Some(4), Some(4)], "the losers exit with 4");
    assert_eq!(running.len(), 1);
    let winner = running.pop();
    let winner = winner.expect("one prune holds the lock");
    signal(&winner, "TERM");
    let out = winner.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let deleted = v["deleted"].as_i64().unwrap();
    assert!(deleted >= 1);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox").await,
        5 - deleted
    );
}

#[tokio::test]
async fn a_lease_left_by_a_killed_prune_blocks_until_it_expires() {
    let db = TestDb::new().await;
    published(&db, 2, "8 days").await;
    db.exec(
        "INSERT INTO outbox_locks (name, holder, holder_info, expires_at)
         VALUES ('prune', gen_random_uuid(), 'outboxctl prune (pid 99999) from 10.0.0.9', now() + interval '1 minute')",
    )
    .await;
    let out = run(&db, &["prune", "--older-than", "7d"], 4);
    assert!(stderr(&out).contains("pid 99999"), "{}", stderr(&out));
    assert!(stderr(&out).contains("lease ends at"), "{}", stderr(&out));
    assert_eq!(db.scalar::<i64>("SELECT count(*) FROM outbox").await, 2);

    db.exec("UPDATE outbox_locks SET expires_at = now() - interval '1 second'")
        .await;
    let v = run_json(&db, &["prune", "--older-than", "7d", "--json"]);
    assert_eq!(v["deleted"], 2);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox_locks").await,
        0
    );
}

#[tokio::test]
async fn max_duration_and_max_batches_are_honoured() {
    let db = TestDb::new().await;
    published(&db, 300, "8 days").await;
    let started = Instant::now();
    let v = run_json(
        &db,
        &[
            "prune",
            "--older-than",
            "7d",
            "--batch-size",
            "10",
            "--sleep",
            "200ms",
            "--max-duration",
            "1s",
            "--json",
        ],
    );
    let took = started.elapsed();
    assert_eq!(v["stop_reason"], "max-duration", "{v}");
    let deleted = v["deleted"].as_i64().unwrap();
    assert_eq!(deleted % 10, 0, "whole batches only: {v}");
    assert!(
        (10..=80).contains(&deleted),
        "about 1s / 200ms batches: {v}"
    );
    assert!(v["elapsed_ms"].as_u64().unwrap() < 4_000, "{v}");
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox").await,
        300 - deleted
    );

    let v = run_json(
        &db,
        &[
            "prune",
            "--older-than",
            "7d",
            "--batch-size",
            "10",
            "--max-batches",
            "3",
            "--json",
        ],
    );
    assert_eq!(v["stop_reason"], "max-batches");
    assert_eq!(v["deleted"], 30);
    assert_eq!(
        db.scalar::<i64>("SELECT count(*) FROM outbox").await,
        270 - deleted
    );
    let out = run(
        &db,
        &[
            "prune",
            "--older-than",
            "7d",
            "--max-batches",
            "1",
            "--batch-size",
            "1",
        ],
        0,
    );
    assert!(
        stdout(&out).contains("deleted 1 published event in 1 batch")
            && stdout(&out).contains("stopped at --max-batches"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test]
async fn bad_arguments_are_refused_before_anything_is_deleted() {
    let db = TestDb::new().await;
    published(&db, 2, "8 days").await;
    for (args, needle) in [
        (vec!["prune"], "--older-than"),
        (vec!["prune", "--older-than", "0s"], "greater than zero"),
        (vec!["prune", "--older-than", "a week"], "not a duration"),
        (
            vec!["prune", "--audit-older-than", "0s"],
            "greater than zero",
        ),
        (
            vec!["prune", "--older-than", "7d", "--batch-size", "0"],
            "--batch-size",
        ),
        (
            vec!["prune", "--older-than", "7d", "--max-duration", "0s"],
            "greater than zero",
        ),
    ] {
        let out = run(&db, &args, 2);
        assert!(stderr(&out).contains(needle), "{args:?}: {}", stderr(&out));
    }
    assert_eq!(db.scalar::<i64>("SELECT count(*) FROM outbox").await, 2);
}

#[tokio::test]
async fn prune_in_a_loop_while_relays_publish_loses_nothing() {
    let db = TestDb::with_backlog(6_000).await;
    let pending = ids(&db, "SELECT id FROM outbox").await;
    let history = published(&db, 2_000, "8 days").await.len() as u64;
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
    let relays = [spawn_relay(&db, "lease", &a), spawn_relay(&db, "tx", &b)];

    // Prune everything published more than 1ms ago, over and over, while the relays claim,
    // publish and mark (tx mode marks inside the transaction that holds the row lock).
    let mut deleted = 0u64;
    let mut runs = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let left = db.count("published_at IS NULL").await;
        let v = run_json(
            &db,
            &[
                "prune",
                "--older-than",
                "1ms",
                "--batch-size",
                "100",
                "--json",
            ],
        );
        deleted += v["deleted"].as_u64().unwrap();
        runs += 1;
        if left == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "relays did not drain");
    }
    for r in relays {
        signal(&r, "TERM");
        let out = r.wait_with_output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
    let seen = deliveries(&[&a, &b]);
    let mut got: Vec<i64> = seen.keys().copied().collect();
    got.sort();
    assert_eq!(
        got, pending,
        "every pending event reached a sink: none was pruned unpublished"
    );
    assert!(seen.values().all(|n| *n == 1));
    assert_eq!(deleted, 6_000 + history, "{runs} prune runs");
    assert_eq!(db.scalar::<i64>("SELECT count(*) FROM outbox").await, 0);
    assert!(runs > 1, "the prunes overlapped the publishing");
}

/// The four kinds of rows prune deletes, `n` of each, all eligible for a prune with a cutoff of
/// a minute ago (`eligible`) or none of them (the same rows pending, or recent).
async fn prunable(db: &TestDb, n: i64, eligible: bool) {
    db.exec(&format!(
        "TRUNCATE outbox, processed_messages, outbox_audit;
         INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key, created_at, available_at)
         SELECT gen_random_uuid(), 'order', 'o-' || g, 'order.placed', '{{}}', 'k-' || g,
                now() - interval '2 hours', now() - interval '2 hours'
           FROM generate_series(1, {n} * 2) g;
         INSERT INTO processed_messages (consumer, message_id)
         SELECT 'c', g::text FROM generate_series(1, {n}) g;
         INSERT INTO outbox_audit (action, actor) SELECT 'prune', 'test' FROM generate_series(1, {n});"
    ))
    .await;
    set_eligible(db, eligible).await;
}

/// Makes the rows of [`prunable`] all eligible (half the events published an hour ago, the
/// other half dead an hour ago, the rest old), or none (pending, recent).
async fn set_eligible(db: &TestDb, eligible: bool) {
    if eligible {
        db.exec(
            "UPDATE outbox SET published_at = now() - interval '1 hour', attempt_count = 1
              WHERE id % 2 = 0;
             UPDATE outbox SET dead_lettered_at = now() - interval '1 hour', attempt_count = 10,
                    last_error = 'boom'
              WHERE id % 2 = 1;
             UPDATE processed_messages SET processed_at = now() - interval '1 hour';
             UPDATE outbox_audit SET at = now() - interval '1 hour';",
        )
        .await;
    } else {
        db.exec(
            "UPDATE outbox SET published_at = NULL, dead_lettered_at = NULL, last_error = NULL,
                    attempt_count = 0;
             UPDATE processed_messages SET processed_at = now();
             UPDATE outbox_audit SET at = now();",
        )
        .await;
    }
}

/// No autovacuum or autoanalyze: the statistics stay what the test made them.
async fn freeze_statistics(db: &TestDb) {
    db.exec(
        "ALTER TABLE outbox SET (autovacuum_enabled = false);
         ALTER TABLE processed_messages SET (autovacuum_enabled = false);
         ALTER TABLE outbox_audit SET (autovacuum_enabled = false);",
    )
    .await;
}

/// The arguments of a batch statement (`db::prune::BATCH_STATEMENTS`) for a cutoff of a minute
/// ago, starting at the beginning.
const BATCH_ARGS: &str =
    "(now() - interval '1 minute', NULL, 1000, NULL, 'test', '{}', '{published,deleted}')";

#[tokio::test]
async fn every_batch_statement_deletes_by_tid_whatever_the_statistics_say() {
    // Issue 22 item 10: analyzed while nothing was published, then drained, a prune's DELETE
    // walked outbox_published_at_idx over the whole range at every batch, filtering on ctid.
    let db = TestDb::new().await;
    freeze_statistics(&db).await;
    let mut c = db.pool.acquire().await.unwrap();
    for (stats_when, now) in [
        ("analyzed with nothing eligible, now all eligible", true),
        ("analyzed with all eligible, now nothing eligible", false),
    ] {
        prunable(&db, 10_000, !now).await;
        db.exec("ANALYZE outbox; ANALYZE processed_messages; ANALYZE outbox_audit")
            .await;
        set_eligible(&db, now).await;
        for (table, sql) in outboxctl::db::prune::BATCH_STATEMENTS {
            let relation = match table {
                "published" | "published_by_log" | "dead" => "outbox",
                "audit" => "outbox_audit",
                other => other,
            };
            crate::support::plans::assert_tid_lookup(
                &mut c,
                &format!("prune {table}, {stats_when}"),
                sql,
                BATCH_ARGS,
                ("Delete", relation),
                &[],
            )
            .await;
        }
    }
}

/// Publishes every event, an hour ago, a millisecond apart (as relays do, batch after batch: a
/// batch's rows share a time, and the next prune batch starts at the last one's).
async fn drain(db: &TestDb) {
    db.exec(
        "UPDATE outbox SET published_at = now() - interval '1 hour' + id * interval '1 ms',
                attempt_count = 1",
    )
    .await;
}

#[tokio::test]
async fn a_prune_after_a_drain_under_stale_statistics_deletes_every_batch_by_tid() {
    let db = TestDb::new().await;
    freeze_statistics(&db).await;
    // 20k events analyzed while pending, then drained (published an hour ago).
    db.seed_ready(20_000).await;
    db.exec("ANALYZE outbox").await;
    drain(&db).await;

    // Each batch, as the library runs it, planned first with that batch's own arguments.
    let mut c = db.pool.acquire().await.unwrap();
    let cutoff = outboxctl::db::prune::cutoff(&mut c, 60_000_000)
        .await
        .unwrap();
    let mut audit = outboxctl::db::prune::PruneAudit {
        actor: "test".into(),
        details: serde_json::json!({"published": {"deleted": 0}}),
        id: None,
    };
    let (mut from, mut deleted, mut batches) = (None, 0, 0);
    loop {
        let args = format!(
            "('{}'::timestamptz, {}, 1000, {}, 'test', '{{}}', '{{published,deleted}}')",
            cutoff.to_rfc3339(),
            from.map_or(
                "NULL".to_owned(),
                |f: chrono::DateTime<chrono::Utc>| format!("'{}'::timestamptz", f.to_rfc3339())
            ),
            audit.id.map_or("NULL".to_owned(), |i| i.to_string()),
        );
        crate::support::plans::assert_tid_lookup(
            &mut c,
            &format!("batch {}", batches + 1),
            outboxctl::db::prune::DELETE_PUBLISHED,
            &args,
            ("Delete", "outbox"),
            &[],
        )
        .await;
        let b = outboxctl::db::prune::delete(
            &mut c,
            &outboxctl::db::prune::PUBLISHED,
            cutoff,
            from,
            1000,
            &mut audit,
        )
        .await
        .unwrap();
        batches += 1;
        if b.deleted == 0 {
            break;
        }
        deleted += b.deleted;
        from = b.next;
    }
    assert_eq!(
        (deleted, batches),
        (20_000, 21),
        "1000 a batch, then an empty one"
    );
}

#[tokio::test]
async fn the_binary_prunes_a_drained_outbox_under_stale_statistics_reading_each_row_once() {
    let db = TestDb::new().await;
    freeze_statistics(&db).await;
    // The binary, the same way: what it reads of outbox_published_at_idx is its count and the
    // picks' ranges (each batch starts where the last stopped), about two entries per row, not
    // rows x batches (261k here) as when each DELETE walked the index.
    db.seed_ready(20_000).await;
    db.exec("ANALYZE outbox").await;
    drain(&db).await;
    let read = || async {
        db.scalar::<i64>(
            "SELECT idx_tup_read FROM pg_stat_user_indexes
              WHERE indexrelid = 'outbox_published_at_idx'::regclass",
        )
        .await
    };
    let before = read().await;
    let v = run_json(
        &db,
        &[
            "prune",
            "--older-than",
            "1s",
            "--batch-size",
            "1000",
            "--json",
        ],
    );
    assert_eq!(v["published"]["deleted"], 20_000, "{v}");
    wait_until(
        Duration::from_secs(10),
        "the prune's index statistics",
        || async { read().await - before >= 20_000 },
    )
    .await;
    let entries = read().await - before;
    assert!(
        entries < 60_000,
        "prune read {entries} index entries of outbox_published_at_idx for 20000 rows"
    );
}

/// A dead letter that blocks its ordered key stays until an operator decides (requeue, `ordering
/// skip`, `dead discard`): `prune --dead-older-than` keeps it, says how many it kept, and the
/// key stays blocked; other dead letters of the same age go (issue 31 item 3).
#[tokio::test]
async fn prune_keeps_dead_letters_that_block_their_keys_and_says_so() {
    let db = TestDb::new().await;
    run(&db, &["ordering", "enable", "--aggregate-type", "order"], 0);
    let insert = |key: &'static str, n: i64, aggregate_type: &'static str| {
        let db = &db;
        async move {
            db.scalar::<i64>(&format!(
                "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
                 VALUES ('00000000-0000-0000-0000-000000000001', '{aggregate_type}', '{key}', 'e',
                         '{{\"n\": {n}}}', gen_random_uuid()::text) RETURNING id"
            ))
            .await
        }
    };
    let head = insert("k1", 1, "order").await;
    let next = insert("k1", 2, "order").await;
    let other = insert("x", 1, "invoice").await;
    // Both dead two hours ago: the ordered head blocks its key (the trigger), the other not.
    db.exec(&format!(
        "UPDATE outbox SET dead_lettered_at = now() - interval '2 hours', attempt_count = 10,
                last_error = 'HTTP 422' WHERE id IN ({head}, {other})"
    ))
    .await;
    let blocks: Option<bool> = db
        .scalar(&format!("SELECT blocks_key FROM outbox WHERE id = {head}"))
        .await;
    assert_eq!(blocks, Some(true));

    let dry = run_json(
        &db,
        &[
            "prune",
            "--older-than",
            "7d",
            "--dead-older-than",
            "1h",
            "--dry-run",
            "--json",
        ],
    );
    assert_eq!(dry["dead"]["would_delete"], 1, "{dry}");
    assert_eq!(dry["dead"]["kept_blocking"], 1, "{dry}");

    let v = run_json(
        &db,
        &[
            "prune",
            "--older-than",
            "7d",
            "--dead-older-than",
            "1h",
            "--json",
        ],
    );
    assert_eq!(v["dead"]["deleted"], 1, "{v}");
    assert_eq!(v["dead"]["kept_blocking"], 1, "{v}");
    let left: Vec<i64> = sqlx::query_scalar("SELECT id FROM outbox ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        left,
        vec![head, next],
        "the blocking head and its key stay; the other goes"
    );

    let out = db
        .cmd()
        .args(["prune", "--older-than", "7d", "--dead-older-than", "1h"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("kept 1 dead letter that blocks its key"),
        "{}",
        stdout(&out)
    );
    // The key is still blocked: a relay publishes nothing of it.
    let dir = tempfile::tempdir().unwrap();
    let sink = format!("file:{}", dir.path().join("o.jsonl").display());
    run(&db, &["relay", "--once", "--sink", &sink], 0);
    let published: bool = db
        .scalar(&format!(
            "SELECT published_at IS NOT NULL FROM outbox WHERE id = {next}"
        ))
        .await;
    assert!(!published, "the key stays blocked after prune");
}
