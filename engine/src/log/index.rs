//! The sparse index files, as Kafka writes them.
//!
//! `.index`: 8-byte entries `(relativeOffset u32, position u32)`, big-endian,
//! where `relativeOffset = offset - segment base offset` and `position` is the
//! byte position in the `.log` of the batch holding that offset.
//!
//! `.timeindex`: 12-byte entries `(timestamp i64, relativeOffset u32)`.
//!
//! Both files are sorted by key, so every lookup is a "floor" search: the last
//! entry whose key is ≤ the target. Sealed segments' index files are not kept
//! in memory: the runtime reads one block at a time (see [`BlockSummary`]).

use thiserror::Error;
use zerocopy::byteorder::big_endian::{I64, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::{Offset, TimestampMs};

/// Kafka stores relative offsets as Java ints: they may not exceed this.
pub const RELATIVE_OFFSET_MAX: i64 = i32::MAX as i64;
/// Index reads and summaries work in whole 4 KiB pages.
pub const PAGE_BYTES: usize = 4096;

/// One `.index` entry.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct OffsetIndexEntry {
    pub relative_offset: U32,
    pub position: U32,
}

/// One `.timeindex` entry.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned,
)]
#[repr(C)]
pub struct TimeIndexEntry {
    pub timestamp: I64,
    pub relative_offset: U32,
}

impl OffsetIndexEntry {
    pub fn new(relative_offset: u32, position: u32) -> OffsetIndexEntry {
        OffsetIndexEntry {
            relative_offset: relative_offset.into(),
            position: position.into(),
        }
    }

    pub fn offset(&self, base_offset: Offset) -> Offset {
        Offset(base_offset.0 + i64::from(self.relative_offset.get()))
    }
}

impl TimeIndexEntry {
    pub fn new(timestamp: TimestampMs, relative_offset: u32) -> TimeIndexEntry {
        TimeIndexEntry {
            timestamp: timestamp.0.into(),
            relative_offset: relative_offset.into(),
        }
    }

    pub fn timestamp(&self) -> TimestampMs {
        TimestampMs(self.timestamp.get())
    }

    pub fn offset(&self, base_offset: Offset) -> Offset {
        Offset(base_offset.0 + i64::from(self.relative_offset.get()))
    }
}

/// What the two index kinds have in common: a fixed size and a sort key.
pub trait IndexEntry: FromBytes + IntoBytes + Immutable + KnownLayout + Copy {
    /// Size of one entry in the file.
    const BYTES: usize;
    /// The key entries are sorted by (relative offset, or timestamp).
    fn key(&self) -> i64;
}

impl IndexEntry for OffsetIndexEntry {
    const BYTES: usize = 8;
    fn key(&self) -> i64 {
        i64::from(self.relative_offset.get())
    }
}

impl IndexEntry for TimeIndexEntry {
    const BYTES: usize = 12;
    fn key(&self) -> i64 {
        self.timestamp.get()
    }
}

/// Why an index file cannot be trusted (the segment's index is then rebuilt).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum IndexError {
    #[error("index size {bytes} is not a multiple of the entry size {entry_bytes}")]
    PartialEntry { bytes: usize, entry_bytes: usize },
    #[error("index entry {entry} is not after the previous one")]
    OutOfOrder { entry: usize },
    #[error("index entry {entry} points past the log ({position} >= {log_bytes})")]
    PositionPastLog {
        entry: usize,
        position: u64,
        log_bytes: u64,
    },
    #[error("index entry {entry} has relative offset {relative_offset} beyond {max}")]
    OffsetPastSegment {
        entry: usize,
        relative_offset: i64,
        max: i64,
    },
    #[error("index misses an entry: a batch at position {position} should be indexed")]
    MissingEntry { position: u64 },
    #[error("time index does not end with the segment's largest timestamp {expected}")]
    MissingMaxTimestamp { expected: i64 },
    #[error(
        "index entry {entry} maps offset {indexed} to position {position}, where the batch ends at {found:?}"
    )]
    BatchMismatch {
        entry: usize,
        position: u64,
        indexed: i64,
        /// The last offset of the batch found there; `None` if no batch is.
        found: Option<i64>,
    },
}

/// Views raw index bytes as entries.
pub fn entries_from_bytes<E: IndexEntry>(bytes: &[u8]) -> Result<&[E], IndexError> {
    if bytes.len() % E::BYTES != 0 {
        return Err(IndexError::PartialEntry {
            bytes: bytes.len(),
            entry_bytes: E::BYTES,
        });
    }
    Ok(<[E]>::ref_from_bytes(bytes).expect("length is a multiple of the unaligned entry size"))
}

/// The last entry whose key is ≤ `key`, with its index; `None` if every entry
/// is greater (the caller then starts from the segment's beginning).
pub fn floor<E: IndexEntry>(entries: &[E], key: i64) -> Option<(usize, E)> {
    floor_by(entries, key, E::key)
}

/// [`floor`] by another sorted key, such as an offset entry's position.
pub fn floor_by<E: Copy>(
    entries: &[E],
    key: i64,
    key_of: impl Fn(&E) -> i64,
) -> Option<(usize, E)> {
    let after = entries.partition_point(|entry| key_of(entry) <= key);
    after.checked_sub(1).map(|slot| (slot, entries[slot]))
}

/// Where a file range of a segment still being appended to may end, from
/// its offset index (Kafka's: each entry maps a batch's last offset,
/// relative to the segment's base, to the position the batch starts at):
/// the position of the last indexed batch that starts after `after` and at
/// or before `limit`, and whose last offset is below `stable_end`
/// (relative). The batches before that position all end below it too, so
/// a range up to it holds only bytes no append rewrites. `None` when no
/// indexed batch qualifies.
pub fn stable_range_end(
    entries: &[OffsetIndexEntry],
    after: u64,
    limit: u64,
    stable_end: i64,
) -> Option<u64> {
    let within_limit = entries.partition_point(|entry| u64::from(entry.position.get()) <= limit);
    let stable =
        entries.partition_point(|entry| i64::from(entry.relative_offset.get()) < stable_end);
    let entry = entries[..within_limit.min(stable)].last()?;
    let position = u64::from(entry.position.get());
    (position > after).then_some(position)
}

/// The position key of offset index entries (sorted like their offsets).
pub fn position_key(entry: &OffsetIndexEntry) -> i64 {
    i64::from(entry.position.get())
}

/// Checks an offset index against its log: relative offsets and positions
/// strictly increase, positions lie inside the log, and offsets fit.
pub fn check_offset_index(entries: &[OffsetIndexEntry], log_bytes: u64) -> Result<(), IndexError> {
    for (slot, entry) in entries.iter().enumerate() {
        let relative_offset = i64::from(entry.relative_offset.get());
        if relative_offset > RELATIVE_OFFSET_MAX {
            return Err(IndexError::OffsetPastSegment {
                entry: slot,
                relative_offset,
                max: RELATIVE_OFFSET_MAX,
            });
        }
        let position = u64::from(entry.position.get());
        if position >= log_bytes {
            return Err(IndexError::PositionPastLog {
                entry: slot,
                position,
                log_bytes,
            });
        }
        if let Some(previous) = slot.checked_sub(1).map(|p| entries[p]) {
            if entry.relative_offset.get() <= previous.relative_offset.get()
                || entry.position.get() <= previous.position.get()
            {
                return Err(IndexError::OutOfOrder { entry: slot });
            }
        }
    }
    Ok(())
}

/// Checks a time index: timestamps strictly increase (entries are only added
/// for a new maximum), offsets never decrease and stay within the segment.
pub fn check_time_index(
    entries: &[TimeIndexEntry],
    relative_offset_max: i64,
) -> Result<(), IndexError> {
    for (slot, entry) in entries.iter().enumerate() {
        let relative_offset = i64::from(entry.relative_offset.get());
        if relative_offset > relative_offset_max {
            return Err(IndexError::OffsetPastSegment {
                entry: slot,
                relative_offset,
                max: relative_offset_max,
            });
        }
        if let Some(previous) = slot.checked_sub(1).map(|p| entries[p]) {
            if entry.timestamp.get() <= previous.timestamp.get()
                || entry.relative_offset.get() < previous.relative_offset.get()
            {
                return Err(IndexError::OutOfOrder { entry: slot });
            }
        }
    }
    Ok(())
}

/// How many entries of kind `E` make one block: the smallest run of entries
/// that is also a whole number of pages (512 offset entries = 1 page; 1,024
/// time entries = 3 pages).
pub const fn entries_per_block(entry_bytes: usize) -> usize {
    let mut pages = 1;
    while (pages * PAGE_BYTES) % entry_bytes != 0 {
        pages += 1;
    }
    pages * PAGE_BYTES / entry_bytes
}

/// The first key of every block of a sealed index file: a few bytes per 4 KiB
/// of index, enough to turn a lookup into a single block read.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BlockSummary {
    first_keys: Vec<i64>,
    entries: usize,
    entries_per_block: usize,
}

impl BlockSummary {
    /// Summarises a whole index (read once, then dropped by the caller).
    pub fn of<E: IndexEntry>(entries: &[E]) -> BlockSummary {
        BlockSummary::of_by(entries, E::key)
    }

    /// Summarises by another sorted key (see [`floor_by`]).
    pub fn of_by<E: IndexEntry>(entries: &[E], key_of: impl Fn(&E) -> i64) -> BlockSummary {
        let entries_per_block = entries_per_block(E::BYTES);
        let first_keys = entries
            .chunks(entries_per_block)
            .map(|block| key_of(&block[0]))
            .collect();
        BlockSummary {
            first_keys,
            entries: entries.len(),
            entries_per_block,
        }
    }

    pub fn entries(&self) -> usize {
        self.entries
    }

    /// The entry range of the block that holds the floor of `key`, or `None`
    /// when `key` precedes the first entry.
    pub fn block_for(&self, key: i64) -> Option<std::ops::Range<usize>> {
        let after = self.first_keys.partition_point(|first| *first <= key);
        let block = after.checked_sub(1)?;
        let start = block * self.entries_per_block;
        Some(start..(start + self.entries_per_block).min(self.entries))
    }

    /// Heap bytes held by this summary.
    pub fn heap_bytes(&self) -> usize {
        self.first_keys.capacity() * size_of::<i64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn entries_have_kafkas_layout() {
        let entry = OffsetIndexEntry::new(0x0102_0304, 0x0A0B_0C0D);
        assert_eq!(entry.as_bytes(), &[1, 2, 3, 4, 0x0A, 0x0B, 0x0C, 0x0D]);
        let entry = TimeIndexEntry::new(TimestampMs(0x0102_0304_0506_0708), 9);
        assert_eq!(entry.as_bytes(), &[1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 9]);
    }

    #[test]
    fn floor_finds_the_last_entry_not_after_the_key() {
        let entries: Vec<_> = [10u32, 20, 30]
            .iter()
            .map(|o| OffsetIndexEntry::new(*o, *o * 100))
            .collect();
        assert_eq!(floor(&entries, 5), None);
        assert_eq!(floor(&entries, 10).unwrap().0, 0);
        assert_eq!(floor(&entries, 29).unwrap().0, 1);
        assert_eq!(floor(&entries, 1000).unwrap().0, 2);
    }

    /// A range of an active segment ends at an indexed batch start within
    /// the byte limit, and never past a batch that reaches the stable end.
    #[test]
    fn a_stable_range_ends_at_an_indexed_batch_below_both_bounds() {
        // Batches of 10 offsets and 1,000 bytes: the one at position
        // `n * 1000` ends at offset `n * 10 + 9`.
        let entries: Vec<_> = (0u32..10)
            .map(|batch| OffsetIndexEntry::new(batch * 10 + 9, batch * 1_000))
            .collect();
        // The byte limit: the last batch starting at or before it.
        assert_eq!(stable_range_end(&entries, 0, 4_500, 1_000), Some(4_000));
        assert_eq!(stable_range_end(&entries, 0, 4_000, 1_000), Some(4_000));
        // The stable end: no batch reaching offset 50 (the one at 5,000
        // ends at 59) starts the range's end; the one before may.
        assert_eq!(stable_range_end(&entries, 0, 9_000, 50), Some(4_000));
        assert_eq!(stable_range_end(&entries, 0, 9_000, 60), Some(5_000));
        // Nothing after the start qualifies: no range from the index.
        assert_eq!(stable_range_end(&entries, 4_000, 9_000, 50), None);
        assert_eq!(stable_range_end(&entries, 0, 900, 1_000), None);
        assert_eq!(stable_range_end(&entries, 0, 9_000, 9), None);
        assert_eq!(stable_range_end(&[], 0, 9_000, 1_000), None);
    }

    #[test]
    fn partial_and_unordered_indexes_are_rejected() {
        assert!(matches!(
            entries_from_bytes::<OffsetIndexEntry>(&[0; 9]),
            Err(IndexError::PartialEntry { .. })
        ));
        let unordered = [OffsetIndexEntry::new(5, 100), OffsetIndexEntry::new(5, 200)];
        assert_eq!(
            check_offset_index(&unordered, 1000),
            Err(IndexError::OutOfOrder { entry: 1 })
        );
        let past = [OffsetIndexEntry::new(5, 1000)];
        assert!(matches!(
            check_offset_index(&past, 1000),
            Err(IndexError::PositionPastLog { .. })
        ));
        let zeros = [
            TimeIndexEntry::new(TimestampMs(7), 1),
            TimeIndexEntry::new(TimestampMs(0), 0),
        ];
        assert_eq!(
            check_time_index(&zeros, 10),
            Err(IndexError::OutOfOrder { entry: 1 })
        );
    }

    #[test]
    fn blocks_are_whole_pages() {
        assert_eq!(entries_per_block(8), 512);
        assert_eq!(entries_per_block(12), 1024);
    }

    proptest! {
        #[test]
        fn summary_lookup_agrees_with_a_full_floor(
            keys in proptest::collection::btree_set(0u32..1_000_000, 0..3000),
            probes in proptest::collection::vec(0i64..1_000_100, 1..50),
        ) {
            let entries: Vec<_> = keys.iter().enumerate()
                .map(|(i, k)| OffsetIndexEntry::new(*k, i as u32)).collect();
            let summary = BlockSummary::of(&entries);
            for probe in probes {
                let expected = floor(&entries, probe).map(|(slot, _)| slot);
                let found = summary.block_for(probe).and_then(|block| {
                    floor(&entries[block.clone()], probe).map(|(slot, _)| block.start + slot)
                });
                prop_assert_eq!(found, expected);
            }
        }
    }
}
