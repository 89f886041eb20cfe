//! The real `outboxctl` binary: a command with a clean environment, running it to its end (with
//! or without asserting its exit code), its output as text, signals, and what it is connected to.

use std::collections::HashSet;
use std::process::{Command, Output, Stdio};

use assert_cmd::cargo::CommandCargoExt;
use serde_json::Value;

use super::TestDb;

/// The real binary with a clean environment (no OUTBOXCTL_*, no DATABASE_URL, no PG*).
pub fn bin() -> Command {
    let mut c = Command::cargo_bin("outboxctl").expect("binary");
    for (k, _) in std::env::vars() {
        if k.starts_with("OUTBOXCTL_")
            || k == "DATABASE_URL"
            || k.starts_with("PG")
            || k == "RUST_LOG"
        {
            c.env_remove(k);
        }
    }
    c.env("NO_COLOR", "1").env("COLUMNS", "120");
    c
}

/// stdout of a finished command as text.
pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// stderr of a finished command as text.
pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// stdout of a finished command as the JSON document it must be.
pub fn stdout_json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", stdout(out)))
}

/// Runs `cmd` to its end with stdin closed (no test waits on a terminal) and returns its output.
pub fn output(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).output().expect("run outboxctl")
}

/// Runs `cmd` to its end, asserting its exit code (the panic shows the arguments, stdout and
/// stderr); returns the output.
pub fn expect_code(cmd: &mut Command, code: i32) -> Output {
    let out = output(cmd);
    assert_eq!(
        out.status.code(),
        Some(code),
        "outboxctl {}\nstdout:\n{}\nstderr:\n{}",
        cmd.get_args()
            .map(|a| a.to_string_lossy())
            .collect::<Vec<_>>()
            .join(" "),
        stdout(&out),
        stderr(&out)
    );
    out
}

/// Runs `outboxctl ARGS` against `db`, asserting the exit code; returns the output.
pub fn run(db: &TestDb, args: &[&str], code: i32) -> Output {
    expect_code(db.cmd().args(args), code)
}

/// Runs `outboxctl ARGS` against `db` and parses its stdout as JSON (exit code 0 expected).
pub fn run_json(db: &TestDb, args: &[&str]) -> Value {
    stdout_json(&run(db, args, 0))
}

/// Sends a signal to a child process.
pub fn signal(child: &std::process::Child, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {}", child.id());
}

/// Collects a child's output stream in the background, for waiting on a log line.
pub fn capture<R: std::io::Read + Send + 'static>(
    stream: R,
) -> std::sync::Arc<std::sync::Mutex<String>> {
    let buf = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let b = std::sync::Arc::clone(&buf);
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stream)
            .lines()
            .map_while(Result::ok)
        {
            let mut s = b.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    buf
}

/// Starts `outboxctl ARGS` against `db` in the background (stdin and stdout closed), its stderr
/// collected as it comes ([`capture`]), for a test that signals it or waits on a log line.
pub fn spawn_capturing(
    db: &TestDb,
    args: &[&str],
) -> (
    std::process::Child,
    std::sync::Arc<std::sync::Mutex<String>>,
) {
    let mut child = db
        .cmd()
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn outboxctl");
    let err = capture(child.stderr.take().unwrap());
    (child, err)
}

/// The local ports of `child`'s TCP connections (Linux /proc), to find its server backends in
/// pg_stat_activity.client_port.
pub fn client_ports(child: &std::process::Child) -> Vec<i32> {
    socket_ports(child, 1)
}

/// The remote ports of `child`'s established TCP connections (Linux /proc): what it is
/// connected to (a listening socket has no remote port).
pub fn server_ports(child: &std::process::Child) -> Vec<i32> {
    socket_ports(child, 2)
        .into_iter()
        .filter(|&p| p != 0)
        .collect()
}

/// One port column (1: local, 2: remote) of `child`'s TCP connections in /proc/PID/net/tcp*.
fn socket_ports(child: &std::process::Child, column: usize) -> Vec<i32> {
    let pid = child.id();
    let inodes: HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|dir| {
            dir.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| {
                    l.to_str()
                        .and_then(|s| s.strip_prefix("socket:["))
                        .map(|s| s.trim_end_matches(']').to_owned())
                })
                .collect()
        })
        .unwrap_or_default();
    let mut ports = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 9 && inodes.contains(cols[9]) {
                if let Some(port) = cols[column]
                    .rsplit(':')
                    .next()
                    .and_then(|p| i32::from_str_radix(p, 16).ok())
                {
                    ports.push(port);
                }
            }
        }
    }
    ports
}
