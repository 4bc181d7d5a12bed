//! Replication as a client sees it (SPEC R1–R8): three `brook serve`
//! nodes, topics of three replicas with `min.insync.replicas=2`, librdkafka
//! producing with `acks=all`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use brook_tests::cluster::Cluster;
use brook_tests::scrape::{summed, wait_for};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

mod faults;

pub(crate) use faults::{bounce_leaders, coordinator_of, roll};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const ALL: [usize; 3] = [0, 1, 2];

/// Creates `topic` (three replicas, `min.insync.replicas=2`) through node 0
/// and waits until every node knows each partition's leader.
pub(crate) fn create_replicated(cluster: &Cluster, topic: &str, partitions: i32) {
    create_placed(cluster, topic, partitions, &[]);
}

/// As [`create_replicated`], the partitions on `assignments`' brokers when
/// it names any.
pub(crate) fn create_placed(
    cluster: &Cluster,
    topic: &str,
    partitions: i32,
    assignments: &[&[i32]],
) {
    create_guarded(cluster, topic, partitions, assignments, 2);
}

/// As [`create_placed`], with `min.insync.replicas` `min_insync`.
pub(crate) fn create_guarded(
    cluster: &Cluster,
    topic: &str,
    partitions: i32,
    assignments: &[&[i32]],
    min_insync: u32,
) {
    use kafka_protocol::messages::create_topics_request::CreatableReplicaAssignment;
    let assigned: Vec<CreatableReplicaAssignment> = assignments
        .iter()
        .enumerate()
        .map(|(index, brokers)| {
            CreatableReplicaAssignment::default()
                .with_partition_index(index as i32)
                .with_broker_ids(
                    brokers
                        .iter()
                        .map(|id| kafka_protocol::messages::BrokerId(*id))
                        .collect(),
                )
        })
        .collect();
    let (count, factor) = match assigned.is_empty() {
        true => (partitions, 3),
        false => (-1, -1),
    };
    brook_tests::raw::create(
        &mut brook_tests::raw::connect(&cluster.nodes[0]),
        CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_num_partitions(count)
            .with_replication_factor(factor)
            .with_assignments(assigned)
            .with_configs(vec![
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_static_str("min.insync.replicas"))
                    .with_value(Some(StrBytes::from_string(min_insync.to_string()))),
            ]),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    for index in 0..cluster.nodes.len() {
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
pub(crate) fn leaders(cluster: &Cluster, index: usize, topic: &str) -> Option<BTreeMap<i32, i32>> {
    Some(
        placements(cluster, index, topic)?
            .into_iter()
            .filter(|(_, (leader, _))| *leader >= 0)
            .map(|(partition, (leader, _))| (partition, leader))
            .collect(),
    )
}

/// Each partition's leader (-1: none) and ISR as node `index` says
/// (`None` for a topic it does not know: asking does not create it).
pub(crate) fn placements(
    cluster: &Cluster,
    index: usize,
    topic: &str,
) -> Option<BTreeMap<i32, (i32, Vec<i32>)>> {
    Some(
        partitions_metadata(cluster, index, topic)?
            .iter()
            .map(|partition| {
                let isr = partition.isr_nodes.iter().map(|id| id.0).collect();
                (partition.partition_index, (partition.leader_id.0, isr))
            })
            .collect(),
    )
}

/// The partitions of `topic` led by their preferred replica (the first of
/// their replicas), with that leader, as node `index` says: leadership
/// balancing does not move these.
pub(crate) fn preferred_leaders(
    cluster: &Cluster,
    index: usize,
    topic: &str,
) -> Option<BTreeMap<i32, i32>> {
    Some(
        partitions_metadata(cluster, index, topic)?
            .iter()
            .filter(|partition| partition.replica_nodes.first() == Some(&partition.leader_id))
            .map(|partition| (partition.partition_index, partition.leader_id.0))
            .collect(),
    )
}

/// The partitions of `topic` in node `index`'s Metadata answer.
fn partitions_metadata(
    cluster: &Cluster,
    index: usize,
    topic: &str,
) -> Option<Vec<kafka_protocol::messages::metadata_response::MetadataResponsePartition>> {
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
            ))]))
            .with_allow_auto_topic_creation(false),
    )?;
    let found = response
        .topics
        .into_iter()
        .next()
        .filter(|found| found.error_code == 0)?;
    Some(found.partitions)
}

pub(crate) fn bootstrap(cluster: &Cluster) -> String {
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

/// Waits until every replica of `topic` holds as many whole batches as
/// the others, kills every node at once (a clean stop would move
/// leaderships, which changes the epoch files as it goes), and checks that
/// each follower's batches (and with `epochs` its
/// `leader-epoch-checkpoint`) are its leader's byte for byte; returns
/// copies of the followers' segments cut to their batches, under `copies`.
pub(crate) fn kill_and_compare_replicas(
    cluster: &mut Cluster,
    topic: &str,
    partitions: i32,
    epochs: bool,
    copies: &Path,
) -> Vec<PathBuf> {
    let leaders = leaders(cluster, 0, topic).unwrap();
    let data_dirs: Vec<PathBuf> = cluster
        .nodes
        .iter()
        .map(|node| node.data_dir().to_owned())
        .collect();
    let dir = |node: usize, partition: i32| -> PathBuf {
        data_dirs[node].join(format!("{topic}-{partition}"))
    };
    let held = |node: usize, partition: i32| -> u64 {
        partition_files(&dir(node, partition))
            .iter()
            .filter(|(name, _)| name.ends_with(".log"))
            .map(|(_, bytes)| batch_bytes(bytes).len() as u64)
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !(0..partitions).all(|partition| {
        ALL.iter()
            .all(|node| held(*node, partition) == held(0, partition))
    }) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(200));
    }
    for node in &mut cluster.nodes {
        node.kill();
    }
    let mut follower_segments = Vec::new();
    for partition in 0..partitions {
        let leader = leaders[&partition] as usize;
        let kept = |node: usize| -> BTreeMap<String, Vec<u8>> {
            partition_files(&dir(node, partition))
                .into_iter()
                .filter(|(name, _)| epochs || name.ends_with(".log"))
                .map(|(name, bytes)| match name.ends_with(".log") {
                    true => {
                        let batches = batch_bytes(&bytes).to_vec();
                        (name, batches)
                    }
                    false => (name, bytes),
                })
                .collect()
        };
        let on_leader = kept(leader);
        assert!(
            on_leader
                .iter()
                .any(|(name, bytes)| name.ends_with(".log") && !bytes.is_empty()),
            "{:?}",
            on_leader.keys()
        );
        for follower in ALL.into_iter().filter(|node| *node != leader) {
            let on_follower = kept(follower);
            assert_eq!(
                on_follower.keys().collect::<Vec<_>>(),
                on_leader.keys().collect::<Vec<_>>(),
                "partition {partition}: node {follower}'s files against its leader {leader}'s"
            );
            for (name, bytes) in &on_leader {
                assert!(
                    on_follower[name] == *bytes,
                    "partition {partition}: {name} differs on node {follower} ({} bytes) from leader {leader} ({} bytes){}",
                    on_follower[name].len(),
                    bytes.len(),
                    match name.ends_with(".log") {
                        true => String::new(),
                        false => format!(
                            ":\n{}\nagainst\n{}",
                            String::from_utf8_lossy(&on_follower[name]),
                            String::from_utf8_lossy(bytes)
                        ),
                    }
                );
            }
            let copy_dir = copies.join(format!("node-{follower}-{topic}-{partition}"));
            std::fs::create_dir_all(&copy_dir).unwrap();
            for (name, bytes) in on_follower
                .iter()
                .filter(|(name, _)| name.ends_with(".log"))
            {
                std::fs::write(copy_dir.join(name), bytes).unwrap();
                follower_segments.push(copy_dir.join(name));
            }
        }
    }
    follower_segments
}

/// The whole record batches at the start of a segment file's bytes (an
/// active segment's file runs on, zeroed, past them).
fn batch_bytes(bytes: &[u8]) -> &[u8] {
    let mut at = 0usize;
    while let Some(header) = bytes.get(at..at + 12) {
        let length = i32::from_be_bytes(header[8..12].try_into().unwrap());
        let end = at + 12 + length.max(0) as usize;
        if length <= 0 || end > bytes.len() {
            break;
        }
        at = end;
    }
    &bytes[..at]
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

    let copies = tempfile::tempdir().unwrap();
    let follower_segments =
        kill_and_compare_replicas(&mut cluster, "replicated", PARTITIONS, true, copies.path());
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

/// Waits until node `index` says `topic`'s partition 0 has `wanted`
/// (leader, ISR); panics with what it says and the node's log if not.
pub(crate) fn wait_for_placement(
    cluster: &Cluster,
    index: usize,
    topic: &str,
    wanted: (i32, Vec<i32>),
) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen = placements(cluster, index, topic).and_then(|mut all| all.remove(&0));
        if seen.as_ref() == Some(&wanted) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}-0: wanted {wanted:?}, node {index} says {seen:?}\n{}",
            cluster.nodes[index].log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Three voters (nodes 0–2) and two broker-only nodes (3 and 4), with
/// [`QUICK_FENCING`], once all five are registered: replicas on 3 and 4
/// may die without the controller quorum losing a voter.
pub(crate) fn voters_and_two_brokers(root: &Path) -> Cluster {
    let (mut cluster, _) = Cluster::formed(BROOK, root, 3, &QUICK_FENCING);
    cluster.add_broker(BROOK, root, 3, &QUICK_FENCING);
    cluster.add_broker(BROOK, root, 4, &QUICK_FENCING);
    cluster.wait_until(
        &[0, 3, 4],
        Duration::from_secs(30),
        "five brokers",
        |seen| seen.brokers == [0, 1, 2, 3, 4],
    );
    cluster
}

/// Settings that make a stopped broker leave within seconds.
pub(crate) const QUICK_FENCING: [&str; 4] = [
    "--set",
    "broker.session.timeout.ms=3000",
    "--set",
    "broker.heartbeat.interval.ms=500",
];

pub(crate) fn one_record(value: &str) -> Vec<u8> {
    use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
    use brook_engine::types::TimestampMs;
    encode_batch(
        &[NewRecord::value(value.as_bytes().to_vec(), TimestampMs(1))],
        &BatchOptions::default(),
    )
}

/// Acceptance 6: with two of a partition's three replicas down, `acks=all`
/// is refused NOT_ENOUGH_REPLICAS and `acks=1` still works; once its last
/// ISR member dies too, the partition has no leader (unclean election is
/// off) even though another replica is back, until that member returns.
/// The replicas are on two broker-only nodes and one voter, so the
/// controller quorum outlives them.
#[test]
fn min_insync_replicas_refuses_acks_all_and_a_dead_isr_leaves_the_partition_offline() {
    let root = tempfile::tempdir().unwrap();
    let mut cluster = voters_and_two_brokers(root.path());
    create_placed(&cluster, "guarded", 1, &[&[0, 3, 4]]);
    wait_for_placement(&cluster, 1, "guarded", (0, vec![0, 3, 4]));
    let mut leader = brook_tests::raw::connect(&cluster.nodes[0]);
    let answer = brook_tests::raw::produce_batch(&mut leader, "guarded", 0, -1, one_record("a"));
    assert_eq!((answer.error_code, answer.base_offset), (0, 0));

    cluster.nodes[3].kill();
    cluster.nodes[4].kill();
    // The controller fences both; each leaves the ISR (as the leader sees
    // it: another node may learn it first).
    wait_for_placement(&cluster, 0, "guarded", (0, vec![0]));
    let answer = brook_tests::raw::produce_batch(&mut leader, "guarded", 0, -1, one_record("b"));
    assert_eq!(answer.error_code, 19, "NOT_ENOUGH_REPLICAS: {answer:?}");
    // An operator sees it in the leader's metrics: a shrink, and the
    // partition under-replicated and under min.insync.replicas.
    let metrics = cluster.nodes[0]
        .metrics_address()
        .expect("metrics served")
        .to_owned();
    let shrunk = |text: &str| {
        summed(text, "brook_isr_shrinks_total", "") >= 1.0
            && summed(text, "brook_under_replicated_partitions", "") >= 1.0
            && summed(text, "brook_under_min_isr_partitions", "") >= 1.0
            && summed(
                text,
                "brook_request_errors_total",
                r#"api="Produce",error="NOT_ENOUGH_REPLICAS""#,
            ) >= 1.0
    };
    wait_for(&metrics, Duration::from_secs(10), "the shrunk ISR", shrunk);
    let answer = brook_tests::raw::produce_batch(&mut leader, "guarded", 0, 1, one_record("c"));
    assert_eq!((answer.error_code, answer.base_offset), (0, 1), "acks=1");

    // The last ISR member dies: no leader, though node 3 comes back.
    cluster.nodes[0].kill();
    wait_for_placement(&cluster, 1, "guarded", (-1, vec![0]));
    cluster.nodes[3].restart();
    cluster.wait_until(&[1], Duration::from_secs(30), "node 3 back", |seen| {
        seen.brokers.contains(&3)
    });
    // The controller elects leaders for offline partitions in the batch
    // that unfences a broker (`controller::heartbeat`), and Metadata lists
    // unfenced brokers only: node 1, listing node 3, has applied whatever
    // that batch elected. Nothing else elects an out-of-sync replica.
    assert_eq!(
        placements(&cluster, 1, "guarded").and_then(|mut all| all.remove(&0)),
        Some((-1, vec![0])),
        "node 3, not in the ISR, must not lead\n{}",
        cluster.nodes[1].log()
    );
    // Its ISR member returns: it leads again, node 3 catches up and joins.
    cluster.nodes[0].restart();
    wait_for_placement(&cluster, 1, "guarded", (0, vec![0, 3]));
    // Node 1 applied that election (and the one that took the partition
    // offline was none); node 3 follows with a lag series.
    let elections = |text: &str| summed(text, "brook_leader_elections_total", r#"kind="clean""#);
    let metrics = cluster.nodes[1].metrics_address().expect("metrics served");
    wait_for(metrics, Duration::from_secs(10), "an election", |text| {
        elections(text) >= 1.0
    });
    let metrics = cluster.nodes[3].metrics_address().expect("metrics served");
    wait_for(
        metrics,
        Duration::from_secs(10),
        "node 3's fetcher lag",
        |text| text.contains(r#"brook_replica_fetcher_lag_records{partition="0",topic="guarded""#),
    );
    let mut leader = brook_tests::raw::connect(&cluster.nodes[0]);
    let answer = brook_tests::raw::produce_batch(&mut leader, "guarded", 0, -1, one_record("d"));
    assert_eq!(
        (answer.error_code, answer.base_offset),
        (0, 2),
        "{answer:?}"
    );
}

/// An idempotent `acks=all` producer streaming keyed records (`key` is a
/// sequence number) to every partition in turn from its own thread until
/// stopped; librdkafka retries through leader changes.
pub(crate) struct Load {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<brook_tests::deliveries::Deliveries>>,
}

impl Load {
    pub(crate) fn start(cluster: &Cluster, topic: &str, partitions: i32) -> Load {
        use rdkafka::producer::ThreadedProducer;
        let deliveries = brook_tests::deliveries::Deliveries::default();
        let producer: ThreadedProducer<brook_tests::deliveries::Deliveries> =
            rdkafka::ClientConfig::new()
                .set("bootstrap.servers", bootstrap(cluster))
                .set("acks", "all")
                .set("enable.idempotence", "true")
                .set("linger.ms", "2")
                .set("message.timeout.ms", "120000")
                .create_with_context(deliveries.clone())
                .unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopping = stop.clone();
        let topic = topic.to_owned();
        let thread = std::thread::spawn(move || {
            let mut sequence = 0u64;
            while !stopping.load(std::sync::atomic::Ordering::Relaxed) {
                for _ in 0..20 {
                    let key = format!("{sequence:09}");
                    let partition = (sequence % partitions as u64) as i32;
                    let mut record = BaseRecord::to(&topic)
                        .key(&key)
                        .payload(&key)
                        .partition(partition);
                    loop {
                        match producer.send(record) {
                            Ok(()) => break,
                            Err((_, returned)) => {
                                std::thread::sleep(Duration::from_millis(5));
                                record = returned;
                            }
                        }
                    }
                    sequence += 1;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            producer
                .flush(Duration::from_secs(150))
                .expect("every record answered");
            deliveries
        });
        Load {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops sending, waits for every answer, and returns them.
    pub(crate) fn finish(mut self) -> brook_tests::deliveries::Deliveries {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.take().unwrap().join().unwrap()
    }
}

/// Every partition of `topic` as read from its start to its end, as
/// (offset, value) per partition.
pub(crate) fn consume_all(
    cluster: &Cluster,
    topic: &str,
    partitions: i32,
) -> BTreeMap<i32, Vec<(i64, String)>> {
    use rdkafka::Message;
    let ends: BTreeMap<i32, i64> = (0..partitions)
        .map(|partition| (partition, end_offset(cluster, topic, partition)))
        .collect();
    let consumer =
        brook_tests::librdkafka::assigned_from_start(&bootstrap(cluster), topic, partitions);
    let mut read: BTreeMap<i32, Vec<(i64, String)>> = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    let done = |read: &BTreeMap<i32, Vec<(i64, String)>>| {
        ends.iter().all(|(partition, end)| {
            read.get(partition)
                .and_then(|records| records.last())
                .map_or(*end == 0, |(offset, _)| offset + 1 >= *end)
        })
    };
    while !done(&read) {
        assert!(
            Instant::now() < deadline,
            "read up to {ends:?}: {:?}",
            read.iter().map(|(p, r)| (p, r.len())).collect::<Vec<_>>()
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("a record");
            // The value names the record: librdkafka's load sends its key
            // as its value, Kafka's VerifiableProducer numbered values only.
            let value = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
            read.entry(message.partition())
                .or_default()
                .push((message.offset(), value));
        }
    }
    read
}

/// Where `topic`'s `partition` ends for a consumer (ListOffsets, latest,
/// from its leader), asked again as a client does while its leader moves
/// or cannot answer yet (NOT_LEADER_OR_FOLLOWER and its kin,
/// OFFSET_NOT_AVAILABLE), for up to 60 s.
fn end_offset(cluster: &Cluster, topic: &str, partition: i32) -> i64 {
    const ASK_AGAIN: [i16; 5] = [5, 6, 74, 75, 78];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let leader = (0..cluster.nodes.len())
            .find_map(|index| leaders(cluster, index, topic)?.get(&partition).copied());
        let answer = leader.and_then(|leader| {
            let node = &cluster.nodes[leader as usize];
            let mut stream = std::net::TcpStream::connect(&node.address).ok()?;
            stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            brook_tests::raw::list_offset_answer(&mut stream, topic, partition, -1)
        });
        match answer {
            Some((0, end)) => return end,
            Some((code, _)) if !ASK_AGAIN.contains(&code) => {
                panic!("ListOffsets of {topic}-{partition}: error {code}")
            }
            _ => {}
        }
        assert!(
            Instant::now() < deadline,
            "no end of {topic}-{partition} (leader {leader:?}, last answer {answer:?})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The checks after a fault round: every acknowledged record is read
/// exactly once, where its acknowledgement put it, and in the order it
/// was sent within its partition; nothing is read twice.
pub(crate) fn check_exactly_once(
    deliveries: &brook_tests::deliveries::Deliveries,
    read: &BTreeMap<i32, Vec<(i64, String)>>,
) {
    let delivered = deliveries.delivered.lock().unwrap();
    assert!(
        delivered.len() > 1_000,
        "the load ran: {} acknowledged",
        delivered.len()
    );
    let mut seen: BTreeMap<&str, (i32, i64)> = BTreeMap::new();
    for (partition, records) in read {
        // Sequence numbers, zero-padded or not: shorter is smaller.
        let order = |value: &String| (value.len(), value.clone());
        for pair in records.windows(2) {
            assert!(
                order(&pair[0].1) < order(&pair[1].1),
                "partition {partition}: {:?} before {:?}",
                pair[0],
                pair[1]
            );
        }
        for (offset, key) in records {
            let earlier = seen.insert(key, (*partition, *offset));
            assert!(
                earlier.is_none(),
                "{key} read twice: {earlier:?} and ({partition}, {offset})"
            );
        }
    }
    for (key, at) in delivered.iter() {
        let partition = read.get(&at.0).map(Vec::as_slice).unwrap_or_default();
        assert_eq!(
            seen.get(key.as_str()),
            Some(at),
            "acknowledged {key} at {at:?}; read {} records of partition {}, offsets {:?} to {:?}",
            partition.len(),
            at.0,
            partition.first().map(|(offset, _)| offset),
            partition.last().map(|(offset, _)| offset),
        );
    }
    let errors = deliveries.errors.lock().unwrap();
    println!(
        "{} acknowledged, {} read, {} refused: {:?}",
        delivered.len(),
        seen.len(),
        errors.len(),
        errors.iter().take(3).collect::<Vec<_>>()
    );
}

/// Waits until node `index` says every partition of `topic` has a
/// leader and all three replicas in its ISR.
pub(crate) fn wait_for_full_isr(cluster: &Cluster, index: usize, topic: &str, partitions: i32) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let placed = placements(cluster, index, topic);
        let full = placed.as_ref().is_some_and(|placed| {
            placed.len() == partitions as usize
                && placed
                    .values()
                    .all(|(leader, isr)| *leader >= 0 && isr.len() == 3)
        });
        if full {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: {placed:?}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// How many records the load must write to every partition before a
/// fault strikes and again once the cluster is whole: the fault lands on a
/// running load, and the checks after it cover records written after it.
pub(crate) const WRITES_BETWEEN_FAULTS: i64 = 100;

/// Each partition of `topic`'s end offset (its high watermark) as its
/// leader answers ListOffsets, for the partitions whose leader answers now.
fn end_offsets(cluster: &Cluster, topic: &str) -> BTreeMap<i32, i64> {
    let Some(leaders) = (0..cluster.nodes.len()).find_map(|index| leaders(cluster, index, topic))
    else {
        return BTreeMap::new();
    };
    leaders
        .into_iter()
        .filter_map(|(partition, leader)| {
            let address = &cluster.nodes[leader as usize].address;
            let mut stream = std::net::TcpStream::connect(address).ok()?;
            stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
            match brook_tests::raw::list_offset_answer(&mut stream, topic, partition, -1)? {
                (0, end) => Some((partition, end)),
                _ => None,
            }
        })
        .collect()
}

/// Waits until every partition of `topic` holds `records` more records
/// than when first seen here (by its leader's high watermark, through
/// leader changes): whatever load writes to `topic` is running, and has
/// written that much since the call.
pub(crate) fn wait_for_writes(cluster: &Cluster, topic: &str, partitions: i32, records: i64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut from: BTreeMap<i32, i64> = BTreeMap::new();
    loop {
        let ends = end_offsets(cluster, topic);
        for (partition, end) in &ends {
            from.entry(*partition).or_insert(*end);
        }
        let written = (0..partitions).all(|partition| {
            matches!((from.get(&partition), ends.get(&partition)),
                (Some(from), Some(end)) if end - from >= records)
        });
        if written {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic}: {records} records more on every partition wanted; ends {ends:?} from {from:?}\n{}",
            cluster.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
