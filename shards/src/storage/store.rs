//! A shard's storage: its partition logs and the files that vouch for them.
//!
//! Partition directories are `<topic>-<partition>` in one of the broker's
//! log directories ([`LogDirs`] says which). Per shard, in each log
//! directory and for the partitions in it, as Kafka keeps them per
//! directory, in Kafka's checkpoint format:
//! `recovery-point-offset-checkpoint-<shard>` (below which each log is
//! durable and sealed) and `log-start-offset-checkpoint-<shard>`, plus the
//! clean-shutdown marker `.brook_cleanshutdown-<shard>`, written last by a
//! clean close and removed first on open, so a crash at any moment leaves no
//! marker. The shard's log cleaner keeps `cleaner-offset-checkpoint-<shard>`
//! (see [`crate::storage::cleaner`]), and `producer-state-checkpoint-<shard>`
//! says where each log's producer state was last recorded (see
//! [`crate::storage::producers`]).
//!
//! An IO error in a log directory fails it ([`LogDirs::fail`]): every shard
//! takes its logs there offline ([`Store::take_failed_dirs_offline`]).

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brook_engine::cluster::broker_config::CHECKPOINT_INTERVAL_MS_DEFAULT;
use brook_engine::log::config::{CleanupPolicy, LogConfig};
use brook_engine::types::{Offset, PartitionId, TopicPartition};

use crate::storage::cleaner::{Cleaner, CleanerSchedule};
use crate::storage::device::prepare_directory;
use crate::storage::error::{StorageError, io_error};
use crate::storage::files::{sync_directory, write_atomically};
use crate::storage::follower::LogCut;
use crate::storage::log_dirs::LogDirs;
use crate::storage::log_table::LogTable;
use crate::storage::partition_log::{PartitionLog, RecoveryHints};
use crate::storage::producers::ProducerCheckpoint;
use crate::storage::waiters::ShardNews;

/// Where a store lives and which shard it belongs to.
#[derive(Clone, Debug)]
pub struct StoreOptions {
    /// The broker's log directories, shared by its shards.
    pub dirs: Arc<LogDirs>,
    pub shard: u16,
}

impl StoreOptions {
    /// Shard `shard`'s store in the one log directory `root`.
    pub fn in_dir(root: PathBuf, shard: u16) -> Result<StoreOptions, StorageError> {
        Ok(StoreOptions {
            dirs: Arc::new(LogDirs::scan(&[root])?),
            shard,
        })
    }
}

/// How often a shard looks whether another shard saw a log directory fail
/// (an atomic load): within this, its logs there go offline too.
const DIR_FAILURE_CHECK: Duration = Duration::from_millis(50);

/// How often a shard's background maintenance runs (Kafka's broker settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MaintenanceSchedule {
    /// `log.retention.check.interval.ms` (5 minutes).
    pub retention_check_interval: Duration,
    /// `log.flush.offset.checkpoint.interval.ms` (Brook: 2 seconds; each
    /// round syncs the logs first, see [`Store::sync_for_checkpoint`]).
    pub checkpoint_interval: Duration,
    /// How long a log goes without appends before its tail cache is dropped.
    pub idle_release_interval: Duration,
    /// The log cleaner of compacted topics (`None`: `log.cleaner.enable=false`).
    pub cleaner: Option<CleanerSchedule>,
    /// `producer.id.expiration.check.interval.ms` (10 minutes): how often
    /// producers idle past `producer.id.expiration.ms` are forgotten.
    pub producer_expiration_check_interval: Duration,
}

impl Default for MaintenanceSchedule {
    fn default() -> MaintenanceSchedule {
        MaintenanceSchedule {
            retention_check_interval: Duration::from_millis(300_000),
            checkpoint_interval: Duration::from_millis(CHECKPOINT_INTERVAL_MS_DEFAULT),
            idle_release_interval: Duration::from_secs(10),
            cleaner: Some(CleanerSchedule::default()),
            producer_expiration_check_interval: Duration::from_millis(600_000),
        }
    }
}

/// The partition logs owned by one shard. Lives on that shard.
pub struct Store {
    options: StoreOptions,
    /// Per log directory: whether this shard's last close there was clean.
    clean_shutdown: Vec<bool>,
    /// Checkpointed offsets of the logs found at start-up, each used by the
    /// first open of its partition only (a partition deleted and created
    /// again starts afresh).
    recovery_points: RefCell<HashMap<TopicPartition, Offset>>,
    log_start_offsets: RefCell<HashMap<TopicPartition, Offset>>,
    producer_states: RefCell<HashMap<TopicPartition, Offset>>,
    /// Partitions being opened now: a second open of one waits for the
    /// first instead of opening its files again. Different partitions open
    /// concurrently.
    opening: RefCell<std::collections::HashSet<TopicPartition>>,
    logs: RefCell<LogTable>,
    /// Rung when any log's high watermark or written offset moves.
    news: Rc<ShardNews>,
    maintenance: RefCell<Option<glommio::Task<()>>>,
    /// Takes logs of directories other shards saw fail offline.
    dir_watch: RefCell<Option<glommio::Task<()>>>,
    /// How many directory failures this shard has acted on.
    failures_seen: std::cell::Cell<u64>,
    pub(crate) cleaner: Cleaner,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("options", &self.options)
            .field("logs", &self.logs.borrow().len())
            .finish()
    }
}

impl Store {
    /// Opens the shard's store: reads its checkpoints and consumes its
    /// clean-shutdown markers, in every log directory.
    pub async fn open(options: StoreOptions) -> Result<Store, StorageError> {
        let mut clean_shutdown = Vec::new();
        for root in options.dirs.paths() {
            prepare_directory(root).await?;
            let marker = root.join(clean_marker_name(options.shard));
            let clean = marker.exists();
            if clean {
                std::fs::remove_file(&marker).map_err(io_error("removing", &marker))?;
                sync_directory(root).await?;
            }
            clean_shutdown.push(clean);
            if options.shard == 0 {
                remove_deleted_dirs(root).await;
            }
        }
        let dirs = &options.dirs;
        let recovery_points = dirs.read_checkpoints(&recovery_point_name(options.shard));
        let log_start_offsets = dirs.read_checkpoints(&log_start_name(options.shard));
        let producer_states = dirs.read_checkpoints(&producer_state_name(options.shard));
        let cleaner = Cleaner::open(dirs, options.shard);
        Ok(Store {
            options,
            clean_shutdown,
            recovery_points: RefCell::new(recovery_points),
            log_start_offsets: RefCell::new(log_start_offsets),
            producer_states: RefCell::new(producer_states),
            opening: RefCell::new(std::collections::HashSet::new()),
            logs: RefCell::new(LogTable::default()),
            news: Rc::new(ShardNews::default()),
            maintenance: RefCell::new(None),
            dir_watch: RefCell::new(None),
            failures_seen: std::cell::Cell::new(0),
            cleaner,
        })
    }

    /// Whether the last close of this shard's store was clean (in every
    /// log directory).
    pub fn was_clean(&self) -> bool {
        self.clean_shutdown.iter().all(|clean| *clean)
    }

    /// Where a partition's log is (or would be, in the first directory).
    pub fn partition_dir(&self, topic_partition: &TopicPartition) -> PathBuf {
        let dirs = &self.options.dirs;
        dirs.partition_dir(dirs.location(topic_partition).unwrap_or(0), topic_partition)
    }

    /// Opens (creating if needed) a partition's log on this shard.
    pub async fn open_partition(
        &self,
        topic_partition: &TopicPartition,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<PartitionLog, StorageError> {
        if let Some(log) = self.partition(topic_partition) {
            return Ok(log);
        }
        while self.opening.borrow().contains(topic_partition) {
            glommio::timer::sleep(Duration::from_millis(1)).await;
            if let Some(log) = self.partition(topic_partition) {
                return Ok(log);
            }
        }
        self.opening.borrow_mut().insert(topic_partition.clone());
        let opened = self.open_new(topic_partition, config, now_ms).await;
        self.opening.borrow_mut().remove(topic_partition);
        opened
    }

    /// Opens a log no one else is opening.
    async fn open_new(
        &self,
        topic_partition: &TopicPartition,
        config: LogConfig,
        now_ms: i64,
    ) -> Result<PartitionLog, StorageError> {
        let dirs = &self.options.dirs;
        let index = dirs.place(topic_partition)?;
        let hints = RecoveryHints {
            clean_shutdown: self.clean_shutdown[index],
            recovery_point: self.recovery_points.borrow_mut().remove(topic_partition),
            log_start_offset: self.log_start_offsets.borrow_mut().remove(topic_partition),
            producers_checkpointed_at: self.producer_states.borrow_mut().remove(topic_partition),
        };
        // A log the cleaner has compacted has offset gaps and cleaned batches
        // even if its topic no longer compacts: recovery must read it as a
        // compacted log, or it would take the gaps for damage and cut there.
        let was_compacted = self.cleaner_checkpoint(topic_partition).is_some();
        let recover_as = if was_compacted && !config.cleanup_policy.compacts() {
            LogConfig {
                cleanup_policy: CleanupPolicy::CompactAndDelete,
                ..config.clone()
            }
        } else {
            config.clone()
        };
        let dir = dirs.partition_dir(index, topic_partition);
        let log = match PartitionLog::open(dir, recover_as, hints, now_ms).await {
            Ok(log) => log,
            Err(error) => {
                dirs.fail_on(index, &error);
                return Err(error);
            }
        };
        log.set_config(config);
        log.tell_news(self.news.clone());
        log.tell_dir_failures(dirs.clone(), index);
        self.logs
            .borrow_mut()
            .insert(topic_partition.clone(), log.clone());
        Ok(log)
    }

    /// Cuts a partition's log (see [`PartitionLog::truncate`]) and puts
    /// the reopened log in its place. Requests that reach the old handle
    /// meanwhile find it closed.
    pub async fn truncate_partition(
        &self,
        topic_partition: &TopicPartition,
        cut: LogCut,
        now_ms: i64,
    ) -> Result<PartitionLog, StorageError> {
        let log = self
            .partition(topic_partition)
            .ok_or_else(|| StorageError::Closed {
                path: self.partition_dir(topic_partition),
            })?;
        let reopened = log.truncate(cut, now_ms).await;
        self.replace_reopened(topic_partition, &log, reopened)
    }

    /// Puts a reopened log where `old` was (unless the partition was
    /// removed meanwhile); if reopening failed, the closed log stays and
    /// answers every request as closed.
    fn replace_reopened(
        &self,
        topic_partition: &TopicPartition,
        old: &PartitionLog,
        reopened: Result<PartitionLog, StorageError>,
    ) -> Result<PartitionLog, StorageError> {
        let mut logs = self.logs.borrow_mut();
        let still_old = logs
            .get(topic_partition)
            .is_some_and(|current| Rc::ptr_eq(&current.inner, &old.inner));
        match reopened {
            Ok(log) => {
                if still_old {
                    logs.insert(topic_partition.clone(), log.clone());
                }
                Ok(log)
            }
            Err(error) => {
                tracing::error!(partition = %topic_partition, %error, "reopening a truncated log failed");
                Err(error)
            }
        }
    }

    /// How many times any of this shard's logs' high watermarks or written offsets moved (or
    /// a log went offline).
    pub fn news_generation(&self) -> u64 {
        self.news.generation()
    }

    /// Resolves once [`Store::news_generation`] has moved past `generation`.
    pub fn news_after(&self, generation: u64) -> futures::channel::oneshot::Receiver<()> {
        self.news.after(generation)
    }

    pub fn partition(&self, topic_partition: &TopicPartition) -> Option<PartitionLog> {
        self.logs.borrow().get(topic_partition).cloned()
    }

    /// [`Store::partition`] without building a `TopicPartition`.
    pub fn partition_at(&self, topic: &str, partition: PartitionId) -> Option<PartitionLog> {
        self.logs.borrow().get_at(topic, partition).cloned()
    }

    /// Forgets a partition's log (the caller closes or deletes it).
    pub fn remove_partition(&self, topic_partition: &TopicPartition) -> Option<PartitionLog> {
        self.cleaner.forget(topic_partition);
        self.options.dirs.forget(topic_partition);
        self.logs.borrow_mut().remove(topic_partition)
    }

    /// Takes this shard's logs in failed log directories offline, once per
    /// directory failure (the shard whose log failed first took that one).
    pub fn take_failed_dirs_offline(&self) {
        let dirs = &self.options.dirs;
        let failures = dirs.failures();
        if failures == self.failures_seen.get() {
            return;
        }
        self.failures_seen.set(failures);
        for (topic_partition, log) in self.partitions() {
            let Some(index) = dirs.location(&topic_partition) else {
                continue;
            };
            if let Some(reason) = dirs.failure(index) {
                log.take_offline(&StorageError::Offline {
                    path: dirs.path(index).to_owned(),
                    reason: format!("its log directory failed: {reason}"),
                });
            }
        }
    }

    /// Every log, in partition order (so checkpoint files list them in the
    /// same order every time).
    pub fn partitions(&self) -> Vec<(TopicPartition, PartitionLog)> {
        let mut logs: Vec<_> = self
            .logs
            .borrow()
            .iter()
            .map(|(tp, log)| (tp.clone(), log.clone()))
            .collect();
        logs.sort_unstable_by(|(left, _), (right, _)| left.cmp(right));
        logs
    }

    /// Makes what every log has appended durable (one group-committed sync
    /// per log with unsynced data, all at once), so that the recovery points
    /// checkpointed next cover it and a crash rescans at most the writes of
    /// one checkpoint interval. Kafka flushes only at segment roll, so after
    /// a crash it rescans whole active segments; with many large active
    /// segments that took minutes. A log that fails is logged and skipped.
    pub async fn sync_for_checkpoint(&self) {
        // Producer state is recorded as of each log's end before the sync,
        // so the sync makes everything below that point durable.
        // An offline log has nothing more to make durable, and its
        // directory may answer nothing but errors.
        let logs: Vec<(TopicPartition, PartitionLog, ProducerCheckpoint)> = self
            .partitions()
            .into_iter()
            .filter(|(_, log)| !log.is_offline())
            .map(|(topic_partition, log)| {
                let producers = log.begin_producer_checkpoint();
                (topic_partition, log, producers)
            })
            .collect();
        let rounds = logs.into_iter().map(|(topic_partition, log, producers)| async move {
            let synced = if log.durable_offset() < log.log_end_offset() {
                log.flush().await.map(|_| ())
            } else {
                Ok(())
            };
            let recorded = match synced {
                Ok(()) => log.finish_producer_checkpoint(producers).await,
                Err(error) => Err(error),
            };
            if let Err(error) = recorded {
                tracing::warn!(partition = %topic_partition, %error, "sync before checkpoint failed");
            }
        });
        futures::future::join_all(rounds).await;
    }

    /// Writes the recovery-point, log-start-offset and producer-state
    /// checkpoints (in each online log directory, of its partitions).
    pub async fn checkpoint(&self) -> Result<(), StorageError> {
        let logs = self.partitions();
        let points: Vec<(TopicPartition, Offset)> = logs
            .iter()
            .map(|(tp, log)| (tp.clone(), log.recovery_point()))
            .collect();
        let starts: Vec<(TopicPartition, Offset)> = logs
            .iter()
            .map(|(tp, log)| (tp.clone(), log.log_start_offset()))
            .collect();
        let producers: Vec<(TopicPartition, Offset)> = logs
            .iter()
            .filter_map(|(tp, log)| Some((tp.clone(), log.producers_checkpointed_at()?)))
            .collect();
        let dirs = &self.options.dirs;
        let shard = self.options.shard;
        let written = [
            dirs.write_checkpoints(&recovery_point_name(shard), &points)
                .await,
            dirs.write_checkpoints(&log_start_name(shard), &starts)
                .await,
            dirs.write_checkpoints(&producer_state_name(shard), &producers)
                .await,
        ];
        written.into_iter().collect()
    }

    /// Applies retention to every log (high watermark = durable offset on a
    /// single replica). Returns the number of segments deleted. An offline
    /// log is skipped; one that fails (closed meanwhile) is logged and
    /// skipped: it must not stop retention of the logs after it.
    pub async fn apply_retention(&self, now_ms: i64) -> usize {
        let mut deleted = 0;
        for (topic_partition, log) in self.partitions() {
            if log.is_offline() {
                continue;
            }
            match log.apply_retention(log.durable_offset(), now_ms).await {
                Ok(count) => deleted += count,
                Err(error) => {
                    tracing::warn!(partition = %topic_partition, %error, "retention failed for partition")
                }
            }
        }
        deleted
    }

    /// Starts the shard's background maintenance: retention, checkpoints
    /// and the log cleaner on `schedule`. Errors are logged; the next round
    /// retries.
    pub fn start_maintenance(self: &Rc<Self>, schedule: MaintenanceSchedule) {
        if let Some(cleaner) = schedule.cleaner {
            self.start_cleaner(cleaner);
        }
        let watched = Rc::downgrade(self);
        let watch = glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(DIR_FAILURE_CHECK).await;
                let Some(store) = watched.upgrade() else {
                    return;
                };
                store.take_failed_dirs_offline();
            }
        });
        *self.dir_watch.borrow_mut() = Some(watch);
        let store = Rc::downgrade(self);
        let task = glommio::spawn_local(async move {
            let start = Instant::now();
            let (mut next_retention, mut next_checkpoint) = (
                start + schedule.retention_check_interval,
                start + schedule.checkpoint_interval,
            );
            let mut next_release = start + schedule.idle_release_interval;
            let mut next_expiry = start + schedule.producer_expiration_check_interval;
            loop {
                let due = next_retention
                    .min(next_checkpoint)
                    .min(next_release)
                    .min(next_expiry);
                glommio::timer::sleep(due.saturating_duration_since(Instant::now())).await;
                let Some(store) = store.upgrade() else { return };
                let now = Instant::now();
                if now >= next_retention {
                    next_retention = now + schedule.retention_check_interval;
                    store.apply_retention(wall_clock_ms()).await;
                }
                if now >= next_release {
                    next_release = now + schedule.idle_release_interval;
                    let idle_since = now - schedule.idle_release_interval;
                    store
                        .partitions()
                        .iter()
                        .for_each(|(_, log)| log.release_idle_memory(idle_since));
                }
                if now >= next_expiry {
                    next_expiry = now + schedule.producer_expiration_check_interval;
                    let now_ms = wall_clock_ms();
                    let expired: usize = store
                        .partitions()
                        .iter()
                        .map(|(_, log)| log.remove_expired_producers(now_ms))
                        .sum();
                    if expired > 0 {
                        tracing::info!(
                            expired,
                            "forgot producers idle past producer.id.expiration.ms"
                        );
                    }
                }
                if now >= next_checkpoint {
                    next_checkpoint = now + schedule.checkpoint_interval;
                    store.sync_for_checkpoint().await;
                    if let Err(error) = store.checkpoint().await {
                        tracing::error!(%error, "checkpoint failed");
                    }
                }
            }
        });
        *self.maintenance.borrow_mut() = Some(task);
    }

    /// Closes every log, checkpoints, and leaves the clean-shutdown marker.
    /// If any log fails to close, no marker is written (the next open scans).
    pub async fn close(&self) -> Result<(), StorageError> {
        drop(self.maintenance.borrow_mut().take());
        drop(self.dir_watch.borrow_mut().take());
        self.cleaner.stop();
        let mut first_error = None;
        for (topic_partition, log) in self.partitions() {
            let producers = log.begin_producer_checkpoint();
            let closed = match log.close().await {
                Ok(_) => log.finish_producer_checkpoint(producers).await,
                Err(error) => Err(error),
            };
            if let Err(error) = closed {
                tracing::error!(partition = %topic_partition, %error, "closing partition log failed");
                first_error.get_or_insert(error);
            }
        }
        if let Some(error) = first_error {
            return Err(error);
        }
        self.checkpoint().await?;
        let marker = clean_marker_name(self.options.shard);
        for root in self.options.dirs.paths() {
            write_atomically(&root.join(&marker), b"").await?;
        }
        Ok(())
    }
}

pub(crate) fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_millis() as i64)
}

fn recovery_point_name(shard: u16) -> String {
    format!("recovery-point-offset-checkpoint-{shard}")
}

fn log_start_name(shard: u16) -> String {
    format!("log-start-offset-checkpoint-{shard}")
}

/// Brook's own checkpoint (Kafka's format): per partition, the offset at
/// which its producer state is that of its newest snapshot file at or below
/// it (see [`crate::storage::producers`]).
fn producer_state_name(shard: u16) -> String {
    format!("producer-state-checkpoint-{shard}")
}

fn clean_marker_name(shard: u16) -> String {
    format!(".brook_cleanshutdown-{shard}")
}

/// Finishes removing partition directories a crash left marked deleted
/// (shard 0 does it for the log directories all shards share).
async fn remove_deleted_dirs(root: &std::path::Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let deleted = path.is_dir()
            && path
                .file_name()
                .and_then(|name| name.to_str())
                .is_some_and(|name| {
                    name.ends_with(crate::storage::partition_admin::DELETED_DIR_SUFFIX)
                });
        if deleted {
            if let Err(error) = crate::storage::partition_admin::remove_deleted_dir(path).await {
                tracing::warn!(%error, "removing a deleted partition's directory failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use brook_engine::log::config::LogConfig;
    use brook_engine::types::{Offset, PartitionId, TopicPartition};

    use super::{Store, StoreOptions};
    use crate::runtime::block_on;
    use crate::storage::follower::LogCut;

    /// A log reopened by a follower's truncation still rings the shard's
    /// news and fails its log directory on an IO error, as the store's
    /// first open set it up to.
    #[test]
    fn a_truncated_log_keeps_its_news_and_its_log_directory() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().to_owned();
        block_on(async move {
            let store = Store::open(StoreOptions::in_dir(root, 0).unwrap())
                .await
                .unwrap();
            let partition = TopicPartition {
                topic: "t".into(),
                partition: PartitionId(0),
            };
            store
                .open_partition(&partition, LogConfig::default(), 0)
                .await
                .unwrap();
            let reopened = store
                .truncate_partition(&partition, LogCut::FullyAndStartAt(Offset(5)), 0)
                .await
                .unwrap();
            let (news, log_dir) = {
                let state = reopened.inner.state.borrow();
                (
                    state.news.is_some(),
                    state.log_dir.as_ref().map(|(_, index)| *index),
                )
            };
            assert!(news);
            assert_eq!(log_dir, Some(0));
            store.close().await.unwrap();
        });
    }
}
