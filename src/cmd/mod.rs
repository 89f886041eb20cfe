//! One module per subcommand. Each takes its clap arguments, resolves them into settings, acts,
//! and returns an exit code. A command never imports another: what two share lives below them, in
//! `ops` (or `select`, `confirm`, `output`).

pub mod bench;
pub mod completions;
pub mod dead;
pub mod demo;
pub mod doctor;
pub mod events;
pub mod grants;
pub mod logmode;
pub mod migrate;
pub mod ordering;
pub mod prune;
pub mod publish;
pub mod relay;
pub mod replay;
pub mod requeue;
pub mod stats;
pub mod top;
