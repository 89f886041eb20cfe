//! Test harness: every test gets its own schema in the real PostgreSQL (dropped afterwards), and a
//! builder for running the real `outboxctl` binary against it.

use std::process::Command;

use assert_cmd::cargo::CommandCargoExt;
use outboxctl::config::{DbConfig, Schema};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::Executor;

/// The server the tests use: `OUTBOXCTL_TEST_DATABASE_URL`, else the local `test` database.
pub fn base_url() -> String {
    std::env::var("OUTBOXCTL_TEST_DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

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

    /// A fresh migrated schema on the server at `url` (e.g. a [`crate::pg_cluster::PgCluster`]).
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
        let mut c = bin();
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

    /// Inserts `n` ready events with keys `k-1`..`k-n`, the way seed 000's producer does.
    pub async fn seed_ready(&self, n: i64) {
        sqlx::query(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
             SELECT '00000000-0000-0000-0000-000000000001', 'order', 'o-' || g, 'order.placed',
                    jsonb_build_object('n', g), 'k-' || g
               FROM generate_series(1, $1::bigint) g",
        )
        .bind(n)
        .execute(&self.pool)
        .await
        .expect("seed");
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let schema = self.schema.clone();
        let url = self.url.clone();
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
                    let _ = sqlx::raw_sql(&format!("DROP SCHEMA IF EXISTS \"{schema}\" CASCADE"))
                        .execute(&pool)
                        .await;
                }
            })
        })
        .join();
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
        let (name, url) = (self.name.clone(), self.admin_url.clone());
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
                    let _ = sqlx::raw_sql(&format!(
                        "DROP OWNED BY \"{name}\"; DROP ROLE IF EXISTS \"{name}\""
                    ))
                    .execute(&pool)
                    .await;
                }
            })
        })
        .join();
    }
}

/// The real binary with a clean environment (no OUTBOXCTL_*, no DATABASE_URL, no PG*).
pub fn bin() -> Command {
    let mut c = Command::cargo_bin("outboxctl").expect("binary");
    for (k, _) in std::env::vars() {
        if k.starts_with("OUTBOXCTL_")
            || k == "DATABASE_URL"
            || k.starts_with("PG")
            || k == "RUST_LOG"
        {
            c.env_remove(k);
        }
    }
    c.env("NO_COLOR", "1").env("COLUMNS", "120");
    c
}

/// stdout of a finished command as text.
pub fn stdout(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// stderr of a finished command as text.
pub fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Polls `check` every 20 ms until it returns true or `timeout` passes (then panics with `what`).
/// For waiting on an observable outcome of another process, not as a fixed sleep.
pub async fn wait_until<F, Fut>(timeout: std::time::Duration, what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if check().await {
            return;
        }
        if std::time::Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for: {what}");
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

/// Sends a signal to a child process.
pub fn signal(child: &std::process::Child, sig: &str) {
    let ok = std::process::Command::new("kill")
        .args([&format!("-{sig}"), &child.id().to_string()])
        .status()
        .expect("kill")
        .success();
    assert!(ok, "kill -{sig} {}", child.id());
}

/// Ids in a JSON-lines sink file.
pub fn ids_in_file(path: &std::path::Path) -> Vec<i64> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("JSON line")["id"]
                .as_i64()
                .expect("id")
        })
        .collect()
}

/// Collects a child's output stream in the background, for waiting on a log line.
pub fn capture<R: std::io::Read + Send + 'static>(
    stream: R,
) -> std::sync::Arc<std::sync::Mutex<String>> {
    let buf = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
    let b = std::sync::Arc::clone(&buf);
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stream)
            .lines()
            .map_while(Result::ok)
        {
            let mut s = b.lock().unwrap();
            s.push_str(&line);
            s.push('\n');
        }
    });
    buf
}

/// A port nothing listens on, for as long as this lives: a socket bound to it but not listening,
/// so a connection is refused and no other test (or checkout) can take the port meanwhile.
pub struct ClosedPort {
    pub port: u16,
    _socket: tokio::net::TcpSocket,
}

impl ClosedPort {
    pub fn new() -> Self {
        // socket(2) + bind(2) without listen(2): kept open, never listening.
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().unwrap())
            .expect("bind a port");
        let port = socket.local_addr().unwrap().port();
        Self {
            port,
            _socket: socket,
        }
    }

    /// Starts listening on the same port (it was never released, so nothing else took it).
    /// Within a tokio runtime.
    pub fn listen(self) -> std::net::TcpListener {
        let listener = self
            ._socket
            .listen(128)
            .expect("listen")
            .into_std()
            .unwrap();
        listener.set_nonblocking(false).unwrap();
        listener
    }
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
/// each other's ports (and, for [`crate::pg_cluster::PgCluster`], cluster names).
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

/// Says in the test run's output that a check was skipped or reduced, and why. Written to the
/// process's stderr directly, past libtest's capture, so it shows for a passing test too.
pub fn say_skipped(test: &str, why: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "SKIPPED in {test}: {why}");
}

/// Every node of an `EXPLAIN (FORMAT JSON)` plan (the top node and all below it).
pub fn plan_nodes(plan: &serde_json::Value) -> Vec<&serde_json::Value> {
    let mut out = vec![plan];
    let mut i = 0;
    while i < out.len() {
        if let Some(children) = out[i]["Plans"].as_array() {
            out.extend(children.iter());
        }
        i += 1;
    }
    out
}

/// Asserts that the statement `sql` (PREPAREd on `c`), executed with `args` (e.g. `(now(), 3)`),
/// reaches the rows its `target` (e.g. `("Delete", "outbox")`) deletes or updates by TID, both
/// as a custom and as a generic plan: the scan under that DELETE/UPDATE is a `Tid Scan`, and no
/// node anywhere filters on ctid (the collapse of issue 22 item 10: an index scan over the whole
/// range with `Filter: ctid = ANY`). The modifications of the CTEs named in `by_id` reach theirs
/// through the primary key instead (an index or bitmap scan of `outbox_pkey`).
pub async fn assert_tid_lookup(
    c: &mut sqlx::PgConnection,
    what: &str,
    sql: &str,
    args: &str,
    target: (&str, &str),
    by_id: &[&str],
) {
    for (mode, plan) in explain_custom_and_generic(c, what, sql, args).await {
        let nodes = plan_nodes(&plan[0]["Plan"]);
        let modify: Vec<_> = nodes
            .iter()
            .filter(|n| {
                n["Node Type"] == "ModifyTable"
                    && n["Operation"] == target.0
                    && n["Relation Name"] == target.1
            })
            .collect();
        assert!(
            !modify.is_empty(),
            "{what} ({mode}): no {target:?} in {plan:#}"
        );
        for m in modify {
            let scans: Vec<_> = m["Plans"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|p| p["Parent Relationship"] == "Outer")
                .collect();
            assert_eq!(scans.len(), 1, "{what} ({mode}): {plan:#}");
            let cte = m["Subplan Name"].as_str().unwrap_or("");
            if by_id.iter().any(|name| cte == format!("CTE {name}")) {
                let scan = &scans[0];
                let index = match scan["Node Type"].as_str() {
                    Some("Index Scan") => &scan["Index Name"],
                    Some("Bitmap Heap Scan") => &scan["Plans"][0]["Index Name"],
                    _ => &serde_json::Value::Null,
                };
                assert_eq!(
                    index, "outbox_pkey",
                    "{what} ({mode}): {cte} must reach its rows by id: {plan:#}"
                );
                continue;
            }
            assert_eq!(
                scans[0]["Node Type"], "Tid Scan",
                "{what} ({mode}): the {} must reach its rows by TID: {plan:#}",
                m["Operation"]
            );
        }
        for n in nodes {
            let filter = n["Filter"].as_str().unwrap_or("");
            assert!(
                !filter.contains("ctid"),
                "{what} ({mode}): a {} filters on ctid: {plan:#}",
                n["Node Type"]
            );
        }
    }
}

/// `EXPLAIN (FORMAT JSON)` of the statement `sql` PREPAREd on `c` and executed with `args`, as a
/// custom and as a generic plan: `(plan_cache_mode, plan)` for each.
pub async fn explain_custom_and_generic(
    c: &mut sqlx::PgConnection,
    what: &str,
    sql: &str,
    args: &str,
) -> Vec<(&'static str, serde_json::Value)> {
    sqlx::raw_sql(&format!("PREPARE explained AS {sql}"))
        .execute(&mut *c)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let mut plans = Vec::new();
    for mode in ["force_custom_plan", "force_generic_plan"] {
        sqlx::raw_sql(&format!("SET plan_cache_mode = {mode}"))
            .execute(&mut *c)
            .await
            .unwrap();
        let plan: serde_json::Value =
            sqlx::query_scalar(&format!("EXPLAIN (FORMAT JSON) EXECUTE explained{args}"))
                .fetch_one(&mut *c)
                .await
                .unwrap_or_else(|e| panic!("{what}: {e}"));
        plans.push((mode, plan));
    }
    sqlx::raw_sql("DEALLOCATE explained; RESET plan_cache_mode")
        .execute(&mut *c)
        .await
        .unwrap();
    plans
}
