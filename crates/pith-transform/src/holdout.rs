//! A held-out share of conversations (issue 49): with `[proxy] holdout` set, a stable share of
//! conversations pass through with no transform at all, so what pith changes can be compared
//! with what it would have cost untouched. A conversation's arm is a hash of its opening (the
//! history before the model's first turn), so every turn of it lands in the same arm, across
//! restarts and across a team's instances, with nothing stored.
//!
//! Why the opening and not the first element: Codex's first input item is its environment
//! context (the same for every conversation in one directory) and a Chat Completions body's
//! first message is the client's system prompt; the task the person gave is in what follows,
//! before the model first answers.

use pith_wire::{Wire, skim};
use serde::Deserialize;
use twox_hash::XxHash3_128;

/// The ledger's name for the decision: a held-out request's only report.
pub const NAME: &str = "holdout";

/// Why a request was left unchanged by every stage.
pub mod reason {
    /// Its conversation is in the held-out share.
    pub const HELD_OUT: &str = "held_out";
}

/// What the decision and its reason are called for people.
pub const WORDS: crate::stage::StageWords = crate::stage::StageWords {
    stage: NAME,
    name: "hold-out",
    facts: &[],
    reasons: &[(
        reason::HELD_OUT,
        "held out: their conversations pass through untouched, to compare against \
         ([proxy] holdout)",
    )],
    came_back: None,
};

/// Whether the conversation `body` belongs to is in the held-out `share` (0 to 1). A body
/// whose history cannot be read is not held out (the stages read it as they would).
pub fn held_out(wire: Wire, body: &[u8], share: f64) -> bool {
    if share <= 0.0 {
        return false;
    }
    opening_hash(wire, body).is_some_and(|h| in_share(h, share))
}

/// Whether hash `h` falls in the first `share` of the hash space.
fn in_share(h: u64, share: f64) -> bool {
    // Exact for the shares people set (a tenth): compare in integers past 2^53.
    let bound = (share.clamp(0.0, 1.0) * (u64::MAX as f64)) as u128;
    u128::from(h) < bound || share >= 1.0
}

/// A hash of the conversation's opening: its history's elements before the model's first
/// turn (all of them while the model has not answered yet), each element's bytes as sent.
pub fn opening_hash(wire: Wire, body: &[u8]) -> Option<u64> {
    let key = wire.history_member().as_bytes();
    let open = skim::member_value_start(body, key)?;
    if body.get(open) != Some(&b'[') {
        return None;
    }
    let mut element = skim::first_element(body, open)?;
    let mut hasher = XxHash3_128::new();
    loop {
        if is_model(wire, &body[element.clone()]) {
            break;
        }
        hasher.write(&body[element.clone()]);
        hasher.write(b"\x1e");
        match skim::next_element(body, element.end) {
            Some(next) => element = next,
            None => break,
        }
    }
    // The hash's low half: the same on every instance (no seed, no process state).
    Some(hasher.finish_128() as u64)
}

/// Whether a history element is the model's: an assistant message, or (Responses) an item
/// the model produced (a call, its reasoning), not an output or a person's message.
fn is_model(wire: Wire, element: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Head<'a> {
        #[serde(borrow, default)]
        role: Option<std::borrow::Cow<'a, str>>,
        #[serde(rename = "type", borrow, default)]
        kind: Option<std::borrow::Cow<'a, str>>,
    }
    let Ok(head) = serde_json::from_slice::<Head<'_>>(element) else {
        return false;
    };
    let role = head.role.as_deref();
    match wire {
        Wire::Responses => crate::outputs::transcript::is_model_item(
            head.kind.as_deref().unwrap_or("message"),
            role,
        ),
        _ => role == Some("assistant"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn anthropic(messages: serde_json::Value) -> Vec<u8> {
        json!({"model": "m", "max_tokens": 8, "system": "s", "messages": messages})
            .to_string()
            .into_bytes()
    }

    /// Every turn of a conversation is in the arm of its opening; conversations that open
    /// differently are spread over both; a Codex-like history whose first item is the same
    /// environment for every task is told apart by the task after it.
    #[test]
    fn a_conversations_turns_share_its_arm_and_openings_spread() {
        let first = anthropic(json!([{"role": "user", "content": "fix calc.py"}]));
        let later = anthropic(json!([
            {"role": "user", "content": "fix calc.py"},
            {"role": "assistant", "content": [{"type": "text", "text": "reading"}]},
            {"role": "user", "content": "and the tests"},
        ]));
        assert_eq!(
            opening_hash(Wire::AnthropicMessages, &first),
            opening_hash(Wire::AnthropicMessages, &later)
        );
        let held = (0..1000)
            .filter(|i| {
                let body = anthropic(json!([{"role": "user", "content": format!("task {i}")}]));
                held_out(Wire::AnthropicMessages, &body, 0.1)
            })
            .count();
        assert!((60..140).contains(&held), "{held} of 1000 held out at 0.1");

        let codex = |task: &str, more: bool| {
            let mut input = vec![
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<environment_context>/work</environment_context>"}]}),
                json!({"type": "message", "role": "user", "content": [{"type": "input_text", "text": task}]}),
            ];
            if more {
                input.push(json!({"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"}));
                input
                    .push(json!({"type": "function_call_output", "call_id": "c1", "output": "ok"}));
            }
            json!({"model": "m", "input": input})
                .to_string()
                .into_bytes()
        };
        let (a, a_later, b) = (
            codex("fix a", false),
            codex("fix a", true),
            codex("fix b", false),
        );
        let h = |body: &[u8]| opening_hash(Wire::Responses, body);
        assert_eq!(h(&a), h(&a_later));
        assert_ne!(h(&a), h(&b));
        assert!(held_out(Wire::Responses, &a, 1.0));
        assert!(!held_out(Wire::Responses, &a, 0.0));
        assert!(!held_out(Wire::AnthropicMessages, b"not json", 1.0));
    }
}
