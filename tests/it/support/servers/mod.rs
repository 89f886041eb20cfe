//! What a test starts or takes of the machine for itself: servers (HTTP, PostgreSQL clusters,
//! brokers and a pooler of its own), a port that refuses connections, a tmpfs. Each is stopped,
//! released or unmounted on drop, also when the test fails.

mod brokers;
mod http;
pub mod kafka;
mod pg_cluster;

use std::time::{Duration, Instant};

pub use brokers::{file_deliveries, ChildServer, MovingAddress, PgBouncer, RabbitNode};
pub use http::{Received, TestServer};
pub use pg_cluster::{debian_bin, OwnCluster, PgCluster};

/// A port nothing listens on, for as long as this lives: a socket bound to it but not listening,
/// so a connection is refused and no other test (or checkout) can take the port meanwhile.
pub struct ClosedPort {
    pub port: u16,
    _socket: tokio::net::TcpSocket,
}

impl ClosedPort {
    pub fn new() -> Self {
        // socket(2) + bind(2) without listen(2): kept open, never listening.
        let socket = tokio::net::TcpSocket::new_v4().expect("socket");
        socket
            .bind("127.0.0.1:0".parse().unwrap())
            .expect("bind a port");
        let port = socket.local_addr().unwrap().port();
        Self {
            port,
            _socket: socket,
        }
    }

    /// Starts listening on the same port (it was never released, so nothing else took it).
    /// Within a tokio runtime.
    pub fn listen(self) -> std::net::TcpListener {
        let listener = self
            ._socket
            .listen(128)
            .expect("listen")
            .into_std()
            .unwrap();
        listener.set_nonblocking(false).unwrap();
        listener
    }
}

/// Waits until something accepts TCP connections on `port` (or panics after `timeout`).
pub fn wait_port(port: u16, timeout: Duration, what: &str) {
    let deadline = Instant::now() + timeout;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            Instant::now() < deadline,
            "{what} did not listen on {port} within {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until nothing accepts TCP connections on `port` any more.
pub fn wait_port_closed(port: u16, timeout: Duration, what: &str) {
    let deadline = Instant::now() + timeout;
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(
            Instant::now() < deadline,
            "{what} still listening on {port} after {timeout:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A tmpfs of `size` mounted for the test; unmounted on drop, also when the test fails.
pub struct Tmpfs {
    pub dir: tempfile::TempDir,
}

impl Tmpfs {
    pub fn mount(size: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ok = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "mount -t tmpfs (the tests run as root)");
        Self { dir }
    }

    pub fn resize(&self, size: &str) {
        let ok = std::process::Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.dir.path())
            .status()
            .unwrap()
            .success();
        assert!(ok, "remount");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = std::process::Command::new("umount")
            .arg(self.dir.path())
            .status();
    }
}
