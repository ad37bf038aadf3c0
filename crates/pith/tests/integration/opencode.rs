//! The real OpenCode 1.18.33 (the version of the captures) through pith, against the mock
//! upstream: a session in which the model searches the tools pith deferred, then calls the one
//! it found. scripts/test installs OpenCode and sets `PITH_TEST_OPENCODE`.

use pith_testkit::fixtures::anthropic::{self, ToolSearch};
use pith_testkit::fixtures::{ToolCall, Usage};
use pith_testkit::{MockUpstream, Reply};
use serde_json::Value;

use crate::clients;
use crate::support::*;

const TASK: &str = "the test fails, fix calc.py";

/// Whether a request offers tools: OpenCode's main loop does, its title call does not.
pub(crate) fn has_tools(body: &[u8]) -> bool {
    body.windows(9).any(|w| w == b"\"tools\":[")
}

/// The bodies of the main-loop requests the mock received (those offering tools), parsed.
pub(crate) fn main_loop_turns(mock: &pith_testkit::MockUpstream) -> Vec<serde_json::Value> {
    mock.received()
        .into_iter()
        .filter(|r| has_tools(&r.body))
        .map(|r| r.body_json().unwrap())
        .collect()
}

/// The block types of a body's messages, in order.
pub(crate) fn block_types(body: &Value) -> Vec<String> {
    message_blocks(body)
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

/// A session's main-loop bodies as the mock received them, with their `anthropic-beta`.
struct Session {
    turns: Vec<Value>,
    betas: Vec<Option<String>>,
    /// What OpenCode printed, stdout then stderr.
    stdout: String,
}

/// The real OpenCode, through pith (with `env`), in the captures' scenario: turn 1 the model
/// searches the deferred tools for grep, then calls it; turn 2 it is done. OpenCode's title
/// call (no tools) races turn 1 and takes the mock's default reply.
fn search_session(env: &[(&str, &str)]) -> (Session, PithProxy) {
    let mock = MockUpstream::start().unwrap();
    // Each turn writes its prompt to the cache: what a bust makes the next turn write again.
    let usage = Usage {
        input: 100,
        output: 20,
        cache_write: 2_000,
        cache_write_1h: 0,
        cache_read: 0,
    };
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
    let mut env = env.to_vec();
    env.push(("PITH_MIN_DEFERRED_CHARS", "0"));
    let pith = PithProxy::start(&mock.url(), &env);
    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    clients::write_calc_project(work.path());
    let base = format!("{}/v1", pith.url());
    let run = clients::opencode(work.path(), home.path(), &base, &[], TASK, clients::LIMIT);
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert!(
        run.stdout.contains("Fixed: add now adds."),
        "{}",
        run.stdout
    );
    assert_eq!(mock.queued_replies(), 0, "both turns reached the mock");
    let main: Vec<_> = mock
        .received()
        .into_iter()
        .filter(|r| has_tools(&r.body))
        .collect();
    let session = Session {
        turns: main.iter().map(|r| r.body_json().unwrap()).collect(),
        betas: main
            .iter()
            .map(|r| r.header("anthropic-beta").map(str::to_owned))
            .collect(),
        stdout: format!("{}\n{}", run.stdout, run.stderr),
    };
    assert_eq!(session.turns.len(), 2, "two main-loop turns");
    (session, pith)
}

/// `value` without its `cache_control` members, at any depth.
fn without_markers(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| *k != "cache_control")
                .map(|(k, v)| (k.clone(), without_markers(v)))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(without_markers).collect()),
        other => other.clone(),
    }
}

#[test]
fn opencode_runs_a_tool_it_found_by_search_without_seeing_the_search_and_deferral_goes_on() {
    // Without the round trip (the control): OpenCode shows the search as a failed `invalid`
    // call and sends the history back without the search blocks; pith then takes it for a
    // session joined midway and stops deferring.
    let (control, pith) = search_session(&[("PITH_TOOL_SEARCH_ROUND_TRIP", "0")]);
    assert!(control.stdout.contains("invalid"), "{}", control.stdout);
    let types = block_types(&control.turns[1]);
    assert!(
        !types.iter().any(|t| t == "server_tool_use"),
        "OpenCode now resends the search blocks: revisit the round trip ({types:?})"
    );
    assert!(
        control.turns[1]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t.get("defer_loading").is_none()),
        "the control run kept deferring"
    );
    // ...which busts the prompt cache: turn 2's tools differ from turn 1's, and the client's
    // own prompts did not change there. The ledger's fingerprints name pith.
    pith.wait_rows(3);
    let busts = stats_busts(&pith);
    assert_eq!(busts["by_pith"], 1, "{busts}");
    // It is named as a person reads it: the tool definition that changed, and the stage.
    let bust = busts["busts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["cause"] == "pith")
        .unwrap();
    assert_eq!(bust["stage"], "defer", "{bust}");
    // Turn 2's tool list is not as long as turn 1's: the part whose count changed is named,
    // from both prompts ("tool definitions: 11, then 10" today).
    let at = bust["segment_words"].as_str().unwrap();
    assert!(at.starts_with("tool definitions: "), "{bust}");
    let text = pith_stats(&pith, &[]);
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("by pith (tool deferral): session ")
            && text.contains(&format!("{at} changed")),
        "{text}"
    );
    // The bust is charged to defer (it stopped deferring on turn 2): the 2,000 tokens turn 1
    // left cached, billed again at the write rate instead of read, taken off its saving.
    let out = pith_stats(&pith, &["--json"]);
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let defer = &report["transforms"]["defer"];
    assert_eq!(defer["bust_tokens_billed_again"], 2_000, "{defer}");
    assert!(defer["bust_charged_usd"].as_f64().unwrap() > 0.0, "{defer}");
    assert!(
        report["transforms"]
            .as_object()
            .unwrap()
            .keys()
            .all(|k| !k.starts_with("bust:")),
        "{report}"
    );
    // Among the tools (segment 0 is the model; the first deferred tool is where it differs).
    let segment = busts["busts"][0]["segment"].as_u64().unwrap_or(0);
    let tools = control.turns[0]["tools"].as_array().unwrap().len() as u64;
    assert!((1..=tools).contains(&segment), "{busts}");
    drop(pith);

    let (session, pith) = search_session(&[]);
    // OpenCode never saw the search: no failed `invalid` call.
    assert!(!session.stdout.contains("invalid"), "{}", session.stdout);
    let (first, second) = (&session.turns[0], &session.turns[1]);
    // Turn 1 went out deferred: grep behind the regex search tool, the beta appended.
    assert!(
        session.betas[0]
            .as_deref()
            .is_some_and(|b| b.contains("advanced-tool-use-2025-11-20")),
        "{:?}",
        session.betas
    );
    assert!(!loaded_names(first).contains(&"grep".to_owned()));
    assert!(loaded_names(first).contains(&"tool_search_tool_regex".to_owned()));
    // OpenCode ran the tool the search found, and returned its result.
    let history = second["messages"].to_string();
    assert!(history.contains("toolu_01Grep"), "{history}");
    assert!(
        history.contains("def add(a, b)"),
        "grep's result: {history}"
    );
    // Turn 2 reached the provider with the search blocks back in place, just before the
    // tool_use they led to, and deferral going on: the same tools section, the same beta.
    let types = block_types(second);
    let at = types.iter().position(|t| t == "tool_use").unwrap();
    assert_eq!(
        types[at - 2..=at],
        ["server_tool_use", "tool_search_tool_result", "tool_use"],
        "{types:?}"
    );
    assert_eq!(first["tools"], second["tools"], "the tools section changed");
    assert_eq!(session.betas[0], session.betas[1]);
    // Nothing before turn 1's last breakpoint changed (breakpoints themselves move).
    assert_eq!(
        without_markers(&first["system"]),
        without_markers(&second["system"])
    );
    let n = first["messages"].as_array().unwrap().len();
    assert_eq!(
        without_markers(&first["messages"]),
        without_markers(&Value::Array(
            second["messages"].as_array().unwrap()[..n].to_vec()
        )),
        "turn 2 rewrote turn 1's history"
    );
    let rows = pith.wait_rows(3);
    let busts = stats_busts(&pith);
    assert_eq!(busts["by_pith"], 0, "{busts}");
    assert_eq!(busts["by_client"], 0, "{busts}");
    assert!(busts["pairs"].as_u64().unwrap_or(0) >= 1, "{busts}");
    let disclosed: Vec<String> = rows.iter().filter_map(crate::support::disclosed).collect();
    assert!(
        disclosed
            .iter()
            .any(|d| d.starts_with("defer;") && d.ends_with(", search_hide;searches=1")),
        "{disclosed:?}"
    );
    assert!(
        disclosed
            .iter()
            .any(|d| d.starts_with("search_restore;searches=1, defer;")),
        "{disclosed:?}"
    );
}
