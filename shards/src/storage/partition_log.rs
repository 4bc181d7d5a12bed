//! A partition's log on one shard: appends, durability, reads, retention,
//! recovery on open and a clean close.
//!
//! `append` is cheap: it validates the batches, copies them once into the
//! active segment's DMA tail and returns their offsets. Two tasks per log then
//! write and sync (see [`crate::storage::writer`]); callers wait for the
//! guarantee they need with [`PartitionLog::wait_written`] (Kafka `acks=1`) or
//! [`PartitionLog::wait_durable`] (fsynced). Appends are serialised by an async
//! lock because an append may await (a new leader epoch is persisted before its
//! first batch, a roll creates files, a full tail waits for the writer).

use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use brook_engine::log::batch::BatchView;
use brook_engine::log::compaction::record_parts::first_record_without_key;
use brook_engine::log::config::LogConfig;
use brook_engine::log::epoch_cache::LeaderEpochCache;
use brook_engine::log::file_name::SegmentFileKind;
use brook_engine::log::retention::{self, RetentionInput, SegmentSummary};
use brook_engine::log::roll::IncomingBatch;
use brook_engine::replica::producer_state::{
    ProducerOfBatch, ProducerStateConfig, TxnMarker, VerificationGuard,
};
use brook_engine::replica::txn_index::txn_index_file_name;
use brook_engine::types::{LeaderEpoch, Offset, TimestampMs};
use futures::channel::oneshot;
use glommio::Task;
use glommio::sync::Semaphore;

use crate::storage::error::StorageError;
use crate::storage::files::{
    release, segment_path, sync_directory, trim_and_sync, write_atomically,
};
use crate::storage::open::{self, EPOCH_CHECKPOINT_FILE};
use crate::storage::producers::{Checked, Origin, PartitionProducers, ProducerCheck};
use crate::storage::segment::{IndexBlock, Segment};
use crate::storage::state::{AppendInfo, LogState, LogStats};
use crate::storage::writer::{ring, run_syncer, run_writer};

/// A lock whose waiters get it in the order they first asked, the turn
/// handed from one holder to the next. glommio's semaphore is not one: a
/// task that first asks just as the lock is released takes it ahead of
/// the waiter already woken for it, so a Produce pipelined behind one that
/// waited inside the log (for its backlog to drain, a roll) could append
/// before it, out of the connection's send order.
pub(crate) type OrderedLock = tokio::sync::Semaphore;

/// Appended bytes the writer may lag behind before appends wait for it
/// (until half of them are written).
pub const UNWRITTEN_BYTES_MAX: u64 = 16 << 20;

/// What the caller knows about how the log was last closed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RecoveryHints {
    /// The shard shut down cleanly: every file is complete and consistent.
    pub clean_shutdown: bool,
    /// Offsets below this were durable with sealed, synced segments
    /// (`recovery-point-offset-checkpoint`); `None` rescans everything.
    pub recovery_point: Option<Offset>,
    /// The checkpointed log start offset.
    pub log_start_offset: Option<Offset>,
    /// The partition's line in `producer-state-checkpoint-<shard>` (see
    /// [`crate::storage::producers`]); `None` replays the whole log.
    pub producers_checkpointed_at: Option<Offset>,
}

/// Shared by the log's handle and its IO tasks. Lives on one shard.
pub(crate) struct LogInner {
    pub name: String,
    pub state: RefCell<LogState>,
    /// Idempotent producers' state; changed only under `append_lock` (and
    /// by expiry, which never races an append's check and record: both are
    /// synchronous).
    pub producers: RefCell<PartitionProducers>,
    /// Keeps client transactional appends in order while one of them waits
    /// for the coordinator's verification (KIP-890).
    pub transactional_order: OrderedLock,
    /// Serialises appends (and what must not run beside one) in the order
    /// they asked.
    pub append_lock: OrderedLock,
    pub writer_bell: Semaphore,
    pub syncer_bell: Semaphore,
    /// The last offset-index block a zero-copy read looked up by position
    /// (one per partition: a consumer reading on looks up the same block
    /// fetch after fetch).
    pub position_block: RefCell<Option<IndexBlock>>,
    tasks: RefCell<Vec<Task<()>>>,
}

/// A handle to one partition's log. Cheap to clone; lives on one shard.
#[derive(Clone)]
pub struct PartitionLog {
    pub(crate) inner: Rc<LogInner>,
}

impl std::fmt::Debug for PartitionLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "PartitionLog({})", self.inner.name)
    }
}

impl PartitionLog {
    /// Opens (or creates) the log in `dir`, recovering it as `hints` require,
    /// and starts its IO tasks.
    pub async fn open(
        dir: impl Into<PathBuf>,
        config: LogConfig,
        hints: RecoveryHints,
        now_ms: i64,
    ) -> Result<PartitionLog, StorageError> {
        let dir = dir.into();
        crate::storage::device::prepare_directory(&dir).await?;
        let opened = open::open_segments(&dir, &config, &hints, now_ms).await?;
        let name = dir.file_name().map_or_else(
            || dir.display().to_string(),
            |name| name.to_string_lossy().into_owned(),
        );
        let state = LogState::new(
            dir,
            config,
            opened.segments,
            opened.log_start_offset,
            opened.epochs,
        );
        let inner = Rc::new(LogInner {
            name,
            state: RefCell::new(state),
            producers: RefCell::new(PartitionProducers::new(ProducerStateConfig::default())),
            transactional_order: OrderedLock::new(1),
            append_lock: OrderedLock::new(1),
            writer_bell: Semaphore::new(0),
            syncer_bell: Semaphore::new(0),
            position_block: RefCell::new(None),
            tasks: RefCell::new(Vec::new()),
        });
        let log = PartitionLog { inner };
        log.load_producers(hints.producers_checkpointed_at, now_ms)
            .await?;
        let writer = glommio::spawn_local(run_writer(log.inner.clone()));
        let syncer = glommio::spawn_local(run_syncer(log.inner.clone()));
        log.inner.tasks.borrow_mut().extend([writer, syncer]);
        Ok(log)
    }

    /// Appends one or more record batches (`records` as a producer sends
    /// them) in `leader_epoch`, returning their offsets. The batches are
    /// validated first and nothing is appended if any is invalid. A batch of
    /// an idempotent producer is checked against its sequence: a retry of
    /// one of its last batches appends nothing and answers with the offsets
    /// the original got ([`AppendInfo::duplicate`]). Transactional batches
    /// are not verified (see [`PartitionLog::append_verified`]).
    pub async fn append(
        &self,
        records: &[u8],
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        self.append_as(records, leader_epoch, now_ms, Origin::Client(None))
            .await
    }

    /// [`PartitionLog::append`] of a client's batch whose transaction this
    /// partition verified with the coordinator (KIP-890): `guard` is what
    /// [`PartitionLog::start_verification`] returned.
    pub async fn append_verified(
        &self,
        records: &[u8],
        guard: VerificationGuard,
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        self.append_as(records, leader_epoch, now_ms, Origin::Client(Some(guard)))
            .await
    }

    /// [`PartitionLog::append`] of a producer's transactional batch that a
    /// coordinator writes (the group coordinator's transactional offset
    /// commit): its epoch and transaction are checked, its sequence is not,
    /// as Kafka's `AppendOrigin.COORDINATOR`.
    pub async fn append_from_coordinator(
        &self,
        records: &[u8],
        leader_epoch: LeaderEpoch,
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        self.append_as(records, leader_epoch, now_ms, Origin::Coordinator)
            .await
    }

    pub(crate) async fn append_as(
        &self,
        records: &[u8],
        leader_epoch: LeaderEpoch,
        now_ms: i64,
        origin: Origin,
    ) -> Result<AppendInfo, StorageError> {
        let (max_message_bytes, compacted) = {
            let config = &self.inner.state.borrow().config;
            (config.max_message_bytes, config.cleanup_policy.compacts())
        };
        let batches = validate_batches(records, max_message_bytes)?;
        if compacted && origin != Origin::Marker {
            check_keys(&batches)?;
        }
        let producer = producer_batch(&batches, origin)?;
        let _permit = self.append_turn().await?;
        self.track_epoch(leader_epoch).await?;
        self.drain_backlog().await?;
        // From this check to its record below, the append lock keeps every
        // other append of this log out.
        let pending = match self.check_producer(producer)? {
            Checked::Append(pending) => pending,
            Checked::Duplicate(info) => return Ok(info),
        };
        let incoming = {
            let state = self.inner.state.borrow();
            let mut next = state.log_end_offset();
            for batch in &batches {
                batch.check_placement(next)?;
                next = Offset(next.0 + i64::from(batch.last_offset_delta()) + 1);
            }
            let max_timestamp = batches
                .iter()
                .map(BatchView::max_timestamp)
                .max()
                .unwrap_or(TimestampMs::NONE);
            IncomingBatch {
                size_bytes: records.len() as u64,
                last_offset: Offset(next.0 - 1),
                max_timestamp,
            }
        };
        let roll = self.inner.state.borrow().roll_needed(&incoming, now_ms);
        if roll.is_some() {
            self.roll(now_ms).await?;
        }
        let info = self
            .inner
            .state
            .borrow_mut()
            .append_batches(&batches, leader_epoch, now_ms);
        self.record_producer(pending, info.base_offset);
        ring(&self.inner.writer_bell);
        Ok(info)
    }

    /// The log's turn to append (see `append_lock`), once it can take
    /// appends.
    pub(crate) async fn append_turn(
        &self,
    ) -> Result<tokio::sync::SemaphorePermit<'_>, StorageError> {
        let permit = self
            .inner
            .append_lock
            .acquire()
            .await
            .map_err(|_| self.closed())?;
        self.inner.state.borrow().check_usable()?;
        Ok(permit)
    }

    /// Waits while the writer lags too far behind the appends
    /// ([`UNWRITTEN_BYTES_MAX`]).
    pub(crate) async fn drain_backlog(&self) -> Result<(), StorageError> {
        let backlog = self
            .inner
            .state
            .borrow()
            .backlog_target(UNWRITTEN_BYTES_MAX);
        match backlog {
            Some(target) => self.wait_written(target).await,
            None => Ok(()),
        }
    }

    /// Persists a new leader epoch before its first batch (see
    /// [`brook_engine::log::epoch_cache`]); rejects an older one.
    pub(crate) async fn track_epoch(&self, epoch: LeaderEpoch) -> Result<(), StorageError> {
        if epoch.0 < 0 {
            return Ok(());
        }
        self.change_epochs(|epochs, log_end| {
            if let Some(latest) = epochs.latest_epoch().filter(|latest| *latest > epoch) {
                return Err(StorageError::StaleLeaderEpoch { epoch, latest });
            }
            Ok(epochs.assign(epoch, log_end))
        })
        .await
    }

    /// Changes the epoch cache by `change` (given the log end; false when
    /// it changed nothing). The cache takes the change only once the
    /// checkpoint holds it: batches of an epoch the checkpoint does not
    /// hold would fail recovery's check.
    pub(crate) async fn change_epochs(
        &self,
        change: impl FnOnce(&mut LeaderEpochCache, Offset) -> Result<bool, StorageError>,
    ) -> Result<(), StorageError> {
        let (path, epochs) = {
            let state = self.inner.state.borrow();
            let mut epochs = state.epochs.clone();
            if !change(&mut epochs, state.log_end_offset())? {
                return Ok(());
            }
            (state.dir().join(EPOCH_CHECKPOINT_FILE), epochs)
        };
        write_atomically(&path, epochs.encode().as_bytes()).await?;
        self.inner.state.borrow_mut().epochs = epochs;
        Ok(())
    }

    /// Makes a new, empty segment at the log end the active one.
    pub(crate) async fn roll(&self, now_ms: i64) -> Result<(), StorageError> {
        let (dir, base, interval) = {
            let state = self.inner.state.borrow();
            (
                state.dir().to_owned(),
                state.log_end_offset(),
                state.config.index_interval_bytes,
            )
        };
        let segment = Segment::create(&dir, base, now_ms, interval).await?;
        sync_directory(&dir).await?;
        self.inner.state.borrow_mut().push_segment(segment);
        ring(&self.inner.writer_bell);
        self.snapshot_at_roll().await;
        Ok(())
    }

    /// Waits until every offset below `offset` is written to its file.
    pub async fn wait_written(&self, offset: Offset) -> Result<(), StorageError> {
        let receiver = self.inner.state.borrow_mut().wait_written(offset)?;
        self.await_receiver(receiver).await
    }

    /// Waits until every offset below `offset` is on stable storage.
    pub async fn wait_durable(&self, offset: Offset) -> Result<(), StorageError> {
        let receiver = self.inner.state.borrow_mut().wait_durable(offset)?;
        ring(&self.inner.syncer_bell);
        self.await_receiver(receiver).await
    }

    async fn await_receiver(
        &self,
        receiver: Option<oneshot::Receiver<Result<(), StorageError>>>,
    ) -> Result<(), StorageError> {
        match receiver {
            None => Ok(()),
            Some(receiver) => receiver.await.unwrap_or_else(|_| Err(self.closed())),
        }
    }

    /// Makes everything appended so far durable; returns the durable offset.
    pub async fn flush(&self) -> Result<Offset, StorageError> {
        let end = self.log_end_offset();
        self.wait_durable(end).await?;
        Ok(end)
    }

    pub fn log_start_offset(&self) -> Offset {
        self.inner.state.borrow().log_start_offset
    }

    /// The offset the next appended record gets.
    pub fn log_end_offset(&self) -> Offset {
        self.inner.state.borrow().log_end_offset()
    }

    pub fn written_offset(&self) -> Offset {
        self.inner.state.borrow().written_offset()
    }

    pub fn durable_offset(&self) -> Offset {
        self.inner.state.borrow().durable_offset()
    }

    /// What to checkpoint as this log's recovery point.
    pub fn recovery_point(&self) -> Offset {
        self.inner.state.borrow().recovery_point()
    }

    /// Counters of appends, writes, syncs and rolls since the log was opened.
    pub fn stats(&self) -> LogStats {
        self.inner.state.borrow().stats
    }

    /// Bytes of record batches in the log (what `retention.bytes` limits).
    pub fn size_bytes(&self) -> u64 {
        self.inner
            .state
            .borrow()
            .segments
            .iter()
            .map(|segment| segment.log_bytes)
            .sum()
    }

    pub fn segment_count(&self) -> usize {
        self.inner.state.borrow().segments.len()
    }

    /// The log's directory.
    pub fn dir(&self) -> PathBuf {
        self.inner.state.borrow().dir().to_owned()
    }

    /// Drops the tail cache if nothing was appended since `since`: an idle
    /// partition should cost almost nothing.
    pub fn release_idle_memory(&self, since: std::time::Instant) {
        self.inner.state.borrow_mut().release_idle_memory(since);
    }

    /// Heap held by this log (buffers, indexes, bookkeeping).
    pub fn heap_bytes(&self) -> usize {
        size_of::<LogInner>() + self.inner.name.capacity() + self.inner.state.borrow().heap_bytes()
    }

    /// Deletes whole old segments as retention requires (never at or above
    /// `high_watermark`). Returns how many segments were deleted.
    pub async fn apply_retention(
        &self,
        high_watermark: Offset,
        now_ms: i64,
    ) -> Result<usize, StorageError> {
        let _permit = self.append_turn().await?;
        let decision = {
            let state = self.inner.state.borrow();
            let summaries: Vec<SegmentSummary> = state.segments.iter().map(summarize).collect();
            let input = RetentionInput {
                segments: &summaries,
                log_start_offset: state.log_start_offset,
                log_end_offset: state.log_end_offset(),
                high_watermark: high_watermark.min(state.durable_offset()),
                now_ms,
            };
            retention::decide(&input, &state.config)
        };
        if decision.delete_segments == 0 {
            return Ok(0);
        }
        if decision.roll_first {
            self.roll(now_ms).await?;
        }
        let removed: Vec<Segment> = {
            let mut state = self.inner.state.borrow_mut();
            let sealed = state
                .segments
                .iter()
                .take_while(|segment| segment.is_sealed())
                .count();
            let count = decision
                .delete_segments
                .min(sealed)
                .min(state.segments.len() - 1);
            let removed: Vec<Segment> = state.segments.drain(..count).collect();
            let first_kept = state.segments[0].base_offset;
            let start = if count == decision.delete_segments {
                decision.log_start_offset
            } else {
                first_kept
            };
            state.raise_log_start(start);
            removed
        };
        let dir = self.dir();
        for segment in &removed {
            delete_segment_files(&dir, segment.base_offset)?;
        }
        let first_kept = self.inner.state.borrow().segments[0].base_offset;
        self.forget_txn_indexes_below(first_kept);
        tracing::info!(log = %self.inner.name, segments = removed.len(), reason = ?decision.reason, "retention deleted segments");
        Ok(removed.len())
    }

    /// Closes the log cleanly: waits for in-flight appends, writes and syncs
    /// everything, trims the active segment's files to size. Returns the log
    /// end offset (every offset below it is durable). From its start, reads
    /// and appends are refused with [`StorageError::Closed`]; at its end,
    /// whoever still waits for an offset to be written or durable gets that
    /// error too.
    pub async fn close(&self) -> Result<Offset, StorageError> {
        let _permit = self
            .inner
            .append_lock
            .acquire()
            .await
            .map_err(|_| self.closed())?;
        {
            let mut state = self.inner.state.borrow_mut();
            state.closing = true;
            state.invalidate_reads();
        }
        let result = self.flush_and_trim().await;
        self.inner.state.borrow_mut().fail_waiters_on_close();
        if result.is_ok() {
            self.inner.append_lock.close();
        }
        result
    }

    /// The body of [`PartitionLog::close`]: stops the IO tasks once they
    /// wrote everything, then trims and syncs the active segment's files.
    async fn flush_and_trim(&self) -> Result<Offset, StorageError> {
        ring(&self.inner.writer_bell);
        ring(&self.inner.syncer_bell);
        let tasks: Vec<Task<()>> = self.inner.tasks.borrow_mut().drain(..).collect();
        for task in tasks {
            task.await;
        }
        let (files, active_base, end) = {
            let state = self.inner.state.borrow();
            if let Some(failure) = state.failure() {
                return Err(failure.clone());
            }
            let active = state.active();
            let files = active.active().map(|open| {
                [&open.log, &open.offset_index, &open.time_index].map(|appender| {
                    (
                        appender.file().clone(),
                        appender.path().to_owned(),
                        appender.len(),
                    )
                })
            });
            (files, active.base_offset, state.log_end_offset())
        };
        for file in files.iter().flatten() {
            release(trim_and_sync(file).await?, &file.1).await?;
        }
        let mut state = self.inner.state.borrow_mut();
        let log_bytes = state.active().log_bytes;
        state.complete_sync(active_base, log_bytes);
        Ok(end)
    }

    fn closed(&self) -> StorageError {
        StorageError::Closed { path: self.dir() }
    }
}

/// Checks the shape of every batch in `records` before anything is appended.
fn validate_batches(
    records: &[u8],
    max_message_bytes: u64,
) -> Result<Vec<BatchView<'_>>, StorageError> {
    parse_batches(records, |batch| {
        if batch.size_bytes() as u64 > max_message_bytes {
            return Err(StorageError::BatchTooLarge {
                size: batch.size_bytes(),
                max: max_message_bytes,
            });
        }
        Ok(batch.validate_for_append(Offset(0))?)
    })
}

/// Every batch of a non-empty `records`, each passing `check`.
pub(crate) fn parse_batches<'a>(
    records: &'a [u8],
    check: impl Fn(&BatchView<'a>) -> Result<(), StorageError>,
) -> Result<Vec<BatchView<'a>>, StorageError> {
    if records.is_empty() {
        return Err(StorageError::EmptyAppend);
    }
    let mut batches = Vec::new();
    let mut rest = records;
    while !rest.is_empty() {
        let batch = BatchView::parse_prefix(rest)?;
        check(&batch)?;
        rest = &rest[batch.size_bytes()..];
        batches.push(batch);
    }
    Ok(batches)
}

/// What producer state must check of an append: the idempotent or
/// transactional batch, or the marker, it carries. Such an append must be
/// that one batch: its check and its record in the producer state are one
/// step (Kafka's clients send one batch per partition).
fn producer_batch(
    batches: &[BatchView<'_>],
    origin: Origin,
) -> Result<ProducerCheck, StorageError> {
    let mut check = ProducerCheck::None;
    for batch in batches {
        match (ProducerOfBatch::read(batch.header()), origin) {
            (ProducerOfBatch::None, _) => {}
            (ProducerOfBatch::Data(data), Origin::Client(guard)) => {
                check = ProducerCheck::Data(data, guard);
            }
            (ProducerOfBatch::Data(data), Origin::Coordinator) => {
                check = ProducerCheck::Coordinator(data);
            }
            (ProducerOfBatch::ControlMarker { .. }, Origin::Marker) => {
                let marker = TxnMarker::read(batch).map_err(|error| StorageError::Corrupt {
                    path: PathBuf::new(),
                    reason: format!("a marker batch Brook built does not read back: {error}"),
                })?;
                if let Some(marker) = marker {
                    check = ProducerCheck::Marker(marker);
                }
            }
            // Clients cannot produce control batches (refused before here),
            // and markers carry nothing else.
            (ProducerOfBatch::ControlMarker { .. }, Origin::Client(_) | Origin::Coordinator)
            | (ProducerOfBatch::Data(_), Origin::Marker) => {
                return Err(StorageError::ControlBatchMisplaced);
            }
        }
    }
    if check != ProducerCheck::None && batches.len() > 1 {
        return Err(StorageError::ProducerBatchNotAlone {
            batches: batches.len(),
        });
    }
    Ok(check)
}

/// Kafka refuses a record without a key on a compacted topic: the cleaner
/// could never tell which value of it is the latest.
fn check_keys(batches: &[BatchView<'_>]) -> Result<(), StorageError> {
    for batch in batches {
        match first_record_without_key(batch) {
            Ok(None) => {}
            Ok(Some(record_index)) => return Err(StorageError::RecordWithoutKey { record_index }),
            Err(error) => return Err(StorageError::InvalidRecords(error)),
        }
    }
    Ok(())
}

fn summarize(segment: &Segment) -> SegmentSummary {
    let largest_timestamp = if segment.largest_timestamp.0 >= 0 {
        segment.largest_timestamp
    } else {
        // Kafka falls back to the file's modification time.
        let modified = std::fs::metadata(&segment.log_path)
            .and_then(|meta| meta.modified())
            .ok();
        let millis = modified
            .and_then(|time| time.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(i64::MAX, |d| d.as_millis() as i64);
        TimestampMs(millis)
    };
    SegmentSummary {
        base_offset: segment.base_offset,
        size_bytes: segment.log_bytes,
        largest_timestamp,
    }
}

pub(crate) fn delete_segment_files(dir: &Path, base_offset: Offset) -> Result<(), StorageError> {
    let txn_index = dir.join(txn_index_file_name(base_offset));
    let paths = SegmentFileKind::ALL
        .map(|kind| segment_path(dir, base_offset, kind))
        .into_iter()
        .chain([txn_index]);
    for path in paths {
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
            Err(error) => return Err(StorageError::io("deleting", &path, error)),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use super::OrderedLock;
    use crate::runtime::block_on;

    /// The race that reordered pipelined produces: the lock is released to
    /// a task that waits for it, and before that task runs, another asks
    /// for the first time (glommio polls a task as it is spawned, as a
    /// mesh job or a pipelined request is). The waiter asked first, so it
    /// must be served first; glommio's semaphore gave the lock to the one
    /// that came later (checked: this test fails with it).
    #[test]
    fn the_lock_goes_to_waiters_in_the_order_they_asked() {
        let order = block_on(async {
            let lock = Rc::new(OrderedLock::new(1));
            let order = Rc::new(RefCell::new(Vec::new()));
            let held = lock.acquire().await.unwrap();
            let task = |name: &'static str| {
                let (lock, order) = (lock.clone(), order.clone());
                glommio::spawn_local(async move {
                    let _turn = lock.acquire().await.unwrap();
                    order.borrow_mut().push(name);
                })
            };
            let waiter = task("asked first");
            // The waiter runs, finds the lock held and waits.
            glommio::timer::sleep(std::time::Duration::from_millis(1)).await;
            drop(held);
            let late = task("asked second");
            waiter.await;
            late.await;
            Rc::try_unwrap(order).unwrap().into_inner()
        });
        assert_eq!(order, ["asked first", "asked second"]);
    }
}
