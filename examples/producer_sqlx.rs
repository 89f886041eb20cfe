//! The producer in Rust with sqlx: one order and its event in ONE transaction (the application's
//! side of the outbox; see examples/producers/README.md).
//!
//!   DATABASE_URL=postgres://... OUTBOXCTL_SCHEMA=public \
//!     cargo run --example producer_sqlx -- o-1001 4200
//!
//! Arguments: the order id and its total in cents (default o-1001 4200). `OUTBOXCTL_SCHEMA` is
//! the schema that holds `outbox` and `orders` (default public). Dropping the transaction without
//! `commit` (an early return on any error), or a failed commit, leaves neither row.
use sqlx::{Connection, Executor, PgConnection};

/// The application's one tenant: `tenant_id` has no default.
const TENANT_ID: &str = "00000000-0000-0000-0000-000000000001";

#[tokio::main]
async fn main() {
    if let Err(e) = produce().await {
        // sqlx's errors name no part of the URL.
        eprintln!("producer_sqlx: {e:#}");
        std::process::exit(1);
    }
}

async fn produce() -> anyhow::Result<()> {
    let url = std::env::var("DATABASE_URL").map_err(|_| anyhow::anyhow!("set DATABASE_URL"))?;
    let schema = std::env::var("OUTBOXCTL_SCHEMA").unwrap_or_else(|_| "public".to_owned());
    let mut args = std::env::args().skip(1);
    let order_id = args.next().unwrap_or_else(|| "o-1001".to_owned());
    let total_cents: i64 = args.next().as_deref().unwrap_or("4200").parse()?;

    let mut conn = PgConnection::connect(&url).await?;
    let set_path = format!("SET search_path TO \"{}\"", schema.replace('"', "\"\""));
    conn.execute(set_path.as_str()).await?;

    let mut tx = conn.begin().await?;
    sqlx::query("INSERT INTO orders (id, total_cents) VALUES ($1, $2)")
        .bind(&order_id)
        .bind(total_cents)
        .execute(&mut *tx)
        .await?;
    // The idempotency key derives from the business fact, so a retried transaction cannot write
    // the event twice. headers and available_at keep their defaults ('{}' and now()).
    let payload = serde_json::json!({ "order_id": order_id, "total_cents": total_cents });
    let key = format!("order.placed:{order_id}");
    sqlx::query(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
         VALUES ($1::uuid, 'order', $2, 'order.placed', $3, $4)
         ON CONFLICT (idempotency_key) DO NOTHING",
    )
    .bind(TENANT_ID)
    .bind(&order_id)
    .bind(&payload)
    .bind(&key)
    .execute(&mut *tx)
    .await?;
    tx.commit().await?;

    println!("committed order {order_id} and its event {key}");
    Ok(())
}
