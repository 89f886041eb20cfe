//! The fault suite's checker (issue 9): a total-queue checker in the manner of Jepsen's. For each
//! scenario it loads events with known idempotency keys from several producers (some delayed,
//! some poison), runs real `outboxctl relay` processes under a fault against a real component,
//! reads back everything the sink received with a real client of that sink, and counts:
//!
//! - `lost`: keys never delivered and not dead-lettered;
//! - `duplicates`: deliveries beyond the first, against a bound the scenario states;
//! - `unexpected`: deliveries that do not parse, of keys never produced, or whose document differs
//!   from what was produced (id, type, aggregate, tenant, headers, payload);
//! - `dead`: dead-lettered keys, and how many of them were not poison (undeserved);
//! - the time from the end of the fault until every event is published or dead.
//!
//! Every scenario asserts lost = 0, unexpected = 0, no undeserved dead letter, every poison event
//! dead, and its duplicates bound. `OUTBOXCTL_FAULTS_EVENTS` scales the load (CI: the default, a
//! few thousand); `OUTBOXCTL_FAULTS_REPORT` names a file each scenario appends its table row to
//! (`bench/faults.sh` runs the full form and prints the table of the README).

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::support::{capture, TestDb};

/// Events per scenario: `OUTBOXCTL_FAULTS_EVENTS`, default 3000 (the short form CI runs). A value
/// that is not a positive number fails the scenario instead of silently running another load.
pub fn events() -> usize {
    match std::env::var("OUTBOXCTL_FAULTS_EVENTS") {
        Err(_) => 3000,
        Ok(v) => match v.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => panic!(
                "OUTBOXCTL_FAULTS_EVENTS={v:?}: give a positive number of events per scenario"
            ),
        },
    }
}

/// How the load is made.
#[derive(Debug, Clone)]
pub struct Load {
    pub events: usize,
    /// Concurrent producers, each inserting its share in transactions of `chunk` rows.
    pub producers: usize,
    pub chunk: usize,
    /// Every `delayed_every`-th event is due 2 s after it was inserted (database time).
    pub delayed_every: usize,
    /// Every `poison_every`-th event is poison: the scenario's sink refuses it for good.
    pub poison_every: Option<usize>,
    /// A poison event's payload gets this many bytes of padding (a sink that refuses large
    /// messages); 0 for sinks that recognise `"poison": true` in the payload.
    pub poison_pad: usize,
    /// The whole load is spread over about this long, so relays drain while producers insert.
    pub spread: Duration,
}

impl Load {
    pub fn new() -> Self {
        Self {
            events: events(),
            producers: 4,
            chunk: 50,
            delayed_every: 20,
            poison_every: None,
            poison_pad: 0,
            spread: Duration::from_secs(3),
        }
    }

    pub fn poison(mut self, every: usize) -> Self {
        self.poison_every = Some(every);
        self
    }
}

/// What was produced under one key.
#[derive(Debug, Clone)]
struct Produced {
    id: i64,
    payload: Value,
    headers: Value,
    poison: bool,
}

/// One scenario's load and its verdict.
pub struct Checker {
    pub db: Arc<TestDb>,
    pub scenario: String,
    produced: Arc<Mutex<HashMap<String, Produced>>>,
    producing: Arc<AtomicBool>,
    events: usize,
    tenant: uuid::Uuid,
    /// Log mode is on: an event is published when the log passed it (no row is marked).
    log: bool,
}

/// One row of the README's table.
#[derive(Debug, Clone)]
pub struct Report {
    pub scenario: String,
    pub events: usize,
    pub relays: usize,
    pub fault: String,
    pub delivered: usize,
    pub lost: usize,
    /// Deliveries beyond the first (for a sink that drops re-sends: publishes beyond the first).
    pub duplicates: usize,
    /// For a sink that drops re-sends: the duplicates it stored.
    pub stored_duplicates: Option<usize>,
    pub bound: usize,
    pub unexpected: usize,
    pub dead: usize,
    pub undeserved_dead: usize,
    pub poison: usize,
    pub recovery: Duration,
    /// Examples of what went wrong, for the assertion message.
    pub examples: Vec<String>,
}

impl Checker {
    /// A checker over `db` (a migrated schema, or a seed-era one).
    pub fn new(db: TestDb, scenario: &str) -> Self {
        Self {
            db: Arc::new(db),
            scenario: scenario.to_owned(),
            produced: Arc::default(),
            producing: Arc::new(AtomicBool::new(false)),
            events: 0,
            tenant: uuid::Uuid::new_v4(),
            log: false,
        }
    }

    /// Switches log mode on for the scenario (before anything is produced): settled then means
    /// passed by the log and not waiting in its retry set, or dead.
    pub fn log_mode(mut self) -> Self {
        crate::support::run(&self.db, &["log", "enable"], 0);
        self.log = true;
        self
    }

    /// The condition of an event `o` neither published nor dead.
    fn open(&self) -> String {
        let queue = "o.published_at IS NULL AND o.dead_lettered_at IS NULL";
        if self.log {
            format!("{queue} AND {}", outboxctl::db::log::PENDING)
        } else {
            queue.to_owned()
        }
    }

    /// Starts the producers in the background; [`Checker::wait_settled`] waits for them too.
    pub fn produce(&mut self, load: &Load) -> tokio::task::JoinHandle<()> {
        self.events = load.events;
        self.producing.store(true, Ordering::SeqCst);
        let per = load.events.div_ceil(load.producers);
        let chunks = per.div_ceil(load.chunk).max(1);
        let pace = load.spread / chunks as u32;
        let mut tasks = Vec::new();
        for p in 0..load.producers {
            let (db, produced, load) = (
                Arc::clone(&self.db),
                Arc::clone(&self.produced),
                load.clone(),
            );
            let tenant = self.tenant;
            let range = (p * per)..((p + 1) * per).min(load.events);
            tasks.push(tokio::spawn(async move {
                let all: Vec<usize> = range.collect();
                for part in all.chunks(load.chunk) {
                    let next = Instant::now() + pace;
                    insert_chunk(&db, tenant, p, part, &load, &produced).await;
                    tokio::time::sleep_until(next.into()).await;
                }
            }));
        }
        let producing = Arc::clone(&self.producing);
        tokio::spawn(async move {
            for t in tasks {
                t.await.expect("producer");
            }
            producing.store(false, Ordering::SeqCst);
        })
    }

    /// Events published or dead so far.
    pub async fn settled(&self) -> i64 {
        self.db
            .scalar(&format!(
                "SELECT count(*) FROM outbox o WHERE NOT ({})",
                self.open()
            ))
            .await
    }

    /// Waits until at least `n` events are settled (the drain is under way).
    pub async fn wait_progress(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while (self.settled().await as usize) < n {
            assert!(
                Instant::now() < deadline,
                "{}: no progress to {n} settled events",
                self.scenario
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Asserts the drain was not over when the fault began (else it tested nothing).
    pub async fn assert_mid_drain(&self) {
        let unsettled: i64 = self
            .db
            .scalar(&format!(
                "SELECT count(*) FROM outbox o WHERE {}",
                self.open()
            ))
            .await;
        assert!(
            unsettled > 0 || self.producing.load(Ordering::SeqCst),
            "{}: the drain was over before the fault",
            self.scenario
        );
    }

    /// Waits until the producers are done and every event is published or dead; returns the
    /// time since `since` (the end of the fault).
    pub async fn wait_settled(&self, since: Instant, timeout: Duration) -> Duration {
        let deadline = Instant::now() + timeout;
        loop {
            if !self.producing.load(Ordering::SeqCst) {
                let open: i64 = self
                    .db
                    .scalar(&format!(
                        "SELECT count(*) FROM outbox o WHERE {}",
                        self.open()
                    ))
                    .await;
                if open == 0 {
                    return since.elapsed();
                }
            }
            assert!(
                Instant::now() < deadline,
                "{}: not every event published or dead within {timeout:?} of the fault's end",
                self.scenario
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// The verdict on `received` (every document the sink holds, one per delivery).
    pub async fn check(
        &self,
        received: &[Vec<u8>],
        relays: usize,
        fault: &str,
        bound: usize,
        recovery: Duration,
    ) -> Report {
        let report = self.verdict(received, relays, fault, bound, recovery).await;
        report.record();
        report
    }

    /// [`Checker::check`] of a sink that drops re-sends itself (JetStream's `Nats-Msg-Id`
    /// window): what it `stored` is checked for losses and strays, and the duplicates are those
    /// among what was `sent` (every publish, as a plain subscriber of the subject saw it), so
    /// the relay's re-sends are counted although the store hides them.
    pub async fn check_sent(
        &self,
        stored: &[Vec<u8>],
        sent: &[Vec<u8>],
        relays: usize,
        fault: &str,
        bound: usize,
        recovery: Duration,
    ) -> Report {
        let mut report = self.verdict(stored, relays, fault, bound, recovery).await;
        report.stored_duplicates = Some(report.duplicates);
        let mut seen: HashMap<String, usize> = HashMap::new();
        for body in sent {
            if let Ok(doc) = serde_json::from_slice::<Value>(body) {
                if let Some(key) = doc["idempotency_key"].as_str() {
                    *seen.entry(key.to_owned()).or_default() += 1;
                }
            }
        }
        report.duplicates = seen.values().map(|c| c - 1).sum();
        report.record();
        report
    }

    async fn verdict(
        &self,
        received: &[Vec<u8>],
        relays: usize,
        fault: &str,
        bound: usize,
        recovery: Duration,
    ) -> Report {
        let produced = self.produced.lock().unwrap().clone();
        assert_eq!(produced.len(), self.events, "every event was produced");
        let mut seen: HashMap<String, usize> = HashMap::new();
        let mut unexpected = 0;
        let mut examples = Vec::new();
        for body in received {
            let doc: Value = match serde_json::from_slice(body) {
                Ok(v) => v,
                Err(e) => {
                    unexpected += 1;
                    examples.push(format!(
                        "unparsable delivery ({e}): {}",
                        String::from_utf8_lossy(&body[..body.len().min(200)])
                    ));
                    continue;
                }
            };
            let key = doc["idempotency_key"].as_str().unwrap_or_default();
            let Some(p) = produced.get(key) else {
                unexpected += 1;
                examples.push(format!("unknown key {key:?}"));
                continue;
            };
            let same = doc["id"].as_i64() == Some(p.id)
                && doc["payload"] == p.payload
                && doc["headers"] == p.headers
                && doc["type"] == "fault.test"
                && doc["aggregate_type"] == "order"
                && doc["tenant_id"] == self.tenant.to_string();
            if !same {
                unexpected += 1;
                examples.push(format!(
                    "{key}: body differs from the stored document: {doc}"
                ));
                continue;
            }
            *seen.entry(key.to_owned()).or_default() += 1;
        }
        let dead: HashSet<String> = sqlx::query_scalar(
            "SELECT idempotency_key FROM outbox WHERE dead_lettered_at IS NOT NULL",
        )
        .fetch_all(&self.db.pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
        let mut lost = 0;
        for key in produced.keys() {
            if !seen.contains_key(key) && !dead.contains(key) {
                lost += 1;
                if examples.len() < 20 {
                    examples.push(format!("lost: {key}"));
                }
            }
        }
        let undeserved: Vec<&String> = dead
            .iter()
            .filter(|k| !produced.get(*k).is_some_and(|p| p.poison))
            .collect();
        for k in undeserved.iter().take(5) {
            examples.push(format!("undeserved dead letter: {k}"));
        }
        let poison = produced.values().filter(|p| p.poison).count();
        Report {
            scenario: self.scenario.clone(),
            events: self.events,
            relays,
            fault: fault.to_owned(),
            delivered: seen.len(),
            lost,
            duplicates: seen.values().map(|c| c - 1).sum(),
            stored_duplicates: None,
            bound,
            unexpected,
            dead: dead.len(),
            undeserved_dead: undeserved.len(),
            poison,
            recovery,
            examples,
        }
    }
}

impl Report {
    /// The table row (markdown), as bench/faults.sh collects it.
    pub fn row(&self) -> String {
        let stored = self
            .stored_duplicates
            .map(|n| format!(", {n} stored"))
            .unwrap_or_default();
        format!(
            "| {} | {} | {} | {} | {} | {} (≤ {}{stored}) | {} | {} ({} poison) | {:.1} s |",
            self.scenario,
            self.events,
            self.relays,
            self.fault,
            self.lost,
            self.duplicates,
            self.bound,
            self.unexpected,
            self.dead,
            self.poison,
            self.recovery.as_secs_f64()
        )
    }

    fn record(&self) {
        eprintln!("{}", self.row());
        if let Ok(path) = std::env::var("OUTBOXCTL_FAULTS_REPORT") {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&path)
                .expect("OUTBOXCTL_FAULTS_REPORT");
            writeln!(f, "{}", self.row()).unwrap();
        }
    }

    /// lost = 0, unexpected = 0, duplicates within the bound, every dead letter deserved and
    /// every poison event dead.
    pub fn assert_ok(&self, logs: &str) {
        let why = format!(
            "{}\n{}\nrelay logs (tail):\n{}",
            self.row(),
            self.examples.join("\n"),
            tail(logs, 60)
        );
        assert_eq!(self.lost, 0, "lost events: {why}");
        assert_eq!(self.unexpected, 0, "unexpected deliveries: {why}");
        assert!(
            self.duplicates <= self.bound,
            "duplicates over the bound: {why}"
        );
        assert_eq!(self.undeserved_dead, 0, "undeserved dead letters: {why}");
        assert_eq!(self.dead, self.poison, "every poison event dead: {why}");
        assert_eq!(
            self.delivered + self.dead,
            self.events,
            "every event accounted for: {why}"
        );
    }
}

fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// Inserts one producer's chunk in one transaction, the way an application enqueues.
async fn insert_chunk(
    db: &TestDb,
    tenant: uuid::Uuid,
    producer: usize,
    part: &[usize],
    load: &Load,
    produced: &Mutex<HashMap<String, Produced>>,
) {
    let mut keys = Vec::new();
    let mut payloads = Vec::new();
    let mut headers = Vec::new();
    let mut delays = Vec::new();
    let mut poisons = Vec::new();
    for &i in part {
        let poison = load.poison_every.is_some_and(|e| i % e == e - 1);
        let delayed = i % load.delayed_every == load.delayed_every - 1;
        let pad = if poison { load.poison_pad } else { 0 };
        keys.push(format!(
            "fault-{producer}-{i}-{}",
            uuid::Uuid::new_v4().simple()
        ));
        payloads.push(json!({
            "producer": producer,
            "n": i,
            "poison": poison,
            "text": "é\"\\\n\u{1F600}",
            "pad": "x".repeat(pad),
        }));
        headers.push(json!({ "x-producer": producer.to_string() }));
        delays.push(if delayed { 2.0f64 } else { 0.0 });
        poisons.push(poison);
    }
    // Like an application, a producer retries its transaction when the database goes away
    // (a scenario may restart it); a retry skips keys an earlier attempt did commit.
    let deadline = Instant::now() + Duration::from_secs(120);
    let rows: Vec<(i64, String)> = loop {
        let attempt = sqlx::query_as(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, headers,
                                 idempotency_key, available_at)
             SELECT $1, 'order', 'o-' || k, 'fault.test', p, h, k,
                    now() + make_interval(secs => d)
               FROM unnest($2::text[], $3::jsonb[], $4::jsonb[], $5::float8[]) AS t(k, p, h, d)
             ON CONFLICT (idempotency_key) DO NOTHING
             RETURNING id, idempotency_key",
        )
        .bind(tenant)
        .bind(&keys)
        .bind(&payloads)
        .bind(&headers)
        .bind(&delays)
        .fetch_all(&db.pool)
        .await;
        match attempt {
            Ok(rows) if rows.len() == keys.len() => break rows,
            Ok(rows) => {
                let mut all: Vec<(i64, String)> = sqlx::query_as(
                    "SELECT id, idempotency_key FROM outbox WHERE idempotency_key = ANY($1)",
                )
                .bind(&keys)
                .fetch_all(&db.pool)
                .await
                .expect("producer: the keys an earlier attempt committed");
                all.retain(|(_, k)| !rows.iter().any(|(_, r)| r == k));
                let mut rows = rows;
                rows.append(&mut all);
                break rows;
            }
            Err(e) => {
                assert!(Instant::now() < deadline, "producer insert: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let mut map = produced.lock().unwrap();
    for (id, key) in rows {
        let j = keys.iter().position(|k| *k == key).unwrap();
        map.insert(
            key,
            Produced {
                id,
                payload: payloads[j].clone(),
                headers: headers[j].clone(),
                poison: poisons[j],
            },
        );
    }
}

/// Real relay processes, killed and reaped on drop (also when the test fails).
pub struct Relays {
    pub children: Vec<Child>,
    logs: Vec<Arc<Mutex<String>>>,
}

impl Relays {
    /// Spawns `n` relays; `cmd(i)` builds relay `i`'s command (stdout and stderr are taken).
    pub fn spawn(n: usize, mut cmd: impl FnMut(usize) -> Command) -> Self {
        let mut children = Vec::new();
        let mut logs = Vec::new();
        for i in 0..n {
            let mut child = cmd(i)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .expect("spawn relay");
            logs.push(capture(child.stderr.take().unwrap()));
            children.push(child);
        }
        Self { children, logs }
    }

    /// Every relay's log so far, each line prefixed with its relay number.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for (i, l) in self.logs.iter().enumerate() {
            for line in l.lock().unwrap().lines() {
                out.push_str(&format!("[{i}] {line}\n"));
            }
        }
        out
    }

    /// Asserts every relay is still running (a fault must not make a daemon exit).
    pub fn assert_running(&mut self) {
        for (i, c) in self.children.iter_mut().enumerate() {
            if let Some(status) = c.try_wait().unwrap() {
                panic!(
                    "relay {i} exited with {status} during the scenario\n{}",
                    self.logs()
                );
            }
        }
    }

    /// SIGTERM to all, and every one exits 0.
    pub fn stop(&mut self) {
        for c in &self.children {
            crate::support::signal(c, "TERM");
        }
        let logs = self.logs();
        for (i, c) in self.children.iter_mut().enumerate() {
            let status = c.wait().unwrap();
            assert!(
                status.success(),
                "relay {i} exited with {status} on SIGTERM\n{logs}"
            );
        }
        self.children.clear();
    }
}

impl Drop for Relays {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// The relay command every scenario starts from: `mode`, `sink`, small batches and quick
/// polling, probing and backoff (so recovery time measures the relay, not a long backoff).
/// The relays' `--pipeline-depth` (the default: `relay_cmd` does not pass it): batches in flight
/// per relay, so a relay that dies or loses its connection re-sends at most this many batches.
pub const DEPTH: usize = outboxctl::relay::PIPELINE_DEPTH as usize;

pub fn relay_cmd(db: &TestDb, mode: &str, sink: &str, batch: usize, timeout: &str) -> Command {
    let mut c = db.cmd();
    c.args(["relay", "--mode", mode, "--sink", sink])
        .args(["--batch-size", &batch.to_string()])
        .args(["--poll-interval", "100ms", "--lease", "3s"])
        .args(["--backoff-base", "100ms", "--backoff-max", "1s"])
        .args(["--max-attempts", "1000", "--publish-timeout", timeout]);
    c
}
