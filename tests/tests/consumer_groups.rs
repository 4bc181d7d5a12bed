//! Consumer groups with a real client (librdkafka via `rdkafka`) against a
//! real `brook serve`: partitions shared out among members, handed over
//! when a member leaves or dies, committed offsets that survive a broker
//! crash, independent groups, the first record's latency for a new group,
//! and static membership.
//!
//! A member that dies without leaving is a second process (this test binary
//! run as [`killable_member_process`]) killed with SIGKILL.
//!
//! Its own test binary, not a module of `e2e` like the other end-to-end
//! tests: the first-record latency test keeps the cores to itself through
//! [`CORES`], which only this binary's tests take.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard, mpsc};
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use brook_tests::deliveries::Deliveries;
use brook_tests::groups::generation_of;
use brook_tests::raw;
use futures::executor::block_on;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientContext, Offset, TopicPartitionList};

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
/// The killed member's session timeout: short, so the test is too.
const KILLED_SESSION_TIMEOUT_MS: u64 = 2_000;
/// Marks the lines of [`killable_member_process`] among the test harness's.
const CHILD_MARK: &str = "group-member> ";
const CHILD_TEST: &str = "killable_member_process";
const CHILD_ADDRESS: &str = "BROOK_GROUP_MEMBER_ADDRESS";
const CHILD_TOPIC: &str = "BROOK_GROUP_MEMBER_TOPIC";
const CHILD_GROUP: &str = "BROOK_GROUP_MEMBER_GROUP";
/// The child member gives up by itself after this, should nobody kill it.
const CHILD_LIFETIME: Duration = Duration::from_secs(90);

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

/// The end offset of each partition after `delivered`.
fn end_offsets(delivered: &HashMap<String, (i32, i64)>) -> BTreeMap<i32, i64> {
    let mut ends = BTreeMap::new();
    for (partition, offset) in delivered.values() {
        let end = ends.entry(*partition).or_insert(0);
        *end = (*end).max(offset + 1);
    }
    ends
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

#[test]
fn three_members_share_six_partitions_and_get_every_record_once() {
    const TOPIC: &str = "shared";
    const RECORDS: usize = 3_000;
    let _cores = sharing_the_cores();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 6);
    let members: Vec<GroupConsumer> = (0..3)
        .map(|index| {
            consumer(
                &broker.address,
                "sharing",
                &format!("member-{index}"),
                &[("enable.auto.commit", "true")],
            )
        })
        .collect();
    for member in &members {
        member.subscribe(&[TOPIC]).unwrap();
    }
    let members: Vec<&GroupConsumer> = members.iter().collect();
    let mut log = Vec::new();
    poll_until(
        &members,
        Commit::Never,
        &mut log,
        "two partitions each",
        |_| balanced(&members, 2),
    );
    let assignments: Vec<BTreeSet<i32>> = members.iter().map(|m| assigned(m)).collect();
    eprintln!("assignments {assignments:?}");

    let records: Vec<Record> = (0..RECORDS)
        .map(|index| Record {
            partition: None,
            key: format!("id-{index}"),
            payload: format!("record {index}"),
        })
        .collect();
    let delivered = produce(&broker, TOPIC, &records);
    let used: BTreeSet<i32> = delivered
        .values()
        .map(|(partition, _)| *partition)
        .collect();
    assert_eq!(used.len(), 6, "the keys spread over every partition");
    poll_until(&members, Commit::Never, &mut log, "every record", |log| {
        log.iter().map(|d| &d.key).collect::<BTreeSet<_>>().len() == RECORDS
    });
    poll_for(&members, Commit::Never, &mut log, LINGER);

    assert_eq!(duplicates(&log), [], "no record twice");
    assert_eq!(log.len(), RECORDS);
    for delivery in &log {
        assert_eq!(
            delivered[&delivery.key],
            (delivery.partition, delivery.offset),
            "{delivery:?} is where it was acknowledged"
        );
        assert!(
            assignments[delivery.member].contains(&delivery.partition),
            "{delivery:?} came to the member that owns its partition"
        );
    }
    let now: Vec<BTreeSet<i32>> = members.iter().map(|m| assigned(m)).collect();
    assert_eq!(now, assignments, "no rebalance while consuming");
}

#[test]
fn a_member_that_leaves_hands_its_partitions_over_in_one_rebalance() {
    const TOPIC: &str = "handed-over";
    const EACH: usize = 50;
    let _cores = sharing_the_cores();
    let partitions: Vec<i32> = (0..6).collect();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 6);
    let make = |name: &str| consumer(&broker.address, "leaving", name, &[]);
    let (first, second, leaving) = (make("first"), make("second"), make("leaving"));
    for member in [&first, &second, &leaving] {
        member.subscribe(&[TOPIC]).unwrap();
    }
    let mut log = Vec::new();
    let leaving_partitions = {
        let all = [&first, &second, &leaving];
        poll_until(
            &all,
            Commit::EachRecord,
            &mut log,
            "two partitions each",
            |_| balanced(&all, 2),
        );
        produce(&broker, TOPIC, &records_to(&partitions, EACH, "before"));
        poll_until(
            &all,
            Commit::EachRecord,
            &mut log,
            "the first records",
            |log| log.len() >= EACH * partitions.len(),
        );
        assigned(&leaving)
    };
    let seen_before = [first.context().seen().len(), second.context().seen().len()];

    // Unsubscribe and close: librdkafka sends LeaveGroup.
    leaving.unsubscribe();
    drop(leaving);
    let left = Instant::now();
    let remaining = [&first, &second];
    poll_until(
        &remaining,
        Commit::EachRecord,
        &mut log,
        "three partitions each",
        |_| balanced(&remaining, 3),
    );
    eprintln!(
        "the two took over all six partitions {:?} after the leave",
        left.elapsed()
    );
    poll_for(&remaining, Commit::EachRecord, &mut log, LINGER);
    for (index, member) in remaining.iter().enumerate() {
        let events = member.context().seen()[seen_before[index]..].to_vec();
        assert!(
            matches!(
                events.as_slice(),
                [Rebalanced::Revoked(old), Rebalanced::Assigned(new)]
                    if old.len() == 2 && *new == assigned(member)
            ),
            "member {index}: one rebalance (revoke two, assign three), saw {events:?}"
        );
    }

    // The leaver's partitions resume after its last commit: nothing twice.
    produce(&broker, TOPIC, &records_to(&partitions, EACH, "after"));
    poll_until(
        &remaining,
        Commit::EachRecord,
        &mut log,
        "the later records",
        |log| {
            log.iter()
                .filter(|d| d.payload.starts_with("after"))
                .count()
                >= EACH * partitions.len()
        },
    );
    poll_for(&remaining, Commit::EachRecord, &mut log, LINGER);
    assert_eq!(duplicates(&log), [], "no record twice");
    assert_eq!(log.len(), 2 * EACH * partitions.len());
    for partition in leaving_partitions {
        let first_after = log
            .iter()
            .find(|d| d.partition == partition && d.payload.starts_with("after"))
            .unwrap();
        assert_eq!(first_after.offset, EACH as i64, "{first_after:?}");
    }
}

/// The killed member's output, as the parent reads it.
#[derive(Debug, Default)]
struct ChildReport {
    assignment: BTreeSet<i32>,
    /// The last offset whose commit returned, by partition.
    committed: BTreeMap<i32, i64>,
    consumed: Vec<(i32, i64)>,
}

/// [`killable_member_process`] running as a child process; killed when
/// dropped.
struct ChildMember {
    process: Child,
    lines: mpsc::Receiver<String>,
    report: ChildReport,
}

impl ChildMember {
    fn start(address: &str, topic: &str, group: &str) -> ChildMember {
        let mut process = Command::new(std::env::current_exe().unwrap())
            .args([
                CHILD_TEST,
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ADDRESS, address)
            .env(CHILD_TOPIC, topic)
            .env(CHILD_GROUP, group)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("starting the member process");
        let stdout = process.stdout.take().unwrap();
        let (sender, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if sender.send(line).is_err() {
                    break;
                }
            }
        });
        ChildMember {
            process,
            lines,
            report: ChildReport::default(),
        }
    }

    /// Takes in what the child printed since the last call.
    fn drain(&mut self) -> &ChildReport {
        while let Ok(line) = self.lines.try_recv() {
            let Some(at) = line.find(CHILD_MARK) else {
                continue;
            };
            let words: Vec<&str> = line[at + CHILD_MARK.len()..].split_whitespace().collect();
            let number = |index: usize| words[index].parse::<i64>().unwrap();
            match words.as_slice() {
                ["assignment", list] => {
                    self.report.assignment = list
                        .split(',')
                        .filter(|item| !item.is_empty() && *item != "-")
                        .map(|item| item.parse().unwrap())
                        .collect();
                }
                ["consumed", _, _] => self.report.consumed.push((number(1) as i32, number(2))),
                ["committed", _, _] => {
                    self.report.committed.insert(number(1) as i32, number(2));
                }
                _ => panic!("the member process said: {line}"),
            }
        }
        &self.report
    }

    /// SIGKILL: no LeaveGroup, no last commit.
    fn kill(&mut self) {
        self.process.kill().unwrap();
        self.process.wait().unwrap();
    }
}

impl Drop for ChildMember {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// Not a test: the group member that
/// `a_killed_member_loses_its_partitions_after_its_session_times_out` starts
/// as a process and kills. It commits each record whose payload starts with
/// "commit" once processed, and reports on stdout.
#[test]
#[ignore = "a child process of another test, which sets its environment"]
fn killable_member_process() {
    let (Ok(address), Ok(topic), Ok(group)) = (
        std::env::var(CHILD_ADDRESS),
        std::env::var(CHILD_TOPIC),
        std::env::var(CHILD_GROUP),
    ) else {
        eprintln!("{CHILD_TEST} runs only as the child of another test");
        return;
    };
    let session_timeout = KILLED_SESSION_TIMEOUT_MS.to_string();
    let member = consumer(
        &address,
        &group,
        "killed",
        &[("session.timeout.ms", &session_timeout)],
    );
    member.subscribe(&[topic.as_str()]).unwrap();
    let mut reported = String::new();
    let end = Instant::now() + CHILD_LIFETIME;
    while Instant::now() < end {
        let polled = member.poll(POLL);
        let assignment: Vec<String> = assigned(&member).iter().map(i32::to_string).collect();
        let assignment = if assignment.is_empty() {
            "-".to_owned()
        } else {
            assignment.join(",")
        };
        if assignment != reported {
            println!("{CHILD_MARK}assignment {assignment}");
            reported = assignment;
        }
        let Some(polled) = polled else { continue };
        let message = polled.expect("a record");
        let (partition, offset) = (message.partition(), message.offset());
        println!("{CHILD_MARK}consumed {partition} {offset}");
        if message.payload().unwrap_or_default().starts_with(b"commit") {
            member
                .commit_message(&message, CommitMode::Sync)
                .expect("committing");
            println!("{CHILD_MARK}committed {partition} {}", offset + 1);
        }
    }
}

#[test]
fn a_killed_member_loses_its_partitions_after_its_session_times_out() {
    const TOPIC: &str = "abandoned";
    const GROUP: &str = "killing";
    const COMMITTED: usize = 100;
    const UNCOMMITTED: usize = 20;
    let _cores = sharing_the_cores();
    let partitions: Vec<i32> = (0..6).collect();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 6);
    let mut child = ChildMember::start(&broker.address, TOPIC, GROUP);
    let first = consumer(&broker.address, GROUP, "first", &[]);
    let second = consumer(&broker.address, GROUP, "second", &[]);
    first.subscribe(&[TOPIC]).unwrap();
    second.subscribe(&[TOPIC]).unwrap();
    let survivors = [&first, &second];
    let mut log = Vec::new();
    poll_until(
        &survivors,
        Commit::EachRecord,
        &mut log,
        "two partitions each",
        |_| {
            let child_has = child.drain().assignment.clone();
            let mut all: BTreeSet<i32> = child_has.clone();
            all.extend(assigned(&first));
            all.extend(assigned(&second));
            balanced(&survivors, 2) && child_has.len() == 2 && all.len() == 6
        },
    );
    let child_partitions = child.drain().assignment.clone();
    let survivor_partitions: BTreeSet<i32> = survivors.iter().flat_map(|m| assigned(m)).collect();
    eprintln!("the child has {child_partitions:?}");

    // Every member processes and commits these records.
    produce(
        &broker,
        TOPIC,
        &records_to(&partitions, COMMITTED, "commit"),
    );
    poll_until(
        &survivors,
        Commit::EachRecord,
        &mut log,
        "the committed records",
        |log| {
            let report = child.drain();
            log.len() >= COMMITTED * survivor_partitions.len()
                && child_partitions
                    .iter()
                    .all(|p| report.committed.get(p) == Some(&(COMMITTED as i64)))
        },
    );
    // The child processes these but dies before committing them.
    let child_list: Vec<i32> = child_partitions.iter().copied().collect();
    produce(
        &broker,
        TOPIC,
        &records_to(&child_list, UNCOMMITTED, "hold"),
    );
    let last = (COMMITTED + UNCOMMITTED - 1) as i64;
    poll_until(
        &survivors,
        Commit::EachRecord,
        &mut log,
        "the child's uncommitted records",
        |_| {
            let report = child.drain();
            child_partitions
                .iter()
                .all(|p| report.consumed.contains(&(*p, last)))
        },
    );
    let committed_by_child = child.drain().committed.clone();
    let before_kill = log.len();
    child.kill();
    let killed = Instant::now();

    poll_until(
        &survivors,
        Commit::EachRecord,
        &mut log,
        "the child's partitions moved",
        |log| {
            balanced(&survivors, 3)
                && child_partitions
                    .iter()
                    .all(|p| log.iter().any(|d| d.partition == *p && d.offset == last))
        },
    );
    eprintln!(
        "the killed member's partitions were consumed again {:?} after the kill \
         (session.timeout.ms {KILLED_SESSION_TIMEOUT_MS})",
        killed.elapsed()
    );
    poll_for(&survivors, Commit::EachRecord, &mut log, LINGER);

    // The new owners start exactly at the child's last commit: the
    // uncommitted batch comes again, nothing committed does.
    let after_kill = &log[before_kill..];
    for partition in &child_partitions {
        let offsets: Vec<i64> = after_kill
            .iter()
            .filter(|d| d.partition == *partition)
            .map(|d| d.offset)
            .collect();
        assert_eq!(
            offsets.first().copied(),
            committed_by_child.get(partition).copied(),
            "partition {partition}: the new owner's first offset is the last commit"
        );
        let expected: Vec<i64> = (COMMITTED as i64..=last).collect();
        assert_eq!(offsets, expected, "partition {partition} after the kill");
    }
    assert!(
        log[..before_kill]
            .iter()
            .all(|d| survivor_partitions.contains(&d.partition)),
        "before the kill the survivors only read their own partitions"
    );
    assert_eq!(duplicates(&log), [], "nothing twice among the survivors");
    let child_report = child.drain();
    for partition in &child_partitions {
        let consumed: Vec<i64> = child_report
            .consumed
            .iter()
            .filter(|(p, _)| p == partition)
            .map(|(_, offset)| *offset)
            .collect();
        assert_eq!(
            consumed,
            (0..=last).collect::<Vec<_>>(),
            "the child read {partition}"
        );
    }
}

#[test]
fn committed_offsets_survive_a_broker_kill_and_restart() {
    const TOPIC: &str = "resumed";
    const GROUP: &str = "resuming";
    const EACH: usize = 50;
    let _cores = sharing_the_cores();
    // The offset committed for each partition; none for the last one.
    const COMMIT_TO: [i64; 6] = [1, 10, 25, 37, 50, 0];
    let partitions: Vec<i32> = (0..6).collect();
    let dir = tempfile::tempdir().unwrap();
    let mut broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 6);
    produce(&broker, TOPIC, &records_to(&partitions, EACH, "early"));
    let mut commits = TopicPartitionList::new();
    for (partition, offset) in COMMIT_TO.iter().enumerate() {
        if *offset > 0 {
            commits
                .add_partition_offset(TOPIC, partition as i32, Offset::Offset(*offset))
                .unwrap();
        }
    }
    {
        let member = consumer(&broker.address, GROUP, "before-crash", &[]);
        member.subscribe(&[TOPIC]).unwrap();
        let mut log = Vec::new();
        poll_until(&[&member], Commit::Never, &mut log, "every record", |log| {
            log.len() >= EACH * partitions.len()
        });
        member
            .commit(&commits, CommitMode::Sync)
            .expect("committing");
        assert_eq!(committed(&member, TOPIC), COMMIT_TO, "before the crash");
    }

    broker.kill();
    broker.restart();
    produce(&broker, TOPIC, &records_to(&partitions, 5, "late"));
    let member = consumer(&broker.address, GROUP, "after-crash", &[]);
    assert_eq!(committed(&member, TOPIC), COMMIT_TO, "after the crash");
    member.subscribe(&[TOPIC]).unwrap();
    let mut log = Vec::new();
    poll_until(
        &[&member],
        Commit::Never,
        &mut log,
        "a record from each partition",
        |log| {
            log.iter()
                .map(|d| d.partition)
                .collect::<BTreeSet<_>>()
                .len()
                == partitions.len()
        },
    );
    for partition in &partitions {
        let first = log.iter().find(|d| d.partition == *partition).unwrap();
        assert_eq!(
            first.offset, COMMIT_TO[*partition as usize],
            "partition {partition} resumes at its commit (or the start without one): {first:?}"
        );
    }
}

/// The group's committed offsets of partitions 0-5 of `topic` (0 for none).
fn committed(member: &GroupConsumer, topic: &str) -> [i64; 6] {
    let mut wanted = TopicPartitionList::new();
    for partition in 0..6 {
        wanted.add_partition(topic, partition);
    }
    let found = member
        .committed_offsets(wanted, TIMEOUT)
        .expect("OffsetFetch");
    let mut offsets = [0; 6];
    for element in found.elements() {
        offsets[element.partition() as usize] = match element.offset() {
            Offset::Offset(offset) => offset,
            Offset::Invalid => 0,
            other => panic!("partition {}: {other:?}", element.partition()),
        };
    }
    offsets
}

#[test]
fn two_groups_read_the_same_topic_independently() {
    const TOPIC: &str = "twice-read";
    const RECORDS: usize = 1_000;
    let _cores = sharing_the_cores();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 4);
    let pair = [
        consumer(&broker.address, "pair", "pair-0", &[]),
        consumer(&broker.address, "pair", "pair-1", &[]),
    ];
    let single = consumer(&broker.address, "single", "single", &[]);
    for member in pair.iter().chain([&single]) {
        member.subscribe(&[TOPIC]).unwrap();
    }
    let pair: Vec<&GroupConsumer> = pair.iter().collect();
    let (mut pair_log, mut single_log) = (Vec::new(), Vec::new());
    let deadline = Instant::now() + TIMEOUT;
    while !(balanced(&pair, 2) && assigned(&single).len() == 4) {
        assert!(Instant::now() < deadline, "both groups formed");
        poll_round(&pair, Commit::Never, &mut pair_log);
        poll_round(&[&single], Commit::Never, &mut single_log);
    }
    let records: Vec<Record> = (0..RECORDS)
        .map(|index| Record {
            partition: None,
            key: format!("id-{index}"),
            payload: format!("record {index}"),
        })
        .collect();
    let delivered = produce(&broker, TOPIC, &records);
    let everything: BTreeSet<&String> = delivered.keys().collect();
    let deadline = Instant::now() + TIMEOUT;
    let keys = |log: &[Delivery]| log.iter().map(|d| d.key.clone()).collect::<BTreeSet<_>>();
    while keys(&pair_log).len() < RECORDS || keys(&single_log).len() < RECORDS {
        assert!(
            Instant::now() < deadline,
            "both groups read everything: {} and {} of {RECORDS}",
            keys(&pair_log).len(),
            keys(&single_log).len()
        );
        poll_round(&pair, Commit::Never, &mut pair_log);
        poll_round(&[&single], Commit::Never, &mut single_log);
    }
    let linger = Instant::now() + LINGER;
    while Instant::now() < linger {
        poll_round(&pair, Commit::Never, &mut pair_log);
        poll_round(&[&single], Commit::Never, &mut single_log);
    }
    for (name, log) in [("pair", &pair_log), ("single", &single_log)] {
        assert_eq!(duplicates(log), [], "{name}: no record twice");
        assert_eq!(log.len(), RECORDS, "{name}");
        assert_eq!(
            keys(log).iter().collect::<BTreeSet<_>>(),
            everything,
            "{name} read everything"
        );
    }

    // Their offsets are separate too: one group commits the end, the other
    // half of it.
    let ends = end_offsets(&delivered);
    for member in &pair {
        member
            .commit_consumer_state(CommitMode::Sync)
            .expect("committing");
    }
    let mut halves = TopicPartitionList::new();
    for (partition, end) in &ends {
        halves
            .add_partition_offset(TOPIC, *partition, Offset::Offset(end / 2))
            .unwrap();
    }
    single
        .commit(&halves, CommitMode::Sync)
        .expect("committing");
    let pair_committed = committed(pair[0], TOPIC);
    let single_committed = committed(&single, TOPIC);
    for (partition, end) in &ends {
        let index = *partition as usize;
        assert_eq!(pair_committed[index], *end, "pair, partition {partition}");
        assert_eq!(
            single_committed[index],
            end / 2,
            "single, partition {partition}"
        );
    }
}

/// A new group's member gets its first record without the broker waiting
/// out any timer: not the session timeout (10 s here), not the rebalance
/// timeout (librdkafka's max.poll.interval.ms, 300 s), and not an initial
/// rebalance delay (0 here; the coordinator's state-machine tests pin what
/// the delay does). How soon is a figure, printed, not asserted.
#[test]
fn a_new_group_gets_its_first_record_without_waiting_on_a_timer() {
    const TOPIC: &str = "waiting";
    let _cores = alone_on_the_cores();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 3);
    produce(&broker, TOPIC, &records_to(&[0, 1, 2], 10, "ready"));
    // The first group on a fresh broker (whose FindCoordinator may create
    // __consumer_offsets), then a second new group: both are new groups,
    // and the two figures tell the broker's one-time start-up from a join.
    let shortest_timer = Duration::from_millis(SESSION_TIMEOUT_MS);
    for group in ["first-newcomer", "second-newcomer"] {
        let waited = first_record_wait(&broker, group, TOPIC);
        eprintln!(
            "group {group}: first record {waited:?} after subscribe() \
             (group.initial.rebalance.delay.ms=0)"
        );
        assert!(
            waited < shortest_timer / 2,
            "{group}: waited {waited:?}, as long as a timer (session timeout {shortest_timer:?})"
        );
    }
}

/// The time from `subscribe()` to the first record for a new one-member
/// `group` of `topic`, whose records are already there.
fn first_record_wait(broker: &Broker, group: &str, topic: &str) -> Duration {
    let member = consumer(&broker.address, group, group, &[]);
    let subscribed = Instant::now();
    member.subscribe(&[topic]).unwrap();
    let first = loop {
        if let Some(polled) = member.poll(Duration::from_millis(5)) {
            break polled.expect("a record");
        }
        assert!(
            subscribed.elapsed() < TIMEOUT,
            "{group}: no record within {TIMEOUT:?} of subscribing"
        );
    };
    let waited = subscribed.elapsed();
    assert_eq!(first.offset(), 0, "{group} starts from the earliest record");
    waited
}

/// client id → (member id, assignment) as DescribeGroups shows them, and
/// the group's state.
fn describe(member: &GroupConsumer, group: &str) -> (String, BTreeMap<String, (String, Vec<u8>)>) {
    let list = member
        .fetch_group_list(Some(group), TIMEOUT)
        .expect("DescribeGroups");
    assert_eq!(list.groups().len(), 1);
    let described = &list.groups()[0];
    let members = described
        .members()
        .iter()
        .map(|member| {
            (
                member.client_id().to_owned(),
                (
                    member.id().to_owned(),
                    member.assignment().unwrap_or_default().to_vec(),
                ),
            )
        })
        .collect();
    (described.state().to_owned(), members)
}

#[test]
fn a_static_member_back_within_its_session_timeout_keeps_its_partitions_without_a_rebalance() {
    const TOPIC: &str = "static";
    const GROUP: &str = "static-members";
    let _cores = sharing_the_cores();
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path());
    create_topic(&broker, TOPIC, 6);
    // The other member joins first, so it leads and the static one follows.
    let other = consumer(&broker.address, GROUP, "other", &[]);
    other.subscribe(&[TOPIC]).unwrap();
    let mut log = Vec::new();
    poll_until(
        &[&other],
        Commit::Never,
        &mut log,
        "the first member has all six",
        |_| assigned(&other).len() == 6,
    );
    let static_settings = [("group.instance.id", "static-1")];
    let before = consumer(&broker.address, GROUP, "static", &static_settings);
    before.subscribe(&[TOPIC]).unwrap();
    poll_until(
        &[&other, &before],
        Commit::Never,
        &mut log,
        "three partitions each",
        |_| balanced(&[&other, &before], 3),
    );
    let (other_partitions, static_partitions) = (assigned(&other), assigned(&before));
    let (state, members_before) = describe(&other, GROUP);
    assert_eq!(state, "Stable");
    let other_member_id = members_before["other"].0.clone();
    let generation_before = generation_of(&mut raw::connect(&broker), GROUP, &other_member_id);
    let seen_before = other.context().seen().len();

    // A static member's close sends no LeaveGroup (KIP-345), so the group
    // keeps its place until session.timeout.ms.
    let closed = Instant::now();
    drop(before);
    let after = consumer(&broker.address, GROUP, "static", &static_settings);
    after.subscribe(&[TOPIC]).unwrap();
    poll_until(
        &[&other, &after],
        Commit::Never,
        &mut log,
        "the static member back",
        |_| !assigned(&after).is_empty(),
    );
    let back_after = closed.elapsed();
    // Back within session.timeout.ms is shown by what did not happen (no
    // timed assertion): the group kept its generation and the other member
    // saw no rebalance, which the member's expiry would have caused.
    eprintln!(
        "the static member had its partitions again {back_after:?} after closing \
         (session.timeout.ms {SESSION_TIMEOUT_MS})"
    );
    poll_for(&[&other, &after], Commit::Never, &mut log, LINGER);

    assert_eq!(
        assigned(&after),
        static_partitions,
        "the same partitions back"
    );
    assert_eq!(assigned(&other), other_partitions);
    assert_eq!(
        other.context().seen()[seen_before..],
        [],
        "no rebalance for the other member"
    );
    assert_eq!(
        generation_of(&mut raw::connect(&broker), GROUP, &other_member_id),
        generation_before,
        "the same generation"
    );
    let (state, members_after) = describe(&other, GROUP);
    assert_eq!(state, "Stable");
    assert_eq!(
        members_after.keys().collect::<Vec<_>>(),
        ["other", "static"],
        "{members_after:?}"
    );
    assert_eq!(members_after["other"], members_before["other"]);
    assert_eq!(
        members_after["static"].1, members_before["static"].1,
        "the static member's stored assignment"
    );
}
