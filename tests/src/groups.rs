//! Raw consumer-group requests (JoinGroup, SyncGroup, Heartbeat,
//! OffsetCommit, OffsetFetch, FindCoordinator, DescribeGroups) for tests that
//! act as a group member no client library would be, or look at a group
//! from outside: each builds Kafka's request, sends it with
//! [`crate::raw::exchange`] and gives back the answer's error codes as
//! [`ResponseError`] values.

use std::collections::HashMap;
use std::io::Write;
use std::net::TcpStream;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use kafka_protocol::error::{ParseResponseErrorCode, ResponseError};
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::{Decodable, Encodable, Message, StrBytes, VersionRange};

use crate::raw::{self, exchange};

/// Members made here keep their session through any test.
pub const MEMBER_SESSION_TIMEOUT_MS: i32 = 30_000;
/// Rebalances wait this long for members made here to join again.
pub const MEMBER_REBALANCE_TIMEOUT_MS: i32 = 30_000;
/// How long a coordinator may answer that it is loading or unavailable
/// (Kafka's answers while `__consumer_offsets` is created or loaded) before
/// the test fails.
pub const COORDINATOR_WAIT: Duration = Duration::from_secs(15);
/// The correlation id of requests whose answer is read later.
const PENDING: i32 = 4242;
/// Generations [`generation_of`] tries before it gives up.
const GENERATION_MAX: i32 = 1_000;

/// A protocol string.
pub fn text(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

/// A group id.
pub fn group_id(value: &str) -> GroupId {
    GroupId(text(value))
}

/// A topic name.
pub fn topic_name(value: &str) -> TopicName {
    TopicName(text(value))
}

/// An error code as Kafka's error, `None` for no error.
pub fn error(code: i16) -> Option<ResponseError> {
    code.err()
}

/// The versions the broker advertises, by API key.
#[derive(Debug)]
pub struct Versions(HashMap<i16, (i16, i16)>);

impl Versions {
    /// Asks the broker (ApiVersions v3).
    pub fn of(stream: &mut TcpStream) -> Versions {
        let response: ApiVersionsResponse = exchange(
            stream,
            ApiKey::ApiVersions,
            3,
            &ApiVersionsRequest::default(),
        );
        assert_eq!(error(response.error_code), None);
        Versions(
            response
                .api_keys
                .iter()
                .map(|key| (key.api_key, (key.min_version, key.max_version)))
                .collect(),
        )
    }

    /// The versions both the broker and the codec here (`ours`) speak;
    /// fails the test if the broker does not advertise `api_key`.
    pub fn common(&self, api_key: ApiKey, ours: VersionRange) -> RangeInclusive<i16> {
        let (min, max) = *self
            .0
            .get(&(api_key as i16))
            .unwrap_or_else(|| panic!("the broker does not advertise {api_key:?}"));
        let range = min.max(ours.min)..=max.min(ours.max);
        assert!(
            !range.is_empty(),
            "{api_key:?}: the broker's v{min}-v{max} and ours v{}-v{} do not meet",
            ours.min,
            ours.max
        );
        range
    }

    /// The newest version both speak.
    pub fn highest(&self, api_key: ApiKey, ours: VersionRange) -> i16 {
        *self.common(api_key, ours).end()
    }
}

/// The versions of every group API a test uses.
#[derive(Debug)]
pub struct GroupVersions {
    pub join: i16,
    pub sync: i16,
    pub heartbeat: i16,
    pub commit: i16,
    pub fetch: i16,
}

impl GroupVersions {
    /// The newest of each that both the broker and the codec speak.
    pub fn of(versions: &Versions) -> GroupVersions {
        GroupVersions {
            join: versions.highest(ApiKey::JoinGroup, JoinGroupRequest::VERSIONS),
            sync: versions.highest(ApiKey::SyncGroup, SyncGroupRequest::VERSIONS),
            heartbeat: versions.highest(ApiKey::Heartbeat, HeartbeatRequest::VERSIONS),
            commit: versions.highest(ApiKey::OffsetCommit, OffsetCommitRequest::VERSIONS),
            fetch: versions.highest(ApiKey::OffsetFetch, OffsetFetchRequest::VERSIONS),
        }
    }
}

/// A consumer protocol message: its int16 version, then its body.
pub fn consumer_protocol<T: Encodable>(version: i16, message: &T) -> Bytes {
    let mut buffer = BytesMut::new();
    buffer.extend_from_slice(&version.to_be_bytes());
    message.encode(&mut buffer, version).unwrap();
    buffer.freeze()
}

/// A member's subscription (JoinGroup protocol metadata).
pub fn subscription(topics: &[&str]) -> Bytes {
    let subscription = ConsumerProtocolSubscription::default()
        .with_topics(topics.iter().map(|topic| text(topic)).collect());
    consumer_protocol(0, &subscription)
}

/// A member's assignment (SyncGroup): `partitions` of `topic`.
pub fn assignment(topic: &str, partitions: &[i32]) -> Bytes {
    let topic = consumer_protocol_assignment::TopicPartition::default()
        .with_topic(topic_name(topic))
        .with_partitions(partitions.to_vec());
    let assignment = ConsumerProtocolAssignment::default().with_assigned_partitions(vec![topic]);
    consumer_protocol(0, &assignment)
}

/// A JoinGroup as a consumer subscribed to `topic`, offering `protocols`
/// (assignors), with session and rebalance timeouts that do not run out
/// during a test.
pub fn join_request(
    group: &str,
    member_id: &str,
    topic: &str,
    protocols: &[&str],
) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(group_id(group))
        .with_session_timeout_ms(MEMBER_SESSION_TIMEOUT_MS)
        .with_rebalance_timeout_ms(MEMBER_REBALANCE_TIMEOUT_MS)
        .with_member_id(text(member_id))
        .with_protocol_type(text("consumer"))
        .with_protocols(
            protocols
                .iter()
                .map(|name| {
                    JoinGroupRequestProtocol::default()
                        .with_name(text(name))
                        .with_metadata(subscription(&[topic]))
                })
                .collect(),
        )
}

/// True for the answers Kafka gives while a coordinator is not ready yet.
pub fn coordinator_not_ready(error: Option<ResponseError>) -> bool {
    matches!(
        error,
        Some(ResponseError::CoordinatorLoadInProgress | ResponseError::CoordinatorNotAvailable)
    )
}

/// A JoinGroup answered at once, retried while the coordinator is not ready.
pub fn join(stream: &mut TcpStream, version: i16, request: &JoinGroupRequest) -> JoinGroupResponse {
    let deadline = Instant::now() + COORDINATOR_WAIT;
    loop {
        let response: JoinGroupResponse = exchange(stream, ApiKey::JoinGroup, version, request);
        if !coordinator_not_ready(error(response.error_code)) || Instant::now() > deadline {
            return response;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A SyncGroup; from v5 it names the group's protocol type and protocol.
pub fn sync_request(
    version: i16,
    group: &str,
    generation: i32,
    member_id: &str,
    assignments: &[(&str, Bytes)],
) -> SyncGroupRequest {
    let request = SyncGroupRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id(generation)
        .with_member_id(text(member_id));
    let request = if version >= 5 {
        request
            .with_protocol_type(Some(text("consumer")))
            .with_protocol_name(Some(text("range")))
    } else {
        request
    };
    request.with_assignments(
        assignments
            .iter()
            .map(|(member, bytes)| {
                SyncGroupRequestAssignment::default()
                    .with_member_id(text(member))
                    .with_assignment(bytes.clone())
            })
            .collect(),
    )
}

/// A Heartbeat as `member_id` of `generation`; returns its error.
pub fn heartbeat(
    stream: &mut TcpStream,
    version: i16,
    group: &str,
    generation: i32,
    member_id: &str,
) -> Option<ResponseError> {
    let request = HeartbeatRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id(generation)
        .with_member_id(text(member_id));
    let response: HeartbeatResponse = exchange(stream, ApiKey::Heartbeat, version, &request);
    error(response.error_code)
}

/// OffsetCommit of `offsets` (partition, offset) of `topic` as `member_id`
/// of `generation` (-1 and "" for a group that only stores offsets);
/// returns each partition's answer.
pub fn commit(
    stream: &mut TcpStream,
    version: i16,
    group: &str,
    generation: i32,
    member_id: &str,
    topic: &str,
    offsets: &[(i32, i64)],
) -> Vec<Option<ResponseError>> {
    let partitions = offsets
        .iter()
        .map(|(partition, offset)| {
            offset_commit_request::OffsetCommitRequestPartition::default()
                .with_partition_index(*partition)
                .with_committed_offset(*offset)
                .with_committed_metadata(Some(text("")))
        })
        .collect();
    let request = OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(text(member_id))
        .with_topics(vec![
            offset_commit_request::OffsetCommitRequestTopic::default()
                .with_name(topic_name(topic))
                .with_partitions(partitions),
        ]);
    let response: OffsetCommitResponse = exchange(stream, ApiKey::OffsetCommit, version, &request);
    response
        .topics
        .iter()
        .flat_map(|topic| topic.partitions.iter())
        .map(|partition| error(partition.error_code))
        .collect()
}

/// One partition of an OffsetFetch answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Fetched {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
    pub error: Option<ResponseError>,
}

/// OffsetFetch of `partitions` of `topic` at `version` (group-level fields up
/// to v7, a batch of one group from v8); returns the group's error and its
/// partitions.
pub fn fetch_offsets(
    stream: &mut TcpStream,
    version: i16,
    group: &str,
    topic: &str,
    partitions: &[i32],
) -> (Option<ResponseError>, Vec<Fetched>) {
    let request = if version >= 8 {
        let topics = offset_fetch_request::OffsetFetchRequestTopics::default()
            .with_name(topic_name(topic))
            .with_partition_indexes(partitions.to_vec());
        OffsetFetchRequest::default().with_groups(vec![
            offset_fetch_request::OffsetFetchRequestGroup::default()
                .with_group_id(group_id(group))
                .with_topics(Some(vec![topics])),
        ])
    } else {
        let topics = offset_fetch_request::OffsetFetchRequestTopic::default()
            .with_name(topic_name(topic))
            .with_partition_indexes(partitions.to_vec());
        OffsetFetchRequest::default()
            .with_group_id(group_id(group))
            .with_topics(Some(vec![topics]))
    };
    let response: OffsetFetchResponse = exchange(stream, ApiKey::OffsetFetch, version, &request);
    if version >= 8 {
        assert_eq!(response.groups.len(), 1, "{response:?}");
        let answer = &response.groups[0];
        assert_eq!(answer.group_id.as_str(), group);
        let fetched = answer
            .topics
            .iter()
            .flat_map(|topic| {
                topic.partitions.iter().map(|partition| Fetched {
                    topic: topic.name.to_string(),
                    partition: partition.partition_index,
                    offset: partition.committed_offset,
                    leader_epoch: partition.committed_leader_epoch,
                    metadata: partition.metadata.as_ref().map(|text| text.to_string()),
                    error: error(partition.error_code),
                })
            })
            .collect();
        (error(answer.error_code), fetched)
    } else {
        let fetched = response
            .topics
            .iter()
            .flat_map(|topic| {
                topic.partitions.iter().map(|partition| Fetched {
                    topic: topic.name.to_string(),
                    partition: partition.partition_index,
                    offset: partition.committed_offset,
                    leader_epoch: partition.committed_leader_epoch,
                    metadata: partition.metadata.as_ref().map(|text| text.to_string()),
                    error: error(partition.error_code),
                })
            })
            .collect();
        (error(response.error_code), fetched)
    }
}

/// FindCoordinator until the broker names a coordinator for `group` (Kafka
/// answers COORDINATOR_NOT_AVAILABLE while it creates `__consumer_offsets`).
pub fn wait_for_coordinator(stream: &mut TcpStream, versions: &Versions, group: &str) {
    let version = versions.highest(ApiKey::FindCoordinator, FindCoordinatorRequest::VERSIONS);
    let deadline = Instant::now() + COORDINATOR_WAIT;
    loop {
        let found = find_coordinator(stream, version, &[group]);
        assert_eq!(found.len(), 1, "{found:?}");
        if found[0].error.is_none() {
            return;
        }
        assert!(
            coordinator_not_ready(found[0].error) && Instant::now() < deadline,
            "FindCoordinator for {group}: {found:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One coordinator as FindCoordinator names it.
#[derive(Debug, PartialEq)]
pub struct Coordinator {
    pub key: String,
    pub node_id: i32,
    pub host: String,
    pub port: i32,
    pub error: Option<ResponseError>,
}

/// FindCoordinator for groups `keys`: one key a request up to v3, all in
/// one batched request from v4.
pub fn find_coordinator(stream: &mut TcpStream, version: i16, keys: &[&str]) -> Vec<Coordinator> {
    if version >= 4 {
        let request = FindCoordinatorRequest::default()
            .with_key_type(0)
            .with_coordinator_keys(keys.iter().map(|key| text(key)).collect());
        let response: FindCoordinatorResponse =
            exchange(stream, ApiKey::FindCoordinator, version, &request);
        return response
            .coordinators
            .iter()
            .map(|coordinator| Coordinator {
                key: coordinator.key.to_string(),
                node_id: coordinator.node_id.0,
                host: coordinator.host.to_string(),
                port: coordinator.port,
                error: error(coordinator.error_code),
            })
            .collect();
    }
    keys.iter()
        .map(|key| {
            let request = FindCoordinatorRequest::default().with_key(text(key));
            let response: FindCoordinatorResponse =
                exchange(stream, ApiKey::FindCoordinator, version, &request);
            Coordinator {
                key: (*key).to_owned(),
                node_id: response.node_id.0,
                host: response.host.to_string(),
                port: response.port,
                error: error(response.error_code),
            }
        })
        .collect()
}

/// Writes a request whose answer is read later with [`receive`] (one at a
/// time a connection).
pub fn send<Q: Encodable>(stream: &mut TcpStream, api_key: ApiKey, version: i16, request: &Q) {
    stream
        .write_all(&raw::frame(api_key, version, PENDING, request))
        .unwrap();
}

/// Reads the answer to the request [`send`] wrote.
pub fn receive<R: Decodable>(stream: &mut TcpStream, api_key: ApiKey, version: i16) -> R {
    let mut body = raw::response(stream, api_key, version, PENDING)
        .unwrap_or_else(|| panic!("{api_key:?} v{version}: no answer"));
    R::decode(&mut body, version).unwrap()
}

/// DescribeGroups of one group, which must be answered without error.
pub fn describe_group(stream: &mut TcpStream, versions: &Versions, group: &str) -> DescribedGroup {
    let version = versions.highest(ApiKey::DescribeGroups, DescribeGroupsRequest::VERSIONS);
    let response: DescribeGroupsResponse = exchange(
        stream,
        ApiKey::DescribeGroups,
        version,
        &DescribeGroupsRequest::default().with_groups(vec![group_id(group)]),
    );
    assert_eq!(response.groups.len(), 1, "{response:?}");
    let described: DescribedGroup = response.groups[0].clone();
    assert_eq!(error(described.error_code), None, "{described:?}");
    described
}

/// The current generation of `group`, found by heartbeating as `member_id`
/// with each generation in turn: only the current one is answered without
/// ILLEGAL_GENERATION. (DescribeGroups does not show generations.)
pub fn generation_of(stream: &mut TcpStream, group: &str, member_id: &str) -> i32 {
    let version = Versions::of(stream).highest(ApiKey::Heartbeat, HeartbeatRequest::VERSIONS);
    for generation in 1..=GENERATION_MAX {
        match heartbeat(stream, version, group, generation, member_id) {
            None => return generation,
            Some(ResponseError::IllegalGeneration) => continue,
            Some(other) => panic!("Heartbeat as {member_id} of {group}: {other:?}"),
        }
    }
    panic!("{group} is not at any generation up to {GENERATION_MAX}")
}
