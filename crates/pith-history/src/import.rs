//! Session files of real clients read into conversations: Claude Code's
//! (`~/.claude/projects/<project>/<session>.jsonl`: one JSON entry a line, a user or assistant
//! entry per message block, the assistant's blocks of one API message sharing `message.id`)
//! and Codex's (`$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl`: a `session_meta` line,
//! then `response_item` lines holding the same Responses items its requests carry).
//! A file with no messages is still a conversation (with none).

use std::path::{Path, PathBuf};

use pith_wire::conversation::{self, Message};
use serde_json::Value;

use pith_clients::Client;

use crate::NewMessage;

/// One session file read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Imported {
    /// The client's session id (the file's own, else its name).
    pub session_id: String,
    /// The client that wrote it.
    pub client: &'static str,
    /// When it started (ms since the epoch): its first timestamp, else 0.
    pub started_ms: i64,
    /// Its messages, in order.
    pub messages: Vec<NewMessage>,
}

/// Why a session file could not be read.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the session file {path}")]
pub struct ImportError {
    path: String,
    #[source]
    source: std::io::Error,
}

/// Every session file in the clients' session directories ([`Client::session_files_dir`]:
/// Claude Code's `projects/*/*.jsonl`, Codex's `sessions/**/*.jsonl`), each with its client,
/// sorted by path within each client.
pub fn session_files(dirs: &[(Client, PathBuf)]) -> Vec<(Client, PathBuf)> {
    let mut files = Vec::new();
    for (client, dir) in dirs {
        match client {
            Client::ClaudeCode => {
                for project in read_dir_sorted(dir) {
                    if project.is_dir() {
                        for file in read_dir_sorted(&project) {
                            if is_jsonl(&file) {
                                files.push((*client, file));
                            }
                        }
                    }
                }
            }
            Client::Codex => {
                let mut stack = vec![dir.clone()];
                let mut found = Vec::new();
                while let Some(dir) = stack.pop() {
                    for entry in read_dir_sorted(&dir) {
                        if entry.is_dir() {
                            stack.push(entry);
                        } else if is_jsonl(&entry) {
                            found.push(entry);
                        }
                    }
                }
                found.sort();
                files.extend(found.into_iter().map(|f| (*client, f)));
            }
            // OpenCode keeps its sessions in a database, not files pith reads.
            Client::Opencode => {}
        }
    }
    files
}

fn is_jsonl(path: &Path) -> bool {
    path.is_file() && path.extension().is_some_and(|e| e == "jsonl")
}

fn read_dir_sorted(dir: &Path) -> Vec<PathBuf> {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    entries.sort();
    entries
}

/// Read one session file.
pub fn read(source: Client, path: &Path) -> Result<Imported, ImportError> {
    let text = std::fs::read_to_string(path).map_err(|source| ImportError {
        path: path.display().to_string(),
        source,
    })?;
    let fallback_id = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let lines: Vec<Value> = text
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    Ok(match source {
        Client::Codex => codex(&lines, fallback_id),
        // Claude Code's shape (OpenCode has no session files to read).
        Client::ClaudeCode | Client::Opencode => claude_code(&lines, fallback_id),
    })
}

fn timestamp_ms(entry: &Value) -> Option<i64> {
    let ts = entry.get("timestamp")?.as_str()?;
    parse_rfc3339_ms(ts)
}

/// `2026-11-30T02:48:20.508Z` (or with an offset) as ms since the epoch.
pub fn parse_rfc3339_ms(ts: &str) -> Option<i64> {
    let (date, rest) = ts.split_once('T')?;
    let mut d = date.split('-');
    let year: i64 = d.next()?.parse().ok()?;
    let month: i64 = d.next()?.parse().ok()?;
    let day: i64 = d.next()?.parse().ok()?;
    let (time, offset_s) = match rest.find(['Z', '+', '-']) {
        Some(at) => {
            let zone = &rest[at..];
            let offset = if zone == "Z" {
                0
            } else {
                let sign = if zone.starts_with('-') { -1 } else { 1 };
                let (h, m) = zone[1..].split_once(':').unwrap_or((&zone[1..], "0"));
                sign * (h.parse::<i64>().ok()? * 3600 + m.parse::<i64>().ok()? * 60)
            };
            (&rest[..at], offset)
        }
        None => (rest, 0),
    };
    let mut t = time.split(':');
    let hour: i64 = t.next()?.parse().ok()?;
    let minute: i64 = t.next()?.parse().ok()?;
    let seconds: f64 = t.next().unwrap_or("0").parse().ok()?;
    // Days from civil (Howard Hinnant's algorithm).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    let secs = days * 86_400 + hour * 3600 + minute * 60 - offset_s;
    #[expect(
        clippy::cast_possible_truncation,
        reason = "milliseconds of a second fit an i64"
    )]
    let millis = (seconds * 1000.0).round() as i64;
    Some(secs * 1000 + millis)
}

fn claude_code(lines: &[Value], fallback_id: String) -> Imported {
    let mut session_id = None;
    let mut started_ms = None;
    // (message, its API message id, time)
    let mut messages: Vec<(Message, Option<String>, i64)> = Vec::new();
    for entry in lines {
        if session_id.is_none() {
            session_id = entry
                .get("sessionId")
                .and_then(Value::as_str)
                .map(str::to_owned);
        }
        let ts = timestamp_ms(entry);
        if started_ms.is_none() {
            started_ms = ts;
        }
        let kind = entry.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "user" && kind != "assistant" {
            continue;
        }
        // Sidechains are a subagent's own conversation; meta entries are the harness's.
        if entry.get("isSidechain").and_then(Value::as_bool) == Some(true)
            || entry.get("isMeta").and_then(Value::as_bool) == Some(true)
        {
            continue;
        }
        let Some(body) = entry.get("message") else {
            continue;
        };
        let one = serde_json::json!({"messages": [body]});
        let Some(message) = conversation::request_messages(
            pith_wire::Wire::AnthropicMessages,
            one.to_string().as_bytes(),
        )
        .and_then(|mut m| m.pop()) else {
            continue;
        };
        let api_id = body.get("id").and_then(Value::as_str).map(str::to_owned);
        let ts = ts.unwrap_or(0);
        match messages.last_mut() {
            // The blocks of one API message are written as entries of their own.
            Some((last, Some(last_id), _))
                if message.role == "assistant"
                    && last.role == "assistant"
                    && api_id.as_deref() == Some(last_id.as_str()) =>
            {
                last.parts.extend(message.parts);
            }
            _ => messages.push((message, api_id, ts)),
        }
    }
    Imported {
        session_id: session_id.unwrap_or(fallback_id),
        client: Client::ClaudeCode.name(),
        started_ms: started_ms.unwrap_or(0),
        messages: messages
            .iter()
            .map(|(m, _, ts)| NewMessage::from_wire(m, *ts))
            .collect(),
    }
}

fn codex(lines: &[Value], fallback_id: String) -> Imported {
    let mut session_id = None;
    let mut started_ms = None;
    let mut items = Vec::new();
    let mut times = Vec::new();
    for entry in lines {
        let ts = timestamp_ms(entry);
        if started_ms.is_none() {
            started_ms = ts;
        }
        let payload = entry.get("payload").unwrap_or(&Value::Null);
        match entry.get("type").and_then(Value::as_str) {
            Some("session_meta") if session_id.is_none() => {
                session_id = payload.get("id").and_then(Value::as_str).map(str::to_owned);
            }
            Some("response_item") => {
                items.push(payload.clone());
                times.push(ts.unwrap_or(0));
            }
            _ => {}
        }
    }
    // Grouped as a request's input is grouped; a message's time is its first item's.
    let stamped = conversation::responses_items_indexed(&items)
        .iter()
        .map(|(at, m)| NewMessage::from_wire(m, times.get(*at).copied().unwrap_or(0)))
        .collect();
    Imported {
        session_id: session_id.unwrap_or(fallback_id),
        client: Client::Codex.name(),
        started_ms: started_ms.unwrap_or(0),
        messages: stamped,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps_are_read_as_utc_milliseconds() {
        assert_eq!(parse_rfc3339_ms("1970-01-01T00:00:01.5Z"), Some(1_500));
        assert_eq!(
            parse_rfc3339_ms("2026-11-30T02:48:20.508Z"),
            Some(1_796_006_900_508)
        );
        assert_eq!(parse_rfc3339_ms("1970-01-01T01:00:00+01:00"), Some(0));
        assert_eq!(parse_rfc3339_ms("yesterday"), None);
    }
}
