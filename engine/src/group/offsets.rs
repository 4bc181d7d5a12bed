//! Committed offsets and the group-level requests around them: OffsetCommit,
//! OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete,
//! `offsets.retention.minutes` expiry, and loading (replaying) a partition.
//!
//! A commit is validated here, written by the runtime, and applied with
//! [`GroupCoordinator::offsets_committed`] only once it is durable, so
//! OffsetFetch never returns an offset a crash could take back.

use std::collections::BTreeSet;

use bytes::Bytes;

use crate::group::assignor::decode_subscription;
use crate::group::coordinator::{GroupCoordinator, snapshot};
use crate::group::state::{CommittedOffset, Group, GroupState, Member, Protocol};
use crate::group::txn_offsets::{forget_partition, partitions_with_offsets};
use crate::group::{GroupSnapshot, Persist};
use crate::protocol::errors::ErrorCode;
use crate::types::TopicPartition;

/// An OffsetCommit for one group, any version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitRequest {
    pub group_id: String,
    /// Empty and generation -1 for a commit outside group management.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub generation: i32,
    /// v2–v4 `retention_time_ms` when not -1: an explicit expiry.
    pub retention_ms: Option<i64>,
    pub partitions: Vec<CommitPartition>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitPartition {
    pub partition: TopicPartition,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// A validated commit: one error per partition (in request order) and the
/// offsets to write; apply them once written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommitPlan {
    pub errors: Vec<ErrorCode>,
    pub offsets: Vec<(TopicPartition, CommittedOffset)>,
}

impl CommitPlan {
    /// Each partition's answer and, for those that pass, the offset to
    /// write: metadata over `offset.metadata.max.bytes` fails only its own
    /// partition. Shared by OffsetCommit and TxnOffsetCommit.
    pub(crate) fn new(
        partitions: &[CommitPartition],
        metadata_max: usize,
        now_ms: i64,
        expire_timestamp_ms: Option<i64>,
    ) -> CommitPlan {
        let mut plan = CommitPlan {
            errors: Vec::with_capacity(partitions.len()),
            offsets: Vec::new(),
        };
        for partition in partitions {
            let metadata = partition.metadata.clone().unwrap_or_default();
            if metadata.len() > metadata_max {
                plan.errors.push(ErrorCode::OFFSET_METADATA_TOO_LARGE);
                continue;
            }
            plan.errors.push(ErrorCode::NONE);
            let offset = CommittedOffset {
                offset: partition.offset,
                leader_epoch: partition.leader_epoch,
                metadata,
                commit_timestamp_ms: now_ms,
                expire_timestamp_ms,
            };
            plan.offsets.push((partition.partition.clone(), offset));
        }
        plan
    }

    /// The records to write, in the order of [`CommitPlan::offsets`].
    pub fn records(&self, group_id: &str) -> Vec<Persist> {
        offset_records(group_id, &self.offsets)
    }
}

/// One offset record per (partition, offset) of `group_id`.
pub(crate) fn offset_records(
    group_id: &str,
    offsets: &[(TopicPartition, CommittedOffset)],
) -> Vec<Persist> {
    offsets
        .iter()
        .map(|(partition, offset)| Persist::Offset {
            group_id: group_id.to_owned(),
            partition: partition.clone(),
            offset: offset.clone(),
        })
        .collect()
}

/// DescribeGroups' view of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub state: GroupState,
    pub protocol_type: String,
    /// The selected protocol (assignor) name.
    pub protocol_name: String,
    pub members: Vec<MemberDescription>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// Metadata and assignment are only given for a stable group (Kafka).
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// ListGroups' view of one group.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    pub protocol_type: String,
    pub state: GroupState,
}

impl GroupCoordinator {
    /// Validates an OffsetCommit as Kafka's coordinator does; `Err` answers
    /// every partition with one code.
    pub fn commit_offsets(
        &mut self,
        now_ms: i64,
        request: &CommitRequest,
    ) -> Result<CommitPlan, ErrorCode> {
        let group = match self.groups.get(&request.group_id) {
            Some(group) => group,
            None if request.generation < 0 => {
                let group = Group::new(&request.group_id, now_ms);
                self.groups.insert(request.group_id.clone(), group);
                &self.groups[&request.group_id]
            }
            None => return Err(ErrorCode::ILLEGAL_GENERATION),
        };
        check_commit(group, request)?;
        let metadata_max = self.settings.offset_metadata_bytes_max;
        let expire_timestamp_ms = request.retention_ms.map(|retention| now_ms + retention);
        Ok(CommitPlan::new(
            &request.partitions,
            metadata_max,
            now_ms,
            expire_timestamp_ms,
        ))
    }

    /// Applies written commits.
    pub fn offsets_committed(
        &mut self,
        now_ms: i64,
        group_id: &str,
        offsets: Vec<(TopicPartition, CommittedOffset)>,
    ) {
        let group = self
            .groups
            .entry(group_id.to_owned())
            .or_insert_with(|| Group::new(group_id, now_ms));
        for (partition, offset) in offsets {
            // Where its record is is not known here: a later transactional
            // commit of this partition supersedes it.
            group.offset_record_offsets.remove(&partition);
            group.offsets.insert(partition, offset);
        }
    }

    /// Committed offsets of `partitions` (every committed one when `None`);
    /// `None` for a partition without one. An unknown group has none.
    pub fn fetch_offsets(
        &self,
        group_id: &str,
        partitions: Option<&[TopicPartition]>,
    ) -> Vec<(TopicPartition, Option<CommittedOffset>)> {
        let group = self.groups.get(group_id);
        match partitions {
            Some(partitions) => partitions
                .iter()
                .map(|partition| {
                    let offset = group
                        .and_then(|group| group.offsets.get(partition))
                        .cloned();
                    (partition.clone(), offset)
                })
                .collect(),
            None => group
                .map(|group| {
                    group
                        .offsets
                        .iter()
                        .map(|(partition, offset)| (partition.clone(), Some(offset.clone())))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    /// DescribeGroups: an unknown group is described as Dead (Kafka).
    pub fn describe(&self, group_id: &str) -> GroupDescription {
        let Some(group) = self.groups.get(group_id) else {
            return GroupDescription {
                group_id: group_id.to_owned(),
                state: GroupState::Dead,
                protocol_type: String::new(),
                protocol_name: String::new(),
                members: Vec::new(),
            };
        };
        let stable = group.is(GroupState::Stable);
        let protocol = group.protocol_name.clone().unwrap_or_default();
        let describe_member = |member: &Member| MemberDescription {
            member_id: member.member_id.clone(),
            group_instance_id: member.group_instance_id.clone(),
            client_id: member.client_id.clone(),
            client_host: member.client_host.clone(),
            metadata: if stable {
                member.metadata_for(&protocol)
            } else {
                Bytes::new()
            },
            assignment: if stable {
                member.assignment.clone()
            } else {
                Bytes::new()
            },
        };
        GroupDescription {
            group_id: group.group_id.clone(),
            state: group.state,
            protocol_type: group.protocol_type.clone().unwrap_or_default(),
            protocol_name: if stable {
                protocol.clone()
            } else {
                String::new()
            },
            members: group.members.values().map(describe_member).collect(),
        }
    }

    /// ListGroups: every live group, sorted by id.
    pub fn list(&self) -> Vec<GroupListing> {
        let mut listings: Vec<GroupListing> = self
            .groups
            .values()
            .filter(|group| !group.is(GroupState::Dead))
            .map(|group| GroupListing {
                group_id: group.group_id.clone(),
                protocol_type: group.protocol_type.clone().unwrap_or_default(),
                state: group.state,
            })
            .collect();
        listings.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        listings
    }

    /// DeleteGroups for one group: the tombstones to write. Only an empty
    /// group can be deleted.
    pub fn delete_group(&mut self, group_id: &str) -> Result<Vec<Persist>, ErrorCode> {
        let group = match self.groups.get(group_id) {
            None => return Err(ErrorCode::GROUP_ID_NOT_FOUND),
            Some(group) if group.is(GroupState::Dead) => return Err(ErrorCode::GROUP_ID_NOT_FOUND),
            Some(group) if !group.is(GroupState::Empty) => return Err(ErrorCode::NON_EMPTY_GROUP),
            Some(group) => group,
        };
        // Pending transactional offsets go too (Kafka's `deleteAllOffsets`).
        let mut records = offset_tombstones(group, partitions_with_offsets(group).iter());
        records.push(Persist::GroupDeleted {
            group_id: group_id.to_owned(),
        });
        self.groups.remove(group_id);
        self.forget_group_producers(group_id);
        Ok(records)
    }

    /// OffsetDelete: per partition NONE (a tombstone is written) or
    /// GROUP_SUBSCRIBED_TO_TOPIC while members consume the topic.
    pub fn delete_offsets(
        &mut self,
        group_id: &str,
        partitions: &[TopicPartition],
    ) -> Result<(Vec<ErrorCode>, Vec<Persist>), ErrorCode> {
        let group = match self.groups.get_mut(group_id) {
            Some(group) if !group.is(GroupState::Dead) => group,
            _ => return Err(ErrorCode::GROUP_ID_NOT_FOUND),
        };
        let subscribed = if group.is(GroupState::Empty) {
            BTreeSet::new()
        } else {
            subscribed_topics(group).ok_or(ErrorCode::NON_EMPTY_GROUP)?
        };
        let mut errors = Vec::with_capacity(partitions.len());
        let mut deleted = Vec::new();
        for partition in partitions {
            if subscribed.contains(&partition.topic) {
                errors.push(ErrorCode::GROUP_SUBSCRIBED_TO_TOPIC);
            } else {
                errors.push(ErrorCode::NONE);
                // A tombstone also drops pending transactional offsets.
                if forget_partition(group, partition) {
                    deleted.push(partition.clone());
                }
            }
        }
        let records = offset_tombstones(group, deleted.iter());
        Ok((errors, records))
    }

    /// Drops offsets past `offsets.retention.minutes` (KIP-211: a consumer
    /// group's offsets expire only once it has been empty that long; a group
    /// outside group management's by commit time), and groups left with
    /// nothing. Returns the tombstones to write.
    pub fn expire_offsets(&mut self, now_ms: i64) -> Vec<Persist> {
        let retention_ms = self.settings.offsets_retention_ms;
        let mut records = Vec::new();
        let mut emptied = Vec::new();
        for group in self.groups.values_mut() {
            let base_ms = |offset: &CommittedOffset| match (&group.protocol_type, group.state) {
                (Some(_), GroupState::Empty) => group.state_since_ms,
                (Some(_), _) => i64::MAX,
                (None, _) => offset.commit_timestamp_ms,
            };
            // An offset with a pending transactional commit does not expire
            // yet, nor does its group (Kafka's `cleanupExpiredOffsets`).
            let expired: Vec<TopicPartition> = group
                .offsets
                .iter()
                .filter(|(_, offset)| match offset.expire_timestamp_ms {
                    Some(expire_ms) => expire_ms <= now_ms,
                    None => base_ms(offset).saturating_add(retention_ms) <= now_ms,
                })
                .filter(|(partition, _)| !group.has_pending_txn_offset(partition))
                .map(|(partition, _)| partition.clone())
                .collect();
            for partition in &expired {
                group.offsets.remove(partition);
                group.offset_record_offsets.remove(partition);
            }
            records.extend(offset_tombstones(group, expired.iter()));
            if group.is(GroupState::Empty)
                && group.offsets.is_empty()
                && group.members.is_empty()
                && group.pending_txn_offsets.is_empty()
            {
                emptied.push(group.group_id.clone());
            }
        }
        for group_id in emptied {
            self.groups.remove(&group_id);
            records.push(Persist::GroupDeleted { group_id });
        }
        records
    }

    /// Drops the committed offsets of deleted topics (Kafka's
    /// `cleanupGroupMetadata`), so a topic created again under the same name
    /// does not inherit them. Returns the tombstones to write.
    pub fn forget_topics(&mut self, topics: &BTreeSet<String>) -> Vec<Persist> {
        let mut records = Vec::new();
        for group in self.groups.values_mut() {
            let gone: Vec<TopicPartition> = partitions_with_offsets(group)
                .into_iter()
                .filter(|partition| topics.contains(&partition.topic))
                .collect();
            for partition in &gone {
                forget_partition(group, partition);
            }
            records.extend(offset_tombstones(group, gone.iter()));
        }
        records
    }

    /// Applies one record read back from the partition while loading it.
    /// Members of a loaded group must heartbeat within their session
    /// timeout from `now_ms`, as after a coordinator failover in Kafka.
    pub fn replay(&mut self, now_ms: i64, record: Persist) {
        match record {
            Persist::Offset {
                group_id,
                partition,
                offset,
            } => {
                self.offsets_committed(now_ms, &group_id, vec![(partition, offset)]);
            }
            Persist::OffsetDeleted {
                group_id,
                partition,
            } => {
                if let Some(group) = self.groups.get_mut(&group_id) {
                    forget_partition(group, &partition);
                }
            }
            Persist::Group(snapshot) => self.replay_group(now_ms, snapshot),
            Persist::GroupDeleted { group_id } => {
                self.groups.remove(&group_id);
                self.forget_group_producers(&group_id);
            }
        }
    }

    fn replay_group(&mut self, now_ms: i64, snapshot: GroupSnapshot) {
        let group = self
            .groups
            .entry(snapshot.group_id.clone())
            .or_insert_with(|| Group::new(&snapshot.group_id, now_ms));
        let offsets = std::mem::take(&mut group.offsets);
        let record_offsets = std::mem::take(&mut group.offset_record_offsets);
        let pending = std::mem::take(&mut group.pending_txn_offsets);
        *group = Group::new(&snapshot.group_id, snapshot.state_since_ms);
        group.offsets = offsets;
        group.offset_record_offsets = record_offsets;
        group.pending_txn_offsets = pending;
        group.generation = snapshot.generation;
        group.protocol_type = Some(snapshot.protocol_type).filter(|kind| !kind.is_empty());
        group.protocol_name = snapshot.protocol_name;
        group.leader = snapshot.leader;
        let protocol = group.protocol_name.clone().unwrap_or_default();
        for (sequence, stored) in snapshot.members.into_iter().enumerate() {
            if let Some(instance) = &stored.group_instance_id {
                group
                    .static_members
                    .insert(instance.clone(), stored.member_id.clone());
            }
            let member = Member {
                member_id: stored.member_id.clone(),
                group_instance_id: stored.group_instance_id,
                client_id: stored.client_id,
                client_host: stored.client_host,
                rebalance_timeout_ms: stored.rebalance_timeout_ms,
                session_timeout_ms: stored.session_timeout_ms,
                protocols: vec![Protocol {
                    name: protocol.clone(),
                    metadata: stored.subscription,
                }],
                assignment: stored.assignment,
                awaiting_join: None,
                awaiting_sync: None,
                session_deadline_ms: now_ms + i64::from(stored.session_timeout_ms),
                joined_sequence: sequence as u64,
            };
            group.members.insert(stored.member_id, member);
        }
        group.next_join_sequence = group.members.len() as u64;
        let state = if group.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        group.state = state;
    }

    /// The group's metadata as it would be persisted now (for tests and
    /// for writing after a load).
    pub fn snapshot(&self, group_id: &str) -> Option<GroupSnapshot> {
        self.groups.get(group_id).map(snapshot)
    }
}

/// OffsetCommit's group checks, in Kafka's order (`ClassicGroup.validateOffsetCommit`).
fn check_commit(group: &Group, request: &CommitRequest) -> Result<(), ErrorCode> {
    if group.is(GroupState::Dead) {
        return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
    }
    if group.is_fenced(&request.member_id, request.group_instance_id.as_deref()) {
        return Err(ErrorCode::FENCED_INSTANCE_ID);
    }
    if request.generation < 0 && group.is(GroupState::Empty) {
        // Offsets managed outside the group protocol (assign() + commit).
        return Ok(());
    }
    if !group.members.contains_key(&request.member_id) {
        return Err(ErrorCode::UNKNOWN_MEMBER_ID);
    }
    if request.generation != group.generation {
        return Err(ErrorCode::ILLEGAL_GENERATION);
    }
    // A current member with the current generation before the assignment
    // is out: it is told to finish the rebalance (ClassicGroup order).
    if group.is(GroupState::CompletingRebalance) {
        return Err(ErrorCode::REBALANCE_IN_PROGRESS);
    }
    Ok(())
}

fn offset_tombstones<'a>(
    group: &Group,
    partitions: impl Iterator<Item = &'a TopicPartition>,
) -> Vec<Persist> {
    partitions
        .map(|partition| Persist::OffsetDeleted {
            group_id: group.group_id.clone(),
            partition: partition.clone(),
        })
        .collect()
}

/// The topics a consumer group's members subscribe to, from their
/// ConsumerProtocolSubscription metadata; `None` when the group does not
/// use the consumer protocol or a subscription cannot be read.
fn subscribed_topics(group: &Group) -> Option<BTreeSet<String>> {
    if group.protocol_type.as_deref() != Some("consumer") {
        return None;
    }
    let protocol = group.protocol_name.clone().unwrap_or_default();
    let mut topics = BTreeSet::new();
    for member in group.members.values() {
        let subscription = decode_subscription(&member.metadata_for(&protocol)).ok()?;
        topics.extend(subscription.topics);
    }
    Some(topics)
}
