//! One segment in memory: its offsets, its `.log`, and its two indexes — held
//! in memory and appended through [`PageAppender`]s while the segment is
//! active, read one block at a time from the files once it is sealed.
//!
//! Lives on its partition's shard, inside the partition's `RefCell`d state:
//! nothing here awaits while borrowed; async lookups first copy out what they
//! need (an `Rc<DmaFile>` and a block range).

use std::cell::{Cell, RefCell};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use brook_engine::log::batch::BATCH_HEADER_BYTES;
use brook_engine::log::file_name::SegmentFileKind;
use brook_engine::log::index::{
    BlockSummary, IndexEntry, OffsetIndexEntry, TimeIndexEntry, entries_from_bytes, floor,
    floor_by, position_key,
};
use brook_engine::log::indexer::{BatchPlacement, SegmentIndexer};
use brook_engine::log::roll::ActiveSegmentState;
use brook_engine::types::{Offset, TimestampMs};
use glommio::io::DmaFile;
use zerocopy::IntoBytes;

use crate::storage::appender::{ChunkSizing, PageAppender, Write};
use crate::storage::bytes::LogBytes;
use crate::storage::error::{StorageError, io_error};
use crate::storage::files::{FileAccess, create_closed, create_dma, read_exact, segment_path};

/// A segment and what is known about it without reading its files.
#[derive(Debug)]
pub(crate) struct Segment {
    pub base_offset: Offset,
    /// The offset after the segment's last batch (`base_offset` when empty).
    pub next_offset: Offset,
    /// Logical size of the `.log` (appended bytes, written or not).
    pub log_bytes: u64,
    pub log_file: Rc<DmaFile>,
    pub log_path: PathBuf,
    /// Largest batch `maxTimestamp` (NONE when the segment has none).
    pub largest_timestamp: TimestampMs,
    pub state: SegmentState,
    /// What keeps a consumer's file ranges of this segment cheap.
    pub ranges: RangeReads,
}

#[derive(Debug)]
pub(crate) enum SegmentState {
    /// The active segment, or one being sealed.
    Open(Box<ActiveSegment>),
    Sealed(Box<SealedIndexes>),
}

/// The append side of a segment.
#[derive(Debug)]
pub(crate) struct ActiveSegment {
    pub log: PageAppender,
    pub offset_index: PageAppender,
    pub time_index: PageAppender,
    pub indexer: SegmentIndexer,
    pub offset_entries: Vec<OffsetIndexEntry>,
    pub time_entries: Vec<TimeIndexEntry>,
    pub created_ms: i64,
    pub first_batch_max_timestamp: Option<TimestampMs>,
    /// `.log` bytes covered by a completed fdatasync.
    pub synced_bytes: u64,
    /// Rolled: no more appends; the writer finishes its writes, trims its
    /// files to size and syncs them, then the segment becomes `Sealed`.
    pub sealing: bool,
    /// The writer has started trimming and syncing the rolled segment.
    pub seal_started: bool,
}

/// Which of a segment's files a write is for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum SegmentFile {
    Log,
    OffsetIndex,
    TimeIndex,
}

impl ActiveSegment {
    fn appender(&mut self, file: SegmentFile) -> &mut PageAppender {
        match file {
            SegmentFile::Log => &mut self.log,
            SegmentFile::OffsetIndex => &mut self.offset_index,
            SegmentFile::TimeIndex => &mut self.time_index,
        }
    }

    /// Every appended byte of every file is written.
    pub fn is_written(&self) -> bool {
        self.log.is_idle() && self.offset_index.is_idle() && self.time_index.is_idle()
    }
}

/// A sealed segment's index files: never in memory whole.
#[derive(Debug)]
pub(crate) struct SealedIndexes {
    pub offset: SealedIndex,
    pub time: SealedIndex,
    /// Block summary of the offset index keyed by position (for file ranges).
    pub by_position: BlockSummary,
}

/// What file ranges of a segment (zero-copy sends of its `.log`) reuse
/// from one read to the next.
#[derive(Debug, Default)]
pub(crate) struct RangeReads {
    /// A plain (page-cache) descriptor of the `.log` for sendfile/splice,
    /// opened on first use; shared (not duplicated) with the shard that
    /// sends a range and the pool thread that sends it.
    plain_log: RefCell<Option<Arc<std::fs::File>>>,
    /// The batch right after the last file range handed out: where a
    /// consumer reading on asks next, found then without an index block or
    /// header read. Its bytes never change: a sealed segment never does,
    /// and an active segment's ranges end below the high watermark, which
    /// no truncation cuts (a truncation reopens the log, with new segments).
    pub read_on: Cell<Option<BatchAt>>,
    /// Where the read-ahead asked for with the last range ended
    /// (`storage::read_ahead_span`).
    pub read_ahead_to: Cell<u64>,
}

/// A batch of a segment: its position and header facts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct BatchAt {
    pub position: u64,
    pub base_offset: Offset,
    pub last_offset: Offset,
    pub size: u64,
}

/// One sealed index file and the first key of each of its blocks.
#[derive(Debug)]
pub(crate) struct SealedIndex {
    pub file: Rc<DmaFile>,
    pub path: PathBuf,
    pub summary: BlockSummary,
}

/// An index block to read: copied out of the state so the read can await.
#[derive(Debug)]
pub(crate) struct BlockRead {
    file: Rc<DmaFile>,
    path: PathBuf,
    entries: Range<usize>,
}

impl BlockRead {
    /// Reads the block and returns its floor entry for `key`.
    pub async fn floor_by<E: IndexEntry>(
        self,
        key: i64,
        key_of: impl Fn(&E) -> i64,
    ) -> Result<Option<E>, StorageError> {
        self.read::<E>().await?.floor_by(key, key_of)
    }

    /// Reads the block's bytes (entries of type `E`).
    pub async fn read<E: IndexEntry>(self) -> Result<IndexBlock, StorageError> {
        let start = (self.entries.start * E::BYTES) as u64;
        let len = self.entries.len() * E::BYTES;
        let bytes = read_exact(&self.file, &self.path, start, len).await?;
        Ok(IndexBlock {
            file: Rc::downgrade(&self.file),
            path: self.path,
            entries: self.entries,
            bytes: bytes.to_vec(),
        })
    }

    /// Whether `block` holds this block's bytes (the same file, the same
    /// entries).
    pub fn is_in(&self, block: &IndexBlock) -> bool {
        block.entries == self.entries
            && block
                .file
                .upgrade()
                .is_some_and(|file| Rc::ptr_eq(&file, &self.file))
    }
}

/// An index block read from a sealed segment, kept so the next
/// lookup in the same block needs no read. Holds no descriptor: a segment
/// deleted meanwhile is simply not matched any more.
#[derive(Debug)]
pub(crate) struct IndexBlock {
    file: std::rc::Weak<DmaFile>,
    path: PathBuf,
    entries: Range<usize>,
    bytes: Vec<u8>,
}

impl IndexBlock {
    /// The block's floor entry for `key`.
    pub fn floor_by<E: IndexEntry>(
        &self,
        key: i64,
        key_of: impl Fn(&E) -> i64,
    ) -> Result<Option<E>, StorageError> {
        let entries =
            entries_from_bytes::<E>(&self.bytes).map_err(|error| StorageError::Corrupt {
                path: self.path.clone(),
                reason: error.to_string(),
            })?;
        Ok(floor_by(entries, key, key_of).map(|(_, entry)| entry))
    }
}

impl SealedIndex {
    pub fn block_for(&self, key: i64) -> Option<BlockRead> {
        self.block_in(&self.summary, key)
    }

    pub fn block_in(&self, summary: &BlockSummary, key: i64) -> Option<BlockRead> {
        summary.block_for(key).map(|entries| BlockRead {
            file: self.file.clone(),
            path: self.path.clone(),
            entries,
        })
    }
}

/// Where an offset's batch search starts in a segment.
#[derive(Debug)]
pub(crate) enum IndexLookup {
    Known(u64),
    /// A sealed segment's index block, and the size of its `.log`.
    Block {
        block: BlockRead,
        log_bytes: u64,
    },
}

impl IndexLookup {
    /// The position of the floor entry of `relative_offset` (0 if none).
    /// A block is read from disk at every lookup, after the checks of open:
    /// an entry past the log's end means the file was damaged since, and is
    /// an error rather than a walk that silently finds nothing.
    pub async fn offset_position(self, relative_offset: i64) -> Result<u64, StorageError> {
        match self {
            IndexLookup::Known(position) => Ok(position),
            IndexLookup::Block { block, log_bytes } => {
                let path = block.path.clone();
                let position = block
                    .floor_by::<OffsetIndexEntry>(relative_offset, OffsetIndexEntry::key)
                    .await?
                    .map_or(0, |entry| u64::from(entry.position.get()));
                if position > 0 && position >= log_bytes {
                    return Err(StorageError::Corrupt {
                        path,
                        reason: format!(
                            "entry for relative offset {relative_offset} points at {position}, past the log's {log_bytes} bytes"
                        ),
                    });
                }
                Ok(position)
            }
        }
    }
}

impl Segment {
    /// Creates the files of a new, empty active segment.
    pub async fn create(
        dir: &Path,
        base_offset: Offset,
        now_ms: i64,
        index_interval_bytes: u64,
    ) -> Result<Segment, StorageError> {
        let log_path = segment_path(dir, base_offset, SegmentFileKind::Log);
        let log_file = create_dma(&log_path).await?;
        let index_path = segment_path(dir, base_offset, SegmentFileKind::Index);
        let time_path = segment_path(dir, base_offset, SegmentFileKind::TimeIndex);
        create_closed(&index_path).await?;
        create_closed(&time_path).await?;
        let index_appender = |path| {
            PageAppender::new(
                FileAccess::OnDemand,
                path,
                0,
                Vec::new(),
                ChunkSizing::INDEX,
            )
        };
        let active = ActiveSegment {
            log: PageAppender::new(
                FileAccess::Open(log_file.clone()),
                log_path.clone(),
                0,
                Vec::new(),
                ChunkSizing::LOG,
            ),
            offset_index: index_appender(index_path),
            time_index: index_appender(time_path),
            indexer: SegmentIndexer::new(base_offset, index_interval_bytes),
            offset_entries: Vec::new(),
            time_entries: Vec::new(),
            created_ms: now_ms,
            first_batch_max_timestamp: None,
            synced_bytes: 0,
            sealing: false,
            seal_started: false,
        };
        Ok(Segment {
            base_offset,
            next_offset: base_offset,
            log_bytes: 0,
            log_file,
            log_path,
            largest_timestamp: TimestampMs::NONE,
            state: SegmentState::Open(Box::new(active)),
            ranges: RangeReads::default(),
        })
    }

    pub fn active(&self) -> Option<&ActiveSegment> {
        match &self.state {
            SegmentState::Open(active) => Some(active),
            SegmentState::Sealed(_) => None,
        }
    }

    pub fn active_mut(&mut self) -> Option<&mut ActiveSegment> {
        match &mut self.state {
            SegmentState::Open(active) => Some(active),
            SegmentState::Sealed(_) => None,
        }
    }

    pub fn is_sealed(&self) -> bool {
        matches!(self.state, SegmentState::Sealed(_))
    }

    pub fn is_sealing(&self) -> bool {
        self.active().is_some_and(|active| active.sealing)
    }

    /// `.log` bytes whose writes completed.
    pub fn written_bytes(&self) -> u64 {
        self.active()
            .map_or(self.log_bytes, |active| active.log.written())
    }

    /// `.log` bytes known to be on stable storage.
    pub fn synced_bytes(&self) -> u64 {
        match &self.state {
            SegmentState::Sealed(_) => self.log_bytes,
            SegmentState::Open(active) => active.synced_bytes,
        }
    }

    pub fn roll_state(&self) -> Option<ActiveSegmentState> {
        let active = self.active()?;
        Some(ActiveSegmentState {
            base_offset: self.base_offset,
            size_bytes: self.log_bytes,
            created_ms: active.created_ms,
            first_batch_max_timestamp: active.first_batch_max_timestamp,
            offset_index_entries: active.offset_entries.len() as u64,
            time_index_entries: active.time_entries.len() as u64,
        })
    }

    /// Appends one batch whose (rewritten) header is `header` and whose
    /// remaining bytes are `rest`, and indexes it.
    pub fn append_batch(
        &mut self,
        header: &[u8; BATCH_HEADER_BYTES],
        rest: &[u8],
        last_offset: Offset,
        max_timestamp: TimestampMs,
    ) {
        let position = self.log_bytes;
        let active = match &mut self.state {
            SegmentState::Open(active) if !active.sealing => active,
            _ => unreachable!("appends only reach the active segment"),
        };
        active.log.append(&[header, rest]);
        let update = active.indexer.on_batch(BatchPlacement {
            position,
            last_offset,
            max_timestamp,
        });
        if let Some(entry) = update.offset_entry {
            active.offset_index.append(&[entry.as_bytes()]);
            active.offset_entries.push(entry);
        }
        if let Some(entry) = update.time_entry {
            active.time_index.append(&[entry.as_bytes()]);
            active.time_entries.push(entry);
        }
        if position == 0 {
            active.first_batch_max_timestamp = Some(max_timestamp);
        }
        self.log_bytes += (header.len() + rest.len()) as u64;
        self.next_offset = last_offset.next();
        self.largest_timestamp = self.largest_timestamp.max(max_timestamp);
    }

    /// Stops appends: writes the final time entry and hands the segment to
    /// the writer for trimming and syncing.
    pub fn begin_sealing(&mut self) {
        let SegmentState::Open(active) = &mut self.state else {
            return;
        };
        if active.sealing {
            return;
        }
        if let Some(entry) = active.indexer.on_seal() {
            active.time_index.append(&[entry.as_bytes()]);
            active.time_entries.push(entry);
        }
        active.log.drop_cache();
        active.sealing = true;
    }

    /// The next write this segment's files may start now. Index pages are
    /// only written partly filled when the segment is sealing or `closing`.
    pub fn next_write(&mut self, closing: bool) -> Option<(SegmentFile, Write)> {
        let active = self.active_mut()?;
        let flushing = closing || active.sealing;
        [
            SegmentFile::Log,
            SegmentFile::OffsetIndex,
            SegmentFile::TimeIndex,
        ]
        .into_iter()
        .find_map(|file| {
            active
                .appender(file)
                .next_write(flushing)
                .map(|write| (file, write))
        })
    }

    pub fn complete_write(&mut self, file: SegmentFile, end: u64) {
        if let Some(active) = self.active_mut() {
            active.appender(file).complete(end);
        }
    }

    /// Drops the tail cache of an active segment nobody appended to lately.
    pub fn release_cache(&mut self) {
        if let Some(active) = self.active_mut() {
            active.log.drop_cache();
        }
    }

    /// Turns a sealing segment whose files were trimmed and synced into a
    /// sealed one, which keeps its index files open for lookups.
    pub fn finish_sealing(&mut self, [offset_file, time_file]: [Rc<DmaFile>; 2]) {
        let SegmentState::Open(active) = &self.state else {
            return;
        };
        debug_assert!(active.sealing);
        let sealed = SealedIndexes {
            offset: SealedIndex {
                file: offset_file,
                path: active.offset_index.path().to_owned(),
                summary: BlockSummary::of(&active.offset_entries),
            },
            time: SealedIndex {
                file: time_file,
                path: active.time_index.path().to_owned(),
                summary: BlockSummary::of(&active.time_entries),
            },
            by_position: BlockSummary::of_by(&active.offset_entries, position_key),
        };
        self.state = SegmentState::Sealed(Box::new(sealed));
    }

    /// Where the search for `offset` starts: the position of the floor index
    /// entry, from memory or from one index block.
    pub fn index_lookup(&self, offset: Offset) -> IndexLookup {
        let relative = offset.0 - self.base_offset.0;
        match &self.state {
            SegmentState::Open(active) => IndexLookup::Known(
                floor(&active.offset_entries, relative)
                    .map_or(0, |(_, entry)| u64::from(entry.position.get())),
            ),
            SegmentState::Sealed(sealed) => match sealed.offset.block_for(relative) {
                Some(block) => IndexLookup::Block {
                    block,
                    log_bytes: self.log_bytes,
                },
                None => IndexLookup::Known(0),
            },
        }
    }

    /// The offset to start a timestamp search from: the time index floor.
    pub fn time_lookup(&self, timestamp: TimestampMs) -> Result<Option<Offset>, BlockRead> {
        match &self.state {
            SegmentState::Open(active) => Ok(floor(&active.time_entries, timestamp.0)
                .map(|(_, entry)| entry.offset(self.base_offset))),
            SegmentState::Sealed(sealed) => match sealed.time.block_for(timestamp.0) {
                Some(block) => Err(block),
                None => Ok(None),
            },
        }
    }

    /// Written bytes `range` from the active segment's tail cache.
    pub fn cached(&self, range: Range<u64>) -> Option<Vec<LogBytes>> {
        match &self.state {
            SegmentState::Open(active) => active.log.cached(range),
            SegmentState::Sealed(_) => None,
        }
    }

    /// Heap held by this segment (buffers, in-memory indexes, summaries).
    pub fn heap_bytes(&self) -> usize {
        let own = size_of::<Segment>() + self.log_path.capacity();
        own + match &self.state {
            SegmentState::Open(active) => {
                size_of::<ActiveSegment>()
                    + active.log.heap_bytes()
                    + active.offset_index.heap_bytes()
                    + active.time_index.heap_bytes()
                    + active.offset_entries.capacity() * OffsetIndexEntry::BYTES
                    + active.time_entries.capacity() * TimeIndexEntry::BYTES
            }
            SegmentState::Sealed(sealed) => {
                size_of::<SealedIndexes>()
                    + sealed.offset.summary.heap_bytes()
                    + sealed.time.summary.heap_bytes()
                    + sealed.by_position.heap_bytes()
            }
        }
    }
}

impl RangeReads {
    /// The plain descriptor of `log_path` for zero-copy sends.
    pub fn plain_log(&self, log_path: &Path) -> Result<Arc<std::fs::File>, StorageError> {
        if let Some(file) = self.plain_log.borrow().as_ref() {
            return Ok(file.clone());
        }
        let file = Arc::new(std::fs::File::open(log_path).map_err(io_error("opening", log_path))?);
        *self.plain_log.borrow_mut() = Some(file.clone());
        Ok(file)
    }
}
