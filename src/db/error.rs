//! What went wrong with the database, as a command reports it: the connection could not be made,
//! the server is too old, the role lacks a privilege, another run holds the lock, ... Each
//! variant says what happened and prints the one line that names what to fix; which exit code it
//! means is decided in one place, [`crate::exit`]. Any other failure of a statement stays the
//! `sqlx::Error` it is.

use std::time::Duration;

use super::{MIN_SERVER_MAJOR, READ_ONLY_HINT, TRANSACTION_POOLER_HINT};

/// A database error that ends a command with its own exit code (see [`crate::exit::code`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// PostgreSQL could not be reached, or the session could not be set up: refused, timed out,
    /// TLS, a lost connection while setting up.
    #[error("cannot connect to PostgreSQL at {at}: {reason}")]
    Unreachable {
        /// "user@host:port/database" (never the password).
        at: String,
        reason: String,
    },
    /// PostgreSQL answered and refused the session: the login (password, `pg_hba.conf`), a
    /// database that does not exist, too many connections.
    #[error("cannot connect to PostgreSQL at {at}: {reason}")]
    LoginRejected { at: String, reason: String },
    /// The session's search path does not start with the configured schema: a connection pooler
    /// dropped the `options` startup parameter that carries it.
    #[error(
        "cannot connect to PostgreSQL at {at}: the session's search_path is `{search_path}`, not schema `{schema}` (--schema): a connection pooler dropped the `options` startup parameter that carries it (e.g. PgBouncer's ignore_startup_parameters); set it on the server for the pooler's sessions (ALTER ROLE ... SET search_path = {schema}) or connect to PostgreSQL directly"
    )]
    SearchPathDropped {
        at: String,
        search_path: String,
        schema: String,
    },
    /// The server is older than [`MIN_SERVER_MAJOR`].
    #[error(
        "PostgreSQL {version} at {at} is not supported: outboxctl needs PostgreSQL {MIN_SERVER_MAJOR} or later"
    )]
    ServerTooOld {
        /// As people write it (`13.23`, `9.6.24`).
        version: String,
        at: String,
    },
    /// A write refused by a read-only session (a hot standby, `default_transaction_read_only`).
    #[error("{}", READ_ONLY_HINT)]
    ReadOnly,
    /// What a transaction-pooling proxy does to prepared statements when outboxctl was not told
    /// about it (`--pooler transaction`); holds the server's error.
    #[error("{} ({server})", TRANSACTION_POOLER_HINT)]
    TransactionPooler {
        /// The server's error (`prepared statement "sqlx_s_1" already exists`).
        server: String,
    },
    /// A `relay --once` lost the database and could not reconnect within `--connect-timeout`.
    #[error(
        "lost the database during the run and could not reconnect within {} (--connect-timeout): {cause}",
        humantime::format_duration(*.within)
    )]
    Lost { within: Duration, cause: String },
    /// The role lacks a privilege on the outbox's schema (PostgreSQL's `insufficient_privilege`).
    #[error(
        "{cause} (as role `{role}`{}): `outboxctl grants --role {role} --for {grants_for}` prints what this needs on schema `{schema}` (apply it as the schema's owner)",
        lacks_text(.lacks)
    )]
    PrivilegeMissing {
        /// The error as the command saw it ("permission denied for table outbox_locks").
        cause: String,
        role: String,
        /// The privilege and the object the server says the role lacks, when it could be asked.
        lacks: Option<(String, String)>,
        /// The use the command belongs to (`grants --for`).
        grants_for: &'static str,
        schema: String,
    },
    /// Another run holds the lock (an overlapping `prune`).
    #[error("another prune is running on schema `{schema}` ({holder}); this run deleted nothing")]
    Locked {
        schema: String,
        /// Who holds it and until when, or that it has just finished.
        holder: String,
    },
    /// `migrate` found outbox tables that differ from migration 1, so they cannot be adopted.
    #[error(
        "schema `{schema}` already has outbox tables that differ from migration 1, so they cannot be adopted; nothing was changed. Differences:\n{}",
        indented(.differences)
    )]
    AdoptConflict {
        schema: String,
        differences: Vec<String>,
    },
}

fn lacks_text(lacks: &Option<(String, String)>) -> String {
    lacks
        .as_ref()
        .map(|(privilege, object)| format!(", which lacks {privilege} on {object}"))
        .unwrap_or_default()
}

fn indented(lines: &[String]) -> String {
    lines
        .iter()
        .map(|d| format!("  {d}"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_what_to_fix_in_one_line() {
        let e = Error::PrivilegeMissing {
            cause: "error returned from database: permission denied for table outbox".into(),
            role: "app".into(),
            lacks: Some(("SELECT".into(), "public.outbox".into())),
            grants_for: "relay",
            schema: "public".into(),
        };
        assert_eq!(
            e.to_string(),
            "error returned from database: permission denied for table outbox (as role `app`, \
             which lacks SELECT on public.outbox): `outboxctl grants --role app --for relay` \
             prints what this needs on schema `public` (apply it as the schema's owner)"
        );
        let e = Error::Lost {
            within: Duration::from_secs(5),
            cause: "pool timed out".into(),
        };
        assert_eq!(
            e.to_string(),
            "lost the database during the run and could not reconnect within 5s \
             (--connect-timeout): pool timed out"
        );
        let e = Error::AdoptConflict {
            schema: "app".into(),
            differences: vec!["a".into(), "b".into()],
        };
        assert!(e.to_string().ends_with("Differences:\n  a\n  b"), "{e}");
    }
}
