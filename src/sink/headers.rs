//! The row's headers as transport headers: one rule for every sink that carries headers (HTTP,
//! NATS, RabbitMQ, Kafka), with a per-sink [`HeaderPolicy`].
//!
//! A row header rides on the message; it may never change the message's framing, routing or
//! dedup. So a header the transport reserves (HTTP framing and hop-by-hop headers and the ones the
//! relay sets; NATS `Nats-*`; RabbitMQ `x-*`, `CC`/`BCC` and the properties the relay sets), one the
//! transport cannot carry (an invalid name or value) or one over the size bounds is **not sent as
//! a transport header**, with one WARN per header name per run; the event is still delivered.
//! Nothing is lost: the document in the body carries every row header in its `headers` field,
//! byte for byte. (A prefix such as `X-Outbox-Header-` was the alternative; it was not chosen
//! because it would invent a second, transport-specific naming contract for consumers while the
//! document already holds the headers, and a prefixed name can itself be invalid or too long.)
//! An invalid header is not the event's fault either: the headers are a convenience copy of part
//! of the document, so the transport's limits never dead-letter an event.

use std::collections::HashSet;
use std::sync::Mutex;

use super::Event;
use crate::lock::lock;

/// Longest header name sent (AMQP field names are short strings of at most 255 bytes).
pub const MAX_NAME_BYTES: usize = 255;
/// Longest header value sent: common HTTP servers refuse a header line over 8 KiB (431), NATS
/// and RabbitMQ count headers against the message or frame size.
pub const MAX_VALUE_BYTES: usize = 4096;
/// The most header bytes (names and values) sent per message; later headers (by name) are not.
pub const MAX_TOTAL_BYTES: usize = 16 * 1024;
/// Header names warned about per sink, at most (then one last WARN says so).
const MAX_WARNED: usize = 256;
/// Headers the Kafka sink sets on every record (`KafkaSink::record_headers`).
pub const KAFKA_RELAY_HEADERS: &[&str] = &["id", "idempotency_key", "event_type"];

/// HTTP framing and hop-by-hop headers (RFC 9110/9112), and routing overrides a receiver or a
/// proxy may honour. Refused in `--http-header` too.
pub const HTTP_FRAMING: &[&str] = &[
    "content-length",
    "transfer-encoding",
    "content-encoding",
    "host",
    "connection",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "http2-settings",
    "expect",
];
/// Prefixes of HTTP headers that belong to a proxy or to the relay's signature.
pub const HTTP_RESERVED_PREFIXES: &[&str] = &["proxy-", "webhook-"];
/// Headers the HTTP sink sets itself, and routing overrides (a gateway may re-route or change the
/// method on them).
const HTTP_RELAY_SET: &[&str] = &[
    "content-type",
    "idempotency-key",
    "user-agent",
    "forwarded",
    "x-http-method-override",
    "x-http-method",
    "x-method-override",
];
const HTTP_ROUTING_PREFIXES: &[&str] = &["x-forwarded-"];

/// RabbitMQ: sender-selected distribution headers (they route copies to other queues) and the
/// properties the relay sets, in both spellings.
const AMQP_RESERVED: &[&str] = &[
    "cc",
    "bcc",
    "message_id",
    "message-id",
    "type",
    "content_type",
    "content-type",
    "app_id",
    "app-id",
    "delivery_mode",
    "delivery-mode",
];

/// Which row headers a transport may carry.
pub struct HeaderPolicy {
    /// The transport, for the WARN line: `http`, `nats`, `amqp`, `kafka`.
    transport: &'static str,
    /// Reserved names, lower case.
    reserved: HashSet<String>,
    /// Reserved prefixes, lower case.
    reserved_prefixes: Vec<&'static str>,
    /// Why the reserved names are reserved (for the WARN line).
    reserved_why: &'static str,
    name_ok: fn(&str) -> bool,
    value_ok: fn(&str) -> bool,
    warned: Mutex<HashSet<String>>,
    /// `--format cloudevents`: the binding's attribute headers (lower case), never a row's; and
    /// the body no longer holds the row's headers.
    cloudevents: Option<(&'static [&'static str], &'static [&'static str])>,
}

/// Why a header was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Skip {
    Reserved,
    /// A CloudEvents attribute header of the binding (`--format cloudevents`).
    CloudEvents,
    InvalidName,
    InvalidValue,
    TooLong,
    OverBudget,
}

impl HeaderPolicy {
    /// HTTP: framing, hop-by-hop (`Proxy-*` too) and routing headers, every header the relay sets
    /// (`Content-Type`, `Idempotency-Key`, `User-Agent`, `webhook-*`) and the `--http-header`
    /// names in `configured`. Names must be RFC 9110 tokens, values free of control characters
    /// (UTF-8 goes as is, as RFC 9110 obs-text).
    pub fn http<'a>(configured: impl IntoIterator<Item = &'a str>) -> Self {
        let mut reserved: HashSet<String> = HTTP_FRAMING
            .iter()
            .chain(HTTP_RELAY_SET)
            .map(|s| s.to_string())
            .collect();
        reserved.extend(configured.into_iter().map(str::to_ascii_lowercase));
        let prefixes = HTTP_RESERVED_PREFIXES.iter().chain(HTTP_ROUTING_PREFIXES);
        Self {
            name_ok: |n| reqwest::header::HeaderName::from_bytes(n.as_bytes()).is_ok(),
            value_ok: |v| reqwest::header::HeaderValue::from_str(v).is_ok(),
            ..Self::carrying_any(
                "http",
                reserved,
                prefixes.copied().collect(),
                "framing, hop-by-hop, routing or set by the relay",
            )
        }
    }

    /// NATS: every `Nats-*` header (JetStream reads them: `Nats-Msg-Id` is the dedup id,
    /// `Nats-Rollup` purges, `Nats-Expected-*` fail the publish). Names printable ASCII without
    /// `:`, values without CR/LF.
    pub fn nats() -> Self {
        Self {
            name_ok: |n| n.parse::<async_nats::HeaderName>().is_ok(),
            value_ok: |v| v.parse::<async_nats::HeaderValue>().is_ok(),
            ..Self::carrying_any(
                "nats",
                HashSet::new(),
                vec!["nats-"],
                "Nats-* headers control JetStream (dedup id, rollup, expectations)",
            )
        }
    }

    /// RabbitMQ: `x-*` (broker arguments: delays, dead-lettering, dedup, stream filters),
    /// `CC`/`BCC` (route copies to other queues) and the properties the relay sets.
    pub fn amqp() -> Self {
        Self::carrying_any(
            "amqp",
            AMQP_RESERVED.iter().map(|s| s.to_string()).collect(),
            vec!["x-"],
            "x-* and CC/BCC headers steer the broker; message properties are the relay's",
        )
    }

    /// Kafka: the headers the relay sets on every record (`id`, `idempotency_key`,
    /// `event_type`, any case). Kafka headers are arbitrary byte strings, so any other name and
    /// value is carried (within the size bounds).
    pub fn kafka() -> Self {
        Self::carrying_any(
            "kafka",
            KAFKA_RELAY_HEADERS.iter().map(|s| s.to_string()).collect(),
            vec![],
            "set by the relay on every record",
        )
    }

    /// `transport`'s policy: `reserved` names and names with one of `prefixes` are not sent
    /// (`why` says why, in the WARN); any other name and value is (the transports that restrict
    /// names or values replace `name_ok` and `value_ok`).
    fn carrying_any(
        transport: &'static str,
        reserved: HashSet<String>,
        prefixes: Vec<&'static str>,
        why: &'static str,
    ) -> Self {
        Self {
            transport,
            reserved,
            reserved_prefixes: prefixes,
            reserved_why: why,
            name_ok: |_| true,
            value_ok: |_| true,
            warned: Mutex::new(HashSet::new()),
            cloudevents: None,
        }
    }

    /// With `--format cloudevents`: `binding`'s attribute headers are the relay's too (a row's
    /// `ce-id` would replace the event's id), and the WARN no longer says the body keeps the
    /// header (the body is the payload, or the CloudEvent, without the row's headers).
    pub fn for_cloudevents(mut self, binding: Option<super::cloudevents::Binding>) -> Self {
        self.cloudevents = binding.map(|b| b.reserved());
        self
    }

    /// Whether `name` (any case) is one of the CloudEvents attribute headers.
    fn is_cloudevents(&self, name: &str) -> bool {
        let lower = name.to_ascii_lowercase();
        self.cloudevents.is_some_and(|(prefixes, names)| {
            prefixes.iter().any(|p| lower.starts_with(p)) || names.contains(&lower.as_str())
        })
    }

    /// Whether `name` (any case) is reserved by this transport.
    pub fn is_reserved(&self, name: &str) -> bool {
        let lower = name.to_ascii_lowercase();
        self.reserved.contains(&lower)
            || self.reserved_prefixes.iter().any(|p| lower.starts_with(p))
    }

    fn check(&self, name: &str, value: &str) -> Result<(), Skip> {
        if name.is_empty() || name.len() > MAX_NAME_BYTES || !(self.name_ok)(name) {
            return Err(Skip::InvalidName);
        }
        if self.is_cloudevents(name) {
            return Err(Skip::CloudEvents);
        }
        if self.is_reserved(name) {
            return Err(Skip::Reserved);
        }
        if value.len() > MAX_VALUE_BYTES {
            return Err(Skip::TooLong);
        }
        if !(self.value_ok)(value) {
            return Err(Skip::InvalidValue);
        }
        Ok(())
    }

    /// One WARN per header name (any case) per sink; never the value.
    fn warn(&self, e: &Event, name: &str, skip: Skip) {
        let key: String = name.to_ascii_lowercase().chars().take(64).collect();
        {
            let mut warned = lock(&self.warned);
            if warned.contains(&key) {
                return;
            }
            if warned.len() >= MAX_WARNED {
                // A NUL key marks "said so already"; no header name holds one.
                if warned.insert("\0".into()) {
                    tracing::warn!(
                        sink = self.transport,
                        "more event headers are not sent as transport headers; their names are not logged"
                    );
                }
                return;
            }
            warned.insert(key);
        }
        let shown: String = name.chars().take(64).collect();
        let reason = match skip {
            Skip::Reserved => self.reserved_why,
            Skip::CloudEvents => "a CloudEvents attribute header, set by the relay",
            Skip::InvalidName => "not a valid header name for this transport",
            Skip::InvalidValue => "its value is not valid for this transport",
            Skip::TooLong => "its value is longer than 4096 bytes",
            Skip::OverBudget => "the event's headers exceed 16 KiB",
        };
        let kept = if self.cloudevents.is_some() {
            "with --format cloudevents the body does not hold it"
        } else {
            "it stays in the document's headers"
        };
        tracing::warn!(
            sink = self.transport,
            id = e.id,
            header = ?shown,
            reason,
            "event header not sent ({kept}; logged once per name)"
        );
    }
}

/// The row's stored headers that `policy` lets the transport carry, as name/value pairs
/// (non-string values as their JSON text), in name order. The others are skipped with one WARN
/// per name (see the module doc).
pub fn row_headers(e: &Event, policy: &HeaderPolicy) -> Vec<(String, String)> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&e.headers).unwrap_or_default();
    let mut out = Vec::with_capacity(map.len());
    let mut total = 0;
    for (name, v) in map {
        let value = match v {
            serde_json::Value::String(s) => s,
            other => other.to_string(),
        };
        let verdict = policy.check(&name, &value).and_then(|()| {
            if total + name.len() + value.len() > MAX_TOTAL_BYTES {
                Err(Skip::OverBudget)
            } else {
                Ok(())
            }
        });
        match verdict {
            Ok(()) => {
                total += name.len() + value.len();
                out.push((name, value));
            }
            Err(skip) => policy.warn(e, &name, skip),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(headers: &str) -> Event {
        Event {
            headers: headers.into(),
            ..Event::sample()
        }
    }

    fn names(e: &Event, p: &HeaderPolicy) -> Vec<String> {
        row_headers(e, p).into_iter().map(|(k, _)| k).collect()
    }

    #[test]
    fn http_keeps_plain_headers_and_skips_framing_relay_set_and_configured_ones() {
        let p = HeaderPolicy::http(["X-Tenant"]);
        let e = event(
            r#"{"Content-Length":"5","transfer-encoding":"chunked","HOST":"evil","Proxy-Authorization":"x",
                "webhook-id":"x","Idempotency-Key":"x","x-tenant":"x","X-Forwarded-Host":"x","TE":"x",
                "schema-version":3,"bad name":"x","x-nl":"a\nb","x-utf8":"é","keep":"ok"}"#,
        );
        assert_eq!(names(&e, &p), vec!["keep", "schema-version", "x-utf8"]);
        assert_eq!(row_headers(&e, &p)[1].1, "3", "non-strings as JSON text");
    }

    #[test]
    fn nats_skips_every_nats_header() {
        let p = HeaderPolicy::nats();
        let e = event(
            r#"{"Nats-Msg-Id":"x","NATS-ROLLUP":"sub","nats-expected-last-sequence":"1","a:b":"x","x-ok":"é"}"#,
        );
        assert_eq!(names(&e, &p), vec!["x-ok"]);
    }

    #[test]
    fn amqp_skips_broker_arguments_routing_and_relay_properties() {
        let p = HeaderPolicy::amqp();
        let long = "n".repeat(300);
        let e = event(&format!(
            r#"{{"x-delay":"1","X-Match":"any","CC":"q","bcc":"q","message_id":"x","type":"x","{long}":"x","ok":"1"}}"#
        ));
        assert_eq!(names(&e, &p), vec!["ok"]);
    }

    #[test]
    fn kafka_skips_the_headers_the_relay_sets() {
        let p = HeaderPolicy::kafka();
        let e =
            event(r#"{"ID":"x","idempotency_key":"x","Event_Type":"x","x-delay":"1","a:b c":"é"}"#);
        assert_eq!(names(&e, &p), vec!["a:b c", "x-delay"]);
    }

    #[test]
    fn with_cloudevents_the_bindings_attribute_headers_are_the_relays() {
        use super::super::cloudevents::Binding;
        let e = event(
            r#"{"ce-id":"x","CE-Source":"x","ce_id":"x","Content-Type":"x","cloudEvents_id":"x","cloudevents:type":"x","keep":"1"}"#,
        );
        let http = HeaderPolicy::http([]).for_cloudevents(Some(Binding::Http));
        assert_eq!(names(&e, &http), vec!["ce_id", "cloudEvents_id", "keep"]);
        let kafka = HeaderPolicy::kafka().for_cloudevents(Some(Binding::Kafka));
        assert_eq!(
            names(&e, &kafka),
            vec![
                "CE-Source",
                "ce-id",
                "cloudEvents_id",
                "cloudevents:type",
                "keep"
            ]
        );
        let amqp = HeaderPolicy::amqp().for_cloudevents(Some(Binding::Amqp));
        assert_eq!(
            names(&e, &amqp),
            vec!["CE-Source", "ce-id", "ce_id", "keep"]
        );
        let nats = HeaderPolicy::nats().for_cloudevents(Some(Binding::Nats));
        assert_eq!(
            names(&e, &nats),
            vec!["Content-Type", "ce_id", "cloudEvents_id", "keep"]
        );
        assert_eq!(
            names(&e, &HeaderPolicy::nats()).len(),
            6,
            "no change without it"
        );
    }

    #[test]
    fn sizes_are_bounded() {
        let p = HeaderPolicy::nats();
        let big = "v".repeat(MAX_VALUE_BYTES + 1);
        let e = event(&format!(r#"{{"a":"{big}","b":"1"}}"#));
        assert_eq!(names(&e, &p), vec!["b"]);
        let fill = "v".repeat(MAX_VALUE_BYTES - 10);
        let many: Vec<String> = (0..6).map(|i| format!(r#""h{i}":"{fill}""#)).collect();
        let e = event(&format!("{{{}}}", many.join(",")));
        assert_eq!(names(&e, &p).len(), 4, "within 16 KiB");
        assert!(row_headers(&event("[1]"), &p).is_empty());
    }
}
