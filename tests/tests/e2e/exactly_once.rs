//! Exactly-once consume–transform–produce (issue 6, acceptance 3; SPEC C7):
//! a librdkafka consumer in a group reads input records, and a
//! transactional producer writes one output per input and commits the
//! consumer's offsets in the same transaction (`send_offsets_to_transaction`,
//! i.e. AddOffsetsToTxn + TxnOffsetCommit). The transformer runs as a child
//! process (this test binary again) and is killed with SIGKILL mid-way; its
//! restart fences the old instance and resumes from the committed offsets.
//! Every input must appear exactly once in the read_committed output, and
//! the group's committed input offsets must cover every input.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::deliveries::Deliveries;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const INPUT: &str = "eos-in";
const OUTPUT: &str = "eos-out";
const GROUP: &str = "eos-group";
const PARTITIONS: i32 = 3;
const RECORDS: usize = 3_000;
const TIMEOUT: Duration = Duration::from_secs(30);
/// The transformer's test as libtest names it for `--exact`: its path in
/// the test binary, which has a module per file.
const CHILD_TEST: &str = "exactly_once::transformer_process";
const CHILD_ADDRESS: &str = "BROOK_EOS_ADDRESS";
const CHILD_MARK: &str = "EOS-TRANSFORMER ";

fn create_topics(broker: &Broker) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .create()
        .expect("an admin client");
    let topics =
        [INPUT, OUTPUT].map(|name| NewTopic::new(name, PARTITIONS, TopicReplication::Fixed(1)));
    let created = futures::executor::block_on(admin.create_topics(&topics, &AdminOptions::new()))
        .expect("CreateTopics");
    assert!(created.iter().all(Result::is_ok), "{created:?}");
}

fn produce_inputs(broker: &Broker) {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("linger.ms", "2")
        .create_with_context(Deliveries::default())
        .expect("a producer");
    for index in 0..RECORDS {
        let value = index.to_string();
        let mut record = BaseRecord::to(INPUT)
            .payload(&value)
            .key("k")
            .partition((index % PARTITIONS as usize) as i32);
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
    assert!(producer.context().errors.lock().unwrap().is_empty());
}

/// The transformer, run as a child process by [`Transformer::start`]:
/// reads inputs in small transactions and prints how many it committed.
#[test]
#[ignore = "run as a child process by the exactly-once test"]
fn transformer_process() {
    let Ok(address) = std::env::var(CHILD_ADDRESS) else {
        return;
    };
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &address)
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("isolation.level", "read_committed")
        .set("session.timeout.ms", "2000")
        .set("heartbeat.interval.ms", "200")
        .create()
        .expect("a consumer");
    consumer.subscribe(&[INPUT]).unwrap();
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &address)
        .set("transactional.id", "eos-transformer")
        .set("linger.ms", "1")
        .create_with_context(Deliveries::default())
        .expect("a transactional producer");
    producer
        .init_transactions(TIMEOUT)
        .expect("init_transactions");
    let mut committed = 0usize;
    let mut idle_since = Instant::now();
    while idle_since.elapsed() < Duration::from_secs(6) {
        let mut batch = Vec::new();
        while batch.len() < 50 {
            match consumer.poll(Duration::from_millis(50)) {
                Some(Ok(message)) => {
                    batch.push(String::from_utf8_lossy(message.payload().unwrap()).into_owned())
                }
                Some(Err(error)) => panic!("consume failed: {error}"),
                None => break,
            }
        }
        if batch.is_empty() {
            continue;
        }
        idle_since = Instant::now();
        producer.begin_transaction().expect("begin");
        for value in &batch {
            let output = format!("t-{value}");
            let record = BaseRecord::to(OUTPUT).payload(&output).key("k");
            producer
                .send(record)
                .map_err(|(error, _)| error)
                .expect("send");
        }
        let positions = consumer.position().expect("positions");
        let metadata = consumer.group_metadata().expect("group metadata");
        producer
            .send_offsets_to_transaction(&positions, &metadata, TIMEOUT)
            .expect("send_offsets_to_transaction");
        producer.commit_transaction(TIMEOUT).expect("commit");
        committed += batch.len();
        println!("{CHILD_MARK}committed {committed}");
    }
    println!("{CHILD_MARK}idle");
}

/// The transformer's process; killed when dropped.
struct Transformer {
    process: Child,
    lines: mpsc::Receiver<String>,
}

impl Transformer {
    fn start(address: &str) -> Transformer {
        let mut process = Command::new(std::env::current_exe().unwrap())
            .args([
                CHILD_TEST,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ADDRESS, address)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the transformer");
        let stdout = process.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Some(at) = line.find(CHILD_MARK)
                    && sender
                        .send(line[at + CHILD_MARK.len()..].to_owned())
                        .is_err()
                {
                    break;
                }
            }
        });
        Transformer { process, lines }
    }

    /// Waits until the transformer reports `wanted` (a line starting so).
    fn wait_for(&self, matches: impl Fn(&str) -> bool, within: Duration) -> bool {
        let deadline = Instant::now() + within;
        while let Some(left) = deadline.checked_duration_since(Instant::now()) {
            match self.lines.recv_timeout(left) {
                Ok(line) if matches(&line) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    }
}

impl Drop for Transformer {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

fn read_outputs(broker: &Broker) -> Vec<String> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", "eos-check")
        .set("isolation.level", "read_committed")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .expect("a consumer");
    consumer.subscribe(&[OUTPUT]).unwrap();
    let mut values = Vec::new();
    let deadline = Instant::now() + TIMEOUT;
    let mut last = Instant::now();
    while Instant::now() < deadline
        && (values.len() < RECORDS || last.elapsed() < Duration::from_secs(2))
    {
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("a record");
            values.push(String::from_utf8_lossy(message.payload().unwrap()).into_owned());
            last = Instant::now();
        }
    }
    values
}

fn committed_input_offsets(broker: &Broker) -> i64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", GROUP)
        .create()
        .expect("a consumer");
    let mut partitions = TopicPartitionList::new();
    for partition in 0..PARTITIONS {
        partitions.add_partition(INPUT, partition);
    }
    let committed = consumer
        .committed_offsets(partitions, TIMEOUT)
        .expect("committed offsets");
    committed
        .elements()
        .iter()
        .map(|element| match element.offset() {
            Offset::Offset(offset) => offset,
            _ => 0,
        })
        .sum()
}

#[test]
fn consume_transform_produce_is_exactly_once_across_a_killed_transformer() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        BROOK,
        dir.path(),
        2,
        &[
            "--set",
            "group.initial.rebalance.delay.ms=0",
            "--set",
            "group.min.session.timeout.ms=1000",
        ],
    );
    create_topics(&broker);
    produce_inputs(&broker);
    let first = Transformer::start(&broker.address);
    let progressed = first.wait_for(
        |line| {
            line.strip_prefix("committed ")
                .and_then(|count| count.parse::<usize>().ok())
                .is_some_and(|count| count >= 500)
        },
        Duration::from_secs(60),
    );
    assert!(progressed, "the transformer committed some transactions");
    drop(first); // SIGKILL, possibly mid-transaction
    let second = Transformer::start(&broker.address);
    assert!(
        second.wait_for(|line| line == "idle", Duration::from_secs(120)),
        "the restarted transformer finished"
    );
    let outputs = read_outputs(&broker);
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for value in &outputs {
        *counts.entry(value.as_str()).or_default() += 1;
    }
    let duplicated: Vec<_> = counts
        .iter()
        .filter(|(_, count)| **count > 1)
        .take(5)
        .collect();
    assert!(duplicated.is_empty(), "outputs seen twice: {duplicated:?}");
    assert_eq!(outputs.len(), RECORDS, "one output per input");
    assert!((0..RECORDS).all(|index| counts.contains_key(format!("t-{index}").as_str())));
    assert_eq!(
        committed_input_offsets(&broker),
        RECORDS as i64,
        "the group's committed input offsets cover every input"
    );
}
