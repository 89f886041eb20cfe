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
