//! `brook topic`: create, list, describe, alter-config, add-partitions and
//! delete against a real broker, each as a table and as JSON lines, and
//! their errors as one line on stderr with exit status 1. Describe's log
//! end offsets are checked against records librdkafka produced, on a topic
//! librdkafka's admin client created.

use serde_json::json;

use super::common::{Record, Run, brook, brook_alone, create_topic, produce, start_broker};

/// Exit status 1 and exactly one line on stderr, which says `expected`.
fn fails_with_one_line(run: Run, expected: &str) -> Run {
    let run = run.failed();
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines, [expected], "{run:?}");
    run
}

#[test]
fn create_list_and_delete() {
    let (_dir, broker) = start_broker();

    let created = brook(
        &broker,
        &[
            "topic",
            "create",
            "orders",
            "audit",
            "--partitions",
            "2",
            "--config",
            "retention.ms=3600000",
        ],
    )
    .ok();
    assert_eq!(
        created.lines(),
        [
            "TOPIC   PARTITIONS  REPLICATION  STATUS",
            "orders  2           1            created",
            "audit   2           1            created",
        ]
    );
    // No counts: the broker's num.partitions (1) and replication factor.
    let json = brook(&broker, &["topic", "create", "events", "--format", "json"]).ok();
    let json = json.json();
    assert_eq!(json.len(), 1);
    assert_eq!(json[0]["topic"], "events");
    assert_eq!(json[0]["status"], "created");
    assert_eq!(json[0]["partitions"], 1);
    assert_eq!(json[0]["replication_factor"], 1);
    assert_eq!(json[0]["error_code"], 0);
    assert_eq!(json[0]["topic_id"].as_str().map(str::len), Some(22));

    // An existing topic fails (the others are still created) unless
    // --if-not-exists.
    let existing = brook(&broker, &["topic", "create", "orders", "fresh"]);
    let existing = fails_with_one_line(
        existing,
        "brook topic: creating topic orders (Topic 'orders' already exists): \
         TOPIC_ALREADY_EXISTS (36)",
    );
    assert_eq!(
        existing.lines(),
        [
            "TOPIC   PARTITIONS  REPLICATION  STATUS",
            "orders  -           -            TOPIC_ALREADY_EXISTS (36)",
            "fresh   1           1            created",
        ]
    );
    let tolerated = brook(
        &broker,
        &[
            "topic",
            "create",
            "orders",
            "--if-not-exists",
            "--format",
            "json",
        ],
    )
    .ok();
    assert_eq!(tolerated.json()[0]["status"], "exists");
    assert_eq!(tolerated.json()[0]["error_code"], 36);

    // A malformed --config is refused before anything is sent.
    let malformed = brook(
        &broker,
        &["topic", "create", "never", "--config", "retention.ms"],
    );
    let malformed = fails_with_one_line(
        malformed,
        "brook topic: --config 'retention.ms': expected KEY=VALUE, like retention.ms=3600000",
    );
    assert_eq!(malformed.stdout, "");

    let listed = brook(&broker, &["topic", "list"]).ok();
    assert_eq!(
        listed.lines(),
        [
            "TOPIC   PARTITIONS  REPLICATION",
            "audit   2           1",
            "events  1           1",
            "fresh   1           1",
            "orders  2           1",
        ]
    );
    let listed = brook(&broker, &["topic", "list", "--format", "json"]).ok();
    let listed = listed.json();
    let names: Vec<&str> = listed.iter().filter_map(|t| t["topic"].as_str()).collect();
    assert_eq!(names, ["audit", "events", "fresh", "orders"]);
    assert_eq!(listed[3]["partitions"], 2);
    assert_eq!(listed[3]["replication_factor"], 1);
    assert_eq!(listed[3]["internal"], false);

    let deleted = brook(&broker, &["topic", "delete", "audit", "fresh"]).ok();
    assert_eq!(
        deleted.lines(),
        ["TOPIC  STATUS", "audit  deleted", "fresh  deleted"]
    );
    let again = brook(&broker, &["topic", "delete", "audit", "events"]);
    let again = fails_with_one_line(
        again,
        "brook topic: deleting topic audit (This server does not host this topic-partition): UNKNOWN_TOPIC_OR_PARTITION (3)",
    );
    assert_eq!(
        again.lines(),
        [
            "TOPIC   STATUS",
            "audit   UNKNOWN_TOPIC_OR_PARTITION (3)",
            "events  deleted",
        ]
    );
    let tolerated = brook(
        &broker,
        &[
            "topic",
            "delete",
            "audit",
            "--if-exists",
            "--format",
            "json",
        ],
    )
    .ok();
    assert_eq!(
        tolerated.json(),
        [json!({"topic": "audit", "status": "missing", "error_code": 3, "error": null})]
    );
    let listed = brook(&broker, &["topic", "list"]).ok();
    assert_eq!(
        listed.lines(),
        ["TOPIC   PARTITIONS  REPLICATION", "orders  2           1"]
    );
}

#[test]
fn describe_alter_and_grow() {
    let (_dir, broker) = start_broker();
    create_topic(&broker, "clicks", 2);
    let records: Vec<Record> = (0..5)
        .map(|index| Record {
            value: format!("v{index}"),
            partition: Some(if index < 3 { 0 } else { 1 }),
            ..Record::default()
        })
        .collect();
    produce(&broker, "clicks", &records, &[]);

    let described = brook(&broker, &["topic", "describe", "clicks"]).ok();
    let lines = described.lines();
    assert!(
        lines[0].starts_with("Topic: clicks  TopicId: ")
            && lines[0].ends_with("  PartitionCount: 2  ReplicationFactor: 1"),
        "{lines:?}"
    );
    assert_eq!(
        lines[1..],
        [
            "PARTITION  LEADER  REPLICAS  ISR  LOG-START  LOG-END",
            "0          0       0         0    0          3",
            "1          0       0         0    0          2",
            "Every config has Kafka's default value (--all-configs lists them).",
        ]
    );

    // Unknown topics fail with one line; the known ones are still described.
    let unknown = brook(&broker, &["topic", "describe", "nope"]);
    let unknown = fails_with_one_line(
        unknown,
        "brook topic: describing topic nope: UNKNOWN_TOPIC_OR_PARTITION (3)",
    );
    assert_eq!(unknown.stdout, "");

    let changed = brook(
        &broker,
        &[
            "topic",
            "alter-config",
            "clicks",
            "--set",
            "retention.ms=3600000",
            "--set",
            "segment.bytes=1048576",
        ],
    )
    .ok();
    assert_eq!(
        changed.lines(),
        [
            "CONFIG         OPERATION  BEFORE      AFTER",
            "retention.ms   set        604800000   3600000",
            "segment.bytes  set        1073741824  1048576",
        ]
    );
    let changed = brook(
        &broker,
        &[
            "topic",
            "alter-config",
            "clicks",
            "--delete",
            "segment.bytes",
            "--format",
            "json",
        ],
    )
    .ok();
    assert_eq!(
        changed.json(),
        [
            json!({"topic": "clicks", "config": "segment.bytes", "operation": "delete",
                "before": "1048576", "after": "1073741824"})
        ]
    );
    let unsupported = brook(
        &broker,
        &[
            "topic",
            "alter-config",
            "clicks",
            "--set",
            "no.such.config=1",
        ],
    );
    fails_with_one_line(
        unsupported,
        "brook topic: altering the configs of topic clicks \
         (config no.such.config is not supported by Brook): INVALID_CONFIG (40)",
    );

    let grown = brook(
        &broker,
        &["topic", "add-partitions", "clicks", "--total", "3"],
    )
    .ok();
    assert_eq!(
        grown.lines(),
        [
            "TOPIC   PARTITIONS-BEFORE  PARTITIONS",
            "clicks  2                  3",
        ]
    );
    let shrink = brook(
        &broker,
        &["topic", "add-partitions", "clicks", "--total", "2"],
    );
    fails_with_one_line(
        shrink,
        "brook topic: adding partitions to topic clicks \
         (The topic clicks currently has 3 partition(s); 2 would not be an increase): \
         INVALID_PARTITIONS (37)",
    );

    // JSON: one object per topic, partitions and configs nested.
    let described = brook(
        &broker,
        &["topic", "describe", "clicks", "--format", "json"],
    )
    .ok();
    let described = described.json();
    assert_eq!(described.len(), 1);
    let topic = &described[0];
    assert_eq!(topic["topic"], "clicks");
    assert_eq!(topic["partition_count"], 3);
    assert_eq!(topic["replication_factor"], 1);
    assert_eq!(topic["internal"], false);
    assert_eq!(
        topic["partitions"],
        json!([
            {"partition": 0, "leader": 0, "replicas": [0], "isr": [0],
             "log_start_offset": 0, "log_end_offset": 3},
            {"partition": 1, "leader": 0, "replicas": [0], "isr": [0],
             "log_start_offset": 0, "log_end_offset": 2},
            {"partition": 2, "leader": 0, "replicas": [0], "isr": [0],
             "log_start_offset": 0, "log_end_offset": 0},
        ])
    );
    assert_eq!(
        topic["configs"],
        json!({"retention.ms": {"value": "3600000", "source": "DYNAMIC_TOPIC_CONFIG",
                                "read_only": false, "sensitive": false}})
    );
    let every = brook(
        &broker,
        &[
            "topic",
            "describe",
            "clicks",
            "--all-configs",
            "--format",
            "json",
        ],
    )
    .ok();
    let every = &every.json()[0]["configs"];
    assert_eq!(every["cleanup.policy"]["value"], "delete");
    assert_eq!(every["cleanup.policy"]["source"], "DEFAULT_CONFIG");
    assert_eq!(every["retention.ms"]["value"], "3600000");
    let described = brook(&broker, &["topic", "describe", "clicks"]).ok();
    assert_eq!(
        described.lines()[5..],
        [
            "CONFIG        VALUE    SOURCE",
            "retention.ms  3600000  DYNAMIC_TOPIC_CONFIG",
        ]
    );
}

/// rpk's short forms (`-p` partitions, `-r` replication factor, `-c`
/// config, `-f` format, `-s` set) and the shared options given before the
/// subcommand as well as after it.
#[test]
fn short_flags_and_shared_options_before_the_subcommand() {
    let (_dir, broker) = start_broker();
    let created = brook_alone(
        &[
            "--brokers",
            &broker.address,
            "topic",
            "create",
            "t",
            "-p",
            "3",
            "-r",
            "1",
            "-c",
            "retention.ms=60000",
        ],
        None,
    )
    .ok();
    assert_eq!(
        created.lines()[1],
        "t      3           1            created"
    );
    let described = brook_alone(
        &[
            "--brokers",
            &broker.address,
            "-f",
            "json",
            "topic",
            "describe",
            "t",
        ],
        None,
    )
    .ok();
    let described = described.json();
    assert_eq!(described[0]["partition_count"], 3);
    brook(
        &broker,
        &["topic", "alter-config", "t", "-s", "retention.ms=120000"],
    )
    .ok();
    let configs = brook(&broker, &["-f", "json", "topic", "describe", "t"]).ok();
    assert_eq!(
        configs.json()[0]["configs"]["retention.ms"]["value"],
        "120000"
    );
}
