//! Just enough JSON output for reports: objects of strings, numbers and
//! nested objects, written by hand so the bench needs no serialisation crate.

use std::fmt::Write;

/// A JSON object whose fields keep their insertion order.
#[derive(Clone, Debug, Default)]
pub struct JsonObject {
    fields: Vec<(&'static str, String)>,
}

impl JsonObject {
    pub fn new() -> JsonObject {
        JsonObject::default()
    }

    pub fn string(mut self, key: &'static str, value: &str) -> JsonObject {
        self.fields.push((key, quote(value)));
        self
    }

    pub fn integer(mut self, key: &'static str, value: u64) -> JsonObject {
        self.fields.push((key, value.to_string()));
        self
    }

    /// `null` for `None`.
    pub fn optional_integer(self, key: &'static str, value: Option<u64>) -> JsonObject {
        match value {
            Some(value) => self.integer(key, value),
            None => self.raw(key, "null"),
        }
    }

    /// Three decimals; `null` for NaN and infinities, which JSON lacks.
    pub fn number(self, key: &'static str, value: f64) -> JsonObject {
        if value.is_finite() {
            self.raw(key, &format!("{value:.3}"))
        } else {
            self.raw(key, "null")
        }
    }

    pub fn object(mut self, key: &'static str, value: JsonObject) -> JsonObject {
        self.fields.push((key, value.render_at(1)));
        self
    }

    fn raw(mut self, key: &'static str, rendered: &str) -> JsonObject {
        self.fields.push((key, rendered.to_owned()));
        self
    }

    /// The object, indented two spaces per level.
    pub fn render(&self) -> String {
        self.render_at(0)
    }

    fn render_at(&self, depth: usize) -> String {
        if self.fields.is_empty() {
            return "{}".to_owned();
        }
        let inner = "  ".repeat(depth + 1);
        let mut text = String::from("{\n");
        for (index, (key, value)) in self.fields.iter().enumerate() {
            // Nested objects were rendered one level deep; shift them to ours.
            let value = value.replace('\n', &format!("\n{}", "  ".repeat(depth)));
            let comma = if index + 1 < self.fields.len() {
                ","
            } else {
                ""
            };
            let _ = writeln!(text, "{inner}{}: {value}{comma}", quote(key));
        }
        text.push_str(&"  ".repeat(depth));
        text.push('}');
        text
    }
}

/// `value` as a JSON string literal.
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
            control if u32::from(control) < 0x20 => {
                let _ = write!(quoted, "\\u{:04x}", u32::from(control));
            }
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
    fn strings_are_escaped() {
        assert_eq!(quote("plain"), "\"plain\"");
        assert_eq!(quote("a\"b\\c\nd\u{1}"), "\"a\\\"b\\\\c\\nd\\u0001\"");
        assert_eq!(quote("µs ≤"), "\"µs ≤\"");
    }

    #[test]
    fn nested_objects_are_indented_and_non_finite_numbers_are_null() {
        let inner = JsonObject::new()
            .integer("p99", 180)
            .number("ratio", f64::NAN);
        let text = JsonObject::new()
            .string("dir", "/tmp/x")
            .object("latency", inner)
            .optional_integer("bytes", None)
            .object("empty", JsonObject::new())
            .number("mb_per_s", 1234.56789)
            .render();
        let expected = "{\n  \"dir\": \"/tmp/x\",\n  \"latency\": {\n    \"p99\": 180,\n    \
                        \"ratio\": null\n  },\n  \"bytes\": null,\n  \"empty\": {},\n  \
                        \"mb_per_s\": 1234.568\n}";
        assert_eq!(text, expected);
        let deep = JsonObject::new()
            .object(
                "a",
                JsonObject::new().object("b", JsonObject::new().integer("c", 1)),
            )
            .render();
        assert_eq!(
            deep,
            "{\n  \"a\": {\n    \"b\": {\n      \"c\": 1\n    }\n  }\n}"
        );
    }
}
