//! `brook bench run producer-perf | consumer-perf | kcat-read | end-to-end`:
//! the broker driven by clients Brook did not write, as users run them.
//!
//! - producer-perf: Kafka's ProducerPerformance (`kafka-producer-perf-test`)
//!   sends `--records` records of 1 KiB to 8 partitions unthrottled, with
//!   the producer's defaults but `acks`: one row with acks=1, one with
//!   acks=all. Its latencies are send → acknowledgement, time waiting in
//!   the producer's own buffer included (unthrottled, mostly that).
//! - consumer-perf: `--records` records are written first (with Brook's
//!   load generator, batched as Kafka's Java producer batches by default:
//!   16 KiB, linger 5 ms), then Kafka's ConsumerPerformance
//!   (`kafka-consumer-perf-test`) reads them all, in a consumer group.
//! - kcat-read: the same data, read to its end by kcat (librdkafka, at its
//!   defaults), timed by the wall clock from its start to its exit.
//!
//! Both readers read the data three times ([`ReadBack`]): just written,
//! again (from the page cache), and after the page cache is dropped (root
//! only; `--no-drop-caches` skips the drop). The first differs between the
//! brokers: Kafka writes through the page cache, so its first read is a
//! cached one; Brook appends with O_DIRECT, so its first read is a cold one.
//! - end-to-end: Kafka's EndToEndLatency sends `--end-to-end-records`
//!   records of 1 KiB with acks=all, one at a time, each consumed before
//!   the next is sent.
//!
//! Each starts its own broker (or three with `--nodes 3`: topics of three
//! replicas, min.insync.replicas=2, consumers reading from leaders), with
//! nothing pinned unless `--pin-real-clients`: against Apache Kafka, a JVM
//! pinned to one core showed a p99 no user sees (DESIGN, "Known traps").
//! Brook's `group.initial.rebalance.delay.ms` is 0, as Kafka's launcher sets
//! it, so that both join ConsumerPerformance's group at once. The
//! broker's peak resident memory is sampled every 100 ms while each client
//! runs (for Kafka, its JVM's).

mod parse;
mod run;

use std::process::Command;
use std::time::Duration;

use super::report::{Figure, NamedRun};
use super::{Bench, BenchError, Broker, drop_page_cache, end_offsets, with_cluster};
use crate::log::json::JsonObject;
use crate::workload::client_error;
use crate::workload::options::WorkloadOptions;
use crate::workload::report::WorkloadReport;
use brook_shards::client::cluster::resolve;
use parse::{ConsumerSummary, EndToEndSummary, OutputError, ProducerSummary};
use run::{ClientRun, KafkaTools, memory_pid, run_client};

/// Every topic's partitions.
const PARTITIONS: i32 = 8;
/// Every record's value (no keys).
const RECORD_BYTES: u64 = 1024;
/// Kafka's Java producer's default `batch.size` and (since Kafka 4.0)
/// `linger.ms`: how the data the readers read is batched.
const JAVA_BATCH_BYTES: usize = 16 << 10;
const JAVA_LINGER: Duration = Duration::from_millis(5);
/// What the Java tools call a MB.
const MIB: f64 = (1u64 << 20) as f64;

const PRODUCER_PERFORMANCE: &str = "org.apache.kafka.tools.ProducerPerformance";
const CONSUMER_PERFORMANCE: &str = "org.apache.kafka.tools.ConsumerPerformance";
const END_TO_END_LATENCY: &str = "org.apache.kafka.tools.EndToEndLatency";

/// One row of producer-perf: its `acks` and its figures' keys.
struct ProducerRow {
    acks: &'static str,
    json_key: &'static str,
    /// Throughput, then average, p50, p95, p99, p99.9 and max latency.
    keys: [&'static str; 7],
}

const PRODUCER_ROWS: [ProducerRow; 2] = [
    ProducerRow {
        acks: "1",
        json_key: "acks_1",
        keys: [
            "acks1_mib_per_s",
            "acks1_avg_ms",
            "acks1_p50_ms",
            "acks1_p95_ms",
            "acks1_p99_ms",
            "acks1_p999_ms",
            "acks1_max_ms",
        ],
    },
    ProducerRow {
        acks: "all",
        json_key: "acks_all",
        keys: [
            "acksall_mib_per_s",
            "acksall_avg_ms",
            "acksall_p50_ms",
            "acksall_p95_ms",
            "acksall_p99_ms",
            "acksall_p999_ms",
            "acksall_max_ms",
        ],
    },
];

impl ProducerRow {
    fn figures(&self, summary: &ProducerSummary) -> Vec<Figure> {
        let values = [
            ("throughput", summary.mib_per_second, "MiB/s"),
            ("latency avg", summary.average_ms, "ms"),
            ("latency p50", summary.p50_ms, "ms"),
            ("latency p95", summary.p95_ms, "ms"),
            ("latency p99", summary.p99_ms, "ms"),
            ("latency p99.9", summary.p999_ms, "ms"),
            ("latency max", summary.max_ms, "ms"),
        ];
        self.keys
            .iter()
            .zip(values)
            .map(|(key, (what, value, unit))| {
                Figure::new(key, format!("acks={} {what}", self.acks), value, unit)
            })
            .collect()
    }
}

/// One of the three reads of the data written first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReadBack {
    /// At once after the write.
    JustWritten,
    /// At once after the first read: from the page cache, for both brokers.
    Again,
    /// After the page cache is dropped.
    Cold,
}

impl ReadBack {
    const ALL: [ReadBack; 3] = [ReadBack::JustWritten, ReadBack::Again, ReadBack::Cold];

    /// A figure's key for this read, from the keys of the three in order.
    fn key(self, keys: [&'static str; 3]) -> &'static str {
        keys[self as usize]
    }

    /// How the page cache stood, for a figure's label; `dropped` is whether
    /// the drop before a cold read was done.
    fn condition(self, dropped: bool) -> &'static str {
        match (self, dropped) {
            (ReadBack::JustWritten, _) => "just written",
            (ReadBack::Again, _) => "read again (page cache)",
            (ReadBack::Cold, true) => "page cache dropped",
            (ReadBack::Cold, false) => "page cache NOT dropped (--no-drop-caches)",
        }
    }

    /// The JSON object's name for this read.
    fn json_key(self) -> &'static str {
        match self {
            ReadBack::JustWritten => "read",
            ReadBack::Again => "read_again",
            ReadBack::Cold => "read_cold",
        }
    }
}

/// What the three reads of a reader workload add up to: figures, the
/// clients' output, JSON per read and each node's peak RSS.
struct Reads {
    figures: Vec<Figure>,
    details: String,
    details_json: JsonObject,
    peaks: Vec<u64>,
}

impl Reads {
    /// Before the first read of what `written` wrote to `nodes` brokers.
    fn after(written: &WorkloadReport, nodes: usize) -> Reads {
        Reads {
            figures: Vec::new(),
            details: format!("written by Brook's load generator:\n{}", written.to_text()),
            details_json: JsonObject::new().object("write", written.to_json_object()),
            peaks: vec![0; nodes],
        }
    }

    /// Keeps one read's output, JSON and memory peaks.
    fn keep(&mut self, read: ReadBack, run: &ClientRun, details: String, json: JsonObject) {
        self.details += &details;
        self.details_json = std::mem::take(&mut self.details_json).object(read.json_key(), json);
        keep_peaks(&mut self.peaks, &run.peak_rss_bytes);
    }

    /// The workload `name`'s run, with the peak RSS of all three reads.
    fn run(mut self, name: &'static str, setup: String) -> NamedRun {
        self.figures
            .extend(peak_rss_figure("while reading", &self.peaks));
        NamedRun {
            name,
            setup,
            figures: self.figures,
            details: self.details,
            details_json: self.details_json,
            error: None,
        }
    }
}

/// The broker, or the three, a real client runs against; each own one is
/// killed and its data deleted when this is dropped.
struct Brokers {
    nodes: Vec<Broker>,
    /// The address the clients bootstrap from.
    bootstrap: String,
}

impl Brokers {
    /// The processes that hold the brokers' memory (none for an external
    /// broker).
    fn memory_pids(&mut self) -> Vec<u32> {
        self.nodes
            .iter_mut()
            .filter_map(|node| node.process()?.pid())
            .map(memory_pid)
            .collect()
    }
}

/// The cores `brook serve` takes by default: every one it may run on.
fn default_cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

impl Bench<'_> {
    pub(in crate::named) fn producer_perf(&mut self) -> Result<NamedRun, BenchError> {
        let tools = KafkaTools::find(self.options, "producer-perf")?;
        let mut brokers = self.real_client_brokers("producer-perf")?;
        let pids = brokers.memory_pids();
        let records = self.options.records;
        let mut figures = Vec::new();
        let mut details = String::new();
        let mut details_json = JsonObject::new();
        let mut peaks = vec![0; pids.len()];
        for row in &PRODUCER_ROWS {
            let topic = format!("producer-perf-acks-{}", row.acks);
            self.create_topic(&brokers, &topic)?;
            (self.progress)(&format!(
                "producer-perf: ProducerPerformance, {records} records, acks={}",
                row.acks
            ));
            let mut command = tools.command(PRODUCER_PERFORMANCE);
            command
                .args(["--topic", &topic, "--num-records", &records.to_string()])
                .args(["--record-size", &RECORD_BYTES.to_string()])
                .args(["--throughput", "-1", "--producer-props"])
                .arg(format!("bootstrap.servers={}", brokers.bootstrap))
                .arg(format!("acks={}", row.acks));
            let run = self.run_client(command, "ProducerPerformance", &pids)?;
            let summary =
                parse::producer_summary(&run.stdout.text()).map_err(output_error(&run))?;
            if summary.records != records {
                return Err(BenchError::Client(format!(
                    "ProducerPerformance sent {} records of {records}",
                    summary.records
                )));
            }
            figures.extend(row.figures(&summary));
            let last_line = run
                .stdout
                .text()
                .lines()
                .last()
                .unwrap_or_default()
                .to_owned();
            details += &format!("ProducerPerformance acks={}: {last_line}\n", row.acks);
            details_json = details_json.object(row.json_key, producer_json(&summary));
            keep_peaks(&mut peaks, &run.peak_rss_bytes);
        }
        figures.extend(peak_rss_figure("while producing", &peaks));
        Ok(NamedRun {
            name: "producer-perf",
            setup: self.real_client_setup(&format!(
                "ProducerPerformance --num-records {records} --record-size 1024 --throughput -1, \
                 the producer's defaults but acks; 8 partitions"
            )),
            figures,
            details,
            details_json,
            error: None,
        })
    }

    pub(in crate::named) fn consumer_perf(&mut self) -> Result<NamedRun, BenchError> {
        let tools = KafkaTools::find(self.options, "consumer-perf")?;
        let mut brokers = self.real_client_brokers("consumer-perf")?;
        let (topic, records, written) = self.fill(&brokers, "consumer-perf")?;
        let pids = brokers.memory_pids();
        let mut reads = Reads::after(&written, pids.len());
        for read in ReadBack::ALL {
            let condition = self.ready_for(
                read,
                &format!("consumer-perf: ConsumerPerformance reading {records} records"),
            );
            let mut command = tools.command(CONSUMER_PERFORMANCE);
            command
                .args(["--bootstrap-server", &brokers.bootstrap, "--topic", &topic])
                .args(["--messages", &records.to_string()])
                .args(["--group", &format!("perf-consumer-{}", read.json_key())]);
            let run = self.run_client(command, "ConsumerPerformance", &pids)?;
            let summary =
                parse::consumer_summary(&run.stdout.text()).map_err(output_error(&run))?;
            if summary.records != records {
                return Err(BenchError::Client(format!(
                    "ConsumerPerformance read {} records of {records}",
                    summary.records
                )));
            }
            reads.figures.push(Figure::new(
                read.key([
                    "fetch_mib_per_s",
                    "cached_fetch_mib_per_s",
                    "cold_fetch_mib_per_s",
                ]),
                format!("read throughput after the group join (fetch.MB.sec), {condition}"),
                summary.fetch_mib_per_second,
                "MiB/s",
            ));
            if read == ReadBack::JustWritten {
                reads.figures.extend([
                    Figure::new(
                        "mib_per_s",
                        "read throughput, group join included (MB.sec), just written",
                        summary.mib_per_second,
                        "MiB/s",
                    ),
                    Figure::new(
                        "rebalance_ms",
                        "group join (rebalance.time.ms)",
                        summary.rebalance_ms,
                        "ms",
                    ),
                    Figure::new("records_read", "records read", records as f64, ""),
                ]);
            }
            let details = format!(
                "ConsumerPerformance, {condition}:\n{}",
                run.stdout.text().trim_start()
            );
            reads.keep(read, &run, details, consumer_json(&summary));
        }
        Ok(reads.run(
            "consumer-perf",
            self.real_client_setup(&format!(
                "ConsumerPerformance --messages {records} at its defaults, three reads; \
                 8 partitions of 1 KiB records written first in 16 KiB batches"
            )),
        ))
    }

    pub(in crate::named) fn kcat_read(&mut self) -> Result<NamedRun, BenchError> {
        let kcat = run::kcat()?;
        let mut brokers = self.real_client_brokers("kcat-read")?;
        let (topic, records, written) = self.fill(&brokers, "kcat-read")?;
        let pids = brokers.memory_pids();
        let mib = (records * RECORD_BYTES) as f64 / MIB;
        let mut reads = Reads::after(&written, pids.len());
        for read in ReadBack::ALL {
            let condition =
                self.ready_for(read, &format!("kcat-read: kcat reading {records} records"));
            let mut command = Command::new(&kcat);
            command
                .args(["-C", "-b", &brokers.bootstrap, "-t", &topic])
                // One line per record (kcat reads "\n" in its format
                // itself), counted, so that the figure is for every record
                // read.
                .args(["-o", "beginning", "-e", "-q", "-f", "%o\\n"]);
            let run = self.run_client(command, "kcat", &pids)?;
            if run.stdout.lines != records {
                return Err(BenchError::Client(format!(
                    "kcat read {} records of {records}",
                    run.stdout.lines
                )));
            }
            let seconds = run.elapsed.as_secs_f64();
            reads.figures.extend([
                Figure::new(
                    read.key(["mib_per_s", "cached_mib_per_s", "cold_mib_per_s"]),
                    format!("read throughput (wall clock), {condition}"),
                    mib / seconds,
                    "MiB/s",
                ),
                Figure::new(
                    read.key(["seconds", "cached_seconds", "cold_seconds"]),
                    format!("kcat start → exit at the end, {condition}"),
                    seconds,
                    "s",
                ),
            ]);
            let details =
                format!("kcat, {condition}: {records} records ({mib:.1} MiB) in {seconds:.3} s\n");
            let json = JsonObject::new()
                .integer("records", records)
                .number("seconds", seconds)
                .number("mib_per_second", mib / seconds);
            reads.keep(read, &run, details, json);
        }
        reads.figures.push(Figure::new(
            "records_read",
            "records read",
            records as f64,
            "",
        ));
        Ok(reads.run(
            "kcat-read",
            self.real_client_setup(&format!(
                "kcat -C -o beginning -e -f '%o\\n' (librdkafka's defaults), {records} records, \
                 three reads; 8 partitions of 1 KiB records written first in 16 KiB batches"
            )),
        ))
    }

    /// Readies the page cache for `read` (dropped before the cold read,
    /// unless `--no-drop-caches`) and reports `what` begins: how the cache
    /// stands, for the figures' labels.
    fn ready_for(&mut self, read: ReadBack, what: &str) -> &'static str {
        let dropped = read == ReadBack::Cold && !self.options.no_drop_caches && drop_page_cache();
        let condition = read.condition(dropped);
        (self.progress)(&format!("{what}, {condition}"));
        condition
    }

    pub(in crate::named) fn end_to_end(&mut self) -> Result<NamedRun, BenchError> {
        let tools = KafkaTools::find(self.options, "end-to-end")?;
        let mut brokers = self.real_client_brokers("end-to-end")?;
        let topic = "end-to-end";
        self.create_topic(&brokers, topic)?;
        let pids = brokers.memory_pids();
        let records = self.options.end_to_end_records;
        (self.progress)(&format!(
            "end-to-end: EndToEndLatency, {records} records one at a time"
        ));
        let mut command = tools.command(END_TO_END_LATENCY);
        command.args([
            brokers.bootstrap.as_str(),
            topic,
            &records.to_string(),
            "all",
        ]);
        command.arg(RECORD_BYTES.to_string());
        let run = self.run_client(command, "EndToEndLatency", &pids)?;
        let summary = parse::end_to_end_summary(&run.stdout.text()).map_err(output_error(&run))?;
        let mut figures = vec![
            Figure::new(
                "avg_ms",
                "produce → consumed, average",
                summary.average_ms,
                "ms",
            ),
            Figure::new("p50_ms", "p50 (whole ms)", summary.p50_ms, "ms"),
            Figure::new("p99_ms", "p99 (whole ms)", summary.p99_ms, "ms"),
            Figure::new("p999_ms", "p99.9 (whole ms)", summary.p999_ms, "ms"),
            Figure::new("records", "records sent", records as f64, ""),
        ];
        figures.extend(peak_rss_figure("while running", &run.peak_rss_bytes));
        let output = run.stdout.text();
        let lines: Vec<&str> = output.lines().collect();
        let result = &lines[lines.len().saturating_sub(2)..];
        Ok(NamedRun {
            name: "end-to-end",
            setup: self.real_client_setup(&format!(
                "EndToEndLatency, {records} records of 1 KiB, acks=all, one at a time; 8 partitions"
            )),
            figures,
            details: format!("EndToEndLatency: {}\n", result.join(" | ")),
            details_json: JsonObject::new().object("end_to_end", end_to_end_json(&summary)),
            error: None,
        })
    }

    /// A fresh broker (or three voters, `--nodes 3`) for the real-client
    /// workload `name`, or the external one.
    fn real_client_brokers(&self, name: &str) -> Result<Brokers, BenchError> {
        // Kafka's launcher sets the same (`bench/kafka/start-kafka.sh`).
        let extra = vec![
            "--set".to_owned(),
            "group.initial.rebalance.delay.ms=0".to_owned(),
        ];
        if self.options.nodes == 1 {
            let pinned = self.options.pin_real_clients;
            let cores = if pinned { 1 } else { default_cores() };
            let broker = self.broker_with(name, cores, pinned, extra)?;
            let bootstrap = broker.address();
            return Ok(Brokers {
                nodes: vec![broker],
                bootstrap,
            });
        }
        self.own_broker_needed(name)?;
        let (nodes, addresses) = self.start_voters(&format!("{name}-nodes"), &extra)?;
        let formed = addresses.clone();
        let one_controller = self.kafka.is_none();
        super::on_own_executor("brook-bench-real-clients", move || async move {
            super::failover::until_formed(&formed, one_controller).await
        })??;
        Ok(Brokers {
            nodes: nodes
                .into_iter()
                .map(|node| Broker::Own(Box::new(node)))
                .collect(),
            bootstrap: addresses[0].to_string(),
        })
    }

    /// Replicas of each partition, and the topic configs that go with them.
    fn topic_replicas(&self) -> (i16, Vec<(String, String)>) {
        match self.options.nodes {
            1 => (1, Vec::new()),
            nodes => (
                nodes as i16,
                vec![("min.insync.replicas".into(), "2".into())],
            ),
        }
    }

    /// Creates `topic` (8 partitions, [`Bench::topic_replicas`]) and waits
    /// until every partition has a leader.
    fn create_topic(&self, brokers: &Brokers, topic: &str) -> Result<(), BenchError> {
        let address = resolve(&brokers.bootstrap).map_err(client_error)?;
        let (replicas, configs) = self.topic_replicas();
        let topic = topic.to_owned();
        with_cluster(address, move |cluster| async move {
            cluster
                .create_topics(std::slice::from_ref(&topic), PARTITIONS, replicas, &configs)
                .await?;
            cluster.created_leaders(&topic).await.map(|_| ())
        })
    }

    /// Writes `--records` records of 1 KiB to the topic `<name>-0` with
    /// Brook's load generator: the topic, the records it then holds (the
    /// generator stops a little past its byte limit) and the write's report.
    fn fill(
        &mut self,
        brokers: &Brokers,
        name: &str,
    ) -> Result<(String, u64, WorkloadReport), BenchError> {
        let (replicas, configs) = self.topic_replicas();
        (self.progress)(&format!(
            "{name}: writing {} records of 1 KiB",
            self.options.records
        ));
        let options = WorkloadOptions {
            replication_factor: replicas,
            topic_configs: configs,
            // Every record written is below the high watermark, so the
            // readers' count is the whole topic.
            acks: if replicas > 1 { -1 } else { 1 },
            batch_bytes: JAVA_BATCH_BYTES,
            linger: JAVA_LINGER,
            warmup: Duration::ZERO,
            duration: Duration::from_secs(3600),
            bytes_limit: self.options.records * RECORD_BYTES,
            cpus: self.client_cpus(),
            ..self.throughput_workload(brokers.bootstrap.clone(), name)
        };
        let written = self.workload(options)?;
        let topic = format!("{name}-0");
        let address = resolve(&brokers.bootstrap).map_err(client_error)?;
        let records: i64 = end_offsets(address, &topic)?.iter().sum();
        Ok((topic, records.max(0) as u64, written))
    }

    /// The CPUs a client runs on: `--load-cpu` with `--pin-real-clients`,
    /// else any.
    fn client_cpus(&self) -> Vec<usize> {
        match self.options.pin_real_clients {
            true => vec![self.options.load_cpu],
            false => Vec::new(),
        }
    }

    /// Runs a client (pinned with `--pin-real-clients`), sampling the
    /// memory of `pids`.
    fn run_client(
        &self,
        mut command: Command,
        what: &str,
        pids: &[u32],
    ) -> Result<ClientRun, BenchError> {
        brook_launch::pin(&mut command, self.client_cpus());
        run_client(command, what, pids)
    }

    /// How a real-client workload ran: the broker, what was pinned where,
    /// the replicas, and `client`.
    fn real_client_setup(&self, client: &str) -> String {
        let options = self.options;
        let one = options.nodes == 1;
        let broker_pinned = options.pin_real_clients && one && options.brokers.is_none();
        let broker = match (&options.brokers, &self.kafka) {
            (Some(address), _) => format!("broker {address}"),
            (None, Some(_)) if one => "Apache Kafka 4.1.2 (one KRaft node, 1 GiB heap)".into(),
            (None, Some(_)) => format!(
                "{} Apache Kafka 4.1.2 nodes (broker+controller, 1 GiB heap each)",
                options.nodes
            ),
            (None, None) if broker_pinned => "brook serve --cores 1".into(),
            (None, None) if one => format!(
                "brook serve --cores {} (its default: a shard per core, placed by Brook)",
                default_cores()
            ),
            (None, None) => format!("{} Brook voters (--cores 1 each)", options.nodes),
        };
        let broker_cpu = match (broker_pinned, &options.brokers) {
            (true, _) => format!(" on cpu {}", options.broker_cpu),
            (false, None) => ", unpinned".into(),
            (false, Some(_)) => String::new(),
        };
        let client_cpu = match options.pin_real_clients {
            true => format!("client on cpu {}", options.load_cpu),
            false => "client unpinned".into(),
        };
        let replicas = match one {
            true => String::new(),
            false => format!("; {} replicas, min.insync.replicas=2", options.nodes),
        };
        format!("{broker}{broker_cpu}; {client_cpu}{replicas}; {client}")
    }
}

/// Raises each node's peak RSS to what one more run sampled.
fn keep_peaks(peaks: &mut [u64], sampled: &[u64]) {
    for (peak, sampled) in peaks.iter_mut().zip(sampled) {
        *peak = (*peak).max(*sampled);
    }
}

/// The broker's peak RSS `during` a client's run, from each node's
/// (none when no broker process was sampled).
fn peak_rss_figure(during: &str, peaks: &[u64]) -> Option<Figure> {
    let peak = peaks.iter().copied().max().filter(|peak| *peak > 0)?;
    let label = match peaks.len() {
        1 => format!("broker peak RSS {during}"),
        nodes => format!("broker peak RSS {during}, largest of {nodes} nodes"),
    };
    Some(Figure::new("peak_rss_mib", label, peak as f64 / MIB, "MiB"))
}

/// An unreadable result, with the end of what the client printed.
fn output_error(run: &ClientRun) -> impl FnOnce(OutputError) -> BenchError + '_ {
    move |error| {
        let text = run.stdout.text();
        let lines: Vec<&str> = text.lines().collect();
        let quoted = lines[lines.len().saturating_sub(10)..].join("\n");
        BenchError::Client(format!("{error}; its output ends:\n{quoted}"))
    }
}

fn producer_json(summary: &ProducerSummary) -> JsonObject {
    JsonObject::new()
        .integer("records", summary.records)
        .number("records_per_second", summary.records_per_second)
        .number("mib_per_second", summary.mib_per_second)
        .number("average_ms", summary.average_ms)
        .number("max_ms", summary.max_ms)
        .number("p50_ms", summary.p50_ms)
        .number("p95_ms", summary.p95_ms)
        .number("p99_ms", summary.p99_ms)
        .number("p999_ms", summary.p999_ms)
}

fn consumer_json(summary: &ConsumerSummary) -> JsonObject {
    JsonObject::new()
        .integer("records", summary.records)
        .number("mib", summary.mib)
        .number("mib_per_second", summary.mib_per_second)
        .number("records_per_second", summary.records_per_second)
        .number("rebalance_ms", summary.rebalance_ms)
        .number("fetch_ms", summary.fetch_ms)
        .number("fetch_mib_per_second", summary.fetch_mib_per_second)
        .number("fetch_records_per_second", summary.fetch_records_per_second)
}

fn end_to_end_json(summary: &EndToEndSummary) -> JsonObject {
    JsonObject::new()
        .number("average_ms", summary.average_ms)
        .number("p50_ms", summary.p50_ms)
        .number("p99_ms", summary.p99_ms)
        .number("p999_ms", summary.p999_ms)
}
