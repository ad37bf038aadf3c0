//! The words of a message as the search index counts them: lowercase runs of letters and
//! digits, one to 64 characters, at most `MAX_TERMS` distinct per message. Every backend
//! indexes and queries with this one function, so BM25 gives the same ranking on each.

use std::collections::HashMap;

/// Distinct terms indexed per message (a huge tool output is indexed by its first ones).
pub const MAX_TERMS: usize = 2_000;
/// Longest term indexed, in characters.
const MAX_TERM_CHARS: usize = 64;

/// Each term of `text` with its count, and the total number of terms (the document length).
pub fn count(text: &str) -> (HashMap<String, u32>, u32) {
    let mut counts: HashMap<String, u32> = HashMap::new();
    let mut length = 0u32;
    for term in words(text) {
        length = length.saturating_add(1);
        if counts.len() >= MAX_TERMS && !counts.contains_key(&term) {
            continue;
        }
        *counts.entry(term).or_insert(0) += 1;
    }
    (counts, length)
}

/// The distinct terms of a query, in order of first appearance.
pub fn query(text: &str) -> Vec<String> {
    let mut seen = Vec::new();
    for term in words(text) {
        if !seen.contains(&term) {
            seen.push(term);
        }
    }
    seen
}

fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty() && w.chars().count() <= MAX_TERM_CHARS)
        .map(str::to_lowercase)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terms_are_lowercase_words_counted() {
        let (counts, length) = count("Fix calc.py: calc() returns a - b");
        assert_eq!(length, 7);
        assert_eq!(counts.get("calc"), Some(&2));
        assert_eq!(query("Calc CALC py"), ["calc", "py"]);
    }
}
