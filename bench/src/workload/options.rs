//! A workload, as `brook bench run` takes it on the command line: Kafka's
//! producer/consumer vocabulary (acks, batch size, linger, compression) plus
//! the load's shape (topics, partitions, record size, rate, duration).

use std::time::Duration;

use brook_engine::log::batch::Compression;
use clap::Args;

/// The stamp at the start of every value: creation time (ns, monotonic),
/// run id, producer, sequence. Consumers read it back.
pub const STAMP_BYTES: usize = 24;

#[derive(Clone, Debug, PartialEq, Args)]
pub struct WorkloadOptions {
    /// Broker to bootstrap from (host:port). Without it, the named
    /// workloads start their own `brook serve`.
    #[arg(long)]
    pub brokers: Option<String>,
    /// Topic name prefix; topics are `<prefix>-0`, `<prefix>-1`, …
    #[arg(long, default_value = "brook-bench")]
    pub topic: String,
    #[arg(long, default_value_t = 1)]
    pub topics: usize,
    /// Partitions per topic.
    #[arg(long, default_value_t = 8)]
    pub partitions: i32,
    /// Replicas of each partition of the topics the workload creates.
    #[arg(long, default_value_t = 1)]
    pub replication_factor: i16,
    /// Bytes per record value (at least the 24-byte stamp).
    #[arg(long, default_value_t = 1024)]
    pub record_bytes: usize,
    /// Fraction of each value that is random bytes (the rest is zeros).
    #[arg(long, default_value_t = 0.5)]
    pub random_fraction: f64,
    /// Distinct keys, records spread by key hash; 0: no keys (sticky
    /// partitioning, one partition per batch in turn, as Kafka's default).
    #[arg(long, default_value_t = 0)]
    pub keys: u64,
    #[arg(long, default_value_t = 1)]
    pub producers: usize,
    #[arg(long, default_value_t = 1)]
    pub consumers: usize,
    /// Consumer group (needs consumer groups in the broker).
    #[arg(long)]
    pub group: Option<String>,
    /// Records per second over all producers; 0: as fast as acks allow.
    #[arg(long, default_value_t = 0)]
    pub rate: u64,
    /// 0, 1 or -1 (all).
    #[arg(long, default_value_t = 1, allow_negative_numbers = true)]
    pub acks: i16,
    /// Largest batch in bytes (Kafka's batch.size).
    #[arg(long, default_value_t = 1 << 20)]
    pub batch_bytes: usize,
    /// How long a batch may wait for more records (Kafka's linger.ms).
    #[arg(long, default_value = "1ms", value_parser = parse_duration)]
    pub linger: Duration,
    /// none, lz4 or zstd.
    #[arg(long, default_value = "none", value_parser = parse_compression)]
    pub compression: Compression,
    /// Produce requests a producer keeps in flight.
    #[arg(long, default_value_t = 5)]
    pub max_in_flight: usize,
    /// Bytes a fetch may return per partition (max.partition.fetch.bytes).
    #[arg(long, default_value_t = 1 << 20)]
    pub fetch_partition_bytes: i32,
    /// Consumers verify every fetched batch's CRC (Kafka's check.crcs: on
    /// in the Java consumer, off in librdkafka); `--check-crcs false`.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub check_crcs: bool,
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub warmup: Duration,
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub duration: Duration,
    /// CPUs for the load generator's executors, one each (e.g. "1" or
    /// "0,1"); empty: one unpinned executor.
    #[arg(long, value_delimiter = ',')]
    pub cpus: Vec<usize>,
    /// Consumers start at the earliest offset instead of the log end.
    #[arg(long)]
    pub from_beginning: bool,
    /// Longest the drain may take for consumers to catch up at the end.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// End the measured window early once this many value bytes were
    /// produced (consumed, when there are no producers); 0: run the whole
    /// `--duration`. For fixed-size loads such as a catch-up read.
    #[arg(long = "bytes", default_value_t = 0, value_parser = brook_engine::units::parse_bytes)]
    pub bytes_limit: u64,
    /// Topic configs for the topics the workload creates, as key=value
    /// (repeatable), e.g. `flush.messages=1` to fsync every append.
    #[arg(long = "topic-config", value_name = "KEY=VALUE", value_parser = parse_config)]
    pub topic_configs: Vec<(String, String)>,
}

impl Default for WorkloadOptions {
    fn default() -> WorkloadOptions {
        WorkloadOptions {
            brokers: None,
            topic: "brook-bench".into(),
            topics: 1,
            partitions: 8,
            replication_factor: 1,
            record_bytes: 1024,
            random_fraction: 0.5,
            keys: 0,
            producers: 1,
            consumers: 1,
            group: None,
            rate: 0,
            acks: 1,
            batch_bytes: 1 << 20,
            linger: Duration::from_millis(1),
            compression: Compression::None,
            max_in_flight: 5,
            fetch_partition_bytes: 1 << 20,
            check_crcs: true,
            warmup: Duration::from_secs(5),
            duration: Duration::from_secs(30),
            cpus: Vec::new(),
            from_beginning: false,
            drain_timeout: Duration::from_secs(60),
            bytes_limit: 0,
            topic_configs: Vec::new(),
        }
    }
}

impl WorkloadOptions {
    pub fn topic_names(&self) -> Vec<String> {
        (0..self.topics)
            .map(|index| format!("{}-{index}", self.topic))
            .collect()
    }

    /// Why the options cannot run, if they cannot.
    pub fn validate(&self) -> Result<(), String> {
        if self.record_bytes < STAMP_BYTES {
            return Err(format!("--record-bytes must be at least {STAMP_BYTES}"));
        }
        if !(0.0..=1.0).contains(&self.random_fraction) {
            return Err("--random-fraction must be within 0..1".into());
        }
        if self.topics == 0 || self.partitions <= 0 {
            return Err("--topics and --partitions must be positive".into());
        }
        if !matches!(self.acks, -1..=1) {
            return Err("--acks must be 0, 1 or -1".into());
        }
        if self.acks == 0 && self.consumers > 0 {
            // Without acknowledgements nothing can be checked or drained.
            return Err("--acks 0 runs without consumers (--consumers 0)".into());
        }
        if self.batch_bytes < self.record_bytes + 128 {
            return Err("--batch-bytes must hold at least one record".into());
        }
        if self.max_in_flight == 0 {
            return Err("--max-in-flight must be positive".into());
        }
        if self.group.is_some() {
            return Err("consumer groups are not available yet; run without --group".into());
        }
        if self.producers == 0 && self.consumers == 0 {
            return Err("nothing to run: no producers and no consumers".into());
        }
        Ok(())
    }

    /// Executors to start: one per listed CPU, or one unpinned.
    pub fn executors(&self) -> usize {
        self.cpus.len().max(1)
    }
}

/// `250ms`, `5s`, `2m`, `1h`, or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration"))?;
    let seconds = match unit {
        "ns" => number / 1e9,
        "us" | "µs" => number / 1e6,
        "ms" => number / 1e3,
        "" | "s" => number,
        "m" => number * 60.0,
        "h" => number * 3600.0,
        _ => return Err(format!("{text:?}: unknown unit {unit:?}")),
    };
    Duration::try_from_secs_f64(seconds).map_err(|_| format!("{text:?} is out of range"))
}

/// `key=value`, for `--topic-config`.
pub fn parse_config(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(format!("{text:?}: expected key=value")),
    }
}

/// The codecs the load generator writes.
pub fn parse_compression(text: &str) -> Result<Compression, String> {
    match text {
        "none" => Ok(Compression::None),
        "lz4" => Ok(Compression::Lz4),
        "zstd" => Ok(Compression::Zstd),
        other => Err(format!("{other:?}: expected none, lz4 or zstd")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        workload: WorkloadOptions,
    }

    fn parse(args: &[&str]) -> Result<WorkloadOptions, clap::Error> {
        Command::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .map(|command| command.workload)
    }

    #[test]
    fn the_defaults_are_the_documented_ones() {
        assert_eq!(parse(&[]).unwrap(), WorkloadOptions::default());
        assert_eq!(WorkloadOptions::default().validate(), Ok(()));
    }

    #[test]
    fn kafka_settings_parse() {
        let options = parse(&[
            "--brokers",
            "127.0.0.1:9092",
            "--acks",
            "-1",
            "--linger",
            "0ms",
            "--compression",
            "zstd",
            "--rate",
            "50000",
            "--duration",
            "2m",
            "--cpus",
            "0,1",
            "--bytes",
            "4GiB",
            "--topic-config",
            "flush.messages=1",
            "--check-crcs",
            "false",
        ])
        .unwrap();
        assert_eq!(options.acks, -1);
        assert_eq!(options.linger, Duration::ZERO);
        assert_eq!(options.compression, Compression::Zstd);
        assert_eq!(options.rate, 50_000);
        assert_eq!(options.duration, Duration::from_secs(120));
        assert_eq!(options.cpus, vec![0, 1]);
        assert_eq!(options.bytes_limit, 4 << 30);
        assert!(!options.check_crcs);
        assert!(
            parse(&[]).unwrap().check_crcs,
            "on by default, as in Kafka's Java consumer"
        );
        assert_eq!(
            options.topic_configs,
            vec![("flush.messages".to_owned(), "1".to_owned())]
        );
        assert!(parse(&["--topic-config", "=1"]).is_err());
        assert_eq!(options.executors(), 2);
        assert!(parse(&["--compression", "brotli"]).is_err());
        assert!(parse(&["--linger", "soon"]).is_err());
    }

    #[test]
    fn durations_and_codecs() {
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(parse_compression("lz4"), Ok(Compression::Lz4));
    }

    #[test]
    fn impossible_workloads_are_refused() {
        let bad = |change: fn(&mut WorkloadOptions)| {
            let mut options = WorkloadOptions::default();
            change(&mut options);
            options.validate().is_err()
        };
        assert!(bad(|o| o.record_bytes = 10));
        assert!(bad(|o| o.acks = 2));
        assert!(bad(|o| o.acks = 0));
        assert!(bad(|o| o.partitions = 0));
        assert!(bad(|o| o.random_fraction = 1.5));
        assert!(bad(|o| o.group = Some("g".into())));
        assert!(bad(|o| o.batch_bytes = 100));
    }
}
