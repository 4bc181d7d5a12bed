//! The manager's rules, driven through its public API. Rows follow Kafka's
//! `ProducerAppendInfo.checkSequence` / `checkProducerEpoch` and
//! `ProducerStateManager` behaviour.

use proptest::prelude::*;

use super::snapshot::ProducerSnapshot;
use super::*;
use crate::types::Offset;

const MAX: i32 = i32::MAX;
const PRODUCER: ProducerId = ProducerId(7);
const OTHER: ProducerId = ProducerId(8);

fn batch_of(
    producer_id: ProducerId,
    epoch: i16,
    base_sequence: i32,
    records: i32,
) -> ProducerBatch {
    ProducerBatch {
        producer_id,
        producer_epoch: ProducerEpoch(epoch),
        base_sequence: Sequence(base_sequence),
        last_offset_delta: records - 1,
        max_timestamp: TimestampMs(1_000 + i64::from(base_sequence)),
        kind: BatchKind::Idempotent,
    }
}

fn batch(epoch: i16, base_sequence: i32, records: i32) -> ProducerBatch {
    batch_of(PRODUCER, epoch, base_sequence, records)
}

fn manager() -> ProducerStateManager {
    ProducerStateManager::new(ProducerStateConfig::default())
}

/// Checks a batch and, if new, appends it at the log end (the map end offset).
fn append(
    manager: &mut ProducerStateManager,
    batch: ProducerBatch,
) -> Result<Offset, ProducerError> {
    match manager.check_batch(&batch)? {
        Verdict::Append(pending) => {
            let base_offset = manager.map_end_offset();
            manager.record_appended(pending, base_offset);
            Ok(base_offset)
        }
        duplicate => panic!("unexpected {duplicate:?} for {batch:?}"),
    }
}

#[derive(Debug, PartialEq)]
enum Expect {
    Append,
    OutOfOrder { expected: i32 },
    InvalidEpoch,
    InvalidSequence,
}

fn outcome(result: Result<Verdict, ProducerError>) -> Expect {
    match result {
        Ok(Verdict::Append(_)) => Expect::Append,
        Err(ProducerError::OutOfOrderSequence { expected, .. }) => Expect::OutOfOrder {
            expected: expected.0,
        },
        Err(ProducerError::InvalidProducerEpoch { .. }) => Expect::InvalidEpoch,
        Err(ProducerError::InvalidSequence { .. }) => Expect::InvalidSequence,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn sequence_and_epoch_rules() {
    use Expect::*;
    // (rule, appended batches as (epoch, base sequence, records), incoming, expected)
    type Batch = (i16, i32, i32);
    let rows: [(&str, &[Batch], Batch, Expect); 19] = [
        ("a new producer starts at 0", &[], (0, 0, 3), Append),
        (
            "an unknown producer may start anywhere (KIP-360)",
            &[],
            (0, 42, 1),
            Append,
        ),
        (
            "an unknown producer at a later epoch too",
            &[],
            (3, 1_000, 2),
            Append,
        ),
        (
            "an epoch below -1 is older than 'no epoch'",
            &[],
            (-2, 0, 1),
            InvalidEpoch,
        ),
        ("the next sequence", &[(0, 0, 3)], (0, 3, 2), Append),
        ("a gap", &[(0, 0, 3)], (0, 5, 1), OutOfOrder { expected: 3 }),
        (
            "an overlapping range",
            &[(0, 0, 3)],
            (0, 2, 1),
            OutOfOrder { expected: 3 },
        ),
        (
            "an old range never appended",
            &[(0, 0, 3), (0, 3, 3)],
            (0, 0, 2),
            OutOfOrder { expected: 6 },
        ),
        ("an older epoch", &[(1, 0, 3)], (0, 3, 1), InvalidEpoch),
        (
            "an older epoch at sequence 0",
            &[(1, 0, 3)],
            (0, 0, 1),
            InvalidEpoch,
        ),
        (
            "a bumped epoch starts at 0",
            &[(0, 0, 3)],
            (1, 0, 2),
            Append,
        ),
        (
            "a bumped epoch not at 0",
            &[(0, 0, 3)],
            (1, 3, 2),
            OutOfOrder { expected: 0 },
        ),
        ("an epoch may jump", &[(0, 0, 3)], (5, 0, 1), Append),
        ("0 follows i32::MAX", &[(0, MAX - 2, 3)], (0, 0, 1), Append),
        (
            "1 does not follow i32::MAX",
            &[(0, MAX - 2, 3)],
            (0, 1, 1),
            OutOfOrder { expected: 0 },
        ),
        (
            "a batch may span the wrap",
            &[(0, MAX - 1, 1)],
            (0, MAX, 3),
            Append,
        ),
        (
            "and the next follows it",
            &[(0, MAX - 1, 1), (0, MAX, 3)],
            (0, 2, 1),
            Append,
        ),
        (
            "a negative sequence is invalid",
            &[],
            (0, -1, 1),
            InvalidSequence,
        ),
        (
            "even where one is expected",
            &[(0, MAX, 1)],
            (0, i32::MIN, 1),
            InvalidSequence,
        ),
    ];
    for (rule, history, (epoch, sequence, records), expected) in rows {
        let mut manager = manager();
        for &(epoch, sequence, records) in history {
            append(&mut manager, batch(epoch, sequence, records)).unwrap();
        }
        let result = manager.check_batch(&batch(epoch, sequence, records));
        assert_eq!(outcome(result), expected, "{rule}");
    }
}

#[test]
fn retries_of_each_of_the_last_five_batches_get_their_original_offsets() {
    let mut manager = manager();
    let mut placed = Vec::new();
    for i in 0..6 {
        // Another producer in between so offsets and sequences differ.
        append(&mut manager, batch_of(OTHER, 0, i * 3, 3)).unwrap();
        let sent = batch(0, i * 2, 2);
        let base_offset = append(&mut manager, sent).unwrap();
        placed.push((sent, base_offset));
    }
    for &(sent, base_offset) in &placed[1..] {
        assert_eq!(
            manager.check_batch(&sent),
            Ok(Verdict::Duplicate {
                first_offset: base_offset,
                last_offset: Offset(base_offset.0 + 1),
                timestamp: sent.max_timestamp,
            }),
            "{sent:?}"
        );
    }
    let (oldest, _) = placed[0];
    let expected = ProducerError::OutOfOrderSequence {
        producer_id: PRODUCER,
        epoch: ProducerEpoch(0),
        sequence: Sequence(0),
        expected: Sequence(12),
    };
    assert_eq!(manager.check_batch(&oldest), Err(expected));
    // Same start, other end: not a retry.
    assert!(matches!(
        manager.check_batch(&batch(0, 10, 1)),
        Err(ProducerError::OutOfOrderSequence { .. })
    ));
    // A retry under another epoch is not one either.
    assert_eq!(
        outcome(manager.check_batch(&batch(1, 10, 2))),
        Expect::OutOfOrder { expected: 0 }
    );
    assert_eq!(
        outcome(manager.check_batch(&batch(-1, 10, 2))),
        Expect::InvalidEpoch
    );
}

#[test]
fn a_new_epoch_forgets_the_old_epochs_batches() {
    let mut manager = manager();
    append(&mut manager, batch(0, 0, 2)).unwrap();
    append(&mut manager, batch(1, 0, 2)).unwrap();
    let entry = manager.entry(PRODUCER).unwrap();
    assert_eq!(entry.producer_epoch(), ProducerEpoch(1));
    assert_eq!(entry.batches().len(), 1);
    assert!(matches!(
        manager.check_batch(&batch(1, 0, 2)),
        Ok(Verdict::Duplicate {
            first_offset: Offset(2),
            ..
        })
    ));
}

#[test]
fn inside_a_transaction_only_transactional_batches_are_accepted() {
    let mut manager = manager();
    let transactional = |sequence| ProducerBatch {
        kind: BatchKind::Transactional,
        ..batch(0, sequence, 2)
    };
    append(&mut manager, batch(0, 0, 2)).unwrap();
    let first = append(&mut manager, transactional(2)).unwrap();
    append(&mut manager, transactional(4)).unwrap();
    let entry = manager.entry(PRODUCER).unwrap();
    assert_eq!(entry.current_transaction_first_offset(), Some(first));
    let refused = manager.check_batch(&batch(0, 6, 1)).unwrap_err();
    assert_eq!(
        refused,
        ProducerError::InvalidTransactionState {
            producer_id: PRODUCER
        }
    );
    // The transaction outlives an epoch bump until its marker ends it.
    assert!(manager.check_batch(&batch(1, 0, 1)).is_err());
}

#[test]
fn errors_carry_kafkas_codes() {
    let producer_id = PRODUCER;
    let rows = [
        (
            ProducerError::InvalidSequence {
                producer_id,
                sequence: Sequence(-1),
            },
            87,
        ),
        (
            ProducerError::InvalidProducerEpoch {
                producer_id,
                epoch: ProducerEpoch(0),
                current: ProducerEpoch(1),
            },
            47,
        ),
        (
            ProducerError::OutOfOrderSequence {
                producer_id,
                epoch: ProducerEpoch(0),
                sequence: Sequence(5),
                expected: Sequence(3),
            },
            45,
        ),
        (ProducerError::InvalidTransactionState { producer_id }, 48),
        (ProducerError::ProducersLimitReached { limit: 1 }, 44),
    ];
    for (error, code) in rows {
        assert_eq!(error.error_code().0, code, "{error}");
    }
}

#[test]
fn idle_producers_expire_unless_a_transaction_is_open() {
    let config = ProducerStateConfig {
        producer_id_expiration_ms: 1_000,
        ..ProducerStateConfig::default()
    };
    // (last timestamp, transactional, now, expired)
    let rows = [
        (5_000, false, 5_999, false),
        (5_000, false, 6_000, true),
        (5_000, true, 1_000_000, false),
        (-1, false, 999, true),
        (i64::MIN, false, 1, false),
    ];
    for (timestamp, transactional, now, expired) in rows {
        let mut manager = ProducerStateManager::new(config);
        let sent = ProducerBatch {
            max_timestamp: TimestampMs(timestamp),
            kind: if transactional {
                BatchKind::Transactional
            } else {
                BatchKind::Idempotent
            },
            ..batch(0, 5, 1)
        };
        append(&mut manager, sent).unwrap();
        let removed = manager.remove_expired_producers(TimestampMs(now));
        assert_eq!(removed == 1, expired, "{timestamp} at {now}");
        assert_eq!(manager.entry(PRODUCER).is_none(), expired);
    }
}

#[test]
fn an_expired_producer_is_unknown_and_may_continue_anywhere() {
    let mut manager = manager();
    append(&mut manager, batch(0, 0, 5)).unwrap();
    assert!(manager.check_batch(&batch(0, 9, 1)).is_err());
    manager.remove_expired_producers(TimestampMs(1_000 + PRODUCER_ID_EXPIRATION_MS_DEFAULT));
    assert_eq!(
        outcome(manager.check_batch(&batch(0, 9, 1))),
        Expect::Append
    );
}

#[test]
fn the_producer_limit_refuses_only_new_producers() {
    let mut manager = ProducerStateManager::new(ProducerStateConfig {
        producers_max: 2,
        ..ProducerStateConfig::default()
    });
    append(&mut manager, batch_of(ProducerId(1), 0, 0, 1)).unwrap();
    append(&mut manager, batch_of(ProducerId(2), 0, 0, 1)).unwrap();
    let third = batch_of(ProducerId(3), 0, 0, 1);
    assert_eq!(
        manager.check_batch(&third),
        Err(ProducerError::ProducersLimitReached { limit: 2 })
    );
    append(&mut manager, batch_of(ProducerId(2), 0, 1, 1)).unwrap();
    // What is already in the log is never refused.
    manager.replay_batch(&third, manager.map_end_offset());
    assert_eq!(manager.producer_count(), 3);
}

#[test]
fn the_log_start_moving_keeps_producers() {
    let mut manager = manager();
    append(&mut manager, batch(0, 0, 3)).unwrap();
    manager.on_log_start_offset(Offset(100));
    assert_eq!(manager.map_end_offset(), Offset(100));
    assert_eq!(
        outcome(manager.check_batch(&batch(0, 4, 1))),
        Expect::OutOfOrder { expected: 3 }
    );
    manager.on_log_start_offset(Offset(50));
    assert_eq!(manager.map_end_offset(), Offset(100));
}

/// A log of interleaved producers, appended through the checks.
fn sample_log() -> (ProducerStateManager, Vec<(ProducerBatch, Offset)>) {
    let mut manager = manager();
    let mut log = Vec::new();
    let batches = [
        batch_of(PRODUCER, 0, 0, 3),
        batch_of(OTHER, 4, 100, 2),
        batch_of(PRODUCER, 0, 3, 1),
        batch_of(PRODUCER, 1, 0, 2),
        batch_of(OTHER, 4, 102, 5),
        batch_of(PRODUCER, 1, 2, 2),
    ];
    for sent in batches {
        let base_offset = append(&mut manager, sent).unwrap();
        log.push((sent, base_offset));
    }
    (manager, log)
}

/// Rebuilds as the storage layer will: reload, replay the rest, finish.
fn rebuild(
    manager: &mut ProducerStateManager,
    log: &[(ProducerBatch, Offset)],
    log_end: Offset,
    snapshot: Option<ProducerSnapshot>,
) -> Rebuild {
    let step = manager.truncate_and_reload(Offset(0), log_end, TimestampMs(2_000), snapshot);
    if let Rebuild::ReplayFrom(from) = step {
        for (sent, base_offset) in log {
            let last_offset = base_offset.0 + i64::from(sent.last_offset_delta);
            if last_offset >= from.0 && base_offset.0 < log_end.0 {
                manager.replay_batch(sent, *base_offset);
            }
        }
        manager.finish_rebuild(log_end);
    }
    step
}

#[test]
fn replaying_the_log_reproduces_the_appended_state() {
    let (appended, log) = sample_log();
    let mut recovered = manager();
    let step = rebuild(&mut recovered, &log, appended.map_end_offset(), None);
    assert_eq!(step, Rebuild::ReplayFrom(Offset(0)));
    assert_eq!(recovered, appended);
}

#[test]
fn truncation_reloads_the_snapshot_and_replays_after_it() {
    let (_, log) = sample_log();
    let mut prefix = manager();
    for (sent, base_offset) in &log[..2] {
        prefix.replay_batch(sent, *base_offset);
    }
    let snapshot = prefix.take_snapshot();
    assert_eq!(snapshot.offset, Offset(5));
    for (sent, base_offset) in &log[2..4] {
        prefix.replay_batch(sent, *base_offset);
    }
    let truncated_end = prefix.map_end_offset();

    let (mut truncated, _) = sample_log();
    let step = rebuild(&mut truncated, &log, truncated_end, Some(snapshot));
    assert_eq!(step, Rebuild::ReplayFrom(Offset(5)));
    // A snapshot keeps only the last batch, so compare what a snapshot sees...
    assert_eq!(truncated.take_snapshot(), prefix.take_snapshot());
    // ...and the batches cut off are forgotten: resending them appends anew.
    let (cut, _) = log[5];
    assert_eq!(outcome(truncated.check_batch(&cut)), Expect::Append);
}

#[test]
fn truncation_without_a_snapshot_replays_from_the_log_start() {
    let (_, log) = sample_log();
    let mut prefix = manager();
    for (sent, base_offset) in &log[..3] {
        prefix.replay_batch(sent, *base_offset);
    }
    let (mut truncated, _) = sample_log();
    let out_of_range = ProducerSnapshot {
        offset: Offset(1_000),
        entries: Vec::new(),
    };
    let step = rebuild(
        &mut truncated,
        &log,
        prefix.map_end_offset(),
        Some(out_of_range),
    );
    assert_eq!(step, Rebuild::ReplayFrom(Offset(0)));
    assert_eq!(truncated, prefix);
}

#[test]
fn reloading_at_the_map_end_or_from_empty_replays_nothing() {
    let (mut manager, log) = sample_log();
    let before = manager.clone();
    let end = manager.map_end_offset();
    assert_eq!(rebuild(&mut manager, &log, end, None), Rebuild::Done);
    assert_eq!(manager, before);

    let mut empty = self::manager();
    empty.truncate_fully_and_start_at(Offset(40));
    let step = empty.truncate_and_reload(Offset(0), Offset(30), TimestampMs(0), None);
    assert_eq!(step, Rebuild::Done);
    assert_eq!(empty.map_end_offset(), Offset(30));
    assert_eq!(empty.producer_count(), 0);
}

#[test]
fn loading_a_snapshot_skips_expired_producers() {
    let (appended, _) = sample_log();
    let snapshot = appended.take_snapshot();
    let bytes = snapshot.encode().unwrap();
    let decoded = ProducerSnapshot::decode(snapshot.offset, &bytes).unwrap();
    let mut fresh = manager();
    let later = TimestampMs(1_102 + PRODUCER_ID_EXPIRATION_MS_DEFAULT);
    let step = fresh.truncate_and_reload(Offset(0), snapshot.offset, later, Some(decoded));
    assert_eq!(step, Rebuild::Done);
    // Last timestamps: PRODUCER 1_002, OTHER 1_102; both have now expired.
    assert_eq!(fresh.producer_count(), 0);
    assert_eq!(fresh.map_end_offset(), snapshot.offset);
    let mut fresh = manager();
    let earlier = TimestampMs(1_101 + PRODUCER_ID_EXPIRATION_MS_DEFAULT);
    fresh.truncate_and_reload(Offset(0), snapshot.offset, earlier, Some(snapshot));
    assert_eq!(
        fresh.producers().map(|(id, _)| *id).collect::<Vec<_>>(),
        [OTHER]
    );
}

#[test]
fn producer_fields_are_read_from_the_batch_header() {
    use crate::log::batch::BatchHeader;
    use zerocopy::FromBytes;

    let mut bytes = crate::log::batch::tests::sample_batch(3, 77);
    assert_eq!(
        ProducerOfBatch::read(BatchHeader::ref_from_prefix(&bytes).unwrap().0),
        ProducerOfBatch::None
    );
    bytes[21..23].copy_from_slice(&0x10i16.to_be_bytes());
    bytes[43..51].copy_from_slice(&9i64.to_be_bytes());
    bytes[51..53].copy_from_slice(&2i16.to_be_bytes());
    bytes[53..57].copy_from_slice(&(MAX - 1).to_be_bytes());
    let header = BatchHeader::ref_from_prefix(&bytes).unwrap().0;
    let ProducerOfBatch::Data(read) = ProducerOfBatch::read(header) else {
        panic!("a data batch");
    };
    assert_eq!(read.producer_id, ProducerId(9));
    assert_eq!(read.producer_epoch, ProducerEpoch(2));
    assert_eq!(read.kind, BatchKind::Transactional);
    assert_eq!(read.max_timestamp, TimestampMs(77));
    // Three records from i32::MAX - 1: MAX - 1, MAX, 0.
    assert_eq!(read.last_sequence(), Sequence(0));
    bytes[21..23].copy_from_slice(&0x30i16.to_be_bytes());
    let header = BatchHeader::ref_from_prefix(&bytes).unwrap().0;
    assert!(matches!(
        ProducerOfBatch::read(header),
        ProducerOfBatch::ControlMarker { .. }
    ));
}

/// Valid histories: per step a producer (0..3), whether it bumps its epoch,
/// and a record count; each producer starts at an arbitrary sequence, some
/// near the wrap.
fn histories() -> impl Strategy<Value = (Vec<i32>, Vec<(usize, bool, i32)>)> {
    let starts = proptest::collection::vec(prop_oneof![0..100i32, (MAX - 20)..=MAX], 3);
    let steps =
        proptest::collection::vec((0..3usize, proptest::bool::weighted(0.1), 1..6i32), 1..60);
    (starts, steps)
}

proptest! {
    #[test]
    fn appending_and_replaying_agree((starts, steps) in histories()) {
        let mut appended = manager();
        let mut log = Vec::new();
        let mut next: Vec<(i16, i32)> = starts.iter().map(|start| (0, *start)).collect();
        for (producer, bump, records) in steps {
            let (epoch, sequence) = &mut next[producer];
            if bump {
                *epoch += 1;
                *sequence = 0;
            }
            let sent = batch_of(ProducerId(producer as i64), *epoch, *sequence, records);
            *sequence = sent.last_sequence().next().0;
            let base_offset = append(&mut appended, sent).unwrap();
            // Every batch is now a duplicate of itself.
            let is_duplicate = matches!(appended.check_batch(&sent), Ok(Verdict::Duplicate { .. }));
            prop_assert!(is_duplicate);
            log.push((sent, base_offset));
        }
        let mut replayed = manager();
        for (sent, base_offset) in &log {
            replayed.replay_batch(sent, *base_offset);
        }
        prop_assert_eq!(&replayed, &appended);

        let snapshot = appended.take_snapshot();
        let decoded = ProducerSnapshot::decode(snapshot.offset, &snapshot.encode().unwrap()).unwrap();
        let mut restored = manager();
        restored.truncate_and_reload(Offset(0), snapshot.offset, TimestampMs(0), Some(decoded));
        prop_assert_eq!(restored.take_snapshot(), snapshot);
        for (producer, (epoch, sequence)) in next.iter().enumerate() {
            let following = batch_of(ProducerId(producer as i64), *epoch, *sequence, 1);
            let accepted = matches!(restored.check_batch(&following), Ok(Verdict::Append(_)));
            prop_assert!(accepted);
        }
    }
}
