//! The integration tests' network-delay proxy (`tests/it/support/net_delay.rs`) as a program, for
//! the benchmarks: a test double of the network, not of the broker. It listens on 127.0.0.1:LISTEN,
//! forwards every byte to UPSTREAM and delays what comes back (acks, confirms, replies) by
//! DELAY_MS, so every request is slow while the broker behind it works as usual. Runs until
//! killed.
//!
//!   cargo build --release --example net_delay
//!   target/release/examples/net_delay LISTEN_PORT UPSTREAM_HOST:PORT DELAY_MS
//!
//! `bench/lib.sh` starts it (`bench_net_delay`).

use std::time::Duration;

// The one copy of the proxy, shared with the tests; they use `NetDelay::start` (any free port).
#[allow(dead_code)]
#[path = "../tests/it/support/net_delay.rs"]
mod net_delay;

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [listen, upstream, delay_ms] = args.as_slice() else {
        eprintln!("usage: net_delay LISTEN_PORT UPSTREAM_HOST:PORT DELAY_MS");
        std::process::exit(2);
    };
    let (Ok(listen), Ok(delay_ms)) = (listen.parse::<u16>(), delay_ms.parse::<f64>()) else {
        eprintln!("net_delay: LISTEN_PORT is a port, DELAY_MS a number of milliseconds");
        std::process::exit(2);
    };
    let proxy =
        net_delay::NetDelay::start_on(listen, upstream, Duration::from_secs_f64(delay_ms / 1000.0))
            .await;
    eprintln!(
        "net_delay: 127.0.0.1:{} -> {upstream}, +{delay_ms} ms",
        proxy.port
    );
    std::future::pending::<()>().await;
}
