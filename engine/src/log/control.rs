//! Control batches: the COMMIT and ABORT markers that end a transaction on a
//! partition, byte for byte as Kafka writes and reads them.
//!
//! A marker is a batch with the `control` and `transactional` attributes set,
//! the producer's id and epoch, base sequence -1 and exactly one record, never
//! compressed (`MemoryRecords.withEndTransactionMarker`). Its record carries:
//!
//! ```text
//! key   (ControlRecordType, 4 bytes)   version i16 = 0, type i16 (0 ABORT, 1 COMMIT,
//!                                      2..4 KRaft-only types, anything else unknown)
//! value (EndTransactionMarker, 6 bytes) version i16 = 0, coordinator_epoch i32
//! ```
//!
//! Reading is as tolerant as Kafka's: a key or value version above 0 is read
//! as version 0 (later versions may only add fields), a negative version is
//! corruption, and an unknown type id is [`ControlRecordType::Unknown`] (a
//! consumer skips it). Control batches are rare (one per transaction and
//! partition), so reading one walks its record with the record-level varint
//! reader instead of a zero-copy view.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{
    Compression as Codec, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType as Type,
};
use thiserror::Error;

use crate::log::batch::{BatchView, Compression, TimestampType};
use crate::log::records::read_varint;
use crate::types::TimestampMs;

/// `ControlRecordType.CURRENT_CONTROL_RECORD_KEY_VERSION`.
pub const CONTROL_KEY_VERSION: i16 = 0;
/// `ControlRecordType.CURRENT_CONTROL_RECORD_KEY_SIZE`.
pub const CONTROL_KEY_BYTES: usize = 4;
/// `EndTransactionMarker.CURRENT_END_TXN_MARKER_VERSION`.
pub const END_TXN_MARKER_VERSION: i16 = 0;
/// `EndTransactionMarker.CURRENT_END_TXN_MARKER_VALUE_SIZE`.
pub const END_TXN_MARKER_VALUE_BYTES: usize = 6;
/// The base sequence of every control batch (`RecordBatch.NO_SEQUENCE`).
pub const CONTROL_BATCH_BASE_SEQUENCE: i32 = -1;

/// The type in a control record's key (Kafka's `ControlRecordType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ControlRecordType {
    Abort,
    Commit,
    /// KRaft metadata log only.
    LeaderChange,
    /// KRaft snapshots only.
    SnapshotHeader,
    /// KRaft snapshots only.
    SnapshotFooter,
    /// A type this broker does not know; Kafka's consumers skip such records.
    Unknown(i16),
}

impl ControlRecordType {
    /// `ControlRecordType.fromTypeId`.
    pub fn from_type_id(type_id: i16) -> ControlRecordType {
        match type_id {
            0 => ControlRecordType::Abort,
            1 => ControlRecordType::Commit,
            2 => ControlRecordType::LeaderChange,
            3 => ControlRecordType::SnapshotHeader,
            4 => ControlRecordType::SnapshotFooter,
            other => ControlRecordType::Unknown(other),
        }
    }

    pub fn type_id(self) -> i16 {
        match self {
            ControlRecordType::Abort => 0,
            ControlRecordType::Commit => 1,
            ControlRecordType::LeaderChange => 2,
            ControlRecordType::SnapshotHeader => 3,
            ControlRecordType::SnapshotFooter => 4,
            ControlRecordType::Unknown(type_id) => type_id,
        }
    }

    /// The record key Kafka writes (`recordKey`): version 0 and the type id.
    pub fn encode_key(self) -> [u8; CONTROL_KEY_BYTES] {
        let mut key = [0; CONTROL_KEY_BYTES];
        key[..2].copy_from_slice(&CONTROL_KEY_VERSION.to_be_bytes());
        key[2..].copy_from_slice(&self.type_id().to_be_bytes());
        key
    }

    /// Reads a record key (`ControlRecordType.parse`): at least 4 bytes, a
    /// non-negative version; versions above 0 are read as version 0.
    pub fn parse_key(key: &[u8]) -> Result<ControlRecordType, ControlError> {
        let Some(fixed) = key.get(..CONTROL_KEY_BYTES) else {
            return Err(ControlError::KeyTooShort { have: key.len() });
        };
        let version = i16::from_be_bytes([fixed[0], fixed[1]]);
        if version < 0 {
            return Err(ControlError::NegativeKeyVersion(version));
        }
        Ok(ControlRecordType::from_type_id(i16::from_be_bytes([
            fixed[2], fixed[3],
        ])))
    }
}

/// How a transaction ended on this partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerKind {
    Commit,
    Abort,
}

impl MarkerKind {
    pub fn control_type(self) -> ControlRecordType {
        match self {
            MarkerKind::Commit => ControlRecordType::Commit,
            MarkerKind::Abort => ControlRecordType::Abort,
        }
    }
}

/// Kafka's `EndTransactionMarker`: the decision and the epoch of the
/// coordinator that wrote it (so a zombie coordinator can be fenced).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EndTxnMarker {
    pub kind: MarkerKind,
    pub coordinator_epoch: i32,
}

impl EndTxnMarker {
    /// The record value Kafka writes: version 0 and the coordinator epoch.
    pub fn encode_value(&self) -> [u8; END_TXN_MARKER_VALUE_BYTES] {
        let mut value = [0; END_TXN_MARKER_VALUE_BYTES];
        value[..2].copy_from_slice(&END_TXN_MARKER_VERSION.to_be_bytes());
        value[2..].copy_from_slice(&self.coordinator_epoch.to_be_bytes());
        value
    }

    /// Reads a marker from its control type and record value
    /// (`EndTransactionMarker.deserializeValue`).
    pub fn parse(
        control_type: ControlRecordType,
        value: Option<&[u8]>,
    ) -> Result<EndTxnMarker, ControlError> {
        let kind = match control_type {
            ControlRecordType::Commit => MarkerKind::Commit,
            ControlRecordType::Abort => MarkerKind::Abort,
            other => return Err(ControlError::NotATransactionMarker(other)),
        };
        let value = value.ok_or(ControlError::MissingValue)?;
        let Some(fixed) = value.get(..END_TXN_MARKER_VALUE_BYTES) else {
            return Err(ControlError::ValueTooShort { have: value.len() });
        };
        let version = i16::from_be_bytes([fixed[0], fixed[1]]);
        if version < 0 {
            return Err(ControlError::NegativeMarkerVersion(version));
        }
        let coordinator_epoch = i32::from_be_bytes([fixed[2], fixed[3], fixed[4], fixed[5]]);
        Ok(EndTxnMarker {
            kind,
            coordinator_epoch,
        })
    }
}

/// Why a batch holds no readable control record.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ControlError {
    #[error("the batch is not a control batch")]
    NotControlBatch,
    /// Kafka never compresses control batches; Brook does not read them.
    #[error("control batch is compressed with {0:?}")]
    Compressed(Compression),
    #[error("the control batch's first record is malformed")]
    MalformedRecord,
    #[error("control record has no key")]
    MissingKey,
    #[error("control record key has {have} bytes, needs at least {CONTROL_KEY_BYTES}")]
    KeyTooShort { have: usize },
    #[error("control record key version {0} is negative (corrupt)")]
    NegativeKeyVersion(i16),
    #[error("control record of type {0:?} is not a transaction marker")]
    NotATransactionMarker(ControlRecordType),
    #[error("transaction marker has no value")]
    MissingValue,
    #[error(
        "transaction marker value has {have} bytes, needs at least {END_TXN_MARKER_VALUE_BYTES}"
    )]
    ValueTooShort { have: usize },
    #[error("transaction marker version {0} is negative (corrupt)")]
    NegativeMarkerVersion(i16),
}

/// The first record of a control batch, borrowed from the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ControlRecord<'a> {
    pub control_type: ControlRecordType,
    pub key: &'a [u8],
    pub value: Option<&'a [u8]>,
    /// The record's timestamp (the batch's `maxTimestamp` for
    /// `LogAppendTime` batches, as Kafka's `Record.timestamp()`).
    pub timestamp: TimestampMs,
}

/// A transaction marker read from a control batch, with its record's timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MarkerRecord {
    pub marker: EndTxnMarker,
    pub timestamp: TimestampMs,
}

/// The first record of a control batch, or `None` for a batch with no records
/// (compaction removed the whole transaction; Kafka then ignores the marker).
pub fn first_control_record<'a>(
    batch: &BatchView<'a>,
) -> Result<Option<ControlRecord<'a>>, ControlError> {
    let attributes = batch.attributes();
    if !attributes.is_control() {
        return Err(ControlError::NotControlBatch);
    }
    if batch.records_count() <= 0 {
        return Ok(None);
    }
    if attributes.compression() != Compression::None {
        return Err(ControlError::Compressed(attributes.compression()));
    }
    let (key, value, timestamp_delta) =
        read_first_record(batch.records_bytes()).ok_or(ControlError::MalformedRecord)?;
    let key = key.ok_or(ControlError::MissingKey)?;
    let timestamp = if attributes.timestamp_type() == TimestampType::LogAppendTime {
        batch.max_timestamp()
    } else {
        TimestampMs(batch.base_timestamp().0.wrapping_add(timestamp_delta))
    };
    Ok(Some(ControlRecord {
        control_type: ControlRecordType::parse_key(key)?,
        key,
        value,
        timestamp,
    }))
}

/// The transaction marker of a control batch (`EndTransactionMarker.deserialize`
/// of its first record), or `None` for an empty batch.
pub fn read_end_txn_marker(batch: &BatchView<'_>) -> Result<Option<MarkerRecord>, ControlError> {
    let Some(record) = first_control_record(batch)? else {
        return Ok(None);
    };
    let marker = EndTxnMarker::parse(record.control_type, record.value)?;
    Ok(Some(MarkerRecord {
        marker,
        timestamp: record.timestamp,
    }))
}

type RecordParts<'a> = (Option<&'a [u8]>, Option<&'a [u8]>, i64);

/// Key, value and timestamp delta of the record at the start of `records`.
fn read_first_record(records: &[u8]) -> Option<RecordParts<'_>> {
    let (length, used) = read_varint(records)?;
    let length = usize::try_from(length).ok()?;
    let record = records.get(used..used.checked_add(length)?)?;
    // Attributes (one byte, unused), then the timestamp and offset deltas.
    let mut rest = record.get(1..)?;
    let (timestamp_delta, used) = read_varint(rest)?;
    rest = rest.get(used..)?;
    let (_offset_delta, used) = read_varint(rest)?;
    rest = rest.get(used..)?;
    let (key, rest) = read_bytes_field(rest)?;
    let (value, _headers) = read_bytes_field(rest)?;
    Some((key, value, timestamp_delta))
}

/// A varint length and that many bytes; length -1 is null.
fn read_bytes_field(bytes: &[u8]) -> Option<(Option<&[u8]>, &[u8])> {
    let (length, used) = read_varint(bytes)?;
    let rest = bytes.get(used..)?;
    if length < 0 {
        return (length == -1).then_some((None, rest));
    }
    let length = usize::try_from(length).ok()?;
    Some((Some(rest.get(..length)?), rest.get(length..)?))
}

/// Encodes a COMMIT or ABORT marker batch exactly as Kafka's
/// `MemoryRecords.withEndTransactionMarker` does, with base offset 0 and
/// partition leader epoch -1: the append path assigns both, as for any batch.
pub fn encode_end_txn_marker_batch(
    producer_id: i64,
    producer_epoch: i16,
    timestamp: TimestampMs,
    marker: EndTxnMarker,
) -> Vec<u8> {
    let record = Record {
        transactional: true,
        control: true,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id,
        producer_epoch,
        timestamp_type: Type::Creation,
        offset: 0,
        sequence: CONTROL_BATCH_BASE_SEQUENCE,
        timestamp: timestamp.0,
        key: Some(Bytes::copy_from_slice(
            &marker.kind.control_type().encode_key(),
        )),
        value: Some(Bytes::copy_from_slice(&marker.encode_value())),
        headers: Default::default(),
    };
    let mut buffer = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression: Codec::None,
    };
    // One uncompressed record into memory: nothing in it can fail.
    RecordBatchEncoder::encode(&mut buffer, std::slice::from_ref(&record), &options)
        .expect("encoding one uncompressed record into memory cannot fail");
    buffer.to_vec()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::log::batch::{BATCH_HEADER_BYTES, CRC_COVERED_START};
    use crate::types::Offset;

    /// A marker batch laid out by hand from Kafka's v2 format: header, then one
    /// 17-byte record (length 16, attributes 0, timestamp delta 0, offset delta
    /// 0, key length 4, key, value length 6, value, 0 headers).
    fn hand_built(
        producer_id: i64,
        epoch: i16,
        timestamp: i64,
        type_id: i16,
        coordinator_epoch: i32,
    ) -> Vec<u8> {
        let mut record = vec![32, 0, 0, 0, 8];
        record.extend_from_slice(&0i16.to_be_bytes());
        record.extend_from_slice(&type_id.to_be_bytes());
        record.push(12);
        record.extend_from_slice(&0i16.to_be_bytes());
        record.extend_from_slice(&coordinator_epoch.to_be_bytes());
        record.push(0);
        assert_eq!(record.len(), 17);
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0i64.to_be_bytes()); // base offset
        bytes.extend_from_slice(&((BATCH_HEADER_BYTES - 12 + 17) as i32).to_be_bytes());
        bytes.extend_from_slice(&(-1i32).to_be_bytes()); // partition leader epoch
        bytes.push(2); // magic
        bytes.extend_from_slice(&[0; 4]); // crc, below
        bytes.extend_from_slice(&0x30i16.to_be_bytes()); // control | transactional
        bytes.extend_from_slice(&0i32.to_be_bytes()); // last offset delta
        bytes.extend_from_slice(&timestamp.to_be_bytes());
        bytes.extend_from_slice(&timestamp.to_be_bytes());
        bytes.extend_from_slice(&producer_id.to_be_bytes());
        bytes.extend_from_slice(&epoch.to_be_bytes());
        bytes.extend_from_slice(&(-1i32).to_be_bytes()); // base sequence
        bytes.extend_from_slice(&1i32.to_be_bytes()); // records count
        bytes.extend_from_slice(&record);
        let crc = crc32c::crc32c(&bytes[CRC_COVERED_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    #[test]
    fn markers_encode_to_kafkas_exact_bytes() {
        // (kind, type id)
        for (kind, type_id) in [(MarkerKind::Abort, 0), (MarkerKind::Commit, 1)] {
            let marker = EndTxnMarker {
                kind,
                coordinator_epoch: 0x0102_0304,
            };
            let bytes = encode_end_txn_marker_batch(
                0x1122_3344_5566,
                7,
                TimestampMs(1_700_000_000_123),
                marker,
            );
            assert_eq!(
                bytes,
                hand_built(0x1122_3344_5566, 7, 1_700_000_000_123, type_id, 0x0102_0304),
                "{kind:?}"
            );
            let batch = BatchView::parse_exact(&bytes).unwrap();
            assert_eq!(batch.validate_for_append(Offset(0)), Ok(()));
            assert!(batch.attributes().is_control() && batch.attributes().is_transactional());
            assert_eq!(batch.base_sequence(), -1);
            assert_eq!(
                read_end_txn_marker(&batch),
                Ok(Some(MarkerRecord {
                    marker,
                    timestamp: TimestampMs(1_700_000_000_123)
                }))
            );
        }
    }

    #[test]
    fn keys_and_values_follow_kafkas_tolerance() {
        // (key bytes, parsed)
        let keys: [(&[u8], Result<ControlRecordType, ControlError>); 7] = [
            (&[0, 0, 0, 0], Ok(ControlRecordType::Abort)),
            (&[0, 0, 0, 1], Ok(ControlRecordType::Commit)),
            (&[0, 0, 0, 2], Ok(ControlRecordType::LeaderChange)),
            (&[0, 0, 0, 9], Ok(ControlRecordType::Unknown(9))),
            // A newer key version with extra fields is read as version 0.
            (&[0, 3, 0, 1, 0xAA], Ok(ControlRecordType::Commit)),
            (
                &[0xFF, 0xFF, 0, 1],
                Err(ControlError::NegativeKeyVersion(-1)),
            ),
            (&[0, 0, 0], Err(ControlError::KeyTooShort { have: 3 })),
        ];
        for (key, parsed) in keys {
            assert_eq!(ControlRecordType::parse_key(key), parsed, "{key:?}");
        }
        let commit = ControlRecordType::Commit;
        // (control type, value, parsed)
        type ValueRow<'a> = (
            ControlRecordType,
            Option<&'a [u8]>,
            Result<EndTxnMarker, ControlError>,
        );
        let values: [ValueRow; 6] = [
            (
                commit,
                Some(&[0, 0, 0, 0, 0, 5]),
                Ok(EndTxnMarker {
                    kind: MarkerKind::Commit,
                    coordinator_epoch: 5,
                }),
            ),
            (
                commit,
                Some(&[0, 1, 0, 0, 0, 5, 9]),
                Ok(EndTxnMarker {
                    kind: MarkerKind::Commit,
                    coordinator_epoch: 5,
                }),
            ),
            (
                commit,
                Some(&[0x80, 0, 0, 0, 0, 5]),
                Err(ControlError::NegativeMarkerVersion(i16::MIN)),
            ),
            (
                commit,
                Some(&[0, 0, 0, 0, 5]),
                Err(ControlError::ValueTooShort { have: 5 }),
            ),
            (commit, None, Err(ControlError::MissingValue)),
            (
                ControlRecordType::Unknown(7),
                Some(&[0, 0, 0, 0, 0, 5]),
                Err(ControlError::NotATransactionMarker(
                    ControlRecordType::Unknown(7),
                )),
            ),
        ];
        for (control_type, value, parsed) in values {
            assert_eq!(
                EndTxnMarker::parse(control_type, value),
                parsed,
                "{value:?}"
            );
        }
    }

    #[test]
    fn batches_that_are_not_markers_are_typed_errors() {
        let data = crate::log::batch::tests::sample_batch(1, 0);
        let batch = BatchView::parse_exact(&data).unwrap();
        assert_eq!(
            read_end_txn_marker(&batch),
            Err(ControlError::NotControlBatch)
        );

        // An empty control batch: the transaction was compacted away.
        let mut empty = hand_built(1, 0, 0, 1, 0);
        empty.truncate(BATCH_HEADER_BYTES);
        empty[8..12].copy_from_slice(&((BATCH_HEADER_BYTES - 12) as i32).to_be_bytes());
        empty[57..61].copy_from_slice(&0i32.to_be_bytes());
        let batch = BatchView::parse_exact(&empty).unwrap();
        assert_eq!(read_end_txn_marker(&batch), Ok(None));

        let mut compressed = hand_built(1, 0, 0, 1, 0);
        compressed[22] |= 0x04;
        let batch = BatchView::parse_exact(&compressed).unwrap();
        assert_eq!(
            read_end_txn_marker(&batch),
            Err(ControlError::Compressed(Compression::Zstd))
        );

        let mut broken = hand_built(1, 0, 0, 1, 0);
        broken[BATCH_HEADER_BYTES] = 0x7E; // record length 63: past the end
        let batch = BatchView::parse_exact(&broken).unwrap();
        assert_eq!(
            read_end_txn_marker(&batch),
            Err(ControlError::MalformedRecord)
        );
    }

    #[test]
    fn log_append_time_markers_take_the_batch_timestamp() {
        let mut bytes = hand_built(1, 0, 100, 0, 3);
        let (header, records) = bytes.split_at_mut(BATCH_HEADER_BYTES);
        crate::log::batch::set_log_append_time(header, records, TimestampMs(555)).unwrap();
        let batch = BatchView::parse_exact(&bytes).unwrap();
        let read = read_end_txn_marker(&batch).unwrap().unwrap();
        assert_eq!(read.timestamp, TimestampMs(555));
        assert_eq!(read.marker.kind, MarkerKind::Abort);
    }

    proptest! {
        #[test]
        fn markers_round_trip(
            producer_id in 0i64..i64::MAX,
            epoch in any::<i16>(),
            timestamp in any::<i64>(),
            abort in any::<bool>(),
            coordinator_epoch in any::<i32>(),
        ) {
            let kind = if abort { MarkerKind::Abort } else { MarkerKind::Commit };
            let marker = EndTxnMarker { kind, coordinator_epoch };
            let bytes = encode_end_txn_marker_batch(producer_id, epoch, TimestampMs(timestamp), marker);
            let batch = BatchView::parse_exact(&bytes).unwrap();
            prop_assert_eq!(batch.verify_crc(), Ok(()));
            prop_assert_eq!((batch.producer_id(), batch.producer_epoch()), (producer_id, epoch));
            let read = read_end_txn_marker(&batch).unwrap().unwrap();
            prop_assert_eq!(read, MarkerRecord { marker, timestamp: TimestampMs(timestamp) });
        }

        #[test]
        fn garbage_records_are_refused_or_read_back_the_same(records in proptest::collection::vec(any::<u8>(), 0..64)) {
            let mut bytes = hand_built(1, 0, 0, 1, 0);
            bytes.truncate(BATCH_HEADER_BYTES);
            bytes.extend_from_slice(&records);
            let length = (bytes.len() - 12) as i32;
            bytes[8..12].copy_from_slice(&length.to_be_bytes());
            let batch = BatchView::parse_exact(&bytes).unwrap();
            // Either refused, or a marker that reads back the same from the
            // batch Kafka would write for it.
            match read_end_txn_marker(&batch) {
                Ok(Some(read)) => {
                    let again = encode_end_txn_marker_batch(1, 0, read.timestamp, read.marker);
                    let again = BatchView::parse_exact(&again).unwrap();
                    prop_assert_eq!(read_end_txn_marker(&again), Ok(Some(read)));
                }
                Ok(None) => prop_assert!(false, "a batch of one record read as empty"),
                Err(_) => {}
            }
        }
    }
}
