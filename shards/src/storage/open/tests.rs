//! Opening a partition log: a new partition's directory entries are synced,
//! an idle partition holds only its active `.log` open,
//! and after a crash only the bytes from the recovery point on are scanned.
//! Recovery records the `.log` ranges it reads here ([`RECOVERY_READS`]).

use std::cell::RefCell;
use std::ops::Range;
use std::path::PathBuf;

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::log::config::LogConfig;
use brook_engine::types::{LeaderEpoch, TimestampMs};

use super::Path;
use crate::runtime::block_on;
use crate::storage::files::SYNCED_DIRECTORIES;
use crate::storage::partition_log::{PartitionLog, RecoveryHints};

/// How recovery read a range of a `.log`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReadKind {
    /// For the batch headers below the recovery point.
    Walk,
    /// For whole batches, CRCs checked.
    Scan,
}

thread_local! {
    /// The `.log` ranges this thread's recoveries read.
    pub(super) static RECOVERY_READS: RefCell<Vec<(PathBuf, ReadKind, Range<u64>)>> =
        const { RefCell::new(Vec::new()) };
}

/// A power loss cannot be simulated here: this checks that creating a
/// partition syncs the entries of its directory and of its first files.
#[test]
fn a_new_partition_syncs_its_directory_and_its_parent() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    let dir = root.join("new-0");
    block_on(async move {
        let log = PartitionLog::open(&dir, LogConfig::default(), RecoveryHints::default(), 0)
            .await
            .unwrap();
        let synced = SYNCED_DIRECTORIES.take();
        assert!(synced.contains(&root), "the parent: {synced:?}");
        assert!(synced.contains(&dir), "the partition directory: {synced:?}");
        log.close().await.unwrap();
    });
}

/// Index entries every 4 KiB of log.
fn index_every_page() -> LogConfig {
    LogConfig {
        index_interval_bytes: 4096,
        ..LogConfig::default()
    }
}

fn batch_of(value_bytes: usize, timestamp: i64) -> Vec<u8> {
    let record = NewRecord::value(vec![7u8; value_bytes], TimestampMs(timestamp));
    encode_batch(&[record], &BatchOptions::default())
}

/// What recovery read of a `.log`, by kind, in order.
fn reads_of(path: &Path, kind: ReadKind) -> Vec<Range<u64>> {
    RECOVERY_READS.with_borrow(|reads| {
        reads
            .iter()
            .filter(|(read, read_kind, _)| read == path && *read_kind == kind)
            .map(|(_, _, range)| range.clone())
            .collect()
    })
}

/// What a recovery from a recovery point read.
struct Recovered {
    /// Where the first batch not below the point starts.
    trusted: u64,
    /// The reads of the header walk.
    walked: Vec<Range<u64>>,
}

impl Recovered {
    fn walked_bytes(&self) -> u64 {
        self.walked.iter().map(|read| read.end - read.start).sum()
    }
}

/// Appends `count` batches of `batch_value_bytes`, syncs after the first
/// `synced` (the recovery point is the offset after them), closes; then
/// reopens as after a crash, with the index files if `keep_indexes`, and
/// checks that the scan read the `.log` once from the first batch not
/// below the point to its end.
fn recover(count: usize, synced: usize, batch_value_bytes: usize, keep_indexes: bool) -> Recovered {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p-0");
    let log_path = dir.join("00000000000000000000.log");
    let config = index_every_page();
    block_on(async move {
        let log = PartitionLog::open(&dir, config.clone(), RecoveryHints::default(), 0)
            .await
            .unwrap();
        let (mut recovery_point, mut trusted) = (None, 0);
        for i in 0..count {
            if i == synced {
                log.flush().await.unwrap();
                recovery_point = Some(log.recovery_point());
                trusted = log.size_bytes();
            }
            let bytes = batch_of(batch_value_bytes, 1_700_000_000_000 + i as i64);
            log.append(&bytes, LeaderEpoch(0), 0).await.unwrap();
        }
        let end = log.log_end_offset();
        log.close().await.unwrap();
        if !keep_indexes {
            std::fs::remove_file(log_path.with_extension("index")).unwrap();
            std::fs::remove_file(log_path.with_extension("timeindex")).unwrap();
        }
        RECOVERY_READS.take();
        let hints = RecoveryHints {
            recovery_point,
            ..RecoveryHints::default()
        };
        let log = PartitionLog::open(&dir, config, hints, 0).await.unwrap();
        assert_eq!(log.log_end_offset(), end);
        let file_bytes = std::fs::metadata(&log_path).unwrap().len();
        log.close().await.unwrap();
        assert!(trusted > file_bytes / 2, "a point in the middle");
        let scanned = reads_of(&log_path, ReadKind::Scan);
        assert_eq!(scanned.first().map(|read| read.start), Some(trusted));
        // Each read starts at the first batch the one before did not hold whole.
        assert!(
            scanned
                .windows(2)
                .all(|pair| pair[0].start < pair[1].start && pair[1].start <= pair[0].end),
            "one pass: {scanned:?}"
        );
        assert_eq!(scanned.last().map(|read| read.end), Some(file_bytes));
        Recovered {
            trusted,
            walked: reads_of(&log_path, ReadKind::Walk),
        }
    })
}

/// Only the bytes from the first batch not below the recovery point on
/// are scanned (CRCs checked); below it, recovery reads headers: from
/// the last index entry below the point when the index files hold one,
/// else from the start, one page per header once batches are large.
#[test]
fn recovery_scans_only_from_the_recovery_point() {
    let whole_indexes = recover(200, 150, 20 << 10, true);
    // The last entry below the point names the batch just before it:
    // the walk starts at the point and has nothing to read.
    assert_eq!(whole_indexes.walked, Vec::<Range<u64>>::new());

    let no_indexes = recover(200, 150, 20 << 10, false);
    assert_eq!(no_indexes.walked[0].start, 0, "from the start");
    assert!(
        no_indexes.walked_bytes() >= no_indexes.trusted,
        "small batches are read through"
    );

    let large_batches = recover(60, 40, 100 << 10, false);
    // One window, then a page or two for each later header.
    assert!(
        large_batches.walked.len() <= 40,
        "{:?}",
        large_batches.walked
    );
    assert!(
        large_batches.walked_bytes() < (1 << 20) + 40 * 8192,
        "{} of {} bytes read",
        large_batches.walked_bytes(),
        large_batches.trusted
    );
}

/// The files under `dir` this process holds descriptors for.
fn open_files_under(dir: &Path) -> Vec<PathBuf> {
    let dir = dir.canonicalize().unwrap();
    let mut open: Vec<PathBuf> = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|path| path.starts_with(&dir))
        .collect();
    open.sort();
    open
}

/// Waits (bounded) until the files open under `dir` are `expected`: index
/// writes may still be completing when an append returns.
async fn settle_open_files(dir: &Path, expected: &[PathBuf]) {
    for _ in 0..500 {
        if open_files_under(dir) == expected {
            return;
        }
        glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert_eq!(open_files_under(dir), expected, "descriptors still open");
}

/// An idle partition holds one descriptor, its active `.log`: the active
/// segment's index files are opened for each write and closed after, so
/// 10,000 partitions fit under an open-file limit of 20,000. Checked new,
/// after enough appends to write whole index pages, and recovered.
#[test]
fn an_idle_partition_holds_only_its_active_log_open() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("p-0");
    let config = index_every_page();
    block_on(async move {
        let log = PartitionLog::open(&dir, config.clone(), RecoveryHints::default(), 0)
            .await
            .unwrap();
        let log_path = dir.canonicalize().unwrap().join("00000000000000000000.log");
        let only_log = [log_path.clone()];
        settle_open_files(&dir, &only_log).await;
        // 1,200 index entries: whole pages of both index files are written.
        for i in 0..1200 {
            let bytes = batch_of(4096, 1_700_000_000_000 + i);
            log.append(&bytes, LeaderEpoch(0), 0).await.unwrap();
        }
        log.flush().await.unwrap();
        settle_open_files(&dir, &only_log).await;
        let index_bytes = std::fs::metadata(log_path.with_extension("index"))
            .unwrap()
            .len();
        assert!(
            index_bytes >= 4096,
            "a whole offset-index page written: {index_bytes}"
        );
        let end = log.log_end_offset();
        log.close().await.unwrap();
        drop(log);
        settle_open_files(&dir, &[]).await;

        let log = PartitionLog::open(&dir, config, RecoveryHints::default(), 0)
            .await
            .unwrap();
        assert_eq!(log.log_end_offset(), end);
        settle_open_files(&dir, &only_log).await;
        log.close().await.unwrap();
    });
}
