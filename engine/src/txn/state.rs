//! One transactional id as the coordinator sees it (Kafka's
//! `TransactionMetadata`): its producer id and epochs, its transaction's
//! state, partitions and timestamps, and the transition in flight.
//!
//! Every change is two steps, as in Kafka: a `prepare_*` method checks the
//! transition against the state machine, records the target state as the
//! *pending state* and returns the [`TransitMetadata`] to persist; once the
//! runtime reports the record durable, [`TransactionMetadata::complete_transition`]
//! applies it. While a transition is pending no other may start, which is
//! what CONCURRENT_TRANSACTIONS tells clients. Changed only by the
//! coordinator of the `__transaction_state` partition that owns the id.

use std::collections::{BTreeMap, BTreeSet};

use thiserror::Error;

use crate::replica::producer_state::ProducerEpoch;
use crate::txn::records::{TopicPartitions, TransactionLogValue};
use crate::types::{ProducerId, TopicPartition};

/// Kafka's `RecordBatch.NO_PRODUCER_ID`.
pub const NO_PRODUCER_ID: ProducerId = ProducerId(-1);

/// A transaction's state, with Kafka's wire ids (the log's
/// `TransactionStatus`) and names (DescribeTransactions, ListTransactions).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransactionState {
    /// No transaction (after InitProducerId), or none yet.
    Empty,
    /// Partitions have been added; records may be written.
    Ongoing,
    /// EndTxn(commit) is durable; markers are being written.
    PrepareCommit,
    /// EndTxn(abort) (or a fence or timeout) is durable; markers are being written.
    PrepareAbort,
    CompleteCommit,
    CompleteAbort,
    /// The id is expiring; its tombstone is being written.
    Dead,
    /// The epoch is being bumped to fence a producer (never persisted).
    PrepareEpochFence,
}

impl TransactionState {
    pub const ALL: [TransactionState; 8] = [
        TransactionState::Empty,
        TransactionState::Ongoing,
        TransactionState::PrepareCommit,
        TransactionState::PrepareAbort,
        TransactionState::CompleteCommit,
        TransactionState::CompleteAbort,
        TransactionState::Dead,
        TransactionState::PrepareEpochFence,
    ];

    /// The `TransactionStatus` byte of the log value.
    pub fn id(self) -> i8 {
        match self {
            TransactionState::Empty => 0,
            TransactionState::Ongoing => 1,
            TransactionState::PrepareCommit => 2,
            TransactionState::PrepareAbort => 3,
            TransactionState::CompleteCommit => 4,
            TransactionState::CompleteAbort => 5,
            TransactionState::Dead => 6,
            TransactionState::PrepareEpochFence => 7,
        }
    }

    pub fn from_id(id: i8) -> Option<TransactionState> {
        TransactionState::ALL
            .into_iter()
            .find(|state| state.id() == id)
    }

    /// The name Kafka's admin APIs use.
    pub fn name(self) -> &'static str {
        match self {
            TransactionState::Empty => "Empty",
            TransactionState::Ongoing => "Ongoing",
            TransactionState::PrepareCommit => "PrepareCommit",
            TransactionState::PrepareAbort => "PrepareAbort",
            TransactionState::CompleteCommit => "CompleteCommit",
            TransactionState::CompleteAbort => "CompleteAbort",
            TransactionState::Dead => "Dead",
            TransactionState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TransactionState> {
        TransactionState::ALL
            .into_iter()
            .find(|state| state.name() == name)
    }

    /// The states this one may be entered from (Kafka's `validPreviousStates`).
    pub fn valid_previous_states(self) -> &'static [TransactionState] {
        use TransactionState::*;
        match self {
            Empty => &[Empty, CompleteCommit, CompleteAbort],
            Ongoing => &[Ongoing, Empty, CompleteCommit, CompleteAbort],
            PrepareCommit => &[Ongoing],
            PrepareAbort => &[
                Ongoing,
                PrepareEpochFence,
                Empty,
                CompleteCommit,
                CompleteAbort,
            ],
            CompleteCommit => &[PrepareCommit],
            CompleteAbort => &[PrepareAbort],
            Dead => &[Empty, CompleteAbort, CompleteCommit],
            PrepareEpochFence => &[Ongoing],
        }
    }

    /// Whether an idle id in this state may expire
    /// (`transactional.id.expiration.ms`).
    pub fn is_expiration_allowed(self) -> bool {
        matches!(
            self,
            TransactionState::Empty
                | TransactionState::CompleteCommit
                | TransactionState::CompleteAbort
        )
    }
}

/// Whether `epoch` leaves no room to fence (Kafka's `isEpochExhausted`): the
/// coordinator must always be able to bump once more, so a client never
/// gets `i16::MAX - 1` or above from a plain bump.
pub fn is_epoch_exhausted(epoch: ProducerEpoch) -> bool {
    epoch.0 >= i16::MAX - 1
}

/// Whether the client's `transaction.version` bumps the epoch on every
/// EndTxn (KIP-890 part 2, Kafka's `supportsEpochBump`).
pub fn supports_epoch_bump(client_transaction_version: i16) -> bool {
    client_transaction_version >= 2
}

/// A transition Kafka would refuse with an exception.
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum TransitionError {
    #[error("a transition to {pending:?} is already pending")]
    AlreadyPending { pending: TransactionState },
    #[error("{to:?} cannot follow {from:?}")]
    InvalidPreviousState {
        from: TransactionState,
        to: TransactionState,
    },
    #[error("illegal producer id {0:?} or epoch {1:?}")]
    IllegalProducer(ProducerId, ProducerEpoch),
    #[error("producer id {0:?} has no epochs left")]
    EpochExhausted(ProducerId),
    #[error("the producer's expected epoch is fenced")]
    ProducerFenced,
    #[error("no transition is pending")]
    NothingPending,
    #[error("the durable transition to {state:?} does not follow from the current metadata")]
    UnexpectedCompletion { state: TransactionState },
}

/// The metadata a transition leads to: what is persisted, and what
/// [`TransactionMetadata::complete_transition`] applies once it is durable
/// (Kafka's `TxnTransitMetadata`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransitMetadata {
    pub producer_id: ProducerId,
    pub previous_producer_id: ProducerId,
    pub next_producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub last_producer_epoch: ProducerEpoch,
    pub timeout_ms: i32,
    pub state: TransactionState,
    pub partitions: BTreeSet<TopicPartition>,
    pub start_timestamp_ms: i64,
    pub last_update_timestamp_ms: i64,
    pub client_transaction_version: i16,
}

/// One transactional id's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionMetadata {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    /// The producer id before the last transition (KIP-360 retries after a
    /// producer id rotation are recognised by it).
    pub previous_producer_id: ProducerId,
    /// Transactions v2: the producer id the completion moves to.
    pub next_producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// The epoch before the last bump, so a retried InitProducerId whose
    /// answer was lost gets the same epoch back (not persisted: -1 on load).
    pub last_producer_epoch: ProducerEpoch,
    pub timeout_ms: i32,
    pub state: TransactionState,
    pub partitions: BTreeSet<TopicPartition>,
    /// When the first partition was added; -1 when no transaction is open.
    pub start_timestamp_ms: i64,
    pub last_update_timestamp_ms: i64,
    pub client_transaction_version: i16,
    /// The state a prepared transition leads to, until it is durable.
    pub pending_state: Option<TransactionState>,
    /// A fence's write failed, so its bumped epoch was never handed out:
    /// the next fence reuses it instead of bumping again.
    pub has_failed_epoch_fence: bool,
}

impl TransactionMetadata {
    /// A new id: `Empty`, no epoch yet (the first InitProducerId bumps it to 0).
    pub fn new(
        transactional_id: &str,
        producer_id: ProducerId,
        timeout_ms: i32,
        now_ms: i64,
    ) -> TransactionMetadata {
        TransactionMetadata {
            transactional_id: transactional_id.to_owned(),
            producer_id,
            previous_producer_id: NO_PRODUCER_ID,
            next_producer_id: NO_PRODUCER_ID,
            producer_epoch: ProducerEpoch::NONE,
            last_producer_epoch: ProducerEpoch::NONE,
            timeout_ms,
            state: TransactionState::Empty,
            partitions: BTreeSet::new(),
            start_timestamp_ms: -1,
            last_update_timestamp_ms: now_ms,
            client_transaction_version: 0,
            pending_state: None,
            has_failed_epoch_fence: false,
        }
    }

    /// The metadata a log value describes (Kafka's `TransactionLog.read`):
    /// the last epoch is not persisted, and an `Empty` value's partitions are
    /// ignored.
    pub fn from_log_value(
        transactional_id: &str,
        value: &TransactionLogValue,
    ) -> TransactionMetadata {
        let partitions = match value.state {
            TransactionState::Empty => BTreeSet::new(),
            _ => value
                .partitions
                .iter()
                .flatten()
                .flat_map(|entry| {
                    entry
                        .partition_ids
                        .iter()
                        .map(|partition| TopicPartition::new(entry.topic.clone(), *partition))
                })
                .collect(),
        };
        TransactionMetadata {
            transactional_id: transactional_id.to_owned(),
            producer_id: value.producer_id,
            previous_producer_id: value.previous_producer_id,
            next_producer_id: value.next_producer_id,
            producer_epoch: value.producer_epoch,
            last_producer_epoch: ProducerEpoch::NONE,
            timeout_ms: value.timeout_ms,
            state: value.state,
            partitions,
            start_timestamp_ms: value.start_timestamp_ms,
            last_update_timestamp_ms: value.last_update_timestamp_ms,
            client_transaction_version: value.client_transaction_version,
            pending_state: None,
            has_failed_epoch_fence: false,
        }
    }

    pub fn pending_transition_in_progress(&self) -> bool {
        self.pending_state.is_some()
    }

    pub fn is_producer_epoch_exhausted(&self) -> bool {
        is_epoch_exhausted(self.producer_epoch)
    }

    /// The metadata as it is now, to be changed into a transition target.
    fn unchanged(&self, state: TransactionState) -> TransitMetadata {
        TransitMetadata {
            producer_id: self.producer_id,
            previous_producer_id: self.producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            last_producer_epoch: self.last_producer_epoch,
            timeout_ms: self.timeout_ms,
            state,
            partitions: self.partitions.clone(),
            start_timestamp_ms: self.start_timestamp_ms,
            last_update_timestamp_ms: self.last_update_timestamp_ms,
            client_transaction_version: self.client_transaction_version,
        }
    }

    /// Bumps the epoch to fence the current producer (InitProducerId or a
    /// timeout found an open transaction); the abort that follows carries it.
    pub fn prepare_fence_producer_epoch(&mut self) -> Result<TransitMetadata, TransitionError> {
        let mut target = self.unchanged(TransactionState::PrepareEpochFence);
        // A fence whose write failed was never seen by anyone: reuse it. Never
        // overflow an epoch already at the top.
        if !self.has_failed_epoch_fence && self.producer_epoch.0 != i16::MAX {
            target.producer_epoch = ProducerEpoch(self.producer_epoch.0 + 1);
        }
        self.prepare(target)
    }

    /// InitProducerId on an idle id: the next epoch (KIP-360's expected
    /// epoch decides between a bump, a retry's same answer and a fence).
    pub fn prepare_increment_producer_epoch(
        &mut self,
        timeout_ms: i32,
        expected_epoch: Option<ProducerEpoch>,
        now_ms: i64,
    ) -> Result<TransitMetadata, TransitionError> {
        if self.is_producer_epoch_exhausted() {
            return Err(TransitionError::EpochExhausted(self.producer_id));
        }
        let bumped = ProducerEpoch(self.producer_epoch.0 + 1);
        let mut target = self.unchanged(TransactionState::Empty);
        match expected_epoch {
            None => {
                target.producer_epoch = bumped;
                target.last_producer_epoch = ProducerEpoch::NONE;
            }
            Some(expected)
                if self.producer_epoch == ProducerEpoch::NONE
                    || expected == self.producer_epoch =>
            {
                target.producer_epoch = bumped;
                target.last_producer_epoch = self.producer_epoch;
            }
            // A retry of a bump whose answer was lost: the same epoch again.
            Some(expected) if expected == self.last_producer_epoch => {}
            Some(_) => return Err(TransitionError::ProducerFenced),
        }
        target.timeout_ms = timeout_ms;
        target.partitions = BTreeSet::new();
        target.start_timestamp_ms = -1;
        target.last_update_timestamp_ms = now_ms;
        self.prepare(target)
    }

    /// InitProducerId when the epochs are exhausted: a new producer id at
    /// epoch 0.
    pub fn prepare_producer_id_rotation(
        &mut self,
        new_producer_id: ProducerId,
        timeout_ms: i32,
        now_ms: i64,
        record_last_epoch: bool,
    ) -> Result<TransitMetadata, TransitionError> {
        let mut target = self.unchanged(TransactionState::Empty);
        target.producer_id = new_producer_id;
        target.producer_epoch = ProducerEpoch(0);
        target.last_producer_epoch = if record_last_epoch {
            self.producer_epoch
        } else {
            ProducerEpoch::NONE
        };
        target.timeout_ms = timeout_ms;
        target.partitions = BTreeSet::new();
        target.start_timestamp_ms = -1;
        target.last_update_timestamp_ms = now_ms;
        self.prepare(target)
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the transaction (re)starts or grows.
    pub fn prepare_add_partitions(
        &mut self,
        added: &BTreeSet<TopicPartition>,
        now_ms: i64,
        client_transaction_version: i16,
    ) -> Result<TransitMetadata, TransitionError> {
        let mut target = self.unchanged(TransactionState::Ongoing);
        if matches!(
            self.state,
            TransactionState::Empty
                | TransactionState::CompleteCommit
                | TransactionState::CompleteAbort
        ) {
            target.start_timestamp_ms = now_ms;
        }
        target.partitions.extend(added.iter().cloned());
        target.last_update_timestamp_ms = now_ms;
        target.client_transaction_version = client_transaction_version;
        self.prepare(target)
    }

    /// EndTxn (or a fence's abort): PrepareCommit or PrepareAbort.
    pub fn prepare_abort_or_commit(
        &mut self,
        state: TransactionState,
        client_transaction_version: i16,
        next_producer_id: ProducerId,
        now_ms: i64,
        no_partition_added: bool,
    ) -> Result<TransitMetadata, TransitionError> {
        let mut target = self.unchanged(state);
        if supports_epoch_bump(client_transaction_version) {
            let at_top = self.producer_epoch.0 == i16::MAX;
            if !(at_top && state == TransactionState::PrepareAbort) {
                target.producer_epoch = ProducerEpoch(self.producer_epoch.0.saturating_add(1));
            }
            target.last_producer_epoch = self.producer_epoch;
        }
        if no_partition_added {
            target.start_timestamp_ms = now_ms;
        }
        target.next_producer_id = next_producer_id;
        target.last_update_timestamp_ms = now_ms;
        target.client_transaction_version = client_transaction_version;
        self.prepare(target)
    }

    /// The markers are written: CompleteCommit or CompleteAbort.
    pub fn prepare_complete(&mut self, now_ms: i64) -> Result<TransitMetadata, TransitionError> {
        self.has_failed_epoch_fence = false;
        let state = if self.state == TransactionState::PrepareCommit {
            TransactionState::CompleteCommit
        } else {
            TransactionState::CompleteAbort
        };
        let mut target = self.unchanged(state);
        if supports_epoch_bump(self.client_transaction_version)
            && self.next_producer_id != NO_PRODUCER_ID
        {
            target.producer_id = self.next_producer_id;
            target.producer_epoch = ProducerEpoch(0);
        }
        target.next_producer_id = NO_PRODUCER_ID;
        target.partitions = BTreeSet::new();
        target.last_update_timestamp_ms = now_ms;
        self.prepare(target)
    }

    /// The id expired: its tombstone is about to be written.
    pub fn prepare_dead(&mut self) -> Result<TransitMetadata, TransitionError> {
        let mut target = self.unchanged(TransactionState::Dead);
        target.partitions = BTreeSet::new();
        self.prepare(target)
    }

    /// Kafka's `prepareTransitionTo`: checks and records the pending state.
    fn prepare(&mut self, target: TransitMetadata) -> Result<TransitMetadata, TransitionError> {
        if let Some(pending) = self.pending_state {
            return Err(TransitionError::AlreadyPending { pending });
        }
        let epoch_missing = target.state != TransactionState::Dead && target.producer_epoch.0 < 0;
        if target.producer_id.0 < 0 || epoch_missing {
            return Err(TransitionError::IllegalProducer(
                target.producer_id,
                target.producer_epoch,
            ));
        }
        if !target.state.valid_previous_states().contains(&self.state) {
            return Err(TransitionError::InvalidPreviousState {
                from: self.state,
                to: target.state,
            });
        }
        self.pending_state = Some(target.state);
        Ok(target)
    }
}

impl TransactionMetadata {
    /// Applies a durable transition (Kafka's `completeTransitionTo`), after
    /// checking that it is the pending one and follows from the current
    /// metadata: epochs move only by a bump or a new producer id, partitions
    /// only grow while Ongoing, the timeout only changes with a new epoch.
    pub fn complete_transition(&mut self, target: &TransitMetadata) -> Result<(), TransitionError> {
        let to = self.pending_state.ok_or(TransitionError::NothingPending)?;
        let unexpected = TransitionError::UnexpectedCompletion {
            state: target.state,
        };
        if to != target.state {
            return Err(unexpected);
        }
        let valid = match to {
            TransactionState::Empty => {
                (self.producer_epoch == target.producer_epoch || self.valid_epoch_bump(target))
                    && target.partitions.is_empty()
                    && target.start_timestamp_ms == -1
            }
            TransactionState::Ongoing => {
                self.valid_producer_epoch(target)
                    && target.partitions.is_superset(&self.partitions)
                    && self.timeout_ms == target.timeout_ms
            }
            TransactionState::PrepareCommit | TransactionState::PrepareAbort => {
                let empty_abort = to == TransactionState::PrepareAbort
                    && supports_epoch_bump(target.client_transaction_version)
                    && self.state.is_expiration_allowed();
                self.valid_producer_epoch(target)
                    && self.partitions == target.partitions
                    && self.timeout_ms == target.timeout_ms
                    && (self.start_timestamp_ms == target.start_timestamp_ms || empty_abort)
            }
            TransactionState::CompleteCommit | TransactionState::CompleteAbort => {
                self.valid_producer_epoch(target)
                    && self.timeout_ms == target.timeout_ms
                    && target.start_timestamp_ms != -1
            }
            // Neither is ever made durable as metadata: a fence continues as
            // PrepareAbort, and a Dead id is removed, not updated.
            TransactionState::PrepareEpochFence | TransactionState::Dead => false,
        };
        if !valid {
            return Err(unexpected);
        }
        self.producer_id = target.producer_id;
        self.previous_producer_id = target.previous_producer_id;
        self.next_producer_id = target.next_producer_id;
        self.producer_epoch = target.producer_epoch;
        self.last_producer_epoch = target.last_producer_epoch;
        self.timeout_ms = target.timeout_ms;
        self.partitions = target.partitions.clone();
        self.start_timestamp_ms = target.start_timestamp_ms;
        self.last_update_timestamp_ms = target.last_update_timestamp_ms;
        self.client_transaction_version = target.client_transaction_version;
        self.pending_state = None;
        self.state = to;
        Ok(())
    }

    /// Kafka's `validProducerEpoch`, with transactions v2's bumped epochs.
    fn valid_producer_epoch(&self, target: &TransitMetadata) -> bool {
        let v2 = supports_epoch_bump(target.client_transaction_version);
        let completes = matches!(
            target.state,
            TransactionState::CompleteCommit | TransactionState::CompleteAbort
        );
        let prepares = matches!(
            target.state,
            TransactionState::PrepareCommit | TransactionState::PrepareAbort
        );
        if v2 && completes && target.producer_epoch.0 == 0 {
            return target.last_producer_epoch == self.last_producer_epoch
                && target.previous_producer_id == self.producer_id;
        }
        if v2 && prepares {
            return target.last_producer_epoch == self.producer_epoch
                && target.producer_id == self.producer_id;
        }
        target.producer_epoch == self.producer_epoch && target.producer_id == self.producer_id
    }

    fn valid_epoch_bump(&self, target: &TransitMetadata) -> bool {
        target.producer_epoch.0 == self.producer_epoch.0.wrapping_add(1)
            || (target.producer_epoch.0 == 0 && target.producer_id != self.producer_id)
    }
}

impl TransitMetadata {
    /// The log value this transition persists. An `Empty` transaction's
    /// partitions are null, as Kafka writes them.
    pub fn to_log_value(&self) -> TransactionLogValue {
        let partitions = (self.state != TransactionState::Empty).then(|| {
            let mut by_topic: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
            for partition in &self.partitions {
                by_topic
                    .entry(&partition.topic)
                    .or_default()
                    .push(partition.partition.0);
            }
            by_topic
                .into_iter()
                .map(|(topic, partition_ids)| TopicPartitions {
                    topic: topic.to_owned(),
                    partition_ids,
                })
                .collect()
        });
        TransactionLogValue {
            producer_id: self.producer_id,
            previous_producer_id: self.previous_producer_id,
            next_producer_id: self.next_producer_id,
            producer_epoch: self.producer_epoch,
            timeout_ms: self.timeout_ms,
            state: self.state,
            partitions,
            last_update_timestamp_ms: self.last_update_timestamp_ms,
            start_timestamp_ms: self.start_timestamp_ms,
            client_transaction_version: self.client_transaction_version,
            unknown_tagged_fields: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata() -> TransactionMetadata {
        TransactionMetadata::new("tx", ProducerId(10), 60_000, 0)
    }

    fn partitions(ids: &[i32]) -> BTreeSet<TopicPartition> {
        ids.iter().map(|id| TopicPartition::new("t", *id)).collect()
    }

    /// Prepares with `prepare` and completes it, as a durable write would.
    fn apply(
        metadata: &mut TransactionMetadata,
        prepare: impl FnOnce(&mut TransactionMetadata) -> Result<TransitMetadata, TransitionError>,
    ) -> TransitMetadata {
        let target = prepare(metadata).unwrap();
        metadata.complete_transition(&target).unwrap();
        target
    }

    #[test]
    fn states_have_kafkas_ids_names_and_previous_states() {
        use TransactionState::*;
        let rows = [
            (Empty, 0, "Empty"),
            (Ongoing, 1, "Ongoing"),
            (PrepareCommit, 2, "PrepareCommit"),
            (PrepareAbort, 3, "PrepareAbort"),
            (CompleteCommit, 4, "CompleteCommit"),
            (CompleteAbort, 5, "CompleteAbort"),
            (Dead, 6, "Dead"),
            (PrepareEpochFence, 7, "PrepareEpochFence"),
        ];
        for (state, id, name) in rows {
            assert_eq!((state.id(), state.name()), (id, name));
            assert_eq!(TransactionState::from_id(id), Some(state));
            assert_eq!(TransactionState::from_name(name), Some(state));
        }
        assert_eq!(TransactionState::from_id(8), None);
        assert_eq!(CompleteCommit.valid_previous_states(), [PrepareCommit]);
        assert!(
            PrepareAbort
                .valid_previous_states()
                .contains(&PrepareEpochFence)
        );
        let expirable: Vec<_> = TransactionState::ALL
            .into_iter()
            .filter(|state| state.is_expiration_allowed())
            .collect();
        assert_eq!(expirable, [Empty, CompleteCommit, CompleteAbort]);
    }

    #[test]
    fn a_whole_commit_moves_through_the_states() {
        let mut metadata = metadata();
        apply(&mut metadata, |m| {
            m.prepare_increment_producer_epoch(60_000, None, 1)
        });
        assert_eq!(metadata.producer_epoch, ProducerEpoch(0));
        apply(&mut metadata, |m| {
            m.prepare_add_partitions(&partitions(&[0]), 2, 0)
        });
        apply(&mut metadata, |m| {
            m.prepare_add_partitions(&partitions(&[1]), 3, 0)
        });
        assert_eq!(
            (metadata.state, metadata.start_timestamp_ms),
            (TransactionState::Ongoing, 2)
        );
        assert_eq!(metadata.partitions, partitions(&[0, 1]));
        apply(&mut metadata, |m| {
            m.prepare_abort_or_commit(TransactionState::PrepareCommit, 0, NO_PRODUCER_ID, 4, false)
        });
        let complete = apply(&mut metadata, |m| m.prepare_complete(5));
        assert_eq!(complete.state, TransactionState::CompleteCommit);
        assert!(metadata.partitions.is_empty());
        assert_eq!(
            (metadata.producer_epoch, metadata.last_update_timestamp_ms),
            (ProducerEpoch(0), 5)
        );
    }

    #[test]
    fn a_second_transition_waits_for_the_first() {
        let mut metadata = metadata();
        let target = metadata
            .prepare_increment_producer_epoch(60_000, None, 1)
            .unwrap();
        assert_eq!(
            metadata.prepare_add_partitions(&partitions(&[0]), 2, 0),
            Err(TransitionError::AlreadyPending {
                pending: TransactionState::Empty
            })
        );
        metadata.complete_transition(&target).unwrap();
        assert_eq!(
            metadata.complete_transition(&target),
            Err(TransitionError::NothingPending)
        );
    }

    #[test]
    fn the_expected_epoch_decides_bump_retry_or_fence() {
        let mut metadata = metadata();
        apply(&mut metadata, |m| {
            m.prepare_increment_producer_epoch(60_000, None, 1)
        });
        apply(&mut metadata, |m| {
            m.prepare_increment_producer_epoch(60_000, Some(ProducerEpoch(0)), 2)
        });
        assert_eq!(
            (metadata.producer_epoch, metadata.last_producer_epoch),
            (ProducerEpoch(1), ProducerEpoch(0))
        );
        // The same request again (its answer was lost): the same epoch.
        let retry = metadata
            .prepare_increment_producer_epoch(60_000, Some(ProducerEpoch(0)), 3)
            .unwrap();
        assert_eq!(retry.producer_epoch, ProducerEpoch(1));
        metadata.pending_state = None;
        assert_eq!(
            metadata.prepare_increment_producer_epoch(60_000, Some(ProducerEpoch(7)), 3),
            Err(TransitionError::ProducerFenced)
        );
    }

    #[test]
    fn invalid_transitions_are_refused() {
        let mut metadata = metadata();
        apply(&mut metadata, |m| {
            m.prepare_increment_producer_epoch(60_000, None, 1)
        });
        assert_eq!(
            metadata.prepare_abort_or_commit(
                TransactionState::PrepareCommit,
                0,
                NO_PRODUCER_ID,
                2,
                false
            ),
            Err(TransitionError::InvalidPreviousState {
                from: TransactionState::Empty,
                to: TransactionState::PrepareCommit
            })
        );
        assert_eq!(metadata.pending_state, None);
        metadata.producer_epoch = ProducerEpoch(i16::MAX - 1);
        assert_eq!(
            metadata.prepare_increment_producer_epoch(60_000, None, 2),
            Err(TransitionError::EpochExhausted(ProducerId(10)))
        );
        let target = metadata.prepare_dead().unwrap();
        assert_eq!(
            metadata.complete_transition(&target),
            Err(TransitionError::UnexpectedCompletion {
                state: TransactionState::Dead
            })
        );
    }

    #[test]
    fn a_failed_fence_is_not_bumped_twice() {
        let mut metadata = metadata();
        apply(&mut metadata, |m| {
            m.prepare_increment_producer_epoch(60_000, None, 1)
        });
        apply(&mut metadata, |m| {
            m.prepare_add_partitions(&partitions(&[0]), 2, 0)
        });
        assert_eq!(
            metadata
                .prepare_fence_producer_epoch()
                .unwrap()
                .producer_epoch,
            ProducerEpoch(1)
        );
        metadata.pending_state = None;
        metadata.has_failed_epoch_fence = true;
        assert_eq!(
            metadata
                .prepare_fence_producer_epoch()
                .unwrap()
                .producer_epoch,
            ProducerEpoch(0)
        );
    }

    #[test]
    fn rotation_starts_a_new_producer_id_at_epoch_0() {
        let mut metadata = metadata();
        metadata.producer_epoch = ProducerEpoch(i16::MAX - 1);
        let target = apply(&mut metadata, |m| {
            m.prepare_producer_id_rotation(ProducerId(11), 60_000, 1, true)
        });
        assert_eq!(
            (target.producer_id, target.producer_epoch),
            (ProducerId(11), ProducerEpoch(0))
        );
        assert_eq!(metadata.previous_producer_id, ProducerId(10));
        assert_eq!(metadata.last_producer_epoch, ProducerEpoch(i16::MAX - 1));
    }

    #[test]
    fn log_values_group_partitions_by_topic_and_read_back() {
        let mut metadata = metadata();
        apply(&mut metadata, |m| {
            m.prepare_increment_producer_epoch(60_000, None, 1)
        });
        let mut added = partitions(&[3, 1]);
        added.insert(TopicPartition::new("a", 0));
        let target = metadata.prepare_add_partitions(&added, 2, 0).unwrap();
        let value = target.to_log_value();
        let topics: Vec<_> = value
            .partitions
            .iter()
            .flatten()
            .map(|entry| (entry.topic.as_str(), entry.partition_ids.clone()))
            .collect();
        assert_eq!(topics, [("a", vec![0]), ("t", vec![1, 3])]);
        let loaded = TransactionMetadata::from_log_value("tx", &value);
        assert_eq!(loaded.partitions, added);
        assert_eq!(loaded.last_producer_epoch, ProducerEpoch::NONE);
        let empty = metadata.unchanged(TransactionState::Empty).to_log_value();
        assert_eq!(empty.partitions, None);
    }
}
