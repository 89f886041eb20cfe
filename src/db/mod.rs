//! All SQL lives under this module: one function per statement, typed inputs and outputs.
//! Time always comes from the database clock (`now()`), never from the client.
//!
//! Every connection's `search_path` is the configured schema (set at connect time from the
//! validated [`Schema`](crate::config::Schema)), so statements name tables unqualified. Behind a
//! session-pooling proxy it is set with `SET` on each connection, behind a transaction-pooling
//! one with `SET LOCAL` in each transaction, and there every statement runs in a transaction of
//! its own ([`Pin`]).

/// When a pending row became late, as an SQL expression over `outbox`'s columns: the moment its
/// lag counts from (`stats --warn-lag/--crit-lag`, the `oldest_pending_lag_seconds` gauges,
/// doctor's `oldest_pending`), or NULL for a row that is not late at all. A macro, so that the
/// statements that use it stay `concat!`-ed constants.
///
/// - Never tried and due: from when it fell due, `available_at` (not before `created_at`: a row
///   inserted with a past `available_at` was not late before it existed).
/// - Tried before (waiting for a retry's backoff, due again, or being retried now): from when it
///   first fell due. No column records that, since a failure moves `available_at` to the end of
///   its backoff, so `created_at` stands for it: exact for an event inserted due (the default),
///   early by the delay for one published with `--delay` or `--at` (such an event, once it has
///   failed, counts its delay as lag too).
/// - Scheduled for later and never tried: NULL, not late.
///
/// A leased row's `attempt_count` already counts the attempt in flight (the claim adds it), so
/// "tried before" is `attempt_count > 1` for it and `> 0` for the others. Costs nothing to read:
/// every column is in the row the pending figures already visit.
macro_rules! late_since {
    () => {
        "CASE WHEN attempt_count > (CASE WHEN locked_until >= now() THEN 1 ELSE 0 END)
                   THEN created_at
              WHEN available_at <= now() THEN greatest(created_at, available_at) END"
    };
}

pub mod audit;
pub mod dead;
pub mod doctor;
mod error;
pub mod events;
pub mod floor;
pub mod grants;
pub mod log;
pub mod metrics;
pub mod migrate;
pub mod ordering;
pub mod prune;
pub mod publish;
pub mod relay;
pub mod replay;
pub mod session;
pub mod stats;
pub mod timestamp;
pub mod top;

pub use error::Error;
pub use session::{pool_for_relay, relay_pin, Session};

use std::sync::Arc;

use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Postgres, Transaction};

use crate::config::{DbConfig, Pooler};

/// How a command's statements reach PostgreSQL through a transaction-pooling proxy (`--pooler
/// transaction`); a no-op otherwise.
///
/// Such a proxy (PgBouncer `pool_mode = transaction`) lends a server connection for one
/// transaction and hands it to another client as soon as the server reports itself idle. sqlx
/// sends every statement with parameters as Parse + Describe + Sync, then Bind + Execute + Sync:
/// outside a transaction the proxy may run the two halves on different server connections, and
/// the named statements sqlx prepares (`sqlx_s_1`, ...) stay on a server connection that the
/// next client finds them on (`prepared statement "sqlx_s_1" already exists`). Session state
/// (`SET`, the search path) would leak to other clients the same way.
///
/// So under transaction pooling every statement runs inside a transaction ([`Pin::run`],
/// [`Pin::begin`]), which keeps one server connection for all its messages, opened by one
/// simple-query message: `BEGIN; DEALLOCATE ALL; SET LOCAL ...`. `DEALLOCATE ALL` removes what
/// an earlier client left on that server connection, so the statements sqlx names afresh for
/// this transaction cannot collide; the connection options keep sqlx from caching statements
/// across transactions (`statement_cache_capacity(0)`), which would name a statement that only
/// another server connection holds; `SET LOCAL` puts the schema and the command's settings on
/// this transaction only.
#[derive(Debug, Clone, Default)]
pub struct Pin {
    /// The opening message under transaction pooling; `None`: statements run as they are.
    begin: Option<Arc<str>>,
}

impl Pin {
    /// The pin for `cfg`'s pooler, with `settings` (name, value) set for each transaction on top
    /// of the search path.
    pub fn new(cfg: &DbConfig, settings: &[(&str, String)]) -> Self {
        if cfg.pooler != Pooler::Transaction {
            return Self::default();
        }
        let mut sql = format!(
            "BEGIN; DEALLOCATE ALL; SET LOCAL search_path TO {}; SET LOCAL extra_float_digits = 3",
            cfg.schema.quoted()
        );
        for (name, value) in settings {
            sql.push_str(&format!("; SET LOCAL {name} = {value}"));
        }
        Self {
            begin: Some(sql.into()),
        }
    }

    /// Whether statements are pinned (transaction pooling).
    pub fn is_pinned(&self) -> bool {
        self.begin.is_some()
    }

    /// A transaction on `conn`, opened with the pin's settings under transaction pooling (a
    /// savepoint when one is already open, as `Connection::begin`).
    pub async fn begin<'c>(
        &self,
        conn: &'c mut PgConnection,
    ) -> sqlx::Result<Transaction<'c, Postgres>> {
        match &self.begin {
            Some(sql) if !conn.is_in_transaction() => conn.begin_with(sql.to_string()).await,
            _ => conn.begin().await,
        }
    }

    /// Runs `f` on `conn`: as it is, or under transaction pooling in a transaction of its own
    /// (committed when `f` succeeds, rolled back when it fails) unless one is already open.
    pub async fn run<T, E: From<sqlx::Error>>(
        &self,
        conn: &mut PgConnection,
        f: impl AsyncFnOnce(&mut PgConnection) -> Result<T, E>,
    ) -> Result<T, E> {
        let Some(sql) = self.begin.as_deref().filter(|_| !conn.is_in_transaction()) else {
            return f(conn).await;
        };
        let mut tx = conn.begin_with(sql.to_owned()).await?;
        match f(&mut tx).await {
            Ok(v) => {
                tx.commit().await?;
                Ok(v)
            }
            Err(e) => {
                // A broken connection cannot roll back; the server does when it goes.
                let _ = tx.rollback().await;
                Err(e)
            }
        }
    }
}

/// An error from the database, classified for the relay: transient ones are retried.
pub fn is_transient(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Tls(_) | sqlx::Error::WorkerCrashed => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            // 08: connection exception; 40: rollback (serialization, deadlock); 53: resources;
            // 57P01-57P03: admin shutdown / crash shutdown / cannot connect now.
            code.starts_with("08")
                || code.starts_with("40")
                || code.starts_with("53")
                || code.starts_with("57P")
                || code == READ_ONLY
        }
        _ => false,
    }
}

/// PostgreSQL's `read_only_sql_transaction`: a write refused by a read-only session.
const READ_ONLY: &str = "25006";

/// Whether `err` is a write refused because the session is read-only: a hot standby (in
/// recovery), or `default_transaction_read_only`. Transient for the relay ([`is_transient`]):
/// after a failover the same address may lead to the new primary, so a relay waits as for a lost
/// connection (its claim failed, so no attempt was counted and no event failed).
pub fn is_read_only(err: &sqlx::Error) -> bool {
    matches!(err, sqlx::Error::Database(db) if db.code().as_deref() == Some(READ_ONLY))
}

/// What a command that writes says on a read-only database ([`Error::ReadOnly`]).
pub const READ_ONLY_HINT: &str = "the database is read-only (a hot standby in recovery, or default_transaction_read_only is on): this command writes; point it at the primary";

/// `err` replaced by [`Error::ReadOnly`] when its cause is [`is_read_only`]: the refused
/// write is the first of its transaction's, so nothing was changed; else unchanged.
pub fn explain_read_only(err: anyhow::Error) -> anyhow::Error {
    let read_only = err
        .chain()
        .filter_map(|e| e.downcast_ref::<sqlx::Error>())
        .any(is_read_only);
    if read_only {
        Error::ReadOnly.into()
    } else {
        err
    }
}

/// What to do when [`is_transaction_pooler_symptom`]: the one-line error outboxctl shows.
pub const TRANSACTION_POOLER_HINT: &str = "a statement outboxctl prepared was missing on the server connection or already there: a connection pooler in transaction mode (e.g. PgBouncer pool_mode = transaction) lends server connections per transaction; use --pooler transaction (OUTBOXCTL_POOLER=transaction), or session pooling, or connect to PostgreSQL directly";

/// Whether `err` is what a transaction-pooling proxy does to sqlx's named statements when
/// outboxctl does not know it is there (no `--pooler transaction`): the next transaction runs on
/// another server connection, where `sqlx_s_N` is unknown (26000) or left by another client
/// (42P05). PostgreSQL itself never says this to outboxctl, whose statement names are its own.
pub fn is_transaction_pooler_symptom(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Database(db) => {
            matches!(db.code().as_deref(), Some("42P05" | "26000"))
                && db.message().contains("\"sqlx_s_")
        }
        _ => false,
    }
}

/// `err` replaced by [`Error::TransactionPooler`] when its cause is
/// [`is_transaction_pooler_symptom`]; else unchanged.
pub fn explain_pooler(err: anyhow::Error) -> anyhow::Error {
    let symptom = err
        .chain()
        .filter_map(|e| e.downcast_ref::<sqlx::Error>())
        .find(|e| is_transaction_pooler_symptom(e))
        .map(|e| e.to_string());
    match symptom {
        Some(server) => Error::TransactionPooler { server }.into(),
        None => err,
    }
}

/// `err` with the role it happened to, the privilege it lacks and the command that prints what
/// to grant, when its cause is PostgreSQL's `insufficient_privilege` (42501, "permission denied
/// for table ..."): [`Error::PrivilegeMissing`]; else unchanged. `grants_for` is the use of
/// the command that failed. PostgreSQL names only the table, so the privileges that use needs
/// ([`grants::privileges`]) are asked of the server (`has_table_privilege` and the like) on a new
/// connection: only on this error, never on a command's way. The database error is looked for
/// under every wrapper (a relay step's error forwards its source).
pub async fn explain_privilege(err: anyhow::Error, grants_for: grants::Use) -> anyhow::Error {
    let denied = err.chain().any(|e| {
        e.downcast_ref::<sqlx::Error>().is_some_and(
            |e| matches!(e, sqlx::Error::Database(db) if db.code().as_deref() == Some("42501")),
        ) || e
            .downcast_ref::<sqlx::postgres::PgDatabaseError>()
            .is_some_and(|db| db.code() == "42501")
    });
    let Some(cfg) = CONNECTED.get().filter(|_| denied) else {
        return err;
    };
    let role = cfg.options.get_username();
    // "permission denied for table outbox_locks": what the refused statement touched; of what the
    // role lacks, that object's privilege is named first.
    let text = crate::output::error_message(&err);
    let named = text
        .split("permission denied for ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().nth(1))
        .map(|name| format!(".{}", name.trim_end_matches([')', ',', ':'])));
    let lacks = match PgConnection::connect_with(&cfg.options).await {
        Ok(mut conn) => grants::missing(&mut conn, &cfg.schema, grants_for)
            .await
            .ok()
            .and_then(|m| {
                let on_named = m
                    .iter()
                    .position(|(_, object)| named.as_deref().is_some_and(|n| object.ends_with(n)));
                m.into_iter().nth(on_named.unwrap_or(0))
            }),
        Err(_) => None,
    };
    Error::PrivilegeMissing {
        cause: text,
        role: role.to_owned(),
        lacks,
        grants_for: grants_for.name(),
        schema: cfg.schema.name().to_owned(),
    }
    .into()
}

/// Whether `err` means the connection itself is gone (server restart, `pg_terminate_backend`, a
/// network cut), as opposed to a statement failing on a healthy session. Such a connection must
/// not go back to the pool: see [`session::discard_if_broken`].
pub fn is_connection_lost(err: &sqlx::Error) -> bool {
    match err {
        sqlx::Error::Io(_) | sqlx::Error::Protocol(_) | sqlx::Error::Tls(_) => true,
        sqlx::Error::Database(db) => {
            let code = db.code().unwrap_or_default();
            // 08: connection exception; 57P01-57P03: the server ended or refused the session.
            code.starts_with("08") || code.starts_with("57P")
        }
        _ => false,
    }
}

/// The session could not be made or set up ([`Error::Unreachable`]).
fn connect_error(cfg: &DbConfig, err: impl std::fmt::Display) -> Error {
    Error::Unreachable {
        at: cfg.display.clone(),
        reason: err.to_string(),
    }
}

/// The connection attempt failed: refused by PostgreSQL itself ([`Error::LoginRejected`]), or
/// it never got that far.
fn connect_failed(cfg: &DbConfig, err: sqlx::Error) -> Error {
    match err {
        sqlx::Error::Database(_) => Error::LoginRejected {
            at: cfg.display.clone(),
            reason: err.to_string(),
        },
        _ => connect_error(cfg, err),
    }
}

/// The oldest PostgreSQL major version outboxctl runs on: the relay's claims size rows with
/// `pg_column_compression` (PostgreSQL 14), so below it `migrate` would succeed and every relay
/// then fail. Every command refuses such a server at connect instead. The supported range,
/// [`MIN_SERVER_MAJOR`] to 18, is what CI's version smoke runs against
/// (tests/it/database/versions.rs).
pub const MIN_SERVER_MAJOR: u32 = 14;

/// A `server_version_num` as people write it: `13.23` (from 10 on), `9.6.24` before.
pub fn version_text(num: u32) -> String {
    if num >= 100_000 {
        format!("{}.{}", num / 10_000, num % 10_000)
    } else {
        format!("{}.{}.{}", num / 10_000, num / 100 % 100, num % 100)
    }
}

/// Refuses a server older than [`MIN_SERVER_MAJOR`] ([`Error::ServerTooOld`], one line naming
/// both versions).
/// The version comes with the login (`server_version`); a pooler that does not pass it on is
/// asked once.
async fn check_server_version(conn: &mut PgConnection, cfg: &DbConfig) -> Result<(), Error> {
    let num = match conn.server_version_num() {
        Some(n) => n,
        None => sqlx::query_scalar::<_, i32>("SELECT current_setting('server_version_num')::int")
            .fetch_one(&mut *conn)
            .await
            .map_err(|e| connect_error(cfg, e))?
            .max(0) as u32,
    };
    if num / 10_000 < MIN_SERVER_MAJOR {
        return Err(Error::ServerTooOld {
            version: version_text(num),
            at: cfg.display.clone(),
        });
    }
    Ok(())
}

/// The session's search path as the server applied it: the schema arrives as the `options`
/// startup parameter, which a connection pooler may drop (PgBouncer passes it on only when told
/// to ignore it, and then does not pass it on), leaving the server's default.
const SHOW_SEARCH_PATH: &str = "SELECT current_setting('search_path')";

/// The first schema of a `search_path` value (names are lowercase, digits and `_`, see
/// [`crate::config::Schema`], so a plain split suffices).
fn first_schema(search_path: &str) -> String {
    let first = search_path.split(',').next().unwrap_or("").trim();
    match first.strip_prefix('"').and_then(|s| s.strip_suffix('"')) {
        Some(quoted) => quoted.replace("\"\"", "\""),
        None => first.to_lowercase(),
    }
}

/// Fails when the session's search path does not start with the configured schema: every
/// statement names tables unqualified, so such a session would read and change the outbox of
/// another schema (`public`, behind a pooler that dropped the schema).
async fn check_search_path(conn: &mut PgConnection, cfg: &DbConfig) -> Result<(), Error> {
    let path: String = sqlx::query_scalar(SHOW_SEARCH_PATH)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| connect_error(cfg, e))?;
    let schema = cfg.schema.name();
    if first_schema(&path) == schema {
        return Ok(());
    }
    Err(Error::SearchPathDropped {
        at: cfg.display.clone(),
        search_path: path,
        schema: schema.to_owned(),
    })
}

/// The statement that gives a session the configured schema behind a session-pooling proxy
/// (which refuses or drops the `options` startup parameter that carries it otherwise): `SET`
/// lasts as long as the client connection, and the proxy's `DISCARD ALL` undoes it when the
/// client goes.
fn set_search_path_sql(cfg: &DbConfig) -> String {
    format!(
        "SET search_path TO {}; SET extra_float_digits = 3",
        cfg.schema.quoted()
    )
}

/// Gives a new connection its session settings for `cfg.pooler` (see [`set_search_path_sql`]).
async fn init_session(conn: &mut PgConnection, cfg: &DbConfig) -> sqlx::Result<()> {
    if cfg.pooler == Pooler::Session {
        sqlx::raw_sql(&set_search_path_sql(cfg))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// One connection, with the configured timeout, whose search path is the configured schema
/// (under transaction pooling: whose transactions opened by [`Pin`] get that search path).
/// The settings of this process's first connection (its role, its schema), for
/// [`explain_privilege`].
static CONNECTED: std::sync::OnceLock<DbConfig> = std::sync::OnceLock::new();

pub async fn connect(cfg: &DbConfig) -> Result<PgConnection, Error> {
    match tokio::time::timeout(
        cfg.connect_timeout,
        PgConnection::connect_with(&cfg.options),
    )
    .await
    {
        Ok(Ok(mut conn)) => {
            check_server_version(&mut conn, cfg).await?;
            init_session(&mut conn, cfg)
                .await
                .map_err(|e| connect_error(cfg, e))?;
            let pin = Pin::new(cfg, &[]);
            match &pin.begin {
                None => check_search_path(&mut conn, cfg).await?,
                Some(sql) => {
                    let mut tx = conn
                        .begin_with(sql.to_string())
                        .await
                        .map_err(|e| connect_error(cfg, e))?;
                    check_search_path(&mut tx, cfg).await?;
                    tx.commit().await.map_err(|e| connect_error(cfg, e))?;
                }
            }
            if CONNECTED.set(cfg.clone()).is_ok() {
                tracing::info!(
                    "connected to {} (schema `{}`; settings from {})",
                    cfg.display,
                    cfg.schema.name(),
                    cfg.source
                );
            }
            Ok(conn)
        }
        Ok(Err(e)) => Err(connect_failed(cfg, e)),
        Err(_) => Err(connect_error(
            cfg,
            format!(
                "timed out after {}",
                humantime::format_duration(cfg.connect_timeout)
            ),
        )),
    }
}

/// A pool of up to `max` connections. One connection is made first so that a wrong URL or an
/// unreachable server fails here with the real reason.
pub async fn pool(cfg: &DbConfig, max: u32) -> Result<PgPool, Error> {
    let first = connect(cfg).await?;
    drop(first);
    let session = cfg.pooler == Pooler::Session;
    let set = set_search_path_sql(cfg);
    Ok(PgPoolOptions::new()
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(cfg.connect_timeout)
        .after_connect(move |conn, _| {
            let set = set.clone();
            Box::pin(async move {
                if session {
                    use sqlx::Executor;
                    conn.execute(set.as_str()).await?;
                }
                Ok(())
            })
        })
        .connect_lazy_with(cfg.options.clone()))
}

/// A pool for commands that need the outbox to exist: fails clearly when it was never migrated.
pub async fn pool_migrated(cfg: &DbConfig, max: u32) -> anyhow::Result<PgPool> {
    let pool = pool(cfg, max).await?;
    ensure_migrated(&pool, cfg).await?;
    Ok(pool)
}

/// One connection to a schema migrated through `through`: what a command that changes events and
/// writes their audit rows needs (a pool of one, dropped with the connection).
pub async fn conn_migrated_through(
    cfg: &DbConfig,
    through: i64,
) -> anyhow::Result<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    let pool = pool_migrated(cfg, 1).await?;
    ensure_migrated_through(&pool, cfg, through).await?;
    Ok(pool.acquire().await?)
}

/// Drops a schema and everything in it (the demo's and the benchmark's scratch schemas).
pub async fn drop_schema(
    conn: &mut PgConnection,
    schema: &crate::config::Schema,
) -> sqlx::Result<()> {
    // The identifier is validated by `Schema::parse` and quoted.
    sqlx::raw_sql(&format!(
        "DROP SCHEMA IF EXISTS {} CASCADE",
        schema.quoted()
    ))
    .execute(conn)
    .await
    .map(|_| ())
}

/// A connection ([`connect`]) to a schema that is migrated as far as reading needs
/// ([`ensure_migrated`]): where the reading commands start.
pub async fn connect_migrated(cfg: &DbConfig) -> anyhow::Result<PgConnection> {
    let mut conn = connect(cfg).await?;
    ensure_migrated(&mut conn, cfg).await?;
    Ok(conn)
}

/// Fails with a clear message when the schema has no outbox table, or lacks a migration up to
/// [`migrate::RELAY_SCHEMA`] (the relay's columns, which every reading command selects too): e.g.
/// a seed-era table the application created that `migrate` has not adopted yet.
pub async fn ensure_migrated<'a>(
    conn: impl sqlx::Acquire<'a, Database = sqlx::Postgres>,
    cfg: &DbConfig,
) -> anyhow::Result<()> {
    ensure_migrated_through(conn, cfg, migrate::RELAY_SCHEMA).await
}

/// Like [`ensure_migrated`], for a command that needs every migration up to `through`.
pub async fn ensure_migrated_through<'a>(
    conn: impl sqlx::Acquire<'a, Database = sqlx::Postgres>,
    cfg: &DbConfig,
    through: i64,
) -> anyhow::Result<()> {
    let mut conn = conn.acquire().await?;
    let schema = cfg.schema.clone();
    let (exists, missing, foreign) = Pin::new(cfg, &[])
        .run(&mut conn, async |c| {
            let exists: bool = sqlx::query_scalar("SELECT to_regclass('outbox') IS NOT NULL")
                .fetch_one(&mut *c)
                .await?;
            if !exists {
                // A schema the role may not use is left out of its search path: say that, not
                // "no outbox table".
                let (present, usable, role): (bool, bool, String) = sqlx::query_as(
                    "SELECT n.oid IS NOT NULL,
                            coalesce(has_schema_privilege(n.oid, 'USAGE'), false),
                            current_user::text
                       FROM (SELECT 1) one LEFT JOIN pg_namespace n ON n.nspname = $1",
                )
                .bind(schema.name())
                .fetch_one(&mut *c)
                .await?;
                if present && !usable {
                    anyhow::bail!(
                        "role `{role}` may not use schema `{}` (permission denied): GRANT USAGE ON SCHEMA {} TO \"{}\", and the table privileges its commands need",
                        schema.name(),
                        schema.quoted(),
                        role.replace('"', "\"\"")
                    );
                }
            }
            let missing = if exists {
                migrate::missing_through(c, through).await?
            } else {
                Vec::new()
            };
            // Migration 1 unrecorded: a seed-era table `migrate` adopts, or someone else's.
            let foreign = missing.contains(&1) && !migrate::adoptable(c, &schema).await?;
            Ok::<_, anyhow::Error>((exists, missing, foreign))
        })
        .await?;
    let name = cfg.schema.name();
    if !exists {
        anyhow::bail!(
            "no outbox table in schema `{name}`: run `outboxctl migrate --schema {name}` first"
        );
    }
    if foreign {
        anyhow::bail!(
            "schema `{name}` has an outbox table that outboxctl did not create and that cannot be \
             adopted (it differs from migration 1): `outboxctl migrate --check --schema {name}` \
             lists the differences; use another --schema, or rename that table"
        );
    }
    if !missing.is_empty() {
        let list = crate::output::comma_list(&missing);
        let why = if missing.contains(&1) {
            " (its outbox table was created outside outboxctl, e.g. by the application from seed 000; `migrate` adopts it)"
        } else {
            ""
        };
        anyhow::bail!(
            "schema `{name}` lacks {} {list} that this command needs{why}: run `outboxctl migrate --schema {name}` first",
            if missing.len() == 1 { "migration" } else { "migrations" }
        );
    }
    Ok(())
}

/// Whether some session LISTENs on `channel` (the bench waits for its daemon with this).
/// Tries to take a switch's lock (session-level, class `class`, per schema): `ordering` and
/// `log` hold theirs across their row change and index DDL. A try, not a wait: a session waiting
/// on the lock in a statement would hold a snapshot that the holder's `CREATE INDEX
/// CONCURRENTLY` waits for, a deadlock; the caller retries between statements instead.
pub async fn try_lock_switch(conn: &mut PgConnection, class: i32) -> sqlx::Result<bool> {
    sqlx::query_scalar("SELECT pg_try_advisory_lock($1, hashtext(current_schema()))")
        .bind(class)
        .fetch_one(conn)
        .await
}

/// Releases [`try_lock_switch`]'s lock.
pub async fn unlock_switch(conn: &mut PgConnection, class: i32) -> sqlx::Result<()> {
    sqlx::query("SELECT pg_advisory_unlock($1, hashtext(current_schema()))")
        .bind(class)
        .execute(conn)
        .await
        .map(drop)
}

/// Whether the index `name` exists in the schema, and if so whether it is usable (`indisvalid
/// AND indisready`; a `CREATE INDEX CONCURRENTLY` that was interrupted or failed leaves it
/// invalid).
pub async fn index_state(conn: &mut PgConnection, name: &str) -> sqlx::Result<Option<bool>> {
    sqlx::query_scalar(
        "SELECT i.indisvalid AND i.indisready FROM pg_index i WHERE i.indexrelid = to_regclass($1)",
    )
    .bind(name)
    .fetch_optional(conn)
    .await
}

pub async fn is_listening(conn: &mut PgConnection, channel: &str) -> sqlx::Result<bool> {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE query = 'LISTEN \"' || $1 || '\"')",
    )
    .bind(channel)
    .fetch_one(conn)
    .await
}

#[cfg(test)]
mod tests {
    use super::{first_schema, version_text, Pin};
    use crate::config::{DbConfig, Pooler, Schema};

    #[test]
    fn server_versions_read_as_people_write_them() {
        assert_eq!(version_text(130_023), "13.23");
        assert_eq!(version_text(180_004), "18.4");
        assert_eq!(version_text(90_624), "9.6.24");
    }

    #[test]
    fn a_pin_opens_each_transaction_with_the_schema_and_the_settings() {
        // Built from the config layer's own types: the SQL layer knows no CLI type.
        let cfg = |pooler| DbConfig {
            options: "postgres://u@h/d".parse().unwrap(),
            schema: Schema::parse("events").unwrap(),
            connect_timeout: std::time::Duration::from_secs(1),
            pooler,
            display: "u@h:5432/d".into(),
            source: crate::config::FROM_URL,
        };
        for direct in [Pooler::None, Pooler::Session] {
            assert!(!Pin::new(&cfg(direct), &[("a", "1".into())]).is_pinned());
        }
        let pin = super::session::relay_pin(
            &cfg(Pooler::Transaction),
            true,
            std::time::Duration::from_secs(30),
        );
        assert_eq!(
            pin.begin.as_deref(),
            Some(
                "BEGIN; DEALLOCATE ALL; SET LOCAL search_path TO \"events\"; \
                 SET LOCAL extra_float_digits = 3; \
                 SET LOCAL idle_in_transaction_session_timeout = 30000; \
                 SET LOCAL synchronous_commit = off; SET LOCAL enable_seqscan = off; \
                 SET LOCAL jit = off"
            )
        );
    }

    #[test]
    fn the_first_schema_of_a_search_path() {
        assert_eq!(first_schema("\"t_abc\""), "t_abc");
        assert_eq!(first_schema("t_abc, public"), "t_abc");
        assert_eq!(first_schema("\"$user\", public"), "$user");
        assert_eq!(first_schema(""), "");
    }
}
