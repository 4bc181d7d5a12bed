//! Idempotent and transactional producers with kafkajs 2.2.4 (which speaks
//! the older API versions: InitProducerId, AddPartitionsToTxn, EndTxn,
//! AddOffsetsToTxn and TxnOffsetCommit below their flexible versions,
//! Produce v7 and Fetch v11) against a real `brook serve`; the script is
//! `tests/clients/kafkajs_transactions.js`, run as `client_groups.rs` runs
//! its scripts. (librdkafka through `rdkafka` is in `idempotent_producer.rs`,
//! `transactions.rs` and `exactly_once.rs`.)
//!
//! To see why it fails: `RUST_LOG=trace` reaches the broker (every request
//! with its API and version, in its log, printed on failure).

use std::process::Command;

use brook_tests::broker::Broker;
use brook_tests::clients::{Report, node_path, run, script};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// Records of the idempotent producer, and of the committed transaction.
const RECORDS: usize = 200;
/// Records of the aborted transaction.
const ABORTED: usize = 60;
/// The script's topics have this many partitions.
const PARTITIONS: usize = 4;

/// One run of the script on a broker of its own.
fn kafkajs_transactions_report() -> Report {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        BROOK,
        dir.path(),
        2,
        &["--set", "group.initial.rebalance.delay.ms=0"],
    );
    let output = run(
        Command::new("node")
            .env("NODE_PATH", node_path())
            .arg(script("kafkajs_transactions.js"))
            .args([&broker.address, "kafkajs-eos", "kafkajs-eos-group"])
            .args([RECORDS.to_string(), ABORTED.to_string()]),
        None,
        &broker,
    );
    eprintln!("{output}");
    Report::parse(&output)
}

/// kafkajs's idempotent producer (`idempotent: true, maxInFlightRequests:
/// 1`) over several sends: the log holds each record once and a consumer
/// gets each once. Its transactional producer: an aborted transaction then
/// a committed one over four partitions; `readUncommitted: false` sees
/// exactly the committed records, `readUncommitted: true` all of them,
/// neither any control record. `transaction.sendOffsets` in a committed
/// transaction: the group's offsets (OffsetFetch) are those sent. Both are
/// read until they settle (bounded): markers follow the EndTxn answer.
#[test]
fn kafkajs_idempotent_and_transactional_producers() {
    let report = kafkajs_transactions_report();
    let one = |name: &str| -> usize {
        report
            .one(name)
            .parse()
            .unwrap_or_else(|error| panic!("{name}: {error} in {report:#?}"))
    };
    assert_eq!(report.one("kafkajs"), "2.2.4");

    assert_eq!(one("idempotent.acked"), RECORDS, "{report:#?}");
    assert_eq!(
        one("idempotent.log_end"),
        RECORDS,
        "no duplicate in the log"
    );
    assert_eq!(one("idempotent.records"), RECORDS, "each once: {report:#?}");
    assert_eq!(one("idempotent.distinct"), RECORDS, "{report:#?}");
    assert_eq!(one("idempotent.unexpected"), 0, "{report:#?}");

    assert_eq!(one("transactions.aborted"), ABORTED);
    assert_eq!(one("transactions.committed"), RECORDS);
    assert_eq!(
        one("transactions.log_end"),
        RECORDS + ABORTED + 2 * PARTITIONS,
        "the records and an abort and a commit marker on every partition"
    );
    assert_eq!(one("read_committed.records"), RECORDS, "{report:#?}");
    assert_eq!(one("read_committed.distinct"), RECORDS, "{report:#?}");
    assert_eq!(one("read_committed.committed"), RECORDS, "{report:#?}");
    assert_eq!(one("read_committed.aborted"), 0, "{report:#?}");
    assert_eq!(one("read_committed.unexpected"), 0, "{report:#?}");
    assert_eq!(
        one("read_uncommitted.records"),
        RECORDS + ABORTED,
        "{report:#?}"
    );
    assert_eq!(
        one("read_uncommitted.distinct"),
        RECORDS + ABORTED,
        "{report:#?}"
    );
    assert_eq!(one("read_uncommitted.committed"), RECORDS, "{report:#?}");
    assert_eq!(one("read_uncommitted.aborted"), ABORTED, "{report:#?}");
    assert_eq!(one("read_uncommitted.unexpected"), 0, "{report:#?}");

    assert_eq!(report.one("offsets.sent"), "0:10 1:20 2:30 3:40");
    assert_eq!(
        report.one("offsets.committed"),
        report.one("offsets.sent"),
        "TxnOffsetCommit's offsets are the group's once the transaction commits"
    );
}
