//! One new event, validated before any I/O: a line of `publish --file` (or of `bench`'s and
//! `demo`'s input), the flags of a single `publish`, and the `--payload` of `publish` and
//! `events edit`. Shared below the commands so that each refuses the same bad input with the
//! same words.

use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use uuid::Uuid;

use crate::db::publish::NewEvent;

/// Tenant used when none is given: the nil uuid.
pub const DEFAULT_TENANT: Uuid = Uuid::nil();

const EXPECTING: &str =
    "expected a JSON object with event_type, aggregate_type, aggregate_id and payload";

/// One JSON line of bulk input. Keys are the outbox column names.
#[derive(Debug, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a JSON object with event_type, aggregate_type, aggregate_id and payload"
)]
struct Line {
    event_type: String,
    aggregate_type: String,
    #[serde(deserialize_with = "string_or_integer")]
    aggregate_id: String,
    /// Kept as the text it was given: PostgreSQL parses it, so numbers keep their precision.
    payload: Box<RawValue>,
    #[serde(default)]
    tenant_id: Option<String>,
    #[serde(default)]
    headers: Option<Map<String, Value>>,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    available_at: Option<String>,
    #[serde(default)]
    delay: Option<String>,
}

/// `aggregate_id` may be given as a JSON string or integer.
fn string_or_integer<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) => Ok(s),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string()),
        other => Err(serde::de::Error::custom(format!(
            "aggregate_id must be a string or an integer, not {other}"
        ))),
    }
}

/// A serde_json error without its position "at line 1 column N": the input is one line, whose
/// number the caller reports, so only the column is kept.
fn json_error(e: &serde_json::Error) -> String {
    let text = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&position) {
        Some(msg) if e.line() == 1 => format!("{msg} (column {})", e.column()),
        _ => text,
    }
}

/// Parses and validates one line of bulk input.
pub fn parse_line(text: &str) -> Result<NewEvent, String> {
    // serde would read a JSON array as the struct's fields in order; only objects are lines.
    if !text.starts_with('{') {
        return Err(match serde_json::from_str::<serde::de::IgnoredAny>(text) {
            Ok(_) => format!(
                "{EXPECTING}, not `{}`",
                crate::output::escape_controls(&text.chars().take(40).collect::<String>())
            ),
            Err(e) => format!("invalid JSON: {}", json_error(&e)),
        });
    }
    let line: Line = serde_json::from_str(text).map_err(|e| {
        if e.is_data() {
            json_error(&e)
        } else {
            format!("invalid JSON: {}", json_error(&e))
        }
    })?;
    if line.available_at.is_some() && line.delay.is_some() {
        return Err("give either available_at or delay, not both".into());
    }
    let available_at = line
        .available_at
        .as_deref()
        .map(|s| crate::cli::parse_timestamp(s).map_err(|e| format!("available_at: {e}")))
        .transpose()?;
    let delay_micros = line
        .delay
        .as_deref()
        .map(|s| {
            crate::cli::parse_duration(s)
                .map_err(|e| format!("delay: {e}"))
                .and_then(micros)
        })
        .transpose()?;
    build(
        &line.event_type,
        &line.aggregate_type,
        &line.aggregate_id,
        line.tenant_id.as_deref(),
        line.payload,
        line.headers.unwrap_or_default(),
        line.idempotency_key,
        available_at,
        delay_micros,
    )
}

pub(crate) fn micros(d: Duration) -> Result<i64, String> {
    i64::try_from(d.as_micros()).map_err(|_| "delay is too long".to_string())
}

#[allow(clippy::too_many_arguments)]
pub(crate) fn build(
    event_type: &str,
    aggregate_type: &str,
    aggregate_id: &str,
    tenant: Option<&str>,
    payload: Box<RawValue>,
    headers: Map<String, Value>,
    idempotency_key: Option<String>,
    available_at: Option<chrono::DateTime<chrono::Utc>>,
    delay_micros: Option<i64>,
) -> Result<NewEvent, String> {
    for (name, value) in [
        ("event_type", event_type),
        ("aggregate_type", aggregate_type),
        ("aggregate_id", aggregate_id),
    ] {
        if value.trim().is_empty() {
            return Err(format!("{name} must not be empty"));
        }
        if value.contains('\0') {
            return Err(format!("{name} {NUL}"));
        }
    }
    if let Some(k) = idempotency_key.as_deref().filter(|k| k.contains('\0')) {
        return Err(format!("idempotency_key `{}` {NUL}", k.escape_debug()));
    }
    if let Some((k, _)) = headers
        .iter()
        .find(|(k, v)| k.contains('\0') || v.as_str().is_some_and(|v| v.contains('\0')))
    {
        return Err(format!("header `{}` {NUL}", k.escape_debug()));
    }
    if has_nul(payload.get()) {
        return Err(format!("payload {NUL}"));
    }
    if let Some(len) = overlong_string(payload.get()) {
        return Err(format!(
            "payload holds a string of {len} bytes; PostgreSQL's jsonb holds strings up to \
             {JSONB_MAX_STRING} bytes (256 MiB - 1)"
        ));
    }
    let tenant_id = match tenant {
        None => DEFAULT_TENANT,
        Some(t) => {
            Uuid::parse_str(t.trim()).map_err(|_| format!("tenant_id `{t}` is not a uuid"))?
        }
    };
    if let Some((k, _)) = headers.iter().find(|(_, v)| !v.is_string()) {
        return Err(format!("header `{k}` must be a string"));
    }
    let idempotency_key = match idempotency_key {
        Some(k) if k.trim().is_empty() => return Err("idempotency_key must not be empty".into()),
        Some(k) => k,
        None => Uuid::new_v4().to_string(),
    };
    Ok(NewEvent {
        tenant_id,
        aggregate_type: aggregate_type.to_owned(),
        aggregate_id: aggregate_id.to_owned(),
        event_type: event_type.to_owned(),
        // Moved, not copied: a payload can be hundreds of megabytes.
        payload: Box::<str>::from(payload).into_string(),
        headers: Value::Object(headers),
        idempotency_key,
        available_at,
        delay_micros,
    })
}

pub const NUL: &str = "contains a NUL character (\\u0000), which PostgreSQL cannot store";

/// Whether JSON text holds a string (or key) with a NUL character: PostgreSQL's jsonb rejects it.
pub use crate::json::has_nul;

/// The longest string PostgreSQL's jsonb can hold, in bytes (`JENTRY_OFFLENMASK`).
pub(crate) const JSONB_MAX_STRING: usize = (1 << 28) - 1;

/// The length of a string (or key) in JSON text that jsonb cannot hold, if there is one. Checked
/// here rather than left to the server: sending such a payload costs a message of hundreds of
/// megabytes only to be refused (and such a send was seen to stall in the client library).
/// Only text longer than the limit can hold such a string, so only then is it parsed.
pub(crate) fn overlong_string(json: &str) -> Option<usize> {
    fn walk(v: &Value) -> Option<usize> {
        match v {
            Value::String(s) => (s.len() > JSONB_MAX_STRING).then_some(s.len()),
            Value::Array(a) => a.iter().find_map(walk),
            Value::Object(o) => o.iter().find_map(|(k, v)| {
                (k.len() > JSONB_MAX_STRING)
                    .then_some(k.len())
                    .or_else(|| walk(v))
            }),
            _ => None,
        }
    }
    if json.len() <= JSONB_MAX_STRING {
        return None;
    }
    serde_json::from_str::<Value>(json)
        .ok()
        .and_then(|v| walk(&v))
}

/// The text of a `--payload JSON|@PATH|@-` value: the JSON itself, a file's contents, or stdin
/// (`@-`, as `--file -` reads events from stdin). Read as text; the digits are not touched.
pub fn payload_arg(raw: &str) -> Result<String, crate::exit::CodedError> {
    use std::io::Read;
    match raw.strip_prefix('@') {
        Some("-") => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).map_err(|e| {
                crate::exit::CodedError::usage(format!("cannot read --payload from stdin: {e}"))
            })?;
            Ok(text)
        }
        Some(path) => std::fs::read_to_string(path).map_err(|e| {
            crate::exit::CodedError::usage(format!("cannot read --payload file {path}: {e}"))
        }),
        None => Ok(raw.to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_line() {
        let e = parse_line(
            r#"{"event_type":"a.b","aggregate_type":"order","aggregate_id":7,"payload":{"x":1},
                "tenant_id":"6f9619ff-8b86-d011-b42d-00cf4fc964ff","headers":{"v":"1"},
                "idempotency_key":"k1","delay":"5m"}"#,
        )
        .unwrap();
        assert_eq!(e.aggregate_id, "7");
        assert_eq!(e.idempotency_key, "k1");
        assert_eq!(e.delay_micros, Some(300_000_000));
        assert_eq!(e.headers, serde_json::json!({"v": "1"}));
    }

    #[test]
    fn rejects_bad_lines_with_reasons() {
        let cases = [
            (r#"{"event_type":"a""#, "invalid JSON"),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1"}"#,
                "missing field `payload`",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"tenant_id":"nope"}"#,
                "not a uuid",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"delay":"soon"}"#,
                "delay",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"evnt":"x"}"#,
                "unknown field `evnt`",
            ),
            (
                r#"{"event_type":"","aggregate_type":"o","aggregate_id":"1","payload":1}"#,
                "must not be empty",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"headers":{"n":1}}"#,
                "must be a string",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"delay":"1s","available_at":"2026-01-01T00:00:00Z"}"#,
                "not both",
            ),
            (r#"["a","o","1",1]"#, "expected a JSON object"),
            ("hello", "invalid JSON: expected value (column 1)"),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1"}"#,
                "missing field `payload` (column 58)",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":true,"payload":1}"#,
                "aggregate_id must be a string or an integer, not true",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":{"k\u0000":1}}"#,
                "payload contains a NUL character",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"\u0000","payload":1}"#,
                "aggregate_id contains a NUL character",
            ),
            (
                r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1,"headers":{"h":"\u0000"}}"#,
                "header `h` contains a NUL character",
            ),
        ];
        for (line, want) in cases {
            let err = parse_line(line).unwrap_err();
            assert!(err.contains(want), "{line}: {err}");
        }
    }

    #[test]
    fn payload_text_is_kept_as_given() {
        let e = parse_line(
            r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload": {"n": 123456789012345678901234567890.10, "s": "\\u0000"} }"#,
        )
        .unwrap();
        // An escaped backslash before u0000 is not a NUL.
        assert_eq!(
            e.payload,
            r#"{"n": 123456789012345678901234567890.10, "s": "\\u0000"}"#
        );
    }

    #[test]
    fn default_key_is_unique() {
        let line = r#"{"event_type":"a","aggregate_type":"o","aggregate_id":"1","payload":1}"#;
        assert_ne!(
            parse_line(line).unwrap().idempotency_key,
            parse_line(line).unwrap().idempotency_key
        );
        assert_eq!(parse_line(line).unwrap().tenant_id, DEFAULT_TENANT);
    }
}
