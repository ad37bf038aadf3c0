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
#[derive(Deserialize)]
pub(super) struct Top<'a> {
    /// The `tools` array as sent (`null` reads as absent): its span bounds the edit's check.
    #[serde(borrow, default)]
    pub tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub tool_choice: Option<&'a RawValue>,
    /// Anthropic Messages history, read message by message afterwards (the spans of its
    /// messages are where later turns go on from).
    #[serde(borrow, default)]
    pub messages: Option<&'a RawValue>,
    /// OpenAI Responses history.
    #[serde(borrow, default)]
    pub input: Option<&'a RawValue>,
}

/// One Anthropic message with its blocks.
#[derive(Deserialize)]
pub(super) struct Message<'a> {
    #[serde(borrow, default)]
    pub role: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub content: Option<Content<'a>>,
}

/// A message's `content`: a string, or blocks.
pub(super) enum Content<'a> {
    Text(Cow<'a, str>),
    Blocks(Vec<Block<'a>>),
}

impl<'de: 'a, 'a> Deserialize<'de> for Content<'a> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Content<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a string or an array of content blocks")
            }
            fn visit_borrowed_str<E: serde::de::Error>(
                self,
                v: &'de str,
            ) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Borrowed(v)))
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Self::Value, E> {
                Ok(Content::Text(Cow::Owned(v.to_owned())))
            }
            fn visit_seq<S: serde::de::SeqAccess<'de>>(
                self,
                mut seq: S,
            ) -> Result<Self::Value, S::Error> {
                let mut blocks = Vec::with_capacity(seq.size_hint().unwrap_or(0));
                while let Some(block) = seq.next_element::<Block<'de>>()? {
                    blocks.push(block);
                }
                Ok(Content::Blocks(blocks))
            }
        }
        d.deserialize_any(Visit(std::marker::PhantomData))
    }
}

/// One content block (or Responses content part): its type, and what the history reads.
#[derive(Deserialize)]
pub(super) struct Block<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub name: Option<Str<'a>>,
    #[serde(borrow, default)]
    pub text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    pub content: Option<&'a RawValue>,
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
    /// Present (even as `null`) means the client decided this tool's deferral itself.
    #[serde(borrow, default, deserialize_with = "present")]
    pub defer_loading: Option<&'a RawValue>,
    /// Anthropic: the JSON Schema of the tool's arguments.
    #[serde(borrow, default)]
    pub input_schema: Option<&'a RawValue>,
    /// OpenAI Responses: the JSON Schema of the function's arguments.
    #[serde(borrow, default)]
    pub parameters: Option<&'a RawValue>,
}

/// The parts of a JSON Schema that say what a tool's arguments mean: their names and
/// descriptions, at any depth (`properties`, `items`, `anyOf`/`oneOf`/`allOf`). Every other
/// keyword is skipped unread.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub(super) struct Schema<'a> {
    #[serde(borrow)]
    pub description: Option<Str<'a>>,
    #[serde(borrow)]
    pub properties: Option<Properties<'a>>,
    /// A schema, or (tuple validation) an array of them.
    #[serde(borrow)]
    pub items: Option<&'a RawValue>,
    #[serde(rename = "anyOf", borrow)]
    pub any_of: Option<Vec<Schema<'a>>>,
    #[serde(rename = "oneOf", borrow)]
    pub one_of: Option<Vec<Schema<'a>>>,
    #[serde(rename = "allOf", borrow)]
    pub all_of: Option<Vec<Schema<'a>>>,
}

/// `properties`: argument names with their schemas, in the order the client wrote them.
#[derive(Debug, Default)]
pub(super) struct Properties<'a>(pub Vec<(Str<'a>, Schema<'a>)>);

impl<'de: 'a, 'a> Deserialize<'de> for Properties<'a> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit<'a>(std::marker::PhantomData<&'a ()>);
        impl<'de: 'a, 'a> serde::de::Visitor<'de> for Visit<'a> {
            type Value = Properties<'a>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an object of argument schemas")
            }
            fn visit_map<M: serde::de::MapAccess<'de>>(
                self,
                mut map: M,
            ) -> Result<Self::Value, M::Error> {
                let mut out = Vec::new();
                while let Some(entry) = map.next_entry::<Str<'de>, Schema<'de>>()? {
                    out.push(entry);
                }
                Ok(Properties(out))
            }
        }
        d.deserialize_map(Visit(std::marker::PhantomData))
    }
}

/// Just enough of a tool to tell whether it is a tool search tool: a cheap first pass that
/// skips descriptions and schemas without allocating (Codex sends its own search tool on
/// every request, so this answer must come fast).
#[derive(Debug, Deserialize)]
pub(super) struct ToolProbe<'a> {
    #[serde(rename = "type", borrow, default)]
    pub kind: Option<Str<'a>>,
}

/// The names and descriptions of a tool's arguments as one text, one per line, for ranking.
/// Empty when there is no schema or it is not the shape of one: ranking text never makes a
/// request unparseable.
pub(super) fn argument_text(schema: Option<&RawValue>) -> String {
    let mut out = String::new();
    if let Some(schema) = schema
        && let Ok(schema) = serde_json::from_str::<Schema<'_>>(schema.get())
    {
        schema.push_argument_text(&mut out);
    }
    out
}

impl Schema<'_> {
    fn push_argument_text(&self, out: &mut String) {
        for (name, schema) in self.properties.iter().flat_map(|p| &p.0) {
            out.push_str(name.as_str());
            out.push('\n');
            schema.push_described(out);
        }
        if let Some(items) = self.items {
            let nested = if items.get().starts_with('[') {
                serde_json::from_str::<Vec<Schema<'_>>>(items.get()).unwrap_or_default()
            } else {
                serde_json::from_str::<Schema<'_>>(items.get())
                    .map(|s| vec![s])
                    .unwrap_or_default()
            };
            for schema in &nested {
                schema.push_described(out);
            }
        }
        for alternatives in [&self.any_of, &self.one_of, &self.all_of] {
            for schema in alternatives.iter().flatten() {
                schema.push_described(out);
            }
        }
    }

    /// A schema that describes the same argument as its parent (an array's items, an
    /// alternative): its description, then its own arguments.
    fn push_described(&self, out: &mut String) {
        if let Some(description) = &self.description {
            out.push_str(description.as_str());
            out.push('\n');
        }
        self.push_argument_text(out);
    }
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

    fn arguments(schema: &str) -> String {
        let raw: &RawValue = serde_json::from_str(schema).unwrap();
        argument_text(Some(raw))
    }

    #[test]
    fn argument_text_reads_names_and_descriptions_at_any_depth() {
        let schema = r#"{"type":"object","required":["pattern"],"properties":{
            "pattern":{"type":"string","description":"The regex to search file contents for"},
            "options":{"type":"object","properties":{"case\u005fsensitive":{"type":"boolean"}}},
            "paths":{"type":"array","items":{"type":"string","description":"A directory"}},
            "limit":{"anyOf":[{"type":"integer","description":"Max matches"},{"type":"null"}]}
        },"additionalProperties":false}"#;
        assert_eq!(
            arguments(schema),
            "pattern\nThe regex to search file contents for\noptions\ncase_sensitive\npaths\n\
             A directory\nlimit\nMax matches\n"
        );
        // Tuple validation: `items` as an array of schemas.
        assert_eq!(
            arguments(
                r#"{"properties":{"pair":{"items":[{"description":"x"},{"description":"y"}]}}}"#
            ),
            "pair\nx\ny\n"
        );
    }

    #[test]
    fn argument_text_fails_open_to_nothing() {
        assert_eq!(argument_text(None), "");
        for schema in [
            r#"{"properties":{"a":{"description":7}}}"#,
            r#"{"properties":[1,2]}"#,
            r#""a string""#,
            r#"{"type":"object"}"#,
        ] {
            assert_eq!(arguments(schema), "", "{schema}");
        }
    }
}
