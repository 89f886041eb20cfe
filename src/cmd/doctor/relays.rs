//! Whether relays are at work: the daemons listening for inserts, and pending events that a relay
//! fails on or that a long lease holds back.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::json;

use super::{ago, check, secs, Check, Status};
use crate::db::doctor as sql;
use crate::ops::stats::Figures;
use crate::output;

/// A lease that ends further from now than this blocks its row (without --lease).
pub(super) const LONG_LEASE: Duration = Duration::from_secs(3600);

/// When an event was last published: the newest `published_at`, or in log mode (which marks no
/// row it publishes) the log's last page, when that is newer.
pub(super) fn last_publish(
    newest: Option<DateTime<Utc>>,
    log: Option<&crate::db::log::Health>,
) -> Option<DateTime<Utc>> {
    let page = log.filter(|h| h.batches > 0).and_then(|h| h.read_at);
    newest.max(page)
}

pub(super) fn relays_check(
    relays: &[sql::RelaySession],
    total: &Figures,
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

pub(super) fn blocked_check(b: &sql::BlockedRow, lease_limit: Duration) -> Check {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_daemon_warns_only_while_events_are_ready() {
        let now = Utc::now();
        let ready = |n| Figures {
            ready: n,
            ..Figures::default()
        };
        assert_eq!(
            relays_check(&[], &ready(0), None, now, "outbox").status,
            Status::Pass
        );
        let c = relays_check(&[], &ready(3), Some(now), now, "outbox");
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("3 events are ready"), "{}", c.message);
        let daemon = sql::RelaySession {
            pid: 7,
            application_name: "outboxctl relay".into(),
            client_addr: None,
            backend_start: None,
            state_change: None,
        };
        assert_eq!(
            relays_check(&[daemon], &ready(3), None, now, "outbox").status,
            Status::Pass
        );
    }

    #[test]
    fn failing_or_long_leased_events_warn() {
        let row = |retrying, long_leased| sql::BlockedRow {
            retrying,
            max_attempts: 3,
            long_leased,
            longest_lease_end: None,
        };
        assert_eq!(blocked_check(&row(0, 0), LONG_LEASE).status, Status::Pass);
        assert_eq!(blocked_check(&row(2, 0), LONG_LEASE).status, Status::Warn);
        assert_eq!(blocked_check(&row(0, 1), LONG_LEASE).status, Status::Warn);
    }
}
