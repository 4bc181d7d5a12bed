//! `brook log dump` on the files of a real broker: records produced by
//! librdkafka (one topic plain, one lz4-compressed), a committed group
//! offset, the broker stopped cleanly, then the real binary run on the
//! partition directories' `.log`, `.index` and `.timeindex` files.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use brook_tests::broker::Broker;
use brook_tests::deliveries::Deliveries;
use futures::executor::block_on;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};

use super::common::BROOK;
const TIMEOUT: Duration = Duration::from_secs(30);
const PLAIN: &str = "dump-plain";
const COMPRESSED: &str = "dump-lz4";
const GROUP: &str = "dump-group";
/// Records per topic, produced in this many flushed rounds (one batch each,
/// so the index, written every batch at `index.interval.bytes=1`, has several
/// entries).
const RECORDS: usize = 20;
const ROUNDS: usize = 5;
const SEGMENT: &str = "00000000000000000000";

fn create_topic(broker: &Broker, name: &str) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .create()
        .expect("an admin client");
    let topic = NewTopic::new(name, 1, TopicReplication::Fixed(1)).set("index.interval.bytes", "1");
    let results =
        block_on(admin.create_topics([&topic], &AdminOptions::new())).expect("CreateTopics");
    assert!(results.iter().all(Result::is_ok), "{results:?}");
}

fn produce(broker: &Broker, topic: &str, compression: &str) {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("enable.idempotence", "false")
        .set("compression.codec", compression)
        .set("linger.ms", "50")
        .create_with_context(Deliveries::default())
        .expect("a producer");
    for round in 0..ROUNDS {
        for index in round * RECORDS / ROUNDS..(round + 1) * RECORDS / ROUNDS {
            let key = format!("key-{index}");
            let value = format!("value-{index}-{}", "x".repeat(40));
            let headers = OwnedHeaders::new().insert(Header {
                key: "index",
                value: Some(&index.to_string()),
            });
            let record = BaseRecord::to(topic)
                .key(&key)
                .payload(&value)
                .headers(headers);
            producer
                .send(record)
                .map_err(|(error, _)| error)
                .expect("queued");
        }
        producer.flush(TIMEOUT).expect("flush");
    }
    let deliveries = producer.context();
    assert!(
        deliveries.errors.lock().unwrap().is_empty(),
        "{:?}",
        deliveries.errors
    );
    assert_eq!(deliveries.delivered.lock().unwrap().len(), RECORDS);
}

fn commit_offset(broker: &Broker, topic: &str, offset: i64) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", GROUP)
        .set("enable.auto.commit", "false")
        .create()
        .expect("a consumer");
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(topic, 0, Offset::Offset(offset))
        .unwrap();
    consumer
        .commit(&offsets, CommitMode::Sync)
        .expect("OffsetCommit");
}

/// The directory `<name>` somewhere under `root` (shards may nest them).
fn find_dir(root: &Path, name: &str) -> Option<PathBuf> {
    for entry in std::fs::read_dir(root).ok()?.flatten() {
        let path = entry.path();
        if !path.is_dir() {
            continue;
        }
        if path.file_name().is_some_and(|file| file == name) {
            return Some(path);
        }
        if let Some(found) = find_dir(&path, name) {
            return Some(found);
        }
    }
    None
}

/// The `__consumer_offsets` partition directory whose log is not empty.
fn offsets_partition_dir(root: &Path) -> PathBuf {
    (0..50)
        .filter_map(|partition| find_dir(root, &format!("__consumer_offsets-{partition}")))
        .find(|dir| {
            std::fs::metadata(dir.join(format!("{SEGMENT}.log"))).is_ok_and(|meta| meta.len() > 0)
        })
        .expect("a __consumer_offsets segment with the commit")
}

fn dump(args: &[&str], files: &[&Path]) -> Output {
    Command::new(BROOK)
        .args(["log", "dump"])
        .args(args)
        .args(files)
        .output()
        .expect("brook log dump runs")
}

fn stdout(output: &Output) -> String {
    String::from_utf8(output.stdout.clone()).expect("UTF-8 output")
}

fn stderr(output: &Output) -> String {
    String::from_utf8(output.stderr.clone()).expect("UTF-8 errors")
}

#[test]
fn log_dump_reads_a_real_brokers_segments() {
    let dir = tempfile::tempdir().unwrap();
    let mut broker = Broker::start(BROOK, dir.path(), 2, &[]);
    create_topic(&broker, PLAIN);
    create_topic(&broker, COMPRESSED);
    produce(&broker, PLAIN, "none");
    produce(&broker, COMPRESSED, "lz4");
    commit_offset(&broker, PLAIN, 7);
    assert!(broker.stop(), "the broker stops cleanly: {}", broker.log());

    let plain = find_dir(dir.path(), &format!("{PLAIN}-0")).expect("the plain partition");
    let compressed = find_dir(dir.path(), &format!("{COMPRESSED}-0")).expect("the lz4 partition");
    check_text_and_records(&plain, &compressed);
    check_json(&compressed);
    check_verify(&plain);
    check_offsets_decoder(&offsets_partition_dir(dir.path()));
    check_missing_file(&plain);
}

fn check_text_and_records(plain: &Path, compressed: &Path) {
    let log = plain.join(format!("{SEGMENT}.log"));
    let output = dump(&[], &[&log]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    assert!(
        text.starts_with(&format!("Dumping {}\n", log.display())),
        "{text}"
    );
    let counts: usize = text
        .lines()
        .filter_map(|line| {
            line.split(" count: ")
                .nth(1)?
                .split(' ')
                .next()?
                .parse::<usize>()
                .ok()
        })
        .sum();
    assert_eq!(counts, RECORDS, "{text}");
    assert!(
        text.lines()
            .skip(1)
            .all(|line| line.ends_with("isvalid: true")),
        "{text}"
    );
    assert!(
        text.contains("baseOffset: 0 lastOffset: 3 count: 4 "),
        "{text}"
    );

    let log = compressed.join(format!("{SEGMENT}.log"));
    let output = dump(&["--records"], &[&log]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    assert!(text.contains("compresscodec: lz4"), "{text}");
    let records: Vec<&str> = text
        .lines()
        .filter(|line| line.starts_with("| offset: "))
        .collect();
    assert_eq!(records.len(), RECORDS, "{text}");
    let value = format!(
        r#"key: "key-19" value: "value-19-{}" headers: ["index": "19"]"#,
        "x".repeat(40)
    );
    assert!(records[19].starts_with("| offset: 19 "), "{text}");
    assert!(records[19].ends_with(&value), "{text}");
}

fn check_json(compressed: &Path) {
    let log = compressed.join(format!("{SEGMENT}.log"));
    let index = compressed.join(format!("{SEGMENT}.index"));
    let output = dump(&["--format", "json", "--records"], &[&log, &index]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines
            .iter()
            .all(|line| line.starts_with('{') && line.ends_with('}')),
        "{text}"
    );
    let batches: Vec<&&str> = lines
        .iter()
        .filter(|line| line.starts_with(r#"{"type":"batch","#))
        .collect();
    assert_eq!(batches.len(), ROUNDS, "{text}");
    assert!(
        batches
            .iter()
            .all(|line| line.contains(r#""compression":"lz4""#)),
        "{text}"
    );
    assert!(
        batches
            .iter()
            .all(|line| line.contains(r#""crcValid":true"#)),
        "{text}"
    );
    assert!(
        text.contains(r#""key":"key-0","value":"value-0-"#),
        "{text}"
    );
    let entries = lines
        .iter()
        .filter(|line| line.starts_with(r#"{"type":"index_entry","#))
        .count();
    assert!(entries >= 1, "{text}");
}

fn check_verify(plain: &Path) {
    let index = plain.join(format!("{SEGMENT}.index"));
    let time_index = plain.join(format!("{SEGMENT}.timeindex"));
    let output = dump(&["--verify"], &[&index, &time_index]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    assert_eq!(text.matches(": 0 mismatches").count(), 2, "{text}");

    // Point the second entry one byte past its batch.
    let mut bytes = std::fs::read(&index).unwrap();
    assert!(bytes.len() >= 16, "at least two index entries: {bytes:?}");
    let position = u32::from_be_bytes(bytes[12..16].try_into().unwrap());
    bytes[12..16].copy_from_slice(&(position + 1).to_be_bytes());
    std::fs::write(&index, bytes).unwrap();
    let output = dump(&["--verify"], &[&index]);
    let text = stdout(&output);
    assert!(!output.status.success(), "{text}");
    let expected = format!(
        "to position {}, which is not a batch boundary",
        position + 1
    );
    assert!(
        text.contains("mismatch: entry 1: ") && text.contains(&expected),
        "{text}"
    );
    assert!(stderr(&output).contains("1 of "), "{}", stderr(&output));
}

fn check_offsets_decoder(offsets: &Path) {
    let log = offsets.join(format!("{SEGMENT}.log"));
    let output = dump(&["--offsets-decoder"], &[&log]);
    let text = stdout(&output);
    assert!(output.status.success(), "{text}{}", stderr(&output));
    let commit = format!("[{GROUP},{PLAIN},0]::[OffsetMetadata[7,NO_METADATA],CommitTime ");
    assert!(text.contains(&commit), "{text}");
    let output = dump(&["--offsets-decoder", "--format", "json"], &[&log]);
    let expected = format!(
        r#""decoded":{{"kind":"offset_commit","group":"{GROUP}","topic":"{PLAIN}","partition":0,"offset":7,"#
    );
    assert!(stdout(&output).contains(&expected), "{}", stdout(&output));
}

fn check_missing_file(plain: &Path) {
    let missing = plain.join("00000000000000099999.log");
    let output = dump(&[], &[&missing]);
    assert!(!output.status.success());
    assert!(output.stdout.is_empty(), "{}", stdout(&output));
    let errors = stderr(&output);
    assert_eq!(errors.lines().count(), 1, "{errors}");
    assert!(
        errors.starts_with(&format!(
            "brook log dump: {}: cannot open: ",
            missing.display()
        )),
        "{errors}"
    );
}
