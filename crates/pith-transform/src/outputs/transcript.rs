//! A request's conversation as the outputs stage reads it, the same for the three wires: turns
//! in order, each the model's (its calls, its text) or not (tool outputs, a person's words).
//!
//! Where each wire keeps them (the APIs' references):
//! - **Anthropic Messages**: `messages[]`; the model's `tool_use` blocks (`id`, `name`, an
//!   `input` object) and `text` blocks; a `tool_result` block in a user message (`tool_use_id`,
//!   `content` a string or blocks, `is_error`).
//! - **Chat Completions**: `messages[]`; an assistant message's `tool_calls[]` (`id`,
//!   `function.name`, `function.arguments` a string holding JSON) and `content`; a `role:
//!   "tool"` message (`tool_call_id`, `content` a string or text parts). OpenCode sends these.
//! - **Responses**: `input[]` items; `function_call` (`call_id`, `name`, `arguments` a string
//!   holding JSON), `custom_tool_call` (`input` a free string: Codex's `apply_patch`),
//!   `local_shell_call` (`action`), an assistant `message`'s `output_text` parts, `reasoning`;
//!   the outputs `function_call_output`, `custom_tool_call_output`, `local_shell_call_output`
//!   (`call_id`, `output` a string or `input_text` parts). Consecutive items of the model are
//!   one turn, as the answer that produced them was. Codex sends these, over HTTP and over its
//!   WebSocket (where the socket's transcript makes each create the whole conversation first).
//!
//! Everything is borrowed from the body: strings stay JSON (`RawValue`) until a result is
//! ranked, which happens once per call (the stage's memo).

use std::borrow::Cow;
use std::ops::Range;

use pith_wire::Wire;
use serde::Deserialize;
use serde_json::value::RawValue;

/// One turn: the model's, or not (outputs, a person's message).
#[derive(Default)]
pub(super) struct Turn<'a> {
    /// Where its first element begins in the body.
    pub(super) start: usize,
    /// Where its last element ends.
    pub(super) end: usize,
    pub(super) model: bool,
    pub(super) calls: Vec<Call<'a>>,
    pub(super) outputs: Vec<Output<'a>>,
    /// The model's text, each a JSON string.
    pub(super) texts: Vec<&'a RawValue>,
    /// Anthropic only: the message's blocks with their types, where a cache marker may move.
    pub(super) blocks: Vec<(&'a RawValue, Cow<'a, str>)>,
}

/// A tool call the model made.
pub(super) struct Call<'a> {
    pub(super) id: Cow<'a, str>,
    pub(super) name: Cow<'a, str>,
    pub(super) input: Input<'a>,
}

impl Call<'_> {
    /// The same call, borrowed.
    pub(super) fn borrowed(&self) -> Call<'_> {
        Call {
            id: Cow::Borrowed(&self.id),
            name: Cow::Borrowed(&self.name),
            input: self.input,
        }
    }
}

/// A call's input as the wire carries it.
#[derive(Clone, Copy)]
pub(super) enum Input<'a> {
    /// A JSON value (Anthropic's `input`, Responses' `action`).
    Json(&'a RawValue),
    /// A JSON string: its text is JSON (function arguments) or free text (a custom tool's).
    Text(&'a RawValue),
}

impl<'a> Input<'a> {
    /// The bytes that say whether two calls are the same call.
    pub(super) fn raw(self) -> &'a str {
        match self {
            Input::Json(raw) | Input::Text(raw) => raw.get(),
        }
    }

    /// The input as a value: arguments decoded, free text a string.
    pub(super) fn value(self) -> Result<serde_json::Value, serde_json::Error> {
        match self {
            Input::Json(raw) => serde_json::from_str(raw.get()),
            Input::Text(raw) => {
                let text: String = serde_json::from_str(raw.get())?;
                Ok(serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)))
            }
        }
    }
}

/// A tool's output handed back.
pub(super) struct Output<'a> {
    pub(super) call_id: Cow<'a, str>,
    /// The JSON string holding its text, when it is one text (anything else rides whole).
    pub(super) text: Option<&'a RawValue>,
    pub(super) is_error: bool,
    /// Its place among its message's blocks (Anthropic's cache marker).
    pub(super) block: usize,
}

/// A body that is not the shape its wire documents.
pub(super) type Unreadable = serde_json::Error;

/// The turns of the history elements at `elements` (spans into `body`, in order).
pub(super) fn turns<'a>(
    wire: Wire,
    body: &'a str,
    elements: &[Range<usize>],
) -> Result<Vec<Turn<'a>>, Unreadable> {
    let mut turns: Vec<Turn<'a>> = Vec::with_capacity(elements.len());
    for span in elements {
        let element = body.get(span.clone()).ok_or_else(not_an_element)?;
        match wire {
            Wire::AnthropicMessages => turns.push(anthropic(element, span.start)?),
            Wire::ChatCompletions => turns.push(chat(element, span.start)?),
            Wire::Responses => responses(element, span.start, &mut turns)?,
        }
        if let Some(turn) = turns.last_mut() {
            turn.end = span.end;
        }
    }
    Ok(turns)
}

fn not_an_element() -> Unreadable {
    <Unreadable as serde::de::Error>::custom("a history element off the body's characters")
}

/// An Anthropic message as a turn.
fn anthropic(element: &str, start: usize) -> Result<Turn<'_>, Unreadable> {
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        role: Cow<'a, str>,
        #[serde(borrow)]
        content: &'a RawValue,
    }
    #[derive(Deserialize)]
    struct Block<'a> {
        #[serde(rename = "type", borrow)]
        kind: Cow<'a, str>,
        #[serde(borrow, default)]
        id: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        name: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        input: Option<&'a RawValue>,
        #[serde(borrow, default)]
        tool_use_id: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        content: Option<&'a RawValue>,
        #[serde(default)]
        is_error: Option<bool>,
        #[serde(borrow, default)]
        text: Option<&'a RawValue>,
    }
    let m: Message<'_> = serde_json::from_str(element)?;
    let mut turn = Turn {
        start,
        model: m.role == "assistant",
        ..Turn::default()
    };
    if m.content.get().starts_with('"') {
        if turn.model {
            turn.texts.push(m.content);
        }
        return Ok(turn);
    }
    let raws: Vec<&RawValue> = serde_json::from_str(m.content.get())?;
    for (i, raw) in raws.into_iter().enumerate() {
        let b: Block<'_> = serde_json::from_str(raw.get())?;
        match (b.kind.as_ref(), turn.model) {
            ("tool_use", true) => {
                if let (Some(id), Some(name), Some(input)) = (b.id, b.name, b.input) {
                    turn.calls.push(Call {
                        id,
                        name,
                        input: Input::Json(input),
                    });
                }
            }
            ("text", true) => turn.texts.extend(b.text),
            ("tool_result", false) => {
                if let Some(call_id) = b.tool_use_id {
                    turn.outputs.push(Output {
                        call_id,
                        text: b.content.and_then(|c| one_text(c, &["text"])),
                        is_error: b.is_error == Some(true),
                        block: i,
                    });
                }
            }
            _ => {}
        }
        turn.blocks.push((raw, b.kind));
    }
    Ok(turn)
}

/// A Chat Completions message as a turn.
fn chat(element: &str, start: usize) -> Result<Turn<'_>, Unreadable> {
    #[derive(Deserialize)]
    struct Message<'a> {
        #[serde(borrow)]
        role: Cow<'a, str>,
        #[serde(borrow, default)]
        content: Option<&'a RawValue>,
        #[serde(borrow, default)]
        tool_calls: Option<Vec<ToolCall<'a>>>,
        #[serde(borrow, default)]
        tool_call_id: Option<Cow<'a, str>>,
    }
    #[derive(Deserialize)]
    struct ToolCall<'a> {
        #[serde(borrow)]
        id: Cow<'a, str>,
        #[serde(borrow, default)]
        function: Option<Function<'a>>,
    }
    #[derive(Deserialize)]
    struct Function<'a> {
        #[serde(borrow)]
        name: Cow<'a, str>,
        #[serde(borrow)]
        arguments: &'a RawValue,
    }
    let m: Message<'_> = serde_json::from_str(element)?;
    let mut turn = Turn {
        start,
        model: m.role == "assistant",
        ..Turn::default()
    };
    if turn.model {
        if let Some(content) = m.content {
            texts_of(content, &["text"], &mut turn.texts)?;
        }
        for call in m.tool_calls.into_iter().flatten() {
            if let Some(f) = call.function {
                turn.calls.push(Call {
                    id: call.id,
                    name: f.name,
                    input: Input::Text(f.arguments),
                });
            }
        }
    } else if m.role == "tool"
        && let Some(call_id) = m.tool_call_id
    {
        turn.outputs.push(Output {
            call_id,
            text: m.content.and_then(|c| one_text(c, &["text"])),
            is_error: false,
            block: 0,
        });
    }
    Ok(turn)
}

/// Whether a Responses item (its `type`, `message` when it has none, and its `role`) is the
/// model's: an assistant message, a call, its reasoning; not an output or a person's message.
pub(crate) fn is_model_item(kind: &str, role: Option<&str>) -> bool {
    match kind {
        "message" => role == Some("assistant"),
        k => !k.ends_with("_output"),
    }
}

/// A Responses item, into the last turn when it continues the model's, else a turn of its own.
fn responses<'a>(
    element: &'a str,
    start: usize,
    turns: &mut Vec<Turn<'a>>,
) -> Result<(), Unreadable> {
    #[derive(Deserialize)]
    struct Item<'a> {
        #[serde(rename = "type", borrow, default)]
        kind: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        role: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        content: Option<&'a RawValue>,
        #[serde(borrow, default)]
        call_id: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        name: Option<Cow<'a, str>>,
        #[serde(borrow, default)]
        arguments: Option<&'a RawValue>,
        #[serde(borrow, default)]
        input: Option<&'a RawValue>,
        #[serde(borrow, default)]
        action: Option<&'a RawValue>,
        #[serde(borrow, default)]
        output: Option<&'a RawValue>,
    }
    let item: Item<'a> = serde_json::from_str(element)?;
    let kind_name = item.kind.clone().unwrap_or(Cow::Borrowed("message"));
    let kind = kind_name.as_ref();
    let model = is_model_item(kind, item.role.as_deref());
    if !(model && turns.last().is_some_and(|t| t.model)) {
        turns.push(Turn {
            start,
            model,
            ..Turn::default()
        });
    }
    let Some(turn) = turns.last_mut() else {
        return Ok(());
    };
    let call = |input| {
        item.call_id.clone().map(|id| Call {
            id,
            name: item.name.clone().unwrap_or_else(|| kind_name.clone()),
            input,
        })
    };
    match kind {
        "message" if model => {
            if let Some(content) = item.content {
                texts_of(content, &["output_text"], &mut turn.texts)?;
            }
        }
        "function_call" => turn
            .calls
            .extend(item.arguments.and_then(|a| call(Input::Text(a)))),
        "custom_tool_call" => turn
            .calls
            .extend(item.input.and_then(|i| call(Input::Text(i)))),
        "local_shell_call" => turn
            .calls
            .extend(item.action.and_then(|a| call(Input::Json(a)))),
        k if k.ends_with("_output") => {
            if let Some(call_id) = item.call_id {
                turn.outputs.push(Output {
                    call_id,
                    text: item
                        .output
                        .and_then(|o| one_text(o, &["input_text", "output_text"])),
                    is_error: false,
                    block: 0,
                });
            }
        }
        _ => {}
    }
    Ok(())
}

/// A text part: its type and text.
#[derive(Deserialize)]
struct Part<'a> {
    #[serde(rename = "type", borrow)]
    kind: Cow<'a, str>,
    #[serde(borrow, default)]
    text: Option<&'a RawValue>,
}

/// The JSON string of a content that is one text: a string, or a list of one text part of one
/// of `kinds`. Anything else (images, several parts) is `None`: it rides whole.
fn one_text<'a>(content: &'a RawValue, kinds: &[&str]) -> Option<&'a RawValue> {
    if content.get().starts_with('"') {
        return Some(content);
    }
    match serde_json::from_str::<Vec<Part<'a>>>(content.get())
        .ok()?
        .as_slice()
    {
        [only] if kinds.contains(&only.kind.as_ref()) => only.text,
        _ => None,
    }
}

/// The texts of a content (a string, or parts of one of `kinds`), each a JSON string.
fn texts_of<'a>(
    content: &'a RawValue,
    kinds: &[&str],
    out: &mut Vec<&'a RawValue>,
) -> Result<(), Unreadable> {
    match content.get().as_bytes().first() {
        Some(b'"') => out.push(content),
        Some(b'[') => {
            let parts: Vec<Part<'a>> = serde_json::from_str(content.get())?;
            out.extend(
                parts
                    .into_iter()
                    .filter(|p| kinds.contains(&p.kind.as_ref()))
                    .filter_map(|p| p.text),
            );
        }
        _ => {}
    }
    Ok(())
}
