//! Search plus optional ranking, and the text an agent reads.
//!
//! Ranking rules (issue 3): a ranker only reorders; the report says how many matches it withheld
//! and how to get all of them (`all: true`); any failure shows the plain page with nothing
//! withheld; a ranked report names the ranker.

use std::fmt::Write as _;
use std::path::Path;

use serde::Serialize;

use crate::walk::{Collected, collect};
use crate::{MAX_LINE_CHARS, MAX_OFFSET, Match, NotSearched, SearchError, SearchRequest};

/// One search result offered to a ranker.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Candidate {
    /// Position in the candidate list (0-based); a ranking is an ordering of these ids.
    pub id: usize,
    /// The file, relative to the workspace root (candidates come in path order, so one file's
    /// candidates are adjacent).
    pub path: String,
    /// `path:line: matched text`, one line.
    pub summary: String,
}

/// Orders search results by relevance (a local model, in pith-prefilter).
///
/// Implementations must fail open: anything short of a definitive answer is an `Err` with the
/// reason, which the report shows in one line above the plain page.
pub trait Ranker {
    /// Who ranked, for the disclosure line ("pith: ranked by NAME: ..."), e.g. `local model
    /// qwen2.5-coder:1.5b (Ollama)`.
    fn name(&self) -> String;

    /// Largest candidate list this ranker accepts; broader searches are paged, not ranked.
    fn max_candidates(&self) -> usize {
        crate::DEFAULT_MAX_RANK_CANDIDATES
    }

    /// The ids of at most `want` candidates most relevant to `query`, most relevant first: at
    /// least one, none twice. `Err` says in a few words why there is no definitive answer
    /// (unreachable, still loading, timed out, malformed reply, ...).
    fn rank(
        &self,
        query: &str,
        candidates: &[Candidate],
        want: usize,
    ) -> Result<Vec<usize>, String>;
}

/// When a ranker is asked, and how much of its answer is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankPolicy {
    /// Rank only searches with more matches than this.
    pub threshold: usize,
    /// Show the ranker's best this many (at most the request's page size).
    pub shown: usize,
}

impl Default for RankPolicy {
    fn default() -> Self {
        Self {
            threshold: crate::DEFAULT_RANK_THRESHOLD,
            shown: crate::DEFAULT_RANK_SHOWN,
        }
    }
}

/// Whether and how a report was ranked.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Ranking {
    /// Path order: no ranker, `all`, a later page (`offset > 0`), or too few or too many matches.
    NotApplied,
    /// Ranked: `matches` is the ranker's best prefix, most relevant first.
    Ranked {
        /// The ranker's name.
        by: String,
    },
    /// The ranker was asked and gave no definitive order: path order, nothing withheld beyond
    /// the page, and a line that says so.
    FailedOpen {
        /// The ranker's name.
        by: String,
        /// Why, in a few words (e.g. `the model is still loading`).
        reason: String,
    },
}

/// The result of [`search_workspace`]: structured data plus [`SearchReport::render`].
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SearchReport {
    /// The matches shown, in display order (ranked, or path then line).
    pub matches: Vec<Match>,
    /// Every matching line.
    pub total_matches: u64,
    /// Files with at least one matching line.
    pub files_with_matches: u64,
    /// Offset of the first shown match in path order (0 when ranked).
    pub offset: usize,
    /// Page size used (after clamping).
    pub max_results: usize,
    /// Matches not shown in this report (before the offset, after the page, or not in the
    /// ranked prefix).
    pub withheld: u64,
    /// Offset of the next path-order page, when there is one (never set when ranked: the way
    /// to the rest is `all: true`).
    pub next_offset: Option<usize>,
    /// Whether a ranker ordered `matches`.
    pub ranking: Ranking,
    /// Directories left out because an ignore file in them is not a plain file.
    #[serde(skip_serializing_if = "NotSearched::is_empty")]
    pub not_searched: NotSearched,
}

/// Searches like [`crate::search`] and, when `ranker` is given, the request is a first page
/// without `all`, and there are more than `policy.threshold` matches (but no more than the
/// ranker's [`Ranker::max_candidates`]), asks the ranker for its best
/// `min(max_results, policy.shown)` and shows those.
///
/// The ranker's answer is checked again here (one to that many distinct ids, each a candidate);
/// anything else, or `Err`, gives the plain path-order page with [`Ranking::FailedOpen`].
pub fn search_workspace(
    root: &Path,
    req: &SearchRequest,
    ranker: Option<&dyn Ranker>,
    policy: RankPolicy,
) -> Result<SearchReport, SearchError> {
    let threshold = policy.threshold;
    let max_results = req.effective_max_results();
    let ranker = ranker.filter(|_| !req.all && req.offset == 0 && max_results > 0);
    let rank_capacity = ranker.map_or(0, |ranker| ranker.max_candidates());
    let keep = req.offset.saturating_add(max_results).max(rank_capacity);
    let collected = collect(root, req, keep)?;

    let mut ranking = Ranking::NotApplied;
    if let Some(ranker) = ranker {
        let total = collected.total_matches;
        if total > threshold as u64 && total <= rank_capacity as u64 {
            let by = ranker.name();
            let shown = max_results
                .min(policy.shown.max(1))
                .min(collected.first.len());
            match ask_ranker(ranker, req, &collected.first, shown) {
                Ok(picked) => return Ok(ranked_report(collected, &picked, max_results, by)),
                Err(reason) => {
                    tracing::info!(ranker = %by, %reason, "search: no ranking; showing path order");
                    ranking = Ranking::FailedOpen { by, reason };
                }
            }
        }
    }

    let page = collected.into_page(req.offset, max_results);
    let end = page.offset.saturating_add(page.matches.len());
    let next_offset = (page.remaining() > 0).then_some(end);
    Ok(SearchReport {
        withheld: page.total_matches.saturating_sub(page.matches.len() as u64),
        matches: page.matches,
        total_matches: page.total_matches,
        files_with_matches: page.files_with_matches,
        offset: page.offset,
        max_results,
        next_offset,
        ranking,
        not_searched: page.not_searched,
    })
}

/// The ranker's pick among `first` (the matches kept in path order), checked here: one to
/// `shown` distinct result numbers, each a candidate; else why not.
fn ask_ranker(
    ranker: &dyn Ranker,
    req: &SearchRequest,
    first: &[Match],
    shown: usize,
) -> Result<Vec<usize>, String> {
    let candidates: Vec<Candidate> = first
        .iter()
        .enumerate()
        .map(|(id, found)| Candidate {
            id,
            path: found.path.clone(),
            summary: found.summary(),
        })
        .collect();
    let query = req
        .intent
        .as_deref()
        .map(str::trim)
        .filter(|intent| !intent.is_empty())
        .unwrap_or(&req.pattern);
    ranker.rank(query, &candidates, shown).and_then(|picked| {
        if is_selection(&picked, shown, candidates.len()) {
            Ok(picked)
        } else {
            Err(format!(
                "its answer was not 1-{shown} distinct result numbers"
            ))
        }
    })
}

/// The report of the matches the ranker `by` picked, in its order.
fn ranked_report(
    collected: Collected,
    picked: &[usize],
    max_results: usize,
    by: String,
) -> SearchReport {
    let total = collected.total_matches;
    let mut slots: Vec<Option<Match>> = collected.first.into_iter().map(Some).collect();
    let matches: Vec<Match> = picked
        .iter()
        .filter_map(|&id| slots.get_mut(id).and_then(Option::take))
        .collect();
    SearchReport {
        withheld: total.saturating_sub(matches.len() as u64),
        matches,
        total_matches: total,
        files_with_matches: collected.files_with_matches,
        offset: 0,
        max_results,
        next_offset: None,
        ranking: Ranking::Ranked { by },
        not_searched: collected.not_searched,
    }
}

/// One to `most` ids, each in `0..len`, none twice.
fn is_selection(picked: &[usize], most: usize, len: usize) -> bool {
    if picked.is_empty() || picked.len() > most {
        return false;
    }
    let mut seen = vec![false; len];
    picked.iter().all(|&id| match seen.get_mut(id) {
        Some(slot) if !*slot => {
            *slot = true;
            true
        }
        _ => false,
    })
}

/// Longest reason shown for a failed ranking (characters).
const MAX_REASON_CHARS: usize = 300;

/// `text` on one line (control characters as spaces), cut to [`MAX_REASON_CHARS`] with `…`.
fn one_line(text: &str) -> String {
    let mut line: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(MAX_REASON_CHARS)
        .collect();
    if text.chars().nth(MAX_REASON_CHARS).is_some() {
        line.push('…');
    }
    line
}

fn plural(count: u64, one: &str, many: &str) -> String {
    if count == 1 {
        format!("{count} {one}")
    } else {
        format!("{count} {many}")
    }
}

impl SearchReport {
    /// The report as text: one `path:line: text` line per shown match, and a line that says
    /// what is shown, how many matches exist, and how to get the rest (a ranked report starts
    /// with the disclosure line instead).
    pub fn render(&self) -> String {
        let mut out = String::new();
        let matches = plural(self.total_matches, "match", "matches");
        let files = plural(self.files_with_matches, "file", "files");
        match &self.ranking {
            Ranking::Ranked { by } => {
                let _ = writeln!(
                    out,
                    "pith: ranked by {by}: the {} most relevant of {matches} in \
                     {files}, most relevant first; {} withheld. Pass all=true to list every match \
                     in path order.",
                    self.matches.len(),
                    self.withheld,
                );
            }
            Ranking::FailedOpen { by, reason } => {
                let _ = writeln!(
                    out,
                    "pith: not ranked by {by} ({}); matches in path order.",
                    one_line(reason)
                );
            }
            Ranking::NotApplied => {}
        }
        for found in &self.matches {
            let _ = writeln!(out, "{}", found.summary());
        }
        if !matches!(self.ranking, Ranking::Ranked { .. }) {
            out.push_str(&self.summary_line(&matches, &files));
            out.push('\n');
        }
        if self.not_searched.total > 0 {
            let named: Vec<String> = self.not_searched.dirs.iter().map(|d| one_line(d)).collect();
            let more = self.not_searched.total - named.len() as u64;
            let _ = writeln!(
                out,
                "Not searched: {} (pith reads .gitignore and .ignore only as regular files of at \
                 most 1 MiB){}.",
                named.join(", "),
                if more > 0 {
                    format!(" and {more} more directories")
                } else {
                    String::new()
                }
            );
        }
        if self.matches.iter().any(|found| found.truncated) {
            let _ = writeln!(
                out,
                "Long lines are cut to {MAX_LINE_CHARS} characters around the match (marked …)."
            );
        }
        out
    }

    fn summary_line(&self, matches: &str, files: &str) -> String {
        let shown = self.matches.len() as u64;
        if self.total_matches == 0 {
            return "No matches (ignored, hidden and binary files are not searched).".to_owned();
        }
        if self.max_results == 0 {
            return format!("{matches} in {files} (max_results=0: counts only).");
        }
        if shown == self.total_matches {
            return format!("{matches} in {files}.");
        }
        if shown == 0 {
            return format!(
                "No matches at offset {}: there are {matches} in {files} (offsets 0-{}).",
                self.offset,
                self.total_matches - 1
            );
        }
        let first = self.offset + 1;
        let last = self.offset + self.matches.len();
        let mut line = format!(
            "Showing matches {first}-{last} of {matches} in {files} (sorted by path, then line)."
        );
        match self.next_offset {
            Some(next) if next <= MAX_OFFSET => {
                let more = self.total_matches.saturating_sub(next as u64);
                let _ = write!(
                    line,
                    " {more} more: pass offset={next} for the next page, or narrow with globs/path."
                );
            }
            Some(next) => {
                let more = self.total_matches.saturating_sub(next as u64);
                let _ = write!(
                    line,
                    " {more} more, past the paging limit (offset {MAX_OFFSET}): narrow with globs/path."
                );
            }
            None => line.push_str(" This is the last page."),
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selection_check_rejects_everything_but_distinct_candidates() {
        assert!(is_selection(&[2, 0, 1], 3, 3));
        assert!(is_selection(&[2, 0], 2, 3));
        assert!(is_selection(&[2, 0], 3, 3));
        assert!(!is_selection(&[], 3, 3));
        assert!(!is_selection(&[2, 0, 0], 3, 3));
        assert!(!is_selection(&[2, 0, 3], 3, 3));
        assert!(!is_selection(&[2, 0, 1, 1], 3, 3));
        assert!(!is_selection(&[2, 1], 1, 3));
    }

    #[test]
    fn a_reason_is_shown_on_one_short_line() {
        assert_eq!(one_line("a\nb\tc"), "a b c");
        assert_eq!(
            one_line(&"x".repeat(500)).chars().count(),
            MAX_REASON_CHARS + 1
        );
    }
}
