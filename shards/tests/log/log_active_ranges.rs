//! A consumer reading the active segment behind its tail cache gets a file
//! range (a zero-copy send from the kernel) rather than bytes this shard
//! read and copied; ranges stop below the high watermark, whose bytes no
//! append rewrites, and the tail itself still comes from memory.

use brook_engine::log::config::LogConfig;
use brook_engine::types::Offset;
use brook_shards::runtime::block_on;
use brook_shards::storage::{LogData, ReadOptions};

use crate::common::*;

/// Batches of 64 records of 1,000 bytes (about 65 KiB each).
const RECORDS_PER_BATCH: usize = 64;
/// About 13 MiB: more than the active segment's tail cache (8 MiB).
const BATCHES: usize = 200;

fn file_range(options_max: usize) -> ReadOptions {
    ReadOptions {
        allow_file_range: true,
        ..read_options(options_max)
    }
}

#[test]
fn a_consumer_behind_the_tail_cache_reads_the_active_segment_as_a_file_range() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("topic-0");
    block_on(async move {
        let config = LogConfig {
            segment_bytes: 1 << 30,
            ..LogConfig::default()
        };
        let log = open(&path, config, crashed()).await;
        let mut batches = Vec::new();
        for number in 0..BATCHES {
            let bytes = batch(RECORDS_PER_BATCH, 1_000, 1_700_000_000_000 + number as i64);
            let info = log.append(&bytes, EPOCH, now_ms()).await.unwrap();
            batches.push((info.base_offset, placed(&bytes, info.base_offset, EPOCH)));
        }
        commit(&log).await;
        assert_eq!(log.segment_count(), 1, "one active segment");
        let between = |from: Offset, to: Offset| -> Vec<u8> {
            batches
                .iter()
                .filter(|(base, _)| *base >= from && *base < to)
                .flat_map(|(_, bytes)| bytes.iter().copied())
                .collect()
        };

        // From the start: long evicted from the tail cache.
        let outcome = log.read(Offset(0), file_range(1 << 20)).await.unwrap();
        let LogData::File(range) = &outcome.data else {
            panic!(
                "the active segment behind its cache is read as a file range: {:?}",
                outcome.data
            );
        };
        assert!(range.len <= 1 << 20, "within the byte limit: {}", range.len);
        assert!(
            outcome.next_offset > Offset(RECORDS_PER_BATCH as i64),
            "more than one batch"
        );
        assert_bytes_eq(
            &materialize(&outcome.data),
            &between(Offset(0), outcome.next_offset),
            "range from 0",
        );

        // The consumer reads on from where the range ended.
        let on = log
            .read(outcome.next_offset, file_range(1 << 20))
            .await
            .unwrap();
        let LogData::File(on_range) = &on.data else {
            panic!("{:?}", on.data);
        };
        assert_bytes_eq(
            &materialize(&on.data),
            &between(outcome.next_offset, on.next_offset),
            "read on",
        );
        // The first range asked for itself and the ranges after it to be
        // read ahead; the one reading on asks only past that.
        assert_eq!(range.read_ahead.start, range.position);
        assert!(range.read_ahead.end > range.position + range.len);
        assert_eq!(on_range.read_ahead.start, range.read_ahead.end);
        assert!(on_range.read_ahead.end > on_range.position + on_range.len);
        // A read from the start again asks for its whole span.
        let again = log.read(Offset(0), file_range(1 << 20)).await.unwrap();
        let LogData::File(again) = &again.data else {
            panic!("{:?}", again.data);
        };
        assert_eq!(again.read_ahead, range.read_ahead);

        // The tail, which the cache still holds, comes from memory.
        let (last_base, _) = batches.last().unwrap();
        let tail = log.read(*last_base, file_range(1 << 20)).await.unwrap();
        assert!(matches!(tail.data, LogData::Memory(_)), "{:?}", tail.data);
        assert_bytes_eq(
            &materialize(&tail.data),
            &between(*last_base, log.log_end_offset()),
            "tail",
        );

        // A high watermark inside the first MiB: no range reaches it.
        let high_watermark = batches[5].0;
        log.set_high_watermark(high_watermark);
        let below = log.read(Offset(0), file_range(1 << 20)).await.unwrap();
        assert!(matches!(below.data, LogData::File(_)), "{:?}", below.data);
        assert!(
            below.next_offset <= high_watermark,
            "{} > {high_watermark}",
            below.next_offset
        );
        assert_bytes_eq(
            &materialize(&below.data),
            &between(Offset(0), below.next_offset),
            "below the HW",
        );
        // The batch right below it alone, still a range.
        let last_below = batches[4].0;
        let single = log.read(last_below, file_range(1 << 20)).await.unwrap();
        assert!(matches!(single.data, LogData::File(_)), "{:?}", single.data);
        assert_eq!(single.next_offset, high_watermark);
        // At it (a follower's read, unbounded by the HW): bytes, never a
        // range of bytes a truncation may still rewrite.
        let above = log.read(high_watermark, file_range(1 << 20)).await.unwrap();
        assert!(matches!(above.data, LogData::Memory(_)), "{:?}", above.data);
        assert_bytes_eq(
            &materialize(&above.data),
            &between(high_watermark, above.next_offset),
            "above the HW",
        );
        log.close().await.unwrap();
    });
}
