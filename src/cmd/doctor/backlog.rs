//! What waits in the outbox: dead letters, ordered keys blocked by a dead head, the lag of the
//! most overdue event against `--warn-lag`/`--crit-lag`, and published history older than the
//! retention.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::{ago, check, secs, when, Check, Settings, Status};
use crate::db::{self, doctor as sql};
use crate::ops::stats::Figures;
use crate::output;

pub(super) fn dead_letters_check(d: &sql::DeadRow, now: DateTime<Utc>) -> Check {
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

/// Ordered keys held by a dead-lettered head (`ordering enable`, `--on-dead block`): nothing
/// more of them is published until the head is requeued or skipped.
pub(super) fn ordering_blocked_check(
    b: Option<&db::ordering::Blocked>,
    now: DateTime<Utc>,
) -> Check {
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
pub(super) fn oldest_pending_check(t: &Figures, s: &Settings) -> Check {
    let lag = Duration::from_secs_f64(t.oldest_pending_lag_seconds.max(0.0));
    let details = json!({ "lag_seconds": t.oldest_pending_lag_seconds,
                          "oldest_pending_age_seconds": t.oldest_pending_age_seconds,
                          "warn_seconds": s.lag.warn_lag.as_secs_f64(), "crit_seconds": s.lag.crit_lag.as_secs_f64() });
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
    lag_check("oldest_pending", lag, text, details, s)
}

/// Check `name` of a lag: a failure past `--crit-lag`, a warning past `--warn-lag`, each saying so
/// after `text`.
pub(super) fn lag_check(
    name: &str,
    lag: Duration,
    text: String,
    details: Value,
    s: &Settings,
) -> Check {
    if lag > s.lag.crit_lag {
        check(
            name,
            Status::Fail,
            format!("{text}, longer than --crit-lag {}", secs(s.lag.crit_lag)),
            details,
        )
    } else if lag > s.lag.warn_lag {
        check(
            name,
            Status::Warn,
            format!("{text}, longer than --warn-lag {}", secs(s.lag.warn_lag)),
            details,
        )
    } else {
        check(name, Status::Pass, text, details)
    }
}

pub(super) fn prune_check(
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lag_is_judged_against_warn_and_crit() {
        let s = Settings::for_tests();
        let lag = |ready, seconds| {
            let f = Figures {
                ready,
                oldest_pending_lag_seconds: seconds,
                ..Figures::default()
            };
            oldest_pending_check(&f, &s).status
        };
        assert_eq!(lag(0, 0.0), Status::Pass);
        assert_eq!(lag(1, 10.0), Status::Pass);
        assert_eq!(lag(1, 120.0), Status::Warn);
        assert_eq!(lag(1, 600.0), Status::Fail);
    }

    #[test]
    fn published_history_older_than_the_retention_warns() {
        let now = Utc::now();
        let week = Duration::from_secs(7 * 86_400);
        let days_ago = |d: i64| Some(now - chrono::Duration::days(d));
        assert_eq!(
            prune_check(days_ago(8), None, now, week).status,
            Status::Warn
        );
        assert_eq!(
            prune_check(days_ago(1), days_ago(1), now, week).status,
            Status::Pass
        );
        assert_eq!(prune_check(None, None, now, week).status, Status::Pass);
    }

    #[test]
    fn dead_letters_warn() {
        let now = Utc::now();
        let row = |count| sql::DeadRow {
            count,
            oldest: Some(now),
            newest: Some(now),
        };
        assert_eq!(dead_letters_check(&row(0), now).status, Status::Pass);
        assert_eq!(dead_letters_check(&row(2), now).status, Status::Warn);
    }
}
