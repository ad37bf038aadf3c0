//! Putting hidden search blocks back: on an Anthropic request, before each `tool_use` whose
//! search pith took out of an earlier answer, the blocks as the provider sent them.

use std::borrow::Cow;
use std::sync::Arc;

use pith_wire::Wire;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::{Kept, SearchMemory, session_key};
use crate::splice::span_of;
use crate::stage::{Edit, Fact, Outcome, Request, Splice, Stage, StageError};

/// Why the stage left a request as it was.
pub mod reason {
    /// Not Anthropic Messages (Chat has no server tools; Codex searches client-side).
    pub const NOT_APPLICABLE: &str = "not_applicable";
    /// Nothing is kept for the request's session.
    pub const NOTHING_REMEMBERED: &str = "nothing_remembered";
    /// The history already carries tool search blocks: the client round-trips them itself,
    /// so its answers are not rewritten either.
    pub const CLIENT_ROUND_TRIPS: &str = "client_round_trips";
    /// Blocks are kept for the session, but for no `tool_use` in this history.
    pub const NONE_HERE: &str = "none_here";
    /// Not the shape of a Messages request.
    pub const UNREADABLE: &str = "unreadable";

    /// Every reason, for the words' test.
    pub const ALL: &[&str] = &[
        NOT_APPLICABLE,
        NOTHING_REMEMBERED,
        CLIENT_ROUND_TRIPS,
        NONE_HERE,
        UNREADABLE,
    ];
}

/// What the stage, its facts and its reasons are called for people.
pub const WORDS: crate::stage::StageWords = crate::stage::StageWords {
    stage: NAME,
    name: "tool search restore",
    facts: &[("searches", "restored {n} hidden tool search result{s}")],
    reasons: &[
        (reason::NOT_APPLICABLE, "not an Anthropic Messages request"),
        (
            reason::NOTHING_REMEMBERED,
            "no tool search kept for the session",
        ),
        (
            reason::CLIENT_ROUND_TRIPS,
            "the client sends its tool searches back itself",
        ),
        (
            reason::NONE_HERE,
            "no kept tool search belongs in this history",
        ),
        (reason::UNREADABLE, "the body was not the JSON it expects"),
    ],
    came_back: None,
};

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
    #[serde(borrow, default)]
    name: Option<Cow<'a, str>>,
}

/// The `tool_use`s a Messages request's assistant turns name: what a shared memory is asked
/// about before the stage runs.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ToolUses {
    /// Their ids, in order, once each.
    pub ids: Vec<String>,
    /// `ids[newest..]` are the last assistant turn's.
    pub newest: usize,
}

/// The `tool_use`s of `body`'s assistant turns; none for a body that names none, is not
/// readable, or whose assistant turns carry tool search blocks themselves (the client
/// round-trips them, so the stage will not look).
pub fn tool_use_ids(body: &[u8]) -> ToolUses {
    if memchr::memmem::find(body, b"\"tool_use\"").is_none() {
        return ToolUses::default();
    }
    let Ok(top) = std::str::from_utf8(body).map(serde_json::from_str::<Top<'_>>) else {
        return ToolUses::default();
    };
    let mut found = ToolUses::default();
    for message in top.ok().and_then(|t| t.messages).unwrap_or_default() {
        let Ok(message) = serde_json::from_str::<Message<'_>>(message.get()) else {
            continue;
        };
        let Some(content) = message
            .content
            .filter(|c| message.role.as_deref() == Some("assistant") && c.get().starts_with('['))
        else {
            continue;
        };
        let Ok(blocks) = serde_json::from_str::<Vec<Block<'_>>>(content.get()) else {
            continue;
        };
        if blocks
            .iter()
            .any(|b| super::is_search_block(b.kind.as_deref().unwrap_or(""), b.name.as_deref()))
        {
            return ToolUses::default();
        }
        found.newest = found.ids.len();
        for block in blocks {
            if block.kind.as_deref() == Some("tool_use")
                && let Some(id) = block.id
                && !found.ids.iter().any(|known| *known == id)
            {
                found.ids.push(id.into_owned());
            }
        }
    }
    found
}

impl Stage for RestoreStage {
    fn name(&self) -> &'static str {
        NAME
    }

    fn apply(&self, request: &Request<'_>) -> Result<Outcome, StageError> {
        if request.wire != Wire::AnthropicMessages {
            return Ok(Outcome::Unchanged(reason::NOT_APPLICABLE));
        }
        let session = session_key(request.headers);
        // A client that sends tool search blocks back itself needs none of this (and its
        // answers are not rewritten). The substring only decides whether to look.
        let maybe_round_trips =
            memchr::memmem::find(request.body, b"\"tool_search_tool_result\"").is_some();
        if !maybe_round_trips && !self.memory.knows_session(&session) {
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
            if message.role.as_deref() != Some("assistant") {
                continue;
            }
            let Some(content) = message.content.filter(|c| c.get().starts_with('[')) else {
                continue;
            };
            let Ok(raw_blocks) = serde_json::from_str::<Vec<&RawValue>>(content.get()) else {
                continue;
            };
            let heads: Vec<Option<Block<'_>>> = raw_blocks
                .iter()
                .map(|b| serde_json::from_str::<Block<'_>>(b.get()).ok())
                .collect();
            let sent_back = heads.iter().flatten().any(|h| {
                super::is_search_block(h.kind.as_deref().unwrap_or(""), h.name.as_deref())
            });
            if sent_back {
                return Ok(Outcome::Unchanged(reason::CLIENT_ROUND_TRIPS));
            }
            searches += self.restore_in(&session, body, &raw_blocks, &heads, &mut splices);
        }
        if splices.is_empty() {
            return Ok(Outcome::Unchanged(reason::NONE_HERE));
        }
        Ok(Outcome::Edited(Edit {
            splices,
            headers: Vec::new(),
            facts: vec![Fact::count("searches", searches)],
            within: None,
        }))
    }
}

impl RestoreStage {
    /// Splices the blocks kept for each `tool_use` of one assistant message (`raw_blocks`, with
    /// `heads` read from them) back into `body`; returns how many searches they hold.
    fn restore_in(
        &self,
        session: &str,
        body: &str,
        raw_blocks: &[&RawValue],
        heads: &[Option<Block<'_>>],
        splices: &mut Vec<Splice>,
    ) -> usize {
        let mut searches = 0;
        for (i, head) in heads.iter().enumerate() {
            let Some(head) = head
                .as_ref()
                .filter(|h| h.kind.as_deref() == Some("tool_use"))
            else {
                continue;
            };
            let Some(text) = head
                .id
                .as_deref()
                .and_then(|id| self.memory.recall(session, id))
            else {
                continue;
            };
            let Some(kept) = Kept::decode(&text) else {
                continue;
            };
            // Where the answer had them, when the client kept the answer's other blocks;
            // else just before the tool_use they led to.
            let in_place = kept.tool_use_at == i;
            for (at, block) in &kept.blocks {
                let target = if in_place { (*at).min(i) } else { i };
                let Some(span) = span_of(body, raw_blocks[target]) else {
                    continue;
                };
                splices.push(Splice {
                    range: span.start..span.start,
                    replacement: format!("{block},"),
                });
            }
            searches += kept.searches();
        }
        searches
    }
}
