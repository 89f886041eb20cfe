//! The one integration test binary: real PostgreSQL, the real `outboxctl` binary, real sinks.

mod amqp_sink;
mod bench;
mod cli;
mod common;
mod dead;
mod events;
mod fixtures;
mod http_server;
mod http_sink;
mod memory;
mod migrate;
mod nats_sink;
mod prune;
mod publish;
mod redis_sink;
mod relay;
mod requeue;
mod snapshots;
mod stats;
