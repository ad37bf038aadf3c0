//! The tool search round trip: hiding pith's search blocks from answers (streamed, over every
//! way of splitting the stream, and whole) and restoring them in later requests.
#![expect(
    clippy::expect_used,
    reason = "test harness: a panic is the failure report"
)]

use std::sync::Arc;

use http::{HeaderMap, HeaderValue};
use pith_transform::search_trip::hide::{Action, Hidden, StreamHider, hide_in_message};
use pith_transform::search_trip::restore::{RestoreStage, reason};
use pith_transform::search_trip::{InMemory, SearchMemory};
use pith_transform::{Outcome, Request, Stage, apply_splices};
use pith_wire::Wire;
use pith_wire::sse::EventSplitter;
use proptest::prelude::*;
use serde_json::{Value, json};

const SEARCH: &str =
    r#"{"type":"server_tool_use","id":"srvtoolu_01","name":"tool_search_tool_regex","input":{}}"#;
const SEARCH_DONE: &str = r#"{"type":"server_tool_use","id":"srvtoolu_01","name":"tool_search_tool_regex","input":{"pattern":"jira"}}"#;
const RESULT: &str = r#"{"type":"tool_search_tool_result","tool_use_id":"srvtoolu_01","content":{"type":"tool_search_tool_search_result","tool_references":[{"type":"tool_reference","tool_name":"demo_jira_op_0"}]}}"#;

fn event(out: &mut String, name: &str, data: &str) {
    out.push_str(&format!("event: {name}\ndata: {data}\n\n"));
}

/// One streamed answer: thinking, text, a search and its result, text, then the found tool
/// called; `ping` and (optionally) an `error` event among them. With `hidden`, the stream the
/// client must get instead: no search blocks, later blocks renumbered.
fn stream(hidden: bool, error: bool) -> String {
    let mut out = String::new();
    event(
        &mut out,
        "message_start",
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}}}"#,
    );
    let mut next = 0;
    let mut block = |out: &mut String, start: &str, deltas: &[&str], hide: bool| {
        if hide && hidden {
            return;
        }
        let i = next;
        next += 1;
        event(
            out,
            "content_block_start",
            &format!(r#"{{"type":"content_block_start","index":{i},"content_block":{start}}}"#),
        );
        for d in deltas {
            event(
                out,
                "content_block_delta",
                &format!(r#"{{"type":"content_block_delta","index":{i},"delta":{d}}}"#),
            );
        }
        event(
            out,
            "content_block_stop",
            &format!(r#"{{"type":"content_block_stop","index":{i}}}"#),
        );
    };
    block(
        &mut out,
        r#"{"type":"thinking","thinking":""}"#,
        &[
            r#"{"type":"thinking_delta","thinking":"need jira"}"#,
            r#"{"type":"signature_delta","signature":"c2ln"}"#,
        ],
        false,
    );
    event(&mut out, "ping", r#"{"type": "ping"}"#);
    block(
        &mut out,
        r#"{"type":"text","text":""}"#,
        &[r#"{"type":"text_delta","text":"Searching."}"#],
        false,
    );
    block(
        &mut out,
        SEARCH,
        &[
            r#"{"type":"input_json_delta","partial_json":"{\"pattern\":"}"#,
            r#"{"type":"input_json_delta","partial_json":"\"jira\"}"}"#,
        ],
        true,
    );
    block(&mut out, RESULT, &[], true);
    if error {
        event(
            &mut out,
            "error",
            r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
        );
    }
    block(
        &mut out,
        r#"{"type":"text","text":""}"#,
        &[r#"{"type":"text_delta","text":"Found it."}"#],
        false,
    );
    block(
        &mut out,
        r#"{"type":"tool_use","id":"toolu_01","name":"demo_jira_op_0","input":{}}"#,
        &[r#"{"type":"input_json_delta","partial_json":"{\"key\":\"A-1\"}"}"#],
        false,
    );
    event(
        &mut out,
        "message_delta",
        r#"{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":{"output_tokens":40}}"#,
    );
    event(&mut out, "message_stop", r#"{"type":"message_stop"}"#);
    out
}

/// The client's stream when `body` is split at `at`, through a hider.
fn through_hider(body: &[u8], at: usize) -> (Vec<u8>, Vec<Hidden>, usize) {
    let mut splitter = EventSplitter::new();
    let mut hider = StreamHider::new();
    let mut out = Vec::new();
    let mut take = |event: &[u8], hider: &mut StreamHider| match hider.event(event) {
        Action::Keep => out.extend_from_slice(event),
        Action::Drop => {}
        Action::Replace(bytes) => out.extend_from_slice(&bytes),
    };
    for part in [&body[..at], &body[at..]] {
        splitter.push(part);
        while let Some(event) = splitter.next_event() {
            take(&event, &mut hider);
        }
    }
    if let Some(rest) = splitter.finish() {
        take(&rest, &mut hider);
    }
    let hidden = hider.take_hidden();
    let searches = hider.searches();
    (out, hidden, searches)
}

#[test]
fn a_stream_loses_the_search_blocks_and_renumbers_the_rest_for_every_split() {
    for error in [false, true] {
        let upstream = stream(false, error);
        let expected = stream(true, error);
        for at in 0..=upstream.len() {
            let (out, hidden, searches) = through_hider(upstream.as_bytes(), at);
            assert_eq!(
                String::from_utf8_lossy(&out),
                expected,
                "split at {at} (error event: {error})"
            );
            assert_eq!(searches, 1);
            // thinking and text came first (2 visible blocks), the tool_use is visible 3.
            assert_eq!(
                hidden,
                [Hidden {
                    tool_use_id: "toolu_01".into(),
                    kept: format!(
                        r#"{{"tool_use_at":3,"blocks":[[2,{SEARCH_DONE}],[2,{RESULT}]]}}"#
                    ),
                    searches: 1,
                }],
                "split at {at}"
            );
        }
    }
}

#[test]
fn a_stream_fed_one_byte_at_a_time_gives_the_same_client_stream() {
    let upstream = stream(false, true);
    let mut splitter = EventSplitter::new();
    let mut hider = StreamHider::new();
    let mut out = Vec::new();
    for byte in upstream.as_bytes().chunks(1) {
        splitter.push(byte);
        while let Some(event) = splitter.next_event() {
            match hider.event(&event) {
                Action::Keep => out.extend_from_slice(&event),
                Action::Drop => {}
                Action::Replace(bytes) => out.extend_from_slice(&bytes),
            }
        }
    }
    assert!(splitter.finish().is_none());
    assert_eq!(String::from_utf8_lossy(&out), stream(true, true));
    assert_eq!(hider.take_hidden().len(), 1);
}

#[test]
fn a_search_with_no_tool_use_after_it_is_hidden_but_not_kept() {
    let mut upstream = String::new();
    event(
        &mut upstream,
        "content_block_start",
        &format!(r#"{{"type":"content_block_start","index":0,"content_block":{SEARCH}}}"#),
    );
    event(
        &mut upstream,
        "content_block_stop",
        r#"{"type":"content_block_stop","index":0}"#,
    );
    event(
        &mut upstream,
        "content_block_start",
        r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
    );
    event(
        &mut upstream,
        "content_block_stop",
        r#"{"type":"content_block_stop","index":1}"#,
    );
    let (out, hidden, searches) = through_hider(upstream.as_bytes(), 0);
    assert_eq!(searches, 1);
    assert!(hidden.is_empty());
    let out = String::from_utf8(out).expect("utf-8");
    assert!(
        out.contains(r#""index":0,"content_block":{"type":"text""#),
        "{out}"
    );
    assert!(!out.contains("server_tool_use"));
}

#[test]
fn other_server_tools_and_unreadable_events_pass_as_they_came() {
    let mut upstream = String::new();
    event(
        &mut upstream,
        "content_block_start",
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"s","name":"web_search","input":{}}}"#,
    );
    upstream.push_str("event: content_block_delta\ndata: {not json\n\n");
    let (out, hidden, searches) = through_hider(upstream.as_bytes(), 7);
    assert_eq!(String::from_utf8_lossy(&out), upstream);
    assert!(hidden.is_empty());
    assert_eq!(searches, 0);
}

#[test]
fn a_json_answer_loses_the_search_blocks() {
    let body = format!(
        r#"{{"id":"msg_1","type":"message","role":"assistant","content":[{{"type":"text","text":"Searching."}},{SEARCH_DONE},{RESULT},{{"type":"tool_use","id":"toolu_01","name":"demo_jira_op_0","input":{{"key":"A-1"}}}}],"stop_reason":"tool_use","usage":{{"input_tokens":10,"output_tokens":40}}}}"#
    );
    let hidden = hide_in_message(body.as_bytes()).expect("search blocks hidden");
    let out: Value = serde_json::from_slice(&hidden.body).expect("json");
    let kinds: Vec<&str> = out["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|b| b["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(kinds, ["text", "tool_use"]);
    assert_eq!(out["usage"]["output_tokens"], 40, "usage is the provider's");
    assert_eq!(
        hidden.hidden[0].kept,
        format!(r#"{{"tool_use_at":1,"blocks":[[1,{SEARCH_DONE}],[1,{RESULT}]]}}"#)
    );
    assert_eq!(hidden.searches, 1);
    let plain = r#"{"content":[{"type":"text","text":"hi"}]}"#;
    assert_eq!(hide_in_message(plain.as_bytes()), None);
}

/// What the hider keeps for a search after `at` visible blocks, before a tool_use at visible
/// index `tool_use_at`.
fn kept_after(at: usize, tool_use_at: usize) -> String {
    pith_transform::search_trip::Kept::encode(
        tool_use_at,
        &[(at, SEARCH_DONE.to_owned()), (at, RESULT.to_owned())],
    )
}

fn history(extra_blocks: &[Value]) -> String {
    let mut assistant = vec![json!({"type": "text", "text": "Searching."})];
    assistant.extend(extra_blocks.iter().cloned());
    assistant.push(json!({"type": "text", "text": "Found it."}));
    assistant.push(json!({"type": "tool_use", "id": "toolu_01", "name": "demo_jira_op_0", "input": {"key": "A-1"}}));
    json!({"model": "m", "messages": [
        {"role": "user", "content": "open A-1"},
        {"role": "assistant", "content": assistant},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "ok"}]}
    ]})
    .to_string()
}

fn restore(memory: &Arc<InMemory>, session: &str, body: &str) -> Outcome {
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-session-id",
        HeaderValue::from_str(session).expect("header"),
    );
    RestoreStage::new(memory.clone() as Arc<dyn SearchMemory>)
        .apply(&Request {
            wire: Wire::AnthropicMessages,
            path: "/v1/messages",
            headers: &headers,
            body: body.as_bytes(),
        })
        .expect("the stage never errors")
}

#[test]
fn kept_blocks_go_back_before_their_tool_use_the_same_bytes_every_time() {
    let memory = Arc::new(InMemory::default());
    // The answer was [text "Searching.", search, result, text "Found it.", tool_use].
    memory.remember("ses_1", "toolu_01", &kept_after(1, 2));
    let body = history(&[]);
    let Outcome::Edited(edit) = restore(&memory, "ses_1", &body) else {
        panic!("expected the blocks restored");
    };
    assert_eq!(edit.facts[0].name, "searches");
    assert_eq!(edit.facts[0].value, 1);
    let out = apply_splices(body.as_bytes(), &edit.splices).expect("apply");
    let value: Value = serde_json::from_slice(&out).expect("json");
    let kinds: Vec<&str> = value["messages"][1]["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|b| b["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        [
            "text",
            "server_tool_use",
            "tool_search_tool_result",
            "text",
            "tool_use"
        ],
        "back where the answer had them"
    );
    let out = String::from_utf8(out).expect("utf-8");
    assert!(out.contains(&format!("{SEARCH_DONE},{RESULT},")));
    // The next turn: the same bytes in the same place.
    let Outcome::Edited(again) = restore(&memory, "ses_1", &body) else {
        panic!("expected the blocks restored again");
    };
    assert_eq!(again, edit);
}

#[test]
fn when_the_client_dropped_blocks_of_the_answer_the_search_goes_just_before_its_tool_use() {
    let memory = Arc::new(InMemory::default());
    // The answer had thinking first: the client's message has one visible block fewer.
    memory.remember("ses_1", "toolu_01", &kept_after(2, 3));
    let body = history(&[]);
    let Outcome::Edited(edit) = restore(&memory, "ses_1", &body) else {
        panic!("expected the blocks restored");
    };
    let out = apply_splices(body.as_bytes(), &edit.splices).expect("apply");
    let value: Value = serde_json::from_slice(&out).expect("json");
    let kinds: Vec<&str> = value["messages"][1]["content"]
        .as_array()
        .expect("content")
        .iter()
        .map(|b| b["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        kinds,
        [
            "text",
            "text",
            "server_tool_use",
            "tool_search_tool_result",
            "tool_use"
        ]
    );
}

#[test]
fn other_sessions_round_tripping_clients_and_other_wires_are_left_alone() {
    let memory = Arc::new(InMemory::default());
    memory.remember("ses_1", "toolu_01", &kept_after(1, 2));
    let body = history(&[]);
    assert_eq!(
        restore(&memory, "ses_2", &body),
        Outcome::Unchanged(reason::NOTHING_REMEMBERED)
    );
    let own = history(&[
        serde_json::from_str(SEARCH_DONE).expect("json"),
        serde_json::from_str(RESULT).expect("json"),
    ]);
    assert_eq!(
        restore(&memory, "ses_1", &own),
        Outcome::Unchanged(reason::CLIENT_ROUND_TRIPS)
    );
    let other = body.replace("toolu_01", "toolu_99");
    assert_eq!(
        restore(&memory, "ses_1", &other),
        Outcome::Unchanged(reason::NONE_HERE)
    );
    let headers = HeaderMap::new();
    let chat = RestoreStage::new(memory.clone() as Arc<dyn SearchMemory>)
        .apply(&Request {
            wire: Wire::ChatCompletions,
            path: "/v1/chat/completions",
            headers: &headers,
            body: body.as_bytes(),
        })
        .expect("no error");
    assert_eq!(chat, Outcome::Unchanged(reason::NOT_APPLICABLE));
}

/// One block of a generated answer.
#[derive(Debug, Clone, Copy)]
enum Kind {
    Thinking,
    Text,
    /// A search and its result (two blocks).
    Search,
    ToolUse,
    Ping,
    /// A mid-stream `error` event.
    Error,
    /// A web search, a server tool that is not pith's: passes through.
    WebSearch,
}

/// The answer of `kinds`, and (with `hidden`) what the client must get: `(stream, kept runs)`.
fn generated(kinds: &[Kind], hidden: bool) -> (String, Vec<Hidden>) {
    let mut out = String::new();
    let mut next = 0;
    let mut run: Vec<(usize, String)> = Vec::new();
    let mut runs = Vec::new();
    let mut tools = 0;
    let mut visible = 0;
    let mut block = |out: &mut String, start: &str, deltas: &[String]| {
        let i = next;
        next += 1;
        event(
            out,
            "content_block_start",
            &format!(r#"{{"type":"content_block_start","index":{i},"content_block":{start}}}"#),
        );
        for d in deltas {
            event(
                out,
                "content_block_delta",
                &format!(r#"{{"type":"content_block_delta","index":{i},"delta":{d}}}"#),
            );
        }
        event(
            out,
            "content_block_stop",
            &format!(r#"{{"type":"content_block_stop","index":{i}}}"#),
        );
    };
    for (n, kind) in kinds.iter().enumerate() {
        if matches!(kind, Kind::Thinking | Kind::Text) {
            visible += 1;
        }
        match kind {
            Kind::Thinking => block(
                &mut out,
                r#"{"type":"thinking","thinking":""}"#,
                &[r#"{"type":"thinking_delta","thinking":"hm"}"#.to_owned()],
            ),
            Kind::Text => block(
                &mut out,
                r#"{"type":"text","text":""}"#,
                &[r#"{"type":"text_delta","text":"t"}"#.to_owned()],
            ),
            Kind::Ping => event(&mut out, "ping", r#"{"type": "ping"}"#),
            Kind::Error => event(
                &mut out,
                "error",
                r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
            ),
            Kind::WebSearch => {
                visible += 1;
                block(
                    &mut out,
                    r#"{"type":"server_tool_use","id":"srvtoolu_w","name":"web_search","input":{}}"#,
                    &[r#"{"type":"input_json_delta","partial_json":"{}"}"#.to_owned()],
                )
            }
            Kind::Search => {
                let id = format!("srvtoolu_{n}");
                let start = format!(
                    r#"{{"type":"server_tool_use","id":"{id}","name":"tool_search_tool_bm25","input":{{}}}}"#
                );
                let done = format!(
                    r#"{{"type":"server_tool_use","id":"{id}","name":"tool_search_tool_bm25","input":{{"query":"q{n}"}}}}"#
                );
                let result = format!(
                    r#"{{"type":"tool_search_tool_result","tool_use_id":"{id}","content":{{"type":"tool_search_tool_search_result","tool_references":[]}}}}"#
                );
                run.push((visible, done));
                run.push((visible, result.clone()));
                if !hidden {
                    block(
                        &mut out,
                        &start,
                        &[format!(
                            r#"{{"type":"input_json_delta","partial_json":"{{\"query\":\"q{n}\"}}"}}"#
                        )],
                    );
                    block(&mut out, &result, &[]);
                }
            }
            Kind::ToolUse => {
                tools += 1;
                let id = format!("toolu_{tools}");
                if !run.is_empty() {
                    let searches = run.len() / 2;
                    let kept = pith_transform::search_trip::Kept::encode(visible, &run);
                    runs.push(Hidden {
                        tool_use_id: id.clone(),
                        kept,
                        searches,
                    });
                    run.clear();
                }
                visible += 1;
                block(
                    &mut out,
                    &format!(r#"{{"type":"tool_use","id":"{id}","name":"t","input":{{}}}}"#),
                    &[r#"{"type":"input_json_delta","partial_json":"{}"}"#.to_owned()],
                );
            }
        }
    }
    event(&mut out, "message_stop", r#"{"type":"message_stop"}"#);
    (out, runs)
}

fn kind() -> impl Strategy<Value = Kind> {
    prop_oneof![
        Just(Kind::Thinking),
        Just(Kind::Text),
        Just(Kind::Search),
        Just(Kind::ToolUse),
        Just(Kind::Ping),
        Just(Kind::Error),
        Just(Kind::WebSearch)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Any order of blocks, split anywhere: the client's stream is the answer without the
    /// search blocks, renumbered, and each run of searches is kept for the tool_use after it.
    #[test]
    fn any_order_of_blocks_split_anywhere(kinds in prop::collection::vec(kind(), 0..8), cut in any::<prop::sample::Index>()) {
        let (upstream, runs) = generated(&kinds, false);
        let (expected, _) = generated(&kinds, true);
        let at = cut.index(upstream.len() + 1);
        let (out, hidden, searches) = through_hider(upstream.as_bytes(), at);
        prop_assert_eq!(String::from_utf8_lossy(&out), expected.as_str());
        prop_assert_eq!(&hidden, &runs);
        let count = kinds.iter().filter(|k| matches!(k, Kind::Search)).count();
        prop_assert_eq!(searches, count);
    }
}

#[test]
fn other_server_tools_in_the_history_are_not_a_round_trip() {
    let memory = Arc::new(InMemory::default());
    memory.remember("ses_1", "toolu_01", &kept_after(1, 3));
    // A web search the client sent back, and a tool input naming the block type.
    let body = history(&[
        json!({"type": "server_tool_use", "id": "srvtoolu_w", "name": "web_search", "input": {"query": "tool_search_tool_result"}}),
        json!({"type": "web_search_tool_result", "tool_use_id": "srvtoolu_w", "content": []}),
    ]);
    assert!(matches!(
        restore(&memory, "ses_1", &body),
        Outcome::Edited(_)
    ));
}
