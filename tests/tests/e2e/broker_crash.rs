//! kill -9 during acks=all produce: after a restart every acknowledged record
//! is at the offset it was acknowledged with, offsets have no gaps, and new
//! records continue right after the recovered end.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use futures::executor::block_on;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer, ProducerContext};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const PARTITIONS: i32 = 4;

#[derive(Clone, Default)]
struct Acknowledged(Arc<Mutex<HashMap<(i32, i64), String>>>);

impl ClientContext for Acknowledged {}

impl ProducerContext for Acknowledged {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Ok(message) = result {
            let value = String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned();
            self.0
                .lock()
                .unwrap()
                .insert((message.partition(), message.offset()), value);
        }
    }
}

fn acks_all_producer(broker: &Broker) -> BaseProducer<Acknowledged> {
    ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("linger.ms", "1")
        .set("message.timeout.ms", "5000")
        .create_with_context(Acknowledged::default())
        .unwrap()
}

/// Every record of every partition, by (partition, offset).
fn consume_all(broker: &Broker) -> HashMap<(i32, i64), String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", "brook-e2e")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut ends = HashMap::new();
    let mut assignment = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        let (_, high) = consumer
            .fetch_watermarks("durable", partition, Duration::from_secs(30))
            .unwrap();
        ends.insert(partition, high);
        assignment
            .add_partition_offset("durable", partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let total: i64 = ends.values().sum();
    let mut records = HashMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while (records.len() as i64) < total && Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.unwrap();
            let value = String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned();
            records.insert((message.partition(), message.offset()), value);
        }
    }
    for (partition, end) in ends {
        for offset in 0..end {
            assert!(
                records.contains_key(&(partition, offset)),
                "partition {partition} has a gap at {offset} (end {end})"
            );
        }
    }
    records
}

#[test]
fn acknowledged_records_survive_kill_9_during_acks_all_produce() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .create()
        .unwrap();
    let topic = NewTopic::new("durable", PARTITIONS, TopicReplication::Fixed(1))
        .set("segment.bytes", "65536");
    assert!(block_on(admin.create_topics([&topic], &AdminOptions::new())).unwrap()[0].is_ok());
    drop(admin);

    let producer = acks_all_producer(&broker);
    let mut sent = 0u64;
    while producer.context().0.lock().unwrap().len() < 3_000 {
        let value = format!("before-{sent}");
        let key = sent.to_string();
        if producer
            .send(
                BaseRecord::to("durable")
                    .key(key.as_str())
                    .payload(value.as_str()),
            )
            .is_ok()
        {
            sent += 1;
        }
        producer.poll(Duration::from_millis(0));
    }
    // Keep producing while the broker dies.
    for _ in 0..500 {
        let value = format!("before-{sent}");
        let key = sent.to_string();
        let _ = producer.send(
            BaseRecord::to("durable")
                .key(key.as_str())
                .payload(value.as_str()),
        );
        sent += 1;
    }
    broker.kill();
    producer.poll(Duration::from_millis(100));
    let acknowledged = producer.context().0.lock().unwrap().clone();
    drop(producer);

    broker.restart();
    let recovered = consume_all(&broker);
    for (place, value) in &acknowledged {
        assert_eq!(
            recovered.get(place),
            Some(value),
            "acknowledged record at {place:?}"
        );
    }
    let ends: HashMap<i32, i64> = (0..PARTITIONS)
        .map(|partition| {
            (
                partition,
                recovered.keys().filter(|(p, _)| *p == partition).count() as i64,
            )
        })
        .collect();

    let producer = acks_all_producer(&broker);
    for i in 0..100 {
        let value = format!("after-{i}");
        let key = format!("after-{i}");
        producer
            .send(
                BaseRecord::to("durable")
                    .key(key.as_str())
                    .payload(value.as_str()),
            )
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let after = producer.context().0.lock().unwrap().clone();
    assert_eq!(after.len(), 100, "every new record is acknowledged");
    for (partition, offset) in after.keys() {
        assert!(
            *offset >= ends[partition],
            "new offsets continue after the recovered end (partition {partition})"
        );
    }
    let everything = consume_all(&broker);
    assert_eq!(
        everything.len(),
        recovered.len() + 100,
        "no offset is used twice"
    );
    assert!(broker.stop(), "a clean SIGTERM shutdown");
}
