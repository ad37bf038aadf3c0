//! Tool output excerpts (issue 48) through the real proxy: off by default, and switched on, a
//! long Read result from an earlier turn of Claude Code's own request reaches the provider as
//! the excerpt, everything else as the client sent it, and the ledger counts it.

use pith_store::ledger::TransformResult;
use pith_testkit::MockUpstream;
use pith_testkit::fixtures::{self, Capture};
use serde_json::Value;

use crate::support::*;

/// Claude Code 2.1.328's request with its Read's result (a turn follows it) made a long Read of
/// one of pith's files (Read's `N<TAB>line` shape); that block's place.
fn with_long_result() -> (Capture, Vec<u8>, (usize, usize)) {
    let cap = fixtures::captures()
        .unwrap()
        .into_iter()
        .find(|c| c.id() == "claude-code-2.1.328/fix-calc/req006")
        .unwrap();
    let mut body: Value = serde_json::from_slice(&cap.body).unwrap();
    let messages = body["messages"].as_array_mut().unwrap();
    let last_assistant = messages
        .iter()
        .rposition(|m| m["role"] == "assistant")
        .unwrap();
    // The result of its Read (the turn after it is an Edit of what it read).
    let read_id = messages
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .find(|b| b["type"] == "tool_use" && b["name"] == "Read")
        .map(|b| b["id"].clone())
        .expect("a Read");
    let (i, j) = (0..last_assistant)
        .find_map(|i| {
            let blocks = messages[i]["content"].as_array()?;
            let j = blocks.iter().position(|b| b["tool_use_id"] == read_id)?;
            Some((i, j))
        })
        .expect("the Read's result before the last turn");
    let source = include_str!("../../../pith-transform/src/outputs/excerpt.rs");
    let read: Vec<String> = source
        .lines()
        .enumerate()
        .map(|(n, l)| format!("{}\t{l}", n + 1))
        .collect();
    messages[i]["content"][j]["content"] = Value::String(read.join("\n"));
    let bytes = serde_json::to_vec(&body).unwrap();
    (cap, bytes, (i, j))
}

fn send_body(pith: &PithProxy, cap: &Capture, body: Vec<u8>) -> http::HeaderMap {
    let url = format!("{}{}", pith.url(), cap.path);
    let (status, headers, _) = exchange(&cap.method, &url, &capture_headers(cap), body);
    assert_eq!(status, 200);
    headers
}

#[test]
fn tool_outputs_are_whole_by_default() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_DEFER_TOOLS", "0")]);
    let (cap, body, _) = with_long_result();
    send_body(&pith, &cap, body.clone());
    assert!(mock.received()[0].body == body);
}

#[test]
fn switched_on_an_earlier_long_output_goes_as_an_excerpt_and_is_counted() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(
        &mock.url(),
        &[("PITH_DEFER_TOOLS", "0"), ("PITH_TRIM_OUTPUTS", "1")],
    );
    let (cap, body, (i, j)) = with_long_result();
    let headers = send_body(&pith, &cap, body.clone());
    let said = headers["pith-transforms"].to_str().unwrap().to_owned();
    assert!(said.contains("outputs"), "{said}");
    let sent: Value = serde_json::from_slice(&mock.received()[0].body).unwrap();
    let shown = sent["messages"][i]["content"][j]["content"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        shown.starts_with("[pith shortened this tool output: "),
        "{shown}"
    );
    let whole: Value = serde_json::from_slice(&body).unwrap();
    let original = whole["messages"][i]["content"][j]["content"]
        .as_str()
        .unwrap();
    assert!(
        shown.len() * 3 < original.len(),
        "{} of {}",
        shown.len(),
        original.len()
    );
    // Everything else as the client sent it.
    let mut expected = whole.clone();
    expected["messages"][i]["content"][j]["content"] = Value::String(shown);
    assert_eq!(sent, expected);
    let rows = pith.wait_rows(1);
    let stage = rows[0]
        .transforms
        .iter()
        .find(|t| t.stage == "outputs")
        .expect("the stage's entry");
    let TransformResult::Applied(facts) = &stage.result else {
        panic!("{stage:?}");
    };
    let shortened = facts.iter().find(|f| f.name == "outputs").map(|f| f.value);
    assert_eq!(shortened, Some(1), "{facts:?}");
}
