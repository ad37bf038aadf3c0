//! The real OpenCode 1.18.33 (the version of the captures) through pith, against the mock
//! upstream: a session in which the model searches the tools pith deferred, then calls the one
//! it found. scripts/test installs OpenCode and sets `PITH_TEST_OPENCODE`.

use std::path::Path;

use pith_testkit::fixtures::anthropic::{self, ToolSearch};
use pith_testkit::fixtures::{ToolCall, Usage};
use pith_testkit::{MockUpstream, Reply};
use serde_json::Value;

use crate::clients;
use crate::support::*;

const TASK: &str = "the test fails, fix calc.py";

/// The captures' scenario: a git repository with a buggy `calc.py` and its test.
fn project(dir: &Path) {
    std::fs::write(dir.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        dir.join("test_calc.py"),
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    )
    .unwrap();
    clients::git_commit_all(dir);
}

fn has_tools(body: &[u8]) -> bool {
    body.windows(9).any(|w| w == b"\"tools\":[")
}

fn block_types(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .filter_map(|b| b["type"].as_str().map(str::to_owned))
        .collect()
}

fn loaded_names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t.get("defer_loading").is_none())
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn opencode_runs_a_tool_it_found_by_search_and_pith_fails_open_on_the_next_turn() {
    let mock = MockUpstream::start().unwrap();
    let usage = Usage {
        input: 100,
        output: 20,
        cache_write: 0,
        cache_read: 0,
    };
    // Turn 1: the model searches the deferred tools for grep, then calls it. Turn 2: done.
    // OpenCode's title call (no tools) races turn 1 and takes the mock's default reply.
    let search = ToolSearch {
        id: "srvtoolu_01Grep".to_owned(),
        pattern: "grep".to_owned(),
        found: vec!["grep".to_owned()],
    };
    let grep = ToolCall::new("toolu_01Grep", "grep", r#"{"pattern":"def add"}"#);
    mock.push_when(
        has_tools,
        Reply::sse(anthropic::stream_with_tool_search(&search, &grep, usage)),
    );
    mock.push_when(
        has_tools,
        Reply::sse(anthropic::stream(&["Fixed: add now adds."], usage)),
    );
    // OpenCode's 10 built-in tools are below the default threshold; defer them anyway.
    let pith = PithProxy::start(&mock.url(), &[("PITH_MIN_DEFERRED_CHARS", "0")]);
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    project(work.path());

    let base = format!("{}/v1", pith.url());
    let run = clients::opencode(work.path(), home.path(), &base, &[], TASK, clients::LIMIT);
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert!(
        run.stdout.contains("Fixed: add now adds."),
        "{}",
        run.stdout
    );
    assert_eq!(mock.queued_replies(), 0, "both turns reached the mock");

    let turns: Vec<Value> = mock
        .received()
        .iter()
        .filter(|r| has_tools(&r.body))
        .map(|r| r.body_json().unwrap())
        .collect();
    let headers: Vec<Option<String>> = mock
        .received()
        .iter()
        .filter(|r| has_tools(&r.body))
        .map(|r| r.header("anthropic-beta").map(str::to_owned))
        .collect();
    assert_eq!(turns.len(), 2, "two main-loop turns");

    // Turn 1 went out deferred: grep behind the regex search tool, the beta appended.
    let first = &turns[0];
    assert!(
        headers[0]
            .as_deref()
            .is_some_and(|b| b.contains("advanced-tool-use-2025-11-20")),
        "{headers:?}"
    );
    assert!(!loaded_names(first).contains(&"grep".to_owned()));
    assert!(loaded_names(first).contains(&"tool_search_tool_regex".to_owned()));

    // OpenCode parsed the search, ran the tool it found, and returned its result.
    let second = &turns[1];
    let history = second["messages"].to_string();
    assert!(history.contains("toolu_01Grep"), "{history}");
    // grep's result: the matching line (the task names calc.py, so the file name alone proves
    // nothing; with no `rg` the result was an error that OpenCode could not download one).
    assert!(
        history.contains("def add(a, b)"),
        "grep's result: {history}"
    );
    // What OpenCode 1.18.33 (AI SDK) sends back: the tool_use and its result, without the
    // server_tool_use and tool_search_tool_result blocks the API documents must be resent.
    let types = block_types(second);
    assert!(types.contains(&"tool_use".to_owned()), "{types:?}");
    assert!(
        !types
            .iter()
            .any(|t| t == "server_tool_use" || t == "tool_search_tool_result"),
        "OpenCode now resends the search blocks: revisit the mid-session rule ({types:?})"
    );
    // So the history calls a deferred tool that no search in it surfaced: pith cannot tell
    // this from joining a session midway, and sends the turn as the client wrote it.
    assert!(
        second["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("defer_loading").is_none())
    );
    assert!(
        !headers[1]
            .as_deref()
            .is_some_and(|b| b.contains("advanced-tool-use-2025-11-20")),
        "{headers:?}"
    );
    let rows = pith.wait_rows(3);
    let skips: Vec<&str> = rows
        .iter()
        .filter_map(|r| crate::support::unchanged_reason(r, "defer"))
        .collect();
    assert!(skips.contains(&"mid_session_join"), "{skips:?}");
    assert_eq!(
        rows.iter()
            .filter(|r| crate::support::disclosed(r).is_some_and(|t| t.starts_with("defer;")))
            .count(),
        1,
        "only turn 1 was deferred"
    );
}
