//! The stdout sink: one JSON line per event, written and flushed once per batch.

use std::io::Write;

use super::{write_envelope, Event, Outcome, PublishCtl, Sink, SinkError};

pub struct StdoutSink {
    lock: tokio::sync::Mutex<()>,
}

impl StdoutSink {
    pub fn new() -> Self {
        Self {
            lock: tokio::sync::Mutex::new(()),
        }
    }
}

impl Default for StdoutSink {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait::async_trait]
impl Sink for StdoutSink {
    async fn publish(&self, events: &[Event], _ctl: &PublishCtl) -> Vec<Outcome> {
        let mut buf = Vec::with_capacity(events.len() * 256);
        for e in events {
            write_envelope(e, &mut buf);
            buf.push(b'\n');
        }
        let _guard = self.lock.lock().await;
        let result = tokio::task::block_in_place(|| {
            let mut out = std::io::stdout().lock();
            out.write_all(&buf).and_then(|_| out.flush())
        });
        let outcome = match result {
            Ok(()) => Outcome::Published,
            Err(e) => Outcome::Failed(SinkError::retryable(format!("writing to stdout: {e}"))),
        };
        vec![outcome; events.len()]
    }

    fn is_local(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        "stdout".into()
    }
}
