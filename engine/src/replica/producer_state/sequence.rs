//! Producer epochs and sequence numbers, with Kafka's arithmetic.
//!
//! Sequences are Java `int`s that wrap from `i32::MAX` back to 0 (never to a
//! negative number), so a batch may start near the top and end near the bottom.
//! The helpers here reproduce `DefaultRecordBatch.incrementSequence` /
//! `decrementSequence` and `ProducerAppendInfo.inSequence` bit for bit,
//! including Java's wrapping on garbage input, so no client value can make them
//! panic.

use std::fmt;

/// A producer's epoch (Kafka's `short producerEpoch`). Bumped by
/// InitProducerId; a batch from an older epoch is from a fenced producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ProducerEpoch(pub i16);

impl ProducerEpoch {
    /// Kafka's `RecordBatch.NO_PRODUCER_EPOCH`: the state knows no epoch yet.
    pub const NONE: ProducerEpoch = ProducerEpoch(-1);
}

impl fmt::Display for ProducerEpoch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// A per-partition record sequence number of one producer epoch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sequence(pub i32);

impl Sequence {
    /// Kafka's `RecordBatch.NO_SEQUENCE`.
    pub const NONE: Sequence = Sequence(-1);
    /// The first sequence of every epoch.
    pub const ZERO: Sequence = Sequence(0);

    /// The sequence `by` records after this one, wrapping past `i32::MAX` to 0
    /// (`DefaultRecordBatch.incrementSequence`).
    pub fn increment(self, by: i32) -> Sequence {
        if self.0 > i32::MAX.wrapping_sub(by) {
            Sequence(
                by.wrapping_sub(i32::MAX.wrapping_sub(self.0))
                    .wrapping_sub(1),
            )
        } else {
            Sequence(self.0.wrapping_add(by))
        }
    }

    /// The sequence `by` records before this one, wrapping below 0 to
    /// `i32::MAX` (`DefaultRecordBatch.decrementSequence`).
    pub fn decrement(self, by: i32) -> Sequence {
        if self.0 < by {
            Sequence(
                i32::MAX
                    .wrapping_sub(by.wrapping_sub(self.0))
                    .wrapping_add(1),
            )
        } else {
            Sequence(self.0.wrapping_sub(by))
        }
    }

    /// The sequence that must follow `self` (what the broker expects next).
    pub fn next(self) -> Sequence {
        if self.0 == i32::MAX {
            Sequence::ZERO
        } else {
            Sequence(self.0.wrapping_add(1))
        }
    }

    /// Whether `self` directly follows `last` (`ProducerAppendInfo.inSequence`):
    /// `last + 1` computed without overflow, or 0 after `i32::MAX`. After
    /// [`Sequence::NONE`] only 0 follows.
    pub fn follows(self, last: Sequence) -> bool {
        i64::from(self.0) == i64::from(last.0) + 1 || (self.0 == 0 && last.0 == i32::MAX)
    }
}

impl fmt::Display for Sequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAX: i32 = i32::MAX;

    #[test]
    fn increment_and_decrement_wrap_like_kafka() {
        // (sequence, delta, incremented)
        let rows = [
            (0, 0, 0),
            (0, 4, 4),
            (10, 5, 15),
            (MAX, 0, MAX),
            (MAX, 1, 0),
            (MAX - 1, 3, 1),
            (MAX - 4, 4, MAX),
            (MAX - 4, 5, 0),
        ];
        for (sequence, delta, incremented) in rows {
            assert_eq!(
                Sequence(sequence).increment(delta),
                Sequence(incremented),
                "{sequence} + {delta}"
            );
            assert_eq!(
                Sequence(incremented).decrement(delta),
                Sequence(sequence),
                "{incremented} - {delta}"
            );
        }
    }

    #[test]
    fn follows_accepts_only_the_next_sequence() {
        // (next, last, follows)
        let rows = [
            (1, 0, true),
            (0, -1, true),
            (2, 0, false),
            (0, 0, false),
            (0, MAX, true),
            (1, MAX, false),
            (MAX, MAX - 1, true),
            (i32::MIN, MAX, false),
        ];
        for (next, last, follows) in rows {
            assert_eq!(
                Sequence(next).follows(Sequence(last)),
                follows,
                "{next} after {last}"
            );
        }
        assert_eq!(Sequence(MAX).next(), Sequence::ZERO);
        assert_eq!(Sequence::NONE.next(), Sequence::ZERO);
    }

    /// Over every sequence and step a producer can send (0..=i32::MAX),
    /// stepping is arithmetic modulo 2^31, decrement undoes increment, and
    /// what follows a sequence is its increment by one. Steps a client
    /// cannot send (negative) are computed without overflowing either.
    #[test]
    fn steps_are_arithmetic_modulo_2_to_the_31() {
        let modulus = i64::from(MAX) + 1;
        let values = [0, 1, 2, 1000, MAX / 2, MAX - 1000, MAX - 1, MAX];
        for sequence in values {
            for by in values {
                let up = Sequence(sequence).increment(by);
                let down = Sequence(sequence).decrement(by);
                let (s, b) = (i64::from(sequence), i64::from(by));
                assert_eq!(i64::from(up.0), (s + b) % modulus, "{sequence} + {by}");
                assert_eq!(
                    i64::from(down.0),
                    (s - b).rem_euclid(modulus),
                    "{sequence} - {by}"
                );
                assert_eq!(
                    up.decrement(by),
                    Sequence(sequence),
                    "{sequence} + {by} - {by}"
                );
                assert_eq!(
                    down.increment(by),
                    Sequence(sequence),
                    "{sequence} - {by} + {by}"
                );
            }
            let next = Sequence(sequence).next();
            assert_eq!(next, Sequence(sequence).increment(1));
            assert!(next.follows(Sequence(sequence)), "{next} after {sequence}");
            assert!(!Sequence(sequence).follows(Sequence(sequence)));
        }
        for sequence in [i32::MIN, -2, -1] {
            for by in [i32::MIN, -1, 0, 1, MAX] {
                let _ = Sequence(sequence).increment(by);
                let _ = Sequence(sequence).decrement(by);
                let _ = Sequence(sequence).follows(Sequence(by));
            }
        }
    }
}
