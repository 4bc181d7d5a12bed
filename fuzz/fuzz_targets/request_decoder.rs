//! Any bytes as a request frame body: the header parser and every served
//! API's body decoder must return an error, never panic or over-allocate.
//!
//! Run: `cargo fuzz run request_decoder` (from the repository root).

#![no_main]

use brook_engine::protocol::frame::{Request, parse_request};
use bytes::Bytes;
use kafka_protocol::messages::*;
use libfuzzer_sys::fuzz_target;

fn decode_body(request: &Request) {
    let _ = match request.api_key {
        ApiKey::ApiVersions => request.decode_body::<ApiVersionsRequest>().map(drop),
        ApiKey::Metadata => request.decode_body::<MetadataRequest>().map(drop),
        ApiKey::Produce => request.decode_body::<ProduceRequest>().map(drop),
        ApiKey::Fetch => request.decode_body::<FetchRequest>().map(drop),
        ApiKey::ListOffsets => request.decode_body::<ListOffsetsRequest>().map(drop),
        ApiKey::CreateTopics => request.decode_body::<CreateTopicsRequest>().map(drop),
        ApiKey::DeleteTopics => request.decode_body::<DeleteTopicsRequest>().map(drop),
        ApiKey::DeleteRecords => request.decode_body::<DeleteRecordsRequest>().map(drop),
        ApiKey::OffsetForLeaderEpoch => request.decode_body::<OffsetForLeaderEpochRequest>().map(drop),
        ApiKey::DescribeConfigs => request.decode_body::<DescribeConfigsRequest>().map(drop),
        ApiKey::DescribeLogDirs => request.decode_body::<DescribeLogDirsRequest>().map(drop),
        ApiKey::CreatePartitions => request.decode_body::<CreatePartitionsRequest>().map(drop),
        ApiKey::IncrementalAlterConfigs => request.decode_body::<IncrementalAlterConfigsRequest>().map(drop),
        ApiKey::DescribeCluster => request.decode_body::<DescribeClusterRequest>().map(drop),
        _ => Ok(()),
    };
}

fuzz_target!(|data: &[u8]| {
    if let Ok(request) = parse_request(Bytes::copy_from_slice(data)) {
        decode_body(&request);
    }
});
