//! `brook produce TOPIC`: records from stdin or `--file`, one per line
//! (kafka-console-producer and kcat `-P`), written through Brook's own
//! client so it works against any Kafka cluster.
//!
//! The pieces, in the order a line goes through them: [`input`] reads and
//! splits lines on a thread of its own; [`partitioner`] places each record
//! as Kafka's producer would (murmur2 of the key, sticky or round-robin);
//! [`accumulator`] batches them per partition and gives an idempotent
//! producer's sequence numbers; [`sender`] sends the batches to the
//! partitions' leaders and retries what Kafka retries. This file checks the
//! arguments, drives the loop and prints the summary: per partition the
//! records written and the offsets they got.
//!
//! Idempotent by default, as Kafka's producer is since 3.0: a producer id
//! from InitProducerId, acks=all, each partition's batches numbered from 0.

mod accumulator;
mod input;
mod partitioner;
mod sender;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::rc::Rc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use brook_engine::log::batch::Compression;
use brook_engine::units::parse_bytes;
use brook_shards::client::records::RecordHeader;
use futures::StreamExt;
use futures::channel::mpsc;
use futures::future::{Either, select};
use serde::Serialize;

use crate::cli::progress::Progress;
use crate::cli::{self, CliError, ClientArgs, Format, Out, Session, Table, time};
use crate::produce::accumulator::Accumulator;
use crate::produce::input::{InputEvent, InputRecord, Source};
use crate::produce::partitioner::{Partitioner, Strategy};
use crate::produce::sender::{Acked, Acks, Sender};

/// Kafka's `batch.size` default.
const BATCH_BYTES_DEFAULT: &str = "16384";
/// The largest `--batch-size`: a batch must fit in one Produce request,
/// and brokers refuse batches over `message.max.bytes` (1 MiB by default)
/// anyway.
const BATCH_BYTES_MAX: u64 = 16 << 20;
/// Kafka's UNKNOWN_TOPIC_OR_PARTITION, for a `--partition` the topic lacks.
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

#[derive(Debug, clap::Args)]
pub struct ProduceArgs {
    #[command(flatten)]
    pub client: ClientArgs,
    /// The topic to write to; it must exist (produce never creates topics).
    #[arg(value_name = "TOPIC")]
    pub topic: String,
    /// Read records from this file instead of stdin.
    #[arg(long, value_name = "PATH")]
    pub file: Option<PathBuf>,
    /// Split each line at its first SEP into key and value; a line without
    /// SEP stops the command with an error naming the line.
    #[arg(long, value_name = "SEP")]
    pub key_separator: Option<String>,
    /// A header added to every record, as KEY=VALUE (repeatable).
    #[arg(short = 'H', long = "header", value_name = "KEY=VALUE")]
    pub headers: Vec<String>,
    /// Write every record to this partition.
    #[arg(short = 'p', long, value_parser = clap::value_parser!(i32).range(0..))]
    pub partition: Option<i32>,
    /// How records are placed when --partition is not given.
    #[arg(long, value_enum, default_value_t = Strategy::Murmur2)]
    pub partitioner: Strategy,
    /// 0, 1 or all (-1); anything but all needs --no-idempotence.
    #[arg(long, default_value = "all", allow_hyphen_values = true, value_parser = Acks::parse)]
    pub acks: Acks,
    /// Compression of each batch.
    #[arg(short = 'z', long, value_enum, default_value_t = Codec::None)]
    pub compression: Codec,
    /// Turn off idempotence (no producer id; a retried batch may be written twice).
    #[arg(long)]
    pub no_idempotence: bool,
    /// Bytes per partition batch, at most (Kafka's batch.size; KiB, MiB suffixes).
    #[arg(long, default_value = BATCH_BYTES_DEFAULT, value_parser = parse_bytes)]
    pub batch_size: u64,
    /// How long a batch waits for more input before it is sent (Kafka's linger.ms).
    #[arg(long, default_value = "5ms", value_parser = time::parse_duration)]
    pub linger: Duration,
}

/// `--compression`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Codec {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Codec {
    fn compression(self) -> Compression {
        match self {
            Codec::None => Compression::None,
            Codec::Gzip => Compression::Gzip,
            Codec::Snappy => Compression::Snappy,
            Codec::Lz4 => Compression::Lz4,
            Codec::Zstd => Compression::Zstd,
        }
    }
}

/// The arguments, checked before connecting.
#[derive(Debug)]
struct Settings {
    topic: String,
    separator: Option<Vec<u8>>,
    headers: Vec<(String, String)>,
    partition: Option<i32>,
    strategy: Strategy,
    acks: Acks,
    compression: Compression,
    idempotent: bool,
    batch_bytes: usize,
    linger: Duration,
    format: Format,
}

impl Settings {
    fn from_args(args: &ProduceArgs) -> Result<Settings, CliError> {
        let headers = args
            .headers
            .iter()
            .map(|header| input::parse_header(header))
            .collect::<Result<Vec<_>, _>>()?;
        let separator = match &args.key_separator {
            Some(separator) if separator.is_empty() => {
                return Err(CliError::Usage("--key-separator is empty".to_owned()));
            }
            separator => separator.as_ref().map(|text| text.as_bytes().to_vec()),
        };
        let idempotent = !args.no_idempotence;
        if idempotent && args.acks != Acks::All {
            return Err(CliError::Usage(
                "an idempotent producer needs --acks all (as Kafka's enable.idempotence); \
                 add --no-idempotence for --acks 0 or 1"
                    .to_owned(),
            ));
        }
        if !(1..=BATCH_BYTES_MAX).contains(&args.batch_size) {
            return Err(CliError::Usage(format!(
                "--batch-size must be 1 to {BATCH_BYTES_MAX} bytes"
            )));
        }
        Ok(Settings {
            topic: args.topic.clone(),
            separator,
            headers,
            partition: args.partition,
            strategy: args.partitioner,
            acks: args.acks,
            compression: args.compression.compression(),
            idempotent,
            // At most BATCH_BYTES_MAX, so it fits.
            batch_bytes: args.batch_size as usize,
            linger: args.linger,
            format: args.client.format.table_or_json()?,
        })
    }

    /// The headers' bytes in each record.
    fn headers_bytes(&self) -> usize {
        self.headers
            .iter()
            .map(|(key, value)| key.len() + value.len() + 10)
            .sum()
    }
}

pub fn run(args: ProduceArgs) -> ExitCode {
    let settings = match Settings::from_args(&args) {
        Ok(settings) => settings,
        Err(error) => return cli::exit("produce", Err(error)),
    };
    let source = match open_source(args.file.as_deref()) {
        Ok(source) => source,
        Err(error) => return cli::exit("produce", Err(error)),
    };
    cli::run("produce", &args.client, move |session| {
        produce(session, settings, source)
    })
}

fn open_source(file: Option<&Path>) -> Result<Source, CliError> {
    match file {
        None => Ok(Box::new(std::io::stdin())),
        Some(path) => std::fs::File::open(path)
            .map(|file| Box::new(file) as Source)
            .map_err(|source| CliError::Io {
                operation: format!("opening {}", path.display()),
                source,
            }),
    }
}

async fn produce(session: Rc<Session>, settings: Settings, source: Source) -> Result<(), CliError> {
    let topic = settings.topic.clone();
    let layout = sender::describe(&session, &topic).await?;
    if let Some(partition) = settings.partition.filter(|p| *p >= layout.partitions) {
        return Err(CliError::Kafka {
            what: format!("partition {topic}-{partition}"),
            code: UNKNOWN_TOPIC_OR_PARTITION,
        });
    }
    let identity = match settings.idempotent {
        true => Some(sender::init_producer_id(&session).await?),
        false => None,
    };
    let mut producer = Producer {
        partitioner: Partitioner::new(
            settings.strategy,
            layout.partitions,
            settings.partition,
            sticky_seed(),
        ),
        accumulator: Accumulator::new(settings.batch_bytes, settings.compression, identity),
        sender: Sender::new(session.clone(), topic.clone(), settings.acks, layout),
        summary: BTreeMap::new(),
        produced: 0,
        progress: Progress::new("records produced"),
        settings,
    };
    let receiver = input::spawn_reader(source, producer.settings.separator.clone())?;
    let outcome = producer.pump(receiver).await;
    producer.sender.close().await;
    producer.progress.finish();
    if outcome.is_ok() || producer.produced > 0 {
        producer.print()?;
    }
    outcome
}

/// Seeds the choice of sticky partitions, so concurrent runs spread out.
fn sticky_seed() -> u64 {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_nanos() as u64);
    nanos ^ u64::from(std::process::id()).rotate_left(32)
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

/// What was written to one partition.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Written {
    records: u64,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
}

/// One line of `--format json`.
#[derive(Debug, Serialize)]
struct SummaryLine<'a> {
    topic: &'a str,
    partition: i32,
    records: u64,
    first_offset: Option<i64>,
    last_offset: Option<i64>,
}

/// The producing loop's state; lives on the command's executor.
#[derive(Debug)]
struct Producer {
    settings: Settings,
    partitioner: Partitioner,
    accumulator: Accumulator,
    sender: Sender,
    summary: BTreeMap<i32, Written>,
    produced: u64,
    progress: Progress,
}

impl Producer {
    /// Takes the input's records until it ends (or fails), sending batches
    /// as they fill and whatever waited `--linger` for more input.
    async fn pump(&mut self, mut receiver: mpsc::Receiver<InputEvent>) -> Result<(), CliError> {
        loop {
            let event = match self.accumulator.oldest_open() {
                None => receiver.next().await,
                Some(oldest) => {
                    let wait =
                        (oldest + self.settings.linger).saturating_duration_since(Instant::now());
                    match next_within(&mut receiver, wait).await {
                        Some(event) => event,
                        None => {
                            self.flush().await?;
                            continue;
                        }
                    }
                }
            };
            match event {
                None => return self.flush().await,
                Some(InputEvent::Records(records)) => {
                    for record in &records {
                        self.add(record).await?;
                    }
                }
                Some(InputEvent::Failed(error)) => {
                    self.flush().await?;
                    return Err(error);
                }
            }
        }
    }

    /// Places `record` into its partition's batch, sending what fills.
    async fn add(&mut self, record: &InputRecord) -> Result<(), CliError> {
        let record_bytes = record.size_bytes() + self.settings.headers_bytes();
        let mut placement = self.partitioner.place(record.key.as_deref());
        if !self.accumulator.fits(placement.partition, record_bytes) {
            self.accumulator.seal(placement.partition)?;
            self.partitioner.on_batch_sealed(placement.partition);
            if placement.sticky {
                // Kafka's sticky partitioner moves on when a batch is
                // full, and the record that did not fit moves with it.
                placement = self.partitioner.place(record.key.as_deref());
                if !self.accumulator.fits(placement.partition, record_bytes) {
                    self.accumulator.seal(placement.partition)?;
                }
            }
        }
        let headers: Vec<RecordHeader<'_>> = self
            .settings
            .headers
            .iter()
            .map(|(key, value)| RecordHeader {
                key: key.as_bytes(),
                value: Some(value.as_bytes()),
            })
            .collect();
        let full = self.accumulator.push(
            placement.partition,
            Instant::now(),
            now_ms(),
            record,
            &headers,
        );
        if full {
            self.accumulator.seal(placement.partition)?;
            self.partitioner.on_batch_sealed(placement.partition);
        }
        self.send_ready().await
    }

    /// Seals and sends every open batch.
    async fn flush(&mut self) -> Result<(), CliError> {
        for partition in self.accumulator.seal_all()? {
            self.partitioner.on_batch_sealed(partition);
        }
        self.send_ready().await
    }

    /// Sends the sealed batches, a round (one batch per partition) at a time.
    async fn send_ready(&mut self) -> Result<(), CliError> {
        while self.accumulator.has_ready() {
            let round = self.accumulator.take_round();
            let acked = self.sender.send(round).await?;
            for batch in acked {
                self.account(batch);
            }
            self.progress.update(self.produced, None);
        }
        Ok(())
    }

    fn account(&mut self, batch: Acked) {
        let records = u64::try_from(batch.records).unwrap_or(0);
        self.produced += records;
        let written = self.summary.entry(batch.partition).or_default();
        written.records += records;
        if let Some(base) = batch.base_offset {
            let last = base + i64::from(batch.records) - 1;
            written.first_offset = Some(written.first_offset.map_or(base, |first| first.min(base)));
            written.last_offset = Some(written.last_offset.map_or(last, |known| known.max(last)));
        }
    }

    /// The summary: a table, or a JSON line per partition.
    fn print(&self) -> Result<(), CliError> {
        let mut out = Out::new();
        let topic = self.settings.topic.as_str();
        if self.settings.format == Format::Json {
            for (partition, written) in &self.summary {
                out.json(&SummaryLine {
                    topic,
                    partition: *partition,
                    records: written.records,
                    first_offset: written.first_offset,
                    last_offset: written.last_offset,
                })?;
            }
        } else {
            let offset = |offset: Option<i64>| offset.map_or("-".to_owned(), |o| o.to_string());
            let mut table = Table::new(&["PARTITION", "RECORDS", "FIRST-OFFSET", "LAST-OFFSET"]);
            for (partition, written) in &self.summary {
                table.row([
                    partition.to_string(),
                    written.records.to_string(),
                    offset(written.first_offset),
                    offset(written.last_offset),
                ]);
            }
            out.table(&table)?;
        }
        out.flush()
    }
}

/// The next input event, or `None` if none came within `wait` (`Some(None)`:
/// the input ended).
async fn next_within(
    receiver: &mut mpsc::Receiver<InputEvent>,
    wait: Duration,
) -> Option<Option<InputEvent>> {
    if wait.is_zero() {
        return None;
    }
    let next = receiver.next();
    let timer = std::pin::pin!(glommio::timer::sleep(wait));
    match select(next, timer).await {
        Either::Left((event, _)) => Some(event),
        Either::Right(_) => None,
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Debug, Parser)]
    struct Command {
        #[command(flatten)]
        produce: ProduceArgs,
    }

    fn settings(args: &[&str]) -> Result<Settings, CliError> {
        let command =
            Command::try_parse_from(std::iter::once("produce").chain(args.iter().copied()))
                .map_err(|error| CliError::Usage(error.to_string()))?;
        Settings::from_args(&command.produce)
    }

    #[test]
    fn defaults_are_kafkas() {
        let settings = settings(&["t"]).unwrap();
        assert!(settings.idempotent);
        assert_eq!(settings.acks, Acks::All);
        assert_eq!(settings.batch_bytes, 16384);
        assert_eq!(settings.linger, Duration::from_millis(5));
        assert_eq!(settings.strategy, Strategy::Murmur2);
        assert_eq!(settings.compression, Compression::None);
        assert_eq!(settings.format, Format::Table);
    }

    #[test]
    fn options_are_checked_before_connecting() {
        let parsed = settings(&[
            "t",
            "--header",
            "a=1",
            "--header",
            "b=x=y",
            "--key-separator",
            "::",
            "--compression",
            "snappy",
            "--batch-size",
            "1MiB",
            "--acks",
            "-1",
        ])
        .unwrap();
        assert_eq!(
            parsed.headers,
            [("a".into(), "1".into()), ("b".into(), "x=y".into())]
        );
        assert_eq!(parsed.separator.as_deref(), Some(&b"::"[..]));
        assert_eq!(parsed.compression, Compression::Snappy);
        assert_eq!(parsed.batch_bytes, 1 << 20);
        let error = |args: &[&str]| settings(args).unwrap_err().to_string();
        assert!(error(&["t", "--header", "novalue"]).contains("has no '='"));
        assert!(error(&["t", "--acks", "1"]).contains("--no-idempotence"));
        assert!(settings(&["t", "--acks", "0", "--no-idempotence"]).is_ok());
        assert!(error(&["t", "--key-separator", ""]).contains("empty"));
        assert!(error(&["t", "--batch-size", "0"]).contains("--batch-size"));
        assert!(error(&["t", "--format", "%v"]).contains("table"));
    }
}
