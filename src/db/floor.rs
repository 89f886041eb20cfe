//! The relay's saved floor (migration 10, `outbox_relay_floor`): where a `relay --once` run's
//! first claim starts, and when the last claim from the start ran and how long it took. See
//! [`crate::relay::cursor`] for how a run uses it.

use std::time::Duration;

use sqlx::PgConnection;

use crate::db::relay::Position;

/// What a run saved for the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Floor {
    /// Where the saving run's claims had reached.
    pub at: Position,
    /// How long ago (by the server's clock) the last claim from the start began.
    pub swept_ago: Duration,
    /// How long that claim took.
    pub sweep_took: Duration,
}

/// What [`load`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Saved {
    /// The schema lacks migration 10: the run starts at the start, as before, and saves nothing.
    NoTable,
    /// Nothing saved yet.
    Empty,
    Floor(Floor),
}

/// The saved floor. (`WHERE one`: by the primary key. The relay's sessions disable sequential
/// scans, and a Seq Scan priced at their penalty set JIT compiling, 75 ms, on a one-row table.)
pub async fn load(conn: &mut PgConnection) -> sqlx::Result<Saved> {
    let table: bool = sqlx::query_scalar("SELECT to_regclass('outbox_relay_floor') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    if !table {
        return Ok(Saved::NoTable);
    }
    let row: Option<(chrono::DateTime<chrono::Utc>, i64, i64, i64)> = sqlx::query_as(
        "SELECT available_at, id,
                greatest(0, (extract(epoch FROM clock_timestamp() - swept_at) * 1e6))::bigint,
                greatest(0, (extract(epoch FROM sweep_took) * 1e6))::bigint
           FROM outbox_relay_floor WHERE one",
    )
    .fetch_optional(&mut *conn)
    .await?;
    Ok(row.map_or(Saved::Empty, |(available_at, id, ago, took)| {
        Saved::Floor(Floor {
            at: Position { available_at, id },
            swept_ago: micros(ago),
            sweep_took: micros(took),
        })
    }))
}

/// Saves `floor` for the next run (`swept_ago` counted back from the server's clock now), on a
/// schema [`load`] found the table in.
pub async fn save(conn: &mut PgConnection, floor: &Floor) -> sqlx::Result<()> {
    sqlx::query(
        "INSERT INTO outbox_relay_floor AS f (available_at, id, swept_at, sweep_took)
         SELECT $1, $2, clock_timestamp() - $3 * interval '1 microsecond',
                $4 * interval '1 microsecond'
         ON CONFLICT (one) DO UPDATE
            SET available_at = excluded.available_at, id = excluded.id,
                swept_at = excluded.swept_at, sweep_took = excluded.sweep_took,
                saved_at = now()",
    )
    .bind(floor.at.available_at)
    .bind(floor.at.id)
    .bind(as_micros(floor.swept_ago))
    .bind(as_micros(floor.sweep_took))
    .execute(&mut *conn)
    .await?;
    Ok(())
}

fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

fn as_micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
