//! The stdout sink: one JSON line per event, written once per batch by a writer thread of its own
//! (see [`super::local`]), so a reader that stops reading cannot hold a publish past
//! `--publish-timeout`. A closed stdout (`| head`) is the reader gone: the batch is given back.

use std::io::Write;

use super::local::{LocalSink, Target};

/// The process's stdout, unbuffered (a dup of fd 1, so no lock of `std::io::stdout` is held by a
/// thread blocked in write). `None` when there is no stdout at all (started with `>&-`): the
/// same as a reader gone.
struct Stdout(Option<std::fs::File>);

impl Target for Stdout {
    fn write_batch(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match &mut self.0 {
            Some(f) => f.write_all(buf),
            None => Err(std::io::ErrorKind::BrokenPipe.into()),
        }
    }

    fn undo_last(&mut self) {} // a pipe cannot take bytes back

    fn what(&self) -> String {
        "stdout".into()
    }
}

/// The stdout sink.
pub fn sink() -> LocalSink {
    use std::os::fd::AsFd;
    let file = std::io::stdout()
        .as_fd()
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .ok();
    LocalSink::new(Stdout(file), "stdout".into(), false)
}

/// Whether fd 1 is `/dev/null`: started with `>/dev/null`, or with stdout closed (`>&-`), which
/// Rust's runtime reopens as `/dev/null` before `main`, so the two cannot be told apart. Judged by
/// the device number, which a bind-mounted `/dev/null` (containers) shares.
pub fn is_dev_null() -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let Ok(fd) = std::io::stdout().as_fd().try_clone_to_owned() else {
        return false;
    };
    let (Ok(ours), Ok(null)) = (
        std::fs::File::from(fd).metadata(),
        std::fs::metadata("/dev/null"),
    ) else {
        return false;
    };
    ours.file_type().is_char_device() && ours.rdev() == null.rdev()
}
