//! The device's ceiling: what a plain sequential O_DIRECT writer gets from
//! this disk through glommio, with none of the log's bookkeeping. The log's
//! throughput is judged as a fraction of this, measured in the same run.
//!
//! Two 1 MiB writes stay in flight (enough to keep this class of disk busy;
//! the log's own writes grow to 1 MiB), and one `fdatasync` at the end makes
//! the figure "bytes on stable storage per second".

use std::path::Path;
use std::rc::Rc;
use std::time::Instant;

use futures::{StreamExt, TryStreamExt, stream};
use glommio::io::{DmaBuffer, DmaFile, OpenOptions};

use crate::log::error::{BenchError, io_error};
use crate::log::payload::{PAYLOAD_SEED, Xorshift64, half_random_value};
use crate::log::report::Throughput;

/// Bytes per write.
pub const CEILING_WRITE_BYTES: u64 = 1 << 20;
/// Writes kept in flight.
pub const CEILING_WRITES_IN_FLIGHT: usize = 2;

const FILE_NAME: &str = "ceiling.dat";

/// Where the raw writer's buffers come from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RawBuffers {
    /// glommio's io_uring-registered memory, reused for every write: the
    /// best case (fixed-buffer writes pin no pages). Brook's log cannot use it
    /// for its tail: the 8 MiB memlock limit leaves ~1 MiB per executor.
    Registered,
    /// Page-aligned heap buffers, rotated like the log's chunk pool: the
    /// same memory the log writes from.
    Heap,
}

/// Heap buffers the raw writer rotates through (the log keeps about this
/// many chunks between its in-flight writes and its tail cache).
const HEAP_BUFFERS: usize = 8;

/// Writes `total_bytes` (rounded up to whole writes) sequentially to a new
/// file in `dir`, syncs it, and deletes it.
pub async fn measure(
    dir: &Path,
    total_bytes: u64,
    kind: RawBuffers,
) -> Result<Throughput, BenchError> {
    let path = dir.join(FILE_NAME);
    let throughput = write_file(&path, total_bytes, kind).await?;
    std::fs::remove_file(&path).map_err(io_error("deleting", &path))?;
    Ok(throughput)
}

/// Writes `total_bytes` (rounded up to whole writes) sequentially to a new
/// file at `path`, syncs and closes it, and leaves it there (for a reader
/// to measure next; [`measure`] deletes it).
pub async fn write_file(
    path: &Path,
    total_bytes: u64,
    kind: RawBuffers,
) -> Result<Throughput, BenchError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .dma_open(brook_shards::runtime::glommio_path(path))
        .await
        .map_err(io_error("creating", path))?;
    let buffers = filled_buffers(&file, kind);
    let writes = total_bytes.div_ceil(CEILING_WRITE_BYTES);
    let started = Instant::now();
    stream::iter(0..writes)
        .map(|index| {
            let buffer = buffers[index as usize % buffers.len()].clone();
            write_whole(&file, path, buffer, index * CEILING_WRITE_BYTES)
        })
        .buffer_unordered(CEILING_WRITES_IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    file.fdatasync().await.map_err(io_error("syncing", path))?;
    let elapsed = started.elapsed();
    file.close().await.map_err(io_error("closing", path))?;
    Ok(Throughput {
        bytes: writes * CEILING_WRITE_BYTES,
        elapsed,
    })
}

/// Buffers filled like the log's values (half random, half zeros) before
/// timing starts and reused in turn for every write.
fn filled_buffers(file: &DmaFile, kind: RawBuffers) -> Vec<Rc<DmaBuffer>> {
    let mut generator = Xorshift64::new(PAYLOAD_SEED);
    let count = match kind {
        RawBuffers::Registered => CEILING_WRITES_IN_FLIGHT,
        RawBuffers::Heap => HEAP_BUFFERS,
    };
    (0..count)
        .map(|_| {
            let mut buffer = match kind {
                RawBuffers::Registered => file.alloc_dma_buffer(CEILING_WRITE_BYTES as usize),
                RawBuffers::Heap => {
                    glommio::allocate_dma_buffer_global(CEILING_WRITE_BYTES as usize)
                }
            };
            for chunk in buffer.as_bytes_mut().chunks_mut(1024) {
                let value = half_random_value(&mut generator, chunk.len());
                chunk.copy_from_slice(&value);
            }
            Rc::new(buffer)
        })
        .collect()
}

/// Writes all of `buffer` at `position`; a short write is an error.
pub(crate) async fn write_whole(
    file: &DmaFile,
    path: &Path,
    buffer: Rc<DmaBuffer>,
    position: u64,
) -> Result<(), BenchError> {
    let expected = buffer.len();
    let written = file
        .write_rc_at(buffer, position)
        .await
        .map_err(io_error("writing", path))?;
    if written != expected {
        let short = std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            format!("wrote {written} of {expected} bytes at {position}"),
        );
        return Err(io_error("writing", path)(short));
    }
    Ok(())
}
