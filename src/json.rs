//! JSON from the database as the text it is, never as numbers.
//!
//! A payload is whatever JSON the application stored, and jsonb keeps a number's digits exactly
//! (`0.1000000000000000055511151231257827`, `1e400`). Decoded into `serde_json::Value`, such a
//! number becomes an `f64`: rounded, or an error ("number out of range") that stopped a whole list.
//! So every command reads payloads, headers and audit values as text (`payload::text`) into
//! [`JsonText`], prints that text (pretty-printed for humans by [`pretty`], which only moves
//! whitespace) and writes it back as text for PostgreSQL to parse.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::value::RawValue;
use sqlx::postgres::{PgTypeInfo, PgValueRef};
use sqlx::{Decode, Postgres, Type};

/// Valid JSON text, kept as it was read. Decoded from a `text` column (select jsonb as
/// `col::text`); serialized as the JSON it holds, digit for digit.
#[derive(Debug, Clone, Serialize)]
#[serde(transparent)]
pub struct JsonText(Box<RawValue>);

impl JsonText {
    /// Checks that `text` is JSON (without converting any number) and keeps it.
    pub fn parse(text: String) -> Result<Self, serde_json::Error> {
        RawValue::from_string(text).map(Self)
    }

    /// The JSON text.
    pub fn get(&self) -> &str {
        self.0.get()
    }

    /// The members of a JSON object, by key, each as its text; `None` when this is not an object.
    pub fn members(&self) -> Option<BTreeMap<String, JsonText>> {
        serde_json::from_str::<BTreeMap<String, Box<RawValue>>>(self.get())
            .ok()
            .map(|m| m.into_iter().map(|(k, v)| (k, JsonText(v))).collect())
    }

    /// One member of a JSON object (`None` when absent, or when this is not an object).
    pub fn member(&self, key: &str) -> Option<JsonText> {
        self.members().and_then(|mut m| m.remove(key))
    }

    /// The value as a `T` (a string, a bool, a count, a timestamp), when it is one.
    pub fn as_value<T: serde::de::DeserializeOwned>(&self) -> Option<T> {
        serde_json::from_str(self.get()).ok()
    }

    /// A JSON string's contents; any other value as its JSON text.
    pub fn as_text(&self) -> String {
        self.as_value::<String>()
            .unwrap_or_else(|| self.get().to_owned())
    }
}

/// Equal when the texts are: jsonb prints a value one way, so equal values read from it compare
/// equal, and `1.0` against `1.00` is a change of digits, which is what a diff must show.
impl PartialEq for JsonText {
    fn eq(&self, other: &Self) -> bool {
        self.get() == other.get()
    }
}

impl Eq for JsonText {}

impl std::fmt::Display for JsonText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.get())
    }
}

impl Type<Postgres> for JsonText {
    fn type_info() -> PgTypeInfo {
        <String as Type<Postgres>>::type_info()
    }

    fn compatible(ty: &PgTypeInfo) -> bool {
        <String as Type<Postgres>>::compatible(ty)
    }
}

impl<'r> Decode<'r, Postgres> for JsonText {
    fn decode(value: PgValueRef<'r>) -> Result<Self, sqlx::error::BoxDynError> {
        let text = <String as Decode<Postgres>>::decode(value)?;
        Ok(Self::parse(text)?)
    }
}

/// Checks that `text` is one JSON value without converting any number (so `1e400` and 40-digit
/// decimals are valid, as they are to PostgreSQL).
pub fn validate(text: &str) -> Result<(), serde_json::Error> {
    serde_json::from_str::<&RawValue>(text).map(|_| ())
}

/// `text` (valid JSON) laid out as `serde_json::to_string_pretty` lays out the same value, two
/// spaces per level, but with every token as written: numbers keep their digits, strings their
/// escapes, objects their key order. Only whitespace between tokens changes.
pub fn pretty(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len() + text.len() / 4);
    let mut depth = 0usize;
    let newline = |out: &mut String, depth: usize| {
        out.push('\n');
        for _ in 0..depth {
            out.push_str("  ");
        }
    };
    let next_token = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        bytes.get(i).copied()
    };
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'"' => {
                // A string, copied whole: up to the first quote not escaped by a backslash.
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i = (i + 1).min(bytes.len());
                out.push_str(&text[start..i]);
                continue;
            }
            b'{' | b'[' => {
                let close = if b == b'{' { b'}' } else { b']' };
                if next_token(i + 1) == Some(close) {
                    // Empty: `{}` / `[]` on one line, as serde_json prints them.
                    out.push(b as char);
                    out.push(close as char);
                    while bytes[i] != close {
                        i += 1;
                    }
                } else {
                    out.push(b as char);
                    depth += 1;
                    newline(&mut out, depth);
                }
            }
            b'}' | b']' => {
                depth = depth.saturating_sub(1);
                newline(&mut out, depth);
                out.push(b as char);
            }
            b',' => {
                out.push(',');
                newline(&mut out, depth);
            }
            b':' => out.push_str(": "),
            b if b.is_ascii_whitespace() => {}
            _ => {
                // A number or a literal: up to the next delimiter (ASCII, so a char boundary).
                let start = i;
                while i < bytes.len()
                    && !matches!(bytes[i], b',' | b':' | b'{' | b'}' | b'[' | b']' | b'"')
                    && !bytes[i].is_ascii_whitespace()
                {
                    i += 1;
                }
                out.push_str(&text[start..i]);
                continue;
            }
        }
        i += 1;
    }
    out
}

/// Whether JSON text holds a string (or key) with a NUL character, written as the escape
/// `\u0000` (JSON cannot hold a raw one): PostgreSQL's jsonb rejects it. Scans the text, so it
/// never fails on a number that does not fit an `f64`.
pub fn has_nul(text: &str) -> bool {
    let bytes = text.as_bytes();
    let mut i = 0;
    let mut in_string = false;
    while i < bytes.len() {
        match (in_string, bytes[i]) {
            (false, b'"') => in_string = true,
            (true, b'"') => in_string = false,
            (true, b'\\') => {
                if bytes.get(i + 1) == Some(&b'u')
                    && bytes.get(i + 2..i + 6).is_some_and(|h| h == b"0000")
                {
                    return true;
                }
                i += 1; // the escaped character: `\\` or `\"` cannot end or start anything
            }
            _ => {}
        }
        i += 1;
    }
    false
}

// Any JSON value, kept as its text: the reference pages (`docs/reference/json.md`) describe it so.
crate::schema::fixed_schema!(JsonText, "JsonText", {
    "description": "any JSON value, exactly as stored (digits kept)"
});

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pretty_is_serde_json_pretty_for_values_serde_can_hold() {
        let values = [
            serde_json::json!({"a": [1, 2, {"b": "x\ny"}], "e": {}, "f": [], "g": null}),
            serde_json::json!([]),
            serde_json::json!({}),
            serde_json::json!("text with \"quotes\", colons: and {braces} [brackets]"),
            serde_json::json!([[[]], [{}], {"k": [true, false, -1.5e-7]}]),
            serde_json::json!(42),
        ];
        for v in values {
            let want = serde_json::to_string_pretty(&v).unwrap();
            assert_eq!(pretty(&v.to_string()), want, "compact {v}");
            assert_eq!(pretty(&want), want, "already pretty {v}");
        }
    }

    #[test]
    fn pretty_keeps_every_digit_and_escape() {
        let text = r#"{"amount": 0.1000000000000000055511151231257827, "big": 123456789012345678901234567890, "n": 1e400, "s": "\u001b[2J \\\" é"}"#;
        assert_eq!(
            pretty(text),
            "{\n  \"amount\": 0.1000000000000000055511151231257827,\n  \"big\": 123456789012345678901234567890,\n  \"n\": 1e400,\n  \"s\": \"\\u001b[2J \\\\\\\" é\"\n}"
        );
    }

    #[test]
    fn text_is_kept_and_members_are_read_without_numbers() {
        let j = JsonText::parse(r#"{"n": 1e400, "s": "x", "c": 3}"#.into()).unwrap();
        assert_eq!(j.get(), r#"{"n": 1e400, "s": "x", "c": 3}"#);
        assert_eq!(
            serde_json::to_string(&j).unwrap(),
            r#"{"n": 1e400, "s": "x", "c": 3}"#
        );
        assert_eq!(j.member("n").unwrap().get(), "1e400");
        assert_eq!(j.member("s").unwrap().as_text(), "x");
        assert_eq!(j.member("c").unwrap().as_value::<u64>(), Some(3));
        assert!(j.member("missing").is_none());
        assert!(JsonText::parse("{".into()).is_err());
        assert!(validate("[1e400, 0.10000000000000000000001]").is_ok());
        assert!(validate("{} {}").is_err());
    }

    #[test]
    fn nul_escapes_are_found_only_inside_strings() {
        assert!(has_nul(r#"{"k\u0000": 1}"#));
        assert!(has_nul(r#"["a", "b\u0000c", 1e400]"#));
        assert!(
            !has_nul(r#"{"k": "\\u0000"}"#),
            "an escaped backslash, then text"
        );
        assert!(!has_nul(r#"{"k": "\u0001"}"#));
        assert!(!has_nul(r#"{"k": "\"\\"}"#));
    }
}
