//! OpenCode's sessions read into conversations, from its SQLite database
//! (`pith_clients::opencode::database`), opened read-only.
//!
//! Each OpenCode message becomes the message its Anthropic Messages requests carry, so an
//! import has the shape the proxy records: a user message's text parts (the ones OpenCode
//! made itself, `synthetic`, are sent to the model too); an assistant message (one per step)
//! with its text, reasoning and tool calls; then, for a step that called tools, the user
//! message of their results. Markers (step start and finish, snapshots, patches, files) carry
//! no text the model sees. The session's title is a column, not a message: its side call is
//! in no conversation.

use std::path::Path;

use pith_clients::Client;
use pith_wire::Wire;
use pith_wire::conversation;
use rusqlite::{Connection, OpenFlags};
use serde_json::{Value, json};

use crate::NewMessage;
use crate::import::Imported;

/// Why OpenCode's database could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read OpenCode's session database {path}")]
pub struct OpencodeError {
    path: String,
    #[source]
    source: rusqlite::Error,
}

/// Every session in the database at `path`, oldest first.
pub fn read(path: &Path) -> Result<Vec<Imported>, OpencodeError> {
    let error = |source| OpencodeError {
        path: path.display().to_string(),
        source,
    };
    let db = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(error)?;
    let sessions: Vec<(String, i64)> = db
        .prepare("SELECT id, time_created FROM session ORDER BY time_created, id")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()
        })
        .map_err(error)?;
    let mut messages = db
        .prepare(
            "SELECT id, time_created, data FROM message WHERE session_id = ?1
             ORDER BY time_created, id",
        )
        .map_err(error)?;
    let mut parts = db
        .prepare("SELECT data FROM part WHERE message_id = ?1 ORDER BY id")
        .map_err(error)?;
    let mut out = Vec::with_capacity(sessions.len());
    for (session_id, started_ms) in sessions {
        let rows: Vec<(String, i64, String)> = messages
            .query_map([&session_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
            .and_then(|rows| rows.collect())
            .map_err(error)?;
        let mut wire = Vec::new();
        for (id, ts, data) in rows {
            let parts: Vec<Value> = parts
                .query_map([&id], |r| r.get::<_, String>(0))
                .and_then(|rows| rows.collect::<Result<Vec<_>, _>>())
                .map_err(error)?
                .iter()
                .filter_map(|p| serde_json::from_str(p).ok())
                .collect();
            let role = serde_json::from_str::<Value>(&data)
                .ok()
                .and_then(|d| d["role"].as_str().map(str::to_owned))
                .unwrap_or_default();
            for message in as_sent(&role, &parts) {
                wire.push((message, ts));
            }
        }
        out.push(Imported {
            session_id,
            client: Client::Opencode.name(),
            started_ms,
            messages: read_wire(&wire),
        });
    }
    Ok(out)
}

/// An OpenCode message as its Anthropic requests send it: one message, and for an assistant
/// step that called tools, the user message of their results after it.
fn as_sent(role: &str, parts: &[Value]) -> Vec<Value> {
    match role {
        "user" => {
            let content: Vec<Value> = parts
                .iter()
                .filter(|p| p["type"] == "text" && p["ignored"] != true)
                .map(|p| json!({"type": "text", "text": p["text"]}))
                .collect();
            if content.is_empty() {
                return Vec::new();
            }
            vec![json!({"role": "user", "content": content})]
        }
        "assistant" => {
            let mut content = Vec::new();
            let mut results = Vec::new();
            for part in parts {
                match part["type"].as_str() {
                    Some("text") => content.push(json!({"type": "text", "text": part["text"]})),
                    Some("reasoning") => {
                        content.push(json!({"type": "thinking", "thinking": part["text"]}));
                    }
                    Some("tool") => {
                        let state = &part["state"];
                        content.push(json!({"type": "tool_use", "id": part["callID"],
                                            "name": part["tool"], "input": state["input"]}));
                        let output = match state["status"].as_str() {
                            Some("completed") => &state["output"],
                            Some("error") => &state["error"],
                            _ => continue,
                        };
                        results.push(json!({"type": "tool_result", "tool_use_id": part["callID"],
                                            "content": output.as_str().unwrap_or_default()}));
                    }
                    _ => {}
                }
            }
            let mut out = Vec::new();
            if !content.is_empty() {
                out.push(json!({"role": "assistant", "content": content}));
            }
            if !results.is_empty() {
                out.push(json!({"role": "user", "content": results}));
            }
            out
        }
        _ => Vec::new(),
    }
}

/// The messages read as the proxy reads a request's, each at its OpenCode message's time.
fn read_wire(wire: &[(Value, i64)]) -> Vec<NewMessage> {
    let mut out = Vec::with_capacity(wire.len());
    for (message, ts) in wire {
        let one = json!({ "messages": [message] });
        if let Some(read) =
            conversation::request_messages(Wire::AnthropicMessages, one.to_string().as_bytes())
                .and_then(|mut m| m.pop())
        {
            out.push(NewMessage::from_wire(&read, *ts));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_step_is_its_call_then_its_result_as_the_requests_send_them() {
        let parts: Vec<Value> = serde_json::from_str(
            r#"[{"type":"step-start","snapshot":"s"},
                {"type":"text","text":"Let me look."},
                {"type":"tool","tool":"bash","callID":"toolu_1","state":{"status":"completed",
                 "input":{"command":"ls"},"output":"calc.py\n"}},
                {"type":"step-finish","reason":"tool-calls"}]"#,
        )
        .unwrap();
        let sent = as_sent("assistant", &parts);
        assert_eq!(sent.len(), 2);
        assert_eq!(sent[0]["content"][1]["type"], "tool_use");
        assert_eq!(sent[1]["role"], "user");
        assert_eq!(sent[1]["content"][0]["content"], "calc.py\n");
        let user: Vec<Value> = serde_json::from_str(
            r#"[{"type":"text","synthetic":true,"text":"Called the Read tool"},
                {"type":"file","mime":"text/plain","url":"file:///x"},
                {"type":"text","text":"fix it"}]"#,
        )
        .unwrap();
        let sent = as_sent("user", &user);
        assert_eq!(sent[0]["content"].as_array().map(Vec::len), Some(2));
        let read = read_wire(&[(sent[0].clone(), 1)]);
        assert!(read[0].real_user, "{read:?}");
    }
}
