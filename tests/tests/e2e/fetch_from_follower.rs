//! Fetch from the closest replica (KIP-392, SPEC Q7) as clients see it:
//! three nodes, node `n` in `broker.rack=rack-n`. With Kafka's
//! `RackAwareReplicaSelector`, a consumer with `client.rack` is sent by
//! each partition's leader to the replica of its rack and reads every
//! record from there (librdkafka and the Java consumer); each broker's
//! `brook_fetch_bytes_total` shows who served it. On the wire: the leader
//! names the replica (`preferred_read_replica`) only with the selector and
//! a rack of another in-sync replica; a follower serves consumers of Fetch
//! v11+ with or without a selector, up to its high watermark
//! (read_committed: its last stable offset), with Kafka's errors; Fetch
//! v10 and ListOffsets stay with the leader.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::cluster::Cluster;
use brook_tests::librdkafka::assigned_from_start_with;
use brook_tests::load::{Busy, rounds};
use brook_tests::scrape::{metrics, summed};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use rdkafka::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::cluster_replication::{bootstrap, create_placed, leaders, wait_for_full_isr};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const SELECTOR: &str =
    "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector";
const TIMEOUT: Duration = Duration::from_secs(60);
/// Kafka's error codes these tests expect.
const OFFSET_OUT_OF_RANGE: i16 = 1;
const NOT_LEADER_OR_FOLLOWER: i16 = 6;
const UNKNOWN_LEADER_EPOCH: i16 = 75;

fn rack(node: usize) -> String {
    format!("rack-{node}")
}

/// Three nodes, node `n` in `rack-n`, the selector on the nodes
/// `selector` says.
fn racked_cluster(root: &std::path::Path, selector: impl Fn(usize) -> bool) -> Cluster {
    let (cluster, _) = Cluster::formed_each(BROOK, root, 3, |node| {
        let mut arguments = vec![
            "--set".to_owned(),
            format!("broker.rack={}", rack(node)),
            "--set".to_owned(),
            "group.initial.rebalance.delay.ms=0".to_owned(),
        ];
        if selector(node) {
            arguments.extend(["--set".to_owned(), SELECTOR.to_owned()]);
        }
        arguments
    });
    cluster
}

/// Record bytes each node sent consumers from `topic` so far.
fn served(cluster: &Cluster, topic: &str) -> Vec<f64> {
    let label = format!("topic=\"{topic}\"");
    cluster
        .nodes
        .iter()
        .map(|node| {
            let text = metrics(node.metrics_address().expect("metrics served"));
            summed(&text, "brook_fetch_bytes_total", &label)
        })
        .collect()
}

/// `count` records `value-<i>` with acks=all, record `i` on partition
/// `i % partitions`; every one acknowledged.
fn produce(cluster: &Cluster, topic: &str, partitions: i32, count: usize) -> BTreeSet<String> {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap(cluster))
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let values: Vec<String> = (0..count)
        .map(|index| format!("value-{index:05}"))
        .collect();
    for (index, value) in values.iter().enumerate() {
        let partition = (index % partitions as usize) as i32;
        brook_tests::librdkafka::send_when_queued(
            &producer,
            BaseRecord::to(topic)
                .key(value)
                .payload(value)
                .partition(partition),
        );
    }
    producer.flush(TIMEOUT).expect("every record acknowledged");
    let mut ends = 0;
    for (partition, leader) in leaders(cluster, 0, topic).expect("leaders") {
        let mut stream = brook_tests::raw::connect(&cluster.nodes[leader as usize]);
        ends += brook_tests::raw::list_offset(&mut stream, topic, partition, -1);
    }
    assert_eq!(ends, count as i64, "every record is in the log");
    values.into_iter().collect()
}

/// What a consumer read: (partition, offset, value).
type Read = Vec<(i32, i64, String)>;

/// Every produced value read once, at a distinct position.
fn check_once(who: &str, read: &Read, produced: &BTreeSet<String>) {
    let positions: BTreeSet<(i32, i64)> = read
        .iter()
        .map(|(partition, offset, _)| (*partition, *offset))
        .collect();
    let values: BTreeSet<&String> = read.iter().map(|(_, _, value)| value).collect();
    assert_eq!(
        read.len(),
        produced.len(),
        "{who} read {} records",
        read.len()
    );
    assert_eq!(positions.len(), read.len(), "{who} read a position twice");
    assert_eq!(
        values,
        produced.iter().collect::<BTreeSet<_>>(),
        "{who} read other values"
    );
}

/// librdkafka with `client.rack=rack`, every partition assigned from its
/// start (`isolation.level` is librdkafka's read_committed), until it has
/// read `count` records.
fn read_with_librdkafka(
    cluster: &Cluster,
    topic: &str,
    partitions: i32,
    rack: &str,
    count: usize,
) -> Read {
    let group = format!("librdkafka-{rack}");
    let consumer = assigned_from_start_with(
        &bootstrap(cluster),
        topic,
        partitions,
        &[("group.id", &group), ("client.rack", rack)],
    );
    let deadline = Instant::now() + TIMEOUT;
    let mut read = Vec::new();
    while read.len() < count {
        assert!(
            Instant::now() < deadline,
            "librdkafka in {rack} read {} of {count}",
            read.len()
        );
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            let message = message.expect("a record");
            let value = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
            read.push((message.partition(), message.offset(), value));
        }
    }
    read
}

/// Kafka's console consumer (the Java consumer, kafka-clients 4.1.2) with
/// `client.rack=rack`, in a group of its own from the beginning, until it
/// has read `count` records.
fn read_with_java(cluster: &Cluster, topic: &str, rack: &str, count: usize) -> Read {
    let mut command = brook_tests::java::java("org.apache.kafka.tools.consumer.ConsoleConsumer");
    command.args(["--bootstrap-server", &bootstrap(cluster), "--topic", topic]);
    command.args(["--group", &format!("java-{rack}"), "--from-beginning"]);
    command.args([
        "--max-messages",
        &count.to_string(),
        "--timeout-ms",
        "60000",
    ]);
    command.args(["--consumer-property", &format!("client.rack={rack}")]);
    command.args(["--property", "print.partition=true"]);
    command.args(["--property", "print.offset=true"]);
    let output = brook_tests::clients::run(&mut command, None, &cluster.nodes[0]);
    output
        .lines()
        .map(|line| {
            // Partition:<p>\tOffset:<o>\t<value>
            let fields: Vec<&str> = line.splitn(3, '\t').collect();
            assert_eq!(fields.len(), 3, "{line}");
            let number = |field: &str, name: &str| {
                field
                    .strip_prefix(name)
                    .and_then(|number| number.parse::<i64>().ok())
                    .unwrap_or_else(|| panic!("{name} in {line}"))
            };
            (
                number(fields[0], "Partition:") as i32,
                number(fields[1], "Offset:"),
                fields[2].to_owned(),
            )
        })
        .collect()
}

/// Every record byte `who` (a consumer in `node`'s rack) was sent came
/// from `node` (`before`/`after`: [`served`] around its read).
fn check_served_by(who: &str, node: usize, before: &[f64], after: &[f64]) {
    let sent: Vec<f64> = after.iter().zip(before).map(|(a, b)| a - b).collect();
    assert!(
        sent[node] > 0.0,
        "{who}: node {node} sent nothing: {sent:?}"
    );
    for (other, bytes) in sent.iter().enumerate() {
        if other != node {
            assert_eq!(*bytes, 0.0, "{who}: node {other} sent bytes: {sent:?}");
        }
    }
    println!("{who}: bytes sent by node: {sent:?}");
}

const TOPIC: &str = "racks";
const PARTITIONS: i32 = 6;
const RECORDS: usize = 600;

/// A topic of three replicas whose leaders are spread over the nodes (so
/// reading from leaders only would take bytes from every node), records
/// produced with acks=all; the values.
fn racked_topic(cluster: &Cluster) -> BTreeSet<String> {
    create_placed(cluster, TOPIC, PARTITIONS, &[]);
    wait_for_full_isr(cluster, 0, TOPIC, PARTITIONS);
    let led_by: BTreeSet<i32> = leaders(cluster, 0, TOPIC).unwrap().into_values().collect();
    assert_eq!(led_by.len(), 3, "leaders on every node: {led_by:?}");
    produce(cluster, TOPIC, PARTITIONS, RECORDS)
}

/// One librdkafka consumer per rack, one after another, each served by
/// its own rack's node alone.
fn librdkafka_reads_from_its_rack(cluster: &Cluster, produced: &BTreeSet<String>) {
    for node in 0..3 {
        let who = format!("librdkafka in {}", rack(node));
        let before = served(cluster, TOPIC);
        let read = read_with_librdkafka(cluster, TOPIC, PARTITIONS, &rack(node), RECORDS);
        check_once(&who, &read, produced);
        check_served_by(&who, node, &before, &served(cluster, TOPIC));
    }
}

/// Acceptance (issue 34 §6): librdkafka and then the Java consumer, one
/// per rack, each read every record once, all of it from the node of its
/// rack: a test that fails if consumers read from leaders.
#[test]
fn consumers_read_every_record_from_the_replica_of_their_rack() {
    let root = tempfile::tempdir().unwrap();
    let cluster = racked_cluster(root.path(), |_| true);
    let produced = racked_topic(&cluster);
    librdkafka_reads_from_its_rack(&cluster, &produced);
    for node in 0..3 {
        let who = format!("the Java consumer in {}", rack(node));
        let before = served(&cluster, TOPIC);
        let read = read_with_java(&cluster, TOPIC, &rack(node), RECORDS);
        check_once(&who, &read, &produced);
        check_served_by(&who, node, &before, &served(&cluster, TOPIC));
    }
}

/// The same with every core busy (restarts and fetch timing change under
/// load: DESIGN "Known traps"), librdkafka's consumers only, in rounds
/// (`BROOK_E2E_LONG=1` for more).
#[test]
fn consumers_read_from_their_rack_on_a_busy_machine() {
    let _busy = Busy::start();
    let root = tempfile::tempdir().unwrap();
    let cluster = racked_cluster(root.path(), |_| true);
    let produced = racked_topic(&cluster);
    for _ in 0..rounds(2, 10) {
        librdkafka_reads_from_its_rack(&cluster, &produced);
    }
}

/// One partition's answer to a consumer's Fetch (replica id -1) at
/// `version` of `topic`'s partition 0 from `offset`, naming `rack`
/// (v11+) and `current_leader_epoch` (-1: none), read_uncommitted.
fn consumer_fetch(
    node: &Broker,
    version: i16,
    topic: &str,
    rack: &str,
    current_leader_epoch: i32,
    offset: i64,
) -> PartitionData {
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(0)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_rack_id(StrBytes::from_string(rack.to_owned()))
        .with_topics(vec![
            FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partitions(vec![
                    FetchPartition::default()
                        .with_partition(0)
                        .with_current_leader_epoch(current_leader_epoch)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20),
                ]),
        ]);
    let mut stream = brook_tests::raw::connect(node);
    let mut response: FetchResponse =
        brook_tests::raw::exchange(&mut stream, ApiKey::Fetch, version, &request);
    assert_eq!(response.error_code, 0, "{response:?}");
    response.responses.remove(0).partitions.remove(0)
}

fn has_records(answer: &PartitionData) -> bool {
    answer
        .records
        .as_ref()
        .is_some_and(|records| !records.is_empty())
}

/// Ten one-record batches to partition 0 of `topic` with acks=all, through
/// its leader `node`.
fn produce_ten(node: &Broker, topic: &str) {
    let mut stream = brook_tests::raw::connect(node);
    for _ in 0..10 {
        brook_tests::raw::produce_filler(&mut stream, topic, 0, 1, 10);
    }
}

/// Waits until `node`, a follower, answers a consumer's fetch with the
/// high watermark `end` (it learns it from its leader's fetch answers).
fn wait_for_follower_high_watermark(node: &Broker, topic: &str, end: i64) {
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let answer = consumer_fetch(node, 12, topic, "", -1, 0);
        if answer.error_code == 0 && answer.high_watermark == end {
            return;
        }
        assert!(Instant::now() < deadline, "{topic} on follower: {answer:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The protocol of KIP-392, raw: node 0 has the selector, nodes 1 and 2
/// do not. `chosen` is led by node 0, `plain` by node 1, `pair` has no
/// replica on node 2.
#[test]
fn leaders_name_the_replica_and_followers_serve_consumers_as_kafka() {
    let root = tempfile::tempdir().unwrap();
    let cluster = racked_cluster(root.path(), |node| node == 0);
    create_placed(&cluster, "chosen", 1, &[&[0, 1, 2]]);
    create_placed(&cluster, "plain", 1, &[&[1, 0, 2]]);
    create_placed(&cluster, "pair", 1, &[&[1, 0]]);
    for topic in ["chosen", "plain"] {
        wait_for_full_isr(&cluster, 0, topic, 1);
    }
    produce_ten(&cluster.nodes[0], "chosen");
    produce_ten(&cluster.nodes[1], "plain");
    produce_ten(&cluster.nodes[1], "pair");
    for (node, topic) in [(1, "chosen"), (2, "chosen"), (0, "plain"), (2, "plain")] {
        wait_for_follower_high_watermark(&cluster.nodes[node], topic, 10);
    }
    let leader = &cluster.nodes[0];

    // The leader with the selector names the in-sync replica of the
    // consumer's rack, with no records and its own offsets.
    for follower in [1, 2] {
        let answer = consumer_fetch(leader, 12, "chosen", &rack(follower), -1, 0);
        assert_eq!(answer.error_code, 0, "{answer:?}");
        assert_eq!(
            answer.preferred_read_replica.0, follower as i32,
            "{answer:?}"
        );
        assert!(!has_records(&answer), "{answer:?}");
        assert_eq!((answer.high_watermark, answer.last_stable_offset), (10, 10));
    }
    // Its own rack, an unknown one, none, Fetch v10 (no rack): it serves.
    for (version, client_rack) in [(12, "rack-0"), (12, "rack-9"), (12, ""), (10, "")] {
        let answer = consumer_fetch(leader, version, "chosen", client_rack, -1, 0);
        assert_eq!(answer.error_code, 0, "{answer:?}");
        assert_eq!(answer.preferred_read_replica.0, -1, "{client_rack:?}");
        assert!(
            has_records(&answer),
            "v{version} {client_rack:?}: {answer:?}"
        );
    }

    // Without a selector (node 1 leads `plain`): -1, records, whatever the rack.
    let answer = consumer_fetch(&cluster.nodes[1], 12, "plain", "rack-2", -1, 0);
    assert_eq!(answer.preferred_read_replica.0, -1, "{answer:?}");
    assert!(has_records(&answer), "{answer:?}");

    // A follower serves a consumer that asks it (v11+), with or without a
    // selector, up to its high watermark; Kafka's errors otherwise.
    for (node, topic) in [(2, "plain"), (1, "chosen")] {
        let follower = &cluster.nodes[node];
        let answer = consumer_fetch(follower, 12, topic, &rack(node), 0, 0);
        assert_eq!(
            (
                answer.error_code,
                answer.high_watermark,
                answer.preferred_read_replica.0
            ),
            (0, 10, -1),
            "{answer:?}"
        );
        assert!(has_records(&answer), "{answer:?}");
        let at_end = consumer_fetch(follower, 12, topic, &rack(node), -1, 10);
        assert_eq!(at_end.error_code, 0, "{at_end:?}");
        assert!(!has_records(&at_end), "{at_end:?}");
        let past_end = consumer_fetch(follower, 12, topic, &rack(node), -1, 1_000);
        assert_eq!(past_end.error_code, OFFSET_OUT_OF_RANGE, "{past_end:?}");
        let future_epoch = consumer_fetch(follower, 12, topic, &rack(node), 1_000, 0);
        assert_eq!(future_epoch.error_code, UNKNOWN_LEADER_EPOCH);
        // Before v11 a consumer's fetch needs the leader, as ListOffsets does.
        let old = consumer_fetch(follower, 10, topic, "", -1, 0);
        assert_eq!(old.error_code, NOT_LEADER_OR_FOLLOWER, "{old:?}");
        let mut stream = brook_tests::raw::connect(follower);
        let listed = brook_tests::raw::list_offset_answer(&mut stream, topic, 0, -1);
        assert_eq!(listed.map(|(error, _)| error), Some(NOT_LEADER_OR_FOLLOWER));
    }
    // A broker with no replica does not serve its copy of the log.
    let outsider = consumer_fetch(&cluster.nodes[2], 12, "pair", "rack-2", -1, 0);
    assert_eq!(outsider.error_code, NOT_LEADER_OR_FOLLOWER, "{outsider:?}");

    read_committed_from_a_follower(&cluster);
}

/// A read_committed consumer in rack-2, sent there by node 0, reads only
/// the committed transaction of `txns` from node 2: the follower's last
/// stable offset and aborted transactions are its own, from the markers it
/// replicated.
fn read_committed_from_a_follower(cluster: &Cluster) {
    create_placed(cluster, "txns", 1, &[&[0, 1, 2]]);
    wait_for_full_isr(cluster, 0, "txns", 1);
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap(cluster))
        .set("transactional.id", "racked")
        .create()
        .unwrap();
    producer.init_transactions(TIMEOUT).expect("init");
    for (prefix, commit) in [("aborted", false), ("committed", true)] {
        producer.begin_transaction().expect("begin");
        for index in 0..5 {
            let value = format!("{prefix}-{index}");
            brook_tests::librdkafka::send_when_queued(
                &producer,
                BaseRecord::to("txns")
                    .key(&value)
                    .payload(&value)
                    .partition(0),
            );
        }
        producer.flush(TIMEOUT).expect("flush");
        match commit {
            true => producer.commit_transaction(TIMEOUT).expect("commit"),
            false => producer.abort_transaction(TIMEOUT).expect("abort"),
        }
    }
    // 5 aborted, a marker, 5 committed, a marker.
    wait_for_follower_high_watermark(&cluster.nodes[2], "txns", 12);
    let before = served(cluster, "txns");
    let read = read_with_librdkafka(cluster, "txns", 1, "rack-2", 5);
    let values: Vec<&str> = read.iter().map(|(_, _, value)| value.as_str()).collect();
    assert_eq!(
        values,
        [
            "committed-0",
            "committed-1",
            "committed-2",
            "committed-3",
            "committed-4"
        ]
    );
    check_served_by(
        "read_committed in rack-2",
        2,
        &before,
        &served(cluster, "txns"),
    );
    let offsets: Vec<i64> = read.iter().map(|(_, offset, _)| *offset).collect();
    assert_eq!(
        offsets,
        [6, 7, 8, 9, 10],
        "after the aborted five and their marker"
    );
}

/// A `replica.selector.class` Brook does not have stops the start with
/// an error naming the setting (Kafka fails to start when it cannot
/// instantiate the class).
#[test]
fn an_unknown_replica_selector_refuses_to_start() {
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().unwrap();
    let listen = format!("127.0.0.1:{}", brook_tests::cluster::free_port());
    let mut child = Command::new(BROOK)
        .arg("serve")
        .args(["--listen", &listen, "--metrics-listen", "127.0.0.1:0"])
        .arg("--data-dir")
        .arg(dir.path())
        .args([
            "--set",
            "replica.selector.class=com.example.NearestReplicaSelector",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("brook runs");
    let deadline = Instant::now() + TIMEOUT;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("brook started with an unknown replica selector");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "{stderr}");
    assert!(
        stderr.contains("replica.selector.class")
            && stderr.contains("com.example.NearestReplicaSelector")
            && stderr.contains("RackAwareReplicaSelector"),
        "{stderr}"
    );
}
