//! The headline of a failure: the most specific error line of a test, build or lint command's
//! output (`FAILED test_calc.py::test_add - assert -1 == 5`, `error[E0308]: mismatched types`),
//! and the term overlap that decides whether two headlines name the same failure.
//!
//! Lines are scored by the shape of the tools' own error lines (pytest, rustc and cargo, tsc,
//! go, jest and vitest, eslint, mypy, ruff, Python tracebacks); the best-scoring line wins, the
//! first of equals (a tool's first error is usually the cause of the rest). Generic lines
//! (`make: *** Error 1`, `error: could not compile`) never count: with nothing more specific
//! there is no headline, and recall stays silent.

use crate::MAX_HEADLINE_CHARS;
use crate::render::clip;

/// Scores below this are too generic to name a failure.
const SPECIFIC: u8 = 5;

/// The most specific error line of `output`, on one line and at most
/// [`MAX_HEADLINE_CHARS`] characters; `None` when no line is specific enough.
pub fn extract(output: &str) -> Option<String> {
    let text = strip_ansi(output);
    let lines: Vec<&str> = text.lines().collect();
    let mut best: Option<(u8, String)> = None;
    for (i, line) in lines.iter().enumerate() {
        let next = lines[i + 1..]
            .iter()
            .find(|l| !l.trim().is_empty())
            .copied();
        if let Some((score, headline)) = score(line, next)
            && score >= SPECIFIC
            && best.as_ref().is_none_or(|(b, _)| score > *b)
        {
            best = Some((score, headline));
        }
    }
    best.map(|(_, h)| {
        clip(
            &h.split_whitespace().collect::<Vec<_>>().join(" "),
            MAX_HEADLINE_CHARS,
        )
    })
    .filter(|h| !h.is_empty())
}

/// A line's score and the headline it gives, if it looks like an error line at all.
fn score(line: &str, next: Option<&str>) -> Option<(u8, String)> {
    let t = line.trim();
    if t.is_empty() {
        return None;
    }
    // pytest's short test summary: `FAILED path::test - reason`, `ERROR path - reason`.
    if let Some(rest) = t.strip_prefix("FAILED ") {
        return Some((if rest.contains(" - ") { 10 } else { 9 }, t.to_owned()));
    }
    if t.starts_with("ERROR ") && t.contains(" - ") {
        return Some((9, t.to_owned()));
    }
    // rustc: `error[E0308]: mismatched types`.
    if t.starts_with("error[E") && t.contains("]: ") {
        return Some((10, t.to_owned()));
    }
    // tsc: `src/a.ts(3,7): error TS2322: ...` or `src/a.ts:3:7 - error TS2322: ...`.
    if let Some(at) = t.find("error TS")
        && t[at + 8..].starts_with(|c: char| c.is_ascii_digit())
    {
        return Some((10, t[at..].to_owned()));
    }
    // A panic: `thread 'tests::adds' panicked at src/lib.rs:10:5:` then its message.
    // (Rust 1.95 adds the thread id: `thread 'main' (22726) panicked at ...`; it is left out.)
    if let Some(rest) = t.strip_prefix("thread '")
        && let Some((name, _)) = rest.split_once('\'')
        && let Some(at) = rest.find(" panicked at ")
    {
        let place = &rest[at + 13..];
        let head = format!("thread '{name}' panicked at {place}");
        return Some(match (place.ends_with(':'), next) {
            (true, Some(message)) => (8, format!("{head} {}", message.trim())),
            _ => (8, head),
        });
    }
    // mypy: `calc.py:3: error: Incompatible return value type ...  [return-value]`.
    if let Some(at) = t.find(": error: ")
        && is_location(&t[..at])
    {
        return Some((9, t[at + 2..].to_owned()));
    }
    // go: `./calc.go:4:2: undefined: foo`, and a test's message `calc_test.go:8: got -1`.
    if let Some((location, message)) = split_location(t)
        && location.contains(".go:")
    {
        return Some((9, format!("{location}: {message}")));
    }
    if let Some(rest) = t.strip_prefix("--- FAIL: ") {
        let name = rest.split(" (").next().unwrap_or(rest);
        return Some((7, format!("--- FAIL: {name}")));
    }
    // jest: `● describe › test name` (the suite-level `● Test suite failed to run` names no
    // test: its reason on the next line is the headline).
    if let Some(rest) = t.strip_prefix("● ") {
        if rest.starts_with("Test suite failed to run") {
            return next.map(|n| (8, n.trim().to_owned()));
        }
        return Some((9, t.to_owned()));
    }
    // vitest: ` FAIL  calc.test.js > add > adds numbers`.
    if let Some(rest) = t.strip_prefix("FAIL ")
        && rest.contains(" > ")
    {
        return Some((9, format!("FAIL {}", rest.trim())));
    }
    // eslint's stylish format: `  3:7  error  'x' is assigned a value but never used  no-unused-vars`.
    if let Some(message) = eslint_error(t) {
        return Some((8, message));
    }
    // ruff: `calc.py:1:8: F401 [*] `os` imported but unused`, or the newer
    // `F401 [*] `os` imported but unused` over ` --> calc.py:1:8`.
    if let Some((location, message)) = split_location(t)
        && starts_with_rule_code(message)
        && is_location(location)
    {
        return Some((8, message.to_owned()));
    }
    if starts_with_rule_code(t) && next.is_some_and(|n| n.trim_start().starts_with("--> ")) {
        return Some((8, t.to_owned()));
    }
    // Python and JavaScript exceptions: `KeyError: 'x'`, `E   AssertionError: ...`,
    // `Error: Cannot find module 'x'`.
    let exception = t.strip_prefix("E ").map_or(t, str::trim_start);
    if let Some((name, _)) = exception.split_once(": ")
        && is_exception_name(name)
    {
        return Some((7, exception.to_owned()));
    }
    if exception != t && exception.starts_with("assert ") {
        return Some((5, exception.to_owned()));
    }
    // rustc's other errors; cargo's and make's summaries are generic.
    if let Some(rest) = t.strip_prefix("error: ") {
        const GENERIC: [&str; 6] = [
            "could not compile",
            "aborting due to",
            "test failed",
            "build failed",
            "process didn't exit successfully",
            "Recipe",
        ];
        let score = if GENERIC.iter().any(|g| rest.starts_with(g)) {
            1
        } else {
            6
        };
        return Some((score, t.to_owned()));
    }
    if t.to_ascii_lowercase().contains("error") {
        return Some((2, t.to_owned()));
    }
    None
}

/// `path:12` or `path:12:5` (no spaces in the path).
fn is_location(text: &str) -> bool {
    let text = text.trim_start_matches("./");
    let mut parts = text.split(':');
    let path = parts.next().unwrap_or("");
    let numbers: Vec<&str> = parts.collect();
    !path.is_empty()
        && !path.contains(char::is_whitespace)
        && path.contains('.')
        && !numbers.is_empty()
        && numbers.len() <= 2
        && numbers
            .iter()
            .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()))
}

/// `location: message` where the location is `path:line[:column]`.
fn split_location(t: &str) -> Option<(&str, &str)> {
    // The location ends at the first `: ` after a digit.
    let mut from = 0;
    while let Some(at) = t[from..].find(": ").map(|i| from + i) {
        if is_location(&t[..at]) {
            return Some((&t[..at], t[at + 2..].trim()));
        }
        from = at + 2;
    }
    None
}

/// `F401 `, `E501 `, `UP035 `: a lint rule's code, then its message.
fn starts_with_rule_code(text: &str) -> bool {
    let letters = text.chars().take_while(char::is_ascii_uppercase).count();
    let digits = text[letters..]
        .chars()
        .take_while(char::is_ascii_digit)
        .count();
    (1..=4).contains(&letters)
        && (2..=4).contains(&digits)
        && text[letters + digits..].starts_with(' ')
}

/// `KeyError`, `ModuleNotFoundError`, `pkg.errors.ConfigError`, `TypeError`, `Error`.
fn is_exception_name(name: &str) -> bool {
    let last = name.rsplit('.').next().unwrap_or(name);
    !name.contains(char::is_whitespace)
        && last.starts_with(|c: char| c.is_ascii_uppercase())
        && (last.ends_with("Error") || last.ends_with("Exception") || last == "Error")
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_')
}

/// `3:7  error  message  rule` -> `error message rule`.
fn eslint_error(t: &str) -> Option<String> {
    let (position, rest) = t.split_once(char::is_whitespace)?;
    let (line, column) = position.split_once(':')?;
    if line.is_empty()
        || column.is_empty()
        || !line.chars().all(|c| c.is_ascii_digit())
        || !column.chars().all(|c| c.is_ascii_digit())
    {
        return None;
    }
    let rest = rest.trim_start();
    rest.strip_prefix("error")
        .filter(|r| r.starts_with(char::is_whitespace))
        .map(|r| format!("error {}", r.trim()))
}

/// `text` without terminal colour and cursor sequences (`ESC [ ... letter`).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            if chars.peek() == Some(&'[') {
                chars.next();
                for n in chars.by_ref() {
                    if n.is_ascii_alphabetic() {
                        break;
                    }
                }
            }
            continue;
        }
        out.push(c);
    }
    out
}

/// The terms overlap is measured over: lowercase runs of letters and digits, with runs of
/// digits alone (line numbers, counts, values) and punctuation left out. `_` separates terms.
pub fn terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for word in text.split(|c: char| !c.is_alphanumeric()) {
        if word.is_empty() || word.chars().all(|c| c.is_numeric()) {
            continue;
        }
        let word = word.to_lowercase();
        if !out.contains(&word) {
            out.push(word);
        }
    }
    out
}

/// Jaccard similarity of two headlines' [`terms`]: shared terms over all terms, 0 when either
/// has none.
pub fn overlap(a: &str, b: &str) -> f64 {
    let (a, b) = (terms(a), terms(b));
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let shared = a.iter().filter(|t| b.contains(t)).count();
    let union = a.len() + b.len() - shared;
    shared as f64 / union as f64
}

/// Two headlines name the same failure at this overlap or more.
pub const SAME_FAILURE: f64 = 0.5;
