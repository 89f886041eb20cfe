//! `relay --metrics-addr` (issue 10, daemon endpoints): the real binary scraped with a real HTTP
//! client; counters checked against what the real HTTP sink received and the database holds;
//! `promtool check metrics` on a real scrape; `/readyz` through a database outage (a TCP proxy the
//! test stops) and a sink outage; `/livez` on a wedged loop. Ports 18400-18449.

use std::collections::{BTreeSet, HashMap};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::support::servers::TestServer;
use crate::support::{capture, promtool_check, signal, stderr, wait_until, TestDb};

/// A running relay daemon; killed on drop (also when the test fails).
struct Daemon {
    child: Child,
    port: u16,
    log: Arc<Mutex<String>>,
}

impl Daemon {
    fn start(mut cmd: std::process::Command, port: u16, extra: &[&str]) -> Self {
        let mut child = cmd
            .args(["relay", "--metrics-addr", &format!("127.0.0.1:{port}")])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let log = capture(child.stderr.take().unwrap());
        Self { child, port, log }
    }

    fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    async fn get(&self, path: &str) -> Option<(u16, String)> {
        let r = reqwest::Client::new()
            .get(self.url(path))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .ok()?;
        let status = r.status().as_u16();
        Some((status, r.text().await.ok()?))
    }

    async fn scrape(&self) -> String {
        let (status, body) = self.get("/metrics").await.expect("scrape");
        assert_eq!(status, 200, "{body}");
        body
    }

    async fn wait_status(&self, path: &str, want: u16, timeout: Duration) -> String {
        let body = Arc::new(Mutex::new(String::new()));
        let b = Arc::clone(&body);
        wait_until(timeout, &format!("{path} answers {want}"), || {
            let b = Arc::clone(&b);
            async move {
                match self.get(path).await {
                    Some((s, text)) if s == want => {
                        *b.lock().unwrap() = text;
                        true
                    }
                    _ => false,
                }
            }
        })
        .await;
        let text = body.lock().unwrap().clone();
        text
    }

    /// Scrapes until `name` (summed over its series) equals `want`.
    async fn wait_metric(&self, name: &str, want: f64) -> String {
        let last = Arc::new(Mutex::new(String::new()));
        let l = Arc::clone(&last);
        wait_until(Duration::from_secs(30), &format!("{name} = {want}"), || {
            let l = Arc::clone(&l);
            async move {
                let Some((200, text)) = self.get("/metrics").await else {
                    return false;
                };
                let ok = value(&text, name) == Some(want);
                *l.lock().unwrap() = text;
                ok
            }
        })
        .await;
        let text = last.lock().unwrap().clone();
        text
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The samples of an exposition: (name, labels, value).
fn samples(text: &str) -> Vec<(String, HashMap<String, String>, f64)> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let (series, v) = l.rsplit_once(' ').expect("name value");
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, rest.trim_end_matches('}')),
                None => (series, ""),
            };
            let labels = labels
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| {
                    let (k, v) = p.split_once('=').expect("label");
                    (k.to_owned(), v.trim_matches('"').to_owned())
                })
                .collect();
            (name.to_owned(), labels, v.parse::<f64>().expect("value"))
        })
        .collect()
}

/// The sum of `name`'s series, if it has any.
fn value(text: &str, name: &str) -> Option<f64> {
    let s: Vec<f64> = samples(text)
        .into_iter()
        .filter(|(n, _, _)| n == name)
        .map(|(_, _, v)| v)
        .collect();
    (!s.is_empty()).then(|| s.iter().sum())
}

#[tokio::test]
async fn counters_match_what_the_sink_received_and_promtool_accepts_the_scrape() {
    let db = TestDb::with_backlog(30).await;
    // Every tenth event is rejected for good (dead letter); event 5 fails once, then goes through.
    let failed_once = Arc::new(AtomicBool::new(false));
    let f = Arc::clone(&failed_once);
    let server = TestServer::start(0, move |r| {
        let n = r.json()["payload"]["n"].as_i64().unwrap();
        if n % 10 == 0 {
            (422, vec![])
        } else if n == 5 && !f.swap(true, Ordering::SeqCst) {
            (500, vec![])
        } else {
            (200, vec![])
        }
    });
    let d = Daemon::start(
        db.cmd(),
        crate::support::port(18400),
        &[
            "--sink",
            &server.url(),
            "--backoff-base",
            "50ms",
            "--backoff-max",
            "100ms",
            "--poll-interval",
            "200ms",
        ],
    );
    wait_until(Duration::from_secs(30), "every event settled", || async {
        db.scalar::<i64>(
            "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL OR dead_lettered_at IS NOT NULL",
        )
        .await
            == 30
    })
    .await;
    let text = d
        .wait_metric("outboxctl_events_published_total", 27.0)
        .await;
    let published = db.count("published_at IS NOT NULL").await;
    let dead = db.count("dead_lettered_at IS NOT NULL").await;
    let received: BTreeSet<i64> = server
        .accepted()
        .iter()
        .map(|r| r.json()["id"].as_i64().unwrap())
        .collect();
    assert_eq!((published, dead, received.len()), (27, 3, 27));
    assert!(failed_once.load(Ordering::SeqCst));
    let v = |name: &str| value(&text, name).unwrap_or_else(|| panic!("{name} missing:\n{text}"));
    assert_eq!(v("outboxctl_events_published_total"), received.len() as f64);
    assert_eq!(v("outboxctl_events_dead_lettered_total"), dead as f64);
    assert_eq!(v("outboxctl_events_retried_total"), 1.0);
    assert_eq!(
        v("outboxctl_events_claimed_total"),
        31.0,
        "30 claims + 1 retry"
    );
    assert_eq!(v("outboxctl_sink_failures_total"), 4.0);
    assert_eq!(v("outboxctl_events_released_total"), 0.0);
    assert_eq!(v("outboxctl_events_lease_lost_total"), 0.0);
    assert_eq!(v("outboxctl_sink_circuit_open"), 0.0);
    // The backlog, sampled at this scrape or one just before: everything settled.
    let text = d.wait_metric("outboxctl_backlog_dead", 3.0).await;
    let v = |name: &str| value(&text, name).unwrap_or_else(|| panic!("{name} missing:\n{text}"));
    assert_eq!(v("outboxctl_backlog_ready"), 0.0);
    assert_eq!(v("outboxctl_backlog_in_flight"), 0.0);
    assert_eq!(v("outboxctl_backlog_oldest_pending_age_seconds"), 0.0);
    assert_eq!(v("outboxctl_database_up"), 1.0);
    // Histograms with explicit buckets; as many publishes timed as batches.
    let batches = v("outboxctl_batch_duration_seconds_count");
    assert!(batches >= 2.0, "{text}");
    assert_eq!(v("outboxctl_publish_duration_seconds_count"), batches);
    assert!(
        text.contains(
            "outboxctl_publish_duration_seconds_bucket{sink=\"http\",mode=\"lease\",le=\"0.001\"}"
        ),
        "{text}"
    );
    // Labels: the sink's scheme and the mode only (build_info adds its own two).
    let mut labels = BTreeSet::new();
    for (name, l, _) in samples(&text) {
        assert_eq!(l.get("sink").map(String::as_str), Some("http"), "{name}");
        assert_eq!(l.get("mode").map(String::as_str), Some("lease"), "{name}");
        labels.extend(l.into_keys());
    }
    let allowed: BTreeSet<String> = ["sink", "mode", "le", "version", "commit"]
        .map(String::from)
        .into();
    assert!(labels.is_subset(&allowed), "{labels:?}");
    let info = samples(&text)
        .into_iter()
        .find(|(n, _, _)| n == "outboxctl_build_info")
        .expect("build_info");
    assert_eq!(info.1["version"], env!("CARGO_PKG_VERSION"));
    assert!(!info.1["commit"].is_empty());
    assert_eq!(info.2, 1.0);
    promtool_check(&text);

    assert_eq!(d.get("/livez").await, Some((200, "ok\n".into())));
    assert_eq!(d.get("/readyz").await, Some((200, "ok\n".into())));
    assert_eq!(d.get("/nope").await.map(|r| r.0), Some(404));
}

/// A TCP proxy to the shared PostgreSQL that the test stops (closing every connection through
/// it) and starts again on the same port: a database outage for one relay only.
struct Proxy {
    port: u16,
    running: Mutex<Option<tokio::task::JoinHandle<()>>>,
    conns: Arc<Mutex<Vec<tokio::task::AbortHandle>>>,
}

impl Proxy {
    async fn start(port: u16) -> Self {
        let p = Self {
            port,
            running: Mutex::new(None),
            conns: Arc::new(Mutex::new(Vec::new())),
        };
        p.up().await;
        p
    }

    async fn up(&self) {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", self.port))
            .await
            .expect("proxy bind");
        let conns = Arc::clone(&self.conns);
        let accept = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    continue;
                };
                let task = tokio::spawn(async move {
                    if let Ok(mut outbound) =
                        tokio::net::TcpStream::connect(crate::support::db_addr()).await
                    {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
                conns.lock().unwrap().push(task.abort_handle());
            }
        });
        *self.running.lock().unwrap() = Some(accept);
    }

    /// Refuses new connections and cuts the open ones.
    async fn down(&self) {
        if let Some(h) = self.running.lock().unwrap().take() {
            h.abort();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
        // The listener is dropped with its task; wait until the port refuses.
        wait_until(Duration::from_secs(5), "proxy port closed", || async {
            tokio::net::TcpStream::connect(("127.0.0.1", self.port))
                .await
                .is_err()
        })
        .await;
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/test", self.port)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(h) = self.running.lock().unwrap().take() {
            h.abort();
        }
        for c in self.conns.lock().unwrap().drain(..) {
            c.abort();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_while_the_database_is_unreachable_and_200_after() {
    let db = TestDb::new().await;
    let proxy = Proxy::start(crate::support::port(18402)).await;
    let mut cmd = db.cmd();
    cmd.env("DATABASE_URL", proxy.url());
    let d = Daemon::start(
        cmd,
        crate::support::port(18401),
        &[
            "--sink",
            "null",
            "--connect-timeout",
            "1s",
            "--poll-interval",
            "200ms",
        ],
    );
    d.wait_status("/readyz", 200, Duration::from_secs(30)).await;

    proxy.down().await;
    let why = d.wait_status("/readyz", 503, Duration::from_secs(30)).await;
    assert!(why.starts_with("database unreachable"), "{why}");
    assert_eq!(why.lines().count(), 1, "one line: {why:?}");
    // No database check in /livez: a database blip must not restart the pod.
    assert_eq!(d.get("/livez").await.map(|r| r.0), Some(200));
    let text = d.scrape().await;
    assert_eq!(value(&text, "outboxctl_database_up"), Some(0.0), "{text}");

    proxy.up().await;
    d.wait_status("/readyz", 200, Duration::from_secs(30)).await;
    // And the relay works again through it.
    db.seed_ready(5).await;
    d.wait_metric("outboxctl_events_published_total", 5.0).await;
    assert_eq!(db.count("published_at IS NOT NULL").await, 5);
}

#[tokio::test]
async fn readyz_is_503_while_the_sink_circuit_is_open_and_200_after() {
    let db = TestDb::with_backlog(5).await;
    let sink_port = crate::support::port(18404);
    let d = Daemon::start(
        db.cmd(),
        crate::support::port(18403),
        &[
            "--sink",
            &format!("http://127.0.0.1:{sink_port}/events"),
            "--backoff-base",
            "50ms",
            "--backoff-max",
            "200ms",
            "--poll-interval",
            "200ms",
        ],
    );
    let why = d.wait_status("/readyz", 503, Duration::from_secs(30)).await;
    assert!(why.starts_with("sink unavailable"), "{why}");
    assert_eq!(why.lines().count(), 1, "{why:?}");
    let text = d.wait_metric("outboxctl_sink_circuit_open", 1.0).await;
    assert_eq!(
        value(&text, "outboxctl_sink_circuit_opened_total"),
        Some(1.0)
    );
    assert_eq!(value(&text, "outboxctl_events_published_total"), Some(0.0));
    assert!(value(&text, "outboxctl_events_unavailable_total").unwrap() >= 1.0);
    assert_eq!(
        d.get("/livez").await.map(|r| r.0),
        Some(200),
        "an outage is not a wedge"
    );

    let accepted = Arc::new(AtomicUsize::new(0));
    let a = Arc::clone(&accepted);
    let _server = TestServer::start(sink_port, move |_| {
        a.fetch_add(1, Ordering::SeqCst);
        (200, vec![])
    });
    d.wait_status("/readyz", 200, Duration::from_secs(30)).await;
    let text = d.wait_metric("outboxctl_events_published_total", 5.0).await;
    assert_eq!(value(&text, "outboxctl_sink_circuit_open"), Some(0.0));
    assert_eq!(accepted.load(Ordering::SeqCst), 5);
    promtool_check(&text);
}

#[tokio::test]
async fn livez_is_200_while_the_loop_runs_and_503_when_it_is_wedged() {
    let db = TestDb::new().await;
    let mut cmd = db.cmd();
    // The test fail-point hangs the step after its publish, forever: a wedged loop.
    cmd.env("OUTBOXCTL_TEST_FAILPOINT", "hang-after-publish");
    let d = Daemon::start(
        cmd,
        crate::support::port(18405),
        &[
            "--sink",
            "null",
            "--lease",
            "1s",
            "--shutdown-timeout",
            "0s",
            "--connect-timeout",
            "1s",
            "--poll-interval",
            "100ms",
        ],
    );
    d.wait_status("/livez", 200, Duration::from_secs(30)).await;
    // Idle for longer than the bound: still live (the loop keeps coming back from its waits).
    let started = std::time::Instant::now();
    wait_until(Duration::from_secs(30), "idle past the bound", || async {
        assert_eq!(d.get("/livez").await.map(|r| r.0), Some(200));
        started.elapsed() > Duration::from_secs(12)
    })
    .await;
    db.seed_ready(1).await;
    wait_until(Duration::from_secs(30), "the fail-point", || async {
        d.log
            .lock()
            .unwrap()
            .contains("FAILPOINT hang-after-publish reached")
    })
    .await;
    // lease 1s + grace 0s + margin (3 x 1s + 100ms + 5s): 503 about 9 s after the hang.
    let why = d.wait_status("/livez", 503, Duration::from_secs(30)).await;
    assert!(why.starts_with("relay loop stuck"), "{why}");
    // The metrics endpoint still answers.
    assert_eq!(d.get("/metrics").await.map(|r| r.0), Some(200));
}

#[tokio::test]
async fn bad_metrics_addr_is_a_usage_error_and_a_port_in_use_a_clear_one() {
    let db = TestDb::new().await;
    for bad in ["nonsense", "127.0.0.1:99999", ":9464", "1.2.3.4:x"] {
        let out = db
            .cmd()
            .args(["relay", "--sink", "null", "--metrics-addr", bad])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {}", stderr(&out));
        let err = stderr(&out);
        let first = err.lines().next().unwrap();
        assert!(
            first.starts_with("error:")
                && first.contains("--metrics-addr")
                && first.contains("HOST:PORT"),
            "{bad}: {err}"
        );
    }
    // From the environment too, naming the variable.
    let out = db
        .cmd()
        .env("OUTBOXCTL_METRICS_ADDR", "nonsense")
        .args(["relay", "--sink", "null"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("OUTBOXCTL_METRICS_ADDR"),
        "{}",
        stderr(&out)
    );
    // Not with --once.
    let out = db
        .cmd()
        .args([
            "relay",
            "--once",
            "--sink",
            "null",
            "--metrics-addr",
            &format!("127.0.0.1:{}", crate::support::port(18406)),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--once"), "{}", stderr(&out));

    let _taken = std::net::TcpListener::bind(("127.0.0.1", crate::support::port(18407))).unwrap();
    let out = db
        .cmd()
        .args([
            "relay",
            "--sink",
            "null",
            "--metrics-addr",
            &format!("127.0.0.1:{}", crate::support::port(18407)),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let err = stderr(&out);
    // The daemon's own log (it logs at info: the connection line) may come first; the error is
    // one line of its own.
    let err: Vec<&str> = err.lines().filter(|l| !l.contains(" INFO ")).collect();
    assert_eq!(err.len(), 1, "{err:?}");
    let err = err[0];
    assert!(
        err.starts_with(&format!(
            "error: cannot listen on --metrics-addr 127.0.0.1:{}",
            crate::support::port(18407)
        )) && err.to_lowercase().contains("in use"),
        "{err}"
    );
}

#[tokio::test]
async fn sigterm_stops_the_server_with_the_relay() {
    let db = TestDb::new().await;
    let mut d = Daemon::start(db.cmd(), crate::support::port(18408), &["--sink", "null"]);
    d.wait_status("/readyz", 200, Duration::from_secs(30)).await;
    signal(&d.child, "TERM");
    assert!(d.child.wait().unwrap().success());
    assert!(d.get("/livez").await.is_none(), "the port is closed");
}

/// Every document of every YAML file under deploy/kubernetes, by file name.
fn manifests() -> Vec<(String, serde_yaml::Value)> {
    use serde::Deserialize;
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    let mut out = Vec::new();
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("deploy/kubernetes")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    for path in files {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let v = serde_yaml::Value::deserialize(doc)
                .unwrap_or_else(|e| panic!("{name}: not YAML: {e}"));
            out.push((name.clone(), v));
        }
    }
    out
}

fn strings(v: &serde_yaml::Value) -> Vec<String> {
    v.as_sequence()
        .expect("a list")
        .iter()
        .map(|s| s.as_str().expect("a string").to_owned())
        .collect()
}

fn kind<'a>(
    docs: &'a [(String, serde_yaml::Value)],
    kind: &str,
    name: &str,
) -> &'a serde_yaml::Value {
    &docs
        .iter()
        .find(|(_, d)| d["kind"] == kind && d["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("{kind} {name}"))
        .1
}

/// The env of a container: DATABASE_URL and the sink come from the Secret, never a literal.
fn check_secret_env(c: &serde_yaml::Value, names: &[&str]) {
    for n in names {
        let e = c["env"]
            .as_sequence()
            .unwrap()
            .iter()
            .find(|e| e["name"] == *n)
            .unwrap_or_else(|| panic!("{n} in the env of {:?}", c["name"]));
        assert_eq!(e["valueFrom"]["secretKeyRef"]["name"], "outboxctl", "{n}");
        assert!(e.get("value").is_none(), "{n} is not a literal");
    }
}

#[test]
fn kubernetes_manifests_match_what_the_binary_serves() {
    use outboxctl::cli::{try_parse_from, Command};
    use outboxctl::relay::endpoints::{LIVEZ_PATH, METRICS_PATH, READYZ_PATH};
    let docs = manifests();

    let dep = kind(&docs, "Deployment", "outboxctl-relay");
    let pod = &dep["spec"]["template"];
    let spec = &pod["spec"];
    let relay = spec["containers"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "relay")
        .expect("relay container");
    // The args are the binary's: parsed with its own parser.
    let args = strings(&relay["args"]);
    let cli = try_parse_from(std::iter::once("outboxctl".to_owned()).chain(args.clone()))
        .unwrap_or_else(|e| panic!("the Deployment's args {args:?}: {e}"));
    let Command::Relay(r) = cli.command else {
        panic!("not relay: {args:?}")
    };
    assert!(!r.once, "a daemon");
    let addr = r.metrics_addr.expect("--metrics-addr");
    let port: u64 = addr.rsplit_once(':').unwrap().1.parse().unwrap();
    let ports = relay["ports"].as_sequence().unwrap();
    let named = ports
        .iter()
        .find(|p| p["containerPort"].as_u64() == Some(port))
        .expect("the metrics port is a containerPort");
    let port_name = named["name"].as_str().expect("named");
    for (probe, path) in [
        ("livenessProbe", LIVEZ_PATH),
        ("readinessProbe", READYZ_PATH),
    ] {
        let get = &relay[probe]["httpGet"];
        assert_eq!(get["path"].as_str(), Some(path), "{probe}");
        let p = &get["port"];
        assert!(
            p.as_str() == Some(port_name) || p.as_u64() == Some(port),
            "{probe} port {p:?}"
        );
        // A readiness probe waits for the database check (at most 2 s) before the kubelet gives up.
        assert!(
            relay[probe]["timeoutSeconds"].as_u64().unwrap() > 2,
            "{probe}"
        );
    }
    let ann = &pod["metadata"]["annotations"];
    assert_eq!(ann["prometheus.io/scrape"], "true");
    assert_eq!(
        ann["prometheus.io/port"].as_str(),
        Some(port.to_string().as_str())
    );
    assert_eq!(ann["prometheus.io/path"].as_str(), Some(METRICS_PATH));
    let grace = spec["terminationGracePeriodSeconds"].as_u64().unwrap();
    assert!(
        grace >= r.shutdown_timeout.as_secs() + 10,
        "terminationGracePeriodSeconds {grace} leaves the relay's --shutdown-timeout {:?} and its settle too little",
        r.shutdown_timeout
    );
    check_secret_env(relay, &["DATABASE_URL", "OUTBOXCTL_SINK"]);

    let prune = kind(&docs, "CronJob", "outboxctl-prune");
    let c = &prune["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    let args = strings(&c["args"]);
    let cli = try_parse_from(std::iter::once("outboxctl".to_owned()).chain(args.clone()))
        .unwrap_or_else(|e| panic!("the prune CronJob's args {args:?}: {e}"));
    assert!(matches!(cli.command, Command::Prune(_)), "{args:?}");
    check_secret_env(c, &["DATABASE_URL"]);
    assert_eq!(prune["spec"]["concurrencyPolicy"], "Forbid");

    let check = kind(&docs, "CronJob", "outboxctl-stats-check");
    let c = &check["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        strings(&c["args"]),
        ["stats", "--check", "--crit-lag", "5m", "--crit-dead", "0"]
    );
    check_secret_env(c, &["DATABASE_URL"]);

    // No connection string outside the example Secret; kustomize lists the rest.
    for (file, d) in &docs {
        if d["kind"] != "Secret" {
            let text = serde_yaml::to_string(d).unwrap();
            assert!(!text.contains("postgres://"), "{file}");
        }
    }
    let kust = kind_any(&docs, "Kustomization");
    let listed: BTreeSet<String> = strings(&kust["resources"]).into_iter().collect();
    let files: BTreeSet<String> = docs
        .iter()
        .filter(|(_, d)| !matches!(d["kind"].as_str(), Some("Secret" | "Kustomization")))
        .map(|(f, _)| f.clone())
        .collect();
    assert_eq!(listed, files);
}

/// The stats-check CronJob's comment (and docs/deploy.md) promise a failed Job on the first dead
/// letter. `stats --check` trips when a figure is greater than its threshold, so that takes
/// `--crit-dead 0`: run the CronJob's own arguments against an outbox holding one dead letter and
/// nothing pending, then against one holding none.
#[tokio::test]
async fn the_kubernetes_stats_check_fails_its_job_on_the_first_dead_letter() {
    let docs = manifests();
    let check = kind(&docs, "CronJob", "outboxctl-stats-check");
    let args =
        strings(&check["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["args"]);
    let db = TestDb::new().await;
    let run = |db: &TestDb| db.cmd().args(&args).stdin(Stdio::null()).output().unwrap();

    let out = run(&db);
    assert_eq!(
        out.status.code(),
        Some(0),
        "no dead letter: {}",
        crate::support::stdout(&out)
    );

    let id = crate::support::fixtures::ready(&db).await;
    crate::support::fixtures::kill(&db, id, "1 minute", "HTTP 500").await;
    let out = run(&db);
    assert_eq!(
        out.status.code(),
        Some(2),
        "one dead letter must fail the Job (CRITICAL): {args:?}: {}",
        crate::support::stdout(&out)
    );
}

fn kind_any<'a>(docs: &'a [(String, serde_yaml::Value)], kind: &str) -> &'a serde_yaml::Value {
    &docs.iter().find(|(_, d)| d["kind"] == kind).expect(kind).1
}

/// The lag gauge is lateness, the age gauge age: an event published with a delay and created 20
/// minutes ago is old but not late; one that failed and waits for a retry an hour away is late
/// since it first fell due (created 10 minutes ago, due at once).
#[tokio::test]
async fn the_lag_gauge_counts_lateness_not_age() {
    let db = TestDb::with_backlog(2).await;
    db.exec(
        "UPDATE outbox SET created_at = now() - interval '20 minutes',
                available_at = now() + interval '1 hour' WHERE id = 1;
         UPDATE outbox SET created_at = now() - interval '10 minutes', attempt_count = 2,
                available_at = now() + interval '1 hour', last_error = 'HTTP 503' WHERE id = 2",
    )
    .await;
    let d = Daemon::start(
        db.cmd(),
        crate::support::port(18408),
        &["--sink", "null", "--poll-interval", "60s"],
    );
    let text = d.wait_metric("outboxctl_backlog_scheduled", 2.0).await;
    let v = |name: &str| value(&text, name).unwrap_or_else(|| panic!("{name} missing:\n{text}"));
    let (age, lag) = (
        v("outboxctl_backlog_oldest_pending_age_seconds"),
        v("outboxctl_backlog_oldest_pending_lag_seconds"),
    );
    assert!((1200.0..1260.0).contains(&age), "{age}");
    assert!((600.0..660.0).contains(&lag), "{lag}");
}

/// In log mode the relay writes no `published_at`: the backlog gauges count what the log has not
/// passed and the retry set (as `stats` does), so they fall to zero once the log has sent all.
#[tokio::test]
async fn the_backlog_gauges_count_what_the_log_has_not_sent_in_log_mode() {
    let db = TestDb::new().await;
    crate::support::run(&db, &["log", "enable"], 0);
    db.seed_ready(4).await;
    let d = Daemon::start(
        db.cmd(),
        crate::support::port(18409),
        &["--mode", "log", "--sink", "null", "--poll-interval", "50ms"],
    );
    d.wait_metric("outboxctl_events_published_total", 4.0).await;
    assert_eq!(
        db.count("published_at IS NULL").await,
        4,
        "the log marks no row"
    );
    let text = d.wait_metric("outboxctl_backlog_ready", 0.0).await;
    let v = |name: &str| value(&text, name).unwrap_or_else(|| panic!("{name} missing:\n{text}"));
    assert_eq!(v("outboxctl_backlog_scheduled"), 0.0);
    assert_eq!(v("outboxctl_backlog_oldest_pending_age_seconds"), 0.0);
}
