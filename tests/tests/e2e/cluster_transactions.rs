//! Transactions in a cluster (acceptance 7 of the replication issue): a
//! transaction's partitions are led by several brokers and its coordinator
//! by one of them, so partition leaders verify transactional batches with
//! the coordinator's broker (AddPartitionsToTxn, VerifyOnly) and the
//! coordinator writes its markers through each partition's leader
//! (WriteTxnMarkers). librdkafka produces and reads `read_committed`.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use brook_tests::cluster::Cluster;
use rdkafka::Message;
use rdkafka::consumer::BaseConsumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use crate::cluster_replication::{
    QUICK_FENCING, bootstrap, coordinator_of, create_replicated, leaders,
};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TIMEOUT: Duration = Duration::from_secs(60);
const PARTITIONS: i32 = 3;
/// Records per transaction, spread over every partition.
const RECORDS: usize = 30;

fn transactional(cluster: &Cluster, transactional_id: &str) -> BaseProducer {
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap(cluster))
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", "60000")
        .set("linger.ms", "2")
        .create()
        .expect("a transactional producer");
    producer
        .init_transactions(TIMEOUT)
        .expect("init_transactions");
    producer
}

/// One transaction's records, `prefix-i`, on every partition, flushed
/// (appended and acknowledged, not yet committed).
fn send_transaction(producer: &BaseProducer, topic: &str, prefix: &str) {
    producer.begin_transaction().expect("begin");
    for index in 0..RECORDS {
        let value = format!("{prefix}-{index}");
        let partition = (index % PARTITIONS as usize) as i32;
        brook_tests::librdkafka::send_when_queued(
            producer,
            BaseRecord::to(topic)
                .key(&value)
                .payload(&value)
                .partition(partition),
        );
    }
    producer.flush(TIMEOUT).expect("flush");
}

/// Values `read_committed` reads from `topic`, once `expected` have
/// arrived and a quiet second passed.
fn read_committed(cluster: &Cluster, topic: &str, expected: usize) -> Vec<String> {
    let consumer: BaseConsumer =
        brook_tests::librdkafka::assigned_from_start(&bootstrap(cluster), topic, PARTITIONS);
    let deadline = Instant::now() + TIMEOUT;
    let mut values = Vec::new();
    let mut last = Instant::now();
    while values.len() < expected || last.elapsed() < Duration::from_secs(1) {
        assert!(Instant::now() < deadline, "read {values:?}");
        // Errors (a dead broker of the bootstrap list) are only reported.
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            values.push(String::from_utf8(message.payload().unwrap().to_vec()).unwrap());
            last = Instant::now();
        }
    }
    values
}

fn values(prefix: &str) -> BTreeSet<String> {
    (0..RECORDS)
        .map(|index| format!("{prefix}-{index}"))
        .collect()
}

/// A transaction over partitions led by all three brokers commits, and
/// `read_committed` sees it once its markers are on every leader.
#[test]
fn a_transaction_over_partitions_led_by_every_broker_commits() {
    let root = tempfile::tempdir().unwrap();
    let (cluster, _) = Cluster::formed(BROOK, root.path(), 3, &QUICK_FENCING);
    create_replicated(&cluster, "spread", PARTITIONS);
    let led_by: BTreeSet<i32> = leaders(&cluster, 0, "spread")
        .unwrap()
        .into_values()
        .collect();
    assert_eq!(led_by.len(), 3, "one partition led by each broker");
    let producer = transactional(&cluster, "spread-writer");
    send_transaction(&producer, "spread", "a");
    producer.commit_transaction(TIMEOUT).expect("commit");
    send_transaction(&producer, "spread", "dropped");
    producer.abort_transaction(TIMEOUT).expect("abort");
    send_transaction(&producer, "spread", "b");
    producer.commit_transaction(TIMEOUT).expect("commit");
    let read = read_committed(&cluster, "spread", 2 * RECORDS);
    let mut expected = values("a");
    expected.extend(values("b"));
    assert_eq!(read.len(), 2 * RECORDS, "each record once: {read:?}");
    assert_eq!(read.into_iter().collect::<BTreeSet<_>>(), expected);
    // Kafka creates __transaction_state with transaction.state.log.min.isr
    // (2) as its min.insync.replicas.
    assert_eq!(
        topic_config(&cluster, "__transaction_state", "min.insync.replicas").as_deref(),
        Some("2")
    );
}

/// `topic`'s config `name` as DescribeConfigs through node 0 says.
fn topic_config(cluster: &Cluster, topic: &str, name: &str) -> Option<String> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    use rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &cluster.nodes[0].address)
        .create()
        .expect("an admin client");
    let described = futures::executor::block_on(
        admin.describe_configs([&ResourceSpecifier::Topic(topic)], &AdminOptions::new()),
    )
    .expect("DescribeConfigs");
    let resource = described[0].as_ref().expect("the topic's configs");
    resource.get(name)?.value.clone()
}

/// Acceptance 7, transactions: a transaction whose records are written
/// when its coordinator's broker is killed ends all or nothing (committed
/// by the next coordinator, or aborted), never half visible to
/// `read_committed`; the producer's next transaction commits.
#[test]
fn a_transaction_in_flight_survives_its_coordinators_death() {
    let root = tempfile::tempdir().unwrap();
    let (mut cluster, _) = Cluster::formed(BROOK, root.path(), 3, &QUICK_FENCING);
    create_replicated(&cluster, "ledger", PARTITIONS);
    let producer = transactional(&cluster, "ledger-writer");
    send_transaction(&producer, "ledger", "a");
    producer.commit_transaction(TIMEOUT).expect("commit");

    let coordinator = coordinator_of(&cluster, 0, 1, "ledger-writer");
    send_transaction(&producer, "ledger", "b");
    cluster.nodes[coordinator].kill();
    let killed = Instant::now();
    let deadline = killed + TIMEOUT;
    let committed = loop {
        match producer.commit_transaction(TIMEOUT) {
            Ok(()) => break true,
            Err(KafkaError::Transaction(error)) if error.txn_requires_abort() => {
                producer.abort_transaction(TIMEOUT).expect("abort");
                break false;
            }
            Err(KafkaError::Transaction(error)) if error.is_retriable() => {
                assert!(Instant::now() < deadline, "no commit: {error:?}");
            }
            Err(error) => panic!("the commit failed for good: {error:?}"),
        }
    };
    println!("the commit ended {:?} after the kill", killed.elapsed());
    send_transaction(&producer, "ledger", "c");
    producer
        .commit_transaction(TIMEOUT)
        .expect("the next commit");
    let survivor = (coordinator + 1) % 3;
    assert_ne!(
        coordinator_of(&cluster, survivor, 1, "ledger-writer"),
        coordinator,
        "the coordinator moved"
    );

    let mut expected = values("a");
    if committed {
        expected.extend(values("b"));
    }
    expected.extend(values("c"));
    let read = read_committed(&cluster, "ledger", expected.len());
    println!(
        "the transaction in flight was {}",
        if committed { "committed" } else { "aborted" }
    );
    assert_eq!(read.len(), expected.len(), "each record once: {read:?}");
    assert_eq!(read.into_iter().collect::<BTreeSet<_>>(), expected);
}
