//! One-line JSON objects, written by hand: `brook log dump --format json`
//! prints one object per line, and the workspace has no serialisation crate
//! (the bench's `JsonObject` renders indented, multi-line reports).

use std::fmt::Write;

/// A JSON object under construction; fields keep their insertion order.
#[derive(Debug, Default)]
pub struct JsonObject {
    text: String,
}

impl JsonObject {
    pub fn new() -> JsonObject {
        JsonObject::default()
    }

    /// A field whose value is already rendered JSON.
    pub fn raw(mut self, key: &str, rendered: &str) -> JsonObject {
        self.text
            .push_str(if self.text.is_empty() { "{" } else { "," });
        self.text.push_str(&quote(key));
        self.text.push(':');
        self.text.push_str(rendered);
        self
    }

    pub fn string(self, key: &str, value: &str) -> JsonObject {
        self.raw(key, &quote(value))
    }

    pub fn integer(self, key: &str, value: impl Into<i64>) -> JsonObject {
        self.raw(key, &value.into().to_string())
    }

    pub fn unsigned(self, key: &str, value: u64) -> JsonObject {
        self.raw(key, &value.to_string())
    }

    pub fn boolean(self, key: &str, value: bool) -> JsonObject {
        self.raw(key, if value { "true" } else { "false" })
    }

    /// A string, or `null` for `None`.
    pub fn optional_string(self, key: &str, value: Option<&str>) -> JsonObject {
        match value {
            Some(value) => self.string(key, value),
            None => self.raw(key, "null"),
        }
    }

    /// The object on one line.
    pub fn render(mut self) -> String {
        if self.text.is_empty() {
            return "{}".to_owned();
        }
        self.text.push('}');
        self.text
    }
}

/// Rendered JSON values as an array.
pub fn array(items: impl IntoIterator<Item = String>) -> String {
    let items: Vec<String> = items.into_iter().collect();
    format!("[{}]", items.join(","))
}

/// `value` as a JSON string literal (control characters escaped, so the
/// result never spans lines).
pub fn quote(value: &str) -> String {
    let mut quoted = String::with_capacity(value.len() + 2);
    quoted.push('"');
    for character in value.chars() {
        match character {
            '"' => quoted.push_str("\\\""),
            '\\' => quoted.push_str("\\\\"),
            '\n' => quoted.push_str("\\n"),
            '\r' => quoted.push_str("\\r"),
            '\t' => quoted.push_str("\\t"),
            control if u32::from(control) < 0x20 || control == '\u{7f}' => {
                let _ = write!(quoted, "\\u{:04x}", u32::from(control));
            }
            // Line and paragraph separators are legal JSON but break
            // JavaScript and some line-oriented readers.
            '\u{2028}' => quoted.push_str("\\u2028"),
            '\u{2029}' => quoted.push_str("\\u2029"),
            other => quoted.push(other),
        }
    }
    quoted.push('"');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_are_escaped_onto_one_line() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(quote("µs ≤"), "\"µs ≤\"");
        assert_eq!(quote("x\u{2028}"), "\"x\\u2028\"");
    }

    #[test]
    fn objects_and_arrays_render_on_one_line() {
        let inner = JsonObject::new().integer("offset", -1i64);
        let text = JsonObject::new()
            .string("type", "batch")
            .unsigned("position", 61)
            .boolean("valid", true)
            .optional_string("key", None)
            .raw("inner", &inner.render())
            .raw("list", &array(["1".to_owned(), "2".to_owned()]))
            .render();
        assert_eq!(
            text,
            r#"{"type":"batch","position":61,"valid":true,"key":null,"inner":{"offset":-1},"list":[1,2]}"#
        );
        assert_eq!(JsonObject::new().render(), "{}");
        assert_eq!(array(Vec::new()), "[]");
    }
}
