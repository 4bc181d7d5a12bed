//! Transactional offset commits: the group coordinator's side of
//! exactly-once (Kafka's `handleTxnOffsetCommit`, its pending transactional
//! offsets and `handleTxnCompletion`, with KIP-447's member checks).
//!
//! An offset committed inside a transaction must become visible exactly when
//! the transaction commits, and never if it aborts. So:
//!
//! 1. [`GroupCoordinator::commit_txn_offsets`] validates a TxnOffsetCommit
//!    and registers its offsets as *pending* for the producer, with no log
//!    position yet: OffsetFetch with `require_stable` already answers
//!    UNSTABLE_OFFSET_COMMIT for them, as Kafka's `prepareTxnOffsetCommit`.
//! 2. The runtime writes the plan's records as one *transactional* batch of
//!    the producer (id and epoch from [`TxnCommitPlan::producer`]), waits
//!    until it is durable and reports each record's log offset with
//!    [`GroupCoordinator::txn_offsets_written`] (or the failure with
//!    [`GroupCoordinator::txn_offsets_failed`]). Pending offsets are never
//!    returned by OffsetFetch.
//! 3. When the transaction's COMMIT or ABORT marker is durable in the same
//!    `__consumer_offsets` partition, [`GroupCoordinator::complete_transaction`]
//!    moves the producer's pending offsets into the committed ones (commit)
//!    or drops them (abort). A pending offset replaces a committed one only
//!    if its record is later in the log: Kafka keeps the most recent of a
//!    mix of plain and transactional commits, and comparing log positions is
//!    what makes a reload (after compaction) pick the same winner.
//! 4. Loading replays the log the same way ([`GroupCoordinator::replay_logged`]
//!    for records with their offset and transactional producer, then
//!    `complete_transaction` at each marker): offsets of a transaction whose
//!    marker has not been written yet stay pending.
//!
//! A tombstone for a partition (OffsetDelete, DeleteGroups, a deleted topic)
//! drops its pending transactional offsets too, as Kafka's replay of one does;
//! expiry skips partitions with pending offsets and keeps their group.

use crate::group::offsets::{CommitPlan, offset_records};
use std::collections::BTreeSet;

use crate::group::Persist;
use crate::group::coordinator::GroupCoordinator;
use crate::group::offsets::CommitPartition;
use crate::group::state::{CommittedOffset, Group, GroupState, PendingTxnOffset};
use crate::log::control::MarkerKind;
use crate::protocol::errors::ErrorCode;
use crate::replica::producer_state::ProducerEpoch;
use crate::types::{ProducerId, TopicPartition};

/// A TxnOffsetCommit (v0–v5) as domain values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnCommitRequest {
    /// Not checked here: Kafka uses it for authorization and for KIP-890's
    /// verification with the transaction coordinator.
    pub transactional_id: String,
    pub group_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// v3+ (KIP-447); -1, empty and `None` before.
    pub generation: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub partitions: Vec<CommitPartition>,
}

/// The producer whose transactional batch carries the offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TxnProducer {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
}

/// A validated TxnOffsetCommit: one error per partition (in request order)
/// and the offsets to write as the producer's transactional batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TxnCommitPlan {
    pub producer: TxnProducer,
    pub errors: Vec<ErrorCode>,
    pub offsets: Vec<(TopicPartition, CommittedOffset)>,
}

impl TxnCommitPlan {
    /// The records to write, in the order of [`TxnCommitPlan::offsets`].
    pub fn records(&self, group_id: &str) -> Vec<Persist> {
        offset_records(group_id, &self.offsets)
    }
}

/// Whether OffsetFetch may answer with a committed offset while a
/// transaction that commits a newer one is open (OffsetFetch v7+'s
/// `require_stable`, KIP-447).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stability {
    /// The committed offset, whatever is pending.
    Latest,
    /// UNSTABLE_OFFSET_COMMIT for a partition with pending offsets.
    RequireStable,
}

/// Where a record read back while loading came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoggedRecord {
    /// The record's offset in `__consumer_offsets`.
    pub offset: i64,
    /// The producer of its batch when the batch is transactional.
    pub transactional_producer: Option<ProducerId>,
}

/// One partition's answer to OffsetFetch: the committed offset (`None` when
/// there is none) or the partition's error.
pub type FetchedOffset = (TopicPartition, Result<Option<CommittedOffset>, ErrorCode>);

impl GroupCoordinator {
    /// Validates a TxnOffsetCommit as Kafka's coordinator does and registers
    /// its offsets as pending (not yet written) for the producer. `Err`
    /// answers every partition with one code.
    pub fn commit_txn_offsets(
        &mut self,
        now_ms: i64,
        request: &TxnCommitRequest,
    ) -> Result<TxnCommitPlan, ErrorCode> {
        if request.group_id.is_empty() {
            return Err(ErrorCode::INVALID_GROUP_ID);
        }
        if request.producer_id.0 < 0 || request.producer_epoch.0 < 0 {
            // Brook's choice: Kafka's KIP-890 verification rejects a producer
            // the transaction coordinator does not know with this code.
            return Err(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        }
        let group = match self.groups.get(&request.group_id) {
            Some(group) => group,
            None if request.generation < 0 => {
                let group = Group::new(&request.group_id, now_ms);
                self.groups.insert(request.group_id.clone(), group);
                &self.groups[&request.group_id]
            }
            None => return Err(ErrorCode::ILLEGAL_GENERATION),
        };
        check_txn_commit(group, request)?;
        let plan = self.txn_plan(now_ms, request);
        self.register_pending(&request.group_id, &plan);
        Ok(plan)
    }

    fn txn_plan(&self, now_ms: i64, request: &TxnCommitRequest) -> TxnCommitPlan {
        let metadata_max = self.settings.offset_metadata_bytes_max;
        // Transactional commits never carry their own expiry (Kafka).
        let CommitPlan { errors, offsets } =
            CommitPlan::new(&request.partitions, metadata_max, now_ms, None);
        TxnCommitPlan {
            producer: TxnProducer {
                producer_id: request.producer_id,
                producer_epoch: request.producer_epoch,
            },
            errors,
            offsets,
        }
    }

    fn register_pending(&mut self, group_id: &str, plan: &TxnCommitPlan) {
        if plan.offsets.is_empty() {
            return;
        }
        let producer_id = plan.producer.producer_id;
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        let pending = group.pending_txn_offsets.entry(producer_id).or_default();
        for (partition, offset) in &plan.offsets {
            let entry = PendingTxnOffset {
                offset: offset.clone(),
                record_offset: None,
            };
            pending.insert(partition.clone(), entry);
        }
        self.txn_producer_groups
            .entry(producer_id)
            .or_default()
            .insert(group_id.to_owned());
    }

    /// The plan's batch is durable: each offset with its record's offset in
    /// the log. An offset no longer pending as written (its transaction
    /// completed or a tombstone removed it meanwhile) is left alone.
    pub fn txn_offsets_written(
        &mut self,
        group_id: &str,
        producer_id: ProducerId,
        written: Vec<(TopicPartition, CommittedOffset, i64)>,
    ) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        let Some(pending) = group.pending_txn_offsets.get_mut(&producer_id) else {
            return;
        };
        for (partition, offset, record_offset) in written {
            if let Some(entry) = pending.get_mut(&partition) {
                if entry.offset == offset {
                    entry.record_offset = Some(record_offset);
                }
            }
        }
    }

    /// Writing the plan's batch failed: its offsets are no longer pending
    /// (Kafka's `failPendingTxnOffsetCommit`), unless a later write of the
    /// same partition already replaced them.
    pub fn txn_offsets_failed(
        &mut self,
        group_id: &str,
        producer_id: ProducerId,
        offsets: &[(TopicPartition, CommittedOffset)],
    ) {
        let Some(group) = self.groups.get_mut(group_id) else {
            return;
        };
        let Some(pending) = group.pending_txn_offsets.get_mut(&producer_id) else {
            return;
        };
        for (partition, offset) in offsets {
            let unwritten = pending
                .get(partition)
                .is_some_and(|entry| entry.record_offset.is_none() && entry.offset == *offset);
            if unwritten {
                pending.remove(partition);
            }
        }
        if pending.is_empty() {
            group.pending_txn_offsets.remove(&producer_id);
        }
    }

    /// A COMMIT or ABORT marker of `producer_id` is durable in this
    /// partition: its pending offsets in every group become committed (when
    /// newer in the log than the committed ones) or are dropped. Returns how
    /// many offsets were applied.
    pub fn complete_transaction(&mut self, producer_id: ProducerId, result: MarkerKind) -> usize {
        let Some(group_ids) = self.txn_producer_groups.remove(&producer_id) else {
            return 0;
        };
        let mut applied = 0;
        for group_id in group_ids {
            let Some(group) = self.groups.get_mut(&group_id) else {
                continue;
            };
            let Some(pending) = group.pending_txn_offsets.remove(&producer_id) else {
                continue;
            };
            if result == MarkerKind::Abort {
                continue;
            }
            for (partition, entry) in pending {
                // Never written (the client committed without waiting for
                // its TxnOffsetCommit): nothing in the log to apply.
                let Some(record_offset) = entry.record_offset else {
                    continue;
                };
                if supersedes(group, &partition, record_offset) {
                    group
                        .offset_record_offsets
                        .insert(partition.clone(), record_offset);
                    group.offsets.insert(partition, entry.offset);
                    applied += 1;
                }
            }
        }
        applied
    }

    /// Applies plain (non-transactional) commits once written, each with its
    /// record's offset in the log.
    pub fn offsets_committed_at(
        &mut self,
        now_ms: i64,
        group_id: &str,
        offsets: Vec<(TopicPartition, CommittedOffset, i64)>,
    ) {
        let group = self
            .groups
            .entry(group_id.to_owned())
            .or_insert_with(|| Group::new(group_id, now_ms));
        for (partition, offset, record_offset) in offsets {
            group
                .offset_record_offsets
                .insert(partition.clone(), record_offset);
            group.offsets.insert(partition, offset);
        }
    }

    /// OffsetFetch: [`GroupCoordinator::fetch_offsets`], with
    /// UNSTABLE_OFFSET_COMMIT for partitions with pending transactional
    /// offsets when `stability` requires stable offsets.
    pub fn fetch_offsets_with(
        &self,
        group_id: &str,
        partitions: Option<&[TopicPartition]>,
        stability: Stability,
    ) -> Vec<FetchedOffset> {
        let group = self.groups.get(group_id);
        self.fetch_offsets(group_id, partitions)
            .into_iter()
            .map(|(partition, offset)| {
                let unstable = stability == Stability::RequireStable
                    && group.is_some_and(|group| group.has_pending_txn_offset(&partition));
                if unstable {
                    (partition, Err(ErrorCode::UNSTABLE_OFFSET_COMMIT))
                } else {
                    (partition, Ok(offset))
                }
            })
            .collect()
    }

    /// Applies one record read back while loading, knowing where it is in
    /// the log and whether its batch is transactional: an offset of a
    /// transactional batch is pending until its producer's marker.
    pub fn replay_logged(&mut self, now_ms: i64, record: Persist, logged: LoggedRecord) {
        let Persist::Offset {
            group_id,
            partition,
            offset,
        } = record
        else {
            return self.replay(now_ms, record);
        };
        // Kafka creates a simple group for offsets of an unknown one.
        let group = self
            .groups
            .entry(group_id.clone())
            .or_insert_with(|| Group::new(&group_id, now_ms));
        match logged.transactional_producer {
            None => {
                group
                    .offset_record_offsets
                    .insert(partition.clone(), logged.offset);
                group.offsets.insert(partition, offset);
            }
            Some(producer_id) => {
                let entry = PendingTxnOffset {
                    offset,
                    record_offset: Some(logged.offset),
                };
                let pending = group.pending_txn_offsets.entry(producer_id).or_default();
                pending.insert(partition, entry);
                self.txn_producer_groups
                    .entry(producer_id)
                    .or_default()
                    .insert(group_id);
            }
        }
    }

    /// Whether `producer_id` has offsets pending in `group_id` (for tests
    /// and the runtime's logs).
    pub fn pending_txn_offsets(
        &self,
        group_id: &str,
        producer_id: ProducerId,
    ) -> Vec<(TopicPartition, PendingTxnOffset)> {
        self.groups
            .get(group_id)
            .and_then(|group| group.pending_txn_offsets.get(&producer_id))
            .map(|pending| {
                pending
                    .iter()
                    .map(|(partition, entry)| (partition.clone(), entry.clone()))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Drops a deleted group from the producer index.
    pub(crate) fn forget_group_producers(&mut self, group_id: &str) {
        self.txn_producer_groups.retain(|_, groups| {
            groups.remove(group_id);
            !groups.is_empty()
        });
    }
}

/// TxnOffsetCommit's group checks in Kafka's order (`ClassicGroup.validateOffsetCommit`
/// with `isTransactional`): unlike OffsetCommit, a commit without member id
/// and generation (v0–v2) is accepted whatever the group's state, and a
/// group completing a rebalance does not answer REBALANCE_IN_PROGRESS.
fn check_txn_commit(group: &Group, request: &TxnCommitRequest) -> Result<(), ErrorCode> {
    if group.is(GroupState::Dead) {
        return Err(ErrorCode::COORDINATOR_NOT_AVAILABLE);
    }
    if request.generation < 0 && group.is(GroupState::Empty) {
        return Ok(());
    }
    let identified = request.generation >= 0
        || !request.member_id.is_empty()
        || request.group_instance_id.is_some();
    if !identified {
        return Ok(());
    }
    if let Some(instance) = &request.group_instance_id {
        match group.static_members.get(instance) {
            None => return Err(ErrorCode::UNKNOWN_MEMBER_ID),
            Some(current) if *current != request.member_id => {
                return Err(ErrorCode::FENCED_INSTANCE_ID);
            }
            Some(_) => {}
        }
    }
    if !group.members.contains_key(&request.member_id) {
        return Err(ErrorCode::UNKNOWN_MEMBER_ID);
    }
    if request.generation != group.generation {
        return Err(ErrorCode::ILLEGAL_GENERATION);
    }
    Ok(())
}

/// Whether a transactional offset at `record_offset` replaces the group's
/// committed offset for `partition`: there is none, or its record is older
/// (or its position unknown: it was applied by the legacy path, before).
fn supersedes(group: &Group, partition: &TopicPartition, record_offset: i64) -> bool {
    if !group.offsets.contains_key(partition) {
        return true;
    }
    group
        .offset_record_offsets
        .get(partition)
        .is_none_or(|committed_at| *committed_at < record_offset)
}

/// Removes `partition`'s committed offset and every producer's pending
/// offset for it (what replaying its tombstone does); whether there was any.
pub(crate) fn forget_partition(group: &mut Group, partition: &TopicPartition) -> bool {
    let mut existed = group.offsets.remove(partition).is_some();
    group.offset_record_offsets.remove(partition);
    for pending in group.pending_txn_offsets.values_mut() {
        existed |= pending.remove(partition).is_some();
    }
    group
        .pending_txn_offsets
        .retain(|_, pending| !pending.is_empty());
    existed
}

/// Every partition with a committed or a pending transactional offset,
/// sorted: what a group's tombstones must cover.
pub(crate) fn partitions_with_offsets(group: &Group) -> Vec<TopicPartition> {
    let mut partitions: BTreeSet<TopicPartition> = group.offsets.keys().cloned().collect();
    for pending in group.pending_txn_offsets.values() {
        partitions.extend(pending.keys().cloned());
    }
    partitions.into_iter().collect()
}

#[cfg(test)]
#[path = "txn_offsets_tests.rs"]
mod tests;
