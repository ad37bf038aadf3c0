//! Realism check: the official Anthropic and OpenAI Python SDKs parse the mock's fixture replies
//! into exactly the text, tool calls and usage the fixtures put in.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use pith_testkit::fixtures::{self, ToolCall, Usage, anthropic, chat, responses};
use pith_testkit::{MockUpstream, Reply};
use serde_json::{Value, json};

/// Distinct numbers per call, so a reply parsed for the wrong call cannot pass.
fn usage(k: u64) -> Usage {
    Usage {
        input: 100 + k,
        output: 200 + k,
        cache_write: 300 + k,
        cache_write_1h: 0,
        cache_read: 4000 + k,
    }
}

fn python() -> PathBuf {
    match std::env::var_os("PITH_TEST_PYTHON") {
        Some(path) => PathBuf::from(path),
        None => panic!(
            "PITH_TEST_PYTHON is not set: run the tests through scripts/test, which creates .venv \
             with the official SDKs (tests/python/requirements.txt) and sets it"
        ),
    }
}

fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/python/sdk_clients.py")
}

fn run_script(mock: &MockUpstream) -> Value {
    run_script_with(mock, &[])
}

fn run_script_with(mock: &MockUpstream, args: &[&str]) -> Value {
    let output = Command::new(python())
        .arg(script())
        .args(["--base-url", &mock.url(), "--api-key", "sk-test-mock"])
        .args(args)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "sdk_clients.py failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    serde_json::from_slice(&output.stdout).unwrap()
}

fn anthropic_usage(u: Usage) -> Value {
    json!({"input_tokens": u.input, "output_tokens": u.output,
           "cache_creation_input_tokens": u.cache_write, "cache_read_input_tokens": u.cache_read})
}

fn openai_chat_usage(u: Usage) -> Value {
    json!({"prompt_tokens": u.input + u.cache_write + u.cache_read, "completion_tokens": u.output,
           "total_tokens": u.input + u.cache_write + u.cache_read + u.output,
           "cached_tokens": u.cache_read, "cache_write_tokens": u.cache_write})
}

fn openai_responses_usage(u: Usage) -> Value {
    json!({"input_tokens": u.input + u.cache_write + u.cache_read, "output_tokens": u.output,
           "total_tokens": u.input + u.cache_write + u.cache_read + u.output,
           "cached_tokens": u.cache_read, "cache_write_tokens": u.cache_write})
}

#[test]
fn official_sdks_parse_fixture_replies_exactly() {
    let mock = MockUpstream::start().unwrap();
    // Quotes, backslashes, newlines and multi-byte characters; the streamed replies are cut
    // every few bytes, through lines and characters, as a network may deliver them.
    let deltas: &[&str] = &["Hé \"quoted\"", " back\\slash", "\nnew line ✓ 🦀"];
    let text = deltas.concat();
    let tool = ToolCall::new(
        "toolu_01Mock",
        "read_file",
        r#"{"path":"src/é.rs","lines":[1,2]}"#,
    );
    let call = ToolCall::new(
        "call_Mock01",
        "read_file",
        r#"{"path":"src/é.rs","lines":[1,2]}"#,
    );
    let arguments = json!({"path": "src/é.rs", "lines": [1, 2]});
    let cut = |body: bytes::Bytes| Reply::stream(fixtures::split_every(&body, 7, Duration::ZERO));
    let paced = |body: bytes::Bytes| {
        Reply::stream(fixtures::split_at_events(&body, Duration::from_millis(1)))
    };

    mock.push(Reply::json(anthropic::message(&text, usage(1))));
    mock.push(cut(anthropic::stream(deltas, usage(2))));
    mock.push(Reply::json(anthropic::message_with_tool(
        "Reading.",
        &tool,
        usage(3),
    )));
    mock.push(paced(anthropic::stream_with_tool(deltas, &tool, usage(4))));
    mock.push(Reply::json(anthropic::count_tokens(4321)));
    mock.push(Reply::json(chat::completion(&text, usage(6))));
    mock.push(cut(chat::stream(deltas, Some(usage(7)))));
    mock.push(paced(chat::stream_with_tool(&[], &call, Some(usage(8)))));
    mock.push(Reply::json(responses::response(&text, usage(9))));
    mock.push(cut(responses::stream(deltas, usage(10))));
    mock.push(paced(responses::stream_with_tool(deltas, &call, usage(11))));

    let results = run_script(&mock);
    let r = |name: &str| {
        results
            .get(name)
            .unwrap_or_else(|| panic!("no result for {name}: {results}"))
    };

    assert_eq!(
        r("anthropic.messages.create"),
        &json!({"text": text, "stop_reason": "end_turn", "usage": anthropic_usage(usage(1)),
                "tool_calls": [], "block_types": ["text"]})
    );
    let streamed = r("anthropic.messages.stream");
    assert_eq!(streamed["text"], text);
    assert_eq!(streamed["stop_reason"], "end_turn");
    assert_eq!(streamed["usage"], anthropic_usage(usage(2)));
    assert_eq!(
        streamed["events"],
        json!({"content_block_delta": 3, "content_block_start": 1, "content_block_stop": 1,
               "message_delta": 1, "message_start": 1, "message_stop": 1, "text": 3}),
        "the SDK drops ping and adds one text event per text_delta"
    );
    assert_eq!(
        r("anthropic.messages.create.tool"),
        &json!({"text": "Reading.", "stop_reason": "tool_use", "usage": anthropic_usage(usage(3)),
                "tool_calls": [{"id": "toolu_01Mock", "name": "read_file", "input": arguments}],
                "block_types": ["text", "tool_use"]})
    );
    let streamed_tool = r("anthropic.messages.stream.tool");
    assert_eq!(streamed_tool["text"], text);
    assert_eq!(streamed_tool["stop_reason"], "tool_use");
    assert_eq!(streamed_tool["usage"], anthropic_usage(usage(4)));
    assert_eq!(
        streamed_tool["tool_calls"],
        json!([{"id": "toolu_01Mock", "name": "read_file", "input": arguments}])
    );
    assert_eq!(streamed_tool["events"]["content_block_start"], 2);
    assert_eq!(
        r("anthropic.messages.count_tokens"),
        &json!({"input_tokens": 4321})
    );

    assert_eq!(
        r("openai.chat.create"),
        &json!({"text": text, "finish_reason": "stop", "usage": openai_chat_usage(usage(6)),
                "tool_calls": []})
    );
    assert_eq!(
        r("openai.chat.stream"),
        &json!({"text": text, "finish_reason": "stop", "usage": openai_chat_usage(usage(7)),
                "tool_calls": [], "chunks": 1 + deltas.len() + 1 + 1, "usage_chunks": 1})
    );
    assert_eq!(
        r("openai.chat.stream.tool"),
        &json!({"text": "", "finish_reason": "tool_calls", "usage": openai_chat_usage(usage(8)),
                "tool_calls": [{"id": "call_Mock01", "name": "read_file", "arguments": arguments}],
                "chunks": 1 + 3 + 1 + 1, "usage_chunks": 1})
    );

    assert_eq!(
        r("openai.responses.create"),
        &json!({"text": text, "status": "completed", "usage": openai_responses_usage(usage(9)),
                "tool_calls": []})
    );
    let responses_stream = r("openai.responses.stream");
    assert_eq!(responses_stream["text"], text);
    assert_eq!(responses_stream["completed_text"], text);
    assert_eq!(responses_stream["status"], "completed");
    assert_eq!(responses_stream["usage"], openai_responses_usage(usage(10)));
    assert_eq!(responses_stream["sequence_ok"], true);
    assert_eq!(
        responses_stream["events"]["response.output_text.delta"],
        deltas.len()
    );
    assert_eq!(responses_stream["events"]["response.completed"], 1);
    let responses_tool = r("openai.responses.stream.tool");
    assert_eq!(responses_tool["completed_text"], text);
    assert_eq!(responses_tool["usage"], openai_responses_usage(usage(11)));
    assert_eq!(
        responses_tool["tool_calls"],
        json!([{"call_id": "call_Mock01", "name": "read_file", "arguments": arguments}])
    );
    assert_eq!(responses_tool["sequence_ok"], true);
    assert_eq!(
        responses_tool["events"]["response.function_call_arguments.delta"],
        2
    );

    // The SDKs sent one request per call, to the paths the mock serves, and the streamed
    // ones asked for what the script documents.
    let received = mock.received();
    let paths: Vec<&str> = received.iter().map(|r| r.path()).collect();
    assert_eq!(
        paths,
        [
            "/v1/messages",
            "/v1/messages",
            "/v1/messages",
            "/v1/messages",
            "/v1/messages/count_tokens",
            "/v1/chat/completions",
            "/v1/chat/completions",
            "/v1/chat/completions",
            "/v1/responses",
            "/v1/responses",
            "/v1/responses",
            "/v1/responses/input_tokens"
        ]
    );
    // anthropic 2.14 sends the API key as a bearer token, not as x-api-key.
    assert_eq!(
        received[0].header("authorization"),
        Some("Bearer sk-test-mock")
    );
    assert!(received[0].header("anthropic-version").is_some());
    assert_eq!(
        received[5].header("authorization"),
        Some("Bearer sk-test-mock")
    );
    let chat_stream = received[6].body_json().unwrap();
    assert_eq!(chat_stream["stream"], true);
    assert_eq!(chat_stream["stream_options"]["include_usage"], true);
    assert_eq!(received[9].body_json().unwrap()["stream"], true);
    assert_eq!(mock.aborted_streams(), 0);
}

/// A mock that counts as a provider does: both official SDKs read its token counters, each
/// count the mock's tokenizer over the prompt the SDK sent.
#[test]
fn official_sdks_read_the_mock_token_counters() {
    let mock = MockUpstream::start().unwrap();
    mock.count_prompts(true);
    let results = run_script_with(
        &mock,
        &[
            "--calls",
            "anthropic.messages.count_tokens,openai.responses.input_tokens",
        ],
    );
    let received = mock.received();
    let counted = |path: &str| {
        let r = received.iter().find(|r| r.path() == path).unwrap();
        fixtures::tokens::prompt_tokens(&r.body)
    };
    let anthropic = counted("/v1/messages/count_tokens");
    assert!(anthropic > 0);
    assert_eq!(
        results["anthropic.messages.count_tokens"],
        json!({"input_tokens": anthropic})
    );
    assert_eq!(
        results["openai.responses.input_tokens"],
        json!({"object": "response.input_tokens", "input_tokens": counted("/v1/responses/input_tokens")})
    );
}

#[test]
fn official_sdks_accept_the_default_replies() {
    let mock = MockUpstream::start().unwrap();
    let results = run_script(&mock);
    let text = fixtures::DEFAULT_DELTAS.concat();
    let usage = fixtures::DEFAULT_USAGE;
    for name in [
        "anthropic.messages.create",
        "anthropic.messages.stream",
        "anthropic.messages.create.tool",
        "anthropic.messages.stream.tool",
    ] {
        assert_eq!(results[name]["text"], text, "{name}");
        assert_eq!(results[name]["usage"], anthropic_usage(usage), "{name}");
    }
    assert_eq!(
        results["anthropic.messages.count_tokens"]["input_tokens"],
        usage.prompt_total()
    );
    assert_eq!(
        results["openai.responses.input_tokens"],
        json!({"object": "response.input_tokens", "input_tokens": usage.prompt_total()})
    );
    for name in [
        "openai.chat.create",
        "openai.chat.stream",
        "openai.chat.stream.tool",
    ] {
        assert_eq!(results[name]["text"], text, "{name}");
        assert_eq!(results[name]["usage"], openai_chat_usage(usage), "{name}");
    }
    for name in [
        "openai.responses.create",
        "openai.responses.stream",
        "openai.responses.stream.tool",
    ] {
        assert_eq!(results[name]["text"], text, "{name}");
        assert_eq!(
            results[name]["usage"],
            openai_responses_usage(usage),
            "{name}"
        );
    }
    assert_eq!(mock.request_count(), 12);
}
