//! A request body read once for what the ledger's writers derive from it: the prompt's
//! fingerprint (busts) and the conversation's messages (history).
//!
//! Why: both read the conversation, which is most of a body past the first turns. Read apart,
//! the writers parsed it twice (a hashing parse for the fingerprint, a `Value` for the
//! history); here it is parsed once into a `Value`, the history reads its messages from it and
//! the fingerprint hashes it ([`Fingerprint::of_parsed`]). Without history the fingerprint's
//! own hashing parse is the cheaper one, and is what runs.

use serde_json::Value;

use crate::Wire;
use crate::conversation::{self, Message};
use crate::fingerprint::Fingerprint;

/// What one read of a request body gives the ledger.
#[derive(Debug, Default)]
pub struct Derived {
    /// The prompt's fingerprint; `None` when the body is not JSON of the wire's shape.
    pub fingerprint: Option<Fingerprint>,
    /// The conversation's messages, when asked for and the body has them.
    pub messages: Option<Vec<Message>>,
}

/// Read `body` on `wire` once: its fingerprint, and its messages when `messages` is set.
pub fn derive(wire: Wire, body: &[u8], messages: bool) -> Derived {
    if !messages {
        return Derived {
            fingerprint: Fingerprint::of(wire, body),
            messages: None,
        };
    }
    let Some(raw) = conversation::conversation_member(wire, body) else {
        // No conversation member (or not an object at all: then no fingerprint either).
        return Derived {
            fingerprint: Fingerprint::of_parsed(wire, body, None),
            messages: None,
        };
    };
    let Ok(value) = serde_json::from_slice::<Value>(raw) else {
        return Derived::default();
    };
    Derived {
        fingerprint: Fingerprint::of_parsed(wire, body, Some(&value)),
        messages: conversation::messages_of(wire, &value),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every capture, each wire: one read gives exactly what the two separate reads give.
    #[test]
    fn one_read_equals_the_fingerprint_and_the_messages_read_apart() {
        let captures = pith_testkit::fixtures::captures().unwrap();
        let mut compared = 0;
        for capture in &captures {
            let path = capture.path.split('?').next().unwrap_or_default();
            let Some(wire) = Wire::from_path(path) else {
                continue;
            };
            let body = &capture.body;
            let one = derive(wire, body, true);
            let apart = Fingerprint::of(wire, body);
            assert_eq!(one.fingerprint, apart, "{}", capture.id());
            assert_eq!(
                one.messages,
                conversation::request_messages(wire, body),
                "{}",
                capture.id()
            );
            assert_eq!(derive(wire, body, false).fingerprint, apart);
            compared += usize::from(apart.is_some());
        }
        assert!(compared > 20, "only {compared} captures had a fingerprint");
    }

    /// Members in any order and place, `null`s, markers, numbers of every kind, strings with
    /// escapes: the parsed hash equals the text's.
    #[test]
    fn the_parsed_hash_equals_the_text_hash_on_odd_bodies() {
        let bodies: [(Wire, &str); 8] = [
            (
                Wire::AnthropicMessages,
                r#"{"messages":[{"content":[{"cache_control":{"type":"ephemeral"},"text":"q\u00e9\n","type":"text"}],"role":"user"},{"role":"assistant","content":"a"},{"content":null}],"model":"m","tools":null,"system":"s"}"#,
            ),
            (
                Wire::AnthropicMessages,
                r#"{"model":null,"system":[{"type":"text","text":"s","cache_control":null}],"messages":[{"role":"user","content":[{"type":"tool_result","tool_use_id":"t","content":[{"type":"text","text":"1"}],"n":[1,-2,3.5,-0.0,1e300,18446744073709551615,true,false,null]}]}]}"#,
            ),
            (Wire::AnthropicMessages, r#"{"model":"m"}"#),
            (Wire::AnthropicMessages, r#"{"model":"m","messages":null}"#),
            (
                Wire::ChatCompletions,
                r#"{"model":"g","tools":[{"type":"function","function":{"name":"f"}}],"messages":[{"role":"user","content":"q","cache_control":{"type":"x"}},{"role":"assistant","tool_calls":[{"id":"c","function":{"name":"f","arguments":"{}"}}]}]}"#,
            ),
            (
                Wire::Responses,
                r#"{"model":"g","instructions":"be brief","input":[{"type":"message","role":"user","content":[{"type":"input_text","text":"q"}]},{"type":"function_call","name":"f","arguments":"{}","call_id":"c"}],"tools":[]}"#,
            ),
            (Wire::Responses, r#"{"input":"just text","model":"g"}"#),
            (Wire::Responses, r#"{"input":null,"instructions":null}"#),
        ];
        for (wire, body) in bodies {
            let one = derive(wire, body.as_bytes(), true);
            assert!(one.fingerprint.is_some(), "{body}");
            assert_eq!(
                one.fingerprint,
                Fingerprint::of(wire, body.as_bytes()),
                "{body}"
            );
        }
        // Not the wire's shape: neither read gives a fingerprint.
        for body in [
            r#"{"messages":{"role":"user"}}"#,
            r#"{"messages":[{"role":1,"content":"q"}]}"#,
            r#"{"messages":["q"]}"#,
            r#"{"messages":[{"role":"user","content":"q"}"#,
            r#"{"messages":[],"model":"m","messages":[{"role":"user","content":"q"}]}"#,
            "not json",
        ] {
            let one = derive(Wire::AnthropicMessages, body.as_bytes(), true);
            assert_eq!(one.fingerprint, None, "{body}");
            assert_eq!(
                Fingerprint::of(Wire::AnthropicMessages, body.as_bytes()),
                None
            );
        }
    }
}
