//! The NATS JetStream sink: publishes each event to a subject and waits for the stream's ack.
//!
//! `--sink 'nats://[user:pass@]host:4222?subject=outbox.{event_type}'`. Each message carries the
//! JSON document as its body, the row's headers as NATS headers (never a `Nats-*` one: see
//! [`HeaderPolicy::nats`]), and `Nats-Msg-Id` set to the idempotency key, so JetStream itself
//! drops a re-publish within the stream's duplicate window (default 2 minutes): exactly once in
//! effect, for the common crash-between-publish-and-mark case.
//! A stream capturing the subjects must exist (the relay does not create one). What each
//! refusal means: [`NatsSink::classify_publish`]. In short: a message over `max_payload` (or the
//! stream's `max_msg_size`) is `Permanent`; a server that is down or times out acks is
//! `Unavailable` (see [`super::batch_verdict`]); a full stream (`max_msgs`/`max_bytes` with
//! discard=new: JetStream error 10077), a server out of JetStream resources, a subject no stream
//! captures and a subject the user may not publish to are [`SinkError::Backpressure`], never
//! counted.
//!
//! With `--format cloudevents` the body is the payload and the attributes travel as `ce-*`
//! headers, `ce-datacontenttype` too ([`Binding::Nats`], binary mode), beside `Nats-Msg-Id`.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_nats::jetstream;

use super::cloudevents::{Binding, CloudEvents};
use super::headers::{self, HeaderPolicy};
use super::template::Template;
use super::{publish_each, write_envelope, Event, Outcome, PublishCtl, Sink, SinkError};
use crate::lock::lock;

pub struct NatsSink {
    js: jetstream::Context,
    subject: Template,
    display: String,
    row_headers: HeaderPolicy,
    /// What the connection's events said, for the cause of an ack that never came.
    problems: Arc<Mutex<Problems>>,
    /// How long a server error is taken as the cause of a later ack timeout.
    recent: Duration,
    /// `--format cloudevents`; `None`: the document.
    cloudevents: Option<CloudEvents>,
}

/// What the server or the connection said outside any reply. A publish the server refuses
/// (`Permissions Violation for Publish to "…"`) and a connection it does not let in
/// (`authorization violation`) get no reply at all, so their acks only time out: these name the
/// cause.
#[derive(Debug, Default)]
struct Problems {
    /// The connection's last problem, until it is connected again.
    connection: Option<String>,
    /// The server's last errors (`-ERR`), newest last, at most [`KEPT_SERVER_ERRORS`].
    server: VecDeque<(Instant, String)>,
}

const KEPT_SERVER_ERRORS: usize = 16;

/// Why an ack for `subject` did not come, by what the server said lately.
#[derive(Debug, PartialEq, Eq)]
enum AckCause {
    /// The server refused this subject to this user.
    Denied(String),
    /// Something else the connection or the server reported.
    Other(String),
}

impl Problems {
    fn cause(&self, subject: &str, recent: Duration) -> Option<AckCause> {
        let fresh = self
            .server
            .iter()
            .rev()
            .filter(|(at, _)| at.elapsed() <= recent);
        let quoted = format!("\"{subject}\"");
        let mut other = None;
        for (_, text) in fresh {
            let lower = text.to_ascii_lowercase();
            if lower.contains("permissions violation for publish") && text.contains(&quoted) {
                return Some(AckCause::Denied(text.clone()));
            }
            other.get_or_insert_with(|| text.clone());
        }
        if let Some(c) = &self.connection {
            return Some(AckCause::Other(format!("NATS connection problem: {c}")));
        }
        other.map(|t| AckCause::Other(format!("last server error: {t}")))
    }
}

/// Subject template used when the URL has no `subject` parameter.
pub const DEFAULT_SUBJECT: &str = "outbox.{event_type}";

/// What a `nats://` `--sink` names: the server, the subject template and the credentials (read
/// from the URL, never printed). The one parser of it: the sink and `doctor` use it.
#[derive(Clone)]
pub struct Target {
    pub host: String,
    pub port: u16,
    /// The subject template's text.
    pub subject: String,
    pub template: Template,
    /// User and password, or a token alone (percent-decoded).
    credentials: Option<(String, Option<String>)>,
}

/// The credentials never show, in a log line or a panic alike.
impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Target")
            .field("server", &self.server())
            .field("subject", &self.subject)
            .field("credentials", &self.credentials.as_ref().map(|_| "***"))
            .finish()
    }
}

impl Target {
    /// The target of `spec` when it is a `nats://` sink (`None` for any other sink).
    pub fn of(spec: &str) -> Option<Result<Self, super::Error>> {
        (super::Scheme::of(spec) == Some(super::Scheme::Nats)).then(|| Self::parse(spec.trim()))
    }

    pub fn parse(spec: &str) -> Result<Self, super::Error> {
        let url = url::Url::parse(spec)
            .map_err(|e| super::Error::invalid(format!("invalid --sink `nats://…`: {e}")))?;
        let host = url
            .host_str()
            .ok_or_else(|| super::Error::invalid("invalid --sink: a nats:// URL needs a host"))?
            .to_owned();
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
            return Err(super::Error::invalid(format!(
                "invalid --sink: subject `{subject}` must be a plain NATS subject (no spaces or wildcards), e.g. outbox.{{event_type}}"
            )));
        }
        let template = Template::parse(&subject, &format!("invalid --sink: subject `{subject}`"))
            .map_err(super::Error::invalid)?;
        let credentials = (!url.username().is_empty()).then(|| {
            (
                percent_decode(url.username()),
                url.password().map(percent_decode),
            )
        });
        Ok(Self {
            host,
            port,
            subject,
            template,
            credentials,
        })
    }

    /// The server to connect to, without credentials.
    pub fn server(&self) -> String {
        format!("nats://{}:{}", self.host, self.port)
    }

    /// `opts` with the URL's credentials.
    pub fn authenticate(&self, opts: async_nats::ConnectOptions) -> async_nats::ConnectOptions {
        match &self.credentials {
            None => opts,
            Some((user, Some(password))) => opts.user_and_password(user.clone(), password.clone()),
            Some((token, None)) => opts.token(token.clone()),
        }
    }

    /// The sink's description: the credentials hidden.
    fn display(&self) -> String {
        format!(
            "nats://{}{}:{}?subject={}",
            if self.credentials.is_some() {
                "***@"
            } else {
                ""
            },
            self.host,
            self.port,
            self.subject
        )
    }
}

impl NatsSink {
    /// Connects in the background: a NATS server that is down now only makes publishes fail
    /// (and retry) until it is back.
    pub async fn connect(spec: &str, timeout: Duration) -> Result<Self, super::Error> {
        let target = Target::parse(spec)?;
        let problems = Arc::new(Mutex::new(Problems::default()));
        let seen = Arc::clone(&problems);
        let opts = async_nats::ConnectOptions::new()
            .connection_timeout(timeout)
            .retry_on_initial_connect()
            .name("outboxctl")
            .event_callback(move |event| {
                let seen = Arc::clone(&seen);
                async move { log_connection_event(&seen, &event) }
            });
        let opts = target.authenticate(opts);
        let client = opts
            .connect(target.server())
            .await
            .map_err(|e| super::Error::invalid(format!("invalid --sink: {e}")))?;
        let mut js = jetstream::new(client);
        // The ack's own timeout comes first, so its error can name the cause.
        js.set_timeout(super::client_timeout(timeout));
        let display = target.display();
        Ok(Self {
            js,
            subject: target.template,
            display,
            row_headers: HeaderPolicy::nats(),
            problems,
            recent: (timeout * 2).max(Duration::from_secs(60)),
            cloudevents: None,
        })
    }

    /// Sends CloudEvents (binary mode) instead of the document.
    pub fn with_cloudevents(mut self, ce: Option<CloudEvents>) -> Self {
        self.row_headers = HeaderPolicy::nats().for_cloudevents(ce.as_ref().map(|_| Binding::Nats));
        self.cloudevents = ce;
        self
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
        let mut headers = async_nats::HeaderMap::new();
        match &self.cloudevents {
            None => write_envelope(e, &mut body),
            Some(ce) => {
                ce.write_body(e, &mut body);
                // Percent-encoded: printable ASCII, always a valid value.
                for (k, v) in ce.headers(Binding::Nats, e) {
                    if let (Ok(name), Ok(value)) = (
                        k.parse::<async_nats::HeaderName>(),
                        v.parse::<async_nats::HeaderValue>(),
                    ) {
                        headers.insert(name, value);
                    }
                }
            }
        }
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
            .map_err(|err| self.classify_publish(&subject, &err))?;
        ack.await
            .map_err(|err| self.classify_publish(&subject, &err))?;
        Ok(())
    }

    /// Whose fault a failed publish is:
    /// - a message too large for the server (`max_payload`) or the stream (`max_msg_size`,
    ///   JetStream 10054): the event's (`Permanent`);
    /// - a stream that is full (JetStream 10077 `maximum messages exceeded` / `maximum bytes
    ///   exceeded` with discard=new), a server or account out of JetStream resources (10023,
    ///   10047, 10028, 10002), no stream for the subject, a subject the user may not publish to:
    ///   the sink's backpressure or configuration (`Backpressure`: never counted);
    /// - a server that is down, slow to ack or backed up: `Unavailable` (an outage when the whole
    ///   batch fails so), naming what the server or the connection last said (an authorization
    ///   violation, a permissions violation on the reply subject);
    /// - the rest is this event's retry.
    fn classify_publish(&self, subject: &str, err: &jetstream::context::PublishError) -> SinkError {
        use jetstream::context::PublishErrorKind as K;
        match err.kind() {
            K::MaxPayloadExceeded => SinkError::Permanent(format!("NATS: {err}")),
            K::StreamNotFound => no_stream(subject),
            K::TimedOut => {
                let cause = lock(&self.problems).cause(subject, self.recent);
                match cause {
                    Some(AckCause::Denied(text)) => SinkError::backpressure(format!(
                        "NATS: the server refuses publishing to `{subject}` ({text}): grant the user publish permission on it; its events wait, no attempt counted"
                    )),
                    Some(AckCause::Other(text)) => {
                        SinkError::unavailable(format!("NATS: {err}; {text}"))
                    }
                    None => SinkError::unavailable(format!("NATS: {err}")),
                }
            }
            K::BrokenPipe | K::MaxAckPending => SinkError::unavailable(format!("NATS: {err}")),
            K::WrongLastMessageId | K::WrongLastSequence => {
                SinkError::retryable(format!("NATS: {err}"))
            }
            _ => match jetstream_error(err) {
                Some(js) => classify_jetstream(subject, js),
                None => classify(subject, &err.to_string()),
            },
        }
    }
}

/// The JetStream API error a failed publish carries (its ack's `error`), if any.
fn jetstream_error(err: &jetstream::context::PublishError) -> Option<&jetstream::Error> {
    std::error::Error::source(err)?.downcast_ref::<jetstream::Error>()
}

/// A JetStream error in a publish ack, by its `err_code` (see [`NatsSink::classify_publish`]).
fn classify_jetstream(subject: &str, e: &jetstream::Error) -> SinkError {
    use jetstream::ErrorCode as C;
    let message = format!(
        "NATS: stream refused `{subject}`: {e} (JetStream error {})",
        e.error_code().0
    );
    match e.error_code() {
        C::STREAM_MESSAGE_EXCEEDS_MAXIMUM => SinkError::Permanent(message),
        C::STREAM_STORE_FAILED => SinkError::backpressure(format!(
            "{message}: the stream is full (max_msgs/max_bytes with discard=new): raise its limits or let consumers catch up"
        )),
        C::INSUFFICIENT_RESOURCES
        | C::STORAGE_RESOURCES_EXCEEDED
        | C::MEMORY_RESOURCES_EXCEEDED
        | C::ACCOUNT_RESOURCES_EXCEEDED => SinkError::backpressure(message),
        C::STREAM_NOT_FOUND => no_stream(subject),
        _ => classify(subject, &message),
    }
}

/// The client connects and reconnects in the background, so a refused login (or a server going
/// away) would only show as publish timeouts: say it at WARN, once per distinct problem, and when
/// the connection is back. async-nats' own log lines are filtered out (see `logging`); its events
/// name the problem (`authorization violation`) and never the credentials.
/// Server errors (`-ERR`, e.g. a permissions violation) are kept for the cause of an ack that
/// never comes, and said at WARN like the connection's problems.
fn log_connection_event(problems: &Mutex<Problems>, event: &async_nats::Event) {
    let mut p = lock(problems);
    match event {
        async_nats::Event::Connected => {
            if p.connection.take().is_some() {
                tracing::info!(sink = "nats", "NATS connection is back");
            }
        }
        // Closed and draining are the relay's own doing (at exit); slow consumers are about
        // subscriptions, which the relay has none of.
        async_nats::Event::SlowConsumer(_)
        | async_nats::Event::Draining
        | async_nats::Event::Closed => {}
        async_nats::Event::ServerError(async_nats::ServerError::Other(text)) => {
            let known = p.server.iter().any(|(_, t)| t == text);
            if !known {
                tracing::warn!(sink = "nats", problem = %text, "NATS server error");
            }
            p.server.retain(|(_, t)| t != text);
            if p.server.len() == KEPT_SERVER_ERRORS {
                p.server.pop_front();
            }
            p.server.push_back((Instant::now(), text.clone()));
        }
        other => {
            let text = other.to_string();
            if p.connection.as_ref() != Some(&text) {
                tracing::warn!(sink = "nats", problem = %text, "NATS connection problem");
                p.connection = Some(text);
            }
        }
    }
}

fn no_stream(subject: &str) -> SinkError {
    // A filter that captures this subject: its first token and everything under it.
    let filter = match subject.split_once('.') {
        Some((first, _)) => format!("{first}.>"),
        None => subject.to_owned(),
    };
    SinkError::backpressure(format!(
        "NATS: no JetStream stream captures subject `{subject}`; create one whose subjects include it (e.g. subjects {filter})"
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_is_read_once_for_the_sink_and_doctor() {
        let t = Target::parse("nats://u%40x:p%2Fw@h:4223?subject=a.{event_type}").unwrap();
        assert_eq!(t.server(), "nats://h:4223");
        assert_eq!(t.subject, "a.{event_type}");
        assert_eq!(t.credentials, Some(("u@x".into(), Some("p/w".into()))));
        assert_eq!(t.display(), "nats://***@h:4223?subject=a.{event_type}");
        let debug = format!("{t:?}");
        assert!(!debug.contains("p/w") && !debug.contains("u@x"), "{debug}");
        let t = Target::parse("nats://tok@h").unwrap();
        assert_eq!(t.credentials, Some(("tok".into(), None)));
        assert_eq!(t.subject, DEFAULT_SUBJECT);
        assert_eq!(t.display(), "nats://***@h:4222?subject=outbox.{event_type}");
        for bad in [
            "nats://h?subject=a.*",
            "nats://h?subject=a%20b",
            "nats://h?subject=",
            "nats://h?subject={nope}",
        ] {
            assert!(Target::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn an_ack_that_never_came_is_explained_by_what_the_server_said() {
        let recent = Duration::from_secs(60);
        let mut p = Problems::default();
        assert_eq!(p.cause("outbox.a", recent), None);
        p.server.push_back((
            Instant::now(),
            "Permissions Violation for Publish to \"outbox.a\"".into(),
        ));
        assert!(matches!(
            p.cause("outbox.a", recent),
            Some(AckCause::Denied(t)) if t.contains("outbox.a")
        ));
        // Another subject's refusal only hints.
        assert!(matches!(
            p.cause("outbox.ab", recent),
            Some(AckCause::Other(t)) if t.starts_with("last server error")
        ));
        // A connection that is down says more than an old server error.
        p.connection = Some("client error: nats: authorization violation".into());
        assert!(matches!(
            p.cause("outbox.b", recent),
            Some(AckCause::Other(t)) if t.contains("authorization violation")
        ));
        assert_eq!(
            Problems {
                connection: None,
                server: p.server.clone()
            }
            .cause("outbox.a", Duration::ZERO),
            None,
            "too old to be the cause"
        );
    }
}
