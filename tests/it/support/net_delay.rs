//! A test double of the network, not of the broker: a TCP proxy on 127.0.0.1 that forwards every
//! byte to a real server and delays what the server sends back (its replies, acks, confirms) by a
//! fixed latency, so every request is slow while the server behind it works as usual. Bytes keep
//! their order; the delay is latency, not bandwidth (pipelined replies are all late by the delay,
//! not by the delay each). The benchmarks run the same proxy as a program of its own, the example
//! `net_delay` (`examples/net_delay.rs`, which includes this file; `bench/lib.sh`,
//! `bench_net_delay`).

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The proxy; dropping it closes the listener and every connection through it.
pub struct NetDelay {
    pub port: u16,
    accept: tokio::task::JoinHandle<()>,
}

impl NetDelay {
    /// Listens on a free port and forwards to `upstream` (host:port), replies `delay` late.
    pub async fn start(upstream: &str, delay: Duration) -> Self {
        Self::start_on(0, upstream, delay).await
    }

    /// [`NetDelay::start`] on the port `listen` of 127.0.0.1 (0: any free port).
    pub async fn start_on(listen: u16, upstream: &str, delay: Duration) -> Self {
        let listener = TcpListener::bind(("127.0.0.1", listen))
            .await
            .unwrap_or_else(|e| panic!("listen on 127.0.0.1:{listen}: {e}"));
        let port = listener.local_addr().unwrap().port();
        let upstream = upstream.to_owned();
        let accept = tokio::spawn(async move {
            let mut conns = JoinSet::new();
            while let Ok((client, _)) = listener.accept().await {
                let upstream = upstream.clone();
                conns.spawn(async move {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        return;
                    };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, sw) = server.into_split();
                    let up = async move {
                        let mut sw = sw;
                        let _ = tokio::io::copy(&mut cr, &mut sw).await;
                        let _ = sw.shutdown().await;
                    };
                    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
                    let read = async move {
                        let mut buf = vec![0u8; 64 * 1024];
                        loop {
                            let n = sr.read(&mut buf).await.unwrap_or(0);
                            let _ = tx.send((Instant::now() + delay, buf[..n].to_vec()));
                            if n == 0 {
                                return;
                            }
                        }
                    };
                    let write = async move {
                        while let Some((due, bytes)) = rx.recv().await {
                            tokio::time::sleep_until(due).await;
                            if bytes.is_empty() || cw.write_all(&bytes).await.is_err() {
                                break;
                            }
                        }
                        let _ = cw.shutdown().await;
                    };
                    tokio::join!(up, read, write);
                });
            }
        });
        Self { port, accept }
    }
}

impl Drop for NetDelay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
