//! Where a cluster's partitions live: a broker opens a log only for the
//! partitions whose replicas name it, as Kafka's brokers do. Requests for
//! the others get NOT_LEADER_OR_FOLLOWER (the partition exists elsewhere),
//! and Kafka's `kafka-log-dirs` lists on each broker only its replicas.

use std::path::Path;
use std::time::{Duration, Instant};

use brook_tests::cluster::Cluster;

use crate::cluster_replication::{create_placed, one_record, placements};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TOPIC: &str = "own";
const NOT_LEADER_OR_FOLLOWER: i16 = 6;

/// Three partitions, one replica each, on nodes 0, 1 and 2: each node's
/// disk holds its own partition only, `kafka-log-dirs` says so, and a
/// produce or an offsets query for another node's partition is refused
/// NOT_LEADER_OR_FOLLOWER. A node whose local image still holds every
/// partition (as brokers before this change opened them all) opens the
/// others' logs at its start and deletes them once it has followed the
/// metadata log.
#[test]
fn a_broker_opens_only_the_partitions_it_is_a_replica_of() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &[]);
    create_placed(&cluster, TOPIC, 3, &[&[0], &[1], &[2]]);
    for node in 0..3 {
        wait_for_leader(&cluster, node, node as i32);
    }
    for node in 0..3 {
        assert_eq!(
            partition_dirs(cluster.nodes[node].data_dir()),
            [format!("{TOPIC}-{node}")],
            "node {node}'s disk"
        );
    }
    assert_eq!(
        described_log_dirs(&cluster),
        [
            (0, vec![format!("{TOPIC}-0")]),
            (1, vec![format!("{TOPIC}-1")]),
            (2, vec![format!("{TOPIC}-2")])
        ]
    );
    let mut other = brook_tests::raw::connect(&cluster.nodes[1]);
    let answer = brook_tests::raw::produce_batch(&mut other, TOPIC, 0, 1, one_record("x"));
    assert_eq!(answer.error_code, NOT_LEADER_OR_FOLLOWER, "{answer:?}");
    let answer = brook_tests::raw::list_offset_answer(&mut other, TOPIC, 0, -1);
    assert_eq!(answer, Some((NOT_LEADER_OR_FOLLOWER, -1)));
    let mut own = brook_tests::raw::connect(&cluster.nodes[1]);
    let answer = brook_tests::raw::produce_batch(&mut own, TOPIC, 1, 1, one_record("y"));
    assert_eq!(
        (answer.error_code, answer.base_offset),
        (0, 0),
        "{answer:?}"
    );

    // Node 1's local image as a broker before this change wrote it: every
    // partition on its shard 0.
    cluster.nodes[1].stop();
    let image_file = cluster.nodes[1].data_dir().join("brook-metadata");
    let image = std::fs::read_to_string(&image_file).unwrap();
    let held_everything: String = image
        .lines()
        .map(|line| match line.strip_prefix(&format!("topic {TOPIC} ")) {
            Some(rest) => {
                let id = rest.split(' ').next().unwrap();
                format!("topic {TOPIC} {id} 0,0,0\n")
            }
            None => format!("{line}\n"),
        })
        .collect();
    assert_ne!(image, held_everything, "{image}");
    std::fs::write(&image_file, held_everything).unwrap();
    cluster.nodes[1].restart();
    let deadline = Instant::now() + Duration::from_secs(30);
    while partition_dirs(cluster.nodes[1].data_dir()) != [format!("{TOPIC}-1")] {
        assert!(
            Instant::now() < deadline,
            "node 1 kept {:?}\n{}",
            partition_dirs(cluster.nodes[1].data_dir()),
            cluster.nodes[1].log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    wait_for_leader(&cluster, 1, 1);
    let mut own = brook_tests::raw::connect(&cluster.nodes[1]);
    assert_eq!(brook_tests::raw::list_offset(&mut own, TOPIC, 1, -1), 1);
}

/// Waits until node `node` says `partition` of [`TOPIC`] is led by
/// `leader`.
fn wait_for_leader(cluster: &Cluster, node: usize, leader: i32) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while placements(cluster, node, TOPIC)
        .and_then(|placed| placed.get(&leader).map(|(led_by, _)| *led_by))
        != Some(leader)
    {
        assert!(
            Instant::now() < deadline,
            "{TOPIC}-{leader} not led by node {leader}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The partition directories of [`TOPIC`] under `data_dir`, sorted.
fn partition_dirs(data_dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(data_dir)
        .unwrap()
        .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
        .filter(|name| name.starts_with(&format!("{TOPIC}-")))
        .collect();
    names.sort();
    names
}

/// `kafka-log-dirs --describe` (Kafka's own tool): each broker's
/// partitions of [`TOPIC`] in its log directories, by broker id.
fn described_log_dirs(cluster: &Cluster) -> Vec<(i64, Vec<String>)> {
    let described = brook_tests::java::kafka_log_dirs(&cluster.nodes[0].address);
    let mut brokers: Vec<(i64, Vec<String>)> = described["brokers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|broker| {
            let mut partitions: Vec<String> = broker["logDirs"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|dir| dir["partitions"].as_array().unwrap().iter())
                .map(|partition| partition["partition"].as_str().unwrap().to_owned())
                .filter(|name| name.starts_with(&format!("{TOPIC}-")))
                .collect();
            partitions.sort();
            (broker["broker"].as_i64().unwrap(), partitions)
        })
        .collect();
    brokers.sort();
    brokers
}
