//! Sinks that keep nothing outside the process: `null` (discards; for benchmarks and dry runs)
//! and `MemorySink`, a test double that records what it was given and fails on demand, used by
//! the relay step's unit tests where no real peer is needed.

use std::collections::HashSet;
use std::sync::Mutex;

use super::{write_envelope, Event, Outcome, PublishCtl, Sink, SinkError};

/// Accepts and discards every event.
pub struct NullSink;

#[async_trait::async_trait]
impl Sink for NullSink {
    async fn publish(&self, events: &[Event], _ctl: &PublishCtl) -> Vec<Outcome> {
        vec![Outcome::Published; events.len()]
    }

    fn default_pipeline_depth(&self) -> u32 {
        1
    }

    fn batch_within_one_timeout(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        "null".into()
    }
}

/// Test double: records the JSON documents it accepts; fails the ids it is told to.
#[derive(Default)]
pub struct MemorySink {
    pub received: Mutex<Vec<(i64, String, String)>>,
    pub retryable_ids: Mutex<HashSet<i64>>,
    pub permanent_ids: Mutex<HashSet<i64>>,
    /// When set, every event fails with this error (e.g. `Unavailable`: the sink is down).
    pub down: Mutex<Option<SinkError>>,
}

impl MemorySink {
    /// Ids received so far, in order, with duplicates.
    pub fn ids(&self) -> Vec<i64> {
        self.received.lock().unwrap().iter().map(|r| r.0).collect()
    }
}

#[async_trait::async_trait]
impl Sink for MemorySink {
    async fn publish(&self, events: &[Event], _ctl: &PublishCtl) -> Vec<Outcome> {
        let retry = self.retryable_ids.lock().unwrap().clone();
        let perm = self.permanent_ids.lock().unwrap().clone();
        if let Some(e) = self.down.lock().unwrap().clone() {
            return vec![Outcome::Failed(e); events.len()];
        }
        events
            .iter()
            .map(|e| {
                if perm.contains(&e.id) {
                    Outcome::Failed(SinkError::Permanent(format!("event {} rejected", e.id)))
                } else if retry.contains(&e.id) {
                    Outcome::Failed(SinkError::retryable(format!("event {} failed", e.id)))
                } else {
                    let mut doc = Vec::new();
                    write_envelope(e, &mut doc);
                    self.received.lock().unwrap().push((
                        e.id,
                        e.idempotency_key.clone(),
                        String::from_utf8(doc).expect("utf-8"),
                    ));
                    Outcome::Published
                }
            })
            .collect()
    }

    fn batch_within_one_timeout(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        "memory (test double)".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_local_sink_keeps_one_batch_in_flight_by_default() {
        assert_eq!(NullSink.default_pipeline_depth(), 1);
        assert!(NullSink.batch_within_one_timeout());
    }
}
