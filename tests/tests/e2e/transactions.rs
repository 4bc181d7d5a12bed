//! Transactions from the client's side (issue 6; SPEC P4, C1, C7), with
//! librdkafka's transactional producer and read_committed consumers against
//! a real broker: commit and abort visibility, zombie fencing, timeouts, and
//! a broker crash right after a commit.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::deliveries::Deliveries;
use rdkafka::ClientConfig;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TIMEOUT: Duration = Duration::from_secs(30);

/// A broker that checks for timed-out transactions every 200 ms.
fn start(dir: &std::path::Path) -> Broker {
    Broker::start(
        BROOK,
        dir,
        2,
        &[
            "--set",
            "transaction.abort.timed.out.transaction.cleanup.interval.ms=200",
            "--set",
            "group.initial.rebalance.delay.ms=0",
        ],
    )
}

fn create_topic(broker: &Broker, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .create()
        .expect("an admin client");
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let created = futures::executor::block_on(admin.create_topics([&topic], &AdminOptions::new()))
        .expect("CreateTopics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
}

fn transactional_producer(
    broker: &Broker,
    transactional_id: &str,
    timeout_ms: u32,
) -> BaseProducer<Deliveries> {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("transactional.id", transactional_id)
        .set("transaction.timeout.ms", timeout_ms.to_string())
        .set("linger.ms", "2")
        // librdkafka requires message.timeout.ms <= transaction.timeout.ms.
        .set("message.timeout.ms", timeout_ms.min(30_000).to_string())
        .create_with_context(Deliveries::default())
        .expect("a transactional producer");
    producer
        .init_transactions(TIMEOUT)
        .expect("init_transactions");
    producer
}

/// Sends `count` records round-robin over `partitions`, values `prefix-i`.
fn send_all(
    producer: &BaseProducer<Deliveries>,
    topic: &str,
    partitions: i32,
    prefix: &str,
    count: usize,
) {
    for index in 0..count {
        let value = format!("{prefix}-{index}");
        let partition = (index % partitions as usize) as i32;
        let mut record = BaseRecord::to(topic)
            .payload(&value)
            .key("k")
            .partition(partition);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((_, returned)) => {
                    producer.poll(Duration::from_millis(5));
                    record = returned;
                }
            }
        }
    }
    producer.flush(TIMEOUT).expect("flush");
}

fn consumer(broker: &Broker, isolation: &str, group: &str) -> BaseConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", group)
        .set("isolation.level", isolation)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .create()
        .expect("a consumer")
}

/// Values read from `topic` until `quiet` passes with nothing new (or
/// `expected` values arrived and `quiet` passed after).
fn read_values(
    consumer: &BaseConsumer,
    topic: &str,
    expected: usize,
    quiet: Duration,
) -> Vec<String> {
    consumer.subscribe(&[topic]).unwrap();
    let deadline = Instant::now() + TIMEOUT;
    let mut values = Vec::new();
    let mut last_progress = Instant::now();
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(message)) => {
                values.push(
                    String::from_utf8_lossy(message.payload().unwrap_or_default()).into_owned(),
                );
                last_progress = Instant::now();
            }
            Some(Err(error)) => panic!("consume failed: {error}"),
            None => {
                if values.len() >= expected && last_progress.elapsed() >= quiet {
                    break;
                }
            }
        }
    }
    values
}

#[test]
fn committed_records_are_visible_to_read_committed_and_aborted_ones_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    create_topic(&broker, "txn-visibility", 3);
    let producer = transactional_producer(&broker, "visibility", 60_000);
    producer.begin_transaction().unwrap();
    send_all(&producer, "txn-visibility", 3, "committed", 1_000);
    producer.commit_transaction(TIMEOUT).expect("commit");
    producer.begin_transaction().unwrap();
    send_all(&producer, "txn-visibility", 3, "aborted", 500);
    producer.abort_transaction(TIMEOUT).expect("abort");
    assert!(producer.context().errors.lock().unwrap().is_empty());

    let committed = read_values(
        &consumer(&broker, "read_committed", "rc"),
        "txn-visibility",
        1_000,
        Duration::from_secs(2),
    );
    assert_eq!(
        committed.len(),
        1_000,
        "read_committed sees the committed records once each"
    );
    assert!(
        committed
            .iter()
            .all(|value| value.starts_with("committed-"))
    );
    let all = read_values(
        &consumer(&broker, "read_uncommitted", "ru"),
        "txn-visibility",
        1_500,
        Duration::from_secs(1),
    );
    assert_eq!(
        all.len(),
        1_500,
        "read_uncommitted sees the aborted records too"
    );
    assert_eq!(
        all.iter()
            .filter(|value| value.starts_with("aborted-"))
            .count(),
        500
    );
}

#[test]
fn a_second_producer_with_the_same_id_fences_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    create_topic(&broker, "txn-fencing", 1);
    let zombie = transactional_producer(&broker, "fenced-id", 60_000);
    zombie.begin_transaction().unwrap();
    send_all(&zombie, "txn-fencing", 1, "zombie", 10);
    // The new instance's InitProducerId aborts the zombie's transaction and
    // bumps the epoch.
    let successor = transactional_producer(&broker, "fenced-id", 60_000);
    successor.begin_transaction().unwrap();
    send_all(&successor, "txn-fencing", 1, "successor", 10);
    successor
        .commit_transaction(TIMEOUT)
        .expect("the successor commits");
    // The zombie can no longer write or commit.
    let late = BaseRecord::to("txn-fencing")
        .payload("zombie-late")
        .key("k");
    let sent = zombie.send(late);
    let _ = zombie.flush(Duration::from_secs(5));
    let committed = zombie.commit_transaction(Duration::from_secs(10));
    assert!(
        sent.is_err() || committed.is_err(),
        "the zombie's commit must fail"
    );
    if let Err(KafkaError::Transaction(error)) = committed {
        assert!(error.is_fatal() || error.txn_requires_abort(), "{error:?}");
    }
    let values = read_values(
        &consumer(&broker, "read_committed", "fencing"),
        "txn-fencing",
        10,
        Duration::from_secs(2),
    );
    assert_eq!(values.len(), 10);
    assert!(
        values.iter().all(|value| value.starts_with("successor-")),
        "{values:?}"
    );
}

#[test]
fn a_transaction_past_its_timeout_is_aborted_and_consumers_move_on() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start(dir.path());
    create_topic(&broker, "txn-timeout", 1);
    let stalled = transactional_producer(&broker, "stalled", 1_000);
    stalled.begin_transaction().unwrap();
    send_all(&stalled, "txn-timeout", 1, "stalled", 5);
    // Never committed: the coordinator aborts it after its 1 s timeout,
    // and the abort marker moves the last stable offset past it (what a
    // read_committed client's ListOffsets answers as the end).
    let watcher = consumer(&broker, "read_committed", "timeout-watch");
    let deadline = Instant::now() + TIMEOUT;
    loop {
        let (_, end) = watcher.fetch_watermarks("txn-timeout", 0, TIMEOUT).unwrap();
        if end == 6 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stalled transaction was never aborted (last stable offset {end})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let writer = transactional_producer(&broker, "after-timeout", 60_000);
    writer.begin_transaction().unwrap();
    send_all(&writer, "txn-timeout", 1, "later", 5);
    writer.commit_transaction(TIMEOUT).expect("commit");
    let values = read_values(
        &consumer(&broker, "read_committed", "timeout"),
        "txn-timeout",
        5,
        Duration::from_secs(2),
    );
    assert_eq!(
        values.len(),
        5,
        "the stable offset moved past the aborted transaction: {values:?}"
    );
    assert!(
        values.iter().all(|value| value.starts_with("later-")),
        "{values:?}"
    );
    drop(stalled);
}

#[test]
fn a_commit_interrupted_by_a_broker_crash_completes_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = start(dir.path());
    create_topic(&broker, "txn-crash", 2);
    let producer = transactional_producer(&broker, "crash-id", 60_000);
    producer.begin_transaction().unwrap();
    send_all(&producer, "txn-crash", 2, "crash", 200);
    producer.commit_transaction(TIMEOUT).expect("commit");
    // EndTxn answers once PrepareCommit is durable; the markers and the
    // CompleteCommit record may still be on their way.
    broker.kill();
    drop(producer);
    broker.restart();
    let values = read_values(
        &consumer(&broker, "read_committed", "crash"),
        "txn-crash",
        200,
        Duration::from_secs(2),
    );
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for value in &values {
        *counts.entry(value.as_str()).or_default() += 1;
    }
    assert_eq!(values.len(), 200, "every committed record, once");
    assert!(counts.values().all(|count| *count == 1));
}
