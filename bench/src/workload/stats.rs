//! What producers and consumers count: live totals the progress line reads
//! (atomics shared by every executor), latency histograms merged at the end,
//! and the ledger that proves every acknowledged record was consumed exactly
//! once and nothing else was.

use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};

use hdrhistogram::Histogram;

/// Latencies are recorded in nanoseconds, up to a minute, 3 digits.
pub fn latency_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1_000, 60_000_000_000, 3).expect("constant bounds are valid")
}

/// Where a run is; every task reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub enum Phase {
    /// Load runs, latencies are not recorded.
    Warmup = 0,
    /// The measured window.
    Measure = 1,
    /// Producers stop; consumers drain what was acknowledged.
    Drain = 2,
    /// Everyone stops.
    Stop = 3,
}

/// Totals since the start, updated by every task.
#[derive(Debug, Default)]
pub struct Live {
    phase: AtomicU8,
    pub produced_records: AtomicU64,
    pub produced_bytes: AtomicU64,
    pub acked_records: AtomicU64,
    pub failed_records: AtomicU64,
    pub consumed_records: AtomicU64,
    pub consumed_bytes: AtomicU64,
    /// Consumed records this run produced (the drain waits for these).
    pub consumed_own_records: AtomicU64,
}

impl Live {
    pub fn phase(&self) -> Phase {
        match self.phase.load(Ordering::Acquire) {
            0 => Phase::Warmup,
            1 => Phase::Measure,
            2 => Phase::Drain,
            _ => Phase::Stop,
        }
    }

    pub fn set_phase(&self, phase: Phase) {
        self.phase.store(phase as u8, Ordering::Release);
    }

    pub fn add(counter: &AtomicU64, value: u64) {
        counter.fetch_add(value, Ordering::Relaxed);
    }

    pub fn snapshot(&self) -> Totals {
        let get = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        Totals {
            produced_records: get(&self.produced_records),
            produced_bytes: get(&self.produced_bytes),
            acked_records: get(&self.acked_records),
            failed_records: get(&self.failed_records),
            consumed_records: get(&self.consumed_records),
            consumed_bytes: get(&self.consumed_bytes),
            consumed_own_records: get(&self.consumed_own_records),
        }
    }
}

/// A reading of [`Live`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    pub produced_records: u64,
    pub produced_bytes: u64,
    pub acked_records: u64,
    pub failed_records: u64,
    pub consumed_records: u64,
    pub consumed_bytes: u64,
    pub consumed_own_records: u64,
}

impl Totals {
    /// What happened between `earlier` and this reading.
    pub fn since(&self, earlier: &Totals) -> Totals {
        Totals {
            produced_records: self.produced_records - earlier.produced_records,
            produced_bytes: self.produced_bytes - earlier.produced_bytes,
            acked_records: self.acked_records - earlier.acked_records,
            failed_records: self.failed_records - earlier.failed_records,
            consumed_records: self.consumed_records - earlier.consumed_records,
            consumed_bytes: self.consumed_bytes - earlier.consumed_bytes,
            consumed_own_records: self.consumed_own_records - earlier.consumed_own_records,
        }
    }
}

/// A growable bit set.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bits(Vec<u64>);

impl Bits {
    /// Sets bit `index`; returns whether it was already set.
    pub fn set(&mut self, index: u64) -> bool {
        let (word, bit) = ((index / 64) as usize, 1u64 << (index % 64));
        if word >= self.0.len() {
            self.0.resize(word + 1, 0);
        }
        let was = self.0[word] & bit != 0;
        self.0[word] |= bit;
        was
    }

    /// Sets bits `range`, a word at a time; returns how many were already
    /// set.
    pub fn set_range(&mut self, range: std::ops::Range<u64>) -> u64 {
        if range.is_empty() {
            return 0;
        }
        let last_word = ((range.end - 1) / 64) as usize;
        if last_word >= self.0.len() {
            self.0.resize(last_word + 1, 0);
        }
        let mut already = 0;
        let mut index = range.start;
        while index < range.end {
            let (word, bit) = ((index / 64) as usize, index % 64);
            let bits = (64 - bit).min(range.end - index);
            let mask = (u64::MAX >> (64 - bits)) << bit;
            already += u64::from((self.0[word] & mask).count_ones());
            self.0[word] |= mask;
            index += bits;
        }
        already
    }

    pub fn count(&self) -> u64 {
        self.0.iter().map(|word| u64::from(word.count_ones())).sum()
    }

    /// Bits set here and not in `other`.
    pub fn count_missing_from(&self, other: &Bits) -> u64 {
        self.0
            .iter()
            .enumerate()
            .map(|(index, word)| {
                let theirs = other.0.get(index).copied().unwrap_or(0);
                u64::from((word & !theirs).count_ones())
            })
            .sum()
    }

    /// Sets every bit of `other` here; returns how many were set in both.
    pub fn merge(&mut self, other: &Bits) -> u64 {
        if other.0.len() > self.0.len() {
            self.0.resize(other.0.len(), 0);
        }
        other
            .0
            .iter()
            .zip(self.0.iter_mut())
            .map(|(theirs, ours)| {
                let both = *ours & *theirs;
                *ours |= *theirs;
                u64::from(both.count_ones())
            })
            .sum()
    }
}

/// Per producer: the sequence numbers acknowledged (producer side) or
/// consumed (consumer side), with a checksum of their values.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    pub producers: Vec<Bits>,
    /// Records seen again by the same side.
    pub repeats: u64,
    /// Wrapping sum of CRC32C of every value entered.
    pub checksum: u64,
    pub records: u64,
}

impl Ledger {
    pub fn enter(&mut self, producer: u32, sequence: u64, value_crc: u32) {
        let index = producer as usize;
        if index >= self.producers.len() {
            self.producers.resize(index + 1, Bits::default());
        }
        if self.producers[index].set(sequence) {
            self.repeats += 1;
        }
        self.checksum = self.checksum.wrapping_add(u64::from(value_crc));
        self.records += 1;
    }

    /// Enters the records `sequences` of `producer` at once, whose value
    /// CRCs add up (wrapping) to `value_crcs`: what [`enter`](Self::enter)
    /// for each would do.
    pub fn enter_sequences(
        &mut self,
        producer: u32,
        sequences: std::ops::Range<u64>,
        value_crcs: u64,
    ) {
        let index = producer as usize;
        if index >= self.producers.len() {
            self.producers.resize(index + 1, Bits::default());
        }
        self.records += sequences.end.saturating_sub(sequences.start);
        self.repeats += self.producers[index].set_range(sequences);
        self.checksum = self.checksum.wrapping_add(value_crcs);
    }

    /// Adds `other` (another executor's side of the same ledger); records
    /// both saw count as repeats.
    pub fn merge(&mut self, other: &Ledger) {
        if other.producers.len() > self.producers.len() {
            self.producers
                .resize(other.producers.len(), Bits::default());
        }
        for (ours, theirs) in self.producers.iter_mut().zip(&other.producers) {
            self.repeats += ours.merge(theirs);
        }
        self.repeats += other.repeats;
        self.checksum = self.checksum.wrapping_add(other.checksum);
        self.records += other.records;
    }
}

/// The verdict on a run: acknowledged records against consumed ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Verification {
    pub acknowledged: u64,
    pub consumed: u64,
    /// Acknowledged, never consumed.
    pub missing: u64,
    /// Consumed more than once.
    pub duplicated: u64,
    /// Consumed without having been acknowledged (a produce whose answer
    /// was lost may legitimately land here; with no failures, none should).
    pub unacknowledged: u64,
    pub checksums_match: bool,
}

impl Verification {
    pub fn of(acknowledged: &Ledger, consumed: &Ledger) -> Verification {
        let producers = acknowledged.producers.len().max(consumed.producers.len());
        let empty = Bits::default();
        let side = |ledger: &Ledger, index: usize| -> Bits {
            ledger
                .producers
                .get(index)
                .cloned()
                .unwrap_or_else(|| empty.clone())
        };
        let (mut missing, mut unacknowledged) = (0, 0);
        for index in 0..producers {
            let (acked, seen) = (side(acknowledged, index), side(consumed, index));
            missing += acked.count_missing_from(&seen);
            unacknowledged += seen.count_missing_from(&acked);
        }
        Verification {
            acknowledged: acknowledged.records,
            consumed: consumed.records,
            missing,
            duplicated: consumed.repeats,
            unacknowledged,
            checksums_match: acknowledged.checksum == consumed.checksum,
        }
    }

    /// Every acknowledged record consumed exactly once, nothing else.
    pub fn exactly_once(&self) -> bool {
        self.missing == 0
            && self.duplicated == 0
            && self.unacknowledged == 0
            && self.checksums_match
            && self.acknowledged == self.consumed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bits_count_merge_and_compare() {
        let mut a = Bits::default();
        assert!(!a.set(3));
        assert!(a.set(3));
        a.set(200);
        let mut b = Bits::default();
        b.set(3);
        b.set(70);
        assert_eq!(a.count_missing_from(&b), 1);
        assert_eq!(b.count_missing_from(&a), 1);
        assert_eq!(a.merge(&b), 1);
        assert_eq!(a.count(), 3);
    }

    #[test]
    fn the_ledgers_catch_a_lost_a_repeated_and_an_invented_record() {
        let mut acked = Ledger::default();
        let mut consumed = Ledger::default();
        for sequence in 0..100 {
            acked.enter(1, sequence, sequence as u32);
            consumed.enter(1, sequence, sequence as u32);
        }
        assert!(Verification::of(&acked, &consumed).exactly_once());

        let mut other_executor = Ledger::default();
        other_executor.enter(1, 5, 5);
        let mut doubled = consumed.clone();
        doubled.merge(&other_executor);
        let verdict = Verification::of(&acked, &doubled);
        assert_eq!((verdict.duplicated, verdict.missing), (1, 0));
        assert!(!verdict.exactly_once());

        let mut lost = Ledger::default();
        (0..99).for_each(|sequence| lost.enter(1, sequence, sequence as u32));
        let verdict = Verification::of(&acked, &lost);
        assert_eq!(verdict.missing, 1);
        assert!(!verdict.checksums_match);

        let mut invented = consumed.clone();
        invented.enter(2, 0, 9);
        assert_eq!(Verification::of(&acked, &invented).unacknowledged, 1);
    }

    #[test]
    fn ranges_enter_as_their_records_one_by_one() {
        for (start, end) in [
            (0, 0),
            (0, 1),
            (3, 64),
            (60, 70),
            (0, 128),
            (5, 300),
            (64, 65),
        ] {
            let mut one_by_one = Ledger::default();
            let mut at_once = Ledger::default();
            for sequence in [2, 63, 64, 200] {
                one_by_one.enter(4, sequence, 1);
                at_once.enter(4, sequence, 1);
            }
            let mut crcs = 0u64;
            for sequence in start..end {
                let crc = (sequence as u32).wrapping_mul(0x9e37_79b9);
                one_by_one.enter(4, sequence, crc);
                crcs = crcs.wrapping_add(u64::from(crc));
            }
            at_once.enter_sequences(4, start..end, crcs);
            assert_eq!(at_once, one_by_one, "{start}..{end}");
        }
    }

    #[test]
    fn totals_subtract() {
        let later = Totals {
            produced_records: 10,
            consumed_bytes: 7,
            ..Totals::default()
        };
        let earlier = Totals {
            produced_records: 4,
            ..Totals::default()
        };
        assert_eq!(later.since(&earlier).produced_records, 6);
        assert_eq!(later.since(&earlier).consumed_bytes, 7);
    }
}
