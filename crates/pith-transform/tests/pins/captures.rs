//! Real captures with a pin line added to their rules file, and multi-turn sessions with pins
//! on each wire: the block at the tail, every other byte the client's, and the rewritten
//! prefix of each turn kept by the next.

use pith_testkit::fixtures::{Capture, captures};
use pith_transform::pins::Tier;
use pith_transform::{DeferOptions, DeferStage, Pipeline};
use pith_wire::Wire;
use serde_json::value::RawValue;

use super::*;

/// A rule line placed inside the AGENTS.md both agentsmd captures inline.
const RULE_AT: &str = "- Never modify test_calc.py.\\n";
const RULE: &str = "- Never modify test_calc.py.\\n@pith pin use tabs\\n";

fn session(folder: &str) -> Vec<Capture> {
    let mut out: Vec<Capture> = captures()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter(|c| format!("{}/{}", c.client_folder, c.scenario) == folder)
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    assert!(!out.is_empty(), "no captures in {folder}");
    out
}

fn body_of(c: &Capture) -> String {
    String::from_utf8(c.body.to_vec()).expect("captures are UTF-8")
}

fn wire_of(c: &Capture) -> Wire {
    Wire::from_path(c.path.split('?').next().unwrap_or("")).expect("a wire path")
}

/// Whether a capture is a main-loop request (not a title side call).
fn main_loop(c: &Capture) -> bool {
    body_of(c).contains("\"tools\"")
}

#[test]
fn a_pin_in_agents_md_is_a_file_pin_with_its_path_on_opencode_and_codex() {
    for folder in [
        "opencode-1.18.33/anthropic-agentsmd-mcp40",
        "codex-0.169.0/responses-agentsmd-mcp40",
    ] {
        for c in session(folder).iter().filter(|c| main_loop(c)) {
            let body = body_of(c);
            assert!(body.contains(RULE_AT), "{}: the rules file moved", c.id());
            let body = body.replacen(RULE_AT, RULE, 1);
            let wire = wire_of(c);
            let e = edit(wire, &body);
            assert_only_removals_besides_the_block(&e);
            let out = rewritten(wire, &body);
            assert!(
                !out.contains("@pith pin use tabs"),
                "{}: the line went up",
                c.id()
            );
            assert!(
                out.contains(RULE_AT),
                "{}: the rules around it are kept",
                c.id()
            );
            let (block, _) = split_block(&e);
            let block = block.expect("a pin block");
            assert!(block.replacement.contains("- use tabs\\n"), "{}", c.id());
            // Nothing else changed: the rewritten body minus the block is the client's body
            // minus the line.
            let without_block = out.replacen(&block.replacement, "", 1);
            assert_eq!(without_block, body_of(c), "{}", c.id());
        }
    }
}

/// `body` with the model's answer and one more user turn, holding `text`, at the end.
fn with_final_turn(wire: Wire, body: &str, text: &str) -> String {
    let key = if wire == Wire::Responses {
        "\"input\""
    } else {
        "\"messages\""
    };
    #[derive(serde::Deserialize)]
    struct Top<'a> {
        #[serde(borrow, alias = "input")]
        messages: &'a RawValue,
    }
    let top: Top<'_> = serde_json::from_str(body).expect("a body");
    let raw = top.messages.get();
    let end = raw.as_ptr() as usize - body.as_ptr() as usize + raw.len() - 1;
    assert!(body.contains(key));
    let turn = match wire {
        Wire::Responses => format!(
            ",{{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{{\"type\":\"output_text\",\"text\":\"Done.\"}}]}},{{\"type\":\"message\",\"role\":\"user\",\"content\":[{{\"type\":\"input_text\",\"text\":{}}}]}}",
            serde_json::Value::String(text.into())
        ),
        _ => format!(
            ",{{\"role\":\"assistant\",\"content\":[{{\"type\":\"text\",\"text\":\"Done.\"}}]}},{{\"role\":\"user\",\"content\":[{{\"type\":\"text\",\"text\":{}}}]}}",
            serde_json::Value::String(text.into())
        ),
    };
    format!("{}{turn}{}", &body[..end], &body[end..])
}

#[test]
fn unpinning_a_file_pin_is_refused_with_the_file_named() {
    for (folder, path) in [
        (
            "opencode-1.18.33/anthropic-agentsmd-mcp40",
            "/home/dev/calc/AGENTS.md",
        ),
        (
            "codex-0.169.0/responses-agentsmd-mcp40",
            "/home/dev/calc/AGENTS.md",
        ),
    ] {
        let c = session(folder)
            .into_iter()
            .find(main_loop)
            .expect("a request");
        let wire = wire_of(&c);
        let body = body_of(&c).replacen(RULE_AT, RULE, 1);
        // The capture's last item is a tool result (OpenCode) or a developer note (Codex):
        // the user's next turn follows it.
        let body = with_final_turn(wire, &body, "@pith unpin use tabs");
        let a = answer(wire, &body).expect("answered locally");
        assert_eq!(
            a.pins[0].tier,
            Tier::File {
                path: Some(path.into())
            },
            "{folder}"
        );
        assert!(
            a.text.contains(&format!(
                "cannot unpin 1 (use tabs): it is a line in {path}"
            )),
            "{folder}: {}",
            a.text
        );
    }
}

#[test]
fn claude_codes_claude_md_envelope_names_the_file() {
    let c = session("claude-code-2.1.328/fix-calc")
        .into_iter()
        .find(main_loop)
        .expect("a request");
    // This capture's project has no CLAUDE.md; put one where Claude Code inlines it: inside
    // the first message's leading reminder, after its `Contents of` envelope line.
    let at = "As you answer the user's questions, you can use the following context:\\n";
    let body = body_of(&c);
    assert!(body.contains(at));
    let body = body.replacen(
        at,
        &format!(
            "{at}# claudeMd\\nContents of /home/dev/calc/CLAUDE.md (project instructions, checked into the codebase):\\n\\n@pith pin use tabs\\n\\n"
        ),
        1,
    );
    let out = rewritten(Wire::AnthropicMessages, &body);
    assert!(!out.contains("@pith pin use tabs"));
    let body = with_final_turn(Wire::AnthropicMessages, &body, "@pith unpin 1");
    let a = answer(Wire::AnthropicMessages, &body).expect("answered");
    assert!(
        a.text
            .contains("cannot unpin 1 (use tabs): it is a line in /home/dev/calc/CLAUDE.md"),
        "{}",
        a.text
    );
}

/// `body` with a command turn and pith's answer put before the user's first typed prompt: a
/// session that opened with `@pith pin be concise`.
fn opened_with_a_pin(wire: Wire, client: &str, body: &str) -> String {
    let (at, pair) = match (wire, client) {
        (Wire::Responses, _) => (
            ",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"the test fails",
            "{\"type\":\"message\",\"role\":\"user\",\"content\":[{\"type\":\"input_text\",\"text\":\"@pith pin be concise\"}]},{\"type\":\"message\",\"role\":\"assistant\",\"content\":[{\"type\":\"output_text\",\"text\":\"@pith pinned 1: be concise\"}]},",
        ),
        (Wire::ChatCompletions, _) => (
            "{\"role\":\"user\",\"content\":\"\\\"the test fails",
            "{\"role\":\"user\",\"content\":\"\\\"@pith pin be concise\\\"\"},{\"role\":\"assistant\",\"content\":\"@pith pinned 1: be concise\"},",
        ),
        (Wire::AnthropicMessages, _) => (
            "{\"role\":\"user\",\"content\":[",
            "{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"\\\"@pith pin be concise\\\"\"}]},{\"role\":\"assistant\",\"content\":[{\"type\":\"text\",\"text\":\"@pith pinned 1: be concise\"}]},",
        ),
    };
    let mut found = body
        .find(at)
        .unwrap_or_else(|| panic!("{client}: no first prompt"));
    if wire == Wire::Responses {
        // Codex gives its items ids: the pair goes before the prompt's opening brace.
        found = body[..found].rfind('{').expect("the item's start");
    }
    format!("{}{pair}{}", &body[..found], &body[found..])
}

/// `text` without its `cache_control` members: clients move their breakpoints from turn to
/// turn, and a breakpoint's position is not part of the cached prefix.
fn without_markers(text: &str) -> String {
    let needle = ",\"cache_control\":{";
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(needle) {
        out.push_str(&rest[..at]);
        let after = &rest[at + needle.len() - 1..];
        let close = after.find('}').expect("a closed marker");
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    out
}

#[test]
fn over_a_session_the_block_is_the_only_addition_and_each_prefix_is_kept() {
    for folder in [
        "opencode-1.18.33/anthropic-fix-calc",
        "opencode-1.18.33/anthropic-agentsmd-mcp40",
        "opencode-1.18.33/chat-completions-fix-calc",
        "codex-0.169.0/responses-fix-calc",
        "codex-0.169.0/responses-agentsmd-mcp40",
        "claude-code-2.1.328/fix-calc",
    ] {
        let turns: Vec<(Wire, String, String)> = session(folder)
            .iter()
            .filter(|c| main_loop(c))
            .map(|c| {
                let wire = wire_of(c);
                let client = opened_with_a_pin(wire, folder, &body_of(c));
                let out = rewritten(wire, &client);
                (wire, client, out)
            })
            .collect();
        let mut kept_pairs = 0;
        for (i, (wire, client, out)) in turns.iter().enumerate() {
            let e = edit(*wire, client);
            assert_only_removals_besides_the_block(&e);
            assert!(
                !out.contains("@pith pin"),
                "{folder} turn {i}: a command went up"
            );
            assert!(
                !out.contains("@pith pinned"),
                "{folder} turn {i}: pith's answer went up"
            );
            let (block, _) = split_block(&e);
            let block = block.expect("a block");
            let cut = out.find(&block.replacement).expect("the block in the body");
            let Some((_, next_client, next_out)) = turns.get(i + 1) else {
                continue;
            };
            // Where the client kept its own prefix up to the block's place, pith keeps its
            // rewritten prefix too.
            let client_at = block.range.start;
            let client_kept =
                without_markers(next_client).starts_with(&without_markers(&client[..client_at]));
            if client_kept {
                kept_pairs += 1;
                assert!(
                    without_markers(next_out).starts_with(&without_markers(&out[..cut])),
                    "{folder}: turn {} does not keep turn {i}'s rewritten prefix",
                    i + 1
                );
            }
        }
        if !folder.starts_with("claude-code") {
            assert_eq!(
                kept_pairs,
                turns.len() - 1,
                "{folder}: the client kept its prefix on every turn, so must the test"
            );
        }
    }
}

#[test]
fn deferral_ranks_by_the_real_task_when_the_session_opens_with_a_pin() {
    let folder = "opencode-1.18.33/anthropic-agentsmd-mcp40";
    let pipeline = |pins: bool| {
        let mut p = Pipeline::new();
        if pins {
            p = p.with_stage(Box::new(PinsStage::new()));
        }
        p.with_stage(Box::new(DeferStage::new(DeferOptions::default())))
    };
    for c in session(folder).iter().filter(|c| main_loop(c)) {
        let headers = HeaderMap::new();
        let run = |p: &Pipeline, body: &str| {
            let r = p.run(&Request {
                wire: Wire::AnthropicMessages,
                path: "/v1/messages",
                headers: &headers,
                body: body.as_bytes(),
            });
            let body = r.body.clone().unwrap_or_else(|| body.as_bytes().to_vec());
            let names: Vec<&str> = r.applied().map(|a| a.stage).collect();
            let names = names.join(",");
            (String::from_utf8(body).expect("utf-8"), names)
        };
        let plain = run(&pipeline(false), &body_of(c));
        let pinned = run(
            &pipeline(true),
            &opened_with_a_pin(Wire::AnthropicMessages, folder, &body_of(c)),
        );
        assert_eq!(pinned.1, "pins,defer", "{}: both stages apply", c.id());
        let tools = |b: &str| {
            let v: Value = serde_json::from_str(b).expect("json");
            v["tools"].to_string()
        };
        assert_eq!(
            tools(&plain.0),
            tools(&pinned.0),
            "{}: the same tools loaded with and without the pin turn",
            c.id()
        );
    }
}
