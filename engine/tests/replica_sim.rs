//! One partition's replication under the deterministic simulator
//! (`brook_engine::replica::sim`): a sweep of seeds keeps every invariant
//! (no committed record lost, HW never back, ISR members identical below
//! the HW, one leader per epoch), a leader cut off by a network partition
//! included, and the checker catches a replica that
//! truncates to its high watermark instead of by leader epoch, and a
//! follower that takes a fetch answer sent before its leader or log moved,
//! and a replica that counts what it wrote as held before it is synced
//! (the log core's durability rule, which the simulator drives), and a
//! new leader that answers the latest offset before its HW reaches its
//! epoch's start (KIP-207).
//! `BROOK_SIM_SEEDS=N` sets the sweep's length (CI: 1,000).

use brook_engine::cluster::sim::sweep_length;
use brook_engine::replica::sim::{ReplicaBug, ReplicaReport, sweep};

#[test]
fn a_sweep_of_seeds_keeps_every_replication_invariant() {
    let count = sweep_length();
    let reports = sweep(0, count, |_| {}).unwrap_or_else(|violation| panic!("{violation}"));
    let total: ReplicaReport = reports.into_iter().sum();
    println!("{count} seeds: {total:?}");
    // Each acknowledgement waits on the leader's and a follower's disk.
    assert!(total.acknowledged > count * 10, "{total:?}");
    assert!(total.crashes > count, "{total:?}");
    assert!(total.elections > count, "{total:?}");
    assert!(total.truncations > count / 10, "{total:?}");
    assert!(total.isr_changes > count, "{total:?}");
    assert!(total.partitions > count / 2, "{total:?}");
    assert!(total.stale_answers > count / 10, "{total:?}");
    assert!(total.unsynced_kept > count, "{total:?}");
    assert!(total.torn_writes > count / 5, "{total:?}");
    assert!(total.preferred_elections > count / 10, "{total:?}");
}

#[test]
fn truncating_to_the_high_watermark_loses_an_acknowledged_record() {
    let violation = sweep(0, 2_000, |config| {
        config.bug = Some(ReplicaBug::TruncateToHighWatermark)
    })
    .expect_err("the checker must catch truncation to the HW");
    println!("{violation}");
    assert!(
        violation.what.contains("committed record") || violation.what.contains("HW"),
        "{violation}"
    );
}

#[test]
fn taking_a_stale_fetch_answer_loses_an_acknowledged_record() {
    let violation = sweep(0, 2_000, |config| {
        config.bug = Some(ReplicaBug::TakeStaleFetchAnswers)
    })
    .expect_err("the checker must catch a follower taking stale answers");
    println!("{violation}");
}

#[test]
fn counting_unsynced_writes_as_held_loses_an_acknowledged_record() {
    let violation = sweep(0, 2_000, |config| {
        config.bug = Some(ReplicaBug::CountWrittenAsHeld)
    })
    .expect_err("the checker must catch a replica counting unsynced writes");
    println!("{violation}");
    // A crash takes back records the replica counted: an acknowledged one,
    // or the HW they moved.
    assert!(
        violation.what.contains("committed record") || violation.what.contains("HW"),
        "{violation}"
    );
}

#[test]
fn answering_the_latest_offset_behind_the_epoch_start_hides_acknowledged_records() {
    let violation = sweep(0, 2_000, |config| {
        config.bug = Some(ReplicaBug::AnswerLatestBehindEpochStart)
    })
    .expect_err("the checker must catch a latest offset below a committed record");
    println!("{violation}");
    assert!(
        violation.what.contains("answers the latest offset"),
        "{violation}"
    );
}
