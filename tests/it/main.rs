//! The one integration test binary: real PostgreSQL, the real `outboxctl` binary.

mod common;
mod dead;
mod events;
mod fixtures;
mod migrate;
mod prune;
mod requeue;
