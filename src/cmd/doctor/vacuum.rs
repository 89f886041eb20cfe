//! Whether vacuum and analyze keep up with the outbox: dead row versions, stale planner
//! statistics, table and index bloat, autovacuum switched off, judged from the figures PostgreSQL
//! keeps anyway (its statistics views and catalog).

use chrono::{DateTime, Utc};
use serde_json::json;

use super::{check, mib, when, Check, Status};
use crate::db::doctor as sql;

/// Table and index bloat only matter above this size.
const BLOAT_MIN_BYTES: i64 = 1024 * 1024;
/// Bloat is reported when the relation is this many times its estimated need.
const BLOAT_FACTOR: f64 = 4.0;
/// Dead tuples are reported above this count and share of the table's rows.
const DEAD_TUPLES_MIN: i64 = 10_000;
const DEAD_TUPLES_SHARE: f64 = 0.2;
/// Rows changed since the last analyze above this count and share of the table are reported.
const ANALYZE_MIN: i64 = 10_000;
/// An index entry's estimated size (key, tuple header, line pointer, page fill): generous, so
/// only real bloat trips the check.
const INDEX_ENTRY_BYTES: f64 = 80.0;
/// Row header and line pointer, added to the data width.
const ROW_OVERHEAD_BYTES: f64 = 28.0;
const PAGE: f64 = 8192.0;

pub(super) fn dead_tuples_check(t: &sql::TableRow, now: DateTime<Utc>) -> Check {
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

pub(super) fn analyze_check(t: &sql::TableRow, now: DateTime<Utc>) -> Check {
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
pub(super) fn table_bloat_check(t: &sql::TableRow) -> Check {
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

pub(super) fn index_bloat_check(indexes: &[sql::IndexRow]) -> Check {
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

pub(super) fn autovacuum_check(t: &sql::TableRow, g: &sql::AutovacuumSettings) -> Check {
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

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: i64 = 1024 * 1024;

    fn table(
        size_bytes: i64,
        reltuples: f64,
        width: Option<i64>,
        options: &[&str],
    ) -> sql::TableRow {
        sql::TableRow {
            live_tuples: reltuples as i64,
            dead_tuples: 0,
            modified_since_analyze: 0,
            last_vacuum: None,
            last_autovacuum: None,
            last_analyze: None,
            last_autoanalyze: None,
            reltuples,
            size_bytes,
            total_bytes: size_bytes,
            reloptions: options.iter().map(|o| o.to_string()).collect(),
            avg_row_width: width,
        }
    }

    #[test]
    fn bloat_is_judged_against_what_the_rows_need_at_the_fillfactor() {
        // 10,000 rows of 100 bytes need about 1.3 MB at fillfactor 100, 2.6 MB at 50.
        let status = |size, options: &[&str]| {
            table_bloat_check(&table(size, 10_000.0, Some(100), options)).status
        };
        assert_eq!(status(2 * MIB, &[]), Status::Pass);
        assert_eq!(status(8 * MIB, &[]), Status::Warn);
        assert_eq!(status(8 * MIB, &["fillfactor=50"]), Status::Pass);
        // Small tables never count, and nothing is estimated before the first ANALYZE.
        assert_eq!(
            table_bloat_check(&table(MIB / 2, 10.0, Some(100), &[])).status,
            Status::Pass
        );
        assert_eq!(
            table_bloat_check(&table(64 * MIB, -1.0, None, &[])).status,
            Status::Pass
        );
    }

    #[test]
    fn dead_tuples_warn_only_above_both_the_count_and_the_share() {
        let now = Utc::now();
        let status = |live, dead| {
            let t = sql::TableRow {
                live_tuples: live,
                dead_tuples: dead,
                ..table(MIB, live as f64, None, &[])
            };
            dead_tuples_check(&t, now).status
        };
        assert_eq!(status(100_000, 10_000), Status::Pass, "a small share");
        assert_eq!(status(10_000, 20_000), Status::Warn);
        assert_eq!(status(0, 5_000), Status::Pass, "a small count");
    }

    #[test]
    fn autovacuum_off_on_the_table_fails_and_off_on_the_server_warns() {
        let server = |autovacuum: &str| sql::AutovacuumSettings {
            autovacuum: autovacuum.into(),
            track_counts: "on".into(),
            vacuum_scale_factor: "0.2".into(),
            vacuum_threshold: "50".into(),
            analyze_scale_factor: "0.1".into(),
        };
        let on = table(MIB, 1.0, None, &[]);
        let off = table(MIB, 1.0, None, &["autovacuum_enabled=off"]);
        assert_eq!(autovacuum_check(&on, &server("on")).status, Status::Pass);
        assert_eq!(autovacuum_check(&off, &server("on")).status, Status::Fail);
        assert_eq!(autovacuum_check(&on, &server("off")).status, Status::Warn);
    }
}
