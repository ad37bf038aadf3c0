//! Tests of the `defer` stage on real captures, synthetic edge cases and generated tool lists.
#![expect(
    clippy::expect_used,
    reason = "test harness: a panic is the failure report"
)]

mod cache_model;
mod captures;
mod props;
mod shapes;
mod sim;

use pith_transform::{Edit, Outcome, apply_splices};
use serde_json::Value;
use serde_json::value::RawValue;

/// Default options without the size threshold, so the rules can be tested on tool lists of any
/// size (the threshold has tests of its own).
fn any_size() -> pith_transform::DeferOptions {
    pith_transform::DeferOptions {
        min_deferred_chars: 0,
        ..pith_transform::DeferOptions::default()
    }
}

/// The edit of an outcome that must be an edit.
fn edit_of(outcome: Outcome, what: &str) -> Edit {
    match outcome {
        Outcome::Edited(edit) => edit,
        Outcome::Unchanged(reason) => panic!("{what}: expected an edit, got unchanged ({reason})"),
    }
}

fn reason_of(outcome: Outcome, what: &str) -> &'static str {
    match outcome {
        Outcome::Unchanged(reason) => reason,
        Outcome::Edited(edit) => panic!("{what}: expected unchanged, got {edit:?}"),
    }
}

fn apply(body: &[u8], edit: &Edit) -> Vec<u8> {
    apply_splices(body, &edit.splices).expect("splices apply")
}

fn fact(edit: &Edit, key: &str) -> usize {
    let fact = edit
        .facts
        .iter()
        .find(|f| f.name == key)
        .unwrap_or_else(|| panic!("fact {key} missing in {:?}", edit.facts));
    usize::try_from(fact.value).expect("fact fits usize")
}

/// Byte range of the top-level `tools` array.
fn tools_span(body: &str) -> std::ops::Range<usize> {
    #[derive(serde::Deserialize)]
    struct Top<'a> {
        #[serde(borrow)]
        tools: &'a RawValue,
    }
    let top: Top<'_> = serde_json::from_str(body).expect("body with tools");
    pith_transform::span_of(body, top.tools).expect("borrowed")
}

/// Names of the tools a body sends loaded (no `defer_loading`), in order.
fn loaded_names(body: &[u8]) -> Vec<String> {
    tools_of(body)
        .iter()
        .filter(|t| t.get("defer_loading").is_none())
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

fn tools_of(body: &[u8]) -> Vec<Value> {
    let value: Value = serde_json::from_slice(body).expect("valid JSON");
    value["tools"].as_array().expect("tools array").clone()
}
