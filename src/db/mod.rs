//! All SQL lives under this module: one function per statement, typed inputs and outputs.
//! Time always comes from the database clock (`now()`), never from the client.
//!
//! Every connection's `search_path` is the configured schema (set at connect time from the
//! validated [`Schema`](crate::config::Schema)), so statements name tables unqualified.

pub mod audit;
pub mod dead;
pub mod doctor;
pub mod events;
pub mod metrics;
pub mod migrate;
pub mod ordering;
pub mod prune;
pub mod publish;
pub mod relay;
pub mod stats;

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Postgres};

use crate::config::DbConfig;
use crate::exit::CodedError;

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
        }
        _ => false,
    }
}

/// Whether `err` means the connection itself is gone (server restart, `pg_terminate_backend`, a
/// network cut), as opposed to a statement failing on a healthy session. Such a connection must
/// not go back to the pool: see [`discard_if_broken`].
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

/// Marks a pooled connection whose statement failed with `err` to be closed instead of returned
/// to the pool, when `err` says the connection is gone; a healthy one goes back as usual.
pub fn discard_if_broken(conn: &mut PoolConnection<Postgres>, err: &sqlx::Error) {
    if is_connection_lost(err) {
        conn.close_on_drop();
    }
}

/// A pooled connection that has just answered a ping, for a retry after a connection broke.
///
/// The relay's pool hands out idle connections untested (`test_before_acquire(false)`: a ping
/// per acquire would add a round trip to every statement of the hot path). After a server
/// restart or `pg_terminate_backend` every idle connection may be dead, so a retry that took the
/// next idle one would likely fail the same way. This pings each candidate and closes the dead
/// ones, so the pool opens a fresh connection once the idle ones are used up.
pub async fn acquire_live(pool: &PgPool) -> sqlx::Result<PoolConnection<Postgres>> {
    // Every idle connection may be dead; one more acquire than the pool holds opens a new one.
    let tries = pool.options().get_max_connections() + 1;
    let mut last = None;
    for _ in 0..tries {
        let mut conn = pool.acquire().await?;
        match conn.ping().await {
            Ok(()) => return Ok(conn),
            Err(e) => {
                conn.close_on_drop();
                last = Some(e);
            }
        }
    }
    Err(last.unwrap_or(sqlx::Error::PoolTimedOut))
}

fn connect_error(cfg: &DbConfig, err: impl std::fmt::Display) -> CodedError {
    CodedError::database(format!(
        "cannot connect to PostgreSQL at {}: {err}",
        cfg.display
    ))
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
async fn check_search_path(conn: &mut PgConnection, cfg: &DbConfig) -> Result<(), CodedError> {
    let path: String = sqlx::query_scalar(SHOW_SEARCH_PATH)
        .fetch_one(&mut *conn)
        .await
        .map_err(|e| connect_error(cfg, e))?;
    let schema = cfg.schema.name();
    if first_schema(&path) == schema {
        return Ok(());
    }
    Err(connect_error(
        cfg,
        format!(
            "the session's search_path is `{path}`, not schema `{schema}` (--schema): a connection pooler dropped the `options` startup parameter that carries it (e.g. PgBouncer's ignore_startup_parameters); set it on the server for the pooler's sessions (ALTER ROLE ... SET search_path = {schema}) or connect to PostgreSQL directly"
        ),
    ))
}

/// One connection, with the configured timeout, whose search path is the configured schema.
pub async fn connect(cfg: &DbConfig) -> Result<PgConnection, CodedError> {
    match tokio::time::timeout(
        cfg.connect_timeout,
        PgConnection::connect_with(&cfg.options),
    )
    .await
    {
        Ok(Ok(mut conn)) => {
            check_search_path(&mut conn, cfg).await?;
            Ok(conn)
        }
        Ok(Err(e)) => Err(connect_error(cfg, e)),
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
pub async fn pool(cfg: &DbConfig, max: u32) -> Result<PgPool, CodedError> {
    let first = connect(cfg).await?;
    drop(first);
    Ok(PgPoolOptions::new()
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(cfg.connect_timeout)
        .connect_lazy_with(cfg.options.clone()))
}

/// A pool for commands that need the outbox to exist: fails clearly when it was never migrated.
pub async fn pool_migrated(cfg: &DbConfig, max: u32) -> anyhow::Result<PgPool> {
    let pool = pool(cfg, max).await?;
    ensure_migrated(&pool, cfg).await?;
    Ok(pool)
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
    let exists: bool = sqlx::query_scalar("SELECT to_regclass('outbox') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    let name = cfg.schema.name();
    if !exists {
        anyhow::bail!(
            "no outbox table in schema `{name}`: run `outboxctl migrate --schema {name}` first"
        );
    }
    let missing = migrate::missing_through(&mut conn, through).await?;
    if !missing.is_empty() {
        let list = missing
            .iter()
            .map(|v| v.to_string())
            .collect::<Vec<_>>()
            .join(", ");
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

/// The relay's pool: sessions may commit asynchronously (a lost mark only re-publishes), and an
/// idle-in-transaction timeout of one lease ends a hung tx-mode relay's row locks. Idle
/// connections are not pinged on acquire (a round trip per statement on the hot path); after a
/// connection breaks, the relay retries on one from [`acquire_live`] and closes the broken one
/// ([`discard_if_broken`]).
///
/// Sequential scans are disabled for these sessions: every relay statement reaches its rows
/// through an index or by TID, and the claims' plans are made once per connection and reused
/// (see `relay::claim_sql`): a plan made while the table was empty would otherwise pick a Seq
/// Scan for the claim's TID lookup and keep it, on a growing table, until the next vacuum.
pub async fn pool_for_relay(
    cfg: &DbConfig,
    max: u32,
    async_commit: bool,
    lease: std::time::Duration,
) -> Result<PgPool, CodedError> {
    drop(connect(cfg).await?);
    let idle_ms = lease.as_millis().max(1000);
    Ok(PgPoolOptions::new()
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(cfg.connect_timeout)
        .test_before_acquire(false)
        .after_connect(move |conn, _| {
            Box::pin(async move {
                use sqlx::Executor;
                let sql = format!(
                    "SET idle_in_transaction_session_timeout = {idle_ms}; SET synchronous_commit = {};
                     SET enable_seqscan = off",
                    if async_commit { "off" } else { "on" }
                );
                conn.execute(sql.as_str()).await?;
                Ok(())
            })
        })
        .connect_lazy_with(cfg.options.clone()))
}

/// Whether some session LISTENs on `channel` (the bench waits for its daemon with this).
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
    use super::first_schema;

    #[test]
    fn the_first_schema_of_a_search_path() {
        assert_eq!(first_schema("\"t_abc\""), "t_abc");
        assert_eq!(first_schema("t_abc, public"), "t_abc");
        assert_eq!(first_schema("\"$user\", public"), "$user");
        assert_eq!(first_schema(""), "");
    }
}
