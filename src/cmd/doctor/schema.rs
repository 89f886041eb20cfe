//! The schema doctor checks: migrations applied, every index they create present and valid (and
//! the key index of ordered delivery only while ordering is on), the notify trigger enabled.

use serde_json::{json, Value};

use super::{check, mib, Check, Status};
use crate::db::{self, doctor as sql, migrate::State};
use crate::output;

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

pub(super) fn migrations_check(m: &[db::migrate::MigrationStatus], schema: &str) -> Check {
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
        let list = crate::output::comma_list(&pending);
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
pub(super) fn index_checks(found: &[sql::IndexRow], applied: &[i64]) -> Vec<Check> {
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
            || i.name == db::log::XID_INDEX
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
pub(super) fn key_index_check(found: &[sql::IndexRow], ordered: bool) -> Option<Check> {
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

/// The xid index of log mode: the reader's pages walk it while log mode is on (`log enable`
/// builds it, `log disable` drops it); without log mode it should not exist, since every insert
/// pays for it.
pub(super) fn xid_index_check(found: &[sql::IndexRow], log_on: bool) -> Option<Check> {
    let name = db::log::XID_INDEX;
    let row = found
        .iter()
        .find(|i| i.name == name && i.table_name == "outbox");
    let fix = "run `outboxctl log enable` again: it rebuilds the index (and changes nothing else)";
    Some(match (row, log_on) {
        (None, false) => return None,
        (None, true) => check(
            format!("index:{name}"),
            Status::Fail,
            format!("missing while log mode is on: the log's reader walks it; {fix}"),
            json!({ "table": "outbox", "present": false, "log_mode": true }),
        ),
        (Some(i), true) if !i.valid || !i.ready => check(
            format!("index:{name}"),
            Status::Fail,
            format!("invalid (an interrupted `log enable`): the log's reader cannot use it; {fix}"),
            json!({ "table": "outbox", "present": true, "valid": false, "log_mode": true }),
        ),
        (Some(i), true) => check(
            format!("index:{name}"),
            Status::Pass,
            format!("present and valid ({}), log mode is on", mib(i.size_bytes)),
            json!({ "table": "outbox", "present": true, "valid": true, "size_bytes": i.size_bytes, "log_mode": true }),
        ),
        (Some(i), false) => check(
            format!("index:{name}"),
            Status::Warn,
            format!("present ({}) while log mode is off: every insert pays for it; `outboxctl log disable` drops it", mib(i.size_bytes)),
            json!({ "table": "outbox", "present": true, "valid": i.valid && i.ready, "log_mode": false }),
        ),
    })
}

pub(super) fn trigger_check(t: Option<sql::TriggerRow>, applied: &[i64]) -> Check {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn index(name: &str, table: &str, valid: bool) -> sql::IndexRow {
        sql::IndexRow {
            name: name.into(),
            table_name: table.into(),
            valid,
            ready: true,
            size_bytes: 16_384,
            entries: 10.0,
            definition: String::new(),
        }
    }

    #[test]
    fn the_indexes_of_applied_migrations_are_checked_and_foreign_invalid_ones_warned() {
        let found = [
            index("outbox_pkey", "outbox", true),
            index("outbox_ready_idx", "outbox", false),
            index("my_idx", "outbox", false),
        ];
        let checks = index_checks(&found, &[1]);
        let status = |n: &str| checks.iter().find(|c| c.name == n).map(|c| c.status);
        assert_eq!(checks.len(), 5, "{checks:?}");
        assert_eq!(status("index:outbox_pkey"), Some(Status::Pass));
        assert_eq!(status("index:outbox_ready_idx"), Some(Status::Fail));
        assert_eq!(
            status("index:outbox_idempotency_key_key"),
            Some(Status::Fail)
        );
        assert_eq!(status("index:my_idx"), Some(Status::Warn));
        assert_eq!(
            status("index:outbox_dead_idx"),
            None,
            "migration 2 not applied"
        );
    }

    #[test]
    fn the_key_index_is_wanted_exactly_while_ordering_is_on() {
        let key = index(db::ordering::KEY_INDEX, "outbox", true);
        let status = |found: &[sql::IndexRow], on| key_index_check(found, on).map(|c| c.status);
        assert_eq!(status(&[], false), None);
        assert_eq!(status(&[], true), Some(Status::Fail));
        assert_eq!(status(std::slice::from_ref(&key), true), Some(Status::Pass));
        assert_eq!(status(&[key], false), Some(Status::Warn));
    }

    #[test]
    fn a_missing_or_disabled_trigger_fails() {
        let trigger = |enabled: &str| {
            Some(sql::TriggerRow {
                enabled: enabled.into(),
                function: "outbox_notify".into(),
            })
        };
        assert_eq!(trigger_check(trigger("O"), &[1, 2]).status, Status::Pass);
        assert_eq!(trigger_check(trigger("D"), &[1, 2]).status, Status::Fail);
        assert_eq!(trigger_check(None, &[1, 2]).status, Status::Fail);
        assert_eq!(trigger_check(trigger("O"), &[1]).status, Status::Fail);
    }
}
