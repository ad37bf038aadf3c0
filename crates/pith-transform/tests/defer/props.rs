//! Properties over generated tool lists.

use http::HeaderMap;
use pith_transform::defer::reason;
use pith_transform::{DeferOptions, DeferStage, Outcome, Request, Stage, apply_splices};
use pith_wire::Wire;

use super::any_size;
use proptest::prelude::*;
use serde_json::{Value, json};

const WORDS: &[&str] = &[
    "jira",
    "issue",
    "search",
    "file",
    "read",
    "write",
    "test",
    "tests",
    "fails",
    "fix",
    "git",
    "diff",
    "log",
    "deploy",
    "the",
    "a",
    "calendar",
    "event",
    "user",
    "login",
    "ÜBER",
    "naïve",
    "HTTPServer",
    "readFile",
    "snake_case",
    "42",
];

fn words(max: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(prop::sample::select(WORDS), 0..max).prop_map(|w| w.join(" "))
}

#[derive(Debug, Clone)]
struct GenTool {
    server: bool,
    description: Option<String>,
    breakpoint: bool,
}

fn gen_tool() -> impl Strategy<Value = GenTool> {
    (
        prop::bool::weighted(0.1),
        prop::option::of(words(30)),
        prop::bool::weighted(0.2),
    )
        .prop_map(|(server, description, breakpoint)| GenTool {
            server,
            description,
            breakpoint,
        })
}

#[expect(
    clippy::disallowed_methods,
    reason = "writes a generated client body (test input), not one pith forwards"
)]
fn render(tools: &[GenTool], task: &str, wire: Wire, pretty: bool) -> String {
    let tools: Vec<Value> = tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let mut tool = match (wire, t.server) {
                (Wire::AnthropicMessages, true) => {
                    json!({"type": "web_search_20250305", "name": format!("web_{i}")})
                }
                (Wire::AnthropicMessages, false) => json!({"name": format!("tool_{i}"),
                    "input_schema": {"type": "object", "properties": {"x": {"type": "string"}}}}),
                (_, true) => json!({"type": "web_search"}),
                (_, false) => json!({"type": "function", "name": format!("fn_{i}"),
                    "parameters": {"type": "object"}}),
            };
            if let Some(d) = &t.description {
                tool["description"] = json!(d);
            }
            if t.breakpoint && wire == Wire::AnthropicMessages {
                tool["cache_control"] = json!({"type": "ephemeral"});
            }
            tool
        })
        .collect();
    let body = match wire {
        Wire::AnthropicMessages => json!({"model": "m", "max_tokens": 10, "tools": tools,
            "messages": [{"role": "user", "content": [{"type": "text", "text": task}]}]}),
        _ => json!({"model": "m", "tools": tools, "input": task}),
    };
    if pretty {
        serde_json::to_string_pretty(&body).unwrap_or_default()
    } else {
        body.to_string()
    }
}

fn run(stage: &DeferStage, wire: Wire, body: &[u8]) -> Outcome {
    let headers = HeaderMap::new();
    stage
        .apply(&Request {
            wire,
            path: "/",
            headers: &headers,
            body,
        })
        .expect("the stage never errors on well-formed JSON")
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn deferral_is_valid_safe_and_idempotent(
        tools in prop::collection::vec(gen_tool(), 0..40),
        task in words(12),
        keep_relevant in 0usize..8,
        small_tool_chars in prop::sample::select(vec![0usize, 0, 90, 150, 400]),
        responses in any::<bool>(),
        pretty in any::<bool>(),
    ) {
        let wire = if responses { Wire::Responses } else { Wire::AnthropicMessages };
        let body = render(&tools, &task, wire, pretty);
        let stage = DeferStage::new(DeferOptions { keep_relevant, small_tool_chars, ..any_size() });
        let Outcome::Edited(edit) = run(&stage, wire, body.as_bytes()) else {
            return Ok(());
        };
        let out = apply_splices(body.as_bytes(), &edit.splices).expect("splices apply");
        let value: Value = serde_json::from_slice(&out).expect("output is valid JSON");
        let out_tools = value["tools"].as_array().expect("tools");
        prop_assert_eq!(out_tools.len(), tools.len() + 1);
        let client_tools = &out_tools[..tools.len()];
        prop_assert!(client_tools.iter().any(|t| t.get("defer_loading").is_none()),
            "every client tool deferred");
        for t in out_tools {
            prop_assert!(!(t.get("defer_loading").is_some() && t.get("cache_control").is_some()),
                "cache_control on a deferred tool: {}", t);
        }
        let marks_before = tools.iter().filter(|t| t.breakpoint).count();
        let marks_after = out_tools.iter().filter(|t| t.get("cache_control").is_some()).count();
        prop_assert!(marks_after <= marks_before);
        prop_assert_eq!(marks_after == 0, marks_before == 0 || wire != Wire::AnthropicMessages);
        // Twice is once: the second pass sees a client that already defers.
        match run(&stage, wire, &out) {
            Outcome::Unchanged(r) => prop_assert_eq!(r, reason::ALREADY_DEFERRING),
            Outcome::Edited(e) => prop_assert!(false, "second pass edited: {:?}", e),
        }
    }
}
