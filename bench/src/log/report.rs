//! The result of `brook bench log`: every figure next to the reference
//! measured in the same run and their ratio, as a table for people
//! ([`std::fmt::Display`]) and as JSON for scripts ([`LogReport::to_json`]).

use std::fmt;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::log::environment::Environment;
use crate::log::idle::IdleRun;
use crate::log::json::JsonObject;
use crate::log::throughput::AppendRun;

/// Target: append+fsync p99 at most this multiple of raw write+fdatasync p99.
pub const P99_RATIO_TARGET: f64 = 1.5;
/// Target: heap per open idle partition.
pub const IDLE_PARTITION_BYTES_TARGET: u64 = 100 << 10;
const BYTES_PER_MEGABYTE: f64 = 1e6;

/// Bytes moved in some time.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Throughput {
    pub bytes: u64,
    pub elapsed: Duration,
}

impl Throughput {
    /// Accumulates another run of the same series.
    pub fn add(&mut self, other: &Throughput) {
        self.bytes += other.bytes;
        self.elapsed += other.elapsed;
    }

    /// Decimal megabytes (10⁶ bytes) per second.
    pub fn megabytes_per_second(&self) -> f64 {
        self.bytes as f64 / BYTES_PER_MEGABYTE / self.elapsed.as_secs_f64()
    }

    /// Bytes, seconds and MB/s as a JSON object.
    pub(crate) fn to_json(self) -> JsonObject {
        JsonObject::new()
            .integer("bytes", self.bytes)
            .number("seconds", self.elapsed.as_secs_f64())
            .number("mb_per_s", self.megabytes_per_second())
    }
}

/// Percentiles of a latency histogram, in microseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencySummary {
    pub samples: u64,
    pub p50_micros: u64,
    pub p90_micros: u64,
    pub p99_micros: u64,
    pub p999_micros: u64,
    pub max_micros: u64,
    pub mean_micros: f64,
}

impl LatencySummary {
    pub fn of(histogram: &Histogram<u64>) -> LatencySummary {
        LatencySummary {
            samples: histogram.len(),
            p50_micros: histogram.value_at_quantile(0.50),
            p90_micros: histogram.value_at_quantile(0.90),
            p99_micros: histogram.value_at_quantile(0.99),
            p999_micros: histogram.value_at_quantile(0.999),
            max_micros: histogram.max(),
            mean_micros: histogram.mean(),
        }
    }

    pub(crate) fn to_json(self) -> JsonObject {
        JsonObject::new()
            .integer("samples", self.samples)
            .integer("p50", self.p50_micros)
            .integer("p90", self.p90_micros)
            .integer("p99", self.p99_micros)
            .integer("p99_9", self.p999_micros)
            .integer("max", self.max_micros)
            .number("mean", self.mean_micros)
    }
}

/// The batches every log measurement appends.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchShape {
    pub batch_bytes: u64,
    pub records_per_batch: u64,
    pub value_bytes: u64,
}

/// Latency of the log and of its raw reference.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct LatencyComparison {
    pub warmup_samples: u64,
    /// Bytes per raw write (the batch rounded up to whole pages).
    pub raw_write_bytes: u64,
    pub raw: LatencySummary,
    pub log: LatencySummary,
}

impl LatencyComparison {
    pub fn p99_ratio(&self) -> f64 {
        self.log.p99_micros as f64 / self.raw.p99_micros as f64
    }
}

/// Everything one `brook bench log` run measured.
#[derive(Clone, Debug)]
pub struct LogReport {
    pub environment: Environment,
    pub batch: BatchShape,
    /// Raw writes from glommio's registered buffers (the strict ceiling).
    pub ceiling: Throughput,
    /// Raw writes from rotating heap DMA buffers, as the log writes.
    pub ceiling_heap: Throughput,
    pub append: AppendRun,
    pub latency: LatencyComparison,
    pub idle: IdleRun,
}

impl LogReport {
    /// Log append throughput as a fraction of the raw device's.
    pub fn append_ratio(&self) -> f64 {
        self.append.throughput.megabytes_per_second() / self.ceiling.megabytes_per_second()
    }

    /// Log append throughput as a fraction of raw writes from heap buffers.
    pub fn append_ratio_heap(&self) -> f64 {
        self.append.throughput.megabytes_per_second() / self.ceiling_heap.megabytes_per_second()
    }

    /// The report as a JSON object (latencies in µs, throughput in MB/s).
    pub fn to_json(&self) -> String {
        let environment = &self.environment;
        JsonObject::new()
            .string("started_utc", &environment.started_utc)
            .string("kernel", &environment.kernel)
            .string("dir", &environment.dir.display().to_string())
            .string("filesystem", &environment.filesystem)
            .string("device", &environment.device)
            .integer("cpu", environment.cpu as u64)
            .object("batch", self.batch_json())
            .object("throughput", self.throughput_json())
            .object("latency_us", self.latency_json())
            .object("idle_partitions", self.idle_json())
            .render()
    }

    fn batch_json(&self) -> JsonObject {
        JsonObject::new()
            .integer("bytes", self.batch.batch_bytes)
            .integer("records", self.batch.records_per_batch)
            .integer("value_bytes", self.batch.value_bytes)
    }

    fn throughput_json(&self) -> JsonObject {
        let throughput = |run: &Throughput| run.to_json();
        let stats = &self.append.stats;
        let append = throughput(&self.append.throughput)
            .number("appends_seconds", self.append.appends_elapsed.as_secs_f64())
            .number("appends_cpu_seconds", self.append.appends_cpu.as_secs_f64())
            .integer("appends", stats.appends)
            .integer("write_jobs", stats.write_jobs)
            .integer("rolls", stats.rolls);
        JsonObject::new()
            .object("raw", throughput(&self.ceiling))
            .object("raw_heap_buffers", throughput(&self.ceiling_heap))
            .number("ratio_to_heap_buffers", self.append_ratio_heap())
            .object("append", append)
            .number("ratio", self.append_ratio())
    }

    fn latency_json(&self) -> JsonObject {
        let latency = &self.latency;
        JsonObject::new()
            .integer("warmup_samples", latency.warmup_samples)
            .integer("raw_write_bytes", latency.raw_write_bytes)
            .object("raw", latency.raw.to_json())
            .object("log", latency.log.to_json())
            .number("p99_ratio", latency.p99_ratio())
            .number("p99_ratio_target", P99_RATIO_TARGET)
    }

    fn idle_json(&self) -> JsonObject {
        let idle = &self.idle;
        JsonObject::new()
            .integer("requested", idle.requested_partitions as u64)
            .integer("measured", idle.partitions as u64)
            .optional_integer(
                "allocated_bytes_per_partition",
                idle.allocated_bytes_per_partition,
            )
            .integer("heap_bytes_per_partition", idle.heap_bytes_per_partition)
            .number("reopen_ms_per_partition", reopen_ms_per_partition(idle))
            .integer("target_bytes", IDLE_PARTITION_BYTES_TARGET)
    }
}

fn reopen_ms_per_partition(idle: &IdleRun) -> f64 {
    idle.open_elapsed.as_secs_f64() * 1e3 / idle.partitions.max(1) as f64
}

/// `met` or `MISSED` against a target.
fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

impl fmt::Display for LogReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_header(f)?;
        self.fmt_throughput(f)?;
        self.fmt_latency(f)?;
        self.fmt_idle(f)
    }
}

impl LogReport {
    fn fmt_header(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let environment = &self.environment;
        let batch = &self.batch;
        writeln!(f, "brook bench log")?;
        writeln!(f, "  started  {}", environment.started_utc)?;
        writeln!(f, "  kernel   {}", environment.kernel)?;
        writeln!(
            f,
            "  dir      {} ({} on {})",
            environment.dir.display(),
            environment.filesystem,
            environment.device
        )?;
        writeln!(f, "  cpu      {}", environment.cpu)?;
        writeln!(
            f,
            "  batch    {} bytes: {} records of {}-byte values (half random, half zeros)",
            batch.batch_bytes, batch.records_per_batch, batch.value_bytes
        )
    }

    fn fmt_throughput(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let append = &self.append;
        writeln!(f)?;
        writeln!(
            f,
            "Throughput (MB = 10^6 bytes)                      {:>12}  {:>8}  {:>8}",
            "bytes", "MB/s", "vs raw"
        )?;
        writeln!(
            f,
            "  raw O_DIRECT write, 1 MiB x2 in flight, fsync   {:>12}  {:>8.1}",
            self.ceiling.bytes,
            self.ceiling.megabytes_per_second()
        )?;
        writeln!(
            f,
            "    same, from rotating heap buffers as the log    {:>12}  {:>8.1}",
            self.ceiling_heap.bytes,
            self.ceiling_heap.megabytes_per_second()
        )?;
        writeln!(
            f,
            "  PartitionLog append, no fsync, until written    {:>12}  {:>8.1}  {:>7.2}x  ({:.2}x of heap)",
            append.throughput.bytes,
            append.throughput.megabytes_per_second(),
            self.append_ratio(),
            self.append_ratio_heap()
        )?;
        let write_job_bytes = append.throughput.bytes / append.stats.write_jobs.max(1);
        writeln!(
            f,
            "    {} appends returned after {:.2} s (shard CPU {:.2} s) of {:.2} s; {} write jobs (mean {} KiB); {} rolls",
            append.stats.appends,
            append.appends_elapsed.as_secs_f64(),
            append.appends_cpu.as_secs_f64(),
            append.throughput.elapsed.as_secs_f64(),
            append.stats.write_jobs,
            write_job_bytes >> 10,
            append.stats.rolls
        )
    }

    fn fmt_latency(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let latency = &self.latency;
        writeln!(f)?;
        writeln!(
            f,
            "Append + fsync latency (µs)             {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
            "samples", "p50", "p90", "p99", "p99.9", "max"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: &str, summary: &LatencySummary| {
            writeln!(
                f,
                "  {name:<37} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
                summary.samples,
                summary.p50_micros,
                summary.p90_micros,
                summary.p99_micros,
                summary.p999_micros,
                summary.max_micros
            )
        };
        let raw_name = format!("raw write {} B + fdatasync", latency.raw_write_bytes);
        row(f, &raw_name, &latency.raw)?;
        row(f, "PartitionLog append + wait_durable", &latency.log)?;
        let ratio = latency.p99_ratio();
        writeln!(
            f,
            "  p99 ratio {ratio:.2}x (target <= {P99_RATIO_TARGET}x: {}); series alternate; first {} samples of each unrecorded",
            verdict(ratio <= P99_RATIO_TARGET),
            latency.warmup_samples
        )
    }

    fn fmt_idle(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let idle = &self.idle;
        writeln!(f)?;
        writeln!(
            f,
            "Idle partition heap ({} partitions reopened after a clean shutdown)",
            idle.partitions
        )?;
        if idle.partitions < idle.requested_partitions {
            writeln!(
                f,
                "  capped from {} by the open-files limit (ulimit -n)",
                idle.requested_partitions
            )?;
        }
        match idle.allocated_bytes_per_partition {
            Some(bytes) => writeln!(
                f,
                "  live heap growth (counting allocator)   {bytes:>8} B/partition (target <= {IDLE_PARTITION_BYTES_TARGET} B: {})",
                verdict(bytes <= IDLE_PARTITION_BYTES_TARGET)
            )?,
            None => writeln!(
                f,
                "  live heap growth: n/a (CountingAllocator is not the global allocator)"
            )?,
        }
        writeln!(
            f,
            "  PartitionLog::heap_bytes() mean         {:>8} B/partition",
            idle.heap_bytes_per_partition
        )?;
        writeln!(
            f,
            "  reopen time                             {:>8.2} ms/partition",
            reopen_ms_per_partition(idle)
        )
    }
}

/// For report tests: the line of `text` holding `needle`, its runs of
/// spaces collapsed to one.
#[cfg(test)]
pub(crate) fn line_with(text: &str, needle: &str) -> String {
    text.lines()
        .find(|line| line.contains(needle))
        .unwrap_or_else(|| panic!("no line with {needle:?} in\n{text}"))
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::latency::latency_histogram;

    #[test]
    fn percentiles_come_from_the_histogram() {
        let mut histogram = latency_histogram();
        for micros in 1..=1000 {
            histogram.record(micros).unwrap();
        }
        let summary = LatencySummary::of(&histogram);
        assert_eq!(summary.samples, 1000);
        assert_eq!(summary.p50_micros, 500);
        assert_eq!(summary.p90_micros, 900);
        assert_eq!(summary.p99_micros, 990);
        assert_eq!(summary.p999_micros, 999);
        assert_eq!(summary.max_micros, 1000);
        assert!((summary.mean_micros - 500.5).abs() < 0.01);
    }

    fn sample_report() -> LogReport {
        let latency = |p99_micros| LatencySummary {
            samples: 2000,
            p50_micros: 600,
            p90_micros: 800,
            p99_micros,
            p999_micros: 4000,
            max_micros: 9000,
            mean_micros: 650.25,
        };
        LogReport {
            environment: Environment {
                started_utc: "2026-11-29 19:00:00 UTC".into(),
                kernel: "6.18.44".into(),
                dir: "/work/bench \"tmp\"".into(),
                filesystem: "ext4".into(),
                device: "/dev/vda".into(),
                cpu: 0,
            },
            batch: BatchShape {
                batch_bytes: 66173,
                records_per_batch: 64,
                value_bytes: 1024,
            },
            ceiling: Throughput {
                bytes: 2_000_000_000,
                elapsed: Duration::from_secs(2),
            },
            ceiling_heap: Throughput {
                bytes: 2_000_000_000,
                elapsed: Duration::from_secs(2),
            },
            append: AppendRun {
                throughput: Throughput {
                    bytes: 2_000_000_000,
                    elapsed: Duration::from_secs(4),
                },
                appends_elapsed: Duration::from_secs(3),
                appends_cpu: Duration::from_secs(1),
                stats: brook_shards::storage::LogStats {
                    appends: 30_000,
                    write_jobs: 30,
                    syncs: 0,
                    rolls: 1,
                },
            },
            latency: LatencyComparison {
                warmup_samples: 10,
                raw_write_bytes: 69632,
                raw: latency(2000),
                log: latency(3100),
            },
            idle: IdleRun {
                requested_partitions: 1000,
                partitions: 900,
                allocated_bytes_per_partition: Some(4096),
                heap_bytes_per_partition: 2500,
                open_elapsed: Duration::from_millis(900),
            },
        }
    }

    #[test]
    fn the_table_puts_each_figure_next_to_its_reference() {
        let text = sample_report().to_string();
        let line = |needle: &str| line_with(&text, needle);
        assert!(line("raw O_DIRECT").ends_with("2000000000 1000.0"));
        assert!(line("PartitionLog append,").ends_with("2000000000 500.0 0.50x (0.50x of heap)"));
        assert!(line("raw write 69632 B").ends_with("2000 600 800 2000 4000 9000"));
        assert!(line("append + wait_durable").ends_with("2000 600 800 3100 4000 9000"));
        assert!(line("p99 ratio").starts_with("p99 ratio 1.55x (target <= 1.5x: MISSED)"));
        assert!(line("capped").contains("from 1000"));
        assert!(line("live heap growth").contains("4096 B/partition"));
        assert!(line("reopen time").contains("1.00 ms/partition"));
    }

    #[test]
    fn the_json_has_every_figure() {
        let json = sample_report().to_json();
        for needle in [
            "\"dir\": \"/work/bench \\\"tmp\\\"\"",
            "\"mb_per_s\": 1000.000",
            "\"ratio\": 0.500",
            "\"p99\": 3100",
            "\"p99_ratio\": 1.550",
            "\"measured\": 900",
            "\"allocated_bytes_per_partition\": 4096",
            "\"reopen_ms_per_partition\": 1.000",
        ] {
            assert!(json.contains(needle), "{needle} missing from\n{json}");
        }
        assert_eq!(json.matches('{').count(), json.matches('}').count());
    }

    #[test]
    fn throughput_is_in_decimal_megabytes() {
        let throughput = Throughput {
            bytes: 3_000_000_000,
            elapsed: Duration::from_secs(2),
        };
        assert!((throughput.megabytes_per_second() - 1500.0).abs() < 1e-9);
    }
}
