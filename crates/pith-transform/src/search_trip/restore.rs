//! Putting hidden search blocks back: on an Anthropic request, before each `tool_use` whose
//! search pith took out of an earlier answer, the blocks as the provider sent them.

use std::borrow::Cow;
use std::sync::Arc;

use pith_wire::Wire;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{SearchMemory, session_key};
use crate::splice::span_of;
use crate::stage::{Edit, Fact, Outcome, Request, Splice, Stage, StageError};

/// Why the stage left a request as it was.
pub mod reason {
    /// Not Anthropic Messages (Chat has no server tools; Codex searches client-side).
    pub const NOT_APPLICABLE: &str = "not_applicable";
    /// Nothing is kept for the request's session.
    pub const NOTHING_REMEMBERED: &str = "nothing_remembered";
    /// The history already carries server tool blocks: the client round-trips them itself,
    /// so its answers are not rewritten either.
    pub const CLIENT_ROUND_TRIPS: &str = "client_round_trips";
    /// Blocks are kept for the session, but for no `tool_use` in this history.
    pub const NONE_HERE: &str = "none_here";
    /// Not the shape of a Messages request.
    pub const UNREADABLE: &str = "unreadable";
}

/// The stage name, in `pith-transforms` and the ledger.
pub const NAME: &str = "search_restore";

/// The restore stage, over the memory the answers were hidden into.
pub struct RestoreStage {
    memory: Arc<dyn SearchMemory>,
}

impl RestoreStage {
    /// A stage that reads `memory`.
    pub fn new(memory: Arc<dyn SearchMemory>) -> RestoreStage {
        RestoreStage { memory }
    }
}

#[derive(Deserialize)]
struct Top<'a> {
    #[serde(borrow, default)]
    messages: Option<Vec<&'a RawValue>>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow, default)]
    role: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    content: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct Block<'a> {
    #[serde(rename = "type", borrow, default)]
    kind: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
}

impl Stage for RestoreStage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn apply(&self, request: &Request<'_>) -> Result<Outcome, StageError> {
        if request.wire != Wire::AnthropicMessages {
            return Ok(Outcome::Unchanged(reason::NOT_APPLICABLE));
        }
        if memchr::memmem::find(request.body, b"\"server_tool_use\"").is_some() {
            return Ok(Outcome::Unchanged(reason::CLIENT_ROUND_TRIPS));
        }
        let session = session_key(request.headers);
        if !self.memory.knows_session(&session) {
            return Ok(Outcome::Unchanged(reason::NOTHING_REMEMBERED));
        }
        let Ok(body) = std::str::from_utf8(request.body) else {
            return Ok(Outcome::Unchanged(reason::UNREADABLE));
        };
        let Ok(top) = serde_json::from_str::<Top<'_>>(body) else {
            return Ok(Outcome::Unchanged(reason::UNREADABLE));
        };
        let mut splices = Vec::new();
        let mut searches = 0;
        for message in top.messages.unwrap_or_default() {
            let Ok(message) = serde_json::from_str::<Message<'_>>(message.get()) else {
                continue;
            };
            let Some(content) = message.content.filter(|c| c.get().starts_with('[')) else {
                continue;
            };
            if message.role.as_deref() != Some("assistant") {
                continue;
            }
            let Ok(blocks) = serde_json::from_str::<Vec<&RawValue>>(content.get()) else {
                continue;
            };
            for block in blocks {
                let Ok(head) = serde_json::from_str::<Block<'_>>(block.get()) else {
                    continue;
                };
                if head.kind.as_deref() != Some("tool_use") {
                    continue;
                }
                let Some(kept) = head.id.and_then(|id| self.memory.recall(&session, &id)) else {
                    continue;
                };
                let Some(span) = span_of(body, block) else {
                    continue;
                };
                searches +=
                    memchr::memmem::find_iter(kept.as_bytes(), b"\"server_tool_use\"").count();
                splices.push(Splice {
                    range: span.start..span.start,
                    replacement: format!("{kept},"),
                });
            }
        }
        if splices.is_empty() {
            return Ok(Outcome::Unchanged(reason::NONE_HERE));
        }
        Ok(Outcome::Edited(Edit {
            splices,
            headers: Vec::new(),
            facts: vec![Fact::count("searches", searches)],
        }))
    }
}
