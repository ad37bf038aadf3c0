//! The stage on real traffic from Claude Code, OpenCode and Codex.

use http::{HeaderMap, HeaderValue};
use pith_transform::defer::{ANTHROPIC_BETA, reason};
use pith_transform::{DeferOptions, DeferStage, HeaderEdit, Pipeline, Request};
use serde_json::Value;
use serde_json::value::RawValue;

use super::sim::{
    Capture, CostModel, as_deferred_session, capture_folders, deferred_names, load_folder,
    session_costs,
};
use super::{any_size, apply, edit_of, fact, loaded_names, reason_of, tools_of, tools_span};

const MCP40: &str = "opencode-1.18.33/anthropic-agentsmd-mcp40";
const FIX_CALC: &str = "opencode-1.18.33/anthropic-fix-calc";

fn stage() -> DeferStage {
    DeferStage::new(any_size())
}

fn load(folder: &str) -> Vec<Capture> {
    load_folder(folder).unwrap_or_else(|e| panic!("{e}"))
}

fn has_tools(c: &Capture) -> bool {
    serde_json::from_slice::<Value>(&c.body).expect("capture is JSON")["tools"].is_array()
}

/// The session as it would look with pith deferring from its first request.
fn deferred_session(folder: &str) -> Vec<Capture> {
    let captures = load(folder);
    let first = captures
        .iter()
        .find(|c| has_tools(c))
        .expect("a main-loop request");
    let edit = edit_of(first.run(&stage()).expect("stage runs"), &first.file);
    let deferred = deferred_names(&apply(&first.body, &edit)).expect("deferred names");
    as_deferred_session(&captures, &deferred).expect("replay")
}

/// Every check that holds for one rewritten main-loop request.
fn check_rewrite(original: &Capture, min_deferred: usize) -> Vec<u8> {
    let what = format!("{} {}", original.file, original.path);
    let edit = edit_of(original.run(&stage()).expect("stage runs"), &what);
    let out = apply(&original.body, &edit);
    let body = original.body_str();
    let out_str = std::str::from_utf8(&out).expect("utf-8");
    let out_value: Value = serde_json::from_str(out_str).expect("rewritten body is valid JSON");

    // Only the tools array changed: every byte before and after it is the client's.
    let span = tools_span(body);
    for s in &edit.splices {
        assert!(
            span.start < s.range.start && s.range.end < span.end,
            "{what}: splice {:?} outside tools {span:?}",
            s.range
        );
    }
    let tail = body.len() - span.end;
    assert_eq!(
        &out[..span.start],
        &original.body[..span.start],
        "{what}: prefix changed"
    );
    assert_eq!(
        &out[out.len() - tail..],
        &original.body[span.end..],
        "{what}: suffix changed"
    );

    // Each client tool is its original bytes, plus `"defer_loading":true` when deferred.
    let before: Vec<&RawValue> = serde_json::from_str(&body[span.clone()]).expect("tools");
    let out_span = tools_span(out_str);
    let after: Vec<&RawValue> = serde_json::from_str(&out_str[out_span]).expect("tools");
    assert_eq!(
        after.len(),
        before.len() + 1,
        "{what}: one search tool added"
    );
    let mut deferred = 0;
    for (b, a) in before.iter().zip(&after) {
        let (b, a) = (b.get(), a.get());
        if a != b {
            let a_value: Value = serde_json::from_str(a).expect("tool");
            assert!(
                a_value.get("cache_control").is_none(),
                "{what}: cache_control on {a}"
            );
            if !b.contains("\"cache_control\"") {
                assert_eq!(a, format!("{},\"defer_loading\":true}}", &b[..b.len() - 1]));
            }
            deferred += 1;
        }
    }
    let search: Value = serde_json::from_str(after[before.len()].get()).expect("search tool");
    assert_eq!(search["type"], "tool_search_tool_regex_20251119");
    assert_eq!(search["name"], "tool_search_tool_regex");
    assert!(deferred >= min_deferred, "{what}: only {deferred} deferred");
    assert!(deferred < before.len(), "{what}: every tool deferred");
    assert_eq!(fact(&edit, "tools"), deferred);
    let chars: usize = before
        .iter()
        .zip(&after)
        .filter(|(b, a)| b.get() != a.get())
        .map(|(b, _)| b.get().chars().count())
        .sum();
    assert_eq!(fact(&edit, "chars"), chars);
    assert_eq!(
        edit.headers,
        [HeaderEdit::AppendListValue {
            name: http::HeaderName::from_static("anthropic-beta"),
            value: ANTHROPIC_BETA.to_owned(),
        }]
    );
    assert_tool_pairing(&out_value, &what);
    out
}

/// Every `tool_use` is answered by a `tool_result` in the next message, and every result
/// answers a call.
fn assert_tool_pairing(body: &Value, what: &str) {
    let messages = body["messages"].as_array().expect("messages");
    for (i, message) in messages.iter().enumerate() {
        let ids = |m: &Value, kind: &str, key: &str| -> Vec<String> {
            m["content"]
                .as_array()
                .map(|blocks| {
                    blocks
                        .iter()
                        .filter(|b| b["type"] == kind)
                        .filter_map(|b| b[key].as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        };
        let calls = ids(message, "tool_use", "id");
        if calls.is_empty() || i + 1 == messages.len() {
            continue;
        }
        let results = ids(&messages[i + 1], "tool_result", "tool_use_id");
        assert_eq!(calls, results, "{what}: message {i} calls vs results");
    }
}

#[test]
fn opencode_mcp40_deferred_session_defers_every_main_loop_turn() {
    let session = deferred_session(MCP40);
    let mut main_loop = 0;
    for capture in &session {
        if !has_tools(capture) {
            // The title side call has no tools.
            let outcome = capture.run(&stage()).expect("stage runs");
            assert_eq!(reason_of(outcome, &capture.file), reason::NO_TOOLS);
            continue;
        }
        assert_eq!(tools_of(&capture.body).len(), 53);
        check_rewrite(capture, 40);
        main_loop += 1;
    }
    assert_eq!(main_loop, 6);
}

fn outcomes(folder: &str) -> Vec<String> {
    load(folder)
        .iter()
        .map(|c| match c.run(&stage()).expect("stage runs") {
            pith_transform::Outcome::Edited(_) => "edited".to_owned(),
            pith_transform::Outcome::Unchanged(r) => r.to_owned(),
        })
        .collect()
}

#[test]
fn opencode_mcp40_raw_capture_needs_no_search() {
    // The capture was recorded without deferral. Every tool its history calls (`read`,
    // `edit`, `grep`) is in the loaded set, so each main-loop turn defers as captured.
    assert_eq!(
        outcomes(MCP40),
        [
            reason::NO_TOOLS,
            "edited",
            "edited",
            "edited",
            "edited",
            "edited",
            "edited"
        ]
    );
    check_rewrite(&load(MCP40)[1], 40);
}

#[test]
fn opencode_raw_capture_defers_until_history_calls_a_deferred_tool() {
    // In the 10-tool session, keeping only the most relevant tool (and the tools it names),
    // `edit` is deferred: no loaded tool names it. From the first call of `edit` in the
    // captured history, which no tool search surfaced, the history is what a mid-session join
    // looks like, and the request passes unchanged.
    let stage = DeferStage::new(DeferOptions {
        keep_relevant: 1,
        ..any_size()
    });
    let outcomes: Vec<String> = load(FIX_CALC)
        .iter()
        .map(|c| match c.run(&stage).expect("stage runs") {
            pith_transform::Outcome::Edited(edit) => {
                let names = deferred_names(&apply(&c.body, &edit)).expect("names");
                assert!(names.iter().any(|n| n == "edit"), "{names:?}");
                "edited".to_owned()
            }
            pith_transform::Outcome::Unchanged(r) => r.to_owned(),
        })
        .collect();
    assert_eq!(outcomes[0], reason::NO_TOOLS);
    assert_eq!(outcomes[1], "edited");
    let joined = outcomes
        .iter()
        .position(|o| o == reason::MID_SESSION_JOIN)
        .expect("the history calls a deferred tool");
    assert!(
        outcomes[joined..]
            .iter()
            .all(|o| o == reason::MID_SESSION_JOIN),
        "{outcomes:?}"
    );
    assert!(
        outcomes[1..joined].iter().all(|o| o == "edited"),
        "{outcomes:?}"
    );
}

#[test]
fn rewritten_tools_section_is_byte_identical_on_every_turn() {
    for folder in [MCP40, FIX_CALC] {
        let mut sections: Vec<(String, String)> = Vec::new();
        for capture in deferred_session(folder).iter().filter(|c| has_tools(c)) {
            let out = check_rewrite(capture, 1);
            let out = String::from_utf8(out).expect("utf-8");
            let span = tools_span(&out);
            sections.push((capture.file.clone(), out[span].to_owned()));
        }
        assert!(
            sections.len() >= 6,
            "{folder}: {} main-loop turns",
            sections.len()
        );
        for (file, section) in &sections[1..] {
            assert!(
                section == &sections[0].1,
                "{folder}: {file} tools differ from turn 1"
            );
        }
    }
}

#[test]
fn loaded_set_is_the_most_relevant_tools_for_the_first_prompt() {
    let captures = load(MCP40);
    let edit = edit_of(captures[1].run(&stage()).expect("stage runs"), "req002");
    let out = apply(&captures[1].body, &edit);
    let loaded = loaded_names(&out);
    // "the test fails, fix calc.py": bash mentions tests, failures, fixes and .py files; read,
    // among the five most relevant, says to "use the glob tool", which stays loaded with them
    // (bash's "necessary for the task" does not name the task tool). No MCP tool is named.
    assert_eq!(
        loaded,
        [
            "bash",
            "edit",
            "glob",
            "grep",
            "read",
            "write",
            "tool_search_tool_regex"
        ]
    );
    assert!(
        loaded.iter().all(|n| !n.starts_with("demo_jira")),
        "{loaded:?}"
    );
}

/// `capture` with `"cache_control":{"type":"ephemeral"}` added to the tools named.
fn with_tool_breakpoints(capture: &Capture, names: &[&str]) -> Capture {
    let body = capture.body_str();
    let span = tools_span(body);
    let tools: Vec<&RawValue> = serde_json::from_str(&body[span]).expect("tools");
    let mut splices = Vec::new();
    for tool in tools {
        let value: Value = serde_json::from_str(tool.get()).expect("tool");
        if names.iter().any(|n| value["name"] == *n) {
            let end = pith_transform::span_of(body, tool).expect("borrowed").end - 1;
            splices.push(pith_transform::Splice {
                range: end..end,
                replacement: r#","cache_control":{"type":"ephemeral","ttl":"1h"}"#.to_owned(),
            });
        }
    }
    assert_eq!(splices.len(), names.len());
    capture.with_body(pith_transform::apply_splices(&capture.body, &splices).expect("splice"))
}

#[test]
fn cache_control_on_deferred_tools_moves_to_the_last_loaded_tool() {
    let captures = load(MCP40);
    // Two deferred tools carry breakpoints: they collapse onto the search tool, the last loaded.
    let tagged = with_tool_breakpoints(&captures[1], &["demo_jira_op_7", "webfetch"]);
    let out = check_rewrite(&tagged, 40);
    let tools = tools_of(&out);
    let marked: Vec<&str> = tools
        .iter()
        .filter(|t| t.get("cache_control").is_some())
        .map(|t| t["name"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(marked, ["tool_search_tool_regex"]);
    let search = tools.last().expect("search tool");
    assert_eq!(
        search["cache_control"],
        serde_json::json!({"type":"ephemeral","ttl":"1h"})
    );
    for tool in &tools {
        assert!(!(tool.get("defer_loading").is_some() && tool.get("cache_control").is_some()));
    }
}

#[test]
fn cache_control_on_a_loaded_tool_stays_where_it_is() {
    let captures = load(MCP40);
    let tagged = with_tool_breakpoints(&captures[1], &["bash"]);
    let out = check_rewrite(&tagged, 40);
    let tools = tools_of(&out);
    assert!(tools[0].get("cache_control").is_some());
    assert!(tools.last().expect("search").get("cache_control").is_none());
}

#[test]
fn codex_captures_are_unchanged_because_codex_sends_its_own_tool_search() {
    for folder in [
        "codex-0.169.0/responses-fix-calc",
        "codex-0.169.0/responses-agentsmd-mcp40",
    ] {
        for capture in load(folder) {
            let outcome = capture.run(&stage()).expect("stage runs");
            let what = format!("{folder}/{}", capture.file);
            assert_eq!(
                reason_of(outcome, &what),
                reason::ALREADY_DEFERRING,
                "{what}"
            );
        }
    }
}

const CLAUDE_CODE: &str = "claude-code-2.1.328/fix-calc";
/// The longer Claude Code session recorded in this repository (11 requests; Claude Code left
/// its Glob and Grep out there).
const CLAUDE_CODE_LONG: &str = "claude-code-2.1.328/fix-calc-long";

#[test]
fn claude_code_keeps_its_core_loaded_and_defers_its_large_specialised_built_ins() {
    // Claude Code defers its MCP tools itself (a `defer_loading` placeholder, its own
    // ToolSearch) and sends its built-ins loaded. With the default options pith defers the
    // built-ins no loaded tool names and the task does not need, keeps the placeholder as
    // sent and ToolSearch loaded, and adds the provider's search tool after the last tool.
    let stage = DeferStage::new(DeferOptions::default());
    for (folder, turns) in [(CLAUDE_CODE, 6), (CLAUDE_CODE_LONG, 11)] {
        claude_code_session_defers_the_same_way(&stage, folder, turns);
    }
}

fn claude_code_session_defers_the_same_way(stage: &DeferStage, folder: &str, turns: usize) {
    let mut sections = Vec::new();
    for capture in load(folder) {
        let what = format!("{folder}/{}", capture.file);
        let edit = edit_of(capture.run(stage).expect("stage runs"), &what);
        let out = apply(&capture.body, &edit);
        let tools = tools_of(&out);
        let deferred: Vec<&str> = tools
            .iter()
            .filter(|t| t["defer_loading"] == Value::Bool(true))
            .filter_map(|t| t["name"].as_str())
            .collect();
        assert_eq!(
            deferred,
            [
                "Agent",
                "ListAgents",
                "ScheduleWakeup",
                "Skill",
                "Workflow",
                "DeferredToolPlaceholder"
            ],
            "{what}"
        );
        // The core, and ToolSearch: Claude Code's only way to the tools it defers by name.
        for core in [
            "Bash",
            "Edit",
            "Glob",
            "Grep",
            "Read",
            "Write",
            "ToolSearch",
        ] {
            assert!(!deferred.contains(&core), "{what}: {core} deferred");
        }
        for core in ["Bash", "Edit", "Read", "Write", "ToolSearch"] {
            assert!(
                tools.iter().any(|t| t["name"] == core),
                "{what}: {core} sent"
            );
        }
        assert_eq!(
            tools.last().expect("tools")["type"],
            "tool_search_tool_regex_20251119"
        );
        // The placeholder's bytes are the client's.
        let body = capture.body_str();
        let placeholder = r#""defer_loading":true"#;
        assert_eq!(
            String::from_utf8_lossy(&out).matches(placeholder).count(),
            body.matches(placeholder).count() + 5,
            "{what}"
        );
        assert!(fact(&edit, "chars") > 19_000, "{what}: {:?}", edit.facts);
        let span = tools_span(std::str::from_utf8(&out).expect("utf-8"));
        sections.push(out[span].to_vec());
    }
    assert_eq!(sections.len(), turns, "{folder}");
    assert!(
        sections.iter().all(|s| s == &sections[0]),
        "{folder}: the tools section is the same bytes on every turn"
    );
}

#[test]
fn chat_completions_capture_is_not_applicable() {
    for capture in load("opencode-1.18.33/chat-completions-fix-calc") {
        let outcome = capture.run(&stage()).expect("stage runs");
        assert_eq!(reason_of(outcome, &capture.file), reason::NOT_APPLICABLE);
    }
}

#[test]
fn pipeline_forwards_the_rewrite_and_appends_the_beta_value() {
    let captures = load(MCP40);
    let capture = &captures[2];
    let pipeline = Pipeline::new().with_stage(Box::new(stage()));
    let result = pipeline.run(&Request {
        wire: pith_wire::Wire::AnthropicMessages,
        path: "/v1/messages",
        headers: &capture.headers,
        body: &capture.body,
    });
    assert_eq!(result.failures().count(), 0, "{:?}", result.reports);
    let body = result.body.as_deref().expect("rewritten");
    assert!(serde_json::from_slice::<Value>(body).is_ok());
    let header = result.transforms_header().expect("pith-transforms");
    assert!(header.starts_with("defer;tools=4"), "{header}");
    assert!(header.contains(";chars="), "{header}");
    let mut headers: HeaderMap = capture.headers.clone();
    Pipeline::apply_header_edits(&result, &mut headers);
    assert_eq!(
        headers["anthropic-beta"],
        HeaderValue::from_static("structured-outputs-2025-11-13,advanced-tool-use-2025-11-20")
    );
    // A second pass sees a client that already defers.
    let again = pipeline.run(&Request {
        wire: pith_wire::Wire::AnthropicMessages,
        path: "/v1/messages",
        headers: &headers,
        body,
    });
    assert!(again.body.is_none());
    assert_eq!(
        again.reports[0].result,
        pith_transform::StageResult::Unchanged(reason::ALREADY_DEFERRING)
    );
}

#[test]
fn mcp40_deferred_session_costs_less_and_never_adds_a_cache_write() {
    // Figures for BENCHMARKS.md come from `--example defer_savings`; this guards the shape:
    // cheaper under the conservative cost model, and no request writes the cache where the
    // original did not.
    let original = load(MCP40);
    let session = deferred_session(MCP40);
    let rewritten: Vec<Vec<u8>> = session
        .iter()
        .map(|c| match c.run(&stage()).expect("stage runs") {
            pith_transform::Outcome::Edited(edit) => apply(&c.body, &edit),
            pith_transform::Outcome::Unchanged(_) => c.body.clone(),
        })
        .collect();
    let raw: Vec<Vec<u8>> = original.iter().map(|c| c.body.clone()).collect();
    let before = session_costs(&raw, CostModel::CONSERVATIVE).expect("simulate original");
    let after = session_costs(&rewritten, CostModel::CONSERVATIVE).expect("simulate deferred");
    for (k, (b, a)) in before.iter().zip(&after).enumerate() {
        assert!(
            a.prompt.write == 0.0 || b.prompt.write > 0.0,
            "request {k} writes the cache only under deferral: {b:?} vs {a:?}"
        );
    }
    let total = |costs: &[super::sim::RequestCost]| costs.iter().map(|c| c.weighted()).sum::<f64>();
    assert!(total(&after) < total(&before));
    let lean = |bodies: &[Vec<u8>]| {
        total(&session_costs(bodies, CostModel::DOCUMENTED).expect("simulate"))
    };
    assert!(
        lean(&rewritten) < total(&after),
        "documented-only costs are the lower bound"
    );
    assert!(lean(&rewritten) < lean(&raw));
    // The first main-loop request carries no history: its prompt shrinks by the deferred tools.
    assert!(after[1].prompt.total() < 0.5 * before[1].prompt.total());
}

#[test]
fn every_capture_folder_passes_through_the_stage_without_error() {
    let folders = capture_folders().unwrap_or_else(|e| panic!("{e}"));
    assert!(folders.len() >= 6, "{folders:?}");
    for folder in folders {
        for capture in load(&folder) {
            let outcome = capture
                .run(&stage())
                .expect("stage never errors on real traffic");
            if let pith_transform::Outcome::Edited(edit) = outcome {
                let out = apply(&capture.body, &edit);
                assert!(
                    serde_json::from_slice::<Value>(&out).is_ok(),
                    "{folder}/{}",
                    capture.file
                );
            }
        }
    }
}

#[test]
fn min_deferred_chars_leaves_small_tool_lists_alone() {
    // The default threshold.
    let stage = DeferStage::new(DeferOptions::default());
    // OpenCode without MCP: five ~1.2 KB definitions would be deferred.
    for capture in load(FIX_CALC).iter().filter(|c| has_tools(c)) {
        let outcome = capture.run(&stage).expect("stage runs");
        assert_eq!(
            reason_of(outcome, &capture.file),
            reason::TOO_LITTLE_TO_DEFER
        );
    }
    // With the 40-tool MCP server, ~42 KB are deferred.
    let captures = load(MCP40);
    edit_of(captures[1].run(&stage).expect("stage runs"), "mcp40");
}

#[test]
fn a_session_that_searches_reaches_the_provider_as_a_documented_client_sends_it() {
    use pith_transform::search_trip::restore::RestoreStage;
    use pith_transform::search_trip::{InMemory, SearchMemory};
    use std::sync::Arc;

    // Only the most relevant tool kept (bash, with the tools it names): `edit`, which the
    // session calls, is deferred, so this session's model must search for it.
    let stage = DeferStage::new(DeferOptions {
        keep_relevant: 1,
        ..any_size()
    });
    let original = load(MCP40);
    let first = original
        .iter()
        .find(|c| has_tools(c))
        .expect("a main-loop request");
    let edit = edit_of(first.run(&stage).expect("stage runs"), &first.file);
    let deferred = deferred_names(&apply(&first.body, &edit)).expect("deferred names");
    let documented = as_deferred_session(&original, &deferred).expect("replay");
    // What the proxy would have hidden from the answers: the searches of that replay.
    let memory = Arc::new(InMemory::default());
    for capture in &documented {
        super::sim::remember_searches(capture, memory.as_ref()).expect("searches");
    }
    assert!(
        !memory.is_empty(),
        "the replay has no search: the test proves nothing"
    );
    let restore = RestoreStage::new(memory.clone() as Arc<dyn SearchMemory>);
    // The client (OpenCode) sends the captured history, without the blocks; pith restores
    // them: the provider gets the documented client's bytes, turn for turn.
    for (client, documented) in original.iter().zip(&documented) {
        let restored = match client.run(&restore).expect("restore runs") {
            pith_transform::Outcome::Edited(edit) => apply(&client.body, &edit),
            pith_transform::Outcome::Unchanged(_) => client.body.clone(),
        };
        assert_eq!(
            String::from_utf8_lossy(&restored),
            documented.body_str(),
            "{}",
            client.file
        );
        let deferred_turn = |body: &[u8]| match client.with_body(body.to_vec()).run(&stage) {
            Ok(pith_transform::Outcome::Edited(e)) => Some(e.facts),
            _ => None,
        };
        if has_tools(client) {
            assert_eq!(
                deferred_turn(&restored),
                deferred_turn(documented.body.as_slice()),
                "{}: deferral decides as for the documented client",
                client.file
            );
        }
    }
}

#[test]
fn pith_causes_no_cache_bust_on_any_real_capture_session() {
    use pith_transform::PinsStage;
    use pith_wire::fingerprint::Fingerprint;

    // What the proxy runs by default on every request (the round trip's restore stage has
    // nothing to restore in a captured history, so it is left out).
    let pipeline = Pipeline::new()
        .with_stage(Box::new(PinsStage::new()))
        .with_stage(Box::new(DeferStage::new(DeferOptions::default())));
    let mut pairs = 0;
    for folder in capture_folders().expect("captures") {
        // Main-loop requests only: a title side call shares the session but not the prompt.
        let session: Vec<Capture> = load(&folder).into_iter().filter(has_tools).collect();
        let mut previous: Option<(Fingerprint, Fingerprint)> = None;
        for capture in &session {
            let wire = capture.wire().expect("a wire");
            let result = pipeline.run(&Request {
                wire,
                path: capture.path.split('?').next().unwrap_or(""),
                headers: &capture.headers,
                body: &capture.body,
            });
            let upstream = result.body.unwrap_or_else(|| capture.body.clone());
            let client = Fingerprint::of(wire, &capture.body).expect("a client fingerprint");
            let sent = Fingerprint::of(wire, &upstream).expect("an upstream fingerprint");
            if let Some((client_before, sent_before)) = &previous {
                pairs += 1;
                let by_client = client_before.bust(&client);
                let upstream_bust = sent_before.bust(&sent);
                assert!(
                    upstream_bust.is_none() || by_client.is_some(),
                    "{folder}/{}: pith busted the cache at segment {:?} (the client did not)",
                    capture.file,
                    upstream_bust
                );
            }
            previous = Some((client, sent));
        }
    }
    assert!(pairs >= 20, "only {pairs} consecutive pairs checked");
}

#[test]
fn claude_code_sessions_cost_at_least_a_quarter_less_cache_weighted() {
    // The goal of deferring Claude Code's own built-ins. Figures for BENCHMARKS.md come from
    // `--example defer_savings`; this holds the floor, under both cost models, and checks that
    // no request writes the cache where the original did not.
    for folder in [CLAUDE_CODE, CLAUDE_CODE_LONG] {
        claude_code_session_costs_a_quarter_less(folder);
    }
}

fn claude_code_session_costs_a_quarter_less(folder: &str) {
    let stage = DeferStage::new(DeferOptions::default());
    let original = load(folder);
    let raw: Vec<Vec<u8>> = original.iter().map(|c| c.body.clone()).collect();
    let sent: Vec<Vec<u8>> = original
        .iter()
        .map(|c| apply(&c.body, &edit_of(c.run(&stage).expect("runs"), &c.file)))
        .collect();
    for model in [CostModel::DOCUMENTED, CostModel::CONSERVATIVE] {
        let before = session_costs(&raw, model).expect("simulate original");
        let after = session_costs(&sent, model).expect("simulate deferred");
        for (k, (b, a)) in before.iter().zip(&after).enumerate() {
            assert!(
                a.prompt.write <= b.prompt.write,
                "{folder} request {k} writes more under deferral: {b:?} vs {a:?}"
            );
        }
        let total = |c: &[super::sim::RequestCost]| c.iter().map(|c| c.weighted()).sum::<f64>();
        let saving = 1.0 - total(&after) / total(&before);
        assert!(
            saving >= 0.25,
            "{folder} {model:?}: {:.1}% cheaper",
            saving * 100.0
        );
    }
}

/// The tools section pith sends for `capture`, which the default stage must rewrite.
fn deferred_tools(capture: &Capture) -> Vec<Value> {
    let stage = DeferStage::new(DeferOptions::default());
    let edit = edit_of(capture.run(&stage).expect("runs"), &capture.file);
    tools_of(&apply(&capture.body, &edit))
}

#[test]
fn claude_code_deferring_a_tool_itself_changes_nothing_pith_decides_for_the_others() {
    // After `ToolSearch select:X`, Claude Code sends X with `defer_loading: true` itself. The
    // other tools must come out of pith as before, or pith would bust the cache there.
    let capture = &load(CLAUDE_CODE)[1];
    let before = deferred_tools(capture);
    // Agent and Skill are named in Claude Code's own context ("the Agent tool"), so the model
    // may well select them through ToolSearch rather than pith's search.
    for name in ["Workflow", "Agent", "Skill"] {
        let mut body: Value = serde_json::from_slice(&capture.body).expect("json");
        for tool in body["tools"].as_array_mut().expect("tools") {
            if tool["name"] == name {
                tool["defer_loading"] = Value::Bool(true);
            }
        }
        let after = deferred_tools(&capture.with_body(body.to_string().into_bytes()));
        assert_eq!(before.len(), after.len());
        for (b, a) in before.iter().zip(&after) {
            if b["name"] != name {
                assert_eq!(b, a, "{name} deferred by the client changed {}", b["name"]);
            }
        }
    }
}

#[test]
fn a_tool_claude_code_adds_deferred_mid_session_moves_no_other_tool() {
    // An MCP tool Claude Code's ToolSearch found, sent deferred from then on, and as relevant
    // to the task as a tool can be: pith leaves it as it came and decides the rest as before.
    let capture = &load(CLAUDE_CODE)[1];
    let before = deferred_tools(capture);
    let mut body: Value = serde_json::from_slice(&capture.body).expect("json");
    // Long (it would move BM25's weights if it were ranked), all about the task, and naming
    // two tools pith defers (as a loaded tool's description, that would load them).
    let description = format!(
        "Fix the test that fails in calc.py. Use ScheduleWakeup and Workflow. {}",
        "the test fails, fix calc.py; ".repeat(500)
    );
    let found = serde_json::json!({"name": "mcp__calc__fix_failing_test",
        "description": description,
        "input_schema": {"type": "object", "properties": {}}, "defer_loading": true});
    body["tools"]
        .as_array_mut()
        .expect("tools")
        .push(found.clone());
    let after = deferred_tools(&capture.with_body(body.to_string().into_bytes()));
    let (search, tools) = after.split_last().expect("the search tool");
    assert_eq!(&tools[..before.len() - 1], &before[..before.len() - 1]);
    assert_eq!(tools.last(), Some(&found));
    assert_eq!(search, before.last().expect("the search tool"));
}

/// One stage kept across a session's turns (it reads each turn from where the one before left
/// off) decides every request exactly as a stage that sees that request alone: on every
/// captured session of the three clients, and on the sessions as they look with pith deferring
/// (tool searches and their results in the history).
#[test]
fn a_session_read_turn_by_turn_decides_each_request_as_one_read_alone() {
    let mut sessions: Vec<(String, Vec<Capture>)> = capture_folders()
        .expect("capture folders")
        .into_iter()
        .map(|folder| {
            let captures = load(&folder);
            (folder, captures)
        })
        .collect();
    for folder in [MCP40, "claude-code-2.1.328/fix-calc"] {
        sessions.push((format!("{folder}, deferred"), deferred_session(folder)));
    }
    let mut requests = 0;
    for (folder, captures) in &sessions {
        let kept = stage();
        for capture in captures {
            let turn = capture.run(&kept).expect("stage runs");
            let alone = capture.run(&stage()).expect("stage runs");
            assert_eq!(turn, alone, "{folder} {}", capture.file);
            requests += 1;
        }
    }
    assert!(requests > 40, "{requests} requests replayed");
}
