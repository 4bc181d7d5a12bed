//! Helpers shared by the storage tests: batches built with kafka-protocol's
//! encoder (not ours), and reads materialised into plain bytes.

#![allow(dead_code)]

use std::os::unix::fs::FileExt;
use std::path::Path;

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::log::config::LogConfig;
use brook_engine::types::{LeaderEpoch, Offset, TimestampMs};
use brook_shards::storage::{
    LogData, PartitionLog, ReadOptions, RecoveryHints, StorageError, Store, StoreOptions,
};

pub const EPOCH: LeaderEpoch = LeaderEpoch(0);

/// A batch of `count` records whose values are `value_bytes` long and whose
/// timestamps start at `timestamp`.
pub fn batch(count: usize, value_bytes: usize, timestamp: i64) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..count)
        .map(|i| {
            let value: Vec<u8> = (0..value_bytes)
                .map(|b| (b as u64 * 31 + i as u64 * 7 + timestamp as u64) as u8)
                .collect();
            NewRecord::value(value, TimestampMs(timestamp + i as i64))
        })
        .collect();
    encode_batch(&records, &BatchOptions::default())
}

/// An idempotent (or transactional) producer's batch of `records` records
/// stamped from `timestamp`, at epoch 0.
pub fn producer_records(
    producer_id: i64,
    sequence: i32,
    records: usize,
    timestamp: i64,
    transactional: bool,
) -> Vec<u8> {
    let records: Vec<NewRecord> = (0..records)
        .map(|i| {
            NewRecord::value(
                format!("p{producer_id}-{sequence}-{i}"),
                TimestampMs(timestamp + i as i64),
            )
        })
        .collect();
    encode_batch(
        &records,
        &BatchOptions {
            producer_id,
            producer_epoch: 0,
            base_sequence: sequence,
            transactional,
            ..BatchOptions::default()
        },
    )
}

/// A batch whose records carry exactly `timestamps`.
pub fn batch_with_timestamps(timestamps: &[i64], options: &BatchOptions) -> Vec<u8> {
    let records: Vec<NewRecord> = timestamps
        .iter()
        .map(|ts| NewRecord::value(ts.to_string(), TimestampMs(*ts)))
        .collect();
    encode_batch(&records, options)
}

/// What the log must hold for a batch appended at `base`: the producer's bytes
/// with the two broker-assigned fields written in (bytes 0..8 and 12..16).
pub fn placed(bytes: &[u8], base: Offset, epoch: LeaderEpoch) -> Vec<u8> {
    let mut placed = bytes.to_vec();
    placed[0..8].copy_from_slice(&base.0.to_be_bytes());
    placed[12..16].copy_from_slice(&epoch.0.to_be_bytes());
    placed
}

/// Compares byte strings without printing megabytes on failure.
#[track_caller]
pub fn assert_bytes_eq(actual: &[u8], expected: &[u8], context: &str) {
    if actual != expected {
        let first_difference = actual
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .unwrap_or(actual.len().min(expected.len()));
        panic!(
            "{context}: {} bytes read, {} expected, first difference at {first_difference}",
            actual.len(),
            expected.len()
        );
    }
}

/// Base offsets of the segments on disk, from the `.log` file names.
pub fn segment_bases(dir: &Path) -> Vec<Offset> {
    let mut bases: Vec<Offset> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".log")
                .and_then(|stem| stem.parse::<i64>().ok())
                .map(Offset)
        })
        .collect();
    bases.sort();
    bases
}

pub fn materialize(data: &LogData) -> Vec<u8> {
    match data {
        LogData::Empty => Vec::new(),
        LogData::Memory(pieces) => pieces
            .iter()
            .flat_map(|piece| piece.iter().copied())
            .collect(),
        LogData::File(range) => {
            let mut bytes = vec![0u8; range.len as usize];
            range
                .file
                .read_exact_at(&mut bytes, range.position)
                .expect("reading a file range");
            bytes
        }
    }
}

pub fn read_options(max_bytes: usize) -> ReadOptions {
    ReadOptions {
        max_bytes,
        max_offset: Offset(i64::MAX),
        allow_file_range: false,
    }
}

/// Every byte of the log from `from`, read in steps of `max_bytes`, once
/// every append so far is written (a read stops at the written end, and an
/// append returns before its bytes are written).
pub async fn read_all(
    log: &PartitionLog,
    from: Offset,
    max_bytes: usize,
    allow_file_range: bool,
) -> Result<Vec<u8>, StorageError> {
    log.wait_written(log.log_end_offset()).await?;
    let mut bytes = Vec::new();
    let mut offset = from;
    while offset < log.log_end_offset() {
        let outcome = log
            .read(
                offset,
                ReadOptions {
                    allow_file_range,
                    ..read_options(max_bytes)
                },
            )
            .await?;
        assert!(
            outcome.next_offset > offset,
            "a read below the log end makes progress"
        );
        bytes.extend(materialize(&outcome.data));
        offset = outcome.next_offset;
    }
    Ok(bytes)
}

pub async fn open(dir: &Path, config: LogConfig, hints: RecoveryHints) -> PartitionLog {
    PartitionLog::open(dir, config, hints, now_ms())
        .await
        .expect("opening the log")
}

pub fn clean() -> RecoveryHints {
    RecoveryHints {
        clean_shutdown: true,
        ..RecoveryHints::default()
    }
}

pub fn crashed() -> RecoveryHints {
    RecoveryHints::default()
}

pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

pub fn small_segments(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        ..LogConfig::default()
    }
}

/// Copies every file of `from` into a fresh `to`.
pub fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

/// Flushes `log` and moves its high watermark to its end, as the
/// replication of a partition with one replica would once that is durable:
/// these tests stand in for replication, which alone moves a log's HW.
pub async fn commit(log: &PartitionLog) {
    log.flush().await.unwrap();
    log.set_high_watermark(log.log_end_offset());
}

/// Milliseconds [`settle`] waits for rolled segments to be sealed.
const SETTLE_WAITS_MAX: usize = 10_000;

/// Waits until everything appended is durable and every rolled segment is
/// sealed: sealing (trimming and syncing a rolled segment's files, then
/// reading its index from disk) runs after the roll, so a test that looks
/// at a sealed segment's files must wait for it.
pub async fn settle(log: &PartitionLog) {
    commit(log).await;
    for _ in 0..SETTLE_WAITS_MAX {
        if log.recovery_point() == log.log_end_offset() {
            return;
        }
        glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
    }
    panic!("rolled segments were not sealed");
}

/// Opens shard `shard`'s store under `root`; also the options that open it
/// again (a restart).
pub async fn open_store(root: &Path, shard: u16) -> (StoreOptions, Store) {
    let options = StoreOptions::in_dir(root.to_owned(), shard).unwrap();
    let store = Store::open(options.clone()).await.unwrap();
    (options, store)
}
