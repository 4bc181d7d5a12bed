//! The single-node broker with a real client (librdkafka via `rdkafka`):
//! produce and consume across shards, admin operations, ListOffsets, and
//! long-polling fetches.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::deliveries::Deliveries;
use brook_tests::librdkafka::assigned_from_start;
use futures::executor::block_on;
use rdkafka::admin::{
    AdminClient, AdminOptions, NewPartitions, NewTopic, ResourceSpecifier, TopicReplication,
};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TIMEOUT: Duration = Duration::from_secs(30);

fn admin(broker: &Broker) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .create()
        .expect("an admin client")
}

fn producer(broker: &Broker, acks: &str) -> BaseProducer<Deliveries> {
    ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("acks", acks)
        .set("enable.idempotence", "false")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create_with_context(Deliveries::default())
        .expect("a producer")
}

/// Sends, waiting for room in the producer's queue when it is full.
fn send(producer: &BaseProducer<Deliveries>, mut record: BaseRecord<'_, str, [u8]>) {
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((_, returned)) => {
                producer.poll(Duration::from_millis(10));
                record = returned;
            }
        }
    }
}

fn create_topic(broker: &Broker, name: &str, partitions: i32, configs: &[(&str, &str)]) {
    let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    for (key, value) in configs {
        topic = topic.set(key, value);
    }
    let results = block_on(admin(broker).create_topics([&topic], &AdminOptions::new()))
        .expect("CreateTopics");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

#[test]
fn keyed_records_with_headers_round_trip_across_shards() {
    const RECORDS: usize = 100_000;
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    create_topic(&broker, "events", 8, &[]);
    let producer = producer(&broker, "all");
    let base_time = 1_700_000_000_000i64;
    for i in 0..RECORDS {
        let key = format!("key-{i}");
        let value = format!("value-{i}-{}", "x".repeat(i % 50)).into_bytes();
        let headers = OwnedHeaders::new().insert(Header {
            key: "index",
            value: Some(&i.to_string()),
        });
        let record = BaseRecord::to("events")
            .key(key.as_str())
            .payload(&value[..])
            .headers(headers)
            .timestamp(base_time + i as i64);
        send(&producer, record);
    }
    producer.flush(TIMEOUT).expect("flush");
    let deliveries = producer.context().clone();
    assert!(
        deliveries.errors.lock().unwrap().is_empty(),
        "{:?}",
        deliveries.errors.lock().unwrap()
    );
    let delivered = deliveries.delivered.lock().unwrap().clone();
    assert_eq!(delivered.len(), RECORDS);
    let used: std::collections::HashSet<i32> = delivered
        .values()
        .map(|(partition, _)| *partition)
        .collect();
    assert_eq!(
        used.len(),
        8,
        "keys spread over every partition (both shards)"
    );

    let consumer = assigned_from_start(&broker.address, "events", 8);
    let mut seen: HashMap<i32, i64> = HashMap::new();
    let mut count = 0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while count < RECORDS && Instant::now() < deadline {
        let Some(message) = consumer.poll(Duration::from_millis(500)) else {
            continue;
        };
        let message = message.expect("a message");
        let key = std::str::from_utf8(message.key().unwrap()).unwrap();
        let index: usize = key.trim_start_matches("key-").parse().unwrap();
        assert_eq!(
            delivered[key],
            (message.partition(), message.offset()),
            "{key} is where it was acknowledged"
        );
        let previous = seen.insert(message.partition(), message.offset());
        assert!(
            previous.is_none_or(|previous| previous + 1 == message.offset()),
            "offsets in order without gaps"
        );
        assert_eq!(
            message.payload().unwrap(),
            format!("value-{index}-{}", "x".repeat(index % 50)).as_bytes()
        );
        let header = message.headers().expect("headers").get(0);
        assert_eq!(
            (header.key, header.value),
            ("index", Some(index.to_string().as_bytes()))
        );
        assert_eq!(
            message.timestamp().to_millis(),
            Some(base_time + index as i64)
        );
        count += 1;
    }
    assert_eq!(count, RECORDS, "every record came back");
}

#[test]
fn admin_operations_and_auto_creation() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let admin = admin(&broker);
    create_topic(
        &broker,
        "configured",
        3,
        &[("retention.ms", "3600000"), ("segment.bytes", "1048576")],
    );
    let duplicate = NewTopic::new("configured", 1, TopicReplication::Fixed(1));
    let results = block_on(admin.create_topics([&duplicate], &AdminOptions::new())).unwrap();
    assert!(results[0].is_err(), "creating an existing topic fails");
    let unsupported = NewTopic::new("strange", 1, TopicReplication::Fixed(1))
        .set("remote.storage.enable", "true");
    assert!(
        block_on(admin.create_topics([&unsupported], &AdminOptions::new())).unwrap()[0].is_err(),
        "unsupported configs are refused"
    );

    let described = block_on(admin.describe_configs(
        [&ResourceSpecifier::Topic("configured")],
        &AdminOptions::new(),
    ))
    .unwrap();
    let resource = described[0].as_ref().expect("DescribeConfigs");
    let retention = resource.get("retention.ms").expect("retention.ms");
    assert_eq!(retention.value.as_deref(), Some("3600000"));
    assert_eq!(
        resource
            .get("segment.bytes")
            .and_then(|entry| entry.value.as_deref()),
        Some("1048576")
    );
    assert!(!retention.is_default);
    assert!(
        resource
            .get("cleanup.policy")
            .is_some_and(|entry| entry.is_default)
    );

    let grown = block_on(
        admin.create_partitions([&NewPartitions::new("configured", 5)], &AdminOptions::new()),
    )
    .unwrap();
    assert!(grown[0].is_ok(), "{grown:?}");
    let shrunk = block_on(
        admin.create_partitions([&NewPartitions::new("configured", 2)], &AdminOptions::new()),
    )
    .unwrap();
    assert!(shrunk[0].is_err(), "partitions cannot shrink");
    let metadata = admin
        .inner()
        .fetch_metadata(Some("configured"), TIMEOUT)
        .unwrap_or_else(|error| panic!("{error}: {}", broker.log()));
    assert_eq!(metadata.topics()[0].partitions().len(), 5);

    // A producer to an unknown topic creates it (auto.create.topics.enable).
    let producer = producer(&broker, "1");
    send(
        &producer,
        BaseRecord::to("auto-created").key("k").payload(&b"v"[..]),
    );
    producer.flush(TIMEOUT).unwrap();
    assert!(producer.context().errors.lock().unwrap().is_empty());
    let metadata = admin
        .inner()
        .fetch_metadata(Some("auto-created"), TIMEOUT)
        .unwrap();
    assert_eq!(metadata.topics()[0].partitions().len(), 1);

    let deleted =
        block_on(admin.delete_topics(&["configured", "auto-created"], &AdminOptions::new()))
            .unwrap();
    assert!(deleted.iter().all(Result::is_ok), "{deleted:?}");
    let metadata = admin
        .inner()
        .fetch_metadata(None, TIMEOUT)
        .unwrap_or_else(|error| panic!("{error}: {}", broker.log()));
    assert!(
        metadata
            .topics()
            .iter()
            .all(|topic| topic.name() != "configured" && topic.name() != "auto-created")
    );
    assert!(
        !dir.path().join("configured-0").exists(),
        "deleted partitions leave no files"
    );
}

#[test]
fn list_offsets_match_what_was_produced() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 1, &[]);
    create_topic(&broker, "timed", 1, &[]);
    let producer = producer(&broker, "all");
    for i in 0..100i64 {
        let key = format!("key-{i}");
        send(
            &producer,
            BaseRecord::to("timed")
                .key(key.as_str())
                .payload(&b"v"[..])
                .timestamp(1_000_000 + i * 10),
        );
    }
    producer.flush(TIMEOUT).unwrap();
    let consumer = assigned_from_start(&broker.address, "timed", 1);
    let (low, high) = consumer.fetch_watermarks("timed", 0, TIMEOUT).unwrap();
    assert_eq!((low, high), (0, 100));
    let mut wanted = TopicPartitionList::new();
    for (partition, timestamp) in [(0, 1_000_000i64), (0, 1_000_505), (0, 1_000_990)] {
        let _ = partition;
        wanted
            .add_partition_offset("timed", 0, Offset::Offset(timestamp))
            .unwrap();
        let found = consumer.offsets_for_times(wanted.clone(), TIMEOUT).unwrap();
        let offset = found.find_partition("timed", 0).unwrap().offset();
        let expected = (timestamp - 1_000_000 + 9) / 10;
        assert_eq!(
            offset,
            Offset::Offset(expected),
            "first record at or after {timestamp}"
        );
        wanted = TopicPartitionList::new();
    }
    wanted
        .add_partition_offset("timed", 0, Offset::Offset(2_000_000))
        .unwrap();
    let beyond = consumer.offsets_for_times(wanted, TIMEOUT).unwrap();
    assert_eq!(
        beyond.find_partition("timed", 0).unwrap().offset(),
        Offset::End,
        "nothing that late"
    );
}

/// How long the consumer's fetches may wait at the broker for data.
const PARKED_WAIT: Duration = Duration::from_secs(30);

#[test]
fn a_waiting_fetch_is_answered_by_the_produce_not_its_wait() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    create_topic(&broker, "polled", 1, &[]);
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", "brook-e2e")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", PARKED_WAIT.as_millis().to_string())
        .set("fetch.min.bytes", "1")
        .create()
        .unwrap();
    let mut assignment = TopicPartitionList::new();
    assignment
        .add_partition_offset("polled", 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&assignment).unwrap();
    let producer = producer(&broker, "1");
    // Connected and with metadata, so the timing below is the broker's.
    producer
        .client()
        .fetch_metadata(Some("polled"), TIMEOUT)
        .unwrap();
    // Each fetch may wait PARKED_WAIT for data: a broker that answers a
    // parked fetch on the append delivers the record long before that, one
    // that answers it when its wait runs out does not. How soon is a
    // figure, printed here and measured by `brook bench` (end-to-end), not
    // asserted.
    for round in 0..3 {
        // Let the consumer park a fetch at the broker.
        assert!(consumer.poll(Duration::from_millis(700)).is_none());
        let payload = format!("now-{round}");
        let sent = Instant::now();
        send(
            &producer,
            BaseRecord::to("polled")
                .key("k")
                .payload(payload.as_bytes()),
        );
        // Serve the producer without blocking in flush(), whose own polling
        // interval would dominate the measured figure.
        let message = loop {
            producer.poll(Duration::ZERO);
            match consumer.poll(Duration::from_millis(2)) {
                Some(message) => break message.unwrap(),
                None if sent.elapsed() > PARKED_WAIT / 2 => {
                    panic!("the parked fetch was not answered when the record came")
                }
                None => {}
            }
        };
        let woken_after = sent.elapsed();
        assert_eq!(message.payload(), Some(payload.as_bytes()));
        println!("round {round}: parked fetch answered {woken_after:?} after the send");
    }
    producer.flush(TIMEOUT).unwrap();
}
