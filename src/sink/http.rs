//! The HTTP sink: POSTs one JSON document per event.
//!
//! Headers sent: the row's headers that [`HeaderPolicy::http`] lets through (never framing,
//! hop-by-hop, routing or relay-set ones), `Content-Type: application/json`, `Idempotency-Key`
//! (the event's idempotency key: the same on every attempt and from every replica), any
//! `--http-header` (with `{placeholders}`), and, when a signing secret is configured, Standard
//! Webhooks `webhook-id`/`webhook-timestamp`/`webhook-signature` over the exact bytes sent.
//! Only 2xx is success; redirects are not followed.
//!
//! With `--format cloudevents` the body is the payload (binary mode: the attributes as `ce-*`
//! headers, [`Binding::Http`]) or the whole CloudEvent (structured mode, `Content-Type:
//! application/cloudevents+json`); every other header above is sent as well, and the signature
//! covers the body sent.

use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, Mac};
use reqwest::header::{HeaderMap, HeaderName, HeaderValue, RETRY_AFTER};
use reqwest::StatusCode;
use sha2::Sha256;

use super::cloudevents::{Binding, CloudEvents};
use super::headers::{self, HeaderPolicy};
use super::template::Template;
use super::{
    publish_each, write_envelope, Event, Outcome, PublishCtl, Sink, SinkError, SinkOptions,
};

pub struct HttpSink {
    client: reqwest::Client,
    url: reqwest::Url,
    display: String,
    extra: Vec<(HeaderName, Template)>,
    signer: Option<Signer>,
    row_headers: HeaderPolicy,
    /// `--format cloudevents`; `None`: the document.
    cloudevents: Option<CloudEvents>,
}

impl HttpSink {
    pub fn new(
        spec: &str,
        opts: &SinkOptions,
        cloudevents: Option<CloudEvents>,
    ) -> Result<Self, super::Error> {
        let url = reqwest::Url::parse(spec).map_err(|e| {
            super::Error::invalid(format!(
                "invalid --sink `{}`: {e}",
                spec.split("://").next().unwrap_or("http")
            ))
        })?;
        let display = display_url(&url);
        let mut extra = Vec::new();
        // A header is often a credential: errors say which one (by position), never its text.
        for (i, h) in opts.http_headers.iter().enumerate() {
            let which = i + 1;
            let (name, value) = h.split_once(':').ok_or_else(|| {
                super::Error::invalid(format!(
                    "invalid --http-header number {which} (not shown; it may hold a secret): use 'Name: value'"
                ))
            })?;
            let name = HeaderName::from_bytes(name.trim().as_bytes()).map_err(|_| {
                super::Error::invalid(format!(
                    "invalid --http-header number {which} (not shown; it may hold a secret): bad header name"
                ))
            })?;
            let lower = name.as_str();
            if headers::HTTP_FRAMING.contains(&lower)
                || headers::HTTP_RESERVED_PREFIXES
                    .iter()
                    .any(|p| lower.starts_with(p))
            {
                return Err(super::Error::invalid(format!(
                    "invalid --http-header `{name}`: framing, hop-by-hop and webhook-* headers are the relay's own (put the host in --sink)"
                )));
            }
            if cloudevents.is_some() && lower.starts_with(Binding::Http.prefix()) {
                return Err(super::Error::invalid(format!(
                    "invalid --http-header `{name}`: with --format cloudevents, ce-* headers are the event's attributes, set by the relay (see --cloudevents-source)"
                )));
            }
            // Template's error quotes the unknown placeholder, which is part of the value.
            let template = Template::parse(value.trim(), "").map_err(|_| {
                super::Error::invalid(format!(
                    "invalid --http-header `{name}`: its value has an unknown placeholder (not shown; it may hold a secret); use {}",
                    super::template::PLACEHOLDERS
                        .iter()
                        .map(|p| format!("{{{p}}}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            extra.push((name, template));
        }
        // Structured mode too: a receiver takes a message with a `ce-*` header for binary mode.
        let row_headers = HeaderPolicy::http(extra.iter().map(|(n, _)| n.as_str()))
            .for_cloudevents(cloudevents.as_ref().map(|_| Binding::Http));
        let signer = match &opts.signing_secrets {
            Some(text) => Some(Signer::from_secrets(text).map_err(super::Error::invalid)?),
            None => None,
        };
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(opts.timeout)
            .connect_timeout(opts.timeout.min(Duration::from_secs(10)))
            .pool_max_idle_per_host(1024)
            .user_agent(concat!("outboxctl/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| super::Error::unusable(format!("cannot build the HTTP client: {e}")))?;
        Ok(Self {
            client,
            url,
            display,
            extra,
            signer,
            row_headers,
            cloudevents,
        })
    }

    async fn publish_one(&self, e: &Event) -> Result<(), SinkError> {
        let mut body = Vec::with_capacity(256 + e.payload.len());
        let mut content_type = HeaderValue::from_static("application/json");
        let mut headers = HeaderMap::new();
        match &self.cloudevents {
            None => write_envelope(e, &mut body),
            Some(ce) => {
                ce.write_body(e, &mut body);
                content_type = HeaderValue::from_static(ce.content_type());
                // Percent-encoded: printable ASCII, always a valid value.
                for (k, v) in ce.headers(Binding::Http, e) {
                    if let (Ok(name), Ok(value)) = (
                        HeaderName::from_bytes(k.as_bytes()),
                        HeaderValue::from_str(&v),
                    ) {
                        headers.insert(name, value);
                    }
                }
            }
        }
        // The policy has dropped every name set below, and checked names and values.
        for (k, v) in headers::row_headers(e, &self.row_headers) {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(k.as_bytes()),
                HeaderValue::from_str(&v),
            ) {
                headers.append(name, value);
            }
        }
        headers.insert(reqwest::header::CONTENT_TYPE, content_type);
        let key = HeaderValue::from_str(&e.idempotency_key).map_err(|_| {
            SinkError::Permanent("idempotency key is not a valid HTTP header value".into())
        })?;
        headers.insert(HeaderName::from_static("idempotency-key"), key);
        for (name, template) in &self.extra {
            let value = HeaderValue::from_str(&template.expand(e)).map_err(|_| {
                SinkError::Permanent(format!("--http-header {name} expands to an invalid value"))
            })?;
            headers.insert(name.clone(), value);
        }
        if let Some(signer) = &self.signer {
            let ts = chrono::Utc::now().timestamp();
            let sig = signer.sign(&e.idempotency_key, ts, &body);
            headers.insert(
                HeaderName::from_static("webhook-id"),
                HeaderValue::from_str(&e.idempotency_key).expect("checked above"),
            );
            headers.insert(
                HeaderName::from_static("webhook-timestamp"),
                HeaderValue::from(ts),
            );
            headers.insert(
                HeaderName::from_static("webhook-signature"),
                HeaderValue::from_str(&sig).expect("base64"),
            );
        }
        let resp = self
            .client
            .post(self.url.clone())
            .headers(headers)
            .body(body)
            .send()
            .await
            .map_err(|err| send_error(&err))?;
        let status = resp.status();
        if status.is_success() {
            return Ok(());
        }
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(parse_retry_after);
        let body = body_excerpt(resp, &self.secrets(e)).await;
        Err(classify(status, retry_after, &body))
    }

    /// What must never be copied from a response into `last_error` or a log, should the server
    /// echo the request: the URL's password and query values, the `--http-header` values.
    fn secrets(&self, e: &Event) -> Vec<String> {
        let mut out: Vec<String> = self
            .extra
            .iter()
            .map(|(_, template)| template.expand(e))
            .collect();
        out.extend(self.url.password().map(str::to_owned));
        out.extend(self.url.query_pairs().map(|(_, v)| v.into_owned()));
        out.retain(|s| s.len() >= 4);
        out
    }
}

/// At most this many bytes of an error response's body are kept.
pub const BODY_EXCERPT: usize = 200;

/// The first [`BODY_EXCERPT`] bytes of an error response's body, for `last_error`: read no
/// further than that, control characters (newlines, escapes) turned into spaces, whitespace
/// runs collapsed, `secrets` replaced by `***`. Empty when there is no body.
async fn body_excerpt(mut resp: reqwest::Response, secrets: &[String]) -> String {
    let mut buf = Vec::with_capacity(BODY_EXCERPT);
    while buf.len() < BODY_EXCERPT {
        match resp.chunk().await {
            Ok(Some(chunk)) => buf.extend_from_slice(&chunk),
            _ => break,
        }
    }
    sanitize_excerpt(&buf, secrets)
}

/// See [`body_excerpt`].
pub fn sanitize_excerpt(body: &[u8], secrets: &[String]) -> String {
    let cut = body.len().min(BODY_EXCERPT);
    let text = String::from_utf8_lossy(&body[..cut]);
    let mut text = text.trim_end_matches('\u{fffd}').to_owned(); // a character cut in half
    for s in secrets {
        text = text.replace(s.as_str(), "***");
    }
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        let c = if c.is_control() || c.is_whitespace() {
            ' '
        } else {
            c
        };
        if !(c == ' ' && (out.is_empty() || out.ends_with(' '))) {
            out.push(c);
        }
    }
    let mut out = out.trim_end().to_owned();
    if body.len() > BODY_EXCERPT {
        out.push('…');
    }
    out
}

/// A request that got no response. Not the event's fault (connection refused or reset, DNS,
/// timeouts): `Unavailable`, so a batch of them is an outage; a request the client could not
/// even build is the event's (`Permanent`).
fn send_error(err: &reqwest::Error) -> SinkError {
    let message = describe_reqwest(err);
    if err.is_builder() {
        SinkError::Permanent(message)
    } else {
        SinkError::unavailable(message)
    }
}

#[async_trait::async_trait]
impl Sink for HttpSink {
    async fn publish(&self, events: &[Event], ctl: &PublishCtl) -> Vec<Outcome> {
        publish_each(events, ctl, |e| self.publish_one(e)).await
    }

    fn describe(&self) -> String {
        self.display.clone()
    }
}

/// The sink URL for logs and summaries: a password becomes `***` and the query string `?…` (query
/// parameters often carry tokens).
pub fn display_url(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    if u.password().is_some() {
        let _ = u.set_password(Some("***"));
    }
    let had_query = u.query().is_some();
    u.set_query(None);
    let mut s = u.to_string();
    if had_query {
        s.push_str("?…");
    }
    s
}

/// Maps a non-2xx status to a failure, with the body's excerpt (see [`body_excerpt`]) after the
/// status:
/// - refusals that say nothing about the event when every event of a batch gets the same one,
///   [`SinkError::Refused`] (an outage then: a wrong path, a missing credential, a moved
///   endpoint): 404, 405, 410, 414, 415 (dead-lettered when only some events get them), 401,
///   403, 407, 421 and 3xx (retried when only some do; redirects are not followed);
/// - 429: [`SinkError::Backpressure`] (the server is rate limiting: never counted; an outage for
///   a whole batch, the event deferred beside 200s);
/// - 502, 503, 504: unavailable (the server or a proxy in front of it cannot take anything now;
///   an outage when every event of a batch gets one, else that event's retry);
/// - 408, 425, 500 and other 5xx: retryable;
/// - 400, 413, 422 and other 4xx: permanent (the body is refused).
pub fn classify(status: StatusCode, retry_after: Option<Duration>, body: &str) -> SinkError {
    let code = status.as_u16();
    let mut message = format!("HTTP {status}");
    if !body.is_empty() {
        message.push_str(": ");
        message.push_str(body);
    }
    let kind = format!("HTTP {code}");
    match code {
        404 | 405 | 410 | 414 | 415 => SinkError::refused(kind, SinkError::Permanent(message)),
        401 | 403 | 407 | 421 => SinkError::refused(
            kind,
            SinkError::Retryable {
                message,
                retry_after,
            },
        ),
        300..=399 => SinkError::refused(
            kind,
            SinkError::retryable(format!(
                "{message} (redirects are not followed; point --sink at the final URL)"
            )),
        ),
        429 => SinkError::Backpressure {
            message,
            retry_after,
        },
        502..=504 => SinkError::Unavailable {
            message,
            retry_after,
        },
        408 | 425 | 500..=599 => SinkError::Retryable {
            message,
            retry_after,
        },
        400..=499 => SinkError::Permanent(message),
        _ => SinkError::retryable(message),
    }
}

/// `Retry-After` as seconds or an HTTP date; capped at one day.
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    let d = match v.parse::<u64>() {
        Ok(secs) => Duration::from_secs(secs),
        Err(_) => {
            let when = chrono::DateTime::parse_from_rfc2822(v).ok()?;
            (when.with_timezone(&chrono::Utc) - chrono::Utc::now())
                .to_std()
                .unwrap_or_default()
        }
    };
    Some(d.min(Duration::from_secs(86_400)))
}

fn describe_reqwest(err: &reqwest::Error) -> String {
    let kind = if err.is_timeout() {
        "timed out"
    } else if err.is_connect() {
        "cannot connect"
    } else {
        "request failed"
    };
    // The source chain names the cause (e.g. connection refused) without the URL's secrets.
    let mut cause = String::new();
    let mut src = std::error::Error::source(err);
    while let Some(s) = src {
        cause = s.to_string();
        src = s.source();
    }
    if cause.is_empty() {
        kind.to_owned()
    } else {
        format!("{kind}: {cause}")
    }
}

/// Standard Webhooks signer: `v1,base64(HMAC-SHA256(key, "{id}.{timestamp}.{body}"))`, one
/// signature per secret (two during rotation), space separated.
pub struct Signer {
    keys: Vec<Vec<u8>>,
}

impl Signer {
    /// Secrets as `whsec_<base64>` (the prefix is optional), separated by spaces or commas.
    pub fn from_secrets(text: &str) -> Result<Self, String> {
        let keys = text
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|s| !s.is_empty())
            .map(|s| {
                base64::engine::general_purpose::STANDARD
                    .decode(s.strip_prefix("whsec_").unwrap_or(s))
                    .map_err(|_| "the signing secret is not whsec_ followed by base64; check the variable named by --signing-secret-env".to_string())
            })
            .collect::<Result<Vec<_>, _>>()?;
        if keys.is_empty() || keys.len() > 2 {
            return Err("the signing secret variable must hold one secret, or two separated by a space during rotation".into());
        }
        Ok(Self { keys })
    }

    pub fn sign(&self, id: &str, timestamp: i64, body: &[u8]) -> String {
        self.keys
            .iter()
            .map(|key| {
                let mut mac =
                    Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key length");
                mac.update(id.as_bytes());
                mac.update(b".");
                mac.update(timestamp.to_string().as_bytes());
                mac.update(b".");
                mac.update(body);
                format!(
                    "v1,{}",
                    base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
                )
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_webhooks_published_test_vector() {
        let s = Signer::from_secrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").unwrap();
        assert_eq!(
            s.sign(
                "msg_p5jXN8AQM9LWM0D4loKWxJek",
                1614265330,
                br#"{"test": 2432232314}"#
            ),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let two =
            Signer::from_secrets("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw whsec_c2VjcmV0").unwrap();
        assert!(two.sign("m", 1, b"{}").split(' ').count() == 2);
        assert!(Signer::from_secrets("whsec_!!!").is_err());
        assert!(Signer::from_secrets("").is_err());
    }

    #[test]
    fn sink_urls_are_shown_without_secrets() {
        let u = |s: &str| display_url(&reqwest::Url::parse(s).unwrap());
        assert_eq!(u("http://127.0.0.1:9/x"), "http://127.0.0.1:9/x");
        assert_eq!(
            u("https://bob:pw@hooks.example.com/in?token=abc"),
            "https://bob:***@hooks.example.com/in?…"
        );
    }

    #[test]
    fn body_excerpts_are_short_single_line_and_keep_no_secret() {
        let secrets = vec!["Bearer tok123".to_owned()];
        assert_eq!(
            sanitize_excerpt(b"line one\r\n\tline\x1b[31m two\x00", &secrets),
            "line one line [31m two"
        );
        assert_eq!(
            sanitize_excerpt(b"you sent Authorization: Bearer tok123", &secrets),
            "you sent Authorization: ***"
        );
        let long = "é".repeat(150); // 300 bytes
        let got = sanitize_excerpt(long.as_bytes(), &[]);
        assert!(got.ends_with('…') && got.len() <= BODY_EXCERPT + 3, "{got}");
        assert!(!got.contains('\u{fffd}'));
        assert_eq!(sanitize_excerpt(b"", &[]), "");
    }

    #[test]
    fn statuses() {
        let of = |code| classify(StatusCode::from_u16(code).unwrap(), None, "");
        for code in [400, 413, 422, 418] {
            assert!(matches!(of(code), SinkError::Permanent(_)), "{code}");
        }
        // The endpoint's when the whole batch gets one; the event's otherwise.
        for (code, permanent) in [
            (404, true),
            (405, true),
            (410, true),
            (415, true),
            (401, false),
            (403, false),
            (301, false),
            (302, false),
        ] {
            let SinkError::Refused { kind, per_event } = of(code) else {
                panic!("{code}: {:?}", of(code));
            };
            assert_eq!(kind, format!("HTTP {code}"));
            assert_eq!(
                matches!(*per_event, SinkError::Permanent(_)),
                permanent,
                "{code}"
            );
        }
        assert!(matches!(of(429), SinkError::Backpressure { .. }));
        for code in [502, 503, 504] {
            assert!(matches!(of(code), SinkError::Unavailable { .. }), "{code}");
        }
        assert!(matches!(
            classify(StatusCode::from_u16(500).unwrap(), None, ""),
            SinkError::Retryable { .. }
        ));
        assert_eq!(
            classify(StatusCode::from_u16(422).unwrap(), None, "bad field").to_string(),
            "HTTP 422 Unprocessable Entity: bad field"
        );
        assert_eq!(parse_retry_after("7"), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("999999"),
            Some(Duration::from_secs(86_400))
        );
        assert_eq!(parse_retry_after("soon"), None);
    }
}
