//! The one integration test binary: real PostgreSQL, the real `outboxctl` binary.

mod cli;
mod common;
mod migrate;
mod publish;
mod snapshots;
mod stats;
