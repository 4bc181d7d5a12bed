//! A shard's log cleaner (Kafka's `LogCleaner` and `LogCleanerManager`, one
//! per shard instead of a pool of threads): it cleans the filthiest due
//! compacted log of its shard, one pass at a time, and sleeps
//! `log.cleaner.backoff.ms` whenever none is due.
//!
//! Where each log's last pass ended is its cleaner checkpoint, kept in its
//! log directory as `cleaner-offset-checkpoint-<shard>` (Kafka's
//! `cleaner-offset-checkpoint` format), so a restart does not clean again
//! what is clean. A log whose pass fails on damaged data is left alone until
//! the broker restarts (Kafka's uncleanable partitions); its data stays
//! readable, only uncompacted.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use brook_engine::log::compaction::DEDUPE_BUFFER_BYTES_DEFAULT;
use brook_engine::log::compaction::offset_map::OFFSET_MAP_ENTRY_OVERHEAD_BYTES;
use brook_engine::log::compaction::plan::LogToClean;
use brook_engine::types::{Offset, TopicPartition};
use glommio::Task;

use crate::storage::clean_log::CleanOutcome;
use crate::storage::error::StorageError;
use crate::storage::log_dirs::LogDirs;
use crate::storage::partition_log::PartitionLog;
use crate::storage::store::{Store, wall_clock_ms};

/// The smallest offset map a shard cleans with: a budget shared by many
/// shards can come out tiny, and a map must hold a batch's keys to make
/// progress.
pub const CLEANER_MAP_BYTES_MIN: usize = 1024 * OFFSET_MAP_ENTRY_OVERHEAD_BYTES;

/// How a shard's cleaner runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CleanerSchedule {
    /// `log.cleaner.backoff.ms`: the sleep when no log is due.
    pub backoff: Duration,
    /// This shard's share of `log.cleaner.dedupe.buffer.size`.
    pub map_bytes: usize,
}

impl Default for CleanerSchedule {
    fn default() -> CleanerSchedule {
        CleanerSchedule {
            backoff: Duration::from_millis(
                brook_engine::log::compaction::CLEANER_BACKOFF_MS_DEFAULT,
            ),
            map_bytes: DEDUPE_BUFFER_BYTES_DEFAULT as usize,
        }
    }
}

/// The cleaner's state. Lives on its shard, inside the [`Store`].
pub(crate) struct Cleaner {
    dirs: Arc<LogDirs>,
    /// The checkpoint file's name in each log directory.
    checkpoint_name: String,
    checkpoints: RefCell<HashMap<TopicPartition, Offset>>,
    uncleanable: RefCell<HashSet<TopicPartition>>,
    task: RefCell<Option<Task<()>>>,
    /// What the running cleaner reads before each pass (dynamic broker
    /// configs change it).
    schedule: Cell<CleanerSchedule>,
}

impl Cleaner {
    /// The cleaner of shard `shard`, with the checkpoints it left in the
    /// log directories `dirs`.
    pub fn open(dirs: &Arc<LogDirs>, shard: u16) -> Cleaner {
        let checkpoint_name = format!("cleaner-offset-checkpoint-{shard}");
        Cleaner {
            checkpoints: RefCell::new(dirs.read_checkpoints(&checkpoint_name)),
            dirs: dirs.clone(),
            checkpoint_name,
            uncleanable: RefCell::new(HashSet::new()),
            task: RefCell::new(None),
            schedule: Cell::new(CleanerSchedule::default()),
        }
    }

    /// Forgets a partition whose log is deleted.
    pub fn forget(&self, topic_partition: &TopicPartition) {
        self.checkpoints.borrow_mut().remove(topic_partition);
        self.uncleanable.borrow_mut().remove(topic_partition);
    }

    /// Stops the cleaner's task (a swap it interrupts is finished or undone
    /// when the log next opens).
    pub fn stop(&self) {
        drop(self.task.borrow_mut().take());
    }

    async fn save(&self) -> Result<(), StorageError> {
        let entries: Vec<(TopicPartition, Offset)> = self
            .checkpoints
            .borrow()
            .iter()
            .map(|(tp, offset)| (tp.clone(), *offset))
            .collect();
        self.dirs
            .write_checkpoints(&self.checkpoint_name, &entries)
            .await
    }
}

impl Store {
    /// Where a partition's last cleaning pass ended, if it had one.
    pub fn cleaner_checkpoint(&self, topic_partition: &TopicPartition) -> Option<Offset> {
        self.cleaner
            .checkpoints
            .borrow()
            .get(topic_partition)
            .copied()
    }

    /// Runs one cleaning pass over this shard's filthiest due compacted log
    /// (with an offset map of at most `map_bytes`), and saves its new
    /// checkpoint. `None` if no log was due.
    pub async fn clean_filthiest_log(
        &self,
        now_ms: i64,
        map_bytes: usize,
    ) -> Option<(TopicPartition, CleanOutcome)> {
        let (topic_partition, log, plan) = self.filthiest_log(now_ms).await?;
        let cleaned = log.clean(&plan, map_bytes, now_ms).await;
        // A partition deleted (and perhaps created again) during the pass
        // keeps nothing from it.
        let current = self
            .partition(&topic_partition)
            .is_some_and(|current| Rc::ptr_eq(&current.inner, &log.inner));
        let outcome = match cleaned {
            Ok(Some(outcome)) => outcome,
            Ok(None) => {
                if current {
                    let mut uncleanable = self.cleaner.uncleanable.borrow_mut();
                    uncleanable.insert(topic_partition);
                }
                return None;
            }
            Err(error) => {
                if current {
                    self.on_clean_error(topic_partition, &error);
                }
                return None;
            }
        };
        if outcome.completed && current {
            self.cleaner
                .checkpoints
                .borrow_mut()
                .insert(topic_partition.clone(), outcome.end_offset);
            if let Err(error) = self.cleaner.save().await {
                tracing::error!(%error, "writing the cleaner checkpoint failed");
            }
        }
        tracing::info!(
            partition = %topic_partition,
            ratio = plan.cleanable_ratio(),
            end_offset = %outcome.end_offset,
            segments = format!("{} -> {}", outcome.segments_before, outcome.segments_after),
            bytes = format!("{} -> {}", outcome.bytes_before, outcome.bytes_after),
            completed = outcome.completed,
            "cleaned log"
        );
        Some((topic_partition, outcome))
    }

    /// The due log with the largest cleanable ratio.
    async fn filthiest_log(
        &self,
        now_ms: i64,
    ) -> Option<(TopicPartition, PartitionLog, LogToClean)> {
        let mut filthiest: Option<(TopicPartition, PartitionLog, LogToClean)> = None;
        for (topic_partition, log) in self.partitions() {
            if self.cleaner.uncleanable.borrow().contains(&topic_partition) {
                continue;
            }
            let checkpoint = self.cleaner_checkpoint(&topic_partition);
            let plan = match log.cleanable(checkpoint, now_ms).await {
                Ok(Some(plan)) if plan.is_due(&log.config()) => plan,
                Ok(_) => continue,
                Err(error) => {
                    tracing::debug!(partition = %topic_partition, %error, "not cleaning");
                    continue;
                }
            };
            let dirtier = filthiest
                .as_ref()
                .is_none_or(|(_, _, best)| plan.cleanable_ratio() > best.cleanable_ratio());
            if dirtier {
                filthiest = Some((topic_partition, log, plan));
            }
        }
        filthiest
    }

    /// A closed or offline log is skipped; damage makes the log uncleanable.
    fn on_clean_error(&self, topic_partition: TopicPartition, error: &StorageError) {
        match error {
            StorageError::Closed { .. } | StorageError::Offline { .. } => {
                tracing::debug!(partition = %topic_partition, %error, "cleaning stopped");
            }
            _ => {
                tracing::error!(partition = %topic_partition, %error, "cleaning failed; the log is not cleaned again until restart");
                self.cleaner
                    .uncleanable
                    .borrow_mut()
                    .insert(topic_partition);
            }
        }
    }

    /// The cleaner's schedule from its next pass on
    /// (`log.cleaner.backoff.ms`, `log.cleaner.dedupe.buffer.size` set
    /// while the broker runs).
    pub fn set_cleaner_schedule(&self, schedule: CleanerSchedule) {
        self.cleaner.schedule.set(schedule);
    }

    /// Starts the shard's cleaner: passes back to back while logs are due,
    /// `schedule.backoff` between checks otherwise.
    pub(crate) fn start_cleaner(self: &Rc<Self>, schedule: CleanerSchedule) {
        self.cleaner.schedule.set(schedule);
        let store = Rc::downgrade(self);
        let task = glommio::spawn_local(async move {
            loop {
                let Some(strong) = store.upgrade() else {
                    return;
                };
                let schedule = strong.cleaner.schedule.get();
                let map_bytes = schedule.map_bytes.max(CLEANER_MAP_BYTES_MIN);
                let cleaned = strong.clean_filthiest_log(wall_clock_ms(), map_bytes).await;
                drop(strong);
                match cleaned {
                    Some((_, outcome)) if outcome.completed => glommio::yield_if_needed().await,
                    _ => glommio::timer::sleep(schedule.backoff).await,
                }
            }
        });
        *self.cleaner.task.borrow_mut() = Some(task);
    }
}
