//! Gives `--version` the git commit and the build date (`OUTBOXCTL_GIT_COMMIT`,
//! `OUTBOXCTL_BUILD_DATE`). Works from a git checkout (also a fresh CI clone) and without one
//! (a source tarball, `cargo install` from a registry): the commit is then `unknown`.
//! `SOURCE_DATE_EPOCH` (reproducible builds) overrides the build date.

use std::path::{Path, PathBuf};
use std::process::Command;

fn git(dir: &Path, args: &[&str]) -> Option<String> {
    let out = Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .ok()?;
    let text = String::from_utf8(out.stdout).ok()?.trim().to_owned();
    (out.status.success() && !text.is_empty()).then_some(text)
}

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=SOURCE_DATE_EPOCH");

    // Only this crate's own repository: a tarball unpacked inside some other checkout must not
    // report that checkout's commit.
    let own_repo = git(&manifest, &["rev-parse", "--show-toplevel"])
        .and_then(|top| std::fs::canonicalize(top).ok())
        .zip(std::fs::canonicalize(&manifest).ok())
        .is_some_and(|(top, here)| top == here);
    let commit = own_repo
        .then(|| git(&manifest, &["rev-parse", "--short=12", "HEAD"]))
        .flatten();
    if commit.is_some() {
        // Rebuild when HEAD moves: HEAD itself, and the refs it may point to.
        for (arg, file) in [
            ("--git-path", "HEAD"),
            ("--git-common-dir", ""),
            ("--git-path", "packed-refs"),
        ] {
            let args: Vec<&str> = ["rev-parse", arg]
                .into_iter()
                .chain((!file.is_empty()).then_some(file))
                .collect();
            if let Some(p) = git(&manifest, &args) {
                let p = manifest.join(p);
                let p = if file.is_empty() { p.join("refs") } else { p };
                println!("cargo:rerun-if-changed={}", p.display());
            }
        }
    }
    println!(
        "cargo:rustc-env=OUTBOXCTL_GIT_COMMIT={}",
        commit.as_deref().unwrap_or("unknown")
    );

    let secs = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0)
        });
    println!("cargo:rustc-env=OUTBOXCTL_BUILD_DATE={}", civil_date(secs));
}

/// `YYYY-MM-DD` (UTC) of a Unix time; Howard Hinnant's days-to-civil algorithm.
fn civil_date(secs: u64) -> String {
    let z = (secs / 86_400) as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}
