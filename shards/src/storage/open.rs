//! Opening a partition log: find its segments, trust what a clean shutdown
//! or the recovery point vouches for, and scan the rest (S6).
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
use brook_engine::log::recovery::{ScanEnd, ScanStop, Scanner, is_write_padding};
use brook_engine::types::{Offset, TimestampMs};
use glommio::io::DmaFile;
use zerocopy::IntoBytes;

use crate::storage::appender::{ChunkSizing, PAGE_BYTES, PageAppender, align_down};
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
        if self.rebuild && batch.partition_leader_epoch().0 >= 0 {
            self.cache
                .assign(batch.partition_leader_epoch(), batch.base_offset());
        }
    }
}

pub(crate) async fn open_segments(
    dir: &Path,
    config: &LogConfig,
    hints: &RecoveryHints,
    now_ms: i64,
) -> Result<OpenedLog, StorageError> {
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
            scan_segment(dir, base, expected, config, &mut epochs, !is_last).await?
        } else {
            match check_segment(dir, base, config, &mut epochs, is_last).await? {
                Ok(scan) => (scan, false),
                Err(distrust) => {
                    let reason = match distrust {
                        Distrust::Index(reason) => reason,
                        Distrust::Log(stop) => stop.to_string(),
                    };
                    tracing::warn!(dir = %dir.display(), base = %base, %reason, "rebuilding segment indexes");
                    scan_segment(dir, base, expected, config, &mut epochs, !is_last).await?
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
    if !path.exists() {
        return Err(Distrust::Index(format!("{} is missing", path.display())));
    }
    let file = open_dma(path, false)
        .await
        .map_err(|error| Distrust::Index(error.to_string()))?;
    let bytes = async {
        let len = file.file_size().await.map_err(|error| {
            Distrust::Index(StorageError::io("sizing", path, error).to_string())
        })?;
        if len > bytes_max {
            return Err(Distrust::Index(format!(
                "{} holds {len} bytes, more than the {bytes_max} its segment allows",
                path.display()
            )));
        }
        read_exact(&file, path, 0, len as usize)
            .await
            .map_err(|error| Distrust::Index(error.to_string()))
    }
    .await;
    let _ = file.close_rc().await;
    let bytes = bytes?;
    let entries =
        entries_from_bytes::<E>(&bytes).map_err(|error| Distrust::Index(error.to_string()))?;
    Ok(entries.to_vec())
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
    if first_batch_max_timestamp.is_none() && log_bytes > 0 {
        let header = read_exact(
            &log_file,
            &log_path,
            0,
            brook_engine::log::batch::BATCH_HEADER_BYTES,
        )
        .await?;
        first_batch_max_timestamp = brook_engine::log::batch::BatchHeader::parse(&header)
            .ok()
            .map(|header| header.max_timestamp());
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

/// Scans a whole segment, truncating it after its last valid batch and
/// rewriting its index files (with the final time entry of a sealed segment
/// when `sealed` and nothing was cut). Returns the scan and whether bytes
/// were cut.
async fn scan_segment(
    dir: &Path,
    base: Offset,
    expected: Option<Offset>,
    config: &LogConfig,
    epochs: &mut EpochRecovery,
    sealed: bool,
) -> Result<(SegmentScan, bool), StorageError> {
    let log_path = segment_path(dir, base, SegmentFileKind::Log);
    let log_file = open_dma(&log_path, false).await?;
    let file_bytes = log_file
        .file_size()
        .await
        .map_err(io_error("sizing", &log_path))?;
    let checked_epochs = epochs.checked();
    let mut scanner = Scanner::new(
        base,
        Some(expected.unwrap_or(base)),
        config.cleanup_policy.contiguity(),
        checked_epochs.as_ref(),
    );
    let mut indexer = SegmentIndexer::new(base, config.index_interval_bytes);
    let (mut offset_entries, mut time_entries, mut first_batch_max_timestamp) =
        (Vec::new(), Vec::new(), None);
    let mut valid_bytes = 0;
    let stop = scan_file(
        &log_file,
        &log_path,
        0,
        file_bytes,
        &mut scanner,
        |position, batch| {
            if position == 0 {
                first_batch_max_timestamp = Some(batch.max_timestamp());
            }
            epochs.on_batch(batch);
            let update = indexer.on_batch(placement(position, batch));
            offset_entries.extend(update.offset_entry);
            time_entries.extend(update.time_entry);
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
    if sealed && !truncated {
        time_entries.extend(indexer.on_seal());
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
        offset_entries.as_bytes(),
    )
    .await?;
    write_index(
        &segment_path(dir, base, SegmentFileKind::TimeIndex),
        time_entries.as_bytes(),
    )
    .await?;
    let next_offset = scanner.next_offset().unwrap_or(base);
    let scan = SegmentScan {
        log_file,
        log_bytes: valid_bytes,
        next_offset,
        indexer,
        offset_entries,
        time_entries,
        first_batch_max_timestamp,
    };
    Ok((scan, truncated))
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
    use brook_engine::log::config::LogConfig;

    use crate::runtime::block_on;
    use crate::storage::files::SYNCED_DIRECTORIES;
    use crate::storage::partition_log::{PartitionLog, RecoveryHints};

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
}
