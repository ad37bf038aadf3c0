//! The requests of one relayed socket, each a ledger row: a `response.create` frame and the
//! events answering it, recorded as the stream of a `POST /v1/responses` would be (so its
//! usage, model and errors are read the same way), within the HTTP path's bounds.
//!
//! A create that chains to an earlier answer (`previous_response_id`, with `store: false` the
//! provider holds the earlier turns on this connection) carries only the new input, so a
//! frame alone is not the conversation. The socket's transcript ([`Held`]) keeps what the
//! provider holds: every input item sent and every output item of each `response.completed`.
//! Each row's conversation (for history and the prompt fingerprint) is that plus the frame's
//! input: the body an HTTP client would have sent.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::HeaderMap;
use pith_outcome::RequestOutcome;
use pith_store::clock::now_ms;
use pith_wire::{Provider, Wire, session};
use serde_json::value::RawValue;

use crate::ledger::{LedgerSink, Record};
use crate::tee::MAX_KEPT;

/// The event types that end a response.
const LAST_EVENTS: &[&str] = &[
    "response.completed",
    "response.failed",
    "response.incomplete",
    "error",
];

/// The requests of one socket, each recorded when its last event arrives (or the socket ends).
pub(super) struct Turns {
    sink: Option<LedgerSink>,
    /// The client and session the upgrade's headers name, the same for every request on it.
    client: String,
    session: Option<String>,
    /// The account the socket's requests belong to.
    account: String,
    open: Option<Turn>,
    held: Held,
}

/// What the provider holds of this socket's conversation after its last completed answer.
#[derive(Default)]
struct Held {
    /// That answer's id, which a chained create names.
    response_id: Option<String>,
    /// The input and output items so far, raw; shared with the creates that continue them
    /// (not copied on the relay's path).
    items: Arc<Vec<String>>,
}

/// The most transcript one socket keeps (past it, rows of chained creates hold only their
/// frame, and history waits for a create that sends its whole input again).
const MAX_HELD: usize = 16 << 20;

/// The members of a `response.create` the conversation is built from.
#[derive(serde::Deserialize)]
struct Create<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    instructions: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
    #[serde(default)]
    previous_response_id: Option<String>,
    /// `false` on Codex's warm-up: nothing is generated, the provider only takes the input.
    #[serde(default)]
    generate: Option<bool>,
}

/// The parts of a `response.completed` the transcript keeps.
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

/// A frame's input as items: an array's elements, or a string as one user message.
fn input_items(input: Option<&RawValue>) -> Option<Vec<String>> {
    let Some(input) = input else {
        return Some(Vec::new());
    };
    let text = input.get();
    if text.starts_with('"') {
        return Some(vec![format!(
            r#"{{"type":"message","role":"user","content":{text}}}"#
        )]);
    }
    let items: Vec<&RawValue> = serde_json::from_str(text).ok()?;
    Some(items.into_iter().map(|i| i.get().to_owned()).collect())
}

/// The conversation of one create: what the provider holds plus what it sends, or `None`
/// when the frame chains to an answer the transcript does not hold.
struct Conversation {
    /// The create's own members, raw: `"model":...,"instructions":...,"tools":...`.
    head: String,
    /// What the provider held when the create came.
    held: Arc<Vec<String>>,
    /// The create's own input items.
    items: Vec<String>,
    /// A warm-up (`generate: false`): a ledger row (the provider answered it), but no turn of
    /// the conversation, which the next create carries on.
    warm_up: bool,
}

impl Conversation {
    /// The body a `POST /v1/responses` would have carried.
    fn body(&self) -> Bytes {
        let all = || self.held.iter().chain(&self.items);
        let mut body =
            String::with_capacity(self.head.len() + all().map(|i| i.len() + 1).sum::<usize>() + 16);
        body.push('{');
        body.push_str(&self.head);
        body.push_str(r#""input":["#);
        for (k, item) in all().enumerate() {
            if k > 0 {
                body.push(',');
            }
            body.push_str(item);
        }
        body.push_str("]}");
        Bytes::from(body)
    }
}

struct Turn {
    /// The conversation up to this create, when the transcript knows it.
    conversation: Option<Conversation>,
    started: Instant,
    ts_ms: i64,
    arrival_us: i64,
    request: Bytes,
    chunks: Vec<Bytes>,
    bytes: u64,
    truncated: bool,
    ttfb_ms: Option<f64>,
    status: u16,
}

/// A frame's `type`, with an error event's `status` as `error:<status>`.
fn event_type(text: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: Option<String>,
        status: Option<u16>,
    }
    serde_json::from_str::<Typed>(text).ok().and_then(|t| {
        t.kind.map(|k| match (k.as_str(), t.status) {
            ("error", Some(s)) => format!("error:{s}"),
            _ => k,
        })
    })
}

impl Turns {
    pub(super) fn new(sink: Option<LedgerSink>, headers: &HeaderMap, account: String) -> Turns {
        Turns {
            sink,
            client: session::client_from_user_agent(headers),
            session: session::session_from_headers(headers),
            account,
            open: None,
            held: Held::default(),
        }
    }

    /// The conversation a create frame continues, from the transcript.
    fn conversation_of(&self, text: &str) -> Option<Conversation> {
        let create: Create<'_> = serde_json::from_str(text).ok()?;
        let held = match create.previous_response_id.as_deref() {
            None => Arc::default(),
            Some(id) if self.held.response_id.as_deref() == Some(id) => {
                Arc::clone(&self.held.items)
            }
            Some(_) => return None,
        };
        let items = input_items(create.input)?;
        let mut head = String::new();
        for (name, value) in [
            ("model", create.model),
            ("instructions", create.instructions),
            ("tools", create.tools),
        ] {
            if let Some(value) = value {
                head.push_str(&format!("\"{name}\":{},", value.get()));
            }
        }
        Some(Conversation {
            head,
            held,
            items,
            warm_up: create.generate == Some(false),
        })
    }

    /// A completed answer: the provider now holds the create's conversation and this output.
    fn completed(&mut self, conversation: Option<&Conversation>, text: &str) {
        self.held = Held::default();
        let (Some(conversation), Ok(completed)) =
            (conversation, serde_json::from_str::<Completed<'_>>(text))
        else {
            return;
        };
        let mut items: Vec<String> = conversation
            .held
            .iter()
            .chain(&conversation.items)
            .cloned()
            .collect();
        items.extend(
            completed
                .response
                .output
                .unwrap_or_default()
                .into_iter()
                .map(|i| i.get().to_owned()),
        );
        if items.iter().map(String::len).sum::<usize>() <= MAX_HELD {
            self.held = Held {
                response_id: completed.response.id,
                items: Arc::new(items),
            };
        }
    }

    /// Whether a request is waiting for its answer.
    pub(super) fn is_open(&self) -> bool {
        self.open.is_some()
    }

    pub(super) fn client_sent(&mut self, text: &str) {
        if event_type(text).as_deref() != Some("response.create") {
            return;
        }
        // A new request before the last one ended: the last one is cut.
        self.close(RequestOutcome::ClientClosed, None);
        let conversation = self.conversation_of(text);
        self.open = Some(Turn {
            conversation,
            started: Instant::now(),
            ts_ms: now_ms(),
            arrival_us: crate::ledger::arrival_now(),
            request: Bytes::copy_from_slice(text.as_bytes()),
            chunks: Vec::new(),
            bytes: 0,
            truncated: false,
            ttfb_ms: None,
            status: 200,
        });
    }

    pub(super) fn upstream_sent(&mut self, text: &str) {
        let Some(turn) = self.open.as_mut() else {
            return;
        };
        let kind = event_type(text).unwrap_or_default();
        turn.ttfb_ms
            .get_or_insert_with(|| turn.started.elapsed().as_secs_f64() * 1000.0);
        let (kind, status) = match kind.split_once(':') {
            Some((k, s)) => (k.to_owned(), s.parse().ok()),
            None => (kind, None),
        };
        // As the same answer over HTTP would have streamed it, kept up to the HTTP path's
        // bound: past it the answer still passes, and the row says it was too large to keep.
        let chunk = format!("event: {kind}\ndata: {text}\n\n");
        turn.bytes += chunk.len() as u64;
        if turn.bytes <= MAX_KEPT {
            turn.chunks.push(Bytes::from(chunk));
        } else if !turn.truncated {
            turn.truncated = true;
            turn.chunks = Vec::new();
        }
        if let Some(status) = status {
            turn.status = status;
        }
        if kind == "response.completed" {
            let conversation = turn.conversation.take();
            self.completed(conversation.as_ref(), text);
            if let Some(turn) = self.open.as_mut() {
                turn.conversation = conversation;
            }
        }
        if LAST_EVENTS.contains(&kind.as_str()) {
            self.close(RequestOutcome::Ok, None);
        }
    }

    /// Record the open request, if any, as ended with `outcome` (and pith's `error`).
    pub(super) fn close(&mut self, outcome: RequestOutcome, error: Option<String>) {
        let Some(turn) = self.open.take() else { return };
        let Some(sink) = &self.sink else { return };
        sink.submit(Record {
            ts_ms: turn.ts_ms,
            arrival_us: turn.arrival_us,
            status: Some(turn.status),
            outcome: if outcome == RequestOutcome::Ok && turn.status >= 400 {
                RequestOutcome::UpstreamError
            } else {
                outcome
            },
            error,
            bytes_upstream: turn.request.len() as u64,
            request_body: turn.request,
            response_chunks: turn.chunks,
            response_bytes: turn.bytes,
            response_truncated: turn.truncated,
            response_is_sse: true,
            ttfb_ms: turn.ttfb_ms,
            total_ms: turn.started.elapsed().as_secs_f64() * 1000.0,
            conversation_body: turn
                .conversation
                .as_ref()
                .filter(|c| !c.warm_up)
                .map(Conversation::body),
            ..self.row("WEBSOCKET")
        });
    }

    /// Record a frame the client sent that pith could not take (too large), as one request
    /// pith answered itself.
    pub(super) fn refused_frame(&mut self, status: u16, error: String) {
        self.close(RequestOutcome::ClientClosed, None);
        let Some(sink) = &self.sink else { return };
        sink.submit(Record {
            status: Some(status),
            outcome: RequestOutcome::ClientError,
            error: Some(error),
            ..self.row("WEBSOCKET")
        });
    }

    /// What every row of this socket says, arriving now.
    fn row(&self, method: &str) -> Record {
        socket_row(method, &self.client, &self.session, &self.account)
    }
}

/// A row of the socket's client, session and account, arriving now.
fn socket_row(method: &str, client: &str, session: &Option<String>, account: &str) -> Record {
    Record {
        ts_ms: now_ms(),
        arrival_us: crate::ledger::arrival_now(),
        client: client.to_owned(),
        header_session: session.clone(),
        wire: Some(Wire::Responses),
        provider: Some(Provider::OpenAi),
        method: method.to_owned(),
        path: "/v1/responses".to_owned(),
        account: account.to_owned(),
        ..Record::default()
    }
}

/// The row of an upgrade that opened no socket: the upstream's refusal (its status), or pith's
/// own answer when the upstream could not be reached or asked.
pub(super) fn refused_upgrade(
    sink: Option<&LedgerSink>,
    headers: &HeaderMap,
    account: &str,
    status: u16,
    outcome: RequestOutcome,
    error: Option<String>,
) {
    let Some(sink) = sink else { return };
    let client = session::client_from_user_agent(headers);
    let session = session::session_from_headers(headers);
    sink.submit(Record {
        status: Some(status),
        outcome,
        error,
        ..socket_row("GET", &client, &session, account)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(turns: &Turns, frame: &str) -> Option<String> {
        turns
            .conversation_of(frame)
            .map(|c| String::from_utf8(c.body().to_vec()).unwrap_or_default())
    }

    #[test]
    fn a_chained_create_continues_what_the_provider_holds_and_nothing_else() {
        let mut turns = Turns::new(None, &HeaderMap::new(), "local".to_owned());
        let first = r#"{"type":"response.create","model":"m","input":"first"}"#;
        assert_eq!(
            body(&turns, first).as_deref(),
            Some(r#"{"model":"m","input":[{"type":"message","role":"user","content":"first"}]}"#)
        );
        turns.client_sent(first);
        turns.upstream_sent(
            r#"{"type":"response.completed","response":{"id":"r1","output":[{"type":"message","role":"assistant","content":[]}]}}"#,
        );
        let second = r#"{"type":"response.create","model":"m","previous_response_id":"r1","input":[{"type":"function_call_output","call_id":"c","output":"ok"}]}"#;
        assert_eq!(
            body(&turns, second).as_deref(),
            Some(
                r#"{"model":"m","input":[{"type":"message","role":"user","content":"first"},{"type":"message","role":"assistant","content":[]},{"type":"function_call_output","call_id":"c","output":"ok"}]}"#
            )
        );
        // A chain to an answer this socket did not see (a reconnect resends the whole input).
        let elsewhere = r#"{"type":"response.create","previous_response_id":"r0","input":[]}"#;
        assert_eq!(body(&turns, elsewhere), None);
        // A failed answer changes nothing held (the provider keeps no failed response); a
        // completed one replaces it, and a chain to the older answer is not guessed at.
        turns.client_sent(second);
        turns.upstream_sent(r#"{"type":"response.failed","response":{"id":"r2"}}"#);
        let third = r#"{"type":"response.create","previous_response_id":"r1","input":[]}"#;
        assert!(body(&turns, third).is_some(), "r1 is still what is held");
        turns.client_sent(third);
        turns.upstream_sent(r#"{"type":"response.completed","response":{"id":"r3"}}"#);
        assert!(body(&turns, r#"{"previous_response_id":"r1","input":[]}"#).is_none());
    }

    #[test]
    fn a_warm_up_is_no_turn_of_the_conversation() {
        let turns = Turns::new(None, &HeaderMap::new(), "local".to_owned());
        let warm_up = turns
            .conversation_of(r#"{"type":"response.create","generate":false,"input":[]}"#)
            .unwrap();
        assert!(warm_up.warm_up);
    }
}
