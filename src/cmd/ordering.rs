//! `outboxctl ordering enable|disable|status|skip`: the database switch for ordered delivery per
//! key, and skipping a key's head.

use anyhow::Context;
use serde::Serialize;

use crate::cli::{
    OnDeadArg, OrderingArgs, OrderingCommand, OrderingDisableArgs, OrderingEnableArgs,
    OrderingSkipArgs, OrderingStatusArgs,
};
use crate::config::DbConfig;
use crate::db::{
    self,
    audit::Audit,
    migrate::{LOG_SCHEMA, ORDERING_SCHEMA},
    ordering as sql,
};
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

#[derive(Serialize, schemars::JsonSchema)]
struct ChangeReport {
    enabled: bool,
    changed: Vec<String>,
    /// What happened to the key index the ordered claim walks.
    key_index: KeyIndex,
    /// Running relays follow the change within this many milliseconds.
    relays_follow_within_ms: u64,
}

/// What `enable`/`disable` did to the key index ([`sql::KEY_INDEX`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
enum KeyIndex {
    /// It did not exist and was built.
    Built,
    /// It was invalid (an interrupted build) and was built again.
    Rebuilt,
    /// It was there and stays.
    Kept,
    /// No aggregate type is ordered any more, so it was dropped.
    Dropped,
    /// It does not exist, and nothing is ordered.
    Absent,
}

/// How often a waiting `enable`/`disable` retries the switch's lock, and the progress of a build.
const SWITCH_POLL: std::time::Duration = std::time::Duration::from_millis(200);

/// Runs `f` holding the ordering switch's lock on `conn`, released whatever `f` returns.
async fn with_switch_lock<T>(
    conn: &mut sqlx::PgConnection,
    f: impl AsyncFnOnce(&mut sqlx::PgConnection) -> anyhow::Result<T>,
) -> anyhow::Result<T> {
    let mut told = false;
    while !sql::try_lock_switch(conn)
        .await
        .context("taking the ordering switch's lock")?
    {
        if !told {
            output::note("waiting for another `outboxctl ordering enable|disable` to finish");
            told = true;
        }
        tokio::time::sleep(SWITCH_POLL).await;
    }
    let out = f(&mut *conn).await;
    let unlocked = sql::unlock_switch(conn).await;
    let out = out?;
    unlocked.context("releasing the ordering switch's lock")?;
    Ok(out)
}

/// Builds the key index if it is missing or invalid, with a progress bar on a terminal that
/// follows the build on a second connection (`pg_stat_progress_create_index`).
async fn ensure_key_index(pool: &sqlx::PgPool, json: bool) -> anyhow::Result<KeyIndex> {
    let mut conn = pool.acquire().await?;
    let state = sql::key_index(&mut conn).await?;
    if state == Some(true) {
        return Ok(KeyIndex::Kept);
    }
    let rebuilt = state.is_some();
    if rebuilt {
        output::note(format!(
            "the key index {} is invalid (an interrupted build): building it again",
            sql::KEY_INDEX
        ));
        sql::drop_key_index(&mut conn)
            .await
            .context("dropping the invalid key index")?;
    }
    let pid = sql::backend_pid(&mut conn).await?;
    let pb = output::progress(Some(0), json, "building the key index (blocks)");
    let mut watcher = pool.acquire().await?;
    let started = std::time::Instant::now();
    let build = sql::create_key_index(&mut conn);
    tokio::pin!(build);
    let mut tick = tokio::time::interval(SWITCH_POLL);
    loop {
        tokio::select! {
            done = &mut build => {
                done.with_context(|| format!("building the key index {}", sql::KEY_INDEX))?;
                break;
            }
            _ = tick.tick(), if !pb.is_hidden() => {
                if let Ok(Some((phase, done, total))) = sql::key_index_progress(&mut watcher, pid).await {
                    pb.set_length(total.max(0) as u64);
                    pb.set_position(done.max(0) as u64);
                    pb.set_message(phase);
                }
            }
        }
    }
    pb.finish_and_clear();
    output::note(format!(
        "built the key index {} in {}: every insert into the outbox now also updates it; the \
         `ordering disable` that switches the last type off drops it",
        sql::KEY_INDEX,
        output::human_duration(started.elapsed())
    ));
    Ok(if rebuilt {
        KeyIndex::Rebuilt
    } else {
        KeyIndex::Built
    })
}

async fn enable(args: OrderingEnableArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let mut types = types(&args.types.aggregate_types)?;
    if types.is_empty() {
        types.push(sql::ALL_TYPES.to_owned());
    }
    let on_dead = match args.on_dead {
        OnDeadArg::Block => sql::OnDead::Block,
        OnDeadArg::Skip => sql::OnDead::Skip,
    };
    let audit = switch_audit(&args.change)?;
    let json = args.change.output.json;
    let pool = db::pool_migrated(&cfg, 3).await?;
    db::ensure_migrated_through(&pool, &cfg, ORDERING_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let (index, changed) = with_switch_lock(&mut conn, async |conn| {
        // Log mode keeps a key's events waiting by its retry set's keys (migration 15).
        if db::log::is_on(conn).await? {
            db::ensure_migrated_through(&mut *conn, &cfg, LOG_SCHEMA).await?;
        }
        // The index first: relays take the ordered claim, which walks it, as soon as the row is in.
        let index = ensure_key_index(&pool, json).await?;
        let changed = sql::enable(conn, &types, on_dead, &audit)
            .await
            .map_err(|e| anyhow::anyhow!(e).context("switching ordering on"))?;
        Ok((index, changed))
    })
    .await?;
    report(true, changed, index, json, Some(on_dead))
}

async fn disable(args: OrderingDisableArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let types = types(&args.types.aggregate_types)?;
    let audit = switch_audit(&args.change)?;
    let pool = db::pool_migrated(&cfg, 1).await?;
    db::ensure_migrated_through(&pool, &cfg, ORDERING_SCHEMA).await?;
    let mut conn = pool.acquire().await?;
    let (index, changed) = with_switch_lock(&mut conn, async |conn| {
        let changed = sql::disable(conn, &types, &audit)
            .await
            .map_err(|e| anyhow::anyhow!(e).context("switching ordering off"))?;
        let index = match sql::key_index(conn).await? {
            None => KeyIndex::Absent,
            Some(_) if !sql::any_enabled(conn).await? => {
                sql::drop_key_index(conn)
                    .await
                    .with_context(|| format!("dropping the key index {}", sql::KEY_INDEX))?;
                output::note(format!(
                    "dropped the key index {}: no aggregate type is ordered",
                    sql::KEY_INDEX
                ));
                KeyIndex::Dropped
            }
            Some(_) => KeyIndex::Kept,
        };
        Ok((index, changed))
    })
    .await?;
    report(false, changed, index, args.change.output.json, None)
}

/// The audit of an `ordering enable` or `disable`.
fn switch_audit(args: &crate::cli::SwitchChangeArgs) -> anyhow::Result<Audit> {
    crate::ops::audit::audit(&args.audit, args.reason.as_deref())
}

fn report(
    enabled: bool,
    changed: Vec<String>,
    key_index: KeyIndex,
    json: bool,
    on_dead: Option<sql::OnDead>,
) -> anyhow::Result<u8> {
    let within = crate::relay::ordering::REFRESH;
    if json {
        output::print_json(&ChangeReport {
            enabled,
            changed,
            key_index,
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

#[derive(Serialize, schemars::JsonSchema)]
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
            output::add_row(
                &mut t,
                vec![
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
                ],
            );
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

#[derive(Serialize, schemars::JsonSchema)]
struct SkipReport {
    id: i64,
    skipped: sql::Skipped,
}

async fn skip(args: OrderingSkipArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let audit = crate::ops::audit::audit(&args.audit, args.reason.as_deref())?;
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

/// The `--json` outputs of `ordering` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    use crate::schema::Output;
    vec![
        Output::of::<ChangeReport>("ordering enable --json", "Also `ordering disable --json`."),
        Output::of::<StatusReport>("ordering status --json", ""),
        Output::of::<SkipReport>("ordering skip --json", ""),
    ]
}
