//! `outboxctl relay`: resolve flags into a [`Relay`], handle signals, run `--once` or the daemon.

use std::io::Write;
use std::time::Instant;

use serde::Serialize;
use tokio_util::sync::CancellationToken;

use crate::cli::{RelayArgs, RelayMode};
use crate::config::DbConfig;
use crate::exit::{self, CodedError};
use crate::relay::daemon::{DaemonSettings, OnceLimits};
use crate::relay::step::Failpoint;
use crate::relay::{Backoff, Mode, Relay, RelayConfig, Report};
use crate::sink::{self, SinkOptions};
use crate::{db, output};

#[derive(Debug, Serialize)]
struct Summary<'a> {
    sink: String,
    mode: Mode,
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
    let cfg = DbConfig::from_args(&args.db)?;
    let publish_timeout = args.publish_timeout.unwrap_or(args.lease / 2);
    if publish_timeout >= args.lease {
        return Err(CodedError::usage(format!(
            "--publish-timeout ({}) must be shorter than --lease ({}), or a slow publish could outlive its claim",
            humantime::format_duration(publish_timeout),
            humantime::format_duration(args.lease)
        ))
        .into());
    }
    if args.backoff_base > args.backoff_max {
        return Err(CodedError::usage("--backoff-base must not exceed --backoff-max").into());
    }
    let signing_secrets = match &args.signing_secret_env {
        Some(var) => Some(env(var).filter(|v| !v.trim().is_empty()).ok_or_else(|| {
            CodedError::usage(format!(
                "--signing-secret-env names `{var}`, but that variable is not set"
            ))
        })?),
        None => None,
    };
    let sink = sink::from_spec(
        &args.sink,
        &SinkOptions {
            http_headers: args.http_headers.clone(),
            signing_secrets,
            timeout: publish_timeout,
        },
    )
    .await?;
    let is_http = args.sink.starts_with("http://") || args.sink.starts_with("https://");
    if !args.http_headers.is_empty() && !is_http {
        return Err(CodedError::usage("--http-header only applies to an http(s):// --sink").into());
    }
    let mode = match args.mode {
        RelayMode::Lease => Mode::Lease,
        RelayMode::Tx => Mode::Tx,
        RelayMode::Auto if sink.is_local() => Mode::Tx,
        RelayMode::Auto => Mode::Lease,
    };
    let failpoint = env("OUTBOXCTL_TEST_FAILPOINT").and_then(|s| Failpoint::parse(&s));
    let pool = db::pool_for_relay(&cfg, 4, args.async_commit, args.lease).await?;
    db::ensure_migrated(&pool, &cfg).await?;
    let relay = Relay {
        pool,
        sink,
        cfg: RelayConfig {
            mode,
            batch_size: args.batch_size,
            batch_bytes: args.batch_bytes,
            concurrency: args.concurrency,
            lease: args.lease,
            publish_timeout,
            max_attempts: args.max_attempts,
            backoff: Backoff {
                base: args.backoff_base,
                max: args.backoff_max,
            },
            shutdown_grace: args.shutdown_timeout,
            failpoint,
        },
    };
    Ok((relay, cfg))
}

pub async fn run(args: RelayArgs) -> anyhow::Result<u8> {
    let (relay, cfg) = build(&args, |k| std::env::var(k).ok()).await?;
    let shutdown = CancellationToken::new();
    spawn_signal_handler(shutdown.clone());
    let started = Instant::now();
    tracing::info!(sink = %relay.sink.describe(), mode = ?relay.cfg.mode, schema = cfg.schema.name(), once = args.once, "relay starting");
    let report = if args.once {
        let limits = OnceLimits {
            max_events: args.max_events,
            max_duration: args.max_duration,
        };
        match crate::relay::daemon::once(&relay, limits, &shutdown).await {
            Ok(r) => r,
            Err(e) if db::is_transient(&e) => {
                return Err(
                    CodedError::database(format!("lost the database during the run: {e}")).into(),
                )
            }
            Err(e) => return Err(e.into()),
        }
    } else {
        let settings = DaemonSettings {
            poll_interval: args.poll_interval,
            channel: cfg.schema.channel(),
        };
        crate::relay::daemon::daemon(&relay, &settings, &shutdown).await
    };
    relay.pool.close().await;
    let summary = Summary {
        sink: relay.sink.describe(),
        mode: relay.cfg.mode,
        elapsed_ms: started.elapsed().as_millis() as u64,
        report: &report,
    };
    print_summary(
        &summary,
        args.output.json,
        relay.sink.describe() == "stdout",
    )?;
    if args.once
        && report.published == 0
        && report.sink_failures > 0
        && report.sink_failures == report.retried + report.lease_lost
    {
        return Err(CodedError::sink(format!(
            "the sink ({}) failed every publish of the run ({}); they will be retried",
            relay.sink.describe(),
            output::plural(report.sink_failures, "failure", "failures")
        ))
        .into());
    }
    Ok(exit::OK)
}

/// The summary goes to stdout, unless the sink itself writes there (then stderr).
fn print_summary(s: &Summary<'_>, json: bool, sink_is_stdout: bool) -> anyhow::Result<()> {
    let text = if json {
        serde_json::to_string(s)?
    } else {
        let r = s.report;
        format!(
            "relayed to {} ({} mode) in {}: {} published, {} retried, {} dead-lettered, {} released, {} lease-lost",
            s.sink,
            match s.mode {
                Mode::Lease => "lease",
                Mode::Tx => "tx",
            },
            output::human_duration(std::time::Duration::from_millis(s.elapsed_ms)),
            r.published,
            r.retried,
            r.dead_lettered,
            r.released,
            r.lease_lost
        )
    };
    if sink_is_stdout {
        writeln!(std::io::stderr(), "{text}")?;
    } else {
        writeln!(std::io::stdout(), "{text}")?;
    }
    Ok(())
}

/// First SIGTERM/SIGINT: stop claiming, finish in-flight work, release the rest. Second: exit at
/// once (leases expire, nothing is lost).
fn spawn_signal_handler(shutdown: CancellationToken) {
    tokio::spawn(async move {
        let Ok(mut term) =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        else {
            return;
        };
        let mut signals = 0;
        loop {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            signals += 1;
            if signals == 1 {
                tracing::info!(
                    "shutting down: finishing in-flight publishes (a second signal exits at once)"
                );
                shutdown.cancel();
            } else {
                eprintln!(
                    "second signal: exiting now; unsettled claims are retried after their lease"
                );
                std::process::exit(130);
            }
        }
    });
}
