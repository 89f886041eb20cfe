//! Exit codes: the contract scripts and cron wrappers rely on, in one place. Each constant is
//! declared once, through [`exit_codes!`], which also lists it in [`TABLES`]: the reference page
//! docs/reference/exit-codes.md is generated from those tables.
//!
//! Which code an error means is decided here too, in one match ([`code`]): the layers below the
//! commands (`db`, `sink`, `config`, `confirm`) return errors that say what went wrong, never
//! which code; a command's own usage errors are [`CodedError`]s.

use std::process::ExitCode;

/// One documented exit code, as [`TABLES`] lists it (docs/reference/exit-codes.md is generated
/// from these).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Code {
    /// The constant's name, e.g. `SINK`.
    pub name: &'static str,
    pub code: u8,
    /// The constant's doc comment: what the code means.
    pub doc: &'static str,
}

/// A group of exit codes and the commands it applies to.
#[derive(Debug, Clone, Copy)]
pub struct Table {
    /// The commands these codes belong to (the page's heading), e.g. `` `stats --check` ``.
    pub applies_to: &'static str,
    /// Where the constants live, e.g. `exit::nagios`.
    pub path: &'static str,
    /// How the table relates to the others.
    pub note: &'static str,
    pub codes: &'static [Code],
}

/// Declares the constants and, from the same lines, the table that lists them: a code's number
/// and its meaning are written once, and the reference page cannot leave one out.
macro_rules! exit_codes {
    ($table:ident; $( $(#[doc = $doc:expr])+ $name:ident = $value:expr; )+) => {
        $( $(#[doc = $doc])+ pub const $name: u8 = $value; )+
        /// Every constant of this module, in order.
        pub const $table: &[$crate::exit::Code] = &[
            $( $crate::exit::Code { name: stringify!($name), code: $name, doc: concat!($($doc, "\n"),+) }, )+
        ];
    };
}

exit_codes! {
    CODES;
    /// Success.
    OK = 0;
    /// A failure not covered below.
    FAILURE = 1;
    /// Bad usage or bad input (flags, JSON lines, ids): nothing was changed.
    USAGE = 2;
    /// The database could not be reached (or rejected the login, or is older than PostgreSQL 14).
    DATABASE = 3;
    /// Another run holds the lock (e.g. an overlapping `prune` from cron).
    LOCKED = 4;
    /// `relay`: the sink failed: every publish of a `--once` run failed, the sink was unavailable
    /// during a `--once` run (rows given back untouched), or a local consumer stalled. `replay`:
    /// the sink failed for `--retry-for`, or rejected an event; the error names the `--from-id`
    /// to resume with.
    SINK = 5;
    /// `migrate --check`: migrations are pending (or seed-era tables wait to be adopted, or there is
    /// no outbox yet): run `outboxctl migrate`.
    MIGRATIONS_PENDING = 6;
    /// The role lacks a privilege on the outbox's schema (the error names the table and the
    /// `outboxctl grants` command that prints what to grant).
    PRIVILEGE = 7;
    /// Stopped by SIGINT or SIGTERM before finishing (`demo`; `replay`, whose error names the
    /// `--from-id` to resume with; the relay's second signal), after cleaning up what could be
    /// cleaned up.
    INTERRUPTED = 130;
}

/// Every exit-code table: the general codes, then the commands that replace them.
pub const TABLES: &[Table] = &[
    Table {
        applies_to: "All commands",
        path: "exit",
        note: "Unless a table below replaces them for its command.",
        codes: CODES,
    },
    Table {
        applies_to: "`stats --check`",
        path: "exit::nagios",
        note: "The Nagios plugin exit codes; they replace the general ones for `stats --check`: \
               every error there, bad arguments included, is UNKNOWN (3).",
        codes: nagios::CODES,
    },
    Table {
        applies_to: "`doctor`",
        path: "exit::doctor",
        note: "The worst check decides. A database that cannot be reached is still DATABASE (3).",
        codes: doctor::CODES,
    },
];

/// The Nagios plugin exit codes of `stats --check`, which replace the general ones above for that
/// command (docs/reference/exit-codes.md): every error there, bad arguments included, is [`nagios::UNKNOWN`].
pub mod nagios {
    exit_codes! {
        CODES;
        /// Every threshold is met.
        OK = 0;
        /// A warning threshold is exceeded (and no critical one).
        WARNING = 1;
        /// A critical threshold is exceeded.
        CRITICAL = 2;
        /// The state could not be determined: the database unreachable, bad arguments, any error.
        UNKNOWN = 3;
    }
}

/// The exit codes of `outboxctl doctor`: the worst check decides. A database that cannot be
/// reached is still [`DATABASE`] (3).
pub mod doctor {
    exit_codes! {
        CODES;
        /// Every check passed.
        PASS = 0;
        /// At least one check warned, none failed.
        WARN = 1;
        /// At least one check failed.
        FAIL = 2;
    }
}

/// A command's own error that carries its exit code: a usage error found by the command itself
/// (flags that only it checks), or a code only that command has (`stats --check`'s UNKNOWN). The
/// layers below the commands return errors that say what went wrong instead ([`Failure`]).
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct CodedError {
    pub code: u8,
    pub message: String,
}

impl CodedError {
    pub fn usage(message: impl Into<String>) -> Self {
        Self {
            code: USAGE,
            message: message.into(),
        }
    }
}

/// A configuration error where a command's own errors are [`CodedError`]s, with its code from
/// [`code`].
impl From<crate::config::Error> for CodedError {
    fn from(err: crate::config::Error) -> Self {
        Self {
            code: code(Failure::Config(&err)),
            message: err.to_string(),
        }
    }
}

/// An error in a command's cause chain that decides the exit code: one from a layer below the
/// commands, saying what went wrong, or a command's own [`CodedError`].
#[derive(Debug, Clone, Copy)]
pub enum Failure<'a> {
    Db(&'a crate::db::Error),
    Sink(&'a crate::sink::Error),
    Config(&'a crate::config::Error),
    Confirm(&'a crate::confirm::Error),
    MetricsAddr(&'a crate::relay::endpoints::BindError),
    Coded(&'a CodedError),
}

impl<'a> Failure<'a> {
    /// `err` as one of the errors that decide an exit code, if it is one.
    pub fn of(err: &'a (dyn std::error::Error + 'static)) -> Option<Self> {
        if let Some(e) = err.downcast_ref() {
            return Some(Self::Db(e));
        }
        if let Some(e) = err.downcast_ref() {
            return Some(Self::Sink(e));
        }
        if let Some(e) = err.downcast_ref() {
            return Some(Self::Config(e));
        }
        if let Some(e) = err.downcast_ref() {
            return Some(Self::Confirm(e));
        }
        if let Some(e) = err.downcast_ref() {
            return Some(Self::MetricsAddr(e));
        }
        err.downcast_ref().map(Self::Coded)
    }
}

/// The exit code of every kind of error: the one place that decides it. Exhaustive, so a new
/// kind of error does not compile until it has its code here.
pub fn code(failure: Failure<'_>) -> u8 {
    use crate::config::Error as Config;
    use crate::confirm::Error as Confirm;
    use crate::db::Error as Db;
    use crate::relay::endpoints::BindError as MetricsAddr;
    use crate::sink::Error as Sink;
    match failure {
        Failure::Db(
            Db::Unreachable { .. }
            | Db::LoginRejected { .. }
            | Db::SearchPathDropped { .. }
            | Db::ServerTooOld { .. }
            | Db::ReadOnly
            | Db::TransactionPooler { .. }
            | Db::Lost { .. },
        ) => DATABASE,
        Failure::Db(Db::PrivilegeMissing { .. }) => PRIVILEGE,
        Failure::Db(Db::Locked { .. }) => LOCKED,
        // Nothing was changed; the tables are to be fixed by hand.
        Failure::Db(Db::AdoptConflict { .. }) => USAGE,
        Failure::Sink(Sink::Invalid(_) | Sink::Unusable(_)) => USAGE,
        Failure::Sink(
            Sink::Stalled { .. }
            | Sink::Unavailable { .. }
            | Sink::EveryPublishFailed { .. }
            | Sink::ReplayStopped { .. },
        ) => SINK,
        Failure::Config(
            Config::Invalid(_)
            | Config::Conflict(_)
            | Config::DatabaseUrl(_)
            | Config::TlsFile { .. },
        ) => USAGE,
        Failure::Confirm(Confirm::NoOneToAsk { .. } | Confirm::Unreadable(_)) => USAGE,
        Failure::MetricsAddr(MetricsAddr::Resolve(..)) => USAGE,
        // A port in use is not a usage error.
        Failure::MetricsAddr(MetricsAddr::Bind(..)) => FAILURE,
        Failure::Coded(c) => c.code,
    }
}

/// Maps a command's error to its exit code: the first error in the chain that has one decides
/// ([`code`]); anything else is [`FAILURE`].
pub fn code_of(err: &anyhow::Error) -> u8 {
    err.chain()
        .find_map(Failure::of)
        .map(code)
        .unwrap_or(FAILURE)
}

/// The error as one line, each cause once (see [`crate::output::error_message`]).
pub use crate::output::error_message as message;

pub fn to_exit_code(code: u8) -> ExitCode {
    ExitCode::from(code)
}

/// True when the error is a closed stdout (e.g. `outboxctl ... | head`): that is not a failure.
pub fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        let kind = match e.downcast_ref::<std::io::Error>() {
            Some(io) => Some(io.kind()),
            // serde_json's error does not expose its io::Error as `source()`.
            None => e
                .downcast_ref::<serde_json::Error>()
                .and_then(|j| j.io_error_kind()),
        };
        kind == Some(std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::Context;

    #[test]
    fn code_found_through_context() {
        let locked = crate::db::Error::Locked {
            schema: "public".into(),
            holder: "it has just finished".into(),
        };
        let err = Err::<(), _>(locked).context("prune").unwrap_err();
        assert_eq!(code_of(&err), LOCKED);
        assert_eq!(code_of(&anyhow::anyhow!("plain")), FAILURE);
        let usage = Err::<(), _>(CodedError::usage("bad"))
            .context("x")
            .unwrap_err();
        assert_eq!(code_of(&usage), USAGE);
    }

    #[test]
    fn each_layer_has_its_codes() {
        let code_of = |e: anyhow::Error| code_of(&e);
        assert_eq!(code_of(crate::db::Error::ReadOnly.into()), DATABASE);
        assert_eq!(
            code_of(
                crate::db::Error::ServerTooOld {
                    version: "13.2".into(),
                    at: "u@h:5432/d".into()
                }
                .into()
            ),
            DATABASE
        );
        assert_eq!(
            code_of(
                crate::db::Error::PrivilegeMissing {
                    cause: "permission denied for table outbox".into(),
                    role: "app".into(),
                    lacks: None,
                    grants_for: "relay",
                    schema: "public".into(),
                }
                .into()
            ),
            PRIVILEGE
        );
        assert_eq!(code_of(crate::sink::Error::invalid("x").into()), USAGE);
        assert_eq!(
            code_of(
                crate::sink::Error::EveryPublishFailed {
                    sink: "null".into(),
                    failures: 2
                }
                .into()
            ),
            SINK
        );
        assert_eq!(code_of(crate::config::Error::invalid("x").into()), USAGE);
        let refused = crate::confirm::Error::NoOneToAsk {
            action: "discard 1 event".into(),
        };
        assert_eq!(code_of(refused.into()), USAGE);
    }
}
