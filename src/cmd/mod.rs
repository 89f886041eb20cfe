//! One module per subcommand. Each takes its clap arguments, resolves them into settings, acts,
//! and returns an exit code.

pub mod bench;
pub mod completions;
pub mod demo;
pub mod migrate;
pub mod publish;
pub mod relay;
pub mod stats;
