//! The faults the simulation injects: a replica crashing (keeping what it
//! synced and any prefix of the rest, possibly torn) and restarting, and a
//! network partition that cuts the leader off from the others and the
//! controller while a client still produces to it, then heals.

use rand::Rng;

use super::{REPLICAS, ReplicaBug, ReplicaViolation, Sim, answered, now};
use crate::log::config::FlushPolicy;
use crate::replica::replication::Role;

impl Sim {
    /// A replica process dies: what it had not synced is gone. The
    /// controller notices only at the session timeout ([`Sim::fence`]).
    pub(super) fn crash(&mut self) {
        let index = self.rng.gen_range(0..REPLICAS);
        let down = self.nodes.iter().filter(|node| !node.alive).count();
        let led = Some(index) == self.leader_index();
        let node = &mut self.nodes[index];
        if !node.alive || down >= 2 || self.cut == Some(index) {
            return;
        }
        self.report.crashes += 1;
        node.alive = false;
        node.replication = None;
        // What was on its way to it is lost with its connections.
        self.in_flight.retain(|flight| flight.follower != index);
        // Written records not yet synced may have reached the disk, some
        // of them: any prefix of them survives, the last one possibly
        // torn, which recovery's CRC check drops (so a shorter prefix
        // survives whole). Under `flush.*` the crash is the process's: the
        // page cache keeps everything written. What was never written is
        // gone.
        let (synced, written) = (node.disk.synced as usize, node.disk.written as usize);
        let kept = match self.flush {
            FlushPolicy::Continuous => self.rng.gen_range(synced..=written),
            FlushPolicy::Interval { .. } => written,
        };
        if kept > synced {
            self.report.unsynced_kept += 1;
        }
        if kept < written && self.rng.gen_bool(0.5) {
            self.report.torn_writes += 1;
        }
        // Recovery syncs what it keeps.
        node.truncate(kept);
        self.unfenced_down.push(node.id);
        if led || node.id == self.registration.leader {
            self.pending.clear();
        }
    }

    pub(super) fn restart(&mut self) -> Result<(), ReplicaViolation> {
        let Some(index) = (0..REPLICAS).find(|index| !self.nodes[*index].alive) else {
            return Ok(());
        };
        let id = self.nodes[index].id;
        // A new incarnation registers only once the old one's session has
        // expired (DUPLICATE_BROKER_REGISTRATION before), which fences it.
        if self.unfenced_down.contains(&id) {
            self.fence_broker(id)?;
        }
        let node = &mut self.nodes[index];
        node.alive = true;
        if self.config.bug == Some(ReplicaBug::TruncateToHighWatermark) {
            let high_watermark = node.checkpointed_high_watermark.0 as usize;
            node.truncate(high_watermark.min(node.log.len()));
        }
        self.start_replica(index);
        if let Some(led) = self.lead_if_offline(id) {
            return led;
        }
        Ok(())
    }

    /// The network cuts the leader off (a live one, when none is cut yet):
    /// what it was asked to acknowledge now waits on it alone.
    pub(super) fn isolate(&mut self) {
        let Some(leader) = self.leader_index() else {
            return;
        };
        if self.cut.is_some() {
            return;
        }
        self.report.partitions += 1;
        self.cut = Some(leader);
        self.cut_fenced = false;
        self.stranded.append(&mut self.pending);
    }

    /// The partition heals: the cut-off replica hears the registration it
    /// missed (re-registering if it was fenced) and follows from then on;
    /// a partition left without a leader is led by it if it is in the ISR.
    pub(super) fn heal(&mut self) -> Result<(), ReplicaViolation> {
        self.collect_stranded();
        let Some(cut) = self.cut.take() else {
            return Ok(());
        };
        self.cut_fenced = false;
        self.stranded.clear();
        let id = self.nodes[cut].id;
        if let Some(led) = self.lead_if_offline(id) {
            return led;
        }
        let registration = self.registration.clone();
        let now = now(self.step);
        let node = &mut self.nodes[cut];
        let Some(replication) = node.replication.as_mut() else {
            return Ok(());
        };
        let was = (replication.role(), replication.leader_epoch());
        let actions = replication.apply_registration(registration.clone(), now);
        if replication.role() == Role::Leader && was != (Role::Leader, registration.leader_epoch) {
            let end = node.end();
            node.epochs.assign(registration.leader_epoch, end);
        }
        self.apply(cut, actions)
    }

    /// A client still reaches the cut-off replica: if it believes it
    /// leads, it appends (and may never acknowledge).
    pub(super) fn produce_to_cut(&mut self, cut: usize) -> Result<(), ReplicaViolation> {
        let Some(produced) = self.append_produced(cut) else {
            return Ok(());
        };
        self.stranded.push(produced);
        // Its disk keeps up: only the ISR it cannot reach holds its HW back.
        self.disk_work(cut)
    }

    /// What the cut-off replica acknowledged counts as committed (and so
    /// must survive the partition).
    pub(super) fn collect_stranded(&mut self) {
        let Some(cut) = self.cut else {
            return;
        };
        let Some(replication) = self.nodes[cut].replication.as_ref() else {
            return;
        };
        for (offset, value) in answered(replication, &mut self.stranded) {
            self.report.acknowledged += 1;
            self.committed.entry(offset).or_insert(value);
        }
    }
}
