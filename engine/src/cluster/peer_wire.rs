//! What nodes say to each other on the controller listener: Raft messages
//! between voters, and brokers' registration, heartbeats and metadata
//! catch-up with the active controller. Brook's own frames (Kafka's KRaft
//! RPCs carry Kafka's Raft, not raft-rs's), bounded and checked like any
//! input from the network.
//!
//! ```text
//! frame    = length:u32 kind:u8 body          (length counts kind + body, ≤ PEER_FRAME_BYTES_MAX)
//! hello    = kind 1, cluster_id:string node:i32   (first frame each way; a different cluster id closes)
//! raft     = kind 2, raft-rs Message (protobuf)
//! request  = kind 3, correlation:u32 epoch:u64 tag:u8 …
//! response = kind 4, correlation:u32 epoch:u64 tag:u8 …
//! ```
//!
//! A request's `epoch` is the controller epoch (Raft term) its sender
//! knows, 0 before it knows any; a voter refuses one from another epoch
//! ([`crate::cluster::quorum::epoch_check`], KRaft's FENCED_LEADER_EPOCH /
//! UNKNOWN_LEADER_EPOCH). A response's `epoch` is the answering voter's, and
//! a broker ignores an answer from an epoch older than one it has seen.

use bytes::BufMut;
use protobuf::Message as _;
use raft::eraftpb::{Entry, Message, Snapshot};
use thiserror::Error;

use std::collections::BTreeMap;

use crate::cluster::alter_partition::{self, AlterPartitionRequest, AlterPartitionResponse};
use crate::cluster::controller::TopicRequest;
use crate::cluster::elections::{ElectionType, PartitionElection, TopicElections};
use crate::cluster::image::TopicId;
use crate::cluster::quorum::{Catchup, Fetched, MetadataFetch, QuorumDescription, ReplicaProgress};
use crate::cluster::records::{
    BrokerRegistration, Reader, RecordError, put_registration, put_string,
};
use crate::cluster::topic_config::ConfigOperation;
use crate::protocol::errors::ErrorCode;
use crate::types::{BrokerId, PartitionId, TopicPartition};

/// The largest frame a node accepts (a snapshot of a large image fits).
pub const PEER_FRAME_BYTES_MAX: usize = 64 << 20;
/// Entries one catch-up answer carries at most.
pub const CATCHUP_ENTRIES_MAX: usize = 512;

#[derive(Clone, Debug, PartialEq)]
pub enum PeerRequest {
    Register(BrokerRegistration),
    Heartbeat {
        broker: BrokerId,
        epoch: i64,
        applied: u64,
        /// The broker is stopping: move its leaderships (controlled
        /// shutdown).
        want_shut_down: bool,
        /// The partitions of its failed log directories.
        offline: Vec<TopicPartition>,
    },
    /// Committed metadata after `fetch.offset`; with how far the broker's
    /// shards serve the log and the `served_by_all` it last heard
    /// ([`crate::cluster::visibility`]).
    Fetch(MetadataFetch),
    /// CreateTopics, forwarded by any broker to the active controller.
    CreateTopics {
        topics: Vec<TopicRequest>,
        validate_only: bool,
    },
    /// DeleteTopics, forwarded likewise.
    DeleteTopics {
        names: Vec<String>,
    },
    /// DescribeQuorum, forwarded likewise.
    DescribeQuorum,
    /// CreatePartitions for one topic, forwarded likewise.
    CreatePartitions {
        topic: String,
        total: i32,
        /// One replica list per new partition; `None`: the controller
        /// places them (Kafka's null; an empty list is refused).
        assignments: Option<Vec<Vec<BrokerId>>>,
        validate_only: bool,
    },
    /// IncrementalAlterConfigs (`replace` false) or AlterConfigs
    /// (`replace` true) for one topic, forwarded likewise.
    AlterConfigs {
        topic: String,
        changes: Vec<(String, ConfigOperation)>,
        replace: bool,
        validate_only: bool,
    },
    /// IncrementalAlterConfigs (`replace` false) or AlterConfigs
    /// (`replace` true) for a BROKER resource (KIP-226): `resource` is a
    /// broker's id, or "" for the cluster-wide default; forwarded likewise.
    AlterBrokerConfigs {
        resource: String,
        changes: Vec<(String, ConfigOperation)>,
        replace: bool,
        validate_only: bool,
    },
    /// AllocateProducerIds (KIP-730): a block of producer ids for `broker`,
    /// registered at `broker_epoch`.
    AllocateProducerIds {
        broker: BrokerId,
        broker_epoch: i64,
    },
    /// AlterPartition (KIP-497): a partition leader's ISR change.
    AlterPartition(AlterPartitionRequest),
    /// ElectLeaders (KIP-460), forwarded likewise; `topics` `None` asks for
    /// every partition.
    ElectLeaders {
        election: ElectionType,
        topics: Option<Vec<(String, Vec<i32>)>>,
    },
}

/// One topic's outcome of a forwarded admin request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicResult {
    pub name: String,
    pub error: ErrorCode,
    pub message: Option<String>,
    pub id: TopicId,
    pub partitions: i32,
    pub replication_factor: i16,
}

#[derive(Clone, Debug, PartialEq)]
pub enum PeerResponse {
    Registered {
        error: ErrorCode,
        epoch: i64,
    },
    Heartbeat {
        error: ErrorCode,
        fenced: bool,
        /// The broker asked to shut down and leads nothing now.
        should_shut_down: bool,
    },
    Fetched(Fetched),
    /// The node asked is not the active controller; `leader` may be.
    NotController {
        leader: Option<BrokerId>,
    },
    /// Per topic, in request order; `offset` is the metadata offset that
    /// holds the change (0 when nothing was proposed).
    Topics {
        results: Vec<TopicResult>,
        offset: u64,
    },
    /// The request's epoch is not the voter's: FENCED_LEADER_EPOCH when
    /// older (ask again with the response's epoch), UNKNOWN_LEADER_EPOCH
    /// when newer (this voter is behind; ask another).
    WrongEpoch {
        error: ErrorCode,
        leader: Option<BrokerId>,
    },
    Quorum(QuorumDescription),
    /// Ids `start ..< start + length` are the asking broker's.
    ProducerIds {
        error: ErrorCode,
        start: i64,
        length: i64,
    },
    AlterPartition(AlterPartitionResponse),
    /// ElectLeaders' outcomes; `offset` as for [`PeerResponse::Topics`].
    Elected {
        results: Vec<TopicElections>,
        offset: u64,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub enum PeerFrame {
    Hello {
        cluster_id: String,
        node: BrokerId,
    },
    Raft(Box<Message>),
    Request {
        correlation: u32,
        epoch: u64,
        request: PeerRequest,
    },
    Response {
        correlation: u32,
        epoch: u64,
        response: PeerResponse,
    },
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum PeerWireError {
    #[error("peer frame of {0} bytes is over the limit")]
    TooLarge(usize),
    #[error("peer frame kind {0} is unknown")]
    UnknownKind(u8),
    #[error("peer frame tag {0} is unknown")]
    UnknownTag(u8),
    #[error("peer frame is empty")]
    Empty,
    #[error("{0}")]
    Body(#[from] RecordError),
    #[error("raft message does not decode: {0}")]
    Protobuf(String),
}

impl PartialEq for Catchup {
    fn eq(&self, other: &Catchup) -> bool {
        match (self, other) {
            (Catchup::Snapshot(a), Catchup::Snapshot(b)) => a == b,
            (Catchup::Entries(a), Catchup::Entries(b)) => a == b,
            _ => false,
        }
    }
}

/// The frame's length prefix says how many bytes follow; refused before
/// any allocation when over the limit.
pub fn frame_length(prefix: [u8; 4]) -> Result<usize, PeerWireError> {
    let length = u32::from_be_bytes(prefix) as usize;
    if length > PEER_FRAME_BYTES_MAX {
        return Err(PeerWireError::TooLarge(length));
    }
    if length == 0 {
        return Err(PeerWireError::Empty);
    }
    Ok(length)
}

/// The whole frame, length prefix included.
pub fn encode_frame(frame: &PeerFrame) -> Vec<u8> {
    let mut out = vec![0u8; 4];
    match frame {
        PeerFrame::Hello { cluster_id, node } => {
            out.put_u8(1);
            put_string(&mut out, cluster_id);
            out.put_i32(node.0);
        }
        PeerFrame::Raft(message) => {
            out.put_u8(2);
            out.extend(message.write_to_bytes().expect("raft messages encode"));
        }
        PeerFrame::Request {
            correlation,
            epoch,
            request,
        } => {
            out.put_u8(3);
            out.put_u32(*correlation);
            out.put_u64(*epoch);
            encode_request(&mut out, request);
        }
        PeerFrame::Response {
            correlation,
            epoch,
            response,
        } => {
            out.put_u8(4);
            out.put_u32(*correlation);
            out.put_u64(*epoch);
            encode_response(&mut out, response);
        }
    }
    let length = (out.len() - 4) as u32;
    out[..4].copy_from_slice(&length.to_be_bytes());
    out
}

fn encode_request(out: &mut Vec<u8>, request: &PeerRequest) {
    match request {
        PeerRequest::Register(registration) => {
            out.put_u8(1);
            put_registration(out, registration);
        }
        PeerRequest::Heartbeat {
            broker,
            epoch,
            applied,
            want_shut_down,
            offline,
        } => {
            out.put_u8(2);
            out.put_i32(broker.0);
            out.put_i64(*epoch);
            out.put_u64(*applied);
            out.put_u8(u8::from(*want_shut_down));
            out.put_u32(offline.len() as u32);
            for topic_partition in offline {
                put_string(out, &topic_partition.topic);
                out.put_i32(topic_partition.partition.0);
            }
        }
        PeerRequest::Fetch(fetch) => {
            out.put_u8(3);
            out.put_u64(fetch.offset);
            out.put_u64(fetch.served);
            out.put_u64(fetch.served_by_all);
        }
        PeerRequest::CreateTopics {
            topics,
            validate_only,
        } => {
            out.put_u8(4);
            out.put_u8(u8::from(*validate_only));
            out.put_u32(topics.len() as u32);
            for topic in topics {
                put_string(out, &topic.name);
                out.put_i32(topic.partitions);
                out.put_i16(topic.replication_factor);
                out.put_u32(topic.configs.len() as u32);
                for (key, value) in &topic.configs {
                    put_string(out, key);
                    put_string(out, value);
                }
                out.put_u32(topic.assignments.len() as u32);
                for (partition, replicas) in &topic.assignments {
                    out.put_i32(*partition);
                    put_brokers(out, replicas);
                }
                // The asker's id, all zeros for none (no topic has it).
                out.put_slice(&topic.id.unwrap_or_default().0);
            }
        }
        PeerRequest::DeleteTopics { names } => {
            out.put_u8(5);
            out.put_u32(names.len() as u32);
            for name in names {
                put_string(out, name);
            }
        }
        PeerRequest::DescribeQuorum => out.put_u8(6),
        PeerRequest::CreatePartitions {
            topic,
            total,
            assignments,
            validate_only,
        } => {
            out.put_u8(7);
            put_string(out, topic);
            out.put_i32(*total);
            out.put_u8(u8::from(*validate_only));
            out.put_u8(u8::from(assignments.is_some()));
            let assignments = assignments.as_deref().unwrap_or_default();
            out.put_u32(assignments.len() as u32);
            for replicas in assignments {
                put_brokers(out, replicas);
            }
        }
        PeerRequest::AlterConfigs {
            topic,
            changes,
            replace,
            validate_only,
        } => {
            out.put_u8(8);
            put_string(out, topic);
            put_changes(out, changes, *replace, *validate_only);
        }
        PeerRequest::AlterBrokerConfigs {
            resource,
            changes,
            replace,
            validate_only,
        } => {
            out.put_u8(12);
            put_string(out, resource);
            put_changes(out, changes, *replace, *validate_only);
        }
        PeerRequest::AllocateProducerIds {
            broker,
            broker_epoch,
        } => {
            out.put_u8(9);
            out.put_i32(broker.0);
            out.put_i64(*broker_epoch);
        }
        PeerRequest::AlterPartition(request) => {
            out.put_u8(10);
            alter_partition::put_request(out, request);
        }
        PeerRequest::ElectLeaders { election, topics } => {
            out.put_u8(11);
            out.put_u8(match election {
                ElectionType::Preferred => 0,
                ElectionType::Unclean => 1,
            });
            out.put_u8(u8::from(topics.is_some()));
            let topics = topics.as_deref().unwrap_or_default();
            out.put_u32(topics.len() as u32);
            for (topic, partitions) in topics {
                put_string(out, topic);
                out.put_u32(partitions.len() as u32);
                for partition in partitions {
                    out.put_i32(*partition);
                }
            }
        }
    }
}

fn put_optional_string(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => {
            out.put_u8(1);
            put_string(out, value);
        }
        None => out.put_u8(0),
    }
}

/// An AlterConfigs' flags and operations (topic or broker resource).
fn put_changes(
    out: &mut Vec<u8>,
    changes: &[(String, ConfigOperation)],
    replace: bool,
    validate_only: bool,
) {
    out.put_u8(u8::from(replace));
    out.put_u8(u8::from(validate_only));
    out.put_u32(changes.len() as u32);
    for (key, operation) in changes {
        put_string(out, key);
        let (code, value) = match operation {
            ConfigOperation::Set(value) => (0, value),
            ConfigOperation::Delete => (1, &None),
            ConfigOperation::Append(value) => (2, value),
            ConfigOperation::Subtract(value) => (3, value),
        };
        out.put_u8(code);
        put_optional_string(out, value.as_deref());
    }
}

type Changes = (Vec<(String, ConfigOperation)>, bool, bool);

fn read_changes(reader: &mut Reader<'_>) -> Result<Changes, RecordError> {
    let replace = reader.u8()? != 0;
    let validate_only = reader.u8()? != 0;
    let count = reader.count(4)?;
    let changes = (0..count)
        .map(|_| {
            let key = reader.string()?;
            let code = reader.u8()?;
            let value = optional_string(reader)?;
            let operation = ConfigOperation::from_wire(code as i8, value)
                .ok_or(RecordError::UnknownTag { tag: code })?;
            Ok((key, operation))
        })
        .collect::<Result<Vec<_>, RecordError>>()?;
    Ok((changes, replace, validate_only))
}

fn optional_string(reader: &mut Reader<'_>) -> Result<Option<String>, RecordError> {
    Ok(match reader.u8()? {
        0 => None,
        _ => Some(reader.string()?),
    })
}

fn put_brokers(out: &mut Vec<u8>, brokers: &[BrokerId]) {
    out.put_u32(brokers.len() as u32);
    for broker in brokers {
        out.put_i32(broker.0);
    }
}

fn brokers(reader: &mut Reader<'_>) -> Result<Vec<BrokerId>, RecordError> {
    let count = reader.count(4)?;
    (0..count).map(|_| Ok(BrokerId(reader.i32()?))).collect()
}

fn encode_response(out: &mut Vec<u8>, response: &PeerResponse) {
    match response {
        PeerResponse::Registered { error, epoch } => {
            out.put_u8(1);
            out.put_i16(error.0);
            out.put_i64(*epoch);
        }
        PeerResponse::Heartbeat {
            error,
            fenced,
            should_shut_down,
        } => {
            out.put_u8(2);
            out.put_i16(error.0);
            out.put_u8(u8::from(*fenced));
            out.put_u8(u8::from(*should_shut_down));
        }
        PeerResponse::Fetched(Fetched {
            catchup: Catchup::Snapshot(snapshot),
            served_by_all,
        }) => {
            out.put_u8(3);
            out.put_u64(*served_by_all);
            out.extend(snapshot.write_to_bytes().expect("snapshots encode"));
        }
        PeerResponse::Fetched(Fetched {
            catchup: Catchup::Entries(entries),
            served_by_all,
        }) => {
            out.put_u8(4);
            out.put_u64(*served_by_all);
            out.put_u32(entries.len() as u32);
            for entry in entries {
                let bytes = entry.write_to_bytes().expect("entries encode");
                out.put_u32(bytes.len() as u32);
                out.extend(bytes);
            }
        }
        PeerResponse::NotController { leader } => {
            out.put_u8(5);
            out.put_i32(leader.map_or(-1, |leader| leader.0));
        }
        PeerResponse::Topics { results, offset } => {
            out.put_u8(6);
            out.put_u64(*offset);
            out.put_u32(results.len() as u32);
            for result in results {
                put_string(out, &result.name);
                out.put_i16(result.error.0);
                put_optional_string(out, result.message.as_deref());
                out.put_slice(&result.id.0);
                out.put_i32(result.partitions);
                out.put_i16(result.replication_factor);
            }
        }
        PeerResponse::WrongEpoch { error, leader } => {
            out.put_u8(7);
            out.put_i16(error.0);
            out.put_i32(leader.map_or(-1, |leader| leader.0));
        }
        PeerResponse::ProducerIds {
            error,
            start,
            length,
        } => {
            out.put_u8(9);
            out.put_i16(error.0);
            out.put_i64(*start);
            out.put_i64(*length);
        }
        PeerResponse::AlterPartition(response) => {
            out.put_u8(10);
            alter_partition::put_response(out, response);
        }
        PeerResponse::Elected { results, offset } => {
            out.put_u8(11);
            out.put_u64(*offset);
            out.put_u32(results.len() as u32);
            for topic in results {
                put_string(out, &topic.topic);
                out.put_u32(topic.partitions.len() as u32);
                for partition in &topic.partitions {
                    out.put_i32(partition.partition);
                    out.put_i16(partition.error.0);
                    put_optional_string(out, partition.message.as_deref());
                }
            }
        }
        PeerResponse::Quorum(quorum) => {
            out.put_u8(8);
            out.put_i32(quorum.leader.0);
            out.put_u64(quorum.epoch);
            out.put_u64(quorum.high_watermark);
            for replicas in [&quorum.voters, &quorum.observers] {
                out.put_u32(replicas.len() as u32);
                for replica in replicas {
                    out.put_i32(replica.node.0);
                    out.put_u64(replica.log_end_offset);
                    out.put_i64(replica.last_fetch_ms.map_or(-1, |at| at as i64));
                    out.put_i64(replica.last_caught_up_ms.map_or(-1, |at| at as i64));
                }
            }
        }
    }
}

/// Decodes a frame's body (what follows the length prefix).
pub fn decode_frame(body: &[u8]) -> Result<PeerFrame, PeerWireError> {
    let (&kind, rest) = body.split_first().ok_or(PeerWireError::Empty)?;
    let mut reader = Reader::new(rest);
    let frame = match kind {
        1 => PeerFrame::Hello {
            cluster_id: reader.string()?,
            node: BrokerId(reader.i32()?),
        },
        2 => PeerFrame::Raft(Box::new(parse(rest)?)),
        3 => PeerFrame::Request {
            correlation: reader.i32()? as u32,
            epoch: reader.i64()? as u64,
            request: decode_request(&mut reader)?,
        },
        4 => PeerFrame::Response {
            correlation: reader.i32()? as u32,
            epoch: reader.i64()? as u64,
            response: decode_response(&mut reader)?,
        },
        kind => return Err(PeerWireError::UnknownKind(kind)),
    };
    Ok(frame)
}

fn parse<M: protobuf::Message>(bytes: &[u8]) -> Result<M, PeerWireError> {
    M::parse_from_bytes(bytes).map_err(|error| PeerWireError::Protobuf(error.to_string()))
}

fn decode_request(reader: &mut Reader<'_>) -> Result<PeerRequest, PeerWireError> {
    Ok(match reader.u8()? {
        1 => PeerRequest::Register(reader.registration()?),
        2 => PeerRequest::Heartbeat {
            broker: BrokerId(reader.i32()?),
            epoch: reader.i64()?,
            applied: reader.i64()? as u64,
            want_shut_down: reader.u8()? != 0,
            offline: {
                let count = reader.count(6)?;
                (0..count)
                    .map(|_| {
                        Ok(TopicPartition {
                            topic: reader.string()?,
                            partition: PartitionId(reader.i32()?),
                        })
                    })
                    .collect::<Result<Vec<_>, RecordError>>()?
            },
        },
        3 => PeerRequest::Fetch(MetadataFetch {
            offset: reader.i64()? as u64,
            served: reader.i64()? as u64,
            served_by_all: reader.i64()? as u64,
        }),
        4 => {
            let validate_only = reader.u8()? != 0;
            let count = reader.count(28)?;
            let topics = (0..count)
                .map(|_| {
                    let name = reader.string()?;
                    let partitions = reader.i32()?;
                    let replication_factor = reader.u16()? as i16;
                    let configs = reader.count(4)?;
                    let configs = (0..configs)
                        .map(|_| Ok((reader.string()?, reader.string()?)))
                        .collect::<Result<BTreeMap<_, _>, RecordError>>()?;
                    let assignments = reader.count(8)?;
                    let assignments = (0..assignments)
                        .map(|_| Ok((reader.i32()?, brokers(reader)?)))
                        .collect::<Result<Vec<_>, RecordError>>()?;
                    let id = Some(reader.topic_id()?).filter(|id| !id.is_zero());
                    Ok(TopicRequest {
                        name,
                        partitions,
                        replication_factor,
                        configs,
                        assignments,
                        id,
                    })
                })
                .collect::<Result<Vec<_>, RecordError>>()?;
            PeerRequest::CreateTopics {
                topics,
                validate_only,
            }
        }
        5 => {
            let count = reader.count(2)?;
            let names = (0..count)
                .map(|_| reader.string())
                .collect::<Result<Vec<_>, _>>()?;
            PeerRequest::DeleteTopics { names }
        }
        6 => PeerRequest::DescribeQuorum,
        7 => {
            let topic = reader.string()?;
            let total = reader.i32()?;
            let validate_only = reader.u8()? != 0;
            let given = reader.u8()? != 0;
            let count = reader.count(4)?;
            let assignments = (0..count)
                .map(|_| brokers(reader))
                .collect::<Result<Vec<_>, RecordError>>()?;
            let assignments = given.then_some(assignments);
            PeerRequest::CreatePartitions {
                topic,
                total,
                assignments,
                validate_only,
            }
        }
        8 => {
            let topic = reader.string()?;
            let (changes, replace, validate_only) = read_changes(reader)?;
            PeerRequest::AlterConfigs {
                topic,
                changes,
                replace,
                validate_only,
            }
        }
        12 => {
            let resource = reader.string()?;
            let (changes, replace, validate_only) = read_changes(reader)?;
            PeerRequest::AlterBrokerConfigs {
                resource,
                changes,
                replace,
                validate_only,
            }
        }
        9 => PeerRequest::AllocateProducerIds {
            broker: BrokerId(reader.i32()?),
            broker_epoch: reader.i64()?,
        },
        10 => PeerRequest::AlterPartition(alter_partition::read_request(reader)?),
        11 => {
            let election = match reader.u8()? {
                0 => ElectionType::Preferred,
                1 => ElectionType::Unclean,
                tag => return Err(PeerWireError::UnknownTag(tag)),
            };
            let given = reader.u8()? != 0;
            let count = reader.count(6)?;
            let topics = (0..count)
                .map(|_| {
                    let topic = reader.string()?;
                    let partitions = reader.count(4)?;
                    let partitions = (0..partitions)
                        .map(|_| reader.i32())
                        .collect::<Result<Vec<_>, _>>()?;
                    Ok((topic, partitions))
                })
                .collect::<Result<Vec<_>, RecordError>>()?;
            PeerRequest::ElectLeaders {
                election,
                topics: given.then_some(topics),
            }
        }
        tag => return Err(PeerWireError::UnknownTag(tag)),
    })
}

fn decode_response(reader: &mut Reader<'_>) -> Result<PeerResponse, PeerWireError> {
    Ok(match reader.u8()? {
        1 => PeerResponse::Registered {
            error: ErrorCode(reader.u16()? as i16),
            epoch: reader.i64()?,
        },
        2 => PeerResponse::Heartbeat {
            error: ErrorCode(reader.u16()? as i16),
            fenced: reader.u8()? != 0,
            should_shut_down: reader.u8()? != 0,
        },
        3 => {
            let served_by_all = reader.i64()? as u64;
            PeerResponse::Fetched(Fetched {
                catchup: Catchup::Snapshot(parse::<Snapshot>(reader.bytes)?),
                served_by_all,
            })
        }
        4 => {
            let served_by_all = reader.i64()? as u64;
            let count = reader.count(4)?.min(CATCHUP_ENTRIES_MAX);
            let entries = (0..count)
                .map(|_| {
                    let length = reader.i32()? as u32 as usize;
                    reader.need(length)?;
                    let (bytes, rest) = reader.bytes.split_at(length);
                    reader.bytes = rest;
                    parse::<Entry>(bytes)
                })
                .collect::<Result<Vec<_>, _>>()?;
            PeerResponse::Fetched(Fetched {
                catchup: Catchup::Entries(entries),
                served_by_all,
            })
        }
        5 => PeerResponse::NotController {
            leader: Some(reader.i32()?).filter(|id| *id >= 0).map(BrokerId),
        },
        6 => {
            let offset = reader.i64()? as u64;
            let count = reader.count(27)?;
            let results = (0..count)
                .map(|_| {
                    Ok(TopicResult {
                        name: reader.string()?,
                        error: ErrorCode(reader.u16()? as i16),
                        message: optional_string(reader)?,
                        id: reader.topic_id()?,
                        partitions: reader.i32()?,
                        replication_factor: reader.u16()? as i16,
                    })
                })
                .collect::<Result<Vec<_>, RecordError>>()?;
            PeerResponse::Topics { results, offset }
        }
        7 => PeerResponse::WrongEpoch {
            error: ErrorCode(reader.u16()? as i16),
            leader: Some(reader.i32()?).filter(|id| *id >= 0).map(BrokerId),
        },
        9 => PeerResponse::ProducerIds {
            error: ErrorCode(reader.u16()? as i16),
            start: reader.i64()?,
            length: reader.i64()?,
        },
        10 => PeerResponse::AlterPartition(alter_partition::read_response(reader)?),
        11 => {
            let offset = reader.i64()? as u64;
            let count = reader.count(6)?;
            let results = (0..count)
                .map(|_| {
                    let topic = reader.string()?;
                    let partitions = reader.count(7)?;
                    let partitions = (0..partitions)
                        .map(|_| {
                            Ok(PartitionElection {
                                partition: reader.i32()?,
                                error: ErrorCode(reader.u16()? as i16),
                                message: optional_string(reader)?,
                            })
                        })
                        .collect::<Result<Vec<_>, RecordError>>()?;
                    Ok(TopicElections { topic, partitions })
                })
                .collect::<Result<Vec<_>, RecordError>>()?;
            PeerResponse::Elected { results, offset }
        }
        8 => {
            let leader = BrokerId(reader.i32()?);
            let epoch = reader.i64()? as u64;
            let high_watermark = reader.i64()? as u64;
            let mut replicas = || {
                let count = reader.count(28)?;
                (0..count)
                    .map(|_| {
                        let at = |value: i64| u64::try_from(value).ok();
                        Ok(ReplicaProgress {
                            node: BrokerId(reader.i32()?),
                            log_end_offset: reader.i64()? as u64,
                            last_fetch_ms: at(reader.i64()?),
                            last_caught_up_ms: at(reader.i64()?),
                        })
                    })
                    .collect::<Result<Vec<_>, RecordError>>()
            };
            let voters = replicas()?;
            let observers = replicas()?;
            PeerResponse::Quorum(QuorumDescription {
                leader,
                epoch,
                high_watermark,
                voters,
                observers,
            })
        }
        tag => return Err(PeerWireError::UnknownTag(tag)),
    })
}

#[cfg(test)]
mod tests;
