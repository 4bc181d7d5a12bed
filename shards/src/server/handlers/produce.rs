//! Produce: each partition's record bytes (a slice of the request frame,
//! never copied here) go to the partition's owning shard, which validates
//! and appends them (the one copy, into the DMA tail) and answers once the
//! acks level is met: acks=0 not at all; acks=1 once the leader holds the
//! record (with the default flush policy, once fsynced; on one replica that
//! is also the high watermark, so the producer reads its write), before its
//! followers do, as Kafka's leader answers; acks=all once fsynced and every
//! in-sync replica holds it.

use std::rc::Rc;
use std::time::Duration;

use brook_engine::cluster::image::TopicId;
use brook_engine::log::batch::{BatchError, BatchHeader};
use brook_engine::log::client_batch::{RecordError, Rejected, Validated, validate_client_records};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::Request;
use brook_engine::types::{PartitionId, TopicPartition};
use bytes::Bytes;
use futures::FutureExt;
use futures::future::{LocalBoxFuture, join_all, ready};
use kafka_protocol::messages::produce_response::{
    BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};

use crate::server::handlers::cluster::ensure_topics;
use crate::server::handlers::{text, topic_name};
use crate::server::mesh::ShardGone;
use crate::server::replication::ReplicaHost;
use crate::server::response::{Response, encode};
use crate::server::shard::{Shard, now_ms};
use crate::server::transactions;
use crate::storage::{PartitionLog, StorageError};
use brook_engine::replica::producer_state::{
    BatchKind, ProducerBatch, ProducerOfBatch, VerificationGuard, produce_error_for_verification,
};
use brook_engine::txn::coordinator::AddPartitionsRequest;

/// One partition's result.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Produced {
    error: ErrorCode,
    message: Option<String>,
    base_offset: i64,
    log_append_time: i64,
    log_start_offset: i64,
    /// The records that made the batch invalid (Produce v8+).
    record_errors: Vec<RecordError>,
}

impl Produced {
    fn failed(error: ErrorCode, message: impl Into<String>) -> Produced {
        Produced {
            error,
            message: Some(message.into()),
            base_offset: -1,
            log_append_time: -1,
            log_start_offset: -1,
            record_errors: Vec::new(),
        }
    }

    /// A batch refused for some of its records, which it names.
    fn rejected(rejected: Rejected) -> Produced {
        Produced {
            record_errors: rejected.record_errors,
            ..Produced::failed(rejected.error, rejected.message)
        }
    }
}

/// Kafka's code for a storage failure.
pub(crate) fn storage_error_code(error: &StorageError) -> ErrorCode {
    match error {
        StorageError::InvalidBatch(BatchError::UnsupportedMagic(magic)) if *magic < 2 => {
            ErrorCode::INVALID_RECORD
        }
        StorageError::InvalidBatch(
            BatchError::RecordCountMismatch { .. } | BatchError::OffsetOverflow { .. },
        ) => ErrorCode::INVALID_RECORD,
        StorageError::RecordWithoutKey { .. }
        | StorageError::InvalidRecords(_)
        | StorageError::ProducerBatchNotAlone { .. }
        | StorageError::ControlBatchMisplaced
        | StorageError::UnexpectedAppendOffset { .. } => ErrorCode::INVALID_RECORD,
        StorageError::Producer(error) => error.error_code(),
        StorageError::Marker(error) => error.error_code(),
        StorageError::InvalidBatch(_) | StorageError::EmptyAppend => ErrorCode::CORRUPT_MESSAGE,
        StorageError::BatchTooLarge { .. } => ErrorCode::MESSAGE_TOO_LARGE,
        StorageError::OffsetOutOfRange { .. } => ErrorCode::OFFSET_OUT_OF_RANGE,
        StorageError::StaleLeaderEpoch { .. } => ErrorCode::FENCED_LEADER_EPOCH,
        StorageError::Closed { .. } => ErrorCode::NOT_LEADER_OR_FOLLOWER,
        StorageError::Io { .. } | StorageError::Offline { .. } | StorageError::Corrupt { .. } => {
            ErrorCode::KAFKA_STORAGE_ERROR
        }
    }
}

/// Kafka rejects client batches whose base offset is not 0 and control
/// batches from clients (`LogValidator`).
fn check_client_batches(records: &[u8]) -> Result<(), String> {
    let mut rest = records;
    while rest.len() >= brook_engine::log::batch::BATCH_HEADER_BYTES {
        let Ok(header) = BatchHeader::parse(rest) else {
            return Ok(());
        };
        if header.base_offset.get() != 0 {
            return Err(format!(
                "batch base offset {} is not 0",
                header.base_offset.get()
            ));
        }
        if header.attributes.get() & 0x20 != 0 {
            return Err("clients may not produce control batches".into());
        }
        rest = &rest[header.size_bytes().min(rest.len())..];
    }
    Ok(())
}

/// What a Produce says about its partitions' appends.
#[derive(Clone, Debug)]
struct ProduceContext {
    acks: i16,
    timeout: Duration,
    transactional_id: Option<String>,
    version: i16,
}

async fn append_on_owner(
    shard: Rc<Shard>,
    topic_partition: TopicPartition,
    records: Bytes,
    context: ProduceContext,
) -> Produced {
    let Some(log) = shard.log(&topic_partition) else {
        return Produced::failed(
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            "the partition is not open here",
        );
    };
    // Kafka's LogValidator: keys of compacted topics, timestamp bounds,
    // the topic's codec (the batch bytes are kept unless it differs).
    let records = match validate_client_records(&records, &log.config(), &topic_partition, now_ms())
    {
        Ok(Validated::AsProduced) => records,
        Ok(Validated::Rewritten(bytes)) => Bytes::from(bytes),
        Err(rejected) => return Produced::rejected(rejected),
    };
    let (acks, timeout) = (context.acks, context.timeout);
    if let Err(error) = shard
        .replication
        .check_produce(&topic_partition, acks == -1)
    {
        return Produced::failed(error, "the partition's in-sync replicas do not allow it");
    }
    let leader_epoch = shard.leader_epoch_of(&topic_partition);
    let appended = match transactional_batch(&records) {
        None => log.append(&records, leader_epoch, now_ms()).await,
        Some(batch) => {
            // Appends keep their request order while one waits for its
            // verification (a later batch of the same transaction would
            // otherwise overtake it).
            let _order = log.transactional_order().await;
            match verify(&shard, &log, &topic_partition, &batch, &context).await {
                Ok(guard) => {
                    log.append_verified(&records, guard, leader_epoch, now_ms())
                        .await
                }
                Err(error) => {
                    return Produced::failed(
                        error,
                        "the transaction coordinator did not verify the partition",
                    );
                }
            }
        }
    };
    let info = match appended {
        Ok(info) => info,
        Err(StorageError::RecordWithoutKey { record_index }) => {
            // Kafka's words (LogValidator.validateKey), which clients show.
            let message = format!(
                "Compacted topic cannot accept message without key in topic partition {topic_partition}."
            );
            let record_errors = vec![RecordError {
                batch_index: record_index as i32,
                message: message.clone(),
            }];
            return Produced {
                record_errors,
                ..Produced::failed(ErrorCode::INVALID_RECORD, message)
            };
        }
        Err(error) => return Produced::failed(storage_error_code(&error), error.to_string()),
    };
    if !info.duplicate {
        let records_count = (info.last_offset.0 - info.base_offset.0 + 1).max(0) as u64;
        shard
            .metrics
            .produced(&topic_partition.topic, records.len(), records_count);
    }
    let started = std::time::Instant::now();
    let mut waited = match acks {
        0 => Ok(Ok(())),
        // acks=1: once the leader holds the record (durable, or written
        // under `flush.*`). On one broker that is the high watermark too
        // (Kafka moves it before it answers), so the producer reads its
        // write.
        1 => with_timeout(timeout, log.wait_counted(info.log_end_offset)).await,
        _ => with_timeout(timeout, log.wait_durable(info.log_end_offset)).await,
    };
    if shard.replication.is_replicated(&topic_partition) {
        ReplicaHost::log_moved(&shard, &topic_partition, &log);
        // acks=all: once every in-sync replica holds it (the HW passed it).
        if acks == -1 && matches!(waited, Ok(Ok(()))) {
            let left = timeout.saturating_sub(started.elapsed());
            let end = info.log_end_offset;
            let code = ReplicaHost::wait_acks(&shard, &topic_partition, &log, end, left).await;
            if code == ErrorCode::REQUEST_TIMED_OUT {
                waited = Err(());
            } else if code.is_error() {
                return Produced::failed(code, "the record was not replicated to enough replicas");
            }
        }
    }
    match waited {
        Ok(Ok(())) => Produced {
            error: ErrorCode::NONE,
            message: None,
            base_offset: info.base_offset.0,
            log_append_time: info.log_append_time.map_or(-1, |time| time.0),
            log_start_offset: log.log_start_offset().0,
            record_errors: Vec::new(),
        },
        Ok(Err(error)) => Produced::failed(storage_error_code(&error), error.to_string()),
        Err(()) => Produced::failed(
            ErrorCode::REQUEST_TIMED_OUT,
            "timed out waiting for the acks level",
        ),
    }
}

/// The producer of a transactional batch (a client sends one batch per
/// partition; the append refuses more beside a producer's batch).
fn transactional_batch(records: &[u8]) -> Option<ProducerBatch> {
    let header = BatchHeader::parse(records).ok()?;
    match ProducerOfBatch::read(header) {
        ProducerOfBatch::Data(batch) if batch.kind == BatchKind::Transactional => Some(batch),
        _ => None,
    }
}

/// KIP-890 part 1: before the first transactional batch of a producer's
/// transaction is appended here, the coordinator confirms that the
/// partition is in that transaction (`AddPartitionsToTxn` verify-only);
/// returns the guard to append with. Without a transactional id nothing can
/// be verified: the append then succeeds only inside an open transaction.
async fn verify(
    shard: &Rc<Shard>,
    log: &PartitionLog,
    topic_partition: &TopicPartition,
    batch: &ProducerBatch,
    context: &ProduceContext,
) -> Result<VerificationGuard, ErrorCode> {
    let guard = log
        .start_verification(batch, now_ms())
        .map_err(|error| storage_error_code(&error))?;
    let Some(transactional_id) = context.transactional_id.clone() else {
        return Ok(VerificationGuard::SENTINEL);
    };
    if guard == VerificationGuard::SENTINEL {
        return Ok(guard);
    }
    let request = AddPartitionsRequest {
        transactional_id: transactional_id.clone(),
        producer_id: batch.producer_id,
        producer_epoch: batch.producer_epoch,
        partitions: vec![topic_partition.clone()],
    };
    let code = match transactions::verify_partitions(shard, request).await {
        Ok(answer) => answer.code_of(topic_partition),
        Err(error) => error,
    };
    if code.is_error() {
        return Err(produce_error_for_verification(code, context.version));
    }
    Ok(guard)
}

/// Runs `future` for at most `timeout`.
pub(crate) async fn with_timeout<T>(
    timeout: Duration,
    future: impl std::future::Future<Output = T>,
) -> Result<T, ()> {
    let future = std::pin::pin!(future);
    let timer = std::pin::pin!(glommio::timer::sleep(timeout));
    match futures::future::select(future, timer).await {
        futures::future::Either::Left((value, _)) => Ok(value),
        futures::future::Either::Right(_) => Err(()),
    }
}

/// Starts one partition's append on its owner; the result comes later.
async fn start_partition(
    shard: &Rc<Shard>,
    topic_partition: TopicPartition,
    records: Option<Bytes>,
    context: ProduceContext,
) -> LocalBoxFuture<'static, Produced> {
    let refused = |error, message: String| ready(Produced::failed(error, message)).boxed_local();
    let Some(records) = records.filter(|records| !records.is_empty()) else {
        return refused(ErrorCode::CORRUPT_MESSAGE, "no records".into());
    };
    if let Err(message) = check_client_batches(&records) {
        return refused(ErrorCode::INVALID_RECORD, message);
    }
    let image = shard.local_image();
    let Some(owner) = image.owner(&topic_partition) else {
        let error = image.not_here(&topic_partition);
        return refused(error, format!("{topic_partition} is not here"));
    };
    if !shard.leads(&topic_partition.topic, topic_partition.partition) {
        return refused(
            ErrorCode::NOT_LEADER_OR_FOLLOWER,
            format!("this broker does not lead {topic_partition}"),
        );
    }
    let started = shard
        .start_on_shard(owner, move |owner| {
            append_on_owner(owner, topic_partition, records, context)
        })
        .await;
    let gone =
        |gone: ShardGone| Produced::failed(ErrorCode::UNKNOWN_SERVER_ERROR, gone.to_string());
    match started {
        Ok(produced) => async move { produced.await.unwrap_or_else(gone) }.boxed_local(),
        Err(error) => ready(gone(error)).boxed_local(),
    }
}

/// Starts every append of a Produce, in request order, before it returns
/// (so the next request on the connection appends after this one); the
/// future it gives answers once every partition met the acks level.
pub async fn start(shard: &Rc<Shard>, request: Request) -> LocalBoxFuture<'static, Response> {
    let body: ProduceRequest = match request.decode_body() {
        Ok(body) => body,
        Err(error) => return ready(Response::Close(error.to_string())).boxed_local(),
    };
    let timeout = Duration::from_millis(body.timeout_ms.max(0) as u64);
    let acks = body.acks;
    let context = ProduceContext {
        acks,
        timeout,
        transactional_id: body.transactional_id.as_ref().map(|id| id.to_string()),
        version: request.api_version,
    };
    let acks_valid = matches!(acks, -1..=1);
    // v13 names topics by id (KIP-516), which no auto-creation can make.
    let by_id = request.api_version >= 13;
    if acks_valid && !by_id {
        let names: Vec<String> = body
            .topic_data
            .iter()
            .map(|topic| topic.name.to_string())
            .collect();
        ensure_topics(shard, &names).await;
    }
    let image = shard.local_image();
    let mut topics = Vec::with_capacity(body.topic_data.len());
    for topic in body.topic_data {
        let known = if by_id {
            image
                .topic_by_id(TopicId(*topic.topic_id.as_bytes()))
                .map(|known| known.name.clone())
        } else {
            Some(topic.name.to_string())
        };
        let name = known.clone().unwrap_or_default();
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for partition in topic.partition_data {
            let produced = if known.is_none() {
                ready(Produced::failed(
                    ErrorCode::UNKNOWN_TOPIC_ID,
                    format!("no topic with id {}", topic.topic_id),
                ))
                .boxed_local()
            } else if acks_valid {
                let topic_partition = TopicPartition {
                    topic: name.clone(),
                    partition: PartitionId(partition.index),
                };
                start_partition(shard, topic_partition, partition.records, context.clone()).await
            } else {
                ready(Produced::failed(
                    ErrorCode::INVALID_REQUIRED_ACKS,
                    format!("acks must be -1, 0 or 1, not {acks}"),
                ))
                .boxed_local()
            };
            partitions.push((partition.index, produced));
        }
        topics.push((name, topic.topic_id, partitions));
    }
    async move {
        let mut responses = Vec::with_capacity(topics.len());
        for (name, topic_id, partitions) in topics {
            let (indexes, produced): (Vec<i32>, Vec<_>) = partitions.into_iter().unzip();
            let partition_responses = indexes
                .into_iter()
                .zip(join_all(produced).await)
                .map(|(index, produced)| partition_response(index, produced))
                .collect();
            responses.push(
                TopicProduceResponse::default()
                    .with_name(topic_name(&name))
                    .with_topic_id(topic_id)
                    .with_partition_responses(partition_responses),
            );
        }
        if acks == 0 {
            return Response::Nothing;
        }
        encode(
            &request,
            &ProduceResponse::default().with_responses(responses),
        )
        .unwrap_or_else(|error| Response::Close(error.to_string()))
    }
    .boxed_local()
}

fn partition_response(index: i32, produced: Produced) -> PartitionProduceResponse {
    let record_errors = produced
        .record_errors
        .iter()
        .map(|error| {
            BatchIndexAndErrorMessage::default()
                .with_batch_index(error.batch_index)
                .with_batch_index_error_message(Some(text(&error.message)))
        })
        .collect();
    PartitionProduceResponse::default()
        .with_index(index)
        .with_error_code(produced.error.0)
        .with_base_offset(produced.base_offset)
        .with_log_append_time_ms(produced.log_append_time)
        .with_log_start_offset(produced.log_start_offset)
        .with_record_errors(record_errors)
        .with_error_message(produced.message.as_deref().map(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
    use brook_engine::types::TimestampMs;

    #[test]
    fn client_batches_must_start_at_offset_zero_and_not_be_control() {
        let batch = encode_batch(
            &[NewRecord::value("x", TimestampMs(1))],
            &BatchOptions::default(),
        );
        assert_eq!(check_client_batches(&batch), Ok(()));
        let mut moved = batch.clone();
        moved[7] = 5;
        assert!(check_client_batches(&moved).is_err());
        let mut control = batch.clone();
        control[22] |= 0x20;
        assert!(check_client_batches(&control).is_err());
    }
}
