//! Kafka's producer snapshot file, `<20-digit offset>.snapshot`, version 1.
//!
//! The offset in the name is the log offset the state is valid *before*
//! (`lastMapOffset`): recovery loads the newest snapshot at or below its
//! target and replays the log from that offset. Layout, all big-endian
//! (`ProducerStateManager.PID_SNAPSHOT_MAP_SCHEMA`):
//!
//! ```text
//! offset size field
//!      0    2 version                    1
//!      2    4 crc                        CRC-32C of bytes 6..end
//!      6    4 producer_entries count     then count entries of 46 bytes:
//!      +0   8   producer_id
//!      +8   2   epoch
//!     +10   4   last_sequence            -1 when no batch is known
//!     +14   8   last_offset              -1 when no batch is known
//!     +22   4   offset_delta             last offset - first offset of that batch
//!     +26   8   timestamp                the producer's last timestamp
//!     +34   4   coordinator_epoch
//!     +38   8   current_txn_first_offset -1 when no transaction is open
//! ```
//!
//! Only the last batch of each producer is stored, so after a restart a retry
//! of an older one of its last 5 batches is no longer recognised (as in Kafka).
//! Decoding checks every length before allocating and never panics; unlike
//! Kafka it also rejects bytes after the last entry (Kafka never writes any).

use thiserror::Error;
use zerocopy::byteorder::big_endian::{I16, I32, I64};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::{Offset, ProducerId, TimestampMs};

use super::PRODUCERS_MAX;
use super::entry::{BatchMetadata, ProducerStateEntry};
use super::sequence::{ProducerEpoch, Sequence};

/// The only snapshot version Kafka writes (`PRODUCER_SNAPSHOT_VERSION`).
pub const SNAPSHOT_VERSION: i16 = 1;
/// Version, CRC and entry count.
pub const SNAPSHOT_HEADER_BYTES: usize = 10;
/// One producer's entry.
pub const SNAPSHOT_ENTRY_BYTES: usize = 46;
/// File name suffix (`LogFileUtils.PRODUCER_SNAPSHOT_FILE_SUFFIX`).
pub const SNAPSHOT_FILE_SUFFIX: &str = ".snapshot";

const CRC_POSITION: usize = 2;
/// The CRC covers the entry count and the entries.
const CRC_COVERED_START: usize = 6;

/// One entry in place, big-endian.
#[derive(Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
struct EntryBytes {
    producer_id: I64,
    producer_epoch: I16,
    last_sequence: I32,
    last_offset: I64,
    offset_delta: I32,
    timestamp: I64,
    coordinator_epoch: I32,
    current_transaction_first_offset: I64,
}

const _: () = assert!(size_of::<EntryBytes>() == SNAPSHOT_ENTRY_BYTES);

/// Why bytes are not a usable snapshot. Kafka deletes such a file and falls
/// back to an older one (or to replaying the whole log).
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum SnapshotError {
    #[error("producer snapshot truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("unsupported producer snapshot version {0}")]
    UnsupportedVersion(i16),
    #[error("producer snapshot declares {declared} producers (limit {max})")]
    CountOutOfBounds { declared: i64, max: usize },
    #[error("producer snapshot holds {actual} bytes but its count needs {declared}")]
    LengthMismatch { declared: usize, actual: usize },
    #[error("producer snapshot CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
}

/// One producer as the snapshot stores it, fields as in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SnapshotEntry {
    pub producer_id: ProducerId,
    pub producer_epoch: ProducerEpoch,
    pub last_sequence: Sequence,
    pub last_offset: Offset,
    pub offset_delta: i32,
    pub timestamp: TimestampMs,
    pub coordinator_epoch: i32,
    /// -1 when no transaction is open.
    pub current_transaction_first_offset: Offset,
}

impl SnapshotEntry {
    /// What Kafka's `writeSnapshot` stores for a producer.
    pub fn of(producer_id: ProducerId, entry: &ProducerStateEntry) -> SnapshotEntry {
        SnapshotEntry {
            producer_id,
            producer_epoch: entry.producer_epoch(),
            last_sequence: entry.last_sequence(),
            last_offset: entry.last_data_offset(),
            offset_delta: entry.last_offset_delta(),
            timestamp: entry.last_timestamp(),
            coordinator_epoch: entry.coordinator_epoch(),
            current_transaction_first_offset: entry
                .current_transaction_first_offset()
                .unwrap_or(Offset(-1)),
        }
    }

    /// The producer as Kafka's `readSnapshot` restores it: the batch only if
    /// its offset is known, the transaction only if its offset is not negative.
    pub fn to_entry(&self) -> ProducerStateEntry {
        let last_batch = (self.last_offset.0 >= 0).then_some(BatchMetadata {
            last_sequence: self.last_sequence,
            last_offset: self.last_offset,
            offset_delta: self.offset_delta,
            timestamp: self.timestamp,
        });
        let transaction = (self.current_transaction_first_offset.0 >= 0)
            .then_some(self.current_transaction_first_offset);
        ProducerStateEntry::restored(
            self.producer_epoch,
            self.coordinator_epoch,
            self.timestamp,
            transaction,
            last_batch,
        )
    }

    fn to_bytes(self) -> EntryBytes {
        EntryBytes {
            producer_id: I64::new(self.producer_id.0),
            producer_epoch: I16::new(self.producer_epoch.0),
            last_sequence: I32::new(self.last_sequence.0),
            last_offset: I64::new(self.last_offset.0),
            offset_delta: I32::new(self.offset_delta),
            timestamp: I64::new(self.timestamp.0),
            coordinator_epoch: I32::new(self.coordinator_epoch),
            current_transaction_first_offset: I64::new(self.current_transaction_first_offset.0),
        }
    }

    fn from_bytes(bytes: &EntryBytes) -> SnapshotEntry {
        SnapshotEntry {
            producer_id: ProducerId(bytes.producer_id.get()),
            producer_epoch: ProducerEpoch(bytes.producer_epoch.get()),
            last_sequence: Sequence(bytes.last_sequence.get()),
            last_offset: Offset(bytes.last_offset.get()),
            offset_delta: bytes.offset_delta.get(),
            timestamp: TimestampMs(bytes.timestamp.get()),
            coordinator_epoch: bytes.coordinator_epoch.get(),
            current_transaction_first_offset: Offset(bytes.current_transaction_first_offset.get()),
        }
    }
}

/// A snapshot file's contents and the offset its name carries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProducerSnapshot {
    pub offset: Offset,
    pub entries: Vec<SnapshotEntry>,
}

impl ProducerSnapshot {
    /// The file's bytes. Refuses more than [`PRODUCERS_MAX`] entries, which
    /// [`ProducerSnapshot::decode`] would refuse to read back.
    pub fn encode(&self) -> Result<Vec<u8>, SnapshotError> {
        if self.entries.len() > PRODUCERS_MAX {
            return Err(SnapshotError::CountOutOfBounds {
                declared: self.entries.len() as i64,
                max: PRODUCERS_MAX,
            });
        }
        let size = SNAPSHOT_HEADER_BYTES + self.entries.len() * SNAPSHOT_ENTRY_BYTES;
        let mut bytes = Vec::with_capacity(size);
        bytes.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        bytes.extend_from_slice(&[0; 4]);
        bytes.extend_from_slice(&(self.entries.len() as i32).to_be_bytes());
        for entry in &self.entries {
            bytes.extend_from_slice(entry.to_bytes().as_bytes());
        }
        let crc = crc32c::crc32c(&bytes[CRC_COVERED_START..]);
        bytes[CRC_POSITION..CRC_COVERED_START].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(bytes.len(), size);
        Ok(bytes)
    }

    /// Reads the file named by `offset`.
    pub fn decode(offset: Offset, bytes: &[u8]) -> Result<ProducerSnapshot, SnapshotError> {
        let (version, stored_crc, declared) = decode_header(bytes)?;
        if version != SNAPSHOT_VERSION {
            return Err(SnapshotError::UnsupportedVersion(version));
        }
        let count = usize::try_from(declared)
            .ok()
            .filter(|count| *count <= PRODUCERS_MAX)
            .ok_or(SnapshotError::CountOutOfBounds {
                declared: i64::from(declared),
                max: PRODUCERS_MAX,
            })?;
        let body = &bytes[SNAPSHOT_HEADER_BYTES..];
        if body.len() != count * SNAPSHOT_ENTRY_BYTES {
            return Err(SnapshotError::LengthMismatch {
                declared: SNAPSHOT_HEADER_BYTES + count * SNAPSHOT_ENTRY_BYTES,
                actual: bytes.len(),
            });
        }
        let computed = crc32c::crc32c(&bytes[CRC_COVERED_START..]);
        if computed != stored_crc {
            return Err(SnapshotError::CrcMismatch {
                stored: stored_crc,
                computed,
            });
        }
        // The length is an exact multiple of the unaligned entry size.
        let entries = <[EntryBytes]>::ref_from_bytes(body).expect("length checked above");
        Ok(ProducerSnapshot {
            offset,
            entries: entries.iter().map(SnapshotEntry::from_bytes).collect(),
        })
    }

    pub fn file_name(&self) -> String {
        snapshot_file_name(self.offset)
    }
}

fn decode_header(bytes: &[u8]) -> Result<(i16, u32, i32), SnapshotError> {
    let Some(header) = bytes.get(..SNAPSHOT_HEADER_BYTES) else {
        return Err(SnapshotError::Truncated {
            need: SNAPSHOT_HEADER_BYTES,
            have: bytes.len(),
        });
    };
    let version = i16::from_be_bytes([header[0], header[1]]);
    let crc = u32::from_be_bytes([header[2], header[3], header[4], header[5]]);
    let count = i32::from_be_bytes([header[6], header[7], header[8], header[9]]);
    Ok((version, crc, count))
}

/// `<20-digit offset>.snapshot`, as Kafka names them.
pub fn snapshot_file_name(offset: Offset) -> String {
    format!("{:020}{SNAPSHOT_FILE_SUFFIX}", offset.0)
}

/// The inverse of [`snapshot_file_name`]; `None` for any other name.
pub fn parse_snapshot_file_name(name: &str) -> Option<Offset> {
    let stem = name.strip_suffix(SNAPSHOT_FILE_SUFFIX)?;
    if stem.len() != 20 || !stem.bytes().all(|byte| byte.is_ascii_digit()) {
        return None;
    }
    stem.parse::<i64>().ok().map(Offset)
}

/// Whether a snapshot may be loaded for a log `log_start..log_end`: Kafka
/// deletes the others (`offset > logEnd || offset <= logStart`) on truncation.
pub fn snapshot_in_range(offset: Offset, log_start_offset: Offset, log_end_offset: Offset) -> bool {
    offset > log_start_offset && offset <= log_end_offset
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn sample_entry() -> SnapshotEntry {
        SnapshotEntry {
            producer_id: ProducerId(0x0102_0304_0506_0708),
            producer_epoch: ProducerEpoch(0x0A0B),
            last_sequence: Sequence(0x0C0D_0E0F),
            last_offset: Offset(0x1112_1314_1516_1718),
            offset_delta: 0x191A_1B1C,
            timestamp: TimestampMs(0x2122_2324_2526_2728),
            coordinator_epoch: 0x292A_2B2C,
            current_transaction_first_offset: Offset(-1),
        }
    }

    #[test]
    fn encodes_kafkas_exact_bytes() {
        let snapshot = ProducerSnapshot {
            offset: Offset(42),
            entries: vec![sample_entry()],
        };
        let bytes = snapshot.encode().unwrap();
        let mut expected: Vec<u8> = vec![0, 1, 0, 0, 0, 0, 0, 0, 0, 1];
        expected.extend_from_slice(&[1, 2, 3, 4, 5, 6, 7, 8]);
        expected.extend_from_slice(&[0x0A, 0x0B]);
        expected.extend_from_slice(&[0x0C, 0x0D, 0x0E, 0x0F]);
        expected.extend_from_slice(&[0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18]);
        expected.extend_from_slice(&[0x19, 0x1A, 0x1B, 0x1C]);
        expected.extend_from_slice(&[0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28]);
        expected.extend_from_slice(&[0x29, 0x2A, 0x2B, 0x2C]);
        expected.extend_from_slice(&[0xFF; 8]);
        let crc = crc32c::crc32c(&expected[6..]);
        expected[2..6].copy_from_slice(&crc.to_be_bytes());
        assert_eq!(bytes, expected);
        assert_eq!(bytes.len(), SNAPSHOT_HEADER_BYTES + SNAPSHOT_ENTRY_BYTES);
        assert_eq!(ProducerSnapshot::decode(Offset(42), &bytes), Ok(snapshot));
    }

    #[test]
    fn an_empty_snapshot_is_ten_bytes() {
        let bytes = ProducerSnapshot {
            offset: Offset(0),
            entries: Vec::new(),
        }
        .encode()
        .unwrap();
        // CRC-32C of the four zero bytes of the count.
        let crc = crc32c::crc32c(&[0, 0, 0, 0]).to_be_bytes();
        assert_eq!(
            bytes,
            [0, 1, crc[0], crc[1], crc[2], crc[3], 0, 0, 0, 0].to_vec()
        );
    }

    #[test]
    fn damaged_snapshots_are_typed_errors() {
        let good = ProducerSnapshot {
            offset: Offset(7),
            entries: vec![sample_entry(); 2],
        }
        .encode()
        .unwrap();
        let decode = |bytes: &[u8]| ProducerSnapshot::decode(Offset(7), bytes);
        assert_eq!(
            decode(&good[..9]),
            Err(SnapshotError::Truncated { need: 10, have: 9 })
        );
        let mut version = good.clone();
        version[1] = 2;
        assert_eq!(decode(&version), Err(SnapshotError::UnsupportedVersion(2)));
        let mut negative = good.clone();
        negative[6..10].copy_from_slice(&(-1i32).to_be_bytes());
        assert!(matches!(
            decode(&negative),
            Err(SnapshotError::CountOutOfBounds { declared: -1, .. })
        ));
        let mut huge = good.clone();
        huge[6..10].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            decode(&huge),
            Err(SnapshotError::CountOutOfBounds { .. })
        ));
        assert!(matches!(
            decode(&good[..good.len() - 1]),
            Err(SnapshotError::LengthMismatch { .. })
        ));
        let mut trailing = good.clone();
        trailing.push(0);
        assert!(matches!(
            decode(&trailing),
            Err(SnapshotError::LengthMismatch { .. })
        ));
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(
            decode(&flipped),
            Err(SnapshotError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn restoring_follows_kafkas_sentinels() {
        let mut stored = sample_entry();
        stored.last_offset = Offset(-1);
        let entry = stored.to_entry();
        assert!(entry.is_empty());
        assert_eq!(entry.current_transaction_first_offset(), None);
        assert_eq!(entry.last_timestamp(), stored.timestamp);
        stored.last_offset = Offset(100);
        stored.offset_delta = 3;
        stored.last_sequence = Sequence(1);
        stored.current_transaction_first_offset = Offset(90);
        let entry = stored.to_entry();
        let batch = entry.batches().next().unwrap();
        assert_eq!(batch.first_offset(), Offset(97));
        assert_eq!(batch.first_sequence(), Sequence(i32::MAX - 1));
        assert_eq!(entry.current_transaction_first_offset(), Some(Offset(90)));
        assert_eq!(SnapshotEntry::of(stored.producer_id, &entry), stored);
    }

    #[test]
    fn file_names_round_trip() {
        assert_eq!(
            snapshot_file_name(Offset(368_769)),
            "00000000000000368769.snapshot"
        );
        assert_eq!(
            parse_snapshot_file_name("00000000000000368769.snapshot"),
            Some(Offset(368_769))
        );
        for other in [
            "00000000000000368769.log",
            "368769.snapshot",
            "0000000000000036876x.snapshot",
            "00000000000000368769.snapshot.deleted",
        ] {
            assert_eq!(parse_snapshot_file_name(other), None, "{other}");
        }
    }

    #[test]
    fn snapshots_in_range_follow_kafkas_deletion_rule() {
        // (snapshot offset, log start, log end, loadable)
        let rows = [
            (5, 0, 10, true),
            (10, 0, 10, true),
            (11, 0, 10, false),
            (3, 3, 10, false),
        ];
        for (offset, start, end, loadable) in rows {
            assert_eq!(
                snapshot_in_range(Offset(offset), Offset(start), Offset(end)),
                loadable,
                "{offset} in ({start}, {end}]"
            );
        }
    }

    fn any_entry() -> impl Strategy<Value = SnapshotEntry> {
        (
            any::<i64>(),
            any::<i16>(),
            any::<i32>(),
            any::<i64>(),
            any::<i32>(),
            any::<i64>(),
            any::<i32>(),
            any::<i64>(),
        )
            .prop_map(|fields| SnapshotEntry {
                producer_id: ProducerId(fields.0),
                producer_epoch: ProducerEpoch(fields.1),
                last_sequence: Sequence(fields.2),
                last_offset: Offset(fields.3),
                offset_delta: fields.4,
                timestamp: TimestampMs(fields.5),
                coordinator_epoch: fields.6,
                current_transaction_first_offset: Offset(fields.7),
            })
    }

    proptest! {
        #[test]
        fn snapshots_round_trip(
            offset in any::<i64>(),
            entries in proptest::collection::vec(any_entry(), 0..40),
        ) {
            let snapshot = ProducerSnapshot { offset: Offset(offset), entries };
            let bytes = snapshot.encode().unwrap();
            prop_assert_eq!(bytes.len(), SNAPSHOT_HEADER_BYTES + snapshot.entries.len() * SNAPSHOT_ENTRY_BYTES);
            let decoded = ProducerSnapshot::decode(Offset(offset), &bytes).unwrap();
            prop_assert_eq!(&decoded, &snapshot);
            prop_assert_eq!(decoded.encode().unwrap(), bytes);
        }

        #[test]
        fn garbage_is_an_error_not_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..600)) {
            // Random bytes pass the CRC with probability 2^-32; anything that
            // decodes must re-encode to the same bytes.
            if let Ok(snapshot) = ProducerSnapshot::decode(Offset(0), &bytes) {
                prop_assert_eq!(snapshot.encode().unwrap(), bytes);
            }
        }

        #[test]
        fn every_truncation_or_flipped_bit_is_an_error(
            entries in proptest::collection::vec(any_entry(), 1..8),
            cut in any::<prop::sample::Index>(),
            flip in any::<prop::sample::Index>(),
            bit in 0u8..8,
        ) {
            let bytes = ProducerSnapshot { offset: Offset(1), entries }.encode().unwrap();
            let truncated = &bytes[..cut.index(bytes.len())];
            prop_assert!(ProducerSnapshot::decode(Offset(1), truncated).is_err());
            let mut flipped = bytes.clone();
            flipped[flip.index(bytes.len())] ^= 1 << bit;
            prop_assert!(ProducerSnapshot::decode(Offset(1), &flipped).is_err());
        }
    }
}
