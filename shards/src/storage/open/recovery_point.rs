//! Where the scan of a segment starts. In the segment holding the recovery
//! point, the batches below the point were synced before it was
//! checkpointed: their index entries are kept from the segment's own index
//! files where those still hold them, the headers of the rest are walked
//! (no CRCs), and the scan starts at the first batch not below the point, as
//! Kafka's log loader recovers only from the recovery point on. Every other
//! segment is scanned from its first batch.

use std::path::Path;

use brook_engine::log::batch::{BATCH_HEADER_BYTES, BatchHeader};
use brook_engine::log::config::LogConfig;
use brook_engine::log::epoch_cache::LeaderEpochCache;
use brook_engine::log::file_name::SegmentFileKind;
use brook_engine::log::index::{OffsetIndexEntry, TimeIndexEntry};
use brook_engine::log::indexer::{BatchPlacement, SegmentIndexer};
use brook_engine::log::recovery::{HeaderWalk, Scanner, WalkStep, index_resume};
use brook_engine::types::Offset;

use super::check::{check_first_entry, first_batch_max_timestamp_of};
use super::index_files::{index_bytes_max, read_index_prefix};
use super::{EpochRecovery, LogFile, RebuiltIndexes, SCAN_BATCH_BYTES_MAX, ScanTarget};
use crate::storage::error::StorageError;
use crate::storage::files::{read_exact, segment_path};

/// Where the scan of a segment starts, with its scanner and the index
/// entries rebuilt before that point: the segment's first batch, or in the
/// segment holding the recovery point the first batch not below it.
pub(super) async fn scan_start<'a>(
    dir: &Path,
    target: &ScanTarget,
    config: &LogConfig,
    log: &LogFile<'_>,
    epochs: &mut EpochRecovery,
    checked_epochs: Option<&'a LeaderEpochCache>,
) -> Result<(u64, Scanner<'a>, RebuiltIndexes), StorageError> {
    let base = target.base;
    let below = target.recovery_point.filter(|point| *point > base);
    // A lost leader-epoch checkpoint is rebuilt from every batch, so the
    // walk then starts at the segment's first one.
    let resumed = match below {
        Some(point) if !epochs.rebuild => {
            resume_from_indexes(dir, base, config, log, point).await?
        }
        _ => None,
    };
    let (from, next_offset, mut rebuilt) = match resumed {
        Some(resumed) => (resumed.position, resumed.next_offset, resumed.rebuilt),
        None => (
            0,
            target.expected.unwrap_or(base),
            RebuiltIndexes::new(base, config.index_interval_bytes),
        ),
    };
    let scanner = Scanner::new(
        base,
        Some(next_offset),
        config.cleanup_policy.contiguity(),
        checked_epochs,
    );
    let Some(point) = below else {
        return Ok((from, scanner, rebuilt));
    };
    let (from, scanner) = walk_headers(log, from, point, scanner, epochs, &mut rebuilt).await?;
    Ok((from, scanner, rebuilt))
}

/// Where [`resume_from_indexes`] lets the header walk start.
struct Resumed {
    /// Right after the batch the last offset entry kept names.
    position: u64,
    /// The offset after that batch.
    next_offset: Offset,
    rebuilt: RebuiltIndexes,
}

/// What the index files of the segment holding the recovery point still
/// hold for its batches below the point: the entries [`index_resume`] keeps,
/// and the indexer's state right after the batch the last offset entry
/// names, where the header walk starts (replaying that batch would change
/// nothing). `None` (start at the first batch) unless the batches at the
/// first and the last entry kept end at their offsets and lie whole in the
/// log, and the first batch's header reads.
async fn resume_from_indexes(
    dir: &Path,
    base: Offset,
    config: &LogConfig,
    log: &LogFile<'_>,
    recovery_point: Offset,
) -> Result<Option<Resumed>, StorageError> {
    let offset_entries = read_index_prefix::<OffsetIndexEntry>(
        &segment_path(dir, base, SegmentFileKind::Index),
        index_bytes_max::<OffsetIndexEntry>(config, log.bytes),
    )
    .await;
    let time_entries = read_index_prefix::<TimeIndexEntry>(
        &segment_path(dir, base, SegmentFileKind::TimeIndex),
        index_bytes_max::<TimeIndexEntry>(config, log.bytes),
    )
    .await;
    let Some(resume) = index_resume(
        base,
        recovery_point,
        log.bytes,
        &offset_entries,
        &time_entries,
    ) else {
        return Ok(None);
    };
    let kept = &offset_entries[..resume.offset_entries];
    let Some(last) = kept.last().copied() else {
        return Ok(None);
    };
    if let Some(error) = check_first_entry(log.file, log.path, log.bytes, base, kept).await? {
        tracing::warn!(path = %log.path.display(), %error, "not resuming from the segment's index");
        return Ok(None);
    }
    let position = u64::from(last.position.get());
    let Some(end) = batch_end(log, position, last.offset(base)).await? else {
        tracing::warn!(path = %log.path.display(), position, "not resuming from the segment's index: its last entry names no whole batch");
        return Ok(None);
    };
    let Some(first_timestamp) = first_batch_max_timestamp_of(log.file, log.path, log.bytes).await?
    else {
        return Ok(None);
    };
    let time_entries = time_entries[..resume.time_entries].to_vec();
    let rebuilt = RebuiltIndexes {
        indexer: SegmentIndexer::resume(
            base,
            config.index_interval_bytes,
            Some(last),
            time_entries.last().copied(),
        ),
        offset_entries: kept.to_vec(),
        time_entries,
        first_batch_max_timestamp: Some(first_timestamp),
    };
    Ok(Some(Resumed {
        position: end,
        next_offset: last.offset(base).next(),
        rebuilt,
    }))
}

/// Where the batch at `position` ends, if a batch ending at `last_offset`
/// lies whole there.
async fn batch_end(
    log: &LogFile<'_>,
    position: u64,
    last_offset: Offset,
) -> Result<Option<u64>, StorageError> {
    if position + BATCH_HEADER_BYTES as u64 > log.bytes {
        return Ok(None);
    }
    let header = read_exact(log.file, log.path, position, BATCH_HEADER_BYTES).await?;
    Ok(BatchHeader::parse(&header).ok().and_then(|header| {
        let size = header.size_bytes();
        let whole = size <= SCAN_BATCH_BYTES_MAX && position + size as u64 <= log.bytes;
        (whole && header.last_offset() == last_offset).then_some(position + size as u64)
    }))
}

/// Walks the headers of the batches from `from` that end below the
/// recovery point (see [`HeaderWalk`]), indexing them and rebuilding their
/// epochs; returns where the full scan starts and the scanner for it.
async fn walk_headers<'a>(
    log: &LogFile<'_>,
    from: u64,
    recovery_point: Offset,
    scanner: Scanner<'a>,
    epochs: &mut EpochRecovery,
    rebuilt: &mut RebuiltIndexes,
) -> Result<(u64, Scanner<'a>), StorageError> {
    let mut walk = HeaderWalk::new(
        scanner,
        from,
        log.bytes,
        recovery_point,
        SCAN_BATCH_BYTES_MAX,
    );
    // Each read holds at least one whole header, which the walk either
    // steps over or stops at.
    let reads_max = log.bytes / BATCH_HEADER_BYTES as u64 + 1;
    for _ in 0..reads_max {
        let WalkStep::Read { position, len } = walk.step() else {
            break;
        };
        let bytes = read_exact(log.file, log.path, position, len).await?;
        #[cfg(test)]
        super::tests::RECOVERY_READS.with_borrow_mut(|reads| {
            reads.push((
                log.path.to_owned(),
                super::tests::ReadKind::Walk,
                position..position + len as u64,
            ))
        });
        walk.feed(position, &bytes, |position, header| {
            epochs.on_header(header);
            rebuilt.on_batch(BatchPlacement {
                position,
                last_offset: header.last_offset(),
                max_timestamp: header.max_timestamp(),
            });
        });
    }
    assert!(
        matches!(walk.step(), WalkStep::Trusted { .. }),
        "every read moves the walk on"
    );
    Ok(walk.into_scanner())
}
