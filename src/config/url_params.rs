//! The query parameters of a database URL, checked before connecting.
//!
//! sqlx reads a handful of libpq's connection parameters and skips every other key with a log
//! line nobody sees, so `?sslmod=require` connected without TLS. psql refuses an unknown key
//! (`invalid URI query parameter`); so does outboxctl, and it also refuses the libpq parameters
//! sqlx would skip when skipping them changes what the URL asks for (a security setting, another
//! server, another kind of session). The table below names every parameter of libpq 18 and what
//! outboxctl does with it; a test keeps it sorted into the four kinds.

use super::Error;

/// What outboxctl does with one URL parameter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handling {
    /// sqlx reads it.
    Honoured,
    /// Accepted and has no effect; leaving it out changes nothing the URL asks for. Why.
    NoEffect(&'static str),
    /// Accepted with one of these values, the ones that describe what sqlx does anyway; any
    /// other value is refused, with the reason.
    Only(&'static [&'static str], &'static str),
    /// Refused whatever its value: sqlx would skip it and connect differently from what it asks.
    Refused(&'static str),
}

use Handling::{Honoured, NoEffect, Only, Refused};

const GSS_ONLY: &str =
    "it only matters for GSSAPI authentication, which sqlx does not do (a server that asks for it refuses the login)";
const KEEPALIVES: &str =
    "sqlx sets no TCP keepalive or user timeout, so the operating system's defaults apply";

/// Every libpq connection parameter (PostgreSQL 18's `PQconndefaults`, and the spellings sqlx adds),
/// by name, sorted.
pub const PARAMS: &[(&str, Handling)] = &[
    ("application_name", NoEffect("outboxctl names its sessions `outboxctl` (a relay's `outboxctl relay <mode> <daemon|once> <pid> <schema>`)")),
    ("channel_binding", Only(&["disable", "prefer"], "sqlx authenticates with SCRAM-SHA-256 without channel binding")),
    ("client_encoding", NoEffect("the sessions always use UTF8 (sqlx sets it)")),
    ("connect_timeout", NoEffect("--connect-timeout (OUTBOXCTL_CONNECT_TIMEOUT, default 10s) bounds the connection")),
    ("dbname", Honoured),
    ("fallback_application_name", NoEffect("outboxctl names its sessions `outboxctl` (a relay's `outboxctl relay <mode> <daemon|once> <pid> <schema>`)")),
    ("gssdelegation", NoEffect(GSS_ONLY)),
    ("gssencmode", Only(&["disable", "prefer"], "sqlx never encrypts with GSSAPI: for an encrypted connection use sslmode=require (or verify-full)")),
    ("gsslib", NoEffect(GSS_ONLY)),
    ("host", Honoured),
    ("hostaddr", Honoured),
    ("keepalives", NoEffect(KEEPALIVES)),
    ("keepalives_count", NoEffect(KEEPALIVES)),
    ("keepalives_idle", NoEffect(KEEPALIVES)),
    ("keepalives_interval", NoEffect(KEEPALIVES)),
    ("krbsrvname", NoEffect(GSS_ONLY)),
    ("load_balance_hosts", NoEffect("sqlx connects to the one host the URL names")),
    ("max_protocol_version", Only(&["3.0", "latest"], "sqlx speaks protocol 3.0 only")),
    ("min_protocol_version", Only(&["3.0"], "sqlx speaks protocol 3.0 only")),
    ("oauth_client_id", Refused("sqlx does not do OAuth authentication")),
    ("oauth_client_secret", Refused("sqlx does not do OAuth authentication")),
    ("oauth_issuer", Refused("sqlx does not do OAuth authentication")),
    ("oauth_scope", Refused("sqlx does not do OAuth authentication")),
    ("options", Honoured),
    ("passfile", Refused("sqlx reads the password file named by PGPASSFILE (default ~/.pgpass): set PGPASSFILE instead")),
    ("password", Honoured),
    ("port", Honoured),
    ("replication", Only(&["false", "off", "no", "0"], "outboxctl needs an ordinary session, not a replication connection")),
    ("require_auth", Refused("sqlx cannot be restricted to some authentication methods")),
    ("requirepeer", Refused("sqlx does not check which user runs the server on a Unix socket")),
    ("scram_client_key", Refused("sqlx authenticates with the password, not SCRAM keys")),
    ("scram_server_key", Refused("sqlx authenticates with the password, not SCRAM keys")),
    ("service", Refused("sqlx does not read pg_service.conf: put the service's host, port, dbname and user in the URL")),
    ("ssl-ca", Honoured),
    ("ssl-cert", Honoured),
    ("ssl-key", Honoured),
    ("ssl-mode", Honoured),
    ("ssl-root-cert", Honoured),
    ("ssl_max_protocol_version", Only(&["", "TLSv1.3"], "TLS (rustls) may negotiate TLS 1.3, so a lower maximum would not hold")),
    ("ssl_min_protocol_version", Only(&["", "TLSv1", "TLSv1.1", "TLSv1.2"], "TLS (rustls) accepts TLS 1.2 and 1.3 and cannot be made to refuse 1.2")),
    ("sslcert", Honoured),
    ("sslcertmode", Only(&["disable", "allow"], "sqlx sends a client certificate when sslcert is given and cannot insist that the server asks for one")),
    ("sslcompression", NoEffect("obsolete: libpq ignores it too, TLS compression is off everywhere")),
    ("sslcrl", Refused("sqlx does not check certificate revocation lists")),
    ("sslcrldir", Refused("sqlx does not check certificate revocation lists")),
    ("sslkey", Honoured),
    ("sslkeylogfile", NoEffect("a debugging aid: sqlx writes no TLS key log")),
    ("sslmode", Honoured),
    ("sslnegotiation", Only(&["postgres"], "sqlx starts TLS the PostgreSQL way (SSLRequest), not directly")),
    ("sslpassword", Refused("sqlx cannot read a password-protected client key: decrypt it (openssl pkey -in key.pem -out plain.pem)")),
    ("sslrootcert", Honoured),
    ("sslsni", Only(&["1"], "sqlx always sends the host name (Server Name Indication)")),
    ("statement-cache-capacity", Honoured),
    ("target_session_attrs", Only(&["any"], "sqlx connects to the host given without asking whether it is a primary or a standby: point the URL at the server outboxctl must use (the primary)")),
    ("tcp_user_timeout", NoEffect(KEEPALIVES)),
    ("user", Honoured),
];

/// How `key` is handled; `None` for a key libpq does not know. sqlx's `options[NAME]` form
/// (one server setting) is [`Handling::Honoured`].
pub fn handling(key: &str) -> Option<Handling> {
    if key.starts_with("options[") && key.ends_with(']') {
        return Some(Honoured);
    }
    PARAMS
        .binary_search_by(|(name, _)| name.cmp(&key))
        .ok()
        .map(|i| PARAMS[i].1)
}

/// Checks every query parameter of `url` (a postgres:// URL), first problem first. The message
/// names the parameter and what to do; the caller adds which URL.
pub fn check(url: &url::Url) -> Result<(), String> {
    for (key, value) in url.query_pairs() {
        match handling(&key) {
            Some(Honoured | NoEffect(_)) => {}
            Some(Only(values, why)) if !values.contains(&value.as_ref()) => {
                return Err(format!(
                    "`{key}={value}` is not supported: {why} (accepted: {})",
                    values
                        .iter()
                        .map(|v| if v.is_empty() { "empty" } else { v })
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            }
            Some(Only(..)) => {}
            Some(Refused(why)) => return Err(format!("parameter `{key}` is not supported: {why}")),
            None => {
                let hint = closest(&key)
                    .map(|k| format!(" (did you mean `{k}`?)"))
                    .unwrap_or_default();
                return Err(format!(
                    "unknown parameter `{key}`{hint}; like psql, outboxctl refuses it rather than connect without it"
                ));
            }
        }
    }
    Ok(())
}

/// The known parameter nearest to `key`, if it is a plausible typo of it.
fn closest(key: &str) -> Option<&'static str> {
    PARAMS
        .iter()
        .map(|(name, _)| (strsim::levenshtein(key, name), *name))
        .filter(|(d, name)| *d <= 2.max(name.len() / 4))
        .min()
        .map(|(_, name)| name)
}

/// The TLS files a connection reads (the server's CA, the client's certificate and key), as
/// the URL's parameter or the libpq variable that names them, with their paths: the URL's
/// parameter wins, as in sqlx.
pub fn tls_files(
    url: Option<&url::Url>,
    env: impl Fn(&str) -> Option<String>,
) -> Vec<(String, String)> {
    const FILES: [(&[&str], &str); 3] = [
        (&["sslrootcert", "ssl-root-cert", "ssl-ca"], "PGSSLROOTCERT"),
        (&["sslcert", "ssl-cert"], "PGSSLCERT"),
        (&["sslkey", "ssl-key"], "PGSSLKEY"),
    ];
    let mut out = Vec::new();
    for (keys, var) in FILES {
        let given = url.and_then(|u| {
            u.query_pairs()
                .filter(|(k, _)| keys.contains(&k.as_ref()))
                .last()
                .map(|(k, v)| {
                    (
                        format!("`{k}` in --database-url/DATABASE_URL"),
                        v.into_owned(),
                    )
                })
        });
        match given.or_else(|| {
            env(var)
                .filter(|v| !v.is_empty())
                .map(|v| (var.to_owned(), v))
        }) {
            // libpq's `system` root certificate means the machine's store, not a file.
            Some((_, path)) if path == "system" => {}
            Some(f) => out.push(f),
            None => {}
        }
    }
    out
}

/// Refuses a TLS file that cannot be read before connecting, naming the parameter or variable
/// that gave it, never its path ([`Error::TlsFile`]): sqlx would fail the TLS setup with a bare `No such
/// file or directory` that names neither.
pub fn check_tls_files(files: &[(String, String)]) -> Result<(), Error> {
    for (from, path) in files {
        if let Err(cause) = std::fs::File::open(path) {
            return Err(Error::TlsFile {
                from: from.clone(),
                cause,
            });
        }
    }
    Ok(())
}

/// [`check`] as the error the configuration reports ([`Error::DatabaseUrl`]; `shown` is the URL
/// redacted).
pub fn check_url(url: &str, shown: &str) -> Result<(), Error> {
    let Ok(parsed) = url::Url::parse(url) else {
        return Ok(()); // sqlx reports an unparsable URL itself
    };
    check(&parsed).map_err(|e| {
        Error::DatabaseUrl(format!(
            "invalid --database-url/DATABASE_URL `{shown}`: {e}"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(q: &str) -> url::Url {
        url::Url::parse(&format!("postgres://u@h/d?{q}")).unwrap()
    }

    #[test]
    fn tls_files_come_from_the_url_before_the_libpq_variables() {
        let env = |k: &str| match k {
            "PGSSLROOTCERT" => Some("/env/ca.crt".to_owned()),
            "PGSSLKEY" => Some("/env/client.key".to_owned()),
            _ => None,
        };
        let u = url("sslmode=verify-ca&ssl-root-cert=/url/ca.crt&sslcert=system");
        assert_eq!(
            tls_files(Some(&u), env),
            vec![
                (
                    "`ssl-root-cert` in --database-url/DATABASE_URL".to_owned(),
                    "/url/ca.crt".to_owned()
                ),
                ("PGSSLKEY".to_owned(), "/env/client.key".to_owned()),
            ]
        );
        assert_eq!(tls_files(None, |_| None), vec![]);
        let err = check_tls_files(&tls_files(None, env)).unwrap_err();
        assert!(matches!(err, Error::TlsFile { .. }), "{err:?}");
        let err = err.to_string();
        assert!(err.contains("named by PGSSLROOTCERT"), "{err}");
        assert!(!err.contains("/env/ca.crt"), "{err}");
    }

    #[test]
    fn the_table_is_sorted_and_knows_every_parameter_sqlx_reads() {
        assert!(
            PARAMS.windows(2).all(|w| w[0].0 < w[1].0),
            "sorted, no duplicates"
        );
        // sqlx-postgres 0.8's `parse_from_url` keys.
        for k in [
            "sslmode",
            "ssl-mode",
            "sslrootcert",
            "ssl-root-cert",
            "ssl-ca",
            "sslcert",
            "ssl-cert",
            "sslkey",
            "ssl-key",
            "statement-cache-capacity",
            "host",
            "hostaddr",
            "port",
            "dbname",
            "user",
            "password",
            "options",
            "options[search_path]",
        ] {
            assert_eq!(handling(k), Some(Honoured), "{k}");
        }
        // libpq 15's PQconndefaults (the machine's psql) and what 16-18 added: all decided.
        for k in [
            "service",
            "passfile",
            "channel_binding",
            "connect_timeout",
            "client_encoding",
            "application_name",
            "fallback_application_name",
            "keepalives",
            "keepalives_idle",
            "keepalives_interval",
            "keepalives_count",
            "tcp_user_timeout",
            "sslcompression",
            "sslpassword",
            "sslcrl",
            "sslcrldir",
            "sslsni",
            "requirepeer",
            "ssl_min_protocol_version",
            "ssl_max_protocol_version",
            "gssencmode",
            "krbsrvname",
            "gsslib",
            "replication",
            "target_session_attrs",
            "require_auth",
            "sslcertmode",
            "gssdelegation",
            "load_balance_hosts",
            "sslnegotiation",
            "min_protocol_version",
            "max_protocol_version",
            "scram_client_key",
            "scram_server_key",
            "sslkeylogfile",
            "oauth_issuer",
            "oauth_client_id",
            "oauth_client_secret",
            "oauth_scope",
        ] {
            assert!(handling(k).is_some(), "{k}");
        }
    }

    #[test]
    fn unknown_and_unsupported_parameters_are_refused_by_name() {
        // Each query and a part of the message it must get.
        for (query, says) in [
            (
                "sslmod=require",
                "unknown parameter `sslmod` (did you mean `sslmode`?)",
            ),
            ("connection_limit=5", "unknown parameter `connection_limit`"),
            (
                "sslmode=require&target_session_attrs=read-write",
                "`target_session_attrs=read-write` is not supported",
            ),
            ("service=prod", "parameter `service` is not supported"),
            ("channel_binding=require", "accepted: disable, prefer"),
        ] {
            let e = check(&url(query)).unwrap_err();
            assert!(e.contains(says), "{query}: {e}");
        }
        for ok in [
            "",
            "sslmode=verify-full&sslrootcert=/ca.pem",
            "connect_timeout=5&application_name=app&keepalives=1",
            "target_session_attrs=any&gssencmode=disable&channel_binding=prefer",
            "options=-c%20statement_timeout%3D0&options[lock_timeout]=1s",
            "ssl_min_protocol_version=TLSv1.2",
        ] {
            assert_eq!(check(&url(ok)), Ok(()), "{ok}");
        }
    }
}
