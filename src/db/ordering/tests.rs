//! The ordered claim's statements, checked as text (the claims themselves run against the
//! database in tests/it/relay/ordering.rs).

use super::*;

#[test]
fn the_unordered_claim_is_todays_with_the_ordered_types_left_out() {
    let ready = crate::db::relay::ready_filtered(10, NOT_ORDERED);
    assert!(ready.contains("WHERE aggregate_type <> ALL"), "{ready}");
    assert!(ready.contains("AND published_at IS NULL"), "{ready}");
    assert!(ready.contains("FOR UPDATE SKIP LOCKED"), "{ready}");
}

#[test]
fn one_claim_statement_per_mode() {
    for all in [true, false] {
        assert!(claim_lease_sql(all).contains("claim_token = $13"));
        assert!(claim_tx_sql(all).contains("published_at = now()"));
    }
    assert!(claim_tx_sql(false).contains("unnest($4::text[]) ty(t)"));
    assert!(!claim_tx_sql(true).contains("unnest("));
}
