//! `--format` templates, as kcat's `-f`: placeholders replaced per record,
//! everything else printed as written, with no newline added.
//!
//! | placeholder | prints                                             |
//! |-------------|----------------------------------------------------|
//! | `%t`        | topic                                              |
//! | `%p`        | partition                                          |
//! | `%o`        | offset                                             |
//! | `%k`        | key (nothing when null)                            |
//! | `%K`        | key size in bytes (-1 when null)                   |
//! | `%v`, `%s`  | value (`%s` is kcat's name; nothing when null)     |
//! | `%S`        | value size in bytes (-1 when null)                 |
//! | `%T`        | timestamp, milliseconds since the epoch            |
//! | `%h`        | headers as `name=value,name2=value2`               |
//! | `%%`        | a `%`                                              |
//!
//! Escapes `\n`, `\r`, `\t` and `\\` stand for a newline, carriage return,
//! tab and backslash, so a shell's single quotes can carry them. Keys and
//! values are printed as their bytes (not always UTF-8). The template is
//! parsed once, before anything is fetched, so a typo fails at once.

use crate::consume::decode::ConsumedRecord;

/// One piece of a parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Part {
    Literal(Vec<u8>),
    Topic,
    Partition,
    Offset,
    Key,
    KeySize,
    Value,
    ValueSize,
    Timestamp,
    Headers,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

impl Template {
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = Vec::new();
        let mut chars = text.chars();
        while let Some(c) = chars.next() {
            let part = match c {
                '%' => match chars.next() {
                    Some('%') => {
                        literal.push(b'%');
                        continue;
                    }
                    Some(name) => placeholder(name).ok_or_else(|| {
                        format!(
                            "--format: unknown placeholder %{name} \
                             (known: %t %p %o %k %K %v %s %S %T %h %%)"
                        )
                    })?,
                    None => return Err("--format: a lone % at the end".to_owned()),
                },
                '\\' => {
                    let escaped = match chars.next() {
                        Some('n') => '\n',
                        Some('r') => '\r',
                        Some('t') => '\t',
                        Some('\\') => '\\',
                        Some(other) => {
                            return Err(format!(
                                "--format: unknown escape \\{other} (known: \\n \\r \\t \\\\)"
                            ));
                        }
                        None => return Err("--format: a lone \\ at the end".to_owned()),
                    };
                    literal.push(escaped as u8);
                    continue;
                }
                other => {
                    let mut buffer = [0; 4];
                    literal.extend_from_slice(other.encode_utf8(&mut buffer).as_bytes());
                    continue;
                }
            };
            if !literal.is_empty() {
                parts.push(Part::Literal(std::mem::take(&mut literal)));
            }
            parts.push(part);
        }
        if !literal.is_empty() {
            parts.push(Part::Literal(literal));
        }
        Ok(Template { parts })
    }

    /// Appends `record` of `topic` as the template says.
    pub fn render(&self, topic: &str, record: &ConsumedRecord, out: &mut Vec<u8>) {
        for part in &self.parts {
            match part {
                Part::Literal(bytes) => out.extend_from_slice(bytes),
                Part::Topic => out.extend_from_slice(topic.as_bytes()),
                Part::Partition => push_display(out, record.partition),
                Part::Offset => push_display(out, record.offset),
                Part::Key => out.extend_from_slice(record.key.as_deref().unwrap_or_default()),
                Part::KeySize => push_display(out, size(record.key.as_deref())),
                Part::Value => out.extend_from_slice(record.value.as_deref().unwrap_or_default()),
                Part::ValueSize => push_display(out, size(record.value.as_deref())),
                Part::Timestamp => push_display(out, record.timestamp),
                Part::Headers => {
                    for (index, (name, value)) in record.headers.iter().enumerate() {
                        if index > 0 {
                            out.push(b',');
                        }
                        out.extend_from_slice(name.as_bytes());
                        out.push(b'=');
                        out.extend_from_slice(value.as_deref().unwrap_or_default());
                    }
                }
            }
        }
    }
}

fn placeholder(name: char) -> Option<Part> {
    Some(match name {
        't' => Part::Topic,
        'p' => Part::Partition,
        'o' => Part::Offset,
        'k' => Part::Key,
        'K' => Part::KeySize,
        'v' | 's' => Part::Value,
        'S' => Part::ValueSize,
        'T' => Part::Timestamp,
        'h' => Part::Headers,
        _ => return None,
    })
}

/// kcat's size of a key or value: -1 for null.
fn size(bytes: Option<&[u8]>) -> i64 {
    bytes.map_or(-1, |bytes| bytes.len() as i64)
}

fn push_display(out: &mut Vec<u8>, value: impl std::fmt::Display) {
    out.extend_from_slice(value.to_string().as_bytes());
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn record() -> ConsumedRecord {
        ConsumedRecord {
            partition: 2,
            offset: 41,
            timestamp: 1_796_032_800_000,
            key: Some(Bytes::from("user-7")),
            value: Some(Bytes::from("héllo")),
            headers: vec![
                ("source".to_owned(), Some(Bytes::from("web"))),
                ("trace".to_owned(), None),
            ],
        }
    }

    fn render(template: &str, record: &ConsumedRecord) -> Vec<u8> {
        let mut out = Vec::new();
        Template::parse(template)
            .unwrap()
            .render("orders", record, &mut out);
        out
    }

    #[test]
    fn placeholders_print_the_record() {
        let rows: &[(&str, &str)] = &[
            ("%t/%p/%o", "orders/2/41"),
            ("%k=%v", "user-7=héllo"),
            ("%k=%s", "user-7=héllo"),
            ("%K %S", "6 6"),
            ("%T", "1796032800000"),
            ("%h", "source=web,trace="),
            ("100%% %v\\n", "100% héllo\n"),
            ("a\\tb\\r\\\\", "a\tb\r\\"),
            ("%p:%o:%k=%v\\n", "2:41:user-7=héllo\n"),
            ("plain ü", "plain ü"),
        ];
        for (template, expected) in rows {
            assert_eq!(
                String::from_utf8(render(template, &record())).unwrap(),
                *expected,
                "{template}"
            );
        }
    }

    #[test]
    fn null_keys_and_values_print_nothing_and_size_minus_one() {
        let null = ConsumedRecord {
            key: None,
            value: None,
            headers: Vec::new(),
            ..record()
        };
        assert_eq!(render("[%k][%v][%K][%S][%h]", &null), b"[][][-1][-1][]");
    }

    #[test]
    fn values_are_printed_as_their_bytes() {
        let binary = ConsumedRecord {
            value: Some(Bytes::from_static(&[0xff, 0x00, 0x80])),
            ..record()
        };
        assert_eq!(render("%v", &binary), [0xff, 0x00, 0x80]);
    }

    #[test]
    fn unknown_placeholders_and_escapes_are_refused() {
        for bad in ["%x", "%", "value\\", "\\q"] {
            let error = Template::parse(bad).unwrap_err();
            assert!(error.starts_with("--format:"), "{bad}: {error}");
        }
    }
}
