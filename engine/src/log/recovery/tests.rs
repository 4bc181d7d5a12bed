//! The recovery scan, the header walk and the index resume against
//! segments built from sample batches: truncations, flipped bits, padding,
//! offset gaps, cleaned batches, the walk's reads and where it hands over to
//! the scan, and every prefix of the index files a crash can leave.

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
fn only_zeros_are_an_unwritten_tail() {
    assert!(is_unwritten_tail(&[0; 100]));
    assert!(is_unwritten_tail(&[0; 3 * 4096]));
    assert!(!is_unwritten_tail(&[0, 0, 1, 0]));
    assert!(!is_unwritten_tail(&[0x80; 4096]));
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
fn walk(bytes: &[u8], recovery_point: i64, epochs: Option<&LeaderEpochCache>) -> (Vec<u64>, u64) {
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
