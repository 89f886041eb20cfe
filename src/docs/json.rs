//! docs/reference/json.md: the shape of every `--json` output, from the JSON schemas that
//! schemars derives from the report types themselves (their fields, types and doc comments,
//! honouring their serde attributes). Each command module lists its outputs next to the code
//! that prints them (`json_outputs()`); a test runs each of those commands against a real
//! database and checks its output against the schema (tests/it/cli/reference.rs), so a shape
//! printed by hand (a streamed list) cannot drift from the type that documents it.

use std::fmt::Write;

use serde_json::Value;

use super::{cell, header};

pub use crate::schema::{schema, Output};

/// Every `--json` output, in the order of the commands.
pub fn outputs() -> Vec<Output> {
    use crate::cmd;
    [
        cmd::migrate::json_outputs(),
        cmd::publish::json_outputs(),
        cmd::relay::json_outputs(),
        cmd::stats::json_outputs(),
        cmd::dead::json_outputs(),
        cmd::requeue::json_outputs(),
        cmd::replay::json_outputs(),
        cmd::ordering::json_outputs(),
        cmd::logmode::json_outputs(),
        cmd::events::json_outputs(),
        cmd::events::edit::json_outputs(),
        cmd::prune::json_outputs(),
        cmd::doctor::json_outputs(),
        cmd::bench::json_outputs(),
    ]
    .concat()
}

/// The JSON types a schema allows, and whether it allows null.
fn types(s: &Value) -> (Vec<String>, bool) {
    let mut out = Vec::new();
    let mut null = false;
    let mut add = |t: &str, s: &Value| {
        if t == "null" {
            null = true;
            return;
        }
        let named = match (t, s.get("format").and_then(Value::as_str)) {
            ("string", Some("date-time")) => "time (RFC 3339)".to_owned(),
            ("string", Some("uuid")) => "uuid".to_owned(),
            ("array", _) => {
                let item = s.get("items").map(|i| types(i).0.join(" or "));
                format!("array of {}", item.unwrap_or_else(|| "any".into()))
            }
            ("object", _) if s.get("properties").is_none() => match s.get("additionalProperties") {
                Some(v) if v.is_object() => format!("map of {}", types(v).0.join(" or ")),
                _ => "object".to_owned(),
            },
            _ => t.to_owned(),
        };
        if !out.contains(&named) {
            out.push(named);
        }
    };
    if let Some(values) = s.get("enum").and_then(Value::as_array) {
        let names: Vec<String> = values
            .iter()
            .filter(|v| !v.is_null())
            .map(|v| format!("`{v}`"))
            .collect();
        null |= values.iter().any(Value::is_null);
        return (vec![names.join(", ")], null);
    }
    if let Some(c) = s.get("const") {
        return (vec![format!("`{c}`")], c.is_null());
    }
    match s.get("type") {
        Some(Value::String(t)) => add(t, s),
        Some(Value::Array(ts)) => {
            for t in ts.iter().filter_map(Value::as_str) {
                add(t, s);
            }
        }
        _ => {}
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = s.get(key).and_then(Value::as_array) {
            let consts: Vec<String> = alts
                .iter()
                .filter_map(|a| a.get("const").or_else(|| a.get("enum")))
                .flat_map(|c| match c {
                    Value::Array(v) => v.clone(),
                    v => vec![v.clone()],
                })
                .filter(|v| !v.is_null())
                .map(|v| format!("`{v}`"))
                .collect();
            if !consts.is_empty() {
                out.push(consts.join(", "));
            }
            for a in alts {
                if a.get("const").is_some() || a.get("enum").is_some() {
                    continue;
                }
                let (t, n) = types(a);
                null |= n;
                for t in t {
                    if !out.contains(&t) {
                        out.push(t);
                    }
                }
            }
        }
    }
    if out.is_empty() && !null {
        out.push("any JSON".into());
    }
    (out, null)
}

/// The object schema inside `s` (itself, an array's items, an optional object's alternative).
fn object_of(s: &Value) -> Option<&Value> {
    if s.get("properties").is_some() {
        return Some(s);
    }
    if let Some(items) = s.get("items") {
        return object_of(items);
    }
    if let Some(v) = s.get("additionalProperties").filter(|v| v.is_object()) {
        return object_of(v);
    }
    for key in ["anyOf", "oneOf"] {
        if let Some(alts) = s.get(key).and_then(Value::as_array) {
            if let Some(o) = alts.iter().find_map(object_of) {
                return Some(o);
            }
        }
    }
    None
}

/// The path segment a nested field adds: `events[].id`, `groups.*.ready`.
fn child_prefix(path: &str, s: &Value) -> String {
    if s.get("items").is_some()
        || (s.get("anyOf").is_some() && object_of(s).is_some() && is_array(s))
    {
        format!("{path}[].")
    } else if s.get("additionalProperties").is_some_and(Value::is_object)
        && s.get("properties").is_none()
    {
        format!("{path}.*.")
    } else {
        format!("{path}.")
    }
}

fn is_array(s: &Value) -> bool {
    s.get("type").is_some_and(|t| match t {
        Value::String(t) => t == "array",
        Value::Array(ts) => ts.iter().any(|t| t == "array"),
        _ => false,
    }) || s
        .get("anyOf")
        .and_then(Value::as_array)
        .is_some_and(|a| a.iter().any(is_array))
}

/// The table rows of an object schema's fields, nested objects flattened into dotted paths.
fn rows(obj: &Value, prefix: &str, out: &mut Vec<[String; 3]>) {
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let Some(props) = obj.get("properties").and_then(Value::as_object) else {
        return;
    };
    for (name, s) in props {
        let path = format!("{prefix}{name}");
        let (types, null) = types(s);
        let mut ty = types.join(" or ");
        if null {
            ty.push_str(" or null");
        }
        if !required.contains(&name.as_str()) {
            ty.push_str(" (optional)");
        }
        let doc = s.get("description").and_then(Value::as_str).unwrap_or("");
        out.push([format!("`{path}`"), ty, cell(doc)]);
        if let Some(inner) = object_of(s) {
            rows(inner, &child_prefix(&path, s), out);
        }
    }
}

pub fn page() -> String {
    let mut out = header(
        "JSON output",
        "the JSON schemas of the report types, derived by schemars",
    );
    out.push_str(
        "What each command prints on stdout with `--json` (or `OUTBOXCTL_JSON=1`): one JSON \
         document, pretty-printed, ending in a newline; `dead export` prints JSON lines \
         instead. Logs and progress go to stderr, never into the JSON. A field marked \
         *optional* is left out when it has no value; `or null` means it is present with \
         `null`. Nested fields are written as paths: `events[].id` is the `id` of each item of \
         the `events` array, `groups.*.ready` the `ready` of each value of the `groups` map. \
         Fields may be added in later versions; none is removed or changes type without a note \
         in the changelog.\n\n\
         The relay daemon has no `--json`; with `--log-format json` every line it prints on \
         stderr is a JSON object with `timestamp`, `level`, `message` and the event's fields.\n",
    );
    let all = outputs();
    out.push_str("\n| Command | Output |\n| --- | --- |\n");
    for o in &all {
        let _ = writeln!(
            out,
            "| [`outboxctl {}`](#{}) | {} |",
            o.command,
            anchor(o.command),
            if o.lines {
                "JSON lines"
            } else {
                "one document"
            }
        );
    }
    for o in &all {
        let _ = writeln!(out, "\n## outboxctl {}\n", o.command);
        // The type's own doc comment is for the code's readers (and a flattened type's would
        // stand for the whole): the note says what the output is.
        let v = o.schema.as_value();
        if !o.note.is_empty() {
            let _ = writeln!(out, "{}\n", super::prose(o.note));
        }
        if o.lines {
            out.push_str("One object per line, with these fields:\n\n");
        }
        let mut table = Vec::new();
        if let Some(obj) = object_of(v) {
            rows(obj, "", &mut table);
        }
        out.push_str("| Field | Type | Meaning |\n| --- | --- | --- |\n");
        for [f, t, d] in table {
            let _ = writeln!(out, "| {f} | {t} | {d} |");
        }
    }
    out
}

/// The GitHub anchor of a `## outboxctl dead list --json` heading.
fn anchor(command: &str) -> String {
    format!("outboxctl {command}")
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .collect::<String>()
        .replace(' ', "-")
}
