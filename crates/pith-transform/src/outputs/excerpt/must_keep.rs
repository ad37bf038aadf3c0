//! The lines an excerpt keeps whatever its budget: what a later tool input quoted, and a
//! log's problems and ends.

use std::sync::LazyLock;

use memchr::memmem;

/// A later line shorter than this is quoted only as part of a block of two or more.
pub(super) const DISTINCTIVE: usize = 8;

/// Lines after an error that locate it (a compiler's `-->` and source lines), at most.
pub(super) const ERROR_TAIL: usize = 6;

/// First and last lines of a command's output kept: what ran, and its summary.
pub(super) const LOG_HEAD: usize = 2;
pub(super) const LOG_TAIL: usize = 3;

/// A line a later input holds that the output has more often than this is not kept alone.
pub(super) const QUOTED_REPEATS_MAX: usize = 3;

/// Marks the lines a later tool input quoted: each block of two or more of its lines found in
/// the output in order, and each distinctive line of it found alone.
pub(super) fn mark_quoted(content: &[&str], later_inputs: &[&str], keep: &mut [bool]) {
    for input in later_inputs {
        let wanted: Vec<&str> = input.lines().map(str::trim).collect();
        if wanted.len() >= 2 {
            mark_blocks(content, &wanted, keep);
        }
        for old in patch_old_sides(input) {
            if old.len() >= 2 {
                mark_blocks(content, &old, keep);
            }
        }
        for w in &wanted {
            if w.len() < DISTINCTIVE {
                continue;
            }
            let found: Vec<usize> = (0..content.len())
                .filter(|&i| {
                    let line = content[i].trim();
                    line == *w || (line.len() >= DISTINCTIVE && w.contains(line))
                })
                .collect();
            // A line the output repeats (`[[query]]`, `tree = "pith"` of a list of entries)
            // says nothing about which one the input was copied from: the blocks above
            // place it when it was.
            if found.len() <= QUOTED_REPEATS_MAX {
                found.into_iter().for_each(|i| keep[i] = true);
            }
        }
    }
}

/// The old side of each hunk of a patch (Codex's `apply_patch`, a unified diff): its context
/// and removed lines without their first character, trimmed, which followed each other in the
/// file the output showed. Nothing for an input that is not a patch.
pub(super) fn patch_old_sides(input: &str) -> Vec<Vec<&str>> {
    if !(input.starts_with("*** Begin Patch")
        || input.starts_with("--- ")
        || input.starts_with("diff "))
    {
        return Vec::new();
    }
    let mut hunks = vec![Vec::new()];
    for line in input.lines() {
        let old = match line.as_bytes().first() {
            _ if line.starts_with("---") || line.starts_with("+++") => None,
            Some(b'-' | b' ') => Some(line[1..].trim()),
            Some(b'+') => continue,
            _ => None,
        };
        match (old, hunks.last_mut()) {
            (Some(old), Some(hunk)) => hunk.push(old),
            (None, Some(hunk)) if !hunk.is_empty() => hunks.push(Vec::new()),
            _ => {}
        }
    }
    hunks
}

/// Marks every place the lines of `wanted` (trimmed, empty ones too) follow each other in the
/// output, trimmed alike.
pub(super) fn mark_blocks(content: &[&str], wanted: &[&str], keep: &mut [bool]) {
    if wanted.len() > content.len() {
        return;
    }
    for start in 0..=content.len() - wanted.len() {
        let fits = wanted
            .iter()
            .enumerate()
            .all(|(k, w)| content[start + k].trim() == *w);
        if fits {
            keep[start..start + wanted.len()].fill(true);
        }
    }
}

/// Whether a line a search found reads as a log's problem, not as code that mentions one (a
/// search of source finds `StoreError` and `error: &Error` everywhere): a failed test or a
/// panic, or a compiler's `error:` / `error[E…]` starting the line or its text after a
/// search's `path:` or `path:line:` prefix.
pub(super) fn is_log_problem(line: &str) -> bool {
    if line.contains("FAILED") || line.contains("panicked at") {
        return true;
    }
    let starts_problem = |text: &str| {
        let text = text.trim_start();
        text.starts_with("error: ") || text.starts_with("error[E")
    };
    let mut rest = line;
    for _ in 0..3 {
        if starts_problem(rest) {
            return true;
        }
        match rest.split_once(':') {
            Some((_, after)) => rest = after,
            None => break,
        }
    }
    false
}

/// A search's problem lines are kept regardless when there are at most this many.
pub(super) const SEARCH_PROBLEMS_MAX: usize = 8;

/// A problem line longer than this is not kept regardless.
pub(super) const PROBLEM_LINE_MAX: usize = 2_000;

/// Words that make a log line a problem the model must see.
pub(super) const PROBLEM_WORDS: &[&str] = &[
    "error",
    "Error",
    "ERROR",
    "FAILED",
    "failed",
    "FAIL",
    "failure",
    "panicked",
    "warning",
    "Warning",
    "WARN",
    "fatal",
    "Fatal",
    "Traceback",
    "Exception",
    "assertion",
];

/// Marks a log's problems: each line naming one, and the indented or arrowed lines after it
/// that say where it is.
pub(super) fn mark_problems(content: &[&str], keep: &mut [bool]) {
    for (i, line) in content.iter().enumerate() {
        if !names_a_problem(line) {
            continue;
        }
        keep[i] = true;
        for j in i + 1..(i + 1 + ERROR_TAIL).min(content.len()) {
            let next = content[j];
            let locates = next.starts_with(' ')
                || next.starts_with('\t')
                || next.contains("-->")
                || is_source_gutter(next);
            if next.trim().is_empty() || !locates {
                break;
            }
            keep[j] = true;
        }
    }
}

/// Whether a line is a compiler's quoted source under a diagnostic (rustc's and clang's
/// `178 | pub fn usage_of<E>(`): the line number, a gutter, the source.
pub(super) fn is_source_gutter(line: &str) -> bool {
    line.split_once(" |")
        .is_some_and(|(number, _)| !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit()))
}

/// Whether a log line names a problem: a problem word in it, but not a test that passed or was
/// ignored (its name may hold one: `unknown_keys_are_errors ... ok`) and not a count of none
/// (`0 failed`).
pub(super) fn names_a_problem(line: &str) -> bool {
    let line = line.trim();
    // A dump on one line (an assertion's `Debug` of a whole struct) is ranked like any other:
    // kept regardless, it alone could cost more than the excerpt may.
    if line.len() > PROBLEM_LINE_MAX {
        return false;
    }
    if line.starts_with("test ") && (line.ends_with(" ... ok") || line.ends_with(" ... ignored")) {
        return false;
    }
    let bytes = line.as_bytes();
    PROBLEM_FINDERS.iter().any(|finder| {
        finder.find_iter(bytes).any(|at| {
            // Part of a name in snake case (`standard_error`, `error_count`): a field, not a
            // problem.
            let end = at + finder.needle().len();
            let in_name = (at > 0 && bytes[at - 1] == b'_') || bytes.get(end) == Some(&b'_');
            let count = line[..at]
                .trim_end()
                .rsplit(|c: char| !c.is_ascii_digit())
                .next();
            !in_name && count != Some("0")
        })
    })
}

/// [`PROBLEM_WORDS`] as searchers, built once (each line of a log is searched for each word).
static PROBLEM_FINDERS: LazyLock<Vec<memmem::Finder<'static>>> = LazyLock::new(|| {
    PROBLEM_WORDS
        .iter()
        .map(|w| memmem::Finder::new(w.as_bytes()))
        .collect()
});

/// Marks a command output's first and last lines (the last non-empty ones).
pub(super) fn mark_ends(total: usize, keep: &mut [bool]) {
    keep[..LOG_HEAD.min(total)].fill(true);
    keep[total.saturating_sub(LOG_TAIL + 1)..total].fill(true);
}
