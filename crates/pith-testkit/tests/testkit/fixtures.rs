//! The fixture builders produce the real wire shapes with the caller's text and usage.

use std::time::Duration;

use pith_testkit::fixtures::{
    self, Capture, ToolCall, Usage, anthropic, chat, fixtures_dir, load_captures, responses,
};
use serde_json::{Value, json};

use crate::sse::{self, names};

const USAGE: Usage = Usage {
    input: 21,
    output: 48,
    cache_write: 300,
    cache_write_1h: 0,
    cache_read: 5120,
};

fn tool() -> ToolCall {
    ToolCall::new(
        "toolu_01B",
        "read_file",
        r#"{"path":"src/lib.rs","n":[1,2]}"#,
    )
}

fn parse(bytes: &[u8]) -> Value {
    serde_json::from_slice(bytes).unwrap()
}

#[test]
fn usage_totals() {
    assert_eq!(USAGE.prompt_total(), 21 + 300 + 5120);
    assert_eq!(USAGE.total(), 21 + 300 + 5120 + 48);
}

#[test]
fn anthropic_message_carries_text_and_disjoint_cache_counters() {
    let message = parse(&anthropic::message("Hi \"there\" é", USAGE));
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(
        message["content"],
        json!([{"type": "text", "text": "Hi \"there\" é"}])
    );
    assert_eq!(message["stop_reason"], "end_turn");
    let usage = &message["usage"];
    assert_eq!(usage["input_tokens"], 21);
    assert_eq!(usage["cache_creation_input_tokens"], 300);
    assert_eq!(usage["cache_read_input_tokens"], 5120);
    assert_eq!(usage["cache_creation"]["ephemeral_5m_input_tokens"], 300);
    assert_eq!(usage["output_tokens"], 48);

    let with_tool = parse(&anthropic::message_with_tool("", &tool(), USAGE));
    assert_eq!(with_tool["stop_reason"], "tool_use");
    assert_eq!(
        with_tool["content"],
        json!([{"type": "tool_use", "id": "toolu_01B", "name": "read_file",
                "input": {"path": "src/lib.rs", "n": [1, 2]}}])
    );
}

#[test]
fn anthropic_stream_has_the_documented_event_order_and_cumulative_usage() {
    let events = sse::parse(&anthropic::stream(&["Hel", "lo"], USAGE));
    assert_eq!(
        names(&events),
        [
            "message_start",
            "content_block_start",
            "ping",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop"
        ]
    );
    for event in &events {
        assert_eq!(
            event.json()["type"],
            event.name.as_deref().unwrap(),
            "type repeats the name"
        );
    }
    let start = events[0].json();
    assert_eq!(start["message"]["usage"]["input_tokens"], 21);
    assert_eq!(
        start["message"]["usage"]["cache_creation_input_tokens"],
        300
    );
    assert_eq!(start["message"]["usage"]["cache_read_input_tokens"], 5120);
    assert_eq!(start["message"]["stop_reason"], Value::Null);
    let text: String = events
        .iter()
        .filter(|e| e.name.as_deref() == Some("content_block_delta"))
        .map(|e| e.json()["delta"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(text, "Hello");
    let delta = events[6].json();
    assert_eq!(delta["usage"]["output_tokens"], 48);
    assert_eq!(delta["delta"]["stop_reason"], "end_turn");
    assert!(!String::from_utf8_lossy(&anthropic::stream(&["x"], USAGE)).contains("[DONE]"));
}

#[test]
fn anthropic_tool_stream_sends_input_in_fragments_that_join_to_the_arguments() {
    let events = sse::parse(&anthropic::stream_with_tool(&[], &tool(), USAGE));
    let start = events
        .iter()
        .find(|e| e.name.as_deref() == Some("content_block_start"))
        .unwrap();
    assert_eq!(start.json()["content_block"]["type"], "tool_use");
    assert_eq!(start.json()["content_block"]["input"], json!({}));
    let fragments: Vec<String> = events
        .iter()
        .filter(|e| e.name.as_deref() == Some("content_block_delta"))
        .map(|e| {
            e.json()["delta"]["partial_json"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(fragments.len(), 3);
    assert_eq!(
        fragments[0], "",
        "the API's first input_json_delta is empty"
    );
    assert_eq!(fragments.concat(), tool().arguments_json);
    let delta = events
        .iter()
        .find(|e| e.name.as_deref() == Some("message_delta"))
        .unwrap();
    assert_eq!(delta.json()["delta"]["stop_reason"], "tool_use");
}

#[test]
fn anthropic_tool_search_stream_finds_then_calls() {
    let search = anthropic::ToolSearch {
        id: "srvtoolu_01S".to_owned(),
        pattern: "(?i)read".to_owned(),
        found: vec!["read_file".to_owned(), "read_dir".to_owned()],
    };
    let events = sse::parse(&anthropic::stream_with_tool_search(&search, &tool(), USAGE));
    let blocks: Vec<Value> = events
        .iter()
        .filter(|e| e.name.as_deref() == Some("content_block_start"))
        .map(|e| e.json())
        .collect();
    let kinds: Vec<&str> = blocks
        .iter()
        .map(|b| b["content_block"]["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["server_tool_use", "tool_search_tool_result", "tool_use"]
    );
    assert_eq!(blocks[0]["content_block"]["name"], "tool_search_tool_regex");
    assert_eq!(
        blocks[1]["content_block"],
        json!({"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_01S",
               "content": {"type": "tool_search_tool_search_result", "tool_references": [
                   {"type": "tool_reference", "tool_name": "read_file"},
                   {"type": "tool_reference", "tool_name": "read_dir"}]}})
    );
    assert_eq!(blocks[2]["index"], 2);
    // The search input arrives as one input_json_delta on block 0.
    let search_input: Vec<Value> = events
        .iter()
        .filter(|e| e.name.as_deref() == Some("content_block_delta"))
        .map(|e| e.json())
        .filter(|d| d["index"] == 0)
        .map(|d| serde_json::from_str(d["delta"]["partial_json"].as_str().unwrap()).unwrap())
        .collect();
    assert_eq!(search_input, [json!({"pattern": "(?i)read"})]);
    let delta = events
        .iter()
        .find(|e| e.name.as_deref() == Some("message_delta"))
        .unwrap();
    assert_eq!(delta.json()["delta"]["stop_reason"], "tool_use");
}

#[test]
fn anthropic_errors_use_the_documented_types() {
    let body = parse(&anthropic::error_body(429, "slow down"));
    assert_eq!(
        body,
        json!({"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"},
               "request_id": "req_01MockUpstream"})
    );
    assert_eq!(
        parse(&anthropic::error_body(529, "x"))["error"]["type"],
        "overloaded_error"
    );
    assert_eq!(
        parse(&anthropic::error_body(400, "x"))["error"]["type"],
        "invalid_request_error"
    );
    let events = sse::parse(&anthropic::error_event("overloaded_error", "Overloaded"));
    assert_eq!(names(&events), ["error"]);
    assert_eq!(events[0].json()["error"]["type"], "overloaded_error");
    assert_eq!(
        parse(&anthropic::count_tokens(77)),
        json!({"input_tokens": 77})
    );
}

#[test]
fn chat_usage_counts_cached_tokens_inside_prompt_tokens() {
    let completion = parse(&chat::completion("ok", USAGE));
    assert_eq!(completion["object"], "chat.completion");
    assert_eq!(completion["choices"][0]["message"]["content"], "ok");
    assert_eq!(completion["choices"][0]["finish_reason"], "stop");
    let usage = &completion["usage"];
    assert_eq!(usage["prompt_tokens"], 21 + 300 + 5120);
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 5120);
    assert_eq!(usage["prompt_tokens_details"]["cache_write_tokens"], 300);
    assert_eq!(usage["completion_tokens"], 48);
    assert_eq!(usage["total_tokens"], 21 + 300 + 5120 + 48);

    let with_tool = parse(&chat::completion_with_tool("", &tool(), USAGE));
    let message = &with_tool["choices"][0]["message"];
    assert_eq!(message["content"], Value::Null);
    assert_eq!(
        message["tool_calls"][0]["function"]["arguments"],
        tool().arguments_json
    );
    assert_eq!(with_tool["choices"][0]["finish_reason"], "tool_calls");
}

#[test]
fn chat_stream_has_a_usage_chunk_only_when_asked_and_ends_with_done() {
    let with_usage = sse::parse(&chat::stream(&["a", "b"], Some(USAGE)));
    assert!(
        with_usage.iter().all(|e| e.name.is_none()),
        "chat streams have no event names"
    );
    assert_eq!(with_usage.last().unwrap().data, "[DONE]");
    let chunks: Vec<Value> = with_usage[..with_usage.len() - 1]
        .iter()
        .map(|e| e.json())
        .collect();
    let usage_chunk = chunks.last().unwrap();
    assert_eq!(usage_chunk["choices"], json!([]));
    assert_eq!(usage_chunk["usage"]["prompt_tokens"], 5441);
    assert_eq!(
        usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"],
        5120
    );
    for chunk in &chunks[..chunks.len() - 1] {
        assert_eq!(chunk["object"], "chat.completion.chunk");
        assert_eq!(
            chunk["usage"],
            Value::Null,
            "other chunks carry usage: null"
        );
        assert_eq!(chunk["choices"].as_array().unwrap().len(), 1);
    }
    let text: String = chunks
        .iter()
        .filter_map(|c| {
            c["choices"].get(0)?["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert_eq!(text, "ab");
    assert_eq!(
        chunks[chunks.len() - 2]["choices"][0]["finish_reason"],
        "stop"
    );

    let without = sse::parse(&chat::stream(&["a", "b"], None));
    assert_eq!(without.len(), with_usage.len() - 1);
    assert!(
        without[..without.len() - 1]
            .iter()
            .all(|e| e.json().get("usage").is_none())
    );
    assert_eq!(without.last().unwrap().data, "[DONE]");
}

#[test]
fn chat_tool_stream_joins_argument_fragments() {
    let events = sse::parse(&chat::stream_with_tool(&[], &tool(), None));
    let mut arguments = String::new();
    let mut ids = Vec::new();
    for event in &events[..events.len() - 1] {
        let chunk = event.json();
        if let Some(call) = chunk["choices"][0]["delta"]["tool_calls"].get(0) {
            assert_eq!(call["index"], 0);
            if let Some(id) = call["id"].as_str() {
                ids.push(id.to_owned());
                assert_eq!(call["function"]["name"], "read_file");
            }
            arguments.push_str(call["function"]["arguments"].as_str().unwrap());
        }
    }
    assert_eq!(ids, ["toolu_01B"]);
    assert_eq!(arguments, tool().arguments_json);
    let finish = events[events.len() - 2].json();
    assert_eq!(finish["choices"][0]["finish_reason"], "tool_calls");
    let error = sse::parse(&chat::error_event("boom"));
    assert_eq!(error[0].json()["error"]["message"], "boom");
}

#[test]
fn responses_json_and_stream_report_openai_usage() {
    let response = parse(&responses::response("done", USAGE));
    assert_eq!(response["object"], "response");
    assert_eq!(response["status"], "completed");
    assert_eq!(response["output"][0]["content"][0]["text"], "done");
    assert_eq!(response["usage"]["input_tokens"], 5441);
    assert_eq!(
        response["usage"]["input_tokens_details"]["cached_tokens"],
        5120
    );
    assert_eq!(response["usage"]["output_tokens"], 48);
    assert_eq!(response["usage"]["total_tokens"], 5489);

    let body = responses::stream(&["do", "ne"], USAGE);
    assert!(!String::from_utf8_lossy(&body).contains("[DONE]"));
    let events = sse::parse(&body);
    assert_eq!(
        names(&events),
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed"
        ]
    );
    for (n, event) in events.iter().enumerate() {
        let data = event.json();
        assert_eq!(data["type"], event.name.as_deref().unwrap());
        assert_eq!(data["sequence_number"], n);
    }
    assert_eq!(events[0].json()["response"]["usage"], Value::Null);
    let completed = events.last().unwrap().json();
    assert_eq!(completed["response"]["usage"], response["usage"]);
    assert_eq!(completed["response"]["output"], response["output"]);
    assert_eq!(events[6].json()["text"], "done");
}

#[test]
fn responses_tool_stream_and_errors() {
    let events = sse::parse(&responses::stream_with_tool(&[], &tool(), USAGE));
    let arguments: String = events
        .iter()
        .filter(|e| e.name.as_deref() == Some("response.function_call_arguments.delta"))
        .map(|e| e.json()["delta"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(arguments, tool().arguments_json);
    let completed = events.last().unwrap().json();
    let item = &completed["response"]["output"][0];
    assert_eq!(item["type"], "function_call");
    assert_eq!(item["call_id"], "toolu_01B");
    assert_eq!(item["arguments"], tool().arguments_json);
    assert_eq!(
        parse(&responses::response_with_tool("", &tool(), USAGE))["output"],
        completed["response"]["output"]
    );

    let error = parse(&responses::error_body(401, "bad key"));
    assert_eq!(
        error,
        json!({"error": {"message": "bad key", "type": "invalid_request_error", "param": null,
                         "code": "invalid_api_key"}})
    );
    assert_eq!(
        parse(&chat::error_body(500, "x"))["error"]["type"],
        "server_error"
    );
    let event = sse::parse(&responses::error_event("server_error", "boom", 7));
    assert_eq!(event[0].json()["sequence_number"], 7);
}

#[test]
fn splitters_cover_the_input_and_cut_where_asked() {
    let body = chat::stream(&["h\u{e9}llo"], Some(USAGE));
    let events = fixtures::split_at_events(&body, Duration::from_millis(5));
    assert_eq!(events.len(), sse::parse(&body).len());
    assert!(events.iter().all(|c| c.bytes.ends_with(b"\n\n")));
    assert_eq!(events[0].delay, Duration::ZERO);
    assert!(
        events[1..]
            .iter()
            .all(|c| c.delay == Duration::from_millis(5))
    );

    let every = fixtures::split_every(&body, 10, Duration::ZERO);
    assert!(every[..every.len() - 1].iter().all(|c| c.bytes.len() == 10));
    assert_eq!(every.len(), body.len().div_ceil(10));
    let joined: Vec<u8> = every.iter().flat_map(|c| c.bytes.to_vec()).collect();
    assert_eq!(joined, body.as_ref());
    assert_eq!(fixtures::split_every(b"abc", 0, Duration::ZERO).len(), 3);

    let inside_e_acute = body
        .windows(2)
        .position(|w| w == "\u{e9}".as_bytes())
        .unwrap()
        + 1;
    let cut =
        fixtures::split_at_offsets(&body, &[inside_e_acute, inside_e_acute, 0], Duration::ZERO);
    assert_eq!(cut.len(), 2);
    assert!(
        std::str::from_utf8(&cut[0].bytes).is_err(),
        "the cut is inside a character"
    );
    assert_eq!(
        [cut[0].bytes.as_ref(), cut[1].bytes.as_ref()].concat(),
        body.as_ref()
    );

    let crlf = fixtures::split_at_events(b"data: a\r\n\r\ndata: b\n\ntrailing", Duration::ZERO);
    let pieces: Vec<&[u8]> = crlf.iter().map(|c| c.bytes.as_ref()).collect();
    assert_eq!(
        pieces,
        [b"data: a\r\n\r\n".as_ref(), b"data: b\n\n", b"trailing"]
    );
}

#[test]
fn every_capture_loads_with_its_exact_body_and_header_order() {
    let dir = fixtures_dir().unwrap();
    let captures = load_captures(&dir).unwrap();

    // Count and decode the files independently of the loader.
    let mut expected = Vec::new();
    for client in std::fs::read_dir(dir.join("captures")).unwrap() {
        let client = client.unwrap().path();
        if !client.is_dir() {
            continue;
        }
        for scenario in std::fs::read_dir(&client).unwrap() {
            let scenario = scenario.unwrap().path();
            for file in std::fs::read_dir(&scenario).unwrap() {
                let file = file.unwrap().path();
                let name = file.file_name().unwrap().to_str().unwrap().to_owned();
                if name.starts_with("req") && name.ends_with(".json") {
                    expected.push(file);
                }
            }
        }
    }
    assert!(
        expected.len() >= 30,
        "found only {} captures",
        expected.len()
    );
    assert_eq!(captures.len(), expected.len());

    for capture in &captures {
        let file = dir
            .join("captures")
            .join(&capture.client_folder)
            .join(&capture.scenario)
            .join(format!("{}.json", capture.name));
        let text = std::fs::read_to_string(&file).unwrap();
        let raw: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(
            capture.body.as_ref(),
            raw["body"].as_str().unwrap().as_bytes(),
            "{}",
            capture.id()
        );
        assert_eq!(capture.method, raw["method"]);
        assert_eq!(capture.path, raw["path"]);
        // Header order is the file's order: each name appears in the text after the previous.
        let mut position = 0;
        for (name, value) in &capture.headers {
            assert_eq!(raw["headers"][name.as_str()], value.as_str());
            let found = text[position..].find(&format!("\"{name}\":")).unwrap();
            position += found + 1;
        }
        assert_eq!(
            capture.headers.len(),
            raw["headers"].as_object().unwrap().len()
        );
    }

    let claude: Vec<&Capture> = captures
        .iter()
        .filter(|c| c.client_folder.starts_with("claude-code") && c.scenario == "fix-calc")
        .collect();
    assert_eq!(claude[0].name, "req001");
    assert_eq!(claude[0].path, "/v1/messages?beta=true");
    assert_eq!(
        claude[0].id(),
        format!("{}/fix-calc/req001", claude[0].client_folder)
    );
    let body: Value = serde_json::from_slice(&claude[0].body).unwrap();
    assert!(body["messages"].is_array());
}

#[test]
fn the_recorded_sessions_load_as_captures_without_the_recording_machine_s_paths() {
    let recorded = pith_testkit::fixtures::recorded().expect("recorded sessions load");
    let long: Vec<_> = recorded
        .iter()
        .filter(|c| c.client_folder == "claude-code-2.1.328" && c.scenario == "fix-calc-long")
        .collect();
    assert_eq!(long.len(), 11);
    for capture in long {
        let body: Value = serde_json::from_slice(&capture.body).expect("a JSON body");
        assert!(body["tools"].is_array(), "{}", capture.id());
        let text = String::from_utf8_lossy(&capture.body);
        assert!(!text.contains("/tmp/"), "{}", capture.id());
        assert!(text.contains("/home/dev/calc"), "{}", capture.id());
        assert!(
            capture
                .headers
                .iter()
                .all(|(k, v)| k != "x-api-key" || v == "<redacted>"),
            "{}",
            capture.id()
        );
    }
}
