//! Transactions and KIP-890 verification, driven through the manager's API.
//! Rows follow Kafka's `ProducerStateManagerTest` and `UnifiedLogTest`
//! transaction cases.

use proptest::prelude::*;

use super::*;
use crate::log::control::{EndTxnMarker, MarkerKind};
use crate::replica::txn_index::AbortedTxn;
use crate::types::Offset;

const P1: ProducerId = ProducerId(1);
const P2: ProducerId = ProducerId(2);

fn manager() -> ProducerStateManager {
    ProducerStateManager::new(ProducerStateConfig::default())
}

fn txn_batch(
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
        max_timestamp: TimestampMs(1_000),
        kind: BatchKind::Transactional,
    }
}

fn marker(
    producer_id: ProducerId,
    epoch: i16,
    kind: MarkerKind,
    coordinator_epoch: i32,
) -> TxnMarker {
    TxnMarker {
        producer_id,
        producer_epoch: ProducerEpoch(epoch),
        marker: EndTxnMarker {
            kind,
            coordinator_epoch,
        },
        timestamp: TimestampMs(2_000),
    }
}

/// Appends a checked data batch at the map end; returns its base offset.
fn append(manager: &mut ProducerStateManager, batch: ProducerBatch) -> Offset {
    let Ok(Verdict::Append(pending)) = manager.check_batch(&batch) else {
        panic!("{batch:?} refused");
    };
    let offset = manager.map_end_offset();
    manager.record_appended(pending, offset);
    offset
}

/// Writes a checked marker at the map end and completes it, as the leader's
/// WriteTxnMarkers path does; returns the aborted-txn index entry.
fn end(manager: &mut ProducerStateManager, marker: TxnMarker) -> Option<AbortedTxn> {
    let pending = manager
        .check_marker(&marker, TransactionVersion::LEGACY)
        .unwrap();
    let offset = manager.map_end_offset();
    let completed = manager.record_marker(pending, offset);
    let aborted = completed.and_then(|completed| manager.complete_txn(completed));
    manager.assert_transaction_invariants();
    aborted
}

#[derive(Debug, PartialEq)]
enum Expect {
    Accept,
    InvalidEpoch,
    Fenced,
}

#[test]
fn marker_epoch_rules() {
    use Expect::*;
    // (rule, producer epoch and coordinator epoch known, transaction open,
    //  marker epoch, marker coordinator epoch, transaction version, expected)
    type Row = (
        &'static str,
        Option<(i16, i32)>,
        bool,
        i16,
        i32,
        i16,
        Expect,
    );
    let rows: [Row; 10] = [
        ("unknown producer", None, false, 0, 0, 0, Accept),
        ("same epoch", Some((3, 1)), true, 3, 1, 0, Accept),
        (
            "newer epoch (fenced producer's txn aborted)",
            Some((3, 1)),
            true,
            4,
            1,
            0,
            Accept,
        ),
        ("older epoch", Some((3, 1)), true, 2, 1, 0, InvalidEpoch),
        ("newer coordinator", Some((3, 1)), true, 3, 2, 0, Accept),
        ("older coordinator", Some((3, 5)), true, 3, 4, 0, Fenced),
        (
            "v2: marker epoch must be bumped",
            Some((3, 1)),
            true,
            3,
            1,
            2,
            InvalidEpoch,
        ),
        ("v2: bumped epoch", Some((3, 1)), true, 4, 1, 2, Accept),
        (
            "v2: retry of a written marker",
            Some((4, 1)),
            false,
            4,
            1,
            2,
            Accept,
        ),
        (
            "v2: older epoch",
            Some((4, 1)),
            false,
            3,
            1,
            2,
            InvalidEpoch,
        ),
    ];
    for (rule, known, open, epoch, coordinator_epoch, version, expected) in rows {
        let mut manager = manager();
        if let Some((known_epoch, known_coordinator)) = known {
            append(&mut manager, txn_batch(P1, known_epoch, 0, 1));
            let _ = end(
                &mut manager,
                marker(P1, known_epoch, MarkerKind::Commit, known_coordinator),
            );
            if open {
                append(&mut manager, txn_batch(P1, known_epoch, 1, 1));
            }
        }
        let result = manager.check_marker(
            &marker(P1, epoch, MarkerKind::Abort, coordinator_epoch),
            TransactionVersion(version),
        );
        let outcome = match result {
            Ok(_) => Accept,
            Err(MarkerError::InvalidProducerEpoch { .. }) => InvalidEpoch,
            Err(MarkerError::CoordinatorFenced { .. }) => Fenced,
        };
        assert_eq!(outcome, expected, "{rule}");
    }
    let fenced = MarkerError::CoordinatorFenced {
        producer_id: P1,
        coordinator_epoch: 1,
        current: 2,
    };
    assert_eq!(
        fenced.error_code(),
        ErrorCode::TRANSACTION_COORDINATOR_FENCED
    );
}

#[test]
fn markers_complete_transactions_and_move_the_lso() {
    let mut manager = manager();
    assert_eq!(manager.last_stable_offset(Offset(0), Offset(0)), Offset(0));
    assert_eq!(append(&mut manager, txn_batch(P1, 0, 0, 2)), Offset(0)); // 0..=1
    assert_eq!(append(&mut manager, txn_batch(P2, 0, 0, 1)), Offset(2)); // 2
    assert_eq!(append(&mut manager, txn_batch(P1, 0, 2, 1)), Offset(3)); // 3
    assert_eq!(manager.first_unstable_offset(), Some(Offset(0)));
    assert_eq!(manager.last_stable_offset(Offset(0), Offset(4)), Offset(0));
    assert!(manager.has_ongoing_transaction(P1, ProducerEpoch(0)));
    assert!(!manager.has_ongoing_transaction(P1, ProducerEpoch(1)));

    // P1 aborts at 4: P2's transaction from 2 is still open, so the LSO right
    // after the marker is 2.
    let aborted = end(&mut manager, marker(P1, 0, MarkerKind::Abort, 0));
    assert_eq!(
        aborted,
        Some(AbortedTxn {
            producer_id: P1,
            first_offset: Offset(0),
            last_offset: Offset(4),
            last_stable_offset: Offset(2),
        })
    );
    // Completed but not replicated: still the first unstable offset.
    assert_eq!(manager.first_unstable_offset(), Some(Offset(0)));
    assert_eq!(manager.first_undecided_offset(), Some(Offset(2)));
    manager.on_high_watermark_updated(Offset(4));
    assert_eq!(manager.first_unstable_offset(), Some(Offset(0)));
    manager.on_high_watermark_updated(Offset(5));
    assert_eq!(manager.first_unstable_offset(), Some(Offset(2)));
    assert_eq!(manager.last_stable_offset(Offset(0), Offset(5)), Offset(2));
    // The log start passing an open transaction's start raises the LSO to it.
    assert_eq!(manager.last_stable_offset(Offset(3), Offset(5)), Offset(3));

    // P2 commits at 5: nothing for the index, the LSO follows the HW.
    assert_eq!(
        end(&mut manager, marker(P2, 0, MarkerKind::Commit, 0)),
        None
    );
    assert_eq!(manager.first_unstable_offset(), Some(Offset(2)));
    manager.on_high_watermark_updated(Offset(6));
    assert_eq!(manager.first_unstable_offset(), None);
    assert_eq!(manager.last_stable_offset(Offset(0), Offset(6)), Offset(6));
    let entry = manager.entry(P1).unwrap();
    assert_eq!(entry.current_transaction_first_offset(), None);
    assert_eq!(entry.last_timestamp(), TimestampMs(2_000));
    assert_eq!(manager.map_end_offset(), Offset(6));
}

#[test]
fn a_marker_without_data_here_completes_nothing() {
    let mut manager = manager();
    // The coordinator aborts a transaction that never wrote here (e.g. it
    // was fenced): the producer becomes known with the marker's epochs.
    let pending = manager
        .check_marker(
            &marker(P1, 5, MarkerKind::Abort, 3),
            TransactionVersion::LEGACY,
        )
        .unwrap();
    assert_eq!(manager.record_marker(pending, Offset(0)), None);
    let entry = manager.entry(P1).unwrap();
    assert_eq!(entry.producer_epoch(), ProducerEpoch(5));
    assert_eq!(entry.coordinator_epoch(), 3);
    assert_eq!(manager.first_unstable_offset(), None);
    // A zombie producer of epoch 4 is now fenced on data too.
    assert!(matches!(
        manager.check_batch(&txn_batch(P1, 4, 0, 1)),
        Err(ProducerError::InvalidProducerEpoch { .. })
    ));
}

#[test]
fn last_stable_offset_of_looks_past_its_own_producer() {
    let mut manager = manager();
    append(&mut manager, txn_batch(P1, 0, 0, 1)); // 0
    append(&mut manager, txn_batch(P2, 0, 0, 1)); // 1
    let completed = CompletedTxn {
        producer_id: P2,
        first_offset: Offset(1),
        last_offset: Offset(9),
        is_aborted: true,
    };
    assert_eq!(manager.last_stable_offset_of(&completed), Offset(0));
    let completed = CompletedTxn {
        producer_id: P1,
        first_offset: Offset(0),
        last_offset: Offset(9),
        is_aborted: true,
    };
    assert_eq!(manager.last_stable_offset_of(&completed), Offset(1));
    let mut alone = self::manager();
    append(&mut alone, txn_batch(P1, 0, 0, 1));
    assert_eq!(alone.last_stable_offset_of(&completed), Offset(10));
}

#[test]
fn open_transactions_survive_snapshot_reload_and_expiry() {
    let config = ProducerStateConfig {
        producer_id_expiration_ms: 1_000,
        ..ProducerStateConfig::default()
    };
    let mut manager = ProducerStateManager::new(config);
    append(&mut manager, txn_batch(P1, 0, 0, 3)); // 0..=2, open
    append(&mut manager, txn_batch(P2, 0, 0, 1)); // 3
    let _ = end(&mut manager, marker(P2, 0, MarkerKind::Commit, 0)); // 4
    let snapshot = manager.take_snapshot();
    let bytes = snapshot.encode().unwrap();

    let mut reloaded = ProducerStateManager::new(config);
    let decoded = snapshot::ProducerSnapshot::decode(Offset(5), &bytes).unwrap();
    let now = TimestampMs(1_000_000);
    assert_eq!(
        reloaded.truncate_and_reload(Offset(0), Offset(5), now, Some(decoded)),
        Rebuild::Done
    );
    reloaded.assert_transaction_invariants();
    // P2 expired while loading; P1 has an open transaction and stays.
    assert_eq!(reloaded.producer_count(), 1);
    assert_eq!(reloaded.first_unstable_offset(), Some(Offset(0)));
    assert_eq!(reloaded.remove_expired_producers(now), 0);
    // The marker arriving after the restart finds the transaction.
    assert_eq!(
        end(&mut reloaded, marker(P1, 0, MarkerKind::Abort, 0)),
        Some(AbortedTxn {
            producer_id: P1,
            first_offset: Offset(0),
            last_offset: Offset(5),
            last_stable_offset: Offset(6),
        })
    );
}

#[test]
fn truncation_forgets_unreplicated_and_reopens_from_the_log() {
    let mut manager = manager();
    append(&mut manager, txn_batch(P1, 0, 0, 1)); // 0
    let snapshot = manager.take_snapshot(); // at 1, P1 open
    let _ = end(&mut manager, marker(P1, 0, MarkerKind::Commit, 0)); // 1
    assert_eq!(manager.first_unstable_offset(), Some(Offset(0)));
    // Truncating to 1 (the marker is gone): reload the snapshot at 1.
    let rebuild = manager.truncate_and_reload(Offset(0), Offset(1), TimestampMs(0), Some(snapshot));
    assert_eq!(rebuild, Rebuild::Done);
    manager.assert_transaction_invariants();
    assert_eq!(
        manager.ongoing_transactions().collect::<Vec<_>>(),
        [(Offset(0), P1)]
    );
    manager.truncate_fully_and_start_at(Offset(10));
    assert_eq!(manager.first_unstable_offset(), None);
    manager.assert_transaction_invariants();
}

#[test]
fn the_log_start_passing_a_completed_transaction_makes_it_stable() {
    let mut manager = manager();
    append(&mut manager, txn_batch(P1, 0, 0, 2)); // 0..=1
    let _ = end(&mut manager, marker(P1, 0, MarkerKind::Abort, 0)); // 2
    assert_eq!(manager.first_unstable_offset(), Some(Offset(0)));
    manager.on_log_start_offset(Offset(2));
    assert_eq!(manager.first_unstable_offset(), Some(Offset(0)));
    manager.on_log_start_offset(Offset(3));
    assert_eq!(manager.first_unstable_offset(), None);
}

#[test]
fn late_transactions_are_reported() {
    let mut manager = manager();
    assert!(!manager.has_late_transaction(TimestampMs(i64::MAX), 0));
    append(&mut manager, txn_batch(P1, 0, 0, 1)); // last timestamp 1_000
    let limit = 60_000 + LATE_TRANSACTION_BUFFER_MS;
    assert!(!manager.has_late_transaction(TimestampMs(1_000 + limit), 60_000));
    assert!(manager.has_late_transaction(TimestampMs(1_001 + limit), 60_000));
}

#[test]
fn verification_guards_the_first_batch_of_a_transaction() {
    let mut manager = manager();
    let now = TimestampMs(0);
    let first = txn_batch(P1, 0, 0, 1);
    // No verification: Kafka's "Record was not part of an ongoing transaction".
    let refused = manager.check_batch_verified(&first, VerificationGuard::SENTINEL);
    assert_eq!(
        refused.as_ref().map_err(ProducerError::error_code),
        Err(ErrorCode::INVALID_TXN_STATE)
    );
    let guard = manager
        .start_verification(P1, Sequence(0), ProducerEpoch(0), now)
        .unwrap();
    assert_ne!(guard, VerificationGuard::SENTINEL);
    // A second request of the same producer joins the same verification.
    assert_eq!(
        manager.start_verification(P1, Sequence(0), ProducerEpoch(0), now),
        Ok(guard)
    );
    let Ok(Verdict::Append(pending)) = manager.check_batch_verified(&first, guard) else {
        panic!("verified batch refused");
    };
    manager.record_appended(pending, Offset(0));
    // The guard served; the open transaction now admits later batches.
    assert_eq!(manager.verification_guard(P1), VerificationGuard::SENTINEL);
    assert_eq!(
        manager.start_verification(P1, Sequence(1), ProducerEpoch(0), now),
        Ok(VerificationGuard::SENTINEL)
    );
    assert!(matches!(
        manager.check_batch_verified(&txn_batch(P1, 0, 1, 1), VerificationGuard::SENTINEL),
        Ok(Verdict::Append(_))
    ));
    // Idempotent batches never need a guard.
    let idempotent = ProducerBatch {
        kind: BatchKind::Idempotent,
        ..txn_batch(P2, 0, 0, 1)
    };
    assert!(matches!(
        manager.check_batch_verified(&idempotent, VerificationGuard::SENTINEL),
        Ok(Verdict::Append(_))
    ));
}

#[test]
fn a_marker_between_verification_and_append_voids_the_guard() {
    // Kafka's ABA case: verify, abort marker, verify again; the first
    // request's guard must not open the new transaction.
    let mut manager = manager();
    let now = TimestampMs(0);
    let stale = manager
        .start_verification(P1, Sequence(0), ProducerEpoch(0), now)
        .unwrap();
    let _ = end(&mut manager, marker(P1, 0, MarkerKind::Abort, 0));
    assert_eq!(manager.verification_guard(P1), VerificationGuard::SENTINEL);
    let fresh = manager
        .start_verification(P1, Sequence(0), ProducerEpoch(0), now)
        .unwrap();
    assert_ne!(fresh, stale);
    let batch = txn_batch(P1, 0, 0, 1);
    assert!(matches!(
        manager.check_batch_verified(&batch, stale),
        Err(ProducerError::TransactionNotVerified { .. })
    ));
    assert!(matches!(
        manager.check_batch_verified(&batch, fresh),
        Ok(Verdict::Append(_))
    ));
}

#[test]
fn verification_rejects_stale_epochs_and_bounds_sequences() {
    let mut manager = manager();
    let now = TimestampMs(0);
    append(&mut manager, txn_batch(P1, 3, 0, 1));
    let _ = end(&mut manager, marker(P1, 3, MarkerKind::Commit, 0));
    assert!(matches!(
        manager.start_verification(P1, Sequence(1), ProducerEpoch(2), now),
        Err(ProducerError::InvalidProducerEpoch { .. })
    ));
    // A stale epoch is reported as such even without a guard.
    assert!(matches!(
        manager.check_batch_verified(&txn_batch(P1, 2, 1, 1), VerificationGuard::SENTINEL),
        Err(ProducerError::InvalidProducerEpoch { .. })
    ));
    // Verifying from sequence 3, then 1: batches above 1 wait for it.
    let guard = manager
        .start_verification(P1, Sequence(3), ProducerEpoch(3), now)
        .unwrap();
    manager
        .start_verification(P1, Sequence(1), ProducerEpoch(3), now)
        .unwrap();
    assert_eq!(
        manager.verification_entry(P1).unwrap().lowest_sequence(),
        Sequence(1)
    );
    assert!(matches!(
        manager.check_batch_verified(&txn_batch(P1, 3, 3, 1), guard),
        Err(ProducerError::OutOfOrderSequence {
            expected: Sequence(1),
            ..
        })
    ));
    assert!(matches!(
        manager.check_batch_verified(&txn_batch(P1, 3, 1, 2), guard),
        Ok(Verdict::Append(_))
    ));
    // A newer epoch resets the bound.
    manager
        .start_verification(P1, Sequence(0), ProducerEpoch(4), now)
        .unwrap();
    let entry = manager.verification_entry(P1).unwrap();
    assert_eq!(
        (entry.epoch(), entry.lowest_sequence()),
        (ProducerEpoch(4), Sequence(0))
    );
}

#[test]
fn unused_verifications_expire_with_producers() {
    let config = ProducerStateConfig {
        producer_id_expiration_ms: 100,
        ..ProducerStateConfig::default()
    };
    let mut manager = ProducerStateManager::new(config);
    let guard = manager
        .start_verification(P1, Sequence(0), ProducerEpoch(0), TimestampMs(50))
        .unwrap();
    manager.remove_expired_producers(TimestampMs(149));
    assert_eq!(manager.verification_guard(P1), guard);
    manager.remove_expired_producers(TimestampMs(150));
    assert_eq!(manager.verification_guard(P1), VerificationGuard::SENTINEL);
}

#[test]
fn verifications_are_bounded() {
    let config = ProducerStateConfig {
        producers_max: 2,
        ..ProducerStateConfig::default()
    };
    let mut manager = ProducerStateManager::new(config);
    for producer in 0..2 {
        manager
            .start_verification(
                ProducerId(producer),
                Sequence(0),
                ProducerEpoch(0),
                TimestampMs(0),
            )
            .unwrap();
    }
    assert_eq!(
        manager.start_verification(ProducerId(9), Sequence(0), ProducerEpoch(0), TimestampMs(0)),
        Err(ProducerError::ProducersLimitReached { limit: 2 })
    );
    // At the bound, a marker for an unknown producer is still written.
    let mut full = ProducerStateManager::new(config);
    append(&mut full, txn_batch(P1, 0, 0, 1));
    append(&mut full, txn_batch(P2, 0, 0, 1));
    let pending = full
        .check_marker(
            &marker(ProducerId(9), 0, MarkerKind::Abort, 0),
            TransactionVersion::LEGACY,
        )
        .unwrap();
    assert_eq!(full.record_marker(pending, Offset(2)), None);
    assert_eq!(full.producer_count(), 2);
    assert_eq!(full.map_end_offset(), Offset(3));
}

#[test]
fn verification_errors_map_to_produce_codes() {
    // (coordinator error, produce version, answered)
    let rows = [
        (
            ErrorCode::TRANSACTION_ABORTABLE,
            10,
            ErrorCode::INVALID_TXN_STATE,
        ),
        (
            ErrorCode::TRANSACTION_ABORTABLE,
            11,
            ErrorCode::TRANSACTION_ABORTABLE,
        ),
        (
            ErrorCode::PRODUCER_FENCED,
            9,
            ErrorCode::INVALID_PRODUCER_EPOCH,
        ),
        (
            ErrorCode::PRODUCER_FENCED,
            12,
            ErrorCode::INVALID_PRODUCER_EPOCH,
        ),
        (
            ErrorCode::CONCURRENT_TRANSACTIONS,
            9,
            ErrorCode::CONCURRENT_TRANSACTIONS,
        ),
        (
            ErrorCode::INVALID_TXN_STATE,
            11,
            ErrorCode::INVALID_TXN_STATE,
        ),
        // A coordinator that could not be asked: retried by every producer.
        (
            ErrorCode::NOT_COORDINATOR,
            12,
            ErrorCode::NOT_ENOUGH_REPLICAS,
        ),
        (
            ErrorCode::COORDINATOR_NOT_AVAILABLE,
            9,
            ErrorCode::NOT_ENOUGH_REPLICAS,
        ),
        (
            ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
            12,
            ErrorCode::NOT_ENOUGH_REPLICAS,
        ),
        (
            ErrorCode::NETWORK_EXCEPTION,
            12,
            ErrorCode::NOT_ENOUGH_REPLICAS,
        ),
    ];
    for (error, version, answered) in rows {
        assert_eq!(
            produce_error_for_verification(error, version),
            answered,
            "{error:?} v{version}"
        );
    }
}

/// One step of a random partition history.
#[derive(Clone, Debug)]
enum Step {
    Data { producer: i64, transactional: bool },
    Marker { producer: i64, abort: bool },
    HighWatermark,
    Reload,
}

fn any_step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0i64..4, any::<bool>()).prop_map(|(producer, transactional)| Step::Data { producer, transactional }),
        3 => (0i64..4, any::<bool>()).prop_map(|(producer, abort)| Step::Marker { producer, abort }),
        2 => Just(Step::HighWatermark),
        1 => Just(Step::Reload),
    ]
}

proptest! {
    /// Against a model that keeps each producer's open transaction and every
    /// completed one: the first unstable offset, the index entries' LSOs and
    /// the invariants hold after every step, including snapshot reloads
    /// (taken at a high watermark equal to the log end, as Kafka assumes).
    #[test]
    fn transactions_match_a_model(steps in proptest::collection::vec(any_step(), 1..60)) {
        let mut manager = manager();
        let mut open: std::collections::BTreeMap<i64, i64> = Default::default();
        let mut completed: Vec<(i64, i64)> = Vec::new(); // (first, marker)
        let mut sequences = [0i32; 4];
        let mut high_watermark = 0i64;
        for step in steps {
            let end_offset = manager.map_end_offset().0;
            match step {
                Step::Data { producer, transactional } => {
                    let kind = if transactional || open.contains_key(&producer) {
                        BatchKind::Transactional
                    } else {
                        BatchKind::Idempotent
                    };
                    let index = producer as usize;
                    let batch = ProducerBatch { kind, ..txn_batch(ProducerId(producer), 0, sequences[index], 2) };
                    append(&mut manager, batch);
                    sequences[index] += 2;
                    if kind == BatchKind::Transactional {
                        open.entry(producer).or_insert(end_offset);
                    }
                }
                Step::Marker { producer, abort } => {
                    let kind = if abort { MarkerKind::Abort } else { MarkerKind::Commit };
                    let others_first = open.iter().filter(|(other, _)| **other != producer).map(|(_, first)| *first).min();
                    let aborted = end(&mut manager, marker(ProducerId(producer), 0, kind, 0));
                    match open.remove(&producer) {
                        Some(first) => {
                            completed.push((first, end_offset));
                            let expected = abort.then_some(AbortedTxn {
                                producer_id: ProducerId(producer),
                                first_offset: Offset(first),
                                last_offset: Offset(end_offset),
                                last_stable_offset: Offset(others_first.unwrap_or(end_offset + 1)),
                            });
                            prop_assert_eq!(aborted, expected);
                        }
                        None => prop_assert_eq!(aborted, None),
                    }
                }
                Step::HighWatermark => {
                    high_watermark = end_offset;
                    manager.on_high_watermark_updated(Offset(high_watermark));
                }
                Step::Reload => {
                    high_watermark = end_offset;
                    let snapshot = manager.take_snapshot();
                    let mut reloaded = self::manager();
                    let rebuild = reloaded.truncate_and_reload(Offset(0), Offset(end_offset), TimestampMs(0), Some(snapshot));
                    prop_assert_eq!(rebuild, Rebuild::Done);
                    manager = reloaded;
                }
            }
            manager.assert_transaction_invariants();
            let unreplicated = completed.iter().filter(|(_, last)| *last >= high_watermark).map(|(first, _)| *first);
            let expected = open.values().copied().chain(unreplicated).min().map(Offset);
            prop_assert_eq!(manager.first_unstable_offset(), expected);
            let lso = manager.last_stable_offset(Offset(0), Offset(high_watermark));
            prop_assert!(lso <= Offset(high_watermark));
        }
    }
}

/// A coordinator's transactional batches (the group coordinator's offset
/// commits, numbered 0 each time) skip the sequence and duplicate checks,
/// as Kafka's `AppendOrigin.COORDINATOR` does, but not the epoch's.
#[test]
fn coordinator_batches_skip_the_sequence_check_but_not_the_epoch() {
    let mut manager = manager();
    append(&mut manager, txn_batch(P1, 3, 0, 2));
    for _ in 0..3 {
        let batch = txn_batch(P1, 3, 0, 1);
        assert!(
            matches!(
                manager.check_batch(&batch),
                Ok(Verdict::Duplicate { .. }) | Err(_)
            ),
            "a client's batch at sequence 0 again is a retry or out of order"
        );
        let pending = manager
            .check_coordinator_batch(&batch)
            .expect("a coordinator's batch at sequence 0 is taken");
        let offset = manager.map_end_offset();
        manager.record_appended(pending, offset);
    }
    assert_eq!(manager.map_end_offset(), Offset(5), "every one appended");
    let fenced = txn_batch(P1, 2, 0, 1);
    assert!(matches!(
        manager.check_coordinator_batch(&fenced),
        Err(ProducerError::InvalidProducerEpoch { .. })
    ));
    let idempotent = ProducerBatch {
        kind: BatchKind::Idempotent,
        ..txn_batch(P1, 3, 0, 1)
    };
    assert!(matches!(
        manager.check_coordinator_batch(&idempotent),
        Err(ProducerError::InvalidTransactionState { .. })
    ));
}
