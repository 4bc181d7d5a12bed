//! The leader-epoch cache: which leader epoch started at which offset (R5).
//!
//! Persisted as Kafka's `leader-epoch-checkpoint` in the partition directory
//! (`0`, a count, then `epoch startOffset` lines). The log writes a new entry
//! durably *before* the first batch of a new epoch, so on recovery every batch's
//! `partitionLeaderEpoch` must equal the epoch the cache gives for its offset:
//! a batch that disagrees was torn or corrupted (the epoch field is outside the
//! CRC, so this is the only check that covers it).

use crate::log::checkpoint::{self, CheckpointError};
use crate::types::{LeaderEpoch, Offset};

/// One `(epoch, start offset)` entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: LeaderEpoch,
    pub start_offset: Offset,
}

/// Entries sorted by epoch and by start offset, both strictly increasing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.entries.last().map(|entry| entry.epoch)
    }

    /// Records that `epoch` starts at `start_offset`. Returns whether the cache
    /// changed (and so must be persisted before the batch is written). Entries
    /// of older or equal epochs starting at or after `start_offset` are dropped,
    /// as Kafka does when a new leader truncates a diverged suffix.
    pub fn assign(&mut self, epoch: LeaderEpoch, start_offset: Offset) -> bool {
        if let Some(latest) = self.entries.last() {
            if latest.epoch >= epoch && latest.start_offset <= start_offset {
                return false;
            }
        }
        self.entries
            .retain(|entry| entry.epoch < epoch && entry.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// The epoch in force at `offset`: the entry with the largest start ≤ it.
    pub fn epoch_for(&self, offset: Offset) -> Option<LeaderEpoch> {
        let after = self
            .entries
            .partition_point(|entry| entry.start_offset <= offset);
        after.checked_sub(1).map(|slot| self.entries[slot].epoch)
    }

    /// Kafka's `endOffsetFor`: for a follower or consumer that last saw
    /// `requested`, the largest epoch ≤ it that this log knows and the
    /// offset where that epoch ended (the next epoch's start, or the log end
    /// for the latest epoch). `None` when `requested` is newer than any epoch
    /// here (Kafka's UNDEFINED_EPOCH / UNDEFINED_EPOCH_OFFSET).
    pub fn end_offset_for(
        &self,
        requested: LeaderEpoch,
        log_end_offset: Offset,
    ) -> Option<(LeaderEpoch, Offset)> {
        if requested.0 < 0 {
            return None;
        }
        if self.latest_epoch() == Some(requested) {
            return Some((requested, log_end_offset));
        }
        let higher = self.entries.iter().find(|entry| entry.epoch > requested)?;
        let floor = self
            .entries
            .iter()
            .rev()
            .find(|entry| entry.epoch <= requested);
        Some((
            floor.map_or(requested, |entry| entry.epoch),
            higher.start_offset,
        ))
    }

    /// Drops entries that start at or after `end_offset` (the log was truncated
    /// there). Returns whether anything changed.
    pub fn truncate_from_end(&mut self, end_offset: Offset) -> bool {
        let before = self.entries.len();
        self.entries.retain(|entry| entry.start_offset < end_offset);
        before != self.entries.len()
    }

    /// Moves the cache's start to `start_offset` (old segments were deleted):
    /// entries wholly before it go, and the one in force there starts there.
    pub fn truncate_from_start(&mut self, start_offset: Offset) -> bool {
        let in_force = self
            .entries
            .partition_point(|entry| entry.start_offset <= start_offset);
        if in_force == 0 {
            return false;
        }
        let mut changed = in_force > 1;
        self.entries.drain(..in_force - 1);
        if self.entries[0].start_offset != start_offset {
            self.entries[0].start_offset = start_offset;
            changed = true;
        }
        changed
    }

    /// Kafka's `leader-epoch-checkpoint` text.
    pub fn encode(&self) -> String {
        checkpoint::encode(
            self.entries
                .iter()
                .map(|entry| format!("{} {}", entry.epoch.0, entry.start_offset.0)),
        )
    }

    pub fn decode(text: &str) -> Result<LeaderEpochCache, CheckpointError> {
        let mut cache = LeaderEpochCache::default();
        for (line, fields) in checkpoint::decode(text, 2)? {
            let epoch = checkpoint::parse_field::<i32>(line, fields[0])?;
            let start = checkpoint::parse_field::<i64>(line, fields[1])?;
            let entry = EpochEntry {
                epoch: LeaderEpoch(epoch),
                start_offset: Offset(start),
            };
            if let Some(last) = cache.entries.last() {
                if last.epoch >= entry.epoch || last.start_offset > entry.start_offset {
                    return Err(CheckpointError::Malformed {
                        line,
                        reason: "entries out of order",
                    });
                }
            }
            cache.entries.push(entry);
        }
        Ok(cache)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut cache = LeaderEpochCache::default();
        for (epoch, start) in entries {
            cache.assign(LeaderEpoch(*epoch), Offset(*start));
        }
        cache
    }

    #[test]
    fn epochs_are_found_by_offset() {
        let cache = cache(&[(0, 0), (2, 100), (5, 250)]);
        assert_eq!(cache.epoch_for(Offset(0)), Some(LeaderEpoch(0)));
        assert_eq!(cache.epoch_for(Offset(99)), Some(LeaderEpoch(0)));
        assert_eq!(cache.epoch_for(Offset(100)), Some(LeaderEpoch(2)));
        assert_eq!(cache.epoch_for(Offset(1_000)), Some(LeaderEpoch(5)));
        assert_eq!(LeaderEpochCache::default().epoch_for(Offset(0)), None);
    }

    #[test]
    fn assigning_an_old_or_current_epoch_changes_nothing() {
        let mut cache = cache(&[(3, 10)]);
        assert!(!cache.assign(LeaderEpoch(3), Offset(20)));
        assert!(!cache.assign(LeaderEpoch(2), Offset(30)));
        assert!(cache.assign(LeaderEpoch(4), Offset(30)));
        assert_eq!(cache.latest_epoch(), Some(LeaderEpoch(4)));
    }

    #[test]
    fn end_offsets_follow_kafkas_rules() {
        let cache = cache(&[(1, 10), (3, 50), (6, 90)]);
        let end = Offset(120);
        assert_eq!(
            cache.end_offset_for(LeaderEpoch(6), end),
            Some((LeaderEpoch(6), end))
        );
        assert_eq!(
            cache.end_offset_for(LeaderEpoch(3), end),
            Some((LeaderEpoch(3), Offset(90)))
        );
        assert_eq!(
            cache.end_offset_for(LeaderEpoch(4), end),
            Some((LeaderEpoch(3), Offset(90)))
        );
        assert_eq!(
            cache.end_offset_for(LeaderEpoch(0), end),
            Some((LeaderEpoch(0), Offset(10)))
        );
        assert_eq!(cache.end_offset_for(LeaderEpoch(7), end), None);
        assert_eq!(cache.end_offset_for(LeaderEpoch(-1), end), None);
    }

    #[test]
    fn truncation_from_either_end() {
        let mut cache = cache(&[(0, 0), (2, 100), (5, 250)]);
        assert!(cache.truncate_from_end(Offset(250)));
        assert_eq!(cache.latest_epoch(), Some(LeaderEpoch(2)));
        assert!(cache.truncate_from_start(Offset(150)));
        assert_eq!(
            cache.entries(),
            &[EpochEntry {
                epoch: LeaderEpoch(2),
                start_offset: Offset(150)
            }]
        );
    }

    #[test]
    fn checkpoint_text_matches_kafka() {
        let cache = cache(&[(0, 0), (2, 100)]);
        assert_eq!(cache.encode(), "0\n2\n0 0\n2 100\n");
        assert_eq!(LeaderEpochCache::decode(&cache.encode()), Ok(cache));
        assert!(LeaderEpochCache::decode("0\n2\n2 100\n0 0\n").is_err());
    }
}
