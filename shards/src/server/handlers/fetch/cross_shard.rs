//! Fetched records crossing from the shard that owns a partition to the
//! shard of the connection that asked: memory is copied once into shared
//! bytes, a file range travels as it is (its descriptor is shared).

use bytes::Bytes;

use super::Fetched;
use crate::server::response::Records;
use crate::storage::FileRange;

/// Records that can move to another shard: memory is copied once, a file
/// range travels as it is.
pub(super) enum SendableRecords {
    Bytes(Bytes),
    File(FileRange),
}

impl<R> Fetched<R> {
    /// The same answer with its records (if any) turned by `turn`.
    fn map_records<S>(self, turn: impl FnOnce(R) -> S) -> Fetched<S> {
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
            } => Fetched::Data {
                high_watermark,
                last_stable_offset,
                log_start_offset,
                aborted,
                diverging_epoch,
                records: records.map(turn),
            },
        }
    }
}

/// Makes a read sendable to another shard (on the owning shard).
pub(super) fn sendable(fetched: Fetched<Records>) -> Fetched<SendableRecords> {
    fetched.map_records(|records| match records {
        Records::Local(pieces) => {
            let mut bytes = Vec::with_capacity(pieces.iter().map(|piece| piece.len()).sum());
            pieces
                .iter()
                .for_each(|piece| bytes.extend_from_slice(piece));
            SendableRecords::Bytes(Bytes::from(bytes))
        }
        Records::Owned(bytes) => SendableRecords::Bytes(bytes),
        Records::File(range) => SendableRecords::File(range),
    })
}

/// The other side of [`sendable`], on the connection's shard.
pub(super) fn received(fetched: Fetched<SendableRecords>) -> Fetched<Records> {
    fetched.map_records(|records| match records {
        SendableRecords::Bytes(bytes) => Records::Owned(bytes),
        SendableRecords::File(range) => Records::File(range),
    })
}
