//! TxnOffsetCommit (v0–v5): offsets a transactional producer commits for a
//! consumer group inside its transaction (KIP-98; v3+ carry the member's
//! generation, id and instance id for KIP-447's fencing).
//!
//! The group's coordinator (on the shard that owns its `__consumer_offsets`
//! partition) validates the commit, the offsets are written as one
//! transactional batch of the producer, and the request is answered once
//! that batch is durable. The offsets stay pending, invisible to OffsetFetch,
//! until the transaction's COMMIT marker reaches the partition
//! ([`crate::server::groups::on_transaction_marker`]).

use std::rc::Rc;

use brook_engine::group::offsets::CommitPartition;
use brook_engine::group::txn_offsets::{TxnCommitPlan, TxnCommitRequest};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::replica::producer_state::ProducerEpoch;
use brook_engine::types::{ProducerId, TopicPartition};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{TxnOffsetCommitRequest, TxnOffsetCommitResponse};

use crate::server::groups::write_records_placed;
use crate::server::handlers::group_offsets::{by_topic, split_by_existence};
use crate::server::handlers::groups::on_coordinator;
use crate::server::handlers::topic_name;
use crate::server::response::{Response, encode};
use crate::server::shard::{Shard, now_ms};

/// The first version whose clients handle COORDINATOR_LOAD_IN_PROGRESS;
/// older ones (0.11 to 2.0, KAFKA-7296) are told COORDINATOR_NOT_AVAILABLE,
/// as Kafka does.
const LOAD_IN_PROGRESS_VERSION_MIN: i16 = 2;

pub async fn txn_offset_commit(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: TxnOffsetCommitRequest = request.decode_body()?;
    let (commit, order) = commit_request(shard, &body);
    // Kafka answers partitions of unknown topics itself and asks the
    // coordinator only about the rest.
    let committed = if commit.partitions.is_empty() {
        Ok(Vec::new())
    } else if commit.group_id.is_empty() {
        Err(ErrorCode::INVALID_GROUP_ID)
    } else {
        commit_on_coordinator(shard, commit).await
    };
    let known = order.iter().filter(|(_, exists)| *exists).count();
    let mut errors = match committed {
        Ok(errors) => errors.into_iter(),
        Err(error) => vec![error; known].into_iter(),
    };
    let answers = order.into_iter().map(|(topic_partition, exists)| {
        let mut error = if exists {
            errors.next().unwrap_or(ErrorCode::UNKNOWN_SERVER_ERROR)
        } else {
            ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        };
        if request.api_version < LOAD_IN_PROGRESS_VERSION_MIN
            && error == ErrorCode::COORDINATOR_LOAD_IN_PROGRESS
        {
            error = ErrorCode::COORDINATOR_NOT_AVAILABLE;
        }
        let partition = TxnOffsetCommitResponsePartition::default()
            .with_partition_index(topic_partition.partition.0)
            .with_error_code(error.0);
        (topic_partition, partition)
    });
    let topics = by_topic(answers, |topic, partitions| {
        TxnOffsetCommitResponseTopic::default()
            .with_name(topic_name(topic))
            .with_partitions(partitions)
    });
    encode(
        request,
        &TxnOffsetCommitResponse::default().with_topics(topics),
    )
}

/// The request as domain values with the partitions of existing topics,
/// and every partition in request order with whether its topic exists.
fn commit_request(
    shard: &Shard,
    body: &TxnOffsetCommitRequest,
) -> (TxnCommitRequest, Vec<(TopicPartition, bool)>) {
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
    let commit = TxnCommitRequest {
        transactional_id: body.transactional_id.0.to_string(),
        group_id: body.group_id.to_string(),
        producer_id: ProducerId(body.producer_id.0),
        producer_epoch: ProducerEpoch(body.producer_epoch),
        generation: body.generation_id,
        member_id: body.member_id.to_string(),
        group_instance_id: body.group_instance_id.as_ref().map(ToString::to_string),
        partitions: known,
    };
    (commit, order)
}

/// Validates, writes and registers the commit on the group's coordinator
/// shard: one error per partition of `commit`, or one for all.
async fn commit_on_coordinator(
    shard: &Rc<Shard>,
    commit: TxnCommitRequest,
) -> Result<Vec<ErrorCode>, ErrorCode> {
    let group = commit.group_id.clone();
    on_coordinator(shard, &group, move |owner, partition| async move {
        let plan = owner
            .groups
            .with(&owner, partition, |coordinator| {
                coordinator.commit_txn_offsets(now_ms(), &commit)
            })
            .await??;
        Ok(write_plan(&owner, partition, &commit.group_id, plan).await)
    })
    .await
}

/// Writes the plan's offsets as the producer's transactional batch and
/// reports the outcome to the coordinator: written offsets become pending
/// with their place in the log; on failure they are dropped and every
/// partition that was to be written answers the failure.
async fn write_plan(
    owner: &Rc<Shard>,
    partition: i32,
    group_id: &str,
    plan: TxnCommitPlan,
) -> Vec<ErrorCode> {
    if plan.offsets.is_empty() {
        return plan.errors;
    }
    let records = plan.records(group_id);
    let producer_id = plan.producer.producer_id;
    let written = write_records_placed(owner, partition, &records, Some(plan.producer)).await;
    match written {
        Ok(positions) => {
            let placed = plan
                .offsets
                .into_iter()
                .zip(positions)
                .map(|((partition, offset), position)| (partition, offset, position.0))
                .collect();
            // The batch is durable whatever happens to the partition now: a
            // coordinator that moved or reloaded reads it from the log.
            let _ = owner
                .groups
                .with(owner, partition, |coordinator| {
                    coordinator.txn_offsets_written(group_id, producer_id, placed)
                })
                .await;
            plan.errors
        }
        Err(error) => {
            let _ = owner
                .groups
                .with(owner, partition, |coordinator| {
                    coordinator.txn_offsets_failed(group_id, producer_id, &plan.offsets)
                })
                .await;
            plan.errors
                .into_iter()
                .map(|code| if code == ErrorCode::NONE { error } else { code })
                .collect()
        }
    }
}
