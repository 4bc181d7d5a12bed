//! Consumer groups: the classic rebalance protocol's coordinator state machine,
//! the records it persists in `__consumer_offsets`, and the client-side
//! partition assignors.
//!
//! The coordinator for group G is hosted by the shard that owns partition
//! `abs(javaStringHash(G)) % offsets.topic.num.partitions` of `__consumer_offsets`;
//! this module decides, that shard performs the IO. The coordinator speaks
//! in [`Persist`] values; [`records`] turns them into Kafka's record bytes and
//! back, so loading a partition is replaying what was persisted.
//! Transactional offset commits ([`txn_offsets`]) are the same records in
//! transactional batches, pending until their transaction's marker.

pub mod assignor;
pub mod coordinator;
pub mod offsets;
pub mod records;
pub mod state;
pub mod txn_offsets;

use crate::group::records::{
    GroupMetadataKey, GroupMetadataValue, GroupRecord, MemberMetadata, OffsetCommitKey,
    OffsetCommitValue,
};
use crate::group::state::CommittedOffset;
use crate::types::{LeaderEpoch, Offset, TopicPartition};

/// What the coordinator writes to its `__consumer_offsets` partition (and
/// reads back when it loads the partition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Persist {
    /// The group's generation, protocol, leader and members with their
    /// assignments.
    Group(GroupSnapshot),
    /// The group is gone (a tombstone for its metadata).
    GroupDeleted { group_id: String },
    Offset {
        group_id: String,
        partition: TopicPartition,
        offset: CommittedOffset,
    },
    /// A tombstone for one committed offset.
    OffsetDeleted {
        group_id: String,
        partition: TopicPartition,
    },
}

/// A group's metadata record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupSnapshot {
    pub group_id: String,
    /// Empty for a group that only commits offsets.
    pub protocol_type: String,
    pub generation: i32,
    pub protocol_name: Option<String>,
    pub leader: Option<String>,
    pub state_since_ms: i64,
    /// Each member with its subscription for the group's protocol and its
    /// assignment, as the record stores them.
    pub members: Vec<MemberMetadata>,
}

impl Persist {
    /// The `__consumer_offsets` record for this value.
    pub fn to_record(&self) -> GroupRecord {
        match self {
            Persist::Group(snapshot) => GroupRecord::GroupMetadata {
                key: GroupMetadataKey {
                    group: snapshot.group_id.clone(),
                },
                value: GroupMetadataValue {
                    protocol_type: snapshot.protocol_type.clone(),
                    generation: snapshot.generation,
                    protocol: snapshot.protocol_name.clone(),
                    leader: snapshot.leader.clone(),
                    current_state_timestamp_ms: Some(snapshot.state_since_ms),
                    members: snapshot.members.clone(),
                },
            },
            Persist::GroupDeleted { group_id } => GroupRecord::GroupTombstone(GroupMetadataKey {
                group: group_id.clone(),
            }),
            Persist::Offset {
                group_id,
                partition,
                offset,
            } => GroupRecord::OffsetCommit {
                key: offset_key(group_id, partition),
                value: OffsetCommitValue {
                    offset: Offset(offset.offset),
                    leader_epoch: LeaderEpoch(offset.leader_epoch),
                    metadata: offset.metadata.clone(),
                    commit_timestamp_ms: offset.commit_timestamp_ms,
                    expire_timestamp_ms: offset.expire_timestamp_ms,
                    topic_id: None,
                },
            },
            Persist::OffsetDeleted {
                group_id,
                partition,
            } => GroupRecord::OffsetTombstone(offset_key(group_id, partition)),
        }
    }

    /// The value a record read back stands for; `None` for record types the
    /// classic coordinator does not use.
    pub fn from_record(record: GroupRecord) -> Option<Persist> {
        Some(match record {
            GroupRecord::OffsetCommit { key, value } => Persist::Offset {
                group_id: key.group,
                partition: TopicPartition {
                    topic: key.topic,
                    partition: key.partition,
                },
                offset: CommittedOffset {
                    offset: value.offset.0,
                    leader_epoch: value.leader_epoch.0,
                    metadata: value.metadata,
                    commit_timestamp_ms: value.commit_timestamp_ms,
                    expire_timestamp_ms: value.expire_timestamp_ms,
                },
            },
            GroupRecord::OffsetTombstone(key) => Persist::OffsetDeleted {
                group_id: key.group,
                partition: TopicPartition {
                    topic: key.topic,
                    partition: key.partition,
                },
            },
            GroupRecord::GroupMetadata { key, value } => Persist::Group(GroupSnapshot {
                group_id: key.group,
                protocol_type: value.protocol_type,
                generation: value.generation,
                protocol_name: value.protocol,
                leader: value.leader,
                state_since_ms: value.current_state_timestamp_ms.unwrap_or(-1),
                members: value.members,
            }),
            GroupRecord::GroupTombstone(key) => Persist::GroupDeleted {
                group_id: key.group,
            },
            GroupRecord::Unknown { .. } => return None,
        })
    }
}

fn offset_key(group_id: &str, partition: &TopicPartition) -> OffsetCommitKey {
    OffsetCommitKey {
        group: group_id.to_owned(),
        topic: partition.topic.clone(),
        partition: partition.partition,
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn every_persisted_value_reads_back_from_its_record_bytes() {
        let partition = TopicPartition::new("topic", 3);
        let values = vec![
            Persist::Group(GroupSnapshot {
                group_id: "g".into(),
                protocol_type: "consumer".into(),
                generation: 4,
                protocol_name: Some("range".into()),
                leader: Some("m-1".into()),
                state_since_ms: 1_700_000_000_000,
                members: vec![MemberMetadata {
                    member_id: "m-1".into(),
                    group_instance_id: Some("i-1".into()),
                    client_id: "c".into(),
                    client_host: "/127.0.0.1".into(),
                    rebalance_timeout_ms: 30_000,
                    session_timeout_ms: 10_000,
                    subscription: Bytes::from_static(b"sub"),
                    assignment: Bytes::from_static(b"assign"),
                }],
            }),
            Persist::GroupDeleted {
                group_id: "g".into(),
            },
            Persist::Offset {
                group_id: "g".into(),
                partition: partition.clone(),
                offset: CommittedOffset {
                    offset: 42,
                    leader_epoch: 7,
                    metadata: "meta".into(),
                    commit_timestamp_ms: 1_700_000_000_001,
                    expire_timestamp_ms: None,
                },
            },
            Persist::OffsetDeleted {
                group_id: "g".into(),
                partition,
            },
        ];
        for value in values {
            let (key, bytes) = value.to_record().encode();
            let record = GroupRecord::decode(&key, bytes.as_deref()).unwrap();
            assert_eq!(Persist::from_record(record), Some(value));
        }
    }
}
