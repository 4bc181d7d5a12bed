//! Transactions on one partition: COMMIT/ABORT markers, the open
//! transactions, and the first unstable offset that bounds what
//! `read_committed` consumers may read. Kafka's
//! `ProducerAppendInfo.appendEndTxnMarker`, `CompletedTxn`, and the
//! `ongoingTxns` / `unreplicatedTxns` half of `ProducerStateManager`.
//!
//! A transaction opens on this partition with its producer's first
//! transactional batch (at that batch's base offset) and ends with the marker
//! the coordinator writes through WriteTxnMarkers. Its records stay
//! *unstable* until the marker is below the high watermark, because a marker
//! above it may still be lost with a leader change. So:
//!
//! * first unstable offset = the lowest first offset among open transactions
//!   and completed ones whose marker is at or above the high watermark;
//! * last stable offset (LSO) = min(first unstable offset, high watermark),
//!   never below the log start ([`ProducerStateManager::last_stable_offset`]).
//!
//! A marker is applied in two steps, as Kafka does: `record_marker` /
//! `replay_marker` update the producer and return the [`CompletedTxn`] (if the
//! producer had data in the transaction here), then
//! [`ProducerStateManager::complete_txn`] computes the LSO the aborted-txn
//! index entry carries and moves the transaction to the unreplicated set. Call
//! it right after, before anything else touches the manager.

use thiserror::Error;

use crate::log::batch::BatchView;
use crate::log::control::{ControlError, EndTxnMarker, MarkerKind, read_end_txn_marker};
use crate::protocol::errors::ErrorCode;
use crate::replica::txn_index::AbortedTxn;
use crate::types::{Offset, ProducerId, TimestampMs};

use super::entry::ProducerStateEntry;
use super::manager::ProducerStateManager;
use super::sequence::ProducerEpoch;

/// How long past `transaction.max.timeout.ms` an open transaction may go
/// before it counts as hanging (`ProducerStateManager.LATE_TRANSACTION_BUFFER_MS`).
pub const LATE_TRANSACTION_BUFFER_MS: i64 = 5 * 60 * 1000;

/// A COMMIT or ABORT marker batch as producer state sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnMarker {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub marker: EndTxnMarker,
    /// The control record's timestamp: the producer's new last timestamp.
    pub timestamp: TimestampMs,
}

impl TxnMarker {
    /// Reads the marker of a control batch. `None` for a batch without a
    /// producer id or without records (compaction emptied it; Kafka ignores
    /// such a batch, so it changes no state).
    pub fn read(batch: &BatchView<'_>) -> Result<Option<TxnMarker>, ControlError> {
        if batch.producer_id() < 0 {
            return Ok(None);
        }
        let Some(record) = read_end_txn_marker(batch)? else {
            return Ok(None);
        };
        Ok(Some(TxnMarker {
            producer_id: ProducerId(batch.producer_id()),
            producer_epoch: ProducerEpoch(batch.producer_epoch()),
            marker: record.marker,
            timestamp: record.timestamp,
        }))
    }
}

/// The transaction protocol version the coordinator wrote a marker under
/// (Kafka's `TransactionVersion` feature level). From version 2 (KIP-890 part
/// 2) the coordinator bumps the epoch for every marker, so a marker must carry
/// a newer epoch than the partition knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TransactionVersion(pub i16);

impl TransactionVersion {
    /// Versions 0 and 1: markers carry the transaction's own epoch.
    pub const LEGACY: TransactionVersion = TransactionVersion(0);
    pub const EPOCH_BUMP: TransactionVersion = TransactionVersion(2);

    pub fn supports_epoch_bump(self) -> bool {
        self.0 >= 2
    }
}

/// A transaction that a marker ended, with data on this partition (Kafka's
/// `CompletedTxn`): `first_offset` is its first batch, `last_offset` the marker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletedTxn {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
    pub last_offset: Offset,
    pub is_aborted: bool,
}

/// A completed transaction still above the high watermark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnreplicatedTxn {
    pub producer_id: ProducerId,
    pub last_offset: Offset,
}

/// Why a marker from the coordinator is refused; each maps to the code the
/// WriteTxnMarkers response carries.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum MarkerError {
    #[error("marker for producer {} has epoch {epoch}, older than {current}", producer_id.0)]
    InvalidProducerEpoch {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        current: ProducerEpoch,
    },
    /// A zombie coordinator: an older coordinator epoch than the last marker's.
    #[error("marker for producer {} from coordinator epoch {coordinator_epoch}, older than {current}", producer_id.0)]
    CoordinatorFenced {
        producer_id: ProducerId,
        coordinator_epoch: i32,
        current: i32,
    },
}

impl MarkerError {
    pub fn error_code(&self) -> ErrorCode {
        match self {
            MarkerError::InvalidProducerEpoch { .. } => ErrorCode::INVALID_PRODUCER_EPOCH,
            MarkerError::CoordinatorFenced { .. } => ErrorCode::TRANSACTION_COORDINATOR_FENCED,
        }
    }
}

/// A checked marker waiting for its offset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingMarker {
    marker: TxnMarker,
    /// False when the producer is unknown and the table is full: the marker
    /// is written but the producer is not remembered (Brook's bound only).
    remember_producer: bool,
    checked_against: Option<(ProducerEpoch, i32, Option<Offset>)>,
}

impl PendingMarker {
    pub fn marker(&self) -> &TxnMarker {
        &self.marker
    }
}

impl ProducerStateManager {
    /// Checks a marker the coordinator asked this leader to write (Kafka's
    /// `appendEndTxnMarker` for `AppendOrigin.COORDINATOR`): the producer
    /// epoch must not be older than the partition's (strictly newer from
    /// transaction version 2, unless it repeats a marker already written), and
    /// the coordinator epoch must not be older than the last marker's.
    pub fn check_marker(
        &self,
        marker: &TxnMarker,
        version: TransactionVersion,
    ) -> Result<PendingMarker, MarkerError> {
        let entry = self.producers.get(&marker.producer_id);
        let current = entry.map_or(ProducerEpoch::NONE, ProducerStateEntry::producer_epoch);
        let in_transaction = entry
            .and_then(ProducerStateEntry::current_transaction_first_offset)
            .is_some();
        let stale = if version.supports_epoch_bump() {
            // KAFKA-19999: the same epoch with no open transaction is a retry
            // of a marker already written, and is written again.
            marker.producer_epoch < current || (marker.producer_epoch == current && in_transaction)
        } else {
            marker.producer_epoch < current
        };
        if stale {
            return Err(MarkerError::InvalidProducerEpoch {
                producer_id: marker.producer_id,
                epoch: marker.producer_epoch,
                current,
            });
        }
        let current_coordinator = entry.map_or(super::COORDINATOR_EPOCH_NONE, |entry| {
            entry.coordinator_epoch()
        });
        if current_coordinator > marker.marker.coordinator_epoch {
            return Err(MarkerError::CoordinatorFenced {
                producer_id: marker.producer_id,
                coordinator_epoch: marker.marker.coordinator_epoch,
                current: current_coordinator,
            });
        }
        Ok(PendingMarker {
            marker: *marker,
            remember_producer: entry.is_some() || self.producers.len() < self.config.producers_max,
            checked_against: entry.map(marker_fingerprint),
        })
    }

    /// Records a checked marker once the log placed it at `offset`. The
    /// caller must pass the result to [`ProducerStateManager::complete_txn`].
    #[must_use = "a completed transaction must be passed to complete_txn"]
    pub fn record_marker(
        &mut self,
        pending: PendingMarker,
        offset: Offset,
    ) -> Option<CompletedTxn> {
        debug_assert_eq!(
            pending.checked_against,
            self.producers
                .get(&pending.marker.producer_id)
                .map(marker_fingerprint),
            "another append of producer {} ran between check and record",
            pending.marker.producer_id.0
        );
        self.apply_marker(&pending.marker, offset, pending.remember_producer)
    }

    /// Applies a marker already in the log at `offset` (follower append,
    /// recovery, rebuild) without checking it, as Kafka's
    /// `AppendOrigin.REPLICATION`. The caller must pass the result to
    /// [`ProducerStateManager::complete_txn`].
    #[must_use = "a completed transaction must be passed to complete_txn"]
    pub fn replay_marker(&mut self, marker: &TxnMarker, offset: Offset) -> Option<CompletedTxn> {
        self.apply_marker(marker, offset, true)
    }

    fn apply_marker(
        &mut self,
        marker: &TxnMarker,
        offset: Offset,
        remember_producer: bool,
    ) -> Option<CompletedTxn> {
        // Whatever the marker, the verification it guarded is over.
        self.verifications.remove(&marker.producer_id);
        self.map_end_offset = Offset(offset.0.saturating_add(1));
        if !remember_producer {
            return None;
        }
        let entry = self
            .producers
            .entry(marker.producer_id)
            .or_insert_with(ProducerStateEntry::empty);
        // A marker without data here (an empty transaction) leaves no trace in
        // the LSO or the index.
        let completed = entry
            .current_transaction_first_offset()
            .map(|first_offset| CompletedTxn {
                producer_id: marker.producer_id,
                first_offset,
                last_offset: offset,
                is_aborted: marker.marker.kind == MarkerKind::Abort,
            });
        entry.end_transaction(
            marker.producer_epoch,
            marker.marker.coordinator_epoch,
            marker.timestamp,
        );
        completed
    }

    /// The LSO right after `completed`'s marker, for its index entry
    /// (Kafka's `lastStableOffset(completedTxn)`): the first offset of the
    /// oldest transaction of another producer still open, else the offset
    /// after the marker. Call before [`ProducerStateManager::complete_txn`].
    pub fn last_stable_offset_of(&self, completed: &CompletedTxn) -> Offset {
        self.ongoing_transactions
            .iter()
            .find(|(_, producer_id)| **producer_id != completed.producer_id)
            .map_or(
                Offset(completed.last_offset.0.saturating_add(1)),
                |(first_offset, _)| *first_offset,
            )
    }

    /// Marks a transaction complete (Kafka's `completeTxn`); it stays unstable
    /// until the high watermark passes its marker. Returns the entry to append
    /// to the `.txnindex` of the segment holding the marker when it aborted.
    pub fn complete_txn(&mut self, completed: CompletedTxn) -> Option<AbortedTxn> {
        let last_stable_offset = self.last_stable_offset_of(&completed);
        let started = self.ongoing_transactions.get(&completed.first_offset);
        // Kafka throws on a transaction it never saw start; that can only come
        // from damaged state, so Brook keeps going with what the log says.
        if started == Some(&completed.producer_id) {
            self.ongoing_transactions.remove(&completed.first_offset);
        }
        self.unreplicated_transactions.insert(
            completed.first_offset,
            UnreplicatedTxn {
                producer_id: completed.producer_id,
                last_offset: completed.last_offset,
            },
        );
        completed.is_aborted.then_some(AbortedTxn {
            producer_id: completed.producer_id,
            first_offset: completed.first_offset,
            last_offset: completed.last_offset,
            last_stable_offset,
        })
    }

    /// The high watermark moved: transactions whose marker is now below it
    /// are stable (`onHighWatermarkUpdated`).
    pub fn on_high_watermark_updated(&mut self, high_watermark: Offset) {
        self.unreplicated_transactions
            .retain(|_, transaction| transaction.last_offset >= high_watermark);
    }

    /// The lowest offset that may still change meaning: the first offset of
    /// the oldest open transaction or of the oldest completed one whose
    /// marker is not yet below the high watermark (`firstUnstableOffset`).
    pub fn first_unstable_offset(&self) -> Option<Offset> {
        let undecided = self.first_undecided_offset();
        let unreplicated = self.unreplicated_transactions.keys().next().copied();
        match (undecided, unreplicated) {
            (Some(undecided), Some(unreplicated)) => Some(undecided.min(unreplicated)),
            (undecided, unreplicated) => undecided.or(unreplicated),
        }
    }

    /// The first offset of the oldest open transaction (`firstUndecidedOffset`).
    pub fn first_undecided_offset(&self) -> Option<Offset> {
        self.ongoing_transactions.keys().next().copied()
    }

    /// The last stable offset: what `read_committed` fetches read up to and
    /// ListOffsets(latest) answers them. `UnifiedLog.lastStableOffset` with the
    /// first unstable offset raised to the log start as
    /// `maybeIncrementFirstUnstableOffset` does.
    pub fn last_stable_offset(&self, log_start_offset: Offset, high_watermark: Offset) -> Offset {
        match self.first_unstable_offset() {
            Some(unstable) => unstable.max(log_start_offset).min(high_watermark),
            None => high_watermark,
        }
    }

    /// Whether `producer_id` has a transaction open here in `epoch`
    /// (`UnifiedLog.hasOngoingTransaction`).
    pub fn has_ongoing_transaction(&self, producer_id: ProducerId, epoch: ProducerEpoch) -> bool {
        self.producers.get(&producer_id).is_some_and(|entry| {
            entry.current_transaction_first_offset().is_some() && entry.producer_epoch() == epoch
        })
    }

    /// Open transactions as (first offset, producer), oldest first.
    pub fn ongoing_transactions(&self) -> impl Iterator<Item = (Offset, ProducerId)> + '_ {
        self.ongoing_transactions
            .iter()
            .map(|(offset, producer_id)| (*offset, *producer_id))
    }

    /// Whether the oldest open transaction has been silent for longer than
    /// `max_transaction_timeout_ms` plus [`LATE_TRANSACTION_BUFFER_MS`]: a
    /// hanging transaction holding back the LSO (`hasLateTransaction`).
    pub fn has_late_transaction(&self, now: TimestampMs, max_transaction_timeout_ms: i64) -> bool {
        let Some((_, producer_id)) = self.ongoing_transactions.iter().next() else {
            return false;
        };
        let last_timestamp = self
            .producers
            .get(producer_id)
            .map_or(-1, |entry| entry.last_timestamp().0);
        last_timestamp > 0
            && now.0.wrapping_sub(last_timestamp)
                > max_transaction_timeout_ms.saturating_add(LATE_TRANSACTION_BUFFER_MS)
    }

    /// Checks that open transactions and producer entries agree; for tests and
    /// the simulator (linear in the number of producers).
    pub fn assert_transaction_invariants(&self) {
        let open: Vec<(Offset, ProducerId)> = self
            .producers
            .iter()
            .filter_map(|(producer_id, entry)| {
                entry
                    .current_transaction_first_offset()
                    .map(|offset| (offset, *producer_id))
            })
            .collect();
        assert_eq!(
            open.len(),
            self.ongoing_transactions.len(),
            "open transactions"
        );
        for (offset, producer_id) in open {
            assert_eq!(
                self.ongoing_transactions.get(&offset),
                Some(&producer_id),
                "transaction of producer {} at {offset}",
                producer_id.0
            );
        }
        assert!(self.verifications.len() <= self.config.producers_max);
    }
}

fn marker_fingerprint(entry: &ProducerStateEntry) -> (ProducerEpoch, i32, Option<Offset>) {
    (
        entry.producer_epoch(),
        entry.coordinator_epoch(),
        entry.current_transaction_first_offset(),
    )
}
