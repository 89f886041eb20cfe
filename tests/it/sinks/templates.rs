//! `{placeholder}` templates (`--http-header` values, NATS subject, Redis stream, AMQP routing
//! key): an unknown placeholder is refused at start (exit 2) naming it and listing the valid ones;
//! in an `--http-header` value it is not named (a header's value may be a credential).

use crate::support::servers::TestServer;
use crate::support::{stderr, TestDb};

const VALID: &str =
    "{id}, {idempotency_key}, {event_type}, {aggregate_type}, {aggregate_id}, {tenant_id}";

#[tokio::test]
async fn an_unknown_placeholder_is_refused_at_start() {
    let db = TestDb::with_backlog(1).await;
    let server = TestServer::start(0, |_| (200, vec![]));
    let url = server.url();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![
                "--sink".into(),
                url.clone(),
                "--http-header".into(),
                "X-Type: {evnt_type}".into(),
            ],
            "{evnt_type}",
        ),
        (
            vec![
                "--sink".into(),
                "nats://127.0.0.1:4222?subject=outbox.{type}".into(),
            ],
            "{type}",
        ),
        (
            vec![
                "--sink".into(),
                "redis://127.0.0.1:6379/0?stream=outbox.{ aggregate_type }".into(),
            ],
            "{ aggregate_type }",
        ),
        (
            vec![
                "--sink".into(),
                "amqp://guest:guest@127.0.0.1:5672/%2f?routing_key={Event_Type}".into(),
            ],
            "{Event_Type}",
        ),
    ];
    for (args, bad) in cases {
        let out = db
            .cmd()
            .args(["relay", "--once"])
            .args(&args)
            .output()
            .unwrap();
        let err = stderr(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(VALID), "{args:?}: {err}");
        if args.iter().any(|a| a == "--http-header") {
            assert!(
                err.contains("unknown placeholder (not shown; it may hold a secret)")
                    && !err.contains(bad),
                "{args:?}: {err}"
            );
        } else {
            assert!(
                err.contains(&format!("unknown placeholder `{bad}`")),
                "{args:?}: {err}"
            );
        }
    }
    assert!(server.accepted().is_empty());
    let pending = db.count("published_at IS NULL AND attempt_count = 0").await;
    assert_eq!(pending, 1, "nothing was claimed");
}

#[tokio::test]
async fn placeholder_values_are_not_expanded_again() {
    let db = TestDb::new().await;
    db.exec(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         VALUES ('00000000-0000-0000-0000-000000000001', 'order', '{tenant_id}', 'order.placed', '{}', 'k-1')",
    )
    .await;
    let server = TestServer::start(0, |_| (200, vec![]));
    db.relay(server.url())
        .args([
            "--http-header",
            "X-Agg: {aggregate_id}/{event_type} {literal: 1}",
        ])
        .once(0);
    let got = server.accepted();
    assert_eq!(
        got[0].header("x-agg"),
        Some("{tenant_id}/order.placed {literal: 1}")
    );
}
