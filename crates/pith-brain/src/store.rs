//! The storage a brain needs: the [`BrainStore`] trait, what it is asked and what it answers.
//!
//! The trait is defined here, by the brain, and implemented by backends (`pith-store`'s SQLite
//! file today): it speaks in whole memories and plain search terms so that another backend
//! (PostgreSQL for a shared team brain) can implement it without knowing SQLite's FTS5 syntax.
//! Everything that needs the workspace's files (hashing evidence, deciding staleness) stays in
//! the brain; a store only keeps what it is given.

use serde::{Deserialize, Serialize};

use crate::model::{Evidence, Kind, LastCheck, Memory, MemoryRef};

/// A backend's failure. Each backend keeps its own error type; this carries it whole, so its
/// message and its causes reach the caller unchanged without the brain knowing the backend.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct StoreError(Box<dyn std::error::Error + Send + Sync + 'static>);

impl StoreError {
    /// Wrap a backend's own error.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> StoreError {
        StoreError(Box::new(error))
    }
}

/// A full-text search. `terms` are plain words or phrases; each backend turns them into its
/// own query syntax, so no caller can inject operators.
#[derive(Debug, Clone)]
pub struct SearchQuery {
    /// The words or phrases to look for; with none, nothing matches.
    pub terms: Vec<String>,
    /// Only memories of this kind; `None` for every kind.
    pub kind: Option<Kind>,
    /// Most hits to return.
    pub limit: usize,
}

/// One search result, best first.
#[derive(Debug, Clone)]
pub struct SearchHit {
    /// The memory that matched, as stored (before this search credits it).
    pub memory: Memory,
    /// Backend relevance score; lower is better for SQLite's BM25 (only the order matters).
    pub score: f64,
    /// A short excerpt of the body around the matched terms.
    pub snippet: String,
}

/// What a search found: the best hits and how many memories matched in all.
#[derive(Debug, Clone)]
pub struct SearchHits {
    /// Memories that matched (the hits are the best `limit` of them). Counting stops at
    /// [`SEARCH_CAP`]; then `total_capped` is set and `total` is a lower bound.
    pub total: u64,
    /// Counting stopped at [`SEARCH_CAP`], so `total` is a lower bound.
    pub total_capped: bool,
    /// Whether the hits contain every term, or (when fewer than `limit` memories do) any.
    pub matched: Matched,
    /// Set when more memories matched than ranking considers: only the newest this many were
    /// ranked by relevance.
    pub ranked_newest: Option<usize>,
    /// At most `limit` hits, best first.
    pub hits: Vec<SearchHit>,
}

/// How the terms of a search were combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Matched {
    /// Every term is in each memory.
    All,
    /// Fewer than `limit` memories hold every term, so memories holding any are ranked.
    Any,
}

/// How many matches a search counts and ranks at most. Ranking cost grows with the number of
/// matches, so a query matching much of a large brain ranks its newest matches and says so;
/// this keeps a search within a few milliseconds at 100,000 memories.
pub const SEARCH_CAP: usize = 1000;

/// What recall asks a store for: live memories of `kind` whose error headline holds the terms
/// of a failure's headline (plain words, as in [`SearchQuery`]).
#[derive(Debug, Clone)]
pub struct HeadlineQuery {
    /// The failure headline's terms.
    pub terms: Vec<String>,
    /// Only memories of this kind (recall asks for fixes).
    pub kind: Kind,
    /// Most memories to return.
    pub limit: usize,
}

/// A headline term held by at least this many memories' headlines is common: it cannot tell
/// one failure from another (`FAILED`, `test`, `error`), so it nominates nothing on its own.
pub const COMMON_HEADLINE_TERM: usize = 64;

/// Which memories a list returns (newest first).
#[derive(Debug, Clone, Default)]
pub struct ListFilter {
    /// Only memories of this kind; `None` for every kind.
    pub kind: Option<Kind>,
    /// List the trash instead of live memories.
    pub trashed: bool,
    /// Most memories to return; `None` for all.
    pub limit: Option<usize>,
}

/// Whether an insert found its id free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Inserted {
    /// The memory is stored under its id.
    Ok,
    /// Another memory already has this id; try another.
    IdTaken,
}

/// The storage a brain needs. Reads of a single memory include trashed ones (callers decide
/// what trash means); searches and lists see only live memories unless asked for the trash.
pub trait BrainStore: Send {
    /// Store a new memory under `memory.id` unless that id is taken.
    fn insert(&mut self, memory: &Memory) -> Result<Inserted, StoreError>;
    /// The memory with this id, trashed or not; `None` for an unknown id.
    fn get(&mut self, id: &str) -> Result<Option<Memory>, StoreError>;
    /// Live memories matching `query`, best first. Credits nothing: the brain calls
    /// [`BrainStore::credit`] for the hits it returns.
    fn search(&mut self, query: &SearchQuery) -> Result<SearchHits, StoreError>;
    /// Memories newest first, live or (with `filter.trashed`) the trash.
    fn list(&mut self, filter: &ListFilter) -> Result<Vec<Memory>, StoreError>;
    /// Live memories of `query.kind` whose headline holds every selective term of
    /// `query.terms` (those fewer than [`COMMON_HEADLINE_TERM`] headlines hold), best (BM25)
    /// first; when none does, those holding any selective term. Credits nothing. (A hook asks
    /// this on every failing test run: it must not rank thousands of memories that share only
    /// `FAILED` and `test`.)
    fn by_headline(&mut self, query: &HeadlineQuery) -> Result<Vec<Memory>, StoreError>;
    /// Live memories with evidence on `path` (workspace-relative), oldest first.
    fn on_path(&mut self, path: &str) -> Result<Vec<MemoryRef>, StoreError>;
    /// Move each hit counter by one: called only when memories were returned to a caller.
    fn credit(&mut self, ids: &[&str], at: i64) -> Result<(), StoreError>;
    /// Trash (`Some(time)`) or restore (`None`). Returns false for an unknown id.
    fn set_trashed(&mut self, id: &str, trashed_at: Option<i64>) -> Result<bool, StoreError>;
    /// Replace the evidence list and record a verification. Returns false for an unknown id.
    fn record_check(
        &mut self,
        id: &str,
        evidence: &[Evidence],
        check: &LastCheck,
    ) -> Result<bool, StoreError>;
    /// Number of live memories.
    fn count(&mut self) -> Result<u64, StoreError>;
}
