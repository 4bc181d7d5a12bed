//! Kafka's generated-message primitives as the `__transaction_state` schemas
//! use them, in both layouts: *classic* (int16 string lengths, int32 array
//! lengths, `-1` = null) for the key and value version 0, and *flexible*
//! (unsigned varint of `length + 1`, `0` = null, and a tagged-field section
//! after every struct) for value version 1.
//!
//! Separate from `group::records`' reader because that one is private to the
//! group records and these schemas need a few things it does not (int8,
//! nullable arrays of structs, int32 arrays). Every declared length is checked
//! against the bytes that remain before anything is allocated.

use bytes::{BufMut, Bytes, BytesMut};

use super::RecordsError;

/// Kafka's longest string, in bytes, in either layout.
pub const STRING_BYTES_MAX: usize = i16::MAX as usize;
/// Kafka's largest array count.
const ARRAY_LENGTH_MAX: usize = i32::MAX as usize;
/// An unsigned varint of a `u32` takes at most this many bytes.
const VARINT_BYTES_MAX: usize = 5;

/// Which of Kafka's two encodings a schema version uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Classic,
    Flexible,
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

    /// Switches layout once the version prefix has said which one follows.
    pub fn set_format(&mut self, format: Format) {
        self.format = format;
    }

    pub fn remaining(&self) -> usize {
        self.bytes.len() - self.position
    }

    fn take(&mut self, count: usize) -> Result<&'a [u8], RecordsError> {
        if count > self.remaining() {
            return Err(RecordsError::UnexpectedEnd {
                offset: self.position,
                need: count,
                have: self.remaining(),
            });
        }
        let taken = &self.bytes[self.position..self.position + count];
        self.position += count;
        Ok(taken)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], RecordsError> {
        let mut array = [0u8; N];
        array.copy_from_slice(self.take(N)?);
        Ok(array)
    }

    pub fn int8(&mut self) -> Result<i8, RecordsError> {
        self.array().map(i8::from_be_bytes)
    }

    pub fn int16(&mut self) -> Result<i16, RecordsError> {
        self.array().map(i16::from_be_bytes)
    }

    pub fn int32(&mut self) -> Result<i32, RecordsError> {
        self.array().map(i32::from_be_bytes)
    }

    pub fn int64(&mut self) -> Result<i64, RecordsError> {
        self.array().map(i64::from_be_bytes)
    }

    pub fn unsigned_varint(&mut self) -> Result<u32, RecordsError> {
        let start = self.position;
        let mut value: u32 = 0;
        for index in 0..VARINT_BYTES_MAX {
            let [byte] = self.array()?;
            value |= u32::from(byte & 0x7f) << (7 * index);
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(RecordsError::VarintTooLong { offset: start })
    }

    /// A length prefix (`None` = null), checked against `max` and against the
    /// bytes that remain at `element_bytes_min` bytes an element.
    fn length(
        &mut self,
        field: &'static str,
        classic_int16: bool,
        max: usize,
        element_bytes_min: usize,
    ) -> Result<Option<usize>, RecordsError> {
        let offset = self.position;
        let declared: i64 = match (self.format, classic_int16) {
            (Format::Flexible, _) => i64::from(self.unsigned_varint()?) - 1,
            (Format::Classic, true) => i64::from(self.int16()?),
            (Format::Classic, false) => i64::from(self.int32()?),
        };
        if declared == -1 {
            return Ok(None);
        }
        let length = usize::try_from(declared).map_err(|_| RecordsError::InvalidLength {
            field,
            offset,
            length: declared,
        })?;
        if length > max {
            return Err(RecordsError::TooLong { field, length, max });
        }
        if length.saturating_mul(element_bytes_min) > self.remaining() {
            return Err(RecordsError::LengthPastEnd {
                field,
                offset,
                length,
                remaining: self.remaining(),
            });
        }
        Ok(Some(length))
    }

    pub fn string(&mut self, field: &'static str) -> Result<String, RecordsError> {
        let length = self
            .length(field, true, STRING_BYTES_MAX, 1)?
            .ok_or(RecordsError::UnexpectedNull { field })?;
        let text = std::str::from_utf8(self.take(length)?)
            .map_err(|_| RecordsError::InvalidUtf8 { field })?;
        Ok(text.to_owned())
    }

    /// An array's element count; `None` for a null array.
    pub fn nullable_array_length(
        &mut self,
        field: &'static str,
        element_bytes_min: usize,
    ) -> Result<Option<usize>, RecordsError> {
        self.length(field, false, ARRAY_LENGTH_MAX, element_bytes_min)
    }

    pub fn array_length(
        &mut self,
        field: &'static str,
        element_bytes_min: usize,
    ) -> Result<usize, RecordsError> {
        self.nullable_array_length(field, element_bytes_min)?
            .ok_or(RecordsError::UnexpectedNull { field })
    }

    /// Reads a flexible struct's tagged-field section, handing each field's
    /// tag and bytes to `on_field`; the classic layout has none.
    pub fn tagged_fields(
        &mut self,
        mut on_field: impl FnMut(u32, &'a [u8]) -> Result<(), RecordsError>,
    ) -> Result<(), RecordsError> {
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

    /// Ends the read: bytes left over mean the record is not what its
    /// version says it is.
    pub fn finish(self, record: &'static str) -> Result<(), RecordsError> {
        match self.remaining() {
            0 => Ok(()),
            count => Err(RecordsError::TrailingBytes { record, count }),
        }
    }
}

/// Appends Kafka primitives; lengths over Kafka's limits are refused.
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

    /// A length prefix (`None` = null); callers have checked it against
    /// the limit, which fits both layouts.
    fn length(&mut self, length: Option<usize>, classic_int16: bool) {
        match (self.format, length) {
            (Format::Flexible, None) => self.unsigned_varint(0),
            (Format::Flexible, Some(length)) => self.unsigned_varint(length as u32 + 1),
            (Format::Classic, None) if classic_int16 => self.int16(-1),
            (Format::Classic, None) => self.int32(-1),
            (Format::Classic, Some(length)) if classic_int16 => self.int16(length as i16),
            (Format::Classic, Some(length)) => self.int32(length as i32),
        }
    }

    pub fn string(&mut self, field: &'static str, value: &str) -> Result<(), RecordsError> {
        check_length(field, value.len(), STRING_BYTES_MAX)?;
        self.length(Some(value.len()), true);
        self.bytes.put_slice(value.as_bytes());
        Ok(())
    }

    /// An array's element count; `None` writes a null array.
    pub fn nullable_array_length(
        &mut self,
        field: &'static str,
        count: Option<usize>,
    ) -> Result<(), RecordsError> {
        check_length(field, count.unwrap_or(0), ARRAY_LENGTH_MAX)?;
        self.length(count, false);
        Ok(())
    }

    pub fn array_length(&mut self, field: &'static str, count: usize) -> Result<(), RecordsError> {
        self.nullable_array_length(field, Some(count))
    }

    /// Ends a flexible struct with its tagged fields, which must be in
    /// ascending tag order (as Kafka writes them); classic has no section.
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

fn check_length(field: &'static str, length: usize, max: usize) -> Result<(), RecordsError> {
    if length > max {
        return Err(RecordsError::TooLong { field, length, max });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_and_arrays_in_both_layouts() {
        let mut classic = Writer::new(Format::Classic);
        classic.string("s", "ab").unwrap();
        classic.nullable_array_length("a", None).unwrap();
        classic.array_length("b", 2).unwrap();
        let classic = classic.finish();
        assert_eq!(
            classic[..],
            [0, 2, b'a', b'b', 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 2]
        );
        let mut flexible = Writer::new(Format::Flexible);
        flexible.string("s", "ab").unwrap();
        flexible.nullable_array_length("a", None).unwrap();
        flexible.array_length("b", 2).unwrap();
        let flexible = flexible.finish();
        assert_eq!(flexible[..], [3, b'a', b'b', 0, 3]);
        for (bytes, format) in [(classic, Format::Classic), (flexible, Format::Flexible)] {
            let mut reader = Reader::new(&bytes, format);
            assert_eq!(reader.string("s").as_deref(), Ok("ab"));
            assert_eq!(reader.nullable_array_length("a", 0), Ok(None));
            assert_eq!(reader.array_length("b", 0), Ok(2));
            assert_eq!(reader.finish("test"), Ok(()));
        }
    }

    #[test]
    fn lengths_past_the_end_and_long_varints_are_refused() {
        let array = i32::MAX.to_be_bytes();
        assert!(matches!(
            Reader::new(&array, Format::Classic).array_length("partitions", 4),
            Err(RecordsError::LengthPastEnd { .. })
        ));
        assert_eq!(
            Reader::new(&[0x80; 6], Format::Flexible).unsigned_varint(),
            Err(RecordsError::VarintTooLong { offset: 0 })
        );
        assert!(matches!(
            Reader::new(&[0xff, 0xfe], Format::Classic).string("id"),
            Err(RecordsError::InvalidLength { length: -2, .. })
        ));
        assert_eq!(
            Reader::new(&[0, 1, 0xff], Format::Classic).string("id"),
            Err(RecordsError::InvalidUtf8 { field: "id" })
        );
    }

    #[test]
    fn varints_and_tagged_fields_round_trip() {
        let mut writer = Writer::new(Format::Flexible);
        writer.unsigned_varint(300);
        writer.tagged_fields(&[(0, &[1, 2]), (5, &[])]);
        let bytes = writer.finish();
        assert_eq!(bytes[..], [0xac, 0x02, 2, 0, 2, 1, 2, 5, 0]);
        let mut reader = Reader::new(&bytes, Format::Flexible);
        assert_eq!(reader.unsigned_varint(), Ok(300));
        let mut seen = Vec::new();
        reader
            .tagged_fields(|tag, data| {
                seen.push((tag, data.to_vec()));
                Ok(())
            })
            .unwrap();
        assert_eq!(seen, [(0, vec![1, 2]), (5, vec![])]);
    }
}
