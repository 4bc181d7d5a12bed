//! Appending to a file through O_DIRECT pages (io_uring, no page cache).
//!
//! Appends are copied once, into 4 KiB-aligned DMA chunks. A chunk is written
//! whole pages at a time at its page-aligned file position; when a write has to
//! go out before its last page is full, that partial page is written padded
//! with zeros and its bytes are carried into the next chunk, which rewrites the
//! page on the next write (as Redpanda's segment appender does). Writes of one
//! dispatch never overlap, and a dispatch is only taken once the previous one
//! completed, so the page rewritten by a later write can never be overtaken by
//! an earlier one (io_uring does not order completions).
//!
//! Written chunks stay in a small cache so readers of the tail get their bytes
//! from memory: O_DIRECT writes leave nothing in the page cache.

use std::collections::VecDeque;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use futures::future::try_join_all;
use glommio::io::{DmaBuffer, DmaFile};

use crate::storage::bytes::LogBytes;
use crate::storage::error::StorageError;

/// The O_DIRECT alignment Brook writes with (the page size of every device it
/// supports; glommio reports 512 or 4096).
pub const PAGE_BYTES: u64 = 4096;

pub(crate) fn align_down(value: u64) -> u64 {
    value & !(PAGE_BYTES - 1)
}

pub(crate) fn align_up(value: u64) -> u64 {
    align_down(value + PAGE_BYTES - 1)
}

/// How large chunks are and how many written bytes stay cached.
#[derive(Clone, Copy, Debug)]
pub struct ChunkSizing {
    /// Smallest chunk: what a trickle of small appends costs in memory.
    pub chunk_bytes_min: usize,
    /// Largest chunk, and so the largest single write.
    pub chunk_bytes_max: usize,
    /// Written bytes kept for tail reads (0 for index files).
    pub cache_bytes_max: usize,
}

impl ChunkSizing {
    /// Log files: writes grow to 1 MiB under load, where this disk reaches its
    /// sequential bandwidth; 1 MiB of written tail stays readable from memory.
    pub const LOG: ChunkSizing = ChunkSizing {
        chunk_bytes_min: 16 << 10,
        chunk_bytes_max: 1 << 20,
        cache_bytes_max: 1 << 20,
    };
    /// Index files grow by a few bytes per 4 KiB of log.
    pub const INDEX: ChunkSizing = ChunkSizing {
        chunk_bytes_min: 4 << 10,
        chunk_bytes_max: 64 << 10,
        cache_bytes_max: 0,
    };
}

/// A chunk still being filled.
#[derive(Debug)]
struct OpenChunk {
    buffer: DmaBuffer,
    /// Page-aligned file position of the chunk's first byte.
    position: u64,
    filled: usize,
}

/// A chunk handed to (or done with) a write: `buffer` is its bytes padded to
/// whole pages, `filled` the logical bytes.
#[derive(Clone, Debug)]
pub(crate) struct Chunk {
    buffer: Rc<DmaBuffer>,
    position: u64,
    filled: usize,
}

impl Chunk {
    fn logical(&self) -> Range<u64> {
        self.position..self.position + self.filled as u64
    }
}

/// Chunks to write, taken from an appender by its writer.
#[derive(Debug)]
pub(crate) struct Dispatch {
    file: Rc<DmaFile>,
    path: PathBuf,
    chunks: Vec<Chunk>,
    /// The file's logical length once these writes complete.
    pub end: u64,
}

impl Dispatch {
    /// Writes every chunk (concurrently: they do not overlap).
    pub async fn execute(&self) -> Result<(), StorageError> {
        let path = &self.path;
        let writes = self.chunks.iter().map(|chunk| async move {
            let expected = chunk.buffer.len();
            let written = self
                .file
                .write_rc_at(chunk.buffer.clone(), chunk.position)
                .await
                .map_err(|error| StorageError::io("writing", path, error))?;
            if written != expected {
                let short = std::io::Error::new(
                    std::io::ErrorKind::WriteZero,
                    format!("wrote {written} of {expected} bytes"),
                );
                return Err(StorageError::io("writing", path, short));
            }
            Ok(())
        });
        try_join_all(writes).await.map(|_| ())
    }
}

/// The append state of one file. Owned by one shard; changed only in
/// synchronous code (never across an await).
#[derive(Debug)]
pub(crate) struct PageAppender {
    file: Rc<DmaFile>,
    path: PathBuf,
    /// Logical length: every byte appended.
    len: u64,
    /// Bytes handed to writes.
    dispatched: u64,
    /// Bytes whose writes completed.
    written: u64,
    open: Option<OpenChunk>,
    /// Full chunks (ending on a page boundary) waiting for a write.
    full: VecDeque<Chunk>,
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
        file: Rc<DmaFile>,
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
            carry,
            cache: VecDeque::new(),
            cache_bytes: 0,
            sizing,
            next_chunk_bytes: sizing.chunk_bytes_min,
        }
    }

    pub fn file(&self) -> &Rc<DmaFile> {
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

    /// Copies `bytes` to the end of the file's in-memory tail.
    pub fn append(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            let chunk = self.open_chunk(bytes.len());
            let room = chunk.buffer.len() - chunk.filled;
            let count = room.min(bytes.len());
            chunk.buffer.as_bytes_mut()[chunk.filled..chunk.filled + count]
                .copy_from_slice(&bytes[..count]);
            chunk.filled += count;
            let full = chunk.filled == chunk.buffer.len();
            self.len += count as u64;
            bytes = &bytes[count..];
            if full {
                let chunk = self.open.take().expect("the chunk just filled is open");
                self.full.push_back(Chunk {
                    buffer: Rc::new(chunk.buffer),
                    position: chunk.position,
                    filled: chunk.filled,
                });
            }
        }
    }

    fn open_chunk(&mut self, wanted: usize) -> &mut OpenChunk {
        if self.open.is_none() {
            let position = align_down(self.len);
            let needed = align_up((self.carry.len() + wanted) as u64) as usize;
            let capacity = needed.clamp(
                self.next_chunk_bytes,
                self.sizing.chunk_bytes_max.max(self.next_chunk_bytes),
            );
            let mut buffer = glommio::allocate_dma_buffer_global(capacity);
            let carried = std::mem::take(&mut self.carry);
            buffer.as_bytes_mut()[..carried.len()].copy_from_slice(&carried);
            self.open = Some(OpenChunk {
                buffer,
                position,
                filled: carried.len(),
            });
        }
        self.open.as_mut().expect("opened above")
    }

    /// Everything appended since the last dispatch, or `None`. The caller
    /// executes it and then calls [`PageAppender::complete`]; no new dispatch
    /// may be taken in between.
    pub fn take_dispatch(&mut self) -> Option<Dispatch> {
        if self.len == self.dispatched {
            return None;
        }
        debug_assert_eq!(self.dispatched, self.written, "one dispatch at a time");
        let mut chunks: Vec<Chunk> = self.full.drain(..).collect();
        if let Some(open) = self.open.take() {
            let OpenChunk {
                mut buffer,
                position,
                filled,
            } = open;
            let padded = align_up(filled as u64) as usize;
            buffer.as_bytes_mut()[filled..padded].fill(0);
            buffer.trim_to_size(padded);
            let partial = align_down(filled as u64) as usize;
            self.carry = buffer.as_bytes()[partial..filled].to_vec();
            chunks.push(Chunk {
                buffer: Rc::new(buffer),
                position,
                filled,
            });
        }
        self.dispatched = self.len;
        Some(Dispatch {
            file: self.file.clone(),
            path: self.path.clone(),
            chunks,
            end: self.len,
        })
    }

    /// Records that `dispatch` was written: its bytes become readable from the
    /// cache, and the next chunks are sized after it.
    pub fn complete(&mut self, dispatch: Dispatch) {
        let start = dispatch
            .chunks
            .first()
            .map_or(dispatch.end, |chunk| chunk.position);
        self.written = dispatch.end;
        let dispatched_bytes = (dispatch.end - start) as usize;
        self.next_chunk_bytes = dispatched_bytes
            .next_power_of_two()
            .clamp(self.sizing.chunk_bytes_min, self.sizing.chunk_bytes_max);
        if self.sizing.cache_bytes_max == 0 {
            return;
        }
        for chunk in dispatch.chunks {
            self.cache_bytes += chunk.buffer.len();
            self.cache.push_back(chunk);
        }
        while self.cache_bytes > self.sizing.cache_bytes_max && self.cache.len() > 1 {
            let evicted = self.cache.pop_front().expect("cache is not empty");
            self.cache_bytes -= evicted.buffer.len();
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
            let end = chunk.logical().end.min(range.end);
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

    /// Drops cached chunks (the segment is no longer the tail).
    pub fn drop_cache(&mut self) {
        self.cache.clear();
        self.cache_bytes = 0;
    }

    /// Heap held by buffers and the carried page.
    pub fn heap_bytes(&self) -> usize {
        let open = self.open.as_ref().map_or(0, |chunk| chunk.buffer.len());
        let full: usize = self.full.iter().map(|chunk| chunk.buffer.len()).sum();
        open + full + self.cache_bytes + self.carry.capacity()
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
        PageAppender::new(Rc::new(file), path, 0, Vec::new(), sizing)
    }

    async fn flush(appender: &mut PageAppender) {
        if let Some(dispatch) = appender.take_dispatch() {
            dispatch.execute().await.unwrap();
            appender.complete(dispatch);
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
                cache_bytes_max: 64 << 10,
            };
            let mut appender = appender(&path, sizing).await;
            let mut expected = Vec::new();
            for round in 0..40u32 {
                let bytes: Vec<u8> = (0..(round * 977 % 20_000) + 1)
                    .map(|i| (i * 31 + round) as u8)
                    .collect();
                appender.append(&bytes);
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
}
