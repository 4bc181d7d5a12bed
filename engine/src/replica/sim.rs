//! A deterministic simulator of one partition's replication: three
//! replicas, each a [`PartitionReplication`] over a log whose offsets,
//! flush policy and high watermark are the broker's own core
//! ([`LogProgress`]) over a simulated disk: writes and syncs complete at
//! steps of their own, and a crash keeps what was synced and any prefix of
//! what was written but not synced (under Kafka's `flush.*` settings, a
//! process crash: everything written), whose last write may be torn and is
//! then dropped by recovery. A controller commits ISR changes and
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
//! - one leader per leader epoch;
//! - the latest offset a leader answers a consumer (ListOffsets) is past
//!   every committed record.
//!
//! Consumers read below the HW the log core serves, and a replica counts
//! (for the HW and its fetch offset) what the core says it holds.
//! [`ReplicaBug`] breaks a rule on purpose, to show the checker can fail.
//!
//! This file holds the run, the clients (producer, consumer) and the
//! checker; the followers' fetchers are in `sim/fetching.rs`, the
//! controller in `sim/controller.rs` and the crashes and network partitions
//! in `sim/faults.rs`.

mod controller;
mod faults;
mod fetching;

use std::collections::BTreeMap;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::records::PartitionRegistration;
use crate::log::config::FlushPolicy;
use crate::log::epoch_cache::LeaderEpochCache;
use crate::log::progress::{ActiveSegment, LogProgress, SegmentBytes, SyncStep, SyncerState};
use crate::protocol::errors::ErrorCode;
use crate::replica::follower::PartitionAnswer;
use crate::replica::replication::{
    AckProgress, Action, FetchAsked, PartitionReplication, ReplicationSettings, Role,
};
use crate::types::{BrokerId, LeaderEpoch, Offset};

const REPLICAS: usize = 3;
/// Simulated milliseconds per step.
const STEP_MS: u64 = 10;
/// `replica.lag.time.max.ms` in the simulation: a few dozen steps.
const LAG_MS: u64 = 300;
/// The simulated log is one segment at offset 0 whose `.log` holds one
/// byte per record: a record's end position is its offset plus one.
const SEGMENT: Offset = Offset(0);

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
    /// A replica counts what it has written, not what its flush policy
    /// says it holds: under continuous flushing, an acknowledged record
    /// written but not synced on the replicas that hold it dies with them.
    CountWrittenAsHeld,
    /// A new leader answers a consumer's ListOffsets for the latest offset
    /// with a HW still below the start of its epoch (no KIP-207 check): a
    /// reader that stops there misses records its predecessor acknowledged.
    AnswerLatestBehindEpochStart,
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

/// What a leader answered a fetch with: the partition's part of a Fetch
/// answer as the broker's follower reads it, and the entries it carried.
#[derive(Clone, Debug)]
struct Answer {
    partition: PartitionAnswer,
    entries: Vec<Entry>,
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
    /// The broker's log core: log end, written, durable, HW, when to sync.
    progress: LogProgress,
    /// How far the disk has the log: records written, records synced.
    disk: SegmentBytes,
    epochs: LeaderEpochCache,
    replication: Option<PartitionReplication>,
    /// The HW as Kafka checkpoints it (what the bug truncates to).
    checkpointed_high_watermark: Offset,
}

impl Node {
    fn end(&self) -> Offset {
        Offset(self.log.len() as i64)
    }

    /// Cuts the log to `end` and reopens it, as the broker does: what is
    /// kept is synced, and the HW is at most the new end.
    fn truncate(&mut self, end: usize) {
        self.log.truncate(end);
        let end = Offset(end as i64);
        self.epochs.truncate_from_end(end);
        let high_watermark = self.progress.high_watermark();
        self.progress = LogProgress::open(self.progress.flush(), end, high_watermark);
        self.disk = SegmentBytes {
            written: end.0 as u64,
            synced: end.0 as u64,
        };
    }

    fn append(&mut self, entry: Entry, now_ms: u64) {
        self.epochs.assign(entry.epoch, self.end());
        self.log.push(entry);
        let end = self.end();
        self.progress
            .appended(SEGMENT, end.0 as u64, end, 1, now_ms);
    }

    /// The disk completes writes up to `records` (at most the log end),
    /// then, if `syncer_runs`, the syncer does what the flush policy says
    /// is due.
    fn disk_work(&mut self, records: usize, syncer_runs: bool, now_ms: u64) {
        self.disk.written = self.disk.written.max(records.min(self.log.len()) as u64);
        let disk = self.disk;
        self.progress.advance(|_| Some(disk));
        if !syncer_runs {
            return;
        }
        let active = ActiveSegment {
            base_offset: SEGMENT,
            bytes: self.disk,
            sealing: false,
        };
        let step = self
            .progress
            .next_sync(active, SyncerState::Running, false, now_ms);
        if let SyncStep::Sync { written, .. } = step {
            self.disk.synced = written;
            let disk = self.disk;
            self.progress.advance(|_| Some(disk));
        }
    }

    /// What this replica counts as held, for replication.
    fn counted(&self, bug: Option<ReplicaBug>) -> Offset {
        if bug == Some(ReplicaBug::CountWrittenAsHeld) {
            return self.progress.written_offset();
        }
        self.progress.counted_offset()
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
    /// The topic's flush policy, chosen by the seed.
    flush: FlushPolicy,
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
    let mut rng = ChaCha8Rng::seed_from_u64(config.seed);
    // Brook's default most of the time; Kafka's `flush.*` settings (which
    // count written records as held) now and then.
    let flush = if rng.gen_bool(0.75) {
        FlushPolicy::Continuous
    } else {
        FlushPolicy::Interval {
            messages: Some(rng.gen_range(1..8)),
            ms: Some(rng.gen_range(20..200)),
        }
    };
    let mut sim = Sim {
        config,
        rng,
        step: 0,
        nodes: ids
            .iter()
            .map(|id| Node {
                id: *id,
                alive: true,
                log: Vec::new(),
                progress: LogProgress::open(flush, Offset(0), Offset(0)),
                disk: SegmentBytes::default(),
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
        flush,
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
        let bug = self.config.bug;
        let node = &mut self.nodes[index];
        let end = node.end();
        let high_watermark = node.checkpointed_high_watermark.min(end);
        node.progress.set_high_watermark(high_watermark);
        node.replication = Some(PartitionReplication::new(
            ReplicationSettings {
                local: node.id,
                min_insync_replicas: 2,
                replica_lag_time_max_ms: LAG_MS,
            },
            self.registration.clone(),
            end,
            node.counted(bug),
            high_watermark,
            now,
        ));
    }

    fn act(&mut self) -> Result<(), ReplicaViolation> {
        let roll = self.rng.gen_range(0..108);
        match roll {
            0..30 => self.produce()?,
            100 => self.isolate(),
            101..103 => self.heal()?,
            30..40 => {
                let index = self.rng.gen_range(0..REPLICAS);
                self.disk_work(index)?;
            }
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
        // Disks work beside everything else: each replica's, now and then.
        for index in 0..REPLICAS {
            if self.rng.gen_bool(0.8) {
                self.disk_work(index)?;
            }
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
        node.append(Entry { epoch, value }, now(self.step));
        let end = node.end();
        node.replication.as_mut()?.appended(end);
        Some((end, end.0 as usize - 1, value))
    }

    /// Replica `index`'s disk completes some of its writes (any number of
    /// the records not yet written), and its syncer may do what is due;
    /// what the replica now holds counts.
    fn disk_work(&mut self, index: usize) -> Result<(), ReplicaViolation> {
        let now = now(self.step);
        let bug = self.config.bug;
        let node = &mut self.nodes[index];
        if !node.alive {
            return Ok(());
        }
        let records = self
            .rng
            .gen_range(node.disk.written as usize..=node.log.len());
        let syncer_runs = self.rng.gen_bool(0.4);
        node.disk_work(records, syncer_runs, now);
        let counted = node.counted(bug);
        let actions = match node.replication.as_mut() {
            Some(replication) => replication.counted(counted, now),
            None => Vec::new(),
        };
        self.apply(index, actions)
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

    /// A consumer reads the leader below the HW its log serves: what it
    /// sees is committed. It first asks where the partition ends
    /// (ListOffsets, latest), as a reader that stops at the end does: an
    /// answer must not stop it short of a committed record.
    fn read(&mut self) -> Result<(), ReplicaViolation> {
        let Some(leader) = self.leader_index() else {
            return Ok(());
        };
        let node = &self.nodes[leader];
        let high_watermark = node.progress.high_watermark().0 as usize;
        if high_watermark > node.log.len() {
            return Err(self.violation(format!(
                "leader {} serves a HW {high_watermark} past its log end {}",
                node.id,
                node.log.len()
            )));
        }
        let replication = node.replication.as_ref().expect("a live leader");
        let answers_latest = !replication.high_watermark_behind_epoch_start()
            || self.config.bug == Some(ReplicaBug::AnswerLatestBehindEpochStart);
        let last_committed = self.committed.last_key_value().map(|(offset, _)| *offset);
        if answers_latest && last_committed.is_some_and(|last| last >= high_watermark) {
            return Err(self.violation(format!(
                "leader {} answers the latest offset {high_watermark} below committed offset {}",
                node.id,
                last_committed.unwrap_or_default()
            )));
        }
        for (offset, entry) in node.log.iter().enumerate().take(high_watermark) {
            self.committed.entry(offset).or_insert(entry.value);
        }
        Ok(())
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

    fn apply(&mut self, index: usize, actions: Vec<Action>) -> Result<(), ReplicaViolation> {
        // The broker serves the HW an input moved at once and sends its
        // AlterPartition after (asynchronously); a proposal the controller
        // commits here at once must not come between them.
        let (proposals, moves): (Vec<Action>, Vec<Action>) = actions
            .into_iter()
            .partition(|action| matches!(action, Action::ProposeIsr(_)));
        for action in moves.into_iter().chain(proposals) {
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
                    node.progress.set_high_watermark(high_watermark);
                }
                Action::ProposeIsr(proposal) => self.alter_partition(index, proposal)?,
            }
        }
        Ok(())
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
