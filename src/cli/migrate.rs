//! `outboxctl migrate`: its flags, apart so that each subcommand's definition is found by its name.

use clap::builder::FalseyValueParser;
use clap::Args;

use super::shared::{DatabaseArgs, OutputArgs};

/// Create or upgrade the outbox schema (safe when several replicas run it at once).
///
/// Applies the migrations embedded in this binary under an advisory lock: when ten replicas start
/// together one applies them and the rest wait, then find nothing to do; all exit 0.
///
/// Example: outboxctl migrate --schema events
#[derive(Debug, Args)]
pub struct MigrateArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// List applied and pending migrations; change nothing.
    #[arg(long, visible_alias = "dry-run", env = "OUTBOXCTL_MIGRATE_STATUS", value_parser = FalseyValueParser::new())]
    pub status: bool,

    /// Change nothing; exit 0 when the schema is up to date, 6 when migrations are pending
    /// (also a seed-era table `migrate` would adopt, or no outbox at all), 2 when existing
    /// tables conflict with migration 1. For init containers and deploy pipelines.
    #[arg(long, env = "OUTBOXCTL_MIGRATE_CHECK", value_parser = FalseyValueParser::new())]
    pub check: bool,

    #[command(flatten)]
    pub output: OutputArgs,
}
