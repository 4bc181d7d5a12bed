//! The transaction coordinator for the transactional ids of one
//! `__transaction_state` partition: InitProducerId, AddPartitionsToTxn
//! (including KIP-890's verify-only form), AddOffsetsToTxn and EndTxn as
//! Kafka's `TransactionCoordinator` answers them (transactions v1).
//!
//! Each request checks the id's [`TransactionMetadata`], prepares a
//! transition and asks the runtime to persist it ([`Action::Persist`]); the
//! answer goes out ([`Action::Respond`]) only once the record is durable
//! (see [`TransactionCoordinator::on_persisted`] in `lifecycle`). Requests
//! that need no write are answered in the returned actions at once. Loading,
//! the callbacks, the timers and the admin views live in `lifecycle`.
//!
//! Lives on the shard that leads the partition; one instance per leader
//! epoch (the *coordinator epoch*), dropped when leadership moves.

use std::collections::{BTreeMap, BTreeSet};

use crate::protocol::errors::ErrorCode;
use crate::replica::producer_state::ProducerEpoch;
use crate::txn::config::TransactionConfig;
use crate::txn::records::{STRING_BYTES_MAX, TransactionLogKey, TransactionRecord, partition_for};
use crate::txn::state::{
    NO_PRODUCER_ID, TransactionMetadata, TransactionState, TransitMetadata, TransitionError,
    is_epoch_exhausted,
};
use crate::txn::{
    Action, InitProducerIdResult, MarkerWrite, Response, Token, TransactionResult, WriteId,
};
use crate::types::{ProducerId, TopicPartition};

/// The `__consumer_offsets` topic, whose partition AddOffsetsToTxn adds.
const OFFSETS_TOPIC_NAME: &str = crate::group::records::OFFSETS_TOPIC_NAME;

/// Hands out fresh producer ids (Kafka's `ProducerIdManager`); the runtime
/// owns the blocks they come from.
pub type ProducerIdAllocator<'a> = &'a mut dyn FnMut() -> Result<ProducerId, ErrorCode>;

/// An InitProducerId with a transactional id, any version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitProducerIdRequest {
    pub transactional_id: String,
    pub transaction_timeout_ms: i32,
    /// v3+ (KIP-360): the producer id and epoch the client had, when it is
    /// recovering rather than starting.
    pub expected: Option<(ProducerId, ProducerEpoch)>,
}

/// One transaction's partitions to add (AddPartitionsToTxn v0–3, or one
/// transaction of v4+).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddPartitionsRequest {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub partitions: Vec<TopicPartition>,
}

/// One transaction of an AddPartitionsToTxn v4+ (sent by brokers).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchedAddPartitions {
    pub token: Token,
    pub request: AddPartitionsRequest,
    /// KIP-890 part 1: only check that the partitions are in the
    /// transaction; change nothing.
    pub verify_only: bool,
}

/// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AddOffsetsRequest {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// `offsets_partition_for(group_id, offsets.topic.num.partitions)`.
    pub offsets_partition: i32,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndTxnRequest {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub result: TransactionResult,
}

/// Who asked for a transaction to end, so the outcome goes to the right place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum EndOrigin {
    /// EndTxn from the producer.
    Client(Token),
    /// InitProducerId found the transaction open: it is aborted with a
    /// bumped epoch, and the InitProducerId answered CONCURRENT_TRANSACTIONS.
    InitProducerIdFence(Token),
    /// The transaction outlived its timeout.
    Timeout,
}

/// What waits on a persisted record.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Purpose {
    InitProducerId(Token),
    AddPartitions {
        token: Token,
        offsets: bool,
    },
    EndTxn {
        result: TransactionResult,
        origin: EndOrigin,
        epoch_fence: bool,
    },
    /// The markers are written; this records CompleteCommit/CompleteAbort.
    Complete,
    /// The id expired; this is its tombstone.
    Expire,
}

/// A transition waiting for its record to be durable.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PendingWrite {
    pub transactional_id: String,
    pub target: TransitMetadata,
    pub purpose: Purpose,
}

/// Markers being written; `target` is the Complete* transition to persist
/// once they are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct MarkerJob {
    pub transactional_id: String,
    pub target: TransitMetadata,
}

/// The transactional ids of one `__transaction_state` partition.
#[derive(Debug)]
pub struct TransactionCoordinator {
    pub(crate) config: TransactionConfig,
    /// The `__transaction_state` partition this coordinator owns.
    pub(crate) partition: i32,
    /// The partition's leader epoch when this coordinator took it over.
    pub(crate) coordinator_epoch: i32,
    /// True until [`TransactionCoordinator::finish_loading`].
    pub(crate) loading: bool,
    pub(crate) transactions: BTreeMap<String, TransactionMetadata>,
    pub(crate) pending_writes: BTreeMap<WriteId, PendingWrite>,
    pub(crate) marker_writes: BTreeMap<WriteId, MarkerJob>,
    pub(crate) next_write_id: u64,
    pub(crate) next_abort_check_ms: i64,
    pub(crate) next_expiration_check_ms: i64,
}

impl TransactionCoordinator {
    /// A coordinator for `partition` at `coordinator_epoch`, loading: feed
    /// it the partition's records with `replay`, then `finish_loading`.
    /// Requests meanwhile answer COORDINATOR_LOAD_IN_PROGRESS.
    ///
    /// Panics if `config` is invalid or `partition` is not one of its
    /// partitions (both come from validated broker state).
    pub fn new(config: TransactionConfig, partition: i32, coordinator_epoch: i32) -> Self {
        assert!(config.validate().is_ok(), "invalid transaction config");
        assert!((0..config.state_log_num_partitions).contains(&partition));
        TransactionCoordinator {
            config,
            partition,
            coordinator_epoch,
            loading: true,
            transactions: BTreeMap::new(),
            pending_writes: BTreeMap::new(),
            marker_writes: BTreeMap::new(),
            next_write_id: 0,
            next_abort_check_ms: i64::MAX,
            next_expiration_check_ms: i64::MAX,
        }
    }

    pub fn config(&self) -> &TransactionConfig {
        &self.config
    }

    pub fn partition(&self) -> i32 {
        self.partition
    }

    pub fn coordinator_epoch(&self) -> i32 {
        self.coordinator_epoch
    }

    pub fn is_loading(&self) -> bool {
        self.loading
    }

    pub fn transaction(&self, transactional_id: &str) -> Option<&TransactionMetadata> {
        self.transactions.get(transactional_id)
    }

    pub fn transactions(&self) -> impl Iterator<Item = &TransactionMetadata> {
        self.transactions.values()
    }

    /// Why this coordinator cannot serve `transactional_id` now, if it
    /// cannot: the id must be non-empty, fit a Kafka string, hash to this
    /// partition, and the partition must be loaded.
    pub(crate) fn check_owned(&self, transactional_id: &str) -> Result<(), ErrorCode> {
        if transactional_id.is_empty() || transactional_id.len() > STRING_BYTES_MAX {
            return Err(ErrorCode::INVALID_REQUEST);
        }
        if self.loading {
            return Err(ErrorCode::COORDINATOR_LOAD_IN_PROGRESS);
        }
        if partition_for(transactional_id, self.config.state_log_num_partitions) != self.partition {
            return Err(ErrorCode::NOT_COORDINATOR);
        }
        Ok(())
    }

    pub(crate) fn allocate_write_id(&mut self) -> WriteId {
        let write_id = WriteId(self.next_write_id);
        self.next_write_id += 1;
        write_id
    }

    /// Asks the runtime to persist `target` (a tombstone for Dead) and
    /// remembers what waits on it.
    pub(crate) fn persist(
        &mut self,
        transactional_id: &str,
        target: TransitMetadata,
        purpose: Purpose,
        actions: &mut Vec<Action>,
    ) {
        // Only the transition the id is waiting on is ever written.
        debug_assert!(
            self.transactions
                .get(transactional_id)
                .is_some_and(|metadata| metadata.pending_state == Some(target.state)),
            "persisting a transition that is not pending"
        );
        let write_id = self.allocate_write_id();
        let key = TransactionLogKey {
            transactional_id: transactional_id.to_owned(),
        };
        let record = if target.state == TransactionState::Dead {
            TransactionRecord::Tombstone(key)
        } else {
            TransactionRecord::Value {
                key,
                value: target.to_log_value(),
                version: self.config.log_value_version(),
            }
        };
        actions.push(Action::Persist { write_id, record });
        let pending = PendingWrite {
            transactional_id: transactional_id.to_owned(),
            target,
            purpose,
        };
        self.pending_writes.insert(write_id, pending);
    }

    /// Asks the runtime to write `result`'s markers for the transaction
    /// whose Prepare* is durable; `target` is its prepared completion.
    pub(crate) fn write_markers(
        &mut self,
        transactional_id: &str,
        target: TransitMetadata,
        result: TransactionResult,
        partitions: Vec<TopicPartition>,
        actions: &mut Vec<Action>,
    ) {
        debug_assert!(matches!(
            (target.state, result),
            (TransactionState::CompleteCommit, TransactionResult::Commit)
                | (TransactionState::CompleteAbort, TransactionResult::Abort)
        ));
        let write_id = self.allocate_write_id();
        let markers = MarkerWrite {
            transactional_id: transactional_id.to_owned(),
            producer_id: target.producer_id,
            producer_epoch: target.producer_epoch,
            coordinator_epoch: self.coordinator_epoch,
            result,
            partitions,
        };
        actions.push(Action::WriteMarkers { write_id, markers });
        let job = MarkerJob {
            transactional_id: transactional_id.to_owned(),
            target,
        };
        self.marker_writes.insert(write_id, job);
    }
}

fn respond(token: Token, response: Response) -> Vec<Action> {
    vec![Action::Respond { token, response }]
}

/// A transition Kafka refuses with an exception answers UNKNOWN_SERVER_ERROR,
/// except the fenced epoch, which is the client's fault.
fn transition_error(error: TransitionError) -> ErrorCode {
    match error {
        TransitionError::ProducerFenced => ErrorCode::PRODUCER_FENCED,
        _ => ErrorCode::UNKNOWN_SERVER_ERROR,
    }
}

impl TransactionCoordinator {
    /// Handles an InitProducerId with a transactional id. A new id gets a
    /// producer id from `allocate`; an idle one the next epoch; an open
    /// transaction is aborted first (with a bumped epoch that fences its
    /// producer) and the request answered CONCURRENT_TRANSACTIONS so the
    /// client retries once the abort is through.
    pub fn init_producer_id(
        &mut self,
        now_ms: i64,
        token: Token,
        request: &InitProducerIdRequest,
        allocate: ProducerIdAllocator<'_>,
    ) -> Vec<Action> {
        let fail = |error| {
            respond(
                token,
                Response::InitProducerId(InitProducerIdResult::failed(error)),
            )
        };
        let id = request.transactional_id.as_str();
        if id.is_empty() {
            return fail(ErrorCode::INVALID_REQUEST);
        }
        if !self.config.is_valid_timeout(request.transaction_timeout_ms) {
            return fail(ErrorCode::INVALID_TRANSACTION_TIMEOUT);
        }
        if let Err(error) = self.check_owned(id) {
            return fail(error);
        }
        if !self.transactions.contains_key(id) {
            let producer_id = match allocate() {
                Ok(producer_id) => producer_id,
                Err(error) => return fail(error),
            };
            let created =
                TransactionMetadata::new(id, producer_id, request.transaction_timeout_ms, now_ms);
            self.transactions.insert(id.to_owned(), created);
        }
        let target = match self.prepare_init(now_ms, request, allocate) {
            Ok(target) => target,
            Err(error) => return fail(error),
        };
        let mut actions = Vec::new();
        if target.state == TransactionState::PrepareEpochFence {
            let end = EndTxnRequest {
                transactional_id: id.to_owned(),
                producer_id: target.producer_id,
                producer_epoch: target.producer_epoch,
                result: TransactionResult::Abort,
            };
            let origin = EndOrigin::InitProducerIdFence(token);
            if let Err(error) = self.end_transaction(now_ms, &end, origin, &mut actions) {
                return fail(error);
            }
            return actions;
        }
        self.persist(id, target, Purpose::InitProducerId(token), &mut actions);
        actions
    }

    /// Kafka's `prepareInitProducerIdTransit`.
    fn prepare_init(
        &mut self,
        now_ms: i64,
        request: &InitProducerIdRequest,
        allocate: ProducerIdAllocator<'_>,
    ) -> Result<TransitMetadata, ErrorCode> {
        let Some(metadata) = self.transactions.get_mut(&request.transactional_id) else {
            return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
        };
        if metadata.pending_transition_in_progress() {
            return Err(ErrorCode::CONCURRENT_TRANSACTIONS);
        }
        // KIP-360: a recovering producer must be the current one, or one
        // whose epochs ran out and whose rotation answer was lost.
        let valid_expected = |(producer_id, epoch): (ProducerId, ProducerEpoch)| {
            metadata.producer_epoch == ProducerEpoch::NONE
                || producer_id == metadata.producer_id
                || (producer_id == metadata.previous_producer_id && is_epoch_exhausted(epoch))
        };
        if !request.expected.is_none_or(valid_expected) {
            return Err(ErrorCode::PRODUCER_FENCED);
        }
        let timeout_ms = request.transaction_timeout_ms;
        let expected_epoch = request.expected.map(|(_, epoch)| epoch);
        let result = match metadata.state {
            TransactionState::PrepareAbort | TransactionState::PrepareCommit => {
                return Err(ErrorCode::CONCURRENT_TRANSACTIONS);
            }
            TransactionState::Empty
            | TransactionState::CompleteAbort
            | TransactionState::CompleteCommit => {
                let rotate = metadata.is_producer_epoch_exhausted()
                    && expected_epoch.is_none_or(|epoch| epoch == metadata.producer_epoch);
                if rotate {
                    let new_producer_id = allocate()?;
                    metadata.prepare_producer_id_rotation(
                        new_producer_id,
                        timeout_ms,
                        now_ms,
                        request.expected.is_some(),
                    )
                } else {
                    metadata.prepare_increment_producer_epoch(timeout_ms, expected_epoch, now_ms)
                }
            }
            // The open transaction is aborted first; the bumped epoch is
            // never handed out, the retry bumps once more.
            TransactionState::Ongoing => metadata.prepare_fence_producer_epoch(),
            TransactionState::Dead | TransactionState::PrepareEpochFence => {
                return Err(ErrorCode::UNKNOWN_SERVER_ERROR);
            }
        };
        result.map_err(transition_error)
    }

    /// Handles AddPartitionsToTxn for one transaction (v0–3, or one
    /// non-verifying transaction of v4+).
    pub fn add_partitions(
        &mut self,
        now_ms: i64,
        token: Token,
        request: &AddPartitionsRequest,
    ) -> Vec<Action> {
        let partitions: BTreeSet<TopicPartition> = request.partitions.iter().cloned().collect();
        self.add_to_transaction(now_ms, token, request, partitions, false)
    }

    /// Handles AddOffsetsToTxn: the group's offsets partition joins the
    /// transaction, so TxnOffsetCommit's offsets get its markers.
    pub fn add_offsets(
        &mut self,
        now_ms: i64,
        token: Token,
        request: &AddOffsetsRequest,
    ) -> Vec<Action> {
        let offsets = TopicPartition::new(OFFSETS_TOPIC_NAME, request.offsets_partition);
        let add = AddPartitionsRequest {
            transactional_id: request.transactional_id.clone(),
            producer_id: request.producer_id,
            producer_epoch: request.producer_epoch,
            partitions: vec![offsets.clone()],
        };
        self.add_to_transaction(now_ms, token, &add, BTreeSet::from([offsets]), true)
    }

    /// Handles AddPartitionsToTxn v4+: each transaction is verified or
    /// added on its own and answered under its own token.
    pub fn add_partitions_batch(
        &mut self,
        now_ms: i64,
        batch: &[BatchedAddPartitions],
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        for entry in batch {
            if entry.verify_only {
                let results = self.verify_partitions(&entry.request);
                actions.extend(respond(entry.token, Response::Verified(results)));
            } else {
                actions.extend(self.add_partitions(now_ms, entry.token, &entry.request));
            }
        }
        actions
    }

    /// KIP-890 part 1: whether each partition is already in the transaction
    /// (a partition leader asks before accepting transactional records).
    /// Changes nothing.
    pub fn verify_partitions(
        &self,
        request: &AddPartitionsRequest,
    ) -> Vec<(TopicPartition, ErrorCode)> {
        let all = |error: ErrorCode| {
            request
                .partitions
                .iter()
                .map(|partition| (partition.clone(), error))
                .collect()
        };
        if let Err(error) = self.check_owned(&request.transactional_id) {
            return all(error);
        }
        let Some(metadata) = self.transactions.get(&request.transactional_id) else {
            return all(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        if metadata.producer_id != request.producer_id {
            return all(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        }
        if metadata.producer_epoch != request.producer_epoch {
            return all(ErrorCode::PRODUCER_FENCED);
        }
        if matches!(
            metadata.state,
            TransactionState::PrepareCommit | TransactionState::PrepareAbort
        ) {
            return all(ErrorCode::CONCURRENT_TRANSACTIONS);
        }
        request
            .partitions
            .iter()
            .map(|partition| match metadata.partitions.contains(partition) {
                true => (partition.clone(), ErrorCode::NONE),
                false => (partition.clone(), ErrorCode::TRANSACTION_ABORTABLE),
            })
            .collect()
    }

    fn add_to_transaction(
        &mut self,
        now_ms: i64,
        token: Token,
        request: &AddPartitionsRequest,
        partitions: BTreeSet<TopicPartition>,
        offsets: bool,
    ) -> Vec<Action> {
        let answer = |error| match offsets {
            true => respond(token, Response::AddOffsets(error)),
            false => respond(token, Response::AddPartitions(error)),
        };
        let id = request.transactional_id.as_str();
        if let Err(error) = self.check_owned(id) {
            return answer(error);
        }
        let Some(metadata) = self.transactions.get_mut(id) else {
            return answer(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        let error = if metadata.producer_id != request.producer_id {
            ErrorCode::INVALID_PRODUCER_ID_MAPPING
        } else if metadata.producer_epoch != request.producer_epoch {
            ErrorCode::PRODUCER_FENCED
        } else if metadata.pending_transition_in_progress()
            || matches!(
                metadata.state,
                TransactionState::PrepareCommit | TransactionState::PrepareAbort
            )
        {
            ErrorCode::CONCURRENT_TRANSACTIONS
        } else if metadata.state == TransactionState::Ongoing
            && partitions.is_subset(&metadata.partitions)
        {
            // Already there: nothing to write.
            ErrorCode::NONE
        } else {
            match metadata.prepare_add_partitions(&partitions, now_ms, 0) {
                Ok(target) => {
                    let mut actions = Vec::new();
                    self.persist(
                        id,
                        target,
                        Purpose::AddPartitions { token, offsets },
                        &mut actions,
                    );
                    return actions;
                }
                Err(error) => transition_error(error),
            }
        };
        answer(error)
    }

    /// Handles EndTxn from the producer: PrepareCommit/PrepareAbort is
    /// persisted, the client answered, and the markers written after.
    pub fn end_txn(&mut self, now_ms: i64, token: Token, request: &EndTxnRequest) -> Vec<Action> {
        let mut actions = Vec::new();
        if let Err(error) =
            self.end_transaction(now_ms, request, EndOrigin::Client(token), &mut actions)
        {
            return respond(token, Response::EndTxn(error));
        }
        actions
    }

    /// Kafka's `endTransactionWithTV1` up to the append: `Ok` with the
    /// persist (or an immediate answer) in `actions`, or the error to answer.
    pub(crate) fn end_transaction(
        &mut self,
        now_ms: i64,
        request: &EndTxnRequest,
        origin: EndOrigin,
        actions: &mut Vec<Action>,
    ) -> Result<(), ErrorCode> {
        self.check_owned(&request.transactional_id)?;
        let id = request.transactional_id.as_str();
        let Some(metadata) = self.transactions.get_mut(id) else {
            return Err(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
        };
        let prepared = prepare_end(metadata, now_ms, request, origin);
        if prepared.is_err() && metadata.pending_state == Some(TransactionState::PrepareEpochFence)
        {
            // The fence goes nowhere: do not leave it blocking the id.
            metadata.pending_state = None;
        }
        match prepared? {
            Some((target, epoch_fence)) => {
                let purpose = Purpose::EndTxn {
                    result: request.result,
                    origin,
                    epoch_fence,
                };
                self.persist(id, target, purpose, actions);
            }
            None => match origin {
                EndOrigin::Client(token) => {
                    actions.extend(respond(token, Response::EndTxn(ErrorCode::NONE)))
                }
                EndOrigin::InitProducerIdFence(token) => {
                    let result = InitProducerIdResult::failed(ErrorCode::CONCURRENT_TRANSACTIONS);
                    actions.extend(respond(token, Response::InitProducerId(result)));
                }
                EndOrigin::Timeout => {}
            },
        }
        Ok(())
    }
}

/// The checks and transition of an EndTxn: `Some((target, epoch_fence))` to
/// persist, `None` when it is already done (a retried EndTxn).
fn prepare_end(
    metadata: &mut TransactionMetadata,
    now_ms: i64,
    request: &EndTxnRequest,
    origin: EndOrigin,
) -> Result<Option<(TransitMetadata, bool)>, ErrorCode> {
    let from_client = matches!(origin, EndOrigin::Client(_));
    let commit = request.result == TransactionResult::Commit;
    if metadata.producer_id != request.producer_id {
        return Err(ErrorCode::INVALID_PRODUCER_ID_MAPPING);
    }
    // A client must match exactly; a fence carries the bumped epoch.
    if (from_client && request.producer_epoch != metadata.producer_epoch)
        || request.producer_epoch < metadata.producer_epoch
    {
        return Err(ErrorCode::PRODUCER_FENCED);
    }
    let fencing = metadata.pending_state == Some(TransactionState::PrepareEpochFence);
    if metadata.pending_transition_in_progress() && !fencing {
        return Err(ErrorCode::CONCURRENT_TRANSACTIONS);
    }
    match (metadata.state, commit) {
        (TransactionState::Ongoing, _) => {
            let state = match commit {
                true => TransactionState::PrepareCommit,
                false => TransactionState::PrepareAbort,
            };
            let epoch_fence = !commit && fencing;
            if epoch_fence {
                // Kafka applies the fence's epoch before the abort is durable:
                // the fenced producer is refused from now on.
                metadata.pending_state = None;
                metadata.producer_epoch = request.producer_epoch;
                metadata.last_producer_epoch = ProducerEpoch::NONE;
            }
            let target = metadata
                .prepare_abort_or_commit(state, 0, NO_PRODUCER_ID, now_ms, false)
                .map_err(transition_error)?;
            Ok(Some((target, epoch_fence)))
        }
        (TransactionState::CompleteCommit, true) | (TransactionState::CompleteAbort, false) => {
            Ok(None)
        }
        (TransactionState::PrepareCommit, true) | (TransactionState::PrepareAbort, false) => {
            Err(ErrorCode::CONCURRENT_TRANSACTIONS)
        }
        (TransactionState::Dead | TransactionState::PrepareEpochFence, _) => {
            Err(ErrorCode::UNKNOWN_SERVER_ERROR)
        }
        _ => Err(ErrorCode::INVALID_TXN_STATE),
    }
}
