//! Read-your-write after `acks=1`: on a partition whose leader is its only
//! in-sync replica, Kafka moves the high watermark before it answers acks=1,
//! so a client that produces and then asks for the log end (ListOffsets
//! latest, or a seek to the end) sees its record. Brook keeps its
//! durability rule (the high watermark never passes what a crash could take
//! back) and answers acks=1 once the record is visible, which with the
//! default flush policy is once it is durable.

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use brook_tests::broker::Broker;
use brook_tests::raw::{connect, create_topic, list_offset, produce_batch};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
/// Produce-then-look rounds: a race lost even once fails the test (seen
/// 50-66 of 200-300 before).
const ROUNDS: usize = 300;

fn one_record(index: usize) -> Vec<u8> {
    encode_batch(
        &[NewRecord::value(format!("record-{index}"), TimestampMs(1))],
        &BatchOptions::default(),
    )
}

fn every_acknowledged_record_is_visible_at_once(extra: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, extra);
    let mut stream = connect(&broker);
    create_topic(&mut stream, "ryw", 2);
    let mut short = Vec::new();
    for index in 0..ROUNDS {
        let partition = (index % 2) as i32;
        let answer = produce_batch(&mut stream, "ryw", partition, 1, one_record(index));
        assert_eq!(answer.error_code, 0, "round {index}: {answer:?}");
        let end = list_offset(&mut stream, "ryw", partition, -1);
        if end != answer.base_offset + 1 {
            short.push((index, answer.base_offset, end));
        }
    }
    assert!(
        short.is_empty(),
        "{} of {ROUNDS} acks=1 records not yet in the log end (round, offset, end): {:?}",
        short.len(),
        &short[..short.len().min(10)]
    );
}

#[test]
fn acks_1_is_answered_once_the_record_is_visible() {
    every_acknowledged_record_is_visible_at_once(&[]);
}

/// With Kafka's flush settings the high watermark follows the written
/// offset, so acks=1 still sees its record at once.
#[test]
fn acks_1_under_a_flush_interval_is_visible_at_once() {
    every_acknowledged_record_is_visible_at_once(&["--set", "log.flush.interval.messages=1000000"]);
}
