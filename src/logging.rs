//! Logging to stderr with `tracing`; stdout is for data only.
//!
//! `--log-format json` writes one JSON object per line with the event's fields at the top level
//! beside `timestamp`, `level` (lower case) and `message` ([`JsonLines`]); the lines the relay
//! prints outside `tracing` (its summary, a fatal error) use the same shape ([`json_line`]), so a
//! log shipper can parse every line.

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{FormatEvent, FormatFields, Writer};
use tracing_subscriber::fmt::FmtContext;
use tracing_subscriber::registry::LookupSpan;
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
        .with_target(false);
    let _ = match args.log_format {
        LogFormat::Json => builder.event_format(JsonLines).try_init(),
        LogFormat::Text => builder.with_ansi(crate::output::stderr_color()).try_init(),
    };
}

/// One JSON log line: `timestamp` (RFC 3339, UTC), `level`, `message`, then `fields` at the top
/// level (a field of one of those three names is dropped rather than allowed to replace it).
pub fn json_line(level: &str, message: &str, fields: Map<String, Value>) -> String {
    let timestamp = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true);
    let mut line = format!(
        "{{\"timestamp\":{},\"level\":{},\"message\":{}",
        Value::String(timestamp),
        Value::String(level.to_ascii_lowercase()),
        Value::String(message.to_owned())
    );
    for (k, v) in fields {
        if !matches!(k.as_str(), "timestamp" | "level" | "message") {
            line.push(',');
            line.push_str(&Value::String(k).to_string());
            line.push(':');
            line.push_str(&v.to_string());
        }
    }
    line.push('}');
    line
}

/// Prints a command's fatal error on stderr: `error: ` and the cause chain as text, or under
/// `--log-format json` as a JSON line at level `error`.
pub fn print_error(err: &anyhow::Error, format: LogFormat) {
    use std::io::Write;
    let text = format!("{err:#}");
    let line = match format {
        LogFormat::Text => format!("error: {text}"),
        LogFormat::Json => json_line("error", &text, Map::new()),
    };
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// The `--log-format json` event format: see [`json_line`]. Spans are not shown (the relay uses
/// none); values keep their own case, the level is lower case.
struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        _ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut fields = JsonFields::default();
        event.record(&mut fields);
        let message = match fields.map.remove("message") {
            Some(Value::String(m)) => m,
            Some(other) => other.to_string(),
            None => String::new(),
        };
        let line = json_line(event.metadata().level().as_str(), &message, fields.map);
        writeln!(writer, "{line}")
    }
}

/// Collects an event's fields as JSON values: numbers and booleans as such, the rest as text.
#[derive(Default)]
struct JsonFields {
    map: Map<String, Value>,
}

impl Visit for JsonFields {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.map.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.map.insert(field.name().into(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.map.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.map.insert(field.name().into(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.map.insert(field.name().into(), value.into());
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.map
            .insert(field.name().into(), Value::String(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%x` fields arrive here too, formatted with Display.
        self.map
            .insert(field.name().into(), Value::String(format!("{value:?}")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_put_fields_at_the_top_level_and_never_replace_the_three_keys() {
        let mut fields = Map::new();
        fields.insert("published".into(), 3.into());
        fields.insert("level".into(), "spoofed".into());
        let v: Value = serde_json::from_str(&json_line("INFO", "relay finished", fields)).unwrap();
        assert_eq!(v["level"], "info");
        assert_eq!(v["message"], "relay finished");
        assert_eq!(v["published"], 3);
        assert!(v["timestamp"].as_str().unwrap().ends_with('Z'));
    }
}
