//! Checks against the sink itself (`--sink`): a NATS JetStream stream's duplicate window must
//! cover the retry horizon, or a late retry of an event that did arrive is stored twice.

use std::time::Duration;

use serde_json::json;

use super::{check, secs, Check, RelaySettings, Status};

pub(super) async fn nats_check(
    target: Result<crate::sink::nats::Target, crate::sink::Error>,
    r: &RelaySettings,
    timeout: Duration,
) -> Check {
    let horizon = r.retry_horizon();
    let window = match target {
        Ok(t) => nats_duplicate_window(&t, timeout).await,
        Err(e) => Err(anyhow::anyhow!(e.to_string())),
    };
    match window {
        Err(e) => check(
            "settings:nats_duplicate_window",
            Status::Warn,
            format!("cannot read the stream's duplicate window: {e}"),
            json!({ "retry_horizon_seconds": horizon.as_secs_f64() }),
        ),
        Ok((subject, stream, window)) => {
            let details = json!({ "subject": subject, "stream": stream,
                                  "duplicate_window_seconds": window.as_secs_f64(),
                                  "retry_horizon_seconds": horizon.as_secs_f64() });
            if window < horizon {
                check(
                    "settings:nats_duplicate_window",
                    Status::Warn,
                    format!(
                        "stream {stream} keeps message ids for {}, shorter than the retry horizon {} (--max-attempts {}, --backoff-base {}, --backoff-max {}, --publish-timeout {}): a late retry of an event that did arrive is stored twice; raise duplicate_window or lower the retries",
                        secs(window), secs(horizon), r.max_attempts, secs(r.backoff.base), secs(r.backoff.max), secs(r.publish_timeout)
                    ),
                    details,
                )
            } else {
                check(
                    "settings:nats_duplicate_window",
                    Status::Pass,
                    format!(
                        "stream {stream} keeps message ids for {}, at least the retry horizon {}",
                        secs(window),
                        secs(horizon)
                    ),
                    details,
                )
            }
        }
    }
}

/// The JetStream stream that captures the sink's subject (placeholders filled with `doctor`), and
/// its duplicate window. The credentials in the URL are used, never printed.
async fn nats_duplicate_window(
    target: &crate::sink::nats::Target,
    timeout: Duration,
) -> anyhow::Result<(String, String, Duration)> {
    let subject = target.template.sample("doctor");
    let server = target.server();
    let opts = async_nats::ConnectOptions::new()
        .connection_timeout(timeout)
        .name("outboxctl doctor");
    let client = tokio::time::timeout(timeout, target.authenticate(opts).connect(server.clone()))
        .await
        .map_err(|_| anyhow::anyhow!("connecting to {server} timed out"))?
        .map_err(|e| anyhow::anyhow!("cannot connect to {server}: {e}"))?;
    let js = async_nats::jetstream::new(client);
    let name = tokio::time::timeout(timeout, js.stream_by_subject(subject.clone()))
        .await
        .map_err(|_| anyhow::anyhow!("JetStream did not answer"))?
        .map_err(|e| anyhow::anyhow!("no JetStream stream captures subject `{subject}`: {e}"))?;
    let mut stream = js
        .get_stream(&name)
        .await
        .map_err(|e| anyhow::anyhow!("stream {name}: {e}"))?;
    let info = stream
        .info()
        .await
        .map_err(|e| anyhow::anyhow!("stream {name}: {e}"))?;
    Ok((subject, name, info.config.duplicate_window))
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders_become_a_sample() {
        let sample = |subject: &str| {
            crate::sink::nats::Target::parse(&format!("nats://h?subject={subject}"))
                .unwrap()
                .template
                .sample("doctor")
        };
        assert_eq!(sample("outbox.{event_type}"), "outbox.doctor");
        assert_eq!(sample("a.{tenant_id}.{event_type}.b"), "a.doctor.doctor.b");
        assert_eq!(sample("plain"), "plain");
    }
}
