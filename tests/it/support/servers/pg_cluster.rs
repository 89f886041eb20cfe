//! A private PostgreSQL cluster for fault tests that restart or stop the server: never the shared
//! one on 5432, which other tests (and other people's tests) are using. Made with Debian's
//! postgresql-common wrappers (`pg_createcluster`, `pg_ctlcluster`; the test runs as root, as CI
//! does), on a port of its own, and dropped on drop, so also when the test fails.

use std::path::{Path, PathBuf};
use std::process::Command;

pub struct PgCluster {
    pub version: String,
    pub name: String,
    pub port: u16,
}

impl PgCluster {
    /// Creates and starts cluster `name` on `port` (trust auth on localhost), first dropping a
    /// leftover of the same name from an aborted run. Each test uses its own name and port.
    /// `port` and `name` are shifted by `OUTBOXCTL_TEST_PORT_OFFSET` ([`crate::support::port`]).
    pub fn start(name: &str, port: u16) -> Self {
        let port = crate::support::port(port);
        let name = &match crate::support::port_offset() {
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

/// A cluster made with `initdb` from the server binaries in `bin/` of a given directory (another
/// PostgreSQL version's, [`crate::database::versions`]; or the machine's own, [`debian_bin`]) in a directory
/// of the test's own, on its own port, stopped (immediately) on drop. When the tests run as root
/// the cluster belongs to `nobody` (initdb refuses root). Trust authentication until a test's
/// `configure` (run between `initdb` and the start) writes its own `pg_hba.conf`; the local
/// socket is in the data directory ([`OwnCluster::psql`]).
pub struct OwnCluster {
    bin: PathBuf,
    pub data: PathBuf,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl OwnCluster {
    pub fn start(bin: &Path, port: u16, configure: impl FnOnce(&OwnCluster)) -> Self {
        let cluster = Self::new(bin, port);
        let data = cluster.data.display().to_string();
        cluster.tool(&[
            "initdb",
            "-D",
            &data,
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
        ]);
        configure(&cluster);
        cluster.launch();
        cluster
    }

    /// A hot standby of `primary` (`pg_basebackup -R`: streaming replication, asynchronous),
    /// started on `port`.
    pub fn standby_of(primary: &OwnCluster, port: u16) -> Self {
        let cluster = Self::new(&primary.bin, port);
        let data = cluster.data.display().to_string();
        let from = primary.port.to_string();
        cluster.tool(&[
            "pg_basebackup",
            "-D",
            &data,
            "-R",
            "-h",
            "127.0.0.1",
            "-p",
            &from,
            "-U",
            "postgres",
        ]);
        cluster.launch();
        cluster
    }

    fn new(bin: &Path, port: u16) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        std::fs::create_dir(&data).unwrap();
        // What the server insists on (initdb sets it too; a base backup does not).
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&data, std::fs::Permissions::from_mode(0o700)).unwrap();
        let cluster = Self {
            bin: bin.to_owned(),
            data,
            port,
            _dir: dir,
        };
        cluster.own(cluster._dir.path());
        cluster.own(&cluster.data);
        cluster
    }

    fn launch(&self) {
        let data = self.data.display().to_string();
        let opts = format!(
            "-p {} -k {data} -c listen_addresses=127.0.0.1 -c fsync=off",
            self.port
        );
        // Beside the data directory, not in it (a base backup would copy it).
        let log = self._dir.path().join("server.log");
        let started = std::panic::catch_unwind(|| {
            self.tool(&[
                "pg_ctl",
                "-D",
                &data,
                "-l",
                &log.display().to_string(),
                "-o",
                &opts,
                "-w",
                "start",
            ])
        });
        if started.is_err() {
            panic!(
                "the server's log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
    }

    /// `pg_ctl stop` (fast: sessions terminated, every WAL record sent to the standbys first).
    pub fn stop(&self) {
        let data = self.data.display().to_string();
        self.tool(&["pg_ctl", "-D", &data, "-m", "fast", "-w", "stop"]);
    }

    /// `pg_ctl promote`: a standby becomes a primary; returns once it takes writes.
    pub fn promote(&self) {
        let data = self.data.display().to_string();
        self.tool(&["pg_ctl", "-D", &data, "-w", "promote"]);
    }

    /// Writes `name` into the data directory, owned by the cluster's user, with `mode`.
    pub fn write(&self, name: &str, contents: &[u8], mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        let path = self.data.join(name);
        std::fs::write(&path, contents).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
        self.own(&path);
    }

    /// Appends `lines` to postgresql.conf.
    pub fn configure(&self, lines: &str) {
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(self.data.join("postgresql.conf"))
            .unwrap();
        writeln!(f, "{lines}").unwrap();
    }

    /// Runs `sql` with psql over the local socket as `postgres`.
    pub fn psql(&self, sql: &str) {
        run(Command::new("psql").args([
            "-X",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            &self.data.display().to_string(),
            "-p",
            &self.port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
            "-c",
            sql,
        ]));
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    fn own(&self, path: &Path) {
        if as_root() {
            std::os::unix::fs::chown(path, Some(NOBODY), Some(NOBODY)).unwrap();
        }
    }

    /// `ARGS[0]` from the version's bin/ with the rest of ARGS, as the cluster's owner.
    fn tool(&self, args: &[&str]) {
        let tool = self.bin.join("bin").join(args[0]);
        let mut cmd = if as_root() {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--"]).arg(&tool);
            c
        } else {
            Command::new(&tool)
        };
        run(cmd.args(&args[1..]));
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let tool = self.bin.join("bin/pg_ctl");
        let data = self.data.display().to_string();
        let args = ["-D", data.as_str(), "-m", "immediate", "stop"];
        let _ = if as_root() {
            Command::new("runuser")
                .args(["-u", "nobody", "--"])
                .arg(&tool)
                .args(args)
                .output()
        } else {
            Command::new(&tool).args(args).output()
        };
    }
}

/// The uid and gid of `nobody`, who owns the clusters when the tests run as root.
const NOBODY: u32 = 65534;

/// Whether the tests run as root (`/proc/self` belongs to the process's user).
fn as_root() -> bool {
    std::fs::metadata("/proc/self").is_ok_and(|m| std::os::unix::fs::MetadataExt::uid(&m) == 0)
}

/// The machine's own server binaries (Debian's, the newest installed), for [`OwnCluster`].
pub fn debian_bin() -> PathBuf {
    PathBuf::from(format!("/usr/lib/postgresql/{}", installed_version()))
}
