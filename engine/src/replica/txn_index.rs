//! The aborted-transaction index: Kafka's `.txnindex` file beside each segment
//! (`TransactionIndex`, `AbortedTxn`), and the lookup a `read_committed` fetch
//! makes in it.
//!
//! A segment's index lists the aborted transactions whose ABORT marker is in
//! that segment, in marker order. A consumer reading committed data gets, with
//! the records, the aborted transactions overlapping the fetched range and
//! drops their records itself; the broker never filters batches. The file is
//! a plain sequence of 34-byte entries, all big-endian:
//!
//! ```text
//! offset size field
//!      0    2 version              0
//!      2    8 producer_id
//!     10    8 first_offset         the transaction's first offset on this partition
//!     18    8 last_offset          the ABORT marker's offset
//!     26    8 last_stable_offset   the LSO right after the marker: the first offset
//!                                  of the oldest other transaction still open, else
//!                                  last_offset + 1
//! ```
//!
//! Entries are appended only with a growing `last_offset`. A torn last entry
//! (a crash mid-write) is ignored, as Kafka's reader does; the owner should
//! truncate the file to [`TransactionIndex::size_bytes`] before appending
//! again. A version other than 0 is an error (Kafka rejects versions above 0;
//! Brook also rejects negative ones, which Kafka never writes).
//!
//! **Fetch** (`LocalLog.collectAbortedTransactions` / `addAbortedTransactions`):
//! with `fetch_offset` the first offset asked for and `upper_bound_offset` the
//! offset after the fetched bytes ([`fetch_upper_bound_offset`]), search the
//! index of the segment holding `fetch_offset`, then each later segment in
//! order, collecting every entry with `last_offset >= fetch_offset` and
//! `first_offset < upper_bound_offset`, and stop at the first entry whose
//! `last_stable_offset >= upper_bound_offset`: no later marker can belong to a
//! transaction that started below the bound. Earlier segments never need
//! searching: their markers are all below `fetch_offset`.
//!
//! **Recovery** (`LogSegment.recover`): a segment being recovered has its index
//! reset ([`TransactionIndex::reset`]) and rebuilt while its batches are
//! replayed through the producer state (rebuilt up to the segment's base
//! first, so transactions begun in earlier segments are known): each marker's
//! `replay_marker` + `complete_txn` yields the entry to append.
//! **Truncation** of the log to offset X truncates each remaining index with
//! [`TransactionIndex::truncate_to`] and deletes the indexes of removed segments.

use thiserror::Error;

use crate::types::{Offset, ProducerId};

/// Bytes of one entry (`AbortedTxn.TOTAL_SIZE`).
pub const ABORTED_TXN_BYTES: usize = 34;
/// The only entry version (`AbortedTxn.CURRENT_VERSION`).
pub const ABORTED_TXN_VERSION: i16 = 0;
/// File name suffix (`LogFileUtils.TXN_INDEX_FILE_SUFFIX`).
pub const TXN_INDEX_FILE_SUFFIX: &str = ".txnindex";

/// One aborted transaction (Kafka's `AbortedTxn`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: ProducerId,
    pub first_offset: Offset,
    /// The ABORT marker's offset.
    pub last_offset: Offset,
    pub last_stable_offset: Offset,
}

impl AbortedTxn {
    pub fn encode(&self) -> [u8; ABORTED_TXN_BYTES] {
        let mut bytes = [0; ABORTED_TXN_BYTES];
        bytes[0..2].copy_from_slice(&ABORTED_TXN_VERSION.to_be_bytes());
        bytes[2..10].copy_from_slice(&self.producer_id.0.to_be_bytes());
        bytes[10..18].copy_from_slice(&self.first_offset.0.to_be_bytes());
        bytes[18..26].copy_from_slice(&self.last_offset.0.to_be_bytes());
        bytes[26..34].copy_from_slice(&self.last_stable_offset.0.to_be_bytes());
        bytes
    }

    /// Reads the entry at `position` in a file (the position is for errors).
    pub fn decode(
        bytes: &[u8; ABORTED_TXN_BYTES],
        position: usize,
    ) -> Result<AbortedTxn, TxnIndexError> {
        let version = i16::from_be_bytes([bytes[0], bytes[1]]);
        if version != ABORTED_TXN_VERSION {
            return Err(TxnIndexError::UnsupportedVersion { position, version });
        }
        let long = |at: usize| {
            let mut field = [0; 8];
            field.copy_from_slice(&bytes[at..at + 8]);
            i64::from_be_bytes(field)
        };
        Ok(AbortedTxn {
            producer_id: ProducerId(long(2)),
            first_offset: Offset(long(10)),
            last_offset: Offset(long(18)),
            last_stable_offset: Offset(long(26)),
        })
    }

    /// What a Fetch response's `aborted_transactions` carries for it.
    pub fn fetch_entry(&self) -> (ProducerId, Offset) {
        (self.producer_id, self.first_offset)
    }
}

/// Why an index's bytes or an append are refused.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum TxnIndexError {
    #[error("transaction index entry at byte {position} has unsupported version {version}")]
    UnsupportedVersion { position: usize, version: i16 },
    #[error(
        "aborted transaction ending at {last_offset} does not follow the last one at {previous}"
    )]
    NotIncreasing {
        last_offset: Offset,
        previous: Offset,
    },
    #[error(
        "aborted transaction ending at {last_offset} is before the segment's base offset {base_offset}"
    )]
    BeforeSegment {
        last_offset: Offset,
        base_offset: Offset,
    },
}

/// The aborted transactions whose markers are in one segment, in file order.
/// Lives with its segment on the partition's shard; the file is the truth,
/// this is its decoded copy (aborts are rare, so it is small).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionIndex {
    base_offset: Offset,
    entries: Vec<AbortedTxn>,
}

/// The entries of one index that overlap a fetch, and whether the search may
/// stop (`TxnIndexSearchResult`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TxnIndexSearchResult {
    pub aborted: Vec<AbortedTxn>,
    pub is_complete: bool,
}

impl TransactionIndex {
    /// The empty index of the segment at `base_offset` (no file yet: Kafka
    /// creates it on the first append).
    pub fn new(base_offset: Offset) -> TransactionIndex {
        TransactionIndex {
            base_offset,
            entries: Vec::new(),
        }
    }

    /// Reads a `.txnindex` file; a torn last entry is ignored.
    pub fn decode(base_offset: Offset, bytes: &[u8]) -> Result<TransactionIndex, TxnIndexError> {
        let chunks = bytes.chunks_exact(ABORTED_TXN_BYTES);
        let mut entries = Vec::with_capacity(chunks.len());
        for (index, chunk) in chunks.enumerate() {
            // `chunks_exact` yields exactly ABORTED_TXN_BYTES per chunk.
            let fixed: &[u8; ABORTED_TXN_BYTES] = chunk.try_into().expect("exact chunk");
            entries.push(AbortedTxn::decode(fixed, index * ABORTED_TXN_BYTES)?);
        }
        Ok(TransactionIndex {
            base_offset,
            entries,
        })
    }

    pub fn base_offset(&self) -> Offset {
        self.base_offset
    }

    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    /// The length of the file's valid part: where the next entry is written.
    pub fn size_bytes(&self) -> usize {
        self.entries.len() * ABORTED_TXN_BYTES
    }

    /// Adds an entry, returning the bytes to write at the old
    /// [`TransactionIndex::size_bytes`]. Its `last_offset` must exceed the last
    /// entry's (`TransactionIndex.append`).
    pub fn append(
        &mut self,
        aborted: AbortedTxn,
    ) -> Result<[u8; ABORTED_TXN_BYTES], TxnIndexError> {
        let previous = self.entries.last();
        if let Some(previous) =
            previous.filter(|previous| previous.last_offset >= aborted.last_offset)
        {
            return Err(TxnIndexError::NotIncreasing {
                last_offset: aborted.last_offset,
                previous: previous.last_offset,
            });
        }
        self.entries.push(aborted);
        Ok(aborted.encode())
    }

    /// Drops every entry whose marker is at or after `offset`; returns the
    /// length to truncate the file to (`TransactionIndex.truncateTo`).
    pub fn truncate_to(&mut self, offset: Offset) -> usize {
        let keep = self
            .entries
            .iter()
            .position(|entry| entry.last_offset >= offset)
            .unwrap_or(self.entries.len());
        self.entries.truncate(keep);
        self.size_bytes()
    }

    /// Forgets every entry (`TransactionIndex.reset`): the file becomes empty.
    pub fn reset(&mut self) {
        self.entries.clear();
    }

    /// The entries overlapping `fetch_offset..upper_bound_offset`, and whether
    /// later segments need no search (`TransactionIndex.collectAbortedTxns`).
    pub fn collect_aborted_txns(
        &self,
        fetch_offset: Offset,
        upper_bound_offset: Offset,
    ) -> TxnIndexSearchResult {
        let mut result = TxnIndexSearchResult::default();
        for entry in &self.entries {
            if entry.last_offset >= fetch_offset && entry.first_offset < upper_bound_offset {
                result.aborted.push(*entry);
            }
            if entry.last_stable_offset >= upper_bound_offset {
                result.is_complete = true;
                return result;
            }
        }
        result
    }

    /// Kafka's `sanityCheck`: no marker may be below the segment's base.
    pub fn sanity_check(&self) -> Result<(), TxnIndexError> {
        match self
            .entries
            .iter()
            .find(|entry| entry.last_offset < self.base_offset)
        {
            Some(entry) => Err(TxnIndexError::BeforeSegment {
                last_offset: entry.last_offset,
                base_offset: self.base_offset,
            }),
            None => Ok(()),
        }
    }
}

/// The aborted transactions a `read_committed` fetch returns: `indexes` are
/// the indexes of the segment holding `fetch_offset` and of every later
/// segment, in offset order (`LocalLog.collectAbortedTransactions`).
pub fn collect_aborted_transactions<'a>(
    indexes: impl IntoIterator<Item = &'a TransactionIndex>,
    fetch_offset: Offset,
    upper_bound_offset: Offset,
) -> Vec<AbortedTxn> {
    let mut aborted = Vec::new();
    for index in indexes {
        let found = index.collect_aborted_txns(fetch_offset, upper_bound_offset);
        aborted.extend(found.aborted);
        if found.is_complete {
            break;
        }
    }
    aborted
}

/// The exclusive end of a fetch's range for the aborted-transaction lookup
/// (`LogSegment.fetchUpperBoundOffset`, else the next segment's base, else the
/// log end): the offset of the first batch after the bytes read from the
/// segment, if the segment has one.
pub fn fetch_upper_bound_offset(
    next_batch_offset_in_segment: Option<Offset>,
    next_segment_base_offset: Option<Offset>,
    log_end_offset: Offset,
) -> Offset {
    next_batch_offset_in_segment
        .or(next_segment_base_offset)
        .unwrap_or(log_end_offset)
}

/// `<20-digit base offset>.txnindex`, as Kafka names them.
pub fn txn_index_file_name(base_offset: Offset) -> String {
    format!("{:020}{TXN_INDEX_FILE_SUFFIX}", base_offset.0)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn aborted(producer: i64, first: i64, last: i64, stable: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: ProducerId(producer),
            first_offset: Offset(first),
            last_offset: Offset(last),
            last_stable_offset: Offset(stable),
        }
    }

    #[test]
    fn entries_are_kafkas_34_bytes() {
        let bytes = aborted(0x0102_0304_0506_0708, 0x11, 0x2233, 0x44_5566).encode();
        let mut expected = vec![0, 0, 1, 2, 3, 4, 5, 6, 7, 8];
        expected.extend_from_slice(&0x11i64.to_be_bytes());
        expected.extend_from_slice(&0x2233i64.to_be_bytes());
        expected.extend_from_slice(&0x44_5566i64.to_be_bytes());
        assert_eq!(bytes.to_vec(), expected);
        assert_eq!(
            AbortedTxn::decode(&bytes, 0),
            Ok(aborted(0x0102_0304_0506_0708, 0x11, 0x2233, 0x44_5566))
        );
        assert_eq!(
            txn_index_file_name(Offset(368_769)),
            "00000000000000368769.txnindex"
        );
    }

    #[test]
    fn torn_tails_are_ignored_and_bad_versions_are_errors() {
        let mut file = Vec::new();
        file.extend_from_slice(&aborted(1, 0, 5, 6).encode());
        file.extend_from_slice(&aborted(2, 3, 9, 10).encode());
        file.extend_from_slice(&aborted(3, 4, 12, 13).encode()[..20]);
        let index = TransactionIndex::decode(Offset(0), &file).unwrap();
        assert_eq!(index.entries().len(), 2);
        assert_eq!(index.size_bytes(), 2 * ABORTED_TXN_BYTES);
        let mut bad = file.clone();
        bad[ABORTED_TXN_BYTES + 1] = 1;
        assert_eq!(
            TransactionIndex::decode(Offset(0), &bad),
            Err(TxnIndexError::UnsupportedVersion {
                position: ABORTED_TXN_BYTES,
                version: 1
            })
        );
        bad[ABORTED_TXN_BYTES] = 0xFF;
        assert!(TransactionIndex::decode(Offset(0), &bad).is_err());
    }

    #[test]
    fn appends_must_grow_and_truncation_cuts_at_the_marker() {
        let mut index = TransactionIndex::new(Offset(100));
        let bytes = index.append(aborted(1, 90, 105, 106)).unwrap();
        assert_eq!(bytes, aborted(1, 90, 105, 106).encode());
        index.append(aborted(2, 101, 110, 111)).unwrap();
        assert_eq!(
            index.append(aborted(3, 102, 110, 111)),
            Err(TxnIndexError::NotIncreasing {
                last_offset: Offset(110),
                previous: Offset(110)
            })
        );
        index.append(aborted(3, 107, 120, 121)).unwrap();
        assert_eq!(index.sanity_check(), Ok(()));
        // (truncate to, entries left)
        for (offset, left) in [(121, 3), (120, 2), (106, 1), (105, 0)] {
            let mut copy = index.clone();
            assert_eq!(
                copy.truncate_to(Offset(offset)),
                left * ABORTED_TXN_BYTES,
                "{offset}"
            );
            assert_eq!(copy.entries().len(), left);
        }
        index.reset();
        assert_eq!(index.size_bytes(), 0);
        let mut stale = TransactionIndex::new(Offset(100));
        stale.append(aborted(1, 0, 99, 100)).unwrap();
        assert!(matches!(
            stale.sanity_check(),
            Err(TxnIndexError::BeforeSegment { .. })
        ));
    }

    #[test]
    fn fetch_lookup_follows_kafka() {
        // Segment 0: aborts ending at 10 and 30 (LSO 11 and 20: another txn
        // from 20 was still open). Segment 40: an abort of that txn at 45.
        let mut first = TransactionIndex::new(Offset(0));
        first.append(aborted(1, 2, 10, 11)).unwrap();
        first.append(aborted(2, 25, 30, 20)).unwrap();
        let mut second = TransactionIndex::new(Offset(40));
        second.append(aborted(3, 20, 45, 46)).unwrap();
        let segments = [&first, &second];
        // (fetch offset, upper bound, expected producers)
        let rows: [(i64, i64, &[i64]); 6] = [
            (0, 5, &[1]),
            (0, 11, &[1]),
            (11, 25, &[3]),
            (0, 40, &[1, 2, 3]),
            (31, 41, &[3]),
            (46, 60, &[]),
        ];
        for (fetch, bound, producers) in rows {
            let found = collect_aborted_transactions(segments, Offset(fetch), Offset(bound));
            let found: Vec<i64> = found.iter().map(|entry| entry.producer_id.0).collect();
            assert_eq!(found, producers, "fetch {fetch}..{bound}");
        }
        // The first segment alone is enough once an entry's LSO passes the bound.
        assert!(
            first
                .collect_aborted_txns(Offset(0), Offset(11))
                .is_complete
        );
        assert!(
            !first
                .collect_aborted_txns(Offset(0), Offset(21))
                .is_complete
        );
        assert_eq!(
            fetch_upper_bound_offset(Some(Offset(7)), Some(Offset(40)), Offset(50)),
            Offset(7)
        );
        assert_eq!(
            fetch_upper_bound_offset(None, Some(Offset(40)), Offset(50)),
            Offset(40)
        );
        assert_eq!(fetch_upper_bound_offset(None, None, Offset(50)), Offset(50));
    }

    fn any_aborted() -> impl Strategy<Value = AbortedTxn> {
        (any::<i64>(), any::<i64>(), any::<i64>(), any::<i64>())
            .prop_map(|(producer, first, last, stable)| aborted(producer, first, last, stable))
    }

    proptest! {
        #[test]
        fn files_round_trip(entries in proptest::collection::vec(any_aborted(), 0..20), torn in 0usize..ABORTED_TXN_BYTES) {
            let mut file: Vec<u8> = entries.iter().flat_map(|entry| entry.encode()).collect();
            file.extend(std::iter::repeat_n(0xAB, torn));
            let index = TransactionIndex::decode(Offset(0), &file).unwrap();
            prop_assert_eq!(index.entries(), &entries[..]);
            prop_assert_eq!(index.size_bytes(), entries.len() * ABORTED_TXN_BYTES);
        }

        /// A file of whole entries, each well formed or not, and a torn
        /// tail: refused at the first entry that is not version 0, read
        /// whole otherwise (and re-encoded to the same bytes).
        #[test]
        fn a_file_is_refused_exactly_at_its_first_bad_entry(
            chunks in proptest::collection::vec(
                prop_oneof![
                    any_aborted().prop_map(|entry| entry.encode().to_vec()),
                    proptest::collection::vec(any::<u8>(), ABORTED_TXN_BYTES),
                ],
                0..6,
            ),
            torn in proptest::collection::vec(any::<u8>(), 0..ABORTED_TXN_BYTES),
        ) {
            let whole: Vec<u8> = chunks.concat();
            let file = [&whole[..], &torn[..]].concat();
            let first_bad = chunks
                .iter()
                .position(|chunk| chunk[..2] != ABORTED_TXN_VERSION.to_be_bytes());
            match (TransactionIndex::decode(Offset(0), &file), first_bad) {
                (Ok(index), None) => {
                    let again: Vec<u8> =
                        index.entries().iter().flat_map(|entry| entry.encode()).collect();
                    prop_assert_eq!(again, whole);
                }
                (Err(TxnIndexError::UnsupportedVersion { position, .. }), Some(bad)) => {
                    prop_assert_eq!(position, bad * ABORTED_TXN_BYTES);
                }
                (result, bad) => prop_assert!(false, "{:?} with the first bad entry {:?}", result, bad),
            }
        }

        /// The lookup finds exactly the overlapping entries up to the first
        /// whose LSO reaches the bound, whatever the split into segments.
        #[test]
        fn lookup_matches_a_linear_scan(
            spans in proptest::collection::vec((0i64..50, 1i64..30, 0i64..20), 1..12),
            fetch in 0i64..300,
            width in 1i64..100,
            split in any::<prop::sample::Index>(),
        ) {
            let mut last = 0;
            let mut all = Vec::new();
            for (producer, (gap, length, lag)) in spans.into_iter().enumerate() {
                last += gap + 1;
                let first = (last - length).max(0);
                all.push(aborted(producer as i64, first, last, (last + 1 - lag).max(first)));
            }
            let cut = split.index(all.len() + 1);
            let mut left = TransactionIndex::new(Offset(0));
            let mut right = TransactionIndex::new(all.get(cut).map_or(Offset(0), |entry| entry.last_offset));
            for (position, entry) in all.iter().enumerate() {
                let target = if position < cut { &mut left } else { &mut right };
                target.append(*entry).unwrap();
            }
            let bound = Offset(fetch + width);
            let expected: Vec<AbortedTxn> = {
                let stop = all.iter().position(|entry| entry.last_stable_offset >= bound);
                all[..stop.map_or(all.len(), |stop| stop + 1)]
                    .iter()
                    .filter(|entry| entry.last_offset.0 >= fetch && entry.first_offset < bound)
                    .copied()
                    .collect()
            };
            prop_assert_eq!(collect_aborted_transactions([&left, &right], Offset(fetch), bound), expected);
        }
    }
}
