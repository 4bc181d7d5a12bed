//! The simulated controller: it fences replicas whose sessions expired,
//! elects as `cluster::elections` does, moves leadership back to the
//! preferred replica, takes or refuses AlterPartition, and commits each
//! new registration to every replica that can hear it.

use rand::Rng;

use super::{REPLICAS, ReplicaViolation, Sim, now};
use crate::cluster::elections::elect_preferred;
use crate::cluster::records::PartitionRegistration;
use crate::protocol::errors::ErrorCode;
use crate::replica::replication::{IsrProposal, Role};
use crate::types::{BrokerId, LeaderEpoch};

impl Sim {
    /// The session of a dead replica expires: it leaves the ISR (unless
    /// last), and if it led, the first live ISR member in replica order
    /// leads at a new epoch (none: offline).
    pub(super) fn fence(&mut self) -> Result<(), ReplicaViolation> {
        if let Some(cut) = self.cut.filter(|_| !self.cut_fenced) {
            if self.unfenced_down.is_empty() || self.rng.gen_bool(0.5) {
                self.cut_fenced = true;
                let id = self.nodes[cut].id;
                return self.fence_broker(id);
            }
        }
        let Some(gone) = self.unfenced_down.pop() else {
            return Ok(());
        };
        self.fence_broker(gone)
    }

    pub(super) fn fence_broker(&mut self, gone: BrokerId) -> Result<(), ReplicaViolation> {
        self.unfenced_down.retain(|down| *down != gone);
        let mut next = self.registration.clone();
        if next.isr.len() > 1 {
            next.isr.retain(|id| *id != gone);
        }
        if next.leader == gone {
            next.leader = self.elect(&next.isr, gone);
            next.leader_epoch = LeaderEpoch(next.leader_epoch.0 + 1);
        }
        next.partition_epoch += 1;
        self.commit(next)
    }

    /// The controller's leader balancing, or an ElectLeaders: the engine's
    /// preferred election over the image's view of who may lead (a replica
    /// that died is active until its session expires).
    pub(super) fn prefer(&mut self) -> Result<(), ReplicaViolation> {
        let active = self.active();
        let may_lead = |id: BrokerId| active[id.0 as usize];
        match elect_preferred(&self.registration, may_lead) {
            Some(next) => {
                if next.leader == self.registration.replicas[0] {
                    self.report.preferred_elections += 1;
                }
                self.commit(next)
            }
            None => Ok(()),
        }
    }

    fn elect(&self, isr: &[BrokerId], except: BrokerId) -> BrokerId {
        self.registration
            .replicas
            .iter()
            .copied()
            .find(|id| {
                *id != except
                    && isr.contains(id)
                    && self.nodes[id.0 as usize].alive
                    && !self.unfenced_down.contains(id)
                    && self.cut != Some(id.0 as usize)
            })
            .unwrap_or(BrokerId::NONE)
    }

    /// An offline partition whose ISR member `id` returns is led by it.
    pub(super) fn lead_if_offline(&mut self, id: BrokerId) -> Option<Result<(), ReplicaViolation>> {
        if self.registration.leader != BrokerId::NONE || !self.registration.isr.contains(&id) {
            return None;
        }
        let mut next = self.registration.clone();
        next.leader = id;
        next.leader_epoch = LeaderEpoch(next.leader_epoch.0 + 1);
        next.partition_epoch += 1;
        Some(self.commit(next))
    }

    /// The controller commits a registration and every live replica hears it.
    /// Which replicas the image shows active: not fenced, where fenced is
    /// down with its session expired, or cut off and fenced.
    fn active(&self) -> Vec<bool> {
        (0..REPLICAS)
            .map(|index| {
                let node = &self.nodes[index];
                let fenced_cut = self.cut == Some(index) && self.cut_fenced;
                (node.alive && !fenced_cut) || self.unfenced_down.contains(&node.id)
            })
            .collect()
    }

    fn commit(&mut self, next: PartitionRegistration) -> Result<(), ReplicaViolation> {
        if next.leader != self.registration.leader
            || next.leader_epoch != self.registration.leader_epoch
        {
            self.report.elections += 1;
            self.pending.clear();
            if next.leader != BrokerId::NONE {
                if let Some(earlier) = self.leaders.insert(next.leader_epoch, next.leader) {
                    if earlier != next.leader {
                        return Err(self.violation(format!(
                            "epoch {} led by {earlier} and {}",
                            next.leader_epoch.0, next.leader
                        )));
                    }
                }
            }
        }
        self.registration = next.clone();
        let now = now(self.step);
        let active = self.active();
        for index in 0..REPLICAS {
            if self.cut == Some(index) {
                // It cannot hear the controller.
                continue;
            }
            let node = &mut self.nodes[index];
            let Some(replication) = node.replication.as_mut() else {
                continue;
            };
            let was = (replication.role(), replication.leader_epoch());
            let mut actions = replication.apply_registration(next.clone(), now);
            actions.extend(replication.rule_out_inactive(|broker| active[broker.0 as usize], now));
            if replication.role() == Role::Leader && was != (Role::Leader, next.leader_epoch) {
                // A new leader's epoch starts at its log end.
                let end = node.end();
                node.epochs.assign(next.leader_epoch, end);
            }
            self.apply(index, actions)?;
        }
        Ok(())
    }

    /// AlterPartition at the controller: taken at the current epochs with
    /// only live members, refused otherwise.
    pub(super) fn alter_partition(
        &mut self,
        index: usize,
        proposal: IsrProposal,
    ) -> Result<(), ReplicaViolation> {
        if self.cut == Some(index) {
            // The controller is out of reach.
            if let Some(replication) = self.nodes[index].replication.as_mut() {
                let _ = replication.proposal_failed(ErrorCode::NONE, now(self.step));
            }
            return Ok(());
        }
        let current = &self.registration;
        let live = proposal
            .isr
            .iter()
            .all(|id| self.nodes[id.0 as usize].alive && !self.unfenced_down.contains(id));
        let current_epochs = proposal.leader_epoch == current.leader_epoch
            && proposal.partition_epoch == current.partition_epoch
            && current.leader == self.nodes[index].id;
        if !live || !current_epochs || proposal.isr.is_empty() {
            // A dead member is the controller's INELIGIBLE_REPLICA.
            let error = match live {
                true => ErrorCode::INVALID_UPDATE_VERSION,
                false => ErrorCode::INELIGIBLE_REPLICA,
            };
            let now = now(self.step);
            let actions = match self.nodes[index].replication.as_mut() {
                Some(replication) => replication.proposal_failed(error, now),
                None => Vec::new(),
            };
            return self.apply(index, actions);
        }
        self.report.isr_changes += 1;
        let mut next = current.clone();
        next.isr = proposal.isr;
        next.partition_epoch += 1;
        self.commit(next)
    }
}
