//! The pins stage's added time per request on the largest capture bodies of each client, with
//! no pin (what every request pays: one substring search) and with one (a pin line in the rules
//! file and a session that opened with `@pith pin ...`: the full parse, fold and splices), next
//! to a plain validating parse of the same body for ratios. Wall time and the benchmark
//! thread's CPU time.
//!
//! `cargo bench -p pith-transform --bench pins`

use std::hint::black_box;

use criterion::measurement::Measurement;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use http::HeaderMap;
use pith_testkit::bench::{ThreadCpu, capture_body};
use pith_transform::{Outcome, PinsStage, Request, Stage};
use pith_wire::Wire;

/// The largest body of each client's captures.
const BODIES: [(&str, &str, Wire); 3] = [
    (
        "opencode_mcp40_req007",
        "opencode-1.18.33/anthropic-agentsmd-mcp40/req007",
        Wire::AnthropicMessages,
    ),
    (
        "claude_code_req006",
        "claude-code-2.1.328/fix-calc/req006",
        Wire::AnthropicMessages,
    ),
    (
        "codex_mcp40_req005",
        "codex-0.169.0/responses-agentsmd-mcp40/req005",
        Wire::Responses,
    ),
];

/// The body with a pin: a pin command turn and pith's answer before the first message, and
/// a rule line in the rules file where it has one.
fn with_pin(body: &[u8], wire: Wire) -> Vec<u8> {
    let text = String::from_utf8_lossy(body).into_owned();
    let text = text.replacen(
        "- Never modify test_calc.py.\\n",
        "- Never modify test_calc.py.\\n@pith pin use tabs\\n",
        1,
    );
    let (key, pair) = match wire {
        Wire::Responses => (
            "\"input\":[",
            r#"{"type":"message","role":"user","content":[{"type":"input_text","text":"@pith pin be concise"}]},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"@pith pinned 1: be concise"}]},"#,
        ),
        _ => (
            "\"messages\":[",
            r#"{"role":"user","content":[{"type":"text","text":"@pith pin be concise"}]},{"role":"assistant","content":[{"type":"text","text":"@pith pinned 1: be concise"}]},"#,
        ),
    };
    let at = text.find(key).map_or(0, |i| i + key.len());
    format!("{}{pair}{}", &text[..at], &text[at..]).into_bytes()
}

fn run_group<M: Measurement>(mut group: BenchmarkGroup<'_, M>, body: &[u8], wire: Wire) {
    let headers = HeaderMap::new();
    let stage = PinsStage::new();
    let pinned = with_pin(body, wire);
    let path = match wire {
        Wire::Responses => "/v1/responses",
        Wire::ChatCompletions => "/v1/chat/completions",
        Wire::AnthropicMessages => "/v1/messages",
    };
    let request = |body| Request {
        wire,
        path,
        headers: &headers,
        body,
    };
    assert!(
        matches!(stage.apply(&request(body)), Ok(Outcome::Unchanged(_))),
        "the capture has no pin"
    );
    assert!(
        matches!(stage.apply(&request(&pinned)), Ok(Outcome::Edited(_))),
        "the pinned body is not rewritten"
    );
    group.bench_function("no_pin_stage_apply", |b| {
        b.iter(|| stage.apply(black_box(&request(body))))
    });
    group.bench_function("no_pin_answer", |b| {
        b.iter(|| stage.answer(black_box(&request(body))))
    });
    group.bench_function("with_pin_stage_apply", |b| {
        b.iter(|| stage.apply(black_box(&request(&pinned))))
    });
    group.bench_function("baseline_validate_ignored_any", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(body)))
    });
    group.finish();
}

fn wall(c: &mut Criterion) {
    for (name, id, wire) in BODIES {
        run_group(
            c.benchmark_group(format!("pins_{name}")),
            &capture_body(id),
            wire,
        );
    }
}

fn cpu(c: &mut Criterion<ThreadCpu>) {
    for (name, id, wire) in BODIES {
        run_group(
            c.benchmark_group(format!("pins_{name}_cpu")),
            &capture_body(id),
            wire,
        );
    }
}

criterion_group!(wall_time, wall);
criterion_group! {
    name = cpu_time;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = cpu
}
criterion_main!(wall_time, cpu_time);
