//! For cron and monitoring: `stats --check` (a Nagios plugin: status line, performance data, exit
//! codes 0-3 also for bad arguments and an unreachable database), `stats --format prometheus`
//! (validated by the real `promtool check metrics`), `--output` (atomic file for node_exporter's
//! textfile collector), and `migrate --check`.

use std::process::Output;

use serde_json::Value;

use crate::support::fixtures;
use crate::support::{bin, output, promtool_check, stderr, stdout, TestDb};

fn run(db: &TestDb, args: &[&str]) -> Output {
    output(db.cmd().args(args))
}

/// The value of the sample whose name and labels are exactly `series`.
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no sample {series} in\n{text}"))
        .parse()
        .unwrap()
}

/// Three pending events created 10 minutes ago (one failed once), two dead letters.
async fn backlog(db: &TestDb) {
    for _ in 0..3 {
        let id = fixtures::ready(db).await;
        fixtures::created(db, id, "10 minutes").await;
    }
    db.exec("UPDATE outbox SET attempt_count = 1 WHERE id = (SELECT min(id) FROM outbox)")
        .await;
    for _ in 0..2 {
        let id = fixtures::ready(db).await;
        fixtures::kill(db, id, "1 minute", "HTTP 500").await;
    }
}

#[tokio::test]
async fn check_reports_the_worst_threshold_with_nagios_codes_and_perfdata() {
    let db = TestDb::new().await;
    backlog(&db).await;

    let out = run(
        &db,
        &[
            "stats",
            "--check",
            "--warn-lag",
            "1m",
            "--crit-lag",
            "5m",
            "--warn-dead",
            "1",
            "--crit-dead",
            "100",
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let line = stdout(&out);
    assert_eq!(line.lines().count(), 1, "{line}");
    assert!(
        line.starts_with("OUTBOX CRITICAL - lag 10m")
            && line.contains("> 5m, dead letters 2 > 1 |"),
        "{line}"
    );
    let perf = line.split(" | ").nth(1).unwrap().trim();
    let lag: f64 = perf
        .strip_prefix("'lag'=")
        .and_then(|p| p.split('s').next())
        .unwrap()
        .parse()
        .unwrap();
    assert!((600.0..700.0).contains(&lag), "{perf}");
    assert!(
        perf.ends_with(";60;300 'dead'=2;1;100 'backlog'=3;; 'retrying'=1;;"),
        "{perf}"
    );

    // Only a warning threshold crossed: 1.
    let out = run(
        &db,
        &[
            "stats",
            "--check",
            "--warn-retrying",
            "0",
            "--crit-retrying",
            "5",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stdout(&out));
    assert!(
        stdout(&out).starts_with("OUTBOX WARNING - retrying 1 > 0 |"),
        "{}",
        stdout(&out)
    );

    // Nothing crossed (a value equal to its threshold does not trip it): 0.
    let out = run(
        &db,
        &[
            "stats",
            "--check",
            "--warn-backlog",
            "3",
            "--crit-lag",
            "1h",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).starts_with("OUTBOX OK - lag 10m"),
        "{}",
        stdout(&out)
    );

    // The environment sets the check as well.
    let out = db
        .cmd()
        .args(["stats"])
        .env("OUTBOXCTL_STATS_CHECK", "1")
        .env("OUTBOXCTL_CRIT_BACKLOG", "2")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).starts_with("OUTBOX CRITICAL - backlog 3 > 2"),
        "{}",
        stdout(&out)
    );

    // --json: the same verdict, per figure, with the stats.
    let out = run(
        &db,
        &[
            "stats",
            "--check",
            "--json",
            "--warn-dead",
            "1",
            "--crit-dead",
            "100",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "WARNING");
    assert_eq!(v["exit_code"], 1);
    assert_eq!(v["summary"], "dead letters 2 > 1");
    let dead = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "dead")
        .unwrap();
    assert_eq!(
        (
            dead["value"].as_f64(),
            dead["warn"].as_f64(),
            dead["status"].as_str()
        ),
        (Some(2.0), Some(1.0), Some("WARNING"))
    );
    assert_eq!(v["stats"]["dead_lettered"], 2);
}

#[tokio::test]
async fn check_is_unknown_for_bad_arguments_errors_and_an_unreachable_database() {
    let db = TestDb::new().await;
    let unknown = |out: &Output, what: &str| {
        assert_eq!(
            out.status.code(),
            Some(3),
            "{what}: {}{}",
            stdout(out),
            stderr(out)
        );
        let line = stdout(out);
        assert!(
            line.starts_with("OUTBOX UNKNOWN - ") && line.lines().count() == 1,
            "{what}: {line}"
        );
        line
    };
    // clap's own errors (2 elsewhere) are UNKNOWN with --check.
    let line = unknown(
        &run(&db, &["stats", "--check", "--warn-lag", "soon"]),
        "bad duration",
    );
    assert!(line.contains("--warn-lag"), "{line}");
    unknown(
        &run(&db, &["stats", "--check", "--warn-dead", "-1"]),
        "negative count",
    );
    unknown(
        &run(&db, &["stats", "--check", "--warn-dead", "1", "--bogus"]),
        "unknown flag",
    );
    let out = db
        .cmd()
        .args(["stats", "--warn-lag", "soon"])
        .env("OUTBOXCTL_STATS_CHECK", "yes")
        .output()
        .unwrap();
    unknown(&out, "check from the environment");
    // Our own argument checks.
    let line = unknown(&run(&db, &["stats", "--check"]), "no threshold");
    assert!(line.contains("at least one threshold"), "{line}");
    let line = unknown(
        &run(
            &db,
            &["stats", "--check", "--warn-lag", "10m", "--crit-lag", "1m"],
        ),
        "inverted",
    );
    assert!(
        line.contains("--warn-lag is greater than --crit-lag"),
        "{line}"
    );
    unknown(
        &run(
            &db,
            &[
                "stats",
                "--check",
                "--warn-dead",
                "1",
                "--format",
                "prometheus",
            ],
        ),
        "prometheus",
    );
    unknown(
        &run(
            &db,
            &["stats", "--check", "--warn-dead", "1", "--by", "tenant"],
        ),
        "--by",
    );
    // The database unreachable (nothing listens on this port of our range).
    let closed = crate::support::servers::ClosedPort::new();
    let out = bin()
        .args([
            "stats",
            "--check",
            "--warn-dead",
            "1",
            "--connect-timeout",
            "3s",
        ])
        .args([
            "--database-url",
            &format!("postgres://postgres@127.0.0.1:{}/test", closed.port),
        ])
        .output()
        .unwrap();
    let line = unknown(&out, "unreachable");
    assert!(line.contains("cannot connect to PostgreSQL"), "{line}");
    // A schema without an outbox.
    let other = TestDb::unmigrated().await;
    let line = unknown(
        &run(&other, &["stats", "--check", "--warn-dead", "1"]),
        "no outbox",
    );
    assert!(line.contains("no outbox table"), "{line}");
    let out = run(&other, &["stats", "--check", "--json", "--warn-dead", "1"]);
    assert_eq!(out.status.code(), Some(3));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["status"].as_str(), v["exit_code"].as_u64()),
        (Some("UNKNOWN"), Some(3))
    );

    // Without --check the general codes stay: a threshold alone is a usage error (2).
    let out = run(&db, &["stats", "--warn-dead", "1"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

#[tokio::test]
async fn prometheus_exposition_is_valid_and_holds_the_figures() {
    let db = TestDb::new().await;
    backlog(&db).await;
    let id = fixtures::ready(&db).await;
    fixtures::schedule(&db, id).await;
    let id = fixtures::ready(&db).await;
    fixtures::lease(&db, id).await;
    let id = fixtures::ready(&db).await;
    fixtures::publish(&db, id, "10 seconds").await;
    // An event type that needs escaping in a label value.
    fixtures::insert(&db, "we\"ird\\type\nx", "order", "o-2", fixtures::TENANT_B).await;

    let out = run(&db, &["stats", "--format", "prometheus"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = stdout(&out);
    promtool_check(&text);
    let s = format!("schema=\"{}\"", db.schema);
    assert_eq!(
        sample(&text, &format!("outboxctl_events{{{s},state=\"ready\"}}")),
        4.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("outboxctl_events{{{s},state=\"scheduled\"}}")
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("outboxctl_events{{{s},state=\"in_flight\"}}")
        ),
        1.0
    );
    assert_eq!(
        sample(&text, &format!("outboxctl_events{{{s},state=\"dead\"}}")),
        2.0
    );
    assert_eq!(
        sample(&text, &format!("outboxctl_retrying_events{{{s}}}")),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("outboxctl_recently_published_events{{{s},window=\"1m\"}}")
        ),
        1.0
    );
    let age = sample(
        &text,
        &format!("outboxctl_oldest_pending_age_seconds{{{s}}}"),
    );
    assert!((600.0..700.0).contains(&age), "{age}");
    assert!(
        sample(
            &text,
            &format!("outboxctl_next_due_timestamp_seconds{{{s}}}")
        ) > 1.7e9
    );
    assert!(text.contains("outboxctl_build_info{version=\""), "{text}");
    // No client-side timestamps: every sample line is `name{labels} value`.
    for l in text.lines().filter(|l| !l.starts_with('#')) {
        assert_eq!(
            l.rsplit('}').next().unwrap().split_whitespace().count(),
            1,
            "{l}"
        );
    }

    // --by: one series per group (labelled), escaped, still valid.
    let out = run(
        &db,
        &["stats", "--format", "prometheus", "--by", "event-type"],
    );
    let text = stdout(&out);
    promtool_check(&text);
    assert_eq!(
        sample(
            &text,
            &format!(
                "outboxctl_events{{{s},event_type=\"we\\\"ird\\\\type\\nx\",state=\"ready\"}}"
            )
        ),
        1.0
    );
    assert_eq!(
        sample(
            &text,
            &format!("outboxctl_events{{{s},event_type=\"order.placed\",state=\"ready\"}}")
        ),
        3.0
    );

    // An empty outbox, and --json/--format json agree.
    let empty = TestDb::new().await;
    let out = run(&empty, &["stats", "--format", "prometheus"]);
    promtool_check(&stdout(&out));
    let a: Value = serde_json::from_slice(&run(&db, &["stats", "--json"]).stdout).unwrap();
    let b: Value =
        serde_json::from_slice(&run(&db, &["stats", "--format", "json"]).stdout).unwrap();
    assert_eq!(
        (a["ready"].as_i64(), a["dead_lettered"].as_i64()),
        (b["ready"].as_i64(), b["dead_lettered"].as_i64())
    );
    // An explicit --format wins over --json.
    let out = run(&db, &["stats", "--json", "--format", "prometheus"]);
    assert!(stdout(&out).starts_with("# HELP"), "{}", stdout(&out));
}

#[tokio::test]
async fn output_writes_the_file_atomically_for_the_textfile_collector() {
    let db = TestDb::new().await;
    backlog(&db).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("outbox.prom");
    std::fs::write(&path, "old contents\n").unwrap();

    let out = run(
        &db,
        &[
            "stats",
            "--format",
            "prometheus",
            "--output",
            path.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(out.stdout.is_empty(), "{}", stdout(&out));
    let text = std::fs::read_to_string(&path).unwrap();
    promtool_check(&text);
    assert_eq!(
        sample(
            &text,
            &format!(
                "outboxctl_events{{schema=\"{}\",state=\"dead\"}}",
                db.schema
            )
        ),
        2.0
    );
    // Nothing else left in the directory (the temporary file was renamed), readable by others.
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, ["outbox.prom"]);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
        0o644
    );

    // JSON too; a human table cannot be written; a missing directory fails without a trace.
    let json = dir.path().join("stats.json");
    let out = db
        .cmd()
        .args(["stats", "--json"])
        .env("OUTBOXCTL_STATS_OUTPUT", &json)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["dead_lettered"], 2);
    let out = run(&db, &["stats", "--output", path.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("--output writes --format prometheus or json"),
        "{}",
        stderr(&out)
    );
    let missing = dir.path().join("nope/outbox.prom");
    let out = run(
        &db,
        &[
            "stats",
            "--format",
            "prometheus",
            "--output",
            missing.to_str().unwrap(),
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("cannot write --output"),
        "{}",
        stderr(&out)
    );
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2);
}

#[tokio::test]
async fn migrate_check_exits_6_while_migrations_are_pending() {
    let db = TestDb::unmigrated().await;
    let out = run(&db, &["migrate", "--check"]);
    assert_eq!(
        out.status.code(),
        Some(6),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert!(
        stdout(&out).contains(&format!(
            "has {} migrations pending: {}",
            crate::support::migrations(),
            crate::support::migration_list()
        )),
        "{}",
        stdout(&out)
    );
    // It changed nothing.
    let exists: bool = db
        .scalar(&format!(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '{}')",
            db.schema
        ))
        .await;
    assert!(!exists);

    let out = run(&db, &["migrate"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let out = run(&db, &["migrate", "--check", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["up_to_date"].as_bool(), v["exit_code"].as_u64()),
        (Some(true), Some(0))
    );
    assert_eq!(v["pending"], serde_json::json!([]));

    // One migration forgotten: pending again.
    db.exec("DELETE FROM _sqlx_migrations WHERE version = 5")
        .await;
    let out = db
        .cmd()
        .args(["migrate"])
        .env("OUTBOXCTL_MIGRATE_CHECK", "1")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(6), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("has 1 migration pending: 5"),
        "{}",
        stdout(&out)
    );
}

#[tokio::test]
async fn migrate_check_exits_6_for_an_adoptable_seed_table_and_2_for_a_conflicting_one() {
    let ddl = include_str!("../../../migrations/0001_outbox.sql");
    let db = TestDb::unmigrated().await;
    db.exec(&format!(
        "CREATE SCHEMA \"{0}\"; SET search_path TO \"{0}\"; {ddl}",
        db.schema
    ))
    .await;
    let out = run(&db, &["migrate", "--check", "--json"]);
    assert_eq!(out.status.code(), Some(6), "{}", stdout(&out));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        v["pending"],
        serde_json::json!((1..=crate::support::migrations() as i64).collect::<Vec<_>>())
    );
    assert_eq!(v["migrations"][0]["state"], "adoptable");
    let out = run(&db, &["migrate", "--check"]);
    assert!(
        stdout(&out).contains("adopts the existing seed-era tables"),
        "{}",
        stdout(&out)
    );

    db.exec("ALTER TABLE outbox ALTER COLUMN payload TYPE json")
        .await;
    let out = run(&db, &["migrate", "--check"]);
    assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("conflict with migration 1"),
        "{}",
        stdout(&out)
    );
}

/// The lag is lateness: `publish --delay 1h` paged on-call (`oldest pending 4m 26s > 1m`, exit
/// 2) with nothing due. A ready event counts from when it fell due, one waiting for a retry (or
/// being retried) from when it first fell due, one scheduled for later and never tried not at
/// all; the same figure in `stats --check`, `--format prometheus`, the relay's `/metrics`
/// and doctor's `oldest_pending`.
#[tokio::test]
async fn the_lag_is_how_late_an_event_is_not_how_old() {
    let db = TestDb::new().await;
    let lag = |db: &TestDb, args: &[&str]| {
        let out = run(
            db,
            &[&["stats", "--check", "--crit-lag", "1m", "--json"], args].concat(),
        );
        let v: Value = serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
        (
            out.status.code(),
            v["stats"]["oldest_pending_lag_seconds"].as_f64().unwrap(),
        )
    };
    // Published with a delay, created 5 minutes ago: nothing is due, nothing is late.
    let out = run(
        &db,
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
            "--delay",
            "1h",
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    db.exec("UPDATE outbox SET created_at = now() - interval '5 minutes'")
        .await;
    let out = run(&db, &["stats", "--check", "--crit-lag", "1m"]);
    assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
    assert!(
        stdout(&out).starts_with("OUTBOX OK - lag 0s,"),
        "{}",
        stdout(&out)
    );
    let (_, v) = doctor_lag(&db); // other checks look at the whole server: not the exit code
    assert_eq!(v.0, "PASS", "{}", v.1);

    // A delayed event that fell due 3 minutes ago (created an hour ago): 3 minutes late.
    let due = fixtures::ready(&db).await;
    db.exec(&format!(
        "UPDATE outbox SET created_at = now() - interval '1 hour',
                available_at = now() - interval '3 minutes' WHERE id = {due}"
    ))
    .await;
    let (code, l) = lag(&db, &[]);
    assert_eq!(code, Some(2));
    assert!((180.0..240.0).contains(&l), "{l}");
    // Its first attempt in flight: still from when it fell due.
    fixtures::lease(&db, due).await;
    let (_, l) = lag(&db, &[]);
    assert!((180.0..240.0).contains(&l), "{l}");
    db.exec(&format!("DELETE FROM outbox WHERE id = {due}"))
        .await;

    // Failed, waiting for a retry an hour from now: late since it first fell due (created 10
    // minutes ago, due at once), whatever its backoff says.
    let retry = fixtures::ready(&db).await;
    db.exec(&format!(
        "UPDATE outbox SET created_at = now() - interval '10 minutes', attempt_count = 2,
                available_at = now() + interval '1 hour', last_error = 'HTTP 503' WHERE id = {retry}"
    ))
    .await;
    let (code, l) = lag(&db, &[]);
    assert_eq!(code, Some(2));
    assert!((600.0..660.0).contains(&l), "{l}");
    let out = run(&db, &["stats", "--check", "--crit-lag", "1m"]);
    assert!(
        stdout(&out).starts_with("OUTBOX CRITICAL - lag 10m"),
        "{}",
        stdout(&out)
    );
    // The same figure for Prometheus, and for doctor.
    let text = stdout(&run(&db, &["stats", "--format", "prometheus"]));
    promtool_check(&text);
    let s = format!("schema=\"{}\"", db.schema);
    let p = sample(
        &text,
        &format!("outboxctl_oldest_pending_lag_seconds{{{s}}}"),
    );
    assert!((600.0..660.0).contains(&p), "{p}");
    let (code, v) = doctor_lag(&db);
    assert_eq!((code, v.0.as_str()), (2, "FAIL"), "{}", v.1);
    assert!(v.1.starts_with("the most overdue event is 10m"), "{}", v.1);
    // --help says what the lag is.
    let help = stdout(&run(&db, &["stats", "--help"]));
    assert!(
        help.contains("scheduled for later and never tried does not count"),
        "{help}"
    );
}

/// doctor's exit code and its `oldest_pending` check's (status, message).
fn doctor_lag(db: &TestDb) -> (i32, (String, String)) {
    let out = run(
        db,
        &["doctor", "--json", "--warn-lag", "1m", "--crit-lag", "5m"],
    );
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(&out), stderr(&out)));
    let c = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "oldest_pending")
        .unwrap();
    (
        out.status.code().unwrap(),
        (
            c["status"].as_str().unwrap().to_owned(),
            c["message"].as_str().unwrap().to_owned(),
        ),
    )
}
