//! The daemon's HTTP endpoints (`relay --metrics-addr`): `GET /metrics` (Prometheus text),
//! `GET /livez` (the loop makes progress) and `GET /readyz` (the database answers and the sink's
//! circuit is closed). A small HTTP/1.1 server on hyper, apart from the relay's loop: a wedged
//! loop does not stop it from answering that it is wedged.
//!
//! Nothing here runs per event. A scrape samples the backlog with one statement, at most every
//! [`SAMPLE_EVERY`]; a readiness probe runs one `SELECT 1`. Both run in tasks of their own, waited
//! for at most [`DB_WAIT`], so a hung database makes the probe answer 503 in time instead of
//! hanging the prober, and a statement is never cancelled halfway.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::Bytes;
use hyper::{Method, Request, Response, StatusCode};
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::metrics::{self as m, Health};

/// The backlog is sampled at most this often, however often it is scraped.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);
/// How long a scrape or a probe waits for the database before answering without it.
pub const DB_WAIT: Duration = Duration::from_secs(2);
/// How often histogram samples are folded into their buckets when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// Paths the server answers (the Kubernetes manifests' probes use the same; a test checks).
pub const METRICS_PATH: &str = "/metrics";
pub const LIVEZ_PATH: &str = "/livez";
pub const READYZ_PATH: &str = "/readyz";

/// What the handlers read.
pub struct State {
    pub prometheus: PrometheusHandle,
    pub health: Arc<Health>,
    pub db: crate::db::Session,
    /// The relay's shutdown (first signal): from then on not ready.
    pub shutdown: CancellationToken,
    /// When the backlog was last sampled; held while sampling, so concurrent scrapes run one.
    sampled: tokio::sync::Mutex<Option<Instant>>,
}

impl State {
    pub fn new(
        prometheus: PrometheusHandle,
        health: Arc<Health>,
        db: crate::db::Session,
        shutdown: CancellationToken,
    ) -> Arc<Self> {
        Arc::new(Self {
            prometheus,
            health,
            db,
            shutdown,
            sampled: tokio::sync::Mutex::new(None),
        })
    }
}

/// Binds `addr` (HOST:PORT; a host name is resolved). Errors say which flag and why.
pub async fn bind(addr: &str) -> Result<TcpListener, BindError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(addr)
        .await
        .map_err(|e| BindError::Resolve(addr.to_owned(), e))?
        .collect();
    let mut last = None;
    for a in &addrs {
        match TcpListener::bind(a).await {
            Ok(l) => return Ok(l),
            Err(e) => last = Some((*a, e)),
        }
    }
    match last {
        Some((a, e)) => Err(BindError::Bind(a, e)),
        None => Err(BindError::Resolve(
            addr.to_owned(),
            std::io::Error::other("no address"),
        )),
    }
}

/// Why `--metrics-addr` cannot be served (its exit code is decided in [`crate::exit`]).
#[derive(Debug, thiserror::Error)]
pub enum BindError {
    /// The address does not parse or resolve.
    #[error("invalid --metrics-addr `{0}`: {1}")]
    Resolve(String, #[source] std::io::Error),
    /// The port is in use, or not ours to take.
    #[error("cannot listen on --metrics-addr {0}: {1}")]
    Bind(SocketAddr, #[source] std::io::Error),
}

/// Serves until `stop` (after the relay has finished, so the probes answer during a graceful
/// shutdown too); also keeps the histograms' samples folded in.
pub fn spawn(
    listener: TcpListener,
    state: Arc<State>,
    stop: CancellationToken,
) -> tokio::task::JoinHandle<()> {
    let upkeep = state.prometheus.clone();
    let shutdown = stop.clone();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.cancelled() => break,
                _ = tokio::time::sleep(UPKEEP_EVERY) => upkeep.run_upkeep(),
            }
        }
    });
    tokio::spawn(async move {
        loop {
            let stream = tokio::select! {
                _ = shutdown.cancelled() => break,
                r = listener.accept() => match r {
                    Ok((s, _)) => s,
                    Err(e) => {
                        tracing::debug!(error = %e, "metrics: accept failed");
                        continue;
                    }
                },
            };
            let state = Arc::clone(&state);
            tokio::spawn(async move {
                let io = hyper_util::rt::TokioIo::new(stream);
                let service = hyper::service::service_fn(move |req| {
                    let state = Arc::clone(&state);
                    async move { Ok::<_, Infallible>(route(&state, &req).await) }
                });
                let conn = hyper::server::conn::http1::Builder::new()
                    .timer(hyper_util::rt::TokioTimer::new())
                    .header_read_timeout(Duration::from_secs(10))
                    .serve_connection(io, service);
                if let Err(e) = conn.await {
                    tracing::debug!(error = %e, "metrics: connection ended");
                }
            });
        }
    })
}

async fn route<B>(state: &Arc<State>, req: &Request<B>) -> Response<Full<Bytes>> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(StatusCode::METHOD_NOT_ALLOWED, "only GET\n");
    }
    match req.uri().path() {
        METRICS_PATH => {
            sample_if_due(state).await;
            let mut r = Response::new(Full::new(Bytes::from(state.prometheus.render())));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
            );
            r
        }
        LIVEZ_PATH => match state.health.live() {
            Ok(()) => text(StatusCode::OK, "ok\n"),
            Err(late) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!(
                    "relay loop stuck: {} overdue\n",
                    crate::output::human_duration(late)
                ),
            ),
        },
        READYZ_PATH => match readiness(state).await {
            Ok(()) => text(StatusCode::OK, "ok\n"),
            Err(why) => text(StatusCode::SERVICE_UNAVAILABLE, &format!("{why}\n")),
        },
        _ => text(
            StatusCode::NOT_FOUND,
            "not found: try /metrics, /livez or /readyz\n",
        ),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_owned())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Ready: not shutting down, the sink's circuit closed, the database answering a `SELECT 1`
/// within [`DB_WAIT`]. Else the one-line reason.
async fn readiness(state: &State) -> Result<(), String> {
    if state.shutdown.is_cancelled() {
        return Err("shutting down".into());
    }
    if state.health.circuit_open() {
        return Err("sink unavailable (circuit open): claims paused while probing".into());
    }
    let db = state.db.clone();
    let ping =
        tokio::spawn(async move { db.run(async |c| crate::db::metrics::ping(c).await).await });
    let r = match tokio::time::timeout(DB_WAIT, ping).await {
        Ok(Ok(Ok(()))) => Ok(()),
        Ok(Ok(Err(e))) => Err(format!(
            "database unreachable: {}",
            one_line(&e.to_string())
        )),
        Ok(Err(e)) => Err(format!("database check failed: {e}")),
        Err(_) => Err(format!(
            "database unreachable: no answer within {}",
            humantime::format_duration(DB_WAIT)
        )),
    };
    metrics::gauge!(m::DATABASE_UP).set(if r.is_ok() { 1.0 } else { 0.0 });
    r
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Samples the backlog gauges unless a sample is younger than [`SAMPLE_EVERY`] or one is being
/// taken (then the scrape serves the values it has). Waits for it at most [`DB_WAIT`]; a sample
/// that takes longer still completes in its task and serves the next scrape.
async fn sample_if_due(state: &Arc<State>) {
    let st = Arc::clone(state);
    let task = tokio::spawn(async move {
        let Ok(mut last) = st.sampled.try_lock() else {
            return;
        };
        if last.is_some_and(|t| t.elapsed() < SAMPLE_EVERY) {
            return;
        }
        *last = Some(Instant::now());
        let sample = st
            .db
            .run(async |c| crate::db::metrics::sample(c).await)
            .await;
        match sample {
            Ok(s) => {
                metrics::gauge!(m::READY).set(s.ready as f64);
                metrics::gauge!(m::SCHEDULED).set(s.scheduled as f64);
                metrics::gauge!(m::RETRYING).set(s.retrying as f64);
                metrics::gauge!(m::IN_FLIGHT).set(s.in_flight as f64);
                metrics::gauge!(m::DEAD).set(s.dead as f64);
                metrics::gauge!(m::OLDEST_PENDING_AGE)
                    .set(s.oldest_pending_age_seconds.unwrap_or(0.0).max(0.0));
                metrics::gauge!(m::OLDEST_PENDING_LAG)
                    .set(s.oldest_pending_lag_seconds.unwrap_or(0.0).max(0.0));
                metrics::gauge!(m::BLOCKED_KEYS).set(s.blocked_keys as f64);
                metrics::gauge!(m::BLOCKED_EVENTS).set(s.blocked_events as f64);
                metrics::gauge!(m::DATABASE_UP).set(1.0);
            }
            Err(e) => {
                tracing::debug!(error = %e, "metrics: backlog sample failed");
                metrics::counter!(m::SAMPLE_ERRORS).increment(1);
                metrics::gauge!(m::DATABASE_UP).set(0.0);
            }
        }
    });
    let _ = tokio::time::timeout(DB_WAIT, task).await;
}
