//! How far a partition log's appends have got: placed (the log end), written
//! to their file, on stable storage (durable), and replicated (the high
//! watermark), and when the log must sync next under its flush policy.
//!
//! Sans-IO, in the shape of the crate's other state machines: the runtime
//! tells it what it appended and how many bytes of each segment's `.log`
//! its writes and syncs have reached, with the time as a value; it answers
//! which offsets moved and what the syncer should do. It owns the log's one
//! high watermark, which only replication moves
//! ([`crate::replica::replication::PartitionReplication`]).
//!
//! The replica simulator (`replica::sim`) drives this same core, so the
//! rule "an offset counts for replication once the flush policy says it is
//! held" is checked against crashes there.

use std::collections::VecDeque;

use crate::log::config::FlushPolicy;
use crate::types::Offset;

/// Marks of written, unsynced appends kept apart before merging: a policy
/// that rarely syncs would otherwise keep one per append.
pub const WRITTEN_MARKS_MAX: usize = 64;

/// Where one append ended: its offsets are written (durable) once its
/// segment's written (synced) bytes reach `end_position`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct AppendMark {
    segment_base: Offset,
    end_position: u64,
    next_offset: Offset,
    records: u64,
    appended_at_ms: u64,
}

/// How many bytes of a segment's `.log` are written and synced, each a
/// prefix with no gap.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SegmentBytes {
    pub written: u64,
    pub synced: u64,
}

/// The active segment as the syncer sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveSegment {
    pub base_offset: Offset,
    pub bytes: SegmentBytes,
    /// Rolled: its seal syncs it, not the syncer.
    pub sealing: bool,
}

/// Whether the syncer keeps going.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncerState {
    Running,
    /// The log is closing or went offline: the syncer ends.
    Stopping,
}

/// The syncer's next move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SyncStep {
    /// Sync the segment's `.log`; the sync covers `written` bytes.
    Sync {
        segment_base: Offset,
        written: u64,
    },
    /// Nothing is due before this time (ms, the caller's clock).
    WaitUntil(u64),
    /// Nothing is due until something is appended or written.
    Wait,
    Exit,
}

/// Which offsets a call moved.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Moved {
    pub written: bool,
    pub durable: bool,
}

/// One partition log's progress. Lives on the partition's shard.
#[derive(Clone, Debug)]
pub struct LogProgress {
    flush: FlushPolicy,
    log_end_offset: Offset,
    /// Every offset below is written to its file.
    written_offset: Offset,
    /// Every offset below is on stable storage.
    durable_offset: Offset,
    /// What consumers may read up to; replication moves it.
    high_watermark: Offset,
    marks: VecDeque<AppendMark>,
    /// How many marks at the front are already written.
    written_marks: usize,
    /// Records written and not yet synced: what `flush.messages` counts.
    /// (Appended records not yet written do not count: a sync covers only
    /// what is written, and one started for them would leave them behind,
    /// below the limit again, unsynced until more arrive.)
    written_unsynced_records: u64,
}

impl LogProgress {
    /// A log opened (recovered) with everything below `log_end_offset`
    /// durable; its high watermark starts at `high_watermark` (Kafka starts
    /// a log's at its log start until the partition sets it).
    pub fn open(flush: FlushPolicy, log_end_offset: Offset, high_watermark: Offset) -> LogProgress {
        LogProgress {
            flush,
            log_end_offset,
            written_offset: log_end_offset,
            durable_offset: log_end_offset,
            high_watermark: high_watermark.min(log_end_offset),
            marks: VecDeque::new(),
            written_marks: 0,
            written_unsynced_records: 0,
        }
    }

    pub fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }

    pub fn written_offset(&self) -> Offset {
        self.written_offset
    }

    pub fn durable_offset(&self) -> Offset {
        self.durable_offset
    }

    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    pub fn flush(&self) -> FlushPolicy {
        self.flush
    }

    /// The topic's flush settings changed.
    pub fn set_flush(&mut self, flush: FlushPolicy) {
        self.flush = flush;
    }

    /// What this replica counts as held, for replication (DESIGN
    /// "Durability and visibility"): every durable offset, or under
    /// Kafka's `flush.*` settings every written one (a topic that set them
    /// accepted losing unsynced data to a machine crash, not to a process
    /// crash).
    pub fn counted_offset(&self) -> Offset {
        match self.flush {
            FlushPolicy::Continuous => self.durable_offset,
            FlushPolicy::Interval { .. } => self.written_offset,
        }
    }

    /// `records` records were appended to the segment at `segment_base`,
    /// whose `.log` now ends at `end_position`; the log now ends at
    /// `log_end_offset`.
    pub fn appended(
        &mut self,
        segment_base: Offset,
        end_position: u64,
        log_end_offset: Offset,
        records: u64,
        now_ms: u64,
    ) {
        assert!(
            log_end_offset >= self.log_end_offset,
            "an append never moves the log end back ({} to {})",
            self.log_end_offset.0,
            log_end_offset.0
        );
        debug_assert!(
            self.marks.back().is_none_or(
                |last| last.segment_base < segment_base || last.end_position <= end_position
            ),
            "marks follow the log"
        );
        self.marks.push_back(AppendMark {
            segment_base,
            end_position,
            next_offset: log_end_offset,
            records,
            appended_at_ms: now_ms,
        });
        self.log_end_offset = log_end_offset;
    }

    /// Moves the written and durable offsets over every append whose bytes
    /// `bytes_of` now reports written / synced (a segment it does not know
    /// was removed whole, and holds nothing to wait for).
    pub fn advance(&mut self, bytes_of: impl Fn(Offset) -> Option<SegmentBytes>) -> Moved {
        let before = (self.written_offset, self.durable_offset);
        while let Some(mark) = self.marks.get(self.written_marks) {
            let written =
                bytes_of(mark.segment_base).is_none_or(|bytes| bytes.written >= mark.end_position);
            if !written {
                break;
            }
            self.written_offset = mark.next_offset;
            self.written_unsynced_records += mark.records;
            self.written_marks += 1;
        }
        while self.written_marks > 0 {
            let mark = self.marks.front().expect("written marks are marks");
            let synced =
                bytes_of(mark.segment_base).is_none_or(|bytes| bytes.synced >= mark.end_position);
            if !synced {
                break;
            }
            self.durable_offset = mark.next_offset;
            self.written_unsynced_records -= mark.records;
            self.marks.pop_front();
            self.written_marks -= 1;
        }
        self.coalesce_written_marks();
        debug_assert!(self.durable_offset <= self.written_offset);
        debug_assert!(self.written_offset <= self.log_end_offset);
        Moved {
            written: self.written_offset != before.0,
            durable: self.durable_offset != before.1,
        }
    }

    /// Bounds the marks of written, not yet synced appends: the oldest two
    /// of the same segment merge. A sync covers every written byte, so a
    /// merged mark only becomes durable a little later, never wrongly.
    fn coalesce_written_marks(&mut self) {
        while self.written_marks > WRITTEN_MARKS_MAX
            && self.marks[0].segment_base == self.marks[1].segment_base
        {
            let oldest = self.marks.pop_front().expect("more than the bound");
            let next = &mut self.marks[0];
            next.records += oldest.records;
            next.appended_at_ms = oldest.appended_at_ms;
            self.written_marks -= 1;
        }
    }

    /// What the syncer should do now, under the flush policy. Anyone waiting
    /// for durability (`durability_awaited`) gets a sync whatever the policy.
    pub fn next_sync(
        &self,
        active: ActiveSegment,
        syncer: SyncerState,
        durability_awaited: bool,
        now_ms: u64,
    ) -> SyncStep {
        if syncer == SyncerState::Stopping {
            return SyncStep::Exit;
        }
        if active.sealing || active.bytes.written <= active.bytes.synced {
            return SyncStep::Wait;
        }
        let sync = SyncStep::Sync {
            segment_base: active.base_offset,
            written: active.bytes.written,
        };
        match self.flush {
            FlushPolicy::Continuous => sync,
            _ if durability_awaited => sync,
            FlushPolicy::Interval { messages, ms } => {
                if messages.is_some_and(|limit| self.written_unsynced_records >= limit) {
                    return sync;
                }
                let Some(ms) = ms else {
                    return SyncStep::Wait;
                };
                let oldest = self
                    .marks
                    .front()
                    .map_or(now_ms, |mark| mark.appended_at_ms);
                let due = oldest.saturating_add(ms);
                if due <= now_ms {
                    sync
                } else {
                    SyncStep::WaitUntil(due)
                }
            }
        }
    }

    /// Replication moved the high watermark; never past what this log
    /// holds. Whether it moved.
    pub fn set_high_watermark(&mut self, high_watermark: Offset) -> bool {
        let high_watermark = high_watermark.min(self.log_end_offset);
        if high_watermark == self.high_watermark {
            return false;
        }
        self.high_watermark = high_watermark;
        true
    }

    /// If the active segment (at `segment_base`) has appends not yet written
    /// past `position`, the offset after the first of them: what a producer
    /// holding back a write backlog waits for.
    pub fn first_unwritten_past(&self, segment_base: Offset, position: u64) -> Option<Offset> {
        self.marks
            .iter()
            .skip(self.written_marks)
            .find(|mark| mark.segment_base == segment_base && mark.end_position >= position)
            .map(|mark| mark.next_offset)
    }

    pub fn heap_bytes(&self) -> usize {
        self.marks.capacity() * size_of::<AppendMark>()
    }
}

#[cfg(test)]
mod tests;
