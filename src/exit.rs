//! Exit codes: the contract scripts and cron wrappers rely on, in one place. Each constant is
//! declared once, through [`exit_codes!`], which also lists it in [`TABLES`]: the reference page
//! docs/reference/exit-codes.md is generated from those tables.

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
    /// during a `--once` run (rows given back untouched), or a local consumer stalled.
    SINK = 5;
    /// `migrate --check`: migrations are pending (or seed-era tables wait to be adopted, or there is
    /// no outbox yet): run `outboxctl migrate`.
    MIGRATIONS_PENDING = 6;
    /// The role lacks a privilege on the outbox's schema (the error names the table and the
    /// `outboxctl grants` command that prints what to grant).
    PRIVILEGE = 7;
    /// Stopped by SIGINT or SIGTERM before finishing (`demo`; the relay's second signal), after
    /// cleaning up what could be cleaned up.
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

/// An error that carries its exit code. Anything else maps to [`FAILURE`].
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
    pub fn database(message: impl Into<String>) -> Self {
        Self {
            code: DATABASE,
            message: message.into(),
        }
    }
    pub fn locked(message: impl Into<String>) -> Self {
        Self {
            code: LOCKED,
            message: message.into(),
        }
    }
    pub fn sink(message: impl Into<String>) -> Self {
        Self {
            code: SINK,
            message: message.into(),
        }
    }
}

/// Maps a command's error to its exit code: the first [`CodedError`] in the chain decides.
pub fn code_of(err: &anyhow::Error) -> u8 {
    err.chain()
        .find_map(|e| e.downcast_ref::<CodedError>().map(|c| c.code))
        .unwrap_or(FAILURE)
}

/// The error as one line: its cause chain joined by ": ", each cause once.
///
/// Many error types print their source inside their own message (sqlx's
/// `error with configuration: {source}`), so the plain `{:#}` chain says it twice, and such an
/// error wrapping one of its own kind stutters within one message
/// (`error with configuration: error with configuration: ...`). A cause that the message
/// before it already ends with is left out, and a segment repeated right after itself is
/// printed once.
pub fn message(err: &anyhow::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    for cause in err.chain() {
        let text = cause.to_string();
        if text.is_empty() || parts.last().is_some_and(|last| last.ends_with(&text)) {
            continue;
        }
        parts.push(text);
    }
    let joined = parts.join(": ");
    let mut out: Vec<&str> = Vec::new();
    for segment in joined.split(": ") {
        if out.last() != Some(&segment) {
            out.push(segment);
        }
    }
    out.join(": ")
}

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
        let err = Err::<(), _>(CodedError::locked("held"))
            .context("prune")
            .unwrap_err();
        assert_eq!(code_of(&err), LOCKED);
        assert_eq!(code_of(&anyhow::anyhow!("plain")), FAILURE);
    }

    /// Like sqlx's `Error::Configuration`: prints its source inside its own message.
    #[derive(Debug, thiserror::Error)]
    #[error("error with configuration: {0}")]
    struct Config(#[source] Box<dyn std::error::Error + Send + Sync>);

    #[test]
    fn each_cause_is_printed_once() {
        let inner = Config("unknown value \"bogus\" for `ssl_mode`".into());
        let err = anyhow::Error::new(Config(Box::new(inner))).context("invalid --database-url");
        assert_eq!(
            format!("{err:#}"),
            "invalid --database-url: error with configuration: error with configuration: \
             unknown value \"bogus\" for `ssl_mode`: error with configuration: unknown value \
             \"bogus\" for `ssl_mode`: unknown value \"bogus\" for `ssl_mode`"
        );
        assert_eq!(
            message(&err),
            "invalid --database-url: error with configuration: unknown value \"bogus\" for `ssl_mode`"
        );
        // Distinct causes are all kept.
        let err = Err::<(), _>(std::io::Error::other("refused"))
            .context("cannot connect")
            .context("stats")
            .unwrap_err();
        assert_eq!(message(&err), "stats: cannot connect: refused");
    }
}
