//! Record-level reads, for the rare paths that need them (a ListOffsets by
//! timestamp lands on an exact record). The hot paths never come here.
//!
//! A v2 record is `length varint` followed by `attributes int8`,
//! `timestampDelta varlong`, `offsetDelta varint`, key, value and headers.
//! Only the first three fields are read; the rest is skipped by length.
//! Compressed batches are decompressed with the `kafka-protocol` codecs, into
//! at most [`DECOMPRESSED_BATCH_BYTES_MAX`]: a batch comes from disk or from a
//! producer, and a few KiB of compressed zeros can expand to gigabytes.

use std::cell::Cell;

use bytes::Bytes;
use kafka_protocol::compression::decompress_bounded;
use kafka_protocol::records::RecordBatchDecoder;
use thiserror::Error;

use crate::log::batch::{BatchView, Compression, TimestampType};
use crate::types::{Offset, TimestampMs};

/// The most a compressed batch's records may take once decompressed. Kafka
/// bounds batches by `max.message.bytes` (1 MiB by default) compressed;
/// this leaves room for a 64-fold ratio at that size.
pub const DECOMPRESSED_BATCH_BYTES_MAX: usize = 64 << 20;

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RecordsError {
    #[error("record {index} of the batch is malformed")]
    Malformed { index: i32 },
    #[error("cannot decode the compressed batch: {0}")]
    Decompression(String),
    #[error("the compressed batch's records decompress to more than {max_bytes} bytes")]
    DecompressedTooLarge { max_bytes: usize },
    #[error("cannot compress the batch's records: {0}")]
    Compression(String),
}

/// A record's offset and timestamp.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordStamp {
    pub offset: Offset,
    pub timestamp: TimestampMs,
}

/// Offsets and timestamps of every record of `batch`, in order.
pub fn record_stamps(batch: &BatchView<'_>) -> Result<Vec<RecordStamp>, RecordsError> {
    record_stamps_within(batch, DECOMPRESSED_BATCH_BYTES_MAX)
}

/// [`record_stamps`] with the decompressed records bounded by `max_bytes`.
fn record_stamps_within(
    batch: &BatchView<'_>,
    max_bytes: usize,
) -> Result<Vec<RecordStamp>, RecordsError> {
    let log_append_time = batch.attributes().timestamp_type() == TimestampType::LogAppendTime;
    let stamp = |offset: Offset, timestamp: TimestampMs| RecordStamp {
        offset,
        timestamp: if log_append_time {
            batch.max_timestamp()
        } else {
            timestamp
        },
    };
    if batch.attributes().compression() != Compression::None {
        let set = decode_compressed(batch, max_bytes)?;
        return Ok(set
            .records
            .iter()
            .map(|record| stamp(Offset(record.offset), TimestampMs(record.timestamp)))
            .collect());
    }
    let count = batch.records_count().max(0);
    let mut stamps = Vec::with_capacity(count.min(1 << 16) as usize);
    let mut rest = batch.records_bytes();
    for index in 0..count {
        let malformed = RecordsError::Malformed { index };
        let (length, used) = read_varint(rest).ok_or(malformed.clone())?;
        let length = usize::try_from(length).map_err(|_| malformed.clone())?;
        let record = rest.get(used..used + length).ok_or(malformed.clone())?;
        let body = record.get(1..).ok_or(malformed.clone())?;
        let (timestamp_delta, used_timestamp) = read_varint(body).ok_or(malformed.clone())?;
        let (offset_delta, _) = read_varint(&body[used_timestamp..]).ok_or(malformed)?;
        let offset = Offset(batch.base_offset().0.saturating_add(offset_delta));
        let timestamp = TimestampMs(batch.base_timestamp().0.saturating_add(timestamp_delta));
        stamps.push(stamp(offset, timestamp));
        rest = &rest[used + length..];
    }
    Ok(stamps)
}

/// Decodes a compressed batch, decompressing at most `max_bytes`.
fn decode_compressed(
    batch: &BatchView<'_>,
    max_bytes: usize,
) -> Result<kafka_protocol::records::RecordSet, RecordsError> {
    let too_large = Cell::new(false);
    let decompress =
        |records: &mut Bytes, codec| match decompress_bounded(codec, records, max_bytes) {
            Ok(Some(decompressed)) => Ok(decompressed),
            Ok(None) => {
                too_large.set(true);
                Err(RecordsError::DecompressedTooLarge { max_bytes }.into())
            }
            Err(error) => Err(error),
        };
    let mut bytes = Bytes::copy_from_slice(batch.as_bytes());
    RecordBatchDecoder::decode_with_custom_compression(&mut bytes, Some(decompress)).map_err(
        |error| {
            if too_large.get() {
                RecordsError::DecompressedTooLarge { max_bytes }
            } else {
                RecordsError::Decompression(error.to_string())
            }
        },
    )
}

/// The first record of `batch` at or after `min_offset` whose timestamp is at
/// least `target`.
pub fn first_at_or_after(
    batch: &BatchView<'_>,
    target: TimestampMs,
    min_offset: Offset,
) -> Result<Option<RecordStamp>, RecordsError> {
    if batch.max_timestamp() < target {
        return Ok(None);
    }
    Ok(record_stamps(batch)?
        .into_iter()
        .find(|stamp| stamp.timestamp >= target && stamp.offset >= min_offset))
}

/// A zigzag varint (up to 64 bits): the value and how many bytes it used.
pub(crate) fn read_varint(bytes: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (index, byte) in bytes.iter().take(10).enumerate() {
        raw |= u64::from(byte & 0x7f) << (7 * index);
        if byte & 0x80 == 0 {
            let value = (raw >> 1) as i64 ^ -((raw & 1) as i64);
            return Some((value, index + 1));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::tests::sample_batch;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression as Codec, Record, RecordBatchEncoder, RecordEncodeOptions,
        TimestampType as Type,
    };

    /// `records` as one v2 batch, by kafka-protocol's encoder.
    fn encode(codec: Codec, records: &[Record]) -> Vec<u8> {
        let mut buffer = bytes::BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression: codec,
        };
        RecordBatchEncoder::encode(&mut buffer, records, &options).unwrap();
        buffer.to_vec()
    }

    fn encoded(codec: Codec, timestamps: &[i64]) -> Vec<u8> {
        let records: Vec<Record> = timestamps
            .iter()
            .enumerate()
            .map(|(i, ts)| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: Type::Creation,
                offset: 50 + i as i64,
                sequence: i as i32 - 1,
                timestamp: *ts,
                key: Some(Bytes::from(format!("key-{i}"))),
                value: Some(Bytes::from(vec![b'v'; 300])),
                headers: [(
                    StrBytes::from_static_str("h"),
                    Some(Bytes::from_static(b"x")),
                )]
                .into_iter()
                .collect(),
            })
            .collect();
        encode(codec, &records)
    }

    #[test]
    fn varints_are_zigzag() {
        assert_eq!(read_varint(&[0]), Some((0, 1)));
        assert_eq!(read_varint(&[1]), Some((-1, 1)));
        assert_eq!(read_varint(&[2]), Some((1, 1)));
        assert_eq!(read_varint(&[0xac, 0x02]), Some((150, 2)));
        assert_eq!(read_varint(&[0x80]), None);
    }

    #[test]
    fn timestamps_are_found_in_plain_and_compressed_batches() {
        for codec in [
            Codec::None,
            Codec::Gzip,
            Codec::Snappy,
            Codec::Lz4,
            Codec::Zstd,
        ] {
            let bytes = encoded(codec, &[100, 300, 200, 400]);
            let batch = BatchView::parse_exact(&bytes).unwrap();
            let find =
                |target, min| first_at_or_after(&batch, TimestampMs(target), Offset(min)).unwrap();
            assert_eq!(
                find(150, 0).map(|s| s.offset),
                Some(Offset(51)),
                "{codec:?}"
            );
            assert_eq!(
                find(300, 52).map(|s| s.offset),
                Some(Offset(53)),
                "{codec:?}"
            );
            assert_eq!(
                find(100, 0).map(|s| s.timestamp),
                Some(TimestampMs(100)),
                "{codec:?}"
            );
            assert_eq!(find(401, 0), None, "{codec:?}");
        }
    }

    #[test]
    fn malformed_records_are_errors_not_panics() {
        let mut bytes = sample_batch(3, 0);
        let len = bytes.len();
        bytes[len - 7] = 0x7e; // first record of the last... claims 63 bytes
        let batch = BatchView::parse_exact(&bytes).unwrap();
        assert!(matches!(
            record_stamps(&batch),
            Err(RecordsError::Malformed { .. })
        ));
    }

    /// A batch of two records whose values are `value_bytes` zeros.
    fn zeros(codec: Codec, value_bytes: usize) -> Vec<u8> {
        let records: Vec<Record> = (0..2)
            .map(|i| Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: Type::Creation,
                offset: i,
                sequence: i as i32 - 1,
                timestamp: 100 + i,
                key: None,
                value: Some(Bytes::from(vec![0u8; value_bytes])),
                headers: Default::default(),
            })
            .collect();
        encode(codec, &records)
    }

    #[test]
    fn decompression_stops_at_the_bound() {
        for codec in [Codec::Gzip, Codec::Snappy, Codec::Lz4, Codec::Zstd] {
            let bytes = zeros(codec, 256 << 10);
            let batch = BatchView::parse_exact(&bytes).unwrap();
            assert!(bytes.len() < 64 << 10, "{codec:?} compresses zeros");
            assert_eq!(
                record_stamps_within(&batch, 64 << 10),
                Err(RecordsError::DecompressedTooLarge {
                    max_bytes: 64 << 10
                }),
                "{codec:?}"
            );
            let stamps = record_stamps_within(&batch, 1 << 20).unwrap();
            assert_eq!(
                stamps.iter().map(|s| s.timestamp.0).collect::<Vec<_>>(),
                [100, 101],
                "{codec:?}"
            );
        }
    }
}
