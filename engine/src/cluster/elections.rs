//! Leader elections and ISR changes when a broker leaves (fenced, shutting
//! down, or replaced by a new incarnation) or comes back (unfenced): pure
//! functions of the cluster image that return the Partition records to
//! propose, in the same batch as the broker's own record.
//!
//! The rule is Kafka's (`PartitionChangeBuilder` with an ONLINE or UNCLEAN
//! election, driven by `ReplicationControlManager.generateLeaderAndIsrUpdates`):
//! - a leaving broker leaves the ISR of every partition it is in, except
//!   that an ISR is never emptied: the last member stays (Kafka ≥ 3.7 would
//!   move it to the eligible leader replicas of KIP-966; Brook has no ELR);
//! - a current leader that is still in the ISR and may lead keeps leading;
//!   otherwise the first replica, in replica order, that is in the new ISR
//!   and may lead (registered, unfenced, not shutting down, not leaving);
//! - with none, the partition is offline (leader [`BrokerId::NONE`]), unless
//!   the topic sets `unclean.leader.election.enable=true`: then the first
//!   replica that may lead, in sync or not, leads with the ISR just itself
//!   (its log is the truth from then on: records only the old ISR had are
//!   lost, which is what "unclean" means);
//! - a leader change bumps the leader epoch; any change bumps the partition
//!   epoch (Kafka's `PartitionRegistration.merge`); an ISR shrink alone
//!   does not bump the leader epoch (metadata version 3.6 and later).
//!
//! Whether a topic's elections may be unclean: its own
//! `unclean.leader.election.enable`, else the cluster-wide dynamic default
//! of the broker setting of that name (KRaft's order), else false. A
//! broker's file setting is not consulted: it would differ from one
//! controller to the next.
//!
//! Leadership also moves back to a partition's preferred replica (its first)
//! once that replica is in the ISR and may lead: the controller's periodic
//! balancing (`auto.leader.rebalance.enable`, [`balance_leaders`]) and
//! ElectLeaders ([`elect_leader`]), as Kafka's PREFERRED election. Those
//! are in `elections/preferred.rs`, re-exported here.

mod preferred;

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::broker_dynamic::CLUSTER_DEFAULT;
use crate::cluster::cluster_image::{ClusterImage, TopicRegistration};
use crate::cluster::image::TopicId;
use crate::cluster::records::{MetadataRecord, PartitionRegistration};
use crate::types::{BrokerId, LeaderEpoch, PartitionId, TopicPartition};

pub use preferred::{
    ELECTIONS_PER_BALANCE_MAX, ElectionType, PartitionElection, TopicElections, balance_leaders,
    elect_leader, elect_leaders, elect_preferred, leaders_imbalanced,
};

/// The topic config that allows electing a replica outside the ISR.
pub const UNCLEAN_LEADER_ELECTION_ENABLE: &str = "unclean.leader.election.enable";

/// Per broker, the partitions of its failed log directories, as its last
/// heartbeat named them: it may not lead them. The active controller keeps
/// this in memory (Kafka keeps the directories in the metadata log, KIP-858);
/// a new controller learns it from the next heartbeats, within an interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OfflineReplicas(BTreeMap<BrokerId, BTreeSet<TopicPartition>>);

impl OfflineReplicas {
    /// What `broker`'s heartbeat names (nothing: it has none).
    pub fn report(&mut self, broker: BrokerId, partitions: &[TopicPartition]) {
        if partitions.is_empty() {
            self.0.remove(&broker);
        } else {
            self.0.insert(broker, partitions.iter().cloned().collect());
        }
    }

    /// Whether `broker`'s replica of `topic`'s partition `index` is offline.
    pub fn holds(&self, broker: BrokerId, topic: &str, index: usize) -> bool {
        self.0.get(&broker).is_some_and(|partitions| {
            partitions
                .iter()
                .any(|tp| tp.topic == topic && usize::try_from(tp.partition.0) == Ok(index))
        })
    }
}

/// Which replicas an election may choose from when no ISR member can lead.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Election {
    /// ISR members only: the partition goes offline rather than lose data.
    Clean,
    /// Any replica that may lead, with the ISR reset to it.
    Unclean,
}

impl Election {
    /// The topic's `unclean.leader.election.enable`, else the cluster-wide
    /// dynamic default's (`kafka-configs --entity-default`), else false.
    pub fn of_topic(topic: &TopicRegistration, image: &ClusterImage) -> Election {
        let cluster_default = image
            .broker_configs
            .get(CLUSTER_DEFAULT)
            .and_then(|configs| configs.get(UNCLEAN_LEADER_ELECTION_ENABLE));
        match topic
            .configs
            .get(UNCLEAN_LEADER_ELECTION_ENABLE)
            .or(cluster_default)
        {
            Some(value) if value.trim().eq_ignore_ascii_case("true") => Election::Unclean,
            _ => Election::Clean,
        }
    }
}

/// `current` with the ISR `target_isr` (kept as it is when empty: an ISR
/// is never emptied) and a leader elected by the rule above among the
/// replicas for which `may_lead` holds; `None` when nothing changes.
pub fn change_partition(
    current: &PartitionRegistration,
    target_isr: Vec<BrokerId>,
    may_lead: impl Fn(BrokerId) -> bool,
    election: Election,
) -> Option<PartitionRegistration> {
    // An empty target elects no one in sync (Kafka elects from the target
    // ISR), but the ISR recorded keeps its last member.
    let in_sync = |broker: BrokerId| target_isr.contains(&broker) && may_lead(broker);
    let in_sync_leader = if in_sync(current.leader) {
        Some(current.leader)
    } else {
        current
            .replicas
            .iter()
            .copied()
            .find(|replica| in_sync(*replica))
    };
    let kept_isr = if target_isr.is_empty() {
        current.isr.clone()
    } else {
        target_isr
    };
    let unclean_leader = || {
        current
            .replicas
            .iter()
            .copied()
            .find(|replica| may_lead(*replica))
    };
    let (leader, isr) = match (in_sync_leader, election) {
        (Some(leader), _) => (leader, kept_isr),
        (None, Election::Unclean) => match unclean_leader() {
            Some(leader) => (leader, vec![leader]),
            None => (BrokerId::NONE, kept_isr),
        },
        (None, Election::Clean) => (BrokerId::NONE, kept_isr),
    };
    if leader == current.leader && isr == current.isr {
        return None;
    }
    let leader_epoch = if leader == current.leader {
        current.leader_epoch
    } else {
        LeaderEpoch(current.leader_epoch.0 + 1)
    };
    let changed = PartitionRegistration {
        replicas: current.replicas.clone(),
        isr,
        leader,
        leader_epoch,
        partition_epoch: current.partition_epoch + 1,
    };
    debug_assert!(changed.leader == BrokerId::NONE || changed.isr.contains(&changed.leader));
    debug_assert!(!changed.isr.is_empty() || current.isr.is_empty());
    Some(changed)
}

/// The records that take `broker` out of every ISR it is in and give its
/// leaderships to others, for a broker being fenced or shutting down.
/// Brokers in `leaving` (which holds `broker`) may not lead either: they
/// are leaving in the same batch.
pub fn broker_leaves(
    image: &ClusterImage,
    broker: BrokerId,
    leaving: &BTreeSet<BrokerId>,
) -> Vec<MetadataRecord> {
    let may_lead = |replica: BrokerId| !leaving.contains(&replica) && image.is_active(replica);
    changed_partitions(image, |current| {
        if !current.isr.contains(&broker) && current.leader != broker {
            return None;
        }
        Some(isr_without(current, broker))
    })
    .filter_map(|(topic, index, current, target_isr, election)| {
        let changed = change_partition(current, target_isr, may_lead, election)?;
        Some(partition_record(topic, index, changed))
    })
    .collect()
}

/// Fence records for `brokers` (id, epoch), each preceded by the records
/// that move its leaderships and ISR memberships ([`broker_leaves`]), one
/// broker after another as Kafka fences them, so an ISR that loses two
/// brokers keeps the last one. None of them is elected.
pub fn fence_brokers(image: &ClusterImage, brokers: &[(BrokerId, i64)]) -> Vec<MetadataRecord> {
    let leaving: BTreeSet<BrokerId> = brokers.iter().map(|(id, _)| *id).collect();
    let mut records = Vec::new();
    let mut scratch = None;
    for (position, (id, epoch)) in brokers.iter().enumerate() {
        let current = scratch.as_ref().unwrap_or(image);
        let mut batch = broker_leaves(current, *id, &leaving);
        batch.push(MetadataRecord::FenceBroker {
            id: *id,
            epoch: *epoch,
        });
        if position + 1 < brokers.len() {
            // The next broker's changes start from this one's.
            let next = scratch.get_or_insert_with(|| image.clone());
            let offset = next.offset + 1;
            next.apply(offset, &batch)
                .expect("records built from an image apply to it");
        }
        records.extend(batch);
    }
    records
}

/// The elections for leaderless partitions when `returning` is unfenced
/// (Kafka's "elect leaders for offline partitions"): it may lead although
/// the image still shows it fenced, except the partitions of its failed
/// log directories, `offline`.
pub fn elect_offline_partitions(
    image: &ClusterImage,
    returning: BrokerId,
    offline: &[TopicPartition],
) -> Vec<MetadataRecord> {
    let offline_here = |topic: TopicId, index: usize| {
        image.topics.get(&topic).is_some_and(|registered| {
            offline.iter().any(|tp| {
                tp.topic == registered.name && usize::try_from(tp.partition.0) == Ok(index)
            })
        })
    };
    changed_partitions(image, |current| {
        (current.leader == BrokerId::NONE).then(|| current.isr.clone())
    })
    .filter_map(|(topic, index, current, target_isr, election)| {
        let returns = !offline_here(topic, index);
        let may_lead =
            |replica: BrokerId| (returns && replica == returning) || image.is_active(replica);
        let changed = change_partition(current, target_isr, may_lead, election)?;
        Some(partition_record(topic, index, changed))
    })
    .collect()
}

/// The records that take `broker`'s replicas of the `offline` partitions
/// (those in a log directory that failed on it) out of their ISRs and give
/// their leaderships to other ISR members, as Kafka's controller does when
/// a heartbeat reports offline log directories (KIP-858). An ISR keeps its
/// last member, as when a broker is fenced: a partition whose only
/// in-sync replica failed has no leader (unless its elections may be
/// unclean). The broker's other partitions are untouched. Once applied,
/// the same report changes nothing.
pub fn replicas_offline(
    image: &ClusterImage,
    broker: BrokerId,
    offline: &[TopicPartition],
) -> Vec<MetadataRecord> {
    let may_lead = |replica: BrokerId| replica != broker && image.is_active(replica);
    let mut records = Vec::new();
    for topic_partition in offline {
        let Some(topic) = image.topic_by_name(&topic_partition.topic) else {
            continue;
        };
        let Ok(index) = usize::try_from(topic_partition.partition.0) else {
            continue;
        };
        let Some(current) = topic.partitions.get(index) else {
            continue;
        };
        if !current.isr.contains(&broker) && current.leader != broker {
            continue;
        }
        let election = Election::of_topic(topic, image);
        let without = isr_without(current, broker);
        if let Some(changed) = change_partition(current, without, may_lead, election) {
            records.push(partition_record(topic.id, index, changed));
        }
    }
    records
}

type Candidate<'a> = (
    crate::cluster::image::TopicId,
    usize,
    &'a PartitionRegistration,
    Vec<BrokerId>,
    Election,
);

/// Every partition, in topic-id and partition order, for which `target`
/// gives a target ISR, with its topic's election.
fn changed_partitions<'a>(
    image: &'a ClusterImage,
    target: impl Fn(&PartitionRegistration) -> Option<Vec<BrokerId>>,
) -> impl Iterator<Item = Candidate<'a>> + 'a {
    let mut candidates = Vec::new();
    for topic in image.topics.values() {
        let election = Election::of_topic(topic, image);
        for (index, current) in topic.partitions.iter().enumerate() {
            if let Some(target_isr) = target(current) {
                candidates.push((topic.id, index, current, target_isr, election));
            }
        }
    }
    candidates.into_iter()
}

/// `current`'s ISR without `broker`.
fn isr_without(current: &PartitionRegistration, broker: BrokerId) -> Vec<BrokerId> {
    current
        .isr
        .iter()
        .copied()
        .filter(|member| *member != broker)
        .collect()
}

fn partition_record(
    topic: TopicId,
    index: usize,
    registration: PartitionRegistration,
) -> MetadataRecord {
    MetadataRecord::Partition {
        topic,
        partition: PartitionId(index as i32),
        registration,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::controller::tests::three_brokers;

    pub(super) const TOPIC: TopicId = TopicId([1; 16]);

    pub(super) fn brokers(ids: &[i32]) -> Vec<BrokerId> {
        ids.iter().copied().map(BrokerId).collect()
    }

    /// Brokers 1..=3 (epochs 1..=3) unfenced, and topic "t" with one
    /// partition at epochs 0.
    pub(super) fn image(
        replicas: &[i32],
        isr: &[i32],
        leader: i32,
        election: Election,
    ) -> ClusterImage {
        let mut image = three_brokers();
        let mut records = vec![
            MetadataRecord::Topic {
                name: "t".into(),
                id: TOPIC,
            },
            MetadataRecord::Partition {
                topic: TOPIC,
                partition: PartitionId(0),
                registration: PartitionRegistration {
                    replicas: brokers(replicas),
                    isr: brokers(isr),
                    leader: BrokerId(leader),
                    leader_epoch: LeaderEpoch(0),
                    partition_epoch: 0,
                },
            },
        ];
        if election == Election::Unclean {
            records.push(MetadataRecord::TopicConfig {
                topic: "t".into(),
                key: UNCLEAN_LEADER_ELECTION_ENABLE.into(),
                value: Some("true".into()),
            });
        }
        image.apply(5, &records).unwrap();
        image
    }

    pub(super) fn fence(image: &mut ClusterImage, ids: &[i32]) -> Vec<MetadataRecord> {
        let fenced: Vec<(BrokerId, i64)> =
            ids.iter().map(|id| (BrokerId(*id), *id as i64)).collect();
        let records = fence_brokers(image, &fenced);
        image.apply(image.offset + 1, &records).unwrap();
        records
    }

    pub(super) fn partition(image: &ClusterImage) -> (Vec<BrokerId>, BrokerId, i32, i32) {
        let registration = image.partition(TOPIC, PartitionId(0)).unwrap();
        (
            registration.isr.clone(),
            registration.leader,
            registration.leader_epoch.0,
            registration.partition_epoch,
        )
    }

    #[test]
    fn fencing_moves_leaderships_and_shrinks_isrs_as_kafka_does() {
        use Election::{Clean, Unclean};
        // (what, replicas, isr, leader, election, fenced before, fenced now,
        //  then: isr, leader, leader epoch, partition epoch)
        #[rustfmt::skip]
        type Row = (&'static str, &'static [i32], &'static [i32], i32, Election, &'static [i32], &'static [i32], &'static [i32], i32, i32, i32);
        #[rustfmt::skip]
        let rows: &[Row] = &[
            ("leader fenced: the next ISR member in replica order leads",
                &[1, 2, 3], &[3, 2, 1], 1, Clean, &[], &[1], &[3, 2], 2, 1, 1),
            ("a follower fenced: the ISR shrinks, the leader and its epoch stay",
                &[1, 2, 3], &[1, 2, 3], 1, Clean, &[], &[2], &[1, 3], 1, 0, 1),
            ("the last ISR member fenced: offline, the ISR kept",
                &[1, 2], &[1], 1, Clean, &[], &[1], &[1], -1, 1, 1),
            ("the last ISR member fenced, unclean allowed: an out-of-sync replica leads",
                &[1, 2], &[1], 1, Unclean, &[], &[1], &[2], 2, 1, 1),
            ("unclean skips replicas that are fenced",
                &[1, 2, 3], &[1], 1, Unclean, &[2], &[1], &[3], 3, 1, 1),
            ("unclean with no live replica: offline",
                &[1, 2], &[1], 1, Unclean, &[2], &[1], &[1], -1, 1, 1),
            ("a broker that is not a replica changes nothing",
                &[1, 2], &[1, 2], 1, Clean, &[], &[3], &[1, 2], 1, 0, 0),
            ("two fenced at once: neither is elected, the ISR keeps the last",
                &[1, 2, 3], &[1, 2], 1, Clean, &[], &[1, 2], &[2], -1, 1, 1),
            ("two fenced at once, a third in sync leads, its epoch bumped once",
                &[1, 2, 3], &[1, 2, 3], 1, Clean, &[], &[1, 2], &[3], 3, 1, 2),
        ];
        for &(
            what,
            replicas,
            isr,
            leader,
            election,
            before,
            fenced,
            isr_after,
            leader_after,
            leader_epoch,
            partition_epoch,
        ) in rows
        {
            let mut image = image(replicas, isr, leader, election);
            for id in before {
                let fence = MetadataRecord::FenceBroker {
                    id: BrokerId(*id),
                    epoch: *id as i64,
                };
                image.apply(image.offset + 1, &[fence]).unwrap();
            }
            let records = fence(&mut image, fenced);
            assert_eq!(
                partition(&image),
                (
                    brokers(isr_after),
                    BrokerId(leader_after),
                    leader_epoch,
                    partition_epoch
                ),
                "{what}"
            );
            // Each fenced broker's record comes after its elections.
            assert!(
                matches!(records.last(), Some(MetadataRecord::FenceBroker { .. })),
                "{what}"
            );
            assert!(
                fenced.iter().all(|id| image.brokers[&BrokerId(*id)].fenced),
                "{what}"
            );
        }
    }

    #[test]
    fn applying_counts_leader_elections_clean_and_unclean() {
        use crate::cluster::cluster_image::LeaderElections;
        let count = |image: &mut ClusterImage, records: &[MetadataRecord]| {
            image.apply(image.offset + 1, records).unwrap()
        };
        let counts = |clean, unclean| LeaderElections { clean, unclean };
        // Creating a partition elects nobody; a follower leaving neither.
        let mut image = three_brokers();
        let created = [
            MetadataRecord::Topic {
                name: "t".into(),
                id: TOPIC,
            },
            partition_record(
                TOPIC,
                0,
                PartitionRegistration {
                    replicas: brokers(&[1, 2, 3]),
                    isr: brokers(&[1, 2, 3]),
                    leader: BrokerId(1),
                    leader_epoch: LeaderEpoch(0),
                    partition_epoch: 0,
                },
            ),
        ];
        assert_eq!(count(&mut image, &created), counts(0, 0));
        let records = fence_brokers(&image, &[(BrokerId(2), 2)]);
        assert_eq!(count(&mut image, &records), counts(0, 0));
        // The leader leaving: an ISR member leads.
        let records = fence_brokers(&image, &[(BrokerId(1), 1)]);
        assert_eq!(count(&mut image, &records), counts(1, 0));
        // The last ISR member leaving: offline, no election.
        let records = fence_brokers(&image, &[(BrokerId(3), 3)]);
        assert_eq!(count(&mut image, &records), counts(0, 0));
        assert_eq!(partition(&image).1, BrokerId::NONE);

        let mut image = self::image(&[1, 2], &[1], 1, Election::Unclean);
        let records = fence_brokers(&image, &[(BrokerId(1), 1)]);
        assert_eq!(count(&mut image, &records), counts(0, 1));
    }

    #[test]
    fn an_unfenced_isr_member_leads_an_offline_partition() {
        let mut image = image(&[1, 2], &[1], 1, Election::Clean);
        fence(&mut image, &[1]);
        assert_eq!(partition(&image).1, BrokerId::NONE);
        // Broker 2 comes back first: not in the ISR, so no clean election.
        assert!(elect_offline_partitions(&image, BrokerId(2), &[]).is_empty());
        let records = elect_offline_partitions(&image, BrokerId(1), &[]);
        image.apply(image.offset + 1, &records).unwrap();
        assert_eq!(partition(&image), (brokers(&[1]), BrokerId(1), 2, 2));
    }

    #[test]
    fn an_unfenced_out_of_sync_replica_leads_only_when_unclean_is_allowed() {
        let mut image = image(&[1, 2, 3], &[1], 1, Election::Unclean);
        fence(&mut image, &[2, 3]);
        fence(&mut image, &[1]);
        assert_eq!(partition(&image), (brokers(&[1]), BrokerId::NONE, 1, 1));
        let records = elect_offline_partitions(&image, BrokerId(3), &[]);
        image.apply(image.offset + 1, &records).unwrap();
        assert_eq!(partition(&image), (brokers(&[3]), BrokerId(3), 2, 2));
    }

    #[test]
    fn a_broker_shutting_down_neither_leads_nor_is_elected() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 1, Election::Clean);
        let shutting_down = MetadataRecord::ControlledShutdown {
            id: BrokerId(2),
            epoch: 2,
        };
        image.apply(image.offset + 1, &[shutting_down]).unwrap();
        let records = broker_leaves(&image, BrokerId(1), &BTreeSet::from([BrokerId(1)]));
        image.apply(image.offset + 1, &records).unwrap();
        assert_eq!(partition(&image), (brokers(&[2, 3]), BrokerId(3), 1, 1));
    }

    #[test]
    fn the_unclean_setting_is_the_topics_then_the_clusters_and_false_by_default() {
        let mut image = image(&[1], &[1], 1, Election::Clean);
        let mut topic = image.topics[&TOPIC].clone();
        assert_eq!(Election::of_topic(&topic, &image), Election::Clean);
        let cluster_default = |value: &str| MetadataRecord::BrokerConfig {
            resource: CLUSTER_DEFAULT.into(),
            key: UNCLEAN_LEADER_ELECTION_ENABLE.into(),
            value: Some(value.into()),
        };
        image
            .apply(image.offset + 1, &[cluster_default("true")])
            .unwrap();
        assert_eq!(Election::of_topic(&topic, &image), Election::Unclean);
        image
            .apply(image.offset + 1, &[cluster_default("false")])
            .unwrap();
        for (value, election) in [
            ("true", Election::Unclean),
            (" TRUE", Election::Unclean),
            ("false", Election::Clean),
            ("yes", Election::Clean),
        ] {
            topic
                .configs
                .insert(UNCLEAN_LEADER_ELECTION_ENABLE.into(), value.into());
            assert_eq!(Election::of_topic(&topic, &image), election, "{value:?}");
        }
    }
}
