//! `outboxctl doctor`: what is wrong with an outbox before it hurts. Each check reads a little
//! (catalog, statistics views, bounded index reads; SQL in `db::doctor`), judges it PASS, WARN or
//! FAIL with a one-line reason, and the worst one decides the exit code (`exit::doctor`).

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};

use crate::cli::DoctorArgs;
use crate::config::DbConfig;
use crate::db::{self, doctor as sql, migrate::State};
use crate::output;

/// A check's verdict. Ordered: the worst decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "UPPERCASE")]
pub enum Status {
    Pass,
    Warn,
    Fail,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "PASS",
            Status::Warn => "WARN",
            Status::Fail => "FAIL",
        }
    }

    pub fn exit_code(self) -> u8 {
        match self {
            Status::Pass => crate::exit::doctor::PASS,
            Status::Warn => crate::exit::doctor::WARN,
            Status::Fail => crate::exit::doctor::FAIL,
        }
    }
}

/// One line of the report.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Check {
    /// Stable, for scripts: `migrations`, `index:outbox_ready_idx`, `xmin_horizon`, ...
    pub name: String,
    pub status: Status,
    pub message: String,
    /// The figures behind the verdict (`null` when there are none).
    pub details: Value,
}

fn check(
    name: impl Into<String>,
    status: Status,
    message: impl Into<String>,
    details: Value,
) -> Check {
    Check {
        name: name.into(),
        status,
        message: message.into(),
        details,
    }
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Report {
    pub schema: String,
    pub status: Status,
    pub exit_code: u8,
    pub passed: usize,
    pub warnings: usize,
    pub failures: usize,
    pub checks: Vec<Check>,
}

/// What the checks are judged against, resolved from the flags.
#[derive(Debug, Clone)]
pub struct Settings {
    pub warn_lag: Duration,
    pub crit_lag: Duration,
    pub max_xact_age: Duration,
    pub retention: Duration,
    pub relay: Option<RelaySettings>,
    pub sink: Option<String>,
    pub connect_timeout: Duration,
}

/// The relay settings given to check (`--lease`, `--publish-timeout`, retries).
#[derive(Debug, Clone)]
pub struct RelaySettings {
    pub lease: Duration,
    pub publish_timeout: Duration,
    pub max_attempts: u32,
    pub backoff: crate::relay::Backoff,
}

impl RelaySettings {
    /// The longest time between an event's first publish attempt and its last: every backoff at
    /// its ceiling (jitter only shortens them) plus a publish timeout per attempt. A sink that
    /// deduplicates must remember an id at least this long to drop every re-publish.
    pub fn retry_horizon(&self) -> Duration {
        let waits: Duration = (1..self.max_attempts)
            .map(|a| self.backoff.ceiling(a))
            .fold(Duration::ZERO, |acc, d| acc.saturating_add(d));
        waits.saturating_add(self.publish_timeout.saturating_mul(self.max_attempts))
    }
}

/// Table and index bloat only matter above this size.
const BLOAT_MIN_BYTES: i64 = 1024 * 1024;
/// Bloat is reported when the relation is this many times its estimated need.
const BLOAT_FACTOR: f64 = 4.0;
/// Dead tuples are reported above this count and share of the table's rows.
const DEAD_TUPLES_MIN: i64 = 10_000;
const DEAD_TUPLES_SHARE: f64 = 0.2;
/// Rows changed since the last analyze above this count and share of the table are reported.
const ANALYZE_MIN: i64 = 10_000;
/// A transaction id age at which PostgreSQL's wraparound protection is near.
const XID_AGE_FAIL: i64 = 1_000_000_000;
/// A replication slot holding back the horizon by more transactions than this is reported.
const SLOT_XID_AGE_WARN: i64 = 10_000_000;
/// A lease that ends further from now than this blocks its row (without --lease).
const LONG_LEASE: Duration = Duration::from_secs(3600);
/// An index entry's estimated size (key, tuple header, line pointer, page fill): generous, so
/// only real bloat trips the check.
const INDEX_ENTRY_BYTES: f64 = 80.0;
/// Row header and line pointer, added to the data width.
const ROW_OVERHEAD_BYTES: f64 = 28.0;
const PAGE: f64 = 8192.0;

/// Indexes each migration creates: (migration, table, index).
/// Not the key index of ordered delivery: it exists only while ordering is on ([`key_index_check`]).
const EXPECTED_INDEXES: [(i64, &str, &str); 10] = [
    (1, "outbox", "outbox_pkey"),
    (1, "outbox", "outbox_idempotency_key_key"),
    (1, "outbox", "outbox_ready_idx"),
    (1, "processed_messages", "processed_messages_pkey"),
    (2, "outbox", "outbox_dead_idx"),
    (2, "outbox", "outbox_published_at_idx"),
    (3, "outbox_locks", "outbox_locks_pkey"),
    (4, "outbox_audit", "outbox_audit_pkey"),
    (4, "outbox_audit", "outbox_audit_event_id_idx"),
    (6, "outbox", "outbox_blocking_idx"),
];

pub async fn run(args: DoctorArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let settings = settings(&args)?;
    let mut conn = db::connect(&cfg).await?;
    let checks = diagnose(&mut conn, &cfg, &settings).await?;
    let report = report(cfg.schema.name(), checks);
    if args.output.json {
        output::print_json(&report)?;
    } else {
        print_human(&report)?;
    }
    Ok(report.exit_code)
}

fn settings(args: &DoctorArgs) -> anyhow::Result<Settings> {
    if args.warn_lag > args.crit_lag {
        return Err(crate::exit::CodedError::usage(
            "--warn-lag is longer than --crit-lag: the warning must come first",
        )
        .into());
    }
    let relay = (args.lease.is_some() || args.publish_timeout.is_some() || args.sink.is_some())
        .then(|| {
            let lease = args.lease.unwrap_or_else(|| {
                crate::cli::parse_duration(crate::cli::DEFAULT_LEASE).expect("the default lease")
            });
            RelaySettings {
                lease,
                publish_timeout: args.publish_timeout.unwrap_or(lease / 2),
                max_attempts: args.retry.max_attempts,
                backoff: crate::relay::Backoff {
                    base: args.retry.backoff_base,
                    max: args.retry.backoff_max,
                },
            }
        });
    Ok(Settings {
        warn_lag: args.warn_lag,
        crit_lag: args.crit_lag,
        max_xact_age: args.max_xact_age,
        retention: args.retention,
        relay,
        sink: args.sink.clone(),
        connect_timeout: args.db.connect_timeout,
    })
}

pub fn report(schema: &str, checks: Vec<Check>) -> Report {
    let status = checks
        .iter()
        .map(|c| c.status)
        .max()
        .unwrap_or(Status::Pass);
    let count = |s: Status| checks.iter().filter(|c| c.status == s).count();
    Report {
        schema: schema.to_owned(),
        status,
        exit_code: status.exit_code(),
        passed: count(Status::Pass),
        warnings: count(Status::Warn),
        failures: count(Status::Fail),
        checks,
    }
}

fn print_human(r: &Report) -> anyhow::Result<()> {
    for c in &r.checks {
        output::print_line(format_args!(
            "{}  {}: {}",
            c.status.as_str(),
            output::escape_controls(&c.name),
            output::escape_controls(&c.message)
        ))?;
    }
    output::print_line(format_args!(
        "{}: {} passed, {}, {} (schema `{}`)",
        r.status.as_str(),
        r.passed,
        output::plural(r.warnings as u64, "warning", "warnings"),
        output::plural(r.failures as u64, "failure", "failures"),
        r.schema
    ))?;
    Ok(())
}

fn ago(now: DateTime<Utc>, t: DateTime<Utc>) -> String {
    output::human_duration((now - t).to_std().unwrap_or_default())
}

fn secs(d: Duration) -> String {
    output::human_duration(d)
}

fn mib(bytes: i64) -> String {
    if bytes < 1024 * 1024 {
        format!("{} KiB", (bytes + 1023) / 1024)
    } else {
        format!("{:.1} MiB", bytes as f64 / 1048576.0)
    }
}

/// What a read for a check returned: the figures, or the reason it failed (the database's
/// message, e.g. `permission denied for table outbox_audit`).
type Read<T> = Result<T, String>;

fn read<T, E: Into<anyhow::Error>>(r: Result<T, E>) -> Read<T> {
    r.map_err(|e| format!("{:#}", e.into()))
}

/// A check that could not run: FAIL, with the reason, so that one failing read (a foreign
/// `outbox` table, a missing privilege) never hides the other checks.
fn could_not_check(name: impl Into<String>, reason: &str) -> Check {
    check(
        name,
        Status::Fail,
        format!("could not check: {reason}"),
        json!({ "error": reason }),
    )
}

/// `judge(value)`, or [`could_not_check`] when the read failed.
fn judged<T>(name: &str, r: &Read<T>, judge: impl FnOnce(&T) -> Check) -> Check {
    match r {
        Ok(v) => judge(v),
        Err(e) => could_not_check(name, e),
    }
}

/// The first failure of several reads.
fn first_error<'a>(errors: impl IntoIterator<Item = Option<&'a String>>) -> Option<&'a String> {
    errors.into_iter().flatten().next()
}

/// Runs every check that applies; a check whose reads fail is FAIL with the reason, and the
/// others still run. Without an outbox table only the migrations, the xmin horizon and the
/// settings are checked.
pub async fn diagnose(
    conn: &mut sqlx::PgConnection,
    cfg: &DbConfig,
    s: &Settings,
) -> anyhow::Result<Vec<Check>> {
    let mut out = Vec::new();
    let now = db::stats::now(conn).await?;
    let migrations = read(
        db::migrate::status(conn, &cfg.schema)
            .await
            .context("reading the migrations"),
    );
    // Unknown migrations: judge what exists as if every one were applied.
    let applied: Vec<i64> = match &migrations {
        Ok(m) => m.iter().filter(|m| m.applied).map(|m| m.version).collect(),
        Err(_) => db::migrate::MIGRATOR.iter().map(|m| m.version).collect(),
    };
    out.push(judged("migrations", &migrations, |m| {
        migrations_check(m, cfg.schema.name())
    }));
    let exists = sql::outbox_exists(conn).await?;
    // The outbox's dead row versions, for the xmin horizon's cost.
    let mut dead_rows = None;
    if exists {
        let indexes = read(sql::indexes(conn).await);
        match &indexes {
            Ok(i) => out.extend(index_checks(i, &applied)),
            Err(e) => out.push(could_not_check("indexes", e)),
        }
        if applied.contains(&db::migrate::ORDERING_SCHEMA) {
            let ordered = read(db::ordering::any_enabled(conn).await);
            match (&indexes, &ordered) {
                (Ok(i), Ok(o)) => out.extend(key_index_check(i, *o)),
                (Err(_), _) => {} // reported as `indexes`
                (_, Err(e)) => out.push(could_not_check(
                    format!("index:{}", db::ordering::KEY_INDEX),
                    e,
                )),
            }
        }
        let trigger = read(sql::notify_trigger(conn).await);
        out.push(judged("trigger:outbox_notify_insert", &trigger, |t| {
            trigger_check(t.clone(), &applied)
        }));
        let table = read(sql::table(conn).await);
        dead_rows = table.as_ref().ok().map(|t| t.dead_tuples);
        out.push(judged("dead_tuples", &table, |t| dead_tuples_check(t, now)));
        out.push(judged("analyze", &table, |t| analyze_check(t, now)));
        out.push(judged("table_bloat", &table, table_bloat_check));
        out.push(judged("index_bloat", &indexes, |i| index_bloat_check(i)));
        let settings = read(sql::autovacuum_settings(conn).await);
        out.push(match (&table, &settings) {
            (Ok(t), Ok(g)) => autovacuum_check(t, g),
            (Err(e), _) | (_, Err(e)) => could_not_check("autovacuum", e),
        });
    }
    let holders = read(sql::horizon_holders(conn).await);
    out.push(judged("xmin_horizon", &holders, |h| {
        horizon_check(h, s, dead_rows)
    }));
    if exists {
        let stats = read(crate::ops::stats::collect(conn, cfg.schema.name(), None).await);
        let ends = read(sql::published_ends(conn).await);
        let relays = read(sql::relay_sessions(conn, &cfg.schema.channel()).await);
        out.push(match (&relays, &stats, &ends) {
            (Ok(r), Ok(st), Ok(e)) => {
                relays_check(r, &st.total, e.newest, now, &cfg.schema.channel())
            }
            (r, st, e) => could_not_check(
                "relays",
                first_error([r.as_ref().err(), st.as_ref().err(), e.as_ref().err()])
                    .expect("one read failed"),
            ),
        });
        let dead = read(sql::dead_letters(conn).await);
        out.push(judged("dead_letters", &dead, |d| {
            dead_letters_check(d, now)
        }));
        let lease_limit = s.relay.as_ref().map_or(LONG_LEASE, |r| r.lease * 2);
        let blocked = read(sql::blocked(conn, lease_limit.as_secs_f64()).await);
        out.push(judged("blocked", &blocked, |b| {
            blocked_check(b, lease_limit)
        }));
        let ordering = read(db::ordering::blocked_if_migrated(conn).await);
        out.push(judged("ordering_blocked", &ordering, |b| {
            ordering_blocked_check(b.as_ref(), now)
        }));
        out.push(judged("oldest_pending", &stats, |st| {
            oldest_pending_check(&st.total, s)
        }));
        let last_prune = match read(sql::table_exists(conn, "outbox_audit").await) {
            Ok(true) => read(sql::last_prune(conn).await),
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        };
        out.push(match (&ends, &last_prune) {
            (Ok(e), Ok(p)) => prune_check(e.oldest, *p, now, s.retention),
            (Err(e), _) | (_, Err(e)) => could_not_check("prune", e),
        });
    }
    if let Some(relay) = &s.relay {
        out.push(lease_check(relay));
        if let Some(target) = s.sink.as_deref().and_then(crate::sink::nats::Target::of) {
            out.push(nats_check(target, relay, s.connect_timeout).await);
        }
    }
    Ok(out)
}

fn migrations_check(m: &[db::migrate::MigrationStatus], schema: &str) -> Check {
    let versions = |f: &dyn Fn(State) -> bool| -> Vec<i64> {
        m.iter().filter(|x| f(x.state)).map(|x| x.version).collect()
    };
    let pending = versions(&|s| matches!(s, State::Pending | State::Adoptable));
    let conflict = versions(&|s| s == State::Conflict);
    let details = json!({ "pending": pending, "conflict": conflict });
    if !conflict.is_empty() {
        return check(
            "migrations",
            Status::Fail,
            format!("existing tables conflict with migration 1; see `outboxctl migrate --status --schema {schema}`"),
            details,
        );
    }
    if !pending.is_empty() {
        let list = pending
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        return check(
            "migrations",
            Status::Fail,
            format!(
                "{} pending ({list}): run `outboxctl migrate --schema {schema}`",
                output::plural(pending.len() as u64, "migration", "migrations")
            ),
            details,
        );
    }
    check(
        "migrations",
        Status::Pass,
        format!(
            "up to date ({})",
            output::plural(m.len() as u64, "migration", "migrations")
        ),
        details,
    )
}

/// One line per expected index (of the applied migrations), plus one per other invalid index.
fn index_checks(found: &[sql::IndexRow], applied: &[i64]) -> Vec<Check> {
    let mut out = Vec::new();
    for (migration, table, name) in EXPECTED_INDEXES {
        if !applied.contains(&migration) {
            continue;
        }
        let row = found
            .iter()
            .find(|i| i.name == name && i.table_name == table);
        out.push(match row {
            None => check(
                format!("index:{name}"),
                Status::Fail,
                format!("missing on {table} (migration {migration} creates it): recreate it as migration {migration} does"),
                json!({ "table": table, "present": false }),
            ),
            Some(i) if !i.valid || !i.ready => check(
                format!("index:{name}"),
                Status::Fail,
                format!("invalid (pg_index.indisvalid false, e.g. a failed CREATE INDEX CONCURRENTLY): the planner ignores it; REINDEX INDEX CONCURRENTLY {name}"),
                json!({ "table": table, "present": true, "valid": false, "definition": i.definition }),
            ),
            Some(i) => check(
                format!("index:{name}"),
                Status::Pass,
                format!("present and valid ({})", mib(i.size_bytes)),
                json!({ "table": table, "present": true, "valid": true, "size_bytes": i.size_bytes }),
            ),
        });
    }
    for i in found.iter().filter(|i| !i.valid || !i.ready) {
        if i.name == db::ordering::KEY_INDEX
            || EXPECTED_INDEXES.iter().any(|(_, _, n)| *n == i.name)
        {
            continue;
        }
        out.push(check(
            format!("index:{}", i.name),
            Status::Warn,
            format!("invalid index on {} (not outboxctl's): writes pay for it, reads never use it; drop or REINDEX it", i.table_name),
            json!({ "table": i.table_name, "present": true, "valid": false, "definition": i.definition }),
        ));
    }
    out
}

/// The key index of ordered delivery: needed (and checked) while some aggregate type is ordered;
/// without ordering it should not exist, since every insert pays for it.
fn key_index_check(found: &[sql::IndexRow], ordered: bool) -> Option<Check> {
    let name = db::ordering::KEY_INDEX;
    let row = found
        .iter()
        .find(|i| i.name == name && i.table_name == "outbox");
    let fix = "run `outboxctl ordering enable` again: it rebuilds the index";
    Some(match (row, ordered) {
        (None, false) => return None,
        (None, true) => check(
            format!("index:{name}"),
            Status::Fail,
            format!("missing while ordering is on: the ordered claim walks it; {fix}"),
            json!({ "table": "outbox", "present": false, "ordering": true }),
        ),
        (Some(i), true) if !i.valid || !i.ready => check(
            format!("index:{name}"),
            Status::Fail,
            format!("invalid (an interrupted `ordering enable`): the ordered claim cannot use it; {fix}"),
            json!({ "table": "outbox", "present": true, "valid": false, "ordering": true }),
        ),
        (Some(i), true) => check(
            format!("index:{name}"),
            Status::Pass,
            format!("present and valid ({}), ordering is on", mib(i.size_bytes)),
            json!({ "table": "outbox", "present": true, "valid": true, "size_bytes": i.size_bytes, "ordering": true }),
        ),
        (Some(i), false) => check(
            format!("index:{name}"),
            Status::Warn,
            format!("present ({}) while no aggregate type is ordered: every insert pays for it; `outboxctl ordering disable` drops it", mib(i.size_bytes)),
            json!({ "table": "outbox", "present": true, "valid": i.valid && i.ready, "ordering": false }),
        ),
    })
}

fn trigger_check(t: Option<sql::TriggerRow>, applied: &[i64]) -> Check {
    let name = "trigger:outbox_notify_insert";
    if !applied.contains(&2) {
        return check(
            name,
            Status::Fail,
            "missing: migration 2 creates it (run `outboxctl migrate`)",
            Value::Null,
        );
    }
    match t {
        None => check(
            name,
            Status::Fail,
            "missing: relays are not woken by inserts and find new events only every --poll-interval; recreate it as migration 2 does",
            json!({ "present": false }),
        ),
        Some(t) if t.enabled == "D" || t.enabled == "R" => check(
            name,
            Status::Fail,
            format!(
                "disabled (tgenabled {}): relays are not woken by inserts; ALTER TABLE outbox ENABLE TRIGGER outbox_notify_insert",
                t.enabled
            ),
            json!({ "present": true, "enabled": t.enabled, "function": t.function }),
        ),
        Some(t) => check(
            name,
            Status::Pass,
            format!("present and enabled (calls {}())", t.function),
            json!({ "present": true, "enabled": t.enabled, "function": t.function }),
        ),
    }
}

fn when(now: DateTime<Utc>, t: Option<DateTime<Utc>>) -> String {
    t.map(|t| format!("{} ago", ago(now, t)))
        .unwrap_or_else(|| "never".into())
}

fn dead_tuples_check(t: &sql::TableRow, now: DateTime<Utc>) -> Check {
    let total = (t.live_tuples + t.dead_tuples).max(1);
    let share = t.dead_tuples as f64 / total as f64;
    let details = json!({
        "live_tuples": t.live_tuples, "dead_tuples": t.dead_tuples, "dead_share": share,
        "last_vacuum": t.last_vacuum, "last_autovacuum": t.last_autovacuum,
    });
    let text = format!(
        "{} dead of {} row versions ({:.0} %); last vacuum {}, last autovacuum {}",
        t.dead_tuples,
        t.live_tuples + t.dead_tuples,
        share * 100.0,
        when(now, t.last_vacuum),
        when(now, t.last_autovacuum)
    );
    if t.dead_tuples >= DEAD_TUPLES_MIN && share > DEAD_TUPLES_SHARE {
        check("dead_tuples", Status::Warn, format!("{text}: vacuum is not keeping up (VACUUM outbox; look at the xmin horizon and autovacuum below)"), details)
    } else {
        check("dead_tuples", Status::Pass, text, details)
    }
}

fn analyze_check(t: &sql::TableRow, now: DateTime<Utc>) -> Check {
    let rows = t.reltuples.max(0.0);
    let details = json!({
        "modified_since_analyze": t.modified_since_analyze,
        "last_analyze": t.last_analyze, "last_autoanalyze": t.last_autoanalyze,
    });
    let text = format!(
        "{} rows changed since the last analyze ({}; last autoanalyze {})",
        t.modified_since_analyze,
        when(now, t.last_analyze),
        when(now, t.last_autoanalyze)
    );
    if t.modified_since_analyze >= ANALYZE_MIN
        && t.modified_since_analyze as f64 > rows * DEAD_TUPLES_SHARE
    {
        check(
            "analyze",
            Status::Warn,
            format!("{text}: the planner's row estimates are stale (ANALYZE outbox)"),
            details,
        )
    } else {
        check("analyze", Status::Pass, text, details)
    }
}

/// The table's estimated need: rows × (average data width + overhead), at the table's fillfactor.
fn table_bloat_check(t: &sql::TableRow) -> Check {
    let fillfactor = t
        .reloptions
        .iter()
        .find_map(|o| {
            o.strip_prefix("fillfactor=")
                .and_then(|v| v.parse::<f64>().ok())
        })
        .unwrap_or(100.0)
        / 100.0;
    let Some(width) = t.avg_row_width else {
        return check(
            "table_bloat",
            Status::Pass,
            format!(
                "{} on disk; no estimate before the first ANALYZE",
                mib(t.size_bytes)
            ),
            json!({ "size_bytes": t.size_bytes, "estimated_bytes": null }),
        );
    };
    let rows = t.reltuples.max(0.0);
    let need = rows * (width as f64 + ROW_OVERHEAD_BYTES) / fillfactor + PAGE;
    let factor = t.size_bytes as f64 / need;
    let details =
        json!({ "size_bytes": t.size_bytes, "estimated_bytes": need.round(), "factor": factor });
    if t.size_bytes >= BLOAT_MIN_BYTES && factor > BLOAT_FACTOR {
        check(
            "table_bloat",
            Status::Warn,
            format!(
                "{} on disk for ~{} rows, about {:.0}x what they need: free space is reused but not returned (pg_repack, or VACUUM FULL in a quiet window)",
                mib(t.size_bytes), rows as i64, factor
            ),
            details,
        )
    } else {
        check(
            "table_bloat",
            Status::Pass,
            format!("{} on disk for ~{} rows", mib(t.size_bytes), rows as i64),
            details,
        )
    }
}

fn index_bloat_check(indexes: &[sql::IndexRow]) -> Check {
    let mut bloated = Vec::new();
    for i in indexes.iter().filter(|i| i.table_name == "outbox") {
        let need = i.entries.max(0.0) * INDEX_ENTRY_BYTES + 2.0 * PAGE;
        let factor = i.size_bytes as f64 / need;
        if i.size_bytes >= BLOAT_MIN_BYTES && factor > BLOAT_FACTOR {
            bloated.push((
                i.name.clone(),
                i.size_bytes,
                i.entries.max(0.0) as i64,
                factor,
            ));
        }
    }
    let details = json!({
        "bloated": bloated.iter().map(|(n, b, e, f)| json!({"index": n, "size_bytes": b, "entries": e, "factor": f})).collect::<Vec<_>>()
    });
    if bloated.is_empty() {
        check(
            "index_bloat",
            Status::Pass,
            "no outbox index is much larger than its entries need",
            details,
        )
    } else {
        let list = bloated
            .iter()
            .map(|(n, b, e, _)| format!("{n} {} for ~{e} entries", mib(*b)))
            .collect::<Vec<_>>()
            .join(", ");
        let first = &bloated[0].0;
        check(
            "index_bloat",
            Status::Warn,
            format!("{list}: REINDEX INDEX CONCURRENTLY {first} (and the others) rebuilds without blocking writes"),
            details,
        )
    }
}

fn autovacuum_check(t: &sql::TableRow, g: &sql::AutovacuumSettings) -> Check {
    let table_off = t.reloptions.iter().any(|o| {
        o.eq_ignore_ascii_case("autovacuum_enabled=false")
            || o.eq_ignore_ascii_case("autovacuum_enabled=off")
    });
    let own: Vec<&String> = t
        .reloptions
        .iter()
        .filter(|o| o.starts_with("autovacuum_"))
        .collect();
    let details = json!({
        "autovacuum": g.autovacuum, "track_counts": g.track_counts,
        "vacuum_scale_factor": g.vacuum_scale_factor, "vacuum_threshold": g.vacuum_threshold,
        "analyze_scale_factor": g.analyze_scale_factor, "table_options": t.reloptions,
    });
    if table_off {
        return check(
            "autovacuum",
            Status::Fail,
            "disabled on the outbox (autovacuum_enabled=false): dead rows from every claim and publish pile up; ALTER TABLE outbox RESET (autovacuum_enabled)",
            details,
        );
    }
    if g.autovacuum != "on" || g.track_counts != "on" {
        return check(
            "autovacuum",
            Status::Warn,
            format!(
                "off server-wide (autovacuum={}, track_counts={}): only a scheduled VACUUM cleans the outbox",
                g.autovacuum, g.track_counts
            ),
            details,
        );
    }
    check(
        "autovacuum",
        Status::Pass,
        if own.is_empty() {
            format!(
                "on, server defaults (vacuum at {} + {} of the rows dead)",
                g.vacuum_threshold, g.vacuum_scale_factor
            )
        } else {
            format!(
                "on, table options {}",
                own.iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        },
        details,
    )
}

/// Every holder older than --max-xact-age (or a slot too far behind) is named, oldest first,
/// with what it costs the relay: the outbox's `dead_rows` (dead row versions) that claims from the
/// start walk until the holder ends.
fn horizon_check(holders: &[sql::HorizonHolder], s: &Settings, dead_rows: Option<i64>) -> Check {
    let limit = s.max_xact_age.as_secs_f64();
    let old: Vec<&sql::HorizonHolder> = holders
        .iter()
        .filter(|h| match h.kind.as_str() {
            "replication slot" => {
                h.state.as_deref() == Some("inactive") || h.xid_age.unwrap_or(0) > SLOT_XID_AGE_WARN
            }
            _ => h.age_seconds.unwrap_or(0.0) > limit,
        })
        .collect();
    let worst_xid = holders.iter().filter_map(|h| h.xid_age).max().unwrap_or(0);
    let details = json!({
        "holders": old, "oldest_xid_age": worst_xid, "outbox_dead_rows": dead_rows,
    });
    if old.is_empty() {
        return check(
            "xmin_horizon",
            Status::Pass,
            format!(
                "nothing has held back vacuum for longer than {} ({} now)",
                secs(s.max_xact_age),
                output::plural(
                    holders.len() as u64,
                    "snapshot or slot",
                    "snapshots or slots"
                )
            ),
            details,
        );
    }
    let named = old
        .iter()
        .take(5)
        .map(|h| {
            let who = match h.pid {
                Some(pid) => format!("{} pid {pid}", h.kind),
                None => h.kind.clone(),
            };
            let age = h
                .age_seconds
                .map(|a| secs(Duration::from_secs_f64(a.max(0.0))))
                .unwrap_or_else(|| format!("{} transactions", h.xid_age.unwrap_or(0)));
            format!(
                "{who} ({} `{}`, {}, {age})",
                if h.kind == "transaction" {
                    "application_name"
                } else {
                    "name"
                },
                h.name,
                h.state.as_deref().unwrap_or("prepared")
            )
        })
        .collect::<Vec<_>>()
        .join("; ");
    let more = if old.len() > 5 {
        format!(" and {} more", old.len() - 5)
    } else {
        String::new()
    };
    let status = if worst_xid > XID_AGE_FAIL {
        Status::Fail
    } else {
        Status::Warn
    };
    let cost = match dead_rows {
        Some(n) if n > 0 => format!(
            "; the outbox keeps {} meanwhile, which each relay's claim from the start and each `relay --once` walk (docs/operations.md: the relay slows down while a backup runs)",
            output::plural(n as u64, "dead row version", "dead row versions")
        ),
        _ => String::new(),
    };
    check(
        "xmin_horizon",
        status,
        format!(
            "vacuum cannot remove rows deleted since: {named}{more}{cost}; end it (pg_terminate_backend(pid), COMMIT/ROLLBACK PREPARED, pg_drop_replication_slot)"
        ),
        details,
    )
}

fn relays_check(
    relays: &[sql::RelaySession],
    total: &crate::ops::stats::Figures,
    last_publish: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    channel: &str,
) -> Check {
    let details = json!({ "relays": relays, "last_publish": last_publish, "ready": total.ready });
    let last = match last_publish {
        Some(t) => format!("last publish {} ago", ago(now, t)),
        None => "nothing published yet".into(),
    };
    if relays.is_empty() {
        if total.ready > 0 {
            return check(
                "relays",
                Status::Warn,
                format!(
                    "no relay daemon listens on `{channel}` while {} ready (oldest due {} ago); {last}. A cron `relay --once` does not listen: ignore this if that is how you relay",
                    output::plural(total.ready as u64, "event is", "events are"),
                    secs(Duration::from_secs_f64(total.oldest_ready_lag_seconds))
                ),
                details,
            );
        }
        return check(
            "relays",
            Status::Pass,
            format!("no relay daemon connected, nothing ready; {last}"),
            details,
        );
    }
    let list = relays
        .iter()
        .map(|r| {
            format!(
                "pid {} (`{}`{}, connected {})",
                r.pid,
                r.application_name,
                r.client_addr
                    .as_deref()
                    .map(|a| format!(" from {a}"))
                    .unwrap_or_default(),
                r.backend_start
                    .map(|t| format!("{} ago", ago(now, t)))
                    .unwrap_or_else(|| "?".into())
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    check(
        "relays",
        Status::Pass,
        format!(
            "{} connected: {list}; {last}",
            output::plural(relays.len() as u64, "relay daemon", "relay daemons")
        ),
        details,
    )
}

fn dead_letters_check(d: &sql::DeadRow, now: DateTime<Utc>) -> Check {
    let details = json!({ "dead_lettered": d.count, "oldest": d.oldest, "newest": d.newest });
    match (d.count, d.newest) {
        (0, _) | (_, None) => check("dead_letters", Status::Pass, "none", details),
        (n, Some(newest)) => check(
            "dead_letters",
            Status::Warn,
            format!(
                "{} (newest {} ago, oldest {}): `outboxctl dead list`, then `requeue` or `dead discard`",
                output::plural(n as u64, "dead letter", "dead letters"),
                ago(now, newest),
                when(now, d.oldest)
            ),
            details,
        ),
    }
}

fn blocked_check(b: &sql::BlockedRow, lease_limit: Duration) -> Check {
    let details = json!({
        "retrying": b.retrying, "max_attempts": b.max_attempts,
        "long_leased": b.long_leased, "longest_lease_end": b.longest_lease_end,
    });
    let mut problems = Vec::new();
    if b.long_leased > 0 {
        problems.push(format!(
            "{} leased until more than {} from now (no relay may claim them before)",
            output::plural(b.long_leased as u64, "event is", "events are"),
            secs(lease_limit)
        ));
    }
    if b.retrying > 0 {
        problems.push(format!(
            "{} failed and wait for a retry (up to {} attempts so far; `outboxctl events list --state pending`)",
            output::plural(b.retrying as u64, "event has", "events have"),
            b.max_attempts
        ));
    }
    if problems.is_empty() {
        check(
            "blocked",
            Status::Pass,
            "no pending event is failing or held by a long lease",
            details,
        )
    } else {
        check("blocked", Status::Warn, problems.join("; "), details)
    }
}

/// Ordered keys held by a dead-lettered head (`ordering enable`, `--on-dead block`): nothing
/// more of them is published until the head is requeued or skipped.
fn ordering_blocked_check(b: Option<&db::ordering::Blocked>, now: DateTime<Utc>) -> Check {
    let name = "ordering_blocked";
    let Some(b) = b else {
        return check(
            name,
            Status::Pass,
            "no ordering (migration 6 not applied)",
            Value::Null,
        );
    };
    let details = json!({
        "blocked_keys": b.blocked_keys, "blocked_events": b.blocked_events,
        "oldest_blocked_at": b.oldest_blocked_at,
    });
    if b.blocked_keys == 0 {
        return check(name, Status::Pass, "no ordered key is blocked", details);
    }
    let since = b
        .oldest_blocked_at
        .map(|t| format!(", the oldest for {}", ago(now, t)))
        .unwrap_or_default();
    check(
        name,
        Status::Warn,
        format!(
            "{} blocked by a dead-lettered head, holding back {}{since}: `outboxctl dead list`, then `requeue ID` (resumes the key in order) or `ordering skip ID`",
            output::plural(b.blocked_keys as u64, "ordered key is", "ordered keys are"),
            output::plural(b.blocked_events as u64, "event", "events"),
        ),
        details,
    )
}

/// The lag: how late the most overdue pending event is (`late_since!` in `db`), so an event
/// scheduled for later that was never tried never trips it.
fn oldest_pending_check(t: &crate::ops::stats::Figures, s: &Settings) -> Check {
    let lag = Duration::from_secs_f64(t.oldest_pending_lag_seconds.max(0.0));
    let details = json!({ "lag_seconds": t.oldest_pending_lag_seconds,
                          "oldest_pending_age_seconds": t.oldest_pending_age_seconds,
                          "warn_seconds": s.warn_lag.as_secs_f64(), "crit_seconds": s.crit_lag.as_secs_f64() });
    let pending = t.ready + t.scheduled + t.in_flight;
    if pending == 0 {
        return check("oldest_pending", Status::Pass, "nothing pending", details);
    }
    let text = if lag.is_zero() {
        format!("nothing is late ({pending} pending, none of them due yet)")
    } else {
        format!(
            "the most overdue event is {} late ({pending} pending)",
            secs(lag)
        )
    };
    if lag > s.crit_lag {
        check(
            "oldest_pending",
            Status::Fail,
            format!("{text}, longer than --crit-lag {}", secs(s.crit_lag)),
            details,
        )
    } else if lag > s.warn_lag {
        check(
            "oldest_pending",
            Status::Warn,
            format!("{text}, longer than --warn-lag {}", secs(s.warn_lag)),
            details,
        )
    } else {
        check("oldest_pending", Status::Pass, text, details)
    }
}

fn prune_check(
    oldest: Option<DateTime<Utc>>,
    last_prune: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
    retention: Duration,
) -> Check {
    let details = json!({ "oldest_published": oldest, "last_prune": last_prune,
                          "retention_seconds": retention.as_secs_f64() });
    let last = format!("last prune {}", when(now, last_prune));
    match oldest {
        Some(t) if (now - t).to_std().unwrap_or_default() > retention => check(
            "prune",
            Status::Warn,
            format!(
                "published events from {} ago are still in the table (older than {}); {last}: schedule `outboxctl prune --older-than 7d`",
                ago(now, t),
                secs(retention)
            ),
            details,
        ),
        Some(t) => check("prune", Status::Pass, format!("oldest published event {} ago; {last}", ago(now, t)), details),
        None => check("prune", Status::Pass, format!("no published history; {last}"), details),
    }
}

fn lease_check(r: &RelaySettings) -> Check {
    let details = json!({ "lease_seconds": r.lease.as_secs_f64(), "publish_timeout_seconds": r.publish_timeout.as_secs_f64() });
    if r.publish_timeout >= r.lease {
        check(
            "settings:lease",
            Status::Fail,
            format!(
                "--publish-timeout {} is not shorter than --lease {}: a slow publish outlives its claim and another relay publishes the event again (the relay refuses to start)",
                secs(r.publish_timeout),
                secs(r.lease)
            ),
            details,
        )
    } else {
        check(
            "settings:lease",
            Status::Pass,
            format!(
                "--publish-timeout {} is shorter than --lease {}",
                secs(r.publish_timeout),
                secs(r.lease)
            ),
            details,
        )
    }
}

async fn nats_check(
    target: Result<crate::sink::nats::Target, crate::exit::CodedError>,
    r: &RelaySettings,
    timeout: Duration,
) -> Check {
    let horizon = r.retry_horizon();
    let window = match target {
        Ok(t) => nats_duplicate_window(&t, timeout).await,
        Err(e) => Err(anyhow::anyhow!(e.message)),
    };
    match window {
        Err(e) => check(
            "settings:nats_duplicate_window",
            Status::Warn,
            format!("cannot read the stream's duplicate window: {e}"),
            json!({ "retry_horizon_seconds": horizon.as_secs_f64() }),
        ),
        Ok((subject, stream, window)) => {
            let details = json!({ "subject": subject, "stream": stream,
                                  "duplicate_window_seconds": window.as_secs_f64(),
                                  "retry_horizon_seconds": horizon.as_secs_f64() });
            if window < horizon {
                check(
                    "settings:nats_duplicate_window",
                    Status::Warn,
                    format!(
                        "stream {stream} keeps message ids for {}, shorter than the retry horizon {} (--max-attempts {}, --backoff-base {}, --backoff-max {}, --publish-timeout {}): a late retry of an event that did arrive is stored twice; raise duplicate_window or lower the retries",
                        secs(window), secs(horizon), r.max_attempts, secs(r.backoff.base), secs(r.backoff.max), secs(r.publish_timeout)
                    ),
                    details,
                )
            } else {
                check(
                    "settings:nats_duplicate_window",
                    Status::Pass,
                    format!(
                        "stream {stream} keeps message ids for {}, at least the retry horizon {}",
                        secs(window),
                        secs(horizon)
                    ),
                    details,
                )
            }
        }
    }
}

/// The JetStream stream that captures the sink's subject (placeholders filled with `doctor`), and
/// its duplicate window. The credentials in the URL are used, never printed.
async fn nats_duplicate_window(
    target: &crate::sink::nats::Target,
    timeout: Duration,
) -> anyhow::Result<(String, String, Duration)> {
    let subject = target.template.sample("doctor");
    let server = target.server();
    let opts = async_nats::ConnectOptions::new()
        .connection_timeout(timeout)
        .name("outboxctl doctor");
    let client = tokio::time::timeout(timeout, target.authenticate(opts).connect(server.clone()))
        .await
        .map_err(|_| anyhow::anyhow!("connecting to {server} timed out"))?
        .map_err(|e| anyhow::anyhow!("cannot connect to {server}: {e}"))?;
    let js = async_nats::jetstream::new(client);
    let name = tokio::time::timeout(timeout, js.stream_by_subject(subject.clone()))
        .await
        .map_err(|_| anyhow::anyhow!("JetStream did not answer"))?
        .map_err(|e| anyhow::anyhow!("no JetStream stream captures subject `{subject}`: {e}"))?;
    let mut stream = js
        .get_stream(&name)
        .await
        .map_err(|e| anyhow::anyhow!("stream {name}: {e}"))?;
    let info = stream
        .info()
        .await
        .map_err(|e| anyhow::anyhow!("stream {name}: {e}"))?;
    Ok((subject, name, info.config.duplicate_window))
}

/// The `--json` output of `doctor` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::docs::json::Output> {
    vec![crate::docs::json::Output::of::<Report>(
        "doctor --json",
        "Each check's `details` is an object of its own figures (they differ by check).",
    )]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_horizon_sums_capped_backoffs_and_timeouts() {
        let r = RelaySettings {
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(15),
            max_attempts: 10,
            backoff: crate::relay::Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(300),
            },
        };
        // 1+2+4+...+256 = 511 s of backoff for 9 retries, plus 10 × 15 s of publish timeouts.
        assert_eq!(r.retry_horizon(), Duration::from_secs(511 + 150));
        // The cap applies: 1+2+4+8 then 10, 10.
        let capped = RelaySettings {
            max_attempts: 7,
            backoff: crate::relay::Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(10),
            },
            ..r
        };
        assert_eq!(
            capped.retry_horizon(),
            Duration::from_secs(15 + 20 + 7 * 15)
        );
    }

    #[test]
    fn placeholders_become_a_sample() {
        let sample = |subject: &str| {
            crate::sink::nats::Target::parse(&format!("nats://h?subject={subject}"))
                .unwrap()
                .template
                .sample("doctor")
        };
        assert_eq!(sample("outbox.{event_type}"), "outbox.doctor");
        assert_eq!(sample("a.{tenant_id}.{event_type}.b"), "a.doctor.doctor.b");
        assert_eq!(sample("plain"), "plain");
    }

    #[test]
    fn the_worst_check_decides() {
        let c = |s| check("x", s, "", Value::Null);
        assert_eq!(report("s", vec![c(Status::Pass)]).exit_code, 0);
        assert_eq!(
            report("s", vec![c(Status::Pass), c(Status::Warn)]).exit_code,
            1
        );
        assert_eq!(
            report("s", vec![c(Status::Fail), c(Status::Warn)]).exit_code,
            2
        );
        assert_eq!(report("s", vec![]).exit_code, 0);
    }
}
