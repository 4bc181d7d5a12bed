//! The cluster image: what the metadata log says at one offset. Brokers
//! with their epochs and fencing, topics with their partitions'
//! registrations (replicas, ISR, leader, epochs) and config overrides, the
//! producer-id high-water mark. Every broker applies the same committed
//! batches in the same order, so every broker holds the same image at the
//! same offset; the simulator checks exactly that with [`ClusterImage::digest`].
//!
//! Which local shard hosts a replica is not here: that is each broker's own
//! decision ([`crate::cluster::image`]).

use std::collections::BTreeMap;

use thiserror::Error;

use crate::cluster::broker_dynamic::DynamicConfigs;
use crate::cluster::image::TopicId;
use crate::cluster::records::{BrokerRegistration, MetadataRecord, PartitionRegistration};
use crate::types::{BrokerId, PartitionId};

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BrokerState {
    pub registration: BrokerRegistration,
    /// The offset of the entry that registered this incarnation.
    pub epoch: i64,
    /// A fenced broker leads nothing and is not listed as live.
    pub fenced: bool,
    /// It asked to shut down: still live (it serves until it stops), but
    /// it may no longer lead or join an ISR.
    pub in_controlled_shutdown: bool,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicRegistration {
    pub name: String,
    pub id: TopicId,
    /// By partition number.
    pub partitions: Vec<PartitionRegistration>,
    pub configs: BTreeMap<String, String>,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ClusterImage {
    /// The offset of the last batch applied (0: none yet; Raft's first
    /// index is 1).
    pub offset: u64,
    pub brokers: BTreeMap<BrokerId, BrokerState>,
    pub topics: BTreeMap<TopicId, TopicRegistration>,
    names: BTreeMap<String, TopicId>,
    /// Producer ids below this are handed out.
    pub next_producer_id: i64,
    /// Dynamic broker configs (KIP-226), by resource.
    pub broker_configs: DynamicConfigs,
}

/// Leader elections a batch committed: partitions of existing topics
/// whose leader moved to a live broker (the first registration of a new
/// partition is no election, nor is losing a leader). Kafka's controller
/// counts these as `LeaderElectionRateAndTimeMs` and
/// `UncleanLeaderElectionsPerSec`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LeaderElections {
    /// The new leader was in the ISR.
    pub clean: u64,
    /// It was not (`unclean.leader.election.enable`).
    pub unclean: u64,
}

impl LeaderElections {
    pub fn add(&mut self, other: LeaderElections) {
        self.clean += other.clean;
        self.unclean += other.unclean;
    }
}

/// A committed record that does not fit the image. The controller
/// validates against the same image before it proposes, so this is a bug
/// (or a damaged log), never a client's doing.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ApplyError {
    #[error("metadata offset {offset} is not after {applied}")]
    OutOfOrder { offset: u64, applied: u64 },
    #[error("record at offset {offset} names unknown broker {broker}")]
    UnknownBroker { offset: u64, broker: BrokerId },
    #[error("record at offset {offset} names an unknown topic")]
    UnknownTopic { offset: u64 },
    #[error("record at offset {offset} creates topic {name:?}, whose name or id exists")]
    TopicExists { offset: u64, name: String },
    #[error("record at offset {offset} skips partitions of a topic")]
    PartitionGap { offset: u64 },
}

impl ClusterImage {
    /// Applies one committed batch at `offset` (its Raft index). On an
    /// error the image may hold part of the batch: the caller stops
    /// applying and reports the log as damaged. Answers the leader
    /// elections the batch made.
    pub fn apply(
        &mut self,
        offset: u64,
        records: &[MetadataRecord],
    ) -> Result<LeaderElections, ApplyError> {
        if offset <= self.offset {
            return Err(ApplyError::OutOfOrder {
                offset,
                applied: self.offset,
            });
        }
        let mut elections = LeaderElections::default();
        for record in records {
            self.count_election(record, &mut elections);
            self.apply_record(offset, record)?;
        }
        self.offset = offset;
        Ok(elections)
    }

    /// Counts `record` in `elections` if, applied to this image, it moves
    /// an existing partition's leader to a broker.
    fn count_election(&self, record: &MetadataRecord, elections: &mut LeaderElections) {
        let MetadataRecord::Partition {
            topic,
            partition,
            registration,
        } = record
        else {
            return;
        };
        let current = usize::try_from(partition.0).ok().and_then(|index| {
            self.topics
                .get(topic)
                .and_then(|topic| topic.partitions.get(index))
        });
        let Some(current) = current else {
            return;
        };
        if registration.leader == BrokerId::NONE || registration.leader == current.leader {
            return;
        }
        if current.isr.contains(&registration.leader) {
            elections.clean += 1;
        } else {
            elections.unclean += 1;
        }
    }

    fn apply_record(&mut self, offset: u64, record: &MetadataRecord) -> Result<(), ApplyError> {
        match record {
            MetadataRecord::RegisterBroker(registration) => {
                self.brokers.insert(
                    registration.id,
                    BrokerState {
                        registration: registration.clone(),
                        epoch: offset as i64,
                        fenced: true,
                        in_controlled_shutdown: false,
                    },
                );
            }
            MetadataRecord::BrokerState {
                registration,
                epoch,
                fenced,
            } => {
                self.brokers.insert(
                    registration.id,
                    BrokerState {
                        registration: registration.clone(),
                        epoch: *epoch,
                        fenced: *fenced,
                        in_controlled_shutdown: false,
                    },
                );
            }
            MetadataRecord::FenceBroker { id, epoch }
            | MetadataRecord::UnfenceBroker { id, epoch }
            | MetadataRecord::ControlledShutdown { id, epoch } => {
                let broker = self
                    .brokers
                    .get_mut(id)
                    .filter(|broker| broker.epoch == *epoch)
                    .ok_or(ApplyError::UnknownBroker {
                        offset,
                        broker: *id,
                    })?;
                match record {
                    MetadataRecord::FenceBroker { .. } => broker.fenced = true,
                    // A broker that comes back unfenced is no longer leaving.
                    MetadataRecord::UnfenceBroker { .. } => {
                        broker.fenced = false;
                        broker.in_controlled_shutdown = false;
                    }
                    _ => broker.in_controlled_shutdown = true,
                }
            }
            MetadataRecord::Topic { name, id } => {
                if self.names.contains_key(name) || self.topics.contains_key(id) {
                    return Err(ApplyError::TopicExists {
                        offset,
                        name: name.clone(),
                    });
                }
                self.names.insert(name.clone(), *id);
                self.topics.insert(
                    *id,
                    TopicRegistration {
                        name: name.clone(),
                        id: *id,
                        partitions: Vec::new(),
                        configs: BTreeMap::new(),
                    },
                );
            }
            MetadataRecord::Partition {
                topic,
                partition,
                registration,
            } => {
                let topic = self
                    .topics
                    .get_mut(topic)
                    .ok_or(ApplyError::UnknownTopic { offset })?;
                let index = usize::try_from(partition.0)
                    .map_err(|_| ApplyError::PartitionGap { offset })?;
                match index.cmp(&topic.partitions.len()) {
                    std::cmp::Ordering::Less => topic.partitions[index] = registration.clone(),
                    std::cmp::Ordering::Equal => topic.partitions.push(registration.clone()),
                    std::cmp::Ordering::Greater => return Err(ApplyError::PartitionGap { offset }),
                }
            }
            MetadataRecord::RemoveTopic { id } => {
                let topic = self
                    .topics
                    .remove(id)
                    .ok_or(ApplyError::UnknownTopic { offset })?;
                self.names.remove(&topic.name);
            }
            MetadataRecord::TopicConfig { topic, key, value } => {
                let id = self
                    .names
                    .get(topic)
                    .ok_or(ApplyError::UnknownTopic { offset })?;
                let configs = &mut self
                    .topics
                    .get_mut(id)
                    .expect("names and topics agree")
                    .configs;
                match value {
                    Some(value) => configs.insert(key.clone(), value.clone()),
                    None => configs.remove(key),
                };
            }
            MetadataRecord::ProducerIds {
                next_producer_id, ..
            } => {
                self.next_producer_id = self.next_producer_id.max(*next_producer_id);
            }
            MetadataRecord::BrokerConfig {
                resource,
                key,
                value,
            } => {
                let configs = self.broker_configs.entry(resource.clone()).or_default();
                match value {
                    Some(value) => configs.insert(key.clone(), value.clone()),
                    None => configs.remove(key),
                };
                if configs.is_empty() {
                    self.broker_configs.remove(resource);
                }
            }
        }
        Ok(())
    }

    pub fn topic_by_name(&self, name: &str) -> Option<&TopicRegistration> {
        self.names.get(name).and_then(|id| self.topics.get(id))
    }

    pub fn partition(
        &self,
        topic: TopicId,
        partition: PartitionId,
    ) -> Option<&PartitionRegistration> {
        let index = usize::try_from(partition.0).ok()?;
        self.topics.get(&topic)?.partitions.get(index)
    }

    /// Registered, unfenced brokers, by id.
    pub fn live_brokers(&self) -> impl Iterator<Item = &BrokerState> + '_ {
        self.brokers.values().filter(|broker| !broker.fenced)
    }

    /// Whether `broker` may lead, take new replicas or join an ISR:
    /// registered, unfenced and not shutting down (Kafka's
    /// `ClusterControlManager.isActive`).
    pub fn is_active(&self, broker: BrokerId) -> bool {
        self.brokers
            .get(&broker)
            .is_some_and(|state| !state.fenced && !state.in_controlled_shutdown)
    }

    /// Whether `broker` leads any partition.
    pub fn leads_any(&self, broker: BrokerId) -> bool {
        self.topics.values().any(|topic| {
            topic
                .partitions
                .iter()
                .any(|partition| partition.leader == broker)
        })
    }

    /// The records that rebuild this image from nothing: a snapshot's body.
    pub fn to_records(&self) -> Vec<MetadataRecord> {
        let mut records = Vec::new();
        for broker in self.brokers.values() {
            records.push(MetadataRecord::BrokerState {
                registration: broker.registration.clone(),
                epoch: broker.epoch,
                fenced: broker.fenced,
            });
            if broker.in_controlled_shutdown {
                records.push(MetadataRecord::ControlledShutdown {
                    id: broker.registration.id,
                    epoch: broker.epoch,
                });
            }
        }
        for topic in self.topics.values() {
            records.push(MetadataRecord::Topic {
                name: topic.name.clone(),
                id: topic.id,
            });
            records.extend(
                topic
                    .partitions
                    .iter()
                    .enumerate()
                    .map(|(index, registration)| MetadataRecord::Partition {
                        topic: topic.id,
                        partition: PartitionId(index as i32),
                        registration: registration.clone(),
                    }),
            );
            records.extend(
                topic
                    .configs
                    .iter()
                    .map(|(key, value)| MetadataRecord::TopicConfig {
                        topic: topic.name.clone(),
                        key: key.clone(),
                        value: Some(value.clone()),
                    }),
            );
        }
        for (resource, configs) in &self.broker_configs {
            records.extend(
                configs
                    .iter()
                    .map(|(key, value)| MetadataRecord::BrokerConfig {
                        resource: resource.clone(),
                        key: key.clone(),
                        value: Some(value.clone()),
                    }),
            );
        }
        if self.next_producer_id > 0 {
            records.push(MetadataRecord::ProducerIds {
                broker: BrokerId::NONE,
                next_producer_id: self.next_producer_id,
            });
        }
        records
    }

    /// The image a snapshot taken at `offset` describes.
    pub fn from_snapshot(
        offset: u64,
        records: &[MetadataRecord],
    ) -> Result<ClusterImage, ApplyError> {
        let mut image = ClusterImage::default();
        if offset > 0 {
            image.apply(offset, records)?;
        }
        Ok(image)
    }

    /// A fingerprint of the whole image (FNV-1a over its snapshot
    /// encoding): equal images, equal digests; used to compare brokers.
    pub fn digest(&self) -> u64 {
        let bytes = crate::cluster::records::encode_batch(&self.to_records());
        let mut hash = 0xcbf2_9ce4_8422_2325u64 ^ self.offset;
        for byte in bytes {
            hash = (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
        }
        hash
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::records::Endpoint;
    use crate::types::LeaderEpoch;

    fn registration(id: i32) -> BrokerRegistration {
        BrokerRegistration {
            id: BrokerId(id),
            incarnation: [id as u8; 16],
            listeners: vec![Endpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9090 + id as u16,
            }],
            rack: None,
        }
    }

    fn partition(leader: i32) -> PartitionRegistration {
        PartitionRegistration {
            replicas: vec![BrokerId(leader)],
            isr: vec![BrokerId(leader)],
            leader: BrokerId(leader),
            leader_epoch: LeaderEpoch(0),
            partition_epoch: 0,
        }
    }

    fn built() -> ClusterImage {
        let mut image = ClusterImage::default();
        image
            .apply(1, &[MetadataRecord::RegisterBroker(registration(1))])
            .unwrap();
        image
            .apply(
                2,
                &[
                    MetadataRecord::UnfenceBroker {
                        id: BrokerId(1),
                        epoch: 1,
                    },
                    MetadataRecord::Topic {
                        name: "orders".into(),
                        id: TopicId([1; 16]),
                    },
                    MetadataRecord::Partition {
                        topic: TopicId([1; 16]),
                        partition: PartitionId(0),
                        registration: partition(1),
                    },
                    MetadataRecord::TopicConfig {
                        topic: "orders".into(),
                        key: "retention.ms".into(),
                        value: Some("1000".into()),
                    },
                    MetadataRecord::ProducerIds {
                        broker: BrokerId(1),
                        next_producer_id: 1000,
                    },
                ],
            )
            .unwrap();
        image
    }

    #[test]
    fn a_registration_gets_its_offset_as_epoch_and_starts_fenced() {
        let mut image = ClusterImage::default();
        image
            .apply(5, &[MetadataRecord::RegisterBroker(registration(3))])
            .unwrap();
        assert_eq!(image.brokers[&BrokerId(3)].epoch, 5);
        assert!(image.brokers[&BrokerId(3)].fenced);
        assert_eq!(image.live_brokers().count(), 0);
        // An unfence carrying an older epoch is a damaged log.
        assert_eq!(
            image.apply(
                6,
                &[MetadataRecord::UnfenceBroker {
                    id: BrokerId(3),
                    epoch: 4
                }]
            ),
            Err(ApplyError::UnknownBroker {
                offset: 6,
                broker: BrokerId(3)
            })
        );
    }

    #[test]
    fn a_snapshot_rebuilds_the_same_image() {
        let image = built();
        assert_eq!(image.live_brokers().count(), 1);
        assert_eq!(
            image.topic_by_name("orders").unwrap().configs["retention.ms"],
            "1000"
        );
        let rebuilt = ClusterImage::from_snapshot(image.offset, &image.to_records()).unwrap();
        assert_eq!(rebuilt, image);
        assert_eq!(rebuilt.digest(), image.digest());
        let mut later = image.clone();
        later
            .apply(
                3,
                &[MetadataRecord::TopicConfig {
                    topic: "orders".into(),
                    key: "retention.ms".into(),
                    value: None,
                }],
            )
            .unwrap();
        assert_ne!(later.digest(), image.digest());
    }

    /// Dynamic broker configs are kept by resource, removed with their
    /// last key, and carried by a snapshot.
    #[test]
    fn broker_configs_follow_their_records_and_snapshots() {
        let mut image = built();
        let config =
            |resource: &str, key: &str, value: Option<&str>| MetadataRecord::BrokerConfig {
                resource: resource.into(),
                key: key.into(),
                value: value.map(str::to_owned),
            };
        image
            .apply(
                3,
                &[
                    config("", "log.retention.ms", Some("1000")),
                    config("1", "message.max.bytes", Some("2000")),
                ],
            )
            .unwrap();
        assert_eq!(image.broker_configs[""]["log.retention.ms"], "1000");
        let rebuilt = ClusterImage::from_snapshot(image.offset, &image.to_records()).unwrap();
        assert_eq!(rebuilt, image);
        image
            .apply(4, &[config("1", "message.max.bytes", None)])
            .unwrap();
        assert!(!image.broker_configs.contains_key("1"));
        assert_ne!(image.digest(), rebuilt.digest());
    }

    #[test]
    fn a_broker_in_controlled_shutdown_is_live_but_not_active_until_unfenced() {
        let mut image = built();
        assert!(image.is_active(BrokerId(1)));
        assert!(image.leads_any(BrokerId(1)));
        let shutting_down = MetadataRecord::ControlledShutdown {
            id: BrokerId(1),
            epoch: 1,
        };
        image.apply(3, &[shutting_down]).unwrap();
        assert_eq!(image.live_brokers().count(), 1);
        assert!(!image.is_active(BrokerId(1)));
        assert!(!image.is_active(BrokerId(9)), "unregistered");
        // A snapshot keeps the state.
        let rebuilt = ClusterImage::from_snapshot(image.offset, &image.to_records()).unwrap();
        assert_eq!(rebuilt, image);
        let fence = MetadataRecord::FenceBroker {
            id: BrokerId(1),
            epoch: 1,
        };
        let unfence = MetadataRecord::UnfenceBroker {
            id: BrokerId(1),
            epoch: 1,
        };
        image.apply(4, &[fence]).unwrap();
        assert!(image.brokers[&BrokerId(1)].in_controlled_shutdown);
        image.apply(5, &[unfence]).unwrap();
        assert!(image.is_active(BrokerId(1)));
    }

    #[test]
    fn records_that_do_not_fit_are_errors() {
        let mut image = built();
        assert!(matches!(
            image.apply(2, &[]),
            Err(ApplyError::OutOfOrder { .. })
        ));
        assert!(matches!(
            image.apply(
                3,
                &[MetadataRecord::Topic {
                    name: "orders".into(),
                    id: TopicId([2; 16])
                }]
            ),
            Err(ApplyError::TopicExists { .. })
        ));
        assert!(matches!(
            image.apply(
                4,
                &[MetadataRecord::Partition {
                    topic: TopicId([1; 16]),
                    partition: PartitionId(5),
                    registration: partition(1)
                }]
            ),
            Err(ApplyError::PartitionGap { .. })
        ));
        assert!(matches!(
            image.apply(
                5,
                &[MetadataRecord::RemoveTopic {
                    id: TopicId([9; 16])
                }]
            ),
            Err(ApplyError::UnknownTopic { .. })
        ));
        image
            .apply(
                6,
                &[MetadataRecord::RemoveTopic {
                    id: TopicId([1; 16]),
                }],
            )
            .unwrap();
        assert!(image.topic_by_name("orders").is_none());
    }
}
