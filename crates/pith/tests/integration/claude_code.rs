//! The real Claude Code 2.1.328 (the version of the captures) through pith on its defaults,
//! against the mock upstream: pith defers the large specialised built-ins Claude Code sends
//! loaded on every request, keeps the tools the task and the loaded tools' own instructions
//! need, and a session whose model needs a deferred built-in reaches it through pith's tool
//! search and runs it. scripts/test installs Claude Code and sets `PITH_TEST_CLAUDE`.

use std::path::Path;

use pith_testkit::fixtures::anthropic::{self, ToolSearch};
use pith_testkit::fixtures::{ToolCall, Usage};
use pith_testkit::{MockUpstream, Reply};
use serde_json::{Value, json};

use crate::clients;
use crate::support::*;

const TASK: &str = "the test fails, fix calc.py";
const DONE: &str = "Fixed: add now adds.";

pub(crate) const USAGE: Usage = Usage {
    input: 100,
    output: 20,
    cache_write: 0,
    cache_write_1h: 0,
    cache_read: 0,
};

pub(crate) fn tool_turn(id: &str, tool: &str, input: &Value) -> Reply {
    Reply::sse(anthropic::stream_with_tool(
        &[],
        &ToolCall::new(id, tool, &input.to_string()),
        USAGE,
    ))
}

/// The real Claude Code in the captures' project, through a pith in front of the mock.
struct Through {
    mock: MockUpstream,
    pith: PithProxy,
    work: Project,
}

impl Through {
    fn start() -> Through {
        let mock = MockUpstream::start().unwrap();
        let pith = PithProxy::start(&mock.url(), &[]);
        Through {
            mock,
            pith,
            work: Project::new(),
        }
    }
}

/// The captures' project and a private home for Claude Code.
struct Project {
    dir: tempfile::TempDir,
    home: tempfile::TempDir,
}

impl Project {
    fn new() -> Project {
        let dir = tempfile::tempdir().unwrap();
        clients::write_calc_project(dir.path());
        Project {
            dir,
            home: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Claude Code given the fix-calc task through `pith`, allowed the tools `allowed`; it
    /// must exit 0.
    fn claude(&self, pith: &PithProxy, allowed: &str) -> clients::Run {
        let run = clients::claude_code(
            self.path(),
            self.home.path(),
            &pith.url(),
            &["--allowedTools", allowed, "--"],
            TASK,
            clients::LIMIT,
        );
        run.assert_ok(&format!("pith:\n{}", pith.stderr()));
        run
    }
}

/// Names of the tools the body sends with `"defer_loading": true`, and of the others.
fn split_tools(body: &Value) -> (Vec<String>, Vec<String>) {
    let (mut deferred, mut loaded) = (Vec::new(), Vec::new());
    for tool in body["tools"].as_array().unwrap() {
        let name = tool["name"].as_str().unwrap_or("").to_owned();
        if tool["defer_loading"] == Value::Bool(true) {
            deferred.push(name);
        } else {
            loaded.push(name);
        }
    }
    (deferred, loaded)
}

fn block_types(message: &Value) -> Vec<String> {
    message["content"]
        .as_array()
        .map(|blocks| {
            blocks
                .iter()
                .filter_map(|b| b["type"].as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

/// The mock's requests in order, as JSON, with their `anthropic-beta`.
fn received(mock: &MockUpstream) -> Vec<(Value, Option<String>)> {
    mock.received()
        .into_iter()
        .map(|r| {
            let beta = r.header("anthropic-beta").map(str::to_owned);
            (r.body_json().unwrap(), beta)
        })
        .collect()
}

/// What every main-loop request pith sent holds: the same tools section and beta on every
/// turn, the core loaded, the specialised built-ins deferred behind pith's search tool.
fn assert_deferred_the_same_way(turns: &[(Value, Option<String>)]) {
    let (first, beta) = &turns[0];
    let (deferred, loaded) = split_tools(first);
    for core in ["Bash", "Read", "Edit", "Write"] {
        assert!(loaded.iter().any(|n| n == core), "{core}: {loaded:?}");
    }
    // Claude Code leaves its Glob and Grep out where it finds no ripgrep of its own (here);
    // the capture machine had them, and they stay loaded there (the defer captures tests).
    for core in ["Glob", "Grep"] {
        assert!(!deferred.iter().any(|n| n == core), "{core}: {deferred:?}");
    }
    for specialised in ["Workflow", "ScheduleWakeup", "ListAgents"] {
        assert!(
            deferred.iter().any(|n| n == specialised),
            "{specialised}: {deferred:?}"
        );
    }
    assert!(deferred.iter().any(|n| n == "DeferredToolPlaceholder"));
    assert_eq!(
        loaded.last().map(String::as_str),
        Some("tool_search_tool_regex")
    );
    let beta = beta.as_deref().unwrap_or("");
    assert_eq!(
        beta.matches("advanced-tool-use-2025-11-20").count(),
        1,
        "{beta}"
    );
    for (k, (turn, turn_beta)) in turns.iter().enumerate().skip(1) {
        assert_eq!(turn["tools"], first["tools"], "turn {k}: the tools changed");
        assert_eq!(
            turn["system"], first["system"],
            "turn {k}: the system changed"
        );
        assert_eq!(turn_beta.as_deref(), Some(beta), "turn {k}");
    }
}

#[test]
fn claude_code_fixes_calc_through_pith_with_its_specialised_built_ins_deferred() {
    let Through { mock, pith, work } = Through::start();
    let calc = work.path().join("calc.py");
    let calc = calc.to_str().unwrap();
    mock.push(tool_turn(
        "toolu_01",
        "Read",
        &serde_json::json!({"file_path": calc}),
    ));
    mock.push(tool_turn(
        "toolu_02",
        "Edit",
        &serde_json::json!({"file_path": calc, "old_string": "return a - b", "new_string": "return a + b"}),
    ));
    mock.push(Reply::sse(anthropic::stream(&[DONE], USAGE)));
    let run = work.claude(&pith, "Read Edit");
    assert_eq!(run.stdout, format!("{DONE}\n"), "{}", run.stderr);
    assert!(
        std::fs::read_to_string(work.path().join("calc.py"))
            .unwrap()
            .contains("return a + b")
    );
    let turns = received(&mock);
    assert_eq!(turns.len(), 3, "three main-loop turns");
    assert_deferred_the_same_way(&turns);
    // Claude Code ran both tools pith left loaded: their results are in the last turn.
    let history = turns[2].0["messages"].to_string();
    assert!(history.contains("toolu_01") && history.contains("toolu_02"));
    assert!(!history.contains("\"is_error\":true"), "{history}");
    let rows = pith.wait_rows(3);
    for row in &rows {
        let disclosed = disclosed(row).unwrap_or_default();
        assert!(disclosed.starts_with("defer;tools=5;"), "{disclosed}");
    }
    let busts = stats_busts(&pith);
    assert_eq!(busts["by_pith"], 0, "{busts}");
    assert!(busts["pairs"].as_u64().unwrap_or(0) >= 2, "{busts}");
    // The history through pith is the conversation Claude Code stored, message for message
    // (the prompt, both tool calls with their results, the answer).
    let session = mock.received()[0]
        .header("x-claude-code-session-id")
        .unwrap()
        .to_owned();
    let recorded = crate::history::wait_recorded(&pith, &session, 6);
    let home = pith.home.path();
    crate::history::import(
        home,
        &work.home.path().join(".claude"),
        &work.home.path().join("no-codex"),
    );
    let imported = crate::history::imported_conversation(home, &session);
    let proxied = crate::history::said(home, recorded["id"].as_str().unwrap());
    let stored = crate::history::said(home, imported["id"].as_str().unwrap());
    assert_eq!(proxied.len(), stored.len(), "{proxied:?}\n{stored:?}");
    assert!(proxied.len() >= 6, "{proxied:?}");
    for (sent, kept) in proxied.iter().zip(&stored) {
        assert!(
            sent == kept || same_call_but_defaults(sent, kept),
            "message for message: {sent:?} vs {kept:?}"
        );
    }
}

/// Claude Code stores a tool call's input with its defaults filled in (Edit's
/// `"replace_all": false`), which the model never sent and its requests do not carry: the same
/// message when the role and flags match, the tool is the same, and the stored input is the
/// sent one plus members holding a default value (false, null, empty).
fn same_call_but_defaults(sent: &(Value, Value, Value), kept: &(Value, Value, Value)) -> bool {
    let call = |preview: &Value| -> Option<(String, serde_json::Map<String, Value>)> {
        let (name, input) = preview.as_str()?.split_once(' ')?;
        Some((name.to_owned(), serde_json::from_str(input).ok()?))
    };
    let (Some((sent_name, sent_input)), Some((kept_name, kept_input))) =
        (call(&sent.2), call(&kept.2))
    else {
        return false;
    };
    let is_default = |v: &Value| {
        matches!(v, Value::Null | Value::Bool(false))
            || v.as_str() == Some("")
            || v.as_array().is_some_and(Vec::is_empty)
    };
    sent.0 == kept.0
        && sent.1 == kept.1
        && sent_name == kept_name
        && sent_input.iter().all(|(k, v)| kept_input.get(k) == Some(v))
        && kept_input
            .iter()
            .all(|(k, v)| sent_input.contains_key(k) || is_default(v))
}

#[test]
fn claude_code_runs_a_deferred_built_in_it_found_through_pith_search() {
    // The fix-calc task, in which ListAgents is deferred (a task about agents would keep it
    // loaded). Turn 1: the model searches pith's tool search for it (the API finds only tools
    // sent with `defer_loading`), and calls it. Turn 2: done.
    let Through { mock, pith, work } = Through::start();
    let search = ToolSearch {
        id: "srvtoolu_01Agents".to_owned(),
        pattern: "agents".to_owned(),
        found: vec!["ListAgents".to_owned()],
    };
    let list = ToolCall::new("toolu_01List", "ListAgents", "{}");
    mock.push(Reply::sse(anthropic::stream_with_tool_search(
        &search, &list, USAGE,
    )));
    mock.push(Reply::sse(anthropic::stream(&[DONE], USAGE)));
    let run = work.claude(&pith, "ListAgents");
    assert_eq!(run.stdout, format!("{DONE}\n"), "{}", run.stderr);
    let turns = received(&mock);
    assert_eq!(turns.len(), 2, "both turns reached the mock");
    assert_deferred_the_same_way(&turns);
    // Claude Code ran ListAgents and sent its result back, not an error.
    let messages = turns[1].0["messages"].as_array().unwrap();
    let last = messages.last().unwrap();
    let result = last["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result in {last}"));
    assert_eq!(result["tool_use_id"], "toolu_01List");
    assert_ne!(result["is_error"], Value::Bool(true), "{result}");
    // The provider got the search blocks back in place, just before the tool_use they led to.
    let answer = &messages[messages.len() - 2];
    assert_eq!(
        block_types(answer),
        ["server_tool_use", "tool_search_tool_result", "tool_use"],
        "{answer}"
    );
    let rows = pith.wait_rows(2);
    let disclosed: Vec<String> = rows.iter().filter_map(disclosed).collect();
    assert!(
        disclosed[0].starts_with("defer;") && disclosed[0].ends_with(", search_hide;searches=1"),
        "{disclosed:?}"
    );
    assert!(
        disclosed[1].starts_with("search_restore;searches=1, defer;"),
        "{disclosed:?}"
    );
    // Claude Code itself turns its mid-conversation system message from a block with a
    // breakpoint into a plain string once the breakpoint moves on; the fingerprints count
    // that as the client's change, never as pith's.
    let busts = stats_busts(&pith);
    assert_eq!(busts["by_pith"], 0, "{busts}");
    assert!(busts["pairs"].as_u64().unwrap_or(0) >= 1, "{busts}");
}

/// The longer session: fix `add`, then add `subtract` with a test, checking as it goes.
const LONG_TASK: &str = "the tests fail: fix calc.py, then add a subtract function with a test";

/// The model's side of the longer session, turn by turn: each tool call, then the answer.
fn long_session_turns(work: &Path) -> Vec<(String, Value)> {
    let path = |name: &str| work.join(name).to_str().unwrap().to_owned();
    let (calc, test) = (path("calc.py"), path("test_calc.py"));
    // -B: no bytecode cache, which an edit of the same size within a second would leave stale.
    let check = "python3 -B -c 'import test_calc as t; [f() for n, f in vars(t).items() if n.startswith(\"test_\")]; print(\"ok\")'";
    vec![
        (
            "Bash".into(),
            json!({"command": check, "description": "Run the tests"}),
        ),
        ("Read".into(), json!({"file_path": calc})),
        ("Read".into(), json!({"file_path": test})),
        (
            "Edit".into(),
            json!({"file_path": calc, "old_string": "return a - b", "new_string": "return a + b"}),
        ),
        (
            "Bash".into(),
            json!({"command": check, "description": "Run the tests again"}),
        ),
        (
            "Edit".into(),
            json!({"file_path": calc, "old_string": "    return a + b\n",
                   "new_string": "    return a + b\n\n\ndef subtract(a, b):\n    return a - b\n"}),
        ),
        (
            "Edit".into(),
            json!({"file_path": test, "old_string": "from calc import add\n",
                   "new_string": "from calc import add, subtract\n"}),
        ),
        (
            "Edit".into(),
            json!({"file_path": test, "old_string": "    assert add(1, 2) == 3\n",
                   "new_string": "    assert add(1, 2) == 3\n\n\ndef test_subtract():\n    assert subtract(3, 2) == 1\n"}),
        ),
        (
            "Bash".into(),
            json!({"command": check, "description": "Run all the tests"}),
        ),
        (
            "Bash".into(),
            json!({"command": "git diff --stat", "description": "Show the change"}),
        ),
    ]
}

const LONG_DONE: &str = "Fixed add, and added subtract with its test; all tests pass.";

/// Runs the longer session with Claude Code pointed at `base_url` (the mock, or pith in front
/// of it), and checks the project ended as the session says.
/// The bodies the mock received, and the run's project (for [`record`]).
fn long_session(
    mock: &MockUpstream,
    base_url: &str,
    context: &dyn Fn() -> String,
) -> (Vec<Value>, Project) {
    let work = Project::new();
    for (k, (tool, input)) in long_session_turns(work.path()).iter().enumerate() {
        mock.push_when(
            a_turn,
            tool_turn(&format!("toolu_{:02}", k + 1), tool, input),
        );
    }
    scripted(
        mock,
        (work.path(), work.home.path()),
        base_url,
        LONG_TASK,
        LONG_DONE,
        context,
    );
    let calc = std::fs::read_to_string(work.path().join("calc.py")).unwrap();
    assert!(
        calc.contains("return a + b") && calc.contains("def subtract"),
        "{calc}"
    );
    let bodies: Vec<Value> = mock
        .received()
        .iter()
        .map(|r| r.body_json().unwrap())
        .collect();
    assert_eq!(bodies.len(), 11, "eleven turns");
    // Every tool ran: its result is in the last turn, and only the first run of the tests
    // failed.
    let results = tool_results(&bodies[10]);
    let ids: Vec<&str> = results
        .iter()
        .filter_map(|r| r["tool_use_id"].as_str())
        .collect();
    let expected: Vec<String> = (1..=10).map(|k| format!("toolu_{k:02}")).collect();
    assert_eq!(ids, expected);
    let failed: Vec<&str> = results
        .iter()
        .filter(|r| r["is_error"] == Value::Bool(true))
        .filter_map(|r| r["tool_use_id"].as_str())
        .collect();
    assert_eq!(failed, ["toolu_01"], "{results:?}");
    (bodies, work)
}

/// Whether a body the mock received asks for a model's turn (a Messages request, which always
/// carries `max_tokens`), not a token count: Claude Code sends `/v1/messages/count_tokens`
/// (no `max_tokens`) for a long file it read, and a scripted turn that answered it would be
/// lost to the session.
pub(crate) fn a_turn(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|b| b.get("max_tokens").is_some())
}

/// Claude Code in `(project, home)` at `base_url`, given `task` and allowed Read, Edit and
/// Bash, while the mock plays the turns pushed on it and then answers `done`: it must exit 0
/// and print `done`.
pub(crate) fn scripted(
    mock: &MockUpstream,
    (work, home): (&Path, &Path),
    base_url: &str,
    task: &str,
    done: &str,
    context: &dyn Fn() -> String,
) {
    mock.push_when(a_turn, Reply::sse(anthropic::stream(&[done], USAGE)));
    let run = clients::claude_code(
        work,
        home,
        base_url,
        &["--allowedTools", "Read Edit Bash", "--"],
        task,
        clients::LIMIT,
    );
    run.assert_ok(&context());
    assert_eq!(run.stdout, format!("{done}\n"), "{}", run.stderr);
}

/// The `tool_result` blocks of an Anthropic body's messages, in order.
pub(crate) fn tool_results(body: &Value) -> Vec<&Value> {
    message_blocks(body)
        .filter(|b| b["type"] == "tool_result")
        .collect()
}

/// Writes what the mock received as `reqNNN.json` captures in `dir` (the format of
/// `fixtures/captures`), the run's temporary paths rewritten to the captures' `/home/dev`.
fn record(mock: &MockUpstream, dir: &Path, work: &Path, home: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    let dashed = |p: &Path| p.to_str().unwrap().replace(['/', '.'], "-");
    let rewrite = |text: &str| {
        text.replace(work.to_str().unwrap(), "/home/dev/calc")
            .replace(&dashed(work), "-home-dev-calc")
            .replace(home.to_str().unwrap(), "/home/dev")
    };
    for (k, r) in mock.received().iter().enumerate() {
        // Content-Length no longer fits the rewritten body; a replay sets its own.
        let headers: serde_json::Map<String, Value> = r
            .headers
            .iter()
            .filter(|(name, _)| *name != http::header::CONTENT_LENGTH)
            .map(|(name, value)| {
                let secret = ["x-api-key", "authorization"].contains(&name.as_str());
                let value = if secret {
                    "<redacted>"
                } else {
                    value.to_str().unwrap_or("")
                };
                (name.as_str().to_owned(), Value::String(value.to_owned()))
            })
            .collect();
        let capture = serde_json::json!({
            "method": "POST",
            "path": r.path_and_query,
            "headers": headers,
            "body": rewrite(std::str::from_utf8(&r.body).unwrap()),
        });
        let file = dir.join(format!("req{:03}.json", k + 1));
        std::fs::write(file, serde_json::to_vec_pretty(&capture).unwrap()).unwrap();
    }
}

#[test]
fn a_longer_claude_code_session_defers_the_same_way_on_every_turn_and_ends_as_direct() {
    // The same scripted session twice: straight to the mock, then through pith. Both end with
    // the same project; through pith every turn is deferred the same way and pith busts no
    // cache. `PITH_RECORD_CLAUDE_CODE=DIR` keeps the direct run's requests as captures
    // (fixtures/recorded/claude-code-2.1.328/fix-calc-long was made so).
    let direct = MockUpstream::start().unwrap();
    let (plain, work) = long_session(&direct, &direct.url(), &String::new);
    if let Some(dir) = std::env::var_os("PITH_RECORD_CLAUDE_CODE") {
        record(&direct, Path::new(&dir), work.path(), work.home.path());
    }
    assert!(
        plain.iter().all(|b| b["tools"]
            .as_array()
            .unwrap()
            .iter()
            .all(|t| t["name"] == "DeferredToolPlaceholder" || t.get("defer_loading").is_none())),
        "Claude Code itself defers only its placeholder"
    );
    let mock = MockUpstream::start().unwrap();
    let pith = PithProxy::start(&mock.url(), &[]);
    let (through, _) = long_session(&mock, &pith.url(), &|| format!("pith:\n{}", pith.stderr()));
    let turns: Vec<(Value, Option<String>)> = received(&mock);
    assert_deferred_the_same_way(&turns);
    assert_eq!(through.len(), plain.len());
    pith.wait_rows(11);
    let busts = stats_busts(&pith);
    assert_eq!(busts["by_pith"], 0, "{busts}");
    assert!(busts["pairs"].as_u64().unwrap_or(0) >= 10, "{busts}");
}

#[test]
fn a_tool_claude_code_loads_through_its_own_tool_search_changes_nothing_pith_sends_for_the_others()
{
    // Turn 1: the model asks Claude Code's ToolSearch for WebFetch, one of the tools Claude
    // Code lists by name only. Claude Code answers with a `tool_reference` and from turn 2 on
    // sends WebFetch itself, deferred. pith leaves it as it came and decides the rest as
    // before: every other tool is the same bytes.
    let Through { mock, pith, work } = Through::start();
    mock.push(tool_turn(
        "toolu_01Search",
        "ToolSearch",
        &json!({"query": "select:WebFetch", "max_results": 1}),
    ));
    mock.push(Reply::sse(anthropic::stream(&[DONE], USAGE)));
    work.claude(&pith, "ToolSearch");
    let turns = received(&mock);
    assert_eq!(turns.len(), 2, "both turns reached the mock");
    let result = turns[1].0["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["content"].as_array())
        .flatten()
        .find(|b| b["type"] == "tool_result" && b["tool_use_id"] == "toolu_01Search")
        .cloned()
        .unwrap_or_else(|| panic!("no ToolSearch result: {}", turns[1].0["messages"]));
    assert!(
        result.to_string().contains("\"tool_reference\""),
        "{result}"
    );
    let tools = |k: usize| turns[k].0["tools"].as_array().unwrap().clone();
    let (before, after) = (tools(0), tools(1));
    let fetch = after
        .iter()
        .find(|t| t["name"] == "WebFetch")
        .unwrap_or_else(|| panic!("Claude Code did not send WebFetch: {after:?}"));
    assert_eq!(fetch["defer_loading"], Value::Bool(true));
    assert!(!before.iter().any(|t| t["name"] == "WebFetch"));
    let others: Vec<&Value> = after.iter().filter(|t| t["name"] != "WebFetch").collect();
    assert_eq!(others, before.iter().collect::<Vec<_>>());
    let busts = stats_busts(&pith);
    assert_eq!(busts["by_pith"], 0, "{busts}");
}
