//! The excerpt's quality, offline, on `pith-testkit/fixtures/outputs/`: real tool outputs
//! (pith's own files read, its tree searched, its test and build logs) in each client's
//! format, each with the lines a later step of the task needed marked by hand. The goal (issue
//! 48): an excerpt keeps at least 95% of the needed lines at no more than a quarter of the
//! output, and every line a later tool input quoted. The quoted lines and the quarter hold;
//! the share of needed lines is held at its floor ([`RECALL_FLOOR`]) until it gets there.

use pith_testkit::fixtures::{OutputCase, output_cases};
use pith_transform::outputs::excerpt::{Excerpt, Query, excerpt, kind_of_call};

/// The share of needed lines kept that the ranking may not fall below (87.4% on the 120
/// cases at stop 65, BENCHMARKS.md; the goal is 95%). Each held-out set added lowers what the
/// corpus measures: sets (e), (f) and (g), whose next steps name the lines they needed more
/// loosely, kept 74%, 86% and 69%.
const RECALL_FLOOR: f64 = 0.87;

#[test]
fn excerpts_keep_what_later_steps_needed_at_a_quarter_of_the_output() {
    let cases = output_cases().unwrap();
    assert!(cases.len() >= 30, "{} cases", cases.len());
    let (mut needed, mut needed_kept, mut quoted_missed) = (0, 0, Vec::new());
    let (mut output_chars, mut shown_chars, mut whole) = (0, 0, Vec::new());
    let mut missed = Vec::new();
    // Needed lines kept and needed, by the set a case was made in (held-out sets apart).
    let mut by_batch: std::collections::BTreeMap<&str, (usize, usize)> = Default::default();
    // `PITH_CORPUS_SHOW=013` prints the cases whose names start so, line by line: what the
    // excerpt kept and which lines were needed (what a change of the ranking is judged by).
    let show = std::env::var("PITH_CORPUS_SHOW").ok();
    // `PITH_CORPUS_DUMP=dir` writes each case's output and what the excerpt shows of it
    // (`NNN-slug.output`, `NNN-slug.excerpt`), for measuring the share in a real tokenizer's
    // tokens (`fixtures/outputs/tokens.cjs`).
    let dump = std::env::var_os("PITH_CORPUS_DUMP").map(std::path::PathBuf::from);
    println!("| case | client | tool | lines | shown | needed kept | size |");
    println!("|---|---|---|---:|---:|---:|---:|");
    for case in &cases {
        let name = &case.name;
        let mut query = Query::of_call(&case.input);
        query.later_text.push(&case.later.text);
        case.later
            .tool_inputs
            .iter()
            .for_each(|v| query.add_later_input(v));
        let lines = case.output.split('\n').count();
        let e = excerpt(&case.output, kind_of_call(&case.tool, &case.input), &query);
        let kept = |n: usize| {
            e.as_ref()
                .is_none_or(|e| e.kept.binary_search(&(n - 1)).is_ok())
        };
        let case_kept = case.needed.iter().filter(|n| kept(**n)).count();
        if let Some(dir) = &dump {
            let shown = e.as_ref().map_or(case.output.as_str(), |e| e.text.as_str());
            std::fs::write(dir.join(format!("{name}.output")), &case.output).unwrap();
            std::fs::write(dir.join(format!("{name}.excerpt")), shown).unwrap();
        }
        if show.as_deref().is_some_and(|s| name.starts_with(s)) {
            println!("{}", shown_case(case, e.as_ref()));
        }
        let out_lines: Vec<&str> = case.output.split('\n').collect();
        for n in case.needed.iter().filter(|n| !kept(**n)) {
            let line: String = out_lines[n - 1].chars().take(110).collect();
            missed.push(format!("{name}:{n}: {line}"));
        }
        needed += case.needed.len();
        needed_kept += case_kept;
        let batch = by_batch
            .entry(case.batch.as_deref().unwrap_or("the rules' own cases"))
            .or_default();
        batch.0 += case_kept;
        batch.1 += case.needed.len();
        quoted_missed.extend(
            case.quoted
                .iter()
                .filter(|n| !kept(**n))
                .map(|n| format!("{name}:{n}")),
        );
        output_chars += case.output.len();
        let shown = e.as_ref().map_or(case.output.len(), |e| e.text.len());
        shown_chars += shown;
        if e.is_none() {
            whole.push(name.clone());
        }
        println!(
            "| {name} | {} | {} | {lines} | {} | {case_kept}/{} | {:.0}% |",
            case.client,
            case.tool,
            e.as_ref().map_or(lines, |e| e.shown),
            case.needed.len(),
            100.0 * shown as f64 / case.output.len() as f64
        );
    }
    let recall = needed_kept as f64 / needed as f64;
    let size = shown_chars as f64 / output_chars as f64;
    println!(
        "\n{} cases: needed lines kept {needed_kept}/{needed} ({:.1}%), shown {:.1}% of the \
         outputs' characters, {} left whole",
        cases.len(),
        100.0 * recall,
        100.0 * size,
        whole.len()
    );
    for (batch, (kept, of)) in &by_batch {
        println!(
            "  {batch}: {kept}/{of} ({:.1}%)",
            100.0 * *kept as f64 / *of as f64
        );
    }
    println!("\nneeded lines not kept:");
    for m in &missed {
        println!("  {m}");
    }
    assert!(
        quoted_missed.is_empty(),
        "quoted lines dropped: {quoted_missed:?}"
    );
    assert!(
        recall >= RECALL_FLOOR,
        "needed lines kept: {:.1}% (goal 95%)",
        100.0 * recall
    );
    assert!(size <= 0.25, "shown: {:.1}% of the outputs", 100.0 * size);
}

/// One case's output, a line a row: `K` kept, `N` needed, `!` needed and not kept.
fn shown_case(case: &OutputCase, e: Option<&Excerpt>) -> String {
    use std::fmt::Write;
    let mut out = format!("\n---- {}: {} {}\n", case.name, case.tool, case.input);
    let _ = writeln!(out, "later text: {}", case.later.text);
    for input in &case.later.tool_inputs {
        let _ = writeln!(out, "later input: {input}");
    }
    for (i, line) in case.output.split('\n').enumerate() {
        let kept = e.is_none_or(|e| e.kept.binary_search(&i).is_ok());
        let needed = case.needed.contains(&(i + 1));
        let mark = match (kept, needed) {
            (true, true) => "KN",
            (true, false) => "K ",
            (false, true) => "! ",
            (false, false) => "  ",
        };
        let line: String = line.chars().take(140).collect();
        let _ = writeln!(out, "{mark} {:>4} {line}", i + 1);
    }
    out
}
