//! The database side of the harness: every test gets its own schema in the real PostgreSQL
//! (dropped afterwards), a role of its own when it needs one, and the fixed ports of the servers
//! and clusters a test starts, shifted so that two checkouts can run the suite side by side.

use std::process::Command;

use outboxctl::config::{DbConfig, Schema};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Executor;

/// The server the tests use: `OUTBOXCTL_TEST_DATABASE_URL`, else the local `test` database.
pub fn base_url() -> String {
    std::env::var("OUTBOXCTL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// Rows as the producer left them: not published, not dead, no attempt counted, no error. What a
/// sink's outage (its state, not the events' fault) must leave a backlog as.
pub const UNTOUCHED: &str =
    "published_at IS NULL AND dead_lettered_at IS NULL AND attempt_count = 0 AND last_error IS NULL";

/// A fresh schema, migrated unless made with [`TestDb::unmigrated`]. Dropped on drop.
pub struct TestDb {
    pub schema: String,
    pub pool: PgPool,
    /// The server's URL (the shared one, or a test's own cluster).
    pub url: String,
}

impl TestDb {
    pub async fn new() -> Self {
        Self::new_at(&base_url()).await
    }

    /// A fresh migrated schema on the server at `url` (e.g. a [`crate::support::servers::PgCluster`]).
    pub async fn new_at(url: &str) -> Self {
        let db = Self::unmigrated_at(url).await;
        let mut conn = outboxctl::db::connect(&db.config()).await.expect("connect");
        outboxctl::db::migrate::apply(&mut conn, &Schema::parse(&db.schema).unwrap())
            .await
            .expect("migrate");
        db
    }

    pub async fn unmigrated() -> Self {
        Self::unmigrated_at(&base_url()).await
    }

    /// A fresh schema name on the server at `url`, with nothing created.
    pub async fn unmigrated_at(url: &str) -> Self {
        let schema = format!("t_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        let url = url.to_owned();
        let search_path = schema.clone();
        let pool = PgPoolOptions::new()
            .max_connections(4)
            .after_connect(move |conn, _| {
                let sql = format!("SET search_path TO \"{search_path}\"");
                Box::pin(async move {
                    conn.execute(sql.as_str()).await?;
                    Ok(())
                })
            })
            .connect_lazy(&url)
            .expect("pool");
        Self { schema, pool, url }
    }

    /// The library's connection settings for this schema.
    pub fn config(&self) -> DbConfig {
        let args = outboxctl::cli::DatabaseArgs {
            database_url: Some(self.url.clone()),
            schema: self.schema.clone(),
            connect_timeout: std::time::Duration::from_secs(10),
            pooler: outboxctl::cli::PoolerArg::None,
        };
        DbConfig::from_args(&args).expect("config")
    }

    /// The real binary, pointed at this schema, with no stray OUTBOXCTL_* from the environment.
    pub fn cmd(&self) -> Command {
        let mut c = super::bin();
        c.env("DATABASE_URL", &self.url)
            .env("OUTBOXCTL_SCHEMA", &self.schema);
        c
    }

    /// Runs a scalar query.
    pub async fn scalar<T>(&self, sql: &str) -> T
    where
        T: for<'r> sqlx::Decode<'r, sqlx::Postgres> + sqlx::Type<sqlx::Postgres> + Send + Unpin,
    {
        sqlx::query_scalar(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    /// Runs a query returning one row.
    pub async fn row<T>(&self, sql: &str) -> T
    where
        T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
    {
        sqlx::query_as(sql)
            .fetch_one(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    }

    pub async fn exec(&self, sql: &str) {
        sqlx::raw_sql(sql)
            .execute(&self.pool)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// A fresh migrated schema holding a backlog of `n` ready events ([`TestDb::seed_ready`]): where
    /// most relay and sink tests start.
    pub async fn with_backlog(n: i64) -> Self {
        let db = Self::new().await;
        db.seed_ready(n).await;
        db
    }

    /// How many outbox rows satisfy `condition` (SQL, e.g. `published_at IS NULL` or
    /// [`UNTOUCHED`]).
    pub async fn count(&self, condition: &str) -> i64 {
        self.scalar(&format!("SELECT count(*) FROM outbox WHERE {condition}"))
            .await
    }

    /// Inserts `n` published events with keys `p-1`..`p-n`, created, due and published at times
    /// spread evenly over the last 30 days: a long history that reading commands must not scan.
    pub async fn seed_published_history(&self, n: i64) {
        sqlx::query(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload,
                                 idempotency_key, created_at, available_at, published_at)
             SELECT '00000000-0000-0000-0000-000000000001', 'order', g::text, 'order.placed',
                    jsonb_build_object('n', g), 'p-' || g, t, t, t
               FROM generate_series(1, $1::bigint) g,
                    LATERAL (SELECT now() - interval '30 days' * g / $1::float8) AS x(t)",
        )
        .bind(n)
        .execute(&self.pool)
        .await
        .expect("seed history");
    }

    /// Inserts `n` ready events with keys `k-1`..`k-n`, the way seed 000's producer does.
    pub async fn seed_ready(&self, n: i64) {
        self.seed_keyed("k", n).await;
    }

    /// [`TestDb::seed_ready`] with keys `PREFIX-1`..`PREFIX-n`, in one transaction: a second
    /// batch beside the first.
    pub async fn seed_keyed(&self, prefix: &str, n: i64) {
        sqlx::query(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
             SELECT '00000000-0000-0000-0000-000000000001', 'order', 'o-' || g, 'order.placed',
                    jsonb_build_object('n', g), $2 || '-' || g
               FROM generate_series(1, $1::bigint) g",
        )
        .bind(n)
        .bind(prefix)
        .execute(&self.pool)
        .await
        .expect("seed");
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        cleanup(
            &self.url,
            format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.schema),
        );
    }
}

/// A login role of the test's own on the server of a [`TestDb`], with only what PUBLIC has
/// (no CREATE on the database): roles are cluster-wide, so it is named uniquely, and dropped
/// with everything granted to it when the test ends, also when it fails.
pub struct TestRole {
    pub name: String,
    admin_url: String,
}

impl TestRole {
    pub async fn new(db: &TestDb) -> Self {
        let name = format!("r_{}", &uuid::Uuid::new_v4().simple().to_string()[..12]);
        db.exec(&format!("CREATE ROLE \"{name}\" LOGIN")).await;
        Self {
            name,
            admin_url: db.url.clone(),
        }
    }

    /// The server's URL with this role as the user (the test server trusts local logins).
    pub fn url(&self) -> String {
        let mut u = url::Url::parse(&self.admin_url).unwrap();
        u.set_username(&self.name).unwrap();
        u.set_password(None).unwrap();
        u.to_string()
    }
}

impl Drop for TestRole {
    fn drop(&mut self) {
        let name = &self.name;
        cleanup(
            &self.admin_url,
            format!("DROP OWNED BY \"{name}\"; DROP ROLE IF EXISTS \"{name}\""),
        );
    }
}

/// Runs `sql` on the server at `url` from a thread of its own (a drop may run inside or outside a
/// runtime, and also while a test panics), ignoring failures: what a test leaves behind.
fn cleanup(url: &str, sql: String) {
    let url = url.to_owned();
    let _ = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            if let Ok(pool) = PgPoolOptions::new()
                .max_connections(1)
                .acquire_timeout(std::time::Duration::from_secs(5))
                .connect(&url)
                .await
            {
                let _ = sqlx::raw_sql(&sql).execute(&pool).await;
            }
        })
    })
    .join();
}

/// The host and port of the tests' PostgreSQL (from [`base_url`]).
pub fn db_host_port() -> (String, u16) {
    let u = url::Url::parse(&base_url()).expect("OUTBOXCTL_TEST_DATABASE_URL");
    (
        u.host_str().unwrap_or("127.0.0.1").to_owned(),
        u.port().unwrap_or(5432),
    )
}

/// [`db_host_port`] as `host:port`.
pub fn db_addr() -> String {
    let (h, p) = db_host_port();
    format!("{h}:{p}")
}

/// A fixed port of a test's own server or cluster, shifted by `OUTBOXCTL_TEST_PORT_OFFSET`
/// (default 0) so that two checkouts can run the suite at once on one machine without taking
/// each other's ports (and, for [`crate::support::servers::PgCluster`], cluster names).
pub fn port(p: u16) -> u16 {
    p + port_offset()
}

/// `OUTBOXCTL_TEST_PORT_OFFSET`, or 0.
pub fn port_offset() -> u16 {
    std::env::var("OUTBOXCTL_TEST_PORT_OFFSET")
        .ok()
        .filter(|v| !v.is_empty())
        .map(|v| {
            v.parse()
                .expect("OUTBOXCTL_TEST_PORT_OFFSET must be a port offset (e.g. 1000)")
        })
        .unwrap_or(0)
}
