//! One cleaning pass over a compacted partition log: the IO around
//! [`brook_engine::log::compaction`]'s decisions.
//!
//! A pass reads the sealed segments twice, never holding the append lock:
//! first from the log's start to the first uncleanable offset, mapping the
//! keys of the dirty part (and noting every producer's last batch) until the
//! offset map fills; then, group by group, it rewrites the segments before
//! the map's end into cleaned segments and swaps each in (see
//! [`crate::storage::cleaned_segment`]). Appends and reads go on meanwhile.
//! The pass ends where the map ended: that offset is the log's new cleaner
//! checkpoint.

use std::ops::Range;
use std::path::PathBuf;
use std::rc::Rc;

use brook_engine::log::batch::{BATCH_LENGTH_MIN, BatchView, LOG_OVERHEAD_BYTES};
use brook_engine::log::compaction::offset_map::{
    MapStep, OffsetMap, ProducerLastBatches, map_batch,
};
use brook_engine::log::compaction::plan::{
    CleanableSegment, CleanerView, GroupLimits, LogToClean, group_segments, log_to_clean,
};
use brook_engine::log::compaction::rewrite::{BatchFate, CleaningRound, clean_batch};
use brook_engine::log::config::LogConfig;
use brook_engine::log::index::{IndexEntry, OffsetIndexEntry, TimeIndexEntry};
use brook_engine::types::Offset;
use glommio::io::{DmaFile, ReadResult};

use crate::storage::cleaned_segment::{
    CleanedSegment, CleanedSegmentWriter, ReplacedSegment, discard_cleaned,
};
use crate::storage::error::StorageError;
use crate::storage::files::read_exact;
use crate::storage::partition_log::PartitionLog;
use crate::storage::segment::SegmentState;

/// Bytes read at once while walking a segment's batches.
const READ_WINDOW_BYTES: u64 = 1 << 20;
/// A batch longer than this is taken for a damaged length field (as
/// recovery does): no producer batch comes near it.
const CLEANER_BATCH_BYTES_MAX: u64 = 256 << 20;

/// What a pass did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanOutcome {
    /// The log's new cleaner checkpoint: the first offset the pass did not
    /// clean (its offset map ended there).
    pub end_offset: Offset,
    /// Every group was swapped in; false if the pass stopped early (the log
    /// closed, or retention changed its segments).
    pub completed: bool,
    pub segments_before: usize,
    pub segments_after: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
}

/// A sealed segment as a pass reads it, copied out of the log's state.
#[derive(Clone, Debug)]
struct SealedSource {
    base_offset: Offset,
    log_bytes: u64,
    file: Rc<DmaFile>,
    path: PathBuf,
    summary: CleanableSegment,
}

/// The log as a pass found it.
struct Snapshot {
    sealed: Vec<SealedSource>,
    active_base_offset: Offset,
    log_start_offset: Offset,
    log_end_offset: Offset,
    config: LogConfig,
}

impl PartitionLog {
    /// How dirty the log is and what a pass would clean now, or `None` if
    /// its cleanup policy does not compact. `checkpoint` is where the last
    /// pass ended.
    pub async fn cleanable(
        &self,
        checkpoint: Option<Offset>,
        now_ms: i64,
    ) -> Result<Option<LogToClean>, StorageError> {
        let Some(mut snapshot) = self.cleaner_snapshot()? else {
            return Ok(None);
        };
        if snapshot.config.max_compaction_lag_ms < i64::MAX {
            read_first_batch_timestamps(&mut snapshot.sealed).await?;
        }
        let summaries: Vec<CleanableSegment> = snapshot
            .sealed
            .iter()
            .map(|source| source.summary)
            .collect();
        let view = CleanerView {
            segments: &summaries,
            active_base_offset: snapshot.active_base_offset,
            log_start_offset: snapshot.log_start_offset,
            log_end_offset: snapshot.log_end_offset,
            stable_offset: self.high_watermark(),
            checkpoint,
            now_ms,
        };
        Ok(Some(log_to_clean(&view, &snapshot.config)))
    }

    /// Cleans the log as `plan` (from [`PartitionLog::cleanable`]) says,
    /// with an offset map of at most `map_bytes`. `None` if nothing could be
    /// cleaned (the log no longer compacts, or the map could not hold one
    /// batch's keys).
    pub async fn clean(
        &self,
        plan: &LogToClean,
        map_bytes: usize,
        now_ms: i64,
    ) -> Result<Option<CleanOutcome>, StorageError> {
        let Some(snapshot) = self.cleaner_snapshot()? else {
            return Ok(None);
        };
        let end = plan.first_uncleanable_offset;
        let sources: Vec<&SealedSource> = snapshot
            .sealed
            .iter()
            .filter(|source| source.base_offset < end)
            .collect();
        if plan.first_dirty_offset >= end || sources.is_empty() {
            return Ok(None);
        }
        let (map, producers) = self.build_offset_map(&sources, plan, map_bytes).await?;
        let Some(end_offset) = map.latest_offset().map(Offset::next) else {
            return Ok(None);
        };
        if end_offset <= plan.first_dirty_offset {
            tracing::warn!(log = %self.inner.name, map_bytes, "the offset map cannot hold one batch's keys; raise log.cleaner.dedupe.buffer.size");
            return Ok(None);
        }
        let round = CleaningRound {
            offset_map: &map,
            producers: &producers,
            upper_bound_offset: end,
            now_ms,
            delete_retention_ms: snapshot.config.delete_retention_ms,
        };
        let to_clean: Vec<&SealedSource> = sources
            .into_iter()
            .filter(|source| source.base_offset < end_offset)
            .collect();
        self.rewrite_groups(&to_clean, &round, &snapshot.config, end_offset)
            .await
            .map(Some)
    }

    /// The sealed segments and offsets a pass works from, or `None` if the
    /// log does not compact.
    fn cleaner_snapshot(&self) -> Result<Option<Snapshot>, StorageError> {
        let state = self.inner.state.borrow();
        state.check_usable()?;
        if !state.config.cleanup_policy.compacts() {
            return Ok(None);
        }
        let sealed: Vec<SealedSource> = state
            .segments
            .iter()
            .take_while(|segment| segment.is_sealed())
            .filter_map(|segment| {
                let SegmentState::Sealed(sealed) = &segment.state else {
                    return None;
                };
                Some(SealedSource {
                    base_offset: segment.base_offset,
                    log_bytes: segment.log_bytes,
                    file: segment.log_file.clone(),
                    path: segment.log_path.clone(),
                    summary: CleanableSegment {
                        base_offset: segment.base_offset,
                        size_bytes: segment.log_bytes,
                        largest_timestamp: segment.largest_timestamp,
                        first_batch_timestamp: None,
                        offset_index_bytes: (sealed.offset.summary.entries()
                            * OffsetIndexEntry::BYTES)
                            as u64,
                        time_index_bytes: (sealed.time.summary.entries() * TimeIndexEntry::BYTES)
                            as u64,
                    },
                })
            })
            .collect();
        let active_base_offset = state.segments[sealed.len()].base_offset;
        Ok(Some(Snapshot {
            sealed,
            active_base_offset,
            log_start_offset: state.log_start_offset,
            log_end_offset: state.log_end_offset(),
            config: state.config.clone(),
        }))
    }

    /// The map pass: every batch from the log's first segment to the first
    /// uncleanable offset, or until the map is full.
    async fn build_offset_map(
        &self,
        sources: &[&SealedSource],
        plan: &LogToClean,
        map_bytes: usize,
    ) -> Result<(OffsetMap, ProducerLastBatches), StorageError> {
        let mut map = OffsetMap::new(map_bytes);
        let mut producers = ProducerLastBatches::default();
        let start = plan.first_dirty_offset;
        for (slot, source) in sources.iter().enumerate() {
            let mut reader = BatchReader::new(source);
            while let Some(range) = reader.next_batch().await? {
                let batch = reader.batch(range)?;
                let step = map_batch(&mut map, &mut producers, &batch, start)
                    .map_err(|error| reader.corrupt(&error.to_string()))?;
                if step == MapStep::Full {
                    return Ok((map, producers));
                }
                glommio::yield_if_needed().await;
            }
            // Kafka's fast-forward over a gap at a fully mapped segment's end.
            let next_base = sources
                .get(slot + 1)
                .map_or(plan.first_uncleanable_offset, |next| next.base_offset);
            if next_base > start {
                map.update_latest_offset(Offset(next_base.0 - 1));
            }
            self.inner.state.borrow().check_usable()?;
        }
        Ok((map, producers))
    }

    /// The rewrite pass: each group of `sources` into one cleaned segment,
    /// swapped in before the next group starts.
    async fn rewrite_groups(
        &self,
        sources: &[&SealedSource],
        round: &CleaningRound<'_>,
        config: &LogConfig,
        end_offset: Offset,
    ) -> Result<CleanOutcome, StorageError> {
        let summaries: Vec<CleanableSegment> =
            sources.iter().map(|source| source.summary).collect();
        let groups = group_segments(
            &summaries,
            GroupLimits::of(config),
            round.upper_bound_offset,
        );
        let mut outcome = CleanOutcome {
            end_offset,
            completed: true,
            segments_before: sources.len(),
            segments_after: groups.len(),
            bytes_before: sources.iter().map(|source| source.log_bytes).sum(),
            bytes_after: 0,
        };
        let dir = self.dir();
        for group in groups {
            let members = &sources[group];
            let cleaned = self.clean_group(members, round, config).await?;
            let last = members.last().expect("groups are not empty");
            cleaned.keep_modified_time(&dir, &last.path);
            outcome.bytes_after += cleaned.log_bytes;
            let replaced: Vec<ReplacedSegment> = members
                .iter()
                .map(|source| ReplacedSegment {
                    base_offset: source.base_offset,
                    log_file: source.file.clone(),
                })
                .collect();
            if !self.swap_in_cleaned(cleaned, &replaced).await? {
                outcome.completed = false;
                break;
            }
        }
        Ok(outcome)
    }

    /// Writes the cleaned segment of one group (removing its files if that
    /// fails).
    async fn clean_group(
        &self,
        members: &[&SealedSource],
        round: &CleaningRound<'_>,
        config: &LogConfig,
    ) -> Result<CleanedSegment, StorageError> {
        let dir = self.dir();
        let base = members[0].base_offset;
        let created = CleanedSegmentWriter::create(&dir, base, config.index_interval_bytes).await;
        let finished = match created {
            Ok(mut writer) => match self.copy_survivors(members, round, &mut writer).await {
                Ok(()) => writer.finish().await,
                Err(error) => Err(error),
            },
            Err(error) => Err(error),
        };
        if finished.is_err() {
            discard_cleaned(&dir, base);
        }
        finished
    }

    /// Appends what survives of every batch of `members` to `writer`.
    async fn copy_survivors(
        &self,
        members: &[&SealedSource],
        round: &CleaningRound<'_>,
        writer: &mut CleanedSegmentWriter,
    ) -> Result<(), StorageError> {
        for source in members {
            let mut reader = BatchReader::new(source);
            while let Some(range) = reader.next_batch().await? {
                let batch = reader.batch(range)?;
                batch
                    .verify_crc()
                    .map_err(|error| reader.corrupt(&error.to_string()))?;
                let fate = clean_batch(&batch, round)
                    .map_err(|error| reader.corrupt(&error.to_string()))?;
                match fate {
                    BatchFate::Keep => {
                        let (last, max) = (batch.last_offset(), batch.max_timestamp());
                        writer.append(batch.as_bytes(), last, max).await?
                    }
                    BatchFate::Rewrite(bytes) => {
                        let rewritten = BatchView::parse_exact(&bytes)
                            .map_err(|error| reader.corrupt(&error.to_string()))?;
                        let (last, max) = (rewritten.last_offset(), rewritten.max_timestamp());
                        writer.append(&bytes, last, max).await?
                    }
                    BatchFate::Drop => {}
                }
                glommio::yield_if_needed().await;
            }
            self.inner.state.borrow().check_usable()?;
        }
        Ok(())
    }
}

/// Reads the largest timestamp of each segment's first batch (for
/// `max.compaction.lag.ms`): one header read per segment.
async fn read_first_batch_timestamps(sources: &mut [SealedSource]) -> Result<(), StorageError> {
    for source in sources.iter_mut().filter(|source| source.log_bytes > 0) {
        let mut reader = BatchReader::new(source);
        if let Some(range) = reader.next_batch().await? {
            let batch = reader.batch(range)?;
            source.summary.first_batch_timestamp = Some(batch.max_timestamp());
        }
    }
    Ok(())
}

/// Walks a sealed segment's batches in order, a window at a time.
struct BatchReader<'a> {
    source: &'a SealedSource,
    position: u64,
    window: ReadResult,
    window_start: u64,
}

impl<'a> BatchReader<'a> {
    fn new(source: &'a SealedSource) -> BatchReader<'a> {
        BatchReader {
            source,
            position: 0,
            window: ReadResult::default(),
            window_start: 0,
        }
    }

    /// The window range of the next whole batch, or `None` at the end.
    async fn next_batch(&mut self) -> Result<Option<Range<usize>>, StorageError> {
        let size = self.source.log_bytes;
        if self.position >= size {
            return Ok(None);
        }
        if size - self.position < LOG_OVERHEAD_BYTES as u64 {
            return Err(self.corrupt("a batch header runs past the segment's end"));
        }
        self.ensure(LOG_OVERHEAD_BYTES as u64).await?;
        let at = (self.position - self.window_start) as usize;
        let length_field = &self.window[at + 8..at + LOG_OVERHEAD_BYTES];
        let declared = i32::from_be_bytes(length_field.try_into().expect("four bytes"));
        let batch_bytes = LOG_OVERHEAD_BYTES as u64 + u64::try_from(declared).unwrap_or(0);
        if declared < BATCH_LENGTH_MIN
            || batch_bytes > CLEANER_BATCH_BYTES_MAX
            || self.position + batch_bytes > size
        {
            return Err(self.corrupt(&format!("batch length {declared} does not fit")));
        }
        self.ensure(batch_bytes).await?;
        let at = (self.position - self.window_start) as usize;
        self.position += batch_bytes;
        Ok(Some(at..at + batch_bytes as usize))
    }

    /// Makes the window hold `len` bytes from the current position.
    async fn ensure(&mut self, len: u64) -> Result<(), StorageError> {
        let window_end = self.window_start + self.window.len() as u64;
        if self.position >= self.window_start && self.position + len <= window_end {
            return Ok(());
        }
        let want = len
            .max(READ_WINDOW_BYTES)
            .min(self.source.log_bytes - self.position);
        let source = self.source;
        self.window = read_exact(&source.file, &source.path, self.position, want as usize).await?;
        self.window_start = self.position;
        Ok(())
    }

    fn batch(&self, range: Range<usize>) -> Result<BatchView<'_>, StorageError> {
        BatchView::parse_exact(&self.window[range])
            .map_err(|error| self.corrupt(&error.to_string()))
    }

    fn corrupt(&self, reason: &str) -> StorageError {
        StorageError::Corrupt {
            path: self.source.path.clone(),
            reason: format!("cleaning, near position {}: {reason}", self.position),
        }
    }
}
