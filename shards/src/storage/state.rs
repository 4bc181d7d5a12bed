//! A partition log's state and every synchronous step on it: placing appends,
//! choosing the writer's and syncer's next job, and turning completed IO into
//! written and durable offsets.
//!
//! Lives on the partition's shard in a `RefCell`; each method runs to
//! completion without awaiting, so no borrow is ever held across an await.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use brook_engine::log::batch::{
    BATCH_HEADER_BYTES, BatchView, set_base_offset, set_log_append_time, set_partition_leader_epoch,
};
use brook_engine::log::config::{LogConfig, MessageTimestampType};
use brook_engine::log::epoch_cache::LeaderEpochCache;
use brook_engine::log::progress::{
    ActiveSegment, LogProgress, SegmentBytes, SyncStep, SyncerState,
};
use brook_engine::log::roll::{IncomingBatch, RollReason, roll_reason};
use brook_engine::types::{LeaderEpoch, Offset, TimestampMs};
use futures::channel::oneshot;
use glommio::io::DmaFile;

use crate::runtime::clock_ms;
use crate::storage::appender::{Reservation, Write};
use crate::storage::error::StorageError;
use crate::storage::files::FileAccess;
use crate::storage::log_dirs::LogDirs;
use crate::storage::segment::{Segment, SegmentFile};
use crate::storage::waiters::{ShardNews, Waiters};

/// What an append did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AppendInfo {
    pub base_offset: Offset,
    pub last_offset: Offset,
    /// The log end offset after the append.
    pub log_end_offset: Offset,
    /// The broker's timestamp, when the topic uses LogAppendTime.
    pub log_append_time: Option<TimestampMs>,
    /// A producer's retry of a batch already in the log: nothing was
    /// appended; the offsets are the original's, and `log_end_offset` is
    /// the offset after it (what to wait for before acknowledging).
    pub duplicate: bool,
}

impl AppendInfo {
    /// The answer to a retried batch. Kafka reports the original batch's
    /// max timestamp as its append time, whatever the topic's timestamp type.
    pub fn duplicate(
        first_offset: Offset,
        last_offset: Offset,
        timestamp: TimestampMs,
    ) -> AppendInfo {
        AppendInfo {
            base_offset: first_offset,
            last_offset,
            log_end_offset: last_offset.next(),
            log_append_time: Some(timestamp),
            duplicate: true,
        }
    }
}

/// Counters of a log's work since it was opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogStats {
    pub appends: u64,
    pub write_jobs: u64,
    pub syncs: u64,
    pub rolls: u64,
}

/// The writer's next job.
#[derive(Debug)]
pub(crate) enum WriteJob {
    /// Write one chunk of one of a segment's files.
    Write {
        segment_base: Offset,
        file: SegmentFile,
        write: Write,
    },
    /// Grow the reserve ahead of the active segment's `.log`.
    Reserve {
        segment_base: Offset,
        reservation: Reservation,
    },
    /// Trim a rolled segment's files to size and sync them.
    Seal {
        segment_base: Offset,
        /// `.log`, offset index, time index: how to reach each, its path
        /// and its length.
        files: [(FileAccess, PathBuf, u64); 3],
    },
}

/// The syncer's next move.
#[derive(Debug)]
pub(crate) enum SyncDecision {
    Sync {
        segment_base: Offset,
        file: Rc<DmaFile>,
        path: PathBuf,
        written: u64,
    },
    /// Nothing is due before this time ([`crate::runtime::clock_ms`]).
    WaitUntil(u64),
    Wait,
    Exit,
}

#[derive(Debug)]
pub(crate) struct LogState {
    pub dir: PathBuf,
    pub config: LogConfig,
    /// Sorted by base offset; the last one is active.
    pub segments: Vec<Segment>,
    pub log_start_offset: Offset,
    /// The log end, written, durable offsets and the high watermark, and
    /// the flush policy's decisions (the sans-IO core the replica
    /// simulator drives too).
    progress: LogProgress,
    written_waiters: Waiters,
    durable_waiters: Waiters,
    high_watermark_waiters: Waiters,
    /// The shard's fetches of many partitions, told when the high watermark
    /// or (for followers' fetches) the written offset moves (set once the
    /// store holds the log).
    pub news: Option<Rc<ShardNews>>,
    /// The log directory this log is in, failed by the IO error that takes
    /// the log offline (set once the store holds the log).
    pub log_dir: Option<(std::sync::Arc<LogDirs>, usize)>,
    pub epochs: LeaderEpochCache,
    failure: Option<StorageError>,
    pub closing: bool,
    pub stats: LogStats,
    last_append: Option<Instant>,
    /// Moves whenever what a read below the high watermark answers may
    /// change other than by the high watermark moving up: the log start
    /// moving, the log going offline or closing (a truncation closes it). A
    /// read prepared on another shard holds it ([`ReadVersion`]).
    read_version: Arc<AtomicU64>,
}

/// A log's read version as it was when a read was made: the read still
/// answers as the log would while [`ReadVersion::is_current`]. Shared with
/// other shards (the only part of a log that is).
#[derive(Clone, Debug)]
pub struct ReadVersion {
    version: Arc<AtomicU64>,
    at: u64,
}

impl ReadVersion {
    pub fn is_current(&self) -> bool {
        self.version.load(Ordering::Acquire) == self.at
    }
}

impl LogState {
    pub fn new(
        dir: PathBuf,
        config: LogConfig,
        segments: Vec<Segment>,
        log_start_offset: Offset,
        epochs: LeaderEpochCache,
    ) -> LogState {
        let log_end_offset = segments
            .last()
            .expect("a log has an active segment")
            .next_offset;
        // Until replication sets it, the high watermark is the log start,
        // as Kafka's is.
        let progress = LogProgress::open(config.flush, log_end_offset, log_start_offset);
        LogState {
            dir,
            config,
            segments,
            log_start_offset,
            progress,
            written_waiters: Waiters::default(),
            durable_waiters: Waiters::default(),
            high_watermark_waiters: Waiters::default(),
            news: None,
            log_dir: None,
            epochs,
            failure: None,
            closing: false,
            stats: LogStats::default(),
            last_append: None,
            read_version: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The read version now, for a read about to be made.
    pub fn read_version(&self) -> ReadVersion {
        ReadVersion {
            version: self.read_version.clone(),
            at: self.read_version.load(Ordering::Acquire),
        }
    }

    /// Tells reads prepared so far that they may no longer answer as the
    /// log would.
    pub fn invalidate_reads(&self) {
        self.read_version.fetch_add(1, Ordering::AcqRel);
    }

    /// Moves the log start offset up to `start` (never down).
    pub fn raise_log_start(&mut self, start: Offset) {
        if start > self.log_start_offset {
            self.log_start_offset = start;
            self.epochs.truncate_from_start(start);
            self.invalidate_reads();
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn active(&self) -> &Segment {
        self.segments.last().expect("a log has an active segment")
    }

    fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .last_mut()
            .expect("a log has an active segment")
    }

    pub fn segment_slot(&self, base_offset: Offset) -> Option<usize> {
        self.segments
            .binary_search_by_key(&base_offset, |segment| segment.base_offset)
            .ok()
    }

    /// Fails if the log can take no more appends or reads.
    pub fn check_usable(&self) -> Result<(), StorageError> {
        if let Some(failure) = &self.failure {
            return Err(failure.clone());
        }
        if self.closing {
            return Err(StorageError::Closed {
                path: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// Why the active segment must roll before `incoming`, if it must.
    pub fn roll_needed(&self, incoming: &IncomingBatch, now_ms: i64) -> Option<RollReason> {
        let state = self.active().roll_state()?;
        roll_reason(&state, incoming, &self.config, now_ms, 0)
    }

    /// Seals the active segment and makes `segment` the new active one.
    pub fn push_segment(&mut self, segment: Segment) {
        debug_assert_eq!(segment.base_offset, self.log_end_offset());
        self.active_mut().begin_sealing();
        self.segments.push(segment);
        self.stats.rolls += 1;
    }

    /// If more than `max_bytes` appended to the active segment are not yet
    /// written, the offset to wait for until at most half that many remain.
    pub fn backlog_target(&self, max_bytes: u64) -> Option<Offset> {
        let active = self.active();
        let log = &active.active()?.log;
        if log.unwritten() <= max_bytes {
            return None;
        }
        let keep_from = log.len() - max_bytes / 2;
        self.progress
            .first_unwritten_past(active.base_offset, keep_from)
    }

    pub fn last_append(&self) -> Option<Instant> {
        self.last_append
    }

    /// Drops the tail cache if nothing was appended since `since`.
    pub fn release_idle_memory(&mut self, since: Instant) {
        if self.last_append.is_none_or(|last| last < since) {
            self.active_mut().release_cache();
        }
    }

    /// Places validated `batches` at the log end: rewrites each header's base
    /// offset and leader epoch (and timestamp, for LogAppendTime) in a copy,
    /// and appends header and records to the active segment.
    pub fn append_batches(
        &mut self,
        batches: &[BatchView<'_>],
        epoch: LeaderEpoch,
        now_ms: i64,
    ) -> AppendInfo {
        let base_offset = self.log_end_offset();
        let mut end = base_offset;
        let log_append_time = (self.config.message_timestamp_type
            == MessageTimestampType::LogAppendTime)
            .then_some(TimestampMs(now_ms));
        let mut records = 0u64;
        for batch in batches {
            let placed_at = end;
            let bytes = batch.as_bytes();
            let mut header = [0u8; BATCH_HEADER_BYTES];
            header.copy_from_slice(&bytes[..BATCH_HEADER_BYTES]);
            let rest = &bytes[BATCH_HEADER_BYTES..];
            set_base_offset(&mut header, placed_at).expect("a full header");
            set_partition_leader_epoch(&mut header, epoch).expect("a full header");
            if let Some(now) = log_append_time {
                set_log_append_time(&mut header, rest, now).expect("a full header");
            }
            let last_offset = Offset(placed_at.0 + i64::from(batch.last_offset_delta()));
            let max_timestamp = log_append_time.unwrap_or(batch.max_timestamp());
            self.active_mut()
                .append_batch(&header, rest, last_offset, max_timestamp);
            end = last_offset.next();
            records += batch.records_count() as u64;
        }
        self.mark_append(base_offset, end, records, log_append_time)
    }

    /// Places a follower's `batches` as the leader wrote them: offsets,
    /// leader epochs and timestamps are kept (their placement was checked
    /// by the caller). The log end moves past the last one, over any gap a
    /// compacted leader log has.
    pub fn append_replicated(&mut self, batches: &[BatchView<'_>]) -> AppendInfo {
        let base_offset = batches
            .first()
            .map_or(self.log_end_offset(), BatchView::base_offset);
        let mut end = self.log_end_offset();
        let mut records = 0u64;
        for batch in batches {
            let bytes = batch.as_bytes();
            let mut header = [0u8; BATCH_HEADER_BYTES];
            header.copy_from_slice(&bytes[..BATCH_HEADER_BYTES]);
            let last_offset = batch.last_offset();
            self.active_mut().append_batch(
                &header,
                &bytes[BATCH_HEADER_BYTES..],
                last_offset,
                batch.max_timestamp(),
            );
            end = last_offset.next();
            records += batch.records_count() as u64;
        }
        self.mark_append(base_offset, end, records, None)
    }

    /// The bookkeeping after an append: a mark for the writer and syncer
    /// to turn into written and durable offsets.
    fn mark_append(
        &mut self,
        base_offset: Offset,
        log_end_offset: Offset,
        records: u64,
        log_append_time: Option<TimestampMs>,
    ) -> AppendInfo {
        let active = self.active();
        let (segment_base, end_position) = (active.base_offset, active.log_bytes);
        self.progress.appended(
            segment_base,
            end_position,
            log_end_offset,
            records,
            clock_ms(),
        );
        self.last_append = Some(Instant::now());
        self.stats.appends += 1;
        AppendInfo {
            base_offset,
            last_offset: Offset(log_end_offset.0 - 1),
            log_end_offset,
            log_append_time,
            duplicate: false,
        }
    }

    /// A receiver completed once every offset below `offset` is written, or
    /// `None` if that is already so.
    pub fn wait_written(
        &mut self,
        offset: Offset,
    ) -> Result<Option<oneshot::Receiver<Result<(), StorageError>>>, StorageError> {
        self.check_reachable(offset)?;
        Ok((offset > self.written_offset()).then(|| self.written_waiters.add(offset)))
    }

    /// As [`LogState::wait_written`], for durability.
    pub fn wait_durable(
        &mut self,
        offset: Offset,
    ) -> Result<Option<oneshot::Receiver<Result<(), StorageError>>>, StorageError> {
        self.check_reachable(offset)?;
        Ok((offset > self.durable_offset()).then(|| self.durable_waiters.add(offset)))
    }

    /// Fails a wait that could never end: the log is offline, or closing and
    /// the offset is past the last append (a long poll for new data).
    fn check_reachable(&self, offset: Offset) -> Result<(), StorageError> {
        if let Some(failure) = &self.failure {
            return Err(failure.clone());
        }
        if self.closing && offset > self.log_end_offset() {
            return Err(StorageError::Closed {
                path: self.dir.clone(),
            });
        }
        Ok(())
    }

    /// Fails every remaining waiter once a close has ended: nothing more
    /// becomes written or durable, so they would wait forever.
    pub fn fail_waiters_on_close(&mut self) {
        let closed = StorageError::Closed {
            path: self.dir.clone(),
        };
        self.written_waiters.fail_all(&closed);
        self.durable_waiters.fail_all(&closed);
        self.high_watermark_waiters.fail_all(&closed);
    }

    /// The writer's next job, if one may start now: growing the active
    /// `.log`'s reserve (not while closing), writes of every open segment
    /// (oldest first), then the trim-and-sync of a rolled segment once all
    /// its writes and its reservation completed.
    pub fn next_write_job(&mut self) -> Option<WriteJob> {
        let closing = self.closing;
        let limit = self.config.segment_bytes;
        let active = self
            .segments
            .last_mut()
            .expect("a log has an active segment");
        let segment_base = active.base_offset;
        if let Some(reservation) = active
            .active_mut()
            .filter(|active| !closing && !active.sealing)
            .and_then(|active| active.log.next_reservation(limit))
        {
            return Some(WriteJob::Reserve {
                segment_base,
                reservation,
            });
        }
        let first_open = self
            .segments
            .iter()
            .position(|segment| !segment.is_sealed())?;
        for segment in &mut self.segments[first_open..] {
            let segment_base = segment.base_offset;
            if let Some((file, write)) = segment.next_write(closing) {
                return Some(WriteJob::Write {
                    segment_base,
                    file,
                    write,
                });
            }
            let Some(active) = segment.active_mut() else {
                continue;
            };
            if active.sealing
                && !active.seal_started
                && active.is_written()
                && !active.log.is_reserving()
            {
                active.seal_started = true;
                let files =
                    [&active.log, &active.offset_index, &active.time_index].map(|appender| {
                        (
                            appender.file().clone(),
                            appender.path().to_owned(),
                            appender.len(),
                        )
                    });
                return Some(WriteJob::Seal {
                    segment_base,
                    files,
                });
            }
        }
        None
    }

    pub fn complete_write(&mut self, segment_base: Offset, file: SegmentFile, end: u64) {
        self.stats.write_jobs += 1;
        if let Some(slot) = self.segment_slot(segment_base) {
            self.segments[slot].complete_write(file, end);
        }
        self.advance();
    }

    /// The reservation of `size` bytes for the `.log` at `segment_base` ended.
    pub fn complete_reservation(&mut self, segment_base: Offset, size: u64, succeeded: bool) {
        if let Some(active) = self
            .segment_slot(segment_base)
            .and_then(|slot| self.segments[slot].active_mut())
        {
            active.log.complete_reservation(size, succeeded);
        }
    }

    /// The rolled segment at `segment_base` was trimmed and synced;
    /// `index_files` are its offset and time index, open.
    pub fn complete_seal(&mut self, segment_base: Offset, index_files: [Rc<DmaFile>; 2]) {
        if let Some(slot) = self.segment_slot(segment_base) {
            self.segments[slot].finish_sealing(index_files);
        }
        self.advance();
    }

    /// What the syncer should do now, under the flush policy
    /// ([`LogProgress::next_sync`]).
    pub fn sync_decision(&self, now_ms: u64) -> SyncDecision {
        let segment = self.active();
        let files = segment.active();
        let active = ActiveSegment {
            base_offset: segment.base_offset,
            bytes: files.map_or_else(SegmentBytes::default, |files| SegmentBytes {
                written: files.log.written(),
                synced: files.synced_bytes,
            }),
            sealing: files.is_none_or(|files| files.sealing),
        };
        let syncer = if self.closing || self.failure.is_some() {
            SyncerState::Stopping
        } else {
            SyncerState::Running
        };
        let awaited = !self.durable_waiters.is_empty();
        match self.progress.next_sync(active, syncer, awaited, now_ms) {
            SyncStep::Sync {
                segment_base,
                written,
            } => SyncDecision::Sync {
                segment_base,
                file: segment.log_file.clone(),
                path: files
                    .expect("a segment with bytes to sync has its files")
                    .log
                    .path()
                    .to_owned(),
                written,
            },
            SyncStep::WaitUntil(due_ms) => SyncDecision::WaitUntil(due_ms),
            SyncStep::Wait => SyncDecision::Wait,
            SyncStep::Exit => SyncDecision::Exit,
        }
    }

    pub fn complete_sync(&mut self, segment_base: Offset, synced: u64) {
        self.stats.syncs += 1;
        if let Some(active) = self
            .segment_slot(segment_base)
            .and_then(|slot| self.segments[slot].active_mut())
        {
            active.synced_bytes = active.synced_bytes.max(synced);
        }
        self.advance();
    }

    /// Moves the written and durable offsets over every append whose bytes
    /// are now written / synced, and releases their waiters.
    fn advance(&mut self) {
        let segments = &self.segments;
        let moved = self.progress.advance(|base| {
            let slot = segments
                .binary_search_by_key(&base, |segment| segment.base_offset)
                .ok()?;
            Some(SegmentBytes {
                written: segments[slot].written_bytes(),
                synced: segments[slot].synced_bytes(),
            })
        });
        self.written_waiters.release(self.written_offset());
        self.durable_waiters.release(self.durable_offset());
        // Followers fetch what is written, not what is below the HW.
        if moved.written {
            self.ring_news();
        }
    }

    pub fn log_end_offset(&self) -> Offset {
        self.progress.log_end_offset()
    }

    /// Every offset below is written to its file.
    pub fn written_offset(&self) -> Offset {
        self.progress.written_offset()
    }

    /// Every offset below is on stable storage.
    pub fn durable_offset(&self) -> Offset {
        self.progress.durable_offset()
    }

    /// What consumers may read up to; replication sets it.
    pub fn high_watermark(&self) -> Offset {
        self.progress.high_watermark()
    }

    /// What this replica counts as held, for replication
    /// ([`LogProgress::counted_offset`]).
    pub fn counted_offset(&self) -> Offset {
        self.progress.counted_offset()
    }

    /// The topic's configs changed.
    pub fn set_config(&mut self, config: LogConfig) {
        self.progress.set_flush(config.flush);
        self.config = config;
    }

    /// Replication moved the high watermark (never past what this log
    /// holds).
    pub fn set_high_watermark(&mut self, high_watermark: Offset) {
        if self.progress.set_high_watermark(high_watermark) {
            self.high_watermark_waiters
                .release(self.progress.high_watermark());
            self.ring_news();
        }
    }

    /// A waiter for the high watermark to reach `offset`; `None` if it has.
    pub fn wait_high_watermark(
        &mut self,
        offset: Offset,
    ) -> Result<Option<oneshot::Receiver<Result<(), StorageError>>>, StorageError> {
        self.check_usable()?;
        if self.high_watermark() >= offset {
            return Ok(None);
        }
        Ok(Some(self.high_watermark_waiters.add(offset)))
    }

    fn ring_news(&self) {
        if let Some(news) = &self.news {
            news.ring();
        }
    }

    /// Takes the log offline after an IO error: every waiter and every later
    /// call fails with the cause. An IO error fails its log directory too.
    pub fn fail(&mut self, error: &StorageError) {
        if let Some((dirs, index)) = &self.log_dir {
            dirs.fail_on(*index, error);
        }
        let failure = StorageError::Offline {
            path: self.dir.clone(),
            reason: error.to_string(),
        };
        self.written_waiters.fail_all(&failure);
        self.durable_waiters.fail_all(&failure);
        self.high_watermark_waiters.fail_all(&failure);
        self.failure = Some(failure);
        self.invalidate_reads();
        self.ring_news();
    }

    pub fn failure(&self) -> Option<&StorageError> {
        self.failure.as_ref()
    }

    /// The offset below which everything is durable *and* every segment is
    /// sealed with synced indexes: recovery need not scan below it.
    pub fn recovery_point(&self) -> Offset {
        let unsealed = self
            .segments
            .iter()
            .find(|segment| segment.is_sealing())
            .map(|segment| segment.base_offset);
        let durable = self.durable_offset();
        unsealed.map_or(durable, |base| base.min(durable))
    }

    pub fn heap_bytes(&self) -> usize {
        size_of::<LogState>()
            + self.dir.capacity()
            + self.segments.capacity() * size_of::<Segment>()
            + self
                .segments
                .iter()
                .map(|segment| segment.heap_bytes() - size_of::<Segment>())
                .sum::<usize>()
            + self.progress.heap_bytes()
    }
}
