//! When the active segment rolls (S4): Kafka's `LogSegment.shouldRoll`.
//!
//! A new batch rolls the segment first when it would push the segment past
//! `segment.bytes`, when the segment is older than `segment.ms` (minus jitter,
//! measured by record timestamps when it has any, else by creation time), when
//! either index is full, or when the batch's last offset no longer fits the
//! index's 31-bit relative offsets. An empty segment never rolls, so a batch
//! larger than `segment.bytes` gets a segment of its own.

use crate::log::config::LogConfig;
use crate::log::index::RELATIVE_OFFSET_MAX;
use crate::types::{Offset, TimestampMs};

/// What the roll rule needs to know about the active segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveSegmentState {
    pub base_offset: Offset,
    pub size_bytes: u64,
    /// Wall-clock time the segment was created (ms).
    pub created_ms: i64,
    /// `maxTimestamp` of the segment's first batch, Kafka's "rolling based
    /// timestamp"; `None` while the segment is empty.
    pub first_batch_max_timestamp: Option<TimestampMs>,
    pub offset_index_entries: u64,
    pub time_index_entries: u64,
}

/// The batch about to be appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IncomingBatch {
    pub size_bytes: u64,
    pub last_offset: Offset,
    pub max_timestamp: TimestampMs,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RollReason {
    SegmentBytes,
    SegmentMs,
    OffsetIndexFull,
    TimeIndexFull,
    RelativeOffsetOverflow,
}

/// Whether `incoming` must go to a new segment, and why.
pub fn roll_reason(
    segment: &ActiveSegmentState,
    incoming: &IncomingBatch,
    config: &LogConfig,
    now_ms: i64,
    jitter_ms: i64,
) -> Option<RollReason> {
    if segment.size_bytes == 0 {
        return None;
    }
    if segment.size_bytes.saturating_add(incoming.size_bytes) > config.segment_bytes {
        return Some(RollReason::SegmentBytes);
    }
    let waited_ms = match segment.first_batch_max_timestamp {
        Some(first) if first.0 >= 0 => incoming.max_timestamp.0.saturating_sub(first.0),
        _ => now_ms.saturating_sub(segment.created_ms),
    };
    if waited_ms > config.segment_ms.saturating_sub(jitter_ms) {
        return Some(RollReason::SegmentMs);
    }
    if segment.offset_index_entries >= config.offset_index_entries_max() {
        return Some(RollReason::OffsetIndexFull);
    }
    if segment.time_index_entries >= config.time_index_entries_max() {
        return Some(RollReason::TimeIndexFull);
    }
    if incoming.last_offset.0.saturating_sub(segment.base_offset.0) > RELATIVE_OFFSET_MAX {
        return Some(RollReason::RelativeOffsetOverflow);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segment() -> ActiveSegmentState {
        ActiveSegmentState {
            base_offset: Offset(1000),
            size_bytes: 900,
            created_ms: 10_000,
            first_batch_max_timestamp: Some(TimestampMs(50_000)),
            offset_index_entries: 3,
            time_index_entries: 3,
        }
    }

    fn batch(size_bytes: u64, last_offset: i64, max_timestamp: i64) -> IncomingBatch {
        IncomingBatch {
            size_bytes,
            last_offset: Offset(last_offset),
            max_timestamp: TimestampMs(max_timestamp),
        }
    }

    fn config() -> LogConfig {
        LogConfig {
            segment_bytes: 1000,
            segment_ms: 60_000,
            segment_index_bytes: 80,
            ..LogConfig::default()
        }
    }

    #[test]
    fn table() {
        let now = 20_000;
        let cases: Vec<(
            &str,
            ActiveSegmentState,
            IncomingBatch,
            i64,
            Option<RollReason>,
        )> = vec![
            ("fits", segment(), batch(100, 1010, 50_001), 0, None),
            (
                "one byte too many",
                segment(),
                batch(101, 1010, 50_001),
                0,
                Some(RollReason::SegmentBytes),
            ),
            (
                "empty never rolls",
                ActiveSegmentState {
                    size_bytes: 0,
                    ..segment()
                },
                batch(5000, 1010, 0),
                0,
                None,
            ),
            (
                "old by record time",
                segment(),
                batch(10, 1010, 110_001),
                0,
                Some(RollReason::SegmentMs),
            ),
            (
                "exactly segment.ms",
                segment(),
                batch(10, 1010, 110_000),
                0,
                None,
            ),
            (
                "jitter shortens",
                segment(),
                batch(10, 1010, 100_001),
                10_000,
                Some(RollReason::SegmentMs),
            ),
            (
                "no timestamps: creation time",
                ActiveSegmentState {
                    first_batch_max_timestamp: Some(TimestampMs::NONE),
                    created_ms: now - 60_001,
                    ..segment()
                },
                batch(10, 1010, -1),
                0,
                Some(RollReason::SegmentMs),
            ),
            (
                "offset index full",
                ActiveSegmentState {
                    offset_index_entries: 10,
                    ..segment()
                },
                batch(10, 1010, 50_001),
                0,
                Some(RollReason::OffsetIndexFull),
            ),
            (
                "time index full",
                ActiveSegmentState {
                    time_index_entries: 6,
                    ..segment()
                },
                batch(10, 1010, 50_001),
                0,
                Some(RollReason::TimeIndexFull),
            ),
            (
                "relative offset fits",
                segment(),
                batch(10, 1000 + i64::from(i32::MAX), 50_001),
                0,
                None,
            ),
            (
                "relative offset overflows",
                segment(),
                batch(10, 1001 + i64::from(i32::MAX), 50_001),
                0,
                Some(RollReason::RelativeOffsetOverflow),
            ),
        ];
        for (name, segment, incoming, jitter, expected) in cases {
            assert_eq!(
                roll_reason(&segment, &incoming, &config(), now, jitter),
                expected,
                "{name}"
            );
        }
    }
}
