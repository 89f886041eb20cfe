//! `outboxctl migrate`: apply the embedded migrations, or show their status.

use serde::Serialize;

use crate::cli::MigrateArgs;
use crate::config::DbConfig;
use crate::db::{self, migrate::MigrationStatus};
use crate::output;

#[derive(Debug, Serialize)]
struct ApplyReport<'a> {
    schema: &'a str,
    applied: Vec<i64>,
    migrations: Vec<MigrationStatus>,
}

pub async fn run(args: MigrateArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let mut conn = db::connect(&cfg).await?;
    if args.status {
        let migrations = db::migrate::status(&mut conn).await?;
        if args.output.json {
            output::print_json(&ApplyReport {
                schema: cfg.schema.name(),
                applied: vec![],
                migrations,
            })?;
        } else {
            print_status(&migrations)?;
        }
        return Ok(crate::exit::OK);
    }
    let applied = db::migrate::apply(&mut conn, &cfg.schema).await?;
    let migrations = db::migrate::status(&mut conn).await?;
    if args.output.json {
        output::print_json(&ApplyReport {
            schema: cfg.schema.name(),
            applied,
            migrations,
        })?;
    } else if applied.is_empty() {
        output::print_summary(format_args!(
            "schema `{}` is up to date ({})",
            cfg.schema.name(),
            output::plural(migrations.len() as u64, "migration", "migrations")
        ))?;
    } else {
        output::print_summary(format_args!(
            "applied {} to schema `{}`: {}",
            output::plural(applied.len() as u64, "migration", "migrations"),
            cfg.schema.name(),
            applied
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))?;
    }
    Ok(crate::exit::OK)
}

fn print_status(migrations: &[MigrationStatus]) -> anyhow::Result<()> {
    let mut t = output::table(&["version", "description", "state", "installed on"]);
    for m in migrations {
        t.add_row(vec![
            m.version.to_string(),
            m.description.clone(),
            if m.applied {
                "applied".into()
            } else {
                "pending".into()
            },
            m.installed_on.map(|t| t.to_rfc3339()).unwrap_or_default(),
        ]);
    }
    output::print_table(&t)
}
