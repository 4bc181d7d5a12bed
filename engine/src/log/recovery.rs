//! The recovery scan: how much of a segment's bytes is a valid log.
//!
//! Fed the bytes of a segment from a batch boundary, the scanner reports the
//! length of the valid prefix and why it stopped: a short read (a torn final
//! write), a length out of bounds (including the zero padding after the last
//! O_DIRECT page), a bad magic, a CRC mismatch, offsets that go backwards (or,
//! in a log that is never compacted, skip ahead), offsets that overflow the
//! segment's 31-bit relative range, or a leader epoch that contradicts the
//! leader-epoch cache. Everything after the first invalid batch is discarded.
//!
//! The scanner is incremental so the runtime can feed a large file in chunks.
//!
//! After a crash only what lies after the checkpointed recovery point needs
//! the scan: the batches below it were synced before the point was written.
//! In the segment holding the point, [`index_resume`] decides how much of
//! the segment's own (unsynced) index files to keep, and a [`HeaderWalk`]
//! reads the headers of the batches from there up to the point, so the scan
//! starts at the first batch that does not end below it.

use thiserror::Error;

use crate::log::batch::{
    BATCH_HEADER_BYTES, BatchError, BatchHeader, BatchView, LOG_OVERHEAD_BYTES, OFFSET_MAX,
};
use crate::log::epoch_cache::LeaderEpochCache;
use crate::log::index::{OffsetIndexEntry, PAGE_BYTES, RELATIVE_OFFSET_MAX, TimeIndexEntry};
use crate::types::{LeaderEpoch, Offset};

/// Whether the bytes after a segment's last valid batch are only the zero
/// padding of its last O_DIRECT page (`page_bytes`): what a crash between a
/// roll and the trim that seals the old segment leaves. That is not damage,
/// so the segments after it stay (their contiguity is checked as usual).
pub fn is_write_padding(tail: &[u8], page_bytes: usize) -> bool {
    !tail.is_empty() && tail.len() < page_bytes && tail.iter().all(|byte| *byte == 0)
}

/// Whether batches must follow each other without offset gaps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Contiguity {
    /// `cleanup.policy=delete`: every batch starts right after the previous one.
    Strict,
    /// Compacted logs keep original offsets, so gaps are legal, between
    /// batches and inside them (a cleaned batch holds fewer records than
    /// its offset range).
    GapsAllowed,
}

/// Why the valid prefix ends.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ScanStop {
    #[error("short read at {position}: a batch needs {need} bytes, {have} remain")]
    ShortRead {
        position: u64,
        need: usize,
        have: usize,
    },
    #[error("invalid batch at {position}: {error}")]
    InvalidBatch { position: u64, error: BatchError },
    #[error("batch at {position} starts at offset {found}, expected {expected}")]
    UnexpectedOffset {
        position: u64,
        found: Offset,
        expected: Offset,
    },
    #[error("batch at {position} ends at offset {last}, beyond the segment's relative range")]
    RelativeOffsetOverflow { position: u64, last: Offset },
    #[error("batch at {position} lies beyond the 4 GiB an index position can address")]
    PositionOverflow { position: u64 },
    #[error("batch at {position} has leader epoch {found}, the epoch cache says {expected:?}")]
    EpochMismatch {
        position: u64,
        found: LeaderEpoch,
        expected: Option<LeaderEpoch>,
    },
}

/// How a call to [`Scanner::scan`] ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte given belonged to a valid batch.
    Exhausted,
    /// The bytes end inside a batch of `batch_bytes`; feed more from the
    /// returned position (only reported when not at end of file).
    NeedMore { batch_bytes: usize },
    /// The log is invalid from the returned position on.
    Invalid(ScanStop),
}

/// Result of scanning one chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScanOutcome {
    /// Leading bytes of the chunk that are whole valid batches.
    pub valid_bytes: usize,
    pub end: ScanEnd,
}

/// Scanning state carried across chunks of one segment.
#[derive(Clone, Debug)]
pub struct Scanner<'a> {
    segment_base: Offset,
    contiguity: Contiguity,
    epochs: Option<&'a LeaderEpochCache>,
    /// Where the next batch must start; `None` when resuming mid-segment at
    /// a batch whose base offset is not known (it must only be in the segment).
    next_offset: Option<Offset>,
}

impl<'a> Scanner<'a> {
    /// A scanner for a segment whose first batch must start at `next_offset`
    /// (the segment's base offset, or where a previous scan left off; `None`
    /// to accept any start within the segment). Batch epochs are checked
    /// against `epochs` wherever it covers their offsets.
    pub fn new(
        segment_base: Offset,
        next_offset: Option<Offset>,
        contiguity: Contiguity,
        epochs: Option<&'a LeaderEpochCache>,
    ) -> Scanner<'a> {
        let epochs = epochs.filter(|cache| !cache.is_empty());
        Scanner {
            segment_base,
            contiguity,
            epochs,
            next_offset,
        }
    }

    /// The offset after the last valid batch seen (`None` before any).
    pub fn next_offset(&self) -> Option<Offset> {
        self.next_offset
    }

    /// Scans `bytes`, which begin at file position `position` on a batch
    /// boundary, calling `visit(position, batch)` for each valid batch.
    pub fn scan(
        &mut self,
        position: u64,
        bytes: &[u8],
        at_end_of_file: bool,
        mut visit: impl FnMut(u64, &BatchView<'_>),
    ) -> ScanOutcome {
        let mut valid = 0usize;
        while valid < bytes.len() {
            let batch_position = position + valid as u64;
            let batch = match BatchView::parse_prefix(&bytes[valid..]) {
                Ok(batch) => batch,
                Err(BatchError::Truncated { need, have }) => {
                    // The declared length may itself be garbage: only ask for
                    // more bytes while the length field is still unread or plausible.
                    if at_end_of_file {
                        let stop = ScanStop::ShortRead {
                            position: batch_position,
                            need,
                            have,
                        };
                        return ScanOutcome {
                            valid_bytes: valid,
                            end: ScanEnd::Invalid(stop),
                        };
                    }
                    let batch_bytes = need.max(LOG_OVERHEAD_BYTES);
                    return ScanOutcome {
                        valid_bytes: valid,
                        end: ScanEnd::NeedMore { batch_bytes },
                    };
                }
                Err(error) => {
                    let stop = ScanStop::InvalidBatch {
                        position: batch_position,
                        error,
                    };
                    return ScanOutcome {
                        valid_bytes: valid,
                        end: ScanEnd::Invalid(stop),
                    };
                }
            };
            if let Err(stop) = self.check(batch_position, &batch) {
                return ScanOutcome {
                    valid_bytes: valid,
                    end: ScanEnd::Invalid(stop),
                };
            }
            visit(batch_position, &batch);
            self.next_offset = Some(batch.next_offset());
            valid += batch.size_bytes();
        }
        ScanOutcome {
            valid_bytes: valid,
            end: ScanEnd::Exhausted,
        }
    }

    fn check(&self, position: u64, batch: &BatchView<'_>) -> Result<(), ScanStop> {
        if position > u64::from(u32::MAX) {
            return Err(ScanStop::PositionOverflow { position });
        }
        batch
            .verify_crc()
            .map_err(|error| ScanStop::InvalidBatch { position, error })?;
        self.check_header(position, batch.header())
    }

    /// Every check but the CRC: what a batch's header alone can show (the
    /// record count, where its offsets lie, its leader epoch).
    fn check_header(&self, position: u64, header: &BatchHeader) -> Result<(), ScanStop> {
        if position > u64::from(u32::MAX) {
            return Err(ScanStop::PositionOverflow { position });
        }
        let invalid = |error| ScanStop::InvalidBatch { position, error };
        let (count, delta) = (header.records_count.get(), header.last_offset_delta.get());
        // A batch the cleaner rebuilt keeps its offset range with fewer
        // records (none, for a header kept for its producer).
        let count_fits = match self.contiguity {
            Contiguity::Strict => count == delta.wrapping_add(1),
            Contiguity::GapsAllowed => count >= 0 && count <= delta.saturating_add(1),
        };
        if delta < 0 || !count_fits {
            return Err(invalid(BatchError::RecordCountMismatch {
                records_count: count,
                last_offset_delta: delta,
            }));
        }
        let base = header.base_offset();
        match base.0.checked_add(i64::from(delta)) {
            Some(last) if base.0 >= 0 && last <= OFFSET_MAX => {}
            _ => {
                return Err(invalid(BatchError::OffsetOverflow {
                    base: base.0,
                    delta,
                }));
            }
        }
        let expected = self.next_offset.unwrap_or(self.segment_base);
        let in_order = match (self.contiguity, self.next_offset) {
            (Contiguity::Strict, Some(_)) => base == expected,
            _ => base >= expected,
        };
        if !in_order {
            return Err(ScanStop::UnexpectedOffset {
                position,
                found: base,
                expected,
            });
        }
        let last = header.last_offset();
        if last.0 - self.segment_base.0 > RELATIVE_OFFSET_MAX {
            return Err(ScanStop::RelativeOffsetOverflow { position, last });
        }
        // Batches older than the cache's first entry (written before it, or
        // kept below a moved log start) have nothing to be checked against.
        if let Some(expected) = self.epochs.and_then(|cache| cache.epoch_for(base)) {
            let found = LeaderEpoch(header.partition_leader_epoch.get());
            if found != expected {
                return Err(ScanStop::EpochMismatch {
                    position,
                    found,
                    expected: Some(expected),
                });
            }
        }
        Ok(())
    }
}

/// Bytes a header walk reads at once while batches are small: below
/// [`HEADER_WALK_STEP_OVER_BYTES`] per batch, reading straight through costs
/// less than one read per header.
pub const HEADER_WALK_WINDOW_BYTES: usize = 1 << 20;
/// After a batch at least this large, a header walk reads only the page(s)
/// holding the next header. Measured with `dd iflag=direct` on the bench
/// disk (virtio, ext4), one 4 KiB read took ~110 µs, about what ~80 KiB more
/// of a 1 MiB read (~760 MB/s with one read in flight) takes.
pub const HEADER_WALK_STEP_OVER_BYTES: usize = 64 << 10;

/// What a header walk wants next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkStep {
    /// Read `len` bytes at `position` and [`HeaderWalk::feed`] them.
    Read { position: u64, len: usize },
    /// The batches before `position` are trusted: the full scan starts
    /// there, with [`HeaderWalk::into_scanner`].
    Trusted { position: u64 },
}

/// Walks the batch headers of the segment holding the recovery point, up to
/// the first batch that does not end below it.
///
/// Everything below the recovery point was synced before the point was
/// checkpointed, so no crash can have torn it: recovery only needs its
/// headers (for the index entries, the leader epochs and where the next
/// batch starts) and leaves the CRCs to the full scan of what follows, as
/// Kafka's log loader recovers only from the recovery point on. Each header
/// gets every check the scan makes but the CRC (length, magic, record count,
/// offsets in order and in range, leader epoch); the walk stops at the first
/// that fails, so the scan starts at the damage and a damaged header below
/// the point truncates the log as before. Damage inside the records below
/// the point is not seen at open (nor by Kafka).
#[derive(Clone, Debug)]
pub struct HeaderWalk<'a> {
    scanner: Scanner<'a>,
    recovery_point: Offset,
    segment_bytes: u64,
    batch_bytes_max: usize,
    /// Where the next header starts.
    position: u64,
    last_batch_bytes: usize,
    stopped: bool,
}

impl<'a> HeaderWalk<'a> {
    /// A walk of a segment of `segment_bytes` from the batch boundary `from`,
    /// checking headers with `scanner` (whose expected next offset holds for
    /// the batch at `from`). A batch longer than `batch_bytes_max` ends it.
    pub fn new(
        scanner: Scanner<'a>,
        from: u64,
        segment_bytes: u64,
        recovery_point: Offset,
        batch_bytes_max: usize,
    ) -> HeaderWalk<'a> {
        assert!(from <= segment_bytes, "a walk starts inside its segment");
        HeaderWalk {
            scanner,
            recovery_point,
            segment_bytes,
            batch_bytes_max,
            position: from,
            last_batch_bytes: 0,
            stopped: false,
        }
    }

    /// The next read, or where the walk ended.
    pub fn step(&self) -> WalkStep {
        let remaining = self.segment_bytes - self.position;
        // A batch starting at or past the recovery point cannot end below it.
        let past_point = self
            .scanner
            .next_offset
            .is_some_and(|next| next >= self.recovery_point);
        if self.stopped || past_point || remaining < BATCH_HEADER_BYTES as u64 {
            return WalkStep::Trusted {
                position: self.position,
            };
        }
        let wanted = if self.last_batch_bytes >= HEADER_WALK_STEP_OVER_BYTES {
            let header_end = self.position + BATCH_HEADER_BYTES as u64;
            header_end.next_multiple_of(PAGE_BYTES as u64) - self.position
        } else {
            HEADER_WALK_WINDOW_BYTES as u64
        };
        WalkStep::Read {
            position: self.position,
            len: wanted.min(remaining) as usize,
        }
    }

    /// Walks the headers that lie whole in `bytes` (read at `position`, where
    /// [`HeaderWalk::step`] asked), calling `visit(position, header)` for each
    /// batch accepted.
    pub fn feed(&mut self, position: u64, bytes: &[u8], mut visit: impl FnMut(u64, &BatchHeader)) {
        assert_eq!(position, self.position, "bytes start at the next header");
        let mut start = 0usize;
        while !self.stopped {
            let Some(header_bytes) = bytes.get(start..start + BATCH_HEADER_BYTES) else {
                return;
            };
            let Some(header) = self.accept(header_bytes) else {
                self.stopped = true;
                return;
            };
            visit(self.position, header);
            let size = header.size_bytes();
            self.scanner.next_offset = Some(header.last_offset().next());
            self.position += size as u64;
            self.last_batch_bytes = size;
            start += size;
        }
    }

    /// The header at the walk's position if its batch ends below the
    /// recovery point and passes every check but the CRC.
    fn accept<'h>(&self, bytes: &'h [u8]) -> Option<&'h BatchHeader> {
        let header = BatchHeader::parse(bytes).ok()?;
        let size = header.size_bytes();
        let fits =
            size <= self.batch_bytes_max && self.segment_bytes - self.position >= size as u64;
        let trusted = fits
            && self.scanner.check_header(self.position, header).is_ok()
            && header.last_offset() < self.recovery_point;
        trusted.then_some(header)
    }

    /// Where the walk ended and the scanner to go on with from there.
    pub fn into_scanner(self) -> (u64, Scanner<'a>) {
        (self.position, self.scanner)
    }
}

/// How much of the index files of the segment holding the recovery point
/// recovery keeps: the leading `offset_entries` offset entries (the header
/// walk starts at the batch of the last one) and `time_entries` time entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IndexResume {
    pub offset_entries: usize,
    pub time_entries: usize,
}

/// Where the segment holding the recovery point can resume from its own
/// index files; `None` to walk it from the start.
///
/// An active segment writes its indexes in whole chunks and never syncs
/// them, so after a crash either may stop short of the log, or hold zeros
/// where a write did not land: only the leading run of entries that could
/// have been written (positive positions inside the log, both keys
/// increasing) is considered. The last offset entry kept must name a batch
/// ending below the recovery point, and a later time entry must show that
/// the time index was written past it: a time entry written with or before
/// an offset entry never names a later offset, so every time entry up to it
/// is then present, and [`crate::log::indexer::SegmentIndexer::resume`] from
/// the two last kept entries is the indexer's state at that batch. The
/// caller checks that the batches at the first and the last kept offset
/// entries end at their offsets.
pub fn index_resume(
    segment_base: Offset,
    recovery_point: Offset,
    log_bytes: u64,
    offset_entries: &[OffsetIndexEntry],
    time_entries: &[TimeIndexEntry],
) -> Option<IndexResume> {
    let offsets = plausible_offset_entries(offset_entries, log_bytes);
    let times = plausible_time_entries(time_entries);
    let time_reach = i64::from(times.last()?.relative_offset.get());
    let below = recovery_point.0.saturating_sub(segment_base.0);
    let kept = offsets.partition_point(|entry| {
        let relative = i64::from(entry.relative_offset.get());
        relative < below && relative < time_reach
    });
    let last = offsets[..kept].last()?.relative_offset.get();
    let time_entries = times.partition_point(|entry| entry.relative_offset.get() <= last);
    debug_assert!(time_entries < times.len(), "a later time entry exists");
    Some(IndexResume {
        offset_entries: kept,
        time_entries,
    })
}

/// The leading offset entries that could have been written: position 0 is
/// never indexed (a zero entry is an unwritten page), positions lie inside
/// the log and both keys increase.
fn plausible_offset_entries(entries: &[OffsetIndexEntry], log_bytes: u64) -> &[OffsetIndexEntry] {
    let mut previous: Option<&OffsetIndexEntry> = None;
    let count = entries
        .iter()
        .take_while(|entry| {
            let position = u64::from(entry.position.get());
            let plausible = position > 0
                && position < log_bytes
                && i64::from(entry.relative_offset.get()) <= RELATIVE_OFFSET_MAX
                && previous.is_none_or(|previous| {
                    entry.relative_offset.get() > previous.relative_offset.get()
                        && entry.position.get() > previous.position.get()
                });
            previous = Some(entry);
            plausible
        })
        .count();
    &entries[..count]
}

/// The leading time entries that could have been written: timestamps are
/// new maxima above NONE (-1), so they are ≥ 0 and increase, and their
/// offsets never decrease.
fn plausible_time_entries(entries: &[TimeIndexEntry]) -> &[TimeIndexEntry] {
    let mut previous: Option<&TimeIndexEntry> = None;
    let count = entries
        .iter()
        .take_while(|entry| {
            let plausible = entry.timestamp.get() >= 0
                && i64::from(entry.relative_offset.get()) <= RELATIVE_OFFSET_MAX
                && previous.is_none_or(|previous| {
                    entry.timestamp.get() > previous.timestamp.get()
                        && entry.relative_offset.get() >= previous.relative_offset.get()
                });
            previous = Some(entry);
            plausible
        })
        .count();
    &entries[..count]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::tests::sample_batch;
    use crate::log::batch::{set_base_offset, set_partition_leader_epoch};
    use crate::types::TimestampMs;

    /// Three batches (offsets 10..=11, 12..=14, 15) in epoch 3.
    fn segment() -> (Vec<u8>, Vec<usize>) {
        let mut bytes = Vec::new();
        let mut ends = Vec::new();
        let mut next = 10;
        for count in [2, 3, 1] {
            let mut batch = sample_batch(count, 1000 + next);
            set_base_offset(&mut batch, Offset(next)).unwrap();
            set_partition_leader_epoch(&mut batch, LeaderEpoch(3)).unwrap();
            bytes.extend(batch);
            ends.push(bytes.len());
            next += i64::from(count);
        }
        (bytes, ends)
    }

    fn scan_all(bytes: &[u8], epochs: Option<&LeaderEpochCache>) -> ScanOutcome {
        Scanner::new(Offset(10), Some(Offset(10)), Contiguity::Strict, epochs).scan(
            0,
            bytes,
            true,
            |_, _| {},
        )
    }

    #[test]
    fn a_clean_segment_is_valid_to_the_end() {
        let (bytes, _) = segment();
        let mut seen = Vec::new();
        let mut scanner = Scanner::new(Offset(10), Some(Offset(10)), Contiguity::Strict, None);
        let outcome = scanner.scan(0, &bytes, true, |position, batch| {
            seen.push((position, batch.base_offset().0))
        });
        assert_eq!(
            outcome,
            ScanOutcome {
                valid_bytes: bytes.len(),
                end: ScanEnd::Exhausted
            }
        );
        assert_eq!(
            seen.iter().map(|s| s.1).collect::<Vec<_>>(),
            vec![10, 12, 15]
        );
        assert_eq!(scanner.next_offset(), Some(Offset(16)));
    }

    #[test]
    fn every_truncation_of_the_last_batch_keeps_exactly_the_prefix() {
        let (bytes, ends) = segment();
        for cut in ends[1]..bytes.len() {
            let outcome = scan_all(&bytes[..cut], None);
            assert_eq!(outcome.valid_bytes, ends[1], "cut at {cut}");
            assert_eq!(
                cut == ends[1],
                outcome.end == ScanEnd::Exhausted,
                "cut at {cut}"
            );
        }
    }

    #[test]
    fn every_flipped_byte_of_the_last_batch_is_caught() {
        let (bytes, ends) = segment();
        let mut cache = LeaderEpochCache::default();
        cache.assign(LeaderEpoch(3), Offset(10));
        for position in ends[1]..bytes.len() {
            for bit in 0..8 {
                let mut damaged = bytes.clone();
                damaged[position] ^= 1 << bit;
                let outcome = scan_all(&damaged, Some(&cache));
                assert_eq!(outcome.valid_bytes, ends[1], "flip at {position} bit {bit}");
                assert!(
                    matches!(outcome.end, ScanEnd::Invalid(_)),
                    "flip at {position} bit {bit}"
                );
            }
        }
    }

    #[test]
    fn zero_padding_ends_the_log() {
        let (mut bytes, _) = segment();
        let len = bytes.len();
        bytes.extend_from_slice(&[0; 4096]);
        let outcome = scan_all(&bytes, None);
        assert_eq!(outcome.valid_bytes, len);
        assert!(matches!(
            outcome.end,
            ScanEnd::Invalid(ScanStop::InvalidBatch {
                error: BatchError::LengthOutOfBounds { .. },
                ..
            })
        ));
    }

    #[test]
    fn chunks_ask_for_more_until_end_of_file() {
        let (bytes, ends) = segment();
        let mut scanner = Scanner::new(Offset(10), Some(Offset(10)), Contiguity::Strict, None);
        let outcome = scanner.scan(0, &bytes[..ends[0] + 5], false, |_, _| {});
        assert_eq!(outcome.valid_bytes, ends[0]);
        assert_eq!(outcome.end, ScanEnd::NeedMore { batch_bytes: 17 });
        let outcome = scanner.scan(ends[0] as u64, &bytes[ends[0]..], false, |_, _| {});
        assert_eq!(
            outcome,
            ScanOutcome {
                valid_bytes: bytes.len() - ends[0],
                end: ScanEnd::Exhausted
            }
        );
    }

    #[test]
    fn gaps_are_legal_only_when_allowed() {
        let mut bytes = sample_batch(1, 0);
        set_base_offset(&mut bytes, Offset(10)).unwrap();
        let mut later = sample_batch(1, 0);
        set_base_offset(&mut later, Offset(20)).unwrap();
        bytes.extend(later);
        let strict = Scanner::new(Offset(10), Some(Offset(10)), Contiguity::Strict, None).scan(
            0,
            &bytes,
            true,
            |_, _| {},
        );
        assert!(matches!(
            strict.end,
            ScanEnd::Invalid(ScanStop::UnexpectedOffset { .. })
        ));
        let mut gaps = Scanner::new(Offset(10), Some(Offset(10)), Contiguity::GapsAllowed, None);
        assert_eq!(
            gaps.scan(0, &bytes, true, |_, _| {}).end,
            ScanEnd::Exhausted
        );
    }

    /// A batch the cleaner rebuilt: one record left of an offset range of
    /// five (lastOffsetDelta 4), its CRC recomputed.
    fn cleaned_batch(base: i64) -> Vec<u8> {
        let mut bytes = sample_batch(1, 0);
        set_base_offset(&mut bytes, Offset(base)).unwrap();
        bytes[23..27].copy_from_slice(&4i32.to_be_bytes());
        let crc = crc32c::crc32c(&bytes[crate::log::batch::CRC_COVERED_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    #[test]
    fn cleaned_batches_are_valid_only_in_compacted_logs() {
        let mut bytes = cleaned_batch(10);
        bytes.extend(cleaned_batch(15));
        let mut gaps = Scanner::new(Offset(10), Some(Offset(10)), Contiguity::GapsAllowed, None);
        assert_eq!(
            gaps.scan(0, &bytes, true, |_, _| {}).end,
            ScanEnd::Exhausted
        );
        assert_eq!(gaps.next_offset(), Some(Offset(20)));
        let strict = Scanner::new(Offset(10), Some(Offset(10)), Contiguity::Strict, None).scan(
            0,
            &bytes,
            true,
            |_, _| {},
        );
        assert!(matches!(
            strict.end,
            ScanEnd::Invalid(ScanStop::InvalidBatch {
                error: BatchError::RecordCountMismatch { .. },
                ..
            })
        ));
    }

    #[test]
    fn only_short_zero_tails_are_write_padding() {
        assert!(is_write_padding(&[0; 100], 4096));
        assert!(is_write_padding(&[0; 4095], 4096));
        assert!(!is_write_padding(&[], 4096));
        assert!(!is_write_padding(&[0; 4096], 4096));
        assert!(!is_write_padding(&[0, 0, 1, 0], 4096));
    }

    #[test]
    fn batches_past_4_gib_are_not_indexable_and_end_the_log() {
        let (bytes, _) = segment();
        let mut scanner = Scanner::new(Offset(10), None, Contiguity::Strict, None);
        let outcome = scanner.scan(1 << 32, &bytes, true, |_, _| {});
        assert_eq!(outcome.valid_bytes, 0);
        assert_eq!(
            outcome.end,
            ScanEnd::Invalid(ScanStop::PositionOverflow { position: 1 << 32 })
        );
    }

    /// Walks `bytes` (a segment based at offset 10) with the reads the walk
    /// asks for; returns the positions of the batches it accepted and where
    /// it trusts the segment up to.
    fn walk(
        bytes: &[u8],
        recovery_point: i64,
        epochs: Option<&LeaderEpochCache>,
    ) -> (Vec<u64>, u64) {
        let scanner = Scanner::new(Offset(10), Some(Offset(10)), Contiguity::Strict, epochs);
        let mut walk = HeaderWalk::new(
            scanner,
            0,
            bytes.len() as u64,
            Offset(recovery_point),
            1 << 20,
        );
        let mut accepted = Vec::new();
        for _ in 0..=bytes.len() {
            match walk.step() {
                WalkStep::Read { position, len } => {
                    let start = position as usize;
                    walk.feed(position, &bytes[start..start + len], |position, _| {
                        accepted.push(position)
                    });
                }
                WalkStep::Trusted { position } => return (accepted, position),
            }
        }
        panic!("the walk never ended");
    }

    #[test]
    fn the_walk_trusts_the_batches_that_end_below_the_recovery_point() {
        let (bytes, ends) = segment();
        let (first, second, all) = (ends[0] as u64, ends[1] as u64, bytes.len() as u64);
        // (recovery point, batches accepted, trusted up to); batches hold
        // offsets 10..=11, 12..=14 and 15.
        let rows: [(i64, &[u64], u64); 7] = [
            (10, &[], 0),
            (11, &[], 0),
            (12, &[0], first),
            (14, &[0], first),
            (15, &[0, first], second),
            (16, &[0, first, second], all),
            (1_000, &[0, first, second], all),
        ];
        for (recovery_point, accepted, trusted) in rows {
            assert_eq!(
                walk(&bytes, recovery_point, None),
                (accepted.to_vec(), trusted),
                "recovery point {recovery_point}"
            );
        }
        let scanner = Scanner::new(Offset(10), Some(Offset(12)), Contiguity::Strict, None);
        let walk = HeaderWalk::new(scanner, first, all, Offset(12), 1 << 20);
        assert_eq!(
            walk.step(),
            WalkStep::Trusted { position: first },
            "a walk starting at the recovery point reads nothing"
        );
    }

    #[test]
    fn the_walk_skips_crcs_but_stops_at_a_header_the_scan_would_refuse() {
        let (bytes, ends) = segment();
        let mut cache = LeaderEpochCache::default();
        cache.assign(LeaderEpoch(3), Offset(10));
        let mut record_byte = bytes.clone();
        record_byte[ends[0] - 1] ^= 0xff;
        assert_eq!(
            walk(&record_byte, 16, Some(&cache)).1,
            bytes.len() as u64,
            "damage inside the records below the recovery point is the reads' to find"
        );
        let second = ends[0];
        let damages: [(&str, usize, u8); 5] = [
            ("magic", second + 16, 0x01),
            ("length", second + 8, 0x80),
            ("base offset", second + 7, 0x01),
            ("record count", second + 60, 0x01),
            ("leader epoch", second + 15, 0x01),
        ];
        for (field, position, mask) in damages {
            let mut damaged = bytes.clone();
            damaged[position] ^= mask;
            assert_eq!(
                walk(&damaged, 16, Some(&cache)),
                (vec![0], second as u64),
                "{field}"
            );
            // The scan that goes on from there refuses the batch: the log is
            // cut where it was before the walk existed.
            let outcome = scan_all(&damaged, Some(&cache));
            assert_eq!(outcome.valid_bytes, second, "{field}");
        }
    }

    #[test]
    fn the_scan_goes_on_from_where_the_walk_stopped() {
        let (bytes, ends) = segment();
        let scanner = Scanner::new(Offset(10), Some(Offset(10)), Contiguity::Strict, None);
        let mut walk = HeaderWalk::new(scanner, 0, bytes.len() as u64, Offset(15), 1 << 20);
        walk.feed(0, &bytes, |_, _| {});
        assert_eq!(
            walk.step(),
            WalkStep::Trusted {
                position: ends[1] as u64
            }
        );
        let (position, mut scanner) = walk.into_scanner();
        assert_eq!(scanner.next_offset(), Some(Offset(15)));
        let mut seen = Vec::new();
        let outcome = scanner.scan(position, &bytes[ends[1]..], true, |position, batch| {
            seen.push((position, batch.base_offset()))
        });
        assert_eq!(outcome.end, ScanEnd::Exhausted);
        assert_eq!(seen, vec![(ends[1] as u64, Offset(15))]);
        assert_eq!(scanner.next_offset(), Some(Offset(16)));
    }

    #[test]
    fn the_walk_reads_windows_over_small_batches_and_one_page_after_a_large_one() {
        // A header claiming a 100 KiB batch (the walk never reads its records).
        let large_bytes = 100 << 10;
        let mut large = sample_batch(1, 0);
        set_base_offset(&mut large, Offset(10)).unwrap();
        large[8..12].copy_from_slice(&(large_bytes as i32 - 12).to_be_bytes());
        large.resize(large_bytes, 0);
        let segment_bytes = large_bytes as u64 + (8 << 20);
        let scanner = Scanner::new(Offset(10), Some(Offset(10)), Contiguity::Strict, None);
        let mut walk = HeaderWalk::new(scanner, 0, segment_bytes, Offset(1_000), 1 << 20);
        assert_eq!(
            walk.step(),
            WalkStep::Read {
                position: 0,
                len: HEADER_WALK_WINDOW_BYTES
            }
        );
        walk.feed(0, &large, |_, _| {});
        assert_eq!(
            walk.step(),
            WalkStep::Read {
                position: large_bytes as u64,
                len: PAGE_BYTES
            },
            "only the page holding the next header"
        );
        let mut unaligned = HeaderWalk::new(
            Scanner::new(Offset(10), None, Contiguity::Strict, None),
            PAGE_BYTES as u64 - 10,
            segment_bytes,
            Offset(1_000),
            1 << 20,
        );
        unaligned.last_batch_bytes = large_bytes;
        assert_eq!(
            unaligned.step(),
            WalkStep::Read {
                position: PAGE_BYTES as u64 - 10,
                len: PAGE_BYTES + 10
            },
            "a header across a page boundary takes both pages"
        );
    }

    fn offset_entries(entries: &[(u32, u32)]) -> Vec<OffsetIndexEntry> {
        entries
            .iter()
            .map(|(relative, position)| OffsetIndexEntry::new(*relative, *position))
            .collect()
    }

    fn time_entries(entries: &[(i64, u32)]) -> Vec<TimeIndexEntry> {
        entries
            .iter()
            .map(|(timestamp, relative)| TimeIndexEntry::new(TimestampMs(*timestamp), *relative))
            .collect()
    }

    #[test]
    fn index_resume_keeps_entries_below_the_recovery_point_the_time_index_covers() {
        let full_offsets: &[(u32, u32)] = &[(9, 1000), (19, 2000), (29, 3000), (39, 4000)];
        let full_times: &[(i64, u32)] = &[(1009, 9), (1019, 19), (1029, 29), (1039, 39)];
        // (case, offset entries, time entries, log bytes, recovery point,
        // (offset entries, time entries) kept); the segment's base is 100.
        type Row<'a> = (
            &'a str,
            &'a [(u32, u32)],
            &'a [(i64, u32)],
            u64,
            i64,
            Option<(usize, usize)>,
        );
        let rows: &[Row] = &[
            (
                "past every entry",
                full_offsets,
                full_times,
                5000,
                150,
                Some((3, 3)),
            ),
            (
                "the last entry needs a later time entry",
                full_offsets,
                full_times,
                5000,
                140,
                Some((3, 3)),
            ),
            (
                "a batch ending just below",
                full_offsets,
                full_times,
                5000,
                130,
                Some((3, 3)),
            ),
            (
                "a batch ending at the point",
                full_offsets,
                full_times,
                5000,
                129,
                Some((2, 2)),
            ),
            (
                "the first batch",
                full_offsets,
                full_times,
                5000,
                110,
                Some((1, 1)),
            ),
            (
                "below every entry",
                full_offsets,
                full_times,
                5000,
                109,
                None,
            ),
            (
                "time index behind",
                full_offsets,
                &full_times[..2],
                5000,
                150,
                Some((1, 1)),
            ),
            ("no time index", full_offsets, &[], 5000, 150, None),
            ("no offset index", &[], full_times, 5000, 150, None),
            (
                "unwritten offset page",
                &[(9, 1000), (19, 2000), (0, 0), (0, 0)],
                full_times,
                5000,
                150,
                Some((2, 2)),
            ),
            (
                "unwritten first page",
                &[(0, 0), (19, 2000)],
                full_times,
                5000,
                150,
                None,
            ),
            (
                "unwritten time page",
                full_offsets,
                &[(1009, 9), (1019, 19), (0, 0), (0, 0)],
                5000,
                150,
                Some((1, 1)),
            ),
            (
                "entries past the log",
                full_offsets,
                full_times,
                2500,
                150,
                Some((2, 2)),
            ),
            (
                "a maximum that did not grow",
                full_offsets,
                &[(1009, 9), (1039, 39)],
                5000,
                150,
                Some((3, 1)),
            ),
        ];
        for (case, offsets, times, log_bytes, recovery_point, expected) in rows {
            let resume = index_resume(
                Offset(100),
                Offset(*recovery_point),
                *log_bytes,
                &offset_entries(offsets),
                &time_entries(times),
            );
            let kept = resume.map(|resume| (resume.offset_entries, resume.time_entries));
            assert_eq!(kept, *expected, "{case}");
        }
    }

    /// Whatever prefix of its index files a crash left, and wherever the
    /// recovery point, resuming where [`index_resume`] says and replaying
    /// the batches from there rebuilds exactly the indexes and indexer state
    /// of appending every batch.
    #[test]
    fn resuming_from_any_prefix_of_the_index_files_rebuilds_them_exactly() {
        use crate::log::indexer::{BatchPlacement, SegmentIndexer};
        let base = Offset(100);
        let batches: Vec<BatchPlacement> = (0..40u64)
            .map(|i| BatchPlacement {
                position: i * 700,
                last_offset: Offset(base.0 + i as i64 * 2 + 1),
                max_timestamp: TimestampMs(1000 + (i as i64 * 7) % 50),
            })
            .collect();
        let log_bytes = 40 * 700;
        let mut appended = SegmentIndexer::new(base, 1000);
        let (mut offsets, mut times) = (Vec::new(), Vec::new());
        for batch in &batches {
            let update = appended.on_batch(*batch);
            offsets.extend(update.offset_entry);
            times.extend(update.time_entry);
        }
        let mut resumed_somewhere = false;
        for recovery_point in base.0..=base.0 + 82 {
            for offset_count in 0..=offsets.len() {
                for time_count in 0..=times.len() {
                    let Some(resume) = index_resume(
                        base,
                        Offset(recovery_point),
                        log_bytes,
                        &offsets[..offset_count],
                        &times[..time_count],
                    ) else {
                        continue;
                    };
                    resumed_somewhere = true;
                    let last = offsets[resume.offset_entries - 1];
                    assert!(last.offset(base) < Offset(recovery_point));
                    let mut indexer = SegmentIndexer::resume(
                        base,
                        1000,
                        Some(last),
                        times[..resume.time_entries].last().copied(),
                    );
                    let mut rebuilt_offsets = offsets[..resume.offset_entries].to_vec();
                    let mut rebuilt_times = times[..resume.time_entries].to_vec();
                    let from = indexer.last_indexed_position();
                    for batch in batches.iter().filter(|batch| batch.position >= from) {
                        let update = indexer.on_batch(*batch);
                        rebuilt_offsets.extend(update.offset_entry);
                        rebuilt_times.extend(update.time_entry);
                    }
                    let context = format!("{recovery_point} {offset_count} {time_count}");
                    assert_eq!(rebuilt_offsets, offsets, "{context}");
                    assert_eq!(rebuilt_times, times, "{context}");
                    assert_eq!(indexer, appended, "{context}");
                }
            }
        }
        assert!(resumed_somewhere);
    }
}
