//! A cleaned segment: written beside the log under `.cleaned` names, then
//! swapped in for the segments it replaces, so that a crash at any moment
//! leaves either every old segment or the new one (Kafka's
//! `replaceSegments`, with one change: the old segments are set aside
//! *before* the swap commits, so recovery never has to guess which segments
//! a swap replaced).
//!
//! The swap of a segment at base `B` replacing segments `B, S1, S2…`:
//!
//! 1. `B.log.cleaned`, `B.index.cleaned`, `B.timeindex.cleaned` are written,
//!    synced, and the directory synced.
//! 2. `S1…`'s files are renamed to `*.deleted`; directory synced.
//! 3. `B.index.cleaned` and `B.timeindex.cleaned` become `.swap`; directory
//!    synced; then `B.log.cleaned` becomes `B.log.swap` (the commit);
//!    directory synced.
//! 4. The `.swap` files are renamed over `B`'s old files and the in-memory
//!    segments swapped, in one step without awaiting; directory synced.
//! 5. The `*.deleted` files are removed; directory synced.
//!
//! [`recover_interrupted_swap`] runs when a log opens: while a
//! `*.log.cleaned` exists the swap had not committed (leftover `.cleaned`
//! and `.swap` files are deleted and `.deleted` ones renamed back);
//! otherwise it had, and is finished (`.swap` files renamed, `.deleted`
//! ones removed). A partition has at most one swap under way, and each
//! ends with its directory synced, so leftovers always belong to one swap.
//!
//! Readers are not disturbed: they hold the old files' descriptors (which
//! outlive renames and unlinks), and the old segments' page-cache
//! descriptors are opened before their files are renamed.

use std::path::{Path, PathBuf};
use std::rc::Rc;

use brook_engine::log::file_name::{SegmentFileKind, parse_segment_file_name, segment_file_name};
use brook_engine::log::index::{BlockSummary, OffsetIndexEntry, TimeIndexEntry, position_key};
use brook_engine::log::indexer::{BatchPlacement, SegmentIndexer};
use brook_engine::types::{Offset, TimestampMs};
use glommio::io::DmaFile;
use zerocopy::IntoBytes;

use crate::storage::appender::{ChunkSizing, PageAppender};
use crate::storage::error::{StorageError, io_error};
use crate::storage::files::{FileAccess, create_dma, segment_path, sync_directory, trim_and_sync};
use crate::storage::partition_log::PartitionLog;
use crate::storage::segment::{SealedIndex, SealedIndexes, Segment, SegmentState};

/// Suffix of a cleaned segment's files while they are written.
pub(crate) const CLEANED_SUFFIX: &str = "cleaned";
/// Suffix of a cleaned segment's files once the swap is committed.
pub(crate) const SWAP_SUFFIX: &str = "swap";
/// Suffix of a replaced segment's files until the swap is over.
pub(crate) const DELETED_SUFFIX: &str = "deleted";

/// Writes of a cleaned segment: whole chunks as they fill, no tail cache
/// (nothing reads the segment before it is complete).
const CLEANED_SIZING: ChunkSizing = ChunkSizing {
    chunk_bytes_min: 64 << 10,
    chunk_bytes_max: 1 << 20,
    writes_in_flight_max: 1,
    cache_bytes_max: 0,
    eager_partial_writes: false,
    reserve_ahead: false,
};

/// `<base>.<extension>.<suffix>`.
fn suffixed_path(dir: &Path, base: Offset, kind: SegmentFileKind, suffix: &str) -> PathBuf {
    dir.join(format!("{}.{suffix}", segment_file_name(base, kind)))
}

/// A cleaned segment being written.
pub(crate) struct CleanedSegmentWriter {
    dir: PathBuf,
    base_offset: Offset,
    log: PageAppender,
    offset_index: PageAppender,
    time_index: PageAppender,
    indexer: SegmentIndexer,
    offset_entries: Vec<OffsetIndexEntry>,
    time_entries: Vec<TimeIndexEntry>,
    next_offset: Offset,
}

/// A cleaned segment written and synced under its `.cleaned` names.
pub(crate) struct CleanedSegment {
    pub base_offset: Offset,
    next_offset: Offset,
    pub log_bytes: u64,
    largest_timestamp: TimestampMs,
    log_file: Rc<DmaFile>,
    offset_file: Rc<DmaFile>,
    time_file: Rc<DmaFile>,
    offset_entries: Vec<OffsetIndexEntry>,
    time_entries: Vec<TimeIndexEntry>,
}

impl CleanedSegmentWriter {
    /// Creates the `.cleaned` files of a segment at `base_offset`.
    pub async fn create(
        dir: &Path,
        base_offset: Offset,
        index_interval_bytes: u64,
    ) -> Result<CleanedSegmentWriter, StorageError> {
        let appender = |kind| async move {
            let path = suffixed_path(dir, base_offset, kind, CLEANED_SUFFIX);
            let file = FileAccess::Open(create_dma(&path).await?);
            Ok::<_, StorageError>(PageAppender::new(file, path, 0, Vec::new(), CLEANED_SIZING))
        };
        Ok(CleanedSegmentWriter {
            dir: dir.to_owned(),
            base_offset,
            log: appender(SegmentFileKind::Log).await?,
            offset_index: appender(SegmentFileKind::Index).await?,
            time_index: appender(SegmentFileKind::TimeIndex).await?,
            indexer: SegmentIndexer::new(base_offset, index_interval_bytes),
            offset_entries: Vec::new(),
            time_entries: Vec::new(),
            next_offset: base_offset,
        })
    }

    /// Appends one batch and indexes it by the rule every segment follows.
    pub async fn append(
        &mut self,
        batch: &[u8],
        last_offset: Offset,
        max_timestamp: TimestampMs,
    ) -> Result<(), StorageError> {
        debug_assert!(
            last_offset >= self.next_offset,
            "batches arrive in offset order"
        );
        let position = self.log.len();
        self.log.append(&[batch]);
        let update = self.indexer.on_batch(BatchPlacement {
            position,
            last_offset,
            max_timestamp,
        });
        if let Some(entry) = update.offset_entry {
            self.offset_index.append(&[entry.as_bytes()]);
            self.offset_entries.push(entry);
        }
        if let Some(entry) = update.time_entry {
            self.time_index.append(&[entry.as_bytes()]);
            self.time_entries.push(entry);
        }
        self.next_offset = last_offset.next();
        for appender in [&mut self.log, &mut self.offset_index, &mut self.time_index] {
            write_full_chunks(appender).await?;
        }
        Ok(())
    }

    /// Writes the final time entry and everything buffered, trims and syncs
    /// the files, and syncs the directory (so the `.cleaned` files exist
    /// before any old segment is set aside).
    pub async fn finish(mut self) -> Result<CleanedSegment, StorageError> {
        if let Some(entry) = self.indexer.on_seal() {
            self.time_index.append(&[entry.as_bytes()]);
            self.time_entries.push(entry);
        }
        let mut files = Vec::with_capacity(3);
        for appender in [&mut self.log, &mut self.offset_index, &mut self.time_index] {
            appender.write_all().await?;
            let file = (
                appender.file().clone(),
                appender.path().to_owned(),
                appender.len(),
            );
            files.push(trim_and_sync(&file).await?);
        }
        sync_directory(&self.dir).await?;
        let [log_file, offset_file, time_file] =
            files.try_into().expect("three files in, three out");
        Ok(CleanedSegment {
            base_offset: self.base_offset,
            next_offset: self.next_offset,
            log_bytes: self.log.len(),
            largest_timestamp: self.indexer.max_timestamp(),
            log_file,
            offset_file,
            time_file,
            offset_entries: self.offset_entries,
            time_entries: self.time_entries,
        })
    }
}

async fn write_full_chunks(appender: &mut PageAppender) -> Result<(), StorageError> {
    while let Some(write) = appender.next_write(false) {
        write.execute().await?;
        appender.complete(write.end);
    }
    Ok(())
}

/// Removes a cleaned segment's files (an abandoned pass). Best effort: the
/// next open removes what is left.
pub(crate) fn discard_cleaned(dir: &Path, base_offset: Offset) {
    for kind in SegmentFileKind::ALL {
        for suffix in [CLEANED_SUFFIX, SWAP_SUFFIX] {
            let _ = std::fs::remove_file(suffixed_path(dir, base_offset, kind, suffix));
        }
    }
}

impl CleanedSegment {
    /// Gives the cleaned `.log` the modification time of `source` (the last
    /// segment it replaces), as Kafka does: retention falls back on it for
    /// a segment without timestamps. Best effort.
    pub fn keep_modified_time(&self, dir: &Path, source: &Path) {
        let path = suffixed_path(dir, self.base_offset, SegmentFileKind::Log, CLEANED_SUFFIX);
        let modified = std::fs::metadata(source).and_then(|meta| meta.modified());
        let file = std::fs::File::options().write(true).open(&path);
        if let (Ok(modified), Ok(file)) = (modified, file) {
            let _ = file.set_modified(modified);
        }
    }

    /// The in-memory segment, named by its final paths.
    fn into_segment(self, dir: &Path) -> Segment {
        let path = |kind| segment_path(dir, self.base_offset, kind);
        let sealed = SealedIndexes {
            offset: SealedIndex {
                file: self.offset_file,
                path: path(SegmentFileKind::Index),
                summary: BlockSummary::of(&self.offset_entries),
            },
            time: SealedIndex {
                file: self.time_file,
                path: path(SegmentFileKind::TimeIndex),
                summary: BlockSummary::of(&self.time_entries),
            },
            by_position: BlockSummary::of_by(&self.offset_entries, position_key),
        };
        Segment {
            base_offset: self.base_offset,
            next_offset: self.next_offset,
            log_bytes: self.log_bytes,
            log_file: self.log_file,
            log_path: path(SegmentFileKind::Log),
            largest_timestamp: if self.largest_timestamp.0 >= 0 {
                self.largest_timestamp
            } else {
                TimestampMs::NONE
            },
            state: SegmentState::Sealed(Box::new(sealed)),
            ranges: crate::storage::segment::RangeReads::default(),
        }
    }
}

/// One segment a cleaned segment replaces: found again by its base offset
/// and its file (a segment replaced meanwhile has another file).
#[derive(Clone, Debug)]
pub(crate) struct ReplacedSegment {
    pub base_offset: Offset,
    pub log_file: Rc<DmaFile>,
}

impl PartitionLog {
    /// Swaps `cleaned` in for `replaced` (consecutive sealed segments, the
    /// first at the cleaned segment's base). Returns false, with the cleaned
    /// files removed, if the log is closing or the segments changed
    /// meanwhile (retention deleted some). An IO error once old files are
    /// being set aside takes the log offline: its next open finishes or
    /// undoes the swap.
    pub(crate) async fn swap_in_cleaned(
        &self,
        cleaned: CleanedSegment,
        replaced: &[ReplacedSegment],
    ) -> Result<bool, StorageError> {
        let dir = self.dir();
        let base = cleaned.base_offset;
        let _permit = match self.inner.append_lock.acquire().await {
            Ok(permit) => permit,
            Err(_) => {
                discard_cleaned(&dir, base);
                return Ok(false);
            }
        };
        match self.prepare_swap(replaced) {
            Ok(true) => {}
            prepared => {
                discard_cleaned(&dir, base);
                return prepared;
            }
        }
        let result = self.commit_swap(&dir, cleaned, replaced).await;
        if let Err(error) = &result {
            tracing::error!(log = %self.inner.name, %error, "swapping in a cleaned segment failed; the log goes offline");
            self.inner.state.borrow_mut().fail(error);
        }
        result.map(|()| true)
    }

    /// Checks that `replaced` are still the log's segments, and opens their
    /// page-cache descriptors while their files still have their names.
    fn prepare_swap(&self, replaced: &[ReplacedSegment]) -> Result<bool, StorageError> {
        let state = self.inner.state.borrow();
        if state.check_usable().is_err() {
            return Ok(false);
        }
        let Some(first) = replaced
            .first()
            .and_then(|r| state.segment_slot(r.base_offset))
        else {
            return Ok(false);
        };
        let current = state.segments.get(first..first + replaced.len());
        let unchanged = current.is_some_and(|segments| {
            segments.iter().zip(replaced).all(|(segment, replaced)| {
                segment.is_sealed()
                    && segment.base_offset == replaced.base_offset
                    && Rc::ptr_eq(&segment.log_file, &replaced.log_file)
            })
        });
        // Never the last segment: the log keeps an active one.
        if !unchanged || first + replaced.len() >= state.segments.len() {
            return Ok(false);
        }
        for segment in &state.segments[first..first + replaced.len()] {
            segment.ranges.plain_log(&segment.log_path)?;
        }
        Ok(true)
    }

    /// Steps 2–5 of the swap (see the module's documentation).
    async fn commit_swap(
        &self,
        dir: &Path,
        cleaned: CleanedSegment,
        replaced: &[ReplacedSegment],
    ) -> Result<(), StorageError> {
        let base = cleaned.base_offset;
        let others: Vec<Offset> = replaced
            .iter()
            .map(|segment| segment.base_offset)
            .filter(|offset| *offset != base)
            .collect();
        for offset in &others {
            for kind in SegmentFileKind::ALL {
                let from = segment_path(dir, *offset, kind);
                rename_if_present(&from, &suffixed_path(dir, *offset, kind, DELETED_SUFFIX))?;
            }
        }
        sync_directory(dir).await?;
        for kind in [
            SegmentFileKind::Index,
            SegmentFileKind::TimeIndex,
            SegmentFileKind::Log,
        ] {
            let from = suffixed_path(dir, base, kind, CLEANED_SUFFIX);
            rename(&from, &suffixed_path(dir, base, kind, SWAP_SUFFIX))?;
            if kind != SegmentFileKind::TimeIndex {
                // The indexes are in place before the log commits the swap.
                sync_directory(dir).await?;
            }
        }
        for kind in SegmentFileKind::ALL {
            rename(
                &suffixed_path(dir, base, kind, SWAP_SUFFIX),
                &segment_path(dir, base, kind),
            )?;
        }
        self.replace_segments(cleaned.into_segment(dir), replaced.len());
        sync_directory(dir).await?;
        for offset in &others {
            for kind in SegmentFileKind::ALL {
                remove_if_present(&suffixed_path(dir, *offset, kind, DELETED_SUFFIX))?;
            }
        }
        sync_directory(dir).await
    }

    /// Puts `segment` in place of the `count` segments from its base offset.
    fn replace_segments(&self, segment: Segment, count: usize) {
        let mut state = self.inner.state.borrow_mut();
        let first = state
            .segment_slot(segment.base_offset)
            .expect("checked under the append lock");
        let removed: Vec<Segment> = state
            .segments
            .splice(first..first + count, [segment])
            .collect();
        debug_assert!(removed.iter().all(Segment::is_sealed));
    }
}

fn rename(from: &Path, to: &Path) -> Result<(), StorageError> {
    std::fs::rename(from, to).map_err(io_error("renaming", from))
}

fn rename_if_present(from: &Path, to: &Path) -> Result<(), StorageError> {
    match std::fs::rename(from, to) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        result => result.map_err(io_error("renaming", from)),
    }
}

fn remove_if_present(path: &Path) -> Result<(), StorageError> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        result => result.map_err(io_error("deleting", path)),
    }
}

/// Files left by a swap: `(file name without the suffix, suffix, path)`.
fn swap_leftovers(dir: &Path) -> Result<Vec<(String, &'static str, PathBuf)>, StorageError> {
    let mut leftovers = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io_error("listing", dir))? {
        let entry = entry.map_err(io_error("listing", dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        for suffix in [CLEANED_SUFFIX, SWAP_SUFFIX, DELETED_SUFFIX] {
            let Some(stem) = name.strip_suffix(suffix).and_then(|s| s.strip_suffix('.')) else {
                continue;
            };
            if parse_segment_file_name(stem).is_some() {
                leftovers.push((stem.to_owned(), suffix, entry.path()));
            }
        }
    }
    Ok(leftovers)
}

/// Finishes or undoes a swap a crash interrupted (see the module's
/// documentation). Runs before a log's segments are listed.
pub(crate) async fn recover_interrupted_swap(dir: &Path) -> Result<(), StorageError> {
    let leftovers = swap_leftovers(dir)?;
    if leftovers.is_empty() {
        return Ok(());
    }
    let uncommitted = leftovers.iter().any(|(stem, suffix, _)| {
        *suffix == CLEANED_SUFFIX
            && parse_segment_file_name(stem).is_some_and(|(_, kind)| kind == SegmentFileKind::Log)
    });
    for (stem, suffix, path) in &leftovers {
        let original = dir.join(stem);
        match (*suffix, uncommitted) {
            (DELETED_SUFFIX, true) | (SWAP_SUFFIX, false) => rename(path, &original)?,
            _ => remove_if_present(path)?,
        }
    }
    tracing::warn!(dir = %dir.display(), files = leftovers.len(), committed = !uncommitted, "completed a segment swap interrupted by a crash");
    sync_directory(dir).await
}
