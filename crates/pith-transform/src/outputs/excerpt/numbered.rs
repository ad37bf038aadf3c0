//! Lines a later step pointed at by their number: the model's "lines 95 and 119", a
//! `history.rs:119`, a `sed -n '80,125p'`. An output that numbers its lines (a file read in
//! any client's format, `grep -n`, OpenCode's grep) is matched by those numbers, which the
//! term ranking cannot see (numbers are not terms: most of them are noise).

use super::diff::HunkLine;

/// A range longer than this is where the model went on reading, not a line it pointed at.
pub(super) const RANGE_MAX: u64 = 60;

/// The references one text gives at most: each is checked against every numbered line.
const REFS_MAX: usize = 256;

/// The longest path taken after a `sed` script: the text is the model's, of any length.
const SED_PATH_MAX: usize = 512;

/// A line number a later step named, with the path it came with (`history.rs:119`) if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LineRef<'a> {
    pub path: Option<&'a str>,
    pub first: u64,
    pub last: u64,
}

impl LineRef<'_> {
    /// Whether this reference names one line, not a range.
    pub fn is_single(&self) -> bool {
        self.first == self.last
    }
}

/// The lines a file read opens from an offset: Claude Code's `Read` (`file_path`, `offset`,
/// `limit`), OpenCode's `read` (`filePath`, `offset`, `limit`). A read from the top, or
/// of more than [`RANGE_MAX`] lines, points at nothing.
pub(super) fn read_range(input: &serde_json::Value) -> Option<LineRef<'_>> {
    let path = ["file_path", "filePath", "path"]
        .iter()
        .find_map(|k| input.get(k)?.as_str())?;
    let first = input.get("offset")?.as_u64().filter(|&n| n > 1)?;
    let limit = input.get("limit").and_then(serde_json::Value::as_u64);
    let last = first.checked_add(limit.unwrap_or(RANGE_MAX).clamp(1, RANGE_MAX) - 1)?;
    Some(LineRef {
        path: Some(path),
        first,
        last,
    })
}

/// The line numbers `text` names: `line 12`, `lines 95 and 119`, `lines 80-125` (`to`,
/// `through`, an en dash), `L12`, `path.rs:12`, and a `sed -n 'A,Bp'` range.
pub(super) fn line_refs(text: &str) -> Vec<LineRef<'_>> {
    let mut out = Vec::new();
    let lower = text.to_ascii_lowercase();
    // "line 12", "lines 95 and 119", "lines 80-125".
    for (at, _) in lower.match_indices("line") {
        if at > 0 && lower.as_bytes()[at - 1].is_ascii_alphanumeric() {
            continue;
        }
        let mut rest = &lower[at + 4..];
        rest = rest.strip_prefix('s').unwrap_or(rest);
        if !rest.starts_with(' ') {
            continue;
        }
        out.extend(number_list(rest));
    }
    // `path.rs:12` (a path with an extension, then a line number, a range or a list): grep's
    // and compilers' form.
    // The path is looked for back to the colon before at most, so the text is read once
    // however many colons it has; a path that runs into one is none (`a:b.rs:1`).
    for (at, _) in text.match_indices(':') {
        let before = &text[..at];
        let stop = before.rfind(|c: char| c.is_whitespace() || "\"'`(,[{<:".contains(c));
        if stop.is_some_and(|i| before.as_bytes()[i] == b':') {
            continue;
        }
        let path = &before[stop.map_or(0, |i| i + 1)..];
        let named_file = path
            .rsplit('/')
            .next()
            .is_some_and(|name| name.contains('.') && !name.ends_with('.'));
        if !named_file {
            continue;
        }
        // The number right after the colon, and a range or list it starts (`sqlite.rs:438-441`,
        // `sqlite.rs:148, 171, 370`), read as after `lines`.
        let numbers = &text[at + 1..];
        if numbers.starts_with(|c: char| c.is_ascii_digit()) {
            out.extend(number_list(numbers).into_iter().map(|r| LineRef {
                path: Some(path),
                ..r
            }));
        }
    }
    // `sed -n '80,125p'`.
    for (at, _) in text.match_indices("p'") {
        let before = &text[..at];
        let start = before
            .rfind(|c: char| !(c.is_ascii_digit() || c == ','))
            .map_or(0, |i| i + 1);
        if let Some((a, b)) = before[start..].split_once(',')
            && let (Ok(first), Ok(last)) = (a.parse::<u64>(), b.parse::<u64>())
            && first <= last
        {
            // The file it prints: the word after the script.
            out.push(LineRef {
                path: word_after(&text[at + 2..]),
                first,
                last,
            });
        }
    }
    out.retain(|r| r.last - r.first < RANGE_MAX);
    out.truncate(REFS_MAX);
    out
}

/// The word `rest` starts with (after spaces), if it ends within [`SED_PATH_MAX`] bytes.
fn word_after(rest: &str) -> Option<&str> {
    let rest = rest.trim_start_matches(' ');
    let end = match rest
        .bytes()
        .take(SED_PATH_MAX + 1)
        .position(|b| b.is_ascii_whitespace())
    {
        Some(end) => end,
        None if rest.len() <= SED_PATH_MAX => rest.len(),
        None => return None,
    };
    Some(&rest[..end]).filter(|w| !w.is_empty())
}

/// The numbers after `line`/`lines`: ` 12`, ` 95 and 119`, ` 95, 101 and 119`, ` 80-125`.
fn number_list(mut rest: &str) -> Vec<LineRef<'static>> {
    let mut out = Vec::new();
    loop {
        rest = rest.trim_start();
        let Some((first, after)) = leading_number(rest) else {
            break;
        };
        // After the first, a number is the list's only where the list could end: "line 86
        // and 50 at lines 95" is not line 50.
        let ends_list = after.is_empty()
            || after.starts_with(|c: char| !(c == ' ' || c.is_alphanumeric()))
            || [" and ", " or ", " to ", " through ", " of ", " in "]
                .iter()
                .any(|w| after.starts_with(w));
        if !out.is_empty() && !ends_list {
            break;
        }
        rest = after;
        let range_end = ["-", "–", " to ", " through "]
            .iter()
            .find_map(|sep| rest.strip_prefix(sep))
            .and_then(|r| leading_number(r.trim_start()));
        let last = match range_end {
            Some((last, after)) if last >= first => {
                rest = after;
                last
            }
            _ => first,
        };
        out.push(LineRef {
            path: None,
            first,
            last,
        });
        let next = [",", " and ", ", and ", " or "]
            .iter()
            .find_map(|sep| rest.strip_prefix(sep))
            .filter(|_| out.len() < REFS_MAX);
        match next {
            Some(r) => rest = r,
            None => break,
        }
    }
    out
}

/// A number at the start of `s` (not part of a longer word), and what follows it.
fn leading_number(s: &str) -> Option<(u64, &str)> {
    let end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    if end == 0 || s[end..].starts_with(|c: char| c.is_alphabetic() || c == '_') {
        return None;
    }
    Some((s[..end].parse().ok()?, &s[end..]))
}

/// The number a line of an output carries for the file it shows, with that file's path when
/// the line names it: a file read's `12\t`, `    12→`, `12: `; `grep -n`'s `path:12:`;
/// OpenCode's grep `  Line 12: `.
pub(super) fn own_number(line: &str) -> Option<(Option<&str>, u64)> {
    let trimmed = line.trim_start();
    if let Some(rest) = trimmed.strip_prefix("Line ")
        && let Some((n, after)) = leading_number(rest)
        && after.starts_with(": ")
    {
        return Some((None, n));
    }
    if let Some((n, after)) = leading_number(trimmed)
        && (after.starts_with('\t') || after.starts_with('→') || after.starts_with(": "))
    {
        return Some((None, n));
    }
    let mut parts = line.splitn(3, ':');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(path), Some(number), Some(_))
            if !path.is_empty() && !path.contains(' ') && !is_an_hour(path) =>
        {
            let (n, after) = leading_number(number)?;
            after.is_empty().then_some((Some(path), n))
        }
        _ => None,
    }
}

/// Whether what stands before a line's first `:` is a clock's hour, not a path: one or two
/// digits alone, after a bracket, or after a date's `T` (`12:30:00`, `[9:30:00]`,
/// `2026-12-07T12:30:00Z`), so a log's times are not read as `path:line:`.
fn is_an_hour(before: &str) -> bool {
    let b = before.as_bytes();
    let digits = b.iter().rev().take_while(|c| c.is_ascii_digit()).count();
    if !(1..=2).contains(&digits) {
        return false;
    }
    match &b[..b.len() - digits] {
        [] | [b'['] | [b'('] => true,
        [.., day, b'T'] => day.is_ascii_digit(),
        _ => false,
    }
}

/// Whether two paths name the same file: equal, or one ends with the other at a `/`.
fn same_file(a: &str, b: &str) -> bool {
    let ends = |long: &str, short: &str| {
        long.strip_suffix(short)
            .is_some_and(|head| head.is_empty() || head.ends_with('/'))
    };
    ends(a, b) || ends(b, a)
}

/// The path a line names when it heads a group of matches: not indented, one path-like word
/// (a `/` or a `.` in it, no space) ending in `:`.
fn heading_path(line: &str) -> Option<&str> {
    let path = line.strip_suffix(':')?;
    let path_like = !path.is_empty()
        && !path.contains(char::is_whitespace)
        && (path.contains('/') || path.contains('.'));
    (path_like && !is_indented(line)).then_some(path)
}

/// Whether a line is indented (a match under a heading).
fn is_indented(line: &str) -> bool {
    line.starts_with(' ') || line.starts_with('\t')
}

/// For each line of the output, whether a later step pointed at it by number: `Some(true)`
/// for a line named alone, `Some(false)` for one inside a named range. `call` is the call's
/// input strings (a file read's path: what a line without a path of its own belongs to);
/// `hunks` each line's place in a diff, if it is in one (a diff's lines carry its numbers).
pub(super) fn pointed_at(
    lines: &[&str],
    hunks: &[Option<HunkLine<'_>>],
    refs: &[LineRef<'_>],
    call: &[&str],
) -> Vec<Option<bool>> {
    let mut out = vec![None; lines.len()];
    if refs.is_empty() {
        return out;
    }
    // The file a grouped search's heading names (OpenCode's grep: `path:` and its matches
    // indented under it, `  Line 12: ...`), for the lines under it that carry no path.
    let mut heading: Option<&str> = None;
    for (i, line) in lines.iter().enumerate() {
        // A heading is one only above a match of its own (`e.g.:` above a note is not).
        let heads = lines
            .get(i + 1)
            .is_some_and(|next| is_indented(next) && next.trim_start().starts_with("Line "));
        heading = heading_path(line)
            .filter(|_| heads)
            .or(heading.filter(|_| is_indented(line)));
        // A diff's line carries the number its hunk gives it, whatever its text looks like
        // (` 404: "Not found"` is a line of YAML); a removed line none.
        let (own_path, n, of_diff) = match hunks.get(i).copied().flatten() {
            Some(hunk) => match hunk.at {
                Some((path, n)) => (Some(path), n, true),
                None => continue,
            },
            None => match own_number(line) {
                Some((path, n)) => (path, n, false),
                None => continue,
            },
        };
        for r in refs {
            if n < r.first || n > r.last {
                continue;
            }
            let file_matches = match (r.path, own_path) {
                // A diff shows several files, each numbered twice: a number alone names
                // none of its lines.
                (None, _) if of_diff => false,
                (None, _) => true,
                (Some(p), Some(q)) => same_file(p, q),
                (Some(p), None) => match heading {
                    Some(h) => same_file(h, p),
                    None => call.iter().any(|c| same_file(c.trim(), p)),
                },
            };
            if file_matches {
                let single = r.is_single();
                out[i] = Some(out[i].unwrap_or(false) || single);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbers(text: &str) -> Vec<(Option<&str>, u64, u64)> {
        line_refs(text)
            .into_iter()
            .map(|r| (r.path, r.first, r.last))
            .collect()
    }

    #[test]
    fn the_ways_a_model_names_a_line_are_read() {
        assert_eq!(
            numbers("history.rs has 10 at line 86 and 50 at lines 95 and 119."),
            [(None, 86, 86), (None, 95, 95), (None, 119, 119)]
        );
        assert_eq!(
            numbers("see lines 80-125, then Line 7"),
            [(None, 80, 125), (None, 7, 7)]
        );
        assert_eq!(
            numbers("the panic at crates/pith/src/main.rs:45:9 and inline 3"),
            [(Some("crates/pith/src/main.rs"), 45, 45)]
        );
        assert_eq!(
            numbers("BUSY_TIMEOUT (sqlite.rs:148, 171, 370), the mode (sqlite.rs:438-441)"),
            [
                (Some("sqlite.rs"), 148, 148),
                (Some("sqlite.rs"), 171, 171),
                (Some("sqlite.rs"), 370, 370),
                (Some("sqlite.rs"), 438, 441)
            ]
        );
        // A path's list ends where a number is not a line's: "12, 2024 was" is line 12; a
        // number after a space is not the path's.
        assert_eq!(
            numbers("a.rs:12, 2024 was the year; config.rs: 12 fields"),
            [(Some("a.rs"), 12, 12)]
        );
        assert_eq!(
            numbers("sed -n '200,240p' src/lib.rs"),
            [(Some("src/lib.rs"), 200, 240)]
        );
        // Not a line: a word that holds "line", a number that starts a word, a range too
        // long to be pointing, a time.
        assert!(numbers("pipelines 3, a line 4th, lines 1-500, at 12:30").is_empty());
    }

    #[test]
    fn a_read_from_an_offset_opens_its_lines_and_a_read_from_the_top_none() {
        let read = serde_json::json!({"file_path": "/w/a.rs", "offset": 80, "limit": 45});
        assert_eq!(
            read_range(&read),
            Some(LineRef {
                path: Some("/w/a.rs"),
                first: 80,
                last: 124
            })
        );
        let open = serde_json::json!({"filePath": "/w/a.rs", "offset": 80});
        assert_eq!(read_range(&open).map(|r| r.last), Some(80 + RANGE_MAX - 1));
        let top = serde_json::json!({"file_path": "/w/a.rs", "limit": 45});
        assert_eq!(read_range(&top), None);
        let past_the_end = serde_json::json!({"file_path": "/w/a.rs", "offset": u64::MAX});
        assert_eq!(read_range(&past_the_end), None);
    }

    /// The model's text is any length: a megabyte of colons, `sed` scripts or line numbers
    /// is read once (each colon's path looked for back to the colon before, a `sed` path
    /// only so far) and gives a bounded number of references. Read back to the text's start
    /// from every colon, this test took minutes.
    #[test]
    fn a_long_text_of_colons_scripts_and_numbers_is_read_once() {
        let colons = "a.b:".repeat(250_000);
        assert!(
            numbers(&colons).is_empty(),
            "a path that runs into a colon is none"
        );
        let scripts = "1,2p'".repeat(200_000);
        let refs = line_refs(&scripts);
        assert_eq!(refs.len(), REFS_MAX);
        assert!(
            refs.iter().all(|r| r.path.is_none()),
            "no word ends in reach"
        );
        let listed = format!("lines {}", "7, ".repeat(100_000));
        assert_eq!(line_refs(&listed).len(), REFS_MAX);
        assert_eq!(
            numbers(&format!("sed -n '3,4p' {}", "x".repeat(SED_PATH_MAX + 1))),
            [(None, 3, 4)]
        );
    }

    #[test]
    fn each_clients_numbered_line_gives_its_number_and_its_path_if_it_has_one() {
        assert_eq!(own_number("   119\t#[arg(long)]"), Some((None, 119)));
        assert_eq!(own_number("    12→fn main() {"), Some((None, 12)));
        assert_eq!(own_number("12: fn main() {"), Some((None, 12)));
        assert_eq!(
            own_number("  Line 282: pub struct LedgerSink {"),
            Some((None, 282))
        );
        assert_eq!(
            own_number("src/history.rs:119:    #[arg(long)]"),
            Some((Some("src/history.rs"), 119))
        );
        assert_eq!(own_number("test result: ok. 12 passed"), None);
        assert_eq!(own_number("12 passed; 0 failed"), None);
        assert_eq!(own_number("001-a.json:7: x"), Some((Some("001-a.json"), 7)));
        // A log's times are no `path:line:`.
        assert_eq!(own_number("12:30:00 INFO pith: ready"), None);
        assert_eq!(own_number("[09:30:00] listening"), None);
        assert_eq!(own_number("2026-12-07T12:30:00Z INFO x"), None);
        assert_eq!(own_number("9:30:00 x"), None);
        assert_eq!(own_number("[9:30:00] x"), None);
        assert_eq!(own_number("src/a12:30:x"), Some((Some("src/a12"), 30)));
        assert_eq!(
            own_number("data/TEST01:5:x"),
            Some((Some("data/TEST01"), 5))
        );
    }

    #[test]
    fn a_read_of_a_changed_file_points_at_the_diffs_lines() {
        let diff = [
            "diff --git a/src/skim.rs b/src/skim.rs",
            "--- a/src/skim.rs",
            "+++ b/src/skim.rs",
            "@@ -98,3 +100,4 @@ fn walk() {",
            " fn member_value_start() {",
            "-    old();",
            "+    new();",
            " 404: not a line number",
            "",
            "diff --git a/src/other.rs b/src/other.rs",
            "+++ b/src/other.rs",
            "@@ -1 +101 @@",
            "+fn other() {}",
        ];
        let hunks = super::super::diff::hunk_lines(&diff);
        // A later read of the file from line 101 points at its lines there, not at the
        // other file's line 101; a number alone at no line of a diff, not even at one whose
        // text starts like a numbered line.
        let read = serde_json::json!({"file_path": "/w/src/skim.rs", "offset": 101, "limit": 2});
        let refs: Vec<_> = read_range(&read).into_iter().collect();
        let pointed = pointed_at(&diff, &hunks, &refs, &[]);
        let at: Vec<usize> = (0..diff.len()).filter(|&i| pointed[i].is_some()).collect();
        assert_eq!(at, [6, 7]);
        for bare in ["line 101", "line 404"] {
            let pointed = pointed_at(&diff, &hunks, &line_refs(bare), &[]);
            assert!(pointed.iter().all(Option::is_none), "{bare}");
        }
    }

    #[test]
    fn a_named_line_is_matched_in_its_own_file_only() {
        let lines = [
            "/w/crates/pith/src/commands/history.rs:95:    #[arg(long, default_value_t = 50)]",
            "/w/crates/pith/src/commands/stats.rs:119:    #[arg(long)]",
            "/w/crates/pith/src/commands/history.rs:119:    #[arg(long, default_value_t = 50)]",
        ];
        let refs = line_refs("history.rs:119 is the one");
        assert_eq!(
            pointed_at(&lines, &[], &refs, &[]),
            [None, None, Some(true)]
        );
        let refs = line_refs("lines 90-100");
        assert_eq!(
            pointed_at(&lines, &[], &refs, &[]),
            [Some(false), None, None]
        );
        // A read's lines carry no path: the call's path is theirs.
        let read = ["   119\tx", "   120\ty"];
        let refs = line_refs("main.rs:120");
        assert_eq!(
            pointed_at(&read, &[], &refs, &["/w/src/main.rs"]),
            [None, Some(true)]
        );
        assert_eq!(
            pointed_at(&read, &[], &refs, &["/w/src/lib.rs"]),
            [None, None]
        );
    }

    #[test]
    fn a_grouped_searchs_lines_belong_to_the_file_their_heading_names() {
        // OpenCode's grep: each file's matches under its path, a blank line between files.
        let grep = [
            "Found 3 matches",
            "/w/crates/pith/src/dashboard/mod.rs:",
            "  Line 64:     draining: Arc<AtomicBool>,",
            "",
            "/w/crates/pith/src/config.rs:",
            "  Line 64:     pub drain: Option<String>,",
            "  Line 70:     pub listen: String,",
        ];
        let call = ["drain", "/w/crates/pith"];
        let refs = line_refs("proxy.drain (config.rs:64) sets it");
        assert_eq!(
            pointed_at(&grep, &[], &refs, &call),
            [None, None, None, None, None, Some(true), None]
        );
        // A line not under a heading keeps the call's path.
        let refs = line_refs("mod.rs:64");
        let after_blank = ["/w/a/mod.rs:", "", "  Line 64: x"];
        assert_eq!(
            pointed_at(&after_blank, &[], &refs, &["/w/b"]),
            [None, None, None]
        );
    }
}
