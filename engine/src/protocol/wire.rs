//! Kafka's primitive wire types, for the few encoders Brook writes by hand
//! (where records must be spliced in without copying them).

/// Appends Kafka primitive types to a byte buffer.
#[derive(Debug, Default)]
pub struct WireWriter {
    pub bytes: Vec<u8>,
}

impl WireWriter {
    pub fn int8(&mut self, value: i8) {
        self.bytes.push(value as u8);
    }

    pub fn int16(&mut self, value: i16) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    pub fn int32(&mut self, value: i32) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    pub fn int64(&mut self, value: i64) {
        self.bytes.extend_from_slice(&value.to_be_bytes());
    }

    pub fn uuid(&mut self, value: [u8; 16]) {
        self.bytes.extend_from_slice(&value);
    }

    pub fn unsigned_varint(&mut self, mut value: u32) {
        while value >= 0x80 {
            self.bytes.push((value as u8 & 0x7f) | 0x80);
            value >>= 7;
        }
        self.bytes.push(value as u8);
    }

    /// `STRING` (int16 length) or `COMPACT_STRING` (varint length + 1).
    pub fn string(&mut self, value: &str, compact: bool) {
        if compact {
            self.unsigned_varint(value.len() as u32 + 1);
        } else {
            self.int16(value.len() as i16);
        }
        self.bytes.extend_from_slice(value.as_bytes());
    }

    /// An array's length prefix (`ARRAY` or `COMPACT_ARRAY`); `None` is null.
    pub fn array_length(&mut self, length: Option<usize>, compact: bool) {
        match (length, compact) {
            (None, true) => self.unsigned_varint(0),
            (None, false) => self.int32(-1),
            (Some(length), true) => self.unsigned_varint(length as u32 + 1),
            (Some(length), false) => self.int32(length as i32),
        }
    }

    /// A records field's length prefix (`RECORDS` / `COMPACT_RECORDS`);
    /// the record bytes follow separately.
    pub fn records_length(&mut self, length: Option<usize>, compact: bool) {
        self.array_length(length, compact);
    }

    /// An empty tagged-field section.
    pub fn no_tagged_fields(&mut self) {
        self.unsigned_varint(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varints_and_strings_follow_the_spec() {
        let mut writer = WireWriter::default();
        writer.unsigned_varint(300);
        writer.string("ab", true);
        writer.string("ab", false);
        writer.array_length(None, true);
        writer.array_length(None, false);
        assert_eq!(
            writer.bytes,
            [
                0xac, 0x02, 3, b'a', b'b', 0, 2, b'a', b'b', 0, 0xff, 0xff, 0xff, 0xff
            ]
        );
    }
}
