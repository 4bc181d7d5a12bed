//! Consumer groups with the other clients our users run, against a real
//! `brook serve`: kafka-python 2.0.2 and kafkajs 2.2.4 (installed by
//! `tests/run` into `target/test-clients`, driven by the scripts in
//! `tests/clients`) and Debian's `kcat`. (librdkafka through `rdkafka` is in
//! `tests/consumer_groups/`.)
//!
//! Each checks what a user relies on: members share the partitions, every
//! record comes once, and a member that starts later resumes after the
//! group's committed offsets; kafka-python's admin client shows the group,
//! its members and offsets. The scripts print `name value` lines; the
//! checks are here.
//!
//! To see why one fails: `RUST_LOG=trace` reaches the broker (every request
//! with its API and version, in its log, printed on failure) and
//! `KAFKA_PYTHON_LOG=<file>` the kafka-python script (every request and
//! response it sends and gets).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::OnceLock;

use brook_tests::broker::Broker;
use brook_tests::clients::{Report, node_path, python_path, run, script};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// The topics the scripts create have this many partitions.
const PARTITIONS: i32 = 4;
/// Records produced in each batch by the kafka-python and kafkajs scripts.
const SCRIPT_RECORDS: usize = 400;

/// A broker whose groups start as soon as their first member joins
/// (Kafka waits 3 s by default for more to come), with `extra` settings.
fn start_broker(dir: &std::path::Path, extra: &[&str]) -> Broker {
    let mut arguments = vec!["--set", "group.initial.rebalance.delay.ms=0"];
    arguments.extend_from_slice(extra);
    Broker::start(BROOK, dir, 2, &arguments)
}

/// `<member> <partitions, comma-separated>` lines as member → partitions.
fn assignments(lines: &[&str]) -> BTreeMap<String, BTreeSet<i32>> {
    lines
        .iter()
        .map(|line| {
            let (member, partitions) = line.split_once(' ').unwrap();
            let partitions = partitions
                .split(',')
                .map(|partition| partition.parse().unwrap())
                .collect();
            (member.to_owned(), partitions)
        })
        .collect()
}

/// Two members, `PARTITIONS / 2` partitions each, all partitions covered.
fn assert_shared(assigned: &BTreeMap<String, BTreeSet<i32>>) {
    assert_eq!(assigned.len(), 2, "two members: {assigned:?}");
    assert!(
        assigned
            .values()
            .all(|partitions| partitions.len() == (PARTITIONS / 2) as usize),
        "half the partitions each: {assigned:?}"
    );
    let all: BTreeSet<i32> = assigned.values().flatten().copied().collect();
    assert_eq!(all, (0..PARTITIONS).collect(), "{assigned:?}");
}

/// `0:<offset> 1:<offset> …` with the same offset for every partition.
fn every_partition_at(offset: usize) -> String {
    (0..PARTITIONS)
        .map(|partition| format!("{partition}:{offset}"))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The counts a script gives for a batch: every record once, each where
/// its producer was told it went.
fn assert_every_record_once(report: &Report, batch: &str) {
    let records = SCRIPT_RECORDS.to_string();
    assert_eq!(
        report.one(&format!("{batch}.records")),
        records,
        "{report:#?}"
    );
    assert_eq!(
        report.one(&format!("{batch}.distinct")),
        records,
        "{report:#?}"
    );
    assert_eq!(
        report.one(&format!("{batch}.misplaced")),
        "0",
        "{report:#?}"
    );
}

const PYTHON_TOPIC: &str = "python-groups";
const PYTHON_GROUP: &str = "python-group";

/// One run of the kafka-python members scenario, shared by the two tests
/// that check it (members and admin view): it takes seconds of the two
/// cores, and both look at the same group.
fn python_members_report() -> &'static Report {
    static REPORT: OnceLock<Report> = OnceLock::new();
    REPORT.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let broker = start_broker(dir.path(), &[]);
        let output = run(
            Command::new("python3")
                .env("PYTHONPATH", python_path())
                .arg(script("kafka_python_group.py"))
                .args([&broker.address, "members", PYTHON_TOPIC, PYTHON_GROUP])
                .arg(SCRIPT_RECORDS.to_string()),
            None,
            &broker,
        );
        eprintln!("{output}");
        Report::parse(&output)
    })
}

/// kafka-python `KafkaConsumer(group_id=…, enable_auto_commit=False)`: two
/// members (threads) split four partitions and get each record once; they
/// `commit()` and close; a new member of the group sees the committed
/// offsets and consumes only the later records.
#[test]
fn kafka_python_members_share_partitions_and_a_new_member_resumes_after_the_commit() {
    let report = python_members_report();
    assert_eq!(report.one("kafka-python"), "2.0.2");
    assert_shared(&assignments(&report.all("first.assigned")));
    for name in ["first.unowned", "first.rebalances"] {
        for line in report.all(name) {
            assert!(line.ends_with(" 0"), "{name} {line}: {report:#?}");
        }
    }
    assert_every_record_once(report, "first");

    let half = SCRIPT_RECORDS / PARTITIONS as usize;
    assert_eq!(report.one("second.committed"), every_partition_at(half));
    assert_eq!(
        report.one("second.first_offsets"),
        every_partition_at(half),
        "the new member starts at the committed offsets"
    );
    assert_every_record_once(report, "second");
    assert_eq!(
        report.one("second.offsets"),
        every_partition_at(2 * half),
        "the new member's commit"
    );
}

/// kafka-python's `KafkaAdminClient` (ListGroups, DescribeGroups,
/// OffsetFetch for all topics) on the group above: while its two members
/// are in it, and after they commit and leave.
#[test]
fn kafka_python_admin_client_shows_the_group_its_members_and_offsets() {
    let report = python_members_report();
    let listed = format!("{PYTHON_GROUP}/consumer");
    assert_eq!(report.one("active.listed"), listed);
    assert_eq!(report.one("active.state"), "Stable");
    assert_eq!(report.one("active.protocol"), "consumer/range");
    let expected_members: Vec<String> = assignments(&report.all("first.assigned"))
        .iter()
        .map(|(member, partitions)| {
            let assigned: Vec<String> = partitions
                .iter()
                .map(|partition| format!("{PYTHON_TOPIC}/{partition}"))
                .collect();
            format!(
                "{member} subscribed={PYTHON_TOPIC} assigned={} id=yes",
                assigned.join(",")
            )
        })
        .collect();
    assert_eq!(report.all("active.member"), expected_members);
    assert_eq!(
        report.one("active.offsets"),
        "none",
        "nothing committed yet"
    );

    assert_eq!(report.one("closed.listed"), listed);
    assert_eq!(report.one("closed.state"), "Empty");
    assert_eq!(report.all("closed.member"), Vec::<&str>::new());
    let half = SCRIPT_RECORDS / PARTITIONS as usize;
    let committed: Vec<String> = (0..PARTITIONS)
        .map(|partition| format!("{PYTHON_TOPIC}/{partition}:{half}"))
        .collect();
    assert_eq!(report.one("closed.offsets"), committed.join(" "));
}

/// kafkajs `consumer.run({ eachMessage })`: two members (autoCommit) split
/// four partitions and get each record once; after they disconnect a
/// restarted member (`fromBeginning`, so it would start at 0 without a
/// commit) resumes from the committed offsets and commits with
/// `commitOffsets`.
#[test]
fn kafkajs_members_share_partitions_and_a_restarted_member_resumes_from_the_commit() {
    let dir = tempfile::tempdir().unwrap();
    let broker = start_broker(dir.path(), &[]);
    let output = run(
        Command::new("node")
            .env("NODE_PATH", node_path())
            .arg(script("kafkajs_group.js"))
            .args([&broker.address, "kafkajs-groups", "kafkajs-group"])
            .arg(SCRIPT_RECORDS.to_string()),
        None,
        &broker,
    );
    eprintln!("{output}");
    let report = Report::parse(&output);
    assert_eq!(report.one("kafkajs"), "2.2.4");
    assert_shared(&assignments(&report.all("first.assigned")));
    assert_eq!(report.one("active.state"), "Stable");
    assert_eq!(report.one("active.members"), "2");
    for name in ["first.unowned", "first.rejoins"] {
        for line in report.all(name) {
            assert!(line.ends_with(" 0"), "{name} {line}: {report:#?}");
        }
    }
    for line in report
        .all("first.crash")
        .into_iter()
        .chain(report.all("second.crash"))
    {
        assert!(line.ends_with(" none"), "{line}: {report:#?}");
    }
    assert_every_record_once(&report, "first");

    let half = SCRIPT_RECORDS / PARTITIONS as usize;
    assert_eq!(
        report.one("first.offsets"),
        every_partition_at(half),
        "autoCommit"
    );
    assert_eq!(
        report.one("second.first_offsets"),
        every_partition_at(half),
        "the restarted member starts at the committed offsets"
    );
    assert_every_record_once(&report, "second");
    assert_eq!(
        report.one("second.offsets"),
        every_partition_at(2 * half),
        "commitOffsets"
    );
}

const KCAT_TOPIC: &str = "kcat-groups";
const KCAT_GROUP: &str = "kcat-group";

/// `kcat -G`'s output, `-f '%p %o %k\n'`, as (partition, offset, key).
fn kcat_consume(broker: &Broker) -> Vec<(i32, i64, String)> {
    // No `-o`: in -G mode kcat would start every assigned partition at that
    // offset instead of the group's committed one.
    let output = run(
        Command::new("kcat").args([
            "-b",
            &broker.address,
            "-G",
            KCAT_GROUP,
            "-X",
            "auto.offset.reset=earliest",
            "-e",
            "-f",
            "%p %o %k\n",
            KCAT_TOPIC,
        ]),
        None,
        broker,
    );
    output
        .lines()
        .map(|line| {
            let mut fields = line.splitn(3, ' ');
            let mut next = || fields.next().unwrap_or_else(|| panic!("{line:?}"));
            (
                next().parse().unwrap(),
                next().parse().unwrap(),
                next().to_owned(),
            )
        })
        .collect()
}

/// Produces keyed records `<tag>-<i>` with kcat (the topic is created on
/// first use with `num.partitions`).
fn kcat_produce(broker: &Broker, tag: &str, count: usize) -> BTreeSet<String> {
    let keys: BTreeSet<String> = (0..count).map(|index| format!("{tag}-{index}")).collect();
    let input: String = keys.iter().map(|key| format!("{key}:value\n")).collect();
    run(
        Command::new("kcat").args(["-b", &broker.address, "-P", "-t", KCAT_TOPIC, "-K:"]),
        Some(&input),
        broker,
    );
    keys
}

/// Debian's kcat as a balanced consumer (`kcat -G group topic`): it reads
/// every record once and commits as it closes; a second run gets nothing;
/// kafka-python's admin client and `committed()` see the offsets; a third
/// run gets only records produced since.
#[test]
fn kcat_balanced_consumer_reads_everything_and_its_group_keeps_the_offsets() {
    const RECORDS: usize = 100;
    const LATER: usize = 20;
    let dir = tempfile::tempdir().unwrap();
    let partitions = format!("num.partitions={PARTITIONS}");
    let broker = start_broker(dir.path(), &["--set", &partitions]);
    let produced = kcat_produce(&broker, "first", RECORDS);
    let consumed = kcat_consume(&broker);
    let keys: BTreeSet<String> = consumed.iter().map(|(_, _, key)| key.clone()).collect();
    assert_eq!(keys, produced, "{consumed:?}");
    assert_eq!(consumed.len(), RECORDS, "each once: {consumed:?}");
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for (partition, offset, _) in &consumed {
        let end = ends.entry(*partition).or_default();
        *end = (*end).max(offset + 1);
    }
    assert_eq!(ends.len(), PARTITIONS as usize, "keys in every partition");
    assert_eq!(ends.values().sum::<i64>(), RECORDS as i64, "{consumed:?}");

    let output = run(
        Command::new("python3")
            .env("PYTHONPATH", python_path())
            .arg(script("kafka_python_group.py"))
            .args([&broker.address, "offsets", KCAT_TOPIC, KCAT_GROUP]),
        None,
        &broker,
    );
    let report = Report::parse(&output);
    assert_eq!(report.one("admin.listed"), format!("{KCAT_GROUP}/consumer"));
    assert_eq!(report.one("admin.state"), "Empty", "kcat left the group");
    let admin_offsets: Vec<String> = ends
        .iter()
        .map(|(partition, end)| format!("{KCAT_TOPIC}/{partition}:{end}"))
        .collect();
    assert_eq!(report.one("admin.offsets"), admin_offsets.join(" "));
    let committed: Vec<String> = ends
        .iter()
        .map(|(partition, end)| format!("{partition}:{end}"))
        .collect();
    assert_eq!(report.one("consumer.committed"), committed.join(" "));

    assert_eq!(kcat_consume(&broker), [], "nothing after the commit");
    let later = kcat_produce(&broker, "later", LATER);
    let consumed = kcat_consume(&broker);
    let keys: BTreeSet<String> = consumed.iter().map(|(_, _, key)| key.clone()).collect();
    assert_eq!(keys, later, "only the later records: {consumed:?}");
    assert_eq!(consumed.len(), LATER, "each once: {consumed:?}");
    for (partition, offset, key) in &consumed {
        assert!(
            *offset >= ends[partition],
            "{key} at {partition}@{offset} is after the commit {ends:?}"
        );
    }
}
