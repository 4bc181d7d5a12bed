//! A broker's log directories (`log.dirs`; several on a JBOD broker),
//! shared by its shards: which directory holds each partition, where a new
//! one goes ([`brook_engine::log::placement`]), and which directories have
//! failed.
//!
//! A directory fails at the first IO error of anything in it (a write or
//! sync of a log, opening or creating a log, a checkpoint), as Kafka's
//! `LogDirFailureChannel` takes it: every partition in it goes offline on
//! every shard (KAFKA_STORAGE_ERROR), the other directories keep serving,
//! and nothing new is placed there. In a cluster the broker names the
//! partitions of its failed directories in each heartbeat and the
//! controller moves their leadership (KIP-858). A failed directory stays
//! failed until the broker restarts; a broker starts only with every
//! directory usable.
//!
//! Which directory holds a partition is learnt once, by listing every
//! directory at start, and kept as partitions are placed and deleted: a
//! partition of a failed directory is not looked for (nor created) in
//! another one, where it would start empty.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use brook_engine::log::checkpoint::{decode_offsets, encode_offsets};
use brook_engine::log::file_name::{parse_partition_dir_name, partition_dir_name};
use brook_engine::log::placement::{DirLoad, least_loaded};
use brook_engine::types::{Offset, TopicPartition};

use crate::storage::error::StorageError;
use crate::storage::files::{read_optional_text, write_atomically};
use crate::storage::partition_admin::DELETED_DIR_SUFFIX;

/// Directories in a log directory that are not partition logs although
/// their names look like one (the metadata log of a cluster node).
const NOT_PARTITIONS: &[&str] = &["__cluster_metadata-0"];

/// Every log directory of a broker.
#[derive(Debug)]
pub struct LogDirs {
    dirs: Vec<LogDir>,
    /// Each partition's directory (an index into `dirs`).
    placed: Mutex<HashMap<TopicPartition, usize>>,
    /// How many directories have failed: shards compare it with what they
    /// last acted on.
    failures: AtomicU64,
}

#[derive(Debug)]
struct LogDir {
    path: PathBuf,
    /// Why it failed (the first error); `None` while it serves.
    failure: Mutex<Option<String>>,
}

/// One directory, as DescribeLogDirs reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogDirReport {
    pub path: PathBuf,
    pub offline: bool,
}

impl LogDirs {
    /// The directories `paths` (created if missing), with the partitions
    /// each holds. A partition found in two directories is refused, as
    /// Kafka refuses it: which copy is the log cannot be told.
    pub fn scan(paths: &[PathBuf]) -> Result<LogDirs, StorageError> {
        let mut placed: HashMap<TopicPartition, usize> = HashMap::new();
        for (index, path) in paths.iter().enumerate() {
            std::fs::create_dir_all(path)
                .map_err(|source| StorageError::io("creating", path, source))?;
            let entries = std::fs::read_dir(path)
                .map_err(|source| StorageError::io("listing", path, source))?;
            for entry in entries {
                let entry = entry.map_err(|source| StorageError::io("listing", path, source))?;
                let name = entry.file_name();
                let Some(name) = name.to_str() else { continue };
                if NOT_PARTITIONS.contains(&name)
                    || name.ends_with(DELETED_DIR_SUFFIX)
                    || !entry.file_type().is_ok_and(|kind| kind.is_dir())
                {
                    continue;
                }
                let Some(topic_partition) = parse_partition_dir_name(name) else {
                    continue;
                };
                if let Some(other) = placed.insert(topic_partition, index) {
                    return Err(StorageError::Corrupt {
                        path: path.join(name),
                        reason: format!(
                            "the partition is also in {}: delete one of the two copies \
                             (the one in a directory that failed recently, if one did)",
                            paths[other].display()
                        ),
                    });
                }
            }
        }
        Ok(LogDirs {
            dirs: paths
                .iter()
                .map(|path| LogDir {
                    path: path.clone(),
                    failure: Mutex::new(None),
                })
                .collect(),
            placed: Mutex::new(placed),
            failures: AtomicU64::new(0),
        })
    }

    pub fn len(&self) -> usize {
        self.dirs.len()
    }

    pub fn is_empty(&self) -> bool {
        self.dirs.is_empty()
    }

    pub fn path(&self, index: usize) -> &Path {
        &self.dirs[index].path
    }

    pub fn paths(&self) -> impl Iterator<Item = &Path> {
        self.dirs.iter().map(|dir| dir.path.as_path())
    }

    /// The directory that holds `topic_partition`, if any does.
    pub fn location(&self, topic_partition: &TopicPartition) -> Option<usize> {
        self.placed().get(topic_partition).copied()
    }

    /// The directory of `topic_partition`: where it is, else the least
    /// loaded online one, where it now is. A partition of a failed
    /// directory (or with every directory failed) is offline.
    pub fn place(&self, topic_partition: &TopicPartition) -> Result<usize, StorageError> {
        let mut placed = self.placed();
        let index = match placed.get(topic_partition) {
            Some(index) => *index,
            None => {
                let mut loads: Vec<DirLoad> = (0..self.dirs.len())
                    .map(|index| DirLoad {
                        partitions: 0,
                        online: !self.is_offline(index),
                    })
                    .collect();
                for index in placed.values() {
                    loads[*index].partitions += 1;
                }
                let index = least_loaded(&loads).ok_or_else(|| StorageError::Offline {
                    path: self.dirs[0].path.clone(),
                    reason: "every log directory has failed".into(),
                })?;
                placed.insert(topic_partition.clone(), index);
                index
            }
        };
        match self.failure(index) {
            Some(reason) => Err(StorageError::Offline {
                path: self.dirs[index].path.clone(),
                reason,
            }),
            None => Ok(index),
        }
    }

    /// Forgets a deleted partition.
    pub fn forget(&self, topic_partition: &TopicPartition) {
        self.placed().remove(topic_partition);
    }

    /// Takes directory `index` offline after `error` (the first failure is
    /// kept and logged; later ones change nothing).
    pub fn fail(&self, index: usize, error: &StorageError) {
        let dir = &self.dirs[index];
        {
            let mut failure = self.failure_of(index);
            if failure.is_some() {
                return;
            }
            *failure = Some(error.to_string());
        }
        self.failures.fetch_add(1, Ordering::AcqRel);
        let partitions = self
            .placed()
            .values()
            .filter(|placed| **placed == index)
            .count();
        tracing::error!(
            dir = %dir.path.display(),
            partitions,
            %error,
            "log directory failed: its partitions go offline until the broker restarts \
             (with the directory repaired or replaced); the other directories keep serving"
        );
    }

    /// Why directory `index` failed; `None` while it serves.
    pub fn failure(&self, index: usize) -> Option<String> {
        self.failure_of(index).clone()
    }

    pub fn is_offline(&self, index: usize) -> bool {
        self.failure_of(index).is_some()
    }

    /// How many directories have failed so far.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Acquire)
    }

    /// The partitions of failed directories, in order.
    pub fn offline_partitions(&self) -> Vec<TopicPartition> {
        if self.failures() == 0 {
            return Vec::new();
        }
        let mut offline: Vec<TopicPartition> = self
            .placed()
            .iter()
            .filter(|(_, index)| self.is_offline(**index))
            .map(|(topic_partition, _)| topic_partition.clone())
            .collect();
        offline.sort_unstable();
        offline
    }

    /// Each directory and whether it serves.
    pub fn reports(&self) -> Vec<LogDirReport> {
        (0..self.dirs.len())
            .map(|index| LogDirReport {
                path: self.dirs[index].path.clone(),
                offline: self.is_offline(index),
            })
            .collect()
    }

    /// The entries of checkpoint file `name` (Kafka's offset checkpoint
    /// format) of every directory, each directory's file read for the
    /// partitions it holds. An unreadable or corrupt file is logged and
    /// skipped: its logs are scanned instead.
    pub fn read_checkpoints(&self, name: &str) -> HashMap<TopicPartition, Offset> {
        let mut entries = HashMap::new();
        for (index, dir) in self.dirs.iter().enumerate() {
            let path = dir.path.join(name);
            let text = match read_optional_text(&path) {
                Ok(Some(text)) => text,
                Ok(None) => continue,
                Err(error) => {
                    tracing::warn!(%error, "ignoring an unreadable checkpoint");
                    continue;
                }
            };
            match decode_offsets(&text) {
                Ok(found) => {
                    entries.extend(found.into_iter().filter(|(topic_partition, _)| {
                        self.location(topic_partition) == Some(index)
                    }))
                }
                Err(error) => {
                    tracing::warn!(path = %path.display(), %error, "ignoring a corrupt checkpoint; its logs will be scanned");
                }
            }
        }
        entries
    }

    /// Writes checkpoint file `name` in every online directory, each with
    /// the `entries` of its own partitions. A directory whose write fails
    /// fails (the first such error is returned); the others are written.
    pub async fn write_checkpoints(
        &self,
        name: &str,
        entries: &[(TopicPartition, Offset)],
    ) -> Result<(), StorageError> {
        let mut by_dir: Vec<Vec<(&TopicPartition, Offset)>> = vec![Vec::new(); self.dirs.len()];
        for (topic_partition, offset) in entries {
            if let Some(index) = self.location(topic_partition) {
                by_dir[index].push((topic_partition, *offset));
            }
        }
        let mut first_error = None;
        for (index, mut entries) in by_dir.into_iter().enumerate() {
            if self.is_offline(index) {
                continue;
            }
            entries.sort();
            let text = encode_offsets(entries.into_iter());
            let written =
                write_atomically(&self.dirs[index].path.join(name), text.as_bytes()).await;
            if let Err(error) = written {
                self.fail_on(index, &error);
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Fails directory `index` if `error` is an IO error (damage in one
    /// log, or a log already offline, is not the directory's failure). A
    /// full disk (ENOSPC, EDQUOT) is not a failed disk either: the logs that
    /// hit it go offline with KAFKA_STORAGE_ERROR, the others keep serving
    /// what they hold, and freeing space and restarting brings them back.
    /// (Kafka takes the whole directory offline on a full disk.)
    pub fn fail_on(&self, index: usize, error: &StorageError) {
        let StorageError::Io { source, .. } = error else {
            return;
        };
        // glommio's errors keep the kind, not always the errno.
        let full = matches!(source.raw_os_error(), Some(libc::ENOSPC | libc::EDQUOT))
            || matches!(
                source.kind(),
                std::io::ErrorKind::StorageFull | std::io::ErrorKind::QuotaExceeded
            );
        if full {
            return;
        }
        self.fail(index, error);
    }

    /// The location of a partition of directory `index`.
    pub fn partition_dir(&self, index: usize, topic_partition: &TopicPartition) -> PathBuf {
        self.dirs[index]
            .path
            .join(partition_dir_name(topic_partition))
    }

    fn failure_of(&self, index: usize) -> std::sync::MutexGuard<'_, Option<String>> {
        self.dirs[index]
            .failure
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn placed(&self) -> std::sync::MutexGuard<'_, HashMap<TopicPartition, usize>> {
        self.placed
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use brook_engine::types::PartitionId;

    use super::*;

    fn partition(topic: &str, index: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.to_owned(),
            partition: PartitionId(index),
        }
    }

    fn io_error(path: &Path) -> StorageError {
        StorageError::io(
            "writing",
            path,
            std::io::Error::from_raw_os_error(libc::EIO),
        )
    }

    #[test]
    fn partitions_found_at_start_stay_where_they_are_and_new_ones_go_to_the_least_loaded() {
        let root = tempfile::tempdir().unwrap();
        let (first, second) = (root.path().join("a"), root.path().join("b"));
        for existing in ["t-0", "t-1", "__cluster_metadata-0", "u-0.1f-delete"] {
            std::fs::create_dir_all(first.join(existing)).unwrap();
        }
        std::fs::create_dir_all(second.join("u-0")).unwrap();
        std::fs::write(first.join("recovery-point-offset-checkpoint-0"), "0\n0\n").unwrap();
        let dirs = LogDirs::scan(&[first, second]).unwrap();
        assert_eq!(dirs.location(&partition("t", 1)), Some(0));
        assert_eq!(dirs.location(&partition("u", 0)), Some(1));
        assert_eq!(dirs.location(&partition("__cluster_metadata", 0)), None);
        // 2 against 1: the next goes to the second directory, then they
        // alternate, the first first on a tie.
        let placed: Vec<usize> = (0..4)
            .map(|index| dirs.place(&partition("new", index)).unwrap())
            .collect();
        assert_eq!(placed, [1, 0, 1, 0]);
        assert_eq!(dirs.place(&partition("t", 0)).unwrap(), 0, "where it is");
        dirs.forget(&partition("t", 0));
        assert_eq!(dirs.location(&partition("t", 0)), None);
    }

    #[test]
    fn a_partition_in_two_directories_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let (first, second) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir_all(first.join("t-0")).unwrap();
        std::fs::create_dir_all(second.join("t-0")).unwrap();
        let error = LogDirs::scan(&[first, second]).unwrap_err().to_string();
        assert!(error.contains("also in"), "{error}");
    }

    #[test]
    fn a_full_disk_is_not_a_failed_directory() {
        let root = tempfile::tempdir().unwrap();
        let dirs = LogDirs::scan(&[root.path().join("a")]).unwrap();
        let full = |error: std::io::Error| StorageError::io("writing", root.path(), error);
        dirs.fail_on(0, &full(std::io::Error::from_raw_os_error(libc::ENOSPC)));
        dirs.fail_on(
            0,
            &full(std::io::Error::new(
                std::io::ErrorKind::StorageFull,
                "as glommio says it",
            )),
        );
        assert_eq!(dirs.failures(), 0);
        dirs.fail_on(0, &full(std::io::Error::from_raw_os_error(libc::EIO)));
        assert_eq!(dirs.failures(), 1);
    }

    #[test]
    fn a_failed_directory_takes_its_partitions_offline_and_gets_no_new_ones() {
        let root = tempfile::tempdir().unwrap();
        let (first, second) = (root.path().join("a"), root.path().join("b"));
        std::fs::create_dir_all(first.join("t-0")).unwrap();
        std::fs::create_dir_all(second.join("t-1")).unwrap();
        let dirs = LogDirs::scan(&[first.clone(), second]).unwrap();
        assert!(dirs.offline_partitions().is_empty());
        dirs.fail(0, &io_error(&first.join("t-0")));
        dirs.fail(0, &io_error(&first));
        assert_eq!(dirs.failures(), 1, "a directory fails once");
        assert!(
            dirs.failure(0).unwrap().contains("t-0"),
            "the first cause is kept"
        );
        assert_eq!(dirs.offline_partitions(), [partition("t", 0)]);
        assert!(matches!(
            dirs.place(&partition("t", 0)),
            Err(StorageError::Offline { .. })
        ));
        assert_eq!(dirs.place(&partition("t", 1)).unwrap(), 1);
        assert_eq!(dirs.place(&partition("new", 0)).unwrap(), 1);
        dirs.fail(1, &io_error(&first));
        assert!(matches!(
            dirs.place(&partition("other", 0)),
            Err(StorageError::Offline { .. })
        ));
        assert_eq!(dirs.reports().iter().filter(|dir| dir.offline).count(), 2);
    }
}
