//! `outboxctl stats`: backlog, lag, in-flight, dead letters and throughput, overall or per group.
//! The figures are read in `ops::stats`; here they are printed (a table, JSON, Prometheus text)
//! or judged against `--check`'s thresholds.

use std::path::Path;

/// The `--json` outputs of `stats` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    use crate::schema::Output;
    vec![
        Output::of::<StatsReport>(
            "stats --json",
            "The figures of the whole outbox at the top level; with `--by`, also `by` and \
             `groups`, the same figures per group. `blocked_keys` and `blocked_events` are absent \
             before migration 6.",
        ),
        Output::of::<CheckReport>(
            "stats --check --json",
            "The exit code follows the Nagios plugin convention (exit-codes.md).",
        ),
    ]
}

#[cfg(test)]
use std::time::Duration;

use anyhow::Context;
use chrono::{DateTime, Utc};
use serde::Serialize;

use crate::cli::{StatsArgs, StatsCheckArgs, StatsFormat};
use crate::config::DbConfig;
use crate::db;
use crate::exit::{nagios, CodedError};
use crate::ops::stats::{collect, Figures, StatsReport, BACKLOG_COLUMNS};
use crate::output;

/// How `stats` prints, resolved from `--format` and `--json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Human,
    Json,
    Prometheus,
}

/// `--format` wins when given; otherwise `--json` means JSON.
pub fn format_of(format: Option<StatsFormat>, json: bool) -> Format {
    match (format, json) {
        (Some(StatsFormat::Human), _) => Format::Human,
        (Some(StatsFormat::Json), _) | (None, true) => Format::Json,
        (Some(StatsFormat::Prometheus), _) => Format::Prometheus,
        (None, false) => Format::Human,
    }
}

pub async fn run(args: StatsArgs) -> anyhow::Result<u8> {
    if args.check.check {
        return run_check(&args).await;
    }
    let format = format_of(args.format, args.output.json);
    if args.output_file.is_some() && format == Format::Human {
        return Err(CodedError::usage(
            "--output writes --format prometheus or json; add one of them",
        )
        .into());
    }
    let cfg = DbConfig::from_args(&args.db)?;
    let mut conn = db::connect_migrated(&cfg).await?;
    let report = collect(&mut conn, cfg.schema.name(), args.by).await?;
    let text = match format {
        Format::Human => return print_human(&report).map(|_| crate::exit::OK),
        Format::Json => format!("{}\n", serde_json::to_string_pretty(&report)?),
        Format::Prometheus => prometheus(&report),
    };
    match &args.output_file {
        Some(path) => write_atomically(path, text.as_bytes())
            .with_context(|| format!("cannot write --output {}", path.display()))?,
        None => output::print_line(text.trim_end_matches('\n'))?,
    }
    Ok(crate::exit::OK)
}

/// Writes `bytes` to `path` so that a reader sees the old file or the new one, never a part: a
/// temporary file in the same directory (same filesystem, so the rename is atomic), synced, made
/// readable by others (node_exporter usually runs as its own user), then renamed over `path`. Its
/// name does not end in `.prom`, so the textfile collector ignores it meanwhile.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    use std::io::Write;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".outboxctl-")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    }
    tmp.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A label value in the text exposition format: backslash, double quote and newline escaped.
fn label_value(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// The figures as Prometheus text exposition (version 0.0.4): gauges named `outboxctl_*` in base
/// units (seconds, events), labelled with the schema (and with `--by`, the group's column: then
/// only the groups are printed, so `sum()` and `max()` over them give the totals without double
/// counting). No sample carries a timestamp: the scraper's time is the sample's time, and
/// `outboxctl_stats_timestamp_seconds` says when the figures were read (database clock).
pub fn prometheus(r: &StatsReport) -> String {
    use std::fmt::Write;
    let group_label = match r.by.as_deref() {
        Some("event-type") => Some("event_type"),
        Some("tenant") => Some("tenant_id"),
        Some("aggregate-type") => Some("aggregate_type"),
        _ => None,
    };
    let schema = label_value(&r.schema);
    let rows: Vec<(String, &Figures)> = match (&r.groups, group_label) {
        (Some(groups), Some(l)) => groups
            .iter()
            .map(|(k, f)| (format!("schema=\"{schema}\",{l}=\"{}\"", label_value(k)), f))
            .collect(),
        _ => vec![(format!("schema=\"{schema}\""), &r.total)],
    };
    let mut out = String::new();
    let mut family = |name: &str, help: &str, samples: Vec<(String, f64)>| {
        if samples.is_empty() {
            return;
        }
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} gauge");
        for (labels, v) in samples {
            let _ = writeln!(out, "{name}{{{labels}}} {v}");
        }
    };
    let each = |f: &dyn Fn(&Figures) -> f64| -> Vec<(String, f64)> {
        rows.iter().map(|(l, fig)| (l.clone(), f(fig))).collect()
    };
    let mut events = Vec::new();
    for (labels, f) in &rows {
        for (state, n) in [
            ("ready", f.ready),
            ("scheduled", f.scheduled),
            ("in_flight", f.in_flight),
            ("dead", f.dead_lettered),
        ] {
            events.push((format!("{labels},state=\"{state}\""), n as f64));
        }
    }
    family(
        "outboxctl_events",
        "Unpublished events by state: ready (due, not leased), scheduled (not yet due), in_flight (leased by a relay), dead (dead-lettered).",
        events,
    );
    family(
        "outboxctl_retrying_events",
        "Pending events not leased that failed at least once (a subset of ready and scheduled).",
        each(&|f| f.retrying as f64),
    );
    let mut recent = Vec::new();
    // None in log mode: no sample rather than a wrong 0.
    for (labels, f) in &rows {
        for (window, n) in [
            ("1m", f.published_last_minute),
            ("1h", f.published_last_hour),
        ] {
            if let Some(n) = n {
                recent.push((format!("{labels},window=\"{window}\""), n as f64));
            }
        }
    }
    family(
        "outboxctl_recently_published_events",
        "Events published within the window before the figures were read.",
        recent,
    );
    // The ages and lags, each a gauge of one sample per row: its name, its help, the row's value.
    type Each = (&'static str, &'static str, fn(&Figures) -> f64);
    let ages: [Each; 4] = [
        (
            "outboxctl_oldest_pending_age_seconds",
            "Seconds since the oldest pending (ready, scheduled or in-flight) event was created; 0 when none is pending.",
            |f| f.oldest_pending_age_seconds,
        ),
        (
            "outboxctl_oldest_pending_lag_seconds",
            "Seconds the most overdue pending event has been late: a ready one since it fell due, one that failed before since it first fell due (its creation); one scheduled for later and never tried is not late; 0 when none is. What stats --check compares with --warn-lag/--crit-lag.",
            |f| f.oldest_pending_lag_seconds,
        ),
        (
            "outboxctl_oldest_ready_lag_seconds",
            "Seconds the oldest ready event has been due; 0 when none is ready.",
            |f| f.oldest_ready_lag_seconds,
        ),
        (
            "outboxctl_oldest_ready_age_seconds",
            "Seconds since the oldest ready event was created; 0 when none is ready.",
            |f| f.oldest_ready_age_seconds,
        ),
    ];
    for (name, help, value) in ages {
        family(name, help, each(&value));
    }
    family(
        "outboxctl_next_due_timestamp_seconds",
        "Unix time at which the next scheduled event becomes due (absent when none is scheduled).",
        rows.iter()
            .filter_map(|(l, f)| f.next_due_at.map(|t| (l.clone(), unix_seconds(t))))
            .collect(),
    );
    family(
        "outboxctl_table_rows",
        "The planner's estimate of the outbox table's rows (absent before the first ANALYZE).",
        r.table_rows_estimate
            .map(|n| vec![(format!("schema=\"{schema}\""), n as f64)])
            .unwrap_or_default(),
    );
    family(
        "outboxctl_stats_timestamp_seconds",
        "Unix time (database clock) at which these figures were read.",
        vec![(format!("schema=\"{schema}\""), unix_seconds(r.now))],
    );
    family(
        "outboxctl_build_info",
        "The outboxctl that wrote these figures.",
        vec![(
            format!(
                "version=\"{}\",commit=\"{}\"",
                label_value(env!("CARGO_PKG_VERSION")),
                label_value(env!("OUTBOXCTL_GIT_COMMIT"))
            ),
            1.0,
        )],
    );
    out
}

fn unix_seconds(t: DateTime<Utc>) -> f64 {
    t.timestamp_micros() as f64 / 1e6
}

/// One threshold pair of `stats --check`, in the value's unit (seconds or events).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, schemars::JsonSchema)]
pub struct Threshold {
    pub warn: Option<f64>,
    pub crit: Option<f64>,
}

impl Threshold {
    /// A pair of flags, in the value's unit.
    fn of<T>((warn, crit): (Option<T>, Option<T>), unit: impl Fn(T) -> f64) -> Self {
        Self {
            warn: warn.map(&unit),
            crit: crit.map(&unit),
        }
    }
}

/// The validated thresholds of `stats --check`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Thresholds {
    pub lag: Threshold,
    pub dead: Threshold,
    pub backlog: Threshold,
    pub retrying: Threshold,
}

impl Thresholds {
    /// At least one threshold, and no warning above its critical threshold.
    pub fn from_args(a: &StatsCheckArgs) -> Result<Self, CodedError> {
        let t = Self {
            lag: Threshold::of(a.lag.pair(), |d| d.as_secs_f64()),
            dead: Threshold::of(a.dead.pair(), |v| v as f64),
            backlog: Threshold::of(a.backlog.pair(), |v| v as f64),
            retrying: Threshold::of(a.retrying.pair(), |v| v as f64),
        };
        let all = [
            ("lag", t.lag),
            ("dead", t.dead),
            ("backlog", t.backlog),
            ("retrying", t.retrying),
        ];
        if all
            .iter()
            .all(|(_, t)| t.warn.is_none() && t.crit.is_none())
        {
            return Err(CodedError::usage(
                "--check needs at least one threshold: --warn-lag/--crit-lag, --warn-dead/--crit-dead, --warn-backlog/--crit-backlog or --warn-retrying/--crit-retrying",
            ));
        }
        for (name, th) in all {
            if let (Some(w), Some(c)) = (th.warn, th.crit) {
                if w > c {
                    return Err(CodedError::usage(format!(
                        "--warn-{name} is greater than --crit-{name}: the warning threshold must not be above the critical one"
                    )));
                }
            }
        }
        Ok(t)
    }
}

/// One figure of `stats --check`.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct CheckItem {
    /// The performance-data label: lag, dead, backlog, retrying.
    pub name: &'static str,
    pub value: f64,
    /// `s` for lag, empty for counts.
    pub unit: &'static str,
    pub warn: Option<f64>,
    pub crit: Option<f64>,
    pub status: &'static str,
}

/// `stats --check --json`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct CheckReport {
    /// OK, WARNING, CRITICAL or UNKNOWN.
    pub status: &'static str,
    pub exit_code: u8,
    /// The status line's text between `OUTBOX STATUS - ` and ` | `.
    pub summary: String,
    pub checks: Vec<CheckItem>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stats: Option<StatsReport>,
}

fn status_name(code: u8) -> &'static str {
    match code {
        nagios::OK => "OK",
        nagios::WARNING => "WARNING",
        nagios::CRITICAL => "CRITICAL",
        _ => "UNKNOWN",
    }
}

/// A threshold as the status line shows it: a duration for lag, a count otherwise.
fn shown(item: &CheckItem, v: f64) -> String {
    if item.unit == "s" {
        lag(v)
    } else {
        format!("{v}")
    }
}

/// Compares the totals with the thresholds: the worst figure decides (a value greater than its
/// threshold trips it, as Nagios's range `N` means 0..N).
pub fn evaluate(total: &Figures, t: &Thresholds) -> (u8, String, Vec<CheckItem>) {
    let figures = [
        ("lag", total.oldest_pending_lag_seconds, "s", t.lag),
        ("dead", total.dead_lettered as f64, "", t.dead),
        (
            "backlog",
            (total.ready + total.in_flight) as f64,
            "",
            t.backlog,
        ),
        ("retrying", total.retrying as f64, "", t.retrying),
    ];
    let mut items = Vec::new();
    let mut worst = nagios::OK;
    let mut tripped: Vec<(u8, String)> = Vec::new();
    for (name, value, unit, th) in figures {
        let over = |x: Option<f64>| x.is_some_and(|x| value > x);
        let code = if over(th.crit) {
            nagios::CRITICAL
        } else if over(th.warn) {
            nagios::WARNING
        } else {
            nagios::OK
        };
        let item = CheckItem {
            name,
            value,
            unit,
            warn: th.warn,
            crit: th.crit,
            status: status_name(code),
        };
        if code != nagios::OK {
            let limit = if code == nagios::CRITICAL {
                th.crit
            } else {
                th.warn
            };
            tripped.push((
                code,
                format!(
                    "{} {} > {}",
                    describe(name),
                    shown(&item, value),
                    shown(&item, limit.unwrap_or_default())
                ),
            ));
        }
        worst = worst.max(code);
        items.push(item);
    }
    tripped.sort_by_key(|t| std::cmp::Reverse(t.0));
    let summary = if tripped.is_empty() {
        format!(
            "lag {}, {} dead, {} backlog, {} retrying",
            lag(total.oldest_pending_lag_seconds),
            total.dead_lettered,
            total.ready + total.in_flight,
            total.retrying
        )
    } else {
        tripped
            .into_iter()
            .map(|(_, s)| s)
            .collect::<Vec<_>>()
            .join(", ")
    };
    (worst, summary, items)
}

fn describe(name: &str) -> &'static str {
    match name {
        "lag" => "lag",
        "dead" => "dead letters",
        "backlog" => "backlog",
        _ => "retrying",
    }
}

/// Nagios performance data: `'label'=value[unit];warn;crit` per figure (empty when unset).
pub fn perfdata(items: &[CheckItem]) -> String {
    let num = |v: f64| format!("{}", (v * 1000.0).round() / 1000.0);
    items
        .iter()
        .map(|i| {
            format!(
                "'{}'={}{};{};{}",
                i.name,
                num(i.value),
                i.unit,
                i.warn.map(num).unwrap_or_default(),
                i.crit.map(num).unwrap_or_default()
            )
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// `stats --check`: every error becomes UNKNOWN (exit 3) with a status line on stdout.
async fn run_check(args: &StatsArgs) -> anyhow::Result<u8> {
    let json = format_of(args.format, args.output.json) == Format::Json;
    match check(args).await {
        Ok(code) => Ok(code),
        Err(err) => {
            let summary = crate::exit::message(&err);
            if json {
                output::print_json(&CheckReport {
                    status: "UNKNOWN",
                    exit_code: nagios::UNKNOWN,
                    summary: summary.clone(),
                    checks: vec![],
                    stats: None,
                })?;
            } else {
                output::print_line(format_args!("OUTBOX UNKNOWN - {summary}"))?;
            }
            // A fresh error: `exit::code_of` would find a code inside the chain first.
            Err(CodedError {
                code: nagios::UNKNOWN,
                message: format!("stats --check: {summary}"),
            }
            .into())
        }
    }
}

async fn check(args: &StatsArgs) -> anyhow::Result<u8> {
    let format = format_of(args.format, args.output.json);
    if format == Format::Prometheus {
        return Err(CodedError::usage(
            "--check prints a status line (or --json), not --format prometheus",
        )
        .into());
    }
    if args.output_file.is_some() {
        return Err(CodedError::usage("--check prints on stdout: drop --output").into());
    }
    if args.by.is_some() {
        return Err(CodedError::usage("--check compares the totals: drop --by").into());
    }
    let thresholds = Thresholds::from_args(&args.check)?;
    let cfg = DbConfig::from_args(&args.db)?;
    let mut conn = db::connect_migrated(&cfg).await?;
    let report = collect(&mut conn, cfg.schema.name(), None).await?;
    let (code, summary, items) = evaluate(&report.total, &thresholds);
    if format == Format::Json {
        output::print_json(&CheckReport {
            status: status_name(code),
            exit_code: code,
            summary,
            checks: items,
            stats: Some(report),
        })?;
    } else {
        output::print_line(format_args!(
            "OUTBOX {} - {summary} | {}",
            status_name(code),
            perfdata(&items)
        ))?;
    }
    Ok(code)
}

fn lag(secs: f64) -> String {
    output::human_duration(std::time::Duration::from_secs_f64(secs))
}

/// A count, or `-` where it is not known (log mode's publishes by time).
fn count_or_dash(n: Option<i64>) -> String {
    n.map_or_else(|| "-".into(), |n| n.to_string())
}

fn print_human(r: &StatsReport) -> anyhow::Result<()> {
    let first = [r.by.as_deref().unwrap_or("outbox")];
    let rest = [
        "pub/1m",
        "pub/1h",
        "lag",
        "lag (due)",
        "lag (created)",
        "oldest pending",
    ];
    let header = [&first[..], &BACKLOG_COLUMNS, &rest].concat();
    let mut t = output::table(&header);
    let row = |name: &str, f: &Figures| {
        let mut cells = vec![name.to_owned()];
        cells.extend(f.backlog_cells());
        cells.extend([
            count_or_dash(f.published_last_minute),
            count_or_dash(f.published_last_hour),
            lag(f.oldest_pending_lag_seconds),
            lag(f.oldest_ready_lag_seconds),
            lag(f.oldest_ready_age_seconds),
            lag(f.oldest_pending_age_seconds),
        ]);
        cells
    };
    if let Some(groups) = &r.groups {
        for (k, f) in groups {
            output::add_row(&mut t, row(k, f));
        }
    }
    output::add_row(
        &mut t,
        row(
            if r.groups.is_some() {
                "(total)"
            } else {
                r.schema.as_str()
            },
            &r.total,
        ),
    );
    output::print_table(&t)?;
    let throughput = match (r.throughput_per_second, &r.log) {
        (Some(t), _) => format!("throughput {t:.1}/s over the last minute"),
        (None, Some(l)) => format!(
            "throughput unknown in log mode (the log marks no row it publishes): {} read, the last {}, {} behind, {} in the retry set",
            output::plural(l.batches as u64, "page", "pages"),
            l.read_at
                .map(|t| t.to_rfc3339())
                .unwrap_or_else(|| "never".into()),
            output::plural(l.behind as u64, "event", "events"),
            l.retrying
        ),
        (None, None) => "throughput unknown".into(),
    };
    output::print_line(format_args!(
        "{throughput}; next scheduled event {}; {}",
        r.total
            .next_due_at
            .map(|t| t.to_rfc3339())
            .unwrap_or_else(|| "none".into()),
        match r.table_rows_estimate {
            Some(n) => format!("~{n} rows in table"),
            None => "rows in table unknown (never analysed)".into(),
        }
    ))?;
    if let Some(b) = r.blocked.as_ref().filter(|b| b.blocked_keys > 0) {
        output::print_line(format_args!(
            "blocked: {} holding {}, the oldest since {} (see `outboxctl dead list`)",
            output::plural(b.blocked_keys as u64, "ordered key", "ordered keys"),
            output::plural(b.blocked_events as u64, "event", "events"),
            b.oldest_blocked_at
                .map(|t| t.to_rfc3339())
                .unwrap_or_default()
        ))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{DeadCheck, LagCheck, StatsCheckArgs};

    fn figures() -> Figures {
        Figures {
            ready: 40,
            in_flight: 2,
            scheduled: 7,
            retrying: 3,
            dead_lettered: 5,
            oldest_pending_lag_seconds: 432.0,
            ..Figures::default()
        }
    }

    #[test]
    fn the_worst_threshold_decides_and_is_named_first() {
        let t = Thresholds::from_args(&StatsCheckArgs {
            check: true,
            lag: LagCheck {
                warn_lag: Some(Duration::from_secs(60)),
                crit_lag: Some(Duration::from_secs(300)),
            },
            dead: DeadCheck {
                warn_dead: Some(1),
                crit_dead: Some(100),
            },
            ..Default::default()
        })
        .unwrap();
        let (code, summary, items) = evaluate(&figures(), &t);
        assert_eq!(code, nagios::CRITICAL);
        assert_eq!(summary, "lag 7m 12s > 5m, dead letters 5 > 1");
        assert_eq!(
            perfdata(&items),
            "'lag'=432s;60;300 'dead'=5;1;100 'backlog'=42;; 'retrying'=3;;"
        );
        // A value equal to its threshold does not trip it (Nagios: alert when greater).
        let t = Thresholds {
            backlog: Threshold {
                warn: Some(42.0),
                crit: None,
            },
            ..Thresholds::default()
        };
        assert_eq!(evaluate(&figures(), &t).0, nagios::OK);
        let t = Thresholds {
            retrying: Threshold {
                warn: Some(2.0),
                crit: Some(10.0),
            },
            ..Thresholds::default()
        };
        let (code, summary, _) = evaluate(&figures(), &t);
        assert_eq!(
            (code, summary.as_str()),
            (nagios::WARNING, "retrying 3 > 2")
        );
    }

    #[test]
    fn thresholds_are_validated() {
        let none = StatsCheckArgs {
            check: true,
            ..Default::default()
        };
        assert!(Thresholds::from_args(&none).is_err());
        let inverted = StatsCheckArgs {
            check: true,
            lag: LagCheck {
                warn_lag: Some(Duration::from_secs(600)),
                crit_lag: Some(Duration::from_secs(60)),
            },
            ..Default::default()
        };
        let e = Thresholds::from_args(&inverted).unwrap_err();
        assert!(e.message.contains("--warn-lag"), "{}", e.message);
    }

    #[test]
    fn format_flag_wins_over_json() {
        assert_eq!(format_of(None, false), Format::Human);
        assert_eq!(format_of(None, true), Format::Json);
        assert_eq!(
            format_of(Some(StatsFormat::Prometheus), true),
            Format::Prometheus
        );
        assert_eq!(format_of(Some(StatsFormat::Human), true), Format::Human);
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }
}
