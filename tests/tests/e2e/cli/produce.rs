//! `brook produce`: lines in, records out, checked from the other side —
//! placement against librdkafka's `murmur2_random` and Kafka's published
//! murmur2 vectors, each partitioner, each codec read back by librdkafka
//! and by Kafka's own batch decoder (kafka-protocol), the idempotent
//! producer's fields in the written batches, the JSON summary, and the
//! errors a user meets.

use std::collections::BTreeMap;
use std::time::Duration;

use brook_tests::broker::Broker;
use brook_tests::raw;
use bytes::Bytes;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder, RecordSet};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{Offset, TopicPartitionList};

use super::common::{Record, Run, brook_with_input, create_topic, produce, start_broker};

/// Fetch v12: topics by name, served by Kafka 2.7+ and Brook.
const FETCH_VERSION: i16 = 12;
const FETCH_BYTES_MAX: i32 = 8 << 20;
const TIMEOUT: Duration = Duration::from_secs(30);

/// `brook produce TOPIC ARGS…` with `input` on stdin.
fn brook_produce(broker: &Broker, topic: &str, args: &[&str], input: &str) -> Run {
    let mut all = vec!["produce", topic];
    all.extend_from_slice(args);
    brook_with_input(broker, &all, input.as_bytes())
}

/// Every batch of `topic`-`partition`, decoded by kafka-protocol (which
/// checks each CRC and decompresses every codec).
fn batches(broker: &Broker, topic: &str, partition: i32) -> Vec<RecordSet> {
    let mut stream = raw::connect(broker);
    let mut sets = Vec::new();
    let mut offset = 0;
    loop {
        let request = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_min_bytes(0)
            .with_max_bytes(FETCH_BYTES_MAX)
            .with_topics(vec![
                FetchTopic::default()
                    .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partitions(vec![
                        FetchPartition::default()
                            .with_partition(partition)
                            .with_fetch_offset(offset)
                            .with_partition_max_bytes(FETCH_BYTES_MAX),
                    ]),
            ]);
        let response: FetchResponse =
            raw::exchange(&mut stream, ApiKey::Fetch, FETCH_VERSION, &request);
        let data = &response.responses[0].partitions[0];
        assert_eq!(data.error_code, 0, "fetching {topic}-{partition}");
        let mut records = data.records.clone().unwrap_or_default();
        if records.is_empty() {
            return sets;
        }
        for set in RecordBatchDecoder::decode_all(&mut records).expect("valid batches") {
            if let Some(last) = set.records.last() {
                offset = last.offset + 1;
            }
            sets.push(set);
        }
    }
}

/// Each record's value, by partition, in offset order.
fn values_by_partition(broker: &Broker, topic: &str, partitions: i32) -> Vec<Vec<String>> {
    (0..partitions)
        .map(|partition| {
            batches(broker, topic, partition)
                .iter()
                .flat_map(|set| &set.records)
                .map(|record| text(record.value.as_ref()))
                .collect()
        })
        .collect()
}

fn text(bytes: Option<&Bytes>) -> String {
    String::from_utf8(bytes.expect("a value").to_vec()).expect("UTF-8")
}

/// Kafka's UtilsTest.testMurmur2 keys and `toPositive(murmur2(key))`.
const KAFKA_VECTORS: [(&str, i64); 6] = [
    ("21", 3_321_034_988 - (1 << 31)),
    ("foobar", 1_357_151_166),
    (
        "a-little-bit-long-string",
        4_294_967_296 - 985_981_536 - (1 << 31),
    ),
    (
        "a-little-bit-longer-string",
        4_294_967_296 - 1_486_304_829 - (1 << 31),
    ),
    (
        "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
        4_294_967_296 - 58_897_971 - (1 << 31),
    ),
    ("abc", 479_470_107),
];

#[test]
fn keyed_lines_land_where_librdkafka_murmur2_random_and_kafka_put_them() {
    const PARTITIONS: i32 = 7;
    let (_dir, broker) = start_broker();
    create_topic(&broker, "keys-rdkafka", PARTITIONS);
    create_topic(&broker, "keys-brook", PARTITIONS);
    let mut keys: Vec<String> = (0..60).map(|index| format!("user-{index}")).collect();
    keys.extend(KAFKA_VECTORS.iter().map(|(key, _)| (*key).to_owned()));
    let records: Vec<Record> = keys
        .iter()
        .map(|key| Record {
            key: Some(key.clone()),
            value: format!("value of {key}"),
            ..Record::default()
        })
        .collect();
    let rdkafka = produce(
        &broker,
        "keys-rdkafka",
        &records,
        &[("partitioner", "murmur2_random")],
    );
    let input: String = keys
        .iter()
        .map(|key| format!("{key}\tvalue of {key}\n"))
        .collect();
    let run = brook_produce(&broker, "keys-brook", &["--key-separator", "\t"], &input).ok();
    assert_eq!(
        run.lines()[0],
        "PARTITION  RECORDS  FIRST-OFFSET  LAST-OFFSET"
    );

    let mut placed = BTreeMap::new();
    for partition in 0..PARTITIONS {
        for set in batches(&broker, "keys-brook", partition) {
            for record in set.records {
                let key = text(record.key.as_ref());
                assert_eq!(text(record.value.as_ref()), format!("value of {key}"));
                assert!(placed.insert(key, partition).is_none(), "once each");
            }
        }
    }
    assert_eq!(placed.len(), keys.len());
    for key in &keys {
        assert_eq!(placed[key], rdkafka[key].0, "{key}: brook vs librdkafka");
    }
    // Kafka's own published hashes, independent of any client.
    for (key, positive_hash) in KAFKA_VECTORS {
        let expected = (positive_hash % i64::from(PARTITIONS)) as i32;
        assert_eq!(placed[key], expected, "{key}");
    }
}

#[test]
fn each_partitioner_places_unkeyed_records_as_kafka_does() {
    const PARTITIONS: i32 = 3;
    let (_dir, broker) = start_broker();
    for topic in [
        "round-robin",
        "round-robin-keyed",
        "sticky",
        "one-batch",
        "fixed",
    ] {
        create_topic(&broker, topic, PARTITIONS);
    }
    let lines = |count: usize, key: bool| -> String {
        (0..count)
            .map(|index| match key {
                true => format!("same-key:record-{index:02}\n"),
                false => format!("record-{index:02}\n"),
            })
            .collect()
    };

    // Round-robin: each record to the next partition, keyed or not.
    brook_produce(
        &broker,
        "round-robin",
        &["--partitioner", "round-robin"],
        &lines(30, false),
    )
    .ok();
    let spread = values_by_partition(&broker, "round-robin", PARTITIONS);
    assert_eq!(
        spread.iter().map(Vec::len).collect::<Vec<_>>(),
        [10, 10, 10]
    );
    assert_eq!(spread[1][..3], ["record-01", "record-04", "record-07"]);
    let args = ["--partitioner", "round-robin", "--key-separator", ":"];
    brook_produce(&broker, "round-robin-keyed", &args, &lines(30, true)).ok();
    let keyed = values_by_partition(&broker, "round-robin-keyed", PARTITIONS);
    assert_eq!(keyed.iter().map(Vec::len).collect::<Vec<_>>(), [10, 10, 10]);

    // The default for unkeyed records: sticky, so a batch's worth stays together.
    brook_produce(&broker, "one-batch", &[], &lines(20, false)).ok();
    let together = values_by_partition(&broker, "one-batch", PARTITIONS);
    let used: Vec<&Vec<String>> = together
        .iter()
        .filter(|values| !values.is_empty())
        .collect();
    assert_eq!(used.len(), 1, "one batch, one partition: {together:?}");
    assert_eq!(used[0].len(), 20);

    // Batches of about ten records (timestamps deltas may take a byte
    // more), never waiting on the input: each batch is whole on one
    // partition, and the next one goes to another.
    let args = [
        "--partitioner",
        "sticky",
        "--batch-size",
        "262",
        "--linger",
        "10s",
    ];
    brook_produce(&broker, "sticky", &args, &lines(40, false)).ok();
    let mut sticky: Vec<(usize, i32, usize)> = Vec::new();
    for partition in 0..PARTITIONS {
        for set in batches(&broker, "sticky", partition) {
            let indices: Vec<usize> = set
                .records
                .iter()
                .map(|record| text(record.value.as_ref())[7..].parse().unwrap())
                .collect();
            let first = indices[0];
            assert!(
                indices
                    .iter()
                    .enumerate()
                    .all(|(at, index)| *index == first + at),
                "a batch is a run of consecutive lines: {indices:?}"
            );
            sticky.push((first, partition, indices.len()));
        }
    }
    sticky.sort();
    assert!(sticky.len() >= 3, "{sticky:?}");
    assert_eq!(sticky.iter().map(|(_, _, count)| count).sum::<usize>(), 40);
    for pair in sticky.windows(2) {
        assert_eq!(pair[0].0 + pair[0].2, pair[1].0, "{sticky:?}");
        assert_ne!(pair[0].1, pair[1].1, "the next batch moves on: {sticky:?}");
    }

    // --partition wins over every partitioner and key.
    let args = ["--partition", "2", "--key-separator", ":"];
    let run = brook_produce(&broker, "fixed", &args, &lines(12, true)).ok();
    assert_eq!(
        run.lines()[1].split_whitespace().collect::<Vec<_>>(),
        ["2", "12", "0", "11"]
    );
    let fixed = values_by_partition(&broker, "fixed", PARTITIONS);
    assert_eq!(fixed.iter().map(Vec::len).collect::<Vec<_>>(), [0, 0, 12]);
}

const CODECS: [(&str, Compression); 5] = [
    ("none", Compression::None),
    ("gzip", Compression::Gzip),
    ("snappy", Compression::Snappy),
    ("lz4", Compression::Lz4),
    ("zstd", Compression::Zstd),
];

#[test]
fn every_codec_reads_back_with_its_keys_values_and_headers() {
    const RECORDS: usize = 50;
    let (_dir, broker) = start_broker();
    let input: String = (0..RECORDS)
        .map(|index| format!("key-{index}=value-{index}-{}\n", "x".repeat(index)))
        .collect();
    for (codec, _) in CODECS {
        let topic = format!("codec-{codec}");
        create_topic(&broker, &topic, 1);
        let args = [
            "--key-separator",
            "=",
            "--compression",
            codec,
            "--header",
            "trace=abc=1",
            "--header",
            "empty=",
        ];
        brook_produce(&broker, &topic, &args, &input).ok();
    }
    // Kafka's batch decoder: the codec in the attributes, every field back.
    for (codec, compression) in CODECS {
        let sets = batches(&broker, &format!("codec-{codec}"), 0);
        let records: Vec<_> = sets.iter().flat_map(|set| &set.records).collect();
        assert_eq!(records.len(), RECORDS, "{codec}");
        for set in &sets {
            assert_eq!(set.compression, compression, "{codec}");
        }
        for (index, record) in records.iter().enumerate() {
            assert_eq!(text(record.key.as_ref()), format!("key-{index}"));
            let value = format!("value-{index}-{}", "x".repeat(index));
            assert_eq!(text(record.value.as_ref()), value);
            let headers: Vec<(String, String)> = record
                .headers
                .iter()
                .map(|(key, value)| (key.to_string(), text(value.as_ref())))
                .collect();
            assert_eq!(
                headers,
                [
                    ("trace".into(), "abc=1".into()),
                    ("empty".into(), String::new())
                ]
            );
        }
    }
    // librdkafka reads them the same.
    let read =
        consume_with_librdkafka(&broker, &["none", "gzip", "snappy", "lz4", "zstd"], RECORDS);
    for (codec, records) in read {
        assert_eq!(records.len(), RECORDS, "{codec}");
        for (index, (key, value, headers)) in records.iter().enumerate() {
            assert_eq!(key, &format!("key-{index}"), "{codec}");
            assert_eq!(value, &format!("value-{index}-{}", "x".repeat(index)));
            assert_eq!(
                headers,
                &[
                    ("trace".into(), "abc=1".into()),
                    ("empty".into(), String::new())
                ]
            );
        }
    }
}

type Consumed = Vec<(String, String, Vec<(String, String)>)>;

/// Every record of `codec-<codec>` partition 0 for each codec, read by
/// librdkafka.
fn consume_with_librdkafka(
    broker: &Broker,
    codecs: &[&str],
    per_topic: usize,
) -> BTreeMap<String, Consumed> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("group.id", "produce-codecs")
        .set("enable.auto.commit", "false")
        .create()
        .expect("a consumer");
    let mut assignment = TopicPartitionList::new();
    for codec in codecs {
        assignment
            .add_partition_offset(&format!("codec-{codec}"), 0, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut read: BTreeMap<String, Consumed> = BTreeMap::new();
    let started = std::time::Instant::now();
    while read.values().map(Vec::len).sum::<usize>() < codecs.len() * per_topic {
        assert!(started.elapsed() < TIMEOUT, "consumed only {read:?}");
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = message.expect("a record");
        let as_text =
            |bytes: Option<&[u8]>| String::from_utf8(bytes.unwrap_or_default().to_vec()).unwrap();
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|header| (header.key.to_owned(), as_text(header.value)))
                    .collect()
            })
            .unwrap_or_default();
        let codec = message.topic().trim_start_matches("codec-").to_owned();
        read.entry(codec).or_default().push((
            as_text(message.key()),
            as_text(message.payload()),
            headers,
        ));
    }
    read
}

#[test]
fn idempotent_by_default_and_every_record_written_once() {
    const RECORDS: usize = 300;
    let (dir, broker) = start_broker();
    create_topic(&broker, "idempotent", 1);
    create_topic(&broker, "plain", 1);
    let input: String = (0..RECORDS)
        .map(|index| format!("record-{index:04}\n"))
        .collect();
    // Small batches, so sequences must run on across several.
    let file = dir.path().join("input.txt");
    std::fs::write(&file, &input).unwrap();
    let file = file.to_str().unwrap();
    brook_produce(
        &broker,
        "idempotent",
        &["--file", file, "--batch-size", "1KiB"],
        "",
    )
    .ok();

    let sets = batches(&broker, "idempotent", 0);
    assert!(sets.len() > 3, "several batches: {}", sets.len());
    let records: Vec<_> = sets.iter().flat_map(|set| &set.records).collect();
    let values: Vec<String> = records
        .iter()
        .map(|record| text(record.value.as_ref()))
        .collect();
    let expected: Vec<String> = (0..RECORDS)
        .map(|index| format!("record-{index:04}"))
        .collect();
    assert_eq!(values, expected, "each record once, in order");
    for (index, record) in records.iter().enumerate() {
        assert!(record.producer_id >= 0, "{record:?}");
        assert_eq!(record.producer_id, records[0].producer_id);
        assert_eq!(record.producer_epoch, 0);
        assert_eq!(
            record.sequence, index as i32,
            "sequences from 0, consecutive"
        );
        assert!(!record.transactional);
    }

    // --no-idempotence writes no producer id; acks 1 then is allowed.
    let args = ["--no-idempotence", "--acks", "1"];
    brook_produce(&broker, "plain", &args, "a\nb\n").ok();
    for set in batches(&broker, "plain", 0) {
        // The decoder gives base sequence + offset delta; the base is -1.
        let first = &set.records[0];
        assert_eq!((first.producer_id, first.sequence), (-1, -1));
    }
}

#[test]
fn json_summary_gives_each_partitions_records_and_offsets() {
    let (_dir, broker) = start_broker();
    create_topic(&broker, "summary", 2);
    let args = ["--partition", "1", "--format", "json"];
    let first = brook_produce(&broker, "summary", &args, "a\nb\nc\n").ok();
    assert_eq!(
        first.json(),
        [serde_json::json!({
            "topic": "summary", "partition": 1, "records": 3,
            "first_offset": 0, "last_offset": 2
        })]
    );
    let args = ["--partitioner", "round-robin", "--format", "json"];
    let second = brook_produce(&broker, "summary", &args, "d\ne\nf\n").ok();
    assert_eq!(
        second.json(),
        [
            serde_json::json!({
                "topic": "summary", "partition": 0, "records": 2,
                "first_offset": 0, "last_offset": 1
            }),
            serde_json::json!({
                "topic": "summary", "partition": 1, "records": 1,
                "first_offset": 3, "last_offset": 3
            }),
        ]
    );
    // acks=0: records counted, offsets unknown.
    let args = [
        "--acks",
        "0",
        "--no-idempotence",
        "--partition",
        "0",
        "--format",
        "json",
    ];
    let blind = brook_produce(&broker, "summary", &args, "g\n").ok();
    assert_eq!(
        blind.json(),
        [serde_json::json!({
            "topic": "summary", "partition": 0, "records": 1,
            "first_offset": null, "last_offset": null
        })]
    );
}

/// One line on stderr, `brook produce: …` containing `needle`; no panic.
fn one_line_error(run: &Run, needle: &str) {
    assert!(!run.status.success(), "should fail: {run:?}");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line on stderr: {run:?}");
    assert!(
        lines[0].starts_with("brook produce: ") && lines[0].contains(needle),
        "{needle:?} in {:?}",
        lines[0]
    );
    assert!(!run.stderr.contains("panicked"), "{run:?}");
}

#[test]
fn bad_input_and_unknown_topics_fail_with_one_clear_line() {
    let (_dir, broker) = start_broker();
    create_topic(&broker, "errors", 1);

    let run = brook_produce(&broker, "errors", &["--header", "oops"], "a\n");
    assert_eq!(run.status.code(), Some(1), "{run:?}");
    one_line_error(&run, "--header 'oops' has no '=' (expected KEY=VALUE)");

    let run = brook_produce(&broker, "no-such-topic", &[], "a\n");
    one_line_error(&run, "UNKNOWN_TOPIC_OR_PARTITION (3)");
    assert!(run.stderr.contains("no-such-topic"), "{run:?}");

    let run = brook_produce(&broker, "errors", &["--partition", "5"], "a\n");
    one_line_error(&run, "partition errors-5: UNKNOWN_TOPIC_OR_PARTITION (3)");

    let run = brook_produce(&broker, "errors", &["--acks", "1"], "a\n");
    one_line_error(&run, "--no-idempotence");

    // A line without the separator stops the input there, after the
    // lines before it were written (and summarized).
    let run = brook_produce(
        &broker,
        "errors",
        &["--key-separator", ":"],
        "k:1\nk:2\nnope\nk:3\n",
    );
    one_line_error(&run, "line 3 has no key separator ':'");
    assert_eq!(
        run.lines()[1].split_whitespace().collect::<Vec<_>>(),
        ["0", "2", "0", "1"]
    );
    assert_eq!(values_by_partition(&broker, "errors", 1), [["1", "2"]]);
}
