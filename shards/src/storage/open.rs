//! Opening a partition log: find its segments, trust what a clean shutdown
//! or the recovery point vouches for, and scan the rest (S6).
//!
//! First, a segment swap of the log cleaner that a crash interrupted is
//! finished or undone (see [`crate::storage::cleaned_segment`]).
//!
//! Every segment's index files are read whole once and checked (sizes,
//! order, bounds, and that the first and last offset entries point at
//! batches ending at their offsets), and the batches after the last
//! offset-index entry are walked: that proves the index is complete and
//! yields the segment's end.
//! A segment whose indexes fail is rebuilt from its log. Segments from the
//! one holding the recovery point on (all of them without a checkpoint) are
//! scanned batch by batch after an unclean shutdown; the first invalid batch
//! ends the log: its segment is truncated there and later segments deleted.
//! In the segment holding the recovery point, the batches below the point
//! were synced before it was checkpointed: their index entries are kept
//! from the segment's index files where those still hold them, the headers
//! of the rest are walked, and the scan (CRCs included) starts at the first
//! batch not below the point, as Kafka's log loader recovers only from the
//! recovery point on.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use brook_engine::log::batch::{BATCH_HEADER_BYTES, BatchHeader, BatchView};
use brook_engine::log::config::LogConfig;
use brook_engine::log::epoch_cache::LeaderEpochCache;
use brook_engine::log::file_name::{SegmentFileKind, parse_segment_file_name};
use brook_engine::log::index::{
    BlockSummary, IndexEntry, IndexError, OffsetIndexEntry, RELATIVE_OFFSET_MAX, TimeIndexEntry,
    check_offset_index, check_time_index, entries_from_bytes, position_key,
};
use brook_engine::log::indexer::{BatchPlacement, SegmentIndexer};
use brook_engine::log::recovery::{
    HeaderWalk, ScanEnd, ScanStop, Scanner, WalkStep, index_resume, is_write_padding,
};
use brook_engine::types::{LeaderEpoch, Offset, TimestampMs};
use glommio::io::{DmaFile, ReadResult};
use zerocopy::IntoBytes;

use crate::storage::appender::{ChunkSizing, PAGE_BYTES, PageAppender, align_down};
use crate::storage::cleaned_segment::recover_interrupted_swap;
use crate::storage::error::{StorageError, io_error};
use crate::storage::files::{
    create_dma, open_dma, read_exact, read_optional_text, read_partial_page, segment_path,
    sync_directory, write_atomically,
};
use crate::storage::partition_log::{RecoveryHints, delete_segment_files};
use crate::storage::segment::{ActiveSegment, SealedIndex, SealedIndexes, Segment, SegmentState};

/// Kafka's name for the leader-epoch cache file in a partition directory.
pub const EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// Bytes read per step while scanning a log.
const SCAN_CHUNK_BYTES: usize = 1 << 20;
/// A batch longer than this is taken for a corrupt length field: no legitimate
/// producer batch comes near it, and it bounds what a scan allocates.
const SCAN_BATCH_BYTES_MAX: usize = 256 << 20;

pub(crate) struct OpenedLog {
    pub segments: Vec<Segment>,
    pub log_start_offset: Offset,
    pub epochs: LeaderEpochCache,
}

/// Everything learnt from a segment's files.
struct SegmentScan {
    log_file: Rc<DmaFile>,
    log_bytes: u64,
    next_offset: Offset,
    indexer: SegmentIndexer,
    offset_entries: Vec<OffsetIndexEntry>,
    time_entries: Vec<TimeIndexEntry>,
    first_batch_max_timestamp: Option<TimestampMs>,
}

/// Why a segment's index files cannot be used as they are.
enum Distrust {
    Index(String),
    Log(ScanStop),
}

/// The leader-epoch cache while a log opens: batches are checked against a
/// checkpoint that was read (it is written before any batch of a new epoch),
/// and the cache is rebuilt from the batches, across every segment scanned,
/// when the checkpoint was lost.
struct EpochRecovery {
    cache: LeaderEpochCache,
    rebuild: bool,
}

impl EpochRecovery {
    /// The cache to check batches against, if it is trusted.
    fn checked(&self) -> Option<LeaderEpochCache> {
        (!self.rebuild).then(|| self.cache.clone())
    }

    fn on_batch(&mut self, batch: &BatchView<'_>) {
        self.on_header(batch.header());
    }

    fn on_header(&mut self, header: &BatchHeader) {
        let epoch = LeaderEpoch(header.partition_leader_epoch.get());
        if self.rebuild && epoch.0 >= 0 {
            self.cache.assign(epoch, header.base_offset());
        }
    }
}

/// The index entries of a segment being rebuilt from its log.
struct RebuiltIndexes {
    indexer: SegmentIndexer,
    offset_entries: Vec<OffsetIndexEntry>,
    time_entries: Vec<TimeIndexEntry>,
    first_batch_max_timestamp: Option<TimestampMs>,
}

impl RebuiltIndexes {
    fn new(base: Offset, index_interval_bytes: u64) -> RebuiltIndexes {
        RebuiltIndexes {
            indexer: SegmentIndexer::new(base, index_interval_bytes),
            offset_entries: Vec::new(),
            time_entries: Vec::new(),
            first_batch_max_timestamp: None,
        }
    }

    fn on_batch(&mut self, batch: BatchPlacement) {
        if batch.position == 0 {
            self.first_batch_max_timestamp = Some(batch.max_timestamp);
        }
        let update = self.indexer.on_batch(batch);
        self.offset_entries.extend(update.offset_entry);
        self.time_entries.extend(update.time_entry);
    }
}

pub(crate) async fn open_segments(
    dir: &Path,
    config: &LogConfig,
    hints: &RecoveryHints,
    now_ms: i64,
) -> Result<OpenedLog, StorageError> {
    // A cleaner's segment swap that a crash interrupted is finished or
    // undone first, so the segments listed are whole.
    recover_interrupted_swap(dir).await?;
    let bases = list_segments(dir)?;
    let loaded = load_epochs(dir)?;
    let epochs_before = loaded.clone();
    let mut epochs = EpochRecovery {
        rebuild: loaded.is_empty(),
        cache: loaded,
    };
    let first_to_scan = if hints.clean_shutdown {
        bases.len()
    } else {
        hints.recovery_point.map_or(0, |point| {
            bases
                .iter()
                .take_while(|base| **base <= point)
                .count()
                .saturating_sub(1)
        })
    };
    let mut segments: Vec<Segment> = Vec::new();
    for (slot, base) in bases.iter().copied().enumerate() {
        let is_last = slot + 1 == bases.len();
        let expected = segments.last().map(|previous| previous.next_offset);
        if let Some(expected) = expected.filter(|expected| {
            config.cleanup_policy.contiguity() == brook_engine::log::recovery::Contiguity::Strict
                && *expected != base
        }) {
            tracing::error!(dir = %dir.display(), base = %base, expected = %expected, "segment does not follow its predecessor; deleting it and later segments");
            delete_from(dir, &bases[slot..])?;
            break;
        }
        let (scan, truncated) = if slot >= first_to_scan {
            // Only the segment holding the recovery point has batches below it.
            let recovery_point = hints.recovery_point.filter(|_| slot == first_to_scan);
            let target = ScanTarget {
                base,
                expected,
                sealed: !is_last,
                recovery_point,
            };
            scan_segment(dir, target, config, &mut epochs).await?
        } else {
            match check_segment(dir, base, config, &mut epochs, is_last).await? {
                Ok(scan) => (scan, false),
                Err(distrust) => {
                    let reason = match distrust {
                        Distrust::Index(reason) => reason,
                        Distrust::Log(stop) => stop.to_string(),
                    };
                    tracing::warn!(dir = %dir.display(), base = %base, %reason, "rebuilding segment indexes");
                    let target = ScanTarget {
                        base,
                        expected,
                        sealed: !is_last,
                        recovery_point: None,
                    };
                    scan_segment(dir, target, config, &mut epochs).await?
                }
            }
        };
        let ends_log = is_last || truncated;
        segments.push(into_segment(dir, base, scan, ends_log, now_ms).await?);
        if truncated && !is_last {
            tracing::warn!(dir = %dir.display(), base = %base, "log truncated inside a sealed segment; deleting later segments");
            delete_from(dir, &bases[slot + 1..])?;
            break;
        }
    }
    if segments.is_empty() {
        let base = hints.log_start_offset.unwrap_or_default().max(Offset(0));
        segments.push(Segment::create(dir, base, now_ms, config.index_interval_bytes).await?);
        // The new files' entries must survive a power loss like a roll's do.
        sync_directory(dir).await?;
    }
    let log_end_offset = segments.last().expect("at least one segment").next_offset;
    let first_base = segments[0].base_offset;
    let log_start_offset = hints
        .log_start_offset
        .unwrap_or(first_base)
        .clamp(first_base, log_end_offset);
    let mut epochs = epochs.cache;
    epochs.truncate_from_end(log_end_offset);
    if epochs != epochs_before {
        write_atomically(&dir.join(EPOCH_CHECKPOINT_FILE), epochs.encode().as_bytes()).await?;
    }
    Ok(OpenedLog {
        segments,
        log_start_offset,
        epochs,
    })
}

/// Base offsets of the segments in `dir` (those with a `.log`), after
/// removing index files that have no log and leftover temporary files.
fn list_segments(dir: &Path) -> Result<Vec<Offset>, StorageError> {
    let mut logs = BTreeSet::new();
    let mut indexes = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_error("listing", dir))? {
        let entry = entry.map_err(io_error("listing", dir))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        match parse_segment_file_name(&name) {
            Some((base, SegmentFileKind::Log)) => {
                logs.insert(base);
            }
            Some((base, _)) => indexes.push((base, entry.path())),
            None if name.ends_with(".tmp") => {
                let _ = std::fs::remove_file(entry.path());
            }
            None => {}
        }
    }
    for (base, path) in indexes {
        if !logs.contains(&base) {
            std::fs::remove_file(&path).map_err(io_error("deleting orphan index", &path))?;
        }
    }
    Ok(logs.into_iter().collect())
}

fn delete_from(dir: &Path, bases: &[Offset]) -> Result<(), StorageError> {
    bases
        .iter()
        .try_for_each(|base| delete_segment_files(dir, *base))
}

fn load_epochs(dir: &Path) -> Result<LeaderEpochCache, StorageError> {
    let path = dir.join(EPOCH_CHECKPOINT_FILE);
    let Some(text) = read_optional_text(&path)? else {
        return Ok(LeaderEpochCache::default());
    };
    Ok(LeaderEpochCache::decode(&text).unwrap_or_else(|error| {
        tracing::warn!(path = %path.display(), %error, "ignoring unreadable leader-epoch checkpoint");
        LeaderEpochCache::default()
    }))
}

/// The largest index file of kind `E` a segment whose `.log` holds
/// `log_bytes` can have; a larger one is damaged and is rebuilt, never read
/// into memory. A roll keeps an index within `segment.index.bytes` (sealing
/// adds one final time entry); the default also bounds older indexes written
/// before the setting was lowered. Each entry marks a distinct batch, so the
/// log's size bounds the count as well.
fn index_bytes_max<E: IndexEntry>(config: &LogConfig, log_bytes: u64) -> u64 {
    let entry_bytes = E::BYTES as u64;
    let by_config = config
        .segment_index_bytes
        .max(LogConfig::default().segment_index_bytes)
        .saturating_add(entry_bytes);
    let by_log = (log_bytes / BATCH_HEADER_BYTES as u64 + 1) * entry_bytes;
    by_config.min(by_log)
}

/// Reads a whole index file of at most `bytes_max` bytes.
async fn read_index<E: IndexEntry>(path: &Path, bytes_max: u64) -> Result<Vec<E>, Distrust> {
    let bytes = read_index_bytes(path, bytes_max)
        .await
        .map_err(Distrust::Index)?;
    let entries =
        entries_from_bytes::<E>(&bytes).map_err(|error| Distrust::Index(error.to_string()))?;
    Ok(entries.to_vec())
}

/// The whole entries at the start of an index file that a crash may have
/// left short or padded: nothing if it is missing, unreadable or too large.
async fn read_index_prefix<E: IndexEntry>(path: &Path, bytes_max: u64) -> Vec<E> {
    match read_index_bytes(path, bytes_max).await {
        Ok(bytes) => {
            let whole = bytes.len() - bytes.len() % E::BYTES;
            entries_from_bytes::<E>(&bytes[..whole])
                .expect("a whole number of entries is never partial")
                .to_vec()
        }
        Err(reason) => {
            tracing::debug!(path = %path.display(), %reason, "not resuming from an index file");
            Vec::new()
        }
    }
}

/// The bytes of an index file of at most `bytes_max` bytes, or why not.
async fn read_index_bytes(path: &Path, bytes_max: u64) -> Result<ReadResult, String> {
    if !path.exists() {
        return Err(format!("{} is missing", path.display()));
    }
    let file = open_dma(path, false)
        .await
        .map_err(|error| error.to_string())?;
    let bytes = async {
        let len = file
            .file_size()
            .await
            .map_err(|error| StorageError::io("sizing", path, error).to_string())?;
        if len > bytes_max {
            return Err(format!(
                "{} holds {len} bytes, more than the {bytes_max} its segment allows",
                path.display()
            ));
        }
        read_exact(&file, path, 0, len as usize)
            .await
            .map_err(|error| error.to_string())
    }
    .await;
    let _ = file.close_rc().await;
    bytes
}

/// Trusts a segment's index files if they pass every check; walks the
/// batches after the last offset entry to find the segment's end.
async fn check_segment(
    dir: &Path,
    base: Offset,
    config: &LogConfig,
    epochs: &mut EpochRecovery,
    is_last: bool,
) -> Result<Result<SegmentScan, Distrust>, StorageError> {
    let log_path = segment_path(dir, base, SegmentFileKind::Log);
    let log_file = open_dma(&log_path, false).await?;
    let log_bytes = log_file
        .file_size()
        .await
        .map_err(io_error("sizing", &log_path))?;
    let indexes = async {
        let offset_entries = read_index::<OffsetIndexEntry>(
            &segment_path(dir, base, SegmentFileKind::Index),
            index_bytes_max::<OffsetIndexEntry>(config, log_bytes),
        )
        .await?;
        let time_entries = read_index::<TimeIndexEntry>(
            &segment_path(dir, base, SegmentFileKind::TimeIndex),
            index_bytes_max::<TimeIndexEntry>(config, log_bytes),
        )
        .await?;
        check_offset_index(&offset_entries, log_bytes)
            .map_err(|error| Distrust::Index(error.to_string()))?;
        check_time_index(&time_entries, RELATIVE_OFFSET_MAX)
            .map_err(|error| Distrust::Index(error.to_string()))?;
        Ok::<_, Distrust>((offset_entries, time_entries))
    };
    let (offset_entries, time_entries) = match indexes.await {
        Ok(entries) => entries,
        Err(distrust) => return Ok(Err(distrust)),
    };
    // The last entry's batch is checked by the walk below; the first one's
    // here, with one header read.
    if let Some(error) =
        check_first_entry(&log_file, &log_path, log_bytes, base, &offset_entries).await?
    {
        return Ok(Err(Distrust::Index(error.to_string())));
    }
    let last_entry = offset_entries
        .last()
        .map(|entry| (offset_entries.len() - 1, entry.offset(base)));
    let mut indexer = SegmentIndexer::resume(
        base,
        config.index_interval_bytes,
        offset_entries.last().copied(),
        time_entries.last().copied(),
    );
    let from = indexer.last_indexed_position();
    let checked_epochs = epochs.checked();
    let mut scanner = Scanner::new(
        base,
        (from == 0).then_some(base),
        config.cleanup_policy.contiguity(),
        checked_epochs.as_ref(),
    );
    let mut first_batch_max_timestamp = None;
    let mut missing = None;
    // The batch at the last offset entry was indexed with the running maximum
    // timestamp, so the time index must reach at least its timestamp.
    let last_time_entry = time_entries
        .last()
        .map_or(TimestampMs::NONE, |entry| entry.timestamp());
    let walked = scan_file(
        &log_file,
        &log_path,
        from,
        log_bytes,
        &mut scanner,
        |position, batch| {
            if position == 0 {
                first_batch_max_timestamp = Some(batch.max_timestamp());
            }
            epochs.on_batch(batch);
            let update = indexer.on_batch(placement(position, batch));
            let indexed_batch = position == from && from > 0;
            let time_short = indexed_batch && batch.max_timestamp() > last_time_entry;
            if update.offset_entry.is_some() || update.time_entry.is_some() || time_short {
                missing.get_or_insert(IndexError::MissingEntry { position });
            }
            if let Some((entry, indexed)) = last_entry.filter(|_| indexed_batch) {
                if batch.last_offset() != indexed {
                    missing.get_or_insert(IndexError::BatchMismatch {
                        entry,
                        position,
                        indexed: indexed.0,
                        found: Some(batch.last_offset().0),
                    });
                }
            }
        },
    )
    .await?;
    if let Some(stop) = walked {
        return Ok(Err(Distrust::Log(stop)));
    }
    if let Some(error) = missing {
        return Ok(Err(Distrust::Index(error.to_string())));
    }
    let next_offset = scanner.next_offset().unwrap_or(base);
    let time_past_end = time_entries
        .last()
        .is_some_and(|entry| entry.offset(base) >= next_offset);
    if time_past_end {
        return Ok(Err(Distrust::Index(
            "time index points past the segment".into(),
        )));
    }
    if !is_last && indexer.clone().on_seal().is_some() {
        let expected = indexer.max_timestamp().0;
        return Ok(Err(Distrust::Index(
            IndexError::MissingMaxTimestamp { expected }.to_string(),
        )));
    }
    if first_batch_max_timestamp.is_none() {
        first_batch_max_timestamp =
            first_batch_max_timestamp_of(&log_file, &log_path, log_bytes).await?;
    }
    Ok(Ok(SegmentScan {
        log_file,
        log_bytes,
        next_offset,
        indexer,
        offset_entries,
        time_entries,
        first_batch_max_timestamp,
    }))
}

/// A mismatch if the batch at the first offset entry's position does not end
/// at the entry's offset (or is no batch). An index can pass every check of its own (sorted, inside
/// the log) and still map offsets to the wrong batches, and a read that
/// starts at a later batch than it should skips records.
async fn check_first_entry(
    log_file: &DmaFile,
    log_path: &Path,
    log_bytes: u64,
    base: Offset,
    entries: &[OffsetIndexEntry],
) -> Result<Option<IndexError>, StorageError> {
    let Some(entry) = entries.first() else {
        return Ok(None);
    };
    let position = u64::from(entry.position.get());
    let found = if position + BATCH_HEADER_BYTES as u64 <= log_bytes {
        let header = read_exact(log_file, log_path, position, BATCH_HEADER_BYTES).await?;
        BatchHeader::parse(&header)
            .ok()
            .map(|header| header.last_offset().0)
    } else {
        None
    };
    let indexed = entry.offset(base).0;
    Ok(
        (found != Some(indexed)).then_some(IndexError::BatchMismatch {
            entry: 0,
            position,
            indexed,
            found,
        }),
    )
}

/// The largest timestamp of the segment's first batch, from its header;
/// `None` if the segment is empty or its first header unreadable.
async fn first_batch_max_timestamp_of(
    log_file: &DmaFile,
    log_path: &Path,
    log_bytes: u64,
) -> Result<Option<TimestampMs>, StorageError> {
    if log_bytes < BATCH_HEADER_BYTES as u64 {
        return Ok(None);
    }
    let header = read_exact(log_file, log_path, 0, BATCH_HEADER_BYTES).await?;
    Ok(BatchHeader::parse(&header)
        .ok()
        .map(|header| header.max_timestamp()))
}

/// Which segment [`scan_segment`] recovers, and what is known about it.
struct ScanTarget {
    base: Offset,
    /// Where the segment's first batch must start (the previous segment's end).
    expected: Option<Offset>,
    /// Not the last segment: a final time entry is written when nothing is cut.
    sealed: bool,
    /// The checkpointed recovery point, for the segment holding it: the
    /// batches below it are walked, not scanned.
    recovery_point: Option<Offset>,
}

/// Recovers a segment: truncates it after its last valid batch and rewrites
/// its index files (with the final time entry of a sealed segment when
/// nothing was cut). Every batch is scanned whole, except in the segment
/// holding the recovery point, whose batches below it only have their
/// headers walked (see [`HeaderWalk`]). Returns the scan and whether bytes
/// were cut.
async fn scan_segment(
    dir: &Path,
    target: ScanTarget,
    config: &LogConfig,
    epochs: &mut EpochRecovery,
) -> Result<(SegmentScan, bool), StorageError> {
    let base = target.base;
    let log_path = segment_path(dir, base, SegmentFileKind::Log);
    let log_file = open_dma(&log_path, false).await?;
    let file_bytes = log_file
        .file_size()
        .await
        .map_err(io_error("sizing", &log_path))?;
    let log = LogFile {
        file: &log_file,
        path: &log_path,
        bytes: file_bytes,
    };
    let checked_epochs = epochs.checked();
    let (from, mut scanner, mut rebuilt) =
        scan_start(dir, &target, config, &log, epochs, checked_epochs.as_ref()).await?;
    if from > 0 {
        tracing::debug!(path = %log_path.display(), trusted_bytes = from, file_bytes, "scanning from the recovery point");
    }
    let mut valid_bytes = from;
    let stop = scan_file(
        &log_file,
        &log_path,
        from,
        file_bytes,
        &mut scanner,
        |position, batch| {
            epochs.on_batch(batch);
            rebuilt.on_batch(placement(position, batch));
            valid_bytes = position + batch.size_bytes() as u64;
        },
    )
    .await?;
    let cut = valid_bytes < file_bytes;
    let padding = cut && file_bytes - valid_bytes < PAGE_BYTES && {
        let tail_len = (file_bytes - valid_bytes) as usize;
        let tail = read_exact(&log_file, &log_path, valid_bytes, tail_len).await?;
        is_write_padding(&tail, PAGE_BYTES as usize)
    };
    // Only damage truncates the log; the padding a crash left after the last
    // batch of a segment that was being sealed is just trimmed.
    let truncated = cut && !padding;
    if target.sealed && !truncated {
        rebuilt.time_entries.extend(rebuilt.indexer.on_seal());
    }
    if cut {
        let reason = stop.map_or_else(|| "trailing bytes".to_owned(), |stop| stop.to_string());
        tracing::warn!(path = %log_path.display(), valid_bytes, file_bytes, %reason, "truncating log after its last valid batch");
        log_file
            .truncate(valid_bytes)
            .await
            .map_err(io_error("truncating", &log_path))?;
    }
    log_file
        .fdatasync()
        .await
        .map_err(io_error("syncing", &log_path))?;
    write_index(
        &segment_path(dir, base, SegmentFileKind::Index),
        rebuilt.offset_entries.as_bytes(),
    )
    .await?;
    write_index(
        &segment_path(dir, base, SegmentFileKind::TimeIndex),
        rebuilt.time_entries.as_bytes(),
    )
    .await?;
    let next_offset = scanner.next_offset().unwrap_or(base);
    let scan = SegmentScan {
        log_file,
        log_bytes: valid_bytes,
        next_offset,
        indexer: rebuilt.indexer,
        offset_entries: rebuilt.offset_entries,
        time_entries: rebuilt.time_entries,
        first_batch_max_timestamp: rebuilt.first_batch_max_timestamp,
    };
    Ok((scan, truncated))
}

/// Where the scan of a segment starts, with its scanner and the index
/// entries rebuilt before that point: the segment's first batch, or in the
/// segment holding the recovery point the first batch not below it.
async fn scan_start<'a>(
    dir: &Path,
    target: &ScanTarget,
    config: &LogConfig,
    log: &LogFile<'_>,
    epochs: &mut EpochRecovery,
    checked_epochs: Option<&'a LeaderEpochCache>,
) -> Result<(u64, Scanner<'a>, RebuiltIndexes), StorageError> {
    let base = target.base;
    let below = target.recovery_point.filter(|point| *point > base);
    // A lost leader-epoch checkpoint is rebuilt from every batch, so the
    // walk then starts at the segment's first one.
    let resumed = match below {
        Some(point) if !epochs.rebuild => {
            resume_from_indexes(dir, base, config, log, point).await?
        }
        _ => None,
    };
    let (from, next_offset, mut rebuilt) = match resumed {
        Some(resumed) => (resumed.position, resumed.next_offset, resumed.rebuilt),
        None => (
            0,
            target.expected.unwrap_or(base),
            RebuiltIndexes::new(base, config.index_interval_bytes),
        ),
    };
    let scanner = Scanner::new(
        base,
        Some(next_offset),
        config.cleanup_policy.contiguity(),
        checked_epochs,
    );
    let Some(point) = below else {
        return Ok((from, scanner, rebuilt));
    };
    let (from, scanner) = walk_headers(log, from, point, scanner, epochs, &mut rebuilt).await?;
    Ok((from, scanner, rebuilt))
}

/// A segment's `.log` while it is recovered.
struct LogFile<'a> {
    file: &'a DmaFile,
    path: &'a Path,
    /// Its size on disk.
    bytes: u64,
}

/// Where [`resume_from_indexes`] lets the header walk start.
struct Resumed {
    /// Right after the batch the last offset entry kept names.
    position: u64,
    /// The offset after that batch.
    next_offset: Offset,
    rebuilt: RebuiltIndexes,
}

/// What the index files of the segment holding the recovery point still
/// hold for its batches below the point: the entries [`index_resume`] keeps,
/// and the indexer's state right after the batch the last offset entry
/// names, where the header walk starts (replaying that batch would change
/// nothing). `None` (start at the first batch) unless the batches at the
/// first and the last entry kept end at their offsets and lie whole in the
/// log, and the first batch's header reads.
async fn resume_from_indexes(
    dir: &Path,
    base: Offset,
    config: &LogConfig,
    log: &LogFile<'_>,
    recovery_point: Offset,
) -> Result<Option<Resumed>, StorageError> {
    let offset_entries = read_index_prefix::<OffsetIndexEntry>(
        &segment_path(dir, base, SegmentFileKind::Index),
        index_bytes_max::<OffsetIndexEntry>(config, log.bytes),
    )
    .await;
    let time_entries = read_index_prefix::<TimeIndexEntry>(
        &segment_path(dir, base, SegmentFileKind::TimeIndex),
        index_bytes_max::<TimeIndexEntry>(config, log.bytes),
    )
    .await;
    let Some(resume) = index_resume(
        base,
        recovery_point,
        log.bytes,
        &offset_entries,
        &time_entries,
    ) else {
        return Ok(None);
    };
    let kept = &offset_entries[..resume.offset_entries];
    let Some(last) = kept.last().copied() else {
        return Ok(None);
    };
    if let Some(error) = check_first_entry(log.file, log.path, log.bytes, base, kept).await? {
        tracing::warn!(path = %log.path.display(), %error, "not resuming from the segment's index");
        return Ok(None);
    }
    let position = u64::from(last.position.get());
    let Some(end) = batch_end(log, position, last.offset(base)).await? else {
        tracing::warn!(path = %log.path.display(), position, "not resuming from the segment's index: its last entry names no whole batch");
        return Ok(None);
    };
    let Some(first_timestamp) = first_batch_max_timestamp_of(log.file, log.path, log.bytes).await?
    else {
        return Ok(None);
    };
    let time_entries = time_entries[..resume.time_entries].to_vec();
    let rebuilt = RebuiltIndexes {
        indexer: SegmentIndexer::resume(
            base,
            config.index_interval_bytes,
            Some(last),
            time_entries.last().copied(),
        ),
        offset_entries: kept.to_vec(),
        time_entries,
        first_batch_max_timestamp: Some(first_timestamp),
    };
    Ok(Some(Resumed {
        position: end,
        next_offset: last.offset(base).next(),
        rebuilt,
    }))
}

/// Where the batch at `position` ends, if a batch ending at `last_offset`
/// lies whole there.
async fn batch_end(
    log: &LogFile<'_>,
    position: u64,
    last_offset: Offset,
) -> Result<Option<u64>, StorageError> {
    if position + BATCH_HEADER_BYTES as u64 > log.bytes {
        return Ok(None);
    }
    let header = read_exact(log.file, log.path, position, BATCH_HEADER_BYTES).await?;
    Ok(BatchHeader::parse(&header).ok().and_then(|header| {
        let size = header.size_bytes();
        let whole = size <= SCAN_BATCH_BYTES_MAX && position + size as u64 <= log.bytes;
        (whole && header.last_offset() == last_offset).then_some(position + size as u64)
    }))
}

/// Walks the headers of the batches from `from` that end below the
/// recovery point (see [`HeaderWalk`]), indexing them and rebuilding their
/// epochs; returns where the full scan starts and the scanner for it.
async fn walk_headers<'a>(
    log: &LogFile<'_>,
    from: u64,
    recovery_point: Offset,
    scanner: Scanner<'a>,
    epochs: &mut EpochRecovery,
    rebuilt: &mut RebuiltIndexes,
) -> Result<(u64, Scanner<'a>), StorageError> {
    let mut walk = HeaderWalk::new(
        scanner,
        from,
        log.bytes,
        recovery_point,
        SCAN_BATCH_BYTES_MAX,
    );
    // Each read holds at least one whole header, which the walk either
    // steps over or stops at.
    let reads_max = log.bytes / BATCH_HEADER_BYTES as u64 + 1;
    for _ in 0..reads_max {
        let WalkStep::Read { position, len } = walk.step() else {
            break;
        };
        let bytes = read_exact(log.file, log.path, position, len).await?;
        #[cfg(test)]
        tests::RECOVERY_READS.with_borrow_mut(|reads| {
            reads.push((
                log.path.to_owned(),
                tests::ReadKind::Walk,
                position..position + len as u64,
            ))
        });
        walk.feed(position, &bytes, |position, header| {
            epochs.on_header(header);
            rebuilt.on_batch(BatchPlacement {
                position,
                last_offset: header.last_offset(),
                max_timestamp: header.max_timestamp(),
            });
        });
    }
    assert!(
        matches!(walk.step(), WalkStep::Trusted { .. }),
        "every read moves the walk on"
    );
    Ok(walk.into_scanner())
}

/// Feeds `[from, size)` of a log to `scanner`; returns why it stopped early.
async fn scan_file(
    file: &DmaFile,
    path: &Path,
    from: u64,
    size: u64,
    scanner: &mut Scanner<'_>,
    mut visit: impl FnMut(u64, &BatchView<'_>),
) -> Result<Option<ScanStop>, StorageError> {
    let mut position = from;
    let mut needed = SCAN_CHUNK_BYTES;
    while position < size {
        let want = (needed.max(SCAN_CHUNK_BYTES) as u64).min(size - position);
        let bytes = read_exact(file, path, position, want as usize).await?;
        #[cfg(test)]
        tests::RECOVERY_READS.with_borrow_mut(|reads| {
            reads.push((
                path.to_owned(),
                tests::ReadKind::Scan,
                position..position + want,
            ))
        });
        let at_end = position + want == size;
        let outcome = scanner.scan(position, &bytes, at_end, &mut visit);
        position += outcome.valid_bytes as u64;
        match outcome.end {
            ScanEnd::Exhausted => needed = SCAN_CHUNK_BYTES,
            ScanEnd::NeedMore { batch_bytes } if batch_bytes <= SCAN_BATCH_BYTES_MAX => {
                needed = batch_bytes
            }
            ScanEnd::NeedMore { batch_bytes } => {
                let error = brook_engine::log::batch::BatchError::LengthOutOfBounds {
                    declared: batch_bytes as i64,
                    min: 0,
                    max: SCAN_BATCH_BYTES_MAX as i64,
                };
                return Ok(Some(ScanStop::InvalidBatch { position, error }));
            }
            ScanEnd::Invalid(stop) => return Ok(Some(stop)),
        }
    }
    Ok(None)
}

fn placement(position: u64, batch: &BatchView<'_>) -> BatchPlacement {
    BatchPlacement {
        position,
        last_offset: batch.last_offset(),
        max_timestamp: batch.max_timestamp(),
    }
}

/// Replaces an index file with exactly `bytes`, synced.
async fn write_index(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let file = create_dma(path).await?;
    let mut appender = PageAppender::new(
        file.clone(),
        path.to_owned(),
        0,
        Vec::new(),
        ChunkSizing::INDEX,
    );
    appender.append(&[bytes]);
    appender.write_all().await?;
    file.truncate(bytes.len() as u64)
        .await
        .map_err(io_error("trimming", path))?;
    file.fdatasync().await.map_err(io_error("syncing", path))?;
    file.close_rc().await.map_err(io_error("closing", path))?;
    Ok(())
}

/// Builds the in-memory segment: active (appenders resume at the end of each
/// file) if it ends the log, sealed otherwise.
async fn into_segment(
    dir: &Path,
    base: Offset,
    scan: SegmentScan,
    active: bool,
    now_ms: i64,
) -> Result<Segment, StorageError> {
    let log_path = segment_path(dir, base, SegmentFileKind::Log);
    let index_path = segment_path(dir, base, SegmentFileKind::Index);
    let time_path = segment_path(dir, base, SegmentFileKind::TimeIndex);
    let largest_timestamp = scan.indexer.max_timestamp();
    let state = if active {
        let carry = read_partial_page(&scan.log_file, &log_path, scan.log_bytes).await?;
        let index_appender = |path: PathBuf, bytes: &[u8], file| {
            let len = bytes.len() as u64;
            PageAppender::new(
                file,
                path,
                len,
                bytes[align_down(len) as usize..].to_vec(),
                ChunkSizing::INDEX,
            )
        };
        let offset_file = open_dma(&index_path, true).await?;
        let time_file = open_dma(&time_path, true).await?;
        SegmentState::Open(Box::new(ActiveSegment {
            log: PageAppender::new(
                scan.log_file.clone(),
                log_path.clone(),
                scan.log_bytes,
                carry,
                ChunkSizing::LOG,
            ),
            offset_index: index_appender(index_path, scan.offset_entries.as_bytes(), offset_file),
            time_index: index_appender(time_path, scan.time_entries.as_bytes(), time_file),
            indexer: scan.indexer,
            offset_entries: scan.offset_entries,
            time_entries: scan.time_entries,
            created_ms: now_ms,
            first_batch_max_timestamp: scan.first_batch_max_timestamp,
            synced_bytes: scan.log_bytes,
            sealing: false,
            seal_started: false,
        }))
    } else {
        SegmentState::Sealed(Box::new(SealedIndexes {
            offset: SealedIndex {
                file: open_dma(&index_path, false).await?,
                path: index_path,
                summary: BlockSummary::of(&scan.offset_entries),
            },
            time: SealedIndex {
                file: open_dma(&time_path, false).await?,
                path: time_path,
                summary: BlockSummary::of(&scan.time_entries),
            },
            by_position: BlockSummary::of_by(&scan.offset_entries, position_key),
            plain_log: std::cell::RefCell::new(None),
        }))
    };
    Ok(Segment {
        base_offset: base,
        next_offset: scan.next_offset,
        log_bytes: scan.log_bytes,
        log_file: scan.log_file,
        log_path,
        largest_timestamp: if largest_timestamp.0 >= 0 {
            largest_timestamp
        } else {
            TimestampMs::NONE
        },
        state,
    })
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::ops::Range;
    use std::path::PathBuf;

    use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
    use brook_engine::log::config::LogConfig;
    use brook_engine::types::{LeaderEpoch, TimestampMs};

    use super::Path;
    use crate::runtime::block_on;
    use crate::storage::files::SYNCED_DIRECTORIES;
    use crate::storage::partition_log::{PartitionLog, RecoveryHints};

    /// How recovery read a range of a `.log`.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub(super) enum ReadKind {
        /// For the batch headers below the recovery point.
        Walk,
        /// For whole batches, CRCs checked.
        Scan,
    }

    thread_local! {
        /// The `.log` ranges this thread's recoveries read.
        pub(super) static RECOVERY_READS: RefCell<Vec<(PathBuf, ReadKind, Range<u64>)>> =
            const { RefCell::new(Vec::new()) };
    }

    /// A power loss cannot be simulated here: this checks that creating a
    /// partition syncs the entries of its directory and of its first files.
    #[test]
    fn a_new_partition_syncs_its_directory_and_its_parent() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().to_owned();
        let dir = root.join("new-0");
        block_on(async move {
            let log = PartitionLog::open(&dir, LogConfig::default(), RecoveryHints::default(), 0)
                .await
                .unwrap();
            let synced = SYNCED_DIRECTORIES.take();
            assert!(synced.contains(&root), "the parent: {synced:?}");
            assert!(synced.contains(&dir), "the partition directory: {synced:?}");
            log.close().await.unwrap();
        });
    }

    fn batch_of(value_bytes: usize, timestamp: i64) -> Vec<u8> {
        let record = NewRecord::value(vec![7u8; value_bytes], TimestampMs(timestamp));
        encode_batch(&[record], &BatchOptions::default())
    }

    /// What recovery read of a `.log`, by kind, in order.
    fn reads_of(path: &Path, kind: ReadKind) -> Vec<Range<u64>> {
        RECOVERY_READS.with_borrow(|reads| {
            reads
                .iter()
                .filter(|(read, read_kind, _)| read == path && *read_kind == kind)
                .map(|(_, _, range)| range.clone())
                .collect()
        })
    }

    /// What a recovery from a recovery point read.
    struct Recovered {
        /// Where the first batch not below the point starts.
        trusted: u64,
        /// The reads of the header walk.
        walked: Vec<Range<u64>>,
    }

    impl Recovered {
        fn walked_bytes(&self) -> u64 {
            self.walked.iter().map(|read| read.end - read.start).sum()
        }
    }

    /// Appends `count` batches of `batch_value_bytes`, syncs after the first
    /// `synced` (the recovery point is the offset after them), closes; then
    /// reopens as after a crash, with the index files if `keep_indexes`, and
    /// checks that the scan read the `.log` once from the first batch not
    /// below the point to its end.
    fn recover(
        count: usize,
        synced: usize,
        batch_value_bytes: usize,
        keep_indexes: bool,
    ) -> Recovered {
        let root = tempfile::tempdir().unwrap();
        let dir = root.path().join("p-0");
        let log_path = dir.join("00000000000000000000.log");
        let config = LogConfig {
            index_interval_bytes: 4096,
            ..LogConfig::default()
        };
        block_on(async move {
            let log = PartitionLog::open(&dir, config.clone(), RecoveryHints::default(), 0)
                .await
                .unwrap();
            let (mut recovery_point, mut trusted) = (None, 0);
            for i in 0..count {
                if i == synced {
                    log.flush().await.unwrap();
                    recovery_point = Some(log.recovery_point());
                    trusted = log.size_bytes();
                }
                let bytes = batch_of(batch_value_bytes, 1_700_000_000_000 + i as i64);
                log.append(&bytes, LeaderEpoch(0), 0).await.unwrap();
            }
            let end = log.log_end_offset();
            log.close().await.unwrap();
            if !keep_indexes {
                std::fs::remove_file(log_path.with_extension("index")).unwrap();
                std::fs::remove_file(log_path.with_extension("timeindex")).unwrap();
            }
            RECOVERY_READS.take();
            let hints = RecoveryHints {
                recovery_point,
                ..RecoveryHints::default()
            };
            let log = PartitionLog::open(&dir, config, hints, 0).await.unwrap();
            assert_eq!(log.log_end_offset(), end);
            let file_bytes = std::fs::metadata(&log_path).unwrap().len();
            log.close().await.unwrap();
            assert!(trusted > file_bytes / 2, "a point in the middle");
            let scanned = reads_of(&log_path, ReadKind::Scan);
            assert_eq!(scanned.first().map(|read| read.start), Some(trusted));
            // Each read starts at the first batch the one before did not hold whole.
            assert!(
                scanned
                    .windows(2)
                    .all(|pair| pair[0].start < pair[1].start && pair[1].start <= pair[0].end),
                "one pass: {scanned:?}"
            );
            assert_eq!(scanned.last().map(|read| read.end), Some(file_bytes));
            Recovered {
                trusted,
                walked: reads_of(&log_path, ReadKind::Walk),
            }
        })
    }

    /// Only the bytes from the first batch not below the recovery point on
    /// are scanned (CRCs checked); below it, recovery reads headers: from
    /// the last index entry below the point when the index files hold one,
    /// else from the start, one page per header once batches are large.
    #[test]
    fn recovery_scans_only_from_the_recovery_point() {
        let whole_indexes = recover(200, 150, 20 << 10, true);
        // The last entry below the point names the batch just before it:
        // the walk starts at the point and has nothing to read.
        assert_eq!(whole_indexes.walked, Vec::<Range<u64>>::new());

        let no_indexes = recover(200, 150, 20 << 10, false);
        assert_eq!(no_indexes.walked[0].start, 0, "from the start");
        assert!(
            no_indexes.walked_bytes() >= no_indexes.trusted,
            "small batches are read through"
        );

        let large_batches = recover(60, 40, 100 << 10, false);
        // One window, then a page or two for each later header.
        assert!(
            large_batches.walked.len() <= 40,
            "{:?}",
            large_batches.walked
        );
        assert!(
            large_batches.walked_bytes() < (1 << 20) + 40 * 8192,
            "{} of {} bytes read",
            large_batches.walked_bytes(),
            large_batches.trusted
        );
    }
}
