//! A JSON tree the fuzzer builds and writes by hand: it chooses the whitespace, the escapes and
//! the oddities (duplicate keys, numbers at the edges, lone surrogates) that serde_json's
//! serializers would never produce, and it never re-serializes anything pith forwards.

use std::fmt::Write as _;

use pith_testkit::rng::Rng;
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

use crate::RngExt;

/// A JSON value as the fuzzer writes it.
#[derive(Clone, Debug)]
pub enum J {
    Null,
    Bool(bool),
    /// Number text, written as it is.
    Num(String),
    /// A string's content; the writer chooses its escapes.
    Str(String),
    /// A token written verbatim: a string holding a lone surrogate, a number serde cannot hold.
    Raw(String),
    Arr(Vec<J>),
    /// Members in order; a key may repeat.
    Obj(Vec<(String, J)>),
}

impl J {
    pub fn s(text: impl Into<String>) -> J {
        J::Str(text.into())
    }

    pub fn n(value: impl std::fmt::Display) -> J {
        J::Num(value.to_string())
    }

    pub fn obj(members: Vec<(&str, J)>) -> J {
        J::Obj(
            members
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
        )
    }

    pub fn members_mut(&mut self) -> Option<&mut Vec<(String, J)>> {
        match self {
            J::Obj(members) => Some(members),
            _ => None,
        }
    }

    pub fn get(&self, key: &str) -> Option<&J> {
        match self {
            J::Obj(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    pub fn get_mut(&mut self, key: &str) -> Option<&mut J> {
        self.members_mut()?
            .iter_mut()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }

    /// Replace the first member named `key`, or append it.
    pub fn set(&mut self, key: &str, value: J) {
        if let Some(members) = self.members_mut() {
            match members.iter_mut().find(|(k, _)| k == key) {
                Some((_, v)) => *v = value,
                None => members.push((key.to_owned(), value)),
            }
        }
    }

    /// Remove every member named `key`.
    pub fn remove(&mut self, key: &str) {
        if let Some(members) = self.members_mut() {
            members.retain(|(k, _)| k != key);
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            J::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// How a body is laid out.
#[derive(Clone, Copy, Debug)]
pub enum Layout {
    /// No whitespace at all.
    Compact,
    /// One member or element per line, indented by this text.
    Pretty(&'static str),
    /// Random whitespace (spaces, tabs, CR LF) between any two tokens.
    Loose,
}

/// The writer's choices for one body.
#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub layout: Layout,
    /// Per character of a string value: the chance it is written as an escape.
    pub escape: f64,
    /// The same for keys (an escaped key makes the stage refuse the edits it would need there).
    pub key_escape: f64,
    pub upper_hex: bool,
}

impl Style {
    pub fn random(rng: &mut Rng) -> Style {
        let layout = match rng.below(10) {
            0..=3 => Layout::Compact,
            4..=5 => Layout::Pretty("  "),
            6 => Layout::Pretty(rng.pick(&["    ", "\t", " "])),
            _ => Layout::Loose,
        };
        let escape = *rng.one(&[0.0, 0.0, 0.0, 0.0, 0.0, 0.02, 0.2, 1.0]);
        let key_escape = if rng.chance(0.08) { 0.3 } else { 0.0 };
        Style {
            layout,
            escape,
            key_escape,
            upper_hex: rng.chance(0.5),
        }
    }
}

/// `value` written as a document in `style`.
pub fn write(value: &J, style: Style, rng: &mut Rng) -> String {
    let mut w = Writer {
        out: String::new(),
        rng,
        style,
        depth: 0,
    };
    if matches!(style.layout, Layout::Loose) {
        w.gap();
    }
    w.value(value);
    match style.layout {
        Layout::Pretty(_) if w.rng.chance(0.5) => w.out.push('\n'),
        Layout::Loose => w.gap(),
        _ => {}
    }
    w.out
}

struct Writer<'a> {
    out: String,
    rng: &'a mut Rng,
    style: Style,
    depth: usize,
}

impl Writer<'_> {
    /// Whitespace a loose layout puts between two tokens.
    fn gap(&mut self) {
        if matches!(self.style.layout, Layout::Loose) {
            let gap = *self.rng.one(&[
                "", "", "", " ", " ", "\n", "\t", "\r\n", "  \n\t ", "\n\n\n",
            ]);
            self.out.push_str(gap);
        }
    }

    /// Before an element or member, or before the closing bracket at `depth`.
    fn line(&mut self, depth: usize) {
        match self.style.layout {
            Layout::Compact => {}
            Layout::Pretty(indent) => {
                self.out.push('\n');
                for _ in 0..depth {
                    self.out.push_str(indent);
                }
            }
            Layout::Loose => self.gap(),
        }
    }

    fn value(&mut self, value: &J) {
        match value {
            J::Null => self.out.push_str("null"),
            J::Bool(b) => self.out.push_str(if *b { "true" } else { "false" }),
            J::Num(text) | J::Raw(text) => self.out.push_str(text),
            J::Str(s) => self.string(s, self.style.escape),
            J::Arr(items) => {
                self.out.push('[');
                self.depth += 1;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.line(self.depth);
                    self.value(item);
                }
                self.depth -= 1;
                if items.is_empty() {
                    self.gap();
                } else {
                    self.line(self.depth);
                }
                self.out.push(']');
            }
            J::Obj(members) => {
                self.out.push('{');
                self.depth += 1;
                for (i, (key, item)) in members.iter().enumerate() {
                    if i > 0 {
                        self.out.push(',');
                    }
                    self.line(self.depth);
                    self.string(key, self.style.key_escape);
                    self.gap();
                    self.out.push(':');
                    match self.style.layout {
                        Layout::Pretty(_) => self.out.push(' '),
                        _ => self.gap(),
                    }
                    self.value(item);
                }
                self.depth -= 1;
                if members.is_empty() {
                    self.gap();
                } else {
                    self.line(self.depth);
                }
                self.out.push('}');
            }
        }
    }

    fn string(&mut self, s: &str, escape: f64) {
        self.out.push('"');
        for c in s.chars() {
            let escaped = escape > 0.0 && self.rng.chance(escape);
            match c {
                '"' if !escaped => self.out.push_str("\\\""),
                '\\' if !escaped => self.out.push_str("\\\\"),
                '\n' if !escaped => self.out.push_str("\\n"),
                '\t' if !escaped => self.out.push_str("\\t"),
                '\r' if !escaped => self.out.push_str("\\r"),
                '\u{8}' if !escaped => self.out.push_str("\\b"),
                '\u{c}' if !escaped => self.out.push_str("\\f"),
                '/' if escaped && self.rng.chance(0.5) => self.out.push_str("\\/"),
                c if escaped || u32::from(c) < 0x20 || c == '"' || c == '\\' => {
                    self.unicode_escape(c);
                }
                c => self.out.push(c),
            }
        }
        self.out.push('"');
    }

    /// `\uXXXX`, or a surrogate pair for a character outside the basic plane.
    fn unicode_escape(&mut self, c: char) {
        let mut units = [0u16; 2];
        for unit in c.encode_utf16(&mut units) {
            // Writing into a String cannot fail.
            let _ = if self.style.upper_hex {
                write!(self.out, "\\u{unit:04X}")
            } else {
                write!(self.out, "\\u{unit:04x}")
            };
        }
    }
}

/// Compact text of `value` with plain escapes (for JSON that travels inside a string, such as
/// a Responses `function_call`'s `arguments`).
pub fn compact(value: &J, rng: &mut Rng) -> String {
    let style = Style {
        layout: Layout::Compact,
        escape: 0.0,
        key_escape: 0.0,
        upper_hex: false,
    };
    write(value, style, rng)
}

/// Members in order and numbers as their shortest text: how a capture becomes a tree the
/// fuzzer can change and write again in another style.
impl<'de> Deserialize<'de> for J {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<J, D::Error> {
        struct Visit;
        impl<'de> Visitor<'de> for Visit {
            type Value = J;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_unit<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_none<E>(self) -> Result<J, E> {
                Ok(J::Null)
            }
            fn visit_bool<E>(self, v: bool) -> Result<J, E> {
                Ok(J::Bool(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<J, E> {
                Ok(J::n(v))
            }
            fn visit_u64<E>(self, v: u64) -> Result<J, E> {
                Ok(J::n(v))
            }
            fn visit_f64<E>(self, v: f64) -> Result<J, E> {
                Ok(J::Num(format!("{v:?}")))
            }
            fn visit_str<E>(self, v: &str) -> Result<J, E> {
                Ok(J::s(v))
            }
            fn visit_string<E>(self, v: String) -> Result<J, E> {
                Ok(J::Str(v))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<J, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(J::Arr(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<J, A::Error> {
                let mut members = Vec::new();
                while let Some(entry) = map.next_entry::<String, J>()? {
                    members.push(entry);
                }
                Ok(J::Obj(members))
            }
        }
        d.deserialize_any(Visit)
    }
}
