//! Leaderships going back to preferred replicas (a partition's first
//! replica), as in Kafka: the controller's periodic balancing
//! (`auto.leader.rebalance.enable`, every
//! `leader.imbalance.check.interval.seconds`), and ElectLeaders as Kafka's
//! own `kafka-leader-election.sh` sends it. Three `brook serve` nodes;
//! a partition placed on [0, 1, 2] loses its leader to a kill -9 and gets
//! it back once node 0 is in the ISR again.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use brook_tests::cluster::Cluster;
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::{ApiKey, ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::cluster_replication::{
    Load, QUICK_FENCING, WRITES_BETWEEN_FAULTS, check_exactly_once, consume_all, create_placed,
    leaders, wait_for_full_isr, wait_for_writes,
};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const ALL: [usize; 3] = [0, 1, 2];
const ELECTION: &str = "org.apache.kafka.tools.LeaderElectionCommand";
/// How long leadership is watched not going back to preferred replicas
/// with balancing off: five of its check intervals.
const NOT_BALANCED_FOR: Duration = Duration::from_secs(5);
/// Partition 0 prefers node 0, partition 1 node 1.
const PLACED: [&[i32]; 2] = [&[0, 1, 2], &[1, 2, 0]];

fn started(root: &std::path::Path, extra: &[&str]) -> Cluster {
    let mut args = QUICK_FENCING.to_vec();
    args.extend_from_slice(extra);
    Cluster::formed(BROOK, root, 3, &args).0
}

/// Kills node 0, waits until another leads partition 0, starts node 0
/// again and waits until it is back in every ISR.
fn bounce_preferred_leader(cluster: &mut Cluster, topic: &str) {
    assert_eq!(leaders(cluster, 1, topic).unwrap()[&0], 0);
    cluster.nodes[0].kill();
    let moved = |leaders: &BTreeMap<i32, i32>| leaders.get(&0).is_some_and(|id| *id != 0);
    wait_for_leaders(cluster, &[1, 2], topic, moved);
    cluster.nodes[0].restart();
    wait_for_full_isr(cluster, 1, topic, 2);
}

/// Waits until each of the `asked` nodes' view of `topic`'s leaders is
/// `wanted`.
fn wait_for_leaders(
    cluster: &Cluster,
    asked: &[usize],
    topic: &str,
    wanted: impl Fn(&BTreeMap<i32, i32>) -> bool,
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen: Vec<BTreeMap<i32, i32>> = asked
            .iter()
            .map(|index| leaders(cluster, *index, topic).unwrap_or_default())
            .collect();
        if seen.iter().all(&wanted) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "leaders of {topic} as nodes see them: {seen:?}\n{}",
            cluster.nodes[1].log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn preferred(leaders: &BTreeMap<i32, i32>) -> bool {
    *leaders == BTreeMap::from([(0, 0), (1, 1)])
}

/// With a one-second check interval, node 0 leads partition 0 again soon
/// after it rejoined the ISR, under an idempotent acks=all load that loses
/// nothing and sees no error through the move.
#[test]
fn the_controller_moves_leaderships_back_to_preferred_replicas() {
    let root = tempfile::tempdir().unwrap();
    let mut cluster = started(
        root.path(),
        &["--set", "leader.imbalance.check.interval.seconds=1"],
    );
    create_placed(&cluster, "balanced", 2, &PLACED);
    let load = Load::start(&cluster, "balanced", 2);
    wait_for_writes(&cluster, "balanced", 2, WRITES_BETWEEN_FAULTS);
    bounce_preferred_leader(&mut cluster, "balanced");
    let back = Instant::now();
    wait_for_leaders(&cluster, &ALL, "balanced", preferred);
    println!("node 0 leads again {:?} after rejoining", back.elapsed());
    // Written through the move back, so none of it surfaced an error.
    wait_for_writes(&cluster, "balanced", 2, WRITES_BETWEEN_FAULTS);
    let deliveries = load.finish();
    let read = consume_all(&cluster, "balanced", 2);
    check_exactly_once(&deliveries, &read);
    let logs: String = (0..3).map(|index| cluster.nodes[index].log()).collect();
    assert!(
        logs.contains("moving leaderships back to preferred replicas"),
        "{logs}"
    );
}

/// With balancing off, leadership stays where failover put it until
/// `kafka-leader-election.sh --election-type preferred` asks, through a
/// broker; then every broker sees the preferred leader, and asking again
/// finds nothing to do.
#[test]
fn kafka_leader_election_moves_leaderships_when_balancing_is_off() {
    let root = tempfile::tempdir().unwrap();
    let mut cluster = started(
        root.path(),
        &[
            "--set",
            "auto.leader.rebalance.enable=false",
            "--set",
            "leader.imbalance.check.interval.seconds=1",
        ],
    );
    create_placed(&cluster, "elected", 2, &PLACED);
    bounce_preferred_leader(&mut cluster, "elected");
    // Something that must not happen has no moment to wait for: the
    // leadership is watched for a while instead. Were balancing on, its
    // one-second interval would move partition 0 back within about two
    // intervals of node 0 rejoining
    // (`the_controller_moves_leaderships_back_to_preferred_replicas` prints
    // how soon); it is watched for five.
    let watched = Instant::now();
    while watched.elapsed() < NOT_BALANCED_FOR {
        let moved = leaders(&cluster, 1, "elected").unwrap();
        assert_ne!(moved[&0], 0, "balanced though balancing is off: {moved:?}");
        std::thread::sleep(Duration::from_millis(100));
    }

    let elect = |args: &[&str]| {
        let mut command = brook_tests::java::java(ELECTION);
        command
            .args(["--bootstrap-server", &cluster.nodes[2].address])
            .args(["--election-type", "preferred"])
            .args(args);
        brook_tests::clients::run(&mut command, None, &cluster.nodes[2])
    };
    let output = elect(&["--all-topic-partitions"]);
    println!("{output}");
    assert!(
        output.contains("Successfully completed leader election (PREFERRED) for partitions")
            && output.contains("elected-0")
            && !output.contains("elected-1"),
        "{output}"
    );
    // Answered once the election is in the asked broker's metadata.
    assert!(preferred(&leaders(&cluster, 2, "elected").unwrap()));
    wait_for_leaders(&cluster, &ALL, "elected", preferred);
    let output = elect(&["--topic", "elected", "--partition", "0"]);
    assert!(
        output.contains("Valid replica already elected for partitions elected-0"),
        "{output}"
    );
}

/// ElectLeaders' refusals as Kafka's controller words them, and v0 (no
/// election type, no top-level error).
#[test]
fn elect_leaders_refuses_unknown_partitions_as_kafka_does() {
    let root = tempfile::tempdir().unwrap();
    let cluster = started(root.path(), &[]);
    create_placed(&cluster, "known", 2, &PLACED);
    let asked = |version: i16, election_type: i8| {
        let request = ElectLeadersRequest::default()
            .with_election_type(election_type)
            .with_timeout_ms(30_000)
            .with_topic_partitions(Some(vec![
                TopicPartitions::default()
                    .with_topic(TopicName(StrBytes::from_static_str("known")))
                    .with_partitions(vec![0, 5]),
                TopicPartitions::default()
                    .with_topic(TopicName(StrBytes::from_static_str("unknown")))
                    .with_partitions(vec![0]),
            ]));
        let response: ElectLeadersResponse = brook_tests::raw::exchange_within(
            &mut brook_tests::raw::connect(&cluster.nodes[1]),
            ApiKey::ElectLeaders,
            version,
            &request,
            Duration::from_secs(30),
        );
        let results: Vec<(String, i32, i16, Option<String>)> = response
            .replica_election_results
            .iter()
            .flat_map(|topic| {
                topic.partition_result.iter().map(|result| {
                    (
                        topic.topic.to_string(),
                        result.partition_id,
                        result.error_code,
                        result.error_message.as_ref().map(|text| text.to_string()),
                    )
                })
            })
            .collect();
        (response.error_code, results)
    };
    let text = |message: &str| Some(message.to_owned());
    let expected = vec![
        (
            "known".to_owned(),
            0,
            84,
            text("Leader election not needed for topic partition."),
        ),
        (
            "known".to_owned(),
            5,
            3,
            text("No such partition as known-5"),
        ),
        ("unknown".to_owned(), 0, 3, text("No such topic as unknown")),
    ];
    assert_eq!(asked(2, 0), (0, expected.clone()));
    // Unclean: every partition has a leader, so none is needed either.
    assert_eq!(asked(2, 1), (0, expected.clone()));
    assert_eq!(asked(0, 0), (0, expected));
    let (error, refused) = asked(1, 7);
    assert_eq!(error, 42, "INVALID_REQUEST");
    assert!(
        refused.iter().all(|(_, _, code, _)| *code == 42),
        "{refused:?}"
    );
}
