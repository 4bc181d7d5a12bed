//! Fetch: whole batches from each partition's owning shard, up to the high
//! watermark (what a crash cannot take back), within the response and
//! partition byte limits; if fewer than `min_bytes` are available the fetch
//! waits (up to `max_wait_ms`) for an append to any of its partitions.
//!
//! Record bytes are never copied on this shard: the tail comes as shared
//! slices of the log's DMA memory, sealed segments as a file range sent with
//! sendfile. Data from another shard's memory is copied once to cross over.

use std::rc::Rc;
use std::time::{Duration, Instant};

use brook_engine::cluster::image::{MetadataImage, TopicId};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::protocol::fetch::{
    FetchPiece, FetchResponseData, PartitionData, TopicData, encode_fetch_response,
};
use brook_engine::protocol::frame::{FrameError, Request};
use brook_engine::types::{Offset, PartitionId, TopicPartition};
use bytes::Bytes;
use futures::future::select_all;
use kafka_protocol::messages::FetchRequest;

use crate::server::handlers::produce::storage_error_code;
use crate::server::response::{FetchPart, Records, Response};
use crate::server::shard::{LEADER_EPOCH, Shard};
use crate::storage::{LogData, ReadOptions};

/// The longest a fetch may wait, whatever it asks for.
const FETCH_WAIT_MAX: Duration = Duration::from_secs(60);

/// One requested partition.
#[derive(Clone, Debug)]
struct Wanted {
    topic_slot: usize,
    topic_partition: Option<TopicPartition>,
    partition: i32,
    fetch_offset: i64,
    partition_max_bytes: i32,
    current_leader_epoch: i32,
}

/// What one partition read produced: `R` is [`Records`] on the
/// connection's shard and [`SendableRecords`] when it crosses shards.
enum Fetched<R> {
    Error {
        error: ErrorCode,
        high_watermark: i64,
        log_start_offset: i64,
    },
    Data {
        high_watermark: i64,
        log_start_offset: i64,
        records: Option<R>,
    },
}

/// Records that can move to another shard: memory is copied once, a file
/// range travels as a duplicated descriptor.
enum SendableRecords {
    Bytes(Bytes),
    File {
        file: std::fs::File,
        position: u64,
        len: u64,
    },
}

impl<R> Fetched<R> {
    fn map<T>(self, convert: impl FnOnce(R) -> Option<T>) -> Fetched<T> {
        match self {
            Fetched::Error {
                error,
                high_watermark,
                log_start_offset,
            } => Fetched::Error {
                error,
                high_watermark,
                log_start_offset,
            },
            Fetched::Data {
                high_watermark,
                log_start_offset,
                records,
            } => Fetched::Data {
                high_watermark,
                log_start_offset,
                records: records.and_then(convert),
            },
        }
    }
}

fn records_len(records: &Records) -> u64 {
    match records {
        Records::Local(pieces) => pieces.iter().map(|piece| piece.len() as u64).sum(),
        Records::Owned(bytes) => bytes.len() as u64,
        Records::File { len, .. } => *len,
    }
}

pub async fn handle(shard: &Rc<Shard>, request: &Request) -> Result<Response, FrameError> {
    let body: FetchRequest = request.decode_body()?;
    let version = request.api_version;
    let image = shard.image();
    let (topics, wanted) = resolve(&image, &body, version);
    let deadline =
        Instant::now() + Duration::from_millis(body.max_wait_ms.max(0) as u64).min(FETCH_WAIT_MAX);
    let response_max_bytes = if body.max_bytes > 0 {
        body.max_bytes as usize
    } else {
        usize::MAX
    };
    loop {
        let fetched = read_all(shard, &image, &wanted, response_max_bytes).await;
        let bytes: u64 = fetched
            .iter()
            .map(|(_, fetched)| fetched_len(fetched))
            .sum();
        let any_error = fetched
            .iter()
            .any(|(_, fetched)| matches!(fetched, Fetched::Error { .. }));
        if bytes >= body.min_bytes.max(0) as u64
            || any_error
            || Instant::now() >= deadline
            || shard.is_stopping()
        {
            return Ok(respond(
                request.correlation_id,
                version,
                topics,
                wanted,
                fetched,
            ));
        }
        wait_for_data(shard, &image, &wanted, deadline).await;
    }
}

/// Requested partitions in order, with the topic list of the response.
fn resolve(
    image: &MetadataImage,
    body: &FetchRequest,
    version: i16,
) -> (Vec<TopicData>, Vec<Wanted>) {
    let mut topics = Vec::new();
    let mut wanted = Vec::new();
    for topic in &body.topics {
        let (name, id) = if version >= 13 {
            let id = TopicId(*topic.topic_id.as_bytes());
            (image.topic_by_id(id).map(|known| known.name.clone()), id)
        } else {
            let name = topic.topic.to_string();
            let id = image
                .topic(&name)
                .map_or(TopicId::default(), |known| known.id);
            (image.topic(&name).map(|_| name.clone()).or(Some(name)), id)
        };
        let topic_slot = topics.len();
        topics.push(TopicData {
            name: name.clone().unwrap_or_default(),
            topic_id: id.0,
            partitions: Vec::new(),
        });
        for partition in &topic.partitions {
            let topic_partition = name.as_ref().map(|name| TopicPartition {
                topic: name.clone(),
                partition: PartitionId(partition.partition),
            });
            wanted.push(Wanted {
                topic_slot,
                topic_partition,
                partition: partition.partition,
                fetch_offset: partition.fetch_offset,
                partition_max_bytes: partition.partition_max_bytes,
                current_leader_epoch: partition.current_leader_epoch,
            });
        }
    }
    (topics, wanted)
}

fn fetched_len(fetched: &Fetched<Records>) -> u64 {
    match fetched {
        Fetched::Data {
            records: Some(records),
            ..
        } => records_len(records),
        _ => 0,
    }
}

/// Reads every partition in order, spending the response byte budget; the
/// first partition with data may exceed it (KIP-74) so consumers progress.
async fn read_all(
    shard: &Rc<Shard>,
    image: &MetadataImage,
    wanted: &[Wanted],
    response_max_bytes: usize,
) -> Vec<(usize, Fetched<Records>)> {
    let mut remaining = response_max_bytes;
    let mut fetched = Vec::with_capacity(wanted.len());
    for (slot, partition) in wanted.iter().enumerate() {
        let max_bytes = (partition.partition_max_bytes.max(0) as usize).min(remaining);
        let result = read_partition(shard, image, partition, max_bytes).await;
        let len = fetched_len(&result) as usize;
        remaining = remaining.saturating_sub(len);
        fetched.push((slot, result));
    }
    fetched
}

async fn read_partition(
    shard: &Rc<Shard>,
    image: &MetadataImage,
    wanted: &Wanted,
    max_bytes: usize,
) -> Fetched<Records> {
    let unknown = Fetched::Error {
        error: ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        high_watermark: -1,
        log_start_offset: -1,
    };
    let Some(topic_partition) = wanted.topic_partition.clone() else {
        return Fetched::Error {
            error: ErrorCode::UNKNOWN_TOPIC_ID,
            high_watermark: -1,
            log_start_offset: -1,
        };
    };
    let Some(owner) = image.owner(&topic_partition) else {
        return unknown;
    };
    if let Some(error) = epoch_error(wanted.current_leader_epoch) {
        return Fetched::Error {
            error,
            high_watermark: -1,
            log_start_offset: -1,
        };
    }
    let offset = Offset(wanted.fetch_offset);
    if owner == shard.id {
        return read_local(shard, &topic_partition, offset, max_bytes).await;
    }
    let read = shard
        .on_shard(owner, move |owner| async move {
            read_local(&owner, &topic_partition, offset, max_bytes)
                .await
                .map(sendable)
        })
        .await;
    read.map_or(unknown, |fetched| {
        fetched.map(|records| {
            Some(match records {
                SendableRecords::Bytes(bytes) => Records::Owned(bytes),
                SendableRecords::File {
                    file,
                    position,
                    len,
                } => Records::File {
                    file: Rc::new(file),
                    position,
                    len,
                },
            })
        })
    })
}

/// The leader-epoch check of Fetch and ListOffsets (KIP-320).
pub(crate) fn epoch_error(current_leader_epoch: i32) -> Option<ErrorCode> {
    match current_leader_epoch {
        epoch if epoch < 0 || epoch == LEADER_EPOCH.0 => None,
        epoch if epoch < LEADER_EPOCH.0 => Some(ErrorCode::FENCED_LEADER_EPOCH),
        _ => Some(ErrorCode::UNKNOWN_LEADER_EPOCH),
    }
}

/// Reads on the owning shard.
async fn read_local(
    shard: &Rc<Shard>,
    topic_partition: &TopicPartition,
    offset: Offset,
    max_bytes: usize,
) -> Fetched<Records> {
    let Some(log) = shard.log(topic_partition) else {
        return Fetched::Error {
            error: ErrorCode::NOT_LEADER_OR_FOLLOWER,
            high_watermark: -1,
            log_start_offset: -1,
        };
    };
    let high_watermark = log.visible_offset();
    let options = ReadOptions {
        max_bytes: max_bytes.max(1),
        max_offset: high_watermark,
        allow_file_range: true,
    };
    let outcome = match log.read(offset, options).await {
        Ok(outcome) => outcome,
        Err(error) => {
            return Fetched::Error {
                error: storage_error_code(&error),
                high_watermark: high_watermark.0,
                log_start_offset: log.log_start_offset().0,
            };
        }
    };
    let records = match outcome.data {
        LogData::Empty => None,
        LogData::Memory(pieces) => Some(Records::Local(pieces)),
        LogData::File(range) => Some(Records::File {
            file: range.file,
            position: range.position,
            len: range.len,
        }),
    };
    Fetched::Data {
        high_watermark: high_watermark.0,
        log_start_offset: outcome.log_start_offset.0,
        records,
    }
}

/// Makes records readable on another shard (on the owning shard).
fn sendable(records: Records) -> Option<SendableRecords> {
    match records {
        Records::Local(pieces) => {
            let mut bytes = Vec::with_capacity(pieces.iter().map(|piece| piece.len()).sum());
            pieces
                .iter()
                .for_each(|piece| bytes.extend_from_slice(piece));
            Some(SendableRecords::Bytes(Bytes::from(bytes)))
        }
        Records::Owned(bytes) => Some(SendableRecords::Bytes(bytes)),
        Records::File {
            file,
            position,
            len,
        } => file.try_clone().ok().map(|file| SendableRecords::File {
            file,
            position,
            len,
        }),
    }
}

/// Waits until any partition's high watermark passes its fetch offset, or
/// the deadline.
async fn wait_for_data(
    shard: &Rc<Shard>,
    image: &MetadataImage,
    wanted: &[Wanted],
    deadline: Instant,
) {
    let mut waits: Vec<std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>> = Vec::new();
    let remaining = deadline.saturating_duration_since(Instant::now());
    waits.push(Box::pin(glommio::timer::sleep(remaining)));
    for partition in wanted {
        let (Some(topic_partition), target) = (
            partition.topic_partition.clone(),
            Offset(partition.fetch_offset.saturating_add(1)),
        ) else {
            continue;
        };
        let Some(owner) = image.owner(&topic_partition) else {
            continue;
        };
        let shard = shard.clone();
        waits.push(Box::pin(async move {
            let _ = shard
                .on_shard(owner, move |owner| async move {
                    if let Some(log) = owner.log(&topic_partition) {
                        let wait = std::pin::pin!(log.wait_visible(target));
                        let timer = std::pin::pin!(glommio::timer::sleep(remaining));
                        let _ = futures::future::select(wait, timer).await;
                    }
                })
                .await;
        }));
    }
    select_all(waits).await;
}

fn respond(
    correlation_id: i32,
    version: i16,
    mut topics: Vec<TopicData>,
    wanted: Vec<Wanted>,
    fetched: Vec<(usize, Fetched<Records>)>,
) -> Response {
    let mut records_by_slot: Vec<Option<Records>> = Vec::new();
    for ((_, fetched), partition) in fetched.into_iter().zip(&wanted) {
        let (error, high_watermark, log_start_offset, records) = match fetched {
            Fetched::Error {
                error,
                high_watermark,
                log_start_offset,
            } => (error, high_watermark, log_start_offset, None),
            Fetched::Data {
                high_watermark,
                log_start_offset,
                records,
            } => (ErrorCode::NONE, high_watermark, log_start_offset, records),
        };
        let records_bytes = records
            .as_ref()
            .map_or(0, |records| records_len(records) as usize);
        topics[partition.topic_slot].partitions.push(PartitionData {
            partition_index: partition.partition,
            error_code: error.0,
            high_watermark,
            last_stable_offset: high_watermark,
            log_start_offset,
            aborted_transactions: None,
            preferred_read_replica: -1,
            records_bytes,
        });
        records_by_slot.push(records);
    }
    let slots: Vec<(usize, usize)> = topics
        .iter()
        .enumerate()
        .flat_map(|(topic, data)| {
            (0..data.partitions.len()).map(move |partition| (topic, partition))
        })
        .collect();
    let data = FetchResponseData {
        topics,
        ..FetchResponseData::default()
    };
    let parts = encode_fetch_response(correlation_id, version, &data)
        .into_iter()
        .filter_map(|piece| match piece {
            FetchPiece::Bytes(bytes) => Some(FetchPart::Bytes(bytes)),
            FetchPiece::Records { topic, partition } => {
                let slot = slots
                    .iter()
                    .position(|entry| *entry == (topic, partition))?;
                records_by_slot[slot].take().map(FetchPart::Records)
            }
        })
        .collect();
    Response::Fetch(parts)
}
