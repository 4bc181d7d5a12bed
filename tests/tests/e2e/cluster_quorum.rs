//! Several `brook serve` processes as one cluster: a Raft controller quorum
//! (raft-rs), broker registration, heartbeats and fencing, seen through
//! Metadata and DescribeCluster as a client sees them. Sessions are
//! shortened (`broker.session.timeout.ms=4000`) to keep the test short; the
//! rule is the same at Kafka's 9 s default.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use brook_engine::cluster::peer_wire::{PeerFrame, encode_frame};
use brook_engine::types::BrokerId;
use brook_tests::broker::Broker;
use brook_tests::cluster::{Cluster, free_port, node_arguments};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const SHORT_SESSIONS: &[&str] = &[
    "--set",
    "broker.session.timeout.ms=4000",
    "--set",
    "broker.heartbeat.interval.ms=1000",
];
const ALL: [usize; 3] = [0, 1, 2];

/// Three voters with short sessions, once every node sees all three
/// brokers and a controller; with what each sees.
fn formed_cluster(root: &std::path::Path) -> (Cluster, Vec<brook_tests::cluster::Seen>) {
    Cluster::formed(BROOK, root, 3, SHORT_SESSIONS)
}

fn signal(broker: &Broker, signal: i32) {
    broker.signal(signal);
}

#[test]
fn three_nodes_elect_one_controller_fence_a_stopped_broker_and_survive_the_controllers_death() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, seen) = formed_cluster(root.path());
    let controller = seen[0].controller;
    assert!(
        seen.iter().all(|seen| seen.controller == controller),
        "{seen:?}"
    );
    // Metadata and DescribeCluster name a live broker that forwards admin
    // requests, as Kafka's KRaft brokers do: each names itself.
    for index in ALL {
        assert_eq!(cluster.described_controller(index), Some(index as i32));
        assert_eq!(seen[index].metadata_controller, index as i32);
    }

    // SIGSTOP a broker past its session: fenced; SIGCONT: back.
    let stopped = (controller as usize + 1) % 3;
    let others: Vec<usize> = ALL.into_iter().filter(|index| *index != stopped).collect();
    signal(&cluster.nodes[stopped], libc::SIGSTOP);
    let started = Instant::now();
    cluster.wait_until(
        &others,
        Duration::from_secs(20),
        "the stopped broker fenced",
        |seen| !seen.brokers.contains(&(stopped as i32)),
    );
    println!(
        "a stopped broker was fenced {:?} after SIGSTOP",
        started.elapsed()
    );
    signal(&cluster.nodes[stopped], libc::SIGCONT);
    cluster.wait_until(
        &ALL,
        Duration::from_secs(30),
        "the resumed broker unfenced",
        |seen| seen.brokers == [0, 1, 2],
    );

    // kill -9 the active controller: another voter takes over.
    let controller = cluster.seen_by(0).unwrap().controller as usize;
    let survivors: Vec<usize> = ALL
        .into_iter()
        .filter(|index| *index != controller)
        .collect();
    cluster.nodes[controller].kill();
    let killed = Instant::now();
    // While the voters elect, Metadata still names a live broker, never
    // -1: any broker forwards admin requests (Kafka's KRaft brokers too).
    let no_controller_named = std::cell::Cell::new(0);
    let seen = cluster.wait_until(
        &survivors,
        Duration::from_secs(30),
        "a new controller",
        |seen| {
            if seen.metadata_controller < 0 {
                no_controller_named.set(no_controller_named.get() + 1);
            }
            seen.controller >= 0 && seen.controller != controller as i32
        },
    );
    assert_eq!(
        no_controller_named.get(),
        0,
        "Metadata answered controller -1 during the election"
    );
    println!(
        "a new controller ({}) {:?} after kill -9",
        seen[0].controller,
        killed.elapsed()
    );
    cluster.wait_until(
        &survivors,
        Duration::from_secs(30),
        "the killed node fenced",
        |seen| !seen.brokers.contains(&(controller as i32)),
    );
    // Topics are created again, through either survivor.
    for (index, survivor) in survivors.iter().enumerate() {
        let mut stream = brook_tests::raw::connect(&cluster.nodes[*survivor]);
        brook_tests::raw::create_topic(&mut stream, &format!("after-{index}"), 2);
    }
    // It restarts from its metadata log, joins again and serves the topics
    // created while it was dead.
    cluster.nodes[controller].restart();
    let seen = cluster.wait_until(
        &ALL,
        Duration::from_secs(40),
        "the restarted node back",
        |seen| seen.brokers == [0, 1, 2] && seen.controller >= 0,
    );
    assert!(
        seen.iter()
            .all(|view| view.controller == seen[0].controller),
        "{seen:?}"
    );
    for index in 0..survivors.len() {
        let name = format!("after-{index}");
        let deadline = Instant::now() + Duration::from_secs(10);
        while partitions_seen(&cluster, controller, &name).is_none() {
            assert!(
                Instant::now() < deadline,
                "{name} not seen by the restarted node"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        assert_eq!(
            partitions_seen(&cluster, controller, &name),
            partitions_seen(&cluster, survivors[0], &name)
        );
    }
    let log = cluster.nodes[controller]
        .data_dir()
        .join("__cluster_metadata-0")
        .join("log");
    assert!(
        std::fs::metadata(&log).unwrap().len() > 0,
        "{}",
        log.display()
    );
}

/// Bytes to the controller listener that are not a peer's: garbage, an
/// oversized frame, another cluster's hello. Each closes its connection
/// with a log line; the node keeps serving.
#[test]
fn the_controller_listener_closes_on_bad_input_and_a_second_node_id_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let port = free_port();
    let voters = format!("0@127.0.0.1:{port}");
    let arguments = node_arguments(0, port, &voters);
    let arguments: Vec<&str> = arguments.iter().map(String::as_str).collect();
    let controller = Broker::start(BROOK, &root.path().join("node-0"), 1, &arguments);
    let cluster = Cluster {
        nodes: vec![controller],
        voters: voters.clone(),
    };
    cluster.wait_until(
        &[0],
        Duration::from_secs(20),
        "a one-voter cluster",
        |seen| seen.brokers == [0] && seen.controller == 0,
    );
    let closed = |bytes: &[u8]| {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(bytes).unwrap();
        let mut rest = Vec::new();
        // The node closes (a reset when bytes it did not read remain); only
        // a timeout means it kept the connection.
        match stream.read_to_end(&mut rest) {
            Ok(_) => true,
            Err(error) => error.kind() == std::io::ErrorKind::ConnectionReset,
        }
    };
    assert!(closed(&[0, 0, 0, 5, 99, 1, 2, 3, 4]), "garbage");
    assert!(closed(&[0xff, 0xff, 0xff, 0xff, 1]), "oversized");
    let other_cluster = encode_frame(&PeerFrame::Hello {
        cluster_id: "another-cluster".into(),
        node: BrokerId(7),
    });
    assert!(closed(&other_cluster), "another cluster's hello");
    // The line follows the close (the connection goes first).
    let deadline = Instant::now() + Duration::from_secs(10);
    let logged = |log: &str| {
        log.contains("kind 99 is unknown")
            && log.contains("over the limit")
            && log.contains("another-cluster")
    };
    while !logged(&cluster.nodes[0].log()) {
        assert!(Instant::now() < deadline, "{}", cluster.nodes[0].log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(cluster.seen_by(0).unwrap().controller, 0);

    // Two brokers with one node.id: the second is refused while the first lives.
    let broker = |name: &str| {
        let arguments = [
            "--set",
            "node.id=5",
            "--set",
            &format!("controller.quorum.voters={voters}"),
        ];
        Broker::start(BROOK, &root.path().join(name), 1, &arguments)
    };
    let first = broker("first-5");
    cluster.wait_until(
        &[0],
        Duration::from_secs(20),
        "broker 5 registered",
        |seen| seen.brokers == [0, 5],
    );
    let second = broker("second-5");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !second.log().contains("DUPLICATE_BROKER_REGISTRATION") {
        assert!(Instant::now() < deadline, "{}", second.log());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(cluster.seen_by(0).unwrap().brokers, [0, 5]);
    drop(first);
}

/// Settings that cannot form a cluster stop `brook serve` at once, saying why.
#[test]
fn malformed_cluster_settings_stop_the_node_with_a_reason() {
    let root = tempfile::tempdir().unwrap();
    let cases: [(&[&str], &str); 3] = [
        (
            &["controller.quorum.voters=1@localhost", "node.id=1"],
            "controller.quorum.voters",
        ),
        (
            &[
                "controller.quorum.voters=1@127.0.0.1:1,1@127.0.0.1:2",
                "node.id=1",
            ],
            "listed twice",
        ),
        (&["controller.quorum.voters=0@127.0.0.1:1"], "node.id"),
    ];
    for (settings, reason) in cases {
        let mut command = Command::new(BROOK);
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(root.path());
        for setting in settings {
            command.args(["--set", setting]);
        }
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let output = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{settings:?} started");
        assert!(stderr.contains(reason), "{settings:?}: {stderr}");
    }
}

/// Per partition: (leader, replicas).
type Partitions = Vec<(i32, Vec<i32>)>;

/// Metadata for `topic` from node `index`: per partition (leader, replicas),
/// and the topic id.
fn partitions_seen(cluster: &Cluster, index: usize, topic: &str) -> Option<(Partitions, [u8; 16])> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut stream = TcpStream::connect(&cluster.nodes[index].address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let request = MetadataRequest::default()
        .with_topics(Some(vec![MetadataRequestTopic::default().with_name(Some(
            TopicName(StrBytes::from_string(topic.to_owned())),
        ))]))
        .with_allow_auto_topic_creation(false);
    let response: MetadataResponse =
        brook_tests::raw::try_exchange(&mut stream, ApiKey::Metadata, 12, &request)?;
    let found = response
        .topics
        .first()
        .filter(|found| found.error_code == 0)?;
    let mut partitions: Vec<(i32, i32, Vec<i32>)> = found
        .partitions
        .iter()
        .map(|partition| {
            (
                partition.partition_index,
                partition.leader_id.0,
                partition.replica_nodes.iter().map(|node| node.0).collect(),
            )
        })
        .collect();
    partitions.sort();
    Some((
        partitions
            .into_iter()
            .map(|(_, leader, replicas)| (leader, replicas))
            .collect(),
        *found.topic_id.as_bytes(),
    ))
}

/// CreateTopics through a broker that is not the controller reaches the
/// controller; every broker then serves the same topic: same id, three
/// replicas on three brokers, two leaders each; librdkafka produces to the
/// leaders and reads every record back; DeleteTopics through another
/// broker removes it everywhere.
#[test]
fn a_topic_created_through_any_broker_is_the_same_on_every_broker_and_takes_records() {
    use kafka_protocol::messages::create_topics_request::CreatableTopic;
    use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, CreateTopicsResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    use rdkafka::Message;
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let root = tempfile::tempdir().unwrap();
    let (cluster, seen) = formed_cluster(root.path());
    let controller = seen[0].controller as usize;
    let asked = (controller + 1) % 3;
    let mut stream = brook_tests::raw::connect(&cluster.nodes[asked]);
    let topic = CreatableTopic::default()
        .with_name(TopicName(StrBytes::from_static_str("orders")))
        .with_num_partitions(6)
        .with_replication_factor(3);
    let created: CreateTopicsResponse = brook_tests::raw::exchange_within(
        &mut stream,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default()
            .with_topics(vec![topic.clone()])
            .with_timeout_ms(30_000),
        Duration::from_secs(30),
    );
    assert_eq!(
        created.topics[0].error_code, 0,
        "{:?}",
        created.topics[0].error_message
    );
    assert_eq!(created.topics[0].num_partitions, 6);
    assert_eq!(created.topics[0].replication_factor, 3);
    let again: CreateTopicsResponse = brook_tests::raw::exchange(
        &mut stream,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default().with_topics(vec![topic]),
    );
    assert_eq!(again.topics[0].error_code, 36, "TOPIC_ALREADY_EXISTS");
    // The broker that asked serves it at once; the others within moments.
    let (partitions, id) =
        partitions_seen(&cluster, asked, "orders").expect("the creator serves the topic");
    assert_eq!(id, *created.topics[0].topic_id.as_bytes());
    let mut leaders = std::collections::BTreeMap::new();
    for (leader, replicas) in &partitions {
        let distinct: std::collections::BTreeSet<_> = replicas.iter().collect();
        assert_eq!(distinct.len(), 3, "{partitions:?}");
        *leaders.entry(*leader).or_insert(0) += 1;
    }
    assert_eq!(
        leaders.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "{partitions:?}"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    for index in ALL {
        while partitions_seen(&cluster, index, "orders") != Some((partitions.clone(), id)) {
            assert!(
                Instant::now() < deadline,
                "node {index} sees {:?}",
                partitions_seen(&cluster, index, "orders")
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    // A real client finds each partition's leader and writes there.
    let bootstrap = cluster
        .nodes
        .iter()
        .map(|node| node.address.clone())
        .collect::<Vec<_>>()
        .join(",");
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("acks", "all")
        .create()
        .unwrap();
    const RECORDS: usize = 600;
    for index in 0..RECORDS {
        let value = format!("record-{index}");
        brook_tests::librdkafka::send_when_queued(
            &producer,
            BaseRecord::to("orders").key(&value).payload(&value),
        );
    }
    producer
        .flush(Duration::from_secs(30))
        .expect("every record acknowledged");
    let consumer = brook_tests::librdkafka::assigned_from_start(&bootstrap, "orders", 6);
    let mut received = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while received.len() < RECORDS && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            received.insert(String::from_utf8(message.payload().unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(received.len(), RECORDS);
    drop(consumer);
    // A consumer group: its coordinator is the leader of the group's
    // __consumer_offsets partition, whichever broker the client asked.
    let grouped: rdkafka::consumer::BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &bootstrap)
        .set("group.id", "cluster-group")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    rdkafka::consumer::Consumer::subscribe(&grouped, &["orders"]).unwrap();
    let mut in_group = std::collections::BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while in_group.len() < RECORDS && Instant::now() < deadline {
        if let Some(Ok(message)) = grouped.poll(Duration::from_millis(200)) {
            in_group.insert(String::from_utf8(message.payload().unwrap().to_vec()).unwrap());
        }
    }
    assert_eq!(in_group.len(), RECORDS, "records read in a group");
    drop(grouped);
    // Every broker names the same coordinator for the group.
    let coordinators: Vec<i32> = ALL
        .iter()
        .map(|index| {
            use kafka_protocol::messages::{FindCoordinatorRequest, FindCoordinatorResponse};
            let mut stream = brook_tests::raw::connect(&cluster.nodes[*index]);
            let found: FindCoordinatorResponse = brook_tests::raw::exchange(
                &mut stream,
                ApiKey::FindCoordinator,
                3,
                &FindCoordinatorRequest::default()
                    .with_key(StrBytes::from_static_str("cluster-group")),
            );
            assert_eq!(found.error_code, 0);
            found.node_id.0
        })
        .collect();
    assert!(
        coordinators.iter().all(|node| *node == coordinators[0]),
        "{coordinators:?}"
    );

    // DeleteTopics through another broker.
    let mut stream = brook_tests::raw::connect(&cluster.nodes[(controller + 2) % 3]);
    brook_tests::raw::delete_topic(&mut stream, "orders");
    let deadline = Instant::now() + Duration::from_secs(10);
    for index in ALL {
        while partitions_seen(&cluster, index, "orders").is_some() {
            assert!(
                Instant::now() < deadline,
                "node {index} still serves the deleted topic"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// Kafka's own kafka-topics (the Java AdminClient) against the cluster:
/// created through a broker that is not the controller with three replicas,
/// described the same from every broker.
#[test]
fn kafka_topics_creates_through_any_broker_and_every_broker_describes_the_same() {
    const TOPICS: &str = "org.apache.kafka.tools.TopicCommand";
    let root = tempfile::tempdir().unwrap();
    let (cluster, seen) = formed_cluster(root.path());
    let asked = (seen[0].controller as usize + 1) % 3;
    let topics = |index: usize, args: &[&str]| {
        let mut command = brook_tests::java::java(TOPICS);
        command
            .args(["--bootstrap-server", &cluster.nodes[index].address])
            .args(args);
        brook_tests::clients::run(&mut command, None, &cluster.nodes[index])
    };
    let created = topics(
        asked,
        &[
            "--create",
            "--topic",
            "kt",
            "--partitions",
            "6",
            "--replication-factor",
            "3",
        ],
    );
    assert!(created.contains("Created topic kt."), "{created}");
    let described: Vec<String> = ALL
        .iter()
        .map(|index| topics(*index, &["--describe", "--topic", "kt"]))
        .collect();
    println!("{}", described[0]);
    assert!(
        described[0].contains("PartitionCount: 6") && described[0].contains("ReplicationFactor: 3"),
        "{}",
        described[0]
    );
    // Every broker describes the same (the header's topic id included).
    assert!(
        described.iter().all(|text| *text == described[0]),
        "{described:#?}"
    );
    let mut leaders = std::collections::BTreeMap::new();
    for line in described[0]
        .lines()
        .filter(|line| line.contains("Partition: "))
    {
        let field = |name: &str| {
            line.split('\t')
                .find_map(|part| part.strip_prefix(name))
                .unwrap_or_else(|| panic!("no {name} in {line:?}"))
                .to_owned()
        };
        let replicas: std::collections::BTreeSet<String> =
            field("Replicas: ").split(',').map(str::to_owned).collect();
        assert_eq!(replicas.len(), 3, "{line}");
        assert_eq!(field("Isr: ").split(',').count(), 3, "{line}");
        *leaders.entry(field("Leader: ")).or_insert(0) += 1;
    }
    assert_eq!(
        leaders.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "{leaders:?}"
    );

    // Manual assignments through a broker that is not the controller:
    // kafka-topics --replica-assignment on create, then on --alter for
    // the added partition; the first replica leads.
    topics(
        asked,
        &[
            "--create",
            "--topic",
            "manual",
            "--replica-assignment",
            "2:1,0:2,1:0",
        ],
    );
    topics(
        (asked + 1) % 3,
        &[
            "--alter",
            "--topic",
            "manual",
            "--partitions",
            "4",
            "--replica-assignment",
            "2:1,0:2,1:0,1:2",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    let manual = loop {
        let described = topics(asked, &["--describe", "--topic", "manual"]);
        if described.contains("PartitionCount: 4") || Instant::now() > deadline {
            break described;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let assigned: Vec<(String, String)> = manual
        .lines()
        .filter(|line| line.contains("Partition: "))
        .map(|line| {
            let field = |name: &str| {
                line.split('\t')
                    .find_map(|part| part.strip_prefix(name))
                    .unwrap()
                    .to_owned()
            };
            (field("Leader: "), field("Replicas: "))
        })
        .collect();
    let expected: Vec<(String, String)> = [("2", "2,1"), ("0", "0,2"), ("1", "1,0"), ("1", "1,2")]
        .iter()
        .map(|(leader, replicas)| (leader.to_string(), replicas.to_string()))
        .collect();
    assert_eq!(assigned, expected, "{manual}");

    // kafka-metadata-quorum through a broker that is not the controller
    // and through the controller: one leader (DescribeCluster's
    // controller), one epoch, the three voters at their controller
    // endpoints, the leader and two followers replicating.
    const QUORUM: &str = "org.apache.kafka.tools.MetadataQuorumCommand";
    let quorum = |index: usize, what: &str| {
        let mut command = brook_tests::java::java(QUORUM);
        command.args([
            "--bootstrap-server",
            &cluster.nodes[index].address,
            "describe",
            what,
        ]);
        brook_tests::clients::run(&mut command, None, &cluster.nodes[index])
    };
    let field = |text: &str, name: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(name))
            .map(|value| value.trim().to_owned())
            .unwrap_or_else(|| panic!("no {name} in {text}"))
    };
    let controller = cluster.quorum_leader(asked).unwrap();
    let status = quorum(asked, "--status");
    println!("{status}");
    assert_eq!(
        field(&status, "LeaderId:"),
        controller.to_string(),
        "{status}"
    );
    assert!(field(&status, "LeaderEpoch:").parse::<u64>().unwrap() >= 1);
    assert!(field(&status, "HighWatermark:").parse::<u64>().unwrap() >= 1);
    let voters = field(&status, "CurrentVoters:");
    for index in ALL {
        let endpoint = format!(
            "\"id\": {index}, \"endpoints\": [\"CONTROLLER://127.0.0.1:{}\"]",
            cluster.controller_port(index)
        );
        assert!(voters.contains(&endpoint), "{endpoint} not in {voters}");
    }
    assert_eq!(field(&status, "CurrentObservers:"), "[]");
    let from_controller = quorum(controller, "--status");
    for name in ["LeaderId:", "LeaderEpoch:", "CurrentVoters:"] {
        assert_eq!(
            field(&from_controller, name),
            field(&status, name),
            "{name}"
        );
    }
    let replication = quorum(asked, "--replication");
    println!("{replication}");
    let mut rows: Vec<(String, String)> = replication
        .lines()
        .skip(1)
        .filter(|line| !line.trim().is_empty())
        .map(|line| {
            let cells: Vec<&str> = line.split_whitespace().collect();
            (cells[0].to_owned(), cells[cells.len() - 1].to_owned())
        })
        .collect();
    rows.sort();
    let mut expected: Vec<(String, String)> = ALL
        .iter()
        .map(|index| {
            let role = if *index == controller {
                "Leader"
            } else {
                "Follower"
            };
            (index.to_string(), role.to_owned())
        })
        .collect();
    expected.sort();
    assert_eq!(rows, expected, "{replication}");
}

/// A topic config override as node `index` describes it.
fn config_seen(cluster: &Cluster, index: usize, topic: &str, key: &str) -> Option<String> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest, DescribeConfigsResponse};
    use kafka_protocol::protocol::StrBytes;
    let mut stream = TcpStream::connect(&cluster.nodes[index].address).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    let resource = DescribeConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(topic.to_owned()))
        .with_configuration_keys(Some(vec![StrBytes::from_string(key.to_owned())]));
    let response: DescribeConfigsResponse = brook_tests::raw::try_exchange(
        &mut stream,
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![resource]),
    )?;
    let result = response
        .results
        .first()
        .filter(|result| result.error_code == 0)?;
    let config = result
        .configs
        .iter()
        .find(|config| config.name.as_str() == key)?;
    // Source 1: a topic's own override.
    (config.config_source == 1).then(|| config.value.as_ref().map(|value| value.to_string()))?
}

/// IncrementalAlterConfigs SET `key=value` on `topic` through node `index`.
fn set_config(cluster: &Cluster, index: usize, topic: &str, key: &str, value: &str) -> i16 {
    use kafka_protocol::messages::incremental_alter_configs_request::{
        AlterConfigsResource, AlterableConfig,
    };
    use kafka_protocol::messages::{
        ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    };
    use kafka_protocol::protocol::StrBytes;
    let mut stream = brook_tests::raw::connect(&cluster.nodes[index]);
    let resource = AlterConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(StrBytes::from_string(topic.to_owned()))
        .with_configs(vec![
            AlterableConfig::default()
                .with_name(StrBytes::from_string(key.to_owned()))
                .with_config_operation(0)
                .with_value(Some(StrBytes::from_string(value.to_owned()))),
        ]);
    let response: IncrementalAlterConfigsResponse = brook_tests::raw::exchange(
        &mut stream,
        ApiKey::IncrementalAlterConfigs,
        1,
        &IncrementalAlterConfigsRequest::default().with_resources(vec![resource]),
    );
    response.responses[0].error_code
}

/// CreatePartitions: `topic` grows to `total` through node `index`.
fn grow_topic(cluster: &Cluster, index: usize, topic: &str, total: i32) -> i16 {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::{
        ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let mut stream = brook_tests::raw::connect(&cluster.nodes[index]);
    let request = CreatePartitionsRequest::default()
        .with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_count(total)
                .with_assignments(None),
        ])
        .with_timeout_ms(30_000);
    let response: CreatePartitionsResponse = brook_tests::raw::exchange_within(
        &mut stream,
        ApiKey::CreatePartitions,
        3,
        &request,
        Duration::from_secs(30),
    );
    response.results[0].error_code
}

/// kill -9 every node and start them all again: the same topics with the
/// same ids, placement, configs (changed through brokers that are not the
/// controller) and records; the metadata log was snapshotted and trimmed (a
/// small `metadata.log.max.record.bytes.between.snapshots` makes it
/// happen). A restarted broker rebuilds its view of the log a snapshot and
/// a chunk of entries at a time: following one of those older images
/// deleted the logs of the topics created after it (one run in four), and
/// Metadata named this broker the leader of partitions its view lacked.
#[test]
fn every_node_killed_and_restarted_keeps_the_topics_and_the_log_is_snapshotted() {
    let root = tempfile::tempdir().unwrap();
    let mut arguments = SHORT_SESSIONS.to_vec();
    arguments.extend([
        "--set",
        "metadata.log.max.record.bytes.between.snapshots=512",
    ]);
    let mut cluster = Cluster::start(BROOK, root.path(), 3, &arguments);
    cluster.wait_until(
        &ALL,
        Duration::from_secs(30),
        "three brokers and a controller",
        |seen| seen.brokers == [0, 1, 2] && seen.controller >= 0,
    );
    for index in 0..4 {
        let mut stream = brook_tests::raw::connect(&cluster.nodes[index % 3]);
        brook_tests::raw::create_topic(&mut stream, &format!("kept-{index}"), 3);
    }
    // A config and a partition count changed through brokers that are not
    // the controller; a bad config refused there as Kafka refuses it.
    let controller = cluster.seen_by(0).unwrap().controller as usize;
    let (first, second) = ((controller + 1) % 3, (controller + 2) % 3);
    assert_eq!(
        set_config(&cluster, first, "kept-0", "retention.ms", "123456"),
        0
    );
    assert_eq!(
        set_config(&cluster, first, "kept-0", "retention.ms", "soon"),
        40
    );
    assert_eq!(grow_topic(&cluster, second, "kept-1", 5), 0);
    assert_eq!(
        grow_topic(&cluster, second, "kept-1", 4),
        37,
        "INVALID_PARTITIONS"
    );
    let before: Vec<_> = (0..4)
        .map(|index| {
            let name = format!("kept-{index}");
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let seen: Vec<_> = ALL
                    .iter()
                    .map(|node| partitions_seen(&cluster, *node, &name))
                    .collect();
                let grown = index != 1 || seen[0].as_ref().is_some_and(|view| view.0.len() == 5);
                if grown && seen.iter().all(|view| view.is_some() && *view == seen[0]) {
                    break seen[0].clone().unwrap();
                }
                assert!(Instant::now() < deadline, "{name}: {seen:?}");
                std::thread::sleep(Duration::from_millis(100));
            }
        })
        .collect();
    // Records in every partition, acknowledged by its leader (each topic
    // has one replica per partition: nothing else holds them).
    for (index, (partitions, _)) in before.iter().enumerate() {
        for (partition, (leader, _)) in partitions.iter().enumerate() {
            let mut stream = brook_tests::raw::connect(&cluster.nodes[*leader as usize]);
            let topic = format!("kept-{index}");
            let (base, _) =
                brook_tests::raw::produce_filler(&mut stream, &topic, partition as i32, 5, 100);
            assert_eq!(base, 0, "{topic}-{partition}");
        }
    }
    let retention =
        |cluster: &Cluster| ALL.map(|node| config_seen(cluster, node, "kept-0", "retention.ms"));
    let deadline = Instant::now() + Duration::from_secs(10);
    while retention(&cluster) != [(); 3].map(|()| Some("123456".to_owned())) {
        assert!(Instant::now() < deadline, "{:?}", retention(&cluster));
        std::thread::sleep(Duration::from_millis(100));
    }
    for node in &mut cluster.nodes {
        node.kill();
    }
    for node in &mut cluster.nodes {
        node.restart();
    }
    cluster.wait_until(&ALL, Duration::from_secs(40), "the cluster back", |seen| {
        seen.brokers == [0, 1, 2] && seen.controller >= 0
    });
    // Each broker's view catches up with the log (until then it answers
    // the partitions it does not know yet without a leader).
    for (index, kept) in before.iter().enumerate() {
        for node in ALL {
            let deadline = Instant::now() + Duration::from_secs(10);
            loop {
                let seen = partitions_seen(&cluster, node, &format!("kept-{index}"));
                if seen.as_ref() == Some(kept) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "node {node}, kept-{index}: {seen:?}, not {kept:?}"
                );
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    while retention(&cluster) != [(); 3].map(|()| Some("123456".to_owned())) {
        assert!(Instant::now() < deadline, "{:?}", retention(&cluster));
        std::thread::sleep(Duration::from_millis(100));
    }
    for (index, (partitions, _)) in before.iter().enumerate() {
        for (partition, (leader, _)) in partitions.iter().enumerate() {
            let topic = format!("kept-{index}");
            let deadline = Instant::now() + Duration::from_secs(30);
            let mut stream = brook_tests::raw::connect(&cluster.nodes[*leader as usize]);
            loop {
                let answer =
                    brook_tests::raw::list_offset_answer(&mut stream, &topic, partition as i32, -1);
                if answer == Some((0, 5)) {
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "{topic}-{partition} after the restart: {answer:?}, not its 5 records"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    }
    for node in &cluster.nodes {
        let (snapshot, entries) =
            brook_shards::server::quorum::disk::inspect(node.data_dir()).unwrap();
        // Trimmed: the log holds only what follows the snapshot.
        assert!(snapshot > 1, "{snapshot}");
        assert!(
            entries.first().is_none_or(|first| *first == snapshot + 1),
            "snapshot {snapshot}, log {entries:?}"
        );
    }
}
