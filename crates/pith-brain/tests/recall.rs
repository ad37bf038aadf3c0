//! Host recall over a real SQLite brain: headline extraction and overlap on real tool output,
//! and both hosts' real hook payloads against a seeded brain.
#![expect(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test harness: a panic is the failure report"
)]

use std::path::Path;

use pith_brain::recall::headline::{extract, overlap, same_failure};
use pith_brain::recall::{self, Access, Settings};
use pith_brain::{Brain, EvidenceSpec, Kind, NewMemory, Workspace};
use pith_store::brain::{open_workspace_brain, open_workspace_brain_for_hook};
use pith_testkit::fixtures::{claude_code_hook_payloads, codex_hook_payloads, error_output};

/// Each real output and the headline taken from it.
const HEADLINES: &[(&str, &str)] = &[
    (
        "pytest_assert",
        "FAILED test_calc.py::test_add - assert -1 == 5",
    ),
    (
        "pytest_import",
        "ModuleNotFoundError: No module named 'missing_mod'",
    ),
    (
        "pytest_keyerror",
        "FAILED test_parser.py::test_parse_empty - KeyError: 'name'",
    ),
    (
        "cargo_test",
        "thread 'tests::adds' panicked at src/lib.rs:10:9: assertion `left == right` failed",
    ),
    (
        "cargo_build",
        "error[E0308]: mismatched types (at src/lib.rs:2:21)",
    ),
    (
        "cargo_moved",
        "error[E0382]: use of moved value: `v` (at src/lib.rs:3:13)",
    ),
    (
        "tsc",
        "error TS2322: Type 'string' is not assignable to type 'number'. (at a.ts:1:7)",
    ),
    (
        "tsc_pretty",
        "error TS2322: Type 'string' is not assignable to type 'number'. (at a.ts:1:7)",
    ),
    (
        "tsc_name",
        "error TS2304: Cannot find name 'foo'. (at b.ts:1:19)",
    ),
    ("go_test", "calc_test.go:7: Add(2, 3) = -1; want 5"),
    ("go_build", "./calc.go:3:37: undefined: c"),
    (
        "go_parse",
        "parse_test.go:6: Parse(\"\") returned error: unexpected EOF",
    ),
    (
        "jest",
        "● add › adds numbers - expect(received).toBe(expected) // Object.is equality",
    ),
    (
        "jest_other",
        "● add › handles negatives - expect(received).toBe(expected) // Object.is equality",
    ),
    ("vitest", "FAIL vcalc.test.mjs > adds numbers"),
    (
        "eslint",
        "error 'x' is assigned a value but never used no-unused-vars",
    ),
    ("eslint_undef", "error 'z' is not defined no-undef"),
    (
        "mypy",
        "error: Incompatible return value type (got \"str\", expected \"int\") [return-value] \
         (at typed.py:2)",
    ),
    ("ruff", "F401 [*] `os` imported but unused (at lint.py:1:8)"),
    (
        "ruff_concise",
        "F401 [*] `os` imported but unused (at lint.py:1:8)",
    ),
];

#[test]
fn headlines_are_the_most_specific_error_line_of_real_output() {
    let wrong: Vec<String> = HEADLINES
        .iter()
        .filter_map(|(name, want)| {
            let got = extract(&error_output(name).unwrap());
            (got.as_deref() != Some(*want)).then(|| format!("{name}: {got:?}"))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    for (name, want) in HEADLINES {
        let output = error_output(name).unwrap();
        assert_eq!(extract(&output).as_deref(), Some(*want), "{name}");
        // Claude Code prefixes its own line; the headline is the same.
        let claude = format!("Exit code 1\n{output}");
        assert_eq!(
            extract(&claude).as_deref(),
            Some(*want),
            "{name} via Claude Code"
        );
    }
}

#[test]
fn generic_or_passing_output_has_no_headline() {
    for output in [
        ".                                                                        [100%]\n1 passed in 0.01s\n",
        "running 3 tests\ntest a ... ok\ntest error_paths ... ok\n\ntest result: ok. 3 passed; 0 failed\n",
        "make: *** [Makefile:3: test] Error 1\n",
        "error: could not compile `x` (lib) due to 2 previous errors\n",
        "Exit code 1\n",
        "",
    ] {
        assert_eq!(extract(output), None, "{output}");
    }
}

/// A recorded fix's headline, a failure's real output, and whether they are the same failure.
const SAME: &[(&str, &str, bool)] = &[
    // What the fix was saved for, typed or pasted by whoever saved it.
    (
        "FAILED test_calc.py::test_add - assert -1 == 5",
        "pytest_assert",
        true,
    ),
    (
        "test_calc.py::test_add fails: assert -1 == 5",
        "pytest_assert",
        true,
    ),
    ("error[E0308]: mismatched types", "cargo_build", true),
    (
        "error TS2322: Type 'string' is not assignable to type 'number'",
        "tsc_pretty",
        true,
    ),
    ("calc_test.go:7: Add(2, 3) = -1; want 5", "go_test", true),
    ("● add › adds numbers", "jest", true),
    (
        "'x' is assigned a value but never used (no-unused-vars)",
        "eslint",
        true,
    ),
    // Near misses: another error of the same tool.
    (
        "FAILED test_calc.py::test_add - assert -1 == 5",
        "pytest_keyerror",
        false,
    ),
    ("error[E0308]: mismatched types", "cargo_moved", false),
    (
        "error TS2322: Type 'string' is not assignable to type 'number'",
        "tsc_name",
        false,
    ),
    ("calc_test.go:7: Add(2, 3) = -1; want 5", "go_parse", false),
    ("● add › adds numbers", "jest_other", false),
    (
        "'x' is assigned a value but never used (no-unused-vars)",
        "eslint_undef",
        false,
    ),
    (
        "ModuleNotFoundError: No module named 'missing_mod'",
        "pytest_keyerror",
        false,
    ),
    // A fix whose headline is only the shared words ("fix", "test", "failed") is not enough.
    ("fix failed test", "pytest_assert", false),
];

#[test]
fn the_overlap_decides_the_same_failure_and_keeps_near_misses_silent() {
    for (recorded, name, same) in SAME {
        let headline = extract(&error_output(name).unwrap()).unwrap();
        let o = overlap(recorded, &headline);
        assert_eq!(
            same_failure(recorded, &headline).is_some(),
            *same,
            "{recorded:?} vs {name} ({headline:?}): overlap {o:.2}"
        );
    }
    // Numbers and punctuation are not terms; case is not a difference.
    assert_eq!(overlap("assert -1 == 5", "ASSERT 7 == 9"), 1.0);
    assert_eq!(overlap("", "x"), 0.0);
}

/// A workspace like the captures' (`calc.py`, `test_calc.py`) with a brain holding a fix for
/// the failing test, a failed attempt and a note on `calc.py`, and unrelated memories.
struct Seeded {
    dir: tempfile::TempDir,
    root: String,
    fix: String,
    failed: String,
    note: String,
}

fn seeded() -> Seeded {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::write(root.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(root.join("test_calc.py"), "from calc import add\n").unwrap();
    std::fs::write(root.join("other.py"), "x = 1\n").unwrap();
    let mut brain = open_workspace_brain(Workspace::new(&root).unwrap()).unwrap();
    let mut save = |kind, title: &str, headline: Option<&str>, evidence: &str| {
        brain
            .save(NewMemory {
                kind,
                title: title.into(),
                body: "Details.".into(),
                tags: vec![],
                headline: headline.map(str::to_owned),
                evidence: vec![EvidenceSpec::parse(evidence).unwrap()],
            })
            .unwrap()
            .memory
            .id
    };
    let fix = save(
        Kind::Fix,
        "add() subtracted: return a + b",
        Some("FAILED test_calc.py::test_add - assert -1 == 5"),
        "calc.py",
    );
    let failed = save(
        Kind::Failed,
        "abs() in add broke negative inputs",
        None,
        "calc.py",
    );
    let note = save(Kind::Note, "calc.py is the public API", None, "calc.py");
    // Fixes for other failures, which BM25 also nominates (they share "test", "failed").
    save(
        Kind::Fix,
        "parser: empty input",
        Some("FAILED test_parser.py::test_parse_empty - KeyError: 'name'"),
        "other.py",
    );
    save(
        Kind::Fix,
        "types in add",
        Some("error[E0308]: mismatched types"),
        "other.py",
    );
    Seeded {
        root: root.to_str().unwrap().to_owned(),
        dir,
        fix,
        failed,
        note,
    }
}

fn opener(ws: &Workspace, access: Access) -> Option<Brain> {
    open_workspace_brain_for_hook(ws.clone(), access, std::time::Duration::from_millis(100))
        .unwrap()
}

/// The note recall gives `payload` (from `/home/dev/calc` to the seeded workspace), in `session`.
fn ask(seeded: &Seeded, payload: &str, session: &str, settings: &Settings) -> Option<String> {
    let mut value: serde_json::Value = serde_json::from_str(payload).unwrap();
    value["session_id"] = session.into();
    let text = value.to_string().replace("/home/dev/calc", &seeded.root);
    recall::recall(text.as_bytes(), settings, &mut opener).map(|note| {
        let answer: serde_json::Value = serde_json::from_str(&note.host_answer()).unwrap();
        assert_eq!(
            answer["hookSpecificOutput"]["hookEventName"], value["hook_event_name"],
            "the answer echoes the event name"
        );
        let text = answer["hookSpecificOutput"]["additionalContext"]
            .as_str()
            .unwrap()
            .to_owned();
        assert!(!text.contains('\n'), "one line: {text}");
        text
    })
}

/// What recall says to each of `payloads`, in one session.
fn session_notes(seeded: &Seeded, payloads: &[String], session: &str) -> Vec<Option<String>> {
    payloads
        .iter()
        .map(|p| ask(seeded, p, session, &Settings::default()))
        .collect()
}

fn assert_notes(host: &str, seeded: &Seeded, notes: &[Option<String>], expected: &[Moment]) {
    assert_eq!(notes.len(), expected.len(), "{host}: {notes:?}");
    for (i, (note, moment)) in notes.iter().zip(expected).enumerate() {
        let what = format!("{host} payload {i}: {note:?}");
        match moment {
            Moment::Silent => assert_eq!(note, &None, "{what}"),
            Moment::Fix => {
                let n = note.as_deref().expect(&what);
                assert!(
                    n.starts_with("pith: a recorded fix matches this failure: "),
                    "{what}"
                );
                assert!(n.contains(&format!("{} fix [fresh]", seeded.fix)), "{what}");
                assert!(n.contains("get_memory"), "{what}");
            }
            Moment::Read => {
                // The fix was named one moment earlier: each memory once per session.
                let n = note.as_deref().expect(&what);
                for id in [&seeded.failed, &seeded.note] {
                    assert!(n.contains(id.as_str()), "{what}");
                }
                assert!(!n.contains(seeded.fix.as_str()), "said twice: {what}");
                assert!(n.starts_with("pith: 2 memories on this file: "), "{what}");
            }
            Moment::Failed => {
                let n = note.as_deref().expect(&what);
                assert!(n.contains(&seeded.failed), "{what}");
                assert!(!n.contains(&seeded.note), "only failed attempts: {what}");
                assert!(n.contains("failed attempt on record"), "{what}");
            }
        }
    }
}

#[derive(Debug)]
enum Moment {
    Silent,
    Fix,
    Read,
    Failed,
}

#[test]
fn claude_codes_real_payloads_get_each_note_once_per_session() {
    let seeded = seeded();
    let payloads = claude_code_hook_payloads().unwrap();
    // The capture holds two sessions of six payloads each; the first is used twice.
    let first: Vec<String> = payloads[..6].to_vec();
    let expected = [
        Moment::Silent, // SessionStart
        Moment::Fix,    // PostToolUseFailure: the failing pytest
        Moment::Read,   // Read calc.py
        Moment::Silent, // Edit calc.py (its failed attempt was named by the Read)
        Moment::Silent, // the passing pytest
        Moment::Silent, // Grep
    ];
    let notes = session_notes(&seeded, &first, "session-a");
    assert_notes("claude", &seeded, &notes, &expected);
    // The same events again in the same session: nothing new to say.
    let again = session_notes(&seeded, &first, "session-a");
    assert!(again.iter().all(Option::is_none), "{again:?}");
    // Another session hears it all again.
    let other = session_notes(&seeded, &first, "session-b");
    assert_notes("claude", &seeded, &other, &expected);
    // A session that edits calc.py without reading it first hears of the failed attempt there.
    let edit_only = [first[0].clone(), first[3].clone()];
    let notes = session_notes(&seeded, &edit_only, "session-c");
    assert_notes("claude", &seeded, &notes, &[Moment::Silent, Moment::Failed]);
}

#[test]
fn codexs_real_payloads_get_each_note_once_per_session() {
    let seeded = seeded();
    let payloads = codex_hook_payloads().unwrap();
    let expected = [
        Moment::Fix,    // Bash: the failing pytest (its output is the only sign it failed)
        Moment::Read,   // Bash: cat calc.py
        Moment::Silent, // apply_patch on calc.py (its failed attempt was named by the cat)
        Moment::Silent, // Bash: the passing pytest
    ];
    let notes = session_notes(&seeded, &payloads, "codex-a");
    assert_notes("codex", &seeded, &notes, &expected);
    let again = session_notes(&seeded, &payloads, "codex-a");
    assert!(again.iter().all(Option::is_none), "{again:?}");
    let other = session_notes(&seeded, &payloads, "codex-b");
    assert_notes("codex", &seeded, &other, &expected);
}

#[test]
fn silence_without_a_brain_and_for_files_or_failures_it_knows_nothing_of() {
    let seeded = seeded();
    let payloads = claude_code_hook_payloads().unwrap();
    // A file no memory cites.
    let read_other = payloads[2].replace("/calc.py", "/test_calc.py");
    assert_eq!(ask(&seeded, &read_other, "s", &Settings::default()), None);
    // A failure no fix is recorded for (its headline shares "FAILED test_calc py").
    let other_failure = payloads[1].replace(
        "FAILED test_calc.py::test_add - assert -1 == 5",
        "FAILED test_calc.py::test_mul_overflow - OverflowError: int too large",
    );
    assert_eq!(
        ask(&seeded, &other_failure, "s", &Settings::default()),
        None
    );
    // Not a verdict command: silent even though its output names the recorded failure.
    let not_verdict = payloads[1].replace("python3 -m pytest -q test_calc.py", "cat log.txt");
    assert_eq!(ask(&seeded, &not_verdict, "s", &Settings::default()), None);
    // The verdict list is configurable.
    let only_cargo = Settings::new(["cargo test"], false);
    assert_eq!(ask(&seeded, &payloads[1], "s2", &only_cargo), None);

    // A workspace without a brain: silent, and nothing is created.
    let bare = tempfile::tempdir().unwrap();
    std::fs::create_dir(bare.path().join(".git")).unwrap();
    std::fs::write(bare.path().join("calc.py"), "x\n").unwrap();
    let root = bare.path().canonicalize().unwrap();
    for payload in &payloads {
        let text = payload.replace("/home/dev/calc", root.to_str().unwrap());
        assert_eq!(
            recall::recall(text.as_bytes(), &Settings::default(), &mut opener),
            None
        );
    }
    assert!(!root.join(".pith").exists());
    drop(seeded.dir);
}

#[test]
fn recall_moves_no_hit_counter() {
    let seeded = seeded();
    let payloads = claude_code_hook_payloads().unwrap();
    session_notes(&seeded, &payloads[..6], "s");
    let mut brain = open_workspace_brain(Workspace::new(Path::new(&seeded.root)).unwrap()).unwrap();
    let all = brain.list(&pith_brain::ListFilter::default()).unwrap();
    assert!(all.iter().all(|c| c.memory.hits == 0), "{all:?}");
}

#[test]
fn a_fix_is_captured_when_the_failed_command_passes_after_edits() {
    let seeded = seeded();
    let payloads = claude_code_hook_payloads().unwrap();
    let capture = Settings::new(recall::DEFAULT_VERDICT_COMMANDS.iter().copied(), true);
    // A failure the brain has no fix for, then an edit, then the same command passing.
    let failure = payloads[1].replace(
        "FAILED test_calc.py::test_add - assert -1 == 5",
        "FAILED test_calc.py::test_sub - NameError: name 'sub' is not defined",
    );
    let edit = payloads[3].replace("calc.py", "test_calc.py");
    let pass = &payloads[4];
    assert_eq!(ask(&seeded, &failure, "cap", &capture), None);
    assert_eq!(ask(&seeded, &edit, "cap", &capture), None);
    let said = ask(&seeded, pass, "cap", &capture).expect("the capture is said");
    assert!(said.starts_with("pith: recorded fix m-"), "{said}");
    assert!(said.contains("(captured, unverified)"), "{said}");
    assert!(
        said.contains("`python3 -m pytest -q test_calc.py` passes after editing test_calc.py"),
        "{said}"
    );

    let mut brain = open_workspace_brain(Workspace::new(Path::new(&seeded.root)).unwrap()).unwrap();
    let fixes = brain
        .list(&pith_brain::ListFilter {
            kind: Some(Kind::Fix),
            ..Default::default()
        })
        .unwrap();
    let captured = &fixes[0].memory;
    assert_eq!(
        captured.headline.as_deref(),
        Some("FAILED test_calc.py::test_sub - NameError: name 'sub' is not defined")
    );
    assert_eq!(captured.tags, ["captured", "unverified"]);
    assert_eq!(captured.evidence[0].path, "test_calc.py");
    assert!(said.contains(&captured.id), "{said}");

    // Passing again records nothing more; the same failure later is now a known one.
    assert_eq!(ask(&seeded, pass, "cap", &capture), None);
    let known = ask(&seeded, &failure, "cap2", &capture).unwrap();
    assert!(known.contains(&captured.id), "{known}");

    // Without edits between failure and pass, nothing is captured; off by default.
    let other = payloads[1].replace(
        "FAILED test_calc.py::test_add - assert -1 == 5",
        "FAILED test_calc.py::test_div - ZeroDivisionError: division by zero",
    );
    assert_eq!(ask(&seeded, &other, "cap3", &capture), None);
    assert_eq!(ask(&seeded, pass, "cap3", &capture), None);
    assert_eq!(ask(&seeded, &other, "off", &Settings::default()), None);
    assert_eq!(ask(&seeded, &edit, "off", &Settings::default()), None);
    assert_eq!(ask(&seeded, pass, "off", &Settings::default()), None);
    let count = brain.count().unwrap();
    assert_eq!(count, 6, "one fix captured in all");
}

/// The failure corpus (`pith-testkit/fixtures/recall/<case>/<variant>.txt`, made by running the
/// real tools: `scripts/eval/recall/make_corpus.py`): each case's `recorded` output is what a
/// fix was saved from; `same-*` is that failure again (other values, directory, timings);
/// `sibling-*` another failure of the same tool and file. With the command each ran.
const CORPUS: &[(&str, &str)] = &[
    ("pytest_assert", "python3 -m pytest -q"),
    ("pytest_keyerror", "python3 -m pytest -q"),
    ("pytest_scale", "python3 -m pytest -q"),
    ("cargo_panic", "cargo test"),
    ("cargo_e0308", "cargo build"),
    ("cargo_e0425", "cargo build"),
    ("cargo_clippy", "cargo clippy -- -D warnings"),
    ("node_test", "node --test calc.test.js"),
    ("jest", "npx jest calc.test.js"),
    ("tsc_ts2322", "npx tsc --noEmit a.ts"),
    ("tsc_ts2304", "npx tsc --noEmit a.ts"),
    ("mypy_return", "mypy typed.py"),
    ("ruff_f401", "ruff check lint.py"),
    ("gcc_undeclared", "gcc -c calc.c"),
    ("gcc_semicolon", "gcc -c calc.c"),
];

/// Failures no fix was saved for, run by a verdict command.
const UNRELATED: (&str, &str) = ("python_traceback", "make check");

fn corpus(case: &str, variant: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../pith-testkit/fixtures/recall")
        .join(case)
        .join(format!("{variant}.txt"));
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

#[test]
fn on_the_corpus_a_same_failure_gets_its_own_fix_and_siblings_and_unrelated_ones_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().canonicalize().unwrap();
    std::fs::create_dir(root.join(".git")).unwrap();
    std::fs::write(root.join("calc.py"), "x = 1\n").unwrap();
    let mut brain = open_workspace_brain(Workspace::new(&root).unwrap()).unwrap();
    let mut fixes = Vec::new();
    for (case, _) in CORPUS {
        let headline = extract(&corpus(case, "recorded"))
            .unwrap_or_else(|| panic!("{case}: its recorded output has no headline"));
        let id = brain
            .save(NewMemory {
                kind: Kind::Fix,
                title: format!("Fix for {case}"),
                body: "Details.".into(),
                tags: vec![],
                headline: Some(headline),
                evidence: vec![EvidenceSpec::parse("calc.py").unwrap()],
            })
            .unwrap()
            .memory
            .id;
        fixes.push(id);
    }
    drop(brain);
    let ask = |command: &str, output: &str, session: &str| -> Option<String> {
        let payload = serde_json::json!({
            "session_id": session,
            "cwd": root,
            "hook_event_name": "PostToolUseFailure",
            "tool_name": "Bash",
            "tool_input": {"command": command},
            "error": format!("Exit code 1\n{output}"),
        });
        recall::recall(
            payload.to_string().as_bytes(),
            &Settings::default(),
            &mut opener,
        )
        .map(|n| n.text)
    };
    let named = |note: &Option<String>| -> Vec<String> {
        fixes
            .iter()
            .filter(|id| note.as_deref().is_some_and(|n| n.contains(id.as_str())))
            .cloned()
            .collect()
    };
    let (mut same, mut same_right, mut siblings, mut siblings_noted) = (0, 0, 0, 0);
    let mut misses = Vec::new();
    for (i, (case, command)) in CORPUS.iter().enumerate() {
        for variant in ["same-1", "same-2", "sibling-1", "sibling-2"] {
            let note = ask(
                command,
                &corpus(case, variant),
                &format!("{case}-{variant}"),
            );
            let got = named(&note);
            if variant.starts_with("same") {
                same += 1;
                if got == [fixes[i].clone()] {
                    same_right += 1;
                } else {
                    misses.push(format!("{case}/{variant}: {note:?}"));
                }
            } else {
                siblings += 1;
                if note.is_some() {
                    siblings_noted += 1;
                    misses.push(format!("{case}/{variant}: {note:?}"));
                }
            }
        }
    }
    let (case, command) = UNRELATED;
    let mut unrelated_noted = 0;
    for variant in ["recorded", "same-1", "same-2", "sibling-1", "sibling-2"] {
        let note = ask(
            command,
            &corpus(case, variant),
            &format!("{case}-{variant}"),
        );
        if note.is_some() {
            unrelated_noted += 1;
            misses.push(format!("{case}/{variant}: {note:?}"));
        }
    }
    let report = format!(
        "same failures with their own fix and nothing else: {same_right} of {same}; \
         siblings noted: {siblings_noted} of {siblings}; unrelated noted: {unrelated_noted} \
         of 5\n{}",
        misses.join("\n")
    );
    // The figures, for the record (`--nocapture` shows them).
    println!("{report}");
    assert!(same_right * 10 >= same * 9, "{report}");
    assert_eq!(siblings_noted, 0, "{report}");
    assert_eq!(unrelated_noted, 0, "{report}");
}
