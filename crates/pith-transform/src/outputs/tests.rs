//! The stage on Anthropic conversations: which results it shortens, and that a later turn
//! sends the same bytes.

use serde_json::{Value, json};

use super::*;
use crate::apply_splices;

/// A file of `n` numbered lines as Claude Code's Read shows it, with the retry function at
/// lines 121-123.
fn file(n: usize) -> String {
    (1..=n)
        .map(|i| match i {
            121 => format!("{i}\tfn retry_backoff(attempt: u32) -> Duration {{"),
            122 => format!("{i}\t    Duration::from_millis(100 * attempt as u64)"),
            123 => format!("{i}\t}}"),
            _ => format!("{i}\t    let value_{i} = compute_{i}(input, {i});"),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

const OLD: &str = "fn retry_backoff(attempt: u32) -> Duration {\n    Duration::from_millis(100 * attempt as u64)\n}";

/// The conversation's messages up to `upto` (exclusive): the user's ask, a Read, its result, an
/// Edit of what it read, the Edit's result, one more turn.
fn messages(upto: usize) -> Vec<Value> {
    let all = vec![
        json!({"role": "user", "content": "make the retry backoff exponential"}),
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "Reading the retry module."},
            {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "/w/src/retry.rs"}}
        ]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": file(400)}
        ]}),
        json!({"role": "assistant", "content": [
            {"type": "text", "text": "The backoff is linear."},
            {"type": "tool_use", "id": "toolu_2", "name": "Edit", "input": {
                "file_path": "/w/src/retry.rs", "old_string": OLD,
                "new_string": "fn retry_backoff(attempt: u32) -> Duration {\n    Duration::from_millis(100 << attempt)\n}"}}
        ]}),
        json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": "The file /w/src/retry.rs has been updated."}
        ]}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "Done."}]}),
        json!({"role": "user", "content": "thanks, now run the tests"}),
    ];
    all.into_iter().take(upto).collect()
}

fn body(messages: Vec<Value>) -> String {
    json!({"model": "claude-sonnet-4-5", "max_tokens": 1024, "messages": messages}).to_string()
}

fn apply(stage: &OutputsStage, body: &str) -> Outcome {
    stage
        .apply(&Request {
            wire: Wire::AnthropicMessages,
            path: "/v1/messages",
            headers: &http::HeaderMap::new(),
            body: body.as_bytes(),
        })
        .unwrap()
}

fn edited(body: &str, outcome: &Outcome) -> Value {
    let Outcome::Edited(edit) = outcome else {
        panic!("unchanged: {outcome:?}");
    };
    serde_json::from_slice(&apply_splices(body.as_bytes(), &edit.splices).unwrap()).unwrap()
}

#[test]
fn a_result_rides_whole_in_its_own_turn_and_as_an_excerpt_after() {
    let stage = OutputsStage::new(OutputsOptions::default());
    assert_eq!(
        apply(&stage, &body(messages(3))),
        Outcome::Unchanged(reason::NONE_LONG)
    );
    let later = body(messages(5));
    let outcome = apply(&stage, &later);
    let v = edited(&later, &outcome);
    let shown = v["messages"][2]["content"][0]["content"].as_str().unwrap();
    assert!(
        shown.starts_with("[pith shortened this tool output: "),
        "{shown}"
    );
    for n in 121..=123 {
        let line = file(400).lines().nth(n - 1).unwrap().to_owned();
        assert!(shown.contains(&line), "line {n} missing:\n{shown}");
    }
    assert!(shown.len() * 2 < file(400).len());
    // Everything else as the client sent it.
    let mut original: Value = serde_json::from_str(&later).unwrap();
    original["messages"][2]["content"][0]["content"] = Value::String(shown.to_owned());
    assert_eq!(v, original);
}

#[test]
fn every_later_request_sends_the_same_excerpt() {
    let stage = OutputsStage::new(OutputsOptions::default());
    let fresh = OutputsStage::new(OutputsOptions::default());
    let shown = |stage: &OutputsStage, upto: usize| {
        let b = body(messages(upto));
        edited(&b, &apply(stage, &b))["messages"][2]["content"][0]["content"].clone()
    };
    let first = shown(&stage, 5);
    assert_eq!(shown(&stage, 7), first);
    // A stage that never saw the session (a restart, another instance) makes the same bytes.
    assert_eq!(shown(&fresh, 7), first);
}

#[test]
fn errors_excluded_tools_short_outputs_and_repeated_calls_ride_whole() {
    let stage = OutputsStage::new(OutputsOptions::default());
    let mut m = messages(5);
    m[2]["content"][0]["is_error"] = json!(true);
    assert_eq!(
        apply(&stage, &body(m)),
        Outcome::Unchanged(reason::NONE_LONG)
    );

    let excluding = OutputsStage::new(OutputsOptions {
        excluded_tools: vec!["Read".into()],
        ..OutputsOptions::default()
    });
    assert_eq!(
        apply(&excluding, &body(messages(5))),
        Outcome::Unchanged(reason::NONE_LONG)
    );

    let mut m = messages(5);
    m[2]["content"][0]["content"] = json!(file(30));
    assert_eq!(
        apply(&stage, &body(m)),
        Outcome::Unchanged(reason::NONE_LONG)
    );

    // The model asks for the whole file again with the same call: the repeat's result rides
    // whole in every later turn, and is counted.
    let mut m = messages(3);
    m.push(json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_3", "name": "Read", "input": {"file_path": "/w/src/retry.rs"}}
    ]}));
    m.push(json!({"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_3", "content": file(400)}
    ]}));
    m.push(json!({"role": "assistant", "content": [{"type": "text", "text": "I see it now."}]}));
    m.push(json!({"role": "user", "content": "go on"}));
    let b = body(m);
    let outcome = apply(&stage, &b);
    let Outcome::Edited(edit) = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        edit.facts.contains(&Fact::count("asked_again", 1)),
        "{:?}",
        edit.facts
    );
    let v = edited(&b, &outcome);
    assert_eq!(v["messages"][4]["content"][0]["content"], json!(file(400)));
}

#[test]
fn other_wires_and_unreadable_bodies_are_left_alone() {
    let stage = OutputsStage::new(OutputsOptions::default());
    let outcome = stage
        .apply(&Request {
            wire: Wire::ChatCompletions,
            path: "/v1/chat/completions",
            headers: &http::HeaderMap::new(),
            body: b"{}",
        })
        .unwrap();
    assert_eq!(outcome, Outcome::Unchanged(reason::NOT_APPLICABLE));
    assert_eq!(
        apply(&stage, "{\"messages\": [ nope"),
        Outcome::Unchanged(reason::UNREADABLE)
    );
}

#[test]
fn every_reason_has_words() {
    for r in reason::ALL {
        assert!(WORDS.reasons.iter().any(|(code, _)| code == r), "{r}");
    }
    assert_eq!(WORDS.reasons.len(), reason::ALL.len());
}

/// The request that carries a long result whole moves the client's cache marker from after it
/// to the block before it (the Read's `tool_use`): the result is read once as plain input, not
/// written to a cache no later request reads. A short result's marker stays.
#[test]
fn the_marker_after_a_long_result_moves_before_it() {
    let stage = OutputsStage::new(OutputsOptions::default());
    let mut m = messages(3);
    m[2]["content"][0]["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
    let b = body(m.clone());
    let v = edited(&b, &apply(&stage, &b));
    let mut expected = m.clone();
    expected[2]["content"][0]
        .as_object_mut()
        .unwrap()
        .remove("cache_control");
    expected[1]["content"][1]["cache_control"] = json!({"type": "ephemeral", "ttl": "1h"});
    assert_eq!(v["messages"], Value::Array(expected));

    let mut short = m;
    short[2]["content"][0]["content"] = json!("ok");
    assert_eq!(
        apply(&stage, &body(short)),
        Outcome::Unchanged(reason::NONE_LONG)
    );
}
