//! The stage on Anthropic conversations: which results it shortens, and that a later turn
//! sends the same bytes.

use serde_json::{Value, json};

use super::*;
use crate::apply_splices;
use crate::stage::Fact;
use pith_wire::Wire;

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
    // Counted in the request whose newest model turn repeats the call, once.
    let b = body(m.clone());
    let Outcome::Edited(edit) = apply(&stage, &b) else {
        panic!("the first Read is shortened")
    };
    assert!(
        edit.facts.contains(&Fact::count("asked_again", 1)),
        "{:?}",
        edit.facts
    );
    m.push(json!({"role": "assistant", "content": [{"type": "text", "text": "I see it now."}]}));
    m.push(json!({"role": "user", "content": "go on"}));
    let b = body(m);
    let outcome = apply(&stage, &b);
    let Outcome::Edited(edit) = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        edit.facts.iter().all(|f| f.name != "asked_again"),
        "{:?}",
        edit.facts
    );
    let v = edited(&b, &outcome);
    assert!(
        v["messages"][4]["content"][0]["content"] == json!(file(400)),
        "the repeat's output changed"
    );
}

#[test]
fn unreadable_bodies_are_left_alone() {
    let stage = OutputsStage::new(OutputsOptions::default());
    let garbled = format!("{{\"messages\": [ nope {}", "x".repeat(5_000));
    for wire in [
        Wire::AnthropicMessages,
        Wire::ChatCompletions,
        Wire::Responses,
    ] {
        assert_eq!(
            apply_on(&stage, wire, &garbled),
            Outcome::Unchanged(reason::UNREADABLE),
            "{wire:?}"
        );
    }
}

fn apply_on(stage: &OutputsStage, wire: Wire, body: &str) -> Outcome {
    stage
        .apply(&Request {
            wire,
            path: "/",
            headers: &http::HeaderMap::new(),
            body: body.as_bytes(),
        })
        .unwrap()
}

/// The conversation of [`messages`] as OpenCode sends it (Chat Completions): the Read's
/// output a `role: "tool"` message, the Edit's arguments a string holding JSON.
fn chat_body(upto: usize) -> String {
    let edit = json!({"filePath": "/w/src/retry.rs", "oldString": OLD, "newString": "fn retry_backoff(attempt: u32) -> Duration {}"});
    let all = vec![
        json!({"role": "system", "content": "You are opencode."}),
        json!({"role": "user", "content": "make the retry backoff exponential"}),
        json!({"role": "assistant", "content": "Reading the retry module.", "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{\"filePath\":\"/w/src/retry.rs\"}"}}
        ]}),
        json!({"role": "tool", "tool_call_id": "call_1", "content": file(400)}),
        json!({"role": "assistant", "content": [{"type": "text", "text": "The backoff is linear."}], "tool_calls": [
            {"id": "call_2", "type": "function", "function": {"name": "edit", "arguments": edit.to_string()}}
        ]}),
        json!({"role": "tool", "tool_call_id": "call_2", "content": "Edit applied successfully."}),
        json!({"role": "assistant", "content": "Done."}),
        json!({"role": "user", "content": "thanks, now run the tests"}),
    ];
    json!({"model": "gpt-5", "stream": true, "messages": all.into_iter().take(upto).collect::<Vec<_>>()})
        .to_string()
}

/// The conversation as Codex sends it (Responses): a `shell` call that printed the file, its
/// `function_call_output`, then reasoning, a message and an `apply_patch` custom call in one
/// turn of the model's.
fn responses_body(upto: usize) -> String {
    let patch = format!(
        "*** Begin Patch\n*** Update File: src/retry.rs\n@@\n-{}\n+fn retry_backoff(attempt: u32) -> Duration {{}}\n*** End Patch",
        OLD.replace('\n', "\n-")
    );
    let all = vec![
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "make the retry backoff exponential"}]}),
        json!({"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{\"command\":[\"bash\",\"-lc\",\"cat -n src/retry.rs\"]}"}),
        json!({"type": "function_call_output", "call_id": "call_1", "output": file(400)}),
        json!({"type": "reasoning", "summary": [], "encrypted_content": "gAAA"}),
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "The backoff is linear."}]}),
        json!({"type": "custom_tool_call", "call_id": "call_2", "name": "apply_patch", "input": patch}),
        json!({"type": "custom_tool_call_output", "call_id": "call_2", "output": "Success. Updated: M src/retry.rs"}),
        json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "now run the tests"}]}),
    ];
    json!({"model": "gpt-5-codex", "stream": true, "store": false, "input": all.into_iter().take(upto).collect::<Vec<_>>()})
        .to_string()
}

/// Chat Completions and Responses: the same rules as Anthropic's. The output rides whole in
/// its own turn, as an excerpt from the next on (the lines the later edit quoted kept, every
/// other byte as sent), the same bytes in every later request and from a fresh stage; a
/// repeated call's output rides whole.
#[test]
fn chat_and_responses_outputs_are_shortened_by_the_same_rules() {
    type Path = fn(&mut Value) -> &mut Value;
    type BodyOf = fn(usize) -> String;
    // (wire, body, items up to the output, up to the model's next turn, all, the output)
    let cases: [(Wire, BodyOf, usize, usize, usize, Path); 2] = [
        (Wire::ChatCompletions, chat_body, 4, 6, 8, |v| {
            &mut v["messages"][3]["content"]
        }),
        (Wire::Responses, responses_body, 3, 7, 8, |v| {
            &mut v["input"][2]["output"]
        }),
    ];
    for (wire, body_of, own_turn, next_turn, full, at) in cases {
        let stage = OutputsStage::new(OutputsOptions::default());
        assert_eq!(
            apply_on(&stage, wire, &body_of(own_turn)),
            Outcome::Unchanged(reason::NONE_LONG),
            "{wire:?}: whole in its own turn"
        );
        let later = body_of(next_turn);
        let outcome = apply_on(&stage, wire, &later);
        let Outcome::Edited(edit) = &outcome else {
            panic!("{wire:?}: {outcome:?}")
        };
        assert_eq!(edit.facts[0], Fact::count("outputs", 1), "{wire:?}");
        let mut v: Value =
            serde_json::from_slice(&apply_splices(later.as_bytes(), &edit.splices).unwrap())
                .unwrap();
        let shown = at(&mut v).as_str().unwrap().to_owned();
        assert!(
            shown.starts_with("[pith shortened this tool output: "),
            "{wire:?}: {shown}"
        );
        for n in 121..=123 {
            let line = file(400).lines().nth(n - 1).unwrap().to_owned();
            assert!(
                shown.contains(&line),
                "{wire:?}: line {n} missing:\n{shown}"
            );
        }
        assert!(shown.len() * 2 < file(400).len(), "{wire:?}");
        let mut original: Value = serde_json::from_str(&later).unwrap();
        *at(&mut original) = Value::String(shown.clone());
        assert_eq!(v, original, "{wire:?}: everything else as sent");

        for stage in [&stage, &OutputsStage::new(OutputsOptions::default())] {
            let last = body_of(full);
            let outcome = apply_on(stage, wire, &last);
            let Outcome::Edited(edit) = &outcome else {
                panic!("{wire:?}: {outcome:?}")
            };
            let mut v: Value =
                serde_json::from_slice(&apply_splices(last.as_bytes(), &edit.splices).unwrap())
                    .unwrap();
            assert_eq!(
                at(&mut v).as_str(),
                Some(shown.as_str()),
                "{wire:?}: same bytes"
            );
        }
    }
}

#[test]
fn a_repeated_responses_call_rides_whole() {
    let stage = OutputsStage::new(OutputsOptions::default());
    let mut v: Value = serde_json::from_str(&responses_body(3)).unwrap();
    let items = v["input"].as_array_mut().unwrap();
    items.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Again, whole."}]}));
    items.push(json!({"type": "function_call", "call_id": "call_9", "name": "shell", "arguments": "{\"command\":[\"bash\",\"-lc\",\"cat -n src/retry.rs\"]}"}));
    items.push(json!({"type": "function_call_output", "call_id": "call_9", "output": file(400)}));
    let b = v.to_string();
    let outcome = apply_on(&stage, Wire::Responses, &b);
    let Outcome::Edited(edit) = &outcome else {
        panic!("{outcome:?}")
    };
    assert!(
        edit.facts.contains(&Fact::count("asked_again", 1)),
        "{:?}",
        edit.facts
    );
    assert!(
        edit.facts.contains(&Fact::count("outputs", 1)),
        "{:?}",
        edit.facts
    );
    let after: Value =
        serde_json::from_slice(&apply_splices(b.as_bytes(), &edit.splices).unwrap()).unwrap();
    assert!(
        after["input"][5]["output"] == json!(file(400)),
        "the repeat's output changed"
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

/// An output, a call's input or a later turn's text whose string does not decode (a lone
/// surrogate's escape, which the JSON grammar allows and Unicode does not) is left whole: no
/// error, nothing shortened (the stage fuzzer's case 12067 of seed 0x70697468f0222510).
#[test]
fn text_that_does_not_decode_is_left_whole() {
    let stage = OutputsStage::new(OutputsOptions::default());
    let b = body(messages(5));
    for (needle, broken) in [
        ("\"content\":\"1\\t", "\"content\":\"\\ud800 1\\t"),
        ("\"file_path\":\"/w", "\"file_path\":\"\\udc00/w"),
        ("\"old_string\":\"", "\"old_string\":\"\\ud83d"),
    ] {
        assert!(b.contains(needle), "{needle}");
        let b = b.replacen(needle, broken, 1);
        assert!(
            matches!(apply(&stage, &b), Outcome::Unchanged(_)),
            "{broken}"
        );
    }
}

/// Claude Code 2.1.328 ends some requests with a `system`-role message of its own after the
/// results and marks that: the marker still moves before the first long result.
#[test]
fn a_marker_on_a_message_after_the_results_moves_before_the_long_one() {
    let stage = OutputsStage::new(OutputsOptions::default());
    let mut m = messages(3);
    let reminder = json!({"role": "system", "content": [{"type": "text",
        "text": "The user hasn't heard from you in a while.",
        "cache_control": {"type": "ephemeral"}}]});
    m.push(reminder);
    let b = body(m.clone());
    let v = edited(&b, &apply(&stage, &b));
    let mut expected = m;
    expected[3]["content"][0]
        .as_object_mut()
        .unwrap()
        .remove("cache_control");
    expected[1]["content"][1]["cache_control"] = json!({"type": "ephemeral"});
    assert_eq!(v["messages"], Value::Array(expected));
}

/// With the originals kept, an excerpt names pith's `tool_output` and the call's id only when
/// the request offers that tool (as Claude Code names an MCP server's tools); otherwise it
/// says to run the call again.
#[test]
fn the_header_names_tool_output_only_when_the_client_has_it() {
    let kept = OutputsStage::new(OutputsOptions {
        originals_kept: true,
        ..OutputsOptions::default()
    });
    let first_line = |stage: &OutputsStage, tools: Value| {
        let mut v: Value = serde_json::from_str(&body(messages(5))).unwrap();
        v["tools"] = tools;
        let b = v.to_string();
        edited(&b, &apply(stage, &b))["messages"][2]["content"][0]["content"]
            .as_str()
            .unwrap()
            .lines()
            .next()
            .unwrap()
            .to_owned()
    };
    let offered = json!([{"name": "mcp__pith__tool_output", "input_schema": {"type": "object"}}]);
    let line = first_line(&kept, offered.clone());
    assert!(
        line.contains(
            "The whole output: pith's tool_output with callId \"toolu_1\"; or run the call again"
        ),
        "{line}"
    );
    for (stage, tools) in [
        (&kept, json!([])),
        (&OutputsStage::new(OutputsOptions::default()), offered),
    ] {
        let line = first_line(stage, tools);
        assert!(!line.contains("tool_output"), "{line}");
        assert!(
            line.contains("The whole output: run the call again"),
            "{line}"
        );
    }
}

/// A session of `rounds` rounds on `wire` as its client sends it, request by request: each
/// round the model calls one or two tools (file reads among a few paths, so some repeat), the
/// outputs come back (long or short), and now and then the person says something. Each
/// request's body is the conversation so far. Chosen by `seed`.
fn session(wire: Wire, rounds: usize, seed: u64) -> Vec<String> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    let mut next = |n: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    };
    let mut items: Vec<Value> = Vec::new();
    let mut bodies = Vec::new();
    let user = |text: &str| match wire {
        Wire::Responses => {
            json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]})
        }
        _ => json!({"role": "user", "content": text}),
    };
    items.push(user("work through the retry module"));
    for round in 0..rounds {
        let calls: Vec<(String, String)> = (0..=next(2))
            .map(|k| {
                let path = format!("/w/src/m{}.rs", next(4));
                (format!("call_{round}_{k}"), path)
            })
            .collect();
        let said = format!("Round {round}: looking at line {}.", next(400));
        let outputs: Vec<(String, String)> = calls
            .iter()
            .map(|(id, _)| {
                let text = if next(3) == 0 {
                    "ok".to_owned()
                } else {
                    file(40 + next(400) as usize)
                };
                (id.clone(), text)
            })
            .collect();
        match wire {
            Wire::AnthropicMessages => {
                let mut content = vec![json!({"type": "text", "text": said})];
                for (id, path) in &calls {
                    content.push(json!({"type": "tool_use", "id": id, "name": "Read", "input": {"file_path": path}}));
                }
                items.push(json!({"role": "assistant", "content": content}));
                let results: Vec<Value> = outputs
                    .iter()
                    .map(|(id, text)| json!({"type": "tool_result", "tool_use_id": id, "content": text}))
                    .collect();
                items.push(json!({"role": "user", "content": results}));
            }
            Wire::ChatCompletions => {
                let tool_calls: Vec<Value> = calls
                    .iter()
                    .map(|(id, path)| json!({"id": id, "type": "function", "function": {"name": "read", "arguments": json!({"filePath": path}).to_string()}}))
                    .collect();
                items.push(json!({"role": "assistant", "content": said, "tool_calls": tool_calls}));
                for (id, text) in &outputs {
                    items.push(json!({"role": "tool", "tool_call_id": id, "content": text}));
                }
            }
            Wire::Responses => {
                items.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": said}]}));
                for (id, path) in &calls {
                    items.push(json!({"type": "function_call", "call_id": id, "name": "shell", "arguments": json!({"command": ["bash", "-lc", format!("cat -n {path}")]}).to_string()}));
                }
                for (id, text) in &outputs {
                    items.push(
                        json!({"type": "function_call_output", "call_id": id, "output": text}),
                    );
                }
            }
        }
        if next(4) == 0 {
            items.push(user(&format!("keep going ({round})")));
        }
        let key = if wire == Wire::Responses {
            "input"
        } else {
            "messages"
        };
        let mut body = json!({"model": "m", "stream": true});
        body[key] = Value::Array(items.clone());
        // The client's marker on the last block, as Claude Code puts it.
        if wire == Wire::AnthropicMessages
            && let Some(last) = body["messages"].as_array_mut().and_then(|m| m.last_mut())
            && let Some(block) = last["content"].as_array_mut().and_then(|c| c.last_mut())
        {
            block["cache_control"] = json!({"type": "ephemeral"});
        }
        bodies.push(body.to_string());
    }
    bodies
}

fn sent(stage: &OutputsStage, wire: Wire, body: &str) -> (Vec<u8>, Vec<Fact>) {
    match apply_on(stage, wire, body) {
        Outcome::Edited(edit) => (
            apply_splices(body.as_bytes(), &edit.splices).unwrap(),
            edit.facts,
        ),
        Outcome::Unchanged(_) => (body.as_bytes().to_vec(), Vec::new()),
    }
}

/// Reading only what is new since a conversation's last request sends exactly what reading it
/// all sends: one stage fed a session request by request against a fresh stage on each
/// request, on the three wires, over sessions with repeats, short outputs and the person's
/// words between rounds; and a request that rewrites an earlier turn is read whole again.
#[test]
fn reading_only_the_new_turns_sends_what_reading_them_all_sends() {
    use std::sync::atomic::Ordering::Relaxed;
    let mut shortened = 0;
    for wire in [
        Wire::AnthropicMessages,
        Wire::ChatCompletions,
        Wire::Responses,
    ] {
        for seed in 0..4 {
            let stage = OutputsStage::new(OutputsOptions::default());
            let bodies = session(wire, 14, seed);
            let (mut read_whole, mut retries) = (0, 0);
            for (n, body) in bodies.iter().enumerate() {
                let fresh = OutputsStage::new(OutputsOptions::default());
                let before = stage.elements_read.load(Relaxed);
                let (incremental, facts) = sent(&stage, wire, body);
                // From the previous request's last model turn on: two rounds at most.
                let read = stage.elements_read.load(Relaxed) - before;
                assert!(
                    n == 0 || read <= 12,
                    "{wire:?} seed {seed} request {n}: read {read}"
                );
                let (whole, whole_facts) = sent(&fresh, wire, body);
                assert!(
                    incremental == whole,
                    "{wire:?} seed {seed} request {n}: bytes differ"
                );
                assert_eq!(facts, whole_facts, "{wire:?} seed {seed} request {n}");
                shortened += usize::from(!facts.is_empty());
                // The same request again (a retry): the same bytes and the same counts.
                let before_retry = stage.elements_read.load(Relaxed);
                assert!(
                    sent(&stage, wire, body) == (whole.clone(), whole_facts.clone()),
                    "{wire:?} seed {seed} request {n} sent again"
                );
                retries += stage.elements_read.load(Relaxed) - before_retry;
                read_whole += fresh.elements_read.load(Relaxed);
            }
            let read = stage.elements_read.load(Relaxed) - retries;
            assert!(
                read * 3 < read_whole,
                "{wire:?}: read {read} of {read_whole}"
            );
            // A rewind that answers differently: the model turn after the remembered turns is
            // another one, so the excerpts it fixed are made again, as a fresh stage makes them.
            let rewound = OutputsStage::new(OutputsOptions::default());
            sent(&rewound, wire, &bodies[5]);
            let other = bodies[6].replacen(
                "Round 5: looking at line",
                "Round 5: retry_backoff Duration from_millis at line",
                1,
            );
            let fresh = OutputsStage::new(OutputsOptions::default());
            assert!(
                sent(&rewound, wire, &other) == sent(&fresh, wire, &other),
                "{wire:?} seed {seed}: a different answer after the remembered turns"
            );
            // An earlier turn rewritten (a client that edits its history): read whole again.
            let last = bodies
                .last()
                .unwrap()
                .replacen("Round 0:", "Round zero:", 1);
            let fresh = OutputsStage::new(OutputsOptions::default());
            assert!(
                sent(&stage, wire, &last) == sent(&fresh, wire, &last),
                "{wire:?} rewritten"
            );
        }
    }
    assert!(
        shortened > 60,
        "the sessions shortened too little to tell: {shortened}"
    );
}

/// Two sessions that open with the same message, their requests alternating through one
/// stage: each keeps reading only its new turns (neither evicts the other), and each request
/// sends what a fresh stage sends.
#[test]
fn sessions_that_open_alike_do_not_evict_each_other() {
    use std::sync::atomic::Ordering::Relaxed;
    for wire in [
        Wire::AnthropicMessages,
        Wire::ChatCompletions,
        Wire::Responses,
    ] {
        let stage = OutputsStage::new(OutputsOptions::default());
        let (a, b) = (session(wire, 10, 0), session(wire, 10, 1));
        for (n, (x, y)) in a.iter().zip(&b).enumerate() {
            for body in [x, y] {
                let before = stage.elements_read.load(Relaxed);
                let fresh = OutputsStage::new(OutputsOptions::default());
                assert!(
                    sent(&stage, wire, body) == sent(&fresh, wire, body),
                    "{wire:?} {n}"
                );
                let read = stage.elements_read.load(Relaxed) - before;
                assert!(n == 0 || read <= 12, "{wire:?} request {n}: read {read}");
            }
        }
    }
}

/// What the stage remembers is bounded in bytes, not only in entries: many sessions, each
/// reading long files, through a stage that holds a few of their excerpts at most. Past the
/// bound it forgets and ranks again, and every request still sends what a fresh stage sends.
/// (That a session's next request reads only its new turns is the tests' above, at the
/// stage's own bounds.)
#[test]
fn what_the_stage_remembers_stays_within_its_bytes() {
    const BYTES_MAX: usize = 1_400;
    let wire = Wire::AnthropicMessages;
    let stage = OutputsStage::with_bytes_max(OutputsOptions::default(), BYTES_MAX);
    let unbounded = OutputsStage::new(OutputsOptions::default());
    let sessions: Vec<Vec<String>> = (0..6)
        .map(|s| {
            session(wire, 14, s)
                .into_iter()
                .map(|b| b.replacen("work through the retry module", &format!("module {s}"), 1))
                .collect()
        })
        .collect();
    let (mut most_memo, mut most_sessions) = (0, 0);
    for n in 0..14 {
        for (s, bodies) in sessions.iter().enumerate() {
            let fresh = OutputsStage::new(OutputsOptions::default());
            assert!(
                sent(&stage, wire, &bodies[n]) == sent(&fresh, wire, &bodies[n]),
                "session {s} request {n}"
            );
            sent(&unbounded, wire, &bodies[n]);
            let memo = stage.memo.bytes();
            let (counted, recounted) = stage.sessions.bytes();
            assert_eq!(counted, recounted, "session {s} request {n}");
            assert!(
                memo <= BYTES_MAX && counted <= BYTES_MAX,
                "{memo} {counted}"
            );
            most_memo = most_memo.max(memo);
            most_sessions = most_sessions.max(counted);
        }
    }
    // The bound was reached: unbounded, the same requests leave several times as much, and
    // bounded, each held more than half of it at some point.
    let (memo, (sessions, _)) = (unbounded.memo.bytes(), unbounded.sessions.bytes());
    assert!(
        memo > 3 * BYTES_MAX && sessions > 3 * BYTES_MAX,
        "unbounded: memo {memo}, sessions {sessions}"
    );
    assert!(
        most_memo > BYTES_MAX / 2 && most_sessions > BYTES_MAX / 2,
        "bounded at most: memo {most_memo}, sessions {most_sessions}"
    );
}
