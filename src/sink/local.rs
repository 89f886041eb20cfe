//! The writer thread behind the stdout and file sinks. A write(2) blocked on a pipe nobody reads
//! (or a hung disk) cannot be cancelled, yet a publish must end within `--publish-timeout` like
//! any other, or a tx-mode claim outlives its transaction. So each sink hands its batch to one
//! thread of its own and waits for the result at most that long. After a timeout the sink takes
//! nothing more (`Stalled`); a batch that still completes after the relay gave up on it is undone
//! when the target can (the file is truncated back), since the relay has given those rows back.
//!
//! A plain thread, not `spawn_blocking`: the runtime waits for blocking tasks at exit, and a
//! thread stuck on a dead pipe must not keep the process from exiting.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Mutex};
use std::time::Duration;

use super::cloudevents::CloudEvents;
use super::{write_envelope, Event, Outcome, PublishCtl, Sink, SinkError};
use crate::lock::lock;

/// Where a [`Writer`] writes: one batch at a time, whole or not at all where it can.
pub trait Target: Send + 'static {
    /// Writes (and makes durable, where that means something) one batch. On an error, undoes
    /// what it can of this batch before returning.
    fn write_batch(&mut self, buf: &[u8]) -> io::Result<()>;
    /// Undoes the last batch, which completed after the relay stopped waiting for it.
    fn undo_last(&mut self);
    /// The target for messages, e.g. `stdout` or `appending to /var/log/x.jsonl`.
    fn what(&self) -> String;
    /// Opens the target again (a file after its rotation), between two batches.
    fn reopen(&mut self) -> io::Result<()> {
        Ok(())
    }
}

enum Job {
    Write {
        buf: Vec<u8>,
        done: tokio::sync::oneshot::Sender<io::Result<()>>,
    },
    Reopen {
        done: tokio::sync::oneshot::Sender<io::Result<()>>,
    },
}

/// How long a SIGHUP waits for the batch being written before it reports the reopen as late.
const REOPEN_WAIT: Duration = Duration::from_secs(10);

/// The stdout and file sinks: one JSON line per event, each batch written whole by a [`Writer`].
pub struct LocalSink {
    writer: Writer,
    /// What [`Sink::describe`] says: `stdout`, `file:PATH`.
    name: String,
    /// Whether SIGHUP reopens the target (a file, for logrotate).
    reopens: bool,
    /// `--format cloudevents`: one structured CloudEvent per line instead of the document.
    cloudevents: Option<CloudEvents>,
}

impl LocalSink {
    pub fn new(target: impl Target, name: String, reopens: bool) -> Self {
        Self {
            writer: Writer::spawn(target),
            name,
            reopens,
            cloudevents: None,
        }
    }

    /// Writes structured CloudEvents (JSON Lines) instead of the document.
    pub fn with_cloudevents(mut self, ce: Option<CloudEvents>) -> Self {
        self.cloudevents = ce;
        self
    }
}

#[async_trait::async_trait]
impl Sink for LocalSink {
    async fn publish(&self, events: &[Event], ctl: &PublishCtl) -> Vec<Outcome> {
        let mut buf = Vec::with_capacity(events.len() * 256);
        for e in events {
            match &self.cloudevents {
                Some(ce) => ce.write_structured(e, &mut buf),
                None => write_envelope(e, &mut buf),
            }
            buf.push(b'\n');
        }
        let outcome = self.writer.write(buf, events.len(), ctl.timeout).await;
        vec![outcome; events.len()]
    }

    fn default_pipeline_depth(&self) -> u32 {
        1
    }

    fn batch_within_one_timeout(&self) -> bool {
        true
    }

    async fn reopen(&self) -> Option<io::Result<()>> {
        if !self.reopens {
            return None;
        }
        Some(self.writer.reopen(REOPEN_WAIT).await)
    }

    fn describe(&self) -> String {
        self.name.clone()
    }
}

/// A target behind its own thread.
pub struct Writer {
    jobs: Mutex<mpsc::Sender<Job>>,
    stalled: AtomicBool,
    what: String,
    /// Serialises batches: one in the thread at a time, so a timeout is this batch's own.
    turn: tokio::sync::Mutex<()>,
}

impl Writer {
    pub fn spawn(mut target: impl Target) -> Self {
        let what = target.what();
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("outboxctl-writer".into())
            .spawn(move || {
                for job in rx {
                    match job {
                        Job::Write { buf, done } => {
                            let result = target.write_batch(&buf);
                            if let Err(Ok(())) = done.send(result) {
                                // Written after the relay gave the rows back: take it back if
                                // we can.
                                target.undo_last();
                            }
                        }
                        Job::Reopen { done } => {
                            let _ = done.send(target.reopen());
                        }
                    }
                }
            })
            .expect("spawning the writer thread");
        Self {
            jobs: Mutex::new(tx),
            stalled: AtomicBool::new(false),
            what,
            turn: tokio::sync::Mutex::new(()),
        }
    }

    /// Writes one batch of `n` events within `timeout`; the outcome applies to each event.
    pub async fn write(&self, buf: Vec<u8>, n: usize, timeout: Duration) -> Outcome {
        let _turn = self.turn.lock().await;
        if self.stalled.load(Ordering::SeqCst) {
            return Outcome::Failed(self.stalled_error(n, timeout));
        }
        let (done, result) = tokio::sync::oneshot::channel();
        let sent = lock(&self.jobs).send(Job::Write { buf, done });
        if sent.is_err() {
            return Outcome::Failed(SinkError::unavailable(format!(
                "{}: the writer thread is gone",
                self.what
            )));
        }
        match tokio::time::timeout(timeout, result).await {
            Ok(Ok(Ok(()))) => Outcome::Published,
            Ok(Ok(Err(e))) => Outcome::Failed(classify(&self.what, &e)),
            Ok(Err(_)) => Outcome::Failed(SinkError::unavailable(format!(
                "{}: the writer thread died",
                self.what
            ))),
            Err(_) => {
                self.stalled.store(true, Ordering::SeqCst);
                Outcome::Failed(self.stalled_error(n, timeout))
            }
        }
    }

    /// Reopens the target in the writer thread, after the batch it is writing (if any) and
    /// before the next: each batch goes whole to the old target or to the new one. Waits at most
    /// `timeout` (a write stuck on a full disk holds the thread).
    pub async fn reopen(&self, timeout: Duration) -> io::Result<()> {
        let (done, result) = tokio::sync::oneshot::channel();
        let sent = lock(&self.jobs).send(Job::Reopen { done });
        if sent.is_err() {
            return Err(io::Error::other("the writer thread is gone"));
        }
        match tokio::time::timeout(timeout, result).await {
            Ok(Ok(r)) => r,
            Ok(Err(_)) => Err(io::Error::other("the writer thread died")),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "a write in progress did not finish within {}; the file is reopened once it does",
                    humantime::format_duration(timeout)
                ),
            )),
        }
    }

    fn stalled_error(&self, n: usize, timeout: Duration) -> SinkError {
        SinkError::Stalled(format!(
            "the consumer of {} reads slower than the lease allows: writing a batch of {} did not finish within --publish-timeout ({})",
            self.what.trim_start_matches("appending to "),
            crate::output::plural(n as u64, "event", "events"),
            humantime::format_duration(timeout)
        ))
    }
}

/// A closed pipe is the reader gone for good; anything else (disk full, I/O error) is the sink
/// unavailable for now. Neither is the event's fault.
pub fn classify(what: &str, e: &io::Error) -> SinkError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        SinkError::Closed(format!("{what}: the reader closed the pipe ({e})"))
    } else {
        SinkError::unavailable(format!("{what}: {e}"))
    }
}
