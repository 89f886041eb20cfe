//! docs/reference/metrics.md: the relay's metrics from [`crate::relay::metrics::ALL`], and the
//! gauges of `stats --format prometheus` read off the exposition it prints for a sample report
//! (so every family it can print is listed with the help text it prints).

use std::fmt::Write;

use crate::relay::metrics::{self as m, Kind};

use super::{cell, header};

/// One metric family of an exposition: name, type, help, label names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Family {
    pub name: String,
    pub kind: String,
    pub help: String,
    pub labels: Vec<String>,
}

/// The families of a text exposition, in order, with the label names their samples carry.
pub fn families(exposition: &str) -> Vec<Family> {
    let mut out: Vec<Family> = Vec::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let (name, help) = rest.split_once(' ').unwrap_or((rest, ""));
            out.push(Family {
                name: name.to_owned(),
                kind: String::new(),
                help: help.to_owned(),
                labels: Vec::new(),
            });
        } else if let Some(rest) = line.strip_prefix("# TYPE ") {
            if let (Some(f), Some((_, kind))) = (out.last_mut(), rest.split_once(' ')) {
                f.kind = kind.to_owned();
            }
        } else if let (Some(f), Some((_, labels))) = (out.last_mut(), line.split_once('{')) {
            let labels = labels.split('}').next().unwrap_or("");
            for pair in labels.split(',') {
                if let Some((k, _)) = pair.split_once('=') {
                    if !f.labels.iter().any(|l| l == k) {
                        f.labels.push(k.to_owned());
                    }
                }
            }
        }
    }
    out
}

/// The families of `stats --format prometheus` for a report in which every optional figure is
/// present, each with the label `--by` adds to it (one per `--by` value).
fn stats_families() -> Vec<(Family, Vec<String>)> {
    use crate::cmd::stats::prometheus;
    use crate::ops::stats::{Figures, StatsReport};
    let now = chrono::DateTime::from_timestamp(1_767_225_600, 0).expect("a valid time");
    let figures = Figures {
        next_due_at: Some(now),
        published_last_minute: Some(0),
        published_last_hour: Some(0),
        ..Figures::default()
    };
    let report = |by: Option<&str>| StatsReport {
        schema: "public".into(),
        now,
        throughput_per_second: Some(0.0),
        table_rows_estimate: Some(0),
        total: figures.clone(),
        blocked: None,
        log: None,
        by: by.map(str::to_owned),
        groups: by.map(|_| [("order.placed".to_owned(), figures.clone())].into()),
    };
    let mut all: Vec<(Family, Vec<String>)> = families(&prometheus(&report(None)))
        .into_iter()
        .map(|f| (f, Vec::new()))
        .collect();
    let by = <crate::cli::StatsBy as clap::ValueEnum>::value_variants()
        .iter()
        .filter_map(clap::ValueEnum::to_possible_value)
        .flat_map(|v| families(&prometheus(&report(Some(v.get_name())))));
    for g in by {
        if let Some((f, extra)) = all.iter_mut().find(|(f, _)| f.name == g.name) {
            for l in g.labels {
                if !f.labels.contains(&l) && !extra.contains(&l) {
                    extra.push(l);
                }
            }
        }
    }
    all
}

fn kind(k: Kind) -> &'static str {
    match k {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
        Kind::Histogram => "histogram",
    }
}

fn buckets(b: &[f64]) -> String {
    b.iter().map(f64::to_string).collect::<Vec<_>>().join(", ")
}

pub fn page() -> String {
    let mut out = header(
        "Metrics",
        "src/relay/metrics.rs and `stats --format prometheus`",
    );
    let sinks: Vec<String> = m::sink_labels().map(|s| format!("`{s}`")).collect();
    let modes: Vec<String> = crate::relay::Mode::ALL
        .iter()
        .map(|m| format!("`{m}`"))
        .collect();
    let _ = write!(
        out,
        "Two sources of Prometheus metrics: the relay daemon's own endpoint (`relay \
         --metrics-addr HOST:PORT`, `GET /metrics`), and `outboxctl stats --format prometheus` \
         (for cron and node_exporter's textfile collector, `--output PATH`).\n\n\
         ## relay --metrics-addr\n\n\
         Every series carries two labels: `sink`, the sink's scheme ({}, or `other`), and \
         `mode`, how claims are settled ({}). No label ever holds an event id, an aggregate id \
         or anything else taken from a row. Counters start at 0 when the relay starts; the \
         backlog gauges are sampled from the database when the endpoint is scraped.\n\n\
         | Metric | Type | Meaning |\n| --- | --- | --- |\n",
        sinks.join(", "),
        modes.join(", ")
    );
    for &(name, k, help) in m::ALL {
        let extra = if name == m::BUILD_INFO {
            " Labels `version`, `commit`."
        } else {
            ""
        };
        let _ = writeln!(out, "| `{name}` | {} | {}{extra} |", kind(k), cell(help));
    }
    let _ = write!(
        out,
        "\nHistogram buckets (seconds): `{}`: {}; `{}`: {}.\n\n\
         The same endpoint serves `GET /livez` (the relay loop makes progress) and `GET \
         /readyz` (the database answers and the sink is not in an outage).\n\n\
         ## stats --format prometheus\n\n\
         Gauges, labelled with `schema`; with `--by`, also with the group's column (then only \
         the groups are printed, so `sum()` and `max()` over them give the totals). No sample \
         carries a timestamp.\n\n\
         | Metric | Type | Labels | Meaning |\n| --- | --- | --- | --- |\n",
        m::PUBLISH_DURATION,
        buckets(m::PUBLISH_BUCKETS),
        m::BATCH_DURATION,
        buckets(m::BATCH_BUCKETS)
    );
    for (f, by) in stats_families() {
        let code = |l: &[String]| l.iter().map(|l| format!("`{l}`")).collect::<Vec<_>>();
        let mut labels = code(&f.labels).join(", ");
        if !by.is_empty() {
            let _ = write!(labels, "; with `--by`: {}", code(&by).join(" or "));
        }
        let _ = writeln!(
            out,
            "| `{}` | {} | {labels} | {} |",
            f.name,
            f.kind,
            cell(&f.help)
        );
    }
    out
}
