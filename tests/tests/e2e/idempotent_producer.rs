//! Idempotent producers (issue 6, acceptance 1; SPEC P3), from the client's
//! side: InitProducerId hands out producer ids that never repeat, a resent
//! batch (same producer id, epoch and sequence) is stored once and answered
//! with its original offsets, a sequence gap gets OUT_OF_ORDER_SEQUENCE_NUMBER
//! and an older epoch INVALID_PRODUCER_EPOCH, and all of it still holds after
//! the broker is killed with SIGKILL (or stopped cleanly) and restarted.

use std::net::TcpStream;
use std::time::Duration;

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use brook_tests::broker::Broker;
use brook_tests::deliveries::Deliveries;
use brook_tests::raw::{self, connect, exchange};
use bytes::Bytes;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, ListOffsetsRequest, ListOffsetsResponse,
    ProduceRequest, ProduceResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TOPIC: &str = "dedup";
const OUT_OF_ORDER_SEQUENCE_NUMBER: i16 = 45;
const INVALID_PRODUCER_EPOCH: i16 = 47;
const INVALID_RECORD: i16 = 87;
const INVALID_REQUEST: i16 = 42;

/// A broker whose checkpoint rounds (which record producer state) run every
/// `checkpoint_ms`.
fn start(dir: &std::path::Path, checkpoint_ms: u64) -> Broker {
    let interval = format!("log.flush.offset.checkpoint.interval.ms={checkpoint_ms}");
    Broker::start(BROOK, dir, 2, &["--set", &interval])
}

fn create_topic(stream: &mut TcpStream, partitions: i32) {
    raw::create_topic(stream, TOPIC, partitions);
}

fn init_producer_id(stream: &mut TcpStream, version: i16) -> (i64, i16) {
    let response: InitProducerIdResponse = exchange(
        stream,
        ApiKey::InitProducerId,
        version,
        &InitProducerIdRequest::default()
            .with_transactional_id(None)
            .with_transaction_timeout_ms(60_000)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1),
    );
    assert_eq!(response.error_code, 0, "{response:?}");
    (response.producer_id.0, response.producer_epoch)
}

fn now() -> TimestampMs {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    TimestampMs(since_epoch.as_millis() as i64)
}

/// An idempotent batch of `count` records, stamped now (a producer idle for
/// `producer.id.expiration.ms` by its timestamps would be forgotten).
fn batch(producer: (i64, i16), sequence: i32, count: usize) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..count)
        .map(|index| NewRecord::value(format!("seq-{}", sequence as i64 + index as i64), now()))
        .collect();
    encode_batch(
        &records,
        &BatchOptions {
            producer_id: producer.0,
            producer_epoch: producer.1,
            base_sequence: sequence,
            ..BatchOptions::default()
        },
    )
}

/// Produces `records` (acks=all) to partition 0; returns (error, base offset).
fn produce(stream: &mut TcpStream, records: Vec<u8>) -> (i16, i64) {
    let topic = TopicProduceData::default()
        .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
        .with_partition_data(vec![
            PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(Bytes::from(records))),
        ]);
    let response: ProduceResponse = exchange(
        stream,
        ApiKey::Produce,
        9,
        &ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![topic]),
    );
    let partition = &response.responses[0].partition_responses[0];
    (partition.error_code, partition.base_offset)
}

fn log_end(stream: &mut TcpStream) -> i64 {
    let topic = ListOffsetsTopic::default()
        .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
        .with_partitions(vec![
            ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1),
        ]);
    let response: ListOffsetsResponse = exchange(
        stream,
        ApiKey::ListOffsets,
        7,
        &ListOffsetsRequest::default()
            .with_replica_id(brook_tests::raw::CONSUMER)
            .with_topics(vec![topic]),
    );
    response.topics[0].partitions[0].offset
}

/// The acceptance sequence: three resends of one batch, then a gap.
/// Returns the producer; its last batch is (3, 2 records, offset 3).
fn resend_and_gap(stream: &mut TcpStream) -> (i64, i16) {
    let producer = init_producer_id(stream, 4);
    let first = batch(producer, 0, 3);
    assert_eq!(produce(stream, first.clone()), (0, 0));
    for _ in 0..3 {
        assert_eq!(
            produce(stream, first.clone()),
            (0, 0),
            "a resend answers with the original offsets"
        );
    }
    assert_eq!(log_end(stream), 3, "the resent batch is stored once");
    assert_eq!(produce(stream, batch(producer, 3, 2)), (0, 3));
    let (error, _) = produce(stream, batch(producer, 10, 1));
    assert_eq!(error, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(log_end(stream), 5);
    producer
}

/// The producer's last batch: first sequence, records, base offset.
type LastBatch = (i32, usize, i64);

/// After a restart: the last batch is still known as a duplicate, a gap is
/// still refused, and the next sequence appends. Returns the new last batch.
fn still_deduplicates(stream: &mut TcpStream, producer: (i64, i16), last: LastBatch) -> LastBatch {
    let (sequence, count, offset) = last;
    let end = offset + count as i64;
    let retry = batch(producer, sequence, count);
    assert_eq!(
        produce(stream, retry),
        (0, offset),
        "the retry after the restart is a duplicate"
    );
    assert_eq!(log_end(stream), end);
    let next = sequence + count as i32;
    let (error, _) = produce(stream, batch(producer, next + 1, 1));
    assert_eq!(error, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(produce(stream, batch(producer, next, 1)), (0, end));
    (next, 1, end)
}

#[test]
fn a_resent_batch_is_stored_once_and_a_gap_is_refused_across_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    // No checkpoint round runs before the kill: the state comes from
    // replaying the log.
    let mut broker = start(dir.path(), 600_000);
    let mut stream = connect(&broker);
    create_topic(&mut stream, 1);
    let producer = resend_and_gap(&mut stream);
    drop(stream);
    broker.kill();
    broker.restart();
    let mut stream = connect(&broker);
    still_deduplicates(&mut stream, producer, (3, 2, 3));
}

#[test]
fn producer_state_survives_a_kill_after_checkpoints_and_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = start(dir.path(), 100);
    let mut stream = connect(&broker);
    create_topic(&mut stream, 1);
    // Plain records before and after: replay must step over them.
    let plain = encode_batch(
        &[NewRecord::value("plain", TimestampMs(1))],
        &BatchOptions::default(),
    );
    assert_eq!(produce(&mut stream, plain.clone()), (0, 0));
    let producer = init_producer_id(&mut stream, 4);
    assert_eq!(produce(&mut stream, batch(producer, 0, 2)), (0, 1));
    // Checkpoint rounds (every 100 ms) record the state in a snapshot file ...
    let partition_dir = broker.data_dir().join(format!("{TOPIC}-0"));
    let snapshots = || {
        std::fs::read_dir(&partition_dir)
            .unwrap()
            .filter(|entry| {
                entry
                    .as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".snapshot")
            })
            .count()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while snapshots() == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "no checkpoint round wrote a producer snapshot"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // ... and what follows it is replayed after the kill.
    assert_eq!(produce(&mut stream, plain.clone()), (0, 3));
    assert_eq!(produce(&mut stream, batch(producer, 2, 2)), (0, 4));
    drop(stream);
    broker.kill();
    broker.restart();
    let mut stream = connect(&broker);
    let last = still_deduplicates(&mut stream, producer, (2, 2, 4));
    drop(stream);
    assert!(broker.stop(), "a clean stop");
    broker.restart();
    let mut stream = connect(&broker);
    still_deduplicates(&mut stream, producer, last);
}

#[test]
fn an_older_epoch_is_fenced_and_multi_batch_idempotent_appends_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), 600_000);
    let mut stream = connect(&broker);
    create_topic(&mut stream, 1);
    let (id, _) = init_producer_id(&mut stream, 4);
    assert_eq!(produce(&mut stream, batch((id, 1), 0, 1)), (0, 0));
    let (error, _) = produce(&mut stream, batch((id, 0), 1, 1));
    assert_eq!(error, INVALID_PRODUCER_EPOCH);
    // A new epoch must start at sequence 0.
    let (error, _) = produce(&mut stream, batch((id, 2), 5, 1));
    assert_eq!(error, OUT_OF_ORDER_SEQUENCE_NUMBER);
    assert_eq!(produce(&mut stream, batch((id, 2), 0, 1)), (0, 1));
    // A negative sequence from an idempotent producer is malformed.
    let (error, _) = produce(&mut stream, batch((id, 2), -5, 1));
    assert_eq!(error, INVALID_RECORD);
    let mut two = batch((id, 2), 1, 1);
    two.extend(batch((id, 2), 2, 1));
    let (error, _) = produce(&mut stream, two);
    assert_eq!(error, INVALID_RECORD);
    assert_eq!(log_end(&mut stream), 2, "nothing refused was appended");
}

#[test]
fn producer_ids_never_repeat_across_shards_and_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = start(dir.path(), 600_000);
    let mut seen = std::collections::BTreeSet::new();
    for version in 0..=5 {
        // New connections land on either shard.
        for _ in 0..4 {
            let mut stream = connect(&broker);
            let (id, epoch) = init_producer_id(&mut stream, version);
            assert_eq!(epoch, 0);
            assert!(id >= 0 && seen.insert(id), "id {id} handed out twice");
        }
    }
    // An empty transactional id is malformed, as in Kafka.
    let mut stream = connect(&broker);
    let response: InitProducerIdResponse = exchange(
        &mut stream,
        ApiKey::InitProducerId,
        4,
        &InitProducerIdRequest::default()
            .with_transactional_id(Some(StrBytes::from_static_str("").into()))
            .with_transaction_timeout_ms(60_000),
    );
    assert_eq!(response.error_code, INVALID_REQUEST);
    drop(stream);
    broker.kill();
    broker.restart();
    let mut stream = connect(&broker);
    let (id, _) = init_producer_id(&mut stream, 4);
    assert!(
        id > *seen.last().unwrap(),
        "after a crash ids continue past every id handed out"
    );
}

#[test]
fn librdkafka_idempotent_producer_delivers_each_record_once_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path(), 600_000);
    let mut stream = connect(&broker);
    create_topic(&mut stream, 3);
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("enable.idempotence", "true")
        .set("linger.ms", "2")
        .set("message.timeout.ms", "30000")
        .create_with_context(Deliveries::default())
        .expect("a producer");
    const RECORDS: usize = 3_000;
    for index in 0..RECORDS {
        let key = format!("k{}", index % 3);
        let value = format!("{index}");
        let record = BaseRecord::to(TOPIC)
            .key(&key)
            .payload(&value)
            .partition((index % 3) as i32);
        brook_tests::librdkafka::send_when_queued(&producer, record);
    }
    producer.flush(Duration::from_secs(30)).expect("flush");
    assert!(producer.context().errors.lock().unwrap().is_empty());
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", "idempotence-check")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("a consumer");
    consumer.subscribe(&[TOPIC]).unwrap();
    let mut per_partition: [Vec<usize>; 3] = Default::default();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut received = 0;
    while received < RECORDS && std::time::Instant::now() < deadline {
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("a record");
            let value: usize = std::str::from_utf8(message.payload().unwrap())
                .unwrap()
                .parse()
                .unwrap();
            per_partition[message.partition() as usize].push(value);
            received += 1;
        }
    }
    for (partition, values) in per_partition.iter().enumerate() {
        let expected: Vec<usize> = (0..RECORDS)
            .filter(|index| index % 3 == partition)
            .collect();
        assert_eq!(
            values, &expected,
            "partition {partition}: every record once, in order"
        );
    }
}
