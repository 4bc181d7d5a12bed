//! When a batch gets an index entry — one rule, used when appending, when
//! rebuilding an index from its log, and when checking an index on open, so a
//! rebuilt index is byte-identical to the one written while appending.
//!
//! The rule is Kafka's (`LogSegment.append` / `LogSegment.recover`, 4.x):
//! a batch starting at `position` is indexed when more than
//! `index.interval.bytes` lie between the last indexed batch's position (0 at
//! first) and `position`. The offset entry maps the batch's *last* offset to its
//! position. At the same moment the time index gets the running maximum
//! timestamp (and the last offset of the batch that set it), if that maximum grew.
//! Sealing a segment appends the final maximum the same way.

use crate::log::index::{OffsetIndexEntry, TimeIndexEntry};
use crate::types::{Offset, TimestampMs};

/// What the indexer needs to know about one appended batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchPlacement {
    /// Byte position of the batch in the segment's `.log`.
    pub position: u64,
    pub last_offset: Offset,
    pub max_timestamp: TimestampMs,
}

/// Index entries to append after one batch (either, both or none).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexUpdate {
    pub offset_entry: Option<OffsetIndexEntry>,
    pub time_entry: Option<TimeIndexEntry>,
}

/// The index-building state of one segment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentIndexer {
    base_offset: Offset,
    index_interval_bytes: u64,
    last_indexed_position: u64,
    max_timestamp: TimestampMs,
    offset_of_max_timestamp: Offset,
    last_time_entry: TimestampMs,
}

impl SegmentIndexer {
    /// The state of an empty segment.
    pub fn new(base_offset: Offset, index_interval_bytes: u64) -> SegmentIndexer {
        SegmentIndexer {
            base_offset,
            index_interval_bytes,
            last_indexed_position: 0,
            max_timestamp: TimestampMs::NONE,
            offset_of_max_timestamp: base_offset,
            last_time_entry: TimestampMs::NONE,
        }
    }

    /// The state right after the last entries of existing index files. Feeding
    /// it every batch from the last offset entry's position onward (the "tail")
    /// brings it to the state at the end of the log; any entry it then emits
    /// is one the index files were missing.
    pub fn resume(
        base_offset: Offset,
        index_interval_bytes: u64,
        last_offset_entry: Option<OffsetIndexEntry>,
        last_time_entry: Option<TimeIndexEntry>,
    ) -> SegmentIndexer {
        let mut indexer = SegmentIndexer::new(base_offset, index_interval_bytes);
        if let Some(entry) = last_offset_entry {
            indexer.last_indexed_position = u64::from(entry.position.get());
        }
        if let Some(entry) = last_time_entry {
            indexer.max_timestamp = entry.timestamp();
            indexer.offset_of_max_timestamp = entry.offset(base_offset);
            indexer.last_time_entry = entry.timestamp();
        }
        indexer
    }

    /// Where a scan must start to replay the tail after [`SegmentIndexer::resume`].
    pub fn last_indexed_position(&self) -> u64 {
        self.last_indexed_position
    }

    pub fn max_timestamp(&self) -> TimestampMs {
        self.max_timestamp
    }

    pub fn offset_of_max_timestamp(&self) -> Offset {
        self.offset_of_max_timestamp
    }

    /// Accounts for one batch, returning the entries to append for it.
    pub fn on_batch(&mut self, batch: BatchPlacement) -> IndexUpdate {
        debug_assert!(batch.last_offset >= self.base_offset);
        if batch.max_timestamp > self.max_timestamp {
            self.max_timestamp = batch.max_timestamp;
            self.offset_of_max_timestamp = batch.last_offset;
        }
        let mut update = IndexUpdate::default();
        if batch.position.saturating_sub(self.last_indexed_position) > self.index_interval_bytes {
            update.offset_entry = Some(OffsetIndexEntry::new(
                self.relative(batch.last_offset),
                u32::try_from(batch.position).expect("segment positions fit in u32"),
            ));
            update.time_entry = self.maybe_time_entry();
            self.last_indexed_position = batch.position;
        }
        update
    }

    /// The final time entry written when the segment stops being active.
    pub fn on_seal(&mut self) -> Option<TimeIndexEntry> {
        self.maybe_time_entry()
    }

    fn maybe_time_entry(&mut self) -> Option<TimeIndexEntry> {
        if self.max_timestamp <= self.last_time_entry {
            return None;
        }
        self.last_time_entry = self.max_timestamp;
        Some(TimeIndexEntry::new(
            self.max_timestamp,
            self.relative(self.offset_of_max_timestamp),
        ))
    }

    fn relative(&self, offset: Offset) -> u32 {
        u32::try_from(offset.0 - self.base_offset.0).expect("relative offsets are bounded by roll")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn placement(position: u64, last_offset: i64, max_timestamp: i64) -> BatchPlacement {
        BatchPlacement {
            position,
            last_offset: Offset(last_offset),
            max_timestamp: TimestampMs(max_timestamp),
        }
    }

    /// Batches of 1,000 bytes with 10 records each, interval 4,096: Kafka
    /// indexes the batch at 5,000 (5,000 - 0 > 4,096), then the one at 10,000.
    #[test]
    fn entries_follow_kafkas_interval_rule() {
        let mut indexer = SegmentIndexer::new(Offset(100), 4096);
        let mut entries = Vec::new();
        for i in 0..11u64 {
            let update = indexer.on_batch(placement(
                i * 1000,
                100 + i as i64 * 10 + 9,
                1000 + i as i64,
            ));
            if let Some(entry) = update.offset_entry {
                entries.push((
                    entry.relative_offset.get(),
                    entry.position.get(),
                    update.time_entry,
                ));
            }
        }
        assert_eq!(entries.len(), 2);
        assert_eq!((entries[0].0, entries[0].1), (59, 5000));
        assert_eq!(
            entries[0].2,
            Some(TimeIndexEntry::new(TimestampMs(1005), 59))
        );
        assert_eq!((entries[1].0, entries[1].1), (109, 10000));
        assert_eq!(
            indexer.on_seal(),
            None,
            "the maximum was already written at 10,000"
        );
    }

    #[test]
    fn time_entries_only_for_a_new_maximum() {
        let mut indexer = SegmentIndexer::new(Offset(0), 0);
        assert_eq!(
            indexer.on_batch(placement(0, 0, 50)).time_entry,
            None,
            "position 0 is never indexed"
        );
        let update = indexer.on_batch(placement(100, 1, 40));
        assert_eq!(
            update.time_entry,
            Some(TimeIndexEntry::new(TimestampMs(50), 0))
        );
        let update = indexer.on_batch(placement(200, 2, 45));
        assert!(update.offset_entry.is_some());
        assert_eq!(update.time_entry, None);
        indexer.on_batch(placement(300, 3, 60));
        assert_eq!(
            indexer.on_seal(),
            None,
            "60 was indexed with the batch at 300"
        );
        assert_eq!(indexer.max_timestamp(), TimestampMs(60));
    }

    #[test]
    fn seal_writes_a_maximum_seen_after_the_last_entry() {
        let mut indexer = SegmentIndexer::new(Offset(0), 4096);
        indexer.on_batch(placement(0, 4, 10));
        indexer.on_batch(placement(100, 9, 20));
        assert_eq!(
            indexer.on_seal(),
            Some(TimeIndexEntry::new(TimestampMs(20), 9))
        );
        assert_eq!(indexer.on_seal(), None);
    }

    #[test]
    fn resuming_and_replaying_the_tail_reaches_the_same_state() {
        let batches: Vec<_> = (0..40u64)
            .map(|i| placement(i * 700, i as i64, 1000 + (i as i64 * 7) % 50))
            .collect();
        let mut full = SegmentIndexer::new(Offset(0), 4096);
        let (mut last_offset_entry, mut last_time_entry) = (None, None);
        for batch in &batches {
            let update = full.on_batch(*batch);
            last_offset_entry = update.offset_entry.or(last_offset_entry);
            last_time_entry = update.time_entry.or(last_time_entry);
        }
        let mut resumed =
            SegmentIndexer::resume(Offset(0), 4096, last_offset_entry, last_time_entry);
        let from = resumed.last_indexed_position();
        for batch in batches.iter().filter(|b| b.position >= from) {
            assert_eq!(resumed.on_batch(*batch), IndexUpdate::default());
        }
        assert_eq!(resumed, full);
    }
}
