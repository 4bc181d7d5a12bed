//! Apache Kafka's Java client (kafka-clients 4.1.2, the reference client)
//! against a real `brook serve`: the producer with its defaults, the
//! consumer in groups and on its own, and the AdminClient. The program is
//! `tests/clients/java` (`brook.ClientChecks <scenario>`), built by
//! `tests/run`; it prints `name value` lines, asserted on here. The values
//! asserted are the ones the same program prints against Apache Kafka 4.1.2
//! (`bench/kafka/start-kafka.sh`), except where a comment says otherwise.
//!
//! To see why one fails: the program prints `<check>.error <exception>`
//! for a check that threw (its stack is on stderr, printed on failure), and
//! `RUST_LOG=debug` reaches the broker.

use brook_tests::broker::Broker;
use brook_tests::clients::{Report, run};
use brook_tests::java::checks;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

/// One run of a scenario on a broker of its own (two shards; a group's
/// first rebalance at once).
pub fn java_report(scenario: &str) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        BROOK,
        dir.path(),
        2,
        &["--set", "group.initial.rebalance.delay.ms=0"],
    );
    let output = run(&mut checks(scenario, &broker.address), None, &broker);
    eprintln!("{output}");
    let report = Report::parse(&output);
    assert_eq!(report.one("kafka"), brook_tests::java::KAFKA_VERSION);
    report
}

/// Fails on any `<check>.error` line, with the report.
pub fn assert_no_errors(report: &Report, checks: &[&str]) {
    for check in checks {
        let errors = report.all(&format!("{check}.error"));
        assert!(errors.is_empty(), "{check}: {errors:?} in {report:#?}");
    }
}

/// Idempotent acks=all (the Java producer's defaults) with keys and two
/// headers under every codec: each record read back as sent, at the
/// partition and offset its send was told, on the partition Kafka's
/// default partitioner picks. 5,000 records in ~512-byte batches with
/// `max.in.flight.requests.per.connection=5`: record i is at offset i.
#[test]
fn java_producer_codecs_headers_and_ordering() {
    let report = java_report("producer");
    let codecs = ["none", "gzip", "snappy", "lz4", "zstd"];
    let checks: Vec<String> = codecs.iter().map(|c| format!("producer.{c}")).collect();
    let mut names: Vec<&str> = checks.iter().map(String::as_str).collect();
    names.push("producer.order");
    assert_no_errors(&report, &names);
    for codec in codecs {
        for value in ["acked", "records", "matching"] {
            assert_eq!(
                report.one(&format!("producer.{codec}.{value}")),
                "300",
                "{codec} {value}: {report:#?}"
            );
        }
    }
    assert_eq!(report.one("producer.order.acked_in_order"), "5000");
    assert_eq!(report.one("producer.order.records"), "5000");
    assert_eq!(report.one("producer.order.in_order"), "5000");
}

/// Two members of a classic-protocol group over four partitions. Range
/// (eager): the first member gives up all four when the second joins, then
/// each has two. Cooperative-sticky: the first gives up only the two that
/// move. Either way 400 records are consumed once each and commitSync +
/// commitAsync leave 400 committed (seen by the consumer and the admin
/// client). seek, seekToBeginning/End, a commit with metadata,
/// beginningOffsets/endOffsets, and offsetsForTimes before, between, at
/// and after the records' timestamps.
#[test]
fn java_consumer_groups_seek_and_offsets_for_times() {
    let report = java_report("consumer");
    assert_no_errors(
        &report,
        &[
            "consumer.range",
            "consumer.cooperative",
            "consumer.seek",
            "consumer.times",
        ],
    );
    for (assignor, revoked) in [("range", "4"), ("cooperative", "2")] {
        let one = |name: &str| report.one(&format!("consumer.{assignor}.{name}"));
        assert_eq!(one("first_alone"), "0,1,2,3", "{assignor}");
        assert_eq!(one("assignments"), "[0,1, 2,3]", "{assignor}");
        assert_eq!(one("first_revoked"), revoked, "{assignor}");
        assert_eq!(one("consumed"), "400", "{assignor}");
        assert_eq!(one("distinct"), "400", "{assignor}");
        assert_eq!(one("commit_async_error"), "none", "{assignor}");
        assert_eq!(one("committed_total"), "400", "{assignor}");
        assert_eq!(one("admin_committed_total"), "400", "{assignor}");
    }
    // Partition 1 holds records 1, 5, 9, …: offset 7 is record 29.
    assert_eq!(report.one("consumer.seek.record"), "7:value-29");
    assert_eq!(report.one("consumer.seek.end_position"), "100");
    assert_eq!(report.one("consumer.seek.beginning_position"), "0");
    assert_eq!(report.one("consumer.seek.committed"), "42:brook-metadata");
    assert_eq!(report.one("consumer.seek.end_offsets"), "400");
    assert_eq!(report.one("consumer.seek.beginning_offsets"), "0");
    // offset:timestamp (ms after the first record's).
    assert_eq!(report.one("consumer.times.between"), "4:4000");
    assert_eq!(report.one("consumer.times.exact"), "5:5000");
    assert_eq!(report.one("consumer.times.after_last"), "null");
    assert_eq!(report.one("consumer.times.before_first"), "0:0");
}

/// Every AdminClient call of issue 17 §3, each on what the one before left.
#[test]
fn java_admin_client() {
    let report = java_report("admin");
    assert_no_errors(
        &report,
        &[
            "admin.topics",
            "admin.partitions",
            "admin.configs",
            "admin.offsets",
            "admin.delete_records",
            "admin.cluster",
            "admin.groups",
            "admin.log_dirs",
            "admin.producers",
            "admin.transactions",
            "admin.delete_topics",
        ],
    );
    let one = |name: &str| report.one(&format!("admin.{name}"));
    assert_eq!(one("topics.create_again"), "TopicExistsException");
    assert_eq!(one("topics.listed"), "true");
    assert_eq!(one("topics.validate_only_listed"), "false");
    assert_eq!(one("topics.partitions"), "3");
    assert_eq!(one("topics.internal"), "false");
    assert_eq!(one("topics.has_id"), "true");
    // leader/replicas/ISR per partition; Brook's node id is 0 (Kafka's test broker's is 1).
    assert_eq!(one("topics.leaders"), "0/1/1,0/1/1,0/1/1");
    assert_eq!(one("partitions.after"), "5");
    assert_eq!(one("partitions.decrease"), "InvalidPartitionsException");
    assert_eq!(one("configs.retention"), "3600000:DYNAMIC_TOPIC_CONFIG");
    assert_eq!(one("configs.segment_after"), "1048576:DYNAMIC_TOPIC_CONFIG");
    assert_eq!(one("configs.retention_after"), "604800000:DEFAULT_CONFIG");
    assert_eq!(one("configs.broker_num_partitions"), "1");
    // offset:timestamp (ms after the first record's; -1 for none). The
    // timestamps are out of order: the largest is at offset 6.
    assert_eq!(one("offsets.earliest"), "0:-1");
    assert_eq!(one("offsets.latest"), "10:-1");
    assert_eq!(one("offsets.timestamp"), "6:90");
    assert_eq!(one("offsets.max_timestamp"), "6:90");
    assert_eq!(one("delete_records.low_watermark"), "3");
    assert_eq!(one("delete_records.earliest"), "3");
    assert_eq!(one("cluster.nodes"), "1");
    assert_eq!(one("cluster.controller"), "0");
    assert_eq!(one("cluster.has_id"), "true");
    assert_eq!(one("groups.listed"), "true");
    assert_eq!(one("groups.state"), "Empty");
    assert_eq!(one("groups.members"), "0");
    assert_eq!(one("groups.altered"), "0:moved");
    assert_eq!(one("groups.listed_after_delete"), "false");
    assert_eq!(one("log_dirs.dirs"), "1");
    assert_eq!(one("log_dirs.replica_nonempty"), "true");
    assert_eq!(one("log_dirs.dir_error"), "none");
    // epoch:last sequence:open transaction's first offset.
    assert_eq!(one("producers.count"), "1");
    assert_eq!(one("producers.state"), "0:6:OptionalLong.empty");
    // state:partitions:timeout.
    assert_eq!(one("transactions.committed.listed"), "CompleteCommit");
    assert_eq!(
        one("transactions.committed.described"),
        "CompleteCommit:0:60000"
    );
    assert_eq!(one("transactions.open.listed"), "Ongoing");
    assert_eq!(one("transactions.open.described"), "Ongoing:1:60000");
    assert_eq!(one("transactions.open_start_offset"), "OptionalLong[2]");
    assert_eq!(one("transactions.aborted.listed"), "CompleteAbort");
    assert_eq!(
        one("transactions.aborted.described"),
        "CompleteAbort:0:60000"
    );
    assert_eq!(one("delete_topics.listed"), "false");
    assert_eq!(
        one("delete_topics.describe"),
        "UnknownTopicOrPartitionException"
    );
}
