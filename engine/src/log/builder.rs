//! Building record batches, for Brook's own producers (tools, load
//! generator) and tests. The encoding itself is `kafka-protocol`'s.

use bytes::{Bytes, BytesMut};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression as Codec, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType as Type,
};

use crate::log::batch::Compression;
use crate::types::TimestampMs;

/// One record to encode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NewRecord {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub timestamp: TimestampMs,
    pub headers: Vec<(String, Option<Bytes>)>,
}

impl NewRecord {
    pub fn value(value: impl Into<Bytes>, timestamp: TimestampMs) -> NewRecord {
        NewRecord {
            value: Some(value.into()),
            timestamp,
            ..NewRecord::default()
        }
    }
}

/// Producer fields of a batch; the defaults are a plain, non-idempotent batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BatchOptions {
    pub compression: Compression,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub base_sequence: i32,
    pub transactional: bool,
}

impl Default for BatchOptions {
    fn default() -> BatchOptions {
        BatchOptions {
            compression: Compression::None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            transactional: false,
        }
    }
}

/// Encodes `records` as one v2 batch with base offset 0 (brokers assign offsets).
/// Panics on an empty `records` or an unknown codec (programming errors).
pub fn encode_batch(records: &[NewRecord], options: &BatchOptions) -> Vec<u8> {
    assert!(!records.is_empty(), "a batch holds at least one record");
    let compression = match options.compression {
        Compression::None => Codec::None,
        Compression::Gzip => Codec::Gzip,
        Compression::Snappy => Codec::Snappy,
        Compression::Lz4 => Codec::Lz4,
        Compression::Zstd => Codec::Zstd,
        Compression::Unknown(code) => panic!("cannot encode with unknown codec {code}"),
    };
    let encoded: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(index, record)| Record {
            transactional: options.transactional,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: -1,
            producer_id: options.producer_id,
            producer_epoch: options.producer_epoch,
            timestamp_type: Type::Creation,
            offset: index as i64,
            // kafka-protocol groups records into one batch while offset - sequence
            // stays constant; it derives the batch's base sequence from the first.
            sequence: options.base_sequence.wrapping_add(index as i32),
            timestamp: record.timestamp.0,
            key: record.key.clone(),
            value: record.value.clone(),
            headers: record
                .headers
                .iter()
                .map(|(key, value)| (StrBytes::from_string(key.clone()), value.clone()))
                .collect(),
        })
        .collect();
    let mut buffer = BytesMut::new();
    let encode_options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buffer, &encoded, &encode_options)
        .expect("encoding into memory cannot fail");
    buffer.to_vec()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::batch::BatchView;
    use crate::types::Offset;

    #[test]
    fn records_become_one_valid_batch() {
        let records: Vec<NewRecord> = (0..5)
            .map(|i| NewRecord::value(vec![i as u8; 10], TimestampMs(1000 + i)))
            .collect();
        for compression in [Compression::None, Compression::Lz4, Compression::Zstd] {
            let bytes = encode_batch(
                &records,
                &BatchOptions {
                    compression,
                    ..BatchOptions::default()
                },
            );
            let batch = BatchView::parse_exact(&bytes).unwrap();
            assert_eq!(batch.records_count(), 5);
            assert_eq!(batch.base_sequence(), -1);
            assert_eq!(batch.max_timestamp(), TimestampMs(1004));
            assert_eq!(batch.attributes().compression(), compression);
            assert_eq!(batch.validate_for_append(Offset(0)), Ok(()));
        }
    }

    #[test]
    fn idempotent_batches_carry_their_sequence() {
        let records = vec![
            NewRecord::value("a", TimestampMs(1)),
            NewRecord::value("b", TimestampMs(2)),
        ];
        let options = BatchOptions {
            producer_id: 7,
            producer_epoch: 1,
            base_sequence: 40,
            ..BatchOptions::default()
        };
        let bytes = encode_batch(&records, &options);
        let batch = BatchView::parse_exact(&bytes).unwrap();
        assert_eq!(
            (
                batch.producer_id(),
                batch.producer_epoch(),
                batch.base_sequence()
            ),
            (7, 1, 40)
        );
        assert_eq!(batch.records_count(), 2);
    }
}
