//! The statements behind `outboxctl replay`: reads of published events in keyset batches by id,
//! and the run's audit row.
//!
//! Every read is one plain `SELECT` (no `FOR UPDATE`, no write) of at most one batch, `WHERE id
//! > $last ... ORDER BY id LIMIT n`: it locks no row, so relays are never held up, and each
//! statement's snapshot is short (a replay that runs for hours holds back no vacuum). The
//! primary key serves the order and the keyset; filters are bound parameters
//! ([`super::events::push_filter`]).
//!
//! While log mode is on, an event the log passed (and keeps in no retry set) is published too,
//! with no `published_at` ([`super::log::PUBLISHED`]); each read asks which mode holds, so a
//! switch during a long run changes nothing it selects (`log disable` marks what the log
//! published).

use sqlx::{PgConnection, Postgres, QueryBuilder};

use super::audit::Audit;
use super::events::push_filter;
use crate::event::Event;
use crate::select::EventFilter;

/// Which published events a read looks at: those matching `filter` (and among `ids`, when
/// given) with `after < id <= upto`.
#[derive(Debug, Clone, Copy)]
pub struct Range<'a> {
    pub filter: &'a EventFilter,
    pub ids: Option<&'a [i64]>,
    /// Only ids above this one (the last one read, or one below `--from-id`).
    pub after: i64,
    /// Only ids up to this one (the last one the run counted: events published later are not
    /// part of it).
    pub upto: i64,
}

/// The time column of `--since`/`--until` for `replay`: when the event was delivered.
const TIME_COLUMN: &str = "published_at";

/// [`TIME_COLUMN`] while log mode is on: the log writes no time per event, so an event it
/// published goes by when it was created (it was delivered no earlier).
const LOG_TIME_COLUMN: &str = "coalesce(published_at, created_at)";

/// `WHERE` of a read of `outbox o`.
fn push_where(qb: &mut QueryBuilder<'_, Postgres>, r: &Range<'_>, log: bool) {
    if log {
        qb.push(" WHERE (published_at IS NOT NULL OR ")
            .push(super::log::PUBLISHED.as_str())
            .push(")");
    } else {
        qb.push(" WHERE published_at IS NOT NULL");
    }
    qb.push(" AND id > ")
        .push_bind(r.after)
        .push(" AND id <= ")
        .push_bind(r.upto);
    if let Some(ids) = r.ids {
        qb.push(" AND id = ANY(").push_bind(ids.to_vec()).push(")");
    }
    push_filter(
        qb,
        r.filter,
        if log { LOG_TIME_COLUMN } else { TIME_COLUMN },
    );
}

/// The ids of the next `n` events of `r`, ascending: what a run counts before it asks (and what
/// bounds it), read without touching a payload.
pub async fn ids(conn: &mut PgConnection, r: &Range<'_>, n: i64) -> sqlx::Result<Vec<i64>> {
    let log = super::log::is_on(&mut *conn).await?;
    let mut qb = QueryBuilder::new("SELECT id FROM outbox o");
    push_where(&mut qb, r, log);
    qb.push(" ORDER BY id LIMIT ").push_bind(n);
    qb.build_query_scalar().fetch_all(conn).await
}

/// How the events of a replay are marked, added to each row's headers (an object: other
/// headers are sent as they are) by the read itself.
#[derive(Debug, Clone)]
pub struct Marking<'a> {
    /// Headers added to (and replacing those of the same name in) each row's headers: a JSON
    /// object.
    pub headers: &'a serde_json::Value,
    /// With fresh keys: the header that carries the row's own idempotency key.
    pub original_key_header: Option<&'a str>,
}

/// The next events of `r` to send, ascending by id: at most `rows` rows, and (after the first,
/// which is read however large) no more than `bytes` of payload and headers as stored
/// ([`super::relay::jsonb_size`]), so memory is bounded by the budget, not by the table. Only
/// the rows returned are converted to text. Payloads are read as the stored text, so no digit
/// changes; the headers are the row's with `marking` added.
pub async fn events(
    conn: &mut PgConnection,
    r: &Range<'_>,
    rows: i64,
    bytes: i64,
    marking: &Marking<'_>,
) -> sqlx::Result<Vec<Event>> {
    let log = super::log::is_on(&mut *conn).await?;
    let mut qb = QueryBuilder::new(
        "SELECT id, tenant_id, aggregate_type, aggregate_id, event_type, payload::text AS payload, \
         (CASE WHEN jsonb_typeof(headers) = 'object' THEN headers || ",
    );
    qb.push_bind(marking.headers.to_string())
        .push("::jsonb || CASE WHEN ")
        .push_bind(marking.original_key_header)
        .push("::text IS NULL THEN '{}'::jsonb ELSE jsonb_build_object(")
        .push_bind(marking.original_key_header)
        .push(
            "::text, idempotency_key) END ELSE headers END)::text AS headers, \
             idempotency_key, created_at, attempt_count \
             FROM (SELECT o.*, row_number() OVER w AS n, sum(",
        )
        .push(super::relay::jsonb_size("payload"))
        .push(" + ")
        .push(super::relay::jsonb_size("headers"))
        .push(
            ") OVER w AS run \
             FROM (SELECT * FROM outbox o",
        );
    push_where(&mut qb, r, log);
    qb.push(" ORDER BY id LIMIT ")
        .push_bind(rows)
        .push(") o WINDOW w AS (ORDER BY id ROWS UNBOUNDED PRECEDING)) s WHERE n = 1 OR run <= ")
        .push_bind(bytes)
        .push(" ORDER BY id");
    qb.build_query_as().fetch_all(conn).await
}

/// Writes the run's audit row (action `replay`, no event id) with `details` (the selection, the
/// sink, the count) before anything is sent, and returns its id: the replay's id.
pub async fn begin_audit(
    conn: &mut PgConnection,
    audit: &Audit,
    details: &serde_json::Value,
) -> sqlx::Result<i64> {
    sqlx::query_scalar(
        "INSERT INTO outbox_audit (action, actor, reason, details)
         VALUES ('replay', $1, $2, $3::jsonb) RETURNING id",
    )
    .bind(&audit.actor)
    .bind(&audit.reason)
    .bind(details.to_string())
    .fetch_one(conn)
    .await
}

/// Adds how the run ended to its audit row (how many were sent, why it stopped, where to
/// resume). A run killed before this keeps the row without them.
pub async fn end_audit(
    conn: &mut PgConnection,
    audit_id: i64,
    details: &serde_json::Value,
) -> sqlx::Result<()> {
    sqlx::query(
        "UPDATE outbox_audit SET details = details || $2::jsonb
          WHERE id = $1 AND action = 'replay'",
    )
    .bind(audit_id)
    .bind(details.to_string())
    .execute(conn)
    .await?;
    Ok(())
}

/// Whether `audit_id` is the audit row of a replay (what `--replay-id` must name).
pub async fn is_replay(conn: &mut PgConnection, audit_id: i64) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM outbox_audit WHERE id = $1 AND action = 'replay')",
    )
    .bind(audit_id)
    .fetch_one(conn)
    .await
}
