//! A one-node data directory from before a one-node broker ran a quorum of
//! its own: its topics (with their ids, configs and partition counts), its
//! dynamic broker configs and its producer-id block become the first
//! metadata snapshot of its quorum, so the node starts as the cluster it
//! always was and every log it holds is still its topics'.
//!
//! The broker writes the snapshot before its voter starts, and only into a
//! data directory without a metadata log: a restart after the migration
//! finds the log and leaves it.

use raft::eraftpb::{ConfState, HardState, Snapshot};

use crate::cluster::broker_dynamic::DynamicConfigs;
use crate::cluster::image::LocalImage;
use crate::cluster::quorum::raft_id;
use crate::cluster::records::{MetadataRecord, PartitionRegistration, encode_batch};
use crate::types::{BrokerId, LeaderEpoch, PartitionId};

/// The leader epoch a one-node broker served every partition at.
pub const ONE_NODE_LEADER_EPOCH: LeaderEpoch = LeaderEpoch(0);

/// The metadata log offset (and Raft index) of the migrated snapshot.
pub const MIGRATED_OFFSET: u64 = 1;

/// What a one-node directory held, as metadata records: each topic led by
/// `node` alone at the epoch it was served at; its configs; the dynamic
/// broker configs; and, when it had handed out producer ids, the first id
/// it had not reserved.
pub fn one_node_records(
    image: &LocalImage,
    node: BrokerId,
    next_producer_id: Option<i64>,
) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for topic in image.topics.values() {
        records.push(MetadataRecord::Topic {
            name: topic.name.clone(),
            id: topic.id,
        });
        records.extend(
            (0..topic.partitions.len()).map(|index| MetadataRecord::Partition {
                topic: topic.id,
                partition: PartitionId(index as i32),
                registration: PartitionRegistration {
                    replicas: vec![node],
                    isr: vec![node],
                    leader: node,
                    leader_epoch: ONE_NODE_LEADER_EPOCH,
                    partition_epoch: 0,
                },
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
    records.extend(broker_config_records(&image.broker_configs));
    records.extend(
        next_producer_id.map(|next_producer_id| MetadataRecord::ProducerIds {
            broker: node,
            next_producer_id,
        }),
    );
    records
}

fn broker_config_records(configs: &DynamicConfigs) -> impl Iterator<Item = MetadataRecord> + '_ {
    configs.iter().flat_map(|(resource, settings)| {
        settings
            .iter()
            .map(|(key, value)| MetadataRecord::BrokerConfig {
                resource: resource.clone(),
                key: key.clone(),
                value: Some(value.clone()),
            })
    })
}

/// The quorum state of `node`, sole voter, whose log begins with a
/// committed snapshot of `records` at [`MIGRATED_OFFSET`] (term 1): the
/// hard state and snapshot its disk then holds.
pub fn first_snapshot(node: BrokerId, records: &[MetadataRecord]) -> (HardState, Snapshot) {
    let mut snapshot = Snapshot::default();
    snapshot.set_data(encode_batch(records).into());
    let metadata = snapshot.mut_metadata();
    metadata.index = MIGRATED_OFFSET;
    metadata.term = 1;
    metadata.set_conf_state(ConfState::from((vec![raft_id(node)], vec![])));
    let hard_state = HardState {
        term: 1,
        vote: 0,
        commit: MIGRATED_OFFSET,
        ..HardState::default()
    };
    (hard_state, snapshot)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::cluster::image::{ShardId, TopicId, TopicMetadata};
    use crate::cluster::quorum::{ControllerNode, MetadataStore, QuorumConfig};

    fn one_node_image() -> LocalImage {
        let mut image = LocalImage::default();
        image.topics.insert(
            "orders".into(),
            TopicMetadata {
                name: "orders".into(),
                id: TopicId([7; 16]),
                partitions: vec![Some(ShardId(1)), Some(ShardId(0)), Some(ShardId(1))],
                configs: BTreeMap::from([("cleanup.policy".into(), "compact".into())]),
            },
        );
        image.topics.insert(
            "__consumer_offsets".into(),
            TopicMetadata {
                name: "__consumer_offsets".into(),
                id: TopicId([9; 16]),
                partitions: vec![Some(ShardId(0)); 50],
                configs: BTreeMap::new(),
            },
        );
        image.broker_configs.insert(
            String::new(),
            BTreeMap::from([("log.retention.ms".into(), "60000".into())]),
        );
        image
    }

    /// A voter started from the migrated snapshot holds every topic with
    /// its id, partition count and configs, led by the node at the epoch it
    /// served them at; the broker configs; and the producer-id block.
    #[test]
    fn a_voter_starts_from_the_one_node_directory() {
        let node = BrokerId(3);
        let records = one_node_records(&one_node_image(), node, Some(5_000));
        let (hard_state, snapshot) = first_snapshot(node, &records);
        let store = MetadataStore::restore(&[raft_id(node)], hard_state, snapshot, Vec::new());
        let config = QuorumConfig {
            node,
            voters: vec![node],
            session_timeout_ms: 9_000,
            snapshot_after_bytes: 1 << 20,
            leader_balance_interval_ms: None,
        };
        let mut controller = ControllerNode::new(config, store).unwrap();
        while controller.ready().unwrap().is_some() {}
        assert!(controller.is_leader());
        let image = controller.image();
        assert!(
            image.offset > MIGRATED_OFFSET,
            "the leader's own entry follows"
        );
        let orders = image.topic_by_name("orders").unwrap();
        assert_eq!(orders.id, TopicId([7; 16]));
        assert_eq!(orders.partitions.len(), 3);
        assert_eq!(orders.configs.get("cleanup.policy").unwrap(), "compact");
        for registration in &orders.partitions {
            assert_eq!(registration.leader, node);
            assert_eq!(registration.isr, [node]);
            assert_eq!(registration.leader_epoch, ONE_NODE_LEADER_EPOCH);
        }
        assert_eq!(
            image
                .topic_by_name("__consumer_offsets")
                .unwrap()
                .partitions
                .len(),
            50
        );
        assert_eq!(
            image.broker_configs[""].get("log.retention.ms").unwrap(),
            "60000"
        );
        assert_eq!(image.next_producer_id, 5_000);
    }

    /// An empty directory migrates to nothing but the producer-id block
    /// when one was taken.
    #[test]
    fn an_empty_directory_has_no_records() {
        assert!(one_node_records(&LocalImage::default(), BrokerId(0), None).is_empty());
        assert_eq!(
            one_node_records(&LocalImage::default(), BrokerId(0), Some(1_000)),
            [MetadataRecord::ProducerIds {
                broker: BrokerId(0),
                next_producer_id: 1_000
            }]
        );
    }
}
