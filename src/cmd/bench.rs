//! `outboxctl bench`: size a PostgreSQL server before going live. Runs in a scratch schema on the
//! target server and drops it afterwards. Every figure comes from the shipped code paths:
//! bulk publish through `publish --file`'s batch insert, drain through `relay --once` processes
//! (this very binary) to the null sink, latency through the daemon loop.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde::Serialize;
use sqlx::Connection;
use tokio_util::sync::CancellationToken;

use crate::cli::BenchArgs;
use crate::config::DbConfig;
use crate::db::{self, publish::NewEvent};
use crate::ops::publish::{publish_lines, Batches};
use crate::output;
use crate::relay::daemon::DaemonSettings;
use crate::relay::{Backoff, Mode, Relay, RelayConfig};
use crate::sink::{Event, Outcome, PublishCtl, Sink};

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct BenchReport {
    pub server: String,
    pub cpus: usize,
    pub synchronous_commit: String,
    pub mode: Mode,
    pub relays: u32,
    pub batch_size: u32,
    pub publish: Rate,
    pub drain: Drain,
    pub sql_ceiling: Rate,
    /// Drain rate as a fraction of the SQL ceiling.
    pub drain_vs_ceiling: f64,
    pub latency: Latency,
    pub delayed: Latency,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prune: Option<Prune>,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Rate {
    pub events: u64,
    pub seconds: f64,
    pub per_second: f64,
}

impl Rate {
    fn new(events: u64, d: Duration) -> Self {
        let seconds = d.as_secs_f64().max(1e-6);
        Self {
            events,
            seconds,
            per_second: events as f64 / seconds,
        }
    }
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Drain {
    #[serde(flatten)]
    pub rate: Rate,
    /// Highest peak RSS among the relay processes, in MiB.
    pub peak_rss_mib: f64,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Latency {
    pub events: u64,
    /// Offered rate (events/s); 0 for the delayed test.
    pub rate: u32,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
}

#[derive(Debug, Serialize, schemars::JsonSchema)]
pub struct Prune {
    #[serde(flatten)]
    pub rate: Rate,
    pub batches: u64,
    pub longest_batch_ms: f64,
}

pub async fn run(args: BenchArgs) -> anyhow::Result<u8> {
    let mut db_args = args.db.clone();
    db_args.schema = format!("outboxctl_bench_{}", std::process::id());
    let cfg = DbConfig::from_args(&db_args)?;
    let mut conn = db::connect(&cfg).await?;
    db::migrate::apply(&mut conn, &cfg.schema).await?;
    let result = bench(&args, &cfg, &mut conn).await;
    if !args.keep_schema {
        db::drop_schema(&mut conn, &cfg.schema).await?;
    }
    let report = result?;
    if args.output.json {
        output::print_json(&report)?;
    } else {
        print_human(&report, &args)?;
    }
    Ok(crate::exit::OK)
}

fn phase(json: bool, what: &str) -> indicatif::ProgressBar {
    output::progress(None, json, what)
}

async fn bench(
    args: &BenchArgs,
    cfg: &DbConfig,
    conn: &mut sqlx::PgConnection,
) -> anyhow::Result<BenchReport> {
    let json = args.output.json;
    let mode = match args.mode {
        crate::cli::RelayMode::Lease => Mode::Lease,
        crate::cli::RelayMode::Log => {
            return Err(crate::exit::CodedError::usage(
                "bench measures the queue modes only (--mode tx or lease); measure log mode with `relay --once --mode log` (bench/log-mode.sh)",
            )
            .into())
        }
        _ => Mode::Tx,
    };
    let synchronous_commit: String = sqlx::query_scalar("SHOW synchronous_commit")
        .fetch_one(&mut *conn)
        .await?;

    // publish: the bulk path of `publish --file`.
    let pb = phase(json, "publish");
    let lines = backlog_lines(args.events);
    let started = Instant::now();
    let rep = publish_lines(&mut *conn, lines.as_bytes(), Batches::of(5000), false).await?;
    let publish = Rate::new(rep.inserted, started.elapsed());
    drop(lines);
    pb.finish_and_clear();
    sqlx::query("VACUUM ANALYZE outbox")
        .execute(&mut *conn)
        .await?;

    // drain: relay --once processes to the null sink.
    let pb = phase(json, "drain");
    let drain = drain(args, cfg, mode).await?;
    pb.finish_and_clear();

    // sql ceiling: the same claim and settle statements back to back, no relay logic.
    let pb = phase(json, "sql ceiling");
    sqlx::query("UPDATE outbox SET published_at = NULL, locked_until = NULL, attempt_count = 0")
        .execute(&mut *conn)
        .await?;
    sqlx::query("VACUUM ANALYZE outbox")
        .execute(&mut *conn)
        .await?;
    let sql_ceiling = sql_ceiling(cfg, mode, args.batch_size, args.relays, args.events).await?;
    pb.finish_and_clear();
    sqlx::query("TRUNCATE outbox").execute(&mut *conn).await?;

    // latency: daemon at a fixed offered rate; commit → sink receipt.
    let pb = phase(json, "latency");
    let latency = latency(cfg, args).await?;
    pb.finish_and_clear();

    // delayed: lateness of delayed events against their due time.
    let pb = phase(json, "delayed");
    let delayed = delayed(cfg, args).await?;
    pb.finish_and_clear();

    let prune = if args.prune_rows > 0 {
        let pb = phase(json, "prune");
        let p = prune(conn, args.prune_rows).await?;
        pb.finish_and_clear();
        Some(p)
    } else {
        None
    };

    Ok(BenchReport {
        server: cfg.display.clone(),
        cpus: std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1),
        synchronous_commit,
        mode,
        relays: args.relays,
        batch_size: args.batch_size,
        publish,
        drain_vs_ceiling: drain.rate.per_second / sql_ceiling.per_second.max(1e-9),
        drain,
        sql_ceiling,
        latency,
        delayed,
        prune,
    })
}

/// JSON lines like a real backlog: ~200-byte payloads (the peers' load_backlog.sql shape).
fn backlog_lines(n: u64) -> String {
    let mut s = String::with_capacity(n as usize * 330);
    for g in 1..=n {
        s.push_str(&format!(
            "{{\"event_type\":\"order.created\",\"aggregate_type\":\"order\",\"aggregate_id\":\"order-{}\",\"tenant_id\":\"00000000-0000-0000-0000-{:012}\",\"idempotency_key\":\"bench-{g}\",\"headers\":{{\"trace_id\":\"{:032x}\"}},\"payload\":{{\"order_id\":{g},\"amount_cents\":{},\"currency\":\"EUR\",\"customer\":{{\"id\":\"cust-{}\",\"email\":\"user{g}@example.com\"}},\"lines\":[{{\"sku\":\"SKU-{}\",\"qty\":{}}}]}}}}\n",
            g % 5000,
            g % 97,
            u128::from(g).wrapping_mul(0x9e37_79b9_7f4a_7c15),
            (g * 37) % 100_000,
            g % 977,
            g % 300,
            1 + g % 5
        ));
    }
    s
}

/// Runs `relays` copies of this binary's `relay --once --sink null` and measures the drain and
/// their peak RSS (VmHWM, sampled from /proc while they run).
async fn drain(args: &BenchArgs, cfg: &DbConfig, mode: Mode) -> anyhow::Result<Drain> {
    let exe = std::env::current_exe()?;
    let started = Instant::now();
    let mut children = Vec::new();
    for _ in 0..args.relays {
        let mut c = tokio::process::Command::new(&exe);
        c.args(["relay", "--once", "--sink", "null", "--json", "-q"])
            .args(["--schema", cfg.schema.name()])
            .args(["--batch-size", &args.batch_size.to_string()])
            .args(["--concurrency", &args.concurrency.to_string()])
            .args(["--mode", if mode == Mode::Tx { "tx" } else { "lease" }])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::inherit());
        if let Some(url) = &args.db.database_url {
            c.env("DATABASE_URL", url); // by environment: never on a command line
        }
        children.push(c.spawn()?);
    }
    let pids: Vec<u32> = children.iter().filter_map(|c| c.id()).collect();
    let peak = Arc::new(Mutex::new(0u64));
    let stop = CancellationToken::new();
    let sampler = {
        let (peak, stop) = (Arc::clone(&peak), stop.clone());
        tokio::spawn(async move {
            while !stop.is_cancelled() {
                for pid in &pids {
                    if let Some(kb) = vm_hwm_kib(*pid) {
                        let mut p = peak.lock().unwrap();
                        *p = (*p).max(kb);
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let mut published = 0u64;
    for c in children {
        let out = c.wait_with_output().await?;
        if !out.status.success() {
            anyhow::bail!("a bench relay failed ({})", out.status);
        }
        let v: serde_json::Value = serde_json::from_slice(&out.stdout)?;
        published += v["published"].as_u64().unwrap_or(0);
    }
    let elapsed = started.elapsed();
    stop.cancel();
    let _ = sampler.await;
    let peak_kib = *peak.lock().unwrap();
    Ok(Drain {
        rate: Rate::new(published, elapsed),
        peak_rss_mib: peak_kib as f64 / 1024.0,
    })
}

fn vm_hwm_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// The relay's own claim and settle statements in a tight loop from `relays` connections.
async fn sql_ceiling(
    cfg: &DbConfig,
    mode: Mode,
    batch: u32,
    relays: u32,
    events: u64,
) -> anyhow::Result<Rate> {
    let pool = db::pool_for_relay(cfg, relays + 1, true, Duration::from_secs(30)).await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..relays {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut conn = pool.acquire().await?;
            let limit = db::relay::BatchLimit {
                rows: i64::from(batch),
                bytes: crate::relay::DEFAULT_BATCH_BYTES as i64,
                // The relay's usual claim; the bench's events are far below the share.
                sizing: db::relay::Sizing::Share,
            };
            loop {
                let got = match mode {
                    Mode::Tx | Mode::Log => {
                        let mut tx = conn.begin().await?;
                        let rows = db::relay::claim_tx(&mut tx, limit).await?.rows;
                        tx.commit().await?;
                        rows.len()
                    }
                    Mode::Lease => {
                        let token = uuid::Uuid::new_v4();
                        let rows = db::relay::claim_lease(
                            &mut conn,
                            limit,
                            Duration::from_secs(30),
                            token,
                        )
                        .await?
                        .rows;
                        let ids: Vec<i64> = rows.iter().map(|r| r.id).collect();
                        db::relay::settle_published(&mut conn, &ids, token).await?;
                        rows.len()
                    }
                };
                n += got as u64;
                if got < batch as usize {
                    return Ok::<u64, sqlx::Error>(n);
                }
            }
        }));
    }
    let mut total = 0;
    for t in tasks {
        total += t.await??;
    }
    let rate = Rate::new(total, started.elapsed());
    pool.close().await;
    if total != events {
        tracing::warn!(
            total,
            events,
            "sql ceiling drained a different count than loaded"
        );
    }
    Ok(rate)
}

/// A sink that notes when each event arrived (by idempotency key); it keeps no payload.
#[derive(Default)]
struct ArrivalSink {
    arrivals: Mutex<HashMap<String, SystemTime>>,
}

#[async_trait::async_trait]
impl Sink for ArrivalSink {
    async fn publish(&self, events: &[Event], _ctl: &PublishCtl) -> Vec<Outcome> {
        let now = SystemTime::now();
        let mut a = self.arrivals.lock().unwrap();
        for e in events {
            a.insert(e.idempotency_key.clone(), now);
        }
        vec![Outcome::Published; events.len()]
    }
    fn batch_within_one_timeout(&self) -> bool {
        true
    }
    fn describe(&self) -> String {
        "arrival recorder".into()
    }
}

async fn start_daemon(
    cfg: &DbConfig,
    args: &BenchArgs,
    sink: Arc<ArrivalSink>,
) -> anyhow::Result<(CancellationToken, tokio::task::JoinHandle<()>)> {
    let relay = Relay {
        db: db::Session::new(
            db::pool_for_relay(
                cfg,
                3 + crate::relay::PIPELINE_DEPTH,
                true,
                Duration::from_secs(30),
            )
            .await?,
            db::Pin::default(),
        ),
        sink,
        cfg: RelayConfig {
            mode: if args.mode == crate::cli::RelayMode::Lease {
                Mode::Lease
            } else {
                Mode::Tx
            },
            batch_size: args.batch_size,
            batch_bytes: crate::relay::DEFAULT_BATCH_BYTES,
            concurrency: args.concurrency,
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(10),
            max_attempts: 10,
            backoff: Backoff {
                base: Duration::from_secs(1),
                max: Duration::from_secs(60),
            },
            shutdown_grace: Duration::from_secs(5),
            failpoint: None,
            pipeline_depth: crate::relay::PIPELINE_DEPTH,
        },
        ordering: Default::default(),
        sizing: Default::default(),
        start: crate::relay::cursor::ClaimStart::default(),
        log: Default::default(),
    };
    let settings = DaemonSettings {
        poll_interval: Duration::from_secs(5),
        channel: cfg.schema.channel(),
        heartbeat: crate::relay::daemon::HEARTBEAT,
        health: std::sync::Arc::new(crate::relay::metrics::Health::new(Duration::from_secs(60))),
    };
    let token = CancellationToken::new();
    let t = token.clone();
    let handle = tokio::spawn(async move {
        let _ = crate::relay::daemon::daemon(&relay, &settings, &t).await;
        relay.db.close().await;
    });
    // Start producing only once the daemon LISTENs, or the first events wait for a poll tick.
    let mut conn = db::connect(cfg).await?;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !db::is_listening(&mut conn, &cfg.schema.channel()).await? && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok((token, handle))
}

fn one_event(key: String, delay_micros: Option<i64>) -> NewEvent {
    NewEvent {
        tenant_id: uuid::Uuid::nil(),
        aggregate_type: "order".into(),
        aggregate_id: "1".into(),
        event_type: "bench.latency".into(),
        payload: serde_json::json!({"k": key}).to_string(),
        headers: serde_json::json!({}),
        idempotency_key: key,
        available_at: None,
        delay_micros,
    }
}

/// Producers commit single events at `--rate`; the daemon relays them; latency is sink arrival
/// minus the moment the producer sent its INSERT (an upper bound of the commit → sink time).
async fn latency(cfg: &DbConfig, args: &BenchArgs) -> anyhow::Result<Latency> {
    let sink = Arc::new(ArrivalSink::default());
    let (token, handle) = start_daemon(cfg, args, Arc::clone(&sink)).await?;
    let producers = 4u32;
    let total = (f64::from(args.rate) * args.latency_duration.as_secs_f64()) as u64;
    let per = total / u64::from(producers);
    let pool = db::pool(cfg, producers).await?;
    let sent: Arc<Mutex<HashMap<String, SystemTime>>> = Arc::default();
    let mut tasks = Vec::new();
    for p in 0..producers {
        let (pool, sent) = (pool.clone(), Arc::clone(&sent));
        let interval = Duration::from_secs_f64(f64::from(producers) / f64::from(args.rate.max(1)));
        tasks.push(tokio::spawn(async move {
            let mut conn = pool.acquire().await?;
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
            for i in 0..per {
                tick.tick().await;
                let key = format!("lat-{p}-{i}");
                let at = SystemTime::now();
                db::publish::insert_batch(&mut conn, &[one_event(key.clone(), None)]).await?;
                sent.lock().unwrap().insert(key, at);
            }
            Ok::<(), sqlx::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let want = per * u64::from(producers);
    wait_for(&sink, want as usize, Duration::from_secs(30)).await;
    token.cancel();
    let _ = handle.await;
    pool.close().await;
    let sent = sent.lock().unwrap().clone();
    let arrivals = sink.arrivals.lock().unwrap().clone();
    let ms: Vec<f64> = sent
        .iter()
        .filter_map(|(k, t)| {
            arrivals
                .get(k)
                .map(|a| a.duration_since(*t).unwrap_or_default().as_secs_f64() * 1000.0)
        })
        .collect();
    Ok(summarize(ms, args.rate))
}

/// Delayed events due 0.3–1.5 s from now; lateness is sink arrival minus `available_at`.
async fn delayed(cfg: &DbConfig, args: &BenchArgs) -> anyhow::Result<Latency> {
    let sink = Arc::new(ArrivalSink::default());
    let (token, handle) = start_daemon(cfg, args, Arc::clone(&sink)).await?;
    let n = args.delayed_events;
    let events: Vec<NewEvent> = (0..n)
        .map(|i| {
            one_event(
                format!("delayed-{i}"),
                Some(300_000 + (i as i64 * 1_200_000) / n.max(1) as i64),
            )
        })
        .collect();
    let mut conn = db::connect(cfg).await?;
    db::publish::insert_batch(&mut conn, &events).await?;
    let due: Vec<(String, chrono::DateTime<chrono::Utc>)> = sqlx::query_as(
        "SELECT idempotency_key, available_at FROM outbox WHERE idempotency_key LIKE 'delayed-%'",
    )
    .fetch_all(&mut conn)
    .await?;
    wait_for(&sink, n as usize, Duration::from_secs(30)).await;
    token.cancel();
    let _ = handle.await;
    let arrivals = sink.arrivals.lock().unwrap().clone();
    let ms: Vec<f64> = due
        .iter()
        .filter_map(|(k, at)| {
            let a: chrono::DateTime<chrono::Utc> = (*arrivals.get(k)?).into();
            Some(((a - *at).num_microseconds().unwrap_or(0) as f64 / 1000.0).max(0.0))
        })
        .collect();
    Ok(summarize(ms, 0))
}

async fn wait_for(sink: &ArrivalSink, n: usize, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    while sink.arrivals.lock().unwrap().len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn summarize(mut ms: Vec<f64>, rate: u32) -> Latency {
    ms.sort_by(f64::total_cmp);
    let pick = |q: f64| -> f64 {
        if ms.is_empty() {
            return 0.0;
        }
        ms[((ms.len() - 1) as f64 * q).round() as usize]
    };
    Latency {
        events: ms.len() as u64,
        rate,
        p50_ms: pick(0.50),
        p99_ms: pick(0.99),
        max_ms: pick(1.0),
    }
}

/// Prune rows/s on a table of `rows` published rows, and the longest single batch.
async fn prune(conn: &mut sqlx::PgConnection, rows: u64) -> anyhow::Result<Prune> {
    sqlx::query("TRUNCATE outbox").execute(&mut *conn).await?;
    sqlx::query(
        "INSERT INTO outbox (tenant_id, aggregate_type, aggregate_id, event_type, payload, idempotency_key,
                             created_at, available_at, published_at)
         SELECT gen_random_uuid(), 'order', 'o-' || g, 'order.created', jsonb_build_object('n', g), 'p-' || g,
                now() - interval '30 days', now() - interval '30 days', now() - interval '30 days' + g * interval '1 millisecond'
           FROM generate_series(1, $1::bigint) g",
    )
    .bind(rows as i64)
    .execute(&mut *conn)
    .await?;
    sqlx::query("VACUUM ANALYZE outbox")
        .execute(&mut *conn)
        .await?;
    // The same statement `outboxctl prune --older-than 7d` runs, batch after batch.
    let cutoff = db::prune::cutoff(&mut *conn, 7 * 86_400 * 1_000_000).await?;
    let started = Instant::now();
    let mut deleted = 0u64;
    let mut batches = 0u64;
    let mut longest = Duration::ZERO;
    let mut from = None;
    let mut audit = db::prune::PruneAudit {
        actor: "outboxctl bench".to_owned(),
        details: serde_json::json!({ "published": { "cutoff": cutoff, "deleted": 0 } }),
        id: None,
    };
    loop {
        let t = Instant::now();
        let b = db::prune::delete(
            &mut *conn,
            &db::prune::PUBLISHED,
            cutoff,
            from,
            5000,
            &mut audit,
        )
        .await?;
        longest = longest.max(t.elapsed());
        if b.deleted == 0 {
            break;
        }
        deleted += b.deleted;
        batches += 1;
        from = b.next;
    }
    Ok(Prune {
        rate: Rate::new(deleted, started.elapsed()),
        batches,
        longest_batch_ms: longest.as_secs_f64() * 1000.0,
    })
}

fn print_human(r: &BenchReport, args: &BenchArgs) -> anyhow::Result<()> {
    let mut t = output::table(&["measure", "result"]);
    t.add_row(vec![
        "server".into(),
        format!(
            "{} ({} cpus here, synchronous_commit={})",
            r.server, r.cpus, r.synchronous_commit
        ),
    ]);
    t.add_row(vec![
        "publish (bulk)".into(),
        format!(
            "{:.0} events/s ({} events)",
            r.publish.per_second, r.publish.events
        ),
    ]);
    t.add_row(vec![
        "drain (relay --once, null sink)".into(),
        format!(
            "{:.0} events/s ({} events, {} relays, batch {}, {} mode); peak RSS {:.1} MiB",
            r.drain.rate.per_second,
            r.drain.rate.events,
            r.relays,
            r.batch_size,
            if r.mode == Mode::Tx { "tx" } else { "lease" },
            r.drain.peak_rss_mib
        ),
    ]);
    t.add_row(vec![
        "sql ceiling (same statements)".into(),
        format!("{:.0} events/s", r.sql_ceiling.per_second),
    ]);
    t.add_row(vec![
        "drain / ceiling".into(),
        format!("{:.0} %", r.drain_vs_ceiling * 100.0),
    ]);
    t.add_row(vec![
        format!("latency at {}/s", args.rate),
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} events)",
            r.latency.p50_ms, r.latency.p99_ms, r.latency.max_ms, r.latency.events
        ),
    ]);
    t.add_row(vec![
        "delayed lateness".into(),
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({} events)",
            r.delayed.p50_ms, r.delayed.p99_ms, r.delayed.max_ms, r.delayed.events
        ),
    ]);
    if let Some(p) = &r.prune {
        t.add_row(vec![
            "prune".into(),
            format!(
                "{:.0} rows/s ({} rows, {} batches); longest batch {:.1} ms",
                p.rate.per_second, p.rate.events, p.batches, p.longest_batch_ms
            ),
        ]);
    }
    output::print_table(&t)
}

/// The `--json` output of `bench` (docs/reference/json.md).
pub fn json_outputs() -> Vec<crate::schema::Output> {
    vec![crate::schema::Output::of::<BenchReport>("bench --json", "")]
}
