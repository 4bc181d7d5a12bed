//! A disk that fills up under a producer (DESIGN "Known traps": a full
//! disk). On a real, small ext4 filesystem that the test makes and
//! loop-mounts (so the test needs root, as CI has), holding the data
//! directory and the broker's own log: a librdkafka producer with acks=all
//! writes until the broker refuses with KAFKA_STORAGE_ERROR; the broker is
//! stopped (SIGTERM, or kill -9), space is freed, and it starts again. Every
//! record that was acknowledged must be there, at the offset it was
//! acknowledged with, and the logs must take appends again.
//!
//! Kafka's model: a log directory that fails goes offline, the broker keeps
//! serving what it can, and after a restart every acknowledged record is
//! there.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::deliveries::Deliveries;
use brook_tests::librdkafka::{assigned_from_start, send_when_queued};
use brook_tests::loop_fs::LoopFilesystem;
use brook_tests::raw::{connect, create_topic};
use rdkafka::ClientConfig;
use rdkafka::consumer::Consumer;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TOPIC: &str = "filling";
const PARTITIONS: i32 = 2;
/// The filesystem's size (the report's 300 MB): some 16 segments' worth.
const FILESYSTEM_BYTES: u64 = 300 << 20;
/// A file written before the broker starts and deleted once it stopped: the
/// space an operator frees.
const SPARE_BYTES: usize = 24 << 20;
const SEGMENT_BYTES: &str = "log.segment.bytes=16777216";
/// Each record's value: ~120,000 of them fill the disk, as in the report.
const VALUE_BYTES: usize = 2_500;
/// Records sent between looks at the delivery reports.
const ROUND_RECORDS: usize = 5_000;
/// The producer gives up when this many records went out without the disk
/// filling (the filesystem holds fewer).
const RECORDS_MAX: usize = 2 * FILESYSTEM_BYTES as usize / VALUE_BYTES;

fn value_of(key: &str) -> Vec<u8> {
    let mut value = format!("{key}:").into_bytes();
    value.resize(VALUE_BYTES, b'0' + (key.len() % 10) as u8);
    value
}

fn producer(broker: &Broker) -> BaseProducer<Deliveries> {
    ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("linger.ms", "5")
        .set("retries", "2")
        .set("retry.backoff.ms", "100")
        .set("message.timeout.ms", "20000")
        .create_with_context(Deliveries::default())
        .expect("a producer")
}

fn send(producer: &BaseProducer<Deliveries>, key: &str, partition: i32) {
    let value = value_of(key);
    let record = BaseRecord::to(TOPIC)
        .key(key)
        .payload(&value)
        .partition(partition);
    send_when_queued(producer, record);
}

/// Produces until the broker refuses records; returns where each
/// acknowledged record landed (key → partition, offset) and the errors.
fn fill(broker: &Broker) -> (HashMap<String, (i32, i64)>, Vec<String>) {
    let producer = producer(broker);
    let mut sent = 0;
    while sent < RECORDS_MAX {
        for _ in 0..ROUND_RECORDS {
            send(&producer, &format!("k{sent}"), sent as i32 % PARTITIONS);
            sent += 1;
        }
        producer.flush(Duration::from_secs(60)).expect("flush");
        if !producer.context().errors.lock().unwrap().is_empty() {
            break;
        }
    }
    let deliveries = producer.context();
    let delivered = deliveries.delivered.lock().unwrap().clone();
    let errors = deliveries.errors.lock().unwrap().clone();
    (delivered, errors)
}

/// Every record of every partition, from the log start: (partition,
/// offset) → (key, value).
fn consume_all(broker: &Broker) -> HashMap<(i32, i64), (String, Vec<u8>)> {
    let consumer = assigned_from_start(&broker.address, TOPIC, PARTITIONS);
    let ends: Vec<i64> = (0..PARTITIONS)
        .map(|partition| {
            consumer
                .fetch_watermarks(TOPIC, partition, Duration::from_secs(10))
                .expect("watermarks")
                .1
        })
        .collect();
    let mut records = HashMap::new();
    let mut next = vec![0i64; PARTITIONS as usize];
    let deadline = Instant::now() + Duration::from_secs(90);
    while next.iter().zip(&ends).any(|(next, end)| next < end) && Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(200)) else {
            continue;
        };
        let message = message.expect("a record");
        let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
        let value = message.payload().unwrap_or_default().to_vec();
        next[message.partition() as usize] = message.offset() + 1;
        records.insert((message.partition(), message.offset()), (key, value));
    }
    records
}

fn fill_stop_free_and_restart(stop: impl FnOnce(&mut Broker)) {
    let filesystem = LoopFilesystem::new(FILESYSTEM_BYTES);
    let spare = filesystem.mount().join("spare");
    std::fs::write(&spare, vec![1u8; SPARE_BYTES]).unwrap();
    let data_dir = filesystem.mount().join("data");
    let mut broker = Broker::start(BROOK, &data_dir, 2, &["--set", SEGMENT_BYTES]);
    create_topic(&mut connect(&broker), TOPIC, PARTITIONS);
    let (delivered, errors) = fill(&broker);
    assert!(
        !errors.is_empty(),
        "{} records acknowledged on a {FILESYSTEM_BYTES}-byte filesystem without an error",
        delivered.len()
    );
    assert!(
        errors
            .iter()
            .all(|error| error.contains("KafkaStorageError")),
        "the broker answers a full disk with KAFKA_STORAGE_ERROR: {:?}",
        &errors[..errors.len().min(5)]
    );
    assert!(!delivered.is_empty(), "records were acknowledged before");
    stop(&mut broker);
    std::fs::remove_file(&spare).unwrap();
    broker.restart();
    let stored = consume_all(&broker);
    let mut missing = Vec::new();
    for (key, (partition, offset)) in &delivered {
        match stored.get(&(*partition, *offset)) {
            Some((stored_key, value)) if stored_key == key && *value == value_of(key) => {}
            other => missing.push((key.clone(), *partition, *offset, other.map(|(k, _)| k))),
        }
    }
    missing.sort();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged records lost or changed, e.g. {:?}\n--- broker log\n{}",
        missing.len(),
        delivered.len(),
        &missing[..missing.len().min(10)],
        broker.log()
    );
    // The logs take appends again.
    let producer = producer(&broker);
    for index in 0..20 {
        send(&producer, &format!("after{index}"), index % PARTITIONS);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    let errors = producer.context().errors.lock().unwrap().clone();
    assert!(
        errors.is_empty(),
        "appends after the restart: {errors:?}\n--- broker log\n{}",
        broker.log()
    );
    assert_eq!(producer.context().delivered.lock().unwrap().len(), 20);
}

/// How long a broker with offline logs may take to stop on SIGTERM.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn a_full_disk_loses_no_acknowledged_record_across_a_clean_stop() {
    fill_stop_free_and_restart(|broker| {
        assert!(
            broker.stop_within(STOP_TIMEOUT).is_some(),
            "SIGTERM stops a broker whose logs went offline"
        );
    });
}

#[test]
fn a_full_disk_loses_no_acknowledged_record_across_a_kill() {
    fill_stop_free_and_restart(Broker::kill);
}
