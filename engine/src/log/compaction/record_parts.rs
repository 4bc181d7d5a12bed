//! A v2 record's parts, as the cleaner and the compacted-topic key check need
//! them: its key, whether it has a value, and its bytes as stored, so that a
//! surviving record is copied as it is (or with its timestamp delta alone
//! re-encoded) instead of being decoded and built again.
//!
//! A record (integers are zigzag varints):
//!
//! ```text
//! length varint            bytes after this field
//! attributes int8          unused, 0
//! timestampDelta varlong   from the batch's baseTimestamp
//! offsetDelta varint       from the batch's baseOffset
//! keyLength varint         -1 for a null key
//! key
//! valueLength varint       -1 for a null value (a tombstone)
//! value
//! headerCount varint
//! headers                  (keyLength, key, valueLength, value) each
//! ```

use std::borrow::Cow;

use kafka_protocol::compression::decompress_bounded;
use kafka_protocol::records::Compression as Codec;

use crate::log::batch::{BatchView, Compression};
use crate::log::records::{DECOMPRESSED_BATCH_BYTES_MAX, RecordsError, read_varint};
use crate::types::{Offset, TimestampMs};

/// The fewest bytes a record takes: a one-byte varint or int8 per field.
pub const RECORD_BYTES_MIN: usize = 7;

/// One record of a batch, viewed in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecordParts<'a> {
    pub attributes: u8,
    pub timestamp_delta: i64,
    pub offset_delta: i64,
    pub key: Option<&'a [u8]>,
    /// False for a tombstone.
    pub has_value: bool,
    /// The record as stored, its length prefix included.
    pub encoded: &'a [u8],
    /// From `keyLength` to the record's end: what a new timestamp delta
    /// leaves unchanged.
    pub from_key: &'a [u8],
}

impl RecordParts<'_> {
    pub fn offset(&self, base_offset: Offset) -> Offset {
        Offset(base_offset.0.saturating_add(self.offset_delta))
    }

    pub fn timestamp(&self, base_timestamp: TimestampMs) -> TimestampMs {
        TimestampMs(base_timestamp.0.saturating_add(self.timestamp_delta))
    }
}

/// The kafka-protocol codec of a batch's compression; `None` for an unknown one.
pub fn codec_of(compression: Compression) -> Option<Codec> {
    Some(match compression {
        Compression::None => Codec::None,
        Compression::Gzip => Codec::Gzip,
        Compression::Snappy => Codec::Snappy,
        Compression::Lz4 => Codec::Lz4,
        Compression::Zstd => Codec::Zstd,
        Compression::Unknown(_) => return None,
    })
}

/// The records section of `batch`, decompressed (into at most
/// [`DECOMPRESSED_BATCH_BYTES_MAX`]) when the batch is compressed.
pub fn records_section<'a>(batch: &BatchView<'a>) -> Result<Cow<'a, [u8]>, RecordsError> {
    let compression = batch.attributes().compression();
    if compression == Compression::None {
        return Ok(Cow::Borrowed(batch.records_bytes()));
    }
    let codec = codec_of(compression).ok_or_else(|| {
        RecordsError::Decompression(format!("unknown compression {compression:?}"))
    })?;
    let max_bytes = DECOMPRESSED_BATCH_BYTES_MAX;
    match decompress_bounded(codec, batch.records_bytes(), max_bytes) {
        Ok(Some(bytes)) => Ok(Cow::Owned(bytes.to_vec())),
        Ok(None) => Err(RecordsError::DecompressedTooLarge { max_bytes }),
        Err(error) => Err(RecordsError::Decompression(error.to_string())),
    }
}

/// The `count` records of a records section, which they must fill exactly.
pub fn parse_records(section: &[u8], count: i32) -> Result<Vec<RecordParts<'_>>, RecordsError> {
    let count = usize::try_from(count).map_err(|_| RecordsError::Malformed { index: 0 })?;
    // The count comes from a file or a client: reserve no more than fits.
    let mut records = Vec::with_capacity(count.min(section.len() / RECORD_BYTES_MIN + 1));
    let mut rest = section;
    for index in 0..count {
        let malformed = RecordsError::Malformed {
            index: index as i32,
        };
        let (record, used) = parse_record(rest).ok_or(malformed)?;
        records.push(record);
        rest = &rest[used..];
    }
    if !rest.is_empty() {
        return Err(RecordsError::Malformed {
            index: count as i32,
        });
    }
    Ok(records)
}

/// The record at the start of `bytes` and the bytes it takes.
fn parse_record(bytes: &[u8]) -> Option<(RecordParts<'_>, usize)> {
    let (length, prefix) = read_varint(bytes)?;
    let length = usize::try_from(length).ok()?;
    let end = prefix.checked_add(length)?;
    let body = bytes.get(prefix..end)?;
    let mut cursor = Cursor { bytes: body, at: 0 };
    let attributes = *body.first()?;
    cursor.at = 1;
    let timestamp_delta = cursor.varint()?;
    let offset_delta = cursor.varint()?;
    let key_start = cursor.at;
    let key = cursor.nullable_bytes()?;
    let has_value = cursor.nullable_bytes()?.is_some();
    let header_count = usize::try_from(cursor.varint()?).ok()?;
    // Each header takes at least two bytes: a bound from what remains.
    if header_count > body.len() {
        return None;
    }
    for _ in 0..header_count {
        // A header's key may not be null; its value may.
        cursor.nullable_bytes()??;
        cursor.nullable_bytes()?;
    }
    if cursor.at != body.len() {
        return None;
    }
    let record = RecordParts {
        attributes,
        timestamp_delta,
        offset_delta,
        key,
        has_value,
        encoded: &bytes[..end],
        from_key: &body[key_start..],
    };
    Some((record, end))
}

/// Reads fields of a record body in order.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn varint(&mut self) -> Option<i64> {
        let (value, used) = read_varint(self.bytes.get(self.at..)?)?;
        self.at += used;
        Some(value)
    }

    /// A length-prefixed field: `Some(None)` for length -1 (null).
    fn nullable_bytes(&mut self) -> Option<Option<&'a [u8]>> {
        let length = self.varint()?;
        if length == -1 {
            return Some(None);
        }
        let length = usize::try_from(length).ok()?;
        let field = self.bytes.get(self.at..self.at.checked_add(length)?)?;
        self.at += length;
        Some(Some(field))
    }
}

/// Appends `record` with `timestamp_delta` in place of its own.
pub fn encode_record(record: &RecordParts<'_>, timestamp_delta: i64, out: &mut Vec<u8>) {
    if timestamp_delta == record.timestamp_delta {
        out.extend_from_slice(record.encoded);
        return;
    }
    let mut body = Vec::with_capacity(record.from_key.len() + 21);
    body.push(record.attributes);
    write_varint(timestamp_delta, &mut body);
    write_varint(record.offset_delta, &mut body);
    body.extend_from_slice(record.from_key);
    write_varint(body.len() as i64, out);
    out.extend_from_slice(&body);
}

/// A zigzag varint, as Kafka writes `varint` and `varlong` fields.
pub fn write_varint(value: i64, out: &mut Vec<u8>) {
    let mut raw = ((value << 1) ^ (value >> 63)) as u64;
    while raw >= 0x80 {
        out.push((raw as u8 & 0x7f) | 0x80);
        raw >>= 7;
    }
    out.push(raw as u8);
}

/// Kafka's rule for compacted topics (`LogValidator.validateKey`): every
/// record of a data batch needs a key. The index of the first without one.
pub fn first_record_without_key(batch: &BatchView<'_>) -> Result<Option<usize>, RecordsError> {
    if batch.attributes().is_control() {
        return Ok(None);
    }
    let section = records_section(batch)?;
    let records = parse_records(&section, batch.records_count())?;
    Ok(records.iter().position(|record| record.key.is_none()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::log::builder::{BatchOptions, NewRecord, encode_batch};
    use bytes::Bytes;

    fn record(key: Option<&str>, value: Option<&str>, timestamp: i64) -> NewRecord {
        NewRecord {
            key: key.map(|key| Bytes::copy_from_slice(key.as_bytes())),
            value: value.map(|value| Bytes::copy_from_slice(value.as_bytes())),
            timestamp: TimestampMs(timestamp),
            headers: vec![("h".into(), Some(Bytes::from_static(b"x")))],
        }
    }

    #[test]
    fn varints_round_trip_through_the_reader() {
        for value in [
            0,
            1,
            -1,
            63,
            -64,
            64,
            300,
            -300,
            i32::MAX as i64,
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = Vec::new();
            write_varint(value, &mut out);
            assert_eq!(read_varint(&out), Some((value, out.len())), "{value}");
        }
    }

    #[test]
    fn keys_values_and_offsets_are_read_in_every_codec() {
        let records = [
            record(Some("a"), Some("1"), 100),
            record(Some("b"), None, 105),
            record(None, Some("3"), 90),
        ];
        for compression in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let options = BatchOptions {
                compression,
                ..BatchOptions::default()
            };
            let bytes = encode_batch(&records, &options);
            let batch = BatchView::parse_exact(&bytes).unwrap();
            let section = records_section(&batch).unwrap();
            let parts = parse_records(&section, batch.records_count()).unwrap();
            let keys: Vec<_> = parts.iter().map(|part| part.key).collect();
            assert_eq!(keys, [Some(&b"a"[..]), Some(&b"b"[..]), None]);
            let values: Vec<_> = parts.iter().map(|part| part.has_value).collect();
            assert_eq!(values, [true, false, true]);
            let offsets: Vec<_> = parts.iter().map(|part| part.offset(Offset(10)).0).collect();
            assert_eq!(offsets, [10, 11, 12]);
            let base = batch.base_timestamp();
            assert_eq!(parts[2].timestamp(base), TimestampMs(90));
            assert_eq!(first_record_without_key(&batch), Ok(Some(2)));
        }
    }

    #[test]
    fn a_new_timestamp_delta_keeps_every_other_field() {
        let bytes = encode_batch(
            &[record(Some("key"), Some("value"), 100)],
            &BatchOptions::default(),
        );
        let batch = BatchView::parse_exact(&bytes).unwrap();
        let parts = parse_records(batch.records_bytes(), 1).unwrap();
        let mut out = Vec::new();
        encode_record(&parts[0], -1_000_000, &mut out);
        let reparsed = parse_records(&out, 1).unwrap();
        assert_eq!(reparsed[0].timestamp_delta, -1_000_000);
        assert_eq!(reparsed[0].key, Some(&b"key"[..]));
        assert_eq!(reparsed[0].from_key, parts[0].from_key);
        let mut same = Vec::new();
        encode_record(&parts[0], parts[0].timestamp_delta, &mut same);
        assert_eq!(same, parts[0].encoded);
    }

    #[test]
    fn malformed_sections_are_errors() {
        let bytes = encode_batch(&[record(Some("k"), Some("v"), 1)], &BatchOptions::default());
        let batch = BatchView::parse_exact(&bytes).unwrap();
        let section = batch.records_bytes();
        assert!(
            parse_records(section, 2).is_err(),
            "fewer records than declared"
        );
        assert!(parse_records(section, 0).is_err(), "bytes left over");
        assert!(parse_records(section, -1).is_err());
        assert!(parse_records(&section[..section.len() - 1], 1).is_err());
        let mut huge_key = section.to_vec();
        huge_key[4] = 0x7e; // keyLength 63, past the record
        assert!(parse_records(&huge_key, 1).is_err());
    }
}
