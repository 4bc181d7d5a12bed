//! Consumer reads prepared one fetch ahead (shards' `fetch/prepared.rs`):
//! a consumer reading sealed segments is answered from reads its
//! connection's shard had made ready, and reads every record once, in
//! order; a prepared read is never the answer once the log changed under
//! it (DeleteRecords moving the log start, the topic deleted and made
//! again), where Kafka's answer is OFFSET_OUT_OF_RANGE. Over raw requests,
//! so that the test chooses each fetch's offset and limits.

use std::net::TcpStream;
use std::time::Duration;

use brook_tests::broker::Broker;
use brook_tests::raw::{self, connect, exchange};
use brook_tests::scrape::{self, summed};
use bytes::Bytes;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, DeleteRecordsRequest, DeleteRecordsResponse, FetchRequest, FetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TOPIC: &str = "ahead";
/// With two shards, the partitions live on both: some reads cross shards.
const PARTITIONS: i32 = 4;
const BATCHES: usize = 40;
const RECORDS_PER_BATCH: usize = 10;
/// Small segments, so that most of each partition is sealed and read as
/// file ranges.
const SEGMENT_BYTES: &str = "16384";
/// Room for a few batches per partition per fetch.
const PARTITION_MAX_BYTES: i32 = 4096;
const OFFSET_OUT_OF_RANGE: i16 = 1;

fn topic_name() -> TopicName {
    TopicName(StrBytes::from_static_str(TOPIC))
}

/// The topic with small segments, each partition holding [`BATCHES`]
/// batches of [`RECORDS_PER_BATCH`] records (offsets 0..400).
fn create_filled_topic(stream: &mut TcpStream) {
    raw::create(
        stream,
        CreatableTopic::default()
            .with_name(topic_name())
            .with_num_partitions(PARTITIONS)
            .with_replication_factor(1)
            .with_configs(vec![
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("segment.bytes"))
                    .with_value(Some(StrBytes::from_static_str(SEGMENT_BYTES))),
            ]),
    );
    for partition in 0..PARTITIONS {
        for _ in 0..BATCHES {
            raw::produce_filler(stream, TOPIC, partition, RECORDS_PER_BATCH, 100);
        }
    }
}

/// One partition's answer: its error code and the record bytes.
struct Answer {
    error_code: i16,
    records: Bytes,
}

/// Fetches each partition at its offset in `positions` (v12, no wait).
fn fetch(stream: &mut TcpStream, positions: &[(i32, i64)]) -> Vec<Answer> {
    let partitions = positions
        .iter()
        .map(|&(partition, offset)| {
            FetchPartition::default()
                .with_partition(partition)
                .with_fetch_offset(offset)
                .with_partition_max_bytes(PARTITION_MAX_BYTES)
        })
        .collect();
    let request = FetchRequest::default()
        .with_min_bytes(1)
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(topic_name())
                .with_partitions(partitions),
        ]);
    let response: FetchResponse = exchange(stream, ApiKey::Fetch, 12, &request);
    let answers = &response.responses[0].partitions;
    positions
        .iter()
        .map(|&(partition, _)| {
            let answer = answers
                .iter()
                .find(|answer| answer.partition_index == partition)
                .expect("every partition asked is answered");
            Answer {
                error_code: answer.error_code,
                records: answer.records.clone().unwrap_or_default(),
            }
        })
        .collect()
}

/// The (base offset, next offset) of each whole batch in `records`.
fn batches(records: &[u8]) -> Vec<(i64, i64)> {
    let mut found = Vec::new();
    let mut at = 0;
    while at + 27 <= records.len() {
        let base = i64::from_be_bytes(records[at..at + 8].try_into().unwrap());
        let length = i32::from_be_bytes(records[at + 8..at + 12].try_into().unwrap()) as usize;
        let last_delta = i32::from_be_bytes(records[at + 23..at + 27].try_into().unwrap());
        found.push((base, base + i64::from(last_delta) + 1));
        at += 12 + length;
    }
    assert_eq!(at, records.len(), "whole batches only");
    found
}

fn prepared_reads(metrics: &str, outcome: &str) -> f64 {
    summed(
        &scrape::metrics(metrics),
        "brook_fetch_prepared_reads_total",
        &format!("outcome=\"{outcome}\""),
    )
}

#[test]
fn a_consumer_reading_sealed_segments_is_answered_from_reads_prepared_ahead_and_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let metrics = broker.metrics_address().expect("metrics served").to_owned();
    let mut stream = connect(&broker);
    create_filled_topic(&mut stream);
    let end = (BATCHES * RECORDS_PER_BATCH) as i64;

    let mut positions: Vec<(i32, i64)> = (0..PARTITIONS).map(|partition| (partition, 0)).collect();
    let mut fetches = 0;
    while positions.iter().any(|&(_, offset)| offset < end) {
        fetches += 1;
        assert!(fetches < 1000, "no progress: {positions:?}");
        let answers = fetch(&mut stream, &positions);
        for ((partition, offset), answer) in positions.iter_mut().zip(answers) {
            assert_eq!(answer.error_code, 0, "partition {partition} at {offset}");
            for (base, next) in batches(&answer.records) {
                // Every batch once, in order: each answer starts where
                // the last one ended.
                assert_eq!(base, *offset, "partition {partition}");
                *offset = next;
            }
        }
        // Time for the next reads to be prepared, as a consumer's own work
        // between fetches gives it.
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(positions.iter().all(|&(_, offset)| offset == end));
    let used = prepared_reads(&metrics, "used");
    println!("{fetches} fetches, {used} partitions answered from prepared reads");
    assert!(
        used >= f64::from(PARTITIONS) * 4.0,
        "{used} prepared reads used in {fetches} fetches"
    );
}

fn delete_records_before(stream: &mut TcpStream, partition: i32, offset: i64) {
    let request = DeleteRecordsRequest::default()
        .with_timeout_ms(10_000)
        .with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(topic_name())
                .with_partitions(vec![
                    DeleteRecordsPartition::default()
                        .with_partition_index(partition)
                        .with_offset(offset),
                ]),
        ]);
    let response: DeleteRecordsResponse = exchange(stream, ApiKey::DeleteRecords, 2, &request);
    let answer = &response.topics[0].partitions[0];
    assert_eq!(answer.error_code, 0);
    assert_eq!(answer.low_watermark, offset);
}

/// Reads every partition once from `start` and waits for the reads after
/// to be prepared; returns where each partition goes on.
fn read_and_let_the_next_be_prepared(
    stream: &mut TcpStream,
    start: &[(i32, i64)],
) -> Vec<(i32, i64)> {
    let next = fetch(stream, start)
        .into_iter()
        .zip(start)
        .map(|(answer, &(partition, offset))| {
            assert_eq!(answer.error_code, 0, "partition {partition} at {offset}");
            let read = batches(&answer.records);
            assert!(!read.is_empty(), "partition {partition} has records");
            (partition, read.last().unwrap().1)
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    next
}

/// Fetches at `positions`, each of which a read was prepared for before
/// its log changed: each must be answered OFFSET_OUT_OF_RANGE.
fn assert_out_of_range(stream: &mut TcpStream, positions: &[(i32, i64)], why: &str) {
    for (answer, (partition, offset)) in fetch(stream, positions).into_iter().zip(positions) {
        assert_eq!(
            answer.error_code, OFFSET_OUT_OF_RANGE,
            "partition {partition} at {offset}: {why}"
        );
    }
}

#[test]
fn a_read_prepared_before_the_log_changed_is_never_the_answer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let metrics = broker.metrics_address().expect("metrics served").to_owned();
    let mut stream = connect(&broker);
    create_filled_topic(&mut stream);

    // DeleteRecords moves each log start past the offset the next fetch
    // asks for: Kafka answers OFFSET_OUT_OF_RANGE, not the records the
    // read prepared before held.
    let start: Vec<(i32, i64)> = (0..PARTITIONS).map(|partition| (partition, 0)).collect();
    let next = read_and_let_the_next_be_prepared(&mut stream, &start);
    let mut log_starts = Vec::new();
    for &(partition, offset) in &next {
        let log_start = offset + RECORDS_PER_BATCH as i64;
        delete_records_before(&mut stream, partition, log_start);
        log_starts.push((partition, log_start));
    }
    assert_out_of_range(&mut stream, &next, "below its new log start");
    let dropped = prepared_reads(&metrics, "dropped");
    assert!(dropped >= f64::from(PARTITIONS), "{dropped} dropped");

    // The topic deleted and made again with one batch in each partition:
    // the offsets the reads prepared before were at are past the new logs'
    // ends.
    let next = read_and_let_the_next_be_prepared(&mut stream, &log_starts);
    raw::delete_topic(&mut stream, TOPIC);
    raw::create_topic(&mut stream, TOPIC, PARTITIONS);
    for partition in 0..PARTITIONS {
        raw::produce_filler(&mut stream, TOPIC, partition, RECORDS_PER_BATCH, 100);
    }
    assert_out_of_range(
        &mut stream,
        &next,
        "past the log end of the topic made again",
    );
    let used = prepared_reads(&metrics, "used");
    assert_eq!(used, 0.0, "no prepared read answered");
}
