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
//! ElectLeaders ([`elect_leader`]), as Kafka's PREFERRED election.

use std::collections::{BTreeMap, BTreeSet};

use crate::cluster::broker_dynamic::CLUSTER_DEFAULT;
use crate::cluster::cluster_image::{ClusterImage, TopicRegistration};
use crate::cluster::controller::Refusal;
use crate::cluster::image::TopicId;
use crate::cluster::records::{MetadataRecord, PartitionRegistration};
use crate::protocol::errors::ErrorCode;
use crate::types::{BrokerId, LeaderEpoch, PartitionId, TopicPartition};

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

/// Kafka's cap on the elections one balancing run proposes
/// (`ReplicationControlManager.MAX_ELECTIONS_PER_IMBALANCE`); a run that
/// reaches it is followed by another at once.
pub const ELECTIONS_PER_BALANCE_MAX: usize = 1_000;

/// Kafka's PREFERRED election: the first replica leads if it is in the ISR
/// and may lead; otherwise the leader stays if it may, or the first ISR
/// member that may leads (an ONLINE election). The ISR is kept. `None` when
/// the leader stays.
pub fn elect_preferred(
    current: &PartitionRegistration,
    may_lead: impl Fn(BrokerId) -> bool,
) -> Option<PartitionRegistration> {
    let preferred = *current.replicas.first()?;
    if current.leader == preferred {
        return None;
    }
    if current.isr.contains(&preferred) && may_lead(preferred) {
        return Some(PartitionRegistration {
            leader: preferred,
            leader_epoch: LeaderEpoch(current.leader_epoch.0 + 1),
            partition_epoch: current.partition_epoch + 1,
            ..current.clone()
        });
    }
    change_partition(current, current.isr.clone(), may_lead, Election::Clean)
}

/// Whether some partition is not led by its preferred replica (or by no
/// one): what makes Kafka's controller schedule a balancing run.
pub fn leaders_imbalanced(image: &ClusterImage) -> bool {
    image.topics.values().any(|topic| {
        topic
            .partitions
            .iter()
            .any(|partition| partition.replicas.first() != Some(&partition.leader))
    })
}

/// One balancing run (`auto.leader.rebalance.enable`): a preferred election
/// for each partition not led by its first replica, in topic-id and
/// partition order, at most `max` of them. Kafka (KRaft) moves every such
/// partition whose preferred replica may lead; `leader.imbalance.per.broker
/// .percentage` is a ZooKeeper-mode setting it no longer reads.
pub fn balance_leaders(
    image: &ClusterImage,
    max: usize,
    offline: &OfflineReplicas,
) -> Vec<MetadataRecord> {
    changed_partitions(image, |current| {
        (current.replicas.first() != Some(&current.leader)).then(Vec::new)
    })
    .filter_map(|(topic, index, current, _, _)| {
        let name = image
            .topics
            .get(&topic)
            .map_or("", |topic| topic.name.as_str());
        let may_lead =
            |replica: BrokerId| image.is_active(replica) && !offline.holds(replica, name, index);
        let changed = elect_preferred(current, may_lead)?;
        Some(partition_record(topic, index, changed))
    })
    .take(max)
    .collect()
}

/// What ElectLeaders asks for (its `ElectionType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ElectionType {
    /// 0: the first replica, if it is in the ISR and may lead.
    Preferred,
    /// 1: for a partition with no leader, any replica that may lead (the
    /// ISR first).
    Unclean,
}

/// ElectLeaders for one partition (Kafka's `ReplicationControlManager
/// .electLeader`): the record that elects, or Kafka's refusal.
pub fn elect_leader(
    image: &ClusterImage,
    topic: &str,
    partition: i32,
    election: ElectionType,
) -> Result<MetadataRecord, Refusal> {
    let registered = image
        .topic_by_name(topic)
        .ok_or_else(|| no_such_topic(topic))?;
    let current = usize::try_from(partition)
        .ok()
        .and_then(|index| registered.partitions.get(index))
        .ok_or_else(|| no_such_partition(topic, partition))?;
    let not_needed_now = match election {
        ElectionType::Preferred => current.replicas.first() == Some(&current.leader),
        ElectionType::Unclean => current.leader != BrokerId::NONE,
    };
    if not_needed_now {
        return Err(not_needed());
    }
    let may_lead = |replica: BrokerId| image.is_active(replica);
    let changed = match election {
        ElectionType::Preferred => elect_preferred(current, may_lead).ok_or_else(|| {
            Refusal::new(
                ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE,
                "The preferred leader was not available.",
            )
        }),
        ElectionType::Unclean => {
            change_partition(current, current.isr.clone(), may_lead, Election::Unclean)
                .filter(|changed| changed.leader != BrokerId::NONE)
                .ok_or_else(|| {
                    Refusal::new(
                        ErrorCode::ELIGIBLE_LEADERS_NOT_AVAILABLE,
                        "Eligible topic partitions leaders are not available.",
                    )
                })
        }
    }?;
    Ok(partition_record(registered.id, partition as usize, changed))
}

/// One partition's outcome of ElectLeaders: `NONE` once elected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartitionElection {
    pub partition: i32,
    pub error: ErrorCode,
    pub message: Option<String>,
}

/// One topic's outcomes of ElectLeaders, in request order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TopicElections {
    pub topic: String,
    pub partitions: Vec<PartitionElection>,
}

/// ElectLeaders (KIP-460) as Kafka's controller answers it: each asked
/// partition's outcome and the records that elect; `None` asks for every
/// partition of every topic (by name), and then the partitions that need
/// no election are left out of the answer, as Kafka leaves them out.
pub fn elect_leaders(
    image: &ClusterImage,
    election: ElectionType,
    asked: Option<&[(String, Vec<i32>)]>,
) -> (Vec<TopicElections>, Vec<MetadataRecord>) {
    let mut topics: Vec<&TopicRegistration> = image.topics.values().collect();
    topics.sort_by(|a, b| a.name.cmp(&b.name));
    let every = || {
        let counts = topics.iter();
        every_partition(counts.map(|topic| (topic.name.as_str(), topic.partitions.len())))
    };
    answer_elections(asked, every, |topic, partition| {
        elect_leader(image, topic, partition, election)
    })
}

/// ElectLeaders on a one-node Brook, whose `topics` (name and partition
/// count, by name) each have one replica, their leader: an election is
/// never needed, and the answer is the one a cluster's controller gives.
pub fn elect_leaders_alone<'a>(
    topics: impl Iterator<Item = (&'a str, usize)> + Clone,
    asked: Option<&[(String, Vec<i32>)]>,
) -> Vec<TopicElections> {
    let every = || every_partition(topics.clone());
    let (results, _) = answer_elections(asked, every, |topic, partition| {
        let count = topics.clone().find(|(name, _)| *name == topic);
        Err(match count {
            None => no_such_topic(topic),
            Some((_, count)) if !(0..count as i64).contains(&(partition as i64)) => {
                no_such_partition(topic, partition)
            }
            Some(_) => not_needed(),
        })
    });
    results
}

fn every_partition<'a>(topics: impl Iterator<Item = (&'a str, usize)>) -> Vec<(String, Vec<i32>)> {
    topics
        .map(|(name, count)| (name.to_owned(), (0..count as i32).collect()))
        .collect()
}

/// Runs `elect` for each asked partition (`None`: each of `every()`'s,
/// leaving out those needing no election) and gathers the answers and the
/// records.
fn answer_elections(
    asked: Option<&[(String, Vec<i32>)]>,
    every: impl FnOnce() -> Vec<(String, Vec<i32>)>,
    mut elect: impl FnMut(&str, i32) -> Result<MetadataRecord, Refusal>,
) -> (Vec<TopicElections>, Vec<MetadataRecord>) {
    let all_partitions;
    let (asked, all) = match asked {
        Some(asked) => (asked, false),
        None => {
            all_partitions = every();
            (all_partitions.as_slice(), true)
        }
    };
    let mut records = Vec::new();
    let results = asked
        .iter()
        .map(|(topic, partitions)| {
            let partitions = partitions
                .iter()
                .filter_map(|&partition| {
                    let (error, message) = match elect(topic, partition) {
                        Ok(record) => {
                            records.push(record);
                            (ErrorCode::NONE, None)
                        }
                        Err(refusal) if all && refusal.error == ErrorCode::ELECTION_NOT_NEEDED => {
                            return None;
                        }
                        Err(refusal) => (refusal.error, Some(refusal.message)),
                    };
                    Some(PartitionElection {
                        partition,
                        error,
                        message,
                    })
                })
                .collect();
            TopicElections {
                topic: topic.clone(),
                partitions,
            }
        })
        .collect();
    (results, records)
}

fn no_such_topic(topic: &str) -> Refusal {
    Refusal::new(
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        format!("No such topic as {topic}"),
    )
}

fn no_such_partition(topic: &str, partition: i32) -> Refusal {
    Refusal::new(
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
        format!("No such partition as {topic}-{partition}"),
    )
}

fn not_needed() -> Refusal {
    Refusal::new(
        ErrorCode::ELECTION_NOT_NEEDED,
        "Leader election not needed for topic partition.",
    )
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

    const TOPIC: TopicId = TopicId([1; 16]);

    fn brokers(ids: &[i32]) -> Vec<BrokerId> {
        ids.iter().copied().map(BrokerId).collect()
    }

    /// Brokers 1..=3 (epochs 1..=3) unfenced, and topic "t" with one
    /// partition at epochs 0.
    fn image(replicas: &[i32], isr: &[i32], leader: i32, election: Election) -> ClusterImage {
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

    fn fence(image: &mut ClusterImage, ids: &[i32]) -> Vec<MetadataRecord> {
        let fenced: Vec<(BrokerId, i64)> =
            ids.iter().map(|id| (BrokerId(*id), *id as i64)).collect();
        let records = fence_brokers(image, &fenced);
        image.apply(image.offset + 1, &records).unwrap();
        records
    }

    fn partition(image: &ClusterImage) -> (Vec<BrokerId>, BrokerId, i32, i32) {
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

    /// Broker `id` (epoch `id`) registered and unfenced again, and back in
    /// the partition's ISR (last), as its leader's AlterPartition would do.
    fn rejoin(image: &mut ClusterImage, id: i32) {
        let mut registration = image.partition(TOPIC, PartitionId(0)).unwrap().clone();
        registration.isr.push(BrokerId(id));
        registration.partition_epoch += 1;
        let records = [
            MetadataRecord::UnfenceBroker {
                id: BrokerId(id),
                epoch: id as i64,
            },
            MetadataRecord::Partition {
                topic: TOPIC,
                partition: PartitionId(0),
                registration,
            },
        ];
        image.apply(image.offset + 1, &records).unwrap();
    }

    fn balance(image: &ClusterImage) -> Vec<MetadataRecord> {
        balance_leaders(
            image,
            ELECTIONS_PER_BALANCE_MAX,
            &OfflineReplicas::default(),
        )
    }

    /// A preferred replica in a failed log directory of its broker is not
    /// given the leadership back, though in the ISR (its last member).
    #[test]
    fn balancing_skips_a_preferred_replica_whose_log_directory_failed() {
        let image = image(&[1, 2], &[1], -1, Election::Clean);
        assert_eq!(balance(&image).len(), 1, "the preferred replica leads");
        let mut offline = OfflineReplicas::default();
        offline.report(
            BrokerId(1),
            &[TopicPartition {
                topic: "t".into(),
                partition: PartitionId(0),
            }],
        );
        assert!(balance_leaders(&image, ELECTIONS_PER_BALANCE_MAX, &offline).is_empty());
        offline.report(BrokerId(1), &[]);
        assert_eq!(
            balance_leaders(&image, ELECTIONS_PER_BALANCE_MAX, &offline).len(),
            1
        );
    }

    #[test]
    fn balancing_gives_the_preferred_replica_back_its_leadership_once_in_sync() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 1, Election::Clean);
        assert!(!leaders_imbalanced(&image));
        assert!(balance(&image).is_empty());
        fence(&mut image, &[1]);
        assert_eq!(partition(&image), (brokers(&[2, 3]), BrokerId(2), 1, 1));
        // Fenced and out of the ISR: the leader stays.
        assert!(leaders_imbalanced(&image));
        assert!(balance(&image).is_empty());
        rejoin(&mut image, 1);
        let records = balance_leaders(
            &image,
            ELECTIONS_PER_BALANCE_MAX,
            &OfflineReplicas::default(),
        );
        image.apply(image.offset + 1, &records).unwrap();
        // A new leader epoch; the ISR as it was.
        assert_eq!(partition(&image), (brokers(&[2, 3, 1]), BrokerId(1), 2, 3));
        assert!(!leaders_imbalanced(&image));
        assert!(balance_leaders(&image, 0, &OfflineReplicas::default()).is_empty());
    }

    #[test]
    fn a_preferred_replica_shutting_down_is_not_given_the_leadership() {
        let mut image = image(&[1, 2, 3], &[1, 2, 3], 2, Election::Clean);
        let shutting_down = MetadataRecord::ControlledShutdown {
            id: BrokerId(1),
            epoch: 1,
        };
        image.apply(image.offset + 1, &[shutting_down]).unwrap();
        assert!(balance(&image).is_empty());
        let refusal = elect_leader(&image, "t", 0, ElectionType::Preferred).unwrap_err();
        assert_eq!(
            (refusal.error, refusal.message.as_str()),
            (
                ErrorCode::PREFERRED_LEADER_NOT_AVAILABLE,
                "The preferred leader was not available."
            )
        );
    }

    #[test]
    fn elect_leaders_answers_as_kafkas_controller() {
        let image = image(&[1, 2, 3], &[1, 2, 3], 2, Election::Clean);
        let refused = |topic: &str, partition, election| {
            let refusal = elect_leader(&image, topic, partition, election).unwrap_err();
            (refusal.error, refusal.message)
        };
        assert_eq!(
            refused("nope", 0, ElectionType::Preferred),
            (
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                "No such topic as nope".to_owned()
            )
        );
        assert_eq!(
            refused("t", 1, ElectionType::Preferred),
            (
                ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                "No such partition as t-1".to_owned()
            )
        );
        let not_needed = (
            ErrorCode::ELECTION_NOT_NEEDED,
            "Leader election not needed for topic partition.".to_owned(),
        );
        // Unclean: it has a leader.
        assert_eq!(refused("t", 0, ElectionType::Unclean), not_needed);
        let record = elect_leader(&image, "t", 0, ElectionType::Preferred).unwrap();
        let mut moved = image.clone();
        moved.apply(moved.offset + 1, &[record]).unwrap();
        assert_eq!(partition(&moved), (brokers(&[1, 2, 3]), BrokerId(1), 1, 1));
        let refusal = elect_leader(&moved, "t", 0, ElectionType::Preferred).unwrap_err();
        assert_eq!((refusal.error, refusal.message), not_needed);
    }

    #[test]
    fn asking_for_every_partition_leaves_out_those_needing_no_election() {
        let image = image(&[1, 2, 3], &[1, 2, 3], 2, Election::Clean);
        let elected = |asked: Option<&[(String, Vec<i32>)]>| {
            elect_leaders(&image, ElectionType::Preferred, asked)
        };
        let (all, records) = elected(None);
        assert_eq!(
            all,
            vec![TopicElections {
                topic: "t".into(),
                partitions: vec![PartitionElection {
                    partition: 0,
                    error: ErrorCode::NONE,
                    message: None,
                }],
            }]
        );
        assert_eq!(records.len(), 1);
        let mut moved = image.clone();
        moved.apply(moved.offset + 1, &records).unwrap();
        let (all, records) = elect_leaders(&moved, ElectionType::Preferred, None);
        assert_eq!(all[0].partitions, vec![]);
        assert!(records.is_empty());
        // Named, each partition is answered, in request order.
        let asked = [("t".to_owned(), vec![0, 7]), ("u".to_owned(), vec![0])];
        let (named, records) = elect_leaders(&moved, ElectionType::Preferred, Some(&asked));
        let codes: Vec<Vec<(i32, ErrorCode)>> = named
            .iter()
            .map(|topic| {
                let codes = topic.partitions.iter();
                codes
                    .map(|result| (result.partition, result.error))
                    .collect()
            })
            .collect();
        assert_eq!(
            codes,
            vec![
                vec![
                    (0, ErrorCode::ELECTION_NOT_NEEDED),
                    (7, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)
                ],
                vec![(0, ErrorCode::UNKNOWN_TOPIC_OR_PARTITION)],
            ]
        );
        assert!(records.is_empty());
    }

    #[test]
    fn one_node_answers_as_a_one_broker_cluster_would() {
        let topics = [("a", 2usize), ("b", 1)];
        let asked = [("a".to_owned(), vec![1, 2]), ("c".to_owned(), vec![0])];
        let results = elect_leaders_alone(topics.iter().copied(), Some(&asked));
        let answers: Vec<(i32, ErrorCode, Option<String>)> = results
            .into_iter()
            .flat_map(|topic| topic.partitions)
            .map(|result| (result.partition, result.error, result.message))
            .collect();
        let message = |text: &str| Some(text.to_owned());
        assert_eq!(
            answers,
            vec![
                (
                    1,
                    ErrorCode::ELECTION_NOT_NEEDED,
                    message("Leader election not needed for topic partition.")
                ),
                (
                    2,
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    message("No such partition as a-2")
                ),
                (
                    0,
                    ErrorCode::UNKNOWN_TOPIC_OR_PARTITION,
                    message("No such topic as c")
                ),
            ]
        );
        let all = elect_leaders_alone(topics.iter().copied(), None);
        let names: Vec<&str> = all.iter().map(|topic| topic.topic.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert!(all.iter().all(|topic| topic.partitions.is_empty()));
    }

    #[test]
    fn an_unclean_election_asked_for_takes_any_replica_that_may_lead() {
        let mut image = image(&[1, 2, 3], &[1], 1, Election::Clean);
        fence(&mut image, &[2, 3]);
        fence(&mut image, &[1]);
        assert_eq!(partition(&image).1, BrokerId::NONE);
        let refusal = elect_leader(&image, "t", 0, ElectionType::Unclean).unwrap_err();
        assert_eq!(refusal.error, ErrorCode::ELIGIBLE_LEADERS_NOT_AVAILABLE);
        let unfence = MetadataRecord::UnfenceBroker {
            id: BrokerId(3),
            epoch: 3,
        };
        image.apply(image.offset + 1, &[unfence]).unwrap();
        // The topic does not allow unclean elections; asking does.
        let record = elect_leader(&image, "t", 0, ElectionType::Unclean).unwrap();
        image.apply(image.offset + 1, &[record]).unwrap();
        assert_eq!(partition(&image), (brokers(&[3]), BrokerId(3), 2, 2));
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
