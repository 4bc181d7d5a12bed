//! Several log directories (JBOD, `log.dirs=/disk1/kafka,/disk2/kafka`), as
//! bare-metal Kafka brokers run them. Each directory is a real ext4
//! filesystem the test makes and loop-mounts (root, as CI has); brokers
//! start from Kafka's stock `server.properties` with only the ports and
//! `log.dirs` changed. Partitions spread over the directories; then one
//! disk fails (the ext4 shutdown ioctl: every IO on it answers EIO, as a
//! dead drive does). Only its partitions go offline: the broker keeps
//! serving the others, and in a cluster the controller moves the failed
//! partitions' leaderships to other replicas (Kafka's KIP-858), so every
//! partition takes writes again and no acknowledged record is lost.
//! Kafka's `kafka-log-dirs --describe` shows the failed directory. Both run
//! also while the machine is busy, in a loop (`BROOK_E2E_LONG=1` for more
//! rounds).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use brook_tests::deliveries::Deliveries;
use brook_tests::load::{Busy, rounds};
use brook_tests::loop_fs::LoopFilesystem;
use futures::executor::block_on;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::topic_partition_list::{Offset, TopicPartitionList};

use brook_tests::cluster::free_port;

use crate::fresh_machine::{kafka_node_properties, quorum_of, start_nodes};

const TOPIC: &str = "jbod";
const PARTITIONS: i32 = 8;
/// Each disk: room for the test's records and segments' preallocation.
const DISK_BYTES: u64 = 256 << 20;
/// Records per partition in each round of writes.
const RECORDS: usize = 50;

/// Creates [`TOPIC`], asking again while the brokers are not all unfenced
/// yet (INVALID_REPLICATION_FACTOR) for at most 30 s.
fn create_topic(bootstrap: &str, replication: i32, log: impl Fn() -> String) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("an admin client");
    let topic = NewTopic::new(TOPIC, PARTITIONS, TopicReplication::Fixed(replication));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let results = block_on(admin.create_topics([&topic], &AdminOptions::new())).unwrap();
        if results.iter().all(Result::is_ok) {
            return;
        }
        assert!(Instant::now() < deadline, "{results:?}\n{}", log());
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Sends [`RECORDS`] keyed records (`<round>-<partition>-<i>`) to each of
/// `partitions` with acks=all; the delivery reports, within `timeout`.
fn produce(bootstrap: &str, round: &str, partitions: &[i32], timeout: Duration) -> Deliveries {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("message.timeout.ms", timeout.as_millis().to_string())
        .create_with_context(Deliveries::default())
        .expect("a producer");
    for partition in partitions {
        for index in 0..RECORDS {
            let key = format!("{round}-{partition}-{index}");
            producer
                .send(
                    BaseRecord::to(TOPIC)
                        .partition(*partition)
                        .key(&key)
                        .payload(&key),
                )
                .expect("queued");
        }
    }
    let _ = producer.flush(timeout + Duration::from_secs(5));
    producer.context().as_ref().clone()
}

/// Every record of `partitions`, key → (partition, offset), read from the
/// start until `expected` are in or 30 s pass.
fn consume(bootstrap: &str, partitions: &[i32], expected: usize) -> BTreeMap<String, (i32, i64)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", "jbod")
        .set("enable.auto.commit", "false")
        .create()
        .expect("a consumer");
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        assignment
            .add_partition_offset(TOPIC, *partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut read = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while read.len() < expected && Instant::now() < deadline {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(200)) {
            let key = String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned();
            read.insert(key, (message.partition(), message.offset()));
        }
    }
    read
}

/// The partitions of [`TOPIC`] whose directories are in `dir`.
fn partitions_in(dir: &Path) -> BTreeSet<i32> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            name.strip_prefix(&format!("{TOPIC}-"))?.parse().ok()
        })
        .collect()
}

/// Per partition of [`TOPIC`]: (leader, ISR), as Metadata through
/// `bootstrap` says.
fn metadata(bootstrap: &str) -> BTreeMap<i32, (i32, Vec<i32>)> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .create()
        .expect("a client");
    let metadata = consumer
        .fetch_metadata(Some(TOPIC), Duration::from_secs(10))
        .expect("metadata");
    let topic = &metadata.topics()[0];
    topic
        .partitions()
        .iter()
        .map(|partition| {
            (
                partition.id(),
                (partition.leader(), partition.isr().to_vec()),
            )
        })
        .collect()
}

/// Two disks, and a log directory on each.
fn two_disks() -> ([LoopFilesystem; 2], [PathBuf; 2]) {
    let disks = [
        LoopFilesystem::new(DISK_BYTES),
        LoopFilesystem::new(DISK_BYTES),
    ];
    let dirs = [0, 1].map(|index| disks[index].mount().join("kafka"));
    (disks, dirs)
}

/// Every record sent to `partitions` partitions was acknowledged.
fn assert_delivered(deliveries: &Deliveries, partitions: usize, what: &str, log: &str) {
    let errors = deliveries.errors.lock().unwrap();
    assert_eq!(
        deliveries.delivered.lock().unwrap().len(),
        partitions * RECORDS,
        "{what}: {} errors, e.g. {:?}\n--- broker log\n{log}",
        errors.len(),
        &errors[..errors.len().min(3)]
    );
}

/// Every record acknowledged in `deliveries` is in `stored`, where it was
/// acknowledged.
fn assert_kept(deliveries: &Deliveries, stored: &BTreeMap<String, (i32, i64)>, log: &str) {
    let delivered = deliveries.delivered.lock().unwrap();
    let missing: Vec<_> = delivered
        .iter()
        .filter(|(key, at)| stored.get(*key) != Some(at))
        .collect();
    assert!(
        missing.is_empty(),
        "{} of {} acknowledged records lost or moved, e.g. {:?}\n--- broker log\n{log}",
        missing.len(),
        delivered.len(),
        &missing[..missing.len().min(5)]
    );
}

/// How the one broker runs.
#[derive(Clone, Copy, Debug)]
enum Alone {
    /// From Kafka's stock file: its own controller, a quorum of one.
    StockFile,
    /// Brook's plain one-node broker: no quorum, only `listeners` and
    /// `log.dirs` set.
    Plain,
}

/// One broker, two disks: the topic's partitions split four and four; the
/// second disk fails; the first disk's partitions keep taking and serving
/// records (with everything acknowledged before), the second's answer with
/// errors and show no leader, and the broker stays up and says which
/// directory failed.
fn one_broker_one_disk_fails(alone: Alone) {
    let cwd = tempfile::tempdir().unwrap();
    let (disks, dirs) = two_disks();
    let (port, controller_port) = (free_port(), free_port());
    let quorum = format!("controller.quorum.bootstrap.servers=localhost:{controller_port}");
    let log_dirs = format!("{},{}", dirs[0].display(), dirs[1].display());
    let mut nodes = start_nodes(cwd.path(), &[(port, controller_port)], |_, _| match alone {
        Alone::StockFile => kafka_node_properties(1, &quorum, port, controller_port, &log_dirs),
        Alone::Plain => format!("listeners=PLAINTEXT://:{port}\nlog.dirs={log_dirs}\n"),
    });
    let (dir, _broker) = nodes.pop().unwrap();
    let log = || std::fs::read_to_string(dir.join("brook.log")).unwrap_or_default();
    let bootstrap = format!("127.0.0.1:{port}");
    create_topic(&bootstrap, 1, log);
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let before = produce(&bootstrap, "before", &all, Duration::from_secs(30));
    assert_delivered(&before, all.len(), "before the failure", &log());
    let (first, second) = (partitions_in(&dirs[0]), partitions_in(&dirs[1]));
    assert_eq!(
        (first.len(), second.len()),
        (4, 4),
        "each new partition goes to the directory with the fewest: {first:?} {second:?}"
    );
    disks[1].shut_down();
    let first: Vec<i32> = first.into_iter().collect();
    let second: Vec<i32> = second.into_iter().collect();
    // Kafka's broker notices at the next IO; Brook's at the latest at its
    // next checkpoint (2 s): writes to the failed disk fail from then on.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !log().contains("log directory failed") {
        assert!(
            Instant::now() < deadline,
            "the failure went unnoticed\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let after = produce(&bootstrap, "after", &first, Duration::from_secs(30));
    assert_delivered(
        &after,
        first.len(),
        "the good disk's partitions take writes",
        &log(),
    );
    let failed = produce(&bootstrap, "failed", &second, Duration::from_secs(5));
    assert!(
        failed.delivered.lock().unwrap().is_empty(),
        "nothing is acknowledged on a failed disk"
    );
    let stored = consume(&bootstrap, &first, 2 * first.len() * RECORDS);
    assert_eq!(stored.len(), 2 * first.len() * RECORDS, "{}", log());
    assert_kept(&after, &stored, &log());
    let before_first = Deliveries::default();
    before_first.delivered.lock().unwrap().extend(
        before
            .delivered
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, (partition, _))| first.contains(partition))
            .map(|(key, at)| (key.clone(), *at)),
    );
    assert_kept(&before_first, &stored, &log());
    let shown = metadata(&bootstrap);
    for partition in &second {
        assert_eq!(
            shown[partition].0, -1,
            "no leader for a failed partition: {shown:?}"
        );
    }
    for partition in &first {
        assert!(shown[partition].0 >= 0, "the good disk's lead: {shown:?}");
    }
    check_kafka_log_dirs(&bootstrap, &dirs, &first);
}

/// `kafka-log-dirs --describe` (Kafka's own tool): the broker's two
/// directories, the first with `partitions` of [`TOPIC`] (and the group
/// offsets topic, created after the failure, so there), the second failed
/// (an error, no partitions).
fn check_kafka_log_dirs(bootstrap: &str, dirs: &[PathBuf; 2], partitions: &[i32]) {
    let described = brook_tests::java::kafka_log_dirs(bootstrap);
    let json = described.to_string();
    let log_dirs = described["brokers"][0]["logDirs"].as_array().unwrap();
    let dir = |path: &Path| {
        log_dirs
            .iter()
            .find(|dir| dir["logDir"] == path.display().to_string())
            .unwrap_or_else(|| panic!("{} not in {json}", path.display()))
    };
    let good = dir(&dirs[0]);
    assert!(good["error"].is_null(), "{json}");
    let mut listed: Vec<String> = good["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|partition| partition["partition"].as_str().unwrap().to_owned())
        .filter(|name| name.starts_with(&format!("{TOPIC}-")))
        .collect();
    listed.sort();
    let mut expected: Vec<String> = partitions
        .iter()
        .map(|partition| format!("{TOPIC}-{partition}"))
        .collect();
    expected.sort();
    assert_eq!(listed, expected, "{json}");
    let failed = dir(&dirs[1]);
    assert!(
        !failed["error"].is_null(),
        "a failed directory has an error: {json}"
    );
}

#[test]
fn one_broker_with_two_disks_keeps_serving_the_good_one_when_the_other_fails() {
    one_broker_one_disk_fails(Alone::StockFile);
}

#[test]
fn a_plain_one_node_broker_with_two_disks_keeps_serving_the_good_one() {
    one_broker_one_disk_fails(Alone::Plain);
}

#[test]
fn one_broker_with_two_disks_keeps_serving_the_good_one_while_the_machine_is_busy() {
    for round in 0..rounds(2, 6) {
        let _busy = Busy::start();
        let alone = [Alone::StockFile, Alone::Plain][round % 2];
        one_broker_one_disk_fails(alone);
    }
}

/// Three nodes from Kafka's stock files, node 1 with two disks: a topic of
/// three replicas; node 1's second disk fails. The partitions it held there
/// get other leaders and lose node 1 from their ISR, its partitions on the
/// good disk keep it, every partition takes acks=all writes again, and
/// every record acknowledged before or after is there.
fn cluster_one_disk_fails() {
    let cwd = tempfile::tempdir().unwrap();
    let (disks, dirs) = two_disks();
    let ports: Vec<(u16, u16)> = (0..3).map(|_| (free_port(), free_port())).collect();
    let quorum = quorum_of(&ports);
    let node_1_dirs = format!("{},{}", dirs[0].display(), dirs[1].display());
    let nodes = start_nodes(cwd.path(), &ports, |index, dir| {
        let (port, controller) = ports[index];
        let log_dirs = match index {
            0 => node_1_dirs.clone(),
            _ => dir.join("logs").display().to_string(),
        };
        kafka_node_properties(index + 1, &quorum, port, controller, &log_dirs)
    });
    let log = || {
        nodes
            .iter()
            .map(|(dir, _)| std::fs::read_to_string(dir.join("brook.log")).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n--- next node\n")
    };
    let bootstrap = format!("127.0.0.1:{}", ports[1].0);
    create_topic(&bootstrap, 3, log);
    let all: Vec<i32> = (0..PARTITIONS).collect();
    let before = produce(&bootstrap, "before", &all, Duration::from_secs(30));
    assert_delivered(&before, all.len(), "before the failure", &log());
    let (good, failing) = (partitions_in(&dirs[0]), partitions_in(&dirs[1]));
    assert_eq!((good.len(), failing.len()), (4, 4), "{good:?} {failing:?}");
    disks[1].shut_down();
    // The controller moves them: node 1 leads none of them and is in none
    // of their ISRs; it stays in the ISRs of its good disk's partitions.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let shown = metadata(&bootstrap);
        let moved = failing.iter().all(|partition| {
            let (leader, isr) = &shown[partition];
            *leader != 1 && *leader != -1 && !isr.contains(&1)
        });
        if moved {
            for partition in &good {
                assert!(shown[partition].1.contains(&1), "{shown:?}");
            }
            break;
        }
        assert!(
            Instant::now() < deadline,
            "leaderships did not move off the failed disk: {shown:?}\n{}",
            log()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let after = produce(&bootstrap, "after", &all, Duration::from_secs(30));
    let took: BTreeSet<i32> = after
        .delivered
        .lock()
        .unwrap()
        .values()
        .map(|(partition, _)| *partition)
        .collect();
    assert_delivered(
        &after,
        all.len(),
        &format!(
            "every partition takes writes again (these did: {took:?}; Metadata now: {:?})",
            metadata(&bootstrap)
        ),
        &log(),
    );
    let stored = consume(&bootstrap, &all, 2 * all.len() * RECORDS);
    assert_kept(&before, &stored, &log());
    assert_kept(&after, &stored, &log());
}

#[test]
fn a_failed_disk_in_a_cluster_moves_its_partitions_leaderships() {
    cluster_one_disk_fails();
}

#[test]
fn a_failed_disk_in_a_cluster_moves_its_partitions_leaderships_while_the_machine_is_busy() {
    for _ in 0..rounds(1, 5) {
        let _busy = Busy::start();
        cluster_one_disk_fails();
    }
}
