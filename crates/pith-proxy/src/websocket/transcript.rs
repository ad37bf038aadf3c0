//! The socket's transcript: what each side holds of the conversation.
//!
//! A `response.create` chained to an earlier answer (`previous_response_id`; with `store:
//! false` the provider holds the earlier turns on this connection) carries only its new input,
//! so a frame alone is not the conversation. Two chains are kept, each the input items sent
//! and the output items of the last completed answer:
//!
//! - the **client's**: what the client sent and was answered (pith's own answers included),
//!   the conversation the person had: pins are folded, the pipeline runs and history records
//!   on it, as an HTTP client's whole body;
//! - the **provider's**: what pith sent upstream and the provider answered.
//!
//! While pith changed nothing they are one (shared, not copied), and the client's frame goes up
//! byte for byte. Once they differ, each frame goes up as the pipeline's body relative to the
//! provider's chain: chained to the provider's last answer when what it holds is a prefix of
//! that body (only the rest is sent), else whole, without `previous_response_id`, as Codex
//! itself sends after a reconnect. So the provider sees exactly the prompt an HTTP request
//! would have shown it, and pith's own response ids never reach it. With a pin, the block moves
//! to each request's tail, so the provider's chain (holding it at the old tail) is no prefix
//! and each later create goes up whole: the prompt HTTP would show, at the cost of the
//! incremental upload (the prompt cache still matches the unchanged prefix).
//!
//! Each chain keeps up to [`MAX_HELD`]. A create chained to an answer the transcript does not
//! hold (past the bound, or begun on another socket) goes up as it came, its row saying
//! `transcript_not_held`, never a guessed pin; one chained to pith's own id, which no provider
//! holds, is answered with the service's `previous_response_not_found`, on which Codex
//! reconnects and sends its whole input. A create sent while another is answered cuts that one
//! and forgets both chains: the provider's later events for it could not be told apart.
//!
//! Evidence (Codex's `codex-rs/core/src/client.rs` at upstream `main` bd1945935, its strings
//! checked in the 0.169.0 binary; OpenAI's guide to the WebSocket mode): Codex chains a create
//! when the request's other members are unchanged and the new input extends the last input
//! plus the items of the last answer's `response.output_item.done` events, naming
//! `response.completed`'s id unchecked (so after pith's answer, `resp_pith_...`); on
//! `previous_response_not_found` it reconnects and sends the whole input. The service keeps
//! one previous response per connection, in memory; with `store: false` any other id is
//! `previous_response_not_found`, and a failed turn evicts the id it named.

use std::sync::Arc;

use serde::de::{Deserializer as _, MapAccess, Visitor};
use serde_json::value::RawValue;

/// The most one chain keeps, in bytes of items (past it, the chain is forgotten: a create
/// chained to it is forwarded as it came, said so in its row, until the client sends its
/// whole input again).
pub(super) const MAX_HELD: usize = 16 << 20;

/// What one side holds after its last completed answer.
#[derive(Default, Clone)]
pub(super) struct Chain {
    /// That answer's id, which a chained create names.
    id: Option<String>,
    /// The input and output items so far, raw.
    items: Arc<Vec<String>>,
}

impl Chain {
    /// A chain after an answer: `items` then the answer's output items; `None` past the bound.
    /// The output is `response.completed`'s `output`, or, when that is empty, the items of the
    /// answer's `response.output_item.done` events (`done`, by output index): the ChatGPT
    /// backend completes with `output: []`, and Codex builds its own history from those events.
    /// Each output item is kept without its `id`, as Codex sends them back: with `store: false`
    /// the service keeps no items, and refuses an input naming an item id it does not hold.
    fn after(items: &Arc<Vec<String>>, completed: &str, done: &[(u64, String)]) -> Option<Chain> {
        let completed: Completed = serde_json::from_str(completed).ok()?;
        let listed = completed.response.output.unwrap_or_default();
        let mut output: Vec<String> = listed.iter().map(|i| without_id(i.get())).collect();
        if output.is_empty() {
            let mut done: Vec<&(u64, String)> = done.iter().collect();
            done.sort_by_key(|(index, _)| *index);
            output = done.into_iter().map(|(_, item)| without_id(item)).collect();
        }
        let mut all = Vec::with_capacity(items.len() + output.len());
        all.extend(items.iter().cloned());
        all.extend(output);
        (all.iter().map(String::len).sum::<usize>() <= MAX_HELD).then(|| Chain {
            id: completed.response.id,
            items: Arc::new(all),
        })
    }
}

/// An item without its top-level `id` member (as it came when it has none, or is no object).
fn without_id(item: &str) -> String {
    let Some(members) = object_members(item) else {
        return item.to_owned();
    };
    if !members.iter().any(|(name, _)| name == "id") {
        return item.to_owned();
    }
    let mut out = String::with_capacity(item.len());
    out.push('{');
    for (name, value) in members.iter().filter(|(name, _)| name != "id") {
        push_member(&mut out, name, value.get());
    }
    if out.ends_with(',') {
        out.pop();
    }
    out.push('}');
    out
}

/// Both sides' chains.
pub(super) struct Transcript {
    client: Chain,
    provider: Chain,
}

impl Default for Transcript {
    /// Both sides hold nothing, the same nothing (they are in step).
    fn default() -> Transcript {
        let nothing = Chain::default();
        Transcript {
            client: nothing.clone(),
            provider: nothing,
        }
    }
}

/// A `response.create` frame, read: its members in order, less `type`,
/// `previous_response_id` and `input`.
pub(super) struct Create {
    members: Vec<(String, Box<RawValue>)>,
    previous: Option<String>,
    items: Vec<String>,
    /// `generate: false` (Codex's warm-up): the provider only takes the input.
    pub warm_up: bool,
}

/// The conversation one create continues, as the client means it.
pub(super) struct Conversation {
    /// The create's members, then the whole input.
    members: Vec<(String, Box<RawValue>)>,
    /// Every input item: what the client's chain held, then the create's own.
    pub items: Arc<Vec<String>>,
    /// Whether the client chained to an answer (else it sent its whole input).
    chained: bool,
    pub warm_up: bool,
}

impl Conversation {
    /// The body a `POST /v1/responses` would have carried.
    pub fn body(&self) -> String {
        body_of(&self.members, &self.items)
    }
}

/// `{members..., "input": [items...]}`.
fn body_of(members: &[(String, Box<RawValue>)], items: &[String]) -> String {
    let size = members
        .iter()
        .map(|(k, v)| k.len() + v.get().len() + 4)
        .chain(items.iter().map(|i| i.len() + 1))
        .sum::<usize>();
    let mut out = String::with_capacity(size + 16);
    out.push('{');
    for (name, value) in members {
        push_member(&mut out, name, value.get());
    }
    push_items(&mut out, items);
    out.push('}');
    out
}

/// A `response.create` frame of `members`, chained to `previous` when given, with `items` as
/// its input.
fn frame_of(
    members: &[(String, Box<RawValue>)],
    previous: Option<&str>,
    items: &[String],
) -> String {
    let mut frame = String::from(r#"{"type":"response.create","#);
    for (name, value) in members {
        push_member(&mut frame, name, value.get());
    }
    if let Some(id) = previous {
        let id = serde_json::Value::from(id).to_string();
        push_member(&mut frame, "previous_response_id", &id);
    }
    push_items(&mut frame, items);
    frame.push('}');
    frame
}

fn push_member(out: &mut String, name: &str, value: &str) {
    // `name` came out of a JSON string: written back as one.
    out.push_str(&serde_json::Value::from(name).to_string());
    out.push(':');
    out.push_str(value);
    out.push(',');
}

fn push_items(out: &mut String, items: &[String]) {
    out.push_str(r#""input":["#);
    for (k, item) in items.iter().enumerate() {
        if k > 0 {
            out.push(',');
        }
        out.push_str(item);
    }
    out.push(']');
}

/// What goes up for one create, and what the provider will then hold as its input.
pub(super) struct Upstream {
    /// The frame to send; `None`: the client's own, byte for byte.
    pub frame: Option<String>,
    /// The whole input the provider takes, when it is not the client's.
    pub items: Option<Arc<Vec<String>>>,
}

impl Create {
    /// The answer it chains to, when it does.
    pub fn previous(&self) -> Option<&str> {
        self.previous.as_deref()
    }

    /// Read a client frame; `None` for one that is not a JSON object, or whose `input` is
    /// neither an array nor a string (forwarded as it came). No `input` reads as none.
    pub fn read(frame: &str) -> Option<Create> {
        let mut members = Vec::new();
        let mut previous = None;
        let mut items = Vec::new();
        let mut warm_up = false;
        for (name, value) in object_members(frame)? {
            match name.as_str() {
                "type" => {}
                "previous_response_id" => previous = serde_json::from_str(value.get()).ok()?,
                "input" => items = input_items(&value)?,
                _ => {
                    if name == "generate" {
                        warm_up = value.get() == "false";
                    }
                    members.push((name, value));
                }
            }
        }
        Some(Create {
            members,
            previous,
            items,
            warm_up,
        })
    }
}

impl Transcript {
    /// The conversation `create` continues, from the client's chain; `None` when it chains to
    /// an answer the transcript does not hold.
    pub fn conversation(&self, create: Create) -> Option<Conversation> {
        let items = match &create.previous {
            None => create.items,
            Some(id) if self.client.id.as_deref() == Some(id) => {
                let held = &self.client.items;
                let mut all = Vec::with_capacity(held.len() + create.items.len());
                all.extend(held.iter().cloned());
                all.extend(create.items);
                all
            }
            Some(_) => return None,
        };
        Some(Conversation {
            members: create.members,
            items: Arc::new(items),
            chained: create.previous.is_some(),
            warm_up: create.warm_up,
        })
    }

    /// Whether both sides hold the same: the client's frame may go up as it came.
    fn in_step(&self) -> bool {
        self.client.id == self.provider.id && Arc::ptr_eq(&self.client.items, &self.provider.items)
    }

    /// What goes up for `conversation`: `sent`, the pipeline's body when it changed the
    /// request, else the client's. `None` when `sent` cannot be read (the caller forwards the
    /// client's frame).
    pub fn upstream(&self, conversation: &Conversation, sent: Option<&str>) -> Option<Upstream> {
        if sent.is_none() && self.in_step() {
            return Some(Upstream {
                frame: None,
                items: None,
            });
        }
        let (members, items) = match sent {
            Some(body) => {
                let mut members = object_members(body)?;
                let at = members.iter().position(|(name, _)| name == "input")?;
                let (_, input) = members.remove(at);
                (members, Arc::new(input_items(&input)?))
            }
            None => (
                conversation
                    .members
                    .iter()
                    .map(|(n, v)| (n.clone(), v.clone()))
                    .collect(),
                Arc::clone(&conversation.items),
            ),
        };
        // Chained where the client chained, to the provider's own last answer, when it holds a
        // prefix of what is to be sent.
        let held = &self.provider.items;
        let chain = self.provider.id.as_deref().filter(|_| {
            conversation.chained
                && held.len() <= items.len()
                && held.iter().zip(items.iter()).all(|(a, b)| a == b)
        });
        let rest = match chain {
            Some(_) => &items[held.len()..],
            None => &items[..],
        };
        let frame = frame_of(&members, chain, rest);
        let same_items = Arc::ptr_eq(&items, &conversation.items);
        Some(Upstream {
            frame: Some(frame),
            items: (!same_items).then_some(items),
        })
    }

    /// `conversation` as the client means it, whole, chained to nothing: what goes up in place
    /// of a change the provider refused (a refused turn evicts the answer it chained to).
    pub fn whole(conversation: &Conversation) -> String {
        frame_of(&conversation.members, None, &conversation.items)
    }

    /// The provider completed the answer to `conversation`, sent as `upstream_items` (when not
    /// the client's), with the event `completed`: both chains move on.
    pub fn provider_completed(
        &mut self,
        conversation: &Conversation,
        upstream_items: Option<&Arc<Vec<String>>>,
        completed: &str,
        done: &[(u64, String)],
    ) {
        let client = Chain::after(&conversation.items, completed, done);
        let provider = match upstream_items {
            None => client.clone(),
            Some(items) => Chain::after(items, completed, done),
        };
        self.client = client.unwrap_or_default();
        self.provider = provider.unwrap_or_default();
    }

    /// pith answered `conversation` itself with `completed`: the client's chain moves on, the
    /// provider's stays where it was.
    pub fn pith_completed(&mut self, conversation: &Conversation, completed: &str) {
        self.client = Chain::after(&conversation.items, completed, &[]).unwrap_or_default();
    }

    /// A create chained to an answer the transcript does not hold went up as it came: neither
    /// chain is known any more.
    pub fn forget(&mut self) {
        *self = Transcript::default();
    }
}

/// The parts of a `response.completed` a chain keeps.
#[derive(serde::Deserialize)]
struct Completed<'a> {
    #[serde(borrow)]
    response: CompletedResponse<'a>,
}

#[derive(serde::Deserialize)]
struct CompletedResponse<'a> {
    #[serde(default)]
    id: Option<String>,
    #[serde(borrow, default)]
    output: Option<Vec<&'a RawValue>>,
}

/// An input as items: an array's elements, or a string as one user message.
fn input_items(input: &RawValue) -> Option<Vec<String>> {
    let text = input.get();
    if text.starts_with('"') {
        return Some(vec![format!(
            r#"{{"type":"message","role":"user","content":{text}}}"#
        )]);
    }
    let items: Vec<&RawValue> = serde_json::from_str(text).ok()?;
    Some(items.into_iter().map(|i| i.get().to_owned()).collect())
}

/// A JSON object's members in their order, values raw; `None` for anything else.
fn object_members(json: &str) -> Option<Vec<(String, Box<RawValue>)>> {
    struct Members;
    impl<'de> Visitor<'de> for Members {
        type Value = Vec<(String, Box<RawValue>)>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("a JSON object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let mut members = Vec::new();
            while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                members.push(member);
            }
            Ok(members)
        }
    }
    let mut de = serde_json::Deserializer::from_str(json);
    let members = (&mut de).deserialize_map(Members).ok()?;
    de.end().ok()?;
    Some(members)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn create(frame: &str) -> Create {
        Create::read(frame).unwrap()
    }

    const FIRST: &str = r#"{"type":"response.create","model":"m","input":"first"}"#;
    const R1: &str = r#"{"type":"response.completed","response":{"id":"r1","output":[{"type":"message","role":"assistant","content":[]}]}}"#;
    const SECOND: &str = r#"{"type":"response.create","model":"m","previous_response_id":"r1","input":[{"type":"function_call_output","call_id":"c","output":"ok"}]}"#;

    #[test]
    fn a_chained_create_continues_what_the_client_holds_and_nothing_else() {
        let mut t = Transcript::default();
        let first = t.conversation(create(FIRST)).unwrap();
        assert_eq!(
            first.body(),
            r#"{"model":"m","input":[{"type":"message","role":"user","content":"first"}]}"#
        );
        assert!(
            t.upstream(&first, None).unwrap().frame.is_none(),
            "as it came"
        );
        t.provider_completed(&first, None, R1, &[]);
        let second = t.conversation(create(SECOND)).unwrap();
        assert_eq!(
            second.body(),
            r#"{"model":"m","input":[{"type":"message","role":"user","content":"first"},{"type":"message","role":"assistant","content":[]},{"type":"function_call_output","call_id":"c","output":"ok"}]}"#
        );
        // Nothing changed: the client's frame goes up as it came.
        assert!(t.upstream(&second, None).unwrap().frame.is_none());
        // A chain to an answer this socket did not see (a reconnect resends the whole input).
        let elsewhere = r#"{"type":"response.create","previous_response_id":"r0","input":[]}"#;
        assert!(t.conversation(create(elsewhere)).is_none());
    }

    #[test]
    fn a_changed_body_goes_up_chained_to_the_providers_answer_when_it_holds_a_prefix() {
        let mut t = Transcript::default();
        let first = t.conversation(create(FIRST)).unwrap();
        t.provider_completed(&first, None, R1, &[]);
        let second = t.conversation(create(SECOND)).unwrap();
        // The pipeline appended an item: the provider holds a prefix, only the rest goes up.
        let mut sent_items = (*second.items).clone();
        sent_items.push(r#"{"type":"message","role":"user","content":"PIN"}"#.to_owned());
        let sent = body_of(&second.members, &sent_items);
        let up = t.upstream(&second, Some(&sent)).unwrap();
        assert_eq!(
            up.frame.as_deref(),
            Some(
                r#"{"type":"response.create","model":"m","previous_response_id":"r1","input":[{"type":"function_call_output","call_id":"c","output":"ok"},{"type":"message","role":"user","content":"PIN"}]}"#
            )
        );
        let r2 = r#"{"type":"response.completed","response":{"id":"r2","output":[]}}"#;
        t.provider_completed(&second, up.items.as_ref(), r2, &[]);
        // The provider holds the PIN item at its old tail; the client's next chained create,
        // with the block moved to the new tail, is not a continuation of it: sent whole.
        let third = r#"{"type":"response.create","model":"m","previous_response_id":"r2","input":[{"type":"message","role":"user","content":"next"}]}"#;
        let third = t.conversation(create(third)).unwrap();
        let mut moved = (*third.items).clone();
        moved.push(r#"{"type":"message","role":"user","content":"PIN"}"#.to_owned());
        let up = t
            .upstream(&third, Some(&body_of(&third.members, &moved)))
            .unwrap();
        let frame = up.frame.unwrap();
        assert!(!frame.contains("previous_response_id"), "{frame}");
        assert_eq!(frame.matches("PIN").count(), 1, "{frame}");
        assert!(frame.contains(r#""content":"first""#), "{frame}");
        // Unchanged by the pipeline, but the sides differ: the client's body, relative to the
        // provider's chain (which holds the PIN the client never sent): whole.
        let up = t.upstream(&third, None).unwrap();
        assert!(!up.frame.unwrap().contains("previous_response_id"));
        // What goes up when the provider refuses a change: the client's conversation, whole.
        let whole = Transcript::whole(&third);
        assert!(whole.starts_with(r#"{"type":"response.create","model":"m","input":["#));
        assert!(!whole.contains("PIN") && whole.contains(r#""content":"next""#));
    }

    #[test]
    fn pith_s_own_answer_moves_the_clients_chain_only() {
        let mut t = Transcript::default();
        let first = t.conversation(create(FIRST)).unwrap();
        t.provider_completed(&first, None, R1, &[]);
        let pin = r#"{"type":"response.create","model":"m","previous_response_id":"r1","input":"@pith pin x"}"#;
        let pin = t.conversation(create(pin)).unwrap();
        t.pith_completed(
            &pin,
            r#"{"type":"response.completed","response":{"id":"resp_pith_1","output":[{"type":"message","role":"assistant","content":"@pith pinned"}]}}"#,
        );
        let next = r#"{"type":"response.create","model":"m","previous_response_id":"resp_pith_1","input":"go"}"#;
        let next = t.conversation(create(next)).unwrap();
        assert_eq!(
            next.items.len(),
            5,
            "first, r1's item, the pin turn, pith's reply, go"
        );
        // The pipeline dropped the pin turn and pith's answer: the provider's chain (first and
        // r1's item) is a prefix, so it goes up chained to r1, never to pith's id.
        let sent_items = vec![
            next.items[0].clone(),
            next.items[1].clone(),
            next.items[4].clone(),
        ];
        let up = t
            .upstream(&next, Some(&body_of(&next.members, &sent_items)))
            .unwrap();
        let frame = up.frame.unwrap();
        assert!(frame.contains(r#""previous_response_id":"r1""#), "{frame}");
        assert!(!frame.contains("resp_pith"), "{frame}");
        assert!(frame.ends_with(r#""input":[{"type":"message","role":"user","content":"go"}]}"#));
    }

    #[test]
    fn an_answer_completed_with_no_output_is_read_from_its_done_items_without_their_ids() {
        let mut t = Transcript::default();
        let first = t.conversation(create(FIRST)).unwrap();
        let completed = r#"{"type":"response.completed","response":{"id":"r1","output":[]}}"#;
        let done = [
            (
                1,
                r#"{"id":"fc_1","type":"function_call","call_id":"c","name":"ls","arguments":"{}"}"#
                    .to_owned(),
            ),
            (0, r#"{"type":"reasoning","id":"rs_1","summary":[]}"#.to_owned()),
        ];
        t.provider_completed(&first, None, completed, &done);
        let next =
            r#"{"type":"response.create","model":"m","previous_response_id":"r1","input":[]}"#;
        let next = t.conversation(create(next)).unwrap();
        assert_eq!(
            next.items[1..],
            [
                r#"{"type":"reasoning","summary":[]}"#.to_owned(),
                r#"{"type":"function_call","call_id":"c","name":"ls","arguments":"{}"}"#.to_owned(),
            ]
        );
    }

    #[test]
    fn a_warm_up_is_read_as_one() {
        assert!(create(r#"{"type":"response.create","generate":false,"input":[]}"#).warm_up);
        assert!(!create(FIRST).warm_up);
        assert!(Create::read("[1]").is_none());
        assert!(Create::read(r#"{"input":{"not":"items"}}"#).is_none());
    }
}
