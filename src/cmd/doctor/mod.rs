//! `outboxctl doctor`: what is wrong with an outbox before it hurts. Each check reads a little
//! (catalog, statistics views, bounded index reads; SQL in `db::doctor`), judges it PASS, WARN or
//! FAIL with a one-line reason, and the worst one decides the exit code (`exit::doctor`).
//!
//! This module reads the figures, runs the checks and reports; each group of checks is a module of
//! its own (`schema`, `vacuum`, `horizon`, `relays`, `backlog`, `settings`, `sink`), each check a
//! function from the figures read to a verdict, so each is tested without a database.

mod backlog;
mod horizon;
mod logmode;
mod relays;
mod schema;
mod settings;
mod sink;
mod vacuum;

use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::{json, Value};

pub use settings::RelaySettings;

use crate::cli::{DoctorArgs, DoctorLagArgs};
use crate::config::DbConfig;
use crate::db::{self, doctor as sql};
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
    pub lag: DoctorLagArgs,
    pub max_xact_age: Duration,
    pub retention: Duration,
    pub relay: Option<RelaySettings>,
    pub sink: Option<String>,
    pub connect_timeout: Duration,
}

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
    if args.lag.warn_lag > args.lag.crit_lag {
        return Err(crate::exit::CodedError::usage(
            "--warn-lag is longer than --crit-lag: the warning must come first",
        )
        .into());
    }
    let r = &args.relay;
    let relay = (r.lease.given() || r.sink.given().is_some()).then(|| RelaySettings {
        lease: r.lease.lease(),
        publish_timeout: r.lease.publish_timeout(),
        max_attempts: r.retry.max_attempts,
        backoff: crate::relay::Backoff {
            base: r.retry.backoff.backoff_base,
            max: r.retry.backoff.backoff_max,
        },
    });
    Ok(Settings {
        lag: args.lag.clone(),
        max_xact_age: args.max_xact_age,
        retention: args.retention,
        relay,
        sink: r.sink.given().map(str::to_owned),
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

fn when(now: DateTime<Utc>, t: Option<DateTime<Utc>>) -> String {
    t.map(|t| format!("{} ago", ago(now, t)))
        .unwrap_or_else(|| "never".into())
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
        schema::migrations_check(m, cfg.schema.name())
    }));
    let exists = sql::outbox_exists(conn).await?;
    // The outbox's dead row versions, for the xmin horizon's cost.
    let mut dead_rows = None;
    if exists {
        let indexes = read(sql::indexes(conn).await);
        match &indexes {
            Ok(i) => out.extend(schema::index_checks(i, &applied)),
            Err(e) => out.push(could_not_check("indexes", e)),
        }
        if applied.contains(&db::migrate::ORDERING_SCHEMA) {
            let ordered = read(db::ordering::any_enabled(conn).await);
            match (&indexes, &ordered) {
                (Ok(i), Ok(o)) => out.extend(schema::key_index_check(i, *o)),
                (Err(_), _) => {} // reported as `indexes`
                (_, Err(e)) => out.push(could_not_check(
                    format!("index:{}", db::ordering::KEY_INDEX),
                    e,
                )),
            }
        }
        let log_on = read(db::log::is_on(conn).await);
        match (&indexes, &log_on) {
            (Ok(i), Ok(on)) => out.extend(schema::xid_index_check(i, *on)),
            (Err(_), _) => {} // reported as `indexes`
            (_, Err(e)) => out.push(could_not_check(format!("index:{}", db::log::XID_INDEX), e)),
        }
        let trigger = read(sql::notify_trigger(conn).await);
        out.push(judged("trigger:outbox_notify_insert", &trigger, |t| {
            schema::trigger_check(t.clone(), &applied)
        }));
        let table = read(sql::table(conn).await);
        dead_rows = table.as_ref().ok().map(|t| t.dead_tuples);
        out.push(judged("dead_tuples", &table, |t| {
            vacuum::dead_tuples_check(t, now)
        }));
        out.push(judged("analyze", &table, |t| vacuum::analyze_check(t, now)));
        out.push(judged("table_bloat", &table, vacuum::table_bloat_check));
        out.push(judged("index_bloat", &indexes, |i| {
            vacuum::index_bloat_check(i)
        }));
        let settings = read(sql::autovacuum_settings(conn).await);
        out.push(match (&table, &settings) {
            (Ok(t), Ok(g)) => vacuum::autovacuum_check(t, g),
            (Err(e), _) | (_, Err(e)) => could_not_check("autovacuum", e),
        });
    }
    let visibility = read(sql::sees_all_sessions(conn).await);
    out.push(judged(
        "session_visibility",
        &visibility,
        horizon::visibility_check,
    ));
    let holders = read(sql::horizon_holders(conn).await);
    out.push(judged("xmin_horizon", &holders, |h| {
        horizon::horizon_check(h, s, dead_rows)
    }));
    if exists {
        let stats = read(crate::ops::stats::collect(conn, cfg.schema.name(), None).await);
        let ends = read(sql::published_ends(conn).await);
        let relays = read(sql::relay_sessions(conn, &cfg.schema.channel()).await);
        let log = read(db::log::health(conn).await);
        out.push(match (&relays, &stats, &ends, &log) {
            (Ok(r), Ok(st), Ok(e), Ok(l)) => relays::relays_check(
                r,
                &st.total,
                relays::last_publish(e.newest, l.as_ref()),
                now,
                &cfg.schema.channel(),
            ),
            (r, st, e, l) => could_not_check(
                "relays",
                first_error([
                    r.as_ref().err(),
                    st.as_ref().err(),
                    e.as_ref().err(),
                    l.as_ref().err(),
                ])
                .expect("one read failed"),
            ),
        });
        let dead = read(sql::dead_letters(conn).await);
        out.push(judged("dead_letters", &dead, |d| {
            backlog::dead_letters_check(d, now)
        }));
        let lease_limit = s.relay.as_ref().map_or(relays::LONG_LEASE, |r| r.lease * 2);
        let blocked = read(sql::blocked(conn, lease_limit.as_secs_f64()).await);
        out.push(judged("blocked", &blocked, |b| {
            relays::blocked_check(b, lease_limit)
        }));
        let ordering = read(db::ordering::blocked_if_migrated(conn).await);
        out.push(judged("ordering_blocked", &ordering, |b| {
            backlog::ordering_blocked_check(b.as_ref(), now)
        }));
        out.push(judged("oldest_pending", &stats, |st| {
            backlog::oldest_pending_check(&st.total, s)
        }));
        match &log {
            Ok(None) => {}
            Ok(Some(h)) => {
                out.push(logmode::reader_check(h, now));
                out.push(logmode::position_check(h, now, s));
            }
            Err(e) => out.push(could_not_check("log_reader", e)),
        }
        let last_prune = match read(sql::table_exists(conn, "outbox_audit").await) {
            Ok(true) => read(sql::last_prune(conn).await),
            Ok(false) => Ok(None),
            Err(e) => Err(e),
        };
        out.push(match (&ends, &last_prune) {
            (Ok(e), Ok(p)) => backlog::prune_check(e.oldest, *p, now, s.retention),
            (Err(e), _) | (_, Err(e)) => could_not_check("prune", e),
        });
    }
    if let Some(relay) = &s.relay {
        out.push(settings::lease_check(relay));
        if let Some(target) = s.sink.as_deref().and_then(crate::sink::nats::Target::of) {
            out.push(sink::nats_check(target, relay, s.connect_timeout).await);
        }
    }
    Ok(out)
}

/// The `--json` output of `doctor` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    vec![crate::schema::Output::of::<Report>(
        "doctor --json",
        "Each check's `details` is an object of its own figures (they differ by check).",
    )]
}

#[cfg(test)]
impl Settings {
    /// The defaults of the flags (`--warn-lag 1m --crit-lag 5m --max-xact-age 1m
    /// --retention 7d`), no relay settings.
    pub(super) fn for_tests() -> Self {
        Self {
            lag: DoctorLagArgs {
                warn_lag: Duration::from_secs(60),
                crit_lag: Duration::from_secs(300),
            },
            max_xact_age: Duration::from_secs(60),
            retention: Duration::from_secs(7 * 86_400),
            relay: None,
            sink: None,
            connect_timeout: Duration::from_secs(5),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
