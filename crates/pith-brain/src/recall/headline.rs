//! The headline of a failure: the most specific error line of a test, build or lint command's
//! output (`FAILED test_calc.py::test_add - assert -1 == 5`, `error[E0308]: mismatched types`),
//! and the term overlap that decides whether two headlines name the same failure.
//!
//! Lines are scored by the shape of the tools' own error lines (pytest, rustc and cargo, tsc,
//! go, jest and vitest, node's test runner, eslint, mypy, ruff, gcc, Python tracebacks); the
//! best-scoring line wins, the first of equals (a tool's first error is usually the cause of the
//! rest). Generic lines (`make: *** Error 1`, `error: could not compile`, a TAP `error: |-`)
//! never count: with nothing more specific there is no headline, and recall stays silent.
//!
//! A headline says what failed and how: where a tool names the failing test, the error's code
//! or its location, the headline keeps it (`error[E0308]: mismatched types (at src/parse.rs:3:5)`,
//! `● add › adds numbers - expect(received).toBe(expected)`). Two headlines name the same failure
//! when their words overlap by [`SAME_FAILURE`] and everything both of them name agrees
//! ([`named`], [`agree`]): `test_add` is not `test_add_zero`, E0308 in `parse.rs` is not E0308 in
//! `main.rs`, an AssertionError is not a TypeError. Locations are compared by file name only
//! (lines move with every edit, directories with every checkout), and are not words.

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

/// What one tool's recognizer says of a line: `None`, not its kind of line (the next one
/// looks); `Some(None)`, its kind and no error headline; `Some(Some((score, headline)))`.
type Verdict = Option<Option<(u8, String)>>;

/// Each tool's recognizer, in the order they are asked (the first that knows the line
/// decides): the most specific formats first, a bare mention of "error" last.
const RECOGNIZERS: [fn(&str, Option<&str>) -> Verdict; 14] = [
    pytest,
    rustc_coded,
    tsc,
    panic,
    compiler_located,
    tap,
    go,
    jest,
    vitest,
    eslint,
    ruff,
    exception,
    error_prefixed,
    mentions_error,
];

/// A line's score and the headline it gives, if it looks like an error line at all.
fn score(line: &str, next: Option<&str>) -> Option<(u8, String)> {
    let t = line.trim();
    if t.is_empty() {
        return None;
    }
    RECOGNIZERS.iter().find_map(|r| r(t, next)).flatten()
}

/// pytest's short test summary: `FAILED path::test - reason`, `ERROR path - reason`.
fn pytest(t: &str, _: Option<&str>) -> Verdict {
    if let Some(rest) = t.strip_prefix("FAILED ") {
        return Some(Some((
            if rest.contains(" - ") { 10 } else { 9 },
            t.to_owned(),
        )));
    }
    (t.starts_with("ERROR ") && t.contains(" - ")).then(|| Some((9, t.to_owned())))
}

/// rustc: `error[E0308]: mismatched types`, its location on the next line (` --> f:3:5`).
fn rustc_coded(t: &str, next: Option<&str>) -> Verdict {
    (t.starts_with("error[E") && t.contains("]: "))
        .then(|| Some((10, with_location(t, arrow_location(next)))))
}

/// tsc: `src/a.ts(3,7): error TS2322: ...` or `src/a.ts:3:7 - error TS2322: ...`.
fn tsc(t: &str, _: Option<&str>) -> Verdict {
    let at = t.find("error TS")?;
    if !t[at + 8..].starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    let place = tsc_location(t[..at].trim_end_matches([' ', '-', ':']));
    Some(Some((10, with_location(&t[at..], place.as_deref()))))
}

/// A panic: `thread 'tests::adds' panicked at src/lib.rs:10:5:` then its message.
/// (Rust 1.95 adds the thread id: `thread 'main' (22726) panicked at ...`; it is left out.)
fn panic(t: &str, next: Option<&str>) -> Verdict {
    let rest = t.strip_prefix("thread '")?;
    let (name, _) = rest.split_once('\'')?;
    let at = rest.find(" panicked at ")?;
    let place = &rest[at + 13..];
    let head = format!("thread '{name}' panicked at {place}");
    Some(Some(match (place.ends_with(':'), next) {
        (true, Some(message)) => (8, format!("{head} {}", message.trim())),
        _ => (8, head),
    }))
}

/// mypy: `calc.py:3: error: Incompatible return value type ...  [return-value]`; gcc and
/// clang: `calc.c:3:12: error: ...`.
fn compiler_located(t: &str, _: Option<&str>) -> Verdict {
    let at = t.find(": error: ")?;
    is_location(&t[..at]).then(|| Some((9, with_location(&t[at + 2..], Some(&t[..at])))))
}

/// node's test runner (TAP): `not ok 1 - adds numbers`; its `error: |-` names nothing.
fn tap(t: &str, _: Option<&str>) -> Verdict {
    if t == "error: |-" || t == "error: >-" {
        return Some(None);
    }
    let rest = t.strip_prefix("not ok ")?;
    let name = rest
        .trim_start_matches(|c: char| c.is_ascii_digit())
        .trim_start_matches([' ', '-']);
    let name = name.split(" # ").next().unwrap_or(name).trim();
    (!name.is_empty()).then(|| Some((9, format!("not ok - {name}"))))
}

/// go: `./calc.go:4:2: undefined: foo`, a test's message `calc_test.go:8: got -1`, and
/// `--- FAIL: TestAdd (0.00s)`.
fn go(t: &str, _: Option<&str>) -> Verdict {
    if let Some((location, message)) = split_location(t)
        && location.contains(".go:")
    {
        return Some(Some((9, format!("{location}: {message}"))));
    }
    let rest = t.strip_prefix("--- FAIL: ")?;
    let name = rest.split(" (").next().unwrap_or(rest);
    Some(Some((7, format!("--- FAIL: {name}"))))
}

/// jest: `● describe › test name`, the error on the next line: the test and how it failed
/// (the suite-level `● Test suite failed to run` names no test: its reason on the next line is
/// the headline).
fn jest(t: &str, next: Option<&str>) -> Verdict {
    let rest = t.strip_prefix("● ")?;
    if rest.starts_with("Test suite failed to run") {
        return Some(next.map(|n| (8, n.trim().to_owned())));
    }
    Some(Some((
        9,
        match next {
            Some(message) => format!("{t} - {}", message.trim()),
            None => t.to_owned(),
        },
    )))
}

/// vitest: ` FAIL  calc.test.js > add > adds numbers`.
fn vitest(t: &str, _: Option<&str>) -> Verdict {
    let rest = t.strip_prefix("FAIL ")?;
    rest.contains(" > ")
        .then(|| Some((9, format!("FAIL {}", rest.trim()))))
}

/// eslint's stylish format: `  3:7  error  'x' is assigned a value but never used  no-unused-vars`.
fn eslint(t: &str, _: Option<&str>) -> Verdict {
    eslint_error(t).map(|message| Some((8, message)))
}

/// ruff: `calc.py:1:8: F401 [*] `os` imported but unused`, or the newer
/// `F401 [*] `os` imported but unused` over ` --> calc.py:1:8`.
fn ruff(t: &str, next: Option<&str>) -> Verdict {
    if let Some((location, message)) = split_location(t)
        && starts_with_rule_code(message)
        && is_location(location)
    {
        return Some(Some((8, with_location(message, Some(location)))));
    }
    (starts_with_rule_code(t) && next.is_some_and(|n| n.trim_start().starts_with("--> ")))
        .then(|| Some((8, with_location(t, arrow_location(next)))))
}

/// Python and JavaScript exceptions: `KeyError: 'x'`, `E   AssertionError: ...`,
/// `Error: Cannot find module 'x'`; pytest's `E   assert ...`.
fn exception(t: &str, _: Option<&str>) -> Verdict {
    let exception = t.strip_prefix("E ").map_or(t, str::trim_start);
    if let Some((name, _)) = exception.split_once(": ")
        && is_exception_name(name)
    {
        return Some(Some((7, exception.to_owned())));
    }
    (exception != t && exception.starts_with("assert ")).then(|| Some((5, exception.to_owned())))
}

/// rustc's other errors; cargo's and make's summaries are generic.
fn error_prefixed(t: &str, _: Option<&str>) -> Verdict {
    const GENERIC: [&str; 6] = [
        "could not compile",
        "aborting due to",
        "test failed",
        "build failed",
        "process didn't exit successfully",
        "Recipe",
    ];
    let rest = t.strip_prefix("error: ")?;
    let score = if GENERIC.iter().any(|g| rest.starts_with(g)) {
        1
    } else {
        6
    };
    Some(Some((score, t.to_owned())))
}

/// Any other line that says "error".
fn mentions_error(t: &str, _: Option<&str>) -> Verdict {
    t.to_ascii_lowercase()
        .contains("error")
        .then(|| Some((2, t.to_owned())))
}

/// `message (at location)`, or the message alone without a location.
fn with_location(message: &str, location: Option<&str>) -> String {
    match location {
        Some(place) => format!("{} (at {})", message.trim(), place.trim_start_matches("./")),
        None => message.trim().to_owned(),
    }
}

/// The location of a rustc or ruff ` --> path:3:5` line.
fn arrow_location(next: Option<&str>) -> Option<&str> {
    let place = next?.trim_start().strip_prefix("--> ")?.trim();
    is_location(place).then_some(place)
}

/// tsc's `a.ts(3,7)` as `a.ts:3:7` (its `--pretty` form `a.ts:3:7` as it is).
fn tsc_location(text: &str) -> Option<String> {
    let text = text.trim();
    let place = match text.split_once('(') {
        Some((path, rest)) => {
            let numbers = rest.trim_end_matches(')').replace(',', ":");
            format!("{path}:{numbers}")
        }
        None => text.to_owned(),
    };
    is_location(&place).then_some(place)
}

/// What a headline names beside its words; each part `None` when it names none.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Named {
    /// The failing test: pytest's node id, a Rust test's thread name, go's, jest's, vitest's or
    /// node's test name.
    pub test: Option<String>,
    /// The error's code: `E0308`, `TS2322`, mypy's `return-value`, ruff's `F401`.
    pub code: Option<String>,
    /// The file a location points at, by name (`parse.rs`).
    pub file: Option<String>,
    /// The exception's kind: `AssertionError`, `TypeError`, `KeyError`.
    pub kind: Option<String>,
    /// What a compiler's or linter's error is about, the names it quotes in order (`total` in
    /// "cannot find value `total`", `'string'` and `'number'` in a TS2322): `None` for a test's
    /// failure, whose quotes are values (`KeyError: 'title'` is the same failure as
    /// `KeyError: 'name'` with other data).
    pub subjects: Option<Vec<String>>,
}

/// What `headline` names: the test, the code, the file, the exception's kind.
pub fn named(headline: &str) -> Named {
    let h = headline.trim();
    let first_word = |rest: &str| rest.split_whitespace().next().map(str::to_owned);
    let test = if let Some(rest) = h
        .strip_prefix("FAILED ")
        .or_else(|| h.strip_prefix("ERROR "))
    {
        first_word(rest)
    } else if let Some(rest) = h.strip_prefix("thread '") {
        rest.split_once('\'')
            .map(|(name, _)| name.to_owned())
            .filter(|name| name != "main")
    } else if let Some(rest) = h.strip_prefix("--- FAIL: ") {
        first_word(rest)
    } else if let Some(rest) = h.strip_prefix("● ").or_else(|| h.strip_prefix("not ok - ")) {
        Some(rest.split(" - ").next().unwrap_or(rest).trim().to_owned())
    } else {
        h.strip_prefix("FAIL ")
            .filter(|r| r.contains(" > "))
            .map(|rest| rest.trim().to_owned())
    };
    Named {
        test,
        code: code_of(h),
        file: h
            .split_whitespace()
            .map(|w| {
                w.trim_matches(|c: char| "(),;'\"`".contains(c))
                    .trim_end_matches(':')
            })
            .find(|w| is_location(w))
            .and_then(|place| {
                let path = place.split(':').next()?;
                Some(path.rsplit('/').next().unwrap_or(path).to_owned())
            }),
        kind: kind_of(h),
        subjects: subjects_of(h),
    }
}

/// The quoted names of a compiler's or linter's error (an `error...` line, or one with a rule
/// code), location left out.
fn subjects_of(h: &str) -> Option<Vec<String>> {
    let message = h.split(" (at ").next().unwrap_or(h);
    if !(message.starts_with("error") || starts_with_rule_code(message)) {
        return None;
    }
    let mut found = Vec::new();
    let mut chars = message.char_indices();
    while let Some((at, c)) = chars.next() {
        let close = match c {
            '`' => '`',
            '\u{2018}' => '\u{2019}',
            '\'' | '"' => c,
            _ => continue,
        };
        // An apostrophe inside a word (`doesn't`) opens nothing.
        if c == '\'' && message[..at].ends_with(char::is_alphanumeric) {
            continue;
        }
        let start = at + c.len_utf8();
        if let Some(len) = message[start..].find(close) {
            found.push(message[start..start + len].to_owned());
            for _ in message[start..start + len + close.len_utf8()].chars() {
                chars.next();
            }
        }
    }
    Some(found)
}

/// The error code a headline names.
fn code_of(h: &str) -> Option<String> {
    if let Some(at) = h.find("error[") {
        let rest = &h[at + 6..];
        return rest.split_once(']').map(|(code, _)| code.to_owned());
    }
    if let Some(at) = h.find("error TS") {
        let digits: String = h[at + 8..]
            .chars()
            .take_while(char::is_ascii_digit)
            .collect();
        if !digits.is_empty() {
            return Some(format!("TS{digits}"));
        }
    }
    if starts_with_rule_code(h) {
        return h.split_whitespace().next().map(str::to_owned);
    }
    // mypy's `[return-value]` at the end of its message.
    let message = h.split(" (at ").next().unwrap_or(h).trim_end();
    if h.starts_with("error: ")
        && let Some(code) = message
            .strip_suffix(']')
            .and_then(|m| m.rsplit_once('['))
            .map(|(_, c)| c)
        && !code.is_empty()
        && code.chars().all(|c| c.is_ascii_lowercase() || c == '-')
    {
        return Some(code.to_owned());
    }
    None
}

/// The exception's kind a headline names: an exception's name where the reason starts, or an
/// assertion (pytest's `assert x == y` is an AssertionError).
fn kind_of(h: &str) -> Option<String> {
    let reason = h
        .split_once(" - ")
        .map_or(h, |(_, r)| r)
        .trim_start_matches("E ")
        .trim_start();
    if reason.starts_with("assert ") {
        return Some("AssertionError".to_owned());
    }
    let name = reason.split(": ").next().unwrap_or("");
    is_exception_name(name).then(|| name.rsplit('.').next().unwrap_or(name).to_owned())
}

/// Whether everything both namings name is the same.
pub fn agree(a: &Named, b: &Named) -> bool {
    let same = |x: &Option<String>, y: &Option<String>| match (x, y) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    };
    let subjects = match (&a.subjects, &b.subjects) {
        (Some(x), Some(y)) => x == y,
        _ => true,
    };
    same(&a.test, &b.test)
        && same(&a.code, &b.code)
        && same(&a.file, &b.file)
        && same(&a.kind, &b.kind)
        && subjects
}

/// Whether two headlines name the same failure, and how closely: what both name agrees, and
/// their words overlap by [`SAME_FAILURE`], or both name one test (the strongest identity there
/// is: a headline that adds how it failed to the test's name is still that test's failure).
pub fn same_failure(a: &str, b: &str) -> Option<f64> {
    let (na, nb) = (named(a), named(b));
    if !agree(&na, &nb) {
        return None;
    }
    let o = overlap(a, b);
    let one_test = na.test.is_some() && na.test == nb.test;
    (o >= SAME_FAILURE || one_test).then_some(o.max(SAME_FAILURE))
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
/// digits alone (line numbers, counts, values), locations (`(at src/lib.rs:3:5)`, compared by
/// [`agree`] instead) and punctuation left out. `_` separates terms.
pub fn terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let words = text
        .split_whitespace()
        .filter(|w| {
            let bare = w
                .trim_matches(|c: char| "(),;'\"`".contains(c))
                .trim_end_matches(':');
            *w != "(at" && !is_location(bare)
        })
        .flat_map(|w| w.split(|c: char| !c.is_alphanumeric()));
    for word in words {
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
