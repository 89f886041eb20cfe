//! `{placeholder}` templates: `--http-header` values, the NATS subject, the Redis stream and the
//! AMQP routing key. Parsed once when the sink is built, so an unknown placeholder (a typo such as
//! `{evnt_type}`) is refused at start instead of being sent literally with every event; expanded
//! in one pass, so a value that itself looks like a placeholder is never expanded again.

use super::Event;

/// The placeholders, in the order the error message lists them.
pub const PLACEHOLDERS: &[&str] = &[
    "id",
    "idempotency_key",
    "event_type",
    "aggregate_type",
    "aggregate_id",
    "tenant_id",
];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Id,
    IdempotencyKey,
    EventType,
    AggregateType,
    AggregateId,
    TenantId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Field(Field),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    /// Parses `text`. A placeholder is `{` + letters, digits, `_`, `-`, `.` or spaces + `}`; any
    /// other brace (e.g. a JSON literal `{"a":1}`) is literal text. `what` names the template in
    /// the error (e.g. ``--http-header `X-Type` ``).
    pub fn parse(text: &str, what: &str) -> Result<Self, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            let after = &rest[open + 1..];
            let name_len = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ')))
                .unwrap_or(after.len());
            if name_len == 0 || !after[name_len..].starts_with('}') {
                literal.push_str(&rest[..open + 1]);
                rest = after;
                continue;
            }
            let name = &after[..name_len];
            let field = match name {
                "id" => Field::Id,
                "idempotency_key" => Field::IdempotencyKey,
                "event_type" => Field::EventType,
                "aggregate_type" => Field::AggregateType,
                "aggregate_id" => Field::AggregateId,
                "tenant_id" => Field::TenantId,
                _ => {
                    return Err(format!(
                        "{what}: unknown placeholder `{{{name}}}`; use {}",
                        PLACEHOLDERS
                            .iter()
                            .map(|p| format!("{{{p}}}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
            };
            literal.push_str(&rest[..open]);
            if !literal.is_empty() {
                parts.push(Part::Text(std::mem::take(&mut literal)));
            }
            parts.push(Part::Field(field));
            rest = &after[name_len + 1..];
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Self { parts })
    }

    /// The template's text for an event.
    pub fn expand(&self, e: &Event) -> String {
        use std::fmt::Write;
        let mut out = String::new();
        for part in &self.parts {
            match part {
                Part::Text(t) => out.push_str(t),
                Part::Field(Field::Id) => {
                    let _ = write!(out, "{}", e.id);
                }
                Part::Field(Field::IdempotencyKey) => out.push_str(&e.idempotency_key),
                Part::Field(Field::EventType) => out.push_str(&e.event_type),
                Part::Field(Field::AggregateType) => out.push_str(&e.aggregate_type),
                Part::Field(Field::AggregateId) => out.push_str(&e.aggregate_id),
                Part::Field(Field::TenantId) => {
                    let _ = write!(out, "{}", e.tenant_id);
                }
            }
        }
        out
    }

    /// The template with every placeholder replaced by `value`: a sample of what it expands to
    /// (`doctor` finds the JetStream stream that captures the NATS subject so).
    pub fn sample(&self, value: &str) -> String {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.as_str(),
                Part::Field(_) => value,
            })
            .collect()
    }

    /// The literal text only (what a template without placeholders always expands to), for
    /// checks at start such as "no wildcard in the subject".
    pub fn literal_text(&self) -> String {
        self.parts
            .iter()
            .filter_map(|p| match p {
                Part::Text(t) => Some(t.as_str()),
                Part::Field(_) => None,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        Event {
            aggregate_id: "{event_type}".into(),
            ..Event::sample()
        }
    }

    #[test]
    fn expands_each_placeholder_once() {
        let t = Template::parse(
            "{id}/{idempotency_key}/{event_type}/{aggregate_type}/{aggregate_id}/{tenant_id}",
            "t",
        )
        .unwrap();
        assert_eq!(
            t.expand(&event()),
            "7/k-7/order.placed/order/{event_type}/00000000-0000-0000-0000-000000000000"
        );
    }

    #[test]
    fn other_braces_are_literal() {
        for text in [r#"{"a":1}"#, "{}", "a{b", "}{", "{x:y}", "plain", ""] {
            let t = Template::parse(text, "t").unwrap();
            assert_eq!(t.expand(&event()), text);
        }
        let t = Template::parse("{{id}}", "t").unwrap();
        assert_eq!(t.expand(&event()), "{7}");
    }

    #[test]
    fn unknown_placeholders_are_refused_with_the_list() {
        for (text, bad) in [
            ("{evnt_type}", "{evnt_type}"),
            ("a.{ id }", "{ id }"),
            ("{ID}", "{ID}"),
            ("{id}.{x-y}", "{x-y}"),
        ] {
            let err = Template::parse(text, "--http-header `X`").unwrap_err();
            assert!(
                err.starts_with(&format!("--http-header `X`: unknown placeholder `{bad}`; use {{id}}, {{idempotency_key}}, {{event_type}}")),
                "{err}"
            );
            assert!(err.ends_with("{tenant_id}"), "{err}");
        }
    }
}
