//! A sink that rejects the relay's credentials: the password never appears on stderr, stdout or
//! in `last_error`. NATS and Redis with authentication are servers this test starts on its own
//! ports (the shared ones have no auth); RabbitMQ is the shared one (wrong password for guest).

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::support::{stderr, stdout, wait_until, TestDb};

/// A server process this test started; killed and reaped on drop, also when the test fails.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn start(cmd: &mut Command, port: u16) -> Server {
    let child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start server");
    let server = Server(child);
    wait_until(Duration::from_secs(20), "the server to listen", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    server
}

fn canary() -> String {
    format!(
        "PwCanary{}",
        &uuid::Uuid::new_v4().simple().to_string()[..12]
    )
}

/// Runs `relay --once` against `sink` (default verbosity and -vv) and checks that `secret` is in
/// no output and in no `last_error`; returns the sink's error as the run reported it: the rows'
/// `last_error` for a per-event failure, the `error:` line on stderr for an outage (the rows are
/// then given back untouched, with no `last_error`).
async fn assert_hidden(db: &TestDb, sink: &str, secret: &str) -> String {
    let mut reported = String::new();
    for v in [None, Some("-vv")] {
        let mut cmd = db.cmd();
        cmd.args(["relay", "--once", "--publish-timeout", "3s", "--sink", sink]);
        if let Some(v) = v {
            cmd.arg(v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
        for text in [stdout(&out), stderr(&out)] {
            assert!(!text.contains(secret), "{v:?}: {text}");
        }
        if let Some(line) = stderr(&out).lines().find(|l| l.starts_with("error: ")) {
            reported = line.to_owned();
        }
        db.exec("UPDATE outbox SET available_at = now()").await;
    }
    let errors: Vec<Option<String>> = sqlx::query_scalar("SELECT last_error FROM outbox")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert!(!errors.is_empty());
    for e in errors.iter().flatten() {
        assert!(!e.contains(secret), "{e}");
    }
    errors.into_iter().flatten().next().unwrap_or(reported)
}

#[tokio::test]
async fn nats_auth_failure_never_shows_the_password() {
    let port = crate::support::port(18310);
    let _server = start(
        Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &port.to_string()])
            .args(["--user", "obx", "--pass", "the-real-one"]),
        port,
    )
    .await;
    let db = TestDb::with_backlog(2).await;
    let pw = canary();
    // The client retries in the background: the error stored is the publish timeout, the
    // reason is a WARN.
    let out = db
        .cmd()
        .args(["relay", "--once", "--publish-timeout", "3s", "--sink"])
        .arg(format!(
            "nats://obx:{pw}@127.0.0.1:{port}?subject=outbox.{{event_type}}"
        ))
        .output()
        .unwrap();
    assert!(
        stderr(&out).contains("authorization violation"),
        "{}",
        stderr(&out)
    );
    db.exec("UPDATE outbox SET available_at = now()").await;
    assert_hidden(
        &db,
        &format!("nats://obx:{pw}@127.0.0.1:{port}?subject=outbox.{{event_type}}"),
        &pw,
    )
    .await;
}

#[tokio::test]
async fn redis_auth_failure_never_shows_the_password() {
    let port = crate::support::port(18311);
    let _server = start(
        Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args([
                "--save",
                "",
                "--appendonly",
                "no",
                "--requirepass",
                "the-real-one",
            ]),
        port,
    )
    .await;
    let db = TestDb::with_backlog(2).await;
    let pw = canary();
    let err = assert_hidden(
        &db,
        &format!("redis://default:{pw}@127.0.0.1:{port}/0?stream=s"),
        &pw,
    )
    .await;
    assert!(err.contains("Redis"), "{err}");
}

#[tokio::test]
async fn amqp_login_failure_never_shows_the_password() {
    let db = TestDb::with_backlog(2).await;
    let pw = canary();
    let err = assert_hidden(
        &db,
        &format!("amqp://guest:{pw}@127.0.0.1:5672/%2f?routing_key=x"),
        &pw,
    )
    .await;
    assert!(err.contains("RabbitMQ"), "{err}");
}

#[tokio::test]
async fn http_auth_failure_and_refused_connections_never_show_the_password_or_query() {
    let db = TestDb::with_backlog(2).await;
    let pw = canary();
    let server = crate::support::servers::TestServer::start(0, |_| (401, vec![]));
    let err = assert_hidden(
        &db,
        &format!("http://bob:{pw}@127.0.0.1:{}/in?token={pw}", server.port),
        &pw,
    )
    .await;
    assert!(err.contains("401"), "{err}");
    assert_hidden(
        &db,
        &format!("http://bob:{pw}@127.0.0.1:9/in?token={pw}"),
        &pw,
    )
    .await;
}
