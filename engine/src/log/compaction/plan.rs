//! Whether a log is due for cleaning, and which of its segments a pass takes
//! (Kafka's `LogCleanerManager.cleanableOffsets`, `calculateCleanableBytes`,
//! `maxCompactionDelay`, `LogToClean`, and `Cleaner.groupSegmentsBySize`).
//!
//! The log is split at two offsets. Below the *first dirty offset* (the
//! cleaner checkpoint: where the previous pass ended) it is clean; from the
//! *first uncleanable offset* on it may not be cleaned yet: the active
//! segment, anything at or past the high watermark, and with
//! `min.compaction.lag.ms` every segment from the first one holding a record
//! younger than the lag. The first uncleanable offset is always a segment's
//! base, so a pass cleans whole sealed segments.

use std::ops::Range;

use crate::log::config::LogConfig;
use crate::log::segments::segment_for_offset;
use crate::types::{Offset, TimestampMs};

/// What the planner needs to know about one sealed segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanableSegment {
    pub base_offset: Offset,
    pub size_bytes: u64,
    pub largest_timestamp: TimestampMs,
    /// The largest timestamp of the segment's first batch (Kafka's
    /// `getFirstBatchTimestamp`), when known and the segment has a batch.
    pub first_batch_timestamp: Option<TimestampMs>,
    pub offset_index_bytes: u64,
    pub time_index_bytes: u64,
}

/// A log as the planner sees it.
#[derive(Clone, Copy, Debug)]
pub struct CleanerView<'a> {
    /// The sealed segments, oldest first (the active one is not among them).
    pub segments: &'a [CleanableSegment],
    pub active_base_offset: Offset,
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
    /// Kafka's last stable offset; without transactions, the high watermark.
    pub stable_offset: Offset,
    /// The cleaner checkpoint, if the log has one.
    pub checkpoint: Option<Offset>,
    pub now_ms: i64,
}

/// A log's cleanable range and how dirty it is (Kafka's `LogToClean`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LogToClean {
    pub first_dirty_offset: Offset,
    /// A segment base: the pass cleans the segments before it.
    pub first_uncleanable_offset: Offset,
    /// Bytes of the segments before the first dirty offset.
    pub clean_bytes: u64,
    /// Bytes of the segments from the first dirty offset's to the first
    /// uncleanable one.
    pub cleanable_bytes: u64,
    /// `max.compaction.lag.ms` has passed for a dirty segment.
    pub need_compaction_now: bool,
    /// The checkpoint lay outside the log (truncated, or a log start moved
    /// past it) and was replaced by the log start offset.
    pub checkpoint_reset: bool,
}

impl LogToClean {
    pub fn total_bytes(&self) -> u64 {
        self.clean_bytes + self.cleanable_bytes
    }

    /// The share of the log's bytes that is dirty and cleanable.
    pub fn cleanable_ratio(&self) -> f64 {
        match self.total_bytes() {
            0 => 0.0,
            total => self.cleanable_bytes as f64 / total as f64,
        }
    }

    /// Kafka's `grabFilthiestCompactedLog` filter: a non-empty log whose
    /// ratio *exceeds* `min.cleanable.dirty.ratio`, or that has cleanable
    /// bytes and must be compacted now.
    pub fn is_due(&self, config: &LogConfig) -> bool {
        self.total_bytes() > 0
            && ((self.need_compaction_now && self.cleanable_bytes > 0)
                || self.cleanable_ratio() > config.min_cleanable_dirty_ratio.get())
    }
}

/// The cleanable range of a log.
pub fn log_to_clean(view: &CleanerView<'_>, config: &LogConfig) -> LogToClean {
    let (first_dirty_offset, checkpoint_reset) = first_dirty_offset(view);
    let floor = |offset: Offset| {
        segment_for_offset(
            |slot| view.segments[slot].base_offset,
            view.segments.len(),
            offset,
        )
        .unwrap_or(0)
    };
    // Kafka's `nonActiveLogSegmentsFrom(firstDirtyOffset)`.
    let dirty_segments = if first_dirty_offset < view.active_base_offset {
        &view.segments[floor(first_dirty_offset).min(view.segments.len())..]
    } else {
        &[]
    };
    let mut uncleanable = view.stable_offset.min(view.active_base_offset);
    if config.min_compaction_lag_ms > 0 {
        let young = view.now_ms.saturating_sub(config.min_compaction_lag_ms);
        if let Some(segment) = dirty_segments
            .iter()
            .find(|segment| segment.largest_timestamp.0 > young)
        {
            uncleanable = uncleanable.min(segment.base_offset);
        }
    }
    let uncleanable = uncleanable.max(first_dirty_offset);
    // The segment holding the uncleanable offset is not cleaned.
    let first_uncleanable_offset = if uncleanable >= view.active_base_offset {
        view.active_base_offset
    } else {
        view.segments
            .get(floor(uncleanable))
            .map_or(view.active_base_offset, |segment| segment.base_offset)
    };
    let bytes = |range: &[CleanableSegment]| range.iter().map(|s| s.size_bytes).sum::<u64>();
    let before = |offset: Offset| view.segments.partition_point(|s| s.base_offset < offset);
    let clean_bytes = bytes(&view.segments[..before(first_dirty_offset)]);
    // Kafka's `logSegments(from, to)`: the segment holding `from` onward,
    // nothing when the range is empty.
    let cleanable_from = floor(first_dirty_offset.min(first_uncleanable_offset));
    let cleanable_to = if first_dirty_offset < first_uncleanable_offset {
        before(first_uncleanable_offset).max(cleanable_from)
    } else {
        cleanable_from
    };
    LogToClean {
        first_dirty_offset,
        first_uncleanable_offset,
        clean_bytes,
        cleanable_bytes: bytes(&view.segments[cleanable_from..cleanable_to]),
        need_compaction_now: max_compaction_delay_ms(dirty_segments, view.now_ms, config) > 0,
        checkpoint_reset,
    }
}

/// The checkpoint, or the log start offset when there is none or it lies
/// outside the log.
fn first_dirty_offset(view: &CleanerView<'_>) -> (Offset, bool) {
    match view.checkpoint {
        None => (view.log_start_offset, false),
        Some(checkpoint)
            if checkpoint < view.log_start_offset || checkpoint > view.log_end_offset =>
        {
            (view.log_start_offset, true)
        }
        Some(checkpoint) => (checkpoint, false),
    }
}

/// How long past `max.compaction.lag.ms` the oldest dirty segment is (0 if
/// it is not).
fn max_compaction_delay_ms(dirty: &[CleanableSegment], now_ms: i64, config: &LogConfig) -> i64 {
    let earliest = dirty
        .iter()
        .filter_map(|segment| segment.first_batch_timestamp)
        .filter(|timestamp| timestamp.0 > 0)
        .min();
    let clean_until = now_ms.saturating_sub(config.max_compaction_lag_ms.max(0));
    match earliest {
        Some(earliest) if earliest.0 < clean_until => clean_until - earliest.0,
        _ => 0,
    }
}

/// The limits of one cleaned segment: `segment.bytes` of log, and
/// `segment.index.bytes` of each index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupLimits {
    pub log_bytes_max: u64,
    pub index_bytes_max: u64,
}

impl GroupLimits {
    pub fn of(config: &LogConfig) -> GroupLimits {
        GroupLimits {
            log_bytes_max: config.segment_bytes,
            index_bytes_max: config.segment_index_bytes,
        }
    }
}

/// Kafka's `groupSegmentsBySize`: consecutive runs of `segments` (those a
/// pass cleans, oldest first), each cleaned into one segment whose log and
/// indexes stay within `limits` and whose offsets stay within the index's
/// 31-bit relative range.
pub fn group_segments(
    segments: &[CleanableSegment],
    limits: GroupLimits,
    first_uncleanable_offset: Offset,
) -> Vec<Range<usize>> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < segments.len() {
        let first = &segments[start];
        let (mut log_bytes, mut offset_bytes, mut time_bytes) = (
            first.size_bytes,
            first.offset_index_bytes,
            first.time_index_bytes,
        );
        let mut end = start + 1;
        while let Some(next) = segments.get(end) {
            // The next segment's last offset, bounded by what follows it.
            let next_last = segments
                .get(end + 1)
                .map_or(first_uncleanable_offset, |after| after.base_offset)
                .0
                - 1;
            let fits = log_bytes + next.size_bytes <= limits.log_bytes_max
                && offset_bytes + next.offset_index_bytes <= limits.index_bytes_max
                && time_bytes + next.time_index_bytes <= limits.index_bytes_max
                && (next.size_bytes == 0 || next_last - first.base_offset.0 <= i64::from(i32::MAX));
            if !fits {
                break;
            }
            log_bytes += next.size_bytes;
            offset_bytes += next.offset_index_bytes;
            time_bytes += next.time_index_bytes;
            end += 1;
        }
        groups.push(start..end);
        start = end;
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::config::DirtyRatio;

    const NOW: i64 = 1_000_000;

    fn segment(base: i64, size_bytes: u64, largest: i64) -> CleanableSegment {
        CleanableSegment {
            base_offset: Offset(base),
            size_bytes,
            largest_timestamp: TimestampMs(largest),
            first_batch_timestamp: Some(TimestampMs(largest - 10)),
            offset_index_bytes: 8,
            time_index_bytes: 12,
        }
    }

    /// Sealed segments 0, 100, 200, 300 of 1,000 bytes; active at 400.
    fn segments() -> Vec<CleanableSegment> {
        (0..4)
            .map(|i| segment(i * 100, 1_000, NOW - 1_000 + i * 100))
            .collect()
    }

    fn view(segments: &[CleanableSegment], checkpoint: Option<i64>) -> CleanerView<'_> {
        CleanerView {
            segments,
            active_base_offset: Offset(400),
            log_start_offset: Offset(0),
            log_end_offset: Offset(450),
            stable_offset: Offset(450),
            checkpoint: checkpoint.map(Offset),
            now_ms: NOW,
        }
    }

    struct Row {
        name: &'static str,
        checkpoint: Option<i64>,
        stable_offset: i64,
        min_lag_ms: i64,
        max_lag_ms: i64,
        /// (first dirty, first uncleanable, clean bytes, cleanable bytes, now, reset)
        expected: (i64, i64, u64, u64, bool, bool),
    }

    #[test]
    fn cleanable_ranges_follow_kafkas_manager() {
        let rows = [
            Row {
                name: "never cleaned: every sealed segment is dirty",
                checkpoint: None,
                stable_offset: 450,
                min_lag_ms: 0,
                max_lag_ms: i64::MAX,
                expected: (0, 400, 0, 4_000, false, false),
            },
            Row {
                name: "cleaned to 200: two clean, two dirty",
                checkpoint: Some(200),
                stable_offset: 450,
                min_lag_ms: 0,
                max_lag_ms: i64::MAX,
                expected: (200, 400, 2_000, 2_000, false, false),
            },
            Row {
                name: "the high watermark inside segment 200 stops before it",
                checkpoint: Some(100),
                stable_offset: 250,
                min_lag_ms: 0,
                max_lag_ms: i64::MAX,
                expected: (100, 200, 1_000, 1_000, false, false),
            },
            Row {
                name: "min.compaction.lag.ms keeps the young segments out",
                checkpoint: None,
                stable_offset: 450,
                // Segment 200's largest timestamp (NOW - 800) is within 900 ms.
                min_lag_ms: 900,
                max_lag_ms: i64::MAX,
                expected: (0, 200, 0, 2_000, false, false),
            },
            Row {
                name: "max.compaction.lag.ms forces a clean of old dirty data",
                checkpoint: Some(300),
                stable_offset: 450,
                min_lag_ms: 0,
                max_lag_ms: 500,
                expected: (300, 400, 3_000, 1_000, true, false),
            },
            Row {
                name: "a checkpoint past the log end is reset",
                checkpoint: Some(9_000),
                stable_offset: 450,
                min_lag_ms: 0,
                max_lag_ms: i64::MAX,
                expected: (0, 400, 0, 4_000, false, true),
            },
        ];
        let segments = segments();
        for row in rows {
            let mut input = view(&segments, row.checkpoint);
            input.stable_offset = Offset(row.stable_offset);
            let config = LogConfig {
                min_compaction_lag_ms: row.min_lag_ms,
                max_compaction_lag_ms: row.max_lag_ms,
                ..LogConfig::default()
            };
            let plan = log_to_clean(&input, &config);
            let got = (
                plan.first_dirty_offset.0,
                plan.first_uncleanable_offset.0,
                plan.clean_bytes,
                plan.cleanable_bytes,
                plan.need_compaction_now,
                plan.checkpoint_reset,
            );
            assert_eq!(got, row.expected, "{}", row.name);
        }
    }

    #[test]
    fn a_log_is_due_once_its_ratio_exceeds_the_minimum() {
        let segments = segments();
        let config = LogConfig::default();
        let half = log_to_clean(&view(&segments, Some(200)), &config);
        assert_eq!(half.cleanable_ratio(), 0.5);
        assert!(!half.is_due(&config), "Kafka wants the ratio above 0.5");
        let lower = LogConfig {
            min_cleanable_dirty_ratio: DirtyRatio::new(0.49).unwrap(),
            ..LogConfig::default()
        };
        assert!(half.is_due(&lower));
        let clean = log_to_clean(&view(&segments, Some(400)), &config);
        assert_eq!(clean.cleanable_bytes, 0);
        assert!(!clean.is_due(&lower));
        let empty = log_to_clean(&view(&[], None), &config);
        assert!(!empty.is_due(&lower));
    }

    #[test]
    fn groups_respect_size_index_and_offset_limits() {
        let limits = GroupLimits {
            log_bytes_max: 2_500,
            index_bytes_max: 1_000,
        };
        let segments = segments();
        assert_eq!(
            group_segments(&segments, limits, Offset(400)),
            vec![0..2, 2..4]
        );
        let mut small = segments.clone();
        small[1].size_bytes = 0;
        small[2].size_bytes = 100;
        small[3].size_bytes = 2_000;
        assert_eq!(
            group_segments(&small, limits, Offset(400)),
            vec![0..3, 3..4]
        );
        let mut full_index = segments.clone();
        full_index[1].time_index_bytes = 995;
        assert_eq!(
            group_segments(&full_index, limits, Offset(400)),
            vec![0..1, 1..2, 2..4]
        );
        let wide = [
            segment(0, 10, 0),
            segment(i64::from(i32::MAX), 10, 0),
            segment(i64::from(i32::MAX) + 10, 10, 0),
        ];
        assert_eq!(
            group_segments(&wide, limits, Offset(i64::from(i32::MAX) + 20)),
            vec![0..1, 1..3],
            "offsets past the 31-bit range start a new group"
        );
        assert!(group_segments(&[], limits, Offset(0)).is_empty());
    }
}
