//! `outboxctl ordering` and its subcommands: the per-key ordering switch kept in the database.

use clap::{Args, Subcommand, ValueEnum};

use super::shared::{env_of, help_of, AuditArgs, DatabaseArgs, OutputArgs, SwitchChangeArgs};

/// Ordered delivery per key (tenant_id, aggregate_type, aggregate_id), switched on in the database.
///
/// Every relay on the outbox reads the switch (within 1 s of a change) and then publishes the
/// events of each key of an ordered aggregate type one claim at a time, in id order: a key's
/// event is published only after every earlier pending event of that key was. Keys are claimed
/// many at a time and published in parallel. A failing head holds only its key; once it is
/// dead-lettered the key is blocked (--on-dead block, the default) until `requeue` or
/// `ordering skip`, or moves on (--on-dead skip).
///
/// Examples:
///   outboxctl ordering enable --aggregate-type order --aggregate-type invoice
///   outboxctl ordering status --json
///   outboxctl ordering skip 4711 --reason 'customer deleted'
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct OrderingArgs {
    #[command(subcommand)]
    pub command: OrderingCommand,
}

#[derive(Debug, Subcommand)]
pub enum OrderingCommand {
    Enable(OrderingEnableArgs),
    Disable(OrderingDisableArgs),
    Status(OrderingStatusArgs),
    Skip(OrderingSkipArgs),
}

/// What a dead-lettered head does to its key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OnDeadArg {
    /// The key waits until the head is requeued or skipped.
    Block,
    /// The rest of the key flows on past the dead head.
    Skip,
}

/// Switch ordered delivery on, for every aggregate type or the named ones (or change --on-dead).
///
/// Running relays honour it within 1 s; rows they claimed before are published as claimed.
///
/// Example: outboxctl ordering enable --aggregate-type order --aggregate-type invoice --on-dead block
#[derive(Debug, Args)]
#[command(mut_args(env_of("reason", "OUTBOXCTL_ORDERING_REASON")))]
pub struct OrderingEnableArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub types: OrderingTypesArgs,

    /// What a dead-lettered head does to its key.
    #[arg(long, env = "OUTBOXCTL_ON_DEAD", value_enum, default_value_t = OnDeadArg::Block)]
    pub on_dead: OnDeadArg,

    #[command(flatten)]
    pub change: SwitchChangeArgs,
}

/// Switch ordered delivery off, for the named aggregate types or (without --aggregate-type)
/// entirely.
///
/// Example: outboxctl ordering disable --aggregate-type invoice
#[derive(Debug, Args)]
#[command(mut_args(env_of("reason", "OUTBOXCTL_ORDERING_REASON")))]
#[command(mut_args(help_of(
    "aggregate_types",
    "An aggregate type to stop ordering (repeatable; `*` is the every-type switch); without it \
     ordering is switched off for every type"
)))]
pub struct OrderingDisableArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub types: OrderingTypesArgs,

    #[command(flatten)]
    pub change: SwitchChangeArgs,
}

/// The aggregate types `ordering enable` and `disable` act on. `disable` says in its own help
/// what the flag means there.
#[derive(Debug, Args)]
pub struct OrderingTypesArgs {
    /// An aggregate type to order (repeatable); without it every type is ordered.
    #[arg(
        long = "aggregate-type",
        env = "OUTBOXCTL_ORDERING_TYPES",
        value_delimiter = ',',
        value_name = "TYPE"
    )]
    pub aggregate_types: Vec<String>,
}

/// Which aggregate types are ordered, their --on-dead, and how many keys are blocked.
///
/// Example: outboxctl ordering status --json
#[derive(Debug, Args)]
pub struct OrderingStatusArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}

/// Skip a key's head so the rest of the key flows: a dead head that blocks its key stops
/// blocking it; a pending head (not in flight) is dead-lettered without blocking. Audited.
///
/// Example: outboxctl ordering skip 4711 --reason 'poison payload, fixed downstream'
#[derive(Debug, Args)]
pub struct OrderingSkipArgs {
    #[command(flatten)]
    pub db: DatabaseArgs,

    /// The head's event id.
    #[arg(value_parser = clap::value_parser!(i64).range(1..), value_name = "ID")]
    pub id: i64,

    /// Why, recorded in the audit table.
    #[arg(long, env = "OUTBOXCTL_SKIP_REASON", value_name = "TEXT")]
    pub reason: Option<String>,

    #[command(flatten)]
    pub audit: AuditArgs,

    #[command(flatten)]
    pub output: OutputArgs,
}
