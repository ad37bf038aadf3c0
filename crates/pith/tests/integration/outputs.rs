//! Tool output excerpts (issue 48) through the real proxy: off by default, and switched on, a
//! long Read result from an earlier turn of Claude Code's own request reaches the provider as
//! the excerpt, everything else as the client sent it, and the ledger counts it.

use pith_store::ledger::TransformResult;
use pith_testkit::MockUpstream;
use pith_testkit::fixtures::{self, Capture};
use serde_json::{Value, json};

use crate::support::*;

/// One of pith's files as a file read shows it: each line after its number (`number` writes
/// it: Claude Code's Read `12`, `cat -n`'s `    12`) and a tab.
fn numbered_source(number: impl Fn(usize) -> String) -> String {
    let source = include_str!("../../../pith-transform/src/outputs/excerpt/mod.rs");
    let lines: Vec<String> = source
        .lines()
        .enumerate()
        .map(|(n, l)| format!("{}\t{l}", number(n + 1)))
        .collect();
    lines.join("\n")
}

/// Claude Code 2.1.328's request with its Read's result (a turn follows it) made a long Read of
/// one of pith's files (Read's `N<TAB>line` shape); that block's place.
pub(crate) fn with_long_result() -> (Capture, Vec<u8>, (usize, usize)) {
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
    messages[i]["content"][j]["content"] = Value::String(numbered_source(|n| n.to_string()));
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

/// Claude Code's request as it was when the long Read result was new (its last message), and
/// the next one (the model's turn after it and that turn's result added), both offering pith's
/// `tool_output` as Claude Code names an MCP server's tools.
fn own_turn_and_later() -> (Capture, Vec<u8>, Vec<u8>, (usize, usize)) {
    let (cap, later, at) = with_long_result();
    let mut later: Value = serde_json::from_slice(&later).unwrap();
    let messages = later["messages"].as_array_mut().unwrap();
    assert_eq!(messages[at.0 + 1]["role"], "assistant");
    assert_eq!(messages[at.0 + 2]["role"], "user");
    messages.truncate(at.0 + 3);
    later["tools"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "name": "mcp__pith__tool_output",
            "description": "The whole output of a tool call pith shortened.",
            "input_schema": {"type": "object", "properties": {"callId": {"type": "string"}}}
        }));
    let mut own = later.clone();
    own["messages"].as_array_mut().unwrap().truncate(at.0 + 1);
    let bytes = |v: &Value| serde_json::to_vec(v).unwrap();
    (cap, bytes(&own), bytes(&later), at)
}

/// The whole loop through the real binaries: the output rides whole in its own turn and is
/// kept in the history; the next request's excerpt names `tool_output` with the call's id;
/// `pith mcp` on the same home returns the output byte for byte, and says what to do for a
/// call it does not hold.
#[test]
fn a_shortened_output_names_its_call_and_pith_mcp_returns_it_whole() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(
        &mock.url(),
        &[("PITH_DEFER_TOOLS", "0"), ("PITH_TRIM_OUTPUTS", "1")],
    );
    let (cap, own, later, (i, j)) = own_turn_and_later();
    send_body(&pith, &cap, own.clone());
    send_body(&pith, &cap, later.clone());
    pith.wait_rows(2);
    pith.flush();
    let received = mock.received();
    assert!(received[0].body == own, "the output's own turn went whole");
    let sent: Value = serde_json::from_slice(&received[1].body).unwrap();
    let whole: Value = serde_json::from_slice(&later).unwrap();
    let result = &whole["messages"][i]["content"][j];
    let id = result["tool_use_id"].as_str().unwrap();
    let shown = sent["messages"][i]["content"][j]["content"]
        .as_str()
        .unwrap();
    let first_line = shown.lines().next().unwrap();
    assert!(
        first_line.contains(&format!("pith's tool_output with callId \"{id}\"")),
        "{first_line}"
    );

    let ws = tempfile::tempdir().unwrap();
    let home = pith.home.path().to_str().unwrap();
    let mut mcp = crate::mcp::RawClient::start(ws.path(), &[("PITH_HOME", home)]);
    let (text, is_error) = mcp.call("tool_output", serde_json::json!({"callId": id}));
    assert!(!is_error, "{text}");
    assert!(
        text == result["content"].as_str().unwrap(),
        "not the whole output"
    );
    let (text, is_error) = mcp.call("tool_output", serde_json::json!({"callId": "toolu_none"}));
    assert!(is_error);
    assert!(text.contains("Run the call again"), "{text}");

    // The dashboard's record of the request that first sent the excerpt shows it beside the
    // output's whole size; the output's own turn shows none.
    let get = |path: &str| -> Value {
        let (status, _, body) = crate::dashboard::get(&pith, path, &[]);
        assert_eq!(status, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap()
    };
    let recent = get("/pith/api/requests?limit=2");
    let ids: Vec<i64> = recent["requests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    let (later_id, own_id) = (ids[0], ids[1]);
    let record = get(&format!("/pith/api/request?id={later_id}"));
    let whole_text = result["content"].as_str().unwrap();
    assert_eq!(
        record["shortened"],
        json!([{
            "call_id": id,
            "chars": whole_text.chars().count(),
            "excerpt_chars": shown.chars().count(),
            "excerpt": shown,
        }])
    );
    let record = get(&format!("/pith/api/request?id={own_id}"));
    assert_eq!(record["shortened"], json!([]));
}

/// A capture's first tool output with a turn of the model after it, made a long file read (as
/// the client's `cat -n`/read shows it); the path to that output's text.
pub(crate) fn openai_with_long_output(id: &str) -> (Capture, Vec<u8>, Vec<String>) {
    let cap = fixtures::captures()
        .unwrap()
        .into_iter()
        .find(|c| c.id() == id)
        .unwrap();
    let mut body: Value = serde_json::from_slice(&cap.body).unwrap();
    let (list, text_key) = if body.get("input").is_some() {
        ("input", "output")
    } else {
        ("messages", "content")
    };
    let items = body[list].as_array_mut().unwrap();
    let is_output = |v: &Value| {
        v["role"] == "tool" || v["type"].as_str().is_some_and(|t| t.ends_with("_output"))
    };
    let is_model = |v: &Value| {
        v["role"] == "assistant" || v["type"] == "function_call" || v["type"] == "custom_tool_call"
    };
    let at = (0..items.len())
        .find(|&k| is_output(&items[k]) && items[k + 1..].iter().any(is_model))
        .expect("an output with a later turn");
    items[at][text_key] = Value::String(numbered_source(|n| format!("{n:6}")));
    let path = vec![list.to_owned(), at.to_string(), text_key.to_owned()];
    (cap, serde_json::to_vec(&body).unwrap(), path)
}

fn at_path<'v>(v: &'v mut Value, path: &[String]) -> &'v mut Value {
    path.iter().fold(v, |v, k| match k.parse::<usize>() {
        Ok(i) => &mut v[i],
        Err(_) => &mut v[k.as_str()],
    })
}

/// OpenCode's Chat Completions request and Codex's Responses request through the real proxy
/// with the stage on: the earlier long output goes as the excerpt, every other byte as the
/// client sent it, and the ledger counts it.
#[test]
fn chat_and_responses_requests_send_an_earlier_long_output_as_an_excerpt() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(
        &mock.url(),
        &[("PITH_DEFER_TOOLS", "0"), ("PITH_TRIM_OUTPUTS", "1")],
    );
    let ids = [
        "opencode-1.18.33/chat-completions-fix-calc/req006",
        "codex-0.169.0/responses-fix-calc/req005",
    ];
    for (n, id) in ids.iter().enumerate() {
        let (cap, body, path) = openai_with_long_output(id);
        let headers = send_body(&pith, &cap, body.clone());
        let said = headers["pith-transforms"].to_str().unwrap().to_owned();
        assert!(said.contains("outputs"), "{id}: {said}");
        let mut sent: Value = serde_json::from_slice(&mock.received()[n].body).unwrap();
        let shown = at_path(&mut sent, &path).as_str().unwrap().to_owned();
        assert!(
            shown.starts_with("[pith shortened this tool output: "),
            "{id}: {shown}"
        );
        let mut expected: Value = serde_json::from_slice(&body).unwrap();
        let original = at_path(&mut expected, &path).as_str().unwrap().len();
        assert!(
            shown.len() * 3 < original,
            "{id}: {} of {original}",
            shown.len()
        );
        *at_path(&mut expected, &path) = Value::String(shown);
        assert_eq!(sent, expected, "{id}: everything else as sent");
    }
    let rows = pith.wait_rows(2);
    for row in &rows {
        let stage = row
            .transforms
            .iter()
            .find(|t| t.stage == "outputs")
            .unwrap();
        let TransformResult::Applied(facts) = &stage.result else {
            panic!("{stage:?}");
        };
        assert!(
            facts.iter().any(|f| f.name == "outputs" && f.value == 1),
            "{facts:?}"
        );
    }
}

/// The two files the real clients' sessions read, and a line of the first found once in it,
/// written into `work`.
fn session_files(work: &std::path::Path) -> &'static str {
    let files = [
        ("skim.rs", include_str!("../../../pith-wire/src/skim.rs")),
        (
            "excerpt.rs",
            include_str!("../../../pith-transform/src/outputs/excerpt/mod.rs"),
        ),
    ];
    for (name, text) in files {
        std::fs::write(work.join(name), text).unwrap();
    }
    files[0]
        .1
        .lines()
        .find(|l| l.len() > 40 && files[0].1.matches(*l).count() == 1 && !l.contains('\t'))
        .unwrap()
}

/// Codex's session over [`session_files`], as the provider's answers (event streams): `cat -n`
/// of the long file, `apply_patch` of `line`, `cat -n` of the other, a check, "Checked.".
fn codex_session(line: &str) -> Vec<bytes::Bytes> {
    use pith_testkit::fixtures::{DEFAULT_USAGE, ToolCall, responses};
    let exec = |id: &str, cmd: &str| {
        responses::stream_with_tool(
            &[],
            &ToolCall::new(id, "exec_command", &json!({"cmd": cmd}).to_string()),
            DEFAULT_USAGE,
        )
    };
    let patch = format!(
        "*** Begin Patch\n*** Update File: skim.rs\n@@\n-{line}\n+{line} // checked\n*** End Patch\n"
    );
    vec![
        exec("call_01", "cat -n skim.rs"),
        responses::stream_with_custom_tool(
            &ToolCall::new("call_02", "apply_patch", &patch),
            DEFAULT_USAGE,
        ),
        exec("call_03", "cat -n excerpt.rs"),
        exec("call_04", "grep -c checked skim.rs"),
        responses::stream(&["Checked."], DEFAULT_USAGE),
    ]
}

/// The text of call `call`'s output in a Responses request's `input`, if it carries it.
fn responses_output(body: &Value, call: &str) -> Option<String> {
    let item = body["input"]
        .as_array()?
        .iter()
        .find(|i| i["type"] == "function_call_output" && i["call_id"] == call)?;
    Some(
        item["output"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| item["output"].to_string()),
    )
}

/// The patch of [`codex_session`] landed in `work`.
fn assert_patched(work: &std::path::Path, line: &str) {
    let patched = std::fs::read_to_string(work.join("skim.rs")).unwrap();
    assert!(
        patched.contains(&format!("{line} // checked")),
        "the patch ran"
    );
}

/// The real Codex (HTTP, Responses) reads a long file with `cat -n`, patches a line of it with
/// `apply_patch`, reads another, checks, through pith with the stage on: it completes, the
/// patch lands, and from the turn after each read on its output reaches the provider as the
/// excerpt (the line the patch quoted kept).
#[test]
fn the_real_codex_completes_a_session_whose_long_outputs_are_shortened() {
    use pith_testkit::Reply;

    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let line = session_files(work.path());
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_TRIM_OUTPUTS", "1")]);
    for step in codex_session(line) {
        mock.push(Reply::sse(step));
    }
    let run = crate::clients::codex(
        work.path(),
        home.path(),
        &format!("{}/v1", pith.url()),
        &[],
        "check skim.rs",
        crate::clients::LIMIT,
    );
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert_eq!(run.stdout, "Checked.\n", "{}", run.stderr);
    assert_patched(work.path(), line);

    let received = mock.received();
    assert_eq!(received.len(), 5, "one request per turn");
    let output = |n: usize, call: &str| -> String {
        responses_output(&received[n].body_json().unwrap(), call).unwrap()
    };
    // Whole in its own turn, an excerpt from the next on, the same bytes after.
    assert!(!output(1, "call_01").starts_with("[pith shortened"));
    let shown = output(2, "call_01");
    assert!(
        shown.starts_with("[pith shortened this tool output: "),
        "{shown}"
    );
    assert_eq!(output(4, "call_01"), shown);
    // The line the patch (the model's next turn) quoted is kept.
    assert!(
        shown.contains(line),
        "the patched line is not in the excerpt"
    );
    assert!(!output(3, "call_03").starts_with("[pith shortened"));
    assert!(output(4, "call_03").starts_with("[pith shortened"));
    let rows = pith.wait_rows(5);
    assert!(
        rows.iter()
            .all(|r| r.outcome == pith_outcome::RequestOutcome::Ok),
        "{rows:?}"
    );
}

/// The same session with the real Codex on its default path, over its WebSocket (`pith run
/// codex`, the built-in provider): it completes and the patch lands. A create carries only
/// what is new when it chains to the last response (`previous_response_id`); pith runs the
/// stage over the whole conversation the socket holds, so a create whose turn shortens an
/// output goes up whole, with the excerpt, and every create that carries the output carries
/// the same bytes.
#[test]
fn the_real_codex_over_its_websocket_completes_a_session_whose_long_outputs_are_shortened() {
    use crate::websocket::{DefaultCodex, codex_runtime};
    use pith_testkit::responses_socket::{self, SocketMock, frames_of};
    use std::sync::atomic::{AtomicUsize, Ordering};

    let rt = codex_runtime();
    let scratch = tempfile::tempdir().unwrap();
    let line = session_files(scratch.path());
    let steps: Vec<Vec<String>> = codex_session(line).iter().map(|s| frames_of(s)).collect();
    let turn = AtomicUsize::new(0);
    let mock = rt
        .block_on(SocketMock::start(std::sync::Arc::new(
            move |create: &Value, _| {
                if responses_socket::is_warm_up(create) {
                    return responses_socket::warm_up_answer(250);
                }
                let n = turn.fetch_add(1, Ordering::SeqCst);
                steps.get(n).cloned().unwrap_or_default()
            },
        )))
        .unwrap();
    let upstream = mock.url();
    let pith = PithProxy::start_with(&upstream, &upstream, &[("PITH_TRIM_OUTPUTS", "1")]);
    let codex = DefaultCodex::new(&pith, &upstream);
    session_files(codex.work());
    let run = codex.run(&[], "check skim.rs");
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert_eq!(run.stdout, "Checked.\n", "{}", run.stderr);
    assert!(
        !run.stderr.contains("straight to its provider"),
        "{}",
        run.stderr
    );
    assert_patched(codex.work(), line);

    let turns = mock.seen().turns();
    assert_eq!(turns.len(), 5, "one create per turn: {turns:?}");
    let carried = |call: &str| -> Vec<(usize, String)> {
        (0..turns.len())
            .filter_map(|n| Some((n, responses_output(&turns[n], call)?)))
            .collect()
    };
    for (call, first_turn) in [("call_01", 1), ("call_03", 3)] {
        let carried = carried(call);
        // Its own turn carries it whole (that create is new items or the whole input).
        assert_eq!(carried.first().map(|c| c.0), Some(first_turn), "{call}");
        assert!(!carried[0].1.starts_with("[pith shortened"), "{call}");
        // The next create carries the excerpt, whole (no chain: the provider's copy is the
        // output whole), and any later create carrying it carries the same bytes.
        let later = &carried[1..];
        assert!(!later.is_empty(), "{call} never went up again");
        assert_eq!(later[0].0, first_turn + 1, "{call}");
        assert!(
            turns[first_turn + 1].get("previous_response_id").is_none(),
            "the create shortening {call} chained"
        );
        assert!(
            later[0].1.starts_with("[pith shortened this tool output: "),
            "{call}: {}",
            later[0].1
        );
        assert!(later.iter().all(|(_, o)| *o == later[0].1), "{call}");
    }
    let kept = responses_output(&turns[2], "call_01").unwrap();
    assert!(
        kept.contains(line),
        "the patched line is not in the excerpt"
    );
    let rows = pith.wait_rows(6);
    assert!(
        rows.iter()
            .filter(|r| r.method == "WEBSOCKET")
            .all(|r| r.outcome == pith_outcome::RequestOutcome::Ok),
        "{rows:?}"
    );
    drop(rt);
}

/// The real OpenCode (Anthropic's wire, its own read, edit and bash tools) reads a long file,
/// edits one line of it, reads another, checks, through pith with the stage on: it completes,
/// the edit lands, and from the turn after each read on its output reaches the provider as the
/// excerpt (the line the edit's `oldString` quoted kept), the same bytes on every later turn.
/// OpenCode's read shows `N: line` inside `<content>`; its title call (no tools) races the
/// first turn and takes the mock's default reply.
#[test]
fn the_real_opencode_completes_a_session_whose_long_outputs_are_shortened() {
    use crate::opencode::has_tools;
    use pith_testkit::Reply;
    use pith_testkit::fixtures::{DEFAULT_USAGE, ToolCall, anthropic};

    let work = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let line = session_files(work.path());
    let path = |name: &str| work.path().join(name).display().to_string();
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[("PITH_TRIM_OUTPUTS", "1")]);
    let call = |id: &str, tool: &str, input: Value| {
        Reply::sse(anthropic::stream_with_tool(
            &[],
            &ToolCall::new(id, tool, &input.to_string()),
            DEFAULT_USAGE,
        ))
    };
    let steps = [
        call("toolu_01", "read", json!({"filePath": path("skim.rs")})),
        call(
            "toolu_02",
            "edit",
            json!({"filePath": path("skim.rs"), "oldString": line,
                   "newString": format!("{line} // checked")}),
        ),
        call("toolu_03", "read", json!({"filePath": path("excerpt.rs")})),
        call(
            "toolu_04",
            "bash",
            json!({"command": "grep -c checked skim.rs", "description": "Count"}),
        ),
        Reply::sse(anthropic::stream(&["Checked."], DEFAULT_USAGE)),
    ];
    for step in steps {
        mock.push_when(has_tools, step);
    }
    let base = format!("{}/v1", pith.url());
    let run = crate::clients::opencode(
        work.path(),
        home.path(),
        &base,
        &[],
        "check skim.rs",
        crate::clients::LIMIT,
    );
    run.assert_ok(&format!("pith:\n{}", pith.stderr()));
    assert!(run.stdout.contains("Checked."), "{}", run.stdout);
    assert_eq!(mock.queued_replies(), 0, "every turn reached the mock");
    assert_patched(work.path(), line);

    let turns = crate::opencode::main_loop_turns(&mock);
    assert_eq!(turns.len(), 5, "one request per turn");
    let output = |n: usize, id: &str| -> String {
        let result = turns[n]["messages"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["content"].as_array())
            .flatten()
            .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == id)
            .cloned()
            .unwrap_or_else(|| panic!("turn {n} carries no result of {id}"));
        match &result["content"] {
            Value::String(s) => s.clone(),
            blocks => blocks
                .as_array()
                .unwrap()
                .iter()
                .filter_map(|b| b["text"].as_str())
                .collect(),
        }
    };
    // Whole in its own turn, an excerpt from the next on, the same bytes after.
    let whole = output(1, "toolu_01");
    assert!(
        whole.contains("<content>"),
        "OpenCode's read shape: {whole:.200}"
    );
    assert!(!whole.contains("[pith shortened"));
    let shown = output(2, "toolu_01");
    assert!(
        shown.contains("[pith shortened this tool output: "),
        "{shown:.300}"
    );
    assert!(
        shown.len() < whole.len() / 2,
        "{} of {}",
        shown.len(),
        whole.len()
    );
    assert_eq!(output(4, "toolu_01"), shown);
    // The line the edit (the model's next turn) quoted is kept, as OpenCode numbered it.
    assert!(
        shown.contains(line),
        "the edited line is not in the excerpt"
    );
    assert!(!output(3, "toolu_03").contains("[pith shortened"));
    assert!(output(4, "toolu_03").contains("[pith shortened"));
    let rows = pith.wait_rows(6);
    assert!(
        rows.iter()
            .all(|r| r.outcome == pith_outcome::RequestOutcome::Ok),
        "{rows:?}"
    );
}

/// The session page in Chromium, from the keyboard: the record of the request that first sent
/// an excerpt shows the output's whole size and the excerpt beside it (as text, never markup);
/// at a phone's width and a laptop's nothing overflows and axe-core finds nothing serious.
#[test]
fn the_session_page_shows_an_excerpt_beside_its_outputs_size() {
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(
        &mock.url(),
        &[("PITH_DEFER_TOOLS", "0"), ("PITH_TRIM_OUTPUTS", "1")],
    );
    let (cap, own, later, (i, j)) = own_turn_and_later();
    send_body(&pith, &cap, own);
    send_body(&pith, &cap, later.clone());
    pith.wait_rows(2);
    pith.flush();
    let whole: Value = serde_json::from_slice(&later).unwrap();
    let chars = whole["messages"][i]["content"][j]["content"]
        .as_str()
        .unwrap()
        .chars()
        .count();
    let (_, _, body) = crate::dashboard::get(&pith, "/pith/api/requests?limit=1", &[]);
    let newest: Value = serde_json::from_str(&body).unwrap();
    let request = newest["requests"][0]["id"].as_i64().unwrap();
    let session = newest["requests"][0]["session"]
        .as_str()
        .unwrap()
        .to_owned();
    let hash = crate::dashboard::url_encoded(&session);
    let url = format!("{}/#session={hash}", pith.url());
    for size in [(390, 844), (1280, 800)] {
        let mut page = crate::browser::Page::open(&url, size);
        page.until(
            "document.querySelectorAll('#session-requests tbody tr').length === 2",
            10_000,
        );
        crate::dashboard::open_record(&mut page, request);
        let shown = page.eval(&format!(
            "(() => {{ const box = document.getElementById('record-{request}'); \
             const pres = [...box.querySelectorAll('pre')]; return {{ text: box.textContent, \
             excerpt: pres.map(p => p.textContent).find(t => t.startsWith('[pith shortened')) }}; }})()"
        ));
        let text = shown["text"].as_str().unwrap();
        assert!(
            text.contains("Tool outputs pith sent as excerpts from this request on"),
            "{text:.300}"
        );
        // The page's own number format (`fmt`): thousands from 10,000 on.
        assert!(chars >= 10_000);
        let size_words = format!("{:.1}k characters whole", chars as f64 / 1e3);
        assert!(text.contains(&size_words), "no {size_words:?}");
        let excerpt = shown["excerpt"].as_str().expect("the excerpt as text");
        assert!(
            excerpt.contains("pith's tool_output with callId"),
            "{excerpt:.200}"
        );
        crate::dashboard::fits_and_axe_finds_nothing_serious(&mut page, size, "excerpt");
    }
}
