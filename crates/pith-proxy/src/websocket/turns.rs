//! The requests of one socket, each a request of the request path: a `response.create` frame
//! is its body, read against the socket's transcript (`transcript.rs`) into the conversation
//! an HTTP client would have sent; then the same phases as HTTP's, by the same functions:
//! **answer locally** (a turn of only pin commands: pith's events on the socket, nothing
//! upstream), **transform** (the pipeline over the conversation), **forward** (a frame on the
//! upstream socket: the client's own while pith changed nothing, else the pipeline's body
//! relative to what the provider holds), **respond** (the provider's events, one per frame; the
//! provider's refusal of a changed frame answered by sending the client's own: the last check),
//! **record** (the one record builder, `Context::take_pending`, shaped as the SSE stream of a
//! `POST /v1/responses` so usage and errors are read as for HTTP; a turn pith answered keeps
//! its frame and the facts of its conversation, not the conversation). Only framing and the
//! transcript are the socket's own.
//!
//! Why a turn pith answers spools only its frame and facts: the conversation a socket holds
//! can be megabytes, and 100 pin frames of about 150 bytes once wrote 1.58 GB to the spool. Its
//! row is priced as the request it saved, with no fingerprint (no provider's cache saw it), and
//! its exchange reaches history with the socket's next turn that goes up. Warm-ups
//! (`generate: false`) go up untransformed: rows (the provider answers them, with usage), not
//! history turns. The last check holds here too: a refusal (`error` with 400 or 422 before any
//! other event) of a frame pith changed never reaches the client; the client's own conversation
//! goes up whole, not chained, since the service evicts the response a failed turn chained to.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::{HeaderMap, Method, StatusCode};
use pith_outcome::RequestOutcome;
use pith_transform::{StageReport, StageResult};
use pith_wire::{Provider, Wire, reply};

use super::transcript::{Conversation, Create, Transcript, Upstream};
use crate::last_check;
use crate::request::{self, Context};
use crate::state::State;
use crate::tee::{End, MAX_KEPT, Pending};
use pith_ledger::Report;

/// The event types that end a response.
const LAST_EVENTS: &[&str] = &[
    "response.completed",
    "response.failed",
    "response.incomplete",
    "error",
];

/// Why the stages did not run on a create (its row's reports say so, one per stage).
pub(super) mod reason {
    /// It chains to an answer the socket's transcript does not hold (past its bound, or a
    /// chain begun elsewhere): the conversation is not known, so the frame went up as it came.
    pub const TRANSCRIPT_NOT_HELD: &str = "transcript_not_held";
    /// A rewriter would have to read the answer, and a socket's answers are not rewritten.
    pub const ANSWER_NOT_REWRITTEN: &str = "answer_not_rewritten_on_a_socket";
    /// The body the stages made does not read back as a request: the client's own went up.
    pub const EDIT_UNREADABLE: &str = "edit_unreadable";

    /// What they are called for people.
    pub const WORDS: &[(&str, &str)] = &[
        (
            TRANSCRIPT_NOT_HELD,
            "the socket's earlier turns were not held, so the frame went up as it came",
        ),
        (
            ANSWER_NOT_REWRITTEN,
            "the change needs an answer rewritten, which a socket's answers are not",
        ),
        (
            EDIT_UNREADABLE,
            "the changed body did not read back, so the client's own went up",
        ),
    ];
}

/// The method a socket's request is recorded with.
pub(super) const METHOD: &str = "WEBSOCKET";

/// What to do with a frame the client sent.
pub(super) enum FromClient {
    /// Send this upstream; `None`: the frame as it came.
    Forward(Option<String>),
    /// pith answered: send the client these events, nothing upstream.
    Answer(Vec<String>),
}

/// What to do with a frame the provider sent.
pub(super) enum FromUpstream {
    /// Hand it to the client.
    Pass,
    /// The provider refused what pith changed: the client never sees this refusal, and this
    /// (the client's own request) goes up instead.
    Resend(String),
}

/// The requests of one socket, each recorded when its last event arrives (or the socket ends).
pub(super) struct Turns {
    state: Arc<State>,
    /// The upgrade's headers: each request's, the same for every request on the socket.
    headers: HeaderMap,
    /// The account the socket's requests belong to.
    account: String,
    /// The session the headers name.
    session: Option<String>,
    /// The upgrade's path (`/v1/responses`, or the ChatGPT backend's).
    path: String,
    open: Option<Turn>,
    transcript: Transcript,
}

struct Turn {
    /// Its record, built when it went up (so a crash mid-answer still leaves a row).
    pending: Option<Pending>,
    /// What the stages reported, kept to be rewritten if the provider refuses their change.
    reports: Vec<StageReport>,
    /// The conversation, when the transcript knows it.
    conversation: Option<Conversation>,
    /// The whole input the provider takes, when it is not the client's.
    upstream_items: Option<Arc<Vec<String>>>,
    /// pith changed what went up: if the provider refuses it, the client's own conversation
    /// goes up instead, whole (a refused turn evicts the answer it chained to).
    changed: bool,
    /// The items of the answer's `response.output_item.done` events, by output index.
    done: Vec<(u64, String)>,
    /// The provider refused the changed request with this; the client's own went up.
    refused: Option<(StatusCode, String)>,
    events: usize,
    started: Instant,
    chunks: Vec<Bytes>,
    bytes: u64,
    truncated: bool,
    ttfb_ms: Option<f64>,
    status: u16,
}

/// A frame's `type`, and an error event's `status`.
fn event_type(text: &str) -> (String, Option<u16>) {
    #[derive(serde::Deserialize)]
    struct Typed {
        #[serde(rename = "type")]
        kind: Option<String>,
        status: Option<u16>,
    }
    serde_json::from_str::<Typed>(text)
        .ok()
        .map(|t| (t.kind.unwrap_or_default(), t.status))
        .unwrap_or_default()
}

/// A `response.output_item.done` event's output index and item, raw.
fn done_item(text: &str) -> Option<(u64, String)> {
    #[derive(serde::Deserialize)]
    struct Done<'a> {
        #[serde(default)]
        output_index: u64,
        #[serde(borrow)]
        item: &'a serde_json::value::RawValue,
    }
    let done: Done<'_> = serde_json::from_str(text).ok()?;
    Some((done.output_index, done.item.get().to_owned()))
}

/// An event as the same answer over HTTP would have streamed it.
fn sse_chunk(kind: &str, text: &str) -> Bytes {
    Bytes::from(format!("event: {kind}\ndata: {text}\n\n"))
}

impl Turns {
    pub(super) fn new(
        state: Arc<State>,
        headers: &HeaderMap,
        path: &str,
        account: String,
    ) -> Turns {
        Turns {
            state,
            path: path.to_owned(),
            headers: headers.clone(),
            account,
            session: pith_wire::session::session_from_headers(headers),
            open: None,
            transcript: Transcript::default(),
        }
    }

    /// A request of this socket, arriving now, with `body`.
    fn context(&self, body: Bytes) -> Context {
        let mut ctx = socket_context(
            &self.state,
            &self.headers,
            &self.path,
            &self.account,
            METHOD,
        );
        ctx.body = body;
        // Its answer is recorded as the stream of a POST would be.
        ctx.response_is_sse = true;
        ctx
    }

    /// Whether a request is waiting for its answer.
    pub(super) fn is_open(&self) -> bool {
        self.open.is_some()
    }

    /// A text frame from the client: a `response.create` is a request, through the phases.
    pub(super) async fn client_sent(&mut self, text: &str) -> FromClient {
        if event_type(text).0 != "response.create" {
            return FromClient::Forward(None);
        }
        if self.open.is_some() {
            // A new request before the last one ended: the last one is cut, and whatever the
            // provider still sends for it would be read as this one's, so neither side's chain
            // is known any more.
            self.transcript.forget();
            self.close(End::ClientGone, None);
        }
        let mut ctx = self.context(Bytes::copy_from_slice(text.as_bytes()));
        let create = Create::read(text);
        let previous = create
            .as_ref()
            .and_then(|c| c.previous().map(str::to_owned));
        let conversation = create.and_then(|c| self.transcript.conversation(c));
        if conversation.is_none()
            && let Some(previous) = previous
        {
            self.transcript.forget();
            if previous.starts_with(reply::LOCAL_RESPONSE_ID_PREFIX) {
                // pith's own id, from an answer this socket does not hold: no provider holds
                // it either, so it never goes up.
                return self.not_held(ctx, &previous);
            }
            unchanged_all_stages(&self.state, &mut ctx, reason::TRANSCRIPT_NOT_HELD);
        }
        let mut upstream_items = None;
        let mut forward = None;
        if let Some(conversation) = &conversation {
            if !conversation.warm_up {
                ctx.whole_prompt = Some(Bytes::from(conversation.body()));
                if let Some(answer) = request::local_answer(&self.state, &mut ctx) {
                    return self.answer(ctx, conversation, &answer);
                }
                request::transform(&self.state, &mut ctx).await;
                if self.state.config.rewrites.as_ref().is_some_and(|r| {
                    r.reads_answer(Wire::Responses, &ctx.transforms) && ctx.upstream_body.is_some()
                }) {
                    unchanged_all(&mut ctx, reason::ANSWER_NOT_REWRITTEN);
                }
            }
            if let Some(up) = self.upstream(&mut ctx, conversation) {
                forward = up.frame;
                upstream_items = up.items;
            }
        }
        ctx.bytes_upstream = forward.as_ref().map_or(text.len(), String::len) as u64;
        self.open_turn(&mut ctx, conversation, upstream_items);
        FromClient::Forward(forward)
    }

    /// What goes up for `conversation`: the stages' body, relative to what the provider
    /// holds, or the client's own when that body does not read back.
    fn upstream(&mut self, ctx: &mut Context, conversation: &Conversation) -> Option<Upstream> {
        let sent = ctx
            .upstream_body
            .as_deref()
            .and_then(|b| std::str::from_utf8(b).ok());
        match self.transcript.upstream(conversation, sent) {
            Some(up) => Some(up),
            None => {
                // The stages' body does not read back: the client's own goes up.
                unchanged_all(ctx, reason::EDIT_UNREADABLE);
                self.transcript.upstream(conversation, None)
            }
        }
    }

    /// The request `ctx` went up: it is the open one now, its record announced in the spool
    /// (so a crash mid-answer still leaves a row).
    fn open_turn(
        &mut self,
        ctx: &mut Context,
        conversation: Option<Conversation>,
        upstream_items: Option<Arc<Vec<String>>>,
    ) {
        let changed = ctx.upstream_body.is_some();
        let reports = ctx.transforms.clone();
        let started = ctx.started;
        let pending = ctx.take_pending(RequestOutcome::Ok);
        if let Some(p) = &pending {
            p.recorder.sink.opened(&p.record);
        }
        self.open = Some(Turn {
            pending,
            reports,
            conversation,
            upstream_items,
            changed,
            refused: None,
            done: Vec::new(),
            events: 0,
            started,
            chunks: Vec::new(),
            bytes: 0,
            truncated: false,
            ttfb_ms: None,
            status: 200,
        });
    }

    /// A create chained to pith's own answer of another socket (or one forgotten): answered by
    /// pith with the service's own `previous_response_not_found`, on which Codex reconnects and
    /// sends its whole input.
    fn not_held(&mut self, mut ctx: Context, previous: &str) -> FromClient {
        let event = serde_json::json!({"type": "error", "status": 400, "error": {
            "type": "invalid_request_error", "code": "previous_response_not_found",
            "message": format!(
                "pith: previous response '{previous}' is one of pith's own answers, which this \
                 socket does not hold; send the whole input again"),
            "param": "previous_response_id"}})
        .to_string();
        ctx.status = Some(StatusCode::BAD_REQUEST);
        ctx.bytes_upstream = 0;
        if let Some(mut pending) = ctx.take_pending(RequestOutcome::ClientError) {
            let chunk = sse_chunk("error", &event);
            pending.record.response_bytes = chunk.len() as u64;
            pending.record.response_chunks = vec![chunk];
            pending.finish(
                End::Complete,
                Some("chained to pith's own answer, not held on this socket".to_owned()),
            );
        }
        FromClient::Answer(vec![event])
    }

    /// pith's own answer to a turn of pin commands: its events, recorded as `local`; the
    /// client's chain now ends with it, the provider's does not.
    fn answer(
        &mut self,
        mut ctx: Context,
        conversation: &Conversation,
        answer: &pith_transform::LocalAnswer,
    ) -> FromClient {
        let id = request::short_id(&ctx.body);
        let events = reply::responses_events(&reply::LocalReply {
            text: &answer.text,
            model: &answer.model,
            stream: true,
            include_usage: false,
            id: &id,
            created: u64::try_from(ctx.ts_ms / 1000).unwrap_or(0),
        });
        if let Some(completed) = events.last() {
            self.transcript.pith_completed(conversation, completed);
        }
        ctx.status = Some(StatusCode::OK);
        ctx.response_is_sse = true;
        ctx.bytes_upstream = 0;
        if let Some(mut pending) = ctx.take_pending(RequestOutcome::Local) {
            // The frame and the conversation's facts, as pith's answer over HTTP is recorded
            // (its size, not its events: they list the pins, which the conversation holds, and
            // bill nothing): what a turn that went nowhere spools is bounded by its frame, not
            // by the conversation the socket holds.
            pith_ledger::keep_conversation_facts(&mut pending.record);
            pending.record.response_bytes = events
                .iter()
                .map(|e| sse_chunk(&event_type(e).0, e).len() as u64)
                .sum();
            pending.record.ttfb_ms = Some(0.0);
            pending.finish(End::Complete, None);
        }
        FromClient::Answer(events)
    }

    /// A text frame from the provider, answering the open request.
    pub(super) fn upstream_sent(&mut self, text: &str) -> FromUpstream {
        let Some(turn) = self.open.as_mut() else {
            return FromUpstream::Pass;
        };
        let (kind, status) = event_type(text);
        let refusal = (kind == "error")
            .then(|| status.and_then(|s| StatusCode::from_u16(s).ok()))
            .flatten()
            .filter(|s| last_check::is_refusal(*s));
        if turn.events == 0 {
            if let Some(status) = refusal.filter(|_| turn.changed)
                && let Some(conversation) = &turn.conversation
            {
                let as_sent = Transcript::whole(conversation);
                turn.changed = false;
                turn.refused = Some((status, last_check::message_of(text.as_bytes())));
                turn.upstream_items = None;
                if let Some(p) = turn.pending.as_mut() {
                    p.record.upstream_body = None;
                    p.record.bytes_upstream = as_sent.len() as u64;
                }
                return FromUpstream::Resend(as_sent);
            }
            if let Some((status, message)) = turn.refused.take() {
                last_check::settle(
                    &self.state.refused,
                    &self.state.transform_failures,
                    self.session.as_deref(),
                    &mut turn.reports,
                    status,
                    &message,
                    refusal.is_some(),
                );
                if let Some(p) = turn.pending.as_mut() {
                    p.record.transforms = turn.reports.iter().map(Report::from).collect();
                }
            }
        }
        turn.events += 1;
        turn.ttfb_ms
            .get_or_insert_with(|| turn.started.elapsed().as_secs_f64() * 1000.0);
        // Kept up to the HTTP path's bound: past it the answer still passes, and the row says
        // it was too large to keep.
        let chunk = sse_chunk(&kind, text);
        turn.bytes += chunk.len() as u64;
        if turn.bytes <= MAX_KEPT {
            turn.chunks.push(chunk);
        } else if !turn.truncated {
            turn.truncated = true;
            turn.chunks = Vec::new();
        }
        if let Some(status) = status.filter(|_| kind == "error") {
            turn.status = status;
        }
        if kind == "response.output_item.done"
            && let Some((index, item)) = done_item(text)
        {
            turn.done.push((index, item));
        }
        if kind == "response.completed" {
            match &turn.conversation {
                Some(c) => self.transcript.provider_completed(
                    c,
                    turn.upstream_items.as_ref(),
                    text,
                    &turn.done,
                ),
                None => self.transcript.forget(),
            }
        }
        if LAST_EVENTS.contains(&kind.as_str()) {
            self.close(End::Complete, None);
        }
        FromUpstream::Pass
    }

    /// Record the open request, if any, as ended by `end` (with pith's `error`).
    pub(super) fn close(&mut self, end: End, error: Option<String>) {
        let Some(mut turn) = self.open.take() else {
            return;
        };
        let Some(mut pending) = turn.pending else {
            return;
        };
        if let Some((status, message)) = turn.refused.take() {
            last_check::unanswered_resend(
                &self.state.transform_failures,
                &mut turn.reports,
                status,
                &message,
            );
            pending.record.transforms = turn.reports.iter().map(Report::from).collect();
        }
        let record = &mut pending.record;
        record.status = Some(turn.status);
        record.response_chunks = turn.chunks;
        record.response_bytes = turn.bytes;
        record.response_truncated = turn.truncated;
        record.ttfb_ms = turn.ttfb_ms;
        pending.finish(end, error);
    }

    /// Record a frame the client sent that pith could not take (too large), as one request
    /// pith answered itself.
    pub(super) fn refused_frame(&mut self, status: StatusCode, error: String) {
        self.close(End::ClientGone, None);
        let mut ctx = self.context(Bytes::new());
        ctx.status = Some(status);
        if let Some(pending) = ctx.take_pending(RequestOutcome::ClientError) {
            pending.finish(End::Complete, Some(error));
        }
    }
}

/// Every stage of the pipeline left the request alone, for `why` (none ran).
fn unchanged_all_stages(state: &State, ctx: &mut Context, why: &'static str) {
    ctx.transforms = state
        .config
        .pipeline
        .stage_names()
        .into_iter()
        .map(|stage| StageReport {
            stage,
            result: StageResult::Unchanged(why),
        })
        .collect();
}

/// Every stage of the request left it unchanged, for `why`: the client's own goes up.
fn unchanged_all(ctx: &mut Context, why: &'static str) {
    ctx.upstream_body = None;
    ctx.transforms_header = None;
    for report in &mut ctx.transforms {
        if matches!(report.result, StageResult::Applied(_)) {
            report.result = StageResult::Unchanged(why);
        }
    }
}

/// A request of the socket `headers` opened, for `account`, arriving now.
fn socket_context(
    state: &State,
    headers: &HeaderMap,
    path: &str,
    account: &str,
    method: &str,
) -> Context {
    let method = Method::from_bytes(method.as_bytes()).unwrap_or(Method::GET);
    let mut ctx = Context::new(
        method,
        path.to_owned(),
        path.to_owned(),
        headers.clone(),
        account.to_owned(),
        request::recorder(state),
    );
    ctx.wire = Some(Wire::Responses);
    ctx.provider = Provider::OpenAi;
    ctx
}

/// The row of an upgrade that opened no socket: the upstream's refusal (its status), or pith's
/// own answer when the upstream could not be reached or asked.
pub(super) fn refused_upgrade(
    state: &State,
    headers: &HeaderMap,
    path: &str,
    account: &str,
    status: StatusCode,
    outcome: RequestOutcome,
    error: Option<String>,
) {
    let mut ctx = socket_context(state, headers, path, account, "GET");
    ctx.status = Some(status);
    if let Some(pending) = ctx.take_pending(outcome) {
        pending.finish(End::Complete, error);
    }
}
