//! TLS and authentication against a real TLS cluster the test makes (issue 25): its own CA and
//! certificates (openssl), `ssl = on`, only `hostssl` rules, `scram-sha-256` for passwords and
//! `cert` for a client-certificate user. Every `sslmode`, a wrong CA, a server certificate whose
//! name is not the address (verify-full refuses, verify-ca accepts), client certificates from the
//! URL and from `PGSSLCERT`/`PGSSLKEY`/`PGSSLROOTCERT`, a TLS file that cannot be read; no
//! password or key path in any output.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::support::servers::{debian_bin, OwnCluster};
use crate::support::{stderr, stdout};

const PASSWORD: &str = "tls-s3cret-pw";

/// The test's certificates: `ca` signs the server's (valid for `localhost` only, not for
/// `127.0.0.1`) and the client's (`CN=certuser`); `other_ca` signs nothing here.
struct Certs {
    dir: tempfile::TempDir,
}

impl Certs {
    fn make() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let certs = Self { dir };
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        for (name, cn) in [("ca", "outboxctl-test-ca"), ("other-ca", "another-ca")] {
            certs.openssl(
                &[
                    &["req", "-x509"][..],
                    &ec,
                    &["-keyout", &format!("{name}.key")],
                ]
                .concat(),
                &[
                    "-out",
                    &format!("{name}.crt"),
                    "-days",
                    "2",
                    "-subj",
                    &format!("/CN={cn}"),
                ],
            );
        }
        for (name, cn, ext) in [
            ("server", "localhost", "subjectAltName=DNS:localhost\n"),
            (
                "client",
                "certuser",
                "basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth\n",
            ),
        ] {
            std::fs::write(certs.path(&format!("{name}.ext")), ext).unwrap();
            certs.openssl(
                &[&["req"][..], &ec, &["-keyout", &format!("{name}.key")]].concat(),
                &[
                    "-out",
                    &format!("{name}.csr"),
                    "-subj",
                    &format!("/CN={cn}"),
                ],
            );
            certs.openssl(
                &[
                    "x509",
                    "-req",
                    "-in",
                    &format!("{name}.csr"),
                    "-CA",
                    "ca.crt",
                ],
                &[
                    "-CAkey",
                    "ca.key",
                    "-CAcreateserial",
                    "-days",
                    "2",
                    "-out",
                    &format!("{name}.crt"),
                    "-extfile",
                    &format!("{name}.ext"),
                ],
            );
        }
        certs
    }

    fn openssl(&self, a: &[&str], b: &[&str]) {
        let out = Command::new("openssl")
            .current_dir(self.dir.path())
            .args(a)
            .args(b)
            .output()
            .expect("openssl");
        assert!(
            out.status.success(),
            "openssl {a:?} {b:?}: {}",
            stderr(&out)
        );
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    fn read(&self, name: &str) -> Vec<u8> {
        std::fs::read(self.path(name)).unwrap()
    }
}

/// The TLS cluster: hostssl only (`certuser` by certificate, everyone else by SCRAM password).
fn tls_cluster(certs: &Certs) -> OwnCluster {
    let cluster = OwnCluster::start(&debian_bin(), crate::support::port(18772), |c| {
        c.write("server.crt", &certs.read("server.crt"), 0o644);
        c.write("server.key", &certs.read("server.key"), 0o600);
        c.write("ca.crt", &certs.read("ca.crt"), 0o644);
        c.configure(
            "ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n\
             ssl_ca_file = 'ca.crt'\npassword_encryption = 'scram-sha-256'",
        );
        c.write(
            "pg_hba.conf",
            b"local all all trust\n\
              hostssl all certuser 127.0.0.1/32 cert\n\
              hostssl all all 127.0.0.1/32 scram-sha-256\n",
            0o600,
        );
    });
    cluster.psql(&format!(
        "ALTER USER postgres PASSWORD '{PASSWORD}'; CREATE ROLE certuser LOGIN SUPERUSER"
    ));
    cluster
}

/// `outboxctl ARGS` with `env` (and nothing else of the environment's database settings):
/// (exit code, stdout + stderr).
fn run(env: &[(&str, String)], args: &[&str]) -> (Option<i32>, String) {
    let mut c = crate::support::bin();
    for var in [
        "DATABASE_URL",
        "PGHOST",
        "PGPORT",
        "PGUSER",
        "PGPASSWORD",
        "PGDATABASE",
        "PGSSLMODE",
        "PGSSLROOTCERT",
        "PGSSLCERT",
        "PGSSLKEY",
    ] {
        c.env_remove(var);
    }
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.args(args).output().unwrap();
    (
        out.status.code(),
        format!("{}{}", stdout(&out), stderr(&out)),
    )
}

fn url(host: &str, port: u16, user: &str, query: &str) -> Vec<(&'static str, String)> {
    let auth = if user == "postgres" {
        format!("postgres:{PASSWORD}")
    } else {
        user.to_owned()
    };
    vec![(
        "DATABASE_URL",
        format!("postgres://{auth}@{host}:{port}/postgres?{query}"),
    )]
}

/// (what, environment, command, exit code, a piece of the output)
type Case<'a> = (&'a str, Vec<(&'a str, String)>, &'a [&'a str], i32, &'a str);

fn path(p: &Path) -> String {
    p.display().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sslmode_certificates_and_client_certificates_against_a_tls_cluster() {
    let certs = Certs::make();
    let cluster = tls_cluster(&certs);
    let port = cluster.port;
    let ca = path(&certs.path("ca.crt"));
    let other_ca = path(&certs.path("other-ca.crt"));
    let (cert, key) = (
        path(&certs.path("client.crt")),
        path(&certs.path("client.key")),
    );
    let secrets = [PASSWORD, key.as_str()];
    let ip = "127.0.0.1";

    let cases: Vec<Case> = vec![
        (
            "disable against hostssl only: the server's reason",
            url(ip, port, "postgres", "sslmode=disable"),
            &["migrate"],
            3,
            "no pg_hba.conf entry",
        ),
        (
            "allow: sqlx tries without TLS only (libpq would retry with it)",
            url(ip, port, "postgres", "sslmode=allow"),
            &["stats"],
            3,
            "no encryption",
        ),
        (
            "prefer",
            url(ip, port, "postgres", "sslmode=prefer"),
            &["migrate"],
            0,
            "migrations",
        ),
        (
            "require",
            url(ip, port, "postgres", "sslmode=require"),
            &["stats", "--json"],
            0,
            "\"ready\"",
        ),
        (
            "verify-ca with the CA: the name is not checked",
            url(
                ip,
                port,
                "postgres",
                &format!("sslmode=verify-ca&sslrootcert={ca}"),
            ),
            &["stats", "--json"],
            0,
            "\"ready\"",
        ),
        (
            "verify-ca with another CA",
            url(
                ip,
                port,
                "postgres",
                &format!("sslmode=verify-ca&sslrootcert={other_ca}"),
            ),
            &["stats"],
            3,
            "UnknownIssuer",
        ),
        (
            "verify-full: the certificate is not for 127.0.0.1",
            url(
                ip,
                port,
                "postgres",
                &format!("sslmode=verify-full&sslrootcert={ca}"),
            ),
            &["stats"],
            3,
            "not valid for name",
        ),
        (
            "verify-full by the certificate's name",
            url(
                "localhost",
                port,
                "postgres",
                &format!("sslmode=verify-full&sslrootcert={ca}"),
            ),
            &["stats", "--json"],
            0,
            "\"ready\"",
        ),
        (
            "a wrong password",
            vec![(
                "DATABASE_URL",
                format!(
                    "postgres://postgres:wrong-{PASSWORD}@{ip}:{port}/postgres?sslmode=require"
                ),
            )],
            &["stats"],
            3,
            "password authentication failed",
        ),
        (
            "client certificate in the URL",
            url(
                ip,
                port,
                "certuser",
                &format!("sslmode=verify-ca&sslrootcert={ca}&sslcert={cert}&sslkey={key}"),
            ),
            &["stats", "--json"],
            0,
            "\"ready\"",
        ),
        (
            "the cert user without a certificate",
            url(ip, port, "certuser", "sslmode=require"),
            &["stats"],
            3,
            "requires a valid client certificate",
        ),
        (
            "client certificate from the libpq variables",
            vec![
                ("PGHOST", ip.to_owned()),
                ("PGPORT", port.to_string()),
                ("PGUSER", "certuser".to_owned()),
                ("PGDATABASE", "postgres".to_owned()),
                ("PGSSLMODE", "verify-full".to_owned()),
                ("PGSSLROOTCERT", ca.clone()),
                ("PGSSLCERT", cert.clone()),
                ("PGSSLKEY", key.clone()),
            ],
            &["stats", "--json"],
            3,
            "not valid for name",
        ),
        (
            "client certificate from the libpq variables, by the certificate's name",
            vec![
                ("PGHOST", "localhost".to_owned()),
                ("PGPORT", port.to_string()),
                ("PGUSER", "certuser".to_owned()),
                ("PGDATABASE", "postgres".to_owned()),
                ("PGSSLMODE", "verify-full".to_owned()),
                ("PGSSLROOTCERT", ca.clone()),
                ("PGSSLCERT", cert.clone()),
                ("PGSSLKEY", key.clone()),
            ],
            &["relay", "--once", "--sink", "null"],
            0,
            "relayed",
        ),
        (
            "a key file that cannot be read, from the URL",
            url(
                ip,
                port,
                "certuser",
                &format!("sslmode=require&sslcert={cert}&sslkey={key}.missing"),
            ),
            &["stats"],
            2,
            "TLS file named by `sslkey` in --database-url/DATABASE_URL",
        ),
        (
            "a CA file that cannot be read, from PGSSLROOTCERT",
            vec![
                (
                    "DATABASE_URL",
                    format!(
                        "postgres://postgres:{PASSWORD}@{ip}:{port}/postgres?sslmode=verify-ca"
                    ),
                ),
                ("PGSSLROOTCERT", format!("{ca}.missing")),
            ],
            &["stats"],
            2,
            "TLS file named by PGSSLROOTCERT",
        ),
    ];
    let mut failures = Vec::new();
    for (what, env, args, code, piece) in &cases {
        let (got, output) = run(env, args);
        if got != Some(*code) || !output.contains(piece) {
            failures.push(format!(
                "{what}: {args:?} exited {got:?} (want {code}), want {piece:?} in:\n{output}"
            ));
        }
        if *code != 0 && output.trim_end().lines().count() != 1 {
            failures.push(format!("{what}: not one line:\n{output}"));
        }
        for s in secrets {
            if output.contains(s) {
                failures.push(format!(
                    "{what}: the output shows a secret ({s}):\n{output}"
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));

    drop(cluster);
}
