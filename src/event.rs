//! The event as the relay hands it to a sink: one claimed outbox row. Its own module, below both
//! the SQL layer (whose claims return it) and the sinks (which publish it), so a sink knows an
//! event without knowing the table it came from.

use chrono::{DateTime, Utc};
use sqlx::postgres::PgRow;
use sqlx::Row;
use uuid::Uuid;

/// An event to publish. `payload` and `headers` are the stored JSON text, passed on as is.
#[derive(Debug, Clone)]
pub struct Event {
    pub id: i64,
    pub tenant_id: Uuid,
    pub aggregate_type: String,
    pub aggregate_id: String,
    pub event_type: String,
    pub payload: String,
    pub headers: String,
    pub idempotency_key: String,
    pub created_at: DateTime<Utc>,
    pub attempt_count: i32,
}

/// The columns of an [`Event`], in the order every statement that returns events lists them first
/// (the claims' `RETURNING`). Rows are decoded by position: by name, each field of each row was a
/// hash lookup of its column, which with the type checks was the largest part of the relay's own
/// CPU per event (callgrind: 6,900 instructions a row to decode, 60 % of a drain's client side).
pub const COLUMNS: [&str; 10] = [
    "id",
    "tenant_id",
    "aggregate_type",
    "aggregate_id",
    "event_type",
    "payload",
    "headers",
    "idempotency_key",
    "created_at",
    "attempt_count",
];

impl<'r> sqlx::FromRow<'r, PgRow> for Event {
    fn from_row(row: &'r PgRow) -> sqlx::Result<Self> {
        #[cfg(debug_assertions)]
        {
            use sqlx::Column;
            for (i, name) in COLUMNS.iter().enumerate() {
                let got = row.columns().get(i).map(|c| c.name());
                debug_assert_eq!(got, Some(*name), "column {i} of an event row");
            }
        }
        Ok(Self {
            id: row.try_get(0)?,
            tenant_id: row.try_get(1)?,
            aggregate_type: row.try_get(2)?,
            aggregate_id: row.try_get(3)?,
            event_type: row.try_get(4)?,
            payload: row.try_get(5)?,
            headers: row.try_get(6)?,
            idempotency_key: row.try_get(7)?,
            created_at: row.try_get(8)?,
            attempt_count: row.try_get(9)?,
        })
    }
}

#[cfg(test)]
impl Event {
    /// An event for unit tests: id 7, the nil tenant, `order` 42, `order.placed`, `{}` for payload
    /// and headers, key `k-7`, a fixed creation time, first attempt. Tests change what they test:
    /// `Event { aggregate_id: "x".into(), ..Event::sample() }`.
    pub fn sample() -> Event {
        Event {
            id: 7,
            tenant_id: Uuid::nil(),
            aggregate_type: "order".into(),
            aggregate_id: "42".into(),
            event_type: "order.placed".into(),
            payload: "{}".into(),
            headers: "{}".into(),
            idempotency_key: "k-7".into(),
            created_at: DateTime::parse_from_rfc3339("2026-01-02T03:04:05.000006Z")
                .expect("a time")
                .into(),
            attempt_count: 1,
        }
    }
}
