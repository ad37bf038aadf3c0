//! Borrowed views over the parts of a request body the defer stage reads. Every `&RawValue`
//! here points into the client's body, so [`crate::span_of`] turns it into a byte range.

use std::borrow::Cow;
use std::ops::Range;

use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

/// A JSON string, borrowed from the body when it has no escapes.
#[derive(Debug, Deserialize)]
pub(super) struct Str<'a>(#[serde(borrow)] pub Cow<'a, str>);

impl Str<'_> {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The top-level keys the stage cares about; everything else is skipped unread.
#[derive(Debug, Deserialize)]
pub(super) struct Top<'a> {
    /// `null` reads as absent.
    #[serde(borrow, default)]
    pub tools: Option<Vec<&'a RawValue>>,
    #[serde(borrow, default)]
    pub tool_choice: Option<&'a RawValue>,
    /// Anthropic Messages history.
    #[serde(borrow, default)]
    pub messages: Option<&'a RawValue>,
    /// OpenAI Responses history.
    #[serde(borrow, default)]
    pub input: Option<&'a RawValue>,
}

/// The top-level keys of one tool definition.
#[derive(Debug, Deserialize)]
pub(super) struct Tool<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub description: Option<Str<'a>>,
    #[serde(borrow, default, deserialize_with = "present")]
    pub cache_control: Option<&'a RawValue>,
}

/// Just enough of a tool to tell whether the client already defers: a cheap first pass that
/// skips descriptions and schemas without allocating (Claude Code sends ~35 KB of tools on
/// every request and already defers, so this answer must come fast).
#[derive(Debug, Deserialize)]
pub(super) struct ToolProbe<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Str<'a>>,
    /// Present (even as `null`) means the client decides deferral itself.
    #[serde(borrow, default, deserialize_with = "present")]
    pub defer_loading: Option<&'a RawValue>,
}

/// `{"type": ...}` of a `tool_choice` object.
#[derive(Debug, Deserialize)]
pub(super) struct TypeOnly<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Str<'a>>,
}

/// A key that is present maps to `Some`, even when its value is `null` (a plain `Option`
/// would read `null` as absent, and the stage would then add a duplicate key).
fn present<'de, D: Deserializer<'de>>(d: D) -> Result<Option<&'de RawValue>, D::Error> {
    <&'de RawValue>::deserialize(d).map(Some)
}

fn skip_ws_back(body: &[u8], mut at: usize) -> usize {
    while at > 0 && body[at - 1].is_ascii_whitespace() {
        at -= 1;
    }
    at
}

fn skip_ws_forward(body: &[u8], mut at: usize) -> usize {
    while at < body.len() && body[at].is_ascii_whitespace() {
        at += 1;
    }
    at
}

/// The byte range to delete so that the object member whose value occupies `value` and whose
/// key is `key` disappears together with one adjacent comma. `None` when the bytes around the
/// value are not `"key": value` inside an object (e.g. an escaped key).
pub(super) fn member_removal(body: &str, value: Range<usize>, key: &str) -> Option<Range<usize>> {
    let bytes = body.as_bytes();
    let colon = skip_ws_back(bytes, value.start);
    if colon == 0 || bytes[colon - 1] != b':' {
        return None;
    }
    let key_end = skip_ws_back(bytes, colon - 1);
    let quoted_len = key.len() + 2;
    let key_start = key_end.checked_sub(quoted_len)?;
    let quoted = body.get(key_start..key_end)?;
    if !(quoted.starts_with('"') && quoted.ends_with('"') && &quoted[1..quoted.len() - 1] == key) {
        return None;
    }
    let before = skip_ws_back(bytes, key_start);
    match bytes.get(before.checked_sub(1)?) {
        Some(b',') => Some(before - 1..value.end),
        Some(b'{') => {
            let after = skip_ws_forward(bytes, value.end);
            (bytes.get(after) == Some(&b',')).then_some(key_start..after + 1)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn removal(body: &str, key: &str) -> String {
        let at = body.find("VAL").unwrap();
        let range = member_removal(body, at..at + 3, key).unwrap();
        format!("{}{}", &body[..range.start], &body[range.end..])
    }

    #[test]
    fn member_removal_takes_one_comma() {
        assert_eq!(
            removal(r#"{"a":1, "k" : VAL, "b":2}"#, "k"),
            r#"{"a":1, "b":2}"#
        );
        assert_eq!(removal(r#"{"a":1,"k":VAL}"#, "k"), r#"{"a":1}"#);
        assert_eq!(removal(r#"{ "k":VAL , "b":2}"#, "k"), r#"{  "b":2}"#);
    }

    #[test]
    fn member_removal_refuses_what_it_does_not_understand() {
        let body = r#"{"k\u0031":VAL,"b":2}"#;
        let at = body.find("VAL").unwrap();
        assert_eq!(member_removal(body, at..at + 3, "k1"), None);
        let body = r#"{"k":VAL}"#;
        let at = body.find("VAL").unwrap();
        assert_eq!(member_removal(body, at..at + 3, "k"), None);
    }
}
