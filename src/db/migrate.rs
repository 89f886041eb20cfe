//! Schema migrations: the embedded `migrations/` directory, applied under advisory locks.
//!
//! Also adoption of a seed-era outbox: an application that followed seed 000 created `outbox` and
//! `processed_messages` itself, before outboxctl ran. When such tables match what migration 1
//! creates, `apply` records migration 1 as applied (a baseline row in `_sqlx_migrations` with
//! migration 1's checksum, so later `sqlx::migrate!` runs agree) and applies the rest, all in one
//! transaction; tables that differ are refused, naming each difference, with nothing changed.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::migrate::{Migrate, Migrator};
use sqlx::{Connection, PgConnection};

use crate::config::Schema;

/// The migrations compiled into this binary.
pub static MIGRATOR: Migrator = sqlx::migrate!("./migrations");

/// Advisory lock class for outboxctl's own migrate lock (first key of the two-int form).
const MIGRATE_LOCK_CLASS: i32 = 0x6f62_7801; // "obx" + 1

/// `execution_time` of a baseline row: migration 1 was not run, the existing tables were adopted.
/// sqlx only reads `version`, `checksum` and `success`; this marks the row for `--status`.
const BASELINE_EXECUTION_TIME: i64 = -1;

/// The migration that adds the relay's columns (claim_token) and trigger: every command that reads
/// or relays events needs at least this one.
pub const RELAY_SCHEMA: i64 = 2;
/// The migration that adds the audit table: every command that changes events needs it.
pub const AUDIT_SCHEMA: i64 = 4;
/// The migration that lets the audit trail record `events edit`.
pub const EDIT_SCHEMA: i64 = 5;
/// Migration 6: `outbox_ordering`, the key index, `blocks_key` (ordered delivery per aggregate).
pub const ORDERING_SCHEMA: i64 = 6;
/// Migration 12: the audit trail records `replay` runs.
pub const REPLAY_SCHEMA: i64 = 12;
/// Log mode's column and tables (`outboxctl log`, migration 14), and its retry set's keys
/// (migration 15: ordered delivery in log mode).
pub const LOG_SCHEMA: i64 = 15;

/// Where one migration stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum State {
    /// Applied.
    Applied,
    /// Recorded as applied by adopting tables that already matched it (migration 1 only).
    Baseline,
    /// Not applied yet: `migrate` applies it.
    Pending,
    /// Migration 1, pending, but its tables already exist and match: `migrate` adopts them.
    Adoptable,
    /// Migration 1, pending, but its tables already exist and differ: `migrate` refuses.
    Conflict,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::Applied => "applied",
            State::Baseline => "baseline",
            State::Pending => "pending",
            State::Adoptable => "adoptable",
            State::Conflict => "conflict",
        }
    }
}

/// One migration and whether (and when) it was applied.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct MigrationStatus {
    /// The migration's number (`migrations/NNNN_*.sql`).
    pub version: i64,
    pub description: String,
    /// Applied (or recorded as a baseline).
    pub applied: bool,
    pub state: State,
    /// When it was applied; null while pending.
    pub installed_on: Option<DateTime<Utc>>,
    /// With state `conflict`: how the existing tables differ from migration 1, one per item.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub differences: Vec<String>,
}

/// What `apply` did.
#[derive(Debug, Clone, Default)]
pub struct Applied {
    /// Existing seed-era tables were adopted as migration 1 (a baseline row was recorded).
    pub adopted: bool,
    /// Versions this call ran.
    pub versions: Vec<i64>,
}

/// Creates the schema if needed, adopts matching seed-era tables, and applies pending migrations.
/// Safe to run from many processes at once: the first takes the lock and applies; the others wait
/// for it and find nothing pending.
pub async fn apply(conn: &mut PgConnection, schema: &Schema) -> anyhow::Result<Applied> {
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

async fn apply_locked(conn: &mut PgConnection, schema: &Schema) -> anyhow::Result<Applied> {
    let before = applied_rows(conn).await?;
    if up_to_date(&before) {
        return Ok(Applied::default());
    }
    let adopt = if before.iter().any(|r| r.version == 1) {
        false
    } else {
        match inspect(conn, schema).await? {
            Existing::None => false,
            Existing::Matches => true,
            Existing::Differs(diffs) => return Err(conflict_error(schema, &diffs).into()),
        }
    };
    // The identifier is validated by `Schema::parse` and quoted; it is not user text in SQL.
    sqlx::raw_sql(&format!("CREATE SCHEMA IF NOT EXISTS {}", schema.quoted()))
        .execute(&mut *conn)
        .await?;
    if adopt {
        // One transaction for the baseline and every later migration (sqlx runs each of them in a
        // savepoint here): if one fails, the baseline is not recorded either and nothing changed.
        let mut tx = conn.begin().await?;
        tx.ensure_migrations_table().await?;
        record_baseline(&mut tx).await?;
        MIGRATOR.run(&mut *tx).await.map_err(|e| {
            anyhow::anyhow!(
                "adopting the existing outbox tables: {e}; nothing was changed (the baseline was rolled back too)"
            )
        })?;
        tx.commit().await?;
    } else {
        MIGRATOR.run(&mut *conn).await?;
    }
    let after = applied_rows(conn).await?;
    Ok(Applied {
        adopted: adopt,
        versions: after
            .iter()
            .map(|r| r.version)
            .filter(|v| !(before.iter().any(|b| b.version == *v) || (adopt && *v == 1)))
            .collect(),
    })
}

/// Whether `applied` is exactly the embedded migrations, each unchanged (same checksum): then
/// `migrate` has nothing to do and does nothing, so it needs only read access (SELECT on
/// `_sqlx_migrations`). Applying anyway would not: `CREATE SCHEMA IF NOT EXISTS` needs CREATE on
/// the database even when the schema exists, and sqlx's run creates its table `IF NOT EXISTS`,
/// which needs CREATE on the schema. Anything else (a pending, failed, changed or unknown
/// migration) goes through sqlx's run, which applies it or says what is wrong.
fn up_to_date(applied: &[AppliedRow]) -> bool {
    applied.len() == MIGRATOR.iter().count()
        && MIGRATOR.iter().all(|m| {
            applied
                .iter()
                .any(|a| a.version == m.version && *a.checksum == *m.checksum)
        })
}

/// Records migration 1 as applied without running it: same version, description and checksum as
/// sqlx's own row would have, and [`BASELINE_EXECUTION_TIME`].
async fn record_baseline(conn: &mut PgConnection) -> sqlx::Result<()> {
    let m1 = MIGRATOR
        .iter()
        .find(|m| m.version == 1)
        .expect("migration 1 is embedded");
    sqlx::query(
        "INSERT INTO _sqlx_migrations (version, description, success, checksum, execution_time)
         VALUES ($1, $2, TRUE, $3, $4)",
    )
    .bind(m1.version)
    .bind(&*m1.description)
    .bind(&*m1.checksum)
    .bind(BASELINE_EXECUTION_TIME)
    .execute(conn)
    .await?;
    Ok(())
}

fn conflict_error(schema: &Schema, diffs: &[String]) -> super::Error {
    super::Error::AdoptConflict {
        schema: schema.name().to_owned(),
        differences: diffs.to_vec(),
    }
}

#[derive(Debug, sqlx::FromRow)]
struct AppliedRow {
    version: i64,
    description: String,
    installed_on: DateTime<Utc>,
    execution_time: i64,
    checksum: Vec<u8>,
}

/// The successful rows of `_sqlx_migrations`; none when the table does not exist.
async fn applied_rows(conn: &mut PgConnection) -> anyhow::Result<Vec<AppliedRow>> {
    let has_table: bool = sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
        .fetch_one(&mut *conn)
        .await?;
    if !has_table {
        return Ok(Vec::new());
    }
    Ok(sqlx::query_as(
        "SELECT version, description, installed_on, execution_time, checksum
           FROM _sqlx_migrations WHERE success ORDER BY version",
    )
    .fetch_all(&mut *conn)
    .await?)
}

/// The versions of every embedded migration up to `through` that are not applied in the schema.
/// Reads only.
pub async fn missing_through(conn: &mut PgConnection, through: i64) -> anyhow::Result<Vec<i64>> {
    let applied = applied_rows(conn).await?;
    Ok(MIGRATOR
        .iter()
        .map(|m| m.version)
        .filter(|v| *v <= through && !applied.iter().any(|a| a.version == *v))
        .collect())
}

/// Every migration this binary knows, and any applied one it does not, with its state; for a
/// pending migration 1, whether existing tables can be adopted. Reads only: works on a database
/// that was never migrated.
pub async fn status(
    conn: &mut PgConnection,
    schema: &Schema,
) -> anyhow::Result<Vec<MigrationStatus>> {
    let applied = applied_rows(conn).await?;
    let first = if applied.iter().any(|a| a.version == 1) {
        Existing::None
    } else {
        inspect(conn, schema).await?
    };
    let mut out: Vec<MigrationStatus> = MIGRATOR
        .iter()
        .map(|m| {
            let row = applied.iter().find(|a| a.version == m.version);
            let (state, differences) = match (row, m.version, &first) {
                (Some(r), _, _) if r.execution_time == BASELINE_EXECUTION_TIME => {
                    (State::Baseline, vec![])
                }
                (Some(_), _, _) => (State::Applied, vec![]),
                (None, 1, Existing::Matches) => (State::Adoptable, vec![]),
                (None, 1, Existing::Differs(d)) => (State::Conflict, d.clone()),
                (None, _, _) => (State::Pending, vec![]),
            };
            MigrationStatus {
                version: m.version,
                description: m.description.to_string(),
                applied: row.is_some(),
                state,
                installed_on: row.map(|r| r.installed_on),
                differences,
            }
        })
        .collect();
    for r in applied {
        if !out.iter().any(|m| m.version == r.version) {
            out.push(MigrationStatus {
                version: r.version,
                description: r.description,
                applied: true,
                state: State::Applied,
                installed_on: Some(r.installed_on),
                differences: vec![],
            });
        }
    }
    out.sort_by_key(|m| m.version);
    Ok(out)
}

/// What migration 1's tables look like in a schema that has not recorded migration 1.
#[derive(Debug, Clone, PartialEq)]
enum Existing {
    /// Neither table exists: migration 1 runs normally.
    None,
    /// Both exist and match migration 1.
    Matches,
    /// At least one exists, and they differ from migration 1 in these ways.
    Differs(Vec<String>),
}

/// A column as migration 1 creates it, as the catalog prints it (`format_type`, `pg_get_expr`).
struct ColumnSpec {
    name: &'static str,
    ty: &'static str,
    not_null: bool,
    default: Option<&'static str>,
}

const fn col(
    name: &'static str,
    ty: &'static str,
    not_null: bool,
    default: Option<&'static str>,
) -> ColumnSpec {
    ColumnSpec {
        name,
        ty,
        not_null,
        default,
    }
}

const TSTZ: &str = "timestamp with time zone";

/// migrations/0001_outbox.sql's `outbox`, column by column (a test checks this against a schema
/// made by running migration 1 itself).
const OUTBOX_COLUMNS: [ColumnSpec; 15] = [
    col(
        "id",
        "bigint",
        true,
        Some("nextval('outbox_id_seq'::regclass)"),
    ),
    col("tenant_id", "uuid", true, None),
    col("aggregate_type", "text", true, None),
    col("aggregate_id", "text", true, None),
    col("event_type", "text", true, None),
    col("payload", "jsonb", true, None),
    col("headers", "jsonb", true, Some("'{}'::jsonb")),
    col("idempotency_key", "text", true, None),
    col("created_at", TSTZ, true, Some("now()")),
    col("available_at", TSTZ, true, Some("now()")),
    col("locked_until", TSTZ, false, None),
    col("attempt_count", "integer", true, Some("0")),
    col("published_at", TSTZ, false, None),
    col("dead_lettered_at", TSTZ, false, None),
    col("last_error", "text", false, None),
];

/// migrations/0001_outbox.sql's `processed_messages`.
const PROCESSED_COLUMNS: [ColumnSpec; 3] = [
    col("consumer", "text", true, None),
    col("message_id", "text", true, None),
    col("processed_at", TSTZ, true, Some("now()")),
];

/// Columns a later migration adds to `outbox`: an existing one would make that migration fail.
const LATER_COLUMNS: [(&str, i64); 2] = [("claim_token", 2), ("xid", 14)];

/// The claim's partial index, as `pg_get_indexdef` prints it after `USING `.
const READY_INDEX: (&str, &str) = (
    "outbox_ready_idx",
    "btree (available_at, id) WHERE ((published_at IS NULL) AND (dead_lettered_at IS NULL))",
);

#[derive(Debug, sqlx::FromRow)]
struct CatalogColumn {
    table_name: String,
    name: String,
    ty: String,
    not_null: bool,
    default: Option<String>,
    /// pg_attribute.attidentity / attgenerated: '' unless an identity or generated column.
    identity: String,
    generated: String,
}

#[derive(Debug, sqlx::FromRow)]
struct CatalogIndex {
    table_name: String,
    name: String,
    /// pg_get_indexdef after "USING ", e.g. "btree (available_at, id) WHERE (...)".
    def: String,
    is_unique: bool,
    is_primary: bool,
    partial: bool,
}

/// Reads the catalog entries of migration 1's tables in `schema` and compares them with
/// migration 1. Reads only.
/// Whether `migrate` would adopt the tables of a schema that has not recorded migration 1 (they
/// match it, or there are none). Reads only.
pub async fn adoptable(conn: &mut PgConnection, schema: &Schema) -> anyhow::Result<bool> {
    Ok(!matches!(
        inspect(conn, schema).await?,
        Existing::Differs(_)
    ))
}

async fn inspect(conn: &mut PgConnection, schema: &Schema) -> anyhow::Result<Existing> {
    let tables: Vec<(String, String)> = catalog(conn, schema, CATALOG_TABLES).await?;
    if tables.is_empty() {
        return Ok(Existing::None);
    }
    let columns = catalog(conn, schema, CATALOG_COLUMNS).await?;
    let indexes = catalog(conn, schema, CATALOG_INDEXES).await?;
    Ok(compare(&tables, &columns, &indexes))
}

/// Migration 1's relations that exist in `schema`, with their relkind. By schema name, not
/// `to_regclass`, so a same-named temporary table cannot stand in.
const CATALOG_TABLES: &str = "SELECT c.relname::text, c.relkind::text
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relname IN ('outbox', 'processed_messages')";

/// The columns of migration 1's tables as the catalog prints them: `format_type` for the type
/// (`jsonb`, `timestamp with time zone`) and `pg_get_expr` for the default, which is how the
/// specs above are written, so the comparison is of text.
const CATALOG_COLUMNS: &str = "SELECT c.relname::text AS table_name, a.attname::text AS name,
                format_type(a.atttypid, a.atttypmod) AS ty, a.attnotnull AS not_null,
                pg_get_expr(d.adbin, d.adrelid) AS default,
                a.attidentity::text AS identity, a.attgenerated::text AS generated
           FROM pg_attribute a
           JOIN pg_class c ON c.oid = a.attrelid
           JOIN pg_namespace n ON n.oid = c.relnamespace
           LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
          WHERE n.nspname = $1 AND c.relname IN ('outbox', 'processed_messages')
            AND a.attnum > 0 AND NOT a.attisdropped
          ORDER BY c.relname, a.attnum";

/// The indexes of migration 1's tables (constraints are backed by one each): the part of
/// `pg_get_indexdef` after `USING `, which leaves out the names of index, schema and table.
const CATALOG_INDEXES: &str = "SELECT t.relname::text AS table_name, i.relname::text AS name,
                substr(pg_get_indexdef(x.indexrelid),
                       strpos(pg_get_indexdef(x.indexrelid), ' USING ') + 7) AS def,
                x.indisunique AS is_unique, x.indisprimary AS is_primary,
                x.indpred IS NOT NULL AS partial
           FROM pg_index x
           JOIN pg_class i ON i.oid = x.indexrelid
           JOIN pg_class t ON t.oid = x.indrelid
           JOIN pg_namespace n ON n.oid = t.relnamespace
          WHERE n.nspname = $1 AND t.relname IN ('outbox', 'processed_messages')";

/// Runs `sql` (one of the `CATALOG_*` queries) about `schema` (its name is `$1`), for all its
/// rows.
async fn catalog<T>(
    conn: &mut PgConnection,
    schema: &Schema,
    sql: &'static str,
) -> sqlx::Result<Vec<T>>
where
    T: for<'r> sqlx::FromRow<'r, sqlx::postgres::PgRow> + Send + Unpin,
{
    sqlx::query_as(sql)
        .bind(schema.name())
        .fetch_all(conn)
        .await
}

/// The differences between the catalog entries and migration 1, one line each.
fn compare(
    tables: &[(String, String)],
    columns: &[CatalogColumn],
    indexes: &[CatalogIndex],
) -> Existing {
    let mut diffs = Vec::new();
    for (table, spec) in [
        ("outbox", &OUTBOX_COLUMNS[..]),
        ("processed_messages", &PROCESSED_COLUMNS[..]),
    ] {
        match tables.iter().find(|t| t.0 == table).map(|t| t.1.as_str()) {
            None => {
                diffs.push(format!("table {table} is missing"));
                continue;
            }
            Some("r") => {}
            Some(kind) => {
                let what = match kind {
                    "v" => "a view",
                    "m" => "a materialized view",
                    "p" => "a partitioned table",
                    "f" => "a foreign table",
                    _ => "not a table",
                };
                diffs.push(format!("{table} is {what}, migration 1 has a table"));
                continue;
            }
        }
        let cols: Vec<&CatalogColumn> = columns.iter().filter(|c| c.table_name == table).collect();
        let prefix = if table == "outbox" {
            String::new()
        } else {
            format!("{table}.")
        };
        for want in spec {
            let Some(got) = cols.iter().find(|c| c.name == want.name) else {
                diffs.push(format!("column {prefix}{} is missing", want.name));
                continue;
            };
            let name = format!("{prefix}{}", want.name);
            if got.ty != want.ty {
                diffs.push(format!(
                    "column {name} is {}, migration 1 has {}",
                    got.ty, want.ty
                ));
            }
            match (got.not_null, want.not_null) {
                (false, true) => diffs.push(format!(
                    "column {name} allows NULL, migration 1 has NOT NULL"
                )),
                (true, false) => diffs.push(format!(
                    "column {name} is NOT NULL, migration 1 allows NULL"
                )),
                _ => {}
            }
            if !got.identity.is_empty() {
                diffs.push(format!(
                    "column {name} is an identity column, migration 1 has {}",
                    want.default
                        .map(|d| format!("a default of {d}"))
                        .unwrap_or_else(|| "no default".into())
                ));
            } else if !got.generated.is_empty() {
                diffs.push(format!(
                    "column {name} is a generated column, migration 1 has {}",
                    want.default
                        .map(|d| format!("a default of {d}"))
                        .unwrap_or_else(|| "no default".into())
                ));
            } else {
                match (got.default.as_deref(), want.default) {
                    (Some(g), Some(w)) if g != w => diffs.push(format!(
                        "column {name} defaults to {g}, migration 1 has {w}"
                    )),
                    (Some(g), None) => diffs.push(format!(
                        "column {name} defaults to {g}, migration 1 has no default"
                    )),
                    (None, Some(w)) => {
                        diffs.push(format!("column {name} has no default, migration 1 has {w}"))
                    }
                    _ => {}
                }
            }
        }
        // Extra columns are the application's business, unless they break outboxctl's writes or
        // collide with a later migration.
        for got in cols
            .iter()
            .filter(|c| !spec.iter().any(|s| s.name == c.name))
        {
            let name = format!("{prefix}{}", got.name);
            if let Some((_, v)) = LATER_COLUMNS
                .iter()
                .find(|(c, _)| table == "outbox" && *c == got.name)
            {
                diffs.push(format!(
                    "column {name} already exists, but migration {v} adds it"
                ));
            } else if got.not_null
                && got.default.is_none()
                && got.identity.is_empty()
                && got.generated.is_empty()
            {
                diffs.push(format!(
                    "column {name} is an extra NOT NULL column without a default (outboxctl's inserts cannot fill it)"
                ));
            }
        }
    }
    let on = |table: &'static str| indexes.iter().filter(move |i| i.table_name == table);
    if tables.iter().any(|t| t.0 == "outbox" && t.1 == "r") {
        if !on("outbox").any(|i| i.is_primary && i.def == "btree (id)") {
            diffs.push("table outbox has no primary key (id)".into());
        }
        if !on("outbox").any(|i| i.is_unique && !i.partial && i.def == "btree (idempotency_key)") {
            diffs.push(
                "unique constraint on (idempotency_key) is missing (seed producers' ON CONFLICT (idempotency_key) needs it)"
                    .into(),
            );
        }
        let (name, def) = READY_INDEX;
        match on("outbox").find(|i| i.name == name) {
            None => diffs.push(format!(
                "index {name} {} is missing",
                def.trim_start_matches("btree ")
            )),
            Some(i) if i.def != def => diffs.push(format!(
                "index {name} is {}, migration 1 has {}",
                i.def.trim_start_matches("btree "),
                def.trim_start_matches("btree ")
            )),
            Some(_) => {}
        }
    }
    if tables
        .iter()
        .any(|t| t.0 == "processed_messages" && t.1 == "r")
        && !on("processed_messages")
            .any(|i| i.is_primary && i.def == "btree (consumer, message_id)")
    {
        diffs.push("table processed_messages has no primary key (consumer, message_id)".into());
    }
    if diffs.is_empty() {
        Existing::Matches
    } else {
        Existing::Differs(diffs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seed_catalog() -> (Vec<(String, String)>, Vec<CatalogColumn>, Vec<CatalogIndex>) {
        let tables = vec![
            ("outbox".to_owned(), "r".to_owned()),
            ("processed_messages".to_owned(), "r".to_owned()),
        ];
        let mut columns = Vec::new();
        for (table, spec) in [
            ("outbox", &OUTBOX_COLUMNS[..]),
            ("processed_messages", &PROCESSED_COLUMNS[..]),
        ] {
            for c in spec {
                columns.push(CatalogColumn {
                    table_name: table.into(),
                    name: c.name.into(),
                    ty: c.ty.into(),
                    not_null: c.not_null,
                    default: c.default.map(str::to_owned),
                    identity: String::new(),
                    generated: String::new(),
                });
            }
        }
        let idx = |table: &str, name: &str, def: &str, unique, primary, partial| CatalogIndex {
            table_name: table.into(),
            name: name.into(),
            def: def.into(),
            is_unique: unique,
            is_primary: primary,
            partial,
        };
        let indexes = vec![
            idx("outbox", "outbox_pkey", "btree (id)", true, true, false),
            idx(
                "outbox",
                "outbox_idempotency_key_key",
                "btree (idempotency_key)",
                true,
                false,
                false,
            ),
            idx("outbox", READY_INDEX.0, READY_INDEX.1, false, false, true),
            idx(
                "processed_messages",
                "processed_messages_pkey",
                "btree (consumer, message_id)",
                true,
                true,
                false,
            ),
        ];
        (tables, columns, indexes)
    }

    #[test]
    fn the_seed_catalog_matches() {
        let (t, c, i) = seed_catalog();
        assert_eq!(compare(&t, &c, &i), Existing::Matches);
    }

    #[test]
    fn identity_ids_views_and_generated_columns_are_named() {
        let (mut t, mut c, i) = seed_catalog();
        let id = c.iter_mut().find(|c| c.name == "id").unwrap();
        id.default = None;
        id.identity = "d".into();
        let pt = c.iter_mut().find(|c| c.name == "processed_at").unwrap();
        pt.default = None;
        pt.generated = "s".into();
        assert_eq!(
            compare(&t, &c, &i),
            Existing::Differs(vec![
                "column id is an identity column, migration 1 has a default of nextval('outbox_id_seq'::regclass)".into(),
                "column processed_messages.processed_at is a generated column, migration 1 has a default of now()".into(),
            ])
        );
        t[1].1 = "v".into();
        let Existing::Differs(d) = compare(&t, &c, &i) else {
            panic!("a view must differ")
        };
        assert!(
            d.contains(&"processed_messages is a view, migration 1 has a table".to_owned()),
            "{d:?}"
        );
    }

    #[test]
    fn extra_columns_are_fine_unless_they_break_inserts() {
        let (t, mut c, i) = seed_catalog();
        let extra = |name: &str, not_null, default: Option<&str>| CatalogColumn {
            table_name: "outbox".into(),
            name: name.into(),
            ty: "text".into(),
            not_null,
            default: default.map(str::to_owned),
            identity: String::new(),
            generated: String::new(),
        };
        c.push(extra("trace_id", false, None));
        c.push(extra("region", true, Some("'eu'::text")));
        assert_eq!(compare(&t, &c, &i), Existing::Matches);
        c.push(extra("owner", true, None));
        assert_eq!(
            compare(&t, &c, &i),
            Existing::Differs(vec![
                "column owner is an extra NOT NULL column without a default (outboxctl's inserts cannot fill it)".into()
            ])
        );
    }
}
