//! Append throughput without fsync: how fast `PartitionLog` turns appended
//! batches into written file bytes when nothing waits for durability
//! (`flush.messages`/`flush.ms` unset, Kafka's default). Appends go
//! back-to-back from one task, as from a producer that never runs dry; the
//! clock stops when every appended offset is written.

use std::path::Path;
use std::time::Instant;

use brook_engine::log::config::{FlushPolicy, LogConfig};
use brook_engine::types::LeaderEpoch;
use brook_shards::storage::{LogStats, PartitionLog, RecoveryHints};

use crate::log::error::BenchError;
use crate::log::report::Throughput;
use crate::log::unix_now_ms;

/// What the append run measured.
#[derive(Clone, Copy, Debug)]
pub struct AppendRun {
    /// First append to last offset written.
    pub throughput: Throughput,
    /// First append until the last `append` call returned.
    pub appends_elapsed: std::time::Duration,
    pub stats: LogStats,
}

/// Appends `batches` in turn until at least `total_bytes` are appended to a
/// fresh log in `dir`, waits until all are written, and closes the log.
pub async fn measure(
    dir: &Path,
    total_bytes: u64,
    batches: &[Vec<u8>],
) -> Result<AppendRun, BenchError> {
    let config = LogConfig {
        flush: FlushPolicy::Interval {
            messages: None,
            ms: None,
        },
        ..LogConfig::default()
    };
    let log = PartitionLog::open(dir, config, RecoveryHints::default(), unix_now_ms()).await?;
    let batch_bytes = batches[0].len() as u64;
    let count = total_bytes.div_ceil(batch_bytes);
    let mut appended_bytes = 0;
    let started = Instant::now();
    for index in 0..count {
        let batch = &batches[index as usize % batches.len()];
        log.append(batch, LeaderEpoch(0), unix_now_ms()).await?;
        appended_bytes += batch.len() as u64;
    }
    let appends_elapsed = started.elapsed();
    log.wait_written(log.log_end_offset()).await?;
    let elapsed = started.elapsed();
    let stats = log.stats();
    log.close().await?;
    Ok(AppendRun {
        throughput: Throughput {
            bytes: appended_bytes,
            elapsed,
        },
        appends_elapsed,
        stats,
    })
}
