//! Append + fsync latency next to the raw write + `fdatasync` it is built on.
//!
//! With the default flush policy (continuous group commit) an acknowledged
//! `acks=all`-style append costs one write and one `fdatasync`; the raw
//! reference does exactly that through glommio, so the ratio of the two is
//! the log's own overhead (task hand-offs, index writes, bookkeeping). One
//! appender waits for each append before the next, so no group commit
//! flatters the log: every sample pays a full sync. Both series write the
//! batch's size rounded up to whole pages at the end of a growing file.

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_engine::log::config::LogConfig;
use brook_engine::types::LeaderEpoch;
use brook_shards::storage::{PAGE_BYTES, PartitionLog, RecoveryHints};
use glommio::io::{DmaBuffer, DmaFile, OpenOptions};
use hdrhistogram::Histogram;

use crate::log::ceiling::write_whole;
use crate::log::error::{BenchError, io_error};
use crate::log::payload::{PAYLOAD_SEED, Xorshift64};
use crate::log::unix_now_ms;

/// Unrecorded samples before each series: the first append also persists
/// the leader epoch and sizes the log's buffers; the first raw writes
/// allocate file blocks for the first time.
pub const WARMUP_SAMPLES: u64 = 10;
/// The largest latency a histogram records exactly (60 s, in µs).
const LATENCY_MAX_MICROS: u64 = 60_000_000;
const SIGNIFICANT_DIGITS: u8 = 3;
const RAW_FILE_NAME: &str = "raw-fsync.dat";

/// An empty microsecond histogram.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, LATENCY_MAX_MICROS, SIGNIFICANT_DIGITS)
        .expect("constant bounds are valid")
}

pub(crate) fn record(histogram: &mut Histogram<u64>, elapsed: Duration) {
    let micros = u64::try_from(elapsed.as_micros()).unwrap_or(u64::MAX);
    histogram.saturating_record(micros.max(1));
}

/// Latency histograms of the two series.
#[derive(Debug)]
pub struct LatencyRun {
    pub raw: Histogram<u64>,
    pub log: Histogram<u64>,
}

/// Takes `samples` of each series, alternating between them (and which goes
/// first) so that both see the same disk: a virtual disk's sync latency
/// drifts by several times within a minute, which would otherwise decide the
/// ratio. The raw file is in `dir`, the log in `dir/log`.
pub async fn measure(dir: &Path, samples: u64, batch: &[u8]) -> Result<LatencyRun, BenchError> {
    let write_bytes = (batch.len() as u64).next_multiple_of(PAGE_BYTES);
    let mut raw = RawSyncer::create(&dir.join(RAW_FILE_NAME), write_bytes).await?;
    let log_dir = dir.join("log");
    let log = PartitionLog::open(
        &log_dir,
        LogConfig::default(),
        RecoveryHints::default(),
        unix_now_ms(),
    )
    .await?;
    let mut run = LatencyRun {
        raw: latency_histogram(),
        log: latency_histogram(),
    };
    for sample in 0..WARMUP_SAMPLES + samples {
        let (raw_elapsed, log_elapsed) = if sample % 2 == 0 {
            (raw.sample().await?, sample_log(&log, batch).await?)
        } else {
            let log_elapsed = sample_log(&log, batch).await?;
            (raw.sample().await?, log_elapsed)
        };
        if sample >= WARMUP_SAMPLES {
            record(&mut run.raw, raw_elapsed);
            record(&mut run.log, log_elapsed);
        }
    }
    log.close().await?;
    raw.delete().await?;
    Ok(run)
}

/// Appends `batch` and waits until it is durable.
async fn sample_log(log: &PartitionLog, batch: &[u8]) -> Result<Duration, BenchError> {
    let started = Instant::now();
    let info = log.append(batch, LeaderEpoch(0), unix_now_ms()).await?;
    log.wait_durable(info.log_end_offset).await?;
    Ok(started.elapsed())
}

/// The reference: whole-page writes at the end of a growing file, each
/// followed by `fdatasync`, as the log's own writes and syncs are.
pub(crate) struct RawSyncer {
    file: DmaFile,
    path: PathBuf,
    buffer: Rc<DmaBuffer>,
    position: u64,
}

impl RawSyncer {
    /// A new file at `path` and one pre-filled buffer of `write_bytes`
    /// (a multiple of the page size).
    pub(crate) async fn create(path: &Path, write_bytes: u64) -> Result<RawSyncer, BenchError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .dma_open(brook_shards::runtime::glommio_path(path))
            .await
            .map_err(io_error("creating", path))?;
        let mut buffer = file.alloc_dma_buffer(write_bytes as usize);
        Xorshift64::new(PAYLOAD_SEED).fill(buffer.as_bytes_mut());
        Ok(RawSyncer {
            file,
            path: path.to_owned(),
            buffer: Rc::new(buffer),
            position: 0,
        })
    }

    /// One write at the end of the file plus `fdatasync`, timed together.
    pub(crate) async fn sample(&mut self) -> Result<Duration, BenchError> {
        let started = Instant::now();
        write_whole(&self.file, &self.path, self.buffer.clone(), self.position).await?;
        self.file
            .fdatasync()
            .await
            .map_err(io_error("syncing", &self.path))?;
        self.position += self.buffer.len() as u64;
        Ok(started.elapsed())
    }

    pub(crate) async fn delete(self) -> Result<(), BenchError> {
        let path = self.path;
        self.file
            .close()
            .await
            .map_err(io_error("closing", &path))?;
        std::fs::remove_file(&path).map_err(io_error("deleting", &path))
    }
}
