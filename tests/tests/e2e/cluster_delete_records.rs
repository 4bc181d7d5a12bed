//! DeleteRecords on a replicated partition, as Kafka does it: only the
//! leader takes it (and ListOffsets and OffsetForLeaderEpoch), and it answers once every live replica's log start
//! reached the offset (the low watermark), followers having moved theirs
//! to the leader's; so the leader can die right after the answer and the
//! new leader does not serve the deleted records again.

use std::time::{Duration, Instant};

use brook_tests::cluster::Cluster;
use kafka_protocol::messages::delete_records_request::{
    DeleteRecordsPartition, DeleteRecordsTopic,
};
use kafka_protocol::messages::{
    ApiKey, BrokerId, DeleteRecordsRequest, DeleteRecordsResponse, OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use crate::cluster_replication::{QUICK_FENCING, create_replicated, leaders};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TOPIC: &str = "trimmed";

/// DeleteRecords of partition 0 before `offset`, sent to node `index`:
/// (error code, low watermark).
fn delete_records(cluster: &Cluster, index: usize, offset: i64) -> (i16, i64) {
    delete_records_within(cluster, index, offset, 10_000)
}

/// As [`delete_records`], with the request's `timeout_ms`.
fn delete_records_within(
    cluster: &Cluster,
    index: usize,
    offset: i64,
    timeout_ms: i32,
) -> (i16, i64) {
    let request = DeleteRecordsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topics(vec![
            DeleteRecordsTopic::default()
                .with_name(TopicName(StrBytes::from_static_str(TOPIC)))
                .with_partitions(vec![
                    DeleteRecordsPartition::default()
                        .with_partition_index(0)
                        .with_offset(offset),
                ]),
        ]);
    let response: DeleteRecordsResponse = brook_tests::raw::exchange_within(
        &mut brook_tests::raw::connect(&cluster.nodes[index]),
        ApiKey::DeleteRecords,
        2,
        &request,
        Duration::from_millis(timeout_ms as u64),
    );
    let answer = &response.topics[0].partitions[0];
    (answer.error_code, answer.low_watermark)
}

#[test]
fn deleted_records_stay_deleted_when_the_leader_dies_right_after() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &QUICK_FENCING);
    create_replicated(&cluster, TOPIC, 1);
    let leader = leaders(&cluster, 0, TOPIC).unwrap()[&0] as usize;
    let mut stream = brook_tests::raw::connect(&cluster.nodes[leader]);
    for _ in 0..10 {
        brook_tests::raw::produce_filler(&mut stream, TOPIC, 0, 10, 100);
    }
    let follower = (leader + 1) % 3;
    // ListOffsets, like DeleteRecords, is the leader's to answer.
    let mut to_follower = brook_tests::raw::connect(&cluster.nodes[follower]);
    assert_eq!(
        brook_tests::raw::list_offset_answer(&mut to_follower, TOPIC, 0, -1),
        Some((6, -1)),
        "a follower refuses ListOffsets NOT_LEADER_OR_FOLLOWER"
    );
    let asked = |index: usize, replica_id: i32| {
        use kafka_protocol::messages::offset_for_leader_epoch_request::{
            OffsetForLeaderPartition, OffsetForLeaderTopic,
        };
        let request = OffsetForLeaderEpochRequest::default()
            .with_replica_id(BrokerId(replica_id))
            .with_topics(vec![
                OffsetForLeaderTopic::default()
                    .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
                    .with_partitions(vec![
                        OffsetForLeaderPartition::default()
                            .with_partition(0)
                            .with_current_leader_epoch(-1)
                            .with_leader_epoch(0),
                    ]),
            ]);
        let response: OffsetForLeaderEpochResponse = brook_tests::raw::exchange(
            &mut brook_tests::raw::connect(&cluster.nodes[index]),
            ApiKey::OffsetForLeaderEpoch,
            4,
            &request,
        );
        let answer = &response.topics[0].partitions[0];
        (answer.error_code, answer.end_offset)
    };
    assert_eq!(
        asked(follower, -1),
        (6, -1),
        "OffsetForLeaderEpoch likewise"
    );
    assert_eq!(asked(leader, -1), (0, 100));
    // Kafka's debugging consumer may ask a follower.
    assert_eq!(asked(follower, -2).0, 0);
    assert_eq!(
        delete_records(&cluster, follower, 40),
        (6, -1),
        "a follower refuses it NOT_LEADER_OR_FOLLOWER"
    );
    let asked = Instant::now();
    assert_eq!(delete_records(&cluster, leader, 40), (0, 40));
    println!("answered in {:?}", asked.elapsed());
    cluster.nodes[leader].kill();
    let deadline = Instant::now() + Duration::from_secs(30);
    // A new leader as the new leader itself sees it: the follower asked may
    // apply the election before the broker it names does (which answers
    // NOT_LEADER_OR_FOLLOWER meanwhile, and a client asks again).
    let new_leader = loop {
        let now = leaders(&cluster, follower, TOPIC).and_then(|leaders| leaders.get(&0).copied());
        let serving = now.filter(|now| *now != leader as i32).filter(|now| {
            leaders(&cluster, *now as usize, TOPIC).and_then(|leaders| leaders.get(&0).copied())
                == Some(*now)
        });
        if let Some(now) = serving {
            break now as usize;
        }
        assert!(Instant::now() < deadline, "no new leader");
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stream = brook_tests::raw::connect(&cluster.nodes[new_leader]);
    assert_eq!(brook_tests::raw::list_offset(&mut stream, TOPIC, 0, -2), 40);
    assert_eq!(
        brook_tests::raw::list_offset(&mut stream, TOPIC, 0, -1),
        100
    );
    // The new leader deletes further, with one replica down: the live ones
    // are enough.
    assert_eq!(delete_records(&cluster, new_leader, 60), (0, 60));
    // A live follower that does not fetch (paused, its session not yet
    // expired) holds the low watermark back: the request's timeout ends
    // the wait with Kafka's REQUEST_TIMED_OUT.
    let other = (0..3)
        .find(|index| ![leader, new_leader].contains(index))
        .unwrap();
    cluster.nodes[other].signal(libc::SIGSTOP);
    let timed_out = delete_records_within(&cluster, new_leader, 70, 300);
    cluster.nodes[other].signal(libc::SIGCONT);
    assert_eq!(timed_out, (7, -1), "REQUEST_TIMED_OUT");
}
