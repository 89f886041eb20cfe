//! The relay: its step (claim, publish, settle) against the real database and the daemon of the
//! real binary, ordered delivery per key, the pipeline of steps in flight, memory bounds, its
//! metrics endpoints and its logs.

mod log_mode;
mod logs;
mod memory;
mod metrics;
mod ordering;
mod pages;
mod pipeline;
mod step;
