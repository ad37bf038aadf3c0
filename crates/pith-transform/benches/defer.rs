//! The defer stage's own time on a 53-tool OpenCode request it rewrites (req003: later
//! captured turns call tools it defers, which a replay without searches cannot have), on
//! Claude Code's largest captured request (req006, 57 KB: its specialised built-ins deferred,
//! on every Claude Code request) and on a Codex request it must leave alone (Codex sends its
//! own tool search), next to plain JSON parses of the same body (the cheapest things any
//! body-reading stage must do) for ratios. `pipeline_run` is the stage in a pipeline on a
//! session's next request (its edit spliced and checked; the check remembers the `tools` array
//! it made last time), beside `baseline_parse_edited_tools`, the parse of that array the
//! check did on every request before stop 62. Measured
//! twice: wall time (criterion's default) and the benchmark thread's CPU time, which other
//! processes on a shared machine do not inflate.
//!
//! `cargo bench -p pith-transform --bench defer`

use std::hint::black_box;

use criterion::measurement::Measurement;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use http::HeaderMap;
use pith_testkit::bench::{ThreadCpu, capture_body};
use pith_transform::{DeferOptions, DeferStage, Outcome, Pipeline, Request, Stage};
use pith_wire::Wire;

/// The body the stage rewrites (53 tools, 48 deferred).
const MCP40: &str = "opencode-1.18.33/anthropic-agentsmd-mcp40/req003";
/// Claude Code's largest captured body (14 tools, 5 deferred).
const CLAUDE_CODE: &str = "claude-code-2.1.328/fix-calc/req006";
/// A body the stage leaves alone because Codex sends its own tool search (23 tools).
const CODEX: &str = "codex-0.169.0/responses-agentsmd-mcp40/req005";

fn run_group<M: Measurement>(
    mut group: BenchmarkGroup<'_, M>,
    wire: Wire,
    body: &[u8],
    rewrites: bool,
) {
    let headers = HeaderMap::new();
    let request = Request {
        wire,
        path: match wire {
            Wire::Responses => "/v1/responses",
            _ => "/v1/messages",
        },
        headers: &headers,
        body,
    };
    let stage = DeferStage::new(DeferOptions::default());
    assert_eq!(
        matches!(stage.apply(&request), Ok(Outcome::Edited(_))),
        rewrites,
        "the benchmark body is not the case it is meant to measure"
    );
    group.bench_function("stage_apply", |b| {
        b.iter(|| stage.apply(black_box(&request)))
    });
    let pipeline = Pipeline::new().with_stage(Box::new(DeferStage::new(DeferOptions::default())));
    if let Some(edited) = pipeline.run(&request).body {
        group.bench_function("pipeline_run", |b| {
            b.iter(|| pipeline.run(black_box(&request)))
        });
        let Some(tools) = pith_wire::skim::member_forward(&edited, b"tools") else {
            panic!("the edited body has no tools array");
        };
        let tools = tools.value;
        group.bench_function("baseline_parse_edited_tools", |b| {
            b.iter(|| {
                serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&edited[tools.clone()]))
            })
        });
    }
    group.bench_function("baseline_serde_json_value_parse", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(body)))
    });
    group.bench_function("baseline_validate_ignored_any", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(body)))
    });
    group.finish();
}

/// Claude Code's body with its history grown to about `bytes` (each tool result's text made
/// long): every Claude Code request is now planned in full, history included.
fn with_long_history(body: &[u8], bytes: usize) -> Vec<u8> {
    let mut value: serde_json::Value = match serde_json::from_slice(body) {
        Ok(value) => value,
        Err(e) => panic!("the capture is not JSON: {e}"),
    };
    let mut results: Vec<&mut serde_json::Value> = value["messages"]
        .as_array_mut()
        .into_iter()
        .flatten()
        .filter_map(|m| m["content"].as_array_mut())
        .flatten()
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert!(!results.is_empty(), "the capture has no tool results");
    let each = bytes / results.len();
    for result in &mut results {
        result["content"] = serde_json::Value::String("output line\n".repeat(each / 12));
    }
    value.to_string().into_bytes()
}

fn groups<M: Measurement>(c: &mut Criterion<M>, suffix: &str) {
    let claude_code = capture_body(CLAUDE_CODE);
    let cases = [
        (
            "defer_mcp40_req003",
            Wire::AnthropicMessages,
            capture_body(MCP40),
            true,
        ),
        (
            "defer_claude_code_req006",
            Wire::AnthropicMessages,
            claude_code.clone(),
            true,
        ),
        (
            "defer_claude_code_req006_2mb_history",
            Wire::AnthropicMessages,
            with_long_history(&claude_code, 2 << 20),
            true,
        ),
        (
            "defer_codex_mcp40_req005_own_search",
            Wire::Responses,
            capture_body(CODEX),
            false,
        ),
    ];
    for (name, wire, body, rewrites) in cases {
        run_group(
            c.benchmark_group(format!("{name}{suffix}")),
            wire,
            &body,
            rewrites,
        );
    }
}

fn wall(c: &mut Criterion) {
    groups(c, "");
}

fn cpu(c: &mut Criterion<ThreadCpu>) {
    groups(c, "_cpu");
}

criterion_group!(wall_time, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = cpu
}
criterion_main!(wall_time, cpu_time);
