//! The event as the relay hands it to a sink: one claimed outbox row. Its own module, below both
//! the SQL layer (whose claims return it) and the sinks (which publish it), so a sink knows an
//! event without knowing the table it came from.

use chrono::{DateTime, Utc};
use uuid::Uuid;

/// An event to publish. `payload` and `headers` are the stored JSON text, passed on as is.
#[derive(Debug, Clone, sqlx::FromRow)]
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
