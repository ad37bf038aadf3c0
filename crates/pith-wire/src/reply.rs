//! A complete assistant text reply that pith gives itself, in each wire's own shape: Anthropic
//! Messages JSON or its SSE event sequence, Chat Completions JSON or its chunk stream ending in
//! `[DONE]`, Responses JSON or its full event sequence through `response.completed`. Usage is
//! zero: no model ran. The official SDKs parse these like a provider's.

use serde_json::{Value, json};

use crate::Wire;

/// How the id of every Responses answer pith gives itself begins (`resp_pith_<id>`): an id no
/// provider holds, which a client may chain its next request to.
pub const LOCAL_RESPONSE_ID_PREFIX: &str = "resp_pith_";

/// What the reply says and how the client asked for it.
#[derive(Debug, Clone)]
pub struct LocalReply<'a> {
    /// The assistant's text.
    pub text: &'a str,
    /// The model the client asked for, echoed.
    pub model: &'a str,
    /// Whether the client asked for a stream.
    pub stream: bool,
    /// Chat Completions: `stream_options.include_usage` (a final usage chunk).
    pub include_usage: bool,
    /// A short id unique enough for the client's bookkeeping (e.g. a hash of the request).
    pub id: &'a str,
    /// Unix seconds, for the `created` fields.
    pub created: u64,
}

/// A rendered reply: its content type and body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    /// `application/json` or `text/event-stream`.
    pub content_type: &'static str,
    /// The body bytes.
    pub body: Vec<u8>,
}

/// Render `reply` for `wire`.
pub fn render(wire: Wire, reply: &LocalReply<'_>) -> Rendered {
    let (content_type, body) = match (wire, reply.stream) {
        (Wire::AnthropicMessages, false) => (JSON, anthropic_message(reply).to_string()),
        (Wire::AnthropicMessages, true) => (SSE, anthropic_stream(reply)),
        (Wire::ChatCompletions, false) => (JSON, chat_completion(reply).to_string()),
        (Wire::ChatCompletions, true) => (SSE, chat_stream(reply)),
        (Wire::Responses, false) => (JSON, response(reply, "completed").to_string()),
        (Wire::Responses, true) => (SSE, responses_stream(reply)),
    };
    Rendered {
        content_type,
        body: body.into_bytes(),
    }
}

const JSON: &str = "application/json";
const SSE: &str = "text/event-stream";

fn event(out: &mut String, name: Option<&str>, data: &Value) {
    if let Some(name) = name {
        out.push_str("event: ");
        out.push_str(name);
        out.push('\n');
    }
    out.push_str("data: ");
    out.push_str(&data.to_string());
    out.push_str("\n\n");
}

fn anthropic_message(r: &LocalReply<'_>) -> Value {
    json!({
        "id": format!("msg_pith_{}", r.id),
        "type": "message",
        "role": "assistant",
        "model": r.model,
        "content": [{"type": "text", "text": r.text}],
        "stop_reason": "end_turn",
        "stop_sequence": null,
        "usage": {"input_tokens": 0, "output_tokens": 0},
    })
}

fn anthropic_stream(r: &LocalReply<'_>) -> String {
    let mut out = String::new();
    let mut start = anthropic_message(r);
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    event(
        &mut out,
        Some("message_start"),
        &json!({"type": "message_start", "message": start}),
    );
    event(
        &mut out,
        Some("content_block_start"),
        &json!({"type": "content_block_start", "index": 0,
                "content_block": {"type": "text", "text": ""}}),
    );
    event(
        &mut out,
        Some("content_block_delta"),
        &json!({"type": "content_block_delta", "index": 0,
                "delta": {"type": "text_delta", "text": r.text}}),
    );
    event(
        &mut out,
        Some("content_block_stop"),
        &json!({"type": "content_block_stop", "index": 0}),
    );
    event(
        &mut out,
        Some("message_delta"),
        &json!({"type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": null},
                "usage": {"output_tokens": 0}}),
    );
    event(
        &mut out,
        Some("message_stop"),
        &json!({"type": "message_stop"}),
    );
    out
}

fn chat_usage() -> Value {
    json!({"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0})
}

fn chat_completion(r: &LocalReply<'_>) -> Value {
    json!({
        "id": format!("chatcmpl-pith-{}", r.id),
        "object": "chat.completion",
        "created": r.created,
        "model": r.model,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": r.text, "refusal": null},
            "logprobs": null,
            "finish_reason": "stop",
        }],
        "usage": chat_usage(),
    })
}

fn chat_stream(r: &LocalReply<'_>) -> String {
    let chunk = |choices: Value| {
        json!({
            "id": format!("chatcmpl-pith-{}", r.id),
            "object": "chat.completion.chunk",
            "created": r.created,
            "model": r.model,
            "choices": choices,
        })
    };
    let mut out = String::new();
    event(
        &mut out,
        None,
        &chunk(
            json!([{"index": 0, "delta": {"role": "assistant", "content": ""},
                       "logprobs": null, "finish_reason": null}]),
        ),
    );
    event(
        &mut out,
        None,
        &chunk(json!([{"index": 0, "delta": {"content": r.text},
                       "logprobs": null, "finish_reason": null}])),
    );
    event(
        &mut out,
        None,
        &chunk(json!([{"index": 0, "delta": {}, "logprobs": null, "finish_reason": "stop"}])),
    );
    if r.include_usage {
        let mut last = chunk(json!([]));
        last["usage"] = chat_usage();
        event(&mut out, None, &last);
    }
    out.push_str("data: [DONE]\n\n");
    out
}

fn message_item(r: &LocalReply<'_>, status: &str, text: Option<&str>) -> Value {
    let content = match text {
        Some(text) => json!([{"type": "output_text", "text": text, "annotations": []}]),
        None => json!([]),
    };
    json!({
        "type": "message",
        "id": format!("msg_pith_{}", r.id),
        "status": status,
        "role": "assistant",
        "content": content,
    })
}

fn response(r: &LocalReply<'_>, status: &str) -> Value {
    let done = status == "completed";
    let output = if done {
        json!([message_item(r, "completed", Some(r.text))])
    } else {
        json!([])
    };
    json!({
        "id": format!("{LOCAL_RESPONSE_ID_PREFIX}{}", r.id),
        "object": "response",
        "created_at": r.created,
        "status": status,
        "error": null,
        "incomplete_details": null,
        "instructions": null,
        "model": r.model,
        "output": output,
        "parallel_tool_calls": true,
        "tool_choice": "auto",
        "tools": [],
        "usage": if done {
            json!({"input_tokens": 0, "input_tokens_details": {"cached_tokens": 0},
                   "output_tokens": 0, "output_tokens_details": {"reasoning_tokens": 0},
                   "total_tokens": 0})
        } else {
            Value::Null
        },
    })
}

fn responses_stream(r: &LocalReply<'_>) -> String {
    let mut out = String::new();
    for data in responses_event_values(r) {
        let name = data["type"].as_str().unwrap_or_default().to_owned();
        event(&mut out, Some(&name), &data);
    }
    out
}

/// The Responses stream's events for `reply`, one JSON text each: what a WebSocket carries,
/// one per frame (the stream's `data:` lines, in order).
pub fn responses_events(reply: &LocalReply<'_>) -> Vec<String> {
    responses_event_values(reply)
        .into_iter()
        .map(|data| data.to_string())
        .collect()
}

fn responses_event_values(r: &LocalReply<'_>) -> Vec<Value> {
    let item_id = format!("msg_pith_{}", r.id);
    let part = |text: &str| json!({"type": "output_text", "text": text, "annotations": []});
    let events = [
        json!({"type": "response.created", "response": response(r, "in_progress")}),
        json!({"type": "response.in_progress", "response": response(r, "in_progress")}),
        json!({"type": "response.output_item.added", "output_index": 0,
               "item": message_item(r, "in_progress", None)}),
        json!({"type": "response.content_part.added", "item_id": item_id, "output_index": 0,
               "content_index": 0, "part": part("")}),
        json!({"type": "response.output_text.delta", "item_id": item_id, "output_index": 0,
               "content_index": 0, "delta": r.text, "logprobs": []}),
        json!({"type": "response.output_text.done", "item_id": item_id, "output_index": 0,
               "content_index": 0, "text": r.text, "logprobs": []}),
        json!({"type": "response.content_part.done", "item_id": item_id, "output_index": 0,
               "content_index": 0, "part": part(r.text)}),
        json!({"type": "response.output_item.done", "output_index": 0,
               "item": message_item(r, "completed", Some(r.text))}),
        json!({"type": "response.completed", "response": response(r, "completed")}),
    ];
    events
        .into_iter()
        .enumerate()
        .map(|(sequence, mut data)| {
            data["sequence_number"] = json!(sequence);
            data
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sse::{SseDecoder, decode_all};
    use crate::usage;

    fn reply(stream: bool) -> LocalReply<'static> {
        LocalReply {
            text: "@pith pinned 1: be \"concise\"\n",
            model: "m",
            stream,
            include_usage: true,
            id: "abc",
            created: 1,
        }
    }

    #[test]
    fn json_replies_carry_the_text_and_zero_usage() {
        for wire in [
            Wire::AnthropicMessages,
            Wire::ChatCompletions,
            Wire::Responses,
        ] {
            let r = render(wire, &reply(false));
            assert_eq!(r.content_type, "application/json");
            let v: Value = serde_json::from_slice(&r.body).unwrap();
            let text = match wire {
                Wire::AnthropicMessages => &v["content"][0]["text"],
                Wire::ChatCompletions => &v["choices"][0]["message"]["content"],
                Wire::Responses => &v["output"][0]["content"][0]["text"],
            };
            assert_eq!(text, "@pith pinned 1: be \"concise\"\n", "{wire}");
            let u = usage::from_json(wire, &r.body).usage.unwrap();
            assert_eq!(u.total(), 0, "{wire}");
            assert_eq!(usage::from_json(wire, &r.body).model.as_deref(), Some("m"));
        }
    }

    #[test]
    fn streams_are_whole_event_sequences_with_zero_usage() {
        for wire in [
            Wire::AnthropicMessages,
            Wire::ChatCompletions,
            Wire::Responses,
        ] {
            let r = render(wire, &reply(true));
            assert_eq!(r.content_type, "text/event-stream");
            assert!(
                r.body.ends_with(b"\n\n"),
                "{wire}: the last event is not closed"
            );
            let mut decoder = SseDecoder::new();
            decoder.feed(&r.body, |_| {});
            assert_eq!(decoder.finish(), None, "{wire}: a partial event is left");
            let events = decode_all(&r.body);
            let last = events.last().unwrap();
            match wire {
                Wire::AnthropicMessages => assert_eq!(last.event, "message_stop"),
                Wire::ChatCompletions => assert_eq!(last.data, "[DONE]"),
                Wire::Responses => assert_eq!(last.event, "response.completed"),
            }
            let facts = usage::from_sse(wire, &r.body);
            assert_eq!(facts.usage.map(|u| u.total()), Some(0), "{wire}");
            assert_eq!(facts.stream_error, None, "{wire}");
        }
    }
}
