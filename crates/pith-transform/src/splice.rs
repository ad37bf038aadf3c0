//! The one shared utility that turns edits into bytes: splices into the original body.

use std::ops::Range;

use serde_json::value::RawValue;

use crate::stage::Splice;

/// Why a set of splices could not be applied.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpliceError {
    /// A range that ends before it starts, or past the end of the body.
    #[error("splice {start}..{end} is outside the {len}-byte body")]
    OutOfBounds {
        /// The range's start.
        start: usize,
        /// The range's end.
        end: usize,
        /// The body's length.
        len: usize,
    },
    /// A splice starts inside the range of the one before it.
    #[error("splices overlap at byte {at}")]
    Overlap {
        /// Where the later splice starts.
        at: usize,
    },
    /// A range boundary falls inside a UTF-8 character (checked when the body is UTF-8).
    #[error("splice boundary {at} is not on a UTF-8 character boundary")]
    NotCharBoundary {
        /// The boundary, as a byte offset.
        at: usize,
    },
}

/// Byte range of `raw` inside `body`, when `raw` was borrowed from `body` by serde_json
/// (deserializing `&RawValue` from `body` keeps pointers into it). `None` if it was not.
pub fn span_of(body: &str, raw: &RawValue) -> Option<Range<usize>> {
    let base = body.as_ptr() as usize;
    let start = (raw.get().as_ptr() as usize).checked_sub(base)?;
    let end = start.checked_add(raw.get().len())?;
    (end <= body.len()).then_some(start..end)
}

/// `text` as a JSON string literal, quotes included: the escaper for text pith adds.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for ch in text.chars() {
        match ch {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Apply `splices` to `body`: every byte outside the splice ranges is copied unchanged.
/// Splices may come in any order; they must not overlap (two insertions at the same point are
/// allowed and keep their given order).
pub fn apply_splices(body: &[u8], splices: &[Splice]) -> Result<Vec<u8>, SpliceError> {
    let mut order: Vec<&Splice> = splices.iter().collect();
    order.sort_by_key(|s| (s.range.start, s.range.end));
    // The output's exact size (when the ranges are sound; else the error is found below):
    // an edit that shortens a large body allocates what it keeps, not the body and more.
    let added: usize = splices.iter().map(|s| s.replacement.len()).sum();
    let removed: usize = splices.iter().map(|s| s.range.len()).sum();
    let mut out = Vec::with_capacity((body.len() + added).saturating_sub(removed));
    let mut cursor = 0usize;
    for s in order {
        let Range { start, end } = s.range;
        if start > end || end > body.len() {
            return Err(SpliceError::OutOfBounds {
                start,
                end,
                len: body.len(),
            });
        }
        if start < cursor {
            return Err(SpliceError::Overlap { at: start });
        }
        // Read at the two ends only (what `str::is_char_boundary` reads): validating the whole
        // body first would cost a pass over a conversation on every edited request.
        for at in [start, end] {
            if body.get(at).is_some_and(|&b| is_continuation(b)) {
                return Err(SpliceError::NotCharBoundary { at });
            }
        }
        out.extend_from_slice(&body[cursor..start]);
        out.extend_from_slice(s.replacement.as_bytes());
        cursor = end;
    }
    out.extend_from_slice(&body[cursor..]);
    Ok(out)
}

/// A UTF-8 continuation byte (`10xxxxxx`): no character starts there.
fn is_continuation(byte: u8) -> bool {
    byte & 0b1100_0000 == 0b1000_0000
}

/// The byte ranges that remove the elements `mask` marks from a JSON array whose elements are at
/// `spans`, each with the separator that joined it, so what is left is still an array.
pub(crate) fn array_removals(spans: &[Range<usize>], mask: &[bool]) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < spans.len() {
        if !mask[i] {
            i += 1;
            continue;
        }
        let start = i;
        while i < spans.len() && mask[i] {
            i += 1;
        }
        // Removed run start..i.
        if start > 0 {
            out.push(spans[start - 1].end..spans[i - 1].end);
        } else if i < spans.len() {
            out.push(spans[0].start..spans[i].start);
        } else {
            out.push(spans[0].start..spans[i - 1].end);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn splice(range: Range<usize>, text: &str) -> Splice {
        Splice {
            range,
            replacement: text.to_owned(),
        }
    }

    #[test]
    fn untouched_bytes_survive_exactly() {
        let body = br#"{"a": 1,   "b":[1, 2]}"#;
        let out = apply_splices(body, &[splice(6..7, "10")]).unwrap();
        assert_eq!(out, br#"{"a": 10,   "b":[1, 2]}"#);
    }

    #[test]
    fn insertions_and_replacements_in_any_order() {
        let body = b"0123456789";
        let out = apply_splices(
            body,
            &[splice(8..9, "X"), splice(2..2, "ab"), splice(2..2, "cd")],
        )
        .unwrap();
        assert_eq!(out, b"01abcd234567X9");
    }

    #[test]
    fn overlap_and_bounds_are_errors() {
        let body = b"0123456789";
        assert_eq!(
            apply_splices(body, &[splice(1..5, ""), splice(4..6, "")]),
            Err(SpliceError::Overlap { at: 4 })
        );
        assert!(matches!(
            apply_splices(body, &[splice(9..12, "")]),
            Err(SpliceError::OutOfBounds { .. })
        ));
        assert!(matches!(
            apply_splices("é".as_bytes(), &[splice(1..1, "x")]),
            Err(SpliceError::NotCharBoundary { at: 1 })
        ));
    }

    #[test]
    fn span_of_finds_borrowed_values() {
        #[derive(serde::Deserialize)]
        struct Top<'a> {
            #[serde(borrow)]
            tools: &'a RawValue,
        }
        let body = r#"{"model":"m", "tools" : [ {"name":"x"} ] }"#;
        let top: Top<'_> = serde_json::from_str(body).unwrap();
        let span = span_of(body, top.tools).unwrap();
        assert_eq!(&body[span], r#"[ {"name":"x"} ]"#);
        let other = serde_json::value::to_raw_value(&1).unwrap();
        assert_eq!(span_of(body, &other), None);
    }

    fn spans(v: &[(usize, usize)]) -> Vec<Range<usize>> {
        v.iter().map(|&(a, b)| a..b).collect()
    }

    #[test]
    fn removing_elements_takes_their_separators() {
        // [A,B,C] at 1..2, 3..4, 5..6
        let s = spans(&[(1, 2), (3, 4), (5, 6)]);
        assert_eq!(array_removals(&s, &[true, false, false]), vec![1..3]);
        assert_eq!(array_removals(&s, &[false, true, false]), vec![2..4]);
        assert_eq!(array_removals(&s, &[false, false, true]), vec![4..6]);
        assert_eq!(array_removals(&s, &[true, true, false]), vec![1..5]);
        assert_eq!(array_removals(&s, &[true, false, true]), [1..3, 4..6]);
        assert_eq!(array_removals(&s, &[true, true, true]), vec![1..6]);
    }
}
