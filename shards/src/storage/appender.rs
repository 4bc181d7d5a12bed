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

use std::collections::VecDeque;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use glommio::io::DmaBuffer;

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
}

impl ChunkSizing {
    /// Log files: chunks grow to 1 MiB under load, where this disk reaches
    /// its sequential bandwidth, with two writes in flight (four measured
    /// ~15% slower here: extending writes serialise on the inode in io_uring's
    /// workers); 1 MiB of written tail stays readable from memory.
    pub const LOG: ChunkSizing = ChunkSizing {
        chunk_bytes_min: 16 << 10,
        chunk_bytes_max: 1 << 20,
        writes_in_flight_max: 2,
        cache_bytes_max: 1 << 20,
        eager_partial_writes: true,
    };
    /// Index files grow by a few bytes per 4 KiB of log.
    pub const INDEX: ChunkSizing = ChunkSizing {
        chunk_bytes_min: 4 << 10,
        chunk_bytes_max: 64 << 10,
        writes_in_flight_max: 2,
        cache_bytes_max: 0,
        eager_partial_writes: false,
    };
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
    /// The file's logical length once this write (and those before) complete.
    pub end: u64,
}

impl Write {
    pub async fn execute(&self) -> Result<(), StorageError> {
        let expected = self.buffer.len();
        let file = self.file.get(&self.path).await?;
        let written = file
            .write_rc_at(self.buffer.clone(), self.position)
            .await
            .map_err(|error| StorageError::io("writing", &self.path, error));
        let released = release(file, &self.path).await;
        let written = written?;
        released?;
        if written != expected {
            let short = std::io::Error::new(
                std::io::ErrorKind::WriteZero,
                format!("wrote {written} of {expected} bytes"),
            );
            return Err(StorageError::io("writing", &self.path, short));
        }
        Ok(())
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
            end: chunk.end(),
        };
        self.in_flight.push_back(InFlight { chunk, done: false });
        Some(write)
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

    /// Keeps a written chunk for tail reads, and recycles what leaves.
    fn retire(&mut self, chunk: Chunk) {
        self.cache_bytes += chunk.buffer.len();
        self.cache.push_back(chunk);
        while self.cache_bytes > self.sizing.cache_bytes_max {
            let Some(evicted) = self.cache.pop_front() else {
                break;
            };
            self.cache_bytes -= evicted.buffer.len();
            recycle(evicted);
        }
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
            let sizing = ChunkSizing {
                chunk_bytes_min: 8192,
                chunk_bytes_max: 16384,
                writes_in_flight_max: 3,
                cache_bytes_max: 64 << 10,
                eager_partial_writes: true,
            };
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
    fn written_only_advances_over_a_completed_prefix() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().to_owned();
        block_on(async move {
            let sizing = ChunkSizing {
                chunk_bytes_min: 4096,
                chunk_bytes_max: 4096,
                writes_in_flight_max: 4,
                cache_bytes_max: 0,
                eager_partial_writes: true,
            };
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
