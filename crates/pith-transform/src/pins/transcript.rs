//! The conversation as the pins stage reads it, on all three wires: messages in order, each
//! with its byte span, its content's shape and the text parts a command may sit in, each
//! tagged with where it came from (a rules file, the user's typing, a harness reminder).
//! Every span points into the client's body, so edits are splices.

use std::borrow::Cow;
use std::ops::Range;

use pith_wire::Wire;
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::splice::span_of;

/// Who a message is from, across the wires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Role {
    /// System or developer text: the harness's, or the user's rules files.
    System,
    /// The user's turn (typed text, harness reminders, tool results on Anthropic).
    User,
    /// The model's turn, or pith's answer in its place.
    Assistant,
    /// Chat `tool` messages, Responses tool calls and their outputs, reasoning items: the
    /// model's loop, which ends a turn like an assistant message does.
    Loop,
}

/// Where a text part came from, which decides what its command lines mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Source {
    /// A system prompt or system/developer message: rules files (file tier).
    System,
    /// A rules file a harness inlined into a user message (file tier): Claude Code's leading
    /// `<system-reminder>` run of the first message, Codex's `# AGENTS.md instructions` block.
    RulesFile,
    /// A later `<system-reminder>` (an @-mentioned file): session tier, not typed.
    Reminder,
    /// Another whole `<tag>...</tag>` block a harness adds (`<environment_context>`): not read.
    Harness,
    /// Text the user typed: session tier.
    Typed,
}

impl Source {
    /// Whether command lines in this part count (all but other harness blocks).
    pub fn read(&self) -> bool {
        !matches!(self, Source::Harness)
    }

    /// Whether commands here are durable (a rules file) rather than this session's.
    pub fn is_file(&self) -> bool {
        matches!(self, Source::System | Source::RulesFile)
    }
}

/// One text part: a JSON string a command line may sit in.
#[derive(Debug)]
pub(super) struct Part<'a> {
    /// The string literal, quotes included, as the client wrote it.
    pub literal: &'a str,
    /// Its bytes in the body.
    pub span: Range<usize>,
    /// Its block in the content array (`None` when the content is this string).
    pub block: Option<usize>,
    /// Where it came from.
    pub source: Source,
}

/// One element of a content array (or of the system block list).
#[derive(Debug)]
pub(super) struct Block<'a> {
    /// The element's bytes in the body.
    pub span: Range<usize>,
    /// Its `cache_control` value, raw, when it has one.
    pub cache_control: Option<&'a str>,
    /// A tool result (Anthropic `tool_result`): never read, and makes a turn not command-only.
    pub tool_result: bool,
}

/// A message's content.
#[derive(Debug)]
pub(super) enum Content<'a> {
    /// No content, or a shape pith does not edit (null, a number).
    Other,
    /// One string: the span of the literal.
    String(Range<usize>),
    /// An array: its span and its elements.
    Array {
        span: Range<usize>,
        blocks: Vec<Block<'a>>,
    },
}

/// One message (Anthropic, Chat) or input item (Responses).
#[derive(Debug)]
pub(super) struct Message<'a> {
    /// The element's bytes in the body.
    pub span: Range<usize>,
    /// Who it is from.
    pub role: Role,
    /// Its content.
    pub content: Content<'a>,
    /// Its text parts, in order.
    pub parts: Vec<Part<'a>>,
}

impl Message<'_> {
    /// Whether any block is a tool result.
    pub fn has_tool_result(&self) -> bool {
        matches!(&self.content, Content::Array { blocks, .. } if blocks.iter().any(|b| b.tool_result))
    }

    /// The message's first text, decoded (for recognizing pith's own answers).
    pub fn first_text(&self) -> Option<String> {
        let part = self.parts.first()?;
        serde_json::from_str(part.literal).ok()
    }
}

/// The parts of a body the pins stage reads.
#[derive(Debug)]
pub(super) struct Transcript<'a> {
    /// The system prompt's text parts (Anthropic `system`, Responses `instructions`).
    pub system: Vec<Part<'a>>,
    /// The system prompt's blocks, when it is a block list.
    pub system_blocks: Vec<Block<'a>>,
    /// The history, oldest first.
    pub messages: Vec<Message<'a>>,
    /// The history array's span (`messages` or `input`); a string `input` is `input_string`.
    pub history: Range<usize>,
    /// Responses: `input` is one string (a single user message).
    pub input_string: bool,
}

impl Transcript<'_> {
    /// Whether the last message's last text is a pin block pith wrote.
    pub fn ends_with_pin_block(&self) -> bool {
        self.messages
            .last()
            .and_then(|m| m.parts.last())
            .is_some_and(|p| p.literal.starts_with(concat!("\"", "<pith-pins>")))
    }
}

/// The body is not the shape pins reads; the request passes unchanged.
#[derive(Debug)]
pub(super) struct Unreadable;

impl From<serde_json::Error> for Unreadable {
    fn from(_: serde_json::Error) -> Self {
        Unreadable
    }
}

#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow, default)]
    system: Option<&'a RawValue>,
    #[serde(borrow, default)]
    instructions: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawMessage<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct RawBlock<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
    #[serde(borrow, default)]
    cache_control: Option<&'a RawValue>,
}

/// Read `body` (valid UTF-8) as `wire`'s request.
pub(super) fn read(wire: Wire, body: &str) -> Result<Transcript<'_>, Unreadable> {
    let top: Top<'_> = serde_json::from_str(body)?;
    let mut transcript = Transcript {
        system: Vec::new(),
        system_blocks: Vec::new(),
        messages: Vec::new(),
        history: 0..0,
        input_string: false,
    };
    let system = match wire {
        Wire::AnthropicMessages => top.system,
        Wire::Responses => top.instructions,
        Wire::ChatCompletions => None,
    };
    if let Some(system) = system.filter(|s| s.get() != "null") {
        let (parts, blocks) = content(body, system, |_, _| Source::System)?;
        transcript.system = parts;
        if let Content::Array { blocks, .. } = blocks {
            transcript.system_blocks = blocks;
        }
    }
    let history = match wire {
        Wire::Responses => top.input,
        Wire::AnthropicMessages | Wire::ChatCompletions => top.messages,
    };
    let Some(history) = history.filter(|h| h.get() != "null") else {
        return Err(Unreadable);
    };
    transcript.history = span_of(body, history).ok_or(Unreadable)?;
    if history.get().starts_with('"') {
        if wire != Wire::Responses {
            return Err(Unreadable);
        }
        transcript.input_string = true;
        let span = transcript.history.clone();
        transcript.messages.push(Message {
            span: span.clone(),
            role: Role::User,
            content: Content::String(span.clone()),
            parts: vec![Part {
                literal: history.get(),
                span,
                block: None,
                source: user_source(history.get(), wire, false),
            }],
        });
        return Ok(transcript);
    }
    let elements: Vec<&RawValue> = serde_json::from_str(history.get())?;
    for (index, element) in elements.into_iter().enumerate() {
        transcript
            .messages
            .push(message(body, wire, index == 0, element)?);
    }
    Ok(transcript)
}

/// One element of the history array (`first` when it is the first), with its role, content
/// and text parts.
fn message<'a>(
    body: &'a str,
    wire: Wire,
    first: bool,
    element: &'a RawValue,
) -> Result<Message<'a>, Unreadable> {
    let span = span_of(body, element).ok_or(Unreadable)?;
    if !element.get().starts_with('{') {
        return Err(Unreadable);
    }
    let raw: RawMessage<'_> = serde_json::from_str(element.get())?;
    let role = role(wire, &raw);
    let (parts, content) = match (role, raw.content) {
        (Role::Loop, _) | (_, None) => (Vec::new(), Content::Other),
        (Role::User, Some(c)) => {
            // Claude Code inlines CLAUDE.md in the leading reminder run of the first
            // message; the run ends at the first block that is not a reminder.
            let mut leading = first && wire == Wire::AnthropicMessages;
            content(body, c, |text, _| {
                let source = user_source(text, wire, leading);
                leading &= matches!(source, Source::RulesFile | Source::Harness);
                source
            })?
        }
        (Role::System, Some(c)) => content(body, c, |_, _| Source::System)?,
        (Role::Assistant, Some(c)) => content(body, c, |_, _| Source::Harness)?,
    };
    Ok(Message {
        span,
        role,
        content,
        parts,
    })
}

fn role(wire: Wire, raw: &RawMessage<'_>) -> Role {
    let kind = raw.kind.as_deref();
    if wire == Wire::Responses && !matches!(kind, None | Some("message")) {
        return Role::Loop;
    }
    match raw.role.as_deref() {
        Some("user") => Role::User,
        Some("assistant") => Role::Assistant,
        Some("system" | "developer") => Role::System,
        _ => Role::Loop,
    }
}

/// Where a user message's text came from, by how it begins.
fn user_source(literal: &str, wire: Wire, leading: bool) -> Source {
    let text: Cow<'_, str> = serde_json::from_str(literal).unwrap_or(Cow::Borrowed(""));
    let text = text.trim_start();
    if text.starts_with(pith_clients::SYSTEM_REMINDER_OPEN) {
        // In the leading run, only a reminder that inlines a file is one (its envelope names
        // it); the others there (git status, attribution) are the harness's.
        return match (leading, text.contains("Contents of ")) {
            (true, true) => Source::RulesFile,
            (true, false) => Source::Harness,
            (false, _) => Source::Reminder,
        };
    }
    if wire == Wire::Responses && text.starts_with(pith_clients::codex::AGENTS_MD_PREFIX) {
        return Source::RulesFile;
    }
    if pith_clients::is_one_wrapper(text.trim_end()) {
        return Source::Harness;
    }
    Source::Typed
}

/// The text parts and blocks of a content value (string or block array). `source` tags each
/// text part from its literal and block index.
fn content<'a>(
    body: &'a str,
    value: &'a RawValue,
    mut source: impl FnMut(&str, Option<usize>) -> Source,
) -> Result<(Vec<Part<'a>>, Content<'a>), Unreadable> {
    let span = span_of(body, value).ok_or(Unreadable)?;
    let raw = value.get();
    if raw.starts_with('"') {
        let part = Part {
            literal: raw,
            span: span.clone(),
            block: None,
            source: source(raw, None),
        };
        return Ok((vec![part], Content::String(span)));
    }
    if !raw.starts_with('[') {
        return Ok((Vec::new(), Content::Other));
    }
    let elements: Vec<&RawValue> = serde_json::from_str(raw)?;
    let mut parts = Vec::new();
    let mut blocks = Vec::with_capacity(elements.len());
    for (index, element) in elements.into_iter().enumerate() {
        let element_span = span_of(body, element).ok_or(Unreadable)?;
        let mut block = Block {
            span: element_span,
            cache_control: None,
            tool_result: false,
        };
        if element.get().starts_with('{') {
            let raw_block: RawBlock<'_> = serde_json::from_str(element.get())?;
            block.cache_control = raw_block
                .cache_control
                .map(RawValue::get)
                .filter(|c| *c != "null");
            let kind = raw_block.kind.as_deref();
            block.tool_result = matches!(kind, Some("tool_result" | "function_call_output"));
            let is_text = matches!(kind, Some("text" | "input_text" | "output_text"));
            if let Some(text) = raw_block
                .text
                .filter(|t| is_text && t.get().starts_with('"'))
            {
                parts.push(Part {
                    literal: text.get(),
                    span: span_of(body, text).ok_or(Unreadable)?,
                    block: Some(index),
                    source: source(text.get(), Some(index)),
                });
            }
        }
        blocks.push(block);
    }
    Ok((parts, Content::Array { span, blocks }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claude_code_first_message_reminders_are_the_rules_file() {
        let body = r#"{"messages":[{"role":"user","content":[
            {"type":"text","text":"<system-reminder>\nContents of /p/CLAUDE.md:\nx\n</system-reminder>"},
            {"type":"text","text":"<system-reminder>\ngit status\n</system-reminder>"},
            {"type":"text","text":"fix it"},
            {"type":"text","text":"<system-reminder>late</system-reminder>"}]},
            {"role":"assistant","content":"ok"},
            {"role":"user","content":[{"type":"text","text":"<system-reminder>@-file</system-reminder>"}]}]}"#;
        let t = read(Wire::AnthropicMessages, body).unwrap();
        let sources: Vec<&Source> = t.messages[0].parts.iter().map(|p| &p.source).collect();
        assert_eq!(
            sources,
            [
                &Source::RulesFile,
                &Source::Harness,
                &Source::Typed,
                &Source::Reminder
            ]
        );
        assert_eq!(t.messages[1].role, Role::Assistant);
        assert_eq!(t.messages[2].parts[0].source, Source::Reminder);
    }

    #[test]
    fn codex_agents_md_and_environment_blocks() {
        let body = r##"{"input":[{"type":"message","role":"developer","content":[{"type":"input_text","text":"base"}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":"# AGENTS.md instructions for /p\n\n<INSTRUCTIONS>\nr\n</INSTRUCTIONS>"},{"type":"input_text","text":"<environment_context>\n</environment_context>"}]},
            {"type":"message","role":"user","content":[{"type":"input_text","text":"go"}]},
            {"type":"function_call","name":"x","arguments":"{}","call_id":"c"}]}"##;
        let t = read(Wire::Responses, body).unwrap();
        assert_eq!(t.messages[0].parts[0].source, Source::System);
        assert_eq!(t.messages[1].parts[0].source, Source::RulesFile);
        assert_eq!(t.messages[1].parts[1].source, Source::Harness);
        assert_eq!(t.messages[2].parts[0].source, Source::Typed);
        assert_eq!(t.messages[3].role, Role::Loop);
    }

    #[test]
    fn spans_point_into_the_body() {
        let body = r#"{"system":[{"type":"text","text":"s","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"hi"}]}"#;
        let t = read(Wire::AnthropicMessages, body).unwrap();
        assert_eq!(&body[t.system[0].span.clone()], "\"s\"");
        assert_eq!(
            t.system_blocks[0].cache_control,
            Some(r#"{"type":"ephemeral"}"#)
        );
        assert_eq!(
            &body[t.messages[0].span.clone()],
            r#"{"role":"user","content":"hi"}"#
        );
        assert!(matches!(t.messages[0].content, Content::String(_)));
    }

    #[test]
    fn shapes_pins_does_not_read_are_unreadable() {
        for body in [
            "[]",
            "{}",
            r#"{"messages":null}"#,
            r#"{"messages":"x"}"#,
            r#"{"messages":[1]}"#,
        ] {
            assert!(read(Wire::AnthropicMessages, body).is_err(), "{body}");
        }
        assert!(
            read(Wire::Responses, r#"{"input":"hi"}"#)
                .unwrap()
                .input_string
        );
    }
}
