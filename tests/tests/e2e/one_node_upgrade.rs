//! Issue 35 §1: a one-node broker runs the cluster's code path (a quorum of
//! its own voter), and a data directory written by a one-node broker from
//! before that (`main` at c65f90d: topics in `brook-metadata`, producer ids
//! in `brook-producer-ids`, no metadata log) starts on it with every topic
//! (its id and configs), record, committed offset and producer id it had.
//!
//! The fixture `tests/fixtures/one-node-c65f90d.tar.gz` was written by that
//! broker (`brook serve --cores 2 -X log.segment.bytes=1048576`): topic
//! `orders` (3 partitions, `retention.ms=604800001`) with 6,000 records
//! `key-i` → `value-i-` and 500 + i % 100 `x`s from kcat with
//! `enable.idempotence=true` (producer id 0; the broker had reserved ids up
//! to 1,000), then `brook consume orders --group fixture-group -n 4000`,
//! which committed 1625, 1733 and 642; then SIGTERM.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use brook_tests::broker::Broker;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Message, Offset, TopicPartitionList};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/fixtures/one-node-c65f90d.tar.gz"
);
const TOPIC: &str = "orders";
/// What the fixture's broker printed for the topic.
const TOPIC_ID: &str = "HC8nFLeLY0w6oAhs_VAhYw";
const LOG_ENDS: [i64; 3] = [2063, 2005, 1932];
const COMMITTED: [i64; 3] = [1625, 1733, 642];
const RECORDS: usize = 6_000;
/// The end of the producer-id block the fixture's broker had reserved.
const RESERVED_PRODUCER_IDS: i64 = 1_000;
const WAIT: Duration = Duration::from_secs(30);

fn unpacked(root: &Path) -> std::path::PathBuf {
    let status = Command::new("tar")
        .args(["-xzf", FIXTURE, "-C"])
        .arg(root)
        .status()
        .expect("tar runs");
    assert!(status.success(), "unpacking {FIXTURE}");
    root.join("old")
}

fn cli(broker: &Broker, args: &[&str]) -> String {
    let output = Command::new(BROOK)
        .args(args)
        .args(["--brokers", &broker.address])
        .output()
        .expect("the CLI runs");
    assert!(
        output.status.success(),
        "brook {args:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// Every record of the topic, key → (partition, offset, value).
fn read_all(broker: &Broker) -> BTreeMap<String, (i32, i64, String)> {
    let consumer = brook_tests::librdkafka::assigned_from_start(&broker.address, TOPIC, 3);
    let mut records = BTreeMap::new();
    let deadline = std::time::Instant::now() + WAIT;
    while records.len() < RECORDS && std::time::Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            let key = String::from_utf8(message.key().unwrap().to_vec()).unwrap();
            let value = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
            let earlier = records.insert(key, (message.partition(), message.offset(), value));
            assert!(earlier.is_none(), "a record read twice");
        }
    }
    records
}

fn check_topic(broker: &Broker) {
    let described = cli(broker, &["topic", "describe", TOPIC]);
    assert!(
        described.contains(&format!("TopicId: {TOPIC_ID}")),
        "{described}"
    );
    assert!(described.contains("PartitionCount: 3"), "{described}");
    assert!(
        described
            .lines()
            .any(|line| line.starts_with("retention.ms") && line.contains("604800001")),
        "{described}"
    );
    let consumer = brook_tests::librdkafka::assigned_from_start(&broker.address, TOPIC, 3);
    for (partition, end) in LOG_ENDS.iter().enumerate() {
        let watermarks = consumer
            .fetch_watermarks(TOPIC, partition as i32, WAIT)
            .unwrap();
        assert_eq!(watermarks, (0, *end), "partition {partition}");
    }
}

fn check_records(broker: &Broker) {
    let records = read_all(broker);
    assert_eq!(records.len(), RECORDS);
    for index in 0..RECORDS {
        let (_, _, value) = &records[&format!("key-{index}")];
        let expected = format!("value-{index}-{}", "x".repeat(500 + index % 100));
        assert_eq!(value, &expected, "key-{index}");
    }
}

fn check_committed(broker: &Broker) {
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", "fixture-group")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut partitions = TopicPartitionList::new();
    for partition in 0..3 {
        partitions.add_partition(TOPIC, partition);
    }
    let committed = consumer.committed_offsets(partitions, WAIT).unwrap();
    for (partition, offset) in COMMITTED.iter().enumerate() {
        assert_eq!(
            committed
                .find_partition(TOPIC, partition as i32)
                .unwrap()
                .offset(),
            Offset::Offset(*offset),
            "partition {partition}"
        );
    }
}

/// The producer ids of the batches of partition 0's last segment, as
/// `brook log dump` prints them.
fn producer_ids(data_dir: &Path) -> Vec<i64> {
    let directory = data_dir.join(format!("{TOPIC}-0"));
    let mut logs: Vec<_> = std::fs::read_dir(&directory)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|extension| extension == "log"))
        .collect();
    logs.sort();
    let output = Command::new(BROOK)
        .args(["log", "dump"])
        .arg(logs.last().unwrap())
        .output()
        .unwrap();
    String::from_utf8(output.stdout)
        .unwrap()
        .split_whitespace()
        .collect::<Vec<_>>()
        .windows(2)
        .filter(|pair| pair[0] == "producerId:")
        .map(|pair| pair[1].parse().unwrap())
        .collect()
}

#[test]
fn a_one_node_directory_from_before_the_quorum_keeps_everything() {
    let root = tempfile::tempdir().unwrap();
    let data_dir = unpacked(root.path());
    assert!(data_dir.join("brook-metadata").exists());
    assert!(!data_dir.join("__cluster_metadata-0").exists());
    let mut broker = Broker::start(BROOK, &data_dir, 2, &[]);
    assert!(
        data_dir.join("__cluster_metadata-0").is_dir(),
        "the quorum's log"
    );
    check_topic(&broker);
    check_records(&broker);
    check_committed(&broker);
    // A new idempotent producer gets an id past the block the one-node
    // broker had reserved: no id is handed out twice.
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    producer
        .send(
            BaseRecord::to(TOPIC)
                .partition(0)
                .key("after")
                .payload("upgrade"),
        )
        .unwrap();
    producer.flush(WAIT).unwrap();
    drop(producer);
    assert!(broker.stop(), "a clean stop");
    let ids = producer_ids(&data_dir);
    assert_eq!(ids.first(), Some(&0), "the fixture's producer");
    assert!(
        *ids.last().unwrap() >= RESERVED_PRODUCER_IDS,
        "a reused producer id: {ids:?}"
    );
    assert!(!data_dir.join("brook-producer-ids").exists());
    // Started again, it runs from its own metadata log.
    broker.restart();
    check_topic_after_restart(&broker);
    check_committed(&broker);
}

fn check_topic_after_restart(broker: &Broker) {
    let described = cli(broker, &["topic", "describe", TOPIC]);
    assert!(
        described.contains(&format!("TopicId: {TOPIC_ID}")),
        "{described}"
    );
    let consumer = brook_tests::librdkafka::assigned_from_start(&broker.address, TOPIC, 3);
    let watermarks = consumer.fetch_watermarks(TOPIC, 0, WAIT).unwrap();
    assert_eq!(
        watermarks,
        (0, LOG_ENDS[0] + 1),
        "the record produced after"
    );
}
