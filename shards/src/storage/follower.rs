//! A follower's log (SPEC R2, R5, R6): appends of the leader's batches as
//! the leader wrote them, and truncation at run time.
//!
//! A replicated append keeps every batch's offsets, leader epoch,
//! timestamps and producer fields, may carry many producers' batches and
//! transaction markers at once, and replays them into the producer state
//! (the engine's `replay_batch` / `replay_marker`, as recovery does), so a
//! follower that becomes leader deduplicates retries and knows open
//! transactions. A new leader epoch in a batch is persisted to the
//! `leader-epoch-checkpoint` before the batch, as on the leader.
//!
//! Truncation closes the log, cuts its files at a batch boundary and opens
//! it again through recovery, which rebuilds the indexes of the cut segment,
//! trims the epoch cache and the aborted-transaction index, drops producer
//! snapshots past the end and replays the producer state: the same code
//! that makes a crashed log consistent. It is rare (a leader change that
//! left a diverged suffix), so its cost (one segment's index rebuild) is
//! paid rarely; the returned handle replaces the closed one.

use brook_engine::log::batch::BatchView;
use brook_engine::log::epoch_cache::LeaderEpochCache;
use brook_engine::log::file_name::SegmentFileKind;
use brook_engine::log::recovery::Contiguity;
use brook_engine::log::roll::IncomingBatch;
use brook_engine::replica::producer_state::{ProducerOfBatch, TxnMarker};
use brook_engine::types::{Offset, TimestampMs};

use crate::storage::error::{StorageError, io_error};
use crate::storage::files::{open_dma, release, segment_path, sync_directory, write_atomically};
use crate::storage::open::EPOCH_CHECKPOINT_FILE;
use crate::storage::partition_log::{
    PartitionLog, RecoveryHints, delete_segment_files, parse_batches,
};
use crate::storage::read::CutPoint;
use crate::storage::state::AppendInfo;
use crate::storage::writer::ring;

/// How a follower's log is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogCut {
    /// Drop every batch that ends at or after this offset (a batch holding
    /// it goes whole, as in Kafka's `truncateTo`).
    To(Offset),
    /// Empty the log and start it at this offset (the leader deleted
    /// everything it holds; Kafka's `truncateFullyAndStartAt`).
    FullyAndStartAt(Offset),
}

impl PartitionLog {
    /// Appends batches a leader sent in a Fetch response (Kafka's
    /// `appendAsFollower`). Refused whole, appending nothing: a batch that
    /// fails its CRC or does not follow the log end (the first must start
    /// at it, or past it in a compacted log) —
    /// [`StorageError::UnexpectedAppendOffset`] — or one of an epoch older
    /// than the log's latest.
    pub async fn append_as_follower(
        &self,
        records: &[u8],
        now_ms: i64,
    ) -> Result<AppendInfo, StorageError> {
        let batches = parse_replicated(records)?;
        let _permit = self.append_turn().await?;
        let incoming = {
            let state = self.inner.state.borrow();
            let contiguity = state.config.cleanup_policy.contiguity();
            check_follows(&batches, state.log_end_offset(), contiguity)?;
            incoming(&batches, records.len())
        };
        self.track_replicated_epochs(&batches).await?;
        self.drain_backlog().await?;
        if self
            .inner
            .state
            .borrow()
            .roll_needed(&incoming, now_ms)
            .is_some()
        {
            self.roll(now_ms).await?;
        }
        let info = self.inner.state.borrow_mut().append_replicated(&batches);
        self.replay_producers(&batches)?;
        ring(&self.inner.writer_bell);
        Ok(info)
    }

    /// Persists the epochs `batches` start, before any of them is placed.
    async fn track_replicated_epochs(&self, batches: &[BatchView<'_>]) -> Result<(), StorageError> {
        let (path, epochs) = {
            let state = self.inner.state.borrow();
            let Some(epochs) = replicated_epochs(&state.epochs, batches)? else {
                return Ok(());
            };
            (state.dir().join(EPOCH_CHECKPOINT_FILE), epochs)
        };
        write_atomically(&path, epochs.encode().as_bytes()).await?;
        self.inner.state.borrow_mut().epochs = epochs;
        Ok(())
    }

    /// The producer state learns what the leader's producers wrote.
    fn replay_producers(&self, batches: &[BatchView<'_>]) -> Result<(), StorageError> {
        for batch in batches {
            let completed = match ProducerOfBatch::read(batch.header()) {
                ProducerOfBatch::None => None,
                ProducerOfBatch::Data(data) => {
                    let mut producers = self.inner.producers.borrow_mut();
                    producers.manager.replay_batch(&data, batch.base_offset());
                    None
                }
                ProducerOfBatch::ControlMarker { .. } => {
                    let marker = TxnMarker::read(batch).map_err(|error| StorageError::Corrupt {
                        path: self.dir(),
                        reason: format!("a replicated marker does not read: {error}"),
                    })?;
                    let mut producers = self.inner.producers.borrow_mut();
                    marker.and_then(|marker| {
                        producers
                            .manager
                            .replay_marker(&marker, batch.base_offset())
                    })
                }
            };
            if let Some(completed) = completed {
                self.complete_transaction(completed);
            }
        }
        Ok(())
    }

    /// Cuts the log as `cut` says and returns it reopened; this handle is
    /// closed. A cut at or past the log end changes nothing and returns
    /// this handle.
    pub async fn truncate(&self, cut: LogCut, now_ms: i64) -> Result<PartitionLog, StorageError> {
        match cut {
            LogCut::To(offset) if offset >= self.log_end_offset() => {
                // Kafka's `truncateTo` past the end still drops the epochs
                // that start at the end: this broker may have recorded an
                // epoch as leader and appended nothing of it before another
                // leader was elected. Kept, its fetches would name that
                // epoch, which the leader never had, and diverge forever.
                let _turn = self.append_turn().await?;
                self.change_epochs(|epochs, log_end| Ok(epochs.truncate_from_end(log_end)))
                    .await?;
                Ok(self.clone())
            }
            LogCut::To(offset) => {
                self.wait_written(self.log_end_offset()).await?;
                let point = self.cut_point(offset).await?;
                let log_start = self.log_start_offset().min(point.log_end_offset);
                self.reopen_cut(Some(point), log_start, now_ms).await
            }
            LogCut::FullyAndStartAt(offset) => self.reopen_cut(None, offset, now_ms).await,
        }
    }

    /// Closes the log, keeps its segments up to `cut` (none without one)
    /// and opens it again through recovery. The reopened log rings the
    /// same news and fails the same log directory as this one did; an IO
    /// error on the way fails that directory.
    async fn reopen_cut(
        &self,
        cut: Option<CutPoint>,
        log_start: Offset,
        now_ms: i64,
    ) -> Result<PartitionLog, StorageError> {
        let (news, log_dir) = {
            let state = self.inner.state.borrow();
            (state.news.clone(), state.log_dir.clone())
        };
        match self.cut_and_reopen(cut, log_start, now_ms).await {
            Ok(reopened) => {
                if let Some(news) = news {
                    reopened.tell_news(news);
                }
                if let Some((dirs, index)) = log_dir {
                    reopened.tell_dir_failures(dirs, index);
                }
                Ok(reopened)
            }
            Err(error) => {
                if let Some((dirs, index)) = log_dir {
                    dirs.fail_on(index, &error);
                }
                Err(error)
            }
        }
    }

    async fn cut_and_reopen(
        &self,
        cut: Option<CutPoint>,
        log_start: Offset,
        now_ms: i64,
    ) -> Result<PartitionLog, StorageError> {
        let (dir, config, bases) = {
            let state = self.inner.state.borrow();
            let bases: Vec<Offset> = state.segments.iter().map(|s| s.base_offset).collect();
            (state.dir().to_owned(), state.config.clone(), bases)
        };
        self.close().await?;
        let keep_through = cut.map(|cut| cut.segment_base);
        for base in bases
            .iter()
            .filter(|base| keep_through.is_none_or(|kept| **base > kept))
        {
            delete_segment_files(&dir, *base)?;
        }
        if let Some(cut) = cut {
            let path = segment_path(&dir, cut.segment_base, SegmentFileKind::Log);
            let file = open_dma(&path, false).await?;
            file.truncate(cut.position)
                .await
                .map_err(io_error("truncating", &path))?;
            file.fdatasync().await.map_err(io_error("syncing", &path))?;
            release(file, &path).await?;
        } else {
            // Kafka's `truncateFullyAndStartAt` clears the epoch cache too:
            // the epochs below the new start describe batches no longer here.
            let path = dir.join(EPOCH_CHECKPOINT_FILE);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(StorageError::io("deleting", &path, error)),
            }
        }
        sync_directory(&dir).await?;
        tracing::info!(dir = %dir.display(), ?cut, %log_start, "truncated the log");
        let hints = RecoveryHints {
            clean_shutdown: false,
            // Everything below the cut was durable and its segments sealed:
            // only the cut segment's tail is looked at again.
            recovery_point: cut.map(|cut| cut.log_end_offset),
            log_start_offset: Some(log_start),
            producers_checkpointed_at: None,
        };
        PartitionLog::open(dir, config, hints, now_ms).await
    }
}

/// Every batch of a replicated append, checked whole (CRC, offsets in
/// range). A leader's compacted batches may hold fewer records than their
/// offset span, so the producer's count rule is not applied.
fn parse_replicated(records: &[u8]) -> Result<Vec<BatchView<'_>>, StorageError> {
    parse_batches(records, |batch| {
        batch.verify_crc()?;
        Ok(batch.check_placement(batch.base_offset())?)
    })
}

/// Batches must follow the log end and each other: exactly in a log with
/// contiguous offsets, past it in a compacted one.
fn check_follows(
    batches: &[BatchView<'_>],
    log_end_offset: Offset,
    contiguity: Contiguity,
) -> Result<(), StorageError> {
    let mut next = log_end_offset;
    for batch in batches {
        let base = batch.base_offset();
        let follows = match contiguity {
            Contiguity::Strict => base == next,
            Contiguity::GapsAllowed => base >= next,
        };
        if !follows {
            return Err(StorageError::UnexpectedAppendOffset {
                first: base,
                expected: next,
            });
        }
        next = batch.last_offset().next();
    }
    Ok(())
}

fn incoming(batches: &[BatchView<'_>], size_bytes: usize) -> IncomingBatch {
    IncomingBatch {
        size_bytes: size_bytes as u64,
        last_offset: batches.last().map_or(Offset(0), BatchView::last_offset),
        max_timestamp: batches
            .iter()
            .map(BatchView::max_timestamp)
            .max()
            .unwrap_or(TimestampMs::NONE),
    }
}

/// The epoch cache after `batches`, if they start an epoch (`None` if
/// not); an epoch older than the latest is refused.
fn replicated_epochs(
    current: &LeaderEpochCache,
    batches: &[BatchView<'_>],
) -> Result<Option<LeaderEpochCache>, StorageError> {
    let mut epochs = current.clone();
    let mut changed = false;
    for batch in batches {
        let epoch = batch.partition_leader_epoch();
        if let Some(latest) = epochs.latest_epoch().filter(|latest| *latest > epoch) {
            return Err(StorageError::StaleLeaderEpoch { epoch, latest });
        }
        if epoch.0 >= 0 {
            changed |= epochs.assign(epoch, batch.base_offset());
        }
    }
    Ok(changed.then_some(epochs))
}
