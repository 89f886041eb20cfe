//! Output streams a reader closed early (real pipes), signals to the demo, and table widths:
//! no panic, the documented exit codes, the demo's scratch schema always dropped, and numbers
//! and ids that never wrap.

use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use crate::support::{base_url, bin, signal, stderr, stdout, wait_until, TestDb};

/// Runs `cmd` with stderr (and, if `both`, stdout) on a real pipe whose reader is already gone.
fn with_closed_stderr(mut cmd: Command, both: bool) -> Output {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    if both {
        cmd.stdout(writer.try_clone().unwrap());
    } else {
        cmd.stdout(Stdio::piped());
    }
    cmd.stdin(Stdio::null()).stderr(writer).output().unwrap()
}

fn assert_not_a_panic(out: &Output, want: i32, what: &str) {
    assert_ne!(out.status.code(), Some(101), "{what}: panicked");
    assert_eq!(out.status.code(), Some(want), "{what}");
}

#[tokio::test]
async fn a_closed_stderr_is_no_panic_and_keeps_the_exit_code() {
    let db = TestDb::with_backlog(3).await;
    let p = std::process::id();
    let nosuch = format!("nosuch_{p}");
    let cases: Vec<(Vec<&str>, i32)> = vec![
        (vec!["stats", "--schema", &nosuch], 1),
        (vec!["stats", "--bogus"], 2),
        (vec!["stats", "--schema", "Bad"], 2),
        (vec!["relay", "--once", "--sink", "null", "-vvv"], 0),
        (vec!["relay", "--once", "--sink", "stdout", "-vv"], 0),
        (vec!["events", "list", "--limit", "1"], 0),
        (vec!["dead", "export"], 0),
        (vec!["migrate", "-vvv"], 0),
    ];
    for (args, want) in cases {
        for both in [false, true] {
            let out = with_closed_stderr(
                {
                    let mut c = db.cmd();
                    c.args(&args);
                    c
                },
                both,
            );
            assert_not_a_panic(&out, want, &format!("{args:?} (stdout closed too: {both})"));
        }
    }
    // `stats --schema nosuch 2>&1 | true` in a real shell pipeline.
    let out = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "'{}' stats --schema {nosuch} 2>&1 | true; echo \"rc=${{PIPESTATUS[0]}}\"",
            assert_cmd::cargo::cargo_bin("outboxctl").display()
        ))
        .env("DATABASE_URL", base_url())
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "rc=1\n", "{}", stderr(&out));
}

async fn demo_schema_exists(db: &TestDb, pid: u32) -> bool {
    db.scalar::<bool>(&format!(
        "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = 'outboxctl_demo_{pid}')"
    ))
    .await
}

#[tokio::test]
async fn the_demo_drops_its_schema_when_its_output_closes_early() {
    let db = TestDb::unmigrated().await; // a pool to look with
                                         // `outboxctl demo 2>&1 | head -2`
    let (reader, writer) = std::io::pipe().unwrap();
    let mut child = bin()
        .arg("demo")
        .env("DATABASE_URL", base_url())
        .stdin(Stdio::null())
        .stdout(writer.try_clone().unwrap())
        .stderr(writer)
        .spawn()
        .unwrap();
    let pid = child.id();
    let mut lines = BufReader::new(reader).lines();
    for _ in 0..2 {
        lines.next().expect("a line").unwrap();
    }
    drop(lines);
    let status = child.wait().unwrap();
    assert_ne!(status.code(), Some(101), "panicked");
    assert_eq!(status.code(), Some(0), "a closed output is a normal exit");
    assert!(
        !demo_schema_exists(&db, pid).await,
        "scratch schema left behind"
    );
}

#[tokio::test]
async fn the_demo_drops_its_schema_on_sigint() {
    let db = TestDb::unmigrated().await;
    let mut child = bin()
        .arg("demo")
        .env("DATABASE_URL", base_url())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let err = crate::support::capture(child.stderr.take().unwrap());
    // Interrupt while it waits for the delayed event (the schema exists and holds events).
    wait_until(
        Duration::from_secs(60),
        "the demo waiting for its delayed event",
        || {
            let e = err.clone();
            async move { e.lock().unwrap().contains("waiting for the delayed event") }
        },
    )
    .await;
    assert!(demo_schema_exists(&db, pid).await);
    signal(&child, "INT");
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(130), "{}", err.lock().unwrap());
    assert!(
        !demo_schema_exists(&db, pid).await,
        "scratch schema left behind"
    );
}

/// The body lines of a rendered table.
fn table_lines(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.starts_with('│')).collect()
}

#[tokio::test]
async fn numbers_and_ids_never_wrap() {
    let db = TestDb::new().await;
    db.exec("SELECT setval('outbox_id_seq', 6859900)").await;
    db.seed_ready(12345).await;
    for cols in ["20", "40", "60"] {
        let out = db
            .cmd()
            .args(["stats"])
            .env("COLUMNS", cols)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let text = stdout(&out);
        assert!(
            table_lines(&text).iter().any(|l| l.contains(" 12345 ")),
            "COLUMNS={cols}: the ready count wrapped:\n{text}"
        );
        let out = db
            .cmd()
            .args(["events", "list", "--limit", "2"])
            .env("COLUMNS", cols)
            .output()
            .unwrap();
        let text = stdout(&out);
        assert!(
            table_lines(&text).iter().any(|l| l.contains(" 6872245 ")),
            "COLUMNS={cols}: the id wrapped:\n{text}"
        );
    }
}

#[tokio::test]
async fn a_terminal_of_unknown_size_does_not_squeeze_tables() {
    let db = TestDb::with_backlog(12345).await;
    // `script` gives the command a pty; with no terminal of its own that pty is 0x0.
    let bin_path = assert_cmd::cargo::cargo_bin("outboxctl");
    for columns in [None, Some("0"), Some("")] {
        let mut c = Command::new("script");
        c.args([
            "-qec",
            &format!("'{}' stats", bin_path.display()),
            "/dev/null",
        ])
        .env("DATABASE_URL", base_url())
        .env("OUTBOXCTL_SCHEMA", &db.schema)
        .env("NO_COLOR", "1")
        .env_remove("COLUMNS")
        .stdin(Stdio::null());
        if let Some(v) = columns {
            c.env("COLUMNS", v);
        }
        let out = c.output().unwrap();
        let text = stdout(&out);
        assert!(
            text.contains("ready") && text.contains(" 12345 "),
            "COLUMNS={columns:?}:\n{text}"
        );
    }
}
