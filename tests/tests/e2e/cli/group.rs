//! `brook group` against groups of librdkafka consumers (issue 7,
//! acceptance 4): `describe` shows each partition's committed offset, log
//! end and lag = end − committed with the member that owns it;
//! `reset-offsets --to-earliest` is a dry run until `--execute`, refused
//! while a member is active, and afterwards a consumer of the group re-reads
//! every record; `list` and `delete`; every strategy and its clamping on a
//! group with no members.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use brook_tests::broker::Broker;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};
use serde_json::{Value, json};
use tempfile::TempDir;

use super::common::{Record, Run, brook, create_topic, produce, start_broker_with};

/// Records per partition of a test's topic: offsets 0..6 and 0..4.
const RECORDS: [i64; 2] = [6, 4];
/// Record `i` of a partition has timestamp BASE + i * 1000.
const BASE: i64 = 1_796_032_800_000;
/// Longest a group takes to settle (join, leave) before a test fails.
const SETTLE_MAX: Duration = Duration::from_secs(20);

/// A broker whose groups start at the first join, and `topic` with
/// [`RECORDS`] records, timestamps from [`BASE`].
fn broker_with_records(topic: &str) -> (TempDir, Broker) {
    let (dir, broker) = start_broker_with(&["--set", "group.initial.rebalance.delay.ms=0"]);
    create_topic(&broker, topic, 2);
    let records: Vec<Record> = (0..2)
        .flat_map(|partition| {
            (0..RECORDS[partition as usize]).map(move |index| Record {
                key: Some(format!("p{partition}-{index}")),
                value: format!("v{index}"),
                partition: Some(partition),
                timestamp: Some(BASE + index * 1000),
            })
        })
        .collect();
    produce(&broker, topic, &records, &[]);
    (dir, broker)
}

/// A member of `group` reading `topic` from the earliest record, committing
/// only when told.
fn consumer(broker: &Broker, group: &str, client_id: &str, topic: &str) -> BaseConsumer {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", group)
        .set("client.id", client_id)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .set("session.timeout.ms", "6000")
        .set("heartbeat.interval.ms", "200")
        .create()
        .expect("a consumer");
    consumer.subscribe(&[topic]).expect("subscribe");
    consumer
}

/// Polls until `count` records arrived: their (partition, offset).
fn read(consumer: &BaseConsumer, count: usize) -> BTreeSet<(i32, i64)> {
    let started = Instant::now();
    let mut read = BTreeSet::new();
    while read.len() < count {
        assert!(started.elapsed() < SETTLE_MAX, "read only {read:?}");
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            read.insert((message.partition(), message.offset()));
        }
    }
    read
}

/// Every record of a topic with [`RECORDS`].
fn every_record() -> BTreeSet<(i32, i64)> {
    (0..2)
        .flat_map(|partition| (0..RECORDS[partition as usize]).map(move |o| (partition, o)))
        .collect()
}

/// `brook group describe GROUP --format json`: the group's object.
fn describe(broker: &Broker, group: &str) -> Value {
    let run = brook(broker, &["group", "describe", group, "--format", "json"]).ok();
    let mut objects = run.json();
    assert_eq!(objects.len(), 1, "{run:?}");
    objects.remove(0)
}

/// (partition, committed offset, log end, lag) of each partition described.
fn offsets(described: &Value) -> Vec<(i64, Value, Value, Value)> {
    described["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| {
            (
                row["partition"].as_i64().unwrap(),
                row["current_offset"].clone(),
                row["log_end_offset"].clone(),
                row["lag"].clone(),
            )
        })
        .collect()
}

/// Waits (bounded) until `group` is in `state`.
fn wait_for_state(broker: &Broker, group: &str, state: &str) {
    let started = Instant::now();
    loop {
        let described = describe(broker, group);
        if described["state"] == state {
            return;
        }
        assert!(started.elapsed() < SETTLE_MAX, "never {state}: {described}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Stdout rows after the first `skip` lines, split into cells.
fn rows(run: &Run, skip: usize) -> Vec<Vec<String>> {
    run.lines()
        .iter()
        .skip(skip)
        .map(|line| line.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn describe_shows_lag_and_reset_to_earliest_makes_the_group_reread() {
    const TOPIC: &str = "group-cli";
    const GROUP: &str = "group-cli-readers";
    const CLIENT: &str = "group-cli-member";
    let (_dir, broker) = broker_with_records(TOPIC);
    let member = consumer(&broker, GROUP, CLIENT, TOPIC);
    assert_eq!(read(&member, 10), every_record());
    let mut positions = TopicPartitionList::new();
    positions
        .add_partition_offset(TOPIC, 0, Offset::Offset(4))
        .unwrap();
    positions
        .add_partition_offset(TOPIC, 1, Offset::Offset(1))
        .unwrap();
    member.commit(&positions, CommitMode::Sync).unwrap();

    // The table: a state line, then one row per partition, lag = end − committed.
    let table = brook(&broker, &["group", "describe", GROUP]).ok();
    let state = table.lines()[0];
    assert!(
        state.starts_with(&format!("Group '{GROUP}' is Stable with 1 member")),
        "{table:?}"
    );
    assert_eq!(
        rows(&table, 1)[0],
        [
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID"
        ]
    );
    let partitions = rows(&table, 2);
    assert_eq!(partitions.len(), 2, "{table:?}");
    for (row, expected) in partitions
        .iter()
        .zip([["0", "4", "6", "2"], ["1", "1", "4", "3"]])
    {
        assert_eq!(row[..2], [GROUP, TOPIC], "{table:?}");
        assert_eq!(row[2..6], expected, "{table:?}");
        assert!(row[6].starts_with(&format!("{CLIENT}-")), "{table:?}");
        assert_eq!(row[8], CLIENT, "{table:?}");
    }

    // JSON: the same, with the members and their assignments.
    let described = describe(&broker, GROUP);
    assert_eq!(described["state"], "Stable");
    assert_eq!(described["protocol_type"], "consumer");
    assert_eq!(
        offsets(&described),
        [
            (0, json!(4), json!(6), json!(2)),
            (1, json!(1), json!(4), json!(3))
        ]
    );
    let members = described["members"].as_array().unwrap();
    assert_eq!(members.len(), 1, "{described}");
    assert_eq!(members[0]["client_id"], CLIENT);
    assert_eq!(
        described["partitions"][0]["consumer_id"],
        members[0]["consumer_id"]
    );
    assert_eq!(
        members[0]["assignment"],
        json!([{"topic": TOPIC, "partitions": [0, 1]}])
    );

    let listed = brook(&broker, &["group", "list"]).ok();
    assert!(
        rows(&listed, 1).contains(&vec![GROUP.into(), "Stable".into(), "consumer".into()]),
        "{listed:?}"
    );
    let empty_only = brook(&broker, &["group", "list", "--state", "empty"]).ok();
    assert!(!empty_only.stdout.contains(GROUP), "{empty_only:?}");

    // An active group's offsets are not reset, nor is it deleted.
    let refused = brook(
        &broker,
        &[
            "group",
            "reset-offsets",
            GROUP,
            "--topic",
            TOPIC,
            "--to-earliest",
            "--execute",
        ],
    )
    .failed();
    assert!(
        refused.stderr.contains("is Stable") && refused.stderr.contains("inactive"),
        "{refused:?}"
    );
    // A dry run is still shown, with a note that --execute would be refused.
    let preview = brook(
        &broker,
        &[
            "group",
            "reset-offsets",
            GROUP,
            "--topic",
            TOPIC,
            "--to-earliest",
        ],
    )
    .ok();
    assert_eq!(rows(&preview, 1).len(), 2, "{preview:?}");
    assert!(preview.stderr.contains("inactive"), "{preview:?}");
    let busy = brook(&broker, &["group", "delete", GROUP]).failed();
    assert!(busy.stderr.contains("NON_EMPTY_GROUP (68)"), "{busy:?}");

    drop(member);
    wait_for_state(&broker, GROUP, "Empty");

    // A dry run prints the new offsets and changes nothing.
    let reset = [
        "group",
        "reset-offsets",
        GROUP,
        "--topic",
        TOPIC,
        "--to-earliest",
    ];
    let dry = brook(&broker, &reset).ok();
    let planned = vec![
        vec![GROUP, TOPIC, "0", "4", "0"],
        vec![GROUP, TOPIC, "1", "1", "0"],
    ];
    assert_eq!(rows(&dry, 1), planned, "{dry:?}");
    assert!(dry.stderr.contains("Dry run"), "{dry:?}");
    let unchanged = describe(&broker, GROUP);
    assert_eq!(unchanged["state"], "Empty");
    assert_eq!(offsets(&unchanged), offsets(&described));

    // --execute commits them.
    let executed = brook(&broker, &[&reset[..], &["--execute"]].concat()).ok();
    assert_eq!(rows(&executed, 1), planned, "{executed:?}");
    assert_eq!(
        offsets(&describe(&broker, GROUP)),
        [
            (0, json!(0), json!(6), json!(6)),
            (1, json!(0), json!(4), json!(4))
        ]
    );

    // The group re-reads everything.
    let again = consumer(&broker, GROUP, CLIENT, TOPIC);
    assert_eq!(read(&again, 10), every_record());
    drop(again);
    wait_for_state(&broker, GROUP, "Empty");

    let deleted = brook(&broker, &["group", "delete", GROUP]).ok();
    assert_eq!(rows(&deleted, 1), [[GROUP, "deleted"]], "{deleted:?}");
    let gone = brook(&broker, &["group", "describe", GROUP]).failed();
    assert!(
        gone.stderr
            .contains(&format!("consumer group '{GROUP}' does not exist")),
        "{gone:?}"
    );
    let listed = brook(&broker, &["group", "list"]).ok();
    assert!(!listed.stdout.contains(GROUP), "{listed:?}");
}

#[test]
fn every_strategy_is_clamped_to_the_log() {
    const TOPIC: &str = "group-cli-strategies";
    const GROUP: &str = "group-cli-offline";
    let (_dir, broker) = broker_with_records(TOPIC);
    let reset = |args: &[&str]| {
        let mut all = vec!["group", "reset-offsets", GROUP];
        all.extend(args);
        brook(&broker, &all)
    };
    let committed = || {
        offsets(&describe(&broker, GROUP))
            .into_iter()
            .map(|(partition, current, _, _)| (partition, current.as_i64().unwrap()))
            .collect::<Vec<_>>()
    };

    // A group that does not exist yet can be given offsets (it has no members).
    let gone = brook(&broker, &["group", "describe", GROUP]).failed();
    assert!(gone.stderr.contains("does not exist"), "{gone:?}");
    reset(&[
        "--topic",
        &format!("{TOPIC}:0"),
        "--to-offset",
        "3",
        "--execute",
    ])
    .ok();
    assert_eq!(committed(), [(0, 3)]);
    assert_eq!(describe(&broker, GROUP)["state"], "Empty");

    let topic_0 = format!("{TOPIC}:0");
    reset(&["--topic", &topic_0, "--shift-by", "-2", "--execute"]).ok();
    assert_eq!(committed(), [(0, 1)]);
    let below = reset(&["--topic", &topic_0, "--shift-by", "-5", "--execute"]).ok();
    assert!(
        below.stderr.contains("below its log start offset"),
        "{below:?}"
    );
    assert_eq!(committed(), [(0, 0)]);

    // Past the log end: the log end, shown by a dry run that commits nothing.
    let past = reset(&["--topic", TOPIC, "--to-offset", "100", "--format", "json"]).ok();
    assert_eq!(
        past.json(),
        [
            json!({"group": GROUP, "topic": TOPIC, "partition": 0, "current_offset": 0,
                   "new_offset": 6, "executed": false}),
            json!({"group": GROUP, "topic": TOPIC, "partition": 1, "current_offset": null,
                   "new_offset": 4, "executed": false}),
        ]
    );
    assert!(past.stderr.contains("past its log end offset"), "{past:?}");
    assert_eq!(committed(), [(0, 0)]);

    // Partition 1 has no committed offset to shift.
    let unshiftable = reset(&["--topic", TOPIC, "--shift-by", "1"]).failed();
    assert!(
        unshiftable.stderr.contains(&format!("{TOPIC}-1")) && unshiftable.stderr.contains("no"),
        "{unshiftable:?}"
    );

    // By time: the first record at or after it, or the log end.
    let at = (BASE + 2500).to_string();
    reset(&["--topic", TOPIC, "--to-datetime", &at, "--execute"]).ok();
    assert_eq!(committed(), [(0, 3), (1, 3)]);
    reset(&[
        "--topic",
        TOPIC,
        "--to-datetime",
        "2026-11-30T10:00:04.500Z",
        "--execute",
    ])
    .ok();
    assert_eq!(committed(), [(0, 5), (1, 4)]);
    reset(&["--all-topics", "--to-earliest", "--execute"]).ok();
    assert_eq!(committed(), [(0, 0), (1, 0)]);
    reset(&["--all-topics", "--to-latest", "--execute"]).ok();
    assert_eq!(committed(), [(0, 6), (1, 4)]);
    let lags: Vec<Value> = offsets(&describe(&broker, GROUP))
        .into_iter()
        .map(|(_, _, _, lag)| lag)
        .collect();
    assert_eq!(lags, [json!(0), json!(0)]);

    let unknown = reset(&["--topic", &format!("{TOPIC}:7"), "--to-earliest"]).failed();
    assert!(
        unknown.stderr.contains("UNKNOWN_TOPIC_OR_PARTITION (3)"),
        "{unknown:?}"
    );
    let no_group = brook(&broker, &["group", "delete", "group-cli-never"]).failed();
    assert!(
        no_group.stderr.contains("GROUP_ID_NOT_FOUND (69)"),
        "{no_group:?}"
    );
    // A group with only offsets is Empty and can be deleted.
    brook(&broker, &["group", "delete", GROUP]).ok();
    assert!(
        brook(&broker, &["group", "describe", GROUP])
            .failed()
            .stderr
            .contains("does not exist")
    );
}
