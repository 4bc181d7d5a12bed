//! The primitive types of Kafka's generated message code, in both of Kafka's
//! layouts, for the internal-topic record schemas Brook reads and writes by
//! hand: `__consumer_offsets` (`group::records`) and `__transaction_state`
//! (`txn::records`). One reader, one writer and one error type serve both, so
//! a fix to a length check or a varint reaches every schema at once.
//!
//! A *classic* field is fixed-width where Kafka's `STRING`/`BYTES`/`ARRAY` are:
//! strings carry an `int16` length (`-1` = null), bytes and arrays an `int32`
//! length. A *flexible* field (a schema's `flexibleVersions`) carries an
//! unsigned varint of `length + 1` (`0` = null), and every struct ends with a
//! tagged-field section: a varint count, then per field a varint tag, a varint
//! size and that many bytes. All integers are big-endian.
//!
//! The reader checks every declared length against the bytes that remain
//! before it allocates, so a few hostile bytes cannot ask for gigabytes; Kafka's
//! own string limit (`0x7fff` bytes, enforced by its generated code in both
//! layouts) is enforced on both sides.

use bytes::{BufMut, Bytes, BytesMut};
use thiserror::Error;

/// Kafka's longest string, in bytes, in either layout.
pub const STRING_BYTES_MAX: usize = i16::MAX as usize;
/// Kafka's longest `BYTES` field.
pub const BYTES_MAX: usize = i32::MAX as usize;
/// Kafka's largest array count.
pub const ARRAY_LENGTH_MAX: usize = i32::MAX as usize;
/// An unsigned varint of a `u32` takes at most this many bytes.
const VARINT_BYTES_MAX: usize = 5;

/// Why an internal-topic record could not be read or written. The wire
/// variants come from [`Reader`] and [`Writer`]; the last few from the record
/// schemas that use them (re-exported there as `RecordsError`).
#[derive(Clone, Debug, PartialEq, Eq, Error)]
pub enum SchemaError {
    #[error("record truncated at byte {offset}: need {need} bytes, have {have}")]
    UnexpectedEnd {
        offset: usize,
        need: usize,
        have: usize,
    },
    #[error(
        "{field} at byte {offset} declares {length} elements/bytes but {remaining} bytes remain"
    )]
    LengthPastEnd {
        field: &'static str,
        offset: usize,
        length: usize,
        remaining: usize,
    },
    #[error("{field} at byte {offset} has invalid length {length}")]
    InvalidLength {
        field: &'static str,
        offset: usize,
        length: i64,
    },
    #[error("{field} is {length} long; Kafka's limit is {max}")]
    TooLong {
        field: &'static str,
        length: usize,
        max: usize,
    },
    #[error("{field} is null but its schema does not allow null")]
    UnexpectedNull { field: &'static str },
    #[error("{field} is not valid UTF-8")]
    InvalidUtf8 { field: &'static str },
    #[error("varint at byte {offset} is longer than 5 bytes")]
    VarintTooLong { offset: usize },
    #[error("tagged field {tag} has {size} bytes, expected {expected}")]
    TaggedFieldSize {
        tag: u32,
        size: usize,
        expected: usize,
    },
    #[error("{count} bytes follow the end of the {record}")]
    TrailingBytes { record: &'static str, count: usize },
    #[error("{record} version {version} is not one Kafka has written")]
    UnsupportedValueVersion { record: &'static str, version: i16 },
    /// `__transaction_state`: a status byte that names no transaction state.
    #[error("transaction status {id} is not a transaction state")]
    UnknownTransactionState { id: i8 },
    /// `__transaction_state`: a record read with a key version Brook does not
    /// know keeps only that version, so it cannot be written back.
    #[error("a record with unknown key version {key_version} carries no bytes to write")]
    UnknownKeyNotWritable { key_version: i16 },
}

/// Which of Kafka's two encodings a schema version uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Fixed-width length prefixes, no tagged fields (versions before a
    /// schema's first flexible version).
    Classic,
    /// Varint length prefixes and a tagged-field section after each struct.
    Flexible,
}

/// The width of a classic length prefix (flexible ones are all varints).
#[derive(Clone, Copy, Debug)]
enum LengthWidth {
    Int16,
    Int32,
}

/// Reads Kafka primitives from a byte slice, never past its end.
#[derive(Debug)]
pub struct Reader<'a> {
    bytes: &'a [u8],
    position: usize,
    format: Format,
}

impl<'a> Reader<'a> {
    pub fn new(bytes: &'a [u8], format: Format) -> Reader<'a> {
        Reader {
            bytes,
            position: 0,
            format,
        }
    }

    /// Switches layout once the version prefix has told which one follows.
    pub fn set_format(&mut self, format: Format) {
        self.format = format;
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8], SchemaError> {
        if count > self.remaining() {
            return Err(SchemaError::UnexpectedEnd {
                offset: self.position,
                need: count,
                have: self.remaining(),
            });
        }
        let taken = &self.bytes[self.position..self.position + count];
        self.position += count;
        debug_assert!(self.position <= self.bytes.len());
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], SchemaError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    pub fn int8(&mut self) -> Result<i8, SchemaError> {
        self.array().map(i8::from_be_bytes)
    }

    pub fn int16(&mut self) -> Result<i16, SchemaError> {
        self.array().map(i16::from_be_bytes)
    }

    pub fn int32(&mut self) -> Result<i32, SchemaError> {
        self.array().map(i32::from_be_bytes)
    }

    pub fn int64(&mut self) -> Result<i64, SchemaError> {
        self.array().map(i64::from_be_bytes)
    }

    pub fn unsigned_varint(&mut self) -> Result<u32, SchemaError> {
        let start = self.position;
        let mut value: u32 = 0;
        for index in 0..VARINT_BYTES_MAX {
            let [byte] = self.array()?;
            value |= u32::from(byte & 0x7f) << (7 * index);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(SchemaError::VarintTooLong { offset: start })
    }

    /// A length prefix: `None` for null, else a length checked against
    /// `max` and against the bytes remaining (`element_bytes_min` per element).
    fn length(
        &mut self,
        field: &'static str,
        width: LengthWidth,
        max: usize,
        element_bytes_min: usize,
    ) -> Result<Option<usize>, SchemaError> {
        let offset = self.position;
        let declared: i64 = match (self.format, width) {
            (Format::Flexible, _) => i64::from(self.unsigned_varint()?) - 1,
            (Format::Classic, LengthWidth::Int16) => i64::from(self.int16()?),
            (Format::Classic, LengthWidth::Int32) => i64::from(self.int32()?),
        };
        if declared == -1 {
            return Ok(None);
        }
        let length = usize::try_from(declared).map_err(|_| SchemaError::InvalidLength {
            field,
            offset,
            length: declared,
        })?;
        if length > max {
            return Err(SchemaError::TooLong { field, length, max });
        }
        if length.saturating_mul(element_bytes_min) > self.remaining() {
            return Err(SchemaError::LengthPastEnd {
                field,
                offset,
                length,
                remaining: self.remaining(),
            });
        }
        Ok(Some(length))
    }

    pub fn nullable_string(&mut self, field: &'static str) -> Result<Option<String>, SchemaError> {
        let Some(length) = self.length(field, LengthWidth::Int16, STRING_BYTES_MAX, 1)? else {
            return Ok(None);
        };
        let text = std::str::from_utf8(self.take(length)?)
            .map_err(|_| SchemaError::InvalidUtf8 { field })?;
        Ok(Some(text.to_owned()))
    }

    pub fn string(&mut self, field: &'static str) -> Result<String, SchemaError> {
        self.nullable_string(field)?
            .ok_or(SchemaError::UnexpectedNull { field })
    }

    pub fn bytes(&mut self, field: &'static str) -> Result<Bytes, SchemaError> {
        let length = self
            .length(field, LengthWidth::Int32, BYTES_MAX, 1)?
            .ok_or(SchemaError::UnexpectedNull { field })?;
        Ok(Bytes::copy_from_slice(self.take(length)?))
    }

    /// An array's element count, `None` for a null array; refused when even
    /// the smallest elements could not fit in the bytes that remain.
    pub fn nullable_array_length(
        &mut self,
        field: &'static str,
        element_bytes_min: usize,
    ) -> Result<Option<usize>, SchemaError> {
        self.length(
            field,
            LengthWidth::Int32,
            ARRAY_LENGTH_MAX,
            element_bytes_min,
        )
    }

    /// A non-nullable array's element count, checked as
    /// [`Reader::nullable_array_length`] checks it.
    pub fn array_length(
        &mut self,
        field: &'static str,
        element_bytes_min: usize,
    ) -> Result<usize, SchemaError> {
        self.nullable_array_length(field, element_bytes_min)?
            .ok_or(SchemaError::UnexpectedNull { field })
    }

    /// Reads a flexible struct's tagged-field section, handing each field's tag
    /// and bytes to `on_field`; in the classic layout there is none.
    pub fn tagged_fields(
        &mut self,
        mut on_field: impl FnMut(u32, &'a [u8]) -> Result<(), SchemaError>,
    ) -> Result<(), SchemaError> {
        if self.format == Format::Classic {
            return Ok(());
        }
        let count = self.unsigned_varint()?;
        for _ in 0..count {
            let tag = self.unsigned_varint()?;
            let size = self.unsigned_varint()? as usize;
            on_field(tag, self.take(size)?)?;
        }
        Ok(())
    }

    /// Ends the read: bytes left over mean the record is not what its version
    /// says it is.
    pub fn finish(self, record: &'static str) -> Result<(), SchemaError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(SchemaError::TrailingBytes { record, count }),
        }
    }
}

/// Appends Kafka primitives; lengths over Kafka's limits are refused rather
/// than truncated.
#[derive(Debug)]
pub struct Writer {
    bytes: BytesMut,
    format: Format,
}

impl Writer {
    pub fn new(format: Format) -> Writer {
        Writer {
            bytes: BytesMut::new(),
            format,
        }
    }

    pub fn int8(&mut self, value: i8) {
        self.bytes.put_i8(value);
    }

    pub fn int16(&mut self, value: i16) {
        self.bytes.put_i16(value);
    }

    pub fn int32(&mut self, value: i32) {
        self.bytes.put_i32(value);
    }

    pub fn int64(&mut self, value: i64) {
        self.bytes.put_i64(value);
    }

    pub fn unsigned_varint(&mut self, mut value: u32) {
        while value >= 0x80 {
            self.bytes.put_u8((value as u8 & 0x7f) | 0x80);
            value >>= 7;
        }
        self.bytes.put_u8(value as u8);
    }

    /// A length prefix; `None` is null. `length <= max` is checked by callers
    /// and `max` fits both layouts (`i32::MAX + 1` fits a `u32` varint).
    fn length(&mut self, length: Option<usize>, width: LengthWidth) {
        match (self.format, width, length) {
            (Format::Flexible, _, None) => self.unsigned_varint(0),
            (Format::Flexible, _, Some(length)) => self.unsigned_varint(length as u32 + 1),
            (Format::Classic, LengthWidth::Int16, None) => self.int16(-1),
            (Format::Classic, LengthWidth::Int16, Some(length)) => self.int16(length as i16),
            (Format::Classic, LengthWidth::Int32, None) => self.int32(-1),
            (Format::Classic, LengthWidth::Int32, Some(length)) => self.int32(length as i32),
        }
    }

    pub fn nullable_string(
        &mut self,
        field: &'static str,
        value: Option<&str>,
    ) -> Result<(), SchemaError> {
        let length = value.map(str::len);
        check_length(field, length.unwrap_or(0), STRING_BYTES_MAX)?;
        self.length(length, LengthWidth::Int16);
        self.bytes.put_slice(value.unwrap_or("").as_bytes());
        Ok(())
    }

    pub fn string(&mut self, field: &'static str, value: &str) -> Result<(), SchemaError> {
        self.nullable_string(field, Some(value))
    }

    pub fn bytes(&mut self, field: &'static str, value: &[u8]) -> Result<(), SchemaError> {
        check_length(field, value.len(), BYTES_MAX)?;
        self.length(Some(value.len()), LengthWidth::Int32);
        self.bytes.put_slice(value);
        Ok(())
    }

    /// An array's element count; `None` writes a null array.
    pub fn nullable_array_length(
        &mut self,
        field: &'static str,
        count: Option<usize>,
    ) -> Result<(), SchemaError> {
        check_length(field, count.unwrap_or(0), ARRAY_LENGTH_MAX)?;
        self.length(count, LengthWidth::Int32);
        Ok(())
    }

    pub fn array_length(&mut self, field: &'static str, count: usize) -> Result<(), SchemaError> {
        self.nullable_array_length(field, Some(count))
    }

    /// Ends a flexible struct with its tagged fields (in ascending tag order,
    /// as Kafka writes them); in the classic layout there is no section.
    pub fn tagged_fields(&mut self, fields: &[(u32, &[u8])]) {
        if self.format == Format::Classic {
            return;
        }
        debug_assert!(fields.windows(2).all(|pair| pair[0].0 < pair[1].0));
        self.unsigned_varint(fields.len() as u32);
        for (tag, data) in fields {
            self.unsigned_varint(*tag);
            self.unsigned_varint(data.len() as u32);
            self.bytes.put_slice(data);
        }
    }

    pub fn finish(self) -> Bytes {
        self.bytes.freeze()
    }
}

fn check_length(field: &'static str, length: usize, max: usize) -> Result<(), SchemaError> {
    if length > max {
        return Err(SchemaError::TooLong { field, length, max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_use_seven_bits_a_byte_least_significant_first() {
        let mut writer = Writer::new(Format::Flexible);
        writer.unsigned_varint(300);
        writer.unsigned_varint(u32::MAX);
        let bytes = writer.finish();
        assert_eq!(bytes[..], [0xac, 0x02, 0xff, 0xff, 0xff, 0xff, 0x0f]);
        let mut reader = Reader::new(&bytes, Format::Flexible);
        assert_eq!(reader.unsigned_varint(), Ok(300));
        assert_eq!(reader.unsigned_varint(), Ok(u32::MAX));
        assert_eq!(reader.finish("test"), Ok(()));
    }

    #[test]
    fn a_varint_longer_than_five_bytes_is_refused() {
        let bytes = [0x80; 6];
        let mut reader = Reader::new(&bytes, Format::Flexible);
        assert_eq!(
            reader.unsigned_varint(),
            Err(SchemaError::VarintTooLong { offset: 0 })
        );
    }

    #[test]
    fn strings_and_bytes_in_both_layouts() {
        let mut classic = Writer::new(Format::Classic);
        classic.string("s", "ab").unwrap();
        classic.nullable_string("n", None).unwrap();
        classic.bytes("b", &[7]).unwrap();
        let classic = classic.finish();
        assert_eq!(classic[..], [0, 2, b'a', b'b', 0xff, 0xff, 0, 0, 0, 1, 7]);

        let mut flexible = Writer::new(Format::Flexible);
        flexible.string("s", "ab").unwrap();
        flexible.nullable_string("n", None).unwrap();
        flexible.bytes("b", &[7]).unwrap();
        let flexible = flexible.finish();
        assert_eq!(flexible[..], [3, b'a', b'b', 0, 2, 7]);

        for (bytes, format) in [(classic, Format::Classic), (flexible, Format::Flexible)] {
            let mut reader = Reader::new(&bytes, format);
            assert_eq!(reader.string("s").as_deref(), Ok("ab"));
            assert_eq!(reader.nullable_string("n"), Ok(None));
            assert_eq!(reader.bytes("b"), Ok(Bytes::from_static(&[7])));
            assert_eq!(reader.finish("test"), Ok(()));
        }
    }

    #[test]
    fn int8_and_arrays_in_both_layouts() {
        let mut classic = Writer::new(Format::Classic);
        classic.int8(-2);
        classic.nullable_array_length("a", None).unwrap();
        classic.array_length("b", 2).unwrap();
        let classic = classic.finish();
        assert_eq!(classic[..], [0xfe, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 2]);

        let mut flexible = Writer::new(Format::Flexible);
        flexible.int8(-2);
        flexible.nullable_array_length("a", None).unwrap();
        flexible.array_length("b", 2).unwrap();
        let flexible = flexible.finish();
        assert_eq!(flexible[..], [0xfe, 0, 3]);

        for (bytes, format) in [(classic, Format::Classic), (flexible, Format::Flexible)] {
            let mut reader = Reader::new(&bytes, format);
            assert_eq!(reader.int8(), Ok(-2));
            assert_eq!(reader.nullable_array_length("a", 0), Ok(None));
            assert_eq!(reader.array_length("b", 0), Ok(2));
            assert_eq!(reader.finish("test"), Ok(()));
        }
    }

    #[test]
    fn declared_lengths_past_the_end_are_refused_before_allocating() {
        let string = [0x7f, 0xff, b'a'];
        assert_eq!(
            Reader::new(&string, Format::Classic).string("name"),
            Err(SchemaError::LengthPastEnd {
                field: "name",
                offset: 0,
                length: 0x7fff,
                remaining: 1,
            })
        );
        let array = i32::MAX.to_be_bytes();
        assert!(matches!(
            Reader::new(&array, Format::Classic).array_length("members", 1),
            Err(SchemaError::LengthPastEnd {
                field: "members",
                ..
            })
        ));
        let bytes = [0xff, 0xff, 0xff, 0xff, 0x07];
        assert!(matches!(
            Reader::new(&bytes, Format::Flexible).bytes("assignment"),
            Err(SchemaError::LengthPastEnd {
                field: "assignment",
                ..
            })
        ));
        // Four bytes an element: a count of 2 needs 8 bytes, and 7 remain.
        let partitions = [0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0];
        assert_eq!(
            Reader::new(&partitions, Format::Classic).nullable_array_length("partitions", 4),
            Err(SchemaError::LengthPastEnd {
                field: "partitions",
                offset: 0,
                length: 2,
                remaining: 7,
            })
        );
    }

    #[test]
    fn nulls_negative_lengths_and_bad_text_are_refused() {
        let null = [0xff, 0xff];
        assert_eq!(
            Reader::new(&null, Format::Classic).string("group"),
            Err(SchemaError::UnexpectedNull { field: "group" })
        );
        let null_array = [0];
        assert_eq!(
            Reader::new(&null_array, Format::Flexible).array_length("members", 1),
            Err(SchemaError::UnexpectedNull { field: "members" })
        );
        let negative = [0xff, 0xfe];
        assert!(matches!(
            Reader::new(&negative, Format::Classic).string("group"),
            Err(SchemaError::InvalidLength { length: -2, .. })
        ));
        let not_utf8 = [0, 1, 0xff];
        assert_eq!(
            Reader::new(&not_utf8, Format::Classic).string("group"),
            Err(SchemaError::InvalidUtf8 { field: "group" })
        );
        let compact_too_long = [0x81, 0x80, 0x02];
        assert!(matches!(
            Reader::new(&compact_too_long, Format::Flexible).string("group"),
            Err(SchemaError::TooLong {
                max: STRING_BYTES_MAX,
                ..
            })
        ));
    }

    #[test]
    fn strings_over_kafkas_limit_are_not_written() {
        let long = "x".repeat(STRING_BYTES_MAX + 1);
        for format in [Format::Classic, Format::Flexible] {
            assert!(matches!(
                Writer::new(format).string("metadata", &long),
                Err(SchemaError::TooLong {
                    field: "metadata",
                    ..
                })
            ));
        }
    }

    #[test]
    fn tagged_fields_round_trip_and_are_absent_in_the_classic_layout() {
        let mut writer = Writer::new(Format::Flexible);
        writer.tagged_fields(&[(0, &[1, 2]), (5, &[])]);
        let bytes = writer.finish();
        assert_eq!(bytes[..], [2, 0, 2, 1, 2, 5, 0]);
        let mut seen = Vec::new();
        let mut reader = Reader::new(&bytes, Format::Flexible);
        reader
            .tagged_fields(|tag, data| {
                seen.push((tag, data.to_vec()));
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, [(0, vec![1, 2]), (5, vec![])]);
        assert_eq!(reader.finish("test"), Ok(()));

        let mut classic = Writer::new(Format::Classic);
        classic.tagged_fields(&[(0, &[1])]);
        assert!(classic.finish().is_empty());
    }

    #[test]
    fn trailing_bytes_are_refused_with_their_count() {
        let bytes = [0, 1, 2];
        let mut reader = Reader::new(&bytes, Format::Classic);
        assert_eq!(reader.int8(), Ok(0));
        assert_eq!(reader.remaining(), 2);
        assert_eq!(
            reader.finish("test record"),
            Err(SchemaError::TrailingBytes {
                record: "test record",
                count: 2,
            })
        );
    }
}
