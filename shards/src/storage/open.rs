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
//!
//! This file holds the order of the steps and the types they share; each
//! step lives in a submodule: [`check`] trusts a segment from its index
//! files, [`scan`] recovers one batch by batch from its `.log`,
//! [`recovery_point`] finds where that scan starts in the segment holding the
//! recovery point, and [`index_files`] reads and writes the index files.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use brook_engine::log::batch::{BatchHeader, BatchView};
use brook_engine::log::config::LogConfig;
use brook_engine::log::epoch_cache::LeaderEpochCache;
use brook_engine::log::file_name::{SegmentFileKind, parse_segment_file_name};
use brook_engine::log::index::{BlockSummary, OffsetIndexEntry, TimeIndexEntry, position_key};
use brook_engine::log::indexer::{BatchPlacement, SegmentIndexer};
use brook_engine::log::recovery::ScanStop;
use brook_engine::types::{LeaderEpoch, Offset, TimestampMs};
use glommio::io::DmaFile;
use zerocopy::IntoBytes;

use crate::storage::appender::{ChunkSizing, PageAppender, align_down};
use crate::storage::cleaned_segment::recover_interrupted_swap;
use crate::storage::error::{StorageError, io_error};
use crate::storage::files::{
    FileAccess, open_dma, read_optional_text, read_partial_page, release, segment_path,
    sync_directory, write_atomically,
};
use crate::storage::partition_log::{RecoveryHints, delete_segment_files};
use crate::storage::segment::{ActiveSegment, SealedIndex, SealedIndexes, Segment, SegmentState};

mod check;
mod index_files;
mod recovery_point;
mod scan;
#[cfg(test)]
mod tests;

use check::check_segment;
use scan::scan_segment;

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

/// A segment's `.log` while it is recovered.
struct LogFile<'a> {
    file: &'a DmaFile,
    path: &'a Path,
    /// Its size on disk.
    bytes: u64,
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
        let index_appender = |path: PathBuf, bytes: &[u8]| {
            let len = bytes.len() as u64;
            PageAppender::new(
                FileAccess::OnDemand,
                path,
                len,
                bytes[align_down(len) as usize..].to_vec(),
                ChunkSizing::INDEX,
            )
        };
        for path in [&index_path, &time_path] {
            release(open_dma(path, true).await?, path).await?;
        }
        SegmentState::Open(Box::new(ActiveSegment {
            log: PageAppender::new(
                FileAccess::Open(scan.log_file.clone()),
                log_path.clone(),
                scan.log_bytes,
                carry,
                ChunkSizing::LOG,
            ),
            offset_index: index_appender(index_path, scan.offset_entries.as_bytes()),
            time_index: index_appender(time_path, scan.time_entries.as_bytes()),
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
        ranges: crate::storage::segment::RangeReads::default(),
    })
}
