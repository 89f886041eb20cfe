//! `outboxctl relay`: resolve flags into a [`Relay`], handle signals, run `--once` or the daemon.

use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::cli::{LogFormat, RelayArgs, RelayMode};
use crate::config::DbConfig;
use crate::exit::{self, CodedError};
use crate::relay::daemon::{DaemonSettings, OnceLimits};
use crate::relay::step::Failpoint;
use crate::relay::{Backoff, Mode, Relay, RelayConfig, RelayEvent, Report};
use crate::sink;
use crate::{db, output};

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct Summary<'a> {
    /// The sink's scheme (as the `sink` metric label): stdout, file, http, kafka, ...
    sink: String,
    /// How claims were settled.
    mode: Mode,
    /// Milliseconds the run took.
    elapsed_ms: u64,
    #[serde(flatten)]
    report: &'a Report,
}

/// Builds the relay from flags. `env` is how the signing secret and the test fail-point are
/// read (the process environment in production, a map in tests).
pub async fn build(
    args: &RelayArgs,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<(Relay, DbConfig)> {
    let cfg = DbConfig::from_args_pooled(&args.db)?;
    let (lease, publish_timeout) = (args.lease.lease(), args.lease.publish_timeout());
    if publish_timeout >= lease {
        return Err(CodedError::usage(format!(
            "--publish-timeout ({}) must be shorter than --lease ({}), or a slow publish could outlive its claim",
            humantime::format_duration(publish_timeout),
            humantime::format_duration(lease)
        ))
        .into());
    }
    if args.retry.backoff.backoff_base > args.retry.backoff.backoff_max {
        return Err(CodedError::usage("--backoff-base must not exceed --backoff-max").into());
    }
    let sink = crate::ops::sink::build(
        &args.sink,
        &args.sink_options,
        &args.format,
        &cfg,
        publish_timeout,
        &env,
    )
    .await?;
    let failpoint = env("OUTBOXCTL_TEST_FAILPOINT").and_then(|s| Failpoint::parse(&s));
    // The queue mode the flags and the sink ask for; the switch may say log mode instead, read
    // on the relay's own session (behind a pooler, through its pin), which is then made again
    // with log mode's name and depth.
    let queue_mode = match args.mode {
        RelayMode::Lease => Mode::Lease,
        RelayMode::Tx => Mode::Tx,
        RelayMode::Auto | RelayMode::Log if sink.batch_within_one_timeout() => Mode::Tx,
        RelayMode::Auto | RelayMode::Log => Mode::Lease,
    };
    let cfg_in = cfg;
    let open = async |mode: Mode| {
        // Log mode too: a page is read and handed to the sink while the page before it is
        // delivered, and settled after it (the position moves in order: `relay::log`).
        let pipeline_depth = args.pipeline_depth.unwrap_or_else(|| match mode {
            Mode::Log => crate::relay::log::LOG_PIPELINE_DEPTH,
            _ => sink.default_pipeline_depth(),
        });
        // Its sessions say what they are (`db::top::relay_application_name`): `top` lists
        // relays by it. One connection per step in flight (a tx-mode step holds its own),
        // LISTEN, the heartbeat or due-time query, and /readyz; and one more per step for a
        // tx-mode step that gives rows back mid-batch and reads their committed errors while
        // holding its own (opened only then: the pool opens connections lazily).
        let mut cfg = cfg_in.clone();
        cfg.options = cfg
            .options
            .clone()
            .application_name(&db::top::relay_application_name(
                &mode.to_string(),
                args.once,
                std::process::id(),
                cfg.schema.name(),
            ));
        let session =
            db::Session::for_relay(&cfg, 3 + 2 * pipeline_depth, args.async_commit, lease).await?;
        anyhow::Ok((session, cfg, pipeline_depth))
    };
    let (mut session, mut cfg, mut pipeline_depth) = open(queue_mode).await?;
    db::ensure_migrated(session.pool(), &cfg).await?;
    let log_on = session.run(async |c| db::log::is_on(c).await).await?;
    // The switch decides between log mode and the queue modes (each refuses the other's).
    let mode = match (args.mode, log_on) {
        (RelayMode::Log | RelayMode::Auto, true) => Mode::Log,
        (RelayMode::Log, false) => {
            return Err(
                CodedError::usage(crate::relay::log::SwitchError::LogOff.to_string()).into(),
            )
        }
        (RelayMode::Lease | RelayMode::Tx, true) => {
            let mode = if args.mode == RelayMode::Tx {
                "tx"
            } else {
                "lease"
            };
            return Err(CodedError::usage(
                crate::relay::log::SwitchError::LogOn { mode }.to_string(),
            )
            .into());
        }
        (_, false) => queue_mode,
    };
    if mode == Mode::Log {
        session.close().await;
        (session, cfg, pipeline_depth) = open(mode).await?;
    }
    let relay = Relay {
        db: session,
        sink,
        cfg: RelayConfig {
            mode,
            batch_size: args.batch_size,
            batch_bytes: args.batch_bytes,
            concurrency: args.concurrency,
            lease,
            publish_timeout,
            max_attempts: args.retry.max_attempts,
            backoff: Backoff {
                base: args.retry.backoff.backoff_base,
                max: args.retry.backoff.backoff_max,
            },
            shutdown_grace: args.shutdown_timeout,
            failpoint,
            pipeline_depth,
        },
        ordering: Default::default(),
        sizing: Default::default(),
        start: crate::relay::cursor::ClaimStart::default(),
        log: Default::default(),
    };
    Ok((relay, cfg))
}

pub async fn run(args: RelayArgs, log_format: LogFormat) -> anyhow::Result<u8> {
    let env = |k: &str| std::env::var(k).ok();
    let (relay, cfg) = build(&args, env).await?;
    // Hidden: tests shorten the heartbeat so they need not wait a minute.
    let heartbeat = match env("OUTBOXCTL_HEARTBEAT_INTERVAL") {
        Some(v) => humantime::parse_duration(&v)
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                CodedError::usage(format!(
                    "OUTBOXCTL_HEARTBEAT_INTERVAL: `{v}` is not a duration greater than zero"
                ))
            })?,
        None => crate::relay::daemon::HEARTBEAT,
    };
    let shutdown = CancellationToken::new();
    // Bound before the relay starts, so a port in use fails the start, not a later scrape.
    let listener = match &args.metrics_addr {
        Some(addr) => Some(crate::relay::endpoints::bind(addr).await?),
        None => None,
    };
    let health = Arc::new(crate::relay::metrics::Health::new(
        crate::relay::metrics::Health::margin_for(cfg.connect_timeout, args.poll_interval),
    ));
    let server_stop = CancellationToken::new();
    let server = match listener {
        Some(listener) => {
            let prometheus = crate::relay::metrics::install(
                crate::relay::metrics::sink_label(args.sink.spec()),
                relay.cfg.mode,
            )
            .map_err(|e| anyhow::anyhow!("cannot set up the metrics recorder: {e}"))?;
            if let Ok(a) = listener.local_addr() {
                tracing::info!(addr = %a, "serving /metrics, /livez and /readyz");
            }
            let state = crate::relay::endpoints::State::new(
                prometheus,
                Arc::clone(&health),
                relay.db.clone(),
                shutdown.clone(),
            );
            Some(crate::relay::endpoints::spawn(
                listener,
                state,
                server_stop.clone(),
            ))
        }
        None => None,
    };
    // First SIGTERM/SIGINT: stop claiming, finish in-flight work, release the rest. Second: exit
    // at once (leases expire, nothing is lost). SIGHUP: the sink reopens its file.
    crate::ops::signals::stop_on_signals(
        shutdown.clone(),
        Some(Arc::clone(&relay.sink)),
        || RelayEvent::ShutdownRequested.emit(),
        || RelayEvent::SecondSignal.emit(),
    )?;
    let started = Instant::now();
    tracing::info!(sink = %relay.sink.describe(), mode = %relay.cfg.mode, schema = cfg.schema.name(), once = args.once, "relay starting");
    let report = if args.once {
        let limits = OnceLimits {
            max_events: args.max_events,
            max_duration: args.max_duration,
            reconnect_for: cfg.connect_timeout,
        };
        match crate::relay::daemon::once(&relay, limits, &shutdown).await {
            Ok(r) => r,
            // Read-only for the whole of --connect-timeout: the standby was not promoted.
            Err(e) if crate::db::is_read_only(e.db()) => {
                return Err(crate::db::Error::ReadOnly.into())
            }
            Err(e) if e.is_transient() => {
                return Err(crate::db::Error::Lost {
                    within: cfg.connect_timeout,
                    cause: e.db().to_string(),
                }
                .into())
            }
            // A permanent database error (a missing privilege, say): the step only wrapped it.
            Err(e) => return Err(switch_or_db(e)),
        }
    } else {
        let settings = DaemonSettings {
            poll_interval: args.poll_interval,
            channel: cfg.schema.channel(),
            heartbeat,
            health,
        };
        match crate::relay::daemon::daemon(&relay, &settings, &shutdown).await {
            Ok(r) => r,
            Err(e) => {
                relay.db.close().await;
                return Err(switch_or_db(e));
            }
        }
    };
    relay.release_log().await;
    server_stop.cancel();
    if let Some(server) = server {
        let _ = server.await;
    }
    relay.db.close().await;
    let summary = Summary {
        sink: relay.sink.describe(),
        mode: relay.cfg.mode,
        elapsed_ms: started.elapsed().as_millis() as u64,
        report: &report,
    };
    let format = if args.output.json {
        SummaryFormat::Json
    } else if log_format == LogFormat::Json {
        SummaryFormat::LogLine
    } else {
        SummaryFormat::Text
    };
    print_summary(&summary, format, relay.sink.describe() == "stdout")?;
    match &report.sink_down {
        Some(sink::SinkError::Stalled(e)) => {
            let advice = match relay.cfg.mode {
                Mode::Tx => "the batch was rolled back and will be relayed again; use --mode lease (no transaction stays open while writing), or a longer --lease and --publish-timeout",
                Mode::Lease | Mode::Log => "the batch was given back and will be relayed again; use a longer --publish-timeout (and --lease)",
            };
            return Err(sink::Error::Stalled {
                cause: e.clone(),
                advice,
            }
            .into());
        }
        Some(e @ sink::SinkError::Unavailable { .. }) if args.once => {
            return Err(sink::Error::Unavailable {
                sink: relay.sink.describe(),
                cause: e.to_string(),
                given_back: report.unavailable,
            }
            .into());
        }
        _ => {}
    }
    if args.once
        && report.published == 0
        && report.sink_failures > 0
        && report.sink_failures == report.retried + report.lease_lost
    {
        return Err(sink::Error::EveryPublishFailed {
            sink: relay.sink.describe(),
            failures: report.sink_failures,
        }
        .into());
    }
    Ok(exit::OK)
}

/// The error a run ends with: the log switch, turned where this relay's mode cannot follow (a
/// usage error, as at the start: exit 2), or the database error the step wrapped.
fn switch_or_db(e: crate::relay::StepError) -> anyhow::Error {
    match crate::relay::log::SwitchError::of(e.db()) {
        Some(switch) => CodedError::usage(switch.to_string()).into(),
        None => e.into_db().into(),
    }
}

/// How the summary is written: `--json`'s object; under `--log-format json` (without `--json`) a
/// JSON log line (`timestamp`, `level`, `message` and the same fields), so every line the daemon
/// prints parses as JSON; otherwise one line of text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SummaryFormat {
    Text,
    Json,
    LogLine,
}

/// The summary goes to stdout, unless the sink itself writes there (then stderr).
fn print_summary(
    s: &Summary<'_>,
    format: SummaryFormat,
    sink_is_stdout: bool,
) -> anyhow::Result<()> {
    let text = match format {
        SummaryFormat::Json => serde_json::to_string(s)?,
        SummaryFormat::LogLine => {
            let serde_json::Value::Object(fields) = serde_json::to_value(s)? else {
                unreachable!("a struct serializes to an object")
            };
            crate::logging::json_line("info", "relay finished", fields)
        }
        SummaryFormat::Text => {
            let r = s.report;
            format!(
                "relayed to {} ({} mode) in {}: {} published, {} retried, {} dead-lettered, {} released, {} lease-lost{}{}",
                s.sink,
                s.mode,
                output::human_duration(std::time::Duration::from_millis(s.elapsed_ms)),
                r.published,
                r.retried,
                r.dead_lettered,
                r.released,
                r.lease_lost,
                if r.unavailable > 0 {
                    format!(" ({} given back: the sink could not take them)", r.unavailable)
                } else {
                    String::new()
                },
                if r.deferred > 0 {
                    format!(
                        ", {} deferred (the sink pushed back; no attempt counted)",
                        r.deferred
                    )
                } else {
                    String::new()
                }
            )
        }
    };
    // JSON is data, printed whatever -q says; the text line (or its JSON log-line form) is a
    // summary that -q silences.
    let json = format == SummaryFormat::Json;
    match (json, sink_is_stdout) {
        (true, true) => output::eprint_line(text),
        (true, false) => output::print_line(text)?,
        (false, true) => output::note(text),
        (false, false) => output::print_summary(text)?,
    }
    Ok(())
}

/// The `--json` output of `relay --once` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    vec![crate::schema::Output::of::<Summary<'static>>(
        "relay --once --json",
        "The summary of the run, printed when it ends (on stderr instead when the sink is \
         stdout). With `--log-format json` and no `--json`, the same fields form the \
         `relay finished` log line.",
    )]
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    #[test]
    fn pipeline_depth_accepts_up_to_the_relays_maximum() {
        let max = crate::relay::MAX_PIPELINE_DEPTH;
        let parse = |n: u32| {
            crate::cli::Cli::try_parse_from([
                "outboxctl",
                "relay",
                "--sink",
                "null",
                "--pipeline-depth",
                &n.to_string(),
            ])
        };
        assert!(parse(max).is_ok());
        assert!(parse(max + 1).is_err());
        assert!(parse(0).is_err());
    }
}
