//! The controller voter's durable state, in `<data dir>/__cluster_metadata-0/`:
//!
//! - `quorum-state`: the Raft hard state (term, vote, commit), protobuf;
//! - `snapshot`: the latest snapshot (the image as records), protobuf;
//! - `log`: the entries after it, each `length:u32 crc32c:u32 entry` (the
//!   CRC covers the entry's protobuf bytes).
//!
//! The two small files are replaced whole (a synced temporary renamed over
//! them, then the directory synced), so a crash leaves the old or the new
//! one. The log is appended and `fdatasync`ed; at start it is read up to
//! the first torn or damaged record and cut there, since a record whose
//! write did not complete was never acknowledged to a peer. These are
//! small, rare writes (metadata changes, elections), done on the blocking
//! pool so the shard's reactor never waits on them.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use brook_engine::cluster::quorum::{MetadataStore, Persist};
use protobuf::Message as _;
use raft::eraftpb::{Entry, HardState, Snapshot};

use crate::server::meta_properties::write_durably;
use crate::storage::StorageError;

pub const DIRECTORY: &str = "__cluster_metadata-0";
const STATE: &str = "quorum-state";
const SNAPSHOT: &str = "snapshot";
const LOG: &str = "log";
/// An entry larger than this is damage, not data (a batch is far smaller).
const ENTRY_BYTES_MAX: usize = 64 << 20;

#[derive(Debug)]
pub struct QuorumDisk {
    directory: PathBuf,
    log: File,
    /// Each entry's (index, position in `log`), in order.
    positions: Vec<(u64, u64)>,
    log_bytes: u64,
    /// The term and vote last made durable (the commit index need not be).
    durable_vote: (u64, u64),
}

impl QuorumDisk {
    /// Opens (creating) the directory and reads back what it holds.
    pub fn open(
        data_dir: &Path,
        voters: &[u64],
    ) -> Result<(QuorumDisk, MetadataStore), StorageError> {
        let directory = data_dir.join(DIRECTORY);
        std::fs::create_dir_all(&directory)
            .map_err(|error| StorageError::io("creating", &directory, error))?;
        let hard_state: HardState = read_message(&directory.join(STATE))?.unwrap_or_default();
        let snapshot: Snapshot = read_message(&directory.join(SNAPSHOT))?.unwrap_or_default();
        let log_path = directory.join(LOG);
        let mut log = OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&log_path)
            .map_err(|error| StorageError::io("opening", &log_path, error))?;
        let mut bytes = Vec::new();
        log.read_to_end(&mut bytes)
            .map_err(|error| StorageError::io("reading", &log_path, error))?;
        let (entries, positions, valid) = read_entries(&bytes);
        if valid < bytes.len() as u64 {
            tracing::warn!(path = %log_path.display(), kept = valid, dropped = bytes.len() as u64 - valid, "metadata log cut at a torn or damaged record");
            log.set_len(valid)
                .map_err(|error| StorageError::io("truncating", &log_path, error))?;
        }
        let durable_vote = (hard_state.term, hard_state.vote);
        let store = MetadataStore::restore(voters, hard_state, snapshot, entries);
        let disk = QuorumDisk {
            directory,
            log,
            positions,
            log_bytes: valid,
            durable_vote,
        };
        Ok((disk, store))
    }

    /// Makes `persist` durable: snapshot, then entries, then hard state.
    pub fn write(&mut self, persist: &Persist) -> Result<(), StorageError> {
        if let Some(snapshot) = &persist.snapshot {
            write_durably(
                &self.directory.join(SNAPSHOT),
                &snapshot.write_to_bytes().map_err(protobuf_error)?,
            )?;
            self.drop_through(snapshot.get_metadata().index)?;
        }
        if !persist.entries.is_empty() {
            self.append(&persist.entries)?;
        }
        if let Some(hard_state) = &persist.hard_state {
            // Term and vote must survive a crash; a lost commit index is
            // learnt again from the leader.
            if (hard_state.term, hard_state.vote) != self.durable_vote {
                write_durably(
                    &self.directory.join(STATE),
                    &hard_state.write_to_bytes().map_err(protobuf_error)?,
                )?;
                self.durable_vote = (hard_state.term, hard_state.vote);
            }
        }
        Ok(())
    }

    fn log_path(&self) -> PathBuf {
        self.directory.join(LOG)
    }

    fn append(&mut self, entries: &[Entry]) -> Result<(), StorageError> {
        let first = entries[0].index;
        // A new leader's entries replace the tail they overlap.
        if let Some(cut) = self.positions.iter().position(|(index, _)| *index >= first) {
            let position = self.positions[cut].1;
            self.log
                .set_len(position)
                .map_err(|error| StorageError::io("truncating", &self.log_path(), error))?;
            self.positions.truncate(cut);
            self.log_bytes = position;
        }
        let mut bytes = Vec::new();
        for entry in entries {
            let body = entry.write_to_bytes().map_err(protobuf_error)?;
            self.positions
                .push((entry.index, self.log_bytes + bytes.len() as u64));
            bytes.extend_from_slice(&(body.len() as u32).to_be_bytes());
            bytes.extend_from_slice(&crc32c::crc32c(&body).to_be_bytes());
            bytes.extend_from_slice(&body);
        }
        let path = self.log_path();
        self.log
            .write_all(&bytes)
            .and_then(|()| self.log.sync_data())
            .map_err(|error| StorageError::io("appending to", &path, error))?;
        self.log_bytes += bytes.len() as u64;
        Ok(())
    }

    /// Rewrites the log without the entries a snapshot now covers.
    fn drop_through(&mut self, index: u64) -> Result<(), StorageError> {
        let keep_from = self.positions.iter().position(|(entry, _)| *entry > index);
        let path = self.log_path();
        let mut bytes = Vec::new();
        if let Some(keep) = keep_from {
            let start = self.positions[keep].1;
            let mut all = Vec::new();
            File::open(&path)
                .and_then(|mut file| file.read_to_end(&mut all))
                .map_err(|error| StorageError::io("reading", &path, error))?;
            bytes = all[start as usize..].to_vec();
        }
        write_durably(&path, &bytes)?;
        self.log = OpenOptions::new()
            .read(true)
            .append(true)
            .open(&path)
            .map_err(|error| StorageError::io("opening", &path, error))?;
        let (_, positions, valid) = read_entries(&bytes);
        self.positions = positions;
        self.log_bytes = valid;
        Ok(())
    }
}

/// Whether `data_dir` holds a metadata directory (a voter ran on it).
pub fn exists(data_dir: &Path) -> bool {
    data_dir.join(DIRECTORY).is_dir()
}

/// Creates the metadata directory holding `hard_state` and `snapshot`
/// and no entries: written whole in a directory beside it, then renamed,
/// so a crash leaves no metadata directory or this one.
pub fn create_with_snapshot(
    data_dir: &Path,
    hard_state: &HardState,
    snapshot: &Snapshot,
) -> Result<(), StorageError> {
    let directory = data_dir.join(DIRECTORY);
    let building = data_dir.join(format!("{DIRECTORY}.new"));
    if building.exists() {
        std::fs::remove_dir_all(&building)
            .map_err(|error| StorageError::io("removing", &building, error))?;
    }
    std::fs::create_dir(&building)
        .map_err(|error| StorageError::io("creating", &building, error))?;
    write_durably(
        &building.join(SNAPSHOT),
        &snapshot.write_to_bytes().map_err(protobuf_error)?,
    )?;
    write_durably(
        &building.join(STATE),
        &hard_state.write_to_bytes().map_err(protobuf_error)?,
    )?;
    write_durably(&building.join(LOG), &[])?;
    std::fs::rename(&building, &directory)
        .map_err(|error| StorageError::io("renaming", &building, error))?;
    File::open(data_dir)
        .and_then(|directory| directory.sync_all())
        .map_err(|error| StorageError::io("syncing", data_dir, error))
}

/// What a stopped node's metadata directory holds: the index its snapshot
/// covers (0 without one) and the indexes of the entries in its log after
/// it. For tools and tests that look at a node from outside.
pub fn inspect(data_dir: &Path) -> Result<(u64, Vec<u64>), StorageError> {
    let directory = data_dir.join(DIRECTORY);
    let snapshot = read_message::<Snapshot>(&directory.join(SNAPSHOT))?
        .map_or(0, |snapshot| snapshot.get_metadata().index);
    let path = directory.join(LOG);
    let bytes = std::fs::read(&path).map_err(|error| StorageError::io("reading", &path, error))?;
    let (entries, _, _) = read_entries(&bytes);
    Ok((snapshot, entries.iter().map(|entry| entry.index).collect()))
}

fn protobuf_error(error: protobuf::ProtobufError) -> StorageError {
    StorageError::Corrupt {
        path: PathBuf::from(DIRECTORY),
        reason: error.to_string(),
    }
}

/// The entries of a log file up to its first bad record, their positions,
/// and how many bytes are good.
fn read_entries(bytes: &[u8]) -> (Vec<Entry>, Vec<(u64, u64)>, u64) {
    let mut entries = Vec::new();
    let mut positions = Vec::new();
    let mut at = 0usize;
    while bytes.len() - at >= 8 {
        let length = u32::from_be_bytes(bytes[at..at + 4].try_into().expect("4 bytes")) as usize;
        let crc = u32::from_be_bytes(bytes[at + 4..at + 8].try_into().expect("4 bytes"));
        if length > ENTRY_BYTES_MAX || bytes.len() - at - 8 < length {
            break;
        }
        let body = &bytes[at + 8..at + 8 + length];
        if crc32c::crc32c(body) != crc {
            break;
        }
        let Ok(entry) = Entry::parse_from_bytes(body) else {
            break;
        };
        // Entries are contiguous; anything else is damage.
        if entries
            .last()
            .is_some_and(|last: &Entry| last.index + 1 != entry.index)
        {
            break;
        }
        positions.push((entry.index, at as u64));
        entries.push(entry);
        at += 8 + length;
    }
    (entries, positions, at as u64)
}

fn read_message<M: protobuf::Message>(path: &Path) -> Result<Option<M>, StorageError> {
    match std::fs::read(path) {
        Ok(bytes) => M::parse_from_bytes(&bytes)
            .map(Some)
            .map_err(|error| StorageError::Corrupt {
                path: path.to_owned(),
                reason: error.to_string(),
            }),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(StorageError::io("reading", path, error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use raft::Storage;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: vec![index as u8; 10].into(),
            ..Default::default()
        }
    }

    #[test]
    fn what_was_written_comes_back_and_a_torn_tail_is_cut() {
        let directory = tempfile::tempdir().unwrap();
        let (mut disk, store) = QuorumDisk::open(directory.path(), &[1, 2, 3]).unwrap();
        assert_eq!(store.last_index().unwrap(), 0);
        let hard_state = HardState {
            term: 3,
            vote: 2,
            commit: 2,
            ..Default::default()
        };
        disk.write(&Persist {
            snapshot: None,
            entries: vec![entry(1, 1), entry(2, 1), entry(3, 2)],
            hard_state: Some(hard_state.clone()),
        })
        .unwrap();
        // A new leader's entry replaces index 3.
        disk.write(&Persist {
            entries: vec![entry(3, 3), entry(4, 3)],
            ..Persist::default()
        })
        .unwrap();
        drop(disk);
        let (_, store) = QuorumDisk::open(directory.path(), &[1, 2, 3]).unwrap();
        assert_eq!(store.hard_state().vote, 2);
        assert_eq!(store.last_index().unwrap(), 4);
        assert_eq!(store.term(3).unwrap(), 3);
        // A torn last record (a crash mid-write) is dropped at the next open.
        let log = directory.path().join(DIRECTORY).join(LOG);
        let length = std::fs::metadata(&log).unwrap().len();
        OpenOptions::new()
            .write(true)
            .open(&log)
            .unwrap()
            .set_len(length - 3)
            .unwrap();
        let (_, store) = QuorumDisk::open(directory.path(), &[1, 2, 3]).unwrap();
        assert_eq!(store.last_index().unwrap(), 3);
        assert!(std::fs::metadata(&log).unwrap().len() < length - 3);
    }

    #[test]
    fn a_snapshot_trims_the_log() {
        let directory = tempfile::tempdir().unwrap();
        let (mut disk, mut store) = QuorumDisk::open(directory.path(), &[1]).unwrap();
        let entries: Vec<Entry> = (1..=5).map(|index| entry(index, 1)).collect();
        store.append(&entries);
        disk.write(&Persist {
            entries,
            ..Persist::default()
        })
        .unwrap();
        let snapshot = store.compact(3, b"image".to_vec());
        disk.write(&Persist {
            snapshot: Some(snapshot),
            ..Persist::default()
        })
        .unwrap();
        disk.write(&Persist {
            entries: vec![entry(6, 1)],
            ..Persist::default()
        })
        .unwrap();
        let (_, store) = QuorumDisk::open(directory.path(), &[1]).unwrap();
        assert_eq!(store.first_index().unwrap(), 4);
        assert_eq!(store.last_index().unwrap(), 6);
        assert_eq!(store.snapshot_ref().get_data(), b"image");
    }
}
