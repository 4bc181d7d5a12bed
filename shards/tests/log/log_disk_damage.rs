//! Damage on disk that the open-time checks cannot see, or that they must
//! catch: a read meeting it fails with a typed error and the shard lives on.

use std::path::{Path, PathBuf};

use brook_engine::log::config::LogConfig;
use brook_engine::log::index::OffsetIndexEntry;
use brook_engine::types::{Offset, TimestampMs};
use brook_shards::runtime::block_on;
use brook_shards::storage::{PartitionLog, ReadOptions, StorageError};
use zerocopy::{FromBytes, IntoBytes};

use crate::common::*;

const FIRST_TIMESTAMP: i64 = 1_700_000_000_000;

fn file_with_extension(dir: &Path, base: Offset, extension: &str) -> PathBuf {
    dir.join(format!("{:020}.{extension}", base.0))
}

fn small_indexed_segments() -> LogConfig {
    LogConfig {
        segment_bytes: 6000,
        index_interval_bytes: 300,
        ..LogConfig::default()
    }
}

/// Appends `batches` batches of three records with rising timestamps and
/// waits until the rolled segments are sealed.
async fn fill(log: &PartitionLog, batches: usize) {
    for i in 0..batches {
        let bytes = batch(3, 40 + i % 7, FIRST_TIMESTAMP + i as i64 * 10);
        log.append(&bytes, EPOCH, now_ms()).await.unwrap();
    }
    settle(log).await;
}

fn read_offset(allow_file_range: bool) -> ReadOptions {
    ReadOptions {
        allow_file_range,
        ..read_options(1 << 20)
    }
}

/// A sealed segment's offset index is read from disk a block at a time on
/// every lookup. If it is damaged after open so that it points past the end
/// of the log, the read is an error (it used to return nothing, so a
/// consumer would ask for the same offset forever).
#[test]
fn an_index_damaged_after_open_fails_the_read() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("damaged-0");
    block_on(async move {
        let log = open(&dir, small_indexed_segments(), crashed()).await;
        fill(&log, 100).await;
        let bases = segment_bases(&dir);
        assert!(bases.len() >= 3, "sealed segments: {bases:?}");
        let index_path = file_with_extension(&dir, bases[0], "index");
        let log_bytes = std::fs::metadata(file_with_extension(&dir, bases[0], "log"))
            .unwrap()
            .len() as u32;
        let mut entries = Vec::new();
        let bytes = std::fs::read(&index_path).unwrap();
        assert!(!bytes.is_empty(), "the first segment is indexed");
        for chunk in bytes.chunks(8) {
            let entry = OffsetIndexEntry::read_from_bytes(chunk).unwrap();
            let past_end = log_bytes + 1000 + entry.position.get();
            entries.push(OffsetIndexEntry::new(entry.relative_offset.get(), past_end));
        }
        std::fs::write(&index_path, entries.as_bytes()).unwrap();

        let last_of_first = Offset(bases[1].0 - 1);
        for allow_file_range in [false, true] {
            let outcome = log.read(last_of_first, read_offset(allow_file_range)).await;
            assert!(
                matches!(outcome, Err(StorageError::Corrupt { .. })),
                "file range {allow_file_range}: {outcome:?}"
            );
        }
        let target = TimestampMs(FIRST_TIMESTAMP + 10 * (bases[1].0 / 3 - 1));
        let found = log.offset_for_timestamp(target).await;
        assert!(
            matches!(found, Err(StorageError::Corrupt { .. })),
            "by timestamp: {found:?}"
        );
        // The other segments still read.
        let outcome = log.read(bases[1], read_offset(false)).await.unwrap();
        assert!(outcome.next_offset > bases[1]);
        log.close().await.unwrap();
    });
}

/// A batch whose length field, damaged on disk after open, runs past the
/// end of its sealed segment fails the read as damage. (At the tail of an
/// active segment, a batch running past the written end is a write in
/// flight and ends the read instead: `bench_workload` covers that side.)
#[test]
fn a_sealed_batch_running_past_the_segment_end_fails_the_read() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("long-0");
    block_on(async move {
        let log = open(&dir, small_indexed_segments(), crashed()).await;
        fill(&log, 100).await;
        let bases = segment_bases(&dir);
        assert!(bases.len() >= 3, "sealed segments: {bases:?}");
        let log_path = file_with_extension(&dir, bases[0], "log");
        let mut bytes = std::fs::read(&log_path).unwrap();
        // The first batch's length (bytes 8..12) now reaches past the file.
        let long = (bytes.len() as i32 + 100).to_be_bytes();
        bytes[8..12].copy_from_slice(&long);
        std::fs::write(&log_path, &bytes).unwrap();
        for allow_file_range in [false, true] {
            let outcome = log.read(bases[0], read_offset(allow_file_range)).await;
            assert!(
                matches!(outcome, Err(StorageError::Corrupt { .. })),
                "file range {allow_file_range}: {outcome:?}"
            );
        }
        log.close().await.unwrap();
    });
}
