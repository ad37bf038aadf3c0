//! The tool search round trip's two halves in the proxy: the answers' rewriter (search blocks
//! pith's tool search caused, taken out and kept) and the memory the request stage reads them
//! back from. The rules are `pith_transform::search_trip`'s; the memory is
//! `pith_store::search_blocks`.

use std::sync::Arc;

use bytes::Bytes;
use pith_store::search_blocks::SearchBlocks;
use pith_transform::search_trip::SearchMemory;
use pith_transform::search_trip::hide::{Action, StreamHider, hide_in_message};
use pith_transform::search_trip::restore::{NAME as RESTORE, reason};
use pith_transform::{Fact, StageReport, StageResult};
use pith_wire::Wire;

use crate::rewrite::{
    BodyRewriter, EventRewriter, ResponseInfo, ResponseRewrites, Rewrite, Rewriter,
};

/// The stage name of the answers' half, in the ledger.
pub const HIDE: &str = "search_hide";

/// [`SearchBlocks`] as the restore stage's memory.
pub struct StoredSearches(pub SearchBlocks);

impl SearchMemory for StoredSearches {
    fn remember(&self, session: &str, tool_use_id: &str, blocks: &str) {
        self.0.put(session, tool_use_id, blocks);
    }
    fn recall(&self, session: &str, tool_use_id: &str) -> Option<Arc<str>> {
        self.0.get(session, tool_use_id)
    }
    fn knows_session(&self, session: &str) -> bool {
        self.0.has_session(session)
    }
}

/// Chooses the hider for answers to requests pith added its tool search to.
pub struct SearchTrip {
    memory: SearchBlocks,
}

impl SearchTrip {
    /// Hide into `memory`.
    pub fn new(memory: SearchBlocks) -> SearchTrip {
        SearchTrip { memory }
    }
}

impl ResponseRewrites for SearchTrip {
    /// An Anthropic answer to a request pith's defer stage changed (and so added the search
    /// tool: it always does when it defers), from a client that does not round-trip server
    /// blocks itself.
    fn reads_answer(&self, wire: Wire, transforms: &[StageReport]) -> bool {
        let deferred = transforms.iter().any(|r| {
            r.stage == pith_transform::defer::NAME && matches!(r.result, StageResult::Applied(_))
        });
        let round_trips = transforms.iter().any(|r| {
            r.stage == RESTORE && r.result == StageResult::Unchanged(reason::CLIENT_ROUND_TRIPS)
        });
        wire == Wire::AnthropicMessages && deferred && !round_trips
    }

    fn for_response(&self, info: &ResponseInfo<'_>) -> Option<Rewriter> {
        let readable = info
            .content_encoding
            .is_none_or(|e| e.eq_ignore_ascii_case("identity"));
        if !info.status.is_success() || !readable || !self.reads_answer(info.wire, info.transforms)
        {
            return None;
        }
        let session = info.session.unwrap_or_default().to_owned();
        let memory = self.memory.clone();
        Some(if info.sse {
            Rewriter::Events(Box::new(HideEvents {
                hider: StreamHider::new(),
                memory,
                session,
            }))
        } else {
            Rewriter::Whole(Box::new(HideWhole {
                memory,
                session,
                searches: 0,
            }))
        })
    }
}

fn report(searches: usize) -> Option<StageReport> {
    (searches > 0).then(|| StageReport {
        stage: HIDE,
        result: StageResult::Applied(vec![Fact::count("searches", searches)]),
    })
}

/// A streamed answer's hider.
struct HideEvents {
    hider: StreamHider,
    memory: SearchBlocks,
    session: String,
}

impl EventRewriter for HideEvents {
    fn event(&mut self, event: &[u8]) -> Rewrite {
        let action = self.hider.event(event);
        // Kept as soon as the tool_use that follows a search starts: the client's next request
        // may come before this answer's last byte is accounted.
        for hidden in self.hider.take_hidden() {
            self.memory
                .put(&self.session, &hidden.tool_use_id, &hidden.kept);
        }
        match action {
            Action::Keep => Rewrite::Keep,
            Action::Drop => Rewrite::Drop,
            Action::Replace(bytes) => Rewrite::Replace(Bytes::from(bytes)),
        }
    }

    fn may_pass_unread(&self) -> bool {
        !self.hider.renumbers()
    }

    fn report(&mut self) -> Option<StageReport> {
        report(self.hider.searches())
    }
}

/// A JSON answer's hider.
struct HideWhole {
    memory: SearchBlocks,
    session: String,
    searches: usize,
}

impl BodyRewriter for HideWhole {
    fn body(&mut self, body: &[u8]) -> Option<Bytes> {
        let hidden = hide_in_message(body)?;
        for h in &hidden.hidden {
            self.memory.put(&self.session, &h.tool_use_id, &h.kept);
        }
        self.searches = hidden.searches;
        Some(Bytes::from(hidden.body))
    }

    fn report(&mut self) -> Option<StageReport> {
        report(self.searches)
    }
}
