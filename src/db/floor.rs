//! The relay's saved floor (migration 10, `outbox_relay_floor`): where a `relay --once` run's
//! first claim starts, and when the last claim from the start ran and how long it took. See
//! [`crate::relay::cursor`] for how a run uses it. Migration 11 adds the ordered walk's id floor
//! ([`KeyFloor`], used by [`crate::relay::ordering`]).

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

/// The ordered claim's id floor (migration 11): no row at or below `id` was pending when the
/// saving relay's passes over the keys last looked; the last pass without the floor began
/// `swept_ago` ago and its claims took `sweep_took`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyFloor {
    pub id: i64,
    pub swept_ago: Duration,
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

/// What [`load`] read: the unordered claim's floor, the ordered walk's, and whether the schema
/// has the ordered walk's columns (migration 11) to save it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Loaded {
    pub saved: Saved,
    pub key: Option<KeyFloor>,
    pub key_columns: bool,
}

/// Everything a run saves: the unordered claim's floor and the ordered walk's, either or both.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ToSave {
    pub floor: Option<Floor>,
    pub key: Option<KeyFloor>,
}

/// The saved floors. (`WHERE one`: by the primary key. The relay's sessions disable sequential
/// scans, and a Seq Scan priced at their penalty set JIT compiling, 75 ms, on a one-row table.)
/// The ordered walk's floor is `None` on a schema without migration 11, or when none was saved.
pub async fn load(conn: &mut PgConnection) -> sqlx::Result<Loaded> {
    let (table, key_columns): (bool, bool) = sqlx::query_as(
        "SELECT to_regclass('outbox_relay_floor') IS NOT NULL,
                EXISTS (SELECT FROM pg_attribute
                         WHERE attrelid = to_regclass('outbox_relay_floor')
                           AND attname = 'key_floor' AND NOT attisdropped)",
    )
    .fetch_one(&mut *conn)
    .await?;
    if !table {
        return Ok(Loaded {
            saved: Saved::NoTable,
            key: None,
            key_columns: false,
        });
    }
    let key_cols = if key_columns {
        "key_floor,
         greatest(0, extract(epoch FROM clock_timestamp() - key_swept_at) * 1e6)::bigint,
         greatest(0, extract(epoch FROM key_sweep_took) * 1e6)::bigint"
    } else {
        "NULL::bigint, NULL::bigint, NULL::bigint"
    };
    type Row = (
        chrono::DateTime<chrono::Utc>,
        i64,
        i64,
        i64,
        Option<i64>,
        Option<i64>,
        Option<i64>,
    );
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT available_at, id,
                greatest(0, (extract(epoch FROM clock_timestamp() - swept_at) * 1e6))::bigint,
                greatest(0, (extract(epoch FROM sweep_took) * 1e6))::bigint,
                {key_cols}
           FROM outbox_relay_floor WHERE one"
    ))
    .fetch_optional(&mut *conn)
    .await?;
    let Some((available_at, id, ago, took, key, key_ago, key_took)) = row else {
        return Ok(Loaded {
            saved: Saved::Empty,
            key: None,
            key_columns,
        });
    };
    let key = match (key, key_ago, key_took) {
        (Some(id), Some(ago), Some(took)) => Some(KeyFloor {
            id,
            swept_ago: micros(ago),
            sweep_took: micros(took),
        }),
        _ => None,
    };
    // A row saved by a run with only ordered claims holds no unordered floor: `(epoch, 0)`.
    let saved = if (available_at, id) != (chrono::DateTime::UNIX_EPOCH, 0) {
        Saved::Floor(Floor {
            at: Position { available_at, id },
            swept_ago: micros(ago),
            sweep_took: micros(took),
        })
    } else {
        Saved::Empty
    };
    Ok(Loaded {
        saved,
        key,
        key_columns,
    })
}

/// Saves what a run leaves for the next one (`swept_ago` counted back from the server's clock
/// now), on a schema [`load`] found the table in (and migration 11's columns, when `what.key` is
/// set). What is `None` keeps the value saved before (a row saved first with no unordered floor holds
/// `NO_FLOOR`: position `(epoch, 0)`, which [`load`] reads as nothing saved).
pub async fn save(conn: &mut PgConnection, what: &ToSave) -> sqlx::Result<()> {
    let key = what.key;
    let key_columns = key.is_some();
    if what.floor.is_none() && key.is_none() {
        return Ok(());
    }
    let (key_sets, key_values) = if key_columns {
        (
            ", key_floor = coalesce(excluded.key_floor, f.key_floor),
                key_swept_at = coalesce(excluded.key_swept_at, f.key_swept_at),
                key_sweep_took = coalesce(excluded.key_sweep_took, f.key_sweep_took)",
            "$6, clock_timestamp() - $7 * interval '1 microsecond', $8 * interval '1 microsecond'",
        )
    } else {
        ("", "")
    };
    let key_names = if key_columns {
        ", key_floor, key_swept_at, key_sweep_took"
    } else {
        ""
    };
    let sep = if key_columns { ", " } else { "" };
    let floor = what.floor;
    let sql = format!(
        "INSERT INTO outbox_relay_floor AS f (available_at, id, swept_at, sweep_took{key_names})
         SELECT coalesce($1, 'epoch'), coalesce($2, 0),
                coalesce(clock_timestamp() - $3 * interval '1 microsecond', 'epoch'),
                coalesce($4 * interval '1 microsecond', interval '0'){sep}{key_values}
         ON CONFLICT (one) DO UPDATE
            SET available_at = CASE WHEN $5 THEN excluded.available_at ELSE f.available_at END,
                id = CASE WHEN $5 THEN excluded.id ELSE f.id END,
                swept_at = CASE WHEN $5 THEN excluded.swept_at ELSE f.swept_at END,
                sweep_took = CASE WHEN $5 THEN excluded.sweep_took ELSE f.sweep_took END,
                saved_at = now(){key_sets}"
    );
    let mut q = sqlx::query(&sql)
        .bind(floor.map(|f| f.at.available_at))
        .bind(floor.map(|f| f.at.id))
        .bind(floor.map(|f| as_micros(f.swept_ago)))
        .bind(floor.map(|f| as_micros(f.sweep_took)))
        .bind(floor.is_some());
    if key_columns {
        q = q
            .bind(key.map(|k| k.id))
            .bind(key.map(|k| as_micros(k.swept_ago)))
            .bind(key.map(|k| as_micros(k.sweep_took)));
    }
    q.execute(&mut *conn).await?;
    Ok(())
}

/// Passes `changed` through, having forgotten the key floor ([`forget_key_floor`]) when it is
/// not empty: what a requeue or an `ordering enable` changed.
pub async fn forget_key_floor_if<T>(
    conn: &mut PgConnection,
    changed: Vec<T>,
) -> sqlx::Result<Vec<T>> {
    if !changed.is_empty() {
        forget_key_floor(conn).await?;
    }
    Ok(changed)
}

/// Makes the next `relay --once` run's ordered walk start without a floor (migration 11's
/// `key_floor` set to NULL), because rows were made pending again that may lie below it (a
/// requeue, a newly ordered type). On a schema without the column, or for a role without `UPDATE`
/// on it, it does nothing: the run then finds them at its next pass without the floor
/// ([`crate::relay::ordering`]).
pub async fn forget_key_floor(conn: &mut PgConnection) -> sqlx::Result<()> {
    let may: bool = sqlx::query_scalar(
        "SELECT EXISTS (SELECT FROM pg_attribute a
                         WHERE a.attrelid = to_regclass('outbox_relay_floor')
                           AND a.attname = 'key_floor' AND NOT a.attisdropped
                           AND has_column_privilege(a.attrelid, a.attnum, 'UPDATE'))",
    )
    .fetch_one(&mut *conn)
    .await?;
    if may {
        sqlx::query("UPDATE outbox_relay_floor SET key_floor = NULL")
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

fn micros(us: i64) -> Duration {
    Duration::from_micros(u64::try_from(us).unwrap_or(0))
}

fn as_micros(d: Duration) -> i64 {
    i64::try_from(d.as_micros()).unwrap_or(i64::MAX)
}
