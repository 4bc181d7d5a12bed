//! A segment's index files while its log opens: read whole (bounded by what
//! the segment's `.log` and `segment.index.bytes` allow, so a damaged file is
//! never read into memory), read as far as a crash left them whole, and
//! rewritten after a rebuild.

use std::path::Path;

use brook_engine::log::batch::BATCH_HEADER_BYTES;
use brook_engine::log::config::LogConfig;
use brook_engine::log::index::{IndexEntry, entries_from_bytes};
use glommio::io::ReadResult;

use super::Distrust;
use crate::storage::appender::{ChunkSizing, PageAppender};
use crate::storage::error::StorageError;
use crate::storage::files::{FileAccess, create_dma, open_dma, read_exact, release, trim_and_sync};

/// The largest index file of kind `E` a segment whose `.log` holds
/// `log_bytes` can have; a larger one is damaged and is rebuilt, never read
/// into memory. A roll keeps an index within `segment.index.bytes` (sealing
/// adds one final time entry); the default also bounds older indexes written
/// before the setting was lowered. Each entry marks a distinct batch, so the
/// log's size bounds the count as well.
pub(super) fn index_bytes_max<E: IndexEntry>(config: &LogConfig, log_bytes: u64) -> u64 {
    let entry_bytes = E::BYTES as u64;
    let by_config = config
        .segment_index_bytes
        .max(LogConfig::default().segment_index_bytes)
        .saturating_add(entry_bytes);
    let by_log = (log_bytes / BATCH_HEADER_BYTES as u64 + 1) * entry_bytes;
    by_config.min(by_log)
}

/// Reads a whole index file of at most `bytes_max` bytes.
pub(super) async fn read_index<E: IndexEntry>(
    path: &Path,
    bytes_max: u64,
) -> Result<Vec<E>, Distrust> {
    let bytes = read_index_bytes(path, bytes_max)
        .await
        .map_err(Distrust::Index)?;
    let entries =
        entries_from_bytes::<E>(&bytes).map_err(|error| Distrust::Index(error.to_string()))?;
    Ok(entries.to_vec())
}

/// The whole entries at the start of an index file that a crash may have
/// left short or padded: nothing if it is missing, unreadable or too large.
pub(super) async fn read_index_prefix<E: IndexEntry>(path: &Path, bytes_max: u64) -> Vec<E> {
    match read_index_bytes(path, bytes_max).await {
        Ok(bytes) => {
            let whole = bytes.len() - bytes.len() % E::BYTES;
            entries_from_bytes::<E>(&bytes[..whole])
                .expect("a whole number of entries is never partial")
                .to_vec()
        }
        Err(reason) => {
            tracing::debug!(path = %path.display(), %reason, "not resuming from an index file");
            Vec::new()
        }
    }
}

/// The bytes of an index file of at most `bytes_max` bytes, or why not.
async fn read_index_bytes(path: &Path, bytes_max: u64) -> Result<ReadResult, String> {
    if !path.exists() {
        return Err(format!("{} is missing", path.display()));
    }
    let file = open_dma(path, false)
        .await
        .map_err(|error| error.to_string())?;
    let bytes = async {
        let len = file
            .file_size()
            .await
            .map_err(|error| StorageError::io("sizing", path, error).to_string())?;
        if len > bytes_max {
            return Err(format!(
                "{} holds {len} bytes, more than the {bytes_max} its segment allows",
                path.display()
            ));
        }
        read_exact(&file, path, 0, len as usize)
            .await
            .map_err(|error| error.to_string())
    }
    .await;
    let _ = file.close_rc().await;
    bytes
}

/// Replaces an index file with exactly `bytes`, synced.
pub(super) async fn write_index(path: &Path, bytes: &[u8]) -> Result<(), StorageError> {
    let file = FileAccess::Open(create_dma(path).await?);
    let mut appender = PageAppender::new(
        file.clone(),
        path.to_owned(),
        0,
        Vec::new(),
        ChunkSizing::INDEX,
    );
    appender.append(&[bytes]);
    appender.write_all().await?;
    drop(appender);
    let file = trim_and_sync(&(file, path.to_owned(), bytes.len() as u64)).await?;
    release(file, path).await
}
