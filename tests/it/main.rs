//! The one integration test binary: real PostgreSQL, the real `outboxctl` binary, real sinks.

mod bench;
mod cli;
mod common;
mod http_server;
mod http_sink;
mod migrate;
mod publish;
mod relay;
mod snapshots;
mod stats;
