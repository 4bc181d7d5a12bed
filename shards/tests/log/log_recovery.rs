//! Acceptance 3 of the storage engine: a torn or corrupted last batch leaves
//! exactly the valid prefix after reopening; deleted or truncated index files
//! are rebuilt byte-identical.

use std::path::{Path, PathBuf};

use brook_engine::log::config::LogConfig;
use brook_engine::types::Offset;
use brook_shards::runtime::block_on;
use brook_shards::storage::PartitionLog;

use crate::common::*;

fn file_with_extension(dir: &Path, base: Offset, extension: &str) -> PathBuf {
    dir.join(format!("{:020}.{extension}", base.0))
}

fn truncate(path: &Path, len: u64) {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

fn flip(path: &Path, position: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[position] ^= 0xff;
    std::fs::write(path, bytes).unwrap();
}

/// Appends `batches` batches of three records, closes cleanly, and returns
/// every batch's placed bytes.
async fn build(dir: &Path, config: LogConfig, batches: usize) -> Vec<(Offset, Vec<u8>)> {
    let log = open(dir, config, crashed()).await;
    let mut placed_batches = Vec::new();
    for i in 0..batches {
        let bytes = batch(3, 40 + i % 7, 1_700_000_000_000 + i as i64 * 10);
        let info = log.append(&bytes, EPOCH, now_ms()).await.unwrap();
        placed_batches.push((info.base_offset, placed(&bytes, info.base_offset, EPOCH)));
    }
    log.close().await.unwrap();
    placed_batches
}

fn concat(batches: &[(Offset, Vec<u8>)]) -> Vec<u8> {
    batches
        .iter()
        .flat_map(|(_, bytes)| bytes.iter().copied())
        .collect()
}

async fn expect_prefix(
    dir: &Path,
    config: &LogConfig,
    prefix: &[(Offset, Vec<u8>)],
    context: &str,
) -> PartitionLog {
    let log = open(dir, config.clone(), crashed()).await;
    let end = prefix
        .last()
        .map_or(Offset(0), |(base, _)| Offset(base.0 + 3));
    assert_eq!(log.log_end_offset(), end, "{context}: log end");
    let bytes = read_all(&log, Offset(0), 1 << 20, false).await.unwrap();
    assert_bytes_eq(&bytes, &concat(prefix), context);
    log
}

#[test]
fn every_truncation_and_every_flipped_byte_of_the_last_batch_leaves_the_valid_prefix() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let pristine = root.join("pristine-0");
        let work = root.join("work-0");
        let config = LogConfig::default();
        let batches = build(&pristine, config.clone(), 6).await;
        let (last_base, last) = batches.last().unwrap().clone();
        let log_bytes = concat(&batches).len();
        let last_start = log_bytes - last.len();
        let log_file = file_with_extension(&work, Offset(0), "log");
        for cut in last_start..log_bytes {
            copy_dir(&pristine, &work);
            truncate(&log_file, cut as u64);
            let log = expect_prefix(&work, &config, &batches[..5], &format!("cut at {cut}")).await;
            log.close().await.unwrap();
            assert_eq!(
                std::fs::metadata(&log_file).unwrap().len() as usize,
                last_start,
                "cut at {cut}: torn bytes removed"
            );
        }
        for position in last_start..log_bytes {
            copy_dir(&pristine, &work);
            flip(&log_file, position);
            let log = expect_prefix(
                &work,
                &config,
                &batches[..5],
                &format!("flip at {position}"),
            )
            .await;
            // The log goes on from the prefix.
            let info = log.append(&batch(1, 5, 1), EPOCH, now_ms()).await.unwrap();
            assert_eq!(info.base_offset, last_base);
            log.close().await.unwrap();
        }
    });
}

#[test]
fn a_corrupt_batch_in_a_sealed_segment_ends_the_log_there() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let dir = root.join("sealed-0");
        let config = small_segments(1500);
        let batches = build(&dir, config.clone(), 40).await;
        let bases = segment_bases(&dir);
        assert!(bases.len() >= 4, "several segments: {bases:?}");
        // The last batch of the second segment.
        let victim = batches
            .iter()
            .rposition(|(base, _)| *base < bases[2])
            .unwrap();
        let segment_file = file_with_extension(&dir, bases[1], "log");
        let segment_bytes = std::fs::metadata(&segment_file).unwrap().len() as usize;
        flip(&segment_file, segment_bytes - 3);
        let log = expect_prefix(&dir, &config, &batches[..victim], "corrupt sealed segment").await;
        assert_eq!(
            segment_bases(&dir),
            bases[..2].to_vec(),
            "later segments are deleted"
        );
        log.close().await.unwrap();
    });
}

/// All index files of `dir`, by name.
fn index_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap())
        .filter(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            name.ends_with(".index") || name.ends_with(".timeindex")
        })
        .map(|entry| {
            (
                entry.file_name().to_string_lossy().into_owned(),
                std::fs::read(entry.path()).unwrap(),
            )
        })
        .collect();
    files.sort();
    files
}

#[test]
fn deleted_or_truncated_indexes_are_rebuilt_identically() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let pristine = root.join("pristine-0");
        let work = root.join("work-0");
        let config = LogConfig {
            segment_bytes: 6000,
            index_interval_bytes: 300,
            ..LogConfig::default()
        };
        build(&pristine, config.clone(), 100).await;
        let expected = index_files(&pristine);
        let bases = segment_bases(&pristine);
        assert!(
            bases.len() >= 3 && expected.iter().all(|(_, bytes)| !bytes.is_empty()),
            "indexes with entries"
        );
        // Every index file deleted in turn, then every truncation of one sealed
        // segment's indexes and of the active segment's.
        let mut damages: Vec<(String, Option<u64>)> = expected
            .iter()
            .map(|(name, _)| (name.clone(), None))
            .collect();
        for base in [bases[1], *bases.last().unwrap()] {
            for extension in ["index", "timeindex"] {
                let name = format!("{:020}.{extension}", base.0);
                let len = expected
                    .iter()
                    .find(|(file, _)| *file == name)
                    .unwrap()
                    .1
                    .len() as u64;
                damages.extend((0..len).map(|cut| (name.clone(), Some(cut))));
            }
        }
        for (name, cut) in damages {
            copy_dir(&pristine, &work);
            match cut {
                None => std::fs::remove_file(work.join(&name)).unwrap(),
                Some(cut) => truncate(&work.join(&name), cut),
            }
            let log = open(&work, config.clone(), clean()).await;
            log.close().await.unwrap();
            let rebuilt = index_files(&work);
            assert!(
                rebuilt == expected,
                "{name} cut at {cut:?}: rebuilt indexes differ"
            );
        }
    });
}

/// The files a kill -9 leaves after a roll but before the old segment was
/// trimmed (sealed): its `.log` still ends in zeros, the padding of its last
/// O_DIRECT page or, past it, the space reserved ahead of its appends, while
/// the new segment already holds acknowledged batches.
#[test]
fn zeros_left_by_a_crash_during_a_roll_lose_nothing() {
    let root = tempfile::tempdir().unwrap();
    for (case, reserved) in [("padding", 0u64), ("reserve", 2 << 20)] {
        let dir = root.path().join(format!("{case}-0"));
        block_on(async move {
            let (bases, sealed, len, end, before) = roll_and_pad(&dir, reserved, false).await;
            let log = open(&dir, small_segments(1500), crashed()).await;
            assert_eq!(segment_bases(&dir), bases, "{case}: no segment was deleted");
            assert_eq!(log.log_end_offset(), end, "{case}");
            assert_eq!(
                std::fs::metadata(&sealed).unwrap().len(),
                len,
                "{case}: zeros trimmed"
            );
            assert_bytes_eq(
                &read_all(&log, Offset(0), 1 << 20, false).await.unwrap(),
                &before,
                &format!("{case}: after reopen"),
            );
        });
    }
}

/// Zeros after a sealed segment's last batch with anything else after them
/// (here a byte at the end of 2 MiB) are damage, not reserved space: the
/// segment is cut after its last batch and the later segments go.
#[test]
fn zeros_followed_by_other_bytes_are_damage() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("damaged-0");
    block_on(async move {
        let (bases, sealed, len, end, _) = roll_and_pad(&dir, 2 << 20, true).await;
        let log = open(&dir, small_segments(1500), crashed()).await;
        let kept = segment_bases(&dir);
        assert_eq!(kept, bases[..bases.len() - 1], "the segments after it went");
        assert!(log.log_end_offset() < end);
        assert_eq!(std::fs::metadata(&sealed).unwrap().len(), len, "cut");
    });
}

/// Appends across several rolls, closes, and extends the last sealed
/// segment's `.log` past its partial last page by `reserved` bytes of zeros
/// (and a 1 at the very end if `damaged`). Returns the segment bases, that
/// `.log`, its length, the log end and the log's bytes.
async fn roll_and_pad(
    dir: &Path,
    reserved: u64,
    damaged: bool,
) -> (Vec<Offset>, PathBuf, u64, Offset, Vec<u8>) {
    let log = open(dir, small_segments(1500), crashed()).await;
    for i in 0..40 {
        let bytes = batch(3, 40, 1_700_000_000_000 + i * 10);
        log.append(&bytes, EPOCH, now_ms()).await.unwrap();
    }
    log.flush().await.unwrap();
    let end = log.log_end_offset();
    let before = read_all(&log, Offset(0), 1 << 20, false).await.unwrap();
    log.close().await.unwrap();
    let bases = segment_bases(dir);
    assert!(bases.len() > 3, "several rolls: {bases:?}");
    let sealed = file_with_extension(dir, bases[bases.len() - 2], "log");
    let len = std::fs::metadata(&sealed).unwrap().len();
    assert_ne!(len % 4096, 0, "the test needs a partial last page");
    let padded = len.next_multiple_of(4096) + reserved;
    truncate(&sealed, padded);
    if damaged {
        let mut bytes = std::fs::read(&sealed).unwrap();
        bytes[padded as usize - 1] = 1;
        std::fs::write(&sealed, bytes).unwrap();
    }
    (bases, sealed, len, end, before)
}

/// The active segment's `.log` is reserved ahead of its appends (its size
/// on disk passes its last batch), so the files as a kill -9 finds them end
/// in zeros: reopened, the log ends at its last batch, loses nothing, and
/// the file is trimmed back to it.
#[test]
fn space_reserved_ahead_of_the_appends_is_trimmed_after_a_crash() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("live-0");
    let image = root.path().join("image").join("live-0");
    block_on(async move {
        let config = LogConfig::default();
        let log = open(&dir, config.clone(), crashed()).await;
        for i in 0..100 {
            let bytes = batch(3, 1000, 1_700_000_000_000 + i * 10);
            log.append(&bytes, EPOCH, now_ms()).await.unwrap();
        }
        let end = log.flush().await.unwrap();
        let before = read_all(&log, Offset(0), 1 << 20, false).await.unwrap();
        let active = file_with_extension(&dir, Offset(0), "log");
        let reserved = async {
            loop {
                let size = std::fs::metadata(&active).unwrap().len();
                // Past the padding of the last page too.
                if size > (before.len() as u64).next_multiple_of(4096) {
                    return size;
                }
                glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
            }
        };
        let size = glommio::timer::timeout(std::time::Duration::from_secs(10), async {
            Ok(reserved.await)
        })
        .await
        .expect("the .log is reserved past its data");
        std::fs::create_dir_all(&image).unwrap();
        for entry in std::fs::read_dir(&dir).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), image.join(entry.file_name())).unwrap();
        }
        log.close().await.unwrap();
        assert_eq!(
            std::fs::metadata(&active).unwrap().len(),
            before.len() as u64,
            "a clean close trims the reserve"
        );
        let copied = file_with_extension(&image, Offset(0), "log");
        assert_eq!(std::fs::metadata(&copied).unwrap().len(), size);
        let log = open(&image, config, crashed()).await;
        assert_eq!(log.log_end_offset(), end);
        assert_eq!(
            std::fs::metadata(&copied).unwrap().len(),
            before.len() as u64,
            "the reserve is trimmed"
        );
        assert_bytes_eq(
            &read_all(&log, Offset(0), 1 << 20, false).await.unwrap(),
            &before,
            "after reopen",
        );
        log.close().await.unwrap();
    });
}

/// A lost leader-epoch checkpoint is rebuilt from the batches of every
/// segment scanned, not just the first, so a later epoch is not "damage".
#[test]
fn a_lost_epoch_checkpoint_is_rebuilt_across_segments() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("e-0");
    block_on(async move {
        let config = small_segments(1500);
        let log = open(&dir, config.clone(), crashed()).await;
        for i in 0..40 {
            let epoch = brook_engine::types::LeaderEpoch(if i < 20 { 0 } else { 1 });
            let bytes = batch(3, 40, 1_700_000_000_000 + i * 10);
            log.append(&bytes, epoch, now_ms()).await.unwrap();
        }
        let end = log.log_end_offset();
        log.close().await.unwrap();
        std::fs::remove_file(dir.join("leader-epoch-checkpoint")).unwrap();
        let log = open(&dir, config, crashed()).await;
        assert_eq!(log.log_end_offset(), end);
    });
}

/// Rewrites every entry of an offset index with `edit`.
fn edit_offset_index(path: &Path, edit: impl Fn(u32, u32) -> (u32, u32)) {
    let bytes: Vec<u8> = std::fs::read(path)
        .unwrap()
        .chunks(8)
        .flat_map(|entry| {
            let relative = u32::from_be_bytes(entry[..4].try_into().unwrap());
            let position = u32::from_be_bytes(entry[4..].try_into().unwrap());
            let (relative, position) = edit(relative, position);
            [relative.to_be_bytes(), position.to_be_bytes()].concat()
        })
        .collect();
    std::fs::write(path, bytes).unwrap();
}

/// An offset index that is sorted and stays inside its log but maps offsets
/// to the wrong batches passes every check of its own; open compares its
/// first and last entries with the batches there and rebuilds it.
#[test]
fn an_index_mapping_offsets_to_the_wrong_batches_is_rebuilt() {
    let root = tempfile::tempdir().unwrap();
    let root = root.path().to_owned();
    block_on(async move {
        let pristine = root.join("pristine-0");
        let work = root.join("work-0");
        let config = LogConfig {
            segment_bytes: 6000,
            index_interval_bytes: 300,
            ..LogConfig::default()
        };
        let batches = build(&pristine, config.clone(), 100).await;
        let expected = index_files(&pristine);
        let bases = segment_bases(&pristine);
        // Each entry claims the batch before the one it points at (batches
        // hold three records), in a sealed segment and in the active one;
        // or, at the same offsets, points a byte into its batch.
        type Edit = fn(u32, u32) -> (u32, u32);
        let edits: [(&str, Edit); 2] = [
            ("offsets one batch early", |relative, position| {
                (relative - 3, position)
            }),
            ("positions a byte late", |relative, position| {
                (relative, position + 1)
            }),
        ];
        for (name, edit) in edits {
            for base in [bases[1], *bases.last().unwrap()] {
                copy_dir(&pristine, &work);
                edit_offset_index(&file_with_extension(&work, base, "index"), edit);
                let log = open(&work, config.clone(), clean()).await;
                let bytes = read_all(&log, Offset(0), 1 << 20, false).await.unwrap();
                assert_bytes_eq(&bytes, &concat(&batches), name);
                log.close().await.unwrap();
                assert!(
                    index_files(&work) == expected,
                    "{name} in segment {base}: the index was not rebuilt"
                );
            }
        }
    });
}
