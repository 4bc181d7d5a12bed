//! Replication on a shard (SPEC R1–R8): one
//! [`PartitionReplication`] per partition this broker is a replica of and
//! this shard owns, driven by what happens to its log and its followers.
//!
//! - The cluster image says who leads: [`ReplicaHost::follow_view`] applies
//!   each registration, starts a fetcher per leader this shard follows
//!   ([`fetcher`]) and makes each log serve replication's high watermark.
//! - As leader: produces and replica fetches report the log's end and what
//!   it holds (durable, or written under `flush.*`); a replica fetch reports
//!   the follower's position; a timer lets ISR members that fell behind go.
//!   The HW a state machine moves goes into the log, which wakes consumers
//!   and `acks=all` produces; an ISR change goes to the controller as an
//!   AlterPartition.
//! - As follower: the fetcher appends the leader's batches, waits until they
//!   count here, and moves the HW to the leader's as far as this log holds.
//! - For consumers (KIP-392): a leader with `replica.selector.class` names
//!   the replica of a consumer's rack to read from ([`read_replica`]).
//!
//! No `RefCell` borrow of the state machines is held across an await.

mod fetcher;
mod read_replica;

use std::cell::{Cell, RefCell};
use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::rc::Rc;
use std::time::Duration;

use brook_engine::cluster::alter_partition::AlterPartitionRequest;
use brook_engine::cluster::image::ShardId;
use brook_engine::cluster::peer_wire::{PeerRequest, PeerResponse};
use brook_engine::cluster::records::PartitionRegistration;
use brook_engine::group::records::OFFSETS_TOPIC_NAME;
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::replica::replication::{
    AckProgress, Action, FetchAsked, FollowerFetch, IsrProposal, PartitionReplication,
    ReplicationSettings, Role,
};
use brook_engine::txn::records::TRANSACTION_STATE_TOPIC_NAME;
use brook_engine::types::{BrokerId, Offset, TopicPartition};
use futures::FutureExt;
use futures::channel::oneshot;

use crate::server::quorum::ClusterView;
use crate::server::quorum::FORWARD_TIMEOUT;
use crate::server::shard::{Shard, now_ms};
use crate::storage::PartitionLog;

/// How often leaders look for followers that fell out of the ISR (Kafka
/// checks every `replica.lag.time.max.ms / 2`; a shorter period only costs
/// a walk over the shard's led partitions).
const TICK: Duration = Duration::from_millis(250);
/// How often a waiting `acks=all` produce looks again at the ISR (the HW
/// wakes it as soon as it passes; an ISR shrink does not).
const ACK_RECHECK: Duration = Duration::from_millis(100);

/// The replication state of one shard's partitions.
#[derive(Debug, Default)]
pub struct ReplicaHost {
    partitions: RefCell<HashMap<TopicPartition, PartitionReplication>>,
    /// Leaders a fetcher of this shard runs for. Dropping one's sender
    /// stops it, mid-fetch too (Kafka shuts an idle fetcher down and closes
    /// its connection): a fetch to a leader that was cut off may wait out
    /// TCP's retransmission backoff, and a fetcher for that leader started
    /// later must not queue behind it.
    fetchers: RefCell<BTreeMap<BrokerId, oneshot::Sender<()>>>,
    ticking: Cell<bool>,
}

fn now() -> u64 {
    now_ms().max(0) as u64
}

/// What a follower's fetch of one partition said, once its divergence
/// check passed.
#[derive(Clone, Copy, Debug)]
pub struct FollowerFetched {
    pub replica: BrokerId,
    pub fetch_offset: Offset,
    /// -1 when the request did not say.
    pub log_start_offset: Offset,
}

/// Tells `replication` where `log` ends and what it holds; what that
/// moves. (A log handle replaced by a truncation is read afresh by every
/// caller, so its end may have gone down.)
fn sync_log(replication: &mut PartitionReplication, log: &PartitionLog) -> Vec<Action> {
    let end = log.log_end_offset();
    if end < replication.log_end_offset() {
        replication.truncated(end);
    } else {
        replication.appended(end);
    }
    replication.counted(log.counted_offset().min(end), now())
}

impl ReplicaHost {
    /// Whether replication governs `topic_partition` here.
    pub fn is_replicated(&self, topic_partition: &TopicPartition) -> bool {
        self.partitions.borrow().contains_key(topic_partition)
    }

    /// The cluster image moved: apply every registration of this shard's
    /// partitions, start the fetchers it now needs and stop the others.
    /// Call on the shard.
    pub fn follow_view(shard: &Rc<Shard>, view: &ClusterView) {
        let host = &shard.replication;
        let local = BrokerId(shard.context.broker_id);
        let lag_ms = shard.context.config.replica_lag_time_max_ms;
        let mut leaders = BTreeSet::new();
        let mut kept = BTreeSet::new();
        let owned: Vec<TopicPartition> = shard
            .local_image()
            .partitions()
            .filter(|(_, owner)| *owner == shard.id)
            .map(|(topic_partition, _)| topic_partition)
            .collect();
        for topic_partition in owned {
            let registration = view
                .image
                .topic_by_name(&topic_partition.topic)
                .and_then(|topic| {
                    topic
                        .partitions
                        .get(usize::try_from(topic_partition.partition.0).ok()?)
                })
                .filter(|registration| registration.replicas.contains(&local));
            let (Some(registration), Some(log)) = (registration, shard.log(&topic_partition))
            else {
                continue;
            };
            let min_insync_replicas = log.config().replication.min_insync_replicas;
            let (role, epoch, actions) = {
                let mut partitions = host.partitions.borrow_mut();
                let known = partitions
                    .get(&topic_partition)
                    .map(|replication| (replication.role(), replication.leader_epoch()));
                let isr_before = partitions
                    .get(&topic_partition)
                    .map(|replication| replication.registration().isr.len());
                let replication = partitions
                    .entry(topic_partition.clone())
                    .or_insert_with(|| {
                        PartitionReplication::new(
                            ReplicationSettings {
                                local,
                                min_insync_replicas,
                                replica_lag_time_max_ms: lag_ms,
                            },
                            registration.clone(),
                            log.log_end_offset(),
                            log.counted_offset().min(log.log_end_offset()),
                            log.log_start_offset(),
                            now(),
                        )
                    });
                let mut actions = sync_log(replication, &log);
                actions.extend(replication.apply_registration(registration.clone(), now()));
                actions.extend(replication.set_min_insync_replicas(min_insync_replicas, now()));
                actions.extend(
                    replication.rule_out_inactive(|broker| view.image.is_active(broker), now()),
                );
                let now_at = (replication.role(), replication.leader_epoch());
                if let Some(before) =
                    isr_before.filter(|_| now_at.0 == Role::Leader && known == Some(now_at))
                {
                    shard
                        .metrics
                        .isr_changed(before, replication.registration().isr.len());
                }
                // A log serves the HW from its first registration on.
                log.set_high_watermark(replication.high_watermark());
                let changed = known != Some(now_at);
                (now_at.0, changed.then_some(now_at.1), actions)
            };
            kept.insert(topic_partition.clone());
            if let (Role::Leader, Some(epoch)) = (role, epoch) {
                // The new epoch starts at the log end (followers ask where
                // it starts); appends of it would persist it too.
                let log = log.clone();
                glommio::spawn_local(async move {
                    if let Err(error) = log.become_leader(epoch).await {
                        tracing::error!(%error, "recording a new leader epoch failed");
                    }
                })
                .detach();
                load_coordinator(shard, &topic_partition);
            }
            if role == Role::Follower {
                leaders.insert(registration.leader);
            }
            if role != Role::Leader {
                unload_coordinator(shard, &topic_partition);
            }
            apply(shard, &topic_partition, &log, actions);
        }
        host.partitions
            .borrow_mut()
            .retain(|topic_partition, _| kept.contains(topic_partition));
        let mut fetchers = host.fetchers.borrow_mut();
        fetchers.retain(|leader, _| leaders.contains(leader));
        for leader in leaders {
            if let Entry::Vacant(vacant) = fetchers.entry(leader) {
                let (stop, stopped) = oneshot::channel();
                vacant.insert(stop);
                glommio::spawn_local(fetcher::run(shard.clone(), leader, stopped)).detach();
            }
        }
        drop(fetchers);
        if !host.ticking.replace(true) {
            glommio::spawn_local(tick(shard.clone())).detach();
        }
    }

    /// Whether a produce may append: NOT_LEADER_OR_FOLLOWER off the
    /// leader, NOT_ENOUGH_REPLICAS for `acks=all` below
    /// `min.insync.replicas`. Unreplicated partitions may.
    pub fn check_produce(
        &self,
        topic_partition: &TopicPartition,
        acks_all: bool,
    ) -> Result<(), ErrorCode> {
        match self.partitions.borrow().get(topic_partition) {
            Some(replication) => replication.check_produce(acks_all),
            None => Ok(()),
        }
    }

    /// Whether this shard leads `topic_partition` with a HW not yet at its
    /// leader epoch's start: consumers' ListOffsets must wait (KIP-207,
    /// [`PartitionReplication::high_watermark_behind_epoch_start`]).
    pub fn high_watermark_behind_epoch_start(&self, topic_partition: &TopicPartition) -> bool {
        let partitions = self.partitions.borrow();
        partitions
            .get(topic_partition)
            .is_some_and(PartitionReplication::high_watermark_behind_epoch_start)
    }

    /// The leader's log moved (an append, or what it holds).
    pub fn log_moved(shard: &Rc<Shard>, topic_partition: &TopicPartition, log: &PartitionLog) {
        let actions = match shard
            .replication
            .partitions
            .borrow_mut()
            .get_mut(topic_partition)
        {
            Some(replication) => sync_log(replication, log),
            None => return,
        };
        apply(shard, topic_partition, log, actions);
    }

    /// A follower fetched `topic_partition` from `fetch_offset` (its
    /// divergence already checked): Kafka's refusals, or what it moved.
    pub fn follower_fetched(
        shard: &Rc<Shard>,
        topic_partition: &TopicPartition,
        log: &PartitionLog,
        fetched: FollowerFetched,
    ) -> Result<(), ErrorCode> {
        let replica = fetched.replica;
        let eligible = shard
            .cluster_view()
            .is_some_and(|view| view.image.is_active(replica));
        let actions = {
            let mut partitions = shard.replication.partitions.borrow_mut();
            let Some(replication) = partitions.get_mut(topic_partition) else {
                return Err(ErrorCode::NOT_LEADER_OR_FOLLOWER);
            };
            let mut actions = sync_log(replication, log);
            actions.extend(replication.follower_fetched(FollowerFetch {
                replica,
                fetch_offset: fetched.fetch_offset,
                log_start_offset: fetched.log_start_offset,
                eligible,
                now_ms: now(),
            })?);
            actions
        };
        apply(shard, topic_partition, log, actions);
        Ok(())
    }

    /// The partition's low watermark (what DeleteRecords waits for):
    /// NOT_LEADER_OR_FOLLOWER unless this broker leads it.
    pub fn low_watermark(
        shard: &Shard,
        topic_partition: &TopicPartition,
        log: &PartitionLog,
    ) -> Result<Offset, ErrorCode> {
        let partitions = shard.replication.partitions.borrow();
        partitions
            .get(topic_partition)
            .and_then(|replication| replication.low_watermark(log.log_start_offset()))
            .ok_or(ErrorCode::NOT_LEADER_OR_FOLLOWER)
    }

    /// Waits until an `acks=all` produce ending before `end` is
    /// replicated (the HW passed it), or why it cannot be, within `timeout`.
    pub async fn wait_acks(
        shard: &Rc<Shard>,
        topic_partition: &TopicPartition,
        log: &PartitionLog,
        end: Offset,
        timeout: Duration,
    ) -> ErrorCode {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            Self::log_moved(shard, topic_partition, log);
            let progress = shard
                .replication
                .partitions
                .borrow()
                .get(topic_partition)
                .map(|replication| replication.ack_progress(end));
            match progress {
                None => return ErrorCode::NOT_LEADER_OR_FOLLOWER,
                Some(AckProgress::Done(code)) => return code,
                Some(AckProgress::Waiting) => {}
            }
            let remaining = deadline.saturating_duration_since(std::time::Instant::now());
            if remaining.is_zero() {
                return ErrorCode::REQUEST_TIMED_OUT;
            }
            let pause = glommio::timer::sleep(remaining.min(ACK_RECHECK)).fuse();
            let reached = log.wait_high_watermark(end).fuse();
            futures::pin_mut!(pause, reached);
            futures::select_biased! {
                reached = reached => if reached.is_err() {
                    // A closed (truncated) or offline log: the next look
                    // says why, after a pause that keeps this from spinning.
                    glommio::timer::sleep(ACK_RECHECK).await;
                },
                () = pause => {},
            }
        }
    }

    /// The partitions this shard follows from `leader`, with the epoch it
    /// knows them at.
    fn followed_from(&self, leader: BrokerId) -> Vec<(TopicPartition, PartitionRegistration)> {
        let mut followed: Vec<_> = self
            .partitions
            .borrow()
            .iter()
            .filter(|(_, replication)| {
                replication.role() == Role::Follower && replication.registration().leader == leader
            })
            .map(|(topic_partition, replication)| {
                (topic_partition.clone(), replication.registration().clone())
            })
            .collect();
        followed.sort_by(|a, b| a.0.cmp(&b.0));
        followed
    }

    /// Each partition this shard follows, with its fetcher lag
    /// ([`PartitionReplication::fetcher_lag`]).
    pub fn fetcher_lags(&self) -> Vec<(TopicPartition, u64)> {
        self.partitions
            .borrow()
            .iter()
            .filter_map(|(topic_partition, replication)| {
                Some((topic_partition.clone(), replication.fetcher_lag()?))
            })
            .collect()
    }

    /// Whether the answer to a replica fetch that asked `asked` still
    /// applies to `topic_partition`, whose log ends at `log_end_offset`
    /// ([`PartitionReplication::takes_answer`]).
    fn takes_answer(
        &self,
        topic_partition: &TopicPartition,
        asked: &FetchAsked,
        log_end_offset: Offset,
    ) -> bool {
        self.partitions
            .borrow()
            .get(topic_partition)
            .is_some_and(|replication| replication.takes_answer(asked, log_end_offset))
    }

    /// A follower's log moved or its leader answered with its HW.
    fn followed(
        shard: &Rc<Shard>,
        topic_partition: &TopicPartition,
        log: &PartitionLog,
        leader_high_watermark: Option<Offset>,
    ) {
        let actions = {
            let mut partitions = shard.replication.partitions.borrow_mut();
            let Some(replication) = partitions.get_mut(topic_partition) else {
                return;
            };
            let mut actions = sync_log(replication, log);
            if let Some(high_watermark) = leader_high_watermark {
                actions.extend(replication.leader_high_watermark_is(high_watermark));
            }
            actions
        };
        apply(shard, topic_partition, log, actions);
    }
}

/// A coordinator follows its partition's leadership: once this broker
/// stops leading the partition, its state goes (NOT_COORDINATOR from then
/// on) and the new leader loads it from its copy of the log.
fn unload_coordinator(shard: &Shard, topic_partition: &TopicPartition) {
    let partition = topic_partition.partition.0;
    match topic_partition.topic.as_str() {
        OFFSETS_TOPIC_NAME => shard.groups.unload(partition),
        TRANSACTION_STATE_TOPIC_NAME => shard.transactions.unload(partition),
        _ => {}
    }
}

/// A new leader of a `__transaction_state` partition loads its
/// coordinator at once, as Kafka's does on election: a transaction the log
/// holds between its prepare and complete records (its coordinator died,
/// or the broker crashed, in between) gets its markers written with no
/// client asking. (Group coordinators load when a member first asks.)
fn load_coordinator(shard: &Rc<Shard>, topic_partition: &TopicPartition) {
    if topic_partition.topic != TRANSACTION_STATE_TOPIC_NAME {
        return;
    }
    let (shard, partition) = (shard.clone(), topic_partition.partition.0);
    glommio::spawn_local(async move {
        if let Err(error) = shard.transactions.with(&shard, partition, |_| ()).await {
            tracing::debug!(
                partition,
                code = error.0,
                "transaction state not loaded on election"
            );
        }
    })
    .detach();
}

/// The log of `topic_partition` if this broker leads it: a coordinator's
/// record or a transaction marker must never land on a follower's log.
pub fn led_log(shard: &Shard, topic_partition: &TopicPartition) -> Option<PartitionLog> {
    if !shard.leads(&topic_partition.topic, topic_partition.partition) {
        return None;
    }
    shard.log(topic_partition)
}

/// Why a write was not replicated.
#[derive(Debug)]
pub enum NotReplicated {
    Storage(crate::storage::StorageError),
    /// NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS_AFTER_APPEND, or
    /// REQUEST_TIMED_OUT.
    Replication(ErrorCode),
}

/// Waits until the append that ended the log at `end` is durable here and,
/// for a replicated partition, held by every in-sync replica (the
/// `acks=-1` Kafka's coordinators write with), within `timeout`.
pub async fn wait_replicated(
    shard: &Rc<Shard>,
    topic_partition: &TopicPartition,
    log: &PartitionLog,
    end: Offset,
    timeout: Duration,
) -> Result<(), NotReplicated> {
    let started = std::time::Instant::now();
    let durable = futures::select_biased! {
        durable = log.wait_durable(end).fuse() => durable,
        () = glommio::timer::sleep(timeout).fuse() => {
            return Err(NotReplicated::Replication(ErrorCode::REQUEST_TIMED_OUT));
        }
    };
    durable.map_err(NotReplicated::Storage)?;
    if !shard.replication.is_replicated(topic_partition) {
        return Ok(());
    }
    let left = timeout.saturating_sub(started.elapsed());
    match ReplicaHost::wait_acks(shard, topic_partition, log, end, left).await {
        ErrorCode::NONE => Ok(()),
        code => Err(NotReplicated::Replication(code)),
    }
}

/// Carries out what a state machine decided.
fn apply(
    shard: &Rc<Shard>,
    topic_partition: &TopicPartition,
    log: &PartitionLog,
    actions: Vec<Action>,
) {
    for action in actions {
        match action {
            Action::HighWatermarkAdvanced(high_watermark) => log.set_high_watermark(high_watermark),
            Action::ProposeIsr(proposal) => {
                glommio::spawn_local(propose(shard.clone(), topic_partition.clone(), proposal))
                    .detach();
            }
        }
    }
}

/// Sends an ISR change to the controller (through shard 0's broker side)
/// and applies its answer: the committed registration, or a refusal that
/// lets a later change be proposed.
async fn propose(shard: Rc<Shard>, topic_partition: TopicPartition, proposal: IsrProposal) {
    let local = BrokerId(shard.context.broker_id);
    let request = shard.cluster_view().and_then(|view| {
        let topic = view.image.topic_by_name(&topic_partition.topic)?;
        let broker_epoch = view.image.brokers.get(&local)?.epoch;
        Some(AlterPartitionRequest {
            broker: local,
            broker_epoch,
            topic: topic.id,
            partition: topic_partition.partition,
            leader_epoch: proposal.leader_epoch,
            partition_epoch: proposal.partition_epoch,
            new_isr: proposal.isr.clone(),
        })
    });
    let answer = match request {
        None => None,
        Some(request) => shard
            .on_shard(ShardId(0), move |first| async move {
                crate::server::quorum::ask_controller(
                    &first,
                    PeerRequest::AlterPartition(request),
                    FORWARD_TIMEOUT,
                )
                .await
            })
            .await
            .ok()
            .flatten(),
    };
    let mut partitions = shard.replication.partitions.borrow_mut();
    let Some(replication) = partitions.get_mut(&topic_partition) else {
        return;
    };
    match answer {
        Some(PeerResponse::AlterPartition(response)) if response.error == ErrorCode::NONE => {
            tracing::info!(partition = %topic_partition, isr = ?response.isr, "ISR changed");
            let registration = PartitionRegistration {
                replicas: replication.registration().replicas.clone(),
                isr: response.isr,
                leader: response.leader,
                leader_epoch: response.leader_epoch,
                partition_epoch: response.partition_epoch,
            };
            let actions = replication.apply_registration(registration, now());
            drop(partitions);
            if let Some(log) = shard.log(&topic_partition) {
                apply(&shard, &topic_partition, &log, actions);
            }
        }
        answer => {
            tracing::debug!(partition = %topic_partition, ?answer, "the controller did not take an ISR change");
            let error = match answer {
                Some(PeerResponse::AlterPartition(response)) => response.error,
                _ => ErrorCode::NONE,
            };
            let actions = replication.proposal_failed(error, now());
            drop(partitions);
            if let Some(log) = shard.log(&topic_partition) {
                apply(&shard, &topic_partition, &log, actions);
            }
        }
    }
}

/// Lets every led partition notice followers that fell behind.
async fn tick(shard: Rc<Shard>) {
    while !shard.is_stopping() {
        glommio::timer::sleep(TICK).await;
        let led: Vec<TopicPartition> = shard
            .replication
            .partitions
            .borrow()
            .iter()
            .filter(|(_, replication)| replication.role() == Role::Leader)
            .map(|(topic_partition, _)| topic_partition.clone())
            .collect();
        for topic_partition in led {
            let Some(log) = shard.log(&topic_partition) else {
                continue;
            };
            let actions = match shard
                .replication
                .partitions
                .borrow_mut()
                .get_mut(&topic_partition)
            {
                Some(replication) => {
                    let mut actions = sync_log(replication, &log);
                    actions.extend(replication.tick(now()));
                    actions
                }
                None => continue,
            };
            apply(&shard, &topic_partition, &log, actions);
        }
    }
}
