//! The relay's session with the database: its pool and [`Pin`], built together with the relay's
//! settings ([`Session::for_relay`]), and the upkeep of each connection in one place. Every
//! operation acquires a connection, runs its statements through the pin, and closes the
//! connection instead of returning it to the pool when the statements failed because it is gone
//! ([`discard_if_broken`]); a retry after a broken connection goes on one that has just answered
//! a ping ([`acquire_live`]). So the relay's step asks for a claim, a settle or a release once,
//! and knows nothing of pooling, pinning or broken connections.

use sqlx::pool::PoolConnection;
use sqlx::postgres::{PgConnection, PgPool, PgPoolOptions};
use sqlx::{Connection, Postgres, Transaction};
use uuid::Uuid;

use super::relay::{self as sql, Settle, Settled};
use super::{connect, is_connection_lost, set_search_path_sql, Pin};
use crate::config::{DbConfig, Pooler};

/// A pool and how its statements go through a transaction-pooling proxy ([`Pin`]). Cheap to
/// clone (the pool is shared).
#[derive(Debug, Clone)]
pub struct Session {
    pool: PgPool,
    pin: Pin,
}

impl Session {
    pub fn new(pool: PgPool, pin: Pin) -> Self {
        Self { pool, pin }
    }

    /// The relay's session: [`pool_for_relay`] and [`relay_pin`], with the same settings.
    pub async fn for_relay(
        cfg: &DbConfig,
        max: u32,
        async_commit: bool,
        lease: std::time::Duration,
    ) -> Result<Self, super::Error> {
        Ok(Self {
            pool: pool_for_relay(cfg, max, async_commit, lease).await?,
            pin: relay_pin(cfg, async_commit, lease),
        })
    }

    /// The pool, for what is no statement (a LISTEN connection, closing at the end).
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Whether statements are pinned (transaction pooling: no LISTEN then).
    pub fn is_pinned(&self) -> bool {
        self.pin.is_pinned()
    }

    /// A connection held for several operations (a tx-mode step's transaction).
    pub async fn hold(&self) -> sqlx::Result<Held<'_>> {
        Ok(Held {
            conn: self.pool.acquire().await?,
            pin: &self.pin,
        })
    }

    /// A held connection that has just answered a ping ([`acquire_live`]).
    pub async fn hold_live(&self) -> sqlx::Result<Held<'_>> {
        Ok(Held {
            conn: acquire_live(&self.pool).await?,
            pin: &self.pin,
        })
    }

    /// Runs `f` on a connection of its own ([`Held::run`]).
    pub async fn run<T>(
        &self,
        f: impl AsyncFnOnce(&mut PgConnection) -> sqlx::Result<T>,
    ) -> sqlx::Result<T> {
        self.hold().await?.run(f).await
    }

    /// Lease mode: the fenced settle of a batch ([`sql::settle_lease`]). A `retry` (the first
    /// attempt's connection broke) goes on a live connection.
    pub async fn settle_lease(
        &self,
        s: &Settle,
        token: Uuid,
        retry: bool,
    ) -> sqlx::Result<Settled> {
        let mut conn = if retry {
            self.hold_live().await?
        } else {
            self.hold().await?
        };
        conn.run(async |c| sql::settle_lease(c, s, token, retry).await)
            .await
    }

    /// Lease mode: gives back what still carries `token` ([`sql::release_token`]), on a live
    /// connection: it follows a claim whose connection broke.
    pub async fn release_token(&self, token: Uuid) -> sqlx::Result<u64> {
        self.hold_live()
            .await?
            .run(async |c| sql::release_token(c, token).await)
            .await
    }

    /// Tx mode: the committed `last_error` of `ids` ([`sql::committed_errors`]), on a connection
    /// other than the claiming transaction's.
    pub async fn committed_errors(&self, ids: &[i64]) -> sqlx::Result<Vec<(i64, Option<String>)>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut conn = self.hold().await?;
        let read = async {
            let mut tx = conn.begin().await?;
            let previous = sql::committed_errors(&mut tx, ids).await?;
            tx.commit().await?;
            Ok(previous)
        };
        read.await
            .inspect_err(|e| discard_if_broken(&mut conn.conn, e))
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }
}

/// A pooled connection of a [`Session`]: its statements go through the pin, and it is closed,
/// not returned to the pool, when they failed because it is gone.
pub struct Held<'s> {
    conn: PoolConnection<Postgres>,
    pin: &'s Pin,
}

impl Held<'_> {
    /// Runs `f` through the pin ([`Pin::run`]); a broken connection is discarded.
    pub async fn run<T>(
        &mut self,
        f: impl AsyncFnOnce(&mut PgConnection) -> sqlx::Result<T>,
    ) -> sqlx::Result<T> {
        let r = self.pin.run(&mut self.conn, f).await;
        if let Err(e) = &r {
            discard_if_broken(&mut self.conn, e);
        }
        r
    }

    /// A transaction opened through the pin ([`Pin::begin`]); whoever holds it tells
    /// [`Held::discard_if_broken`] how it ended.
    pub async fn begin(&mut self) -> sqlx::Result<Transaction<'_, Postgres>> {
        self.pin.begin(&mut self.conn).await
    }

    /// Closes this connection on drop when `err` says it is gone.
    pub fn discard_if_broken(&mut self, err: &sqlx::Error) {
        discard_if_broken(&mut self.conn, err);
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

/// The settings of a relay's sessions (see [`pool_for_relay`]), as (name, value).
fn relay_settings(async_commit: bool, lease: std::time::Duration) -> Vec<(&'static str, String)> {
    let idle_ms = lease.as_millis().max(1000);
    vec![
        ("idle_in_transaction_session_timeout", idle_ms.to_string()),
        (
            "synchronous_commit",
            if async_commit { "off" } else { "on" }.to_owned(),
        ),
        ("enable_seqscan", "off".to_owned()),
        // With sequential scans off, a statement on a table no index serves (log mode's one-row
        // `outbox_log`) is costed above `jit_above_cost`, and was JIT-compiled at every execution:
        // 40-90 ms of LLVM for a one-row UPDATE (perf, bench/results/2026-12-07-1200-*). No relay
        // statement runs long enough for JIT to pay.
        ("jit", "off".to_owned()),
    ]
}

/// The relay's [`Pin`]: under transaction pooling its session settings ([`pool_for_relay`]) are
/// set per transaction, never on the shared server connections.
pub fn relay_pin(cfg: &DbConfig, async_commit: bool, lease: std::time::Duration) -> Pin {
    Pin::new(cfg, &relay_settings(async_commit, lease))
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
) -> Result<PgPool, super::Error> {
    drop(connect(cfg).await?);
    // Under transaction pooling these go into every transaction instead ([`relay_pin`]): a
    // session SET would stay on a server connection other clients get next.
    let mut sql: Vec<String> = match cfg.pooler {
        Pooler::Transaction => Vec::new(),
        _ => relay_settings(async_commit, lease)
            .into_iter()
            .map(|(name, value)| format!("SET {name} = {value}"))
            .collect(),
    };
    if cfg.pooler == Pooler::Session {
        sql.push(set_search_path_sql(cfg));
    }
    let sql = sql.join("; ");
    Ok(PgPoolOptions::new()
        .max_connections(max)
        .min_connections(0)
        .acquire_timeout(cfg.connect_timeout)
        .test_before_acquire(false)
        .after_connect(move |conn, _| {
            let sql = sql.clone();
            Box::pin(async move {
                if !sql.is_empty() {
                    use sqlx::Executor;
                    conn.execute(sql.as_str()).await?;
                }
                Ok(())
            })
        })
        .connect_lazy_with(cfg.options.clone()))
}
