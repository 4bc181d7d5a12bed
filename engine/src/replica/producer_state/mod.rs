//! Idempotent producers on one partition: Kafka's `ProducerStateManager`,
//! `ProducerAppendInfo`, `ProducerStateEntry` and producer snapshot file, as
//! pure decisions.
//!
//! Owned by the partition's shard (one owner, never shared). The shape follows
//! how Kafka's log uses its producer state, split so that no IO happens here:
//!
//! * **Leader append.** [`ProducerStateManager::check_batch`] decides, from the
//!   batch header alone, whether a client batch is new ([`Verdict::Append`]), a
//!   retry of one of the producer's last 5 batches ([`Verdict::Duplicate`]: the
//!   caller answers with the original offsets and appends nothing), or an error
//!   with a Kafka error code. Once offsets are assigned the caller passes the
//!   [`PendingAppend`] to [`ProducerStateManager::record_appended`]. Nothing
//!   else for the partition may run in between (Kafka holds the log lock across
//!   both), so the caller records synchronously when it assigns offsets, not
//!   when the write completes.
//! * **Follower append and recovery.** [`ProducerStateManager::replay_batch`]
//!   applies a batch already in the log without checking sequences (Kafka's
//!   `AppendOrigin.REPLICATION`): the log is the truth.
//! * **Recovery and truncation.** Kafka rebuilds rather than undoes: it reloads
//!   the newest snapshot at or below the new log end and replays the log after
//!   it. [`ProducerStateManager::truncate_and_reload`] takes the decoded
//!   snapshot and says where replay starts; [`snapshot`] encodes and decodes
//!   Kafka's `.snapshot` files byte for byte.
//! * **Expiry.** [`ProducerStateManager::remove_expired_producers`] forgets
//!   producers idle for `producer.id.expiration.ms`; time is an argument.
//! * **Transactions** (`transactions.rs`). A transactional batch opens a
//!   transaction at its base offset; the coordinator's COMMIT/ABORT marker
//!   ([`ProducerStateManager::check_marker`], then `record_marker` or
//!   `replay_marker`, then `complete_txn`) ends it. The open and not yet
//!   replicated transactions give the first unstable offset and so the LSO;
//!   aborted ones become `.txnindex` entries ([`crate::replica::txn_index`]).
//! * **Verification** (`verification.rs`, KIP-890 part 1): the first batch of
//!   a transaction needs the coordinator's confirmation, proven by a
//!   [`VerificationGuard`] ([`ProducerStateManager::check_batch_verified`]).
//!
//! Retention does not forget producers: since Kafka 2.4 (KIP-360, KAFKA-7190)
//! state outlives the producer's batches until it expires, and an unknown
//! producer may start at any sequence, so UNKNOWN_PRODUCER_ID is never returned.

mod entry;
mod manager;
mod sequence;
pub mod snapshot;
mod transactions;
mod verification;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod transaction_tests;

use thiserror::Error;

use crate::log::batch::{Attributes, BatchHeader};
use crate::protocol::errors::ErrorCode;
use crate::types::{ProducerId, TimestampMs};

pub use entry::{BATCHES_RETAINED_MAX, BatchMetadata, COORDINATOR_EPOCH_NONE, ProducerStateEntry};
pub use manager::{PendingAppend, ProducerStateManager, Rebuild, Verdict};
pub use sequence::{ProducerEpoch, Sequence};
pub use transactions::{
    CompletedTxn, LATE_TRANSACTION_BUFFER_MS, MarkerError, PendingMarker, TransactionVersion,
    TxnMarker, UnreplicatedTxn,
};
pub use verification::{VerificationGuard, VerificationStateEntry, produce_error_for_verification};

/// Kafka's default `producer.id.expiration.ms` (one day).
pub const PRODUCER_ID_EXPIRATION_MS_DEFAULT: i64 = 86_400_000;

/// Producers one partition tracks at most, and the most a snapshot may hold.
/// Kafka has no such bound; Brook has one because a client can make up
/// producer ids without InitProducerId. About 200 bytes each in memory and 46
/// in a snapshot, so the bound is ~200 MiB / ~46 MiB per partition; expiry
/// keeps real workloads far below it.
pub const PRODUCERS_MAX: usize = 1_000_000;

/// Settings of one partition's producer state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerStateConfig {
    /// `producer.id.expiration.ms`.
    pub producer_id_expiration_ms: i64,
    /// At most [`PRODUCERS_MAX`]; lower only in tests.
    pub producers_max: usize,
}

impl Default for ProducerStateConfig {
    fn default() -> ProducerStateConfig {
        ProducerStateConfig {
            producer_id_expiration_ms: PRODUCER_ID_EXPIRATION_MS_DEFAULT,
            producers_max: PRODUCERS_MAX,
        }
    }
}

/// Whether a data batch belongs to a transaction (attribute bit 4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchKind {
    Idempotent,
    Transactional,
}

/// The header fields of a data batch that producer state looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProducerBatch {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub base_sequence: Sequence,
    /// `lastOffsetDelta`: Kafka derives the last sequence from it, not from
    /// `recordsCount` (the log checks that the two agree).
    pub last_offset_delta: i32,
    pub max_timestamp: TimestampMs,
    pub kind: BatchKind,
}

impl ProducerBatch {
    /// `DefaultRecordBatch.lastSequence`.
    pub fn last_sequence(&self) -> Sequence {
        self.base_sequence.increment(self.last_offset_delta)
    }
}

/// What a stored batch means for producer state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProducerOfBatch {
    /// No producer id (`producerId <= -1`): plain, non-idempotent records.
    None,
    Data(ProducerBatch),
    /// A control batch (a transaction marker): read it with
    /// [`TxnMarker::read`] and apply it with the marker functions.
    ControlMarker {
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
    },
}

impl ProducerOfBatch {
    /// Reads the producer fields of a batch header (`RecordBatch.hasProducerId`
    /// is `producerId > -1`).
    pub fn read(header: &BatchHeader) -> ProducerOfBatch {
        let producer_id = ProducerId(header.producer_id.get());
        if producer_id.0 < 0 {
            return ProducerOfBatch::None;
        }
        let producer_epoch = ProducerEpoch(header.producer_epoch.get());
        let attributes = Attributes(header.attributes.get());
        if attributes.is_control() {
            return ProducerOfBatch::ControlMarker {
                producer_id,
                producer_epoch,
            };
        }
        ProducerOfBatch::Data(ProducerBatch {
            producer_id,
            producer_epoch,
            base_sequence: Sequence(header.base_sequence.get()),
            last_offset_delta: header.last_offset_delta.get(),
            max_timestamp: TimestampMs(header.max_timestamp.get()),
            kind: if attributes.is_transactional() {
                BatchKind::Transactional
            } else {
                BatchKind::Idempotent
            },
        })
    }
}

/// Why a client batch is refused; each maps to the code Kafka answers with.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum ProducerError {
    /// `LogValidator`: an idempotent batch must carry a sequence.
    #[error("producer {} sent negative base sequence {sequence}", producer_id.0)]
    InvalidSequence {
        producer_id: ProducerId,
        sequence: Sequence,
    },
    /// `checkProducerEpoch`: a fenced (zombie) producer. Since Kafka 2.7 this
    /// is INVALID_PRODUCER_EPOCH, which clients treat as abortable, rather than
    /// the fatal PRODUCER_FENCED, for transactional producers too.
    #[error("producer {} epoch {epoch} is older than the last seen epoch {current}", producer_id.0)]
    InvalidProducerEpoch {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        current: ProducerEpoch,
    },
    /// `checkSequence`: a gap, a new epoch not starting at 0, or an old batch
    /// that is no longer among the last 5.
    #[error(
        "producer {} epoch {epoch} sent sequence {sequence}, expected {expected}",
        producer_id.0
    )]
    OutOfOrderSequence {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
        sequence: Sequence,
        expected: Sequence,
    },
    /// `appendDataBatch`: a non-transactional batch while the producer has a
    /// transaction open on this partition.
    #[error("producer {} sent a non-transactional batch inside its open transaction", producer_id.0)]
    InvalidTransactionState { producer_id: ProducerId },
    /// Brook's own bound ([`PRODUCERS_MAX`]); Kafka has none.
    #[error("partition already tracks {limit} producers")]
    ProducersLimitReached { limit: usize },
    /// KIP-890: a transactional batch would open a transaction the
    /// coordinator has not confirmed includes this partition (Kafka's
    /// "Record was not part of an ongoing transaction").
    #[error("producer {} epoch {epoch} has no verified transaction on this partition", producer_id.0)]
    TransactionNotVerified {
        producer_id: ProducerId,
        epoch: ProducerEpoch,
    },
}

impl ProducerError {
    /// The Kafka error code for the produce response.
    pub fn error_code(&self) -> ErrorCode {
        match self {
            ProducerError::InvalidSequence { .. } => ErrorCode::INVALID_RECORD,
            ProducerError::InvalidProducerEpoch { .. } => ErrorCode::INVALID_PRODUCER_EPOCH,
            ProducerError::OutOfOrderSequence { .. } => ErrorCode::OUT_OF_ORDER_SEQUENCE_NUMBER,
            ProducerError::InvalidTransactionState { .. } => ErrorCode::INVALID_TXN_STATE,
            ProducerError::ProducersLimitReached { .. } => ErrorCode::POLICY_VIOLATION,
            // Kafka throws InvalidTxnStateException for every Produce version.
            ProducerError::TransactionNotVerified { .. } => ErrorCode::INVALID_TXN_STATE,
        }
    }
}
