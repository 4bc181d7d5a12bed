//! Log compaction (S7, `cleanup.policy=compact`) on real files: a cleaning
//! pass keeps every key's latest value at its original offset, shrinks the
//! log, removes tombstones once `delete.retention.ms` has passed since the
//! pass that first kept them, and leaves reads by offset and by time
//! matching a linear scan. A crash in the middle of a segment swap is
//! finished or undone when the log opens again.

use std::collections::BTreeMap;
use std::path::Path;

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::log::config::{CleanupPolicy, DirtyRatio, LogConfig};
use brook_engine::types::{Offset, TimestampMs, TopicPartition};
use brook_shards::runtime::block_on;
use brook_shards::storage::{CleanOutcome, PartitionLog, ReadOptions, StorageError, Store};
use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

use crate::common::*;

const MAP_BYTES: usize = 16 << 20;
const DAY_MS: i64 = 86_400_000;
/// Full reads a reader makes while it waits for a pass to end.
const READS_DURING_PASS_MAX: usize = 10_000;

/// One record as a consumer sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Seen {
    offset: i64,
    key: String,
    value: Option<String>,
    timestamp: i64,
}

fn compacted(segment_bytes: u64) -> LogConfig {
    LogConfig {
        segment_bytes,
        cleanup_policy: CleanupPolicy::Compact,
        min_cleanable_dirty_ratio: DirtyRatio::new(0.01).unwrap(),
        ..LogConfig::default()
    }
}

/// A batch of `(key, value)` records; `None` is a tombstone.
fn keyed(records: &[(String, Option<String>)], timestamp: i64) -> Vec<u8> {
    let records: Vec<NewRecord> = records
        .iter()
        .map(|(key, value)| NewRecord {
            key: Some(Bytes::from(key.clone())),
            value: value.clone().map(Bytes::from),
            timestamp: TimestampMs(timestamp),
            headers: Vec::new(),
        })
        .collect();
    encode_batch(&records, &BatchOptions::default())
}

/// Every record of `bytes` (whole batches), decoded by kafka-protocol.
fn decode(bytes: &[u8]) -> Vec<Seen> {
    let mut buffer = Bytes::copy_from_slice(bytes);
    let sets = RecordBatchDecoder::decode_all(&mut buffer).expect("valid batches");
    let text = |bytes: &Option<Bytes>| {
        bytes
            .as_ref()
            .map(|bytes| String::from_utf8(bytes.to_vec()).unwrap())
    };
    sets.iter()
        .flat_map(|set| set.records.iter())
        .map(|record| Seen {
            offset: record.offset,
            key: text(&record.key).expect("compacted records have keys"),
            value: text(&record.value),
            timestamp: record.timestamp,
        })
        .collect()
}

async fn consume(log: &PartitionLog) -> Vec<Seen> {
    let bytes = read_all(log, log.log_start_offset(), 64 << 10, true)
        .await
        .unwrap();
    decode(&bytes)
}

/// Writes `rounds` values of each of `keys` keys, in batches of `per_batch`
/// records, then `tombstones` tombstones for the first keys. Returns every
/// record written, in offset order.
async fn overwrite(
    log: &PartitionLog,
    keys: usize,
    rounds: usize,
    per_batch: usize,
    tombstones: usize,
) -> Vec<Seen> {
    let mut written = Vec::new();
    let mut pending = Vec::new();
    let start = now_ms();
    let total = keys * rounds;
    for index in 0..total + tombstones {
        let key = format!("key-{:03}", index % keys);
        let value = (index < total).then(|| format!("value-{index}-{}", "x".repeat(100)));
        pending.push((key, value));
        if pending.len() == per_batch || index + 1 == total + tombstones {
            // Each batch a millisecond after the previous one.
            let timestamp = start + written.len() as i64;
            let info = log
                .append(&keyed(&pending, timestamp), EPOCH, timestamp)
                .await
                .unwrap();
            for (delta, (key, value)) in pending.drain(..).enumerate() {
                written.push(Seen {
                    offset: info.base_offset.0 + delta as i64,
                    key,
                    value,
                    timestamp,
                });
            }
        }
    }
    settle(log).await;
    written
}

/// Each key's last record in `written`.
fn latest(written: &[Seen]) -> BTreeMap<String, Seen> {
    written
        .iter()
        .map(|seen| (seen.key.clone(), seen.clone()))
        .collect()
}

async fn clean_pass(log: &PartitionLog, checkpoint: Option<Offset>, now_ms: i64) -> CleanOutcome {
    let plan = log.cleanable(checkpoint, now_ms).await.unwrap().unwrap();
    log.clean(&plan, MAP_BYTES, now_ms).await.unwrap().unwrap()
}

/// Records the cleaning left (everything read back), checked against what
/// was written: offsets increase, every record is one that was written at
/// that offset, and every key's latest record is there unless it is a
/// tombstone that `tombstones_gone` says may be gone.
fn check_survivors(seen: &[Seen], written: &[Seen], tombstones_gone: bool) {
    assert!(seen.windows(2).all(|pair| pair[0].offset < pair[1].offset));
    let by_offset: BTreeMap<i64, &Seen> = written.iter().map(|seen| (seen.offset, seen)).collect();
    for record in seen {
        assert_eq!(
            Some(&record),
            by_offset.get(&record.offset),
            "kept as written"
        );
    }
    for last in latest(written).values() {
        let expected = !(tombstones_gone && last.value.is_none());
        assert_eq!(seen.contains(last), expected, "latest of {}", last.key);
    }
}

#[test]
fn cleaning_keeps_the_latest_value_of_every_key_at_its_offset() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("compact-0");
    block_on(async move {
        let log = open(&dir, compacted(8 << 10), crashed()).await;
        let written = overwrite(&log, 20, 50, 5, 0).await;
        let (size_before, end) = (log.size_bytes(), log.log_end_offset());
        let outcome = clean_pass(&log, None, now_ms()).await;
        assert!(outcome.completed);
        assert!(
            outcome.bytes_after * 5 < outcome.bytes_before,
            "{outcome:?}"
        );
        assert!(log.size_bytes() * 3 < size_before, "the log shrank");
        assert_eq!(log.log_end_offset(), end, "offsets are never reused");
        assert_eq!(
            outcome.end_offset,
            segment_bases(&dir).last().copied().unwrap()
        );
        let seen = consume(&log).await;
        check_survivors(&seen, &written, false);
        // At most the active segment's records besides one per key.
        let active: Vec<&Seen> = seen
            .iter()
            .filter(|s| Offset(s.offset) >= outcome.end_offset)
            .collect();
        assert!(
            seen.len() <= 20 + active.len(),
            "{} records left",
            seen.len()
        );
        // A second pass over a clean log finds nothing to do.
        let plan = log
            .cleanable(Some(outcome.end_offset), now_ms())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(plan.cleanable_bytes, 0);
        log.close().await.unwrap();
    });
}

#[test]
fn reads_by_offset_and_time_match_a_linear_scan_after_cleaning() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("lookups-0");
    block_on(async move {
        let config = LogConfig {
            index_interval_bytes: 512,
            ..compacted(16 << 10)
        };
        let log = open(&dir, config, crashed()).await;
        overwrite(&log, 30, 40, 3, 0).await;
        clean_pass(&log, None, now_ms()).await;
        let bytes = read_all(&log, log.log_start_offset(), 1 << 20, false)
            .await
            .unwrap();
        let batches = batch_ranges(&bytes);
        for offset in log.log_start_offset().0..log.log_end_offset().0 {
            // The first batch ending at or after the offset: the next one
            // kept when the offset itself was compacted away.
            let expected = batches
                .iter()
                .find(|(_, last)| *last >= offset)
                .map(|(first, _)| *first);
            for allow_file_range in [false, true] {
                let options = ReadOptions {
                    allow_file_range,
                    ..read_options(1)
                };
                let outcome = log.read(Offset(offset), options).await.unwrap();
                let read = batch_ranges(&materialize(&outcome.data));
                assert_eq!(
                    read.first().map(|(first, _)| *first),
                    expected,
                    "offset {offset}"
                );
            }
        }
        let seen = decode(&bytes);
        for record in seen.iter().step_by(7) {
            let found = log
                .offset_for_timestamp(TimestampMs(record.timestamp))
                .await
                .unwrap();
            let first = seen
                .iter()
                .find(|s| s.timestamp >= record.timestamp)
                .unwrap();
            assert_eq!(found.map(|stamp| stamp.offset.0), Some(first.offset));
        }
        log.close().await.unwrap();
    });
}

/// The record count of each batch of `bytes`.
fn batch_counts(bytes: &[u8]) -> Vec<i32> {
    let mut counts = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let length = i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
        counts.push(i32::from_be_bytes(rest[57..61].try_into().unwrap()));
        rest = &rest[12 + length..];
    }
    counts
}

/// `(base offset, last offset)` of each batch of `bytes`.
fn batch_ranges(bytes: &[u8]) -> Vec<(i64, i64)> {
    let mut ranges = Vec::new();
    let mut rest = bytes;
    while !rest.is_empty() {
        let base = i64::from_be_bytes(rest[0..8].try_into().unwrap());
        let length = i32::from_be_bytes(rest[8..12].try_into().unwrap()) as usize;
        let delta = i32::from_be_bytes(rest[23..27].try_into().unwrap());
        ranges.push((base, base + i64::from(delta)));
        rest = &rest[12 + length..];
    }
    ranges
}

/// Readers go on during a pass: each read, whether it got its batches
/// before, during or after a swap, returns records exactly as written, and
/// every key's latest value stays readable throughout.
#[test]
fn reads_during_a_cleaning_pass_see_whole_consistent_batches() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("concurrent-0");
    block_on(async move {
        let log = open(&dir, compacted(8 << 10), crashed()).await;
        let written = overwrite(&log, 25, 40, 3, 0).await;
        let segments_before = log.segment_count();
        let reader = {
            let (log, written) = (log.clone(), written.clone());
            glommio::spawn_local(async move {
                let mut reads = 0;
                let mut done = false;
                while !done {
                    // The last full read starts after the pass has ended.
                    done = log.size_bytes() * 4 < (segments_before as u64) * (8 << 10)
                        || reads > READS_DURING_PASS_MAX;
                    for allow_file_range in [false, true] {
                        let bytes =
                            read_all(&log, log.log_start_offset(), 4 << 10, allow_file_range)
                                .await
                                .unwrap();
                        check_survivors(&decode(&bytes), &written, false);
                        reads += 1;
                    }
                }
                reads
            })
        };
        let outcome = clean_pass(&log, None, now_ms()).await;
        assert!(outcome.completed);
        assert!(reader.await > 2, "reads ran alongside the pass");
        log.close().await.unwrap();
    });
}

#[test]
fn tombstones_go_once_delete_retention_has_passed_since_the_first_pass() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("tombstones-0");
    block_on(async move {
        let log = open(&dir, compacted(4 << 10), crashed()).await;
        let mut written = overwrite(&log, 10, 10, 4, 4).await;
        // More writes so the tombstones lie in sealed segments.
        written.extend(overwrite_keys(&log, 20..30, 30).await);
        let now = now_ms();
        clean_pass(&log, None, now).await;
        check_survivors(&consume(&log).await, &written, false);
        // A day less a millisecond later they are still there...
        clean_pass(&log, None, now + DAY_MS - 1).await;
        check_survivors(&consume(&log).await, &written, false);
        // ...and a day later they are gone, with every older value of their keys.
        clean_pass(&log, None, now + DAY_MS).await;
        let seen = consume(&log).await;
        check_survivors(&seen, &written, true);
        for key in (0..4).map(|key| format!("key-{key:03}")) {
            assert!(!seen.iter().any(|s| s.key == key), "{key} was deleted");
        }
        log.close().await.unwrap();
    });
}

/// `count` more values of the keys `range`, one batch each.
async fn overwrite_keys(
    log: &PartitionLog,
    range: std::ops::Range<usize>,
    count: usize,
) -> Vec<Seen> {
    let mut written = Vec::new();
    let timestamp = now_ms();
    for index in 0..count {
        let key = format!("key-{:03}", range.start + index % range.len());
        let value = Some(format!("later-{index}-{}", "y".repeat(200)));
        let info = log
            .append(
                &keyed(&[(key.clone(), value.clone())], timestamp),
                EPOCH,
                timestamp,
            )
            .await
            .unwrap();
        written.push(Seen {
            offset: info.base_offset.0,
            key,
            value,
            timestamp,
        });
    }
    settle(log).await;
    written
}

#[test]
fn a_compacted_topic_refuses_records_without_a_key() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("keys-0");
    block_on(async move {
        let log = open(&dir, compacted(1 << 20), crashed()).await;
        let error = log
            .append(&batch(3, 10, now_ms()), EPOCH, now_ms())
            .await
            .unwrap_err();
        assert!(
            matches!(error, StorageError::RecordWithoutKey { record_index: 0 }),
            "{error:?}"
        );
        assert_eq!(log.log_end_offset(), Offset(0), "nothing appended");
        let keyed = keyed(
            &[("k".into(), Some("v".into())), ("k".into(), None)],
            now_ms(),
        );
        log.append(&keyed, EPOCH, now_ms()).await.unwrap();
        log.close().await.unwrap();
    });
}

/// A cleaned log reopens after a crash (its batches have fewer records
/// than their offset range) and after a clean shutdown, unchanged.
#[test]
fn a_cleaned_log_reopens_as_it_was() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("reopen-0");
    block_on(async move {
        let config = compacted(8 << 10);
        let log = open(&dir, config.clone(), crashed()).await;
        // Batches of four records over fifteen keys: cleaning leaves
        // batches with fewer records than their offset range.
        overwrite(&log, 15, 30, 4, 3).await;
        clean_pass(&log, None, now_ms()).await;
        let (seen, end) = (consume(&log).await, log.log_end_offset());
        let bytes = read_all(&log, log.log_start_offset(), 1 << 20, false)
            .await
            .unwrap();
        let partial = batch_ranges(&bytes)
            .iter()
            .zip(batch_counts(&bytes))
            .any(|((base, last), count)| i64::from(count) < last - base + 1);
        assert!(partial, "some batch lost records");
        log.close().await.unwrap();
        for hints in [crashed(), clean()] {
            let log = open(&dir, config.clone(), hints).await;
            assert_eq!(log.log_end_offset(), end);
            assert_eq!(consume(&log).await, seen);
            log.close().await.unwrap();
        }
    });
}

/// The store cleans its filthiest log and keeps where each pass ended in
/// Kafka's checkpoint format, so a restart does not clean again.
#[test]
fn the_store_keeps_the_cleaner_checkpoint_across_restarts() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let (options, store) = open_store(&root, 3).await;
        let tp = TopicPartition::new("__consumer_offsets", 7);
        let log = store
            .open_partition(&tp, compacted(8 << 10), now_ms())
            .await
            .unwrap();
        overwrite(&log, 10, 40, 4, 0).await;
        let (cleaned, outcome) = store
            .clean_filthiest_log(now_ms(), MAP_BYTES)
            .await
            .unwrap();
        assert_eq!(cleaned, tp);
        assert_eq!(store.cleaner_checkpoint(&tp), Some(outcome.end_offset));
        assert!(
            store
                .clean_filthiest_log(now_ms(), MAP_BYTES)
                .await
                .is_none(),
            "nothing left to clean"
        );
        let text = std::fs::read_to_string(root.join("cleaner-offset-checkpoint-3")).unwrap();
        assert_eq!(
            text,
            format!("0\n1\n__consumer_offsets 7 {}\n", outcome.end_offset)
        );
        store.close().await.unwrap();
        let store = Store::open(options).await.unwrap();
        assert_eq!(store.cleaner_checkpoint(&tp), Some(outcome.end_offset));
        store
            .open_partition(&tp, compacted(8 << 10), now_ms())
            .await
            .unwrap();
        assert!(
            store
                .clean_filthiest_log(now_ms(), MAP_BYTES)
                .await
                .is_none()
        );
        store.close().await.unwrap();
    });
}

/// Files of a segment at `base` in `dir`, as `(extension, bytes)`.
fn segment_files(dir: &Path, base: Offset) -> Vec<(&'static str, Vec<u8>)> {
    ["log", "index", "timeindex"]
        .into_iter()
        .map(|extension| {
            let path = dir.join(format!("{:020}.{extension}", base.0));
            (extension, std::fs::read(path).unwrap())
        })
        .collect()
}

/// Cleans a log twice: the first pass shrinks every segment, the second
/// merges the small cleaned segments into groups. Returns the directory
/// between the passes, the one after, and the first group's sources.
fn two_passes(root: &Path) -> (std::path::PathBuf, std::path::PathBuf, Vec<Offset>) {
    let dir = root.join("swap-0");
    let (between, after) = (root.join("between"), root.join("after"));
    let (between_copy, after_copy) = (between.clone(), after.clone());
    let sources = block_on(async move {
        let log = open(&dir, compacted(8 << 10), crashed()).await;
        overwrite(&log, 8, 60, 4, 2).await;
        let first = clean_pass(&log, None, now_ms()).await;
        log.close().await.unwrap();
        copy_dir(&dir, &between_copy);
        let log = open(&dir, compacted(8 << 10), crashed()).await;
        // Replication sets a reopened log's HW again; here the test does.
        log.set_high_watermark(log.log_end_offset());
        let second = clean_pass(&log, None, now_ms()).await;
        assert!(
            second.segments_after < second.segments_before,
            "{first:?} then {second:?}"
        );
        log.close().await.unwrap();
        copy_dir(&dir, &after_copy);
        let merged = segment_bases(&after_copy);
        segment_bases(&between_copy)
            .into_iter()
            .filter(|base| *base < merged[1])
            .collect::<Vec<Offset>>()
    });
    assert!(
        sources.len() > 1,
        "the first group merges segments: {sources:?}"
    );
    (between, after, sources)
}

/// What a log in `dir` holds once opened (as after a crash).
fn reopened(dir: &Path) -> (Vec<Seen>, Vec<Offset>) {
    let dir = dir.to_owned();
    block_on(async move {
        let log = open(&dir, compacted(8 << 10), crashed()).await;
        let seen = consume(&log).await;
        log.close().await.unwrap();
        (seen, segment_bases(&dir))
    })
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| {
            name.ends_with(".cleaned") || name.ends_with(".swap") || name.ends_with(".deleted")
        })
        .collect()
}

/// A crash before the swap commits (the cleaned log still `.cleaned`, an
/// index already `.swap`, a source already `.deleted`) leaves the log as
/// it was before the pass.
#[test]
fn a_crash_before_the_swap_commits_keeps_the_old_segments() {
    let root = tempfile::tempdir().unwrap();
    let (between, after, sources) = two_passes(root.path());
    let expected = reopened(&between);
    let crashed_dir = root.path().join("crashed-early");
    copy_dir(&between, &crashed_dir);
    let base = sources[0];
    for (extension, bytes) in segment_files(&after, base) {
        let suffix = if extension == "index" {
            "swap"
        } else {
            "cleaned"
        };
        let name = format!("{:020}.{extension}.{suffix}", base.0);
        std::fs::write(crashed_dir.join(name), bytes).unwrap();
    }
    for extension in ["log", "index", "timeindex"] {
        let name = format!("{:020}.{extension}", sources[1].0);
        std::fs::rename(
            crashed_dir.join(&name),
            crashed_dir.join(format!("{name}.deleted")),
        )
        .unwrap();
    }
    assert_eq!(reopened(&crashed_dir), expected);
    assert!(
        leftovers(&crashed_dir).is_empty(),
        "{:?}",
        leftovers(&crashed_dir)
    );
}

/// A crash once the swap committed (the cleaned segment's files all
/// `.swap`, the other sources `.deleted`) ends with the cleaned segment in
/// place of its sources.
#[test]
fn a_crash_after_the_swap_commits_finishes_it() {
    let root = tempfile::tempdir().unwrap();
    let (between, after, sources) = two_passes(root.path());
    let crashed_dir = root.path().join("crashed-late");
    copy_dir(&between, &crashed_dir);
    let base = sources[0];
    for (extension, bytes) in segment_files(&after, base) {
        let name = format!("{:020}.{extension}.swap", base.0);
        std::fs::write(crashed_dir.join(name), bytes).unwrap();
    }
    for source in &sources[1..] {
        for extension in ["log", "index", "timeindex"] {
            let name = format!("{:020}.{extension}", source.0);
            std::fs::rename(
                crashed_dir.join(&name),
                crashed_dir.join(format!("{name}.deleted")),
            )
            .unwrap();
        }
    }
    let (seen, bases) = reopened(&crashed_dir);
    let (before, _) = reopened(&between);
    let (cleaned, cleaned_bases) = reopened(&after);
    let group_end = cleaned_bases[1].0;
    // The cleaned group's records, then the untouched segments' records.
    let expected: Vec<Seen> = cleaned
        .iter()
        .filter(|s| s.offset < group_end)
        .chain(before.iter().filter(|s| s.offset >= group_end))
        .cloned()
        .collect();
    assert_eq!(seen, expected);
    assert_eq!(bases[0], base);
    assert!(!bases.iter().any(|b| sources[1..].contains(b)), "{bases:?}");
    assert!(
        leftovers(&crashed_dir).is_empty(),
        "{:?}",
        leftovers(&crashed_dir)
    );
}

/// A topic switched from `compact` to `delete` keeps its compacted log: the
/// gaps and cleaned batches are not damage, whether the broker stopped
/// cleanly or crashed (recovery reads a log the cleaner has touched as a
/// compacted one, whatever its topic's policy now).
#[test]
fn a_compacted_log_reopened_under_the_delete_policy_loses_nothing() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let (options, store) = open_store(&root, 0).await;
        let tp = TopicPartition::new("switched", 0);
        let log = store
            .open_partition(&tp, compacted(8 << 10), now_ms())
            .await
            .unwrap();
        overwrite(&log, 15, 30, 4, 3).await;
        assert!(
            store
                .clean_filthiest_log(now_ms(), MAP_BYTES)
                .await
                .is_some()
        );
        let (seen, end) = (consume(&log).await, log.log_end_offset());
        store.close().await.unwrap();
        let delete_policy = LogConfig {
            cleanup_policy: CleanupPolicy::Delete,
            ..compacted(8 << 10)
        };
        // Clean stop, then a crash (the store dropped without closing).
        for close in [true, false] {
            let store = Store::open(options.clone()).await.unwrap();
            let log = store
                .open_partition(&tp, delete_policy.clone(), now_ms())
                .await
                .unwrap();
            assert_eq!(log.log_end_offset(), end, "clean stop before: {close}");
            assert_eq!(consume(&log).await, seen, "clean stop before: {close}");
            if close {
                store.close().await.unwrap();
            }
        }
    });
}
