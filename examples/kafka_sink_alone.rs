//! The Kafka sink alone, with no database: N events in batches of B, DEPTH batches handed to
//! `Sink::publish` at once, as the relay's pipeline would. What a relay's drain to Kafka could
//! reach if claiming cost nothing (README "Broker sinks against their raw clients").
//!
//!   cargo run --release --example kafka_sink_alone -- 'kafka://127.0.0.1:9092?topic=t' 100000 1000 2
//!
//! `PROPS=linger.ms=1,acks=all` passes `--kafka-property` values.
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{FuturesUnordered, StreamExt};
use outboxctl::event::Event;
use outboxctl::sink::{self, PublishCtl, SinkOptions};

fn event(id: i64) -> Event {
    Event {
        id,
        tenant_id: uuid::Uuid::new_v4(),
        aggregate_type: "order".into(),
        aggregate_id: format!("o-{}", id % 1000),
        event_type: "order.placed".into(),
        payload: format!("{{\"n\": {id}, \"total\": 1200, \"currency\": \"USD\"}}"),
        headers: "{}".into(),
        idempotency_key: format!("k-{id}"),
        created_at: chrono::Utc::now(),
        attempt_count: 1,
    }
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 5 {
        eprintln!("usage: kafka_sink_alone SPEC EVENTS BATCH DEPTH");
        std::process::exit(2);
    }
    let (spec, n, b, depth) = (
        &args[1],
        args[2].parse::<usize>().expect("EVENTS"),
        args[3].parse::<usize>().expect("BATCH").max(1),
        args[4].parse::<usize>().expect("DEPTH").max(1),
    );
    let props = std::env::var("PROPS")
        .map(|p| {
            p.split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let opts = SinkOptions {
        timeout: Duration::from_secs(15),
        kafka_properties: props,
        ..Default::default()
    };
    let sink = sink::from_spec(spec, &opts).await.expect("sink");
    let batches: Vec<Vec<Event>> = (0..n / b)
        .map(|k| (0..b).map(|i| event((k * b + i) as i64 + 1)).collect())
        .collect();
    let ctl = PublishCtl {
        concurrency: 64,
        timeout: Duration::from_secs(15),
        shutdown: tokio_util::sync::CancellationToken::new(),
        shutdown_grace: Duration::from_secs(1),
        start_by: None,
        handed_over: Default::default(),
    };
    let start = Instant::now();
    let mut inflight = FuturesUnordered::new();
    let mut next = batches.iter();
    let mut published = 0;
    loop {
        while inflight.len() < depth {
            let Some(batch) = next.next() else { break };
            let sink = Arc::clone(&sink);
            let ctl = &ctl;
            inflight.push(async move { sink.publish(batch, ctl).await });
        }
        let Some(outcomes) = inflight.next().await else {
            break;
        };
        published += outcomes
            .iter()
            .filter(|o| matches!(o, sink::Outcome::Published))
            .count();
    }
    let secs = start.elapsed().as_secs_f64();
    println!(
        "{published} of {} events published in batches of {b}, {depth} in flight: {:.0}/s",
        batches.len() * b,
        published as f64 / secs
    );
}
