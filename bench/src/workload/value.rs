//! A producer's record values and their checksums, made cheaply enough that
//! the load generator is not what a throughput run measures.
//!
//! A value is the stamp ([`STAMP_BYTES`]: due time, run, producer,
//! sequence), then `--random-fraction` of the rest random bytes, then zeros.
//! The random bytes come from a pool generated once per producer: each
//! value takes the next slot of it (one copy), where generating them per
//! record cost a PRNG step per 8 bytes.
//!
//! Why a pool keeps `--random-fraction` honest: it holds at least
//! [`POOL_BYTES_MIN`] of random bytes (16k slots for 1 KiB values: 16
//! batches of 1 MiB) and never fewer than [`BATCHES_PER_POOL`] full
//! batches' worth of slots, taken in turn, so no slot repeats within a
//! batch. Compression is per batch (lz4's window is 64 KiB, zstd's at most
//! the batch), so a codec sees exactly the fraction of incompressible bytes
//! asked for, as it did with fresh bytes per record; so does the broker.
//!
//! The ledger enters every acknowledged record with the CRC32C of its
//! value, and the consumer computes the same over what it fetched. The
//! producer gets that CRC without reading the value: CRC32C is affine over
//! GF(2), so for values of one length `crc(a ⊕ b) = crc(a) ⊕ crc(b) ⊕
//! crc(0…0)`. Split a value as (stamp, zeros) ⊕ (zeros, slot, zeros): the
//! second term's CRC is computed once per slot, the first is the stamp's
//! CRC (24 bytes) moved past the zeros after it with four table lookups
//! ([`ZeroShift`]). The CRC is still of the whole value, so a consumer
//! that receives any byte of it changed still disagrees with the ledger.

use crate::log::payload::Xorshift64;
use crate::workload::options::{STAMP_BYTES, WorkloadOptions};

/// Random bytes a producer's pool holds at least (several MiB: far more
/// than a batch, so consecutive records never share random bytes).
pub const POOL_BYTES_MIN: usize = 8 << 20;
/// The pool holds at least this many full batches' worth of slots (for
/// batches so large that [`POOL_BYTES_MIN`] would not cover them).
pub const BATCHES_PER_POOL: usize = 2;
/// Most slots the [`POOL_BYTES_MIN`] rule asks for when random parts are
/// tiny (it would otherwise ask for millions of one-byte slots).
pub const POOL_SLOTS_MAX: usize = 1 << 16;

/// CRC32C(crc, n zero bytes) for one fixed n, as four table lookups.
///
/// With no input, CRC32C's register advances linearly: appending n zeros
/// is `A(crc) ⊕ A0` for a fixed linear map `A` and constant `A0`, and a
/// linear map of 32 bits is the XOR of what each of its four bytes maps to.
/// (`crc32c::crc32c_combine` does the general case but rebuilds its
/// operator by matrix squaring on every call: too slow once per record.)
#[derive(Clone, Debug)]
pub struct ZeroShift {
    tables: Box<[[u32; 256]; 4]>,
    of_zero: u32,
}

impl ZeroShift {
    /// The shift past `zero_bytes` zeros: 32 CRCs of that length to build.
    pub fn new(zero_bytes: usize) -> ZeroShift {
        let zeros = vec![0u8; zero_bytes];
        let append = |crc: u32| crc32c::crc32c_append(crc, &zeros);
        let of_zero = append(0);
        let mut tables = Box::new([[0u32; 256]; 4]);
        for (byte_index, table) in tables.iter_mut().enumerate() {
            for bit in 0..8 {
                let contribution = append(1 << (8 * byte_index + bit)) ^ of_zero;
                for (byte, entry) in table.iter_mut().enumerate() {
                    if byte & (1 << bit) != 0 {
                        *entry ^= contribution;
                    }
                }
            }
        }
        ZeroShift { tables, of_zero }
    }

    /// `crc32c_append(crc, &[0; zero_bytes])`.
    pub fn apply(&self, crc: u32) -> u32 {
        let [b0, b1, b2, b3] = crc.to_le_bytes();
        self.of_zero
            ^ self.tables[0][usize::from(b0)]
            ^ self.tables[1][usize::from(b1)]
            ^ self.tables[2][usize::from(b2)]
            ^ self.tables[3][usize::from(b3)]
    }
}

/// One producer's values: a pool of random slots and what their CRCs
/// contribute. Lives on the producer's executor.
pub struct Values {
    random_bytes: usize,
    /// `slot_crcs.len()` slots of `random_bytes`, back to back.
    pool: Vec<u8>,
    /// Per slot: CRC32C of a value that is zero but for that slot, XOR
    /// CRC32C of an all-zero value.
    slot_crcs: Vec<u32>,
    /// Zeros after the random part, copied into every value.
    zeros: Vec<u8>,
    /// Moves the stamp's CRC past the rest of the value.
    after_stamp: ZeroShift,
    next_slot: usize,
}

impl std::fmt::Debug for Values {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Values")
            .field("random_bytes", &self.random_bytes)
            .field("slots", &self.slot_crcs.len())
            .finish()
    }
}

impl Values {
    /// Values of `options.record_bytes` with `options.random_fraction` of
    /// what follows the stamp random, the pool generated from `seed`.
    pub fn new(options: &WorkloadOptions, seed: u64) -> Values {
        let value_bytes = options.record_bytes;
        assert!(value_bytes >= STAMP_BYTES, "validated: room for the stamp");
        let random_bytes = ((value_bytes - STAMP_BYTES) as f64 * options.random_fraction) as usize;
        let zero_bytes = value_bytes - STAMP_BYTES - random_bytes;
        let records_per_batch = options.batch_bytes / value_bytes + 1;
        let slots = (POOL_BYTES_MIN.div_ceil(random_bytes.max(1)))
            .min(POOL_SLOTS_MAX)
            .max(BATCHES_PER_POOL * records_per_batch);
        let mut pool = vec![0u8; slots * random_bytes];
        Xorshift64::new(seed).fill(&mut pool);
        let after_slot = ZeroShift::new(zero_bytes);
        let zero_value = crc32c::crc32c(&vec![0u8; value_bytes]);
        let zero_stamp = crc32c::crc32c(&[0u8; STAMP_BYTES]);
        let slot_crcs = (0..slots)
            .map(|slot| {
                let random = &pool[slot * random_bytes..(slot + 1) * random_bytes];
                after_slot.apply(crc32c::crc32c_append(zero_stamp, random)) ^ zero_value
            })
            .collect();
        Values {
            random_bytes,
            pool,
            slot_crcs,
            zeros: vec![0; zero_bytes],
            after_stamp: ZeroShift::new(value_bytes - STAMP_BYTES),
            next_slot: 0,
        }
    }

    /// The next value after `stamp`: its random part and zeros (the stamp
    /// goes first), and the CRC32C of the whole value.
    pub fn next(&mut self, stamp: &[u8; STAMP_BYTES]) -> ([&[u8]; 2], u32) {
        let slot = self.next_slot;
        self.next_slot = (slot + 1) % self.slot_crcs.len();
        let random = &self.pool[slot * self.random_bytes..(slot + 1) * self.random_bytes];
        let crc = self.after_stamp.apply(crc32c::crc32c(stamp)) ^ self.slot_crcs[slot];
        ([random, &self.zeros], crc)
    }

    /// Distinct random parts before they repeat.
    pub fn slots(&self) -> usize {
        self.slot_crcs.len()
    }
}

/// A record's stamp: when it fell due (monotonic ns), the run, the
/// producer and its sequence number, little-endian (the consumer reads
/// them back in this order).
pub fn stamp(created_ns: u64, run_id: u32, producer: u32, sequence: u64) -> [u8; STAMP_BYTES] {
    let mut stamp = [0u8; STAMP_BYTES];
    stamp[..8].copy_from_slice(&created_ns.to_le_bytes());
    stamp[8..12].copy_from_slice(&run_id.to_le_bytes());
    stamp[12..16].copy_from_slice(&producer.to_le_bytes());
    stamp[16..24].copy_from_slice(&sequence.to_le_bytes());
    stamp
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options(record_bytes: usize, random_fraction: f64) -> WorkloadOptions {
        WorkloadOptions {
            record_bytes,
            random_fraction,
            batch_bytes: 64 << 10,
            ..WorkloadOptions::default()
        }
    }

    #[test]
    fn zero_shift_is_appending_zeros() {
        for zero_bytes in [0, 1, 7, 24, 1000, 4096] {
            let shift = ZeroShift::new(zero_bytes);
            for crc in [0, 1, 0xdead_beef, u32::MAX, 0x8000_0000] {
                let expected = crc32c::crc32c_append(crc, &vec![0; zero_bytes]);
                assert_eq!(
                    shift.apply(crc),
                    expected,
                    "{zero_bytes} zeros after {crc:#x}"
                );
            }
        }
    }

    /// The CRC the ledger enters is the CRC32C a consumer computes over
    /// the value's bytes, for every shape of value.
    #[test]
    fn the_cheap_crc_is_the_crc_of_the_value() {
        for (record_bytes, fraction) in [(1024, 0.5), (24, 0.5), (25, 1.0), (200, 0.0), (333, 0.3)]
        {
            let mut values = Values::new(&options(record_bytes, fraction), 7);
            for sequence in 0..(values.slots() as u64 + 3) {
                let stamp = stamp(sequence * 977, 3, 1, sequence);
                let ([random, zeros], crc) = values.next(&stamp);
                let value = [&stamp[..], random, zeros].concat();
                assert_eq!(value.len(), record_bytes);
                assert_eq!(
                    crc,
                    crc32c::crc32c(&value),
                    "{record_bytes} {fraction} {sequence}"
                );
            }
        }
    }

    /// Values are the stamp, then the asked fraction random, then zeros;
    /// random parts do not repeat within many batches, and differ between
    /// producers' seeds.
    #[test]
    fn values_keep_their_random_fraction_and_do_not_repeat_within_a_batch() {
        let options = options(1024, 0.5);
        let mut values = Values::new(&options, 11);
        assert!(values.slots() * values.random_bytes >= POOL_BYTES_MIN);
        assert!(values.slots() >= BATCHES_PER_POOL * (options.batch_bytes / 1024));
        let mut seen = std::collections::HashSet::new();
        for sequence in 0..values.slots() as u64 {
            let ([random, zeros], _) = values.next(&stamp(0, 0, 0, sequence));
            assert_eq!(random.len(), 500);
            assert_eq!(zeros.len(), 500);
            assert!(zeros.iter().all(|byte| *byte == 0));
            let nonzero = random.iter().filter(|byte| **byte != 0).count();
            assert!(nonzero > 480, "{nonzero} of 500 random bytes");
            assert!(seen.insert(random.to_vec()), "slot {sequence} repeats");
        }
        let ([first_again, _], _) = values.next(&stamp(0, 0, 0, 0));
        assert!(seen.contains(first_again), "slots are taken in turn");
        let mut other = Values::new(&options, 12);
        let ([other_random, _], _) = other.next(&stamp(0, 0, 0, 0));
        assert!(!seen.contains(other_random));
    }

    #[test]
    fn tiny_random_parts_keep_the_pool_bounded() {
        let values = Values::new(&options(40, 0.1), 1);
        assert_eq!(values.random_bytes, 1);
        assert_eq!(values.slots(), POOL_SLOTS_MAX);
    }
}
