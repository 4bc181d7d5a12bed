//! The named workloads behind Brook's performance bar (`brook bench run
//! producer-perf | consumer-perf | kcat-read | end-to-end | throughput |
//! latency | catchup | many-partitions | recovery | scaling | all`), so
//! anyone can repeat the published figures on their machine.
//!
//! The first four drive the broker with clients Brook did not write, as
//! users run them: Kafka's own performance tools and kcat ([`clients`]),
//! broker and client unpinned unless `--pin-real-clients`.
//!
//! Each starts its own `brook serve` (fresh data directory, pinned to
//! `--broker-cpu` with `--cores 1`) and drives it from a load generator
//! pinned to `--load-cpu`, unless `--brokers` points at a running broker.
//! Before the workloads, the machine's ceiling is measured in the same run
//! ([`crate::ceiling`]) and every figure is printed beside the ceiling it is
//! judged against.
//!
//! With `--kafka`, each workload that can also runs against Apache Kafka
//! (`bench/kafka/start-kafka.sh`: one KRaft node from the jars `tests/run`
//! installs, Kafka's defaults, pinned like Brook), right after Brook with
//! the same client and shape, and the report ends with both side by side.

mod clients;
mod failover;
mod replication;
pub mod report;
mod storage;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Args, ValueEnum};
use glommio::Placement;

use crate::ceiling::{CeilingOptions, CeilingReport};
use crate::log::error::BenchError;
use crate::log::json::JsonObject;
use crate::workload::client_error;
use crate::workload::options::{WorkloadOptions, parse_duration};
use crate::workload::report::WorkloadReport;
use brook_engine::units::parse_bytes;
use brook_launch::{BrokerLaunch, BrokerProcess, KafkaLaunch};
use brook_shards::client::{ClientError, Cluster};
use brook_shards::runtime::{executor_builder, guarded};
use report::{Figure, NamedReport, NamedRun, Target};

/// How long the latency workload's disk-alone reference runs.
const PACED_SYNC_DURATION: Duration = Duration::from_secs(10);

/// The workloads `brook bench run` knows by name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum Named {
    /// Kafka's ProducerPerformance (kafka-producer-perf-test), 1 KiB
    /// records to 8 partitions unthrottled, with acks=1 and with acks=all.
    ProducerPerf,
    /// Kafka's ConsumerPerformance (kafka-consumer-perf-test) reading
    /// `--records` records of 1 KiB from 8 partitions, written first.
    ConsumerPerf,
    /// kcat (librdkafka) reading the same data to its end, timed.
    KcatRead,
    /// Kafka's EndToEndLatency: one acks=all record of 1 KiB at a time,
    /// produce → consume.
    EndToEnd,
    /// 1 KiB records (50% random), 8 partitions, acks=1, unthrottled.
    Throughput,
    /// acks=all with an fsync per append (group commit) at half the
    /// throughput workload's rate: produce and end-to-end percentiles.
    Latency,
    /// Consume data already on disk: cold (after dropping the page cache)
    /// and hot.
    Catchup,
    /// 10,000 idle partitions: broker memory; then produce to all of them.
    ManyPartitions,
    /// kill -9 with a large log, restart: time until Metadata and the latest
    /// offsets are served.
    Recovery,
    /// The throughput workload with `--cores 1` and `--cores 2`.
    Scaling,
    /// Three voters: kill -9 of the active controller → the first
    /// CreateTopics that succeeds (10 kills), and CreateTopics → the topic
    /// in Metadata on every broker. Not part of `all`.
    ControllerFailover,
    /// Three voters: acks=all throughput and latency with three replicas
    /// beside one; kill -9 and SIGTERM of a leader → the first acks=all
    /// produce that succeeds.
    Replication,
    /// Every workload above but controller-failover, in order (the
    /// real-client ones first), after one ceiling measurement.
    All,
}

/// Where the Kafka launcher is looked for when `--kafka-script` is not
/// given: in the current directory's checkout, then above the binary.
const KAFKA_SCRIPT: &str = "bench/kafka/start-kafka.sh";

/// Records per second of the paced phases with `--kafka` and no `--rate`:
/// one rate for both brokers, well inside what each holds on this machine
/// (Kafka's three replicas took ~97,000 1 KiB records a second here, its
/// one node with flush.messages=1 ~130,000). Half of each broker's own
/// throughput paced each at a different rate, and half of Brook's
/// saturated Kafka, so its percentiles measured a queue.
const SIDE_BY_SIDE_RATE: u64 = 20_000;

impl Named {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Named::ProducerPerf => "producer-perf",
            Named::ConsumerPerf => "consumer-perf",
            Named::KcatRead => "kcat-read",
            Named::EndToEnd => "end-to-end",
            Named::Throughput => "throughput",
            Named::Latency => "latency",
            Named::Catchup => "catchup",
            Named::ManyPartitions => "many-partitions",
            Named::Recovery => "recovery",
            Named::Scaling => "scaling",
            Named::ControllerFailover => "controller-failover",
            Named::Replication => "replication",
            Named::All => "all",
        }
    }

    fn each(self) -> Vec<Named> {
        match self {
            // The real clients' rows first: they are the headline figures.
            Named::All => vec![
                Named::ProducerPerf,
                Named::ConsumerPerf,
                Named::KcatRead,
                Named::EndToEnd,
                Named::Throughput,
                Named::Latency,
                Named::Catchup,
                Named::ManyPartitions,
                Named::Recovery,
                Named::Scaling,
                Named::Replication,
            ],
            one => vec![one],
        }
    }

    /// Whether `--kafka` runs it against Kafka too: scaling is Brook's
    /// `--cores`, and controller failover reads Brook's controller id from
    /// Metadata (Kafka's KRaft brokers name a random broker there).
    fn runs_on_kafka(self) -> bool {
        !matches!(self, Named::Scaling | Named::ControllerFailover)
    }
}

/// How a named workload is run (all but the name have defaults).
#[derive(Clone, Debug, PartialEq, Args)]
pub struct NamedOptions {
    #[arg(value_enum)]
    pub workload: Named,
    /// Where the brokers' data and the ceiling's files go (on the disk to
    /// measure); each broker gets a fresh subdirectory.
    #[arg(long, default_value = "./brook-bench")]
    pub dir: PathBuf,
    /// Drive a running broker instead of starting one (host:port); the
    /// recovery and scaling workloads need their own broker.
    #[arg(long)]
    pub brokers: Option<String>,
    /// Measured window of the throughput and latency workloads.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Records per second of the paced phases: the latency workload and
    /// the replication workload's latency (default: half of what that
    /// broker's throughput reached; with --kafka, 20000 on both brokers).
    #[arg(long)]
    pub rate: Option<u64>,
    /// Bytes the catch-up workload writes, then reads back.
    #[arg(long, default_value = "4GiB", value_parser = parse_bytes)]
    pub catchup_bytes: u64,
    /// Bytes retained before the recovery workload's kill -9.
    #[arg(long, default_value = "10GiB", value_parser = parse_bytes)]
    pub recovery_bytes: u64,
    /// Leader kills of the replication workload and controller kills of
    /// controller-failover; the replication workload then stops a leader
    /// with SIGTERM half as many times (at least once).
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u64).range(1..))]
    pub kills: u64,
    /// Partitions for the many-partitions workload.
    #[arg(long, default_value_t = 10_000)]
    pub partitions: i32,
    /// Bytes the ceiling's disk measurements write and read.
    #[arg(long, default_value = "2GiB", value_parser = parse_bytes)]
    pub ceiling_bytes: u64,
    /// Skip the ceiling measurement (figures then have no reference).
    #[arg(long)]
    pub no_ceiling: bool,
    /// Idle time before each workload that follows another (or the
    /// ceiling), so one's aftermath is not measured in the next: right
    /// after Kafka's throughput workload, Brook's latency workload had a
    /// p99 of 26-60 ms in three runs, and 3.0 ms after a minute idle.
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub settle: Duration,
    /// Leave the page cache alone before the cold reads (catchup's, and the
    /// third read of consumer-perf and kcat-read), whose figures are then
    /// not cold ones: for runs on shared machines and in tests.
    #[arg(long)]
    pub no_drop_caches: bool,
    /// CPU the broker is pinned to (in the real-client workloads only
    /// with --pin-real-clients).
    #[arg(long, default_value_t = 0)]
    pub broker_cpu: usize,
    /// CPU the load generator is pinned to (the real clients only with
    /// --pin-real-clients).
    #[arg(long, default_value_t = 1)]
    pub load_cpu: usize,
    /// The `brook` binary to start brokers from (default: the one beside
    /// this program, its name without `-bench`).
    #[arg(long)]
    pub binary: Option<PathBuf>,
    /// Records the real-client workloads write with ProducerPerformance
    /// (each row) and write, then read, in consumer-perf and kcat-read.
    #[arg(long, default_value_t = 2_000_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub records: u64,
    /// Records the end-to-end workload sends, one at a time.
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub end_to_end_records: u64,
    /// Nodes of the real-client workloads' broker: 1, or 3 voters (each a
    /// broker and a controller, unpinned) with topics of three replicas
    /// and min.insync.replicas=2.
    #[arg(long, default_value_t = 1, value_parser = parse_nodes)]
    pub nodes: usize,
    /// Pin the real-client workloads as the others are: the broker (Brook
    /// with --cores 1) to --broker-cpu, the client to --load-cpu. By
    /// default neither is pinned, as users run them (Brook then has its
    /// default of a shard per core, which it places itself).
    #[arg(long)]
    pub pin_real_clients: bool,
    /// Also run each workload against Apache Kafka, right after Brook, with
    /// the same client, shape and CPUs (not scaling and controller-failover;
    /// replication on three Kafka nodes); the report ends with both side by
    /// side.
    #[arg(long)]
    pub kafka: bool,
    /// The Kafka launcher (default: bench/kafka/start-kafka.sh of the
    /// checkout this is run in, or the binary is in).
    #[arg(long)]
    pub kafka_script: Option<PathBuf>,
}

/// Runs `options.workload` (every workload for `all`); `progress` gets the
/// live lines.
pub fn run(
    options: &NamedOptions,
    progress: &mut dyn FnMut(&str),
) -> Result<NamedReport, BenchError> {
    let ceiling = if options.no_ceiling {
        None
    } else {
        progress("measuring the machine's ceiling …");
        let mut ceiling_options = CeilingOptions::new(&options.dir);
        ceiling_options.bytes = options.ceiling_bytes;
        Some(crate::ceiling::run(ceiling_options)?)
    };
    let kafka_script = if options.kafka {
        if options.brokers.is_some() {
            return Err(BenchError::InvalidOption {
                name: "kafka",
                reason: "--kafka starts its own Kafka brokers; --brokers drives one broker".into(),
            });
        }
        Some(kafka_script(options)?)
    } else {
        None
    };
    let mut bench = Bench {
        options,
        progress,
        ceiling: ceiling.as_ref(),
        throughput_rate: None,
        kafka: None,
        ran: ceiling.is_some(),
    };
    let mut runs = Vec::new();
    let mut kafka_runs = Vec::new();
    for workload in options.workload.each() {
        runs.push(bench.named(workload));
        if let Some(script) = kafka_script.as_ref().filter(|_| workload.runs_on_kafka()) {
            bench.kafka = Some(script.clone());
            let mut run = bench.named(workload);
            bench.kafka = None;
            // The targets are Brook's performance bar: Kafka's figures are
            // compared with Brook's, not judged.
            for figure in &mut run.figures {
                figure.target = None;
            }
            kafka_runs.push(run);
        }
    }
    Ok(NamedReport {
        ceiling,
        runs,
        kafka: kafka_runs,
    })
}

/// The Kafka launcher `--kafka` uses.
fn kafka_script(options: &NamedOptions) -> Result<PathBuf, BenchError> {
    if let Some(script) = &options.kafka_script {
        return match script.is_file() {
            true => Ok(script.clone()),
            false => Err(BenchError::InvalidOption {
                name: "kafka-script",
                reason: format!("{} is not a file", script.display()),
            }),
        };
    }
    let here = std::env::current_dir().ok();
    let binary = std::env::current_exe().ok();
    let mut places = here.iter().map(|dir| dir.as_path()).collect::<Vec<_>>();
    places.extend(binary.iter().flat_map(|binary| binary.ancestors().skip(1)));
    places
        .into_iter()
        .map(|dir| dir.join(KAFKA_SCRIPT))
        .find(|script| script.is_file())
        .ok_or_else(|| BenchError::InvalidOption {
            name: "kafka-script",
            reason: format!("{KAFKA_SCRIPT} is not here nor above the brook binary: give its path"),
        })
}

/// A broker the workloads run against.
enum Broker {
    Own(Box<BrokerProcess>),
    External(String),
}

impl Drop for Broker {
    /// An own broker is killed and its data deleted (its log kept): a run of
    /// every workload writes tens of GiB, more than a disk may hold at once.
    fn drop(&mut self) {
        if let Broker::Own(process) = self {
            process.kill();
            remove_data_keeping_log(process.data_dir(), &process.log_path());
        }
    }
}

/// Deletes everything in `dir` but the broker's log file.
/// The `brook` binary brokers start from: `--binary`, or the one beside this
/// program named without its `-bench` (`brook bench` runs `brook-bench`
/// from beside `brook`; the tests' `brook-e2e` runs `brook-e2e-bench`).
fn brook_binary(options: &NamedOptions) -> Result<PathBuf, BenchError> {
    if let Some(binary) = &options.binary {
        return Ok(binary.clone());
    }
    let this = std::env::current_exe()
        .map_err(|error| BenchError::Broker(format!("finding this program: {error}")))?;
    let name = this
        .file_name()
        .and_then(|name| name.to_str())
        .unwrap_or("");
    match name.strip_suffix("-bench") {
        Some(brook) if !brook.is_empty() => Ok(this.with_file_name(brook)),
        _ => Err(BenchError::Broker(format!(
            "{} is not named <brook>-bench: give the brook binary with --binary",
            this.display()
        ))),
    }
}

fn remove_data_keeping_log(dir: &std::path::Path, log: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path == log {
            continue;
        }
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        if let Err(error) = removed {
            eprintln!("brook bench: could not remove {}: {error}", path.display());
        }
    }
}

impl Broker {
    fn address(&self) -> String {
        match self {
            Broker::Own(process) => process.address.clone(),
            Broker::External(address) => address.clone(),
        }
    }

    fn process(&mut self) -> Option<&mut BrokerProcess> {
        match self {
            Broker::Own(process) => Some(process),
            Broker::External(_) => None,
        }
    }
}

struct Bench<'a> {
    options: &'a NamedOptions,
    progress: &'a mut dyn FnMut(&str),
    ceiling: Option<&'a CeilingReport>,
    /// Records per second the throughput workload reached on Brook in this
    /// run (half of it is the latency workload's rate without `--kafka`).
    throughput_rate: Option<f64>,
    /// While the workloads run against Apache Kafka: its launcher.
    kafka: Option<PathBuf>,
    /// Whether a workload (or the ceiling) ran before: the next one
    /// settles first.
    ran: bool,
}

impl Bench<'_> {
    /// Runs `workload` against Brook, or Kafka while `self.kafka` is set,
    /// after `--settle` of idle time if something ran before it.
    fn named(&mut self, workload: Named) -> NamedRun {
        let settle = self.options.settle;
        if std::mem::replace(&mut self.ran, true) && !settle.is_zero() {
            (self.progress)(&format!("settling {settle:?} before the next workload"));
            std::thread::sleep(settle);
        }
        let outcome = match workload {
            Named::ProducerPerf => self.producer_perf(),
            Named::ConsumerPerf => self.consumer_perf(),
            Named::KcatRead => self.kcat_read(),
            Named::EndToEnd => self.end_to_end(),
            Named::Throughput => self.throughput(),
            Named::Latency => self.latency(),
            Named::Catchup => self.catchup(),
            Named::ManyPartitions => self.many_partitions(),
            Named::Recovery => self.recovery(),
            Named::Scaling => self.scaling(),
            Named::ControllerFailover => self.controller_failover(),
            Named::Replication => self.replication(),
            Named::All => unreachable!("each() expands all"),
        };
        // One workload failing must not cost the figures of the others.
        let run = outcome.unwrap_or_else(|error| NamedRun::failed(workload.name(), &error));
        let on = if self.kafka.is_some() {
            " on Kafka"
        } else {
            ""
        };
        (self.progress)(&format!("{}{on} done", run.name));
        run
    }

    /// A fresh broker for `name` (or the external one): `brook serve`, or
    /// Apache Kafka while the workloads run against it.
    fn broker(&self, name: &str, cores: usize, pinned: bool) -> Result<Broker, BenchError> {
        self.broker_with(name, cores, pinned, Vec::new())
    }

    /// As [`Bench::broker`], with `extra` arguments for `brook serve`
    /// (Kafka's launcher takes none).
    fn broker_with(
        &self,
        name: &str,
        cores: usize,
        pinned: bool,
        extra: Vec<String>,
    ) -> Result<Broker, BenchError> {
        if let Some(address) = &self.options.brokers {
            return Ok(Broker::External(address.clone()));
        }
        let prefix = if self.kafka.is_some() {
            "kafka"
        } else {
            "broker"
        };
        let data_dir = self.options.dir.join(format!("{prefix}-{name}"));
        if data_dir.exists() {
            std::fs::remove_dir_all(&data_dir).map_err(|error| {
                BenchError::Broker(format!("clearing {}: {error}", data_dir.display()))
            })?;
        }
        let cpus = if pinned {
            vec![self.options.broker_cpu]
        } else {
            Vec::new()
        };
        if let Some(script) = &self.kafka {
            let launch = KafkaLaunch::single(script.clone())?;
            let process = BrokerProcess::start_kafka(launch, data_dir, cpus)?;
            return Ok(Broker::Own(Box::new(process)));
        }
        let binary = brook_binary(self.options)?;
        let process = BrokerProcess::start(BrokerLaunch {
            binary,
            data_dir,
            cores,
            cpus,
            extra,
            namespace: None,
            listen: None,
        })?;
        Ok(Broker::Own(Box::new(process)))
    }

    fn own_broker_needed(&self, name: &str) -> Result<(), BenchError> {
        match &self.options.brokers {
            Some(_) => Err(BenchError::InvalidOption {
                name: "brokers",
                reason: format!("the {name} workload starts (and kills) its own broker"),
            }),
            None => Ok(()),
        }
    }

    /// The throughput workload's shape, against `address`.
    fn throughput_workload(&self, address: String, topic: &str) -> WorkloadOptions {
        WorkloadOptions {
            brokers: Some(address),
            topic: topic.into(),
            partitions: 8,
            record_bytes: 1024,
            random_fraction: 0.5,
            acks: 1,
            rate: 0,
            // Two producers with deep windows of 1 MiB batches: acks=1 waits
            // for the record to be visible (with one replica, its fsync: the
            // O_DIRECT write plus the group commit), so the window must cover
            // the disk's write and sync latency (5 in flight of 256 KiB
            // reached ~420 MB/s here when acks=1 waited for the write only).
            producers: 2,
            consumers: 0,
            batch_bytes: 1 << 20,
            max_in_flight: 16,
            linger: Duration::from_millis(1),
            warmup: self.options.warmup,
            duration: self.options.duration,
            cpus: vec![self.options.load_cpu],
            ..WorkloadOptions::default()
        }
    }

    fn workload(&mut self, options: WorkloadOptions) -> Result<WorkloadReport, BenchError> {
        let progress = &mut *self.progress;
        let report = crate::workload::run(options, |line| progress(line))?;
        if let Some(error) = report.errors.first() {
            return Err(BenchError::Client(format!(
                "{} request(s) failed, the first: {error}",
                report.errors.len()
            )));
        }
        Ok(report)
    }

    /// The rate of a paced phase when it is not the broker's own
    /// throughput halved: `--rate`, or with `--kafka` one for both brokers.
    fn paced_rate(&self) -> Option<u64> {
        self.options
            .rate
            .or(self.options.kafka.then_some(SIDE_BY_SIDE_RATE))
    }

    fn limit(&self) -> Option<f64> {
        self.ceiling.map(CeilingReport::limit_mb_per_second)
    }

    fn throughput(&mut self) -> Result<NamedRun, BenchError> {
        let broker = self.broker("throughput", 1, true)?;
        let report = self.workload(self.throughput_workload(broker.address(), "throughput"))?;
        if self.kafka.is_none() {
            self.throughput_rate = Some(report.produce_records_per_second());
        }
        let mut figure = Figure::new(
            "produce_mb_per_s",
            "produce throughput",
            report.produce_mb_per_second(),
            "MB/s",
        )
        .target(Target::RatioAtLeast(
            crate::ceiling::report::THROUGHPUT_TARGET_FRACTION,
        ));
        if let Some(limit) = self.limit() {
            figure = figure.against("min(disk write, loopback TCP)", limit);
        }
        let mut figures = vec![figure];
        let mut details = report.to_text();
        let mut details_json = JsonObject::new().object("produce", report.to_json_object());
        if self.kafka.is_some() {
            // Brook acknowledges acks=1 once the record is on disk; Kafka by
            // default once it is in the page cache. Its flush.messages=1
            // makes it pay for the same durability.
            let durable = WorkloadOptions {
                topic_configs: vec![("flush.messages".into(), "1".into())],
                ..self.throughput_workload(broker.address(), "throughput-flush")
            };
            let durable = self.workload(durable)?;
            figures.push(Figure::new(
                "produce_flush_mb_per_s",
                "produce throughput, flush.messages=1",
                durable.produce_mb_per_second(),
                "MB/s",
            ));
            details += &format!("flush.messages=1:\n{}", durable.to_text());
            details_json = details_json.object("produce_flush", durable.to_json_object());
        }
        Ok(NamedRun {
            name: "throughput",
            setup: self.setup(
                "--cores 1",
                "2 producers, up to 16 × 1 MiB batches in flight each",
            ),
            figures,
            details,
            details_json,
            error: None,
        })
    }

    fn latency(&mut self) -> Result<NamedRun, BenchError> {
        let rate = match (self.paced_rate(), self.throughput_rate) {
            (Some(rate), _) => rate,
            (None, Some(reached)) => (reached / 2.0) as u64,
            (None, None) => {
                (self.progress)("latency: a 10 s throughput probe first, for the rate");
                let broker = self.broker("latency-probe", 1, true)?;
                let probe = WorkloadOptions {
                    warmup: Duration::from_secs(2),
                    duration: Duration::from_secs(10),
                    ..self.throughput_workload(broker.address(), "latency-probe")
                };
                (self.workload(probe)?.produce_records_per_second() / 2.0) as u64
            }
        };
        let broker = self.broker("latency", 1, true)?;
        let options = WorkloadOptions {
            acks: -1,
            rate: rate.max(1),
            producers: 1,
            consumers: 1,
            batch_bytes: 64 << 10,
            linger: Duration::ZERO,
            // An fsync per append; concurrent appends share one (group commit).
            topic_configs: vec![("flush.messages".into(), "1".into())],
            ..self.throughput_workload(broker.address(), "latency")
        };
        let report = self.workload(options.clone())?;
        let ack = report.ack();
        let end_to_end = report.end_to_end();
        let fsync_p99 = self
            .ceiling
            .map(|ceiling| ceiling.fsync.p99_micros as f64 / 1000.0);
        let fsync_p999 = self
            .ceiling
            .map(|ceiling| ceiling.fsync.p999_micros as f64 / 1000.0);
        let mut figures = vec![
            Figure::new("produce_p99_ms", "produce→ack p99", ack.p99 / 1000.0, "ms")
                .target(Target::AtMost(1.0)),
            Figure::new(
                "produce_p999_ms",
                "produce→ack p99.9",
                ack.p999 / 1000.0,
                "ms",
            )
            .target(Target::AtMost(3.0)),
            Figure::new(
                "e2e_p99_ms",
                "end-to-end p99",
                end_to_end.p99 / 1000.0,
                "ms",
            )
            .target(Target::AtMost(2.0)),
            Figure::new(
                "rate_records_per_s",
                "rate",
                report.produce_records_per_second(),
                "rec/s",
            ),
        ];
        if let (Some(p99), Some(p999)) = (fsync_p99, fsync_p999) {
            figures[0] = figures[0].clone().against("disk fsync p99", p99);
            figures[1] = figures[1].clone().against("disk fsync p99.9", p999);
        }
        if self.ceiling.is_some() && self.kafka.is_none() {
            // The disk alone at the rate asked: one file per partition, one
            // batch-sized write + fdatasync at a time each, from the broker's
            // core. What no broker acknowledging after an fsync can beat.
            let bytes_per_second = options.rate as f64 * options.record_bytes as f64;
            (self.progress)(&format!(
                "latency: the disk alone at {:.0} MB/s ({} files, {} B write + fdatasync each)",
                bytes_per_second / 1e6,
                options.partitions,
                options.batch_bytes
            ));
            let disk = crate::ceiling::paced_sync_latency(
                &self.options.dir,
                self.options.broker_cpu,
                options.partitions as usize,
                options.batch_bytes as u64,
                bytes_per_second,
                PACED_SYNC_DURATION,
            )?;
            let (p99, p999) = (
                disk.p99_micros as f64 / 1000.0,
                disk.p999_micros as f64 / 1000.0,
            );
            let label = "disk alone at this rate";
            figures[0] = figures[0].clone().against(format!("{label}, p99"), p99);
            figures[1] = figures[1].clone().against(format!("{label}, p99.9"), p999);
            figures.push(Figure::new(
                "disk_alone_p99_ms",
                format!("{label}: p99"),
                p99,
                "ms",
            ));
            figures.push(Figure::new(
                "disk_alone_p999_ms",
                format!("{label}: p99.9"),
                p999,
                "ms",
            ));
        }
        let exactly_once = report
            .verification
            .as_ref()
            .is_some_and(|v| v.exactly_once());
        if !exactly_once {
            return Err(BenchError::Client(format!(
                "the latency workload lost or duplicated records: {:?}",
                report.verification
            )));
        }
        Ok(NamedRun {
            name: "latency",
            setup: self.setup(
                "--cores 1",
                &format!("acks=all, flush.messages=1, {rate} rec/s, 1 producer, 1 consumer"),
            ),
            figures,
            details: report.to_text(),
            details_json: JsonObject::new().object("produce_consume", report.to_json_object()),
            error: None,
        })
    }

    /// How the run was set up: the broker (its flags when started here),
    /// the CPUs, and what the workload did.
    fn setup(&self, flags: &str, workload: &str) -> String {
        let broker = match (&self.options.brokers, &self.kafka) {
            (Some(address), _) => format!("broker {address}"),
            (None, Some(_)) => format!(
                "Apache Kafka 4.1.2 (one KRaft node, 1 GiB heap) on cpu {}",
                self.options.broker_cpu
            ),
            (None, None) => format!("brook serve {flags} on cpu {}", self.options.broker_cpu),
        };
        format!(
            "{broker}; load generator on cpu {}; {workload}",
            self.options.load_cpu
        )
    }
}

/// `--nodes`: one broker, or a cluster of three.
fn parse_nodes(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(nodes) if nodes == 1 || nodes == failover::NODES => Ok(nodes),
        _ => Err(format!("{text:?}: 1 or {} nodes", failover::NODES)),
    }
}

/// Empties the page cache (`echo 3 > /proc/sys/vm/drop_caches`) after a
/// sync; false where the kernel does not allow it (not root, a container).
fn drop_page_cache() -> bool {
    // SAFETY: sync has no preconditions.
    unsafe { libc::sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3\n").is_ok()
}

/// How long a restarted broker may take to serve its partitions' offsets.
const SERVED_TIMEOUT: Duration = Duration::from_secs(600);

/// Each partition's latest offset, in partition order, asked again until
/// every partition answers: a broker may listen before it serves a
/// partition it is still loading (Kafka answers LEADER_NOT_AVAILABLE or
/// NOT_LEADER_OR_FOLLOWER until its log manager has recovered the log).
fn end_offsets(address: std::net::SocketAddr, topic: &str) -> Result<Vec<i64>, BenchError> {
    let deadline = Instant::now() + SERVED_TIMEOUT;
    loop {
        let asked = topic.to_owned();
        let answer = with_cluster(address, move |cluster| async move {
            let leaders = cluster.leaders(&asked).await?;
            let ends = cluster.offsets(&asked, &leaders, -1).await?;
            Ok(ends.into_values().collect::<Vec<i64>>())
        });
        match answer {
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            answer => return answer,
        }
    }
}

/// Runs the future `make` builds on a short-lived, unpinned executor
/// named `name`, and returns its output.
fn on_own_executor<T, F, Fut>(name: &str, make: F) -> Result<T, BenchError>
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + 'static,
{
    let executor_error = |error: glommio::GlommioError<()>| BenchError::Executor {
        cpu: usize::MAX,
        reason: error.to_string(),
    };
    executor_builder(Placement::Unbound)
        .name(name)
        .spawn(move || guarded(make()))
        .map_err(executor_error)?
        .join()
        .map_err(executor_error)
}

/// Runs `work` with a client of the broker at `address` on a short-lived
/// executor.
fn with_cluster<T, F, Fut>(address: std::net::SocketAddr, work: F) -> Result<T, BenchError>
where
    T: Send + 'static,
    F: FnOnce(std::rc::Rc<Cluster>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = Result<T, ClientError>> + 'static,
{
    let result = on_own_executor("brook-bench-admin", move || async move {
        let cluster = std::rc::Rc::new(Cluster::new(address, "brook-bench"));
        let result = work(cluster.clone()).await;
        cluster.close().await;
        result
    })?;
    result.map_err(client_error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        named: NamedOptions,
    }

    fn parse(args: &[&str]) -> Result<NamedOptions, clap::Error> {
        Command::try_parse_from(std::iter::once("run").chain(args.iter().copied()))
            .map(|command| command.named)
    }

    #[test]
    fn named_workloads_parse_with_the_documented_defaults() {
        let options = parse(&["throughput"]).unwrap();
        assert_eq!(options.workload, Named::Throughput);
        assert_eq!(options.duration, Duration::from_secs(30));
        assert_eq!(options.catchup_bytes, 4 << 30);
        assert_eq!(options.recovery_bytes, 10 << 30);
        assert_eq!(options.partitions, 10_000);
        assert_eq!((options.broker_cpu, options.load_cpu), (0, 1));
        let options =
            parse(&["many-partitions", "--partitions", "500", "--duration", "5s"]).unwrap();
        assert_eq!(options.workload, Named::ManyPartitions);
        assert_eq!(options.partitions, 500);
        assert!(parse(&["fastest"]).is_err());
        assert!(parse(&[]).is_err());
    }

    #[test]
    fn the_real_client_workloads_parse_unpinned_on_one_node_by_default() {
        let options = parse(&["kcat-read"]).unwrap();
        assert_eq!(options.workload, Named::KcatRead);
        assert_eq!(
            (options.records, options.end_to_end_records),
            (2_000_000, 10_000)
        );
        assert_eq!(options.nodes, 1);
        assert!(!options.pin_real_clients);
        let options = parse(&[
            "consumer-perf",
            "--records",
            "20000",
            "--nodes",
            "3",
            "--pin-real-clients",
        ])
        .unwrap();
        assert_eq!((options.records, options.nodes), (20_000, 3));
        assert!(options.pin_real_clients);
        for (name, workload) in [
            ("producer-perf", Named::ProducerPerf),
            ("end-to-end", Named::EndToEnd),
        ] {
            assert_eq!(parse(&[name]).unwrap().workload, workload);
            assert_eq!(workload.name(), name);
        }
        assert!(parse(&["kcat-read", "--nodes", "2"]).is_err());
        assert!(parse(&["kcat-read", "--records", "0"]).is_err());
    }

    #[test]
    fn kafka_beside_an_external_broker_or_without_its_launcher_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let dir = dir.path().to_str().unwrap();
        let refused = |args: &[&str]| {
            let options = parse(args).unwrap();
            match run(&options, &mut |_| {}) {
                Err(BenchError::InvalidOption { name, .. }) => name,
                other => panic!("{args:?} ran: {:?}", other.map(|report| report.to_text())),
            }
        };
        let external = ["throughput", "--kafka", "--no-ceiling", "--dir", dir];
        let external = [&external[..], &["--brokers", "127.0.0.1:9"]].concat();
        assert_eq!(refused(&external), "kafka");
        let missing = dir.to_owned() + "/no-such-start-kafka.sh";
        let args = ["throughput", "--kafka", "--no-ceiling", "--dir", dir];
        let args = [&args[..], &["--kafka-script", &missing]].concat();
        assert_eq!(refused(&args), "kafka-script");
    }

    #[test]
    fn all_expands_to_every_workload_once() {
        let each = Named::All.each();
        assert_eq!(each.len(), 11);
        // The real clients' rows lead.
        assert_eq!(
            each[..4],
            [
                Named::ProducerPerf,
                Named::ConsumerPerf,
                Named::KcatRead,
                Named::EndToEnd
            ]
        );
        assert!(each[..4].iter().all(|workload| workload.runs_on_kafka()));
        assert!(each.contains(&Named::Replication));
        assert!(!each.contains(&Named::All));
        assert!(!each.contains(&Named::ControllerFailover));
        assert_eq!(Named::Latency.each(), vec![Named::Latency]);
    }
}
