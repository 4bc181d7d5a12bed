//! A partition's idempotent-producer state on disk: Kafka's `.snapshot` files
//! plus one line per partition in the shard's `producer-state-checkpoint-<shard>`,
//! and the rebuild on open. The decisions are
//! [`brook_engine::replica::producer_state`]'s; this module does their IO.
//!
//! Kafka snapshots producer state at segment roll and clean shutdown, and
//! after a crash replays the log from the newest snapshot: with large
//! segments that is a rescan of whole segments. Brook snapshots at roll and
//! clean shutdown too, and also records the state at every checkpoint round,
//! once everything below it is durable:
//!
//! * when the state changed since its last snapshot, a new snapshot file
//!   named by the log end (written atomically, before anything refers to it);
//! * in every case, the checkpoint line `(partition, X)`: "the producer state
//!   at offset X is that of the newest snapshot file at or below X, or empty
//!   if there is none". A partition no idempotent producer ever wrote to
//!   therefore costs no file of its own.
//!
//! On open the state is loaded at X (or at a newer snapshot) and only the
//! batches after it are replayed, by their headers. The newest snapshot file
//! is never deleted, because a checkpoint line may refer to it.

use std::path::{Path, PathBuf};

use brook_engine::replica::producer_state::snapshot::{
    ProducerSnapshot, parse_snapshot_file_name, snapshot_file_name,
};
use std::collections::BTreeMap;

use brook_engine::replica::producer_state::{
    PendingAppend, PendingMarker, ProducerBatch, ProducerStateConfig, ProducerStateManager,
    Rebuild, TransactionVersion, TxnMarker, Verdict, VerificationGuard,
};
use brook_engine::replica::txn_index::TransactionIndex;
use brook_engine::types::{Offset, TimestampMs};

use crate::storage::error::StorageError;
use crate::storage::files::write_atomically;
use crate::storage::partition_log::PartitionLog;
use crate::storage::read::ProducerItem;
use crate::storage::state::AppendInfo;

/// Snapshot files kept per partition (the newest and one before it).
const SNAPSHOT_FILES_KEPT: usize = 2;

/// What identifies a version of the state: it changes with every applied
/// batch (map end) and every expiry (count).
type Fingerprint = (Offset, usize);

/// The producer state of one partition and what of it is on disk. Lives on
/// the partition's shard, next to its log.
#[derive(Debug)]
pub(crate) struct PartitionProducers {
    pub manager: ProducerStateManager,
    /// Aborted transactions by the base offset of the segment holding their
    /// ABORT marker (`.txnindex` files; see [`crate::storage::transactions`]).
    pub txn_indexes: BTreeMap<Offset, TransactionIndex>,
    /// The state the newest snapshot file holds; `None` before any.
    snapshotted: Option<Fingerprint>,
    /// Snapshot files in the partition directory, ascending.
    snapshot_files: Vec<Offset>,
    /// The offset of the partition's last checkpoint line.
    checkpointed_at: Option<Offset>,
}

/// One checkpoint round's record of a partition's state, taken before the
/// round's flush and persisted after it.
#[derive(Debug)]
pub(crate) struct ProducerCheckpoint {
    at: Offset,
    snapshot: Option<(ProducerSnapshot, Fingerprint)>,
}

impl PartitionProducers {
    pub fn new(config: ProducerStateConfig) -> PartitionProducers {
        PartitionProducers {
            manager: ProducerStateManager::new(config),
            txn_indexes: BTreeMap::new(),
            snapshotted: None,
            snapshot_files: Vec::new(),
            checkpointed_at: None,
        }
    }

    fn fingerprint(&self) -> Fingerprint {
        (self.manager.map_end_offset(), self.manager.producer_count())
    }

    /// Where the partition's checkpoint line points, once one was persisted.
    pub fn checkpointed_at(&self) -> Option<Offset> {
        self.checkpointed_at
    }

    /// Starts recording the state as of `log_end_offset` (which the caller
    /// then makes durable): a snapshot only if the state changed since the
    /// last one, or if it emptied while an older snapshot still says
    /// otherwise.
    pub fn begin_checkpoint(&self, log_end_offset: Offset) -> ProducerCheckpoint {
        let fingerprint = self.fingerprint();
        let empty_and_unrecorded =
            self.manager.producer_count() == 0 && self.snapshot_files.is_empty();
        let changed = self.snapshotted != Some(fingerprint) && !empty_and_unrecorded;
        let snapshot = changed.then(|| {
            let snapshot = ProducerSnapshot {
                offset: log_end_offset,
                ..self.manager.take_snapshot()
            };
            (snapshot, fingerprint)
        });
        ProducerCheckpoint {
            at: log_end_offset,
            snapshot,
        }
    }
}

/// Who appends, and so how producer state checks the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A producer; a transactional batch carries the verification guard its
    /// partition obtained, or `None` when verification is not required.
    Client(Option<VerificationGuard>),
    /// The transaction coordinator's COMMIT or ABORT marker.
    Marker,
    /// A coordinator writing a producer's transactional batch (the group
    /// coordinator's transactional offset commits): no sequence check.
    Coordinator,
}

/// The producer part of an append (see `producer_batch`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ProducerCheck {
    None,
    Data(ProducerBatch, Option<VerificationGuard>),
    Coordinator(ProducerBatch),
    Marker(TxnMarker),
}

/// The producer check's outcome: what to record once offsets are assigned.
#[derive(Debug)]
pub(crate) enum Pending {
    None,
    Data(PendingAppend),
    Marker(PendingMarker),
}

pub(crate) enum Checked {
    Append(Pending),
    /// A retry of a batch already in the log.
    Duplicate(AppendInfo),
}

impl PartitionLog {
    /// Checks an append's producer part (under the append lock).
    pub(crate) fn check_producer(&self, check: ProducerCheck) -> Result<Checked, StorageError> {
        let producers = self.inner.producers.borrow();
        let manager = &producers.manager;
        let verdict = match check {
            ProducerCheck::None => return Ok(Checked::Append(Pending::None)),
            ProducerCheck::Marker(marker) => {
                let pending = manager.check_marker(&marker, TransactionVersion::LEGACY)?;
                return Ok(Checked::Append(Pending::Marker(pending)));
            }
            ProducerCheck::Coordinator(batch) => {
                let pending = manager.check_coordinator_batch(&batch)?;
                return Ok(Checked::Append(Pending::Data(pending)));
            }
            ProducerCheck::Data(batch, None) => manager.check_batch(&batch)?,
            ProducerCheck::Data(batch, Some(guard)) => {
                manager.check_batch_verified(&batch, guard)?
            }
        };
        Ok(match verdict {
            Verdict::Append(pending) => Checked::Append(Pending::Data(pending)),
            Verdict::Duplicate {
                first_offset,
                last_offset,
                timestamp,
            } => Checked::Duplicate(AppendInfo::duplicate(first_offset, last_offset, timestamp)),
        })
    }

    /// Records a checked append at the offset the log gave it; a marker that
    /// aborted a transaction adds it to the aborted-transaction index.
    pub(crate) fn record_producer(&self, pending: Pending, base_offset: Offset) {
        let completed = {
            let mut producers = self.inner.producers.borrow_mut();
            match pending {
                Pending::None => return,
                Pending::Data(pending) => {
                    producers.manager.record_appended(pending, base_offset);
                    return;
                }
                Pending::Marker(pending) => producers.manager.record_marker(pending, base_offset),
            }
        };
        if let Some(completed) = completed {
            self.complete_transaction(completed);
        }
    }

    /// Takes the producer part of a checkpoint round (see the module docs).
    pub(crate) fn begin_producer_checkpoint(&self) -> ProducerCheckpoint {
        let end = self.log_end_offset();
        self.inner.producers.borrow().begin_checkpoint(end)
    }

    /// Persists what [`PartitionLog::begin_producer_checkpoint`] took, once
    /// everything below its offset is durable: the snapshot file if any;
    /// the checkpoint line is then the store's to write.
    pub(crate) async fn finish_producer_checkpoint(
        &self,
        checkpoint: ProducerCheckpoint,
    ) -> Result<(), StorageError> {
        debug_assert!(self.durable_offset() >= checkpoint.at);
        if let Some((snapshot, fingerprint)) = checkpoint.snapshot {
            self.write_snapshot_file(snapshot, fingerprint).await?;
        }
        self.inner.producers.borrow_mut().checkpointed_at = Some(checkpoint.at);
        Ok(())
    }

    /// Snapshots the producer state at a segment roll, as Kafka does (the
    /// new segment's base is the log end). No checkpoint line refers to it:
    /// it is loaded only if the log still reaches its offset after a crash,
    /// and then every batch below it survived, so it is the state there.
    /// A failed write is logged; the checkpoint rounds cover the state.
    pub(crate) async fn snapshot_at_roll(&self) {
        let checkpoint = self.begin_producer_checkpoint();
        if let Some((snapshot, fingerprint)) = checkpoint.snapshot
            && let Err(error) = self.write_snapshot_file(snapshot, fingerprint).await
        {
            tracing::warn!(log = %self.inner.name, %error, "writing a producer snapshot at roll failed");
        }
    }

    /// Writes a snapshot file and keeps the newest [`SNAPSHOT_FILES_KEPT`].
    async fn write_snapshot_file(
        &self,
        snapshot: ProducerSnapshot,
        fingerprint: Fingerprint,
    ) -> Result<(), StorageError> {
        let dir = self.dir();
        let bytes = snapshot.encode().map_err(|error| StorageError::Corrupt {
            path: dir.clone(),
            reason: format!("encoding a producer snapshot: {error}"),
        })?;
        write_atomically(&dir.join(snapshot_file_name(snapshot.offset)), &bytes).await?;
        let stale = {
            let mut producers = self.inner.producers.borrow_mut();
            producers.snapshot_files.push(snapshot.offset);
            producers.snapshot_files.sort_unstable();
            producers.snapshot_files.dedup();
            producers.snapshotted = Some(fingerprint);
            let excess = producers
                .snapshot_files
                .len()
                .saturating_sub(SNAPSHOT_FILES_KEPT);
            producers.snapshot_files.drain(..excess).collect::<Vec<_>>()
        };
        remove_snapshot_files(&dir, &stale);
        Ok(())
    }

    /// Where the log's producer-state checkpoint line points, once a round
    /// persisted one.
    pub(crate) fn producers_checkpointed_at(&self) -> Option<Offset> {
        self.inner.producers.borrow().checkpointed_at()
    }

    /// Forgets producers idle for `producer.id.expiration.ms`.
    pub fn remove_expired_producers(&self, now_ms: i64) -> usize {
        self.inner
            .producers
            .borrow_mut()
            .manager
            .remove_expired_producers(TimestampMs(now_ms))
    }

    /// Rebuilds the producer state on open: loads it at the newest point
    /// recorded in range (`checkpointed_at` from the shard's checkpoint, or a
    /// newer snapshot file) and replays the batches after it.
    pub(crate) async fn load_producers(
        &self,
        checkpointed_at: Option<Offset>,
        now_ms: i64,
    ) -> Result<(), StorageError> {
        let dir = self.dir();
        let (log_start, log_end) = (self.log_start_offset(), self.log_end_offset());
        let files = list_snapshot_files(&dir)?;
        let (beyond_end, files): (Vec<Offset>, Vec<Offset>) =
            files.into_iter().partition(|offset| *offset > log_end);
        // A snapshot of offsets the log no longer has (lost in the crash)
        // describes a state that never became durable.
        remove_snapshot_files(&dir, &beyond_end);
        let start = choose_start(&dir, &files, checkpointed_at, log_start, log_end);
        let loaded_at = start.as_ref().map(|snapshot| snapshot.offset);
        let rebuild = {
            let mut producers = self.inner.producers.borrow_mut();
            producers.snapshot_files = files;
            producers
                .manager
                .truncate_and_reload(log_start, log_end, TimestampMs(now_ms), start)
        };
        let replay_from = match rebuild {
            Rebuild::ReplayFrom(from) => from,
            Rebuild::Done => log_end,
        };
        self.load_txn_indexes(replay_from)?;
        if let Rebuild::ReplayFrom(from) = rebuild {
            let mut replayed = Vec::new();
            self.visit_producers_from(from, |item| replayed.push(item))
                .await?;
            for item in replayed {
                let completed = {
                    let mut producers = self.inner.producers.borrow_mut();
                    match item {
                        ProducerItem::Data(base_offset, batch) => {
                            producers.manager.replay_batch(&batch, base_offset);
                            None
                        }
                        ProducerItem::Marker(offset, marker) => {
                            producers.manager.replay_marker(&marker, offset)
                        }
                    }
                };
                if let Some(completed) = completed {
                    self.complete_transaction(completed);
                }
            }
            self.inner
                .producers
                .borrow_mut()
                .manager
                .finish_rebuild(log_end);
        }
        let mut producers = self.inner.producers.borrow_mut();
        if rebuild == Rebuild::Done && loaded_at.is_some() {
            producers.snapshotted = Some(producers.fingerprint());
        }
        tracing::debug!(log = %self.inner.name, producers = producers.manager.producer_count(), ?rebuild, "producer state loaded");
        Ok(())
    }
}

/// The snapshot to load: the newest decodable file in range, or the state
/// of the checkpoint line (the newest file at or below it, moved to its
/// offset; empty without one), whichever is newer. `None` replays the whole
/// log.
fn choose_start(
    dir: &Path,
    files: &[Offset],
    checkpointed_at: Option<Offset>,
    log_start: Offset,
    log_end: Offset,
) -> Option<ProducerSnapshot> {
    let in_range = |offset: Offset| offset > log_start && offset <= log_end;
    let newest_file = files
        .iter()
        .rev()
        .filter(|offset| in_range(**offset))
        .find_map(|offset| read_snapshot(dir, *offset));
    let line = checkpointed_at.filter(|at| in_range(*at)).and_then(|at| {
        let holding = files.iter().rev().find(|offset| **offset <= at);
        match holding {
            None => Some(ProducerSnapshot {
                offset: at,
                entries: Vec::new(),
            }),
            // Unreadable: the line cannot be trusted without it.
            Some(offset) => read_snapshot(dir, *offset).map(|snapshot| ProducerSnapshot {
                offset: at,
                ..snapshot
            }),
        }
    });
    match (newest_file, line) {
        (Some(file), Some(line)) if line.offset > file.offset => Some(line),
        (Some(file), _) => Some(file),
        (None, line) => line,
    }
}

fn read_snapshot(dir: &Path, offset: Offset) -> Option<ProducerSnapshot> {
    let path = dir.join(snapshot_file_name(offset));
    let decoded = std::fs::read(&path)
        .map_err(|error| error.to_string())
        .and_then(|bytes| ProducerSnapshot::decode(offset, &bytes).map_err(|e| e.to_string()));
    match decoded {
        Ok(snapshot) => Some(snapshot),
        Err(error) => {
            tracing::warn!(path = %path.display(), %error, "ignoring unreadable producer snapshot");
            None
        }
    }
}

fn list_snapshot_files(dir: &Path) -> Result<Vec<Offset>, StorageError> {
    let entries =
        std::fs::read_dir(dir).map_err(|error| StorageError::io("listing", dir, error))?;
    let mut offsets: Vec<Offset> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| parse_snapshot_file_name(&entry.file_name().to_string_lossy()))
        .collect();
    offsets.sort_unstable();
    Ok(offsets)
}

/// Deletes snapshot files; a failure only leaves a file the next open
/// ignores or deletes again.
fn remove_snapshot_files(dir: &Path, offsets: &[Offset]) {
    for offset in offsets {
        let path: PathBuf = dir.join(snapshot_file_name(*offset));
        if let Err(error) = std::fs::remove_file(&path)
            && error.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), %error, "removing a producer snapshot failed");
        }
    }
}
