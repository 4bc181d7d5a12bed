//! ListOffsets from a leader just elected (KIP-207). A new leader learns
//! the high watermark its predecessor reached only as its followers fetch,
//! so records the old leader acknowledged can lie above its HW. Kafka
//! refuses a consumer's "latest" (and a timestamp found at or past the HW)
//! with OFFSET_NOT_AVAILABLE (LEADER_NOT_AVAILABLE before v5), a retriable
//! error, until the HW reaches the start of the new epoch: a reader that
//! asks where the partition ends and stops there would otherwise stop short
//! of acknowledged records. (A clean-clone CI run of `cluster_partition`
//! missed one so: its reader took the end a just-elected leader answered.)

use std::time::{Duration, Instant};

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use brook_tests::cluster::Cluster;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsRequest, ListOffsetsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};

use crate::cluster_replication::{
    bootstrap, create_guarded, voters_and_two_brokers, wait_for_placement,
};

const TOPIC: &str = "kip207";
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
/// Kafka's debugging consumer, which reads up to the log end.
const DEBUGGING: BrokerId = BrokerId(-2);
const OFFSET_NOT_AVAILABLE: i16 = 78;
const LEADER_NOT_AVAILABLE: i16 = 5;

/// Node 0 follows a partition whose HW is held at 1 (two of its three
/// replicas in sync, `min.insync.replicas=3`) while `acks=1` writes take
/// its log to 3; its leader dies and node 0 leads at an epoch starting at
/// 3 with a HW of 1. Consumers get no latest offset from it (nor does
/// librdkafka report watermarks) until the other two are back in its ISR
/// and the HW passes 3; a replica's query gets its log end throughout.
/// The replicas are on two broker-only nodes and one voter, so the
/// controller quorum outlives them.
#[test]
fn a_new_leader_answers_no_latest_offset_until_its_hw_reaches_its_epoch_start() {
    let root = tempfile::tempdir().unwrap();
    let mut cluster = voters_and_two_brokers(root.path());
    create_guarded(&cluster, TOPIC, 1, &[&[3, 0, 4]], 3);
    wait_for_placement(&cluster, 1, TOPIC, (3, vec![3, 0, 4]));
    let mut leader = brook_tests::raw::connect(&cluster.nodes[3]);
    let answer = brook_tests::raw::produce_batch(&mut leader, TOPIC, 0, -1, stamped("a", 1_000));
    assert_eq!((answer.error_code, answer.base_offset), (0, 0), "acks=all");

    cluster.nodes[4].kill();
    wait_for_placement(&cluster, 0, TOPIC, (3, vec![3, 0]));
    for (value, offset, timestamp) in [("b", 1, 2_000), ("c", 2, 3_000)] {
        let batch = stamped(value, timestamp);
        let answer = brook_tests::raw::produce_batch(&mut leader, TOPIC, 0, 1, batch);
        assert_eq!(
            (answer.error_code, answer.base_offset),
            (0, offset),
            "acks=1"
        );
    }
    let mut follower = brook_tests::raw::connect(&cluster.nodes[0]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while ask(&mut follower, 7, DEBUGGING, LATEST) != (0, 3) {
        assert!(Instant::now() < deadline, "node 0 never copied b and c");
        std::thread::sleep(Duration::from_millis(50));
    }

    cluster.nodes[3].kill();
    wait_for_placement(&cluster, 0, TOPIC, (0, vec![0]));
    let mut new_leader = brook_tests::raw::connect(&cluster.nodes[0]);
    let consumer = brook_tests::raw::CONSUMER;
    assert_eq!(
        ask(&mut new_leader, 7, consumer, LATEST),
        (OFFSET_NOT_AVAILABLE, -1),
        "latest from a leader whose HW is behind its epoch's start"
    );
    assert_eq!(
        ask(&mut new_leader, 4, consumer, LATEST),
        (LEADER_NOT_AVAILABLE, -1),
        "v4 predates OFFSET_NOT_AVAILABLE"
    );
    assert_eq!(
        ask(&mut new_leader, 7, consumer, 2_500),
        (OFFSET_NOT_AVAILABLE, -1),
        "c, found by its timestamp, is past the HW"
    );
    assert_eq!(
        ask(&mut new_leader, 7, consumer, 500),
        (0, 0),
        "a is below it"
    );
    assert_eq!(ask(&mut new_leader, 7, consumer, EARLIEST), (0, 0));
    assert_eq!(ask(&mut new_leader, 7, DEBUGGING, LATEST), (0, 3));
    let reader = watermark_reader(&cluster);
    if let Ok(marks) = reader.fetch_watermarks(TOPIC, 0, Duration::from_secs(3)) {
        panic!("librdkafka was told the watermarks {marks:?} by a leader that cannot know them");
    }

    // Both come back, catch up and join the ISR: the HW passes 3.
    cluster.nodes[3].restart();
    cluster.nodes[4].restart();
    assert_eq!(
        brook_tests::raw::list_offset(&mut new_leader, TOPIC, 0, LATEST),
        3
    );
    assert_eq!(
        reader.fetch_watermarks(TOPIC, 0, Duration::from_secs(10)),
        Ok((0, 3))
    );
}

/// One record `value` with `timestamp`.
fn stamped(value: &str, timestamp: i64) -> Vec<u8> {
    encode_batch(
        &[NewRecord::value(
            value.as_bytes().to_vec(),
            TimestampMs(timestamp),
        )],
        &BatchOptions::default(),
    )
}

/// ListOffsets v`version` of partition 0 at `timestamp` from `replica`:
/// (error, offset).
fn ask(
    stream: &mut std::net::TcpStream,
    version: i16,
    replica: BrokerId,
    timestamp: i64,
) -> (i16, i64) {
    let topic = ListOffsetsTopic::default()
        .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
        .with_partitions(vec![
            ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(timestamp),
        ]);
    let request = ListOffsetsRequest::default()
        .with_replica_id(replica)
        .with_topics(vec![topic]);
    let response: ListOffsetsResponse =
        brook_tests::raw::try_exchange(stream, ApiKey::ListOffsets, version, &request)
            .expect("a ListOffsets answer");
    let answer = &response.topics[0].partitions[0];
    (answer.error_code, answer.offset)
}

fn watermark_reader(cluster: &Cluster) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", bootstrap(cluster))
        .set("group.id", "kip207")
        .create()
        .expect("a librdkafka consumer")
}
