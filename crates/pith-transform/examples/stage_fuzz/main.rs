//! The transform stages under a property test of generated request bodies: for every body, a
//! stage called directly never panics or errors; an edit's splices apply and give valid JSON
//! (strictly valid when the input was); the pipeline forwards the same bytes (`body: None`)
//! exactly when the stage leaves the request unchanged and the stage's own output otherwise;
//! and the stage applied to its own output leaves it unchanged. The `defer` stage's own rules
//! are checked on every edit too (see `defer_rules`).
//!
//! `cargo run --release -p pith-transform --example stage_fuzz -- --cases 100000`
//! (`--stage pins` for the pins stage, on the same bodies with pin commands put in; `--stage
//! outputs` for the tool-output stage, on the same bodies with long multi-line text put in).
//!
//! Bodies come from four sources, all of the three wires: built from scratch (`bodies.rs`); the
//! real captures changed the way a client could have sent them and written again in a random
//! layout; the captures with bytes damaged (`mutate.rs`); generated bodies with bytes damaged.
//! Every case is a function of `--seed` and its number: `--case N` runs case N alone and
//! writes its body out. A violation writes the body and a report to `--out` (default
//! `target/stage-fuzz`) and makes the run exit non-zero.
#![expect(clippy::print_stdout, reason = "a report printed for a person")]

mod bodies;
mod json;
mod mutate;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::HeaderMap;
use pith_testkit::rng::Rng;
use pith_transform::defer::reason;
use pith_transform::outputs::{OutputsOptions, OutputsStage};
use pith_transform::{
    DeferOptions, DeferStage, Edit, Outcome, PinsStage, Pipeline, Request, SearchVariant, Stage,
    StageError, StageResult, ToolRanker, ToolText, apply_splices,
};
use pith_wire::Wire;
use serde_json::Value;
use serde_json::value::RawValue;

use json::J;

const DEFAULT_SEED: u64 = 0x7069_7468_f022_2510;
const PROGRESS_EVERY: u64 = 10_000;
/// Violations written out in full; later ones are only counted.
const WRITE_AT_MOST: u64 = 50;

/// The few draws the generators need, over the test kit's deterministic generator.
trait RngExt {
    /// Uniform in `[0, 1)`.
    fn unit(&mut self) -> f64;
    fn chance(&mut self, p: f64) -> bool;
    /// Uniform in `lo..hi` (`lo` when the range is empty).
    fn range(&mut self, lo: usize, hi: usize) -> usize;
    fn one<'a, T>(&mut self, items: &'a [T]) -> &'a T;
}

impl RngExt for Rng {
    fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && self.unit() < p
    }
    fn range(&mut self, lo: usize, hi: usize) -> usize {
        if hi <= lo {
            lo
        } else {
            lo + self.below(hi - lo)
        }
    }
    fn one<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

struct Args {
    cases: u64,
    seed: u64,
    case: Option<u64>,
    out: PathBuf,
    sabotage: bool,
    /// `defer` (default) or `pins`.
    stage: String,
}

fn number(text: &str) -> Result<u64, String> {
    let parsed = match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(&hex.replace('_', ""), 16),
        None => text.replace('_', "").parse(),
    };
    parsed.map_err(|e| format!("{text}: {e}"))
}

fn args() -> Result<Args, String> {
    let mut args = Args {
        cases: 100_000,
        seed: DEFAULT_SEED,
        case: None,
        out: PathBuf::from("target/stage-fuzz"),
        sabotage: false,
        stage: "defer".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        match flag.as_str() {
            "--cases" => args.cases = number(&value()?)?,
            "--seed" => args.seed = number(&value()?)?,
            "--case" => args.case = Some(number(&value()?)?),
            "--out" => args.out = PathBuf::from(value()?),
            "--sabotage" => args.sabotage = true,
            "--stage" => {
                args.stage = value()?;
                if !["defer", "pins", "outputs"].contains(&args.stage.as_str()) {
                    return Err(format!(
                        "--stage {}: use defer, pins or outputs",
                        args.stage
                    ));
                }
            }
            "-h" | "--help" => {
                return Err(
                    "usage: stage_fuzz [--cases N] [--seed S] [--case N] [--out DIR] [--sabotage] \
                     [--stage defer|pins|outputs]"
                        .into(),
                );
            }
            other => return Err(format!("unknown argument {other} (try --help)")),
        }
    }
    Ok(args)
}

/// splitmix64 of the run's seed and the case number: each case has its own stream.
fn case_seed(seed: u64, case: u64) -> u64 {
    let mut z = seed ^ case.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A real capture, as bytes and as a tree to change.
struct Capture {
    id: String,
    wire: Wire,
    bytes: Vec<u8>,
    tree: J,
}

fn load_corpus() -> Result<Vec<Capture>, String> {
    let mut corpus = Vec::new();
    for c in pith_testkit::fixtures::captures().map_err(|e| e.to_string())? {
        let path = c.path.split('?').next().unwrap_or_default();
        let Some(wire) = Wire::from_path(path) else {
            continue;
        };
        let tree: J = serde_json::from_slice(&c.body).map_err(|e| format!("{}: {e}", c.id()))?;
        corpus.push(Capture {
            id: c.id(),
            wire,
            bytes: c.body.to_vec(),
            tree,
        });
    }
    if corpus.is_empty() {
        return Err("no captures".into());
    }
    Ok(corpus)
}

const WIRES: [Wire; 3] = [
    Wire::AnthropicMessages,
    Wire::Responses,
    Wire::ChatCompletions,
];

/// One generated request.
struct Case {
    source: &'static str,
    wire: Wire,
    body: Vec<u8>,
    /// Where it came from: capture, mutations, a wire it was sent on that is not its own.
    note: String,
}

fn generate(rng: &mut Rng, corpus: &[Capture]) -> Case {
    let synthetic_wire = |rng: &mut Rng| match rng.below(100) {
        0..=43 => Wire::AnthropicMessages,
        44..=83 => Wire::Responses,
        _ => Wire::ChatCompletions,
    };
    let mut case = match rng.below(100) {
        0..=49 => {
            let wire = synthetic_wire(rng);
            let tree = bodies::body(rng, wire);
            let style = json::Style::random(rng);
            Case {
                source: "generated",
                wire,
                body: json::write(&tree, style, rng).into_bytes(),
                note: format!("{style:?}"),
            }
        }
        50..=69 => {
            let capture = rng.one(corpus);
            let tree = bodies::change_capture(rng, capture.tree.clone(), capture.wire);
            let style = json::Style::random(rng);
            Case {
                source: "capture changed",
                wire: capture.wire,
                body: json::write(&tree, style, rng).into_bytes(),
                note: format!("{} {style:?}", capture.id),
            }
        }
        70..=84 => {
            let capture = rng.one(corpus);
            let mut body = capture.bytes.clone();
            let done = if rng.chance(0.1) {
                Vec::new()
            } else {
                mutate::mutate(rng, &mut body)
            };
            Case {
                source: "capture bytes",
                wire: capture.wire,
                body,
                note: format!("{} mutations {done:?}", capture.id),
            }
        }
        _ => {
            let wire = synthetic_wire(rng);
            let tree = bodies::body(rng, wire);
            let style = json::Style::random(rng);
            let mut body = json::write(&tree, style, rng).into_bytes();
            let done = mutate::mutate(rng, &mut body);
            Case {
                source: "generated bytes",
                wire,
                body,
                note: format!("{style:?} mutations {done:?}"),
            }
        }
    };
    if rng.chance(0.03) {
        let shape = case.wire;
        case.wire = *rng.one(&WIRES);
        if case.wire != shape {
            case.note
                .push_str(&format!(" (a {shape} body sent as {})", case.wire));
        }
    }
    case
}

/// Scores no ranker should give, and one of the wrong length: the stage must rank anyway.
struct OddRanker(usize);

impl ToolRanker for OddRanker {
    fn scores(&self, task: &str, tools: &[ToolText<'_>]) -> Option<Vec<f64>> {
        let hash = |text: &str| {
            text.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
            })
        };
        match self.0 {
            0 => None,
            1 => Some(vec![1.0; tools.len() + 1]),
            2 => Some(vec![f64::NAN; tools.len()]),
            3 => Some(
                tools
                    .iter()
                    .map(|t| match hash(t.definition) % 5 {
                        0 => f64::NAN,
                        1 => f64::INFINITY,
                        2 => f64::NEG_INFINITY,
                        3 => -0.0,
                        h => h as f64 * 1e300,
                    })
                    .collect(),
            ),
            _ => Some(
                tools
                    .iter()
                    .map(|t| (t.name.len() + t.arguments.len() + task.len()) as f64)
                    .collect(),
            ),
        }
    }
}

/// The defer stage with options drawn for this case, a label for the summary and its options
/// in full for a report.
fn defer_stage(rng: &mut Rng) -> (DeferStage, &'static str, String) {
    let random_options = |rng: &mut Rng| DeferOptions {
        keep_relevant: *rng.one(&[0, 1, 2, 3, 5, 5, 5, 8, 100]),
        small_tool_chars: *rng.one(&[0, 0, 0, 0, 90, 150, 400, 100_000]),
        search: if rng.chance(0.5) {
            SearchVariant::Regex
        } else {
            SearchVariant::Bm25
        },
        min_deferred_chars: *rng.one(&[0, 0, 0, 1, 500, 20_000]),
    };
    match rng.below(20) {
        0..=5 => {
            let options = DeferOptions::default();
            let full = format!("{options:?}");
            (DeferStage::new(options), "defaults", full)
        }
        6..=16 => {
            let options = random_options(rng);
            let full = format!("{options:?}");
            (DeferStage::new(options), "random options", full)
        }
        _ => {
            let mode = rng.below(5);
            let options = random_options(rng);
            let full = format!("{options:?}, OddRanker({mode})");
            let stage = DeferStage::new(options).with_ranker(Arc::new(OddRanker(mode)));
            (stage, "odd ranker", full)
        }
    }
}

/// For `--stage pins`: the body with pin command lines put at the start of some of its
/// strings, and some strings made to start like pith's own answer, so the stage has commands
/// to fold, cut and answer (generated bodies have none).
fn with_pin_commands(rng: &mut Rng, body: &[u8]) -> Vec<u8> {
    const LINES: [&str; 7] = [
        "@pith pin be concise\\n",
        "\\\"@pith pin use tabs\\\"",
        "@pith unpin 1\\n",
        "@pith unpin all\\n",
        "@pith pins",
        "@pith unpin be\\nfix it\\n",
        "@pith ",
    ];
    let mut out = Vec::with_capacity(body.len() + 64);
    let mut rest = body;
    while let Some(at) = memchr::memmem::find(rest, b":\"") {
        out.extend_from_slice(&rest[..at + 2]);
        rest = &rest[at + 2..];
        if rng.chance(0.3) {
            out.extend_from_slice(rng.one(&LINES).as_bytes());
        }
    }
    out.extend_from_slice(rest);
    out
}

/// `--stage outputs`: the body with long multi-line text put at the start of some of its
/// strings (tool outputs among them), lines of a log and a file with JSON escapes in them.
fn with_long_outputs(rng: &mut Rng, body: &[u8]) -> Vec<u8> {
    const LINES: [&str; 6] = [
        r"   12\tfn retry(attempt: u32) -> Duration {\n",
        r"error[E0308]: mismatched types \u00e9\n",
        r"  --> src/lib.rs:4:5\n",
        r"test tests::it_works ... FAILED\n",
        r#"\"quoted\" \\ \t tab\n"#,
        r"src/main.rs:3:    let needle = 1;\n",
    ];
    let mut out = Vec::with_capacity(body.len() * 2);
    let mut rest = body;
    while let Some(at) = memchr::memmem::find(rest, b":\"") {
        out.extend_from_slice(&rest[..at + 2]);
        rest = &rest[at + 2..];
        // A tool output's text most often (Anthropic's `content`, Chat's `content` of a
        // `tool` message, Responses' `output`), long enough to shorten more often than not.
        let output = out.ends_with(b"\"content\":\"") || out.ends_with(b"\"output\":\"");
        if rng.chance(if output { 0.6 } else { 0.1 }) {
            for _ in 0..rng.below(200) + if output { 30 } else { 0 } {
                out.extend_from_slice(rng.one(&LINES).as_bytes());
            }
        }
    }
    out.extend_from_slice(rest);
    out
}

/// `--sabotage`: the defer stage with bugs put in, to see the checks catch them. One edit in
/// three gets a stray comma, one in three forgets the search tool, and one unchanged body in
/// a hundred panics.
struct Sabotaged(DeferStage);

impl Stage for Sabotaged {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn apply(&self, request: &Request<'_>) -> Result<Outcome, StageError> {
        let salt = request.body.len() % 300;
        match self.0.apply(request)? {
            Outcome::Edited(mut edit) => {
                match salt % 3 {
                    0 => {
                        if let Some(s) = edit.splices.first_mut() {
                            s.replacement.push(',');
                        }
                    }
                    1 => {
                        edit.splices.pop();
                    }
                    _ => {}
                }
                Ok(Outcome::Edited(edit))
            }
            Outcome::Unchanged(_) if salt < 3 => panic!("sabotage"),
            unchanged => Ok(unchanged),
        }
    }
}

/// One stage instance, called directly and from a pipeline.
struct Shared(Arc<dyn Stage>);

impl Stage for Shared {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn apply(&self, request: &Request<'_>) -> Result<Outcome, StageError> {
        self.0.apply(request)
    }
}

thread_local! {
    static LAST_PANIC: RefCell<Option<String>> = const { RefCell::new(None) };
}

/// Panics are caught and reported with the case, so the default hook's message is kept for
/// the report instead of printed.
fn install_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        LAST_PANIC.with(|p| *p.borrow_mut() = Some(info.to_string()));
    }));
}

fn last_panic() -> String {
    LAST_PANIC
        .with(|p| p.borrow_mut().take())
        .unwrap_or_else(|| "panic without a message".into())
}

fn path_of(wire: Wire) -> &'static str {
    match wire {
        Wire::AnthropicMessages => "/v1/messages",
        Wire::ChatCompletions => "/v1/chat/completions",
        Wire::Responses => "/v1/responses",
    }
}

/// What serde_json's validator accepts (the pipeline's check; lone surrogates and numbers
/// out of range pass).
fn valid(bytes: &[u8]) -> bool {
    serde_json::from_slice::<serde::de::IgnoredAny>(bytes).is_ok()
}

/// Valid and readable as values: no lone surrogate, every number in range.
fn strictly_valid(bytes: &[u8]) -> bool {
    serde_json::from_slice::<Value>(bytes).is_ok()
}

/// What one case did.
struct Checked {
    /// `None` when the stage panicked or errored.
    outcome: Option<Outcome>,
    violations: Vec<String>,
    stage_time: Duration,
    valid: bool,
    strictly_valid: bool,
}

/// Every property, for one body.
fn check(stage: &Arc<dyn Stage>, wire: Wire, body: &[u8]) -> Checked {
    let headers = HeaderMap::new();
    let request = Request {
        wire,
        path: path_of(wire),
        headers: &headers,
        body,
    };
    let mut violations = Vec::new();
    let started = Instant::now();
    let first = catch_unwind(AssertUnwindSafe(|| stage.apply(&request)));
    let stage_time = started.elapsed();
    let input_valid = valid(body);
    let input_strict = input_valid && strictly_valid(body);
    let mut checked = Checked {
        outcome: None,
        violations: Vec::new(),
        stage_time,
        valid: input_valid,
        strictly_valid: input_strict,
    };
    let outcome = match first {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(e)) => {
            checked.violations.push(format!("stage error: {e}"));
            return checked;
        }
        Err(_) => {
            checked
                .violations
                .push(format!("stage panicked: {}", last_panic()));
            return checked;
        }
    };

    let direct = match &outcome {
        Outcome::Unchanged(_) => None,
        Outcome::Edited(edit) => edited(stage, &request, edit, input_strict, &mut violations),
    };

    // The pipeline forwards the same bytes exactly when the stage changes nothing.
    let pipeline = Pipeline::new().with_stage(Box::new(Shared(Arc::clone(stage))));
    let result = pipeline.run(&request);
    match (&outcome, &result.body, &direct) {
        (Outcome::Unchanged(_), None, _) => {
            if !result.header_edits.is_empty() {
                violations.push("pipeline: header edits for an unchanged request".into());
            }
        }
        (Outcome::Unchanged(r), Some(_), _) => {
            violations.push(format!(
                "pipeline: a body for a request the stage left ({r})"
            ));
        }
        (Outcome::Edited(_), Some(piped), Some(out)) if piped == out => {}
        (Outcome::Edited(_), Some(_), _) => {
            violations.push("pipeline: a body other than the stage's own edit".into());
        }
        (Outcome::Edited(_), None, _) => {
            violations.push("pipeline: dropped the stage's edit".into());
        }
    }
    if let Some(piped) = &result.body
        && !valid(piped)
    {
        violations.push("pipeline: forwarded invalid JSON".into());
    }
    // The pipeline's check remembers the values that parsed: the same request again comes out
    // the same (a broken edit refused again, never taken for one remembered).
    let again = pipeline.run(&request);
    if again.body != result.body || again.failures().count() != result.failures().count() {
        violations.push("pipeline: the same request run again came out otherwise".into());
    }
    for (name, error) in result.failures() {
        violations.push(format!("pipeline: stage {name} failed: {error}"));
    }
    match (result.reports.first().map(|r| &r.result), &outcome) {
        (Some(StageResult::Unchanged(a)), Outcome::Unchanged(b)) if a == b => {}
        (Some(StageResult::Applied(facts)), Outcome::Edited(edit)) if *facts == edit.facts => {}
        (Some(StageResult::Failed(_)), _) => {}
        (report, _) => violations.push(format!(
            "pipeline: report {report:?} disagrees with the stage ({outcome:?})"
        )),
    }

    checked.outcome = Some(outcome);
    checked.violations = violations;
    checked
}

/// The checks of an edit; its output when the splices applied.
fn edited(
    stage: &Arc<dyn Stage>,
    request: &Request<'_>,
    edit: &Edit,
    input_strict: bool,
    violations: &mut Vec<String>,
) -> Option<Vec<u8>> {
    let body = request.body;
    if !valid(body) {
        violations.push("edited a body that is not valid JSON".into());
    }
    if edit.splices.is_empty() {
        violations.push("an edit without splices".into());
    }
    let out = match apply_splices(body, &edit.splices) {
        Ok(out) => out,
        Err(e) => {
            violations.push(format!("splices do not apply: {e}"));
            return None;
        }
    };
    if !valid(&out) {
        violations.push("output is not valid JSON".into());
        return Some(out);
    }
    let output_strict = strictly_valid(&out);
    if input_strict && !output_strict {
        violations.push("output is not strictly valid JSON though the input was".into());
    }
    let mut headers = HeaderMap::new();
    for header in &edit.headers {
        if !header.apply(&mut headers) {
            violations.push(format!("header edit does not apply: {header:?}"));
        }
    }
    if stage.name() == "defer" {
        violations.extend(defer_rules(
            request.wire,
            body,
            &out,
            edit,
            input_strict && output_strict,
        ));
    }
    // Twice is once.
    let again = Request {
        body: &out,
        ..*request
    };
    match catch_unwind(AssertUnwindSafe(|| stage.apply(&again))) {
        Ok(Ok(Outcome::Unchanged(r))) => {
            if stage.name() == "defer" && r != reason::ALREADY_DEFERRING {
                violations.push(format!(
                    "second pass: unchanged as {r}, not already_deferring"
                ));
            }
        }
        Ok(Ok(Outcome::Edited(second))) => {
            let same = apply_splices(&out, &second.splices).is_ok_and(|twice| twice == out);
            if !same {
                violations.push(format!("second pass edited the output again: {second:?}"));
            }
        }
        Ok(Err(e)) => violations.push(format!("second pass: stage error: {e}")),
        Err(_) => violations.push(format!("second pass panicked: {}", last_panic())),
    }
    Some(out)
}

#[derive(serde::Deserialize)]
struct TopTools<'a> {
    #[serde(borrow)]
    tools: &'a RawValue,
}

/// The defer stage's own rules (`pith_transform::defer`'s module docs; ARCHITECTURE.md,
/// "Transforms"): it edits only the `tools` array; it adds one tool, the provider's search
/// tool, last; each client tool is as it was or the same with `defer_loading: true` added and
/// `cache_control` removed; it never defers every tool and never leaves `cache_control` on a
/// deferred one; its facts count what it deferred.
fn defer_rules(wire: Wire, body: &[u8], out: &[u8], edit: &Edit, strict: bool) -> Vec<String> {
    let mut violations = Vec::new();
    let span = std::str::from_utf8(body).ok().and_then(|text| {
        let top: TopTools<'_> = serde_json::from_str(text).ok()?;
        pith_transform::span_of(text, top.tools)
    });
    match span {
        Some(span) => {
            for s in &edit.splices {
                if s.range.start < span.start || s.range.end > span.end {
                    violations.push(format!(
                        "splice {:?} outside the tools array {span:?}",
                        s.range
                    ));
                }
            }
        }
        None => violations.push("edited a body without a readable tools array".into()),
    }
    if !strict {
        return violations;
    }
    let (Ok(before), Ok(after)) = (
        serde_json::from_slice::<Value>(body),
        serde_json::from_slice::<Value>(out),
    ) else {
        return violations;
    };
    let (Some(before), Some(after)) = (before["tools"].as_array(), after["tools"].as_array())
    else {
        violations.push("tools is not an array before or after".into());
        return violations;
    };
    if after.len() != before.len() + 1 {
        violations.push(format!("{} tools became {}", before.len(), after.len()));
        return violations;
    }
    let mut deferred = 0usize;
    for (i, (a, b)) in before.iter().zip(after).enumerate() {
        if a == b {
            continue;
        }
        // Only a tool pith deferred must lose its breakpoint: one the client sent deferred
        // (`defer_loading` of its own) is the client's, left as it came.
        if b.get("cache_control").is_some() {
            violations.push(format!("cache_control on a deferred tool: {b}"));
        }
        let (mut a, mut b) = (a.clone(), b.clone());
        let marked = b.get("defer_loading") == Some(&Value::Bool(true));
        if let (Some(a), Some(b)) = (a.as_object_mut(), b.as_object_mut()) {
            a.remove("cache_control");
            b.remove("defer_loading");
        }
        if !marked || a != b {
            violations.push(format!("tool {i} changed beyond deferral: {b}"));
        }
        deferred += usize::from(marked);
    }
    if deferred == before.len() {
        violations.push("every client tool deferred".into());
    }
    let search = after
        .last()
        .and_then(|t| t.get("type"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let expected = match wire {
        Wire::AnthropicMessages => search.starts_with("tool_search_tool_"),
        _ => search == "tool_search",
    };
    if !expected {
        violations.push(format!("last tool is not the search tool: {search:?}"));
    }
    let fact = edit
        .facts
        .iter()
        .find(|f| f.name == "tools")
        .map(|f| f.value);
    if fact != Some(deferred as u64) {
        violations.push(format!("fact tools={fact:?}, deferred {deferred}"));
    }
    violations
}

#[derive(Default)]
struct Row {
    cases: u64,
    valid: u64,
    strictly_valid: u64,
    edited: u64,
    unchanged: u64,
    violations: u64,
    bytes: u64,
    reasons: BTreeMap<&'static str, u64>,
}

impl Row {
    fn add(&mut self, checked: &Checked, bytes: usize) {
        self.cases += 1;
        self.valid += u64::from(checked.valid);
        self.strictly_valid += u64::from(checked.strictly_valid);
        match &checked.outcome {
            Some(Outcome::Edited(_)) => self.edited += 1,
            Some(Outcome::Unchanged(r)) => {
                self.unchanged += 1;
                *self.reasons.entry(r).or_default() += 1;
            }
            None => {}
        }
        self.violations += u64::from(!checked.violations.is_empty());
        self.bytes += bytes as u64;
    }
}

fn write_violation(
    args: &Args,
    case_no: u64,
    case: &Case,
    options: &str,
    violations: &[String],
) -> Result<PathBuf, String> {
    std::fs::create_dir_all(&args.out).map_err(|e| format!("{}: {e}", args.out.display()))?;
    let stem = format!("seed-{:#x}-case-{case_no}", args.seed);
    let body_path = args.out.join(format!("{stem}.json"));
    std::fs::write(&body_path, &case.body).map_err(|e| format!("{}: {e}", body_path.display()))?;
    let report = format!(
        "seed {:#x} case {case_no}\nsource: {}\nwire: {}\nstage options: {options}\nnote: {}\n\
         body: {} ({} bytes)\nreproduce: cargo run --release -p pith-transform --example \
         stage_fuzz -- --seed {:#x} --case {case_no}{}\n\n{}\n",
        args.seed,
        case.source,
        case.wire,
        case.note,
        body_path.display(),
        case.body.len(),
        args.seed,
        if args.sabotage { " --sabotage" } else { "" },
        violations.join("\n")
    );
    let report_path = args.out.join(format!("{stem}.txt"));
    std::fs::write(&report_path, report).map_err(|e| format!("{}: {e}", report_path.display()))?;
    Ok(report_path)
}

fn main() -> Result<ExitCode, String> {
    let args = args()?;
    let corpus = load_corpus()?;
    install_panic_hook();
    let (first, end) = match args.case {
        Some(n) => (n, n + 1),
        None => (0, args.cases),
    };
    println!(
        "stage_fuzz: seed {:#x}, cases {first}..{end}, {} captures, stage {}",
        args.seed,
        corpus.len(),
        args.stage
    );
    let started = Instant::now();
    let mut rows: BTreeMap<(&'static str, &'static str), Row> = BTreeMap::new();
    let mut configs: BTreeMap<&'static str, Row> = BTreeMap::new();
    let mut total = Row::default();
    let mut stage_total = Duration::ZERO;
    let mut slowest = (Duration::ZERO, 0u64, 0usize);
    let mut digest = 0xcbf2_9ce4_8422_2325u64;
    for case_no in first..end {
        let mut rng = Rng::new(case_seed(args.seed, case_no));
        let mut case = generate(&mut rng, &corpus);
        let (stage, config, options): (Arc<dyn Stage>, &'static str, String) =
            if args.stage == "pins" {
                case.body = with_pin_commands(&mut rng, &case.body);
                (Arc::new(PinsStage::new()), "pins", String::new())
            } else if args.stage == "outputs" {
                case.body = with_long_outputs(&mut rng, &case.body);
                let options = OutputsOptions {
                    min_chars: rng.below(6_000),
                    originals_kept: rng.chance(0.5),
                    ..OutputsOptions::default()
                };
                let described = format!("min_chars {}", options.min_chars);
                (Arc::new(OutputsStage::new(options)), "outputs", described)
            } else {
                let (stage, config, options) = defer_stage(&mut rng);
                let stage: Arc<dyn Stage> = if args.sabotage {
                    Arc::new(Sabotaged(stage))
                } else {
                    Arc::new(stage)
                };
                (stage, config, options)
            };
        let checked = check(&stage, case.wire, &case.body);

        for &b in case.body.iter().chain(case.wire.as_str().as_bytes()) {
            digest = (digest ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        rows.entry((case.source, case.wire.as_str()))
            .or_default()
            .add(&checked, case.body.len());
        configs
            .entry(config)
            .or_default()
            .add(&checked, case.body.len());
        total.add(&checked, case.body.len());
        stage_total += checked.stage_time;
        if checked.stage_time > slowest.0 {
            slowest = (checked.stage_time, case_no, case.body.len());
        }
        if args.case.is_some() {
            let path = args
                .out
                .join(format!("seed-{:#x}-case-{case_no}.json", args.seed));
            std::fs::create_dir_all(&args.out).map_err(|e| e.to_string())?;
            std::fs::write(&path, &case.body).map_err(|e| e.to_string())?;
            let outcome = match &checked.outcome {
                Some(Outcome::Unchanged(r)) => format!("unchanged ({r})"),
                Some(Outcome::Edited(edit)) => {
                    format!(
                        "edited: {} splices, facts {:?}",
                        edit.splices.len(),
                        edit.facts
                    )
                }
                None => "none (the stage failed)".into(),
            };
            println!(
                "case {case_no}: {} {}, {} bytes, {}\n  stage options: {options}\n  \
                 outcome: {outcome}\n  body: {}",
                case.source,
                case.wire,
                case.body.len(),
                case.note,
                path.display()
            );
            for v in &checked.violations {
                println!("  violation: {v}");
            }
        }
        if !checked.violations.is_empty() {
            let written = if total.violations <= WRITE_AT_MOST {
                write_violation(&args, case_no, &case, &options, &checked.violations).map_or_else(
                    |e| format!("(not written: {e})"),
                    |p| p.display().to_string(),
                )
            } else {
                "(not written)".into()
            };
            println!(
                "VIOLATION case {case_no} ({} {}, {config}): {} -> {written}",
                case.source,
                case.wire,
                checked.violations.join("; ")
            );
        }
        let done = case_no + 1 - first;
        if done % PROGRESS_EVERY == 0 {
            println!(
                "{done:>8} cases {:>7.1} s  edited {:>6}  unchanged {:>6}  violations {}",
                started.elapsed().as_secs_f64(),
                total.edited,
                total.unchanged,
                total.violations
            );
        }
    }
    let elapsed = started.elapsed();

    println!();
    println!(
        "{:<16} {:<10} {:>7} {:>7} {:>7} {:>7} {:>9} {:>10} {:>8}",
        "source", "wire", "cases", "valid", "strict", "edited", "unchanged", "violations", "avg KB"
    );
    let print_row = |source: &str, wire: &str, r: &Row| {
        println!(
            "{source:<16} {wire:<10} {:>7} {:>7} {:>7} {:>7} {:>9} {:>10} {:>8.1}",
            r.cases,
            r.valid,
            r.strictly_valid,
            r.edited,
            r.unchanged,
            r.violations,
            r.bytes as f64 / r.cases.max(1) as f64 / 1024.0
        );
    };
    for ((source, wire), r) in &rows {
        print_row(source, wire, r);
    }
    print_row("all", "", &total);
    println!();
    for (config, r) in &configs {
        println!(
            "stage options {config:<15} cases {:>7}  edited {:>6}  unchanged {:>6}",
            r.cases, r.edited, r.unchanged
        );
    }
    let reasons = |r: &Row| -> String {
        let mut by_count: Vec<_> = r.reasons.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let list: Vec<String> = by_count.iter().map(|(r, n)| format!("{r} {n}")).collect();
        list.join(", ")
    };
    println!();
    println!("unchanged, by reason:");
    for ((source, wire), r) in &rows {
        println!("  {source} {wire}: {}", reasons(r));
    }
    println!("  all: {}", reasons(&total));
    println!(
        "stage time: {:.1} s in all, mean {:.1} us, slowest {:.2} ms (case {}, {} bytes)",
        stage_total.as_secs_f64(),
        stage_total.as_secs_f64() * 1e6 / total.cases.max(1) as f64,
        slowest.0.as_secs_f64() * 1e3,
        slowest.1,
        slowest.2
    );
    println!(
        "{} cases in {:.1} s ({:.0} cases/s); bodies digest {digest:#018x}; violations {}",
        total.cases,
        elapsed.as_secs_f64(),
        total.cases as f64 / elapsed.as_secs_f64().max(1e-9),
        total.violations
    );
    Ok(if total.violations == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
