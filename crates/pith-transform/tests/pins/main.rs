//! Tests of the `pins` stage: every rule on each wire, real captures with a pin in their rules
//! file, cache stability over multi-turn sessions, and generated bodies.
#![expect(
    clippy::expect_used,
    reason = "test harness: a panic is the failure report"
)]

mod captures;
mod props;
mod rules;

use http::HeaderMap;
use pith_transform::pins::{LocalAnswer, PinsStage};
use pith_transform::{Edit, Outcome, Request, Splice, Stage, apply_splices};
use pith_wire::Wire;
use serde_json::Value;

fn path_of(wire: Wire) -> &'static str {
    match wire {
        Wire::AnthropicMessages => "/v1/messages",
        Wire::ChatCompletions => "/v1/chat/completions",
        Wire::Responses => "/v1/responses",
    }
}

fn outcome(wire: Wire, body: &str) -> Outcome {
    let headers = HeaderMap::new();
    PinsStage::new()
        .apply(&Request {
            wire,
            path: path_of(wire),
            headers: &headers,
            body: body.as_bytes(),
        })
        .expect("the pins stage never errors")
}

/// The edit, which must be one.
fn edit(wire: Wire, body: &str) -> Edit {
    match outcome(wire, body) {
        Outcome::Edited(edit) => edit,
        Outcome::Unchanged(reason) => panic!("expected an edit, got unchanged ({reason})"),
    }
}

/// The reason, which must be one.
fn unchanged(wire: Wire, body: &str) -> &'static str {
    match outcome(wire, body) {
        Outcome::Unchanged(reason) => reason,
        Outcome::Edited(edit) => panic!("expected unchanged, got {edit:?}"),
    }
}

/// The body upstream gets.
fn rewritten(wire: Wire, body: &str) -> String {
    let out = apply_splices(body.as_bytes(), &edit(wire, body).splices).expect("splices apply");
    let out = String::from_utf8(out).expect("utf-8");
    serde_json::from_str::<Value>(&out).expect("the rewritten body is JSON");
    out
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).expect("JSON")
}

fn answer(wire: Wire, body: &str) -> Option<LocalAnswer> {
    answer_at(wire, path_of(wire), body)
}

fn answer_at(wire: Wire, path: &str, body: &str) -> Option<LocalAnswer> {
    let headers = HeaderMap::new();
    PinsStage::new().answer(&Request {
        wire,
        path,
        headers: &headers,
        body: body.as_bytes(),
    })
}

/// The splice that adds the pin block, and the rest.
fn split_block(edit: &Edit) -> (Option<&Splice>, Vec<&Splice>) {
    let (block, rest): (Vec<&Splice>, Vec<&Splice>) = edit
        .splices
        .iter()
        .partition(|s| s.replacement.contains("<pith-pins>"));
    assert!(block.len() <= 1, "one pin block at most: {block:?}");
    (block.first().copied(), rest)
}

/// Every byte outside the pin block is what the client sent, command lines aside: every other
/// edit only removes bytes or moves a cache marker.
fn assert_only_removals_besides_the_block(edit: &Edit) {
    let (_, rest) = split_block(edit);
    for s in &rest {
        assert!(
            s.replacement.is_empty() || s.replacement.starts_with(",\"cache_control\":"),
            "an edit other than a removal or a marker move: {s:?}"
        );
    }
}
