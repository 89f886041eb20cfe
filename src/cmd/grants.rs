//! `outboxctl grants`: the GRANT statements of one use of outboxctl ([`crate::db::grants`]),
//! printed for a DBA to run, or applied.

use crate::cli::{GrantsArgs, GrantsFor};
use crate::config::DbConfig;
use crate::db::{self, grants::Use};
use crate::exit::CodedError;
use crate::output;

pub async fn run(args: GrantsArgs) -> anyhow::Result<u8> {
    if args.role.trim().is_empty() {
        return Err(CodedError::usage("--role: give the name of an existing role").into());
    }
    let cfg = DbConfig::from_args(&args.db)?;
    let (u, name) = match args.for_use {
        GrantsFor::Producer => (Use::Producer, "producer"),
        GrantsFor::Relay => (Use::Relay, "relay"),
        GrantsFor::Operator => (Use::Operator, "operator"),
        GrantsFor::Monitor => (Use::Monitor, "monitor"),
    };
    let statements = db::grants::statements(&cfg.schema, &args.role, u);
    if !args.apply {
        // The statements need no database: printed as they are, for review.
        for s in &statements {
            output::print_line(s)?;
        }
        return Ok(crate::exit::OK);
    }
    let mut conn = db::connect_migrated(&cfg).await?;
    if !db::grants::role_exists(&mut conn, &args.role).await? {
        return Err(CodedError::usage(format!(
            "--role `{}`: no such role; create it first (CREATE ROLE ... LOGIN)",
            output::escape_controls(&args.role)
        ))
        .into());
    }
    db::grants::apply(&mut conn, &statements).await?;
    output::print_summary(format_args!(
        "granted role `{}` what `{}` needs on schema `{}` ({} statements)",
        output::escape_controls(&args.role),
        name,
        cfg.schema.name(),
        statements.len()
    ))?;
    Ok(crate::exit::OK)
}
