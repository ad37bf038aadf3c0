//! Each line's score for the query: the terms of the call and of what came after, weighted
//! by source and rarity; quoted phrases, named definitions and built types above any term.

use std::collections::HashMap;

use memchr::memmem;

use super::Query;
use super::around::{DEFINES, declared};
use super::must_keep::DISTINCTIVE;

/// A term shorter than this does not rank lines.
pub(super) const MIN_TERM: usize = 3;

/// A search's line without what the search put before the text it found: `grep -n`'s
/// `path:12:` or `rg`'s, OpenCode's `Line 12: `.
pub(super) fn found_text(line: &str) -> &str {
    if let Some(rest) = line.trim_start().strip_prefix("Line ")
        && let Some((number, text)) = rest.split_once(": ")
        && !number.is_empty()
        && number.bytes().all(|b| b.is_ascii_digit())
    {
        return text;
    }
    let mut parts = line.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(path), Some(number), Some(text))
            if !path.is_empty()
                && !path.contains(char::is_whitespace)
                && !number.is_empty()
                && number.bytes().all(|b| b.is_ascii_digit()) =>
        {
            text
        }
        _ => line,
    }
}

/// [`scores_with`] the call's paths ranking lines too.
#[cfg(test)]
pub(super) fn scores(
    content: &[&str],
    sides: &[Option<u8>],
    pointed: &[Option<bool>],
    query: &Query<'_>,
) -> Vec<f64> {
    scores_with(content, sides, pointed, query, true)
}

/// Each line's score: the weight of every query term it holds, each term weighted by its
/// source and by how few lines hold it; the call's paths (its tokens holding a `/` or a `.`) are
/// terms only with `call_paths_rank`.
pub(super) fn scores_with(
    content: &[&str],
    sides: &[Option<u8>],
    pointed: &[Option<bool>],
    query: &Query<'_>,
    call_paths_rank: bool,
) -> Vec<f64> {
    let mut scores = vec![0.0; content.len()];
    let text = Lowered::new(content);
    // Each source's strings and their weight.
    let sources: [(Source, &[&str], f64); 3] = [
        (Source::LaterInput, &query.later_inputs, 3.0),
        (Source::Call, &query.call, 2.0),
        (Source::Prose, &query.later_text, 1.5),
    ];
    let mut seen = std::collections::HashSet::new();
    let n = content.len() as f64;
    for (source, strings, weight) in sources {
        let skip_paths = source == Source::Call && !call_paths_rank;
        let from_prose = source == Source::Prose;
        // A token of the query (`crates/pith-ledger/Cargo.toml`) counts once on a line: its
        // best-matching part, not each of its parts (a line holding `Cargo.toml` is one
        // match of that path, not three).
        for token in strings.iter().flat_map(|s| token_terms(s)) {
            let is_path = token.first().is_some_and(|t| t.contains(['/', '.']));
            if skip_paths && is_path {
                continue;
            }
            let mut best: HashMap<usize, f64> = HashMap::new();
            // The prose says "asserts" and "parsed" of the code's `assert_eq!` and `parse`:
            // its words match by their stems too (a path and a name are matched as written).
            let token: Vec<String> = if from_prose && !is_path {
                token
                    .iter()
                    .flat_map(|t| std::iter::once(t.clone()).chain(prose_stem(t)))
                    .collect()
            } else {
                token
            };
            for term in token {
                // The model's prose brings English with its names: "the", "with", "before"
                // are found on many lines and say nothing of which.
                if from_prose && crate::stopwords::is_stopword(&term) {
                    continue;
                }
                if !seen.insert(term.clone()) {
                    continue;
                }
                let holding = text.lines_holding(&term);
                if holding.is_empty() {
                    continue;
                }
                let rarity = (1.0 + n / holding.len() as f64).ln();
                for i in holding {
                    let b = best.entry(i).or_default();
                    *b = b.max(weight * rarity);
                }
            }
            for (i, s) in best {
                scores[i] += s;
            }
        }
    }
    // A diff is read for what it changed: the lines a change added rank above the lines
    // around them (the file still has those) and the lines it removed.
    for (i, side) in sides.iter().enumerate() {
        match side {
            Some(b'+') => scores[i] *= ADDED_WEIGHT,
            Some(_) => scores[i] *= UNCHANGED_WEIGHT,
            None => {}
        }
    }
    // A log of several commits: the one a later step named (`git show ba7ffcc`) is what
    // the model went on with; its lines rank above the same terms in the others'.
    let named_commits = commits_named(content, query);
    for (i, named) in named_commits.iter().enumerate() {
        if *named {
            scores[i] *= NAMED_COMMIT_WEIGHT;
        }
    }
    // What a later step searched for in so many words (a quoted pattern of a command), and
    // the definitions of the names the model's text called or quoted: above any term.
    let phrases = query.later_inputs.iter().flat_map(|s| quoted(s));
    for phrase in distinct(phrases.map(str::to_lowercase)) {
        for i in text.lines_holding(&phrase) {
            scores[i] += PHRASE_WEIGHT;
        }
    }
    // A line a later step named by its number, as a quoted phrase; a line inside a range it
    // named, half that.
    for (i, pointed) in pointed.iter().enumerate() {
        match pointed {
            Some(true) => scores[i] += PHRASE_WEIGHT,
            Some(false) => scores[i] += PHRASE_WEIGHT / 2.0,
            None => {}
        }
    }
    // A figure the model cited from the output (`+2.864 against +1.850`), and what its text
    // cited in double quotes (`closes the socket with "pith: idle between turns"`; single
    // quotes in prose are mostly apostrophes): found on few lines, a quote of them, though
    // numbers are not terms.
    let figures = (query.later_text.iter().chain(&query.later_inputs)).flat_map(|s| figures(s));
    let cited = (query.later_text.iter())
        .flat_map(|s| quoted_by(s, '"'))
        .map(str::to_lowercase);
    let cited = distinct(cited);
    let quotes = distinct(figures)
        .into_iter()
        .chain(cited.iter().map(String::as_str));
    for quote in quotes {
        let holding = text.lines_holding(quote);
        if holding.len() <= FIGURE_LINES_MAX {
            holding.into_iter().for_each(|i| scores[i] += PHRASE_WEIGHT);
        }
    }
    let named: Vec<&str> = query.later_text.iter().flat_map(|t| named(t)).collect();
    // ... and the lines calling them, below their definitions.
    let calls: Vec<String> = named.iter().map(|n| format!("{n}(")).collect();
    for (i, line) in content.iter().enumerate() {
        if defines_one_of(line, &named) {
            scores[i] += PHRASE_WEIGHT;
        } else if calls.iter().any(|c| line.contains(c.as_str())) {
            scores[i] += PHRASE_WEIGHT / 2.0;
        }
    }
    // A type the call looked for or the model's text names: where it is built or declared
    // (`Saving {`: a struct literal a change of the type must follow, not a function's
    // `-> Saving {`), as a quoted phrase, before its mentions (a doc comment naming it).
    let built: Vec<String> = query
        .call
        .iter()
        .chain(&query.later_text)
        .flat_map(|s| type_names(s))
        .map(|t| format!("{t} {{"))
        .collect();
    for (i, line) in content.iter().enumerate() {
        let builds = |b: &String| {
            line.match_indices(b.as_str())
                .any(|(at, _)| !line[..at].trim_end().ends_with("->"))
        };
        if built.iter().any(builds) {
            scores[i] += PHRASE_WEIGHT;
        }
    }
    scores
}

/// Where a query's strings come from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// The inputs of the calls after the output (an edit's old text, a read's path).
    LaterInput,
    /// The call's own input (the pattern, the path, the command).
    Call,
    /// The model's text after the output.
    Prose,
}

/// A figure found on more lines than this is not taken as a quote of any of them.
pub(super) const FIGURE_LINES_MAX: usize = 3;

/// The figures in `s` with a decimal point or separator (`2.864`, `1,850.5`), four
/// characters at least: what a model copies from a measurement, where `1.0` or a count is
/// everywhere.
pub(super) fn figures(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_ascii_digit() || c == '.' || c == ','))
        .map(|w| w.trim_matches(|c| c == '.' || c == ','))
        .filter(|w| {
            let b = w.as_bytes();
            w.len() >= 4
                && (1..b.len().saturating_sub(1)).any(|k| {
                    matches!(b[k], b'.' | b',')
                        && b[k - 1].is_ascii_digit()
                        && b[k + 1].is_ascii_digit()
                })
        })
}

/// How many quoted phrases, figures or commit ids the ranking looks for at most: each is a
/// search of the whole output, and a later step's text or input is any length.
const SEARCHED_MAX: usize = 64;

/// The first [`SEARCHED_MAX`] distinct items of `items`, in order.
fn distinct<T: Eq + std::hash::Hash + Clone>(items: impl Iterator<Item = T>) -> Vec<T> {
    let mut seen = std::collections::HashSet::new();
    items
        .filter(|item| seen.insert(item.clone()))
        .take(SEARCHED_MAX)
        .collect()
}

/// How much more a line of a commit a later step named counts.
pub(super) const NAMED_COMMIT_WEIGHT: f64 = 2.0;

/// The shortest commit id a later step is taken to name a commit by (git's default abbrev).
const SHORT_ID: usize = 7;

/// For each line, whether it belongs to a commit (from its `commit <id>` line to the next)
/// whose id, shortened to at least [`SHORT_ID`] digits, a later step's text or input holds.
fn commits_named(content: &[&str], query: &Query<'_>) -> Vec<bool> {
    let mut out = vec![false; content.len()];
    let later = || query.later_text.iter().chain(&query.later_inputs);
    let ids = distinct(
        later()
            .flat_map(|s| s.split(|c: char| !c.is_ascii_alphanumeric()))
            .filter(|w| w.len() >= SHORT_ID && w.bytes().all(|b| b.is_ascii_hexdigit()))
            .map(str::to_ascii_lowercase),
    );
    if ids.is_empty() {
        return out;
    }
    let mut inside = false;
    for (i, line) in content.iter().enumerate() {
        if let Some(rest) = line.strip_prefix("commit ") {
            let id = rest.split_whitespace().next().unwrap_or("");
            inside = id.len() >= SHORT_ID
                && id.bytes().all(|b| b.is_ascii_hexdigit())
                && ids.iter().any(|w| id.starts_with(w.as_str()));
        }
        out[i] = inside;
    }
    out
}

/// An output's lowercased lines as one text, searched whole: one pass of a term's searcher
/// over the output, not a search started on each line (most of the ranking's time before).
struct Lowered {
    text: String,
    /// Where each line starts in `text` (lines are joined by `\n`).
    starts: Vec<usize>,
}

impl Lowered {
    fn new(lines: &[&str]) -> Lowered {
        let mut text = String::with_capacity(lines.iter().map(|l| l.len() + 1).sum());
        let mut starts = Vec::with_capacity(lines.len());
        for line in lines {
            starts.push(text.len());
            text.push_str(&line.to_lowercase());
            text.push('\n');
        }
        Lowered { text, starts }
    }

    /// The lines holding `needle` (lowercase, no newline in it), in order, each once.
    fn lines_holding(&self, needle: &str) -> Vec<usize> {
        let finder = memmem::Finder::new(needle.as_bytes());
        let bytes = self.text.as_bytes();
        let mut lines = Vec::new();
        let mut from = 0;
        while let Some(at) = bytes.get(from..).and_then(|rest| finder.find(rest)) {
            let line = self.starts.partition_point(|&s| s <= from + at) - 1;
            lines.push(line);
            // On from the next line: a line holding it twice is one line holding it.
            match self.starts.get(line + 1) {
                Some(&next) => from = next,
                None => break,
            }
        }
        lines
    }
}

/// The type names in `s`: words of a capital and lowercase letters (`Saving`, `LedgerSink`),
/// at least [`MIN_TYPE`] long.
pub(super) fn type_names(s: &str) -> impl Iterator<Item = &str> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| {
            w.len() >= MIN_TYPE
                && w.starts_with(|c: char| c.is_ascii_uppercase())
                && w.chars().any(|c| c.is_ascii_lowercase())
        })
}

/// The shortest type name [`type_names`] takes.
pub(super) const MIN_TYPE: usize = 4;

/// What a diff's added line's terms count for, against a line outside a diff.
pub(super) const ADDED_WEIGHT: f64 = 1.5;
/// What a diff's context or removed line's terms count for.
pub(super) const UNCHANGED_WEIGHT: f64 = 0.5;

/// What a quoted phrase, a named definition or a named type's literal adds to a line's score:
/// more than any term.
pub(super) const PHRASE_WEIGHT: f64 = 20.0;

/// The quoted segments of a later input (a command's `'…'` or `"…"`) long enough to name
/// something.
pub(super) fn quoted(s: &str) -> Vec<&str> {
    let mut out = quoted_by(s, '\'');
    out.extend(quoted_by(s, '"'));
    out
}

/// The segments of `s` between a `quote` and the next, on one line and long enough to name
/// something.
fn quoted_by(s: &str, quote: char) -> Vec<&str> {
    // Between a quote and the next: the odd pieces that have a closing quote after them.
    let pieces: Vec<&str> = s.split(quote).collect();
    (1..pieces.len().saturating_sub(1))
        .step_by(2)
        .map(|k| pieces[k])
        .filter(|inside| inside.len() >= DISTINCTIVE && !inside.contains('\n'))
        .collect()
}

/// The names the model's text calls (`name(`) or quotes in backticks: what it will use.
pub(super) fn named(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let is_name = |c: char| c.is_alphanumeric() || c == '_';
    for (at, _) in text.match_indices('(') {
        let start = text[..at].rfind(|c: char| !is_name(c)).map_or(0, |i| i + 1);
        out.push(&text[start..at]);
    }
    let mut ticks = text.split('`');
    ticks.next();
    while let Some(inside) = ticks.next() {
        out.push(inside.trim_end_matches("()"));
        ticks.next();
    }
    // A type's name in prose (`LedgerSink is defined in …`): a word in CamelCase; a
    // function's or a field's: a word in snake case (`write_interrupted turns …`).
    for word in text.split(|c: char| !is_name(c)) {
        let snake = word.contains('_') && word.chars().any(|c| c.is_ascii_lowercase());
        if snake {
            out.push(word.trim_matches('_'));
            continue;
        }
        let mut chars = word.chars();
        let camel = chars.next().is_some_and(|c| c.is_ascii_uppercase())
            && chars.any(|c| c.is_ascii_lowercase())
            && word.chars().skip(1).any(|c| c.is_ascii_uppercase());
        if camel {
            out.push(word);
        }
    }
    let mut seen = std::collections::HashSet::new();
    out.retain(|n| n.len() >= 4 && n.chars().all(is_name) && seen.insert(*n));
    out
}

/// Whether `line` defines one of `names` (`fn flag(`, `const ACCOUNT_ID_RULE`, `def parse`).
pub(super) fn defines_one_of(line: &str, names: &[&str]) -> bool {
    if names.is_empty() {
        return false;
    }
    let line = found_text(line);
    let line = declared(line);
    DEFINES.iter().filter(|d| **d != "#").any(|d| {
        line.strip_prefix(d).is_some_and(|rest| {
            names.iter().any(|n| {
                rest.strip_prefix(n).is_some_and(|after| {
                    !after.starts_with(|c: char| c.is_alphanumeric() || c == '_')
                })
            })
        })
    })
}

/// An English word of the model's prose without its inflection (`asserts`, `parsed`,
/// `matching`, `entries`: `assert`, `pars`, `match`, `entr`), matched inside the output's
/// words as every term is; a `snake_case` name or a short word has none (nor do a path's
/// words: the caller stems only tokens without a path). Tried wider (`-ly`, `-er`, `-ion`;
/// roots of three letters; the later tool inputs' words too): each kept fewer of the corpus's
/// needed lines (BENCHMARKS.md, stop 64).
fn prose_stem(word: &str) -> Option<String> {
    if word.contains(['/', '.', '_']) {
        return None;
    }
    for suffix in ["ing", "ies", "es", "ed", "s"] {
        if let Some(root) = word.strip_suffix(suffix)
            && root.len() >= 4
        {
            return Some(root.to_owned());
        }
    }
    None
}

/// The terms of a query string, lowercased, by the token they come from: a token's path (a
/// word holding a `/` or a `.`) whole, then its words of letters, digits and `_` at least
/// [`MIN_TERM`] long.
pub(super) fn token_terms(s: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for token in s.split(|c: char| c.is_whitespace() || "\"'`,;()[]{}<>=|&*?+^$\\".contains(c)) {
        let token = token.trim_matches(|c: char| c == ':' || c == '.');
        let mut terms = Vec::new();
        if token.len() >= MIN_TERM && (token.contains('/') || token.contains('.')) {
            terms.push(token.to_lowercase());
        }
        for word in token.split(|c: char| !(c.is_alphanumeric() || c == '_')) {
            if word.len() >= MIN_TERM && !word.bytes().all(|b| b.is_ascii_digit()) {
                terms.push(word.to_lowercase());
            }
        }
        if !terms.is_empty() {
            out.push(terms);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_numbers_with_a_point_or_a_separator() {
        let found: Vec<&str> =
            figures("+2.864 against +1,850, at 1.0, 300 requests, v1.2.3.").collect();
        assert_eq!(found, ["2.864", "1,850", "1.2.3"]);
    }

    #[test]
    fn a_prose_words_stem_drops_its_inflection_and_a_names_has_none() {
        let stems: Vec<Option<String>> = [
            "asserts", "parsed", "matching", "entries", "class", "uses", "bits", "x.rs", "a_bs",
        ]
        .iter()
        .map(|w| prose_stem(w))
        .collect();
        let want = [
            Some("assert"),
            Some("pars"),
            Some("match"),
            Some("entr"),
            Some("clas"),
            None,
            None,
            None,
            None,
        ];
        assert_eq!(stems, want.map(|w| w.map(str::to_owned)));
    }

    #[test]
    fn the_lines_holding_a_needle_are_each_found_once_in_order() {
        let text = Lowered::new(&["ab ab", "", "xab", "none", "ab"]);
        assert_eq!(text.lines_holding("ab"), [0, 2, 4]);
        assert_eq!(text.lines_holding("none"), [3]);
        assert_eq!(text.lines_holding("zz"), Vec::<usize>::new());
    }
}
