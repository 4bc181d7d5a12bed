//! Replication as a client sees it (SPEC R1–R8): three `brook serve`
//! nodes, topics of three replicas with `min.insync.replicas=2`, librdkafka
//! producing with `acks=all`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use brook_tests::cluster::Cluster;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, MetadataRequest, MetadataResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const ALL: [usize; 3] = [0, 1, 2];

/// Creates `topic` (three replicas, `min.insync.replicas=2`) through node 0
/// and waits until every node knows each partition's leader.
fn create_replicated(cluster: &Cluster, topic: &str, partitions: i32) {
    let mut stream = brook_tests::raw::connect(&cluster.nodes[0]);
    let created: CreateTopicsResponse = brook_tests::raw::exchange(
        &mut stream,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_topics(vec![
                CreatableTopic::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_num_partitions(partitions)
                    .with_replication_factor(3)
                    .with_configs(vec![
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_static_str("min.insync.replicas"))
                            .with_value(Some(StrBytes::from_static_str("2"))),
                    ]),
            ])
            .with_timeout_ms(30_000),
    );
    assert_eq!(
        created.topics[0].error_code, 0,
        "{:?}",
        created.topics[0].error_message
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    for index in ALL {
        while leaders(cluster, index, topic)
            .is_none_or(|leaders| leaders.len() != partitions as usize)
        {
            assert!(
                Instant::now() < deadline,
                "node {index} does not serve {topic}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Each partition's leader as node `index` says.
fn leaders(cluster: &Cluster, index: usize, topic: &str) -> Option<BTreeMap<i32, i32>> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    let mut stream = std::net::TcpStream::connect(&cluster.nodes[index].address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let response: MetadataResponse = brook_tests::raw::try_exchange(
        &mut stream,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default()
            .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
                TopicName(StrBytes::from_string(topic.to_owned())),
            ))])),
    )?;
    let found = response
        .topics
        .first()
        .filter(|found| found.error_code == 0)?;
    Some(
        found
            .partitions
            .iter()
            .filter(|partition| partition.leader_id.0 >= 0)
            .map(|partition| (partition.partition_index, partition.leader_id.0))
            .collect(),
    )
}

fn bootstrap(cluster: &Cluster) -> String {
    cluster
        .nodes
        .iter()
        .map(|node| node.address.clone())
        .collect::<Vec<_>>()
        .join(",")
}

fn acks_all_producer(cluster: &Cluster) -> BaseProducer {
    rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap(cluster))
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .unwrap()
}

/// A partition directory's files, by name, with their bytes.
fn partition_files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|error| panic!("{}: {error}", dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.ends_with(".log") || name == "leader-epoch-checkpoint"
        })
        .map(|path| {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            (name, std::fs::read(&path).unwrap())
        })
        .collect()
}

/// Acceptance 1: records produced with `acks=all` are on all three
/// replicas, byte for byte (segments and `leader-epoch-checkpoint`), and
/// every follower's segments read clean with Kafka's `kafka-dump-log`.
#[test]
fn acks_all_records_are_on_every_replica_byte_for_byte() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &[]);
    const PARTITIONS: i32 = 3;
    const RECORDS: usize = 3_000;
    create_replicated(&cluster, "replicated", PARTITIONS);
    let producer = acks_all_producer(&cluster);
    for index in 0..RECORDS {
        let value = format!("record-{index:06}-{}", "x".repeat(index % 97));
        brook_tests::librdkafka::send_when_queued(
            &producer,
            BaseRecord::to("replicated")
                .key(&value)
                .partition((index % PARTITIONS as usize) as i32)
                .payload(&value),
        );
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("every record acknowledged by two replicas or more");
    drop(producer);
    let leaders = leaders(&cluster, 0, "replicated").unwrap();

    // Followers catch up to the leader's end within moments; the brokers
    // then stop cleanly (their segments trimmed to what they hold).
    let data_dirs: Vec<PathBuf> = cluster
        .nodes
        .iter()
        .map(|node| node.data_dir().to_owned())
        .collect();
    let dir = |node: usize, partition: i32| -> PathBuf {
        data_dirs[node].join(format!("replicated-{partition}"))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let same = (0..PARTITIONS).all(|partition| {
            let sizes: Vec<u64> = ALL
                .iter()
                .map(|node| {
                    std::fs::read_dir(dir(*node, partition))
                        .map(|entries| {
                            entries
                                .filter_map(|entry| entry.ok()?.metadata().ok())
                                .map(|metadata| metadata.len())
                                .sum()
                        })
                        .unwrap_or(0)
                })
                .collect();
            sizes.iter().all(|size| *size == sizes[0])
        });
        if same || Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    for node in &mut cluster.nodes {
        assert!(node.stop(), "a clean stop:\n{}", node.log());
    }
    let mut follower_segments = Vec::new();
    for partition in 0..PARTITIONS {
        let leader = leaders[&partition] as usize;
        let on_leader = partition_files(&dir(leader, partition));
        assert!(
            on_leader.keys().any(|name| name.ends_with(".log")),
            "{on_leader:?}"
        );
        for follower in ALL.into_iter().filter(|node| *node != leader) {
            let on_follower = partition_files(&dir(follower, partition));
            assert_eq!(
                on_follower.keys().collect::<Vec<_>>(),
                on_leader.keys().collect::<Vec<_>>(),
                "partition {partition}: node {follower}'s files against its leader {leader}'s"
            );
            for (name, bytes) in &on_leader {
                assert!(
                    on_follower[name] == *bytes,
                    "partition {partition}: {name} differs on node {follower} ({} bytes) from leader {leader} ({} bytes)",
                    on_follower[name].len(),
                    bytes.len()
                );
            }
            follower_segments.extend(
                on_follower
                    .keys()
                    .filter(|name| name.ends_with(".log"))
                    .map(|name| dir(follower, partition).join(name)),
            );
        }
    }
    // Kafka's own reader of the followers' segments.
    let list: Vec<&str> = follower_segments
        .iter()
        .map(|path| path.to_str().unwrap())
        .collect();
    let output = brook_tests::java::java("kafka.tools.DumpLogSegments")
        .args(["--deep-iteration", "--files", &list.join(",")])
        .output()
        .expect("kafka-dump-log");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && !stderr.contains("Exception"),
        "kafka-dump-log: {stdout}\n{stderr}"
    );
    assert!(!stdout.contains("isvalid: false"), "{stdout}");
    let records = stdout
        .lines()
        .filter(|line| line.starts_with("| offset: "))
        .count();
    assert_eq!(
        records,
        RECORDS * 2,
        "every record on both followers:\n{stdout}"
    );
}
