//! Fetched records crossing from the shard that owns a partition to the
//! shard of the connection that asked: memory is copied once into shared
//! bytes, a file range travels as a duplicated descriptor.

use std::rc::Rc;

use brook_engine::protocol::errors::ErrorCode;
use bytes::Bytes;

use super::Fetched;
use crate::server::response::Records;

/// Records that can move to another shard: memory is copied once, a file
/// range travels as a duplicated descriptor.
pub(super) enum SendableRecords {
    Bytes(Bytes),
    File {
        file: std::fs::File,
        position: u64,
        len: u64,
        read_ahead: std::ops::Range<u64>,
    },
}

impl<R> Fetched<R> {
    /// The same answer with its records (if any) turned by `turn`; an
    /// error from `turn` becomes the partition's error.
    fn try_map_records<S>(self, turn: impl FnOnce(R) -> Result<S, ErrorCode>) -> Fetched<S> {
        match self {
            Fetched::Error(error) => Fetched::Error(error),
            Fetched::Elsewhere(elsewhere) => Fetched::Elsewhere(elsewhere),
            Fetched::Data {
                high_watermark,
                last_stable_offset,
                log_start_offset,
                aborted,
                diverging_epoch,
                records,
            } => match records.map(turn).transpose() {
                Ok(records) => Fetched::Data {
                    high_watermark,
                    last_stable_offset,
                    log_start_offset,
                    aborted,
                    diverging_epoch,
                    records,
                },
                Err(error) => Fetched::Error(error),
            },
        }
    }
}

/// Makes a read sendable to another shard (on the owning shard).
pub(super) fn sendable(fetched: Fetched<Records>) -> Fetched<SendableRecords> {
    fetched.try_map_records(|records| match records {
        Records::Local(pieces) => {
            let mut bytes = Vec::with_capacity(pieces.iter().map(|piece| piece.len()).sum());
            pieces
                .iter()
                .for_each(|piece| bytes.extend_from_slice(piece));
            Ok(SendableRecords::Bytes(Bytes::from(bytes)))
        }
        Records::Owned(bytes) => Ok(SendableRecords::Bytes(bytes)),
        Records::File {
            file,
            position,
            len,
            read_ahead,
        } => match file.try_clone() {
            Ok(file) => Ok(SendableRecords::File {
                file,
                position,
                len,
                read_ahead,
            }),
            Err(error) => {
                tracing::error!(%error, "duplicating a segment descriptor failed");
                Err(ErrorCode::KAFKA_STORAGE_ERROR)
            }
        },
    })
}

/// The other side of [`sendable`], on the connection's shard.
pub(super) fn received(fetched: Fetched<SendableRecords>) -> Fetched<Records> {
    fetched.try_map_records(|records| {
        Ok(match records {
            SendableRecords::Bytes(bytes) => Records::Owned(bytes),
            SendableRecords::File {
                file,
                position,
                len,
                read_ahead,
            } => Records::File {
                file: Rc::new(file),
                position,
                len,
                read_ahead,
            },
        })
    })
}
