//! `brook bench run all` end to end, shrunk to seconds: every named workload
//! starts its own broker (this build's `brook`), runs, and reports its
//! figures without failing, so the commands bench/RESULTS.md quotes keep
//! working; the workloads of clients Brook did not write (Kafka's perf
//! tools, kcat) each on Brook and then on Apache Kafka. The figures
//! themselves are not judged here (no timed asserts), only that they are
//! there and positive.

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
        .args(["--records", "20000", "--end-to-end-records", "200"])
        .env("KAFKA_LIB", brook_tests::java::java_dir().join("lib"))
        .output()
        .unwrap();
    let report = succeeded(&output);
    // Each workload after the first waited --settle before it started.
    let progress = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        progress
            .matches("settling 1s before the next workload")
            .count(),
        10,
        "{progress}"
    );
    // The real clients' workloads come first.
    assert!(
        report.find("== producer-perf (") < report.find("== throughput ("),
        "{report}"
    );
    for section in [
        "== producer-perf (",
        "== consumer-perf (",
        "== kcat-read (",
        "== end-to-end (",
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

/// `brook bench run <workload> --kafka` shrunk to seconds: `<workload>` on
/// Brook, then on a real Apache Kafka (bench/kafka/start-kafka.sh, the jars
/// tests/run installs); the report.
fn run_on_brook_and_kafka(workload: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let output = Command::new(BROOK)
        .args(["bench", "run", workload, "--kafka", "--no-ceiling"])
        .arg("--kafka-script")
        .arg(root.join("bench/kafka/start-kafka.sh"))
        .env("KAFKA_LIB", brook_tests::java::java_dir().join("lib"))
        .arg("--dir")
        .arg(dir.path())
        .args(["--records", "20000", "--end-to-end-records", "200"])
        .args(["--settle", "0s", "--no-drop-caches"])
        .output()
        .unwrap();
    let report = succeeded(&output);
    assert!(!report.contains("FAILED"), "{report}");
    report
}

/// The rows of the report's closing table of both brokers, each row's
/// cells without the outer pipes.
fn comparison_rows(report: &str) -> Vec<Vec<String>> {
    let (_, table) = report
        .split_once("== Brook and Apache Kafka, this run\n")
        .unwrap_or_else(|| panic!("no comparison:\n{report}"));
    table
        .lines()
        .skip(2)
        .take_while(|line| line.starts_with('|'))
        .map(|line| {
            line.trim_matches('|')
                .split(" | ")
                .map(|cell| cell.trim().to_owned())
                .collect()
        })
        .collect()
}

/// Checks that `report` has a section for `workload` on each broker, run
/// unpinned, and a row of each of `figures` in the table of both, with a
/// positive value on each broker.
fn assert_rows_on_both(report: &str, workload: &str, figures: &[&str]) {
    for section in [
        format!("== {workload} (brook serve --cores "),
        format!("== {workload} on Apache Kafka (Apache Kafka 4.1.2"),
    ] {
        let line = report
            .lines()
            .find(|line| line.starts_with(&section))
            .unwrap_or_else(|| panic!("{section} missing:\n{report}"));
        assert!(line.contains("unpinned; client unpinned"), "{line}");
    }
    let rows = comparison_rows(report);
    for figure in figures {
        let row = rows
            .iter()
            .find(|row| row[0] == workload && row[1] == *figure)
            .unwrap_or_else(|| panic!("{workload} | {figure} missing:\n{report}"));
        for (broker, cell) in ["Brook", "Apache Kafka"].iter().zip(&row[2..4]) {
            let value: f64 = cell
                .split_whitespace()
                .next()
                .and_then(|number| number.parse().ok())
                .unwrap_or_else(|| panic!("{broker}: {cell:?} in {row:?}"));
            assert!(value > 0.0, "{broker}: {row:?}");
        }
    }
}

/// Kafka's ProducerPerformance (kafka-producer-perf-test) against each
/// broker, acks=1 and acks=all: its summary line read into figures.
#[test]
fn producer_perf_runs_kafkas_producer_benchmark_on_brook_and_on_kafka() {
    let report = run_on_brook_and_kafka("producer-perf");
    let mut figures = Vec::new();
    for acks in ["acks=1", "acks=all"] {
        for what in [
            "throughput",
            "latency avg",
            "latency p50",
            "latency p95",
            "latency p99",
            "latency p99.9",
            "latency max",
        ] {
            figures.push(format!("{acks} {what}"));
        }
    }
    figures.push("broker peak RSS while producing".into());
    let figures: Vec<&str> = figures.iter().map(String::as_str).collect();
    assert_rows_on_both(&report, "producer-perf", &figures);
    assert!(
        report.contains("ProducerPerformance acks=all: 20000 records sent"),
        "{report}"
    );
}

/// Kafka's ConsumerPerformance (kafka-consumer-perf-test) reads what was
/// written first, every record of it, three times from each broker: just
/// written, again, and (here, without the drop) "cold".
#[test]
fn consumer_perf_runs_kafkas_consumer_benchmark_on_brook_and_on_kafka() {
    let report = run_on_brook_and_kafka("consumer-perf");
    assert_rows_on_both(
        &report,
        "consumer-perf",
        &[
            "read throughput after the group join (fetch.MB.sec), just written",
            "read throughput after the group join (fetch.MB.sec), read again (page cache)",
            "read throughput after the group join (fetch.MB.sec), \
             page cache NOT dropped (--no-drop-caches)",
            "read throughput, group join included (MB.sec), just written",
            "records read",
            "broker peak RSS while reading",
        ],
    );
    // At least --records were written and read (the writer stops a little
    // past its limit).
    let read = comparison_rows(&report)
        .into_iter()
        .find(|row| row[1] == "records read")
        .unwrap();
    for cell in &read[2..4] {
        assert!(cell.parse::<u64>().unwrap() >= 20_000, "{read:?}");
    }
}

/// kcat (librdkafka) reads the same shape of data to its end from each
/// broker, timed by the wall clock.
#[test]
fn kcat_read_times_kcat_reading_to_the_end_on_brook_and_on_kafka() {
    let report = run_on_brook_and_kafka("kcat-read");
    assert_rows_on_both(
        &report,
        "kcat-read",
        &[
            "read throughput (wall clock), just written",
            "read throughput (wall clock), read again (page cache)",
            "read throughput (wall clock), page cache NOT dropped (--no-drop-caches)",
            "kcat start → exit at the end, just written",
            "kcat start → exit at the end, read again (page cache)",
            "records read",
            "broker peak RSS while reading",
        ],
    );
}

/// Kafka's EndToEndLatency against each broker: acks=all, one record at a
/// time, its average and percentiles read into figures.
#[test]
fn end_to_end_runs_kafkas_latency_tool_on_brook_and_on_kafka() {
    let report = run_on_brook_and_kafka("end-to-end");
    // Its percentiles are whole milliseconds: p50 may be 0 on a fast
    // machine, so only the average and the tail are checked positive.
    assert_rows_on_both(
        &report,
        "end-to-end",
        &[
            "produce → consumed, average",
            "p99.9 (whole ms)",
            "records sent",
            "broker peak RSS while running",
        ],
    );
    let rows = comparison_rows(&report);
    for figure in ["p50 (whole ms)", "p99 (whole ms)"] {
        assert!(
            rows.iter().any(|row| row[1] == figure),
            "{figure} missing:\n{report}"
        );
    }
}

/// A real-client workload whose client is not installed fails with what
/// to install, before starting any broker; `brook bench run` exits 1.
#[test]
fn a_real_client_workload_without_its_client_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let run = |workload: &str, path: &str, kafka_lib: &str| {
        let output = Command::new(BROOK)
            .args(["bench", "run", workload, "--no-ceiling", "--settle", "0s"])
            .arg("--dir")
            .arg(dir.path())
            .env("PATH", path)
            .env("KAFKA_LIB", kafka_lib)
            .output()
            .unwrap();
        assert!(!output.status.success(), "{workload} succeeded");
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let lib = brook_tests::java::java_dir().join("lib");
    let lib = lib.to_str().unwrap();
    let nowhere = dir.path().join("no-such-dir");
    let nowhere = nowhere.to_str().unwrap();
    let report = run("kcat-read", nowhere, lib);
    assert!(
        report.contains("FAILED: kcat-read runs kcat, and it is not on the PATH"),
        "{report}"
    );
    let report = run("producer-perf", nowhere, lib);
    assert!(
        report
            .contains("FAILED: producer-perf runs Kafka's Java tools, and java is not on the PATH"),
        "{report}"
    );
    let path = std::env::var("PATH").unwrap();
    let report = run("end-to-end", &path, nowhere);
    assert!(report.contains("are not in"), "{report}");
    assert!(report.contains("set KAFKA_LIB"), "{report}");
    // No broker was started.
    let started: Vec<_> = std::fs::read_dir(dir.path()).unwrap().flatten().collect();
    assert!(started.is_empty(), "{started:?}");
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

/// `brook bench` runs the `brook-bench` program beside `brook` (here the
/// test build's `brook-e2e-bench` beside `brook-e2e`), so the broker does
/// not link the benchmarks: without it, the command says what to build.
#[test]
fn brook_bench_runs_the_program_beside_brook() {
    let dir = tempfile::tempdir().unwrap();
    let brook = dir.path().join("brook");
    std::fs::copy(BROOK, &brook).unwrap();
    let alone = Command::new(&brook)
        .args(["bench", "--help"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&alone.stderr);
    assert!(!alone.status.success(), "{said}");
    assert!(
        said.contains("brook-bench") && said.contains("cargo build --release -p brook-bench"),
        "{said}"
    );
    std::fs::copy(
        env!("CARGO_BIN_EXE_brook-e2e-bench"),
        dir.path().join("brook-bench"),
    )
    .unwrap();
    let beside = Command::new(&brook)
        .args(["bench", "run", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&beside.stdout);
    assert!(
        beside.status.success(),
        "{help}{}",
        String::from_utf8_lossy(&beside.stderr)
    );
    assert!(help.contains("Usage: brook bench run"), "{help}");
}
