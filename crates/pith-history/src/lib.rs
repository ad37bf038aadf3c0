//! Conversation history: what a conversation and a message are, which messages a person typed,
//! the session files of real clients read into conversations (`import`; OpenCode's SQLite
//! database, read-only, in `opencode`), the fixed set of candidate filters, and the signed
//! tokens that tie a deletion to a selection the server made (`token`). Storage lives in
//! `pith-store` (`history/`): this crate keeps no database of its own.

pub mod classify;
pub mod import;
pub mod opencode;
pub mod terms;
pub mod token;

use std::fmt;
use std::str::FromStr;

use pith_wire::conversation::PartKind;
use serde::{Deserialize, Serialize};

/// The account a local install keeps its history under (team mode maps each key to one).
pub const LOCAL_ACCOUNT: &str = "local";

/// Characters of a message's text kept as its preview (the whole text goes to the index).
pub const PREVIEW_CHARS: usize = 300;

/// Which kind of agent produced a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum AgentType {
    /// An agent acting for a person on their own work (the default).
    #[default]
    Public,
    /// An administrative agent (maintenance, cleanup).
    Admin,
}

impl AgentType {
    /// The name stored and shown.
    pub fn as_str(self) -> &'static str {
        match self {
            AgentType::Public => "public",
            AgentType::Admin => "admin",
        }
    }
}

impl fmt::Display for AgentType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is not one of the known values, with the ones that are.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("unknown {what} {given:?}; expected one of: {expected}")]
pub struct UnknownName {
    what: &'static str,
    given: String,
    expected: &'static str,
}

impl FromStr for AgentType {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "public" => Ok(AgentType::Public),
            "admin" => Ok(AgentType::Admin),
            _ => Err(UnknownName {
                what: "agent type",
                given: s.to_owned(),
                expected: "public, admin",
            }),
        }
    }
}

/// The fixed set of candidate filters. The server runs each one's canonical predicate; no
/// caller writes a selection. (`no-real-user-input` is deliberately not here: a content
/// predicate has a different false-positive risk from these two structural ones.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Filter {
    /// A conversation with zero messages.
    #[serde(rename = "empty")]
    Empty,
    /// Exactly one message, and its role is assistant.
    #[serde(rename = "single-assistant")]
    SingleAssistant,
}

impl Filter {
    /// Every filter, in the order help text lists them.
    pub const ALL: [Filter; 2] = [Filter::Empty, Filter::SingleAssistant];

    /// The name callers select it by.
    pub fn as_str(self) -> &'static str {
        match self {
            Filter::Empty => "empty",
            Filter::SingleAssistant => "single-assistant",
        }
    }

    /// Whether a conversation with these message counts matches: the predicate every backend
    /// runs in SQL, stated once more in Rust for tests to hold the SQL to.
    pub fn matches(self, messages: u64, assistant_messages: u64) -> bool {
        match self {
            Filter::Empty => messages == 0,
            Filter::SingleAssistant => messages == 1 && assistant_messages == 1,
        }
    }
}

impl fmt::Display for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Filter {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Filter::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| UnknownName {
                what: "filter",
                given: s.to_owned(),
                expected: "empty, single-assistant",
            })
    }
}

/// A message as history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewMessage {
    /// `user`, `assistant` or `tool`.
    pub role: String,
    /// Typed by a person (see [`classify::is_real_user_input`]).
    pub real_user: bool,
    /// The message's text (tool calls and results included), indexed for search.
    pub text: String,
    /// The text of the blocks a person typed (empty when none): the preview of a real user
    /// message, without the reminders a harness put around it.
    pub typed: String,
    /// When it was said (ms since the epoch).
    pub ts_ms: i64,
    /// Its long tool outputs kept whole (see [`NewMessage::keep_outputs`]): what pith's
    /// shortened outputs name, fetched back through `pith mcp`.
    pub outputs: Vec<KeptOutput>,
}

/// A tool's output kept whole, by the call it answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeptOutput {
    /// The call's id as the client sent it (`tool_use_id`, `tool_call_id`, `call_id`).
    pub call_id: String,
    /// The output (the store keeps at most [`MAX_KEPT_OUTPUT`] bytes of it).
    pub text: String,
}

/// The longest output kept whole: an output past it is kept to here.
pub const MAX_KEPT_OUTPUT: usize = 1 << 20;

/// When a proxied request's reply is stamped in the history: when its exchange ended (`ts_ms`,
/// its arrival, plus `total_ms`, whole milliseconds). The request's own messages are stamped
/// `ts_ms`; the dashboard finds a request's turn by these two stamps.
pub fn reply_ms(ts_ms: i64, total_ms: f64) -> i64 {
    ts_ms.saturating_add(total_ms as i64)
}

impl NewMessage {
    /// A message from a wire message, classified, at `ts_ms`.
    pub fn from_wire(message: &pith_wire::conversation::Message, ts_ms: i64) -> NewMessage {
        let real_user = classify::is_real_user_input(message);
        let typed: Vec<&str> = message
            .parts
            .iter()
            .filter(|p| real_user && p.kind == PartKind::Text && classify::is_typed_text(&p.text))
            .map(|p| p.text.as_str())
            .collect();
        NewMessage {
            role: message.role.clone(),
            real_user,
            text: message.text(),
            typed: typed.join("\n"),
            ts_ms,
            outputs: Vec::new(),
        }
    }

    /// Keeps `message`'s tool outputs of at least `min_chars` characters whole: the outputs
    /// pith's outputs stage may shorten in later turns.
    pub fn keep_outputs(&mut self, message: &pith_wire::conversation::Message, min_chars: usize) {
        self.outputs = message
            .parts
            .iter()
            .filter(|p| p.kind == PartKind::ToolResult && p.text.len() >= min_chars)
            .filter_map(|p| {
                Some(KeptOutput {
                    call_id: p.call_id.clone()?,
                    text: p.text.clone(),
                })
            })
            .collect();
    }

    /// What identifies and previews it: the typed text when a person typed it, else all.
    pub fn gist(&self) -> &str {
        if self.typed.is_empty() {
            &self.text
        } else {
            &self.typed
        }
    }
}

/// The first `PREVIEW_CHARS` characters of `text`, on one line.
pub fn preview(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(PREVIEW_CHARS)
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if text.chars().nth(PREVIEW_CHARS).is_some() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_and_agent_types_parse_by_name_and_say_what_is_known() {
        for f in Filter::ALL {
            assert_eq!(f.as_str().parse::<Filter>(), Ok(f));
        }
        let err = "no-real-user-input".parse::<Filter>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "unknown filter \"no-real-user-input\"; expected one of: empty, single-assistant"
        );
        assert_eq!("admin".parse::<AgentType>(), Ok(AgentType::Admin));
        assert!("root".parse::<AgentType>().is_err());
    }

    #[test]
    fn the_predicates_are_exactly_the_documented_ones() {
        assert!(Filter::Empty.matches(0, 0));
        assert!(!Filter::Empty.matches(1, 1));
        assert!(Filter::SingleAssistant.matches(1, 1));
        assert!(!Filter::SingleAssistant.matches(1, 0));
        assert!(!Filter::SingleAssistant.matches(2, 1));
        assert!(!Filter::SingleAssistant.matches(0, 0));
    }
}
