//! Broker and pooler instances of the fault suite's own, on ports of its own (18340-18399, 18700-18749), so
//! that stopping or freezing them cannot disturb the machine's shared services or other tests.
//! Each is stopped on drop, also when the test fails (a frozen one is thawed first).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::{wait_port, wait_port_closed};

fn kill(pid: u32, sig: &str) {
    let _ = Command::new("kill")
        .args([&format!("-{sig}"), &pid.to_string()])
        .status();
}

/// A server that is a child process of the test (nats-server, redis-server): stopped with
/// SIGTERM and started again with the same arguments (and the same data directory).
pub struct ChildServer {
    what: &'static str,
    program: &'static str,
    args: Vec<String>,
    pub port: u16,
    child: Option<Child>,
    /// Its data (JetStream store, AOF), kept across a stop and start; removed on drop.
    _dir: tempfile::TempDir,
}

impl ChildServer {
    fn start(what: &'static str, program: &'static str, args: Vec<String>, port: u16) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let args = args
            .into_iter()
            .map(|a| a.replace("{dir}", &dir.path().display().to_string()))
            .collect();
        let mut s = Self {
            what,
            program,
            args,
            port,
            child: None,
            _dir: dir,
        };
        s.start_again();
        s
    }

    /// Our own nats-server with JetStream (stored in the server's directory, so it survives a
    /// restart), `max_payload` 8 KiB so that a larger event is poison.
    pub fn nats(port: u16) -> Self {
        Self::nats_with(port, "max_payload: 8KB\n")
    }

    /// Our own nats-server with JetStream and `extra` lines in its configuration (e.g. an
    /// `authorization` block).
    pub fn nats_with(port: u16, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("nats.conf"),
            format!(
                "listen: 127.0.0.1:{port}\n{extra}jetstream {{ store_dir: \"{}\" }}\n",
                dir.path().join("js").display()
            ),
        )
        .unwrap();
        let mut s = Self {
            what: "nats-server",
            program: "nats-server",
            args: vec![
                "-c".into(),
                dir.path().join("nats.conf").display().to_string(),
            ],
            port,
            child: None,
            _dir: dir,
        };
        s.start_again();
        s
    }

    /// Our own redis-server, appending every write to its AOF (fsync always), so that a stop and
    /// start keeps what it acknowledged.
    pub fn redis(port: u16) -> Self {
        Self::start(
            "redis-server",
            "redis-server",
            [
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "yes",
                "--appendfsync",
                "always",
                "--dir",
                "{dir}",
            ]
            .map(str::to_owned)
            .to_vec(),
            port,
        )
    }

    /// Our own redis-server, keeping nothing on disk, with `extra` arguments (e.g.
    /// `--requirepass`, `--maxmemory`).
    pub fn redis_with(port: u16, extra: &[&str]) -> Self {
        let mut args: Vec<String> = ["--port", &port.to_string(), "--bind", "127.0.0.1"]
            .iter()
            .map(|a| a.to_string())
            .collect();
        args.extend(["--save", "", "--appendonly", "no", "--dir", "{dir}"].map(str::to_owned));
        args.extend(extra.iter().map(|a| a.to_string()));
        Self::start("redis-server", "redis-server", args, port)
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGTERM (a clean shutdown) and wait for the exit.
    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(c.id(), "TERM");
            let _ = c.wait();
        }
        wait_port_closed(self.port, Duration::from_secs(20), self.what);
    }

    pub fn start_again(&mut self) {
        let child = Command::new(self.program)
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.what));
        self.child = Some(child);
        wait_port(self.port, Duration::from_secs(30), self.what);
    }

    pub fn freeze(&self) {
        kill(self.pid(), "STOP");
    }

    pub fn thaw(&self) {
        kill(self.pid(), "CONT");
    }
}

impl Drop for ChildServer {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            kill(c.id(), "CONT");
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Our own RabbitMQ node (`faults@localhost`): its own listener port, distribution port, data,
/// log and plugin files, so the shared node on 5672 is never involved. `rabbitmq-server` runs as
/// the `rabbitmq` user, so its directory is world-writable.
pub struct RabbitNode {
    pub port: u16,
    dist_port: u16,
    dir: tempfile::TempDir,
}

/// The node listening on `port`: `faults<port>@localhost` (the port is shifted by
/// `OUTBOXCTL_TEST_PORT_OFFSET`, so two checkouts, or two scenarios, never share a node).
fn rabbit_node(port: u16) -> String {
    format!("faults{port}@localhost")
}

impl RabbitNode {
    pub fn start(port: u16, dist_port: u16) -> Self {
        // A node left running by an aborted run of this suite (ours by name).
        let _ = Command::new("rabbitmqctl")
            .args(["-n", &rabbit_node(port), "stop"])
            .output();
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(
            dir.path().join("rabbitmq.conf"),
            format!("listeners.tcp.local = 127.0.0.1:{port}\n"),
        )
        .unwrap();
        std::fs::write(dir.path().join("enabled_plugins"), "[].\n").unwrap();
        std::fs::write(dir.path().join("env.conf"), "").unwrap();
        let node = Self {
            port,
            dist_port,
            dir,
        };
        node.start_again();
        node
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn start_again(&self) {
        let ok = Command::new("rabbitmq-server")
            .arg("-detached")
            .env("RABBITMQ_NODENAME", rabbit_node(self.port))
            .env("RABBITMQ_NODE_PORT", self.port.to_string())
            .env("RABBITMQ_DIST_PORT", self.dist_port.to_string())
            .env("RABBITMQ_MNESIA_BASE", self.path("mnesia"))
            .env("RABBITMQ_LOG_BASE", self.path("log"))
            .env("RABBITMQ_CONFIG_FILE", self.path("rabbitmq.conf"))
            .env("RABBITMQ_CONF_ENV_FILE", self.path("env.conf"))
            .env(
                "RABBITMQ_ENABLED_PLUGINS_FILE",
                self.path("enabled_plugins"),
            )
            .env("RABBITMQ_PID_FILE", self.path("pid"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .expect("rabbitmq-server")
            .success();
        assert!(ok, "rabbitmq-server -detached");
        wait_port(self.port, Duration::from_secs(120), "rabbitmq-server");
    }

    /// The node's OS pid (the BEAM), from its pid file.
    pub fn pid(&self) -> u32 {
        std::fs::read_to_string(self.path("pid"))
            .expect("rabbitmq pid file")
            .trim()
            .parse()
            .expect("pid")
    }

    pub fn stop(&self) {
        let _ = Command::new("rabbitmqctl")
            .args(["-n", &rabbit_node(self.port), "stop"])
            .output();
        wait_port_closed(self.port, Duration::from_secs(60), "rabbitmq-server");
    }

    pub fn freeze(&self) {
        kill(self.pid(), "STOP");
    }

    pub fn thaw(&self) {
        kill(self.pid(), "CONT");
    }

    pub fn url(&self) -> String {
        format!("amqp://guest:guest@127.0.0.1:{}/%2f", self.port)
    }

    /// Runs `rabbitmqctl ARGS` against this node; panics unless it succeeds.
    pub fn ctl(&self, args: &[&str]) {
        let out = Command::new("rabbitmqctl")
            .args(["-n", &rabbit_node(self.port)])
            .args(args)
            .output()
            .expect("rabbitmqctl");
        assert!(
            out.status.success(),
            "rabbitmqctl {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

impl Drop for RabbitNode {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.path("pid")) {
            kill(pid.trim().parse().unwrap_or(0), "CONT");
        }
        let _ = Command::new("rabbitmqctl")
            .args(["-n", &rabbit_node(self.port), "stop"])
            .output();
    }
}

/// PgBouncer of our own (it refuses to run as root: run as `postgres`), daemonised with a pid
/// file; killed by that pid on drop.
pub struct PgBouncer {
    pub port: u16,
    dir: tempfile::TempDir,
}

impl PgBouncer {
    /// `[databases]` entry `db` pointing at `target_db` on the shared server, `pool_mode`, and
    /// `extra` lines appended to the `[pgbouncer]` section.
    pub fn start(port: u16, db: &str, target_db: &str, pool_mode: &str, extra: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let d = dir.path().display();
        let (host, pg_port) = crate::support::db_host_port();
        std::fs::write(dir.path().join("users.txt"), "\"postgres\" \"\"\n").unwrap();
        std::fs::write(
            dir.path().join("pgbouncer.ini"),
            format!(
                "[databases]\n{db} = host={host} port={pg_port} dbname={target_db}\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\nauth_type = trust\n\
                 auth_file = {d}/users.txt\npool_mode = {pool_mode}\nunix_socket_dir =\n\
                 logfile = {d}/pgbouncer.log\npidfile = {d}/pgbouncer.pid\n\
                 default_pool_size = 40\n{extra}\n"
            ),
        )
        .unwrap();
        let ini = dir.path().join("pgbouncer.ini");
        let ok = Command::new("runuser")
            .args(["-u", "postgres", "--", "pgbouncer", "-d"])
            .arg(&ini)
            .status()
            .expect("pgbouncer")
            .success();
        assert!(ok, "pgbouncer -d {}", ini.display());
        wait_port(port, Duration::from_secs(20), "pgbouncer");
        Self { port, dir }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("pgbouncer.log")).unwrap_or_default()
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        if let Ok(pid) = std::fs::read_to_string(self.dir.path().join("pgbouncer.pid")) {
            kill(pid.trim().parse().unwrap_or(0), "TERM");
        }
    }
}

/// Every JSON line of the files in `paths` (one delivery each), for the file sink.
pub fn file_deliveries(paths: &[&Path]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for p in paths {
        let bytes = std::fs::read(p).unwrap_or_default();
        for line in bytes.split(|b| *b == b'\n') {
            if !line.is_empty() {
                out.push(line.to_vec());
            }
        }
    }
    out
}

/// An address that moves, as a virtual IP or a DNS name does in a failover: a TCP proxy on a port
/// of its own that forwards each connection to one server; [`MovingAddress::point_at`] sends new
/// connections to another and cuts every connection made before (the sessions of the old server
/// end with it). Not a test double of PostgreSQL: both ends are real servers.
pub struct MovingAddress {
    pub port: u16,
    target: std::sync::Arc<std::sync::atomic::AtomicU16>,
    conns: std::sync::Arc<std::sync::Mutex<tokio::task::JoinSet<()>>>,
    accept: tokio::task::JoinHandle<()>,
}

impl MovingAddress {
    pub async fn start(target: u16) -> Self {
        use std::sync::atomic::{AtomicU16, Ordering};
        use std::sync::{Arc, Mutex};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(AtomicU16::new(target));
        let conns: Arc<Mutex<tokio::task::JoinSet<()>>> = Arc::default();
        let (t, c) = (Arc::clone(&target), Arc::clone(&conns));
        let accept = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                let to = t.load(Ordering::SeqCst);
                c.lock().unwrap().spawn(async move {
                    if let Ok(mut server) = tokio::net::TcpStream::connect(("127.0.0.1", to)).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                    }
                });
            }
        });
        Self {
            port,
            target,
            conns,
            accept,
        }
    }

    /// New connections go to `port` from now on; the ones made before are cut.
    pub fn point_at(&self, port: u16) {
        self.target.store(port, std::sync::atomic::Ordering::SeqCst);
        self.conns.lock().unwrap().abort_all();
    }

    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for MovingAddress {
    fn drop(&mut self) {
        self.accept.abort();
        self.conns.lock().unwrap().abort_all();
    }
}
