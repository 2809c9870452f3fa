//! [`JsonWriter`]: a small JSON writer that lays text out as VMA's
//! `VmaJsonWriter` does, so a dump reads the same as one from VMA.
//!
//! Layout rules (VMA's): two spaces of indent per level; `"key": value`; a
//! value after the first of a collection is preceded by `", "` and a new
//! line; collections opened in single-line mode (`Flags`, each
//! suballocation) stay on one line. Strings escape `\`, `"` and control
//! characters; every other character, non-ASCII included, is written as
//! UTF-8, which JSON allows.

use std::fmt::Write;

const INDENT: &str = "  ";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Collection {
    Object,
    Array,
}

#[derive(Clone, Copy, Debug)]
struct Level {
    collection: Collection,
    values: u32,
    single_line: bool,
}

/// Writes one JSON document into a `String`. Misuse (a number as an object
/// key, unbalanced ends) is a bug of this crate, caught by debug assertions.
#[derive(Debug, Default)]
pub(crate) struct JsonWriter {
    out: String,
    stack: Vec<Level>,
}

impl JsonWriter {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The document; every collection must be closed.
    pub(crate) fn finish(self) -> String {
        debug_assert!(self.stack.is_empty(), "unclosed JSON collection");
        self.out
    }

    pub(crate) fn begin_object(&mut self, single_line: bool) {
        self.begin_value(false);
        self.out.push('{');
        self.push(Collection::Object, single_line);
    }

    pub(crate) fn end_object(&mut self) {
        self.end(Collection::Object, '}');
    }

    pub(crate) fn begin_array(&mut self, single_line: bool) {
        self.begin_value(false);
        self.out.push('[');
        self.push(Collection::Array, single_line);
    }

    pub(crate) fn end_array(&mut self) {
        self.end(Collection::Array, ']');
    }

    /// A string value, or an object key.
    pub(crate) fn string(&mut self, value: &str) {
        self.begin_value(true);
        self.out.push('"');
        escape_into(&mut self.out, value);
        self.out.push('"');
    }

    pub(crate) fn number(&mut self, value: u64) {
        self.begin_value(false);
        // Writing to a String cannot fail.
        let _ = write!(self.out, "{value}");
    }

    /// `key` then a number.
    pub(crate) fn key_number(&mut self, key: &str, value: u64) {
        self.string(key);
        self.number(value);
    }

    /// `key` then a string.
    pub(crate) fn key_string(&mut self, key: &str, value: &str) {
        self.string(key);
        self.string(value);
    }

    fn push(&mut self, collection: Collection, single_line: bool) {
        self.stack.push(Level {
            collection,
            values: 0,
            single_line,
        });
    }

    fn end(&mut self, collection: Collection, close: char) {
        self.indent(true);
        self.out.push(close);
        let level = self.stack.pop();
        debug_assert!(level.is_some_and(|l| l.collection == collection));
    }

    fn begin_value(&mut self, is_string: bool) {
        let Some(level) = self.stack.last_mut() else {
            return;
        };
        let key_position = level.collection == Collection::Object && level.values % 2 == 0;
        debug_assert!(is_string || !key_position, "JSON object keys are strings");
        let after_key = level.collection == Collection::Object && level.values % 2 == 1;
        let first = level.values == 0;
        level.values += 1;
        if after_key {
            self.out.push_str(": ");
        } else {
            if !first {
                self.out.push_str(", ");
            }
            self.indent(false);
        }
    }

    fn indent(&mut self, one_less: bool) {
        let Some(level) = self.stack.last() else {
            return;
        };
        if level.single_line {
            return;
        }
        self.out.push('\n');
        let depth = self.stack.len() - usize::from(one_less);
        for _ in 0..depth {
            self.out.push_str(INDENT);
        }
    }
}

/// Appends `value` with JSON string escapes (RFC 8259, section 7): `"` and
/// `\` get a backslash, control characters a short or `\u00XX` escape.
pub(crate) fn escape_into(out: &mut String, value: &str) {
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if u32::from(c) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lays_out_like_vma() {
        let mut json = JsonWriter::new();
        json.begin_object(false);
        json.key_string("API", "Vulkan");
        json.string("Flags");
        json.begin_array(true);
        json.string("DEVICE_LOCAL");
        json.string("HOST_VISIBLE");
        json.end_array();
        json.string("Empty");
        json.begin_object(false);
        json.end_object();
        json.string("List");
        json.begin_array(false);
        json.begin_object(true);
        json.key_number("Offset", 0);
        json.key_string("Type", "FREE");
        json.end_object();
        json.end_array();
        json.end_object();
        assert_eq!(
            json.finish(),
            "{\n  \"API\": \"Vulkan\", \n  \"Flags\": [\"DEVICE_LOCAL\", \"HOST_VISIBLE\"], \n  \
             \"Empty\": {\n  }, \n  \"List\": [\n    {\"Offset\": 0, \"Type\": \"FREE\"}\n  ]\n}"
        );
    }

    /// A number where an object wants a key would make the dump invalid
    /// JSON (`{0: ...}`), which no reader of VMA dumps parses: debug builds
    /// stop at it.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "JSON object keys are strings")]
    fn a_number_as_an_object_key_is_caught() {
        let mut json = JsonWriter::new();
        json.begin_object(false);
        json.key_number("Size", 1);
        json.number(2);
    }

    #[test]
    fn escapes_quotes_backslashes_and_controls() {
        let mut out = String::new();
        escape_into(&mut out, "a\"b\\c\nd\u{1}é→🦀");
        assert_eq!(out, "a\\\"b\\\\c\\nd\\u0001é→🦀");
    }
}
