//! Every API Brook advertises, at every version it serves, gets an answer
//! that decodes with Kafka's own schema for that version (kafka-protocol).
//! Clients pick their own versions; this covers the ones none of the test
//! clients happen to use (kafkajs and kafka-python speak old ones).

use std::net::TcpStream;
use std::time::Duration;

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::protocol::versions::SUPPORTED;
use brook_engine::types::TimestampMs;
use brook_tests::broker::Broker;
use brook_tests::raw::exchange;
use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");
const TOPIC: &str = "versions";

fn name(value: &str) -> TopicName {
    TopicName(StrBytes::from_string(value.to_owned()))
}

fn batch() -> Bytes {
    Bytes::from(encode_batch(
        &[NewRecord::value("v", TimestampMs(1))],
        &BatchOptions::default(),
    ))
}

/// Sends one request of `api_key` at `version`, checks the answer decodes
/// and reports no error for the prepared topic.
fn sweep(stream: &mut TcpStream, api_key: ApiKey, version: i16, topic_id: Uuid) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    match api_key {
        ApiKey::ApiVersions => {
            let response: ApiVersionsResponse =
                exchange(stream, api_key, version, &ApiVersionsRequest::default());
            assert_eq!(response.error_code, 0);
        }
        ApiKey::Metadata => {
            let topic =
                metadata_request::MetadataRequestTopic::default().with_name(Some(name(TOPIC)));
            let response: MetadataResponse = exchange(
                stream,
                api_key,
                version,
                &MetadataRequest::default().with_topics(Some(vec![topic])),
            );
            assert_eq!(response.topics[0].error_code, 0);
            assert_eq!(response.topics[0].partitions.len(), 1);
        }
        ApiKey::Produce => {
            let partition = PartitionProduceData::default()
                .with_index(0)
                .with_records(Some(batch()));
            let topic = TopicProduceData::default()
                .with_name(name(TOPIC))
                .with_partition_data(vec![partition]);
            let request = ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![topic]);
            let response: ProduceResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
        }
        ApiKey::Fetch => {
            let partition = FetchPartition::default()
                .with_partition(0)
                .with_fetch_offset(0)
                .with_partition_max_bytes(1 << 20);
            let topic = if version >= 13 {
                FetchTopic::default().with_topic_id(topic_id)
            } else {
                FetchTopic::default().with_topic(name(TOPIC))
            };
            let request = FetchRequest::default()
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![topic.with_partitions(vec![partition])]);
            let response: FetchResponse = exchange(stream, api_key, version, &request);
            let partition = &response.responses[0].partitions[0];
            assert_eq!(partition.error_code, 0);
            assert!(
                partition
                    .records
                    .as_ref()
                    .is_some_and(|records| !records.is_empty()),
                "v{version} fetch returns records"
            );
        }
        ApiKey::ListOffsets => {
            let partition = list_offsets_request::ListOffsetsPartition::default()
                .with_partition_index(0)
                .with_timestamp(-1);
            let topic = list_offsets_request::ListOffsetsTopic::default()
                .with_name(name(TOPIC))
                .with_partitions(vec![partition]);
            let response: ListOffsetsResponse = exchange(
                stream,
                api_key,
                version,
                &ListOffsetsRequest::default().with_topics(vec![topic]),
            );
            assert_eq!(response.topics[0].partitions[0].error_code, 0);
            assert!(response.topics[0].partitions[0].offset > 0);
        }
        ApiKey::OffsetForLeaderEpoch => {
            let partition = offset_for_leader_epoch_request::OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_leader_epoch(0);
            let topic = offset_for_leader_epoch_request::OffsetForLeaderTopic::default()
                .with_topic(name(TOPIC))
                .with_partitions(vec![partition]);
            let request = OffsetForLeaderEpochRequest::default().with_topics(vec![topic]);
            let response: OffsetForLeaderEpochResponse =
                exchange(stream, api_key, version, &request);
            let result = &response.topics[0].partitions[0];
            assert_eq!((result.error_code, result.leader_epoch), (0, 0));
            assert!(result.end_offset > 0);
        }
        ApiKey::DeleteRecords => {
            let partition = delete_records_request::DeleteRecordsPartition::default()
                .with_partition_index(0)
                .with_offset(0);
            let topic = delete_records_request::DeleteRecordsTopic::default()
                .with_name(name(TOPIC))
                .with_partitions(vec![partition]);
            let request = DeleteRecordsRequest::default()
                .with_topics(vec![topic])
                .with_timeout_ms(1000);
            let response: DeleteRecordsResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.topics[0].partitions[0].error_code, 0);
        }
        ApiKey::CreateTopics => {
            let topic = create_topics_request::CreatableTopic::default()
                .with_name(name(&format!("created-{version}")))
                .with_num_partitions(2)
                .with_replication_factor(1);
            let response: CreateTopicsResponse = exchange(
                stream,
                api_key,
                version,
                &CreateTopicsRequest::default().with_topics(vec![topic]),
            );
            assert_eq!(response.topics[0].error_code, 0);
        }
        ApiKey::CreatePartitions => {
            let topic = create_partitions_request::CreatePartitionsTopic::default()
                .with_name(name(&format!("created-{}", 7)))
                .with_count(3 + i32::from(version));
            let response: CreatePartitionsResponse = exchange(
                stream,
                api_key,
                version,
                &CreatePartitionsRequest::default().with_topics(vec![topic]),
            );
            assert_eq!(response.results[0].error_code, 0);
        }
        ApiKey::DeleteTopics => {
            let doomed = format!("created-{}", version + 1);
            let request = if version >= 6 {
                DeleteTopicsRequest::default().with_topics(vec![
                    delete_topics_request::DeleteTopicState::default()
                        .with_name(Some(name(&doomed))),
                ])
            } else {
                DeleteTopicsRequest::default().with_topic_names(vec![name(&doomed)])
            };
            let response: DeleteTopicsResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.responses[0].error_code, 0);
        }
        ApiKey::DescribeConfigs => {
            let resource = describe_configs_request::DescribeConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str(TOPIC))
                .with_configuration_keys(None);
            let response: DescribeConfigsResponse = exchange(
                stream,
                api_key,
                version,
                &DescribeConfigsRequest::default().with_resources(vec![resource]),
            );
            assert_eq!(response.results[0].error_code, 0);
            assert!(
                response.results[0]
                    .configs
                    .iter()
                    .any(|config| config.name.as_str() == "retention.ms")
            );
        }
        ApiKey::IncrementalAlterConfigs => {
            let config = incremental_alter_configs_request::AlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("86400000")));
            let resource = incremental_alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str(TOPIC))
                .with_configs(vec![config]);
            let request = IncrementalAlterConfigsRequest::default().with_resources(vec![resource]);
            let response: IncrementalAlterConfigsResponse =
                exchange(stream, api_key, version, &request);
            assert_eq!(response.responses[0].error_code, 0);
        }
        ApiKey::DescribeCluster => {
            let response: DescribeClusterResponse =
                exchange(stream, api_key, version, &DescribeClusterRequest::default());
            assert_eq!((response.error_code, response.brokers.len()), (0, 1));
        }
        ApiKey::DescribeLogDirs => {
            let response: DescribeLogDirsResponse = exchange(
                stream,
                api_key,
                version,
                &DescribeLogDirsRequest::default().with_topics(None),
            );
            assert_eq!(response.results.len(), 1);
            assert!(
                response.results[0]
                    .topics
                    .iter()
                    .any(|topic| topic.name.as_str() == TOPIC)
            );
        }
        other => panic!("{other:?} is advertised but not swept"),
    }
}

#[test]
fn every_advertised_version_answers_in_its_own_schema() {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(BROOK, dir.path(), 2, &[]);
    let mut stream = TcpStream::connect(&broker.address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let topic = create_topics_request::CreatableTopic::default()
        .with_name(name(TOPIC))
        .with_num_partitions(1)
        .with_replication_factor(1);
    let created: CreateTopicsResponse = exchange(
        &mut stream,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default().with_topics(vec![topic]),
    );
    let topic_id = created.topics[0].topic_id;
    let mut swept = Vec::new();
    // Produce first so every later read has records; DeleteTopics after CreateTopics.
    let mut order: Vec<_> = SUPPORTED.to_vec();
    order.sort_by_key(|entry| match entry.api_key {
        ApiKey::Produce => 0,
        ApiKey::CreateTopics => 1,
        ApiKey::CreatePartitions => 2,
        ApiKey::DeleteTopics => 3,
        ApiKey::DeleteRecords => 9,
        _ => 5,
    });
    for entry in order {
        for version in entry.min..=entry.max {
            sweep(&mut stream, entry.api_key, version, topic_id);
        }
        swept.push(format!("{:?} v{}-{}", entry.api_key, entry.min, entry.max));
    }
    println!("swept: {}", swept.join(", "));
}
