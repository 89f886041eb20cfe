//! `outboxctl migrate`: apply the embedded migrations (adopting seed-era tables that match
//! migration 1), or show their status.

use serde::Serialize;

use crate::cli::MigrateArgs;
use crate::config::DbConfig;
use crate::db::{
    self,
    migrate::{MigrationStatus, State},
};
use crate::output;

#[derive(Debug, Serialize, schemars::JsonSchema)]
struct ApplyReport<'a> {
    /// The schema holding the outbox.
    schema: &'a str,
    /// Existing seed-era tables were adopted as migration 1 (a baseline was recorded).
    adopted: bool,
    /// Versions applied by this run.
    applied: Vec<i64>,
    /// Every migration this binary embeds, and where it stands.
    migrations: Vec<MigrationStatus>,
}

/// `migrate --check --json`.
#[derive(Debug, Serialize, schemars::JsonSchema)]
struct CheckReport<'a> {
    schema: &'a str,
    /// No migration is pending, adoptable or conflicting.
    up_to_date: bool,
    /// Versions `outboxctl migrate` would apply (an adoptable migration 1 included).
    pending: Vec<i64>,
    /// Migration 1's tables exist and differ: `migrate` refuses (exit 2).
    conflict: bool,
    /// The exit status: 0 up to date, 6 pending, 2 conflict.
    exit_code: u8,
    /// Every migration this binary embeds, and where it stands.
    migrations: Vec<MigrationStatus>,
}

/// The exit code of `migrate --check` for these states: conflict first (a person must act), then
/// pending, else OK.
pub fn check_code(migrations: &[MigrationStatus]) -> u8 {
    if migrations.iter().any(|m| m.state == State::Conflict) {
        crate::exit::USAGE
    } else if migrations
        .iter()
        .any(|m| matches!(m.state, State::Pending | State::Adoptable))
    {
        crate::exit::MIGRATIONS_PENDING
    } else {
        crate::exit::OK
    }
}

async fn check(conn: &mut sqlx::PgConnection, cfg: &DbConfig, json: bool) -> anyhow::Result<u8> {
    let migrations = db::migrate::status(conn, &cfg.schema).await?;
    let code = check_code(&migrations);
    let pending: Vec<i64> = migrations
        .iter()
        .filter(|m| matches!(m.state, State::Pending | State::Adoptable | State::Conflict))
        .map(|m| m.version)
        .collect();
    let name = cfg.schema.name();
    if json {
        output::print_json(&CheckReport {
            schema: name,
            up_to_date: code == crate::exit::OK,
            pending,
            conflict: code == crate::exit::USAGE,
            exit_code: code,
            migrations,
        })?;
        return Ok(code);
    }
    let list = crate::output::comma_list(&pending);
    match code {
        crate::exit::OK => output::print_summary(format_args!(
            "schema `{name}` is up to date ({})",
            output::plural(migrations.len() as u64, "migration", "migrations")
        ))?,
        crate::exit::USAGE => output::print_line(format_args!(
            "schema `{name}` has outbox tables that conflict with migration 1, so `outboxctl migrate` refuses them; see `outboxctl migrate --status --schema {name}`"
        ))?,
        _ => output::print_line(format_args!(
            "schema `{name}` has {} pending: {list}{}; run `outboxctl migrate --schema {name}`",
            output::plural(pending.len() as u64, "migration", "migrations"),
            if migrations.iter().any(|m| m.state == State::Adoptable) {
                " (migration 1 adopts the existing seed-era tables)"
            } else {
                ""
            }
        ))?,
    }
    Ok(code)
}

pub async fn run(args: MigrateArgs) -> anyhow::Result<u8> {
    let cfg = DbConfig::from_args(&args.db)?;
    let mut conn = db::connect(&cfg).await?;
    if args.check {
        return check(&mut conn, &cfg, args.output.json).await;
    }
    if args.status {
        let migrations = db::migrate::status(&mut conn, &cfg.schema).await?;
        if args.output.json {
            output::print_json(&ApplyReport {
                schema: cfg.schema.name(),
                adopted: false,
                applied: vec![],
                migrations,
            })?;
        } else {
            print_status(cfg.schema.name(), &migrations)?;
        }
        return Ok(crate::exit::OK);
    }
    let done = db::migrate::apply(&mut conn, &cfg.schema).await?;
    let migrations = db::migrate::status(&mut conn, &cfg.schema).await?;
    if args.output.json {
        output::print_json(&ApplyReport {
            schema: cfg.schema.name(),
            adopted: done.adopted,
            applied: done.versions,
            migrations,
        })?;
        return Ok(crate::exit::OK);
    }
    if done.adopted {
        output::print_summary(format_args!(
            "adopted the existing outbox tables as migration 1 (baseline; they already matched it)"
        ))?;
    }
    if done.versions.is_empty() && !done.adopted {
        output::print_summary(format_args!(
            "schema `{}` is up to date ({})",
            cfg.schema.name(),
            output::plural(migrations.len() as u64, "migration", "migrations")
        ))?;
    } else if !done.versions.is_empty() {
        output::print_summary(format_args!(
            "applied {} to schema `{}`: {}",
            output::plural(done.versions.len() as u64, "migration", "migrations"),
            cfg.schema.name(),
            done.versions
                .iter()
                .map(|v| v.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))?;
    }
    Ok(crate::exit::OK)
}

fn print_status(schema: &str, migrations: &[MigrationStatus]) -> anyhow::Result<()> {
    let mut t = output::table(&["version", "description", "state", "installed on"]);
    for m in migrations {
        output::add_row(
            &mut t,
            vec![
                m.version.to_string(),
                m.description.clone(),
                m.state.as_str().to_owned(),
                m.installed_on.map(|t| t.to_rfc3339()).unwrap_or_default(),
            ],
        );
    }
    output::print_table(&t)?;
    for m in migrations {
        match m.state {
            State::Adoptable => output::print_line(format_args!(
                "migration {}: schema `{schema}` already has its tables (created outside outboxctl) and they match; `outboxctl migrate` records it as applied (baseline) and applies the rest",
                m.version
            ))?,
            State::Conflict => {
                output::print_line(format_args!(
                    "migration {}: schema `{schema}` already has its tables, but they differ, so `outboxctl migrate` refuses (exit 2):",
                    m.version
                ))?;
                for d in &m.differences {
                    output::print_line(format_args!("  {d}"))?;
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The `--json` outputs of `migrate` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    use crate::schema::Output;
    vec![
        Output::of::<ApplyReport<'static>>(
            "migrate --json",
            "Also `migrate --status --json`, which applies nothing (`applied` is empty).",
        ),
        Output::of::<CheckReport<'static>>("migrate --check --json", ""),
    ]
}
