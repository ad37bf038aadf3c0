//! The body a stage sent upstream, kept as the client's body with the few places it changed.
//!
//! Deferral (on by default) inserts `,"defer_loading":true` into each tool it defers, takes
//! a breakpoint off one and appends its search tool: a handful of small edits spread over the
//! `tools` array, 36 KB of Claude Code's 56 KB body. Kept as one span from the first edit to
//! the last, the spool wrote most of that array again on every request; the edits alone are a
//! few hundred bytes. They are found from the two bodies, not taken from the stages: what is
//! kept reproduces the sent body whatever the stages did, because every byte said to be the
//! client's was compared with the sent one.

use memchr::memmem;
use pith_wire::skim::{common_prefix, common_suffix};

/// One place the sent body differs: the client's bytes `start..end` replaced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Edit<'a> {
    pub start: usize,
    pub end: usize,
    pub replacement: &'a [u8],
}

/// Bytes both bodies must hold alike, past a difference, to be taken as where they meet
/// again (the comparison that follows checks it and goes on).
const ANCHOR: usize = 16;

/// How far past a difference the other body is searched for where they meet again.
const WINDOW: usize = 4096;

/// How far into the client's bytes an anchor from the sent body is searched for.
const FAR: usize = 256 << 10;

/// How far into the sent body's bytes those anchors are taken (a marker line is short).
const MARKER_MAX: usize = 256;

/// How many line starts in those bytes are tried.
const LINES_TRIED: usize = 2;

/// The bytes two places must go on alike for to be where the bodies meet again.
const MEET_MIN: usize = 64;

/// Bytes the far searches of one body may read, as a multiple of its length: what differs
/// everywhere is found to be one edit in time linear in the body.
const FAR_READS: usize = 4;

/// What the spool writes for an edit besides its replacement's bytes: its start, its end and
/// the replacement's length, eight bytes each.
pub(crate) const EDIT_BYTES: usize = 24;

/// At most this many edits: past them, the rest of what differs is one edit.
pub(crate) const EDITS_MAX: usize = 64;

/// `sent` as `client` with edits, in order and apart: the bytes the two share at either end
/// and between the edits compared alike. An empty list when they are equal.
pub(crate) fn edits_of<'s>(client: &[u8], sent: &'s [u8]) -> Vec<Edit<'s>> {
    let prefix = common_prefix(client, sent);
    let suffix = common_suffix(&client[prefix..], &sent[prefix..]);
    edits_between(client, sent, prefix, suffix)
}

/// [`edits_of`] when the bodies are known to share `prefix` bytes at their start and, after
/// those, `suffix` at their end.
pub(crate) fn edits_between<'s>(
    client: &[u8],
    sent: &'s [u8],
    prefix: usize,
    suffix: usize,
) -> Vec<Edit<'s>> {
    let (client_end, sent_end) = (client.len() - suffix, sent.len() - suffix);
    let mut edits = Vec::new();
    let (mut i, mut j) = (prefix, prefix);
    let mut budget = FAR_READS.saturating_mul(client.len());
    // Here the two differ at once (or one of them has nothing left before the suffix).
    while i < client_end || j < sent_end {
        let meet = (edits.len() + 1 < EDITS_MAX)
            .then(|| meeting(&client[i..client_end], &sent[j..sent_end], &mut budget))
            .flatten();
        let Some((skipped, inserted)) = meet else {
            edits.push(Edit {
                start: i,
                end: client_end,
                replacement: &sent[j..sent_end],
            });
            break;
        };
        edits.push(Edit {
            start: i,
            end: i + skipped,
            replacement: &sent[j..j + inserted],
        });
        i += skipped;
        j += inserted;
        let alike = common_prefix(&client[i..client_end], &sent[j..sent_end]);
        i += alike;
        j += alike;
    }
    edits
}

/// Where `client` and `sent`, which differ at their first byte, hold the same [`ANCHOR`]
/// bytes again: the client's bytes skipped and the sent bytes put in their place. An
/// insertion or a removal is looked for first, then a replacement: an anchor taken further and
/// further into the client's bytes (within [`WINDOW`]) and searched in the sent body's next
/// [`WINDOW`] bytes; then one taken where a line starts in the sent body's first
/// [`MARKER_MAX`] bytes and searched in the client's next [`FAR`] bytes (a marker line the
/// outputs stage put where tens of kilobytes of an output's lines were), while `budget`
/// (bytes such far searches may still read) lasts. A place is taken only where the two go on
/// alike for [`MEET_MIN`] bytes or to their ends: text repeats (`    }`, `of the file");`),
/// and a meeting taken on a repeat is a run of wrong edits. `None` when they do not meet.
fn meeting(client: &[u8], sent: &[u8], budget: &mut usize) -> Option<(usize, usize)> {
    if client.len() < ANCHOR || sent.len() < ANCHOR {
        return None;
    }
    fn window(b: &[u8], size: usize) -> &[u8] {
        &b[..b.len().min(size + ANCHOR)]
    }
    let meets = |(skipped, put): (usize, usize)| {
        let (c, s) = (&client[skipped..], &sent[put..]);
        let (c, s) = (&c[..c.len().min(MEET_MIN)], &s[..s.len().min(MEET_MIN)]);
        let alike = common_prefix(c, s);
        alike == MEET_MIN || alike == c.len() || alike == s.len()
    };
    let inserted = memmem::find(&window(sent, WINDOW)[1..], &client[..ANCHOR])
        .map(|at| (0, at + 1))
        .filter(|&m| meets(m));
    let removed = memmem::find(&window(client, WINDOW)[1..], &sent[..ANCHOR])
        .map(|at| (at + 1, 0))
        .filter(|&m| meets(m));
    let best = [inserted, removed]
        .into_iter()
        .flatten()
        .min_by_key(|(skipped, put)| skipped + put);
    if best.is_some() {
        return best;
    }
    let mut skipped = 1;
    while skipped + ANCHOR <= client.len() && skipped <= WINDOW {
        let anchor = &client[skipped..skipped + ANCHOR];
        if let Some(at) = memmem::find(window(sent, WINDOW), anchor)
            && meets((skipped, at))
        {
            return Some((skipped, at));
        }
        skipped *= 2;
    }
    // A marker line in place of an output's lines: where the next line of the sent body
    // starts (after a newline, escaped as JSON strings have it), searched far in the client's.
    let far = window(client, FAR);
    let line_starts = memmem::find_iter(window(sent, MARKER_MAX), b"\\n").map(|at| at + 2);
    for put in line_starts.take(LINES_TRIED) {
        if put + ANCHOR > sent.len() || *budget == 0 {
            break;
        }
        let found = memmem::find(&far[1..], &sent[put..put + ANCHOR]).map(|at| at + 1);
        *budget = budget.saturating_sub(found.map_or(far.len(), |at| at + ANCHOR));
        if let Some(at) = found
            && meets((at, put))
        {
            return Some((at, put));
        }
    }
    None
}

/// The sent body again: `client` with `edits` (in order and apart, within it). `None` when
/// they are not.
pub(crate) fn rebuild(client: &[u8], edits: &[Edit<'_>]) -> Option<Vec<u8>> {
    let mut cursor = 0;
    let mut size = client.len();
    for e in edits {
        if e.start < cursor || e.end < e.start || e.end > client.len() {
            return None;
        }
        size = size - (e.end - e.start) + e.replacement.len();
        cursor = e.end;
    }
    let mut sent = Vec::with_capacity(size);
    let mut cursor = 0;
    for e in edits {
        sent.extend_from_slice(&client[cursor..e.start]);
        sent.extend_from_slice(e.replacement);
        cursor = e.end;
    }
    sent.extend_from_slice(&client[cursor..]);
    Some(sent)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(n: usize) -> String {
        let tools: Vec<String> = (0..n)
            .map(|k| {
                format!(
                    "{{\"name\":\"Tool{k}\",\"description\":\"does thing {k} to the files\",\
                     \"input_schema\":{{\"type\":\"object\",\"properties\":{{}}}}}}"
                )
            })
            .collect();
        format!(
            "{{\"messages\":[],\"tools\":[{}],\"stream\":true}}",
            tools.join(",")
        )
    }

    #[test]
    fn deferrals_insertions_are_found_one_by_one() {
        let client = tools(40);
        // Every other tool deferred, a breakpoint taken off, the search tool appended.
        let mut sent = client.clone();
        for k in (1..40).step_by(2).rev() {
            let close = sent.find(&format!("\"name\":\"Tool{k}\"")).unwrap();
            let end = close + sent[close..].find("}}}").unwrap() + 3;
            sent.insert_str(end - 1, ",\"defer_loading\":true");
        }
        sent = sent.replacen("\"description\":\"does thing 0 to the files\",", "", 1);
        let end = sent.rfind("]").unwrap();
        sent.insert_str(end, ",{\"type\":\"tool_search\",\"name\":\"tool_search\"}");
        let edits = edits_of(client.as_bytes(), sent.as_bytes());
        // The last insertion and the search tool a byte apart are one edit.
        assert_eq!(edits.len(), 21, "{edits:?}");
        let kept: usize = edits.iter().map(|e| e.replacement.len() + EDIT_BYTES).sum();
        assert!(kept < 1_200, "{kept} bytes kept of {}", sent.len());
        assert_eq!(
            rebuild(client.as_bytes(), &edits).as_deref(),
            Some(sent.as_bytes())
        );
    }

    /// An output the outputs stage shortened (a line said before it, runs of lines of
    /// kilobytes each given way to a marker) is kept as a few small edits, not as the rest of
    /// the body from the first run on, though its lines repeat text that could pass for
    /// where the two meet.
    #[test]
    fn an_excerpts_markers_in_place_of_long_runs_are_small_edits() {
        let lines: Vec<String> = (0..600)
            .map(|k| format!("    let value_{k} = compute({k}, \"line {k} of the file\");"))
            .collect();
        let body =
            |lines: &[String]| format!("{{\"messages\":[{:?}],\"stream\":true}}", lines.join("\n"));
        let client = body(&lines);
        let mut shown: Vec<String> = vec!["[pith: 160 of 600 lines shown]".into()];
        for (k, line) in lines.iter().enumerate() {
            match k {
                40..=199 | 240..=449 | 480..=599 => {
                    if [40, 240, 480].contains(&k) {
                        shown.push("[... lines not shown ...]".into());
                    }
                }
                _ => shown.push(line.clone()),
            }
        }
        let sent = body(&shown);
        let edits = edits_of(client.as_bytes(), sent.as_bytes());
        let kept: usize = edits.iter().map(|e| e.replacement.len() + EDIT_BYTES).sum();
        assert!(edits.len() <= 6, "{} edits", edits.len());
        let shape: Vec<(usize, usize, usize)> = edits
            .iter()
            .map(|e| (e.start, e.end, e.replacement.len()))
            .collect();
        assert!(kept < 400, "{kept} bytes kept of {}: {shape:?}", sent.len());
        assert_eq!(
            rebuild(client.as_bytes(), &edits).as_deref(),
            Some(sent.as_bytes())
        );
    }

    /// Whatever the two bodies, what is kept gives the sent one back.
    #[test]
    fn any_two_bodies_come_back_as_they_were() {
        let base = tools(12);
        let mut cases: Vec<(String, String)> = vec![
            (String::new(), String::new()),
            (String::new(), "abc".into()),
            ("abc".into(), String::new()),
            ("abc".into(), "abc".into()),
            (base.clone(), base.replace("Tool", "T")),
            (base.clone(), base.replace("files", "whole files and more")),
            (base.clone(), base[..base.len() / 2].to_owned()),
            (base.clone(), format!("{base}{base}")),
            ("a".repeat(9_000), "b".repeat(9_000)),
            ("ab".repeat(5_000), "ba".repeat(5_000)),
        ];
        // Past the most edits a body is kept with: the rest as one.
        let mut many = base.clone();
        for k in 0..12 {
            many = many.replace(&format!("thing {k} "), &format!("thing {k}{k} "));
        }
        cases.push((base.repeat(8), many.repeat(8)));
        for (client, sent) in &cases {
            let edits = edits_of(client.as_bytes(), sent.as_bytes());
            assert!(edits.len() <= EDITS_MAX);
            assert_eq!(
                rebuild(client.as_bytes(), &edits).as_deref(),
                Some(sent.as_bytes()),
                "{} bytes against {}",
                client.len(),
                sent.len()
            );
        }
    }

    #[test]
    fn edits_out_of_order_or_outside_the_body_are_refused() {
        let e = |start, end| Edit {
            start,
            end,
            replacement: b"x",
        };
        assert_eq!(
            rebuild(b"abcdef", &[e(1, 2), e(4, 6)]),
            Some(b"axcdx".to_vec())
        );
        assert_eq!(rebuild(b"abcdef", &[e(4, 6), e(1, 2)]), None);
        assert_eq!(rebuild(b"abcdef", &[e(3, 2)]), None);
        assert_eq!(rebuild(b"abcdef", &[e(5, 7)]), None);
    }
}
