//! Appending to a file through O_DIRECT pages (io_uring, no page cache).
//!
//! Appends are copied once, into 4 KiB-aligned DMA chunks. A chunk is written
//! whole pages at a time at its page-aligned file position. Full chunks end on
//! a page boundary and never overlap anything, so several are written at once.
//! When the disk is idle, the open chunk goes out partially filled: its last
//! page is written padded with zeros and its bytes are carried into the next
//! chunk, which rewrites that page (as Redpanda's segment appender does). A
//! chunk that starts with a carried page waits until every earlier write has
//! completed, so a page is never overtaken by an older version of itself
//! (io_uring does not order completions).
//!
//! Written chunks stay in a small cache so readers of the tail get their bytes
//! from memory: O_DIRECT writes leave nothing in the page cache.
//!
//! A log file is also reserved ahead of its appends (`fallocate`, in steps
//! that grow with the file), so writes land on allocated blocks inside the
//! file's size. ext4 takes such a write without blocking, where an appending
//! one (which allocates and moves the size) makes io_uring hand it to a
//! worker thread, and an fdatasync after it has no size change to write.
//! Measured with fio on this machine's disk (8 files, 8 KiB O_DIRECT writes,
//! each followed by fdatasync): write + sync p50 0.37 + 0.79 ms appending,
//! 0.16 + 0.42 ms into reserved space. The reserve past the last append is
//! cut off when the file is trimmed at a seal or close, and recovery reads
//! it as the zeros after the last batch.

use std::collections::VecDeque;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use futures::future::try_join_all;
use glommio::io::{DmaBuffer, DmaFile};

use crate::storage::bytes::LogBytes;
use crate::storage::error::StorageError;
use crate::storage::files::{FileAccess, release};
use crate::storage::pool;

/// The O_DIRECT alignment Brook writes with (the page size of every device it
/// supports; glommio reports 512 or 4096).
pub const PAGE_BYTES: u64 = 4096;

pub(crate) fn align_down(value: u64) -> u64 {
    value & !(PAGE_BYTES - 1)
}

pub(crate) fn align_up(value: u64) -> u64 {
    align_down(value + PAGE_BYTES - 1)
}

/// How large chunks are, how many are written at once, and how many written
/// bytes stay cached.
#[derive(Clone, Copy, Debug)]
pub struct ChunkSizing {
    /// Smallest chunk: what a trickle of small appends costs in memory.
    pub chunk_bytes_min: usize,
    /// Largest chunk, and so the largest single write.
    pub chunk_bytes_max: usize,
    /// Writes in flight at once.
    pub writes_in_flight_max: usize,
    /// Written bytes kept for tail reads (0 for index files).
    pub cache_bytes_max: usize,
    /// Whether a partly filled chunk is written as soon as the disk is idle
    /// (the log: appends wait on it), or only when the file is flushed for a
    /// seal or close (indexes: rebuilt from the log after a crash anyway, so
    /// writing each new entry's page would only cost small writes).
    pub eager_partial_writes: bool,
    /// Whether space is reserved ahead of the appends (see the module).
    pub reserve_ahead: bool,
}

impl ChunkSizing {
    /// Log files: chunks grow to 1 MiB under load, where this disk reaches
    /// its sequential bandwidth, with two writes in flight (four measured
    /// ~15% slower here: extending writes serialise on the inode in io_uring's
    /// workers); 8 MiB of written tail stays readable from memory (within
    /// the shard's [`SHARD_CACHE_BYTES_MAX`]). Under acks=all at 280k 1 KiB
    /// records/s over 8 partitions, a consumer fell behind a 1 MiB cache
    /// (a partition writes ~36 MB/s, and its bytes become readable only
    /// once synced, milliseconds after they left the cache's newest end),
    /// read from the disk the writes kept busy, and consumed 105–126 MB/s
    /// of the 287 produced; with 8 MiB it keeps up.
    pub const LOG: ChunkSizing = ChunkSizing {
        chunk_bytes_min: 16 << 10,
        chunk_bytes_max: 1 << 20,
        writes_in_flight_max: 2,
        cache_bytes_max: 8 << 20,
        eager_partial_writes: true,
        reserve_ahead: true,
    };
    /// Index files grow by a few bytes per 4 KiB of log.
    pub const INDEX: ChunkSizing = ChunkSizing {
        chunk_bytes_min: 4 << 10,
        chunk_bytes_max: 64 << 10,
        writes_in_flight_max: 2,
        cache_bytes_max: 0,
        eager_partial_writes: false,
        reserve_ahead: false,
    };
}

/// Written tail bytes all of a shard's appenders may keep cached: past it,
/// an appender retiring a chunk gives up its own oldest ones (down to one).
/// Ten thousand partitions written round-robin hold a chunk or two of at
/// least 16 KiB each, ~300 MiB: at 256 MiB their lagging consumer lost
/// tails it still had to read and fell back on the disk.
pub const SHARD_CACHE_BYTES_MAX: usize = 512 << 20;

thread_local! {
    /// Bytes in the caches of this thread's (shard's) appenders.
    static SHARD_CACHE_BYTES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    /// The bound on them: [`SHARD_CACHE_BYTES_MAX`] but in tests.
    static SHARD_CACHE_BUDGET: std::cell::Cell<usize> =
        const { std::cell::Cell::new(SHARD_CACHE_BYTES_MAX) };
}

fn shard_cache_add(bytes: usize) {
    SHARD_CACHE_BYTES.with(|total| total.set(total.get() + bytes));
}

fn shard_cache_remove(bytes: usize) {
    SHARD_CACHE_BYTES.with(|total| total.set(total.get().saturating_sub(bytes)));
}

fn shard_cache_bytes() -> usize {
    SHARD_CACHE_BYTES.with(std::cell::Cell::get)
}

/// The reserve grows by steps that double with it between these bounds: an
/// idle partition holds at most the smallest past its data, and a busy one
/// takes a `fallocate` every 16 MiB.
const RESERVE_STEP_MIN: u64 = 64 << 10;
const RESERVE_STEP_MAX: u64 = 16 << 20;

/// How far to reserve a file of `len` appended bytes of which `reserved` are
/// reserved, if the reserve runs short: once less than half a step remains,
/// to a step past `len`; never past `limit` (the segment size) rounded up to
/// a page. A file holding less than the smallest step reserves nothing: ten
/// thousand partitions written a few records each would pay a `fallocate`
/// apiece (measured: 2.6 MB/s round-robin over 10,000 instead of 3.7).
pub(crate) fn reserve_target(len: u64, reserved: u64, limit: u64) -> Option<u64> {
    let step = reserved.clamp(RESERVE_STEP_MIN, RESERVE_STEP_MAX);
    if len < RESERVE_STEP_MIN || len + step / 2 <= reserved {
        return None;
    }
    let target = (align_up(len) + step).min(align_up(limit));
    (target > reserved && target > len).then_some(target)
}

/// A file's reserved space, tracked from the appends' side.
#[derive(Debug)]
struct Reserve {
    /// The file's size on disk is at least this, on allocated blocks.
    reserved: u64,
    running: bool,
}

/// One `fallocate` growing a file's reserve, taken from an appender by its
/// writer.
#[derive(Debug)]
pub(crate) struct Reservation {
    file: FileAccess,
    path: PathBuf,
    pub size: u64,
}

impl Reservation {
    pub async fn execute(&self) -> Result<(), StorageError> {
        let file = self.file.get(&self.path).await?;
        let reserved = file
            .pre_allocate(self.size, false)
            .await
            .map_err(|error| StorageError::io("reserving space in", &self.path, error));
        let released = release(file, &self.path).await;
        reserved?;
        released
    }
}

/// A chunk still being filled.
#[derive(Debug)]
struct OpenChunk {
    buffer: DmaBuffer,
    /// Page-aligned file position of the chunk's first byte.
    position: u64,
    filled: usize,
    /// Starts with a page carried from an earlier partial write.
    carried: bool,
}

/// A chunk handed to (or done with) a write: `buffer` is its bytes padded to
/// whole pages, `filled` the logical bytes.
#[derive(Clone, Debug)]
struct Chunk {
    buffer: Rc<DmaBuffer>,
    position: u64,
    filled: usize,
    carried: bool,
    /// The buffer has its allocated length (was not trimmed to a partial
    /// write), so the pool can hand it out again.
    whole: bool,
}

impl Chunk {
    fn logical(&self) -> Range<u64> {
        self.position..self.position + self.filled as u64
    }

    fn end(&self) -> u64 {
        self.position + self.filled as u64
    }
}

/// One chunk write, taken from an appender by its writer.
#[derive(Debug)]
pub(crate) struct Write {
    file: FileAccess,
    path: PathBuf,
    buffer: Rc<DmaBuffer>,
    position: u64,
    /// Written as two writes, the first page apart (see [`Write::write_to`]).
    split: bool,
    /// The file's logical length once this write (and those before) complete.
    pub end: u64,
}

impl Write {
    pub async fn execute(&self) -> Result<(), StorageError> {
        let file = self.file.get(&self.path).await?;
        let written = self.write_to(&file).await;
        let released = release(file, &self.path).await;
        written?;
        released
    }

    /// Writes the buffer; one that starts with a carried page and goes on
    /// into reserved space is written as two writes, the page and the rest.
    /// ext4 counts a write as an overwrite (done without blocking, under a
    /// shared lock) only if one extent maps all of it, and the carried page's
    /// block was converted from reserved (unwritten) to written by its first
    /// write: whole, the write would span two extents and io_uring would
    /// hand it to a worker thread (measured: ~60% of the log writes at 50k
    /// records/s of acks=all). Splitting costs a copy of the chunk, at most
    /// once per partial write; past the reserve the write extends the file
    /// and is punted anyway, so it stays whole.
    async fn write_to(&self, file: &DmaFile) -> Result<(), StorageError> {
        let page = PAGE_BYTES as usize;
        let pieces = if self.split {
            let bytes = self.buffer.as_bytes();
            [(0, &bytes[..page]), (page, &bytes[page..])]
                .map(|(at, piece)| {
                    let mut copy = file.alloc_dma_buffer(piece.len());
                    copy.as_bytes_mut().copy_from_slice(piece);
                    (self.position + at as u64, Rc::new(copy))
                })
                .to_vec()
        } else {
            vec![(self.position, self.buffer.clone())]
        };
        try_join_all(pieces.into_iter().map(|(position, buffer)| async move {
            let expected = buffer.len();
            let written = file
                .write_rc_at(buffer, position)
                .await
                .map_err(|error| StorageError::io("writing", &self.path, error))?;
            if written != expected {
                let short = std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    format!("wrote {written} of {expected} bytes at {position}"),
                );
                return Err(StorageError::io("writing", &self.path, short));
            }
            Ok(())
        }))
        .await
        .map(drop)
    }
}

/// A dispatched chunk and whether its write completed.
#[derive(Debug)]
struct InFlight {
    chunk: Chunk,
    done: bool,
}

/// The append state of one file. Owned by one shard; changed only in
/// synchronous code (never across an await).
#[derive(Debug)]
pub(crate) struct PageAppender {
    file: FileAccess,
    path: PathBuf,
    /// Logical length: every byte appended.
    len: u64,
    /// Bytes handed to writes.
    dispatched: u64,
    /// Bytes whose writes, and all writes before them, completed.
    written: u64,
    open: Option<OpenChunk>,
    /// Full chunks (ending on a page boundary) waiting for a write.
    full: VecDeque<Chunk>,
    in_flight: VecDeque<InFlight>,
    /// The partial last page while no chunk is open.
    carry: Vec<u8>,
    cache: VecDeque<Chunk>,
    cache_bytes: usize,
    sizing: ChunkSizing,
    next_chunk_bytes: usize,
    /// `None` when the sizing reserves nothing, or a reservation failed
    /// (the filesystem cannot; appends then extend the file as they go).
    reserve: Option<Reserve>,
}

impl PageAppender {
    /// An appender continuing a file of `len` bytes whose last partial page
    /// holds `carry` (`carry.len() == len % PAGE_BYTES`).
    pub fn new(
        file: FileAccess,
        path: PathBuf,
        len: u64,
        carry: Vec<u8>,
        sizing: ChunkSizing,
    ) -> PageAppender {
        assert_eq!(
            carry.len() as u64,
            len % PAGE_BYTES,
            "carry holds exactly the partial last page"
        );
        PageAppender {
            file,
            path,
            len,
            dispatched: len,
            written: len,
            open: None,
            full: VecDeque::new(),
            in_flight: VecDeque::new(),
            carry,
            cache: VecDeque::new(),
            cache_bytes: 0,
            sizing,
            next_chunk_bytes: sizing.chunk_bytes_min,
            reserve: sizing.reserve_ahead.then_some(Reserve {
                reserved: len,
                running: false,
            }),
        }
    }

    pub fn file(&self) -> &FileAccess {
        &self.file
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn written(&self) -> u64 {
        self.written
    }

    /// Bytes appended but not yet written.
    pub fn unwritten(&self) -> u64 {
        self.len - self.written
    }

    /// No write is pending or in flight.
    pub fn is_idle(&self) -> bool {
        self.written == self.len
    }

    /// Copies `parts`, one after the other, to the end of the file's
    /// in-memory tail. Passing a record's pieces together (a rewritten header
    /// and its records) lets the chunk be sized for all of them, so one
    /// append becomes one write when the disk is idle.
    pub fn append(&mut self, parts: &[&[u8]]) {
        let mut remaining: usize = parts.iter().map(|part| part.len()).sum();
        for part in parts {
            let mut bytes = *part;
            while !bytes.is_empty() {
                let chunk = self.open_chunk(remaining);
                let room = chunk.buffer.len() - chunk.filled;
                let count = room.min(bytes.len());
                chunk.buffer.as_bytes_mut()[chunk.filled..chunk.filled + count]
                    .copy_from_slice(&bytes[..count]);
                chunk.filled += count;
                let full = chunk.filled == chunk.buffer.len();
                self.len += count as u64;
                remaining -= count;
                bytes = &bytes[count..];
                if full {
                    self.queue_full_chunk();
                }
            }
        }
    }

    fn queue_full_chunk(&mut self) {
        let OpenChunk {
            buffer,
            position,
            filled,
            carried,
        } = self.open.take().expect("the chunk just filled is open");
        self.next_chunk_bytes =
            (buffer.len().next_power_of_two() * 2).min(self.sizing.chunk_bytes_max);
        self.full.push_back(Chunk {
            buffer: Rc::new(buffer),
            position,
            filled,
            carried,
            whole: true,
        });
    }

    fn open_chunk(&mut self, wanted: usize) -> &mut OpenChunk {
        if self.open.is_none() {
            let position = align_down(self.len);
            let needed = self.carry.len() + wanted;
            let size_class = needed.next_power_of_two().clamp(
                self.next_chunk_bytes,
                self.sizing.chunk_bytes_max.max(self.next_chunk_bytes),
            );
            // End the chunk on a multiple of its size class (so once chunks
            // reach the largest size every write is naturally aligned), but
            // never so early that an append that fits one chunk would need
            // a second write.
            let to_boundary = size_class - (position % size_class as u64) as usize;
            let spills_anyway = needed > size_class;
            let capacity = if to_boundary >= needed || spills_anyway {
                to_boundary
            } else {
                to_boundary + size_class
            };
            let mut buffer = pool::take(capacity);
            let carried = std::mem::take(&mut self.carry);
            buffer.as_bytes_mut()[..carried.len()].copy_from_slice(&carried);
            self.open = Some(OpenChunk {
                buffer,
                position,
                filled: carried.len(),
                carried: !carried.is_empty(),
            });
        }
        self.open.as_mut().expect("opened above")
    }

    /// The next chunk to write, if one may go now: full chunks while fewer
    /// than the limit are in flight, the partly filled open chunk only when
    /// nothing is in flight (and, unless the sizing writes partial chunks
    /// eagerly, only when `flushing`), and a chunk starting with a carried
    /// page only after every earlier write completed.
    pub fn next_write(&mut self, flushing: bool) -> Option<Write> {
        if self.in_flight.len() >= self.sizing.writes_in_flight_max {
            return None;
        }
        let partial_allowed = self.sizing.eager_partial_writes || flushing;
        let chunk = match self.full.front() {
            Some(front) if front.carried && !self.in_flight.is_empty() => return None,
            Some(_) => self.full.pop_front().expect("checked"),
            None if partial_allowed && self.in_flight.is_empty() && self.len > self.dispatched => {
                self.seal_open_chunk()
            }
            None => return None,
        };
        self.dispatched = chunk.end();
        let write = Write {
            file: self.file.clone(),
            path: self.path.clone(),
            buffer: chunk.buffer.clone(),
            position: chunk.position,
            split: chunk.carried
                && chunk.buffer.len() > PAGE_BYTES as usize
                && self.reserve.as_ref().is_some_and(|reserve| {
                    reserve.reserved >= chunk.position + chunk.buffer.len() as u64
                }),
            end: chunk.end(),
        };
        self.in_flight.push_back(InFlight { chunk, done: false });
        Some(write)
    }

    /// The `fallocate` to run now, if the reserve ahead of the appends runs
    /// short (one at a time; the file never reserves past `limit`). Only
    /// appends waiting to be written ask for one, so an idle partition (a
    /// log just opened, or one of ten thousand written now and then) costs
    /// no call and no disk space.
    pub fn next_reservation(&mut self, limit: u64) -> Option<Reservation> {
        if self.is_idle() {
            return None;
        }
        let reserve = self.reserve.as_mut().filter(|reserve| !reserve.running)?;
        let size = reserve_target(self.len, reserve.reserved, limit)?;
        reserve.running = true;
        Some(Reservation {
            file: self.file.clone(),
            path: self.path.clone(),
            size,
        })
    }

    /// Records how the reservation of `size` bytes ended; after a failure
    /// the file reserves nothing more.
    pub fn complete_reservation(&mut self, size: u64, succeeded: bool) {
        if !succeeded {
            self.reserve = None;
            return;
        }
        if let Some(reserve) = &mut self.reserve {
            reserve.reserved = reserve.reserved.max(size);
            reserve.running = false;
        }
    }

    /// A reservation is running: the file must not be trimmed until it ends.
    pub fn is_reserving(&self) -> bool {
        self.reserve.as_ref().is_some_and(|reserve| reserve.running)
    }

    /// Pads the open chunk's last page with zeros for writing and carries
    /// that page's bytes into the next chunk.
    fn seal_open_chunk(&mut self) -> Chunk {
        let OpenChunk {
            mut buffer,
            position,
            filled,
            carried,
        } = self
            .open
            .take()
            .expect("unwritten bytes are in the open chunk");
        let padded = align_up(filled as u64) as usize;
        buffer.as_bytes_mut()[filled..padded].fill(0);
        buffer.trim_to_size(padded);
        let partial = align_down(filled as u64) as usize;
        self.carry = buffer.as_bytes()[partial..filled].to_vec();
        self.next_chunk_bytes = padded
            .next_power_of_two()
            .clamp(self.sizing.chunk_bytes_min, self.sizing.chunk_bytes_max);
        Chunk {
            buffer: Rc::new(buffer),
            position,
            filled,
            carried,
            whole: false,
        }
    }

    /// Records that the write ending at `end` completed; the written length
    /// advances over every completed write with no incomplete one before it.
    pub fn complete(&mut self, end: u64) {
        if let Some(entry) = self
            .in_flight
            .iter_mut()
            .find(|entry| entry.chunk.end() == end)
        {
            entry.done = true;
        }
        while self.in_flight.front().is_some_and(|entry| entry.done) {
            let chunk = self.in_flight.pop_front().expect("checked").chunk;
            self.written = chunk.end();
            self.retire(chunk);
        }
    }

    /// Writes everything appended, one write at a time (for callers that own
    /// the appender outright, such as an index rebuild).
    pub async fn write_all(&mut self) -> Result<(), StorageError> {
        while let Some(write) = self.next_write(true) {
            write.execute().await?;
            self.complete(write.end);
        }
        debug_assert!(self.is_idle());
        Ok(())
    }

    /// Keeps a written chunk for tail reads, and recycles what leaves: past
    /// this file's bound, or past the shard's while more than this chunk
    /// is cached.
    fn retire(&mut self, chunk: Chunk) {
        let bytes = chunk.buffer.len();
        self.cache_bytes += bytes;
        shard_cache_add(bytes);
        self.cache.push_back(chunk);
        while self.cache_bytes > self.sizing.cache_bytes_max
            || (shard_cache_bytes() > SHARD_CACHE_BUDGET.with(std::cell::Cell::get)
                && self.cache.len() > 1)
        {
            let Some(evicted) = self.cache.pop_front() else {
                break;
            };
            self.cache_bytes -= evicted.buffer.len();
            shard_cache_remove(evicted.buffer.len());
            recycle(evicted);
        }
    }

    /// The position from which the cache holds the written bytes (the
    /// written end when it holds none).
    pub fn cached_from(&self) -> u64 {
        self.cache
            .front()
            .map_or(self.written, |chunk| chunk.position.min(self.written))
    }

    /// The written bytes `range` from memory, if the cache still holds all of them.
    pub fn cached(&self, range: Range<u64>) -> Option<Vec<LogBytes>> {
        if range.end > self.written {
            return None;
        }
        let mut pieces = Vec::new();
        let mut cursor = range.start;
        while cursor < range.end {
            // Later chunks repeat the carried page with more bytes: prefer them.
            let chunk = self
                .cache
                .iter()
                .rev()
                .find(|chunk| chunk.logical().contains(&cursor))?;
            let end = chunk.end().min(range.end);
            let start = (cursor - chunk.position) as usize;
            pieces.push(LogBytes::Buffer {
                buffer: chunk.buffer.clone(),
                start,
                len: (end - cursor) as usize,
            });
            cursor = end;
        }
        Some(pieces)
    }

    /// Drops cached chunks (the segment is no longer the tail, or is idle).
    pub fn drop_cache(&mut self) {
        shard_cache_remove(self.cache_bytes);
        self.cache_bytes = 0;
        for chunk in std::mem::take(&mut self.cache) {
            recycle(chunk);
        }
    }

    /// Heap held by buffers (their full capacity) and the carried page.
    pub fn heap_bytes(&self) -> usize {
        let open = self.open.as_ref().map_or(0, |chunk| chunk.buffer.len());
        let queued: usize = self.full.iter().map(|chunk| chunk.buffer.len()).sum();
        let in_flight: usize = self
            .in_flight
            .iter()
            .map(|entry| entry.chunk.buffer.len())
            .sum();
        open + queued + in_flight + self.cache_bytes + self.carry.capacity()
    }
}

impl Drop for PageAppender {
    fn drop(&mut self) {
        shard_cache_remove(self.cache_bytes);
    }
}

/// Returns a whole (never trimmed) chunk buffer nobody reads any more to
/// the pool.
fn recycle(chunk: Chunk) {
    if !chunk.whole {
        return;
    }
    if let Ok(buffer) = Rc::try_unwrap(chunk.buffer) {
        pool::give(buffer);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::block_on;
    use glommio::io::OpenOptions;

    async fn appender(dir: &Path, sizing: ChunkSizing) -> PageAppender {
        crate::storage::device::prepare_directory(dir)
            .await
            .unwrap();
        let path = dir.join("file");
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .dma_open(&path)
            .await
            .unwrap();
        PageAppender::new(FileAccess::Open(Rc::new(file)), path, 0, Vec::new(), sizing)
    }

    /// Chunks between `min` and `max` bytes, partial ones written eagerly,
    /// nothing reserved.
    fn eager_sizing(min: usize, max: usize, in_flight: usize, cache: usize) -> ChunkSizing {
        ChunkSizing {
            chunk_bytes_min: min,
            chunk_bytes_max: max,
            writes_in_flight_max: in_flight,
            cache_bytes_max: cache,
            eager_partial_writes: true,
            reserve_ahead: false,
        }
    }

    /// Writes everything, several writes at a time, completing them in
    /// reverse order to stand for io_uring's unordered completions.
    async fn flush(appender: &mut PageAppender) {
        while appender.written() < appender.len() {
            let mut writes = Vec::new();
            while let Some(write) = appender.next_write(true) {
                writes.push(write);
            }
            assert!(
                !writes.is_empty(),
                "progress is always possible once earlier writes complete"
            );
            for write in writes.iter().rev() {
                write.execute().await.unwrap();
                appender.complete(write.end);
            }
        }
    }

    #[test]
    fn partial_pages_are_rewritten_and_the_file_matches_the_appends() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        block_on(async move {
            let sizing = eager_sizing(8192, 16384, 3, 64 << 10);
            let mut appender = appender(&path, sizing).await;
            let mut expected = Vec::new();
            for round in 0..40u32 {
                let bytes: Vec<u8> = (0..(round * 977 % 20_000) + 1)
                    .map(|i| (i * 31 + round) as u8)
                    .collect();
                appender.append(&[&bytes]);
                expected.extend_from_slice(&bytes);
                if round % 3 != 0 {
                    flush(&mut appender).await;
                    assert_eq!(appender.written(), expected.len() as u64);
                }
            }
            flush(&mut appender).await;
            let on_disk = std::fs::read(appender.path()).unwrap();
            assert_eq!(on_disk.len() as u64, align_up(expected.len() as u64));
            assert_eq!(&on_disk[..expected.len()], &expected[..]);
            assert!(
                on_disk[expected.len()..].iter().all(|byte| *byte == 0),
                "padding is zeros"
            );
            let tail = expected.len() as u64 - 5000..expected.len() as u64;
            let cached: Vec<u8> = appender
                .cached(tail.clone())
                .unwrap()
                .iter()
                .flat_map(|b| b.to_vec())
                .collect();
            assert_eq!(&cached[..], &expected[tail.start as usize..]);
            assert!(appender.cached(0..10).is_none(), "old bytes left the cache");
        });
    }

    #[test]
    fn the_reserve_grows_in_doubling_steps_ahead_of_the_appends() {
        const GIB: u64 = 1 << 30;
        // (appended, reserved, segment limit) -> new reserve
        let cases = [
            ((0, 0, GIB), None),
            ((100, 0, GIB), None),
            ((64 << 10, 0, GIB), Some(128 << 10)),
            ((65 << 10, 0, GIB), Some((68 << 10) + (64 << 10))),
            ((64 << 10, 128 << 10, GIB), None),
            ((100 << 10, 128 << 10, GIB), Some((100 << 10) + (128 << 10))),
            ((100 << 20, 100 << 20, GIB), Some((116 << 20) as u64)),
            ((91 << 20, 100 << 20, GIB), None),
            ((1500, 0, 1500), None),
            ((70 << 10, 0, 70 << 10), Some(72 << 10)),
            ((72 << 10, 72 << 10, 70 << 10), None),
            ((GIB - 10, GIB - (1 << 20), GIB), Some(GIB)),
            ((GIB + 5, GIB, GIB), None),
        ];
        for ((len, reserved, limit), expected) in cases {
            assert_eq!(
                reserve_target(len, reserved, limit),
                expected,
                "len {len}, reserved {reserved}, limit {limit}"
            );
        }
    }

    #[test]
    fn only_appends_waiting_for_a_write_ask_for_a_reservation() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        block_on(async move {
            let mut log = appender(&path, ChunkSizing::LOG).await;
            log.append(&[&[4u8; 100]]);
            assert!(log.next_reservation(1 << 30).is_none(), "small: nothing");
            log.append(&[&[5u8; 64 << 10]]);
            flush(&mut log).await;
            assert!(log.next_reservation(1 << 30).is_none(), "idle: nothing");
            log.append(&[&[5u8; 100]]);
            let reservation = log.next_reservation(1 << 30).expect("an append waits");
            assert_eq!(reservation.size, (68 << 10) + (64 << 10));
            assert!(log.next_reservation(1 << 30).is_none(), "one at a time");
            assert!(log.is_reserving());
            reservation.execute().await.unwrap();
            log.complete_reservation(reservation.size, true);
            assert!(!log.is_reserving());
            let on_disk = std::fs::metadata(log.path()).unwrap().len();
            assert_eq!(on_disk, reservation.size, "the file's size is the reserve");
            flush(&mut log).await;
            log.append(&[&[6u8; 40 << 10]]);
            let more = log
                .next_reservation(1 << 30)
                .expect("less than half a step left");
            log.complete_reservation(more.size, false);
            log.append(&[&[7u8; 100 << 10]]);
            assert!(
                log.next_reservation(1 << 30).is_none(),
                "a file that failed to reserve stops trying"
            );
        });
    }

    #[test]
    fn a_shard_over_its_cache_budget_keeps_only_each_files_newest_chunk() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        block_on(async move {
            let sizing = eager_sizing(4096, 4096, 1, 64 << 10);
            SHARD_CACHE_BUDGET.with(|budget| budget.set(6 * 4096));
            let mut first = appender(&path.join("a"), sizing).await;
            let mut second = appender(&path.join("b"), sizing).await;
            first.append(&[&[1u8; 8 * 4096]]);
            flush(&mut first).await;
            assert_eq!(
                shard_cache_bytes(),
                6 * 4096,
                "the first file alone fills it"
            );
            assert!(first.cached(2 * 4096..8 * 4096).is_some());
            assert!(first.cached(4096..2 * 4096).is_none());
            second.append(&[&[2u8; 4096]]);
            flush(&mut second).await;
            assert!(
                second.cached(0..4096).is_some(),
                "a file keeps its newest chunk"
            );
            second.append(&[&[3u8; 4096]]);
            flush(&mut second).await;
            assert!(second.cached(0..4096).is_none(), "its older ones go");
            assert!(second.cached(4096..2 * 4096).is_some());
            drop(first);
            assert_eq!(
                shard_cache_bytes(),
                4096,
                "a dropped file gives its cache back"
            );
            second.drop_cache();
            assert_eq!(shard_cache_bytes(), 0);
            SHARD_CACHE_BUDGET.with(|budget| budget.set(SHARD_CACHE_BYTES_MAX));
        });
    }

    #[test]
    fn written_only_advances_over_a_completed_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        block_on(async move {
            let sizing = eager_sizing(4096, 4096, 4, 0);
            let mut appender = appender(&path, sizing).await;
            appender.append(&[&[7u8; 3 * 4096 + 100]]);
            let writes: Vec<Write> = std::iter::from_fn(|| appender.next_write(false)).collect();
            assert_eq!(
                writes.len(),
                3,
                "three full chunks; the partial one waits for an idle disk"
            );
            appender.complete(writes[2].end);
            appender.complete(writes[1].end);
            assert_eq!(appender.written(), 0);
            appender.complete(writes[0].end);
            assert_eq!(appender.written(), 3 * 4096);
            let partial = appender.next_write(false).expect("the disk is idle now");
            assert_eq!(partial.end, 3 * 4096 + 100);
            appender.append(&[&[8u8; 4096]]);
            assert!(
                appender.next_write(false).is_none(),
                "a chunk starting with the carried page waits"
            );
            appender.complete(partial.end);
            assert!(appender.next_write(false).is_some());
        });
    }
}
