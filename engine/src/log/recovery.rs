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

use thiserror::Error;

use crate::log::batch::{BatchError, BatchView, LOG_OVERHEAD_BYTES};
use crate::log::epoch_cache::LeaderEpochCache;
use crate::log::index::RELATIVE_OFFSET_MAX;
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
    /// Compacted logs keep original offsets, so gaps are legal.
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
        batch
            .validate_for_append(batch.base_offset())
            .map_err(|error| ScanStop::InvalidBatch { position, error })?;
        let base = batch.base_offset();
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
        let last = batch.last_offset();
        if last.0 - self.segment_base.0 > RELATIVE_OFFSET_MAX {
            return Err(ScanStop::RelativeOffsetOverflow { position, last });
        }
        // Batches older than the cache's first entry (written before it, or
        // kept below a moved log start) have nothing to be checked against.
        if let Some(expected) = self.epochs.and_then(|cache| cache.epoch_for(base)) {
            let found = batch.partition_leader_epoch();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::tests::sample_batch;
    use crate::log::batch::{set_base_offset, set_partition_leader_epoch};

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
}
