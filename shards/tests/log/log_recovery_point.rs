//! Recovery after a crash, from a checkpointed recovery point in the middle
//! of a large active segment: the batches below the point were synced before
//! it was written, so only their headers are walked and everything after it
//! is scanned whole. Damage after the point is cut exactly where a full scan
//! cuts it, the rebuilt indexes are byte for byte the ones a full scan builds
//! (whatever the crash left of the index files), and the leader epochs of
//! the batches after the point are recovered.

use std::path::{Path, PathBuf};

use brook_engine::log::batch::BatchView;
use brook_engine::log::config::LogConfig;
use brook_engine::types::{LeaderEpoch, Offset, TimestampMs};
use brook_shards::runtime::block_on;
use brook_shards::storage::{EPOCH_CHECKPOINT_FILE, PartitionLog, RecoveryHints};

use crate::common::*;

const FIRST_TIMESTAMP: i64 = 1_700_000_000_000;
const BATCHES: usize = 120;
/// Batches appended and synced before the recovery point is taken.
const SYNCED: usize = 80;

/// One active segment (the default 1 GiB `segment.bytes`) with an index
/// entry every few batches.
fn config() -> LogConfig {
    LogConfig {
        index_interval_bytes: 300,
        ..LogConfig::default()
    }
}

/// A batch as the log holds it.
#[derive(Clone)]
struct Placed {
    base: Offset,
    timestamps: Vec<i64>,
    bytes: Vec<u8>,
}

impl Placed {
    fn next_offset(&self) -> Offset {
        Offset(self.base.0 + self.timestamps.len() as i64)
    }
}

/// Appends `BATCHES` batches of 1–4 records of uneven sizes, whose
/// timestamps rise and fall (so only some index entries get a time entry),
/// batch `i` in `epoch_of(i)`. The log is synced after the first `SYNCED`,
/// which makes the offset after them its recovery point; it is then closed
/// cleanly, so every index file is whole. Returns the batches and the point.
async fn build(dir: &Path, epoch_of: impl Fn(usize) -> LeaderEpoch) -> (Vec<Placed>, Offset) {
    let log = open(dir, config(), crashed()).await;
    let mut batches = Vec::new();
    let mut recovery_point = None;
    for i in 0..BATCHES {
        if i == SYNCED {
            log.flush().await.unwrap();
            recovery_point = Some(log.recovery_point());
        }
        let count = 1 + i % 4;
        let timestamp = FIRST_TIMESTAMP + ((i * 37) % 61) as i64 * 10;
        let bytes = batch(count, 30 + (i * 13) % 90, timestamp);
        let info = log.append(&bytes, epoch_of(i), now_ms()).await.unwrap();
        batches.push(Placed {
            base: info.base_offset,
            timestamps: (0..count as i64).map(|j| timestamp + j).collect(),
            bytes: placed(&bytes, info.base_offset, epoch_of(i)),
        });
    }
    log.close().await.unwrap();
    let recovery_point = recovery_point.unwrap();
    assert_eq!(recovery_point, batches[SYNCED].base, "synced up to there");
    (batches, recovery_point)
}

fn crashed_at(recovery_point: Offset) -> RecoveryHints {
    RecoveryHints {
        recovery_point: Some(recovery_point),
        ..RecoveryHints::default()
    }
}

fn segment_file(dir: &Path, extension: &str) -> PathBuf {
    dir.join(format!("{:020}.{extension}", 0))
}

/// Where batch `slot` starts in the segment.
fn position_of(batches: &[Placed], slot: usize) -> usize {
    batches[..slot].iter().map(|batch| batch.bytes.len()).sum()
}

fn concat(batches: &[Placed]) -> Vec<u8> {
    batches
        .iter()
        .flat_map(|batch| batch.bytes.iter().copied())
        .collect()
}

fn edit(path: &Path, change: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    change(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

/// What a crash may leave of the active segment's index files, which are
/// written in whole chunks and never synced.
#[derive(Clone, Copy, Debug)]
enum IndexesLeft {
    Whole,
    /// No chunk was written.
    Missing,
    /// The offset index lost its second half; the time index's second half
    /// is a chunk whose write did not land (zeros).
    Partial,
    /// Sorted and inside the log, but every offset entry points a byte
    /// past its batch (damage the index files cannot show by themselves).
    Misplaced,
}

fn leave_indexes(dir: &Path, left: IndexesLeft) {
    let (index, time_index) = (segment_file(dir, "index"), segment_file(dir, "timeindex"));
    match left {
        IndexesLeft::Whole => {}
        IndexesLeft::Missing => {
            std::fs::remove_file(index).unwrap();
            std::fs::remove_file(time_index).unwrap();
        }
        IndexesLeft::Partial => {
            edit(&index, |bytes| bytes.truncate(bytes.len() / 16 * 8));
            edit(&time_index, |bytes| {
                let half = bytes.len() / 2;
                bytes[half..].fill(0);
            });
        }
        IndexesLeft::Misplaced => edit(&index, |bytes| {
            for entry in bytes.chunks_mut(8) {
                let position = u32::from_be_bytes(entry[4..].try_into().unwrap());
                entry[4..].copy_from_slice(&(position + 1).to_be_bytes());
            }
        }),
    }
}

fn index_files(dir: &Path) -> (Vec<u8>, Vec<u8>) {
    (
        std::fs::read(segment_file(dir, "index")).unwrap(),
        std::fs::read(segment_file(dir, "timeindex")).unwrap(),
    )
}

/// Checks every offset and timestamp lookup of `log` against a linear
/// scan of `kept`, the batches it must hold.
async fn check_lookups(log: &PartitionLog, kept: &[Placed], context: &str) {
    for (slot, batch) in kept.iter().enumerate() {
        for offset in batch.base.0..batch.next_offset().0 {
            let outcome = log.read(Offset(offset), read_options(1)).await.unwrap();
            let bytes = materialize(&outcome.data);
            let first = BatchView::parse_prefix(&bytes).unwrap();
            assert_eq!(
                first.base_offset(),
                batch.base,
                "{context}: offset {offset} is in batch {slot}"
            );
        }
    }
    let records: Vec<(Offset, i64)> = kept
        .iter()
        .flat_map(|batch| {
            (0..)
                .zip(&batch.timestamps)
                .map(|(i, timestamp)| (Offset(batch.base.0 + i), *timestamp))
        })
        .collect();
    for target in FIRST_TIMESTAMP - 1..=FIRST_TIMESTAMP + 610 {
        let expected = records
            .iter()
            .find(|(_, timestamp)| *timestamp >= target)
            .map(|(offset, _)| *offset);
        let found = log.offset_for_timestamp(TimestampMs(target)).await.unwrap();
        assert_eq!(
            found.map(|stamp| stamp.offset),
            expected,
            "{context}: first record at or after {target}"
        );
    }
}

/// Tears, garbage and flipped bytes after the recovery point, with whole,
/// missing, partly written or misplaced index files: the log keeps exactly its valid
/// prefix, its index files are the ones a full scan of the same bytes
/// builds, and lookups by offset and by timestamp agree with a linear scan.
#[test]
fn damage_after_the_recovery_point_is_cut_and_the_indexes_match_a_full_scan() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let pristine = root.join("pristine-0");
        let (batches, recovery_point) = build(&pristine, |_| EPOCH).await;
        let torn = position_of(&batches, SYNCED + 7) + 30;
        let torn_at_the_point = position_of(&batches, SYNCED) + 10;
        let flipped = position_of(&batches, SYNCED + 20) - 2;
        // (damage, batches kept, change to the .log)
        type Damage = Box<dyn Fn(&mut Vec<u8>)>;
        let damages: [(&str, usize, Damage); 6] = [
            ("none", BATCHES, Box::new(|_| {})),
            (
                "torn at the recovery point",
                SYNCED,
                Box::new(move |log| log.truncate(torn_at_the_point)),
            ),
            (
                "torn write",
                SYNCED + 7,
                Box::new(move |log| log.truncate(torn)),
            ),
            (
                "garbage after the end",
                BATCHES,
                Box::new(|log| log.extend((0..5000u32).map(|i| (i * 7 + 3) as u8))),
            ),
            (
                "a zero page after the end",
                BATCHES,
                Box::new(|log| log.extend([0; 4096])),
            ),
            (
                "a flipped byte",
                SYNCED + 19,
                Box::new(move |log| log[flipped] ^= 0x10),
            ),
        ];
        for (damage, kept, change) in damages {
            let kept = &batches[..kept];
            let reference = root.join("full-scan-0");
            copy_dir(&pristine, &reference);
            edit(&segment_file(&reference, "log"), &change);
            open(&reference, config(), crashed())
                .await
                .close()
                .await
                .unwrap();
            let expected_indexes = index_files(&reference);
            let all_left = [
                IndexesLeft::Whole,
                IndexesLeft::Missing,
                IndexesLeft::Partial,
                IndexesLeft::Misplaced,
            ];
            for left in all_left {
                let context = format!("{damage}, indexes {left:?}");
                let work = root.join("work-0");
                copy_dir(&pristine, &work);
                edit(&segment_file(&work, "log"), &change);
                leave_indexes(&work, left);
                let log = open(&work, config(), crashed_at(recovery_point)).await;
                let end = kept.last().unwrap().next_offset();
                assert_eq!(log.log_end_offset(), end, "{context}: log end");
                let bytes = read_all(&log, Offset(0), 1 << 20, false).await.unwrap();
                assert_bytes_eq(&bytes, &concat(kept), &context);
                check_lookups(&log, kept, &context).await;
                log.close().await.unwrap();
                assert_eq!(
                    std::fs::metadata(segment_file(&work, "log")).unwrap().len() as usize,
                    position_of(kept, kept.len()),
                    "{context}: cut after the last valid batch"
                );
                assert!(
                    index_files(&work) == expected_indexes,
                    "{context}: indexes differ from a full scan's"
                );
            }
        }
    });
}

/// What shows that the batches below the recovery point are not scanned:
/// a byte flipped inside the records of one of them (only its CRC covers
/// it) is not found at open, where a full scan would cut the log there. The
/// batch is served as it is on disk, and the consumer's CRC check rejects
/// it, as with Kafka, whose log loader does not recover below the point.
#[test]
fn the_batches_below_the_recovery_point_are_not_scanned() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let pristine = root.join("pristine-0");
        let (batches, recovery_point) = build(&pristine, |_| EPOCH).await;
        let victim = 10;
        let flipped = position_of(&batches, victim + 1) - 2;
        let work = root.join("work-0");
        for left in [IndexesLeft::Whole, IndexesLeft::Missing] {
            copy_dir(&pristine, &work);
            edit(&segment_file(&work, "log"), |log| log[flipped] ^= 0x10);
            leave_indexes(&work, left);
            let log = open(&work, config(), crashed_at(recovery_point)).await;
            assert_eq!(
                log.log_end_offset(),
                batches[BATCHES - 1].next_offset(),
                "indexes {left:?}: nothing cut"
            );
            let outcome = log
                .read(batches[victim].base, read_options(1))
                .await
                .unwrap();
            let bytes = materialize(&outcome.data);
            let served = BatchView::parse_prefix(&bytes).unwrap();
            assert!(served.verify_crc().is_err(), "served as damaged");
            log.close().await.unwrap();
        }
        copy_dir(&pristine, &work);
        edit(&segment_file(&work, "log"), |log| log[flipped] ^= 0x10);
        let log = open(&work, config(), crashed()).await;
        assert_eq!(
            log.log_end_offset(),
            batches[victim].base,
            "a full scan cuts the log at the damaged batch"
        );
        log.close().await.unwrap();
    });
}

/// A new leader epoch that starts after the recovery point: recovered from
/// the checkpoint, or from the batches (below the point as well) when the
/// checkpoint is lost; dropped with the batches cut from a torn tail; and a
/// batch after the point whose epoch contradicts the checkpoint ends the log.
#[test]
fn leader_epochs_of_the_batches_after_the_recovery_point_are_recovered() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let pristine = root.join("pristine-0");
        let new_epoch_from = SYNCED + 10;
        let epoch_of = |i| LeaderEpoch(if i < new_epoch_from { 0 } else { 1 });
        let (batches, recovery_point) = build(&pristine, epoch_of).await;
        let checkpoint = std::fs::read_to_string(pristine.join(EPOCH_CHECKPOINT_FILE)).unwrap();
        let epoch_start = batches[new_epoch_from].base;
        let end = batches[BATCHES - 1].next_offset();
        let work = root.join("work-0");
        for left in [IndexesLeft::Whole, IndexesLeft::Missing] {
            for lose_checkpoint in [false, true] {
                let context = format!("indexes {left:?}, checkpoint lost: {lose_checkpoint}");
                copy_dir(&pristine, &work);
                leave_indexes(&work, left);
                if lose_checkpoint {
                    std::fs::remove_file(work.join(EPOCH_CHECKPOINT_FILE)).unwrap();
                }
                let log = open(&work, config(), crashed_at(recovery_point)).await;
                assert_eq!(log.log_end_offset(), end, "{context}");
                assert_eq!(log.latest_epoch(), Some(LeaderEpoch(1)), "{context}");
                assert_eq!(
                    log.epoch_end_offset(LeaderEpoch(0)),
                    Some((LeaderEpoch(0), epoch_start)),
                    "{context}"
                );
                log.close().await.unwrap();
                assert_eq!(
                    std::fs::read_to_string(work.join(EPOCH_CHECKPOINT_FILE)).unwrap(),
                    checkpoint,
                    "{context}: checkpoint"
                );
            }
        }
        // A tear before the new epoch's first batch takes the epoch with it.
        copy_dir(&pristine, &work);
        let torn = position_of(&batches, SYNCED + 5) + 20;
        edit(&segment_file(&work, "log"), |log| log.truncate(torn));
        let log = open(&work, config(), crashed_at(recovery_point)).await;
        let cut = batches[SYNCED + 5].base;
        assert_eq!(log.log_end_offset(), cut);
        assert_eq!(log.latest_epoch(), Some(LeaderEpoch(0)));
        assert_eq!(
            log.epoch_end_offset(LeaderEpoch(0)),
            Some((LeaderEpoch(0), cut))
        );
        log.close().await.unwrap();
        // The epoch field is outside the CRC: the checkpoint is its check.
        copy_dir(&pristine, &work);
        let contradicting = position_of(&batches, new_epoch_from + 5);
        edit(&segment_file(&work, "log"), |log| {
            log[contradicting + 12..contradicting + 16].copy_from_slice(&0i32.to_be_bytes())
        });
        let log = open(&work, config(), crashed_at(recovery_point)).await;
        assert_eq!(log.log_end_offset(), batches[new_epoch_from + 5].base);
        log.close().await.unwrap();
    });
}
