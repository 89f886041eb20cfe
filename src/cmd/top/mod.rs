//! `outboxctl top`: a live view for on-call. Three parts, apart:
//!
//! - the sampler ([`sample_loop`], polled beside the view): every `--interval` one read-only snapshot
//!   of figures (`ops::top::read`), published on a watch channel; a failed read is published as
//!   an error beside the last good sample, the connection dropped and opened again at the next
//!   interval, for as long as the view runs;
//! - the drawing ([`draw`]): a pure function of what the sampler published;
//! - this loop: draws each new sample, reads the keys and signals, and leaves the terminal as it
//!   found it on every way out ([`terminal::Screen`]: quit, an error, a panic).
//!
//! The database is reached once before the terminal is touched, so a wrong URL or an unmigrated
//! schema is an ordinary error on the normal screen (exit 3, or 1).

pub mod draw;
pub mod terminal;

use std::io::IsTerminal;
use std::time::Duration;

use tokio::sync::watch;

use crate::cli::{TopArgs, TopBy};
use crate::config::DbConfig;
use crate::db;
use crate::exit::CodedError;
use crate::ops::top::{Sample, Throughput};

/// What the sampler last published.
#[derive(Debug, Clone, Default)]
struct Latest {
    sample: Option<Sample>,
    error: Option<String>,
}

pub async fn run(args: TopArgs) -> anyhow::Result<u8> {
    if !std::io::stdout().is_terminal() {
        return Err(CodedError::usage(
            "`outboxctl top` draws on a terminal and stdout is not one; in scripts and pipes use `outboxctl stats --json`",
        )
        .into());
    }
    let cfg = DbConfig::from_args(&args.db)?;
    let conn = db::connect_migrated(&cfg).await?;
    // Hidden, for the tests: panic once the first sample is drawn, to show the terminal restored.
    let panic_after_draw = std::env::var_os("OUTBOXCTL_TEST_TOP_PANIC").is_some();

    let (tx, mut rx) = watch::channel(Latest::default());
    // Polled beside the view (not spawned): it stops when the view returns.
    let sampler = sample_loop(conn, cfg.clone(), args.by, args.interval, tx);
    view_loop(&cfg, args.interval, &mut rx, sampler, panic_after_draw).await
}

/// Draws what the sampler publishes until a quit key or a signal; the screen is restored when
/// this returns, whatever it returns.
async fn view_loop(
    cfg: &DbConfig,
    interval: Duration,
    rx: &mut watch::Receiver<Latest>,
    sampler: impl std::future::Future<Output = ()>,
    panic_after_draw: bool,
) -> anyhow::Result<u8> {
    tokio::pin!(sampler);
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate())?;
    let mut hup = signal(SignalKind::hangup())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut screen = terminal::Screen::enter()?;
    let mut inputs = terminal::inputs();
    loop {
        {
            let latest = rx.borrow_and_update();
            let view = draw::View {
                schema: cfg.schema.name(),
                interval,
                sample: latest.sample.as_ref(),
                error: latest.error.as_deref(),
            };
            screen.draw(&view)?;
            if panic_after_draw && latest.sample.is_some() {
                panic!("OUTBOXCTL_TEST_TOP_PANIC: a panic after the first sample was drawn");
            }
        }
        tokio::select! {
            () = &mut sampler => anyhow::bail!("the sampler stopped"),
            changed = rx.changed() => {
                if changed.is_err() {
                    anyhow::bail!("the sampler stopped");
                }
            }
            input = inputs.recv() => match input {
                Some(Ok(terminal::Input::Quit)) => break,
                Some(Ok(terminal::Input::Redraw)) => {}
                Some(Err(e)) => return Err(anyhow::Error::new(e).context("cannot read the terminal")),
                None => anyhow::bail!("the terminal's reader stopped"),
            },
            _ = term.recv() => break,
            _ = hup.recv() => break,
            _ = int.recv() => break,
        }
    }
    drop(screen);
    Ok(crate::exit::OK)
}

/// Reads a sample every `interval` and publishes it. A failed read (or one that takes longer than
/// the connect timeout) is published as an error beside the last good sample; the connection is
/// then dropped and opened again at the next interval. Runs until dropped or the view is gone.
async fn sample_loop(
    conn: sqlx::PgConnection,
    cfg: DbConfig,
    by: TopBy,
    interval: Duration,
    tx: watch::Sender<Latest>,
) {
    let mut conn = Some(conn);
    let mut throughput = Throughput::new(interval);
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let read = read_once(&mut conn, &cfg, by, &mut throughput);
        let result = match tokio::time::timeout(cfg.connect_timeout, read).await {
            Ok(r) => r,
            Err(_) => Err(anyhow::anyhow!(
                "the database did not answer within {} (--connect-timeout)",
                humantime::format_duration(cfg.connect_timeout)
            )),
        };
        let sent = match result {
            Ok(sample) => tx.send(Latest {
                sample: Some(sample),
                error: None,
            }),
            Err(e) => {
                conn = None;
                let error = crate::output::error_message(&e);
                tx.send_modify(|l| l.error = Some(error));
                Ok(())
            }
        };
        if sent.is_err() || tx.is_closed() {
            return;
        }
    }
}

/// One sample, on the open connection or on a new one.
async fn read_once(
    conn: &mut Option<sqlx::PgConnection>,
    cfg: &DbConfig,
    by: TopBy,
    throughput: &mut Throughput,
) -> anyhow::Result<Sample> {
    if conn.is_none() {
        *conn = Some(db::connect(cfg).await?);
    }
    let c = conn.as_mut().expect("just opened");
    crate::ops::top::read(c, &cfg.schema, by, throughput).await
}
