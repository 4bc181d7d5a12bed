//! Recovering a segment from its `.log` after an unclean shutdown (or when
//! its index files fail [`super::check`]): every batch from where the scan
//! starts is read whole and its CRC checked, the first invalid batch ends the
//! log (its segment is truncated there), and the index files are rewritten
//! from what was read.

use std::path::Path;

use brook_engine::log::batch::BatchView;
use brook_engine::log::config::LogConfig;
use brook_engine::log::file_name::SegmentFileKind;
use brook_engine::log::indexer::BatchPlacement;
use brook_engine::log::recovery::{ScanEnd, ScanStop, Scanner, is_unwritten_tail};
use glommio::io::DmaFile;
use zerocopy::IntoBytes;

use super::index_files::write_index;
use super::recovery_point::scan_start;
use super::{
    EpochRecovery, LogFile, SCAN_BATCH_BYTES_MAX, SCAN_CHUNK_BYTES, ScanTarget, SegmentScan,
};
use crate::storage::error::{StorageError, io_error};
use crate::storage::files::{open_dma, read_exact, segment_path};

/// Recovers a segment: truncates it after its last valid batch and rewrites
/// its index files (with the final time entry of a sealed segment when
/// nothing was cut). Every batch is scanned whole, except in the segment
/// holding the recovery point, whose batches below it only have their
/// headers walked (see
/// [`HeaderWalk`](brook_engine::log::recovery::HeaderWalk)). Returns the scan and whether bytes
/// were cut.
pub(super) async fn scan_segment(
    dir: &Path,
    target: ScanTarget,
    config: &LogConfig,
    epochs: &mut EpochRecovery,
) -> Result<(SegmentScan, bool), StorageError> {
    let base = target.base;
    let log_path = segment_path(dir, base, SegmentFileKind::Log);
    let log_file = open_dma(&log_path, false).await?;
    let file_bytes = log_file
        .file_size()
        .await
        .map_err(io_error("sizing", &log_path))?;
    let log = LogFile {
        file: &log_file,
        path: &log_path,
        bytes: file_bytes,
    };
    let checked_epochs = epochs.checked();
    let (from, mut scanner, mut rebuilt) =
        scan_start(dir, &target, config, &log, epochs, checked_epochs.as_ref()).await?;
    if from > 0 {
        tracing::debug!(path = %log_path.display(), trusted_bytes = from, file_bytes, "scanning from the recovery point");
    }
    let mut valid_bytes = from;
    let stop = scan_file(
        &log_file,
        &log_path,
        from,
        file_bytes,
        &mut scanner,
        |position, batch| {
            epochs.on_batch(batch);
            rebuilt.on_batch(placement(position, batch));
            valid_bytes = position + batch.size_bytes() as u64;
        },
    )
    .await?;
    let cut = valid_bytes < file_bytes;
    let unwritten = cut && tail_is_unwritten(&log_file, &log_path, valid_bytes, file_bytes).await?;
    // Only damage truncates the log; the page padding or reserved space a
    // crash left after the last batch is just trimmed.
    let truncated = cut && !unwritten;
    if target.sealed && !truncated {
        rebuilt.time_entries.extend(rebuilt.indexer.on_seal());
    }
    if cut {
        if unwritten {
            // What an unclean stop normally leaves: space written as zeros
            // or reserved past the last batch, never acknowledged data.
            tracing::info!(path = %log_path.display(), valid_bytes, file_bytes, "trimming the unwritten tail an unclean stop left after the last batch (expected)");
        } else {
            let reason = stop.map_or_else(|| "trailing bytes".to_owned(), |stop| stop.to_string());
            tracing::warn!(path = %log_path.display(), valid_bytes, file_bytes, %reason, "truncating log after its last valid batch");
        }
        log_file
            .truncate(valid_bytes)
            .await
            .map_err(io_error("truncating", &log_path))?;
    }
    log_file
        .fdatasync()
        .await
        .map_err(io_error("syncing", &log_path))?;
    write_index(
        &segment_path(dir, base, SegmentFileKind::Index),
        rebuilt.offset_entries.as_bytes(),
    )
    .await?;
    write_index(
        &segment_path(dir, base, SegmentFileKind::TimeIndex),
        rebuilt.time_entries.as_bytes(),
    )
    .await?;
    let next_offset = scanner.next_offset().unwrap_or(base);
    let scan = SegmentScan {
        log_file,
        log_bytes: valid_bytes,
        next_offset,
        indexer: rebuilt.indexer,
        offset_entries: rebuilt.offset_entries,
        time_entries: rebuilt.time_entries,
        first_batch_max_timestamp: rebuilt.first_batch_max_timestamp,
    };
    Ok((scan, truncated))
}

/// Whether `[from, size)` of a log holds only zeros (see
/// [`is_unwritten_tail`]), read a chunk at a time up to the first that
/// does not.
async fn tail_is_unwritten(
    file: &DmaFile,
    path: &Path,
    from: u64,
    size: u64,
) -> Result<bool, StorageError> {
    let mut position = from;
    while position < size {
        let want = (SCAN_CHUNK_BYTES as u64).min(size - position);
        let piece = read_exact(file, path, position, want as usize).await?;
        if !is_unwritten_tail(&piece) {
            return Ok(false);
        }
        position += want;
    }
    Ok(true)
}

/// Feeds `[from, size)` of a log to `scanner`; returns why it stopped early.
pub(super) async fn scan_file(
    file: &DmaFile,
    path: &Path,
    from: u64,
    size: u64,
    scanner: &mut Scanner<'_>,
    mut visit: impl FnMut(u64, &BatchView<'_>),
) -> Result<Option<ScanStop>, StorageError> {
    let mut position = from;
    let mut needed = SCAN_CHUNK_BYTES;
    while position < size {
        let want = (needed.max(SCAN_CHUNK_BYTES) as u64).min(size - position);
        let bytes = read_exact(file, path, position, want as usize).await?;
        #[cfg(test)]
        super::tests::RECOVERY_READS.with_borrow_mut(|reads| {
            reads.push((
                path.to_owned(),
                super::tests::ReadKind::Scan,
                position..position + want,
            ))
        });
        let at_end = position + want == size;
        let outcome = scanner.scan(position, &bytes, at_end, &mut visit);
        position += outcome.valid_bytes as u64;
        match outcome.end {
            ScanEnd::Exhausted => needed = SCAN_CHUNK_BYTES,
            ScanEnd::NeedMore { batch_bytes } if batch_bytes <= SCAN_BATCH_BYTES_MAX => {
                needed = batch_bytes
            }
            ScanEnd::NeedMore { batch_bytes } => {
                let error = brook_engine::log::batch::BatchError::LengthOutOfBounds {
                    declared: batch_bytes as i64,
                    min: 0,
                    max: SCAN_BATCH_BYTES_MAX as i64,
                };
                return Ok(Some(ScanStop::InvalidBatch { position, error }));
            }
            ScanEnd::Invalid(stop) => return Ok(Some(stop)),
        }
    }
    Ok(None)
}

pub(super) fn placement(position: u64, batch: &BatchView<'_>) -> BatchPlacement {
    BatchPlacement {
        position,
        last_offset: batch.last_offset(),
        max_timestamp: batch.max_timestamp(),
    }
}
