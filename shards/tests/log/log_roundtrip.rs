//! Acceptance 1 and 2 of the storage engine: random batches (values of
//! 1 B–1 MiB) appended across many segment rolls read back byte-identical from
//! any offset, against a plain in-memory model; offset and time lookups agree
//! with a linear scan of that model.

use brook_engine::log::batch::Compression;
use brook_engine::log::builder::BatchOptions;
use brook_engine::log::config::LogConfig;
use brook_engine::types::{Offset, TimestampMs};
use brook_shards::runtime::block_on;
use brook_shards::storage::ReadOptions;
use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;

use crate::common::*;

#[derive(Clone, Debug)]
enum Step {
    Append { count: usize, value_bytes: usize },
    Flush,
    Reopen,
}

fn value_bytes() -> impl Strategy<Value = usize> {
    prop_oneof![14 => 1usize..1000, 5 => 1000usize..65_536, 1 => 65_536usize..=(1 << 20)]
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        30 => (1usize..4, value_bytes()).prop_map(|(count, value_bytes)| Step::Append { count, value_bytes }),
        1 => Just(Step::Flush),
        1 => Just(Step::Reopen),
    ]
}

/// The model: each batch's base offset, record count and stored bytes.
#[derive(Default)]
struct Model {
    batches: Vec<(Offset, usize, Vec<u8>)>,
}

impl Model {
    /// The bytes a read at `offset` with `max_bytes` must return: whole
    /// batches from the one holding `offset`, at least one, within one
    /// segment (as Kafka reads), as many as fit.
    fn expected_read(&self, offset: Offset, max_bytes: usize, segment_bases: &[Offset]) -> Vec<u8> {
        let first = self
            .batches
            .iter()
            .position(|(base, count, _)| offset.0 < base.0 + *count as i64)
            .unwrap();
        let mut bytes = Vec::new();
        for (base, _, batch) in &self.batches[first..] {
            let starts_segment = segment_bases.contains(base);
            if !bytes.is_empty() && (bytes.len() + batch.len() > max_bytes || starts_segment) {
                break;
            }
            bytes.extend_from_slice(batch);
        }
        bytes
    }

    /// The batches from the one holding `offset` to the one ending right
    /// before `next_offset`, back to back.
    fn batches_between(&self, offset: Offset, next_offset: Offset) -> Vec<u8> {
        self.batches
            .iter()
            .filter(|(base, count, _)| offset.0 < base.0 + *count as i64 && base.0 < next_offset.0)
            .flat_map(|(_, _, bytes)| bytes.iter().copied())
            .collect()
    }

    fn all(&self) -> Vec<u8> {
        self.batches
            .iter()
            .flat_map(|(_, _, bytes)| bytes.iter().copied())
            .collect()
    }
}

/// The properties' settings: few cases, as each writes real files, and failed
/// cases kept beside this file (`log_roundtrip.proptest-regressions`).
/// Proptest's default place is found from the nearest `lib.rs` or `main.rs`
/// above this file, which is the test binary's `main.rs`, and would be
/// `tests/proptest-regressions/log_roundtrip.txt`.
fn config(cases: u32) -> ProptestConfig {
    ProptestConfig {
        cases,
        max_shrink_iters: 64,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource(
            "proptest-regressions",
        ))),
        ..ProptestConfig::default()
    }
}

proptest! {
    #![proptest_config(config(24))]

    #[test]
    fn random_batches_read_back_identically_from_any_offset(
        steps in prop::collection::vec(step(), 1..60),
        segment_bytes in 4096u64..(3 << 20),
        index_interval_bytes in 0u64..20_000,
        probes in prop::collection::vec((any::<prop::sample::Index>(), any::<prop::sample::Index>(), 1usize..3_000_000), 1..20),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("topic-0");
        block_on(async move {
            let config = LogConfig { segment_bytes, index_interval_bytes, max_message_bytes: 4 << 20, ..LogConfig::default() };
            let mut log = open(&path, config.clone(), crashed()).await;
            let mut model = Model::default();
            for (number, step) in steps.into_iter().enumerate() {
                match step {
                    Step::Append { count, value_bytes } => {
                        let bytes = batch(count, value_bytes, 1_700_000_000_000 + number as i64 * 10);
                        let info = log.append(&bytes, EPOCH, now_ms()).await.unwrap();
                        assert_eq!(info.base_offset, log.log_end_offset().0.checked_sub(count as i64).map(Offset).unwrap());
                        model.batches.push((info.base_offset, count, placed(&bytes, info.base_offset, EPOCH)));
                    }
                    Step::Flush => {
                        log.flush().await.unwrap();
                    }
                    Step::Reopen => {
                        log.close().await.unwrap();
                        log = open(&path, config.clone(), clean()).await;
                    }
                }
            }
            let end = log.log_end_offset();
            log.wait_written(end).await.unwrap();
            assert_bytes_eq(&read_all(&log, Offset(0), 1 << 20, false).await.unwrap(), &model.all(), "whole log");
            if model.batches.is_empty() {
                return;
            }
            let bases = segment_bases(&path);
            for (batch_index, record_index, max_bytes) in &probes {
                let (base, count, _) = &model.batches[batch_index.index(model.batches.len())];
                let offset = Offset(base.0 + record_index.index(*count) as i64);
                let outcome = log.read(offset, read_options(*max_bytes)).await.unwrap();
                let expected = model.expected_read(offset, *max_bytes, &bases);
                assert_bytes_eq(&materialize(&outcome.data), &expected, &format!("offset {offset} max {max_bytes}"));
            }
            log.close().await.unwrap();
            let log = open(&path, config.clone(), clean()).await;
            assert_bytes_eq(&read_all(&log, Offset(0), 1 << 20, true).await.unwrap(), &model.all(), "after reopening, with file ranges");
            // Zero-copy reads from anywhere, after that pass left each sealed
            // segment a remembered batch to read on from: whole batches
            // from the one holding the offset, whether remembered or found.
            for (batch_index, record_index, max_bytes) in &probes {
                let (base, count, _) = &model.batches[batch_index.index(model.batches.len())];
                let offset = Offset(base.0 + record_index.index(*count) as i64);
                let options = ReadOptions { allow_file_range: true, ..read_options(*max_bytes) };
                let outcome = log.read(offset, options).await.unwrap();
                assert!(outcome.next_offset > offset, "offset {offset}: progress");
                let expected = model.batches_between(offset, outcome.next_offset);
                assert_bytes_eq(&materialize(&outcome.data), &expected, &format!("file range at {offset} max {max_bytes}"));
            }
            log.close().await.unwrap();
            let log = open(&path, config, crashed()).await;
            assert_bytes_eq(&read_all(&log, Offset(0), 100_000, false).await.unwrap(), &model.all(), "after a full recovery scan");
            assert!(log.segment_count() >= 1);
            log.close().await.unwrap();
        });
    }
}

/// Every record of the model, in offset order, with its timestamp.
fn record_stamps(batches: &[(Offset, Vec<i64>)]) -> Vec<(Offset, i64)> {
    batches
        .iter()
        .flat_map(|(base, timestamps)| {
            timestamps
                .iter()
                .enumerate()
                .map(move |(i, ts)| (Offset(base.0 + i as i64), *ts))
        })
        .collect()
}

async fn check_lookups(
    log: &brook_shards::storage::PartitionLog,
    batches: &[(Offset, Vec<i64>)],
    probes: &[i64],
) {
    for (base, timestamps) in batches {
        for i in 0..timestamps.len() {
            let offset = Offset(base.0 + i as i64);
            let outcome = log.read(offset, read_options(1)).await.unwrap();
            let bytes = materialize(&outcome.data);
            let got_base = i64::from_be_bytes(bytes[0..8].try_into().unwrap());
            assert_eq!(
                Offset(got_base),
                *base,
                "offset {offset} lands in its batch"
            );
            assert_eq!(
                outcome.next_offset,
                Offset(base.0 + timestamps.len() as i64)
            );
        }
    }
    let stamps = record_stamps(batches);
    for target in probes {
        let expected = stamps.iter().find(|(_, ts)| ts >= target).copied();
        let found = log
            .offset_for_timestamp(TimestampMs(*target))
            .await
            .unwrap();
        assert_eq!(
            found.map(|stamp| (stamp.offset, stamp.timestamp.0)),
            expected,
            "timestamp {target}"
        );
    }
}

proptest! {
    #![proptest_config(config(12))]

    #[test]
    fn offset_and_time_lookups_agree_with_a_linear_scan(
        batch_timestamps in prop::collection::vec(prop::collection::vec(0i64..5_000, 1..6), 1..150),
        compressed in prop::collection::vec(any::<bool>(), 150),
        probes in prop::collection::vec(-10i64..5_100, 40),
        segment_bytes in 2_000u64..20_000,
        index_interval_bytes in 0u64..600,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("times-0");
        block_on(async move {
            let config = LogConfig { segment_bytes, index_interval_bytes, ..LogConfig::default() };
            let log = open(&path, config.clone(), crashed()).await;
            let mut batches = Vec::new();
            for (i, timestamps) in batch_timestamps.iter().enumerate() {
                let compression = if compressed[i] { Compression::Lz4 } else { Compression::None };
                let bytes = batch_with_timestamps(timestamps, &BatchOptions { compression, ..BatchOptions::default() });
                let info = log.append(&bytes, EPOCH, now_ms()).await.unwrap();
                batches.push((info.base_offset, timestamps.clone()));
            }
            let end = log.log_end_offset();
            log.wait_written(end).await.unwrap();
            check_lookups(&log, &batches, &probes).await;
            log.close().await.unwrap();
            let log = open(&path, config.clone(), clean()).await;
            check_lookups(&log, &batches, &probes).await;
            log.close().await.unwrap();
            let log = open(&path, config, crashed()).await;
            check_lookups(&log, &batches, &probes).await;
            log.close().await.unwrap();
        });
    }
}
