//! The metadata log as raft-rs reads it: the latest snapshot (the image at
//! one offset, as records), the entries after it, the hard state (term,
//! vote, commit). In memory; the driver makes every change durable (see
//! [`super::Persist`]) and rebuilds this from disk at start with
//! [`MetadataStore::restore`]. A snapshot here always carries its data, so a
//! lagging voter or a new broker can be sent it whole.

use raft::eraftpb::{ConfState, Entry, HardState, Snapshot};
use raft::{GetEntriesContext, RaftState, Storage, StorageError};

#[derive(Clone, Debug, Default)]
pub struct MetadataStore {
    hard_state: HardState,
    snapshot: Snapshot,
    /// Entries after the snapshot's index, contiguous.
    entries: Vec<Entry>,
}

impl MetadataStore {
    /// A new quorum's first start: no entries, the static voters as the
    /// configuration (`controller.quorum.voters`).
    pub fn new(voters: &[u64]) -> MetadataStore {
        let mut store = MetadataStore::default();
        store
            .snapshot
            .mut_metadata()
            .set_conf_state(ConfState::from((voters.to_vec(), vec![])));
        store
    }

    /// A restart: what the driver read back from disk (nothing, on the
    /// first start). Before its first snapshot a node's configuration is
    /// the static `voters`.
    pub fn restore(
        voters: &[u64],
        hard_state: HardState,
        snapshot: Snapshot,
        entries: Vec<Entry>,
    ) -> MetadataStore {
        let mut store = MetadataStore {
            hard_state,
            snapshot,
            entries: Vec::new(),
        };
        if store
            .snapshot
            .get_metadata()
            .get_conf_state()
            .voters
            .is_empty()
        {
            store
                .snapshot
                .mut_metadata()
                .set_conf_state(ConfState::from((voters.to_vec(), vec![])));
        }
        let first = store.first();
        // Entries the snapshot covers (a crash between writing the snapshot
        // and trimming the log) are dropped; a gap ends the log there.
        let kept = entries
            .into_iter()
            .filter(|entry| entry.index >= first)
            .zip(first..)
            .take_while(|(entry, expected)| entry.index == *expected)
            .map(|(entry, _)| entry);
        store.entries.extend(kept);
        // The commit index is not always made durable (it is learnt again
        // from the leader); raft-rs wants it within the log it is given.
        let commit = store
            .hard_state
            .commit
            .clamp(store.first() - 1, store.last());
        store.hard_state.commit = commit;
        store
    }

    pub fn hard_state(&self) -> &HardState {
        &self.hard_state
    }

    pub fn snapshot_ref(&self) -> &Snapshot {
        &self.snapshot
    }

    pub fn entries_after_snapshot(&self) -> &[Entry] {
        &self.entries
    }

    fn first(&self) -> u64 {
        self.snapshot.get_metadata().index + 1
    }

    fn last(&self) -> u64 {
        self.entries
            .last()
            .map_or(self.snapshot.get_metadata().index, |entry| entry.index)
    }

    pub fn set_hard_state(&mut self, hard_state: HardState) {
        self.hard_state = hard_state;
    }

    pub fn set_commit(&mut self, commit: u64) {
        self.hard_state.commit = commit;
    }

    /// Appends `entries`, replacing any suffix they overlap (a follower
    /// whose uncommitted tail lost to a new leader's).
    pub fn append(&mut self, entries: &[Entry]) {
        let Some(head) = entries.first() else {
            return;
        };
        // raft-rs only appends after the snapshot and without a gap.
        assert!(head.index >= self.first() && head.index <= self.last() + 1);
        let keep = (head.index - self.first()) as usize;
        self.entries.truncate(keep);
        self.entries.extend_from_slice(entries);
    }

    /// A snapshot received from the leader replaces everything before and
    /// at its index.
    pub fn apply_snapshot(&mut self, snapshot: Snapshot) {
        let metadata = snapshot.get_metadata();
        self.hard_state.term = self.hard_state.term.max(metadata.term);
        self.hard_state.commit = self.hard_state.commit.max(metadata.index);
        self.entries.retain(|entry| entry.index > metadata.index);
        if self
            .entries
            .first()
            .is_some_and(|entry| entry.index != metadata.index + 1)
        {
            self.entries.clear();
        }
        self.snapshot = snapshot;
    }

    /// This node's own snapshot at `index` (applied, so in the log): the
    /// entries up to it are dropped.
    pub fn compact(&mut self, index: u64, data: Vec<u8>) -> Snapshot {
        let term = self
            .term(index)
            .expect("a snapshot is taken at an applied index");
        let conf_state = self.snapshot.get_metadata().get_conf_state().clone();
        let mut snapshot = Snapshot::default();
        snapshot.set_data(data.into());
        let metadata = snapshot.mut_metadata();
        metadata.index = index;
        metadata.term = term;
        metadata.set_conf_state(conf_state);
        self.entries.retain(|entry| entry.index > index);
        self.snapshot = snapshot.clone();
        snapshot
    }
}

impl Storage for MetadataStore {
    fn initial_state(&self) -> raft::Result<RaftState> {
        Ok(RaftState::new(
            self.hard_state.clone(),
            self.snapshot.get_metadata().get_conf_state().clone(),
        ))
    }

    fn entries(
        &self,
        low: u64,
        high: u64,
        max_size: impl Into<Option<u64>>,
        _context: GetEntriesContext,
    ) -> raft::Result<Vec<Entry>> {
        if low < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if high > self.last() + 1 || low > high {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        let from = (low - self.first()) as usize;
        let to = (high - self.first()) as usize;
        let mut entries = self.entries[from..to].to_vec();
        raft::util::limit_size(&mut entries, max_size.into());
        Ok(entries)
    }

    fn term(&self, index: u64) -> raft::Result<u64> {
        let snapshot = self.snapshot.get_metadata();
        if index == snapshot.index {
            return Ok(snapshot.term);
        }
        if index < self.first() {
            return Err(raft::Error::Store(StorageError::Compacted));
        }
        if index > self.last() {
            return Err(raft::Error::Store(StorageError::Unavailable));
        }
        Ok(self.entries[(index - self.first()) as usize].term)
    }

    fn first_index(&self) -> raft::Result<u64> {
        Ok(self.first())
    }

    fn last_index(&self) -> raft::Result<u64> {
        Ok(self.last())
    }

    fn snapshot(&self, request_index: u64, _to: u64) -> raft::Result<Snapshot> {
        if self.snapshot.get_metadata().index < request_index {
            return Err(raft::Error::Store(
                StorageError::SnapshotTemporarilyUnavailable,
            ));
        }
        Ok(self.snapshot.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            data: vec![index as u8].into(),
            ..Default::default()
        }
    }

    #[test]
    fn appends_replace_the_overlapped_tail_and_compaction_keeps_terms() {
        let mut store = MetadataStore::new(&[1, 2, 3]);
        assert_eq!(
            (store.first_index().unwrap(), store.last_index().unwrap()),
            (1, 0)
        );
        store.append(&[entry(1, 1), entry(2, 1), entry(3, 1)]);
        store.append(&[entry(3, 2), entry(4, 2)]);
        assert_eq!(store.term(3).unwrap(), 2);
        assert_eq!(store.last_index().unwrap(), 4);
        let snapshot = store.compact(2, b"image".to_vec());
        assert_eq!(snapshot.get_metadata().term, 1);
        assert_eq!(store.first_index().unwrap(), 3);
        assert_eq!(store.term(2).unwrap(), 1);
        assert!(store.term(1).is_err());
        assert!(
            store
                .entries(1, 3, None, GetEntriesContext::empty(false))
                .is_err()
        );
        let tail = store
            .entries(3, 5, None, GetEntriesContext::empty(false))
            .unwrap();
        assert_eq!(tail.iter().map(|e| e.index).collect::<Vec<_>>(), vec![3, 4]);
        assert_eq!(store.snapshot(2, 0).unwrap().get_data(), b"image");
        assert!(store.snapshot(3, 0).is_err());
        assert_eq!(
            store.initial_state().unwrap().conf_state.voters,
            vec![1, 2, 3]
        );
    }

    #[test]
    fn a_restore_drops_what_the_snapshot_covers_and_stops_at_a_gap() {
        let mut source = MetadataStore::new(&[1]);
        source.append(&[entry(1, 1), entry(2, 1)]);
        let snapshot = source.compact(1, Vec::new());
        let restored = MetadataStore::restore(
            &[1],
            HardState::default(),
            snapshot,
            vec![entry(1, 1), entry(2, 1), entry(3, 1), entry(5, 1)],
        );
        assert_eq!(restored.first_index().unwrap(), 2);
        assert_eq!(restored.last_index().unwrap(), 3);
    }

    #[test]
    fn a_received_snapshot_replaces_the_log_before_it() {
        let mut store = MetadataStore::new(&[1, 2, 3]);
        store.append(&[entry(1, 1)]);
        let mut leader = MetadataStore::new(&[1, 2, 3]);
        leader.append(&[entry(1, 1), entry(2, 1), entry(3, 2)]);
        let snapshot = leader.compact(3, b"x".to_vec());
        store.apply_snapshot(snapshot);
        assert_eq!(store.first_index().unwrap(), 4);
        assert_eq!(store.last_index().unwrap(), 3);
        assert_eq!(store.term(3).unwrap(), 2);
        assert_eq!(store.hard_state().commit, 3);
    }
}
