//! The scenarios: each one fault against the real component, judged by the [`Checker`]. The
//! list (one README row each):
//!
//! - `kill -9` of one of four relays mid-batch (lease, tx);
//! - `pg_terminate_backend` of every relay backend, repeatedly (lease, tx);
//! - PostgreSQL restart during a drain, on a cluster of the suite's own (lease, tx);
//! - a failover: the primary stopped, its address moved to a streaming standby, the standby
//!   promoted (lease, tx);
//! - NATS, Redis, RabbitMQ (own instances) down and back up, and frozen with SIGSTOP for longer
//!   than `--publish-timeout`, and Kafka (Tansu) the same, each in lease and in tx mode;
//! - each broker full (Redis at `maxmemory`, a JetStream stream at `max_msgs`, a RabbitMQ queue at
//!   `max-length` with reject-publish) and the HTTP consumer rate limiting (429), then given
//!   room: no attempt charged for it (Kafka has no such row: Tansu enforces no limit to fill);
//! - the HTTP consumer slow, resetting connections, closing after the body;
//! - PgBouncer in session and in transaction pooling mode;
//! - `prune` in a loop and `requeue` while relays run;
//! - ten concurrent `migrate` on an empty and on a seed-era schema;
//! - the relays' clocks off by an hour (libfaketime);
//! - disk full under the file sink.

use std::collections::BTreeSet;
use std::process::{Child, Command};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::checker::{relay_cmd, Checker, Load, Relays, DEPTH};
use super::http::{Behaviour, Consumer};
use crate::support::servers::{debian_bin, OwnCluster, PgCluster};
use crate::support::servers::{file_deliveries, ChildServer, MovingAddress, PgBouncer, RabbitNode};
use crate::support::{signal, wait_until, TestDb};

const SETTLE: Duration = Duration::from_secs(180);

/// Terminates every backend of `children` (pools and LISTEN connections). Returns how many.
async fn terminate_backends(db: &TestDb, children: &[Child]) -> i64 {
    let ports: Vec<i32> = children
        .iter()
        .flat_map(crate::support::client_ports)
        .collect();
    sqlx::query_scalar(
        "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity
          WHERE starts_with(application_name, 'outboxctl') AND client_port = ANY($1)",
    )
    .bind(ports)
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

/// Waits until `victim` has a transaction open in the database (a tx-mode claim not yet
/// committed), so a kill now lands mid-batch.
async fn held_claim_in_tx(db: &TestDb, victim: &Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ports = crate::support::client_ports(victim);
        let open: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity
              WHERE client_port = ANY($1) AND xact_start IS NOT NULL
                AND state IN ('active', 'idle in transaction')",
        )
        .bind(ports)
        .fetch_one(&db.pool)
        .await
        .unwrap();
        if open > 0 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "tx: the victim never held a claim"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_one_of_four_relays_mid_batch() {
    for mode in ["lease", "tx"] {
        let consumer = Consumer::start();
        let mut ck = Checker::new(TestDb::new().await, &format!("kill -9 ({mode})"));
        let load = Load::new().poison(97);
        let batch = 50;
        let mut relays =
            Relays::spawn(4, |_| relay_cmd(&ck.db, mode, &consumer.url(), batch, "2s"));
        let producers = ck.produce(&load);
        ck.wait_progress(load.events / 3).await;
        ck.assert_mid_drain().await;
        let mut victim = relays.children.remove(0);
        // Killed holding a claim it has published in part: the consumer holds its answers
        // until one of the victim's requests is among them.
        consumer.set(Behaviour::Hold);
        wait_until(
            Duration::from_secs(30),
            "a request of the victim held",
            || {
                // Read each time: the victim may open a connection while held.
                let held = consumer.holding(&crate::support::client_ports(&victim));
                async move { held }
            },
        )
        .await;
        if mode == "tx" {
            // In tx mode that claim is a transaction still open in the database.
            held_claim_in_tx(&ck.db, &victim).await;
        }
        signal(&victim, "KILL");
        let _ = victim.wait();
        consumer.set(Behaviour::Normal);
        let end = Instant::now();
        let recovery = ck.wait_settled(end, SETTLE).await;
        producers.await.unwrap();
        relays.assert_running();
        relays.stop();
        if mode == "lease" {
            // The fault was felt: the victim died holding leased rows, which another relay
            // claimed again once the lease ran out (a second attempt of an event that never
            // failed; the poison events are dead, not published).
            let reclaimed: i64 = ck
                .db
                .scalar(
                    "SELECT count(*) FROM outbox
                      WHERE published_at IS NOT NULL AND attempt_count >= 2 AND last_error IS NULL",
                )
                .await;
            assert!(
                reclaimed > 0,
                "lease: the victim held no claim when it died"
            );
        }
        // The killed relay's batches in flight (`DEPTH`): published, never marked, sent again
        // after their lease (lease mode) or their rolled-back claim (tx mode).
        let report = ck
            .check(
                &consumer.processed(),
                4,
                "kill -9 of one relay mid-batch",
                DEPTH * batch,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_terminate_backend_of_every_relay_backend_repeatedly() {
    for mode in ["lease", "tx"] {
        let dir = tempfile::tempdir().unwrap();
        let paths = [dir.path().join("r0.jsonl"), dir.path().join("r1.jsonl")];
        let mut ck = Checker::new(TestDb::new().await, &format!("terminate ({mode})"));
        let load = Load::new();
        let batch = 50;
        let mut relays = Relays::spawn(2, |i| {
            relay_cmd(
                &ck.db,
                mode,
                &format!("file:{}", paths[i].display()),
                batch,
                "2s",
            )
        });
        let producers = ck.produce(&load);
        ck.wait_progress(load.events / 5).await;
        ck.assert_mid_drain().await;
        let mut rounds = 0;
        for _ in 0..6 {
            if terminate_backends(&ck.db, &relays.children).await > 0 {
                rounds += 1;
            }
            // The pace of the fault, not a synchronisation.
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        assert!(rounds >= 4, "only {rounds} rounds terminated a backend");
        let end = Instant::now();
        let recovery = ck.wait_settled(end, SETTLE).await;
        producers.await.unwrap();
        relays.assert_running();
        relays.stop();
        // The fault was felt: the relays met the terminated connections (else this run tested
        // nothing of the reconnection).
        let logs = relays.logs();
        assert!(
            logs.contains("terminating connection due to administrator command"),
            "{mode}: no relay met a terminated connection:\n{}",
            &logs[logs.len().saturating_sub(4000)..]
        );
        // Lease mode: the settle is retried on a live connection within the lease (nothing
        // sent again). Tx mode: a termination rolls back each relay's open claims, published
        // perhaps but not committed: at most its pipeline depth of batches (the file sink's
        // default, 1) per relay per round that terminated something.
        let depth = outboxctl::sink::Sink::default_pipeline_depth(
            &outboxctl::sink::file::open(&paths[0].display().to_string()).unwrap(),
        ) as usize;
        let bound = if mode == "lease" {
            0
        } else {
            rounds * paths.len() * depth * batch
        };
        let files: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
        let report = ck
            .check(
                &file_deliveries(&files),
                2,
                &format!("pg_terminate_backend of every relay backend, {rounds} rounds"),
                bound,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

/// Log mode (`log enable`, relays in mode auto), with producers writing throughout: kill -9 of
/// the reader mid-drain, a standby takes over. Nothing lost; re-sent at most the reader's pages
/// in flight.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_mode_kill_9_of_the_reader() {
    let depth = outboxctl::relay::log::LOG_PIPELINE_DEPTH as usize;
    let batch = 50;
    let files = |dir: &tempfile::TempDir, n: usize| -> Vec<std::path::PathBuf> {
        (0..n)
            .map(|i| dir.path().join(format!("r{i}.jsonl")))
            .collect()
    };
    let lines = |p: &std::path::Path| {
        std::fs::read(p)
            .map(|b| b.iter().filter(|c| **c == b'\n').count())
            .unwrap_or(0)
    };

    // kill -9 of the reader: three relays, one reads, two stand by.
    let dir = tempfile::tempdir().unwrap();
    let paths = files(&dir, 3);
    let mut ck = Checker::new(TestDb::new().await, "kill -9 of the reader (log)").log_mode();
    let load = Load::new();
    let mut relays = Relays::spawn(3, |i| {
        relay_cmd(
            &ck.db,
            "auto",
            &format!("file:{}", paths[i].display()),
            batch,
            "2s",
        )
    });
    let producers = ck.produce(&load);
    ck.wait_progress(load.events / 3).await;
    ck.assert_mid_drain().await;
    let reader = (0..3)
        .find(|i| lines(&paths[*i]) > 0)
        .expect("one relay reads the log");
    let mut victim = relays.children.remove(reader);
    signal(&victim, "KILL");
    let _ = victim.wait();
    let end = Instant::now();
    let recovery = ck.wait_settled(end, SETTLE).await;
    producers.await.unwrap();
    relays.assert_running();
    relays.stop();
    let took_over = (0..3)
        .filter(|i| *i != reader)
        .any(|i| lines(&paths[i]) > 0);
    assert!(took_over, "a standby took over the log");
    let refs: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
    let report = ck
        .check(
            &file_deliveries(&refs),
            3,
            "kill -9 of the log's reader mid-drain, a standby takes over",
            depth * batch,
            recovery,
        )
        .await;
    report.assert_ok(&relays.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_restart_during_a_drain() {
    let cluster = PgCluster::start("outboxctl_faults", 18340);
    for mode in ["lease", "tx"] {
        let dir = tempfile::tempdir().unwrap();
        let paths = [dir.path().join("r0.jsonl"), dir.path().join("r1.jsonl")];
        let mut ck = Checker::new(
            TestDb::new_at(&cluster.url()).await,
            &format!("PostgreSQL restart ({mode})"),
        );
        let load = Load::new();
        let batch = 50;
        let mut relays = Relays::spawn(2, |i| {
            relay_cmd(
                &ck.db,
                mode,
                &format!("file:{}", paths[i].display()),
                batch,
                "2s",
            )
        });
        let producers = ck.produce(&load);
        ck.wait_progress(load.events / 4).await;
        ck.assert_mid_drain().await;
        cluster.restart();
        let end = Instant::now();
        let recovery = ck.wait_settled(end, SETTLE).await;
        producers.await.unwrap();
        relays.assert_running();
        relays.stop();
        // The fault was felt: a relay lost its connection to the restarting server (a step or
        // a settle failed, or a claim was rolled back), else this run tested no reconnection.
        let logs = relays.logs();
        assert!(
            logs.lines().any(|l| [
                "relay step failed",
                "marking a published batch failed",
                "the connection was lost",
            ]
            .iter()
            .any(|m| l.contains(m))),
            "{mode}: no relay met the restart:\n{}",
            tail_of(&logs)
        );
        // Lease mode: the settle is retried on a live connection until just before the lease
        // ends; only a batch whose server stayed away longer (a slow restart on a loaded
        // machine) is re-sent, and its relay says so with the batch's size. Tx mode: the
        // restart rolls back each relay's open claims, at most its pipeline depth of batches
        // (the file sink's default, 1).
        let depth = outboxctl::sink::Sink::default_pipeline_depth(
            &outboxctl::sink::file::open(&paths[0].display().to_string()).unwrap(),
        ) as usize;
        let bound = if mode == "lease" {
            abandoned_settles(&logs)
        } else {
            paths.len() * depth * batch
        };
        let files: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
        let report = ck
            .check(
                &file_deliveries(&files),
                2,
                "pg_ctlcluster restart (fast shutdown) mid-drain",
                bound,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

/// The events of the batches whose settles the relays gave up at the lease's end, as they
/// logged them (`could not mark a published batch before its lease ended … events=N`).
fn abandoned_settles(logs: &str) -> usize {
    logs.lines()
        .filter(|l| l.contains("could not mark a published batch before its lease ended"))
        .map(|l| {
            let n = l
                .split_once("events=")
                .and_then(|(_, rest)| rest.split(|c: char| !c.is_ascii_digit()).next())
                .and_then(|n| n.parse::<usize>().ok());
            n.unwrap_or_else(|| panic!("an abandoned settle without its events: {l}"))
        })
        .sum()
}

/// A failover: relays (daemons) and producers reach the database through an address that moves
/// ([`MovingAddress`]); mid-drain the primary is stopped, the address moves to its streaming
/// standby, which the relays meet read-only (each must say so, once), and the standby is then
/// promoted. Nothing the new primary holds is lost (a fast stop sends every WAL record to the
/// standby first), and what comes twice is at most the batches in flight when the old
/// primary's sessions ended: relays x `DEPTH` x batch (tx mode: their claims rolled back; lease
/// mode: their settles not made within the lease).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_to_a_promoted_standby() {
    for mode in ["lease", "tx"] {
        let primary = OwnCluster::start(&debian_bin(), crate::support::port(18775), |_| {});
        let address = MovingAddress::start(primary.port).await;
        let mut ck = Checker::new(
            TestDb::new_at(&address.url()).await,
            &format!("failover ({mode})"),
        );
        let standby = OwnCluster::standby_of(&primary, crate::support::port(18776));
        let consumer = Consumer::start();
        // Producers go on through the failover, as an application would (retrying its
        // transactions while the database is away or read-only).
        let load = Load {
            spread: Duration::from_secs(8),
            ..Load::new().poison(97)
        };
        let batch = 50;
        let relays_n = 2;
        let mut relays = Relays::spawn(relays_n, |_| {
            relay_cmd(&ck.db, mode, &consumer.url(), batch, "2s")
        });
        let producers = ck.produce(&load);
        ck.wait_progress(load.events / 4).await;
        ck.assert_mid_drain().await;
        primary.stop();
        address.point_at(standby.port);
        // The fault was felt: a relay met the standby, read-only, before its promotion.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !relays.logs().contains("the database is read-only") {
            assert!(
                Instant::now() < deadline,
                "{mode}: no relay met the read-only standby\n{}",
                tail_of(&relays.logs())
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        standby.promote();
        let end = Instant::now();
        let recovery = ck.wait_settled(end, SETTLE).await;
        producers.await.unwrap();
        relays.assert_running();
        relays.stop();
        let logs = relays.logs();
        for i in 0..relays_n {
            let said = logs
                .lines()
                .filter(|l| l.starts_with(&format!("[{i}] ")) && l.contains("WARN"))
                .filter(|l| l.contains("the database is read-only"))
                .count();
            assert!(
                said <= 1,
                "{mode}: relay {i} said {said} times that the database is read-only\n{logs}"
            );
        }
        let report = ck
            .check(
                &consumer.processed(),
                relays_n,
                "primary stopped, the address moved to its standby (read-only), promoted",
                relays_n * DEPTH * batch,
                recovery,
            )
            .await;
        report.assert_ok(&logs);
    }
}

/// A broker fault: `Down` stops the broker and starts it again after `hold`; `Frozen` sends
/// SIGSTOP, then SIGCONT after `hold` (longer than the publish timeout).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum BrokerFault {
    Down,
    Frozen,
}

impl BrokerFault {
    fn describe(self, broker: &str, hold: Duration) -> String {
        match self {
            Self::Down => format!("{broker} stopped, started again {}s later", hold.as_secs()),
            Self::Frozen => format!(
                "{broker} SIGSTOP for {}s (> --publish-timeout 1s), SIGCONT",
                hold.as_secs()
            ),
        }
    }
}

const HOLD: Duration = Duration::from_secs(3);
const BROKER_RELAYS: usize = 2;
const BROKER_BATCH: usize = 50;

/// Publishes that can time out while a broker is frozen for [`HOLD`], per relay: its batches in
/// flight (`DEPTH`), then one probe per `--publish-timeout` (1 s). A frozen broker may still take each of them when it
/// thaws, after the relay gave the rows back: the duplicates bound of a frozen or stopped broker
/// without dedup. The same in both modes: in `lease` mode those rows are released, in `tx` mode
/// the claim that marked them is rolled back (the batches in flight per relay, then each
/// probe's), and either way they are published again although the broker may hold them already.
const BROKER_BOUND: usize = BROKER_RELAYS * (DEPTH * BROKER_BATCH + HOLD.as_secs() as usize + 1);

/// Every broker scenario's runs: each fault in each of [`BROKER_MODES`].
fn broker_runs() -> impl Iterator<Item = (BrokerFault, &'static str)> {
    [BrokerFault::Down, BrokerFault::Frozen]
        .into_iter()
        .flat_map(|f| BROKER_MODES.map(|m| (f, m)))
}

/// The modes every broker scenario runs in: `lease`, and `tx` (what `--mode auto` picks for the
/// broker sinks).
const BROKER_MODES: [&str; 2] = ["lease", "tx"];

/// Asserts that the relays ran in `mode`, from the rows: a lease claim stamps a `claim_token`,
/// a tx-mode claim never does (it marks the row published in the claim's own transaction).
async fn assert_claimed_in(db: &TestDb, mode: &str) {
    let (published, with_token): (i64, i64) = sqlx::query_as(
        "SELECT count(*), count(claim_token) FROM outbox WHERE published_at IS NOT NULL",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert!(published > 0, "nothing was published");
    match mode {
        "tx" => assert_eq!(with_token, 0, "a tx-mode relay wrote a claim token"),
        _ => assert_eq!(
            with_token, published,
            "a lease-mode relay left a row without a claim token"
        ),
    }
}

/// Runs one broker scenario: relays in `mode` to `sink`, the fault applied with `stop`/`start` (down) or
/// `freeze`/`thaw` (frozen) during the drain; returns the checker and the fault's end.
async fn broker_drain(
    ck: &mut Checker,
    mode: &str,
    load: &Load,
    sink: &str,
    mut begin: impl FnMut(),
    mut finish: impl FnMut(),
) -> (Relays, Duration) {
    let mut relays = Relays::spawn(BROKER_RELAYS, |_| {
        relay_cmd(&ck.db, mode, sink, BROKER_BATCH, "1s")
    });
    let producers = ck.produce(load);
    ck.wait_progress(load.events / 4).await;
    ck.assert_mid_drain().await;
    begin();
    // The length of the fault, not a synchronisation.
    tokio::time::sleep(HOLD).await;
    finish();
    let end = Instant::now();
    let recovery = ck.wait_settled(end, SETTLE).await;
    producers.await.unwrap();
    relays.assert_running();
    relays.stop();
    assert_claimed_in(&ck.db, mode).await;
    // The fault was felt: a relay met the outage and opened its circuit (else the run would
    // have tested nothing of it).
    let logs = relays.logs();
    assert!(
        logs.contains("sink unavailable: pausing claims"),
        "{}: no relay met the broker's outage:\n{}",
        ck.scenario,
        tail_of(&logs)
    );
    (relays, recovery)
}

/// The last lines of `logs`, for a failure message.
fn tail_of(logs: &str) -> String {
    let lines: Vec<&str> = logs.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}

/// Every message of a JetStream stream, in order.
async fn jetstream_messages(port: u16, stream: &str) -> Vec<Vec<u8>> {
    let js = async_nats::jetstream::new(
        async_nats::connect(format!("127.0.0.1:{port}"))
            .await
            .unwrap(),
    );
    let mut s = js.get_stream(stream).await.unwrap();
    let state = s.info().await.unwrap().state.clone();
    let mut out = Vec::new();
    if state.messages == 0 {
        return out;
    }
    // The stream has no limits, so nothing was removed: every sequence must be there.
    for seq in state.first_sequence..=state.last_sequence {
        let m = s
            .get_raw_message(seq)
            .await
            .unwrap_or_else(|e| panic!("{stream}: message {seq} of {state:?}: {e}"));
        out.push(m.payload.to_vec());
    }
    out
}

/// A plain (core NATS) subscriber of `subject`: every publish the server routes, re-sends that
/// JetStream drops as duplicates included. `finish` publishes a marker after the run and returns
/// what came before it. Messages published while the subscriber itself was cut off (the server
/// stopped) are missed, so its count of re-sends is a lower bound.
struct PublishTap {
    client: async_nats::Client,
    marker: String,
    seen: std::sync::Arc<std::sync::Mutex<Vec<Vec<u8>>>>,
    done: tokio::sync::oneshot::Receiver<()>,
}

impl PublishTap {
    async fn start(port: u16, prefix: &str) -> Self {
        let client = async_nats::connect(format!("127.0.0.1:{port}"))
            .await
            .unwrap();
        let mut sub = client.subscribe(format!("{prefix}.>")).await.unwrap();
        client.flush().await.unwrap();
        let marker = format!("{prefix}.tap-marker");
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let (tx, done) = tokio::sync::oneshot::channel();
        let (into, end) = (seen.clone(), marker.clone());
        tokio::spawn(async move {
            use futures::StreamExt;
            while let Some(m) = sub.next().await {
                if m.subject.as_str() == end {
                    let _ = tx.send(());
                    return;
                }
                into.lock().unwrap().push(m.payload.to_vec());
            }
        });
        Self {
            client,
            marker,
            seen,
            done,
        }
    }

    async fn finish(self) -> Vec<Vec<u8>> {
        // The relays have stopped: what they published was routed before this (echo is on, so
        // the tap's own connection hears its marker).
        self.client
            .publish(self.marker.clone(), "".into())
            .await
            .unwrap();
        self.client.flush().await.unwrap();
        tokio::time::timeout(Duration::from_secs(30), self.done)
            .await
            .expect("the tap's marker came back")
            .unwrap();
        let seen = self.seen.lock().unwrap().clone();
        seen
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_down_and_frozen() {
    let port = crate::support::port(18341);
    let mut nats = ChildServer::nats(port);
    for (fault, mode) in broker_runs() {
        let prefix = format!("f{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
        let js = async_nats::jetstream::new(
            async_nats::connect(format!("127.0.0.1:{port}"))
                .await
                .unwrap(),
        );
        js.create_stream(async_nats::jetstream::stream::Config {
            name: prefix.to_uppercase(),
            subjects: vec![format!("{prefix}.>")],
            ..Default::default()
        })
        .await
        .unwrap();
        drop(js);
        let mut ck = Checker::new(
            TestDb::new().await,
            &format!("NATS {fault:?} ({mode})").to_lowercase(),
        );
        // Poison: larger than the server's max_payload (8 KiB), refused for good.
        let mut load = Load::new().poison(97);
        load.poison_pad = 10_000;
        let sink = format!("nats://127.0.0.1:{port}?subject={prefix}.{{event_type}}");
        let tap = PublishTap::start(port, &prefix).await;
        let nats_ref = std::cell::RefCell::new(&mut nats);
        let (relays, recovery) = broker_drain(
            &mut ck,
            mode,
            &load,
            &sink,
            || match fault {
                BrokerFault::Down => nats_ref.borrow_mut().stop(),
                BrokerFault::Frozen => nats_ref.borrow().freeze(),
            },
            || match fault {
                BrokerFault::Down => nats_ref.borrow_mut().start_again(),
                BrokerFault::Frozen => nats_ref.borrow().thaw(),
            },
        )
        .await;
        let received = jetstream_messages(port, &prefix.to_uppercase()).await;
        // JetStream drops a re-publish with a known Nats-Msg-Id (the idempotency key) within
        // its duplicate window, so a re-sent batch does not show in the stream: the relay's
        // re-sends are counted from what the tap saw published.
        let sent = tap.finish().await;
        let report = ck
            .check_sent(
                &received,
                &sent,
                BROKER_RELAYS,
                &fault.describe("nats-server", HOLD),
                BROKER_BOUND,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_and_frozen() {
    let port = crate::support::port(18342);
    let mut redis_server = ChildServer::redis(port);
    for (fault, mode) in broker_runs() {
        let stream = format!("faults-{}", uuid::Uuid::new_v4().simple());
        let mut ck = Checker::new(
            TestDb::new().await,
            &format!("Redis {fault:?} ({mode})").to_lowercase(),
        );
        let load = Load::new();
        let sink = format!("redis://127.0.0.1:{port}/0?stream={stream}");
        let server = std::cell::RefCell::new(&mut redis_server);
        let (relays, recovery) = broker_drain(
            &mut ck,
            mode,
            &load,
            &sink,
            || match fault {
                BrokerFault::Down => server.borrow_mut().stop(),
                BrokerFault::Frozen => server.borrow().freeze(),
            },
            || match fault {
                BrokerFault::Down => server.borrow_mut().start_again(),
                BrokerFault::Frozen => server.borrow().thaw(),
            },
        )
        .await;
        let mut r = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))
            .unwrap()
            .get_connection()
            .unwrap();
        let entries: Vec<StreamEntry> = redis::cmd("XRANGE")
            .arg(&stream)
            .arg("-")
            .arg("+")
            .query(&mut r)
            .unwrap();
        let received: Vec<Vec<u8>> = entries
            .into_iter()
            .filter_map(|(_, fields)| {
                fields
                    .into_iter()
                    .find(|(k, _)| k == "event")
                    .map(|(_, v)| v)
            })
            .collect();
        // Redis Streams has no dedup: a batch whose XADDs the frozen server took after the
        // relay's timeout is sent again, at most its batches in flight per relay.
        let report = ck
            .check(
                &received,
                BROKER_RELAYS,
                &fault.describe("redis-server", HOLD),
                BROKER_BOUND,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

/// One `XRANGE` entry: its id and its fields.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

/// Every message in `queue` on our own node (basic.get until empty).
async fn amqp_messages(url: &str, queue: &str) -> Vec<Vec<u8>> {
    use lapin::options::BasicGetOptions;
    let conn = lapin::Connection::connect(url, lapin::ConnectionProperties::default())
        .await
        .unwrap();
    let ch = conn.create_channel().await.unwrap();
    let mut out = Vec::new();
    while let Some(m) = ch
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        out.push(m.delivery.data.clone());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_down_and_frozen() {
    let node = RabbitNode::start(crate::support::port(18343), crate::support::port(18344));
    for (fault, mode) in broker_runs() {
        let queue = format!("faults-{}", uuid::Uuid::new_v4().simple());
        {
            use lapin::options::QueueDeclareOptions;
            let conn =
                lapin::Connection::connect(&node.url(), lapin::ConnectionProperties::default())
                    .await
                    .unwrap();
            let ch = conn.create_channel().await.unwrap();
            ch.queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await
            .unwrap();
            let _ = conn.close(200, "declared".into()).await;
        }
        let mut ck = Checker::new(
            TestDb::new().await,
            &format!("RabbitMQ {fault:?} ({mode})").to_lowercase(),
        );
        // `rabbitmqctl stop` takes seconds: producers go on for longer than that, so the relays
        // still have events to publish when the node is gone (else the drain could end while
        // it stops, and no relay meet the outage).
        let load = Load {
            spread: Duration::from_secs(10),
            ..Load::new()
        };
        let sink = format!("{}?routing_key={queue}", node.url());
        let (relays, recovery) = broker_drain(
            &mut ck,
            mode,
            &load,
            &sink,
            || match fault {
                BrokerFault::Down => node.stop(),
                BrokerFault::Frozen => node.freeze(),
            },
            || match fault {
                BrokerFault::Down => node.start_again(),
                BrokerFault::Frozen => node.thaw(),
            },
        )
        .await;
        let received = amqp_messages(&node.url(), &queue).await;
        let report = ck
            .check(
                &received,
                BROKER_RELAYS,
                &fault.describe("RabbitMQ node", HOLD),
                BROKER_BOUND,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

/// Kafka (Tansu, the suite's own broker on 18703) stopped and started again, and frozen with
/// SIGSTOP for longer than the publish timeout. Tansu keeps its log in memory only, so for the
/// down-and-up fault what the first broker holds is read before it goes: the relays are frozen
/// (SIGSTOP) so that nothing reaches it meanwhile, it is read to the end with a real consumer
/// (every partition assigned), killed, the relays thawed into the outage, and the broker started
/// again after [`HOLD`]; the deliveries are the union of both reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_down_and_frozen() {
    use crate::support::servers::kafka::{read_all, read_all_settled, start_broker};
    let kport: u16 = crate::support::port(18703);
    let bootstrap = format!("127.0.0.1:{kport}");
    for (fault, mode) in broker_runs() {
        let mut broker = start_broker(kport).await;
        let topic = format!("obxf{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
        let topics = vec![topic.clone()];
        let mut ck = Checker::new(
            TestDb::new().await,
            &format!("Kafka {fault:?} ({mode})").to_lowercase(),
        );
        let load = Load::new();
        let sink = format!("kafka://{bootstrap}?topic={topic}");
        let mut relays = Relays::spawn(BROKER_RELAYS, |_| {
            relay_cmd(&ck.db, mode, &sink, BROKER_BATCH, "1s")
        });
        let producers = ck.produce(&load);
        ck.wait_progress(load.events / 4).await;
        ck.assert_mid_drain().await;
        let mut first = Vec::new();
        match fault {
            BrokerFault::Down => {
                for c in &relays.children {
                    signal(c, "STOP");
                }
                let published: i64 = ck
                    .db
                    .scalar("SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
                    .await;
                first = read_all_settled(&bootstrap, &topics, published as usize);
                drop(broker);
                for c in &relays.children {
                    signal(c, "CONT");
                }
                // The length of the fault, not a synchronisation.
                tokio::time::sleep(HOLD).await;
                broker = start_broker(kport).await;
            }
            BrokerFault::Frozen => {
                signal(&broker.0, "STOP");
                tokio::time::sleep(HOLD).await;
                signal(&broker.0, "CONT");
            }
        }
        let end = Instant::now();
        let recovery = ck.wait_settled(end, SETTLE).await;
        producers.await.unwrap();
        relays.assert_running();
        relays.stop();
        assert_claimed_in(&ck.db, mode).await;
        let held: std::collections::HashSet<Vec<u8>> =
            first.iter().map(|r| r.value.clone()).collect();
        let second = read_all(&bootstrap, &topics, load.events.saturating_sub(held.len()));
        drop(broker);
        let received: Vec<Vec<u8>> = first.into_iter().chain(second).map(|r| r.value).collect();
        // Kafka has no dedup across producer sessions: a batch the broker took but the relay
        // gave back (timed out, or in flight when the broker went) comes again.
        let report = ck
            .check(
                &received,
                BROKER_RELAYS,
                &match fault {
                    BrokerFault::Down => format!(
                        "Tansu (Kafka) killed (its in-memory log read first), started again {}s later",
                        HOLD.as_secs()
                    ),
                    BrokerFault::Frozen => fault.describe("Tansu (Kafka)", HOLD),
                },
                BROKER_BOUND,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

/// Runs one "broker full" scenario: relays in `mode` to `sink`; once a quarter is settled,
/// `fill` makes the sink refuse everything (or it fills up on its own), the relays' circuit must
/// open on a refusal naming `marker`, and after [`HOLD`] more `grow` gives it room. Backpressure
/// is never an event's failure: no relay may log a failure (an attempt charged) naming `marker`.
async fn full_drain(
    ck: &mut Checker,
    mode: &str,
    load: &Load,
    sink: &str,
    marker: &str,
    fill: impl FnOnce(),
    grow: impl FnOnce(),
) -> (Relays, Duration) {
    let mut relays = Relays::spawn(BROKER_RELAYS, |_| {
        relay_cmd(&ck.db, mode, sink, BROKER_BATCH, "1s")
    });
    let producers = ck.produce(load);
    ck.wait_progress(load.events / 4).await;
    ck.assert_mid_drain().await;
    fill();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !relays
        .logs()
        .lines()
        .any(|l| l.contains("sink unavailable") && l.contains(marker))
    {
        assert!(
            Instant::now() < deadline,
            "{}: no outage naming {marker:?}\n{}",
            ck.scenario,
            relays.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The length of the fault, not a synchronisation.
    tokio::time::sleep(HOLD).await;
    grow();
    let end = Instant::now();
    let recovery = ck.wait_settled(end, SETTLE).await;
    producers.await.unwrap();
    relays.assert_running();
    relays.stop();
    let logs = relays.logs();
    let charged: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("the sink failed") && l.contains(marker))
        .collect();
    assert!(
        charged.is_empty(),
        "{}: a full sink charged attempts:\n{}",
        ck.scenario,
        charged.join("\n")
    );
    (relays, recovery)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_full() {
    let port = crate::support::port(18347);
    let _server = ChildServer::redis(port);
    let config = |maxmemory: &str| {
        let mut r = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))
            .unwrap()
            .get_connection()
            .unwrap();
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(maxmemory)
            .query(&mut r)
            .unwrap();
    };
    for mode in BROKER_MODES {
        let stream = format!("faults-{}", uuid::Uuid::new_v4().simple());
        let mut ck = Checker::new(TestDb::new().await, &format!("Redis full ({mode})"));
        let load = Load::new();
        let sink = format!("redis://127.0.0.1:{port}/0?stream={stream}");
        // The default policy is noeviction: a Redis over maxmemory answers every XADD `OOM`.
        let (relays, recovery) = full_drain(
            &mut ck,
            mode,
            &load,
            &sink,
            "OOM",
            || config("1"),
            || config("0"),
        )
        .await;
        let mut r = redis::Client::open(format!("redis://127.0.0.1:{port}/0"))
            .unwrap()
            .get_connection()
            .unwrap();
        let entries: Vec<StreamEntry> = redis::cmd("XRANGE")
            .arg(&stream)
            .arg("-")
            .arg("+")
            .query(&mut r)
            .unwrap();
        let received: Vec<Vec<u8>> = entries
            .into_iter()
            .filter_map(|(_, fields)| {
                fields
                    .into_iter()
                    .find(|(k, _)| k == "event")
                    .map(|(_, v)| v)
            })
            .collect();
        let report = ck
            .check(
                &received,
                BROKER_RELAYS,
                "redis-server at maxmemory (noeviction: OOM) for 3s, then raised",
                BROKER_BOUND,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_full() {
    use async_nats::jetstream::stream;
    let port = crate::support::port(18348);
    let _nats = ChildServer::nats(port);
    for mode in BROKER_MODES {
        let prefix = format!("f{}", &uuid::Uuid::new_v4().simple().to_string()[..10]);
        let load = Load::new();
        let js = async_nats::jetstream::new(
            async_nats::connect(format!("127.0.0.1:{port}"))
                .await
                .unwrap(),
        );
        // Room for half the load: the stream fills during the drain (discard=new: further
        // messages are refused, none already stored is dropped).
        let config = stream::Config {
            name: prefix.to_uppercase(),
            subjects: vec![format!("{prefix}.>")],
            max_messages: (load.events / 2) as i64,
            discard: stream::DiscardPolicy::New,
            ..Default::default()
        };
        js.create_stream(config.clone()).await.unwrap();
        let mut ck = Checker::new(TestDb::new().await, &format!("NATS full ({mode})"));
        let sink = format!("nats://127.0.0.1:{port}?subject={prefix}.{{event_type}}");
        let grown = stream::Config {
            max_messages: -1,
            ..config
        };
        let handle = tokio::runtime::Handle::current();
        let (relays, recovery) = full_drain(
            &mut ck,
            mode,
            &load,
            &sink,
            "10077",
            || {},
            || {
                // `grow` runs on this runtime's thread: the update goes through another one.
                let js = js.clone();
                std::thread::spawn(move || {
                    handle.block_on(async move { js.update_stream(grown).await.unwrap() })
                })
                .join()
                .unwrap();
            },
        )
        .await;
        let received = jetstream_messages(port, &prefix.to_uppercase()).await;
        let report = ck
            .check(
                &received,
                BROKER_RELAYS,
                "JetStream stream at max_msgs (discard=new: 10077) until raised 3s later",
                BROKER_BOUND,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_full() {
    let node = RabbitNode::start(crate::support::port(18349), crate::support::port(18350));
    for mode in BROKER_MODES {
        let queue = format!("faults-{}", uuid::Uuid::new_v4().simple());
        {
            use lapin::options::QueueDeclareOptions;
            let conn =
                lapin::Connection::connect(&node.url(), lapin::ConnectionProperties::default())
                    .await
                    .unwrap();
            let ch = conn.create_channel().await.unwrap();
            ch.queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..Default::default()
                },
                lapin::types::FieldTable::default(),
            )
            .await
            .unwrap();
            let _ = conn.close(200, "declared".into()).await;
        }
        let mut ck = Checker::new(TestDb::new().await, &format!("RabbitMQ full ({mode})"));
        let load = Load::new();
        let sink = format!("{}?routing_key={queue}", node.url());
        // Room for half the load (a policy, so it can be lifted): the queue fills during the
        // drain, and with reject-publish every further message is nacked, none stored dropped.
        // Set before the drain: `rabbitmqctl` takes seconds, longer than the drain may last.
        let max_length = format!(
            r#"{{"max-length":{},"overflow":"reject-publish"}}"#,
            load.events / 2
        );
        let pattern = format!("^{queue}$");
        node.ctl(&[
            "set_policy",
            &format!("full-{mode}"),
            &pattern,
            &max_length,
            "--apply-to",
            "queues",
        ]);
        let (relays, recovery) = full_drain(
            &mut ck,
            mode,
            &load,
            &sink,
            "nacked",
            || {},
            || node.ctl(&["clear_policy", &format!("full-{mode}")]),
        )
        .await;
        let received = amqp_messages(&node.url(), &queue).await;
        let report = ck
            .check(
                &received,
                BROKER_RELAYS,
                "queue at max-length (reject-publish: nacks) until the policy is cleared 3s later",
                BROKER_BOUND,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

/// The HTTP consumer rate limiting: 429 (Retry-After: 1) to every request for [`HOLD`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_rate_limited() {
    let consumer = Consumer::start();
    let mut ck = Checker::new(TestDb::new().await, "HTTP 429");
    let load = Load::new().poison(97);
    let (relays, recovery) = full_drain(
        &mut ck,
        "lease",
        &load,
        &consumer.url(),
        "HTTP 429",
        || consumer.set(Behaviour::Refuse(429)),
        || consumer.set(Behaviour::Normal),
    )
    .await;
    // A refused request is not processed: nothing can come twice.
    let report = ck
        .check(
            &consumer.processed(),
            BROKER_RELAYS,
            "every request answered 429 (Retry-After: 1) for 3s",
            0,
            recovery,
        )
        .await;
    report.assert_ok(&relays.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_consumer_slow_resetting_and_closing_before_the_response() {
    for (name, behaviour) in [
        ("HTTP slow", Behaviour::Slow(Duration::from_millis(1500))),
        ("HTTP reset", Behaviour::Reset),
        ("HTTP close after body", Behaviour::CloseAfterBody),
    ] {
        let consumer = Consumer::start();
        let mut ck = Checker::new(TestDb::new().await, name);
        let load = Load::new().poison(97);
        let batch = 50;
        let mut relays = Relays::spawn(2, |_| {
            relay_cmd(&ck.db, "lease", &consumer.url(), batch, "1s")
        });
        let producers = ck.produce(&load);
        ck.wait_progress(load.events / 4).await;
        ck.assert_mid_drain().await;
        consumer.set(behaviour);
        // The length of the fault, not a synchronisation.
        tokio::time::sleep(HOLD).await;
        consumer.set(Behaviour::Normal);
        let end = Instant::now();
        let recovery = ck.wait_settled(end, SETTLE).await;
        producers.await.unwrap();
        relays.assert_running();
        relays.stop();
        // The fault was felt: requests met it at the consumer, and a relay saw them fail (a
        // publish failed, or the circuit opened on them).
        let logs = relays.logs();
        assert!(
            consumer.faulted() > 0
                && logs
                    .lines()
                    .any(|l| l.contains("sink unavailable") || l.contains("the sink failed")),
            "{name}: the fault was not felt: {} requests met it\n{}",
            consumer.faulted(),
            tail_of(&logs)
        );
        // Only a delivery the consumer processed without answering can come again: none when
        // it resets (it processes nothing), at most what the configuration lets the relays send
        // during the fault otherwise.
        let relayed = 2;
        let (bound, fault) = match behaviour {
            Behaviour::Reset => (
                0,
                "connections reset (RST, request unread) for 3s".to_owned(),
            ),
            Behaviour::Slow(_) => (
                relayed * http_fault_bound(HOLD, batch),
                "answers after 1.5s (> --publish-timeout 1s) for 3s".to_owned(),
            ),
            _ => (
                relayed * http_fault_bound(HOLD, batch),
                "takes the body, closes before the response, for 3s".to_owned(),
            ),
        };
        let report = ck
            .check(&consumer.processed(), relayed, &fault, bound, recovery)
            .await;
        report.assert_ok(&relays.logs());
    }
}

/// Deliveries an HTTP consumer may take without answering during a fault of `hold`, per relay,
/// by the configuration (`relay_cmd`: `--backoff-base 100ms --backoff-max 1s`), not by what it
/// took: the batches in flight when the fault began and those claimed before one failed whole
/// (2 x `DEPTH` x `batch`: a batch that fails only in part is no outage, and its failed events
/// are retried in the next), then the circuit's probes, one per backoff wait at its shortest
/// (half of base x 2^(n-1), capped at max) within `hold`, each of 2^(probes/3) events (at most
/// 16, as the relay's circuit widens them).
fn http_fault_bound(hold: Duration, batch: usize) -> usize {
    let (base, max) = (Duration::from_millis(100), Duration::from_secs(1));
    let mut at = Duration::ZERO;
    let mut probes = 0u32;
    let mut events = 0;
    loop {
        let ceiling = base.saturating_mul(1 << probes.min(20)).min(max);
        at += ceiling / 2;
        if at > hold {
            break;
        }
        events += (1usize << (probes / 3).min(8)).min(16).min(batch);
        probes += 1;
    }
    2 * DEPTH * batch + events
}

/// Runs `outboxctl ARGS` against `db`; returns the exit code and stderr.
fn run(db: &TestDb, args: &[&str]) -> (Option<i32>, String) {
    let out = db.cmd().args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prune_in_a_loop_and_requeue_while_relays_run() {
    let consumer = Consumer::start();
    let mut ck = Checker::new(TestDb::new().await, "prune + requeue");
    let load = Load::new().poison(50);
    let batch = 50;
    let mut relays = Relays::spawn(2, |_| {
        relay_cmd(&ck.db, "lease", &consumer.url(), batch, "2s")
    });
    let producers = ck.produce(&load);
    ck.wait_progress(load.events / 10).await;
    ck.assert_mid_drain().await;
    let (mut prunes, mut requeues) = (0, 0);
    let stop_at = Instant::now() + HOLD;
    while Instant::now() < stop_at || !producers.is_finished() {
        let (code, err) = run(
            &ck.db,
            &["prune", "--older-than", "1s", "--batch-size", "100"],
        );
        assert_eq!(code, Some(0), "prune: {err}");
        prunes += 1;
        let (code, err) = run(&ck.db, &["requeue", "--all"]);
        assert_eq!(code, Some(0), "requeue: {err}");
        requeues += 1;
    }
    let end = Instant::now();
    let recovery = ck.wait_settled(end, SETTLE).await;
    producers.await.unwrap();
    relays.assert_running();
    relays.stop();
    let pruned: i64 = ck
        .db
        .scalar("SELECT count(*) FROM outbox_audit WHERE action = 'prune'")
        .await;
    let requeued: i64 = ck
        .db
        .scalar("SELECT count(*) FROM outbox_audit WHERE action = 'requeue'")
        .await;
    assert!(
        pruned > 0 && requeued > 0,
        "prune and requeue both acted: {pruned} prune, {requeued} requeue audit rows"
    );
    let report = ck
        .check(
            &consumer.processed(),
            2,
            &format!(
                "{prunes} prune --older-than 1s and {requeues} requeue --all during the drain"
            ),
            0,
            recovery,
        )
        .await;
    report.assert_ok(&relays.logs());
}

/// Ten `migrate` processes at once: all exit 0, each migration is recorded once, and they did
/// race (the fault was felt): one of them waited for another's migrate lock.
async fn ten_migrates(db: &TestDb) {
    let waited = Arc::new(AtomicBool::new(false));
    let watch = {
        let (pool, waited, schema) = (db.pool.clone(), Arc::clone(&waited), db.schema.clone());
        tokio::spawn(async move {
            loop {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_locks
                      WHERE locktype = 'advisory' AND NOT granted AND objid::int = hashtext($1)",
                )
                .bind(&schema)
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
                if n > 0 {
                    waited.store(true, std::sync::atomic::Ordering::SeqCst);
                    return;
                }
                // The pace of a watch, not a synchronisation.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let children: Vec<Child> = (0..10)
        .map(|_| {
            db.cmd()
                .arg("migrate")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "a concurrent migrate failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (versions, distinct): (i64, i64) = db
        .row("SELECT count(*), count(DISTINCT version) FROM _sqlx_migrations WHERE success")
        .await;
    watch.abort();
    assert!(
        waited.load(std::sync::atomic::Ordering::SeqCst),
        "no migrate waited for another's lock: they did not race"
    );
    assert_eq!(versions, distinct, "a migration recorded twice");
    assert_eq!(
        versions as usize,
        outboxctl::db::migrate::MIGRATOR.iter().count(),
        "every migration applied"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_concurrent_migrates_on_an_empty_and_on_a_seed_era_schema() {
    for seed_era in [false, true] {
        let db = TestDb::unmigrated().await;
        let consumer = Consumer::start();
        let name = if seed_era {
            "10 × migrate (seed-era)"
        } else {
            "10 × migrate (empty)"
        };
        let mut ck = Checker::new(db, name);
        let load = Load::new();
        let start = Instant::now();
        let producers = if seed_era {
            // The application has been enqueueing into seed 000's table; migrate adopts it
            // while the producers go on.
            ck.db
                .exec(&format!(
                    "CREATE SCHEMA \"{s}\"; SET search_path TO \"{s}\"; {}",
                    crate::support::fixtures::SEED_DDL,
                    s = ck.db.schema
                ))
                .await;
            let p = ck.produce(&load);
            ten_migrates(&ck.db).await;
            p
        } else {
            ten_migrates(&ck.db).await;
            ck.produce(&load)
        };
        let mut relays =
            Relays::spawn(2, |_| relay_cmd(&ck.db, "lease", &consumer.url(), 50, "2s"));
        let recovery = ck.wait_settled(start, SETTLE).await;
        producers.await.unwrap();
        relays.assert_running();
        relays.stop();
        let report = ck
            .check(
                &consumer.processed(),
                2,
                "ten concurrent migrate, then relays",
                0,
                recovery,
            )
            .await;
        report.assert_ok(&relays.logs());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_clocks_off_by_an_hour_change_nothing() {
    // libfaketime, preloaded into the relay itself (the `faketime` wrapper would be the process
    // receiving SIGTERM): its clock is an hour off.
    const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";
    let faked = Command::new("date")
        .arg("+%s")
        .env("LD_PRELOAD", LIBFAKETIME)
        .env("FAKETIME", "+1h")
        .output()
        .expect("date");
    let faked: i64 = String::from_utf8_lossy(&faked.stdout)
        .trim()
        .parse()
        .unwrap();
    let now = chrono::Utc::now().timestamp();
    assert!(
        (faked - now - 3600).abs() < 60,
        "libfaketime (Debian package faketime) +1h: {faked} vs {now}"
    );

    let consumer = Consumer::start();
    let mut ck = Checker::new(TestDb::new().await, "clock skew");
    let load = Load::new().poison(97);
    let offsets = ["+1h", "-1h"];
    let mut relays = Relays::spawn(2, |i| {
        let mut c = relay_cmd(&ck.db, "lease", &consumer.url(), 50, "2s");
        c.env("LD_PRELOAD", LIBFAKETIME).env("FAKETIME", offsets[i]);
        c
    });
    let start = Instant::now();
    let producers = ck.produce(&load);
    let recovery = ck.wait_settled(start, SETTLE).await;
    producers.await.unwrap();
    relays.assert_running();
    // The fault was felt: each relay's own clock is off (its log lines' timestamps).
    for (i, offset) in [3600i64, -3600].into_iter().enumerate() {
        let logs = relays.logs();
        let stamp = logs
            .lines()
            .find_map(|l| l.strip_prefix(&format!("[{i}] ")))
            .and_then(|l| l.split_whitespace().next())
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .unwrap_or_else(|| panic!("relay {i} logged no timestamped line:\n{logs}"));
        let skew = stamp.timestamp() - chrono::Utc::now().timestamp();
        assert!(
            (skew - offset).abs() < 600,
            "relay {i}'s clock is {skew}s off, not {offset}s: libfaketime did not reach it"
        );
    }
    relays.stop();
    // Due times come from the database clock: nothing was published before it was due.
    let early: i64 = ck
        .db
        .scalar("SELECT count(*) FROM outbox WHERE published_at < available_at")
        .await;
    assert_eq!(early, 0, "events published before they were due");
    let report = ck
        .check(
            &consumer.processed(),
            2,
            "relay clocks +1 h and -1 h (libfaketime)",
            0,
            recovery,
        )
        .await;
    report.assert_ok(&relays.logs());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn file_sink_disk_full() {
    let fs = crate::support::servers::Tmpfs::mount("64k");
    let path = fs.dir.path().join("out.jsonl");
    let mut ck = Checker::new(TestDb::new().await, "disk full (file)");
    let load = Load::new();
    let mut relays = Relays::spawn(1, |_| {
        relay_cmd(
            &ck.db,
            "lease",
            &format!("file:{}", path.display()),
            50,
            "2s",
        )
    });
    let producers = ck.produce(&load);
    let deadline = Instant::now() + Duration::from_secs(60);
    // The fault was felt: the relay's circuit opened on the full disk (ENOSPC).
    while !relays
        .logs()
        .lines()
        .any(|l| l.contains("sink unavailable") && l.contains("No space left on device"))
    {
        assert!(
            Instant::now() < deadline,
            "no outage on a full disk\n{}",
            relays.logs()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ck.assert_mid_drain().await;
    let unsettled_while_full: i64 = ck
        .db
        .scalar("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        .await;
    assert!(unsettled_while_full > 0);
    fs.resize("256m");
    let end = Instant::now();
    let recovery = ck.wait_settled(end, SETTLE).await;
    producers.await.unwrap();
    relays.assert_running();
    relays.stop();
    // A failed write is truncated back, so the batch is neither half there nor sent twice.
    let report = ck
        .check(
            &file_deliveries(&[&path]),
            1,
            "64 KiB tmpfs full, then grown",
            0,
            recovery,
        )
        .await;
    report.assert_ok(&relays.logs());
}

/// A database of the shared server made for one test (a pooler's entry names a database, and
/// its settings are per database); dropped on drop.
struct OwnDatabase {
    name: String,
}

impl OwnDatabase {
    async fn create() -> Self {
        let name = format!(
            "obx_faults_{}",
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        );
        let pool = sqlx::PgPool::connect(&crate::support::base_url())
            .await
            .unwrap();
        sqlx::raw_sql(&format!("CREATE DATABASE {name}"))
            .execute(&pool)
            .await
            .unwrap();
        Self { name }
    }

    /// Its URL on the server itself (not through the pooler).
    fn direct_url(&self) -> String {
        let mut url = url::Url::parse(&crate::support::base_url()).unwrap();
        url.set_path(&self.name);
        url.to_string()
    }
}

impl Drop for OwnDatabase {
    fn drop(&mut self) {
        let name = self.name.clone();
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok(pool) = sqlx::PgPool::connect(&crate::support::base_url()).await {
                    let _ = sqlx::raw_sql(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .execute(&pool)
                        .await;
                }
            })
        })
        .join();
    }
}

/// PgBouncer's version from `pgbouncer --version` (major, minor).
fn pgbouncer_version() -> (u32, u32) {
    let out = Command::new("pgbouncer").arg("--version").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let v = text
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("pgbouncer --version: {text}"));
    let mut parts = v.split('.').map(|p| p.parse::<u32>().unwrap());
    (parts.next().unwrap(), parts.next().unwrap())
}

/// PgBouncer (Debian's, started by the test on its own port) passes on none of the startup
/// parameters sqlx sends but the ones it tracks: `extra_float_digits` and `options` (which
/// carries `--schema` as `-c search_path=...`) must be listed in `ignore_startup_parameters`, and
/// then the server never sees the schema. That used to run every command against the server's
/// default search path (`public`): `migrate --schema X` reported X and installed the outbox into
/// `public`. It must refuse instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_a_pooler_that_drops_the_schema_commands_refuse_to_run() {
    let own = OwnDatabase::create().await;
    let db = TestDb::unmigrated_at(&own.direct_url()).await;
    let bouncer = PgBouncer::start(
        crate::support::port(18345),
        "obx",
        &own.name,
        "transaction",
        "ignore_startup_parameters = extra_float_digits, options",
    );
    let url = format!("postgres://postgres@127.0.0.1:{}/obx", bouncer.port);
    let out = db
        .cmd()
        .env("DATABASE_URL", &url)
        .arg("migrate")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let public: bool = db
        .scalar("SELECT to_regclass('public.outbox') IS NOT NULL")
        .await;
    assert!(!public, "migrate installed the outbox into public: {err}");
    assert_eq!(out.status.code(), Some(3), "{err}\n{}", bouncer.log());
    assert!(
        err.contains("search_path") && err.contains(&db.schema),
        "{err}"
    );
}

/// Relays, `prune` in a loop and `requeue` through PgBouncer in session pooling (any version):
/// the full scenario, with the schema set as the database's search_path (the pooler drops
/// `options`). Transaction pooling: [`behind_pgbouncer_in_transaction_pooling`].
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_pgbouncer_relay_prune_and_requeue() {
    let version = pgbouncer_version();
    let pool_mode = "session";
    let own = OwnDatabase::create().await;
    let db = TestDb::new_at(&own.direct_url()).await;
    db.exec(&format!(
        "ALTER DATABASE {} SET search_path TO {}",
        own.name, db.schema
    ))
    .await;
    let bouncer = PgBouncer::start(
        crate::support::port(18346),
        "obx",
        &own.name,
        pool_mode,
        "ignore_startup_parameters = extra_float_digits, options",
    );
    let url = format!("postgres://postgres@127.0.0.1:{}/obx", bouncer.port);
    let ck = Checker::new(
        db,
        &format!("PgBouncer {}.{} {pool_mode} pool", version.0, version.1),
    );
    let relays = pgbouncer_scenario(
        ck,
        bouncer.port,
        &url,
        &[],
        ["lease", "lease"],
        pool_mode,
        None,
    )
    .await;
    drop(relays);
    drop(bouncer);
}

/// The PgBouncer scenario: two relays (`modes`) and `prune` and `requeue` in a loop through the
/// pooler at `url` with the environment `env`, poison every 50th event; lost = 0, no duplicate.
async fn pgbouncer_scenario(
    mut ck: Checker,
    pooler_port: u16,
    url: &str,
    env: &[(&str, &str)],
    modes: [&str; 2],
    pool_mode: &str,
    metrics_port: Option<u16>,
) -> Relays {
    let consumer = Consumer::start();
    let load = Load::new().poison(50);
    let with_env = |mut c: Command| {
        c.env("DATABASE_URL", url);
        for (k, v) in env {
            c.env(k, v);
        }
        c
    };
    let mut relays = Relays::spawn(2, |i| {
        let mut c = with_env(relay_cmd(&ck.db, modes[i], &consumer.url(), 50, "2s"));
        if let (0, Some(port)) = (i, metrics_port) {
            c.args(["--metrics-addr", &format!("127.0.0.1:{port}")]);
        }
        c
    });
    let producers = ck.produce(&load);
    ck.wait_progress(load.events / 10).await;
    // The pooler is in the way: every relay is connected to it and to nothing else but the
    // consumer (a relay that went to the server directly would test nothing of the pooler).
    for (i, relay) in relays.children.iter().enumerate() {
        let peers: BTreeSet<i32> = crate::support::server_ports(relay).into_iter().collect();
        let pooler = i32::from(pooler_port);
        assert!(
            peers.contains(&pooler)
                && peers.is_subset(&BTreeSet::from([pooler, i32::from(consumer.port)])),
            "relay {i} is connected to ports {peers:?}, not through the pooler on {pooler}"
        );
    }
    if let Some(port) = metrics_port {
        // The probes' statements go through the pooler too.
        let get = |path: &'static str| async move {
            let r = reqwest::get(format!("http://127.0.0.1:{port}{path}"))
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        };
        assert_eq!(get("/readyz").await, (200, "ok\n".to_owned()));
        let metrics = get("/metrics").await.1;
        assert!(
            metrics.contains("outboxctl_backlog_ready")
                && metrics.contains("outboxctl_database_up 1"),
            "{metrics}"
        );
    }
    let mut runs = 0;
    while !producers.is_finished() || runs == 0 {
        for args in [
            &["prune", "--older-than", "1s", "--batch-size", "100"][..],
            &["requeue", "--all"][..],
        ] {
            let out = with_env(ck.db.cmd()).args(args).output().unwrap();
            assert!(
                out.status.success(),
                "{args:?} through PgBouncer: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        runs += 1;
    }
    let end = Instant::now();
    let recovery = ck.wait_settled(end, SETTLE).await;
    producers.await.unwrap();
    relays.assert_running();
    relays.stop();
    let pruned: i64 = ck
        .db
        .scalar("SELECT count(*) FROM outbox_audit WHERE action = 'prune'")
        .await;
    assert!(pruned > 0, "no prune went through");
    let report = ck
        .check(
            &consumer.processed(),
            2,
            &format!("through PgBouncer ({pool_mode} pooling), {runs} prune + requeue"),
            0,
            recovery,
        )
        .await;
    report.assert_ok(&relays.logs());
    relays
}

/// PgBouncer in transaction pooling (`pool_mode = transaction`, default settings: no
/// `ignore_startup_parameters`, no search_path on the server, three server connections for every
/// client): with `--pooler transaction` a lease-mode and a tx-mode relay, `prune` in a loop and
/// `requeue` run the full scenario. The database's default search path leads to `public`, which
/// has no outbox, so a statement that ran outside the transaction that sets the schema would
/// fail; and no relay LISTENs (a LISTEN stays on a server connection other clients get).
///
/// Without `--pooler`, behind a PgBouncer before 1.21 (which cannot carry named prepared
/// statements) told to ignore the startup parameters, with the schema as the database's search
/// path, a relay fails with one line that says what to do, not sqlx's raw error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_pgbouncer_in_transaction_pooling() {
    let version = pgbouncer_version();
    if version < (1, 21) {
        let own = OwnDatabase::create().await;
        let db = TestDb::new_at(&own.direct_url()).await;
        db.exec(&format!(
            "ALTER DATABASE {} SET search_path TO {}",
            own.name, db.schema
        ))
        .await;
        let bouncer = PgBouncer::start(
            crate::support::port(18700),
            "obx",
            &own.name,
            "transaction",
            "ignore_startup_parameters = extra_float_digits, options",
        );
        db.seed_ready(10).await;
        let out = db
            .cmd()
            .env(
                "DATABASE_URL",
                format!("postgres://postgres@127.0.0.1:{}/obx", bouncer.port),
            )
            .args(["relay", "--once", "--sink", "null"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(3), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(
            err.contains("connection pooler in transaction mode")
                && err.contains("--pooler transaction"),
            "{err}"
        );
        let published = db.count("published_at IS NOT NULL").await;
        assert_eq!(published, 0);
    } else {
        crate::support::say_skipped(
            "behind_pgbouncer_in_transaction_pooling",
            &format!(
                "its first half: PgBouncer {}.{} carries prepared statements, so the one-line \
                 refusal without --pooler (PgBouncer before 1.21) cannot be shown here",
                version.0, version.1
            ),
        );
    }

    let own = OwnDatabase::create().await;
    let db = TestDb::new_at(&own.direct_url()).await;
    let bouncer = PgBouncer::start(
        crate::support::port(18701),
        "obx",
        &own.name,
        "transaction",
        "default_pool_size = 3",
    );
    let url = format!("postgres://postgres@127.0.0.1:{}/obx", bouncer.port);
    let pooled = [("OUTBOXCTL_POOLER", "transaction")];
    // A command that needs a session of its own is refused before it connects.
    let out = db
        .cmd()
        .env("DATABASE_URL", &url)
        .envs(pooled)
        .arg("migrate")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("--pooler transaction"), "{err}");
    let ck = Checker::new(
        db,
        &format!("PgBouncer {}.{} transaction pool", version.0, version.1),
    );
    let listening = Arc::new(AtomicBool::new(false));
    let watch = {
        let (pool, listening, name) =
            (ck.db.pool.clone(), Arc::clone(&listening), own.name.clone());
        tokio::spawn(async move {
            loop {
                let n: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND query ILIKE 'listen%'",
                )
                .bind(&name)
                .fetch_one(&pool)
                .await
                .unwrap_or(0);
                if n > 0 {
                    listening.store(true, std::sync::atomic::Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let relays = pgbouncer_scenario(
        ck,
        bouncer.port,
        &url,
        &pooled,
        ["lease", "tx"],
        "transaction",
        Some(crate::support::port(18705)),
    )
    .await;
    watch.abort();
    assert!(
        !listening.load(std::sync::atomic::Ordering::SeqCst),
        "a relay LISTENed through transaction pooling\n{}",
        relays.logs()
    );
    drop(bouncer);
}

/// Log mode behind PgBouncer in transaction pooling: two relays (`--pooler transaction`, mode
/// auto, so log mode) through the pooler, one reading and one standing by, deliver every event
/// exactly once to a file; `log enable` (a session lock, an index built concurrently) is refused
/// through it before it connects.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn log_mode_behind_pgbouncer_in_transaction_pooling() {
    let own = OwnDatabase::create().await;
    let db = TestDb::new_at(&own.direct_url()).await;
    let bouncer = PgBouncer::start(
        crate::support::port(18706),
        "obx",
        &own.name,
        "transaction",
        "default_pool_size = 3",
    );
    let url = format!("postgres://postgres@127.0.0.1:{}/obx", bouncer.port);
    let refused = db
        .cmd()
        .env("DATABASE_URL", &url)
        .env("OUTBOXCTL_POOLER", "transaction")
        .args(["log", "enable"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&refused.stderr).into_owned();
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(err.contains("--pooler transaction"), "{err}");
    crate::support::run(&db, &["log", "enable"], 0);
    let dir = tempfile::tempdir().unwrap();
    let paths = [dir.path().join("a.jsonl"), dir.path().join("b.jsonl")];
    let mut children: Vec<Child> = paths
        .iter()
        .map(|p| {
            db.cmd()
                .env("DATABASE_URL", &url)
                .env("OUTBOXCTL_POOLER", "transaction")
                .args(["relay", "--batch-size", "50", "--poll-interval", "100ms"])
                .arg("--sink")
                .arg(format!("file:{}", p.display()))
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap()
        })
        .collect();
    for round in 0..4 {
        db.exec(&format!(
            "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key)
             SELECT '00000000-0000-0000-0000-000000000001', 'order', 'o-' || g, 'e', '{{}}', 'r{round}-' || g
               FROM generate_series(1, 250) g"
        ))
        .await;
    }
    let all = || {
        let refs: Vec<&std::path::Path> = paths.iter().map(|p| p.as_path()).collect();
        crate::support::deliveries(&refs)
    };
    wait_until(Duration::from_secs(60), "every event delivered", || async {
        all().len() == 1000
    })
    .await;
    for c in &children {
        assert!(
            crate::support::server_ports(c).contains(&i32::from(bouncer.port)),
            "a relay went around the pooler"
        );
    }
    for c in &mut children {
        signal(c, "TERM");
        assert!(c.wait().unwrap().success());
    }
    let seen = all();
    assert!(seen.values().all(|n| *n == 1), "{seen:?}");
    assert_eq!(
        db.count("published_at IS NOT NULL").await,
        0,
        "the log marks nothing"
    );
}

/// `--pooler session` behind PgBouncer in session pooling with its default settings (no
/// `ignore_startup_parameters`) and no search_path on the server: outboxctl sends no startup
/// parameter the pooler refuses and sets the schema on each connection, so relay, stats and
/// prune work on the configured schema.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_pgbouncer_in_session_pooling_with_default_settings() {
    let own = OwnDatabase::create().await;
    let db = TestDb::new_at(&own.direct_url()).await;
    let bouncer = PgBouncer::start(crate::support::port(18702), "obx", &own.name, "session", "");
    let url = format!("postgres://postgres@127.0.0.1:{}/obx", bouncer.port);
    db.seed_ready(10).await;
    let pooled = |args: &[&str]| {
        let out = db
            .cmd()
            .env("DATABASE_URL", &url)
            .env("OUTBOXCTL_POOLER", "session")
            .args(args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "{args:?}: {err}\n{}", bouncer.log());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    pooled(&["relay", "--once", "--sink", "null"]);
    let published = db.count("published_at IS NOT NULL").await;
    assert_eq!(published, 10);
    let stats = pooled(&["stats", "--json"]);
    assert!(stats.contains(&db.schema), "{stats}");
    pooled(&["prune", "--older-than", "1ms"]);
    let left: i64 = db.scalar("SELECT count(*) FROM outbox").await;
    assert_eq!(left, 0, "prune deleted the published events of the schema");
}

/// Why [`outboxctl::db::Pin`] puts every statement in a transaction under transaction pooling:
/// sqlx sends a statement with parameters as Parse + Describe + Sync, then Bind + Execute + Sync,
/// and PgBouncer in transaction pooling may give the second half to another server connection,
/// whose unnamed statement is another client's. Eight clients with two server connections, each
/// client its own statement (`SELECT $1::int + k`), unnamed: outside a transaction some answers
/// are wrong (another client's statement ran with these parameters) or errors; inside one, every
/// answer is right. So `.persistent(false)` alone would be silently wrong behind such a pooler.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transaction_pooling_splits_a_statement_outside_a_transaction() {
    use sqlx::{ConnectOptions, Connection};
    let own = OwnDatabase::create().await;
    let bouncer = PgBouncer::start(
        crate::support::port(18704),
        "obx",
        &own.name,
        "transaction",
        "default_pool_size = 2",
    );
    let url = format!("postgres://postgres@127.0.0.1:{}/obx", bouncer.port);
    let options: sqlx::postgres::PgConnectOptions = url
        .parse::<sqlx::postgres::PgConnectOptions>()
        .unwrap()
        .extra_float_digits(None)
        .statement_cache_capacity(0);
    // (wrong answers, errors, statements run) of 8 clients for `dur`, in a transaction or not.
    async fn run(
        options: &sqlx::postgres::PgConnectOptions,
        pinned: bool,
        dur: Duration,
    ) -> (usize, usize, usize) {
        let mut tasks = Vec::new();
        for k in 0..8i32 {
            let options = options.clone();
            tasks.push(tokio::spawn(async move {
                let mut conn = options.connect().await.unwrap();
                let sql = format!("SELECT $1::int + {}", k * 1000);
                let (mut wrong, mut bad, mut n) = (0, 0, 0);
                let until = Instant::now() + dur;
                while Instant::now() < until {
                    let q = sqlx::query_scalar::<_, i32>(&sql)
                        .bind(n as i32)
                        .persistent(false);
                    let got = if pinned {
                        let mut tx = conn.begin().await.unwrap();
                        let got = q.fetch_one(&mut *tx).await;
                        tx.commit().await.unwrap();
                        got
                    } else {
                        q.fetch_one(&mut conn).await
                    };
                    match got {
                        Ok(v) if v == n as i32 + k * 1000 => {}
                        Ok(_) => wrong += 1,
                        Err(_) => bad += 1,
                    }
                    n += 1;
                }
                (wrong, bad, n)
            }));
        }
        let mut total = (0, 0, 0);
        for t in tasks {
            let (w, b, n) = t.await.unwrap();
            total = (total.0 + w, total.1 + b, total.2 + n);
        }
        total
    }
    let (wrong, failed, all) = run(&options, false, Duration::from_secs(5)).await;
    assert!(
        wrong + failed > 0,
        "no statement was split across server connections in {all}"
    );
    let (w, f, n) = run(&options, true, Duration::from_secs(5)).await;
    assert_eq!((w, f), (0, 0), "of {n} inside a transaction: wrong, failed");
    eprintln!(
        "outside a transaction, of {all}: {wrong} wrong answers, {failed} errors; inside, 0 of {n}"
    );
    drop(bouncer);
}
