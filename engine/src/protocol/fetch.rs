//! The Fetch response, encoded by hand: its record sections are spliced in
//! by the connection straight from the log's memory or files, so the encoder
//! emits the bytes *around* them and tells where each partition's records go.
//!
//! Layout (Kafka's `FetchResponse.json`; flexible from v12):
//! throttle_time_ms, error_code and session_id (v7+), then per topic the name
//! (the topic id from v13) and per partition: index, error, high watermark,
//! last stable offset, log start offset (v5+), aborted transactions, preferred
//! read replica (v11+), records; tagged-field sections in flexible versions.

use crate::protocol::wire::WireWriter;

/// Fetch versions this encoder writes.
/// v17 (a follower's directory id) and v18 (a follower's high watermark,
/// KIP-1166) changed only the request; their responses are v16's.
pub const FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 4..=18;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AbortedTransaction {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// One partition of the response; its records are `records_bytes` long and
/// supplied by the caller at the matching [`FetchPiece::Records`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionData {
    pub partition_index: i32,
    pub error_code: i16,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub aborted_transactions: Option<Vec<AbortedTransaction>>,
    pub preferred_read_replica: i32,
    pub records_bytes: usize,
    /// For a follower whose log diverged (v12+, KIP-320): the largest
    /// epoch at or below its last fetched one and where it ends here, as
    /// (epoch, end offset).
    pub diverging_epoch: Option<(i32, i64)>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicData {
    pub name: String,
    pub topic_id: [u8; 16],
    pub partitions: Vec<PartitionData>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FetchResponseData {
    pub throttle_time_ms: i32,
    pub error_code: i16,
    pub session_id: i32,
    pub topics: Vec<TopicData>,
}

/// The response as a sequence of encoded bytes and record slots.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FetchPiece {
    Bytes(Vec<u8>),
    /// The records of the `index`-th partition of the response, counting
    /// through every topic's partitions in order.
    Records {
        index: usize,
    },
}

#[derive(Clone, Copy, Debug, thiserror::Error, PartialEq, Eq)]
pub enum FetchEncodeError {
    #[error("fetch v{0} is not encoded")]
    Version(i16),
    #[error("a fetch response over 2 GiB")]
    TooLarge,
}

/// Encodes the whole frame (size prefix, response header, body) for
/// `version`; record bytes are left as [`FetchPiece::Records`] slots. Bytes
/// are cut only where records follow, so a response is few pieces.
pub fn encode_fetch_response(
    correlation_id: i32,
    version: i16,
    data: &FetchResponseData,
) -> Result<Vec<FetchPiece>, FetchEncodeError> {
    if !FETCH_VERSIONS.contains(&version) {
        return Err(FetchEncodeError::Version(version));
    }
    let flexible = version >= 12;
    let mut pieces = Vec::new();
    let mut body_bytes = 0usize;
    let mut writer = WireWriter::default();
    writer.int32(correlation_id);
    if flexible {
        writer.no_tagged_fields();
    }
    writer.int32(data.throttle_time_ms);
    if version >= 7 {
        writer.int16(data.error_code);
        writer.int32(data.session_id);
    }
    writer.array_length(Some(data.topics.len()), flexible);
    let mut index = 0;
    for topic in &data.topics {
        if version >= 13 {
            writer.uuid(topic.topic_id);
        } else {
            writer.string(&topic.name, flexible);
        }
        writer.array_length(Some(topic.partitions.len()), flexible);
        for partition in &topic.partitions {
            encode_partition_head(&mut writer, version, partition);
            let records_bytes =
                i32::try_from(partition.records_bytes).map_err(|_| FetchEncodeError::TooLarge)?;
            writer.records_length(Some(records_bytes as usize), flexible);
            if records_bytes > 0 {
                body_bytes += writer.bytes.len() + partition.records_bytes;
                pieces.push(FetchPiece::Bytes(std::mem::take(&mut writer.bytes)));
                pieces.push(FetchPiece::Records { index });
            }
            if flexible {
                encode_partition_tags(&mut writer, partition);
            }
            index += 1;
        }
        if flexible {
            writer.no_tagged_fields();
        }
    }
    if flexible {
        writer.no_tagged_fields();
    }
    body_bytes += writer.bytes.len();
    pieces.push(FetchPiece::Bytes(writer.bytes));
    let size = i32::try_from(body_bytes).map_err(|_| FetchEncodeError::TooLarge)?;
    if let Some(FetchPiece::Bytes(first)) = pieces.first_mut() {
        let mut frame = Vec::with_capacity(4 + first.len());
        frame.extend_from_slice(&size.to_be_bytes());
        frame.append(first);
        *first = frame;
    }
    Ok(pieces)
}

/// The record-byte budget of one Fetch response (KIP-74), spent over its
/// partitions in request order: the first partition with records returns at
/// least one whole batch whatever the limits, so a consumer always
/// progresses; every later partition gets only what still fits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResponseBudget {
    remaining: u64,
    first_served: bool,
}

impl ResponseBudget {
    /// The request's `max_bytes` (negative reads as 0) capped by the broker's
    /// `fetch.max.bytes`.
    pub fn new(request_max_bytes: i32, broker_max_bytes: usize) -> ResponseBudget {
        ResponseBudget {
            remaining: (request_max_bytes.max(0) as u64).min(broker_max_bytes as u64),
            first_served: false,
        }
    }

    /// How many bytes to read from the next partition; `None` if it can
    /// contribute no records (the read of its offsets alone is enough).
    /// `Some(0)` means "one batch, whatever its size".
    pub fn read_limit(&self, partition_max_bytes: i32) -> Option<u64> {
        let limit = (partition_max_bytes.max(0) as u64).min(self.remaining);
        (!self.first_served || limit > 0).then_some(limit)
    }

    /// The most record bytes the next partition may add to the response;
    /// `None` while no partition has records (the first is served whole).
    pub fn room(&self, partition_max_bytes: i32) -> Option<u64> {
        self.first_served
            .then(|| (partition_max_bytes.max(0) as u64).min(self.remaining))
    }

    /// Accounts `len` bytes of records put in the response.
    pub fn take(&mut self, len: u64) {
        if len > 0 {
            self.first_served = true;
            self.remaining = self.remaining.saturating_sub(len);
        }
    }
}

/// The length of the longest run of whole batches at the start of `bytes`
/// (given as `len` bytes readable through `byte_at`) that fits in `room`.
pub fn whole_batches_within(len: u64, room: u64, byte_at: impl Fn(u64) -> u8) -> u64 {
    // A v2 batch: base offset (8), then its length after that field (4).
    const LENGTH_END: u64 = 12;
    let mut end = 0u64;
    while end + LENGTH_END <= len {
        let length = (8..12).fold(0u32, |value, at| {
            (value << 8) | u32::from(byte_at(end + at))
        });
        let next = end + LENGTH_END + u64::from(length);
        if next > len.min(room) {
            break;
        }
        end = next;
    }
    end
}

fn encode_partition_head(writer: &mut WireWriter, version: i16, partition: &PartitionData) {
    let flexible = version >= 12;
    writer.int32(partition.partition_index);
    writer.int16(partition.error_code);
    writer.int64(partition.high_watermark);
    writer.int64(partition.last_stable_offset);
    if version >= 5 {
        writer.int64(partition.log_start_offset);
    }
    let aborted = partition.aborted_transactions.as_ref();
    writer.array_length(aborted.map(Vec::len), flexible);
    for transaction in aborted.into_iter().flatten() {
        writer.int64(transaction.producer_id);
        writer.int64(transaction.first_offset);
        if flexible {
            writer.no_tagged_fields();
        }
    }
    if version >= 11 {
        writer.int32(partition.preferred_read_replica);
    }
}

/// A partition's tagged fields: DivergingEpoch (tag 0) when set.
fn encode_partition_tags(writer: &mut WireWriter, partition: &PartitionData) {
    let Some((epoch, end_offset)) = partition.diverging_epoch else {
        writer.no_tagged_fields();
        return;
    };
    /// EpochEndOffset: epoch, end offset, its own empty tagged fields.
    const EPOCH_END_OFFSET_BYTES: u32 = 4 + 8 + 1;
    writer.unsigned_varint(1);
    writer.unsigned_varint(0);
    writer.unsigned_varint(EPOCH_END_OFFSET_BYTES);
    writer.int32(epoch);
    writer.int64(end_offset);
    writer.no_tagged_fields();
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Buf, Bytes};
    use kafka_protocol::messages::{FetchResponse, ResponseHeader};
    use kafka_protocol::protocol::Decodable;

    fn sample() -> (FetchResponseData, Vec<Vec<u8>>) {
        let records = [vec![7u8; 100], vec![], vec![9u8; 33]];
        let partition = |index: i32, records: &Vec<u8>| PartitionData {
            partition_index: index,
            error_code: if records.is_empty() { 1 } else { 0 },
            high_watermark: 1000 + i64::from(index),
            last_stable_offset: 900,
            log_start_offset: 5,
            aborted_transactions: (index == 2).then(|| {
                vec![AbortedTransaction {
                    producer_id: 44,
                    first_offset: 12,
                }]
            }),
            preferred_read_replica: -1,
            records_bytes: records.len(),
            diverging_epoch: (index == 1).then_some((3, 250)),
        };
        let data = FetchResponseData {
            throttle_time_ms: 0,
            error_code: 0,
            session_id: 0,
            topics: vec![
                TopicData {
                    name: "orders".into(),
                    topic_id: [1; 16],
                    partitions: vec![partition(0, &records[0]), partition(1, &records[1])],
                },
                TopicData {
                    name: "audit".into(),
                    topic_id: [2; 16],
                    partitions: vec![partition(2, &records[2])],
                },
            ],
        };
        (
            data,
            vec![records[0].clone(), records[1].clone(), records[2].clone()],
        )
    }

    /// Our frame, with the records spliced in, decodes with kafka-protocol's
    /// own decoder to the same values, for every version.
    #[test]
    fn every_version_decodes_with_kafkas_schema() {
        let (data, records) = sample();
        for version in FETCH_VERSIONS {
            let mut frame = Vec::new();
            let pieces = encode_fetch_response(77, version, &data).unwrap();
            // Bytes, then one cut before each partition with records.
            assert_eq!(pieces.len(), 5, "v{version}");
            for piece in pieces {
                match piece {
                    FetchPiece::Bytes(bytes) => frame.extend(bytes),
                    FetchPiece::Records { index } => frame.extend(&records[index]),
                }
            }
            let mut buffer = Bytes::from(frame);
            let size = buffer.get_i32();
            assert_eq!(size as usize, buffer.len(), "v{version}");
            let header_version = if version >= 12 { 1 } else { 0 };
            let header = ResponseHeader::decode(&mut buffer, header_version).unwrap();
            assert_eq!(header.correlation_id, 77);
            let decoded = FetchResponse::decode(&mut buffer, version).unwrap();
            assert!(buffer.is_empty(), "v{version}: trailing bytes");
            assert_eq!(decoded.responses.len(), 2);
            let third = &decoded.responses[1].partitions[0];
            assert_eq!(third.high_watermark, 1002);
            assert_eq!(third.records.as_deref(), Some(&records[2][..]));
            assert_eq!(third.aborted_transactions.as_ref().map(Vec::len), Some(1));
            let second = &decoded.responses[0].partitions[1];
            assert_eq!(
                (second.error_code, second.records.as_deref()),
                (1, Some(&[][..]))
            );
            let diverging = (
                second.diverging_epoch.epoch,
                second.diverging_epoch.end_offset,
            );
            if version >= 12 {
                assert_eq!(diverging, (3, 250), "v{version}: the tagged DivergingEpoch");
            } else {
                assert_eq!(diverging, (-1, -1), "v{version}: no field before v12");
            }
            if version >= 13 {
                assert_eq!(decoded.responses[0].topic_id.as_bytes(), &[1u8; 16]);
            } else {
                assert_eq!(decoded.responses[0].topic.as_str(), "orders");
            }
            if version >= 5 {
                assert_eq!(third.log_start_offset, 5);
            }
        }
    }

    #[test]
    fn unknown_versions_and_oversized_responses_are_errors() {
        let (mut data, _) = sample();
        assert_eq!(
            encode_fetch_response(1, 19, &data),
            Err(FetchEncodeError::Version(19))
        );
        data.topics[0].partitions[0].records_bytes = 1 << 31;
        assert_eq!(
            encode_fetch_response(1, 16, &data),
            Err(FetchEncodeError::TooLarge)
        );
        data.topics[0].partitions[0].records_bytes = (1 << 31) - 100;
        assert_eq!(
            encode_fetch_response(1, 16, &data),
            Err(FetchEncodeError::TooLarge)
        );
    }

    #[test]
    fn the_first_partition_with_records_is_served_whole_and_the_rest_fit() {
        let mut budget = ResponseBudget::new(1000, 57_671_680);
        assert_eq!(budget.read_limit(300), Some(300));
        assert_eq!(budget.room(300), None);
        // An empty partition does not count as the first.
        budget.take(0);
        assert_eq!(budget.room(300), None);
        // The first batch may exceed both limits.
        budget.take(800);
        assert_eq!(budget.read_limit(300), Some(200));
        assert_eq!(budget.room(300), Some(200));
        assert_eq!(budget.room(150), Some(150));
        budget.take(200);
        assert_eq!(budget.read_limit(300), None);
        assert_eq!(budget.room(300), Some(0));
    }

    #[test]
    fn the_broker_caps_the_request_and_zero_still_serves_one_batch() {
        let budget = ResponseBudget::new(i32::MAX, 1024);
        assert_eq!(budget.read_limit(i32::MAX), Some(1024));
        let mut budget = ResponseBudget::new(-5, 1024);
        assert_eq!(budget.read_limit(100), Some(0));
        budget.take(4096);
        assert_eq!(budget.read_limit(100), None);
    }

    #[test]
    fn whole_batches_are_cut_at_their_boundaries() {
        // Three "batches" of 20, 30 and 12 bytes (length field = size - 12).
        let mut bytes = Vec::new();
        for size in [20u32, 30, 12] {
            let mut batch = vec![0u8; size as usize];
            batch[8..12].copy_from_slice(&(size - 12).to_be_bytes());
            bytes.extend(batch);
        }
        let within = |room| whole_batches_within(bytes.len() as u64, room, |at| bytes[at as usize]);
        assert_eq!(within(0), 0);
        assert_eq!(within(19), 0);
        assert_eq!(within(20), 20);
        assert_eq!(within(49), 20);
        assert_eq!(within(50), 50);
        assert_eq!(within(1000), 62);
        // A truncated last batch is never counted.
        assert_eq!(whole_batches_within(55, 1000, |at| bytes[at as usize]), 50);
    }
}
