//! Each rule of the pins stage on small bodies, on each wire.

use pith_transform::pins::{Pin, Tier, reason};
use pith_wire::Wire;
use serde_json::json;

use super::*;

const BLOCK: &str =
    "<pith-pins>\nRules the user pinned. They hold for this reply and every later one:\n";

fn session(text: &str) -> Pin {
    Pin {
        text: text.into(),
        tier: Tier::Session,
    }
}

/// A conversation in which the user pinned a rule (answered by pith), then asked for real.
fn anthropic_session() -> String {
    json!({
        "model": "claude-x",
        "system": [{"type": "text", "text": "You are a coding agent.", "cache_control": {"type": "ephemeral"}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "@pith pin be concise"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "@pith pinned 1: be concise\n"}]},
            {"role": "user", "content": [{"type": "text", "text": "fix calc.py", "cache_control": {"type": "ephemeral"}}]}
        ]
    })
    .to_string()
}

#[test]
fn a_command_turn_and_its_answer_go_and_the_block_lands_after_the_last_breakpoint() {
    let body = anthropic_session();
    let out = json(&rewritten(Wire::AnthropicMessages, &body));
    let messages = out["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{out}");
    let content = messages[0]["content"].as_array().expect("blocks");
    assert_eq!(content[0]["text"], "fix calc.py");
    assert_eq!(content[0]["cache_control"], json!({"type": "ephemeral"}));
    let block = content[1]["text"].as_str().expect("the pin block");
    assert!(block.starts_with(BLOCK), "{block}");
    assert!(block.contains("- be concise\n"), "{block}");
    assert!(content[1].get("cache_control").is_none());
    let e = edit(Wire::AnthropicMessages, &body);
    assert_only_removals_besides_the_block(&e);
    let facts: Vec<(&str, u64)> = e.facts.iter().map(|f| (f.name, f.value)).collect();
    // The edit's net size: the command turns it drops are longer than the block it adds
    // (the command line moves into the block), so it keeps characters out on balance.
    let removed: usize = e.splices.iter().map(|s| s.range.len()).sum();
    let added: usize = e.splices.iter().map(|s| s.replacement.len()).sum();
    assert!(removed > added, "{removed} {added}");
    assert_eq!(
        facts,
        [
            ("pins", 1),
            ("lines_moved", 1),
            ("turns_dropped", 1),
            ("chars_out", (removed - added) as u64)
        ]
    );
}

#[test]
fn a_mixed_turn_keeps_its_prose_and_loses_only_the_command_lines() {
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "fix calc.py\n@pith pin use tabs\nand run the tests"}
    ]})
    .to_string();
    assert_eq!(
        answer(Wire::AnthropicMessages, &body),
        None,
        "prose goes upstream"
    );
    let out = json(&rewritten(Wire::AnthropicMessages, &body));
    let content = &out["messages"][0]["content"];
    assert_eq!(content[0]["text"], "fix calc.py\nand run the tests");
    assert!(
        content[1]["text"]
            .as_str()
            .expect("block")
            .contains("- use tabs\n")
    );
    // The last line too, with the newline before it.
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": "fix it\n@pith pin use tabs"}]}
    ]})
    .to_string();
    let out = json(&rewritten(Wire::AnthropicMessages, &body));
    assert_eq!(out["messages"][0]["content"][0]["text"], "fix it");
}

#[test]
fn commands_in_a_system_prompt_are_file_pins_and_an_emptied_block_passes_its_marker_on() {
    let body = json!({"model": "m",
        "system": [
            {"type": "text", "text": "base prompt"},
            {"type": "text", "text": "Instructions from: /p/AGENTS.md\n@pith pin use tabs", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [{"role": "user", "content": "hi"}]})
    .to_string();
    let out = json(&rewritten(Wire::AnthropicMessages, &body));
    assert_eq!(out["system"][1]["text"], "Instructions from: /p/AGENTS.md");
    let body = json!({"model": "m",
        "system": [
            {"type": "text", "text": "base prompt"},
            {"type": "text", "text": "@pith pin use tabs\n", "cache_control": {"type": "ephemeral"}}
        ],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]})
    .to_string();
    let out = json(&rewritten(Wire::AnthropicMessages, &body));
    let system = out["system"].as_array().expect("system");
    assert_eq!(system.len(), 1, "{out}");
    assert_eq!(system[0]["text"], "base prompt");
    assert_eq!(system[0]["cache_control"], json!({"type": "ephemeral"}));
    assert!(
        out["messages"][0]["content"][1]["text"]
            .as_str()
            .expect("block")
            .contains("- use tabs\n")
    );
}

#[test]
fn a_turn_of_only_commands_is_answered_with_the_pins() {
    let body = json!({"model": "claude-x", "stream": true, "messages": [
        {"role": "user", "content": [{"type": "text", "text": "\"@pith pin be concise, no walls of text\""}]}
    ]})
    .to_string();
    let a = answer(Wire::AnthropicMessages, &body).expect("answered locally");
    assert!(
        a.text
            .starts_with("@pith pinned 1: be concise, no walls of text\n"),
        "{}",
        a.text
    );
    assert!(a.stream);
    assert_eq!(a.model, "claude-x");
    assert_eq!(a.pins, [session("be concise, no walls of text")]);
    assert_eq!(
        unchanged(Wire::AnthropicMessages, &body),
        reason::COMMAND_TURN,
        "a command turn that reaches the stage goes up as sent"
    );
    assert_eq!(
        answer_at(Wire::AnthropicMessages, "/v1/messages/count_tokens", &body),
        None,
        "count_tokens is never answered with a message"
    );
}

#[test]
fn every_unpin_form_on_session_pins_and_a_file_pin_refused_with_its_file() {
    let turn = |text: &str| json!({"role": "user", "content": text});
    let said = |text: &str| json!({"role": "assistant", "content": format!("@pith {text}")});
    let body = json!({"model": "m",
    "system": "Instructions from: /p/AGENTS.md\n@pith pin use tabs",
    "messages": [
        turn("@pith pin be concise"), said("ok"),
        turn("@pith pin run tests first"), said("ok"),
        turn("@pith pin no emojis"), said("ok"),
        turn("@pith unpin 2"), said("ok"),
        turn("@pith unpin run"), said("ok"),
        turn("@pith unpin 1\n@pith unpin use tabs\n@pith unpin 9\n@pith pins")
    ]})
    .to_string();
    let a = answer(Wire::AnthropicMessages, &body).expect("answered");
    assert!(
        a.text
            .contains("cannot unpin 1 (use tabs): it is a line in /p/AGENTS.md"),
        "{}",
        a.text
    );
    assert!(
        a.text.contains("no pin 9: the pins are 1 to 2"),
        "{}",
        a.text
    );
    assert!(
        a.text.contains("1. use tabs (file: /p/AGENTS.md)\n"),
        "{}",
        a.text
    );
    assert!(a.text.contains("2. no emojis (session)\n"), "{}", a.text);
    assert_eq!(a.pins.len(), 2);
    // `unpin all` clears session pins only; `unpin` alone lists.
    let body = json!({"model": "m",
        "system": "Instructions from: /p/AGENTS.md\n@pith pin use tabs",
        "messages": [turn("@pith pin a"), said("ok"), turn("@pith unpin all\n@pith unpin")]})
    .to_string();
    let a = answer(Wire::AnthropicMessages, &body).expect("answered");
    assert_eq!(a.pins.len(), 1, "{}", a.text);
    assert!(a.text.starts_with("@pith unpinned: a\n"), "{}", a.text);
}

#[test]
fn rewinding_the_conversation_rewinds_the_pins() {
    let turn = |text: &str| json!({"role": "user", "content": text});
    let said = json!({"role": "assistant", "content": "@pith ok"});
    let full = json!({"model": "m", "messages": [
        turn("@pith pin a"), said.clone(), turn("@pith unpin a"), said.clone(), turn("@pith pins")]})
    .to_string();
    assert!(
        answer(Wire::AnthropicMessages, &full)
            .expect("answered")
            .pins
            .is_empty()
    );
    let rewound =
        json!({"model": "m", "messages": [turn("@pith pin a"), said, turn("@pith pins")]})
            .to_string();
    assert_eq!(
        answer(Wire::AnthropicMessages, &rewound)
            .expect("answered")
            .pins,
        [session("a")]
    );
}

#[test]
fn an_assistant_prefill_leaves_everything_in_place() {
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "@pith pin a"},
        {"role": "assistant", "content": "@pith pinned 1: a"},
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "Sure,"}
    ]})
    .to_string();
    assert_eq!(
        unchanged(Wire::AnthropicMessages, &body),
        reason::NOWHERE_TO_LAND
    );
    let chat = body.replace("\"m\"", "\"gpt\"");
    assert_eq!(
        unchanged(Wire::ChatCompletions, &chat),
        reason::NOWHERE_TO_LAND
    );
}

#[test]
fn no_commands_and_prose_mentioning_pith_pass_unchanged() {
    let plain = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}).to_string();
    assert_eq!(
        unchanged(Wire::AnthropicMessages, &plain),
        reason::NO_COMMANDS
    );
    let prose =
        json!({"model": "m", "messages": [{"role": "user", "content": "what does @pith pin do?"}]})
            .to_string();
    assert_eq!(
        unchanged(Wire::AnthropicMessages, &prose),
        reason::NO_COMMAND_LINES
    );
    assert_eq!(answer(Wire::AnthropicMessages, &prose), None);
    // A command inside a tool result is the tool's output, not the user's.
    let tool = json!({"model": "m", "messages": [
        {"role": "user", "content": "read it"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Read", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "@pith pin x"}]}
    ]})
    .to_string();
    assert_eq!(
        unchanged(Wire::AnthropicMessages, &tool),
        reason::NO_COMMAND_LINES
    );
    assert_eq!(answer(Wire::AnthropicMessages, &tool), None);
}

#[test]
fn bodies_pins_cannot_read_are_forwarded_never_answered() {
    for body in [
        "{\"messages\": [{\"role\": \"user\", \"content\": \"@pith pin a\"}",
        "[\"@pith pin a\"]",
        "{\"messages\": \"@pith pin a\"}",
    ] {
        assert_eq!(answer(Wire::AnthropicMessages, body), None, "{body}");
        assert_eq!(
            unchanged(Wire::AnthropicMessages, body),
            reason::UNREADABLE,
            "{body}"
        );
    }
}

#[test]
fn claude_codes_first_message_keeps_its_reminders_when_the_command_goes() {
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": [
            {"type": "text", "text": "<system-reminder>\nContents of /p/CLAUDE.md (project instructions):\n\nuse tabs\n</system-reminder>"},
            {"type": "text", "text": "@pith pin be concise"}
        ]},
        {"role": "system", "content": "# Environment"},
        {"role": "assistant", "content": [{"type": "text", "text": "@pith pinned 1: be concise"}]},
        {"role": "user", "content": [{"type": "text", "text": "fix it"}]}
    ]})
    .to_string();
    let out = json(&rewritten(Wire::AnthropicMessages, &body));
    let messages = out["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 3, "{out}");
    assert_eq!(messages[0]["content"].as_array().expect("blocks").len(), 1);
    assert!(
        messages[0]["content"][0]["text"]
            .as_str()
            .expect("reminder")
            .contains("CLAUDE.md")
    );
    assert_eq!(messages[1]["role"], "system");
    assert_eq!(messages[2]["content"][0]["text"], "fix it");
    assert!(
        messages[2]["content"][1]["text"]
            .as_str()
            .expect("block")
            .contains("- be concise")
    );
}

#[test]
fn chat_completions_gets_the_block_as_a_last_user_message() {
    let body = json!({"model": "gpt", "messages": [
        {"role": "system", "content": "You are opencode.\nInstructions from: /p/AGENTS.md\n@pith pin use tabs"},
        {"role": "user", "content": "\"@pith pin be concise\""},
        {"role": "assistant", "content": "@pith pinned 2: be concise"},
        {"role": "user", "content": "\"fix calc.py\""},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c", "content": "1 failed"}
    ]})
    .to_string();
    let e = edit(Wire::ChatCompletions, &body);
    assert_only_removals_besides_the_block(&e);
    let out = json(&rewritten(Wire::ChatCompletions, &body));
    let messages = out["messages"].as_array().expect("messages");
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(
        roles,
        ["system", "user", "assistant", "tool", "user"],
        "{out}"
    );
    assert_eq!(
        messages[0]["content"],
        "You are opencode.\nInstructions from: /p/AGENTS.md"
    );
    let block = messages[4]["content"].as_str().expect("block");
    assert!(block.contains("- use tabs\n- be concise\n"), "{block}");
    let turn = json!({"model": "gpt", "stream": true, "stream_options": {"include_usage": true},
        "messages": [{"role": "user", "content": "@pith pins"}]})
    .to_string();
    let a = answer(Wire::ChatCompletions, &turn).expect("answered");
    assert!(a.include_usage && a.stream);
}

#[test]
fn responses_gets_the_block_as_a_last_developer_message() {
    let body = json!({"model": "gpt", "input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are Codex."}]},
        {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "# AGENTS.md instructions for /p\n\n<INSTRUCTIONS>\n@pith pin use tabs\n</INSTRUCTIONS>"},
            {"type": "input_text", "text": "<environment_context>\n  <cwd>/p</cwd>\n</environment_context>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "@pith pin be concise"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "@pith pinned 2: be concise"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "fix calc.py"}]},
        {"type": "function_call", "call_id": "c", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "1 failed"}
    ]})
    .to_string();
    let e = edit(Wire::Responses, &body);
    assert_only_removals_besides_the_block(&e);
    let out = json(&rewritten(Wire::Responses, &body));
    let input = out["input"].as_array().expect("input");
    assert_eq!(input.len(), 6, "{out}");
    assert_eq!(
        input[1]["content"][0]["text"],
        "# AGENTS.md instructions for /p\n\n<INSTRUCTIONS>\n</INSTRUCTIONS>"
    );
    assert_eq!(input[2]["content"][0]["text"], "fix calc.py");
    let last = &input[5];
    assert_eq!(last["role"], "developer");
    let block = last["content"][0]["text"].as_str().expect("block");
    assert!(block.contains("- use tabs\n- be concise\n"), "{block}");
    // A string input is one user message; it becomes a list to take the block.
    let body = json!({"model": "gpt", "instructions": "@pith pin use tabs", "input": "fix it"})
        .to_string();
    let out = json(&rewritten(Wire::Responses, &body));
    assert_eq!(out["input"][0]["content"], "fix it");
    assert_eq!(out["input"][1]["role"], "developer");
    assert_eq!(
        out["instructions"], "@pith pin use tabs",
        "a string system prompt that would be left empty keeps its line"
    );
}

#[test]
fn applying_the_stage_twice_equals_applying_it_once() {
    for (wire, body) in [
        (Wire::AnthropicMessages, anthropic_session()),
        (
            Wire::ChatCompletions,
            json!({"model": "g", "messages": [{"role": "user", "content": "@pith pin a\nfix it"}]})
                .to_string(),
        ),
    ] {
        let once = rewritten(wire, &body);
        match outcome(wire, &once) {
            pith_transform::Outcome::Unchanged(_) => {}
            pith_transform::Outcome::Edited(e) => {
                let twice = apply_splices(once.as_bytes(), &e.splices).expect("apply");
                assert_eq!(String::from_utf8_lossy(&twice), once, "{wire}");
            }
        }
    }
}

#[test]
fn the_block_is_the_same_bytes_on_every_turn() {
    let base = |extra: Vec<Value>| {
        let mut messages = vec![
            json!({"role": "user", "content": "@pith pin be concise"}),
            json!({"role": "assistant", "content": "@pith pinned 1: be concise"}),
            json!({"role": "user", "content": [{"type": "text", "text": "fix it"}]}),
        ];
        messages.extend(extra);
        json!({"model": "m", "messages": messages}).to_string()
    };
    let block_of = |body: &str| {
        let e = edit(Wire::AnthropicMessages, body);
        split_block(&e).0.expect("a block").replacement.clone()
    };
    let one = block_of(&base(vec![]));
    let two = block_of(&base(vec![
        json!({"role": "assistant", "content": "done"}),
        json!({"role": "user", "content": [{"type": "text", "text": "thanks"}]}),
    ]));
    assert_eq!(one, two);
}

#[test]
fn a_command_turn_the_provider_answered_is_history_left_as_it_is() {
    // Pins were off (or pith was not in the path) when the user typed it: the model answered.
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "@pith pin be concise"},
        {"role": "assistant", "content": "I will keep it short."},
        {"role": "user", "content": "fix it"}
    ]})
    .to_string();
    assert_eq!(
        unchanged(Wire::AnthropicMessages, &body),
        reason::NOTHING_TO_MOVE
    );
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": "@pith pin be concise"},
        {"role": "assistant", "content": "I will keep it short."},
        {"role": "user", "content": "@pith pins"}
    ]})
    .to_string();
    let a = answer(Wire::AnthropicMessages, &body).expect("answered");
    assert!(a.pins.is_empty(), "{}", a.text);
}

#[test]
fn examples_in_documents_are_not_commands() {
    // An @-mentioned README, inlined mid-conversation: its examples are indented or fenced.
    let readme = "<system-reminder>\nContents of /p/README.md:\n\n```\n@pith pin be concise\n```\n    @pith pin use tabs\n</system-reminder>";
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": readme}, {"type": "text", "text": "summarize it"}]}
    ]})
    .to_string();
    assert_eq!(
        unchanged(Wire::AnthropicMessages, &body),
        reason::NO_COMMAND_LINES
    );
    // Claude Code's git status reminder in the first message is not a rules file.
    let status = "<system-reminder>\n# gitStatus\nRecent commits:\n@pith pin from a commit title\n</system-reminder>";
    let body = json!({"model": "m", "messages": [
        {"role": "user", "content": [{"type": "text", "text": status}, {"type": "text", "text": "hi"}]}
    ]})
    .to_string();
    assert_eq!(
        unchanged(Wire::AnthropicMessages, &body),
        reason::NO_COMMAND_LINES
    );
}

#[test]
fn a_command_only_message_beside_others_in_its_turn_goes_whole() {
    // Queued input: two user messages in one turn, the first only a command.
    let body = json!({"model": "g", "messages": [
        {"role": "user", "content": "@pith pin be brief"},
        {"role": "user", "content": "fix calc.py"}
    ]})
    .to_string();
    assert_eq!(
        answer(Wire::ChatCompletions, &body),
        None,
        "the turn has prose"
    );
    let out = json(&rewritten(Wire::ChatCompletions, &body));
    let messages = out["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 2, "{out}");
    assert_eq!(messages[0]["content"], "fix calc.py");
    assert!(
        messages[1]["content"]
            .as_str()
            .expect("block")
            .contains("- be brief")
    );
    assert!(!out.to_string().contains("@pith pin"), "moved, not copied");
}
