//! One fetched partition's bytes turned into the records a consumer shows,
//! as Kafka's consumer does: every codec decompressed (kafka-protocol's
//! `RecordBatchDecoder`), records below the fetch offset skipped (a batch
//! may start before it), control batches never shown, and under
//! `read_committed` the batches of aborted transactions dropped using the
//! response's `aborted_transactions`. A batch cut off at the end of the
//! response (a broker may return a partial last batch) ends the walk; it is
//! fetched whole next time.
//!
//! Pure: bytes in, records out, so every rule is unit-tested here.

use std::collections::BTreeSet;

use brook_engine::log::batch::{BatchError, BatchView, Batches, TimestampType};
use bytes::Bytes;
use kafka_protocol::records::RecordBatchDecoder;

/// `--isolation`: which records a fetch may return (Kafka's isolation.level).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Isolation {
    /// Every record, including those of open and aborted transactions.
    #[value(name = "read_uncommitted", alias = "read-uncommitted")]
    ReadUncommitted,
    /// Only records below the last stable offset, without aborted ones.
    #[value(name = "read_committed", alias = "read-committed")]
    ReadCommitted,
}

impl Isolation {
    /// The Fetch request's `isolation_level`.
    pub fn level(self) -> i8 {
        match self {
            Isolation::ReadUncommitted => 0,
            Isolation::ReadCommitted => 1,
        }
    }
}

/// A record as printed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumedRecord {
    pub partition: i32,
    pub offset: i64,
    /// Milliseconds since the epoch (create or log-append time, as stored).
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// In the record's order.
    pub headers: Vec<(String, Option<Bytes>)>,
}

/// An aborted transaction from a Fetch response: the producer, and the
/// first offset of its aborted records in this partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aborted {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// What a partition's bytes held from the fetch offset on.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    pub records: Vec<ConsumedRecord>,
    /// Where the next fetch starts: after the last whole batch walked
    /// (shown or skipped), or the fetch offset when there was none.
    pub next_offset: i64,
}

#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    #[error("partition {partition}: a record batch at byte {position}: {source}")]
    Batch {
        partition: i32,
        position: usize,
        source: BatchError,
    },
    #[error("partition {partition}: the batch at offset {base_offset}: {reason}")]
    Records {
        partition: i32,
        base_offset: i64,
        reason: String,
    },
}

/// A control record's key: version, then type (0 ABORT, 1 COMMIT).
const CONTROL_TYPE_ABORT: i16 = 0;

/// The records of `partition` at or after `fetch_offset` in `bytes`.
pub fn decode_partition(
    partition: i32,
    bytes: &Bytes,
    fetch_offset: i64,
    aborted: &[Aborted],
    isolation: Isolation,
) -> Result<Decoded, DecodeError> {
    let mut decoded = Decoded {
        records: Vec::new(),
        next_offset: fetch_offset,
    };
    let mut pending_aborts: Vec<Aborted> = aborted.to_vec();
    pending_aborts.sort_by_key(|abort| std::cmp::Reverse(abort.first_offset));
    let mut aborted_producers = BTreeSet::new();
    let mut walked = 0;
    for item in Batches::new(bytes) {
        let (position, batch) = match item {
            Ok(found) => found,
            // A partial last batch: a broker may cut the response inside one.
            Err(BatchError::Truncated { .. }) if walked > 0 => break,
            Err(source) => {
                return Err(DecodeError::Batch {
                    partition,
                    position: walked,
                    source,
                });
            }
        };
        walked = position + batch.size_bytes();
        let next_offset = batch.next_offset().0;
        if next_offset <= fetch_offset {
            continue;
        }
        decoded.next_offset = decoded.next_offset.max(next_offset);
        let attributes = batch.attributes();
        if isolation == Isolation::ReadCommitted && batch.producer_id() >= 0 {
            // Transactions whose aborted records start at or before this batch.
            while pending_aborts
                .last()
                .is_some_and(|abort| abort.first_offset <= batch.last_offset().0)
            {
                if let Some(abort) = pending_aborts.pop() {
                    aborted_producers.insert(abort.producer_id);
                }
            }
            if attributes.is_control() {
                if control_type(partition, bytes, position, &batch)? == Some(CONTROL_TYPE_ABORT) {
                    aborted_producers.remove(&batch.producer_id());
                }
            } else if attributes.is_transactional()
                && aborted_producers.contains(&batch.producer_id())
            {
                continue;
            }
        }
        if attributes.is_control() {
            continue;
        }
        let records = records_of(partition, bytes, position, &batch)?;
        decoded.records.extend(
            records
                .into_iter()
                .filter(|record| record.offset >= fetch_offset),
        );
    }
    Ok(decoded)
}

/// The batch's records, decompressed.
fn records_of(
    partition: i32,
    bytes: &Bytes,
    position: usize,
    batch: &BatchView<'_>,
) -> Result<Vec<ConsumedRecord>, DecodeError> {
    let mut slice = bytes.slice(position..position + batch.size_bytes());
    let set = RecordBatchDecoder::decode(&mut slice).map_err(|error| DecodeError::Records {
        partition,
        base_offset: batch.base_offset().0,
        reason: error.to_string(),
    })?;
    // Log-append-time batches keep the broker's time in the header only
    // (Kafka's DefaultRecordBatch gives every record the max timestamp).
    let log_append_time = (batch.attributes().timestamp_type() == TimestampType::LogAppendTime)
        .then(|| batch.max_timestamp().0);
    Ok(set
        .records
        .into_iter()
        .map(|record| ConsumedRecord {
            partition,
            offset: record.offset,
            timestamp: log_append_time.unwrap_or(record.timestamp),
            key: record.key,
            value: record.value,
            headers: record
                .headers
                .into_iter()
                .map(|(name, value)| (name.to_string(), value))
                .collect(),
        })
        .collect())
}

/// The type of a control batch's (first) record, if it has a readable key.
fn control_type(
    partition: i32,
    bytes: &Bytes,
    position: usize,
    batch: &BatchView<'_>,
) -> Result<Option<i16>, DecodeError> {
    let records = records_of(partition, bytes, position, batch)?;
    Ok(records
        .first()
        .and_then(|record| record.key.as_ref())
        .filter(|key| key.len() >= 4)
        .map(|key| i16::from_be_bytes([key[2], key[3]])))
}

#[cfg(test)]
mod tests {
    use brook_engine::log::batch::{BATCH_HEADER_BYTES, set_log_append_time};
    use brook_engine::types::TimestampMs;
    use bytes::BytesMut;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    use super::*;

    fn record(offset: i64, value: &str) -> Record {
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset,
            // kafka-protocol's encoder keeps records in one batch while
            // offset - sequence stays the same.
            sequence: offset as i32 - 1,
            timestamp: 1_000 + offset,
            key: Some(Bytes::from(format!("k{offset}"))),
            value: Some(Bytes::copy_from_slice(value.as_bytes())),
            headers: Default::default(),
        }
    }

    fn transactional(offset: i64, producer_id: i64, value: &str) -> Record {
        Record {
            transactional: true,
            producer_id,
            producer_epoch: 0,
            sequence: offset as i32,
            ..record(offset, value)
        }
    }

    /// A COMMIT (1) or ABORT (0) marker of `producer_id`.
    fn marker(offset: i64, producer_id: i64, kind: i16) -> Record {
        let mut key = Vec::new();
        key.extend_from_slice(&0i16.to_be_bytes());
        key.extend_from_slice(&kind.to_be_bytes());
        Record {
            control: true,
            key: Some(Bytes::from(key)),
            value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 0])),
            ..transactional(offset, producer_id, "")
        }
    }

    /// Each slice of records is one batch.
    fn batches(groups: &[Vec<Record>], compression: Compression) -> Bytes {
        let mut buffer = BytesMut::new();
        for group in groups {
            let options = RecordEncodeOptions {
                version: 2,
                compression,
            };
            RecordBatchEncoder::encode(&mut buffer, group.iter(), &options).unwrap();
        }
        buffer.freeze()
    }

    fn values(decoded: &Decoded) -> Vec<String> {
        decoded
            .records
            .iter()
            .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn every_codec_decodes_with_keys_timestamps_and_headers() {
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let mut first = record(0, "zero");
            first
                .headers
                .insert(StrBytes::from_static_str("h"), Some(Bytes::from("x")));
            let bytes = batches(&[vec![first, record(1, "one")]], compression);
            let decoded = decode_partition(4, &bytes, 0, &[], Isolation::ReadUncommitted).unwrap();
            assert_eq!(values(&decoded), ["zero", "one"], "{compression:?}");
            assert_eq!(decoded.next_offset, 2);
            let zero = &decoded.records[0];
            assert_eq!((zero.partition, zero.offset, zero.timestamp), (4, 0, 1_000));
            assert_eq!(zero.key.as_deref(), Some(&b"k0"[..]));
            assert_eq!(zero.headers, [("h".to_owned(), Some(Bytes::from("x")))]);
        }
    }

    #[test]
    fn log_append_time_batches_give_every_record_the_batch_time() {
        let written = batches(&[vec![record(0, "a"), record(1, "b")]], Compression::None);
        let mut bytes = BytesMut::from(&written[..]);
        // As a broker with message.timestamp.type=LogAppendTime stores it.
        let (header, records) = bytes.split_at_mut(BATCH_HEADER_BYTES);
        set_log_append_time(header, records, TimestampMs(5_000)).unwrap();
        let decoded =
            decode_partition(0, &bytes.freeze(), 0, &[], Isolation::ReadUncommitted).unwrap();
        let times: Vec<i64> = decoded.records.iter().map(|r| r.timestamp).collect();
        assert_eq!(times, [5_000, 5_000]);
    }

    #[test]
    fn records_below_the_fetch_offset_are_skipped() {
        let bytes = batches(
            &[vec![record(0, "a"), record(1, "b"), record(2, "c")]],
            Compression::Snappy,
        );
        assert_eq!(Batches::new(&bytes).count(), 1, "one batch");
        let decoded = decode_partition(0, &bytes, 1, &[], Isolation::ReadUncommitted).unwrap();
        assert_eq!(values(&decoded), ["b", "c"]);
        let bytes = batches(
            &[
                vec![record(0, "a"), record(1, "b")],
                vec![record(2, "c"), record(3, "d")],
            ],
            Compression::Lz4,
        );
        let decoded = decode_partition(0, &bytes, 3, &[], Isolation::ReadUncommitted).unwrap();
        assert_eq!(values(&decoded), ["d"]);
        assert_eq!(decoded.next_offset, 4);
    }

    #[test]
    fn a_partial_last_batch_ends_the_walk_and_is_fetched_again() {
        let bytes = batches(
            &[vec![record(0, "a")], vec![record(1, "b")]],
            Compression::None,
        );
        let cut = bytes.slice(..bytes.len() - 3);
        let decoded = decode_partition(0, &cut, 0, &[], Isolation::ReadUncommitted).unwrap();
        assert_eq!(values(&decoded), ["a"]);
        assert_eq!(decoded.next_offset, 1);
        let empty = decode_partition(0, &Bytes::new(), 7, &[], Isolation::ReadUncommitted);
        assert_eq!(empty.unwrap().next_offset, 7);
        assert!(
            decode_partition(0, &bytes.slice(..20), 0, &[], Isolation::ReadUncommitted).is_err()
        );
    }

    #[test]
    fn read_committed_drops_aborted_transactions_and_control_batches() {
        // Producer 7 aborts offsets 0-1; producer 8 commits 3-4 around
        // producer 7's second, committed, transaction at 5.
        let bytes = batches(
            &[
                vec![
                    transactional(0, 7, "aborted-0"),
                    transactional(1, 7, "aborted-1"),
                ],
                vec![marker(2, 7, CONTROL_TYPE_ABORT)],
                vec![
                    transactional(3, 8, "committed-3"),
                    transactional(4, 8, "committed-4"),
                ],
                vec![transactional(5, 7, "committed-5")],
                vec![marker(6, 8, 1)],
                vec![marker(7, 7, 1)],
                vec![record(8, "plain-8")],
            ],
            Compression::Gzip,
        );
        let aborted = [Aborted {
            producer_id: 7,
            first_offset: 0,
        }];
        let committed = decode_partition(0, &bytes, 0, &aborted, Isolation::ReadCommitted).unwrap();
        assert_eq!(
            values(&committed),
            ["committed-3", "committed-4", "committed-5", "plain-8"]
        );
        assert_eq!(committed.next_offset, 9);
        // Uncommitted reads see every data record, still no markers.
        let all = decode_partition(0, &bytes, 0, &[], Isolation::ReadUncommitted).unwrap();
        assert_eq!(all.records.len(), 6);
        // Only a marker left: nothing shown, the position moves past it.
        let tail = decode_partition(0, &bytes, 7, &[], Isolation::ReadCommitted).unwrap();
        assert_eq!(values(&tail), ["plain-8"]);
    }
}
