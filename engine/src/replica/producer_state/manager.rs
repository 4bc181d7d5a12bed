//! The partition's table of producers and the rules that change it (Kafka's
//! `ProducerStateManager` with `ProducerAppendInfo`'s checks). Transactions
//! (markers, the first unstable offset) are in `transactions.rs` and KIP-890
//! verification in `verification.rs`: both are further `impl` blocks of the
//! same manager, since Kafka keeps all three in one lock-guarded state.

use std::collections::BTreeMap;

use crate::types::{Offset, ProducerId, TimestampMs};

use super::entry::{BatchMetadata, ProducerStateEntry};
use super::sequence::{ProducerEpoch, Sequence};
use super::snapshot::{ProducerSnapshot, SnapshotEntry, snapshot_in_range};
use super::transactions::UnreplicatedTxn;
use super::verification::{VerificationGuard, VerificationStateEntry};
use super::{BatchKind, PRODUCERS_MAX, ProducerBatch, ProducerError, ProducerStateConfig};

/// What to do with a client batch that passed the checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A new batch: append it, then hand this to
    /// [`ProducerStateManager::record_appended`] with its base offset.
    Append(PendingAppend),
    /// A retry of an appended batch: answer with these offsets and append
    /// nothing. Kafka puts `timestamp` (the batch's stored `maxTimestamp`) in
    /// the response's `log_append_time_ms`, whatever the topic's timestamp type.
    Duplicate {
        first_offset: Offset,
        last_offset: Offset,
        timestamp: TimestampMs,
    },
}

/// A checked batch waiting for its offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PendingAppend {
    batch: ProducerBatch,
    /// The producer's epoch and last sequence the check saw, to catch a caller
    /// that lets another append of the same producer in between.
    checked_against: (ProducerEpoch, Sequence),
}

impl PendingAppend {
    pub fn batch(&self) -> &ProducerBatch {
        &self.batch
    }
}

/// The next step of a rebuild after [`ProducerStateManager::truncate_and_reload`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rebuild {
    /// The state matches the log; nothing to replay.
    Done,
    /// Feed every batch whose last offset is at or after this offset, up to the
    /// log end, in order: data batches to [`ProducerStateManager::replay_batch`],
    /// transaction markers to [`ProducerStateManager::replay_marker`] (and its
    /// completed transaction to [`ProducerStateManager::complete_txn`]); then
    /// call [`ProducerStateManager::finish_rebuild`].
    ReplayFrom(Offset),
}

/// Every producer of one partition. Lives on the partition's shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerStateManager {
    pub(super) config: ProducerStateConfig,
    pub(super) producers: BTreeMap<ProducerId, ProducerStateEntry>,
    /// The offset after the last batch applied (Kafka's `lastMapOffset`): a
    /// snapshot taken now is named by it.
    pub(super) map_end_offset: Offset,
    /// Open transactions by first offset (Kafka's `ongoingTxns`). Holds exactly
    /// the producers whose entry has a current transaction, except between a
    /// marker and its [`ProducerStateManager::complete_txn`].
    pub(super) ongoing_transactions: BTreeMap<Offset, ProducerId>,
    /// Completed transactions whose marker is not yet below the high watermark,
    /// by first offset (Kafka's `unreplicatedTxns`): still unstable.
    pub(super) unreplicated_transactions: BTreeMap<Offset, UnreplicatedTxn>,
    /// KIP-890 verifications in progress, by producer (Kafka's
    /// `verificationStates`); at most `producers_max`.
    pub(super) verifications: BTreeMap<ProducerId, VerificationStateEntry>,
    /// The last guard handed out; guards are never reused, even across
    /// truncation, so a stale verification can never match a new one.
    pub(super) guards_issued: u64,
}

impl ProducerStateManager {
    /// An empty table, as Kafka starts one (`lastMapOffset = 0`) before
    /// [`ProducerStateManager::truncate_and_reload`] loads it.
    pub fn new(config: ProducerStateConfig) -> ProducerStateManager {
        assert!(config.producers_max <= PRODUCERS_MAX);
        assert!(config.producer_id_expiration_ms >= 0);
        ProducerStateManager {
            config,
            producers: BTreeMap::new(),
            map_end_offset: Offset(0),
            ongoing_transactions: BTreeMap::new(),
            unreplicated_transactions: BTreeMap::new(),
            verifications: BTreeMap::new(),
            guards_issued: 0,
        }
    }

    pub fn config(&self) -> ProducerStateConfig {
        self.config
    }

    pub fn entry(&self, producer_id: ProducerId) -> Option<&ProducerStateEntry> {
        self.producers.get(&producer_id)
    }

    /// Every tracked producer, by id.
    pub fn producers(&self) -> impl ExactSizeIterator<Item = (&ProducerId, &ProducerStateEntry)> {
        self.producers.iter()
    }

    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    pub fn map_end_offset(&self) -> Offset {
        self.map_end_offset
    }

    /// Decides what to do with a data batch a client produced, in Kafka's
    /// order: the validator's sequence check, the duplicate lookup, then the
    /// epoch, sequence and transaction checks of `ProducerAppendInfo`.
    ///
    /// Time plays no part: a producer past its expiry but not yet removed is
    /// still checked against, as in Kafka. Only for batches with a producer id
    /// ([`super::ProducerOfBatch::Data`]). Transaction verification (KIP-890)
    /// is not required here, as with Kafka's
    /// `transaction.partition.verification.enable=false`; see
    /// [`ProducerStateManager::check_batch_verified`].
    pub fn check_batch(&self, batch: &ProducerBatch) -> Result<Verdict, ProducerError> {
        self.check(batch, None)
    }

    /// [`ProducerStateManager::check_batch`], and with `verification` also
    /// Kafka's rule that a transactional batch starting a transaction must
    /// carry the partition's current verification guard.
    pub(super) fn check(
        &self,
        batch: &ProducerBatch,
        verification: Option<VerificationGuard>,
    ) -> Result<Verdict, ProducerError> {
        if batch.base_sequence.0 < 0 {
            return Err(ProducerError::InvalidSequence {
                producer_id: batch.producer_id,
                sequence: batch.base_sequence,
            });
        }
        let entry = self.producers.get(&batch.producer_id);
        let duplicate = entry.and_then(|entry| {
            entry.find_duplicate(
                batch.producer_epoch,
                batch.base_sequence,
                batch.last_sequence(),
            )
        });
        if let Some(duplicate) = duplicate {
            return Ok(Verdict::Duplicate {
                first_offset: duplicate.first_offset(),
                last_offset: duplicate.last_offset,
                timestamp: duplicate.timestamp,
            });
        }
        if let Some(request_guard) = verification {
            self.check_verification(batch, entry, request_guard)?;
        }
        if entry.is_none() && self.producers.len() >= self.config.producers_max {
            return Err(ProducerError::ProducersLimitReached {
                limit: self.config.producers_max,
            });
        }
        check_epoch(batch, entry)?;
        check_verification_sequence(batch, self.verifications.get(&batch.producer_id))?;
        check_sequence(batch, entry)?;
        check_transaction(batch, entry)?;
        Ok(Verdict::Append(PendingAppend {
            batch: *batch,
            checked_against: fingerprint(entry),
        }))
    }

    /// Decides what to do with a transactional batch a coordinator writes
    /// for a producer (the group coordinator's transactional offset
    /// commits): Kafka's `AppendOrigin.COORDINATOR`, which checks the
    /// producer's epoch and transaction state but neither looks for a
    /// duplicate nor checks the sequence (the coordinator numbers its
    /// batches 0; the producer's own sequences are for its own batches).
    pub fn check_coordinator_batch(
        &self,
        batch: &ProducerBatch,
    ) -> Result<PendingAppend, ProducerError> {
        let entry = self.producers.get(&batch.producer_id);
        if entry.is_none() && self.producers.len() >= self.config.producers_max {
            return Err(ProducerError::ProducersLimitReached {
                limit: self.config.producers_max,
            });
        }
        check_epoch(batch, entry)?;
        check_transaction(batch, entry)?;
        Ok(PendingAppend {
            batch: *batch,
            checked_against: fingerprint(entry),
        })
    }

    /// Records a checked batch once the log placed it at `base_offset`.
    pub fn record_appended(&mut self, pending: PendingAppend, base_offset: Offset) {
        debug_assert_eq!(
            pending.checked_against,
            fingerprint(self.producers.get(&pending.batch.producer_id)),
            "another append of producer {} ran between check and record",
            pending.batch.producer_id.0
        );
        self.apply(&pending.batch, base_offset);
    }

    /// Applies a batch that is already in the log at `base_offset` without
    /// checking it: a follower's append or recovery (Kafka's
    /// `AppendOrigin.REPLICATION`). Even an older epoch is taken, as Kafka does.
    pub fn replay_batch(&mut self, batch: &ProducerBatch, base_offset: Offset) {
        self.apply(batch, base_offset);
    }

    fn apply(&mut self, batch: &ProducerBatch, base_offset: Offset) {
        let last_offset = Offset(
            base_offset
                .0
                .saturating_add(i64::from(batch.last_offset_delta)),
        );
        let entry = self
            .producers
            .entry(batch.producer_id)
            .or_insert_with(ProducerStateEntry::empty);
        let starts_transaction = batch.kind == BatchKind::Transactional
            && entry.current_transaction_first_offset().is_none();
        entry.add_batch(
            batch.producer_epoch,
            BatchMetadata {
                last_sequence: batch.last_sequence(),
                last_offset,
                offset_delta: batch.last_offset_delta,
                timestamp: batch.max_timestamp,
            },
        );
        if starts_transaction {
            entry.begin_transaction_at(base_offset);
            self.ongoing_transactions
                .insert(base_offset, batch.producer_id);
        }
        if batch.kind == BatchKind::Transactional {
            // The transaction now has data here (or its verification was for
            // an older one): either way the guard has served (`updateProducers`).
            self.verifications.remove(&batch.producer_id);
        }
        self.map_end_offset = Offset(last_offset.0.saturating_add(1));
    }

    /// Forgets producers idle for `producer.id.expiration.ms` (measured from
    /// their last batch's timestamp) with no open transaction, and
    /// verifications started that long ago and never used (Kafka expires both
    /// with the same setting). Returns how many producers were removed.
    pub fn remove_expired_producers(&mut self, now: TimestampMs) -> usize {
        let before = self.producers.len();
        let expiration_ms = self.config.producer_id_expiration_ms;
        self.producers
            .retain(|_, entry| !is_expired(entry, now, expiration_ms));
        self.verifications
            .retain(|_, verification| !verification.is_expired(now, expiration_ms));
        before - self.producers.len()
    }

    /// The log start moved forward (retention, DeleteRecords). Producers are
    /// kept even if all their batches are gone (KIP-360); only the map end
    /// catches up, and completed transactions wholly before the new start stop
    /// counting as unstable (`onLogStartOffsetIncremented`).
    pub fn on_log_start_offset(&mut self, log_start_offset: Offset) {
        self.unreplicated_transactions
            .retain(|_, transaction| transaction.last_offset >= log_start_offset);
        self.map_end_offset = self.map_end_offset.max(log_start_offset);
    }

    /// Brings the state in line with a log of `log_start_offset..log_end_offset`
    /// after recovery or truncation (Kafka's `truncateAndReload` with the replay
    /// decision of `rebuildProducerState`). `snapshot` is the newest snapshot the
    /// caller could decode with an offset in `(log_start, log_end]` (see
    /// [`snapshot_in_range`]); one outside that range is ignored, which is
    /// slower (more replay) but still correct.
    pub fn truncate_and_reload(
        &mut self,
        log_start_offset: Offset,
        log_end_offset: Offset,
        now: TimestampMs,
        snapshot: Option<ProducerSnapshot>,
    ) -> Rebuild {
        let was_empty = self.producers.is_empty() && self.map_end_offset >= log_end_offset;
        if log_end_offset == self.map_end_offset {
            self.on_log_start_offset(log_start_offset);
        } else {
            self.producers.clear();
            self.ongoing_transactions.clear();
            // The new log end is at or below the high watermark (Kafka's
            // assumption too), so every completed transaction is replicated.
            self.unreplicated_transactions.clear();
            self.map_end_offset = log_start_offset;
            let usable = snapshot.filter(|snapshot| {
                snapshot_in_range(snapshot.offset, log_start_offset, log_end_offset)
            });
            if let Some(snapshot) = usable {
                self.load(snapshot, now);
            }
        }
        // Truncation cannot create producers, so an empty table stays empty.
        if log_end_offset > self.map_end_offset && !was_empty {
            return Rebuild::ReplayFrom(self.map_end_offset.max(log_start_offset));
        }
        self.map_end_offset = log_end_offset;
        Rebuild::Done
    }

    /// Ends a rebuild whose batches were replayed up to `log_end_offset`.
    pub fn finish_rebuild(&mut self, log_end_offset: Offset) {
        self.map_end_offset = log_end_offset;
    }

    /// Forgets everything: the log was emptied and restarts at `offset`.
    pub fn truncate_fully_and_start_at(&mut self, offset: Offset) {
        self.producers.clear();
        self.ongoing_transactions.clear();
        self.unreplicated_transactions.clear();
        self.map_end_offset = offset;
    }

    /// The state as Kafka's snapshot file stores it, named by the map end.
    pub fn take_snapshot(&self) -> ProducerSnapshot {
        ProducerSnapshot {
            offset: self.map_end_offset,
            entries: self
                .producers
                .iter()
                .map(|(producer_id, entry)| SnapshotEntry::of(*producer_id, entry))
                .collect(),
        }
    }

    /// Loads a snapshot's producers, skipping expired ones, and reopens their
    /// transactions (`loadFromSnapshot`, `loadProducerEntry`).
    fn load(&mut self, snapshot: ProducerSnapshot, now: TimestampMs) {
        let expiration_ms = self.config.producer_id_expiration_ms;
        for stored in &snapshot.entries {
            let entry = stored.to_entry();
            if is_expired(&entry, now, expiration_ms) {
                continue;
            }
            if let Some(first_offset) = entry.current_transaction_first_offset() {
                self.ongoing_transactions
                    .insert(first_offset, stored.producer_id);
            }
            self.producers.insert(stored.producer_id, entry);
        }
        self.map_end_offset = snapshot.offset;
    }
}

/// `isProducerExpired`; the subtraction wraps like Java's so that no stored
/// timestamp can panic.
fn is_expired(entry: &ProducerStateEntry, now: TimestampMs, expiration_ms: i64) -> bool {
    entry.current_transaction_first_offset().is_none()
        && now.0.wrapping_sub(entry.last_timestamp().0) >= expiration_ms
}

fn fingerprint(entry: Option<&ProducerStateEntry>) -> (ProducerEpoch, Sequence) {
    entry.map_or((ProducerEpoch::NONE, Sequence::NONE), |entry| {
        (entry.producer_epoch(), entry.last_sequence())
    })
}

/// `checkProducerEpoch` for data batches: an older epoch is a zombie.
fn check_epoch(
    batch: &ProducerBatch,
    entry: Option<&ProducerStateEntry>,
) -> Result<(), ProducerError> {
    let current = entry.map_or(ProducerEpoch::NONE, ProducerStateEntry::producer_epoch);
    if batch.producer_epoch < current {
        return Err(ProducerError::InvalidProducerEpoch {
            producer_id: batch.producer_id,
            epoch: batch.producer_epoch,
            current,
        });
    }
    Ok(())
}

/// `checkSequence`: a new epoch starts at 0 (unless the partition knows no
/// epoch for the producer: then any sequence is accepted, since its state may
/// have been lost to expiry or a deleted log); within an epoch each batch must
/// follow the last one, wrapping after `i32::MAX`.
fn check_sequence(
    batch: &ProducerBatch,
    entry: Option<&ProducerStateEntry>,
) -> Result<(), ProducerError> {
    let current = entry.map_or(ProducerEpoch::NONE, ProducerStateEntry::producer_epoch);
    if current == ProducerEpoch::NONE {
        return Ok(());
    }
    let last = entry.map_or(Sequence::NONE, ProducerStateEntry::last_sequence);
    let (accepted, expected) = if batch.producer_epoch == current {
        (batch.base_sequence.follows(last), last.next())
    } else {
        (batch.base_sequence == Sequence::ZERO, Sequence::ZERO)
    };
    if accepted {
        return Ok(());
    }
    Err(ProducerError::OutOfOrderSequence {
        producer_id: batch.producer_id,
        epoch: batch.producer_epoch,
        sequence: batch.base_sequence,
        expected,
    })
}

/// While a verification is pending, a batch may not run ahead of the lowest
/// sequence seen during verification (the first check of Kafka's
/// `checkSequence`): a retried lower batch must not find a gap behind it.
fn check_verification_sequence(
    batch: &ProducerBatch,
    verification: Option<&VerificationStateEntry>,
) -> Result<(), ProducerError> {
    let Some(verification) = verification else {
        return Ok(());
    };
    if batch.base_sequence > verification.lowest_sequence() {
        return Err(ProducerError::OutOfOrderSequence {
            producer_id: batch.producer_id,
            epoch: batch.producer_epoch,
            sequence: batch.base_sequence,
            expected: verification.lowest_sequence(),
        });
    }
    Ok(())
}

/// A producer inside a transaction on this partition may only send
/// transactional batches until the marker ends it (`appendDataBatch`).
fn check_transaction(
    batch: &ProducerBatch,
    entry: Option<&ProducerStateEntry>,
) -> Result<(), ProducerError> {
    let in_transaction = entry
        .and_then(ProducerStateEntry::current_transaction_first_offset)
        .is_some();
    if in_transaction && batch.kind == BatchKind::Idempotent {
        return Err(ProducerError::InvalidTransactionState {
            producer_id: batch.producer_id,
        });
    }
    Ok(())
}
