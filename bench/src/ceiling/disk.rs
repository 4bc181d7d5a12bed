//! The disk's limits through glommio: sequential O_DIRECT write and read
//! bandwidth, buffered (page-cache) read bandwidth cold and hot, and write +
//! `fdatasync` latency.
//!
//! One file of `bytes` is written by `brook bench log`'s raw writer (1 MiB
//! writes from heap buffers, two in flight, one `fdatasync` at the end), then
//! read back with the same shape of reads, then read twice through the page
//! cache with `std::fs`: O_DIRECT writes leave nothing in the cache, so the
//! first buffered pass comes from the disk (with the kernel's readahead) and
//! the second from memory. Brook's fetch path serves older data with
//! sendfile from the page cache, so those two bracket a consumer catching up.

use std::io::Read;
use std::path::Path;
use std::time::{Duration, Instant};

use brook_shards::storage::PAGE_BYTES;
use futures::future::try_join_all;
use futures::{StreamExt, TryStreamExt, stream};
use glommio::io::{DmaFile, OpenOptions};
use hdrhistogram::Histogram;

use crate::log::ceiling::{CEILING_WRITE_BYTES, CEILING_WRITES_IN_FLIGHT, RawBuffers, write_file};
use crate::log::error::{BenchError, io_error};
use crate::log::latency::{RawSyncer, WARMUP_SAMPLES, latency_histogram, record};
use crate::log::progress;
use crate::log::report::{LatencySummary, Throughput};

/// Bytes per O_DIRECT read: the writer's size, so both directions move the
/// file in the same pieces.
pub const DIRECT_READ_BYTES: u64 = CEILING_WRITE_BYTES;
/// O_DIRECT reads kept in flight.
pub const DIRECT_READS_IN_FLIGHT: usize = CEILING_WRITES_IN_FLIGHT;
/// Bytes per buffered `read(2)`.
pub const BUFFERED_READ_BYTES: usize = 1 << 20;
/// Bytes per write in the `fdatasync` latency series: a 64 KiB batch of
/// `brook bench log` rounded up to whole pages (17 pages).
pub const FSYNC_WRITE_BYTES: u64 = 69_632;
const _: () = assert!(
    FSYNC_WRITE_BYTES % PAGE_BYTES == 0,
    "O_DIRECT writes whole pages"
);
/// Leading bytes of each O_DIRECT read checked to be written data, not a
/// hole: the writer's buffers start every KiB with random bytes.
const CHECKED_BYTES: usize = 64;

const DATA_FILE_NAME: &str = "sequential.dat";
const FSYNC_FILE_NAME: &str = "fsync.dat";

/// What the disk measurements found.
#[derive(Clone, Copy, Debug)]
pub struct DiskRun {
    pub write: Throughput,
    pub direct_read: Throughput,
    pub buffered_cold_read: Throughput,
    pub hot_read: Throughput,
    pub fsync: LatencySummary,
}

/// Runs every disk measurement in `dir` (prepared for glommio by the
/// caller) and deletes the files it wrote.
pub async fn measure(dir: &Path, bytes: u64, fsync_samples: u64) -> Result<DiskRun, BenchError> {
    let path = dir.join(DATA_FILE_NAME);
    progress(format_args!("{bytes} bytes written with O_DIRECT"));
    let write = write_file(&path, bytes, RawBuffers::Heap).await?;
    progress(format_args!("the same bytes read with O_DIRECT"));
    let direct_read = read_direct(&path, write.bytes).await?;
    progress(format_args!("the same bytes read twice via the page cache"));
    // Blocking reads on the executor thread are fine here: nothing else
    // runs on it, and blocking is exactly what is measured.
    let buffered_cold_read = read_buffered(&path, write.bytes)?;
    let hot_read = read_buffered(&path, write.bytes)?;
    std::fs::remove_file(&path).map_err(io_error("deleting", &path))?;
    progress(format_args!(
        "{fsync_samples} writes of {FSYNC_WRITE_BYTES} B + fdatasync"
    ));
    let fsync = fsync_latency(&dir.join(FSYNC_FILE_NAME), fsync_samples).await?;
    Ok(DiskRun {
        write,
        direct_read,
        buffered_cold_read,
        hot_read,
        fsync,
    })
}

/// Reads the `file_bytes` (a whole number of reads) of `path` sequentially
/// with O_DIRECT, [`DIRECT_READS_IN_FLIGHT`] reads at a time.
async fn read_direct(path: &Path, file_bytes: u64) -> Result<Throughput, BenchError> {
    assert_eq!(
        file_bytes % DIRECT_READ_BYTES,
        0,
        "the writer writes whole MiB"
    );
    let file = OpenOptions::new()
        .read(true)
        .dma_open(brook_shards::runtime::glommio_path(path))
        .await
        .map_err(io_error("opening", path))?;
    let reads = file_bytes / DIRECT_READ_BYTES;
    let started = Instant::now();
    stream::iter(0..reads)
        .map(|index| read_whole(&file, path, index * DIRECT_READ_BYTES))
        .buffer_unordered(DIRECT_READS_IN_FLIGHT)
        .try_collect::<()>()
        .await?;
    let elapsed = started.elapsed();
    file.close().await.map_err(io_error("closing", path))?;
    Ok(Throughput {
        bytes: file_bytes,
        elapsed,
    })
}

/// Reads [`DIRECT_READ_BYTES`] at `position`; a short read, or one that
/// starts with zeros where the writer put random bytes, is an error.
async fn read_whole(file: &DmaFile, path: &Path, position: u64) -> Result<(), BenchError> {
    let expected = DIRECT_READ_BYTES as usize;
    let read = file
        .read_at(position, expected)
        .await
        .map_err(io_error("reading", path))?;
    let problem = if read.len() != expected {
        format!("read {} of {expected} bytes at {position}", read.len())
    } else if read[..CHECKED_BYTES].iter().all(|byte| *byte == 0) {
        format!("read zeros at {position} where data was written")
    } else {
        return Ok(());
    };
    let error = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, problem);
    Err(io_error("reading", path)(error))
}

/// Reads all of `path` through the page cache in [`BUFFERED_READ_BYTES`]
/// reads; finding other than `file_bytes` is an error.
fn read_buffered(path: &Path, file_bytes: u64) -> Result<Throughput, BenchError> {
    let mut file = std::fs::File::open(path).map_err(io_error("opening", path))?;
    let mut buffer = vec![0u8; BUFFERED_READ_BYTES];
    let mut total = 0u64;
    let started = Instant::now();
    loop {
        let read = file.read(&mut buffer).map_err(io_error("reading", path))?;
        if read == 0 {
            break;
        }
        total += read as u64;
    }
    let elapsed = started.elapsed();
    if total != file_bytes {
        let problem = format!("read {total} bytes of a {file_bytes}-byte file");
        let error = std::io::Error::new(std::io::ErrorKind::UnexpectedEof, problem);
        return Err(io_error("reading", path)(error));
    }
    Ok(Throughput {
        bytes: total,
        elapsed,
    })
}

/// `samples` writes of [`FSYNC_WRITE_BYTES`] at the end of a growing file,
/// each with its `fdatasync`, after [`WARMUP_SAMPLES`] unrecorded ones: the
/// raw reference series of `brook bench log`'s latency measurement.
async fn fsync_latency(path: &Path, samples: u64) -> Result<LatencySummary, BenchError> {
    let mut syncer = RawSyncer::create(path, FSYNC_WRITE_BYTES).await?;
    let mut histogram = latency_histogram();
    for sample in 0..WARMUP_SAMPLES + samples {
        let elapsed = syncer.sample().await?;
        if sample >= WARMUP_SAMPLES {
            record(&mut histogram, elapsed);
        }
    }
    syncer.delete().await?;
    Ok(LatencySummary::of(&histogram))
}

/// Several appenders, each writing `write_bytes` + `fdatasync` at the end of
/// its own file, paced together to `bytes_per_second` for `duration` on
/// this executor: the latency workload's partitions on the disk alone,
/// through the same io_uring path, without a broker. Each sample runs from
/// when its write was due, not when it started, so a disk that cannot keep
/// up shows the queue a producer would see.
pub async fn paced_sync_latency(
    dir: &Path,
    files: usize,
    write_bytes: u64,
    bytes_per_second: f64,
    duration: Duration,
) -> Result<LatencySummary, BenchError> {
    let files = files.max(1);
    let every =
        Duration::from_secs_f64(write_bytes as f64 * files as f64 / bytes_per_second.max(1.0));
    let start = Instant::now() + every;
    let end = start + duration;
    let appenders = (0..files).map(|index| {
        let path = dir.join(format!("paced-{index}.dat"));
        async move {
            let mut syncer = RawSyncer::create(&path, write_bytes).await?;
            let mut histogram: Histogram<u64> = latency_histogram();
            let mut due = start + every.mul_f64(index as f64 / files as f64);
            while due < end {
                if let Some(wait) = due.checked_duration_since(Instant::now()) {
                    glommio::timer::sleep(wait).await;
                }
                syncer.sample().await?;
                record(&mut histogram, due.elapsed());
                due += every;
            }
            syncer.delete().await?;
            Ok::<_, BenchError>(histogram)
        }
    });
    let mut merged = latency_histogram();
    for histogram in try_join_all(appenders).await? {
        merged
            .add(&histogram)
            .map_err(|error| BenchError::Client(error.to_string()))?;
    }
    Ok(LatencySummary::of(&merged))
}
