//! The Redis Streams sink: one pipelined round trip of `XADD`s per batch.
//!
//! `--sink 'redis://[user:pass@]host:6379[/db]?stream=outbox&maxlen=1000000'`. Each entry has the
//! fields `idempotency_key`, `type` and `event` (the JSON document). Redis has no server-side
//! dedup for streams: consumers dedupe on `idempotency_key`. `stream` is a template
//! (placeholders as for `--http-header`, e.g. `outbox.{aggregate_type}`); `maxlen` trims
//! approximately (`MAXLEN ~`).

use redis::aio::ConnectionManager;
use tokio::sync::OnceCell;

use super::template::Template;
use super::{write_envelope, Event, Outcome, PublishCtl, Sink, SinkError};
use crate::exit::CodedError;

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
    pub fn new(spec: &str) -> Result<Self, CodedError> {
        let url = url::Url::parse(spec)
            .map_err(|e| CodedError::usage(format!("invalid --sink `redis://…`: {e}")))?;
        let mut stream = "outbox".to_owned();
        let mut maxlen = None;
        for (k, v) in url.query_pairs() {
            match k.as_ref() {
                "stream" if !v.trim().is_empty() => stream = v.into_owned(),
                "maxlen" => {
                    maxlen = Some(v.parse::<u64>().map_err(|_| {
                        CodedError::usage(format!(
                            "invalid --sink: maxlen `{v}` is not a whole number"
                        ))
                    })?)
                }
                other => {
                    return Err(CodedError::usage(format!(
                    "invalid --sink: unknown redis parameter `{other}` (use stream=NAME, maxlen=N)"
                )))
                }
            }
        }
        let mut base = url.clone();
        base.set_query(None);
        let client = redis::Client::open(base.as_str())
            .map_err(|e| CodedError::usage(format!("invalid --sink: {e}")))?;
        let mut shown = base.clone();
        if shown.password().is_some() {
            let _ = shown.set_password(Some("***"));
        }
        let display = format!("{shown}?stream={stream}");
        let stream = Template::parse(&stream, &format!("invalid --sink: stream `{stream}`"))
            .map_err(CodedError::usage)?;
        Ok(Self {
            client,
            conn: OnceCell::new(),
            stream,
            maxlen,
            display,
        })
    }

    async fn publish_batch(&self, events: &[Event]) -> Result<(), SinkError> {
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
        pipe.query_async::<Vec<String>>(&mut conn)
            .await
            .map(|_| ())
            .map_err(|e| classify(&e))
    }
}

/// A Redis that cannot be reached, dropped the connection, timed out, or is in a state where it
/// takes no writes (out of memory, loading, a read-only replica, a master down) is `Unavailable`:
/// the batch (one pipeline, failing together) is given back untouched. Other server errors are
/// the batch's retry.
fn classify(e: &redis::RedisError) -> SinkError {
    const DOWN: [&str; 6] = [
        "OOM",
        "LOADING",
        "BUSY",
        "MASTERDOWN",
        "READONLY",
        "TRYAGAIN",
    ];
    let message = format!("Redis: {e}");
    if e.is_io_error()
        || e.is_connection_refusal()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.code().is_some_and(|c| DOWN.contains(&c))
    {
        SinkError::unavailable(message)
    } else {
        SinkError::retryable(message)
    }
}

#[async_trait::async_trait]
impl Sink for RedisSink {
    async fn publish(&self, events: &[Event], ctl: &PublishCtl) -> Vec<Outcome> {
        let outcome = match tokio::time::timeout(ctl.timeout, self.publish_batch(events)).await {
            Ok(Ok(())) => Outcome::Published,
            Ok(Err(e)) => Outcome::Failed(e),
            Err(_) => Outcome::Failed(SinkError::unavailable(format!(
                "Redis: publish timed out after {}",
                humantime::format_duration(ctl.timeout)
            ))),
        };
        vec![outcome; events.len()]
    }

    /// One pipelined round trip per batch, bounded by `--publish-timeout`.
    fn batch_within_one_timeout(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        self.display.clone()
    }
}
