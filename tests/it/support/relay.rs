//! The relay of the real binary pointed at a sink, and what a file sink received.
//!
//! Most relay and sink tests set up the same three things: a schema of their own, a backlog in
//! it, and the relay pointed at a sink, run once or started. [`TestDb::with_backlog`] is the
//! first two; [`TestDb::relay`] the third, a small builder in the manner of just's
//! `tests/test.rs`:
//!
//! ```ignore
//! let db = TestDb::with_backlog(25).await;
//! let summary = db.relay(&sink).mode("tx").args(["--batch-size", "10"]).once_json();
//! assert_eq!(summary["published"], 25);
//! assert_eq!(db.count("published_at IS NULL").await, 0);
//! ```

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use outboxctl::relay::Mode;
use serde_json::Value;

use super::{expect_code, stdout_json, TestDb};

impl TestDb {
    /// `outboxctl relay --sink SINK` against this schema, to be built up and run: [`RelayRun`].
    pub fn relay(&self, sink: impl AsRef<OsStr>) -> RelayRun {
        let mut cmd = self.cmd();
        cmd.arg("relay").arg("--sink").arg(sink);
        RelayRun { cmd, quiet: false }
    }
}

/// The real binary's relay, flags added one by one; then [`RelayRun::once`],
/// [`RelayRun::once_json`] or [`RelayRun::spawn`].
pub struct RelayRun {
    cmd: Command,
    quiet: bool,
}

impl RelayRun {
    /// `--mode MODE` (lease, tx or auto).
    pub fn mode(mut self, mode: &str) -> Self {
        self.cmd.args(["--mode", mode]);
        self
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        self.cmd.args(args);
        self
    }

    pub fn env(mut self, key: &str, value: impl AsRef<OsStr>) -> Self {
        self.cmd.env(key, value);
        self
    }

    /// Runs `--once`, asserting the exit code `code`; returns the output.
    pub fn once(mut self, code: i32) -> Output {
        expect_code(self.cmd.arg("--once"), code)
    }

    /// Runs `--once --json`, asserting exit 0; returns the run's summary.
    pub fn once_json(mut self) -> Value {
        stdout_json(&expect_code(self.cmd.args(["--once", "--json"]), 0))
    }

    /// [`RelayRun::once_json`] on a blocking thread, so that the test's runtime goes on serving
    /// what the relay talks to meanwhile (a [`crate::support::net_delay::NetDelay`]).
    pub async fn once_json_off_runtime(self) -> Value {
        tokio::task::spawn_blocking(move || self.once_json())
            .await
            .unwrap()
    }

    /// For [`RelayRun::spawn`]: stdout and stderr to /dev/null, for a daemon whose output the
    /// test does not read (a pipe nobody reads would stop it once full).
    pub fn quiet(mut self) -> Self {
        self.quiet = true;
        self
    }

    /// Starts the daemon, its stdout and stderr piped (or discarded: [`RelayRun::quiet`]).
    pub fn spawn(mut self) -> Child {
        let stdio = || {
            if self.quiet {
                Stdio::null()
            } else {
                Stdio::piped()
            }
        };
        self.cmd
            .stdout(stdio())
            .stderr(stdio())
            .spawn()
            .expect("spawn the relay")
    }
}

/// The real binary's relay in `mode`, appending JSON lines to the file `sink`.
pub fn relay_to_file(db: &TestDb, mode: Mode, sink: &Path) -> Command {
    let mut c = db.cmd();
    c.args(["relay", "--mode", mode_flag(mode)])
        .arg("--sink")
        .arg(format!("file:{}", sink.display()));
    c
}

/// The `--mode` value of `mode`.
pub fn mode_flag(mode: Mode) -> &'static str {
    match mode {
        Mode::Lease => "lease",
        Mode::Tx => "tx",
        Mode::Log => "log",
    }
}

/// A relay daemon writing JSON lines to `path`, in `mode` (lease or tx), with small batches so
/// that it is still publishing while a test does something else.
pub fn spawn_relay(db: &TestDb, mode: &str, path: &Path) -> Child {
    db.cmd()
        .args([
            "relay",
            "--mode",
            mode,
            "--batch-size",
            "20",
            "--poll-interval",
            "100ms",
        ])
        .arg("--sink")
        .arg(format!("file:{}", path.display()))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn relay")
}

/// How often each id occurs in the JSON-lines sink files.
pub fn deliveries(paths: &[&Path]) -> HashMap<i64, usize> {
    let mut seen = HashMap::new();
    for p in paths {
        for id in ids_in_file(p) {
            *seen.entry(id).or_insert(0) += 1;
        }
    }
    seen
}

/// Ids in a JSON-lines sink file.
pub fn ids_in_file(path: &Path) -> Vec<i64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("JSON line")["id"]
                .as_i64()
                .expect("id")
        })
        .collect()
}
