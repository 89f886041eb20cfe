//! What keeps the generated reference pages true beyond the snapshot of their text
//! (tests/it/cli/snapshots.rs):
//!
//! - every `--json` output that docs/reference/json.md documents is produced by the real binary
//!   against a real database, and checked against the schema the page is generated from (so a
//!   shape printed by hand, a streamed list, cannot drift from the type that documents it); and
//!   every documented output is exercised here;
//! - every environment variable the source reads is on docs/reference/environment.md.

use std::collections::BTreeSet;

use serde_json::Value;

use crate::support::fixtures::{self, TENANT_A};
use crate::support::{base_url, bin, stderr, stdout, TestDb};

/// Where `v` breaks `schema` (a subset of JSON Schema: what schemars emits for the report
/// types), as `path: problem` lines. A key the schema does not name is a problem: it would be
/// undocumented.
fn violations(schema: &Value, v: &Value, path: &str, out: &mut Vec<String>) {
    let Some(s) = schema.as_object() else {
        return; // `true`: anything
    };
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = s.get(key).and_then(Value::as_array) {
            let fits = alts.iter().any(|a| {
                let mut e = Vec::new();
                violations(a, v, path, &mut e);
                e.is_empty()
            });
            if !fits {
                out.push(format!("{path}: {v} fits none of {key}"));
            }
        }
    }
    if let Some(all) = s.get("allOf").and_then(Value::as_array) {
        for a in all {
            violations(a, v, path, out);
        }
    }
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        if !values.contains(v) {
            out.push(format!("{path}: {v} is not one of {values:?}"));
        }
    }
    if let Some(c) = s.get("const") {
        if c != v {
            out.push(format!("{path}: {v} is not {c}"));
        }
    }
    let kinds: Vec<&str> = match s.get("type") {
        Some(Value::String(t)) => vec![t.as_str()],
        Some(Value::Array(ts)) => ts.iter().filter_map(Value::as_str).collect(),
        _ => vec![],
    };
    if !kinds.is_empty() {
        let fits = kinds.iter().any(|k| match *k {
            "null" => v.is_null(),
            "boolean" => v.is_boolean(),
            "integer" => v.is_i64() || v.is_u64(),
            "number" => v.is_number(),
            "string" => v.is_string(),
            "array" => v.is_array(),
            "object" => v.is_object(),
            _ => false,
        });
        if !fits {
            out.push(format!("{path}: {v} is not {kinds:?}"));
            return;
        }
    }
    if let (Some(obj), true) = (v.as_object(), s.contains_key("properties")) {
        let props = s["properties"].as_object().unwrap();
        for r in s
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let r = r.as_str().unwrap();
            if !obj.contains_key(r) {
                out.push(format!("{path}: required `{r}` missing"));
            }
        }
        for (k, x) in obj {
            match props.get(k) {
                Some(p) => violations(p, x, &format!("{path}.{k}"), out),
                None => out.push(format!("{path}: `{k}` is not documented")),
            }
        }
    } else if let (Some(obj), Some(each)) = (v.as_object(), s.get("additionalProperties")) {
        for (k, x) in obj {
            violations(each, x, &format!("{path}.{k}"), out);
        }
    }
    if let (Some(items), Some(schema)) = (v.as_array(), s.get("items")) {
        for (i, x) in items.iter().enumerate() {
            violations(schema, x, &format!("{path}[{i}]"), out);
        }
    }
}

/// Runs `args` against `db` (exit code in `codes`) and returns its stdout.
fn run_ok(db: &TestDb, args: &[&str], codes: &[i32]) -> Vec<u8> {
    let out = db.cmd().args(args).output().expect("run outboxctl");
    assert!(
        out.status.code().is_some_and(|c| codes.contains(&c)),
        "outboxctl {} exited {:?}\nstdout:\n{}\nstderr:\n{}",
        args.join(" "),
        out.status.code(),
        stdout(&out),
        stderr(&out)
    );
    out.stdout
}

#[tokio::test]
async fn every_documented_json_output_matches_its_schema() {
    let outputs = outboxctl::docs::json::outputs();
    let db = TestDb::new().await;
    let dir = tempfile::tempdir().unwrap();
    let mut seen: BTreeSet<&str> = BTreeSet::new();
    let mut problems = Vec::new();
    let mut check = |doc: &'static str, args: &[&str], out: Vec<u8>| {
        let o = outputs
            .iter()
            .find(|o| o.command == doc)
            .unwrap_or_else(|| panic!("json.md documents no `{doc}`"));
        seen.insert(o.command);
        let text = String::from_utf8(out).unwrap();
        let docs: Vec<Value> = if o.lines {
            text.lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        } else {
            vec![serde_json::from_str(&text)
                .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}):\n{text}"))]
        };
        assert!(!docs.is_empty(), "{args:?} printed nothing");
        for d in docs {
            let mut e = Vec::new();
            violations(o.schema.as_value(), &d, "", &mut e);
            if !e.is_empty() {
                problems.push(format!(
                    "outboxctl {}:\n  {}\n{d:#}",
                    args.join(" "),
                    e.join("\n  ")
                ));
            }
        }
    };
    macro_rules! json {
        ($doc:expr, $codes:expr, $($arg:expr),+) => {{
            let args: Vec<String> = vec![$($arg.to_string()),+];
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            let out = run_ok(&db, &args, $codes);
            check($doc, &args, out);
        }};
    }

    json!("migrate --json", &[0], "migrate", "--json");
    json!("migrate --json", &[0], "migrate", "--status", "--json");
    json!(
        "migrate --check --json",
        &[0],
        "migrate",
        "--check",
        "--json"
    );

    json!(
        "publish --json",
        &[0],
        "publish",
        "--event-type",
        "order.placed",
        "--aggregate-type",
        "order",
        "--aggregate-id",
        "o-1",
        "--payload",
        r#"{"total": 1200}"#,
        "--json"
    );
    let lines = dir.path().join("events.jsonl");
    std::fs::write(
        &lines,
        "{\"event_type\":\"order.paid\",\"aggregate_type\":\"order\",\"aggregate_id\":\"o-1\",\"payload\":{}}\n\
         {\"event_type\":\"order.shipped\",\"aggregate_type\":\"order\",\"aggregate_id\":\"o-1\",\"payload\":{},\"delay\":\"1h\"}\n",
    )
    .unwrap();
    json!(
        "publish --json",
        &[0],
        "publish",
        "--file",
        lines.display(),
        "--json"
    );

    json!(
        "relay --once --json",
        &[0],
        "relay",
        "--once",
        "--sink",
        "null",
        "--json"
    );

    json!(
        "replay --json",
        &[0],
        "replay",
        "--all",
        "--sink",
        "null",
        "--dry-run",
        "--json"
    );
    json!(
        "replay --json",
        &[0],
        "replay",
        "--all",
        "--sink",
        "null",
        "--yes",
        "--json"
    );

    json!("stats --json", &[0], "stats", "--json");
    json!(
        "stats --json",
        &[0],
        "stats",
        "--by",
        "event-type",
        "--json"
    );
    json!(
        "stats --check --json",
        &[0],
        "stats",
        "--check",
        "--warn-dead",
        "100",
        "--json"
    );

    let dead = fixtures::ready(&db).await;
    let dead2 = fixtures::ready(&db).await;
    fixtures::kill(&db, dead, "5 minutes", "HTTP 500").await;
    fixtures::kill(&db, dead2, "5 minutes", "HTTP 500").await;
    json!("dead list --json", &[0], "dead", "list", "--json");
    json!("dead show --json", &[0], "dead", "show", dead, "--json");
    json!("dead export", &[0], "dead", "export");
    json!(
        "dead export --format full",
        &[0],
        "dead",
        "export",
        "--format",
        "full"
    );
    json!(
        "requeue --json",
        &[0],
        "requeue",
        dead,
        "--dry-run",
        "--json"
    );
    json!("requeue --json", &[0], "requeue", dead, "--json");
    json!(
        "dead discard --json",
        &[0],
        "dead",
        "discard",
        dead2,
        "--dry-run",
        "--json"
    );
    json!(
        "dead discard --json",
        &[0],
        "dead",
        "discard",
        dead2,
        "--yes",
        "--json"
    );

    let a = fixtures::insert(&db, "order.placed", "order", "o-9", TENANT_A).await;
    let b = fixtures::insert(&db, "order.placed", "order", "o-8", TENANT_A).await;
    let c = fixtures::insert(&db, "order.placed", "order", "o-7", TENANT_A).await;
    json!("events list --json", &[0], "events", "list", "--json");
    json!("events show --json", &[0], "events", "show", a, "--json");
    json!(
        "events edit --json",
        &[0],
        "events",
        "edit",
        a,
        "--payload",
        r#"{"total": 1300}"#,
        "--yes",
        "--json"
    );
    json!(
        "events reschedule ID... --json",
        &[0],
        "events",
        "reschedule",
        a,
        "--delay",
        "1h",
        "--yes",
        "--json"
    );
    json!(
        "events cancel ID... --json",
        &[0],
        "events",
        "cancel",
        a,
        "--yes",
        "--json"
    );
    json!(
        "events cancel --json (filters)",
        &[0],
        "events",
        "reschedule",
        "--aggregate-id",
        "o-8",
        "--delay",
        "1h",
        "--yes",
        "--json"
    );
    json!(
        "events cancel --json (filters)",
        &[0],
        "events",
        "cancel",
        "--aggregate-id",
        "o-8",
        "--yes",
        "--json"
    );
    let _ = b;

    json!(
        "ordering enable --json",
        &[0],
        "ordering",
        "enable",
        "--aggregate-type",
        "order",
        "--json"
    );
    json!(
        "ordering status --json",
        &[0],
        "ordering",
        "status",
        "--json"
    );
    json!(
        "ordering skip --json",
        &[0],
        "ordering",
        "skip",
        c,
        "--json"
    );
    json!(
        "ordering enable --json",
        &[0],
        "ordering",
        "disable",
        "--json"
    );
    json!("log enable --json", &[0], "log", "enable", "--json");
    json!("log status --json", &[0], "log", "status", "--json");
    json!("log enable --json", &[0], "log", "disable", "--json");

    json!(
        "prune --json",
        &[0],
        "prune",
        "--older-than",
        "1d",
        "--json"
    );
    json!(
        "prune --json",
        &[0],
        "prune",
        "--older-than",
        "1d",
        "--dry-run",
        "--json"
    );
    // doctor: 0, 1 (a warning) or 2 (a failure) are all reports.
    json!("doctor --json", &[0, 1, 2], "doctor", "--json");

    // bench makes its own scratch schema; tiny sizes, the shape is what counts here.
    let out = bin()
        .args([
            "bench",
            "--events",
            "50",
            "--batch-size",
            "50",
            "--relays",
            "1",
            "--rate",
            "50",
        ])
        .args([
            "--latency-duration",
            "1s",
            "--delayed-events",
            "2",
            "--prune-rows",
            "50",
        ])
        .arg("--json")
        .env("DATABASE_URL", base_url())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    check("bench --json", &["bench", "--json"], out.stdout);

    let missing: Vec<&str> = outputs
        .iter()
        .map(|o| o.command)
        .filter(|c| !seen.contains(c))
        .collect();
    assert!(
        missing.is_empty(),
        "documented in json.md but not exercised here: {missing:?}"
    );
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

/// Every string literal the source passes to an environment read (`var("X")`, `var_os("X")`,
/// and the relay's `env("X")` closure), and every `"OUTBOXCTL_..."` literal.
fn vars_read_by_the_source() -> BTreeSet<String> {
    fn walk(dir: &std::path::Path, out: &mut BTreeSet<String>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                for call in ["var(\"", "var_os(\"", "env(\"", "\"OUTBOXCTL_"] {
                    for (i, _) in text.match_indices(call) {
                        let start = i + call.len();
                        let name: String = text[start..]
                            .chars()
                            .take_while(|c| {
                                c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_'
                            })
                            .collect();
                        let name = if call.starts_with('"') {
                            format!("OUTBOXCTL_{name}")
                        } else {
                            name
                        };
                        if name.len() > 2 && !name.ends_with('_') {
                            out.insert(name);
                        }
                    }
                }
            }
        }
    }
    let mut out = BTreeSet::new();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    walk(&root.join("src"), &mut out);
    let build = std::fs::read_to_string(root.join("build.rs")).unwrap();
    for (i, _) in build.match_indices("var(\"") {
        let name: String = build[i + 5..]
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || *c == '_')
            .collect();
        out.insert(name);
    }
    out
}

#[test]
fn every_environment_variable_read_is_documented() {
    use outboxctl::docs::env;
    let known: BTreeSet<String> = env::flag_var_names()
        .into_iter()
        .chain(env::other_names().into_iter().map(str::to_owned))
        .collect();
    let read = vars_read_by_the_source();
    // Cargo's own, set for the build script.
    let cargo = ["CARGO_MANIFEST_DIR", "CARGO_PKG_VERSION"];
    let undocumented: Vec<&String> = read
        .iter()
        .filter(|v| !known.contains(*v) && !cargo.contains(&v.as_str()))
        .collect();
    assert!(
        undocumented.is_empty(),
        "read by the source but on no page (add it to src/docs/env.rs OTHER): {undocumented:?}"
    );
    // And the scan does find what it should.
    for v in [
        "OUTBOXCTL_LOG",
        "NO_COLOR",
        "OUTBOXCTL_HEARTBEAT_INTERVAL",
        "SOURCE_DATE_EPOCH",
    ] {
        assert!(read.contains(v), "{v} not found by the scan: {read:?}");
    }
}

/// The checker itself: an undocumented key, a missing field, a wrong type and an unknown enum
/// value are each caught (else the test above would pass on any output).
#[test]
fn the_schema_check_catches_drift() {
    let schema = outboxctl::docs::json::outputs()
        .into_iter()
        .find(|o| o.command == "relay --once --json")
        .unwrap()
        .schema;
    let good = serde_json::json!({
        "sink": "null", "mode": "tx", "elapsed_ms": 1, "claimed": 1, "published": 1,
        "retried": 0, "dead_lettered": 0, "released": 0, "lease_lost": 0, "sink_failures": 0,
        "unavailable": 0, "deferred": 0
    });
    let problems = |v: &Value| {
        let mut e = Vec::new();
        violations(schema.as_value(), v, "", &mut e);
        e
    };
    assert_eq!(problems(&good), Vec::<String>::new());
    let mut extra = good.clone();
    extra["surprise"] = 1.into();
    assert!(problems(&extra)[0].contains("`surprise` is not documented"));
    let mut missing = good.clone();
    missing.as_object_mut().unwrap().remove("published");
    assert!(problems(&missing)[0].contains("required `published` missing"));
    let mut wrong = good.clone();
    wrong["claimed"] = "one".into();
    assert!(!problems(&wrong).is_empty());
    let mut mode = good;
    mode["mode"] = "auto".into();
    assert!(!problems(&mode).is_empty());
}
