//! A real HTTP/1.1 consumer for the fault suite, whose behaviour the scenario switches while the
//! relays run: answering normally, slowly (after the request was processed: the consumer took it
//! but the relay's timeout fired first), resetting connections (closed with the request unread:
//! the kernel answers with a TCP RST; nothing processed), or processing the body and closing
//! before the response, or refusing every request with one status (429: rate limited). A poison
//! event (`"poison": true` in the payload) is answered 400.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behaviour {
    Normal,
    /// Processes the request, then waits this long before the response.
    Slow(Duration),
    /// Closes the connection without reading the body and without an answer.
    Reset,
    /// Reads and processes the body, then closes without an answer.
    CloseAfterBody,
    /// Reads the body and answers this status without processing it (e.g. 429: rate limited).
    Refuse(u16),
    /// Processes the request, then holds the response until the behaviour changes (so a
    /// scenario can act while a given relay is known to be mid-publish: [`Consumer::holding`]).
    Hold,
}

pub struct Consumer {
    pub port: u16,
    behaviour: Arc<Mutex<Behaviour>>,
    /// Every body the consumer processed (one entry per delivery).
    processed: Arc<Mutex<Vec<Vec<u8>>>>,
    /// The client ports of the requests held unanswered now ([`Behaviour::Hold`]).
    held: Arc<Mutex<Vec<u16>>>,
    /// Requests that arrived while a behaviour other than [`Behaviour::Normal`] was set: the
    /// proof that a scenario's fault reached a relay.
    faulted: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
}

impl Consumer {
    pub fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let behaviour = Arc::new(Mutex::new(Behaviour::Normal));
        let processed = Arc::new(Mutex::new(Vec::new()));
        let held = Arc::new(Mutex::new(Vec::new()));
        let faulted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (b, p, h, f, s) = (
            Arc::clone(&behaviour),
            Arc::clone(&processed),
            Arc::clone(&held),
            Arc::clone(&faulted),
            Arc::clone(&stop),
        );
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (b, p, h, f) = (
                    Arc::clone(&b),
                    Arc::clone(&p),
                    Arc::clone(&h),
                    Arc::clone(&f),
                );
                std::thread::spawn(move || {
                    let _ = serve(conn, &b, &p, &h, &f);
                });
            }
        });
        Self {
            port,
            behaviour,
            processed,
            held,
            faulted,
            stop,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/events", self.port)
    }

    /// Whether a request from one of `ports` (a relay's client ports) is held unanswered now.
    pub fn holding(&self, ports: &[i32]) -> bool {
        self.held
            .lock()
            .unwrap()
            .iter()
            .any(|p| ports.contains(&i32::from(*p)))
    }

    pub fn set(&self, b: Behaviour) {
        *self.behaviour.lock().unwrap() = b;
    }

    /// Requests a fault behaviour met so far (a scenario asserts its fault was felt).
    pub fn faulted(&self) -> usize {
        self.faulted.load(Ordering::SeqCst)
    }

    pub fn processed(&self) -> Vec<Vec<u8>> {
        self.processed.lock().unwrap().clone()
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

fn serve(
    conn: TcpStream,
    behaviour: &Mutex<Behaviour>,
    processed: &Mutex<Vec<Vec<u8>>>,
    held: &Mutex<Vec<u16>>,
    faulted: &AtomicUsize,
) -> std::io::Result<()> {
    let peer = conn.peer_addr()?.port();
    let mut reader = BufReader::new(conn.try_clone()?);
    let mut writer = conn;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line)? == 0 {
            return Ok(());
        }
        let mut len = 0usize;
        loop {
            let mut h = String::new();
            reader.read_line(&mut h)?;
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse().unwrap_or(0);
                }
            }
        }
        let b = *behaviour.lock().unwrap();
        if b != Behaviour::Normal {
            faulted.fetch_add(1, Ordering::SeqCst);
        }
        if b == Behaviour::Reset {
            // Unread bytes in the receive buffer make the close a RST.
            drop(reader);
            drop(writer);
            return Ok(());
        }
        let mut body = vec![0; len];
        reader.read_exact(&mut body)?;
        let poison = serde_json::from_slice::<serde_json::Value>(&body)
            .map(|v| v["payload"]["poison"] == true)
            .unwrap_or(false);
        if poison {
            writer.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 6\r\n\r\npoison")?;
            continue;
        }
        if let Behaviour::Refuse(status) = b {
            write!(
                writer,
                "HTTP/1.1 {status} Refused\r\nRetry-After: 1\r\nContent-Length: 7\r\n\r\nrefused"
            )?;
            writer.flush()?;
            continue;
        }
        processed.lock().unwrap().push(body);
        match b {
            Behaviour::CloseAfterBody => return Ok(()),
            Behaviour::Slow(d) => std::thread::sleep(d),
            Behaviour::Hold => {
                held.lock().unwrap().push(peer);
                // The pace of a poll of the switch, not a synchronisation.
                while *behaviour.lock().unwrap() == Behaviour::Hold {
                    std::thread::sleep(Duration::from_millis(2));
                }
                held.lock().unwrap().retain(|p| *p != peer);
            }
            _ => {}
        }
        writer.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")?;
        writer.flush()?;
    }
}
