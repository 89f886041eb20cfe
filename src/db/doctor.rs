//! What `outboxctl doctor` reads: the catalog (indexes, the trigger, table options), the statistics
//! views (dead tuples, vacuum and analyze times), the sessions, prepared transactions and
//! replication slots that hold back vacuum, and a few bounded index reads of the outbox. Every
//! statement only reads, and none scans published history: the outbox reads use the partial
//! indexes (`outbox_ready_idx`, `outbox_dead_idx`) or one end of `outbox_published_at_idx`.
//!
//! Tables are found through the session's `search_path`, which `DbConfig` sets to the schema alone.

use chrono::{DateTime, Utc};
use sqlx::PgConnection;

/// Whether the schema has an outbox table at all.
pub async fn outbox_exists(conn: &mut PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT to_regclass('outbox') IS NOT NULL")
        .fetch_one(conn)
        .await
}

/// Whether a table exists in the schema (the audit table arrives with migration 4).
pub async fn table_exists(conn: &mut PgConnection, table: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT to_regclass($1) IS NOT NULL")
        .bind(table)
        .fetch_one(conn)
        .await
}

/// One index of outboxctl's tables.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct IndexRow {
    pub name: String,
    pub table_name: String,
    /// `pg_index.indisvalid`: false after a failed `CREATE INDEX CONCURRENTLY` (or a
    /// `REINDEX CONCURRENTLY` that was interrupted): the planner never uses it, writes still pay
    /// for it.
    pub valid: bool,
    /// `pg_index.indisready`: false while the index cannot take inserts yet.
    pub ready: bool,
    pub size_bytes: i64,
    /// `pg_class.reltuples` of the index: entries at the last VACUUM/ANALYZE, -1 if never.
    pub entries: f64,
    pub definition: String,
}

/// Every index on outboxctl's tables in the schema, with validity and size. From the catalog
/// alone (`pg_index`, `pg_class`); sizes come from the file size, not from a scan.
pub async fn indexes(conn: &mut PgConnection) -> sqlx::Result<Vec<IndexRow>> {
    sqlx::query_as(
        "SELECT c.relname::text AS name, t.relname::text AS table_name,
                i.indisvalid AS valid, i.indisready AS ready,
                pg_relation_size(c.oid) AS size_bytes, c.reltuples::float8 AS entries,
                pg_get_indexdef(c.oid) AS definition
           FROM pg_index i
           JOIN pg_class c ON c.oid = i.indexrelid
           JOIN pg_class t ON t.oid = i.indrelid
          WHERE t.relnamespace = current_schema()::regnamespace
            AND t.relname IN ('outbox', 'processed_messages', 'outbox_audit', 'outbox_locks')
          ORDER BY t.relname, c.relname",
    )
    .fetch_all(conn)
    .await
}

/// The NOTIFY trigger as the catalog has it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TriggerRow {
    /// `pg_trigger.tgenabled`: `O` fires normally, `D` disabled, `R` only in replica sessions,
    /// `A` always.
    pub enabled: String,
    pub function: String,
}

/// The insert trigger that wakes relays (`outbox_notify_insert`), if present.
pub async fn notify_trigger(conn: &mut PgConnection) -> sqlx::Result<Option<TriggerRow>> {
    sqlx::query_as(
        "SELECT t.tgenabled::text AS enabled, p.proname::text AS function
           FROM pg_trigger t JOIN pg_proc p ON p.oid = t.tgfoid
          WHERE t.tgrelid = 'outbox'::regclass AND t.tgname = 'outbox_notify_insert'
            AND NOT t.tgisinternal",
    )
    .fetch_optional(conn)
    .await
}

/// The outbox table's health as PostgreSQL's statistics and catalog see it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TableRow {
    pub live_tuples: i64,
    pub dead_tuples: i64,
    pub modified_since_analyze: i64,
    pub last_vacuum: Option<DateTime<Utc>>,
    pub last_autovacuum: Option<DateTime<Utc>>,
    pub last_analyze: Option<DateTime<Utc>>,
    pub last_autoanalyze: Option<DateTime<Utc>>,
    /// `pg_class.reltuples`: -1 before the first VACUUM or ANALYZE.
    pub reltuples: f64,
    pub size_bytes: i64,
    /// Heap, indexes and TOAST.
    pub total_bytes: i64,
    /// The table's storage options (`autovacuum_enabled=false`, `fillfactor=70`, ...).
    pub reloptions: Vec<String>,
    /// Sum of `pg_stats.avg_width` over the columns: the average row's data bytes, known after
    /// an ANALYZE.
    pub avg_row_width: Option<i64>,
}

/// Dead tuples, vacuum and analyze times (`pg_stat_user_tables`, which the statistics system
/// updates asynchronously, within a second or so of a change), sizes and options (`pg_class`),
/// and the average row width (`pg_stats`).
pub async fn table(conn: &mut PgConnection) -> sqlx::Result<TableRow> {
    sqlx::query_as(
        "SELECT coalesce(s.n_live_tup, 0) AS live_tuples,
                coalesce(s.n_dead_tup, 0) AS dead_tuples,
                coalesce(s.n_mod_since_analyze, 0) AS modified_since_analyze,
                s.last_vacuum, s.last_autovacuum, s.last_analyze, s.last_autoanalyze,
                c.reltuples::float8 AS reltuples,
                pg_relation_size(c.oid) AS size_bytes,
                pg_total_relation_size(c.oid) AS total_bytes,
                coalesce(c.reloptions, '{}') AS reloptions,
                (SELECT sum(avg_width)::bigint FROM pg_stats
                  WHERE schemaname = current_schema() AND tablename = 'outbox') AS avg_row_width
           FROM pg_class c
           LEFT JOIN pg_stat_user_tables s ON s.relid = c.oid
          WHERE c.oid = 'outbox'::regclass",
    )
    .fetch_one(conn)
    .await
}

/// The server-wide settings that decide whether autovacuum runs at all, and when.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct AutovacuumSettings {
    pub autovacuum: String,
    pub track_counts: String,
    pub vacuum_scale_factor: String,
    pub vacuum_threshold: String,
    pub analyze_scale_factor: String,
}

/// `autovacuum`, `track_counts` (autovacuum needs both) and the default trigger points.
pub async fn autovacuum_settings(conn: &mut PgConnection) -> sqlx::Result<AutovacuumSettings> {
    sqlx::query_as(
        "SELECT current_setting('autovacuum') AS autovacuum,
                current_setting('track_counts') AS track_counts,
                current_setting('autovacuum_vacuum_scale_factor') AS vacuum_scale_factor,
                current_setting('autovacuum_vacuum_threshold') AS vacuum_threshold,
                current_setting('autovacuum_analyze_scale_factor') AS analyze_scale_factor",
    )
    .fetch_one(conn)
    .await
}

/// Something that holds back the xmin horizon: vacuum cannot remove a row version deleted after
/// its snapshot or transaction began.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize, schemars::JsonSchema)]
pub struct HorizonHolder {
    /// `transaction`, `prepared transaction` or `replication slot`.
    pub kind: String,
    /// The backend (for a slot: the walsender using it, if any).
    pub pid: Option<i32>,
    /// The session's application_name; a prepared transaction's gid; a slot's name.
    pub name: String,
    /// A session's state (`idle in transaction`, `active`), a slot's `active`/`inactive`.
    pub state: Option<String>,
    /// The database role (for a slot: its type).
    pub role: Option<String>,
    /// Seconds since the transaction began or was prepared (none for a slot).
    pub age_seconds: Option<f64>,
    /// Transactions since its xmin: how far the horizon is held back.
    pub xid_age: Option<i64>,
}

/// Whether this session's role sees every session in `pg_stat_activity` in full: a superuser or
/// a member of `pg_read_all_stats` (or `pg_monitor`, which includes it). Others see another
/// role's sessions without their state, query, or start times.
pub async fn sees_all_sessions(conn: &mut PgConnection) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT rolsuper OR pg_has_role(current_user, 'pg_read_all_stats', 'MEMBER')
           FROM pg_roles WHERE rolname = current_user",
    )
    .fetch_one(conn)
    .await
}

/// The sessions of this database with a snapshot or transaction id (`backend_xmin`,
/// `backend_xid`), prepared transactions of this database, and replication slots with an xmin
/// (any database: a slot holds back every database's catalog, a physical slot with
/// hot_standby_feedback every table), oldest first. This session itself is left out. Query texts
/// are never read: they may hold payloads.
pub async fn horizon_holders(conn: &mut PgConnection) -> sqlx::Result<Vec<HorizonHolder>> {
    sqlx::query_as(
        "SELECT 'transaction' AS kind, pid, application_name AS name, state, usename::text AS role,
                extract(epoch FROM now() - coalesce(xact_start, backend_start))::float8 AS age_seconds,
                greatest(age(backend_xid), age(backend_xmin))::bigint AS xid_age
           FROM pg_stat_activity
          WHERE datname = current_database() AND pid <> pg_backend_pid()
            AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL)
         UNION ALL
         SELECT 'prepared transaction', NULL, gid, NULL, owner::text,
                extract(epoch FROM now() - prepared)::float8, age(transaction)::bigint
           FROM pg_prepared_xacts
          WHERE database = current_database()
         UNION ALL
         SELECT 'replication slot', active_pid, slot_name::text,
                CASE WHEN active THEN 'active' ELSE 'inactive' END, slot_type, NULL,
                greatest(age(xmin), age(catalog_xmin))::bigint
           FROM pg_replication_slots
          WHERE xmin IS NOT NULL OR catalog_xmin IS NOT NULL
          ORDER BY age_seconds DESC NULLS LAST, xid_age DESC NULLS LAST",
    )
    .fetch_all(conn)
    .await
}

/// A relay daemon's session, as seen from `pg_stat_activity`.
#[derive(Debug, Clone, sqlx::FromRow, serde::Serialize, schemars::JsonSchema)]
pub struct RelaySession {
    pub pid: i32,
    pub application_name: String,
    pub client_addr: Option<String>,
    pub backend_start: Option<DateTime<Utc>>,
    /// When the session last changed state (its last statement or wake-up).
    pub state_change: Option<DateTime<Utc>>,
}

/// Sessions that LISTEN on the schema's channel: a relay daemon keeps one such connection open
/// for its whole life, and its last statement stays `LISTEN "outboxctl:<schema>"` (relays set
/// application_name `outboxctl` like every command, so the channel is what tells a relay of this
/// schema apart). Compared by the exact statement text the relay sends, never shown.
pub async fn relay_sessions(
    conn: &mut PgConnection,
    channel: &str,
) -> sqlx::Result<Vec<RelaySession>> {
    sqlx::query_as(
        "SELECT pid, application_name, client_addr::text AS client_addr, backend_start, state_change
           FROM pg_stat_activity
          WHERE datname = current_database() AND query = 'LISTEN \"' || $1 || '\"'
          ORDER BY backend_start",
    )
    .bind(channel)
    .fetch_all(conn)
    .await
}

/// The newest and the oldest publish, from the two ends of `outbox_published_at_idx`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PublishedEnds {
    pub newest: Option<DateTime<Utc>>,
    pub oldest: Option<DateTime<Utc>>,
}

/// Two index-end reads: max and min of `published_at` (each one descent of the partial index).
pub async fn published_ends(conn: &mut PgConnection) -> sqlx::Result<PublishedEnds> {
    sqlx::query_as(
        "SELECT (SELECT max(published_at) FROM outbox WHERE published_at IS NOT NULL) AS newest,
                (SELECT min(published_at) FROM outbox WHERE published_at IS NOT NULL) AS oldest",
    )
    .fetch_one(conn)
    .await
}

/// When `prune` last deleted something, from its audit rows (migration 4). The audit table has no
/// index on `action`; it holds one row per hand change and per prune run, so it stays small next
/// to the outbox.
pub async fn last_prune(conn: &mut PgConnection) -> sqlx::Result<Option<DateTime<Utc>>> {
    sqlx::query_scalar("SELECT max(at) FROM outbox_audit WHERE action = 'prune'")
        .fetch_one(conn)
        .await
}

/// Dead letters: how many, and when the oldest and newest died (`outbox_dead_idx`).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeadRow {
    pub count: i64,
    pub oldest: Option<DateTime<Utc>>,
    pub newest: Option<DateTime<Utc>>,
}

pub async fn dead_letters(conn: &mut PgConnection) -> sqlx::Result<DeadRow> {
    sqlx::query_as(
        "SELECT count(*) AS count, min(dead_lettered_at) AS oldest, max(dead_lettered_at) AS newest
           FROM outbox WHERE dead_lettered_at IS NOT NULL",
    )
    .fetch_one(conn)
    .await
}

/// Pending work that is not moving: rows that failed and wait for a retry, and rows whose lease
/// runs unusually far into the future (nobody else may claim them until it ends).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct BlockedRow {
    pub retrying: i64,
    pub max_attempts: i32,
    pub long_leased: i64,
    pub longest_lease_end: Option<DateTime<Utc>>,
}

/// Over the pending rows only (`outbox_ready_idx`'s predicate). A lease counts as long when it
/// ends more than `lease_limit_seconds` from now.
pub async fn blocked(
    conn: &mut PgConnection,
    lease_limit_seconds: f64,
) -> sqlx::Result<BlockedRow> {
    sqlx::query_as(
        "SELECT count(*) FILTER (WHERE attempt_count > 0
                                   AND (locked_until IS NULL OR locked_until < now())) AS retrying,
                coalesce(max(attempt_count), 0) AS max_attempts,
                count(*) FILTER (WHERE locked_until > now() + make_interval(secs => $1)) AS long_leased,
                max(locked_until) FILTER (WHERE locked_until > now() + make_interval(secs => $1))
                  AS longest_lease_end
           FROM outbox WHERE published_at IS NULL AND dead_lettered_at IS NULL",
    )
    .bind(lease_limit_seconds)
    .fetch_one(conn)
    .await
}
