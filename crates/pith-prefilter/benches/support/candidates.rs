//! The candidates both ranking benchmarks rank: the first 200 matches (the most a ranker is
//! given) of `timeout` in this repository's own source, and the intent they are ranked for.

use std::path::Path;

use pith_search::{
    Candidate, DEFAULT_MAX_RANK_CANDIDATES, RankPolicy, SearchRequest, search_workspace,
};

/// The search's pattern.
pub const PATTERN: &str = "timeout";
/// The intent the candidates are ranked for.
pub const INTENT: &str = "where the proxy gives up waiting for the provider's response headers";

/// The repository's root.
pub fn root() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The first matches of [`PATTERN`], as a ranker is given them.
pub fn candidates() -> Vec<Candidate> {
    let all = SearchRequest {
        all: true,
        max_results: DEFAULT_MAX_RANK_CANDIDATES,
        ..SearchRequest::new(PATTERN)
    };
    let report = search_workspace(&root(), &all, None, RankPolicy::default())
        .unwrap_or_else(|e| panic!("the search over this repository failed: {e}"));
    report
        .matches
        .iter()
        .enumerate()
        .map(|(id, m)| Candidate {
            id,
            path: m.path.clone(),
            summary: m.summary(),
        })
        .collect()
}
