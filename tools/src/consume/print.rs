//! How a record is printed, per `--format`:
//!
//! - `table` (the default), as kafka-console-consumer: the value on its own
//!   line, with `--print-key` the key, a tab, then the value; a null key or
//!   value prints `null`. Bytes are printed as they are.
//! - `json`: one object per line, `{"topic", "partition", "offset",
//!   "timestamp", "key", "value", "headers"}`. A key, value or header value
//!   is a JSON string when it is valid UTF-8, `null` when null, and
//!   otherwise an object `{"base64": "…"}` (standard alphabet, padded), so
//!   no byte is lost and text stays readable. `headers` is an object of
//!   name to value, in the record's order.
//! - a template (`%` placeholders, kcat's `-f`): see [`super::template`].

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

use crate::consume::decode::ConsumedRecord;
use crate::consume::template::Template;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RecordFormat {
    Lines { print_key: bool },
    Json,
    Template(Template),
}

impl RecordFormat {
    /// Appends `record` of `topic`.
    pub fn render(&self, topic: &str, record: &ConsumedRecord, out: &mut Vec<u8>) {
        match self {
            RecordFormat::Lines { print_key } => {
                if *print_key {
                    out.extend_from_slice(record.key.as_deref().unwrap_or(b"null"));
                    out.push(b'\t');
                }
                out.extend_from_slice(record.value.as_deref().unwrap_or(b"null"));
                out.push(b'\n');
            }
            RecordFormat::Json => {
                let line = JsonRecord {
                    topic,
                    partition: record.partition,
                    offset: record.offset,
                    timestamp: record.timestamp,
                    key: JsonBytes(record.key.as_deref()),
                    value: JsonBytes(record.value.as_deref()),
                    headers: JsonHeaders(&record.headers),
                };
                // Serializing plain fields into a Vec cannot fail.
                if serde_json::to_writer(&mut *out, &line).is_ok() {
                    out.push(b'\n');
                }
            }
            RecordFormat::Template(template) => template.render(topic, record, out),
        }
    }
}

#[derive(Serialize)]
struct JsonRecord<'a> {
    topic: &'a str,
    partition: i32,
    offset: i64,
    timestamp: i64,
    key: JsonBytes<'a>,
    value: JsonBytes<'a>,
    headers: JsonHeaders<'a>,
}

/// Bytes as a string, `null`, or `{"base64": "…"}`.
struct JsonBytes<'a>(Option<&'a [u8]>);

impl Serialize for JsonBytes<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0 {
            None => serializer.serialize_none(),
            Some(bytes) => match std::str::from_utf8(bytes) {
                Ok(text) => serializer.serialize_str(text),
                Err(_) => {
                    let mut map = serializer.serialize_map(Some(1))?;
                    map.serialize_entry("base64", &base64(bytes))?;
                    map.end()
                }
            },
        }
    }
}

struct JsonHeaders<'a>(&'a [(String, Option<bytes::Bytes>)]);

impl Serialize for JsonHeaders<'_> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.0.len()))?;
        for (name, value) in self.0 {
            map.serialize_entry(name, &JsonBytes(value.as_deref()))?;
        }
        map.end()
    }
}

/// RFC 4648 base64, standard alphabet, padded (no crate needed for this).
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let triple = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for index in 0..4 {
            if index <= chunk.len() {
                out.push(ALPHABET[((triple >> (18 - 6 * index)) & 0x3f) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn record() -> ConsumedRecord {
        ConsumedRecord {
            partition: 1,
            offset: 5,
            timestamp: 1_700_000_000_000,
            key: Some(Bytes::from("k")),
            value: Some(Bytes::from("v")),
            headers: vec![
                ("b".to_owned(), Some(Bytes::from("2"))),
                ("a".to_owned(), None),
            ],
        }
    }

    fn render(format: &RecordFormat, record: &ConsumedRecord) -> String {
        let mut out = Vec::new();
        format.render("t", record, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn lines_print_the_value_and_the_key_when_asked() {
        let null_key = ConsumedRecord {
            key: None,
            ..record()
        };
        let plain = RecordFormat::Lines { print_key: false };
        let keyed = RecordFormat::Lines { print_key: true };
        assert_eq!(render(&plain, &record()), "v\n");
        assert_eq!(render(&keyed, &record()), "k\tv\n");
        assert_eq!(render(&keyed, &null_key), "null\tv\n");
    }

    #[test]
    fn json_keeps_text_as_strings_and_other_bytes_as_base64() {
        assert_eq!(
            render(&RecordFormat::Json, &record()),
            "{\"topic\":\"t\",\"partition\":1,\"offset\":5,\"timestamp\":1700000000000,\
             \"key\":\"k\",\"value\":\"v\",\"headers\":{\"b\":\"2\",\"a\":null}}\n"
        );
        let binary = ConsumedRecord {
            key: None,
            value: Some(Bytes::from_static(&[0xff, 0xfe, 0x00, 0x01])),
            headers: Vec::new(),
            ..record()
        };
        let line: serde_json::Value =
            serde_json::from_str(&render(&RecordFormat::Json, &binary)).unwrap();
        assert_eq!(line["key"], serde_json::Value::Null);
        assert_eq!(line["value"], serde_json::json!({"base64": "//4AAQ=="}));
    }

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        let rows = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in rows {
            assert_eq!(base64(input.as_bytes()), expected, "{input}");
        }
    }
}
