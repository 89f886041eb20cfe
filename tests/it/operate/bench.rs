//! `outboxctl bench` smoke run: tiny sizes; asserts every figure is produced and positive (never a
//! timing threshold), and that the scratch schema is gone afterwards.

use crate::support::{base_url, bin, stderr};

#[tokio::test]
async fn bench_smoke_produces_every_figure_and_cleans_up() {
    let out = bin()
        .args([
            "bench",
            "--events",
            "2000",
            "--batch-size",
            "200",
            "--relays",
            "2",
            "--rate",
            "200",
        ])
        .args([
            "--latency-duration",
            "1s",
            "--delayed-events",
            "10",
            "--prune-rows",
            "3000",
            "--json",
        ])
        .env("DATABASE_URL", base_url())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // The scratch schema is named after the bench's process id: check that one, not every
    // bench schema on the server (another checkout's run may hold its own meanwhile).
    let scratch = format!("outboxctl_bench_{}", out.id());
    let out = out.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for path in [
        "/publish/per_second",
        "/drain/per_second",
        "/drain/peak_rss_mib",
        "/sql_ceiling/per_second",
        "/drain_vs_ceiling",
        "/latency/p50_ms",
        "/latency/p99_ms",
        "/delayed/p99_ms",
        "/prune/per_second",
        "/prune/longest_batch_ms",
    ] {
        let x = v
            .pointer(path)
            .and_then(|x| x.as_f64())
            .unwrap_or_else(|| panic!("{path} missing in {v}"));
        assert!(x > 0.0, "{path} = {x}");
    }
    assert_eq!(v["publish"]["events"], 2000);
    assert_eq!(
        v["drain"]["events"], 2000,
        "the drain relayed the whole backlog"
    );
    assert_eq!(v["latency"]["events"], 200);
    assert_eq!(v["delayed"]["events"], 10);
    assert_eq!(v["prune"]["events"], 3000);
    let pool = sqlx::PgPool::connect(&base_url()).await.unwrap();
    let left: i64 = sqlx::query_scalar("SELECT count(*) FROM pg_namespace WHERE nspname = $1")
        .bind(&scratch)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(left, 0, "scratch schema {scratch} dropped");
}
