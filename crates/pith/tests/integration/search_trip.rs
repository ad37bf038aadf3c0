//! The tool search round trip through the real proxy: answers to requests pith added its tool
//! search to reach the client without the search blocks (the official SDK parses them,
//! streamed and not), and the blocks come back in the session's next request, also after a
//! restart of pith.

use pith_testkit::fixtures::anthropic::{self, ToolSearch};
use pith_testkit::fixtures::{self, ToolCall};
use pith_testkit::{MockUpstream, Reply};
use serde_json::{Value, json};

use crate::support::*;

fn search() -> ToolSearch {
    ToolSearch {
        id: "srvtoolu_01Ticket".to_owned(),
        pattern: "ticket".to_owned(),
        found: vec!["ticket_op_3".to_owned()],
    }
}

fn ticket_call() -> ToolCall {
    ToolCall::new("toolu_01Ticket", "ticket_op_3", r#"{"key":"A-1"}"#)
}

fn mentions(body: &[u8], needle: &str) -> bool {
    body.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// A mock whose next two answers search the deferred tools, then call the ticket tool: one
/// whole JSON, one streamed.
fn searching_mock() -> MockUpstream {
    let mock = MockUpstream::start().unwrap();
    let usage = fixtures::DEFAULT_USAGE;
    mock.push(Reply::json(anthropic::message_with_tool_search(
        &search(),
        &ticket_call(),
        usage,
    )));
    mock.push(Reply::sse(anthropic::stream_with_tool_search(
        &search(),
        &ticket_call(),
        usage,
    )));
    mock
}

#[test]
fn the_sdk_parses_answers_with_the_search_taken_out_streamed_and_not() {
    let mock = searching_mock();
    let usage = fixtures::DEFAULT_USAGE;
    let pith = PithProxy::start(&mock.url(), &[]);
    let calls = "anthropic.messages.create.tool,anthropic.messages.stream.tool";
    let out = std::process::Command::new(python())
        .arg(python_script("sdk_clients.py"))
        .args([
            "--base-url",
            &pith.url(),
            "--calls",
            calls,
            "--more-tools",
            "30",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sdk_clients.py failed:\n{}\npith log:\n{}",
        String::from_utf8_lossy(&out.stderr),
        pith.stderr()
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for call in calls.split(',') {
        assert_eq!(
            v[call]["block_types"],
            json!(["tool_use"]),
            "{call}: {}",
            v[call]
        );
        assert_eq!(v[call]["tool_calls"][0]["name"], "ticket_op_3", "{call}");
        assert_eq!(
            v[call]["tool_calls"][0]["input"],
            json!({"key": "A-1"}),
            "{call}"
        );
        assert_eq!(v[call]["stop_reason"], "tool_use", "{call}");
    }
    // The streamed answer's usage is the provider's, hidden blocks included.
    assert_eq!(
        v["anthropic.messages.stream.tool"]["usage"]["output_tokens"],
        usage.output
    );
    let rows = pith.wait_rows(2);
    for row in &rows {
        let disclosed = disclosed(row).unwrap_or_default();
        assert!(
            disclosed.starts_with("defer;") && disclosed.ends_with(", search_hide;searches=1"),
            "{disclosed}"
        );
        assert_eq!(
            row.usage.map(|u| u.output),
            Some(usage.output),
            "the ledger counts the hidden blocks' tokens"
        );
    }
    let out = pith_stats(&pith, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "transform tool search hiding (search_hide): changed 2 requests; hid 2 tool search \
             results from the client's answers\n"
        ),
        "{text}"
    );
    // Deferral's cost in turns: each search is the model coming back for a tool it withheld.
    assert!(
        text.contains(
            "  came back for what it withheld: the model searched for a deferred tool 2 times, \
             in 2 requests with tools deferred\n"
        ),
        "{text}"
    );
    let json: Value = serde_json::from_slice(&pith_stats(&pith, &["--json"]).stdout).unwrap();
    assert_eq!(
        json["transforms"]["defer"]["came_back"],
        json!({"times": 2, "of": 2})
    );
}

/// A request with 30 tools (enough to defer) and `messages`, in session `ses_r`.
fn request_body(messages: Value) -> String {
    let mut tools = vec![json!({"name": "read_file", "description": "Read a file",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}})];
    for i in 0..30 {
        tools.push(json!({
            "name": format!("ticket_op_{i}"),
            "description": format!("Operation {i} on the ticket tracker: {}", "reads and updates fields. ".repeat(40)),
            "input_schema": {"type": "object", "properties": {"key": {"type": "string"}}},
        }));
    }
    json!({"model": "claude-sonnet-4-6", "max_tokens": 256, "stream": true,
           "messages": messages, "tools": tools})
    .to_string()
}

fn post(pith: &PithProxy, body: String) -> (http::StatusCode, Vec<u8>) {
    let rt = runtime();
    let client = client();
    rt.block_on(async {
        let (status, _, frames) = read_all(
            send(
                &client,
                request(
                    "POST",
                    &format!("{}/v1/messages", pith.url()),
                    &headers(&[
                        ("content-type", "application/json"),
                        ("anthropic-version", "2023-06-01"),
                        ("x-session-id", "ses_r"),
                    ]),
                    body,
                ),
            )
            .await,
        )
        .await;
        (status, concat(&frames))
    })
}

#[test]
fn hidden_blocks_survive_a_restart_of_pith() {
    let mock = MockUpstream::start().unwrap();
    mock.push(Reply::sse(anthropic::stream_with_tool_search(
        &search(),
        &ticket_call(),
        fixtures::DEFAULT_USAGE,
    )));
    mock.set_default(Reply::sse(anthropic::stream(
        &["Done."],
        fixtures::DEFAULT_USAGE,
    )));
    let mut pith = PithProxy::start(&mock.url(), &[]);
    let first = json!([{"role": "user", "content": "update ticket A-1"}]);
    let (status, answer) = post(&pith, request_body(first));
    assert_eq!(status, 200);
    assert!(
        !mentions(&answer, "server_tool_use"),
        "the client saw the search"
    );
    assert!(mentions(&answer, "toolu_01Ticket"));

    assert!(pith.stop().success());
    let home = std::mem::replace(&mut pith.home, tempfile::tempdir().unwrap());
    let pith = PithProxy::start_in(home, &mock.url(), &mock.url(), &[]);
    // The client's next request: its history as an SDK that drops server blocks writes it.
    let next = json!([
        {"role": "user", "content": "update ticket A-1"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_01Ticket",
            "name": "ticket_op_3", "input": {"key": "A-1"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01Ticket",
            "content": "updated"}]}
    ]);
    let (status, _) = post(&pith, request_body(next));
    assert_eq!(status, 200);
    let got = mock.received();
    assert_eq!(got.len(), 2);
    let upstream = got[1].body_json().unwrap();
    let types: Vec<&str> = upstream["messages"][1]["content"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["type"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        types,
        ["server_tool_use", "tool_search_tool_result", "tool_use"]
    );
    assert_eq!(
        upstream["messages"][1]["content"][0]["input"],
        json!({"pattern": "ticket"})
    );
    assert!(
        upstream["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["defer_loading"] == true),
        "deferral went on after the restart"
    );
    assert_eq!(
        got[0].body_json().unwrap()["tools"],
        upstream["tools"],
        "the same tools section on both turns"
    );
    pith.wait_rows(2);
    let out = pith_stats(&pith, &[]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains(
            "transform tool search restore (search_restore): changed 1 request; restored 1 hidden \
             tool search result\n"
        ),
        "{text}"
    );
}

#[test]
fn a_team_store_that_does_not_answer_holds_a_search_answer_no_longer_than_its_bound_and_the_row_says_so()
 {
    // A PostgreSQL that accepts connections and never says a word.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "postgres://pith@{}/pith?connect_timeout=30",
        silent.local_addr().unwrap()
    );
    let mock = searching_mock();
    let pith = PithProxy::start(
        &mock.url(),
        &[("PITH_STORE_URL", &url), ("PITH_STORE_TIMEOUT", "300ms")],
    );
    let first = json!([{"role": "user", "content": "update ticket A-1"}]);
    let mut whole: Value = serde_json::from_str(&request_body(first.clone())).unwrap();
    whole["stream"] = json!(false);
    // The whole answer waits for the write, gives up at the bound, and goes on without it.
    for body in [whole.to_string(), request_body(first)] {
        let (status, answer) = post(&pith, body);
        assert_eq!(status, 200);
        assert!(
            !mentions(&answer, "server_tool_use"),
            "the client saw the search"
        );
        assert!(mentions(&answer, "toolu_01Ticket"));
    }
    // Each row says its block did not reach the team store (the first: the bound passed;
    // the second: the store was resting after that).
    let rows = pith.wait_rows(2);
    let hid: Vec<String> = rows.iter().filter_map(disclosed).collect();
    assert_eq!(hid.len(), 2, "{hid:?}");
    for d in &hid {
        assert!(
            d.ends_with("search_hide;searches=1;not_shared=1"),
            "{hid:?}"
        );
    }
    drop(silent);
}
