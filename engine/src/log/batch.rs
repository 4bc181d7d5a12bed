//! Kafka v2 record batches as views over bytes.
//!
//! Layout (all integers big-endian; the CRC covers `attributes` to the end):
//!
//! ```text
//! offset size field
//!      0    8 baseOffset             assigned by the broker (not in the CRC)
//!      8    4 batchLength            bytes after this field
//!     12    4 partitionLeaderEpoch   assigned by the broker (not in the CRC)
//!     16    1 magic                  2
//!     17    4 crc                    CRC-32C of bytes 21..end
//!     21    2 attributes             compression, timestamp type, txn, control
//!     23    4 lastOffsetDelta
//!     27    8 baseTimestamp
//!     35    8 maxTimestamp
//!     43    8 producerId
//!     51    2 producerEpoch
//!     53    4 baseSequence
//!     57    4 recordsCount
//!     61      records
//! ```
//!
//! The broker never decodes records on the hot path: it validates the header and
//! CRC, rewrites the two fields the CRC does not cover, and stores the bytes.

use thiserror::Error;
use zerocopy::byteorder::big_endian::{I16, I32, I64, U32};
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout, Unaligned};

use crate::types::{LeaderEpoch, Offset, TimestampMs};

/// Bytes before `batchLength` ends: `baseOffset` and `batchLength` themselves.
pub const LOG_OVERHEAD_BYTES: usize = 12;
/// Size of the fixed v2 batch header, up to and including `recordsCount`.
pub const BATCH_HEADER_BYTES: usize = 61;
/// Smallest legal `batchLength`: a header with no records.
pub const BATCH_LENGTH_MIN: i32 = (BATCH_HEADER_BYTES - LOG_OVERHEAD_BYTES) as i32;
/// Where the CRC-covered part of a batch starts (`attributes`).
pub const CRC_COVERED_START: usize = 21;
/// Byte offset of `magic`, the first field needed to recognise a batch.
const MAGIC_POSITION: usize = 16;
/// The only record format Brook stores.
pub const MAGIC_V2: i8 = 2;
/// Largest offset a batch may end at; leaves room so `last + 1` never overflows.
pub const OFFSET_MAX: i64 = i64::MAX - 1;

/// The fixed header of a v2 record batch, viewed in place.
#[derive(Debug, FromBytes, IntoBytes, KnownLayout, Immutable, Unaligned)]
#[repr(C)]
pub struct BatchHeader {
    pub base_offset: I64,
    pub batch_length: I32,
    pub partition_leader_epoch: I32,
    pub magic: i8,
    pub crc: U32,
    pub attributes: I16,
    pub last_offset_delta: I32,
    pub base_timestamp: I64,
    pub max_timestamp: I64,
    pub producer_id: I64,
    pub producer_epoch: I16,
    pub base_sequence: I32,
    pub records_count: I32,
}

const _: () = assert!(size_of::<BatchHeader>() == BATCH_HEADER_BYTES);

impl BatchHeader {
    /// Views the header at the start of `bytes` (at least [`BATCH_HEADER_BYTES`]
    /// long), checking the length bounds and the magic but not that the whole
    /// batch is present: for walking batches without reading their records.
    pub fn parse(bytes: &[u8]) -> Result<&BatchHeader, BatchError> {
        let (header, _) =
            BatchHeader::ref_from_prefix(bytes).map_err(|_| BatchError::Truncated {
                need: BATCH_HEADER_BYTES,
                have: bytes.len(),
            })?;
        let declared = header.batch_length.get();
        if declared < BATCH_LENGTH_MIN {
            return Err(BatchError::LengthOutOfBounds {
                declared: i64::from(declared),
                min: i64::from(BATCH_LENGTH_MIN),
                max: i64::from(i32::MAX),
            });
        }
        if header.magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(header.magic));
        }
        Ok(header)
    }

    /// Total size of the batch, including the log overhead.
    pub fn size_bytes(&self) -> usize {
        LOG_OVERHEAD_BYTES + self.batch_length.get().max(0) as usize
    }

    pub fn base_offset(&self) -> Offset {
        Offset(self.base_offset.get())
    }

    pub fn last_offset(&self) -> Offset {
        Offset(
            self.base_offset
                .get()
                .saturating_add(i64::from(self.last_offset_delta.get())),
        )
    }

    pub fn max_timestamp(&self) -> TimestampMs {
        TimestampMs(self.max_timestamp.get())
    }
}

/// Why bytes are not an acceptable record batch.
#[derive(Clone, Debug, Error, PartialEq, Eq)]
pub enum BatchError {
    #[error("record batch truncated: need {need} bytes, have {have}")]
    Truncated { need: usize, have: usize },
    #[error("record batch length {declared} is out of bounds ({min}..={max})")]
    LengthOutOfBounds { declared: i64, min: i64, max: i64 },
    #[error("record batch declares {declared} bytes but {actual} bytes were given")]
    LengthMismatch { declared: usize, actual: usize },
    #[error("unsupported record batch magic {0} (only v2 is stored)")]
    UnsupportedMagic(i8),
    #[error("record batch CRC mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch { stored: u32, computed: u32 },
    #[error("record batch has {records_count} records but lastOffsetDelta {last_offset_delta}")]
    RecordCountMismatch {
        records_count: i32,
        last_offset_delta: i32,
    },
    #[error("record batch offsets {base}+{delta} do not fit")]
    OffsetOverflow { base: i64, delta: i32 },
}

/// Compression codec from bits 0–2 of the attributes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
    Unknown(u8),
}

/// Kafka's names of the codecs (`compression.type`, and its tools'
/// `compresscodec`).
impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Compression::None => f.write_str("none"),
            Compression::Gzip => f.write_str("gzip"),
            Compression::Snappy => f.write_str("snappy"),
            Compression::Lz4 => f.write_str("lz4"),
            Compression::Zstd => f.write_str("zstd"),
            Compression::Unknown(id) => write!(f, "unknown({id})"),
        }
    }
}

/// How a batch's timestamps were assigned (attribute bit 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimestampType {
    CreateTime,
    LogAppendTime,
}

/// The `attributes` field of a batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attributes(pub i16);

impl Attributes {
    pub fn compression(self) -> Compression {
        match self.0 & 0x07 {
            0 => Compression::None,
            1 => Compression::Gzip,
            2 => Compression::Snappy,
            3 => Compression::Lz4,
            4 => Compression::Zstd,
            other => Compression::Unknown(other as u8),
        }
    }

    pub fn timestamp_type(self) -> TimestampType {
        if self.0 & 0x08 != 0 {
            TimestampType::LogAppendTime
        } else {
            TimestampType::CreateTime
        }
    }

    pub fn is_transactional(self) -> bool {
        self.0 & 0x10 != 0
    }

    pub fn is_control(self) -> bool {
        self.0 & 0x20 != 0
    }

    pub fn has_delete_horizon(self) -> bool {
        self.0 & 0x40 != 0
    }
}

/// One whole record batch: `bytes` is exactly `LOG_OVERHEAD_BYTES + batchLength`
/// long and carries magic 2. The CRC is *not* checked by construction; call
/// [`BatchView::verify_crc`] or [`BatchView::validate_for_append`].
#[derive(Clone, Copy, Debug)]
pub struct BatchView<'a> {
    bytes: &'a [u8],
}

impl<'a> BatchView<'a> {
    /// Views the batch at the start of `bytes`, which may continue with more
    /// batches. Fails if the prefix is too short to hold the declared length,
    /// if the length is out of bounds, or if the magic is not 2.
    pub fn parse_prefix(bytes: &'a [u8]) -> Result<BatchView<'a>, BatchError> {
        if bytes.len() <= MAGIC_POSITION {
            return Err(BatchError::Truncated {
                need: MAGIC_POSITION + 1,
                have: bytes.len(),
            });
        }
        let declared = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        if declared < BATCH_LENGTH_MIN {
            return Err(BatchError::LengthOutOfBounds {
                declared: i64::from(declared),
                min: i64::from(BATCH_LENGTH_MIN),
                max: i64::from(i32::MAX),
            });
        }
        let magic = bytes[MAGIC_POSITION] as i8;
        if magic != MAGIC_V2 {
            return Err(BatchError::UnsupportedMagic(magic));
        }
        let size = LOG_OVERHEAD_BYTES + declared as usize;
        if bytes.len() < size {
            return Err(BatchError::Truncated {
                need: size,
                have: bytes.len(),
            });
        }
        Ok(BatchView {
            bytes: &bytes[..size],
        })
    }

    /// Views `bytes` as exactly one batch: the declared length must match.
    pub fn parse_exact(bytes: &'a [u8]) -> Result<BatchView<'a>, BatchError> {
        let batch = BatchView::parse_prefix(bytes)?;
        if batch.size_bytes() != bytes.len() {
            return Err(BatchError::LengthMismatch {
                declared: batch.size_bytes(),
                actual: bytes.len(),
            });
        }
        Ok(batch)
    }

    pub fn header(&self) -> &'a BatchHeader {
        // The length was checked at construction, so the prefix always fits.
        let (header, _) = BatchHeader::ref_from_prefix(self.bytes).expect("checked length");
        header
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// Total size on disk, including the 12-byte log overhead.
    pub fn size_bytes(&self) -> usize {
        self.bytes.len()
    }

    pub fn base_offset(&self) -> Offset {
        Offset(self.header().base_offset.get())
    }

    /// `baseOffset + lastOffsetDelta`, saturating for corrupt headers (use
    /// [`BatchView::validate_for_append`] to reject those).
    pub fn last_offset(&self) -> Offset {
        let delta = i64::from(self.header().last_offset_delta.get());
        Offset(self.header().base_offset.get().saturating_add(delta))
    }

    /// The offset right after this batch.
    pub fn next_offset(&self) -> Offset {
        Offset(self.last_offset().0.saturating_add(1))
    }

    pub fn last_offset_delta(&self) -> i32 {
        self.header().last_offset_delta.get()
    }

    pub fn records_count(&self) -> i32 {
        self.header().records_count.get()
    }

    pub fn partition_leader_epoch(&self) -> LeaderEpoch {
        LeaderEpoch(self.header().partition_leader_epoch.get())
    }

    pub fn attributes(&self) -> Attributes {
        Attributes(self.header().attributes.get())
    }

    pub fn base_timestamp(&self) -> TimestampMs {
        TimestampMs(self.header().base_timestamp.get())
    }

    pub fn max_timestamp(&self) -> TimestampMs {
        TimestampMs(self.header().max_timestamp.get())
    }

    pub fn producer_id(&self) -> i64 {
        self.header().producer_id.get()
    }

    pub fn producer_epoch(&self) -> i16 {
        self.header().producer_epoch.get()
    }

    pub fn base_sequence(&self) -> i32 {
        self.header().base_sequence.get()
    }

    /// The record bytes after the fixed header (compressed if the batch is).
    pub fn records_bytes(&self) -> &'a [u8] {
        &self.bytes[BATCH_HEADER_BYTES..]
    }

    pub fn crc_stored(&self) -> u32 {
        self.header().crc.get()
    }

    pub fn crc_computed(&self) -> u32 {
        crc32c::crc32c(&self.bytes[CRC_COVERED_START..])
    }

    pub fn verify_crc(&self) -> Result<(), BatchError> {
        let (stored, computed) = (self.crc_stored(), self.crc_computed());
        if stored != computed {
            return Err(BatchError::CrcMismatch { stored, computed });
        }
        Ok(())
    }

    /// Checks everything the log relies on before storing a batch: the CRC,
    /// that `recordsCount == lastOffsetDelta + 1` (Kafka's rule for v2 batches
    /// from producers), and [`BatchView::check_placement`] at `base_offset`.
    pub fn validate_for_append(&self, base_offset: Offset) -> Result<(), BatchError> {
        self.verify_crc()?;
        let (count, delta) = (self.records_count(), self.last_offset_delta());
        if delta < 0 || count != delta.wrapping_add(1) {
            return Err(BatchError::RecordCountMismatch {
                records_count: count,
                last_offset_delta: delta,
            });
        }
        self.check_placement(base_offset)
    }

    /// Checks that the batch's offsets stay within `0..=OFFSET_MAX` when it
    /// is placed at `base_offset`.
    pub fn check_placement(&self, base_offset: Offset) -> Result<(), BatchError> {
        let delta = self.last_offset_delta();
        match base_offset.0.checked_add(i64::from(delta)) {
            Some(last) if base_offset.0 >= 0 && delta >= 0 && last <= OFFSET_MAX => Ok(()),
            _ => Err(BatchError::OffsetOverflow {
                base: base_offset.0,
                delta,
            }),
        }
    }
}

/// Iterates the batches of a byte sequence, yielding each with its position.
/// Stops after the first error (which it yields).
#[derive(Debug)]
pub struct Batches<'a> {
    bytes: &'a [u8],
    position: usize,
    failed: bool,
}

impl<'a> Batches<'a> {
    pub fn new(bytes: &'a [u8]) -> Batches<'a> {
        Batches {
            bytes,
            position: 0,
            failed: false,
        }
    }
}

impl<'a> Iterator for Batches<'a> {
    type Item = Result<(usize, BatchView<'a>), BatchError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.position >= self.bytes.len() {
            return None;
        }
        match BatchView::parse_prefix(&self.bytes[self.position..]) {
            Ok(batch) => {
                let position = self.position;
                self.position += batch.size_bytes();
                Some(Ok((position, batch)))
            }
            Err(error) => {
                self.failed = true;
                Some(Err(error))
            }
        }
    }
}

/// Rewrites `baseOffset` of the batch at the start of `bytes`. The field is
/// outside the CRC, so the batch stays valid.
pub fn set_base_offset(bytes: &mut [u8], base_offset: Offset) -> Result<(), BatchError> {
    header_mut(bytes)?.base_offset.set(base_offset.0);
    Ok(())
}

/// Rewrites `partitionLeaderEpoch` of the batch at the start of `bytes`. The
/// field is outside the CRC, so the batch stays valid.
pub fn set_partition_leader_epoch(bytes: &mut [u8], epoch: LeaderEpoch) -> Result<(), BatchError> {
    header_mut(bytes)?.partition_leader_epoch.set(epoch.0);
    Ok(())
}

/// Stamps a batch with the broker's clock (`message.timestamp.type=LogAppendTime`):
/// sets the timestamp-type attribute and `maxTimestamp`, then recomputes the CRC.
/// `header` is the batch's first [`BATCH_HEADER_BYTES`] and `records` the rest,
/// so the caller can stamp a header copy without copying the records.
pub fn set_log_append_time(
    header: &mut [u8],
    records: &[u8],
    now: TimestampMs,
) -> Result<(), BatchError> {
    let fields = header_mut(header)?;
    fields.attributes.set(fields.attributes.get() | 0x08);
    fields.max_timestamp.set(now.0);
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(&header[CRC_COVERED_START..BATCH_HEADER_BYTES]),
        records,
    );
    header_mut(header)?.crc.set(crc);
    Ok(())
}

fn header_mut(bytes: &mut [u8]) -> Result<&mut BatchHeader, BatchError> {
    let have = bytes.len();
    BatchHeader::mut_from_prefix(bytes)
        .map(|(header, _)| header)
        .map_err(|_| BatchError::Truncated {
            need: BATCH_HEADER_BYTES,
            have,
        })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid batch with `count` empty records, built field by field from the
    /// layout above (records are 7 bytes each: length 6, attributes, timestamp
    /// delta, offset delta, key -1, value -1, no headers).
    pub(crate) fn sample_batch(count: i32, max_timestamp: i64) -> Vec<u8> {
        let mut records = Vec::new();
        for i in 0..count {
            // length=6 (zigzag 12), attributes 0, timestamp delta 0,
            // offset delta i (zigzag 2i, small counts only), key -1, value -1, 0 headers.
            records.extend_from_slice(&[12, 0, 0, (2 * i) as u8, 1, 1, 0]);
        }
        let mut bytes = Vec::new();
        bytes.extend_from_slice(&0i64.to_be_bytes());
        bytes
            .extend_from_slice(&((BATCH_LENGTH_MIN as usize + records.len()) as i32).to_be_bytes());
        bytes.extend_from_slice(&0i32.to_be_bytes());
        bytes.push(2);
        bytes.extend_from_slice(&0u32.to_be_bytes());
        bytes.extend_from_slice(&0i16.to_be_bytes());
        bytes.extend_from_slice(&(count - 1).to_be_bytes());
        bytes.extend_from_slice(&max_timestamp.to_be_bytes());
        bytes.extend_from_slice(&max_timestamp.to_be_bytes());
        bytes.extend_from_slice(&(-1i64).to_be_bytes());
        bytes.extend_from_slice(&(-1i16).to_be_bytes());
        bytes.extend_from_slice(&(-1i32).to_be_bytes());
        bytes.extend_from_slice(&count.to_be_bytes());
        bytes.extend_from_slice(&records);
        let crc = crc32c::crc32c(&bytes[CRC_COVERED_START..]);
        bytes[17..21].copy_from_slice(&crc.to_be_bytes());
        bytes
    }

    #[test]
    fn header_fields_are_read_in_place() {
        let bytes = sample_batch(3, 1_700_000_000_000);
        let batch = BatchView::parse_exact(&bytes).unwrap();
        assert_eq!(batch.size_bytes(), 61 + 21);
        assert_eq!(batch.records_count(), 3);
        assert_eq!(batch.last_offset(), Offset(2));
        assert_eq!(batch.max_timestamp(), TimestampMs(1_700_000_000_000));
        assert_eq!(batch.attributes().compression(), Compression::None);
        assert_eq!(batch.validate_for_append(Offset(0)), Ok(()));
    }

    #[test]
    fn rewriting_offset_and_epoch_keeps_the_crc_valid() {
        let mut bytes = sample_batch(2, 5);
        let before = bytes[CRC_COVERED_START..].to_vec();
        set_base_offset(&mut bytes, Offset(1_000)).unwrap();
        set_partition_leader_epoch(&mut bytes, LeaderEpoch(7)).unwrap();
        let batch = BatchView::parse_exact(&bytes).unwrap();
        assert_eq!(batch.base_offset(), Offset(1_000));
        assert_eq!(batch.last_offset(), Offset(1_001));
        assert_eq!(batch.partition_leader_epoch(), LeaderEpoch(7));
        assert_eq!(batch.verify_crc(), Ok(()));
        assert_eq!(&bytes[CRC_COVERED_START..], &before[..]);
    }

    #[test]
    fn log_append_time_restamps_and_keeps_the_batch_valid() {
        let mut bytes = sample_batch(2, 5);
        let (header, records) = bytes.split_at_mut(BATCH_HEADER_BYTES);
        set_log_append_time(header, records, TimestampMs(99)).unwrap();
        let batch = BatchView::parse_exact(&bytes).unwrap();
        assert_eq!(
            batch.attributes().timestamp_type(),
            TimestampType::LogAppendTime
        );
        assert_eq!(batch.max_timestamp(), TimestampMs(99));
        assert_eq!(batch.verify_crc(), Ok(()));
    }

    #[test]
    fn malformed_batches_are_typed_errors() {
        let good = sample_batch(1, 0);
        assert!(matches!(
            BatchView::parse_prefix(&good[..10]),
            Err(BatchError::Truncated { need: 17, have: 10 })
        ));
        assert!(matches!(
            BatchView::parse_prefix(&good[..good.len() - 1]),
            Err(BatchError::Truncated { .. })
        ));
        let mut extra = good.clone();
        extra.push(0);
        assert_eq!(
            BatchView::parse_exact(&extra).unwrap_err(),
            BatchError::LengthMismatch {
                declared: good.len(),
                actual: good.len() + 1
            }
        );
        let mut magic = good.clone();
        magic[16] = 1;
        assert_eq!(
            BatchView::parse_prefix(&magic).unwrap_err(),
            BatchError::UnsupportedMagic(1)
        );
        let mut short = good.clone();
        short[8..12].copy_from_slice(&10i32.to_be_bytes());
        assert!(matches!(
            BatchView::parse_prefix(&short),
            Err(BatchError::LengthOutOfBounds { declared: 10, .. })
        ));
        let mut flipped = good.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(matches!(
            BatchView::parse_exact(&flipped)
                .unwrap()
                .validate_for_append(Offset(0)),
            Err(BatchError::CrcMismatch { .. })
        ));
    }

    #[test]
    fn offsets_that_do_not_fit_are_rejected() {
        let bytes = sample_batch(3, 0);
        let batch = BatchView::parse_exact(&bytes).unwrap();
        assert!(matches!(
            batch.validate_for_append(Offset(OFFSET_MAX - 1)),
            Err(BatchError::OffsetOverflow { .. })
        ));
        assert_eq!(batch.validate_for_append(Offset(OFFSET_MAX - 2)), Ok(()));
    }

    #[test]
    fn batches_iterates_positions_and_stops_at_the_first_error() {
        let mut bytes = sample_batch(1, 0);
        let first = bytes.len();
        bytes.extend(sample_batch(2, 0));
        bytes.extend_from_slice(&[0; 20]);
        let items: Vec<_> = Batches::new(&bytes).collect();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0].as_ref().unwrap().0, 0);
        assert_eq!(items[1].as_ref().unwrap().0, first);
        assert!(items[2].is_err());
    }
}
