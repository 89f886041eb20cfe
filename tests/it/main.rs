//! The one integration test binary: real PostgreSQL, the real `outboxctl` binary.

mod common;
mod migrate;
