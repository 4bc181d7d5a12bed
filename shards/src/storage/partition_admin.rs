//! The parts of a partition log the broker needs beyond appending and
//! reading: what consumers may see, leader epochs, live config changes,
//! DeleteRecords, and deleting the log.

use std::path::PathBuf;
use std::rc::Rc;
use std::time::Instant;

use brook_engine::log::config::{FlushPolicy, LogConfig};
use brook_engine::protocol::errors::ErrorCode;
use brook_engine::replica::divergence::{
    EpochEndOffset, Truncation, diverging_epoch, truncation_for,
};
use brook_engine::types::{LeaderEpoch, Offset, TimestampMs};

use crate::storage::error::{StorageError, io_error};
use crate::storage::log_dirs::LogDirs;
use crate::storage::partition_log::PartitionLog;
use crate::storage::state::ReadVersion;
use crate::storage::waiters::ShardNews;

/// The suffix of a deleted partition's directory until it is removed.
pub(crate) const DELETED_DIR_SUFFIX: &str = "-delete";

/// Removes a deleted partition's directory on a blocking thread.
pub(crate) async fn remove_deleted_dir(doomed: PathBuf) -> Result<(), StorageError> {
    let removed = glommio::executor()
        .spawn_blocking({
            let doomed = doomed.clone();
            move || std::fs::remove_dir_all(&doomed)
        })
        .await;
    removed.map_err(io_error("deleting", &doomed))?;
    tracing::info!(dir = %doomed.display(), "deleted partition log");
    Ok(())
}

impl PartitionLog {
    /// The offset below which consumers may read: the high watermark,
    /// which replication sets.
    pub fn high_watermark(&self) -> Offset {
        self.inner.state.borrow().high_watermark()
    }

    /// What this replica holds for replication to count: every offset a
    /// crash cannot take back under the flush policy. Under continuous
    /// flushing that is the durable offset; a topic that set
    /// `flush.messages`/`flush.ms` accepted losing unsynced data to a
    /// machine crash, so written (process-crash safe) data counts.
    pub fn counted_offset(&self) -> Offset {
        self.inner.state.borrow().counted_offset()
    }

    /// Replication's high watermark: from now on consumers read below it
    /// (at most the log end), and [`PartitionLog::wait_high_watermark`]
    /// waits for it.
    pub fn set_high_watermark(&self, high_watermark: Offset) {
        self.inner
            .state
            .borrow_mut()
            .set_high_watermark(high_watermark);
    }

    /// Neither offline nor closing: reads and appends may go ahead.
    pub fn is_usable(&self) -> bool {
        self.inner.state.borrow().check_usable().is_ok()
    }

    /// From now on, moves of the high watermark and the written offset ring `news`.
    pub(crate) fn tell_news(&self, news: Rc<ShardNews>) {
        self.inner.state.borrow_mut().news = Some(news);
    }

    /// From now on, an IO error that takes this log offline fails its log
    /// directory, `dirs`' `index`.
    pub(crate) fn tell_dir_failures(&self, dirs: std::sync::Arc<LogDirs>, index: usize) {
        self.inner.state.borrow_mut().log_dir = Some((dirs, index));
    }

    /// Takes the log offline for `cause` (its log directory failed).
    pub(crate) fn take_offline(&self, cause: &StorageError) {
        let mut state = self.inner.state.borrow_mut();
        if state.failure().is_none() {
            state.fail(cause);
        }
    }

    /// The log's read version now, before a read another shard may keep
    /// for a while ([`ReadVersion`]).
    pub fn read_version(&self) -> ReadVersion {
        self.inner.state.borrow().read_version()
    }

    /// Whether an IO error took the log offline.
    pub fn is_offline(&self) -> bool {
        self.inner.state.borrow().failure().is_some()
    }

    /// Waits until the high watermark reaches `offset`.
    pub async fn wait_high_watermark(&self, offset: Offset) -> Result<(), StorageError> {
        let receiver = self.inner.state.borrow_mut().wait_high_watermark(offset)?;
        match receiver {
            None => Ok(()),
            Some(receiver) => receiver.await.unwrap_or_else(|_| Err(self.closed_error())),
        }
    }

    /// Waits until every offset below `offset` counts as held here
    /// ([`PartitionLog::counted_offset`]).
    pub async fn wait_counted(&self, offset: Offset) -> Result<(), StorageError> {
        let continuous = self.inner.state.borrow().config.flush == FlushPolicy::Continuous;
        if continuous {
            self.wait_durable(offset).await
        } else {
            self.wait_written(offset).await
        }
    }

    pub fn config(&self) -> LogConfig {
        self.inner.state.borrow().config.clone()
    }

    /// Applies a changed topic config; rolls, retention, flushing and limits
    /// follow it from the next decision on.
    pub fn set_config(&self, config: LogConfig) {
        self.inner.state.borrow_mut().set_config(config);
    }

    /// Makes `epoch` the log's current leader epoch (persisted before any
    /// batch of it is written), as a leader does when it takes over.
    pub async fn become_leader(&self, epoch: LeaderEpoch) -> Result<(), StorageError> {
        let _turn = self.append_turn().await?;
        self.track_epoch(epoch).await
    }

    pub fn latest_epoch(&self) -> Option<LeaderEpoch> {
        self.inner.state.borrow().epochs.latest_epoch()
    }

    /// OffsetForLeaderEpoch: the end of `epoch` in this log (see
    /// [`brook_engine::log::epoch_cache::LeaderEpochCache::end_offset_for`]).
    pub fn epoch_end_offset(&self, epoch: LeaderEpoch) -> Option<(LeaderEpoch, Offset)> {
        let state = self.inner.state.borrow();
        state.epochs.end_offset_for(epoch, state.log_end_offset())
    }

    /// The leader's divergence check of a follower's fetch (see
    /// [`brook_engine::replica::divergence::diverging_epoch`]).
    pub fn diverging_epoch(
        &self,
        fetch_offset: Offset,
        last_fetched_epoch: LeaderEpoch,
    ) -> Result<Option<EpochEndOffset>, ErrorCode> {
        let state = self.inner.state.borrow();
        diverging_epoch(
            &state.epochs,
            state.log_start_offset,
            state.log_end_offset(),
            fetch_offset,
            last_fetched_epoch,
        )
    }

    /// Where this follower truncates when its leader answered that its log
    /// diverged (see [`brook_engine::replica::divergence::truncation_for`]).
    pub fn truncation_for(&self, diverging: EpochEndOffset) -> Truncation {
        let state = self.inner.state.borrow();
        truncation_for(&state.epochs, state.log_end_offset(), diverging)
    }

    /// The largest record timestamp among visible batches, if any has one.
    pub fn max_timestamp(&self) -> Option<TimestampMs> {
        let state = self.inner.state.borrow();
        state
            .segments
            .iter()
            .map(|segment| segment.largest_timestamp)
            .max()
            .filter(|largest| largest.0 >= 0)
    }

    /// DeleteRecords: moves the log start offset up to `offset` (at most the
    /// high watermark). Whole segments below it go with the next retention
    /// pass, as in Kafka. Returns the new log start offset.
    pub fn delete_records_before(&self, offset: Offset) -> Result<Offset, StorageError> {
        let high_watermark = self.high_watermark();
        let mut state = self.inner.state.borrow_mut();
        state.check_usable()?;
        if offset > high_watermark || offset.0 < 0 {
            let log_end = state.log_end_offset();
            return Err(StorageError::OffsetOutOfRange {
                requested: offset,
                log_start: state.log_start_offset,
                log_end,
            });
        }
        state.raise_log_start(offset);
        Ok(state.log_start_offset)
    }

    /// Closes the log and removes its directory (the topic was deleted):
    /// renamed out of the way at once (`<dir>.<stamp>-delete`, as Kafka
    /// marks a deleted log), then removed off the shard's thread. Unlinking
    /// gigabytes takes seconds, which on the shard would stall its requests,
    /// replica fetches, heartbeats and the controller's Raft ticks (a bench
    /// that deleted 40 GB saw an election and a fenced broker). A removal a
    /// crash interrupted is finished when the store opens next.
    pub async fn delete(&self) -> Result<(), StorageError> {
        let dir: PathBuf = self.dir();
        let _ = self.close().await;
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |since| since.as_nanos());
        let mut name = dir.file_name().unwrap_or_default().to_owned();
        name.push(format!(".{stamp:x}{DELETED_DIR_SUFFIX}"));
        let doomed = dir.with_file_name(name);
        std::fs::rename(&dir, &doomed).map_err(io_error("renaming", &dir))?;
        if let Some(parent) = dir.parent() {
            crate::storage::files::sync_directory(parent).await?;
        }
        remove_deleted_dir(doomed).await
    }

    /// When the last append happened, if any since opening.
    pub fn idle_since(&self) -> Option<Instant> {
        self.inner.state.borrow().last_append()
    }

    pub(crate) fn closed_error(&self) -> StorageError {
        StorageError::Closed { path: self.dir() }
    }
}
