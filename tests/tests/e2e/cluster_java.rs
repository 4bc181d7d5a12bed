//! Replication with the Java client (issue 19, acceptance 2 and 5 beside
//! librdkafka's in `cluster_replication.rs`): the load is Kafka's own
//! `VerifiableProducer`, the producer of Kafka's replication system tests
//! (Java client 4.1.2, `acks=all`, numbered values), which prints one JSON
//! line per answered send. Every value it reports acked must then be read
//! exactly once, where the ack put it, in order.
//!
//! The tool sets `retries=0` itself (so that the system tests see every
//! error), which also turns idempotence off; these tests give it the
//! producer an application runs, idempotent with Kafka's default retries,
//! through `--producer.config`. With `retries=0` a rolling restart does
//! surface errors: a batch waiting for `acks=all` on a leader that moves
//! is answered NOT_LEADER_OR_FOLLOWER, as Kafka answers it, for the client
//! to retry.

use std::collections::HashMap;
use std::time::Duration;

use brook_tests::cluster::Cluster;
use brook_tests::deliveries::Deliveries;
use brook_tests::java::Spawned;

use crate::cluster_replication::{
    QUICK_FENCING, WRITES_BETWEEN_FAULTS, bootstrap, bounce_leaders, check_exactly_once,
    consume_all, create_replicated, kill_and_compare_replicas, roll, wait_for_writes,
};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const PARTITIONS: i32 = 3;

/// Kafka's `VerifiableProducer` streaming to `topic` until finished.
struct JavaLoad {
    producer: Spawned,
    /// Holds the producer's config file.
    _config: tempfile::TempDir,
}

/// What the tool's own `retries=0` is replaced with: Kafka's defaults
/// for an idempotent producer.
const PRODUCER_CONFIG: &str = "enable.idempotence=true\nretries=2147483647\n";

impl JavaLoad {
    fn start(cluster: &Cluster, topic: &str) -> JavaLoad {
        let config = tempfile::tempdir().unwrap();
        let config_file = config.path().join("producer.properties");
        std::fs::write(&config_file, PRODUCER_CONFIG).unwrap();
        let mut producer = Spawned::start(
            brook_tests::java::java("org.apache.kafka.tools.VerifiableProducer")
                .args(["--bootstrap-server", &bootstrap(cluster)])
                .args(["--topic", topic, "--acks", "-1", "--throughput", "2000"])
                .arg("--producer.config")
                .arg(&config_file),
        );
        producer.wait_for(Duration::from_secs(60), |line| {
            line.contains(r#""name":"startup_complete""#)
        });
        JavaLoad {
            producer,
            _config: config,
        }
    }

    /// Stops it (SIGTERM: its shutdown hook closes the producer, which
    /// waits for every answer) and reads what it reported.
    fn finish(mut self) -> Deliveries {
        let exited = self.producer.terminate(Duration::from_secs(150));
        assert!(exited.is_some(), "{}", self.producer.output());
        let lines = self.producer.stdout_lines();
        assert!(
            lines.iter().any(|line| line.contains("shutdown_complete")),
            "{}",
            self.producer.output()
        );
        let deliveries = Deliveries::default();
        let mut delivered = HashMap::new();
        let mut errors = Vec::new();
        for line in &lines {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            match event["name"].as_str() {
                Some("producer_send_success") => {
                    let value = event["value"].as_str().expect("a value").to_owned();
                    let at = (
                        event["partition"].as_i64().expect("a partition") as i32,
                        event["offset"].as_i64().expect("an offset"),
                    );
                    assert!(
                        delivered.insert(value.clone(), at).is_none(),
                        "{value} acknowledged twice"
                    );
                }
                Some("producer_send_error") => errors.push(line.clone()),
                _ => {}
            }
        }
        *deliveries.delivered.lock().unwrap() = delivered;
        *deliveries.errors.lock().unwrap() = errors;
        deliveries
    }
}

/// Acceptance 2 with the Java client: the leader of each partition in
/// turn is killed with SIGKILL, five rounds, while Kafka's producer
/// streams; nothing it was told is acknowledged goes missing or doubles,
/// and the replicas agree byte for byte.
#[test]
fn java_producer_loses_nothing_while_leaders_are_killed() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &QUICK_FENCING);
    create_replicated(&cluster, "java-bounced", PARTITIONS);
    let load = JavaLoad::start(&cluster, "java-bounced");
    wait_for_writes(&cluster, "java-bounced", PARTITIONS, WRITES_BETWEEN_FAULTS);
    bounce_leaders(&mut cluster, "java-bounced", PARTITIONS);
    let deliveries = load.finish();
    let read = consume_all(&cluster, "java-bounced", PARTITIONS);
    check_exactly_once(&deliveries, &read);
    let copies = tempfile::tempdir().unwrap();
    kill_and_compare_replicas(
        &mut cluster,
        "java-bounced",
        PARTITIONS,
        false,
        copies.path(),
    );
}

/// Acceptance 5 with the Java client: a rolling restart (SIGTERM, a
/// controlled shutdown) of every broker surfaces no error to Kafka's
/// producer, which only retries.
#[test]
fn java_producer_sees_no_error_through_a_rolling_restart() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &QUICK_FENCING);
    create_replicated(&cluster, "java-rolled", PARTITIONS);
    let load = JavaLoad::start(&cluster, "java-rolled");
    wait_for_writes(&cluster, "java-rolled", PARTITIONS, WRITES_BETWEEN_FAULTS);
    roll(&mut cluster, "java-rolled", PARTITIONS);
    let deliveries = load.finish();
    assert_eq!(
        *deliveries.errors.lock().unwrap(),
        Vec::<String>::new(),
        "no produce error surfaces"
    );
    let read = consume_all(&cluster, "java-rolled", PARTITIONS);
    check_exactly_once(&deliveries, &read);
    let copies = tempfile::tempdir().unwrap();
    kill_and_compare_replicas(
        &mut cluster,
        "java-rolled",
        PARTITIONS,
        false,
        copies.path(),
    );
}
