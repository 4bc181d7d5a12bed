//! Trusting a segment below the recovery point (or every segment after a
//! clean shutdown) without scanning it: its index files are read whole and
//! checked (sizes, order, bounds, and that the first and last offset entries
//! name batches ending at their offsets), and only the batches after the last
//! offset entry are scanned, which proves the index complete and yields the
//! segment's end. A segment that fails is rebuilt by [`super::scan`].

use std::path::Path;

use brook_engine::log::batch::{BATCH_HEADER_BYTES, BatchHeader};
use brook_engine::log::config::LogConfig;
use brook_engine::log::file_name::SegmentFileKind;
use brook_engine::log::index::{
    IndexError, OffsetIndexEntry, RELATIVE_OFFSET_MAX, TimeIndexEntry, check_offset_index,
    check_time_index,
};
use brook_engine::log::indexer::SegmentIndexer;
use brook_engine::log::recovery::Scanner;
use brook_engine::types::{Offset, TimestampMs};
use glommio::io::DmaFile;

use super::index_files::{index_bytes_max, read_index};
use super::scan::{placement, scan_file};
use super::{Distrust, EpochRecovery, SegmentScan};
use crate::storage::error::{StorageError, io_error};
use crate::storage::files::{open_dma, read_exact, segment_path};

/// Trusts a segment's index files if they pass every check; walks the
/// batches after the last offset entry to find the segment's end.
pub(super) async fn check_segment(
    dir: &Path,
    base: Offset,
    config: &LogConfig,
    epochs: &mut EpochRecovery,
    is_last: bool,
) -> Result<Result<SegmentScan, Distrust>, StorageError> {
    let log_path = segment_path(dir, base, SegmentFileKind::Log);
    let log_file = open_dma(&log_path, false).await?;
    let log_bytes = log_file
        .file_size()
        .await
        .map_err(io_error("sizing", &log_path))?;
    let indexes = async {
        let offset_entries = read_index::<OffsetIndexEntry>(
            &segment_path(dir, base, SegmentFileKind::Index),
            index_bytes_max::<OffsetIndexEntry>(config, log_bytes),
        )
        .await?;
        let time_entries = read_index::<TimeIndexEntry>(
            &segment_path(dir, base, SegmentFileKind::TimeIndex),
            index_bytes_max::<TimeIndexEntry>(config, log_bytes),
        )
        .await?;
        check_offset_index(&offset_entries, log_bytes)
            .map_err(|error| Distrust::Index(error.to_string()))?;
        check_time_index(&time_entries, RELATIVE_OFFSET_MAX)
            .map_err(|error| Distrust::Index(error.to_string()))?;
        Ok::<_, Distrust>((offset_entries, time_entries))
    };
    let (offset_entries, time_entries) = match indexes.await {
        Ok(entries) => entries,
        Err(distrust) => return Ok(Err(distrust)),
    };
    // The last entry's batch is checked by the walk below; the first one's
    // here, with one header read.
    if let Some(error) =
        check_first_entry(&log_file, &log_path, log_bytes, base, &offset_entries).await?
    {
        return Ok(Err(Distrust::Index(error.to_string())));
    }
    let last_entry = offset_entries
        .last()
        .map(|entry| (offset_entries.len() - 1, entry.offset(base)));
    let mut indexer = SegmentIndexer::resume(
        base,
        config.index_interval_bytes,
        offset_entries.last().copied(),
        time_entries.last().copied(),
    );
    let from = indexer.last_indexed_position();
    let checked_epochs = epochs.checked();
    let mut scanner = Scanner::new(
        base,
        (from == 0).then_some(base),
        config.cleanup_policy.contiguity(),
        checked_epochs.as_ref(),
    );
    let mut first_batch_max_timestamp = None;
    let mut missing = None;
    // The batch at the last offset entry was indexed with the running maximum
    // timestamp, so the time index must reach at least its timestamp.
    let last_time_entry = time_entries
        .last()
        .map_or(TimestampMs::NONE, |entry| entry.timestamp());
    let walked = scan_file(
        &log_file,
        &log_path,
        from,
        log_bytes,
        &mut scanner,
        |position, batch| {
            if position == 0 {
                first_batch_max_timestamp = Some(batch.max_timestamp());
            }
            epochs.on_batch(batch);
            let update = indexer.on_batch(placement(position, batch));
            let indexed_batch = position == from && from > 0;
            let time_short = indexed_batch && batch.max_timestamp() > last_time_entry;
            if update.offset_entry.is_some() || update.time_entry.is_some() || time_short {
                missing.get_or_insert(IndexError::MissingEntry { position });
            }
            if let Some((entry, indexed)) = last_entry.filter(|_| indexed_batch) {
                if batch.last_offset() != indexed {
                    missing.get_or_insert(IndexError::BatchMismatch {
                        entry,
                        position,
                        indexed: indexed.0,
                        found: Some(batch.last_offset().0),
                    });
                }
            }
        },
    )
    .await?;
    if let Some(stop) = walked {
        return Ok(Err(Distrust::Log(stop)));
    }
    if let Some(error) = missing {
        return Ok(Err(Distrust::Index(error.to_string())));
    }
    let next_offset = scanner.next_offset().unwrap_or(base);
    let time_past_end = time_entries
        .last()
        .is_some_and(|entry| entry.offset(base) >= next_offset);
    if time_past_end {
        return Ok(Err(Distrust::Index(
            "time index points past the segment".into(),
        )));
    }
    if !is_last && indexer.clone().on_seal().is_some() {
        let expected = indexer.max_timestamp().0;
        return Ok(Err(Distrust::Index(
            IndexError::MissingMaxTimestamp { expected }.to_string(),
        )));
    }
    if first_batch_max_timestamp.is_none() {
        first_batch_max_timestamp =
            first_batch_max_timestamp_of(&log_file, &log_path, log_bytes).await?;
    }
    Ok(Ok(SegmentScan {
        log_file,
        log_bytes,
        next_offset,
        indexer,
        offset_entries,
        time_entries,
        first_batch_max_timestamp,
    }))
}

/// A mismatch if the batch at the first offset entry's position does not end
/// at the entry's offset (or is no batch). An index can pass every check of its own (sorted, inside
/// the log) and still map offsets to the wrong batches, and a read that
/// starts at a later batch than it should skips records.
pub(super) async fn check_first_entry(
    log_file: &DmaFile,
    log_path: &Path,
    log_bytes: u64,
    base: Offset,
    entries: &[OffsetIndexEntry],
) -> Result<Option<IndexError>, StorageError> {
    let Some(entry) = entries.first() else {
        return Ok(None);
    };
    let position = u64::from(entry.position.get());
    let found = if position + BATCH_HEADER_BYTES as u64 <= log_bytes {
        let header = read_exact(log_file, log_path, position, BATCH_HEADER_BYTES).await?;
        BatchHeader::parse(&header)
            .ok()
            .map(|header| header.last_offset().0)
    } else {
        None
    };
    let indexed = entry.offset(base).0;
    Ok(
        (found != Some(indexed)).then_some(IndexError::BatchMismatch {
            entry: 0,
            position,
            indexed,
            found,
        }),
    )
}

/// The largest timestamp of the segment's first batch, from its header;
/// `None` if the segment is empty or its first header unreadable.
pub(super) async fn first_batch_max_timestamp_of(
    log_file: &DmaFile,
    log_path: &Path,
    log_bytes: u64,
) -> Result<Option<TimestampMs>, StorageError> {
    if log_bytes < BATCH_HEADER_BYTES as u64 {
        return Ok(None);
    }
    let header = read_exact(log_file, log_path, 0, BATCH_HEADER_BYTES).await?;
    Ok(BatchHeader::parse(&header)
        .ok()
        .map(|header| header.max_timestamp()))
}
