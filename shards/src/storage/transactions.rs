//! A partition's side of transactions: COMMIT/ABORT markers, the
//! aborted-transaction index (`<segment base>.txnindex`, Kafka's format) and
//! the last stable offset. Decisions are
//! [`brook_engine::replica::producer_state`]'s and
//! [`brook_engine::replica::txn_index`]'s; this module does their IO.
//!
//! An index entry is appended (and synced) when an ABORT marker is appended,
//! to the file of the segment holding the marker. Aborts are rare and each
//! costs one small synchronous write: the indexes stay in memory, whole, for
//! read_committed fetches. On open, entries at or after the offset from
//! which producer state is replayed are dropped, and the replay appends them
//! again, so the files always match the log.

use std::io::Write;
use std::path::Path;

use brook_engine::log::control::{EndTxnMarker, MarkerKind, encode_end_txn_marker_batch};
use brook_engine::log::segments::segment_for_offset;
use brook_engine::replica::producer_state::{
    CompletedTxn, ProducerBatch, ProducerEpoch, VerificationGuard,
};
use brook_engine::replica::txn_index::{
    TXN_INDEX_FILE_SUFFIX, TransactionIndex, collect_aborted_transactions, txn_index_file_name,
};
use brook_engine::types::{LeaderEpoch, Offset, ProducerId, TimestampMs};

use crate::storage::error::StorageError;
use crate::storage::partition_log::PartitionLog;
use crate::storage::producers::Origin;
use crate::storage::state::AppendInfo;

/// Aborted transactions one fetch returns at most (each is 16 bytes on the
/// wire; Kafka has no bound).
pub const ABORTED_TRANSACTIONS_PER_FETCH_MAX: usize = 100_000;

/// One producer id's state on a partition, as DescribeProducers shows it
/// (Kafka's `UnifiedLog.activeProducers`). An owned copy, so that it can
/// leave the partition's shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ActiveProducer {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    /// Of the newest batch the partition remembers; -1 if none.
    pub last_sequence: i32,
    pub last_timestamp: TimestampMs,
    pub coordinator_epoch: i32,
    /// The first offset of the producer's open transaction, if one is open.
    pub current_transaction_first_offset: Option<Offset>,
}

impl PartitionLog {
    /// How many producer ids the partition keeps state for.
    pub fn producer_count(&self) -> usize {
        self.inner.producers.borrow().manager.producers().count()
    }

    /// Every producer id the partition keeps state for, by id.
    pub fn active_producers(&self) -> Vec<ActiveProducer> {
        let producers = self.inner.producers.borrow();
        producers
            .manager
            .producers()
            .map(|(producer_id, entry)| ActiveProducer {
                producer_id: *producer_id,
                producer_epoch: entry.producer_epoch(),
                last_sequence: entry.last_sequence().0,
                last_timestamp: entry.last_timestamp(),
                coordinator_epoch: entry.coordinator_epoch(),
                current_transaction_first_offset: entry.current_transaction_first_offset(),
            })
            .collect()
    }

    /// Appends the coordinator's COMMIT or ABORT marker for a producer's
    /// transaction (Kafka's WriteTxnMarkers on the partition leader).
    pub async fn append_marker(
        &self,
        producer_id: ProducerId,
        producer_epoch: ProducerEpoch,
        coordinator_epoch: i32,
        kind: MarkerKind,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let marker = EndTxnMarker {
            kind,
            coordinator_epoch,
        };
        let batch = encode_end_txn_marker_batch(
            producer_id.0,
            producer_epoch.0,
            TimestampMs(now_ms),
            marker,
        );
        self.append_as(&batch, leader_epoch, now_ms, Origin::Marker)
            .await
    }

    /// Waits for this log's turn among transactional appends (in call
    /// order); the turn lasts as long as the returned permit.
    pub async fn transactional_order(&self) -> Option<tokio::sync::SemaphorePermit<'_>> {
        self.inner.transactional_order.acquire().await.ok()
    }

    /// Starts verifying a transactional batch's producer with the
    /// coordinator (KIP-890): [`VerificationGuard::SENTINEL`] when its
    /// transaction is already open here (nothing to ask); otherwise the
    /// guard to pass to [`PartitionLog::append_verified`] once the
    /// coordinator confirmed the partition is in the transaction.
    pub fn start_verification(
        &self,
        batch: &ProducerBatch,
        now_ms: i64,
    ) -> Result<VerificationGuard, StorageError> {
        let guard = self
            .inner
            .producers
            .borrow_mut()
            .manager
            .start_verification(
                batch.producer_id,
                batch.base_sequence,
                batch.producer_epoch,
                TimestampMs(now_ms),
            )?;
        Ok(guard)
    }

    /// The last stable offset: below it every transaction is decided
    /// (`high_watermark` capped by the first offset of the oldest open
    /// transaction).
    pub fn last_stable_offset(&self, high_watermark: Offset) -> Offset {
        let log_start = self.log_start_offset();
        let mut producers = self.inner.producers.borrow_mut();
        producers.manager.on_high_watermark_updated(high_watermark);
        producers
            .manager
            .last_stable_offset(log_start, high_watermark)
    }

    /// The aborted transactions a read_committed fetch from `fetch_offset`
    /// returning records up to `upper_bound` (exclusive) must report, as
    /// (producer id, first offset).
    pub fn aborted_transactions(
        &self,
        fetch_offset: Offset,
        upper_bound: Offset,
    ) -> Vec<(ProducerId, Offset)> {
        let producers = self.inner.producers.borrow();
        let first_base = producers
            .txn_indexes
            .range(..=fetch_offset)
            .next_back()
            .map_or(Offset(i64::MIN), |(base, _)| *base);
        let indexes = producers
            .txn_indexes
            .range(first_base..)
            .map(|(_, index)| index);
        collect_aborted_transactions(indexes, fetch_offset, upper_bound)
            .into_iter()
            .take(ABORTED_TRANSACTIONS_PER_FETCH_MAX)
            .map(|aborted| aborted.fetch_entry())
            .collect()
    }

    /// Ends a transaction in producer state; an aborted one goes into the
    /// index of the segment holding its marker. An index that cannot be
    /// written takes the log offline: read_committed consumers would
    /// otherwise see aborted records.
    pub(crate) fn complete_transaction(&self, completed: CompletedTxn) {
        let aborted = self
            .inner
            .producers
            .borrow_mut()
            .manager
            .complete_txn(completed);
        let Some(aborted) = aborted else { return };
        let base = {
            let state = self.inner.state.borrow();
            let count = state.segments.len();
            segment_for_offset(
                |slot| state.segments[slot].base_offset,
                count,
                aborted.last_offset,
            )
            .map_or(state.active().base_offset, |slot| {
                state.segments[slot].base_offset
            })
        };
        let appended = self
            .inner
            .producers
            .borrow_mut()
            .txn_indexes
            .entry(base)
            .or_insert_with(|| TransactionIndex::new(base))
            .append(aborted);
        let written = match appended {
            Ok(bytes) => append_to_file(&self.dir().join(txn_index_file_name(base)), &bytes),
            Err(error) => Err(format!("{error}")),
        };
        if let Err(reason) = written {
            tracing::error!(log = %self.inner.name, %reason, "recording an aborted transaction failed");
            let error = StorageError::Corrupt {
                path: self.dir(),
                reason: format!("aborted transaction index: {reason}"),
            };
            self.inner.state.borrow_mut().fail(&error);
        }
    }

    /// Loads the partition's `.txnindex` files, dropping entries at or after
    /// `replay_from` (the replay that follows appends them again).
    pub(crate) fn load_txn_indexes(&self, replay_from: Offset) -> Result<(), StorageError> {
        let dir = self.dir();
        let entries =
            std::fs::read_dir(&dir).map_err(|error| StorageError::io("listing", &dir, error))?;
        let mut indexes = std::collections::BTreeMap::new();
        for entry in entries.filter_map(Result::ok) {
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(base) = parse_txn_index_name(&name) else {
                continue;
            };
            let path = entry.path();
            let bytes =
                std::fs::read(&path).map_err(|error| StorageError::io("reading", &path, error))?;
            let mut index =
                TransactionIndex::decode(base, &bytes).map_err(|error| StorageError::Corrupt {
                    path: path.clone(),
                    reason: error.to_string(),
                })?;
            index.truncate_to(replay_from);
            if index.size_bytes() != bytes.len() {
                rewrite(&path, &index)?;
            }
            indexes.insert(base, index);
        }
        self.inner.producers.borrow_mut().txn_indexes = indexes;
        Ok(())
    }

    /// Forgets the indexes of segments below `first_kept` (retention deleted
    /// them with their files).
    pub(crate) fn forget_txn_indexes_below(&self, first_kept: Offset) {
        let mut producers = self.inner.producers.borrow_mut();
        producers.txn_indexes = producers.txn_indexes.split_off(&first_kept);
    }
}

fn parse_txn_index_name(name: &str) -> Option<Offset> {
    let stem = name.strip_suffix(TXN_INDEX_FILE_SUFFIX)?;
    if stem.len() != 20 || !stem.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok().map(Offset)
}

fn append_to_file(path: &Path, bytes: &[u8]) -> Result<(), String> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|error| format!("opening {}: {error}", path.display()))?;
    file.write_all(bytes)
        .and_then(|()| file.sync_data())
        .map_err(|error| format!("writing {}: {error}", path.display()))
}

/// Replaces an index file with `index`'s entries (torn or dropped tail).
fn rewrite(path: &Path, index: &TransactionIndex) -> Result<(), StorageError> {
    let bytes: Vec<u8> = index
        .entries()
        .iter()
        .flat_map(|entry| entry.encode())
        .collect();
    std::fs::write(path, &bytes)
        .and_then(|()| std::fs::File::open(path)?.sync_all())
        .map_err(|error| StorageError::io("rewriting", path, error))
}
