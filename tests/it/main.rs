//! The one integration test binary: real PostgreSQL, the real `outboxctl` binary, real sinks.

mod adopt;
mod amqp_sink;
mod audit;
mod bench;
mod cli;
mod cli_args;
mod common;
mod dead;
mod events;
mod fixtures;
mod http_server;
mod http_sink;
mod logs;
mod migrate;
mod nats_sink;
mod pipes;
mod prune;
mod publish;
mod redis_sink;
mod relay;
mod requeue;
mod row_headers;
mod sink_secrets;
mod snapshots;
mod stats;
mod templates;
