//! outboxctl: operate a transactional outbox on PostgreSQL.
//!
//! `main.rs` parses the command line and calls [`run`]; everything else lives here so tests can
//! drive the same code.

pub mod cli;
pub mod cmd;
pub mod config;
pub mod confirm;
pub mod db;
pub mod docs;
pub mod event;
pub mod exit;
pub mod json;
pub mod lock;
pub mod logging;
pub mod ops;
pub mod output;
pub mod relay;
pub mod schema;
pub mod select;
pub mod sink;
pub mod size;
pub mod when;

use cli::{Cli, Command};

impl Cli {
    /// Whether this invocation is a long-running daemon (it logs at info by default).
    pub fn is_daemon(&self) -> bool {
        matches!(&self.command, Command::Relay(r) if !r.once)
    }
}

/// Runs the parsed command line and returns the process exit code.
pub fn run(cli: Cli) -> anyhow::Result<u8> {
    output::set_quiet(cli.log.quiet);
    if let Command::Completions(args) = cli.command {
        return cmd::completions::run(args);
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let log_format = cli.log.log_format;
    // The use a missing privilege is explained against (`outboxctl grants --for`).
    use db::grants::Use;
    let grants_for = match &cli.command {
        Command::Publish(_) => Use::Producer,
        Command::Relay(_) => Use::Relay,
        Command::Stats(_) | Command::Top(_) | Command::Doctor(_) | Command::Migrate(_) => {
            Use::Monitor
        }
        _ => Use::Operator,
    };
    runtime.block_on(async move {
        let result = match cli.command {
            Command::Migrate(args) => cmd::migrate::run(args).await,
            Command::Publish(args) => cmd::publish::run(args).await,
            Command::Stats(args) => cmd::stats::run(args).await,
            Command::Top(args) => cmd::top::run(args).await,
            Command::Dead(args) => cmd::dead::run(args).await,
            Command::Requeue(args) => cmd::requeue::run(args).await,
            Command::Replay(args) => cmd::replay::run(*args).await,
            Command::Ordering(args) => cmd::ordering::run(args).await,
            Command::LogMode(args) => cmd::logmode::run(args).await,
            Command::Events(args) => cmd::events::run(args).await,
            Command::Prune(args) => cmd::prune::run(args).await,
            Command::Relay(args) => cmd::relay::run(args, log_format).await,
            Command::Demo(args) => cmd::demo::run(args).await,
            Command::Doctor(args) => cmd::doctor::run(args).await,
            Command::Grants(args) => cmd::grants::run(args).await,
            Command::Bench(args) => cmd::bench::run(args).await,
            Command::Completions(_) => unreachable!("handled above"),
        }
        .map_err(db::explain_pooler)
        .map_err(db::explain_read_only);
        match result {
            Err(e) => Err(db::explain_privilege(e, grants_for).await),
            ok => ok,
        }
    })
}
