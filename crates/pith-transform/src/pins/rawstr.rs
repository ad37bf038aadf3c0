//! Lines of a JSON string as the client wrote it: the decoded text of each line with the byte
//! range it occupies in the raw (escaped) string, so a command line can be cut out of a body
//! without re-encoding the rest of the string. And the one escaper for text pith writes.

use std::ops::Range;

/// One line of a JSON string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawLine {
    /// The decoded line, without its terminator (a trailing `\r` is dropped too).
    pub text: String,
    /// The line's bytes in the raw string, terminator excluded, relative to the opening quote.
    pub raw: Range<usize>,
    /// Where the next line starts (after the `\n` escape), or `raw.end` for the last line.
    pub next: usize,
}

/// The lines of `literal`, a JSON string literal including its quotes. `None` when it is not
/// a well-formed one.
pub fn lines(literal: &str) -> Option<Vec<RawLine>> {
    let bytes = literal.as_bytes();
    if bytes.len() < 2 || bytes[0] != b'"' || bytes[bytes.len() - 1] != b'"' {
        return None;
    }
    let end = bytes.len() - 1;
    let mut out = Vec::new();
    let mut text = String::new();
    let mut start = 1;
    let mut i = 1;
    while i < end {
        match bytes[i] {
            b'\\' => {
                let escape = *bytes.get(i + 1)?;
                let (decoded, len) = match escape {
                    b'n' => ('\n', 2),
                    b'"' => ('"', 2),
                    b'\\' => ('\\', 2),
                    b'/' => ('/', 2),
                    b't' => ('\t', 2),
                    b'r' => ('\r', 2),
                    b'b' => ('\u{8}', 2),
                    b'f' => ('\u{c}', 2),
                    b'u' => unicode_escape(literal, i)?,
                    _ => return None,
                };
                if decoded == '\n' {
                    push_line(&mut out, &mut text, start..i, i + len);
                    start = i + len;
                } else {
                    text.push(decoded);
                }
                i += len;
            }
            b'"' => return None,
            _ => {
                let ch = literal[i..].chars().next()?;
                text.push(ch);
                i += ch.len_utf8();
            }
        }
    }
    push_line(&mut out, &mut text, start..end, end);
    Some(out)
}

fn push_line(out: &mut Vec<RawLine>, text: &mut String, raw: Range<usize>, next: usize) {
    let mut line = std::mem::take(text);
    if line.ends_with('\r') {
        line.pop();
    }
    out.push(RawLine {
        text: line,
        raw,
        next,
    });
}

/// `\uXXXX` (or a surrogate pair of them) at `at`: the character and the escape's length.
fn unicode_escape(literal: &str, at: usize) -> Option<(char, usize)> {
    let hex = |from: usize| -> Option<u32> {
        let digits = literal.get(from..from + 4)?;
        u32::from_str_radix(digits, 16).ok()
    };
    let first = hex(at + 2)?;
    if (0xD800..0xDC00).contains(&first) {
        if literal.get(at + 6..at + 8) != Some("\\u") {
            return None;
        }
        let second = hex(at + 8)?;
        if !(0xDC00..0xE000).contains(&second) {
            return None;
        }
        let code = 0x10000 + ((first - 0xD800) << 10) + (second - 0xDC00);
        return Some((char::from_u32(code)?, 12));
    }
    Some((char::from_u32(first)?, 6))
}

pub use crate::splice::quote;

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn lines_carry_their_raw_ranges() {
        let literal = r#""a\"b\nc\\d\r\n\u00e9\ud83d\ude00""#;
        let got = lines(literal).unwrap();
        let texts: Vec<&str> = got.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(texts, ["a\"b", "c\\d", "é😀"]);
        assert_eq!(&literal[got[0].raw.clone()], r#"a\"b"#);
        assert_eq!(&literal[got[1].raw.clone()], r#"c\\d\r"#);
        assert_eq!(got[1].next, got[2].raw.start);
        assert_eq!(got[2].next, literal.len() - 1);
    }

    #[test]
    fn malformed_literals_are_refused() {
        for bad in ["", "\"", "abc", "\"a\\x\"", "\"a\"b\"", "\"\\ud800\""] {
            assert_eq!(lines(bad), None, "{bad:?}");
        }
    }

    proptest! {
        /// Decoding what `quote` (or serde) wrote gives back the text, line by line.
        #[test]
        fn quote_and_lines_round_trip(text in "\\PC*", use_serde in any::<bool>()) {
            let literal = if use_serde {
                serde_json::Value::String(text.clone()).to_string()
            } else {
                quote(&text)
            };
            let decoded: String = serde_json::from_str(&literal).unwrap();
            prop_assert_eq!(&decoded, &text);
            let got = lines(&literal).unwrap();
            let joined: Vec<String> = got.iter().map(|l| l.text.clone()).collect();
            let expected: Vec<String> = text
                .split('\n')
                .map(|l| l.strip_suffix('\r').unwrap_or(l).to_owned())
                .collect();
            prop_assert_eq!(joined, expected);
        }
    }
}
