//! What retention deletes (S7): whole segments from the oldest end, as Kafka's
//! `UnifiedLog.deleteOldSegments` decides it.
//!
//! Three rules run in order, each over the segments the previous ones left:
//! segments wholly below the log start offset (always); then, when the cleanup
//! policy deletes, the oldest segments while the log exceeds `retention.bytes`;
//! then segments whose largest timestamp is older than `retention.ms`. A segment
//! is only deletable when every offset in it is below the high watermark, so the
//! log start offset never passes it. Deleting every segment means the caller
//! rolls a fresh empty one first (an empty active segment is never deleted).

use crate::log::config::LogConfig;
use crate::types::{Offset, TimestampMs};

/// What retention needs to know about one segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SegmentSummary {
    pub base_offset: Offset,
    pub size_bytes: u64,
    /// The largest record timestamp in the segment, or the file's modification
    /// time when it has none (Kafka's `largestTimestamp`).
    pub largest_timestamp: TimestampMs,
}

/// The log as retention sees it, oldest segment first; the last is active.
#[derive(Clone, Copy, Debug)]
pub struct RetentionInput<'a> {
    pub segments: &'a [SegmentSummary],
    pub log_start_offset: Offset,
    pub log_end_offset: Offset,
    pub high_watermark: Offset,
    pub now_ms: i64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetentionReason {
    LogStartOffset,
    Size,
    Time,
}

/// The oldest `delete_segments` segments go; the log then starts at
/// `log_start_offset`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RetentionDecision {
    pub delete_segments: usize,
    /// The rule that deleted the most recent of them.
    pub reason: Option<RetentionReason>,
    /// True when every segment goes, so a new empty segment must be rolled first.
    pub roll_first: bool,
    pub log_start_offset: Offset,
}

pub fn decide(input: &RetentionInput<'_>, config: &LogConfig) -> RetentionDecision {
    let segments = input.segments;
    let mut deleted = 0usize;
    let mut reason = None;
    let upper_bound = |slot: usize| {
        segments
            .get(slot + 1)
            .map_or(input.log_end_offset, |next| next.base_offset)
    };
    let is_empty_active =
        |slot: usize| slot + 1 == segments.len() && segments[slot].size_bytes == 0;
    let deletable = |slot: usize| {
        slot < segments.len() && input.high_watermark >= upper_bound(slot) && !is_empty_active(slot)
    };
    let below_log_start = |slot: usize| {
        segments
            .get(slot + 1)
            .is_some_and(|next| next.base_offset <= input.log_start_offset)
    };

    while deletable(deleted) && below_log_start(deleted) {
        deleted += 1;
        reason = Some(RetentionReason::LogStartOffset);
    }
    if config.cleanup_policy.deletes() {
        if let Some(limit) = config.retention_bytes {
            let total: u64 = segments[deleted..]
                .iter()
                .map(|segment| segment.size_bytes)
                .sum();
            let mut excess = total.saturating_sub(limit);
            while excess > 0 && deletable(deleted) && excess >= segments[deleted].size_bytes {
                excess -= segments[deleted].size_bytes;
                deleted += 1;
                reason = Some(RetentionReason::Size);
            }
        }
        if let Some(retention_ms) = config.retention_ms {
            while deletable(deleted)
                && input
                    .now_ms
                    .saturating_sub(segments[deleted].largest_timestamp.0)
                    > retention_ms
            {
                deleted += 1;
                reason = Some(RetentionReason::Time);
            }
        }
    }
    let roll_first = deleted == segments.len() && deleted > 0;
    let new_start = if roll_first {
        input.log_end_offset
    } else {
        segments
            .get(deleted)
            .map_or(input.log_end_offset, |s| s.base_offset)
    };
    RetentionDecision {
        delete_segments: deleted,
        reason,
        roll_first,
        log_start_offset: input.log_start_offset.max(new_start),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn segments() -> Vec<SegmentSummary> {
        [
            (0, 100, 1_000),
            (10, 100, 2_000),
            (20, 100, 3_000),
            (30, 50, 4_000),
        ]
        .iter()
        .map(|(base, size, ts)| SegmentSummary {
            base_offset: Offset(*base),
            size_bytes: *size,
            largest_timestamp: TimestampMs(*ts),
        })
        .collect()
    }

    fn input(segments: &[SegmentSummary], now_ms: i64, high_watermark: i64) -> RetentionInput<'_> {
        RetentionInput {
            segments,
            log_start_offset: Offset(0),
            log_end_offset: Offset(35),
            high_watermark: Offset(high_watermark),
            now_ms,
        }
    }

    fn config(retention_ms: Option<i64>, retention_bytes: Option<u64>) -> LogConfig {
        LogConfig {
            retention_ms,
            retention_bytes,
            ..LogConfig::default()
        }
    }

    #[test]
    fn time_deletes_old_segments_only() {
        let segments = segments();
        let decision = decide(&input(&segments, 3_500, 35), &config(Some(1_000), None));
        assert_eq!(decision.delete_segments, 2);
        assert_eq!(decision.reason, Some(RetentionReason::Time));
        assert_eq!(decision.log_start_offset, Offset(20));
        assert!(!decision.roll_first);
    }

    #[test]
    fn size_deletes_until_under_the_limit() {
        let segments = segments();
        // 350 bytes against 200: deleting 100 + 100 leaves 150 (≤ 200), a third would overshoot.
        let decision = decide(&input(&segments, 0, 35), &config(None, Some(200)));
        assert_eq!(
            (decision.delete_segments, decision.reason),
            (1, Some(RetentionReason::Size))
        );
        let decision = decide(&input(&segments, 0, 35), &config(None, Some(150)));
        assert_eq!(decision.delete_segments, 2);
    }

    #[test]
    fn nothing_at_or_above_the_high_watermark_is_deleted() {
        let segments = segments();
        let decision = decide(&input(&segments, 1_000_000, 15), &config(Some(1), None));
        assert_eq!(
            decision.delete_segments, 1,
            "segment 10..20 reaches past the high watermark 15"
        );
    }

    #[test]
    fn everything_expired_rolls_first() {
        let segments = segments();
        let decision = decide(&input(&segments, 1_000_000, 35), &config(Some(1), None));
        assert_eq!(decision.delete_segments, 4);
        assert!(decision.roll_first);
        assert_eq!(decision.log_start_offset, Offset(35));
    }

    #[test]
    fn an_empty_active_segment_stays() {
        let mut segments = segments();
        segments[3] = SegmentSummary {
            base_offset: Offset(35),
            size_bytes: 0,
            largest_timestamp: TimestampMs::NONE,
        };
        let decision = decide(&input(&segments, 1_000_000, 35), &config(Some(1), None));
        assert_eq!(decision.delete_segments, 3);
        assert!(!decision.roll_first);
    }

    #[test]
    fn log_start_offset_deletes_segments_below_it_even_when_compacted() {
        let segments = segments();
        let mut input = input(&segments, 0, 35);
        input.log_start_offset = Offset(25);
        let compacted = LogConfig {
            cleanup_policy: crate::log::config::CleanupPolicy::Compact,
            ..LogConfig::default()
        };
        let decision = decide(&input, &compacted);
        assert_eq!(decision.delete_segments, 2);
        assert_eq!(decision.reason, Some(RetentionReason::LogStartOffset));
        assert_eq!(decision.log_start_offset, Offset(25));
    }
}
