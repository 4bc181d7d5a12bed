//! The transactional producer's APIs: InitProducerId with a transactional
//! id, AddPartitionsToTxn (v0–3 from producers, v4+ batched with KIP-890's
//! verify-only form), AddOffsetsToTxn, EndTxn, the admin APIs
//! DescribeTransactions and ListTransactions, and the inter-broker
//! WriteTxnMarkers. Each goes to the shard hosting
//! the id's coordinator ([`crate::server::transactions`]), which decides;
//! errors are rewritten for older versions as Kafka's `KafkaApis` does
//! (PRODUCER_FENCED → INVALID_PRODUCER_EPOCH, KIP-588).

use std::rc::Rc;

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::replica::producer_state::ProducerEpoch;
use brook_engine::txn::coordinator::{
    AddOffsetsRequest, AddPartitionsRequest, EndTxnRequest, InitProducerIdRequest as InitRequest,
};
use brook_engine::txn::{
    FencingApi, InitProducerIdResult, ListFilters, MarkerWrite, Response as TxnResponse,
    TransactionResult, TransactionalIdPattern,
};
use brook_engine::types::{PartitionId, ProducerId, TopicPartition};
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, DescribeTransactionsRequest, DescribeTransactionsResponse,
    EndTxnRequest as EndTxnBody, EndTxnResponse, InitProducerIdRequest, ListTransactionsRequest,
    ListTransactionsResponse, WriteTxnMarkersRequest, WriteTxnMarkersResponse,
    describe_transactions_response, list_transactions_response, write_txn_markers_response,
};

use crate::server::groups::{ensure_offsets_topic, locate as locate_group};
use crate::server::handlers::producers::allocate_producer_id;
use crate::server::handlers::{text, topic_name};
use crate::server::response::{Response, encode};
use crate::server::shard::{Shard, now_ms};
use crate::server::transactions::{self, PartitionsAnswer, request as coordinator_request};

/// InitProducerId for a transactional producer.
pub async fn init_transactional(
    shard: &Rc<Shard>,
    request: &Request,
    body: &InitProducerIdRequest,
    transactional_id: String,
) -> Result<Response, FrameError> {
    let expected = (body.producer_id.0 >= 0).then_some((
        ProducerId(body.producer_id.0),
        ProducerEpoch(body.producer_epoch),
    ));
    let init = InitRequest {
        transactional_id: transactional_id.clone(),
        transaction_timeout_ms: body.transaction_timeout_ms,
        expected,
    };
    // The coordinator allocates synchronously; a fresh id is fetched first
    // (ids are plentiful; an unused one is skipped).
    let result = match allocate_producer_id(shard).await {
        Err(error) => InitProducerIdResult::failed(error),
        Ok(spare) => {
            let answer =
                coordinator_request(shard, &transactional_id, move |coordinator, token| {
                    let mut spare = Some(spare);
                    let mut allocate = || spare.take().ok_or(ErrorCode::COORDINATOR_NOT_AVAILABLE);
                    coordinator.init_producer_id(now_ms(), token, &init, &mut allocate)
                })
                .await;
            match answer {
                Ok(TxnResponse::InitProducerId(result)) => result,
                Ok(_) => InitProducerIdResult::failed(ErrorCode::UNKNOWN_SERVER_ERROR),
                Err(error) => InitProducerIdResult::failed(error),
            }
        }
    };
    let error = FencingApi::InitProducerId.error_for_version(request.api_version, result.error);
    let response = kafka_protocol::messages::InitProducerIdResponse::default()
        .with_error_code(error.0)
        .with_producer_id(result.producer_id.0.into())
        .with_producer_epoch(result.producer_epoch.0);
    encode(request, &response)
}

fn partitions_of(topics: &[AddPartitionsToTxnTopic]) -> Vec<TopicPartition> {
    topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|partition| TopicPartition {
                topic: topic.name.to_string(),
                partition: PartitionId(*partition),
            })
        })
        .collect()
}

/// Per topic, each partition's code, in request order.
fn topic_results(
    topics: &[AddPartitionsToTxnTopic],
    code_of: impl Fn(&TopicPartition) -> ErrorCode,
) -> Vec<AddPartitionsToTxnTopicResult> {
    topics
        .iter()
        .map(|topic| {
            let name = topic.name.to_string();
            AddPartitionsToTxnTopicResult::default()
                .with_name(topic_name(&name))
                .with_results_by_partition(
                    topic
                        .partitions
                        .iter()
                        .map(|partition| {
                            let code = code_of(&TopicPartition {
                                topic: name.clone(),
                                partition: PartitionId(*partition),
                            });
                            AddPartitionsToTxnPartitionResult::default()
                                .with_partition_index(*partition)
                                .with_partition_error_code(code.0)
                        })
                        .collect(),
                )
        })
        .collect()
}

/// Partitions that do not exist get UNKNOWN_TOPIC_OR_PARTITION and the
/// others OPERATION_NOT_ATTEMPTED, as Kafka answers before asking the
/// coordinator.
fn missing_partitions(shard: &Shard, partitions: &[TopicPartition]) -> bool {
    let image = shard.local_image();
    partitions
        .iter()
        .any(|partition| !image.has_partition(partition))
}

/// One transaction's AddPartitionsToTxn, decided by its coordinator.
async fn add_partitions(
    shard: &Rc<Shard>,
    request: AddPartitionsRequest,
    verify_only: bool,
    version: i16,
    topics: &[AddPartitionsToTxnTopic],
) -> Vec<AddPartitionsToTxnTopicResult> {
    if missing_partitions(shard, &request.partitions) {
        let image = shard.local_image();
        return topic_results(topics, |partition| {
            if !image.has_partition(partition) {
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
            } else {
                OPERATION_NOT_ATTEMPTED
            }
        });
    }
    let fenced = |error| FencingApi::AddPartitionsToTxn.error_for_version(version, error);
    match transactions::add_partitions(shard, request, verify_only).await {
        Ok(PartitionsAnswer::All(error)) => topic_results(topics, |_| fenced(error)),
        Ok(answer) => topic_results(topics, |partition| answer.code_of(partition)),
        Err(error) => topic_results(topics, |_| error),
    }
}

/// Kafka's OPERATION_NOT_ATTEMPTED (55).
const OPERATION_NOT_ATTEMPTED: ErrorCode = ErrorCode(55);

pub async fn add_partitions_to_txn(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: AddPartitionsToTxnRequest = request.decode_body()?;
    let version = request.api_version;
    if version <= 3 {
        let add = AddPartitionsRequest {
            transactional_id: body.v3_and_below_transactional_id.to_string(),
            producer_id: ProducerId(body.v3_and_below_producer_id.0),
            producer_epoch: ProducerEpoch(body.v3_and_below_producer_epoch),
            partitions: partitions_of(&body.v3_and_below_topics),
        };
        let results = add_partitions(shard, add, false, version, &body.v3_and_below_topics).await;
        let response =
            AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(results);
        return encode(request, &response);
    }
    let mut results = Vec::with_capacity(body.transactions.len());
    for transaction in &body.transactions {
        let add = AddPartitionsRequest {
            transactional_id: transaction.transactional_id.to_string(),
            producer_id: ProducerId(transaction.producer_id.0),
            producer_epoch: ProducerEpoch(transaction.producer_epoch),
            partitions: partitions_of(&transaction.topics),
        };
        let topics = add_partitions(
            shard,
            add,
            transaction.verify_only,
            version,
            &transaction.topics,
        )
        .await;
        results.push(
            AddPartitionsToTxnResult::default()
                .with_transactional_id(transaction.transactional_id.clone())
                .with_topic_results(topics),
        );
    }
    let response = AddPartitionsToTxnResponse::default().with_results_by_transaction(results);
    encode(request, &response)
}

pub async fn add_offsets_to_txn(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: AddOffsetsToTxnRequest = request.decode_body()?;
    let transactional_id = body.transactional_id.to_string();
    let offsets_partition = match ensure_offsets_topic(shard).await {
        Ok(()) => locate_group(shard, &body.group_id).map(|(partition, _)| partition),
        Err(error) => Err(error),
    };
    let error = match offsets_partition {
        Err(error) => error,
        Ok(offsets_partition) => {
            let add = AddOffsetsRequest {
                transactional_id: transactional_id.clone(),
                producer_id: ProducerId(body.producer_id.0),
                producer_epoch: ProducerEpoch(body.producer_epoch),
                offsets_partition,
            };
            match coordinator_request(shard, &transactional_id, move |coordinator, token| {
                coordinator.add_offsets(now_ms(), token, &add)
            })
            .await
            {
                Ok(TxnResponse::AddOffsets(error)) => error,
                Ok(_) => ErrorCode::UNKNOWN_SERVER_ERROR,
                Err(error) => error,
            }
        }
    };
    let error = FencingApi::AddOffsetsToTxn.error_for_version(request.api_version, error);
    encode(
        request,
        &AddOffsetsToTxnResponse::default().with_error_code(error.0),
    )
}

pub async fn end_txn(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: EndTxnBody = request.decode_body()?;
    let transactional_id = body.transactional_id.to_string();
    let end = EndTxnRequest {
        transactional_id: transactional_id.clone(),
        producer_id: ProducerId(body.producer_id.0),
        producer_epoch: ProducerEpoch(body.producer_epoch),
        result: if body.committed {
            TransactionResult::Commit
        } else {
            TransactionResult::Abort
        },
    };
    let error = match coordinator_request(shard, &transactional_id, move |coordinator, token| {
        coordinator.end_txn(now_ms(), token, &end)
    })
    .await
    {
        Ok(TxnResponse::EndTxn(error)) => error,
        Ok(_) => ErrorCode::UNKNOWN_SERVER_ERROR,
        Err(error) => error,
    };
    let error = FencingApi::EndTxn.error_for_version(request.api_version, error);
    let response = EndTxnResponse::default()
        .with_error_code(error.0)
        .with_producer_id((-1).into())
        .with_producer_epoch(-1);
    encode(request, &response)
}

pub async fn describe_transactions(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: DescribeTransactionsRequest = request.decode_body()?;
    let mut states = Vec::with_capacity(body.transactional_ids.len());
    for transactional_id in &body.transactional_ids {
        let id = transactional_id.to_string();
        let described = match transactions::locate(shard, &id) {
            Err(error) => Err(error),
            Ok((partition, owner)) => {
                let lookup = id.clone();
                shard
                    .on_shard(owner, move |owner| async move {
                        owner
                            .transactions
                            .with(&owner, partition, |coordinator| {
                                coordinator.describe(&lookup)
                            })
                            .await
                    })
                    .await
                    .unwrap_or(Err(ErrorCode::COORDINATOR_NOT_AVAILABLE))
            }
        };
        let state = describe_transactions_response::TransactionState::default()
            .with_transactional_id(transactional_id.clone());
        states.push(match described {
            Err(error) => state
                .with_error_code(error.0)
                .with_producer_id((-1).into())
                .with_producer_epoch(-1),
            Ok(description) => state
                .with_error_code(description.error.0)
                .with_transaction_state(text(description.state))
                .with_transaction_timeout_ms(description.timeout_ms)
                .with_transaction_start_time_ms(description.start_timestamp_ms)
                .with_producer_id(description.producer_id.0.into())
                .with_producer_epoch(description.producer_epoch.0)
                .with_topics(
                    description
                        .topics
                        .iter()
                        .map(|(topic, partitions)| {
                            describe_transactions_response::TopicData::default()
                                .with_topic(topic_name(topic))
                                .with_partitions(partitions.clone())
                        })
                        .collect(),
                ),
        });
    }
    encode(
        request,
        &DescribeTransactionsResponse::default().with_transaction_states(states),
    )
}

pub async fn list_transactions(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: ListTransactionsRequest = request.decode_body()?;
    let pattern = match body.transactional_id_pattern.as_deref() {
        Some(pattern) if !pattern.is_empty() => match TransactionalIdPattern::new(pattern) {
            Ok(pattern) => Some(pattern),
            Err(error) => {
                let response = ListTransactionsResponse::default().with_error_code(error.0);
                return encode(request, &response);
            }
        },
        _ => None,
    };
    let filters = ListFilters {
        states: body.state_filters.iter().map(ToString::to_string).collect(),
        producer_ids: body
            .producer_id_filters
            .iter()
            .map(|id| ProducerId(id.0))
            .collect(),
        duration_ms: body.duration_filter,
        pattern,
    };
    let now = now_ms();
    let mut unknown = None;
    let mut listed = Vec::new();
    for owner in shard.context.shard_ids() {
        let filters = filters.clone();
        let lists = shard
            .on_shard(owner, move |owner| async move {
                owner
                    .transactions
                    .each_loaded(|coordinator| coordinator.list(now, &filters))
            })
            .await
            .unwrap_or_default();
        for list in lists {
            unknown.get_or_insert(list.unknown_state_filters);
            listed.extend(list.transactions);
        }
    }
    let response = ListTransactionsResponse::default()
        .with_unknown_state_filters(
            unknown
                .unwrap_or_default()
                .iter()
                .map(|name| text(name))
                .collect(),
        )
        .with_transaction_states(
            listed
                .into_iter()
                .map(|listing| {
                    list_transactions_response::TransactionState::default()
                        .with_transactional_id(text(&listing.transactional_id).into())
                        .with_producer_id(listing.producer_id.0.into())
                        .with_transaction_state(text(listing.state.name()))
                })
                .collect(),
        );
    encode(request, &response)
}

/// WriteTxnMarkers (Kafka's inter-broker API; v1, as Kafka 4 serves it):
/// the COMMIT or ABORT marker of each entry appended to each partition on
/// its owner shard, once, with each partition's error. Brook's own
/// coordinator writes its markers without this request (over the mesh).
pub async fn write_txn_markers(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: WriteTxnMarkersRequest = request.decode_body()?;
    let mut results = Vec::with_capacity(body.markers.len());
    for marker in &body.markers {
        let write = MarkerWrite {
            transactional_id: String::new(),
            producer_id: ProducerId(marker.producer_id.0),
            producer_epoch: ProducerEpoch(marker.producer_epoch),
            coordinator_epoch: marker.coordinator_epoch,
            result: if marker.transaction_result {
                TransactionResult::Commit
            } else {
                TransactionResult::Abort
            },
            partitions: Vec::new(),
        };
        let mut topics = Vec::with_capacity(marker.topics.len());
        for topic in &marker.topics {
            let name = topic.name.to_string();
            let mut partitions = Vec::with_capacity(topic.partition_indexes.len());
            for index in &topic.partition_indexes {
                let topic_partition = TopicPartition {
                    topic: name.clone(),
                    partition: PartitionId(*index),
                };
                let written =
                    transactions::write_marker_here(shard, &write, &topic_partition).await;
                partitions.push(
                    write_txn_markers_response::WritableTxnMarkerPartitionResult::default()
                        .with_partition_index(*index)
                        .with_error_code(written.err().unwrap_or(ErrorCode::NONE).0),
                );
            }
            topics.push(
                write_txn_markers_response::WritableTxnMarkerTopicResult::default()
                    .with_name(topic_name(&name))
                    .with_partitions(partitions),
            );
        }
        results.push(
            write_txn_markers_response::WritableTxnMarkerResult::default()
                .with_producer_id(marker.producer_id)
                .with_topics(topics),
        );
    }
    encode(
        request,
        &WriteTxnMarkersResponse::default().with_markers(results),
    )
}
