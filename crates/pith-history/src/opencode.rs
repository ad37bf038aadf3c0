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
use std::time::Duration;

use pith_clients::Client;
use pith_sqlite_guard::{Schema, distrust};
use pith_wire::Wire;
use pith_wire::conversation;
use rusqlite::{Connection, OpenFlags, Statement, params};
use serde_json::{Value, json};

use crate::NewMessage;
use crate::import::Imported;

/// Why OpenCode's database could not be read.
#[derive(Debug, thiserror::Error)]
pub enum OpencodeError {
    /// SQLite could not open or read it (a statement past its time says "interrupted").
    #[error("cannot read OpenCode's session database {path}")]
    Read {
        /// The database.
        path: String,
        /// SQLite's error.
        source: rusqlite::Error,
    },
    /// It is not the database OpenCode writes (a table is a view, or missing).
    #[error(transparent)]
    Unexpected(#[from] pith_sqlite_guard::Unexpected),
}

/// The tables read, each required to be a table: a recursive view named `session` once made
/// an import run forever and fill the disk with its sort.
const TABLES: &[(&str, &str)] = &[
    ("table", "session"),
    ("table", "message"),
    ("table", "part"),
];
/// The longest one statement may run: a real database of thousands of sessions reads each
/// session's messages in milliseconds.
const STATEMENT_LIMIT: Duration = Duration::from_secs(10);
/// A part (or a message's own data) larger than this is left out, unread: the history keeps
/// at most 16 KiB of a message, and a 200 MB part cost its whole size in memory several times.
pub const MAX_PART_BYTES: i64 = 8 << 20;
/// What one session may read in all; the parts past it are left out (a session is imported
/// and let go before the next is read, so this bounds the import's memory).
pub const MAX_SESSION_BYTES: i64 = 64 << 20;

/// What [`read`] read, beside the sessions it handed over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadSummary {
    /// Sessions handed to the caller.
    pub sessions: usize,
    /// Parts and messages left out unread: over [`MAX_PART_BYTES`], or past their session's
    /// [`MAX_SESSION_BYTES`].
    pub left_out: usize,
}

/// Every session in the database at `path`, oldest first, each handed to `each` as soon as it
/// is read (one session in memory at a time); `each` returns false to stop.
pub fn read(
    path: &Path,
    mut each: impl FnMut(Imported) -> bool,
) -> Result<ReadSummary, OpencodeError> {
    let error = |source| OpencodeError::Read {
        path: path.display().to_string(),
        source,
    };
    let mut db = Connection::open_with_flags(
        path,
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .map_err(error)?;
    let deadline = distrust(&mut db, path, Schema::AtLeast(TABLES), STATEMENT_LIMIT)?;
    let sessions: Vec<(String, i64)> = db
        .prepare("SELECT id, time_created FROM session ORDER BY time_created, id")
        .and_then(|mut s| {
            s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()
        })
        .map_err(error)?;
    // Each value's size is read from its record header (`octet_length`) before the value: one
    // too large is never loaded.
    // Of a message only its role is read (its text is in its parts).
    let mut messages = db
        .prepare(
            "SELECT id, time_created, octet_length(data) > ?2,
                    CASE WHEN octet_length(data) > ?2 THEN NULL
                         WHEN json_valid(data) THEN json_extract(data, '$.role') END
             FROM message WHERE session_id = ?1
             ORDER BY time_created, id",
        )
        .map_err(error)?;
    let mut parts = db
        .prepare(
            "SELECT octet_length(data), CASE WHEN octet_length(data) <= ?2 THEN data END
             FROM part WHERE message_id = ?1 ORDER BY id",
        )
        .map_err(error)?;
    let mut summary = ReadSummary::default();
    for (session_id, started_ms) in sessions {
        deadline.arm();
        let wire =
            read_session(&mut messages, &mut parts, &session_id, &mut summary).map_err(error)?;
        summary.sessions += 1;
        let go_on = each(Imported {
            session_id,
            client: Client::Opencode.name(),
            started_ms,
            messages: read_wire(&wire),
        });
        if !go_on {
            break;
        }
    }
    Ok(summary)
}

/// One session's messages as sent, each at its time; a message or part over
/// [`MAX_PART_BYTES`], or past the session's [`MAX_SESSION_BYTES`], is left out (counted in
/// `summary`).
fn read_session(
    messages: &mut Statement<'_>,
    parts: &mut Statement<'_>,
    session_id: &str,
    summary: &mut ReadSummary,
) -> rusqlite::Result<Vec<(Value, i64)>> {
    // Read as they come, not collected: a session's messages are many.
    let rows = messages.query_map(params![session_id, MAX_PART_BYTES], |r| {
        Ok((
            r.get::<_, String>(0)?,
            r.get::<_, i64>(1)?,
            r.get::<_, bool>(2)?,
            r.get::<_, Option<String>>(3)?,
        ))
    })?;
    let mut budget = MAX_SESSION_BYTES;
    let mut wire = Vec::new();
    for row in rows {
        let (id, ts, too_large, role) = row?;
        if too_large {
            summary.left_out += 1;
            continue;
        }
        let role = role.unwrap_or_default();
        let kept = read_parts(parts, &id, &mut budget, summary)?;
        for message in as_sent(&role, &kept) {
            wire.push((message, ts));
        }
    }
    Ok(wire)
}

/// Message `id`'s parts, parsed, each no larger than [`MAX_PART_BYTES`] nor than what is left
/// of the session's `budget` (which each part kept uses up); the rest are left out unread.
fn read_parts(
    parts: &mut Statement<'_>,
    id: &str,
    budget: &mut i64,
    summary: &mut ReadSummary,
) -> rusqlite::Result<Vec<Value>> {
    let read: Vec<(i64, Option<String>)> = parts
        .query_map(params![id, MAX_PART_BYTES.min(*budget)], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .and_then(|rows| rows.collect())?;
    let mut kept = Vec::with_capacity(read.len());
    for (size, part) in read {
        match part.filter(|_| size <= *budget) {
            Some(part) => {
                *budget -= size;
                kept.extend(serde_json::from_str::<Value>(&part).ok());
            }
            None => summary.left_out += 1,
        }
    }
    Ok(kept)
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
