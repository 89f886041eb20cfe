//! Inserting events: one multi-row statement per batch, idempotent on `idempotency_key`.

use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::PgConnection;
use uuid::Uuid;

/// One event to insert, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub tenant_id: Uuid,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    /// JSON text, validated; PostgreSQL parses it, so numbers keep their precision.
    pub payload: String,
    pub headers: Value,
    pub idempotency_key: String,
    /// Absolute due time; wins over `delay_micros`.
    pub available_at: Option<DateTime<Utc>>,
    /// Due this long after the database's `now()`.
    pub delay_micros: Option<i64>,
}

/// A row the batch inserted (duplicates by idempotency key are absent).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Inserted {
    pub id: i64,
    pub idempotency_key: String,
}

/// Inserts `events` in one statement; rows whose key exists already are skipped. Returns the rows
/// inserted, in no particular order.
pub async fn insert_batch(
    conn: &mut PgConnection,
    events: &[NewEvent],
) -> sqlx::Result<Vec<Inserted>> {
    let n = events.len();
    let mut tenant = Vec::with_capacity(n);
    let mut agg_type = Vec::with_capacity(n);
    let mut agg_id = Vec::with_capacity(n);
    let mut ev_type = Vec::with_capacity(n);
    let mut payload = Vec::with_capacity(n);
    let mut headers = Vec::with_capacity(n);
    let mut key = Vec::with_capacity(n);
    let mut at = Vec::with_capacity(n);
    let mut delay = Vec::with_capacity(n);
    for e in events {
        tenant.push(e.tenant_id);
        agg_type.push(e.aggregate_type.as_str());
        agg_id.push(e.aggregate_id.as_str());
        ev_type.push(e.event_type.as_str());
        payload.push(e.payload.as_str());
        headers.push(&e.headers);
        key.push(e.idempotency_key.as_str());
        at.push(e.available_at);
        delay.push(e.delay_micros);
    }
    sqlx::query_as(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers,
                             idempotency_key, available_at)
         SELECT t, agt, agi, et, p::jsonb, h, k,
                coalesce(av, now() + coalesce(d, 0) * interval '1 microsecond')
           FROM unnest($1::uuid[], $2::text[], $3::text[], $4::text[], $5::text[], $6::jsonb[],
                       $7::text[], $8::timestamptz[], $9::bigint[])
                AS u(t, agt, agi, et, p, h, k, av, d)
         ON CONFLICT (idempotency_key) DO NOTHING
         RETURNING id, idempotency_key",
    )
    .bind(tenant)
    .bind(agg_type)
    .bind(agg_id)
    .bind(ev_type)
    .bind(payload)
    .bind(headers)
    .bind(key)
    .bind(at)
    .bind(delay)
    .fetch_all(conn)
    .await
}
