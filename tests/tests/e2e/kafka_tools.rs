//! Kafka's own shell tools, the ones operators type, run as their main
//! classes from Kafka 4.1.2's jars (`bin/kafka-topics.sh` is
//! `java org.apache.kafka.tools.TopicCommand`, and so on) against a real
//! `brook serve`, one after the other on what the previous left. The
//! outputs asserted are the ones the same commands print against Apache
//! Kafka 4.1.2, except where a comment says why Brook's differ.

use std::collections::BTreeMap;

use brook_tests::broker::Broker;
use brook_tests::clients::run;
use brook_tests::java::java;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TOPIC: &str = "tools";
const GROUP: &str = "tools-group";

const TOPICS: &str = "org.apache.kafka.tools.TopicCommand";
const CONFIGS: &str = "kafka.admin.ConfigCommand";
const CONSOLE_PRODUCER: &str = "org.apache.kafka.tools.ConsoleProducer";
const CONSOLE_CONSUMER: &str = "org.apache.kafka.tools.consumer.ConsoleConsumer";
const CONSUMER_GROUPS: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";
const GET_OFFSETS: &str = "org.apache.kafka.tools.GetOffsetShell";
const DELETE_RECORDS: &str = "org.apache.kafka.tools.DeleteRecordsCommand";
const TRANSACTIONS: &str = "org.apache.kafka.tools.TransactionsCommand";
const PRODUCER_PERF: &str = "org.apache.kafka.tools.ProducerPerformance";
const CONSUMER_PERF: &str = "org.apache.kafka.tools.ConsumerPerformance";

/// A broker and the tools pointed at it.
struct Tools {
    broker: Broker,
    dir: tempfile::TempDir,
}

impl Tools {
    fn start() -> Tools {
        let dir = tempfile::tempdir().unwrap();
        let broker = Broker::start(
            BROOK,
            dir.path(),
            2,
            &["--set", "group.initial.rebalance.delay.ms=0"],
        );
        Tools { broker, dir }
    }

    /// `main_class --bootstrap-server <broker> args…` (stdin `input`); its stdout.
    fn run(&self, main_class: &str, args: &[&str], input: Option<&str>) -> String {
        let mut command = java(main_class);
        command
            .args(["--bootstrap-server", &self.broker.address])
            .args(args);
        let output = run(&mut command, input, &self.broker);
        eprintln!("$ {main_class} {}\n{output}", args.join(" "));
        output
    }

    fn topics(&self, args: &[&str]) -> String {
        self.run(TOPICS, args, None)
    }

    fn groups(&self, args: &[&str]) -> String {
        self.run(CONSUMER_GROUPS, args, None)
    }

    /// GetOffsetShell's `topic:partition:offset` lines as partition → offset.
    fn offsets(&self, time: &str) -> BTreeMap<i32, i64> {
        self.run(GET_OFFSETS, &["--topic", TOPIC, "--time", time], None)
            .lines()
            .map(|line| {
                let fields: Vec<&str> = line.split(':').collect();
                assert_eq!(fields.len(), 3, "{line}");
                assert_eq!(fields[0], TOPIC, "{line}");
                (fields[1].parse().unwrap(), fields[2].parse().unwrap())
            })
            .collect()
    }
}

/// kafka-topics --describe's line for a partition of [`TOPIC`], as Kafka 4.1 prints it.
fn kafka_partition_line(partition: i32) -> String {
    format!(
        "\tTopic: {TOPIC}\tPartition: {partition}\tLeader: 0\tReplicas: 0\tIsr: 0\tElr: \tLastKnownElr: "
    )
}

/// A `kafka-consumer-groups --describe` table: per partition,
/// (current offset, log end, lag).
fn group_table(output: &str) -> BTreeMap<i32, (String, i64, String)> {
    let mut lines = output.lines().filter(|line| !line.trim().is_empty());
    let header: Vec<&str> = lines
        .find(|line| line.starts_with("GROUP"))
        .unwrap_or_else(|| panic!("no table in {output}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
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
    lines
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields[..2], [GROUP, TOPIC], "{line}");
            let partition = fields[2].parse().unwrap();
            let log_end = fields[4].parse().unwrap();
            (
                partition,
                (fields[3].to_owned(), log_end, fields[5].to_owned()),
            )
        })
        .collect()
}

fn lag_total(table: &BTreeMap<i32, (String, i64, String)>) -> i64 {
    table
        .values()
        .map(|(_, _, lag)| lag.parse::<i64>().unwrap())
        .sum()
}

/// kafka-topics create/list/describe/alter, kafka-configs,
/// console producer and consumer (keys, a group), kafka-consumer-groups
/// list/describe (lag)/reset-offsets --execute/delete, kafka-get-offsets,
/// kafka-delete-records, then kafka-topics delete.
#[test]
fn kafka_tools_topics_configs_console_groups_offsets() {
    let tools = Tools::start();

    let created = tools.topics(&[
        "--create",
        "--topic",
        TOPIC,
        "--partitions",
        "3",
        "--config",
        "retention.ms=3600000",
    ]);
    assert_eq!(created.trim(), format!("Created topic {TOPIC}."));
    assert!(tools.topics(&["--list"]).lines().any(|line| line == TOPIC));
    let described = tools.topics(&["--describe", "--topic", TOPIC]);
    let header = described.lines().next().unwrap();
    assert!(
        header.starts_with(&format!("Topic: {TOPIC}\tTopicId: ")),
        "{described}"
    );
    assert!(
        header.contains("\tPartitionCount: 3\tReplicationFactor: 1\tConfigs: "),
        "{described}"
    );
    // Kafka 4.1 also lists min.insync.replicas=1 here: its KRaft cluster
    // sets it as a cluster-wide default, which Brook does not have.
    assert!(header.contains("retention.ms=3600000"), "{described}");
    for partition in 0..3 {
        // The eligible leader replicas come from DescribeTopicPartitions
        // (API 75): empty lists, as Kafka prints them.
        let line = kafka_partition_line(partition);
        assert!(
            described.lines().any(|l| l == line),
            "{line:?} in {described}"
        );
    }
    tools.topics(&["--alter", "--topic", TOPIC, "--partitions", "4"]);
    let described = tools.topics(&["--describe", "--topic", TOPIC]);
    assert!(described.contains("\tPartitionCount: 4\t"), "{described}");

    let altered = tools.run(
        CONFIGS,
        &[
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            TOPIC,
            "--add-config",
            "segment.bytes=1048576",
            "--delete-config",
            "retention.ms",
        ],
        None,
    );
    assert_eq!(
        altered.trim(),
        format!("Completed updating config for topic {TOPIC}.")
    );
    let configs = tools.run(
        CONFIGS,
        &[
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            TOPIC,
        ],
        None,
    );
    let dynamic: Vec<&str> = configs.lines().skip(1).map(str::trim).collect();
    assert_eq!(dynamic.len(), 1, "only segment.bytes is set: {configs}");
    // The synonyms are checked whole in `kafka_configs_describe_lists_synonyms`.
    assert!(
        dynamic[0]
            .starts_with("segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:"),
        "{configs}"
    );

    let records: Vec<String> = (0..6).map(|i| format!("key-{i}:value-{i}")).collect();
    tools.run(
        CONSOLE_PRODUCER,
        &[
            "--topic",
            TOPIC,
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
        ],
        Some(&(records.join("\n") + "\n")),
    );
    let consumed = tools.run(
        CONSOLE_CONSUMER,
        &[
            "--topic",
            TOPIC,
            "--group",
            GROUP,
            "--from-beginning",
            "--max-messages",
            "6",
            "--timeout-ms",
            "60000",
            "--property",
            "print.key=true",
            "--property",
            "key.separator=:",
        ],
        None,
    );
    let mut consumed: Vec<&str> = consumed.lines().collect();
    consumed.sort_unstable();
    assert_eq!(consumed, records);
    // Four more records: the group (committed at 6 when the console consumer closed) lags by 4.
    tools.run(
        CONSOLE_PRODUCER,
        &["--topic", TOPIC],
        Some("more-0\nmore-1\nmore-2\nmore-3\n"),
    );

    assert!(tools.groups(&["--list"]).lines().any(|line| line == GROUP));
    let table = group_table(&tools.groups(&["--describe", "--group", GROUP]));
    assert_eq!(table.len(), 4, "{table:?}");
    assert_eq!(table.values().map(|(_, end, _)| end).sum::<i64>(), 10);
    assert_eq!(lag_total(&table), 4, "{table:?}");

    let reset = tools.groups(&[
        "--reset-offsets",
        "--group",
        GROUP,
        "--topic",
        TOPIC,
        "--to-earliest",
        "--execute",
    ]);
    let reset_rows: Vec<Vec<&str>> = reset
        .lines()
        .filter(|line| line.starts_with(GROUP))
        .map(|line| line.split_whitespace().collect())
        .collect();
    assert_eq!(reset_rows.len(), 4, "{reset}");
    assert!(reset_rows.iter().all(|row| row[3] == "0"), "{reset}");
    let table = group_table(&tools.groups(&["--describe", "--group", GROUP]));
    assert_eq!(lag_total(&table), 10, "{table:?}");
    assert!(table.values().all(|(current, _, _)| current == "0"));

    let latest = tools.offsets("-1");
    assert_eq!(latest.len(), 4);
    assert_eq!(latest.values().sum::<i64>(), 10);
    let (&partition, &end) = latest.iter().find(|(_, end)| **end >= 2).unwrap();
    let delete = format!(
        r#"{{"partitions":[{{"topic":"{TOPIC}","partition":{partition},"offset":1}}],"version":1}}"#
    );
    let delete_file = tools.dir.path().join("delete-records.json");
    std::fs::write(&delete_file, delete).unwrap();
    let deleted = tools.run(
        DELETE_RECORDS,
        &["--offset-json-file", delete_file.to_str().unwrap()],
        None,
    );
    assert!(
        deleted.contains(&format!("partition: {TOPIC}-{partition}\tlow_watermark: 1")),
        "{deleted}"
    );
    let earliest = tools.offsets("-2");
    assert_eq!(earliest[&partition], 1);
    assert_eq!(earliest.values().sum::<i64>(), 1);
    assert_eq!(tools.offsets("-1")[&partition], end);

    let deleted = tools.groups(&["--delete", "--group", GROUP]);
    assert!(
        deleted.contains(&format!(
            "Deletion of requested consumer groups ('{GROUP}') was successful."
        )),
        "{deleted}"
    );
    assert!(!tools.groups(&["--list"]).lines().any(|line| line == GROUP));

    tools.topics(&["--delete", "--topic", TOPIC]);
    assert!(!tools.topics(&["--list"]).lines().any(|line| line == TOPIC));
}

/// kafka-topics --describe prints each partition's eligible leader
/// replicas (KIP-966) as Kafka does: empty lists, read with
/// DescribeTopicPartitions.
#[test]
fn kafka_topics_describe_as_kafka() {
    let tools = Tools::start();
    tools.topics(&["--create", "--topic", TOPIC, "--partitions", "1"]);
    let described = tools.topics(&["--describe", "--topic", TOPIC]);
    assert_eq!(
        described.lines().nth(1),
        Some(kafka_partition_line(0).as_str()),
        "{described}"
    );
}

/// kafka-configs --describe shows a topic config's synonyms (DescribeConfigs
/// with include_synonyms): the topic's value, then the broker default's.
#[test]
fn kafka_configs_describe_lists_synonyms() {
    let tools = Tools::start();
    tools.topics(&[
        "--create",
        "--topic",
        TOPIC,
        "--config",
        "segment.bytes=1048576",
    ]);
    let configs = tools.run(
        CONFIGS,
        &[
            "--describe",
            "--entity-type",
            "topics",
            "--entity-name",
            TOPIC,
        ],
        None,
    );
    assert_eq!(
        configs.lines().nth(1).map(str::trim),
        Some(
            "segment.bytes=1048576 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:segment.bytes=1048576, \
             DEFAULT_CONFIG:log.segment.bytes=1073741824}"
        ),
        "{configs}"
    );
}

/// kafka-producer-perf-test (plain, then transactional) and
/// kafka-consumer-perf-test; kafka-transactions list, describe and
/// describe-producers on what the transactional run left.
#[test]
fn kafka_tools_perf_tests_and_transactions() {
    let tools = Tools::start();
    let records = "20000";
    let address = format!("bootstrap.servers={}", tools.broker.address);
    tools.topics(&["--create", "--topic", "perf", "--partitions", "2"]);
    let produced = run(
        java(PRODUCER_PERF).args([
            "--topic",
            "perf",
            "--num-records",
            records,
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--producer-props",
            &address,
        ]),
        None,
        &tools.broker,
    );
    eprintln!("{produced}");
    assert!(
        produced
            .lines()
            .last()
            .unwrap()
            .starts_with("20000 records sent, "),
        "{produced}"
    );
    let consumed = tools.run(
        CONSUMER_PERF,
        &[
            "--topic",
            "perf",
            "--messages",
            records,
            "--timeout",
            "60000",
        ],
        None,
    );
    let rows: Vec<Vec<&str>> = consumed
        .lines()
        .map(|line| line.split(", ").collect())
        .collect();
    assert_eq!(rows[0][4], "data.consumed.in.nMsg", "{consumed}");
    assert_eq!(rows[1][4], records, "{consumed}");

    tools.topics(&["--create", "--topic", "perf-txn", "--partitions", "1"]);
    let transactional = run(
        java(PRODUCER_PERF).args([
            "--topic",
            "perf-txn",
            "--num-records",
            "2000",
            "--record-size",
            "100",
            "--throughput",
            "-1",
            "--transactional-id",
            "perf-txn",
            "--transaction-duration-ms",
            "100",
            "--producer-props",
            &address,
        ]),
        None,
        &tools.broker,
    );
    assert!(
        transactional
            .lines()
            .last()
            .unwrap()
            .starts_with("2000 records sent, "),
        "{transactional}"
    );

    let listed = tools.run(TRANSACTIONS, &["list"], None);
    let row = table_row(&listed, "perf-txn");
    assert_eq!(row["TransactionState"], "CompleteCommit", "{listed}");
    assert_eq!(row["Coordinator"], "0", "{listed}");
    let described = tools.run(
        TRANSACTIONS,
        &["describe", "--transactional-id", "perf-txn"],
        None,
    );
    let row = table_row(&described, "0");
    assert_eq!(row["TransactionalId"], "perf-txn", "{described}");
    assert_eq!(row["TransactionState"], "CompleteCommit", "{described}");
    assert_eq!(
        row["ProducerId"],
        table_row(&listed, "perf-txn")["ProducerId"]
    );
    let producers = tools.run(
        TRANSACTIONS,
        &[
            "describe-producers",
            "--topic",
            "perf-txn",
            "--partition",
            "0",
        ],
        None,
    );
    let row = table_row(&producers, table_row(&listed, "perf-txn")["ProducerId"]);
    assert_eq!(row["CurrentTransactionStartOffset"], "None", "{producers}");
    assert_ne!(row["LastSequence"], "-1", "{producers}");
}

/// The row of a tab-separated kafka-transactions table whose first column
/// is `first`, as column name → value.
fn table_row<'a>(output: &'a str, first: &str) -> BTreeMap<&'a str, &'a str> {
    let mut lines = output.lines();
    let header: Vec<&str> = lines.next().unwrap().split('\t').map(str::trim).collect();
    let row = lines
        .map(|line| line.split('\t').map(str::trim).collect::<Vec<&str>>())
        .find(|row| row[0] == first)
        .unwrap_or_else(|| panic!("no row {first} in {output}"));
    header.into_iter().zip(row).collect()
}
