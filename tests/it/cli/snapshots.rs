//! Committed text generated from the code: `--help` of every command under
//! `tests/snapshots/help/`, the shell completion scripts under `completions/`, the man pages under
//! `man/` and the reference pages under `docs/reference/` (src/docs/). A test fails when any of
//! them is stale, missing, or left over from a removed command.
//!
//! Regenerate after changing the CLI:
//!
//!     UPDATE_SNAPSHOTS=1 cargo test --test it snapshots::

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use clap::{CommandFactory, ValueEnum};
use clap_complete::Shell;
use outboxctl::cli::Cli;
use outboxctl::cmd::completions;

use crate::support::{bin, stderr};

fn updating() -> bool {
    std::env::var_os("UPDATE_SNAPSHOTS").is_some_and(|v| v == "1")
}

/// Compares (or, with UPDATE_SNAPSHOTS=1, writes) every file of one directory at once, so that a
/// run reports everything that is stale and an update also removes files nothing produces.
fn check_dir(dir: &str, want: BTreeMap<String, Vec<u8>>) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let on_disk: Vec<PathBuf> = std::fs::read_dir(&dir)
        .map(|rd| rd.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    if updating() {
        std::fs::create_dir_all(&dir).unwrap();
        for path in &on_disk {
            let name = path.file_name().unwrap().to_string_lossy();
            if !want.contains_key(name.as_ref()) {
                std::fs::remove_file(path).unwrap();
            }
        }
        for (name, bytes) in &want {
            std::fs::write(dir.join(name), bytes).unwrap();
        }
        return;
    }
    let mut problems = Vec::new();
    for (name, bytes) in &want {
        let path = dir.join(name);
        match std::fs::read(&path) {
            Err(_) => problems.push(format!("missing: {}", path.display())),
            Ok(have) if have != *bytes => problems.push(format!(
                "stale: {}\n--- committed\n{}\n--- generated\n{}",
                path.display(),
                String::from_utf8_lossy(&have),
                String::from_utf8_lossy(bytes)
            )),
            Ok(_) => {}
        }
    }
    for path in &on_disk {
        let name = path.file_name().unwrap().to_string_lossy();
        if !want.contains_key(name.as_ref()) {
            problems.push(format!(
                "left over (no command produces it): {}",
                path.display()
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "{}\n\nRegenerate with: UPDATE_SNAPSHOTS=1 cargo test --test it snapshots::",
        problems.join("\n")
    );
}

/// Every command path: [], ["migrate"], ..., and nested subcommands, without clap's `help`.
fn command_paths(cmd: &clap::Command, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    out.push(prefix.clone());
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let mut path = prefix.clone();
        path.push(sub.get_name().to_owned());
        command_paths(sub, path, out);
    }
}

#[test]
fn help_snapshots_are_current() {
    let mut paths = Vec::new();
    command_paths(&Cli::command(), vec![], &mut paths);
    let mut want = BTreeMap::new();
    for path in paths {
        let out = bin()
            .args(&path)
            .arg("--help")
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{path:?}: {}", stderr(&out));
        let name = std::iter::once("outboxctl".to_owned())
            .chain(path)
            .collect::<Vec<_>>()
            .join("-");
        want.insert(format!("{name}.txt"), out.stdout);
    }
    check_dir("tests/snapshots/help", want);
}

#[test]
fn completion_snapshots_are_current() {
    let mut want = BTreeMap::new();
    for &shell in Shell::value_variants() {
        let script = completions::script(shell);
        // `outboxctl completions SHELL` prints exactly the committed script.
        let out = bin()
            .args(["completions", &shell.to_string()])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(out.status.success(), "{shell}: {}", stderr(&out));
        assert!(out.stdout == script, "{shell}: binary and library disagree");
        assert!(!script.is_empty());
        want.insert(completions::file_name(shell).to_owned(), script);
    }
    check_dir("completions", want);
}

#[test]
fn reference_pages_are_current() {
    let want = outboxctl::docs::reference_pages()
        .into_iter()
        .map(|(name, text)| (name.to_owned(), text.into_bytes()))
        .collect();
    check_dir("docs/reference", want);
}

#[test]
fn man_pages_are_current() {
    let pages = outboxctl::docs::man::pages();
    // One page per command, clap's `help` aside.
    let mut paths = Vec::new();
    command_paths(&Cli::command(), vec![], &mut paths);
    assert_eq!(pages.len(), paths.len());
    for (name, page) in &pages {
        let text = String::from_utf8_lossy(page);
        assert!(
            text.starts_with(".ie \\n(.g .ds Aq"),
            "{name}: not roff:\n{text}"
        );
        assert!(text.contains(".SH NAME"), "{name}");
    }
    check_dir("man", pages.into_iter().collect());
}
