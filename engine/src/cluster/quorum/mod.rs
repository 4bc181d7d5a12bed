//! A controller voter: raft-rs's `RawNode` over the metadata log, the
//! cluster image the committed log builds, and, while this node is the
//! active controller (the Raft leader), the brokers' sessions.
//!
//! Driven like raft-rs itself, with time as a value: the driver calls
//! [`ControllerNode::tick`] every [`TICK_MS`], [`ControllerNode::step`] with
//! each message from a peer, the request methods for broker and admin
//! requests, and then [`ControllerNode::ready`]. Each [`Output`] says what
//! to make durable and what to send, in that order: nothing in `messages`
//! may leave before `persist` is on disk (a vote or an entry acknowledged
//! and then forgotten is how two leaders get one term).
//!
//! The controller epoch is the Raft term. raft-rs refuses messages from
//! older terms itself; a deposed leader's proposals are never committed
//! (they come back as [`Applied`] entries of another term, or not at all).
//!
//! Election timing: raft-rs draws its randomized election timeout from
//! `thread_rng`. Here the range is one tick wide (`min_election_tick =
//! election_tick`, `max = election_tick + 1`), so the draw has one outcome
//! and a run is reproducible; the spread that keeps voters from timing out
//! together comes from the driver, which varies each node's tick interval
//! with its own seeded jitter (see [`tick_interval_ms`]).

pub mod progress;
pub mod store;

use std::collections::BTreeMap;

use raft::eraftpb::{Entry, EntryType, HardState, Message, Snapshot};
use raft::{RawNode, StateRole};
use thiserror::Error;

use crate::cluster::alter_partition::{self, AlterPartitionRequest};
use crate::cluster::cluster_image::{ApplyError, ClusterImage, LeaderElections};
use crate::cluster::controller::{
    self, BrokerSessions, HeartbeatOutcome, HeartbeatRequest, Refusal,
};
use crate::cluster::elections::{self, ELECTIONS_PER_BALANCE_MAX};
use crate::cluster::records::{
    BrokerRegistration, MetadataRecord, PartitionRegistration, RecordError, decode_batch,
    encode_batch,
};
use crate::cluster::visibility;
use crate::protocol::errors::ErrorCode;
use crate::types::BrokerId;

pub use progress::{QuorumDescription, ReplicaProgress};
pub use store::MetadataStore;

use progress::QuorumProgress;

/// The Raft tick.
pub const TICK_MS: u64 = 100;
/// Ticks without a leader's word before a follower campaigns (1 s).
pub const ELECTION_TICKS: usize = 10;
/// Ticks between a leader's heartbeats.
pub const HEARTBEAT_TICKS: usize = 2;
/// Bytes a Raft append message carries at most.
const MESSAGE_BYTES_MAX: u64 = 1 << 20;
/// Append messages in flight to one follower.
const INFLIGHT_MESSAGES_MAX: usize = 256;
/// Kafka's `metadata.log.max.record.bytes.between.snapshots` default.
pub const SNAPSHOT_AFTER_BYTES_DEFAULT: u64 = 20 * 1024 * 1024;

/// The driver's next tick interval: [`TICK_MS`] ± 30 %, from its own seeded
/// random value `jitter` in `0..=u32::MAX`.
pub fn tick_interval_ms(jitter: u32) -> u64 {
    let spread = TICK_MS * 6 / 10;
    TICK_MS - TICK_MS * 3 / 10 + (u64::from(jitter) * spread) / u64::from(u32::MAX)
}

#[derive(Clone, Debug)]
pub struct QuorumConfig {
    /// This node's `node.id` (Raft ids are non-zero: node 0 is id 0 + 1).
    pub node: BrokerId,
    pub voters: Vec<BrokerId>,
    pub session_timeout_ms: u64,
    pub snapshot_after_bytes: u64,
    /// `leader.imbalance.check.interval.seconds` in ms when
    /// `auto.leader.rebalance.enable` (both Kafka's, 300 s and true); `None`:
    /// leaderships are not moved back to preferred replicas.
    pub leader_balance_interval_ms: Option<u64>,
}

/// A node id as raft-rs numbers it (ids start at 1 there).
pub fn raft_id(node: BrokerId) -> u64 {
    node.0 as u64 + 1
}

pub fn node_of(raft_id: u64) -> BrokerId {
    BrokerId(raft_id as i32 - 1)
}

#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum QuorumError {
    #[error("this node is not the active controller")]
    NotController { leader: Option<BrokerId> },
    #[error("raft: {0}")]
    Raft(String),
    #[error("the metadata log does not apply: {0}")]
    Apply(#[from] ApplyError),
    #[error("the metadata log does not decode: {0}")]
    Decode(#[from] RecordError),
    #[error("metadata from offset {first} does not continue the image at {offset}")]
    NotNext { offset: u64, first: u64 },
}

impl From<raft::Error> for QuorumError {
    fn from(error: raft::Error) -> QuorumError {
        QuorumError::Raft(error.to_string())
    }
}

/// What the driver must make durable before it sends anything.
#[derive(Clone, Debug, Default)]
pub struct Persist {
    /// The latest snapshot (received or taken): write it, then entries up
    /// to its index may be deleted.
    pub snapshot: Option<Snapshot>,
    /// Appended after any entry at or after the first one's index is cut.
    pub entries: Vec<Entry>,
    pub hard_state: Option<HardState>,
}

impl Persist {
    pub fn is_empty(&self) -> bool {
        self.snapshot.is_none() && self.entries.is_empty() && self.hard_state.is_none()
    }
}

/// A proposal as raft-rs placed it: committed as ours only if the entry at
/// `index` is applied with this `term`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proposal {
    pub index: u64,
    pub term: u64,
}

/// An entry applied to the image.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Applied {
    pub index: u64,
    pub term: u64,
    /// A hash of the entry's bytes (the simulator compares prefixes with it).
    pub digest: u64,
}

#[derive(Debug, Default)]
pub struct Output {
    pub persist: Persist,
    pub messages: Vec<Message>,
    pub applied: Vec<Applied>,
    /// Set when this node's role changed in this ready.
    pub role: Option<StateRole>,
}

/// What a BrokerRegistration leads to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Registered {
    /// The same incarnation registered before: this is its epoch.
    Already { epoch: i64 },
    /// Answer once this is applied: the epoch is its index.
    Proposed(Proposal),
}

/// What a tick proposed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ticked {
    /// The fence records of expired sessions, with the elections that move
    /// the fenced brokers' partitions.
    pub fenced: Vec<MetadataRecord>,
    /// Preferred-leader elections of a balancing run.
    pub balanced: Vec<MetadataRecord>,
    /// The stall of the driver's own loop that this tick credited to every
    /// broker's session ([`BrokerSessions::looked`]), if any: only the
    /// active controller keeps sessions, so only it reports one.
    pub stall_ms: Option<u64>,
}

/// Kafka's delay before the next balancing run when one hit its cap.
const BALANCE_AGAIN_MS: u64 = 10;

pub struct ControllerNode {
    raw: RawNode<MetadataStore>,
    image: ClusterImage,
    /// The active controller's view: the image with every entry of its log
    /// applied, committed or not. Requests are validated against it so two
    /// in-flight proposals never contradict each other.
    /// The term it was built in: a view from an earlier leadership is stale.
    latest: Option<(u64, ClusterImage)>,
    sessions: BrokerSessions,
    /// The term in which this node last restarted the sessions.
    sessions_term: u64,
    bytes_since_snapshot: u64,
    /// When the active controller runs its next balancing of leaders (set
    /// once leaders are imbalanced, as Kafka schedules it).
    balance_at: Option<u64>,
    config: QuorumConfig,
    /// What DescribeQuorum reports, while this node leads.
    progress: QuorumProgress,
    /// How far each broker serves the metadata log, as its fetches say:
    /// the active controller's account (cleared when it takes over, since
    /// a broker may have restarted since it last heard).
    served: BTreeMap<BrokerId, u64>,
    /// The term whose leadership `served` was heard in.
    served_term: u64,
    /// The highest `served_by_all` known to have been told to a broker (by
    /// this node, or by an earlier controller as brokers report it): a
    /// fenced broker is unfenced only once it serves that far, so a broker
    /// that comes back never lacks a topic others already show.
    told_served_by_all: u64,
}

/// A broker's metadata fetch: where it fetches from, how far its shards
/// serve the log, and the `served_by_all` it last heard.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MetadataFetch {
    pub offset: u64,
    pub served: u64,
    pub served_by_all: u64,
}

/// The answer to a [`MetadataFetch`]: committed metadata after its offset,
/// and the offset every live broker serves (0 from a node that does not
/// lead: only the active controller keeps the account).
#[derive(Clone, Debug, PartialEq)]
pub struct Fetched {
    pub catchup: Catchup,
    pub served_by_all: u64,
}

impl ControllerNode {
    /// Starts a voter from what its store holds (a fresh
    /// [`MetadataStore::new`] or a [`MetadataStore::restore`]).
    pub fn new(config: QuorumConfig, store: MetadataStore) -> Result<ControllerNode, QuorumError> {
        let snapshot = store.snapshot_ref().clone();
        let image = image_of(&snapshot)?;
        let raft_config = raft::Config {
            id: raft_id(config.node),
            election_tick: ELECTION_TICKS,
            heartbeat_tick: HEARTBEAT_TICKS,
            min_election_tick: ELECTION_TICKS,
            max_election_tick: ELECTION_TICKS + 1,
            pre_vote: true,
            check_quorum: true,
            applied: snapshot.get_metadata().index,
            max_size_per_msg: MESSAGE_BYTES_MAX,
            max_inflight_msgs: INFLIGHT_MESSAGES_MAX,
            ..Default::default()
        };
        raft_config.validate()?;
        let logger = slog::Logger::root(slog::Discard, slog::o!());
        let mut raw = RawNode::new(&raft_config, store, &logger)?;
        // A quorum of one has no one to wait for: it elects itself now,
        // not after an election timeout (a one-node broker would answer
        // nothing for that second after every start).
        if config.voters == [config.node] {
            raw.campaign()?;
        }
        Ok(ControllerNode {
            raw,
            image,
            latest: None,
            sessions: BrokerSessions::new(config.session_timeout_ms),
            sessions_term: 0,
            bytes_since_snapshot: 0,
            balance_at: None,
            config,
            progress: QuorumProgress::default(),
            served: BTreeMap::new(),
            served_term: 0,
            told_served_by_all: 0,
        })
    }

    /// The image of the committed log.
    pub fn image(&self) -> &ClusterImage {
        &self.image
    }

    pub fn store(&self) -> &MetadataStore {
        self.raw.store()
    }

    pub fn is_leader(&self) -> bool {
        self.raw.raft.state == StateRole::Leader
    }

    /// The controller epoch: the Raft term.
    pub fn term(&self) -> u64 {
        self.raw.raft.term
    }

    pub fn leader(&self) -> Option<BrokerId> {
        match self.raw.raft.leader_id {
            raft::INVALID_ID => None,
            id => Some(node_of(id)),
        }
    }

    pub fn committed_index(&self) -> u64 {
        self.raw.raft.raft_log.committed
    }

    /// One Raft tick; on the active controller, also fences the brokers
    /// whose sessions expired and, when due, moves leaderships back to
    /// preferred replicas. What it proposed.
    pub fn tick(&mut self, now_ms: u64) -> Ticked {
        self.raw.tick();
        if !self.is_leader() {
            self.balance_at = None;
            return Ticked::default();
        }
        let (fenced, stall_ms) = self.fence_expired(now_ms);
        let balanced = match fenced.is_empty() {
            true => self.balance_leaders(now_ms),
            false => Vec::new(),
        };
        Ticked {
            fenced,
            balanced,
            stall_ms,
        }
    }

    /// Kafka's automatic leader balancing (`maybeBalancePartitionLeaders`):
    /// once leaders are imbalanced, a run one interval later elects the
    /// preferred replicas that may lead, [`ELECTIONS_PER_BALANCE_MAX`] at
    /// most, and another run follows at once when it hit that cap.
    fn balance_leaders(&mut self, now_ms: u64) -> Vec<MetadataRecord> {
        let Some(interval) = self.config.leader_balance_interval_ms else {
            return Vec::new();
        };
        let balance_at = self.balance_at;
        // Small (a few partitions of a few brokers), and `latest` borrows
        // the node.
        let offline = self.sessions.offline.clone();
        let Ok(latest) = self.latest() else {
            return Vec::new();
        };
        match balance_at {
            None => {
                if elections::leaders_imbalanced(latest) {
                    self.balance_at = Some(now_ms + interval);
                }
                return Vec::new();
            }
            Some(at) if now_ms < at => return Vec::new(),
            Some(_) => {}
        }
        let records = elections::balance_leaders(latest, ELECTIONS_PER_BALANCE_MAX, &offline);
        let more = records.len() >= ELECTIONS_PER_BALANCE_MAX;
        self.balance_at = more.then_some(now_ms + BALANCE_AGAIN_MS);
        if records.is_empty() || self.propose(records.clone()).is_err() {
            // Tried again once the leaders are seen imbalanced again.
            return Vec::new();
        }
        records
    }

    /// A message from a peer voter. Messages from nodes that are not voters
    /// are dropped (the transport has already checked `cluster.id`).
    pub fn step(&mut self, message: Message) -> Result<(), QuorumError> {
        let from = node_of(message.from);
        if !self.config.voters.contains(&from) || message.to != raft_id(self.config.node) {
            return Ok(());
        }
        self.raw.step(message).map_err(QuorumError::from)
    }

    /// A Raft message from voter `from` was stepped at `now_ms` (the
    /// clock DescribeQuorum reports in): the leader notes what it knows of
    /// that voter's log.
    pub fn heard_from(&mut self, from: BrokerId, now_ms: u64) {
        if !self.is_leader() || !self.config.voters.contains(&from) {
            return;
        }
        let leader_end = self.raw.raft.raft_log.last_index();
        if let Some(progress) = self.raw.raft.prs().get(raft_id(from)) {
            let matched = progress.matched;
            self.progress.voter_heard(from, matched, leader_end, now_ms);
        }
    }

    /// Committed metadata after `offset` (at most `entries_max` entries),
    /// for broker `from`; the leader notes a broker that is not a voter as
    /// an observer. A leader answers nothing until its image holds an entry
    /// of its own term.
    pub fn fetch(
        &mut self,
        from: BrokerId,
        request: MetadataFetch,
        entries_max: usize,
        now_ms: u64,
    ) -> Fetched {
        let offset = request.offset;
        if self.is_leader() && !self.config.voters.contains(&from) {
            let leader_end = self.raw.raft.raft_log.last_index();
            self.progress
                .observer_fetched(from, offset, leader_end, now_ms);
        }
        self.note_served(from, request);
        let served_by_all = self.served_by_all();
        let catchup = if self.is_leader() && !self.applied_own_term() {
            Catchup::Entries(Vec::new())
        } else {
            self.committed_since(offset, entries_max)
        };
        Fetched {
            catchup,
            served_by_all,
        }
    }

    /// The active controller's account of what `from` serves, and of what
    /// brokers were told.
    fn note_served(&mut self, from: BrokerId, request: MetadataFetch) {
        self.told_served_by_all = self.told_served_by_all.max(request.served_by_all);
        if self.leading_served_account() {
            // The latest word, not the highest: a restarted broker serves
            // less.
            self.served.insert(from, request.served);
        }
    }

    /// Whether this node leads, its account of what brokers serve started
    /// afresh when its leadership did.
    fn leading_served_account(&mut self) -> bool {
        if !self.is_leader() {
            return false;
        }
        if self.served_term != self.term() {
            self.served.clear();
            self.served_term = self.term();
        }
        true
    }

    /// The offset every live broker of the committed image serves
    /// ([`visibility::served_by_all`]); 0 on a node that does not lead.
    pub fn served_by_all(&mut self) -> u64 {
        if !self.leading_served_account() {
            return 0;
        }
        let served_by_all = visibility::served_by_all(&self.image, &self.served);
        self.told_served_by_all = self.told_served_by_all.max(served_by_all);
        served_by_all
    }

    /// Whether the image holds an entry of this node's current term. A node
    /// elected a moment ago may not yet know how far the log was committed
    /// (Raft tells it by committing an entry of the new term, and all before
    /// it with it; a restarted node's image starts at its snapshot): until
    /// then its image may end before what brokers already follow, and a
    /// broker building its view from it would see leaders and topics of
    /// the past.
    fn applied_own_term(&self) -> bool {
        self.raw
            .raft
            .raft_log
            .term(self.image.offset)
            .is_ok_and(|term| term == self.term())
    }

    /// DescribeQuorum's answer; only the active controller has one.
    pub fn describe_quorum(&self, now_ms: u64) -> Result<QuorumDescription, QuorumError> {
        if !self.is_leader() {
            return Err(self.not_controller());
        }
        let prs = self.raw.raft.prs();
        Ok(self.progress.describe(
            self.config.node,
            self.term(),
            self.committed_index(),
            self.raw.raft.raft_log.last_index(),
            &self.config.voters,
            |node| {
                prs.get(raft_id(node))
                    .map_or(0, |progress| progress.matched)
            },
            now_ms,
        ))
    }

    fn not_controller(&self) -> QuorumError {
        QuorumError::NotController {
            leader: self.leader(),
        }
    }

    /// The active controller's image, its uncommitted entries included.
    fn latest(&mut self) -> Result<&mut ClusterImage, QuorumError> {
        if !self.is_leader() {
            return Err(self.not_controller());
        }
        let term = self.term();
        if self.latest.as_ref().is_none_or(|(built, _)| *built != term) {
            let mut latest = self.image.clone();
            let log = &self.raw.raft.raft_log;
            let from = latest.offset + 1;
            if from <= log.last_index() {
                let entries =
                    log.entries(from, raft::NO_LIMIT, raft::GetEntriesContext::empty(false))?;
                for entry in entries {
                    apply_entry(&mut latest, &entry)?;
                }
            }
            self.latest = Some((term, latest));
        }
        Ok(&mut self.latest.as_mut().expect("built above").1)
    }

    /// The active controller's view (its uncommitted entries included),
    /// to check a request against before proposing.
    pub fn latest_image(&mut self) -> Result<&ClusterImage, QuorumError> {
        self.latest().map(|image| &*image)
    }

    /// AlterPartition checked against the active controller's view and
    /// what brokers' heartbeats said of their failed log directories
    /// ([`alter_partition::alter_partition`]); not proposed.
    pub fn check_alter_partition(
        &mut self,
        request: &AlterPartitionRequest,
    ) -> Result<Result<(PartitionRegistration, Vec<MetadataRecord>), ErrorCode>, QuorumError> {
        let offline = self.sessions.offline.clone();
        let image = self.latest()?;
        Ok(alter_partition::alter_partition(image, request, &offline))
    }

    /// Proposes `records` as one batch; they are in the active controller's
    /// view at once.
    pub fn propose(&mut self, records: Vec<MetadataRecord>) -> Result<Proposal, QuorumError> {
        self.latest()?;
        self.raw.propose(Vec::new(), encode_batch(&records))?;
        let proposal = Proposal {
            index: self.raw.raft.raft_log.last_index(),
            term: self.raw.raft.term,
        };
        self.latest()?.apply(proposal.index, &records)?;
        Ok(proposal)
    }

    /// Runs a controller rule against the active controller's view and
    /// proposes what it returns.
    pub fn propose_with(
        &mut self,
        rule: impl FnOnce(&ClusterImage) -> Result<Vec<MetadataRecord>, Refusal>,
    ) -> Result<Result<Proposal, Refusal>, QuorumError> {
        let records = match rule(self.latest()?) {
            Ok(records) => records,
            Err(refusal) => return Ok(Err(refusal)),
        };
        self.propose(records).map(Ok)
    }

    pub fn register(
        &mut self,
        registration: BrokerRegistration,
        now_ms: u64,
    ) -> Result<Result<Registered, Refusal>, QuorumError> {
        self.refresh_sessions(now_ms)?;
        let id = registration.id;
        self.latest()?;
        let latest = &self.latest.as_ref().expect("built").1;
        let records = match controller::register_broker(
            latest,
            &self.sessions,
            registration,
            self.config.node,
            now_ms,
        ) {
            Ok(records) => records,
            Err(refusal) => return Ok(Err(refusal)),
        };
        if records.is_empty() {
            let epoch = latest.brokers[&id].epoch;
            return Ok(Ok(Registered::Already { epoch }));
        }
        let proposal = self.propose(records)?;
        // The new incarnation's session starts now.
        self.sessions.heard(id, proposal.index as i64, now_ms);
        Ok(Ok(Registered::Proposed(proposal)))
    }

    /// BrokerHeartbeat ([`controller::heartbeat`]); its records (an
    /// unfence or a controlled shutdown, with their elections) are proposed
    /// as one batch. `should_shut_down` waits until the committed image,
    /// not only this controller's view, shows the broker leading nothing.
    pub fn heartbeat(
        &mut self,
        request: HeartbeatRequest,
        now_ms: u64,
    ) -> Result<HeartbeatOutcome, QuorumError> {
        self.refresh_sessions(now_ms)?;
        let latest = &self.latest.as_ref().expect("refresh_sessions builds it").1;
        let caught_up_at = self.told_served_by_all;
        let broker = request.broker;
        let mut outcome =
            controller::heartbeat(latest, &mut self.sessions, request, caught_up_at, now_ms);
        if !outcome.records.is_empty() {
            self.propose(outcome.records.clone())?;
        }
        outcome.should_shut_down &= !self.image.leads_any(broker);
        Ok(outcome)
    }

    /// A new active controller gives every broker a whole session first.
    fn refresh_sessions(&mut self, now_ms: u64) -> Result<(), QuorumError> {
        self.latest()?;
        if self.sessions_term != self.term() {
            self.sessions
                .restart_all(&self.latest.as_ref().expect("built").1, now_ms);
            self.sessions_term = self.term();
        }
        Ok(())
    }

    /// The fence records of expired sessions (proposed), and the stall
    /// credited to every session first.
    fn fence_expired(&mut self, now_ms: u64) -> (Vec<MetadataRecord>, Option<u64>) {
        if self.refresh_sessions(now_ms).is_err() {
            return (Vec::new(), None);
        }
        let stall_ms = self.sessions.looked(now_ms);
        let records = self
            .sessions
            .expired(&self.latest.as_ref().expect("built").1, now_ms);
        if records.is_empty() || self.propose(records.clone()).is_err() {
            // A dropped proposal is proposed again at the next tick.
            return (Vec::new(), stall_ms);
        }
        (records, stall_ms)
    }

    /// Takes raft-rs's ready, applies it to the store and the image, and
    /// returns what the driver must persist and send.
    pub fn ready(&mut self) -> Result<Option<Output>, QuorumError> {
        if !self.raw.has_ready() {
            return Ok(None);
        }
        let mut output = Output::default();
        let mut ready = self.raw.ready();
        if let Some(soft) = ready.ss() {
            output.role = Some(soft.raft_state);
        }
        output.messages.extend(ready.take_messages());
        if !ready.snapshot().is_empty() {
            let snapshot = ready.snapshot().clone();
            self.image = image_of(&snapshot)?;
            self.latest = None;
            self.raw.mut_store().apply_snapshot(snapshot.clone());
            output.persist.snapshot = Some(snapshot);
        }
        self.apply_committed(ready.take_committed_entries(), &mut output)?;
        if !ready.entries().is_empty() {
            self.raw.mut_store().append(ready.entries());
            output.persist.entries = ready.take_entries();
        }
        if let Some(hard_state) = ready.hs() {
            self.raw.mut_store().set_hard_state(hard_state.clone());
            output.persist.hard_state = Some(hard_state.clone());
        }
        output.messages.extend(ready.take_persisted_messages());
        let mut light = self.raw.advance(ready);
        if let Some(commit) = light.commit_index() {
            self.raw.mut_store().set_commit(commit);
            output.persist.hard_state = Some(self.raw.store().hard_state().clone());
        }
        output.messages.extend(light.take_messages());
        self.apply_committed(light.take_committed_entries(), &mut output)?;
        self.raw.advance_apply();
        self.snapshot_if_due(&mut output);
        Ok(Some(output))
    }

    fn apply_committed(
        &mut self,
        entries: Vec<Entry>,
        output: &mut Output,
    ) -> Result<(), QuorumError> {
        for entry in entries {
            if entry.index <= self.image.offset {
                continue;
            }
            apply_entry(&mut self.image, &entry)?;
            self.bytes_since_snapshot += entry.data.len() as u64;
            output.applied.push(Applied {
                index: entry.index,
                term: entry.term,
                digest: digest_of(&entry),
            });
        }
        Ok(())
    }

    fn snapshot_if_due(&mut self, output: &mut Output) {
        if self.bytes_since_snapshot < self.config.snapshot_after_bytes || self.image.offset == 0 {
            return;
        }
        let data = encode_batch(&self.image.to_records());
        let snapshot = self.raw.mut_store().compact(self.image.offset, data);
        self.bytes_since_snapshot = 0;
        output.persist.snapshot = Some(snapshot);
    }

    /// Committed batches after `offset`, for a broker that is not a voter
    /// catching up: the snapshot when `offset` is before it, else up to
    /// `entries_max` entries.
    pub fn committed_since(&self, offset: u64, entries_max: usize) -> Catchup {
        let store = self.raw.store();
        let snapshot = store.snapshot_ref();
        if offset < snapshot.get_metadata().index {
            return Catchup::Snapshot(snapshot.clone());
        }
        let committed = self.image.offset;
        Catchup::Entries(
            store
                .entries_after_snapshot()
                .iter()
                .filter(|entry| entry.index > offset && entry.index <= committed)
                .take(entries_max)
                .cloned()
                .collect(),
        )
    }
}

impl std::fmt::Debug for ControllerNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControllerNode")
            .field("node", &self.config.node)
            .field("term", &self.term())
            .field("leader", &self.leader())
            .field("applied", &self.image.offset)
            .finish_non_exhaustive()
    }
}

/// What a lagging broker is sent.
#[derive(Clone, Debug)]
pub enum Catchup {
    Snapshot(Snapshot),
    Entries(Vec<Entry>),
}

/// A broker's image follows the log with this (committed entries only).
/// An answer that does not continue the image (a snapshot older than it,
/// entries after a gap: a reply to an earlier request, from before a
/// restart) is refused with [`QuorumError::NotNext`] and changes nothing.
/// Answers the leader elections the applied entries made (none for a
/// snapshot: it holds no history).
pub fn apply_catchup(
    image: &mut ClusterImage,
    catchup: &Catchup,
) -> Result<LeaderElections, QuorumError> {
    let mut elections = LeaderElections::default();
    match catchup {
        Catchup::Snapshot(snapshot) => {
            let index = snapshot.get_metadata().index;
            if index <= image.offset {
                return Err(QuorumError::NotNext {
                    offset: image.offset,
                    first: index,
                });
            }
            *image = image_of(snapshot)?;
        }
        Catchup::Entries(entries) => {
            let offset = image.offset;
            let fresh: Vec<&Entry> = entries
                .iter()
                .filter(|entry| entry.index > offset)
                .collect();
            if let Some(first) = fresh.first() {
                if first.index != offset + 1 {
                    return Err(QuorumError::NotNext {
                        offset,
                        first: first.index,
                    });
                }
            }
            for entry in fresh {
                elections.add(apply_entry(image, entry)?);
            }
        }
    }
    Ok(elections)
}

fn image_of(snapshot: &Snapshot) -> Result<ClusterImage, QuorumError> {
    let index = snapshot.get_metadata().index;
    if index == 0 {
        return Ok(ClusterImage::default());
    }
    let records = decode_batch(snapshot.get_data())?;
    Ok(ClusterImage::from_snapshot(index, &records)?)
}

fn apply_entry(image: &mut ClusterImage, entry: &Entry) -> Result<LeaderElections, QuorumError> {
    // A new leader's empty entry and (unused: the voters are static)
    // configuration changes advance the offset and change nothing.
    let records = if entry.get_entry_type() == EntryType::EntryNormal && !entry.data.is_empty() {
        decode_batch(&entry.data)?
    } else {
        Vec::new()
    };
    Ok(image.apply(entry.index, &records)?)
}

fn digest_of(entry: &Entry) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325u64 ^ entry.term;
    for byte in entry.data.iter() {
        hash = (hash ^ u64::from(*byte)).wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// NOT_CONTROLLER for requests that reached a node which is not (or no
/// longer) the active controller.
pub fn error_code(error: &QuorumError) -> ErrorCode {
    match error {
        QuorumError::NotController { .. } => ErrorCode::NOT_CONTROLLER,
        _ => ErrorCode::UNKNOWN_SERVER_ERROR,
    }
}

/// Whether a voter at controller epoch `current` serves a request sent at
/// `epoch` (KRaft's rule for its metadata fetches): 0 means the sender knows
/// no epoch yet and is served; an older epoch is FENCED_LEADER_EPOCH (the
/// sender learns the current one from the answer and asks again); a newer
/// one is UNKNOWN_LEADER_EPOCH (this voter is behind, perhaps a deposed
/// controller that has not heard of the election, and must not answer).
pub fn epoch_check(epoch: u64, current: u64) -> Result<(), ErrorCode> {
    match epoch {
        0 => Ok(()),
        epoch if epoch < current => Err(ErrorCode::FENCED_LEADER_EPOCH),
        epoch if epoch > current => Err(ErrorCode::UNKNOWN_LEADER_EPOCH),
        _ => Ok(()),
    }
}

/// Whether a broker that has seen controller epoch `known` takes an answer
/// given at `answered`: never from an older epoch than one it has seen.
pub fn answer_is_current(known: u64, answered: u64) -> bool {
    answered >= known
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_from_another_epoch_are_refused_either_way() {
        assert_eq!(epoch_check(0, 7), Ok(()), "no epoch known yet");
        assert_eq!(epoch_check(7, 7), Ok(()));
        assert_eq!(epoch_check(6, 7), Err(ErrorCode::FENCED_LEADER_EPOCH));
        assert_eq!(epoch_check(1, 7), Err(ErrorCode::FENCED_LEADER_EPOCH));
        assert_eq!(epoch_check(8, 7), Err(ErrorCode::UNKNOWN_LEADER_EPOCH));
    }

    /// A voter restarts with three entries of term 1 committed and, alone
    /// in its quorum, elects itself at term 2 at once: brokers are sent
    /// nothing until its image holds the entry of term 2 (with more voters,
    /// entries committed after its three could exist, and its image would
    /// be the past).
    #[test]
    fn a_new_leader_sends_brokers_nothing_before_an_entry_of_its_term() {
        let node = BrokerId(0);
        let entries: Vec<Entry> = (1..=3)
            .map(|index| Entry {
                term: 1,
                index,
                ..Entry::default()
            })
            .collect();
        let hard_state = HardState {
            term: 1,
            vote: raft_id(node),
            commit: 3,
            ..HardState::default()
        };
        let store =
            MetadataStore::restore(&[raft_id(node)], hard_state, Snapshot::default(), entries);
        let mut controller = ControllerNode::new(config_of(node, &[node]), store).unwrap();
        let served = |controller: &mut ControllerNode| match controller
            .fetch(BrokerId(7), MetadataFetch::default(), 512, 0)
            .catchup
        {
            Catchup::Entries(entries) => {
                entries.iter().map(|entry| entry.index).collect::<Vec<_>>()
            }
            Catchup::Snapshot(_) => panic!("no snapshot was taken"),
        };
        assert!(
            controller.is_leader(),
            "a single voter elects itself at once"
        );
        assert_eq!(controller.term(), 2);
        assert_eq!(served(&mut controller), Vec::<u64>::new());
        while controller.ready().unwrap().is_some() {}
        assert_eq!(served(&mut controller), [1, 2, 3, 4]);
    }

    /// Of several voters, none campaigns before its election timeout: a
    /// restarted voter first hears whether the others have a leader.
    #[test]
    fn only_a_quorum_of_one_elects_itself_at_start() {
        let nodes = [BrokerId(0), BrokerId(1), BrokerId(2)];
        let raft_ids: Vec<u64> = nodes.iter().copied().map(raft_id).collect();
        let controller =
            ControllerNode::new(config_of(nodes[0], &nodes), MetadataStore::new(&raft_ids))
                .unwrap();
        assert!(!controller.is_leader());
        assert_eq!(controller.term(), 0);
    }

    fn config_of(node: BrokerId, voters: &[BrokerId]) -> QuorumConfig {
        QuorumConfig {
            node,
            voters: voters.to_vec(),
            session_timeout_ms: 9_000,
            snapshot_after_bytes: 1 << 20,
            leader_balance_interval_ms: None,
        }
    }

    /// A stall is reported by the tick that credits it, once, and only by
    /// the active controller (it was kept in a field that only the leader
    /// updated, so a voter that stepped down logged its last stall every
    /// tick, 352 times in 37 s).
    #[test]
    fn a_stall_is_reported_once_and_only_by_the_active_controller() {
        let node = BrokerId(0);
        let store = MetadataStore::restore(
            &[raft_id(node)],
            HardState::default(),
            Snapshot::default(),
            Vec::new(),
        );
        let mut leader = ControllerNode::new(config_of(node, &[node]), store).unwrap();
        let mut now_ms = 0;
        while !leader.is_leader() {
            now_ms += TICK_MS;
            leader.tick(now_ms);
            while leader.ready().unwrap().is_some() {}
        }
        assert_eq!(leader.tick(now_ms + TICK_MS).stall_ms, None);
        let stalled = now_ms + TICK_MS + 5_000;
        assert_eq!(leader.tick(stalled).stall_ms, Some(5_000));
        assert_eq!(leader.tick(stalled + TICK_MS).stall_ms, None);

        let voters = [BrokerId(0), BrokerId(1), BrokerId(2)];
        let store = MetadataStore::restore(
            &voters.map(raft_id),
            HardState::default(),
            Snapshot::default(),
            Vec::new(),
        );
        let mut follower = ControllerNode::new(config_of(BrokerId(1), &voters), store).unwrap();
        for tick in 1..50 {
            // Ticks far apart, and no peer answers: never the leader.
            assert_eq!(follower.tick(tick * 5_000).stall_ms, None);
            assert!(!follower.is_leader());
        }
    }

    #[test]
    fn a_broker_ignores_answers_from_an_older_epoch() {
        assert!(answer_is_current(0, 1));
        assert!(answer_is_current(4, 4));
        assert!(answer_is_current(4, 9));
        assert!(!answer_is_current(4, 3));
    }
}
