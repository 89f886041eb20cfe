//! Logging to stderr with `tracing`; stdout is for data only.

use tracing_subscriber::EnvFilter;

use crate::cli::{LogArgs, LogFormat};

/// Installs the global subscriber. A daemon logs at info by default, other commands at warn.
/// `OUTBOXCTL_LOG` (then `RUST_LOG`) overrides -v/-q.
pub fn init(args: &LogArgs, daemon: bool) {
    let default = match (args.quiet, args.verbose) {
        (true, _) => "error",
        (false, 0) if daemon => "info",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    let filter = std::env::var("OUTBOXCTL_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok()
        .and_then(|s| EnvFilter::try_new(s).ok())
        .unwrap_or_else(|| EnvFilter::new(format!("outboxctl={default},sqlx=error,warn")));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A log line that cannot be written (a closed stderr) is dropped: tracing would
        // otherwise report it with eprintln!, which panics on that same closed stderr.
        .log_internal_errors(false)
        .with_target(false);
    let _ = match args.log_format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.with_ansi(crate::output::stderr_color()).try_init(),
    };
}
