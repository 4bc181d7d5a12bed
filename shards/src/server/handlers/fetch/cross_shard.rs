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

/// Makes a read sendable to another shard (on the owning shard).
pub(super) fn sendable(fetched: Fetched<Records>) -> Fetched<SendableRecords> {
    let (high_watermark, last_stable_offset, log_start_offset, aborted, diverging_epoch, records) =
        match fetched {
            Fetched::Error(error) => return Fetched::Error(error),
            Fetched::Elsewhere(elsewhere) => return Fetched::Elsewhere(elsewhere),
            Fetched::Data {
                high_watermark,
                last_stable_offset,
                log_start_offset,
                aborted,
                diverging_epoch,
                records,
            } => (
                high_watermark,
                last_stable_offset,
                log_start_offset,
                aborted,
                diverging_epoch,
                records,
            ),
        };
    let records = match records {
        None => None,
        Some(Records::Local(pieces)) => {
            let mut bytes = Vec::with_capacity(pieces.iter().map(|piece| piece.len()).sum());
            pieces
                .iter()
                .for_each(|piece| bytes.extend_from_slice(piece));
            Some(SendableRecords::Bytes(Bytes::from(bytes)))
        }
        Some(Records::Owned(bytes)) => Some(SendableRecords::Bytes(bytes)),
        Some(Records::File {
            file,
            position,
            len,
            read_ahead,
        }) => match file.try_clone() {
            Ok(file) => Some(SendableRecords::File {
                file,
                position,
                len,
                read_ahead,
            }),
            Err(error) => {
                tracing::error!(%error, "duplicating a segment descriptor failed");
                return Fetched::Error(ErrorCode::KAFKA_STORAGE_ERROR);
            }
        },
    };
    Fetched::Data {
        high_watermark,
        last_stable_offset,
        log_start_offset,
        aborted,
        diverging_epoch,
        records,
    }
}

/// The other side of [`sendable`], on the connection's shard.
pub(super) fn received(fetched: Fetched<SendableRecords>) -> Fetched<Records> {
    match fetched {
        Fetched::Error(error) => Fetched::Error(error),
        Fetched::Elsewhere(elsewhere) => Fetched::Elsewhere(elsewhere),
        Fetched::Data {
            high_watermark,
            last_stable_offset,
            log_start_offset,
            aborted,
            diverging_epoch,
            records,
        } => Fetched::Data {
            high_watermark,
            last_stable_offset,
            log_start_offset,
            aborted,
            diverging_epoch,
            records: records.map(|records| match records {
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
            }),
        },
    }
}
