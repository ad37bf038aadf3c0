//! The real OpenCode 1.18.33 (the version of the captures) through pith, against the mock
//! upstream: a session in which the model searches the tools pith deferred, then calls the one
//! it found. scripts/test installs OpenCode and sets `PITH_TEST_OPENCODE`.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use pith_testkit::fixtures::anthropic::{self, ToolSearch};
use pith_testkit::fixtures::{ToolCall, Usage};
use pith_testkit::ollama::closed_port_url;
use pith_testkit::{MockUpstream, Reply};
use serde_json::Value;

use crate::support::*;

const TASK: &str = "the test fails, fix calc.py";

fn opencode() -> PathBuf {
    match std::env::var_os("PITH_TEST_OPENCODE") {
        Some(p) => PathBuf::from(p),
        None => panic!(
            "PITH_TEST_OPENCODE is not set: run the tests through scripts/test, which installs \
             OpenCode and sets it"
        ),
    }
}

/// The captures' scenario: a git repository with a buggy `calc.py` and its test, configured to
/// reach Anthropic through `base_url`.
fn project(dir: &Path, base_url: &str) {
    std::fs::write(dir.join("calc.py"), "def add(a, b):\n    return a - b\n").unwrap();
    std::fs::write(
        dir.join("test_calc.py"),
        "from calc import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
    )
    .unwrap();
    let config = serde_json::json!({
        "model": "anthropic/claude-sonnet-4-5",
        "provider": {"anthropic": {"options": {"baseURL": base_url, "apiKey": "test-key"}}},
    });
    std::fs::write(dir.join("opencode.json"), config.to_string()).unwrap();
    let git = |args: &[&str]| {
        let ok = Command::new("git")
            .args(args)
            .current_dir(dir)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.test")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.test")
            .output()
            .unwrap()
            .status
            .success();
        assert!(ok, "git {args:?}");
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-qm", "init"]);
}

/// `opencode run TASK` in `dir` with a private home, nothing fetched from outside loopback
/// (models list, updates, sharing, LSP downloads, default plugins; the package registry is a
/// closed loopback port), killed after `limit`.
fn run_opencode(dir: &Path, home: &Path, limit: Duration) -> Output {
    let closed = closed_port_url().unwrap();
    let mut child = Command::new(opencode())
        .args(["run", TASK])
        .current_dir(dir)
        // OpenCode finds its project through PWD, which current_dir does not set; the config
        // is also named outright, so a missed project never falls back to a hosted model.
        .env("PWD", dir)
        .env("OPENCODE_CONFIG", dir.join("opencode.json"))
        .env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("NPM_CONFIG_REGISTRY", &closed)
        .env("BUN_CONFIG_REGISTRY", &closed)
        .env("OPENCODE_DISABLE_AUTOUPDATE", "1")
        .env("OPENCODE_DISABLE_MODELS_FETCH", "1")
        .env("OPENCODE_DISABLE_SHARE", "1")
        .env("OPENCODE_DISABLE_LSP_DOWNLOAD", "1")
        .env("OPENCODE_DISABLE_DEFAULT_PLUGINS", "1")
        .env("OPENCODE_DISABLE_CLAUDE_CODE", "1")
        .env_remove("ANTHROPIC_API_KEY")
        .env_remove("ANTHROPIC_BASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + limit;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
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
    project(work.path(), &format!("{}/v1", pith.url()));

    let out = run_opencode(work.path(), home.path(), Duration::from_secs(180));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "opencode failed ({:?})\nstdout:\n{stdout}\nstderr:\n{stderr}\npith:\n{}",
        out.status,
        pith.stderr()
    );
    assert!(stdout.contains("Fixed: add now adds."), "{stdout}");
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
    assert!(history.contains("calc.py"), "grep's result: {history}");
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
