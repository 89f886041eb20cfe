//! The documentation's own promises: every relative link in the repository's Markdown resolves
//! (to a file, and to a heading when it names one), and the README stays a newcomer's page.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every Markdown file a reader reaches: the top-level pages, docs/ and bench/ (not bench/results'
/// raw logs, not target/ or node_modules/).
fn pages() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for top in ["README.md", "CONTRIBUTING.md", "CHANGELOG.md"] {
        out.push(root().join(top));
    }
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name != "node_modules" && name != "target" {
                    walk(&p, out);
                }
            } else if name.ends_with(".md") {
                out.push(p);
            }
        }
    }
    walk(&root().join("docs"), &mut out);
    walk(&root().join("bench"), &mut out);
    walk(&root().join("examples"), &mut out);
    walk(&root().join("deploy"), &mut out);
    out.sort();
    out
}

/// The targets of inline links `[text](target)`, outside code spans and fenced blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        // Drop code spans, so `[a](b)` inside backticks is not a link.
        let mut plain = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                plain.push(c);
            }
        }
        let mut rest = plain.as_str();
        while let Some(i) = rest.find("](") {
            let after = &rest[i + 2..];
            let Some(end) = after.find(')') else { break };
            out.push(after[..end].trim().to_string());
            rest = &after[end..];
        }
    }
    out
}

/// GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens.
fn anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

fn anchors(text: &str) -> BTreeSet<String> {
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        } else if !fenced && line.starts_with('#') {
            out.insert(anchor(line.trim_start_matches('#')));
        }
    }
    out
}

fn broken_links(page: &Path, text: &str) -> Vec<String> {
    let mut broken = Vec::new();
    for target in links(text) {
        if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
            continue;
        }
        let (path, frag) = match target.split_once('#') {
            Some((p, f)) => (p, Some(f)),
            None => (target.as_str(), None),
        };
        let file = if path.is_empty() {
            page.to_path_buf()
        } else {
            page.parent().unwrap().join(path)
        };
        let shown = page.strip_prefix(root()).unwrap_or(page).display();
        if !file.exists() {
            broken.push(format!("{shown}: {target} (no such file)"));
            continue;
        }
        if !file.starts_with(root()) || file.canonicalize().is_ok_and(|f| !f.starts_with(root())) {
            broken.push(format!("{shown}: {target} (outside the repository)"));
            continue;
        }
        if let (Some(frag), true) = (frag, file.extension().is_some_and(|e| e == "md")) {
            let body = std::fs::read_to_string(&file).unwrap();
            if !anchors(&body).contains(frag) {
                broken.push(format!("{shown}: {target} (no heading #{frag})"));
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_resolves() {
    let mut broken = Vec::new();
    let pages = pages();
    assert!(pages.len() > 20, "found only {pages:?}");
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        broken.extend(broken_links(page, &text));
    }
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

/// The checker itself catches a missing file, a missing heading and a link out of the repository.
#[test]
fn the_link_check_catches_what_it_should() {
    let page = root().join("docs").join("README.md");
    let text = "[a](nope.md) [b](concepts.md#no-such-heading) [c](../../shared/STYLE.md) \
                `[d](nope-in-code.md)` [e](https://example.com/x) [f](concepts.md)";
    let broken = broken_links(&page, text);
    assert_eq!(broken.len(), 3, "{broken:?}");
    assert!(broken[0].contains("nope.md (no such file)"));
    assert!(broken[1].contains("no heading"));
    assert!(broken[2].contains("STYLE.md"));
}

#[test]
fn the_readme_is_a_newcomers_page() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines < 300,
        "README.md has {lines} lines; the manual is docs/"
    );
    // The test command it names is what CI runs.
    assert!(readme.contains(".ci/run"), "README names no test command");
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(ci.contains("cargo test --locked"));
    // The producer's side: the application's own INSERT inside its transaction.
    assert!(readme.contains("INSERT INTO outbox"), "no producer INSERT");
}

/// The README's quick start, pasted into a shell as it stands (against a new database of its
/// own instead of `shop`), relays the application's event.
#[test]
fn the_readme_quick_start_relays_the_applications_event() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let start = readme
        .find("## Quick start")
        .expect("a Quick start section");
    let block = &readme[start..];
    let open = block
        .find("```sh\n")
        .expect("a sh block in the quick start")
        + 6;
    let script = &block[open..open + block[open..].find("```").unwrap()];
    assert!(script.contains("createdb") && script.contains("relay --once"));
    let db = format!("quickstart_{}", std::process::id());
    let script = script.replace("shop", &db);
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_outboxctl")).parent().unwrap();
    let path = format!("{}:{}", bin_dir.display(), std::env::var("PATH").unwrap());
    let dropdb = || {
        std::process::Command::new("dropdb")
            .args(["-h", "127.0.0.1", "-U", "postgres", "--if-exists", &db])
            .status()
            .unwrap()
    };
    dropdb();
    let out = std::process::Command::new("bash")
        .args(["-euo", "pipefail", "-c", &script])
        .env("PATH", path)
        .env_remove("DATABASE_URL")
        .output()
        .unwrap();
    dropdb();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the quick start failed:\n{stdout}\n{stderr}"
    );
    let event = stdout
        .lines()
        .find(|l| l.contains("\"type\":\"order.placed\""))
        .unwrap_or_else(|| panic!("no event relayed:\n{stdout}\n{stderr}"));
    assert!(
        event.contains(r#""payload":{"order_id": "o-1001", "total_cents": 4200}"#),
        "{event}"
    );
    assert!(stderr.contains("1 published"), "{stderr}");
}

/// The README's count of migrations is the number embedded in the binary.
#[test]
fn the_readme_counts_the_migrations() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let n = std::fs::read_dir(root().join("migrations"))
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .path()
                .extension()
                .is_some_and(|x| x == "sql")
        })
        .count();
    assert!(
        readme.contains(&format!("({n} migrations)")),
        "README.md should say ({n} migrations)"
    );
}
