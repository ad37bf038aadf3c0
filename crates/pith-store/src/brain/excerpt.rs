//! The snippet a search hit shows: a few words of the body around the first match.

use pith_brain::MAX_SNIPPET_CHARS;

/// Up to about 16 words of `body` around the first word containing a query term, on one line,
/// each word cut to 32 characters and the whole to [`MAX_SNIPPET_CHARS`] (so the matching word
/// shows however long the words before it).
pub(crate) fn excerpt(body: &str, terms: &[String]) -> String {
    const BEFORE: usize = 5;
    const WORDS: usize = 16;
    const WORD_CHARS: usize = 32;
    let words: Vec<&str> = body.split_whitespace().collect();
    let needles: Vec<String> = terms
        .iter()
        .map(|t| {
            t.chars()
                .filter(|c| c.is_alphanumeric())
                .flat_map(char::to_lowercase)
                .collect::<String>()
        })
        .filter(|t| !t.is_empty())
        .collect();
    let hit = words
        .iter()
        .position(|w| {
            let w = w.to_lowercase();
            needles.iter().any(|n| w.contains(n.as_str()))
        })
        .unwrap_or(0);
    // Fill the window when the hit is near the end, so short bodies show whole.
    let start = hit
        .saturating_sub(BEFORE)
        .min(words.len().saturating_sub(WORDS));
    let end = (start + WORDS).min(words.len());
    let mut out = String::new();
    if start > 0 {
        out.push_str("… ");
    }
    for (i, word) in words[start..end].iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        match word.char_indices().nth(WORD_CHARS - 1) {
            Some((cut, _)) if word[cut..].chars().nth(1).is_some() => {
                out.push_str(&word[..cut]);
                out.push('…');
            }
            _ => out.push_str(word),
        }
    }
    if end < words.len() {
        out.push_str(" …");
    }
    match out.char_indices().nth(MAX_SNIPPET_CHARS - 1) {
        Some((cut, _)) if out[cut..].chars().nth(1).is_some() => {
            out.truncate(cut);
            out.push('…');
            out
        }
        _ => out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_centre_on_the_first_matching_word() {
        let body = "one two three four five six seven eight nine ten eleven twelve \
                    thirteen fourteen fifteen sixteen seventeen Timeouts nineteen twenty";
        assert_eq!(
            excerpt(body, &["timeout".into()]),
            "… five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen \
             seventeen Timeouts nineteen twenty"
        );
        assert_eq!(
            excerpt(body, &["absent".into()]),
            "one two three four five six seven eight nine ten eleven twelve thirteen \
             fourteen fifteen sixteen …"
        );
        assert_eq!(excerpt("", &["x".into()]), "");
    }

    #[test]
    fn excerpts_are_bounded_however_long_the_words() {
        let huge = "w".repeat(5 << 20);
        let body = format!("{huge} {huge} before {huge} needle{huge} after {huge}");
        let snippet = excerpt(&body, &["needle".into()]);
        assert!(
            snippet.chars().count() <= pith_brain::MAX_SNIPPET_CHARS,
            "{} characters",
            snippet.chars().count()
        );
        assert!(
            snippet.contains("before") && snippet.contains("needle"),
            "{snippet}"
        );
    }
}
