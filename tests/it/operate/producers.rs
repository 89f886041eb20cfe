//! The producer snippets of examples/producers/ (SQL, Rust with sqlx, Node with pg, Python with
//! psycopg, Java with JDBC) run against the real database: each writes one order and its event in
//! one transaction, and `relay --once` publishes exactly that event (issue 23 item 5). A
//! transaction that fails at COMMIT, after both inserts, leaves neither row and nothing to relay.
//!
//! A missing runtime fails the test with what to install (.ci/run installs them all).

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::{stderr, stdout, TestDb};

#[derive(Clone, Copy, Debug)]
enum Lang {
    Sql,
    Sqlx,
    Node,
    Python,
    Java,
}

const ALL: [Lang; 5] = [Lang::Sql, Lang::Sqlx, Lang::Node, Lang::Python, Lang::Java];

fn producers() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/producers")
}

/// Runs `program args`, true when it exits 0 (false when it is not there at all).
fn runs(program: &str, args: &[&str]) -> bool {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn modified(path: &Path) -> std::time::SystemTime {
    std::fs::metadata(path)
        .and_then(|m| m.modified())
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The sqlx producer, a cargo example. A plain `cargo test` builds it beside the binaries before
/// any test runs; `cargo test --test it` alone does not, so when it is absent or older than its
/// source it is built here, once, by a cargo that does not inherit this test's CARGO_* variables
/// (cargo holds no lock on the target directory while tests run).
fn sqlx_example() -> PathBuf {
    static BUILT: std::sync::Mutex<bool> = std::sync::Mutex::new(false);
    let bin_dir = Path::new(env!("CARGO_BIN_EXE_outboxctl")).parent().unwrap();
    let bin = bin_dir.join("examples/producer_sqlx");
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/producer_sqlx.rs");
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let fresh = bin.exists() && modified(&bin) >= modified(&src);
    if !*built && !fresh {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let mut c = Command::new(cargo);
        c.current_dir(env!("CARGO_MANIFEST_DIR")).args([
            "build",
            "--locked",
            "--example",
            "producer_sqlx",
        ]);
        if bin_dir.ends_with("release") {
            c.arg("--release");
        }
        for (k, _) in std::env::vars() {
            if k.starts_with("CARGO_") && k != "CARGO_HOME" && k != "CARGO_TARGET_DIR" {
                c.env_remove(k);
            }
        }
        let out = c.output().expect("cargo");
        assert!(
            out.status.success() && bin.exists(),
            "building the sqlx producer failed: run `cargo build --example producer_sqlx`:\n{}",
            stderr(&out)
        );
    }
    *built = true;
    bin
}

/// The command that runs `lang`'s snippet for one order, or a panic naming what to install.
fn snippet(lang: Lang, order_id: &str, total_cents: i64) -> Command {
    let dir = producers();
    let total = total_cents.to_string();
    let mut c = match lang {
        Lang::Sql => {
            assert!(
                runs("psql", &["--version"]),
                "the SQL producer needs psql: apt-get install postgresql-client"
            );
            let mut c = Command::new("psql");
            c.arg("--no-psqlrc")
                .args(["-v", "ON_ERROR_STOP=1", "-v"])
                .arg(format!("order_id={order_id}"))
                .arg("-v")
                .arg(format!("total_cents={total}"))
                .arg("-f")
                .arg(dir.join("sql/produce.sql"));
            c
        }
        Lang::Sqlx => {
            let mut c = Command::new(sqlx_example());
            c.args([order_id, &total]);
            c
        }
        Lang::Node => {
            assert!(
                runs("node", &["--version"]),
                "the Node producer needs node: apt-get install nodejs npm"
            );
            assert!(
                dir.join("node/node_modules/pg").is_dir(),
                "the Node producer needs its npm packages: run `npm ci` in examples/producers/node"
            );
            let mut c = Command::new("node");
            c.arg(dir.join("node/produce.js")).args([order_id, &total]);
            c
        }
        Lang::Python => {
            assert!(
                runs("python3", &["-c", "import psycopg"]),
                "the Python producer needs psycopg 3: python3 -m pip install 'psycopg[binary]'"
            );
            let mut c = Command::new("python3");
            c.arg(dir.join("python/produce.py"))
                .args([order_id, &total]);
            c
        }
        Lang::Java => {
            assert!(
                runs("java", &["-version"]),
                "the Java producer needs a JDK of 11 or later: apt-get install default-jdk-headless"
            );
            let jar = Path::new("/usr/share/java/postgresql.jar");
            assert!(
                jar.exists(),
                "the Java producer needs the JDBC driver {}: apt-get install libpostgresql-jdbc-java",
                jar.display()
            );
            let mut c = Command::new("java");
            c.arg("-cp")
                .arg(jar)
                .arg(dir.join("java/Produce.java"))
                .args([order_id, &total]);
            c
        }
    };
    for (k, _) in std::env::vars() {
        if k.starts_with("OUTBOXCTL_") || k == "DATABASE_URL" || k.starts_with("PG") {
            c.env_remove(k);
        }
    }
    c
}

/// A fresh migrated schema with the snippets' business table.
async fn shop() -> TestDb {
    let db = TestDb::new().await;
    let schema = std::fs::read_to_string(producers().join("schema.sql")).unwrap();
    db.exec(&schema).await;
    db
}

/// A password in the URL the snippets get (the test server trusts local logins, so it is never
/// asked for): none may print it, on success or failure.
const SECRET: &str = "producer-secret-h23";

/// Runs `lang`'s snippet against `db`'s schema, and checks that it printed no secret.
fn produce(db: &TestDb, lang: Lang, order_id: &str, total_cents: i64) -> std::process::Output {
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_password(Some(SECRET)).unwrap();
    let mut c = snippet(lang, order_id, total_cents);
    c.env("DATABASE_URL", url.as_str())
        .env("OUTBOXCTL_SCHEMA", &db.schema);
    if let Lang::Sql = lang {
        c.arg(url.as_str())
            .arg("-v")
            .arg(format!("schema={}", db.schema));
    }
    let out = c.output().unwrap();
    let printed = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        !printed.contains(SECRET),
        "{lang:?} prints the database password: {printed}"
    );
    out
}

/// `relay --once` into a file sink: its exit, stderr, and the JSON documents the sink received.
fn relay_once(db: &TestDb) -> (std::process::Output, Vec<serde_json::Value>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sink.jsonl");
    let out = db
        .cmd()
        .args(["relay", "--once", "--sink"])
        .arg(format!("file:{}", path.display()))
        .output()
        .unwrap();
    assert!(out.status.success(), "relay: {}", stderr(&out));
    let docs = std::fs::read_to_string(&path)
        .unwrap_or_default()
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect();
    (out, docs)
}

async fn commits_one_order_and_its_event(lang: Lang) {
    let db = shop().await;
    let order_id = format!("o-{lang:?}-1001").to_lowercase();
    let out = produce(&db, lang, &order_id, 4200);
    assert!(
        out.status.success(),
        "{lang:?}: {}\n{}",
        stdout(&out),
        stderr(&out)
    );

    let orders: Vec<(String, i64)> = sqlx::query_as("SELECT id, total_cents FROM orders")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(
        orders,
        vec![(order_id.clone(), 4200)],
        "{lang:?}: the order"
    );

    let (relayed, docs) = relay_once(&db);
    assert_eq!(docs.len(), 1, "{lang:?}: exactly one event: {docs:?}");
    let e = &docs[0];
    assert_eq!(e["type"], "order.placed", "{lang:?}: {e}");
    assert_eq!(e["aggregate_type"], "order", "{lang:?}: {e}");
    assert_eq!(e["aggregate_id"], order_id.as_str(), "{lang:?}: {e}");
    assert_eq!(
        e["tenant_id"], "00000000-0000-0000-0000-000000000001",
        "{lang:?}: {e}"
    );
    assert_eq!(
        e["idempotency_key"],
        format!("order.placed:{order_id}").as_str(),
        "{lang:?}: {e}"
    );
    assert_eq!(
        e["payload"],
        serde_json::json!({ "order_id": order_id, "total_cents": 4200 }),
        "{lang:?}: the payload as written: {e}"
    );
    assert_eq!(e["headers"], serde_json::json!({}), "{lang:?}: {e}");
    assert!(
        stdout(&relayed).contains("1 published"),
        "{lang:?}: the relay's summary: {}",
        stdout(&relayed)
    );
    let pending = db.count("published_at IS NULL").await;
    assert_eq!(pending, 0, "{lang:?}: the event is marked published");
}

#[tokio::test]
async fn the_sql_producer_commits_the_order_and_its_event() {
    commits_one_order_and_its_event(Lang::Sql).await;
}

#[tokio::test]
async fn the_sqlx_producer_commits_the_order_and_its_event() {
    commits_one_order_and_its_event(Lang::Sqlx).await;
}

#[tokio::test]
async fn the_node_producer_commits_the_order_and_its_event() {
    commits_one_order_and_its_event(Lang::Node).await;
}

#[tokio::test]
async fn the_python_producer_commits_the_order_and_its_event() {
    commits_one_order_and_its_event(Lang::Python).await;
}

#[tokio::test]
async fn the_java_producer_commits_the_order_and_its_event() {
    commits_one_order_and_its_event(Lang::Java).await;
}

/// Each snippet's transaction fails at COMMIT, after both of its inserts: a deferred constraint
/// trigger on orders rejects orders named `reject-*` at commit time, and says whether the event
/// was in the same transaction by then. Neither row stays, and the relay publishes nothing.
#[tokio::test]
async fn a_transaction_that_fails_at_commit_leaves_neither_row_in_every_language() {
    let db = shop().await;
    db.exec(
        "CREATE FUNCTION reject_order() RETURNS trigger LANGUAGE plpgsql AS $$
         BEGIN
           IF EXISTS (SELECT FROM outbox WHERE aggregate_id = NEW.id) THEN
             RAISE EXCEPTION 'order % rejected at commit, its event beside it', NEW.id;
           END IF;
           RAISE EXCEPTION 'order % rejected at commit, with no event in its transaction', NEW.id;
         END $$;
         CREATE CONSTRAINT TRIGGER orders_reject AFTER INSERT ON orders
           DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.id LIKE 'reject-%')
           EXECUTE FUNCTION reject_order();",
    )
    .await;
    for lang in ALL {
        let order_id = format!("reject-{lang:?}").to_lowercase();
        let out = produce(&db, lang, &order_id, 4200);
        assert!(
            !out.status.success(),
            "{lang:?}: a failed commit must fail the producer: {}",
            stdout(&out)
        );
        assert!(
            stderr(&out).contains("rejected at commit, its event beside it"),
            "{lang:?}: the commit failed with both rows in the transaction: {}",
            stderr(&out)
        );
        assert!(
            !stdout(&out).contains("committed"),
            "{lang:?}: {}",
            stdout(&out)
        );
    }
    let orders: i64 = db.scalar("SELECT count(*) FROM orders").await;
    let events: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!((orders, events), (0, 0), "neither row stays");
    let (relayed, docs) = relay_once(&db);
    assert!(docs.is_empty(), "nothing to relay: {docs:?}");
    assert!(
        stdout(&relayed).contains("0 published"),
        "the relay's summary: {}",
        stdout(&relayed)
    );
}

/// A producer that cannot connect, or is given a malformed URL, fails and prints no password.
/// (psql itself quotes a malformed URL in its error, so the SQL snippet is left out of that case.)
#[tokio::test]
async fn a_producer_that_cannot_connect_fails_and_prints_no_password() {
    let refused = {
        // A port that was free a moment ago: nothing listens there.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        format!("postgres://app:{SECRET}@127.0.0.1:{port}/shop")
    };
    let malformed = [
        format!("postgres://app:{SECRET}@[::1/shop"),
        format!("postgres://app:{SECRET}@127.0.0.1:port/shop"),
    ];
    for lang in ALL {
        let mut urls = vec![refused.clone()];
        if !matches!(lang, Lang::Sql) {
            urls.extend(malformed.iter().cloned());
        }
        for url in urls {
            let mut c = snippet(lang, "o-1", 1);
            c.env("DATABASE_URL", &url)
                .env("OUTBOXCTL_SCHEMA", "public");
            if let Lang::Sql = lang {
                c.arg(&url).args(["-v", "schema=public"]);
            }
            let out = c.output().unwrap();
            let printed = format!("{}{}", stdout(&out), stderr(&out));
            assert!(!out.status.success(), "{lang:?} with {url}: {printed}");
            assert!(
                !printed.contains(SECRET),
                "{lang:?} prints the password of {url}: {printed}"
            );
            assert!(
                !stderr(&out).trim().is_empty(),
                "{lang:?} with {url}: says why it failed"
            );
        }
    }
}
