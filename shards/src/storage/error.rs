//! Storage errors. IO errors carry the operation and the path; batch errors
//! keep their structured cause so the protocol layer can map them to Kafka
//! error codes.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use brook_engine::log::batch::BatchError;
use brook_engine::log::records::RecordsError;
use brook_engine::replica::producer_state::{MarkerError, ProducerError};
use brook_engine::types::{LeaderEpoch, Offset};
use thiserror::Error;

#[derive(Clone, Debug, Error)]
pub enum StorageError {
    #[error("{op} {}: {source}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: Arc<std::io::Error>,
    },
    #[error("invalid record batch: {0}")]
    InvalidBatch(#[from] BatchError),
    #[error("record batch of {size} bytes exceeds max.message.bytes {max}")]
    BatchTooLarge { size: usize, max: u64 },
    #[error("an append needs at least one record batch")]
    EmptyAppend,
    /// Kafka's rule for compacted topics: every record needs a key.
    #[error(
        "compacted topic cannot accept message without key (record {record_index} of its batch)"
    )]
    RecordWithoutKey { record_index: usize },
    #[error("invalid records: {0}")]
    InvalidRecords(RecordsError),
    /// An idempotent producer's batch that its sequence or epoch refuses.
    #[error("{0}")]
    Producer(#[from] ProducerError),
    #[error("a control batch may only be a transaction marker the broker writes")]
    ControlBatchMisplaced,
    /// A marker the partition's producer state refuses.
    #[error("{0}")]
    Marker(#[from] MarkerError),
    #[error(
        "an idempotent producer's batch must be the only one of its append, not one of {batches}"
    )]
    ProducerBatchNotAlone { batches: usize },
    #[error("offset {requested} is out of range [{log_start}, {log_end}]")]
    OffsetOutOfRange {
        requested: Offset,
        log_start: Offset,
        log_end: Offset,
    },
    /// A replicated batch that does not follow the log end (Kafka's
    /// `UnexpectedAppendOffsetException`).
    #[error("a replicated batch starts at {first}, the log expects {expected}")]
    UnexpectedAppendOffset { first: Offset, expected: Offset },
    #[error("leader epoch {epoch} is older than the log's latest epoch {latest}")]
    StaleLeaderEpoch {
        epoch: LeaderEpoch,
        latest: LeaderEpoch,
    },
    #[error("partition log {} is offline after an IO error: {reason}", path.display())]
    Offline { path: PathBuf, reason: String },
    #[error("partition log {} is closed", path.display())]
    Closed { path: PathBuf },
    #[error("{}: {reason}", path.display())]
    Corrupt { path: PathBuf, reason: String },
}

impl StorageError {
    pub(crate) fn io(
        op: &'static str,
        path: &Path,
        source: impl Into<std::io::Error>,
    ) -> StorageError {
        StorageError::Io {
            op,
            path: path.to_owned(),
            source: Arc::new(source.into()),
        }
    }
}

/// `map_err` helper: `.map_err(io_error("writing", &path))`.
pub(crate) fn io_error<'a, E: Into<std::io::Error>>(
    op: &'static str,
    path: &'a Path,
) -> impl FnOnce(E) -> StorageError + 'a {
    move |source| StorageError::io(op, path, source)
}
