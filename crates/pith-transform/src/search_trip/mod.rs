//! The tool search round trip for clients without tool search of their own: what pith adds,
//! pith removes.
//!
//! When the defer stage added the provider's tool search tool to a request (the client did not
//! send one), a model that needs a deferred tool searches first, and the answer carries
//! `server_tool_use` / `tool_search_tool_result` blocks the client never asked for. Clients
//! built on SDKs that do not round-trip server blocks (OpenCode's AI SDK) show the search as a
//! failed call and send the history back without them, which reads as a session pith joined
//! midway. So [`hide`] takes those blocks out of the answer (streamed: event by event, with
//! the later blocks renumbered; or the whole JSON body) and hands them to a [`SearchMemory`],
//! keyed by the session and the `tool_use` that followed them; and on every later request of
//! the session [`restore::RestoreStage`] splices them back before that `tool_use`, the same
//! bytes each time, so the provider sees the history the API documents, the prompt prefix is
//! byte-stable and deferral goes on with the same loaded set.

pub mod hide;
pub mod restore;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use http::HeaderMap;

/// The names of the tool search tools pith adds (`SearchVariant`).
pub const SEARCH_TOOL_NAMES: [&str; 2] = ["tool_search_tool_regex", "tool_search_tool_bm25"];

/// What is kept for one `tool_use`: the hidden blocks, raw as the provider sent them, each
/// with the number of visible blocks that came before it in the answer, and the `tool_use`'s
/// own index among the visible blocks. Stored as one JSON text,
/// `{"tool_use_at":N,"blocks":[[AT,BLOCK],...]}`, the blocks embedded byte for byte.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kept<'a> {
    /// The `tool_use`'s index among the visible blocks of its message.
    pub tool_use_at: usize,
    /// Each block: how many visible blocks preceded it, and its raw JSON.
    pub blocks: Vec<(usize, &'a str)>,
}

#[derive(serde::Deserialize)]
struct KeptText<'a> {
    tool_use_at: usize,
    #[serde(borrow)]
    blocks: Vec<(usize, &'a serde_json::value::RawValue)>,
}

impl<'a> Kept<'a> {
    /// The stored text for `blocks` before a `tool_use` at visible index `tool_use_at`.
    pub fn encode(tool_use_at: usize, blocks: &[(usize, String)]) -> String {
        let items: Vec<String> = blocks
            .iter()
            .map(|(at, block)| format!("[{at},{block}]"))
            .collect();
        format!(
            "{{\"tool_use_at\":{tool_use_at},\"blocks\":[{}]}}",
            items.join(",")
        )
    }

    /// The kept blocks in `text`; `None` when it is not what [`Kept::encode`] writes.
    pub fn decode(text: &'a str) -> Option<Kept<'a>> {
        let k: KeptText<'a> = serde_json::from_str(text).ok()?;
        Some(Kept {
            tool_use_at: k.tool_use_at,
            blocks: k.blocks.into_iter().map(|(at, b)| (at, b.get())).collect(),
        })
    }

    /// How many searches the blocks hold.
    pub fn searches(&self) -> usize {
        self.blocks
            .iter()
            .filter(|(_, b)| b.contains("\"server_tool_use\""))
            .count()
    }
}

/// Where hidden blocks wait for the session's next requests. Implementations keep them across
/// restarts, bounded in size and age; a lookup must not block on I/O (the stage runs inline).
pub trait SearchMemory: Send + Sync {
    /// Keep `kept` (a [`Kept`] text) for the `tool_use` `tool_use_id` of `session`.
    fn remember(&self, session: &str, tool_use_id: &str, kept: &str);
    /// What is kept for that `tool_use`, if any.
    fn recall(&self, session: &str, tool_use_id: &str) -> Option<Arc<str>>;
    /// Whether anything is kept for `session` (the stage's fast path).
    fn knows_session(&self, session: &str) -> bool;
}

/// The session a request belongs to, for keying: its session header, else empty (tool_use ids
/// are unique on their own; the session only narrows them).
pub fn session_key(headers: &HeaderMap) -> String {
    pith_wire::session::session_from_headers(headers).unwrap_or_default()
}

/// Whether a content block (its `type` and `name`) is one pith's tool search caused.
pub fn is_search_block(kind: &str, name: Option<&str>) -> bool {
    match kind {
        "server_tool_use" => name.is_some_and(|n| SEARCH_TOOL_NAMES.contains(&n)),
        "tool_search_tool_result" => true,
        _ => false,
    }
}

/// A [`SearchMemory`] in a map, unbounded and gone with the process: for tests and
/// evaluations (the proxy keeps its blocks in `pith_store::search_blocks`).
#[derive(Debug, Default)]
pub struct InMemory(Mutex<HashMap<(String, String), Arc<str>>>);

impl InMemory {
    /// Entries kept.
    pub fn len(&self) -> usize {
        self.0.lock().map_or(0, |m| m.len())
    }

    /// Whether nothing is kept.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl SearchMemory for InMemory {
    fn remember(&self, session: &str, tool_use_id: &str, blocks: &str) {
        if let Ok(mut m) = self.0.lock() {
            m.insert((session.into(), tool_use_id.into()), Arc::from(blocks));
        }
    }
    fn recall(&self, session: &str, tool_use_id: &str) -> Option<Arc<str>> {
        let m = self.0.lock().ok()?;
        m.get(&(session.to_owned(), tool_use_id.to_owned()))
            .cloned()
    }
    fn knows_session(&self, session: &str) -> bool {
        self.0
            .lock()
            .is_ok_and(|m| m.keys().any(|(s, _)| s == session))
    }
}
