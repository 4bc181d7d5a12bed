//! Prometheus metrics as an operator meets them: a real Prometheus
//! (Debian's `prometheus`, which `tests/run` installs) scrapes a running
//! broker, and a query over its HTTP API returns what a real client
//! produced; `promtool check metrics` passes on the broker's output; the
//! listener answers only `GET /metrics`.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::cluster::free_port;
use brook_tests::scrape::{self, summed, wait_for};
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const RECORDS: usize = 500;
const VALUE_BYTES: usize = 200;
/// How long Prometheus may take to start, scrape and answer.
const PROMETHEUS_WAIT: Duration = Duration::from_secs(60);

fn http(address: &str, request_line: &str) -> (u16, String) {
    scrape::http(address, request_line)
        .unwrap_or_else(|| panic!("{address} did not answer {request_line}"))
}

fn produce(address: &str, topic: &str) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", address)
        .set("linger.ms", "5")
        .set("enable.idempotence", "true")
        .create()
        .expect("a producer");
    let value = vec![b'v'; VALUE_BYTES];
    for _ in 0..RECORDS {
        producer
            .send(BaseRecord::<(), _>::to(topic).payload(&value))
            .expect("queued");
    }
    producer.flush(Duration::from_secs(30)).expect("delivered");
}

/// Percent-encodes a query string value.
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|byte| match byte {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => {
                (byte as char).to_string()
            }
            _ => format!("%{byte:02X}"),
        })
        .collect()
}

struct Prometheus(Child);

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_prometheus(dir: &Path, target: &str, web: &str) -> Prometheus {
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: brook\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address={web}"))
        .stdout(Stdio::null())
        .stderr(log)
        .spawn()
        .expect("prometheus runs (tests/run installs it)");
    Prometheus(child)
}

/// The value Prometheus answers for an instant `query`, once it has one.
fn query_until(web: &str, query: &str, wanted: f64, log: &Path) -> f64 {
    let deadline = Instant::now() + PROMETHEUS_WAIT;
    let mut last = String::new();
    while Instant::now() < deadline {
        let line = format!("GET /api/v1/query?query={}", encoded(query));
        if let Some((status, body)) = scrape::http(web, &line) {
            if status == 200 {
                let answer: serde_json::Value = serde_json::from_str(&body).unwrap();
                let value = answer["data"]["result"][0]["value"][1]
                    .as_str()
                    .and_then(|value| value.parse::<f64>().ok());
                if let Some(value) = value {
                    if value == wanted {
                        return value;
                    }
                }
                last = body;
            }
        }
        std::thread::sleep(Duration::from_millis(500));
    }
    let log = std::fs::read_to_string(log).unwrap_or_default();
    panic!("Prometheus never answered {query} = {wanted}; last answer {last}; its log:\n{log}");
}

#[test]
fn prometheus_scrapes_the_produced_bytes_and_promtool_accepts_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, &dir.path().join("broker"), 2, &[]);
    let metrics = broker
        .metrics_address()
        .expect("the broker serves metrics")
        .to_owned();
    produce(&broker.address, "scraped");

    // The broker's own account: every record, and at least its value bytes.
    let (status, text) = http(&metrics, "GET /metrics");
    assert_eq!(status, 200);
    let records = r#"sum(brook_produce_records_total{topic="scraped"})"#;
    let bytes = r#"sum(brook_produce_bytes_total{topic="scraped"})"#;
    let counted = summed(&text, "brook_produce_bytes_total", r#"topic="scraped""#);
    assert!(
        counted >= (RECORDS * VALUE_BYTES) as f64,
        "{counted}\n{text}"
    );
    assert!(
        text.contains(r#"brook_requests_total{api="Produce""#),
        "{text}"
    );
    // The state gauges follow the image and the logs within a second.
    let scraped = r#"partition="0",topic="scraped""#;
    wait_for(
        &metrics,
        Duration::from_secs(10),
        "the led partition's log",
        |text| {
            summed(text, "brook_partition_leaders", "") == 1.0
                && summed(text, "brook_log_size_bytes", scraped) >= counted
                && summed(text, "brook_log_segments", scraped) >= 1.0
                && summed(text, "brook_log_fsync_duration_seconds_count", "") >= 1.0
        },
    );

    // A group that committed offset 100 of the 500 records lags by 400;
    // the idempotent producer has its id kept by the partition.
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", "lagging")
        .create()
        .expect("a consumer");
    let mut committed = TopicPartitionList::new();
    committed
        .add_partition_offset("scraped", 0, Offset::Offset(100))
        .unwrap();
    consumer
        .commit(&committed, CommitMode::Sync)
        .expect("committed");
    let lagging = r#"group="lagging",partition="0",topic="scraped""#;
    wait_for(
        &metrics,
        Duration::from_secs(10),
        "the group, its lag and the producer id",
        |text| {
            summed(text, "brook_consumer_group_lag_records", lagging) == (RECORDS - 100) as f64
                && summed(text, "brook_groups", r#"state="Empty""#) == 1.0
                && summed(text, "brook_producer_ids", "") == 1.0
        },
    );
    let (_, text) = http(&metrics, "GET /metrics");

    // promtool's lint: names, types, help, units.
    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool runs (tests/run installs it)");
    promtool
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let checked = promtool.wait_with_output().unwrap();
    assert!(
        checked.status.success() && checked.stdout.is_empty() && checked.stderr.is_empty(),
        "promtool: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );

    // A real Prometheus scrapes it and answers queries over its API.
    let web = format!("127.0.0.1:{}", free_port());
    let prometheus_dir = dir.path().join("prometheus");
    std::fs::create_dir_all(&prometheus_dir).unwrap();
    let _prometheus = start_prometheus(&prometheus_dir, &metrics, &web);
    let log = prometheus_dir.join("prometheus.log");
    assert_eq!(
        query_until(&web, records, RECORDS as f64, &log),
        RECORDS as f64
    );
    assert_eq!(query_until(&web, bytes, counted, &log), counted);

    // Only GET /metrics is served; anything else is refused, and the
    // listener goes on.
    assert_eq!(http(&metrics, "GET /").0, 404);
    assert_eq!(http(&metrics, "POST /metrics").0, 405);
    let mut garbage = TcpStream::connect(&metrics).unwrap();
    garbage.write_all(b"\x00\x01not http\r\n\r\n").unwrap();
    let mut answer = String::new();
    garbage
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let _ = garbage.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer:?}");
    assert_eq!(http(&metrics, "GET /metrics").0, 200);
}
