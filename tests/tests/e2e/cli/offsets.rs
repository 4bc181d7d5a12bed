//! `brook offsets`: GetOffsetShell's `topic:partition:offset` lines for the
//! log end, the log start and a time, against records librdkafka wrote
//! with known timestamps.

use super::common::{Record, brook, create_topic, produce, start_broker};

const TOPIC: &str = "offsets-cli";
/// Record `i` of partition `p` has timestamp BASE + i * 1000.
const BASE: i64 = 1_796_032_800_000;

#[test]
fn offsets_at_the_end_the_start_and_a_time() {
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

    let latest = brook(&broker, &["offsets", TOPIC]).ok();
    assert_eq!(latest.lines(), ["offsets-cli:0:6", "offsets-cli:1:4"]);
    let earliest = brook(&broker, &["offsets", TOPIC, "--time", "-2"]).ok();
    assert_eq!(earliest.lines(), ["offsets-cli:0:0", "offsets-cli:1:0"]);
    // The first record at or after BASE+2500 is the fourth of each partition
    // (timestamps BASE+3000), and partition 1 has none at or after BASE+4500.
    let at = (BASE + 2500).to_string();
    let by_time = brook(&broker, &["offsets", TOPIC, "--time", &at]).ok();
    assert_eq!(by_time.lines(), ["offsets-cli:0:3", "offsets-cli:1:3"]);
    let later = (BASE + 4500).to_string();
    let none = brook(&broker, &["offsets", TOPIC, "--time", &later]).ok();
    assert_eq!(none.lines(), ["offsets-cli:0:5", "offsets-cli:1:-1"]);
    let date = brook(
        &broker,
        &["offsets", TOPIC, "--time", "2026-11-30T10:00:03Z"],
    )
    .ok();
    assert_eq!(date.lines(), by_time.lines());

    let json = brook(
        &broker,
        &["offsets", TOPIC, "--partitions", "1", "--format", "json"],
    )
    .ok();
    assert_eq!(
        json.json(),
        [serde_json::json!({"topic": TOPIC, "partition": 1, "offset": 4})]
    );
}
