//! The harness of the integration tests: the database (a schema of each test's own), the real
//! binary, rows in given states, the relay pointed at a sink, servers and clusters a test starts,
//! and a network that is slow on purpose. Nothing here is a test.

mod binary;
mod database;
pub mod fixtures;
pub mod net_delay;
pub mod plans;
mod relay;
pub mod servers;

pub use binary::*;
pub use database::*;
pub use relay::*;

use std::io::Write;
use std::process::Stdio;

/// How many migrations the binary embeds (the tests that print or count them say this, not a
/// number of their own).
pub fn migrations() -> usize {
    outboxctl::db::migrate::MIGRATOR.iter().count()
}

/// `1, 2, ..., n` for every embedded migration, as `migrate` lists them.
pub fn migration_list() -> String {
    (1..=migrations())
        .map(|v| v.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Polls `check` every 20 ms until it returns true or `timeout` passes (then panics with `what`).
/// For waiting on an observable outcome of another process, not as a fixed sleep.
pub async fn wait_until<F, Fut>(timeout: std::time::Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        if std::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Says in the test run's output that a check was skipped or reduced, and why. Written to the
/// process's stderr directly, past libtest's capture, so it shows for a passing test too.
pub fn say_skipped(test: &str, why: &str) {
    let _ = writeln!(std::io::stderr(), "SKIPPED in {test}: {why}");
}

/// `promtool check metrics` on `text`: panics with promtool's complaints unless it is clean.
/// promtool ships in Debian's `prometheus` package (`.ci/run` installs it).
pub fn promtool_check(text: &str) {
    let mut child = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (apt-get install prometheus)");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success() && out.stdout.is_empty() && out.stderr.is_empty(),
        "promtool rejects the exposition:\n{}{}\n---\n{text}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
