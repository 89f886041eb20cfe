//! The one integration test binary: real PostgreSQL, the real `outboxctl` binary, real sinks.
//! The tests are grouped by area; the harness they share is in `support`.

mod cli;
mod database;
mod faults;
mod operate;
mod relay;
mod sinks;
mod support;
