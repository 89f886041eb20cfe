//! `outboxctl top` in a real pseudo-terminal (tmux): the figures of known rows on screen, a relay
//! listed with its mode while it drains them, `q` quitting with exit 0 and the terminal restored
//! (alternate screen left, raw mode off, cursor shown), the same after a panic, the view staying
//! up while its database is away; the refusal without a terminal; the relays' sessions as
//! `pg_stat_activity` shows them; and EXPLAIN-backed proof that no statement of `top` scans
//! published history.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use crate::support::plans::{explain_custom_and_generic, plan_nodes};
use crate::support::{stderr, wait_until, TestDb};

/// A tmux server of the test's own (its own socket, so nothing else's sessions are touched),
/// running one 120x40 window. Killed on drop.
struct Tmux {
    socket: String,
    _dir: tempfile::TempDir,
}

impl Tmux {
    /// Runs `script` (sh) in a new 120x40 window. The script's last line should keep the pane
    /// open (`exec sleep`), so the screen after the program's exit can be read.
    fn start(script: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run.sh");
        std::fs::write(&path, script).unwrap();
        let socket = format!("outboxctl-it-{}", uuid::Uuid::new_v4().simple());
        let t = Self { socket, _dir: dir };
        let out = t
            .tmux()
            .args(["new-session", "-d", "-x", "120", "-y", "40", "sh"])
            .arg(&path)
            .output()
            .expect("tmux (apt-get install tmux)");
        assert!(out.status.success(), "tmux: {}", stderr(&out));
        t
    }

    fn tmux(&self) -> Command {
        let mut c = Command::new("tmux");
        c.args(["-L", &self.socket]);
        c
    }

    /// The pane's text now.
    fn screen(&self) -> String {
        let out = self.tmux().args(["capture-pane", "-p"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A tmux format of the pane, e.g. `#{alternate_on}`.
    fn format(&self, f: &str) -> String {
        let out = self.tmux().args(["display", "-p", f]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    fn keys(&self, keys: &str) {
        let out = self.tmux().args(["send-keys", keys]).output().unwrap();
        assert!(out.status.success(), "send-keys: {}", stderr(&out));
    }

    /// Waits until the screen holds every one of `want`; returns it.
    async fn wait_for(&self, want: &[&str]) -> String {
        let what = format!("{want:?} on screen");
        let mut last = String::new();
        let found = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                last = self.screen();
                if want.iter().all(|w| last.contains(w)) {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await;
        assert!(found.is_ok(), "timed out waiting for {what}:\n{last}");
        last
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        let _ = self.tmux().arg("kill-server").output();
    }
}

fn outboxctl() -> PathBuf {
    assert_cmd::cargo::cargo_bin("outboxctl")
}

/// The script that runs `top` against `db` with `args` in the pane, then says how it exited and
/// whether the terminal is back in canonical mode, and keeps the pane open.
fn top_script(db: &TestDb, args: &str, env: &str) -> String {
    format!(
        "unset $(env | sed -n 's/^\\(OUTBOXCTL_[A-Z_]*\\|PG[A-Z]*\\)=.*/\\1/p')\n\
         export DATABASE_URL='{url}' OUTBOXCTL_SCHEMA='{schema}' {env}\n\
         '{bin}' top {args}\n\
         echo \"top exited $?\"\n\
         stty -a | tr ' ;' '\\n\\n' | grep -x -- '-\\?icanon' | sed 's/^/tty /'\n\
         exec sleep 600\n",
        url = db.url,
        schema = db.schema,
        bin = outboxctl().display(),
    )
}

/// Known rows: 7 ready, 3 scheduled, 2 dead letters (one error with an escape sequence and a
/// line break), 40 published within the last 20 seconds.
async fn known_rows(db: &TestDb) {
    db.seed_ready(7).await;
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key, available_at)
         SELECT '00000000-0000-0000-0000-000000000001', 'invoice', 'i-' || g, 'invoice.sent',
                '{}', 's-' || g, now() + interval '1 hour'
           FROM generate_series(1, 3) g;
         INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key, dead_lettered_at, attempt_count, last_error)
         VALUES ('00000000-0000-0000-0000-000000000001', 'order', 'o-d1', 'order.shipped', '{}',
                 'd-1', now() - interval '2 minutes', 10, E'HTTP 503\\n\\x1b[2Jgone'),
                ('00000000-0000-0000-0000-000000000001', 'order', 'o-d2', 'order.refunded', '{}',
                 'd-2', now() - interval '5 minutes', 10, 'timeout');
         INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                             idempotency_key, published_at)
         SELECT '00000000-0000-0000-0000-000000000001', 'order', 'p-' || g, 'order.placed', '{}',
                'p-' || g, now() - (g % 20) * interval '1 second'
           FROM generate_series(1, 40) g",
    )
    .await;
}

/// After `top` quit: it said exit `code`, the alternate screen is left (nothing of the view on
/// the normal screen), the terminal is out of raw mode and the cursor shows.
fn assert_restored(t: &Tmux, screen: &str, code: i32) {
    assert!(
        screen.contains(&format!("top exited {code}")),
        "not exit {code}:\n{screen}"
    );
    assert_eq!(t.format("#{alternate_on}"), "0", "{screen}");
    assert_eq!(t.format("#{cursor_flag}"), "1", "cursor hidden:\n{screen}");
    assert!(screen.contains("tty icanon"), "raw mode left on:\n{screen}");
    assert!(
        !screen.contains("Backlog"),
        "the view is left behind:\n{screen}"
    );
}

#[tokio::test]
async fn top_in_a_terminal_shows_the_figures_lists_a_relay_and_quits_on_q() {
    let db = TestDb::new().await;
    known_rows(&db).await;
    let t = Tmux::start(&top_script(&db, "--interval 200ms --by aggregate-type", ""));
    let screen = t
        .wait_for(&["ready 7", "Newest dead letters (2 in all)"])
        .await;
    for want in [
        "scheduled 3",
        "retrying 0",
        "in flight 0",
        "dead 2",
        "Top aggregate types by backlog",
        "invoice",
        "Relays connected (",
        "order.refunded",
    ] {
        assert!(screen.contains(want), "no `{want}` in\n{screen}");
    }
    // The newest dead letter first, its error's control characters escaped.
    let dead: Vec<&str> = screen
        .lines()
        .skip_while(|l| !l.contains("Newest dead letters"))
        .skip(2)
        .take(2)
        .collect();
    assert!(dead[0].contains("order.shipped"), "{dead:?}");
    assert!(dead[0].contains(r"HTTP 503\n\u{1b}[2Jgone"), "{dead:?}");
    assert!(dead[1].contains("order.refunded") && dead[1].contains("timeout"));
    assert_eq!(t.format("#{alternate_on}"), "1", "{screen}");
    // The throughput of the 40 publishes: some bars, a peak above zero.
    let spark = screen
        .lines()
        .skip_while(|l| !l.contains("Throughput: "))
        .take(4)
        .collect::<Vec<_>>()
        .join("\n");
    assert!(!spark.contains("peak 0/s"), "{spark}");
    assert!("▁▂▃▄▅▆▇█".chars().any(|c| spark.contains(c)), "{spark}");

    // A relay drains the ready rows: it is listed with its mode, kind, process id and schema.
    let dir = tempfile::tempdir().unwrap();
    let mut relay = crate::support::spawn_relay(&db, "lease", &dir.path().join("out.jsonl"));
    let pid = relay.id().to_string();
    // Relays of other tests' schemas may be listed beside it: this one is found by its pid.
    let screen = t.wait_for(&[pid.as_str(), "ready 0 "]).await;
    let row = screen
        .lines()
        .find(|l| l.contains("lease daemon"))
        .unwrap_or_else(|| panic!("no relay row in\n{screen}"));
    assert!(row.contains(&pid), "{row}");
    assert!(row.contains(&db.schema), "{row}");
    relay.kill().unwrap();
    relay.wait().unwrap();

    t.keys("q");
    let screen = t.wait_for(&["top exited", "tty "]).await;
    assert_restored(&t, &screen, 0);
}

#[tokio::test]
async fn ctrl_c_quits_with_exit_0_and_a_panic_still_restores_the_terminal() {
    let db = TestDb::new().await;
    known_rows(&db).await;
    let t = Tmux::start(&top_script(&db, "", ""));
    t.wait_for(&["ready 7"]).await;
    t.keys("C-c");
    let screen = t.wait_for(&["top exited", "tty "]).await;
    assert_restored(&t, &screen, 0);

    let t = Tmux::start(&top_script(
        &db,
        "",
        "OUTBOXCTL_TEST_TOP_PANIC=1 RUST_BACKTRACE=0",
    ));
    let screen = t.wait_for(&["top exited", "tty "]).await;
    assert_restored(&t, &screen, 101);
    // The panic message is printed after the terminal is restored, on the normal screen.
    assert!(screen.contains("OUTBOXCTL_TEST_TOP_PANIC"), "{screen}");
}

/// The database stopped under the view: the view says so and keeps the last figures, retries,
/// and recovers by itself when the server is back; `q` still quits with exit 0.
#[tokio::test]
async fn the_view_stays_up_while_the_database_is_away() {
    let cluster = crate::support::servers::PgCluster::start("outboxctl_top_down", 18471);
    let db = TestDb::new_at(&cluster.url()).await;
    db.seed_ready(5).await;
    let t = Tmux::start(&top_script(
        &db,
        "--interval 200ms --connect-timeout 2s",
        "",
    ));
    t.wait_for(&["ready 5"]).await;
    db.pool.close().await;
    cluster.stop();
    let screen = t.wait_for(&["database error, retrying every 200ms"]).await;
    assert!(
        screen.contains("ready 5"),
        "the last figures stay:\n{screen}"
    );
    cluster.start_again();
    wait_until(Duration::from_secs(30), "the error cleared", || async {
        !t.screen().contains("database error")
    })
    .await;
    t.keys("q");
    let screen = t.wait_for(&["top exited", "tty "]).await;
    assert_restored(&t, &screen, 0);
}

#[tokio::test]
async fn without_a_terminal_top_refuses_with_exit_2_and_points_at_stats_json() {
    let db = TestDb::new().await;
    let out = db
        .cmd()
        .arg("top")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: "), "{err}");
    assert!(err.contains("outboxctl stats --json"), "{err}");
    assert!(out.stdout.is_empty());
}

/// Each relay process shows once in `top`'s relays, named by its sessions: mode, daemon or
/// `--once`, its process id and schema; a daemon also by its LISTEN on this schema's channel.
#[tokio::test]
async fn a_relay_daemon_is_listed_with_its_mode_pid_and_schema() {
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mut relay = crate::support::spawn_relay(&db, "tx", &dir.path().join("out.jsonl"));
    let channel = format!("outboxctl:{}", db.schema);
    let pid = relay.id();
    let mine = || async {
        let mut c = db.pool.acquire().await.unwrap();
        outboxctl::db::top::relays(&mut c, &channel)
            .await
            .unwrap()
            .into_iter()
            .filter(|r| {
                outboxctl::db::top::RelayName::parse(&r.application_name).map(|n| n.pid)
                    == Some(pid)
            })
            .collect::<Vec<_>>()
    };
    wait_until(Duration::from_secs(30), "the relay listens", || async {
        mine().await.first().is_some_and(|r| r.listens)
    })
    .await;
    let rows = mine().await;
    assert_eq!(rows.len(), 1, "one row per relay process: {rows:?}");
    let name = outboxctl::db::top::RelayName::parse(&rows[0].application_name).unwrap();
    assert_eq!(
        (name.mode.as_str(), name.kind.as_str(), name.schema.as_str()),
        ("tx", "daemon", db.schema.as_str())
    );
    assert!(rows[0].connections >= 1 && rows[0].last_activity.is_some());
    assert_eq!(rows[0].client_addr.as_deref(), Some("127.0.0.1"));
    relay.kill().unwrap();
    relay.wait().unwrap();
}

#[tokio::test]
async fn no_statement_of_top_scans_published_history() {
    let db = TestDb::new().await;
    // A long published history (30 days, 20k rows), a small backlog, a few dead letters, one of
    // them blocking its ordered key.
    db.seed_published_history(20000).await;
    db.seed_ready(50).await;
    db.exec(
        "UPDATE outbox SET dead_lettered_at = now(), attempt_count = 10
          WHERE idempotency_key IN ('k-1', 'k-2', 'k-3');
         UPDATE outbox SET blocks_key = true WHERE idempotency_key = 'k-1'",
    )
    .await;
    db.exec("VACUUM ANALYZE outbox").await;
    let mut conn = db.pool.acquire().await.unwrap();
    let mut statements: Vec<(&str, &str, &str)> = outboxctl::db::top::statements().to_vec();
    statements.push((
        "blocked_keys",
        outboxctl::db::ordering::BLOCKED_KEYS.as_str(),
        "(20)",
    ));
    let mut failures = Vec::new();
    for (name, sql, args) in statements {
        for (mode, plan) in explain_custom_and_generic(&mut conn, name, sql, args).await {
            let nodes = plan_nodes(&plan[0]["Plan"]);
            let seq = nodes
                .iter()
                .any(|n| n["Node Type"] == "Seq Scan" && n["Relation Name"] == "outbox");
            let indexes: BTreeSet<&str> = nodes
                .iter()
                .filter_map(|n| n["Index Name"].as_str())
                .collect();
            let relations: BTreeSet<&str> = nodes
                .iter()
                .filter_map(|n| n["Relation Name"].as_str())
                .collect();
            let ok = match name {
                // No table at all: the view of the server's shared memory.
                "relays" => !relations.contains("outbox"),
                // A range of the index from $2 on (an index condition, not a filter over every
                // entry: the partial index holds the whole published history).
                "published_buckets" => {
                    indexes == BTreeSet::from(["outbox_published_at_idx"])
                        && nodes.iter().any(|n| {
                            n["Index Name"] == "outbox_published_at_idx"
                                && n["Index Cond"]
                                    .as_str()
                                    .is_some_and(|c| c.contains("published_at >="))
                        })
                }
                // The index's first entries, in its order: no sort of every dead letter.
                "newest_dead" => {
                    indexes == BTreeSet::from(["outbox_dead_idx"])
                        && plan[0]["Plan"]["Node Type"] == "Limit"
                        && !nodes.iter().any(|n| n["Node Type"] == "Sort")
                }
                // The blocking heads, then each key's pending rows (either pending index).
                "blocked_keys" => {
                    indexes.contains("outbox_blocking_idx")
                        && indexes.iter().all(|i| {
                            [
                                "outbox_blocking_idx",
                                "outbox_key_pending_idx",
                                "outbox_ready_idx",
                            ]
                            .contains(i)
                        })
                }
                other => panic!("a new top statement `{other}`: add its index here"),
            };
            if seq || !ok {
                failures.push(format!(
                    "{name} ({mode}): indexes {indexes:?}, seq scan {seq}\n{plan:#}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
