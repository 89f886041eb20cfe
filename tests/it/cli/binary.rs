//! The binary itself: exit codes, the wording of the main errors, connection settings (URL, PG*
//! fallback, timeout), schema validation, secrets never printed, and a closed stdout.

use std::os::fd::OwnedFd;
use std::process::{Command, Output, Stdio};

use crate::support::{base_url, bin, output, stderr, stdout, TestDb};

const SECRET: &str = "s3cret-Pw";

fn code(out: &Output) -> Option<i32> {
    out.status.code()
}

/// A runtime error: exactly one line on stderr, `error: ` first, nothing on stdout.
fn assert_one_line_error(out: &Output, what: &str) {
    let err = stderr(out);
    assert!(
        err.starts_with("error: ") && err.ends_with('\n') && err.lines().count() == 1,
        "{what}: stderr must be one `error: ...` line, got {err:?}"
    );
    assert!(out.stdout.is_empty(), "{what}: stdout {:?}", stdout(out));
}

/// Commands that connect, with the arguments they need to get that far.
const CONNECTING: [&[&str]; 5] = [
    &["migrate"],
    &["migrate", "--status"],
    &["stats"],
    &[
        "publish",
        "--event-type",
        "a",
        "--aggregate-type",
        "b",
        "--aggregate-id",
        "c",
        "--payload",
        "{}",
    ],
    &["relay", "--once", "--sink", "null"],
];

#[test]
fn usage_errors_exit_2_and_say_what_is_wrong() {
    for (args, want) in [
        (vec![], "Usage: outboxctl"),
        (vec!["bogus"], "unrecognized subcommand 'bogus'"),
        (vec!["stats", "--bogus"], "unexpected argument '--bogus'"),
        (
            vec!["stats", "--by", "colour"],
            "invalid value 'colour' for '--by <BY>'",
        ),
        (
            vec!["stats", "--connect-timeout", "0s"],
            "`0s` must be greater than zero",
        ),
        (
            vec!["stats", "--connect-timeout", "soon"],
            "`soon` is not a duration",
        ),
        (vec!["completions", "tcsh"], "invalid value 'tcsh'"),
        (vec!["migrate", "-v", "-q"], "cannot be used with"),
    ] {
        let out = output(bin().args(&args));
        assert_eq!(code(&out), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(want), "{args:?}: {}", stderr(&out));
        assert!(out.stdout.is_empty(), "{args:?}");
    }
    for args in [["--help"], ["--version"]] {
        let out = output(bin().args(args));
        assert_eq!(code(&out), Some(0), "{args:?}");
    }
    let version = stdout(&output(bin().arg("--version")));
    assert!(
        version.starts_with(&format!("outboxctl {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
}

#[test]
fn hostile_or_invalid_schema_names_are_rejected_with_exit_2() {
    for name in [
        r#"x"; drop table y; --"#,
        "Public",
        "1abc",
        "a-b",
        "pg_catalog",
        "",
        &"a".repeat(64),
    ] {
        for via_env in [false, true] {
            if via_env && name.is_empty() {
                continue; // an empty variable counts as unset: the default schema
            }
            for args in CONNECTING {
                let mut c = bin();
                c.args(args).env("DATABASE_URL", base_url());
                if via_env {
                    c.env("OUTBOXCTL_SCHEMA", name);
                } else {
                    c.args(["--schema", name]);
                }
                let out = output(&mut c);
                assert_eq!(code(&out), Some(2), "{name:?} {args:?}: {}", stderr(&out));
                assert_one_line_error(&out, name);
                assert!(
                    stderr(&out).starts_with("error: invalid --schema"),
                    "{}",
                    stderr(&out)
                );
            }
        }
    }
}

#[tokio::test]
async fn a_schema_without_the_outbox_exits_1_and_says_run_migrate() {
    let db = TestDb::unmigrated().await;
    for args in [&CONNECTING[2], &CONNECTING[3]] {
        let out = output(db.cmd().args(*args));
        assert_eq!(code(&out), Some(1), "{args:?}: {}", stderr(&out));
        assert_one_line_error(&out, "no outbox");
        assert_eq!(
            stderr(&out),
            format!(
                "error: no outbox table in schema `{0}`: run `outboxctl migrate --schema {0}` first\n",
                db.schema
            )
        );
    }
}

/// postgres://user:SECRET@host..., with the password in various places and encodings.
fn urls_with_secret() -> Vec<(&'static str, String, i32)> {
    let u = url::Url::parse(&base_url()).unwrap();
    let host = u.host_str().unwrap().to_owned();
    let port = u.port().unwrap_or(5432);
    let pct = SECRET.replace('-', "%2D");
    vec![
        // Well-formed, server unreachable: exit 3.
        (
            "refused",
            format!("postgres://bob:{SECRET}@127.0.0.1:1/test"),
            3,
        ),
        (
            "refused, percent-encoded",
            format!("postgres://bob:{pct}@127.0.0.1:1/test"),
            3,
        ),
        (
            "unknown host",
            format!("postgres://bob:{SECRET}@no-such-host.invalid/test"),
            3,
        ),
        // Reachable, but the server rejects the login or database.
        (
            "unknown role",
            format!(
                "postgres://nobody_{}:{SECRET}@{host}:{port}/test",
                std::process::id()
            ),
            3,
        ),
        (
            "unknown database",
            format!(
                "postgres://postgres:{SECRET}@{host}:{port}/no_such_db_{}",
                std::process::id()
            ),
            3,
        ),
        (
            "password in query",
            format!("postgres://bob@127.0.0.1:1/test?password={SECRET}"),
            3,
        ),
        // Malformed: exit 2.
        (
            "bad port",
            format!("postgres://bob:{SECRET}@{host}:notaport/test"),
            2,
        ),
        (
            "port out of range",
            format!("postgres://bob:{SECRET}@{host}:99999/test"),
            2,
        ),
        (
            "bad ipv6",
            format!("postgresql://bob:{SECRET}@[::1/test"),
            2,
        ),
        (
            "bad sslmode",
            format!("postgres://bob:{SECRET}@{host}/test?sslmode=bogus"),
            2,
        ),
        (
            "bad sslmode, password in query",
            format!("postgres://bob@{host}/test?sslmode=bogus&password={SECRET}"),
            2,
        ),
        ("no scheme", format!("bob:{SECRET}@{host}:{port}/test"), 2),
        (
            "other scheme",
            format!("mysql://bob:{SECRET}@{host}:{port}/test"),
            2,
        ),
        ("garbage", format!("postgres://bob:{SECRET}@"), 2),
        (
            "misspelt parameter",
            format!("postgres://bob:{SECRET}@{host}/test?sslmod=require"),
            2,
        ),
    ]
}

/// A URL parameter that libpq does not know, or one sqlx would skip although it changes what the
/// URL asks for, is refused by name before connecting (exit 2), as psql refuses the first: a
/// typo such as `sslmod=require` connected without TLS.
#[tokio::test]
async fn a_misspelt_or_unsupported_url_parameter_is_refused_by_name() {
    let db = TestDb::new().await;
    for (query, named) in [
        (
            "sslmod=require",
            "unknown parameter `sslmod` (did you mean `sslmode`?)",
        ),
        (
            "sslmode=disable&SSLMODE=require",
            "unknown parameter `SSLMODE`",
        ),
        (
            "target_session_attrs=read-write",
            "`target_session_attrs=read-write` is not supported",
        ),
        ("service=prod", "parameter `service` is not supported"),
        (
            "channel_binding=require",
            "`channel_binding=require` is not supported",
        ),
    ] {
        for args in CONNECTING {
            let out = output(
                db.cmd()
                    .env("DATABASE_URL", format!("{}?{query}", base_url()))
                    .args(args),
            );
            assert_eq!(code(&out), Some(2), "{query} {args:?}: {}", stderr(&out));
            assert_one_line_error(&out, named);
            assert!(
                stderr(&out).contains(named),
                "{query} {args:?}: {}",
                stderr(&out)
            );
        }
    }
    // What sqlx reads, and what changes nothing, still connects.
    let out = output(db.cmd().env(
            "DATABASE_URL",
            format!(
                "{}?sslmode=disable&connect_timeout=5&application_name=app&keepalives=1&target_session_attrs=any",
                base_url()
            ),
        )
        .arg("stats"));
    assert!(out.status.success(), "{}", stderr(&out));
}

#[test]
fn a_password_in_the_url_never_appears_in_any_output() {
    let mut failures = Vec::new();
    for (what, url, want_code) in urls_with_secret() {
        for via_flag in [false, true] {
            for args in CONNECTING {
                let mut c = bin();
                c.args(args).args(["--connect-timeout", "2s", "-vvv"]);
                if via_flag {
                    c.args(["--database-url", &url]);
                } else {
                    c.env("DATABASE_URL", &url);
                }
                let out = output(&mut c);
                let all = format!("{}{}", stdout(&out), stderr(&out));
                let leaked = all.contains("s3cret") || all.contains(&SECRET.replace('-', "%2D"));
                let one_line = stderr(&out)
                    .lines()
                    .filter(|l| l.starts_with("error: "))
                    .count()
                    == 1;
                if leaked || code(&out) != Some(want_code) || !one_line {
                    failures.push(format!(
                        "{what} (flag: {via_flag}) {args:?}: exit {:?}, output {all:?}",
                        code(&out)
                    ));
                }
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[tokio::test]
async fn a_password_is_not_printed_on_success_either() {
    let db = TestDb::new().await;
    let mut u = url::Url::parse(&base_url()).unwrap();
    u.set_password(Some(SECRET)).unwrap(); // trust auth on the test server ignores it
    for args in CONNECTING {
        let out = output(
            db.cmd()
                .env("DATABASE_URL", u.as_str())
                .env("OUTBOXCTL_LOG", "trace")
                .args(args),
        );
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(!all.contains(SECRET), "{args:?}: {all}");
    }
}

#[test]
fn unreachable_database_exits_3_with_one_line_naming_the_server() {
    for args in CONNECTING {
        let out = output(bin().args(args).env(
            "DATABASE_URL",
            format!("postgres://bob:{SECRET}@127.0.0.1:1/app"),
        ));
        assert_eq!(code(&out), Some(3), "{args:?}: {}", stderr(&out));
        assert_one_line_error(&out, "refused");
        assert!(
            stderr(&out)
                .starts_with("error: cannot connect to PostgreSQL at bob@127.0.0.1:1/app: "),
            "{}",
            stderr(&out)
        );
    }
}

#[test]
fn connecting_gives_up_after_the_connect_timeout() {
    // A server that accepts the TCP connection and never answers.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let started = std::time::Instant::now();
    let out = output(bin().args(["stats", "--connect-timeout", "300ms"]).env(
        "DATABASE_URL",
        format!("postgres://bob@127.0.0.1:{port}/app"),
    ));
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert_one_line_error(&out, "timeout");
    assert_eq!(
        stderr(&out),
        format!("error: cannot connect to PostgreSQL at bob@127.0.0.1:{port}/app: timed out after 300ms\n")
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    // The env fallback is the same setting.
    let out = output(
        bin()
            .arg("stats")
            .env("OUTBOXCTL_CONNECT_TIMEOUT", "200ms")
            .env(
                "DATABASE_URL",
                format!("postgres://bob@127.0.0.1:{port}/app"),
            ),
    );
    assert!(
        stderr(&out).ends_with("timed out after 200ms\n"),
        "{}",
        stderr(&out)
    );
    drop(listener);
}

#[tokio::test]
async fn libpq_variables_are_used_without_a_url() {
    let db = TestDb::unmigrated().await;
    let u = url::Url::parse(&base_url()).unwrap();
    let pg = |c: &mut Command| {
        c.env("PGHOST", u.host_str().unwrap())
            .env("PGPORT", u.port().unwrap_or(5432).to_string())
            .env("PGUSER", u.username())
            .env("PGDATABASE", u.path().trim_start_matches('/'))
            .env("PGPASSWORD", SECRET)
            .env("OUTBOXCTL_SCHEMA", &db.schema);
    };
    for args in [&["migrate"][..], &["stats", "--json"]] {
        let mut c = bin();
        pg(&mut c);
        c.args(args);
        let out = output(&mut c);
        assert!(out.status.success(), "{args:?}: {}", stderr(&out));
        assert!(!format!("{}{}", stdout(&out), stderr(&out)).contains(SECRET));
    }
    let n: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(n, 0, "migrate created the outbox through the PG* settings");
    // An empty DATABASE_URL counts as unset.
    let mut c = bin();
    pg(&mut c);
    c.env("DATABASE_URL", "").args(["stats"]);
    let out = output(&mut c);
    assert!(out.status.success(), "{}", stderr(&out));
    // They are really read: a wrong PGPORT is the server the error names.
    let mut c = bin();
    pg(&mut c);
    c.env("PGPORT", "1").env("PGUSER", "carol").arg("stats");
    let out = output(&mut c);
    assert_eq!(code(&out), Some(3), "{}", stderr(&out));
    assert!(
        stderr(&out).starts_with(&format!(
            "error: cannot connect to PostgreSQL at carol@{}:1/",
            u.host_str().unwrap()
        )),
        "{}",
        stderr(&out)
    );
    // And a URL wins over them.
    let mut c = bin();
    pg(&mut c);
    c.env("PGPORT", "1")
        .env("DATABASE_URL", base_url())
        .arg("stats");
    let out = output(&mut c);
    assert!(out.status.success(), "{}", stderr(&out));
}

/// Runs `args` with stdout connected to a socket whose other end is already closed.
fn with_closed_stdout(mut cmd: Command) -> Output {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(ours);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(OwnedFd::from(theirs)))
        .stderr(Stdio::piped())
        .output()
        .unwrap()
}

#[tokio::test]
async fn a_closed_stdout_is_a_normal_exit() {
    let db = TestDb::new().await;
    for args in [
        &["migrate"][..],
        &["migrate", "--json"],
        &["migrate", "--status"],
        &["stats"],
        &["stats", "--json"],
        &[
            "publish",
            "--event-type",
            "a",
            "--aggregate-type",
            "b",
            "--aggregate-id",
            "c",
            "--payload",
            "{}",
        ],
        &[
            "publish",
            "--event-type",
            "a",
            "--aggregate-type",
            "b",
            "--aggregate-id",
            "d",
            "--payload",
            "{}",
            "--json",
        ],
        &["completions", "bash"],
    ] {
        let out = with_closed_stdout({
            let mut c = db.cmd();
            c.args(args);
            c
        });
        assert_eq!(code(&out), Some(0), "{args:?}: {}", stderr(&out));
        assert_eq!(stderr(&out), "", "{args:?}");
    }
}

#[tokio::test]
async fn on_off_environment_variables_take_the_usual_spellings() {
    let db = TestDb::new().await;
    for (value, on) in [
        ("1", true),
        ("true", true),
        ("yes", true),
        ("on", true),
        ("0", false),
        ("false", false),
        ("no", false),
        ("off", false),
        ("", false),
    ] {
        let out = output(
            db.cmd()
                .arg("stats")
                .env("OUTBOXCTL_JSON", value)
                .env("OUTBOXCTL_QUIET", value),
        );
        assert!(out.status.success(), "{value:?}: {}", stderr(&out));
        assert_eq!(out.stdout.starts_with(b"{"), on, "OUTBOXCTL_JSON={value:?}");
    }
    // OUTBOXCTL_MIGRATE_STATUS=1 only lists: the schema is not created.
    let fresh = TestDb::unmigrated().await;
    let out = output(
        fresh
            .cmd()
            .arg("migrate")
            .env("OUTBOXCTL_MIGRATE_STATUS", "1"),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(stdout(&out).contains("pending"), "{}", stdout(&out));
    let created: bool = fresh
        .scalar(&format!(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = '{}')",
            fresh.schema
        ))
        .await;
    assert!(!created);
}

/// `-v` says which database and role a command used, and where that came from: with only the
/// PG* variables set nothing else does (issue 22 item 11). The password never appears.
#[tokio::test]
async fn verbose_names_the_database_and_where_its_settings_came_from() {
    let db = TestDb::new().await;
    let u = url::Url::parse(&base_url()).unwrap();
    let (host, port) = (u.host_str().unwrap(), u.port().unwrap_or(5432));
    let out = output(
        bin()
            .env("PGHOST", host)
            .env("PGPORT", port.to_string())
            .env("PGUSER", u.username())
            .env("PGDATABASE", u.path().trim_start_matches('/'))
            .env("PGPASSWORD", SECRET)
            .env("OUTBOXCTL_SCHEMA", &db.schema)
            .args(["stats", "-v"]),
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let err = stderr(&out);
    let want = format!(
        "{}@{host}:{port}/{}",
        u.username(),
        u.path().trim_start_matches('/')
    );
    let line = err
        .lines()
        .find(|l| l.contains("connected"))
        .unwrap_or_else(|| panic!("no connection line in: {err}"));
    assert!(
        line.contains(&want) && line.contains("PG* variables") && line.contains(&db.schema),
        "{line}"
    );
    assert!(!err.contains(SECRET));
    // From the URL, the line says so.
    let out = output(db.cmd().args(["stats", "-v"]));
    let err = stderr(&out);
    assert!(
        err.lines()
            .any(|l| l.contains("connected") && l.contains("DATABASE_URL")),
        "{err}"
    );
    // Without -v, nothing.
    let out = output(db.cmd().args(["stats"]));
    assert!(!stderr(&out).contains("connected"), "{}", stderr(&out));
}

/// A role that lacks a privilege is named in the error, with the command that prints what to
/// grant (exit 7), instead of only
/// PostgreSQL's `permission denied for table ...` (issue 22 item 11).
#[tokio::test]
async fn a_missing_privilege_names_the_role_and_what_to_grant() {
    let db = TestDb::new().await;
    let role = format!("{}_ro", db.schema);
    db.exec(&format!(
        "DROP ROLE IF EXISTS \"{role}\"; CREATE ROLE \"{role}\" LOGIN; \
         GRANT USAGE ON SCHEMA \"{s}\" TO \"{role}\";",
        s = db.schema
    ))
    .await;
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&role).unwrap();
    let out = output(
        bin()
            .env("DATABASE_URL", url.as_str())
            .env("OUTBOXCTL_SCHEMA", &db.schema)
            .args(["stats"]),
    );
    let err = stderr(&out);
    db.exec(&format!(
        "REVOKE ALL ON SCHEMA \"{s}\" FROM \"{role}\"; DROP ROLE \"{role}\";",
        s = db.schema
    ))
    .await;
    assert_eq!(
        out.status.code(),
        Some(outboxctl::exit::PRIVILEGE as i32),
        "{err}"
    );
    assert!(err.contains("permission denied"), "{err}");
    assert!(
        err.contains(&format!("role `{role}`"))
            && err.contains(&format!("outboxctl grants --role {role} --for monitor")),
        "names the role and what prints the grants: {err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
}

/// Without USAGE on the schema, PostgreSQL leaves it out of the role's search path: the error
/// says so and names the role, instead of "no outbox table ... run migrate".
#[tokio::test]
async fn a_schema_the_role_may_not_use_is_named_not_called_missing() {
    let db = TestDb::new().await;
    let role = format!("{}_nu", db.schema);
    db.exec(&format!(
        "DROP ROLE IF EXISTS \"{role}\"; CREATE ROLE \"{role}\" LOGIN"
    ))
    .await;
    let mut url = url::Url::parse(&db.url).unwrap();
    url.set_username(&role).unwrap();
    let out = output(
        bin()
            .env("DATABASE_URL", url.as_str())
            .env("OUTBOXCTL_SCHEMA", &db.schema)
            .args(["stats"]),
    );
    db.exec(&format!("DROP ROLE \"{role}\"")).await;
    let err = stderr(&out);
    assert_ne!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains(&format!("role `{role}` may not use schema `{}`", db.schema))
            && err.contains("GRANT USAGE ON SCHEMA")
            && !err.contains("run `outboxctl migrate"),
        "{err}"
    );
}
