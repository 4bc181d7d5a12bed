//! What the partition remembers about one producer id: its epoch, the metadata
//! of its last [`BATCHES_RETAINED_MAX`] batches (so a retried batch is answered
//! with its original offsets), and the transaction fields Kafka keeps beside
//! them. Kafka's `ProducerStateEntry` and `BatchMetadata`.

use std::collections::VecDeque;

use crate::types::{Offset, TimestampMs};

use super::sequence::{ProducerEpoch, Sequence};

/// Batches remembered per producer (Kafka's `NUM_BATCHES_TO_RETAIN`): a client
/// has at most 5 requests in flight per connection, so a retry is always of one
/// of the last 5 batches.
pub const BATCHES_RETAINED_MAX: usize = 5;

/// Kafka's "no coordinator epoch yet" (`ProducerStateEntry.empty`).
pub const COORDINATOR_EPOCH_NONE: i32 = -1;

/// One appended batch, as Kafka's `BatchMetadata` stores it: the first sequence
/// and offset are derived from the last ones and `offset_delta`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchMetadata {
    pub last_sequence: Sequence,
    pub last_offset: Offset,
    /// `last_offset - first_offset` (equal to the batch's `lastOffsetDelta`).
    pub offset_delta: i32,
    /// The batch's `maxTimestamp` as stored (the append time for
    /// `LogAppendTime` topics): what a duplicate's response carries.
    pub timestamp: TimestampMs,
}

impl BatchMetadata {
    pub fn first_sequence(&self) -> Sequence {
        self.last_sequence.decrement(self.offset_delta)
    }

    pub fn first_offset(&self) -> Offset {
        Offset(
            self.last_offset
                .0
                .wrapping_sub(i64::from(self.offset_delta)),
        )
    }
}

/// The state of one producer id on one partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerStateEntry {
    producer_epoch: ProducerEpoch,
    /// Oldest first; never longer than [`BATCHES_RETAINED_MAX`]. Cleared when
    /// the epoch changes, since sequences restart at 0 in a new epoch.
    batches: VecDeque<BatchMetadata>,
    coordinator_epoch: i32,
    last_timestamp: TimestampMs,
    current_transaction_first_offset: Option<Offset>,
}

impl ProducerStateEntry {
    /// A producer the partition knows nothing about (`ProducerStateEntry.empty`).
    pub fn empty() -> ProducerStateEntry {
        ProducerStateEntry {
            producer_epoch: ProducerEpoch::NONE,
            batches: VecDeque::with_capacity(BATCHES_RETAINED_MAX),
            coordinator_epoch: COORDINATOR_EPOCH_NONE,
            last_timestamp: TimestampMs::NONE,
            current_transaction_first_offset: None,
        }
    }

    /// An entry as a snapshot restores it: at most the last batch is known.
    pub fn restored(
        producer_epoch: ProducerEpoch,
        coordinator_epoch: i32,
        last_timestamp: TimestampMs,
        current_transaction_first_offset: Option<Offset>,
        last_batch: Option<BatchMetadata>,
    ) -> ProducerStateEntry {
        let mut entry = ProducerStateEntry {
            producer_epoch,
            coordinator_epoch,
            last_timestamp,
            current_transaction_first_offset,
            ..ProducerStateEntry::empty()
        };
        entry.batches.extend(last_batch);
        entry
    }

    pub fn producer_epoch(&self) -> ProducerEpoch {
        self.producer_epoch
    }

    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    /// The `maxTimestamp` of the last batch (or marker): what expiry measures.
    pub fn last_timestamp(&self) -> TimestampMs {
        self.last_timestamp
    }

    pub fn current_transaction_first_offset(&self) -> Option<Offset> {
        self.current_transaction_first_offset
    }

    /// The remembered batches, oldest first.
    pub fn batches(&self) -> impl ExactSizeIterator<Item = &BatchMetadata> {
        self.batches.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.batches.is_empty()
    }

    /// First sequence of the oldest remembered batch, or [`Sequence::NONE`].
    pub fn first_sequence(&self) -> Sequence {
        self.batches
            .front()
            .map_or(Sequence::NONE, BatchMetadata::first_sequence)
    }

    /// Last sequence of the newest remembered batch, or [`Sequence::NONE`].
    pub fn last_sequence(&self) -> Sequence {
        self.batches
            .back()
            .map_or(Sequence::NONE, |batch| batch.last_sequence)
    }

    /// Last offset of the newest remembered batch, or -1 (Kafka's `lastDataOffset`).
    pub fn last_data_offset(&self) -> Offset {
        self.batches
            .back()
            .map_or(Offset(-1), |batch| batch.last_offset)
    }

    /// `offset_delta` of the newest remembered batch, or 0.
    pub fn last_offset_delta(&self) -> i32 {
        self.batches.back().map_or(0, |batch| batch.offset_delta)
    }

    /// The remembered batch with exactly this epoch and sequence range: a retry
    /// (`findDuplicateBatch`). A range that only overlaps is not a duplicate.
    pub fn find_duplicate(
        &self,
        epoch: ProducerEpoch,
        first_sequence: Sequence,
        last_sequence: Sequence,
    ) -> Option<&BatchMetadata> {
        if epoch != self.producer_epoch {
            return None;
        }
        self.batches.iter().find(|batch| {
            batch.first_sequence() == first_sequence && batch.last_sequence == last_sequence
        })
    }

    /// Records an appended data batch (`ProducerStateEntry.addBatch`): a new
    /// epoch forgets the old epoch's batches; the oldest batch makes room.
    pub fn add_batch(&mut self, epoch: ProducerEpoch, batch: BatchMetadata) {
        self.update_epoch(epoch);
        if self.batches.len() == BATCHES_RETAINED_MAX {
            self.batches.pop_front();
        }
        self.batches.push_back(batch);
        self.last_timestamp = batch.timestamp;
        assert!(self.batches.len() <= BATCHES_RETAINED_MAX);
    }

    /// Notes that a transaction started at `first_offset`, unless one is open.
    pub fn begin_transaction_at(&mut self, first_offset: Offset) {
        if self.current_transaction_first_offset.is_none() {
            self.current_transaction_first_offset = Some(first_offset);
        }
    }

    /// Records a COMMIT or ABORT marker (`ProducerStateEntry.update(epoch,
    /// coordinatorEpoch, lastTimestamp)`): the marker's epoch becomes the
    /// producer's (a newer one forgets the batches), the coordinator epoch and
    /// timestamp are the marker's, and no transaction is open any more.
    pub(super) fn end_transaction(
        &mut self,
        epoch: ProducerEpoch,
        coordinator_epoch: i32,
        timestamp: TimestampMs,
    ) {
        self.update_epoch(epoch);
        self.coordinator_epoch = coordinator_epoch;
        self.last_timestamp = timestamp;
        self.current_transaction_first_offset = None;
    }

    /// Switches to `epoch`, forgetting the batches of any other epoch
    /// (`maybeUpdateProducerEpoch`); true if it changed.
    fn update_epoch(&mut self, epoch: ProducerEpoch) -> bool {
        if self.producer_epoch == epoch {
            return false;
        }
        self.batches.clear();
        self.producer_epoch = epoch;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(first_sequence: i32, records: i32, first_offset: i64) -> BatchMetadata {
        BatchMetadata {
            last_sequence: Sequence(first_sequence).increment(records - 1),
            last_offset: Offset(first_offset + i64::from(records - 1)),
            offset_delta: records - 1,
            timestamp: TimestampMs(1_000 + first_offset),
        }
    }

    #[test]
    fn metadata_derives_first_sequence_and_offset() {
        let batch = metadata(i32::MAX - 1, 4, 100);
        assert_eq!(batch.last_sequence, Sequence(1));
        assert_eq!(batch.first_sequence(), Sequence(i32::MAX - 1));
        assert_eq!(batch.first_offset(), Offset(100));
        assert_eq!(batch.last_offset, Offset(103));
    }

    #[test]
    fn only_the_last_five_batches_are_kept() {
        let mut entry = ProducerStateEntry::empty();
        for i in 0..7 {
            entry.add_batch(ProducerEpoch(0), metadata(i * 2, 2, i64::from(i) * 10));
        }
        assert_eq!(entry.batches().len(), BATCHES_RETAINED_MAX);
        assert_eq!(entry.first_sequence(), Sequence(4));
        assert_eq!(entry.last_sequence(), Sequence(13));
        assert_eq!(entry.last_data_offset(), Offset(61));
        assert_eq!(entry.last_timestamp(), TimestampMs(1_060));
        assert!(
            entry
                .find_duplicate(ProducerEpoch(0), Sequence(2), Sequence(3))
                .is_none()
        );
        assert!(
            entry
                .find_duplicate(ProducerEpoch(0), Sequence(4), Sequence(5))
                .is_some()
        );
        assert!(
            entry
                .find_duplicate(ProducerEpoch(1), Sequence(4), Sequence(5))
                .is_none()
        );
    }

    #[test]
    fn a_new_epoch_forgets_the_old_batches_but_not_the_transaction() {
        let mut entry = ProducerStateEntry::empty();
        entry.add_batch(ProducerEpoch(3), metadata(0, 5, 0));
        entry.begin_transaction_at(Offset(0));
        entry.begin_transaction_at(Offset(9));
        entry.add_batch(ProducerEpoch(4), metadata(0, 1, 5));
        assert_eq!(entry.producer_epoch(), ProducerEpoch(4));
        assert_eq!(entry.batches().len(), 1);
        assert_eq!(entry.current_transaction_first_offset(), Some(Offset(0)));
    }

    #[test]
    fn an_empty_entry_reports_kafkas_sentinels() {
        let entry = ProducerStateEntry::empty();
        assert_eq!(entry.producer_epoch(), ProducerEpoch::NONE);
        assert_eq!(entry.first_sequence(), Sequence::NONE);
        assert_eq!(entry.last_sequence(), Sequence::NONE);
        assert_eq!(entry.last_data_offset(), Offset(-1));
        assert_eq!(entry.last_offset_delta(), 0);
        assert_eq!(entry.coordinator_epoch(), COORDINATOR_EPOCH_NONE);
        assert_eq!(entry.last_timestamp(), TimestampMs::NONE);
    }
}
