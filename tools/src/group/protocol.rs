//! The requests `brook group` sends, each answered as a domain value:
//! a group's description from its coordinator (DescribeGroups, members'
//! assignments decoded from the consumer protocol's bytes), its committed
//! offsets (OffsetFetch), offsets of a topic's partitions (ListOffsets to
//! each leader) and new committed offsets (OffsetCommit).
//!
//! Versions are ones both Brook and Kafka 3.x and 4.x serve: ListGroups v4
//! (state filter), DescribeGroups v5, OffsetFetch v8 (groups batched),
//! OffsetCommit v8 and DeleteGroups v2.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use brook_engine::group::assignor::{TopicPartition, decode_assignment};
use brook_shards::client::cluster::topic_name;
use brook_shards::client::{ClientError, PartitionLeader};
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::{
    ApiKey, DescribeGroupsRequest, DescribeGroupsResponse, GroupId, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse,
};
use kafka_protocol::protocol::StrBytes;

use crate::cli::session::within;
use crate::cli::{CliError, Session};

pub const LIST_GROUPS_VERSION: i16 = 4;
pub const DESCRIBE_GROUPS_VERSION: i16 = 5;
pub const OFFSET_FETCH_VERSION: i16 = 8;
pub const OFFSET_COMMIT_VERSION: i16 = 8;
pub const DELETE_GROUPS_VERSION: i16 = 2;
/// FindCoordinator's key type for a group.
const KEY_TYPE_GROUP: i8 = 0;
/// Kafka's UNKNOWN_TOPIC_OR_PARTITION.
pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
/// Kafka's GROUP_ID_NOT_FOUND: Kafka 4's new coordinator answers it where
/// the classic one describes a Dead group with no offsets.
pub const GROUP_ID_NOT_FOUND: i16 = 69;
/// The protocol type of groups of Kafka consumers (and "" for groups that
/// only commit offsets); other types' assignments are not ours to read.
const CONSUMER_PROTOCOL_TYPE: &str = "consumer";
/// Partitions per OffsetCommit request, so a reset of many partitions is
/// sent in requests of bounded size.
pub const COMMIT_PARTITIONS_MAX: usize = 1_000;

/// A group's state as DescribeGroups names it.
pub const STATE_DEAD: &str = "Dead";
pub const STATE_EMPTY: &str = "Empty";

/// One member of a group, as DescribeGroups shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub host: String,
    /// The partitions the group's leader gave it (empty while rebalancing).
    pub assignment: Vec<TopicPartition>,
}

/// A group as its coordinator describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Description {
    pub group: String,
    pub coordinator: SocketAddr,
    /// Stable, Empty, Dead, PreparingRebalance, CompletingRebalance…
    pub state: String,
    pub protocol_type: String,
    /// The assignor chosen (`range`, `cooperative-sticky`…), when Stable.
    pub assignment_strategy: String,
    pub members: Vec<Member>,
}

impl Description {
    /// No members: Kafka lets only such a group's offsets be reset.
    pub fn is_inactive(&self) -> bool {
        self.state == STATE_EMPTY || self.state == STATE_DEAD
    }
}

/// `1 member`, `3 members`.
pub fn members_phrase(count: usize) -> String {
    match count {
        1 => "1 member".to_owned(),
        count => format!("{count} members"),
    }
}

fn group_id(group: &str) -> GroupId {
    GroupId(StrBytes::from_string(group.to_owned()))
}

/// The coordinator of `group`.
pub async fn coordinator(session: &Session, group: &str) -> Result<SocketAddr, CliError> {
    session.coordinator(group, KEY_TYPE_GROUP).await
}

/// DescribeGroups for `group` at its coordinator. A group the coordinator
/// does not know is described as Dead with no members, whichever way the
/// broker says so.
pub async fn describe_group(session: &Session, group: &str) -> Result<Description, CliError> {
    let coordinator = coordinator(session, group).await?;
    let request = DescribeGroupsRequest::default().with_groups(vec![group_id(group)]);
    let response: DescribeGroupsResponse = session
        .request(
            coordinator,
            ApiKey::DescribeGroups,
            DESCRIBE_GROUPS_VERSION,
            &request,
        )
        .await?;
    let described = response
        .groups
        .into_iter()
        .find(|described| described.group_id.as_str() == group)
        .ok_or_else(|| CliError::Failed(format!("DescribeGroups did not describe {group}")))?;
    let mut description = Description {
        group: group.to_owned(),
        coordinator,
        state: described.group_state.to_string(),
        protocol_type: described.protocol_type.to_string(),
        assignment_strategy: described.protocol_data.to_string(),
        members: Vec::with_capacity(described.members.len()),
    };
    if described.error_code == GROUP_ID_NOT_FOUND {
        description.state = STATE_DEAD.to_owned();
        return Ok(description);
    }
    CliError::check(described.error_code, || format!("describing group {group}"))?;
    let consumer =
        description.protocol_type.is_empty() || description.protocol_type == CONSUMER_PROTOCOL_TYPE;
    for member in described.members {
        let assignment = if consumer && !member.member_assignment.is_empty() {
            decode_assignment(&member.member_assignment)
                .map_err(|error| {
                    CliError::Failed(format!(
                        "the assignment of member {} of group {group}: {error}",
                        member.member_id.as_str()
                    ))
                })?
                .partitions
        } else {
            Vec::new()
        };
        description.members.push(Member {
            member_id: member.member_id.to_string(),
            group_instance_id: member.group_instance_id.map(|id| id.to_string()),
            client_id: member.client_id.to_string(),
            host: member.client_host.to_string(),
            assignment,
        });
    }
    Ok(description)
}

/// The committed offset of every partition `group` has one for (OffsetFetch
/// with all topics). A group the coordinator does not know has none.
pub async fn committed_offsets(
    session: &Session,
    coordinator: SocketAddr,
    group: &str,
) -> Result<BTreeMap<TopicPartition, i64>, CliError> {
    let request = OffsetFetchRequest::default().with_groups(vec![
        OffsetFetchRequestGroup::default()
            .with_group_id(group_id(group))
            .with_topics(None),
    ]);
    let response: OffsetFetchResponse = session
        .request(
            coordinator,
            ApiKey::OffsetFetch,
            OFFSET_FETCH_VERSION,
            &request,
        )
        .await?;
    let fetched = response
        .groups
        .into_iter()
        .find(|fetched| fetched.group_id.as_str() == group)
        .ok_or_else(|| CliError::Failed(format!("OffsetFetch gave no answer for {group}")))?;
    if fetched.error_code == GROUP_ID_NOT_FOUND {
        return Ok(BTreeMap::new());
    }
    CliError::check(fetched.error_code, || {
        format!("fetching the offsets of group {group}")
    })?;
    let mut offsets = BTreeMap::new();
    for topic in fetched.topics {
        for partition in topic.partitions {
            let what = || {
                format!(
                    "the offset of group {group} on {}-{}",
                    topic.name.as_str(),
                    partition.partition_index
                )
            };
            CliError::check(partition.error_code, what)?;
            // -1: no committed offset (Kafka's admin client leaves it out).
            if partition.committed_offset >= 0 {
                offsets.insert(
                    TopicPartition::new(topic.name.as_str(), partition.partition_index),
                    partition.committed_offset,
                );
            }
        }
    }
    Ok(offsets)
}

/// The leader of each partition of `topic`, or `None` when the topic does
/// not exist (any more).
pub async fn leaders(
    session: &Session,
    topic: &str,
) -> Result<Option<Vec<PartitionLeader>>, CliError> {
    let found = within(
        || format!("the partitions of {topic}"),
        session.timeout(),
        async { Ok(session.cluster().leaders(topic).await) },
    )
    .await?;
    match found {
        Ok(leaders) => Ok(Some(leaders)),
        Err(ClientError::Kafka { code, .. }) if code == UNKNOWN_TOPIC_OR_PARTITION => Ok(None),
        Err(error) => Err(error.into()),
    }
}

/// Each of `leaders`' partitions' offset at `timestamp` (-1 the log end,
/// -2 the log start, else the first record at or after it, -1 for none).
pub async fn offsets_at(
    session: &Session,
    topic: &str,
    leaders: &[PartitionLeader],
    timestamp: i64,
) -> Result<BTreeMap<i32, i64>, CliError> {
    within(
        || format!("the offsets of {topic}"),
        session.timeout(),
        async { Ok(session.cluster().offsets(topic, leaders, timestamp).await?) },
    )
    .await
}

/// Commits `offsets` for `group` as an admin does for an inactive group:
/// generation -1 and no member id (Kafka's `alterConsumerGroupOffsets`).
pub async fn commit_offsets(
    session: &Session,
    coordinator: SocketAddr,
    group: &str,
    offsets: &[(TopicPartition, i64)],
) -> Result<(), CliError> {
    for chunk in offsets.chunks(COMMIT_PARTITIONS_MAX) {
        let mut topics: Vec<OffsetCommitRequestTopic> = Vec::new();
        for (partition, offset) in chunk {
            let entry = OffsetCommitRequestPartition::default()
                .with_partition_index(partition.partition)
                .with_committed_offset(*offset);
            match topics.last_mut() {
                Some(topic) if topic.name.as_str() == partition.topic => {
                    topic.partitions.push(entry);
                }
                _ => topics.push(
                    OffsetCommitRequestTopic::default()
                        .with_name(topic_name(&partition.topic))
                        .with_partitions(vec![entry]),
                ),
            }
        }
        let request = OffsetCommitRequest::default()
            .with_group_id(group_id(group))
            .with_generation_id_or_member_epoch(-1)
            .with_member_id(StrBytes::from_static_str(""))
            .with_topics(topics);
        let response: OffsetCommitResponse = session
            .request(
                coordinator,
                ApiKey::OffsetCommit,
                OFFSET_COMMIT_VERSION,
                &request,
            )
            .await?;
        for topic in &response.topics {
            for partition in &topic.partitions {
                CliError::check(partition.error_code, || {
                    format!(
                        "committing the offset of group {group} on {}-{}",
                        topic.name.as_str(),
                        partition.partition_index
                    )
                })?;
            }
        }
    }
    Ok(())
}
