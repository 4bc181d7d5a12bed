//! Transactions with Apache Kafka's Java client 4.1.2, and a Kafka Streams
//! 4.1.2 application with `processing.guarantee=exactly_once_v2` killed
//! with SIGKILL and restarted, against a real `brook serve`. The programs
//! are `TransactionChecks` and `WordCount` in `tests/clients/java`; the
//! values asserted are the ones they print against Apache Kafka 4.1.2.

use std::time::Duration;

use brook_tests::broker::Broker;
use brook_tests::clients::{Report, run};
use brook_tests::java::{Spawned, checks};

use super::java_client::{assert_no_errors, java_report};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// Input lines of the word count (five words each, twenty distinct words).
const LINES: usize = 2000;
/// The first run is killed once it has sent this many count updates (of
/// 10,000), well before it is done.
const KILL_AFTER_UPDATES: u64 = 2000;
/// How long a run of the application may take to reach a point.
const STREAMS_WAIT: Duration = Duration::from_secs(150);

/// initTransactions, commit and abort (read_committed sees 50 of 80
/// records; each transaction leaves one marker per partition: 84 offsets);
/// a producer with the same transactional.id fences the first, whose
/// commit then fails with ProducerFencedException; a consume–transform–
/// produce loop with sendOffsetsToTransaction, one transaction aborted and
/// redone: the output holds each input record exactly once (the aborted
/// copies only under read_uncommitted) and the group's committed offsets
/// are the input's end.
#[test]
fn java_transactions_commit_abort_fencing_and_copy_loop() {
    let report = java_report("transactions");
    assert_no_errors(&report, &["txn.basic", "txn.fencing", "txn.loop"]);
    let one = |name: &str| report.one(&format!("txn.{name}"));
    assert_eq!(one("basic.read_committed"), "50");
    assert_eq!(one("basic.read_committed_aborted"), "0");
    assert_eq!(one("basic.read_uncommitted"), "80");
    assert_eq!(one("basic.log_end_total"), "84");
    assert_eq!(one("fencing.zombie_commit"), "ProducerFencedException");
    assert_eq!(one("fencing.read_committed"), "successor");
    assert_eq!(one("loop.aborted"), "1");
    assert_eq!(one("loop.output"), "300");
    assert_eq!(one("loop.output_distinct"), "300");
    assert_eq!(one("loop.output_wrong"), "0");
    let transactions: usize = one("loop.transactions").parse().unwrap();
    let aborted_records: usize = one("loop.aborted_records").parse().unwrap();
    assert!((1..=40).contains(&aborted_records), "one poll: {report:#?}");
    // The aborted copies are in the log, seen only by read_uncommitted.
    assert_eq!(
        one("loop.output_uncommitted"),
        (300 + aborted_records).to_string()
    );
    assert!(transactions > 300 / 40, "{report:#?}");
    assert_eq!(one("loop.group_committed_total"), "300");
}

/// A word count (a repartition by word, a counting state store with its
/// changelog, every update to the output) under exactly_once_v2: killed
/// with SIGKILL a fifth of the way through, started again on the same state
/// directory until it has counted every line. The committed output holds,
/// for every word, exactly the counts 1, 2, … n in order: nothing lost,
/// nothing counted twice, though the killed run's open transaction had
/// sent updates that the second run sends again.
#[test]
fn java_streams_exactly_once_word_count_survives_kill() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        BROOK,
        &dir.path().join("broker"),
        2,
        &["--set", "group.initial.rebalance.delay.ms=0"],
    );
    let lines = LINES.to_string();
    let input = Report::parse(&run(
        checks("streams-input", &broker.address).arg(&lines),
        None,
        &broker,
    ));
    assert_eq!(input.one("streams.input_lines"), lines);

    let state_dir = dir.path().join("streams-state");
    let application = |broker: &Broker| {
        let mut command = checks("streams-run", &broker.address);
        command.arg("brook-word-count").arg(&state_dir).arg(&lines);
        command
    };
    let mut first = Spawned::start(&mut application(&broker));
    first.wait_for(STREAMS_WAIT, |line| {
        line.strip_prefix("streams.progress ")
            .is_some_and(|updates| updates.parse::<u64>().unwrap() >= KILL_AFTER_UPDATES)
    });
    first.kill();
    let first_output = first.output();
    assert!(
        !first_output.contains("streams.done"),
        "the first run was to be killed before the end:\n{first_output}"
    );

    let mut second = Spawned::start(&mut application(&broker));
    let finished = second.wait(STREAMS_WAIT);
    let second_output = second.output();
    assert!(
        finished && second_output.contains("streams.done true"),
        "the restarted application did not finish:\n{second_output}\n--- broker log\n{}",
        broker.log()
    );

    let verify = Report::parse(&run(
        checks("streams-verify", &broker.address).arg(&lines),
        None,
        &broker,
    ));
    eprintln!("{verify:#?}");
    assert!(verify.all("streams.wrong").is_empty(), "{verify:#?}");
    assert_eq!(verify.one("streams.expected_records"), "10000");
    assert_eq!(verify.one("streams.output_records"), "10000");
    assert_eq!(verify.one("streams.words"), "20");
    assert_eq!(verify.one("streams.words_exact"), "20");
}
