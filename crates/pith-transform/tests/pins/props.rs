//! Generated conversations with command lines scattered through them.

use pith_transform::Outcome;
use pith_transform::pins::is_command_line;
use pith_wire::Wire;
use proptest::prelude::*;
use serde_json::json;

use super::*;

fn line() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("@pith pin be concise".to_owned()),
        Just("\"@pith pin use tabs\"".to_owned()),
        Just("@pith unpin 1".to_owned()),
        Just("@pith unpin all".to_owned()),
        Just("@pith pins".to_owned()),
        Just("@pith unpin".to_owned()),
        Just("fix calc.py".to_owned()),
        Just("about @pith pin".to_owned()),
        Just(String::new()),
        "[a-z \"\\\\é]{0,12}",
    ]
}

fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(line(), 1..4).prop_map(|l| l.join("\n"))
}

fn conversation(wire: Wire) -> impl Strategy<Value = String> {
    let turn = (text(), any::<bool>(), text(), any::<bool>());
    prop::collection::vec(turn, 1..5).prop_map(move |turns| {
        let mut messages = Vec::new();
        let n = turns.len();
        for (i, (user, blocks, reply, answered)) in turns.into_iter().enumerate() {
            let content = if blocks && wire != Wire::Responses {
                json!([{"type": "text", "text": user},
                       {"type": "text", "text": "more", "cache_control": {"type": "ephemeral"}}])
            } else {
                json!(user)
            };
            messages.push(match wire {
                Wire::Responses => json!({"type": "message", "role": "user", "content": content}),
                _ => json!({"role": "user", "content": content}),
            });
            if i + 1 < n {
                let reply = if answered {
                    format!("@pith {reply}")
                } else {
                    reply
                };
                messages.push(match wire {
                    Wire::Responses => json!({"type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": reply}]}),
                    _ => json!({"role": "assistant", "content": reply}),
                });
            }
        }
        match wire {
            Wire::Responses => json!({"model": "m", "input": messages}),
            _ => json!({"model": "m", "system": "sys\n@pith pin use tabs", "messages": messages}),
        }
        .to_string()
    })
}

/// Every text the user sent in `value`'s history (the pin block aside).
fn texts(value: &Value) -> Vec<String> {
    let history = value.get("messages").or_else(|| value.get("input"));
    let mut out = Vec::new();
    for m in history.and_then(Value::as_array).into_iter().flatten() {
        if m["role"] != "user" {
            continue;
        }
        match &m["content"] {
            Value::String(s) => out.push(s.clone()),
            Value::Array(blocks) => out.extend(
                blocks
                    .iter()
                    .filter_map(|b| b["text"].as_str())
                    .filter(|t| !t.starts_with("<pith-pins>"))
                    .map(str::to_owned),
            ),
            _ => {}
        }
    }
    out
}

fn check(wire: Wire, body: &str) -> Result<(), TestCaseError> {
    let answered = answer(wire, body);
    if let Some(a) = &answered {
        prop_assert!(a.text.starts_with("@pith "));
    }
    let Outcome::Edited(e) = outcome(wire, body) else {
        return Ok(());
    };
    prop_assert!(answered.is_none(), "a turn pith answers is not also edited");
    assert_only_removals_besides_the_block(&e);
    let once = apply_splices(body.as_bytes(), &e.splices).expect("apply");
    let once = String::from_utf8(once).expect("utf-8");
    let value: Value = serde_json::from_str(&once).expect("the edit is JSON");
    // A command line that still goes upstream is in a text of nothing but commands (a command
    // turn pith did not answer, left whole); a mixed text always loses its command lines.
    for text in texts(&value) {
        let lines: Vec<&str> = text.split('\n').collect();
        if lines.iter().any(|l| is_command_line(l)) {
            prop_assert!(
                lines
                    .iter()
                    .all(|l| is_command_line(l) || l.trim().is_empty()),
                "a command line left in prose: {text:?}"
            );
        }
    }
    // The pin block, when there is one, is the very last content: after every breakpoint.
    if once.contains("<pith-pins>") {
        let history = value.get("messages").or_else(|| value.get("input"));
        let last = history
            .and_then(Value::as_array)
            .and_then(|h| h.last())
            .expect("a last message");
        let tail = match &last["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts
                .last()
                .and_then(|p| p["text"].as_str())
                .unwrap_or_default()
                .to_owned(),
            _ => String::new(),
        };
        prop_assert!(
            tail.starts_with("<pith-pins>"),
            "the block is not last: {once}"
        );
        prop_assert_eq!(once.matches("<pith-pins>").count(), 1);
        // Every breakpoint the client set is still there (moved at most), never doubled.
        let markers = |t: &str| t.matches("\"cache_control\"").count();
        prop_assert!(markers(&once) <= markers(body));
        let doubled = once.contains(r#""cache_control":{"type":"ephemeral"},"cache_control""#);
        prop_assert!(!doubled, "a block with two markers: {}", once);
    }
    if let Outcome::Edited(again) = outcome(wire, &once) {
        let twice = apply_splices(once.as_bytes(), &again.splices).expect("apply");
        prop_assert_eq!(
            String::from_utf8_lossy(&twice),
            once.as_str(),
            "not idempotent"
        );
    }
    Ok(())
}

fn any_wire() -> impl Strategy<Value = Wire> {
    prop_oneof![
        Just(Wire::AnthropicMessages),
        Just(Wire::ChatCompletions),
        Just(Wire::Responses)
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn edits_are_removals_then_one_block_valid_and_idempotent(
        (wire, body) in any_wire().prop_flat_map(|w| (Just(w), conversation(w)))
    ) {
        check(wire, &body)?;
    }
}
