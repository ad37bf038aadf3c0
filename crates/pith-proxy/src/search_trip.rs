//! The tool search round trip's halves in the proxy: the answers' rewriter (search blocks
//! pith's tool search caused, taken out and kept), the memory the request stage reads them
//! back from, and, with a team store, the fetch phase that asks it for the blocks another
//! instance hid ([`fetch`]). The rules are `pith_transform::search_trip`'s; the memory is
//! `pith_store::search_blocks`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use pith_store::search_blocks::{Fetch, SearchBlocks, Shared, Sharing};
use pith_transform::search_trip::SearchMemory;
use pith_transform::search_trip::hide::{Action, SEARCHES, StreamHider, hide_in_message};
use pith_transform::search_trip::restore::{NAME as RESTORE, reason};
use pith_transform::words::StageWords;
use pith_transform::{Fact, StageReport, StageResult};
use pith_wire::Wire;

use crate::rewrite::{
    BodyRewriter, EventRewriter, Hold, ResponseInfo, ResponseRewrites, Rewrite, Rewriter,
};

/// The stage name of the answers' half, in the ledger.
pub const HIDE: &str = pith_transform::search_trip::hide::NAME;

/// The fetch phase's stage name in the ledger (a report only when the team store had blocks,
/// failed, missed its bound, or was resting after one of those).
pub const FETCH: &str = "search_fetch";

/// Before the pipeline, with a team store: a Messages request naming `tool_use`s this
/// instance knows nothing about asks the store for their blocks (another instance hid them
/// from the answer the client is replying to), so the restore stage finds them in memory.
/// Bounded in time; a slow or failed store is reported and the request goes on without them
/// (fails open).
pub async fn fetch(
    memory: &SearchBlocks,
    wire: Wire,
    session: &str,
    body: &[u8],
) -> Option<StageReport> {
    if wire != Wire::AnthropicMessages || !memory.is_shared() {
        return None;
    }
    let uses = pith_transform::search_trip::restore::tool_use_ids(body);
    if uses.ids.is_empty() {
        return None;
    }
    let ids: Vec<&str> = uses.ids.iter().map(String::as_str).collect();
    let failed = |why: String| {
        tracing::warn!("{why}; the request goes on without what the store may hold");
        Some(StageReport {
            stage: FETCH,
            result: StageResult::Failed(why),
        })
    };
    match memory.fetch(session, &ids, uses.newest).await {
        Fetch::NotShared | Fetch::Known | Fetch::Fetched { found: 0, .. } => None,
        Fetch::Fetched { found, .. } => Some(StageReport {
            stage: FETCH,
            result: StageResult::Applied(vec![Fact::count("fetched", found)]),
        }),
        Fetch::Slow => failed("the team store did not answer within its bound".to_owned()),
        Fetch::Failed(e) => failed(format!("the team store could not be read: {e}")),
        // Said once, when it failed or was slow; the requests after it are left as they are.
        Fetch::Resting => Some(StageReport {
            stage: FETCH,
            result: StageResult::Unchanged(STORE_RESTING),
        }),
    }
}

/// The fetch phase's reason for asking nothing: the team store failed or was slow a moment
/// ago (for 5 s requests do not wait for it).
pub const STORE_RESTING: &str = "store_resting";

/// [`SearchBlocks`] as the restore stage's memory.
pub struct StoredSearches(pub SearchBlocks);

impl SearchMemory for StoredSearches {
    fn remember(&self, session: &str, tool_use_id: &str, blocks: &str) {
        // The team write (if any) goes on by itself; nothing here waits for it.
        drop(self.0.put(session, tool_use_id, blocks));
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
        let keeper = Keeper {
            memory: self.memory.clone(),
            session: info.session.unwrap_or_default().to_owned(),
            sharing: Vec::new(),
            not_shared: Arc::new(AtomicUsize::new(0)),
        };
        Some(if info.sse {
            Rewriter::Events(Box::new(HideEvents {
                hider: StreamHider::new(),
                keeper,
            }))
        } else {
            Rewriter::Whole(Box::new(HideWhole {
                keeper,
                searches: 0,
            }))
        })
    }
}

/// Where a hider keeps what it took out, and the team writes its answer waits for.
struct Keeper {
    memory: SearchBlocks,
    session: String,
    sharing: Vec<Sharing>,
    /// Team writes that failed or missed their bound (the row says so).
    not_shared: Arc<AtomicUsize>,
}

impl Keeper {
    fn keep(&mut self, tool_use_id: &str, kept: &str) {
        if let Some(sharing) = self.memory.put(&self.session, tool_use_id, kept) {
            self.sharing.push(sharing);
        }
    }

    /// The answer waits until every block kept so far is in the team store (or its bound
    /// passed): the client's next request may go to another instance.
    fn hold(&mut self) -> Option<Hold> {
        if self.sharing.is_empty() {
            return None;
        }
        let sharing = std::mem::take(&mut self.sharing);
        let not_shared = Arc::clone(&self.not_shared);
        Some(Box::pin(async move {
            for write in sharing {
                if write.await != Shared::Written {
                    not_shared.fetch_add(1, Ordering::Relaxed);
                }
            }
        }))
    }

    fn report(&self, searches: usize) -> Option<StageReport> {
        if searches == 0 {
            return None;
        }
        let mut facts = vec![Fact::count(SEARCHES, searches)];
        let not_shared = self.not_shared.load(Ordering::Relaxed);
        if not_shared > 0 {
            facts.push(Fact::count(NOT_SHARED, not_shared));
        }
        Some(StageReport {
            stage: HIDE,
            result: StageResult::Applied(facts),
        })
    }
}

/// The hide report's fact for blocks that did not reach the team store in time: another
/// instance serving the session's next request fails open for them.
pub const NOT_SHARED: &str = "not_shared";

/// What the hiding half is called for people.
pub const HIDE_WORDS: StageWords = StageWords {
    stage: HIDE,
    name: "tool search hiding",
    facts: &[
        (
            SEARCHES,
            "hid {n} tool search result{s} from the client's answers",
        ),
        (
            NOT_SHARED,
            "{n} of them not shared with the team store in time",
        ),
    ],
    reasons: &[],
    came_back: None,
};

/// What the team store's fetch is called for people.
pub const FETCH_WORDS: StageWords = StageWords {
    stage: FETCH,
    name: "tool search from the team store",
    facts: &[(
        "fetched",
        "fetched {n} tool search result{s} another instance hid",
    )],
    reasons: &[(
        STORE_RESTING,
        "the team store failed or was slow a moment before, so it was not asked",
    )],
    came_back: None,
};

/// A streamed answer's hider.
struct HideEvents {
    hider: StreamHider,
    keeper: Keeper,
}

impl EventRewriter for HideEvents {
    fn event(&mut self, event: &[u8]) -> Rewrite {
        let action = self.hider.event(event);
        // Kept as soon as the tool_use that follows a search starts: the client's next request
        // may come before this answer's last byte is accounted.
        for hidden in self.hider.take_hidden() {
            self.keeper.keep(&hidden.tool_use_id, &hidden.kept);
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
        self.keeper.report(self.hider.searches())
    }

    fn hold(&mut self) -> Option<Hold> {
        self.keeper.hold()
    }
}

/// A JSON answer's hider.
struct HideWhole {
    keeper: Keeper,
    searches: usize,
}

impl BodyRewriter for HideWhole {
    fn body(&mut self, body: &[u8]) -> Option<Bytes> {
        let hidden = hide_in_message(body)?;
        for h in &hidden.hidden {
            self.keeper.keep(&h.tool_use_id, &h.kept);
        }
        self.searches = hidden.searches;
        Some(Bytes::from(hidden.body))
    }

    fn report(&mut self) -> Option<StageReport> {
        self.keeper.report(self.searches)
    }

    fn hold(&mut self) -> Option<Hold> {
        self.keeper.hold()
    }
}
