//! What reaches stderr: outboxctl's own lines only by default and at -v/-vv/-vvv; never a payload
//! byte (not even as a library's decimal dump of a message); a bad log filter is a usage error.

use crate::support::servers::TestServer;
use crate::support::{bin, stderr, stdout, TestDb};

const AMQP: &str = "amqp://guest:guest@127.0.0.1:5672/%2f";

/// Inserts two ready events whose payload holds `canary`.
async fn seed_canary(db: &TestDb, canary: &str) {
    sqlx::query(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         SELECT '00000000-0000-0000-0000-000000000001', 'order', 'o-' || g, 'order.placed',
                jsonb_build_object('secret', $1::text), 'canary-' || g
           FROM generate_series(1, 2) g",
    )
    .bind(canary)
    .execute(&db.pool)
    .await
    .unwrap();
}

/// `canary` in any form a logger could print it: as text, or as a byte array in decimal or hex.
fn leaks(text: &str, canary: &str) -> bool {
    let dec = canary
        .bytes()
        .map(|b| b.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    let hex = canary
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect::<String>();
    text.contains(canary) || text.contains(&dec) || text.to_ascii_lowercase().contains(&hex)
}

fn canary() -> String {
    format!("CANARY{}", &uuid::Uuid::new_v4().simple().to_string()[..12])
}

#[tokio::test]
async fn an_unroutable_rabbitmq_message_never_logs_its_payload() {
    for verbosity in [None, Some("-v"), Some("-vv"), Some("-vvv")] {
        let db = TestDb::new().await;
        let canary = canary();
        seed_canary(&db, &canary).await;
        let queue = format!("obx-nowhere-{}", uuid::Uuid::new_v4().simple());
        let mut cmd = db.cmd();
        cmd.args(["relay", "--once", "--sink"])
            .arg(format!("{AMQP}?routing_key={queue}"));
        if let Some(v) = verbosity {
            cmd.arg(v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(
            !leaks(&err, &canary) && !leaks(&stdout(&out), &canary),
            "{verbosity:?}: {err}"
        );
        assert!(
            !err.contains("returned us a message"),
            "no library lines: {err}"
        );
        // Unroutable on every event of the batch: an outage, so the row is given back untouched
        // and the reason is on stderr.
        let last_error: Option<String> = db
            .scalar("SELECT last_error FROM outbox WHERE id = 1")
            .await;
        assert_eq!(last_error, None);
        assert!(err.contains("no queue is bound"), "{err}");
    }
}

#[tokio::test]
async fn failing_http_publishes_never_log_the_payload() {
    for status in [500u16, 422] {
        for verbosity in [None, Some("-vv"), Some("-vvv")] {
            let db = TestDb::new().await;
            let canary = canary();
            seed_canary(&db, &canary).await;
            let server = TestServer::start(0, move |_| (status, vec![]));
            let mut cmd = db.cmd();
            cmd.args(["relay", "--once", "--sink", &server.url()]);
            if let Some(v) = verbosity {
                cmd.arg(v);
            }
            let out = cmd.output().unwrap();
            let err = stderr(&out);
            assert!(
                !leaks(&err, &canary) && !leaks(&stdout(&out), &canary),
                "{status} {verbosity:?}: {err}"
            );
            if verbosity == Some("-vv") {
                assert!(
                    err.contains("publish failed"),
                    "-vv shows outboxctl's debug lines: {err}"
                );
            }
        }
    }
}

#[tokio::test]
async fn verbose_flags_raise_only_outboxctls_own_level() {
    let db = TestDb::with_backlog(3).await;
    let server = TestServer::start(0, |_| (200, vec![]));
    let err = stderr(&db.relay(server.url()).args(["-vvv"]).once(0));
    // Third-party crates (sqlx, hyper, reqwest, rustls) log a great deal at trace.
    for word in [
        "hyper",
        "reqwest",
        "sqlx",
        "rustls",
        "connecting to",
        "pooling",
    ] {
        assert!(
            !err.contains(word),
            "no third-party line at -vvv ({word}): {err}"
        );
    }
    // The explicit escape hatch shows them.
    let out = db
        .relay(server.url())
        .env("OUTBOXCTL_LOG", "info,sqlx=info")
        .once(0);
    assert!(stderr(&out).contains("relay starting"), "{}", stderr(&out));
}

#[tokio::test]
async fn a_failed_amqp_login_logs_no_library_errors_and_no_password() {
    let db = TestDb::with_backlog(2).await;
    let pw = canary();
    for verbosity in [None, Some("-vv")] {
        let mut cmd = db.cmd();
        cmd.args(["relay", "--once", "--sink"]).arg(format!(
            "amqp://guest:{pw}@127.0.0.1:5672/%2f?routing_key=x"
        ));
        if let Some(v) = verbosity {
            cmd.arg(v);
        }
        let out = cmd.output().unwrap();
        assert_eq!(out.status.code(), Some(5), "{}", stderr(&out));
        let err = stderr(&out);
        assert!(!err.contains(&pw) && !stdout(&out).contains(&pw), "{err}");
        for line in err.lines() {
            assert!(
                !line.contains(" ERROR "),
                "no library ERROR lines on a login failure: {err}"
            );
        }
        assert!(
            err.contains("RabbitMQ"),
            "the login failure is reported: {err}"
        );
        db.exec("UPDATE outbox SET available_at = now()").await;
    }
    let last_error: Option<String> = db
        .scalar("SELECT last_error FROM outbox WHERE id = 1")
        .await;
    assert_eq!(last_error, None, "an outage leaves the row untouched");
}

#[test]
fn a_bad_log_filter_is_a_usage_error_naming_the_variable() {
    for (var, value) in [
        ("OUTBOXCTL_LOG", "outboxctl=loud"),
        ("OUTBOXCTL_LOG", "verbose"),
        ("OUTBOXCTL_LOG", "[{"),
        ("RUST_LOG", "debg"),
    ] {
        let out = bin()
            .args(["stats", "--database-url", "postgres://nobody@127.0.0.1:1/x"])
            .env(var, value)
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {err}");
        assert_eq!(err.lines().count(), 1, "one line: {err}");
        assert!(
            err.starts_with("error: ") && err.contains(var) && err.contains(value),
            "{err}"
        );
    }
    // Empty means unset; OUTBOXCTL_LOG wins over a RUST_LOG meant for another program.
    for (var, value) in [("OUTBOXCTL_LOG", ""), ("RUST_LOG", "warn,other_app=debug")] {
        let out = bin()
            .args(["stats", "--database-url", "postgres://nobody@127.0.0.1:1/x"])
            .env(var, value)
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(3),
            "{var}={value}: {}",
            stderr(&out)
        );
    }
    let out = bin()
        .args(["stats", "--database-url", "postgres://nobody@127.0.0.1:1/x"])
        .env("RUST_LOG", "debg")
        .env("OUTBOXCTL_LOG", "warn")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
}
