//! The audit trail, `outbox_audit` (migration 4): one row per event per requeue, discard, cancel
//! and reschedule, and one row per prune run that deleted something.
//!
//! The rows are written by the statements that make the changes (in `dead`, `events`, `prune`),
//! never by a separate call, so a change and its row commit or roll back together. This module
//! holds what they share and the reads.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use crate::json::JsonText;

/// Who is acting, and why: what every audit row records beside the database role (which the
/// database fills in itself, `current_user`).
#[derive(Debug, Clone)]
pub struct Audit {
    /// The person or job (`--actor`, default `$USER@hostname`), resolved by `config::actor`.
    pub actor: String,
    pub reason: Option<String>,
}

/// The values of a deleted event that its audit row keeps: everything but payload and headers
/// (they may be large, or personal data that a discard is meant to remove; `dead export` keeps
/// them), and the state it was in, `state` (the mode's state SQL: a row in log mode's retry set is
/// due at its entry's time). For a statement's `RETURNING`, over the deleted row `o`.
pub fn deleted_row_json(state: &str) -> String {
    format!(
        "jsonb_build_object(
            'state', {state},
            'event_type', event_type, 'aggregate_type', aggregate_type,
            'aggregate_id', aggregate_id, 'tenant_id', tenant_id,
            'idempotency_key', idempotency_key, 'created_at', created_at,
            'available_at', available_at, 'attempt_count', attempt_count,
            'locked_until', locked_until, 'dead_lettered_at', dead_lettered_at,
            'last_error', last_error)"
    )
}

/// One audit row. `previous` and `details` are JSON text (an edit's hold payloads, whose numbers
/// must keep their digits: see [`crate::json`]).
#[derive(Debug, Clone, sqlx::FromRow, Serialize, schemars::JsonSchema)]
pub struct AuditRecord {
    /// The audit row's id.
    pub id: i64,
    /// When (database clock).
    pub at: DateTime<Utc>,
    /// What was done: requeue, discard, cancel, reschedule, edit, ...
    pub action: String,
    /// The event it was done to.
    pub event_id: Option<i64>,
    /// Who (`--actor`, or `$USER@hostname`); null only for rows from before migration 4.
    pub actor: Option<String>,
    /// The database role that did it.
    pub db_role: String,
    /// The `--reason` given.
    pub reason: Option<String>,
    /// The changed values as they were before (JSON text, digits kept).
    pub previous: Option<JsonText>,
    /// The action's own figures.
    pub details: Option<JsonText>,
}

/// One event's audit history, oldest first (reads `outbox_audit_event_id_idx`).
pub async fn history(conn: &mut PgConnection, event_id: i64) -> sqlx::Result<Vec<AuditRecord>> {
    sqlx::query_as(
        "SELECT id, at, action, event_id, actor, db_role, reason, previous::text AS previous,
                details::text AS details
           FROM outbox_audit WHERE event_id = $1 ORDER BY id",
    )
    .bind(event_id)
    .fetch_all(conn)
    .await
}

/// The audit row of the cancel or discard that deleted `event_id`, if one did (reads
/// `outbox_audit_event_id_idx`). Lets `show` say what became of an id that no longer exists.
pub async fn deletion(conn: &mut PgConnection, event_id: i64) -> sqlx::Result<Option<AuditRecord>> {
    sqlx::query_as(
        "SELECT id, at, action, event_id, actor, db_role, reason, previous::text AS previous,
                details::text AS details
           FROM outbox_audit WHERE event_id = $1 AND action IN ('cancel', 'discard')
          ORDER BY id DESC LIMIT 1",
    )
    .bind(event_id)
    .fetch_optional(conn)
    .await
}

/// Records the end of a prune run in its audit row (if the run deleted anything, it has one):
/// why it stopped, its batches and how long it took. The counts were added by each batch's own
/// statement; a run killed before this keeps them, without a stop_reason.
pub async fn finish_prune(
    conn: &mut PgConnection,
    audit_id: i64,
    stop_reason: &str,
    batches: u64,
    elapsed_ms: u64,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE outbox_audit
            SET details = details || jsonb_build_object('stop_reason', $2::text,
                                                        'batches', $3::bigint,
                                                        'elapsed_ms', $4::bigint)
          WHERE id = $1",
    )
    .bind(audit_id)
    .bind(stop_reason)
    .bind(i64::try_from(batches).unwrap_or(i64::MAX))
    .bind(i64::try_from(elapsed_ms).unwrap_or(i64::MAX))
    .execute(conn)
    .await?;
    Ok(())
}
