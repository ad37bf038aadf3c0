//! Workspace search on ripgrep's crates: .gitignore-aware, capped, paged.
//!
//! Two entry points:
//! - [`search`]: one page of matching lines in a stable (path, line) order, plus the exact total,
//!   so that paging with `offset` is consistent between calls.
//! - [`search_workspace`]: the same, optionally ranked by a [`Ranker`] (a local model) when a
//!   search is broad; returns a [`SearchReport`] whose [`SearchReport::render`] is the final text
//!   an agent or a person reads.
//!
//! Both are blocking (a parallel directory walk, and for ranking an HTTP call); call them from
//! `tokio::task::spawn_blocking` in async code.
//!
//! [`workspace_path`] holds the rule for paths inside a workspace (no way out by `..`, absolute
//! paths or symlinks), shared with the brain and the CLI.

mod report;
mod text;
mod walk;
pub use pith_paths as workspace_path;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

pub use report::{Candidate, RankPolicy, Ranker, Ranking, SearchReport, search_workspace};
pub use walk::{IGNORE_FILE_MAX, NotSearched, search};

/// Page size when the caller does not choose one.
pub const DEFAULT_MAX_RESULTS: usize = 50;
/// Largest page a caller can ask for; larger `max_results` are clamped to this so that one call
/// cannot flood a model's context.
pub const MAX_RESULTS_LIMIT: usize = 500;
/// Largest `offset` accepted. Paging keeps every match before the page in memory, so an
/// unbounded offset on a broad pattern could exhaust it; 200 pages deep, narrowing is the
/// better tool anyway.
pub const MAX_OFFSET: usize = 10_000;
/// Longest matched-line text returned (in characters, after trimming surrounding whitespace);
/// longer lines are cut to a window around the first match and marked with `…`.
pub const MAX_LINE_CHARS: usize = 200;
/// Result count above which a configured ranker is consulted: the default page size, since a
/// search whose matches all fit on the first page loses nothing unranked (BENCHMARKS.md, "Local
/// prefilter").
pub const DEFAULT_RANK_THRESHOLD: usize = DEFAULT_MAX_RESULTS;
/// How many of a ranker's best results are shown at most (the size evaluated in BENCHMARKS.md).
pub const DEFAULT_RANK_SHOWN: usize = 10;
/// Most candidates a ranker is asked to order; broader searches are paged, not ranked.
pub const DEFAULT_MAX_RANK_CANDIDATES: usize = 200;

/// What to search for and which page to return.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchRequest {
    /// A regex (Rust `regex` syntax, as rg) or, with `literal`, a fixed string. Matched per line.
    pub pattern: String,
    /// Treat `pattern` as a fixed string.
    pub literal: bool,
    /// Match case-insensitively.
    pub case_insensitive: bool,
    /// rg-style globs relative to the workspace root: `*.rs`, `src/**`; a leading `!` excludes.
    pub globs: Vec<String>,
    /// Subdirectory or file to search, relative to the workspace root (default: the whole root).
    pub path: Option<String>,
    /// Page size (clamped to [`MAX_RESULTS_LIMIT`]); 0 counts without listing.
    pub max_results: usize,
    /// Matches to skip, in (path, line) order (at most [`MAX_OFFSET`]).
    pub offset: usize,
    /// Disable ranking: list every match in (path, line) order, paged by `offset`.
    pub all: bool,
    /// What the caller is looking for, in words; only used to rank (defaults to `pattern`).
    pub intent: Option<String>,
}

impl Default for SearchRequest {
    fn default() -> Self {
        Self {
            pattern: String::new(),
            literal: false,
            case_insensitive: false,
            globs: Vec::new(),
            path: None,
            max_results: DEFAULT_MAX_RESULTS,
            offset: 0,
            all: false,
            intent: None,
        }
    }
}

impl SearchRequest {
    /// A request for `pattern` with every other field at its default.
    pub fn new(pattern: impl Into<String>) -> Self {
        Self {
            pattern: pattern.into(),
            ..Self::default()
        }
    }

    /// The page size actually used.
    pub fn effective_max_results(&self) -> usize {
        self.max_results.min(MAX_RESULTS_LIMIT)
    }
}

/// One matching line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Match {
    /// Path relative to the workspace root, `/`-separated.
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The line without surrounding whitespace, cut to [`MAX_LINE_CHARS`] if longer.
    pub text: String,
    /// The text was cut (it starts and/or ends with `…`).
    pub truncated: bool,
}

impl Match {
    /// `path:line: text`, the one-line form used in listings and ranking candidates.
    pub fn summary(&self) -> String {
        format!("{}:{}: {}", self.path, self.line, self.text)
    }
}

/// One page of a search in (path, line) order, with exact totals.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SearchResults {
    /// Matches `offset..offset + matches.len()` of the whole ordered result set.
    pub matches: Vec<Match>,
    /// Every matching line in the searched files (all counted, not estimated).
    pub total_matches: u64,
    /// Files with at least one matching line.
    pub files_with_matches: u64,
    /// The offset this page starts at.
    pub offset: usize,
    /// The page size used (after clamping).
    pub max_results: usize,
    /// Directories left out because an ignore file in them is not a plain file.
    #[serde(default)]
    pub not_searched: NotSearched,
}

impl SearchResults {
    /// Matches after this page.
    pub fn remaining(&self) -> u64 {
        self.total_matches
            .saturating_sub(self.offset as u64)
            .saturating_sub(self.matches.len() as u64)
    }
}

/// Why a search could not run. Messages are written for the agent or person who asked.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The pattern is empty; it would match every line.
    #[error("empty pattern: give a regex or a literal string to search for")]
    EmptyPattern,
    /// The regex did not compile (or contains a line break, which never matches per line).
    #[error("invalid regex {pattern:?}: {message} (pass literal=true to search for it as text)")]
    InvalidPattern {
        /// The pattern as given.
        pattern: String,
        /// The regex engine's explanation.
        message: String,
    },
    /// A glob did not parse.
    #[error("invalid glob {glob:?}: {message}")]
    InvalidGlob {
        /// The glob as given.
        glob: String,
        /// The glob parser's explanation.
        message: String,
    },
    /// The offset is beyond [`MAX_OFFSET`].
    #[error(
        "offset {offset} is beyond the paging limit ({MAX_OFFSET}): narrow the search with globs or path"
    )]
    OffsetTooLarge {
        /// The offset as given.
        offset: usize,
    },
    /// The search path resolves outside the workspace root.
    #[error("path {path:?} is outside the workspace; give a path relative to the workspace root")]
    OutsideWorkspace {
        /// The path as given.
        path: String,
    },
    /// The search path does not exist.
    #[error("path {path:?} does not exist in the workspace")]
    PathNotFound {
        /// The path as given.
        path: String,
    },
    /// An ignore file the walk would read from the search's start or a directory above it is
    /// not a plain file.
    #[error(
        "not searched: {path}: {why}; pith reads .gitignore and .ignore only as regular files \
         of at most 1 MiB (a link to one inside the workspace is fine): replace it with one, \
         or search another path"
    )]
    UnsafeIgnoreFile {
        /// The directory as said: "the workspace root", or quoted relative to it.
        path: String,
        /// What is wrong with its ignore file.
        why: String,
    },
    /// The workspace root itself cannot be used.
    #[error("cannot use workspace root {root}")]
    Root {
        /// The root as given.
        root: PathBuf,
        /// Why it could not be resolved.
        source: std::io::Error,
    },
}
