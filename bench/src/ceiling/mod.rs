//! `brook bench ceiling`: this machine's limits, measured in one run through
//! the same IO path Brook uses, so that a broker figure from the same day can
//! be judged as a fraction of what the disk and the network stack allow.
//!
//! Four measurements, one after the other so none disturbs another:
//! 1. sequential O_DIRECT writes through glommio from heap buffers, as
//!    Brook's log writes ([`crate::log::ceiling::write_file`], the same
//!    writer `brook bench log` uses);
//! 2. sequential O_DIRECT reads of that file through glommio, then two
//!    buffered reads of it through the page cache (cold, then hot: what a
//!    consumer catching up gets from sendfile once the data is cached);
//! 3. write + `fdatasync` latency, as the log's syncs are;
//! 4. one loopback TCP stream between two glommio executors on their own
//!    CPUs, measured at the receiver.
//!
//! The disk measurements run in a subdirectory of `--dir` that is deleted
//! afterwards, whether or not they succeeded. [`run`] spawns its own
//! executors (threads), so it may be called from any thread and leaves the
//! caller's CPU affinity alone.

pub mod disk;
pub mod report;
pub mod tcp;

use std::path::PathBuf;

use brook_shards::runtime::{executor_builder, guarded};
use glommio::Placement;

pub use report::CeilingReport;

use crate::log::environment;
use crate::log::error::{BenchError, io_error};
use crate::log::{BYTES_MAX, BYTES_MIN, SAMPLES_MAX, in_subdir};

/// Default bytes written (and read back) by the disk measurements (2 GiB).
pub const BYTES_DEFAULT: u64 = 2 << 30;
/// Default write + `fdatasync` samples.
pub const FSYNC_SAMPLES_DEFAULT: u64 = 2000;
/// Default bytes sent over loopback TCP (4 GiB).
pub const TCP_BYTES_DEFAULT: u64 = 4 << 30;
/// Bounds on `--tcp-bytes`: at least one write, at most a few minutes.
pub const TCP_BYTES_MIN: u64 = 1 << 20;
pub const TCP_BYTES_MAX: u64 = 1 << 40;

/// Subdirectory of `--dir` for the disk measurements; named so that removing
/// a leftover of an interrupted run can only touch this benchmark's files.
const DISK_DIR: &str = "brook-bench-machine-ceiling";
const PACED_DIR: &str = "brook-bench-paced-sync";

/// Which CPU each executor is pinned to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CeilingCpus {
    /// The executor doing the disk measurements.
    pub disk: usize,
    /// The executor writing to the loopback socket.
    pub tcp_sender: usize,
    /// The executor reading from it (where throughput is measured).
    pub tcp_receiver: usize,
}

impl CeilingCpus {
    /// Disk and sender on the first CPU this process may run on, the
    /// receiver on the second (or also the first on a one-CPU machine).
    pub fn for_this_machine() -> CeilingCpus {
        let allowed = allowed_cpus();
        let first = allowed.first().copied().unwrap_or(0);
        let second = allowed.get(1).copied().unwrap_or(first);
        CeilingCpus {
            disk: first,
            tcp_sender: first,
            tcp_receiver: second,
        }
    }
}

/// What `brook bench ceiling` was asked to do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CeilingOptions {
    /// Where the disk measurements' files go (created if missing).
    pub dir: PathBuf,
    /// Bytes written and then read back by the throughput measurements.
    pub bytes: u64,
    /// Write + `fdatasync` samples (after a few unrecorded warm-up ones).
    pub fsync_samples: u64,
    /// Bytes sent over the loopback TCP stream.
    pub tcp_bytes: u64,
    pub cpus: CeilingCpus,
}

impl CeilingOptions {
    /// Options with every default, in `dir`.
    pub fn new(dir: impl Into<PathBuf>) -> CeilingOptions {
        CeilingOptions {
            dir: dir.into(),
            bytes: BYTES_DEFAULT,
            fsync_samples: FSYNC_SAMPLES_DEFAULT,
            tcp_bytes: TCP_BYTES_DEFAULT,
            cpus: CeilingCpus::for_this_machine(),
        }
    }

    fn validate(&self, allowed: &[usize]) -> Result<(), BenchError> {
        let invalid = |name, reason: String| Err(BenchError::InvalidOption { name, reason });
        if !(BYTES_MIN..=BYTES_MAX).contains(&self.bytes) {
            return invalid("--bytes", format!("must be {BYTES_MIN}..={BYTES_MAX}"));
        }
        if !(1..=SAMPLES_MAX).contains(&self.fsync_samples) {
            return invalid("--samples", format!("must be 1..={SAMPLES_MAX}"));
        }
        if !(TCP_BYTES_MIN..=TCP_BYTES_MAX).contains(&self.tcp_bytes) {
            let reason = format!("must be {TCP_BYTES_MIN}..={TCP_BYTES_MAX}");
            return invalid("--tcp-bytes", reason);
        }
        let cpus = [
            ("--disk-cpu", self.cpus.disk),
            ("--sender-cpu", self.cpus.tcp_sender),
            ("--receiver-cpu", self.cpus.tcp_receiver),
        ];
        for (name, cpu) in cpus {
            if !allowed.contains(&cpu) {
                return invalid(name, format!("cpu {cpu} is not one of {allowed:?}"));
            }
        }
        Ok(())
    }
}

/// Runs every measurement, each on its own pinned executor, and deletes the
/// files it created in `options.dir`.
pub fn run(options: CeilingOptions) -> Result<CeilingReport, BenchError> {
    options.validate(&allowed_cpus())?;
    std::fs::create_dir_all(&options.dir).map_err(io_error("creating", &options.dir))?;
    let environment = environment::describe(&options.dir, options.cpus.disk);
    let disk = run_disk(&options)?;
    let tcp = tcp::measure(
        options.tcp_bytes,
        options.cpus.tcp_sender,
        options.cpus.tcp_receiver,
    )?;
    Ok(CeilingReport {
        environment,
        cpus: options.cpus,
        disk_write: disk.write,
        direct_read: disk.direct_read,
        buffered_cold_read: disk.buffered_cold_read,
        hot_read: disk.hot_read,
        fsync: disk.fsync,
        tcp,
    })
}

fn run_disk(options: &CeilingOptions) -> Result<disk::DiskRun, BenchError> {
    let dir = options.dir.clone();
    let (bytes, samples) = (options.bytes, options.fsync_samples);
    let cpu = options.cpus.disk;
    let handle = executor_builder(Placement::Fixed(cpu))
        .name("brook-ceiling-disk")
        .spawn(move || {
            guarded(async move {
                in_subdir(&dir, DISK_DIR, async |sub| {
                    disk::measure(sub, bytes, samples).await
                })
                .await
            })
        })
        .map_err(executor_error(cpu))?;
    handle.join().map_err(executor_error(cpu))?
}

/// [`disk::paced_sync_latency`] in a scratch directory under `dir`, on an
/// executor pinned to `cpu` (the broker's, so the same core submits).
pub fn paced_sync_latency(
    dir: &std::path::Path,
    cpu: usize,
    files: usize,
    write_bytes: u64,
    bytes_per_second: f64,
    duration: std::time::Duration,
) -> Result<crate::log::report::LatencySummary, BenchError> {
    let dir = dir.to_owned();
    let handle = executor_builder(Placement::Fixed(cpu))
        .name("brook-ceiling-paced-sync")
        .spawn(move || {
            guarded(async move {
                in_subdir(&dir, PACED_DIR, async |sub| {
                    disk::paced_sync_latency(sub, files, write_bytes, bytes_per_second, duration)
                        .await
                })
                .await
            })
        })
        .map_err(executor_error(cpu))?;
    handle.join().map_err(executor_error(cpu))?
}

/// `map_err` helper for starting or joining an executor pinned to `cpu`.
pub(crate) fn executor_error<T>(cpu: usize) -> impl FnOnce(glommio::GlommioError<T>) -> BenchError {
    move |error| BenchError::Executor {
        cpu,
        reason: error.to_string(),
    }
}

/// The CPUs this process may run on (its main thread's affinity mask, so a
/// caller thread that pinned itself does not narrow the choice), ascending.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: an all-zero cpu_set_t is a valid, empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid, writable cpu_set_t of the size passed.
    let status = unsafe {
        libc::sched_getaffinity(
            libc::getpid(),
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        )
    };
    if status != 0 {
        return Vec::new();
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: `cpu` is below CPU_SETSIZE, the set's capacity.
        .filter(|cpu| unsafe { libc::CPU_ISSET(*cpu, &set) })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_cpus_are_ones_this_process_may_use() {
        let allowed = allowed_cpus();
        assert!(!allowed.is_empty());
        let cpus = CeilingCpus::for_this_machine();
        assert_eq!(cpus.disk, allowed[0]);
        assert_eq!(cpus.tcp_sender, allowed[0]);
        if allowed.len() >= 2 {
            assert_eq!(cpus.tcp_receiver, allowed[1]);
        } else {
            assert_eq!(cpus.tcp_receiver, allowed[0]);
        }
        assert!(CeilingOptions::new("/tmp/x").validate(&allowed).is_ok());
    }

    /// The paced disk-alone series takes one sample per write due in its
    /// window (two files at 1 MB/s of 4 KiB writes for 0.5 s: ~122), each
    /// at least as long as nothing, and leaves no file behind.
    #[test]
    fn paced_syncs_sample_every_write_due_and_clean_up() {
        let root = tempfile::tempdir().unwrap();
        let cpu = allowed_cpus()[0];
        let summary = paced_sync_latency(
            root.path(),
            cpu,
            2,
            4096,
            1e6,
            std::time::Duration::from_millis(500),
        )
        .unwrap();
        assert!(
            (100..=130).contains(&summary.samples),
            "{} samples",
            summary.samples
        );
        assert!(summary.p50_micros > 0 && summary.p50_micros <= summary.p99_micros);
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0);
    }

    #[test]
    fn options_outside_their_bounds_are_refused() {
        let allowed = [0, 1];
        let defaults = CeilingOptions {
            cpus: CeilingCpus {
                disk: 0,
                tcp_sender: 0,
                tcp_receiver: 1,
            },
            ..CeilingOptions::new("/tmp/x")
        };
        assert!(defaults.validate(&allowed).is_ok());
        let refused = |options: CeilingOptions| match options.validate(&allowed) {
            Err(BenchError::InvalidOption { name, .. }) => name,
            other => panic!("expected a refusal, got {other:?}"),
        };
        let rows = [
            (
                CeilingOptions {
                    bytes: BYTES_MIN - 1,
                    ..defaults.clone()
                },
                "--bytes",
            ),
            (
                CeilingOptions {
                    fsync_samples: 0,
                    ..defaults.clone()
                },
                "--samples",
            ),
            (
                CeilingOptions {
                    tcp_bytes: TCP_BYTES_MAX + 1,
                    ..defaults.clone()
                },
                "--tcp-bytes",
            ),
            (
                CeilingOptions {
                    cpus: CeilingCpus {
                        tcp_receiver: 2,
                        ..defaults.cpus
                    },
                    ..defaults.clone()
                },
                "--receiver-cpu",
            ),
        ];
        for (options, name) in rows {
            assert_eq!(refused(options), name);
        }
    }

    /// A private directory under the system's temporary directory, removed
    /// when dropped.
    struct ScratchDir(PathBuf);

    impl ScratchDir {
        fn new(name: &str) -> ScratchDir {
            let path = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&path);
            std::fs::create_dir_all(&path).unwrap();
            ScratchDir(path)
        }
    }

    impl Drop for ScratchDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    #[test]
    fn a_tiny_run_measures_everything_and_leaves_no_files() {
        let scratch = ScratchDir::new("brook-ceiling-test");
        let options = CeilingOptions {
            bytes: 8 << 20,
            fsync_samples: 20,
            tcp_bytes: 16 << 20,
            ..CeilingOptions::new(&scratch.0)
        };
        let report = run(options).unwrap();
        for throughput in [
            report.disk_write,
            report.direct_read,
            report.buffered_cold_read,
            report.hot_read,
        ] {
            assert_eq!(throughput.bytes, 8 << 20);
            assert!(throughput.megabytes_per_second() > 0.0);
        }
        assert_eq!(report.fsync.samples, 20);
        assert!(report.fsync.p50_micros <= report.fsync.max_micros);
        assert_eq!(report.tcp.throughput.bytes, 16 << 20);
        assert!(report.limit_mb_per_second() > 0.0);
        let left: Vec<_> = std::fs::read_dir(&scratch.0).unwrap().collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }

    /// The full-size run, for a person to read: set BROOK_BENCH_DIR to a
    /// directory on the disk to measure and run
    /// `cargo test --release -p brook-bench ceiling -- --ignored --nocapture`.
    #[test]
    #[ignore = "takes tens of seconds and gigabytes of disk"]
    fn full_size_run() {
        let dir = std::env::var_os("BROOK_BENCH_DIR")
            .map_or_else(|| std::env::temp_dir().join("brook-bench"), PathBuf::from);
        let report = run(CeilingOptions::new(dir)).unwrap();
        println!("{}", report.to_text());
        println!("{}", report.to_json());
    }
}
