//! ListOffsets (earliest, latest, by timestamp, max timestamp),
//! OffsetForLeaderEpoch and DeleteRecords, each answered by the owning shard.

use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::types::{LeaderEpoch, Offset, PartitionId, TimestampMs, TopicPartition};
use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol::messages::{
    DeleteRecordsRequest, DeleteRecordsResponse, ListOffsetsRequest, ListOffsetsResponse,
    OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse,
};

use crate::server::handlers::fetch::epoch_error;
use crate::server::handlers::produce::storage_error_code;
use crate::server::handlers::topic_name;
use crate::server::replication::ReplicaHost;
use crate::server::response::{Response, encode};
use crate::server::shard::Shard;
use crate::storage::PartitionLog;

/// The `replica_id` of Kafka's debugging consumer, which may ask a
/// follower for offsets (ListOffsets, OffsetForLeaderEpoch).
const DEBUGGING_CONSUMER: i32 = -2;
/// The `replica_id` every consumer sends.
const CONSUMER: i32 = -1;

/// Whether a request for `topic_partition`'s offsets from `replica_id`
/// reached a broker that knows the partition but does not lead it: Kafka
/// answers those from the leader only (`fetchOnlyFromLeader`), since a
/// follower's log ends and starts elsewhere.
fn asks_a_follower(shard: &Shard, topic_partition: &TopicPartition, replica_id: i32) -> bool {
    let (topic, partition) = (&topic_partition.topic, topic_partition.partition);
    replica_id != DEBUGGING_CONSUMER
        && shard.with_registration(topic, partition, |_| ()).is_some()
        && !shard.leads(topic, partition)
}

/// ListOffsets' special timestamps.
const LATEST: i64 = -1;
const EARLIEST: i64 = -2;
const MAX_TIMESTAMP: i64 = -3;
const EARLIEST_LOCAL: i64 = -4;
const LATEST_TIERED: i64 = -5;

/// Runs `work` on the shard owning `topic_partition` with that shard and
/// the partition's log; NOT_LEADER_OR_FOLLOWER if this broker holds no
/// replica of it, UNKNOWN_TOPIC_OR_PARTITION if it does not exist
/// ([`LocalImage::not_here`]).
pub(crate) async fn on_owner<T: Send + 'static>(
    shard: &Rc<Shard>,
    topic_partition: TopicPartition,
    work: impl FnOnce(&Shard, PartitionLog) -> std::pin::Pin<Box<dyn std::future::Future<Output = T>>>
    + Send
    + 'static,
) -> Result<T, ErrorCode> {
    let image = shard.local_image();
    let missing = image.not_here(&topic_partition);
    let Some(owner) = image.owner(&topic_partition) else {
        return Err(missing);
    };
    let result = shard
        .on_shard(owner, move |owner| async move {
            match owner.log(&topic_partition) {
                Some(log) => Some(work(&owner, log).await),
                None => None,
            }
        })
        .await;
    result.ok().flatten().ok_or(missing)
}

/// Who asks a ListOffsets, which bounds the offsets it may be answered
/// (Kafka's `isolationLevel` in `Partition.fetchOffsetForTimestamp`).
#[derive(Clone, Copy)]
enum Reader {
    /// A consumer (`replica_id` -1): up to the HW, or the last stable
    /// offset for read_committed. While a new leader's HW is behind its
    /// epoch's start (KIP-207), `behind_epoch_start` is the error it gets
    /// instead of an offset at or past the HW.
    Consumer {
        committed: bool,
        behind_epoch_start: Option<ErrorCode>,
    },
    /// A broker or Kafka's debugging consumer: up to the log end.
    Replica,
}

/// The error a consumer's ListOffsets of `api_version` gets from a leader
/// whose HW is behind its epoch's start: Kafka answers versions before 5,
/// which predate OFFSET_NOT_AVAILABLE, with LEADER_NOT_AVAILABLE. Both are
/// retriable.
fn offset_not_available(api_version: i16) -> ErrorCode {
    if api_version >= 5 {
        ErrorCode::OFFSET_NOT_AVAILABLE
    } else {
        ErrorCode::LEADER_NOT_AVAILABLE
    }
}

/// (error, timestamp, offset) for one ListOffsets query at `timestamp`.
async fn list_offset(log: PartitionLog, timestamp: i64, reader: Reader) -> (ErrorCode, i64, i64) {
    let (last_fetchable, behind_epoch_start) = match reader {
        Reader::Consumer {
            committed,
            behind_epoch_start,
        } => {
            let high_watermark = log.high_watermark();
            let last = match committed {
                true => log.last_stable_offset(high_watermark),
                false => high_watermark,
            };
            (last, behind_epoch_start)
        }
        Reader::Replica => (log.log_end_offset(), None),
    };
    match timestamp {
        LATEST => match behind_epoch_start {
            Some(error) => (error, -1, -1),
            None => (ErrorCode::NONE, -1, last_fetchable.0),
        },
        EARLIEST | EARLIEST_LOCAL => (ErrorCode::NONE, -1, log.log_start_offset().0),
        LATEST_TIERED => (ErrorCode::NONE, -1, -1),
        MAX_TIMESTAMP | 0.. => {
            let target = match timestamp {
                MAX_TIMESTAMP => match log.max_timestamp() {
                    Some(max) => max,
                    None => return (ErrorCode::NONE, -1, -1),
                },
                target => TimestampMs(target),
            };
            match log.offset_for_timestamp(target).await {
                Ok(Some(stamp)) if stamp.offset < last_fetchable => {
                    (ErrorCode::NONE, stamp.timestamp.0, stamp.offset.0)
                }
                // At or past what the reader may see: none, or KIP-207's
                // error while that bound may be too low.
                Ok(Some(_)) => (behind_epoch_start.unwrap_or(ErrorCode::NONE), -1, -1),
                Ok(None) => (ErrorCode::NONE, -1, -1),
                Err(error) => (storage_error_code(&error), -1, -1),
            }
        }
        _ => (ErrorCode::INVALID_REQUEST, -1, -1),
    }
}

pub async fn list_offsets(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: ListOffsetsRequest = request.decode_body()?;
    let committed = body.isolation_level == 1;
    // Kafka's `isClientRequest`: only a consumer is bounded by the HW.
    let consumer = body.replica_id.0 == CONSUMER;
    let not_available = offset_not_available(request.api_version);
    let mut topics = Vec::with_capacity(body.topics.len());
    for topic in body.topics {
        let name = topic.name.to_string();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for partition in topic.partitions {
            let topic_partition = TopicPartition {
                topic: name.clone(),
                partition: PartitionId(partition.partition_index),
            };
            let served = shard.leader_epoch_of(&topic_partition);
            let follower = asks_a_follower(shard, &topic_partition, body.replica_id.0);
            let (error, timestamp, offset) =
                match epoch_error(partition.current_leader_epoch, served) {
                    Some(error) => (error, -1, -1),
                    None if follower => (ErrorCode::NOT_LEADER_OR_FOLLOWER, -1, -1),
                    None => {
                        let timestamp = partition.timestamp;
                        let asked = topic_partition.clone();
                        on_owner(shard, topic_partition, move |owner, log| {
                            let reader = match consumer {
                                true => Reader::Consumer {
                                    committed,
                                    behind_epoch_start: owner
                                        .replication
                                        .high_watermark_behind_epoch_start(&asked)
                                        .then_some(not_available),
                                },
                                false => Reader::Replica,
                            };
                            Box::pin(list_offset(log, timestamp, reader))
                        })
                        .await
                        .unwrap_or_else(|error| (error, -1, -1))
                    }
                };
            partitions.push(
                ListOffsetsPartitionResponse::default()
                    .with_partition_index(partition.partition_index)
                    .with_error_code(error.0)
                    .with_timestamp(timestamp)
                    .with_offset(offset)
                    // The field exists from v4 (the codec rejects it before).
                    .with_leader_epoch(if offset >= 0 && request.api_version >= 4 {
                        served.0
                    } else {
                        -1
                    }),
            );
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions),
        );
    }
    encode(request, &ListOffsetsResponse::default().with_topics(topics))
}

pub async fn offset_for_leader_epoch(
    shard: &Rc<Shard>,
    request: &Request,
) -> Result<Response, FrameError> {
    let body: OffsetForLeaderEpochRequest = request.decode_body()?;
    let mut topics = Vec::with_capacity(body.topics.len());
    for topic in body.topics {
        let name = topic.topic.to_string();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for partition in topic.partitions {
            let topic_partition = TopicPartition {
                topic: name.clone(),
                partition: PartitionId(partition.partition),
            };
            let served = shard.leader_epoch_of(&topic_partition);
            let follower = asks_a_follower(shard, &topic_partition, body.replica_id.0);
            let (error, epoch, end_offset) =
                match epoch_error(partition.current_leader_epoch, served) {
                    Some(error) => (error, -1, -1),
                    None if follower => (ErrorCode::NOT_LEADER_OR_FOLLOWER, -1, -1),
                    None => {
                        let requested = LeaderEpoch(partition.leader_epoch);
                        on_owner(shard, topic_partition, move |_, log| {
                            Box::pin(async move {
                                match log.epoch_end_offset(requested) {
                                    Some((epoch, end)) => (ErrorCode::NONE, epoch.0, end.0),
                                    None => (ErrorCode::NONE, -1, -1),
                                }
                            })
                        })
                        .await
                        .unwrap_or_else(|error| (error, -1, -1))
                    }
                };
            partitions.push(
                EpochEndOffset::default()
                    .with_partition(partition.partition)
                    .with_error_code(error.0)
                    .with_leader_epoch(epoch)
                    .with_end_offset(end_offset),
            );
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(topic_name(&name))
                .with_partitions(partitions),
        );
    }
    encode(
        request,
        &OffsetForLeaderEpochResponse::default().with_topics(topics),
    )
}

/// How often a DeleteRecords on a replicated partition looks again at the
/// followers' log starts.
const LOW_WATERMARK_RECHECK: Duration = Duration::from_millis(20);

/// DeleteRecords of one partition, on its owner: moves the log start to
/// `requested` (-1: the HW). Only the leader takes it (Kafka's
/// NOT_LEADER_OR_FOLLOWER elsewhere) and answers once every live replica's
/// log start reached it (Kafka's low watermark; REQUEST_TIMED_OUT after
/// `timeout`), so a failover never serves the deleted records again.
async fn delete_before(
    shard: &Rc<Shard>,
    topic_partition: &TopicPartition,
    log: &PartitionLog,
    requested: i64,
    timeout: Duration,
) -> (ErrorCode, i64) {
    let low_watermark = || ReplicaHost::low_watermark(shard, topic_partition, log);
    if let Err(error) = low_watermark() {
        return (error, -1);
    }
    let offset = match requested {
        -1 => log.high_watermark(),
        offset => Offset(offset),
    };
    let start = match log.delete_records_before(offset) {
        Ok(start) => start,
        Err(error) => return (storage_error_code(&error), -1),
    };
    let deadline = Instant::now() + timeout;
    loop {
        match low_watermark() {
            Ok(low) if low >= start => return (ErrorCode::NONE, low.0),
            Ok(_) if Instant::now() >= deadline => return (ErrorCode::REQUEST_TIMED_OUT, -1),
            Ok(_) => glommio::timer::sleep(LOW_WATERMARK_RECHECK).await,
            Err(error) => return (error, -1),
        }
    }
}

pub async fn delete_records(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: DeleteRecordsRequest = request.decode_body()?;
    let mut topics = Vec::with_capacity(body.topics.len());
    for topic in body.topics {
        let name = topic.name.to_string();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for partition in topic.partitions {
            let topic_partition = TopicPartition {
                topic: name.clone(),
                partition: PartitionId(partition.partition_index),
            };
            let requested = partition.offset;
            let image = shard.local_image();
            let missing = (image.not_here(&topic_partition), -1);
            let timeout = Duration::from_millis(body.timeout_ms.max(0) as u64);
            let owner = image.owner(&topic_partition);
            let deleted = match owner {
                None => None,
                Some(owner) => shard
                    .on_shard(owner, move |owner| async move {
                        let log = owner.log(&topic_partition)?;
                        Some(
                            delete_before(&owner, &topic_partition, &log, requested, timeout).await,
                        )
                    })
                    .await
                    .ok()
                    .flatten(),
            };
            let (error, low_watermark) = deleted.unwrap_or(missing);
            partitions.push(
                DeleteRecordsPartitionResult::default()
                    .with_partition_index(partition.partition_index)
                    .with_low_watermark(low_watermark)
                    .with_error_code(error.0),
            );
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic_name(&name))
                .with_partitions(partitions),
        );
    }
    encode(
        request,
        &DeleteRecordsResponse::default().with_topics(topics),
    )
}
