//! History recording on the ledger's writer threads: each finished record's request messages
//! and the reply its response carried (the stream's copies the tee kept, put back together
//! here, after the client has had every byte) become a [`Turn`] of the session's conversation.
//! Nothing of it runs on the request path; a store failure is logged and counted, never seen.

use std::collections::HashMap;

use pith_history::{AgentType, NewMessage};
use pith_store::history::{History, SentExcerpt, Turn};
use pith_transform::outputs;
use pith_wire::conversation;

use crate::record::{Record, ReportResult};

/// Where recorded conversations go, and how they are labelled.
pub struct HistorySink {
    store: History,
    labels: Labels,
}

/// How turns are labelled: the agent type of each client (the account is each record's).
pub struct Labels {
    /// Agent type per client name (config); unnamed clients are `public`.
    agent_types: HashMap<String, AgentType>,
    /// Tool outputs at least this long are kept whole (the outputs stage is on and may
    /// shorten them later); `None`: none are.
    keep_outputs_from: Option<usize>,
}

impl HistorySink {
    /// Record into `store`, each turn under its request's account, with the agent type of
    /// each client named in `agent_types` (others are `public`, unless a request names its
    /// own).
    pub fn new(store: History, agent_types: HashMap<String, AgentType>) -> HistorySink {
        HistorySink {
            store,
            labels: Labels {
                agent_types,
                keep_outputs_from: None,
            },
        }
    }

    /// Keeps each recorded tool output of at least `min_chars` characters whole, for `pith
    /// mcp` to return by its call id (the outputs stage is on and shortens such outputs).
    pub fn keeping_outputs_from(mut self, min_chars: usize) -> HistorySink {
        self.labels.keep_outputs_from = Some(min_chars);
        self
    }

    /// The store (for the writers' lock) and the labels (read by every writer as it parses).
    pub(crate) fn into_parts(self) -> (History, Labels) {
        (self.store, self.labels)
    }
}

impl Labels {
    /// The turn a finished record holds, if it is a conversation request on one of the wires
    /// with a session. `messages` are its prompt's (the ledger's writer read them with the
    /// fingerprint: the decoded body, or a socket's conversation); `response` is the decoded
    /// response body (when it was kept whole).
    pub(crate) fn turn(
        &self,
        record: &Record,
        session: Option<&str>,
        messages: Option<Vec<conversation::Message>>,
        response: Option<&[u8]>,
    ) -> Option<Turn> {
        let wire = record.wire?;
        let session = session?;
        // POST on HTTP; a socket's create (`WEBSOCKET`) with the conversation it continues (a
        // warm-up has none: it is no turn).
        match (record.method.as_str(), &record.conversation_body) {
            ("POST", _) | ("WEBSOCKET", Some(_)) => {}
            _ => return None,
        }
        if record.path.ends_with("/count_tokens") {
            return None;
        }
        let messages = messages?;
        // A side call of the client's (OpenCode's title call) is not a turn of the
        // conversation: recorded, it would take the conversation's place.
        if let Some(client) = pith_clients::Client::named(&record.client)
            && messages.iter().any(|m| {
                m.role == "user"
                    && m.parts
                        .iter()
                        .find(|p| p.kind == conversation::PartKind::Text)
                        .is_some_and(|p| client.opens_side_call(&p.text))
            })
        {
            return None;
        }
        let ok = record.status.is_some_and(|s| (200..300).contains(&s));
        let reply = response
            .filter(|_| ok)
            .and_then(|body| conversation::reply_message(wire, body, record.response_is_sse))
            .map(|m| {
                NewMessage::from_wire(&m, pith_history::reply_ms(record.ts_ms, record.total_ms))
            });
        let agent_type = record
            .agent_type
            .as_deref()
            .and_then(|t| t.trim().parse().ok())
            .or_else(|| self.agent_types.get(&record.client).copied())
            .unwrap_or_default();
        Some(Turn {
            account: record.account.clone(),
            client: record.client.clone(),
            session_id: session.to_owned(),
            agent_type,
            ts_ms: record.ts_ms,
            messages: messages
                .iter()
                .map(|m| {
                    let mut kept = NewMessage::from_wire(m, record.ts_ms);
                    if let Some(min_chars) = self.keep_outputs_from {
                        kept.keep_outputs(m, min_chars);
                    }
                    kept
                })
                .collect(),
            reply,
            excerpts: if self.keep_outputs_from.is_some() {
                excerpts_first_sent(record)
            } else {
                Vec::new()
            },
        })
    }
}

/// The excerpts the outputs stage sent in place of tool outputs, read from the body that went
/// up, when the stage says it shortened an output for the first time in this request (the
/// only time the body is parsed again for them; the store keeps each once).
fn excerpts_first_sent(record: &Record) -> Vec<SentExcerpt> {
    let shortened_first = record.transforms.iter().any(|r| {
        r.stage == outputs::NAME
            && matches!(&r.result, ReportResult::Applied(facts)
                if facts.iter().any(|f| f.name == "first" && f.value > 0))
    });
    let (Some(wire), Some(body), true) = (record.wire, &record.upstream_body, shortened_first)
    else {
        return Vec::new();
    };
    let Some(messages) = conversation::request_messages(wire, body) else {
        return Vec::new();
    };
    messages
        .iter()
        .flat_map(|m| &m.parts)
        .filter_map(|p| {
            let call_id = p.call_id.clone()?;
            outputs::is_excerpt(&p.text).then(|| SentExcerpt {
                call_id,
                text: p.text.clone(),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(client: &str, body: serde_json::Value) -> Record {
        Record {
            client: client.to_owned(),
            wire: Some(pith_wire::Wire::AnthropicMessages),
            method: "POST".to_owned(),
            path: "/v1/messages".to_owned(),
            status: Some(200),
            request_body: bytes::Bytes::from(body.to_string()),
            ..Record::default()
        }
    }

    #[test]
    fn a_fork_that_resends_the_conversation_for_a_summary_is_no_turn_of_it() {
        let labels = Labels {
            agent_types: HashMap::new(),
            keep_outputs_from: None,
        };
        let turn_of = |record: &Record| {
            let messages = conversation::request_messages(
                pith_wire::Wire::AnthropicMessages,
                &record.request_body,
            );
            labels.turn(record, Some("s"), messages, None)
        };
        let conversation = serde_json::json!([
            {"role": "user", "content": "fix calc.py"},
            {"role": "assistant", "content": "Done."},
        ]);
        let turn = record(
            "claude-code",
            serde_json::json!({"model": "m", "messages": conversation}),
        );
        assert!(turn_of(&turn).is_some());
        // Claude Code's compaction: the whole conversation, then its own instruction.
        let mut forked = conversation.as_array().cloned().unwrap_or_default();
        forked.push(
            serde_json::json!({"role": "user", "content": [{"type": "text",
            "text": "CRITICAL: Respond with TEXT ONLY. Do NOT call any tools.\n\nSummarize."}]}),
        );
        let fork = record(
            "claude-code",
            serde_json::json!({"model": "m", "messages": forked}),
        );
        assert!(turn_of(&fork).is_none());
        // Its title call: one fresh message.
        let title = record(
            "claude-code",
            serde_json::json!({"model": "m", "messages": [
                {"role": "user", "content": "<session>\nfix calc.py\n</session>"}]}),
        );
        assert!(turn_of(&title).is_none());
    }

    /// With the outputs stage on, a turn keeps each tool output of at least the stage's size
    /// whole, by its call id, on each wire; shorter ones, and any with the stage off, are not
    /// kept.
    #[test]
    fn long_outputs_are_kept_whole_by_call_id_when_the_stage_is_on() {
        let long = "line\n".repeat(1_000);
        let bodies = [
            (
                pith_wire::Wire::AnthropicMessages,
                serde_json::json!({"model": "m", "messages": [
                    {"role": "user", "content": "read it"},
                    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}, {"type": "tool_use", "id": "toolu_2", "name": "Read", "input": {}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "toolu_1", "content": long},
                        {"type": "tool_result", "tool_use_id": "toolu_2", "content": "short"}]},
                ]}),
                "toolu_1",
            ),
            (
                pith_wire::Wire::ChatCompletions,
                serde_json::json!({"model": "m", "messages": [
                    {"role": "user", "content": "read it"},
                    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "read", "arguments": "{}"}}]},
                    {"role": "tool", "tool_call_id": "call_1", "content": long},
                ]}),
                "call_1",
            ),
            (
                pith_wire::Wire::Responses,
                serde_json::json!({"model": "m", "input": [
                    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "read it"}]},
                    {"type": "function_call", "call_id": "call_1", "name": "shell", "arguments": "{}"},
                    {"type": "function_call_output", "call_id": "call_1", "output": long},
                ]}),
                "call_1",
            ),
        ];
        for (wire, body, id) in bodies {
            let mut r = record("claude-code", body);
            r.wire = Some(wire);
            let kept = |keep_outputs_from| {
                let labels = Labels {
                    agent_types: HashMap::new(),
                    keep_outputs_from,
                };
                let messages = conversation::request_messages(wire, &r.request_body);
                let turn = labels.turn(&r, Some("s"), messages, None).expect("a turn");
                turn.messages
                    .into_iter()
                    .flat_map(|m| m.outputs)
                    .map(|o| (o.call_id, o.text))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                kept(Some(4_000)),
                [(id.to_owned(), long.clone())],
                "{wire:?}"
            );
            assert!(kept(None).is_empty(), "{wire:?}");
        }
    }
}
