//! The file sink: appends JSON lines and fsyncs before the batch is reported published.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use super::{write_envelope, Event, Outcome, PublishCtl, Sink, SinkError};

pub struct FileSink {
    path: PathBuf,
    file: Arc<Mutex<File>>,
}

impl FileSink {
    pub fn open(path: &str) -> std::io::Result<Self> {
        let file = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self {
            path: PathBuf::from(path),
            file: Arc::new(Mutex::new(file)),
        })
    }
}

#[async_trait::async_trait]
impl Sink for FileSink {
    async fn publish(&self, events: &[Event], _ctl: &PublishCtl) -> Vec<Outcome> {
        let mut buf = Vec::with_capacity(events.len() * 256);
        for e in events {
            write_envelope(e, &mut buf);
            buf.push(b'\n');
        }
        let file = Arc::clone(&self.file);
        let result = tokio::task::spawn_blocking(move || {
            let mut f = file.lock().unwrap_or_else(|p| p.into_inner());
            f.write_all(&buf)?;
            f.sync_data()
        })
        .await
        .unwrap_or_else(|e| Err(std::io::Error::other(e)));
        let outcome = match result {
            Ok(()) => Outcome::Published,
            Err(e) => Outcome::Failed(SinkError::retryable(format!(
                "appending to {}: {e}",
                self.path.display()
            ))),
        };
        vec![outcome; events.len()]
    }

    fn is_local(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!("file:{}", self.path.display())
    }
}
