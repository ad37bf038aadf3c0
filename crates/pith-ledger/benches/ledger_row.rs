//! What the ledger's writers spend reading one request body, in CPU time of the measuring
//! thread, on real captures: the fingerprint and the history's messages read apart (two
//! parses of the conversation, what the writers did before), against one read
//! (`pith_wire::prompt::derive`) in the same run; and the fingerprint alone (history off); each
//! next to one validating parse of the same body that builds nothing, the ratio's baseline.
//! And the fingerprint of what was sent when a stage changed only the tools (deferral, on
//! every request of a session it defers in): the sent body read whole, against the client's
//! fingerprint with the sent tools spliced in (`Fingerprint::with_tools_of`).
//!
//! Run: `cargo bench -p pith-ledger --bench ledger_row`.
#![expect(clippy::expect_used, reason = "a bench stops loudly on a broken setup")]

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use pith_testkit::bench::{ThreadCpu, capture_body};
use pith_wire::Wire;
use pith_wire::conversation::request_messages;
use pith_wire::fingerprint::Fingerprint;
use pith_wire::prompt::derive;

const BODIES: [(&str, Wire); 4] = [
    (
        "claude-code-2.1.328/fix-calc/req002",
        Wire::AnthropicMessages,
    ),
    (
        "opencode-1.18.33/anthropic-agentsmd-mcp40/req007",
        Wire::AnthropicMessages,
    ),
    (
        "opencode-1.18.33/chat-completions-fix-calc/req007",
        Wire::ChatCompletions,
    ),
    (
        "codex-0.169.0/responses-agentsmd-mcp40/req005",
        Wire::Responses,
    ),
];

/// A late turn of a long session: Claude Code's req002 with its conversation repeated until
/// the body is about 1 MB (what a session grows to; the tools and system prompt stay 45 KB).
fn long_session() -> Vec<u8> {
    let mut body: serde_json::Value =
        serde_json::from_slice(&capture_body(BODIES[0].0)).expect("a capture is JSON");
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let once = body["messages"].to_string().len().max(1);
    let long: Vec<serde_json::Value> = std::iter::repeat_n(messages, (1 << 20) / once + 1)
        .flatten()
        .collect();
    body["messages"] = serde_json::Value::Array(long);
    body.to_string().into_bytes()
}

/// `body` with its tools array cut to its first three and a search tool, as deferral sends
/// it; `None` without tools.
fn tools_deferred(body: &[u8]) -> Option<Vec<u8>> {
    let tools = pith_wire::skim::member_forward(body, b"tools")?.value;
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&body[tools.clone()]).ok()?;
    let search = serde_json::json!({"name": "tool_search", "input_schema": {"type": "object"}});
    let kept: Vec<serde_json::Value> = listed.into_iter().take(3).chain([search]).collect();
    let kept = serde_json::to_vec(&kept).ok()?;
    Some([&body[..tools.start], &kept, &body[tools.end..]].concat())
}

fn reads(c: &mut Criterion<ThreadCpu>) {
    let bodies = BODIES
        .iter()
        .map(|(id, wire)| ((*id).to_owned(), *wire, capture_body(id)))
        .chain(std::iter::once((
            format!("{} repeated", BODIES[0].0),
            Wire::AnthropicMessages,
            long_session(),
        )));
    for (id, wire, body) in bodies {
        let mut group = c.benchmark_group(format!("{id} ({} bytes)", body.len()));
        // The baseline every figure is read against: one validating parse that builds nothing.
        group.bench_function("baseline: a validating parse", |b| {
            b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&body)).is_ok());
        });
        group.bench_function("apart: fingerprint, then messages", |b| {
            b.iter(|| {
                let fingerprint = Fingerprint::of(wire, black_box(&body));
                let messages = request_messages(wire, black_box(&body));
                (fingerprint, messages)
            });
        });
        group.bench_function("one read: both", |b| {
            b.iter(|| derive(wire, black_box(&body), true));
        });
        group.bench_function("fingerprint alone", |b| {
            b.iter(|| derive(wire, black_box(&body), false));
        });
        if let Some(sent) = tools_deferred(&body) {
            let client = Fingerprint::of(wire, &body).expect("a capture's fingerprint");
            group.bench_function("sent fingerprint, tools changed: read whole", |b| {
                b.iter(|| Fingerprint::of(wire, black_box(&sent)));
            });
            group.bench_function("sent fingerprint, tools changed: spliced", |b| {
                b.iter(|| client.with_tools_of(black_box(&body), black_box(&sent)));
            });
        }
        group.finish();
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().with_measurement(ThreadCpu);
    targets = reads
}
criterion_main!(benches);
