//! Which partition a record goes to, as Kafka's producer decides it (SPEC
//! P1): an explicit partition wins; a keyed record goes to
//! `toPositive(murmur2(key)) % partitions`, bit for bit Kafka's
//! `Utils.murmur2` (so keys land where the Java client and librdkafka's
//! `murmur2_random` put them); an unkeyed record sticks to one partition
//! until its batch is sealed (Kafka's default since KIP-480) or goes
//! round-robin.
//!
//! `--partitioner` picks one of three behaviours:
//! - `murmur2` (default): Kafka's default partitioner — keyed records by
//!   murmur2, unkeyed records sticky;
//! - `round-robin`: every record, keyed or not, to the next partition in
//!   turn (Kafka's `RoundRobinPartitioner`);
//! - `sticky`: every record sticky, keys ignored for placement (Kafka's
//!   default partitioner with `partitioner.ignore.keys=true`).
//!
//! Pure: the random choice of the next sticky partition comes from a seed
//! the caller passes.

use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Kafka's `Utils.murmur2` seed.
const MURMUR2_SEED: u32 = 0x9747_b28c;
/// Kafka's `Utils.murmur2` mixing constants.
const MURMUR2_M: u32 = 0x5bd1_e995;
const MURMUR2_R: u32 = 24;

/// Kafka's `Utils.murmur2`: MurmurHash2 (32 bits) with Java's wrapping
/// signed-int arithmetic, which is u32 arithmetic read back as i32.
pub fn murmur2(data: &[u8]) -> i32 {
    // Java takes the length as an int; keys are far below 2^31 bytes.
    let mut hash = MURMUR2_SEED ^ (data.len() as u32);
    let words = data.chunks_exact(4);
    let tail = words.remainder();
    for word in words {
        let mut k = u32::from_le_bytes([word[0], word[1], word[2], word[3]]);
        k = k.wrapping_mul(MURMUR2_M);
        k ^= k >> MURMUR2_R;
        k = k.wrapping_mul(MURMUR2_M);
        hash = hash.wrapping_mul(MURMUR2_M);
        hash ^= k;
    }
    // Java's switch falls through from 3 to 2 to 1.
    if tail.len() >= 3 {
        hash ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        hash ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        hash ^= u32::from(tail[0]);
        hash = hash.wrapping_mul(MURMUR2_M);
    }
    hash ^= hash >> 13;
    hash = hash.wrapping_mul(MURMUR2_M);
    hash ^= hash >> 15;
    hash as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit (not `abs`, which
/// overflows on `i32::MIN`).
pub fn to_positive(number: i32) -> i32 {
    number & 0x7fff_ffff
}

/// The partition Kafka's default partitioner gives `key` among `partitions`.
pub fn partition_for_key(key: &[u8], partitions: i32) -> i32 {
    debug_assert!(partitions > 0, "a topic has partitions");
    to_positive(murmur2(key)) % partitions
}

/// `--partitioner`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Strategy {
    /// Keyed records by murmur2 of the key, unkeyed ones sticky (Kafka's default).
    Murmur2,
    /// Every record to the next partition in turn.
    RoundRobin,
    /// Every record sticky, keys ignored (partitioner.ignore.keys=true).
    Sticky,
}

/// Where one record goes, and whether it went there by stickiness (a
/// sticky record that does not fit the partition's batch is placed again
/// after the partition moves on).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Placement {
    pub partition: i32,
    pub sticky: bool,
}

/// Places records of one topic; lives on the producing task.
#[derive(Debug)]
pub struct Partitioner {
    strategy: Strategy,
    partitions: i32,
    fixed: Option<i32>,
    /// Kafka's RoundRobinPartitioner counter (starts at 0).
    round_robin_next: u32,
    sticky: Option<i32>,
    random: ChaCha8Rng,
}

impl Partitioner {
    /// A partitioner over `partitions` (at least one); `fixed` is
    /// `--partition`; `seed` drives the choice of sticky partitions.
    pub fn new(strategy: Strategy, partitions: i32, fixed: Option<i32>, seed: u64) -> Partitioner {
        assert!(partitions > 0, "a topic has at least one partition");
        debug_assert!(fixed.is_none_or(|partition| (0..partitions).contains(&partition)));
        Partitioner {
            strategy,
            partitions,
            fixed,
            round_robin_next: 0,
            sticky: None,
            random: ChaCha8Rng::seed_from_u64(seed),
        }
    }

    /// The partition of a record with `key`.
    pub fn place(&mut self, key: Option<&[u8]>) -> Placement {
        let partition = match (self.fixed, self.strategy, key) {
            (Some(partition), _, _) => partition,
            (None, Strategy::RoundRobin, _) => {
                let counter = self.round_robin_next;
                self.round_robin_next = counter.wrapping_add(1);
                to_positive(counter as i32) % self.partitions
            }
            (None, Strategy::Murmur2, Some(key)) => partition_for_key(key, self.partitions),
            (None, Strategy::Murmur2 | Strategy::Sticky, _) => {
                return Placement {
                    partition: self.sticky_partition(),
                    sticky: true,
                };
            }
        };
        Placement {
            partition,
            sticky: false,
        }
    }

    /// The batch of `partition` was sealed: if it was the sticky
    /// partition, the next sticky record goes to another one (chosen at
    /// random, as Kafka does, so concurrent producers spread out).
    pub fn on_batch_sealed(&mut self, partition: i32) {
        if self.sticky == Some(partition) {
            self.sticky = None;
            let next = if self.partitions == 1 {
                0
            } else {
                let others = (self.partitions - 1) as u64;
                let step = (self.random.next_u64() % others) as i32 + 1;
                (partition + step) % self.partitions
            };
            debug_assert!(self.partitions == 1 || next != partition);
            self.sticky = Some(next);
        }
    }

    fn sticky_partition(&mut self) -> i32 {
        match self.sticky {
            Some(partition) => partition,
            None => {
                let partition = (self.random.next_u64() % self.partitions as u64) as i32;
                self.sticky = Some(partition);
                partition
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kafka's UtilsTest.testMurmur2: the values Java computes.
    #[test]
    fn murmur2_matches_kafkas_test_vectors() {
        let vectors: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            // Kafka writes this one as the bytes {'a', 'b', 'c'}.
            (b"abc", 479_470_107),
        ];
        for (key, expected) in vectors {
            assert_eq!(murmur2(key), expected, "{:?}", String::from_utf8_lossy(key));
        }
    }

    #[test]
    fn to_positive_clears_the_sign_bit() {
        for (number, expected) in [
            (0, 0),
            (1, 1),
            (-1, i32::MAX),
            (i32::MIN, 0),
            (i32::MAX, i32::MAX),
            (-973_932_308, 1_173_551_340),
        ] {
            assert_eq!(to_positive(number), expected, "{number}");
        }
    }

    #[test]
    fn keys_go_where_kafkas_default_partitioner_puts_them() {
        // toPositive(murmur2("foobar")) = 1357151166, and % 12 = 6.
        assert_eq!(partition_for_key(b"foobar", 12), 6);
        // toPositive(murmur2("21")) = 1173551340, and % 3 = 0.
        assert_eq!(partition_for_key(b"21", 3), 0);
        let mut partitioner = Partitioner::new(Strategy::Murmur2, 12, None, 1);
        for _ in 0..3 {
            let placement = partitioner.place(Some(b"foobar"));
            assert_eq!(placement.partition, 6);
            assert!(!placement.sticky);
        }
    }

    #[test]
    fn an_explicit_partition_wins_over_every_strategy() {
        for strategy in [Strategy::Murmur2, Strategy::RoundRobin, Strategy::Sticky] {
            let mut partitioner = Partitioner::new(strategy, 4, Some(3), 7);
            for key in [None, Some(&b"foobar"[..])] {
                assert_eq!(partitioner.place(key).partition, 3, "{strategy:?}");
            }
        }
    }

    #[test]
    fn round_robin_takes_every_record_in_turn_keyed_or_not() {
        let mut partitioner = Partitioner::new(Strategy::RoundRobin, 3, None, 7);
        let placed: Vec<i32> = (0..7)
            .map(|index| {
                let key = (index % 2 == 0).then_some(&b"same-key"[..]);
                partitioner.place(key).partition
            })
            .collect();
        assert_eq!(placed, [0, 1, 2, 0, 1, 2, 0]);
    }

    #[test]
    fn sticky_records_stay_until_their_batch_is_sealed() {
        let mut partitioner = Partitioner::new(Strategy::Murmur2, 5, None, 99);
        let first = partitioner.place(None);
        assert!(first.sticky);
        for _ in 0..10 {
            assert_eq!(partitioner.place(None), first);
        }
        // Another partition's batch does not move it.
        partitioner.on_batch_sealed((first.partition + 1) % 5);
        assert_eq!(partitioner.place(None), first);
        let mut previous = first.partition;
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..50 {
            partitioner.on_batch_sealed(previous);
            let next = partitioner.place(None).partition;
            assert_ne!(next, previous, "moves to another partition");
            assert!((0..5).contains(&next));
            seen.insert(next);
            previous = next;
        }
        assert_eq!(seen.len(), 5, "every partition gets batches");
    }

    #[test]
    fn sticky_strategy_ignores_keys_and_one_partition_stays_put() {
        let mut partitioner = Partitioner::new(Strategy::Sticky, 4, None, 3);
        let first = partitioner.place(Some(b"foobar"));
        assert!(first.sticky);
        assert_eq!(partitioner.place(Some(b"21")), first);
        let mut single = Partitioner::new(Strategy::Sticky, 1, None, 3);
        assert_eq!(single.place(None).partition, 0);
        single.on_batch_sealed(0);
        assert_eq!(single.place(None).partition, 0);
    }
}
