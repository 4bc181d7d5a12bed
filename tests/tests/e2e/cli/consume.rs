//! `brook consume` against a real broker, with records written by
//! librdkafka: every codec printed exactly (template and JSON, headers
//! included), `--since` at the first record at or after a time, a group
//! that commits so the next run prints only new records (at-least-once and
//! `--commit-before`), `read_committed` without an aborted transaction, an
//! unknown topic as one line, and Ctrl-C committing before a clean exit.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use brook_tests::broker::Broker;
use brook_tests::deliveries::Deliveries;
use rdkafka::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

use super::common::{BROOK, Record, brook, create_topic, produce, start_broker, start_broker_with};

const TIMEOUT: Duration = Duration::from_secs(30);
/// A template printing where each record is and what it holds.
const PLACED: &str = "%p:%o:%k=%v\\n";

/// A broker whose groups form at once (Kafka waits 3 s for more members).
fn group_broker() -> (tempfile::TempDir, Broker) {
    start_broker_with(&["--set", "group.initial.rebalance.delay.ms=0"])
}

fn sorted(lines: Vec<&str>) -> Vec<String> {
    let mut lines: Vec<String> = lines.into_iter().map(str::to_owned).collect();
    lines.sort();
    lines
}

fn placed(deliveries: &HashMap<String, (i32, i64)>, value: impl Fn(&str) -> String) -> Vec<String> {
    let mut lines: Vec<String> = deliveries
        .iter()
        .map(|(key, (partition, offset))| format!("{partition}:{offset}:{key}={}", value(key)))
        .collect();
    lines.sort();
    lines
}

/// Produces `count` records (keys `k0…`, values `{prefix}-{i}`, the first
/// with two headers) over `partitions` with `codec`, as one batch per
/// partition; where each key landed.
fn produce_with_headers(
    broker: &Broker,
    topic: &str,
    partitions: i32,
    count: usize,
    prefix: &str,
    codec: &str,
) -> HashMap<String, (i32, i64)> {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("compression.codec", codec)
        .set("linger.ms", "50")
        .create_with_context(Deliveries::default())
        .unwrap_or_else(|error| panic!("a {codec} producer: {error}"));
    for index in 0..count {
        let key = format!("k{index}");
        let value = format!("{prefix}-{index}");
        let mut record = BaseRecord::to(topic)
            .key(&key)
            .payload(&value)
            .partition(index as i32 % partitions);
        if index == 0 {
            let headers = OwnedHeaders::new()
                .insert(Header {
                    key: "source",
                    value: Some("rdkafka"),
                })
                .insert(Header {
                    key: "empty",
                    value: None::<&str>,
                });
            record = record.headers(headers);
        }
        producer.send(record).map_err(|(error, _)| error).unwrap();
    }
    producer.flush(TIMEOUT).unwrap();
    let deliveries = producer.context();
    assert!(
        deliveries.errors.lock().unwrap().is_empty(),
        "{deliveries:?}"
    );
    deliveries.delivered.lock().unwrap().clone()
}

#[test]
fn every_codec_prints_exactly_what_librdkafka_wrote() {
    let (_dir, broker) = start_broker();
    for codec in ["none", "gzip", "snappy", "lz4", "zstd"] {
        let topic = format!("consume-{codec}");
        create_topic(&broker, &topic, 2);
        let delivered = produce_with_headers(&broker, &topic, 2, 6, codec, codec);
        let run = brook(
            &broker,
            &[
                "consume",
                &topic,
                "--from-beginning",
                "-n",
                "6",
                "--format",
                PLACED,
            ],
        )
        .ok();
        let expected = placed(&delivered, |key| format!("{codec}-{}", &key[1..]));
        assert_eq!(sorted(run.lines()), expected, "{codec}");

        let json = brook(
            &broker,
            &[
                "consume",
                &topic,
                "--from-beginning",
                "-n",
                "6",
                "--format",
                "json",
            ],
        )
        .ok();
        let records = json.json();
        assert_eq!(records.len(), 6, "{codec}: {json:?}");
        for record in &records {
            let key = record["key"].as_str().unwrap();
            let (partition, offset) = delivered[key];
            assert_eq!(record["topic"], topic.as_str());
            assert_eq!(record["partition"], partition);
            assert_eq!(record["offset"], offset);
            assert_eq!(record["value"], format!("{codec}-{}", &key[1..]));
            assert!(record["timestamp"].as_i64().unwrap() > 0);
            let headers = if key == "k0" {
                serde_json::json!({"source": "rdkafka", "empty": null})
            } else {
                serde_json::json!({})
            };
            assert_eq!(record["headers"], headers, "{codec} {key}");
        }
    }
    // The headers in a template, and the default format's value per line.
    let (partition, offset) = (0.to_string(), 0.to_string());
    let one = [
        "consume",
        "consume-lz4",
        "--partition",
        &partition,
        "--offset",
        &offset,
    ];
    let headers = brook(
        &broker,
        &[&one[..], &["-n", "1", "--format", "%h|%K|%S\\n"]].concat(),
    );
    assert_eq!(headers.ok().lines(), ["source=rdkafka,empty=|2|5"]);
    let table = brook(&broker, &[&one[..], &["-n", "1", "--print-key"]].concat());
    assert_eq!(table.ok().lines(), ["k0\tlz4-0"]);
}

#[test]
fn since_starts_at_the_first_record_at_or_after_the_time() {
    /// 2026-11-30T10:00:00Z; record `i` of a partition is BASE + i s.
    const BASE: i64 = 1_796_032_800_000;
    const TOPIC: &str = "consume-since";
    let (_dir, broker) = start_broker();
    create_topic(&broker, TOPIC, 2);
    let records: Vec<Record> = (0..10)
        .map(|index| Record {
            key: Some(format!("k{index}")),
            value: format!("v{index}"),
            partition: Some(if index < 6 { 0 } else { 1 }),
            timestamp: Some(BASE + (index % 6) * 1000),
        })
        .collect();
    produce(&broker, TOPIC, &records, &[]);
    let at_or_after = |since: &str, count: &str| {
        let args = [
            "consume",
            TOPIC,
            "--since",
            since,
            "-n",
            count,
            "--format",
            "%p:%o:%T\\n",
        ];
        sorted(brook(&broker, &args).ok().lines())
    };
    // Partition 0 holds BASE+0..5 s, partition 1 BASE+0..3 s: from +2.5 s,
    // offsets 3-5 of partition 0 and 3 of partition 1.
    let expected = [
        format!("0:3:{}", BASE + 3000),
        format!("0:4:{}", BASE + 4000),
        format!("0:5:{}", BASE + 5000),
        format!("1:3:{}", BASE + 3000),
    ];
    assert_eq!(at_or_after(&(BASE + 2500).to_string(), "4"), expected);
    // Exactly at a record's time includes it; a date-time says the same.
    assert_eq!(at_or_after(&(BASE + 3000).to_string(), "4"), expected);
    assert_eq!(at_or_after("2026-11-30T10:00:03Z", "4"), expected);
    // After every record: each partition starts at its end, nothing prints.
    let later = (BASE + 60_000).to_string();
    let args = ["consume", TOPIC, "--since", &later, "--idle-exit", "700ms"];
    assert_eq!(brook(&broker, &args).ok().lines(), Vec::<&str>::new());
}

#[test]
fn a_group_commits_so_the_next_run_prints_only_new_records() {
    const TOPIC: &str = "consume-group";
    let (_dir, broker) = group_broker();
    create_topic(&broker, TOPIC, 3);
    let batch = |from: usize, to: usize, partition: Option<i32>| -> Vec<Record> {
        (from..to)
            .map(|index| Record {
                key: Some(format!("k{index}")),
                value: format!("v{index}"),
                partition,
                timestamp: None,
            })
            .collect()
    };
    let run = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["consume", TOPIC, "--group", "readers", "--from-beginning"];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--format", "%v\\n"]);
        sorted(brook(&broker, &args).ok().lines())
    };
    let values = |from: usize, to: usize| -> Vec<String> {
        let mut values: Vec<String> = (from..to).map(|index| format!("v{index}")).collect();
        values.sort();
        values
    };

    produce(&broker, TOPIC, &batch(0, 6, None), &[]);
    // A new group's first join waits out the broker's initial rebalance
    // delay (3 s), longer than --idle-exit: idleness counts from the join.
    assert_eq!(run(&["--idle-exit", "1s"]), values(0, 6));
    produce(&broker, TOPIC, &batch(6, 9, None), &[]);
    assert_eq!(run(&["-n", "3"]), values(6, 9));
    // At-most-once, one record of two in one batch: the commit covers only
    // the record printed, so the next run prints the other.
    produce(&broker, TOPIC, &batch(9, 11, Some(1)), &[]);
    assert_eq!(run(&["--commit-before", "-n", "1"]), values(9, 10));
    assert_eq!(run(&["--idle-exit", "1s"]), values(10, 11));
}

/// A librdkafka producer of `transactional_id`, its transactions initialised.
fn transactional_producer(broker: &Broker, transactional_id: &str) -> BaseProducer<Deliveries> {
    let producer: BaseProducer<Deliveries> = ClientConfig::new()
        .set("bootstrap.servers", &broker.address)
        .set("transactional.id", transactional_id)
        .set("linger.ms", "2")
        .create_with_context(Deliveries::default())
        .expect("a transactional producer");
    producer
        .init_transactions(TIMEOUT)
        .expect("init_transactions");
    producer
}

#[test]
fn read_committed_does_not_print_an_aborted_transaction() {
    const TOPIC: &str = "consume-txn";
    let (_dir, broker) = start_broker();
    create_topic(&broker, TOPIC, 1);
    let producer = transactional_producer(&broker, "consume-cli");
    for (prefix, commit) in [("aborted", false), ("committed", true)] {
        producer.begin_transaction().unwrap();
        for index in 0..3 {
            let value = format!("{prefix}-{index}");
            let record = BaseRecord::<str, str>::to(TOPIC).payload(&value);
            producer.send(record).map_err(|(error, _)| error).unwrap();
        }
        producer.flush(TIMEOUT).unwrap();
        if commit {
            producer.commit_transaction(TIMEOUT).expect("commit");
        } else {
            producer.abort_transaction(TIMEOUT).expect("abort");
        }
    }
    assert!(producer.context().errors.lock().unwrap().is_empty());

    let committed = brook(
        &broker,
        &[
            "consume",
            TOPIC,
            "--from-beginning",
            "--isolation",
            "read_committed",
            "--idle-exit",
            "1s",
        ],
    )
    .ok();
    assert_eq!(
        committed.lines(),
        ["committed-0", "committed-1", "committed-2"]
    );
    // Uncommitted reads see both transactions' records (never the markers).
    let everything = brook(&broker, &["consume", TOPIC, "--from-beginning", "-n", "6"]).ok();
    assert_eq!(
        everything.lines(),
        [
            "aborted-0",
            "aborted-1",
            "aborted-2",
            "committed-0",
            "committed-1",
            "committed-2"
        ]
    );
}

/// A read_committed consumer starting at the end starts at the last stable
/// offset, as Kafka's does: the records of a transaction open when it
/// starts are printed once the transaction commits.
#[test]
fn read_committed_starts_at_the_last_stable_offset() {
    const TOPIC: &str = "consume-lso";
    let (_dir, broker) = start_broker();
    create_topic(&broker, TOPIC, 1);
    let producer = transactional_producer(&broker, "consume-lso");
    producer.begin_transaction().unwrap();
    for index in 0..3 {
        let value = format!("open-{index}");
        let record = BaseRecord::<str, str>::to(TOPIC).payload(&value);
        producer.send(record).map_err(|(error, _)| error).unwrap();
    }
    producer.flush(TIMEOUT).unwrap();
    let args = [
        "consume",
        TOPIC,
        "--isolation",
        "read_committed",
        "--idle-exit",
        "4s",
    ];
    let printed = std::thread::scope(|scope| {
        let consumer = scope.spawn(|| brook(&broker, &args).ok());
        // Commit only once the consumer fetches (so it chose where to
        // start while the transaction was open); the producer never
        // fetches.
        let metrics = broker.metrics_address().expect("the broker serves metrics");
        brook_tests::scrape::wait_for(metrics, TIMEOUT, "the consumer's first fetch", |text| {
            brook_tests::scrape::summed(text, "brook_requests_total", "api=\"Fetch\"") >= 1.0
        });
        producer.commit_transaction(TIMEOUT).expect("commit");
        consumer.join().unwrap()
    });
    assert_eq!(printed.lines(), ["open-0", "open-1", "open-2"]);
}

#[test]
fn an_unknown_topic_fails_with_one_line() {
    let (_dir, broker) = start_broker();
    let run = brook(&broker, &["consume", "no-such-topic", "--from-beginning"]).failed();
    let stderr: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(stderr.len(), 1, "{run:?}");
    assert!(stderr[0].starts_with("brook consume: "), "{run:?}");
    assert!(stderr[0].contains("UNKNOWN_TOPIC_OR_PARTITION"), "{run:?}");
    // Asking did not create it.
    let again = brook(&broker, &["consume", "no-such-topic"]).failed();
    assert!(
        again.stderr.contains("UNKNOWN_TOPIC_OR_PARTITION"),
        "{again:?}"
    );
    let bad_format = brook(&broker, &["consume", "no-such-topic", "--format", "%q"]).failed();
    assert!(
        bad_format.stderr.contains("unknown placeholder %q"),
        "{bad_format:?}"
    );
}

/// Kills the process if the test fails before it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn ctrl_c_commits_what_was_printed_and_exits_zero() {
    const TOPIC: &str = "consume-sigint";
    const GROUP: &str = "interrupted";
    let (_dir, broker) = group_broker();
    create_topic(&broker, TOPIC, 2);
    let records: Vec<Record> = (0..5)
        .map(|index| Record {
            key: Some(format!("k{index}")),
            value: format!("v{index}"),
            partition: Some(index % 2),
            timestamp: None,
        })
        .collect();
    let delivered = produce(&broker, TOPIC, &records, &[]);

    let child = Command::new(BROOK)
        .args([
            "consume",
            TOPIC,
            "--group",
            GROUP,
            "--from-beginning",
            "--format",
            "%v\\n",
        ])
        .env("BROOK_BROKERS", &broker.address)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("brook consume starts");
    let mut running = Running(child);
    let stdout = running.0.stdout.take().unwrap();
    let (lines, received) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let mut printed = Vec::new();
    while printed.len() < records.len() {
        let line = received
            .recv_timeout(TIMEOUT)
            .expect("a record within the timeout");
        printed.push(line);
    }
    // SAFETY: kill(2) on the child's pid, which is still ours to signal.
    let signalled = unsafe { libc::kill(running.0.id() as libc::pid_t, libc::SIGINT) };
    assert_eq!(signalled, 0);
    let deadline = std::time::Instant::now() + TIMEOUT;
    let status = loop {
        if let Some(status) = running.0.try_wait().unwrap() {
            break status;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "brook consume ignored SIGINT"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(running.0.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(status.success(), "{status:?}: {stderr}");
    printed.sort();
    assert_eq!(printed, ["v0", "v1", "v2", "v3", "v4"]);

    // The group's offsets are each partition's end: the next record of each.
    let mut ends: BTreeMap<i32, i64> = BTreeMap::new();
    for (partition, offset) in delivered.values() {
        let end = ends.entry(*partition).or_default();
        *end = (*end).max(offset + 1);
    }
    let mut stream = brook_tests::raw::connect(&broker);
    let (error, committed) =
        brook_tests::groups::fetch_offsets(&mut stream, 8, GROUP, TOPIC, &[0, 1]);
    assert_eq!(error, None);
    let committed: BTreeMap<i32, i64> = committed
        .iter()
        .map(|fetched| (fetched.partition, fetched.offset))
        .collect();
    assert_eq!(committed, ends);
}
