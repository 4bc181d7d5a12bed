//! The deterministic simulator of the controller quorum: the real
//! [`ControllerNode`]s (raft-rs, the controller rules, the image) and real
//! brokers' registration, heartbeats and metadata catch-up, over a simulated
//! network (delay, reorder, drop, duplicate, partition and heal) and clock,
//! with crashes (a voter restarts from what it had persisted) and pauses
//! (SIGSTOP: nothing runs, messages wait). Every random choice comes from
//! one seeded ChaCha stream and events run in (time, sequence) order, so a
//! seed replays exactly.
//!
//! Checked after every event:
//! - at most one leader per term;
//! - every node applies the same entry at the same index (same term, same
//!   bytes): the committed prefix is identical;
//! - every image (voters' and brokers') at one offset has one digest;
//! - a broker is fenced only when, at that moment, the fencing controller
//!   had not heard from it for the whole session timeout (the simulator
//!   keeps its own account of heartbeats delivered);
//! - every partition's registration is sound and its epochs move forward
//!   ([`partitions`]); a broker told it may shut down leads nothing;
//! - a topic that a live broker told a client exists is never unknown to a
//!   live broker asked later ([`crate::cluster::visibility`]);
//! - and at the end, with the faults healed: one controller, every broker
//!   caught up, registered and unfenced; no broker leads, or is in the ISR
//!   of (but as its last member), a partition of a log directory that
//!   failed on it; a broker then stopped for longer than the session is
//!   fenced, and unfenced once it returns.
//!
//! Log directories fail too (a broker's replicas of some partitions go
//! offline until it restarts; its heartbeats name them), drawn from a
//! stream of their own so the other faults of a seed stayed as they were.
//!
//! [`Bug`] breaks a rule on purpose, to show the checker catches it.
//! The brokers' and the admin client's side is in [`brokers`].

mod brokers;
mod partitions;
mod settle;

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};

use raft::eraftpb::{Entry, HardState, Message, Snapshot};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::cluster::alter_partition::AlterPartitionRequest;
use crate::cluster::cluster_image::ClusterImage;
use crate::cluster::image::TopicId;
use crate::cluster::quorum::{
    ControllerNode, Fetched, MetadataFetch, MetadataStore, Output, QuorumConfig, QuorumError,
    node_of, raft_id, tick_interval_ms,
};
use crate::cluster::records::{BrokerRegistration, MetadataRecord};
use crate::cluster::visibility::TopicVisibility;
use crate::protocol::errors::ErrorCode;
use crate::types::{BrokerId, PartitionId, TopicPartition};

const SESSION_TIMEOUT_MS: u64 = 9_000;
const HEARTBEAT_INTERVAL_MS: u64 = 2_000;
/// `leader.imbalance.check.interval.seconds` in the simulation: runs see
/// leaderships move back to preferred replicas many times.
const LEADER_BALANCE_INTERVAL_MS: u64 = 1_000;
/// Time with faults healed before the end-of-run checks.
const QUIET_MS: u64 = 30_000;
/// Snapshots after this many bytes of log, so runs exercise them.
const SNAPSHOT_AFTER_BYTES: u64 = 1_024;
/// Entries one catch-up answer carries.
const CATCHUP_ENTRIES_MAX: usize = 64;
/// How long a broker waits to be told it may stop (Kafka's brokers wait
/// `controlled.shutdown` time too) before it stops anyway.
const SHUTDOWN_TIMEOUT_MS: u64 = 5_000;

/// Mixed into the seed for the client's own random stream.
const ASKS_STREAM: u64 = 0x5eed_a5c5;
/// Mixed into the seed for the log directory failures' stream.
const DISKS_STREAM: u64 = 0xd15c_fa11;

/// A rule broken on purpose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bug {
    /// A voter's vote is not made durable: after a crash it can vote again
    /// in the same term.
    ForgetVote,
    /// The controller fences after half the session timeout.
    FenceEarly,
    /// The active controller elects the first live replica outside the ISR
    /// of an offline partition, and leaves the ISR as it was.
    ElectOutOfIsr,
    /// Brokers show a topic as soon as they apply it, not once every live
    /// broker serves it ([`crate::cluster::visibility`]).
    ShowAppliedTopics,
    /// Brokers do not name the partitions of their failed log directories
    /// in heartbeats.
    HideOfflineDirs,
}

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub seed: u64,
    pub voters: usize,
    /// Brokers that are not voters (observers of the metadata log).
    pub brokers_only: usize,
    /// Simulated time with faults, before the quiet end.
    pub faulty_ms: u64,
    pub bug: Option<Bug>,
}

impl SimConfig {
    pub fn new(seed: u64) -> SimConfig {
        SimConfig {
            seed,
            // One run in four has five voters.
            voters: if seed % 4 == 3 { 5 } else { 3 },
            brokers_only: 1,
            faulty_ms: 20_000,
            bug: None,
        }
    }
}

/// A broken invariant, with what reproduces it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    pub seed: u64,
    pub at_ms: u64,
    pub what: String,
}

impl std::fmt::Display for Violation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "seed {} at {} ms: {}", self.seed, self.at_ms, self.what)
    }
}

/// What one run did (so a sweep can show it exercised something).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    pub events: u64,
    pub terms: u64,
    pub committed: u64,
    pub topics: u64,
    pub crashes: u64,
    pub fences: u64,
    pub snapshots: u64,
    /// Leader changes seen in committed images.
    pub leader_changes: u64,
    /// AlterPartition requests proposed, and refused.
    pub isr_changes: u64,
    pub isr_refusals: u64,
    /// Brokers that stopped once told they should.
    pub controlled_shutdowns: u64,
    /// Leaderships the active controller's balancing runs moved back to
    /// preferred replicas (proposed).
    pub balanced: u64,
    /// Topics a live broker showed a client.
    pub topics_shown: u64,
    /// Replicas taken offline by a failed log directory.
    pub offline_replicas: u64,
}

impl<'a> std::iter::Sum<&'a Report> for Report {
    fn sum<I: Iterator<Item = &'a Report>>(reports: I) -> Report {
        reports.fold(Report::default(), |sum, report| Report {
            events: sum.events + report.events,
            terms: sum.terms + report.terms,
            committed: sum.committed + report.committed,
            topics: sum.topics + report.topics,
            crashes: sum.crashes + report.crashes,
            fences: sum.fences + report.fences,
            snapshots: sum.snapshots + report.snapshots,
            leader_changes: sum.leader_changes + report.leader_changes,
            isr_changes: sum.isr_changes + report.isr_changes,
            isr_refusals: sum.isr_refusals + report.isr_refusals,
            controlled_shutdowns: sum.controlled_shutdowns + report.controlled_shutdowns,
            balanced: sum.balanced + report.balanced,
            topics_shown: sum.topics_shown + report.topics_shown,
            offline_replicas: sum.offline_replicas + report.offline_replicas,
        })
    }
}

#[derive(Clone, Debug)]
enum Payload {
    Raft(Box<Message>),
    Register(BrokerRegistration),
    Registered(Result<i64, ErrorCode>, Option<BrokerId>),
    Heartbeat {
        epoch: i64,
        applied: u64,
        want_shut_down: bool,
        offline: Vec<TopicPartition>,
    },
    /// The error, a hint of the controller, and `should_shut_down`.
    HeartbeatAnswer(ErrorCode, Option<BrokerId>, bool),
    AlterPartition(Box<AlterPartitionRequest>),
    Fetch(MetadataFetch),
    Fetched(Box<Fetched>),
    CreateTopic(String),
}

#[derive(Clone, Debug)]
enum Event {
    /// `incarnation` is the receiver's when sent: a process that restarted
    /// since never gets it (its connections died with it).
    Deliver {
        from: usize,
        to: usize,
        incarnation: u64,
        payload: Payload,
    },
    Tick(usize),
    BrokerTimer(usize),
    Crash(usize),
    /// A controlled shutdown, then down for the given time.
    ShutDown(usize, u64),
    /// A controlled shutdown that took too long: this incarnation crashes.
    ShutdownTimeout(usize, u64),
    Restart(usize),
    Pause(usize, u64),
    Resume(usize),
    Partition(Vec<usize>, u64),
    Heal,
    CreateTopic,
    /// A client asks a broker which topics exist (Metadata).
    AskTopics,
    /// Injects a random fault and schedules the next one.
    Fault,
    /// A log directory of a random broker fails, and the next is scheduled.
    DirFails,
}

/// What a voter has made durable.
#[derive(Clone, Debug, Default)]
struct Disk {
    hard_state: HardState,
    snapshot: Snapshot,
    entries: Vec<Entry>,
}

struct Node {
    id: BrokerId,
    controller: Option<ControllerNode>,
    disk: Disk,
    up: bool,
    paused: bool,
    /// Messages that reached it while paused.
    held: Vec<Event>,
    /// The broker side.
    image: ClusterImage,
    /// Which of its topics the broker may show ([`TopicVisibility`]).
    visibility: TopicVisibility,
    incarnation: u64,
    epoch: Option<i64>,
    controller_hint: Option<BrokerId>,
    /// Registration proposals waiting to be answered (controller side).
    waiting: Vec<(u64, u64, usize)>,
    /// When this controller, as leader of its term, last heard from each
    /// broker epoch (simulator's own account).
    heard: BTreeMap<(BrokerId, i64), u64>,
    leader_since: Option<(u64, u64)>,
    /// In a controlled shutdown, to stay down this long once stopped.
    shutting_down: Option<u64>,
    /// The partitions of its failed log directories (until it restarts).
    offline: Vec<TopicPartition>,
}

pub struct Simulation {
    config: SimConfig,
    rng: ChaCha8Rng,
    now_ms: u64,
    sequence: u64,
    queue: BinaryHeap<Reverse<(u64, u64)>>,
    events: BTreeMap<u64, Event>,
    nodes: Vec<Node>,
    partition: Option<BTreeSet<usize>>,
    faults: bool,
    leaders: BTreeMap<u64, BrokerId>,
    committed: BTreeMap<u64, (u64, u64)>,
    digests: BTreeMap<u64, u64>,
    partitions: BTreeMap<(TopicId, usize), partitions::Seen>,
    topics_asked: u64,
    /// Topics some live broker has told a client exist.
    shown: BTreeSet<TopicId>,
    /// The client's own random choices (which broker, when), apart from
    /// the main stream so that adding the client left other runs as they
    /// were.
    asks: ChaCha8Rng,
    /// Which log directories fail, and when.
    disks: ChaCha8Rng,
    report: Report,
}

type Checked = Result<(), Violation>;

impl std::fmt::Debug for Simulation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Simulation")
            .field("seed", &self.config.seed)
            .field("now_ms", &self.now_ms)
            .field("report", &self.report)
            .finish_non_exhaustive()
    }
}

impl Simulation {
    pub fn new(config: SimConfig) -> Simulation {
        let rng = ChaCha8Rng::seed_from_u64(config.seed);
        let asks = ChaCha8Rng::seed_from_u64(config.seed ^ ASKS_STREAM);
        let disks = ChaCha8Rng::seed_from_u64(config.seed ^ DISKS_STREAM);
        let nodes = (0..config.voters + config.brokers_only)
            .map(|index| Node {
                id: BrokerId(index as i32),
                controller: None,
                disk: Disk::default(),
                up: true,
                paused: false,
                held: Vec::new(),
                image: ClusterImage::default(),
                visibility: TopicVisibility::default(),
                incarnation: 0,
                epoch: None,
                controller_hint: None,
                waiting: Vec::new(),
                heard: BTreeMap::new(),
                leader_since: None,
                shutting_down: None,
                offline: Vec::new(),
            })
            .collect();
        Simulation {
            config,
            rng,
            now_ms: 0,
            sequence: 0,
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            nodes,
            partition: None,
            faults: true,
            leaders: BTreeMap::new(),
            committed: BTreeMap::new(),
            digests: BTreeMap::new(),
            partitions: BTreeMap::new(),
            topics_asked: 0,
            shown: BTreeSet::new(),
            asks,
            disks,
            report: Report::default(),
        }
    }

    fn voters(&self) -> Vec<BrokerId> {
        (0..self.config.voters)
            .map(|index| BrokerId(index as i32))
            .collect()
    }

    fn quorum_config(&self, node: usize) -> QuorumConfig {
        let timeout = match self.config.bug {
            Some(Bug::FenceEarly) => SESSION_TIMEOUT_MS / 2,
            _ => SESSION_TIMEOUT_MS,
        };
        QuorumConfig {
            node: BrokerId(node as i32),
            voters: self.voters(),
            session_timeout_ms: timeout,
            snapshot_after_bytes: SNAPSHOT_AFTER_BYTES,
            leader_balance_interval_ms: Some(LEADER_BALANCE_INTERVAL_MS),
        }
    }

    fn violation(&self, what: impl Into<String>) -> Violation {
        Violation {
            seed: self.config.seed,
            at_ms: self.now_ms,
            what: what.into(),
        }
    }

    fn schedule(&mut self, delay_ms: u64, event: Event) {
        self.sequence += 1;
        self.queue
            .push(Reverse((self.now_ms + delay_ms, self.sequence)));
        self.events.insert(self.sequence, event);
    }

    /// Runs the whole scenario: faults, then quiet, then the end checks.
    pub fn run(mut self) -> Result<Report, Violation> {
        for node in 0..self.nodes.len() {
            if node < self.config.voters {
                self.start_voter(node)?;
                let jitter = self.rng.r#gen();
                self.schedule(tick_interval_ms(jitter), Event::Tick(node));
            }
            let delay = self.rng.gen_range(0..500);
            self.schedule(delay, Event::BrokerTimer(node));
        }
        self.schedule(1_000, Event::CreateTopic);
        self.schedule(1_000, Event::AskTopics);
        self.schedule(500, Event::Fault);
        let first_failure = self.disks.gen_range(2_000..8_000);
        self.schedule(first_failure, Event::DirFails);
        self.run_until(self.config.faulty_ms)?;
        self.heal_everything();
        self.run_until(self.config.faulty_ms + QUIET_MS)?;
        self.check_settled()?;
        self.check_fencing_end_to_end()?;
        Ok(self.report)
    }

    fn run_until(&mut self, end_ms: u64) -> Checked {
        while let Some(Reverse((at, sequence))) = self.queue.peek().copied() {
            if at > end_ms {
                break;
            }
            self.queue.pop();
            let event = self
                .events
                .remove(&sequence)
                .expect("queued events are stored");
            self.now_ms = at;
            self.report.events += 1;
            self.handle(event)?;
            self.check_leaders()?;
        }
        self.now_ms = end_ms;
        Ok(())
    }

    fn handle(&mut self, event: Event) -> Checked {
        let node = match &event {
            Event::Deliver { to, .. } => Some(*to),
            Event::Tick(node) | Event::BrokerTimer(node) => Some(*node),
            _ => None,
        };
        if let Some(node) = node {
            if !self.nodes[node].up {
                // A crashed node's timers stop; a restart sets new ones.
                return Ok(());
            }
            if self.nodes[node].paused {
                self.nodes[node].held.push(event);
                return Ok(());
            }
        }
        match event {
            Event::Deliver {
                from,
                to,
                incarnation,
                payload,
            } => {
                if incarnation != self.nodes[to].incarnation {
                    return Ok(());
                }
                self.deliver(from, to, payload)
            }
            Event::Tick(node) => self.tick(node),
            Event::BrokerTimer(node) => {
                self.broker_timer(node);
                Ok(())
            }
            Event::Crash(node) => {
                self.crash(node);
                Ok(())
            }
            Event::ShutDown(node, down_ms) => {
                self.shut_down(node, down_ms);
                Ok(())
            }
            Event::ShutdownTimeout(node, incarnation) => {
                if self.nodes[node].incarnation == incarnation {
                    if let Some(down_ms) = self.nodes[node].shutting_down {
                        self.crash(node);
                        self.schedule(down_ms, Event::Restart(node));
                    }
                }
                Ok(())
            }
            Event::Restart(node) => self.restart(node),
            Event::Pause(node, resume_ms) => {
                self.nodes[node].paused = true;
                self.schedule(resume_ms, Event::Resume(node));
                Ok(())
            }
            Event::Resume(node) => {
                self.nodes[node].paused = false;
                for held in std::mem::take(&mut self.nodes[node].held) {
                    self.schedule(0, held);
                }
                Ok(())
            }
            Event::Partition(side, heal_ms) => {
                self.partition = Some(side.into_iter().collect());
                self.schedule(heal_ms, Event::Heal);
                Ok(())
            }
            Event::Heal => {
                self.partition = None;
                Ok(())
            }
            Event::CreateTopic => {
                self.create_topic();
                Ok(())
            }
            Event::AskTopics => self.ask_topics(),
            Event::Fault => {
                self.inject_fault();
                Ok(())
            }
            Event::DirFails => {
                self.fail_log_dir();
                Ok(())
            }
        }
    }

    fn start_voter(&mut self, node: usize) -> Checked {
        let disk = self.nodes[node].disk.clone();
        let voters: Vec<u64> = self.voters().into_iter().map(raft_id).collect();
        let store = MetadataStore::restore(&voters, disk.hard_state, disk.snapshot, disk.entries);
        let controller = ControllerNode::new(self.quorum_config(node), store)
            .map_err(|error| self.violation(format!("node {node} cannot start: {error}")))?;
        self.nodes[node].controller = Some(controller);
        Ok(())
    }

    fn crash(&mut self, node: usize) {
        let state = &mut self.nodes[node];
        state.up = false;
        state.paused = false;
        state.held.clear();
        state.controller = None;
        state.waiting.clear();
        state.heard.clear();
        state.leader_since = None;
        state.epoch = None;
        state.shutting_down = None;
        state.offline.clear();
        state.image = ClusterImage::default();
        state.visibility = TopicVisibility::default();
        self.report.crashes += 1;
    }

    fn restart(&mut self, node: usize) -> Checked {
        if self.nodes[node].up {
            return Ok(());
        }
        self.nodes[node].up = true;
        self.nodes[node].incarnation += 1;
        if node < self.config.voters {
            self.start_voter(node)?;
            let jitter = self.rng.r#gen();
            self.schedule(tick_interval_ms(jitter), Event::Tick(node));
        }
        self.schedule(0, Event::BrokerTimer(node));
        Ok(())
    }

    /// A broker asks to shut down: its heartbeats say so until the
    /// controller answers that it may, and then it stops (or, after a
    /// while without that answer, it stops anyway).
    fn shut_down(&mut self, node: usize, down_ms: u64) {
        if !self.nodes[node].up || self.nodes[node].shutting_down.is_some() {
            return;
        }
        self.nodes[node].shutting_down = Some(down_ms);
        let incarnation = self.nodes[node].incarnation;
        self.schedule(
            SHUTDOWN_TIMEOUT_MS,
            Event::ShutdownTimeout(node, incarnation),
        );
    }

    fn tick(&mut self, node: usize) -> Checked {
        let now = self.now_ms;
        let controller = self.nodes[node]
            .controller
            .as_mut()
            .expect("a running voter");
        let ticked = controller.tick(now);
        self.report.balanced += ticked.balanced.len() as u64;
        self.note_leadership(node);
        for record in ticked.fenced {
            if let MetadataRecord::FenceBroker { id, epoch } = record {
                self.check_fence(node, id, epoch)?;
            }
        }
        self.drain(node)?;
        if self.nodes[node]
            .controller
            .as_ref()
            .is_some_and(ControllerNode::is_leader)
        {
            self.elect_out_of_isr(node)?;
        }
        let jitter = self.rng.r#gen();
        self.schedule(tick_interval_ms(jitter), Event::Tick(node));
        Ok(())
    }

    /// The simulator's own account of leadership starts, for the fencing
    /// check.
    fn note_leadership(&mut self, node: usize) {
        let now = self.now_ms;
        let state = &mut self.nodes[node];
        let Some(controller) = &state.controller else {
            return;
        };
        if controller.is_leader() {
            let term = controller.term();
            if state.leader_since.is_none_or(|(held, _)| held != term) {
                state.leader_since = Some((term, now));
                state.heard.clear();
            }
        } else {
            state.leader_since = None;
        }
    }

    fn check_fence(&mut self, node: usize, broker: BrokerId, epoch: i64) -> Checked {
        let state = &self.nodes[node];
        let since = state.leader_since.map_or(0, |(_, at)| at);
        let heard = state
            .heard
            .get(&(broker, epoch))
            .copied()
            .unwrap_or(0)
            .max(since);
        if self.now_ms.saturating_sub(heard) <= SESSION_TIMEOUT_MS {
            return Err(self.violation(format!(
                "controller {node} fenced broker {broker} (epoch {epoch}) {} ms after hearing from it, within the {SESSION_TIMEOUT_MS} ms session",
                self.now_ms - heard
            )));
        }
        self.report.fences += 1;
        Ok(())
    }

    /// Takes every ready of `node`'s controller: persists, checks, sends.
    fn drain(&mut self, node: usize) -> Checked {
        loop {
            let Some(controller) = self.nodes[node].controller.as_mut() else {
                return Ok(());
            };
            let output = match controller.ready() {
                Ok(Some(output)) => output,
                Ok(None) => return Ok(()),
                Err(error) => return Err(self.violation(format!("node {node}: {error}"))),
            };
            self.persist(node, &output);
            self.check_applied(node, &output)?;
            self.answer_registrations(node, &output);
            for message in output.messages {
                let to = node_of(message.to).0 as usize;
                self.send(node, to, Payload::Raft(Box::new(message)));
            }
            self.note_leadership(node);
        }
    }

    fn persist(&mut self, node: usize, output: &Output) {
        let forget_vote = self.config.bug == Some(Bug::ForgetVote);
        let disk = &mut self.nodes[node].disk;
        if let Some(snapshot) = &output.persist.snapshot {
            disk.snapshot = snapshot.clone();
            let index = snapshot.get_metadata().index;
            disk.entries.retain(|entry| entry.index > index);
            self.report.snapshots += 1;
        }
        if let Some(head) = output.persist.entries.first() {
            disk.entries.retain(|entry| entry.index < head.index);
            disk.entries.extend(output.persist.entries.iter().cloned());
        }
        if let Some(hard_state) = &output.persist.hard_state {
            let mut written = hard_state.clone();
            if forget_vote {
                written.vote = 0;
            }
            disk.hard_state = written;
        }
    }

    fn check_applied(&mut self, node: usize, output: &Output) -> Checked {
        for applied in &output.applied {
            match self.committed.get(&applied.index) {
                Some(known) if *known != (applied.term, applied.digest) => {
                    return Err(self.violation(format!(
                        "node {node} applied entry {} of term {} that differs from the one committed before (term {})",
                        applied.index, applied.term, known.0
                    )));
                }
                Some(_) => {}
                None => {
                    self.committed
                        .insert(applied.index, (applied.term, applied.digest));
                    self.report.committed += 1;
                }
            }
        }
        if !output.applied.is_empty() {
            let image = self.nodes[node]
                .controller
                .as_ref()
                .expect("running")
                .image()
                .clone();
            self.check_digest(node, &image)?;
            self.check_partitions(node, &image)?;
        }
        Ok(())
    }

    fn check_digest(&mut self, node: usize, image: &ClusterImage) -> Checked {
        let digest = image.digest();
        match self.digests.get(&image.offset) {
            Some(known) if *known != digest => Err(self.violation(format!(
                "node {node}'s image at offset {} differs from another node's",
                image.offset
            ))),
            Some(_) => Ok(()),
            None => {
                self.digests.insert(image.offset, digest);
                Ok(())
            }
        }
    }

    fn check_leaders(&mut self) -> Checked {
        for node in &self.nodes {
            let Some(controller) = &node.controller else {
                continue;
            };
            if !controller.is_leader() {
                continue;
            }
            let term = controller.term();
            match self.leaders.get(&term) {
                Some(leader) if *leader != node.id => {
                    return Err(Violation {
                        seed: self.config.seed,
                        at_ms: self.now_ms,
                        what: format!("two leaders in term {term}: {leader} and {}", node.id),
                    });
                }
                Some(_) => {}
                None => {
                    self.leaders.insert(term, node.id);
                    self.report.terms += 1;
                }
            }
        }
        Ok(())
    }

    fn answer_registrations(&mut self, node: usize, output: &Output) {
        let mut answers = Vec::new();
        let state = &mut self.nodes[node];
        for applied in &output.applied {
            state.waiting.retain(|(index, term, broker)| {
                if *index != applied.index {
                    return true;
                }
                let result = if *term == applied.term {
                    Ok(*index as i64)
                } else {
                    Err(ErrorCode::NOT_CONTROLLER)
                };
                answers.push((*broker, result));
                false
            });
        }
        for (broker, result) in answers {
            self.send(node, broker, Payload::Registered(result, None));
        }
    }

    fn send(&mut self, from: usize, to: usize, payload: Payload) {
        if let Some(side) = &self.partition {
            if side.contains(&from) != side.contains(&to) {
                return;
            }
        }
        let faults = self.faults;
        if faults && self.rng.gen_bool(0.02) {
            return;
        }
        let incarnation = self.nodes[to].incarnation;
        let copies = if faults && self.rng.gen_bool(0.02) {
            2
        } else {
            1
        };
        for _ in 0..copies {
            let delay = match self.rng.gen_range(0..100) {
                0..=89 => self.rng.gen_range(1..5),
                _ if faults => self.rng.gen_range(5..300),
                _ => self.rng.gen_range(5..20),
            };
            self.schedule(
                delay,
                Event::Deliver {
                    from,
                    to,
                    incarnation,
                    payload: payload.clone(),
                },
            );
        }
    }

    fn deliver(&mut self, from: usize, to: usize, payload: Payload) -> Checked {
        match payload {
            Payload::Raft(message) => {
                let Some(controller) = self.nodes[to].controller.as_mut() else {
                    return Ok(());
                };
                if let Err(error) = controller.step(*message) {
                    // raft-rs refuses some stale messages; that is not a fault.
                    if !matches!(error, QuorumError::Raft(_)) {
                        return Err(self.violation(format!("node {to}: {error}")));
                    }
                }
                self.drain(to)
            }
            Payload::Register(registration) => self.on_register(from, to, registration),
            Payload::Heartbeat {
                epoch,
                applied,
                want_shut_down,
                offline,
            } => self.on_heartbeat(from, to, epoch, applied, want_shut_down, offline),
            Payload::AlterPartition(request) => self.on_alter_partition(to, &request),
            Payload::Fetch(fetch) => {
                let now_ms = self.now_ms;
                if let Some(controller) = self.nodes[to].controller.as_mut() {
                    let fetched =
                        controller.fetch(BrokerId(from as i32), fetch, CATCHUP_ENTRIES_MAX, now_ms);
                    self.send(to, from, Payload::Fetched(Box::new(fetched)));
                }
                Ok(())
            }
            Payload::Fetched(fetched) => self.on_fetched(to, &fetched),
            Payload::Registered(result, hint) => {
                let state = &mut self.nodes[to];
                match result {
                    Ok(epoch) => {
                        state.controller_hint = Some(BrokerId(from as i32));
                        if state.epoch.is_none() {
                            state.epoch = Some(epoch);
                        }
                    }
                    Err(_) => state.controller_hint = hint,
                }
                Ok(())
            }
            Payload::HeartbeatAnswer(error, hint, should_shut_down) => {
                if should_shut_down {
                    if let Some(down_ms) = self.nodes[to].shutting_down {
                        self.crash(to);
                        self.report.controlled_shutdowns += 1;
                        self.schedule(down_ms, Event::Restart(to));
                        return Ok(());
                    }
                }
                let state = &mut self.nodes[to];
                if error == ErrorCode::STALE_BROKER_EPOCH
                    || error == ErrorCode::BROKER_ID_NOT_REGISTERED
                {
                    state.epoch = None;
                } else if error.is_error() {
                    state.controller_hint = hint;
                } else {
                    state.controller_hint = Some(BrokerId(from as i32));
                }
                Ok(())
            }
            Payload::CreateTopic(name) => self.on_create_topic(to, name),
        }
    }

    /// A log directory of a running, registered broker fails: about half
    /// the partitions it has a replica of, as its image shows them, go
    /// offline on it.
    fn fail_log_dir(&mut self) {
        let node = self.disks.gen_range(0..self.nodes.len());
        let next = self.disks.gen_range(2_000..8_000);
        self.schedule(next, Event::DirFails);
        let state = &self.nodes[node];
        if !state.up || state.epoch.is_none() {
            return;
        }
        let me = BrokerId(node as i32);
        let mut failed = Vec::new();
        for topic in state.image.topics.values() {
            for (index, partition) in topic.partitions.iter().enumerate() {
                let topic_partition = TopicPartition {
                    topic: topic.name.clone(),
                    partition: PartitionId(index as i32),
                };
                if partition.replicas.contains(&me)
                    && !state.offline.contains(&topic_partition)
                    && self.disks.gen_bool(0.5)
                {
                    failed.push(topic_partition);
                }
            }
        }
        self.report.offline_replicas += failed.len() as u64;
        self.nodes[node].offline.extend(failed);
    }

    fn inject_fault(&mut self) {
        let nodes = self.nodes.len();
        let fault = match self.rng.gen_range(0..4) {
            0 => {
                let node = self.rng.gen_range(0..nodes);
                let down = self.rng.gen_range(200..6_000);
                if self.nodes[node].epoch.is_some() && self.rng.gen_bool(0.4) {
                    Event::ShutDown(node, down)
                } else {
                    self.schedule(down, Event::Restart(node));
                    Event::Crash(node)
                }
            }
            1 => {
                let node = self.rng.gen_range(0..nodes);
                let stopped = self.rng.gen_range(200..12_000);
                Event::Pause(node, stopped)
            }
            2 => {
                let side: Vec<usize> = (0..nodes).filter(|_| self.rng.gen_bool(0.5)).collect();
                let lasting = self.rng.gen_range(200..5_000);
                Event::Partition(side, lasting)
            }
            _ => Event::Heal,
        };
        self.schedule(0, fault);
        let next = self.rng.gen_range(300..2_500);
        self.schedule(next, Event::Fault);
    }
}

/// How many seeds a sweep test runs: `BROOK_SIM_SEEDS`, else 1,000 (CI).
pub fn sweep_length() -> u64 {
    std::env::var("BROOK_SIM_SEEDS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(1_000)
}

/// Runs seeds `first ..< first + count`; the first violation stops the
/// sweep and says which seed reproduces it.
pub fn sweep(
    first: u64,
    count: u64,
    configure: impl Fn(&mut SimConfig),
) -> Result<Vec<Report>, Violation> {
    (first..first + count)
        .map(|seed| {
            let mut config = SimConfig::new(seed);
            configure(&mut config);
            Simulation::new(config).run()
        })
        .collect()
}
