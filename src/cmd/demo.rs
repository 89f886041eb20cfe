//! `outboxctl demo`: the whole tool end to end in a scratch schema, with no broker. Narration goes
//! to stderr, relayed events to stdout.

use std::cell::Cell;
use std::time::Duration;

use anyhow::Context;

use tokio_util::sync::CancellationToken;

use crate::cli::{DemoArgs, StatsBy};
use crate::config::{DbConfig, Schema};
use crate::ops::publish::{publish_lines, Batches};
use crate::ops::stats::collect;
use crate::relay::daemon::OnceLimits;
use crate::relay::{Backoff, Mode, Relay, RelayConfig};
use crate::{db, exit, output};

const EVENTS: &str = r#"{"event_type":"order.placed","aggregate_type":"order","aggregate_id":"1001","payload":{"total_cents":4200,"currency":"EUR"},"headers":{"schema-version":"1"},"idempotency_key":"order.placed:1001"}
{"event_type":"order.placed","aggregate_type":"order","aggregate_id":"1002","payload":{"total_cents":1999,"currency":"EUR"},"idempotency_key":"order.placed:1002"}
{"event_type":"order.placed","aggregate_type":"order","aggregate_id":"1001","payload":{"total_cents":4200,"currency":"EUR"},"idempotency_key":"order.placed:1001"}
{"event_type":"invoice.reminder","aggregate_type":"invoice","aggregate_id":"77","payload":{"due":"tomorrow"},"idempotency_key":"invoice.reminder:77","delay":"2s"}"#;

/// Runs the demo and drops its scratch schema however it ends: done, failed, interrupted
/// (SIGINT/SIGTERM: exit code 130), or with its output closed (`outboxctl demo | head`: the
/// narration is dropped, the demo goes on and exits 0).
pub async fn run(args: DemoArgs) -> anyhow::Result<u8> {
    let mut db_args = args.db.clone();
    db_args.schema = format!("outboxctl_demo_{}", std::process::id());
    let cfg = DbConfig::from_args(&db_args)?;
    say(&format!(
        "connecting to {} and migrating scratch schema `{}`",
        cfg.display,
        cfg.schema.name()
    ));
    let touched = Cell::new(false);
    let outcome = tokio::select! {
        r = demo(&cfg, &touched) => r.map(|()| exit::OK),
        () = interrupted() => {
            say("interrupted");
            Ok(exit::INTERRUPTED)
        }
    };
    if !touched.get() {
        return outcome;
    }
    say("dropping the scratch schema");
    let dropped = drop_scratch(&cfg).await;
    match (outcome, dropped) {
        (Ok(code), Ok(())) => {
            if code == exit::OK {
                say("done");
            }
            Ok(code)
        }
        (Ok(_), Err(d)) => Err(d),
        (Err(e), Ok(())) => Err(e),
        (Err(e), Err(d)) => {
            output::eprint_line(format_args!("error: {}", exit::message(&d)));
            Err(e)
        }
    }
}

/// The first SIGINT or SIGTERM.
async fn interrupted() {
    use tokio::signal::unix::{signal, SignalKind};
    match signal(SignalKind::terminate()) {
        Ok(mut term) => {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        }
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

async fn drop_scratch(cfg: &DbConfig) -> anyhow::Result<()> {
    let schema = cfg.schema.name();
    let mut conn = db::connect(cfg)
        .await
        .with_context(|| format!("could not drop the scratch schema `{schema}`"))?;
    db::drop_schema(&mut conn, &cfg.schema)
        .await
        .with_context(|| format!("could not drop the scratch schema `{schema}`"))?;
    Ok(())
}

/// Narration on stderr: silenced by -q, and a closed stderr is no reason to stop.
fn say(s: &str) {
    output::note(format_args!("==> {s}"));
}

async fn demo(cfg: &DbConfig, touched: &Cell<bool>) -> anyhow::Result<()> {
    let mut conn = db::connect(cfg).await?;
    touched.set(true);
    let applied = db::migrate::apply(&mut conn, &cfg.schema).await?;
    say(&format!("applied migrations {:?}", applied.versions));

    say("publishing 4 JSON lines (one duplicate by idempotency key, one delayed by 2s)");
    let report = publish_lines(&mut conn, EVENTS.as_bytes(), Batches::of(100), false).await?;
    say(&format!(
        "inserted {}, skipped {} duplicate",
        report.inserted, report.duplicates
    ));
    show_stats(&mut conn, &cfg.schema).await?;

    let relay = Relay {
        db: db::Session::new(db::pool(cfg, 2).await?, db::Pin::default()),
        sink: std::sync::Arc::new(crate::sink::stdout::sink()),
        cfg: RelayConfig {
            mode: Mode::Tx,
            batch_size: 100,
            batch_bytes: crate::relay::DEFAULT_BATCH_BYTES,
            concurrency: 4,
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(10),
            max_attempts: 5,
            backoff: Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(60),
            },
            shutdown_grace: Duration::from_secs(5),
            failpoint: None,
            pipeline_depth: 1,
        },
        ordering: Default::default(),
        sizing: Default::default(),
        start: crate::relay::cursor::ClaimStart::default(),
        log: Default::default(),
    };
    let never = CancellationToken::new();
    say("relay --once: the ready events go to stdout; the delayed one waits");
    let r = crate::relay::daemon::once(&relay, OnceLimits::default(), &never).await?;
    say(&format!("published {}", r.published));
    show_stats(&mut conn, &cfg.schema).await?;

    say("waiting for the delayed event to fall due, then relaying again");
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let r = crate::relay::daemon::once(&relay, OnceLimits::default(), &never).await?;
    say(&format!("published {}", r.published));
    show_stats(&mut conn, &cfg.schema).await?;
    relay.db.close().await;
    Ok(())
}

async fn show_stats(conn: &mut sqlx::PgConnection, schema: &Schema) -> anyhow::Result<()> {
    let s = collect(conn, schema.name(), Some(StatsBy::EventType)).await?;
    let mut t = output::table(&["event type", "ready", "scheduled", "dead", "published (1h)"]);
    for (k, f) in s.groups.iter().flatten() {
        t.add_row(vec![
            k.clone(),
            f.ready.to_string(),
            f.scheduled.to_string(),
            f.dead_lettered.to_string(),
            f.published_last_hour
                .map_or_else(|| "-".into(), |n| n.to_string()),
        ]);
    }
    output::note(output::render_table(&t));
    Ok(())
}
