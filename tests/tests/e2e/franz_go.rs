//! franz-go, the strictest modern client (kgo and kadm, pinned in
//! `tests/clients/go/go.mod`; built by `tests/run` into
//! `target/test-clients/go/franz`), against a real `brook serve`: one
//! scenario of `tests/clients/go` per test, each on a broker of its own,
//! asserting on the `name value` lines it prints.
//!
//! franz-go logs what it dislikes about a broker: its warnings and errors
//! are counted (`log.warnings`, the first few repeated as `log.warning`) and
//! must be none. To see why a scenario fails, `FRANZ_LOG=debug` makes the
//! program log every request with its API and version on stderr, printed
//! with the broker's log on failure (`RUST_LOG=trace` reaches the broker).

use std::process::Command;

use brook_tests::broker::Broker;
use brook_tests::clients::{Report, franz_go, run};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

/// One run of `franz SCENARIO ADDRESS` on a broker of its own.
fn franz(scenario: &str) -> Report {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        BROOK,
        dir.path(),
        2,
        &["--set", "group.initial.rebalance.delay.ms=0"],
    );
    let output = run(
        Command::new(franz_go()).args([scenario, &broker.address]),
        None,
        &broker,
    );
    eprintln!("{output}");
    let report = Report::parse(&output);
    assert_eq!(
        report.one("log.warnings"),
        "0",
        "franz-go warned: {:#?}",
        report.all("log.warning")
    );
    report
}

/// A line's value as a number.
fn number(report: &Report, name: &str) -> usize {
    report
        .one(name)
        .parse()
        .unwrap_or_else(|error| panic!("{name}: {error} in {report:#?}"))
}

/// Five idempotent producers in turn (franz-go's default: acks=all, a
/// producer id, sequences; its default snappy, then none, gzip, lz4 and
/// zstd batches), 1000 keyed records with headers over 4 partitions by
/// franz-go's murmur2 partitioner: each acknowledged at a distinct offset
/// with no gap, the log holding each once, and a consumer from the start
/// getting each once where its acknowledgement said, with its key, value
/// and headers, in produce order within each partition.
#[test]
fn franz_go_idempotent_produce_reads_back_in_order() {
    let report = franz("produce");
    for codec in ["default", "none", "gzip", "lz4", "zstd"] {
        assert_eq!(
            report.one(&format!("produce.idempotent.{codec}")),
            "true",
            "a producer id for the {codec} producer: {report:#?}"
        );
    }
    assert_eq!(number(&report, "produce.errors"), 0, "{report:#?}");
    assert_eq!(number(&report, "produce.partitions"), 4, "{report:#?}");
    assert_eq!(number(&report, "produce.acked_distinct"), 1000);
    assert_eq!(report.one("produce.acked_dense"), "true", "{report:#?}");
    assert_eq!(number(&report, "produce.log_end"), 1000, "no duplicate");
    assert_eq!(number(&report, "consume.records"), 1000, "{report:#?}");
    assert_eq!(number(&report, "consume.distinct"), 1000, "{report:#?}");
    assert_eq!(number(&report, "consume.matching"), 1000, "{report:#?}");
    assert_eq!(number(&report, "consume.out_of_order"), 0, "{report:#?}");
}

/// A group of members with `CooperativeStickyBalancer` over 6 partitions:
/// A alone, B joins, C joins, A leaves; 120 records produced (record i to
/// partition i % 6) once each assignment settled. Cooperative: a join
/// revokes only the partitions that move (A gives up 3 when B joins, not
/// 6); sticky: nobody's kept partitions move. Every member commits after
/// each poll and on revocation, so the union of what the members consumed
/// is every record exactly once, each member consumed exactly what its
/// partitions got, and the group's committed offsets are the log ends.
#[test]
fn franz_go_cooperative_sticky_group_join_and_leave() {
    let report = franz("group");
    let partitions_of = |phase: &str| -> Vec<(String, usize)> {
        report
            .one(&format!("group.{phase}.assignment"))
            .split(' ')
            .map(|member| {
                let (name, partitions) = member.split_once(':').unwrap();
                (name.to_owned(), partitions.split(',').count())
            })
            .collect()
    };
    let counts = |pairs: &[(&str, usize)]| -> Vec<(String, usize)> {
        pairs
            .iter()
            .map(|(name, count)| ((*name).to_owned(), *count))
            .collect()
    };
    assert_eq!(partitions_of("a"), counts(&[("A", 6)]), "{report:#?}");
    assert_eq!(
        partitions_of("ab"),
        counts(&[("A", 3), ("B", 3)]),
        "{report:#?}"
    );
    assert_eq!(
        partitions_of("abc"),
        counts(&[("A", 2), ("B", 2), ("C", 2)]),
        "{report:#?}"
    );
    assert_eq!(
        partitions_of("bc"),
        counts(&[("B", 3), ("C", 3)]),
        "{report:#?}"
    );
    assert_eq!(report.one("group.ab.revoked"), "A:3", "{report:#?}");
    assert_eq!(report.one("group.abc.revoked"), "A:1 B:1", "{report:#?}");
    assert_eq!(report.one("group.bc.revoked"), "A:2 B:0", "{report:#?}");
    assert_eq!(report.one("group.sticky"), "true", "{report:#?}");

    assert_eq!(report.one("group.describe.state"), "Stable");
    assert_eq!(report.one("group.describe.protocol_type"), "consumer");
    assert_eq!(report.one("group.describe.protocol"), "cooperative-sticky");
    assert_eq!(number(&report, "group.describe.members"), 2);
    assert_eq!(
        report.one("group.describe.matches_callbacks"),
        "true",
        "DescribeGroups' assignments are the members' own: {report:#?}"
    );

    assert_eq!(number(&report, "group.produced"), 480);
    assert_eq!(number(&report, "group.distinct"), 480, "{report:#?}");
    assert_eq!(number(&report, "group.duplicates"), 0, "{report:#?}");
    // A: 120 alone, 60 with B, 40 with B and C; B: 60 + 40 + 60; C: 40 + 60.
    assert_eq!(
        report.one("group.consumed"),
        "A:220 B:160 C:100",
        "{report:#?}"
    );
    assert_eq!(number(&report, "group.lost"), 0, "{report:#?}");
    assert_eq!(number(&report, "group.commit_errors"), 0, "{report:#?}");
    assert_eq!(
        report.one("group.committed"),
        "0:80 1:80 2:80 3:80 4:80 5:80",
        "{report:#?}"
    );
    assert_eq!(report.one("group.end"), report.one("group.committed"));
    assert_eq!(report.one("group.after.state"), "Empty");
    assert_eq!(number(&report, "group.after.members"), 0);
}

/// `GroupTransactSession` consume-transform-produce from a 3-partition input
/// (read_committed, cooperative-sticky) to an output, committing the input
/// offsets in each transaction (AddOffsetsToTxn, TxnOffsetCommit, EndTxn):
/// 150 inputs all committed, then 150 more of which the first non-empty
/// transaction is ended with `TryAbort` (its outputs acknowledged, then
/// aborted) and the session, back at the committed offsets, does them
/// again. Every input is in exactly one committed transaction, the group's
/// offsets (OffsetFetch with require_stable, retried while
/// UNSTABLE_OFFSET_COMMIT) are the input's ends, DescribeTransactions and
/// ListTransactions agree on the finished transaction, read_committed sees
/// each output exactly once and read_uncommitted the aborted ones too.
#[test]
fn franz_go_group_transact_session_exactly_once() {
    let report = franz("eos");
    assert_eq!(number(&report, "eos.transactions.aborted"), 1);
    assert_eq!(report.one("eos.transactions.committed_some"), "true");
    let aborted = number(&report, "eos.aborted_outputs");
    assert!(
        aborted > 0,
        "the aborted transaction had records: {report:#?}"
    );
    assert_eq!(number(&report, "eos.committed_inputs"), 300, "{report:#?}");
    assert_eq!(number(&report, "eos.committed_distinct"), 300);
    assert_eq!(
        report.one("eos.describe_transaction"),
        "CompleteCommit/0",
        "DescribeTransactions once the markers are written: {report:#?}"
    );
    assert_eq!(report.one("eos.list_transactions"), "true", "{report:#?}");
    assert_eq!(report.one("eos.input_end"), "0:100 1:100 2:100");
    assert_eq!(
        report.one("eos.group_committed"),
        report.one("eos.input_end"),
        "{report:#?}"
    );
    assert_eq!(number(&report, "eos.read_committed.records"), 300);
    assert_eq!(number(&report, "eos.read_committed.distinct"), 300);
    assert_eq!(number(&report, "eos.read_committed.matching"), 300);
    assert_eq!(
        number(&report, "eos.read_uncommitted.records"),
        300 + aborted,
        "{report:#?}"
    );
    assert_eq!(number(&report, "eos.read_uncommitted.distinct"), 300);
    assert_eq!(
        number(&report, "eos.read_uncommitted.matching"),
        300 + aborted
    );
}

/// kadm over the admin APIs: CreateTopics with configs (and again:
/// TOPIC_ALREADY_EXISTS; validate_only creates nothing), CreatePartitions,
/// ListTopics, Metadata (one broker, the one dialled, leading every
/// partition), DescribeCluster, DescribeConfigs (set and default values
/// with their sources), IncrementalAlterConfigs, ListOffsets (start, end,
/// by time), DescribeLogDirs, DeleteRecords, a group's DescribeGroups /
/// ListGroups / OffsetFetch / lag while its member runs and after it left,
/// OffsetDelete, DeleteGroups, DeleteTopics (and again:
/// UNKNOWN_TOPIC_OR_PARTITION), Metadata after the delete.
#[test]
fn franz_go_kadm_admin() {
    let report = franz("admin");
    let expected = [
        ("admin.create.a", "ok"),
        ("admin.create.a.partitions", "3"),
        ("admin.create.a.replication_factor", "1"),
        ("admin.create.a.has_id", "true"),
        (
            "admin.create.a.retention.ms",
            "3600000/DYNAMIC_TOPIC_CONFIG",
        ),
        ("admin.create.b", "ok"),
        ("admin.create.again", "TOPIC_ALREADY_EXISTS"),
        ("admin.validate.c", "ok"),
        ("admin.create_partitions.b", "ok"),
        ("admin.list", "franz-admin-a,franz-admin-b"),
        ("admin.metadata.brokers", "1"),
        ("admin.metadata.broker", "true"),
        ("admin.metadata.controller_is_broker", "true"),
        ("admin.metadata.has_cluster_id", "true"),
        ("admin.metadata.a.partitions", "3"),
        ("admin.metadata.a.led_by_broker", "3"),
        ("admin.metadata.a.internal", "false"),
        ("admin.metadata.b.partitions", "4"),
        ("admin.metadata.b.led_by_broker", "4"),
        ("admin.metadata.b.internal", "false"),
        ("admin.cluster.error", "ok"),
        ("admin.cluster.has_cluster_id", "true"),
        ("admin.cluster.controller_is_broker", "true"),
        ("admin.cluster.brokers", "1"),
        (
            "admin.config.a.retention.ms",
            "3600000/DYNAMIC_TOPIC_CONFIG",
        ),
        (
            "admin.config.a.segment.bytes",
            "1048576/DYNAMIC_TOPIC_CONFIG",
        ),
        ("admin.config.b.retention.ms", "604800000/DEFAULT_CONFIG"),
        ("admin.alter.a", "ok"),
        (
            "admin.altered.a.retention.ms",
            "7200000/DYNAMIC_TOPIC_CONFIG",
        ),
        ("admin.altered.a.segment.bytes", "1073741824/DEFAULT_CONFIG"),
        ("admin.end.a", "0:10 1:10 2:10"),
        ("admin.end.b", "0:5 1:5 2:5 3:5"),
        ("admin.start.a", "0:0 1:0 2:0"),
        ("admin.after_0ms.a", "0:0 1:0 2:0"),
        ("admin.log_dirs.a.partitions_with_data", "3"),
        ("admin.delete_records.a.0", "ok/4"),
        ("admin.start_after_delete_records.a", "0:4 1:0 2:0"),
        ("admin.group.state", "Stable"),
        ("admin.group.protocol_type", "consumer"),
        ("admin.group.protocol", "cooperative-sticky"),
        ("admin.group.members", "1"),
        ("admin.group.member", "franz-admin/3"),
        ("admin.groups.listed", "true"),
        ("admin.group.committed", "0:10 1:10 2:10"),
        ("admin.group.lag", "0"),
        ("admin.group.consumed", "26"),
        ("admin.group.left.state", "Empty"),
        ("admin.group.left.members", "0"),
        ("admin.group.delete_offsets", "true"),
        ("admin.group.committed_after_delete_offsets", "1:10 2:10"),
        ("admin.group.delete", "ok"),
        ("admin.groups.listed_after_delete", "false"),
        ("admin.delete.a", "ok"),
        ("admin.delete.b", "ok"),
        ("admin.delete.again", "UNKNOWN_TOPIC_OR_PARTITION"),
        ("admin.list_after_delete", ""),
        ("admin.metadata_after_delete", "UNKNOWN_TOPIC_OR_PARTITION"),
    ];
    for (name, value) in expected {
        assert_eq!(report.one(name), value, "{name}: {report:#?}");
    }
}
