//! One partition replica's replication state (SPEC R3, R4, R8): its log end
//! offset, the one high watermark, and, while it leads, each follower's
//! progress and the ISR change it asks the controller for.
//!
//! Shaped like raft-rs: the shard feeds inputs (appended, counted, a
//! follower's fetch, a new registration, a tick) with the time as a value
//! and performs the [`Action`]s that come out. It does no IO. Kafka's
//! rules, from `Partition.scala` and `Replica.scala`:
//! - HW = the smallest position over the *maximal* ISR (the committed ISR
//!   plus any member an in-flight AlterPartition adds, KIP-497) and over
//!   caught-up followers that may join it, never past the leader's own
//!   counted position, and never moving back.
//! - The HW does not move while the ISR is smaller than
//!   `min.insync.replicas` (KIP-966), so `acks=all` cannot be acknowledged
//!   by a lone replica.
//! - A follower leaves the ISR when it has not caught up to the leader's
//!   log end within `replica.lag.time.max.ms`, and joins once it reaches the
//!   HW and the current leader epoch. Only the controller changes the ISR;
//!   the leader proposes one change at a time.
//!
//! A position *counts* once the durability rule allows (DESIGN "Durability
//! and visibility"): on the leader its durable offset under the default
//! flush policy (its written offset under Kafka's `flush.*` settings); a
//! follower reports its own the same way, as the offset it fetches from.
//!
//! Lives on the partition's shard.

use std::collections::BTreeMap;

use crate::cluster::records::PartitionRegistration;
use crate::log::config::effective_min_insync_replicas;
use crate::protocol::errors::ErrorCode;
use crate::types::{BrokerId, LeaderEpoch, Offset};

/// Kafka's `replica.lag.time.max.ms` default (30 s since Kafka 2.5).
pub const REPLICA_LAG_TIME_MAX_MS_DEFAULT: u64 = 30_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReplicationSettings {
    /// This broker.
    pub local: BrokerId,
    /// The topic's `min.insync.replicas`.
    pub min_insync_replicas: u32,
    pub replica_lag_time_max_ms: u64,
}

/// What this broker is for the partition, from its registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Leader,
    Follower,
    /// Not a replica (any more).
    Outsider,
}

/// An AlterPartition to send: the ISR wanted, at the epochs it is based on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IsrProposal {
    pub isr: Vec<BrokerId>,
    pub leader_epoch: LeaderEpoch,
    pub partition_epoch: i32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The HW rose to this offset: complete the fetches and `acks=all`
    /// produces waiting for it.
    HighWatermarkAdvanced(Offset),
    /// Ask the controller for this ISR.
    ProposeIsr(IsrProposal),
}

/// One replica fetch, as the leader received it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerFetch {
    pub replica: BrokerId,
    /// The follower's counted position: every offset below it is on the
    /// follower as the durability rule requires.
    pub fetch_offset: Offset,
    /// The follower's log start offset (Fetch v5+; -1 when not sent).
    pub log_start_offset: Offset,
    /// Whether the image lets this broker join an ISR: registered at the
    /// broker epoch it fetched with, not fenced, not shutting down.
    pub eligible: bool,
    pub now_ms: u64,
}

/// What a follower's fetch asked its leader, to check the answer against
/// ([`PartitionReplication::takes_answer`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FetchAsked {
    pub leader: BrokerId,
    pub leader_epoch: LeaderEpoch,
    pub fetch_offset: Offset,
}

/// A follower as its leader last saw it: see
/// [`PartitionReplication::follower_positions`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FollowerPosition {
    pub broker: BrokerId,
    /// In the committed ISR.
    pub in_isr: bool,
    /// Where it last fetched from; `None` until it fetched from this leader.
    pub log_end_offset: Option<Offset>,
    /// Its log start as its last fetch said; `None` until one did.
    pub log_start_offset: Option<Offset>,
    pub last_caught_up_ms: u64,
}

/// Whether an `acks=all` produce that ends at some offset may be answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckProgress {
    Waiting,
    Done(ErrorCode),
}

/// The leader's view of one follower (Kafka's `ReplicaState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct FollowerProgress {
    /// `None` until it fetches from this leader.
    position: Option<Offset>,
    /// The leader's log end when it last fetched.
    last_fetch_leader_end: Option<Offset>,
    last_fetch_ms: u64,
    last_caught_up_ms: u64,
    eligible: bool,
    /// Its log start offset as its last fetch said; `None` until one did.
    log_start: Option<Offset>,
}

impl FollowerProgress {
    fn new(in_isr: bool, now_ms: u64) -> FollowerProgress {
        // An ISR member gets a whole lag period to fetch from a new leader;
        // any other replica does not hold the HW back until it fetches.
        FollowerProgress {
            position: None,
            last_fetch_leader_end: None,
            last_fetch_ms: 0,
            last_caught_up_ms: if in_isr { now_ms } else { 0 },
            eligible: in_isr,
            log_start: None,
        }
    }

    /// Kafka's `isCaughtUp`: at the leader's end, or there within the lag.
    fn caught_up(&self, leader_end: Offset, now_ms: u64, lag_ms: u64) -> bool {
        self.position == Some(leader_end) || now_ms.saturating_sub(self.last_caught_up_ms) <= lag_ms
    }
}

/// See the module documentation.
#[derive(Clone, Debug)]
pub struct PartitionReplication {
    settings: ReplicationSettings,
    registration: PartitionRegistration,
    log_end_offset: Offset,
    /// Every offset below counts as replicated here.
    counted_offset: Offset,
    high_watermark: Offset,
    /// As a follower: the leader's HW from its last fetch answer.
    leader_high_watermark: Offset,
    /// The log end when this broker became leader of the current epoch: a
    /// follower must reach it to join the ISR.
    leader_epoch_start_offset: Offset,
    followers: BTreeMap<BrokerId, FollowerProgress>,
    in_flight: Option<IsrProposal>,
}

impl PartitionReplication {
    /// A replica opened on a log that ends at `log_end_offset`, counts up
    /// to `counted_offset` and last knew `high_watermark`.
    pub fn new(
        settings: ReplicationSettings,
        registration: PartitionRegistration,
        log_end_offset: Offset,
        counted_offset: Offset,
        high_watermark: Offset,
        now_ms: u64,
    ) -> PartitionReplication {
        assert!(counted_offset <= log_end_offset, "counts only what it has");
        let high_watermark = high_watermark.min(counted_offset);
        let mut replication = PartitionReplication {
            settings,
            registration: PartitionRegistration {
                leader_epoch: LeaderEpoch::NONE,
                ..registration.clone()
            },
            log_end_offset,
            counted_offset,
            high_watermark,
            leader_high_watermark: high_watermark,
            leader_epoch_start_offset: log_end_offset,
            followers: BTreeMap::new(),
            in_flight: None,
        };
        replication.apply_registration(registration, now_ms);
        replication
    }

    pub fn role(&self) -> Role {
        role_of(&self.registration, self.settings.local)
    }

    pub fn registration(&self) -> &PartitionRegistration {
        &self.registration
    }

    pub fn leader_epoch(&self) -> LeaderEpoch {
        self.registration.leader_epoch
    }

    pub fn high_watermark(&self) -> Offset {
        self.high_watermark
    }

    pub fn log_end_offset(&self) -> Offset {
        self.log_end_offset
    }

    /// A follower's lag as Kafka's replica fetcher reports it
    /// (`FetcherLagMetrics` `ConsumerLag`): the leader's HW from its last
    /// answer minus this log's end, at least 0. None unless following.
    pub fn fetcher_lag(&self) -> Option<u64> {
        (self.role() == Role::Follower).then(|| {
            u64::try_from(self.leader_high_watermark.0 - self.log_end_offset.0).unwrap_or(0)
        })
    }

    /// Each follower as this leader last saw it (Kafka's
    /// `Replica.stateSnapshot`), for choosing where a consumer reads
    /// ([`crate::replica::read_replica`]); none unless this broker leads.
    pub fn follower_positions(&self) -> impl Iterator<Item = FollowerPosition> + '_ {
        let leads = self.role() == Role::Leader;
        let followers = self.followers.iter().filter(move |_| leads);
        followers.map(|(broker, progress)| FollowerPosition {
            broker: *broker,
            in_isr: self.registration.isr.contains(broker),
            log_end_offset: progress.position,
            log_start_offset: progress.log_start,
            last_caught_up_ms: progress.last_caught_up_ms,
        })
    }

    /// The ISR change waiting for the controller's answer, if any.
    pub fn in_flight(&self) -> Option<&IsrProposal> {
        self.in_flight.as_ref()
    }

    pub fn set_min_insync_replicas(
        &mut self,
        min_insync_replicas: u32,
        now_ms: u64,
    ) -> Vec<Action> {
        self.settings.min_insync_replicas = min_insync_replicas;
        self.advance_high_watermark(now_ms).into_iter().collect()
    }

    /// Followers the cluster image no longer lets join an ISR (`active`
    /// false: fenced or shutting down) stop holding the HW back until they
    /// fetch again (Kafka's `isReplicaIsrEligible`, asked of the metadata
    /// at every HW check): a dead follower the controller took out of the
    /// ISR does not stall `acks=all` for `replica.lag.time.max.ms`. What
    /// that moves.
    pub fn rule_out_inactive(
        &mut self,
        active: impl Fn(BrokerId) -> bool,
        now_ms: u64,
    ) -> Vec<Action> {
        if self.role() != Role::Leader {
            return Vec::new();
        }
        for (replica, progress) in &mut self.followers {
            if !active(*replica) {
                progress.eligible = false;
            }
        }
        self.advance_high_watermark(now_ms).into_iter().collect()
    }

    /// A registration from the metadata log (or an AlterPartition answer).
    /// One older than the current partition epoch is ignored.
    pub fn apply_registration(
        &mut self,
        registration: PartitionRegistration,
        now_ms: u64,
    ) -> Vec<Action> {
        let current = &self.registration;
        if registration.partition_epoch < current.partition_epoch
            || (registration.partition_epoch == current.partition_epoch
                && registration.leader_epoch == current.leader_epoch)
        {
            return Vec::new();
        }
        let was_leader = self.role() == Role::Leader;
        let new_epoch = registration.leader_epoch != current.leader_epoch;
        self.registration = registration;
        self.in_flight = None;
        if self.role() != Role::Leader {
            self.followers.clear();
            self.leader_high_watermark = self.high_watermark;
            return Vec::new();
        }
        if new_epoch || !was_leader {
            self.leader_epoch_start_offset = self.log_end_offset;
        }
        self.reset_followers(new_epoch || !was_leader, now_ms);
        self.advance_high_watermark(now_ms).into_iter().collect()
    }

    /// Keeps one progress per follower in the replica set: a new leader
    /// starts them all afresh (Kafka's `resetReplicaState`), an ISR change
    /// in the same epoch keeps what they reported.
    fn reset_followers(&mut self, afresh: bool, now_ms: u64) {
        let local = self.settings.local;
        let registration = &self.registration;
        let previous = std::mem::take(&mut self.followers);
        self.followers = registration
            .replicas
            .iter()
            .filter(|replica| **replica != local)
            .map(|replica| {
                let in_isr = registration.isr.contains(replica);
                let progress = match previous.get(replica) {
                    Some(known) if !afresh => *known,
                    _ => FollowerProgress::new(in_isr, now_ms),
                };
                (*replica, progress)
            })
            .collect();
    }

    /// The local log now ends at `log_end_offset` (a leader's append, a
    /// follower's copy).
    pub fn appended(&mut self, log_end_offset: Offset) {
        assert!(
            log_end_offset >= self.log_end_offset,
            "appends only grow a log"
        );
        self.log_end_offset = log_end_offset;
    }

    /// Every local offset below `offset` now counts (durable, or written
    /// under a flush interval).
    pub fn counted(&mut self, offset: Offset, now_ms: u64) -> Vec<Action> {
        assert!(offset <= self.log_end_offset, "counts only what it has");
        self.counted_offset = self.counted_offset.max(offset);
        match self.role() {
            Role::Leader => self.advance_high_watermark(now_ms).into_iter().collect(),
            Role::Follower => self.follow_high_watermark().into_iter().collect(),
            Role::Outsider => Vec::new(),
        }
    }

    /// The local log was cut to end at `offset` (a follower dropping a
    /// diverged suffix). The HW only drops with it after an unclean
    /// election: truncation by epoch never goes below a clean HW.
    pub fn truncated(&mut self, offset: Offset) {
        self.log_end_offset = offset;
        self.counted_offset = self.counted_offset.min(offset);
        self.high_watermark = self.high_watermark.min(offset);
        self.leader_high_watermark = self.leader_high_watermark.min(offset);
    }

    /// Whether a follower whose log ends at `log_end_offset` takes the
    /// answer to a fetch that asked `asked` (Kafka's fetcher checks the
    /// same before it processes a partition's data): only while it still
    /// follows that leader in that epoch and its log still ends where the
    /// fetch asked from. While a fetch runs, the partition may move to
    /// another leader whose answers this replica took meanwhile; an old
    /// leader's records no longer fit the log, and its DivergingEpoch or
    /// OFFSET_OUT_OF_RANGE would cut what the new leader already counts
    /// this replica as holding.
    pub fn takes_answer(&self, asked: &FetchAsked, log_end_offset: Offset) -> bool {
        self.role() == Role::Follower
            && self.registration.leader == asked.leader
            && self.registration.leader_epoch == asked.leader_epoch
            && log_end_offset == asked.fetch_offset
    }

    /// A fetch answer from the leader carried its HW.
    pub fn leader_high_watermark_is(&mut self, leader_high_watermark: Offset) -> Vec<Action> {
        if self.role() != Role::Follower {
            return Vec::new();
        }
        self.leader_high_watermark = self.leader_high_watermark.max(leader_high_watermark);
        self.follow_high_watermark().into_iter().collect()
    }

    /// A follower's HW: the leader's, as far as this log counts (R3).
    fn follow_high_watermark(&mut self) -> Option<Action> {
        let target = self.leader_high_watermark.min(self.counted_offset);
        (target > self.high_watermark).then(|| {
            self.high_watermark = target;
            Action::HighWatermarkAdvanced(target)
        })
    }

    /// A replica fetch that did not diverge (check [`super::divergence`]
    /// first). Kafka's answers: UNKNOWN_LEADER_EPOCH from a broker that is
    /// not a replica, NOT_LEADER_OR_FOLLOWER when this broker does not
    /// lead, OFFSET_OUT_OF_RANGE past this log's end.
    pub fn follower_fetched(&mut self, fetch: FollowerFetch) -> Result<Vec<Action>, ErrorCode> {
        if self.role() != Role::Leader {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
        if fetch.fetch_offset > self.log_end_offset {
            return Err(ErrorCode::OFFSET_OUT_OF_RANGE);
        }
        let leader_end = self.log_end_offset;
        let progress = self
            .followers
            .get_mut(&fetch.replica)
            .ok_or(ErrorCode::UNKNOWN_LEADER_EPOCH)?;
        let moved = progress.position != Some(fetch.fetch_offset);
        record_fetch(progress, fetch, leader_end);
        let mut actions: Vec<Action> = self.expand_isr(fetch.replica).into_iter().collect();
        if moved {
            actions.extend(self.advance_high_watermark(fetch.now_ms));
        }
        Ok(actions)
    }

    /// Kafka's low watermark (`Partition.lowWatermarkIfLeader`), which a
    /// DeleteRecords waits to reach: the lowest log start offset of this
    /// log (`local_log_start`) and of every follower the image lets lead
    /// (one that has not said its log start yet holds it at -1). `None`
    /// unless this broker leads.
    pub fn low_watermark(&self, local_log_start: Offset) -> Option<Offset> {
        if self.role() != Role::Leader {
            return None;
        }
        let followers = self.followers.values().filter(|progress| progress.eligible);
        let starts = followers.map(|progress| progress.log_start.unwrap_or(Offset(-1)));
        Some(starts.fold(local_log_start, Offset::min))
    }

    /// Whether this replica leads with a high watermark still below the log
    /// end it started its leader epoch at (Kafka's `leaderEpochStartOffsetOpt`
    /// check, KIP-207). A new leader learns the HW its predecessor reached
    /// only as its followers fetch, so a record acknowledged before the
    /// election can lie above its HW; until the HW passes the epoch start, a
    /// consumer's ListOffsets for the latest offset (or a timestamp at or
    /// past the HW) gets OFFSET_NOT_AVAILABLE, a retriable error, rather
    /// than an end a reader would stop at short of acknowledged records.
    pub fn high_watermark_behind_epoch_start(&self) -> bool {
        self.role() == Role::Leader && self.high_watermark < self.leader_epoch_start_offset
    }

    /// Time passed: proposes dropping ISR members that fell behind, and
    /// lets the HW pass followers that stopped being caught up.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Action> {
        if self.role() != Role::Leader {
            return Vec::new();
        }
        let mut actions: Vec<Action> = self.shrink_isr(now_ms).into_iter().collect();
        actions.extend(self.advance_high_watermark(now_ms));
        actions
    }

    /// The controller refused the proposal with `error` (NONE: lost it, or
    /// did not answer): one may be made again (after a refusal that names a
    /// newer registration, only once it is applied, which clears this too).
    /// Refused as INELIGIBLE_REPLICA (a member it adds is fenced, shutting
    /// down, or in a log directory that failed on its broker), the members
    /// it adds stop holding the HW back until they fetch again: the last
    /// fetch of a replica whose directory then failed says it is caught up,
    /// and would stall `acks=all` for `replica.lag.time.max.ms`. What that
    /// moves.
    pub fn proposal_failed(&mut self, error: ErrorCode, now_ms: u64) -> Vec<Action> {
        let Some(proposal) = self.in_flight.take() else {
            return Vec::new();
        };
        if error != ErrorCode::INELIGIBLE_REPLICA || self.role() != Role::Leader {
            return Vec::new();
        }
        for added in proposal
            .isr
            .iter()
            .filter(|member| !self.registration.isr.contains(member))
        {
            if let Some(progress) = self.followers.get_mut(added) {
                progress.eligible = false;
            }
        }
        self.advance_high_watermark(now_ms).into_iter().collect()
    }

    /// Whether a produce may append: NOT_LEADER_OR_FOLLOWER off the leader,
    /// NOT_ENOUGH_REPLICAS for `acks=all` when the ISR is already below
    /// `min.insync.replicas`.
    pub fn check_produce(&self, acks_all: bool) -> Result<(), ErrorCode> {
        if self.role() != Role::Leader {
            return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
        if acks_all && self.registration.isr.len() < self.min_isr() {
            return Err(ErrorCode::NOT_ENOUGH_REPLICAS);
        }
        Ok(())
    }

    /// Whether an `acks=all` produce ending before `end_offset` is done
    /// (Kafka's `checkEnoughReplicasReachOffset`): NONE once the HW passes
    /// it, NOT_ENOUGH_REPLICAS_AFTER_APPEND as soon as the ISR is below the
    /// minimum (the HW cannot move then).
    pub fn ack_progress(&self, end_offset: Offset) -> AckProgress {
        if self.role() != Role::Leader {
            return AckProgress::Done(ErrorCode::NOT_LEADER_OR_FOLLOWER);
        }
        let enough = self.maximal_isr().len() >= self.min_isr();
        match (self.high_watermark >= end_offset, enough) {
            (true, true) => AckProgress::Done(ErrorCode::NONE),
            // Kafka would keep waiting until `request.timeout.ms` with the
            // HW held still; saying why at once lets the producer retry
            // (its idempotent retry finds the batch if it commits later).
            (_, false) => AckProgress::Done(ErrorCode::NOT_ENOUGH_REPLICAS_AFTER_APPEND),
            (false, true) => AckProgress::Waiting,
        }
    }

    fn min_isr(&self) -> usize {
        effective_min_insync_replicas(
            self.settings.min_insync_replicas,
            self.registration.replicas.len(),
        )
    }

    /// The committed ISR, plus whoever an in-flight proposal adds.
    fn maximal_isr(&self) -> Vec<BrokerId> {
        let mut isr = self.registration.isr.clone();
        if let Some(proposal) = &self.in_flight {
            isr.extend(
                proposal
                    .isr
                    .iter()
                    .filter(|id| !self.registration.isr.contains(id)),
            );
        }
        isr
    }

    fn advance_high_watermark(&mut self, now_ms: u64) -> Option<Action> {
        if self.registration.isr.len() < self.min_isr() {
            return None;
        }
        let maximal = self.maximal_isr();
        let leader_end = self.log_end_offset;
        let lag_ms = self.settings.replica_lag_time_max_ms;
        let mut target = self.counted_offset;
        for (replica, progress) in &self.followers {
            let holds_back = maximal.contains(replica)
                || (progress.eligible && progress.caught_up(leader_end, now_ms, lag_ms));
            if holds_back {
                // A follower not heard from in this epoch holds it still.
                target = target.min(progress.position.unwrap_or(Offset(-1)));
            }
        }
        (target > self.high_watermark).then(|| {
            self.high_watermark = target;
            Action::HighWatermarkAdvanced(target)
        })
    }

    fn expand_isr(&mut self, replica: BrokerId) -> Option<Action> {
        let progress = self.followers.get(&replica)?;
        let position = progress.position?;
        let joins = self.in_flight.is_none()
            && progress.eligible
            && !self.registration.isr.contains(&replica)
            && position >= self.high_watermark
            && position >= self.leader_epoch_start_offset;
        if !joins {
            return None;
        }
        let mut isr = self.registration.isr.clone();
        isr.push(replica);
        Some(self.propose(isr))
    }

    fn shrink_isr(&mut self, now_ms: u64) -> Option<Action> {
        if self.in_flight.is_some() {
            return None;
        }
        let leader_end = self.log_end_offset;
        let lag_ms = self.settings.replica_lag_time_max_ms;
        let local = self.settings.local;
        let out_of_sync = |replica: &BrokerId| {
            *replica != local
                && self
                    .followers
                    .get(replica)
                    .is_none_or(|progress| !progress.caught_up(leader_end, now_ms, lag_ms))
        };
        if !self.registration.isr.iter().any(out_of_sync) {
            return None;
        }
        let isr = self
            .registration
            .isr
            .iter()
            .copied()
            .filter(|replica| !out_of_sync(replica))
            .collect();
        Some(self.propose(isr))
    }

    fn propose(&mut self, isr: Vec<BrokerId>) -> Action {
        let proposal = IsrProposal {
            isr,
            leader_epoch: self.registration.leader_epoch,
            partition_epoch: self.registration.partition_epoch,
        };
        self.in_flight = Some(proposal.clone());
        Action::ProposeIsr(proposal)
    }
}

pub fn role_of(registration: &PartitionRegistration, broker: BrokerId) -> Role {
    if registration.leader == broker {
        Role::Leader
    } else if registration.replicas.contains(&broker) {
        Role::Follower
    } else {
        Role::Outsider
    }
}

/// Kafka's `updateFetchStateOrThrow`: a follower at the leader's end is
/// caught up now; one that reached where the leader ended at its previous
/// fetch was caught up then.
fn record_fetch(progress: &mut FollowerProgress, fetch: FollowerFetch, leader_end: Offset) {
    if fetch.fetch_offset >= leader_end {
        progress.last_caught_up_ms = progress.last_caught_up_ms.max(fetch.now_ms);
    } else if progress
        .last_fetch_leader_end
        .is_some_and(|previous_end| fetch.fetch_offset >= previous_end)
    {
        progress.last_caught_up_ms = progress.last_caught_up_ms.max(progress.last_fetch_ms);
    }
    progress.position = Some(fetch.fetch_offset);
    progress.last_fetch_leader_end = Some(
        progress
            .last_fetch_leader_end
            .map_or(leader_end, |previous| previous.max(leader_end)),
    );
    progress.last_fetch_ms = fetch.now_ms;
    progress.eligible = fetch.eligible;
    progress.log_start = Some(fetch.log_start_offset).filter(|start| start.0 >= 0);
}

#[cfg(test)]
mod tests;
