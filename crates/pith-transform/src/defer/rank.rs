//! Relevance of tool definitions to the task: BM25 by default, or an injected ranker.

pub use pith_rank::{ToolRanker, ToolText};

use crate::stopwords::is_stopword;

const K1: f64 = 1.2;
const B: f64 = 0.75;

/// Light plural folding (`fails` -> `fail`, `searches` -> `search`), no dictionary.
fn stem(word: &str) -> &str {
    let n = word.len();
    if n > 4
        && (word.ends_with("ches")
            || word.ends_with("shes")
            || word.ends_with("sses")
            || word.ends_with("xes"))
    {
        return &word[..n - 2];
    }
    if n > 3
        && word.ends_with('s')
        && !word.ends_with("ss")
        && !word.ends_with("us")
        && !word.ends_with("is")
    {
        return &word[..n - 1];
    }
    word
}

const ALNUM: u8 = 1;
const UPPER: u8 = 2;
const LOWER_OR_DIGIT: u8 = 4;

/// Character classes of ASCII bytes, so the word loop is one table load per byte.
const ASCII_CLASS: [u8; 128] = {
    let mut table = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        table[b] = if c.is_ascii_uppercase() {
            ALNUM | UPPER
        } else if c.is_ascii_lowercase() || c.is_ascii_digit() {
            ALNUM | LOWER_OR_DIGIT
        } else {
            0
        };
        b += 1;
    }
    table
};

/// Calls `f` with each word of `text` as it is written, and whether it is ASCII:
/// alphanumeric runs, split where a lowercase letter or digit meets an uppercase one
/// (`readFile` -> `read`, `File`).
fn for_each_word<'t>(text: &'t str, mut f: impl FnMut(&'t str, bool)) {
    let mut start: Option<usize> = None;
    let mut ascii = true;
    let mut prev_lower = false;
    for (at, &b) in text.as_bytes().iter().enumerate() {
        let class = match ASCII_CLASS.get(usize::from(b)) {
            Some(&class) => class,
            // A UTF-8 continuation byte belongs to the character its lead byte classified.
            None if b & 0xC0 == 0x80 => continue,
            None => non_ascii_class(text.get(at..).and_then(|t| t.chars().next())),
        };
        if class & ALNUM == 0 {
            if let Some(s) = start.take() {
                f(&text[s..at], ascii);
            }
            prev_lower = false;
            continue;
        }
        if class & UPPER != 0
            && prev_lower
            && let Some(s) = start.take()
        {
            f(&text[s..at], ascii);
        }
        if start.is_none() {
            start = Some(at);
            ascii = true;
        }
        ascii &= b.is_ascii();
        prev_lower = class & LOWER_OR_DIGIT != 0;
    }
    if let Some(s) = start {
        f(&text[s..], ascii);
    }
}

fn non_ascii_class(c: Option<char>) -> u8 {
    match c {
        Some(c) if c.is_uppercase() => ALNUM | UPPER,
        Some(c) if c.is_lowercase() || c.is_numeric() => ALNUM | LOWER_OR_DIGIT,
        Some(c) if c.is_alphanumeric() => ALNUM,
        _ => 0,
    }
}

/// `word` lowercased and plural-folded into `buf`; `None` for a stopword.
fn normalize<'b>(word: &str, buf: &'b mut String) -> Option<&'b str> {
    buf.clear();
    if word.is_ascii() {
        buf.extend(word.bytes().map(|b| char::from(b.to_ascii_lowercase())));
    } else {
        buf.extend(word.chars().flat_map(char::to_lowercase));
    }
    (!is_stopword(buf)).then(|| stem(buf))
}

/// Whether a whitespace-separated token of a task names a file: `calc.py`, `src/main.rs`,
/// `./run`, `Makefile/`. An extension must hold a letter (`1.5` is a number), and a URL is not
/// a file (`webfetch` should win it, not the file tools).
fn names_a_file(token: &str) -> bool {
    let token = token
        .trim_matches(|c: char| !(c.is_alphanumeric() || matches!(c, '.' | '/' | '_' | '-' | '~')));
    let token = token.trim_end_matches('.');
    if token.contains("://") || !token.chars().any(char::is_alphanumeric) {
        return false;
    }
    if token.contains('/') {
        return true;
    }
    match token.rsplit_once('.') {
        Some((stem, extension)) => {
            // `e.g.` is an abbreviation; a one-letter stem is rarely a file (`a.c` loses out).
            stem.chars().count() >= 2
                && (1..=8).contains(&extension.len())
                && extension.chars().all(char::is_alphanumeric)
                && extension.chars().any(char::is_alphabetic)
        }
        None => false,
    }
}

/// The word a task gains when it names a file: the tools that read, write, edit and search
/// files describe themselves with it, and a task that names a file needs them, though it
/// rarely says so ("fix calc.py" means "read calc.py, then edit it").
const FILE_TERM: &str = "file";

/// Okapi BM25 (k1 = 1.2, b = 0.75) of each tool's name, description and arguments (names and
/// descriptions: the fields the provider's own tool search reads) against `query`.
/// Query words are lowercased, stopwords dropped and plurals folded; a query that names a file
/// (see [`names_a_file`]) also counts the word `file`. A tool's length counts all its words.
pub fn bm25_scores(query: &str, tools: &[ToolText<'_>]) -> Vec<f64> {
    let mut buf = String::new();
    let mut terms: Vec<String> = Vec::new();
    for_each_word(query, |w, _| {
        if let Some(t) = normalize(w, &mut buf)
            && !terms.iter().any(|q| q == t)
        {
            terms.push(t.to_owned());
        }
    });
    if query.split_whitespace().any(names_a_file) && !terms.iter().any(|q| q == FILE_TERM) {
        terms.push(FILE_TERM.to_owned());
    }
    let mut scores = vec![0.0; tools.len()];
    if terms.is_empty() || tools.is_empty() {
        return scores;
    }
    // A word can only normalize to a term if it starts with the term's first letter and is
    // at most two bytes longer (a folded plural); most words fail this without normalizing.
    let mut first_bytes = [false; 256];
    for t in &terms {
        if let Some(&b) = t.as_bytes().first() {
            first_bytes[usize::from(b)] = true;
        }
    }
    let could_match = |w: &str, ascii: bool| {
        let Some(&first) = w.as_bytes().first() else {
            return false;
        };
        !ascii
            || (first_bytes[usize::from(first.to_ascii_lowercase())]
                && terms
                    .iter()
                    .any(|t| (t.len()..=t.len() + 2).contains(&w.len())))
    };
    let width = terms.len();
    let mut tf = vec![0u32; tools.len() * width];
    let mut lengths = vec![0u32; tools.len()];
    for (d, tool) in tools.iter().enumerate() {
        let row = &mut tf[d * width..(d + 1) * width];
        let mut length = 0u32;
        for text in [tool.name, tool.description, tool.arguments] {
            for_each_word(text, |w, ascii| {
                length += 1;
                if could_match(w, ascii)
                    && let Some(t) = normalize(w, &mut buf)
                    && let Some(q) = terms.iter().position(|q| q == t)
                {
                    row[q] += 1;
                }
            });
        }
        lengths[d] = length;
    }
    let n = tools.len() as f64;
    let average = (lengths.iter().map(|&l| f64::from(l)).sum::<f64>() / n).max(1.0);
    for q in 0..width {
        let df = (0..tools.len()).filter(|&d| tf[d * width + q] > 0).count() as f64;
        if df == 0.0 {
            continue;
        }
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        for (d, score) in scores.iter_mut().enumerate() {
            let f = f64::from(tf[d * width + q]);
            if f > 0.0 {
                let norm = 1.0 - B + B * f64::from(lengths[d]) / average;
                *score += idf * f * (K1 + 1.0) / (f + K1 * norm);
            }
        }
    }
    scores
}

/// Indices of `scores` from most to least relevant, ties in original order.
pub(super) fn by_relevance(scores: &[f64]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tool<'a>(name: &'a str, description: &'a str) -> ToolText<'a> {
        ToolText {
            name,
            description,
            arguments: "",
            definition: "",
        }
    }

    #[test]
    fn terms_split_case_and_fold_plurals() {
        let mut buf = String::new();
        let mut terms = Vec::new();
        for_each_word(
            "readFile the jira_issues, Searches HTTPServer ÜberTool naïve",
            |w, _| {
                if let Some(t) = normalize(w, &mut buf) {
                    terms.push(t.to_owned());
                }
            },
        );
        assert_eq!(
            terms,
            [
                "read",
                "file",
                "jira",
                "issue",
                "search",
                "httpserver",
                "über",
                "tool",
                "naïve"
            ]
        );
    }

    #[test]
    fn bm25_prefers_matching_tools_and_keeps_order_on_ties() {
        let tools = [
            tool("jira_search", "Search Jira issues"),
            tool("bash", "Run a shell command, e.g. run the tests"),
            tool("read", "Read a file"),
            tool("write", "Write a file"),
        ];
        let scores = bm25_scores("the tests fail, please run them", &tools);
        assert!(scores[1] > 0.0);
        assert_eq!(by_relevance(&scores), [1, 0, 2, 3]);
        assert_eq!(by_relevance(&bm25_scores("", &tools)), [0, 1, 2, 3]);
    }

    #[test]
    fn arguments_count_like_the_description() {
        let mut tools = [
            tool("lookup", "Look things up"),
            tool("jira_search", "Search Jira issues"),
        ];
        assert_eq!(bm25_scores("fix the failing test", &tools)[0], 0.0);
        tools[0].arguments = "test_name\nThe failing test to look up\n";
        let scores = bm25_scores("fix the failing test", &tools);
        assert!(scores[0] > 0.0);
        assert_eq!(by_relevance(&scores), [0, 1]);
    }

    #[test]
    fn file_names_are_recognised_and_numbers_and_urls_are_not() {
        for token in [
            "calc.py",
            "\"calc.py\"",
            "src/main.rs,",
            "./run",
            "README.md.",
            "(lib/util.ts)",
            "~/.bashrc",
        ] {
            assert!(names_a_file(token), "{token} names a file");
        }
        for token in [
            "1.5",
            "e.g.",
            "fix",
            "v2.0",
            "https://example.test/a.html",
            "...",
            "/",
        ] {
            assert!(!names_a_file(token), "{token} does not name a file");
        }
    }

    #[test]
    fn a_task_that_names_a_file_ranks_the_file_tools() {
        let tools = [
            tool("jira_search", "Search Jira issues"),
            tool("bash", "Run a shell command, e.g. run the tests"),
            tool("read", "Read a file from the local filesystem"),
            tool("fetch", "Fetch a URL"),
        ];
        let order = by_relevance(&bm25_scores("the tests fail, fix calc.py", &tools));
        assert_eq!(order[..2], [2, 1], "read, then bash: {order:?}");
        // Without a file name the word is not added.
        let scores = bm25_scores("the tests fail, fix the calculator", &tools);
        assert_eq!(scores[2], 0.0);
    }
}
