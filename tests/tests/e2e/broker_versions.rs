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
use kafka_protocol::messages::DescribeQuorumResponse;
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
            // v13 names the topic by id (KIP-516).
            let topic = if version >= 13 {
                TopicProduceData::default().with_topic_id(topic_id)
            } else {
                TopicProduceData::default().with_name(name(TOPIC))
            }
            .with_partition_data(vec![partition]);
            let request = ProduceRequest::default()
                .with_acks(-1)
                .with_timeout_ms(10_000)
                .with_topic_data(vec![topic]);
            let response: ProduceResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.responses[0].partition_responses[0].error_code, 0);
            if version >= 13 {
                assert_eq!(response.responses[0].topic_id, topic_id);
            }
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
                &ListOffsetsRequest::default()
                    .with_replica_id(brook_tests::raw::CONSUMER)
                    .with_topics(vec![topic]),
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
                .with_count(3 + i32::from(version))
                // Null, as clients send it: the generated default, an
                // empty list, assigns none (INVALID_REPLICA_ASSIGNMENT).
                .with_assignments(None);
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
        ApiKey::DescribeProducers => {
            let topic = describe_producers_request::TopicRequest::default()
                .with_name(name(TOPIC))
                .with_partition_indexes(vec![0, 7]);
            let request = DescribeProducersRequest::default().with_topics(vec![topic]);
            let response: DescribeProducersResponse = exchange(stream, api_key, version, &request);
            let partitions = &response.topics[0].partitions;
            assert_eq!(partitions[0].error_code, 0, "{response:?}");
            // Partition 7 does not exist.
            assert_eq!(partitions[1].error_code, 3, "{response:?}");
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
        ApiKey::AlterConfigs => {
            let config = alter_configs_request::AlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("86400000")));
            let resource = alter_configs_request::AlterConfigsResource::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str(TOPIC))
                .with_configs(vec![config]);
            let request = AlterConfigsRequest::default().with_resources(vec![resource]);
            let response: AlterConfigsResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.responses[0].error_code, 0);
            assert_eq!(response.responses[0].error_message, None);
        }
        ApiKey::AlterReplicaLogDirs => {
            let described: DescribeLogDirsResponse = exchange(
                stream,
                ApiKey::DescribeLogDirs,
                4,
                &DescribeLogDirsRequest::default().with_topics(None),
            );
            let topic = alter_replica_log_dirs_request::AlterReplicaLogDirTopic::default()
                .with_name(name(TOPIC))
                .with_partitions(vec![0]);
            let dir = alter_replica_log_dirs_request::AlterReplicaLogDir::default()
                .with_path(described.results[0].log_dir.clone())
                .with_topics(vec![topic]);
            let request = AlterReplicaLogDirsRequest::default().with_dirs(vec![dir]);
            let response: AlterReplicaLogDirsResponse =
                exchange(stream, api_key, version, &request);
            assert_eq!(response.results[0].partitions[0].error_code, 0);
        }
        ApiKey::DescribeTopicPartitions => {
            let topic =
                describe_topic_partitions_request::TopicRequest::default().with_name(name(TOPIC));
            let request = DescribeTopicPartitionsRequest::default()
                .with_topics(vec![topic])
                .with_response_partition_limit(2000);
            let response: DescribeTopicPartitionsResponse =
                exchange(stream, api_key, version, &request);
            let described = &response.topics[0];
            assert_eq!((described.error_code, described.topic_id), (0, topic_id));
            assert_eq!(described.partitions.len(), 1);
        }
        ApiKey::ListConfigResources => {
            let response: ListConfigResourcesResponse = exchange(
                stream,
                api_key,
                version,
                &ListConfigResourcesRequest::default(),
            );
            assert_eq!(response.error_code, 0);
            // v0 (ListClientMetricsResources) lists client metrics only.
            let topic_listed = response
                .config_resources
                .iter()
                .any(|resource| resource.resource_name.as_str() == TOPIC);
            assert_eq!(topic_listed, version >= 1, "v{version}");
        }
        ApiKey::DescribeQuorum => {
            // A one-node broker is the one voter of its own quorum
            // (tests/tests/e2e/cluster_epochs.rs sweeps a cluster's answer).
            let response: DescribeQuorumResponse = exchange(
                stream,
                api_key,
                version,
                &brook_tests::cluster::metadata_quorum_request(),
            );
            assert_eq!(response.error_code, 0, "v{version}: {response:?}");
            assert_eq!(
                response.topics[0].partitions[0].leader_id.0, 0,
                "v{version}"
            );
        }
        ApiKey::ElectLeaders => {
            // One node leads every partition it has: no election is needed,
            // as a one-broker Kafka answers (tests/tests/e2e/
            // cluster_leader_balance.rs elects in a cluster).
            let topic = elect_leaders_request::TopicPartitions::default()
                .with_topic(name(TOPIC))
                .with_partitions(vec![0]);
            let request = ElectLeadersRequest::default()
                .with_topic_partitions(Some(vec![topic]))
                .with_timeout_ms(1000);
            let response: ElectLeadersResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.error_code, 0);
            let result = &response.replica_election_results[0].partition_result[0];
            assert_eq!(result.error_code, 84, "ELECTION_NOT_NEEDED");
            // Every partition: only those needing an election are listed.
            let request = ElectLeadersRequest::default().with_timeout_ms(1000);
            let response: ElectLeadersResponse = exchange(stream, api_key, version, &request);
            assert!(
                response
                    .replica_election_results
                    .iter()
                    .all(|topic| topic.partition_result.is_empty())
            );
        }
        other if sweep_groups(stream, other, version) => {}
        other if sweep_transactions(stream, other, version) => {}
        other => panic!("{other:?} is advertised but not swept"),
    }
}

/// A transactional id's producer, after FindCoordinator created
/// `__transaction_state`: (producer id, epoch).
fn init_transactional(stream: &mut TcpStream, transactional_id: &str) -> (ProducerId, i16) {
    let find = FindCoordinatorRequest::default()
        .with_key(StrBytes::from_string(transactional_id.to_owned()))
        .with_key_type(1);
    let found: FindCoordinatorResponse = exchange(stream, ApiKey::FindCoordinator, 3, &find);
    assert_eq!(found.error_code, 0, "{found:?}");
    let init = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(StrBytes::from_string(
            transactional_id.to_owned(),
        ))))
        .with_transaction_timeout_ms(60_000)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    let response: InitProducerIdResponse = exchange(stream, ApiKey::InitProducerId, 4, &init);
    assert_eq!(response.error_code, 0, "{response:?}");
    (response.producer_id, response.producer_epoch)
}

fn add_partitions_v3(stream: &mut TcpStream, transactional_id: &str, producer: (ProducerId, i16)) {
    let topic = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
        .with_name(name(TOPIC))
        .with_partitions(vec![0]);
    let request = AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(StrBytes::from_string(
            transactional_id.to_owned(),
        )))
        .with_v3_and_below_producer_id(producer.0)
        .with_v3_and_below_producer_epoch(producer.1)
        .with_v3_and_below_topics(vec![topic]);
    let response: AddPartitionsToTxnResponse =
        exchange(stream, ApiKey::AddPartitionsToTxn, 3, &request);
    let code =
        response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code;
    assert_eq!(code, 0, "{response:?}");
}

/// The transaction APIs, each on a transactional id of its own.
fn sweep_transactions(stream: &mut TcpStream, api_key: ApiKey, version: i16) -> bool {
    let id = format!("txn-{api_key:?}-{version}");
    let transactional_id = || TransactionalId(StrBytes::from_string(id.clone()));
    match api_key {
        ApiKey::InitProducerId => {
            init_transactional(stream, &id);
            let request = InitProducerIdRequest::default()
                .with_transactional_id(Some(transactional_id()))
                .with_transaction_timeout_ms(60_000)
                .with_producer_id((-1).into())
                .with_producer_epoch(-1);
            let response: InitProducerIdResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.error_code, 0, "{response:?}");
            assert!(response.producer_id.0 >= 0 && response.producer_epoch >= 1);
        }
        ApiKey::AddPartitionsToTxn => {
            let producer = init_transactional(stream, &id);
            let topic = add_partitions_to_txn_request::AddPartitionsToTxnTopic::default()
                .with_name(name(TOPIC))
                .with_partitions(vec![0]);
            let response: AddPartitionsToTxnResponse = if version <= 3 {
                let request = AddPartitionsToTxnRequest::default()
                    .with_v3_and_below_transactional_id(transactional_id())
                    .with_v3_and_below_producer_id(producer.0)
                    .with_v3_and_below_producer_epoch(producer.1)
                    .with_v3_and_below_topics(vec![topic]);
                exchange(stream, api_key, version, &request)
            } else {
                let transaction =
                    add_partitions_to_txn_request::AddPartitionsToTxnTransaction::default()
                        .with_transactional_id(transactional_id())
                        .with_producer_id(producer.0)
                        .with_producer_epoch(producer.1)
                        .with_topics(vec![topic]);
                let request =
                    AddPartitionsToTxnRequest::default().with_transactions(vec![transaction]);
                exchange(stream, api_key, version, &request)
            };
            let results = if version <= 3 {
                &response.results_by_topic_v3_and_below
            } else {
                &response.results_by_transaction[0].topic_results
            };
            assert_eq!(
                results[0].results_by_partition[0].partition_error_code, 0,
                "{response:?}"
            );
        }
        ApiKey::AddOffsetsToTxn => {
            let producer = init_transactional(stream, &id);
            let request = AddOffsetsToTxnRequest::default()
                .with_transactional_id(transactional_id())
                .with_producer_id(producer.0)
                .with_producer_epoch(producer.1)
                .with_group_id(group_id(&id));
            let response: AddOffsetsToTxnResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.error_code, 0);
        }
        ApiKey::WriteTxnMarkers => {
            let producer = init_transactional(stream, &id);
            // A partition that exists, one its topic does not have, and a
            // topic that does not exist: each answered on its own.
            let topic = |topic: &str, partitions: Vec<i32>| {
                write_txn_markers_request::WritableTxnMarkerTopic::default()
                    .with_name(name(topic))
                    .with_partition_indexes(partitions)
            };
            let marker = write_txn_markers_request::WritableTxnMarker::default()
                .with_producer_id(producer.0)
                .with_producer_epoch(producer.1)
                .with_transaction_result(true)
                .with_topics(vec![
                    topic(TOPIC, vec![0, 99]),
                    topic("no-such-topic", vec![0]),
                ])
                .with_coordinator_epoch(0);
            let request = WriteTxnMarkersRequest::default().with_markers(vec![marker]);
            let response: WriteTxnMarkersResponse = exchange(stream, api_key, version, &request);
            let answers: Vec<(String, i32, i16)> = response.markers[0]
                .topics
                .iter()
                .flat_map(|topic| {
                    topic.partitions.iter().map(|partition| {
                        let name = topic.name.to_string();
                        (name, partition.partition_index, partition.error_code)
                    })
                })
                .collect();
            let unknown = 3; // UNKNOWN_TOPIC_OR_PARTITION
            assert_eq!(
                answers,
                [
                    (TOPIC.to_owned(), 0, 0),
                    (TOPIC.to_owned(), 99, unknown),
                    ("no-such-topic".to_owned(), 0, unknown)
                ]
            );
        }
        ApiKey::TxnOffsetCommit => {
            let producer = init_transactional(stream, &id);
            let add = AddOffsetsToTxnRequest::default()
                .with_transactional_id(transactional_id())
                .with_producer_id(producer.0)
                .with_producer_epoch(producer.1)
                .with_group_id(group_id(&id));
            let added: AddOffsetsToTxnResponse = exchange(stream, ApiKey::AddOffsetsToTxn, 3, &add);
            assert_eq!(added.error_code, 0);
            let partition = txn_offset_commit_request::TxnOffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(1);
            let topic = txn_offset_commit_request::TxnOffsetCommitRequestTopic::default()
                .with_name(name(TOPIC))
                .with_partitions(vec![partition]);
            let request = TxnOffsetCommitRequest::default()
                .with_transactional_id(transactional_id())
                .with_group_id(group_id(&id))
                .with_producer_id(producer.0)
                .with_producer_epoch(producer.1)
                .with_generation_id(-1)
                .with_topics(vec![topic]);
            let response: TxnOffsetCommitResponse = exchange(stream, api_key, version, &request);
            assert_eq!(
                response.topics[0].partitions[0].error_code, 0,
                "{response:?}"
            );
        }
        ApiKey::EndTxn => {
            let producer = init_transactional(stream, &id);
            add_partitions_v3(stream, &id, producer);
            let request = EndTxnRequest::default()
                .with_transactional_id(transactional_id())
                .with_producer_id(producer.0)
                .with_producer_epoch(producer.1)
                .with_committed(version % 2 == 0);
            let response: EndTxnResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.error_code, 0);
        }
        ApiKey::DescribeTransactions => {
            let producer = init_transactional(stream, &id);
            add_partitions_v3(stream, &id, producer);
            let request = DescribeTransactionsRequest::default()
                .with_transactional_ids(vec![transactional_id()]);
            let response: DescribeTransactionsResponse =
                exchange(stream, api_key, version, &request);
            let state = &response.transaction_states[0];
            assert_eq!(
                (state.error_code, state.transaction_state.as_str()),
                (0, "Ongoing")
            );
            assert_eq!(state.topics[0].partitions, vec![0]);
        }
        ApiKey::ListTransactions => {
            init_transactional(stream, &id);
            let response: ListTransactionsResponse = exchange(
                stream,
                api_key,
                version,
                &ListTransactionsRequest::default(),
            );
            assert_eq!(response.error_code, 0);
            assert!(
                response
                    .transaction_states
                    .iter()
                    .any(|state| state.transactional_id.0.as_str() == id)
            );
        }
        _ => return false,
    }
    true
}

fn group_id(value: &str) -> GroupId {
    GroupId(StrBytes::from_string(value.to_owned()))
}

/// A member of a new group `group` that has joined (generation 1, leader).
fn joined_member(stream: &mut TcpStream, group: &str) -> (StrBytes, i32) {
    let protocol = join_group_request::JoinGroupRequestProtocol::default()
        .with_name(StrBytes::from_static_str("range"))
        .with_metadata(Bytes::from_static(b"\0\0\0\0\0\0\0\0"));
    let mut request = JoinGroupRequest::default()
        .with_group_id(group_id(group))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_protocols(vec![protocol]);
    let first: JoinGroupResponse = exchange(stream, ApiKey::JoinGroup, 9, &request);
    assert_eq!(first.error_code, 79, "MEMBER_ID_REQUIRED");
    request.member_id = first.member_id;
    let joined: JoinGroupResponse = exchange(stream, ApiKey::JoinGroup, 9, &request);
    assert_eq!((joined.error_code, joined.generation_id), (0, 1));
    (joined.member_id, joined.generation_id)
}

/// Commits offset 1 of the prepared topic for `group` outside group
/// management (generation -1).
fn simple_commit(stream: &mut TcpStream, group: &str, version: i16) -> OffsetCommitResponse {
    let partition = offset_commit_request::OffsetCommitRequestPartition::default()
        .with_partition_index(0)
        .with_committed_offset(1);
    let topic = offset_commit_request::OffsetCommitRequestTopic::default()
        .with_name(name(TOPIC))
        .with_partitions(vec![partition]);
    let request = OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(-1)
        .with_retention_time_ms(-1)
        .with_topics(vec![topic]);
    exchange(stream, ApiKey::OffsetCommit, version, &request)
}

/// The group APIs: each version against state it prepares itself.
fn sweep_groups(stream: &mut TcpStream, api_key: ApiKey, version: i16) -> bool {
    let group = format!("{api_key:?}-v{version}");
    match api_key {
        ApiKey::FindCoordinator => {
            let request = if version >= 4 {
                FindCoordinatorRequest::default()
                    .with_coordinator_keys(vec![StrBytes::from_string(group)])
            } else {
                FindCoordinatorRequest::default().with_key(StrBytes::from_string(group))
            };
            let response: FindCoordinatorResponse = exchange(stream, api_key, version, &request);
            let (error, node) = match response.coordinators.first() {
                Some(coordinator) => (coordinator.error_code, coordinator.node_id),
                None => (response.error_code, response.node_id),
            };
            assert_eq!((error, node), (0, BrokerId(0)), "{api_key:?} v{version}");
        }
        ApiKey::JoinGroup => {
            let protocol = join_group_request::JoinGroupRequestProtocol::default()
                .with_name(StrBytes::from_static_str("range"))
                .with_metadata(Bytes::from_static(b"\0\0\0\0\0\0\0\0"));
            let mut request = JoinGroupRequest::default()
                .with_group_id(group_id(&group))
                .with_session_timeout_ms(10_000)
                .with_rebalance_timeout_ms(10_000)
                .with_protocol_type(StrBytes::from_static_str("consumer"))
                .with_protocols(vec![protocol]);
            let mut response: JoinGroupResponse = exchange(stream, api_key, version, &request);
            if version >= 4 {
                assert_eq!(response.error_code, 79, "MEMBER_ID_REQUIRED");
                request.member_id = response.member_id;
                response = exchange(stream, api_key, version, &request);
            }
            assert_eq!(
                (response.error_code, response.generation_id),
                (0, 1),
                "v{version}"
            );
            assert_eq!(response.members.len(), 1, "the leader sees itself");
        }
        ApiKey::SyncGroup => {
            let (member_id, generation) = joined_member(stream, &group);
            let assignment = sync_group_request::SyncGroupRequestAssignment::default()
                .with_member_id(member_id.clone())
                .with_assignment(Bytes::from_static(b"assigned"));
            let request = SyncGroupRequest::default()
                .with_group_id(group_id(&group))
                .with_generation_id(generation)
                .with_member_id(member_id)
                .with_assignments(vec![assignment]);
            let response: SyncGroupResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.error_code, 0);
            assert_eq!(response.assignment, Bytes::from_static(b"assigned"));
        }
        ApiKey::Heartbeat => {
            let (member_id, generation) = joined_member(stream, &group);
            let request = HeartbeatRequest::default()
                .with_group_id(group_id(&group))
                .with_generation_id(generation)
                .with_member_id(member_id);
            let response: HeartbeatResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.error_code, 0);
        }
        ApiKey::LeaveGroup => {
            let (member_id, _) = joined_member(stream, &group);
            let request = if version >= 3 {
                LeaveGroupRequest::default()
                    .with_group_id(group_id(&group))
                    .with_members(vec![
                        leave_group_request::MemberIdentity::default().with_member_id(member_id),
                    ])
            } else {
                LeaveGroupRequest::default()
                    .with_group_id(group_id(&group))
                    .with_member_id(member_id)
            };
            let response: LeaveGroupResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.error_code, 0);
            assert!(response.members.iter().all(|member| member.error_code == 0));
        }
        ApiKey::OffsetCommit => {
            let response = simple_commit(stream, &group, version);
            assert_eq!(response.topics[0].partitions[0].error_code, 0);
        }
        ApiKey::OffsetFetch => {
            simple_commit(stream, &group, 2);
            let offsets = if version >= 8 {
                let request_group = offset_fetch_request::OffsetFetchRequestGroup::default()
                    .with_group_id(group_id(&group))
                    .with_topics(None);
                let request = OffsetFetchRequest::default().with_groups(vec![request_group]);
                let response: OffsetFetchResponse = exchange(stream, api_key, version, &request);
                assert_eq!(response.groups[0].error_code, 0);
                response.groups[0].topics[0]
                    .partitions
                    .iter()
                    .map(|partition| partition.committed_offset)
                    .collect::<Vec<_>>()
            } else {
                let topic = offset_fetch_request::OffsetFetchRequestTopic::default()
                    .with_name(name(TOPIC))
                    .with_partition_indexes(vec![0]);
                let request = OffsetFetchRequest::default()
                    .with_group_id(group_id(&group))
                    .with_topics(Some(vec![topic]));
                let response: OffsetFetchResponse = exchange(stream, api_key, version, &request);
                assert_eq!(response.error_code, 0);
                response.topics[0]
                    .partitions
                    .iter()
                    .map(|partition| partition.committed_offset)
                    .collect()
            };
            assert_eq!(offsets, vec![1], "v{version}");
        }
        ApiKey::ListGroups => {
            simple_commit(stream, &group, 2);
            let response: ListGroupsResponse =
                exchange(stream, api_key, version, &ListGroupsRequest::default());
            assert_eq!(response.error_code, 0);
            assert!(
                response
                    .groups
                    .iter()
                    .any(|listed| listed.group_id.as_str() == group)
            );
        }
        ApiKey::DescribeGroups => {
            joined_member(stream, &group);
            let request = DescribeGroupsRequest::default().with_groups(vec![group_id(&group)]);
            let response: DescribeGroupsResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.groups[0].error_code, 0);
            assert_eq!(
                response.groups[0].group_state.as_str(),
                "CompletingRebalance"
            );
            assert_eq!(response.groups[0].members.len(), 1);
        }
        ApiKey::DeleteGroups => {
            simple_commit(stream, &group, 2);
            let request = DeleteGroupsRequest::default().with_groups_names(vec![group_id(&group)]);
            let response: DeleteGroupsResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.results[0].error_code, 0);
        }
        ApiKey::OffsetDelete => {
            simple_commit(stream, &group, 2);
            let partition = offset_delete_request::OffsetDeleteRequestPartition::default()
                .with_partition_index(0);
            let topic = offset_delete_request::OffsetDeleteRequestTopic::default()
                .with_name(name(TOPIC))
                .with_partitions(vec![partition]);
            let request = OffsetDeleteRequest::default()
                .with_group_id(group_id(&group))
                .with_topics(vec![topic]);
            let response: OffsetDeleteResponse = exchange(stream, api_key, version, &request);
            assert_eq!(response.error_code, 0);
            assert_eq!(response.topics[0].partitions[0].error_code, 0);
        }
        _ => return false,
    }
    true
}

#[test]
fn every_advertised_version_answers_in_its_own_schema() {
    let dir = tempfile::tempdir().unwrap();
    // No initial rebalance delay: each JoinGroup version completes at once.
    let broker = Broker::start(
        BROOK,
        dir.path(),
        2,
        &["--set", "group.initial.rebalance.delay.ms=0"],
    );
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
        // The group coordinator exists once a FindCoordinator created it.
        ApiKey::FindCoordinator => 4,
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
