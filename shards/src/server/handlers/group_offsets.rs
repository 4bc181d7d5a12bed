//! Committed offsets and group administration: OffsetCommit, OffsetFetch,
//! ListGroups, DescribeGroups, DeleteGroups and OffsetDelete. A commit is
//! answered only once its record in `__consumer_offsets` is durable.

use std::rc::Rc;

use brook_engine::group::offsets::{CommitPartition, CommitRequest};
use brook_engine::group::state::{CommittedOffset, GroupState};
use brook_engine::group::txn_offsets::{FetchedOffset, Stability};
use brook_engine::protocol::acl::{AclResource, authorized_operations_if};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::types::{PartitionId, TopicPartition};
use futures::future::join_all;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest, OffsetCommitResponse,
    OffsetDeleteRequest, OffsetDeleteResponse, OffsetFetchRequest, OffsetFetchResponse,
};

use crate::server::groups::{write_records, write_records_placed};
use crate::server::handlers::groups::{group_id, on_coordinator};
use crate::server::handlers::{text, topic_name};
use crate::server::response::{Response, encode};
use crate::server::shard::{Shard, now_ms};

/// The group type ListGroups v5 reports for classic groups.
const GROUP_TYPE_CLASSIC: &str = "classic";

/// Groups per-partition answers by topic, keeping the order they came in
/// (consecutive partitions of one topic share a topic entry).
pub(crate) fn by_topic<P, T>(
    partitions: impl IntoIterator<Item = (TopicPartition, P)>,
    topic_entry: impl Fn(&str, Vec<P>) -> T,
) -> Vec<T> {
    let mut grouped: Vec<(String, Vec<P>)> = Vec::new();
    for (topic_partition, partition) in partitions {
        match grouped.last_mut() {
            Some((topic, entries)) if *topic == topic_partition.topic => entries.push(partition),
            _ => grouped.push((topic_partition.topic, vec![partition])),
        }
    }
    grouped
        .into_iter()
        .map(|(topic, entries)| topic_entry(&topic, entries))
        .collect()
}

/// The commits of partitions whose topic exists, and every partition in
/// request order with whether it does (the others are answered
/// UNKNOWN_TOPIC_OR_PARTITION).
pub(crate) fn split_by_existence(
    shard: &Shard,
    commits: impl Iterator<Item = CommitPartition>,
) -> (Vec<CommitPartition>, Vec<(TopicPartition, bool)>) {
    let image = shard.local_image();
    let mut known = Vec::new();
    let mut order = Vec::new();
    for commit in commits {
        let exists = image.has_partition(&commit.partition);
        order.push((commit.partition.clone(), exists));
        if exists {
            known.push(commit);
        }
    }
    (known, order)
}

pub async fn offset_commit(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: OffsetCommitRequest = request.decode_body()?;
    let (known, order) = split_by_existence(
        shard,
        body.topics.iter().flat_map(|topic| {
            topic.partitions.iter().map(|partition| CommitPartition {
                partition: TopicPartition::new(topic.name.to_string(), partition.partition_index),
                offset: partition.committed_offset,
                leader_epoch: partition.committed_leader_epoch,
                metadata: partition
                    .committed_metadata
                    .as_ref()
                    .map(ToString::to_string),
            })
        }),
    );
    let commit = CommitRequest {
        group_id: body.group_id.to_string(),
        member_id: body.member_id.to_string(),
        group_instance_id: body.group_instance_id.as_ref().map(ToString::to_string),
        generation: body.generation_id_or_member_epoch,
        retention_ms: Some(body.retention_time_ms).filter(|retention| *retention >= 0),
        partitions: known,
    };
    let group = commit.group_id.clone();
    let committed = on_coordinator(shard, &group, move |owner, partition| async move {
        let plan = owner
            .groups
            .with(&owner, partition, |coordinator| {
                coordinator.commit_offsets(now_ms(), &commit)
            })
            .await??;
        let records = plan.records(&commit.group_id);
        let positions = match write_records_placed(&owner, partition, &records, None).await {
            Ok(positions) => positions,
            Err(error) => return Ok(vec![error; plan.errors.len()]),
        };
        let errors = plan.errors.clone();
        // Each offset with its record's place in the log, which decides
        // whether a transactional commit completing later supersedes it.
        let placed = plan
            .offsets
            .into_iter()
            .zip(positions)
            .map(|((partition, offset), position)| (partition, offset, position.0))
            .collect();
        owner
            .groups
            .with(&owner, partition, |coordinator| {
                coordinator.offsets_committed_at(now_ms(), &commit.group_id, placed)
            })
            .await?;
        Ok(errors)
    })
    .await;
    let mut errors = match committed {
        Ok(errors) => errors.into_iter(),
        Err(error) => vec![error; order.len()].into_iter(),
    };
    let answers = order.into_iter().map(|(topic_partition, exists)| {
        let error = if exists {
            errors.next().unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR)
        } else {
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        };
        let partition = OffsetCommitResponsePartition::default()
            .with_partition_index(topic_partition.partition.0)
            .with_error_code(error.0);
        (topic_partition, partition)
    });
    let topics = by_topic(answers, |topic, partitions| {
        OffsetCommitResponseTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(partitions)
    });
    encode(
        request,
        &OffsetCommitResponse::default().with_topics(topics),
    )
}

/// One group's committed offsets for OffsetFetch: `(partition, offset or
/// error)` in request order (or every committed one), or the group's error.
/// With `require_stable` (v7+), a partition with pending transactional
/// offsets answers UNSTABLE_OFFSET_COMMIT (KIP-447).
async fn fetch_group(
    shard: &Rc<Shard>,
    group: String,
    partitions: Option<Vec<TopicPartition>>,
    stability: Stability,
) -> Result<Vec<FetchedOffset>, ErrorCode> {
    on_coordinator(shard, &group.clone(), move |owner, partition| async move {
        owner
            .groups
            .with(&owner, partition, |coordinator| {
                coordinator.fetch_offsets_with(&group, partitions.as_deref(), stability)
            })
            .await
    })
    .await
}

/// Offset, leader epoch, metadata and error code of one fetched partition.
fn fetched_fields(
    fetched: &Result<Option<CommittedOffset>, ErrorCode>,
) -> (i64, i32, String, ErrorCode) {
    match fetched {
        Ok(Some(offset)) => (
            offset.offset,
            offset.leader_epoch,
            offset.metadata.clone(),
            ErrorCode::NONE,
        ),
        Ok(None) => (-1, -1, String::new(), ErrorCode::NONE),
        Err(error) => (-1, -1, String::new(), *error),
    }
}

pub async fn offset_fetch(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: OffsetFetchRequest = request.decode_body()?;
    let stability = if request.api_version >= 7 && body.require_stable {
        Stability::RequireStable
    } else {
        Stability::Latest
    };
    if request.api_version >= 8 {
        let mut groups = Vec::with_capacity(body.groups.len());
        for group in &body.groups {
            let partitions = group.topics.as_ref().map(|topics| {
                topics
                    .iter()
                    .flat_map(|topic| {
                        topic
                            .partition_indexes
                            .iter()
                            .map(|index| TopicPartition::new(topic.name.to_string(), *index))
                    })
                    .collect()
            });
            let fetched =
                fetch_group(shard, group.group_id.to_string(), partitions, stability).await;
            groups.push(fetch_response_group(&group.group_id.to_string(), fetched));
        }
        return encode(request, &OffsetFetchResponse::default().with_groups(groups));
    }
    let partitions = body.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|topic| {
                topic
                    .partition_indexes
                    .iter()
                    .map(|index| TopicPartition::new(topic.name.to_string(), *index))
            })
            .collect()
    });
    let fetched = fetch_group(shard, body.group_id.to_string(), partitions, stability).await;
    let response = match fetched {
        Err(error) => OffsetFetchResponse::default().with_error_code(error.0),
        Ok(fetched) => {
            let answers = fetched.into_iter().map(|(topic_partition, offset)| {
                let (committed, epoch, metadata, error) = fetched_fields(&offset);
                let partition = OffsetFetchResponsePartition::default()
                    .with_partition_index(topic_partition.partition.0)
                    .with_committed_offset(committed)
                    .with_committed_leader_epoch(epoch)
                    .with_metadata(Some(text(&metadata)))
                    .with_error_code(error.0);
                (topic_partition, partition)
            });
            let topics = by_topic(answers, |topic, partitions| {
                OffsetFetchResponseTopic::default()
                    .with_name(topic_name(topic))
                    .with_partitions(partitions)
            });
            OffsetFetchResponse::default().with_topics(topics)
        }
    };
    encode(request, &response)
}

fn fetch_response_group(
    group: &str,
    fetched: Result<Vec<FetchedOffset>, ErrorCode>,
) -> OffsetFetchResponseGroup {
    let fetched = match fetched {
        Ok(fetched) => fetched,
        Err(error) => {
            return OffsetFetchResponseGroup::default()
                .with_group_id(group_id(group))
                .with_error_code(error.0);
        }
    };
    let answers = fetched.into_iter().map(|(topic_partition, offset)| {
        let (committed, epoch, metadata, error) = fetched_fields(&offset);
        let partition = OffsetFetchResponsePartitions::default()
            .with_partition_index(topic_partition.partition.0)
            .with_committed_offset(committed)
            .with_committed_leader_epoch(epoch)
            .with_metadata(Some(text(&metadata)))
            .with_error_code(error.0);
        (topic_partition, partition)
    });
    let topics = by_topic(answers, |topic, partitions| {
        OffsetFetchResponseTopics::default()
            .with_name(topic_name(topic))
            .with_partitions(partitions)
    });
    OffsetFetchResponseGroup::default()
        .with_group_id(group_id(group))
        .with_topics(topics)
}

pub async fn list_groups(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: ListGroupsRequest = request.decode_body()?;
    let mut listings = Vec::new();
    for target in shard.context.shard_ids() {
        let listed = shard
            .on_shard(target, |owner| async move {
                owner
                    .groups
                    .each_loaded(|coordinator| coordinator.list())
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
            })
            .await;
        listings.extend(listed.unwrap_or_default());
    }
    let states: Vec<String> = body
        .states_filter
        .iter()
        .map(|state| state.to_lowercase())
        .collect();
    let types: Vec<String> = body
        .types_filter
        .iter()
        .map(|kind| kind.to_lowercase())
        .collect();
    let groups = listings
        .into_iter()
        .filter(|listing| {
            states.is_empty() || states.contains(&listing.state.name().to_lowercase())
        })
        .filter(|_| types.is_empty() || types.iter().any(|kind| kind == GROUP_TYPE_CLASSIC))
        .map(|listing| {
            ListedGroup::default()
                .with_group_id(group_id(&listing.group_id))
                .with_protocol_type(text(&listing.protocol_type))
                .with_group_state(text(listing.state.name()))
                .with_group_type(text(GROUP_TYPE_CLASSIC))
        })
        .collect();
    encode(request, &ListGroupsResponse::default().with_groups(groups))
}

pub async fn describe_groups(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: DescribeGroupsRequest = request.decode_body()?;
    // Everything one may do to a group, as there is no authorizer.
    let operations =
        authorized_operations_if(body.include_authorized_operations, AclResource::Group);
    let described = body.groups.iter().map(|group| {
        let group = group.to_string();
        async move {
            let job_group = group.clone();
            let found = on_coordinator(shard, &group, move |owner, partition| async move {
                owner
                    .groups
                    .with(&owner, partition, |coordinator| {
                        coordinator.describe(&job_group)
                    })
                    .await
            })
            .await;
            (group, found)
        }
    });
    let groups = join_all(described)
        .await
        .into_iter()
        .map(|(group, found)| match found {
            Err(error) => DescribedGroup::default()
                .with_group_id(group_id(&group))
                .with_error_code(error.0)
                .with_group_state(text(GroupState::Dead.name()))
                .with_authorized_operations(operations),
            // v6 (KIP-1043) names an unknown group an error; older
            // versions describe it as Dead.
            Ok(description)
                if request.api_version >= 6 && description.state == GroupState::Dead =>
            {
                DescribedGroup::default()
                    .with_group_id(group_id(&group))
                    .with_error_code(ErrorCode::GROUP_ID_NOT_FOUND.0)
                    .with_error_message(Some(text(&format!("Group {group} not found."))))
                    .with_group_state(text(GroupState::Dead.name()))
                    .with_authorized_operations(operations)
            }
            Ok(description) => DescribedGroup::default()
                .with_group_id(group_id(&group))
                .with_group_state(text(description.state.name()))
                .with_protocol_type(text(&description.protocol_type))
                .with_protocol_data(text(&description.protocol_name))
                .with_authorized_operations(operations)
                .with_members(
                    description
                        .members
                        .into_iter()
                        .map(|member| {
                            DescribedGroupMember::default()
                                .with_member_id(text(&member.member_id))
                                .with_group_instance_id(
                                    member.group_instance_id.as_deref().map(text),
                                )
                                .with_client_id(text(&member.client_id))
                                .with_client_host(text(&member.client_host))
                                .with_member_metadata(member.metadata)
                                .with_member_assignment(member.assignment)
                        })
                        .collect(),
                ),
        })
        .collect();
    encode(
        request,
        &DescribeGroupsResponse::default().with_groups(groups),
    )
}

pub async fn delete_groups(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: DeleteGroupsRequest = request.decode_body()?;
    let mut results = Vec::with_capacity(body.groups_names.len());
    for group in &body.groups_names {
        let group = group.to_string();
        let job_group = group.clone();
        let deleted = on_coordinator(shard, &group, move |owner, partition| async move {
            let records = owner
                .groups
                .with(&owner, partition, |coordinator| {
                    coordinator.delete_group(&job_group)
                })
                .await??;
            write_records(&owner, partition, &records).await
        })
        .await;
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group_id(&group))
                .with_error_code(deleted.err().unwrap_or(ErrorCode::NONE).0),
        );
    }
    encode(
        request,
        &DeleteGroupsResponse::default().with_results(results),
    )
}

pub async fn offset_delete(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: OffsetDeleteRequest = request.decode_body()?;
    let partitions: Vec<TopicPartition> = body
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|partition| TopicPartition {
                topic: topic.name.to_string(),
                partition: PartitionId(partition.partition_index),
            })
        })
        .collect();
    let group = body.group_id.to_string();
    let job_partitions = partitions.clone();
    let deleted = on_coordinator(shard, &group.clone(), move |owner, partition| async move {
        let (errors, records) = owner
            .groups
            .with(&owner, partition, |coordinator| {
                coordinator.delete_offsets(&group, &job_partitions)
            })
            .await??;
        write_records(&owner, partition, &records).await?;
        Ok(errors)
    })
    .await;
    let errors = match deleted {
        Ok(errors) => errors,
        Err(error) => {
            return encode(
                request,
                &OffsetDeleteResponse::default().with_error_code(error.0),
            );
        }
    };
    let answers = partitions
        .into_iter()
        .zip(errors)
        .map(|(topic_partition, error)| {
            let partition = OffsetDeleteResponsePartition::default()
                .with_partition_index(topic_partition.partition.0)
                .with_error_code(error.0);
            (topic_partition, partition)
        });
    let topics = by_topic(answers, |topic, partitions| {
        OffsetDeleteResponseTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(partitions)
    });
    encode(
        request,
        &OffsetDeleteResponse::default().with_topics(topics),
    )
}
