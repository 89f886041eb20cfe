//! The file sink: appends JSON lines and fsyncs before the batch is reported published. A batch
//! is all or nothing: when a write or the fsync fails (disk full, I/O error) the file is truncated
//! back to its length before the batch, so no half line is left, and the rows are given back
//! untouched. Writes go through a writer thread of its own (see [`super::local`]). SIGHUP reopens
//! the path between two batches, for logrotate (rename, then `kill -HUP`).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

use super::local::{LocalSink, Target};

struct Appender {
    file: File,
    path: PathBuf,
    /// The file's length before the last batch (None when it is not a regular file).
    before: Option<u64>,
}

impl Appender {
    fn truncate_back(&mut self) -> std::io::Result<()> {
        match self.before {
            Some(len) => self.file.set_len(len),
            None => Ok(()),
        }
    }
}

impl Target for Appender {
    fn write_batch(&mut self, buf: &[u8]) -> std::io::Result<()> {
        let meta = self.file.metadata()?;
        self.before = meta.is_file().then_some(meta.len());
        let result = self.file.write_all(buf).and_then(|_| self.file.sync_data());
        if let Err(e) = result {
            return match self.truncate_back() {
                Ok(()) => Err(e),
                Err(t) => Err(std::io::Error::new(
                    e.kind(),
                    format!("{e}; truncating back failed too, so a partial line may remain: {t}"),
                )),
            };
        }
        Ok(())
    }

    fn undo_last(&mut self) {
        let _ = self.truncate_back().and_then(|_| self.file.sync_data());
    }

    fn what(&self) -> String {
        format!("appending to {}", self.path.display())
    }

    /// Opens the path again (creating it, after logrotate renamed the old file away) and writes
    /// there from the next batch; on an error the old file stays open and in use.
    fn reopen(&mut self) -> std::io::Result<()> {
        self.file = open_append(&self.path)?;
        self.before = None;
        Ok(())
    }
}

fn open_append(path: &std::path::Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

/// The file sink, appending to `path`.
pub fn open(path: &str) -> std::io::Result<LocalSink> {
    let path = PathBuf::from(path);
    let file = open_append(&path)?;
    let name = format!("file:{}", path.display());
    let appender = Appender {
        file,
        path,
        before: None,
    };
    Ok(LocalSink::new(appender, name, true))
}
