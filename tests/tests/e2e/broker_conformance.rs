//! Broker-side differences from Kafka that clients' own test suites found
//! (issue 17 §2), each pinned by raw requests: the fields as Kafka fills
//! them, not only "the client did not complain".

use std::net::TcpStream;

use brook_engine::log::batch::{BatchView, Compression};
use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use brook_tests::broker::Broker;
use brook_tests::raw::{connect, create_topic, exchange};
use bytes::Bytes;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const BROOK: &str = env!("CARGO_BIN_EXE_brook-e2e");

/// READ WRITE CREATE DELETE ALTER DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS.
const TOPIC_OPERATIONS: i32 = 3576;
/// CREATE ALTER DESCRIBE CLUSTER_ACTION DESCRIBE_CONFIGS ALTER_CONFIGS
/// IDEMPOTENT_WRITE.
const CLUSTER_OPERATIONS: i32 = 8096;
/// READ DELETE DESCRIBE DESCRIBE_CONFIGS ALTER_CONFIGS.
const GROUP_OPERATIONS: i32 = 3400;

fn name(value: &str) -> TopicName {
    TopicName(StrBytes::from_string(value.to_owned()))
}

fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

fn start() -> (tempfile::TempDir, Broker, TcpStream) {
    let dir = tempfile::tempdir().unwrap();
    let broker = Broker::start(
        BROOK,
        dir.path(),
        2,
        &["--set", "group.initial.rebalance.delay.ms=0"],
    );
    let stream = connect(&broker);
    (dir, broker, stream)
}

#[test]
fn success_responses_carry_the_error_messages_kafka_sends() {
    let (_dir, _broker, mut stream) = start();
    for version in 2..=7 {
        let topic = create_topics_request::CreatableTopic::default()
            .with_name(name(&format!("null-message-{version}")))
            .with_num_partitions(1)
            .with_replication_factor(1);
        let created: CreateTopicsResponse = exchange(
            &mut stream,
            ApiKey::CreateTopics,
            version,
            &CreateTopicsRequest::default().with_topics(vec![topic]),
        );
        let result = &created.topics[0];
        assert_eq!(result.error_code, 0, "v{version}");
        // Kafka's controller sets null; the schema default is "".
        assert_eq!(result.error_message, None, "CreateTopics v{version}");
    }
    // FindCoordinator v1-3 carry `Errors.message()`, "NONE" on success;
    // v4+ leave each coordinator's message at the schema default "".
    for version in 1..=6 {
        let request = if version >= 4 {
            FindCoordinatorRequest::default().with_coordinator_keys(vec![text("a-group")])
        } else {
            FindCoordinatorRequest::default().with_key(text("a-group"))
        };
        let found: FindCoordinatorResponse =
            exchange(&mut stream, ApiKey::FindCoordinator, version, &request);
        let message = match found.coordinators.first() {
            Some(coordinator) => {
                assert_eq!(coordinator.error_code, 0);
                coordinator.error_message.clone()
            }
            None => {
                assert_eq!(found.error_code, 0);
                found.error_message.clone()
            }
        };
        let expected = if version >= 4 { "" } else { "NONE" };
        assert_eq!(
            message.as_deref(),
            Some(expected),
            "FindCoordinator v{version}"
        );
    }
    // DescribeConfigs: documentation is null unless asked for.
    let resource = describe_configs_request::DescribeConfigsResource::default()
        .with_resource_type(2)
        .with_resource_name(text("null-message-7"))
        .with_configuration_keys(None);
    let described: DescribeConfigsResponse = exchange(
        &mut stream,
        ApiKey::DescribeConfigs,
        4,
        &DescribeConfigsRequest::default().with_resources(vec![resource]),
    );
    let configs = &described.results[0].configs;
    assert!(!configs.is_empty());
    assert!(configs.iter().all(|config| config.documentation.is_none()));
}

#[test]
fn authorized_operations_are_every_supported_one_without_an_authorizer() {
    let (_dir, _broker, mut stream) = start();
    create_topic(&mut stream, "operations", 1);
    let topic =
        metadata_request::MetadataRequestTopic::default().with_name(Some(name("operations")));
    for version in 8..=12 {
        let request = MetadataRequest::default()
            .with_topics(Some(vec![topic.clone()]))
            .with_include_cluster_authorized_operations(version <= 10)
            .with_include_topic_authorized_operations(true);
        let metadata: MetadataResponse = exchange(&mut stream, ApiKey::Metadata, version, &request);
        assert_eq!(
            metadata.topics[0].topic_authorized_operations, TOPIC_OPERATIONS,
            "Metadata v{version}"
        );
        if version <= 10 {
            assert_eq!(
                metadata.cluster_authorized_operations, CLUSTER_OPERATIONS,
                "v{version}"
            );
        }
        let plain: MetadataResponse = exchange(
            &mut stream,
            ApiKey::Metadata,
            version,
            &MetadataRequest::default().with_topics(Some(vec![topic.clone()])),
        );
        assert_eq!(plain.topics[0].topic_authorized_operations, i32::MIN);
    }
    for (include, expected) in [(true, CLUSTER_OPERATIONS), (false, i32::MIN)] {
        let request =
            DescribeClusterRequest::default().with_include_cluster_authorized_operations(include);
        let cluster: DescribeClusterResponse =
            exchange(&mut stream, ApiKey::DescribeCluster, 1, &request);
        assert_eq!(cluster.cluster_authorized_operations, expected);
    }
    let request = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(text("no-such-group"))])
        .with_include_authorized_operations(true);
    let groups: DescribeGroupsResponse = exchange(&mut stream, ApiKey::DescribeGroups, 5, &request);
    assert_eq!(groups.groups[0].authorized_operations, GROUP_OPERATIONS);
}

fn describe(
    stream: &mut TcpStream,
    resource_type: i8,
    resource: &str,
    keys: Option<Vec<&str>>,
) -> describe_configs_response::DescribeConfigsResult {
    let resource = describe_configs_request::DescribeConfigsResource::default()
        .with_resource_type(resource_type)
        .with_resource_name(text(resource))
        .with_configuration_keys(keys.map(|keys| keys.into_iter().map(text).collect()));
    let request = DescribeConfigsRequest::default()
        .with_resources(vec![resource])
        .with_include_synonyms(true);
    let mut response: DescribeConfigsResponse =
        exchange(stream, ApiKey::DescribeConfigs, 4, &request);
    response.results.remove(0)
}

fn value_and_source(
    result: &describe_configs_response::DescribeConfigsResult,
    config: &str,
) -> (Option<String>, i8) {
    let found = result
        .configs
        .iter()
        .find(|entry| entry.name.as_str() == config)
        .unwrap_or_else(|| panic!("{config} is not described"));
    (
        found.value.as_ref().map(|value| value.to_string()),
        found.config_source,
    )
}

fn create_with_configs(stream: &mut TcpStream, topic: &str, configs: &[(&str, &str)]) -> i16 {
    let configs = configs
        .iter()
        .map(|(key, value)| {
            create_topics_request::CreatableTopicConfig::default()
                .with_name(text(key))
                .with_value(Some(text(value)))
        })
        .collect();
    let topic = create_topics_request::CreatableTopic::default()
        .with_name(name(topic))
        .with_num_partitions(1)
        .with_replication_factor(1)
        .with_configs(configs);
    let created: CreateTopicsResponse = exchange(
        stream,
        ApiKey::CreateTopics,
        7,
        &CreateTopicsRequest::default().with_topics(vec![topic]),
    );
    created.topics[0].error_code
}

const SOURCE_TOPIC: i8 = 1;
const SOURCE_STATIC_BROKER: i8 = 4;
const SOURCE_DEFAULT: i8 = 5;

/// DescribeCluster names the endpoint type it meant (KIP-919): a broker
/// answers for brokers, refuses controllers with MISMATCHED_ENDPOINT_TYPE
/// and an unknown type with UNSUPPORTED_ENDPOINT_TYPE, as Kafka's brokers
/// do (the Java admin client bootstrapped with `bootstrap.controllers` at a
/// broker then fails with MismatchedEndpointTypeException), instead of
/// listing brokers as controllers.
#[test]
fn describe_cluster_for_controllers_at_a_broker_is_a_mismatched_endpoint() {
    let (_dir, _broker, mut stream) = start();
    for version in 1..=2 {
        for (endpoint_type, error) in [(1, 0), (2, 114), (3, 115), (0, 115)] {
            let request = DescribeClusterRequest::default().with_endpoint_type(endpoint_type);
            let cluster: DescribeClusterResponse =
                exchange(&mut stream, ApiKey::DescribeCluster, version, &request);
            assert_eq!(cluster.error_code, error, "v{version} type {endpoint_type}");
            assert_eq!(cluster.endpoint_type, 1, "v{version} type {endpoint_type}");
            assert_eq!(
                cluster.brokers.is_empty(),
                error != 0,
                "v{version} type {endpoint_type}: {cluster:?}"
            );
            if error != 0 {
                assert!(cluster.error_message.is_some(), "{cluster:?}");
            }
        }
    }
}

#[test]
fn describe_configs_covers_groups_the_broker_and_kafkas_topic_configs() {
    let (_dir, _broker, mut stream) = start();
    // Kafka 4's GROUP resource: every group config, whether or not the
    // group exists.
    let group = describe(&mut stream, 32, "any-group", None);
    assert_eq!(group.error_code, 0);
    assert_eq!(
        value_and_source(&group, "consumer.session.timeout.ms"),
        (Some("45000".into()), SOURCE_DEFAULT)
    );
    assert_eq!(describe(&mut stream, 32, "", None).error_code, 42);
    // The broker: Kafka's keys, with the file's (here --set's) as static.
    let broker = describe(&mut stream, 4, "0", None);
    assert_eq!(broker.error_code, 0);
    assert!(
        broker.configs.len() > 150,
        "{} broker configs",
        broker.configs.len()
    );
    for key in [
        "advertised.listeners",
        "listeners",
        "default.replication.factor",
        "offsets.topic.num.partitions",
        "transaction.state.log.num.partitions",
        "group.consumer.session.timeout.ms",
        "log.message.timestamp.after.max.ms",
    ] {
        assert!(value_and_source(&broker, key).0.is_some(), "{key}");
    }
    assert_eq!(
        value_and_source(&broker, "group.initial.rebalance.delay.ms"),
        (Some("0".into()), SOURCE_STATIC_BROKER)
    );
    assert_eq!(
        value_and_source(&broker, "default.replication.factor"),
        (Some("1".into()), SOURCE_DEFAULT)
    );
    // An empty name is the cluster's dynamic defaults: none.
    let defaults = describe(&mut stream, 4, "", None);
    assert_eq!((defaults.error_code, defaults.configs.len()), (0, 0));
    assert_eq!(describe(&mut stream, 4, "7", None).error_code, 42);
    // Topic configs Brook refused before are taken, kept and described.
    let settings = [
        ("compression.type", "zstd"),
        ("compression.zstd.level", "5"),
        ("min.insync.replicas", "2"),
        ("message.timestamp.before.max.ms", "60000"),
        ("message.timestamp.after.max.ms", "1000"),
        ("message.timestamp.difference.max.ms", "5000"),
        ("unclean.leader.election.enable", "true"),
        ("preallocate", "true"),
        ("leader.replication.throttled.replicas", "0:0"),
        ("follower.replication.throttled.replicas", "*"),
    ];
    assert_eq!(create_with_configs(&mut stream, "configured", &settings), 0);
    let topic = describe(&mut stream, 2, "configured", Some(Vec::new()));
    for (key, value) in settings {
        assert_eq!(
            value_and_source(&topic, key),
            (Some(value.to_owned()), SOURCE_TOPIC),
            "{key}"
        );
    }
    assert_eq!(
        value_and_source(&topic, "segment.bytes"),
        (Some("1073741824".into()), SOURCE_DEFAULT)
    );
    // Synonyms as Kafka 4.1.2 lists them: from the config's own broker
    // setting on, so none for retention.ms at its default (that comes from
    // log.retention.hours; log.retention.ms has no default), as kafkajs'
    // describeConfigs test expects.
    let synonyms = |name: &str| {
        let config = topic
            .configs
            .iter()
            .find(|config| config.name.as_str() == name);
        let config = config.unwrap_or_else(|| panic!("{name}"));
        config
            .synonyms
            .iter()
            .map(|synonym| (synonym.name.to_string(), synonym.source))
            .collect::<Vec<_>>()
    };
    assert_eq!(synonyms("retention.ms"), []);
    assert_eq!(
        synonyms("segment.bytes"),
        [("log.segment.bytes".to_owned(), SOURCE_DEFAULT)]
    );
    for (key, bad) in [
        ("compression.type", "brotli"),
        ("min.insync.replicas", "0"),
        ("preallocate", "maybe"),
        ("follower.replication.throttled.replicas", "0-0"),
        ("remote.storage.enable", "true"),
    ] {
        assert_eq!(
            create_with_configs(&mut stream, "refused", &[(key, bad)]),
            40,
            "INVALID_CONFIG for {key}={bad}"
        );
    }
}

fn alter(
    stream: &mut TcpStream,
    resource_type: i8,
    resource: &str,
    configs: &[(&str, Option<&str>)],
    validate_only: bool,
) -> alter_configs_response::AlterConfigsResourceResponse {
    let configs = configs
        .iter()
        .map(|(key, value)| {
            alter_configs_request::AlterableConfig::default()
                .with_name(text(key))
                .with_value(value.map(text))
        })
        .collect();
    let resource = alter_configs_request::AlterConfigsResource::default()
        .with_resource_type(resource_type)
        .with_resource_name(text(resource))
        .with_configs(configs);
    let request = AlterConfigsRequest::default()
        .with_resources(vec![resource])
        .with_validate_only(validate_only);
    let mut response: AlterConfigsResponse = exchange(stream, ApiKey::AlterConfigs, 2, &request);
    response.responses.remove(0)
}

#[test]
fn alter_configs_replaces_every_override_of_a_topic() {
    let (_dir, _broker, mut stream) = start();
    create_topic(&mut stream, "altered", 1);
    let set = alter(
        &mut stream,
        2,
        "altered",
        &[("retention.ms", Some("1000"))],
        false,
    );
    assert_eq!((set.error_code, set.error_message), (0, None));
    let described = describe(&mut stream, 2, "altered", None);
    assert_eq!(
        value_and_source(&described, "retention.ms"),
        (Some("1000".into()), SOURCE_TOPIC)
    );
    // Not incremental: what the request leaves out goes back to its default.
    let replaced = alter(
        &mut stream,
        2,
        "altered",
        &[("segment.bytes", Some("1048576")), ("flush.ms", None)],
        false,
    );
    assert_eq!(replaced.error_code, 0);
    let described = describe(&mut stream, 2, "altered", None);
    assert_eq!(
        value_and_source(&described, "retention.ms"),
        (Some("604800000".into()), SOURCE_DEFAULT)
    );
    assert_eq!(
        value_and_source(&described, "segment.bytes").1,
        SOURCE_TOPIC
    );
    // validate_only changes nothing; bad input is refused per resource.
    let checked = alter(&mut stream, 2, "altered", &[], true);
    assert_eq!(checked.error_code, 0);
    assert_eq!(
        value_and_source(&describe(&mut stream, 2, "altered", None), "segment.bytes").1,
        SOURCE_TOPIC
    );
    let unknown = alter(
        &mut stream,
        2,
        "altered",
        &[("no.such.config", Some("1"))],
        false,
    );
    assert_eq!(unknown.error_code, 40, "INVALID_CONFIG");
    let missing = alter(&mut stream, 2, "no-such-topic", &[], false);
    assert_eq!(missing.error_code, 3, "UNKNOWN_TOPIC_OR_PARTITION");
    // A broker resource takes Kafka's dynamic configs and refuses the
    // others as Kafka does (INVALID_REQUEST, KAFKA-13609).
    let broker = alter(&mut stream, 4, "0", &[("num.io.threads", Some("4"))], false);
    assert_eq!((broker.error_code, broker.error_message), (0, None));
    let read_only = alter(&mut stream, 4, "0", &[("num.partitions", Some("4"))], false);
    assert_eq!(
        (read_only.error_code, read_only.error_message.as_deref()),
        (
            42,
            Some("Cannot update these configs dynamically: Set(num.partitions)")
        )
    );
}

fn describe_partitions(
    stream: &mut TcpStream,
    topics: &[&str],
    cursor: Option<(&str, i32)>,
    limit: i32,
) -> DescribeTopicPartitionsResponse {
    let request = DescribeTopicPartitionsRequest::default()
        .with_topics(
            topics
                .iter()
                .map(|topic| {
                    describe_topic_partitions_request::TopicRequest::default()
                        .with_name(name(topic))
                })
                .collect(),
        )
        .with_response_partition_limit(limit)
        .with_cursor(cursor.map(|(topic, partition)| {
            describe_topic_partitions_request::Cursor::default()
                .with_topic_name(name(topic))
                .with_partition_index(partition)
        }));
    exchange(stream, ApiKey::DescribeTopicPartitions, 0, &request)
}

fn listing(response: &DescribeTopicPartitionsResponse) -> Vec<(String, i16, Vec<i32>)> {
    response
        .topics
        .iter()
        .map(|topic| {
            (
                topic
                    .name
                    .as_ref()
                    .map(|name| name.to_string())
                    .unwrap_or_default(),
                topic.error_code,
                topic
                    .partitions
                    .iter()
                    .map(|partition| partition.partition_index)
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn describe_topic_partitions_pages_topics_by_a_cursor() {
    let (_dir, _broker, mut stream) = start();
    create_topic(&mut stream, "page-b", 2);
    create_topic(&mut stream, "page-a", 3);
    let first = describe_partitions(&mut stream, &["page-b", "page-a"], None, 4);
    assert_eq!(
        listing(&first),
        [
            ("page-a".to_owned(), 0, vec![0, 1, 2]),
            ("page-b".to_owned(), 0, vec![0])
        ]
    );
    assert_eq!(
        first.topics[0].topic_authorized_operations,
        TOPIC_OPERATIONS
    );
    assert_eq!(first.topics[0].partitions[0].isr_nodes, [BrokerId(0)]);
    let cursor = first.next_cursor.as_ref().unwrap();
    assert_eq!(
        (cursor.topic_name.as_str(), cursor.partition_index),
        ("page-b", 1)
    );
    let second = describe_partitions(&mut stream, &["page-b", "page-a"], Some(("page-b", 1)), 4);
    assert_eq!(listing(&second), [("page-b".to_owned(), 0, vec![1])]);
    assert!(second.next_cursor.is_none());
    // All topics when none is named; unknown names are errors.
    let all = describe_partitions(&mut stream, &[], None, 2000);
    assert_eq!(all.topics.len(), 2);
    let unknown = describe_partitions(&mut stream, &["nope"], None, 10);
    assert_eq!(listing(&unknown), [("nope".to_owned(), 3, vec![])]);
    // A cursor outside the named topics fails each of them.
    let bad = describe_partitions(&mut stream, &["page-a"], Some(("page-z", 0)), 10);
    assert_eq!(listing(&bad), [("page-a".to_owned(), 42, vec![])]);
}

#[test]
fn list_config_resources_and_alter_replica_log_dirs_answer_for_one_broker() {
    let (_dir, _broker, mut stream) = start();
    create_topic(&mut stream, "listed", 1);
    let listed: ListConfigResourcesResponse = exchange(
        &mut stream,
        ApiKey::ListConfigResources,
        1,
        &ListConfigResourcesRequest::default().with_resource_types(vec![2, 4]),
    );
    let resources: Vec<(i8, String)> = listed
        .config_resources
        .iter()
        .map(|resource| (resource.resource_type, resource.resource_name.to_string()))
        .collect();
    assert_eq!(resources, [(4, "0".to_owned()), (2, "listed".to_owned())]);
    let unsupported: ListConfigResourcesResponse = exchange(
        &mut stream,
        ApiKey::ListConfigResources,
        1,
        &ListConfigResourcesRequest::default().with_resource_types(vec![2, 64]),
    );
    assert_eq!(unsupported.error_code, 35, "UNSUPPORTED_VERSION");

    let described: DescribeLogDirsResponse = exchange(
        &mut stream,
        ApiKey::DescribeLogDirs,
        4,
        &DescribeLogDirsRequest::default().with_topics(None),
    );
    let log_dir = described.results[0].log_dir.to_string();
    let move_to = |stream: &mut TcpStream, path: &str, partition: i32| {
        let topic = alter_replica_log_dirs_request::AlterReplicaLogDirTopic::default()
            .with_name(name("listed"))
            .with_partitions(vec![partition]);
        let dir = alter_replica_log_dirs_request::AlterReplicaLogDir::default()
            .with_path(text(path))
            .with_topics(vec![topic]);
        let response: AlterReplicaLogDirsResponse = exchange(
            stream,
            ApiKey::AlterReplicaLogDirs,
            2,
            &AlterReplicaLogDirsRequest::default().with_dirs(vec![dir]),
        );
        response.results[0].partitions[0].error_code
    };
    assert_eq!(move_to(&mut stream, &log_dir, 0), 0);
    assert_eq!(
        move_to(&mut stream, &log_dir, 5),
        9,
        "REPLICA_NOT_AVAILABLE"
    );
    assert_eq!(
        move_to(&mut stream, "/elsewhere", 0),
        57,
        "LOG_DIR_NOT_FOUND"
    );
}

fn keyed(key: Option<&str>, timestamp: i64) -> NewRecord {
    NewRecord {
        key: key.map(|key| Bytes::copy_from_slice(key.as_bytes())),
        value: Some(Bytes::from_static(b"value")),
        timestamp: TimestampMs(timestamp),
        headers: Vec::new(),
    }
}

fn produce(
    stream: &mut TcpStream,
    version: i16,
    topic: &str,
    batch: Vec<u8>,
) -> produce_response::PartitionProduceResponse {
    let partition = produce_request::PartitionProduceData::default()
        .with_index(0)
        .with_records(Some(Bytes::from(batch)));
    let request = ProduceRequest::default()
        .with_acks(-1)
        .with_timeout_ms(10_000)
        .with_topic_data(vec![
            produce_request::TopicProduceData::default()
                .with_name(name(topic))
                .with_partition_data(vec![partition]),
        ]);
    let mut response: ProduceResponse = exchange(stream, ApiKey::Produce, version, &request);
    response.responses.remove(0).partition_responses.remove(0)
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

#[test]
fn a_batch_with_invalid_records_is_refused_naming_them() {
    let (_dir, _broker, mut stream) = start();
    assert_eq!(
        create_with_configs(&mut stream, "compacted", &[("cleanup.policy", "compact")]),
        0
    );
    let now = now_ms();
    let records = [keyed(None, now), keyed(Some("k"), now), keyed(None, now)];
    for codec in [Compression::None, Compression::Zstd] {
        let options = BatchOptions {
            compression: codec,
            ..BatchOptions::default()
        };
        for version in [3, 7, 8, 12] {
            let answer = produce(
                &mut stream,
                version,
                "compacted",
                encode_batch(&records, &options),
            );
            assert_eq!(answer.error_code, 87, "INVALID_RECORD at v{version}");
            if version >= 8 {
                let named: Vec<i32> = answer
                    .record_errors
                    .iter()
                    .map(|error| error.batch_index)
                    .collect();
                assert_eq!(named, [0, 2], "v{version} {codec:?}");
                assert_eq!(
                    answer.record_errors[0].batch_index_error_message.as_deref(),
                    Some(
                        "Compacted topic cannot accept message without key in topic partition compacted-0."
                    )
                );
                let message = answer.error_message.as_deref().unwrap().to_string();
                assert!(
                    message.starts_with(
                        "One or more records have been rejected due to 2 record errors"
                    ),
                    "{message}"
                );
            }
        }
    }
    // Nothing of the refused batches was appended.
    let good = produce(
        &mut stream,
        9,
        "compacted",
        encode_batch(&[keyed(Some("k"), now)], &BatchOptions::default()),
    );
    assert_eq!((good.error_code, good.base_offset), (0, 0));

    // Timestamps outside the topic's bounds: INVALID_TIMESTAMP, by record.
    assert_eq!(
        create_with_configs(
            &mut stream,
            "bounded",
            &[("message.timestamp.before.max.ms", "60000")]
        ),
        0
    );
    let stamps = [
        keyed(None, now),
        keyed(None, 1),
        keyed(None, now + 2 * 3_600_000),
    ];
    let answer = produce(
        &mut stream,
        9,
        "bounded",
        encode_batch(&stamps, &BatchOptions::default()),
    );
    assert_eq!(answer.error_code, 32, "INVALID_TIMESTAMP");
    let named: Vec<i32> = answer
        .record_errors
        .iter()
        .map(|error| error.batch_index)
        .collect();
    assert_eq!(named, [1, 2]);
    // Kafka 4's default: at most an hour into the future.
    create_topic(&mut stream, "plain", 1);
    let future = encode_batch(
        &[keyed(None, now + 2 * 3_600_000)],
        &BatchOptions::default(),
    );
    assert_eq!(produce(&mut stream, 9, "plain", future).error_code, 32);
    let present = encode_batch(&[keyed(None, now)], &BatchOptions::default());
    assert_eq!(produce(&mut stream, 9, "plain", present).error_code, 0);
}

fn fetch_batch(stream: &mut TcpStream, topic: &str) -> Vec<u8> {
    let partition = fetch_request::FetchPartition::default()
        .with_partition(0)
        .with_fetch_offset(0)
        .with_partition_max_bytes(1 << 20);
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_topics(vec![
            fetch_request::FetchTopic::default()
                .with_topic(name(topic))
                .with_partitions(vec![partition]),
        ]);
    let response: FetchResponse = exchange(stream, ApiKey::Fetch, 12, &request);
    let partition = &response.responses[0].partitions[0];
    assert_eq!(partition.error_code, 0);
    partition.records.as_ref().unwrap().to_vec()
}

#[test]
fn a_topic_codec_recompresses_batches_and_producer_keeps_them() {
    let (_dir, _broker, mut stream) = start();
    let now = now_ms();
    let records = [keyed(Some("a"), now), keyed(None, now - 5)];
    let lz4 = BatchOptions {
        compression: Compression::Lz4,
        ..BatchOptions::default()
    };
    for (topic, codec, expected) in [
        ("stored-zstd", "zstd", Compression::Zstd),
        ("stored-plain", "uncompressed", Compression::None),
        ("stored-as-produced", "producer", Compression::Lz4),
    ] {
        assert_eq!(
            create_with_configs(&mut stream, topic, &[("compression.type", codec)]),
            0
        );
        let sent = encode_batch(&records, &lz4);
        assert_eq!(produce(&mut stream, 9, topic, sent.clone()).error_code, 0);
        let stored = fetch_batch(&mut stream, topic);
        let batch = BatchView::parse_exact(&stored).unwrap();
        assert_eq!(batch.attributes().compression(), expected, "{topic}");
        assert_eq!(batch.verify_crc(), Ok(()));
        assert_eq!(batch.records_count(), 2);
        let sent_view = BatchView::parse_exact(&sent).unwrap();
        assert_eq!(batch.max_timestamp(), sent_view.max_timestamp());
        if expected == Compression::Lz4 {
            // As produced: the bytes after the broker-assigned fields.
            assert_eq!(&stored[21..], &sent[21..], "{topic}");
        }
    }
}

#[test]
fn produce_v13_names_topics_by_id_and_min_insync_replicas_is_capped_at_one_replica() {
    let (_dir, _broker, mut stream) = start();
    assert_eq!(
        create_with_configs(&mut stream, "by-id", &[("min.insync.replicas", "2")]),
        0
    );
    let metadata: MetadataResponse = exchange(
        &mut stream,
        ApiKey::Metadata,
        12,
        &MetadataRequest::default().with_topics(Some(vec![
            metadata_request::MetadataRequestTopic::default().with_name(Some(name("by-id"))),
        ])),
    );
    let topic_id = metadata.topics[0].topic_id;
    let send = |stream: &mut TcpStream, id: uuid::Uuid| {
        let partition = produce_request::PartitionProduceData::default()
            .with_index(0)
            .with_records(Some(Bytes::from(encode_batch(
                &[keyed(None, now_ms())],
                &BatchOptions::default(),
            ))));
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(10_000)
            .with_topic_data(vec![
                produce_request::TopicProduceData::default()
                    .with_topic_id(id)
                    .with_partition_data(vec![partition]),
            ]);
        let response: ProduceResponse = exchange(stream, ApiKey::Produce, 13, &request);
        (
            response.responses[0].topic_id,
            response.responses[0].partition_responses[0].error_code,
        )
    };
    // acks=all with min.insync.replicas=2 on one replica: Kafka caps the
    // requirement at the replica count, so it is acknowledged.
    assert_eq!(send(&mut stream, topic_id), (topic_id, 0));
    let unknown = uuid::Uuid::from_bytes([7; 16]);
    assert_eq!(
        send(&mut stream, unknown),
        (unknown, 100),
        "UNKNOWN_TOPIC_ID"
    );
}
