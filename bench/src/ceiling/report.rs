//! The result of `brook bench ceiling`: the machine's limits as a short
//! table for people ([`CeilingReport::to_text`]) and as JSON for scripts
//! ([`CeilingReport::to_json`]), and the one figure broker throughput is
//! judged against ([`CeilingReport::limit_mb_per_second`]).

use std::fmt;

use crate::ceiling::CeilingCpus;
use crate::ceiling::disk::{
    BUFFERED_READ_BYTES, DIRECT_READ_BYTES, DIRECT_READS_IN_FLIGHT, FSYNC_WRITE_BYTES,
};
use crate::ceiling::tcp::{TCP_WRITE_BYTES, TcpRun};
use crate::log::ceiling::{CEILING_WRITE_BYTES, CEILING_WRITES_IN_FLIGHT};
use crate::log::environment::Environment;
use crate::log::json::JsonObject;
use crate::log::latency::WARMUP_SAMPLES;
use crate::log::report::{LatencySummary, Throughput};

/// Target for the broker: produce throughput at least this fraction of
/// [`CeilingReport::limit_mb_per_second`].
pub const THROUGHPUT_TARGET_FRACTION: f64 = 0.7;

/// Everything one `brook bench ceiling` run measured.
#[derive(Clone, Debug)]
pub struct CeilingReport {
    /// When, where and on which kernel; `environment.cpu` is `cpus.disk`.
    pub environment: Environment,
    pub cpus: CeilingCpus,
    /// Sequential O_DIRECT writes from heap buffers, until `fdatasync`.
    pub disk_write: Throughput,
    /// Sequential O_DIRECT reads of the file just written.
    pub direct_read: Throughput,
    /// The same file read through the page cache for the first time.
    pub buffered_cold_read: Throughput,
    /// The same file read through the page cache again (from memory).
    pub hot_read: Throughput,
    /// Write of [`FSYNC_WRITE_BYTES`] + `fdatasync`, in microseconds.
    pub fsync: LatencySummary,
    pub tcp: TcpRun,
}

impl CeilingReport {
    /// The most a broker on this machine could move per second through one
    /// disk and one connection: the lower of sequential disk writes and
    /// loopback TCP, in MB/s (10⁶ bytes).
    pub fn limit_mb_per_second(&self) -> f64 {
        self.disk_write
            .megabytes_per_second()
            .min(self.tcp.throughput.megabytes_per_second())
    }

    /// [`THROUGHPUT_TARGET_FRACTION`] of the limit, in MB/s.
    pub fn target_mb_per_second(&self) -> f64 {
        THROUGHPUT_TARGET_FRACTION * self.limit_mb_per_second()
    }

    /// The report as a short human-readable table.
    pub fn to_text(&self) -> String {
        self.to_string()
    }

    /// The report as a JSON object (throughput in MB/s, latency in µs).
    pub fn to_json(&self) -> String {
        self.to_json_object().render()
    }

    /// The report as a JSON object, to nest in a larger report.
    pub fn to_json_object(&self) -> JsonObject {
        let environment = &self.environment;
        let tcp = &self.tcp;
        let loopback = tcp
            .throughput
            .to_json()
            .integer("write_bytes", TCP_WRITE_BYTES)
            .number("sender_cpu_seconds", tcp.sender_cpu_time.as_secs_f64())
            .number("receiver_cpu_seconds", tcp.receiver_cpu_time.as_secs_f64());
        let fsync = self
            .fsync
            .to_json()
            .integer("write_bytes", FSYNC_WRITE_BYTES)
            .integer("warmup_samples", WARMUP_SAMPLES);
        JsonObject::new()
            .string("started_utc", &environment.started_utc)
            .string("kernel", &environment.kernel)
            .string("dir", &environment.dir.display().to_string())
            .string("filesystem", &environment.filesystem)
            .string("device", &environment.device)
            .object("cpus", self.cpus_json())
            .object("disk_write", self.disk_write.to_json())
            .object("disk_read_direct", self.direct_read.to_json())
            .object("disk_read_buffered_cold", self.buffered_cold_read.to_json())
            .object("disk_read_hot", self.hot_read.to_json())
            .object("fsync_us", fsync)
            .object("loopback_tcp", loopback)
            .number("limit_mb_per_s", self.limit_mb_per_second())
            .number("target_fraction", THROUGHPUT_TARGET_FRACTION)
            .number("target_mb_per_s", self.target_mb_per_second())
    }

    fn cpus_json(&self) -> JsonObject {
        JsonObject::new()
            .integer("disk", self.cpus.disk as u64)
            .integer("tcp_sender", self.cpus.tcp_sender as u64)
            .integer("tcp_receiver", self.cpus.tcp_receiver as u64)
    }
}

impl fmt::Display for CeilingReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.fmt_header(f)?;
        self.fmt_throughput(f)?;
        self.fmt_fsync(f)?;
        writeln!(f)?;
        writeln!(
            f,
            "Limit min(disk write, loopback TCP) {:.1} MB/s; broker target {:.0}% of it = {:.1} MB/s",
            self.limit_mb_per_second(),
            THROUGHPUT_TARGET_FRACTION * 100.0,
            self.target_mb_per_second()
        )
    }
}

impl CeilingReport {
    fn fmt_header(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let environment = &self.environment;
        writeln!(f, "brook bench ceiling")?;
        writeln!(f, "  started  {}", environment.started_utc)?;
        writeln!(f, "  kernel   {}", environment.kernel)?;
        writeln!(
            f,
            "  dir      {} ({} on {})",
            environment.dir.display(),
            environment.filesystem,
            environment.device
        )?;
        writeln!(
            f,
            "  cpus     disk {}, tcp sender {}, tcp receiver {}",
            self.cpus.disk, self.cpus.tcp_sender, self.cpus.tcp_receiver
        )
    }

    fn fmt_throughput(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f)?;
        writeln!(
            f,
            "Throughput (MB = 10^6 bytes)                     {:>12}  {:>8}",
            "bytes", "MB/s"
        )?;
        let row = |f: &mut fmt::Formatter<'_>, name: String, run: &Throughput| {
            writeln!(
                f,
                "  {name:<46} {:>12}  {:>8.1}",
                run.bytes,
                run.megabytes_per_second()
            )
        };
        let write_name = format!(
            "disk write O_DIRECT {} MiB x{CEILING_WRITES_IN_FLIGHT}, fdatasync",
            CEILING_WRITE_BYTES >> 20
        );
        row(f, write_name, &self.disk_write)?;
        let read_name = format!(
            "disk read O_DIRECT {} MiB x{DIRECT_READS_IN_FLIGHT}",
            DIRECT_READ_BYTES >> 20
        );
        row(f, read_name, &self.direct_read)?;
        let buffered = BUFFERED_READ_BYTES >> 20;
        row(
            f,
            format!("disk read buffered {buffered} MiB, cold cache"),
            &self.buffered_cold_read,
        )?;
        row(
            f,
            format!("hot read buffered {buffered} MiB, page cache"),
            &self.hot_read,
        )?;
        let tcp = &self.tcp;
        row(
            f,
            format!(
                "loopback TCP {} MiB writes, 1 stream",
                TCP_WRITE_BYTES >> 20
            ),
            &tcp.throughput,
        )?;
        let seconds = tcp.throughput.elapsed.as_secs_f64();
        writeln!(
            f,
            "    CPU busy: sender {:.0}%, receiver {:.0}% of {seconds:.2} s",
            percent(tcp.sender_cpu_time.as_secs_f64(), seconds),
            percent(tcp.receiver_cpu_time.as_secs_f64(), seconds)
        )
    }

    fn fmt_fsync(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let fsync = &self.fsync;
        writeln!(f)?;
        writeln!(
            f,
            "{:<36} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
            "Sync latency (µs)", "samples", "p50", "p90", "p99", "p99.9", "max"
        )?;
        let name = format!("write {FSYNC_WRITE_BYTES} B + fdatasync");
        writeln!(
            f,
            "  {name:<34} {:>7} {:>7} {:>7} {:>7} {:>7} {:>7}",
            fsync.samples,
            fsync.p50_micros,
            fsync.p90_micros,
            fsync.p99_micros,
            fsync.p999_micros,
            fsync.max_micros
        )
    }
}

fn percent(part: f64, whole: f64) -> f64 {
    if whole > 0.0 {
        100.0 * part / whole
    } else {
        0.0
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn throughput(megabytes: u64, millis: u64) -> Throughput {
        Throughput {
            bytes: megabytes * 1_000_000,
            elapsed: Duration::from_millis(millis),
        }
    }

    fn sample_report(disk_write: Throughput, tcp: Throughput) -> CeilingReport {
        CeilingReport {
            environment: Environment {
                started_utc: "2026-11-30 10:00:00 UTC".into(),
                kernel: "6.18.44".into(),
                dir: "/work/bench \"tmp\"".into(),
                filesystem: "ext4".into(),
                device: "/dev/vda".into(),
                cpu: 0,
            },
            cpus: CeilingCpus {
                disk: 0,
                tcp_sender: 0,
                tcp_receiver: 1,
            },
            disk_write,
            direct_read: throughput(2000, 1000),
            buffered_cold_read: throughput(1500, 1000),
            hot_read: throughput(6000, 1000),
            fsync: LatencySummary {
                samples: 2000,
                p50_micros: 520,
                p90_micros: 610,
                p99_micros: 760,
                p999_micros: 2400,
                max_micros: 9100,
                mean_micros: 540.5,
            },
            tcp: TcpRun {
                throughput: tcp,
                sender_cpu_time: Duration::from_millis(500),
                receiver_cpu_time: Duration::from_millis(1000),
            },
        }
    }

    #[test]
    fn the_limit_is_the_slower_of_disk_writes_and_loopback_tcp() {
        let rows = [
            // (disk MB, disk ms, tcp MB, tcp ms, limit MB/s)
            (1200, 1000, 4000, 1000, 1200.0),
            (3000, 1000, 2500, 1000, 2500.0),
            (1000, 2000, 1000, 2000, 500.0),
        ];
        for (disk_mb, disk_ms, tcp_mb, tcp_ms, limit) in rows {
            let report = sample_report(throughput(disk_mb, disk_ms), throughput(tcp_mb, tcp_ms));
            assert!(
                (report.limit_mb_per_second() - limit).abs() < 1e-6,
                "{limit}"
            );
            let target = report.target_mb_per_second();
            assert!((target - limit * THROUGHPUT_TARGET_FRACTION).abs() < 1e-6);
        }
    }

    #[test]
    fn the_table_has_every_figure() {
        let text = sample_report(throughput(1200, 1000), throughput(4000, 2000)).to_text();
        let line = |needle: &str| crate::log::report::line_with(&text, needle);
        assert!(line("disk write O_DIRECT").ends_with("1200000000 1200.0"));
        assert!(line("disk read O_DIRECT").ends_with("2000000000 2000.0"));
        assert!(line("cold cache").ends_with("1500000000 1500.0"));
        assert!(line("hot read").ends_with("6000000000 6000.0"));
        assert!(line("loopback TCP").ends_with("4000000000 2000.0"));
        assert!(line("CPU busy").contains("sender 25%, receiver 50% of 2.00 s"));
        assert!(line("B + fdatasync").ends_with("2000 520 610 760 2400 9100"));
        assert!(line("Limit").contains("1200.0 MB/s; broker target 70% of it = 840.0 MB/s"));
        assert!(line("cpus").ends_with("disk 0, tcp sender 0, tcp receiver 1"));
    }

    #[test]
    fn the_json_has_every_figure() {
        let json = sample_report(throughput(1200, 1000), throughput(4000, 2000)).to_json();
        for needle in [
            "\"dir\": \"/work/bench \\\"tmp\\\"\"",
            "\"tcp_receiver\": 1",
            "\"disk_write\": {\n    \"bytes\": 1200000000,\n    \"seconds\": 1.000,\n    \"mb_per_s\": 1200.000\n  }",
            "\"disk_read_direct\": {",
            "\"disk_read_buffered_cold\": {",
            "\"mb_per_s\": 6000.000",
            "\"p99_9\": 2400",
            "\"write_bytes\": 69632",
            "\"receiver_cpu_seconds\": 1.000",
            "\"limit_mb_per_s\": 1200.000",
            "\"target_fraction\": 0.700",
            "\"target_mb_per_s\": 840.000",
        ] {
            assert!(json.contains(needle), "{needle} missing from\n{json}");
        }
        assert_eq!(json.matches('{').count(), json.matches('}').count());
        assert!(json.starts_with("{\n") && json.ends_with("\n}"));
    }
}
