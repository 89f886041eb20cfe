//! stdout and file sinks whose consumer goes away, fills up or stops reading: an event that was not
//! taken by its consumer is never charged an attempt (issue 8, items 1 and 6).

use std::io::BufRead;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use crate::support::servers::Tmpfs;
use crate::support::{stderr, wait_until, TestDb};

/// Rows that any relay touched: an attempt counted, an error stored, or marked.
async fn touched(db: &TestDb) -> i64 {
    db.scalar(
        "SELECT count(*) FROM outbox
          WHERE attempt_count > 0 OR last_error IS NOT NULL OR published_at IS NOT NULL
             OR dead_lettered_at IS NOT NULL OR locked_until IS NOT NULL",
    )
    .await
}

/// Waits for a child to exit (polling, no fixed sleep) and returns its exit code.
async fn exit_code(child: &mut Child, within: Duration) -> Option<i32> {
    let mut status = None;
    wait_until(within, "the relay exits", || {
        status = child.try_wait().unwrap();
        let done = status.is_some();
        async move { done }
    })
    .await;
    status.unwrap().code()
}

/// `cmd | head -2`: the relay (still running or done) and what head printed before it exited.
fn into_head_2(mut cmd: std::process::Command) -> (std::process::Child, std::process::Output) {
    let mut relay = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let head = std::process::Command::new("head")
        .arg("-2")
        .stdin(relay.stdout.take().unwrap())
        .output()
        .unwrap();
    (relay, head)
}

#[tokio::test]
async fn once_into_head_gives_the_batch_back_untouched_and_exits_0() {
    // Depth 2: the batch claimed beside the one cut off (two claims at once) is given back too.
    for (mode, depth) in [("tx", "1"), ("lease", "1"), ("tx", "2"), ("lease", "2")] {
        let mode_depth = format!("{mode} --pipeline-depth {depth}");
        let mode = mode_depth.as_str();
        let db = TestDb::with_backlog(5000).await;
        let mut cmd = db.cmd();
        cmd.args(["relay", "--once", "--sink", "stdout", "--mode"])
            .args(mode.split(' '));
        let (relay, head) = into_head_2(cmd);
        let out = relay.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        let lines: Vec<&str> = std::str::from_utf8(&head.stdout).unwrap().lines().collect();
        assert_eq!(lines.len(), 2, "{mode}");
        for l in lines {
            let v: serde_json::Value = serde_json::from_str(l).expect("a full JSON line");
            assert!(v["id"].is_i64());
        }
        assert_eq!(
            touched(&db).await,
            0,
            "{mode}: a closed stdout charges nothing"
        );
        assert!(
            stderr(&out).contains("relayed to stdout"),
            "{mode}: the summary is printed: {}",
            stderr(&out)
        );
    }
}

#[tokio::test]
async fn log_mode_into_head_leaves_the_position_and_sends_everything_later() {
    // Log mode keeps two pages in flight by default, stdout too: both are given back.
    let db = TestDb::new().await;
    crate::support::run(&db, &["log", "enable"], 0);
    db.seed_ready(5000).await;
    let mut cmd = db.cmd();
    cmd.args(["relay", "--once", "--sink", "stdout", "--batch-size", "500"]);
    let (relay, head) = into_head_2(cmd);
    let out = relay.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(head.stdout.iter().filter(|b| **b == b'\n').count(), 2);
    let status = crate::support::run_json(&db, &["log", "status", "--json"]);
    assert_eq!(status["behind"], 5000, "nothing passed: {status}");
    assert_eq!(status["retrying"], 0, "{status}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("out.jsonl");
    let summary = db.relay(format!("file:{}", path.display())).once_json();
    assert_eq!(summary["published"], 5000, "{summary}");
    assert_eq!(
        crate::support::ids_in_file(&path),
        (1..=5000).collect::<Vec<i64>>(),
        "each once, in order"
    );
}

#[tokio::test]
async fn a_daemon_on_a_closed_stdout_stops_cleanly() {
    for depth in ["1", "2"] {
        let db = TestDb::with_backlog(5000).await;
        let mut cmd = db.cmd();
        cmd.args(["relay", "--sink", "stdout", "--poll-interval", "60s"])
            .args(["--pipeline-depth", depth]);
        let (mut relay, head) = into_head_2(cmd);
        assert_eq!(head.stdout.iter().filter(|b| **b == b'\n').count(), 2);
        assert_eq!(
            exit_code(&mut relay, Duration::from_secs(20)).await,
            Some(0),
            "depth {depth}"
        );
        assert_eq!(touched(&db).await, 0, "depth {depth}");
    }
}

#[tokio::test]
async fn a_full_disk_leaves_no_half_line_and_charges_nothing() {
    for mode in ["tx", "lease"] {
        let db = TestDb::with_backlog(2000).await;
        let fs = Tmpfs::mount("64k");
        let path = fs.dir.path().join("out.jsonl");
        let run = || {
            db.cmd()
                .args([
                    "relay",
                    "--once",
                    "--json",
                    "--batch-size",
                    "100",
                    "--mode",
                    mode,
                ])
                .arg("--sink")
                .arg(format!("file:{}", path.display()))
                .output()
                .unwrap()
        };
        let out = run();
        assert_eq!(out.status.code(), Some(5), "{mode}: {}", stderr(&out));
        let err = stderr(&out);
        assert!(
            err.contains("No space left on device"),
            "{mode}: the sink's error text: {err}"
        );
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.ends_with('\n'), "{mode}: no half line");
        let in_file: Vec<i64> = text
            .lines()
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["id"]
                    .as_i64()
                    .unwrap()
            })
            .collect();
        assert!(
            !in_file.is_empty() && in_file.len().is_multiple_of(100),
            "{mode}: whole batches only"
        );
        let (published, charged): (i64, i64) = db
            .row(
                "SELECT count(*) FILTER (WHERE published_at IS NOT NULL),
                        count(*) FILTER (WHERE published_at IS NULL
                                           AND (attempt_count > 0 OR last_error IS NOT NULL
                                                OR locked_until IS NOT NULL))
                   FROM outbox",
            )
            .await;
        assert_eq!(published, in_file.len() as i64, "{mode}: marked = written");
        assert_eq!(
            charged, 0,
            "{mode}: the rows that did not fit are untouched"
        );
        let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // The batch that hit the full disk, and the one claimed beside it (--pipeline-depth 2),
        // which is written after it: given back untouched, both.
        let unavailable = summary["unavailable"].as_u64().unwrap();
        let depth = u64::from(outboxctl::relay::PIPELINE_DEPTH);
        assert!(
            unavailable.is_multiple_of(100) && (100..=100 * depth).contains(&unavailable),
            "{mode}: {summary}"
        );

        // Space again: the rest is delivered, each event once.
        fs.resize("4m");
        let out = run();
        assert_eq!(out.status.code(), Some(0), "{mode}: {}", stderr(&out));
        let ids = crate::support::ids_in_file(&path);
        let unique: std::collections::HashSet<i64> = ids.iter().copied().collect();
        assert_eq!((ids.len(), unique.len()), (2000, 2000), "{mode}");
        let max_attempts: i32 = db.scalar("SELECT max(attempt_count) FROM outbox").await;
        assert_eq!(max_attempts, 1, "{mode}");
    }
}

#[tokio::test]
async fn a_consumer_slower_than_the_lease_rolls_back_and_says_so() {
    for mode in ["tx", "lease"] {
        let db = TestDb::with_backlog(5000).await;
        // A real pipe whose reader never reads (the test holds its end open).
        let mut relay = db
            .cmd()
            .args([
                "relay", "--once", "--sink", "stdout", "--lease", "2s", "--mode", mode,
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let reader = relay.stdout.take().unwrap();
        let started = Instant::now();
        let code = exit_code(&mut relay, Duration::from_secs(20)).await;
        let elapsed = started.elapsed();
        let mut err = String::new();
        for l in std::io::BufReader::new(relay.stderr.take().unwrap())
            .lines()
            .map_while(Result::ok)
        {
            err.push_str(&l);
            err.push('\n');
        }
        drop(reader);
        assert_eq!(code, Some(5), "{mode}: {err}");
        assert!(elapsed < Duration::from_secs(10), "{mode}: {elapsed:?}");
        let line = err
            .lines()
            .find(|l| l.starts_with("error:"))
            .unwrap_or_else(|| panic!("{mode}: one error line in {err}"));
        assert!(
            line.contains("reads slower than the lease allows")
                && line.contains("--publish-timeout"),
            "{mode}: {line}"
        );
        assert_eq!(
            line.contains("--mode lease"),
            mode == "tx",
            "{mode}: {line}"
        );
        assert!(!err.contains("idle-in-transaction"), "{mode}: {err}");
        assert_eq!(touched(&db).await, 0, "{mode}: rolled back / given back");
    }
}

/// `relay --sink stdout` whose stdout is /dev/null (`>/dev/null`), or closed (`>&-`, which Rust
/// reopens as /dev/null before main), would mark every event published and throw it away: it is
/// refused before anything is claimed, pointing at `--sink null`.
#[tokio::test]
async fn a_stdout_sink_into_dev_null_or_a_closed_stdout_is_refused() {
    let db = TestDb::with_backlog(5).await;
    for redirect in [">/dev/null", ">&-"] {
        for once in [true, false] {
            // The real binary with the test environment, through sh for the redirection.
            let bin = db.cmd();
            let mut sh = std::process::Command::new("sh");
            sh.arg("-c")
                .arg(format!("exec \"$0\" \"$@\" {redirect}"))
                .arg(bin.get_program())
                .args(["relay", "--sink", "stdout", "--poll-interval", "60s"])
                .args(once.then_some("--once"))
                .stdin(Stdio::null());
            for (k, v) in bin.get_envs() {
                match v {
                    Some(v) => sh.env(k, v),
                    None => sh.env_remove(k),
                };
            }
            let out = sh.output().unwrap();
            let err = stderr(&out);
            assert_eq!(out.status.code(), Some(2), "{redirect} once {once}: {err}");
            assert!(
                err.starts_with("error: --sink stdout: stdout is /dev/null")
                    && err.contains("--sink null")
                    && err.lines().count() == 1,
                "{redirect} once {once}: {err}"
            );
            assert_eq!(
                touched(&db).await,
                0,
                "{redirect} once {once}: nothing claimed"
            );
        }
    }
    // A pipe has a reader: the events go there.
    let out = db
        .cmd()
        .args(["relay", "--once", "--sink", "stdout"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(out.stdout.iter().filter(|b| **b == b'\n').count(), 5);
}

/// Inserts `n` ready events keyed `{prefix}-1`.. (the NOTIFY trigger wakes a listening relay).
async fn insert_ready(db: &TestDb, prefix: &str, n: i64) {
    db.exec(&format!(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         SELECT '00000000-0000-0000-0000-000000000001', 'order', 'o-' || g, 'order.placed',
                jsonb_build_object('n', g), '{prefix}-' || g
           FROM generate_series(1, {n}) g"
    ))
    .await;
}

/// logrotate's way, for real: rename the file the daemon appends to, then `kill -HUP` it. The
/// daemon keeps running (SIGHUP's default action killed it, exit 129, no summary), reopens the
/// path, and writes every later event to the new file: nothing lost, nothing written twice.
#[tokio::test]
async fn sighup_reopens_the_file_after_a_rotation_and_never_stops_the_relay() {
    use crate::support::{capture, ids_in_file, signal};
    let db = TestDb::new().await;
    insert_ready(&db, "a", 5).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let rotated = dir.path().join("events.jsonl.1");
    let mut relay = db
        .cmd()
        .args(["relay", "--poll-interval", "60s", "--sink"])
        .arg(format!("file:{}", path.display()))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = capture(relay.stderr.take().unwrap());
    wait_until(
        Duration::from_secs(20),
        "the first 5 events in the file",
        || async { ids_in_file(&path).len() == 5 },
    )
    .await;
    std::fs::rename(&path, &rotated).unwrap();
    signal(&relay, "HUP");
    wait_until(Duration::from_secs(10), "the reopen logged", || async {
        log.lock().unwrap().contains("SIGHUP: reopened the file")
    })
    .await;
    assert!(path.exists(), "the path is a new, empty file");
    insert_ready(&db, "b", 5).await;
    wait_until(
        Duration::from_secs(20),
        "the next 5 events in the new file",
        || async { ids_in_file(&path).len() == 5 },
    )
    .await;
    let (old, new) = (ids_in_file(&rotated), ids_in_file(&path));
    let ids: Vec<i64> = sqlx::query_scalar("SELECT id FROM outbox ORDER BY id")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        old,
        ids[..5],
        "the rotated file kept what it had, nothing more"
    );
    assert_eq!(new, ids[5..], "every later event went to the new file");
    let unpublished = db.count("published_at IS NULL").await;
    assert_eq!(unpublished, 0);
    // A second rotation with nothing new, then the usual stop: a clean exit with its summary.
    signal(&relay, "HUP");
    wait_until(
        Duration::from_secs(10),
        "the second reopen logged",
        || async {
            log.lock()
                .unwrap()
                .matches("SIGHUP: reopened the file")
                .count()
                == 2
        },
    )
    .await;
    signal(&relay, "TERM");
    assert_eq!(
        exit_code(&mut relay, Duration::from_secs(20)).await,
        Some(0)
    );
    let out = std::io::read_to_string(relay.stdout.take().unwrap()).unwrap();
    assert!(out.contains("10 published"), "{out}");
    assert_eq!(ids_in_file(&path), ids[5..], "nothing written twice");
}

/// SIGHUP to a relay whose sink has no file: logged, and the relay carries on relaying.
#[tokio::test]
async fn sighup_is_harmless_for_other_sinks() {
    use crate::support::{capture, signal};
    let db = TestDb::new().await;
    let mut relay = db
        .cmd()
        .args(["relay", "--poll-interval", "60s", "--sink", "null"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let log = capture(relay.stderr.take().unwrap());
    wait_until(Duration::from_secs(20), "the relay starts", || async {
        log.lock().unwrap().contains("relay starting")
    })
    .await;
    signal(&relay, "HUP");
    wait_until(Duration::from_secs(10), "the SIGHUP logged", || async {
        log.lock().unwrap().contains("SIGHUP: nothing to reopen")
    })
    .await;
    insert_ready(&db, "c", 3).await;
    wait_until(
        Duration::from_secs(20),
        "relayed after the SIGHUP",
        || async { db.count("published_at IS NOT NULL").await == 3 },
    )
    .await;
    signal(&relay, "TERM");
    assert_eq!(
        exit_code(&mut relay, Duration::from_secs(20)).await,
        Some(0)
    );
}
