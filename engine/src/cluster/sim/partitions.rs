//! Partitions under the simulator: the leaders' AlterPartition traffic
//! (an ISR grows back as a replica catches up, shrinks as one falls
//! behind), controlled shutdowns, the invariant every committed image's
//! partitions keep, and [`Bug::ElectOutOfIsr`].
//!
//! Checked on every committed image (voters' and brokers'):
//! - the ISR is a non-empty subset of the replicas, without repeats;
//! - the leader is [`BrokerId::NONE`] or a replica in the ISR, and not a
//!   fenced broker;
//! - from one offset to a later one, neither epoch goes back, a leader
//!   change bumps the leader epoch, and a leader epoch bump comes with a
//!   partition epoch bump.

use rand::Rng;
use rand::seq::SliceRandom;

use super::{Bug, Checked, Payload, Simulation};
use crate::cluster::alter_partition::AlterPartitionRequest;
use crate::cluster::cluster_image::ClusterImage;
use crate::cluster::image::TopicId;
use crate::cluster::records::{MetadataRecord, PartitionRegistration};
use crate::types::{BrokerId, LeaderEpoch, PartitionId};

/// What the checker last saw of a partition: at which offset, and its
/// registration there.
pub(super) type Seen = (u64, PartitionRegistration);

impl Simulation {
    /// Now and then, a broker that leads a partition asks to add a live
    /// replica to its ISR (it caught up) or to drop a follower (it fell
    /// behind), from what its own, perhaps stale, image says; while faults
    /// are injected.
    pub(super) fn maybe_alter_partition(&mut self, node: usize, target: usize) {
        let Some(broker_epoch) = self.nodes[node].epoch else {
            return;
        };
        // The quiet end lets the log settle for its checks.
        if !self.faults || !self.rng.gen_bool(0.3) {
            return;
        }
        let me = BrokerId(node as i32);
        let image = &self.nodes[node].image;
        let mut led: Vec<(TopicId, usize, &PartitionRegistration)> = Vec::new();
        for topic in image.topics.values() {
            for (index, partition) in topic.partitions.iter().enumerate() {
                if partition.leader == me {
                    led.push((topic.id, index, partition));
                }
            }
        }
        let Some((topic, index, current)) = led
            .choose(&mut self.rng)
            .map(|(topic, index, current)| (*topic, *index, (*current).clone()))
        else {
            return;
        };
        let mut new_isr = current.isr.clone();
        let outside: Vec<BrokerId> = current
            .replicas
            .iter()
            .copied()
            // A replica whose log directory failed is asked for too: a
            // fetch it sent before the failure can make it look caught up;
            // the controller must refuse it.
            .filter(|replica| !current.isr.contains(replica) && image.is_active(*replica))
            .collect();
        match outside.choose(&mut self.rng) {
            Some(joining) if self.rng.gen_bool(0.8) => new_isr.push(*joining),
            _ => new_isr.retain(|member| *member == me || self.rng.gen_bool(0.5)),
        }
        let request = AlterPartitionRequest {
            broker: me,
            broker_epoch,
            topic,
            partition: PartitionId(index as i32),
            leader_epoch: current.leader_epoch,
            partition_epoch: current.partition_epoch,
            new_isr,
        };
        self.send(node, target, Payload::AlterPartition(Box::new(request)));
    }

    pub(super) fn on_alter_partition(
        &mut self,
        to: usize,
        request: &AlterPartitionRequest,
    ) -> Checked {
        let Some(controller) = self.nodes[to].controller.as_mut() else {
            return Ok(());
        };
        let Ok(checked) = controller.check_alter_partition(request) else {
            return Ok(());
        };
        match checked {
            Ok((_, records)) if records.is_empty() => {}
            Ok((_, records)) => {
                if controller.propose(records).is_ok() {
                    self.report.isr_changes += 1;
                }
            }
            Err(_) => self.report.isr_refusals += 1,
        }
        self.drain(to)
    }

    /// [`Bug::ElectOutOfIsr`]: the active controller gives every offline
    /// partition the first live replica as leader, ignoring the ISR.
    pub(super) fn elect_out_of_isr(&mut self, node: usize) -> Checked {
        if self.config.bug != Some(Bug::ElectOutOfIsr) {
            return Ok(());
        }
        let Some(controller) = self.nodes[node].controller.as_mut() else {
            return Ok(());
        };
        let Ok(image) = controller.latest_image() else {
            return Ok(());
        };
        let records = out_of_isr_elections(image);
        if !records.is_empty() {
            let _ = controller.propose(records);
        }
        self.drain(node)
    }

    /// The partition invariant (see the module's doc) on `image`.
    pub(super) fn check_partitions(&mut self, node: usize, image: &ClusterImage) -> Checked {
        for topic in image.topics.values() {
            for (index, partition) in topic.partitions.iter().enumerate() {
                let at = format!(
                    "node {node}'s image at offset {}: partition {index}",
                    image.offset
                );
                if let Err(what) = check_registration(image, partition) {
                    return Err(self.violation(format!("{at}: {what}: {partition:?}")));
                }
                let key = (topic.id, index);
                let seen = self.partitions.get(&key).cloned();
                match seen {
                    Some((offset, before)) if offset < image.offset => {
                        if let Err(what) = check_progress(&before, partition) {
                            return Err(self.violation(format!(
                                "{at}: {what}: {before:?} then {partition:?}"
                            )));
                        }
                        if before.leader != partition.leader {
                            self.report.leader_changes += 1;
                        }
                        self.partitions
                            .insert(key, (image.offset, partition.clone()));
                    }
                    Some((offset, later)) if offset > image.offset => {
                        if let Err(what) = check_progress(partition, &later) {
                            return Err(self
                                .violation(format!("{at}: {what}: {partition:?} then {later:?}")));
                        }
                    }
                    Some(_) => {}
                    None => {
                        self.partitions
                            .insert(key, (image.offset, partition.clone()));
                    }
                }
            }
        }
        Ok(())
    }

    /// A controller answered `should_shut_down`: its committed image must
    /// show the broker leading nothing.
    pub(super) fn check_shut_down(&self, node: usize, broker: BrokerId) -> Checked {
        let Some(controller) = &self.nodes[node].controller else {
            return Ok(());
        };
        if controller.image().leads_any(broker) {
            return Err(self.violation(format!(
                "controller {node} told broker {broker} to shut down while it still leads"
            )));
        }
        Ok(())
    }
}

fn check_registration(
    image: &ClusterImage,
    partition: &PartitionRegistration,
) -> Result<(), &'static str> {
    let isr = &partition.isr;
    if isr.is_empty() {
        return Err("empty ISR");
    }
    if isr
        .iter()
        .any(|member| !partition.replicas.contains(member))
    {
        return Err("an ISR member is not a replica");
    }
    if isr
        .iter()
        .enumerate()
        .any(|(position, member)| isr[..position].contains(member))
    {
        return Err("an ISR member twice");
    }
    if partition.leader == BrokerId::NONE {
        return Ok(());
    }
    if !isr.contains(&partition.leader) {
        return Err("the leader is not in the ISR");
    }
    if image
        .brokers
        .get(&partition.leader)
        .is_none_or(|broker| broker.fenced)
    {
        return Err("the leader is fenced or unregistered");
    }
    Ok(())
}

fn check_progress(
    before: &PartitionRegistration,
    after: &PartitionRegistration,
) -> Result<(), &'static str> {
    if after.leader_epoch < before.leader_epoch || after.partition_epoch < before.partition_epoch {
        return Err("an epoch went back");
    }
    if after.leader != before.leader && after.leader_epoch == before.leader_epoch {
        return Err("the leader changed without a leader epoch bump");
    }
    if after.leader_epoch > before.leader_epoch && after.partition_epoch == before.partition_epoch {
        return Err("the leader epoch moved without the partition epoch");
    }
    Ok(())
}

/// The broken rule: offline partitions led by their first active replica
/// outside the ISR, the ISR left as it was.
fn out_of_isr_elections(image: &ClusterImage) -> Vec<MetadataRecord> {
    let mut records = Vec::new();
    for topic in image.topics.values() {
        for (index, partition) in topic.partitions.iter().enumerate() {
            if partition.leader != BrokerId::NONE {
                continue;
            }
            let Some(leader) = partition
                .replicas
                .iter()
                .copied()
                .find(|r| image.is_active(*r) && !partition.isr.contains(r))
            else {
                continue;
            };
            records.push(MetadataRecord::Partition {
                topic: topic.id,
                partition: PartitionId(index as i32),
                registration: PartitionRegistration {
                    leader,
                    leader_epoch: LeaderEpoch(partition.leader_epoch.0 + 1),
                    partition_epoch: partition.partition_epoch + 1,
                    ..partition.clone()
                },
            });
        }
    }
    records
}
