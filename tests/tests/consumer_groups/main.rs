//! Consumer groups with a real client (librdkafka via `rdkafka`) against a
//! real `brook serve`: partitions shared out among members, handed over
//! when a member leaves or dies, committed offsets that survive a broker
//! crash, independent groups, the first record's latency for a new group,
//! and static membership.
//!
//! This file holds what the tests share: the broker, producing, group
//! members and polling them. The tests are in a module per area:
//! [`rebalances`] (sharing partitions out, a member leaving, a static
//! member coming back), [`killed_member`] (a member that dies without
//! leaving: a second process, this test binary run as
//! [`killed_member::killable_member_process`], killed with SIGKILL),
//! [`offsets`] (committed offsets across a broker crash and between
//! groups) and [`new_group`] (the first record's latency).
//!
//! Its own test binary, not a module of `e2e` like the other end-to-end
//! tests: the first-record latency test keeps the cores to itself through
//! [`CORES`], which only this binary's tests take.

mod killed_member;
mod new_group;
mod offsets;
mod rebalances;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::deliveries::Deliveries;
use futures::executor::block_on;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientContext, TopicPartitionList};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// The longest any one phase of a test may take before it fails.
const TIMEOUT: Duration = Duration::from_secs(30);
/// How long each member is polled in a round.
const POLL: Duration = Duration::from_millis(20);
/// How long members are still polled after a phase is done, so that a late
/// duplicate or a late rebalance is seen.
const LINGER: Duration = Duration::from_millis(1_500);
/// The members' session timeout (and static members'), within the
/// broker's bounds set in [`start_broker`].
const SESSION_TIMEOUT_MS: u64 = 10_000;

/// Every test holds this shared while it runs, except the one that measures
/// a latency, which holds it alone: on two cores the other tests' brokers
/// and clients would otherwise be in its figure.
static CORES: RwLock<()> = RwLock::new(());

fn sharing_the_cores() -> RwLockReadGuard<'static, ()> {
    CORES.read().unwrap_or_else(PoisonError::into_inner)
}

fn alone_on_the_cores() -> RwLockWriteGuard<'static, ()> {
    CORES.write().unwrap_or_else(PoisonError::into_inner)
}

/// A broker whose groups start at once and accept short session timeouts.
fn start_broker(dir: &Path) -> Broker {
    Broker::start(
        BROOK,
        dir,
        2,
        &[
            "--set",
            "group.initial.rebalance.delay.ms=0",
            "--set",
            "group.min.session.timeout.ms=1000",
            "--set",
            "group.max.session.timeout.ms=60000",
        ],
    )
}

fn create_topic(broker: &Broker, name: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .create()
        .expect("an admin client");
    let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
    let results =
        block_on(admin.create_topics([&topic], &AdminOptions::new())).expect("CreateTopics");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

/// One record to produce: to `partition`, or by its key when `None`.
struct Record {
    partition: Option<i32>,
    key: String,
    payload: String,
}

/// `count` records to each of `partitions`, keyed `<tag>-<partition>-<i>`
/// with the payload `<tag> <partition> <i>`.
fn records_to(partitions: &[i32], count: usize, tag: &str) -> Vec<Record> {
    partitions
        .iter()
        .flat_map(|partition| {
            (0..count).map(move |index| Record {
                partition: Some(*partition),
                key: format!("{tag}-{partition}-{index}"),
                payload: format!("{tag} {partition} {index}"),
            })
        })
        .collect()
}

/// Produces `records` (acks=all), returns where each key went.
fn produce(broker: &Broker, topic: &str, records: &[Record]) -> HashMap<String, (i32, i64)> {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("acks", "all")
        .set("enable.idempotence", "false")
        .set("linger.ms", "5")
        .set("message.timeout.ms", "30000")
        .create_with_context(Deliveries::default())
        .expect("a producer");
    for record in records {
        let mut pending = BaseRecord::to(topic)
            .key(record.key.as_str())
            .payload(record.payload.as_str());
        if let Some(partition) = record.partition {
            pending = pending.partition(partition);
        }
        while let Err((_, returned)) = producer.send(pending) {
            producer.poll(Duration::from_millis(10));
            pending = returned;
        }
    }
    producer.flush(TIMEOUT).expect("flush");
    let deliveries = producer.context().clone();
    let errors = deliveries.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "{errors:?}");
    let delivered = deliveries.delivered.lock().unwrap().clone();
    assert_eq!(delivered.len(), records.len(), "every record acknowledged");
    delivered
}

/// What a member's rebalance callback saw.
#[derive(Debug, Clone, PartialEq)]
enum Rebalanced {
    Assigned(BTreeSet<i32>),
    Revoked(BTreeSet<i32>),
    Failed(String),
}

/// Records every rebalance callback of a consumer.
#[derive(Clone, Default)]
struct Rebalances(Arc<Mutex<Vec<Rebalanced>>>);

impl Rebalances {
    fn seen(&self) -> Vec<Rebalanced> {
        self.0.lock().unwrap().clone()
    }
}

impl ClientContext for Rebalances {}

impl ConsumerContext for Rebalances {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let event = match rebalance {
            Rebalance::Assign(list) => Rebalanced::Assigned(partitions_of(list)),
            Rebalance::Revoke(list) => Rebalanced::Revoked(partitions_of(list)),
            Rebalance::Error(error) => Rebalanced::Failed(error.to_string()),
        };
        self.0.lock().unwrap().push(event);
    }
}

type GroupConsumer = BaseConsumer<Rebalances>;

fn partitions_of(list: &TopicPartitionList) -> BTreeSet<i32> {
    list.elements()
        .iter()
        .map(|element| element.partition())
        .collect()
}

/// A group member with manual commits that starts from the earliest record
/// where its group has no offset; `settings` override the defaults.
fn consumer(
    address: &str,
    group: &str,
    client_id: &str,
    settings: &[(&str, &str)],
) -> GroupConsumer {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", address)
        .set("group.id", group)
        .set("client.id", client_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("enable.partition.eof", "false")
        .set("session.timeout.ms", SESSION_TIMEOUT_MS.to_string())
        .set("heartbeat.interval.ms", "500")
        .set("socket.timeout.ms", "10000");
    for (key, value) in settings {
        config.set(*key, *value);
    }
    config
        .create_with_context(Rebalances::default())
        .expect("a consumer")
}

fn assigned(consumer: &GroupConsumer) -> BTreeSet<i32> {
    partitions_of(&consumer.assignment().expect("an assignment"))
}

/// Every consumer has `each` partitions, none shared.
fn balanced(consumers: &[&GroupConsumer], each: usize) -> bool {
    let assignments: Vec<BTreeSet<i32>> = consumers.iter().map(|c| assigned(c)).collect();
    let all: BTreeSet<i32> = assignments.iter().flatten().copied().collect();
    assignments
        .iter()
        .all(|partitions| partitions.len() == each)
        && all.len() == each * consumers.len()
}

/// One record as a member got it.
#[derive(Debug, Clone)]
struct Delivery {
    member: usize,
    partition: i32,
    offset: i64,
    key: String,
    payload: String,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Commit {
    Never,
    /// Synchronously, after each record is processed.
    EachRecord,
}

/// Polls each member once, logging what they get.
fn poll_round(members: &[&GroupConsumer], commit: Commit, log: &mut Vec<Delivery>) {
    for (index, member) in members.iter().enumerate() {
        match member.poll(POLL) {
            None => {}
            Some(Err(error)) => eprintln!("member {index}: {error}"),
            Some(Ok(message)) => {
                log.push(Delivery {
                    member: index,
                    partition: message.partition(),
                    offset: message.offset(),
                    key: String::from_utf8_lossy(message.key().unwrap_or_default()).into_owned(),
                    payload: String::from_utf8_lossy(message.payload().unwrap_or_default())
                        .into_owned(),
                });
                if commit == Commit::EachRecord {
                    member
                        .commit_message(&message, CommitMode::Sync)
                        .unwrap_or_else(|error| {
                            panic!(
                                "member {index} committing {}@{}: {error}",
                                message.partition(),
                                message.offset()
                            )
                        });
                }
            }
        }
    }
}

/// Polls the members until `done` holds; fails after [`TIMEOUT`].
fn poll_until(
    members: &[&GroupConsumer],
    commit: Commit,
    log: &mut Vec<Delivery>,
    what: &str,
    mut done: impl FnMut(&[Delivery]) -> bool,
) {
    let deadline = Instant::now() + TIMEOUT;
    while !done(log) {
        assert!(
            Instant::now() < deadline,
            "not within {TIMEOUT:?}: {what}; assignments {:?}, {} records",
            members.iter().map(|m| assigned(m)).collect::<Vec<_>>(),
            log.len()
        );
        poll_round(members, commit, log);
    }
}

/// Polls the members for `how_long`.
fn poll_for(
    members: &[&GroupConsumer],
    commit: Commit,
    log: &mut Vec<Delivery>,
    how_long: Duration,
) {
    let end = Instant::now() + how_long;
    while Instant::now() < end {
        poll_round(members, commit, log);
    }
}

/// The (partition, offset) pairs delivered more than once.
fn duplicates(log: &[Delivery]) -> Vec<(i32, i64)> {
    let mut counts: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    for delivery in log {
        *counts
            .entry((delivery.partition, delivery.offset))
            .or_default() += 1;
    }
    counts
        .into_iter()
        .filter(|(_, count)| *count > 1)
        .map(|(position, _)| position)
        .collect()
}
