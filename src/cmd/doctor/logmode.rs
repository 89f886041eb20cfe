//! Log mode (`outboxctl log enable`): whether a relay reads the log, and how far the log's
//! position is behind what producers wrote. The xid index is checked with the other indexes
//! (`schema::xid_index_check`).

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::{check, secs, when, Check, Settings, Status};
use crate::db::log::Health;
use crate::output;

/// Seconds since the oldest event the log has not passed was written (0 when none).
fn behind_age(h: &Health, now: DateTime<Utc>) -> Duration {
    h.oldest_behind_created_at
        .and_then(|t| (now - t).to_std().ok())
        .unwrap_or_default()
}

/// Like `relays` for queue mode: events wait past the position while no relay holds the
/// reader's lease (none has, or its lease ran out).
pub(super) fn reader_check(h: &Health, now: DateTime<Utc>) -> Check {
    let details = json!({
        "holder": h.holder, "lease_until": h.lease_until, "lease_live": h.lease_live,
        "batches": h.batches, "read_at": h.read_at, "behind": h.behind,
    });
    let last = format!("last page read {}", when(now, h.read_at));
    if h.lease_live {
        return check(
            "log_reader",
            Status::Pass,
            format!(
                "a relay holds the reader's lease ({}); {last}",
                h.holder.map(|u| u.to_string()).unwrap_or_default()
            ),
            details,
        );
    }
    if h.behind > 0 {
        return check(
            "log_reader",
            Status::Warn,
            format!(
                "log mode is on and {} past the log's position (oldest written {} ago), but no relay holds the reader's lease; {last}. Start `outboxctl relay` (--mode auto or log); a cron `relay --once` holds it only while it runs: ignore this if that is how you relay",
                output::plural(h.behind as u64, "event waits", "events wait"),
                secs(behind_age(h, now)),
            ),
            details,
        );
    }
    check(
        "log_reader",
        Status::Pass,
        format!("no relay reads the log, nothing waits past its position; {last}"),
        details,
    )
}

/// Like `oldest_pending`: how long the oldest event the log has not passed has waited, against
/// `--warn-lag`/`--crit-lag`.
pub(super) fn position_check(h: &Health, now: DateTime<Utc>, s: &Settings) -> Check {
    let age = behind_age(h, now);
    let details = json!({
        "behind": h.behind, "oldest_behind_created_at": h.oldest_behind_created_at,
        "oldest_behind_age_seconds": age.as_secs_f64(),
        "warn_seconds": s.lag.warn_lag.as_secs_f64(), "crit_seconds": s.lag.crit_lag.as_secs_f64(),
    });
    if h.behind == 0 {
        return check(
            "log_position",
            Status::Pass,
            "the log has passed every event written",
            details,
        );
    }
    let text = format!(
        "the log's position is behind {} (the oldest written {} ago)",
        output::plural(h.behind as u64, "event", "events"),
        secs(age)
    );
    super::backlog::lag_check("log_position", age, text, details, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(behind: i64, lease_live: bool, minutes_ago: i64, now: DateTime<Utc>) -> Health {
        Health {
            holder: None,
            lease_until: None,
            lease_live,
            batches: 0,
            read_at: None,
            behind,
            oldest_behind_created_at: (behind > 0)
                .then(|| now - chrono::Duration::minutes(minutes_ago)),
        }
    }

    #[test]
    fn no_reader_warns_only_while_events_wait_past_the_position() {
        let now = Utc::now();
        assert_eq!(
            reader_check(&health(0, false, 0, now), now).status,
            Status::Pass
        );
        assert_eq!(
            reader_check(&health(3, true, 0, now), now).status,
            Status::Pass
        );
        let c = reader_check(&health(3, false, 2, now), now);
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("3 events wait"), "{}", c.message);
    }

    #[test]
    fn the_position_is_judged_by_the_lag_thresholds() {
        let now = Utc::now();
        let s = Settings::for_tests();
        let st =
            |behind, minutes| position_check(&health(behind, true, minutes, now), now, &s).status;
        assert_eq!(st(0, 0), Status::Pass);
        assert_eq!(st(2, 0), Status::Pass);
        assert_eq!(st(2, 2), Status::Warn);
        assert_eq!(st(2, 10), Status::Fail);
    }
}
