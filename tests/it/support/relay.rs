//! The relay of the real binary pointed at a sink, and what a file sink received.

use std::collections::HashMap;
use std::path::Path;
use std::process::{Child, Command};

use outboxctl::relay::Mode;

use super::TestDb;

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
