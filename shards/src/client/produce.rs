//! A Produce request carrying one batch for one partition, written around
//! the batch instead of encoded with it: kafka-protocol's encoder copies
//! the batch into the request (a second copy of every byte the load
//! generator sends), while these few fields fit in the room a
//! [`BatchBuilder::with_headroom`](crate::client::records::BatchBuilder::with_headroom)
//! leaves before the batch. Byte for byte what kafka-protocol writes (the
//! tests check), at [`VERSION`] only.

use brook_engine::protocol::wire::WireWriter;

/// The Produce version these frames are (flexible: compact strings and
/// arrays, tagged fields).
pub const VERSION: i16 = 9;
/// After the batch: the partition's, the topic's and the request's
/// (empty) tagged fields.
pub const FRAME_SUFFIX: [u8; 3] = [0, 0, 0];
/// Headroom that holds the frame's start for any topic name Kafka allows
/// (249 bytes) and a client id of up to 200.
pub const FRAME_PREFIX_BYTES_MAX: usize = 512;

/// What comes before the batch in the frame: size, `header` (the request
/// header, client id and correlation id included), then the body up to the
/// partition's records.
pub fn frame_prefix(
    header: &[u8],
    acks: i16,
    timeout_ms: i32,
    topic: &str,
    partition: i32,
    batch_bytes: usize,
) -> Vec<u8> {
    let mut body = WireWriter::default();
    body.int8(0); // transactional id: null (compact nullable string)
    body.int16(acks);
    body.int32(timeout_ms);
    body.array_length(Some(1), true); // one topic
    body.string(topic, true);
    body.array_length(Some(1), true); // one partition
    body.int32(partition);
    body.records_length(Some(batch_bytes), true);
    let size = header.len() + body.bytes.len() + batch_bytes + FRAME_SUFFIX.len();
    let mut prefix = WireWriter::default();
    prefix.int32(size as i32);
    prefix.bytes.extend_from_slice(header);
    prefix.bytes.extend_from_slice(&body.bytes);
    prefix.bytes
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::{Bytes, BytesMut};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    use kafka_protocol::messages::{ApiKey, ProduceRequest, RequestHeader, TopicName};
    use kafka_protocol::protocol::{Encodable, StrBytes};

    fn encoded_by_kafka_protocol(header: &[u8], topic: &str, batch: &Bytes) -> Vec<u8> {
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(30_000)
            .with_topic_data(vec![
                TopicProduceData::default()
                    .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                    .with_partition_data(vec![
                        PartitionProduceData::default()
                            .with_index(7)
                            .with_records(Some(batch.clone())),
                    ]),
            ]);
        let mut body = BytesMut::new();
        request.encode(&mut body, VERSION).unwrap();
        let mut frame = ((header.len() + body.len()) as i32).to_be_bytes().to_vec();
        frame.extend_from_slice(header);
        frame.extend_from_slice(&body);
        frame
    }

    #[test]
    fn frames_are_what_kafka_protocol_encodes() {
        let mut header = BytesMut::new();
        RequestHeader::default()
            .with_request_api_key(ApiKey::Produce as i16)
            .with_request_api_version(VERSION)
            .with_correlation_id(42)
            .with_client_id(Some(StrBytes::from_static_str("brook-bench")))
            .encode(&mut header, ApiKey::Produce.request_header_version(VERSION))
            .unwrap();
        // Lengths either side of a varint's one-byte limit.
        for (topic, batch_bytes) in [("t", 10), ("a-topic", 127), (&"x".repeat(200)[..], 70_000)] {
            let batch = Bytes::from((0..batch_bytes).map(|i| i as u8).collect::<Vec<u8>>());
            let prefix = frame_prefix(&header, -1, 30_000, topic, 7, batch.len());
            assert!(prefix.len() <= FRAME_PREFIX_BYTES_MAX);
            let ours = [&prefix[..], &batch[..], &FRAME_SUFFIX[..]].concat();
            assert_eq!(
                ours,
                encoded_by_kafka_protocol(&header, topic, &batch),
                "{topic}"
            );
        }
    }
}
