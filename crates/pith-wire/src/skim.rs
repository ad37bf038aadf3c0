//! A fast walk over JSON structure that finds where values begin and end without reading or
//! validating them.
//!
//! Why: deciding that a request stays unchanged often needs one small part of a large body (the
//! `tools` array sits after a history that grows to megabytes). serde must validate everything
//! it passes; this only looks for quotes and brackets, and jumps through strings with `memchr`.
//! An object's members can be walked from its end too ([`members_rev`]): clients put `tools`
//! after the history, so reading from the end finds it without reading the history.
//!
//! The invariant its callers keep: a skim never justifies an edit. It is not a validator, so on
//! malformed input it may return odd spans or `None`; a caller may use it to conclude "leave the
//! request as it is" (always safe) and must parse with serde before changing anything.

use std::ops::Range;

/// One member of a JSON object: the raw bytes of its key between the quotes (escapes left as
/// written) and the span of its value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    /// The key's bytes, without its quotes.
    pub key: Range<usize>,
    /// The value's span, surrounding whitespace excluded.
    pub value: Range<usize>,
}

/// How many bytes `a` and `b` start with alike (compared a block at a time: `memcmp`).
pub fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let mut at = 0;
    for step in [4096, 64, 1] {
        while at + step <= n && a[at..at + step] == b[at..at + step] {
            at += step;
        }
    }
    at
}

/// How many bytes `a` and `b` end with alike (a block at a time, as [`common_prefix`]).
pub fn common_suffix(a: &[u8], b: &[u8]) -> usize {
    let n = a.len().min(b.len());
    let (a, b) = (&a[a.len() - n..], &b[b.len() - n..]);
    let mut kept = 0;
    for step in [4096, 64, 1] {
        while kept + step <= n && a[n - kept - step..n - kept] == b[n - kept - step..n - kept] {
            kept += step;
        }
    }
    kept
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
        let member = member_at(json, at)?;
        at = skip_ws(json, member.value.end);
        members.push(member);
        match json.get(at) {
            Some(b',') => at = skip_ws(json, at + 1),
            Some(b'}') => return only_ws_after(json, at + 1).then_some(members),
            _ => return None,
        }
    }
}

/// The member whose key's opening quote is at `at`: its key and its value's span.
fn member_at(json: &[u8], at: usize) -> Option<Member> {
    let (key, start) = member_key_at(json, at)?;
    let end = value_end(json, start)?;
    Some(Member {
        key,
        value: start..end,
    })
}

/// The key of the member whose opening quote is at `at` (its span inside the quotes), and
/// where its value starts (not read).
fn member_key_at(json: &[u8], at: usize) -> Option<(Range<usize>, usize)> {
    if json.get(at) != Some(&b'"') {
        return None;
    }
    let key_end = string_end(json, at)?;
    let colon = skip_ws(json, key_end);
    if json.get(colon) != Some(&b':') {
        return None;
    }
    Some((at + 1..key_end - 1, skip_ws(json, colon + 1)))
}

/// The spans of the elements of the array that `json` holds (whitespace around it allowed).
pub fn array_elements(json: &[u8]) -> Option<Vec<Range<usize>>> {
    let open = skip_ws(json, 0);
    if json.get(open) != Some(&b'[') {
        return None;
    }
    let (elements, close) = elements_after(json, open + 1, true)?;
    only_ws_after(json, close + 1).then_some(elements)
}

/// The first member of the object that `json` holds whose key's bytes are `key`, found from
/// the front: the values before it are skimmed and the ones after it never read. Clients send
/// the history array near the front of the body and the tools after it, so this finds a
/// history's start without reading the history.
pub fn member_forward(json: &[u8], key: &[u8]) -> Option<Member> {
    let (key, start) = find_member(json, key)?;
    let end = value_end(json, start)?;
    Some(Member {
        key,
        value: start..end,
    })
}

/// Where the value of the first member whose key's bytes are `key` starts, found from the front
/// as [`member_forward`] finds it, without reading that value: a history's start, for a caller
/// that reads its elements one at a time and stops early (the hold-out's opening, deferral's
/// marks, the outputs stage's new turns), where skimming a long conversation to its end would
/// cost a pass over it on every request.
pub fn member_value_start(json: &[u8], key: &[u8]) -> Option<usize> {
    find_member(json, key).map(|(_, start)| start)
}

/// The key span and value start of the first member keyed `key`, the values before it skimmed.
fn find_member(json: &[u8], key: &[u8]) -> Option<(Range<usize>, usize)> {
    let mut at = skip_ws(json, 0);
    if json.get(at) != Some(&b'{') {
        return None;
    }
    at = skip_ws(json, at + 1);
    loop {
        let (found, start) = member_key_at(json, at)?;
        if json[found.clone()] == *key {
            return Some((found, start));
        }
        at = skip_ws(json, value_end(json, start)?);
        match json.get(at) {
            Some(b',') => at = skip_ws(json, at + 1),
            _ => return None,
        }
    }
}

/// The span of the first element of the array whose `[` is at `open`, reading nothing after
/// it; `None` when the array is empty or malformed there.
pub fn first_element(json: &[u8], open: usize) -> Option<Range<usize>> {
    let at = skip_ws(json, open + 1);
    if json.get(at) == Some(&b']') {
        return None;
    }
    Some(at..value_end(json, at)?)
}

/// The element after the one that ends at `end` in an array, or `None` at the array's `]`
/// (or where the bytes are not JSON): one element at a time, for a caller that stops early.
pub fn next_element(json: &[u8], end: usize) -> Option<Range<usize>> {
    let at = skip_ws(json, end);
    if json.get(at) != Some(&b',') {
        return None;
    }
    let at = skip_ws(json, at + 1);
    Some(at..value_end(json, at)?)
}

/// The elements of an array from a point inside it to its end: `after` is just past the
/// array's `[` (`first`) or just past one of its elements. Returns the spans of the elements
/// that follow and the index of the array's `]`, reading nothing before `after`: a caller that
/// read an array's first elements on an earlier request reads only the ones added since.
pub fn elements_after(
    json: &[u8],
    after: usize,
    first: bool,
) -> Option<(Vec<Range<usize>>, usize)> {
    let mut at = skip_ws(json, after);
    let mut elements = Vec::new();
    if first {
        if json.get(at) == Some(&b']') {
            return Some((elements, at));
        }
    } else {
        match json.get(at) {
            Some(b']') => return Some((elements, at)),
            Some(b',') => at = skip_ws(json, at + 1),
            _ => return None,
        }
    }
    loop {
        let end = value_end(json, at)?;
        elements.push(at..end);
        at = skip_ws(json, end);
        match json.get(at) {
            Some(b',') => at = skip_ws(json, at + 1),
            Some(b']') => return Some((elements, at)),
            _ => return None,
        }
    }
}

/// The members of the object that `json` holds, read from its end: the last member first.
/// Clients put `tools` after the history, so a caller looking for it stops long before the
/// history, whatever its size. The walk ends early (yields no more) at a malformed structure;
/// a caller that needs to tell "absent" from "malformed" uses [`object_members`].
pub fn members_rev(json: &[u8]) -> MembersRev<'_> {
    let end = json.iter().rposition(|&b| !is_ws(b));
    let at = match end {
        Some(end) if json[end] == b'}' => Some(end),
        _ => None,
    };
    MembersRev {
        json,
        at,
        separators: Vec::new(),
    }
}

/// Iterator of [`members_rev`]: `at` is the `}` or `,` that follows the next member to yield.
pub struct MembersRev<'a> {
    json: &'a [u8],
    at: Option<usize>,
    /// The commas between the elements of the last yielded value, when it is an array.
    separators: Vec<usize>,
}

impl MembersRev<'_> {
    /// The element spans of `member`, the member last yielded, when its value is an array:
    /// found by the same pass that found the member, so the array is not read twice.
    pub fn elements_of_last(&self, member: &Member) -> Option<Vec<Range<usize>>> {
        let json = self.json;
        if json.get(member.value.start) != Some(&b'[') {
            return None;
        }
        let inner = member.value.start + 1..member.value.end - 1;
        if json[inner.clone()].iter().all(|&b| is_ws(b)) {
            return Some(Vec::new());
        }
        let mut bounds = vec![inner.start];
        bounds.extend(self.separators.iter().rev().map(|&comma| comma + 1));
        let ends = self.separators.iter().rev().copied().chain([inner.end]);
        Some(
            bounds
                .into_iter()
                .zip(ends)
                .map(|(start, end)| {
                    let start = skip_ws(json, start);
                    let end = json[..end]
                        .iter()
                        .rposition(|&b| !is_ws(b))
                        .map_or(start, |l| l + 1);
                    start..end
                })
                .collect(),
        )
    }
}

impl Iterator for MembersRev<'_> {
    type Item = Member;

    fn next(&mut self) -> Option<Member> {
        let json = self.json;
        let after = self.at.take()?;
        let last = skip_ws_back(json, after)?;
        if json[last] == b'{' {
            return None;
        }
        self.separators.clear();
        let value_start = value_start_back(json, last, &mut self.separators)?;
        let colon = skip_ws_back(json, value_start)?;
        if json[colon] != b':' {
            return None;
        }
        let key_close = skip_ws_back(json, colon)?;
        if json[key_close] != b'"' {
            return None;
        }
        let key_open = string_start_back(json, key_close)?;
        let before = skip_ws_back(json, key_open)?;
        match json[before] {
            b',' => self.at = Some(before),
            b'{' if skip_ws_back(json, before).is_none() => {}
            _ => return None,
        }
        Some(Member {
            key: key_open + 1..key_close,
            value: value_start..last + 1,
        })
    }
}

/// The index of the last non-whitespace byte before `at`.
fn skip_ws_back(json: &[u8], at: usize) -> Option<usize> {
    json[..at].iter().rposition(|&b| !is_ws(b))
}

/// The opening quote of the string whose closing quote is at `close`.
fn string_start_back(json: &[u8], close: usize) -> Option<usize> {
    let mut before = close;
    loop {
        let quote = memchr::memrchr(b'"', &json[..before])?;
        // Backslashes cannot occur outside strings, so an unescaped quote is a delimiter.
        if !escaped(json, quote) {
            return Some(quote);
        }
        before = quote;
    }
}

/// The index where the value whose last byte is at `last` begins; the commas directly inside
/// it (between an array's elements or an object's members) go to `separators`, last first.
fn value_start_back(json: &[u8], last: usize, separators: &mut Vec<usize>) -> Option<usize> {
    match json[last] {
        b'"' => string_start_back(json, last),
        b'}' | b']' => {
            let mut depth = 0usize;
            let mut at = last + 1;
            while at > 0 {
                at -= 1;
                match json[at] {
                    b'"' => at = string_start_back(json, at)?,
                    b'}' | b']' => depth += 1,
                    b'{' | b'[' => {
                        depth = depth.checked_sub(1)?;
                        if depth == 0 {
                            return Some(at);
                        }
                    }
                    b',' if depth == 1 => separators.push(at),
                    _ => {}
                }
            }
            None
        }
        _ => {
            let start = json[..=last]
                .iter()
                .rposition(|&b| is_ws(b) || matches!(b, b',' | b'{' | b'[' | b':'))
                .map_or(0, |d| d + 1);
            (start <= last).then_some(start)
        }
    }
}

/// Whether the quote at `at` is escaped: preceded by an odd run of backslashes.
fn escaped(json: &[u8], at: usize) -> bool {
    json[..at].iter().rev().take_while(|&&b| b == b'\\').count() % 2 == 1
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
        let quote = from + next_quote(json.get(from..)?)?;
        // A quote closes the string unless an odd run of backslashes escapes it.
        if !escaped(json, quote) {
            return Some(quote + 1);
        }
        from = quote + 1;
    }
}

/// The offset of the first `"` in `bytes`. Most strings in a request are short (keys, types,
/// ids), and a vectorised search costs more to set up than a short loop, so the first bytes are
/// looked at one by one.
fn next_quote(bytes: &[u8]) -> Option<usize> {
    const SHORT: usize = 24;
    let head = &bytes[..bytes.len().min(SHORT)];
    match head.iter().position(|&b| b == b'"') {
        Some(at) => Some(at),
        None if bytes.len() > SHORT => memchr::memchr(b'"', &bytes[SHORT..]).map(|at| at + SHORT),
        None => None,
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
    fn a_member_is_found_from_the_front_and_an_array_read_from_inside() {
        let json = br#"{"model":"m", "messages" : [ {"a":"]"} , [1,2] ,"x" ] , "tools":[]}"#;
        let member = member_forward(json, b"messages").unwrap();
        let array = &json[member.value.clone()];
        assert_eq!(array, br#"[ {"a":"]"} , [1,2] ,"x" ]"#);
        let start = member.value.start;
        let (all, close) = elements_after(json, start + 1, true).unwrap();
        let texts: Vec<&[u8]> = all.iter().map(|r| &json[r.clone()]).collect();
        assert_eq!(texts, [&br#"{"a":"]"}"#[..], b"[1,2]", br#""x""#]);
        assert_eq!(close + 1, member.value.end);
        // From the end of the first element: the two after it, and the same close.
        let (rest, again) = elements_after(json, all[0].end, false).unwrap();
        assert_eq!((rest, again), (all[1..].to_vec(), close));
        // From the last element's end, nothing is left; from the middle of one, a malformed read.
        assert_eq!(
            elements_after(json, all[2].end, false),
            Some((vec![], close))
        );
        assert_eq!(elements_after(json, all[0].start + 1, false), None);
        assert_eq!(elements_after(b"[ ]", 1, true), Some((vec![], 2)));
        assert_eq!(first_element(json, start), Some(all[0].clone()));
        assert_eq!(first_element(b"[ ]", 0), None);
        assert_eq!(member_forward(json, b"absent"), None);
        assert_eq!(member_forward(br#"{"a":1 "b":2}"#, b"b"), None);
        // The value's start alone, its value never read (here it is cut short).
        assert_eq!(member_value_start(json, b"messages"), Some(start));
        assert_eq!(member_value_start(json, b"absent"), None);
        assert_eq!(member_value_start(br#"{"a":1 "b":2}"#, b"b"), None);
        let cut = br#"{"model":"m","messages": [{"a":1}, {"b""#;
        assert_eq!(member_forward(cut, b"messages"), None);
        assert_eq!(member_value_start(cut, b"messages"), Some(25));
        assert_eq!(member_value_start(br#"{"x":[1,"#, b"messages"), None);
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

    #[test]
    fn reading_from_the_end_stops_at_broken_structure() {
        let keys_rev = |json: &str| -> Vec<String> {
            members_rev(json.as_bytes())
                .map(|m| json[m.key].to_owned())
                .collect()
        };
        assert_eq!(
            keys_rev(r#"{"a":"x\"y","b":[1,"]"],"c":-2}"#),
            ["c", "b", "a"]
        );
        assert_eq!(keys_rev("{}"), Vec::<String>::new());
        // The members after the break are still read; the walk stops at it.
        assert_eq!(keys_rev(r#"{"a" 1,"b":2}"#), ["b"]);
        assert_eq!(
            keys_rev(r#"x{"a":1}"#),
            Vec::<String>::new(),
            "text before the object"
        );
        assert_eq!(keys_rev(r#"{"a":1"#), Vec::<String>::new());
        assert_eq!(keys_rev("[1,2]"), Vec::<String>::new());
    }
}
