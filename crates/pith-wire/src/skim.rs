//! A fast walk over JSON structure that finds where values begin and end without reading or
//! validating them.
//!
//! Why: deciding that a request stays unchanged often needs one small part of a large body (the
//! `tools` array sits after a history that grows to megabytes). serde must validate everything
//! it passes; this only looks for quotes and brackets, and jumps through strings with `memchr`.
//!
//! The invariant its callers keep: a skim never justifies an edit. It is not a validator, so on
//! malformed input it may return odd spans or `None`; a caller may use it to conclude "leave the
//! request as it is" (always safe) and must parse with serde before changing anything.

use std::ops::Range;

/// One member of a JSON object: the raw bytes of its key between the quotes (escapes left as
/// written) and the span of its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub key: Range<usize>,
    pub value: Range<usize>,
}

/// The members of the object that `json` holds (whitespace around it allowed), with spans into
/// `json`. `None` when the bytes do not have an object's structure.
pub fn object_members(json: &[u8]) -> Option<Vec<Member>> {
    let mut at = skip_ws(json, 0);
    if json.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_ws(json, at + 1);
    let mut members = Vec::new();
    if json.get(at) == Some(&b'}') {
        return only_ws_after(json, at + 1).then_some(members);
    }
    loop {
        if json.get(at) != Some(&b'"') {
            return None;
        }
        let key_end = string_end(json, at)?;
        let key = at + 1..key_end - 1;
        at = skip_ws(json, key_end);
        if json.get(at) != Some(&b':') {
            return None;
        }
        let start = skip_ws(json, at + 1);
        let end = value_end(json, start)?;
        members.push(Member {
            key,
            value: start..end,
        });
        at = skip_ws(json, end);
        match json.get(at) {
            Some(b',') => at = skip_ws(json, at + 1),
            Some(b'}') => return only_ws_after(json, at + 1).then_some(members),
            _ => return None,
        }
    }
}

/// The spans of the elements of the array that `json` holds (whitespace around it allowed).
pub fn array_elements(json: &[u8]) -> Option<Vec<Range<usize>>> {
    let mut at = skip_ws(json, 0);
    if json.get(at) != Some(&b'[') {
        return None;
    }
    at = skip_ws(json, at + 1);
    let mut elements = Vec::new();
    if json.get(at) == Some(&b']') {
        return only_ws_after(json, at + 1).then_some(elements);
    }
    loop {
        let end = value_end(json, at)?;
        elements.push(at..end);
        at = skip_ws(json, end);
        match json.get(at) {
            Some(b',') => at = skip_ws(json, at + 1),
            Some(b']') => return only_ws_after(json, at + 1).then_some(elements),
            _ => return None,
        }
    }
}

fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

fn skip_ws(json: &[u8], mut at: usize) -> usize {
    while json.get(at).is_some_and(|&b| is_ws(b)) {
        at += 1;
    }
    at
}

fn only_ws_after(json: &[u8], at: usize) -> bool {
    json.get(at..)
        .is_some_and(|rest| rest.iter().all(|&b| is_ws(b)))
}

/// The index just past the string whose opening quote is at `at`.
fn string_end(json: &[u8], at: usize) -> Option<usize> {
    let mut from = at + 1;
    loop {
        let quote = from + memchr::memchr(b'"', json.get(from..)?)?;
        // A quote closes the string unless an odd run of backslashes escapes it.
        let backslashes = json[from..quote]
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some(quote + 1);
        }
        from = quote + 1;
    }
}

/// The index just past the value starting at `at` (which must not be whitespace).
fn value_end(json: &[u8], at: usize) -> Option<usize> {
    match *json.get(at)? {
        b'"' => string_end(json, at),
        b'{' | b'[' => container_end(json, at),
        // A number or a literal runs to the next delimiter.
        b if b.is_ascii_alphanumeric() || b == b'-' => {
            let rest = &json[at..];
            let len = rest
                .iter()
                .position(|&b| is_ws(b) || matches!(b, b',' | b'}' | b']' | b':'))
                .unwrap_or(rest.len());
            Some(at + len)
        }
        _ => None,
    }
}

/// The index just past the object or array opening at `at`, matching brackets outside strings.
fn container_end(json: &[u8], at: usize) -> Option<usize> {
    let mut depth = 0usize;
    let mut i = at;
    while let Some(&b) = json.get(i) {
        match b {
            b'"' => {
                i = string_end(json, i)?;
                continue;
            }
            b'{' | b'[' => depth += 1,
            b'}' | b']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(i + 1);
                }
            }
            _ => {}
        }
        i += 1;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(json: &str) -> Vec<(&str, &str)> {
        object_members(json.as_bytes())
            .unwrap()
            .into_iter()
            .map(|m| (&json[m.key], &json[m.value]))
            .collect()
    }

    #[test]
    fn members_and_elements_with_their_spans() {
        let json =
            r#" {"a": 1, "b" : {"x": [1, {"y": "}]"}]}, "c":"q\"uote\\", "d":[ ], "e":true} "#;
        assert_eq!(
            keys(json),
            [
                ("a", "1"),
                ("b", r#"{"x": [1, {"y": "}]"}]}"#),
                ("c", r#""q\"uote\\""#),
                ("d", "[ ]"),
                ("e", "true"),
            ]
        );
        let array = r#"[{"n":"a"}, "s", -1.5e3, null, [[]]]"#;
        let spans: Vec<&str> = array_elements(array.as_bytes())
            .unwrap()
            .into_iter()
            .map(|r| &array[r])
            .collect();
        assert_eq!(spans, [r#"{"n":"a"}"#, r#""s""#, "-1.5e3", "null", "[[]]"]);
        assert_eq!(keys("{}"), []);
        assert_eq!(array_elements(b" [ ] "), Some(vec![]));
    }

    #[test]
    fn broken_structure_gives_none() {
        for bad in [
            "",
            "[]",
            "{",
            r#"{"a"}"#,
            r#"{"a":1"#,
            r#"{"a":"unterminated}"#,
            r#"{"a":[1,2}"#,
            r#"{"a":1} trailing"#,
            r#"{"a":1,,"b":2}"#,
        ] {
            assert_eq!(object_members(bad.as_bytes()), None, "{bad}");
        }
        assert_eq!(array_elements(b"{}"), None);
        assert_eq!(array_elements(b"[1,"), None);
    }
}
