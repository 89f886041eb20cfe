//! The NATS JetStream sink: publishes each event to a subject and waits for the stream's ack.
//!
//! `--sink 'nats://[user:pass@]host:4222?subject=outbox.{event_type}'`. Each message carries the
//! JSON document as its body, the row's headers as NATS headers (never a `Nats-*` one: see
//! [`HeaderPolicy::nats`]), and `Nats-Msg-Id` set to the idempotency key, so JetStream itself
//! drops a re-publish within the stream's duplicate window (default 2 minutes): exactly once in
//! effect, for the common crash-between-publish-and-mark case.
//! A stream capturing the subjects must exist (the relay does not create one). A server that is
//! down, times out acks, or has no stream for the subject is `Unavailable` (see
//! [`super::batch_verdict`]); a message over `max_payload` is `Permanent`.

use std::time::Duration;

use async_nats::jetstream;

use super::headers::{self, HeaderPolicy};
use super::template::Template;
use super::{publish_each, write_envelope, Event, Outcome, PublishCtl, Sink, SinkError};
use crate::exit::CodedError;

pub struct NatsSink {
    js: jetstream::Context,
    subject: Template,
    display: String,
    row_headers: HeaderPolicy,
}

/// Subject template used when the URL has no `subject` parameter.
pub const DEFAULT_SUBJECT: &str = "outbox.{event_type}";

impl NatsSink {
    /// Connects in the background: a NATS server that is down now only makes publishes fail
    /// (and retry) until it is back.
    pub async fn connect(spec: &str, timeout: Duration) -> Result<Self, CodedError> {
        let url = url::Url::parse(spec)
            .map_err(|e| CodedError::usage(format!("invalid --sink `nats://…`: {e}")))?;
        let host = url
            .host_str()
            .ok_or_else(|| CodedError::usage("invalid --sink: a nats:// URL needs a host"))?;
        let port = url.port().unwrap_or(4222);
        let subject = url
            .query_pairs()
            .find(|(k, _)| k == "subject")
            .map(|(_, v)| v.into_owned())
            .unwrap_or_else(|| DEFAULT_SUBJECT.to_owned());
        if subject.is_empty()
            || subject.contains(char::is_whitespace)
            || subject.contains(['*', '>'])
        {
            return Err(CodedError::usage(format!(
                "invalid --sink: subject `{subject}` must be a plain NATS subject (no spaces or wildcards), e.g. outbox.{{event_type}}"
            )));
        }
        let template = Template::parse(&subject, &format!("invalid --sink: subject `{subject}`"))
            .map_err(CodedError::usage)?;
        let last_problem = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let mut opts = async_nats::ConnectOptions::new()
            .connection_timeout(timeout)
            .retry_on_initial_connect()
            .name("outboxctl")
            .event_callback(move |event| {
                let last = std::sync::Arc::clone(&last_problem);
                async move { log_connection_event(&last, &event) }
            });
        if !url.username().is_empty() {
            let user = percent_decode(url.username());
            opts = match url.password() {
                Some(p) => opts.user_and_password(user, percent_decode(p)),
                None => opts.token(user),
            };
        }
        let client = opts
            .connect(format!("nats://{host}:{port}"))
            .await
            .map_err(|e| CodedError::usage(format!("invalid --sink: {e}")))?;
        let mut js = jetstream::new(client);
        js.set_timeout(timeout);
        let display = format!(
            "nats://{}{host}:{port}?subject={subject}",
            if url.username().is_empty() {
                ""
            } else {
                "***@"
            }
        );
        Ok(Self {
            js,
            subject: template,
            display,
            row_headers: HeaderPolicy::nats(),
        })
    }

    async fn publish_one(&self, e: &Event) -> Result<(), SinkError> {
        let subject = self.subject.expand(e);
        if subject.contains(char::is_whitespace)
            || subject.contains(['*', '>'])
            || subject.contains("..")
        {
            return Err(SinkError::Permanent(format!(
                "subject `{subject}` is not a valid NATS subject"
            )));
        }
        let mut body = Vec::with_capacity(256 + e.payload.len());
        write_envelope(e, &mut body);
        let mut headers = async_nats::HeaderMap::new();
        // The policy has checked names and values (async-nats panics on invalid ones).
        for (k, v) in headers::row_headers(e, &self.row_headers) {
            if let (Ok(name), Ok(value)) = (
                k.parse::<async_nats::HeaderName>(),
                v.parse::<async_nats::HeaderValue>(),
            ) {
                headers.append(name, value);
            }
        }
        let msg_id = e
            .idempotency_key
            .parse::<async_nats::HeaderValue>()
            .map_err(|_| {
                SinkError::Permanent(
                    "the idempotency key holds a line break: not a valid Nats-Msg-Id".into(),
                )
            })?;
        headers.insert("Nats-Msg-Id", msg_id);
        let ack = self
            .js
            .publish_with_headers(subject.clone(), headers, body.into())
            .await
            .map_err(|err| classify_publish(&subject, &err))?;
        ack.await.map_err(|err| classify_publish(&subject, &err))?;
        Ok(())
    }
}

/// The client connects and reconnects in the background, so a refused login (or a server going
/// away) would only show as publish timeouts: say it at WARN, once per distinct problem, and when
/// the connection is back. async-nats' own log lines are filtered out (see `logging`); its events
/// name the problem (`authorization violation`) and never the credentials.
fn log_connection_event(last: &std::sync::Mutex<String>, event: &async_nats::Event) {
    let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
    match event {
        async_nats::Event::Connected => {
            if !last.is_empty() {
                tracing::info!(sink = "nats", "NATS connection is back");
                last.clear();
            }
        }
        // Closed and draining are the relay's own doing (at exit); slow consumers are about
        // subscriptions, which the relay has none of.
        async_nats::Event::SlowConsumer(_)
        | async_nats::Event::Draining
        | async_nats::Event::Closed => {}
        other => {
            let text = other.to_string();
            if *last != text {
                tracing::warn!(sink = "nats", problem = %text, "NATS connection problem");
                *last = text;
            }
        }
    }
}

/// Whose fault a failed publish is: a message too large is the event's (`Permanent`); a server
/// that is down, slow to ack, backed up, or has no stream for the subject cannot take anything
/// now (`Unavailable`: an outage when the whole batch fails so); the rest is this event's retry.
fn classify_publish(subject: &str, err: &jetstream::context::PublishError) -> SinkError {
    use jetstream::context::PublishErrorKind as K;
    match err.kind() {
        K::MaxPayloadExceeded => SinkError::Permanent(format!("NATS: {err}")),
        K::StreamNotFound => no_stream(subject),
        K::TimedOut | K::BrokenPipe | K::MaxAckPending => {
            SinkError::unavailable(format!("NATS: {err}"))
        }
        K::WrongLastMessageId | K::WrongLastSequence => {
            SinkError::retryable(format!("NATS: {err}"))
        }
        _ => classify(subject, &err.to_string()),
    }
}

fn no_stream(subject: &str) -> SinkError {
    SinkError::unavailable(format!(
        "NATS: no JetStream stream captures subject `{subject}`; create one (e.g. subjects outbox.>)"
    ))
}

fn classify(subject: &str, err: &str) -> SinkError {
    let lower = err.to_ascii_lowercase();
    if lower.contains("maximum payload")
        || lower.contains("max_payload")
        || lower.contains("message size")
    {
        return SinkError::Permanent(format!("NATS: {err}"));
    }
    if lower.contains("no responders") || lower.contains("no stream found") {
        return no_stream(subject);
    }
    if [
        "disconnect",
        "connection",
        "timed out",
        "broken pipe",
        "io error",
    ]
    .iter()
    .any(|w| lower.contains(w))
    {
        return SinkError::unavailable(format!("NATS: {err}"));
    }
    SinkError::retryable(format!("NATS: {err}"))
}

fn percent_decode(s: &str) -> String {
    url::form_urlencoded::parse(format!("x={s}").as_bytes())
        .next()
        .map(|(_, v)| v.into_owned())
        .unwrap_or_default()
}

#[async_trait::async_trait]
impl Sink for NatsSink {
    async fn publish(&self, events: &[Event], ctl: &PublishCtl) -> Vec<Outcome> {
        publish_each(events, ctl, |e| self.publish_one(e)).await
    }

    fn describe(&self) -> String {
        self.display.clone()
    }
}
