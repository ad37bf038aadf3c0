//! A long tool output as a ranked excerpt: which of its lines the model still needs, chosen
//! by what the call was for and what the model did with the output afterwards, shown as the
//! output's own bytes in their order.
//!
//! The rules (issue 48, the seeds' prefilter rules applied to the transcript):
//! - **Kept whatever the budget**: every line a later tool input quoted (an Edit's
//!   `old_string`, matched as a block of lines, or a distinctive line alone: a path a later
//!   Read opens), and in a log every error, failure or warning with the lines that locate it.
//!   When these alone cost more than half the output, the output is not shortened.
//! - **Ranked into the budget** (a quarter of the output's characters, the kept lines
//!   included): lines holding the terms
//!   of the call's input (the pattern, the path, the command) and of what came after (the
//!   model's text, its later tool inputs), each term weighted by how rare it is in the output,
//!   a line the model named by its number (or read again from an offset) as high as a quote,
//!   each chosen line with the definition it sits in and its neighbours when they fit; a log's
//!   first and last lines, a search's first.
//! - **Said**: the caller puts a header before the excerpt; a run of lines not shown is one
//!   marker line naming how many, so the model sees where the gaps are.
//!
//! A pure function of its inputs: the same output, call and later turn give the same bytes,
//! which is what lets every later request of a session send the excerpt unchanged.

mod around;
mod diff;
mod must_keep;
mod numbered;
mod score;

use around::{
    block_opened, definitions_above, documented_below, enclosing_block, group_under,
    headings_above, parent_heading, section_results, sentence_rest,
};
use diff::hunk_lines;
use must_keep::{
    SEARCH_PROBLEMS_MAX, is_log_problem, mark_ends, mark_problems, mark_quoted, names_a_problem,
};
use numbered::{LineRef, line_refs, pointed_at, read_range};
use score::scores_with;

/// What produced an output, for what it keeps regardless.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A file's contents (Read, `read`, `cat`).
    File,
    /// A search's matches or a listing (Grep, Glob, `rg`, `find`, `ls`).
    Search,
    /// A command's output: a build, a test run, a log.
    Shell,
}

/// What a tool's output is, by the names the clients give their tools and, for a shell, by
/// the command it ran (Codex reads files and searches through `exec_command`).
pub fn kind_of(tool: &str, command: Option<&str>) -> Kind {
    match tool {
        "Read" | "read" | "view" | "NotebookRead" => return Kind::File,
        "Grep" | "Glob" | "LS" | "grep" | "glob" | "list" | "ls" | "codesearch" => {
            return Kind::Search;
        }
        _ => {}
    }
    let program = command
        .and_then(|c| c.split_whitespace().next())
        .map(|p| p.rsplit('/').next().unwrap_or(p));
    // A log shown with `cat` or `tail` is a command's output all the same: its problems and
    // its ends are what the model needs.
    let shows_a_log = command.is_some_and(|c| {
        c.split_whitespace()
            .any(|word| word.trim_end_matches([';', '|', ')']).ends_with(".log"))
    });
    // git's commands that show commits and changes print a document, not a log: no summary at
    // its end, and `error` on a line of it is code or prose that names one, not a failure.
    let git_shows = command
        .is_some_and(|c| matches!(git_subcommand(c), Some("show" | "diff" | "log" | "blame")));
    match program {
        Some("git") if git_shows => Kind::File,
        Some("cat" | "sed" | "nl" | "head" | "tail" | "less" | "bat") if shows_a_log => Kind::Shell,
        Some("cat" | "sed" | "nl" | "head" | "tail" | "less" | "bat") => Kind::File,
        Some("grep" | "rg" | "find" | "fd" | "ls" | "tree" | "git-ls-files") => Kind::Search,
        _ => Kind::Shell,
    }
}

/// The subcommand of a `git` command line (`show` in `git -C repo --no-pager show HEAD`):
/// the first word after `git` that is not an option or the value of `-C` or `-c`.
fn git_subcommand(command: &str) -> Option<&str> {
    let mut words = command.split_whitespace().skip(1);
    while let Some(word) = words.next() {
        match word {
            "-C" | "-c" => {
                words.next();
            }
            _ if word.starts_with('-') => {}
            _ => return Some(word),
        }
    }
    None
}

/// [`kind_of`] for a call by its input (the command a shell tool ran is its `command`, a
/// string or an argv, or Codex's `cmd`).
pub fn kind_of_call(tool: &str, input: &serde_json::Value) -> Kind {
    let command = ["command", "cmd"].iter().find_map(|k| match input.get(k)? {
        serde_json::Value::String(s) => Some(s.as_str()),
        // Codex's `shell` takes an argv (`["bash", "-lc", "rg ..."]`): the script is its last.
        serde_json::Value::Array(argv) => argv.last()?.as_str(),
        _ => None,
    });
    kind_of(tool, command)
}

/// Every string inside a JSON value, in order: what a call's input or a later tool input
/// offers the ranking.
pub fn strings_of<'v>(value: &'v serde_json::Value, out: &mut Vec<&'v str>) {
    match value {
        serde_json::Value::String(s) => out.push(s),
        serde_json::Value::Array(items) => items.iter().for_each(|v| strings_of(v, out)),
        serde_json::Value::Object(members) => members.values().for_each(|v| strings_of(v, out)),
        _ => {}
    }
}

/// What the excerpt is chosen by.
#[derive(Debug, Clone, Default)]
pub struct Query<'a> {
    /// The call's own input: its strings (the pattern, the path, the command).
    pub call: Vec<&'a str>,
    /// The model's text after the output.
    pub later_text: Vec<&'a str>,
    /// The strings of the tool inputs the model sent after the output (an Edit's
    /// `old_string`, a path it opened, a command it ran).
    pub later_inputs: Vec<&'a str>,
    /// The lines later file reads opened (a Read's `offset` and `limit`): numbers, which
    /// the strings above leave out.
    pub(crate) later_reads: Vec<LineRef<'a>>,
}

impl<'a> Query<'a> {
    /// The query for a call whose input is `input`.
    pub fn of_call(input: &'a serde_json::Value) -> Query<'a> {
        let mut query = Query::default();
        strings_of(input, &mut query.call);
        query
    }

    /// Adds a tool input the model sent after the output: its strings, and the lines it
    /// reads when it is a file read from an offset.
    pub fn add_later_input(&mut self, input: &'a serde_json::Value) {
        strings_of(input, &mut self.later_inputs);
        self.later_reads.extend(read_range(input));
    }
}

/// An excerpt of an output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excerpt {
    /// The lines shown, in order, a run of lines not shown as one marker line.
    pub text: String,
    /// Lines of the output shown.
    pub shown: usize,
    /// Which: their indexes in the output's lines, in order.
    pub kept: Vec<usize>,
    /// Lines of the output.
    pub total: usize,
}

/// Outputs with fewer lines are never shortened: there is little to rank. (The stage shortens
/// only outputs of 4,000 characters and more, `min_chars`: a read of a Markdown table of 39
/// long rows is worth ranking.)
pub const MIN_LINES: usize = 20;

/// The share of the output's characters an excerpt may take (as a fraction 1/N), unless the
/// lines it must keep take more.
const BUDGET_DIVISOR: usize = 4;

/// The must-keep lines may take at most this share of the output (as a fraction 1/N), else the
/// output is not worth shortening.
const MUST_KEEP_DIVISOR: usize = 2;

/// The excerpt of `output` for `query`, or `None` when shortening is not worth it (too few
/// lines, or what must be kept is most of it).
pub fn excerpt(output: &str, kind: Kind, query: &Query<'_>) -> Option<Excerpt> {
    let lines: Vec<&str> = output.split('\n').collect();
    let total = lines.len();
    if total < MIN_LINES {
        return None;
    }
    let content: Vec<&str> = lines.iter().map(|l| content_of(l)).collect();
    let mut keep = vec![false; total];
    mark_quoted(&content, &query.later_inputs, &mut keep);
    let quoted = keep.clone();
    match kind {
        Kind::Shell => {
            mark_problems(&content, &mut keep);
            mark_ends(total, &mut keep);
        }
        // A search's first line says what it found ("Found 12 files"), a listing's last its
        // total (`wc -l`'s, `du`'s).
        Kind::Search => {
            // A search of a log: the few problems it found (a failed test's result among
            // the passing ones); a search for problem words finds many, ranked instead.
            let problems: Vec<usize> = (0..total)
                .filter(|&i| names_a_problem(content[i]) && is_log_problem(content[i]))
                .collect();
            if problems.len() <= SEARCH_PROBLEMS_MAX {
                problems.into_iter().for_each(|i| keep[i] = true);
            }
            keep[0] = true;
            if let Some(last) = (0..total).rev().find(|&i| !content[i].trim().is_empty()) {
                keep[last] = true;
            }
        }
        Kind::File => {}
    }
    let mut shown = Shown::new(&lines, &keep);
    if shown.spent > output.len() / MUST_KEEP_DIVISOR {
        return None;
    }
    let budget = (output.len() / BUDGET_DIVISOR).max(shown.spent);
    let hunks = hunk_lines(&content);
    let sides: Vec<Option<u8>> = hunks.iter().map(|h| h.map(|h| h.side)).collect();
    let definitions = definitions_above(&content);
    let results = match kind {
        Kind::Shell => section_results(&content),
        _ => vec![None; total],
    };
    let refs: Vec<_> = (query.later_text.iter().chain(&query.later_inputs))
        .flat_map(|s| line_refs(s))
        .chain(query.later_reads.iter().cloned())
        .collect();
    let pointed = pointed_at(&lines, &hunks, &refs, &query.call);
    // A call's paths name the files it read, showed or ran on, which their lines do not hold,
    // and which a multi-file output (`tail` of several files, a `git show` of several) holds
    // only in each file's header: ranked by them, every header would outrank the lines the
    // model went on with. (A pattern piped to `grep` with a `.` in it is on every line the
    // command prints, where it ranks nothing either way: kept as a term for a log, it cost
    // two needed lines of the corpus.) A search's lines each carry theirs, where they rank
    // nothing (every line holds them) or tell the files apart (a glob's pattern).
    let call_paths_rank = kind == Kind::Search;
    let scores = scores_with(&content, &sides, &pointed, query, call_paths_rank);
    let ranked = ranked(&scores, &lines);
    // The best lines and where they sit come before any line's context: a long line's
    // neighbours or a search's group could otherwise spend the budget before the next best.
    for &i in ranked.iter().take(HEAD_START) {
        let sits = [Some(i), definitions[i]].into_iter().flatten();
        for j in sits.chain(headings_above(&content, &sides, i, kind)) {
            shown.add_within(j, budget, &mut keep);
        }
    }
    for i in ranked {
        // The line, the definition it sits in, then its neighbours (a search's lines are each
        // their own), each while it fits.
        let neighbours = kind != Kind::Search;
        let definition = definitions[i];
        let sits = [
            Some(i),
            definition,
            definition.and_then(|j| parent_heading(&content, j)),
            documented_below(&content, i),
            results[i],
        ];
        let beside = [
            i.checked_sub(1).filter(|_| neighbours),
            i.checked_add(1).filter(|&j| neighbours && j < total),
        ];
        let around = (sits.into_iter().flatten())
            .chain(headings_above(&content, &sides, i, kind))
            .chain(beside.into_iter().flatten());
        for j in around {
            shown.add_within(j, budget, &mut keep);
        }
        if kind != Kind::Search {
            // A line an edit quoted, with the short block it sits in (the arms of the match
            // an edit adds one to); a prose line with the rest of its sentence; a short block
            // the line (or the next) opens, to its close (a list of values under the key the
            // query found, a struct literal's fields).
            let enclosing = if quoted[i] {
                enclosing_block(&content, i)
            } else {
                None
            };
            let blocks = enclosing
                .into_iter()
                .flatten()
                .chain(sentence_rest(&content, i))
                .chain(block_opened(&content, i))
                .chain(block_opened(&content, i + 1));
            for j in blocks {
                shown.add_within(j, budget, &mut keep);
            }
        }
        // A search's file heading (OpenCode's grep: the path, then its matches indented):
        // the matches under it, as far as they fit.
        if kind == Kind::Search {
            for j in group_under(&lines, i) {
                shown.add_within(j, budget, &mut keep);
            }
        }
    }
    let kept: Vec<usize> = (0..total).filter(|&i| keep[i]).collect();
    if kept.len() == total {
        return None;
    }
    Some(Excerpt {
        text: render(&lines, &keep),
        shown: kept.len(),
        kept,
        total,
    })
}

/// How much a line's length lowers its rank: its score is divided by its cost to this power.
/// A line of 400 bytes spends what five of 80 do, so at an equal score the short line
/// comes first; a small power, as a line's score says more than its length (0.25: the
/// held-out sets (e) and (f) kept 2 and 4 more needed lines, BENCHMARKS.md).
const LENGTH_DAMPING: f64 = 0.25;

/// The lines with a score, best for what they cost in bytes first (a long line spends the
/// budget of several short ones, [`LENGTH_DAMPING`]); among equals the earlier line (a
/// deterministic order).
fn ranked(scores: &[f64], lines: &[&str]) -> Vec<usize> {
    let rank: Vec<f64> = (scores.iter().zip(lines))
        .map(|(score, line)| score / ((line.len() + 1) as f64).powf(LENGTH_DAMPING))
        .collect();
    let mut ranked: Vec<usize> = (0..scores.len()).filter(|&i| scores[i] > 0.0).collect();
    ranked.sort_by(|&a, &b| rank[b].total_cmp(&rank[a]).then(a.cmp(&b)));
    ranked
}

/// Ranked lines kept with their definition or heading before any line's context.
const HEAD_START: usize = 10;

/// What the kept lines cost as rendered: each line and its newline, each run of lines not
/// shown as its marker line.
struct Shown<'l> {
    lines: &'l [&'l str],
    spent: usize,
}

/// A gap marker's length, about (`[pith: 120 lines not shown]` and its newline).
const MARKER_COST: usize = 28;

impl<'l> Shown<'l> {
    fn new(lines: &'l [&'l str], keep: &[bool]) -> Shown<'l> {
        let kept: usize = (0..lines.len())
            .filter(|&i| keep[i])
            .map(|i| lines[i].len() + 1)
            .sum();
        let gaps = (0..lines.len())
            .filter(|&i| !keep[i] && (i == 0 || keep[i - 1]))
            .count();
        Shown {
            lines,
            spent: kept + gaps * MARKER_COST,
        }
    }

    /// Keeps line `j` when the excerpt still fits `budget` with it (a line that closes a gap
    /// saves its marker; one inside a gap splits it in two).
    fn add_within(&mut self, j: usize, budget: usize, keep: &mut [bool]) {
        if keep[j] {
            return;
        }
        let gap_before = j > 0 && !keep[j - 1];
        let gap_after = j + 1 < keep.len() && !keep[j + 1];
        let line = self.lines[j].len() + 1;
        let cost = match (gap_before, gap_after) {
            (true, true) => line + MARKER_COST,
            (false, false) => line.saturating_sub(MARKER_COST),
            _ => line,
        };
        if self.spent + cost <= budget {
            keep[j] = true;
            self.spent += cost;
        }
    }
}

/// A line's text without the line number a client put before it (Claude Code's `12\t` or
/// `    12→`, OpenCode's `12: `), for matching against what the model quoted.
fn content_of(line: &str) -> &str {
    let digits_end = line
        .char_indices()
        .find(|&(_, c)| !c.is_ascii_digit() && c != ' ')
        .map_or(line.len(), |(i, _)| i);
    let has_number = line[..digits_end].bytes().any(|b| b.is_ascii_digit());
    if !has_number {
        return line;
    }
    let rest = &line[digits_end..];
    rest.strip_prefix('\t')
        .or_else(|| rest.strip_prefix('→'))
        .or_else(|| rest.strip_prefix(": "))
        .unwrap_or(line)
}

/// The kept lines in order, each run of lines not kept as one marker line.
fn render(lines: &[&str], keep: &[bool]) -> String {
    let mut out = String::new();
    let mut skipped = 0;
    for (line, kept) in lines.iter().zip(keep) {
        if *kept {
            if skipped > 0 {
                out.push_str(&gap(skipped));
                skipped = 0;
            }
            out.push_str(line);
            out.push('\n');
        } else {
            skipped += 1;
        }
    }
    if skipped > 0 {
        out.push_str(&gap(skipped));
    }
    if out.ends_with('\n') {
        out.pop();
    }
    out
}

/// The marker of `n` lines not shown.
fn gap(n: usize) -> String {
    let s = if n == 1 { "" } else { "s" };
    format!("[pith: {n} line{s} not shown]\n")
}

#[cfg(test)]
mod tests {
    use super::around::*;
    use super::must_keep::*;
    use super::score::*;
    use super::*;
    use crate::outputs::excerpt::diff::diff_sides;

    fn numbered(lines: &[String]) -> String {
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| format!("{}\t{l}", i + 1))
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn source(n: usize) -> Vec<String> {
        (0..n)
            .map(|i| format!("    let value_{i} = compute_{i}(input, {i});"))
            .collect()
    }

    #[test]
    fn an_edits_old_string_is_kept_whole_and_gaps_are_marked() {
        let mut lines = source(200);
        lines[120] = "fn retry_backoff(attempt: u32) -> Duration {".into();
        lines[121] = "    Duration::from_millis(100 * attempt as u64)".into();
        lines[122] = "}".into();
        let output = numbered(&lines);
        let old = "fn retry_backoff(attempt: u32) -> Duration {\n    Duration::from_millis(100 * attempt as u64)\n}";
        let query = Query {
            call: vec!["/work/src/retry.rs"],
            later_text: vec!["The backoff is linear; make it exponential."],
            later_inputs: vec![
                old,
                "fn retry_backoff(attempt: u32) -> Duration {\n    Duration::from_millis(100 << attempt)\n}",
            ],
            ..Query::default()
        };
        let e = excerpt(&output, Kind::File, &query).unwrap();
        for n in [121, 122, 123] {
            let line = format!("{n}\t{}", lines[n - 1]);
            assert!(e.text.contains(&line), "{n} missing:\n{}", e.text);
        }
        assert!(e.text.contains("[pith: "), "{}", e.text);
        assert!(
            e.text.len() * 2 < output.len(),
            "{} of {}",
            e.text.len(),
            output.len()
        );
        assert_eq!(e.total, 200);
    }

    #[test]
    fn a_logs_errors_and_summary_are_kept() {
        let mut lines: Vec<String> = (0..300)
            .map(|i| format!("test module_{i}::works ... ok"))
            .collect();
        lines[150] = "test ledger::kill_9 ... FAILED".into();
        lines[290] = "thread 'ledger::kill_9' panicked at crates/pith/tests/ledger.rs:88:5:".into();
        lines[299] = "test result: FAILED. 298 passed; 1 failed".into();
        let output = lines.join("\n");
        let e = excerpt(&output, Kind::Shell, &Query::default()).unwrap();
        for n in [150, 290, 299, 0] {
            assert!(e.text.contains(&lines[n]), "{n} missing:\n{}", e.text);
        }
    }

    #[test]
    fn a_short_output_or_one_that_is_mostly_needed_stays_whole() {
        let short = source(MIN_LINES - 1).join("\n");
        assert_eq!(excerpt(&short, Kind::File, &Query::default()), None);
        let lines = source(100);
        let output = lines.join("\n");
        let all = output.clone();
        let query = Query {
            later_inputs: vec![&all],
            ..Query::default()
        };
        assert_eq!(excerpt(&output, Kind::File, &query), None);
    }

    #[test]
    fn the_same_inputs_give_the_same_bytes() {
        let lines = source(500);
        let output = numbered(&lines);
        let query = Query {
            call: vec!["compute_42"],
            later_text: vec!["value_300 looks wrong"],
            ..Query::default()
        };
        let a = excerpt(&output, Kind::File, &query).unwrap();
        let b = excerpt(&output, Kind::File, &query).unwrap();
        assert_eq!(a, b);
        assert!(a.text.contains("compute_42("), "{}", a.text);
        assert!(a.text.contains("value_300 "), "{}", a.text);
    }

    #[test]
    fn line_numbers_of_each_client_are_set_aside_for_matching() {
        assert_eq!(content_of("12\tfn main() {"), "fn main() {");
        assert_eq!(content_of("    12→fn main() {"), "fn main() {");
        assert_eq!(content_of("12: fn main() {"), "fn main() {");
        assert_eq!(content_of("error: 12: x"), "error: 12: x");
        assert_eq!(content_of("  --> src/a.rs:3"), "  --> src/a.rs:3");
    }

    /// What a later command searched for in quotes, and the definition of a name the model's
    /// text called, are kept over every ranked term; a listing keeps its last line (a total).
    #[test]
    fn quoted_patterns_named_definitions_and_a_listings_total_are_kept() {
        let mut lines = source(300);
        lines[40] = "fn flag(args: &[String], names: &[&str]) -> Option<String> {".into();
        lines[200] = "| req006 grown to ~1.3 MB | pith | 2.691 |".into();
        let output = numbered(&lines);
        let query = Query {
            call: vec!["cat -n src/codex.rs"],
            later_text: vec!["provider() already calls flag(args, names); nothing to add."],
            later_inputs: vec!["grep -n 'grown to ~1.3 MB' BENCHMARKS.md"],
            ..Query::default()
        };
        let e = excerpt(&output, Kind::File, &query).expect("shortened");
        assert!(e.kept.contains(&40), "the definition of flag: {:?}", e.kept);
        assert!(
            e.kept.contains(&200),
            "the quoted pattern's line: {:?}",
            e.kept
        );

        let mut listing: Vec<String> = (0..300).map(|i| format!("   {i} ./src/f{i}.rs")).collect();
        listing.push(" 100914 total".into());
        let listing = listing.join("\n");
        let e = excerpt(&listing, Kind::Search, &Query::default()).expect("shortened");
        assert_eq!(e.kept.first(), Some(&0));
        assert_eq!(e.kept.last(), Some(&300), "the total");
        assert_eq!(
            named("calls `flag()` and parse(x), not x("),
            ["flag", "parse"]
        );
        assert_eq!(
            quoted(r#"grep -n 'grown to ~1.3 MB' "short" 'unclosed"#),
            ["grown to ~1.3 MB"]
        );
    }
    /// A log shown with `cat` or `tail` is ranked as a command's output; a passing test whose
    /// name holds a problem word and a count of none are not problems; a search keeps the few
    /// log problems it found but not source that mentions errors.
    #[test]
    fn a_logs_problems_are_told_from_names_and_counts_that_mention_them() {
        assert_eq!(
            kind_of("Bash", Some("tail -n 400 target/ci.log")),
            Kind::Shell
        );
        assert_eq!(kind_of("Bash", Some("cat src/error.rs")), Kind::File);
        assert!(!names_a_problem(
            "test config::unknown_keys_are_errors ... ok"
        ));
        assert!(!names_a_problem(
            "test result: ok. 12 passed; 0 failed; 0 ignored"
        ));
        assert!(names_a_problem("test result: FAILED. 11 passed; 1 failed"));
        assert!(names_a_problem(
            "test config::unknown_keys_are_errors ... FAILED"
        ));
        assert!(!names_a_problem(&format!("left: {}", "error ".repeat(500))));
        // A name that holds a word (a benchmark's JSON): a field, not a problem.
        assert!(!names_a_problem("\"standard_error\": 142.38927389653904"));
        assert!(!names_a_problem("let warning_count = 3;"));
        assert!(names_a_problem("error: could not compile `pith` (lib)"));

        let mut found: Vec<String> = (0..300)
            .map(|i| format!("src/m{i}.rs:{i}:    Err(StoreError::Io(e)) => return Err(e),"))
            .collect();
        found[120] = "ci.log:2210:error[E0308]: mismatched types".into();
        found[250] = "ci.log:3001:test ledger::kill_9 ... FAILED".into();
        let e = excerpt(&found.join("\n"), Kind::Search, &Query::default()).expect("shortened");
        assert!(
            e.kept.contains(&120) && e.kept.contains(&250),
            "{:?}",
            e.kept
        );
        assert!(
            e.kept.len() < 20,
            "source that mentions errors is ranked: {:?}",
            e.kept
        );
        assert!(!is_log_problem("src/a.rs:3:    let error: &Error = &e;"));
        assert!(is_log_problem("src/a.rs:3:error: unused variable"));
    }

    /// A kept table row brings its header, a kept line of `git log` its commit, and a line that
    /// opens a short block the block through its close.
    #[test]
    fn a_kept_lines_heading_and_short_block_come_with_it() {
        let mut lines = source(300);
        lines[100] = "| body | pith p50 | bare p50 |".into();
        lines[101] = "|---|---:|---:|".into();
        for (n, line) in lines.iter_mut().enumerate().take(140).skip(102) {
            *line = format!("| req{n:03} | 1.{n} ms | 0.9 ms |");
        }
        let output = lines.join("\n");
        let query = Query {
            later_text: vec!["req130 is the slow one"],
            ..Query::default()
        };
        let e = excerpt(&output, Kind::Shell, &query).expect("shortened");
        assert!(
            e.kept.contains(&130) && e.kept.contains(&100),
            "{:?}",
            e.kept
        );

        let mut log = source(300);
        log[10] = format!("commit {}", "ab12".repeat(10));
        log[60] = "    Retry the upload when the server drops the connection".into();
        let query = Query {
            later_text: vec!["the upload retry landed"],
            ..Query::default()
        };
        let e = excerpt(&log.join("\n"), Kind::Shell, &query).expect("shortened");
        assert!(e.kept.contains(&60) && e.kept.contains(&10), "{:?}", e.kept);
        assert_eq!(
            heading_above(&["commit é"; 2], &[None; 2], 1, Kind::Shell),
            None
        );

        let mut file = source(300);
        file[200] = "members = [".into();
        file[201] = "    \"crates/pith\",".into();
        file[202] = "    \"crates/pith-bench\",".into();
        file[203] = "]".into();
        let query = Query {
            later_text: vec!["the workspace members list"],
            ..Query::default()
        };
        let e = excerpt(&numbered(&file), Kind::File, &query).expect("shortened");
        for n in 200..=203 {
            assert!(e.kept.contains(&n), "{n}: {:?}", e.kept);
        }
        assert_eq!(block_opened(&["a = [", "1,"], 0), 1..1, "an unclosed block");
    }

    /// git's commits and diffs are documents, not logs; a diff's kept line comes with its
    /// hunk's `@@` line, its file's `diff` line and that file's commit, and a change's added
    /// lines rank above the lines around them.
    #[test]
    fn a_diff_is_read_for_what_it_added_and_where() {
        for command in [
            "git show 0e875d6",
            "git -C /work/repo --no-pager log -p",
            "git diff",
        ] {
            assert_eq!(kind_of("Bash", Some(command)), Kind::File, "{command}");
        }
        assert_eq!(kind_of("Bash", Some("git status")), Kind::Shell);
        assert_eq!(
            kind_of("Bash", Some("git -c core.pager=cat push")),
            Kind::Shell
        );

        let mut diff = vec![format!("commit {}", "ab12".repeat(10)), String::new()];
        diff.push("    Retry uploads".into());
        diff.push(String::new());
        for file in ["upload", "download"] {
            diff.push(format!("diff --git a/src/{file}.rs b/src/{file}.rs"));
            diff.push(format!("--- a/src/{file}.rs"));
            diff.push(format!("+++ b/src/{file}.rs"));
            diff.push("@@ -1,80 +1,81 @@".into());
            for n in 0..80 {
                diff.push(format!(" let value_{n} = compute_{n}(input, {n});"));
            }
        }
        // The same words on a line the change kept and on the line it added, far below.
        diff[30] = " // the backoff between attempts".into();
        diff[150] = "+    let backoff = attempts * 2; // the backoff between attempts".into();
        let output = diff.join("\n");
        let query = Query {
            later_text: vec!["the backoff between attempts doubles"],
            ..Query::default()
        };
        let e = excerpt(&output, Kind::File, &query).expect("shortened");
        let sides = diff_sides(&diff.iter().map(String::as_str).collect::<Vec<_>>());
        assert_eq!(
            (sides[30], sides[150], sides[4]),
            (Some(b' '), Some(b'+'), None)
        );
        // The added line, its hunk, its file, its commit.
        let (download, hunk) = (4 + 84, 4 + 84 + 3);
        for n in [150, hunk, download, 0] {
            assert!(e.kept.contains(&n), "{n}: {:?}", e.kept);
        }
        let content: Vec<&str> = diff.iter().map(String::as_str).collect();
        let s = scores(&content, &sides, &[], &query);
        assert!(s[150] > s[30], "{} against {}", s[150], s[30]);
    }

    /// A search's line the model named by its number ("lines 95 and 119", a Read from an
    /// offset), though its words are every other line's.
    #[test]
    fn a_line_named_by_its_number_is_kept() {
        let mut grep: Vec<String> = (1..=120)
            .map(|n| {
                format!(
                    "/w/src/args.rs:{}:    #[arg(long, default_value_t = 50)]",
                    n * 3
                )
            })
            .collect();
        grep[0] = "/w/src/other.rs:119:    #[arg(long, default_value_t = 50)]".into();
        let output = grep.join("\n");
        let text = "args.rs has default_value_t = 50 at lines 96 and 300.";
        let query = Query {
            later_text: vec![text],
            ..Query::default()
        };
        let e = excerpt(&output, Kind::Search, &query).expect("shortened");
        // Line 96 is the 32nd match, line 300 the 100th: both kept.
        for n in [31, 99] {
            assert!(e.kept.contains(&n), "{n}: {:?}", e.kept);
        }
        // A Read of args.rs from line 351 (limit 3): the matches at 351 and 354.
        let read = serde_json::json!({"file_path": "/w/src/args.rs", "offset": 351, "limit": 4});
        let mut query = Query::default();
        query.add_later_input(&read);
        let e = excerpt(&output, Kind::Search, &query).expect("shortened");
        assert!(
            e.kept.contains(&116) && e.kept.contains(&117),
            "{:?}",
            e.kept
        );
    }

    /// A test's line in a run of many binaries comes with its binary's `test result:` line;
    /// in a log of many commits the one a later step named is read first.
    #[test]
    fn a_tests_binary_result_and_a_named_commits_lines_come_first() {
        let mut log = Vec::new();
        for crate_name in ["alpha", "beta", "gamma", "delta"] {
            log.push(format!(
                "     Running unittests src/lib.rs (target/debug/deps/{crate_name}-0f)"
            ));
            log.push(String::new());
            log.push("running 30 tests".into());
            for n in 0..30 {
                log.push(format!("test {crate_name}::tests::case_{n} ... ok"));
            }
            log.push(String::new());
            log.push(format!(
                "test result: ok. 30 passed; 0 failed; finished in 0.0{}s",
                log.len() % 10
            ));
            log.push(String::new());
        }
        let output = log.join("\n");
        let query = Query {
            later_text: vec!["run beta's case_17 again"],
            ..Query::default()
        };
        let e = excerpt(&output, Kind::Shell, &query).expect("shortened");
        let (case, result) = (36 + 3 + 17, 36 + 34);
        assert!(log[result].starts_with("test result"), "{}", log[result]);
        for n in [case, result] {
            assert!(e.kept.contains(&n), "{n}: {:?}", e.kept);
        }

        let mut commits = Vec::new();
        for (id, n) in [
            ("aaaa1111", 0),
            ("bbbb2222", 1),
            ("cccc3333", 2),
            ("dddd4444", 3),
        ] {
            commits.push(format!("commit {}", id.repeat(5)));
            commits.push(format!("    Change {n}"));
            commits.push(String::new());
            commits.push(" crates/alloc/src/lib.rs | 47 ++++++++-".into());
            for m in 0..30 {
                commits.push(format!(" crates/other_{n}_{m}/src/lib.rs | 2 +"));
            }
        }
        let output = commits.join("\n");
        let show = "git show cccc3333 -- crates/alloc/src/lib.rs";
        let query = Query {
            later_inputs: vec![show],
            ..Query::default()
        };
        let e = excerpt(&output, Kind::File, &query).expect("shortened");
        let content: Vec<&str> = commits.iter().map(String::as_str).collect();
        let s = scores(&content, &diff_sides(&content), &[], &query);
        let (named, other) = (2 * 34 + 3, 3);
        assert!(s[named] > s[other], "{} against {}", s[named], s[other]);
        assert!(e.kept.contains(&named), "{:?}", e.kept);
    }

    /// A figure the model cited is kept as a quote; a line an input holds that the output
    /// repeats everywhere is not kept at every place.
    #[test]
    fn a_cited_figure_is_kept_and_a_line_repeated_everywhere_is_not_quoted() {
        let mut log: Vec<String> = (0..120)
            .map(|n| format!("| body {} | pith | 0.{n:03} | +0.{:03} |", n % 4, n + 100))
            .collect();
        log[77] = "| body 1 | pith | 0.362 | +2.864 |".into();
        let output = log.join("\n");
        let text = "pith's added p99 on body 1 is +2.864: run it again";
        let query = Query {
            later_text: vec![text],
            ..Query::default()
        };
        let e = excerpt(&output, Kind::Shell, &query).expect("shortened");
        assert!(e.kept.contains(&77), "{:?}", e.kept);
        // As high as a quoted phrase: above what its words alone would give it.
        let content: Vec<&str> = log.iter().map(String::as_str).collect();
        let s = scores(&content, &diff_sides(&content), &[], &query);
        assert!(s[77] > PHRASE_WEIGHT, "{}", s[77]);

        let mut toml = Vec::new();
        for n in 0..60 {
            toml.extend([
                "[[query]]".to_owned(),
                "tree = \"pith\"".to_owned(),
                format!("pattern = \"word_{n}\""),
                String::new(),
            ]);
        }
        let output = toml.join("\n");
        let edit = "[[query]]\ntree = \"pith\"\npattern = \"hmac\"";
        let query = Query {
            later_inputs: vec![edit],
            ..Query::default()
        };
        let e = excerpt(&output, Kind::File, &query).expect("shortened");
        assert!(e.shown < 60, "{} of {} lines shown", e.shown, e.total);
    }

    /// At an equal score the shorter line ranks first; a line scoring much more ranks first
    /// whatever its length.
    #[test]
    fn a_long_line_ranks_below_a_short_one_of_the_same_score() {
        let long = "x".repeat(400);
        let lines = ["", long.as_str(), "short", "", "tie"];
        assert_eq!(ranked(&[0.0, 5.0, 5.0, 0.0, 5.0], &lines), [4, 2, 1]);
        assert_eq!(ranked(&[0.0, 20.0, 5.0, 0.0, 0.0], &lines), [1, 2]);
    }

    /// A `tail` of several files: the call's path is in every file's header, and ranks none of
    /// them; the line the model's text went on with is kept.
    #[test]
    fn a_calls_paths_rank_no_header_of_a_file_output() {
        let mut lines = Vec::new();
        for k in 0..6 {
            lines.push(format!("==> fixtures/recall/case_{k}/recorded.txt <=="));
            lines.extend((0..30).map(|n| format!("  step {n} of case {k} ran")));
            lines.push(String::new());
        }
        lines[4 * 32 + 9] = "  File \"/root/.pyenv/versions/3.11.7/lib/json.py\"".into();
        let output = lines.join("\n");
        let call = "tail -n +1 fixtures/recall/*/recorded.txt";
        let query = Query {
            call: vec![call],
            later_text: vec!["The traceback names the pyenv install: machine-specific."],
            ..Query::default()
        };
        let content: Vec<&str> = lines.iter().map(String::as_str).collect();
        let kind = kind_of("exec_command", Some(call));
        assert_eq!(kind, Kind::File);
        let s = scores_with(&content, &diff_sides(&content), &[], &query, false);
        assert_eq!(s[0], 0.0, "a header ranked by the call's path");
        assert!(s[4 * 32 + 9] > 0.0);
        // With the call's paths as terms, every header outranks the traceback's line.
        let with_paths = scores(&content, &diff_sides(&content), &[], &query);
        assert!(with_paths[0] > with_paths[4 * 32 + 9], "{with_paths:?}");
        let e = excerpt(&output, kind, &query).expect("shortened");
        assert!(e.kept.contains(&(4 * 32 + 9)), "{:?}", e.kept);
    }

    /// What the model's prose quoted in double quotes from the output ranks as a quote when few
    /// lines hold it; its prose's common words rank nothing.
    #[test]
    fn a_phrase_the_model_cited_is_kept_and_its_common_words_rank_nothing() {
        let mut lines: Vec<String> = (0..200)
            .map(|n| format!("src/pump.rs:{n}:    wait_{n}(); // turns between idle pith"))
            .collect();
        lines[3] = "src/pump.rs:3:    let the_timer = with(before);".into();
        lines[150] = "src/pump.rs:266:    Some((Normal, \"pith: idle between turns\")),".into();
        let output = lines.join("\n");
        let text = "With no request open the socket closes with \"pith: idle between turns\".";
        let query = Query {
            later_text: vec![text],
            ..Query::default()
        };
        let content: Vec<&str> = lines.iter().map(String::as_str).collect();
        let s = scores(&content, &diff_sides(&content), &[], &query);
        // Its words are on every line: the quote is what sets it above them.
        assert!(
            s[150] > PHRASE_WEIGHT && s[151] < PHRASE_WEIGHT / 2.0,
            "{s:?}"
        );
        // `the`, `with`, `before` are not terms of the prose.
        assert_eq!(s[3], 0.0, "{}", s[3]);
        let e = excerpt(&output, Kind::Search, &query).expect("shortened");
        assert!(e.kept.contains(&150), "{:?}", e.kept);
    }

    /// A kept doc comment comes with the item it documents; a prose line cut mid-sentence with
    /// the rest of its sentence; a line an edit quoted with the short block it sits in.
    #[test]
    fn a_doc_comments_item_a_sentences_end_and_an_edited_lines_block_come_with_it() {
        let mut file = source(300);
        file[100] = "/// Strictly greater than any arrival handed out before.".into();
        file[101] = "#[inline]".into();
        file[102] = "pub fn next_stamp(&self) -> i64 {".into();
        let query = Query {
            later_text: vec!["arrivals are strictly greater"],
            ..Query::default()
        };
        let e = excerpt(&numbered(&file), Kind::File, &query).expect("shortened");
        assert!(e.kept.contains(&102), "{:?}", e.kept);
        let content: Vec<&str> = file.iter().map(String::as_str).collect();
        assert_eq!(documented_below(&content, 101), None, "not a doc comment");

        let mut doc = source(300);
        doc[150] = "Set `[store] url` (or `PITH_STORE_URL`) on".into();
        doc[151] = "each machine, pointing at the database the team shares, and".into();
        doc[152] = "`[account] id` to who the machine's requests belong to.".into();
        doc[153] = "The next sentence starts here and is not needed".into();
        let query = Query {
            later_text: vec!["PITH_STORE_URL sets it"],
            ..Query::default()
        };
        let e = excerpt(&numbered(&doc), Kind::File, &query).expect("shortened");
        assert!(e.kept.contains(&152), "{:?}", e.kept);
        let content: Vec<&str> = doc.iter().map(String::as_str).collect();
        assert_eq!(sentence_rest(&content, 150), 151..153);
        assert_eq!(sentence_rest(&content, 152), 153..153, "ends its sentence");
        assert_eq!(sentence_rest(&content, 10), 11..11, "code");

        let mut code = source(300);
        code[200] = "        match field {".into();
        code[201] = "            b\"event\" => self.event = value,".into();
        code[202] = "            b\"data\" => self.data = value,".into();
        code[203] = "            _ => {}".into();
        code[204] = "        }".into();
        let query = Query {
            later_inputs: vec![
                "            b\"event\" => self.event = value,\n            b\"data\" => self.data = value,",
            ],
            ..Query::default()
        };
        let e = excerpt(&numbered(&code), Kind::File, &query).expect("shortened");
        for n in 200..=204 {
            assert!(e.kept.contains(&n), "{n}: {:?}", e.kept);
        }
        let content: Vec<&str> = code.iter().map(String::as_str).collect();
        assert_eq!(enclosing_block(&content, 203), Some(200..205));
        assert_eq!(enclosing_block(&content, 10), None);
    }
    /// A compiler's quoted source comes with its diagnostic, a kept section with the heading
    /// it sits under, and a definition a diff adds counts as one.
    #[test]
    fn a_diagnostics_source_a_sections_parent_and_a_diffs_definitions_are_found() {
        let mut log: Vec<String> = (0..200)
            .map(|i| format!("   Compiling crate_{i}"))
            .collect();
        log[150] = "warning: function `usage_of` is never used".into();
        log[151] = "   --> crates/pith-store/src/ledger/model.rs:178:15".into();
        log[152] = "    |".into();
        log[153] = "178 | pub(crate) fn usage_of<E>(".into();
        log[154] = "    |               ^^^^^^^^".into();
        let e = excerpt(&log.join("\n"), Kind::Shell, &Query::default()).expect("shortened");
        for n in 150..=154 {
            assert!(e.kept.contains(&n), "{n}: {:?}", e.kept);
        }
        assert!(!is_source_gutter("| req006 | 1.3 MB |"));

        let mut doc = source(300);
        doc[5] = "## Invariants".into();
        doc[190] = "### Storage (`pith-store`)".into();
        doc[230] = "- The spool is bounded and survives a restart.".into();
        let query = Query {
            later_text: vec!["add a bullet after the spool's"],
            ..Query::default()
        };
        let e = excerpt(&numbered(&doc), Kind::File, &query).expect("shortened");
        for n in [5, 190, 230] {
            assert!(e.kept.contains(&n), "{n}: {:?}", e.kept);
        }
        assert_eq!(heading_level("#[derive(Debug)]"), None);

        assert_eq!(
            declared("+    pub fn arrival_us(&self) -> i64 {"),
            "fn arrival_us(&self) -> i64 {"
        );
        assert!(defines_one_of(
            "+fn starved_writers(path: &Path)",
            &["starved_writers"]
        ));
    }
    /// The best lines are kept before any line's context: a file's group of long matches under
    /// the best-ranked heading does not spend the budget the next best line needed.
    #[test]
    fn the_best_lines_come_before_the_context_of_any() {
        let mut found = vec!["Found 160 matches".to_string(), "/src/a.rs:".to_string()];
        found
            .extend((0..40).map(|i| format!("  Line {i}: {}", "let widget = build(); ".repeat(9))));
        found.push("/src/b.rs:".into());
        found.extend((0..120).map(|i| format!("  Line {i}: x += 1;")));
        found[100] = format!(
            "  Line 58: frobnicate(); {}",
            "// keep the widgets in step ".repeat(7)
        );
        let query = Query {
            later_text: vec!["frobnicate is the call to change"],
            later_inputs: vec!["/src/a.rs"],
            ..Query::default()
        };
        let e = excerpt(&found.join("\n"), Kind::Search, &query).expect("shortened");
        assert!(e.kept.contains(&1) && e.kept.contains(&100), "{:?}", e.kept);
    }
    /// A type the model's prose names in CamelCase is a name it will use, and a search's line
    /// that defines it counts as a definition under the search's own prefix.
    #[test]
    fn a_type_named_in_prose_is_found_where_a_search_shows_its_definition() {
        assert_eq!(
            named("LedgerSink is defined in pith-ledger; the Proxy state holds it"),
            ["LedgerSink"]
        );
        let names = ["LedgerSink"];
        assert!(defines_one_of(
            "crates/pith-ledger/src/lib.rs:282:pub struct LedgerSink {",
            &names
        ));
        assert!(defines_one_of(
            "  Line 282: pub struct LedgerSink {",
            &names
        ));
        assert!(!defines_one_of(
            "crates/pith-proxy/src/tee.rs:25:use pith_ledger::LedgerSink;",
            &names
        ));
        assert_eq!(found_text("error: 12: x"), "error: 12: x");
        assert_eq!(found_text("a b:12:c"), "a b:12:c");
    }

    /// A search for a type (`Saving`): the lines that build it (`Saving {`, a struct literal a
    /// change of the type must follow) rank above the many that only mention it.
    #[test]
    fn a_searched_types_literals_come_before_its_mentions() {
        let mut found = vec!["Found 90 matches".to_string(), "/src/a.rs:".to_string()];
        found.extend((0..80).map(|i| {
            format!(
                "  Line {i}: /// the savings of a session, per model and account: {}",
                "saving and savings ".repeat(4)
            )
        }));
        found[30] = "  Line 28:         savings: vec![Saving {".into();
        found[60] = "  Line 58:         .map(|s| Saving {".into();
        let query = Query {
            call: vec!["Saving|savings", "/src"],
            later_text: vec!["the struct literals are the places to update"],
            ..Query::default()
        };
        let e = excerpt(&found.join("\n"), Kind::Search, &query).expect("shortened");
        assert!(e.kept.contains(&30) && e.kept.contains(&60), "{:?}", e.kept);
        assert_eq!(
            type_names("Saving|savings the Event, an x").collect::<Vec<_>>(),
            ["Saving", "Event"]
        );
        // A function that returns one does not build it.
        let content = ["fn make() -> Saving {", "let s = Saving {", "x"];
        let s = scores(&content, &diff_sides(&content), &[], &query);
        assert!(s[1] >= s[0] + PHRASE_WEIGHT, "{s:?}");
    }

    /// A token of the query counts once on a line: a line holding `Cargo.toml` scores as one
    /// match of `crates/a/Cargo.toml`, as much as a line holding only its `toml`, not as its
    /// three parts together (which buried a listing's `benches` under every `Cargo.toml`).
    #[test]
    fn a_query_token_counts_once_on_a_line() {
        let mut content = vec!["x Cargo.toml", "y toml", "z cargo"];
        content.extend(std::iter::repeat_n("filler", 20));
        let query = Query {
            later_inputs: vec!["crates/a/Cargo.toml"],
            ..Query::default()
        };
        let s = scores(&content, &diff_sides(&content), &[], &query);
        assert!(s[0] > 0.0);
        assert!((s[0] - s[1]).abs() < 1e-9, "{} against {}", s[0], s[1]);
    }

    /// A listing of several directories (`ls crates/*/`): an entry's directory is the `path:`
    /// line its block starts under, never one across a blank line.
    #[test]
    fn a_listed_entry_comes_with_its_directory() {
        let listing = [
            "crates/a/:",
            "total 8",
            "-rw-r--r-- 1 root root 864 Dec 5 21:15 Cargo.toml",
            "drwxr-xr-x 2 root root 4096 Dec 6 02:39 benches",
            "",
            "crates/b/:",
            "total 8",
            "drwxr-xr-x 2 root root 4096 Dec 6 02:37 src",
            "",
            "drwxr-xr-x 2 root root 4096 Dec 6 02:37 loose",
        ];
        assert_eq!(
            heading_above(&listing, &diff_sides(&listing), 3, Kind::Shell),
            Some(0)
        );
        assert_eq!(
            heading_above(&listing, &diff_sides(&listing), 7, Kind::Shell),
            Some(5)
        );
        assert_eq!(
            heading_above(&listing, &diff_sides(&listing), 9, Kind::Shell),
            None
        );
    }

    /// The functions the text names: a line calling one (`flag(args)`) ranks above one that
    /// only holds its word; a snake-case word of prose (`write_interrupted turns …`) names one.
    #[test]
    fn a_named_functions_calls_rank_and_snake_case_prose_names_one() {
        assert_eq!(
            named("write_interrupted (lib.rs:1066) turns each record"),
            ["write_interrupted"]
        );
        let content = ["let profile = flag(args, x);", "// the flag says so", "x"];
        let query = Query {
            later_text: vec!["it reads `flag()`"],
            ..Query::default()
        };
        let s = scores(&content, &diff_sides(&content), &[], &query);
        assert!(s[0] >= s[1] + PHRASE_WEIGHT / 2.0, "{s:?}");
    }
}
