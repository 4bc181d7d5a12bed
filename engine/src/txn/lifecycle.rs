//! The coordinator's other inputs: the outcomes of the writes it asked for
//! (a record persisted, markers written), loading its partition by replay,
//! the timers (abort timed-out transactions, expire idle ids), and the admin
//! views (DescribeTransactions, ListTransactions, KIP-664).
//!
//! Split from `coordinator` so each file stays readable; both are one
//! `impl TransactionCoordinator`.

use std::collections::BTreeMap;

use crate::protocol::errors::ErrorCode;
use crate::replica::producer_state::ProducerEpoch;
use crate::txn::coordinator::{
    EndOrigin, EndTxnRequest, MarkerJob, PendingWrite, Purpose, TransactionCoordinator,
};
use crate::txn::records::{RecordsError, TransactionRecord};
use crate::txn::state::{NO_PRODUCER_ID, TransactionMetadata, TransactionState};
use crate::txn::{
    Action, InitProducerIdResult, MarkerOutcome, Response, TransactionResult, WriteId,
    coordinator_error_for_append,
};
use crate::types::ProducerId;

/// DescribeTransactions' view of one id.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionDescription {
    pub transactional_id: String,
    pub error: ErrorCode,
    /// Kafka's state name; empty on error.
    pub state: &'static str,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub timeout_ms: i32,
    pub start_timestamp_ms: i64,
    /// Each topic with its partitions in the transaction.
    pub topics: Vec<(String, Vec<i32>)>,
}

/// One id as ListTransactions shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionListing {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub state: TransactionState,
}

/// ListTransactions' answer for this coordinator's partition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionList {
    pub error: ErrorCode,
    /// State filters that name no state (answered, not refused, as Kafka does).
    pub unknown_state_filters: Vec<String>,
    pub transactions: Vec<TransactionListing>,
}

/// ListTransactions v2's `TransactionalIdPattern` (KIP-1152): a regular
/// expression an id must match whole, as Java's `Matcher.matches` does.
/// Rust's regex syntax is close to Java's for the patterns ids need
/// (classes, alternation, repetition) but has no look-around or
/// back-references; a pattern using them is refused as invalid.
#[derive(Clone, Debug)]
pub struct TransactionalIdPattern(regex_automata::meta::Regex);

impl TransactionalIdPattern {
    /// The pattern, or INVALID_REGULAR_EXPRESSION.
    pub fn new(pattern: &str) -> Result<TransactionalIdPattern, ErrorCode> {
        regex_automata::meta::Regex::new(&format!("^(?:{pattern})$"))
            .map(TransactionalIdPattern)
            .map_err(|_| ErrorCode::INVALID_REGULAR_EXPRESSION)
    }

    pub fn matches(&self, transactional_id: &str) -> bool {
        self.0.is_match(transactional_id)
    }
}

/// ListTransactions' filters; an empty list or an absent value matches all.
#[derive(Clone, Debug, Default)]
pub struct ListFilters {
    pub states: Vec<String>,
    pub producer_ids: Vec<ProducerId>,
    /// v1+: only transactions running longer than this (negative: all).
    pub duration_ms: i64,
    /// v2+.
    pub pattern: Option<TransactionalIdPattern>,
}

impl TransactionCoordinator {
    /// The outcome of an [`Action::Persist`]: `Err` carries the append's
    /// error (mapped to what clients are told as Kafka maps it). Applies the
    /// transition and answers whatever waited on it.
    pub fn on_persisted(
        &mut self,
        now_ms: i64,
        write_id: WriteId,
        result: Result<(), ErrorCode>,
    ) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(pending) = self.pending_writes.remove(&write_id) else {
            return actions;
        };
        match result {
            Ok(()) => self.persisted(now_ms, pending, &mut actions),
            Err(error) => {
                self.persist_failed(pending, coordinator_error_for_append(error), &mut actions)
            }
        }
        actions
    }

    fn persisted(&mut self, now_ms: i64, pending: PendingWrite, actions: &mut Vec<Action>) {
        let id = pending.transactional_id.as_str();
        let Some(metadata) = self.transactions.get_mut(id) else {
            return;
        };
        if pending.purpose == Purpose::Expire {
            let expected = metadata.pending_state == Some(TransactionState::Dead)
                && metadata.producer_epoch == pending.target.producer_epoch;
            if expected {
                self.transactions.remove(id);
            } else {
                metadata.pending_state = None;
            }
            return;
        }
        if metadata.complete_transition(&pending.target).is_err() {
            // A durable record the metadata cannot follow: Kafka fails the
            // request (IllegalStateException); the id is usable again.
            metadata.pending_state = None;
            answer_failure(pending.purpose, ErrorCode::UNKNOWN_SERVER_ERROR, actions);
            return;
        }
        match pending.purpose {
            Purpose::InitProducerId(token) => {
                let result = InitProducerIdResult {
                    error: ErrorCode::NONE,
                    producer_id: pending.target.producer_id,
                    producer_epoch: pending.target.producer_epoch,
                };
                actions.push(Action::Respond {
                    token,
                    response: Response::InitProducerId(result),
                });
            }
            Purpose::AddPartitions { .. } => {
                answer_failure(pending.purpose, ErrorCode::NONE, actions)
            }
            Purpose::EndTxn { result, origin, .. } => {
                self.begin_markers(now_ms, id, result, origin, actions);
            }
            Purpose::Complete | Purpose::Expire => {}
        }
    }

    /// The Prepare* record is durable: the client is answered and the
    /// markers go out; the completion is prepared now so nothing else
    /// starts meanwhile.
    fn begin_markers(
        &mut self,
        now_ms: i64,
        id: &str,
        result: TransactionResult,
        origin: EndOrigin,
        actions: &mut Vec<Action>,
    ) {
        let Some(metadata) = self.transactions.get_mut(id) else {
            return;
        };
        let partitions: Vec<_> = metadata.partitions.iter().cloned().collect();
        let Ok(target) = metadata.prepare_complete(now_ms) else {
            answer_end(origin, ErrorCode::CONCURRENT_TRANSACTIONS, actions);
            return;
        };
        answer_end(origin, ErrorCode::NONE, actions);
        self.write_markers(id, target, result, partitions, actions);
    }

    fn persist_failed(
        &mut self,
        pending: PendingWrite,
        error: ErrorCode,
        actions: &mut Vec<Action>,
    ) {
        let id = pending.transactional_id.clone();
        let Some(metadata) = self.transactions.get_mut(&id) else {
            answer_failure(pending.purpose, error, actions);
            return;
        };
        if pending.purpose == Purpose::Complete && error == ErrorCode::COORDINATOR_NOT_AVAILABLE {
            // The markers are out; only the completion is missing. Retry it
            // with the transition still pending, as Kafka's marker manager does.
            self.persist(&id, pending.target, Purpose::Complete, actions);
            return;
        }
        metadata.pending_state = None;
        if let Purpose::EndTxn {
            epoch_fence: true, ..
        } = pending.purpose
        {
            metadata.has_failed_epoch_fence = true;
        }
        answer_failure(pending.purpose, error, actions);
    }

    /// The outcome of an [`Action::WriteMarkers`]: once every participant has
    /// its marker, the completion is persisted.
    pub fn on_markers_written(&mut self, write_id: WriteId, outcome: MarkerOutcome) -> Vec<Action> {
        let mut actions = Vec::new();
        let Some(MarkerJob {
            transactional_id,
            target,
        }) = self.marker_writes.remove(&write_id)
        else {
            return actions;
        };
        let current = self
            .transactions
            .get(&transactional_id)
            .is_some_and(|metadata| metadata.pending_state == Some(target.state));
        if outcome == MarkerOutcome::Written && current {
            self.persist(&transactional_id, target, Purpose::Complete, &mut actions);
        }
        actions
    }
}

/// Answers what waited on a write with `error` (NONE for AddPartitions'
/// success).
fn answer_failure(purpose: Purpose, error: ErrorCode, actions: &mut Vec<Action>) {
    let (token, response) = match purpose {
        Purpose::InitProducerId(token) => (
            token,
            Response::InitProducerId(InitProducerIdResult::failed(error)),
        ),
        Purpose::AddPartitions {
            token,
            offsets: true,
        } => (token, Response::AddOffsets(error)),
        Purpose::AddPartitions {
            token,
            offsets: false,
        } => (token, Response::AddPartitions(error)),
        Purpose::EndTxn { origin, .. } => return answer_end(origin, error, actions),
        Purpose::Complete | Purpose::Expire => return,
    };
    actions.push(Action::Respond { token, response });
}

/// Answers the origin of an EndTxn: the client with `error`, a fencing
/// InitProducerId with CONCURRENT_TRANSACTIONS (retry once aborted) or its
/// error, a timeout nobody.
fn answer_end(origin: EndOrigin, error: ErrorCode, actions: &mut Vec<Action>) {
    let (token, response) = match origin {
        EndOrigin::Client(token) => (token, Response::EndTxn(error)),
        EndOrigin::InitProducerIdFence(token) => {
            let error = match error {
                ErrorCode::NONE => ErrorCode::CONCURRENT_TRANSACTIONS,
                error => error,
            };
            (
                token,
                Response::InitProducerId(InitProducerIdResult::failed(error)),
            )
        }
        EndOrigin::Timeout => return,
    };
    actions.push(Action::Respond { token, response });
}

impl TransactionCoordinator {
    /// Loads one record of the partition (in log order): a value replaces
    /// the id's metadata, a tombstone removes it, an unknown key version is
    /// skipped as Kafka skips it. A record that does not decode is an error
    /// and changes nothing; the runtime decides whether to go on.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), RecordsError> {
        let record = TransactionRecord::decode(key, value)?;
        self.replay_record(record);
        Ok(())
    }

    /// [`TransactionCoordinator::replay`] for a decoded record.
    pub fn replay_record(&mut self, record: TransactionRecord) {
        debug_assert!(self.loading, "records are replayed only while loading");
        match record {
            TransactionRecord::Value { key, value, .. } => {
                let metadata = TransactionMetadata::from_log_value(&key.transactional_id, &value);
                self.transactions.insert(key.transactional_id, metadata);
            }
            TransactionRecord::Tombstone(key) => {
                self.transactions.remove(&key.transactional_id);
            }
            TransactionRecord::UnknownKey { .. } => {}
        }
    }

    /// Ends loading: requests are served from now on, and every
    /// transaction found in PrepareCommit/PrepareAbort has its markers
    /// written again, so a crash between the two phases still completes.
    pub fn finish_loading(&mut self, now_ms: i64) -> Vec<Action> {
        self.loading = false;
        self.next_abort_check_ms =
            now_ms.saturating_add(self.config.abort_timed_out_transaction_cleanup_interval_ms);
        self.next_expiration_check_ms =
            now_ms.saturating_add(self.config.remove_expired_transaction_cleanup_interval_ms);
        let mut actions = Vec::new();
        let preparing: Vec<(String, TransactionResult)> = self
            .transactions
            .values()
            .filter_map(|metadata| {
                match metadata.state {
                    TransactionState::PrepareCommit => Some(TransactionResult::Commit),
                    TransactionState::PrepareAbort => Some(TransactionResult::Abort),
                    _ => None,
                }
                .map(|result| (metadata.transactional_id.clone(), result))
            })
            .collect();
        for (id, result) in preparing {
            let Some(metadata) = self.transactions.get_mut(&id) else {
                continue;
            };
            let partitions: Vec<_> = metadata.partitions.iter().cloned().collect();
            if let Ok(target) = metadata.prepare_complete(now_ms) {
                self.write_markers(&id, target, result, partitions, &mut actions);
            }
        }
        actions
    }

    /// Runs the timers due at `now_ms`: open transactions past their
    /// timeout are aborted with a bumped epoch (fencing their producer), and
    /// idle ids past `transactional.id.expiration.ms` get tombstones.
    pub fn tick(&mut self, now_ms: i64) -> Vec<Action> {
        let mut actions = Vec::new();
        if self.loading {
            return actions;
        }
        if now_ms >= self.next_abort_check_ms {
            self.abort_timed_out_transactions(now_ms, &mut actions);
            self.next_abort_check_ms =
                now_ms.saturating_add(self.config.abort_timed_out_transaction_cleanup_interval_ms);
        }
        if now_ms >= self.next_expiration_check_ms {
            self.expire_transactional_ids(now_ms, &mut actions);
            self.next_expiration_check_ms =
                now_ms.saturating_add(self.config.remove_expired_transaction_cleanup_interval_ms);
        }
        actions
    }

    /// When [`TransactionCoordinator::tick`] next has something to check.
    pub fn next_deadline_ms(&self) -> Option<i64> {
        (!self.loading).then(|| self.next_abort_check_ms.min(self.next_expiration_check_ms))
    }

    /// Kafka's `abortTimedOutTransactions`.
    fn abort_timed_out_transactions(&mut self, now_ms: i64, actions: &mut Vec<Action>) {
        let timed_out: Vec<String> = self
            .transactions
            .values()
            .filter(|metadata| {
                !metadata.pending_transition_in_progress()
                    && metadata.state == TransactionState::Ongoing
                    && metadata
                        .start_timestamp_ms
                        .saturating_add(metadata.timeout_ms.into())
                        < now_ms
            })
            .map(|metadata| metadata.transactional_id.clone())
            .collect();
        for id in timed_out {
            let Some(metadata) = self.transactions.get_mut(&id) else {
                continue;
            };
            let Ok(fence) = metadata.prepare_fence_producer_epoch() else {
                continue;
            };
            let request = EndTxnRequest {
                transactional_id: id,
                producer_id: fence.producer_id,
                producer_epoch: fence.producer_epoch,
                result: TransactionResult::Abort,
            };
            // An abort that cannot start now is tried again next time.
            let _ = self.end_transaction(now_ms, &request, EndOrigin::Timeout, actions);
        }
    }

    /// Kafka's `removeExpiredTransactionalIds`: idle ids get tombstones and
    /// are forgotten once those are durable.
    fn expire_transactional_ids(&mut self, now_ms: i64, actions: &mut Vec<Action>) {
        let horizon_ms = now_ms.saturating_sub(self.config.transactional_id_expiration_ms);
        let expired: Vec<String> = self
            .transactions
            .values()
            .filter(|metadata| {
                !metadata.pending_transition_in_progress()
                    && metadata.state.is_expiration_allowed()
                    && metadata.last_update_timestamp_ms <= horizon_ms
            })
            .map(|metadata| metadata.transactional_id.clone())
            .collect();
        for id in expired {
            let Some(metadata) = self.transactions.get_mut(&id) else {
                continue;
            };
            if let Ok(target) = metadata.prepare_dead() {
                self.persist(&id, target, Purpose::Expire, actions);
            }
        }
    }
}

impl TransactionCoordinator {
    /// DescribeTransactions for one id.
    pub fn describe(&self, transactional_id: &str) -> TransactionDescription {
        let mut description = TransactionDescription {
            transactional_id: transactional_id.to_owned(),
            error: ErrorCode::NONE,
            state: "",
            producer_id: NO_PRODUCER_ID,
            producer_epoch: ProducerEpoch::NONE,
            timeout_ms: 0,
            start_timestamp_ms: -1,
            topics: Vec::new(),
        };
        let found = self.check_owned(transactional_id).and_then(|()| {
            self.transactions
                .get(transactional_id)
                .filter(|metadata| metadata.state != TransactionState::Dead)
                .ok_or(ErrorCode::TRANSACTIONAL_ID_NOT_FOUND)
        });
        let metadata = match found {
            Ok(metadata) => metadata,
            Err(error) => {
                description.error = error;
                return description;
            }
        };
        let mut topics: BTreeMap<String, Vec<i32>> = BTreeMap::new();
        for partition in &metadata.partitions {
            topics
                .entry(partition.topic.clone())
                .or_default()
                .push(partition.partition.0);
        }
        description.state = metadata.state.name();
        description.producer_id = metadata.producer_id;
        description.producer_epoch = metadata.producer_epoch;
        description.timeout_ms = metadata.timeout_ms;
        description.start_timestamp_ms = metadata.start_timestamp_ms;
        description.topics = topics.into_iter().collect();
        description
    }

    /// ListTransactions (KIP-664) over this partition's ids at `now_ms`,
    /// filtered as Kafka's `TransactionStateManager` filters: by state names,
    /// producer ids, how long they have run (KIP-994) and an id pattern
    /// (KIP-1152). Dead ids are being removed and never listed.
    pub fn list(&self, now_ms: i64, filters: &ListFilters) -> TransactionList {
        let mut list = TransactionList {
            error: ErrorCode::NONE,
            unknown_state_filters: Vec::new(),
            transactions: Vec::new(),
        };
        if self.loading {
            list.error = ErrorCode::COORDINATOR_LOAD_IN_PROGRESS;
            return list;
        }
        let mut states = Vec::new();
        for name in &filters.states {
            match TransactionState::from_name(name) {
                Some(state) => states.push(state),
                None => list.unknown_state_filters.push(name.clone()),
            }
        }
        list.transactions = self
            .transactions
            .values()
            .filter(|metadata| {
                metadata.state != TransactionState::Dead
                    && (filters.producer_ids.is_empty()
                        || filters.producer_ids.contains(&metadata.producer_id))
                    && (filters.states.is_empty() || states.contains(&metadata.state))
                    && (filters.duration_ms < 0
                        || now_ms.saturating_sub(metadata.start_timestamp_ms) > filters.duration_ms)
                    && filters
                        .pattern
                        .as_ref()
                        .is_none_or(|pattern| pattern.matches(&metadata.transactional_id))
            })
            .map(|metadata| TransactionListing {
                transactional_id: metadata.transactional_id.clone(),
                producer_id: metadata.producer_id,
                state: metadata.state,
            })
            .collect();
        list
    }
}
