//! `outboxctl grants`: its flags, apart so that each subcommand's definition is found by its name.

use clap::builder::FalseyValueParser;
use clap::{Args, ValueEnum};

use super::shared::DatabaseArgs;

/// Print the GRANT statements a role needs for one use of outboxctl (or apply them).
///
/// Least privilege on the outbox's schema: `producer` (the application, `publish`), `relay`,
/// `operator` (dead letters, requeue, events, ordering skip, prune) or `monitor` (stats, doctor,
/// the lists). `migrate` and `ordering enable/disable` need the schema's owner. A statement per
/// line, for psql or a migration of your own; `--apply` runs them in one transaction (as a role
/// that may grant them, e.g. the owner).
///
/// Example: outboxctl grants --role outbox_relay --for relay --apply
#[derive(Debug, Args)]
pub struct GrantsArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// The role to grant to (quoted as an identifier).
    #[arg(long, value_name = "NAME", env = "OUTBOXCTL_GRANTS_ROLE")]
    pub role: String,

    /// What the role will do.
    #[arg(
        long = "for",
        value_name = "USE",
        value_enum,
        env = "OUTBOXCTL_GRANTS_FOR"
    )]
    pub for_use: GrantsFor,

    /// Run the statements (one transaction) instead of printing them.
    #[arg(long, env = "OUTBOXCTL_GRANTS_APPLY", value_parser = FalseyValueParser::new())]
    pub apply: bool,
}

/// A use of outboxctl (`crate::db::grants::Use`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum GrantsFor {
    /// The application and `publish`.
    Producer,
    /// `relay`.
    Relay,
    /// `dead`, `requeue`, `events`, `ordering skip`, `prune`.
    Operator,
    /// `stats`, `doctor`, the lists.
    Monitor,
}
