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
pub const FETCH_VERSIONS: std::ops::RangeInclusive<i16> = 4..=16;

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
    /// The records of `topics[topic].partitions[partition]`.
    Records {
        topic: usize,
        partition: usize,
    },
}

/// Encodes the whole frame (size prefix, response header, body) for
/// `version`; record bytes are left as [`FetchPiece::Records`] slots.
pub fn encode_fetch_response(
    correlation_id: i32,
    version: i16,
    data: &FetchResponseData,
) -> Vec<FetchPiece> {
    assert!(
        FETCH_VERSIONS.contains(&version),
        "fetch v{version} is not encoded"
    );
    let flexible = version >= 12;
    let mut pieces = Vec::new();
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
    for (topic_slot, topic) in data.topics.iter().enumerate() {
        if version >= 13 {
            writer.uuid(topic.topic_id);
        } else {
            writer.string(&topic.name, flexible);
        }
        writer.array_length(Some(topic.partitions.len()), flexible);
        for (partition_slot, partition) in topic.partitions.iter().enumerate() {
            encode_partition_head(&mut writer, version, partition);
            writer.records_length(Some(partition.records_bytes), flexible);
            pieces.push(FetchPiece::Bytes(std::mem::take(&mut writer.bytes)));
            if partition.records_bytes > 0 {
                pieces.push(FetchPiece::Records {
                    topic: topic_slot,
                    partition: partition_slot,
                });
            }
            if flexible {
                writer.no_tagged_fields();
            }
        }
        if flexible {
            writer.no_tagged_fields();
        }
    }
    if flexible {
        writer.no_tagged_fields();
    }
    pieces.push(FetchPiece::Bytes(writer.bytes));
    let body_bytes: usize = pieces
        .iter()
        .map(|piece| match piece {
            FetchPiece::Bytes(bytes) => bytes.len(),
            FetchPiece::Records { topic, partition } => {
                data.topics[*topic].partitions[*partition].records_bytes
            }
        })
        .sum();
    let mut frame = (body_bytes as i32).to_be_bytes().to_vec();
    if let Some(FetchPiece::Bytes(first)) = pieces.first_mut() {
        frame.append(first);
        *first = frame;
    }
    pieces.retain(|piece| !matches!(piece, FetchPiece::Bytes(bytes) if bytes.is_empty()));
    pieces
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
            for piece in encode_fetch_response(77, version, &data) {
                match piece {
                    FetchPiece::Bytes(bytes) => frame.extend(bytes),
                    FetchPiece::Records { topic, partition } => {
                        let slot = if topic == 0 { partition } else { 2 };
                        frame.extend(&records[slot]);
                    }
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
}
