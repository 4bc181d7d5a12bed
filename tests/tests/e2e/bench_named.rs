//! `brook bench run all` end to end, shrunk to seconds: every named workload
//! starts its own broker (this build's `brook`), runs, and reports its
//! figures without failing, so the commands bench/RESULTS.md quotes keep
//! working. The figures themselves are not judged here (no timed asserts).

use std::process::Command;
use std::time::{Duration, Instant};

use brook_shards::client::cluster::Cluster;
use brook_tests::broker::Broker;
use brook_tests::kafka::KafkaBroker;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

/// The report of a `brook bench run` that must have succeeded.
fn succeeded(output: &std::process::Output) -> String {
    let report = String::from_utf8_lossy(&output.stdout);
    let progress = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "exit {:?}\nreport:\n{report}\nprogress:\n{progress}",
        output.status
    );
    report.into_owned()
}

#[test]
fn every_named_workload_runs_against_its_own_broker() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(BROOK)
        .args(["bench", "run", "all", "--no-ceiling", "--no-drop-caches"])
        .arg("--dir")
        .arg(dir.path())
        .args(["--duration", "1s", "--warmup", "0s", "--rate", "2000"])
        .args(["--settle", "1s"])
        .args(["--catchup-bytes", "16MiB", "--recovery-bytes", "32MiB"])
        .args(["--partitions", "40", "--kills", "1"])
        .output()
        .unwrap();
    let report = succeeded(&output);
    // Each workload after the first waited --settle before it started.
    let progress = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        progress
            .matches("settling 1s before the next workload")
            .count(),
        6,
        "{progress}"
    );
    for section in [
        "== throughput (",
        "== latency (",
        "== catchup (",
        "== many-partitions (",
        "== recovery (",
        "== scaling (",
        "== replication (",
    ] {
        assert!(report.contains(section), "{section} missing:\n{report}");
    }
    assert!(!report.contains("FAILED"), "{report}");
    assert!(report.contains("produce throughput"), "{report}");
    assert!(
        report.contains("restart → Metadata + latest offsets"),
        "{report}"
    );
    // Every acknowledged record came back exactly once where consumers ran.
    assert!(!report.contains("exactly once: NO"), "{report}");
    assert!(report.contains("exactly once: yes"), "{report}");
    // Each workload's broker data was deleted; its log was kept.
    for entry in std::fs::read_dir(dir.path()).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("broker-") {
            let left: Vec<_> = std::fs::read_dir(entry.path())
                .unwrap()
                .flatten()
                .map(|entry| entry.file_name())
                .collect();
            assert_eq!(
                left,
                vec![std::ffi::OsString::from("broker.log")],
                "{entry:?}"
            );
        }
    }
}

/// `--kafka`: the throughput workload on Brook, then on a real Apache Kafka
/// (bench/kafka/start-kafka.sh, the jars tests/run installs) with the same
/// client, and the table of both at the end of the report.
#[test]
fn the_throughput_workload_runs_on_brook_then_on_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(BROOK)
        .args(["bench", "run", "throughput", "--kafka", "--no-ceiling"])
        .arg("--kafka-script")
        .arg(root.join("bench/kafka/start-kafka.sh"))
        .env("KAFKA_LIB", brook_tests::java::java_dir().join("lib"))
        .arg("--dir")
        .arg(dir.path())
        .args(["--duration", "1s", "--warmup", "0s", "--settle", "0s"])
        .output()
        .unwrap();
    let report = succeeded(&output);
    assert!(!report.contains("FAILED"), "{report}");
    assert!(report.contains("== throughput (brook serve"), "{report}");
    assert!(
        report.contains("== throughput on Apache Kafka (Apache Kafka 4.1.2"),
        "{report}"
    );
    let table = report
        .split_once("== Brook and Apache Kafka, this run\n")
        .map(|(_, table)| table)
        .unwrap_or_else(|| panic!("no comparison:\n{report}"));
    for row in [
        "| throughput | produce throughput | ",
        "| throughput | produce throughput, flush.messages=1 | ",
    ] {
        assert!(table.contains(row), "{row} missing:\n{table}");
    }
    // Kafka's data went as Brook's did; its log was kept.
    let kafka = dir.path().join("kafka-throughput");
    let left: Vec<_> = std::fs::read_dir(&kafka)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("broker.log")]);
    let log = std::fs::read_to_string(kafka.join("broker.log")).unwrap();
    assert!(log.contains("Kafka Server started"), "{log}");
}

/// The benchmark's client grows a topic (CreatePartitions) on Kafka as on
/// Brook: many-partitions creates its partitions 5,000 per request, and
/// Kafka refused the client's first form (an empty assignment list, which
/// asks for none: INVALID_REPLICA_ASSIGNMENT) that Brook took as "place
/// them". Kafka's admin client sends no list, and so does ours; and Brook
/// now refuses the empty list as Kafka does, with Kafka's message.
#[test]
fn the_bench_client_grows_a_topic_on_kafka_as_on_brook() {
    let dir = tempfile::tempdir().unwrap();
    let mut kafka = KafkaBroker::start(&dir.path().join("kafka"), &[]);
    let brook = Broker::start(BROOK, &dir.path().join("brook"), 1, &[]);
    for address in [kafka.address.clone(), brook.address.clone()] {
        let bootstrap: std::net::SocketAddr = address.parse().unwrap();
        let partitions = brook_shards::runtime::block_on(async move {
            let cluster = Cluster::new(bootstrap, "grow-test");
            let topic = "grown".to_owned();
            cluster
                .create_topics(std::slice::from_ref(&topic), 2, 1, &[])
                .await
                .unwrap();
            cluster.create_partitions(&topic, 5).await.unwrap();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let leaders = cluster.created_leaders(&topic).await.unwrap();
                if leaders.len() == 5 || Instant::now() > deadline {
                    break leaders.len();
                }
                glommio::timer::sleep(Duration::from_millis(100)).await;
            }
        });
        assert_eq!(partitions, 5, "{address}");
    }
    let refusals: Vec<_> = [&kafka.address, &brook.address]
        .into_iter()
        .map(|address| grow_with_no_assignments(address, "grown", 6))
        .collect();
    assert_eq!(refusals[0].0, 39, "Kafka: {refusals:?}");
    assert_eq!(refusals[1], refusals[0]);
    assert!(kafka.stop(), "{}", kafka.log());
}

/// CreatePartitions of `topic` to `total` partitions with an empty (not
/// null) assignment list: the error code and message.
fn grow_with_no_assignments(address: &str, topic: &str, total: i32) -> (i16, Option<String>) {
    use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
    use kafka_protocol::messages::{
        ApiKey, CreatePartitionsRequest, CreatePartitionsResponse, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = CreatePartitionsRequest::default()
        .with_topics(vec![
            CreatePartitionsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_count(total)
                .with_assignments(Some(Vec::new())),
        ])
        .with_timeout_ms(30_000);
    let answer: CreatePartitionsResponse =
        brook_tests::raw::exchange(&mut stream, ApiKey::CreatePartitions, 3, &request);
    let result = &answer.results[0];
    (
        result.error_code,
        result
            .error_message
            .as_ref()
            .map(|message| message.to_string()),
    )
}
