//! The xmin horizon: a long transaction, a prepared transaction or a replication slot that keeps
//! vacuum from removing what the relay deleted, and what that costs each claim.

use std::time::Duration;

use serde_json::json;

use super::{check, secs, Check, Settings, Status};
use crate::db::doctor as sql;
use crate::output;

/// A transaction id age at which PostgreSQL's wraparound protection is near.
const XID_AGE_FAIL: i64 = 1_000_000_000;
/// A replication slot holding back the horizon by more transactions than this is reported.
const SLOT_XID_AGE_WARN: i64 = 10_000_000;

/// Whether doctor saw other roles' sessions in full (`sees_all`): without `pg_read_all_stats` the
/// `xmin_horizon` and `relays` checks miss what those sessions are doing (WARN, naming the grant).
pub(super) fn visibility_check(sees_all: &bool) -> Check {
    if *sees_all {
        check(
            "session_visibility",
            Status::Pass,
            "this role sees every session in pg_stat_activity",
            json!({ "sees_all_sessions": true }),
        )
    } else {
        check(
            "session_visibility",
            Status::Warn,
            "this role sees other roles' sessions without their state or start time, so xmin_horizon and relays could not judge them: GRANT pg_read_all_stats (or pg_monitor) to it",
            json!({ "sees_all_sessions": false }),
        )
    }
}

/// Every holder older than --max-xact-age (or a slot too far behind) is named, oldest first,
/// with what it costs the relay: the outbox's `dead_rows` (dead row versions) that claims from the
/// start walk until the holder ends.
pub(super) fn horizon_check(
    holders: &[sql::HorizonHolder],
    s: &Settings,
    dead_rows: Option<i64>,
) -> Check {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_role_that_sees_only_its_own_sessions_is_warned_and_told_what_to_grant() {
        let seen = visibility_check(&true);
        assert_eq!(seen.status, Status::Pass);
        let blind = visibility_check(&false);
        assert_eq!(blind.status, Status::Warn);
        assert!(
            blind.message.contains("pg_read_all_stats"),
            "{}",
            blind.message
        );
        assert!(blind.message.contains("xmin_horizon"), "{}", blind.message);
    }

    fn holder(
        kind: &str,
        age: Option<f64>,
        xid_age: Option<i64>,
        state: &str,
    ) -> sql::HorizonHolder {
        sql::HorizonHolder {
            kind: kind.into(),
            pid: (kind != "replication slot").then_some(42),
            name: "psql".into(),
            state: Some(state.into()),
            role: None,
            age_seconds: age,
            xid_age,
        }
    }

    #[test]
    fn holders_older_than_the_limit_are_named_with_their_cost() {
        let s = Settings::for_tests();
        let young = holder("transaction", Some(5.0), Some(10), "idle in transaction");
        let old = holder("transaction", Some(120.0), Some(10), "idle in transaction");
        assert_eq!(
            horizon_check(std::slice::from_ref(&young), &s, Some(7)).status,
            Status::Pass
        );
        let c = horizon_check(&[young, old], &s, Some(7));
        assert_eq!(c.status, Status::Warn);
        assert!(c.message.contains("transaction pid 42"), "{}", c.message);
        assert!(c.message.contains("7 dead row versions"), "{}", c.message);
        let wrapping = holder("transaction", Some(120.0), Some(XID_AGE_FAIL + 1), "active");
        assert_eq!(horizon_check(&[wrapping], &s, None).status, Status::Fail);
    }

    #[test]
    fn a_slot_counts_when_inactive_or_far_behind() {
        let s = Settings::for_tests();
        let slot = |xid, state| {
            horizon_check(
                &[holder("replication slot", None, Some(xid), state)],
                &s,
                None,
            )
        };
        assert_eq!(slot(10, "active").status, Status::Pass);
        assert_eq!(slot(10, "inactive").status, Status::Warn);
        assert_eq!(slot(SLOT_XID_AGE_WARN + 1, "active").status, Status::Warn);
    }
}
