//! Acceptance 5 of the storage engine: the `.log`, `.index` and `.timeindex`
//! bytes are Kafka's, checked against bytes built by hand from Kafka's record
//! batch and index specifications (not with Brook's or kafka-protocol's
//! encoders); and a partition directory laid out by hand as Kafka writes it
//! opens and reads back.

use std::path::Path;

use brook_engine::log::config::LogConfig;
use brook_engine::types::{LeaderEpoch, Offset, TimestampMs};
use brook_shards::runtime::block_on;

use crate::common::*;

fn varint(value: i64, out: &mut Vec<u8>) {
    let mut zigzag = ((value << 1) ^ (value >> 63)) as u64;
    while zigzag >= 0x80 {
        out.push((zigzag as u8 & 0x7f) | 0x80);
        zigzag >>= 7;
    }
    out.push(zigzag as u8);
}

/// A v2 record: length, attributes, timestamp delta, offset delta, key
/// (null), value, no headers.
fn record(offset_delta: i64, timestamp_delta: i64, value: &[u8]) -> Vec<u8> {
    let mut body = vec![0u8];
    varint(timestamp_delta, &mut body);
    varint(offset_delta, &mut body);
    varint(-1, &mut body);
    varint(value.len() as i64, &mut body);
    body.extend_from_slice(value);
    varint(0, &mut body);
    let mut record = Vec::new();
    varint(body.len() as i64, &mut record);
    record.extend(body);
    record
}

/// A v2 record batch as Kafka's `DefaultRecordBatch` lays it out.
fn kafka_batch(base_offset: i64, epoch: i32, timestamps: &[i64], value_bytes: usize) -> Vec<u8> {
    let base_timestamp = timestamps[0];
    let mut after_crc = Vec::new();
    after_crc.extend_from_slice(&0i16.to_be_bytes()); // attributes
    after_crc.extend_from_slice(&(timestamps.len() as i32 - 1).to_be_bytes()); // lastOffsetDelta
    after_crc.extend_from_slice(&base_timestamp.to_be_bytes());
    after_crc.extend_from_slice(&timestamps.iter().max().unwrap().to_be_bytes());
    after_crc.extend_from_slice(&(-1i64).to_be_bytes()); // producerId
    after_crc.extend_from_slice(&(-1i16).to_be_bytes()); // producerEpoch
    after_crc.extend_from_slice(&(-1i32).to_be_bytes()); // baseSequence
    after_crc.extend_from_slice(&(timestamps.len() as i32).to_be_bytes());
    for (i, timestamp) in timestamps.iter().enumerate() {
        after_crc.extend(record(
            i as i64,
            timestamp - base_timestamp,
            &vec![b'x'; value_bytes],
        ));
    }
    let mut batch = Vec::new();
    batch.extend_from_slice(&base_offset.to_be_bytes());
    batch.extend_from_slice(&((4 + 1 + 4 + after_crc.len()) as i32).to_be_bytes());
    batch.extend_from_slice(&epoch.to_be_bytes());
    batch.push(2);
    batch.extend_from_slice(&crc32c::crc32c(&after_crc).to_be_bytes());
    batch.extend(after_crc);
    batch
}

fn offset_entry(relative_offset: u32, position: u32) -> Vec<u8> {
    [relative_offset.to_be_bytes(), position.to_be_bytes()].concat()
}

fn time_entry(timestamp: i64, relative_offset: u32) -> Vec<u8> {
    [
        &timestamp.to_be_bytes()[..],
        &relative_offset.to_be_bytes()[..],
    ]
    .concat()
}

fn file(dir: &Path, base: i64, extension: &str) -> Vec<u8> {
    std::fs::read(dir.join(format!("{base:020}.{extension}"))).unwrap()
}

/// Three producer batches (epoch -1, base offset 0): two records at 1000, one
/// at 2000, one at 2500. The first is large enough that only the second
/// crosses `index.interval.bytes = size(first) - 1`.
fn produced() -> [Vec<u8>; 4] {
    [
        kafka_batch(0, -1, &[1000, 1000], 60),
        kafka_batch(0, -1, &[2000], 4),
        kafka_batch(0, -1, &[2500], 4),
        kafka_batch(0, -1, &[3000], 4),
    ]
}

fn stored() -> [Vec<u8>; 4] {
    [
        kafka_batch(0, 0, &[1000, 1000], 60),
        kafka_batch(2, 0, &[2000], 4),
        kafka_batch(3, 0, &[2500], 4),
        kafka_batch(4, 0, &[3000], 4),
    ]
}

#[test]
fn segment_files_are_byte_for_byte_kafkas() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("format-0");
    block_on(async move {
        let [b1, b2, b3, b4] = produced();
        let [s1, s2, s3, s4] = stored();
        let config = LogConfig {
            index_interval_bytes: b1.len() as u64 - 1,
            ..LogConfig::default()
        };
        let log = open(&dir, config.clone(), crashed()).await;
        for batch in [&b1, &b2, &b3] {
            log.append(batch, LeaderEpoch(0), now_ms()).await.unwrap();
        }
        log.close().await.unwrap();
        assert_eq!(
            file(&dir, 0, "log"),
            [s1.clone(), s2.clone(), s3.clone()].concat()
        );
        assert_eq!(file(&dir, 0, "index"), offset_entry(2, s1.len() as u32));
        assert_eq!(file(&dir, 0, "timeindex"), time_entry(2000, 2));

        // A fourth batch that does not fit rolls the segment: sealing appends
        // the maximum timestamp (2500 at offset 3) to the time index.
        let segment_bytes = (s1.len() + s2.len() + s3.len()) as u64;
        let log = open(
            &dir,
            LogConfig {
                segment_bytes,
                ..config
            },
            clean(),
        )
        .await;
        log.append(&b4, LeaderEpoch(0), now_ms()).await.unwrap();
        log.close().await.unwrap();
        assert_eq!(
            file(&dir, 0, "timeindex"),
            [time_entry(2000, 2), time_entry(2500, 3)].concat()
        );
        assert_eq!(file(&dir, 0, "index"), offset_entry(2, s1.len() as u32));
        assert_eq!(file(&dir, 4, "log"), s4);
        assert!(file(&dir, 4, "index").is_empty() && file(&dir, 4, "timeindex").is_empty());
        assert_eq!(
            std::fs::read_to_string(dir.join("leader-epoch-checkpoint")).unwrap(),
            "0\n1\n0 0\n"
        );
    });
}

#[test]
fn a_partition_laid_out_by_kafka_opens_and_reads() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("kafka-0");
    std::fs::create_dir_all(&dir).unwrap();
    let [s1, s2, s3, s4] = stored();
    let write = |base: i64, extension: &str, bytes: Vec<u8>| {
        std::fs::write(dir.join(format!("{base:020}.{extension}")), bytes).unwrap()
    };
    write(0, "log", [s1.clone(), s2.clone(), s3.clone()].concat());
    write(0, "index", offset_entry(2, s1.len() as u32));
    write(
        0,
        "timeindex",
        [time_entry(2000, 2), time_entry(2500, 3)].concat(),
    );
    write(4, "log", s4.clone());
    write(4, "index", Vec::new());
    write(4, "timeindex", Vec::new());
    std::fs::write(dir.join("leader-epoch-checkpoint"), "0\n1\n0 0\n").unwrap();
    let all = [s1, s2, s3, s4].concat();
    block_on(async move {
        for hints in [clean(), crashed()] {
            let log = open(
                &dir,
                LogConfig {
                    index_interval_bytes: 100,
                    ..LogConfig::default()
                },
                hints,
            )
            .await;
            assert_eq!(log.log_end_offset(), Offset(5));
            assert_bytes_eq(
                &read_all(&log, Offset(0), 1 << 20, false).await.unwrap(),
                &all,
                "Kafka's log",
            );
            assert_bytes_eq(
                &read_all(&log, Offset(3), 1, true).await.unwrap(),
                &all[all.len() - 2 * stored()[3].len()..],
                "from offset 3",
            );
            for (target, expected) in [
                (0, Some(0)),
                (1000, Some(0)),
                (1001, Some(2)),
                (2200, Some(3)),
                (2600, Some(4)),
                (3001, None),
            ] {
                let found = log.offset_for_timestamp(TimestampMs(target)).await.unwrap();
                assert_eq!(
                    found.map(|stamp| stamp.offset.0),
                    expected,
                    "timestamp {target}"
                );
            }
            log.close().await.unwrap();
        }
    });
}
