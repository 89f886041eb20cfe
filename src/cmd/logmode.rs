//! `outboxctl log enable|disable|status`: log mode's switch (`db::log`).

use anyhow::Context;
use serde::Serialize;

use crate::cli::{LogModeArgs, LogModeChangeArgs, LogModeCommand, LogModeStatusArgs};
use crate::config::DbConfig;
use crate::db::{self, log as sql, migrate::LOG_SCHEMA};
use crate::exit::OK;
use crate::output;

pub async fn run(args: LogModeArgs) -> anyhow::Result<u8> {
    match args.command {
        LogModeCommand::Enable(a) => change(a, true).await,
        LogModeCommand::Disable(a) => change(a, false).await,
        LogModeCommand::Status(a) => status(a).await,
    }
}

/// How often a waiting `enable`/`disable` retries the switch's lock.
const SWITCH_POLL: std::time::Duration = std::time::Duration::from_millis(200);

#[derive(Serialize, schemars::JsonSchema)]
struct ChangeReport {
    /// Whether log mode is on now.
    enabled: bool,
    /// Whether this run changed it.
    changed: bool,
    /// `disable`: events the log had published, marked published for queue mode.
    marked_published: u64,
}

async fn change(args: LogModeChangeArgs, on: bool) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let audit = crate::ops::audit::audit(&args.change.audit, args.change.reason.as_deref())?;
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, LOG_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let mut told = false;
    while !sql::try_lock_switch(&mut conn)
        .await
        .context("taking the log switch's lock")?
    {
        if !told {
            output::note("waiting for another `outboxctl log enable|disable` to finish");
            told = true;
        }
        tokio::time::sleep(SWITCH_POLL).await;
    }
    let result = if on {
        enable(&mut conn, &audit).await
    } else {
        disable(&mut conn, &audit).await
    };
    let unlocked = sql::unlock_switch(&mut conn).await;
    let (changed, marked) = result?;
    unlocked.context("releasing the log switch's lock")?;
    if args.change.output.json {
        output::print_json(&ChangeReport {
            enabled: on,
            changed,
            marked_published: marked,
        })?;
        return Ok(OK);
    }
    output::print_summary(match (on, changed) {
        (true, true) => "log mode on: relays in --mode auto read the outbox as a log; tx and lease relays stop within a second".to_owned(),
        (true, false) => "log mode: nothing changed (it was on)".to_owned(),
        (false, true) => format!(
            "log mode off: queue mode takes over at the log's position ({marked} events the log published marked published); restart relays in --mode auto"
        ),
        (false, false) => "log mode: nothing changed (it was not on)".to_owned(),
    })?;
    Ok(OK)
}

async fn enable(
    conn: &mut sqlx::PgConnection,
    audit: &db::audit::Audit,
) -> anyhow::Result<(bool, u64)> {
    // The index first: the reader's pages walk it as soon as the position is taken.
    match sql::xid_index(conn).await? {
        Some(true) => {}
        state => {
            if state.is_some() {
                output::note("the xid index is invalid (an interrupted build): building it again");
                sql::drop_xid_index(conn)
                    .await
                    .context("dropping the invalid xid index")?;
            }
            output::note(format!(
                "building the index {} (CREATE INDEX CONCURRENTLY: it waits for transactions already writing the outbox)",
                sql::XID_INDEX
            ));
            sql::create_xid_index(conn)
                .await
                .with_context(|| format!("building the index {}", sql::XID_INDEX))?;
        }
    }
    let changed = sql::switch_on(conn, audit)
        .await
        .context("switching log mode on")?;
    // After the switch committed: see `db::log::seal`.
    sql::seal(conn)
        .await
        .context("taking the log's first position")?;
    Ok((changed, 0))
}

async fn disable(
    conn: &mut sqlx::PgConnection,
    audit: &db::audit::Audit,
) -> anyhow::Result<(bool, u64)> {
    let marked = sql::switch_off(conn, audit)
        .await
        .context("switching log mode off")?;
    if marked.is_some() || sql::xid_index(conn).await?.is_some() {
        sql::drop_xid_index(conn)
            .await
            .with_context(|| format!("dropping the index {}", sql::XID_INDEX))?;
    }
    Ok((marked.is_some(), marked.unwrap_or(0)))
}

async fn status(args: LogModeStatusArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let mut conn = db::connect_migrated(&cfg).await?;
    let s = db::Pin::new(&cfg, &[])
        .run(&mut conn, async |c| sql::status(c).await)
        .await?;
    if args.output.json {
        output::print_json(&s)?;
        return Ok(OK);
    }
    if !s.enabled {
        output::print_line("log mode: off")?;
        return Ok(OK);
    }
    let reader = match (s.holder, s.lease_until) {
        (Some(h), Some(until)) => format!("relay {h} (lease until {})", until.to_rfc3339()),
        _ => "none (no relay holds the reader's lease)".to_owned(),
    };
    output::print_line(format!(
        "log mode: on since {}{}",
        s.enabled_at.map(|t| t.to_rfc3339()).unwrap_or_default(),
        s.enabled_by
            .map(|b| format!(" (by {})", output::escape_controls(&b)))
            .unwrap_or_default()
    ))?;
    output::print_line(format!("reader:      {reader}"))?;
    output::print_line(format!(
        "position:    {}{}",
        s.position.as_deref().unwrap_or("(not taken yet)"),
        s.window_to
            .map(|w| format!(" (reading the batch up to {w})"))
            .unwrap_or_default()
    ))?;
    output::print_line(format!("behind:      {} events not yet read", s.behind))?;
    output::print_line(format!(
        "retry set:   {} events ({} due now){}",
        s.retrying,
        s.retrying_due,
        if s.handed_over {
            ""
        } else {
            "; queue mode's pending events not yet handed over"
        }
    ))?;
    output::print_line(format!("pages:       {} settled", s.batches))?;
    Ok(OK)
}

/// The `--json` outputs of `log` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    use crate::schema::Output;
    vec![
        Output::of::<ChangeReport>("log enable --json", "Also `log disable --json`."),
        Output::of::<sql::Status>("log status --json", ""),
    ]
}
