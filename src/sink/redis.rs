//! The Redis Streams sink: one pipelined round trip of `XADD`s per batch.
//!
//! `--sink 'redis://[user:pass@]host:6379[/db]?stream=outbox&maxlen=1000000'`. Each entry has the
//! fields `idempotency_key`, `type` and `event` (the JSON document). Redis has no server-side
//! dedup for streams: consumers dedupe on `idempotency_key`. `stream` is a template
//! (placeholders as for `--http-header`, e.g. `outbox.{aggregate_type}`); `maxlen` trims
//! approximately (`MAXLEN ~`).
//!
//! Redis runs every `XADD` of a pipeline, whatever the others answer, so each event's outcome is
//! its own reply: one key of the wrong type fails its event alone, and the events Redis stored
//! are published (never retried, which would store them again). What each reply means:
//! [`classify_reply`].

use redis::aio::ConnectionManager;
use tokio::sync::OnceCell;

use super::template::Template;
use super::{write_envelope, Event, Outcome, PublishCtl, Sink, SinkError};

pub struct RedisSink {
    client: redis::Client,
    conn: OnceCell<ConnectionManager>,
    stream: Template,
    maxlen: Option<u64>,
    display: String,
}

impl RedisSink {
    /// Validates the URL; connects on the first publish (a Redis that is down only makes
    /// publishes fail and retry until it is back).
    pub fn new(spec: &str) -> Result<Self, super::Error> {
        let url = url::Url::parse(spec)
            .map_err(|e| super::Error::invalid(format!("invalid --sink `redis://…`: {e}")))?;
        let mut stream = "outbox".to_owned();
        let mut maxlen = None;
        for (k, v) in url.query_pairs() {
            match k.as_ref() {
                "stream" if !v.trim().is_empty() => stream = v.into_owned(),
                "maxlen" => {
                    maxlen = Some(v.parse::<u64>().map_err(|_| {
                        super::Error::invalid(format!(
                            "invalid --sink: maxlen `{v}` is not a whole number"
                        ))
                    })?)
                }
                other => {
                    return Err(super::Error::invalid(format!(
                    "invalid --sink: unknown redis parameter `{other}` (use stream=NAME, maxlen=N)"
                )))
                }
            }
        }
        let mut base = url.clone();
        base.set_query(None);
        let client = redis::Client::open(base.as_str())
            .map_err(|e| super::Error::invalid(format!("invalid --sink: {e}")))?;
        let mut shown = base.clone();
        if shown.password().is_some() {
            let _ = shown.set_password(Some("***"));
        }
        let display = format!("{shown}?stream={stream}");
        let stream = Template::parse(&stream, &format!("invalid --sink: stream `{stream}`"))
            .map_err(super::Error::invalid)?;
        Ok(Self {
            client,
            conn: OnceCell::new(),
            stream,
            maxlen,
            display,
        })
    }

    /// One pipeline of `XADD`s; each event's outcome from its own reply. A failure of the whole
    /// round trip (connection, timeout) is every event's.
    async fn publish_batch(&self, events: &[Event]) -> Result<Vec<Outcome>, SinkError> {
        let conn = self
            .conn
            .get_or_try_init(|| {
                // Fail fast: the relay's own backoff retries the batch later. No response
                // timeout of the crate's own (500 ms by default: a Redis that answers in 900 ms
                // would be an outage): `publish` bounds each batch by --publish-timeout.
                let cfg = redis::aio::ConnectionManagerConfig::new()
                    .set_number_of_retries(1)
                    .set_connection_timeout(Some(std::time::Duration::from_secs(5)))
                    .set_response_timeout(None);
                ConnectionManager::new_with_config(self.client.clone(), cfg)
            })
            .await
            .map_err(|e| SinkError::unavailable(format!("Redis: cannot connect: {e}")))?;
        let mut pipe = redis::pipe();
        let mut body = Vec::with_capacity(512);
        for e in events {
            body.clear();
            write_envelope(e, &mut body);
            let mut cmd = redis::cmd("XADD");
            cmd.arg(self.stream.expand(e));
            if let Some(n) = self.maxlen {
                cmd.arg("MAXLEN").arg("~").arg(n);
            }
            cmd.arg("*")
                .arg("idempotency_key")
                .arg(&e.idempotency_key)
                .arg("type")
                .arg(&e.event_type)
                .arg("event")
                .arg(&body[..]);
            pipe.add_command(cmd);
        }
        let mut conn = conn.clone();
        // Without `ignore_errors` the crate folds every error reply of the pipeline into one
        // error (with no `code()`), which would fail the events Redis stored along with the one
        // it refused.
        let replies: Vec<redis::Value> = pipe
            .ignore_errors()
            .query_async(&mut conn)
            .await
            .map_err(|e| classify(&e))?;
        if replies.len() != events.len() {
            return Err(SinkError::unavailable(format!(
                "Redis: {} replies to a pipeline of {} XADDs",
                replies.len(),
                events.len()
            )));
        }
        Ok(replies
            .into_iter()
            .map(|reply| match reply {
                redis::Value::ServerError(e) => {
                    Outcome::Failed(classify_reply(e.code(), e.details().unwrap_or_default()))
                }
                _ => Outcome::Published,
            })
            .collect())
    }
}

/// A round trip that failed as a whole: a Redis that cannot be reached, dropped the connection
/// or timed out is `Unavailable` (the batch is given back untouched); a server error is judged
/// as a reply ([`classify_reply`]).
fn classify(e: &redis::RedisError) -> SinkError {
    if e.is_io_error() || e.is_connection_refusal() || e.is_timeout() || e.is_connection_dropped() {
        return SinkError::unavailable(format!("Redis: {e}"));
    }
    match e.code() {
        Some(code) => classify_reply(code, e.detail().unwrap_or_default()),
        None => SinkError::retryable(format!("Redis: {e}")),
    }
}

/// Server states in which Redis takes no writes from anyone, whatever the event: not logged in
/// (`NOAUTH`, `WRONGPASS`), loading its dataset, busy running a script, a read-only replica, a
/// master that is down or short of replicas, a failed snapshot that stops writes (`MISCONF`),
/// a cluster that is down or resharding.
const SERVER_STATES: [&str; 11] = [
    "NOAUTH",
    "WRONGPASS",
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "READONLY",
    "TRYAGAIN",
    "MISCONF",
    "NOREPLICAS",
    "CLUSTERDOWN",
    "NOMASTERLINK",
];

/// What one `XADD`'s error reply `code` (its first word) means for its event:
/// - `OOM` (out of memory under `maxmemory` with a `noeviction` policy): Redis is full, the
///   event is not at fault: [`SinkError::Backpressure`], never counted;
/// - [`SERVER_STATES`]: `Unavailable` (an outage when it is the whole batch's answer);
/// - `WRONGTYPE` (the stream key holds another type) and `NOPERM` (the ACL user may not write
///   it): [`SinkError::Refused`]: the sink's configuration when every event of the batch meets
///   it (one fixed stream name), this event's retry when others were stored (a templated key);
/// - anything else: this event's retry.
fn classify_reply(code: &str, detail: &str) -> SinkError {
    let message = format!("Redis: {code} {detail}");
    if code == "OOM" {
        SinkError::backpressure(format!(
            "{message} (Redis is full: raise maxmemory, trim the stream with maxlen=, or let consumers catch up)"
        ))
    } else if SERVER_STATES.contains(&code) {
        SinkError::unavailable(message)
    } else if code == "WRONGTYPE" || code == "NOPERM" {
        SinkError::refused(format!("Redis {code}"), SinkError::retryable(message))
    } else {
        SinkError::retryable(message)
    }
}

#[async_trait::async_trait]
impl Sink for RedisSink {
    async fn publish(&self, events: &[Event], ctl: &PublishCtl) -> Vec<Outcome> {
        let failed = match tokio::time::timeout(ctl.timeout, self.publish_batch(events)).await {
            Ok(Ok(outcomes)) => return outcomes,
            Ok(Err(e)) => e,
            Err(_) => SinkError::unavailable(format!(
                "Redis: publish timed out after {}",
                humantime::format_duration(ctl.timeout)
            )),
        };
        vec![Outcome::Failed(failed); events.len()]
    }

    /// One pipelined round trip per batch, bounded by `--publish-timeout`.
    fn batch_within_one_timeout(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        self.display.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_reply_says_whose_fault_it_is() {
        let oom = classify_reply("OOM", "command not allowed when used memory > 'maxmemory'.");
        assert!(matches!(oom, SinkError::Backpressure { .. }), "{oom:?}");
        for code in [
            "NOAUTH",
            "LOADING",
            "READONLY",
            "BUSY",
            "MISCONF",
            "MASTERDOWN",
        ] {
            let e = classify_reply(code, "x");
            assert!(matches!(e, SinkError::Unavailable { .. }), "{code}: {e:?}");
        }
        for code in ["WRONGTYPE", "NOPERM"] {
            let SinkError::Refused { kind, per_event } = classify_reply(code, "x") else {
                panic!("{code}");
            };
            assert_eq!(kind, format!("Redis {code}"));
            assert!(matches!(*per_event, SinkError::Retryable { .. }), "{code}");
        }
        assert!(matches!(
            classify_reply("ERR", "The ID specified in XADD is equal or smaller"),
            SinkError::Retryable { .. }
        ));
        assert_eq!(
            classify_reply(
                "WRONGTYPE",
                "Operation against a key holding the wrong kind of value"
            )
            .to_string(),
            "Redis: WRONGTYPE Operation against a key holding the wrong kind of value"
        );
    }
}
