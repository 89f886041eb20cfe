//! Dead-letter statements: requeue and discard (each with its audit rows), one batch of ids each.
//!
//! Both re-check in the statement itself that a row is still dead-lettered, under the row lock, so
//! they are safe beside relays and beside each other: a row is requeued or discarded at most once,
//! and a row that stopped being dead since it was selected is left alone.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::PgConnection;

use super::audit::{deleted_row_json, Audit};

/// How to requeue.
#[derive(Debug, Clone)]
pub struct RequeueSpec {
    /// Keep attempt_count instead of resetting it to 0.
    pub keep_attempts: bool,
    /// available_at = now() + this.
    pub delay_micros: i64,
}

/// Requeues those of `ids` that are still dead: clears dead_lettered_at and the lease
/// (locked_until, claim_token, so a stale settle from an old claim matches nothing), resets
/// attempt_count unless asked not to, sets available_at, and writes one `outbox_audit` row per
/// event (actor, reason, previous dead_lettered_at / attempt_count / last_error, the new
/// available_at), all in one statement. last_error is kept; `blocks_key` is cleared, so if the
/// event dies again its key's `on_dead` policy decides afresh (an earlier `ordering skip`'s
/// `false` would otherwise make the blocking trigger recompute over a later skip). Returns the
/// ids requeued. The next `relay --once` run's ordered walk starts without its id floor, which
/// the requeued rows may lie below ([`super::floor::forget_key_floor`]).
pub async fn requeue(
    conn: &mut PgConnection,
    ids: &[i64],
    spec: &RequeueSpec,
    audit: &Audit,
) -> sqlx::Result<Vec<i64>> {
    let requeued: Vec<i64> = sqlx::query_scalar(
        "WITH old AS (
             SELECT id, dead_lettered_at, attempt_count, last_error
               FROM outbox
              WHERE id = ANY($1) AND dead_lettered_at IS NOT NULL AND published_at IS NULL
              ORDER BY id
                FOR UPDATE
         ), requeued AS (
             UPDATE outbox o
                SET dead_lettered_at = NULL,
                    locked_until     = NULL,
                    claim_token      = NULL,
                    blocks_key       = NULL,
                    attempt_count    = CASE WHEN $2 THEN o.attempt_count ELSE 0 END,
                    available_at     = now() + $3::bigint * interval '1 microsecond'
               FROM old
              WHERE o.id = old.id
          RETURNING o.id, o.available_at, old.dead_lettered_at, old.attempt_count, old.last_error
         )
         INSERT INTO outbox_audit (action, event_id, actor, reason, previous, details)
         SELECT 'requeue', id, $5, $4,
                jsonb_build_object('dead_lettered_at', dead_lettered_at,
                                   'attempt_count', attempt_count, 'last_error', last_error),
                jsonb_build_object('kept_attempts', $2, 'available_at', available_at)
           FROM requeued
         RETURNING event_id",
    )
    .bind(ids)
    .bind(spec.keep_attempts)
    .bind(spec.delay_micros)
    .bind(audit.reason.as_deref())
    .bind(&audit.actor)
    .fetch_all(&mut *conn)
    .await?;
    super::floor::forget_key_floor_if(conn, requeued).await
}

/// Deletes those of `ids` that are still dead-lettered and writes one `outbox_audit` row per
/// deleted event (its values but payload and headers), in one statement. Returns the ids deleted.
pub async fn discard(
    conn: &mut PgConnection,
    ids: &[i64],
    audit: &Audit,
) -> sqlx::Result<Vec<i64>> {
    sqlx::query_scalar(&format!(
        "WITH d AS (
             DELETE FROM outbox o
              WHERE id = ANY($1) AND dead_lettered_at IS NOT NULL AND published_at IS NULL
             RETURNING id, {} AS previous
         )
         INSERT INTO outbox_audit (action, event_id, actor, reason, previous)
         SELECT 'discard', id, $2, $3, previous FROM d
         RETURNING event_id",
        deleted_row_json(super::events::STATE_SQL)
    ))
    .bind(ids)
    .bind(&audit.actor)
    .bind(audit.reason.as_deref())
    .fetch_all(conn)
    .await
}

/// One audit row of a requeue.
#[derive(Debug, Clone, sqlx::FromRow, Serialize, schemars::JsonSchema)]
pub struct RequeueRecord {
    pub requeued_at: DateTime<Utc>,
    /// Who requeued it.
    pub requeued_by: String,
    /// The `--reason` given.
    pub reason: Option<String>,
    /// When it had been dead-lettered.
    pub previous_dead_lettered_at: Option<DateTime<Utc>>,
    /// Its attempt count before the requeue.
    pub previous_attempt_count: i32,
    /// Its last error before the requeue.
    pub previous_last_error: Option<String>,
    /// Requeued with `--keep-attempts`.
    pub kept_attempts: bool,
    /// When it was made due again.
    pub available_at: DateTime<Utc>,
}

/// The requeue history of one event, oldest first.
pub async fn history(conn: &mut PgConnection, event_id: i64) -> sqlx::Result<Vec<RequeueRecord>> {
    sqlx::query_as(
        "SELECT requeued_at, requeued_by, reason, previous_dead_lettered_at,
                previous_attempt_count, previous_last_error, kept_attempts, available_at
           FROM outbox_requeues WHERE event_id = $1 ORDER BY id",
    )
    .bind(event_id)
    .fetch_all(conn)
    .await
}
