//! A hot standby (issue 25): the commands that only read work against it; every command that
//! writes refuses with one line saying the database is read-only (exit 3) and changes nothing; a
//! relay claims nothing there, counts no attempt, says so once, and relays as soon as the standby
//! is promoted. The relays' failover under load is a scenario of the fault suite
//! (`faults::scenarios::failover_to_a_promoted_standby`).

use std::time::Duration;

use crate::support::servers::{debian_bin, OwnCluster};
use crate::support::{stderr, stdout, wait_until, TestDb};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reading_commands_work_on_a_hot_standby_and_writing_ones_refuse() {
    let primary = OwnCluster::start(&debian_bin(), crate::support::port(18773), |_| {});
    let db = TestDb::new_at(&primary.url()).await;
    db.seed_ready(5).await;
    db.exec("UPDATE outbox SET dead_lettered_at = now(), last_error = 'x' WHERE id = 1")
        .await;
    let standby = OwnCluster::standby_of(&primary, crate::support::port(18774));
    let on_standby = sqlx::PgPool::connect_lazy(&standby.url()).unwrap();
    let run = |args: &[&str]| {
        let out = db
            .cmd()
            .env("DATABASE_URL", standby.url())
            .args(["--connect-timeout", "1s"])
            .args(args)
            .output()
            .unwrap();
        (out.status.code(), stdout(&out), stderr(&out))
    };
    // The standby has replayed the rows (the wait is for replication, read from the standby).
    let schema = db.schema.clone();
    wait_until(
        Duration::from_secs(30),
        "the standby replayed the rows",
        || {
            let pool = on_standby.clone();
            let sql = format!("SELECT count(*) FROM \"{schema}\".outbox");
            async move {
                sqlx::query_scalar::<_, i64>(&sql)
                    .fetch_one(&pool)
                    .await
                    .is_ok_and(|n| n == 5)
            }
        },
    )
    .await;

    for args in [
        &["stats", "--json"][..],
        &["events", "list", "--json"],
        &["dead", "list", "--json"],
        &["migrate", "--check"],
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, Some(0), "{args:?} on the standby: {err}");
        assert!(!out.is_empty(), "{args:?}: no output");
    }
    let (code, out, err) = run(&["doctor", "--json"]);
    assert!(
        matches!(code, Some(0 | 1)),
        "doctor on the standby: {out}{err}"
    );

    let before: String = db
        .scalar("SELECT string_agg(row_to_json(o)::text, ',' ORDER BY id) FROM outbox o")
        .await;
    for args in [
        &[
            "publish",
            "--event-type",
            "a",
            "--aggregate-type",
            "o",
            "--aggregate-id",
            "1",
            "--payload",
            "{}",
        ][..],
        &["prune", "--older-than", "1ms"],
        &["requeue", "--all"],
        &["events", "cancel", "2", "--yes"],
        &["relay", "--once", "--sink", "null"],
    ] {
        let (code, _, err) = run(args);
        assert_eq!(code, Some(3), "{args:?} on the standby: {err}");
        let last = err.trim_end().lines().last().unwrap_or_default();
        assert!(
            last.starts_with("error: the database is read-only") && last.contains("primary"),
            "{args:?}: {err}"
        );
    }
    let after: String = db
        .scalar("SELECT string_agg(row_to_json(o)::text, ',' ORDER BY id) FROM outbox o")
        .await;
    assert_eq!(
        before, after,
        "a refused command changed the primary's rows"
    );

    // A relay daemon on the standby waits, says so once, and relays once it is promoted (the
    // primary stopped first, as in a failover: nothing more is written there).
    let mut relay = db
        .cmd()
        .env("DATABASE_URL", standby.url())
        .args(["relay", "--sink", "null", "--poll-interval", "100ms"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let log = crate::support::capture(relay.stderr.take().unwrap());
    let said = |log: &std::sync::Mutex<String>| {
        log.lock()
            .unwrap()
            .matches("the database is read-only")
            .count()
    };
    wait_until(Duration::from_secs(30), "the relay met the standby", || {
        let n = said(&log);
        async move { n > 0 }
    })
    .await;
    primary.stop();
    standby.promote();
    let published = || {
        let pool = on_standby.clone();
        let sql =
            format!("SELECT count(*) FROM \"{schema}\".outbox WHERE published_at IS NOT NULL");
        async move {
            sqlx::query_scalar::<_, i64>(&sql)
                .fetch_one(&pool)
                .await
                .unwrap_or(0)
        }
    };
    wait_until(
        Duration::from_secs(30),
        "the promoted standby's rows relayed",
        || {
            let f = published();
            async move { f.await == 4 }
        },
    )
    .await;
    crate::support::signal(&relay, "TERM");
    assert!(relay.wait().unwrap().success());
    let log = log.lock().unwrap().clone();
    assert_eq!(
        log.matches("the database is read-only").count(),
        1,
        "said once:\n{log}"
    );
    assert!(log.contains("the database takes writes again"), "{log}");
    let attempts: i32 = sqlx::query_scalar(&format!(
        "SELECT max(attempt_count) FROM \"{schema}\".outbox WHERE published_at IS NOT NULL"
    ))
    .fetch_one(&on_standby)
    .await
    .unwrap();
    assert_eq!(attempts, 1, "the standby's refusals counted attempts");
}
