//! `brook bench log`: the storage engine measured against the disk it runs
//! on, in one run on one pinned executor.
//!
//! Four measurements, each in its own subdirectory of `--dir`, deleted
//! afterwards, and each next to a same-run reference:
//! 1. [`ceiling`]: raw sequential O_DIRECT writes (the disk's bandwidth);
//! 2. [`throughput`]: `PartitionLog::append` without fsync, same bytes;
//! 3. [`latency`]: append + wait until durable, next to raw write + fdatasync;
//! 4. [`idle`]: heap per open idle partition, from the counting allocator.
//!
//! Batches are built once up front ([`payload`]) so the timed loops only
//! append; the log rewrites each batch's base offset, so re-appending the
//! same bytes is what a producer resending looks like to it.

pub mod ceiling;
pub mod environment;
pub mod error;
pub mod idle;
pub mod json;
pub mod latency;
pub mod payload;
pub mod report;
pub mod throughput;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use brook_engine::types::TimestampMs;
use brook_shards::runtime::{executor_builder, guarded};
use brook_shards::storage::{PAGE_BYTES, prepare_directory};
use glommio::Placement;

pub use error::BenchError;
pub use report::LogReport;

use crate::log::ceiling::RawBuffers;
use crate::log::payload::{
    BATCH_VARIANTS, PAYLOAD_SEED, RECORDS_PER_BATCH, VALUE_BYTES, build_batches,
};
use crate::log::report::{BatchShape, LatencyComparison, LatencySummary, Throughput};
use crate::log::throughput::AppendRun;

/// Default bytes written by the throughput measurements (2 GiB).
pub const BYTES_DEFAULT: u64 = 2 << 30;
/// Default latency samples per series.
pub const SAMPLES_DEFAULT: u64 = 2000;
/// Default partitions for the idle-heap measurement.
pub const PARTITIONS_DEFAULT: usize = 1000;
/// Bounds on the options: enough to mean something, small enough to finish.
pub const BYTES_MIN: u64 = 1 << 20;
pub const BYTES_MAX: u64 = 1 << 40;
pub const SAMPLES_MAX: u64 = 10_000_000;
pub const PARTITIONS_MAX: usize = 1_000_000;

/// Subdirectories of `--dir`, one per measurement; named so that removing a
/// leftover from an interrupted run can only touch the benchmark's own files.
const CEILING_DIR: &str = "brook-bench-ceiling";
const APPEND_DIR: &str = "brook-bench-append";
const LATENCY_DIR: &str = "brook-bench-latency";
const IDLE_DIR: &str = "brook-bench-idle";

/// What `brook bench log` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogBenchOptions {
    /// Where the benchmark's files go (created if missing).
    pub dir: PathBuf,
    /// Bytes written by the raw ceiling and by the append run.
    pub bytes: u64,
    /// Latency samples per series.
    pub samples: u64,
    /// Partitions opened for the idle-heap measurement.
    pub partitions: usize,
    /// CPU the executor is pinned to.
    pub cpu: usize,
}

impl LogBenchOptions {
    /// Options with every default, in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> LogBenchOptions {
        LogBenchOptions {
            dir: dir.into(),
            bytes: BYTES_DEFAULT,
            samples: SAMPLES_DEFAULT,
            partitions: PARTITIONS_DEFAULT,
            cpu: 0,
        }
    }

    fn validate(&self) -> Result<(), BenchError> {
        let invalid = |name, reason: String| Err(BenchError::InvalidOption { name, reason });
        if !(BYTES_MIN..=BYTES_MAX).contains(&self.bytes) {
            return invalid("--bytes", format!("must be {BYTES_MIN}..={BYTES_MAX}"));
        }
        if !(1..=SAMPLES_MAX).contains(&self.samples) {
            return invalid("--samples", format!("must be 1..={SAMPLES_MAX}"));
        }
        if !(1..=PARTITIONS_MAX).contains(&self.partitions) {
            return invalid("--partitions", format!("must be 1..={PARTITIONS_MAX}"));
        }
        Ok(())
    }
}

/// Runs every measurement on an executor pinned to `options.cpu`.
pub fn run(options: LogBenchOptions) -> Result<LogReport, BenchError> {
    options.validate()?;
    std::fs::create_dir_all(&options.dir).map_err(error::io_error("creating", &options.dir))?;
    let cpu = options.cpu;
    let executor_error = |error: glommio::GlommioError<()>| BenchError::Executor {
        cpu,
        reason: error.to_string(),
    };
    executor_builder(Placement::Fixed(cpu))
        .name("brook-bench")
        .make()
        .map_err(executor_error)?
        .run(guarded(measure_all(options)))
}

async fn measure_all(options: LogBenchOptions) -> Result<LogReport, BenchError> {
    let environment = environment::describe(&options.dir, options.cpu);
    prepare_directory(&options.dir).await?;
    let batches = build_batches(
        PAYLOAD_SEED,
        BATCH_VARIANTS,
        RECORDS_PER_BATCH,
        VALUE_BYTES,
        TimestampMs(unix_now_ms()),
    );
    let batch_bytes = batches[0].len() as u64;
    let dir = &options.dir;
    let ThroughputRuns {
        ceiling,
        ceiling_heap,
        append,
    } = measure_throughput(dir, options.bytes, &batches).await?;
    let latency = measure_latency(dir, options.samples, &batches[0]).await?;
    progress(format_args!(
        "reopening {} idle partitions",
        options.partitions
    ));
    let idle = in_subdir(dir, IDLE_DIR, async |sub| {
        idle::measure(sub, options.partitions).await
    })
    .await?;
    Ok(LogReport {
        environment,
        batch: BatchShape {
            batch_bytes,
            records_per_batch: RECORDS_PER_BATCH as u64,
            value_bytes: VALUE_BYTES as u64,
        },
        ceiling,
        ceiling_heap,
        append,
        latency,
        idle,
    })
}

/// Rounds of raw-write and log-append throughput, rotating which goes
/// first, so every series sees the same (noisy, drifting) disk.
const THROUGHPUT_ROUNDS: u64 = 3;

/// The three throughput series, each summed over the rounds.
#[derive(Default)]
struct ThroughputRuns {
    ceiling: Throughput,
    ceiling_heap: Throughput,
    append: AppendRun,
}

async fn measure_throughput(
    dir: &Path,
    bytes: u64,
    batches: &[Vec<u8>],
) -> Result<ThroughputRuns, BenchError> {
    let round_bytes = bytes.div_ceil(THROUGHPUT_ROUNDS);
    let mut runs = ThroughputRuns::default();
    for round in 0..THROUGHPUT_ROUNDS {
        progress(format_args!(
            "throughput round {} of {THROUGHPUT_ROUNDS}: {round_bytes} bytes raw (twice) and appended",
            round + 1
        ));
        for step in 0..3 {
            match (step + round) % 3 {
                0 => runs
                    .ceiling
                    .add(&raw(dir, round_bytes, RawBuffers::Registered).await?),
                1 => runs
                    .ceiling_heap
                    .add(&raw(dir, round_bytes, RawBuffers::Heap).await?),
                _ => runs.append.add(
                    &in_subdir(dir, APPEND_DIR, async |sub| {
                        throughput::measure(sub, round_bytes, batches).await
                    })
                    .await?,
                ),
            }
        }
    }
    Ok(runs)
}

async fn raw(dir: &Path, bytes: u64, kind: RawBuffers) -> Result<Throughput, BenchError> {
    in_subdir(dir, CEILING_DIR, async |sub| {
        ceiling::measure(sub, bytes, kind).await
    })
    .await
}

async fn measure_latency(
    dir: &Path,
    samples: u64,
    batch: &[u8],
) -> Result<LatencyComparison, BenchError> {
    progress(format_args!(
        "{samples} raw writes + fdatasync, alternating with {samples} appends + wait_durable"
    ));
    let run = in_subdir(dir, LATENCY_DIR, async |sub| {
        latency::measure(sub, samples, batch).await
    })
    .await?;
    Ok(LatencyComparison {
        warmup_samples: latency::WARMUP_SAMPLES,
        raw_write_bytes: (batch.len() as u64).next_multiple_of(PAGE_BYTES),
        raw: LatencySummary::of(&run.raw),
        log: LatencySummary::of(&run.log),
    })
}

/// Runs `measure` in a fresh `dir/name` and deletes it afterwards, whether
/// or not the measurement succeeded (a failure to delete is reported only
/// when the measurement itself succeeded).
pub(crate) async fn in_subdir<T>(
    dir: &Path,
    name: &str,
    measure: impl AsyncFnOnce(&Path) -> Result<T, BenchError>,
) -> Result<T, BenchError> {
    let sub = dir.join(name);
    remove_dir_if_present(&sub)?;
    prepare_directory(&sub).await?;
    let outcome = measure(&sub).await;
    let removed = remove_dir_if_present(&sub);
    let value = outcome?;
    removed?;
    Ok(value)
}

fn remove_dir_if_present(dir: &Path) -> Result<(), BenchError> {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => Ok(()),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(error) => Err(error::io_error("deleting", dir)(error)),
    }
}

/// One progress line on stderr (stdout carries only the report).
pub(crate) fn progress(what: std::fmt::Arguments<'_>) {
    eprintln!("measuring: {what}");
}

/// Wall-clock milliseconds since the Unix epoch (what the log stamps and
/// rolls by).
pub(crate) fn unix_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_outside_their_bounds_are_refused() {
        let defaults = LogBenchOptions::new("/tmp/x");
        assert!(defaults.validate().is_ok());
        let too_small = LogBenchOptions {
            bytes: 1,
            ..defaults.clone()
        };
        assert!(matches!(
            too_small.validate(),
            Err(BenchError::InvalidOption {
                name: "--bytes",
                ..
            })
        ));
        let no_samples = LogBenchOptions {
            samples: 0,
            ..defaults
        };
        assert!(no_samples.validate().is_err());
    }
}
