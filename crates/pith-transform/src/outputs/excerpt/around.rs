//! Where a kept line sits: what the model needs beside it to read it (the definition it is
//! in, the heading or commit or file above it, the item a doc comment documents, the rest of
//! a sentence, the short block around it), and which of a diff's lines a change added.

use super::Kind;

/// The lines under line `i` when it heads a group (it is not indented and the lines after it
/// are), at most a screen of them.
pub(super) fn group_under(lines: &[&str], i: usize) -> std::ops::Range<usize> {
    let indented = |l: &str| l.starts_with(' ') || l.starts_with('\t');
    if indented(lines[i]) || lines[i].trim().is_empty() {
        return i + 1..i + 1;
    }
    let end = (i + 1..lines.len().min(i + 1 + GROUP_MAX))
        .find(|&j| !indented(lines[j]))
        .unwrap_or(lines.len().min(i + 1 + GROUP_MAX));
    i + 1..end
}

/// Matches under one heading shown with it, at most.
pub(super) const GROUP_MAX: usize = 30;

/// Words a line that defines something starts with (after its indentation and `pub`).
pub(super) const DEFINES: &[&str] = &[
    "fn ",
    "async fn ",
    "struct ",
    "enum ",
    "impl ",
    "impl<",
    "trait ",
    "mod ",
    "const ",
    "static ",
    "type ",
    "macro_rules!",
    "#",
    "def ",
    "class ",
    "function ",
    "func ",
];

/// For each line, the nearest line above it (within a screen) that starts a definition or a
/// heading: what the model needs to know where a kept line sits. One pass for all lines
/// (ranking asks it of every ranked line; a search upwards for each cost half the excerpt's
/// time).
pub(super) fn definitions_above(content: &[&str]) -> Vec<Option<usize>> {
    let mut last = None;
    let mut above = Vec::with_capacity(content.len());
    for (i, line) in content.iter().enumerate() {
        above.push(last.filter(|&j| i - j <= SCREEN));
        if starts_definition(line) || declared(line).starts_with('#') {
            last = Some(i);
        }
    }
    above
}

/// Lines above a kept line looked through for its definition.
const SCREEN: usize = 60;

/// The definition a doc comment line documents (`/// …` lines, then its attributes, then
/// the item): a doc comment says what the item is, the item is what the model will use.
pub(super) fn documented_below(content: &[&str], i: usize) -> Option<usize> {
    fn code(l: &str) -> &str {
        l.strip_prefix(['+', '-', ' ']).unwrap_or(l).trim_start()
    }
    if !code(content[i]).starts_with("///") {
        return None;
    }
    let j = (i + 1..content.len().min(i + 1 + DOC_MAX))
        .find(|&j| !(code(content[j]).starts_with("///") || code(content[j]).starts_with("#[")))?;
    starts_definition(content[j]).then_some(j)
}

/// Whether a line starts a definition (`fn`, `struct`, `def`, …; not a `#` heading or
/// attribute).
fn starts_definition(line: &str) -> bool {
    let line = declared(line);
    DEFINES.iter().any(|d| *d != "#" && line.starts_with(d))
}

/// The lines after line `i` that finish its sentence when it stops mid-sentence (a paragraph
/// of a document, a comment, a commit's message wrapped at a word), prose to a `.` within
/// [`SENTENCE_MAX`] lines; none otherwise.
pub(super) fn sentence_rest(content: &[&str], i: usize) -> std::ops::Range<usize> {
    let none = i + 1..i + 1;
    // Prose: most of its words are words of letters (code's are names, calls and operators).
    let prose = |l: &str| {
        let text = l.trim_start_matches(['+', '-', '/', '!', '#', '*', '>']);
        let tokens = text.split_whitespace().count();
        let words = text
            .split_whitespace()
            .filter(|w| {
                let w = w.trim_end_matches([',', '.', ':', ';']);
                !w.is_empty() && w.chars().all(char::is_alphabetic)
            })
            .count();
        words >= 4 && words * 2 >= tokens
    };
    let ends = |l: &str| {
        l.trim_end()
            .trim_end_matches(['`', ')', '*', '"'])
            .ends_with(['.', ':', '?', '!'])
    };
    // A line cut mid-sentence ends on a word (code ends on punctuation).
    if !content[i].ends_with(char::is_alphabetic) {
        return none;
    }
    let after = content.iter().enumerate().skip(i + 1).take(SENTENCE_MAX);
    for (j, line) in after {
        if !prose(line) {
            return none;
        }
        if ends(line) {
            return i + 1..j + 1;
        }
    }
    none
}

/// Lines after a line looked through for its sentence's end.
pub(super) const SENTENCE_MAX: usize = 3;

/// Lines of a doc comment and attributes looked through for the item they document.
pub(super) const DOC_MAX: usize = 30;

/// A line's declaration as a definition starts: without a diff's `+`, `-` or ` ` (a `git
/// show` shows a definition it adds as `+fn name(`), its indent and a visibility.
pub(super) fn declared(line: &str) -> &str {
    let line = line.strip_prefix(['+', '-']).unwrap_or(line).trim_start();
    line.strip_prefix("pub(crate) ")
        .or_else(|| line.strip_prefix("pub(super) "))
        .or_else(|| line.strip_prefix("pub "))
        .unwrap_or(line)
}

/// A Markdown heading's level (`## Invariants` is 2), `None` for any other line.
pub(super) fn heading_level(line: &str) -> Option<usize> {
    let level = line.bytes().take_while(|&b| b == b'#').count();
    ((1..=6).contains(&level) && line[level..].starts_with(' ')).then_some(level)
}

/// The heading a Markdown heading sits under (the nearest above it of a higher level), so a
/// kept section says which part of the document it is in.
pub(super) fn parent_heading(content: &[&str], j: usize) -> Option<usize> {
    let level = heading_level(content[j])?;
    (0..j)
        .rev()
        .find(|&k| heading_level(content[k]).is_some_and(|l| l < level))
}

/// The line that heads line `i`'s group, above it: a table's header row for a row (`| … |`),
/// the file a search's indented match is listed under (OpenCode's grep: the path, then `Line
/// N: …` indented), the hunk a diff's line is in and the `diff` line of the hunk's file, the
/// commit a line of `git log` or `git show` belongs to. What the model needs to read a kept
/// line where it sits; [`headings_above`] follows them up.
pub(super) fn heading_above(
    content: &[&str],
    sides: &[Option<u8>],
    i: usize,
    kind: Kind,
) -> Option<usize> {
    let row = |l: &str| l.trim_start().starts_with('|');
    if row(content[i]) {
        let first = (0..i).rev().take_while(|&j| row(content[j])).last()?;
        return Some(first);
    }
    let indented = |l: &str| l.starts_with(' ') || l.starts_with('\t');
    if kind == Kind::Search && indented(content[i]) {
        return (i.saturating_sub(GROUP_MAX)..i)
            .rev()
            .find(|&j| !indented(content[j]) && !content[j].trim().is_empty());
    }
    // A diff's line is under its hunk's `@@ -98,6 +104,30 @@` (where in the file: what a
    // patch or a read at an offset is written from), the hunk under its file's `diff` line.
    let above = |prefix: &str| {
        (i.saturating_sub(COMMIT_MAX)..i)
            .rev()
            .find(|&j| content[j].starts_with(prefix))
    };
    if sides[i].is_some() {
        return above("@@ ");
    }
    if content[i].starts_with("@@ ") {
        return above("diff ");
    }
    // A listing of several directories (`ls a/ b/`, `ls -R`): an entry's directory is the
    // `path:` line its block of entries starts under (not a file's `key:`).
    let is_directory =
        |l: &str| l.len() > 1 && l.ends_with(':') && !l.contains(char::is_whitespace);
    if kind != Kind::File
        && let Some(j) = (i.saturating_sub(COMMIT_MAX)..i)
            .rev()
            .take_while(|&j| !content[j].trim().is_empty())
            .find(|&j| is_directory(content[j]))
    {
        return Some(j);
    }
    (i.saturating_sub(COMMIT_MAX)..i).rev().find(|&j| {
        content[j].strip_prefix("commit ").is_some_and(|rest| {
            rest.as_bytes()
                .get(..40)
                .is_some_and(|id| id.iter().all(u8::is_ascii_hexdigit))
        })
    })
}

/// The headings above line `i`, nearest first: a diff's line, its hunk, its file, its commit.
pub(super) fn headings_above<'c>(
    content: &'c [&str],
    sides: &'c [Option<u8>],
    i: usize,
    kind: Kind,
) -> impl Iterator<Item = usize> + 'c {
    std::iter::successors(heading_above(content, sides, i, kind), move |&h| {
        heading_above(content, sides, h, kind)
    })
    .take(HEADINGS_MAX)
}

/// Headings followed up from a line, at most.
const HEADINGS_MAX: usize = 3;

/// The short block line `i` sits in, from the line that opens it to the line that closes it;
/// `None` when none within [`BLOCK_MAX`] lines above holds it.
pub(super) fn enclosing_block(content: &[&str], i: usize) -> Option<std::ops::Range<usize>> {
    let opener = (i.saturating_sub(BLOCK_MAX)..i)
        .rev()
        .find(|&j| block_opened(content, j).contains(&i))?;
    Some(opener..block_opened(content, opener).end)
}

/// The lines of the short block line `i` opens (it ends with `[`, `{` or `(`), through the
/// line that closes it; none when it opens none or the block is longer than [`BLOCK_MAX`].
pub(super) fn block_opened(content: &[&str], i: usize) -> std::ops::Range<usize> {
    let none = i + 1..i + 1;
    let Some(line) = content.get(i).map(|l| l.trim_end()) else {
        return none;
    };
    if !line.ends_with(['[', '{', '(']) {
        return none;
    }
    let mut depth = 0i32;
    for (j, text) in content.iter().enumerate().take(i + 1 + BLOCK_MAX).skip(i) {
        for c in text.chars() {
            match c {
                '[' | '{' | '(' => depth += 1,
                ']' | '}' | ')' => depth -= 1,
                _ => {}
            }
        }
        if depth <= 0 {
            return i + 1..j + 1;
        }
    }
    none
}

/// Lines of a block shown with the line that opens it, at most.
pub(super) const BLOCK_MAX: usize = 16;

/// Lines of one commit looked through for its `commit` line, at most.
pub(super) const COMMIT_MAX: usize = 400;

/// For each line of a test run, the summary line of the test binary it belongs to: cargo's
/// `test result: …` that closes the run a `Running …` (or `Doc-tests …`) line opened. A
/// test's line read without it does not say whether the binary passed.
pub(super) fn section_results(content: &[&str]) -> Vec<Option<usize>> {
    let mut out = vec![None; content.len()];
    let mut result = None;
    for i in (0..content.len()).rev() {
        let line = content[i].trim_start();
        if line.starts_with("test result: ") {
            result = Some(i);
        }
        out[i] = result;
        // Above a binary's opening line is the binary before it.
        if line.starts_with("Running ") || line.starts_with("Doc-tests ") {
            result = None;
        }
    }
    out
}
