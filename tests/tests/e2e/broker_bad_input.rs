//! Bad input over raw TCP: each case either closes that connection or gets
//! Kafka's error answer, and the broker keeps serving everyone else.

use std::io::{Read, Write};
use std::net::TcpStream;

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use brook_tests::broker::Broker;
use brook_tests::raw::{self, connect};
use bytes::Bytes;
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ListOffsetsRequest, ListOffsetsResponse, ProduceRequest,
    ProduceResponse, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

fn frame<T: Encodable>(api_key: ApiKey, version: i16, body: &T) -> Vec<u8> {
    raw::frame(api_key, version, 7, body)
}

fn response(stream: &mut TcpStream, api_key: ApiKey, version: i16) -> Option<Bytes> {
    raw::response(stream, api_key, version, 7)
}

fn closed(stream: &mut TcpStream) -> bool {
    let mut byte = [0u8; 1];
    matches!(stream.read(&mut byte), Ok(0) | Err(_))
}

/// The broker still answers ApiVersions on a fresh connection.
fn still_serving(broker: &Broker) {
    let mut stream = connect(broker);
    stream
        .write_all(&frame(
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default(),
        ))
        .unwrap();
    let mut body = response(&mut stream, ApiKey::ApiVersions, 3).expect("an ApiVersions response");
    let versions = ApiVersionsResponse::decode(&mut body, 3).unwrap();
    assert_eq!(versions.error_code, 0);
    assert!(
        versions
            .api_keys
            .iter()
            .any(|key| key.api_key == ApiKey::Fetch as i16)
    );
}

#[test]
fn hostile_frames_close_only_their_connection() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        BROOK,
        dir.path(),
        2,
        &["--set", "socket.request.max.bytes=1048576"],
    );
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "a frame over socket.request.max.bytes",
            200_000_000i32.to_be_bytes().to_vec(),
        ),
        ("a negative frame size", (-5i32).to_be_bytes().to_vec()),
        (
            "random bytes",
            (0..1000u32)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
        ),
        ("an unknown API key", {
            let mut frame = frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
            frame[4..6].copy_from_slice(&999i16.to_be_bytes());
            frame
        }),
        ("a Produce version below Kafka 4's minimum", {
            let mut frame = frame(ApiKey::Produce, 3, &ProduceRequest::default());
            frame[6..8].copy_from_slice(&2i16.to_be_bytes());
            frame
        }),
        ("an array of 2^31 elements in a few bytes", {
            let mut frame = frame(
                ApiKey::Metadata,
                0,
                &kafka_protocol::messages::MetadataRequest::default(),
            );
            let len = frame.len();
            frame[len - 4..].copy_from_slice(&i32::MAX.to_be_bytes());
            frame
        }),
        ("a body that does not decode", {
            let mut frame = frame(
                ApiKey::Metadata,
                12,
                &kafka_protocol::messages::MetadataRequest::default(),
            );
            let len = frame.len();
            frame.truncate(len - 3);
            frame[0..4].copy_from_slice(&((len - 7) as i32).to_be_bytes());
            frame
        }),
    ];
    for (name, bytes) in cases {
        let mut stream = connect(&broker);
        stream.write_all(&bytes).unwrap();
        assert!(closed(&mut stream), "{name}: the connection is closed");
        still_serving(&broker);
    }
    // A truncated frame: the size promises more than ever arrives.
    let mut stream = connect(&broker);
    let frame = frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    stream.write_all(&frame[..frame.len() - 4]).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    assert!(closed(&mut stream), "a truncated frame ends the connection");
    still_serving(&broker);
    assert!(
        broker.log().contains("closing connection"),
        "each close is logged"
    );
}

#[test]
fn an_unsupported_api_versions_version_gets_the_supported_list() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 1, &[]);
    let mut stream = connect(&broker);
    let mut request = frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    request[6..8].copy_from_slice(&99i16.to_be_bytes());
    stream.write_all(&request).unwrap();
    let mut body = response(&mut stream, ApiKey::ApiVersions, 0).expect("a v0 answer");
    let versions = ApiVersionsResponse::decode(&mut body, 0).unwrap();
    assert_eq!(versions.error_code, 35, "UNSUPPORTED_VERSION");
    let api_versions = versions
        .api_keys
        .iter()
        .find(|key| key.api_key == ApiKey::ApiVersions as i16)
        .unwrap();
    assert_eq!((api_versions.min_version, api_versions.max_version), (0, 4));
    still_serving(&broker);
}

fn produce_request(records: Vec<u8>) -> ProduceRequest {
    let partition = PartitionProduceData::default()
        .with_index(0)
        .with_records(Some(Bytes::from(records)));
    let topic = TopicProduceData::default()
        .with_name(TopicName(StrBytes::from_static_str("guarded")))
        .with_partition_data(vec![partition]);
    ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![topic])
}

fn latest_offset(broker: &Broker) -> i64 {
    let partition = ListOffsetsPartition::default()
        .with_partition_index(0)
        .with_timestamp(-1);
    let topic = ListOffsetsTopic::default()
        .with_name(TopicName(StrBytes::from_static_str("guarded")))
        .with_partitions(vec![partition]);
    let mut stream = connect(broker);
    stream
        .write_all(&frame(
            ApiKey::ListOffsets,
            7,
            &ListOffsetsRequest::default()
                .with_replica_id(brook_tests::raw::CONSUMER)
                .with_topics(vec![topic]),
        ))
        .unwrap();
    let mut body = response(&mut stream, ApiKey::ListOffsets, 7).unwrap();
    ListOffsetsResponse::decode(&mut body, 7).unwrap().topics[0].partitions[0].offset
}

#[test]
fn a_produce_with_a_corrupt_crc_is_refused_and_appends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 1, &[]);
    let good = encode_batch(
        &[NewRecord::value("fine", TimestampMs(1))],
        &BatchOptions::default(),
    );
    let produce = |records: Vec<u8>| {
        let mut stream = connect(&broker);
        stream
            .write_all(&frame(ApiKey::Produce, 9, &produce_request(records)))
            .unwrap();
        let mut body = response(&mut stream, ApiKey::Produce, 9).expect("a Produce response");
        let response = ProduceResponse::decode(&mut body, 9).unwrap();
        response.responses[0].partition_responses[0].error_code
    };
    assert_eq!(produce(good.clone()), 0);
    assert_eq!(latest_offset(&broker), 1);
    let mut corrupt = good.clone();
    *corrupt.last_mut().unwrap() ^= 0x55;
    assert_eq!(produce(corrupt), 2, "CORRUPT_MESSAGE");
    let mut magic = good.clone();
    magic[16] = 1;
    assert_eq!(produce(magic), 87, "INVALID_RECORD for an old magic");
    let mut shifted = good;
    shifted[7] = 3;
    assert_eq!(
        produce(shifted),
        87,
        "INVALID_RECORD for a client base offset"
    );
    assert_eq!(latest_offset(&broker), 1, "nothing was appended");
    still_serving(&broker);
}
