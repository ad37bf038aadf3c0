//! Ranking a search's matches by file, from lexical signals fused by reciprocal rank fusion: the
//! query's terms in each file's path and in its matched lines, how many lines of the file
//! matched, and path order (the order the search lists files in). Files, not lines, are what an agent opens, and what the
//! evaluation's answers are; each file's best line is then shown (more per file when asked),
//! so the lines shown cover more files than a page in path order does.
//!
//! Each signal orders the files; a file's score is the sum over signals of `1 / (K + rank)`
//! (Cormack, Clarke and Büttcher's reciprocal rank fusion, K = 60). Rank fusion needs no
//! weights tuned to the scores' scales, which is what lets a model's order (when there is one)
//! join the lexical ones as one more list.

use std::collections::HashMap;

use pith_search::{Candidate, Ranker};

/// How the signals' ranks are fused: a file's score is the sum over signals of
/// `weight / (k + rank)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fusion {
    /// The constant that flattens the ranks: with 60 (the published default) a first place
    /// adds 1/61 and a tenth 1/70; a smaller one makes the top places count more.
    pub k: f64,
    /// The query's terms in the path.
    pub path: f64,
    /// The query's terms in the file's best line (and in all of them, to break ties).
    pub line: f64,
    /// How many of the file's lines matched.
    pub density: f64,
    /// Path order (the search lists files sorted by path).
    pub order: f64,
    /// Each further order given (a model's).
    pub more: f64,
}

impl Default for Fusion {
    fn default() -> Self {
        Self {
            k: 60.0,
            path: 1.0,
            line: 1.0,
            density: 1.0,
            order: 1.0,
            more: 1.0,
        }
    }
}

/// Lines shown per file unless set otherwise: one, the file's best, so the lines shown name as
/// many files as they can (on the project's evaluation, 10 lines held 0.99 of the answer files
/// at one a file, 0.93 at two, 0.91 at three: BENCHMARKS.md, "Lexical file ranking").
pub const DEFAULT_LINES_PER_FILE: usize = 1;

/// Words too common in a question to say anything about code.
const STOP_WORDS: &[&str] = &[
    "about", "after", "and", "are", "does", "for", "from", "has", "have", "how", "into", "its",
    "not", "one", "that", "the", "their", "them", "then", "there", "this", "when", "where",
    "which", "while", "who", "why", "with", "what", "was", "were", "will", "would", "than", "each",
    "any", "all", "out", "use", "used", "uses", "can", "before", "gets", "get", "way",
];

/// The longest query read (characters), as a model is shown it: an agent's `intent` is a
/// sentence, and each term is checked against every candidate line.
pub const MAX_QUERY_CHARS: usize = 300;
/// The most terms read of a query.
pub const MAX_TERMS: usize = 32;

/// The query's terms: lower-case words of three letters or more, stop words left out, each
/// once, from its first [`MAX_QUERY_CHARS`] characters, at most [`MAX_TERMS`].
pub fn terms(query: &str) -> Vec<String> {
    let cut: String = query.chars().take(MAX_QUERY_CHARS).collect();
    let mut seen = std::collections::HashSet::new();
    words(&cut)
        .into_iter()
        .filter(|w| w.len() >= 3 && !STOP_WORDS.contains(&w.as_str()))
        .filter(|w| seen.insert(w.clone()))
        .take(MAX_TERMS)
        .collect()
}

/// Lower-case words of `text`, split at anything not a letter or digit and at a change from
/// lower to upper case (`sessionId` is `session`, `id`).
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut previous_lower = false;
    for c in text.chars() {
        if !c.is_alphanumeric() {
            if !word.is_empty() {
                out.push(std::mem::take(&mut word));
            }
            previous_lower = false;
            continue;
        }
        if c.is_uppercase() && previous_lower && !word.is_empty() {
            out.push(std::mem::take(&mut word));
        }
        previous_lower = c.is_lowercase() || c.is_ascii_digit();
        word.extend(c.to_lowercase());
    }
    if !word.is_empty() {
        out.push(word);
    }
    out
}

/// Whether a query term names a word of the text: the same word, or one a prefix of the other
/// with at least four letters in common (`defer` and `deferral`, `timeouts` and `timeout`).
fn names(term: &str, word: &str) -> bool {
    if term == word {
        return true;
    }
    let (short, long) = if term.len() <= word.len() {
        (term, word)
    } else {
        (word, term)
    };
    short.len() >= 4 && long.starts_with(short)
}

/// How many of `terms` name some word of `text`.
fn terms_in(terms: &[String], text: &str) -> usize {
    let words = words(text);
    terms
        .iter()
        .filter(|t| words.iter().any(|w| names(t, w)))
        .count()
}

/// The matched text of a candidate (its summary without `path:line: `).
pub fn line_text(candidate: &Candidate) -> &str {
    let rest = candidate
        .summary
        .strip_prefix(candidate.path.as_str())
        .unwrap_or(&candidate.summary);
    let rest = rest.trim_start_matches(':');
    match rest.split_once(": ") {
        Some((number, text)) if number.bytes().all(|b| b.is_ascii_digit()) => text,
        _ => rest,
    }
}

/// One file among the candidates, with what the signals read of it.
struct File<'a> {
    path: &'a str,
    /// Its candidates' ids, in path order.
    lines: Vec<usize>,
    /// The query's terms in its path.
    in_path: usize,
    /// The most query terms in one of its lines, and their sum over its lines.
    best_line: usize,
    all_lines: usize,
}

/// The files of `candidates` best first, by reciprocal rank fusion of the lexical signals and
/// of `more` (other orders of the files, by path: a model's, say).
pub fn rank_files<'a>(
    query: &str,
    candidates: &'a [Candidate],
    more: &[Vec<&str>],
    fusion: &Fusion,
) -> Vec<(&'a str, Vec<usize>)> {
    let Read {
        files,
        at,
        line_terms,
    } = read_files(&terms(query), candidates);
    let mut ranks = vec![
        (fusion.path, fractional_ranks(&files, |f| (f.in_path, 0))),
        (
            fusion.line,
            fractional_ranks(&files, |f| (f.best_line, f.all_lines)),
        ),
        (
            fusion.density,
            fractional_ranks(&files, |f| (f.lines.len(), 0)),
        ),
        (fusion.order, (1..=files.len()).map(|r| r as f64).collect()),
    ];
    for list in more {
        ranks.push((fusion.more, listed_ranks(list, &at, files.len())));
    }
    let mut score = vec![0.0; files.len()];
    for (weight, rank) in &ranks {
        for (i, &r) in rank.iter().enumerate() {
            score[i] += weight / (fusion.k + r);
        }
    }
    let mut ranked: Vec<usize> = (0..files.len()).collect();
    ranked.sort_by(|&a, &b| score[b].total_cmp(&score[a]));
    ranked
        .into_iter()
        .map(|i| {
            let file = &files[i];
            // A file's lines, those with the most query terms first.
            let mut lines = file.lines.clone();
            lines.sort_by_key(|&id| std::cmp::Reverse(line_terms.get(id).copied().unwrap_or(0)));
            (file.path, lines)
        })
        .collect()
}

/// The candidates read per file, in the order files first appear.
struct Read<'a> {
    files: Vec<File<'a>>,
    /// Each path's place in `files`.
    at: HashMap<&'a str, usize>,
    /// The query's terms in each candidate's line, by candidate id.
    line_terms: Vec<usize>,
}

fn read_files<'a>(terms: &[String], candidates: &'a [Candidate]) -> Read<'a> {
    let mut files: Vec<File<'a>> = Vec::new();
    let mut at: HashMap<&str, usize> = HashMap::new();
    let mut line_terms = vec![0; candidates.len()];
    for c in candidates {
        let i = *at.entry(c.path.as_str()).or_insert_with(|| {
            files.push(File {
                path: &c.path,
                lines: Vec::new(),
                in_path: terms_in(terms, &c.path),
                best_line: 0,
                all_lines: 0,
            });
            files.len() - 1
        });
        let n = terms_in(terms, line_text(c));
        if let Some(slot) = line_terms.get_mut(c.id) {
            *slot = n;
        }
        let file = &mut files[i];
        file.lines.push(c.id);
        file.best_line = file.best_line.max(n);
        file.all_lines += n;
    }
    Read {
        files,
        at,
        line_terms,
    }
}

/// A signal as each file's rank (from 1), the signal being `key`, higher first. Files the
/// signal cannot tell apart share the mean of the places they fill (fractional ranking): a
/// signal that says nothing of them favours none, and files it says nothing for sit in the
/// middle, not near the top.
fn fractional_ranks(files: &[File<'_>], key: impl Fn(&File<'_>) -> (usize, usize)) -> Vec<f64> {
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by_key(|&i| std::cmp::Reverse(key(&files[i])));
    let mut rank = vec![0.0; files.len()];
    let mut start = 0;
    while start < order.len() {
        let same = key(&files[order[start]]);
        let end = (start..order.len())
            .find(|&j| key(&files[order[j]]) != same)
            .unwrap_or(order.len());
        // Places start+1 ..= end, their mean.
        let mean = (start + 1 + end) as f64 / 2.0;
        for &i in &order[start..end] {
            rank[i] = mean;
        }
        start = end;
    }
    rank
}

/// Each of `n` files' rank in `list` (an order of paths); files the list leaves out share the
/// mean of the places after it.
fn listed_ranks(list: &[&str], at: &HashMap<&str, usize>, n: usize) -> Vec<f64> {
    let mut rank = vec![f64::NAN; n];
    let mut listed = 0;
    for path in list {
        if let Some(&i) = at.get(path)
            && rank[i].is_nan()
        {
            listed += 1;
            rank[i] = listed as f64;
        }
    }
    let left = (listed + 1 + n) as f64 / 2.0;
    for r in &mut rank {
        if r.is_nan() {
            *r = left;
        }
    }
    rank
}

/// At most `want` candidate ids: up to `per_file` lines of each file in `files`' order, then,
/// when the files run out first, their further lines in the same order.
pub fn pick_lines(files: &[(&str, Vec<usize>)], want: usize, per_file: usize) -> Vec<usize> {
    let per_file = per_file.max(1);
    let mut picked: Vec<usize> = files
        .iter()
        .flat_map(|(_, lines)| lines.iter().take(per_file))
        .take(want)
        .copied()
        .collect();
    if picked.len() < want {
        let more: Vec<usize> = files
            .iter()
            .flat_map(|(_, lines)| lines.iter().skip(per_file))
            .take(want - picked.len())
            .copied()
            .collect();
        picked.extend(more);
    }
    picked
}

/// Refuse a ranking with nothing to rank or nothing wanted (before any costly work).
pub(crate) fn check_wanted(candidates: &[Candidate], want: usize) -> Result<(), String> {
    if candidates.is_empty() || want == 0 {
        return Err("no candidates, or none wanted".to_owned());
    }
    Ok(())
}

/// [`rank_files`] with the lexical signals alone, as a [`Ranker`]: no model, microseconds. The
/// evaluation's baseline (`prefilter_eval --ranker lexical`) for what a model must add.
#[derive(Debug, Clone, Copy)]
pub struct LexicalRanker {
    /// Lines shown per file before the next file.
    pub per_file: usize,
    /// How the signals are fused.
    pub fusion: Fusion,
}

impl Default for LexicalRanker {
    fn default() -> Self {
        Self {
            per_file: DEFAULT_LINES_PER_FILE,
            fusion: Fusion::default(),
        }
    }
}

impl LexicalRanker {
    /// At most `want` candidate ids: the files ranked by the lexical signals and the `more`
    /// orders given (a model's), then their lines picked, `per_file` a file.
    pub fn pick(
        &self,
        query: &str,
        candidates: &[Candidate],
        more: &[Vec<&str>],
        want: usize,
    ) -> Vec<usize> {
        let files = rank_files(query, candidates, more, &self.fusion);
        pick_lines(&files, want, self.per_file)
    }
}

impl Ranker for LexicalRanker {
    fn name(&self) -> String {
        "lexical file ranking (the search's words in paths and lines; no model)".to_owned()
    }

    fn rank(
        &self,
        query: &str,
        candidates: &[Candidate],
        want: usize,
    ) -> Result<Vec<usize>, String> {
        check_wanted(candidates, want)?;
        Ok(self.pick(query, candidates, &[], want))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(id: usize, path: &str, line: usize, text: &str) -> Candidate {
        Candidate {
            id,
            path: path.to_owned(),
            summary: format!("{path}:{line}: {text}"),
        }
    }

    #[test]
    fn terms_are_the_querys_words_that_say_something() {
        assert_eq!(
            terms("where the proxy gives up waiting for the provider's response headers"),
            [
                "proxy", "gives", "waiting", "provider", "response", "headers"
            ]
        );
        assert_eq!(
            words("sessionId session_id HTTPServer"),
            ["session", "id", "session", "id", "httpserver"]
        );
        assert!(names("defer", "deferral") && names("timeouts", "timeout"));
        assert!(!names("def", "default"), "three letters are not enough");
        // A long query is cut: at most MAX_TERMS terms, from its first MAX_QUERY_CHARS.
        let long: String = (0..5_000).map(|i| format!("word{i} ")).collect();
        assert_eq!(terms(&long).len(), MAX_TERMS);
        let late = format!("{} needle", " ".repeat(MAX_QUERY_CHARS));
        assert!(terms(&late).is_empty(), "{:?}", terms(&late));
    }

    /// The file whose path and lines hold the query's terms comes first, though the search lists
    /// it last and another file has more matches; its best line is shown first.
    #[test]
    fn the_file_that_names_the_query_comes_first_with_its_best_line() {
        let candidates = vec![
            candidate(0, "src/a/noise.rs", 1, "let timeout = 3;"),
            candidate(1, "src/a/noise.rs", 2, "timeout();"),
            candidate(2, "src/a/noise.rs", 3, "// timeout"),
            candidate(3, "src/b/other.rs", 9, "timeout"),
            candidate(4, "src/proxy/headers.rs", 5, "fn timeout() {}"),
            candidate(
                5,
                "src/proxy/headers.rs",
                7,
                "let headers = wait_for_response_headers(timeout);",
            ),
        ];
        let files = rank_files(
            "where the proxy waits for the response headers",
            &candidates,
            &[],
            &Fusion::default(),
        );
        let order: Vec<&str> = files.iter().map(|(p, _)| *p).collect();
        assert_eq!(order[0], "src/proxy/headers.rs", "{order:?}");
        assert_eq!(files[0].1, [5, 4], "the line naming more terms first");
        // Two lines per file, then the files' further lines.
        assert_eq!(pick_lines(&files, 5, 2)[..2], [5, 4]);
        assert_eq!(pick_lines(&files, 6, 1).len(), 6);
        // One line a file by default: three files' best lines, the answer's first.
        let picked = LexicalRanker::default()
            .rank("the proxy's response headers", &candidates, 3)
            .unwrap();
        assert_eq!(picked.len(), 3);
        assert_eq!(picked[0], 5);
        let paths: std::collections::BTreeSet<&str> = picked
            .iter()
            .map(|&id| candidates[id].path.as_str())
            .collect();
        assert_eq!(paths.len(), 3, "{picked:?}");
        assert!(LexicalRanker::default().rank("x", &candidates, 0).is_err());
    }

    /// Another order (a model's) joins the fusion as one more list; signals that cannot tell
    /// files apart leave path order.
    #[test]
    fn another_order_moves_its_first_file_up() {
        let candidates = vec![
            candidate(0, "a.rs", 1, "x"),
            candidate(1, "b.rs", 1, "x"),
            candidate(2, "c.rs", 1, "x"),
        ];
        let order = |more: &[Vec<&str>]| -> Vec<&str> {
            rank_files("nothing here", &candidates, more, &Fusion::default())
                .into_iter()
                .map(|(p, _)| p)
                .collect()
        };
        assert_eq!(order(&[]), ["a.rs", "b.rs", "c.rs"]);
        assert_eq!(order(&[vec!["c.rs"]]), ["a.rs", "c.rs", "b.rs"]);
    }
}
