//! KIP-890 part 1: a partition accepts the first transactional batch of a
//! transaction only after the transaction coordinator confirmed that the
//! partition is part of it. This stops "hanging" transactions: a late or
//! retried batch arriving after the coordinator already wrote the ABORT
//! marker would otherwise open a transaction nobody will ever end.
//! Kafka's `VerificationStateEntry`, `VerificationGuard` and the checks in
//! `UnifiedLog.maybeStartTransactionVerification` / `analyzeAndValidateProducerState`.
//!
//! The broker's produce path for a transactional batch:
//! 1. [`ProducerStateManager::start_verification`] → a guard, or
//!    [`VerificationGuard::SENTINEL`] when the producer's transaction is
//!    already open here (nothing to verify).
//! 2. With a real guard, ask the coordinator (AddPartitionsToTxn v4+,
//!    `verify_only`); on an error answer with
//!    [`produce_error_for_verification`] and append nothing.
//! 3. Append with [`ProducerStateManager::check_batch_verified`] passing the
//!    guard: it is accepted only if the guard is still the partition's current
//!    one. A marker written in between (an abort) clears it, and a new
//!    verification gets a new guard, so a stale "verified" answer can never
//!    open a transaction (the ABA case Kafka's guard object exists for).
//!
//! Guards are plain numbers unique per partition, compared by value, in place
//! of Kafka's object identity. Entries not used within
//! `producer.id.expiration.ms` are dropped by
//! [`ProducerStateManager::remove_expired_producers`], as in Kafka.

use crate::protocol::errors::ErrorCode;
use crate::types::{ProducerId, TimestampMs};

use super::entry::ProducerStateEntry;
use super::manager::{ProducerStateManager, Verdict};
use super::sequence::{ProducerEpoch, Sequence};
use super::{BatchKind, ProducerBatch, ProducerError};

/// Proof that the coordinator verified one transaction on this partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct VerificationGuard(u64);

impl VerificationGuard {
    /// "No verification" (`VerificationGuard.SENTINEL`): never verifies.
    pub const SENTINEL: VerificationGuard = VerificationGuard(0);

    /// Whether a request carrying `request` may append under this guard
    /// (`VerificationGuard.verify`).
    pub fn verify(self, request: VerificationGuard) -> bool {
        request != VerificationGuard::SENTINEL && request == self
    }
}

/// A verification in progress for one producer (`VerificationStateEntry`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct VerificationStateEntry {
    started: TimestampMs,
    guard: VerificationGuard,
    /// The lowest sequence seen while verifying, in `epoch`: no batch with a
    /// higher one may be appended before it, or the lower one, retried, would
    /// be out of order forever.
    lowest_sequence: Sequence,
    epoch: ProducerEpoch,
}

impl VerificationStateEntry {
    pub fn guard(&self) -> VerificationGuard {
        self.guard
    }

    pub fn lowest_sequence(&self) -> Sequence {
        self.lowest_sequence
    }

    pub fn epoch(&self) -> ProducerEpoch {
        self.epoch
    }

    pub fn started(&self) -> TimestampMs {
        self.started
    }

    /// `maybeUpdateLowestSequenceAndEpoch`: a lower sequence in the same
    /// epoch, or any sequence of a newer epoch, becomes the bound.
    fn update_lowest_sequence(&mut self, sequence: Sequence, epoch: ProducerEpoch) {
        if epoch == self.epoch && sequence < self.lowest_sequence {
            self.lowest_sequence = sequence;
        }
        if epoch > self.epoch {
            self.epoch = epoch;
            self.lowest_sequence = sequence;
        }
    }

    pub(super) fn is_expired(&self, now: TimestampMs, expiration_ms: i64) -> bool {
        now.0.wrapping_sub(self.started.0) >= expiration_ms
    }
}

impl ProducerStateManager {
    /// Starts (or joins) verifying that `producer_id`'s transaction includes
    /// this partition, for a batch starting at `sequence` (Kafka's
    /// `maybeStartTransactionVerification`). Returns
    /// [`VerificationGuard::SENTINEL`] when the producer already has its
    /// transaction open here in `epoch`: send nothing to the coordinator.
    pub fn start_verification(
        &mut self,
        producer_id: ProducerId,
        sequence: Sequence,
        epoch: ProducerEpoch,
        now: TimestampMs,
    ) -> Result<VerificationGuard, ProducerError> {
        let current = self
            .producers
            .get(&producer_id)
            .map_or(ProducerEpoch::NONE, ProducerStateEntry::producer_epoch);
        if epoch < current {
            return Err(ProducerError::InvalidProducerEpoch {
                producer_id,
                epoch,
                current,
            });
        }
        if self.has_ongoing_transaction(producer_id, epoch) {
            return Ok(VerificationGuard::SENTINEL);
        }
        if !self.verifications.contains_key(&producer_id)
            && self.verifications.len() >= self.config.producers_max
        {
            return Err(ProducerError::ProducersLimitReached {
                limit: self.config.producers_max,
            });
        }
        let guards_issued = &mut self.guards_issued;
        let entry = self.verifications.entry(producer_id).or_insert_with(|| {
            *guards_issued += 1;
            VerificationStateEntry {
                started: now,
                guard: VerificationGuard(*guards_issued),
                lowest_sequence: sequence,
                epoch,
            }
        });
        entry.update_lowest_sequence(sequence, epoch);
        Ok(entry.guard)
    }

    /// The guard of `producer_id`'s verification in progress, or
    /// [`VerificationGuard::SENTINEL`] (`UnifiedLog.verificationGuard`).
    pub fn verification_guard(&self, producer_id: ProducerId) -> VerificationGuard {
        self.verifications
            .get(&producer_id)
            .map_or(VerificationGuard::SENTINEL, VerificationStateEntry::guard)
    }

    pub fn verification_entry(&self, producer_id: ProducerId) -> Option<&VerificationStateEntry> {
        self.verifications.get(&producer_id)
    }

    /// [`ProducerStateManager::check_batch`] with verification required
    /// (`transaction.partition.verification.enable=true`, Kafka's default): a
    /// transactional batch of a producer with no transaction open here in its
    /// epoch needs `request_guard` to be the partition's current guard.
    /// Idempotent batches ignore the guard (pass the sentinel).
    pub fn check_batch_verified(
        &self,
        batch: &ProducerBatch,
        request_guard: VerificationGuard,
    ) -> Result<Verdict, ProducerError> {
        self.check(batch, Some(request_guard))
    }

    /// The verification rule, after the duplicate lookup and before the
    /// sequence checks, as in `analyzeAndValidateProducerState`: a stale
    /// epoch is reported as such first, since it is what the client can act on.
    pub(super) fn check_verification(
        &self,
        batch: &ProducerBatch,
        entry: Option<&ProducerStateEntry>,
        request_guard: VerificationGuard,
    ) -> Result<(), ProducerError> {
        if batch.kind != BatchKind::Transactional
            || self.has_ongoing_transaction(batch.producer_id, batch.producer_epoch)
        {
            return Ok(());
        }
        let current = entry.map_or(ProducerEpoch::NONE, ProducerStateEntry::producer_epoch);
        if batch.producer_epoch < current {
            return Err(ProducerError::InvalidProducerEpoch {
                producer_id: batch.producer_id,
                epoch: batch.producer_epoch,
                current,
            });
        }
        if !self
            .verification_guard(batch.producer_id)
            .verify(request_guard)
        {
            return Err(ProducerError::TransactionNotVerified {
                producer_id: batch.producer_id,
                epoch: batch.producer_epoch,
            });
        }
        Ok(())
    }
}

/// The produce error for a partition the coordinator did not verify, from
/// the coordinator's per-partition AddPartitionsToTxn error and the Produce
/// request's version (`AddPartitionsToTxnManager`): PRODUCER_FENCED becomes
/// INVALID_PRODUCER_EPOCH (what producers handle here), and
/// TRANSACTION_ABORTABLE becomes INVALID_TXN_STATE for Produce v10 and older,
/// whose clients do not know it, and a coordinator that could not be asked
/// (moving, loading or unreachable) becomes
/// NOT_ENOUGH_REPLICAS, which every producer retries without a metadata
/// refresh (`ReplicaManager`'s translation).
pub fn produce_error_for_verification(
    coordinator_error: ErrorCode,
    produce_version: i16,
) -> ErrorCode {
    let retry = [
        ErrorCode::NETWORK_EXCEPTION,
        ErrorCode::COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode::COORDINATOR_NOT_AVAILABLE,
        ErrorCode::NOT_COORDINATOR,
    ];
    if retry.contains(&coordinator_error) {
        ErrorCode::NOT_ENOUGH_REPLICAS
    } else if coordinator_error == ErrorCode::PRODUCER_FENCED {
        ErrorCode::INVALID_PRODUCER_EPOCH
    } else if coordinator_error == ErrorCode::TRANSACTION_ABORTABLE && produce_version <= 10 {
        ErrorCode::INVALID_TXN_STATE
    } else {
        coordinator_error
    }
}
