//! The defer stage's own time on the 53-tool OpenCode request, next to a plain JSON parse of
//! the same body (the cheapest thing any body-reading stage must do) for a ratio.
//!
//! `cargo bench -p pith-transform --bench defer`

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, criterion_group, criterion_main};
use http::HeaderMap;
use pith_transform::{DeferOptions, DeferStage, Outcome, Request, Stage};
use pith_wire::Wire;

#[allow(
    clippy::expect_used,
    reason = "a benchmark without its input must stop loudly, not measure nothing"
)]
fn mcp40_body() -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../../shared/captures/opencode-1.18.33/anthropic-agentsmd-mcp40/req007.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("capture {} missing: {e}", path.display()));
    let capture: serde_json::Value = serde_json::from_str(&text).expect("capture is JSON");
    capture["body"]
        .as_str()
        .expect("capture has a body string")
        .as_bytes()
        .to_vec()
}

fn bench(c: &mut Criterion) {
    let body = mcp40_body();
    let headers = HeaderMap::new();
    let request = Request {
        wire: Wire::AnthropicMessages,
        path: "/v1/messages",
        headers: &headers,
        body: &body,
    };
    let stage = DeferStage::new(DeferOptions::default());
    assert!(
        matches!(
            stage.apply(&request),
            Ok(Outcome::Edited(_)) | Ok(Outcome::Unchanged(_))
        ),
        "stage runs on the benchmark body"
    );
    let mut group = c.benchmark_group("defer_mcp40_req007");
    group.bench_function("stage_apply", |b| {
        b.iter(|| stage.apply(black_box(&request)))
    });
    group.bench_function("baseline_serde_json_value_parse", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&body)))
    });
    group.bench_function("baseline_validate_ignored_any", |b| {
        b.iter(|| serde_json::from_slice::<serde::de::IgnoredAny>(black_box(&body)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
