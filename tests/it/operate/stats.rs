//! `outboxctl stats`: figures checked against rows put in every state, the JSON shape, `--by`, and
//! EXPLAIN-backed proof that no statement scans published history.

use std::collections::BTreeSet;
use std::process::Stdio;

use chrono::{DateTime, Utc};
use outboxctl::db::stats::GroupBy;
use serde_json::Value;

use crate::support::plans::plan_nodes;
use crate::support::{stderr, stdout, TestDb};

const FIGURES: [&str; 12] = [
    "ready",
    "scheduled",
    "retrying",
    "in_flight",
    "dead_lettered",
    "published_last_minute",
    "published_last_hour",
    "oldest_ready_lag_seconds",
    "oldest_ready_age_seconds",
    "oldest_pending_age_seconds",
    "oldest_pending_lag_seconds",
    "next_due_at",
];

/// `stats` with a table width that fits all twelve columns of the fixture's rows.
fn stats(db: &TestDb, args: &[&str]) -> std::process::Output {
    db.cmd()
        .env("COLUMNS", "160")
        .arg("stats")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn stats_json(db: &TestDb, args: &[&str]) -> Value {
    let out = stats(db, &[&["--json"], args].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

fn time(v: &Value) -> DateTime<Utc> {
    v.as_str()
        .unwrap_or_else(|| panic!("{v} is not a time"))
        .parse()
        .unwrap()
}

/// Inserts `n` rows of tenant/event type/aggregate type `g` (a, b or c) with the given column
/// expressions (SQL, relative to the database's now()).
async fn put(db: &TestDb, n: i64, g: &str, state: &str, cols: &[(&str, &str)]) {
    let tenant = match g {
        "a" => "00000000-0000-0000-0000-00000000000a",
        "b" => "00000000-0000-0000-0000-00000000000b",
        _ => "00000000-0000-0000-0000-00000000000c",
    };
    let names: String = cols.iter().map(|(c, _)| format!(", {c}")).collect();
    let values: String = cols.iter().map(|(_, v)| format!(", {v}")).collect();
    db.exec(&format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key{names})
         SELECT '{tenant}', 'agg.{g}', i::text, 'ev.{g}', '{{}}', '{state}-{g}-' || i{values}
           FROM generate_series(1, {n}) i"
    ))
    .await;
}

/// The fixture: rows in every state, in three groups; expectations are in [`want`]. Every time is
/// at least 50 seconds away from a boundary (due, lease end, last minute), so a slow run cannot
/// move a row from one state to another.
async fn fixture(db: &TestDb) {
    // Ready: due 10 minutes ago, created 20 minutes ago (group a) ...
    put(
        db,
        2,
        "a",
        "ready",
        &[
            ("created_at", "now() - interval '20 minutes'"),
            ("available_at", "now() - interval '10 minutes'"),
        ],
    )
    .await;
    // ... a ready one whose lease expired (group b) ...
    put(
        db,
        1,
        "b",
        "expired",
        &[
            ("created_at", "now() - interval '5 minutes'"),
            ("available_at", "now() - interval '4 minutes'"),
            ("locked_until", "now() - interval '1 second'"),
            ("attempt_count", "1"),
        ],
    )
    .await;
    // ... and a fresh one (group c).
    put(db, 1, "c", "ready", &[]).await;
    // Scheduled: not due for an hour, created long ago (not lag!), in groups a and b; and a retry
    // waiting for its backoff.
    put(
        db,
        2,
        "a",
        "sched",
        &[
            ("created_at", "now() - interval '3 hours'"),
            ("available_at", "now() + interval '1 hour'"),
        ],
    )
    .await;
    put(
        db,
        1,
        "b",
        "sched",
        &[
            ("created_at", "now() - interval '3 hours'"),
            ("available_at", "now() + interval '30 minutes'"),
        ],
    )
    .await;
    put(
        db,
        1,
        "b",
        "retry",
        &[
            ("created_at", "now() - interval '2 hours'"),
            ("available_at", "now() + interval '20 minutes'"),
            ("attempt_count", "3"),
            ("last_error", "'HTTP 503'"),
        ],
    )
    .await;
    // In flight: leased, due long ago (not lag either).
    put(
        db,
        3,
        "a",
        "leased",
        &[
            ("created_at", "now() - interval '2 hours'"),
            ("available_at", "now() - interval '2 hours'"),
            ("locked_until", "now() + interval '10 minutes'"),
            ("attempt_count", "1"),
        ],
    )
    .await;
    put(
        db,
        1,
        "c",
        "leased",
        &[
            ("created_at", "now() - interval '2 hours'"),
            ("available_at", "now() - interval '2 hours'"),
            ("locked_until", "now() + interval '10 minutes'"),
            ("attempt_count", "1"),
        ],
    )
    .await;
    // Dead letters.
    put(
        db,
        2,
        "b",
        "dead",
        &[
            ("created_at", "now() - interval '4 hours'"),
            ("available_at", "now() - interval '4 hours'"),
            ("dead_lettered_at", "now() - interval '1 hour'"),
            ("attempt_count", "10"),
        ],
    )
    .await;
    put(
        db,
        1,
        "c",
        "dead",
        &[
            ("created_at", "now() - interval '4 hours'"),
            ("available_at", "now() - interval '4 hours'"),
            ("dead_lettered_at", "now() - interval '3 days'"),
            ("attempt_count", "10"),
        ],
    )
    .await;
    // Published: within the last minute, the last hour, and older.
    put(
        db,
        2,
        "a",
        "pub10s",
        &[
            ("created_at", "now() - interval '1 minute'"),
            ("available_at", "now() - interval '1 minute'"),
            ("published_at", "now() - interval '10 seconds'"),
        ],
    )
    .await;
    put(
        db,
        1,
        "c",
        "pub10s",
        &[
            ("created_at", "now() - interval '1 minute'"),
            ("available_at", "now() - interval '1 minute'"),
            ("published_at", "now() - interval '10 seconds'"),
        ],
    )
    .await;
    put(
        db,
        3,
        "b",
        "pub30m",
        &[
            ("created_at", "now() - interval '1 hour'"),
            ("available_at", "now() - interval '1 hour'"),
            ("published_at", "now() - interval '30 minutes'"),
        ],
    )
    .await;
    put(
        db,
        4,
        "a",
        "pub2h",
        &[
            ("created_at", "now() - interval '3 hours'"),
            ("available_at", "now() - interval '3 hours'"),
            ("published_at", "now() - interval '2 hours'"),
        ],
    )
    .await;
    put(
        db,
        5,
        "c",
        "pub10d",
        &[
            ("created_at", "now() - interval '11 days'"),
            ("available_at", "now() - interval '11 days'"),
            ("published_at", "now() - interval '10 days'"),
        ],
    )
    .await;
}

/// Expected figures of one group, or all (`None`), computed independently from the fixture.
struct Want {
    ready: i64,
    scheduled: i64,
    in_flight: i64,
    dead: i64,
    pub_1m: i64,
    pub_1h: i64,
    /// Key prefixes of the ready row with the oldest available_at and created_at.
    oldest_due: Option<&'static str>,
    oldest_created: Option<&'static str>,
    next_due: Option<&'static str>,
    /// Pending rows that failed at least once and are not leased.
    retrying: i64,
    /// Key prefix of the pending row (any state) with the oldest created_at.
    oldest_pending: Option<&'static str>,
}

fn want(group: Option<&str>) -> Want {
    match group {
        None => Want {
            ready: 4,
            scheduled: 4,
            in_flight: 4,
            dead: 3,
            pub_1m: 3,
            pub_1h: 6,
            oldest_due: Some("ready-a-"),
            oldest_created: Some("ready-a-"),
            next_due: Some("retry-b-"),
            retrying: 2,
            oldest_pending: Some("sched-a-"),
        },
        Some("a") => Want {
            ready: 2,
            scheduled: 2,
            in_flight: 3,
            dead: 0,
            pub_1m: 2,
            pub_1h: 2,
            oldest_due: Some("ready-a-"),
            oldest_created: Some("ready-a-"),
            next_due: Some("sched-a-"),
            retrying: 0,
            oldest_pending: Some("sched-a-"),
        },
        Some("b") => Want {
            ready: 1,
            scheduled: 2,
            in_flight: 0,
            dead: 2,
            pub_1m: 0,
            pub_1h: 3,
            oldest_due: Some("expired-b-"),
            oldest_created: Some("expired-b-"),
            next_due: Some("retry-b-"),
            retrying: 2,
            oldest_pending: Some("sched-b-"),
        },
        Some("c") => Want {
            ready: 1,
            scheduled: 0,
            in_flight: 1,
            dead: 1,
            pub_1m: 1,
            pub_1h: 1,
            oldest_due: Some("ready-c-"),
            oldest_created: Some("ready-c-"),
            next_due: None,
            retrying: 0,
            oldest_pending: Some("leased-c-"),
        },
        Some(g) => unreachable!("{g}"),
    }
}

/// Checks one figures object against the table: counts exactly, lags to the microsecond against
/// the report's own `now` (the database clock), from the rows' real timestamps.
async fn check(db: &TestDb, label: &str, f: &Value, now: DateTime<Utc>, w: Want) {
    let counts = [
        ("ready", w.ready),
        ("scheduled", w.scheduled),
        ("in_flight", w.in_flight),
        ("retrying", w.retrying),
        ("dead_lettered", w.dead),
        ("published_last_minute", w.pub_1m),
        ("published_last_hour", w.pub_1h),
    ];
    for (k, n) in counts {
        assert_eq!(f[k].as_i64(), Some(n), "{label}: {k} in {f}");
    }
    let min_of = |col: &'static str, prefix: Option<&'static str>| async move {
        match prefix {
            None => None,
            Some(p) => Some(
                db.scalar::<DateTime<Utc>>(&format!(
                    "SELECT min({col}) FROM outbox WHERE idempotency_key LIKE '{p}%'"
                ))
                .await,
            ),
        }
    };
    let secs = |t: Option<DateTime<Utc>>| {
        t.map(|t| (now - t).num_microseconds().unwrap() as f64 / 1e6)
            .unwrap_or(0.0)
    };
    let lag = secs(min_of("available_at", w.oldest_due).await);
    let age = secs(min_of("created_at", w.oldest_created).await);
    let pending_age = secs(min_of("created_at", w.oldest_pending).await);
    let got_pending_age = f["oldest_pending_age_seconds"].as_f64().unwrap();
    assert!(
        (got_pending_age - pending_age).abs() < 1e-5,
        "{label}: oldest pending age {got_pending_age}, want {pending_age}"
    );
    let got_lag = f["oldest_ready_lag_seconds"].as_f64().unwrap();
    let got_age = f["oldest_ready_age_seconds"].as_f64().unwrap();
    assert!(
        (got_lag - lag).abs() < 1e-5,
        "{label}: lag {got_lag}, want {lag}"
    );
    assert!(
        (got_age - age).abs() < 1e-5,
        "{label}: age {got_age}, want {age}"
    );
    let next = min_of("available_at", w.next_due).await;
    match next {
        None => assert!(f["next_due_at"].is_null(), "{label}: {f}"),
        Some(t) => assert_eq!(time(&f["next_due_at"]), t, "{label}: next_due_at"),
    }
}

#[tokio::test]
async fn figures_match_rows_in_every_state() {
    let db = TestDb::new().await;
    fixture(&db).await;
    db.exec("ANALYZE outbox").await;
    let before: DateTime<Utc> = db.scalar("SELECT now()").await;
    let v = stats_json(&db, &[]);
    let after: DateTime<Utc> = db.scalar("SELECT now()").await;
    let now = time(&v["now"]);
    assert!(before <= now && now <= after, "`now` is the database clock");
    assert_eq!(v["schema"], db.schema.as_str());
    check(&db, "total", &v, now, want(None)).await;
    let lag = v["oldest_ready_lag_seconds"].as_f64().unwrap();
    assert!((600.0..900.0).contains(&lag), "{lag}");
    assert!((v["throughput_per_second"].as_f64().unwrap() - 3.0 / 60.0).abs() < 1e-9);
    let rows: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(
        v["table_rows_estimate"], rows,
        "after ANALYZE the estimate is exact"
    );
}

#[tokio::test]
async fn by_breaks_the_figures_down_and_the_groups_add_up() {
    let db = TestDb::new().await;
    fixture(&db).await;
    for (by, key_of) in [
        ("event-type", "ev."),
        ("aggregate-type", "agg."),
        ("tenant", "00000000-0000-0000-0000-00000000000"),
    ] {
        let v = stats_json(&db, &["--by", by]);
        let now = time(&v["now"]);
        assert_eq!(v["by"], by);
        let groups = v["groups"].as_object().unwrap();
        let keys: Vec<&String> = groups.keys().collect();
        assert_eq!(
            keys,
            ["a", "b", "c"]
                .map(|g| format!("{key_of}{g}"))
                .iter()
                .collect::<Vec<_>>(),
            "--by {by}"
        );
        for g in ["a", "b", "c"] {
            let f = &groups[&format!("{key_of}{g}")];
            check(&db, &format!("--by {by} {g}"), f, now, want(Some(g))).await;
        }
        check(&db, &format!("--by {by} total"), &v, now, want(None)).await;
    }
    // And the env fallback.
    let out = db
        .cmd()
        .args(["stats", "--json"])
        .env("OUTBOXCTL_STATS_BY", "tenant")
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["by"], "tenant");
}

#[tokio::test]
async fn json_shape() {
    let db = TestDb::new().await;
    let top: BTreeSet<&str> = [
        "schema",
        "now",
        "throughput_per_second",
        "table_rows_estimate",
        "blocked_keys",
        "blocked_events",
        "oldest_blocked_at",
    ]
    .into_iter()
    .chain(FIGURES)
    .collect();
    let keys = |v: &Value| -> BTreeSet<String> { v.as_object().unwrap().keys().cloned().collect() };
    let strs =
        |s: &BTreeSet<&str>| -> BTreeSet<String> { s.iter().map(|k| k.to_string()).collect() };

    // Empty outbox: zeros, no next due time.
    let v = stats_json(&db, &[]);
    assert_eq!(keys(&v), strs(&top));
    for k in FIGURES {
        let want = match k {
            "next_due_at" => Value::Null,
            k if k.ends_with("_seconds") => serde_json::json!(0.0),
            _ => serde_json::json!(0),
        };
        assert_eq!(v[k], want, "{k}");
    }

    fixture(&db).await;
    let v = stats_json(&db, &["--by", "event-type"]);
    let mut with_groups = top.clone();
    with_groups.extend(["by", "groups"]);
    assert_eq!(keys(&v), strs(&with_groups));
    for f in v["groups"].as_object().unwrap().values() {
        assert_eq!(keys(f), strs(&FIGURES.into_iter().collect()));
        for k in FIGURES {
            let ok = match k {
                "next_due_at" => f[k].is_null() || f[k].is_string(),
                k if k.ends_with("_seconds") => f[k].is_f64(),
                _ => f[k].is_i64(),
            };
            assert!(ok, "{k}: {}", f[k]);
        }
    }
    assert!(v["now"].is_string() && v["schema"].is_string());
    assert!(v["throughput_per_second"].is_f64());
    assert!(v["table_rows_estimate"].is_i64() || v["table_rows_estimate"].is_null());
}

#[tokio::test]
async fn a_never_analysed_table_has_an_unknown_size_not_zero() {
    let db = TestDb::with_backlog(3).await;
    let v = stats_json(&db, &[]);
    assert!(v["table_rows_estimate"].is_null(), "{v}");
    let text = stdout(&stats(&db, &[]));
    assert!(
        text.contains("rows in table unknown") && !text.contains("~0 rows"),
        "{text}"
    );
    db.exec("ANALYZE outbox").await;
    let v = stats_json(&db, &[]);
    assert_eq!(v["table_rows_estimate"], 3, "{v}");
    assert!(stdout(&stats(&db, &[])).contains("~3 rows in table"));
}

#[tokio::test]
async fn human_table() {
    let db = TestDb::new().await;
    fixture(&db).await;
    let out = stats(&db, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    let cells = |line: &str| -> Vec<String> {
        line.split(['│', '┆'])
            .map(|c| c.trim().to_owned())
            .filter(|c| !c.is_empty())
            .collect()
    };
    let lines: Vec<&str> = text.lines().collect();
    let header = lines.iter().find(|l| l.contains("ready")).unwrap();
    assert_eq!(
        cells(header),
        [
            "outbox",
            "ready",
            "scheduled",
            "retrying",
            "in flight",
            "dead",
            "pub/1m",
            "pub/1h",
            "lag",
            "lag (due)",
            "lag (created)",
            "oldest pending"
        ]
    );
    let row = lines.iter().find(|l| l.contains(&db.schema)).unwrap();
    let row = cells(row);
    assert_eq!(
        row[..8],
        [db.schema.as_str(), "4", "4", "2", "4", "3", "3", "6"]
    );
    // Lag: the leased rows due 2 hours ago and the retry created 2 hours ago; not the scheduled
    // rows created 3 hours ago.
    assert!(row[8].starts_with("2h"), "lag {}", row[8]);
    assert!(row[9].starts_with("10m"), "lag (due) {}", row[9]);
    assert!(row[10].starts_with("20m"), "lag (created) {}", row[10]);
    assert!(row[11].starts_with("3h"), "oldest pending {}", row[11]);
    let last = lines.last().unwrap();
    assert!(
        last.starts_with("throughput 0.1/s over the last minute; next scheduled event 20"),
        "{last}"
    );

    let by = stdout(&stats(&db, &["--by", "aggregate-type"]));
    for g in ["agg.a", "agg.b", "agg.c", "(total)"] {
        assert!(
            by.lines()
                .any(|l| cells(l).first().map(String::as_str) == Some(g)),
            "{g} in\n{by}"
        );
    }
}

#[tokio::test]
async fn no_statement_scans_published_history() {
    let db = TestDb::new().await;
    // A long published history (30 days, 20k rows), a small backlog, a few dead letters.
    db.seed_published_history(20000).await;
    db.seed_ready(50).await;
    db.exec(
        "UPDATE outbox SET dead_lettered_at = now(), attempt_count = 10
          WHERE idempotency_key IN ('k-1', 'k-2', 'k-3')",
    )
    .await;
    db.exec("VACUUM ANALYZE outbox").await;
    let mut conn = db.pool.acquire().await.unwrap();
    let mut failures = Vec::new();
    for by in [
        GroupBy::None,
        GroupBy::EventType,
        GroupBy::Tenant,
        GroupBy::AggregateType,
    ] {
        for (name, sql) in outboxctl::db::stats::statements(by) {
            let plan: Value = sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) {sql}"))
                .fetch_one(&mut *conn)
                .await
                .unwrap();
            let all = plan_nodes(&plan[0]["Plan"]);
            let seq = all
                .iter()
                .any(|n| n["Node Type"] == "Seq Scan" && n["Relation Name"] == "outbox");
            let indexes: BTreeSet<&str> = all
                .iter()
                .filter_map(|n| n["Index Name"].as_str())
                .collect();
            let want = match name {
                "pending" => "outbox_ready_idx",
                "dead" => "outbox_dead_idx",
                "published_recent" => "outbox_published_at_idx",
                other => panic!("a new stats statement `{other}`: add its index here"),
            };
            // Both partial indexes of pending rows serve the pending figures equally: neither
            // holds published history.
            let pending_ok = name == "pending"
                && indexes.len() == 1
                && indexes.contains("outbox_key_pending_idx");
            if seq || (indexes != BTreeSet::from([want]) && !pending_ok) {
                failures.push(format!(
                    "{by:?} {name}: want only {want}, got {indexes:?} seq scan {seq}\n{plan:#}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// The command reads its figures in one read-only snapshot with JIT off: the statements it sends
/// (sqlx's statement log, which `OUTBOXCTL_LOG` lets through) open the transaction with that
/// setting before the first figure and end it after the last.
#[tokio::test]
async fn figures_are_read_in_one_read_only_snapshot_without_jit() {
    let db = TestDb::with_backlog(3).await;
    let out = db
        .cmd()
        .env("OUTBOXCTL_LOG", "sqlx::query=debug")
        .args(["stats", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let log = stderr(&out);
    let lines: Vec<&str> = log.lines().collect();
    let at = |what: &str, from: usize| {
        lines[from..]
            .iter()
            .position(|l| l.contains(what))
            .map(|i| i + from)
            .unwrap_or_else(|| panic!("no statement {what} after line {from}:\n{log}"))
    };
    let begin = at(
        "db.statement=\"\\n\\nSET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL jit = off\\n\"",
        0,
    );
    let mut last = begin;
    for (name, sql) in outboxctl::db::stats::statements(GroupBy::None) {
        let logged = format!("db.statement={:?}", format!("\n\n{sql}\n"));
        let i = at(&logged, begin);
        assert!(
            !lines[begin..i]
                .iter()
                .any(|l| l.contains("summary=\"COMMIT\"") || l.contains("summary=\"ROLLBACK\"")),
            "{name} ran after the snapshot ended:\n{log}"
        );
        last = last.max(i);
    }
    let end = lines[last..]
        .iter()
        .position(|l| l.contains("summary=\"COMMIT\"") || l.contains("summary=\"ROLLBACK\""));
    assert!(end.is_some(), "the snapshot never ended:\n{log}");
}
