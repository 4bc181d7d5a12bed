//! A compacted topic (`cleanup.policy=compact`, S7) from a real client's
//! side: librdkafka writes many values of a few keys, the broker's cleaner
//! compacts the partition in the background, and a consumer from the
//! beginning then sees every key's latest value, at its original offset,
//! while the partition takes far less disk. A record without a key is
//! refused with INVALID_RECORD, as Kafka refuses it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use futures::executor::block_on;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TIMEOUT: Duration = Duration::from_secs(30);
const TOPIC: &str = "latest-values";
const RECORDS: usize = 10_000;
const KEYS: usize = 100;
/// Records younger than this are not cleaned, so the size before cleaning
/// can be measured once everything is written.
const MIN_COMPACTION_LAG_MS: u64 = 3_000;

/// Delivery reports: key → offset of its last delivered value, and errors.
#[derive(Clone, Default)]
struct Deliveries {
    offsets: Arc<Mutex<BTreeMap<String, i64>>>,
    errors: Arc<Mutex<Vec<KafkaError>>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(message) => {
                let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
                let mut offsets = self.offsets.lock().unwrap();
                let last = offsets.entry(key).or_insert(-1);
                *last = (*last).max(message.offset());
            }
            Err((error, _)) => self.errors.lock().unwrap().push(error.clone()),
        }
    }
}

fn producer(broker: &Broker) -> BaseProducer<Deliveries> {
    ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("max.in.flight.requests.per.connection", "1")
        .set("linger.ms", "5")
        // Batches well below segment.bytes, so the partition has many
        // segments and only the active one stays uncleaned.
        .set("batch.size", "4096")
        .set("message.timeout.ms", "30000")
        .create_with_context(Deliveries::default())
        .expect("a producer")
}

fn create_compacted_topic(broker: &Broker) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .create()
        .expect("an admin client");
    let lag = MIN_COMPACTION_LAG_MS.to_string();
    let topic = NewTopic::new(TOPIC, 1, TopicReplication::Fixed(1))
        .set("cleanup.policy", "compact")
        .set("segment.bytes", "16384")
        .set("min.cleanable.dirty.ratio", "0.1")
        .set("min.compaction.lag.ms", &lag);
    let results =
        block_on(admin.create_topics([&topic], &AdminOptions::new())).expect("CreateTopics");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// Bytes of the partition's segment files.
fn log_bytes(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| entry.ok())
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".log"))
        .map(|entry| entry.metadata().map_or(0, |meta| meta.len()))
        .sum()
}

/// Every record of the partition from the beginning up to its high
/// watermark: `(offset, key, value)`.
fn consume_all(broker: &Broker) -> Vec<(i64, String, String)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", "compaction-reader")
        .set("enable.auto.commit", "false")
        .create()
        .expect("a consumer");
    let (_, high) = consumer
        .fetch_watermarks(TOPIC, 0, TIMEOUT)
        .expect("watermarks");
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset(TOPIC, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let mut records = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    while records
        .last()
        .is_none_or(|(offset, _, _)| *offset < high - 1)
    {
        assert!(
            Instant::now() < deadline,
            "consumed {} records",
            records.len()
        );
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = message.expect("a record");
        let text = |bytes: Option<&[u8]>| String::from_utf8(bytes.unwrap().to_vec()).unwrap();
        records.push((
            message.offset(),
            text(message.key()),
            text(message.payload()),
        ));
    }
    records
}

#[test]
fn a_consumer_sees_each_keys_latest_value_after_the_cleaner_ran() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        BROOK,
        dir.path(),
        2,
        &["--set", "log.cleaner.backoff.ms=200"],
    );
    create_compacted_topic(&broker);
    let producer = producer(&broker);
    let mut latest = BTreeMap::new();
    for index in 0..RECORDS {
        let key = format!("key-{:03}", index % KEYS);
        let value = format!("value-{index}-{}", "v".repeat(40));
        let record = BaseRecord::to(TOPIC)
            .key(key.as_str())
            .payload(value.as_str());
        producer
            .send(record)
            .map_err(|(error, _)| error)
            .expect("queued");
        producer.poll(Duration::ZERO);
        latest.insert(key, value);
    }
    producer.flush(TIMEOUT).expect("flush");
    let deliveries = producer.context().clone();
    assert!(deliveries.errors.lock().unwrap().is_empty());
    let partition_dir = dir.path().join(format!("{TOPIC}-0"));
    let before = log_bytes(&partition_dir);
    assert!(before > 500_000, "{before} bytes written");

    // The cleaner waits out min.compaction.lag.ms, then compacts.
    let deadline = Instant::now() + Duration::from_millis(MIN_COMPACTION_LAG_MS) + TIMEOUT;
    while log_bytes(&partition_dir) * 5 > before {
        assert!(
            Instant::now() < deadline,
            "not compacted:\n{}",
            broker.log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let records = consume_all(&broker);
    assert!(
        records.len() < RECORDS / 5,
        "{} records left",
        records.len()
    );
    assert!(records.windows(2).all(|pair| pair[0].0 < pair[1].0));
    let mut seen = BTreeMap::new();
    for (offset, key, value) in &records {
        seen.insert(key.clone(), (*offset, value.clone()));
    }
    let offsets = deliveries.offsets.lock().unwrap().clone();
    for (key, value) in &latest {
        assert_eq!(
            seen.get(key),
            Some(&(offsets[key], value.clone())),
            "{key}'s latest value at its original offset"
        );
    }

    // A record without a key is refused.
    let record: BaseRecord<'_, str, str> = BaseRecord::to(TOPIC).payload("no key");
    producer
        .send(record)
        .map_err(|(error, _)| error)
        .expect("queued");
    producer.flush(TIMEOUT).expect("flush");
    let errors = deliveries.errors.lock().unwrap().clone();
    assert!(
        matches!(
            errors.as_slice(),
            [KafkaError::MessageProduction(
                RDKafkaErrorCode::InvalidRecord
            )]
        ),
        "{errors:?}"
    );
}
