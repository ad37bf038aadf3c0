//! The tool-output stage's time per request on a long conversation: Claude Code's req006 grown
//! by 150 Read round trips of 8 KB (about 1.3 MB, as the proxy benchmark's long body), each
//! output shortened from the next turn on (the memo warm, as on every request after a session's
//! first through one proxy), and the same conversation with 1 KB outputs (about 190 KB, none
//! long enough: what a session pays that the stage changes nothing in), next to a plain
//! validating parse of each body for ratios. Wall time and the benchmark thread's CPU time.
//! And the excerpt's own cost, paid once per call id: every output of the hand-marked corpus
//! (`pith-testkit/fixtures/outputs`, 52 real outputs, 12k lines) ranked and cut, next to
//! lowercasing their lines (the least the ranking reads them with).
//!
//! `cargo bench -p pith-transform --bench outputs`

use std::hint::black_box;

use criterion::measurement::Measurement;
use criterion::{BenchmarkGroup, Criterion, criterion_group, criterion_main};
use http::HeaderMap;
use pith_testkit::bench::{ThreadCpu, capture_body, grown_conversation};
use pith_testkit::fixtures::output_cases;
use pith_transform::outputs::excerpt::{Query, excerpt, kind_of_call};
use pith_transform::outputs::{OutputsOptions, OutputsStage};
use pith_transform::{Outcome, Request, Stage};
use pith_wire::Wire;

fn bodies() -> [(&'static str, String, bool); 2] {
    let base =
        String::from_utf8_lossy(&capture_body("claude-code-2.1.328/fix-calc/req006")).into_owned();
    [
        ("long_1_3mb", grown_conversation(&base, 150, 8 * 1024), true),
        ("short_outputs", grown_conversation(&base, 150, 1024), false),
    ]
}

fn run_group<M: Measurement>(mut group: BenchmarkGroup<'_, M>, body: &[u8], shortens: bool) {
    let headers = HeaderMap::new();
    let stage = OutputsStage::new(OutputsOptions::default());
    let request = Request {
        wire: Wire::AnthropicMessages,
        path: "/v1/messages",
        headers: &headers,
        body,
    };
    let first = stage.apply(&request);
    assert_eq!(
        matches!(first, Ok(Outcome::Edited(_))),
        shortens,
        "{first:?}"
    );
    group.bench_function("stage_apply", |b| {
        b.iter(|| stage.apply(black_box(&request)))
    });
    // Alternating with Claude Code's own request, which opens with the same message (another
    // session that opens alike, as the proxy benchmark sends them).
    let base = capture_body("claude-code-2.1.328/fix-calc/req006");
    let other = Request {
        body: &base,
        ..request
    };
    group.bench_function("stage_apply_alternating_with_another_session", |b| {
        b.iter(|| {
            let _ = stage.apply(black_box(&other));
            stage.apply(black_box(&request))
        })
    });
    group.bench_function("baseline_validate_ignored_any", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(body)))
    });
    group.finish();
}

/// Every corpus output excerpted for what came after it, as the stage does at its first sight.
fn excerpt_group<M: Measurement>(mut group: BenchmarkGroup<'_, M>) {
    let cases = match output_cases() {
        Ok(cases) => cases,
        Err(e) => panic!("the excerpt corpus in pith-testkit/fixtures/outputs: {e}"),
    };
    let queries: Vec<Query<'_>> = cases
        .iter()
        .map(|case| {
            let mut query = Query::of_call(&case.input);
            query.later_text.push(&case.later.text);
            case.later
                .tool_inputs
                .iter()
                .for_each(|v| query.add_later_input(v));
            query
        })
        .collect();
    group.bench_function("excerpt_every_case", |b| {
        b.iter(|| {
            let mut shown = 0;
            for (case, query) in cases.iter().zip(&queries) {
                let kind = kind_of_call(&case.tool, &case.input);
                shown += excerpt(black_box(&case.output), kind, query).map_or(0, |e| e.shown);
            }
            shown
        })
    });
    group.bench_function("baseline_lowercase_every_line", |b| {
        b.iter(|| {
            let mut bytes = 0;
            for case in &cases {
                for line in black_box(&case.output).split('\n') {
                    bytes += line.to_lowercase().len();
                }
            }
            bytes
        })
    });
    group.finish();
}

fn wall(c: &mut Criterion) {
    excerpt_group(c.benchmark_group("excerpt_corpus"));
    for (name, body, shortens) in bodies() {
        run_group(
            c.benchmark_group(format!("outputs_{name}")),
            body.as_bytes(),
            shortens,
        );
    }
}

fn cpu(c: &mut Criterion<ThreadCpu>) {
    excerpt_group(c.benchmark_group("excerpt_corpus_cpu"));
    for (name, body, shortens) in bodies() {
        run_group(
            c.benchmark_group(format!("outputs_{name}_cpu")),
            body.as_bytes(),
            shortens,
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
