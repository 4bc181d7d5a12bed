//! Every field of a batch's records, for printing: the engine's readers stop
//! at what the broker needs (offsets, timestamps, keys), a dump shows values
//! and headers too. Decompression is the engine's
//! ([`records_section`], bounded by `DECOMPRESSED_BATCH_BYTES_MAX`).
//!
//! A v2 record (integers are zigzag varints):
//!
//! ```text
//! length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
//! keyLength varint (-1: null), key, valueLength varint (-1: null), value,
//! headerCount varint, headers (keyLength, key, valueLength, value) each
//! ```

use std::fmt::Write;

use brook_engine::log::batch::{BatchView, TimestampType};
use brook_engine::log::compaction::record_parts::records_section;
use serde::ser::{Serialize, SerializeStruct, Serializer};

use crate::log_dump::quote;

/// One record of a batch, borrowed from the (decompressed) records section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub offset: i64,
    pub timestamp: i64,
    /// `baseSequence + offsetDelta`, or -1 for a batch without sequences.
    pub sequence: i64,
    pub key: Option<&'a [u8]>,
    pub value: Option<&'a [u8]>,
    pub headers: Vec<(&'a [u8], Option<&'a [u8]>)>,
}

/// The records section of `batch`, decompressed when the batch is.
pub fn section_of(batch: &BatchView<'_>) -> Result<Vec<u8>, String> {
    records_section(batch)
        .map(|section| section.into_owned())
        .map_err(|error| error.to_string())
}

/// The batch's records from its (decompressed) `section`, which they must
/// fill exactly.
pub fn parse_records<'a>(
    batch: &BatchView<'_>,
    section: &'a [u8],
) -> Result<Vec<Record<'a>>, String> {
    let count = usize::try_from(batch.records_count())
        .map_err(|_| format!("negative record count {}", batch.records_count()))?;
    // Each record takes at least 7 bytes: a bound that comes from the bytes.
    let mut records = Vec::with_capacity(count.min(section.len() / 7 + 1));
    let mut cursor = Cursor {
        bytes: section,
        at: 0,
    };
    for index in 0..count {
        let record = parse_record(batch, &mut cursor)
            .ok_or_else(|| format!("record {index} of {count} is malformed"))?;
        records.push(record);
    }
    if cursor.at != section.len() {
        let left = section.len() - cursor.at;
        return Err(format!("{left} bytes follow the batch's {count} records"));
    }
    Ok(records)
}

/// The record at the cursor; `None` if it is malformed.
fn parse_record<'a>(batch: &BatchView<'_>, cursor: &mut Cursor<'a>) -> Option<Record<'a>> {
    let length = usize::try_from(cursor.varint()?).ok()?;
    let end = cursor.at.checked_add(length)?;
    let mut body = Cursor {
        bytes: cursor.bytes.get(cursor.at..end)?,
        at: 1, // attributes: unused
    };
    cursor.at = end;
    body.bytes.first()?;
    let timestamp_delta = body.varint()?;
    let offset_delta = body.varint()?;
    let key = body.nullable_bytes()?;
    let value = body.nullable_bytes()?;
    let header_count = usize::try_from(body.varint()?).ok()?;
    // A header takes at least two bytes: bound the count by what remains.
    if header_count > body.bytes.len() - body.at {
        return None;
    }
    let mut headers = Vec::with_capacity(header_count);
    for _ in 0..header_count {
        let header_key = body.nullable_bytes()??;
        headers.push((header_key, body.nullable_bytes()?));
    }
    if body.at != body.bytes.len() {
        return None;
    }
    let timestamp = match batch.attributes().timestamp_type() {
        TimestampType::LogAppendTime => batch.max_timestamp().0,
        TimestampType::CreateTime => batch.base_timestamp().0.saturating_add(timestamp_delta),
    };
    let base_sequence = i64::from(batch.base_sequence());
    let sequence = if base_sequence < 0 {
        -1
    } else {
        // Sequences wrap at i32::MAX, as Kafka's `DefaultRecord.sequence`.
        (base_sequence + offset_delta) % (i64::from(i32::MAX) + 1)
    };
    Some(Record {
        offset: batch.base_offset().0.saturating_add(offset_delta),
        timestamp,
        sequence,
        key,
        value,
        headers,
    })
}

/// Reads a records section field by field.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    /// A zigzag varint of up to 64 bits.
    fn varint(&mut self) -> Option<i64> {
        let mut raw: u64 = 0;
        for (index, byte) in self.bytes.get(self.at..)?.iter().take(10).enumerate() {
            raw |= u64::from(byte & 0x7f) << (7 * index);
            if byte & 0x80 == 0 {
                self.at += index + 1;
                return Some((raw >> 1) as i64 ^ -((raw & 1) as i64));
            }
        }
        None
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

/// Bytes as text: a quoted string when they are UTF-8, else `0x` and hex;
/// `null` for a null field.
pub fn bytes_text(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "null".to_owned(),
        Some(bytes) => match std::str::from_utf8(bytes) {
            Ok(text) => quote(text),
            Err(_) => format!("0x{}", hex(bytes)),
        },
    }
}

/// Bytes as a JSON value: a string when they are UTF-8, else
/// `{"hex":"…"}`; `null` for a null field.
#[derive(Clone, Copy, Debug)]
pub struct BytesJson<'a>(pub Option<&'a [u8]>);

impl Serialize for BytesJson<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let Some(bytes) = self.0 else {
            return serializer.serialize_none();
        };
        match std::str::from_utf8(bytes) {
            Ok(text) => serializer.serialize_str(text),
            Err(_) => {
                let mut object = serializer.serialize_struct("Hex", 1)?;
                object.serialize_field("hex", &hex(bytes))?;
                object.end()
            }
        }
    }
}

/// Lower-case hex digits, two per byte.
pub fn hex(bytes: &[u8]) -> String {
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use brook_engine::log::batch::Compression;
    use brook_engine::log::builder::{BatchOptions, NewRecord, encode_batch};
    use brook_engine::types::TimestampMs;
    use bytes::Bytes;

    fn record(key: Option<&[u8]>, value: Option<&[u8]>, timestamp: i64) -> NewRecord {
        NewRecord {
            key: key.map(Bytes::copy_from_slice),
            value: value.map(Bytes::copy_from_slice),
            timestamp: TimestampMs(timestamp),
            headers: vec![("trace".into(), Some(Bytes::from_static(b"t1")))],
        }
    }

    #[test]
    fn values_and_headers_are_read_in_every_codec() {
        let records = [
            record(Some(b"k1"), Some(b"hello"), 100),
            record(None, Some(&[0xff, 0x00]), 105),
            record(Some(b"k3"), None, 90),
        ];
        for compression in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let options = BatchOptions {
                compression,
                base_sequence: 7,
                producer_id: 1,
                ..BatchOptions::default()
            };
            let bytes = encode_batch(&records, &options);
            let batch = BatchView::parse_exact(&bytes).unwrap();
            let section = section_of(&batch).unwrap();
            let parsed = parse_records(&batch, &section).unwrap();
            assert_eq!(parsed.len(), 3, "{compression:?}");
            assert_eq!(parsed[0].value, Some(&b"hello"[..]));
            assert_eq!(parsed[1].key, None);
            assert_eq!(parsed[2].value, None);
            assert_eq!(parsed[2].offset, 2);
            assert_eq!(parsed[2].timestamp, 90);
            assert_eq!(parsed[2].sequence, 9);
            assert_eq!(parsed[0].headers, [(&b"trace"[..], Some(&b"t1"[..]))]);
        }
    }

    #[test]
    fn malformed_sections_are_errors_not_panics() {
        let bytes = encode_batch(
            &[record(Some(b"k"), Some(b"v"), 1)],
            &BatchOptions::default(),
        );
        let batch = BatchView::parse_exact(&bytes).unwrap();
        let section = batch.records_bytes();
        for cut in 0..section.len() {
            assert!(
                parse_records(&batch, &section[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        let mut longer = section.to_vec();
        longer.push(0);
        assert!(parse_records(&batch, &longer).is_err());
    }

    #[test]
    fn bytes_print_as_text_or_hex() {
        assert_eq!(bytes_text(Some(b"hi \"x\"")), r#""hi \"x\"""#);
        assert_eq!(bytes_text(Some(&[0xff, 0x01])), "0xff01");
        assert_eq!(bytes_text(None), "null");
        fn json(bytes: Option<&[u8]>) -> String {
            serde_json::to_string(&BytesJson(bytes)).unwrap()
        }
        assert_eq!(json(Some(&[0xff])), r#"{"hex":"ff"}"#);
        assert_eq!(json(Some(b"")), r#""""#);
        assert_eq!(json(None), "null");
    }
}
