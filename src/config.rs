//! Turns command-line arguments into validated settings: the database connection, the schema.
//! Everything that can be wrong with an argument is reported here, before any I/O.

use std::str::FromStr;
use std::time::Duration;

use sqlx::postgres::PgConnectOptions;

use crate::cli::{AuditArgs, DatabaseArgs};

pub mod url_params;

/// What is wrong with a setting, found before any I/O: each message names the flag or variable
/// to fix, never a secret. Which exit code it means is decided in one place, [`crate::exit`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A flag's or environment variable's value is not one outboxctl takes (`--schema`,
    /// `--actor`, a filter, `OUTBOXCTL_LOG`).
    #[error("{0}")]
    Invalid(String),
    /// Flags that do not go together, or a selection that is missing or ambiguous.
    #[error("{0}")]
    Conflict(String),
    /// `--database-url`/`DATABASE_URL` is not a PostgreSQL URL, or has a parameter outboxctl
    /// refuses (shown redacted).
    #[error("{0}")]
    DatabaseUrl(String),
    /// A TLS file named by the URL or a libpq variable cannot be read (named by where it came
    /// from, never by its path).
    #[error("cannot read the TLS file named by {from}: {cause}")]
    TlsFile { from: String, cause: std::io::Error },
}

impl Error {
    /// [`Error::Invalid`].
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::Invalid(message.into())
    }

    /// [`Error::Conflict`].
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::Conflict(message.into())
    }
}

/// A validated schema name: an identifier we quote ourselves, never pasted raw into SQL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schema(String);

impl Schema {
    pub fn parse(name: &str) -> Result<Self, Error> {
        let ok_first = name
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_');
        let ok_rest = name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
        if !ok_first || !ok_rest || name.len() > 63 {
            return Err(Error::invalid(format!(
                "invalid --schema `{name}`: use 1-63 lowercase letters, digits or _, not starting with a digit"
            )));
        }
        // PostgreSQL's system schemas: pg_catalog, pg_toast, pg_temp_N, pg_toast_temp_N (and the
        // pg_temp alias) all start with pg_, a prefix CREATE SCHEMA reserves; information_schema is
        // the one that does not. Installing the outbox into one of them must never happen.
        if name.starts_with("pg_") {
            return Err(Error::invalid(format!(
                "invalid --schema `{name}`: names starting with pg_ are reserved for PostgreSQL's system schemas"
            )));
        }
        if name == "information_schema" {
            return Err(Error::invalid(format!(
                "invalid --schema `{name}`: it is a system schema (the SQL-standard catalog views)"
            )));
        }
        Ok(Self(name.to_owned()))
    }

    pub fn name(&self) -> &str {
        &self.0
    }

    /// The name as a quoted SQL identifier.
    pub fn quoted(&self) -> String {
        format!("\"{}\"", self.0.replace('"', "\"\""))
    }

    /// The NOTIFY channel the insert trigger signals for this schema.
    pub fn channel(&self) -> String {
        format!("outboxctl:{}", self.0)
    }
}

/// Who runs an auditable command: `--actor` / `OUTBOXCTL_ACTOR`, or `$USER@hostname`. Resolved
/// once here; the SQL layer only receives the text.
pub fn actor(args: &AuditArgs) -> Result<String, Error> {
    let given = args
        .actor
        .as_deref()
        .map(str::trim)
        .filter(|a| !a.is_empty());
    match given {
        Some(a) => check_actor(a),
        None => Ok(default_actor(
            std::env::var("USER")
                .ok()
                .or_else(|| std::env::var("LOGNAME").ok()),
            whoami::fallible::hostname().ok(),
        )),
    }
}

/// `user@host`; whoami's account name when USER and LOGNAME are unset (cron may not set USER),
/// `unknown-host` when the host name cannot be read.
pub fn default_actor(user: Option<String>, host: Option<String>) -> String {
    let user = user
        .map(|u| u.trim().to_owned())
        .filter(|u| !u.is_empty())
        .unwrap_or_else(whoami::username);
    let host = host
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    format!("{user}@{host}")
}

fn check_actor(a: &str) -> Result<String, Error> {
    if a.chars().count() > 200 || a.chars().any(char::is_control) {
        return Err(Error::invalid(
            "invalid --actor/OUTBOXCTL_ACTOR: use at most 200 characters, no control characters",
        ));
    }
    Ok(a.to_owned())
}

/// What sits between outboxctl and PostgreSQL (`--pooler`), resolved from the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Pooler {
    /// PostgreSQL itself: the schema travels as the `options` startup parameter.
    #[default]
    None,
    /// A pooler that gives each client connection a server connection of its own for its
    /// lifetime (PgBouncer `pool_mode = session`): no startup parameters a pooler refuses; the
    /// schema is set with `SET search_path` once per connection.
    Session,
    /// A pooler that lends a server connection per transaction (PgBouncer
    /// `pool_mode = transaction`): every statement runs in a transaction of its own that sets
    /// the session's settings with `SET LOCAL` (see [`crate::db::Pin`]).
    Transaction,
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct DbConfig {
    pub options: PgConnectOptions,
    pub schema: Schema,
    pub connect_timeout: Duration,
    pub pooler: Pooler,
    /// "user@host:port/database", for messages; never holds the password.
    pub display: String,
    /// Where the connection settings came from, for `-v`: [`FROM_URL`] or [`FROM_PG_VARIABLES`].
    pub source: &'static str,
}

/// [`DbConfig::source`] when `--database-url`/`DATABASE_URL` gave the settings.
pub const FROM_URL: &str = "--database-url/DATABASE_URL";
/// [`DbConfig::source`] when libpq's variables did (no URL given).
pub const FROM_PG_VARIABLES: &str = "the PG* variables (PGHOST, PGPORT, PGUSER, PGDATABASE)";

impl DbConfig {
    /// The settings of a command that needs a session of its own: `--pooler transaction` is
    /// refused (exit 2) before connecting.
    pub fn from_args(args: &DatabaseArgs) -> Result<Self, Error> {
        let cfg = Self::from_args_pooled(args)?;
        if cfg.pooler == Pooler::Transaction {
            return Err(Error::conflict(
                "--pooler transaction: only relay, prune and requeue run through transaction pooling; run this command against PostgreSQL directly or through session pooling (--pooler session)",
            ));
        }
        Ok(cfg)
    }

    /// The settings of a command that also runs through transaction pooling (relay, prune,
    /// requeue): each of its statements goes through [`crate::db::Pin`].
    pub fn from_args_pooled(args: &DatabaseArgs) -> Result<Self, Error> {
        let schema = Schema::parse(&args.schema)?;
        let url = args.database_url.as_deref().map(str::trim);
        let source = if url.is_some_and(|u| !u.is_empty()) {
            FROM_URL
        } else {
            FROM_PG_VARIABLES
        };
        let options = match url {
            // Like libpq, only postgres:// and postgresql:// URLs. sqlx would take any scheme and
            // read e.g. `user:secret@host` as a path, i.e. a database named after the password.
            Some(url) if !url.is_empty() && !is_postgres_url(url) => {
                return Err(Error::DatabaseUrl(format!(
                    "invalid --database-url/DATABASE_URL `{}`: it must start with postgres:// or postgresql://",
                    redact_url(url)
                )))
            }
            Some(url) if !url.is_empty() => {
                url_params::check_url(url, &redact_url(url))?;
                PgConnectOptions::from_str(url).map_err(|e| {
                Error::DatabaseUrl(format!(
                    "invalid --database-url/DATABASE_URL `{}`: {}",
                    redact_url(url),
                    redact_text(&e.to_string(), url)
                ))
                })?
            }
            // libpq fallback: sqlx reads PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE.
            _ => PgConnectOptions::new(),
        };
        let parsed = url
            .filter(|u| !u.is_empty())
            .and_then(|u| url::Url::parse(u).ok());
        url_params::check_tls_files(&url_params::tls_files(parsed.as_ref(), |k| {
            std::env::var(k).ok()
        }))?;
        let pooler = match args.pooler {
            crate::cli::PoolerArg::None => Pooler::None,
            crate::cli::PoolerArg::Session => Pooler::Session,
            crate::cli::PoolerArg::Transaction => Pooler::Transaction,
        };
        let options = options.application_name("outboxctl");
        let options = match pooler {
            Pooler::None => options.options([("search_path", schema.quoted())]),
            // PgBouncer refuses startup parameters it does not track (`options`,
            // `extra_float_digits`) unless told to ignore them, and then drops them: send
            // neither, and set both on the session (or per transaction) instead.
            Pooler::Session => options.extra_float_digits(None),
            // And no statement cache: a cached statement lives on the server connection of the
            // transaction that prepared it, which the next transaction may not get.
            Pooler::Transaction => options.extra_float_digits(None).statement_cache_capacity(0),
        };
        let display = format!(
            "{}@{}:{}/{}",
            options.get_username(),
            options.get_host(),
            options.get_port(),
            database_of(&options)
        );
        Ok(Self {
            options,
            schema,
            connect_timeout: args.connect_timeout,
            pooler,
            display,
            source,
        })
    }
}

impl DbConfig {
    /// The database connected to (libpq's default: the user's name).
    pub fn database(&self) -> &str {
        database_of(&self.options)
    }
}

fn database_of(options: &PgConnectOptions) -> &str {
    options.get_database().unwrap_or(options.get_username())
}

fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// The URL with any password replaced by `***`; an unparsable URL, or one that is not a
/// postgres:// URL (where a password cannot be told apart from the rest), is shown only by its
/// scheme.
pub fn redact_url(url: &str) -> String {
    match url::Url::parse(url) {
        Ok(mut u) if is_postgres_url(url) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            let pairs: Vec<(String, String)> = u
                .query_pairs()
                .map(|(k, v)| {
                    let secret = k.eq_ignore_ascii_case("password")
                        || k.eq_ignore_ascii_case("sslpassword")
                        || k.eq_ignore_ascii_case("oauth_client_secret");
                    (
                        k.into_owned(),
                        if secret {
                            "***".to_owned()
                        } else {
                            v.into_owned()
                        },
                    )
                })
                .collect();
            if !pairs.is_empty() {
                u.query_pairs_mut().clear().extend_pairs(pairs);
            }
            u.to_string()
        }
        _ => match url.split_once("://") {
            Some((scheme, _)) => format!("{scheme}://…"),
            None => "…".to_owned(),
        },
    }
}

/// Removes any password that appears in `url` from `text` (error messages may echo parts of it).
pub fn redact_text(text: &str, url: &str) -> String {
    let mut out = text.to_owned();
    if let Ok(u) = url::Url::parse(url) {
        if let Some(p) = u.password().filter(|p| !p.is_empty()) {
            out = out.replace(p, "***");
            if let Ok(decoded) = url::form_urlencoded::parse(format!("p={p}").as_bytes())
                .next()
                .map(|(_, v)| v.into_owned())
                .ok_or(())
            {
                if !decoded.is_empty() {
                    out = out.replace(&decoded, "***");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names() {
        for ok in ["public", "events", "_x", "a1_b", "information", "my_pg_x"] {
            assert!(Schema::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "",
            "1abc",
            "Events",
            "a-b",
            "a;drop",
            "x\"y",
            "pg_temp",
            "pg_temp_3",
            "pg_toast_temp_1",
            "pg_catalog",
            "pg_toast",
            "information_schema",
            &"a".repeat(64),
        ] {
            assert!(Schema::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Schema::parse("events").unwrap().quoted(), "\"events\"");
    }

    #[test]
    fn actors() {
        let a = |s: Option<&str>| {
            actor(&AuditArgs {
                actor: s.map(str::to_owned),
            })
        };
        assert_eq!(a(Some(" alice ")).unwrap(), "alice");
        assert!(a(Some("a\nb")).is_err());
        assert!(a(Some(&"x".repeat(201))).is_err());
        assert!(
            a(Some("")).unwrap().contains('@'),
            "empty means the default"
        );
        assert_eq!(
            default_actor(Some("bob".into()), Some("db1".into())),
            "bob@db1"
        );
        assert!(default_actor(Some("bob".into()), None).ends_with("@unknown-host"));
        assert!(!default_actor(Some("".into()), Some("h".into())).starts_with('@'));
    }

    #[test]
    fn poolers() {
        let args = |pooler| DatabaseArgs {
            database_url: Some("postgres://u@h/d".into()),
            schema: "events".into(),
            connect_timeout: Duration::from_secs(1),
            pooler,
        };
        use crate::cli::PoolerArg;
        let direct = DbConfig::from_args(&args(PoolerArg::None)).unwrap();
        assert_eq!(direct.pooler, Pooler::None);
        assert!(
            direct.options.get_options().is_some(),
            "the schema as `options`"
        );
        let session = DbConfig::from_args(&args(PoolerArg::Session)).unwrap();
        assert!(
            session.options.get_options().is_none(),
            "no `options` for a pooler"
        );
        let err = DbConfig::from_args(&args(PoolerArg::Transaction)).unwrap_err();
        assert!(matches!(err, Error::Conflict(_)), "{err:?}");
        assert!(
            err.to_string().contains("relay, prune and requeue"),
            "{err}"
        );
        let tx = DbConfig::from_args_pooled(&args(PoolerArg::Transaction)).unwrap();
        assert_eq!(tx.pooler, Pooler::Transaction);
        assert!(tx.options.get_options().is_none());
    }

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("postgres://bob:s3cret@db:5432/app"),
            "postgres://bob:***@db:5432/app"
        );
        assert!(!redact_url("postgres://db/app?password=s3cret").contains("s3cret"));
        assert_eq!(redact_url("not a url s3cret"), "…");
        assert_eq!(redact_url("bob:s3cret@db"), "…");
        assert_eq!(redact_url("mysql://bob:s3cret@db/app"), "mysql://…");
        assert_eq!(
            redact_text("failed for s3cret", "postgres://bob:s3cret@db/app"),
            "failed for ***"
        );
    }
}
