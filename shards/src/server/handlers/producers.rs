//! InitProducerId and DescribeProducers. For idempotent producers (no transactional id): a new
//! producer id from the controller shard's allocator, epoch 0, as Kafka's
//! `TransactionCoordinator.handleInitProducerId` answers a null
//! transactional id (it ignores any producer id and epoch the request
//! carries, KIP-360's bump being for transactional producers). With a
//! transactional id, the id's coordinator decides (see
//! [`super::transactions`]). DescribeProducers lists the producer state of
//! each partition asked for, read on the partition's shard.

use std::rc::Rc;

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::types::{PartitionId, ProducerId, TopicPartition};
use kafka_protocol::messages::describe_producers_response::{
    PartitionResponse, ProducerState, TopicResponse,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, InitProducerIdRequest,
    InitProducerIdResponse,
};

use crate::server::handlers::offsets::on_owner;
use crate::server::handlers::topic_name;
use crate::server::response::{Response, encode};
use crate::server::shard::Shard;
use crate::storage::ActiveProducer;

pub async fn init_producer_id(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: InitProducerIdRequest = request.decode_body()?;
    let allocated = match body.transactional_id.as_deref().map(|id| id.as_str()) {
        None => allocate_producer_id(shard).await,
        // Kafka refuses an empty transactional id as malformed.
        Some("") => Err(ErrorCode::INVALID_REQUEST),
        Some(id) => {
            let id = id.to_owned();
            return super::transactions::init_transactional(shard, request, &body, id).await;
        }
    };
    let response = match allocated {
        Ok(producer_id) => InitProducerIdResponse::default()
            .with_producer_id(producer_id.0.into())
            .with_producer_epoch(0),
        Err(error) => InitProducerIdResponse::default()
            .with_error_code(error.0)
            .with_producer_id((-1).into())
            .with_producer_epoch(-1),
    };
    encode(request, &response)
}

/// A fresh producer id from the controller shard.
pub(crate) async fn allocate_producer_id(shard: &Rc<Shard>) -> Result<ProducerId, ErrorCode> {
    let controller = shard.context.controller_shard();
    shard
        .on_shard(controller, |controller| async move {
            controller.producer_ids.allocate(&controller).await
        })
        .await
        .unwrap_or(Err(ErrorCode::COORDINATOR_NOT_AVAILABLE))
}

/// DescribeProducers (KIP-664): each partition's producer ids with their
/// epoch, last sequence and timestamp, coordinator epoch and open
/// transaction's first offset (-1 for none), as Kafka's
/// `ReplicaManager.activeProducerState` answers; an unknown partition is
/// UNKNOWN_TOPIC_OR_PARTITION.
pub async fn describe_producers(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: DescribeProducersRequest = request.decode_body()?;
    let mut topics = Vec::with_capacity(body.topics.len());
    for topic in body.topics {
        let name = topic.name.to_string();
        let mut partitions = Vec::with_capacity(topic.partition_indexes.len());
        for partition_index in topic.partition_indexes {
            let topic_partition = TopicPartition {
                topic: name.clone(),
                partition: PartitionId(partition_index),
            };
            let active = on_owner(shard, topic_partition, |_, log| {
                Box::pin(async move { log.active_producers() })
            })
            .await;
            let response = PartitionResponse::default().with_partition_index(partition_index);
            partitions.push(match active {
                Ok(active) => {
                    response.with_active_producers(active.iter().map(producer_state).collect())
                }
                Err(error) => response.with_error_code(error.0),
            });
        }
        topics.push(
            TopicResponse::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions),
        );
    }
    encode(
        request,
        &DescribeProducersResponse::default().with_topics(topics),
    )
}

fn producer_state(active: &ActiveProducer) -> ProducerState {
    ProducerState::default()
        .with_producer_id(active.producer_id.0.into())
        .with_producer_epoch(i32::from(active.producer_epoch.0))
        .with_last_sequence(active.last_sequence)
        .with_last_timestamp(active.last_timestamp.0)
        .with_coordinator_epoch(active.coordinator_epoch)
        .with_current_txn_start_offset(
            active
                .current_transaction_first_offset
                .map_or(-1, |offset| offset.0),
        )
}
