//! Facts about a client request body, for the ledger: model, anatomy, session fallback.
//! Computed off the request path (the proxy hands the body to the ledger writer).

use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use crate::{Wire, skim};

/// Bytes of a request body by role. `system` is Anthropic `system` or Responses
/// `instructions`; Chat Completions and Codex carry their system prompt as a message, counted in
/// `messages` (which is `messages` or Responses `input`). Everything else is `other`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Anatomy {
    /// Bytes of the `tools` value.
    pub tools: u64,
    /// Bytes of the system prompt (`system` or `instructions`).
    pub system: u64,
    /// Bytes of the history (`messages` or `input`).
    pub messages: u64,
    /// Every other byte: other members, keys, punctuation and whitespace.
    pub other: u64,
}

/// What the ledger learns from a request body (see [`request_facts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestFacts {
    /// The top-level `model`, when it is a string.
    pub model: Option<String>,
    /// Bytes of the body by role.
    pub anatomy: Anatomy,
    /// `metadata.user_id`'s `session_id` (Claude Code), when present.
    pub metadata_session: Option<String>,
    /// Stable hash of the first user message: the session id of last resort.
    pub first_user_hash: Option<String>,
}

#[derive(Deserialize)]
struct Metadata<'a> {
    #[serde(borrow)]
    user_id: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct UserIdJson {
    session_id: Option<String>,
}

#[derive(Deserialize)]
struct Message<'a> {
    #[serde(borrow)]
    role: Option<&'a RawValue>,
    #[serde(borrow)]
    content: Option<&'a RawValue>,
}

/// Whether the caller still needs a session id from the body. Finding the first user message
/// is a second pass over the history (most of the body), so a caller that already has a session
/// id from a header says [`SessionNeed::Known`] and skips the body's fallbacks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionNeed {
    /// A header named the session: `metadata_session` and `first_user_hash` stay `None`.
    Known,
    /// Look in `metadata.user_id`, then fall back to the first user message's hash.
    FromBody,
}

/// The facts in the top level of `body`, read with a skim (see `crate::skim`). Returns defaults
/// (all `other`) when it does not have an object's structure.
pub fn request_facts(wire: Wire, body: &[u8], session: SessionNeed) -> RequestFacts {
    let mut facts = RequestFacts::default();
    // A skim, not a parse: these facts describe the request, they never change it, and the
    // ledger writer should not spend a full validation of a megabyte history on them.
    let Some(members) = skim::object_members(body) else {
        facts.anatomy.other = body.len() as u64;
        return facts;
    };
    let value = |key: &[u8]| {
        members
            .iter()
            .find(|m| &body[m.key.clone()] == key)
            .map(|m| &body[m.value.clone()])
    };
    for m in &members {
        let len = m.value.len() as u64;
        match &body[m.key.clone()] {
            b"tools" => facts.anatomy.tools += len,
            b"system" | b"instructions" => facts.anatomy.system += len,
            b"messages" | b"input" => facts.anatomy.messages += len,
            _ => {}
        }
    }
    facts.anatomy.other = (body.len() as u64)
        .saturating_sub(facts.anatomy.tools + facts.anatomy.system + facts.anatomy.messages);
    facts.model = value(b"model").and_then(|v| serde_json::from_slice::<String>(v).ok());
    if session == SessionNeed::Known {
        return facts;
    }
    facts.metadata_session = value(b"metadata")
        .and_then(|m| serde_json::from_slice::<Metadata<'_>>(m).ok())
        .and_then(|m| m.user_id)
        .and_then(|raw| serde_json::from_str::<String>(raw.get()).ok())
        .and_then(|s| serde_json::from_str::<UserIdJson>(&s).ok())
        .and_then(|u| u.session_id);
    if facts.metadata_session.is_some() {
        return facts;
    }
    let messages_key = wire.history_member().as_bytes();
    facts.first_user_hash = value(messages_key)
        .and_then(|m| std::str::from_utf8(m).ok())
        .and_then(|m| serde_json::from_str::<Vec<Message<'_>>>(m).ok())
        .and_then(|msgs| {
            msgs.into_iter()
                .find(|m| m.role.is_some_and(|r| r.get() == "\"user\""))
                .and_then(|m| m.content)
        })
        .map(|content| {
            let digest = Sha256::digest(content.get().as_bytes());
            let hex: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
            format!("h-{hex}")
        });
    facts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn anatomy_adds_up_and_session_fallbacks() {
        let body = br#"{"model":"claude-x","system":[{"type":"text","text":"s"}],"tools":[{"name":"a"}],"metadata":{"user_id":"{\"device_id\":\"d\",\"session_id\":\"abc\"}"},"messages":[{"role":"user","content":"hi"}],"max_tokens":5}"#;
        let f = request_facts(Wire::AnthropicMessages, body, SessionNeed::FromBody);
        assert_eq!(f.model.as_deref(), Some("claude-x"));
        assert_eq!(f.metadata_session.as_deref(), Some("abc"));
        assert_eq!(f.first_user_hash, None, "metadata named the session");
        let a = f.anatomy;
        assert_eq!(a.tools, r#"[{"name":"a"}]"#.len() as u64);
        assert_eq!(a.tools + a.system + a.messages + a.other, body.len() as u64);

        let known = request_facts(Wire::AnthropicMessages, body, SessionNeed::Known);
        assert_eq!((known.model, known.anatomy), (f.model, f.anatomy));
        assert_eq!(
            (known.metadata_session, known.first_user_hash),
            (None, None)
        );

        let anonymous = br#"{"model":"m","messages":[{"role":"user","content":"hi"}]}"#;
        let f = request_facts(Wire::AnthropicMessages, anonymous, SessionNeed::FromBody);
        let again = request_facts(Wire::AnthropicMessages, anonymous, SessionNeed::FromBody);
        assert!(f.first_user_hash.is_some());
        assert_eq!(again.first_user_hash, f.first_user_hash);
    }

    #[test]
    fn non_json_is_all_other() {
        let f = request_facts(Wire::ChatCompletions, b"{not json", SessionNeed::FromBody);
        assert_eq!(f.anatomy.other, 9);
        assert_eq!(f.model, None);
    }
}
