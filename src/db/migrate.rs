//! Schema migrations: the embedded `migrations/` directory, applied under advisory locks.

use chrono::{DateTime, Utc};
use sqlx::migrate::Migrator;
use sqlx::PgConnection;

use crate::config::Schema;

/// The migrations compiled into this binary.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Advisory lock class for outboxctl's own migrate lock (first key of the two-int form).
const MIGRATE_LOCK_CLASS: i32 = 0x6f62_7801; // "obx" + 1

/// One migration and whether (and when) it was applied.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MigrationStatus {
    pub version: i64,
    pub description: String,
    pub applied: bool,
    pub installed_on: Option<DateTime<Utc>>,
}

/// Creates the schema if needed and applies pending migrations. Safe to run from many processes at
/// once: the first takes the lock and applies; the others wait for it and find nothing pending.
/// Returns the versions this call applied.
pub async fn apply(conn: &mut PgConnection, schema: &Schema) -> anyhow::Result<Vec<i64>> {
    sqlx::query("SELECT pg_advisory_lock($1, hashtext($2))")
        .bind(MIGRATE_LOCK_CLASS)
        .bind(schema.name())
        .execute(&mut *conn)
        .await?;
    let result = apply_locked(conn, schema).await;
    let unlock = sqlx::query("SELECT pg_advisory_unlock($1, hashtext($2))")
        .bind(MIGRATE_LOCK_CLASS)
        .bind(schema.name())
        .execute(&mut *conn)
        .await;
    let applied = result?;
    unlock?;
    Ok(applied)
}

async fn apply_locked(conn: &mut PgConnection, schema: &Schema) -> anyhow::Result<Vec<i64>> {
    // The identifier is validated by `Schema::parse` and quoted; it is not user text in SQL.
    sqlx::raw_sql(&format!("CREATE SCHEMA IF NOT EXISTS {}", schema.quoted()))
        .execute(&mut *conn)
        .await?;
    let before = applied_versions(conn).await?;
    MIGRATOR.run(&mut *conn).await?;
    let after = applied_versions(conn).await?;
    Ok(after.into_iter().filter(|v| !before.contains(v)).collect())
}

async fn applied_versions(conn: &mut PgConnection) -> anyhow::Result<Vec<i64>> {
    Ok(status(conn)
        .await?
        .into_iter()
        .filter(|m| m.applied)
        .map(|m| m.version)
        .collect())
}

/// Every migration this binary knows, and any applied one it does not, with its state.
/// Reads only: works on a database that was never migrated.
pub async fn status(conn: &mut PgConnection) -> anyhow::Result<Vec<MigrationStatus>> {
    let has_table: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    let applied: Vec<(i64, String, DateTime<Utc>)> = if has_table {
        sqlx::query_as("SELECT version, description, installed_on FROM _sqlx_migrations WHERE success ORDER BY version")
            .fetch_all(&mut *conn)
            .await?
    } else {
        Vec::new()
    };
    let mut out: Vec<MigrationStatus> = MIGRATOR
        .iter()
        .map(|m| {
            let installed = applied.iter().find(|a| a.0 == m.version).map(|a| a.2);
            MigrationStatus {
                version: m.version,
                description: m.description.to_string(),
                applied: installed.is_some(),
                installed_on: installed,
            }
        })
        .collect();
    for (version, description, installed_on) in applied {
        if !out.iter().any(|m| m.version == version) {
            out.push(MigrationStatus {
                version,
                description,
                applied: true,
                installed_on: Some(installed_on),
            });
        }
    }
    out.sort_by_key(|m| m.version);
    Ok(out)
}
