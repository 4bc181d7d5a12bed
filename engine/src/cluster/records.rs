//! The metadata log's records (KRaft's, in Brook's own encoding) and their
//! codec.
//!
//! One Raft entry holds one batch of records, applied atomically, and the
//! batch's Raft index is its metadata offset: a broker's epoch is the offset
//! of the entry that registered it, as in Kafka.
//!
//! Encoding, big-endian throughout:
//!
//! ```text
//! batch    = version:u8 (1) count:u32 record*
//! record   = tag:u8 fields…   (tags below; unknown tags are an error)
//! string   = length:u16 bytes (UTF-8)
//! option   = 0:u8 | 1:u8 value
//! list     = count:u32 value*
//! ```
//!
//! Decoding never trusts a count: a list cannot claim more items than there
//! are bytes left, and trailing bytes are an error.

use bytes::{Buf, BufMut};
use thiserror::Error;

use crate::cluster::image::TopicId;
use crate::types::{BrokerId, LeaderEpoch, PartitionId};

/// Records one batch may hold (a CreateTopics of many partitions is one
/// batch, so this bounds a request too).
pub const BATCH_RECORDS_MAX: usize = 200_000;
const VERSION: u8 = 1;

/// A listener a broker advertises (`advertised.listeners`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Endpoint {
    pub name: String,
    pub host: String,
    pub port: u16,
}

/// What a broker says of itself when it registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerRegistration {
    pub id: BrokerId,
    /// New at every start of the broker process (Kafka's incarnation id).
    pub incarnation: [u8; 16],
    pub listeners: Vec<Endpoint>,
    pub rack: Option<String>,
}

impl BrokerRegistration {
    /// Its endpoint on the listener named `name`.
    pub fn endpoint(&self, name: &str) -> Option<&Endpoint> {
        self.listeners.iter().find(|endpoint| endpoint.name == name)
    }
}

/// A partition as the metadata log records it: the same on every broker at
/// the same offset.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionRegistration {
    /// In preference order: the first is the preferred leader.
    pub replicas: Vec<BrokerId>,
    pub isr: Vec<BrokerId>,
    /// [`BrokerId::NONE`] while the partition has no leader.
    pub leader: BrokerId,
    /// Bumped at every leader change.
    pub leader_epoch: LeaderEpoch,
    /// Bumped at every change of the registration (leader, ISR, replicas).
    pub partition_epoch: i32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MetadataRecord {
    /// A broker (re)registers; its epoch becomes this entry's offset and it
    /// starts fenced.
    RegisterBroker(BrokerRegistration),
    /// A broker's whole state, as a snapshot carries it.
    BrokerState {
        registration: BrokerRegistration,
        epoch: i64,
        fenced: bool,
    },
    FenceBroker {
        id: BrokerId,
        epoch: i64,
    },
    UnfenceBroker {
        id: BrokerId,
        epoch: i64,
    },
    /// The broker asked to shut down (a heartbeat's `want_shut_down`): it
    /// may lead nothing and join no ISR from here (KRaft's
    /// `InControlledShutdown` registration change). A new registration or
    /// an unfence ends it.
    ControlledShutdown {
        id: BrokerId,
        epoch: i64,
    },
    Topic {
        name: String,
        id: TopicId,
    },
    /// A partition's registration, new or replacing the previous one.
    Partition {
        topic: TopicId,
        partition: PartitionId,
        registration: PartitionRegistration,
    },
    RemoveTopic {
        id: TopicId,
    },
    /// A topic config override set (`Some`) or removed (`None`).
    TopicConfig {
        topic: String,
        key: String,
        value: Option<String>,
    },
    /// A dynamic broker config (KIP-226) set (`Some`) or removed (`None`) on
    /// `resource`: a broker's id, or "" for the cluster-wide default
    /// (Kafka's ConfigRecord of a BROKER resource).
    BrokerConfig {
        resource: String,
        key: String,
        value: Option<String>,
    },
    /// The next producer id the cluster hands out; blocks below it are taken.
    ProducerIds {
        broker: BrokerId,
        next_producer_id: i64,
    },
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum RecordError {
    #[error("metadata batch ends early at byte {at}")]
    Truncated { at: usize },
    #[error("metadata batch has version {0}, this broker reads {VERSION}")]
    Version(u8),
    #[error("metadata record tag {tag} is unknown")]
    UnknownTag { tag: u8 },
    #[error("metadata batch claims {count} items with {remaining} bytes left")]
    Count { count: usize, remaining: usize },
    #[error("metadata batch has a string that is not UTF-8")]
    Utf8,
    #[error("metadata batch has {0} bytes after its last record")]
    Trailing(usize),
}

pub fn encode_batch(records: &[MetadataRecord]) -> Vec<u8> {
    let mut out = Vec::with_capacity(64 * records.len());
    out.put_u8(VERSION);
    out.put_u32(records.len() as u32);
    for record in records {
        encode_record(&mut out, record);
    }
    out
}

pub fn decode_batch(bytes: &[u8]) -> Result<Vec<MetadataRecord>, RecordError> {
    let mut reader = Reader {
        bytes,
        total: bytes.len(),
    };
    let version = reader.u8()?;
    if version != VERSION {
        return Err(RecordError::Version(version));
    }
    let count = reader.count(1)?.min(BATCH_RECORDS_MAX);
    let records = (0..count)
        .map(|_| decode_record(&mut reader))
        .collect::<Result<Vec<_>, _>>()?;
    if !reader.bytes.is_empty() {
        return Err(RecordError::Trailing(reader.bytes.len()));
    }
    Ok(records)
}

fn encode_record(out: &mut Vec<u8>, record: &MetadataRecord) {
    match record {
        MetadataRecord::RegisterBroker(registration) => {
            out.put_u8(1);
            put_registration(out, registration);
        }
        MetadataRecord::BrokerState {
            registration,
            epoch,
            fenced,
        } => {
            out.put_u8(2);
            put_registration(out, registration);
            out.put_i64(*epoch);
            out.put_u8(u8::from(*fenced));
        }
        MetadataRecord::FenceBroker { id, epoch } => {
            out.put_u8(3);
            out.put_i32(id.0);
            out.put_i64(*epoch);
        }
        MetadataRecord::UnfenceBroker { id, epoch } => {
            out.put_u8(4);
            out.put_i32(id.0);
            out.put_i64(*epoch);
        }
        MetadataRecord::ControlledShutdown { id, epoch } => {
            out.put_u8(10);
            out.put_i32(id.0);
            out.put_i64(*epoch);
        }
        MetadataRecord::Topic { name, id } => {
            out.put_u8(5);
            put_string(out, name);
            out.put_slice(&id.0);
        }
        MetadataRecord::Partition {
            topic,
            partition,
            registration,
        } => {
            out.put_u8(6);
            out.put_slice(&topic.0);
            out.put_i32(partition.0);
            put_brokers(out, &registration.replicas);
            put_brokers(out, &registration.isr);
            out.put_i32(registration.leader.0);
            out.put_i32(registration.leader_epoch.0);
            out.put_i32(registration.partition_epoch);
        }
        MetadataRecord::RemoveTopic { id } => {
            out.put_u8(7);
            out.put_slice(&id.0);
        }
        MetadataRecord::TopicConfig { topic, key, value } => {
            out.put_u8(8);
            put_config(out, topic, key, value.as_deref());
        }
        MetadataRecord::BrokerConfig {
            resource,
            key,
            value,
        } => {
            out.put_u8(11);
            put_config(out, resource, key, value.as_deref());
        }
        MetadataRecord::ProducerIds {
            broker,
            next_producer_id,
        } => {
            out.put_u8(9);
            out.put_i32(broker.0);
            out.put_i64(*next_producer_id);
        }
    }
}

fn decode_record(reader: &mut Reader<'_>) -> Result<MetadataRecord, RecordError> {
    let record = match reader.u8()? {
        1 => MetadataRecord::RegisterBroker(reader.registration()?),
        2 => MetadataRecord::BrokerState {
            registration: reader.registration()?,
            epoch: reader.i64()?,
            fenced: reader.u8()? != 0,
        },
        3 => MetadataRecord::FenceBroker {
            id: BrokerId(reader.i32()?),
            epoch: reader.i64()?,
        },
        4 => MetadataRecord::UnfenceBroker {
            id: BrokerId(reader.i32()?),
            epoch: reader.i64()?,
        },
        5 => MetadataRecord::Topic {
            name: reader.string()?,
            id: reader.topic_id()?,
        },
        6 => MetadataRecord::Partition {
            topic: reader.topic_id()?,
            partition: PartitionId(reader.i32()?),
            registration: PartitionRegistration {
                replicas: reader.brokers()?,
                isr: reader.brokers()?,
                leader: BrokerId(reader.i32()?),
                leader_epoch: LeaderEpoch(reader.i32()?),
                partition_epoch: reader.i32()?,
            },
        },
        7 => MetadataRecord::RemoveTopic {
            id: reader.topic_id()?,
        },
        8 => {
            let (topic, key, value) = reader.config()?;
            MetadataRecord::TopicConfig { topic, key, value }
        }
        11 => {
            let (resource, key, value) = reader.config()?;
            MetadataRecord::BrokerConfig {
                resource,
                key,
                value,
            }
        }
        9 => MetadataRecord::ProducerIds {
            broker: BrokerId(reader.i32()?),
            next_producer_id: reader.i64()?,
        },
        10 => MetadataRecord::ControlledShutdown {
            id: BrokerId(reader.i32()?),
            epoch: reader.i64()?,
        },
        tag => return Err(RecordError::UnknownTag { tag }),
    };
    Ok(record)
}

pub(crate) fn put_registration(out: &mut Vec<u8>, registration: &BrokerRegistration) {
    out.put_i32(registration.id.0);
    out.put_slice(&registration.incarnation);
    out.put_u32(registration.listeners.len() as u32);
    for endpoint in &registration.listeners {
        put_string(out, &endpoint.name);
        put_string(out, &endpoint.host);
        out.put_u16(endpoint.port);
    }
    match &registration.rack {
        Some(rack) => {
            out.put_u8(1);
            put_string(out, rack);
        }
        None => out.put_u8(0),
    }
}

/// A config record's owner (topic or broker resource), key and value.
fn put_config(out: &mut Vec<u8>, owner: &str, key: &str, value: Option<&str>) {
    put_string(out, owner);
    put_string(out, key);
    match value {
        Some(value) => {
            out.put_u8(1);
            put_string(out, value);
        }
        None => out.put_u8(0),
    }
}

pub(crate) fn put_string(out: &mut Vec<u8>, text: &str) {
    // Names, hosts and config values are far below 64 KiB; the controller
    // refuses longer ones before they become records.
    let bytes = &text.as_bytes()[..text.len().min(usize::from(u16::MAX))];
    out.put_u16(bytes.len() as u16);
    out.put_slice(bytes);
}

fn put_brokers(out: &mut Vec<u8>, brokers: &[BrokerId]) {
    out.put_u32(brokers.len() as u32);
    for broker in brokers {
        out.put_i32(broker.0);
    }
}

pub(crate) struct Reader<'a> {
    pub(crate) bytes: &'a [u8],
    total: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8]) -> Reader<'a> {
        Reader {
            bytes,
            total: bytes.len(),
        }
    }

    pub(crate) fn need(&self, count: usize) -> Result<(), RecordError> {
        if self.bytes.len() < count {
            return Err(RecordError::Truncated {
                at: self.total - self.bytes.len(),
            });
        }
        Ok(())
    }

    /// A config record's owner, key and optional value.
    fn config(&mut self) -> Result<(String, String, Option<String>), RecordError> {
        let owner = self.string()?;
        let key = self.string()?;
        let value = match self.u8()? {
            0 => None,
            _ => Some(self.string()?),
        };
        Ok((owner, key, value))
    }

    pub(crate) fn u8(&mut self) -> Result<u8, RecordError> {
        self.need(1)?;
        Ok(self.bytes.get_u8())
    }

    pub(crate) fn u16(&mut self) -> Result<u16, RecordError> {
        self.need(2)?;
        Ok(self.bytes.get_u16())
    }

    pub(crate) fn i32(&mut self) -> Result<i32, RecordError> {
        self.need(4)?;
        Ok(self.bytes.get_i32())
    }

    pub(crate) fn i64(&mut self) -> Result<i64, RecordError> {
        self.need(8)?;
        Ok(self.bytes.get_i64())
    }

    /// A list count, refused if its items (at least `item_bytes` each) could
    /// not fit in what is left.
    pub(crate) fn count(&mut self, item_bytes: usize) -> Result<usize, RecordError> {
        self.need(4)?;
        let count = self.bytes.get_u32() as usize;
        if count.saturating_mul(item_bytes) > self.bytes.len() {
            return Err(RecordError::Count {
                count,
                remaining: self.bytes.len(),
            });
        }
        Ok(count)
    }

    pub(crate) fn string(&mut self) -> Result<String, RecordError> {
        let length = usize::from(self.u16()?);
        self.need(length)?;
        let text = std::str::from_utf8(&self.bytes[..length]).map_err(|_| RecordError::Utf8)?;
        self.bytes.advance(length);
        Ok(text.to_owned())
    }

    pub(crate) fn topic_id(&mut self) -> Result<TopicId, RecordError> {
        self.need(16)?;
        let mut id = [0u8; 16];
        self.bytes.copy_to_slice(&mut id);
        Ok(TopicId(id))
    }

    pub(crate) fn brokers(&mut self) -> Result<Vec<BrokerId>, RecordError> {
        let count = self.count(4)?;
        (0..count).map(|_| self.i32().map(BrokerId)).collect()
    }

    pub(crate) fn registration(&mut self) -> Result<BrokerRegistration, RecordError> {
        let id = BrokerId(self.i32()?);
        let incarnation = self.topic_id()?.0;
        let count = self.count(5)?;
        let listeners = (0..count)
            .map(|_| {
                Ok(Endpoint {
                    name: self.string()?,
                    host: self.string()?,
                    port: self.u16()?,
                })
            })
            .collect::<Result<Vec<_>, RecordError>>()?;
        let rack = match self.u8()? {
            0 => None,
            _ => Some(self.string()?),
        };
        Ok(BrokerRegistration {
            id,
            incarnation,
            listeners,
            rack,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn registration(id: i32) -> BrokerRegistration {
        BrokerRegistration {
            id: BrokerId(id),
            incarnation: [id as u8; 16],
            listeners: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092,
            }],
            rack: Some("r1".into()),
        }
    }

    fn every_kind() -> Vec<MetadataRecord> {
        vec![
            MetadataRecord::RegisterBroker(registration(1)),
            MetadataRecord::BrokerState {
                registration: BrokerRegistration {
                    rack: None,
                    ..registration(2)
                },
                epoch: 17,
                fenced: true,
            },
            MetadataRecord::FenceBroker {
                id: BrokerId(1),
                epoch: 3,
            },
            MetadataRecord::UnfenceBroker {
                id: BrokerId(1),
                epoch: 3,
            },
            MetadataRecord::ControlledShutdown {
                id: BrokerId(1),
                epoch: 3,
            },
            MetadataRecord::Topic {
                name: "orders".into(),
                id: TopicId([7; 16]),
            },
            MetadataRecord::Partition {
                topic: TopicId([7; 16]),
                partition: PartitionId(2),
                registration: PartitionRegistration {
                    replicas: vec![BrokerId(1), BrokerId(2), BrokerId(3)],
                    isr: vec![BrokerId(1), BrokerId(3)],
                    leader: BrokerId(3),
                    leader_epoch: LeaderEpoch(4),
                    partition_epoch: 9,
                },
            },
            MetadataRecord::RemoveTopic {
                id: TopicId([7; 16]),
            },
            MetadataRecord::TopicConfig {
                topic: "orders".into(),
                key: "cleanup.policy".into(),
                value: Some("compact, delete".into()),
            },
            MetadataRecord::TopicConfig {
                topic: "orders".into(),
                key: "retention.ms".into(),
                value: None,
            },
            MetadataRecord::BrokerConfig {
                resource: "".into(),
                key: "log.retention.ms".into(),
                value: Some("60000".into()),
            },
            MetadataRecord::BrokerConfig {
                resource: "2".into(),
                key: "message.max.bytes".into(),
                value: None,
            },
            MetadataRecord::ProducerIds {
                broker: BrokerId(2),
                next_producer_id: 5000,
            },
        ]
    }

    #[test]
    fn every_record_kind_round_trips() {
        let records = every_kind();
        assert_eq!(decode_batch(&encode_batch(&records)), Ok(records));
        assert_eq!(decode_batch(&encode_batch(&[])), Ok(vec![]));
    }

    #[test]
    fn damaged_batches_are_errors_not_panics() {
        let bytes = encode_batch(&every_kind());
        for cut in 0..bytes.len() {
            assert!(decode_batch(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = bytes.clone();
        trailing.push(0);
        assert_eq!(decode_batch(&trailing), Err(RecordError::Trailing(1)));
        assert_eq!(decode_batch(&[2, 0, 0, 0, 0]), Err(RecordError::Version(2)));
        assert_eq!(
            decode_batch(&[1, 0, 0, 0, 1, 200]),
            Err(RecordError::UnknownTag { tag: 200 })
        );
        assert_eq!(
            decode_batch(&[1, 0xff, 0xff, 0xff, 0xff]),
            Err(RecordError::Count {
                count: u32::MAX as usize,
                remaining: 0
            })
        );
    }

    proptest! {
        /// Bytes after a valid version either fail or decode to records
        /// that encode back to bytes decoding to the same records.
        #[test]
        fn arbitrary_bytes_fail_or_decode_to_records_that_round_trip(
            tail in proptest::collection::vec(any::<u8>(), 0..256),
        ) {
            let bytes = [&[VERSION][..], &tail].concat();
            if let Ok(records) = decode_batch(&bytes) {
                prop_assert_eq!(decode_batch(&encode_batch(&records)), Ok(records));
            }
        }

        #[test]
        fn arbitrary_partitions_round_trip(
            replicas in proptest::collection::vec(0i32..100, 0..8),
            leader in -1i32..100,
            epochs in (any::<i32>(), any::<i32>()),
            name in "[a-z._-]{1,40}",
        ) {
            let replicas: Vec<BrokerId> = replicas.into_iter().map(BrokerId).collect();
            let records = vec![
                MetadataRecord::Topic { name, id: TopicId([1; 16]) },
                MetadataRecord::Partition {
                    topic: TopicId([1; 16]),
                    partition: PartitionId(leader),
                    registration: PartitionRegistration {
                        isr: replicas.clone(),
                        replicas,
                        leader: BrokerId(leader),
                        leader_epoch: LeaderEpoch(epochs.0),
                        partition_epoch: epochs.1,
                    },
                },
            ];
            prop_assert_eq!(decode_batch(&encode_batch(&records)), Ok(records));
        }
    }
}
