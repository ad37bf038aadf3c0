//! Turning a matched line into display text that is bounded in size.

use crate::MAX_LINE_CHARS;

/// Characters kept before the first match when a long line is cut, so the match has context.
const CONTEXT_BEFORE_MATCH: usize = 40;
const ELLIPSIS: char = '…';

/// Display text for a matched line: line terminator and surrounding whitespace removed,
/// invalid UTF-8 replaced, and lines longer than [`MAX_LINE_CHARS`] characters cut to a window
/// that starts a little before the first match (minified files have megabyte lines).
/// Returns the text and whether it was cut.
pub(crate) fn display_line(line: &[u8], match_start: Option<usize>) -> (String, bool) {
    let content = line.strip_suffix(b"\n").unwrap_or(line);
    let content = content.strip_suffix(b"\r").unwrap_or(content);
    let match_start = match_start.unwrap_or(0).min(content.len());
    // Character offset of the match, counted on the lossy text so that it indexes `text` below.
    let match_char = String::from_utf8_lossy(&content[..match_start])
        .chars()
        .count();
    let full = String::from_utf8_lossy(content);

    let leading_ws = full.chars().take_while(|c| c.is_whitespace()).count();
    let text = full.trim();
    let total = text.chars().count();
    if total <= MAX_LINE_CHARS {
        return (text.to_owned(), false);
    }

    let match_char = match_char.saturating_sub(leading_ws);
    let mut start = match_char.saturating_sub(CONTEXT_BEFORE_MATCH);
    if start + MAX_LINE_CHARS > total {
        start = total - MAX_LINE_CHARS;
    }
    let end = start + MAX_LINE_CHARS;
    let mut out = String::with_capacity(MAX_LINE_CHARS * 4 + 6);
    if start > 0 {
        out.push(ELLIPSIS);
    }
    out.extend(text.chars().skip(start).take(MAX_LINE_CHARS));
    if end < total {
        out.push(ELLIPSIS);
    }
    (out, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_line_is_trimmed_not_cut() {
        assert_eq!(
            display_line(b"    let x = 1;  \r\n", Some(8)),
            ("let x = 1;".to_owned(), false)
        );
    }

    #[test]
    fn long_line_is_cut_around_the_match() {
        let mut line = "a".repeat(1000);
        line.push_str("NEEDLE");
        line.push_str(&"b".repeat(1000));
        let (text, cut) = display_line(line.as_bytes(), Some(1000));
        assert!(cut);
        assert!(text.starts_with('…') && text.ends_with('…'));
        assert_eq!(text.chars().count(), MAX_LINE_CHARS + 2);
        let needle_at = text.find("NEEDLE").unwrap();
        // 1 ellipsis char (3 bytes) plus the context kept before the match.
        assert_eq!(needle_at, 3 + CONTEXT_BEFORE_MATCH);
    }

    #[test]
    fn match_near_the_end_keeps_a_full_window() {
        let mut line = "x".repeat(500);
        line.push_str("END");
        let (text, cut) = display_line(line.as_bytes(), Some(500));
        assert!(cut);
        assert!(text.starts_with('…') && text.ends_with("END"));
        assert_eq!(text.chars().count(), MAX_LINE_CHARS + 1);
    }

    #[test]
    fn match_at_the_start_is_cut_only_at_the_end() {
        let line = format!("NEEDLE{}", "z".repeat(400));
        let (text, _) = display_line(line.as_bytes(), Some(0));
        assert!(text.starts_with("NEEDLE") && text.ends_with('…'));
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let (text, cut) = display_line(b"ab\xffcd\n", Some(0));
        assert_eq!(text, "ab\u{fffd}cd");
        assert!(!cut);
    }
}
