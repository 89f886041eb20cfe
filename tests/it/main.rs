//! The one integration test binary: real PostgreSQL, the real `outboxctl` binary, real sinks.

mod common;
mod dead;
mod events;
mod fixtures;
mod http_server;
mod http_sink;
mod migrate;
mod prune;
mod relay;
mod requeue;
