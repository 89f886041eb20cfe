//! Room on the outbox's pages for the lease claim's row version (migration 12's fillfactor):
//! while a long snapshot keeps pruning from making room, a claim whose new version fits on its
//! row's page is a HOT update (no new entry in any index, so nothing more for the walks to read).

use std::time::{Duration, Instant};

use crate::support::TestDb;

/// The table's (updates, HOT updates) once the relay's backends have reported them: a backend
/// sends its counts when it exits, a moment after the relay process has.
async fn updates(db: &TestDb, at_least: i64) -> (i64, i64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let got: (i64, i64) = db
            .row("SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relid = 'outbox'::regclass")
            .await;
        if got.0 >= at_least || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn under_a_held_snapshot_about_half_of_the_lease_claims_stay_on_their_page() {
    const EVENTS: i64 = 3000;
    // Migration 12's 50 (these rows are small: 88% were HOT when this was written); migration
    // 2's 70 (37%); the 100 of a table nobody tuned: with every page full from its INSERTs and
    // nothing prunable, no claim fits beside its row.
    for (fillfactor, least, most) in [
        (None, 0.6, 1.0),
        (Some(70), 0.0, 0.5),
        (Some(100), 0.0, 0.05),
    ] {
        let db = TestDb::new().await;
        let set: String = db
            .scalar("SELECT array_to_string(reloptions, ',') FROM pg_class WHERE oid = 'outbox'::regclass")
            .await;
        assert_eq!(set, "fillfactor=50", "migration 12");
        if let Some(f) = fillfactor {
            db.exec(&format!("ALTER TABLE outbox SET (fillfactor = {f})"))
                .await;
        }
        db.seed_ready(EVENTS).await;
        // Its own connection, closed (ending the snapshot) when the test ends or fails.
        let mut snapshot = db.pool.acquire().await.unwrap().detach();
        for sql in [
            "BEGIN ISOLATION LEVEL REPEATABLE READ",
            "SELECT count(*) FROM outbox",
        ] {
            sqlx::query(sql).execute(&mut snapshot).await.unwrap();
        }
        db.relay("null").mode("lease").once(0);
        assert_eq!(db.count("published_at IS NULL").await, 0);
        // A claim and a settle per event; the settle sets published_at (indexed): never HOT.
        let (all, hot) = updates(&db, 2 * EVENTS).await;
        assert_eq!(all, 2 * EVENTS, "updates");
        let share = hot as f64 / EVENTS as f64;
        assert!(
            (least..=most).contains(&share),
            "fillfactor {fillfactor:?}: {hot} of {EVENTS} claims were HOT"
        );
    }
}
