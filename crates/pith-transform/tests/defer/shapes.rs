//! Requests the stage must leave alone, and the Responses and BM25 variants.

use std::sync::Arc;

use http::HeaderMap;
use pith_transform::defer::reason;
use pith_transform::{
    DeferOptions, DeferStage, Outcome, Request, SearchVariant, Stage, ToolRanker, ToolText,
};
use pith_wire::Wire;
use serde_json::{Value, json};

use super::sim::load_folder;
use super::{any_size, apply, edit_of, fact, loaded_names, reason_of, tools_of};

fn run_with(options: DeferOptions, wire: Wire, body: &str) -> Outcome {
    let headers = HeaderMap::new();
    DeferStage::new(options)
        .apply(&Request {
            wire,
            path: "/v1/messages",
            headers: &headers,
            body: body.as_bytes(),
        })
        .expect("stage runs")
}

fn run(wire: Wire, body: &str) -> Outcome {
    run_with(any_size(), wire, body)
}

fn tool(name: &str, description: &str) -> Value {
    json!({"name": name, "description": description,
           "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}}})
}

fn anthropic_body(tools: Vec<Value>, extra: Value) -> String {
    let mut body = json!({
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "messages": [{"role": "user", "content": "find the jira issue about login"}],
        "tools": tools,
    });
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body.to_string()
}

fn many_tools(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| tool(&format!("tool_{i}"), &format!("Does thing number {i}")))
        .collect()
}

#[test]
fn no_tools_single_tool_and_empty_tools_are_unchanged() {
    let body = anthropic_body(vec![], json!({}));
    assert_eq!(
        reason_of(run(Wire::AnthropicMessages, &body), "empty"),
        reason::NO_TOOLS
    );
    let body = json!({"model": "m", "messages": []}).to_string();
    assert_eq!(
        reason_of(run(Wire::AnthropicMessages, &body), "absent"),
        reason::NO_TOOLS
    );
    let body = json!({"model": "m", "messages": [], "tools": null}).to_string();
    assert_eq!(
        reason_of(run(Wire::AnthropicMessages, &body), "null"),
        reason::NO_TOOLS
    );
    let body = anthropic_body(many_tools(1), json!({}));
    assert_eq!(
        reason_of(run(Wire::AnthropicMessages, &body), "one"),
        reason::SINGLE_TOOL
    );
}

#[test]
fn forced_tool_choice_is_unchanged() {
    for choice in [
        json!({"type": "any"}),
        json!({"type": "tool", "name": "tool_3"}),
    ] {
        let body = anthropic_body(many_tools(20), json!({"tool_choice": choice}));
        let outcome = run(Wire::AnthropicMessages, &body);
        assert_eq!(reason_of(outcome, "forced"), reason::TOOL_CHOICE_FORCED);
    }
    for choice in [json!({"type": "auto"}), json!({"type": "none"})] {
        let body = anthropic_body(many_tools(20), json!({"tool_choice": choice}));
        edit_of(run(Wire::AnthropicMessages, &body), "not forced");
    }
    for choice in [
        json!("required"),
        json!({"type": "function", "name": "tool_3"}),
    ] {
        let body = responses_body(many_functions(20), json!({"tool_choice": choice}));
        let outcome = run(Wire::Responses, &body);
        assert_eq!(reason_of(outcome, "forced"), reason::TOOL_CHOICE_FORCED);
    }
}

#[test]
fn a_client_that_sends_a_search_tool_is_unchanged() {
    let mut tools = many_tools(10);
    tools.push(json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}));
    let body = anthropic_body(tools, json!({}));
    assert_eq!(
        reason_of(run(Wire::AnthropicMessages, &body), "search tool"),
        reason::ALREADY_DEFERRING
    );
}

#[test]
fn tools_the_client_decided_on_keep_their_bytes_and_the_rest_are_planned() {
    // A client that defers a tool behind a search of its own (Claude Code's placeholder) and
    // one that says `defer_loading: null` or `false`: those tools are the client's decision,
    // sent as they came; pith defers among the others and adds the search tool.
    let mut tools = many_tools(10);
    tools[4]["defer_loading"] = Value::Null;
    tools[5]["defer_loading"] = json!(false);
    tools[6]["defer_loading"] = json!(true);
    let body = anthropic_body(tools.clone(), json!({}));
    let edit = edit_of(run(Wire::AnthropicMessages, &body), "client-decided tools");
    let out = tools_of(&apply(body.as_bytes(), &edit));
    assert_eq!(out.len(), 11);
    for i in [4, 5, 6] {
        assert_eq!(out[i], tools[i], "tool {i} as the client sent it");
    }
    // The client's three are not ranked: of the seven others the five first in a tie stay
    // (0 to 3 and 7), so pith defers 8 and 9.
    assert_eq!(fact(&edit, "tools"), 2, "five of seven kept");
    // Deferring every tool the client left open, with the client's own deferred one, leaves
    // nothing loaded but the null and false ones: still loaded, so it goes on.
    let keep_none = DeferOptions {
        keep_relevant: 0,
        ..any_size()
    };
    let edit = edit_of(
        run_with(keep_none.clone(), Wire::AnthropicMessages, &body),
        "keep none",
    );
    assert_eq!(fact(&edit, "tools"), 7);
    // With only the client's deferred tool beside them, nothing would be left loaded.
    let mut tools = many_tools(3);
    tools[0]["defer_loading"] = json!(true);
    let body = anthropic_body(tools, json!({}));
    assert_eq!(
        reason_of(
            run_with(keep_none, Wire::AnthropicMessages, &body),
            "all deferred"
        ),
        reason::NO_TOOL_LEFT_LOADED
    );
}

#[test]
fn the_words_defer_loading_and_tool_search_elsewhere_do_not_count_as_deferring() {
    // A parameter named `defer_loading`, a description naming tool search, and a history
    // whose tool call carries a `defer_loading` key: none is a client deferring its tools.
    let mut tools = many_tools(10);
    tools[2]["input_schema"]["properties"]["defer_loading"] = json!({"type": "boolean"});
    tools[3]["description"] = json!("Wraps tool_search_tool_regex for \"defer_loading\" tools");
    let body = anthropic_body(
        tools,
        json!({"messages": [
            {"role": "user", "content": "find the jira issue about login"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "tool_1",
                "input": {"defer_loading": true, "type": "tool_search_tool_regex_20251119"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
        ]}),
    );
    assert!(body.contains("\"defer_loading\""));
    match run(Wire::AnthropicMessages, &body) {
        Outcome::Edited(_) => {}
        Outcome::Unchanged(reason) => {
            assert_ne!(
                reason,
                reason::ALREADY_DEFERRING,
                "misread as already deferring"
            )
        }
    }
}

#[test]
fn deferral_that_would_leave_nothing_loaded_or_nothing_deferred_is_unchanged() {
    let none_kept = DeferOptions {
        keep_relevant: 0,
        ..any_size()
    };
    let body = anthropic_body(many_tools(10), json!({}));
    let outcome = run_with(none_kept.clone(), Wire::AnthropicMessages, &body);
    assert_eq!(reason_of(outcome, "keep 0"), reason::NO_TOOL_LEFT_LOADED);
    // A server tool that can never be deferred keeps one tool loaded.
    let mut tools = many_tools(10);
    tools.push(json!({"type": "web_search_20250305", "name": "web_search"}));
    let body = anthropic_body(tools, json!({}));
    let edit = edit_of(
        run_with(none_kept, Wire::AnthropicMessages, &body),
        "server tool",
    );
    let out = tools_of(&apply(body.as_bytes(), &edit));
    assert_eq!(out[10].get("defer_loading"), None);
    assert_eq!(
        out.iter()
            .filter(|t| t.get("defer_loading").is_some())
            .count(),
        10
    );

    let body = anthropic_body(many_tools(5), json!({}));
    let outcome = run(Wire::AnthropicMessages, &body);
    assert_eq!(
        reason_of(outcome, "5 tools keep 5"),
        reason::NOTHING_TO_DEFER
    );
    let everything_small = DeferOptions {
        small_tool_chars: 10_000,
        ..any_size()
    };
    let body = anthropic_body(many_tools(20), json!({}));
    let outcome = run_with(everything_small, Wire::AnthropicMessages, &body);
    assert_eq!(reason_of(outcome, "all small"), reason::NOTHING_TO_DEFER);
}

#[test]
fn small_definitions_stay_loaded() {
    let mut tools = many_tools(10);
    tools[9] = json!({"name": "tiny", "input_schema": {"type": "object"}});
    let small = DeferOptions {
        small_tool_chars: 60,
        keep_relevant: 1,
        ..any_size()
    };
    let body = anthropic_body(tools, json!({}));
    let edit = edit_of(run_with(small, Wire::AnthropicMessages, &body), "small");
    let out = tools_of(&apply(body.as_bytes(), &edit));
    assert_eq!(out[9].get("defer_loading"), None);
    assert_eq!(
        out.iter()
            .filter(|t| t.get("defer_loading").is_none())
            .count(),
        3
    );
}

#[test]
fn a_session_joined_midway_is_unchanged_until_search_surfaced_the_tool() {
    let mut tools = many_tools(10);
    tools.push(tool(
        "jira_login_search",
        "Find a jira issue about login problems",
    ));
    let messages = |with_search: bool| {
        let mut assistant = vec![];
        if with_search {
            assistant.push(json!({"type": "server_tool_use", "id": "srvtoolu_1",
                "name": "tool_search_tool_regex", "input": {"pattern": "tool_7"}}));
            assistant.push(
                json!({"type": "tool_search_tool_result", "tool_use_id": "srvtoolu_1",
                "content": {"type": "tool_search_tool_search_result",
                "tool_references": [{"type": "tool_reference", "tool_name": "tool_7"}]}}),
            );
        }
        assistant.push(json!({"type": "tool_use", "id": "toolu_1", "name": "tool_7", "input": {}}));
        json!([
            {"role": "user", "content": "find the jira issue about login"},
            {"role": "assistant", "content": assistant},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "ok"}]},
        ])
    };
    let body = anthropic_body(tools.clone(), json!({"messages": messages(false)}));
    let outcome = run(Wire::AnthropicMessages, &body);
    assert_eq!(reason_of(outcome, "joined"), reason::MID_SESSION_JOIN);
    let body = anthropic_body(tools, json!({"messages": messages(true)}));
    edit_of(run(Wire::AnthropicMessages, &body), "searched first");
}

#[test]
fn unparseable_bodies_are_unchanged() {
    for body in [
        "not json",
        "{\"tools\": 3}",
        "{\"tools\": [1, 2]}",
        "{\"tools\": [], \"tools\": []}",
        "{\"tools\": [{\"name\": 1}, {\"name\": \"b\"}]}",
    ] {
        assert_eq!(
            reason_of(run(Wire::AnthropicMessages, body), body),
            reason::UNPARSEABLE
        );
    }
    for messages in [
        json!("oops"),
        json!(7),
        json!([{"role": "user", "content": 7}]),
    ] {
        let body = anthropic_body(many_tools(10), json!({"messages": messages}));
        let outcome = run(Wire::AnthropicMessages, &body);
        assert_eq!(reason_of(outcome, &body), reason::UNPARSEABLE);
    }
    let headers = HeaderMap::new();
    let outcome = DeferStage::new(any_size())
        .apply(&Request {
            wire: Wire::AnthropicMessages,
            path: "/v1/messages",
            headers: &headers,
            body: &[0xff, 0xfe],
        })
        .expect("stage runs");
    assert_eq!(reason_of(outcome, "bytes"), reason::UNPARSEABLE);
}

#[test]
fn the_most_relevant_tools_stay_loaded() {
    let mut tools = many_tools(12);
    tools[8] = tool(
        "jira_find",
        "Search jira issues by text, e.g. about a login bug",
    );
    let options = DeferOptions {
        keep_relevant: 1,
        ..any_size()
    };
    let body = anthropic_body(tools, json!({}));
    let edit = edit_of(
        run_with(options, Wire::AnthropicMessages, &body),
        "relevant",
    );
    let out = tools_of(&apply(body.as_bytes(), &edit));
    let loaded: Vec<&str> = out
        .iter()
        .filter(|t| t.get("defer_loading").is_none())
        .filter_map(|t| t["name"].as_str())
        .collect();
    assert_eq!(loaded, ["jira_find", "tool_search_tool_regex"]);
}

/// Names of the tools left loaded (no `defer_loading`) after the stage, keeping one.
fn loaded_keeping_one(wire: Wire, body: &str) -> Vec<String> {
    let options = DeferOptions {
        keep_relevant: 1,
        ..any_size()
    };
    let edit = edit_of(run_with(options, wire, body), "one kept");
    tools_of(&apply(body.as_bytes(), &edit))
        .iter()
        .filter(|t| t.get("defer_loading").is_none())
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn arguments_count_towards_relevance_on_both_wires() {
    // Only `lookup`'s argument (Anthropic `input_schema`, Responses `parameters`) says what the
    // task is about.
    let argument = json!({"type": "object", "properties": {
        "issue": {"type": "string", "description": "The jira issue about a login failure"}}});
    let mut tools = many_tools(4);
    tools[2] = json!({"name": "lookup", "description": "Look something up",
                      "input_schema": argument});
    let body = anthropic_body(tools, json!({}));
    assert_eq!(
        loaded_keeping_one(Wire::AnthropicMessages, &body),
        ["lookup", "tool_search_tool_regex"]
    );

    let function = |name: &str, parameters: Value| {
        json!({"type": "function", "name": name, "description": "Look something up",
               "parameters": parameters})
    };
    let failing = json!({"type": "object", "properties": {
        "test": {"type": "string", "description": "The failing test to fix"}}});
    let tools = vec![
        function("first", json!({"type": "object", "properties": {}})),
        function("second", failing),
        function("third", json!({"type": "object"})),
    ];
    let body = responses_body(tools, json!({}));
    assert_eq!(loaded_keeping_one(Wire::Responses, &body), ["second"]);
}

#[test]
fn bm25_variant_adds_the_bm25_search_tool() {
    let options = DeferOptions {
        search: SearchVariant::from_name("BM25").expect("known variant"),
        ..any_size()
    };
    assert_eq!(SearchVariant::from_name("fuzzy"), None);
    let body = anthropic_body(many_tools(10), json!({}));
    let edit = edit_of(run_with(options, Wire::AnthropicMessages, &body), "bm25");
    let out = tools_of(&apply(body.as_bytes(), &edit));
    assert_eq!(
        out.last(),
        Some(&json!({"type": "tool_search_tool_bm25_20251119", "name": "tool_search_tool_bm25"}))
    );
}

fn many_functions(n: usize) -> Vec<Value> {
    (0..n)
        .map(|i| {
            json!({"type": "function", "name": format!("fn_{i}"),
            "description": format!("Function {i}"), "parameters": {"type": "object"}})
        })
        .collect()
}

fn responses_body(tools: Vec<Value>, extra: Value) -> String {
    let mut body = json!({"model": "gpt-5.5", "input": "fix the failing test", "tools": tools});
    if let (Some(body), Some(extra)) = (body.as_object_mut(), extra.as_object()) {
        body.extend(extra.clone());
    }
    body.to_string()
}

#[test]
fn codex_request_without_its_own_search_gets_tool_search_and_deferred_functions() {
    // Codex's real request, minus its client-side tool_search: pith defers function tools
    // and never touches the custom (apply_patch) and hosted (web_search) tools.
    let captures = load_folder("codex-0.169.0/responses-agentsmd-mcp40").expect("captures");
    let mut value: Value = serde_json::from_slice(&captures[0].body).expect("json");
    let tools = value["tools"].as_array_mut().expect("tools");
    tools.retain(|t| t["type"] != "tool_search");
    let body = value.to_string();
    let edit = edit_of(run(Wire::Responses, &body), "codex");
    assert!(edit.headers.is_empty(), "no beta header on Responses");
    let out = tools_of(&apply(body.as_bytes(), &edit));
    assert_eq!(out.last(), Some(&json!({"type": "tool_search"})));
    for t in &out {
        if t.get("defer_loading").is_some() {
            assert_eq!(t["type"], "function", "{t}");
        }
    }
    assert!(
        out.iter()
            .any(|t| t["type"] == "custom" && t.get("defer_loading").is_none())
    );
    let deferred = out
        .iter()
        .filter(|t| t.get("defer_loading").is_some())
        .count();
    // create_goal's description names update_goal, which stays loaded beside the five.
    assert_eq!(deferred, 12 - 2 - 6, "12 tools, 2 not functions, 6 kept");
}

#[test]
fn responses_history_with_a_deferred_call_and_no_search_output_is_a_join() {
    let input = json!([
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix it"}]},
        {"type": "function_call", "call_id": "c1", "name": "fn_9", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "done"},
    ]);
    let body = responses_body(many_functions(10), json!({"input": input}));
    assert_eq!(
        reason_of(run(Wire::Responses, &body), "join"),
        reason::MID_SESSION_JOIN
    );
    let mut input = input;
    if let Some(items) = input.as_array_mut() {
        items.insert(
            1,
            json!({"type": "tool_search_output", "execution": "server",
            "tools": [{"type": "function", "name": "fn_9"}]}),
        );
    }
    let body = responses_body(many_functions(10), json!({"input": input}));
    edit_of(run(Wire::Responses, &body), "surfaced");
}

/// A ranker with fixed answers, standing in for embeddings.
struct Fixed(Option<Vec<f64>>);

impl ToolRanker for Fixed {
    fn scores(&self, task: &str, tools: &[ToolText<'_>]) -> Option<Vec<f64>> {
        assert_eq!(task, "find the jira issue about login");
        assert!(tools.iter().all(|t| t.definition.starts_with('{')));
        self.0.clone()
    }
}

fn loaded_with(ranker: Fixed) -> Vec<String> {
    let mut tools = many_tools(6);
    tools[2] = tool("jira_find", "Search jira issues about login");
    let body = anthropic_body(tools, json!({}));
    let stage = DeferStage::new(DeferOptions {
        keep_relevant: 1,
        ..any_size()
    })
    .with_ranker(Arc::new(ranker));
    let headers = HeaderMap::new();
    let outcome = stage
        .apply(&Request {
            wire: Wire::AnthropicMessages,
            path: "/v1/messages",
            headers: &headers,
            body: body.as_bytes(),
        })
        .expect("stage runs");
    let out = tools_of(&apply(body.as_bytes(), &edit_of(outcome, "ranked")));
    out.iter()
        .filter(|t| t.get("defer_loading").is_none() && t.get("type").is_none())
        .filter_map(|t| t["name"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn an_injected_ranker_decides_and_bm25_answers_when_it_cannot() {
    let semantic = Fixed(Some(vec![0.1, 0.2, 0.0, 0.9, 0.3, 0.4]));
    assert_eq!(loaded_with(semantic), ["tool_3"]);
    assert_eq!(loaded_with(Fixed(None)), ["jira_find"]);
    assert_eq!(
        loaded_with(Fixed(Some(vec![1.0]))),
        ["jira_find"],
        "wrong length"
    );
}

#[test]
fn a_tool_a_loaded_tool_tells_the_model_to_use_stays_loaded() {
    // The task singles out `jira_login`; its description sends the model to `Lookup` first
    // (a name with a capital: any whole-word mention), and `Lookup`'s to "the audit tool" (a
    // plain word: only as "<name> tool"), which mentions "history" as a word, not a tool.
    let mut tools = many_tools(12);
    tools.push(tool(
        "jira_login",
        "Finds the jira issue about login. Call Lookup first.",
    ));
    tools.push(tool(
        "Lookup",
        "Resolves ids; record it with the audit tool.",
    ));
    tools.push(tool("audit", "Writes the history of a change."));
    tools.push(tool("history", "Shows past changes."));
    tools.push(tool("Unnamed", "Nothing names this one."));
    let keep_one = DeferOptions {
        keep_relevant: 1,
        ..any_size()
    };
    let body = anthropic_body(tools, json!({}));
    let edit = edit_of(
        run_with(keep_one, Wire::AnthropicMessages, &body),
        "named tools",
    );
    let loaded = loaded_names(&apply(body.as_bytes(), &edit));
    assert_eq!(
        loaded,
        ["jira_login", "Lookup", "audit", "tool_search_tool_regex"]
    );
}

/// A ranker that counts its calls and ranks by the order the tools came in.
#[derive(Default)]
struct Counting(std::sync::atomic::AtomicUsize);

impl ToolRanker for Counting {
    fn scores(&self, _task: &str, tools: &[ToolText<'_>]) -> Option<Vec<f64>> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Some((0..tools.len()).rev().map(|i| i as f64).collect())
    }
}

fn turn(stage: &DeferStage, tools: Vec<Value>, prompt: &str) -> Outcome {
    let body = anthropic_body(
        tools,
        json!({"messages": [{"role": "user", "content": prompt}]}),
    );
    stage
        .apply(&Request {
            wire: Wire::AnthropicMessages,
            path: "/v1/messages",
            headers: &HeaderMap::new(),
            body: body.as_bytes(),
        })
        .expect("stage runs")
}

#[test]
fn a_sessions_tools_are_ranked_once_and_each_turn_defers_the_same() {
    let ranker = Arc::new(Counting::default());
    let stage = DeferStage::new(DeferOptions {
        keep_relevant: 2,
        ..any_size()
    })
    .with_ranker(ranker.clone());
    let first = edit_of(turn(&stage, many_tools(8), "fix the login"), "turn 1");
    let second = edit_of(turn(&stage, many_tools(8), "fix the login"), "turn 2");
    assert_eq!(first.facts, second.facts);
    assert_eq!(ranker.0.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Another task is another decision.
    edit_of(
        turn(&stage, many_tools(8), "write the docs"),
        "another task",
    );
    assert_eq!(ranker.0.load(std::sync::atomic::Ordering::SeqCst), 2);
}

#[test]
fn too_little_to_defer_is_decided_before_the_tools_are_ranked() {
    let ranker = Arc::new(Counting::default());
    let stage = DeferStage::new(DeferOptions {
        keep_relevant: 2,
        min_deferred_chars: 1_000_000,
        ..any_size()
    })
    .with_ranker(ranker.clone());
    assert_eq!(
        reason_of(turn(&stage, many_tools(8), "fix the login"), "small"),
        reason::TOO_LITTLE_TO_DEFER
    );
    assert_eq!(ranker.0.load(std::sync::atomic::Ordering::SeqCst), 0);
}
