//! A deterministic simulator of one partition's replication: three
//! replicas, each a [`PartitionReplication`] over a simulated log (a crash
//! keeps what was synced and any prefix of what was not, whose last write
//! may be torn and is then dropped by recovery), a controller that commits ISR changes and
//! elects as `cluster::elections` does (the first live ISR member in
//! replica order, a new leader epoch), and a producer with `acks=all`. A
//! network partition cuts a live replica off from the others and the
//! controller (a client still reaches it and may produce to it); the
//! controller fences it, and once healed it learns the new registration,
//! truncates by epoch and follows. The controller also moves the
//! leadership back to the first replica now and then, by the engine's
//! preferred election (`cluster::elections::elect_preferred`).
//! Followers fetch by the engine's divergence rules
//! ([`super::divergence`]); an answer sometimes arrives late, after the
//! follower's leader or log moved, and is then dropped
//! ([`PartitionReplication::takes_answer`]). Every choice comes from one seeded ChaCha
//! stream, so a seed replays exactly.
//!
//! After every step the checker asserts:
//! - no record acknowledged to the producer, nor any a consumer read below
//!   a high watermark, is ever lost or changed on the leader;
//! - a replica's high watermark never goes back (within one incarnation);
//! - below the leader's HW every live ISR member holds the leader's log;
//! - one leader per leader epoch.
//!
//! [`ReplicaBug`] breaks a rule on purpose, to show the checker can fail.

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::elections::elect_preferred;
use crate::cluster::records::PartitionRegistration;
use crate::log::epoch_cache::LeaderEpochCache;
use crate::protocol::errors::ErrorCode;
use crate::replica::divergence::{
    EpochEndOffset, Restart, diverging_epoch, out_of_range_restart, truncation_for,
};
use crate::replica::replication::{
    AckProgress, Action, FetchAsked, FollowerFetch, IsrProposal, PartitionReplication,
    ReplicationSettings, Role,
};
use crate::types::{BrokerId, LeaderEpoch, Offset};

const REPLICAS: usize = 3;
/// Simulated milliseconds per step.
const STEP_MS: u64 = 10;
/// `replica.lag.time.max.ms` in the simulation: a few dozen steps.
const LAG_MS: u64 = 300;

/// A rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReplicaBug {
    /// A restarted replica truncates its log to the high watermark it last
    /// checkpointed, as Kafka did before KIP-101: an acknowledged record
    /// above a lagging follower HW is lost if that replica is then elected
    /// (the seeds' first scenario).
    TruncateToHighWatermark,
    /// A follower takes a fetch answer that no longer applies (sent before
    /// its leader or its log moved) instead of dropping it: an old
    /// leader's DivergingEpoch cuts what the new leader already counts
    /// this replica as holding.
    TakeStaleFetchAnswers,
}

#[derive(Clone, Copy, Debug)]
pub struct ReplicaSimConfig {
    pub seed: u64,
    pub steps: usize,
    pub bug: Option<ReplicaBug>,
}

impl ReplicaSimConfig {
    pub fn new(seed: u64) -> ReplicaSimConfig {
        ReplicaSimConfig {
            seed,
            steps: 600,
            bug: None,
        }
    }
}

/// What a run did (a sweep that did nothing proves nothing).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplicaReport {
    pub acknowledged: u64,
    pub crashes: u64,
    pub elections: u64,
    pub truncations: u64,
    pub isr_changes: u64,
    /// Network partitions that cut a leader off.
    pub partitions: u64,
    /// Fetch answers dropped because they no longer applied.
    pub stale_answers: u64,
    /// Crashes that left some unsynced writes on disk.
    pub unsynced_kept: u64,
    /// Crashes whose last surviving write was torn (and dropped).
    pub torn_writes: u64,
    /// Leaderships moved back to the preferred replica
    /// (`cluster::elections::elect_preferred`).
    pub preferred_elections: u64,
}

impl std::iter::Sum<ReplicaReport> for ReplicaReport {
    fn sum<I: Iterator<Item = ReplicaReport>>(reports: I) -> ReplicaReport {
        reports.fold(ReplicaReport::default(), |total, report| ReplicaReport {
            acknowledged: total.acknowledged + report.acknowledged,
            crashes: total.crashes + report.crashes,
            elections: total.elections + report.elections,
            truncations: total.truncations + report.truncations,
            isr_changes: total.isr_changes + report.isr_changes,
            partitions: total.partitions + report.partitions,
            stale_answers: total.stale_answers + report.stale_answers,
            unsynced_kept: total.unsynced_kept + report.unsynced_kept,
            torn_writes: total.torn_writes + report.torn_writes,
            preferred_elections: total.preferred_elections + report.preferred_elections,
        })
    }
}

/// The first broken invariant: the seed, the step and what broke.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicaViolation {
    pub seed: u64,
    pub step: usize,
    pub what: String,
}

impl std::fmt::Display for ReplicaViolation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seed {} step {}: {}", self.seed, self.step, self.what)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Entry {
    epoch: LeaderEpoch,
    value: u64,
}

/// What a leader answered a fetch with.
#[derive(Clone, Debug)]
enum Answer {
    /// OFFSET_OUT_OF_RANGE: the follower truncates to this offset.
    OutOfRange(Offset),
    /// The follower's last epoch diverged; it truncates by epoch.
    Diverged(EpochEndOffset),
    /// Entries from the fetch offset, and the leader's HW.
    Records(Vec<Entry>, Offset),
}

/// A fetch answer on its way back to the follower.
#[derive(Clone, Debug)]
struct InFlight {
    follower: usize,
    leader: usize,
    asked: FetchAsked,
    answer: Answer,
}

#[derive(Debug)]
struct Node {
    id: BrokerId,
    alive: bool,
    /// Offset = index; the log starts at 0.
    log: Vec<Entry>,
    /// Entries below are synced (survive a crash).
    durable: usize,
    epochs: LeaderEpochCache,
    replication: Option<PartitionReplication>,
    /// The HW as Kafka checkpoints it (what the bug truncates to).
    checkpointed_high_watermark: Offset,
}

impl Node {
    fn end(&self) -> Offset {
        Offset(self.log.len() as i64)
    }

    fn truncate(&mut self, end: usize) {
        self.log.truncate(end);
        self.durable = self.durable.min(end);
        self.epochs.truncate_from_end(Offset(end as i64));
    }

    fn append(&mut self, entry: Entry) {
        self.epochs.assign(entry.epoch, self.end());
        self.log.push(entry);
    }
}

struct Sim {
    config: ReplicaSimConfig,
    rng: ChaCha8Rng,
    step: usize,
    nodes: Vec<Node>,
    registration: PartitionRegistration,
    /// Which replica led each epoch.
    leaders: BTreeMap<LeaderEpoch, BrokerId>,
    /// Broken (crashed, not yet fenced) replicas the controller still
    /// counts.
    unfenced_down: Vec<BrokerId>,
    /// A live replica cut off from the others and the controller.
    cut: Option<usize>,
    /// Whether the controller fenced the cut-off replica.
    cut_fenced: bool,
    /// Produced to the cut-off replica, awaiting its acks=all.
    stranded: Vec<(Offset, usize, u64)>,
    next_value: u64,
    /// Produced, awaiting acks=all: (end offset, offset, value).
    pending: Vec<(Offset, usize, u64)>,
    /// Acknowledged or read below a HW: must never change.
    committed: BTreeMap<usize, u64>,
    /// Fetch answers not yet delivered (a follower may have one from each
    /// leader it fetched from, as each leader has its own fetcher).
    in_flight: Vec<InFlight>,
    report: ReplicaReport,
}

/// Takes the produces `replication` has answered out of `pending`: the
/// (offset, value) of those acknowledged.
fn answered(
    replication: &PartitionReplication,
    pending: &mut Vec<(Offset, usize, u64)>,
) -> Vec<(usize, u64)> {
    let mut acknowledged = Vec::new();
    pending.retain(
        |(end, offset, value)| match replication.ack_progress(*end) {
            AckProgress::Waiting => true,
            AckProgress::Done(code) => {
                if code == ErrorCode::NONE {
                    acknowledged.push((*offset, *value));
                }
                false
            }
        },
    );
    acknowledged
}

fn now(step: usize) -> u64 {
    step as u64 * STEP_MS
}

/// Runs one seed; the first violated invariant, if any.
pub fn run(config: ReplicaSimConfig) -> Result<ReplicaReport, ReplicaViolation> {
    let ids: Vec<BrokerId> = (0..REPLICAS as i32).map(BrokerId).collect();
    let registration = PartitionRegistration {
        replicas: ids.clone(),
        isr: ids.clone(),
        leader: ids[0],
        leader_epoch: LeaderEpoch(0),
        partition_epoch: 0,
    };
    let mut sim = Sim {
        config,
        rng: ChaCha8Rng::seed_from_u64(config.seed),
        step: 0,
        nodes: ids
            .iter()
            .map(|id| Node {
                id: *id,
                alive: true,
                log: Vec::new(),
                durable: 0,
                epochs: LeaderEpochCache::default(),
                replication: None,
                checkpointed_high_watermark: Offset(0),
            })
            .collect(),
        registration,
        leaders: BTreeMap::from([(LeaderEpoch(0), ids[0])]),
        unfenced_down: Vec::new(),
        cut: None,
        cut_fenced: false,
        stranded: Vec::new(),
        next_value: 1,
        pending: Vec::new(),
        committed: BTreeMap::new(),
        in_flight: Vec::new(),
        report: ReplicaReport::default(),
    };
    for index in 0..REPLICAS {
        sim.start_replica(index);
    }
    sim.nodes[0].epochs.assign(LeaderEpoch(0), Offset(0));
    for step in 1..=config.steps {
        sim.step = step;
        sim.act()?;
        sim.check()?;
    }
    Ok(sim.report)
}

/// Runs seeds `first ..< first + count`; the first violation stops it.
pub fn sweep(
    first: u64,
    count: u64,
    configure: impl Fn(&mut ReplicaSimConfig),
) -> Result<Vec<ReplicaReport>, ReplicaViolation> {
    (first..first + count)
        .map(|seed| {
            let mut config = ReplicaSimConfig::new(seed);
            configure(&mut config);
            run(config)
        })
        .collect()
}

impl Sim {
    fn violation(&self, what: String) -> ReplicaViolation {
        ReplicaViolation {
            seed: self.config.seed,
            step: self.step,
            what,
        }
    }

    fn leader_index(&self) -> Option<usize> {
        let leader = self.registration.leader;
        self.nodes
            .iter()
            .position(|node| node.id == leader && node.alive && node.replication.is_some())
    }

    fn high_watermark(&self, leader: usize) -> Offset {
        self.nodes[leader]
            .replication
            .as_ref()
            .expect("a live leader")
            .high_watermark()
    }

    fn start_replica(&mut self, index: usize) {
        let now = now(self.step);
        let node = &mut self.nodes[index];
        let end = node.end();
        node.replication = Some(PartitionReplication::new(
            ReplicationSettings {
                local: node.id,
                min_insync_replicas: 2,
                replica_lag_time_max_ms: LAG_MS,
            },
            self.registration.clone(),
            end,
            Offset(node.durable as i64),
            node.checkpointed_high_watermark.min(end),
            now,
        ));
    }

    fn act(&mut self) -> Result<(), ReplicaViolation> {
        let roll = self.rng.gen_range(0..108);
        match roll {
            0..30 => self.produce()?,
            100 => self.isolate(),
            101..103 => self.heal()?,
            30..40 => self.sync_leader()?,
            40..80 => {
                let follower = self.rng.gen_range(0..REPLICAS);
                self.fetch(follower)?;
            }
            103..106 => self.deliver_late()?,
            80..86 => self.tick()?,
            86..89 => self.crash(),
            89..93 => self.fence()?,
            93..98 => self.restart()?,
            106..108 => self.prefer()?,
            _ => self.read()?,
        }
        self.collect_acks();
        Ok(())
    }

    fn produce(&mut self) -> Result<(), ReplicaViolation> {
        if let Some(cut) = self.cut.filter(|_| self.rng.gen_bool(0.3)) {
            return self.produce_to_cut(cut);
        }
        let Some(leader) = self.leader_index() else {
            return Ok(());
        };
        if let Some(produced) = self.append_produced(leader) {
            self.pending.push(produced);
        }
        Ok(())
    }

    /// Node `index` takes one acks=all record if it believes it leads and
    /// its ISR allows: (end offset, offset, value).
    fn append_produced(&mut self, index: usize) -> Option<(Offset, usize, u64)> {
        let node = &mut self.nodes[index];
        let replication = node.replication.as_mut()?;
        if replication.role() != Role::Leader || replication.check_produce(true).is_err() {
            return None;
        }
        let epoch = replication.leader_epoch();
        let value = self.next_value;
        self.next_value += 1;
        node.append(Entry { epoch, value });
        let end = node.end();
        node.replication.as_mut()?.appended(end);
        Some((end, end.0 as usize - 1, value))
    }

    fn sync_leader(&mut self) -> Result<(), ReplicaViolation> {
        let Some(leader) = self.leader_index() else {
            return Ok(());
        };
        let now = now(self.step);
        let node = &mut self.nodes[leader];
        node.durable = node.log.len();
        let durable = Offset(node.durable as i64);
        let actions = node
            .replication
            .as_mut()
            .expect("a live leader")
            .counted(durable, now);
        self.apply(leader, actions)
    }

    fn tick(&mut self) -> Result<(), ReplicaViolation> {
        if let Some(cut) = self.cut {
            // A cut-off leader still looks for laggards; its proposals
            // cannot reach the controller.
            let now = now(self.step);
            if let Some(replication) = self.nodes[cut].replication.as_mut() {
                let actions = replication.tick(now);
                self.apply(cut, actions)?;
            }
        }
        let Some(leader) = self.leader_index() else {
            return Ok(());
        };
        let now = now(self.step);
        let actions = self.nodes[leader]
            .replication
            .as_mut()
            .expect("a live leader")
            .tick(now);
        self.apply(leader, actions)
    }

    /// One round of a follower's fetcher: the leader's divergence check,
    /// then its record of the fetch, then the copy, synced before the next.
    /// A follower fetches from the leader, which answers at once; the
    /// answer arrives now or, sometimes, later (after anything else may
    /// have happened to the follower): at its next fetch from that leader
    /// or at any step.
    fn fetch(&mut self, follower: usize) -> Result<(), ReplicaViolation> {
        let Some(leader) = self.leader_index() else {
            return Ok(());
        };
        let Some(replication) = self.nodes[follower].replication.as_ref() else {
            return Ok(());
        };
        let leader_epoch = replication.leader_epoch();
        if follower == leader || !self.nodes[follower].alive || replication.role() != Role::Follower
        {
            return Ok(());
        }
        if self.cut.is_some_and(|cut| cut == follower || cut == leader) {
            return Ok(());
        }
        // One fetcher per leader: nothing new until its answer is back,
        // which arrives now.
        if let Some(index) = self
            .in_flight
            .iter()
            .position(|flight| flight.follower == follower && flight.leader == leader)
        {
            let flight = self.in_flight.swap_remove(index);
            return self.deliver(flight);
        }
        let now = now(self.step);
        let fetch_offset = self.nodes[follower].end();
        let last_epoch = self.nodes[follower]
            .epochs
            .latest_epoch()
            .unwrap_or(LeaderEpoch::NONE);
        let asked = FetchAsked {
            leader: self.nodes[leader].id,
            leader_epoch,
            fetch_offset,
        };
        let (leader_end, leader_epochs) = {
            let node = &self.nodes[leader];
            (node.end(), node.epochs.clone())
        };
        let answer = match diverging_epoch(
            &leader_epochs,
            Offset(0),
            leader_end,
            fetch_offset,
            last_epoch,
        ) {
            Err(_) => match out_of_range_restart(fetch_offset, Offset(0), leader_end) {
                Restart::TruncateTo(offset) => Answer::OutOfRange(offset),
                Restart::StartAt(_) | Restart::Resume(_) => return Ok(()),
            },
            Ok(Some(diverged)) => Answer::Diverged(diverged),
            Ok(None) => {
                let replica = self.nodes[follower].id;
                let fetched = self.nodes[leader]
                    .replication
                    .as_mut()
                    .expect("a live leader")
                    .follower_fetched(FollowerFetch {
                        replica,
                        fetch_offset,
                        log_start_offset: Offset(0),
                        eligible: true,
                        now_ms: now,
                    });
                let Ok(actions) = fetched else {
                    return Ok(());
                };
                self.apply(leader, actions)?;
                let count = self.rng.gen_range(0..=4usize);
                let copied: Vec<Entry> = self.nodes[leader]
                    .log
                    .iter()
                    .skip(fetch_offset.0 as usize)
                    .take(count)
                    .copied()
                    .collect();
                Answer::Records(copied, self.high_watermark(leader))
            }
        };
        let flight = InFlight {
            follower,
            leader,
            asked,
            answer,
        };
        if self.rng.gen_bool(0.9) {
            self.deliver(flight)
        } else {
            self.in_flight.push(flight);
            Ok(())
        }
    }

    /// A fetch answer held back arrives, unless the network between its
    /// follower and leader is cut.
    fn deliver_late(&mut self) -> Result<(), ReplicaViolation> {
        if self.in_flight.is_empty() {
            return Ok(());
        }
        let index = self.rng.gen_range(0..self.in_flight.len());
        let flight = &self.in_flight[index];
        if self
            .cut
            .is_some_and(|cut| cut == flight.follower || cut == flight.leader)
        {
            return Ok(());
        }
        let flight = self.in_flight.swap_remove(index);
        self.deliver(flight)
    }

    /// The follower takes a fetch answer, if it still applies
    /// ([`PartitionReplication::takes_answer`]).
    fn deliver(&mut self, flight: InFlight) -> Result<(), ReplicaViolation> {
        let follower = flight.follower;
        let node = &self.nodes[follower];
        let Some(replication) = node.replication.as_ref() else {
            return Ok(());
        };
        if !replication.takes_answer(&flight.asked, node.end()) {
            self.report.stale_answers += 1;
            if self.config.bug != Some(ReplicaBug::TakeStaleFetchAnswers) {
                return Ok(());
            }
        }
        match flight.answer {
            Answer::OutOfRange(offset) => self.truncate_follower(follower, offset),
            Answer::Diverged(diverged) => {
                let node = &self.nodes[follower];
                let truncation = truncation_for(&node.epochs, node.end(), diverged);
                self.truncate_follower(follower, truncation.offset);
            }
            Answer::Records(entries, leader_high_watermark) => {
                let now = now(self.step);
                let node = &mut self.nodes[follower];
                // The log refuses records that do not start at its end.
                if entries.is_empty() || node.end() == flight.asked.fetch_offset {
                    for entry in entries {
                        node.append(entry);
                    }
                }
                node.durable = node.log.len();
                let end = node.end();
                let Some(replication) = node.replication.as_mut() else {
                    return Ok(());
                };
                replication.appended(end);
                let mut actions = replication.counted(end, now);
                actions.extend(replication.leader_high_watermark_is(leader_high_watermark));
                self.apply(follower, actions)?;
            }
        }
        Ok(())
    }

    fn truncate_follower(&mut self, follower: usize, offset: Offset) {
        let node = &mut self.nodes[follower];
        if offset >= node.end() {
            return;
        }
        self.report.truncations += 1;
        node.truncate(offset.0.max(0) as usize);
        let end = node.end();
        if let Some(replication) = node.replication.as_mut() {
            replication.truncated(end);
        }
    }

    /// A replica process dies: what it had not synced is gone. The
    /// controller notices only at the session timeout ([`Sim::fence`]).
    fn crash(&mut self) {
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
        // Writes not yet synced may have reached the disk, some of them:
        // any prefix of them survives, the last one possibly torn, which
        // recovery's CRC check drops (so a shorter prefix survives whole).
        let kept = self.rng.gen_range(node.durable..=node.log.len());
        if kept > node.durable {
            self.report.unsynced_kept += 1;
        }
        if kept < node.log.len() && self.rng.gen_bool(0.5) {
            self.report.torn_writes += 1;
        }
        node.truncate(kept);
        // Recovery syncs what it keeps.
        node.durable = kept;
        self.unfenced_down.push(node.id);
        if led || node.id == self.registration.leader {
            self.pending.clear();
        }
    }

    /// The session of a dead replica expires: it leaves the ISR (unless
    /// last), and if it led, the first live ISR member in replica order
    /// leads at a new epoch (none: offline).
    fn fence(&mut self) -> Result<(), ReplicaViolation> {
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

    fn fence_broker(&mut self, gone: BrokerId) -> Result<(), ReplicaViolation> {
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
    fn prefer(&mut self) -> Result<(), ReplicaViolation> {
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

    fn restart(&mut self) -> Result<(), ReplicaViolation> {
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

    /// A consumer reads the leader below its HW: what it sees is committed.
    fn read(&mut self) -> Result<(), ReplicaViolation> {
        let Some(leader) = self.leader_index() else {
            return Ok(());
        };
        let node = &self.nodes[leader];
        let high_watermark = self.high_watermark(leader).0 as usize;
        if high_watermark > node.log.len() {
            return Err(self.violation(format!(
                "leader {} serves a HW {high_watermark} past its log end {}",
                node.id,
                node.log.len()
            )));
        }
        for (offset, entry) in node.log.iter().enumerate().take(high_watermark) {
            self.committed.entry(offset).or_insert(entry.value);
        }
        Ok(())
    }

    /// An offline partition whose ISR member `id` returns is led by it.
    fn lead_if_offline(&mut self, id: BrokerId) -> Option<Result<(), ReplicaViolation>> {
        if self.registration.leader != BrokerId::NONE || !self.registration.isr.contains(&id) {
            return None;
        }
        let mut next = self.registration.clone();
        next.leader = id;
        next.leader_epoch = LeaderEpoch(next.leader_epoch.0 + 1);
        next.partition_epoch += 1;
        Some(self.commit(next))
    }

    /// The network cuts the leader off (a live one, when none is cut yet):
    /// what it was asked to acknowledge now waits on it alone.
    fn isolate(&mut self) {
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
    fn heal(&mut self) -> Result<(), ReplicaViolation> {
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
    fn produce_to_cut(&mut self, cut: usize) -> Result<(), ReplicaViolation> {
        let Some(produced) = self.append_produced(cut) else {
            return Ok(());
        };
        self.stranded.push(produced);
        // Synced at once: only the ISR it cannot reach holds its HW back.
        let node = &mut self.nodes[cut];
        node.durable = node.log.len();
        let end = node.end();
        let actions = match node.replication.as_mut() {
            Some(replication) => replication.counted(end, now(self.step)),
            None => Vec::new(),
        };
        self.apply(cut, actions)
    }

    /// What the cut-off replica acknowledged counts as committed (and so
    /// must survive the partition).
    fn collect_stranded(&mut self) {
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

    fn collect_acks(&mut self) {
        self.collect_stranded();
        let Some(leader) = self.leader_index() else {
            self.pending.clear();
            return;
        };
        let replication = self.nodes[leader]
            .replication
            .as_ref()
            .expect("a live leader");
        for (offset, value) in answered(replication, &mut self.pending) {
            self.report.acknowledged += 1;
            self.committed.insert(offset, value);
        }
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

    fn apply(&mut self, index: usize, actions: Vec<Action>) -> Result<(), ReplicaViolation> {
        for action in actions {
            match action {
                Action::HighWatermarkAdvanced(high_watermark) => {
                    let node = &mut self.nodes[index];
                    if high_watermark > node.end() {
                        return Err(self.violation(format!(
                            "replica {} moved its HW to {} past its log end {}",
                            self.nodes[index].id,
                            high_watermark.0,
                            self.nodes[index].end().0
                        )));
                    }
                    if high_watermark < node.checkpointed_high_watermark {
                        return Err(self.violation(format!(
                            "replica {} moved its HW back from {} to {}",
                            self.nodes[index].id,
                            self.nodes[index].checkpointed_high_watermark.0,
                            high_watermark.0
                        )));
                    }
                    node.checkpointed_high_watermark = high_watermark;
                }
                Action::ProposeIsr(proposal) => self.alter_partition(index, proposal)?,
            }
        }
        Ok(())
    }

    /// AlterPartition at the controller: taken at the current epochs with
    /// only live members, refused otherwise.
    fn alter_partition(
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

    fn check(&self) -> Result<(), ReplicaViolation> {
        let Some(leader) = self.leader_index() else {
            return Ok(());
        };
        let node = &self.nodes[leader];
        for (offset, value) in &self.committed {
            let held = node.log.get(*offset).map(|entry| entry.value);
            if held != Some(*value) {
                return Err(self.violation(format!(
                    "committed record {value} at offset {offset} is {held:?} on leader {}",
                    node.id
                )));
            }
        }
        let high_watermark = self.high_watermark(leader).0 as usize;
        for member in &self.registration.isr {
            let other = &self.nodes[member.0 as usize];
            if !other.alive || other.id == node.id {
                continue;
            }
            let shared = high_watermark.min(other.log.len());
            if other.log[..shared] != node.log[..shared] {
                return Err(self.violation(format!(
                    "ISR member {} differs from leader {} below the HW {high_watermark}",
                    other.id, node.id
                )));
            }
        }
        Ok(())
    }
}
