//! The records the benchmark appends, built once before any timing starts.
//!
//! Values are half random bytes and half zeros, so a compressing disk or
//! filesystem sees data about as compressible as typical JSON-ish payloads
//! rather than all zeros. The generator is a xorshift written here: a
//! benchmark needs cheap, reproducible bytes, not cryptographic ones.

use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
use brook_engine::types::TimestampMs;
use bytes::Bytes;

/// Value bytes per record.
pub const VALUE_BYTES: usize = 1024;
/// Records per batch: 64 × 1 KiB values make a 64 KiB batch (plus headers).
pub const RECORDS_PER_BATCH: usize = 64;
/// Distinct pre-built batches appended in turn.
pub const BATCH_VARIANTS: usize = 4;
/// Seed of the value generator, fixed so every run appends the same bytes.
pub const PAYLOAD_SEED: u64 = 0x0b0c_0b0c_2026_1129;

/// Marsaglia's xorshift64: three shifts per 8 bytes.
#[derive(Clone, Debug)]
pub struct Xorshift64 {
    state: u64,
}

impl Xorshift64 {
    /// A generator from `seed` (0, which xorshift cannot leave, becomes 1).
    pub fn new(seed: u64) -> Xorshift64 {
        Xorshift64 { state: seed.max(1) }
    }

    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        x
    }

    /// Fills `bytes` with pseudo-random bytes. Whole words are stored as
    /// words: a copy of variable length per 8 bytes was a `memcpy` call
    /// each, most of the load generator's time when it filled values so.
    pub fn fill(&mut self, bytes: &mut [u8]) {
        let mut words = bytes.chunks_exact_mut(8);
        for word in &mut words {
            word.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let tail = words.into_remainder();
        if !tail.is_empty() {
            let word = self.next_u64().to_le_bytes();
            tail.copy_from_slice(&word[..tail.len()]);
        }
    }
}

/// A value of `len` bytes: the first half random, the rest zeros.
pub fn half_random_value(generator: &mut Xorshift64, len: usize) -> Vec<u8> {
    let mut value = vec![0u8; len];
    generator.fill(&mut value[..len / 2]);
    value
}

/// `variants` encoded v2 batches of `records` values of `value_bytes` each,
/// uncompressed, with base offset 0 (the log assigns offsets on append).
pub fn build_batches(
    seed: u64,
    variants: usize,
    records: usize,
    value_bytes: usize,
    timestamp: TimestampMs,
) -> Vec<Vec<u8>> {
    let mut generator = Xorshift64::new(seed);
    (0..variants)
        .map(|_| {
            let batch: Vec<NewRecord> = (0..records)
                .map(|_| {
                    let value = half_random_value(&mut generator, value_bytes);
                    NewRecord::value(Bytes::from(value), timestamp)
                })
                .collect();
            encode_batch(&batch, &BatchOptions::default())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_engine::log::batch::BatchView;

    #[test]
    fn the_generator_is_reproducible_and_never_stuck_at_zero() {
        let mut first = Xorshift64::new(7);
        let mut second = Xorshift64::new(7);
        let a: Vec<u64> = (0..100).map(|_| first.next_u64()).collect();
        let b: Vec<u64> = (0..100).map(|_| second.next_u64()).collect();
        assert_eq!(a, b);
        assert!(a.iter().all(|word| *word != 0));
        let mut zero_seed = Xorshift64::new(0);
        assert_ne!(zero_seed.next_u64(), 0);
    }

    /// `fill` hands out the generator's words in order, little-endian,
    /// the last one cut short: the bytes `brook bench log` appends stay
    /// what they were.
    #[test]
    fn fill_is_the_words_in_order() {
        let mut words = Xorshift64::new(9);
        let expected: Vec<u8> = (0..3)
            .flat_map(|_| words.next_u64().to_le_bytes())
            .take(21)
            .collect();
        let mut filled = [0u8; 21];
        Xorshift64::new(9).fill(&mut filled);
        assert_eq!(filled[..], expected[..]);
    }

    #[test]
    fn values_are_half_random_half_zeros() {
        let mut generator = Xorshift64::new(PAYLOAD_SEED);
        let value = half_random_value(&mut generator, VALUE_BYTES);
        assert_eq!(value.len(), VALUE_BYTES);
        assert!(value[VALUE_BYTES / 2..].iter().all(|byte| *byte == 0));
        let nonzero = value[..VALUE_BYTES / 2]
            .iter()
            .filter(|byte| **byte != 0)
            .count();
        assert!(nonzero > VALUE_BYTES / 2 * 9 / 10, "{nonzero} random bytes");
        let odd_tail = half_random_value(&mut generator, 13);
        assert!(odd_tail[6..].iter().all(|byte| *byte == 0));
    }

    #[test]
    fn batches_are_valid_and_about_64_kib() {
        let batches = build_batches(
            PAYLOAD_SEED,
            2,
            RECORDS_PER_BATCH,
            VALUE_BYTES,
            TimestampMs(1),
        );
        assert_eq!(batches.len(), 2);
        assert_ne!(batches[0], batches[1]);
        for bytes in &batches {
            let batch = BatchView::parse_exact(bytes).unwrap();
            assert_eq!(batch.records_count() as usize, RECORDS_PER_BATCH);
            let payload = RECORDS_PER_BATCH * VALUE_BYTES;
            assert!(bytes.len() > payload && bytes.len() < payload + 2048);
        }
    }
}
