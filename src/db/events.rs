//! Reading events in any state, and the statements behind `events cancel` / `events reschedule` /
//! `events edit`.
//!
//! Filters become bound parameters through [`push_filter`]; the SQL text only varies with which
//! filters are present, from fixed fragments in this file.

use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::Value;
use sqlx::{PgConnection, Postgres, QueryBuilder};
use uuid::Uuid;

use super::audit::{deleted_row_json, Audit};
use super::timestamp::Timestamp;
use crate::json::JsonText;
use crate::select::EventFilter;
use crate::when::TimeArg;

/// An event's state, as the relay defines it. Computed in SQL by [`STATE_SQL`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum EventState {
    /// Due and not leased: the next claim may take it.
    Ready,
    /// Not yet due (delayed, or waiting for a retry), not leased.
    Scheduled,
    /// Leased by a relay that is publishing it.
    InFlight,
    /// Published and marked (kept until `prune`).
    Published,
    /// Dead-lettered: the relay gave up on it (see `outboxctl dead`).
    Dead,
}

/// The state of a row, newest fact first: published, dead, leased, due later, ready.
pub const STATE_SQL: &str = "CASE WHEN published_at IS NOT NULL THEN 'published' \
     WHEN dead_lettered_at IS NOT NULL THEN 'dead' \
     WHEN locked_until >= now() THEN 'in-flight' \
     WHEN available_at > now() THEN 'scheduled' \
     ELSE 'ready' END";

/// [`STATE_SQL`] while log mode is on, for a row `o`: an event the log passed and did not keep
/// in the retry set is published ([`super::log::PUBLISHED`], with no `published_at`), and one in
/// the retry set is due at its entry's time ([`super::log::DUE_AT`]). The same as [`STATE_SQL`]
/// while log mode is off; read only while it is on, so queue mode's statements and plans stay
/// as they are.
static LOG_STATE_SQL: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "CASE WHEN o.published_at IS NOT NULL THEN 'published' \
         WHEN o.dead_lettered_at IS NOT NULL THEN 'dead' \
         WHEN {} THEN 'published' \
         WHEN o.locked_until >= now() THEN 'in-flight' \
         WHEN {} > now() THEN 'scheduled' \
         ELSE 'ready' END",
        *super::log::PUBLISHED,
        super::log::DUE_AT
    )
});

/// Which state SQL a statement uses: queue mode's, or log mode's while it is switched on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Queue,
    Log,
}

impl Mode {
    async fn of(conn: &mut PgConnection) -> sqlx::Result<Mode> {
        Ok(if super::log::is_on(conn).await? {
            Mode::Log
        } else {
            Mode::Queue
        })
    }

    /// The state of row `o` ([`STATE_SQL`] or [`LOG_STATE_SQL`]).
    fn state_sql(self) -> &'static str {
        match self {
            Mode::Queue => STATE_SQL,
            Mode::Log => &LOG_STATE_SQL,
        }
    }

    /// What a change adds to its WHERE so it leaves what the log published alone (nothing in
    /// queue mode, where `published_at IS NULL` says it).
    fn not_published(self) -> String {
        match self {
            Mode::Queue => String::new(),
            Mode::Log => format!(" AND ({}) <> 'published'", *LOG_STATE_SQL),
        }
    }
}

impl EventState {
    pub const ALL: [EventState; 5] = [
        EventState::Ready,
        EventState::Scheduled,
        EventState::InFlight,
        EventState::Published,
        EventState::Dead,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            EventState::Ready => "ready",
            EventState::Scheduled => "scheduled",
            EventState::InFlight => "in-flight",
            EventState::Published => "published",
            EventState::Dead => "dead",
        }
    }

    /// A WHERE fragment matching exactly the rows the mode's state SQL calls `self`. In log
    /// mode the state itself (the dead keep queue mode's, which log mode computes alike).
    fn predicate(self, mode: Mode) -> std::borrow::Cow<'static, str> {
        if mode == Mode::Log && self != EventState::Dead {
            return format!("(({}) = '{}')", *LOG_STATE_SQL, self.as_str()).into();
        }
        match self {
            EventState::Ready => {
                "(published_at IS NULL AND dead_lettered_at IS NULL AND available_at <= now() \
                 AND (locked_until IS NULL OR locked_until < now()))"
            }
            EventState::Scheduled => {
                "(published_at IS NULL AND dead_lettered_at IS NULL AND available_at > now() \
                 AND (locked_until IS NULL OR locked_until < now()))"
            }
            EventState::InFlight => {
                "(published_at IS NULL AND dead_lettered_at IS NULL AND locked_until >= now())"
            }
            EventState::Published => "(published_at IS NOT NULL)",
            EventState::Dead => "(dead_lettered_at IS NOT NULL AND published_at IS NULL)",
        }
        .into()
    }
}

impl TryFrom<String> for EventState {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        EventState::ALL
            .into_iter()
            .find(|st| st.as_str() == s)
            .ok_or_else(|| format!("unknown event state `{s}`"))
    }
}

impl std::fmt::Display for EventState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One outbox row, every column, with its state. Payload and headers are the stored JSON text
/// (read as `::text`, see [`crate::json`]), so no number in them is rounded or out of range; the
/// times may be `infinity` ([`Timestamp`]): no row's content fails to decode.
#[derive(Debug, Clone, sqlx::FromRow, Serialize, schemars::JsonSchema)]
pub struct EventRow {
    /// The event's id (the outbox row's `id`).
    pub id: i64,
    /// The event's state, computed from its columns and the database clock.
    #[sqlx(try_from = "String")]
    pub state: EventState,
    pub tenant_id: Uuid,
    pub event_type: String,
    pub aggregate_type: String,
    pub aggregate_id: String,
    /// The dedup id sinks and consumers see; unique in the outbox.
    pub idempotency_key: String,
    /// The payload as stored (any JSON value, digit for digit).
    pub payload: JsonText,
    /// The headers as stored (a JSON object).
    pub headers: JsonText,
    /// Publish attempts so far.
    pub attempt_count: i32,
    pub created_at: Timestamp,
    /// Due from this time on (later than `created_at` for a delayed event or a retry).
    pub available_at: Timestamp,
    /// The end of the lease of the relay that last claimed it.
    pub locked_until: Option<Timestamp>,
    /// The last claim's token.
    pub claim_token: Option<Uuid>,
    /// When the relay marked it published; null for an event the log published (log mode
    /// writes no row per event: see `published_by_log`).
    pub published_at: Option<Timestamp>,
    pub dead_lettered_at: Option<Timestamp>,
    /// The last publish error, whole.
    pub last_error: Option<String>,
    /// Published by the log (log mode): its position has passed the event, which is not in the
    /// retry set. Such an event has no `published_at`.
    #[sqlx(default)]
    pub published_by_log: bool,
}

/// The columns of [`EventRow`]. In log mode `available_at` is when the event is due
/// ([`super::log::DUE_AT`]: a retry-set entry's time is the one the reader goes by).
fn push_columns(qb: &mut QueryBuilder<'_, Postgres>, mode: Mode) {
    qb.push(
        "SELECT id, tenant_id, event_type, aggregate_type, aggregate_id, idempotency_key, \
         payload::text AS payload, headers::text AS headers, attempt_count, created_at, ",
    );
    match mode {
        Mode::Queue => qb.push("available_at, "),
        Mode::Log => qb
            .push(super::log::DUE_AT)
            .push(" AS available_at, (o.published_at IS NULL AND ")
            .push(LOG_STATE_SQL.as_str())
            .push(" = 'published') AS published_by_log, "),
    };
    qb.push("locked_until, claim_token, published_at, dead_lettered_at, last_error, ");
    qb.push(mode.state_sql());
    qb.push(" AS state FROM outbox o");
}

/// Which rows a read looks at, and by which time column `--since`/`--until` filter.
#[derive(Debug, Clone, Copy)]
pub enum Scope<'a> {
    /// Dead letters; time = dead_lettered_at; newest dead first.
    Dead,
    /// Rows in any of these states (all when empty); time = created_at; newest first.
    States(&'a [EventState]),
}

impl Scope<'_> {
    fn time_column(self) -> &'static str {
        match self {
            Scope::Dead => "dead_lettered_at",
            Scope::States(_) => "created_at",
        }
    }

    fn push_predicate(self, qb: &mut QueryBuilder<'_, Postgres>, mode: Mode) {
        match self {
            Scope::Dead => {
                qb.push(EventState::Dead.predicate(mode));
            }
            Scope::States([]) => {
                qb.push("TRUE");
            }
            Scope::States(states) => {
                qb.push("(");
                for (i, s) in states.iter().enumerate() {
                    if i > 0 {
                        qb.push(" OR ");
                    }
                    qb.push(s.predicate(mode));
                }
                qb.push(")");
            }
        }
    }

    fn order_by(self) -> &'static str {
        match self {
            Scope::Dead => " ORDER BY dead_lettered_at DESC, id DESC",
            Scope::States(_) => " ORDER BY id DESC",
        }
    }
}

fn push_time(qb: &mut QueryBuilder<'_, Postgres>, t: TimeArg) {
    match t {
        TimeArg::At(at) => {
            qb.push_bind(at);
        }
        TimeArg::Ago(d) => {
            qb.push("(now() - ")
                .push_bind(i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
                .push("::bigint * interval '1 microsecond')");
        }
    }
}

/// Appends ` AND ...` for every filter that is set, each value a bound parameter.
pub fn push_filter(qb: &mut QueryBuilder<'_, Postgres>, f: &EventFilter, time_column: &str) {
    if let Some(p) = &f.event_type_like {
        qb.push(" AND event_type LIKE ")
            .push_bind(p.clone())
            .push(" ESCAPE '\\'");
    }
    if let Some(t) = f.tenant {
        qb.push(" AND tenant_id = ").push_bind(t);
    }
    if let Some(a) = &f.aggregate_type {
        qb.push(" AND aggregate_type = ").push_bind(a.clone());
    }
    if let Some(a) = &f.aggregate_id {
        qb.push(" AND aggregate_id = ").push_bind(a.clone());
    }
    if let Some(t) = f.since {
        qb.push(" AND ").push(time_column).push(" >= ");
        push_time(qb, t);
    }
    if let Some(t) = f.until {
        qb.push(" AND ").push(time_column).push(" < ");
        push_time(qb, t);
    }
    if let Some(p) = &f.error_like {
        qb.push(" AND last_error ILIKE ")
            .push_bind(p.clone())
            .push(" ESCAPE '\\'");
    }
    if let Some(re) = &f.error_regex {
        qb.push(" AND last_error ~ ").push_bind(re.clone());
    }
}

/// `WHERE` and `ORDER BY` of a read: rows in `scope` (and among `ids`) matching `filter`, newest
/// first.
fn push_selection(
    qb: &mut QueryBuilder<'_, Postgres>,
    mode: Mode,
    scope: Scope<'_>,
    filter: &EventFilter,
    ids: Option<&[i64]>,
) {
    qb.push(" WHERE ");
    scope.push_predicate(qb, mode);
    if let Some(ids) = ids {
        qb.push(" AND id = ANY(").push_bind(ids.to_vec()).push(")");
    }
    push_filter(qb, filter, scope.time_column());
    qb.push(scope.order_by());
}

fn push_limit(qb: &mut QueryBuilder<'_, Postgres>, limit: Option<u64>) {
    qb.push(" LIMIT ")
        .push_bind(limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX)));
}

/// Rows in `scope` matching `filter`, newest first, at most `limit`.
pub async fn list(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    filter: &EventFilter,
    ids: Option<&[i64]>,
    limit: Option<u64>,
) -> sqlx::Result<Vec<EventRow>> {
    let mode = Mode::of(conn).await?;
    let mut qb = QueryBuilder::new("");
    push_columns(&mut qb, mode);
    push_selection(&mut qb, mode, scope, filter, ids);
    push_limit(&mut qb, limit);
    qb.build_query_as().fetch_all(conn).await
}

/// [`list`], one row at a time: `each` gets every row as PostgreSQL sends it, so memory does not
/// grow with `limit` (`events list`, `dead list`, `dead export`). Returns how many rows it saw.
pub async fn for_each<E: From<sqlx::Error>>(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    filter: &EventFilter,
    ids: Option<&[i64]>,
    limit: Option<u64>,
    mut each: impl FnMut(EventRow) -> Result<(), E>,
) -> Result<u64, E> {
    use futures::TryStreamExt;
    let mode = Mode::of(conn).await?;
    let mut qb = QueryBuilder::new("");
    push_columns(&mut qb, mode);
    push_selection(&mut qb, mode, scope, filter, ids);
    push_limit(&mut qb, limit);
    let mut rows = qb.build_query_as::<EventRow>().fetch(conn);
    let mut n = 0;
    while let Some(row) = rows.try_next().await? {
        each(row)?;
        n += 1;
    }
    Ok(n)
}

/// How many rows [`list`] would return with `limit`, without reading them (no payload is
/// detoasted), so a streamed list can print its count first. Run it and the list in one
/// [`begin_snapshot`] transaction for the two to agree.
pub async fn count(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    filter: &EventFilter,
    ids: Option<&[i64]>,
    limit: Option<u64>,
) -> sqlx::Result<u64> {
    let mode = Mode::of(conn).await?;
    let mut qb = QueryBuilder::new("SELECT count(*) FROM (SELECT 1 FROM outbox o");
    push_selection(&mut qb, mode, scope, filter, ids);
    push_limit(&mut qb, limit);
    qb.push(") matching");
    let n: i64 = qb.build_query_scalar().fetch_one(conn).await?;
    Ok(n as u64)
}

/// Starts a read-only REPEATABLE READ transaction: its statements all see one snapshot (and one
/// `now()`), so a count and the list it announces agree.
pub async fn begin_snapshot(
    conn: &mut PgConnection,
) -> sqlx::Result<sqlx::Transaction<'_, Postgres>> {
    use sqlx::Connection;
    let mut tx = conn.begin().await?;
    sqlx::query("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
        .execute(&mut *tx)
        .await?;
    Ok(tx)
}

/// Ids of dead letters matching the selection, newest dead first, at most `limit`.
pub async fn dead_ids(
    conn: &mut PgConnection,
    filter: &EventFilter,
    ids: Option<&[i64]>,
    limit: Option<u64>,
) -> sqlx::Result<Vec<i64>> {
    let mode = Mode::of(conn).await?;
    let mut qb = QueryBuilder::new("SELECT id FROM outbox o WHERE ");
    Scope::Dead.push_predicate(&mut qb, mode);
    if let Some(ids) = ids {
        qb.push(" AND id = ANY(").push_bind(ids.to_vec()).push(")");
    }
    push_filter(&mut qb, filter, Scope::Dead.time_column());
    qb.push(Scope::Dead.order_by());
    qb.push(" LIMIT ")
        .push_bind(limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX)));
    qb.build_query_scalar().fetch_all(conn).await
}

/// Ids of rows in `scope` matching `filter`, in the scope's order (newest first), at most `limit`:
/// what `events cancel` / `events reschedule` select by filters before acting in batches.
pub async fn matching_ids(
    conn: &mut PgConnection,
    scope: Scope<'_>,
    filter: &EventFilter,
    limit: Option<u64>,
) -> sqlx::Result<Vec<i64>> {
    let mode = Mode::of(conn).await?;
    let mut qb = QueryBuilder::new("SELECT id FROM outbox o WHERE ");
    scope.push_predicate(&mut qb, mode);
    push_filter(&mut qb, filter, scope.time_column());
    qb.push(scope.order_by());
    qb.push(" LIMIT ")
        .push_bind(limit.map(|l| i64::try_from(l).unwrap_or(i64::MAX)));
    qb.build_query_scalar().fetch_all(conn).await
}

/// One row by id.
pub async fn get(conn: &mut PgConnection, id: i64) -> sqlx::Result<Option<EventRow>> {
    let mode = Mode::of(conn).await?;
    let mut qb = QueryBuilder::new("");
    push_columns(&mut qb, mode);
    qb.push(" WHERE id = ").push_bind(id);
    qb.build_query_as().fetch_optional(conn).await
}

/// The current state of each of `ids` that exists (no locks taken).
pub async fn states(conn: &mut PgConnection, ids: &[i64]) -> sqlx::Result<Vec<(i64, EventState)>> {
    states_of(conn, ids, "").await
}

/// Locks those of `ids` that no one else has locked (FOR UPDATE SKIP LOCKED) and returns their
/// states. A row missing from the answer either does not exist or is locked by another
/// transaction, e.g. a relay in `tx` mode publishing it right now. Call inside a transaction.
pub async fn lock_states(
    conn: &mut PgConnection,
    ids: &[i64],
) -> sqlx::Result<Vec<(i64, EventState)>> {
    states_of(conn, ids, " FOR UPDATE SKIP LOCKED").await
}

/// [`states`] and [`lock_states`]: the state of each of `ids` that exists, in id order, with
/// `locking` (a locking clause, or nothing) after the query.
async fn states_of(
    conn: &mut PgConnection,
    ids: &[i64],
    locking: &str,
) -> sqlx::Result<Vec<(i64, EventState)>> {
    let state = Mode::of(conn).await?.state_sql();
    let rows: Vec<(i64, String)> = sqlx::query_as(&format!(
        "SELECT id, {state} FROM outbox o WHERE id = ANY($1) ORDER BY id{locking}"
    ))
    .bind(ids)
    .fetch_all(conn)
    .await?;
    rows.into_iter()
        .map(|(id, s)| {
            EventState::try_from(s)
                .map(|st| (id, st))
                .map_err(|e| sqlx::Error::Decode(e.into()))
        })
        .collect()
}

/// Deletes unpublished rows among `ids`; leased ones only with `force`; with `states`, only rows
/// whose state ([`STATE_SQL`]) is one of them. The state is re-checked in the statement (a row
/// selected by filters may have moved on since), which also writes one `outbox_audit` row per
/// deleted event (its values but payload and headers, and whether --force was given). Returns
/// the ids deleted.
pub async fn delete_unpublished(
    conn: &mut PgConnection,
    ids: &[i64],
    force: bool,
    states: Option<&[EventState]>,
    audit: &Audit,
) -> sqlx::Result<Vec<i64>> {
    let mode = Mode::of(conn).await?;
    let (state, not_published) = (mode.state_sql(), mode.not_published());
    sqlx::query_scalar(&format!(
        "WITH d AS (
             DELETE FROM outbox o
              WHERE id = ANY($1) AND published_at IS NULL{not_published}
                AND ($2 OR locked_until IS NULL OR locked_until < now())
                AND ($5::text[] IS NULL OR ({state}) = ANY($5))
             RETURNING id, {} AS previous
         )
         INSERT INTO outbox_audit (action, event_id, actor, reason, previous, details)
         SELECT 'cancel', id, $3, $4, previous, jsonb_build_object('force', $2) FROM d
         RETURNING event_id",
        deleted_row_json(state)
    ))
    .bind(ids)
    .bind(force)
    .bind(&audit.actor)
    .bind(audit.reason.as_deref())
    .bind(state_names(states))
    .fetch_all(conn)
    .await
}

/// `states` as the text[] the statements compare [`STATE_SQL`] with; NULL for no restriction.
fn state_names(states: Option<&[EventState]>) -> Option<Vec<&'static str>> {
    states.map(|s| s.iter().map(|s| s.as_str()).collect())
}

/// Moves available_at of pending, unleased rows among `ids` to `at`, or to now + `delay_micros`;
/// with `states`, only rows whose state ([`STATE_SQL`]) is one of them. The state is re-checked
/// in the statement, under the row lock, which also writes one `outbox_audit` row per moved
/// event (previous and new available_at). Returns each id moved and its new due time.
pub async fn reschedule(
    conn: &mut PgConnection,
    ids: &[i64],
    at: Option<DateTime<Utc>>,
    delay_micros: i64,
    states: Option<&[EventState]>,
    audit: &Audit,
) -> sqlx::Result<Vec<(i64, DateTime<Utc>)>> {
    let mode = Mode::of(conn).await?;
    let (state, not_published) = (mode.state_sql(), mode.not_published());
    sqlx::query_as(&format!(
        "WITH old AS (
             SELECT id, available_at
               FROM outbox o
              WHERE id = ANY($1) AND published_at IS NULL AND dead_lettered_at IS NULL
                AND (locked_until IS NULL OR locked_until < now()){not_published}
                AND ($6::text[] IS NULL OR ({state}) = ANY($6))
              ORDER BY id
                FOR UPDATE
         ), moved AS (
             UPDATE outbox o
                SET available_at = coalesce($2, now() + $3::bigint * interval '1 microsecond')
               FROM old
              WHERE o.id = old.id
          RETURNING o.id, o.available_at, old.available_at AS previous_available_at
         ), audited AS (
             INSERT INTO outbox_audit (action, event_id, actor, reason, previous, details)
             SELECT 'reschedule', id, $4, $5,
                    jsonb_build_object('available_at', previous_available_at),
                    jsonb_build_object('available_at', available_at)
               FROM moved
         )
         SELECT id, available_at FROM moved"
    ))
    .bind(ids)
    .bind(at)
    .bind(delay_micros)
    .bind(&audit.actor)
    .bind(audit.reason.as_deref())
    .bind(state_names(states))
    .fetch_all(conn)
    .await
}

/// What `events edit` changes. `None` / empty leaves a column as it is.
#[derive(Debug, Clone, Default)]
pub struct EditSpec {
    /// The new payload, as JSON text (validated by the caller; PostgreSQL parses it again).
    pub payload: Option<String>,
    /// Headers to set: a JSON object of strings, merged over the existing headers.
    pub set_headers: serde_json::Map<String, Value>,
    /// Header names to remove (before `set_headers` is merged).
    pub unset_headers: Vec<String>,
    pub event_type: Option<String>,
    /// Dead rows only: make them ready now (dead_lettered_at cleared, attempt_count 0).
    pub requeue: bool,
}

/// The new payload, headers and event type of row `o`, from `$2` payload (jsonb text or NULL),
/// `$3` headers to set (jsonb object), `$4` header names to unset (text[]), `$5` event type (or
/// NULL). Shared by [`preview_edit`] and [`edit`], so a dry run shows exactly what an edit writes.
const NEW_PAYLOAD: &str = "coalesce($2::jsonb, o.payload)";
const NEW_HEADERS: &str = "((o.headers - $4::text[]) || $3::jsonb)";
const NEW_EVENT_TYPE: &str = "coalesce($5::text, o.event_type)";

/// One row's values before and after an edit, the JSON as text (see [`crate::json`]).
#[derive(Debug, Clone, sqlx::FromRow, Serialize, schemars::JsonSchema)]
pub struct EditPreview {
    pub id: i64,
    #[sqlx(try_from = "String")]
    pub state: EventState,
    pub event_type: String,
    pub payload: JsonText,
    pub headers: JsonText,
    pub new_event_type: String,
    pub new_payload: JsonText,
    pub new_headers: JsonText,
}

/// Each of `ids` that exists, with its values now and as `spec` would make them (no lock, no
/// change): the expressions are those [`edit`] writes with, evaluated by the same server.
pub async fn preview_edit(
    conn: &mut PgConnection,
    ids: &[i64],
    spec: &EditSpec,
) -> sqlx::Result<Vec<EditPreview>> {
    let state = Mode::of(conn).await?.state_sql();
    sqlx::query_as(&format!(
        "SELECT o.id, {state} AS state, o.event_type, o.payload::text AS payload,
                o.headers::text AS headers, {NEW_EVENT_TYPE} AS new_event_type,
                ({NEW_PAYLOAD})::text AS new_payload, ({NEW_HEADERS})::text AS new_headers
           FROM outbox o WHERE o.id = ANY($1) ORDER BY o.id"
    ))
    .bind(ids)
    .bind(spec.payload.as_deref())
    .bind(Value::Object(spec.set_headers.clone()))
    .bind(&spec.unset_headers)
    .bind(spec.event_type.as_deref())
    .fetch_all(conn)
    .await
}

/// Edits those of `ids` that are still editable when the statement runs: unpublished, not leased
/// (a lease that expired counts as free), and dead when `spec.requeue`. The row lock (`FOR
/// UPDATE`, re-evaluating the predicate on the newest row version after any wait) and the state
/// check sit in the statement itself, so a relay's claim comes entirely before it (the row is then
/// leased or published, and left alone) or entirely after it (the claim reads the new values).
///
/// The lease columns are cleared too: a relay whose lease expired may still be publishing the old
/// values, and with claim_token gone its settle matches nothing, so the row is sent again with
/// the new ones instead of being marked published. With `requeue` a dead row also becomes ready
/// now with attempt_count 0. One `outbox_audit` row per event records the previous and new event
/// type, payload and headers (and, with requeue, the previous dead_lettered_at, attempt_count and
/// available_at), the actor and the reason. The idempotency key is never touched. Returns the ids
/// edited.
pub async fn edit(
    conn: &mut PgConnection,
    ids: &[i64],
    spec: &EditSpec,
    audit: &Audit,
) -> sqlx::Result<Vec<i64>> {
    let not_published = Mode::of(conn).await?.not_published();
    sqlx::query_scalar(&format!(
        "WITH old AS (
             SELECT id, event_type, payload, headers, dead_lettered_at, attempt_count, available_at
               FROM outbox o
              WHERE id = ANY($1) AND published_at IS NULL{not_published}
                AND (locked_until IS NULL OR locked_until < now())
                AND (NOT $6 OR dead_lettered_at IS NOT NULL)
              ORDER BY id
                FOR UPDATE
         ), edited AS (
             UPDATE outbox o
                SET payload          = {NEW_PAYLOAD},
                    headers          = {NEW_HEADERS},
                    event_type       = {NEW_EVENT_TYPE},
                    locked_until     = NULL,
                    claim_token      = NULL,
                    dead_lettered_at = CASE WHEN $6 THEN NULL ELSE o.dead_lettered_at END,
                    blocks_key       = CASE WHEN $6 THEN NULL ELSE o.blocks_key END,
                    attempt_count    = CASE WHEN $6 THEN 0 ELSE o.attempt_count END,
                    available_at     = CASE WHEN $6 THEN now() ELSE o.available_at END
               FROM old
              WHERE o.id = old.id
          RETURNING o.id, o.event_type, o.payload, o.headers, o.available_at,
                    old.event_type AS old_event_type, old.payload AS old_payload,
                    old.headers AS old_headers, old.dead_lettered_at AS old_dead_lettered_at,
                    old.attempt_count AS old_attempt_count, old.available_at AS old_available_at
         ), audited AS (
             INSERT INTO outbox_audit (action, event_id, actor, reason, previous, details)
             SELECT 'edit', id, $7, $8,
                    jsonb_build_object('event_type', old_event_type, 'payload', old_payload,
                                       'headers', old_headers)
                    || CASE WHEN $6 THEN jsonb_build_object(
                                  'dead_lettered_at', old_dead_lettered_at,
                                  'attempt_count', old_attempt_count,
                                  'available_at', old_available_at)
                            ELSE '{{}}'::jsonb END,
                    jsonb_build_object('event_type', event_type, 'payload', payload,
                                       'headers', headers, 'requeued', $6)
                    || CASE WHEN $6 THEN jsonb_build_object('available_at', available_at)
                            ELSE '{{}}'::jsonb END
               FROM edited
         )
         SELECT id FROM edited"
    ))
    .bind(ids)
    .bind(spec.payload.as_deref())
    .bind(Value::Object(spec.set_headers.clone()))
    .bind(&spec.unset_headers)
    .bind(spec.event_type.as_deref())
    .bind(spec.requeue)
    .bind(&audit.actor)
    .bind(audit.reason.as_deref())
    .fetch_all(conn)
    .await
}

/// Checks that PostgreSQL accepts `re` as a regular expression; returns its complaint if not.
pub async fn check_regex(conn: &mut PgConnection, re: &str) -> sqlx::Result<Option<String>> {
    match sqlx::query("SELECT '' ~ $1").bind(re).execute(conn).await {
        Ok(_) => Ok(None),
        // 2201B: invalid_regular_expression
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("2201B") => {
            Ok(Some(e.message().to_owned()))
        }
        Err(e) => Err(e),
    }
}

/// Whether `table` exists in the schema (tables added by a later migration may be missing).
pub async fn table_exists(conn: &mut PgConnection, table: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(table)
        .fetch_one(conn)
        .await
}
