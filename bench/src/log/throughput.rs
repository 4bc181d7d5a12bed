//! Append throughput without fsync: how fast `PartitionLog` turns appended
//! batches into written file bytes when nothing waits for durability
//! (`flush.messages`/`flush.ms` unset, Kafka's default). Appends go
//! back-to-back from one task, as from a producer that never runs dry, which
//! yields to the shard after each append as a connection task would between
//! requests (otherwise the log's writer could only run when backpressure
//! stops the producer); the clock stops when every appended offset is written.

use std::path::Path;
use std::time::Instant;

use brook_engine::log::config::{FlushPolicy, LogConfig};
use brook_engine::types::LeaderEpoch;
use brook_shards::storage::{LogStats, PartitionLog, RecoveryHints};

use crate::log::error::BenchError;
use crate::log::report::Throughput;
use crate::log::unix_now_ms;

/// What the append run measured.
#[derive(Clone, Copy, Debug, Default)]
pub struct AppendRun {
    /// First append to last offset written.
    pub throughput: Throughput,
    /// First append until the last `append` call returned.
    pub appends_elapsed: std::time::Duration,
    /// CPU time of the appending thread (the shard) over `appends_elapsed`:
    /// well below it means the disk, not the append path, set the pace.
    pub appends_cpu: std::time::Duration,
    pub stats: LogStats,
}

impl AppendRun {
    /// Accumulates another run.
    pub fn add(&mut self, other: &AppendRun) {
        self.throughput.add(&other.throughput);
        self.appends_elapsed += other.appends_elapsed;
        self.appends_cpu += other.appends_cpu;
        self.stats.appends += other.stats.appends;
        self.stats.write_jobs += other.stats.write_jobs;
        self.stats.syncs += other.stats.syncs;
        self.stats.rolls += other.stats.rolls;
    }
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
    let cpu_started = thread_cpu_time();
    for index in 0..count {
        let batch = &batches[index as usize % batches.len()];
        log.append(batch, LeaderEpoch(0), unix_now_ms()).await?;
        appended_bytes += batch.len() as u64;
        yield_now().await;
    }
    let appends_elapsed = started.elapsed();
    let appends_cpu = thread_cpu_time().saturating_sub(cpu_started);
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
        appends_cpu,
        stats,
    })
}

/// Lets every other ready task on the executor run once.
async fn yield_now() {
    let mut yielded = false;
    std::future::poll_fn(|context| {
        if yielded {
            return std::task::Poll::Ready(());
        }
        yielded = true;
        context.waker().wake_by_ref();
        std::task::Poll::Pending
    })
    .await
}

/// CPU time used so far by the calling thread.
pub(crate) fn thread_cpu_time() -> std::time::Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime only writes the timespec it is given.
    let status = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    if status != 0 {
        return std::time::Duration::ZERO;
    }
    std::time::Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}
