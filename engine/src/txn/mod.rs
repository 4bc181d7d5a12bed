//! Transactions: the coordinator state machine for the transactional ids of
//! one `__transaction_state` partition, the records it persists there, and
//! the per-id state machine (Kafka's `TransactionCoordinator`,
//! `TransactionStateManager`, `TransactionMetadata` and `TransactionLog`).
//!
//! The coordinator for transactional id T is hosted by the shard that leads
//! partition `abs(javaStringHash(T)) % transaction.state.log.num.partitions`
//! of `__transaction_state`; this module decides, that shard performs the IO.
//! Requests and the time come in as values and [`Action`]s go out: persist a
//! record and report back ([`coordinator::TransactionCoordinator::on_persisted`]),
//! write COMMIT/ABORT markers to the participants and report back
//! ([`coordinator::TransactionCoordinator::on_markers_written`]), answer a
//! request. Nothing changes until the record saying so is durable, so a
//! coordinator that loads the partition after a crash (by replaying its
//! records) resumes exactly where the durable state was, including the
//! second phase of a two-phase commit.
//!
//! The protocol is Kafka's transactions v1 (clients' EndTxn v0–4, one epoch
//! per producer session); the log format is Kafka 4's.

pub mod config;
pub mod coordinator;
mod lifecycle;
pub mod records;
pub mod state;

#[cfg(test)]
mod tests;

pub use self::lifecycle::{
    ListFilters, TransactionDescription, TransactionList, TransactionListing,
    TransactionalIdPattern,
};

use crate::protocol::errors::ErrorCode;
use crate::replica::producer_state::ProducerEpoch;
use crate::txn::records::TransactionRecord;
use crate::types::{ProducerId, TopicPartition};

/// `NOT_ENOUGH_REPLICAS` (19): missing from `protocol::errors`; an append to
/// `__transaction_state` can fail with it and the coordinator maps it.
pub const NOT_ENOUGH_REPLICAS: ErrorCode = ErrorCode(19);
/// `NOT_ENOUGH_REPLICAS_AFTER_APPEND` (20): missing from `protocol::errors`,
/// as above.
pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode = ErrorCode(20);

/// A request the coordinator answers (now or later); the runtime maps it to
/// its waiting caller.
pub type Token = u64;

/// Names one write the coordinator asked for, so its outcome finds the
/// transition that waits on it (and a stale outcome finds nothing).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WriteId(pub u64);

/// How a transaction ends (Kafka's `TransactionResult`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TransactionResult {
    Commit,
    Abort,
}

/// COMMIT or ABORT control markers to append to every partition of a
/// transaction (Kafka's WriteTxnMarkers request, one entry).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MarkerWrite {
    pub transactional_id: String,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// The leader epoch of the coordinator's `__transaction_state`
    /// partition; partition leaders refuse markers from an older one.
    pub coordinator_epoch: i32,
    pub result: TransactionResult,
    pub partitions: Vec<TopicPartition>,
}

/// What became of a [`MarkerWrite`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkerOutcome {
    /// Every partition has its marker (or no longer exists). Retriable
    /// errors (no leader, timeouts) are retried by the runtime, not reported.
    Written,
    /// A partition refused the markers as coming from a stale coordinator
    /// (TRANSACTION_COORDINATOR_FENCED or INVALID_PRODUCER_EPOCH): another
    /// coordinator owns the id now, so this one stops.
    CoordinatorFenced,
}

/// InitProducerId's answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InitProducerIdResult {
    pub error: ErrorCode,
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
}

impl InitProducerIdResult {
    pub fn failed(error: ErrorCode) -> InitProducerIdResult {
        InitProducerIdResult {
            error,
            producer_id: state::NO_PRODUCER_ID,
            producer_epoch: ProducerEpoch::NONE,
        }
    }
}

/// An answer to a request the coordinator handled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Response {
    InitProducerId(InitProducerIdResult),
    /// AddPartitionsToTxn: one code for all the transaction's partitions.
    AddPartitions(ErrorCode),
    AddOffsets(ErrorCode),
    EndTxn(ErrorCode),
    /// AddPartitionsToTxn v4+ with `verify_only` (KIP-890): per partition,
    /// NONE when it is in the transaction, TRANSACTION_ABORTABLE when not.
    Verified(Vec<(TopicPartition, ErrorCode)>),
}

/// What the runtime does for the coordinator.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Append `record` to the coordinator's `__transaction_state` partition
    /// (acks=all, uncompressed), then call `on_persisted(write_id, ..)`.
    Persist {
        write_id: WriteId,
        record: TransactionRecord,
    },
    /// Write the markers, then call `on_markers_written(write_id, ..)`.
    WriteMarkers {
        write_id: WriteId,
        markers: MarkerWrite,
    },
    /// Answer the request the runtime knows as `token`.
    Respond { token: Token, response: Response },
}

/// The APIs that answer older clients INVALID_PRODUCER_EPOCH where newer
/// ones get PRODUCER_FENCED (KIP-588).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FencingApi {
    InitProducerId,
    AddPartitionsToTxn,
    AddOffsetsToTxn,
    EndTxn,
    TxnOffsetCommit,
}

impl FencingApi {
    /// The first version that understands PRODUCER_FENCED.
    fn producer_fenced_since(self) -> i16 {
        match self {
            FencingApi::InitProducerId => 4,
            FencingApi::AddPartitionsToTxn | FencingApi::AddOffsetsToTxn | FencingApi::EndTxn => 2,
            FencingApi::TxnOffsetCommit => 3,
        }
    }

    /// The code to send a client speaking `version` of this API, as
    /// Kafka's `KafkaApis` rewrites it.
    pub fn error_for_version(self, version: i16, error: ErrorCode) -> ErrorCode {
        if error == ErrorCode::PRODUCER_FENCED && version < self.producer_fenced_since() {
            ErrorCode::INVALID_PRODUCER_EPOCH
        } else {
            error
        }
    }
}

/// The coordinator's error for a failed append to `__transaction_state`
/// (Kafka's `TransactionStateManager.appendTransactionToLog`): the client
/// retries or looks for the new coordinator.
pub fn coordinator_error_for_append(error: ErrorCode) -> ErrorCode {
    match error {
        ErrorCode::UNKNOWN_TOPIC_OR_PARTITION
        | NOT_ENOUGH_REPLICAS
        | NOT_ENOUGH_REPLICAS_AFTER_APPEND
        | ErrorCode::REQUEST_TIMED_OUT => ErrorCode::COORDINATOR_NOT_AVAILABLE,
        ErrorCode::NOT_LEADER_OR_FOLLOWER | ErrorCode::KAFKA_STORAGE_ERROR => {
            ErrorCode::NOT_COORDINATOR
        }
        ErrorCode::MESSAGE_TOO_LARGE | ErrorCode::RECORD_LIST_TOO_LARGE => {
            ErrorCode::UNKNOWN_SERVER_ERROR
        }
        other => other,
    }
}

/// InitProducerId without a transactional id (an idempotent producer): a
/// fresh producer id at epoch 0, no state kept.
pub fn init_idempotent_producer(
    allocate: &mut dyn FnMut() -> Result<ProducerId, ErrorCode>,
) -> InitProducerIdResult {
    match allocate() {
        Ok(producer_id) => InitProducerIdResult {
            error: ErrorCode::NONE,
            producer_id,
            producer_epoch: ProducerEpoch(0),
        },
        Err(error) => InitProducerIdResult::failed(error),
    }
}
