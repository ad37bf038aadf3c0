//! A conversation's messages read out of the three wires: the history a request carries, and
//! the assistant's reply (a JSON answer, or a stream put back together). Only the parts history
//! keeps: who spoke, and each block's kind and text. Codex's session files hold the same
//! Responses items as its requests, so [`responses_items`] reads both.

use serde_json::Value;

use crate::Wire;
use crate::sse::SseDecoder;

/// What a block of a message is; history tells a person's text from everything else by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartKind {
    /// Text (a person's, a model's, or a harness's: see the history's classification).
    Text,
    /// A tool call the model made.
    ToolUse,
    /// A tool's result handed back to the model.
    ToolResult,
    /// Reasoning, images, documents and anything else.
    Other,
}

/// One block of a message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    /// What the block is.
    pub kind: PartKind,
    /// Its text (a tool call's name and input; empty for blocks with none).
    pub text: String,
    /// A tool result's call id (`tool_use_id`, `tool_call_id`, `call_id`): what pith's
    /// shortened outputs name to be fetched whole (issue 48). `None` for other parts.
    pub call_id: Option<String>,
}

/// One message: `user`, `assistant` or `tool` (a result message of a wire that has them).
/// `system` and `developer` messages are instructions, not conversation, and are left out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// Its blocks in order.
    pub parts: Vec<Part>,
}

impl Message {
    fn new(role: &str) -> Message {
        Message {
            role: role.to_owned(),
            parts: Vec::new(),
        }
    }

    /// Every part's text, joined by newlines.
    pub fn text(&self) -> String {
        let texts: Vec<&str> = self
            .parts
            .iter()
            .map(|p| p.text.as_str())
            .filter(|t| !t.is_empty())
            .collect();
        texts.join("\n")
    }
}

fn text_part(kind: PartKind, text: &str) -> Part {
    Part {
        kind,
        text: text.to_owned(),
        call_id: None,
    }
}

/// A tool result's part: its text and the call it answers.
fn result_part(text: String, call_id: Option<&Value>) -> Part {
    Part {
        kind: PartKind::ToolResult,
        text,
        call_id: call_id.and_then(Value::as_str).map(str::to_owned),
    }
}

/// The messages of a request body (`None` when it is not JSON of that wire).
///
/// Only the messages member is parsed (found by a skim of the top-level object, the last one
/// when a key repeats, as a full parse would keep): the tool definitions and the system prompt,
/// half of a Claude Code body, are never built into a `Value` (this is the ledger writers'
/// second-largest cost per request).
pub fn request_messages(wire: Wire, body: &[u8]) -> Option<Vec<Message>> {
    let value: Value = serde_json::from_slice(conversation_member(wire, body)?).ok()?;
    messages_of(wire, &value)
}

/// The raw value of a request body's conversation member (`messages`, Responses' `input`),
/// found by a skim of the top-level object: the last one when a key repeats, as a full parse
/// would keep.
pub fn conversation_member(wire: Wire, body: &[u8]) -> Option<&[u8]> {
    let key = wire.history_member().as_bytes();
    let members = crate::skim::object_members(body)?;
    let member = members.iter().rev().find(|m| &body[m.key.clone()] == key)?;
    Some(&body[member.value.clone()])
}

/// The messages in a request's `messages` (or Responses' `input`) value.
pub fn messages_of(wire: Wire, value: &Value) -> Option<Vec<Message>> {
    match wire {
        Wire::AnthropicMessages => Some(anthropic_messages(value.as_array()?)),
        Wire::ChatCompletions => Some(chat_messages(value.as_array()?)),
        Wire::Responses => match value {
            Value::String(s) => Some(vec![Message {
                role: "user".into(),
                parts: vec![text_part(PartKind::Text, s)],
            }]),
            Value::Array(items) => Some(responses_items(items)),
            _ => None,
        },
    }
}

/// The assistant's reply in a response body: a JSON answer, or a whole SSE stream.
pub fn reply_message(wire: Wire, body: &[u8], sse: bool) -> Option<Message> {
    let message = if sse {
        let mut events = Vec::new();
        let mut decoder = SseDecoder::new();
        decoder.feed(body, |e| events.push(e));
        events.extend(decoder.finish());
        let mut stream = ReplyStream::new(wire);
        for e in &events {
            stream.event(&e.data);
        }
        stream.finish()
    } else {
        let value: Value = serde_json::from_slice(body).ok()?;
        match wire {
            Wire::AnthropicMessages => {
                let content = value.get("content")?;
                anthropic_message("assistant", content)
            }
            Wire::ChatCompletions => {
                let message = value.get("choices")?.get(0)?.get("message")?;
                chat_message(message)
            }
            Wire::Responses => merge_assistant(value.get("output")?.as_array()?),
        }
    }?;
    (!message.parts.is_empty()).then_some(message)
}

fn anthropic_messages(messages: &[Value]) -> Vec<Message> {
    messages
        .iter()
        .filter_map(|m| {
            let role = m.get("role")?.as_str()?;
            if role != "user" && role != "assistant" {
                return None;
            }
            anthropic_message(role, m.get("content")?)
        })
        .collect()
}

fn anthropic_message(role: &str, content: &Value) -> Option<Message> {
    let mut message = Message::new(role);
    match content {
        Value::String(s) => message.parts.push(text_part(PartKind::Text, s)),
        Value::Array(blocks) => {
            for block in blocks {
                message.parts.push(anthropic_block(block));
            }
        }
        _ => return None,
    }
    Some(message)
}

fn anthropic_block(block: &Value) -> Part {
    let kind = block.get("type").and_then(Value::as_str).unwrap_or("");
    match kind {
        "text" => text_part(PartKind::Text, str_of(block, "text")),
        "tool_use" | "server_tool_use" | "mcp_tool_use" => Part {
            kind: PartKind::ToolUse,
            text: tool_call_text(str_of(block, "name"), block.get("input")),
            call_id: None,
        },
        k if k == "tool_result" || k.ends_with("_tool_result") => result_part(
            block.get("content").map(content_text).unwrap_or_default(),
            block.get("tool_use_id"),
        ),
        _ => text_part(PartKind::Other, ""),
    }
}

/// Text of a string or of a list of blocks' `text` fields.
fn content_text(content: &Value) -> String {
    match content {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => {
            let texts: Vec<&str> = blocks
                .iter()
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            texts.join("\n")
        }
        _ => String::new(),
    }
}

fn str_of<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or("")
}

/// A tool call as text: its name and its input (JSON, or a string argument as it is).
fn tool_call_text(name: &str, input: Option<&Value>) -> String {
    let input = match input {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => String::new(),
        Some(v) => v.to_string(),
    };
    if input.is_empty() {
        name.to_owned()
    } else {
        format!("{name} {input}")
    }
}

fn chat_messages(messages: &[Value]) -> Vec<Message> {
    messages.iter().filter_map(chat_message).collect()
}

fn chat_message(m: &Value) -> Option<Message> {
    let role = m.get("role")?.as_str()?;
    let mut message = match role {
        "user" | "assistant" | "tool" => Message::new(role),
        _ => return None,
    };
    if let Some(content) = m.get("content").filter(|c| !c.is_null()) {
        let text = content_text(content);
        message.parts.push(if role == "tool" {
            result_part(text, m.get("tool_call_id"))
        } else {
            text_part(PartKind::Text, &text)
        });
    }
    for call in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let function = call.get("function");
        let name = function.map_or("", |f| str_of(f, "name"));
        message.parts.push(Part {
            kind: PartKind::ToolUse,
            text: tool_call_text(name, function.and_then(|f| f.get("arguments"))),
            call_id: None,
        });
    }
    Some(message)
}

/// Responses items (a request's `input`, or the items of a Codex session file) as messages:
/// a message item is a message; the model's items in a row (reasoning, text, tool calls) are
/// one assistant message; tool outputs in a row are one `tool` message.
pub fn responses_items(items: &[Value]) -> Vec<Message> {
    responses_items_indexed(items)
        .into_iter()
        .map(|(_, m)| m)
        .collect()
}

/// [`responses_items`], each message with the index of the item it starts at.
pub fn responses_items_indexed(items: &[Value]) -> Vec<(usize, Message)> {
    let mut messages: Vec<(usize, Message)> = Vec::new();
    for (at, item) in items.iter().enumerate() {
        let Some((role, part)) = responses_item(item) else {
            continue;
        };
        let merges = role != "user" && messages.last().is_some_and(|(_, m)| m.role == role);
        match messages.last_mut() {
            Some((_, last)) if merges => last.parts.extend(part),
            _ => {
                let mut message = Message::new(role);
                message.parts.extend(part);
                messages.push((at, message));
            }
        }
    }
    messages
}

/// The role an item belongs to and its parts (`None`: instructions or unknown).
fn responses_item(item: &Value) -> Option<(&'static str, Vec<Part>)> {
    let kind = item
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("message");
    match kind {
        "message" => {
            let role = match item.get("role")?.as_str()? {
                "user" => "user",
                "assistant" => "assistant",
                _ => return None,
            };
            let parts = match item.get("content")? {
                Value::String(s) => vec![text_part(PartKind::Text, s)],
                Value::Array(blocks) => blocks
                    .iter()
                    .map(|b| match b.get("type").and_then(Value::as_str) {
                        Some("input_text" | "output_text" | "text") => {
                            text_part(PartKind::Text, str_of(b, "text"))
                        }
                        _ => text_part(PartKind::Other, ""),
                    })
                    .collect(),
                _ => return None,
            };
            Some((role, parts))
        }
        "function_call" | "custom_tool_call" | "local_shell_call" | "tool_search_call"
        | "web_search_call" => {
            let input = item.get("arguments").or_else(|| item.get("input"));
            let part = Part {
                kind: PartKind::ToolUse,
                text: tool_call_text(str_of(item, "name"), input),
                call_id: None,
            };
            Some(("assistant", vec![part]))
        }
        "reasoning" => Some(("assistant", vec![text_part(PartKind::Other, "")])),
        k if k.ends_with("_output") => {
            let text = item.get("output").map(content_text).unwrap_or_default();
            Some(("tool", vec![result_part(text, item.get("call_id"))]))
        }
        _ => None,
    }
}

/// The model's output items as one assistant message.
fn merge_assistant(items: &[Value]) -> Option<Message> {
    let mut message = Message::new("assistant");
    for item in items {
        if let Some(("assistant", parts)) = responses_item(item) {
            message.parts.extend(parts);
        }
    }
    Some(message)
}

/// Tool calls a streamed Chat Completions reply may make that history keeps (an index from
/// the network sizes a vector).
const MAX_CALLS: usize = 128;

/// A streamed reply put back together, one event's data at a time.
struct ReplyStream {
    wire: Wire,
    message: Message,
    /// Anthropic: each block so far (kind, tool name, text or partial JSON so far).
    blocks: Vec<(PartKind, String, String)>,
    /// Chat Completions: tool calls by index (name, arguments so far).
    calls: Vec<(String, String)>,
    /// Responses: the whole output from `response.completed`.
    completed: Option<Message>,
    /// Responses: each `response.output_item.done` item, by output index, for an answer that
    /// completes with `output: []` (the ChatGPT backend's).
    done: Vec<(u64, Value)>,
}

impl ReplyStream {
    fn new(wire: Wire) -> ReplyStream {
        ReplyStream {
            wire,
            message: Message::new("assistant"),
            blocks: Vec::new(),
            calls: Vec::new(),
            completed: None,
            done: Vec::new(),
        }
    }

    fn event(&mut self, data: &str) {
        let Ok(value) = serde_json::from_str::<Value>(data) else {
            return;
        };
        match self.wire {
            Wire::AnthropicMessages => self.anthropic(&value),
            Wire::ChatCompletions => self.chat(&value),
            Wire::Responses => match str_of(&value, "type") {
                "response.output_item.done" if self.done.len() < MAX_CALLS => {
                    if let Some(item) = value.get("item") {
                        let index = value.get("output_index").and_then(Value::as_u64);
                        self.done.push((index.unwrap_or(0), item.clone()));
                    }
                }
                "response.completed" => {
                    let output = value
                        .get("response")
                        .and_then(|r| r.get("output"))
                        .and_then(Value::as_array)
                        .filter(|o| !o.is_empty());
                    self.completed = match output {
                        Some(output) => merge_assistant(output),
                        None => {
                            self.done.sort_by_key(|(index, _)| *index);
                            let items: Vec<Value> =
                                self.done.drain(..).map(|(_, item)| item).collect();
                            merge_assistant(&items)
                        }
                    };
                }
                _ => {}
            },
        }
    }

    fn anthropic(&mut self, value: &Value) {
        match str_of(value, "type") {
            "content_block_start" => {
                let block = value.get("content_block").unwrap_or(&Value::Null);
                let part = anthropic_block(block);
                let name = str_of(block, "name").to_owned();
                let text = match part.kind {
                    PartKind::ToolUse => String::new(),
                    _ => part.text,
                };
                self.blocks.push((part.kind, name, text));
            }
            "content_block_delta" => {
                let Some(delta) = value.get("delta") else {
                    return;
                };
                if let Some(last) = self.blocks.last_mut() {
                    let more = match str_of(delta, "type") {
                        "text_delta" => str_of(delta, "text"),
                        "input_json_delta" => str_of(delta, "partial_json"),
                        _ => "",
                    };
                    last.2.push_str(more);
                }
            }
            _ => {}
        }
    }

    fn chat(&mut self, value: &Value) {
        let Some(delta) = value
            .get("choices")
            .and_then(|c| c.get(0))
            .and_then(|c| c.get("delta"))
        else {
            return;
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            match self.message.parts.first_mut() {
                Some(p) if p.kind == PartKind::Text => p.text.push_str(text),
                _ => self
                    .message
                    .parts
                    .insert(0, text_part(PartKind::Text, text)),
            }
        }
        for call in delta
            .get("tool_calls")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let index = call
                .get("index")
                .and_then(Value::as_u64)
                .and_then(|i| usize::try_from(i).ok())
                .unwrap_or(0);
            if index >= MAX_CALLS {
                continue;
            }
            if index >= self.calls.len() {
                self.calls.resize(index + 1, (String::new(), String::new()));
            }
            let slot = &mut self.calls[index];
            if let Some(f) = call.get("function") {
                slot.0.push_str(str_of(f, "name"));
                slot.1.push_str(str_of(f, "arguments"));
            }
        }
    }

    fn finish(mut self) -> Option<Message> {
        match self.wire {
            Wire::Responses => self.completed,
            Wire::AnthropicMessages => {
                for (kind, name, text) in self.blocks {
                    let text = match kind {
                        PartKind::ToolUse => {
                            let input = serde_json::from_str::<Value>(&text).ok();
                            tool_call_text(&name, input.as_ref())
                        }
                        _ => text,
                    };
                    self.message.parts.push(Part {
                        kind,
                        text,
                        call_id: None,
                    });
                }
                Some(self.message)
            }
            Wire::ChatCompletions => {
                for (name, arguments) in self.calls {
                    self.message.parts.push(Part {
                        kind: PartKind::ToolUse,
                        text: tool_call_text(&name, Some(&Value::String(arguments))),
                        call_id: None,
                    });
                }
                Some(self.message)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parsing only the messages member gives what a parse of the whole body gives, on every
    /// real capture of the three clients, and a repeated key is read as a full parse reads it
    /// (the last one wins).
    #[test]
    fn the_messages_alone_read_as_the_whole_body_does() {
        let whole = |wire: Wire, body: &[u8]| -> Option<Vec<Message>> {
            let value: Value = serde_json::from_slice(body).ok()?;
            let key = if wire == Wire::Responses {
                "input"
            } else {
                "messages"
            };
            messages_of(wire, value.get(key)?)
        };
        let mut compared = 0;
        for capture in pith_testkit::fixtures::captures().unwrap() {
            let path = capture
                .path
                .split('?')
                .next()
                .unwrap_or_default()
                .to_owned();
            let Some(wire) = Wire::from_path(&path) else {
                continue;
            };
            let got = request_messages(wire, &capture.body);
            assert_eq!(got, whole(wire, &capture.body), "{}", capture.id());
            compared += usize::from(got.is_some_and(|m| !m.is_empty()));
        }
        assert!(compared >= 10, "only {compared} captures had messages");
        let twice = br#"{"messages":[{"role":"user","content":"first"}],"tools":[],
            "messages":[{"role":"user","content":"second"}]}"#;
        let read = request_messages(Wire::AnthropicMessages, twice).unwrap();
        assert_eq!(read[0].parts[0].text, "second");
    }

    #[test]
    fn a_streamed_anthropic_reply_is_the_json_reply() {
        let sse = concat!(
            "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"content\":[]}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Let me \"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"look.\"}}\n\n",
            "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\",\"id\":\"t\",\"name\":\"Bash\",\"input\":{}}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"{\\\"command\\\":\"}}\n\n",
            "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":\"\\\"ls\\\"}\"}}\n\n",
        );
        let json = br#"{"content":[{"type":"text","text":"Let me look."},{"type":"tool_use","id":"t","name":"Bash","input":{"command":"ls"}}]}"#;
        let streamed = reply_message(Wire::AnthropicMessages, sse.as_bytes(), true);
        let whole = reply_message(Wire::AnthropicMessages, json, false);
        assert_eq!(streamed, whole);
        let whole = whole.unwrap();
        assert_eq!(whole.parts[1].text, r#"Bash {"command":"ls"}"#);
    }

    #[test]
    fn a_streamed_responses_reply_completed_with_no_output_is_read_from_its_done_items() {
        let item = r#"{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Hi."}]}"#;
        let listed = format!(
            "data: {{\"type\":\"response.completed\",\"response\":{{\"output\":[{item}]}}}}\n\n"
        );
        let empty = format!(
            "data: {{\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{item}}}\n\n\
             data: {{\"type\":\"response.completed\",\"response\":{{\"output\":[]}}}}\n\n"
        );
        let listed = reply_message(Wire::Responses, listed.as_bytes(), true).unwrap();
        assert_eq!(listed.parts[0].text, "Hi.");
        assert_eq!(
            reply_message(Wire::Responses, empty.as_bytes(), true),
            Some(listed)
        );
    }

    #[test]
    fn responses_items_group_the_models_items_and_leave_instructions_out() {
        let items: Vec<Value> = serde_json::from_str(
            r#"[{"type":"message","role":"developer","content":[{"type":"input_text","text":"rules"}]},
                {"type":"message","role":"user","content":[{"type":"input_text","text":"fix it"}]},
                {"type":"reasoning","summary":[]},
                {"type":"function_call","name":"exec","arguments":"{\"cmd\":\"ls\"}","call_id":"c"},
                {"type":"function_call_output","call_id":"c","output":"a.py"},
                {"type":"message","role":"assistant","content":[{"type":"output_text","text":"done"}]}]"#,
        )
        .unwrap();
        let roles: Vec<String> = responses_items(&items)
            .into_iter()
            .map(|m| m.role)
            .collect();
        assert_eq!(roles, ["user", "assistant", "tool", "assistant"]);
    }
}
