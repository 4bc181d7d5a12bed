//! Heap held by open, idle partitions: a shard may host thousands, so what
//! one costs while nobody writes to it bounds how many fit.
//!
//! Partitions are created with one small batch each and closed cleanly
//! (setup, not measured); then all are reopened as after a clean shutdown
//! and the live heap is read from the counting allocator before and after.
//! The difference covers everything the open logs keep — glommio files and
//! the two IO tasks per log included — which `PartitionLog::heap_bytes()`
//! (reported alongside) cannot see.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::log::config::LogConfig;
use brook_engine::types::{LeaderEpoch, TimestampMs};
use brook_shards::storage::{PartitionLog, RecoveryHints};
use futures::{StreamExt, TryStreamExt, stream};

use crate::allocator;
use crate::log::environment::raise_open_files_limit;
use crate::log::error::BenchError;
use crate::log::unix_now_ms;

/// Partitions created or closed at once during setup and teardown.
const SETUP_CONCURRENCY_MAX: usize = 64;
/// Descriptors one open partition holds: `.log`, `.index`, `.timeindex`,
/// plus one to spare.
pub const FILES_PER_PARTITION: u64 = 4;
/// Descriptors kept for everything else (executor, stdio, setup overlap).
const FILES_RESERVED: u64 = 256;
/// Value bytes of the one batch each partition holds.
const SMALL_VALUE_BYTES: usize = 100;
/// Time for the reopened logs' tasks to run once and park.
const SETTLE_TIME: Duration = Duration::from_millis(50);

/// What the idle-partition run measured.
#[derive(Clone, Debug)]
pub struct IdleRun {
    pub requested_partitions: usize,
    /// Fewer than requested when the open-files limit could not be raised.
    pub partitions: usize,
    /// Live heap growth per reopened partition; `None` without the counting
    /// allocator installed.
    pub allocated_bytes_per_partition: Option<u64>,
    /// Mean of `PartitionLog::heap_bytes()`.
    pub heap_bytes_per_partition: u64,
    /// Reopening all partitions, one after another.
    pub open_elapsed: Duration,
}

/// How many of `requested` partitions can be open at once under the
/// open-files limit (raised towards what they need first).
pub fn partitions_within_limit(requested: usize) -> Result<usize, BenchError> {
    let wanted = requested as u64 * FILES_PER_PARTITION + FILES_RESERVED;
    let limit = raise_open_files_limit(wanted)?;
    let fit = limit.saturating_sub(FILES_RESERVED) / FILES_PER_PARTITION;
    Ok(requested.min(fit as usize))
}

/// Creates `partitions` logs under `dir`, then measures reopening them.
pub async fn measure(dir: &Path, requested: usize) -> Result<IdleRun, BenchError> {
    let partitions = partitions_within_limit(requested)?;
    let dirs: Vec<PathBuf> = (0..partitions)
        .map(|index| dir.join(format!("bench-{index}")))
        .collect();
    create_partitions(&dirs).await?;
    let mut logs = Vec::with_capacity(partitions);
    let counting = allocator::is_installed();
    let before = allocator::allocated_bytes();
    let started = Instant::now();
    let hints = RecoveryHints {
        clean_shutdown: true,
        ..RecoveryHints::default()
    };
    for partition_dir in &dirs {
        logs.push(
            PartitionLog::open(partition_dir, LogConfig::default(), hints, unix_now_ms()).await?,
        );
    }
    let open_elapsed = started.elapsed();
    glommio::timer::sleep(SETTLE_TIME).await;
    let after = allocator::allocated_bytes();
    let heap_bytes: usize = logs.iter().map(PartitionLog::heap_bytes).sum();
    close_all(logs).await?;
    let per_partition = |bytes: u64| bytes / partitions.max(1) as u64;
    Ok(IdleRun {
        requested_partitions: requested,
        partitions,
        allocated_bytes_per_partition: counting
            .then(|| per_partition(after.saturating_sub(before) as u64)),
        heap_bytes_per_partition: per_partition(heap_bytes as u64),
        open_elapsed,
    })
}

/// Creates a log in each of `dirs` holding one small batch, closed cleanly.
async fn create_partitions(dirs: &[PathBuf]) -> Result<(), BenchError> {
    let now_ms = unix_now_ms();
    let record = NewRecord::value(vec![7u8; SMALL_VALUE_BYTES], TimestampMs(now_ms));
    let batch = encode_batch(&[record], &BatchOptions::default());
    stream::iter(dirs)
        .map(|partition_dir| {
            let batch = &batch;
            async move {
                let log = PartitionLog::open(
                    partition_dir,
                    LogConfig::default(),
                    RecoveryHints::default(),
                    now_ms,
                )
                .await?;
                log.append(batch, LeaderEpoch(0), now_ms).await?;
                log.close().await?;
                Ok::<(), BenchError>(())
            }
        })
        .buffer_unordered(SETUP_CONCURRENCY_MAX)
        .try_collect()
        .await
}

async fn close_all(logs: Vec<PartitionLog>) -> Result<(), BenchError> {
    stream::iter(logs)
        .map(|log| async move { log.close().await.map(|_| ()) })
        .buffer_unordered(SETUP_CONCURRENCY_MAX)
        .try_collect::<()>()
        .await
        .map_err(BenchError::from)
}
