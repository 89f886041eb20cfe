//! A private PostgreSQL cluster for fault tests that restart or stop the server: never the shared
//! one on 5432, which other tests (and other people's tests) are using. Made with Debian's
//! postgresql-common wrappers (`pg_createcluster`, `pg_ctlcluster`; the test runs as root, as CI
//! does), on a port of its own, and dropped on drop, so also when the test fails.

use std::process::Command;

pub struct PgCluster {
    pub version: String,
    pub name: String,
    pub port: u16,
}

impl PgCluster {
    /// Creates and starts cluster `name` on `port` (trust auth on localhost), first dropping a
    /// leftover of the same name from an aborted run. Each test uses its own name and port.
    /// `port` and `name` are shifted by `OUTBOXCTL_TEST_PORT_OFFSET` ([`crate::common::port`]).
    pub fn start(name: &str, port: u16) -> Self {
        let port = crate::common::port(port);
        let name = &match crate::common::port_offset() {
            0 => name.to_owned(),
            o => format!("{name}_{o}"),
        };
        let version = installed_version();
        // A cluster left behind by a killed test run: stop and remove it.
        let _ = Command::new("pg_dropcluster")
            .args(["--stop", &version, name])
            .output();
        run(Command::new("pg_createcluster").args([
            &version,
            name,
            "--port",
            &port.to_string(),
            "--start-conf",
            "manual",
            "--",
            "--auth=trust",
        ]));
        let cluster = Self {
            version,
            name: name.to_owned(),
            port,
        };
        cluster.ctl("start");
        cluster
    }

    /// The cluster's `postgres` database as the `postgres` superuser.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// `pg_ctlcluster restart`: a fast shutdown (every session terminated, a shutdown checkpoint),
    /// then a start; returns once the server accepts connections again.
    pub fn restart(&self) {
        self.ctl("restart");
    }

    /// `pg_ctlcluster stop` (fast shutdown); [`PgCluster::start_again`] brings it back.
    pub fn stop(&self) {
        self.ctl("stop");
    }

    pub fn start_again(&self) {
        self.ctl("start");
    }

    fn ctl(&self, action: &str) {
        run(Command::new("pg_ctlcluster").args([
            "--skip-systemctl-redirect",
            &self.version,
            &self.name,
            action,
        ]));
    }
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let _ = Command::new("pg_dropcluster")
            .args(["--stop", &self.version, &self.name])
            .output();
    }
}

/// The newest PostgreSQL major version installed under /usr/lib/postgresql.
fn installed_version() -> String {
    std::fs::read_dir("/usr/lib/postgresql")
        .expect("PostgreSQL server binaries under /usr/lib/postgresql")
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .max()
        .expect("an installed PostgreSQL version")
        .to_string()
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
