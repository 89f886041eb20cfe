//! A real HTTP/1.1 server for the http sink's tests: loopback TCP, a thread per connection, so a
//! test can hold requests open. Small on purpose: it speaks just what the sink sends.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

/// One request as the server received it.
#[derive(Debug, Clone)]
pub struct Received {
    pub url: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Received {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).expect("JSON body")
    }
}

/// The response: status and extra headers. A header named `:body` (a pseudo-header, never sent)
/// replaces the default body `ok`.
pub type Reply = (u16, Vec<(String, String)>);

pub struct TestServer {
    pub port: u16,
    pub received: Arc<Mutex<Vec<Received>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
}

impl TestServer {
    /// Starts on `port` (0: any free port); `respond` decides each reply (it may block).
    /// HTTP/1.1 with keep-alive, a thread per connection.
    pub fn start<F>(port: u16, respond: F) -> Self
    where
        F: Fn(&Received) -> Reply + Send + Sync + 'static,
    {
        Self::start_on(
            TcpListener::bind(("127.0.0.1", port)).expect("bind"),
            respond,
        )
    }

    /// Serves on a listener already bound (e.g. [`crate::support::servers::ClosedPort::listen`]: the port a
    /// test refused connections on until now, never released in between).
    pub fn start_on<F>(listener: TcpListener, respond: F) -> Self
    where
        F: Fn(&Received) -> Reply + Send + Sync + 'static,
    {
        let port = listener.local_addr().unwrap().port();
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let respond = Arc::new(respond);
        let (rec, st) = (Arc::clone(&received), Arc::clone(&stop));
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if st.load(std::sync::atomic::Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (rec, respond) = (Arc::clone(&rec), Arc::clone(&respond));
                std::thread::spawn(move || {
                    let _ = serve(conn, &*respond, &rec);
                });
            }
        });
        Self {
            port,
            received,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/events", self.port)
    }

    /// Requests answered 2xx so far.
    pub fn accepted(&self) -> Vec<Received> {
        self.received.lock().unwrap().clone()
    }
}

fn serve(
    conn: TcpStream,
    respond: &dyn Fn(&Received) -> Reply,
    rec: &Mutex<Vec<Received>>,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut writer = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let url = line.split_whitespace().nth(1).unwrap_or("/").to_owned();
        let mut headers = Vec::new();
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                headers.push((k.trim().to_owned(), v.trim().to_owned()));
            }
        }
        let len: usize = headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
            .and_then(|(_, v)| v.parse().ok())
            .unwrap_or(0);
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        let r = Received { url, headers, body };
        let (status, extra) = respond(&r);
        if (200..300).contains(&status) {
            rec.lock().unwrap().push(r);
        }
        let body = extra
            .iter()
            .find(|(k, _)| k == ":body")
            .map_or("ok".to_owned(), |(_, v)| v.clone());
        let mut resp = format!("HTTP/1.1 {status} X\r\nContent-Length: {}\r\n", body.len());
        for (k, v) in extra.iter().filter(|(k, _)| k != ":body") {
            resp.push_str(&format!("{k}: {v}\r\n"));
        }
        resp.push_str("\r\n");
        resp.push_str(&body);
        writer.write_all(resp.as_bytes())?;
        writer.flush()?;
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port)); // wake the accept loop
    }
}
