//! What ends a command at the sink: `--sink` (or a sink flag) cannot be used as given, or a
//! `relay` or `replay` run's sink failed as a whole. One publish's failure, which the relay acts on (retry,
//! dead-letter, give back), is a [`SinkError`](super::SinkError) instead. Which exit code each
//! variant means is decided in one place, [`crate::exit`].

use crate::output::plural;

/// A sink error that ends a command with its own exit code (see [`crate::exit::code`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--sink` or a sink flag (`--http-header`, `--kafka-property`, the signing secret) is
    /// malformed, or does not go with the sink's scheme. Names the flag, never a secret.
    #[error("{0}")]
    Invalid(String),
    /// The sink is well formed but cannot be used as given: a file that cannot be opened, a
    /// stdout that is `/dev/null`, a client that cannot be built.
    #[error("{0}")]
    Unusable(String),
    /// A local consumer (stdout, a file) read slower than `--publish-timeout` allows.
    #[error("{cause}: {advice}")]
    Stalled {
        cause: String,
        /// What was done with the batch and what to change.
        advice: &'static str,
    },
    /// The sink was unavailable during a `relay --once` run: the events were given back.
    #[error(
        "the sink ({sink}) is unavailable: {cause}; {} given back untouched (no attempt counted), relayed once it is back",
        plural(*.given_back, "event was", "events were")
    )]
    Unavailable {
        sink: String,
        cause: String,
        given_back: u64,
    },
    /// A `replay` run stopped at the sink: it kept failing for `--retry-for`, rejected an event for
    /// good, or a local consumer went away. `stopped` says which and why; `resume` is the flags
    /// that send the rest.
    #[error("the sink ({sink}) {stopped}; replayed {sent} of {matched}; resume with {resume}")]
    ReplayStopped {
        sink: String,
        stopped: String,
        sent: u64,
        matched: String,
        resume: String,
    },
    /// Every publish of a `relay --once` run failed.
    #[error(
        "the sink ({sink}) failed every publish of the run ({}); they will be retried",
        plural(*.failures, "failure", "failures")
    )]
    EveryPublishFailed { sink: String, failures: u64 },
}

impl Error {
    /// [`Error::Invalid`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }

    /// [`Error::Unusable`].
    pub fn unusable(message: impl Into<String>) -> Self {
        Self::Unusable(message.into())
    }
}
