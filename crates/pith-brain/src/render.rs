//! Text for people (CLI) and agents (MCP): the same words in both places, with the next step
//! named in each caller's own terms ([`Hints`]).
//!
//! Agent-facing text is short on purpose: every line costs tokens on the turn that reads it.
//! What a memory holds is printed bounded (memories saved before the limits included) and with
//! the characters that could rewrite a terminal or reorder a line shown escaped ([`one_line`]).

use std::fmt::Write;

use serde_json::{Value, json};

use crate::evidence::{EvidenceCheck, EvidenceState, Status, write_range};
use crate::model::{Evidence, Freshness, Memory, MemoryRef};
use crate::store::Matched;
use crate::{
    Checked, MAX_BODY_BYTES, MAX_HEADLINE_CHARS, MAX_SNIPPET_CHARS, MAX_TAG_CHARS, MAX_TAGS,
    MAX_TITLE_CHARS, SearchResult, Verification,
};

pub use crate::chain::error_chain;

/// How the caller names the follow-up actions.
#[derive(Debug, Clone, Copy)]
pub struct Hints {
    /// Getting a full memory by id, e.g. `get_memory` or `pith memory show <id>`. In the
    /// hints below, `<id>` is replaced by the memory's id where one memory is meant.
    pub get: &'static str,
    /// Seeing more search results, e.g. `raise limit` or `use --limit N`.
    pub more: &'static str,
    /// Re-recording evidence after checking, e.g. `verify_memory with accept=true`.
    pub accept: &'static str,
    /// Trashing a memory, e.g. `forget_memory` or `pith memory forget <id>`.
    pub forget: &'static str,
    /// Restoring from the trash.
    pub restore: &'static str,
}

/// `path:3-9`.
pub fn evidence_name(e: &Evidence) -> String {
    // A path came from the project (a file a stranger named) or from a brain's file.
    let mut s = escape(&e.path, false);
    if let Some(l) = e.lines {
        let _ = write_range(&mut s, l);
    }
    s
}

fn state_word(state: &EvidenceState) -> String {
    match state {
        EvidenceState::Unchanged => "unchanged".into(),
        EvidenceState::Changed => "changed".into(),
        EvidenceState::Gone => "gone".into(),
        EvidenceState::Unrecorded => "no hash recorded".into(),
        EvidenceState::Unreadable { reason } => format!("unreadable: {}", one_line(reason, 200)),
    }
}

/// `fresh`, `unverified`, or `stale: src/a.rs changed, src/b.rs gone`.
pub fn status(status: &Status) -> String {
    match status.freshness {
        Freshness::Stale => {
            let problems: Vec<String> = status
                .problems()
                .map(|c| format!("{} {}", evidence_name(&c.recorded), state_word(&c.state)))
                .collect();
            format!("stale: {}", problems.join(", "))
        }
        other => other.as_str().to_owned(),
    }
}

/// `m-7f3a fix [fresh] Retry on SQLITE_BUSY`.
pub fn headline_line(c: &Checked) -> String {
    format!(
        "{} {} [{}] {}",
        id(&c.memory.id),
        c.memory.kind,
        status(&c.status),
        title(&c.memory.title)
    )
}

/// One-line text from a memory or a caller (a title, an error headline, a tag, a snippet, a
/// query) as it is printed: at most `max` characters of it (the rest as `…`), and each control
/// character, bidirectional override, isolate or mark (U+202A..U+202E, U+2066..U+2069, U+200E,
/// U+200F, U+061C) and line or paragraph separator shown as its escape (`\u{202e}`), so the
/// text can neither rewrite the terminal nor display in another order than it reads.
pub fn one_line(text: &str, max: usize) -> String {
    escape(&clip(text, max), false)
}

/// A memory's id as printed: pith makes them `m-` and hex, but a brain file that came with a
/// project holds whatever its author wrote.
fn id(text: &str) -> String {
    one_line(text, MAX_ID_CHARS)
}

/// The longest id shown whole.
const MAX_ID_CHARS: usize = 80;

fn title(text: &str) -> String {
    one_line(text, MAX_TITLE_CHARS)
}

fn tags(tags: &[String], separator: &str) -> String {
    let mut shown: Vec<String> = tags
        .iter()
        .take(MAX_TAGS)
        .map(|t| one_line(t, MAX_TAG_CHARS))
        .collect();
    if tags.len() > MAX_TAGS {
        shown.push("…".to_owned());
    }
    shown.join(separator)
}

fn needs_escape(c: char, keep_lines: bool) -> bool {
    if keep_lines && matches!(c, '\n' | '\t') {
        return false;
    }
    pith_paths::shown::needs_escape(c)
}

/// Text of any length as a terminal shows it (an error message that quotes what a user, a
/// file or a database gave it): escaped like [`one_line`], its line breaks and tabs kept.
pub fn printable(text: &str) -> String {
    escape(text, true)
}

/// `text` with every character [`one_line`] escapes escaped; `keep_lines` leaves line breaks
/// and tabs (a body).
fn escape(text: &str, keep_lines: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if needs_escape(c, keep_lines) {
            let _ = write!(out, "{}", c.escape_unicode());
        } else {
            out.push(c);
        }
    }
    out
}

/// A body as printed: escaped like [`one_line`] but keeping its lines, and at most
/// [`MAX_BODY_BYTES`] (only a memory saved before the limit is longer).
fn body(text: &str) -> String {
    if text.len() <= MAX_BODY_BYTES {
        return escape(text, true);
    }
    let cut = (0..=MAX_BODY_BYTES)
        .rev()
        .find(|&i| text.is_char_boundary(i))
        .unwrap_or(0);
    let mut out = escape(&text[..cut], true);
    let _ = write!(out, "… [{} more bytes]", text.len() - cut);
    out
}

/// A whole memory.
pub fn memory(c: &Checked) -> String {
    let m = &c.memory;
    let mut out = format!("{} {}: {}\n", id(&m.id), m.kind, title(&m.title));
    let _ = writeln!(out, "status: {}", status(&c.status));
    if let Some(h) = &m.headline {
        let _ = writeln!(out, "error: {}", one_line(h, MAX_HEADLINE_CHARS));
    }
    if !m.tags.is_empty() {
        let _ = writeln!(out, "tags: {}", tags(&m.tags, ", "));
    }
    if !c.status.evidence.is_empty() {
        let list: Vec<String> = c.status.evidence.iter().map(evidence_with_state).collect();
        let _ = writeln!(out, "evidence: {}", list.join(", "));
    }
    let _ = write!(out, "saved {}", date(m.created_at));
    if let Some(check) = &m.last_check {
        let _ = write!(out, ", verified {} ({})", date(check.at), check.status);
    }
    let _ = writeln!(out, ", {} {}", m.hits, plural(m.hits, "hit", "hits"));
    if let Some(t) = m.trashed_at {
        let _ = writeln!(out, "in the trash since {}", date(t));
    }
    if !m.body.is_empty() {
        let _ = write!(out, "\n{}\n", body(&m.body));
    }
    out
}

fn evidence_with_state(c: &EvidenceCheck) -> String {
    format!("{} ({})", evidence_name(&c.recorded), state_word(&c.state))
}

/// Search results, best first, with how many more matched and how to see them.
pub fn search(result: &SearchResult, hints: &Hints) -> String {
    let q = &one_line(&result.query, MAX_TITLE_CHARS);
    if result.hits.is_empty() {
        return format!("no memories match \"{q}\"\n");
    }
    let shown = result.hits.len() as u64;
    let mut out = match result.ranked_newest {
        Some(newest) => format!(
            "{shown} of more than {} memories matching \"{q}\" (the newest {newest} ranked), best first",
            result.total
        ),
        None if shown == result.total => format!(
            "{shown} {} \"{q}\"",
            plural(shown, "memory matches", "memories match")
        ),
        None => format!(
            "{shown} of {} memories matching \"{q}\", best first",
            result.total
        ),
    };
    if result.matched == Matched::Any {
        out.push_str(" (any of the words)");
    }
    out.push_str(":\n");
    for found in &result.hits {
        let _ = writeln!(out, "{}", headline_line(&found.checked));
        if let Some(h) = &found.checked.memory.headline {
            let _ = writeln!(out, "  error: {}", one_line(h, MAX_HEADLINE_CHARS));
        }
        if !found.snippet.is_empty() {
            let _ = writeln!(out, "  {}", one_line(&found.snippet, MAX_SNIPPET_CHARS));
        }
    }
    if result.total_capped {
        let _ = writeln!(out, "Many more match: add words to narrow the query.");
    } else if result.total > shown {
        let _ = writeln!(
            out,
            "{} more: {} or narrow the query.",
            result.total - shown,
            hints.more
        );
    }
    let _ = writeln!(out, "Full memory: {}.", hints.get);
    out
}

/// One line per memory, for listings.
pub fn list(items: &[Checked]) -> String {
    let mut out = String::new();
    for c in items {
        let m = &c.memory;
        let _ = write!(
            out,
            "{:<8} {:<8} {:<10} {}",
            id(&m.id),
            m.kind.as_str(),
            c.status.freshness.as_str(),
            title(&m.title)
        );
        if !m.tags.is_empty() {
            let _ = write!(out, "  [{}]", tags(&m.tags, " "));
        }
        out.push('\n');
    }
    out
}

/// What a verification found and what to do about it.
pub fn verification(v: &Verification, hints: &Hints) -> String {
    let mut out = format!("{} {}: ", id(&v.id), title(&v.title));
    match &v.accepted {
        Some(old) => {
            let _ = writeln!(
                out,
                "{} -> evidence re-recorded, now {}",
                status(old),
                status(&v.status)
            );
            return out;
        }
        None => out.push_str(&status(&v.status)),
    }
    match v.before {
        Some(before) if before != v.status.freshness => {
            let _ = write!(out, " (was {before})");
        }
        Some(_) => out.push_str(" (unchanged since the last verify)"),
        None => {}
    }
    out.push('\n');
    for c in &v.status.evidence {
        let _ = writeln!(out, "  {}", evidence_with_state(c));
    }
    if v.status.freshness == Freshness::Stale {
        let _ = writeln!(
            out,
            "The memory may no longer hold. If it still does: {}; if not: {}.",
            hints.accept.replace("<id>", &id(&v.id)),
            hints.forget.replace("<id>", &id(&v.id))
        );
    }
    out
}

/// A note from a brain that came with the project ([`crate::origin::Origin::Project`]) says so
/// in its first words, so the model reads the titles as the project's text, not as pith's; a
/// note from the user's own brain is unchanged.
pub fn from_origin(note: String, origin: crate::origin::Origin) -> String {
    match origin {
        crate::origin::Origin::Own => note,
        crate::origin::Origin::Project => format!(
            "pith, quoting a memory file that came with this project (not written by your \
             pith; `pith memory trust` once reviewed): {}",
            note.strip_prefix("pith: ").unwrap_or(&note)
        ),
    }
}

/// The one line appended to a file read when memories cite that file: ids and titles only.
pub fn pointer_line(refs: &[MemoryRef], hints: &Hints) -> Option<String> {
    const SHOWN: usize = 5;
    if refs.is_empty() {
        return None;
    }
    let n = refs.len();
    let mut items: Vec<String> = refs
        .iter()
        .take(SHOWN)
        .map(|r| format!("{} {}: {}", id(&r.id), r.kind, one_line(&r.title, 80)))
        .collect();
    if n > SHOWN {
        items.push(format!("{} more", n - SHOWN));
    }
    Some(format!(
        "pith: {} {} on this file: {}; {} for details",
        n,
        plural(n as u64, "memory", "memories"),
        items.join(", "),
        hints.get
    ))
}

/// The reply to a save: `saved m-7f3a (fix, fresh): Retry on SQLITE_BUSY`.
pub fn saved(c: &Checked) -> String {
    let m = &c.memory;
    format!(
        "saved {} ({}, {}): {}\n",
        id(&m.id),
        m.kind,
        status(&c.status),
        title(&m.title)
    )
}

/// [`saved`], then the evidence files that were hashed (`evidence hashed: src/db.rs:40-60`), so
/// an agent sees which of the paths it named were recorded.
pub fn saved_with_evidence(c: &Checked) -> String {
    let mut out = saved(c);
    if !c.memory.evidence.is_empty() {
        let names: Vec<String> = c.memory.evidence.iter().map(evidence_name).collect();
        let _ = writeln!(out, "evidence hashed: {}", names.join(", "));
    }
    out
}

/// A memory moved to or from the trash.
pub fn trashed(m: &Memory, hints: &Hints) -> String {
    format!(
        "{} {}: moved to the trash; {} brings it back\n",
        id(&m.id),
        title(&m.title),
        hints.restore.replace("<id>", &id(&m.id))
    )
}

/// A memory brought back from the trash.
pub fn restored(m: &Memory) -> String {
    format!("{} {}: restored\n", id(&m.id), title(&m.title))
}

/// The JSON form of evidence checks (`--json`): path, lines, hash, and what became of it.
pub fn evidence_json(checks: &[EvidenceCheck]) -> Value {
    checks
        .iter()
        .map(|c| {
            let mut v = json!({
                "path": c.recorded.path,
                "lines": c.recorded.lines,
                "hash": c.recorded.hash,
                "state": match &c.state {
                    EvidenceState::Unchanged => "unchanged",
                    EvidenceState::Changed => "changed",
                    EvidenceState::Gone => "gone",
                    EvidenceState::Unrecorded => "unrecorded",
                    EvidenceState::Unreadable { .. } => "unreadable",
                },
            });
            if let EvidenceState::Unreadable { reason } = &c.state {
                v["reason"] = json!(reason);
            }
            v
        })
        .collect()
}

/// The JSON form of a memory with its derived status (`--json`).
pub fn memory_json(c: &Checked) -> Value {
    let m = &c.memory;
    json!({
        "id": m.id,
        "kind": m.kind,
        "title": m.title,
        "body": m.body,
        "tags": m.tags,
        "headline": m.headline,
        "status": c.status.freshness,
        "evidence": evidence_json(&c.status.evidence),
        "hits": m.hits,
        "last_hit_at": m.last_hit_at,
        "created_at": m.created_at,
        "updated_at": m.updated_at,
        "last_check": m.last_check,
        "trashed_at": m.trashed_at,
    })
}

/// The JSON form of a search (`--json`).
pub fn search_json(result: &SearchResult) -> Value {
    let hits: Vec<Value> = result
        .hits
        .iter()
        .map(|f| {
            let mut v = memory_json(&f.checked);
            v["snippet"] = json!(f.snippet);
            v
        })
        .collect();
    json!({
        "query": result.query,
        "total": result.total,
        "total_capped": result.total_capped,
        "matched": result.matched,
        "ranked_newest": result.ranked_newest,
        "hits": hits,
    })
}

/// The JSON form of a verification (`--json`).
pub fn verification_json(v: &Verification) -> Value {
    json!({
        "id": v.id,
        "title": v.title,
        "before": v.before,
        "status": v.status.freshness,
        "evidence": evidence_json(&v.status.evidence),
        "accepted": v.accepted.as_ref().map(|old| json!({
            "status": old.freshness,
            "evidence": evidence_json(&old.evidence),
        })),
    })
}

/// `s`, or its first `max - 1` characters and `…` when it is longer than `max`.
pub(crate) fn clip(s: &str, max: usize) -> String {
    if s.chars().count() <= max {
        return s.to_owned();
    }
    let mut out: String = s.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}

fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

/// `2026-11-20` (UTC) from unix seconds.
pub fn date(secs: i64) -> String {
    // Howard Hinnant's days-to-civil algorithm.
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{Kind, LineRange};

    const HINTS: Hints = Hints {
        get: "get_memory",
        more: "raise limit",
        accept: "verify with accept",
        forget: "forget_memory",
        restore: "restore",
    };

    #[test]
    fn saved_names_the_memory_and_optionally_its_evidence() {
        let evidence = |path: &str, lines| Evidence {
            path: path.into(),
            lines,
            hash: None,
            size: None,
            mtime_ns: None,
        };
        let mut c = checked("Retry on busy");
        let line = "saved m-7f3a (fix, fresh): Retry on busy\n";
        assert_eq!(saved(&c), line);
        assert_eq!(saved_with_evidence(&c), line);
        c.memory.evidence = vec![
            evidence("src/db.rs", Some(LineRange { start: 40, end: 60 })),
            evidence("Cargo.toml", None),
        ];
        assert_eq!(saved(&c), line);
        assert_eq!(
            saved_with_evidence(&c),
            format!("{line}evidence hashed: src/db.rs:40-60, Cargo.toml\n")
        );
    }

    fn checked(title: &str) -> Checked {
        Checked {
            memory: Memory {
                id: "m-7f3a".into(),
                kind: Kind::Fix,
                title: title.into(),
                body: String::new(),
                tags: Vec::new(),
                headline: None,
                evidence: Vec::new(),
                created_at: 0,
                updated_at: 0,
                hits: 0,
                last_hit_at: None,
                last_check: None,
                trashed_at: None,
            },
            status: Status {
                freshness: Freshness::Fresh,
                evidence: Vec::new(),
            },
        }
    }

    #[test]
    fn control_and_bidi_characters_in_titles_are_shown_escaped() {
        let title = "Retry \u{1b}[31mred\u{7} \u{202e}txt.exe\u{2066}x\u{2069} ok";
        let escaped = "Retry \\u{1b}[31mred\\u{7} \\u{202e}txt.exe\\u{2066}x\\u{2069} ok";
        let c = checked(title);
        let refs = [MemoryRef {
            id: "m-7f3a".into(),
            kind: Kind::Fix,
            title: title.into(),
        }];
        let checked_now = Verification {
            id: "m-7f3a".into(),
            title: title.into(),
            before: None,
            status: c.status.clone(),
            accepted: None,
        };
        let result = SearchResult {
            query: "retry".into(),
            total: 1,
            total_capped: false,
            matched: Matched::All,
            ranked_newest: None,
            hits: vec![crate::Found {
                checked: c.clone(),
                snippet: String::new(),
            }],
        };
        for text in [
            headline_line(&c),
            memory(&c),
            list(std::slice::from_ref(&c)),
            saved(&c),
            trashed(&c.memory, &HINTS),
            restored(&c.memory),
            verification(&checked_now, &HINTS),
            pointer_line(&refs, &HINTS).unwrap(),
            search(&result, &HINTS),
        ] {
            assert!(text.contains(escaped), "{text:?}");
            assert!(
                !text.contains(['\u{1b}', '\u{7}', '\u{202e}', '\u{2066}']),
                "{text:?}"
            );
        }
    }

    #[test]
    fn search_results_are_bounded_even_for_memories_saved_before_the_limits() {
        let huge = "x".repeat(1 << 20);
        let mut c = checked(&huge);
        c.memory.headline = Some(huge.clone());
        c.memory.tags = vec![huge.clone()];
        let result = SearchResult {
            query: huge.clone(),
            total: 1,
            total_capped: false,
            matched: Matched::All,
            ranked_newest: None,
            hits: vec![crate::Found {
                checked: c,
                snippet: huge,
            }],
        };
        let text = search(&result, &HINTS);
        assert!(text.len() < 4 * 1024, "{} bytes", text.len());
    }

    #[test]
    fn dates() {
        assert_eq!(date(0), "1970-01-01");
        assert_eq!(date(951_782_400), "2000-02-29");
        assert_eq!(date(1_795_000_000), "2026-11-18");
    }

    #[test]
    fn pointer_line_names_ids_and_titles_only() {
        let refs = vec![
            MemoryRef {
                id: "m-7f3a".into(),
                kind: Kind::Fix,
                title: "Retry on busy".into(),
            },
            MemoryRef {
                id: "m-19c0".into(),
                kind: Kind::Failed,
                title: "Bigger pool".into(),
            },
        ];
        assert_eq!(
            pointer_line(&refs, &HINTS).unwrap(),
            "pith: 2 memories on this file: m-7f3a fix: Retry on busy, \
             m-19c0 failed: Bigger pool; get_memory for details"
        );
        assert_eq!(pointer_line(&[], &HINTS), None);
        let many: Vec<MemoryRef> = (0..7).map(|_| refs[0].clone()).collect();
        assert!(
            pointer_line(&many, &HINTS)
                .unwrap()
                .contains(", 2 more; get_memory")
        );
    }
}
