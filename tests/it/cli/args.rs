//! The command line as a user types it: environment values never shown (help, usage, errors),
//! shared flags before the subcommand and their precedence, environment errors that name the
//! variable, empty variables, bounded delays, dates, `-q`, and `--version`.

use std::collections::BTreeSet;
use std::process::{Command, Output};

use clap::CommandFactory;
use outboxctl::cli::Cli;

use crate::support::{base_url, bin, output, stderr, stdout, TestDb};

/// Every command path ([], ["migrate"], ["dead", "list"], ...) with the env names of its args.
fn commands_and_env(
    cmd: &clap::Command,
    prefix: Vec<String>,
    out: &mut Vec<(Vec<String>, Vec<String>)>,
) {
    let envs = cmd
        .get_arguments()
        .filter_map(|a| a.get_env())
        .map(|e| e.to_string_lossy().into_owned())
        .collect();
    out.push((prefix.clone(), envs));
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut path = prefix.clone();
        path.push(sub.get_name().to_owned());
        commands_and_env(sub, path, out);
    }
}

fn all_commands() -> Vec<(Vec<String>, Vec<String>)> {
    let mut out = Vec::new();
    commands_and_env(&Cli::command(), vec![], &mut out);
    out
}

/// A distinct canary per variable, shaped like the secret it could be.
fn canary(var: &str) -> String {
    format!(
        "amqp://guest:canaryPW{}@127.0.0.1:1/",
        var.len() * 7919 % 10007
    )
}

fn with_every_env_canary(c: &mut Command) -> BTreeSet<String> {
    let mut set = BTreeSet::new();
    for (_, envs) in all_commands() {
        for e in envs {
            let v = canary(&e);
            c.env(&e, &v);
            set.insert(v);
        }
    }
    set
}

fn assert_no_canary(out: &Output, canaries: &BTreeSet<String>, what: &str) {
    let all = format!("{}{}", stdout(out), stderr(out));
    assert!(
        !all.contains("canaryPW"),
        "{what}: a canary value leaked:\n{all}"
    );
    for c in canaries {
        assert!(!all.contains(c.as_str()), "{what}: {c} leaked");
    }
}

#[test]
fn help_never_shows_an_environment_value() {
    let commands = all_commands();
    let env_count: usize = commands.iter().map(|(_, e)| e.len()).sum();
    assert!(env_count > 100, "walked too few variables: {env_count}");
    for (path, envs) in &commands {
        for flag in ["--help", "-h"] {
            let mut c = bin();
            let canaries = with_every_env_canary(&mut c);
            c.args(path).arg(flag);
            let out = output(&mut c);
            assert!(out.status.success(), "{path:?} {flag}: {}", stderr(&out));
            assert_no_canary(&out, &canaries, &format!("{path:?} {flag}"));
            // The variable names are still listed.
            if flag == "--help" {
                // Help text wraps at any space, also inside `[env: NAME]`.
                let text = stdout(&out)
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ");
                for e in envs {
                    assert!(
                        text.contains(&format!("[env: {e}]")),
                        "{path:?}: {e} not named in --help"
                    );
                }
            }
        }
    }
}

#[test]
fn usage_errors_never_show_an_environment_value() {
    for (path, _) in all_commands() {
        for extra in [&["--bogus"][..], &["--batch-size", "x"], &[]] {
            let mut c = bin();
            let canaries = with_every_env_canary(&mut c);
            c.args(&path).args(extra);
            let out = output(&mut c);
            let what = format!("{path:?} {extra:?}");
            assert_no_canary(&out, &canaries, &what);
            // The bad arguments are refused as usage errors, said on stderr (so the check above
            // read the error message, not an empty output); without them each command fails on
            // the canary values (no database there), also saying why.
            if extra.is_empty() {
                assert_ne!(out.status.code(), Some(0), "{what}: {}", stderr(&out));
            } else {
                // The canaries switch on `stats --check` too (its variable is a flag): a Nagios
                // check's usage error is UNKNOWN, 3.
                let usage = if path == ["stats"] { 3 } else { 2 };
                assert_eq!(out.status.code(), Some(usage), "{what}: {}", stderr(&out));
                assert!(
                    stderr(&out).starts_with("error: "),
                    "{what}: {}",
                    stderr(&out)
                );
            }
            assert!(!stderr(&out).trim().is_empty(), "{what}: no error printed");
        }
    }
}

#[test]
fn a_bad_value_of_a_secret_carrying_variable_is_not_echoed() {
    let out = output(
        bin()
            .args(["relay", "--once", "--sink", "http://127.0.0.1:1/"])
            .env("DATABASE_URL", base_url())
            .env("OUTBOXCTL_HTTP_HEADERS", "Authorization Bearer tok123"),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--http-header"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("tok123"), "{}", stderr(&out));
    let out = output(
        bin()
            .args(["relay", "--once"])
            .env("DATABASE_URL", base_url())
            .env(
                "OUTBOXCTL_SINK",
                "amqp://guest:sinkPW123@127.0.0.1:notaport/",
            ),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(!stderr(&out).contains("sinkPW123"), "{}", stderr(&out));
}

#[test]
fn usage_lines_do_not_show_environment_values_as_arguments() {
    let out = output(
        bin()
            .arg("publish")
            .env("DATABASE_URL", base_url())
            .env("OUTBOXCTL_EVENT_TYPE", "order.placed"),
    );
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    let usage = err
        .lines()
        .find(|l| l.starts_with("Usage: "))
        .unwrap_or_else(|| panic!("no usage line: {err}"));
    assert!(!usage.contains("--database-url"), "{usage}");
    assert!(!usage.contains("--event-type"), "{usage}");
    assert!(usage.contains("--aggregate-type"), "{usage}");
}

#[test]
fn an_invalid_environment_value_names_the_variable() {
    for (var, value, args) in [
        ("OUTBOXCTL_BATCH_SIZE", "abc", &["relay", "--once"][..]),
        ("OUTBOXCTL_LEASE", "soon", &["relay", "--once"]),
        ("OUTBOXCTL_CONNECT_TIMEOUT", "0s", &["stats"]),
        ("OUTBOXCTL_STATS_BY", "colour", &["stats"]),
        (
            "OUTBOXCTL_EVENTS_STATE",
            "ready,colour",
            &["events", "list"],
        ),
        ("OUTBOXCTL_FILTER_SINCE", "colour", &["dead", "list"]),
    ] {
        let out = output(bin().args(args).env(var, value));
        assert_eq!(out.status.code(), Some(2), "{var}: {}", stderr(&out));
        assert!(stderr(&out).contains(var), "{var}: {}", stderr(&out));
        assert!(!stderr(&out).contains("colour"), "{var}: {}", stderr(&out));
    }
    // A flag on the command line is not blamed on the environment.
    let out = output(
        bin()
            .args(["relay", "--once", "--batch-size", "abc"])
            .env("OUTBOXCTL_BATCH_SIZE", "7"),
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        !stderr(&out).contains("OUTBOXCTL_BATCH_SIZE"),
        "{}",
        stderr(&out)
    );
}

#[tokio::test]
async fn an_empty_environment_variable_means_unset() {
    let db = TestDb::new().await;
    // Empty OUTBOXCTL_SCHEMA is the default `public` (named by the error if it has no outbox).
    let out = output(
        db.cmd()
            .args(["stats", "--json"])
            .env("OUTBOXCTL_SCHEMA", ""),
    );
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        text.contains("\"schema\": \"public\"") || text.contains("schema `public`"),
        "{text}"
    );
    // Empty numbers and durations take their defaults.
    let out = output(
        db.cmd()
            .args(["relay", "--once", "--sink", "null"])
            .env("OUTBOXCTL_BATCH_SIZE", "")
            .env("OUTBOXCTL_LEASE", "")
            .env("OUTBOXCTL_CONNECT_TIMEOUT", "")
            .env("OUTBOXCTL_VERBOSE", "")
            .env("OUTBOXCTL_MODE", ""),
    );
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The schema a command used, from the error a schema without an outbox gives.
fn schema_used(out: &Output) -> String {
    let err = stderr(out);
    let start = err
        .find("no outbox table in schema `")
        .unwrap_or_else(|| panic!("unexpected: {err}"))
        + "no outbox table in schema `".len();
    err[start..].split('`').next().unwrap().to_owned()
}

#[tokio::test]
async fn shared_flags_before_the_subcommand_and_their_precedence() {
    let db = TestDb::new().await;
    // Before the subcommand: all four shared flags.
    let out = output(bin().args([
        "--database-url",
        &base_url(),
        "--schema",
        &db.schema,
        "--connect-timeout",
        "5s",
        "--json",
        "stats",
    ]));
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["schema"], db.schema.as_str());
    // Nested subcommands too.
    let out = output(
        bin()
            .args(["--schema", &db.schema, "--json", "events", "list"])
            .env("DATABASE_URL", base_url()),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).starts_with('{'), "{}", stdout(&out));

    // after > before > env > default
    let case = |env: Option<&str>, before: Option<&str>, after: Option<&str>| {
        let mut c = bin();
        c.env("DATABASE_URL", base_url());
        if let Some(e) = env {
            c.env("OUTBOXCTL_SCHEMA", e);
        }
        if let Some(b) = before {
            c.args(["--schema", b]);
        }
        c.arg("stats");
        if let Some(a) = after {
            c.args(["--schema", a]);
        }
        output(&mut c)
    };
    let p = std::process::id();
    let (e, b, a) = (
        format!("nosuch_env_{p}"),
        format!("nosuch_before_{p}"),
        format!("nosuch_after_{p}"),
    );
    assert_eq!(schema_used(&case(Some(&e), Some(&b), Some(&a))), a);
    assert_eq!(schema_used(&case(None, Some(&b), Some(&a))), a);
    assert_eq!(schema_used(&case(Some(&e), Some(&b), None)), b);
    assert_eq!(schema_used(&case(Some(&e), None, None)), e);
    let out = case(None, None, None);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("public"), "{text}");
    // A flag before is validated like one after.
    let out = case(None, Some("Bad-Name"), None);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with("error: invalid --schema"),
        "{}",
        stderr(&out)
    );

    // --json before beats OUTBOXCTL_JSON=0.
    let out = output(
        db.cmd()
            .args(["--json", "stats"])
            .env("OUTBOXCTL_JSON", "0"),
    );
    assert!(stdout(&out).starts_with('{'), "{}", stdout(&out));

    // A shared flag before a command that does not take it is refused.
    for args in [
        &["--json", "demo"][..],
        &["--schema", "x", "completions", "bash"],
    ] {
        let out = output(bin().args(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
}

#[test]
fn delays_and_times_are_bounded() {
    let publish = [
        "publish",
        "--event-type",
        "a",
        "--aggregate-type",
        "b",
        "--aggregate-id",
        "c",
        "--payload",
        "{}",
    ];
    for extra in [
        &["--delay", "11years"][..],
        &["--delay", "100000000y"],
        &["--at", "2999-01-01T00:00:00Z"],
    ] {
        let out = output(
            bin()
                .args(publish)
                .args(extra)
                .env("DATABASE_URL", base_url()),
        );
        assert_eq!(out.status.code(), Some(2), "{extra:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("10 years"),
            "{extra:?}: {}",
            stderr(&out)
        );
    }
    for args in [
        &["requeue", "--all", "--delay", "11y"][..],
        &["events", "reschedule", "1", "--delay", "11y"],
        &["events", "reschedule", "1", "--at", "2999-01-01T00:00:00Z"],
        &["dead", "list", "--since", "20000y"],
    ] {
        let out = output(bin().args(args));
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains("10 years"),
            "{args:?}: {}",
            stderr(&out)
        );
    }
}

#[tokio::test]
async fn a_date_alone_is_midnight_utc() {
    let db = TestDb::with_backlog(3).await;
    db.exec("UPDATE outbox SET created_at = '2026-11-30T23:59:59Z' WHERE idempotency_key = 'k-1'")
        .await;
    db.exec("UPDATE outbox SET created_at = '2026-12-01T00:00:00Z' WHERE idempotency_key <> 'k-1'")
        .await;
    let out = output(
        db.cmd()
            .args(["events", "list", "--since", "2026-12-01", "--json"]),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["count"], 2, "{v}");
    let out = output(
        db.cmd()
            .args(["events", "list", "--until", "2026-12-01", "--json"]),
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["count"], 1, "{v}");
}

#[tokio::test]
async fn quiet_commands_print_no_summary() {
    let db = TestDb::with_backlog(2).await;
    let cases: Vec<Vec<&str>> = vec![
        vec!["migrate"],
        vec![
            "publish",
            "--event-type",
            "a",
            "--aggregate-type",
            "b",
            "--aggregate-id",
            "c",
            "--payload",
            "{}",
        ],
        vec!["relay", "--once", "--sink", "null"],
        vec!["replay", "--all", "--sink", "null", "--yes"],
        vec!["requeue", "--all"],
        vec!["dead", "discard", "--all", "--yes"],
        vec!["prune", "--older-than", "1d"],
    ];
    for args in cases {
        for q in ["-q", "--quiet"] {
            let out = output(db.cmd().arg(q).args(&args));
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
            assert_eq!(stdout(&out), "", "{q} {args:?}");
            assert_eq!(stderr(&out), "", "{q} {args:?}");
        }
    }
    // `events cancel` (the last command needing a pending row) and `dead export`.
    let id: i64 = db
        .scalar(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
             VALUES ('00000000-0000-0000-0000-000000000001', 'o', '1', 'a', '{}', 'quiet') RETURNING id",
        )
        .await;
    let id = id.to_string();
    for args in [
        vec!["events", "reschedule", &id, "--delay", "0s"],
        vec!["events", "cancel", "--dry-run", &id],
        vec!["events", "cancel", &id, "--yes"],
        vec!["dead", "export"],
    ] {
        let out = output(db.cmd().arg("-q").args(&args));
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{args:?}");
        assert_eq!(stderr(&out), "", "{args:?}");
    }
    let n: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(
        n, 4,
        "quiet publishes still insert, quiet cancels still delete"
    );
    let published = db.count("published_at IS NOT NULL").await;
    assert_eq!(published, 4, "quiet relays still relay");
    // Data is still printed when asked for.
    let out = output(db.cmd().args(["-q", "stats", "--json"]));
    assert!(stdout(&out).starts_with('{'));
}

#[test]
fn version_shows_the_commit_and_build_date() {
    let out = output(bin().arg("--version"));
    assert!(out.status.success());
    let v = stdout(&out);
    let head = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
    let commit = head.as_deref().unwrap_or("unknown");
    let prefix = format!("outboxctl {} (commit {commit}", env!("CARGO_PKG_VERSION"));
    assert!(v.starts_with(&prefix), "{v:?} should start with {prefix:?}");
    let date = v.split("built ").nth(1).unwrap_or_default();
    assert!(
        chrono::NaiveDate::parse_from_str(&date[..10.min(date.len())], "%Y-%m-%d").is_ok(),
        "{v:?}"
    );
    // Subcommands say the same.
    let out = output(bin().args(["relay", "--version"]));
    assert_eq!(
        stdout(&out),
        v.replacen("outboxctl ", "outboxctl-relay ", 1)
    );
}

#[test]
fn each_cause_of_an_error_is_printed_once() {
    let out = output(
        bin()
            .arg("stats")
            .env("DATABASE_URL", format!("{}?sslmode=bogus", base_url())),
    );
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.matches("error with configuration").count(), 1, "{err}");
    assert!(err.contains("unknown value \"bogus\""), "{err}");
}

/// A sink option given with a sink it does not apply to is a usage error, refused before any
/// sink is built or any row claimed.
#[test]
fn sink_options_for_another_sink_are_refused() {
    for (flag, value, sink, want) in [
        (
            "--http-header",
            "X-A: b",
            "null",
            "--http-header only applies to an http(s):// --sink",
        ),
        (
            "--http-header",
            "X-A: b",
            "kafka://127.0.0.1:1?topic=t",
            "--http-header only applies",
        ),
        (
            "--kafka-property",
            "linger.ms=1",
            "https://127.0.0.1:1/",
            "--kafka-property only applies to a kafka:// --sink",
        ),
        (
            "--kafka-property",
            "linger.ms=1",
            "nats://127.0.0.1:1",
            "--kafka-property only applies",
        ),
    ] {
        let out = output(
            bin()
                .args(["relay", "--once", "--sink", sink, flag, value])
                .env("DATABASE_URL", base_url()),
        );
        assert_eq!(
            out.status.code(),
            Some(2),
            "{flag} {sink}: {}",
            stderr(&out)
        );
        assert!(
            stderr(&out).contains(want),
            "{flag} {sink}: {}",
            stderr(&out)
        );
    }
}
