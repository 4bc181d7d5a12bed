//! Committed offsets: kept across a broker's kill and restart, and
//! separate for two groups reading the same topic.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::time::Instant;

use rdkafka::consumer::{CommitMode, Consumer};
use rdkafka::{Offset, TopicPartitionList};

use crate::{
    Commit, Delivery, GroupConsumer, LINGER, Record, TIMEOUT, assigned, balanced, consumer,
    create_topic, duplicates, poll_round, poll_until, produce, records_to, sharing_the_cores,
    start_broker,
};

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

/// The end offset of each partition after `delivered`.
fn end_offsets(delivered: &HashMap<String, (i32, i64)>) -> BTreeMap<i32, i64> {
    let mut ends = BTreeMap::new();
    for (partition, offset) in delivered.values() {
        let end = ends.entry(*partition).or_insert(0);
        *end = (*end).max(offset + 1);
    }
    ends
}
