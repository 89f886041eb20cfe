//! `outboxctl ordering enable|disable|status|skip`: the database switch for ordered delivery per
//! key, and skipping a key's head.

use serde::Serialize;

use crate::cli::{
    OnDeadArg, OrderingArgs, OrderingCommand, OrderingDisableArgs, OrderingEnableArgs,
    OrderingSkipArgs, OrderingStatusArgs,
};
use crate::config::{self, DbConfig};
use crate::db::{self, audit::Audit, migrate::ORDERING_SCHEMA, ordering as sql};
use crate::exit::{CodedError, FAILURE, OK};
use crate::output;

pub async fn run(args: OrderingArgs) -> anyhow::Result<u8> {
    match args.command {
        OrderingCommand::Enable(a) => enable(a).await,
        OrderingCommand::Disable(a) => disable(a).await,
        OrderingCommand::Status(a) => status(a).await,
        OrderingCommand::Skip(a) => skip(a).await,
    }
}

fn reason(r: Option<&str>) -> Result<Option<String>, CodedError> {
    match r.map(str::trim) {
        Some("") => Err(CodedError::usage("--reason must not be empty")),
        r => Ok(r.map(str::to_owned)),
    }
}

/// Validated `--aggregate-type` values: none empty, no duplicates.
fn types(given: &[String]) -> Result<Vec<String>, CodedError> {
    let mut out: Vec<String> = Vec::new();
    for t in given {
        if t.trim().is_empty() {
            return Err(CodedError::usage(
                "--aggregate-type must not be empty: give an aggregate type, e.g. order",
            ));
        }
        if !out.contains(t) {
            out.push(t.clone());
        }
    }
    Ok(out)
}

#[derive(Serialize)]
struct ChangeReport {
    enabled: bool,
    changed: Vec<String>,
    /// Running relays follow the change within this many milliseconds.
    relays_follow_within_ms: u64,
}

async fn enable(args: OrderingEnableArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let mut types = types(&args.aggregate_types)?;
    if types.is_empty() {
        types.push(sql::ALL_TYPES.to_owned());
    }
    let on_dead = match args.on_dead {
        OnDeadArg::Block => sql::OnDead::Block,
        OnDeadArg::Skip => sql::OnDead::Skip,
    };
    let audit = Audit {
        actor: config::actor(&args.audit)?,
        reason: reason(args.reason.as_deref())?,
    };
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, ORDERING_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let changed = sql::enable(&mut conn, &types, on_dead, &audit)
        .await
        .map_err(|e| anyhow::anyhow!(e).context("switching ordering on"))?;
    report(true, changed, args.output.json, Some(on_dead))
}

async fn disable(args: OrderingDisableArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let types = types(&args.aggregate_types)?;
    let audit = Audit {
        actor: config::actor(&args.audit)?,
        reason: reason(args.reason.as_deref())?,
    };
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, ORDERING_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let changed = sql::disable(&mut conn, &types, &audit)
        .await
        .map_err(|e| anyhow::anyhow!(e).context("switching ordering off"))?;
    report(false, changed, args.output.json, None)
}

fn report(
    enabled: bool,
    changed: Vec<String>,
    json: bool,
    on_dead: Option<sql::OnDead>,
) -> anyhow::Result<u8> {
    let within = crate::relay::ordering::REFRESH;
    if json {
        output::print_json(&ChangeReport {
            enabled,
            changed,
            relays_follow_within_ms: within.as_millis() as u64,
        })?;
        return Ok(OK);
    }
    let what = |t: &String| {
        if t == sql::ALL_TYPES {
            "every aggregate type".to_owned()
        } else {
            format!("aggregate type {t}")
        }
    };
    if changed.is_empty() {
        output::print_summary(if enabled {
            "ordering: nothing changed (already on with that --on-dead)"
        } else {
            "ordering: nothing changed (it was not on)"
        })?;
    }
    for t in &changed {
        output::print_summary(match (enabled, on_dead) {
            (true, Some(d)) => format!("ordering on for {} (on dead: {})", what(t), d.as_str()),
            _ => format!("ordering off for {}", what(t)),
        })?;
    }
    if !changed.is_empty() {
        output::note(format!(
            "running relays follow within {}",
            humantime::format_duration(within)
        ));
    }
    Ok(OK)
}

#[derive(Serialize)]
struct StatusReport {
    /// Whether any aggregate type is ordered.
    enabled: bool,
    types: Vec<sql::StatusRow>,
    #[serde(flatten)]
    blocked: sql::Blocked,
}

async fn status(args: OrderingStatusArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, ORDERING_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let types = sql::status(&mut conn).await?;
    let blocked = sql::blocked(&mut conn).await?;
    if args.output.json {
        output::print_json(&StatusReport {
            enabled: !types.is_empty(),
            types,
            blocked,
        })?;
        return Ok(OK);
    }
    if types.is_empty() {
        output::print_line("ordering: off (no aggregate type is ordered)")?;
    } else {
        let mut t = output::table(&[
            "aggregate type",
            "on dead",
            "blocked keys",
            "enabled at",
            "enabled by",
        ]);
        for r in &types {
            t.add_row(vec![
                if r.aggregate_type == sql::ALL_TYPES {
                    "* (every type)".to_owned()
                } else {
                    r.aggregate_type.clone()
                },
                r.on_dead.clone(),
                r.blocked_keys.to_string(),
                r.enabled_at
                    .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                r.enabled_by.clone().unwrap_or_default(),
            ]);
        }
        output::print_table(&t)?;
    }
    if blocked.blocked_keys > 0 {
        output::print_line(format!(
            "blocked: {} holding {}, oldest since {}",
            output::plural(blocked.blocked_keys as u64, "key", "keys"),
            output::plural(blocked.blocked_events as u64, "event", "events"),
            blocked
                .oldest_blocked_at
                .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
                .unwrap_or_default()
        ))?;
    }
    Ok(OK)
}

#[derive(Serialize)]
struct SkipReport {
    id: i64,
    skipped: sql::Skipped,
}

async fn skip(args: OrderingSkipArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let audit = Audit {
        actor: config::actor(&args.audit)?,
        reason: reason(args.reason.as_deref())?,
    };
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, ORDERING_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let Some(skipped) = sql::skip(&mut conn, args.id, &audit).await? else {
        output::eprint_line(format!(
            "error: event {} is not a head to skip: it must be a dead letter that blocks its key, \
             or pending and not in flight (see `outboxctl events show {}`)",
            args.id, args.id
        ));
        return Ok(FAILURE);
    };
    if args.output.json {
        output::print_json(&SkipReport {
            id: args.id,
            skipped,
        })?;
    } else {
        output::print_summary(match skipped {
            sql::Skipped::Unblocked => format!(
                "skipped event {}: it stays dead-lettered and no longer blocks its key",
                args.id
            ),
            sql::Skipped::DeadLettered => format!(
                "skipped event {}: dead-lettered without blocking its key",
                args.id
            ),
        })?;
    }
    Ok(OK)
}
