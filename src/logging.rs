//! Logging to stderr with `tracing`; stdout is for data only.
//!
//! The filter shows outboxctl's own lines only: third-party crates are off at every `-v` level,
//! because some print what they handle (the AMQP client logs a returned message whole, payload
//! bytes included, at WARN; HTTP and SQL clients print requests and statements at debug/trace).
//! `OUTBOXCTL_LOG` (then `RUST_LOG`) is the explicit escape hatch: a full tracing filter that
//! replaces the default, third-party crates included.

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
use crate::config::Error;

/// Installs the global subscriber. A daemon logs at info by default, other commands at warn.
/// Fails (a usage error naming the variable) when `OUTBOXCTL_LOG` or `RUST_LOG` is not a valid
/// filter.
pub fn init(args: &LogArgs, daemon: bool) -> Result<(), Error> {
    let directives = directives(args, daemon, |k| std::env::var(k).ok())?;
    let filter = EnvFilter::try_new(&directives).map_err(|e| Error::invalid(e.to_string()))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // A log line that cannot be written (a closed stderr) is dropped: tracing would
        // otherwise report it with eprintln!, which panics on that same closed stderr.
        .log_internal_errors(false)
        .with_target(false);
    let _ = match args.log_format {
        LogFormat::Json => builder.event_format(JsonLines).try_init(),
        LogFormat::Text => builder.with_ansi(crate::output::stderr_color()).try_init(),
    };
    Ok(())
}

/// The filter directives: `OUTBOXCTL_LOG`, else `RUST_LOG` (each checked; empty means unset),
/// else outboxctl's own level from -q/-v with every other crate off.
pub fn directives(
    args: &LogArgs,
    daemon: bool,
    env: impl Fn(&str) -> Option<String>,
) -> Result<String, Error> {
    for var in ["OUTBOXCTL_LOG", "RUST_LOG"] {
        if let Some(value) = env(var).filter(|v| !v.trim().is_empty()) {
            check(var, &value).map_err(Error::Invalid)?;
            return Ok(value);
        }
    }
    let level = match (args.quiet, args.verbose) {
        (true, _) => "error",
        (false, 0) if daemon => "info",
        (false, 0) => "warn",
        (false, 1) => "info",
        (false, 2) => "debug",
        _ => "trace",
    };
    Ok(format!("off,outboxctl={level}"))
}

/// Checks a filter more strictly than `EnvFilter` does: it reads a bare word that is not a level
/// (`verbose`, `debg`) as a target name and so silently filters everything out. Here every
/// directive is a level or `TARGET=LEVEL` (`TARGET[span{field=value}]=LEVEL` too).
fn check(var: &str, value: &str) -> Result<(), String> {
    let hint = if var == "RUST_LOG" {
        " (OUTBOXCTL_LOG, when set, is used instead of RUST_LOG)"
    } else {
        ""
    };
    let level_ok = |s: &str| {
        s.trim()
            .parse::<tracing::level_filters::LevelFilter>()
            .is_ok()
    };
    for d in value.split(',').map(str::trim).filter(|d| !d.is_empty()) {
        let level = d.rsplit_once('=').map_or(d, |(_, level)| level);
        if !level_ok(level) {
            return Err(format!(
                "invalid {var} `{value}`: `{level}` is not a level; write LEVEL or TARGET=LEVEL with a level of off, error, warn, info, debug or trace (e.g. outboxctl=debug){hint}"
            ));
        }
    }
    EnvFilter::builder()
        .parse(value)
        .map(|_| ())
        .map_err(|e| format!("invalid {var} `{value}`: {e}{hint}"))
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
    let text = crate::output::error_message(err);
    let line = match format {
        LogFormat::Text => format!("error: {text}"),
        LogFormat::Json => json_line("error", &text, Map::new()),
    };
    crate::output::eprint_line(line);
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

    fn args(verbose: u8, quiet: bool) -> LogArgs {
        LogArgs {
            verbose,
            quiet,
            log_format: LogFormat::Text,
        }
    }

    #[test]
    fn verbosity_raises_only_outboxctls_level() {
        let none = |_: &str| None;
        for (v, q, daemon, want) in [
            (0, false, true, "off,outboxctl=info"),
            (0, false, false, "off,outboxctl=warn"),
            (2, false, false, "off,outboxctl=debug"),
            (5, false, true, "off,outboxctl=trace"),
            (0, true, true, "off,outboxctl=error"),
        ] {
            assert_eq!(directives(&args(v, q), daemon, none).unwrap(), want);
        }
    }

    #[test]
    fn the_variables_replace_the_default_and_are_checked() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |k: &str| {
                pairs
                    .iter()
                    .find(|(n, _)| *n == k)
                    .map(|(_, v)| v.to_string())
            }
        };
        let a = args(2, false);
        assert_eq!(
            directives(&a, true, env(&[("OUTBOXCTL_LOG", "lapin=warn,info")])).unwrap(),
            "lapin=warn,info"
        );
        assert_eq!(
            directives(
                &a,
                true,
                env(&[("OUTBOXCTL_LOG", " "), ("RUST_LOG", "debug")])
            )
            .unwrap(),
            "debug"
        );
        assert_eq!(
            directives(
                &a,
                true,
                env(&[("OUTBOXCTL_LOG", "warn"), ("RUST_LOG", "x")])
            )
            .unwrap(),
            "warn"
        );
        for good in [
            "info",
            "OFF",
            "outboxctl=debug,sqlx=warn",
            "a::b=trace",
            "x[s{f=1}]=debug",
        ] {
            assert!(check("OUTBOXCTL_LOG", good).is_ok(), "{good}");
        }
        for bad in [
            "verbose",
            "debg",
            "outboxctl=loud",
            "[{",
            "outboxctl",
            "a=b=c",
        ] {
            let e = check("OUTBOXCTL_LOG", bad).unwrap_err();
            assert!(
                e.starts_with(&format!("invalid OUTBOXCTL_LOG `{bad}`")),
                "{e}"
            );
        }
        assert!(check("RUST_LOG", "x")
            .unwrap_err()
            .contains("OUTBOXCTL_LOG, when set"));
    }

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
