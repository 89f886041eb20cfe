//! CloudEvents 1.0 on the wire (`relay --format cloudevents`): the one place that maps an event to
//! its CloudEvents attributes, says which content mode each sink sends, and renders the attributes
//! the way each protocol binding names them. The sinks only put the result on their message.
//!
//! The mapping (docs/sinks/cloudevents.md holds the same table):
//!
//! | attribute         | value                                                       |
//! |-------------------|-------------------------------------------------------------|
//! | `specversion`     | `1.0`                                                       |
//! | `id`              | the idempotency key (the same on every attempt: the dedup id) |
//! | `source`          | `--cloudevents-source`, or `/outboxctl/DATABASE/SCHEMA`      |
//! | `type`            | the event type                                              |
//! | `subject`         | `AGGREGATE_TYPE/AGGREGATE_ID`                                |
//! | `time`            | `created_at`, RFC 3339 in UTC with microseconds             |
//! | `datacontenttype` | `application/json`                                          |
//! | `outboxid`        | the outbox row's id, as a string (a CloudEvents Integer is 32 bits) |
//! | `tenantid`        | the tenant's UUID                                           |
//! | `data`            | the payload, the stored JSON text byte for byte             |
//!
//! Binary mode puts `data` alone in the body and each attribute in a header named per the
//! binding ([`Binding`]); structured mode ([`CloudEvents::write_structured`]) writes one JSON
//! object (`application/cloudevents+json`) whose `data` member is the payload's text as stored,
//! never parsed into numbers (see [`crate::json`]).

use std::borrow::Cow;
use std::io::Write;

use super::{Event, Scheme};

/// The CloudEvents version sent.
pub const SPECVERSION: &str = "1.0";
/// `datacontenttype`: the payload is JSON.
pub const DATACONTENTTYPE: &str = "application/json";
/// The media type of a structured-mode body (the JSON event format).
pub const STRUCTURED_CONTENT_TYPE: &str = "application/cloudevents+json";
/// The extension attribute holding the outbox row's id.
pub const EXT_OUTBOX_ID: &str = "outboxid";
/// The extension attribute holding the tenant's UUID.
pub const EXT_TENANT_ID: &str = "tenantid";

/// How the attributes travel (the flag `--cloudevents-mode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Each attribute in a transport header, `data` alone in the body.
    Binary,
    /// The whole event as one JSON object in the body.
    Structured,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Binary => "binary",
            Mode::Structured => "structured",
        }
    }
}

/// What the CloudEvents flags asked for, before the sink is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `--cloudevents-mode`, when given.
    pub mode: Option<Mode>,
    /// `--cloudevents-source`, or the default ([`default_source`]).
    pub source: String,
}

/// CloudEvents as one sink sends them: its content mode and the `source` attribute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudEvents {
    pub mode: Mode,
    source: String,
}

/// The content modes a sink sends, the default first; none: `--format cloudevents` is refused.
/// HTTP has both (binary by default); Kafka, NATS and RabbitMQ send binary mode (their bindings'
/// headers); stdout and file have no headers, so they write structured events, one JSON object
/// per line; null discards whatever it gets; Redis Streams has no CloudEvents binding.
pub fn modes(scheme: Scheme) -> &'static [Mode] {
    match scheme {
        Scheme::Http | Scheme::Https | Scheme::Null => &[Mode::Binary, Mode::Structured],
        Scheme::Kafka | Scheme::Nats | Scheme::Amqp => &[Mode::Binary],
        Scheme::Stdout | Scheme::File => &[Mode::Structured],
        Scheme::Redis => &[],
    }
}

/// The sinks that send CloudEvents in `mode` (any mode: `None`), for error messages, e.g.
/// `http(s), stdout and file`.
fn sinks_with(mode: Option<Mode>) -> String {
    let names: Vec<&str> = Scheme::ALL
        .into_iter()
        .filter(|s| !matches!(s, Scheme::Null | Scheme::Https))
        .filter(|s| match mode {
            Some(m) => modes(*s).contains(&m),
            None => !modes(*s).is_empty(),
        })
        .map(|s| {
            if s == Scheme::Http {
                "http(s)"
            } else {
                s.name()
            }
        })
        .collect();
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

/// Checks `req` against the sink's scheme: a mode the sink does not send, or a sink with no
/// CloudEvents binding, is refused with a message naming what to change.
pub fn resolve(req: &Request, scheme: Scheme) -> Result<CloudEvents, super::Error> {
    check_source(&req.source)?;
    let modes = modes(scheme);
    let Some(&default) = modes.first() else {
        return Err(super::Error::invalid(format!(
            "--format cloudevents: the {} sink has no CloudEvents binding (CloudEvents go to {}); use --format document with it",
            scheme.name(),
            sinks_with(None)
        )));
    };
    let mode = req.mode.unwrap_or(default);
    if !modes.contains(&mode) {
        return Err(super::Error::invalid(format!(
            "--cloudevents-mode {}: the {} sink sends CloudEvents in {} mode only ({} mode is for {}); drop --cloudevents-mode or give {}",
            mode.name(),
            scheme.name(),
            default.name(),
            mode.name(),
            sinks_with(Some(mode)),
            default.name()
        )));
    }
    Ok(CloudEvents {
        mode,
        source: req.source.clone(),
    })
}

/// The `source` when `--cloudevents-source` is not given: `/outboxctl/DATABASE/SCHEMA`, the
/// database name percent-encoded as a path segment (a schema name needs none).
pub fn default_source(database: &str, schema: &str) -> String {
    let mut db = String::new();
    for b in database.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            db.push(b as char);
        } else {
            db.push_str(&format!("%{b:02X}"));
        }
    }
    format!("/outboxctl/{db}/{schema}")
}

/// A `source` must be a non-empty URI-reference (RFC 3986): its characters unreserved,
/// reserved or a `%` escape.
fn check_source(source: &str) -> Result<(), super::Error> {
    let bytes = source.as_bytes();
    let mut bad = source.is_empty();
    let mut i = 0;
    while i < bytes.len() && !bad {
        let b = bytes[i];
        if b == b'%' {
            let hex = |j: usize| bytes.get(j).is_some_and(u8::is_ascii_hexdigit);
            bad = !(hex(i + 1) && hex(i + 2));
            i += 3;
            continue;
        }
        bad = !(b.is_ascii_alphanumeric() || b"-._~:/?#[]@!$&'()*+,;=".contains(&b));
        i += 1;
    }
    if bad {
        return Err(super::Error::invalid(format!(
            "invalid --cloudevents-source `{}`: give a URI-reference (RFC 3986), e.g. https://shop.example.com/orders or /shop/orders, with spaces and other characters percent-encoded",
            source.escape_debug()
        )));
    }
    Ok(())
}

impl CloudEvents {
    /// The event's attributes but `datacontenttype` (each binding carries that its own way, see
    /// [`Binding::headers`]) and `data`, in the order of the mapping table.
    pub fn attributes<'e>(&'e self, e: &'e Event) -> [(&'static str, Cow<'e, str>); 8] {
        [
            ("specversion", Cow::Borrowed(SPECVERSION)),
            ("id", Cow::Borrowed(e.idempotency_key.as_str())),
            ("source", Cow::Borrowed(self.source.as_str())),
            ("type", Cow::Borrowed(e.event_type.as_str())),
            (
                "subject",
                Cow::Owned(format!("{}/{}", e.aggregate_type, e.aggregate_id)),
            ),
            ("time", Cow::Owned(time(e))),
            (EXT_OUTBOX_ID, Cow::Owned(e.id.to_string())),
            (EXT_TENANT_ID, Cow::Owned(e.tenant_id.to_string())),
        ]
    }

    /// The structured-mode body: the event as one JSON object (the JSON event format), its
    /// `data` the payload's stored text, copied byte for byte.
    pub fn write_structured(&self, e: &Event, out: &mut Vec<u8>) {
        out.push(b'{');
        for (name, value) in self.attributes(e) {
            let _ = write!(out, "\"{name}\":");
            serde_json::to_writer(&mut *out, value.as_ref()).expect("writing to a Vec");
            out.push(b',');
            if name == "time" {
                let _ = write!(out, "\"datacontenttype\":\"{DATACONTENTTYPE}\",");
            }
        }
        out.extend_from_slice(b"\"data\":");
        out.extend_from_slice(e.payload.as_bytes());
        out.push(b'}');
    }

    /// The body of `e` in this mode: the payload alone (binary) or the whole event (structured).
    pub fn write_body(&self, e: &Event, out: &mut Vec<u8>) {
        match self.mode {
            Mode::Binary => out.extend_from_slice(e.payload.as_bytes()),
            Mode::Structured => self.write_structured(e, out),
        }
    }

    /// The transport headers of `e` for `binding`: the attributes in binary mode, none in
    /// structured mode (the body holds them all).
    pub fn headers(&self, binding: Binding, e: &Event) -> Vec<(String, String)> {
        match self.mode {
            Mode::Binary => binding.headers(self, e),
            Mode::Structured => Vec::new(),
        }
    }

    /// The body's media type: `application/json` (binary) or `application/cloudevents+json`.
    pub fn content_type(&self) -> &'static str {
        match self.mode {
            Mode::Binary => DATACONTENTTYPE,
            Mode::Structured => STRUCTURED_CONTENT_TYPE,
        }
    }
}

/// `time`: `created_at` in UTC with microseconds, as the document's `created_at`.
fn time(e: &Event) -> String {
    e.created_at
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A CloudEvents protocol binding's binary mode: how attribute headers are named and encoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Binding {
    /// HTTP: `ce-` headers, values percent-encoded; `datacontenttype` is the `Content-Type`
    /// header (the sink's own), never a `ce-datacontenttype`.
    Http,
    /// Kafka: `ce_` headers, values UTF-8 as they are; `datacontenttype` is the `content-type`
    /// header.
    Kafka,
    /// NATS: `ce-` headers for every attribute, `ce-datacontenttype` too, values percent-encoded.
    Nats,
    /// AMQP: `cloudEvents_` application properties (RabbitMQ: message headers), values as AMQP
    /// strings; `datacontenttype` is the `content_type` property (the sink's own). The `_`
    /// separator is the one the binding prefers (JMS selectors cannot name a `:`).
    Amqp,
}

impl Binding {
    /// The attribute headers' prefix.
    pub fn prefix(self) -> &'static str {
        match self {
            Binding::Http | Binding::Nats => "ce-",
            Binding::Kafka => "ce_",
            Binding::Amqp => "cloudEvents_",
        }
    }

    /// Row headers a transport must not carry beside the attributes, lower case: the prefixes
    /// (AMQP's in both of the binding's spellings) and the names that are attributes too.
    pub fn reserved(self) -> (&'static [&'static str], &'static [&'static str]) {
        match self {
            Binding::Http | Binding::Nats => (&["ce-"], &[]),
            Binding::Kafka => (&["ce_"], &["content-type"]),
            Binding::Amqp => (&["cloudevents_", "cloudevents:"], &[]),
        }
    }

    /// Binary mode's headers of `e`.
    fn headers(self, ce: &CloudEvents, e: &Event) -> Vec<(String, String)> {
        let value = |v: &str| match self {
            Binding::Http | Binding::Nats => encode_header_value(v),
            Binding::Kafka | Binding::Amqp => v.to_owned(),
        };
        let mut out: Vec<(String, String)> = ce
            .attributes(e)
            .iter()
            .map(|(name, v)| (format!("{}{name}", self.prefix()), value(v)))
            .collect();
        match self {
            Binding::Nats => out.push(("ce-datacontenttype".into(), value(DATACONTENTTYPE))),
            Binding::Kafka => out.push(("content-type".into(), DATACONTENTTYPE.into())),
            Binding::Http | Binding::Amqp => {}
        }
        out
    }
}

/// A header value as the HTTP and NATS bindings encode it: every space, `"`, `%` and every
/// character outside printable ASCII becomes `%XY` escapes of its UTF-8 bytes (upper case hex).
pub fn encode_header_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if (0x21..=0x7e).contains(&b) && b != b'"' && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        Event {
            aggregate_id: "A 42/é".into(),
            payload: r#"{"n": 12345678901234567890.000000000001}"#.into(),
            idempotency_key: "k-1".into(),
            ..Event::sample()
        }
    }

    fn ce(mode: Mode) -> CloudEvents {
        CloudEvents {
            mode,
            source: "/outboxctl/test/public".into(),
        }
    }

    #[test]
    fn header_values_are_percent_encoded_as_the_http_binding_says() {
        // The binding's own example.
        assert_eq!(
            encode_header_value("Euro \u{20ac} \u{1f600}"),
            "Euro%20%E2%82%AC%20%F0%9F%98%80"
        );
        assert_eq!(encode_header_value("a\"b%c\n"), "a%22b%25c%0A");
        assert_eq!(encode_header_value("order/42:x"), "order/42:x");
    }

    #[test]
    fn structured_keeps_the_payload_text_and_escapes_attributes() {
        let mut out = Vec::new();
        ce(Mode::Structured).write_structured(&event(), &mut out);
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            concat!(
                r#"{"specversion":"1.0","id":"k-1","source":"/outboxctl/test/public","#,
                r#""type":"order.placed","subject":"order/A 42/é","#,
                r#""time":"2026-01-02T03:04:05.000006Z","datacontenttype":"application/json","#,
                r#""outboxid":"7","tenantid":"00000000-0000-0000-0000-000000000000","#,
                r#""data":{"n": 12345678901234567890.000000000001}}"#
            )
        );
        assert!(crate::json::validate(&text).is_ok());
    }

    #[test]
    fn each_binding_names_its_headers() {
        let e = event();
        let names = |b: Binding| -> Vec<String> {
            ce(Mode::Binary)
                .headers(b, &e)
                .into_iter()
                .map(|(k, _)| k)
                .collect()
        };
        assert!(names(Binding::Http).contains(&"ce-subject".to_owned()));
        assert!(!names(Binding::Http)
            .iter()
            .any(|n| n.contains("datacontenttype")));
        assert!(names(Binding::Nats).contains(&"ce-datacontenttype".to_owned()));
        assert!(names(Binding::Kafka).contains(&"ce_outboxid".to_owned()));
        assert!(names(Binding::Kafka).contains(&"content-type".to_owned()));
        assert!(names(Binding::Amqp).contains(&"cloudEvents_tenantid".to_owned()));
        let http = ce(Mode::Binary).headers(Binding::Http, &e);
        assert!(http.contains(&("ce-subject".into(), "order/A%2042/%C3%A9".into())));
        let kafka = ce(Mode::Binary).headers(Binding::Kafka, &e);
        assert!(kafka.contains(&("ce_subject".into(), "order/A 42/é".into())));
        assert!(ce(Mode::Structured).headers(Binding::Http, &e).is_empty());
    }

    #[test]
    fn extension_names_are_valid_cloudevents_attribute_names() {
        for (name, _) in ce(Mode::Binary).attributes(&event()) {
            assert!(name.len() <= 20, "{name}");
            assert!(name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit()));
        }
    }

    #[test]
    fn modes_per_sink_and_refusals() {
        let req = |mode| Request {
            mode,
            source: "/s".into(),
        };
        let ok = |m, s| {
            resolve(&req(m), s)
                .map(|c| c.mode)
                .map_err(|e| e.to_string())
        };
        assert_eq!(ok(None, Scheme::Http), Ok(Mode::Binary));
        assert_eq!(
            ok(Some(Mode::Structured), Scheme::Https),
            Ok(Mode::Structured)
        );
        assert_eq!(ok(None, Scheme::Kafka), Ok(Mode::Binary));
        assert_eq!(ok(None, Scheme::Stdout), Ok(Mode::Structured));
        assert_eq!(ok(None, Scheme::File), Ok(Mode::Structured));
        let err = ok(Some(Mode::Structured), Scheme::Kafka).unwrap_err();
        assert_eq!(
            err,
            "--cloudevents-mode structured: the kafka sink sends CloudEvents in binary mode only (structured mode is for stdout, file and http(s)); drop --cloudevents-mode or give binary"
        );
        assert!(ok(Some(Mode::Binary), Scheme::Stdout).is_err());
        assert!(ok(None, Scheme::Redis)
            .unwrap_err()
            .contains("redis sink has no CloudEvents binding"));
        for bad in ["", "a b", "/x/%zz", "/ü"] {
            let r = Request {
                mode: None,
                source: bad.into(),
            };
            assert!(resolve(&r, Scheme::Http).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_default_source_names_the_database_and_schema() {
        assert_eq!(default_source("test", "public"), "/outboxctl/test/public");
        assert_eq!(
            default_source("my db/ü", "s_1"),
            "/outboxctl/my%20db%2F%C3%BC/s_1"
        );
        assert!(check_source(&default_source("my db/ü", "s")).is_ok());
    }
}
