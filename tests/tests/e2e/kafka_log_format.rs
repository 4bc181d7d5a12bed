//! Brook's segment files and Apache Kafka's are the same format, checked
//! both ways with both tools: the same records (keys, values, headers under
//! every codec, a 1 MiB segment rolled, transaction markers) are written by
//! Kafka's Java client to a real `brook serve` and to a real Kafka 4.1.2
//! broker (KRaft, `bench/kafka/start-kafka.sh`); each broker is stopped
//! cleanly and its `.log`, `.index`, `.timeindex` and `.txnindex` files are
//! read by Kafka's `kafka-dump-log` (`kafka.tools.DumpLogSegments`, with
//! `--deep-iteration`, `--index-sanity-check` and `--verify-index-only`)
//! and by `brook log dump` (`--records`, `--verify`). Both must read every
//! file without error and find exactly the records that were written, in
//! the same batches with the same CRCs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use brook_tests::broker::Broker;
use brook_tests::clients::Report;
use brook_tests::java::{checks, java};
use brook_tests::kafka::KafkaBroker;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const DUMP_LOG_SEGMENTS: &str = "kafka.tools.DumpLogSegments";
const CODECS: [&str; 5] = ["none", "gzip", "snappy", "lz4", "zstd"];
/// `FormatRecords` in tests/clients/java writes these (their timestamps
/// are this plus the record's index).
const BASE_TIMESTAMP: i64 = 1_700_000_000_000;
const CODEC_RECORDS: usize = 200;
const ROLL_RECORDS: usize = 3000;
const ROLL_VALUE_BYTES: usize = 400;

/// A record as either tool prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Record {
    offset: i64,
    timestamp: i64,
    /// Key and value for data records; the marker (`COMMIT`, `ABORT`) for
    /// transaction markers.
    content: Content,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Content {
    Data {
        key: String,
        value: String,
        header_keys: Vec<String>,
    },
    Marker(String),
}

/// A batch's header as either tool prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Batch {
    base_offset: i64,
    last_offset: i64,
    count: i64,
    compression: String,
    crc: u64,
    valid: bool,
}

#[derive(Debug, Default, PartialEq, Eq)]
struct Dump {
    batches: Vec<Batch>,
    records: Vec<Record>,
}

fn value(index: usize, topic: &str) -> String {
    let value = format!("value-{index}-{topic}-{}", "brook ".repeat(10));
    if topic == "format-roll" {
        let padding = ROLL_VALUE_BYTES - value.len();
        return value + &"x".repeat(padding);
    }
    value
}

fn data(offset: i64, index: usize, topic: &str) -> Record {
    Record {
        offset,
        timestamp: BASE_TIMESTAMP + index as i64,
        content: Content::Data {
            key: format!("key-{index}"),
            value: value(index, topic),
            header_keys: vec!["index".to_owned(), "topic".to_owned()],
        },
    }
}

/// What `FormatRecords` wrote to `topic`, offset by offset (without the
/// markers' timestamps, which the broker gives them).
fn expected(topic: &str) -> Vec<Record> {
    match topic {
        "format-txn" => {
            // 0–19 committed, 20–29 aborted, 30–34 committed, a marker after each.
            let mut records = Vec::new();
            let mut offset = 0;
            for (range, marker) in [(0..20, "COMMIT"), (20..30, "ABORT"), (30..35, "COMMIT")] {
                for index in range {
                    records.push(data(offset, index, topic));
                    offset += 1;
                }
                records.push(Record {
                    offset,
                    timestamp: -1,
                    content: Content::Marker(marker.to_owned()),
                });
                offset += 1;
            }
            records
        }
        "format-roll" => (0..ROLL_RECORDS)
            .map(|i| data(i as i64, i, topic))
            .collect(),
        _ => (0..CODEC_RECORDS)
            .map(|i| data(i as i64, i, topic))
            .collect(),
    }
}

fn topics() -> Vec<String> {
    let mut topics: Vec<String> = CODECS.iter().map(|c| format!("format-{c}")).collect();
    topics.push("format-roll".to_owned());
    topics.push("format-txn".to_owned());
    topics
}

/// A partition directory's files with `extension`, in offset order.
fn files(partition_dir: &Path, extension: &str) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(partition_dir)
        .unwrap_or_else(|error| panic!("{}: {error}", partition_dir.display()))
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.extension().is_some_and(|e| e == extension))
        .collect();
    files.sort();
    files
}

/// `kafka-dump-log --files a,b,…` plus `flags`, run once for all files; its
/// output split by file ("Dumping <path>" starts each).
fn kafka_dump(files: &[PathBuf], flags: &[&str]) -> BTreeMap<PathBuf, String> {
    let list: Vec<&str> = files.iter().map(|f| f.to_str().unwrap()).collect();
    let output = java(DUMP_LOG_SEGMENTS)
        .args(flags)
        .args(["--files", &list.join(",")])
        .output()
        .expect("kafka-dump-log");
    let stdout = String::from_utf8(output.stdout).unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && !stderr.contains("Exception"),
        "kafka-dump-log {flags:?} failed: {stdout}\n{stderr}"
    );
    let mut by_file = BTreeMap::new();
    let mut current: Option<PathBuf> = None;
    for line in stdout.lines() {
        if let Some(path) = line.strip_prefix("Dumping ") {
            current = Some(PathBuf::from(path));
            by_file.insert(PathBuf::from(path), String::new());
        } else if let Some(path) = &current {
            let text = by_file.get_mut(path).unwrap();
            text.push_str(line);
            text.push('\n');
        }
    }
    assert_eq!(by_file.len(), files.len(), "{stdout}");
    by_file
}

/// The text between `after` and the next space (or the end).
fn field<'a>(line: &'a str, after: &str) -> &'a str {
    let start = line
        .find(after)
        .unwrap_or_else(|| panic!("no {after:?} in {line}"))
        + after.len();
    let rest = &line[start..];
    rest.split(' ').next().unwrap()
}

/// kafka-dump-log's `--deep-iteration --print-data-log` output of one `.log`.
fn parse_kafka_dump(text: &str) -> Dump {
    let mut dump = Dump::default();
    for line in text.lines() {
        if line.starts_with("baseOffset: ") {
            dump.batches.push(Batch {
                base_offset: field(line, "baseOffset: ").parse().unwrap(),
                last_offset: field(line, "lastOffset: ").parse().unwrap(),
                count: field(line, "count: ").parse().unwrap(),
                compression: field(line, "compresscodec: ").to_owned(),
                crc: field(line, " crc: ").parse().unwrap(),
                valid: field(line, "isvalid: ") == "true",
            });
        } else if line.starts_with("| offset: ") {
            let content = if line.contains(" endTxnMarker: ") {
                Content::Marker(field(line, " endTxnMarker: ").to_owned())
            } else {
                let key_start = line.find(" key: ").expect("a key") + " key: ".len();
                let payload = line.find(" payload: ").expect("a payload");
                let header_keys = field(line, "headerKeys: [").trim_end_matches(']');
                Content::Data {
                    key: line[key_start..payload].to_owned(),
                    value: line[payload + " payload: ".len()..].to_owned(),
                    header_keys: header_keys.split(',').map(str::to_owned).collect(),
                }
            };
            dump.records.push(Record {
                offset: field(line, "| offset: ").parse().unwrap(),
                timestamp: field(line, "CreateTime: ").parse().unwrap(),
                content,
            });
        } else if !line.starts_with("Log starting offset: ") && !line.is_empty() {
            panic!("kafka-dump-log printed an unexpected line: {line}\n{text}");
        }
    }
    dump
}

/// `brook log dump --records --format json` of one `.log`.
fn brook_dump(log: &Path) -> Dump {
    let output = Command::new(BROOK)
        .args(["log", "dump", "--records", "--format", "json"])
        .arg(log)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "brook log dump {}: {}",
        log.display(),
        String::from_utf8_lossy(&output.stderr)
    );
    let mut dump = Dump::default();
    for line in String::from_utf8(output.stdout).unwrap().lines() {
        let batch: serde_json::Value = serde_json::from_str(line).unwrap();
        if batch["type"] != "batch" {
            continue;
        }
        dump.batches.push(Batch {
            base_offset: batch["baseOffset"].as_i64().unwrap(),
            last_offset: batch["lastOffset"].as_i64().unwrap(),
            count: batch["count"].as_i64().unwrap(),
            compression: batch["compression"].as_str().unwrap().to_owned(),
            crc: batch["crc"].as_u64().unwrap(),
            valid: batch["crcValid"].as_bool().unwrap(),
        });
        for record in batch["records"].as_array().unwrap() {
            let content = match record.get("endTxnMarker") {
                Some(marker) => Content::Marker(marker.as_str().unwrap().to_owned()),
                None => Content::Data {
                    key: record["key"].as_str().unwrap().to_owned(),
                    value: record["value"].as_str().unwrap().to_owned(),
                    header_keys: record["headers"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|header| header["key"].as_str().unwrap().to_owned())
                        .collect(),
                },
            };
            dump.records.push(Record {
                offset: record["offset"].as_i64().unwrap(),
                timestamp: record["timestamp"].as_i64().unwrap(),
                content,
            });
        }
    }
    dump
}

fn brook_verify(index: &Path) {
    let output = Command::new(BROOK)
        .args(["log", "dump", "--verify"])
        .arg(index)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "brook log dump --verify {}: {}{}",
        index.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Both tools on every file of `topics` under `log_root` (a data
/// directory of Brook's or Kafka's `log.dirs`); who wrote them is `writer`.
fn check_files(writer: &str, log_root: &Path) {
    let partition_dir = |topic: &str| log_root.join(format!("{topic}-0"));
    // kafka-dump-log once for every segment, and once per index check for
    // every index: each run is a JVM start.
    let mut all_logs = Vec::new();
    let mut all_indexes = Vec::new();
    for topic in topics() {
        let logs = files(&partition_dir(&topic), "log");
        assert!(!logs.is_empty(), "{writer}: no segment of {topic}");
        if topic == "format-roll" {
            assert!(
                logs.len() >= 2,
                "{writer}: a 1 MiB segment rolled: {logs:?}"
            );
        }
        all_logs.extend(logs);
        all_indexes.extend(files(&partition_dir(&topic), "index"));
        all_indexes.extend(files(&partition_dir(&topic), "timeindex"));
    }
    let kafka_dumps = kafka_dump(&all_logs, &["--deep-iteration", "--print-data-log"]);
    let index_entries = check_indexes(writer, &all_indexes);
    for topic in topics() {
        let mut kafka_records = Vec::new();
        let mut brook_records = Vec::new();
        let mut batches = 0;
        for log in files(&partition_dir(&topic), "log") {
            let kafka = parse_kafka_dump(&kafka_dumps[&log]);
            let brook = brook_dump(&log);
            assert_eq!(
                kafka,
                brook,
                "{writer} {}: the tools disagree",
                log.display()
            );
            assert!(kafka.batches.iter().all(|b| b.valid), "{writer}: {kafka:?}");
            batches += kafka.batches.len();
            if let Some(codec) = topic.strip_prefix("format-").filter(|c| CODECS.contains(c)) {
                assert!(
                    kafka.batches.iter().all(|b| b.compression == codec),
                    "{writer} {}: {:?}",
                    log.display(),
                    kafka.batches
                );
            }
            kafka_records.extend(kafka.records);
            brook_records.extend(brook.records);
        }
        assert!(batches > 1, "{writer} {topic}: several batches");
        assert_eq!(kafka_records, brook_records, "{writer} {topic}");
        let mut expected = expected(&topic);
        // Markers carry the broker's time: take it from the dump.
        for (want, got) in expected.iter_mut().zip(&kafka_records) {
            if matches!(want.content, Content::Marker(_)) {
                want.timestamp = got.timestamp;
            }
        }
        assert_eq!(kafka_records.len(), expected.len(), "{writer} {topic}");
        for (got, want) in kafka_records.iter().zip(&expected) {
            assert_eq!(got, want, "{writer} {topic}");
        }
        let entries: usize = index_entries
            .iter()
            .filter(|(path, _)| path.starts_with(partition_dir(&topic)))
            .map(|(_, entries)| entries)
            .sum();
        assert!(entries > 0, "{writer} {topic}: no index entries");
    }
    check_transaction_index(writer, &partition_dir("format-txn"));
}

/// Kafka's index checks and `brook log dump --verify` on these `.index`
/// and `.timeindex` files; both tools list the same entries. Returns how
/// many each has. (A segment's first batch gets no entry, in Kafka as in
/// Brook, so a segment of one batch has an empty offset index.)
fn check_indexes(writer: &str, indexes: &[PathBuf]) -> BTreeMap<PathBuf, usize> {
    for (path, text) in kafka_dump(indexes, &["--index-sanity-check"]) {
        let passed = format!("{} passed sanity check.", path.display());
        let empty = format!("{} is empty.", path.display());
        assert!(
            text.trim() == passed || text.trim() == empty,
            "{writer}: {text}"
        );
    }
    for (path, text) in kafka_dump(indexes, &["--verify-index-only"]) {
        let empty = format!("{} is empty.", path.display());
        assert!(
            text.trim().is_empty() || text.trim() == empty,
            "{writer} {}: kafka-dump-log --verify-index-only found: {text}",
            path.display()
        );
    }
    let mut counts = BTreeMap::new();
    for (path, text) in kafka_dump(indexes, &[]) {
        let kafka: Vec<String> = text
            .lines()
            .filter(|line| !line.is_empty() && !line.ends_with(" is empty."))
            .map(str::to_owned)
            .collect();
        assert_eq!(
            kafka,
            brook_index_entries(&path),
            "{writer} {}",
            path.display()
        );
        brook_verify(&path);
        counts.insert(path, kafka.len());
    }
    counts
}

/// `brook log dump --format json` of an index, as kafka-dump-log prints
/// its entries (`offset: O position: P`, `timestamp: T offset: O`).
fn brook_index_entries(index: &Path) -> Vec<String> {
    let output = Command::new(BROOK)
        .args(["log", "dump", "--format", "json"])
        .arg(index)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "brook log dump {}",
        index.display()
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .filter_map(|line| {
            let entry: serde_json::Value = serde_json::from_str(line).unwrap();
            match entry["type"].as_str().unwrap() {
                "index_entry" => Some(format!(
                    "offset: {} position: {}",
                    entry["offset"], entry["position"]
                )),
                "time_index_entry" => Some(format!(
                    "timestamp: {} offset: {}",
                    entry["timestamp"], entry["offset"]
                )),
                _ => None,
            }
        })
        .collect()
}

/// The aborted transaction of format-txn (records 20–29 at offsets 21–30,
/// its ABORT marker at 31) is the one entry of the `.txnindex`.
fn check_transaction_index(writer: &str, partition_dir: &Path) {
    let indexes = files(partition_dir, "txnindex");
    assert_eq!(indexes.len(), 1, "{writer}: {indexes:?}");
    let dumps = kafka_dump(&indexes, &[]);
    let entries: Vec<&str> = dumps[&indexes[0]].lines().collect();
    assert_eq!(entries.len(), 1, "{writer}: {entries:?}");
    assert!(
        entries[0].contains(" firstOffset: 21 lastOffset: 31 "),
        "{writer}: {entries:?}"
    );
}

fn write_records(address: &str, broker_log: impl Fn() -> String) {
    let output = checks("format-produce", address).output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success() && !stdout.contains(".error"),
        "format-produce: {stdout}\n{}\n--- broker\n{}",
        String::from_utf8_lossy(&output.stderr),
        broker_log()
    );
    let report = Report::parse(&stdout);
    assert_eq!(report.one("format.format-txn.records"), "35", "{stdout}");
}

/// kafka-dump-log reads the files a real `brook serve` wrote, and finds
/// what `brook log dump` finds.
#[test]
fn kafka_dump_log_reads_brooks_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let address = broker.address.clone();
    let log = broker.log();
    write_records(&address, || log.clone());
    assert!(broker.stop(), "a clean shutdown: {}", broker.log());
    check_files("brook", dir.path());
}

/// `brook log dump` reads the files a real Apache Kafka 4.1.2 broker wrote,
/// and finds what kafka-dump-log finds.
#[test]
fn brook_log_dump_reads_kafkas_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut kafka = KafkaBroker::start(dir.path(), &[]);
    let address = kafka.address.clone();
    write_records(&address, || kafka.log());
    assert!(kafka.stop(), "a clean shutdown: {}", kafka.log());
    check_files("kafka", &kafka.log_dir);
}
